"""Consumer groups over Kafka's protocol, with real clients against raylog's listeners:
confluent-kafka (librdkafka) groups of two members sharing a topic, kafka-python's group
consumer, a group mixing a raylog Consumer and a confluent-kafka one, commits seen by
raylog's own Admin and Consumer, and the admin views (ListGroups, DescribeGroups,
OffsetFetch) as Kafka's admin clients read them.

Every wait is bounded: each consumer is polled by a thread of its own until the test sees
the state it expects.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable, Iterable

import pytest

from raylog import Admin, Consumer, OffsetAndMetadata, Producer, TopicPartition
from raylog.errors import GroupIdNotFoundError
from tests.helpers import wait_until

PARTITIONS = 4
RECORDS = 40
#: Bound on reaching a group state (rebalances included).
GROUP_TIMEOUT_S = 90
#: Short heartbeats: members hear of a rebalance within this many ms.
HEARTBEAT_MS = 300
#: kafka-python's KafkaConsumer and raylog's Consumer take the same settings.
GROUP_SETTINGS = {
    "auto_offset_reset": "earliest",
    "enable_auto_commit": False,
    "heartbeat_interval_ms": HEARTBEAT_MS,
    "session_timeout_ms": 10_000,
}


def _group() -> str:
    return f"g-{uuid.uuid4().hex[:10]}"


def _produce(cluster, topic: str) -> dict[int, int]:
    """RECORDS keyed records through raylog's Producer; ``{partition: count}``."""
    with Producer(cluster, acks="all") as producer:
        futures = [producer.send(topic, f"v{i}".encode(), key=f"k{i}".encode()) for i in range(RECORDS)]
        landed = [f.get(timeout=30) for f in futures]
    counts = dict.fromkeys(range(PARTITIONS), 0)
    for metadata in landed:
        counts[metadata.partition] += 1
    return counts


def _confluent(bootstrap: str, group: str, strategy: str, **extra):
    from confluent_kafka import Consumer as KafkaConsumer

    return KafkaConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "partition.assignment.strategy": strategy,
            "heartbeat.interval.ms": HEARTBEAT_MS,
            "session.timeout.ms": 10_000,
            "topic.metadata.refresh.interval.ms": 1_000,
            **extra,
        }
    )


class Member:
    """A consumer in the test: polled by a thread of its own (as applications poll), which
    after each poll notes what it read, what it owns and its positions there; the test reads
    only those notes."""

    def __init__(self, name: str, consumer, poll: Callable[[], Iterable[tuple[int, int]]], position):
        self.name, self.consumer, self._poll, self._position = name, consumer, poll, position
        self._lock = threading.Lock()
        self._read: set[tuple[int, int]] = set()  # (partition, offset)
        self._positions: dict[int, int] = {}  # owned partition -> position

    def poll(self) -> None:
        read = self._poll()
        positions = {tp.partition: self._position(tp) for tp in self.consumer.assignment()}
        with self._lock:
            self._read.update(read)
            self._positions = positions

    @property
    def read(self) -> set[tuple[int, int]]:
        with self._lock:
            return set(self._read)

    def owned(self) -> set[int]:
        with self._lock:
            return set(self._positions)

    def at_end(self, counts: dict[int, int]) -> bool:
        """It has read each partition it owns to its end (an empty one is read)."""
        with self._lock:
            return all(counts[p] == 0 or position == counts[p] for p, position in self._positions.items())


def confluent_member(consumer, name: str) -> Member:
    def poll():
        out = []
        for message in consumer.consume(num_messages=100, timeout=0.1):
            assert message.error() is None, message.error()
            out.append((message.partition(), message.offset()))
        return out

    def position(tp) -> int:
        return consumer.position([tp])[0].offset  # -1001 (none) until it has read there

    return Member(name, consumer, poll, position)


def polling_member(consumer, name: str) -> Member:
    """A member polled as kafka-python's KafkaConsumer is, and raylog's Consumer too."""

    def poll():
        return [(r.partition, r.offset) for records in consumer.poll(timeout_ms=100).values() for r in records]

    return Member(name, consumer, poll, consumer.position)


def close(consumer) -> None:
    """Close a confluent-kafka consumer the test may have closed already."""
    with contextlib.suppress(RuntimeError):  # "Consumer closed"
        consumer.close()


