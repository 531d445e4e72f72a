"""Quiet runs: the main job's startup path prints only its own lines, and errors still show.

The subprocess test starts the main job's services (an embedded Ray and raylog, Spark on
RayDP) exactly as ``examples/clickstream_pipeline.py`` does, in a process of its own: what
reaches a terminal is that process's stdout and stderr, including the JVM's and Ray's. It
costs one Ray and Spark start-up (about 30 s on an idle machine).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading

import pytest

from raylog_spark import session

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")

#: What a quiet run must not print (Spark's log4j lines and notices, Ray's INFO lines, the
#: output of Ray's actors, deprecation warnings).
NOISE = {
    # (Spark's format, and Ray's Java client's, which RayDP's connection to Ray puts in place)
    "Spark's log4j lines": re.compile(r"^(\d\d/\d\d/\d\d|\d{4}-\d\d-\d\d) \d\d:\d\d:\d\d(,\d+)? (WARN|INFO) "),
    "log4j2's status errors": re.compile(r"StatusConsoleListener|StatusLogger"),
    "Spark's log level notice": re.compile(r"Setting default log level|To adjust logging level"),
    "Hadoop's native library warning": re.compile(r"NativeCodeLoader"),
    "Ray's native INFO lines": re.compile(r"^\[\d{4}-\d\d-\d\d [\d:,]+ I \d+ \d+\] "),
    "Ray's driver INFO lines": re.compile(r"Started a local Ray instance|Connecting to existing Ray cluster"),
    "Ray's token notice": re.compile(r"Token authentication is enabled"),
    "actor output": re.compile(r"^\S*\(\w+ pid=\d+"),
    "deprecation warnings": re.compile(r"DeprecationWarning"),
}

JOB_START = """
import sys
sys.path.insert(0, {examples!r})
import clickstream_pipeline as job
from _support import Progress, configure_output

progress = Progress()
configure_output(False, progress)
with job.services(False, progress) as (cluster, spark):
    print("sum", spark.range(1000).selectExpr("sum(id)").first()[0], flush=True)
    from pyspark.sql import functions as F

    @F.udf("long")
    def fail(x):
        raise ValueError("boom in a Spark task")

    spark.range(3).select(fail("id")).collect()
