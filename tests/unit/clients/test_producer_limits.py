"""The producer's size and header limits: a refused record fails alone, before anything is sent; batches always fit
the topic's max.message.bytes (an in-memory leader running the real Partition, no Ray runtime)."""

from __future__ import annotations

import concurrent.futures
import os

import pyarrow as pa
import pytest

from raylog.clients.cluster import Metadata
from raylog.clients.producer import Producer
from raylog.clients.security import ClientSession
from raylog.common import record_batch as rb
from raylog.config import TopicConfig
from raylog.coordination.partition import Partition
from raylog.errors import InvalidRecordError, InvalidTopicError, RecordTooLargeError
from raylog.protocol import ProduceResponse, error_fields
from raylog.storage.log import Log
from raylog.types import PartitionInfo, TopicDescription

TOPIC = "limits"
MAX_MESSAGE_BYTES = 8_192


class _Ref:
    def __init__(self, response: ProduceResponse):
        self._future: concurrent.futures.Future = concurrent.futures.Future()
        self._future.set_result(response)

    def future(self) -> concurrent.futures.Future:
        return self._future


class InMemoryLeader:
    """``leader.produce.remote(request)`` appending to a real Partition, as the replica actor does."""

    def __init__(self, partition: Partition):
        self.partition = partition
        self.produce = self
        self.requests: list[int] = []  # bytes of each produce request

    def remote(self, request) -> _Ref:
        self.requests.append(len(request.records))
        try:
            info = self.partition.append_as_leader(request.records, request.acks)
            return _Ref(ProduceResponse(base_offset=info.first_offset))
        except Exception as exc:  # noqa: BLE001 — every error travels back as a code
            return _Ref(ProduceResponse(**error_fields(exc)))


class InMemoryCluster:
    def __init__(self, leader: InMemoryLeader, config: dict):
        info = PartitionInfo(TOPIC, 0, 1, 1, (1,), (1,))
        self._metadata = Metadata(
            {
                "cluster_id": "c",
                "brokers": {},
                "topics": {TOPIC: TopicDescription(TOPIC, "id", (info,), config)},
                "leaders": {(TOPIC, 0): leader},
                "live": {1},
                "reassignments": {},
            }
        )

    def metadata(self, refresh: bool = False) -> Metadata:
        return self._metadata

    def session(self) -> ClientSession:
        return ClientSession(self, "PLAINTEXT")  # an anonymous client


@pytest.fixture
def setup(tmp_path):
    """``setup(**producer_options)`` -> (producer, leader) on a topic with max.message.bytes=8192."""
    made = []

    def make(**options):
        config = TopicConfig.from_properties({"max.message.bytes": str(MAX_MESSAGE_BYTES)})
        log = Log.open(str(tmp_path / f"log-{len(made)}"), config.log_config())
        partition = Partition(TOPIC, 0, 1, log, config)
        partition.become_leader(1, (1,), (1,))
        leader = InMemoryLeader(partition)
        cluster = InMemoryCluster(leader, config.to_properties())
        producer = Producer(cluster, acks=1, enable_idempotence=False, linger_ms=60_000, **options)
        made.append(producer)
        return producer, leader

    yield make
    for producer in made:
        producer.close(timeout=10)


def values_in_log(leader: InMemoryLeader) -> list[bytes]:
    log = leader.partition.log
    return rb.decode_table(log.read(0, 1 << 30)).column("value").to_pylist() if log.log_end_offset else []


def test_a_record_too_large_for_the_topic_fails_alone_before_it_is_sent(setup):
    """A record that cannot fit max.message.bytes raises RecordTooLargeError at send; its neighbours go through."""
    producer, leader = setup()
    before = producer.send(TOPIC, b"before")
    with pytest.raises(RecordTooLargeError):
        producer.send(TOPIC, b"x" * MAX_MESSAGE_BYTES)
    after = producer.send(TOPIC, b"after")
    producer.flush(timeout=10)
    assert (before.result(0).offset, after.result(0).offset) == (0, 1)
    assert values_in_log(leader) == [b"before", b"after"]


@pytest.mark.parametrize("compression", [None, "lz4", "zstd"])
def test_batches_close_before_they_outgrow_max_message_bytes(setup, compression):
    """Records that fit alone but not together go out in several batches, each accepted by the leader."""
    producer, leader = setup(compression=compression)
    futures = [producer.send(TOPIC, os.urandom(1_000)) for _ in range(40)]  # incompressible
    producer.flush(timeout=10)
    assert [f.result(0).offset for f in futures] == list(range(40))
    assert len(leader.requests) > 4 and max(leader.requests) <= MAX_MESSAGE_BYTES


def test_max_request_size_bounds_batches_below_the_topic_limit(setup):
    """max_request_size (smaller than max.message.bytes) bounds each request and refuses a larger record."""
    producer, leader = setup(max_request_size=4_096)
    with pytest.raises(RecordTooLargeError):
        producer.send(TOPIC, b"x" * 4_000)
    futures = [producer.send(TOPIC, b"y" * 500) for _ in range(30)]
    producer.flush(timeout=10)
    assert [f.result(0).offset for f in futures] == list(range(30))
    assert max(leader.requests) <= 4_096


def test_a_record_larger_than_buffer_memory_is_refused(setup):
    """As Kafka: a record that could never fit buffer_memory fails at once instead of blocking."""
    producer, _ = setup(buffer_memory=2_048, batch_size=1_024)
    with pytest.raises(RecordTooLargeError):
        producer.send(TOPIC, b"z" * 3_000)