def drive(members: list[Member], done: Callable[[], bool], what: str, timeout_s: float = GROUP_TIMEOUT_S) -> None:
    """Poll every member in a thread of its own until ``done()``; fail after ``timeout_s``
    (or with what a poll raised)."""
    stop = threading.Event()
    failures: list[BaseException] = []

    def run(member: Member) -> None:
        try:
            while not stop.is_set():
                member.poll()
        except BaseException as exc:  # noqa: BLE001 — raised in the test's thread below
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(m,), name=f"poll-{m.name}") for m in members]
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: failures or done(), timeout_s=timeout_s, message=f"{what} (owned: see below)")
    except AssertionError as exc:
        owned = {m.name: sorted(m.owned()) for m in members}
        raise AssertionError(f"{exc}; owned: {owned}") from None
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
    if failures:
        raise failures[0]


def shared_once(members: list[Member]) -> bool:
    """Every partition owned by exactly one member, and every member owning some."""
    owned = [m.owned() for m in members]
    return all(owned) and sum(map(len, owned)) == PARTITIONS and set().union(*owned) == set(range(PARTITIONS))


def share(members: list[Member], counts: dict[int, int]) -> None:
    """Drive ``members`` until they share every partition once and each has read its own to
    their end; between them they read every record."""
    drive(
        members,
        lambda: shared_once(members) and all(m.at_end(counts) for m in members),
        f"{len(members)} members sharing every partition once, each read to its end",
    )
    assert set().union(*(m.read for m in members)) == everything(counts)


def committed_at_end(cluster, group: str, topic: str, counts: dict[int, int]) -> dict:
    """Assert that raylog's Admin sees the group's offsets committed at the end of every
    partition (no metadata; the leader epoch as each client sent it); returns them."""
    committed = Admin(cluster).list_consumer_group_offsets(group)
    assert {tp: c[:2] for tp, c in committed.items()} == {TopicPartition(topic, p): (n, "") for p, n in counts.items()}
    return committed


def assert_empty(cluster, group: str) -> None:
    """raylog sees the group with no members."""
    (described,) = Admin(cluster).describe_consumer_groups([group])
    assert described.state == "Empty" and not described.members


def everything(counts: dict[int, int]) -> set[tuple[int, int]]:
    return {(p, o) for p, n in counts.items() for o in range(n)}


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_two_confluent_consumers_share_a_topic_commit_and_rebalance_when_one_leaves(
    kafka_cluster, bootstrap, kafka_topic, strategy
):
    from confluent_kafka import TopicPartition as KafkaTP

    topic = kafka_topic(num_partitions=PARTITIONS)
    counts = _produce(kafka_cluster, topic)
    group = _group()
    c1, c2 = _confluent(bootstrap, group, strategy), _confluent(bootstrap, group, strategy)
    try:
        c1.subscribe([topic])
        c2.subscribe([topic])
        m1, m2 = confluent_member(c1, "c1"), confluent_member(c2, "c2")

        share([m1, m2], counts)
        owned1, owned2 = m1.owned(), m2.owned()
        assert owned1.isdisjoint(owned2)

        # Commits through the listener are raylog's group's committed offsets.
        c1.commit(asynchronous=False)
        c2.commit(asynchronous=False)
        expected = committed_at_end(kafka_cluster, group, topic, counts)
        with Consumer(kafka_cluster, group_id=group) as reader:
            assert reader.committed(list(expected)) == expected
        committed = c1.committed([KafkaTP(topic, p) for p in range(PARTITIONS)], timeout=30)
        assert {tp.partition: tp.offset for tp in committed} == {p: counts[p] for p in range(PARTITIONS)}

        # raylog's view of the group: two members, the assignor the clients asked for.
        (described,) = Admin(kafka_cluster).describe_consumer_groups([group])
        assert described.state == "Stable" and described.protocol == strategy
        assert sorted(len(m.assignment) for m in described.members) == sorted([len(owned1), len(owned2)])

        # One leaves (LeaveGroup): the other takes every partition.
        c2.close()
        drive([m1], lambda: m1.owned() == set(range(PARTITIONS)), "the remaining member owning every partition")
    finally:
        for consumer in (c1, c2):
            close(consumer)


