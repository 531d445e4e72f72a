"""Start Spark on the running Ray cluster (RayDP) with the settings raylog's setting needs.

Two things are needed on JDK 17 (checked with ray 2.60, raydp 1.6.5, pyspark 3.5.7):

- Spark's Python workers must run the same interpreter as the driver (``PYSPARK_PYTHON``),
  or pickled functions and raylog's clients do not load there.
- Every JVM (driver, executors, RayDP's app master) needs ``--add-opens`` for the JDK
  packages Spark and Arrow reach into; without them ``ray.data.from_spark`` kills the
  executor with ``InaccessibleObjectException``.

Executor sizes default to half of the Ray cluster's CPUs, so that Ray Data's read tasks,
which feed ``to_spark``, always find CPUs of their own.
"""

from __future__ import annotations

import os
import sys

import ray
import raydp
from pyspark.sql import SparkSession

import raylog

#: JDK packages the Spark, Arrow and RayDP JVMs open to reflection on JDK 17.
OPENED_JDK_PACKAGES = (
    "java.lang",
    "java.math",
    "java.text",
    "java.time",
    "java.io",
    "java.net",
    "java.nio",
    "java.util",
    "java.util.concurrent",
    "java.util.concurrent.atomic",
    "java.util.regex",
    "java.util.zip",
    "java.lang.invoke",
    "java.lang.reflect",
    "sun.nio.ch",
    "sun.nio.cs",
    "sun.security.action",
    "sun.util.calendar",
)
#: The JVMs that get those options: executors, the driver and RayDP's app master.
JAVA_OPTIONS_KEYS = (
    "spark.executor.extraJavaOptions",
    "spark.driver.extraJavaOptions",
    "spark.ray.raydp_app_master.extraJavaOptions",
)
#: Cores per executor at most, when sizes are derived from the cluster.
MAX_DEFAULT_EXECUTOR_CORES = 4
#: Executor heap bounds, when derived from the cluster's memory (a quarter of it in all).
MIN_DEFAULT_EXECUTOR_MEMORY_MIB = 1024
MAX_DEFAULT_EXECUTOR_MEMORY_MIB = 8192


def java_options() -> str:
    """The ``--add-opens`` options every Spark JVM needs on JDK 17."""
    return " ".join(f"--add-opens=java.base/{package}=ALL-UNNAMED" for package in OPENED_JDK_PACKAGES)


def init_spark(
    app_name: str = "raylog",
    num_executors: int | None = None,
    executor_cores: int | None = None,
    executor_memory: str | None = None,
    configs: dict[str, str] | None = None,
) -> SparkSession:
    """Start Spark on Ray through RayDP (one session per process; ``raydp.stop_spark()`` ends it).

    Ray must be running (``raylog.connect()`` starts it, and raylog, when it is not).

    Args:
        app_name: the Spark application name.
        num_executors: executors (Ray actors); default: half the cluster's CPUs over
            ``executor_cores``, at least 1.
        executor_cores: cores per executor; default: half the cluster's CPUs, at most 4.
        executor_memory: heap per executor in Spark's notation ("2g", "512m"); default: a
            quarter of the cluster's memory over the executors, within 1-8 GiB.
        configs: more Spark settings; Java options given here are kept and the JDK 17 ones
            appended.

    Returns:
        The :class:`SparkSession`.

    Raises:
        ValueError: a size below 1.
        Exception: RayDP's, when a Spark session is already running in this process.

    Example:
        >>> spark = init_spark("report", configs={"spark.sql.shuffle.partitions": "8"})  # doctest: +SKIP
    """
    if not ray.is_initialized():
        raylog.connect()
    for name, value in (("num_executors", num_executors), ("executor_cores", executor_cores)):
        if value is not None and value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    resources = ray.cluster_resources()
    spark_cpus = max(1, int(resources.get("CPU", 1)) // 2)
    executor_cores = executor_cores or min(MAX_DEFAULT_EXECUTOR_CORES, spark_cpus)
    num_executors = num_executors or max(1, spark_cpus // executor_cores)
    if executor_memory is None:
        per_executor_mib = int(resources.get("memory", 0)) // 4 // num_executors // (1 << 20)
        executor_memory = (
            f"{min(MAX_DEFAULT_EXECUTOR_MEMORY_MIB, max(MIN_DEFAULT_EXECUTOR_MEMORY_MIB, per_executor_mib))}m"
        )
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings = dict(configs or {})
    for key in JAVA_OPTIONS_KEYS:
        settings[key] = f"{settings[key]} {java_options()}" if settings.get(key) else java_options()
    return raydp.init_spark(app_name, num_executors, executor_cores, executor_memory, configs=settings)
