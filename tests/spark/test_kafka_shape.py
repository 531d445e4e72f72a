"""raylog_spark in the shape Spark users know from its Kafka source and sink: the source's
columns and types, its options (and typed errors for bad ones), the sink's DataFrame shape,
and an ImportError that names the missing extra."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import textwrap
import time

import pytest

import raylog_spark
from raylog import Consumer, Producer, TopicPartition
from raylog.clients.partitioner import partition_for_key
from raylog.errors import InvalidConfigError, InvalidRecordError, OffsetOutOfRangeError, UnknownTopicOrPartitionError
from raylog_spark import options
from raylog_spark.topics import plan_read
from tests.helpers import read_values, wait_until

#: Spark 3.5's Kafka source schema with includeHeaders, as Spark prints it.
SPARK_KAFKA_SOURCE = (
    "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
    "timestampType:int,headers:array<struct<key:string,value:binary>>>"
)
BASE_MS = 1_000


def produce_timed(cluster, name: str, partitions: int, count: int) -> dict[tuple[int, int], tuple]:
    """``count`` records in each partition, the i-th at ``BASE_MS + i`` ms, every other one
    with a header; ``{(partition, offset): (key, value, timestamp_ms, headers or None)}``."""
    expected = {}
    with Producer(cluster, linger_ms=2) as producer:
        for partition in range(partitions):
            for i in range(count):
                key, value = b"k%d" % i, b"%s-%d-%d" % (name.encode(), partition, i)
                headers = [("i", b"%d" % i)] if i % 2 else None
                producer.send(name, value, key=key, headers=headers, partition=partition, timestamp_ms=BASE_MS + i)
                expected[(partition, i)] = (key, value, BASE_MS + i, headers)
        producer.flush()
    return expected


def rows_by_position(df) -> dict[tuple[str, int, int], tuple]:
    """``{(topic, partition, offset): (key, value, timestamp ms, timestampType, headers)}``."""
    rows = df.selectExpr("*", "unix_millis(timestamp) AS ms").collect()
    out = {
        (r.topic, r.partition, r.offset): (
            bytes(r.key) if r.key is not None else None,
            bytes(r.value),
            r.ms,
            r.timestampType,
            None if r.headers is None else [(h.key, bytes(h.value)) for h in r.headers],
        )
        for r in rows
    }
    assert len(out) == len(rows), "a record came more than once"
    return out


def ranges_for(cluster, **given) -> dict[tuple[str, int], tuple[int, int]]:
    """The ranges a batch read with Spark's ``given`` options covers (what read_topic reads)."""
    ranges, _ = plan_read(cluster, options.parse(given))
    return {(tp.topic, tp.partition): bounds for tp, bounds in ranges.items()}


@pytest.mark.parametrize("via", raylog_spark.READ_PATHS)
def test_read_topic_has_the_columns_and_types_of_sparks_kafka_source(cluster, topic, spark, via):
    """Both read paths give Spark's Kafka source schema exactly and every record of every
    subscribed topic once: the record's timestamp as a timestamp, timestampType 0 for
    CreateTime and 1 for LogAppendTime topics, headers only with includeHeaders and null for
    a record without any; assign with offsets reads just those, a read from the end nothing."""
    created = topic(num_partitions=2)
    appended = topic(num_partitions=1, **{"message.timestamp.type": "LogAppendTime"})
    expected = produce_timed(cluster, created, 2, 6)
    before_ms = int(time.time() * 1000)
    produce_timed(cluster, appended, 1, 3)

    df = raylog_spark.read_topic(
        spark, subscribe=f"{created},{appended}", includeHeaders="true", cluster=cluster, via=via
    )
    assert df.schema == raylog_spark.kafka_schema(include_headers=True)
    assert df.schema.simpleString() == SPARK_KAFKA_SOURCE
    got = rows_by_position(df)
    assert {(p, o): row for (t, p, o), row in got.items() if t == created} == {
        position: (key, value, ms, 0, headers) for position, (key, value, ms, headers) in expected.items()
    }
    log_appended = [row for (t, _, _), row in got.items() if t == appended]
    assert len(log_appended) == 3
    assert all(kind == 1 and ms >= before_ms for _, _, ms, kind, _ in log_appended)

    partial = raylog_spark.read_topic(
        spark,
        assign=json.dumps({created: [1]}),
        startingOffsets={created: {"1": 1}},
        endingOffsets={created: {"1": 3}},
        includeHeaders=True,
        cluster=cluster,
        via=via,
    )
    assert {(p, o): row[4] for (_, p, o), row in rows_by_position(partial).items()} == {
        (1, o): expected[(1, o)][3] for o in (1, 2)
    }
    empty = raylog_spark.read_topic(spark, created, start="latest", cluster=cluster, via=via)
    assert empty.schema == raylog_spark.kafka_schema()
    assert empty.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    assert empty.count() == 0


