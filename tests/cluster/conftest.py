"""A real multi-node Ray cluster (ray.cluster_utils.Cluster) for replication and fault tests.

The head node hosts only the controller; three worker nodes labelled ``raylog.broker`` are
brokers 0, 1 and 2, each with its own data directory, so that removing a node kills a broker
for real. Nodes are declared dead fast (the soak's FAST_FAILURE_DETECTION). Package-scoped: the
cluster is gone before tests/ray starts its own single-node Ray.
"""

from __future__ import annotations

import uuid

import pytest
import ray
from ray.cluster_utils import Cluster

import raylog
from raylog import Admin, NewTopic
from raylog.chaos.soak import FAST_FAILURE_DETECTION, NODE_OBJECT_STORE_BYTES
from raylog.chaos.txn_copier import out_of_sync
from raylog.errors import RaylogError
from tests.helpers import wait_until


class Brokers:
    """The worker nodes that are brokers: kill one for real, bring it back on a new node."""

    def __init__(self, ray_cluster: Cluster, data_root):
        self.ray_cluster = ray_cluster
        self.data_root = data_root
        self.nodes: dict[int, object] = {}

    def start(self, broker_id: int) -> None:
        self.nodes[broker_id] = self.ray_cluster.add_node(
            num_cpus=1,
            object_store_memory=NODE_OBJECT_STORE_BYTES,
            labels={"raylog.broker": str(broker_id), "raylog.data_dir": str(self.data_root / f"broker-{broker_id}")},
        )

    def kill(self, broker_id: int) -> None:
        self.ray_cluster.remove_node(self.nodes.pop(broker_id), allow_graceful=False)


@pytest.fixture(scope="package")
def multinode(tmp_path_factory):
    """``(raylog cluster, Brokers)`` on a head plus three broker nodes."""
    ray_cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "object_store_memory": NODE_OBJECT_STORE_BYTES,
            "_system_config": FAST_FAILURE_DETECTION,
        },
    )
    brokers = Brokers(ray_cluster, tmp_path_factory.mktemp("brokers"))
    for broker_id in range(3):
        brokers.start(broker_id)
    ray_cluster.wait_for_nodes()
    ray.init(address=ray_cluster.address, configure_logging=False, log_to_driver=False)
    cluster = raylog.connect(
        address=ray_cluster.address,
        data_dir=str(tmp_path_factory.mktemp("controller")),
        cluster_name=f"m{uuid.uuid4().hex[:8]}",
        config={
            "node.check.interval.ms": "200",
            "auto.leader.rebalance.enable": "false",
            "group.initial.rebalance.delay.ms": "0",
        },
    )
    # A node still starting its first worker on a loaded machine registers a round later.
    wait_until(lambda: len(cluster.metadata(refresh=True).live) == 3, timeout_s=90, message="three brokers")
    yield cluster, brokers
    cluster.shutdown()
    ray.shutdown()
    ray_cluster.shutdown()


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
    cluster, _ = request.getfixturevalue("multinode")
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