"""


def test_the_main_jobs_quiet_start_prints_its_own_lines_and_a_failures_cause():
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_LOG_TO_DRIVER", "PYTHONWARNINGS")}
    result = subprocess.run(
        [sys.executable, "-c", JOB_START.format(examples=EXAMPLES)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    out, err = result.stdout, result.stderr
    assert result.returncode == 1, out + err
    assert "sum 499500" in out.splitlines()
    first, second = err.splitlines()[:2]
    assert first == "starting raylog and Spark on Ray"
    assert re.fullmatch(r"raylog and Spark on Ray up in \d+ s", second)
    # The failure: Python's traceback, with the cause from the Spark task.
    assert "Traceback (most recent call last)" in err
    assert "ValueError: boom in a Spark task" in err
    noisy = {name: line for line in (out + err).splitlines() for name, noise in NOISE.items() if noise.search(line)}
    assert not noisy, noisy


def forwarded(written: list[bytes]) -> bytes:
    """What _forward_lines passes on of ``written`` (each item one write)."""
    source_read, source_write = os.pipe()
    sink_read, sink_write = os.pipe()
    forwarder = threading.Thread(target=session._forward_lines, args=(source_read, sink_write))
    forwarder.start()
    for data in written:
        os.write(source_write, data)
    os.close(source_write)
    forwarder.join(timeout=10)
    assert not forwarder.is_alive()
    with open(sink_read, "rb") as sink:
        return sink.read()


def test_the_driver_jvms_stderr_loses_only_rays_native_info_lines():
    info = b"[2026-11-26 01:52:51,470 I 7077 7281] gcs_client.cc:96: GcsClient has no Cluster ID set.\n"
    debug = b"[2026-11-26 01:52:51,471 D 7077 7281] core_worker.cc:10: details\n"
    warning = b"[2026-11-26 01:52:52,032 W 7077 7281] gcs_client.cc:120: a warning\n"
    error = b"26/11/26 01:52:46 ERROR SparkContext: Error initializing SparkContext.\n"
    trace = b"java.lang.OutOfMemoryError: Java heap space\n\tat Foo.bar(Foo.java:1)\n"
    assert forwarded([info, error, debug, warning, trace]) == error + warning + trace
    # Split writes: a Ray line in pieces is still recognised; other text passes at once, a
    # progress bar's carriage returns included, and an unfinished last line is kept.
    assert forwarded([info[:10], info[10:40], info[40:], b"[Stage 0:>  (0 + 1) / 2]\r", b"tail"]) == (
        b"[Stage 0:>  (0 + 1) / 2]\rtail"
    )


def test_init_spark_refuses_an_unknown_log_level_before_starting_anything():
    with pytest.raises(ValueError, match="log_level must be one of OFF, FATAL, ERROR, WARN"):
        session.init_spark("x", log_level="LOUD")


class FakeJvm:
    """Records the log4j2 configuration the driver JVM is told to load again."""

    def __init__(self) -> None:
        self.reloaded = []
        self.org = self.java = self
        self.apache = self.logging = self.log4j = self.core = self.config = self.Configurator = self.io = self

    def File(self, path):  # noqa: N802 (java.io.File)
        self.path = path
        return self

    def toURI(self):  # noqa: N802
        return self.path

    def reconfigure(self, uri):
        self.reloaded.append(uri)


@pytest.fixture
def raydp_calls(monkeypatch):
    """init_spark up to RayDP: the settings it passes, and what it does to the driver after."""
    calls = []
    jvm = FakeJvm()

    class Session:
        class sparkContext:  # noqa: N801
            _jvm = jvm

    def init_spark(app_name, num_executors, executor_cores, executor_memory, configs):
        calls.append(configs)
        return Session()

    monkeypatch.setattr(session.raydp, "init_spark", init_spark)
    monkeypatch.setattr(session.ray, "is_initialized", lambda: True)
    monkeypatch.setattr(session.ray, "cluster_resources", lambda: {"CPU": 2.0, "memory": 8.0 * (1 << 30)})
    monkeypatch.delenv(session.RAYDP_DRIVER_LOG4J_ENV, raising=False)
    return calls, jvm


def test_init_spark_gives_the_driver_its_log4j2_configuration_at_the_level_asked(raydp_calls):
    calls, jvm = raydp_calls
    session.init_spark("x", log_level="warn")
    settings = calls[-1]
    assert settings[session.RAYDP_DRIVER_LOG4J_KEY] == session.LOG4J2_CONFIG
    assert os.path.isfile(session.LOG4J2_CONFIG)
    assert settings["spark.driver.extraJavaOptions"].endswith(" -Draylog.spark.logLevel=WARN")
    assert settings["spark.ui.showConsoleProgress"] == "false"
    assert jvm.reloaded == [session.LOG4J2_CONFIG]  # again, after Ray's Java client replaced it


def test_init_spark_leaves_a_given_configuration_and_spark_defaults_alone(raydp_calls, monkeypatch):
    calls, jvm = raydp_calls
    session.init_spark("x", configs={session.RAYDP_DRIVER_LOG4J_KEY: "/etc/mine.properties"})
    assert calls[-1][session.RAYDP_DRIVER_LOG4J_KEY] == "/etc/mine.properties"
    monkeypatch.setenv(session.RAYDP_DRIVER_LOG4J_ENV, "/etc/site.properties")
    session.init_spark("x", configs={"spark.ui.showConsoleProgress": "true"})
    assert session.RAYDP_DRIVER_LOG4J_KEY not in calls[-1]  # RayDP reads the environment variable
    assert calls[-1]["spark.ui.showConsoleProgress"] == "true"
    session.init_spark("x", log_level=None)
    assert session.RAYDP_DRIVER_LOG4J_KEY not in calls[-1] and "spark.ui.showConsoleProgress" not in calls[-1]
    assert "raylog.spark.logLevel" not in calls[-1]["spark.driver.extraJavaOptions"]
    assert jvm.reloaded == []


def test_init_spark_points_the_drivers_raydp_agent_at_this_ray_sessions_log_directory(raydp_calls, monkeypatch):
    """Not at /tmp/ray/session_latest, which may be another session's or gone (the driver JVM
    then died at start: "processing of -javaagent failed")."""
    calls, _ = raydp_calls

    class Node:
        def get_logs_dir_path(self) -> str:
            return "/tmp/ray/session_x/logs"

    monkeypatch.setattr(session.ray._private.worker, "_global_node", Node())
    session.init_spark("x", log_level=None)
    assert "-Dray.logging.dir=/tmp/ray/session_x/logs" in calls[-1]["spark.driver.extraJavaOptions"]