def test_sparks_source_options_choose_topics_partitions_and_offsets(cluster, topic, spark):
    """subscribe, subscribePattern, assign, startingOffsets/endingOffsets (JSON with -2/-1),
    the timestamp options and their strategy mean what they mean in Spark; names are matched
    without regard to case; a read with options reads exactly the ranges they name."""
    first, second = topic(num_partitions=2), topic(num_partitions=1)
    produce_timed(cluster, first, 2, 10)
    produce_timed(cluster, second, 1, 10)
    both = f"{first}, {second}"
    whole = {(first, 0): (0, 10), (first, 1): (0, 10), (second, 0): (0, 10)}

    assert ranges_for(cluster, subscribe=both) == whole
    prefix = os.path.commonprefix([first, second])
    assert ranges_for(cluster, subscribePattern=re.escape(prefix) + r"\d+") == whole
    assert ranges_for(cluster, subscribePattern=re.escape(first)) == {k: v for k, v in whole.items() if k[0] == first}
    assert ranges_for(cluster, subscribePattern=re.escape(prefix)) == {}  # whole names only, as Kafka
    assert ranges_for(cluster, assign=json.dumps({first: [1]})) == {(first, 0): (10, 10), (first, 1): (0, 10)}

    starting = json.dumps({first: {"0": 3, "1": -2}})
    ending = {first: {0: -1, 1: 5}}  # a dict does as well as its JSON
    chosen = {(first, 0): (3, 10), (first, 1): (0, 5), (second, 0): (0, 10)}
    assert ranges_for(cluster, subscribe=both, startingOffsets=starting, endingOffsets=ending) == chosen
    assert ranges_for(cluster, subscribe=both, STARTINGOFFSETS="Earliest", endingoffsets="latest") == whole

    assert ranges_for(
        cluster, subscribe=both, startingTimestamp="1004", endingOffsetsByTimestamp={second: {"0": 1007}}
    ) == {(first, 0): (4, 10), (first, 1): (4, 10), (second, 0): (4, 7)}
    by_time = ranges_for(cluster, subscribe=both, startingOffsetsByTimestamp=json.dumps({first: {"1": 1008}}))
    assert by_time == {(first, 0): (0, 10), (first, 1): (8, 10), (second, 0): (0, 10)}
    assert ranges_for(cluster, subscribe=both, endingTimestamp=5_000) == whole  # none that recent: latest
    with pytest.raises(OffsetOutOfRangeError, match="no record at or after"):
        ranges_for(cluster, subscribe=both, startingTimestamp=5_000)
    late = ranges_for(cluster, subscribe=both, startingTimestamp=5_000, startingOffsetsByTimestampStrategy="latest")
    assert late == {position: (10, 10) for position in whole}

    df = raylog_spark.read_topic(spark, subscribe=both, startingOffsets=starting, endingOffsets=ending, cluster=cluster)
    read = {(r.topic, r.partition, r.offset) for r in df.select("topic", "partition", "offset").collect()}
    assert read == {(t, p, o) for (t, p), (start, end) in chosen.items() for o in range(start, end)}


def test_fail_on_data_loss_false_starts_at_the_log_start_instead_of_failing(cluster, topic, caplog):
    """Offsets deleted by retention fail a read, as in Spark; with failOnDataLoss false the
    read starts at the log start instead, and says so in the log."""
    name = topic(num_partitions=1, **{"segment.bytes": "1024", "retention.ms": "600000"})
    with Producer(cluster, linger_ms=0, batch_size=1024) as producer:
        hour_ago = int(time.time() * 1000) - 3_600_000
        for i in range(8):
            producer.send(name, b"x" * 500, timestamp_ms=hour_ago + i).result(timeout=30)
    tp = TopicPartition(name, 0)
    with Consumer(cluster) as consumer:
        wait_until(lambda: consumer.beginning_offsets([tp])[tp], timeout_s=60, message="old segments deleted")
        from_zero = {"startingOffsets": {name: {"0": 0}}}
        with pytest.raises(OffsetOutOfRangeError):
            ranges_for(cluster, subscribe=name, **from_zero)
        with caplog.at_level(logging.WARNING, logger="raylog_spark.topics"):
            moved = ranges_for(cluster, subscribe=name, failOnDataLoss="false", **from_zero)
        log_start = consumer.beginning_offsets([tp])[tp]  # (the segments went in one round)
    assert moved == {(name, 0): (log_start, 8)}
    assert f"below the log start {log_start}" in caplog.text


