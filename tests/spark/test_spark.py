"""raylog_spark: topics into and out of Spark DataFrames through RayDP, micro-batch streams
with exactly-once results in an idempotent sink or, transactionally, in a raylog topic, and
clients shipped into Spark executors."""

from __future__ import annotations

import pytest

import raylog_spark
from raylog import Consumer, Producer, TopicPartition
from raylog.clients.partitioner import partition_for_key
from raylog.data import read_topic as read_dataset
from raylog.errors import KafkaTimeoutError
from tests.helpers import wait_until
from tests.ray.test_exactly_once import committed_offsets, read_sorted, tags_of
from tests.ray.test_ray_data import produce, table_of


def test_read_topic_and_streams_refuse_an_unknown_read_path(cluster, topic, spark):
    name = topic(num_partitions=1)
    with pytest.raises(ValueError, match="via must be one of"):
        raylog_spark.read_topic(spark, name, cluster=cluster, via="jdbc")
    with pytest.raises(ValueError, match="via must be one of"):
        raylog_spark.MicroBatchStream(spark, name, "never", lambda df, batch_id: None, cluster=cluster, via="jdbc")


def test_write_topic_from_spark_round_trips(cluster, topic, spark):
    """A DataFrame written to a topic with its key and value in other columns comes back row
    for row, keyed rows where murmur2 puts them."""
    name = topic(num_partitions=3)
    rows = [(f"user-{i % 11}", b"click-%d" % i) for i in range(300)]
    df = spark.createDataFrame(rows, "user string, payload binary")
    assert raylog_spark.write_topic(df, name, key_col="user", value_col="payload", cluster=cluster) == 300
    table = table_of(read_dataset(name, cluster=cluster))
    keys, values = table.column("key").to_pylist(), table.column("value").to_pylist()
    assert sorted(zip(keys, values, strict=True)) == sorted((u.encode(), p) for u, p in rows)
    assert table.column("partition").to_pylist() == [partition_for_key(k, 3) for k in keys]
    # Read back into Spark: records without any headers (null, as in Spark's Kafka source).
    read = raylog_spark.read_topic(spark, name, includeHeaders=True, cluster=cluster)
    assert read.where("headers IS NULL").count() == 300


@pytest.mark.parametrize("via", raylog_spark.READ_PATHS)
def test_stream_killed_mid_batch_and_restarted_is_exactly_once_in_an_idempotent_sink(cluster, topic, spark, via):
    """A stream whose function dies in the middle of a batch, restarted with the same group,
    gives every record exactly once in a sink keyed by (partition, offset): the failed batch is
    repeated, no committed batch is, and records produced after the restart arrive too."""
    name, group = topic(num_partitions=2), f"spark-stream-{via}"
    expected = {key: value for key, (_, value, _) in produce(cluster, name, 120).items()}
    sink: dict[tuple[int, int], bytes] = {}
    deliveries: list[tuple[int, int]] = []

    def upsert(df, batch_id: int, crash_at: int | None = None) -> None:
        rows = df.select("partition", "offset", "value").collect()
        for i, row in enumerate(rows):
            if batch_id == crash_at and i == len(rows) // 2:
                raise RuntimeError("killed in the middle of a batch")
            deliveries.append((row.partition, row.offset))
            sink[(row.partition, row.offset)] = bytes(row.value)

    stream = raylog_spark.MicroBatchStream(
        spark,
        name,
        group,
        lambda df, batch_id: upsert(df, batch_id, crash_at=1),
        max_records_per_partition=20,
        trigger_interval_s=0.1,
        cluster=cluster,
        via=via,
    ).start()
    with pytest.raises(RuntimeError, match="middle of a batch"):
        stream.await_termination(timeout_s=120)
    assert stream.batches_committed == 1
    assert 40 < len(sink) < 80  # batch 0 whole, half of batch 1

    restarted = raylog_spark.MicroBatchStream(
        spark, name, group, upsert, max_records_per_partition=20, trigger_interval_s=0.1, cluster=cluster, via=via
    ).start()
    expected.update({key: value for key, (_, value, _) in produce(cluster, name, 30, b"late").items()})
    wait_until(lambda: len(sink) >= len(expected) or not restarted.is_active, timeout_s=180, message="all records")
    restarted.stop(timeout_s=60)
    assert sink == expected
    repeated = len(deliveries) - len(set(deliveries))
    assert repeated == 20  # exactly the half of batch 1 delivered before the crash
    with Consumer(cluster, group_id=group, enable_auto_commit=False) as consumer:
        committed = consumer.committed([TopicPartition(name, 0), TopicPartition(name, 1)])
    ends = {tp.partition: c.offset for tp, c in committed.items()}
    assert ends == {p: 1 + max(o for q, o in expected if q == p) for p in (0, 1)}


