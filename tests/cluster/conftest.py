"""A real multi-node Ray cluster (ray.cluster_utils.Cluster) for the replication, identity,
group and transaction fault tests and the seeded fault runs judged by the checker.

One :class:`raylog.chaos.soak.SoakCluster` serves them all: the head node hosts only the
controller; three worker nodes labelled ``raylog.broker`` are brokers 0, 1 and 2, each with
its own data directory and a Kafka listener, so that removing a node kills a broker for real.
Nodes are declared dead fast (FAST_FAILURE_DETECTION). Its internal topics have one partition
each (each partition is three processes, started again with every broker brought back).
Tests that kill brokers bring them back; each fault run makes its own topic and groups and
deletes them. Package-scoped: the cluster is gone before tests/ray starts its own single-node
Ray.
"""

from __future__ import annotations

import pytest
import ray

from raylog import Admin, NewTopic
from raylog.chaos.soak import SoakCluster
from raylog.chaos.txn_copier import out_of_sync
from raylog.errors import RaylogError
from tests.helpers import wait_until

#: On top of the soak's controller settings: a group's first rebalance does not wait for more
#: members (as Kafka's own integration tests set it).
CONFIG = {"group.initial.rebalance.delay.ms": "0"}


@pytest.fixture(scope="package")
def soak_env(tmp_path_factory):
    """The package's SoakCluster (its ``cluster`` the raylog cluster, ``kill_broker`` and
    ``start_broker`` a broker's node), tiered storage in a directory every node shares."""
    config = {**CONFIG, "remote.log.storage.uri": f"file://{tmp_path_factory.mktemp('remote-tier')}"}
    with SoakCluster(data_root=str(tmp_path_factory.mktemp("brokers")), listeners=True, config=config) as env:
        yield env


@pytest.fixture
def multinode(soak_env):
    """``(raylog cluster, SoakCluster)``; a test that uses it leaves every partition whole."""
    return soak_env.cluster, soak_env


def not_told(cluster, admin: Admin, topics: list[str]) -> list[str]:
    """The replicas of ``topics`` whose own state (leader, epochs, ISR) is not the controller's:
    every decision must reach every running replica (Kafka's LeaderAndIsr), or a leader serves
    an epoch that moved on, or never learns that it leads.

    Raises:
        RaylogError, RayError: a controller failing over.
    """
    left = []
    for t in admin.describe_topics(topics):
        handles = ray.get(cluster.controller.replica_handles.remote(t.name), timeout=60)
        for p in t.partitions:
            want = (p.leader, p.leader_epoch, p.partition_epoch, sorted(p.isr))
            for broker in p.replicas:
                handle = handles.get((p.partition, broker))
                held = ray.get(handle.state.remote(), timeout=10) if handle is not None else None
                if held is None:
                    left.append(f"{t.name}-{p.partition}: no replica actor on broker {broker}")
                elif (held["leader"], held["leader_epoch"], held["partition_epoch"], sorted(held["isr"])) != want:
                    left.append(f"{t.name}-{p.partition}: broker {broker} holds {held}, the controller {want}")
    return left


#: How long a test's teardown waits for the cluster it shares to be whole again.
HEALED_TIMEOUT_S = 60


@pytest.fixture(autouse=True)
def leaves_the_cluster_whole(request):
    """After each test on the shared cluster: every partition (internal topics included) has
    a leader and all its replicas in sync, and every replica holds the controller's state of
    it, within HEALED_TIMEOUT_S; else the test that left it broken fails here (not a later test
    that happens to need the partition)."""
    yield
    if "multinode" not in request.fixturenames:
        return
    cluster = request.getfixturevalue("soak_env").cluster
    admin = Admin(cluster)

    left: list[str] = []

    def whole() -> bool:
        try:
            topics = admin.list_topics(include_internal=True)
            left[:] = out_of_sync(admin, topics) or not_told(cluster, admin, topics)
        except (RaylogError, ray.exceptions.RayError) as exc:  # (a controller restarting)
            left[:] = [f"{type(exc).__name__}: {exc}"]
        return not left

    try:
        wait_until(whole, timeout_s=HEALED_TIMEOUT_S, interval_s=0.5)
    except AssertionError:
        pytest.fail(f"{request.node.name} left partitions without a leader or out of sync: {left}")


@pytest.fixture
def replicated_topic(multinode, request):
    """``replicated_topic(**config)``: a fresh 1-partition topic with replication factor 3, its
    leader running (tests call its actor)."""
    cluster, _ = multinode
    admin = Admin(cluster)
    created = []

    def make(**config) -> str:
        name = f"{request.node.name[:30]}-{len(created)}".replace("[", "_").replace("]", "_")
        admin.create_topics([NewTopic(name, 1, replication_factor=3, config=config)], wait_for_leaders_ms=60_000)
        created.append(name)
        return name

    yield make
    if created:
        admin.delete_topics(created)
