"""One Ray and one embedded raylog cluster shared by the tests that ask for ``cluster``
(tests/ray and tests/spark), started when the first of them runs.

Tests create their topics through the ``topic`` factory, which deletes them afterwards:
every partition is an actor process, so leaked topics would exhaust the machine.
tests/cluster does not use these: it runs its own multi-node Ray, package-scoped, which is
shut down before the first test here starts this one.
"""

from __future__ import annotations

import io
import sys
import uuid

import pytest

from tests.helpers import topic_factory

#: Small: tests move little data, and CI machines have 2 cores.
OBJECT_STORE_BYTES = 200 * 1024 * 1024


def pytest_configure(config):
    """Write raylog's bytecode caches before any Ray worker starts. Every replica is a process
    that imports raylog; where PYTHONDONTWRITEBYTECODE is set (as on the machines CI runs on)
    no import writes them, and each of those processes compiled raylog's sources again: about
    0.1 s of CPU each: a topic of 10 partitions x 3 replicas took 1.48x as long as 30 bare Ray
    actors to start with the compiling, 1.35-1.38x without (alternating runs on 2 cores)."""
    import compileall
    import os

    import raylog

    compileall.compile_dir(os.path.dirname(raylog.__file__), quiet=1)
    _without_ray_usage_stats()


#: The package whose tests share one multi-node Ray (tests/cluster/conftest.py).
MULTI_NODE_PACKAGE = "tests/cluster/"


def pytest_collection_modifyitems(items):
    """tests/cluster first, whatever order the paths were given in: a process holds one Ray
    connection, and the package's multi-node Ray must be shut down before the session's
    single-node one (``cluster``) starts in the same process."""
    items.sort(key=lambda item: not item.nodeid.startswith(MULTI_NODE_PACKAGE))


def pytest_xdist_make_scheduler(config, log):
    """How pytest-xdist shares the suite out (``-n 2`` in pyproject.toml): a module at a time,
    so that each module's clusters start once, in collection order, and tests/cluster whole,
    as the first unit of the worker that takes it (see pytest_collection_modifyitems)."""
    from xdist.scheduler import LoadScopeScheduling

    class ByModule(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return MULTI_NODE_PACKAGE if nodeid.startswith(MULTI_NODE_PACKAGE) else nodeid.split("::", 1)[0]

    config.option.loadscopereorder = False  # collection order: tests/cluster first
    return ByModule(config, log)


def _without_ray_usage_stats():
    """No usage stats from the test clusters (Ray's default is on). Besides a report agent on
    each head, they start in this process Ray Data's poller thread, which queries a Prometheus
    that is not there every 10 s and logs each failure with its traceback, for the rest of the
    session (it was formatting one while tests/unit parsed sources when CI failed with CPython
    3.11's "AST constructor recursion depth mismatch"), and a usage collection actor."""
    import os

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


#: The loggers that raylog.actors.logs.configure() sets up in an actor's process.
RAYLOG_LOGGERS = ("raylog", "raylog.coordination.group", "raylog.storage.log")


@pytest.fixture
def restored_raylog_logging():
    """This process's raylog loggers as they were before the test, for tests that set up an
    actor's logging here (an actor class run in-process calls ``logs.configure()``): other
    tests capture raylog's records through the root logger."""
    import logging

    saved = {n: (logging.getLogger(n).level, list(logging.getLogger(n).handlers)) for n in RAYLOG_LOGGERS}
    propagate = logging.getLogger("raylog").propagate
    yield
    for name, (level, handlers) in saved.items():
        logger = logging.getLogger(name)
        logger.setLevel(level)
        logger.handlers[:] = handlers
    logging.getLogger("raylog").propagate = propagate


@pytest.fixture(scope="session")
def s3_server():
    """The session's :class:`S3Server` (started by the first test that asks for it; moto is
    imported only then)."""
    import logging
    import os

    from tests.unit.object_store import S3Server

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ.setdefault(name, "testing")
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # not a line per request
    server = S3Server()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def remote_store_dir(tmp_path_factory) -> str:
    """The session cluster's tiered-storage store (remote.log.storage.uri), a local directory."""
    return str(tmp_path_factory.mktemp("remote-tier"))


@pytest.fixture(scope="session")
def cluster(tmp_path_factory, remote_store_dir):
    # Imported here so that tests/unit, which never asks for this fixture, stays free of Ray.
    import ray
    from ray.cluster_utils import Cluster

    import raylog

    # A one-node Ray, started as ray.init(address="local") would but without the log monitor:
    # it reads the session's log directory every 0.1 s to publish workers' output to drivers,
    # which these tests do not take (log_to_driver=False); with the ~700 workers of a session
    # behind it, it took about 30 s of CPU per 15 minutes.
    head = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 2,
            "object_store_memory": OBJECT_STORE_BYTES,
            "include_dashboard": False,
            "include_log_monitor": False,
        },
    )
    ray.init(address=head.address, configure_logging=False, log_to_driver=False)
    handle = raylog.connect(
        data_dir=str(tmp_path_factory.mktemp("raylog")),
        cluster_name=f"t{uuid.uuid4().hex[:8]}",
        # Each partition is a process. Groups form at the first join (as Kafka's own
        # integration tests set it): tests/ray/kafka checks the initial delay.
        config={
            "offsets.topic.num.partitions": "2",
            "transaction.state.log.num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0",
            # Members of Kafka's consumer protocol learn of a rebalance at their next heartbeat.
            "group.consumer.heartbeat.interval.ms": "500",
            "group.consumer.min.heartbeat.interval.ms": "500",
            # Tiered storage's store, for the topics that ask for it (tests/ray/test_tiered_storage.py).
            "remote.log.storage.uri": f"file://{remote_store_dir}",
        },
    )
    yield handle
    handle.shutdown()
    ray.shutdown()
    head.shutdown()


@pytest.fixture(scope="session")
def admin(cluster):
    from raylog import Admin

    return Admin(cluster)


@pytest.fixture
def topic(admin, request):
    """``topic(num_partitions=1, replication_factor=1, **config)`` creates a fresh topic, every
    partition led (tests call its leaders' actors directly); all are deleted after the test."""
    with topic_factory(admin, request.node.name) as make:
        yield make


@pytest.fixture
def run(cluster, capsys, monkeypatch):
    """``run(*argv, stdin=None, cluster_name=None)`` -> (exit code, stdout, stderr) of the
    ``raylog`` command, in-process, against the session's raylog cluster unless
    ``cluster_name`` is given."""
    from raylog import cli

    def invoke(*argv: str, stdin: str | None = None, cluster_name: str | None = None):
        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        code = cli.main([*argv, "--cluster-name", cluster_name or cluster.cluster_name])
        out, err = capsys.readouterr()
        return code, out, err

    return invoke