def test_stream_exactly_once_into_a_topic_aborts_a_failed_batch_and_resumes(cluster, topic, spark, monkeypatch):
    """A stream with a transactional id whose second batch fails after its output was sent
    shows none of that batch to read_committed readers and commits none of its offsets;
    restarted, it ends with every input record's output exactly once."""
    source, sink = topic(num_partitions=2), topic(num_partitions=2)
    sent = produce(cluster, source, 120)
    group, transactional_id = "spark-eos", "spark-eos-0"
    calls = []
    send_offsets = Producer.send_offsets_to_transaction

    def failing_second(producer, offsets, group_metadata, timeout=None):
        calls.append(offsets)
        if len(calls) == 2:
            raise KafkaTimeoutError("injected: the offsets did not reach the group coordinator")
        return send_offsets(producer, offsets, group_metadata, timeout)

    def tag(df, batch_id):
        return df.selectExpr("key", "concat(cast(partition AS string), ':', cast(offset AS string)) AS value")

    def start():
        return raylog_spark.MicroBatchStream(
            spark,
            source,
            group,
            tag,
            max_records_per_partition=20,
            trigger_interval_s=0.1,
            cluster=cluster,
            transactional_id=transactional_id,
            sink_topic=sink,
        ).start()

    monkeypatch.setattr(Producer, "send_offsets_to_transaction", failing_second)
    with pytest.raises(KafkaTimeoutError, match="injected"):
        start().await_termination(timeout_s=120)
    monkeypatch.undo()
    assert read_sorted(cluster, sink, 2) == sorted(b"%d:%d" % (tp.partition, o) for tp, o in _offsets_below(calls[0]))
    assert len(read_sorted(cluster, sink, 2, "read_uncommitted")) == 80  # batch 1's 40 were sent, then aborted
    assert committed_offsets(cluster, group, source, 2) == {tp.partition: o.offset for tp, o in calls[0].items()}

    restarted = start()
    late = produce(cluster, source, 30, b"late")
    expected = tags_of({**sent, **late})
    wait_until(lambda: restarted.records_written >= len(expected) - 40 or not restarted.is_active, timeout_s=180)
    restarted.stop(timeout_s=60)
    assert read_sorted(cluster, sink, 2) == expected
    assert restarted.records_committed == restarted.records_written == len(expected) - 40


def _offsets_below(ends: dict) -> list[tuple[TopicPartition, int]]:
    """Every ``(partition, offset)`` below the given ends (``{TopicPartition: OffsetAndMetadata}``)."""
    return [(tp, o) for tp, end in ends.items() for o in range(end.offset)]


def test_producer_and_consumer_shipped_into_a_spark_executor(cluster, topic, spark):
    """A Producer and an assigned Consumer pickled into a Spark executor's Python worker (not a
    Ray worker) connect to Ray there and work."""
    name = topic(num_partitions=1)
    producer = Producer(cluster, linger_ms=1)
    consumer = Consumer(cluster, auto_offset_reset="earliest")
    consumer.assign([TopicPartition(name, 0)])

    def in_executor(_):
        for i in range(4):
            producer.send(name, b"from-spark-%d" % i)
        producer.flush()
        producer.close()
        values: list[bytes] = []
        for _ in range(30):  # polls of up to 1 s each
            values.extend(consumer.poll_arrow(timeout_ms=1_000).column("value").to_pylist())
            if len(values) >= 4:
                break
        consumer.close()
        return values

    got = spark.sparkContext.parallelize([0], 1).mapPartitions(in_executor).collect()
    assert got == [b"from-spark-%d" % i for i in range(4)]
    producer.close()
    consumer.close()
