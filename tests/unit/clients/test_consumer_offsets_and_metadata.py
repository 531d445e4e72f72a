"""The consumer's offset look-ups (OffsetFetcher, list_offset(s)), its view of the metadata
(ConsumerMetadata) and its settings' checks, against fake leaders (no Ray)."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest

from raylog.clients.consumer import Consumer, consumer_config, offset_fetcher
from raylog.clients.consumer.consumer_metadata import ConsumerMetadata
from raylog.clients.consumer.offset_fetcher import OffsetFetcher, list_offset, list_offsets
from raylog.clients.consumer.subscription_state import SubscriptionState
from raylog.common.requests import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, READ_COMMITTED
from raylog.errors import (
    InvalidConfigError,
    NotLeaderOrFollowerError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)
from raylog.protocol import ListOffsetsResponse, error_fields
from raylog.types import OffsetAndTimestamp, TopicPartition
from tests.unit.clients.consumer_fakes import FakeCluster, FakeLeader, FakeRef, small_batches

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)

pytestmark = pytest.mark.usefixtures("fake_ray")


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch):
    monkeypatch.setattr(offset_fetcher, "LIST_OFFSETS_BACKOFF_S", 0.001)


def failing_first(leader: FakeLeader, *errors: Exception) -> list:
    """``leader``'s offset look-ups answer ``errors`` first; the asks are recorded."""
    asks, answer = [], leader.list_offsets.remote

    def remote(timestamp, epoch, isolation, session=None):
        asks.append((timestamp, epoch, isolation))
        if len(asks) <= len(errors):
            return FakeRef(ListOffsetsResponse(**error_fields(errors[len(asks) - 1])))
        return answer(timestamp, epoch, isolation, session)

    leader.list_offsets.remote = remote
    return asks


def test_many_partitions_are_asked_at_once_and_a_failed_one_again_on_its_own():
    leaders = FakeLeader(small_batches(1, 5)), FakeLeader(small_batches(2, 5))
    asks = failing_first(leaders[1], NotLeaderOrFollowerError("moving"))
    cluster = FakeCluster(*leaders, epoch=4)
    found = list_offsets(cluster, [T0, T1], LATEST_TIMESTAMP, 1.0, READ_COMMITTED)
    assert found == {T0: OffsetAndTimestamp(5, -1), T1: OffsetAndTimestamp(10, -1)}
    assert asks == [(LATEST_TIMESTAMP, 4, READ_COMMITTED)] * 2  # with the leader epoch the metadata says


def test_a_look_up_retries_retriable_errors_until_its_timeout_and_raises_others_at_once():
    leader = FakeLeader(small_batches(1, 5))
    failing_first(leader, NotLeaderOrFollowerError("moving"), NotLeaderOrFollowerError("moving"))
    assert list_offset(FakeCluster(leader), T0, EARLIEST_TIMESTAMP, 5.0).offset == 0
    failing_first(leader, *[NotLeaderOrFollowerError("still moving")] * 1_000)
    with pytest.raises(NotLeaderOrFollowerError, match="still moving"):  # the last error, at the timeout
        list_offset(FakeCluster(leader), T0, EARLIEST_TIMESTAMP, 0.05)
    failing_first(leader, TopicAuthorizationFailedError("no"))
    with pytest.raises(TopicAuthorizationFailedError):
        list_offset(FakeCluster(leader), T0, EARLIEST_TIMESTAMP, 5.0)
    with pytest.raises(UnknownTopicOrPartitionError):
        list_offset(FakeCluster(leader), TopicPartition("t", 9), EARLIEST_TIMESTAMP, 5.0)


def test_the_offset_fetcher_answers_offsets_times_and_epoch_ends():
    leader = FakeLeader(small_batches(2, 5))
    leader.log_start = 2
    leader.epoch_ends[3] = (2, 7)
    cluster = FakeCluster(leader)
    offsets = OffsetFetcher(cluster, cluster.session(), 1.0, READ_COMMITTED)
    assert offsets.offsets_at([("t", 0)], EARLIEST_TIMESTAMP) == {T0: 2}
    assert offsets.offsets_for_times({("t", 0): 5}) == {T0: None}  # no record that recent
    with pytest.raises(ValueError):
        offsets.offsets_for_times({T0: -1})
    assert offsets.epoch_end(leader, 3) == (0, 2, 7) and leader.epoch_queries == [3]


