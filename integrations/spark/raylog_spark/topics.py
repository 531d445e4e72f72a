"""Batch reads and writes between raylog topics and Spark DataFrames, in the shape of Spark's
Kafka source and sink.

A read's DataFrame has the columns of Spark 3.5's Kafka source, with its names, types and
order: key (binary), value (binary), topic (string), partition (int), offset (bigint),
timestamp (timestamp), timestampType (int: 0 CreateTime, 1 LogAppendTime) and, with
``includeHeaders``, headers (array<struct<key: string, value: binary>>, null for a record
without headers). Code written for ``spark.read.format("kafka")`` runs on it unchanged, and
its options are Spark's (:mod:`raylog_spark.options`).

A read runs in Spark's own tasks on RayDP's executors by default: one task per partition
range, each a Consumer (:func:`raylog.data.read_range`) whose Arrow record batches go to Spark
through ``mapInArrow``. Or, ``via="ray_data"``, it is :func:`raylog.data.read_topic` (one Ray
task per range, Arrow blocks) handed to Spark as Arrow IPC bytes that RayDP's JVM reader takes
from Ray's object store (:func:`dataset_to_spark`). A write takes the DataFrame shape of
Spark's Kafka sink and produces from Spark's tasks, one idempotent Producer each.
"""

from __future__ import annotations

import functools
import logging
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import ray
import ray.data
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_type
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
)
from raydp.spark.dataset import ray_dataset_to_spark_dataframe
from raydp.spark.ray_cluster_master import RAYDP_SPARK_MASTER_SUFFIX

import raylog
from raylog import Admin, Consumer, Producer, RaylogCluster, TopicPartition, data, errors
from raylog.clients.consumer import ARROW_SCHEMA
from raylog.clients.history import HistorySource, history_source
from raylog.clients.security import security_settings
from raylog.common import kafka_columns
from raylog.errors import InvalidConfigError, InvalidRecordError, OffsetOutOfRangeError, UnknownTopicOrPartitionError
from raylog.types import TopicDescription
from raylog_spark import options as spark_options
from raylog_spark.options import SourceOptions

logger = logging.getLogger(__name__)

#: Where :func:`read_topic` reads: in Spark's tasks, or in Ray Data's.
READ_PATHS = ("executors", "ray_data")
#: The ``timestampType`` column's values, Kafka's ids of ``message.timestamp.type``; the
#: headers type, as Spark's Kafka source and sink have it; the source's Arrow schema: all
#: defined with the broker's history (raylog.common.kafka_columns), which has Spark's shape too.
TIMESTAMP_TYPES = kafka_columns.TIMESTAMP_TYPES
HEADERS_TYPE = kafka_columns.HEADERS_TYPE
kafka_arrow_schema = kafka_columns.kafka_arrow_schema


def kafka_schema(include_headers: bool = False) -> StructType:
    """The schema of Spark's Kafka source, which every read of raylog_spark has.

    Example:
        >>> kafka_schema().simpleString()
        'struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,timestampType:int>'
    """
    return StructType([StructField(f.name, from_arrow_type(f.type), True) for f in kafka_arrow_schema(include_headers)])


@dataclass(frozen=True)
class RowShape:
    """How a read's records become rows: each topic's ``timestampType``, and whether the
    headers column is there. Pickled into the tasks that read."""

    timestamp_types: dict[str, int]
    include_headers: bool = False

    @property
    def arrow_schema(self) -> pa.Schema:
        return kafka_arrow_schema(self.include_headers)

    @property
    def spark_schema(self) -> StructType:
        return kafka_schema(self.include_headers)

    def rows(self, table: pa.Table) -> pa.Table:
        """Records as read (columns of ``raylog.clients.consumer.ARROW_SCHEMA``) in this shape."""
        if not table.num_rows:
            return self.arrow_schema.empty_table()
        return kafka_columns.kafka_rows(table, self._timestamp_types(table.column("topic")), self.include_headers)

    def _timestamp_types(self, topics: pa.ChunkedArray) -> pa.Array:
        kinds = set(self.timestamp_types.values())
        if len(kinds) == 1:
            return pa.repeat(pa.scalar(kinds.pop(), pa.int32()), len(topics))
        names = list(self.timestamp_types)
        kinds_by_index = pa.array([self.timestamp_types[name] for name in names], pa.int32())
        return kinds_by_index.take(pc.index_in(topics, value_set=pa.array(names)))