def test_bad_options_are_refused_with_typed_errors(cluster, topic, spark):
    """Malformed values, options a read does not take, unknown topics and partitions: each
    refused before anything is read, with InvalidConfigError (a ValueError) or
    UnknownTopicOrPartitionError."""
    name = topic(num_partitions=2)

    def read(*args, **given):
        return raylog_spark.read_topic(spark, *args, cluster=cluster, **given)

    refused = [
        ({"startingOffsets": "{not json"}, "not valid JSON"),
        ({"startingOffsets": json.dumps({name: [0, 1]})}, "must hold a non-empty object"),
        ({"startingOffsets": "[1, 2]"}, "must be a JSON object"),
        ({"startingOffsets": {name: {"0": -3}}}, r"-3 \(-2: earliest, -1: latest\)"),
        ({"startingOffsets": {name: {"zero": 1}}}, "must be a partition number"),
        ({"startingOffsets": "latest"}, "cannot start at latest"),
        ({"startingOffsets": {name: {"1": -1}}}, "cannot start at latest"),
        ({"endingOffsets": "earliest"}, "cannot end at earliest"),
        ({"startingOffsets": {"another-topic": {"0": 1}}}, "not read"),
        ({"startingTimestamp": "yesterday"}, "time in ms"),
        ({"startingOffsetsByTimestampStrategy": "newest"}, "must be one of"),
        ({"includeHeaders": "yes"}, "true or false"),
        ({"maxOffsetsPerTrigger": 10}, "batch read has no triggers"),
        ({"kafka.bootstrap.servers": "localhost:9092"}, "Kafka client settings"),
        ({"minPartitions": "4"}, "not supported"),
        ({"startingOfsets": "earliest"}, "unknown option"),
        ({"start": {0: 1}, "startingOffsets": "earliest"}, "not both"),
        ({"subscribe": name}, "exactly one of"),
    ]
    for given, message in refused:
        with pytest.raises(InvalidConfigError, match=message):
            read(name, **given)
    with pytest.raises(InvalidConfigError, match=r"exactly one of .*\(given: none\)"):
        read()
    with pytest.raises(InvalidConfigError, match="comma-separated"):
        read(subscribe=f"{name},,{name}")
    with pytest.raises(InvalidConfigError, match="not a regular expression"):
        read(subscribePattern="clicks-(")
    with pytest.raises(InvalidConfigError, match="not assigned"):
        read(assign={name: [0]}, startingOffsets={name: {"1": 0}})
    with pytest.raises(UnknownTopicOrPartitionError):
        read(subscribe="no-such-topic")
    with pytest.raises(UnknownTopicOrPartitionError):
        read(assign={name: [7]})
    with pytest.raises(UnknownTopicOrPartitionError):
        read(name, startingOffsets={name: {"9": 0}})
    assert issubclass(InvalidConfigError, ValueError)

    def stream(topic_name, **given):
        return raylog_spark.MicroBatchStream(
            spark, topic_name, "never", lambda df, batch_id: None, cluster=cluster, **given
        )

    for given, message in [
        ({"endingOffsets": "latest"}, "a stream has no end"),
        ({"endingOffsets": "earliest"}, "a stream has no end"),
        ({"assign": {name: [0]}}, "a stream reads every partition of one topic"),
        ({"failOnDataLoss": False}, "not supported by streams"),
        ({"maxOffsetsPerTrigger": "0"}, "positive integer"),
        ({"start": "earliest", "startingOffsets": "earliest"}, "not both"),
    ]:
        with pytest.raises(InvalidConfigError, match=message):
            stream(name, **given)
    with pytest.raises(InvalidConfigError, match="a stream reads one topic"):
        stream(None, subscribe=f"{name},other")
    with pytest.raises(InvalidConfigError, match="a stream reads one topic"):
        stream(None, subscribePattern=".*")
    with pytest.raises(UnknownTopicOrPartitionError):
        stream(None, subscribe="no-such-topic")


