"""Consumer groups on a real multi-node Ray cluster: the group coordinator's node dies for
real, and no committed offset is lost (they live in the replicated ``__consumer_offsets``)."""

from __future__ import annotations

import uuid

import ray

from raylog import Admin, Consumer, OffsetAndMetadata, Producer, TopicPartition
from raylog.common.names import OFFSETS_TOPIC
from raylog.errors import RaylogError
from tests.helpers import wait_until

RECORDS = 60


def quietly(fn, *args):
    """``fn(*args)``, or None while the cluster is failing over."""
    try:
        return fn(*args)
    except (RaylogError, ray.exceptions.RayError):
        return None


def offsets_partition(admin: Admin, partition: int):
    (described,) = admin.describe_topics([OFFSETS_TOPIC])
    return described.partitions[partition]


def read_until(consumer: Consumer, read: list, count: int) -> None:
    wait_until(
        lambda: read.extend(r for rs in consumer.poll(timeout_ms=200).values() for r in rs) or len(read) >= count,
        timeout_s=60,
        message=f"{count} records read",
    )


def test_coordinator_node_dies_and_no_committed_offset_is_lost(multinode, replicated_topic):
    """Offsets committed to a group whose coordinator leads an RF=3 ``__consumer_offsets``
    partition survive the death of that leader's node: the new leader has every one, the
    member goes on committing to it, and a new member resumes exactly at the last commit."""
    cluster, brokers = multinode
    admin = Admin(cluster)
    topic = replicated_topic()
    tp = TopicPartition(topic, 0)
    with Producer(cluster, acks="all") as producer:
        for future in [producer.send(topic, b"%03d" % i) for i in range(RECORDS)]:
            future.result(timeout=30)
    group = f"faults-{uuid.uuid4().hex[:8]}"
    config = {
        "group_id": group,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "session_timeout_ms": 10_000,
        "heartbeat_interval_ms": 1_000,
        "max_poll_records": 10,
    }
    member = Consumer(cluster, topic, **config)
    killed = None
    try:
        read: list = []
        for checkpoint in (10, 20, 30):
            read_until(member, read, checkpoint)
            member.commit({tp: OffsetAndMetadata(checkpoint, f"checkpoint-{checkpoint}")})
        committed = admin.list_consumer_group_offsets(group)
        assert committed == {tp: OffsetAndMetadata(30, "checkpoint-30")}
        (described,) = admin.describe_consumer_groups([group])
        partition = described.coordinator_partition
        before = offsets_partition(admin, partition)
        assert len(before.replicas) == 3, "__consumer_offsets should be replicated on all three brokers"
        wait_until(lambda: len(offsets_partition(admin, partition).isr) == 3, timeout_s=60, message="a full ISR")
        before = offsets_partition(admin, partition)

        killed = before.leader
        brokers.kill_broker(killed)
        after = wait_until(
            lambda: (p := quietly(offsets_partition, admin, partition)) and p.leader not in (killed, -1) and p,
            timeout_s=60,
            message="a new coordinator",
        )
        assert after.leader in before.isr and after.leader_epoch > before.leader_epoch
        assert wait_until(lambda: quietly(admin.list_consumer_group_offsets, group), timeout_s=60) == committed

        # The member carries on with the new coordinator (its generation was loaded from the log).
        read_until(member, read, 40)
        member.commit({tp: OffsetAndMetadata(40, "after fail-over")})
        assert admin.list_consumer_group_offsets(group) == {tp: OffsetAndMetadata(40, "after fail-over")}
        member.close()

        fresh = Consumer(cluster, topic, **config)
        resumed: list = []
        read_until(fresh, resumed, 1)
        fresh.close()
        assert resumed[0].offset == 40, "a new member did not resume at the last committed offset"
    finally:
        member.close()
        if killed is not None:
            brokers.start_broker(killed)
    wait_until(
        lambda: all(len(p.isr) == 3 for p in admin.describe_topics([OFFSETS_TOPIC])[0].partitions),
        timeout_s=90,
        message="the broker back in every __consumer_offsets ISR",
    )
