"""A raylog cluster whose brokers run Kafka listeners, for tests that speak Kafka's protocol
with outside clients (confluent-kafka, kafka-python, aiokafka, kcat).

``kafka_cluster`` is a second raylog cluster on the session's Ray (the session's own
``cluster`` runs no listeners): three brokers on this node, each with a listener on a free
port of 127.0.0.1, so that a topic can have three replicas and a client that bootstraps from
one listener finds the others. Package-scoped: it is shut down once this folder's tests are
done. Its internal topics have one partition and one replica each (every replica is a
process), and an empty group's first rebalance does not wait for more members
(``group.initial.rebalance.delay.ms`` 0, as Kafka's own integration tests set it), and
members of Kafka's consumer protocol heartbeat every second (not 5 s). It runs Kafka's ACLs
(``authorizer`` acl) with ``allow.everyone.if.no.acl.found``: every request of every test
here goes through the authorizer, and a resource no ACL names is open, so tests that do not
set ACLs are served as without them (tests that do set ACLs delete them afterwards: ``acls``).
Its handle's raylog clients are ``User:admin``, a super user made with the cluster.
``bootstrap`` is its listeners as a ``bootstrap.servers`` string.

``kafka_defaults_cluster`` is one broker with a listener that keeps Kafka's broker defaults
where raylog's own differ or tests change them: topics are created automatically (2
partitions each, so that a group can split one), groups wait 3 s before their first rebalance.

``kcat`` is the kcat command (``kcat`` or Debian's ``kafkacat``), installed when missing;
a kcat that cannot be had fails the test with the reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helpers import topic_factory, wait_until

NUM_BROKERS = 3
LISTENERS = "PLAINTEXT://127.0.0.1:0"
#: Where kcat's Debian packages are unpacked when it cannot be installed system-wide.
KCAT_CACHE = Path(__file__).resolve().parents[3] / ".cache" / "kcat"
KCAT_PACKAGES = ("kcat", "librdkafka1", "libyajl2")
#: Bound on one kcat run (its own timeouts are shorter).
KCAT_TIMEOUT_S = 60


@pytest.fixture(scope="package")
def kafka_cluster(cluster, tmp_path_factory, s3_server):
    """A raylog cluster of three brokers on this node, each running a Kafka listener, its
    tiered storage in an S3 bucket (moto's server on the loopback)."""
    import raylog

    handle = raylog.connect(
        data_dir=str(tmp_path_factory.mktemp("raylog-kafka")),
        num_brokers=NUM_BROKERS,
        cluster_name=f"k{uuid.uuid4().hex[:8]}",
        config={
            "listeners": LISTENERS,
            "offsets.topic.num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "group.initial.rebalance.delay.ms": "0",
            "group.consumer.heartbeat.interval.ms": "1000",
            "group.consumer.min.heartbeat.interval.ms": "1000",
            "authorizer": "acl",
            "allow.everyone.if.no.acl.found": "true",
            "super.users": "User:admin",
            # Tests here place leaders on purpose (test_admin_wire's preferred election
            # reorders a partition's replicas, then elects): the controller's own rebalance,
            # every leader.imbalance.check.interval.seconds, would race them (it moved that
            # partition between the test's describe and its election once, beside a busy core).
            "auto.leader.rebalance.enable": "false",
            "remote.log.storage.uri": s3_server.new_bucket(credentials="testing:testing"),
        },
        # raylog's own clients on this handle are admin (created with the cluster): tests
        # that deny everyone something still clean up with them.
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="admin",
        sasl_plain_password="admin-secret",
    )
    yield handle
    handle.shutdown()


@pytest.fixture(scope="package")
def kafka_defaults_cluster(cluster, tmp_path_factory):
    """See the module docstring."""
    import raylog

    handle = raylog.connect(
        data_dir=str(tmp_path_factory.mktemp("raylog-kafka-defaults")),
        num_brokers=1,
        cluster_name=f"d{uuid.uuid4().hex[:8]}",
        config={"listeners": LISTENERS, "auto.create.topics.enable": "true", "num.partitions": "2"},
    )
    yield handle
    handle.shutdown()


@pytest.fixture(scope="package")
def bootstrap(kafka_cluster) -> str:
    """``"host:port,host:port,host:port"``: every broker's listener."""
    servers = wait_until(
        lambda: _all_listeners(kafka_cluster), timeout_s=60, message=f"a listener on each of the {NUM_BROKERS} brokers"
    )
    return servers


def _all_listeners(kafka_cluster) -> str | None:
    servers = kafka_cluster.bootstrap_servers()
    return servers if len(servers.split(",")) == NUM_BROKERS else None


@pytest.fixture(scope="package")
def kafka_admin(kafka_cluster):
    from raylog import Admin

    return Admin(kafka_cluster)


@pytest.fixture
def kafka_topic(kafka_admin, request):
    """``kafka_topic(num_partitions=1, replication_factor=1, **config)`` creates a fresh topic on
    ``kafka_cluster``, every partition led; all are deleted after the test."""
    with topic_factory(kafka_admin, request.node.name) as make:
        yield make


@pytest.fixture
def read_back(kafka_cluster):
    """``read_back(topic, partitions=1)`` -> every record of the topic readable now, as
    raylog's own Consumer returns them, partition after partition in offset order."""
    from raylog import Consumer, TopicPartition

    def read(topic: str, partitions: int = 1) -> list:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        with Consumer(kafka_cluster, auto_offset_reset="earliest") as consumer:
            consumer.assign(tps)
            ends = consumer.end_offsets(tps)
            by_partition: dict = {tp: [] for tp in tps}
            while any(consumer.position(tp) < ends[tp] for tp in tps):
                for tp, records in consumer.poll(timeout_ms=1_000).items():
                    by_partition[tp] += records
            return [record for tp in tps for record in by_partition[tp]]

    return read


@dataclass(frozen=True)
class Kcat:
    """The kcat command and the environment it needs (its own libraries when unpacked)."""

    path: str
    env: dict[str, str] = field(default_factory=dict)

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        """Run kcat with ``args``; its exit code, stdout and stderr (text)."""
        return subprocess.run(
            [self.path, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=KCAT_TIMEOUT_S,
            env={**os.environ, **self.env},
            check=False,
        )


@pytest.fixture(scope="session")
def kcat() -> Kcat:
    """kcat from PATH; else installed with apt-get as root; else Debian's packages unpacked
    under the repository's ``.cache/kcat``. Fails (never skips) when none of these works."""
    found = shutil.which("kcat") or shutil.which("kafkacat")
    if found:
        return Kcat(found)
    tried: list[str] = []
    if os.geteuid() == 0 and not _attempt(["apt-get", "install", "-y", "kcat"], tried):
        # The package lists may be missing or stale.
        if _attempt(["apt-get", "update"], tried):
            _attempt(["apt-get", "install", "-y", "kcat"], tried)
    found = shutil.which("kcat") or shutil.which("kafkacat")
    if found:
        return Kcat(found)
    unpacked = _unpacked_kcat(tried)
    if unpacked:
        return unpacked
    pytest.fail("kcat is needed and could not be had:\n" + "\n".join(tried))


def _attempt(argv: list[str], tried: list[str], cwd: Path | None = None) -> bool:
    """Run ``argv``; note its outcome in ``tried``; whether it succeeded."""
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False, timeout=600)
    tried.append(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()[-500:]}")
    return done.returncode == 0


def _unpacked_kcat(tried: list[str]) -> Kcat | None:
    """kcat from Debian's packages downloaded and unpacked without installing them."""
    root = KCAT_CACHE / "root"
    binary = root / "usr" / "bin" / "kcat"
    if not binary.exists():
        KCAT_CACHE.mkdir(parents=True, exist_ok=True)
        _attempt(["apt-get", "download", *KCAT_PACKAGES], tried, cwd=KCAT_CACHE)
        for deb in sorted(KCAT_CACHE.glob("*.deb")):
            _attempt(["dpkg", "-x", str(deb), str(root)], tried)
    if not binary.exists():
        return None
    libraries = [str(d) for d in (root / "usr" / "lib").glob("*-linux-gnu")] + [str(root / "usr" / "lib")]
    inherited = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    return Kcat(str(binary), {"LD_LIBRARY_PATH": ":".join([*libraries, *inherited])})
