"""Start Spark on the running Ray cluster (RayDP) with the settings raylog's setting needs.

Two things are needed on JDK 17 (checked with ray 2.60, raydp 1.6.5, pyspark 3.5.7):

- Spark's Python workers must run the same interpreter as the driver (``PYSPARK_PYTHON``),
  or pickled functions and raylog's clients do not load there.
- Every JVM (driver, executors, RayDP's app master) needs ``--add-opens`` for the JDK
  packages Spark and Arrow reach into; without them ``ray.data.from_spark`` kills the
  executor with ``InaccessibleObjectException``.

Executor sizes default to half of the Ray cluster's CPUs, so that Ray Data's read tasks,
which feed ``to_spark``, always find CPUs of their own.

Logging: the driver JVM writes to this process's stderr, and by default it starts with
Spark's PySpark defaults (WARN, a notice of the level, a few startup warnings) and an error of
log4j2 on stdout (RayDP names a configuration file that is not there). ``init_spark`` gives
it ``log4j2.properties`` of this package instead, at the level asked (``log_level``, ERROR by
default) from its first line (and again once RayDP has connected it to Ray, whose Java client
puts its own configuration in place), and turns Spark's console progress bar off. The JVM's Ray
client (RayDP connects the driver to Ray) also writes two INFO lines of Ray's native code to
stderr before its log file is set up; Ray has no setting for those, so the JVM's stderr goes
through a filter that drops Ray's native INFO and DEBUG lines and passes everything else on.
``log_level=None`` keeps all of Spark's and Ray's own behaviour.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import threading
from collections.abc import Iterator

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
#: The driver's log4j2 configuration (its level from the system property below).
LOG4J2_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")
LOG_LEVEL_PROPERTY = "raylog.spark.logLevel"
#: log4j2's levels, as ``log_level`` accepts them.
LOG_LEVELS = ("OFF", "FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE", "ALL")
#: RayDP's setting, and environment variable, for the driver's log4j2 configuration file.
RAYDP_DRIVER_LOG4J_KEY, RAYDP_DRIVER_LOG4J_ENV = "spark.log4j.config.file.name", "SPARK_LOG4J_CONFIG_FILE_NAME"
#: A line of Ray's native (C++) logging at INFO or DEBUG: ``[2026-01-31 12:00:00,000 I 123 456] file.cc:96: ...``.
RAY_NATIVE_INFO_LINE = re.compile(rb"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [ID] \d+ \d+\] [\w.]+:\d+: ")
#: The start of such a line: "0" a digit, "I" the level (I or D), the rest as it is.
_RAY_NATIVE_START = b"[0000-00-00 00:00:00,000 I "

logger = logging.getLogger(__name__)


def java_options() -> str:
    """The ``--add-opens`` options every Spark JVM needs on JDK 17."""
    return " ".join(f"--add-opens=java.base/{package}=ALL-UNNAMED" for package in OPENED_JDK_PACKAGES)


def init_spark(
    app_name: str = "raylog",
    num_executors: int | None = None,
    executor_cores: int | None = None,
    executor_memory: str | None = None,
    configs: dict[str, str] | None = None,
    log_level: str | None = "ERROR",
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
        log_level: the Spark driver's log4j2 level from its first line ("ERROR", "WARN",
            "INFO", ...; ``sc.setLogLevel`` changes it later), with this package's
            configuration, no console progress bar and no Ray INFO lines from the JVM; None:
            Spark's and RayDP's own logging (WARN, startup notices). A configuration file given
            through RayDP (``spark.log4j.config.file.name`` in ``configs`` or the environment)
            takes precedence.

    Returns:
        The :class:`SparkSession`.

    Raises:
        ValueError: a size below 1, or a ``log_level`` that is not a log4j2 level.
        Exception: RayDP's, when a Spark session is already running in this process.

    Example:
        >>> spark = init_spark("report", configs={"spark.sql.shuffle.partitions": "8"})  # doctest: +SKIP
    """
    for name, value in (("num_executors", num_executors), ("executor_cores", executor_cores)):
        if value is not None and value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    level = _check_log_level(log_level)
    if not ray.is_initialized():
        raylog.connect()
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
    settings["spark.driver.extraJavaOptions"] += _driver_logging_dir()
    if level is None:
        return raydp.init_spark(app_name, num_executors, executor_cores, executor_memory, configs=settings)
    ours = RAYDP_DRIVER_LOG4J_KEY not in settings and RAYDP_DRIVER_LOG4J_ENV not in os.environ
    if ours and not os.path.isfile(LOG4J2_CONFIG):
        logger.warning(
            "%s is not installed (the package was built without its data files): the Spark driver logs "
            "with Spark's defaults",
            LOG4J2_CONFIG,
        )
        ours = False
    if ours:
        settings[RAYDP_DRIVER_LOG4J_KEY] = LOG4J2_CONFIG
    settings["spark.driver.extraJavaOptions"] += f" -D{LOG_LEVEL_PROPERTY}={level}"
    settings.setdefault("spark.ui.showConsoleProgress", "false")
    with _ray_native_info_filtered():  # the driver JVM starts in here and keeps the filtered stderr
        spark = raydp.init_spark(app_name, num_executors, executor_cores, executor_memory, configs=settings)
    if ours:
        # RayDP then connects the driver JVM to Ray, and Ray's Java client replaces the JVM's
        # log4j2 configuration with its own (WARN, to stdout): load this package's again.
        jvm = spark.sparkContext._jvm
        jvm.org.apache.logging.log4j.core.config.Configurator.reconfigure(jvm.java.io.File(LOG4J2_CONFIG).toURI())
    return spark


