"""A raylog client program for tests/cluster_yaml: a driver of the Ray cluster that
cluster.yaml's commands started (RAY_ADDRESS names it), attached to the raylog cluster that
their ``raylog start`` started (it never starts one itself, so that a failed start shows).

It reads one JSON request per line on stdin, ``[function, [args...]]``, runs the function
of this module by that name and answers one JSON line on stdout, ``{"result": ...}`` or
``{"error": "..."}``; it ends at the end of stdin. Everything else the process prints
(Ray's and raylog's logs) goes to stderr.

    python -m tests.cluster_yaml.driver     # from the repository root
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import threading
import traceback

import ray

from raylog import Admin, Consumer, NewTopic, Producer, RaylogCluster, TopicPartition
from raylog.actors.broker_finder import BROKER_LABEL
from raylog.common.names import NAMESPACE, controller_name
from raylog.errors import RaylogError

_cluster: RaylogCluster | None = None
CALL_TIMEOUT_S = 60
#: How long a replica has to answer ``state`` before it counts as unreachable.
REPLICA_ANSWER_S = 5


def _raylog() -> RaylogCluster:
    global _cluster
    if _cluster is None:
        ray.init(address="auto", configure_logging=False, log_to_driver=False)
        controller = ray.get_actor(controller_name("default"), namespace=NAMESPACE)
        _cluster = RaylogCluster("default", controller)
    return _cluster


def nodes() -> list[dict]:
    """Ray's node table: id, address, broker label, alive, head."""
    _raylog()
    return [
        {
            "node_id": n["NodeID"],
            "address": n["NodeManagerAddress"],
            "broker": n.get("Labels", {}).get(BROKER_LABEL),
            "alive": n["Alive"],
            "head": "node:__internal_head__" in n.get("Resources", {}),
        }
        for n in ray.nodes()
    ]


def brokers() -> dict:
    """The brokers the controller knows (Admin.describe_cluster) and which are live."""
    cluster = _raylog()
    described = Admin(cluster).describe_cluster()
    return {
        "brokers": {str(b): {"node_id": i.node_id, "data_dir": i.data_dir} for b, i in described.items()},
        "live": sorted(cluster.metadata().live),
    }


def create_topic(name: str, partitions: int, replication_factor: int, config: dict) -> None:
    Admin(_raylog()).create_topics(
        [NewTopic(name, partitions, replication_factor=replication_factor, config=config)], wait_for_leaders_ms=120_000
    )


def describe(name: str) -> list[dict]:
    """Each partition's leader, leader epoch, replicas and ISR, as the controller has them."""
    (topic,) = Admin(_raylog()).describe_topics([name])
    return [
        {"partition": p.partition, "leader": p.leader, "epoch": p.leader_epoch, "replicas": p.replicas, "isr": p.isr}
        for p in topic.partitions
    ]


def replica_states(name: str) -> list[dict]:
    """What each replica actor of the topic that answers says of itself: its partition,
    broker, the leader it knows and that leader's epoch (replicas on a dead machine do not
    answer and are left out)."""
    cluster = _raylog()
    handles = ray.get(cluster.controller.replica_handles.remote(name), timeout=CALL_TIMEOUT_S)
    refs = {h.state.remote(): key for key, h in handles.items()}
    ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=REPLICA_ANSWER_S)
    states = []
    for ref in ready:
        try:
            state = ray.get(ref)
        except ray.exceptions.RayError:
            continue
        partition, broker = refs[ref]
        states.append(
            {"partition": partition, "broker": broker, "leader": state["leader"], "epoch": state["leader_epoch"]}
        )
    return states


def produce(topic: str, values: list[str]) -> list[list]:
    """Send ``values`` with acks=all and wait for each: ``[value, partition, offset]`` each."""
    with Producer(_raylog(), acks="all") as producer:
        futures = [(v, producer.send(topic, v.encode())) for v in values]
        return [[v, m.partition, m.offset] for v, m in ((v, f.result(timeout=CALL_TIMEOUT_S)) for v, f in futures)]


def read_all(topic: str, partitions: int) -> list[list[str]] | None:
    """Every value of the topic up to the end each partition has now, a list per partition
    in offset order; None when a leader answered with a retriable error (e.g. a new leader
    not yet at the start of its epoch)."""
    by_partition = []
    try:
        with Consumer(_raylog(), auto_offset_reset="earliest") as consumer:
            for tp in (TopicPartition(topic, p) for p in range(partitions)):
                consumer.assign([tp])
                end = consumer.end_offsets([tp])[tp]
                values = []
                while consumer.position(tp) < end:
                    values += [r.value.decode() for r in consumer.poll(timeout_ms=1_000).get(tp, [])]
                by_partition.append(values)
    except RaylogError as exc:
        if not exc.retriable:
            raise
        return None
    return by_partition


class PacedWriter(threading.Thread):
    """Sends numbered values (``%07d``) with acks=all, one every ``interval_s``, until
    stopped; keeps those acknowledged, in the order their acknowledgements came. Paced so
    that the writes leave this 2-core host's CPU to the nodes starting and failing over."""

    def __init__(self, cluster: RaylogCluster, topic: str, interval_s: float):
        super().__init__(daemon=True)
        # A cluster handle of its own (a copy has its own metadata cache): only the
        # producer's own refreshes route it to a new leader, not the test's describes.
        self.producer = Producer(pickle.loads(pickle.dumps(cluster)), acks="all")
        self.topic = topic
        self.interval_s = interval_s
        self.acknowledged: list[bytes] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        sent = 0
        while not self.stopped.wait(self.interval_s):
            value = b"%07d" % sent
            self.producer.send(self.topic, value).add_callback(lambda v, _metadata: self.acknowledged.append(v), value)
            sent += 1

    def finish(self) -> list[bytes]:
        self.stopped.set()
        self.join(timeout=CALL_TIMEOUT_S)
        self.producer.close(timeout=CALL_TIMEOUT_S)  # every send acknowledged or failed
        return self.acknowledged


_writer: PacedWriter | None = None


def start_writer(topic: str, interval_s: float) -> None:
    """Start the :class:`PacedWriter`."""
    global _writer
    _writer = PacedWriter(_raylog(), topic, interval_s)
    _writer.start()


def acknowledged_count() -> int:
    """How many of the writer's values are acknowledged so far."""
    return len(_writer.acknowledged)


def acknowledged() -> list[str]:
    """The writer's values acknowledged so far."""
    return [v.decode() for v in list(_writer.acknowledged)]


def stop_writer() -> list[str]:
    """Stop the writer once every value it sent is acknowledged or failed; those acknowledged."""
    return [v.decode() for v in _writer.finish()]


def main() -> None:
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1, encoding="utf-8")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray prints cannot garble answers
    functions = {
        f.__name__: f
        for f in [
            nodes,
            brokers,
            create_topic,
            describe,
            replica_states,
            produce,
            read_all,
            start_writer,
            acknowledged_count,
            acknowledged,
            stop_writer,
        ]
    }
    for line in sys.stdin:
        name, args = json.loads(line)
        try:
            answer = {"result": functions[name](*args)}
        except Exception as exc:  # noqa: BLE001 — every failure goes back to the test
            traceback.print_exc()
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        answers.write(json.dumps(answer) + "\n")


if __name__ == "__main__":
    main()