def test_stream_takes_sparks_options_and_shares_max_offsets_per_trigger(cluster, topic, spark):
    """A stream named by subscribe starts where startingOffsets says, gives headers with
    includeHeaders, and caps each trigger at maxOffsetsPerTrigger records shared among
    partitions in proportion to what each has waiting (Spark's rule)."""
    name = topic(num_partitions=2)
    expected = produce_timed(cluster, name, 2, 15)
    batches: list[dict[int, tuple[int, int]]] = []
    seen: dict[tuple[int, int], list | None] = {}

    def process(df, batch_id):
        assert df.schema == raylog_spark.kafka_schema(include_headers=True)
        rows = df.select("partition", "offset", "headers").collect()
        batch: dict[int, tuple[int, int]] = {}
        for r in rows:
            first, last = batch.get(r.partition, (r.offset, r.offset))
            batch[r.partition] = (min(first, r.offset), max(last, r.offset + 1))
            seen[(r.partition, r.offset)] = None if r.headers is None else [(h.key, bytes(h.value)) for h in r.headers]
        batches.append(batch)

    stream = raylog_spark.MicroBatchStream(
        spark,
        None,
        "spark-options-stream",
        process,
        trigger_interval_s=0.1,
        cluster=cluster,
        subscribe=name,
        startingOffsets=json.dumps({name: {"0": 5}}),
        maxOffsetsPerTrigger="10",
        includeHeaders=True,
    ).start()
    wait_until(lambda: stream.records_committed >= 25 or not stream.is_active, timeout_s=120, message="25 records")
    stream.stop(timeout_s=60)
    # 10 + 15 waiting: shares 4 and 6; then 6 + 9: 4 and 6; then the 2 + 3 left.
    assert batches == [{0: (5, 9), 1: (0, 6)}, {0: (9, 13), 1: (6, 12)}, {0: (13, 15), 1: (12, 15)}]
    assert seen == {position: headers for position, (_, _, _, headers) in expected.items() if position >= (0, 5)}


def test_exactly_once_stream_refuses_sink_columns_a_transaction_does_not_write(cluster, topic, spark):
    """A transactional stream whose output keeps the Kafka sink's partition column stops with
    InvalidRecordError rather than drop it, and nothing of the batch is committed."""
    source, sink = topic(num_partitions=1), topic(num_partitions=1)
    produce_timed(cluster, source, 1, 3)
    stream = raylog_spark.MicroBatchStream(
        spark,
        source,
        "eos-sink-shape",
        lambda df, batch_id: df.select("key", "value", "partition"),
        trigger_interval_s=0.1,
        cluster=cluster,
        transactional_id="eos-sink-shape-0",
        sink_topic=sink,
    ).start()
    with pytest.raises(InvalidRecordError, match=r"drop \['partition'\]"):
        stream.await_termination(timeout_s=120)
    assert stream.batches_committed == 0
    assert read_values(cluster, sink, 1, "read_uncommitted") == []


def test_write_topic_takes_the_dataframe_shape_of_sparks_kafka_sink(cluster, topic, spark):
    """value (string or binary), key, headers, topic and partition columns: each row lands in
    its topic and partition (murmur2 of the key where the partition is null), with its
    headers; the topic argument wins over the column; other columns are ignored, so a read's
    DataFrame written to another topic keeps partitions, keys, values and headers."""
    first, second, copy = topic(num_partitions=3), topic(num_partitions=2), topic(num_partitions=3)
    header = [{"key": "source", "value": b"spark"}]
    rows = [
        (f"v{i}", b"k%d" % i if i % 4 else None, header if i % 3 == 0 else None, [first, second][i % 2], p, i)
        for i, p in enumerate([None, 1, 2, None, 0, None, 1, None] * 3)
    ]
    schema = (
        "value string, key binary, headers array<struct<key:string,value:binary>>, topic string, partition int, n int"
    )
    df = spark.createDataFrame(rows, schema)
    assert raylog_spark.write_topic(df, cluster=cluster) == len(rows)
    only_second = spark.createDataFrame([(first, "x"), (first, "y")], "topic string, value string")
    assert raylog_spark.write_topic(only_second, second, cluster=cluster) == 2

    read = raylog_spark.read_topic(spark, subscribe=f"{first},{second}", includeHeaders=True, cluster=cluster)
    written = {(row[1].decode(), name): (p, row) for (name, p, _), row in rows_by_position(read).items()}
    assert written.keys() == {(value, name) for value, *_, name, _, _ in rows} | {("x", second), ("y", second)}
    for value, key, headers, name, partition, _ in rows:
        got_partition, (got_key, _, _, _, got_headers) = written[(value, name)]
        assert (got_key, got_headers) == (key, [(h["key"], h["value"]) for h in headers] if headers else None)
        if partition is not None:
            assert got_partition == partition
        elif key is not None:
            assert got_partition == partition_for_key(key, 3 if name == first else 2)

    original = raylog_spark.read_topic(spark, first, includeHeaders=True, cluster=cluster)
    assert raylog_spark.write_topic(original, copy, cluster=cluster) == len(rows) // 2
    copied = rows_by_position(raylog_spark.read_topic(spark, copy, includeHeaders=True, cluster=cluster))
    kept = sorted((value, p, key, headers) for (_, p, _), (key, value, _, _, headers) in copied.items())
    assert kept == sorted((row[1], p, row[0], row[4]) for (value, name), (p, row) in written.items() if name == first)


