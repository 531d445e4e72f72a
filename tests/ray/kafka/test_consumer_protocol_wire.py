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


def _produce(bootstrap: str, topic: str) -> list[bytes]:
    """RECORDS values spread over the topic's partitions in turn; the values."""
    producer = KafkaProducer({"bootstrap.servers": bootstrap})
    values = [b"v%d" % i for i in range(RECORDS)]
    for i, value in enumerate(values):
        producer.produce(topic, value, partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    return values


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
    values = _produce(bootstrap, topic)
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


def test_a_raylog_consumer_of_the_consumer_protocol_shares_a_group_with_a_librdkafka_one(
    kafka_cluster, bootstrap, kafka_topic
):
    """raylog's own Consumer with ``group_protocol="consumer"`` joins the same KIP-848 group
    as librdkafka's: the coordinator's one implementation splits the partitions between them,
    each partition is read by one of them, both commit with their member epochs, and when the
    raylog member closes (epoch -1) librdkafka's takes every partition."""
    from raylog import Consumer, TopicPartition

    topic = kafka_topic(num_partitions=PARTITIONS)
    group = f"{topic}-mixed"
    values = _produce(bootstrap, topic)
    theirs = _member(bootstrap, group)
    ours = Consumer(
        kafka_cluster,
        group_id=group,
        group_protocol="consumer",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        theirs.subscribe([topic])
        ours.subscribe([topic])
        read: dict[str, list[bytes]] = {"theirs": [], "ours": []}
        deadline = time.monotonic() + SETTLE_S

        def settled() -> bool:
            if len(theirs.assignment()) != PARTITIONS // 2 or len(ours.assignment()) != PARTITIONS // 2:
                return False
            ends = RECORDS // PARTITIONS
            return all(tp.offset == ends for tp in theirs.position(theirs.assignment())) and all(
                ours.position(tp) == ends for tp in ours.assignment()
            )

        while not settled():
            assert time.monotonic() < deadline, f"two partitions each, read to their end, not reached: {read}"
            message = theirs.poll(0.2)
            if message is not None:
                assert message.error() is None, message.error()
                read["theirs"].append(message.value())
            for records in ours.poll(timeout_ms=200).values():
                read["ours"] += [r.value for r in records]
        assert set(read["theirs"]) | set(read["ours"]) == set(values)
        mine = {tp.partition for tp in ours.assignment()}
        assert mine.isdisjoint({tp.partition for tp in theirs.assignment()})
        ours.commit()  # (with its member epoch)
        theirs.commit(asynchronous=False)
        committed = ours.committed([TopicPartition(topic, p) for p in range(PARTITIONS)])
        assert [c.offset for c in committed.values()] == [RECORDS // PARTITIONS] * PARTITIONS

        ours.close()  # leaves with epoch -1: librdkafka's member takes every partition
        _poll_until([theirs], lambda read, ms: len(ms[0].assignment()) == PARTITIONS, "librdkafka's owning all")
    finally:
        ours.close()
        theirs.close()
