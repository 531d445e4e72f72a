"""The consumer's Fetcher on its own, against fake leaders (no Consumer, no Ray): one fetch
in flight per partition and reads-ahead, the drain and the positions it moves, errors in
answers, stale answers after a seek, throttling, and KIP-320's check after a leader change."""

from __future__ import annotations

import time

import pytest
from ray.exceptions import RayActorError

from raylog import metrics
from raylog.clients.consumer.fetcher import BUFFERED_FETCHES, Fetcher
from raylog.clients.consumer.offset_fetcher import OffsetFetcher
from raylog.clients.consumer.subscription_state import SubscriptionState
from raylog.common import record_batch
from raylog.common.requests import READ_COMMITTED
from raylog.errors import (
    LogTruncationError,
    NoOffsetForPartitionError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    TopicAuthorizationFailedError,
)
from raylog.protocol import FetchResponse
from raylog.types import TopicPartition
from tests.unit.clients.consumer_fakes import (
    FakeCluster,
    FakeLeader,
    failed_fetch,
    small_batches,
    stamped,
)

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)

pytestmark = pytest.mark.usefixtures("fake_ray")


def fetcher_of(*leaders: FakeLeader, reset: str = "earliest", group_id: str | None = None, **config):
    """A fetcher of every partition of the fake cluster, each at offset 0."""
    cluster = FakeCluster(*leaders)
    session = cluster.session()
    subscriptions = SubscriptionState(reset)
    settings = {
        "fetch_min_bytes": 1,
        "fetch_max_wait_ms": 500,
        "max_partition_fetch_bytes": 8 << 20,
        "fetch_max_bytes": 50 << 20,
        "check_crcs": True,
        "client_id": "me",
    }
    settings.update(config)
    offsets = OffsetFetcher(cluster, session, 1.0, READ_COMMITTED)
    fetcher = Fetcher(cluster, session, subscriptions, offsets, settings, READ_COMMITTED, group_id)
    fetcher.reassign([TopicPartition("t", p) for p in range(len(leaders))])
    for tp in subscriptions.assignment:
        fetcher.seek(tp, 0)
    return cluster, subscriptions, fetcher


def answered(fetcher: Fetcher) -> None:
    """Send the fetches due and take their answers."""
    fetcher.send_fetches()
    fetcher.await_answers(1.0, [], 0.0)


def offsets_of(drained) -> dict[TopicPartition, list[int]]:
    return {tp: table.column("offset").to_pylist() for tp, table, _ in drained}


def test_one_fetch_in_flight_per_partition_and_the_next_reads_ahead_up_to_the_buffer_bound():
    # max_partition_fetch_bytes=1: each answer is one batch of 4 records (a leader answers at least one).
    leader = FakeLeader(small_batches(5, 4))
    _, subscriptions, fetcher = fetcher_of(leader, max_partition_fetch_bytes=1)
    leader.hold = True
    fetcher.send_fetches()
    fetcher.send_fetches()
    assert [r.offset for r in leader.requests] == [0]  # one in flight
    assert leader.requests[0].max_wait_ms == 0  # the first: no long poll, so that the answer tells
    leader.refs[0].ready, leader.hold = True, False
    for _ in range(BUFFERED_FETCHES + 1):
        answered(fetcher)
    assert [r.offset for r in leader.requests] == [0, 4]  # two answers buffered: no third fetch
    assert len(fetcher.buffers[T0]) == BUFFERED_FETCHES and subscriptions.next_fetch[T0] == 8
    assert fetcher.bytes_used() == sum(b.nbytes for b in fetcher.buffers[T0])
    assert offsets_of(fetcher.drain(100)) == {T0: [0, 1, 2, 3]}  # one answer a partition per drain
    assert subscriptions.positions[T0] == 4
    fetcher.send_fetches()
    assert [r.offset for r in leader.requests] == [0, 4, 8]
    assert leader.requests[-1].client_id == "me" and leader.requests[-1].isolation_level == READ_COMMITTED