def read_topic(
    spark: SparkSession,
    topic: str | None = None,
    *,
    start: data.OffsetSpec | None = None,
    end: data.OffsetSpec | None = None,
    cluster: RaylogCluster | None = None,
    via: str = "executors",
    **options: Any,
) -> DataFrame:
    """A DataFrame of the records of one or more topics, as ``spark.read.format("kafka")`` gives.

    Args:
        spark: a session from :func:`raylog_spark.init_spark` (RayDP).
        topic: the topic to read (or name topics with ``subscribe``, ``subscribePattern`` or
            ``assign`` instead).
        start, end: where each partition's range starts (inclusive) and ends (exclusive), as
            :func:`raylog.data.read_topic` takes them (default earliest and latest); the same
            for every topic read. Or use Spark's options below.
        cluster: from :func:`raylog.connect`; default ``raylog.connect()``.
        via: "executors" (each partition range read by a Spark task on RayDP's executors,
            lazily, when Spark runs the query) or "ray_data" (read at once by Ray Data's
            tasks, the blocks handed to Spark through Ray's object store). See
            ``raylog bench spark`` (``raylog/benchmarks/spark_bench.py``) for both measured.
        **options: Spark's Kafka source options, Spark's meaning (see
            :mod:`raylog_spark.options`): ``subscribe`` (comma-separated topics),
            ``subscribePattern`` (a regular expression matching whole topic names),
            ``assign`` (``{"topicA": [0, 1]}``), ``startingOffsets`` ("earliest" or
            ``{"topicA": {"0": 23, "1": -2}}``, -2 earliest), ``endingOffsets`` ("latest" or
            JSON, -1 latest), ``startingTimestamp`` / ``startingOffsetsByTimestamp`` (before
            the offsets, as in Spark) with ``startingOffsetsByTimestampStrategy`` ("error" or
            "latest"), ``endingTimestamp`` / ``endingOffsetsByTimestamp`` (latest where no
            record is that recent), ``includeHeaders`` and ``failOnDataLoss`` (false: starts
            and ends given as offsets below a partition's log start move up to it, logged,
            instead of failing the read). Partitions that JSON offsets leave out start at
            earliest and end at latest (Spark wants them all).

    Returns:
        A DataFrame of :func:`kafka_schema` (with ``includeHeaders``, the headers column).

    Raises:
        InvalidConfigError: an option that is unknown, malformed or not for batch reads
            (e.g. ``maxOffsetsPerTrigger``, ``startingOffsets="latest"``), or start/end given
            both as arguments and as options.
        UnknownTopicOrPartitionError: a topic or partition that does not exist.
        OffsetOutOfRangeError: an offset outside a partition's records, or (strategy
            "error") a starting time after a partition's last record.
        ValueError: as :func:`raylog.data.read_topic`, or ``via`` is not one of READ_PATHS.

    Example:
        >>> df = read_topic(spark, subscribe="clicks,views", startingOffsets="earliest")  # doctest: +SKIP
        >>> df.selectExpr("CAST(key AS STRING)", "CAST(value AS STRING)").show()          # doctest: +SKIP
    """
    check_read_path(via)
    source = spark_options.parse(options, topic=topic, streaming=False)
    for given, name, also in ((start, "start", source.sets_start), (end, "end", source.sets_end)):
        if given is not None and also:
            raise InvalidConfigError(f"give {name}= or the {name}ing options (e.g. {name}ingOffsets), not both")
    cluster = cluster or raylog.connect()
    ranges, shape = plan_read(cluster, source, start, end)
    if via == "ray_data":
        df, _ = dataset_to_spark(spark, _ranges_dataset(cluster, ranges), shape)
        return df
    return ranges_to_spark(spark, cluster, ranges, shape)


def check_read_path(via: str) -> None:
    """Raises ValueError unless ``via`` is one of READ_PATHS."""
    if via not in READ_PATHS:
        raise ValueError(f"via must be one of {READ_PATHS}, got {via!r}")


