"""raylog.data: topics as Ray Data datasets (bounded reads, micro-batch streams, writes), and
clients shipped into Ray tasks."""

from __future__ import annotations

import datetime
import re

import pyarrow as pa
import pytest
import ray

from raylog import Consumer, Producer, TopicPartition
from raylog.clients.consumer import ARROW_SCHEMA
from raylog.clients.partitioner import partition_for_key
from raylog.data import Committed, Timestamp, TopicStream, read_topic, write_topic
from raylog.errors import InvalidConfigError, InvalidRecordError, OffsetOutOfRangeError, UnknownTopicOrPartitionError
from tests.helpers import wait_until

COLUMNS = ["topic", "partition", "offset", "timestamp", "key", "value", "headers"]


def produce(cluster, topic: str, count: int, prefix: bytes = b"v") -> dict[tuple[int, int], tuple]:
    """``count`` keyed records (every third with a header); ``{(partition, offset): (key, value, headers)}``."""
    with Producer(cluster, linger_ms=2) as producer:
        sent = []
        for i in range(count):
            key, value = b"k%d" % (i % 13), prefix + b"-%d" % i
            headers = [("n", b"%d" % i)] if i % 3 == 0 else None
            sent.append((producer.send(topic, value, key=key, headers=headers), key, value, headers))
        producer.flush()
    out = {}
    for future, key, value, headers in sent:
        meta = future.result(timeout=10)
        out[(meta.partition, meta.offset)] = (key, value, [{"key": k, "value": v} for k, v in headers or []])
    return out


def rows_of(table: pa.Table) -> dict[tuple[int, int], tuple]:
    """``{(partition, offset): (key, value, headers)}`` of a read; asserts each is there once."""
    columns = [table.column(c).to_pylist() for c in ("partition", "offset", "key", "value", "headers")]
    out = {(p, o): (k, v, h) for p, o, k, v, h in zip(*columns, strict=True)}
    assert len(out) == table.num_rows, "a record came more than once"
    return out


def read_tasks(dataset) -> int:
    """How many read tasks a materialized dataset ran (from its execution stats)."""
    return int(re.search(r"ReadRaylog(?:->SplitBlocks\(\d+\))?: (\d+) tasks executed", dataset.stats()).group(1))


def test_read_topic_returns_exactly_the_produced_records_one_task_per_partition(cluster, topic):
    """A bounded read returns each produced record once with every column, from one task per partition."""
    name = topic(num_partitions=3)
    sent = produce(cluster, name, 600)
    dataset = read_topic(name, cluster=cluster).materialize()
    table = table_of(dataset)
    assert table.column_names == COLUMNS
    assert set(table.column("topic").to_pylist()) == {name}
    assert rows_of(table) == sent
    assert read_tasks(dataset) == 3
    timestamps = table.column("timestamp").to_pylist()
    assert all(abs(ts - timestamps[0]) < 600_000 for ts in timestamps)


def test_read_topic_offset_specs(cluster, topic):
    """start and end take offsets, dicts by partition, timestamps, latest and a group's commits."""
    name = topic(num_partitions=2)
    first = produce(cluster, name, 100, b"old")
    # Records carry millisecond timestamps: let a whole millisecond pass on each side of ``between``.
    between = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(milliseconds=1)
    wait_until(lambda: datetime.datetime.now(datetime.timezone.utc) > between + datetime.timedelta(milliseconds=1))
    second = produce(cluster, name, 100, b"new")
    everything = {**first, **second}

    def read(**spec) -> dict:
        return rows_of(read_table(name, cluster, spec))

    assert read(start=5) == {k: v for k, v in everything.items() if k[1] >= 5}
    assert read(start={1: 7}, end={0: 3}) == {
        (p, o): v for (p, o), v in everything.items() if (p == 0 and o < 3) or (p == 1 and o >= 7)
    }
    assert read(start=between) == second
    assert read(start=Timestamp(int(between.timestamp() * 1000))) == second
    assert read(end=between) == first
    assert read(start="latest") == {}
    with Consumer(cluster, group_id="spec-reader", enable_auto_commit=False) as consumer:
        consumer.assign([TopicPartition(name, 0), TopicPartition(name, 1)])
        consumer.commit({TopicPartition(name, 0): 10})
    committed = read(start=Committed("spec-reader", reset="latest"))
    assert committed == {k: v for k, v in everything.items() if k[0] == 0 and k[1] >= 10}
    assert read(end=Committed("spec-reader")) == {k: v for k, v in everything.items() if k[0] == 0 and k[1] < 10}


def read_table(name, cluster, spec) -> pa.Table:
    return table_of(read_topic(name, cluster=cluster, **spec))


def table_of(dataset) -> pa.Table:
    """The dataset's blocks as one table (a read of empty ranges has no blocks)."""
    tables = [t for t in ray.get(dataset.to_arrow_refs()) if t.num_rows]
    return pa.concat_tables(tables) if tables else ARROW_SCHEMA.empty_table()