def test_drain_bounds_records_skips_paused_partitions_and_moves_positions():
    leaders = FakeLeader(small_batches(1, 6)), FakeLeader(small_batches(1, 6))
    _, subscriptions, fetcher = fetcher_of(*leaders)
    answered(fetcher)
    subscriptions.paused.add(T1)
    assert offsets_of(fetcher.drain(4)) == {T0: [0, 1, 2, 3]}
    assert subscriptions.positions == {T0: 4, T1: 0}
    subscriptions.paused.clear()
    assert offsets_of(fetcher.drain(8)) == {T1: [0, 1, 2, 3, 4, 5], T0: [4, 5]}  # (T1 was fetched first)
    assert subscriptions.positions == {T0: 6, T1: 6}
    assert T0 not in fetcher.buffers and fetcher.drain(0) == []


def test_the_position_moves_past_batches_skipped_after_the_last_record():
    """A marker after the last record: handing out the last record moves the position past it."""
    batches = [record_batch.build([b"a", b"b"], now_ms=1), record_batch.build_marker(7, 0, True, 0, now_ms=1)]
    _, subscriptions, fetcher = fetcher_of(FakeLeader(stamped(batches)))
    answered(fetcher)
    assert offsets_of(fetcher.drain(1)) == {T0: [0]} and subscriptions.positions[T0] == 1
    assert offsets_of(fetcher.drain(5)) == {T0: [1]} and subscriptions.positions[T0] == 3


def test_a_fetch_of_only_skipped_batches_moves_the_position_without_records():
    leader = FakeLeader(stamped([record_batch.build_marker(7, 0, False, 0, now_ms=1)]))
    _, subscriptions, fetcher = fetcher_of(leader)
    answered(fetcher)
    assert fetcher.buffers == {} and subscriptions.positions[T0] == 1


def test_an_offset_out_of_range_resets_the_position_by_auto_offset_reset():
    leader = FakeLeader(small_batches(4, 5))
    leader.log_start = 10
    leader.answers = [failed_fetch(OffsetOutOfRangeError("deleted"))]
    _, subscriptions, fetcher = fetcher_of(leader)
    answered(fetcher)
    assert subscriptions.positions[T0] == 10
    answered(fetcher)
    assert leader.requests[-1].offset == 10 and offsets_of(fetcher.drain(100))[T0][0] == 10

    leader.answers = [failed_fetch(OffsetOutOfRangeError("deleted"))]
    _, _, strict = fetcher_of(leader, reset="none")
    with pytest.raises(NoOffsetForPartitionError):
        answered(strict)


@pytest.mark.parametrize(
    "answer", [failed_fetch(NotLeaderOrFollowerError("moved")), RayActorError()], ids=["not-leader", "actor-died"]
)
def test_retriable_failures_refresh_the_metadata_and_fetch_again(answer):
    leader = FakeLeader(small_batches(1, 3))
    leader.answers = [answer]
    cluster, subscriptions, fetcher = fetcher_of(leader)
    answered(fetcher)
    assert cluster.refreshes == 1 and fetcher.buffers == {} and subscriptions.positions[T0] == 0
    answered(fetcher)
    assert [r.offset for r in leader.requests] == [0, 0] and offsets_of(fetcher.drain(10)) == {T0: [0, 1, 2]}


def test_an_error_that_is_not_retriable_is_raised():
    leader = FakeLeader(small_batches(1, 3))
    leader.answers = [failed_fetch(TopicAuthorizationFailedError("no"))]
    _, _, fetcher = fetcher_of(leader)
    with pytest.raises(TopicAuthorizationFailedError):
        answered(fetcher)


def test_an_answer_for_an_offset_sought_away_from_is_dropped():
    leader = FakeLeader(small_batches(3, 4))
    _, subscriptions, fetcher = fetcher_of(leader)
    leader.hold = True
    fetcher.send_fetches()
    fetcher.seek(T0, 8)
    fetcher.send_fetches()  # the seek does not wait for the fetch in flight
    assert [r.offset for r in leader.requests] == [0, 8]
    leader.refs[0].ready = True
    fetcher.await_answers(0.0, [], 0.0)
    assert fetcher.buffers == {} and subscriptions.fetch_offset(T0) == 8
    leader.refs[1].ready = True
    fetcher.await_answers(0.0, [], 0.0)
    assert offsets_of(fetcher.drain(100)) == {T0: [8, 9, 10, 11]}