def test_admin_clients_list_and_describe_the_group(kafka_cluster, bootstrap, kafka_topic):
    """confluent-kafka's AdminClient (ListGroups, DescribeGroups, OffsetFetch) and
    kafka-python's KafkaAdminClient read the group as Kafka's admin clients do."""
    from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions
    from confluent_kafka import TopicPartition as KafkaTP
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaAdminClient

    topic = kafka_topic(num_partitions=PARTITIONS)
    counts = _produce(kafka_cluster, topic)
    group = _group()
    consumer = _confluent(bootstrap, group, "roundrobin", **{"client.id": "described-client"})
    kp_admin = None
    try:
        consumer.subscribe([topic])
        member = confluent_member(consumer, "c")
        drive([member], lambda: member.read == everything(counts), "one member reading everything")
        consumer.commit(asynchronous=False)

        admin = AdminClient({"bootstrap.servers": bootstrap})
        listed = admin.list_consumer_groups(request_timeout=30).result(timeout=60)
        assert not listed.errors
        ours = [g for g in listed.valid if g.group_id == group]
        assert len(ours) == 1 and ours[0].state == ConsumerGroupState.STABLE and not ours[0].is_simple_consumer_group

        described = admin.describe_consumer_groups([group], request_timeout=30)[group].result(timeout=60)
        assert described.state == ConsumerGroupState.STABLE
        assert described.partition_assignor == "roundrobin"
        (m,) = described.members
        assert m.client_id == "described-client"
        assert sorted(tp.partition for tp in m.assignment.topic_partitions) == list(range(PARTITIONS))
        assert {tp.topic for tp in m.assignment.topic_partitions} == {topic}

        request = ConsumerGroupTopicPartitions(group, [KafkaTP(topic, p) for p in range(PARTITIONS)])
        offsets = admin.list_consumer_group_offsets([request], request_timeout=30)[group].result(timeout=60)
        assert {tp.partition: tp.offset for tp in offsets.topic_partitions} == {p: counts[p] for p in range(PARTITIONS)}

        missing = admin.describe_consumer_groups(["no-such-group"], request_timeout=30)["no-such-group"]
        assert missing.result(timeout=60).state == ConsumerGroupState.DEAD

        kp_admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
        # OffsetFetch v8: two groups in one request, all of each group's partitions.
        found = kp_admin.list_group_offsets({group: None, "no-such-group": None})
        assert {tp.partition: o.offset for tp, o in found[group].items()} == {p: counts[p] for p in range(PARTITIONS)}
        assert found["no-such-group"] == {}
        listed = [g for g in kp_admin.list_groups() if g["group_id"] == group]
        assert [(g["protocol_type"], g.get("group_state")) for g in listed] == [("consumer", "Stable")]
    finally:
        consumer.close()
        if kp_admin is not None:
            kp_admin.close()


def test_kafka_python_group_consumer_reads_and_commits(kafka_cluster, bootstrap, kafka_topic):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTP

    topic = kafka_topic(num_partitions=PARTITIONS)
    counts = _produce(kafka_cluster, topic)
    group = _group()
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, **GROUP_SETTINGS)
    try:
        member = polling_member(consumer, "kafka-python")
        drive([member], lambda: member.read == everything(counts), "kafka-python reading every record")
        assert member.owned() == set(range(PARTITIONS))
        consumer.commit()
        committed_at_end(kafka_cluster, group, topic, counts)
        assert consumer.committed(KafkaTP(topic, 0)) == counts[0]
    finally:
        consumer.close()
    assert_empty(kafka_cluster, group)  # its close left the group


def test_a_raylog_consumer_and_a_confluent_consumer_share_one_group(kafka_cluster, bootstrap, kafka_topic):
    topic = kafka_topic(num_partitions=PARTITIONS)
    counts = _produce(kafka_cluster, topic)
    group = _group()
    ours = Consumer(kafka_cluster, topic, group_id=group, **GROUP_SETTINGS)  # cooperative-sticky, raylog's default
    theirs = _confluent(bootstrap, group, "cooperative-sticky")
    try:
        theirs.subscribe([topic])
        a, b = polling_member(ours, "raylog"), confluent_member(theirs, "confluent")
        share([a, b], counts)
        ours.commit()
        theirs.commit(asynchronous=False)
        committed = committed_at_end(kafka_cluster, group, topic, counts)
        # Each member committed the leader epoch of the last record it read (KIP-320): a new
        # topic's partitions are at epoch 0.
        assert {c.leader_epoch for c in committed.values()} == {0}

        # The confluent member leaves: raylog's member takes its partitions.
        theirs.close()
        drive([a], lambda: a.owned() == set(range(PARTITIONS)), "the raylog member owning every partition")
    finally:
        ours.close()
        close(theirs)