def plan_read(
    cluster: RaylogCluster,
    source: SourceOptions,
    start: data.OffsetSpec | None = None,
    end: data.OffsetSpec | None = None,
) -> tuple[dict[TopicPartition, tuple[int, int]], RowShape]:
    """The ``[start, end)`` range of every partition of the topics a batch read covers (an
    empty one at the end for a partition that ``assign`` leaves out), and its rows' shape.

    Raises:
        As :func:`read_topic`.
    """
    admin = Admin(cluster)
    descriptions = _described(admin, source)
    spark_options.check_json_topics(source, {d.name for d in descriptions})
    ranges: dict[TopicPartition, tuple[int, int]] = {}
    with _Lookups(cluster) as lookups:
        for description in descriptions:
            first = start if start is not None else start_spec(source, description, lookups)
            last = end if end is not None else _end_spec(source, description, lookups)
            if not source.fail_on_data_loss:
                first, last = (lookups.above_log_start(description, spec) for spec in (first, last))
            found = data.topic_ranges(description.name, start=first, end=last, cluster=cluster)
            wanted = set(_assigned(source, description))
            ranges.update({tp: (b if tp.partition in wanted else (b[1], b[1])) for tp, b in found.items()})
    return ranges, row_shape(descriptions, source.include_headers)


def plan_stream(cluster: RaylogCluster, source: SourceOptions) -> tuple[str, data.OffsetSpec, RowShape]:
    """A stream's topic, where its partitions start when its group has no offsets (from
    Spark's starting options, resolved now), and its rows' shape.

    Raises:
        As :func:`read_topic`.
    """
    admin = Admin(cluster)
    (description,) = _described(admin, source)
    with _Lookups(cluster) as lookups:
        first = start_spec(source, description, lookups)
    return description.name, first, row_shape([description], source.include_headers)


def row_shape(descriptions: list[TopicDescription], include_headers: bool) -> RowShape:
    """The shape of rows read from the topics of ``descriptions`` (each one's
    ``message.timestamp.type``, from its description: a reader needs DESCRIBE on a topic, as
    Spark's Kafka source, not DESCRIBE_CONFIGS)."""
    return RowShape(
        {d.name: TIMESTAMP_TYPES[d.config["message.timestamp.type"]] for d in descriptions}, include_headers
    )


def _described(admin: Admin, source: SourceOptions) -> list[TopicDescription]:
    """The topics a read names (a pattern that matches none: no topics)."""
    if source.pattern is not None:
        names = [name for name in admin.list_topics() if source.pattern.fullmatch(name)]
        return admin.describe_topics(names) if names else []
    descriptions = admin.describe_topics(list(source.assign or source.topics))
    for description in descriptions:
        known = {p.partition for p in description.partitions}
        missing = set(_assigned(source, description)) - known
        if missing:
            raise UnknownTopicOrPartitionError(f"{description.name} has no partitions {sorted(missing)}")
    return descriptions


def _assigned(source: SourceOptions, description: TopicDescription) -> list[int]:
    """The partitions of ``description`` that the read covers."""
    if source.assign is not None:
        return list(source.assign[description.name])
    return [p.partition for p in description.partitions]


def start_spec(source: SourceOptions, description: TopicDescription, lookups: _Lookups) -> data.OffsetSpec:
    """Where the partitions of ``description`` start, from Spark's starting options (time
    before offsets, as Spark); "earliest" when none is given (a stream: for partitions its
    group never committed).

    Raises:
        OffsetOutOfRangeError: a starting time after a partition's last record, with
            ``startingOffsetsByTimestampStrategy`` "error".
        InvalidConfigError: JSON offsets of partitions that ``assign`` does not name.
    """
    if source.starting_timestamps is None:
        return _offsets_spec(source, source.starting, description, "earliest")
    spec: dict[int, data.PartitionSpec] = {}
    for partition, found in lookups.offsets_for_times(description, source.starting_timestamps).items():
        if found is not None:
            spec[partition] = found
        elif source.timestamp_strategy == "latest":
            spec[partition] = "latest"
        else:
            raise OffsetOutOfRangeError(
                f"{description.name}-{partition}: no record at or after the starting time "
                "(startingOffsetsByTimestampStrategy 'latest' starts there at the latest offset)"
            )
    return spec