def test_a_throttled_partition_waits_out_its_throttle_time(monkeypatch):
    recorded = []
    monkeypatch.setattr(metrics, "record_throttle", lambda *args: recorded.append(args))
    leader = FakeLeader(small_batches(3, 4))
    leader.answers = [FetchResponse(throttle_time_ms=100, high_watermark=12, last_stable_offset=12)]
    _, _, fetcher = fetcher_of(leader)
    answered(fetcher)
    assert fetcher.throttle_time_ms == 100 and recorded == [("consumer", "me", 100)]
    fetcher.send_fetches()
    assert len(leader.requests) == 1  # held back
    start = time.monotonic()
    assert fetcher.await_answers(1.0, [], float("inf"))  # sleeps until the throttle passed
    assert time.monotonic() - start >= 0.05
    fetcher.send_fetches()
    assert len(leader.requests) == 2


def test_nothing_to_wait_for_returns_at_once():
    _, _, fetcher = fetcher_of(FakeLeader(small_batches(1, 1)))
    assert fetcher.await_answers(5.0, [], float("inf")) is False


def test_group_members_record_their_lag(monkeypatch):
    lags = []
    monkeypatch.setattr(metrics, "record_consumer_lag", lambda *args: lags.append(args))
    _, _, fetcher = fetcher_of(FakeLeader(small_batches(3, 4)), group_id="g", max_partition_fetch_bytes=1)
    answered(fetcher)
    assert lags == [("g", "t", 0, 8)]


def read_under_epoch_0(leader: FakeLeader, reset: str = "earliest"):
    """A fetcher that read offsets 0..7 (written under leader epoch 0); the cluster then elects
    a new leader (epoch 1)."""
    cluster, subscriptions, fetcher = fetcher_of(leader, reset=reset)
    answered(fetcher)
    assert offsets_of(fetcher.drain(8)) == {T0: list(range(8))}
    assert subscriptions.fetched_epochs[T0] == 0 and subscriptions.validated_epochs[T0] == 0
    cluster.set_epoch(1)
    return cluster, subscriptions, fetcher


def test_after_a_leader_change_a_truncated_log_is_read_again_from_where_it_diverged():
    leader = FakeLeader(small_batches(2, 4))
    _, subscriptions, fetcher = read_under_epoch_0(leader)
    leader.epoch_ends[0] = (0, 6)  # the new leader's epoch 0 ends at 6: 6 and 7 were lost
    fetcher.send_fetches()
    assert leader.epoch_queries == [0]
    assert subscriptions.positions[T0] == 6 and leader.requests[-1].offset == 6
    assert leader.requests[-1].current_leader_epoch == 1 and subscriptions.validated_epochs[T0] == 1


def test_after_a_leader_change_a_log_not_truncated_is_read_on():
    leader = FakeLeader(small_batches(2, 4))
    _, subscriptions, fetcher = read_under_epoch_0(leader)
    fetcher.send_fetches()
    assert leader.epoch_queries == [0] and subscriptions.positions[T0] == 8
    fetcher.send_fetches()
    assert leader.epoch_queries == [0]  # checked once per epoch


def test_a_truncation_with_auto_offset_reset_none_raises():
    leader = FakeLeader(small_batches(2, 4))
    _, subscriptions, fetcher = read_under_epoch_0(leader, reset="none")
    leader.epoch_ends[0] = (0, 6)
    for _ in range(2):  # every poll, until the application seeks
        with pytest.raises(LogTruncationError, match="diverged at offset 6"):
            fetcher.send_fetches()
    assert subscriptions.positions[T0] == 8 and leader.requests[-1].offset == 0
    fetcher.seek(T0, 6)
    fetcher.send_fetches()
    assert leader.requests[-1].offset == 6 and subscriptions.validated_epochs[T0] == 1


def test_a_failed_epoch_query_refreshes_the_metadata_and_fetches_nothing_yet():
    leader = FakeLeader(small_batches(2, 4))
    cluster, subscriptions, fetcher = read_under_epoch_0(leader)
    requests = len(leader.requests)
    leader.epoch_error = NotLeaderOrFollowerError.code
    refreshes = cluster.refreshes
    fetcher.send_fetches()
    assert len(leader.requests) == requests and cluster.refreshes == refreshes + 1
    assert subscriptions.validated_epochs[T0] == 0
