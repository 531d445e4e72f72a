"""Kafka 4's consumer group protocol (KIP-848) with librdkafka's own implementation
(confluent-kafka, ``group.protocol=consumer``, otherwise its defaults): members join by
heartbeat, the coordinator assigns on the server and hands partitions over only once their
owner gave them up, each member learns its partitions' topics by id (Metadata v12), and
commits carry the member epoch."""

from __future__ import annotations

import time

from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import ConsumerGroupState, ConsumerGroupType
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient

#: Bound on each wait for the group to settle (a few heartbeat intervals of 5 s).
SETTLE_S = 60
PARTITIONS = 4
RECORDS = 40


def _member(bootstrap: str, group: str) -> KafkaConsumer:
    return KafkaConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )


def _poll_until(members: list[KafkaConsumer], done, what: str) -> dict[int, list[bytes]]:
    """Poll every member in turn until ``done(read)``; what each read, by member index."""
    read: dict[int, list[bytes]] = {i: [] for i in range(len(members))}
    deadline = time.monotonic() + SETTLE_S
    while not done(read, members):
        assert time.monotonic() < deadline, f"{what} not reached in {SETTLE_S} s: {read}"
        for i, member in enumerate(members):
            message = member.poll(0.2)
            if message is not None:
                assert message.error() is None, message.error()
                read[i].append(message.value())
    return read


def test_librdkafka_members_of_the_consumer_protocol_share_a_topic_commit_and_hand_partitions_over(
    bootstrap, kafka_topic
):
    topic = kafka_topic(num_partitions=PARTITIONS)
    group = f"{topic}-848"
    producer = KafkaProducer({"bootstrap.servers": bootstrap})
    values = [b"v%d" % i for i in range(RECORDS)]
    for i, value in enumerate(values):
        producer.produce(topic, value, partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    members = [_member(bootstrap, group), _member(bootstrap, group)]
    try:
        for member in members:
            member.subscribe([topic])

        def settled(read, members) -> bool:
            # Two partitions each, each read to its end by its owner. (A member that read before
            # the other joined gives half its partitions up uncommitted: the other reads them
            # again, as Kafka's consumers do.)
            if not all(len(m.assignment()) == PARTITIONS // 2 for m in members):
                return False
            return all(tp.offset == RECORDS // PARTITIONS for m in members for tp in m.position(m.assignment()))

        read = _poll_until(members, settled, "two partitions each, read to their end")
        assert {v for vs in read.values() for v in vs} == set(values)
        owned = [{tp.partition for tp in m.assignment()} for m in members]
        assert owned[0].isdisjoint(owned[1]) and owned[0] | owned[1] == set(range(PARTITIONS))
        for member in members:
            member.commit(asynchronous=False)  # (OffsetCommit v9: with the member's epoch)
        committed = members[0].committed([KafkaTopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        assert [c.offset for c in committed] == [RECORDS // PARTITIONS] * PARTITIONS
        admin = AdminClient({"bootstrap.servers": bootstrap})
        described = admin.describe_consumer_groups([group], request_timeout=20)[group].result(timeout=30)
        assert described.type == ConsumerGroupType.CONSUMER and described.state == ConsumerGroupState.STABLE
        assert sorted(len(m.assignment.topic_partitions) for m in described.members) == [2, 2]

        members.pop().close()  # leaves (epoch -1): the other takes every partition
        _poll_until(members, lambda read, ms: len(ms[0].assignment()) == PARTITIONS, "the survivor owning all")
    finally:
        for member in members:
            member.close()
