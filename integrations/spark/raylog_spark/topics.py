"""Batch reads and writes between raylog topics and Spark DataFrames.

A read runs in Spark's own tasks on RayDP's executors by default: one task per partition
range, each a Consumer (:func:`raylog.data.read_range`) whose Arrow record batches go to Spark
through ``mapInArrow``. Or, ``via="ray_data"``, it is :func:`raylog.data.read_topic` (one Ray
task per range, Arrow blocks) handed to Spark as Arrow IPC bytes that RayDP's JVM reader takes
from Ray's object store (:func:`dataset_to_spark`). A write is RayDP's ``ray.data.from_spark``
followed by :func:`raylog.data.write_topic` (one idempotent producer per Ray task).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import ray
import ray.data
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_type
from pyspark.sql.types import StructField, StructType
from raydp.spark.dataset import ray_dataset_to_spark_dataframe
from raydp.spark.ray_cluster_master import RAYDP_SPARK_MASTER_SUFFIX

import raylog
from raylog import RaylogCluster, TopicPartition, data
from raylog.clients.consumer import ARROW_SCHEMA

#: Where :func:`read_topic` reads: in Spark's tasks, or in Ray Data's.
READ_PATHS = ("executors", "ray_data")


def read_topic(
    spark: SparkSession,
    topic: str,
    *,
    start: data.OffsetSpec = "earliest",
    end: data.OffsetSpec = "latest",
    cluster: RaylogCluster | None = None,
    via: str = "executors",
) -> DataFrame:
    """A DataFrame of the records of ``topic`` in ``[start, end)`` of each partition.

    Args:
        spark: a session from :func:`raylog_spark.init_spark` (RayDP).
        topic, start, end, cluster: as :func:`raylog.data.read_topic`.
        via: "executors" (each partition range read by a Spark task on RayDP's executors,
            lazily, when Spark runs the query) or "ray_data" (read at once by Ray Data's
            tasks, the blocks handed to Spark through Ray's object store). See
            ``benchmarks/spark_bench.py`` for both measured.

    Returns:
        A DataFrame with columns topic (string), partition (int), offset (bigint),
        timestamp_ms (bigint), key (binary), value (binary), headers
        (array<struct<key: string, value: binary>>).

    Raises:
        UnknownTopicOrPartitionError, OffsetOutOfRangeError, ValueError: as
        :func:`raylog.data.read_topic`; ValueError: ``via`` is not one of READ_PATHS.

    Example:
        >>> df = read_topic(spark, "clicks", start={0: 100}, end="latest")  # doctest: +SKIP
        >>> df.selectExpr("cast(value as string)").show()                   # doctest: +SKIP
    """
    check_read_path(via)
    cluster = cluster or raylog.connect()
    if via == "ray_data":
        df, _ = dataset_to_spark(spark, data.read_topic(topic, start=start, end=end, cluster=cluster))
        return df
    return ranges_to_spark(spark, cluster, data.topic_ranges(topic, start=start, end=end, cluster=cluster))


def check_read_path(via: str) -> None:
    """Raises ValueError unless ``via`` is one of READ_PATHS."""
    if via not in READ_PATHS:
        raise ValueError(f"via must be one of {READ_PATHS}, got {via!r}")


def ranges_to_spark(
    spark: SparkSession, cluster: RaylogCluster, ranges: dict[TopicPartition, tuple[int, int]]
) -> DataFrame:
    """The records of ``ranges`` (``{TopicPartition: (start, end)}``, end exclusive) as a
    DataFrame that Spark reads in its own tasks, one per range with records, when a query
    runs (each query reads the same ranges again)."""
    tasks = [(tp.topic, tp.partition, first, stop) for tp, (first, stop) in sorted(ranges.items()) if first < stop]
    schema = _spark_schema()
    if not tasks:
        return spark.createDataFrame([], schema)
    # One Spark partition (one task) per range, as one Ray Data read task per range.
    rows = spark.sparkContext.parallelize(tasks, len(tasks))
    return spark.createDataFrame(rows, "topic string, partition int, start long, end long").mapInArrow(
        functools.partial(_read_ranges, cluster), schema
    )


def _read_ranges(cluster: RaylogCluster, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """In a Spark task: the records of each ``(topic, partition, start, end)`` row, as record
    batches of ARROW_SCHEMA (``cluster`` unpickled here connects to Ray first)."""
    for batch in batches:
        for topic, partition, start, end in zip(*(column.to_pylist() for column in batch.columns), strict=True):
            for table in data.read_range(cluster, TopicPartition(topic, partition), start, end):
                yield from table.cast(ARROW_SCHEMA).to_batches()


def _spark_schema() -> StructType:
    return StructType([StructField(f.name, from_arrow_type(f.type), f.nullable) for f in ARROW_SCHEMA])


def dataset_to_spark(spark: SparkSession, dataset: ray.data.Dataset) -> tuple[DataFrame, Callable[[], None]]:
    """A dataset of :func:`raylog.data.read_topic` as a DataFrame (read once, here), and a
    function that releases the blocks the DataFrame reads.

    Each block goes to Spark as Arrow IPC bytes in Ray's object store, which RayDP's JVM side
    reads directly (the path RayDP itself uses for ``from_spark`` data): no pandas in between,
    which is both faster and safe from pandas 3's Arrow-backed strings (chunked columns that
    PySpark cannot convert). Spark reads lazily, so the blocks are kept alive by RayDP's
    master actor, as RayDP's own ``to_spark`` does, until released (or Spark stops). A read
    without records becomes an empty DataFrame directly (RayDP needs at least one block).
    """
    dataset = dataset.materialize()
    if not dataset.count():
        return spark.createDataFrame([], _spark_schema()), lambda: None
    blocks = [_arrow_ipc.remote(ref) for bundle in dataset.iter_internal_ref_bundles() for ref in bundle.block_refs]
    holder = ray.get_actor(spark.sparkContext.appName + RAYDP_SPARK_MASTER_SUFFIX)
    key = f"raylog-{uuid.uuid4().hex}"
    ray.get(holder.add_objects.remote(key, blocks))
    return ray_dataset_to_spark_dataframe(spark, ARROW_SCHEMA, blocks), lambda: holder.add_objects.remote(key, [])


@ray.remote(num_cpus=0.25)
def _arrow_ipc(block: pa.Table) -> bytes:
    """A block as an Arrow IPC stream (the bytes RayDP's ObjectStoreReader reads)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, ARROW_SCHEMA) as writer:
        writer.write_table(block.cast(ARROW_SCHEMA))
    return sink.getvalue().to_pybytes()


def write_topic(
    df: DataFrame,
    topic: str,
    *,
    key_col: str | None = "key",
    value_col: str = "value",
    cluster: RaylogCluster | None = None,
    producer_config: dict[str, Any] | None = None,
) -> int:
    """Produce every row of ``df`` to ``topic`` (keyed rows on murmur2 of the key, as Kafka).

    Args:
        df: a DataFrame of a RayDP session.
        topic: an existing topic.
        key_col: the key column, binary or string (None: no keys).
        value_col: the value column, binary or string.
        cluster, producer_config: as :func:`raylog.data.write_topic`.

    Returns:
        How many records were written.

    Raises:
        UnknownTopicOrPartitionError, InvalidRecordError: as :func:`raylog.data.write_topic`.
        pyspark.errors.AnalysisException: a column that ``df`` does not have.

    Example:
        >>> counts = df.groupBy("key").count().selectExpr("key", "cast(`count` as string) as value")  # doctest: +SKIP
        >>> write_topic(counts, "click-counts")                                                     # doctest: +SKIP
    """
    columns = [value_col] if key_col is None else [key_col, value_col]
    dataset = ray.data.from_spark(df.select(*columns))
    return data.write_topic(
        dataset, topic, key=key_col, value=value_col, cluster=cluster, producer_config=producer_config
    )
