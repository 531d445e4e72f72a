"""Partition reassignment and preferred-leader election on a real multi-node cluster."""

from __future__ import annotations

import ray

from raylog import Admin, NewTopic, Producer, TopicPartition
from tests.cluster.test_replication import read_values
from tests.helpers import wait_until


def test_reassignment_raises_the_replication_factor_and_moves_replicas(multinode):
    """A partition on one broker grows to three replicas (they fill by fetching), then moves
    off its first broker; the old replica goes only once the new ones are in sync, and no
    record is lost."""
    cluster, _ = multinode
    admin = Admin(cluster)
    topic = "reassigned"
    admin.create_topics([NewTopic(topic, 1, replication_factor=1, config={"replica.lag.time.max.ms": "2000"})])
    try:
        tp = TopicPartition(topic, 0)
        with Producer(cluster) as producer:
            for i in range(1_000):
                producer.send(topic, b"%d" % i)
        first = admin.describe_topics([topic])[0].partitions[0].replicas[0]
        others = [b for b in (0, 1, 2) if b != first]

        admin.alter_partition_reassignments({tp: [first, *others]})
        grown = wait_until(lambda: _settled(admin, topic, {0, 1, 2}), timeout_s=60, message="RF 3")
        assert grown.leader == first

        admin.alter_partition_reassignments({tp: others})
        moved = wait_until(lambda: _settled(admin, topic, set(others)), timeout_s=60, message="moved")
        assert moved.leader in others and moved.replicas == tuple(others)
        with Producer(cluster, acks="all") as producer:
            producer.send(topic, b"after").result(timeout=30)
        assert read_values(cluster, topic) == [b"%d" % i for i in range(1_000)] + [b"after"]
    finally:
        admin.delete_topics([topic])


def _settled(admin, topic, replicas):
    """The partition once its reassignment is done, on exactly ``replicas``, all in sync."""
    if admin.list_partition_reassignments():
        return None
    p = admin.describe_topics([topic])[0].partitions[0]
    return p if set(p.replicas) == replicas and set(p.isr) == replicas and p.leader >= 0 else None


def test_preferred_leader_election_on_request(multinode, replicated_topic):
    """After a fail-over, elect_leaders puts leadership back on the first replica. (The fail-over
    needs another in-sync replica: the leader is killed once all three are in sync, with the
    default replica.lag.time.max.ms, which a loaded machine's followers keep up with; at 2 s
    the ISR could shrink to the leader alone, and the leader's own restart then led again.)"""
    cluster, _ = multinode
    topic = replicated_topic()
    admin = Admin(cluster)
    wait_until(lambda: set(admin.describe_topics([topic])[0].partitions[0].isr) == {0, 1, 2}, timeout_s=60)
    preferred = admin.describe_topics([topic])[0].partitions[0].replicas[0]
    leader = cluster.metadata(refresh=True).leader(TopicPartition(topic, 0))
    ray.kill(leader, no_restart=False)
    wait_until(lambda: admin.describe_topics([topic])[0].partitions[0].leader not in (preferred, -1), timeout_s=30)
    wait_until(lambda: set(admin.describe_topics([topic])[0].partitions[0].isr) == {0, 1, 2}, timeout_s=60)
    assert admin.elect_leaders([topic]) == 1
    assert admin.describe_topics([topic])[0].partitions[0].leader == preferred
    with Producer(cluster, acks="all") as producer:
        producer.send(topic, b"ok").result(timeout=30)


def test_the_offsets_topic_is_replicated_with_two_in_sync_replicas_required(multinode):
    """Group commits are acks=all: __consumer_offsets has offsets.topic.replication.factor (3)
    replicas and min.insync.replicas 2, so one broker alone never holds a commit (it had 1)."""
    cluster, _ = multinode
    ray.get(cluster.controller.find_coordinator.remote("any-group"))  # created on first use
    admin = Admin(cluster)
    (offsets,) = admin.describe_topics(["__consumer_offsets"])
    assert {len(p.replicas) for p in offsets.partitions} == {3}
    assert admin.describe_configs(["__consumer_offsets"])["__consumer_offsets"]["min.insync.replicas"].value == "2"
