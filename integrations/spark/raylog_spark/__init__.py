"""raylog on Spark through RayDP: Spark running as actors on the same Ray cluster as raylog.

- :func:`init_spark` starts Spark on Ray with what JDK 17 and this environment need.
- :func:`read_topic` reads a topic's records in Spark's own tasks on RayDP's executors (or,
  ``via="ray_data"``, through Ray Data and RayDP's object store reader); :func:`write_topic`
  writes a DataFrame through RayDP's ``from_spark`` and Ray Data (:mod:`raylog.data`).
- :class:`MicroBatchStream` hands a topic to a function one micro-batch DataFrame at a time,
  committing a consumer group's offsets after each batch; given a ``transactional_id``, it
  produces the DataFrame the function returns to raylog topics exactly once (the output
  and the offsets in one transaction per batch).

Example:
    >>> import raylog, raylog_spark                                       # doctest: +SKIP
    >>> cluster = raylog.connect()                                        # doctest: +SKIP
    >>> spark = raylog_spark.init_spark("clicks-report")                  # doctest: +SKIP
    >>> raylog_spark.read_topic(spark, "clicks").groupBy("partition").count().show()  # doctest: +SKIP
"""

from raylog_spark.session import init_spark, java_options
from raylog_spark.stream import MicroBatchStream
from raylog_spark.topics import READ_PATHS, read_topic, write_topic

__all__ = ["READ_PATHS", "MicroBatchStream", "init_spark", "java_options", "read_topic", "write_topic"]