@pytest.mark.parametrize(
    ("headers", "error"),
    [
        ([("k", "not bytes")], TypeError),
        ([(b"bytes key", b"v")], TypeError),
        ([("only a key",)], TypeError),
        ("not a list", TypeError),
        ([("h", b"")] * (rb.MAX_HEADERS_PER_RECORD + 1), InvalidRecordError),
        ([("k" * (rb.MAX_HEADER_KEY_BYTES + 1), None)], InvalidRecordError),
        ([("\udc80", b"v")], TypeError),  # a lone surrogate is no UTF-8
    ],
)
def test_bad_headers_fail_their_own_record_only(setup, headers, error):
    """Headers of the wrong shape or beyond the limits raise at send; the records around them are acknowledged."""
    producer, leader = setup()
    first = producer.send(TOPIC, b"1", headers=[("ok", b"v"), ("none", None)])
    with pytest.raises(error):
        producer.send(TOPIC, b"bad", headers=headers)
    last = producer.send(TOPIC, b"2")
    producer.flush(timeout=10)
    assert (first.result(0).offset, last.result(0).offset) == (0, 1)
    assert values_in_log(leader) == [b"1", b"2"]


@pytest.mark.parametrize(("timestamp", "error"), [("now", TypeError), (1.5, TypeError), (-1, ValueError)])
def test_bad_timestamps_fail_their_own_record_only(setup, timestamp, error):
    """A timestamp that is not a non-negative integer raises at send, never in the sender for the whole batch."""
    producer, leader = setup()
    with pytest.raises(error):
        producer.send(TOPIC, b"bad", timestamp_ms=timestamp)
    good = producer.send(TOPIC, b"good", timestamp_ms=5)
    producer.flush(timeout=10)
    assert good.result(0).offset == 0 and values_in_log(leader) == [b"good"]


def test_send_arrow_refuses_a_table_with_an_oversized_row_before_sending_any(setup):
    """One row too large for max.message.bytes: RecordTooLargeError, and no row of the table reaches the leader."""
    producer, leader = setup()
    table = pa.table({"value": [b"a", b"x" * MAX_MESSAGE_BYTES, b"c"]})
    with pytest.raises(RecordTooLargeError):
        producer.send_arrow(TOPIC, table, partition=0)
    producer.flush(timeout=10)
    assert leader.requests == []


def test_send_arrow_splits_a_table_into_batches_that_fit(setup):
    """A table far above max.message.bytes (headers included) goes out in batches the leader accepts, rows in order."""
    producer, leader = setup(batch_size=1 << 20)
    n = 200
    headers = pa.array([[{"key": "h", "value": os.urandom(50)}]] * n, type=rb.HEADERS_TYPE)
    table = pa.table({"value": [os.urandom(200) for _ in range(n)], "headers": headers})
    metadata = producer.send_arrow(TOPIC, table, partition=0, headers_column="headers").result(timeout=10)
    assert sum(m.record_count for m in metadata) == n and len(metadata) > 5
    assert max(leader.requests) <= MAX_MESSAGE_BYTES
    assert values_in_log(leader) == table.column("value").to_pylist()


def test_send_arrow_fills_batches_to_the_largest_request_not_to_batch_size(setup):
    """A bulk send makes as few leader calls as the limits allow: batch_size (for send) does not cut it smaller."""
    producer, leader = setup(batch_size=512)
    table = pa.table({"value": [os.urandom(100) for _ in range(400)]})
    metadata = producer.send_arrow(TOPIC, table, partition=0).result(timeout=10)
    assert sum(m.record_count for m in metadata) == 400
    assert len(leader.requests) == len(metadata) and max(leader.requests) <= MAX_MESSAGE_BYTES
    assert min(leader.requests[:-1]) > MAX_MESSAGE_BYTES // 2  # every batch but the last near the limit
    assert values_in_log(leader) == table.column("value").to_pylist()


def test_send_arrow_checks_column_types_and_header_limits_up_front(setup):
    """Columns of the wrong type and headers beyond the limits raise before anything is queued."""
    producer, leader = setup()
    with pytest.raises(TypeError):
        producer.send_arrow(TOPIC, pa.table({"value": [1, 2]}), partition=0)
    many = pa.array([[{"key": "h", "value": None}] * (rb.MAX_HEADERS_PER_RECORD + 1)], type=rb.HEADERS_TYPE)
    with pytest.raises(InvalidRecordError):
        producer.send_arrow(TOPIC, pa.table({"value": [b"v"], "h": many}), partition=0, headers_column="h")
    producer.flush(timeout=10)
    assert leader.requests == []


@pytest.mark.parametrize("name", ["", "a b", "..", "x" * 250, None])
def test_an_illegal_topic_name_is_refused_at_send(setup, name):
    """send/send_arrow to an illegal topic name raise InvalidTopicError; the producer goes on with the others."""
    producer, leader = setup()
    with pytest.raises(InvalidTopicError):
        producer.send(name, b"v")
    with pytest.raises(InvalidTopicError):
        producer.send_arrow(name, pa.table({"value": [b"v"]}))
    ok = producer.send(TOPIC, b"ok")
    producer.flush(timeout=10)
    assert ok.result(0).offset == 0 and leader.requests == [leader.requests[0]]


def test_a_record_that_fits_alone_goes_alone_when_the_bound_is_too_loose(setup):
    """Below the batch overhead bound, a small record is measured exactly and sent alone in its batch."""
    producer, leader = setup(max_request_size=600)
    futures = [producer.send(TOPIC, b"kept-%d" % i) for i in range(3)]
    with pytest.raises(RecordTooLargeError):
        producer.send(TOPIC, b"x" * 600)
    producer.flush(timeout=10)
    assert [f.result(0).offset for f in futures] == [0, 1, 2]
    assert len(leader.requests) == 3 and max(leader.requests) <= 600
