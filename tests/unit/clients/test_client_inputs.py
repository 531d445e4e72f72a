"""Clients refuse bad names and sizes with a typed error before they send anything (no Ray runtime)."""

from __future__ import annotations

import pytest

from raylog.clients.consumer import MAX_FETCH_BYTES, Consumer, fetch_ask
from raylog.clients.producer import Producer
from raylog.common.requests import MAX_READ_BYTES
from raylog.errors import InvalidConfigError, InvalidTopicError
from raylog.types import TopicPartition
from tests.unit.clients.test_producer_limits import TOPIC


class NoCluster:
    """A cluster any use of which fails the test: the checks must come first."""

    def __getattr__(self, name):
        raise AssertionError(f"the client used the cluster ({name}) before checking its input")


@pytest.mark.parametrize("client_id", [None, 7, "x" * 40_000])
def test_bad_client_ids_are_refused_by_both_clients(client_id):
    """A client id that is not a protocol string: InvalidConfigError from Producer and Consumer."""
    with pytest.raises(InvalidConfigError):
        Producer(NoCluster(), client_id=client_id)
    with pytest.raises(InvalidConfigError):
        Consumer(NoCluster(), client_id=client_id)


@pytest.mark.parametrize(
    "options",
    [
        {"max_partition_fetch_bytes": 0},
        {"max_partition_fetch_bytes": MAX_READ_BYTES + 1},
        {"fetch_max_bytes": 0},
        {"fetch_max_bytes": MAX_FETCH_BYTES + 1},
        {"fetch_max_bytes": 1.5},
        {"max_partition_fetch_bytes": True},
    ],
)
def test_fetch_sizes_are_bounded(options):
    """max_partition_fetch_bytes in [1, MAX_READ_BYTES], fetch_max_bytes in [1, 2**31 - 1], integers."""
    with pytest.raises(InvalidConfigError):
        Consumer(NoCluster(), **options)


def test_a_long_poll_asks_its_partitions_share_of_fetch_max_bytes():
    """A caught-up partition's long poll asks its share of fetch_max_bytes among the partitions
    assigned (as partitions share one Kafka fetch request), at most max_partition_fetch_bytes."""
    consumer = Consumer(NoCluster(), fetch_max_bytes=1_000)
    assert consumer._fetcher.max_bytes() == 1_000
    consumer._subscriptions.assignment = [TopicPartition("t", p) for p in range(4)]
    assert consumer._fetcher.max_bytes() == 250
    many = Consumer(NoCluster(), max_partition_fetch_bytes=8 << 20, fetch_max_bytes=50 << 20)
    many._subscriptions.assignment = [TopicPartition("t", p) for p in range(256)]
    assert many._fetcher.max_bytes() * 256 <= 50 << 20
    many._subscriptions.assignment = many._subscriptions.assignment[:2]
    assert many._fetcher.max_bytes() == 8 << 20
    assert Consumer(NoCluster(), max_partition_fetch_bytes=500)._fetcher.max_bytes() == 500


def test_fetches_of_partitions_with_records_share_fetch_max_bytes_in_turn():
    """Partitions with records to read are fetched while fetch_max_bytes lasts, counting what is buffered and
    what fetches in flight will bring (at least a batch each, as large as the partition's last answer); one
    fetch always goes when nothing is used, as Kafka answers at least one batch per request."""
    mib = 1 << 20
    assert fetch_ask(0, 50 * mib, 8 * mib, 0) == (8 * mib, 8 * mib)
    assert fetch_ask(0, 50 * mib, 8 * mib, 20 * mib) == (8 * mib, 20 * mib)  # a large batch comes whole
    assert fetch_ask(0, 1 * mib, 8 * mib, 20 * mib) == (1 * mib, 20 * mib)  # nothing used: it goes anyway
    assert fetch_ask(45 * mib, 50 * mib, 8 * mib, 0) == (5 * mib, 5 * mib)  # asks what is left
    assert fetch_ask(45 * mib, 50 * mib, 8 * mib, 6 * mib) is None  # its batch would pass the limit
    assert fetch_ask(50 * mib, 50 * mib, 8 * mib, 0) is None
    used, fetched = 0, 0
    for _ in range(128):  # 128 partitions of 6 MiB batches, each asked 8 MiB: 6 at a time, not 128
        plan = fetch_ask(used, 50 * mib, 8 * mib, 6 * mib)
        if plan is not None:
            used, fetched = used + plan[1], fetched + 1
    assert fetched == 6 and used <= 50 * mib


@pytest.mark.parametrize("name", ["", "a b", "..", "x" * 250])
def test_consumers_refuse_illegal_topic_names_before_any_call(name):
    """Topics given to the constructor, assign() or subscribe() are checked before the cluster is asked."""
    with pytest.raises(InvalidTopicError):
        Consumer(NoCluster(), name)
    with pytest.raises(InvalidTopicError):
        Consumer(NoCluster()).assign([(name, 0)])
    with pytest.raises(InvalidTopicError):
        Consumer(NoCluster(), group_id="g").subscribe([name])
    with pytest.raises(TypeError):
        Consumer(NoCluster(), group_id="g").subscribe(TOPIC)  # a string, not a list of names
