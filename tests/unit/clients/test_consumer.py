"""The Consumer end to end against fake leaders (no Ray): what polls return and where
positions stand after them, seeks, pause and resume, offset look-ups, resets, closing and
shipping to another process."""

from __future__ import annotations

import pyarrow as pa
import pytest

from raylog.clients.consumer import ARROW_SCHEMA, Consumer
from raylog.common import record_batch
from raylog.errors import IllegalStateError, NoOffsetForPartitionError
from raylog.types import TIMESTAMP_CREATE_TIME, Record, TopicPartition
from tests.unit.clients.consumer_fakes import FakeCluster, FakeLeader, small_batches, stamped

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)

pytestmark = pytest.mark.usefixtures("fake_ray")


def consumer_of(*leaders: FakeLeader, **options) -> Consumer:
    return Consumer(FakeCluster(*leaders), "t", auto_offset_reset="earliest", **options)


def poll_all(consumer: Consumer, count: int, **options) -> dict[TopicPartition, list[Record]]:
    got: dict[TopicPartition, list[Record]] = {}
    for _ in range(100):
        for tp, records in consumer.poll(timeout_ms=1_000, **options).items():
            got.setdefault(tp, []).extend(records)
        if sum(map(len, got.values())) >= count:
            return got
    raise AssertionError(f"only {sum(map(len, got.values()))} of {count} records")


def test_poll_returns_every_record_once_in_order_and_moves_positions_past_them():
    leaders = FakeLeader(small_batches(3, 4)), FakeLeader(small_batches(1, 5))
    consumer = consumer_of(*leaders, max_poll_records=3)
    assert consumer.assignment() == {T0, T1}
    got = poll_all(consumer, 17)
    assert [r.offset for r in got[T0]] == list(range(12))
    assert [r.offset for r in got[T1]] == list(range(5))
    record = got[T0][0]
    assert (record.topic, record.partition, record.value, record.key, record.headers) == ("t", 0, b"v" * 10, None, ())
    assert record.timestamp == 1 and record.timestamp_type == TIMESTAMP_CREATE_TIME
    assert consumer.position(T0) == 12 and consumer.position(T1) == 5
    assert consumer.poll(timeout_ms=0) == {}


def test_max_poll_records_bounds_a_poll_and_the_position_follows_what_was_returned():
    consumer = consumer_of(FakeLeader(small_batches(1, 10)))
    first = consumer.poll(timeout_ms=1_000, max_records=4)
    assert [r.offset for r in first[T0]] == [0, 1, 2, 3]
    assert consumer.position(T0) == 4
    assert [r.offset for r in consumer.poll(timeout_ms=1_000)[T0]] == list(range(4, 10))
    assert consumer.position(T0) == 10


def test_deserializers_and_headers_come_with_the_records():
    batch = record_batch.build([b"1", b"2"], keys=[b"a", None], headers=[[("h", b"x")], []], now_ms=5)
    consumer = consumer_of(
        FakeLeader(stamped([batch])), key_deserializer=bytes.decode, value_deserializer=lambda v: int(v) * 10
    )
    records = poll_all(consumer, 2)[T0]
    assert [(r.key, r.value, r.headers) for r in records] == [("a", 10, (("h", b"x"),)), (None, 20, ())]


def test_a_record_of_bytes_holds_no_container_for_pythons_cycle_collector():
    """Each record is one object the cycle collector tracks, nothing more: its headers are
    tuples of untracked items (``()`` when none), not a list per record. A list per record
    doubled the tracked objects a poll made and, in a Ray client's heap, brought a full
    collection (~80 ms) once per ~110,000 records polled: 1.1M records/s built, against
    5.3M/s with tuples (benchmarks in docs/performance.md)."""
    import gc

    batch = record_batch.build([b"1", b"2", None], keys=[b"a", None, b"c"], headers=[[("h", b"x")], [], [("n", None)]])
    records = poll_all(consumer_of(FakeLeader(stamped([batch]))), 3)[T0]
    for _ in range(2):  # a collection stops tracking the tuples holding untracked items only: pairs, then headers
        gc.collect()
    assert [r.headers for r in records] == [(("h", b"x"),), (), (("n", None),)]
    assert not any(gc.is_tracked(field) for record in records for field in record)


def test_poll_arrow_labels_each_partitions_rows():
    consumer = consumer_of(FakeLeader(small_batches(1, 3)), FakeLeader(small_batches(1, 2)))
    tables = []
    while sum(t.num_rows for t in tables) < 5:
        tables.append(consumer.poll_arrow(timeout_ms=1_000))
    table = pa.concat_tables(tables)
    assert table.schema.equals(ARROW_SCHEMA)
    rows = sorted(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(), strict=True))
    assert rows == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]
    assert set(table.column("topic").to_pylist()) == {"t"}
    assert consumer.poll_arrow(timeout_ms=0).schema.equals(ARROW_SCHEMA)