def _end_spec(source: SourceOptions, description: TopicDescription, lookups: _Lookups) -> data.OffsetSpec:
    """Where the partitions of ``description`` end (time before offsets); a time after a
    partition's last record ends it at latest, as in Spark."""
    if source.ending_timestamps is None:
        return _offsets_spec(source, source.ending, description, "latest")
    found = lookups.offsets_for_times(description, source.ending_timestamps)
    return {partition: "latest" if offset is None else offset for partition, offset in found.items()}


def _offsets_spec(
    source: SourceOptions, offsets: str | spark_options.TopicOffsets | None, description: TopicDescription, default: str
) -> data.OffsetSpec:
    if offsets is None:
        return default
    if isinstance(offsets, str):
        return offsets
    spec = offsets.get(description.name, {})
    outside = set(spec) - set(_assigned(source, description))
    if source.assign is not None and outside:
        raise InvalidConfigError(f"offsets given for partitions of {description.name} not assigned: {sorted(outside)}")
    return dict(spec)


class _Lookups:
    """Offset look-ups for resolving a read's options, through one Consumer made on first use."""

    def __init__(self, cluster: RaylogCluster):
        self._cluster = cluster
        self._consumer: Consumer | None = None

    def __enter__(self) -> _Lookups:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self._consumer is not None:
            self._consumer.close()

    @property
    def consumer(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(self._cluster)
        return self._consumer

    def offsets_for_times(
        self, description: TopicDescription, times: int | spark_options.TopicTimestamps
    ) -> dict[int, int | None]:
        """For each partition given a time (every one for a single time), the first offset
        at or after it (None: no record is that recent)."""
        if isinstance(times, int):
            by_partition = {p.partition: times for p in description.partitions}
        else:
            by_partition = times.get(description.name, {})
        found = self.consumer.offsets_for_times(
            {TopicPartition(description.name, p): ms for p, ms in by_partition.items()}
        )
        return {tp.partition: None if hit is None else hit.offset for tp, hit in found.items()}

    def above_log_start(self, description: TopicDescription, spec: data.OffsetSpec) -> data.OffsetSpec:
        """``spec`` with every offset below its partition's log start moved up to it
        (``failOnDataLoss`` false), each move logged."""
        partitions = [TopicPartition(description.name, p.partition) for p in description.partitions]
        by_partition = spec if isinstance(spec, dict) else {tp.partition: spec for tp in partitions}
        offsets = {p: o for p, o in by_partition.items() if isinstance(o, int) and not isinstance(o, bool)}
        if not offsets:
            return spec
        log_start = self.consumer.beginning_offsets(partitions)
        moved = dict(by_partition)
        for partition, offset in offsets.items():
            first = log_start.get(TopicPartition(description.name, partition))
            if first is not None and offset < first:
                logger.warning(
                    "%s-%d: offset %d is below the log start %d (deleted); reading from %d (failOnDataLoss false)",
                    description.name,
                    partition,
                    offset,
                    first,
                    first,
                )
                moved[partition] = first
        return moved


def _ranges_dataset(cluster: RaylogCluster, ranges: dict[TopicPartition, tuple[int, int]]) -> ray.data.Dataset:
    """The records of ``ranges`` (every partition of the topics read) as a Ray dataset."""
    if not ranges:
        return ray.data.from_arrow(ARROW_SCHEMA.empty_table())
    start: dict[str, dict[int, int]] = {}
    end: dict[str, dict[int, int]] = {}
    for tp, (first, last) in ranges.items():
        start.setdefault(tp.topic, {})[tp.partition] = first
        end.setdefault(tp.topic, {})[tp.partition] = last
    return data.read_topic(sorted(start), start=start, end=end, cluster=cluster)


def ranges_to_spark(
    spark: SparkSession, cluster: RaylogCluster, ranges: dict[TopicPartition, tuple[int, int]], shape: RowShape
) -> DataFrame:
    """The records of ``ranges`` (``{TopicPartition: (start, end)}``, end exclusive) as a
    DataFrame of ``shape`` that Spark reads in its own tasks, one per range with records,
    when a query runs (each query reads the same ranges again).

    A topic that keeps its history as Parquet (``remote.storage.history.enable``) is read from
    those files where they cover a range: by Spark's own Parquet reader when the store is a
    filesystem Spark reads (``file://``, ``hdfs://``), else by the range's task through pyarrow;
    the rest of the range from the brokers."""
    histories = {topic: history_source(cluster, topic) for topic in sorted({tp.topic for tp in ranges})}
    tasks, files, covered = [], [], []
    for tp, (first, stop) in sorted(ranges.items()):
        history = histories[tp.topic]
        if first < stop and history is not None and _spark_reads(history.uri):
            plan = history.plan(tp.partition, first, stop, read_committed=True)
            if plan is not None and plan.files:
                files += [_spark_path(history.uri, path) for path in plan.paths]
                covered.append((tp, first, plan.history_end_offset))
                first = plan.history_end_offset
        if first < stop:
            tasks.append((tp.topic, tp.partition, first, stop))
    frames = [_history_frame(spark, files, covered, shape)] if files else []
    if tasks or not frames:
        # One Spark partition (one task) per range, as one Ray Data read task per range.
        rows = spark.sparkContext.parallelize(tasks, max(1, len(tasks)))
        frames.append(
            spark.createDataFrame(rows, "topic string, partition int, start long, end long").mapInArrow(
                functools.partial(_read_ranges, cluster, shape, histories), shape.spark_schema
            )
        )
    return functools.reduce(DataFrame.unionByName, frames)


def _spark_reads(uri: str) -> bool:
    """Whether Spark's executors read the store a URI names with their own Parquet reader
    (object stores need connectors a Spark installation may lack: pyarrow reads those)."""
    return urllib.parse.urlsplit(uri).scheme in ("file", "hdfs")


def _spark_path(uri: str, path: str) -> str:
    """A history file's path in the store (as ``pyarrow.fs`` names it) as a URI Spark reads."""
    parts = urllib.parse.urlsplit(uri)
    return f"file://{path}" if parts.scheme == "file" else f"{parts.scheme}://{parts.netloc}/{path.lstrip('/')}"


def _history_frame(
    spark: SparkSession, files: list[str], covered: list[tuple[TopicPartition, int, int]], shape: RowShape
) -> DataFrame:
    """The history files' rows of the ``covered`` ranges ``(partition, start, end)``, by
    Spark's Parquet reader (row groups outside the offsets skipped by their statistics)."""
    from pyspark.sql import functions as F  # noqa: N812 — Spark's own name for it

    wanted = functools.reduce(
        lambda a, b: a | b,
        [
            (F.col("topic") == tp.topic)
            & (F.col("partition") == tp.partition)
            & F.col("offset").between(start, end - 1)
            for tp, start, end in covered
        ],
    )
    frame = spark.read.schema(kafka_schema(True)).parquet(*files).where(wanted)
    return frame.select(*shape.spark_schema.fieldNames())


def _read_ranges(
    cluster: RaylogCluster,
    shape: RowShape,
    histories: dict[str, HistorySource | None],
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """In a Spark task: the records of each ``(topic, partition, start, end)`` row, as record
    batches of ``shape`` (``cluster`` unpickled here connects to Ray first); a topic's history
    files read through pyarrow where they cover the range."""
    for batch in batches:
        for topic, partition, start, end in zip(*(column.to_pylist() for column in batch.columns), strict=True):
            history = histories.get(topic)
            for table in data.read_range(cluster, TopicPartition(topic, partition), start, end, history=history):
                yield from shape.rows(table).to_batches()


def dataset_to_spark(
    spark: SparkSession, dataset: ray.data.Dataset, shape: RowShape
) -> tuple[DataFrame, Callable[[], None]]:
    """A dataset of :func:`raylog.data.read_topic` as a DataFrame of ``shape`` (read once,
    here), and a function that releases the blocks the DataFrame reads.

    Each block goes to Spark as Arrow IPC bytes in Ray's object store, which RayDP's JVM side
    reads directly (the path RayDP itself uses for ``from_spark`` data): no pandas in between,
    which is both faster and safe from pandas 3's Arrow-backed strings (chunked columns that
    PySpark cannot convert). Spark reads lazily, so the blocks are kept alive by RayDP's
    master actor, as RayDP's own ``to_spark`` does, until released (or Spark stops). A read
    without records becomes an empty DataFrame directly (RayDP needs at least one block).
    """
    dataset = dataset.materialize()
    if not dataset.count():
        return spark.createDataFrame([], shape.spark_schema), lambda: None
    blocks = [
        _arrow_ipc.remote(ref, shape) for bundle in dataset.iter_internal_ref_bundles() for ref in bundle.block_refs
    ]
    holder = ray.get_actor(spark.sparkContext.appName + RAYDP_SPARK_MASTER_SUFFIX)
    key = f"raylog-{uuid.uuid4().hex}"
    ray.get(holder.add_objects.remote(key, blocks))
    df = ray_dataset_to_spark_dataframe(spark, shape.arrow_schema, blocks)
    return df, lambda: holder.add_objects.remote(key, [])


@ray.remote(num_cpus=0.25)
def _arrow_ipc(block: pa.Table, shape: RowShape) -> bytes:
    """A block in ``shape`` as an Arrow IPC stream (the bytes RayDP's ObjectStoreReader reads)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, shape.arrow_schema) as writer:
        writer.write_table(shape.rows(block))
    return sink.getvalue().to_pybytes()


# --- writing -------------------------------------------------------------------------------

_INTEGRAL = (ByteType, ShortType, IntegerType, LongType)
_RESULT_SCHEMA = "records long, error string, message string"


def write_topic(
    df: DataFrame,
    topic: str | None = None,
    *,
    key_col: str | None = "key",
    value_col: str = "value",
    cluster: RaylogCluster | None = None,
    producer_config: dict[str, Any] | None = None,
) -> int:
    """Produce every row of ``df`` as Spark's Kafka sink does (``df.write.format("kafka")``),
    from Spark's tasks: one idempotent Producer per task, each flushed before its task ends.

    The DataFrame has Spark's Kafka sink columns: ``value`` (required), and optionally
    ``key``, ``headers``, ``topic`` and ``partition``; other columns are ignored, so a read's
    DataFrame can be written as it is. Keys and values are binary or string; headers
    array<struct<key: string, value: binary>>; a row's ``topic`` names its topic unless the
    ``topic`` argument is given (which wins, as Spark's ``topic`` option); a row's
    ``partition`` (an integer) names its partition, and where it is null, or there is no such
    column, keyed rows land on murmur2 of the key (as Kafka) and unkeyed rows are spread.

    As with Spark's sink, a failed write may have written some rows (at least once): a task
    that fails reports the first error, which is raised here after the other tasks ended.

    Args:
        df: a DataFrame of a RayDP session.
        topic: the topic of every row (None: each row's ``topic`` column).
        key_col: the key column, if not ``key`` (None: no keys).
        value_col: the value column, if not ``value``.
        cluster: from :func:`raylog.connect`; default ``raylog.connect()``.
        producer_config: keyword arguments for each task's :class:`Producer`.

    Returns:
        How many records were written.

    Raises:
        InvalidRecordError: no value column, a key column named but missing, a column of
            the wrong type, no topic (neither argument nor column) or a row whose topic is null.
        UnknownTopicOrPartitionError: a topic or partition that does not exist.
        RaylogError: as :meth:`Producer.send_arrow`, from a task.

    Example:
        >>> counts = df.groupBy("key").count().selectExpr("key", "cast(`count` as string) as value")  # doctest: +SKIP
        >>> write_topic(counts, "click-counts")                                                     # doctest: +SKIP
    """
    cluster = cluster or raylog.connect()
    columns = _sink_columns(df.schema, topic, key_col, value_col)
    if topic is not None:
        # Fail here, not in every task (as the tasks' user: their settings may name one).
        Admin(cluster, **security_settings(producer_config or {})).describe_topics([topic])
    write = functools.partial(_write_batches, cluster, topic, dict(producer_config or {}))
    results = df.select(*(df[name].alias(role) for role, name in columns.items())).mapInArrow(write, _RESULT_SCHEMA)
    rows = results.collect()
    failed = [row for row in rows if row.error is not None]
    if failed:
        raise _error(failed[0].error, failed[0].message)
    return sum(row.records for row in rows)


def _sink_columns(schema: StructType, topic: str | None, key_col: str | None, value_col: str) -> dict[str, str]:
    """The DataFrame's column for each role of Spark's Kafka sink (value, key, headers,
    topic, partition) that it has, checked."""
    types = {f.name: f.dataType for f in schema.fields}
    shape = "Spark's Kafka sink shape: value, and optionally key, headers, topic, partition"
    if value_col not in types:
        raise InvalidRecordError(f"no value column {value_col!r} ({shape}); columns: {sorted(types)}")
    columns = {"value": value_col}
    if key_col is not None and key_col in types:
        columns["key"] = key_col
    elif key_col not in (None, "key"):
        raise InvalidRecordError(f"no key column {key_col!r}; columns: {sorted(types)}")
    for role in ("headers", "topic", "partition"):
        if role in types and not (role == "topic" and topic is not None):
            columns[role] = role
    if topic is None and "topic" not in columns:
        raise InvalidRecordError(f"no topic: give the topic argument or a topic column ({shape})")
    headers_type = kafka_schema(include_headers=True)["headers"].dataType
    wanted: dict[str, tuple[tuple[type[DataType], ...], str]] = {
        "value": ((BinaryType, StringType), "binary or string"),
        "key": ((BinaryType, StringType), "binary or string"),
        "topic": ((StringType,), "string"),
        "partition": (_INTEGRAL, "an integer"),
    }
    for role, name in columns.items():
        got = types[name]
        if role == "headers" and not _same_type(got, headers_type):
            raise InvalidRecordError(f"headers must be {headers_type.simpleString()}, got {got.simpleString()}")
        if role != "headers" and not isinstance(got, wanted[role][0]):
            raise InvalidRecordError(f"{role} column {name!r} must be {wanted[role][1]}, got {got.simpleString()}")
    return columns


def _same_type(got: DataType, expected: DataType) -> bool:
    """Equal but for nullability."""
    if isinstance(got, ArrayType) and isinstance(expected, ArrayType):
        return _same_type(got.elementType, expected.elementType)
    if isinstance(got, StructType) and isinstance(expected, StructType):
        return [f.name for f in got.fields] == [f.name for f in expected.fields] and all(
            _same_type(a.dataType, b.dataType) for a, b in zip(got.fields, expected.fields, strict=True)
        )
    return got == expected


def _write_batches(
    cluster: RaylogCluster, topic: str | None, producer_config: dict[str, Any], batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """In a Spark task: send every row with one Producer, flush, and yield one row: records
    sent, and the raylog error that stopped the task (its class name and message), if any."""
    sent, error, producer = 0, None, None
    try:
        producer = Producer(cluster, **producer_config)
        futures = []
        for batch in batches:
            table = pa.Table.from_batches([batch])
            if "headers" in table.column_names:
                table = table.set_column(
                    table.column_names.index("headers"), "headers", table.column("headers").cast(HEADERS_TYPE)
                )
            for name, partition, rows in _destinations(table, topic):
                headers = "headers" if "headers" in rows.column_names else None
                futures.append(producer.send_arrow(name, rows, headers_column=headers, partition=partition))
                sent += rows.num_rows
        producer.flush()
        for future in futures:
            future.result()
    except errors.RaylogError as exc:
        error = exc
    finally:
        if producer is not None:
            producer.close()
    yield pa.RecordBatch.from_pydict(
        {
            "records": [0 if error else sent],
            "error": [None if error is None else type(error).__name__],
            "message": [None if error is None else str(error)],
        },
        schema=pa.schema([("records", pa.int64()), ("error", pa.string()), ("message", pa.string())]),
    )


def _destinations(table: pa.Table, topic: str | None) -> Iterator[tuple[str, int | None, pa.Table]]:
    """``table``'s rows by topic (the argument, else the topic column) and partition (the
    partition column; None where null or absent: the producer partitions)."""
    if topic is not None:
        by_topic = [(topic, table)]
    else:
        topics = table.column("topic")
        if topics.null_count:
            raise InvalidRecordError("a row's topic is null (give the topic argument, or a topic in every row)")
        by_topic = [(t, table.filter(pc.equal(topics, t))) for t in pc.unique(topics).to_pylist()]
    for name, rows in by_topic:
        if "partition" not in rows.column_names:
            yield name, None, rows
            continue
        partitions = rows.column("partition")
        if partitions.null_count:
            yield name, None, rows.filter(pc.is_null(partitions))
        for partition in pc.unique(partitions.drop_null()).to_pylist():
            yield name, partition, rows.filter(pc.equal(partitions, partition))


def _error(name: str, message: str) -> errors.RaylogError:
    """The raylog error a task reported by class name."""
    kind = getattr(errors, name, None)
    if isinstance(kind, type) and issubclass(kind, errors.RaylogError):
        return kind(message)
    return errors.RaylogError(f"{name}: {message}")