def _driver_logging_dir() -> str:
    """The Java option that puts the driver JVM's RayDP agent log in this Ray session's log
    directory, as RayDP does for its app master (with the same Ray internal): without it the
    agent writes under ``/tmp/ray/session_latest``, the session a Ray started last on this
    machine, and the JVM dies at start when that link points to a session removed since."""
    node = ray._private.worker._global_node
    return f" -Dray.logging.dir={node.get_logs_dir_path()}" if node is not None else ""


def _check_log_level(log_level: str | None) -> str | None:
    if log_level is None:
        return None
    if not isinstance(log_level, str) or log_level.upper() not in LOG_LEVELS:
        raise ValueError(f"log_level must be one of {', '.join(LOG_LEVELS)} or None, got {log_level!r}")
    return log_level.upper()


@contextlib.contextmanager
def _ray_native_info_filtered() -> Iterator[None]:
    """Child processes started inside this block (the Spark driver JVM) get a stderr that
    drops Ray's native INFO/DEBUG lines and passes everything else on to this process's
    stderr, for as long as they live.

    This process's own stderr goes through the same filter meanwhile (its lines are not Ray's
    native ones, so they pass) and is restored on leaving.
    """
    with contextlib.suppress(AttributeError, OSError, ValueError):
        sys.stderr.flush()  # what this process wrote before comes first
    try:
        target, saved = os.dup(2), os.dup(2)
    except OSError:  # no stderr at all: nothing to filter
        yield
        return
    read_end, write_end = os.pipe()
    threading.Thread(target=_forward_lines, args=(read_end, target), name="raylog-spark-stderr", daemon=True).start()
    os.dup2(write_end, 2)
    os.close(write_end)
    try:
        yield
    finally:
        with contextlib.suppress(AttributeError, OSError, ValueError):
            sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def _forward_lines(read_end: int, target: int) -> None:
    """Copy what arrives on ``read_end`` to ``target`` without Ray's native INFO lines, until
    every writer has closed the pipe. Only text that may begin such a line waits for its end
    of line; the rest (a progress bar's carriage returns, a prompt) passes at once."""
    with open(read_end, "rb", buffering=0) as source, open(target, "wb", buffering=0) as sink:
        pending = b""
        while chunk := source.read(65536):
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            kept = b"".join(line + b"\n" for line in lines if not RAY_NATIVE_INFO_LINE.match(line))
            if pending and (not _may_start_ray_native_line(pending) or len(pending) > 65536):
                kept, pending = kept + pending, b""
            _write(sink, kept)
        if not RAY_NATIVE_INFO_LINE.match(pending):
            _write(sink, pending)


def _may_start_ray_native_line(text: bytes) -> bool:
    for got, expected in zip(text, _RAY_NATIVE_START, strict=False):  # as far as text goes
        if expected == ord("0"):
            matches = ord("0") <= got <= ord("9")
        elif expected == ord("I"):
            matches = got in b"ID"
        else:
            matches = got == expected
        if not matches:
            return False
    return True


def _write(sink, data: bytes) -> None:
    if data:
        try:
            sink.write(data)
        except OSError:  # the terminal is gone: the JVM's output has nowhere to go
            logger.debug("the Spark driver's stderr could not be passed on", exc_info=True)