def metadata_of(cluster: FakeCluster, subscribed=None, max_age_ms: int = 60_000) -> ConsumerMetadata:
    state = SubscriptionState("earliest")
    if subscribed is not None:
        state.subscribe(*subscribed)
    return ConsumerMetadata(cluster, state, max_age_ms)


def refusing(cluster: FakeCluster, refused: set[str]) -> FakeCluster:
    """``cluster`` saying that ``refused`` topics are the principal's to describe not."""

    def missing_topics_error(missing):
        if refused & set(missing):
            return TopicAuthorizationFailedError(f"may not describe {sorted(refused & set(missing))}")
        return UnknownTopicOrPartitionError(f"unknown {missing}")

    cluster.missing_topics_error = missing_topics_error
    return cluster


def test_partitions_of_named_topics_and_their_checks():
    cluster = refusing(FakeCluster(FakeLeader(), FakeLeader()), {"secret"})
    metadata = metadata_of(cluster)
    assert metadata.partitions_of(("t",)) == [T0, T1] and metadata.topics() == {"t"}
    assert metadata.partitions_for_topic("t") == {0, 1} and metadata.partitions_for_topic("nope") is None
    with pytest.raises(TopicAuthorizationFailedError):
        metadata.partitions_for_topic("secret")
    with pytest.raises(UnknownTopicOrPartitionError):
        metadata.partitions_of(("t", "nope"))
    metadata.check_partitions([T0, T1])
    with pytest.raises(UnknownTopicOrPartitionError, match="t-2"):
        metadata.check_partitions([TopicPartition("t", 2)])
    with pytest.raises(TopicAuthorizationFailedError):
        metadata.check_partitions([TopicPartition("secret", 0)])


def test_a_pattern_covers_matching_topics_but_internal_ones_and_refreshes_by_max_age():
    cluster = FakeCluster(FakeLeader())
    topics = cluster._metadata.topics
    topics["tt"] = SimpleNamespace(name="tt", partitions=[0, 1, 2])
    topics["__consumer_offsets"] = SimpleNamespace(name="__consumer_offsets", partitions=[0])
    metadata = metadata_of(cluster, (None, "t.*|__.*"), max_age_ms=60_000)
    assert metadata.subscribed_partition_counts() == {"t": 1, "tt": 3}
    assert metadata.subscribed_partition_counts() == {"t": 1, "tt": 3}
    assert cluster.refreshes == 1  # once per metadata_max_age_ms
    metadata.request_update()
    metadata.subscribed_partition_counts()
    assert cluster.refreshes == 2


def test_named_topics_the_principal_may_not_describe_are_left_out_and_raised_once():
    cluster = refusing(FakeCluster(FakeLeader()), {"secret"})
    metadata = metadata_of(cluster, (["t", "secret", "later"], None))
    assert metadata.subscribed_partition_counts() == {"t": 1}
    with pytest.raises(TopicAuthorizationFailedError, match="secret"):
        metadata.raise_refused()
    metadata.raise_refused()
    quiet = metadata_of(refusing(FakeCluster(FakeLeader()), set()), (["t", "later"], None))
    assert quiet.subscribed_partition_counts() == {"t": 1}
    quiet.raise_refused()  # a topic that does not exist yet is no error


def settings(**changes) -> dict:
    """The Consumer's defaults, as its constructor collects them."""
    parameters = inspect.signature(Consumer).parameters.values()
    config = {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}
    config.update(changes)
    return config


def test_check_config_answers_the_strategies_and_refuses_bad_settings():
    assert consumer_config.check_config(settings(), ()) == ("cooperative-sticky",)
    assert consumer_config.check_config(settings(partition_assignment_strategy=["range", "roundrobin"]), ()) == (
        "range",
        "roundrobin",
    )
    for bad in (
        {"isolation_level": "dirty"},
        {"fetch_max_wait_ms": -1},
        {"group_protocol": "zk"},
        {"heartbeat_interval_ms": 50_000},
        {"partition_assignment_strategy": []},
    ):
        with pytest.raises(InvalidConfigError):
            consumer_config.check_config(settings(**bad), ())
    assert consumer_config.check_config(settings(fetch_max_wait_ms=0), ("t",))