def test_write_topic_refuses_bad_shapes_with_typed_errors(cluster, topic, spark):
    """Missing or mistyped columns and a missing topic fail on the driver; a row naming an
    unknown topic, or no topic, fails its task and the write with that error."""
    name = topic(num_partitions=2)

    def frame(schema, *row):
        return spark.createDataFrame([row], schema)

    def write(df, *args, **kwargs):
        return raylog_spark.write_topic(df, *args, cluster=cluster, **kwargs)

    with pytest.raises(InvalidRecordError, match="no value column 'value'"):
        write(frame("payload string", "x"), name)
    with pytest.raises(InvalidRecordError, match="value column 'value' must be binary or string, got int"):
        write(frame("value int", 1), name)
    with pytest.raises(InvalidRecordError, match="no key column 'user'"):
        write(frame("value string", "x"), name, key_col="user")
    with pytest.raises(InvalidRecordError, match="headers must be array<struct<key:string,value:binary>>"):
        write(frame("value string, headers array<string>", "x", ["h"]), name)
    with pytest.raises(InvalidRecordError, match="partition column 'partition' must be an integer"):
        write(frame("value string, partition string", "x", "0"), name)
    with pytest.raises(InvalidRecordError, match="no topic"):
        write(frame("value string", "x"))
    with pytest.raises(UnknownTopicOrPartitionError):
        write(frame("value string", "x"), "no-such-topic")
    with pytest.raises(UnknownTopicOrPartitionError):
        write(frame("value string, topic string", "x", "no-such-topic"))
    with pytest.raises(InvalidRecordError, match="topic is null"):
        write(frame("value string, topic string", "x", None))


@pytest.mark.parametrize("missing", ["pyspark", "raydp"])
def test_import_without_the_spark_extra_says_what_to_install(missing):
    """``import raylog_spark`` where PySpark or RayDP is not installed (simulated: the module
    blocked in sys.modules) raises an ImportError naming the spark extra."""
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules[{missing!r}] = None  # as if it were not installed
        try:
            import raylog_spark
        except ImportError as exc:
            print(type(exc).__name__, exc.name, exc)
        else:
            print("imported")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.startswith(f"ImportError {missing} raylog_spark needs the spark extra"), (
        done.stdout + done.stderr
    )
    assert "pip install 'raylog[spark]'" in done.stdout


def test_rows_null_only_the_headers_of_records_without_any_in_sliced_and_chunked_columns():
    """Spark's Kafka source has null headers for a record without any; raylog's reads give
    empty lists, in chunks that may be slices of a larger fetch. Each record keeps its own
    headers, whatever its chunk's offset into the fetch's buffers."""
    import pyarrow as pa

    from raylog.clients.consumer import ARROW_SCHEMA
    from raylog_spark.topics import RowShape

    def headers_of(i: int) -> list[tuple[str, bytes]]:
        return [(f"k{i}", b"%d" % i)] * (i % 3 == 0) + [("x", b"")] * (i % 5 == 0)

    n = 40
    fetched = pa.table(
        {
            "topic": ["t"] * n,
            "partition": [0] * n,
            "offset": range(n),
            "timestamp": [1_700_000_000_000] * n,
            "key": [b"k"] * n,
            "value": [b"v"] * n,
            "headers": [[{"key": k, "value": v} for k, v in headers_of(i)] for i in range(n)],
        },
        schema=ARROW_SCHEMA,
    )
    read = pa.concat_tables([fetched.slice(0, 7), fetched.slice(7, 20), fetched.slice(27, 0), fetched.slice(27)])
    assert read.column("headers").num_chunks == 4

    headers = RowShape({"t": 0}, include_headers=True).rows(read).column("headers").to_pylist()

    assert [None if h is None else [(e["key"], e["value"]) for e in h] for h in headers] == [
        headers_of(i) or None for i in range(n)
    ]
