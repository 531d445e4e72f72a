"""raylog on Spark through RayDP: Spark running as actors on the same Ray cluster as raylog,
reading and writing topics as Spark's Kafka source and sink do.

- :func:`init_spark` starts Spark on Ray with what JDK 17 and this environment need.
- :func:`read_topic` reads topics into a DataFrame with the columns of Spark's Kafka source
  (:func:`kafka_schema`), taking its options (``subscribe``, ``startingOffsets``, ...; see
  :mod:`raylog_spark.options`), in Spark's own tasks on RayDP's executors (or,
  ``via="ray_data"``, through Ray Data and RayDP's object store reader); :func:`write_topic`
  writes a DataFrame of the Kafka sink's shape (value, and optionally key, headers, topic,
  partition) from Spark's tasks.
- :class:`MicroBatchStream` hands a topic to a function one micro-batch DataFrame at a time,
  committing a consumer group's offsets after each batch; given a ``transactional_id``, it
  produces the DataFrame the function returns to raylog topics exactly once (the output
  and the offsets in one transaction per batch).

Needs the ``spark`` extra (``pip install 'raylog[spark]'``: PySpark and RayDP) and JDK 17;
without them ``import raylog_spark`` raises an ImportError that says so.

Example:
    >>> import raylog, raylog_spark                                       # doctest: +SKIP
    >>> cluster = raylog.connect()                                        # doctest: +SKIP
    >>> spark = raylog_spark.init_spark("clicks-report")                  # doctest: +SKIP
    >>> df = raylog_spark.read_topic(spark, subscribe="clicks", startingOffsets="earliest")  # doctest: +SKIP
    >>> df.selectExpr("CAST(value AS STRING)").groupBy("value").count().show()              # doctest: +SKIP
"""

#: The modules the ``spark`` extra installs (py4j comes with PySpark).
SPARK_EXTRA_MODULES = ("pyspark", "py4j", "raydp")

try:
    import pyspark  # noqa: F401
    import raydp  # noqa: F401
except ModuleNotFoundError as exc:
    if (exc.name or "").partition(".")[0] not in SPARK_EXTRA_MODULES:
        raise
    raise ImportError(
        f"raylog_spark needs the spark extra, which is not installed (no module {exc.name!r}): "
        "pip install 'raylog[spark]' (Spark also needs JDK 17)",
        name=exc.name,
    ) from exc

from raylog_spark.session import init_spark, java_options  # noqa: E402
from raylog_spark.stream import MicroBatchStream  # noqa: E402
from raylog_spark.topics import READ_PATHS, kafka_schema, read_topic, write_topic  # noqa: E402

__all__ = [
    "READ_PATHS",
    "MicroBatchStream",
    "init_spark",
    "java_options",
    "kafka_schema",
    "read_topic",
    "write_topic",
]
