"""Kafka's classic group protocol where a member assigns: kafka-python and aiokafka consumers
with an assignor raylog does not run (a custom one, as Kafka Streams, Faust and KafkaJS
bring theirs). The members' vote picks it, the leader member is told every member's
subscription, its SyncGroup carries the assignment, and each member reads what the leader
gave it; Kafka's admin views show the members' own bytes. A raylog Consumer, which shares
no protocol with them, is refused as Kafka refuses such a member.

Each client runs the assignor in its own code: raylog only carries the bytes.
"""

from __future__ import annotations

import asyncio

import pytest

from raylog import Consumer
from raylog.errors import InconsistentGroupProtocolError
from tests.ray.kafka.test_groups_wire import (
    GROUP_SETTINGS,
    PARTITIONS,
    _group,
    _produce,
    drive,
    everything,
    polling_member,
)

#: The custom assignor's name: no consumer raylog assigns for proposes it.
CUSTOM = "raylog-test-lopsided"


def _lopsided(member_ids: list[str]) -> dict[str, list[int]]:
    """The custom rule: the member whose id sorts first gets partition 0 only, the others
    share the rest round-robin (no assignor raylog runs would split a topic so)."""
    first, *rest = sorted(member_ids)
    plan: dict[str, list[int]] = {m: [] for m in member_ids}
    plan[first].append(0)
    for i, partition in enumerate(range(1, PARTITIONS)):
        plan[(rest or [first])[i % len(rest or [first])]].append(partition)
    return plan


def _kafka_python_assignor():
    from kafka.coordinator.assignors.abstract import AbstractPartitionAssignor
    from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

    class Lopsided(AbstractPartitionAssignor):
        name = CUSTOM
        version = 0

        @classmethod
        def assign(cls, cluster, members):
            topics = sorted({t for m in members for t in m.metadata.topics})
            plan = _lopsided([m.member_id for m in members])
            return {
                member: ConsumerProtocolAssignment(0, [(t, partitions) for t in topics], b"lopsided")
                for member, partitions in plan.items()
            }

        @classmethod
        def metadata(cls, topics):
            return ConsumerProtocolSubscription(0, list(topics), b"lopsided")

        @classmethod
        def on_assignment(cls, assignment, generation=None):
            pass

    return Lopsided


def test_kafka_python_members_with_a_custom_assignor_take_the_leaders_assignment(kafka_cluster, bootstrap, kafka_topic):
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaConsumer

    topic = kafka_topic(num_partitions=PARTITIONS)
    counts = _produce(kafka_cluster, topic)
    group = _group()
    assignor = _kafka_python_assignor()
    settings = {**GROUP_SETTINGS, "partition_assignment_strategy": [assignor]}
    consumers = [KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, **settings) for _ in range(2)]
    members = [polling_member(c, f"kafka-python-{i}") for i, c in enumerate(consumers)]
    ours = None
    try:

        def lopsided_and_read() -> bool:
            owned = sorted(sorted(m.owned()) for m in members)
            return owned == [[0], list(range(1, PARTITIONS))] and all(m.at_end(counts) for m in members)

        drive(members, lopsided_and_read, "two kafka-python members holding the leader's lopsided assignment")
        assert set().union(*(m.read for m in members)) == everything(counts)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        described = admin.describe_consumer_groups([group], request_timeout=30)[group].result(timeout=60)
        assert described.partition_assignor == CUSTOM
        plan = _lopsided([m.member_id for m in described.members])
        for m in described.members:  # decoded from the bytes the leader sent
            assert sorted(tp.partition for tp in m.assignment.topic_partitions) == plan[m.member_id]
        ours = Consumer(kafka_cluster, topic, group_id=group, **GROUP_SETTINGS)  # raylog's assignors only
        with pytest.raises(InconsistentGroupProtocolError):
            ours.poll(timeout_ms=10_000)
    finally:
        if ours is not None:
            ours.close()
        for consumer in consumers:
            consumer.close()


def test_an_aiokafka_member_assigns_with_its_own_assignor(kafka_cluster, bootstrap, kafka_topic):
    """aiokafka's coordinator as the leader of a group whose protocol raylog does not run."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    class Renamed(RoundRobinPartitionAssignor):
        name = CUSTOM

    topic = kafka_topic(num_partitions=PARTITIONS)
    counts = _produce(kafka_cluster, topic)
    group = _group()

    async def consume() -> tuple[set[int], int]:
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            partition_assignment_strategy=[Renamed],
        )
        await consumer.start()
        try:
            read = 0
            while read < sum(counts.values()):
                batches = await asyncio.wait_for(consumer.getmany(timeout_ms=1_000), timeout=60)
                read += sum(len(records) for records in batches.values())
            return {tp.partition for tp in consumer.assignment()}, read
        finally:
            await consumer.stop()

    owned, read = asyncio.run(asyncio.wait_for(consume(), timeout=120))
    assert owned == set(range(PARTITIONS)) and read == sum(counts.values())  # a lone member gets all