def test_a_commit_from_outside_the_group_keeps_its_metadata(kafka_cluster, bootstrap, kafka_topic):
    """Consumers with assign() (no membership) commit with generation -1: raylog's commit from
    outside the group. kafka-python's metadata and leader epoch are kept (KIP-320; librdkafka's
    test 0103 found the epoch answered as -1) and every client reads them back. A partition of
    no topic is refused (confluent-kafka)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka import TopicPartition as KafkaTP
    from kafka import KafkaConsumer
    from kafka import OffsetAndMetadata as KafkaOffset
    from kafka import TopicPartition as PyTP

    topic = kafka_topic(num_partitions=2)
    group = _group()
    kp = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        kp.assign([PyTP(topic, 0), PyTP(topic, 1)])
        kp.commit({PyTP(topic, 0): KafkaOffset(7, "note", 4), PyTP(topic, 1): KafkaOffset(3, "", -1)})
        assert Admin(kafka_cluster).list_consumer_group_offsets(group) == {
            TopicPartition(topic, 0): OffsetAndMetadata(7, "note", 4),
            TopicPartition(topic, 1): OffsetAndMetadata(3, "", -1),
        }
        back = kp.committed(PyTP(topic, 0), metadata=True)
        assert (back.offset, back.metadata, back.leader_epoch) == (7, "note", 4)
    finally:
        kp.close()
    consumer = _confluent(bootstrap, group, "range")
    try:
        back = consumer.committed([KafkaTP(topic, p) for p in range(2)], timeout=30)
        assert [(tp.partition, tp.offset, tp.leader_epoch) for tp in back] == [(0, 7, 4), (1, 3, None)]
        with pytest.raises(KafkaException) as refused:
            consumer.commit(offsets=[KafkaTP(f"{topic}-missing", 0, 1)], asynchronous=False)
        assert refused.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    finally:
        consumer.close()


def test_kafka_python_cooperative_members_hand_partitions_over(kafka_cluster, bootstrap, kafka_topic):
    """kafka-python's cooperative-sticky members send v1 subscriptions (owned partitions, no
    generation: the listener fills in the one it told them): when a second member joins, the
    first hands part of its partitions over and they end up shared once.

    Each member is polled by a thread of its own: kafka-python 3.0.12 drops a join that
    completes between two polls and joins again (``join_group_async`` starts a new JoinGroup
    when the task it kept is done), which restarts the rebalance round after round when the
    members are polled in turn."""
    from kafka import KafkaConsumer
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor

    topic = kafka_topic(num_partitions=PARTITIONS)
    counts = _produce(kafka_cluster, topic)
    group = _group()
    settings = {**GROUP_SETTINGS, "partition_assignment_strategy": [CooperativeStickyAssignor]}
    first = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, **settings)
    second = None
    try:
        a = polling_member(first, "first")
        drive([a], lambda: a.owned() == set(range(PARTITIONS)), "the first member owning every partition")
        second = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, **settings)
        b = polling_member(second, "second")
        share([a, b], counts)
        (described,) = Admin(kafka_cluster).describe_consumer_groups([group])
        assert described.protocol == "cooperative-sticky" and len(described.members) == 2
    finally:
        first.close()
        if second is not None:
            second.close()


def test_kafka_python_members_take_partitions_added_to_their_topic(kafka_cluster, kafka_admin, bootstrap, kafka_topic):
    """In Kafka the leader member watches the group's topics and rejoins when one grows; a
    follower member (kafka-python's, for one) never does. raylog assigns for kafka-python's
    range members, so no member leads: its coordinator watches the topics instead. Partitions
    added to the topic start a rebalance that hands them out, each to one member."""
    from kafka import KafkaConsumer

    topic = kafka_topic(num_partitions=2)
    group = _group()
    consumers = [KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, **GROUP_SETTINGS) for _ in range(2)]
    try:
        members = [polling_member(c, f"m{i}") for i, c in enumerate(consumers)]
        drive(members, lambda: sorted(len(m.owned()) for m in members) == [1, 1], "two members, one partition each")
        kafka_admin.create_partitions({topic: PARTITIONS})
        drive(members, lambda: shared_once(members), f"{PARTITIONS} partitions shared once after two were added")
    finally:
        for consumer in consumers:
            consumer.close()


def test_confluent_cooperative_members_rejoin_when_a_subscribed_topic_is_deleted(kafka_cluster, kafka_admin, bootstrap):
    """librdkafka's 0113 ``n_wildcard``: two cooperative-sticky members subscribed by a regex
    share two topics' four partitions; one topic is deleted. Each member gives up what it had
    of it (as lost, or revoked when the group rebalances first) and, the group rebalancing (as
    Kafka's leader member makes it after its own loss), hears of its assignment again: an
    assign callback follows, and the other topic's partitions end up shared once."""
    from confluent_kafka import KafkaError

    from raylog import NewTopic

    prefix = f"wild-{uuid.uuid4().hex[:8]}"
    gone, kept = f"{prefix}_1", f"{prefix}_2"
    kafka_admin.create_topics([NewTopic(t, num_partitions=2) for t in (gone, kept)], wait_for_leaders_ms=60_000)
    group = _group()
    events: dict[str, list[str]] = {"c1": [], "c2": []}
    consumers = {name: _confluent(bootstrap, group, "cooperative-sticky") for name in events}
    try:
        for name, consumer in consumers.items():
            consumer.subscribe(
                [f"^{prefix}_.*"],
                on_assign=lambda _, tps, name=name: events[name].append(f"assign {len(tps)}"),
                on_revoke=lambda _, tps, name=name: events[name].append(f"revoke {len(tps)}"),
                on_lost=lambda _, tps, name=name: events[name].append(f"lost {len(tps)}"),
            )
        # What each owns, noted by its own polling thread (confluent-kafka's assignment() holds
        # the GIL while librdkafka may wait for a rebalance callback in the polling thread).
        owned: dict[str, set[tuple[str, int]]] = {name: set() for name in consumers}

        def member(name: str) -> Member:
            consumer = consumers[name]

            def poll():
                for message in consumer.consume(num_messages=100, timeout=0.1):
                    # librdkafka reports the deleted topic (as Kafka's brokers make it).
                    error = message.error()
                    assert error is None or error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART, error
                owned[name] = {(tp.topic, tp.partition) for tp in consumer.assignment()}
                return ()

            return Member(name, consumer, poll, lambda tp: 0)

        members = [member(name) for name in consumers]
        drive(members, lambda: all(len(o) == 2 for o in owned.values()), "each member owning a partition of each topic")
        before = {name: len(seen) for name, seen in events.items()}
        had = {name: sum(t == gone for t, _ in o) for name, o in owned.items()}
        kafka_admin.delete_topics([gone])

        def rejoined_after_the_loss() -> bool:
            for name, seen in events.items():
                since = seen[before[name] :]
                if had[name]:  # it gives up what it had there, and is assigned again
                    # As lost once its metadata shows the topic gone, or revoked in the rebalance
                    # when the coordinator's watch (3 s) sees the deletion first, as on a busy
                    # machine where librdkafka took 35 s to refresh its metadata.
                    given_up = (f"lost {had[name]}", f"revoke {had[name]}")
                    lost = [i for i, e in enumerate(since) if e in given_up]
                    if not lost or not any(e.startswith("assign") for e in since[lost[0] + 1 :]):
                        return False
            after = [o for o in owned.values()]
            return all(after) and sorted(tp for o in after for tp in o) == [(kept, 0), (kept, 1)]

        try:
            drive(members, rejoined_after_the_loss, "the deleted topic's partitions lost, the other's shared once")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; callbacks: {events}, since {before}; had {had}") from None
    finally:
        for consumer in consumers.values():
            close(consumer)
        kafka_admin.delete_topics([kept])


def test_a_static_member_is_removed_by_its_instance_id(kafka_cluster, bootstrap, kafka_topic):
    """A confluent-kafka member with group.instance.id does not leave when closed (static
    membership); kafka-python's admin removes it by its instance id alone (LeaveGroup v3+)."""
    from kafka import KafkaAdminClient
    from kafka.admin import MemberToRemove

    topic = kafka_topic(num_partitions=PARTITIONS)
    group = _group()
    consumer = _confluent(bootstrap, group, "range", **{"group.instance.id": "static-a"})
    try:
        consumer.subscribe([topic])
        member = confluent_member(consumer, "static")
        drive([member], lambda: member.owned() == set(range(PARTITIONS)), "the static member owning every partition")
    finally:
        consumer.close()
    (described,) = Admin(kafka_cluster).describe_consumer_groups([group])
    assert [m.group_instance_id for m in described.members] == ["static-a"]  # still in: static
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
    try:
        admin.remove_group_members(group, [MemberToRemove(group_instance_id="static-a")])
    finally:
        admin.close()
    assert_empty(kafka_cluster, group)


def test_aiokafka_group_consumer_reads_and_commits(kafka_cluster, bootstrap, kafka_topic):
    import asyncio

    from aiokafka import AIOKafkaConsumer

    topic = kafka_topic(num_partitions=PARTITIONS)
    counts = _produce(kafka_cluster, topic)
    group = _group()

    async def consume() -> set[tuple[int, int]]:
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            heartbeat_interval_ms=HEARTBEAT_MS,
            session_timeout_ms=10_000,
        )
        await consumer.start()
        read: set[tuple[int, int]] = set()
        try:
            while read != everything(counts):
                for records in (await consumer.getmany(timeout_ms=100)).values():
                    read.update((r.partition, r.offset) for r in records)
            await consumer.commit()
        finally:
            await consumer.stop()
        return read

    async def bounded():
        return await asyncio.wait_for(consume(), GROUP_TIMEOUT_S)

    assert asyncio.run(bounded()) == everything(counts)
    committed_at_end(kafka_cluster, group, topic, counts)


def test_admin_clients_delete_groups_that_have_no_members(kafka_cluster, bootstrap, kafka_topic):
    """DeleteGroups: a group with committed offsets and no members is deleted with them; one
    with a member is NON_EMPTY_GROUP and one that never existed GROUP_ID_NOT_FOUND, for
    confluent-kafka's AdminClient and kafka-python's."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient
    from kafka.admin import KafkaAdminClient

    def members_of(group: str) -> list:
        try:
            return Admin(kafka_cluster).describe_consumer_groups([group])[0].members
        except GroupIdNotFoundError:
            return []

    topic = kafka_topic(num_partitions=1)
    idle, busy, never = _group(), _group(), _group()
    Admin(kafka_cluster).alter_consumer_group_offsets(idle, {TopicPartition(topic, 0): 5})
    member = _confluent(bootstrap, busy, "range")
    confluent = AdminClient({"bootstrap.servers": bootstrap})
    try:
        member.subscribe([topic])
        drive([confluent_member(member, "busy")], lambda: members_of(busy), "the busy group's member joining")
        futures = confluent.delete_consumer_groups([idle, busy, never], request_timeout=30)
        assert futures[idle].result(timeout=30) is None
        codes = {}
        for group in (busy, never):
            with pytest.raises(KafkaException) as refused:
                futures[group].result(timeout=30)
            codes[group] = refused.value.args[0].code()
        assert codes == {busy: KafkaError.NON_EMPTY_GROUP, never: KafkaError.GROUP_ID_NOT_FOUND}
        assert Admin(kafka_cluster).list_consumer_group_offsets(idle) == {}
    finally:
        close(member)
    client = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        wait_until(lambda: not members_of(busy), message="the busy group emptied")
        assert client.delete_groups([busy, never]) == {busy: "OK", never: "GroupIdNotFoundError"}
    finally:
        client.close()


def test_kafka_python_deletes_the_offsets_of_topics_no_member_reads(kafka_cluster, bootstrap, kafka_topic):
    """OffsetDelete with kafka-python's admin: a group whose member reads one topic keeps that
    topic's committed offsets (GROUP_SUBSCRIBED_TO_TOPIC) and loses the other's; a group that
    never existed is GROUP_ID_NOT_FOUND."""
    from kafka import TopicPartition as KafkaTopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.errors import GroupIdNotFoundError as KafkaGroupIdNotFoundError
    from kafka.errors import GroupSubscribedToTopicError, NoError

    read, other = kafka_topic(num_partitions=1), kafka_topic(num_partitions=1)
    group = _group()
    Admin(kafka_cluster).alter_consumer_group_offsets(group, {TopicPartition(read, 0): 3, TopicPartition(other, 0): 4})
    member = _confluent(bootstrap, group, "range")
    client = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        member.subscribe([read])
        drive(
            [confluent_member(member, "reader")],
            lambda: Admin(kafka_cluster).describe_consumer_groups([group])[0].members,
            "the member joining",
        )
        asked = [KafkaTopicPartition(read, 0), KafkaTopicPartition(other, 0)]
        assert client.delete_group_offsets(group, asked) == {
            asked[0]: GroupSubscribedToTopicError,
            asked[1]: NoError,
        }
        assert Admin(kafka_cluster).list_consumer_group_offsets(group) == {
            TopicPartition(read, 0): OffsetAndMetadata(3, "")
        }
        with pytest.raises(KafkaGroupIdNotFoundError):
            client.delete_group_offsets(_group(), asked)
    finally:
        close(member)
        client.close()
