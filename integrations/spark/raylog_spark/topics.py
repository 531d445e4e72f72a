"""Batch reads and writes between raylog topics and Spark DataFrames.

Both go through Ray Data: a read is :func:`raylog.data.read_topic` (one Ray task per
partition range, Arrow blocks) handed to Spark by RayDP's ``Dataset.to_spark``, which reads
the blocks from Ray's object store; a write is RayDP's ``ray.data.from_spark`` followed by
:func:`raylog.data.write_topic` (one idempotent producer per Ray task).
"""

from __future__ import annotations

from typing import Any

import ray.data
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_type
from pyspark.sql.types import StructField, StructType

from raylog import RaylogCluster, data
from raylog.clients.consumer import ARROW_SCHEMA


def read_topic(
    spark: SparkSession,
    topic: str,
    *,
    start: data.OffsetSpec = "earliest",
    end: data.OffsetSpec = "latest",
    cluster: RaylogCluster | None = None,
) -> DataFrame:
    """A DataFrame of the records of ``topic`` in ``[start, end)`` of each partition.

    Args:
        spark: a session from :func:`raylog_spark.init_spark` (RayDP).
        topic, start, end, cluster: as :func:`raylog.data.read_topic`.

    Returns:
        A DataFrame with columns topic (string), partition (int), offset (bigint),
        timestamp_ms (bigint), key (binary), value (binary), headers
        (array<struct<key: string, value: binary>>).

    Raises:
        UnknownTopicOrPartitionError, OffsetOutOfRangeError, ValueError: as
        :func:`raylog.data.read_topic`.

    Example:
        >>> df = read_topic(spark, "clicks", start={0: 100}, end="latest")  # doctest: +SKIP
        >>> df.selectExpr("cast(value as string)").show()                   # doctest: +SKIP
    """
    return dataset_to_spark(spark, data.read_topic(topic, start=start, end=end, cluster=cluster), topic)


def dataset_to_spark(spark: SparkSession, dataset: ray.data.Dataset, topic: str) -> DataFrame:
    """A dataset of :func:`raylog.data.read_topic` of ``topic`` as a DataFrame (read once, here).

    RayDP's ``to_spark`` needs at least one block and fails on empty blocks with nested
    columns (headers), so a read without records becomes an empty DataFrame directly. The
    constant topic column travels as a Spark literal: RayDP converts blocks through pandas,
    where pandas 3 keeps strings Arrow-backed, and a string column of several concatenated
    blocks then reaches PySpark chunked, which it cannot convert.
    """
    dataset = dataset.materialize()
    if dataset.count():
        df = dataset.drop_columns(["topic"]).to_spark(spark)
        return df.select(F.lit(topic).alias("topic"), *df.columns)
    fields = [StructField(f.name, from_arrow_type(f.type), f.nullable) for f in ARROW_SCHEMA]
    return spark.createDataFrame([], StructType(fields))


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