def test_read_topic_refuses_bad_ranges_with_typed_errors(cluster, topic):
    """Unknown topics and partitions, offsets past the high watermark, start after end and
    malformed specs fail on the driver, before any task runs."""
    name = topic(num_partitions=2)
    produce(cluster, name, 20)
    with pytest.raises(UnknownTopicOrPartitionError):
        read_topic("no-such-topic", cluster=cluster)
    with pytest.raises(UnknownTopicOrPartitionError):
        read_topic(name, start={5: 0}, cluster=cluster)
    with pytest.raises(OffsetOutOfRangeError):
        read_topic(name, end=10_000, cluster=cluster)
    with pytest.raises(InvalidConfigError, match="after end"):
        read_topic(name, start=3, end=2, cluster=cluster)
    for bad in (-1, "newest", True, datetime.datetime(2024, 1, 1), Committed("g", reset="none"), 1.5):
        with pytest.raises(InvalidConfigError):
            read_topic(name, start=bad, cluster=cluster)


def test_write_topic_round_trips_keys_to_kafkas_partitions(cluster, topic):
    """Rows written from Ray tasks come back once each, keyed rows on murmur2 of their key."""
    name = topic(num_partitions=3)
    items = [{"user": f"user-{i % 17}", "payload": b"event-%d" % i} for i in range(500)]
    source = ray.data.from_items(items, override_num_blocks=4)
    assert write_topic(source, name, key="user", value="payload", cluster=cluster) == 500
    table = read_table(name, cluster, {})
    got = sorted(zip(table.column("key").to_pylist(), table.column("value").to_pylist(), strict=True))
    assert got == sorted((item["user"].encode(), item["payload"]) for item in items)
    for partition, key in zip(table.column("partition").to_pylist(), table.column("key").to_pylist(), strict=True):
        assert partition == partition_for_key(key, 3)
    unkeyed = ray.data.from_items([{"value": b"x"}])
    assert write_topic(unkeyed, name, key=None, cluster=cluster) == 1
    with pytest.raises(InvalidRecordError):
        write_topic(ray.data.from_items([{"value": 1}]), name, cluster=cluster)
    with pytest.raises(UnknownTopicOrPartitionError):
        write_topic(unkeyed, "no-such-topic", cluster=cluster)


def test_topic_stream_picks_up_new_records_and_commits_after_the_work(cluster, topic):
    """The unbounded stream sees records produced after it started; a batch is committed only
    when the work on it succeeded, so a restarted stream repeats exactly the failed batch."""
    name = topic(num_partitions=2)
    produce(cluster, name, 10, b"before")
    stream = TopicStream(name, "stream-group", start="latest", trigger_interval_s=0.05, cluster=cluster)
    assert stream.next_batch(timeout_s=0.2) is None  # nothing after "latest" yet
    first = produce(cluster, name, 40, b"first")
    with stream.next_batch(timeout_s=30) as batch:
        assert rows_of(table_of(batch.dataset)) == first
    second = produce(cluster, name, 30, b"second")
    batch = stream.next_batch(timeout_s=30)
    assert rows_of(table_of(batch.dataset)) == second
    stream.close()  # the work on the second batch "failed": it was never committed

    with Consumer(cluster, group_id="stream-group", enable_auto_commit=False) as consumer:
        committed = consumer.committed(batch.ranges)
    assert {tp: c.offset for tp, c in committed.items()} == {tp: start for tp, (start, _) in batch.ranges.items()}
    with TopicStream(name, "stream-group", trigger_interval_s=0.05, cluster=cluster) as restarted:
        seen = {}
        for again in restarted:
            seen.update(rows_of(table_of(again.dataset)))
            if len(seen) >= len(second):
                again.commit()
                break
    assert seen == second


def test_producer_and_consumer_shipped_into_a_ray_task(cluster, topic):
    """A Producer and an assigned Consumer pickled into a Ray task work there (the consumer
    keeps its assignment and position)."""
    name = topic(num_partitions=1)
    producer = Producer(cluster, linger_ms=1)
    consumer = Consumer(cluster, auto_offset_reset="earliest")
    consumer.assign([TopicPartition(name, 0)])
    consumer.seek(TopicPartition(name, 0), 2)

    @ray.remote(num_cpus=0)
    def produce_then_consume(producer: Producer, consumer: Consumer) -> list[bytes]:
        for i in range(5):
            producer.send(name, b"shipped-%d" % i)
        producer.flush()
        producer.close()
        values: list[bytes] = []
        for _ in range(30):  # polls of up to 1 s each
            values.extend(consumer.poll_arrow(timeout_ms=1_000).column("value").to_pylist())
            if len(values) >= 3:
                break
        return values

    assert ray.get(produce_then_consume.remote(producer, consumer), timeout=60) == [
        b"shipped-2",
        b"shipped-3",
        b"shipped-4",
    ]
    producer.close()
    consumer.close()
