"""Identities of topics and log directories on a real multi-node cluster: a log belongs to
one incarnation of a topic (KIP-516)."""

from __future__ import annotations

import os

import ray

from raylog import Admin, Consumer, NewTopic, Producer, TopicPartition
from tests.cluster.test_replication import SAFE
from tests.helpers import wait_until


def _live(cluster) -> set[int]:
    return cluster.metadata(refresh=True).live


def _replica_states(cluster, topic: str) -> dict[tuple[int, int], dict]:
    handles = ray.get(cluster.controller.replica_handles.remote(topic), timeout=60)
    return {key: ray.get(handle.state.remote(), timeout=30) for key, handle in handles.items()}


def _all_values(cluster, topic: str, partitions: int, count: int) -> list[bytes]:
    """Every committed value of the topic's partitions, until ``count`` are read."""
    consumer = Consumer(cluster, auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    values: list[bytes] = []

    def polled_all() -> bool:
        values.extend(r.value for records in consumer.poll(timeout_ms=500).values() for r in records)
        return len(values) >= count

    wait_until(polled_all, timeout_s=60, message=f"{count} records")
    consumer.close()
    return values


def _in_sync(cluster, topic: str) -> bool:
    partitions = Admin(cluster).describe_topics([topic])[0].partitions
    return all(set(p.isr) == {0, 1, 2} and p.leader >= 0 for p in partitions)


def test_a_topic_deleted_while_a_broker_is_down_comes_back_without_its_old_records(multinode):
    """A topic deleted while one of its brokers is down, then created again with the same
    name once the broker is back, holds only its new records on every replica, and the
    broker's directories of the old topic are gone."""
    cluster, brokers = multinode
    admin = Admin(cluster)
    topic, partitions = "recreated", 3
    admin.create_topics([NewTopic(topic, partitions, replication_factor=3, config=SAFE)])
    with Producer(cluster, acks="all") as producer:
        for i in range(30):
            producer.send(topic, b"old-%d" % i, partition=i % partitions).result(timeout=30)
    old_id = admin.describe_topics([topic])[0].topic_id
    down = 2
    brokers.kill(down)
    wait_until(lambda: down not in _live(cluster), timeout_s=30, message="the broker seen down")
    admin.delete_topics([topic])
    brokers.start(down)
    wait_until(lambda: down in _live(cluster), timeout_s=60, message="the broker back")

    admin.create_topics([NewTopic(topic, partitions, replication_factor=3, config=SAFE)])
    try:
        new_id = admin.describe_topics([topic])[0].topic_id
        with Producer(cluster, acks="all") as producer:
            for i in range(6):
                producer.send(topic, b"new-%d" % i, partition=i % partitions).result(timeout=30)
        wait_until(lambda: _in_sync(cluster, topic), timeout_s=60, message="every replica in sync")
        values = _all_values(cluster, topic, partitions, 6)
        assert sorted(values) == sorted(b"new-%d" % i for i in range(6)), "old records in the new topic"
        ends = {key: state["log_end_offset"] for key, state in _replica_states(cluster, topic).items()}
        assert ends == {(p, b): 2 for p in range(partitions) for b in range(3)}, ends
        broker_dir = brokers.data_root / f"broker-{down}"
        names = [n for n in os.listdir(broker_dir) if n.startswith(topic)]
        assert not [n for n in names if new_id not in n], f"old directories left: {names} (old id {old_id})"
    finally:
        admin.delete_topics([topic])