def test_a_seek_drops_what_was_read_ahead_and_reads_from_the_offset():
    leader = FakeLeader(small_batches(5, 4))
    consumer = consumer_of(leader, max_poll_records=2)
    assert [r.offset for r in consumer.poll(timeout_ms=1_000)[T0]] == [0, 1]
    consumer.seek(T0, 13)
    assert consumer.position(T0) == 13
    assert [r.offset for r in consumer.poll(timeout_ms=1_000)[T0]] == [13, 14]
    # 20: the long poll of the caught-up partition, still parked: the seek fetches anyway.
    assert [r.offset for r in leader.requests][:3] == [0, 20, 13]
    with pytest.raises(ValueError):
        consumer.seek(T0, -1)
    with pytest.raises(IllegalStateError):
        consumer.seek(TopicPartition("t", 7), 0)


def test_paused_partitions_are_neither_fetched_nor_returned_until_resumed():
    leaders = FakeLeader(small_batches(1, 3)), FakeLeader(small_batches(1, 3))
    consumer = consumer_of(*leaders)
    consumer.pause(T1)
    assert consumer.paused() == {T1}
    got = poll_all(consumer, 3)
    assert set(got) == {T0} and leaders[1].requests == []
    consumer.resume(T1)
    assert consumer.paused() == set()
    assert [r.offset for r in poll_all(consumer, 3)[T1]] == [0, 1, 2]
    assert consumer.position(T1) == 3


def test_a_partition_paused_with_records_buffered_keeps_them_and_its_position():
    consumer = consumer_of(FakeLeader(small_batches(2, 3)), max_poll_records=2)
    consumer.poll(timeout_ms=1_000)
    consumer.pause(T0)
    assert consumer.poll(timeout_ms=0) == {}
    assert consumer.position(T0) == 2
    consumer.resume(T0)
    assert [r.offset for r in consumer.poll(timeout_ms=1_000)[T0]] == [2, 3]


def test_positions_reset_by_auto_offset_reset_and_seek_to_beginning_or_end():
    leader = FakeLeader(small_batches(2, 5))
    leader.log_start = 3
    latest = Consumer(FakeCluster(leader), "t")  # auto_offset_reset "latest"
    assert latest.position(T0) == 10
    latest.seek_to_beginning()
    assert latest.position(T0) == 3
    latest.seek_to_end(T0)
    assert latest.position(T0) == 10
    with pytest.raises(NoOffsetForPartitionError):
        Consumer(FakeCluster(leader), "t", auto_offset_reset="none").position(T0)
    assert consumer_of(leader).position(T0) == 3


def test_offset_look_ups_answer_per_partition():
    leader = FakeLeader(small_batches(2, 5))
    consumer = consumer_of(leader)
    assert consumer.beginning_offsets([("t", 0)]) == {T0: 0}
    assert consumer.end_offsets([T0]) == {T0: 10}
    assert consumer.offsets_for_times({T0: 123}) == {T0: None}  # no record is that recent
    with pytest.raises(ValueError):
        consumer.offsets_for_times({T0: -5})


def test_assign_keeps_kept_partitions_positions_and_refuses_without_partitions():
    consumer = consumer_of(FakeLeader(small_batches(1, 3)), FakeLeader(small_batches(1, 3)))
    consumer.seek(T0, 2)
    consumer.assign([T0])
    assert consumer.assignment() == {T0} and consumer.position(T0) == 2
    consumer.assign([])
    with pytest.raises(IllegalStateError, match="no partitions assigned"):
        consumer.poll()


def test_a_closed_consumer_refuses_polls_and_a_shipped_one_keeps_its_positions():
    consumer = consumer_of(FakeLeader(small_batches(1, 6)), max_poll_records=4)
    consumer.poll(timeout_ms=1_000)
    function, args = consumer.__reduce__()
    assert args[2:] == ([T0], {T0: 4})  # rebuilt with the same assignment and positions
    consumer.close()
    consumer.close()  # idempotent
    with pytest.raises(IllegalStateError, match="closed"):
        consumer.poll()
    with pytest.raises(IllegalStateError):
        consumer.commit()  # no group id, and closed


def test_iteration_stops_after_consumer_timeout_ms_without_records():
    consumer = consumer_of(FakeLeader(small_batches(1, 3)), consumer_timeout_ms=50, fetch_max_wait_ms=10)
    assert [r.offset for r in consumer] == [0, 1, 2]
