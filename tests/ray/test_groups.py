"""Consumer groups on the session's raylog cluster: members share partitions exactly once,
rebalances never give a partition two owners, commits are fenced by generation, and
offsets committed in ``__consumer_offsets`` are where a partition's next owner starts.

Members of one group are driven from this thread, one ``poll`` each in turn (their
heartbeats run in their own threads); sessions are short so that the suite stays fast.
Most tests read one shared topic written once (each with a group of its own): every
partition is an actor process, and creating one costs seconds on a small machine.
"""

from __future__ import annotations

import collections
import json
import time
import uuid
from dataclasses import dataclass

import pytest
import ray

from raylog import Consumer, NewTopic, OffsetAndMetadata, Producer, TopicPartition, cli
from raylog.clients.group import ConsumerRebalanceListener
from raylog.common.names import OFFSETS_TOPIC
from raylog.coordination.group import partition_for
from raylog.errors import (
    CommitFailedError,
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    InvalidConfigError,
    NonEmptyGroupError,
    NotEnoughReplicasError,
    RaylogError,
    UnknownMemberIdError,
)
from tests.helpers import wait_until

#: Short sessions: a member that stops heartbeating is noticed within seconds.
FAST = {
    "session_timeout_ms": 4_000,
    "heartbeat_interval_ms": 500,
    "auto_offset_reset": "earliest",
    "fetch_max_wait_ms": 100,
}
#: Bound on any rebalance or hand-over here (sessions are at most 4 s).
SETTLE_S = 30.0
SHARED_PARTITIONS = 4
PER_PARTITION = 25
#: commit_async calls made back to back in the ordering test.
COMMIT_ASYNC_CALLS = 200
#: The shared topic's record i of each partition has timestamp BASE + i * TIMESTAMP_STEP_MS.
TIMESTAMP_STEP_MS = 1_000


# --- fixtures and helpers ------------------------------------------------------------------


@dataclass(frozen=True)
class Shared:
    """A topic written once, read by many groups: ``PER_PARTITION`` records per partition."""

    name: str
    partitions: list[TopicPartition]
    values: list[bytes]
    base_timestamp_ms: int


@pytest.fixture(scope="module")
def shared(cluster, admin):
    name = f"groups-shared-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, num_partitions=SHARED_PARTITIONS)])
    base_ms = int(time.time() * 1000) - 10 * PER_PARTITION * TIMESTAMP_STEP_MS
    values = []
    with Producer(cluster, linger_ms=5) as producer:
        futures = []
        for p in range(SHARED_PARTITIONS):
            for i in range(PER_PARTITION):
                values.append(f"{p}-{i}".encode())
                futures.append(
                    producer.send(name, values[-1], partition=p, timestamp_ms=base_ms + i * TIMESTAMP_STEP_MS)
                )
        for future in futures:
            future.result(timeout=30)
    yield Shared(name, [TopicPartition(name, p) for p in range(SHARED_PARTITIONS)], values, base_ms)
    admin.delete_topics([name])


@pytest.fixture
def group(admin):
    """A fresh group id; the group is deleted after the test (once its members are gone)."""
    group_id = f"g-{uuid.uuid4().hex[:10]}"
    yield group_id
    try:
        admin.delete_consumer_groups([group_id])
    except (GroupIdNotFoundError, NonEmptyGroupError):
        pass  # never joined, or a member abandoned on purpose has not timed out yet


@pytest.fixture
def consumers(cluster):
    """``consumers(*topics, **config)`` makes a consumer (FAST config unless overridden); all
    are closed after the test."""
    made: list[Consumer] = []

    def make(*topics: str, **config) -> Consumer:
        consumer = Consumer(cluster, *topics, **{**FAST, **config})
        made.append(consumer)
        return consumer

    yield make
    for consumer in made:
        try:
            consumer.close()
        except Exception:  # noqa: BLE001 — a test may have left it fenced or broken on purpose
            pass


class Recorder(ConsumerRebalanceListener):
    """Remembers every callback; with ``consumer`` set, commits revoked partitions' positions
    (what a consumer committing by hand does)."""

    def __init__(self):
        self.consumer: Consumer | None = None
        self.revoked: list[list[TopicPartition]] = []
        self.assigned: list[list[TopicPartition]] = []
        self.lost: list[list[TopicPartition]] = []

    def on_partitions_revoked(self, revoked):
        self.revoked.append(list(revoked))
        if self.consumer is not None:
            self.consumer.commit({tp: self.consumer.position(tp) for tp in revoked})

    def on_partitions_assigned(self, assigned):
        self.assigned.append(list(assigned))

    def on_partitions_lost(self, lost):
        self.lost.append(list(lost))

    def all_revoked(self) -> list[TopicPartition]:
        return sorted(tp for tps in self.revoked for tp in tps)


class Driver:
    """Polls consumers of one group from this thread in turn, remembers what each read, and
    checks after every poll that no two members own a partition at once."""

    def __init__(self, members: list[Consumer], poll_ms: int = 50):
        self.members = list(members)
        self.poll_ms = poll_ms
        self.read: dict[int, list] = collections.defaultdict(list)  # member index -> records
        self.owned: dict[int, dict[int, set]] = collections.defaultdict(dict)  # generation -> member -> partitions
        self.generations: dict[int, list[int]] = collections.defaultdict(list)  # member -> generations seen

    def poll(self, *indexes: int) -> None:
        indexes = indexes or tuple(range(len(self.members)))
        for i in indexes:
            consumer = self.members[i]
            for records in consumer.poll(timeout_ms=self.poll_ms).values():
                self.read[i].extend(records)
            self._check(i, indexes)

    def _check(self, i: int, polled: tuple[int, ...]) -> None:
        # Members not polled (stopped, or closed) may still believe in partitions they lost.
        now = {j: self.members[j].assignment() for j in polled}
        for j, tps in now.items():
            for k, others in now.items():
                assert j >= k or not (tps & others), f"members {j} and {k} both own {sorted(tps & others)}"
        generation = self.members[i].group_metadata()["generation"]
        if generation >= 0:
            self.owned[generation].setdefault(i, set()).update(self.members[i].assignment())
            self.generations[i].append(generation)

    def assert_generations_never_go_back(self) -> None:
        for member, seen in self.generations.items():
            assert seen == sorted(seen), f"member {member} saw generations {seen}"

    def assert_one_owner_per_generation(self) -> None:
        for generation, by_member in self.owned.items():
            seen: dict[TopicPartition, int] = {}
            for member, tps in by_member.items():
                for tp in tps:
                    assert seen.setdefault(tp, member) == member, f"{tp} had two owners in generation {generation}"

    def values(self, *indexes: int) -> list[bytes]:
        return [r.value for i in indexes or self.read for r in self.read[i]]


def settled(admin, group_id: str, members: list[Consumer], partitions: list[TopicPartition]):
    """The group's description once it is Stable with exactly ``members``, each at the
    group's generation owning what the coordinator says, together owning every partition
    once; else None (also while no member has joined yet: the group does not exist)."""
    try:
        (described,) = admin.describe_consumer_groups([group_id])
    except GroupIdNotFoundError:
        return None
    if described.state != "Stable" or len(described.members) != len(members):
        return None
    by_id = {m.member_id: set(m.assignment) for m in described.members}
    for consumer in members:
        meta = consumer.group_metadata()
        if meta["generation"] != described.generation or by_id.get(meta["member_id"]) != consumer.assignment():
            return None
    owned = [tp for consumer in members for tp in consumer.assignment()]
    return described if sorted(owned) == sorted(partitions) else None


def settle(admin, driver: Driver, group_id: str, partitions: list[TopicPartition], *indexes: int):
    """Poll members (``indexes``, default all) until the group :func:`settled` with them."""
    indexes = indexes or tuple(range(len(driver.members)))
    members = [driver.members[i] for i in indexes]
    return wait_until(
        lambda: driver.poll(*indexes) or settled(admin, group_id, members, partitions),
        timeout_s=SETTLE_S,
        message=f"group {group_id} settled with members {indexes}",
    )


def at_end(consumer: Consumer) -> bool:
    """Every partition the consumer owns has been read up to its log end offset."""
    assigned = consumer.assignment()
    ends = consumer.end_offsets(assigned) if assigned else {}
    return all(consumer.position(tp) >= ends[tp] for tp in assigned)


def read_to_end(driver: Driver, total: int, *indexes: int) -> None:
    """Poll members until they read ``total`` records in all and are at the end of their partitions."""
    indexes = indexes or tuple(range(len(driver.members)))
    wait_until(
        lambda: (
            driver.poll(*indexes) or (len(driver.values()) >= total and all(at_end(driver.members[i]) for i in indexes))
        ),
        timeout_s=SETTLE_S,
        message="every record read",
    )


def next_batch(consumer: Consumer) -> list:
    """The records of the next poll that returns any."""
    return wait_until(
        lambda: [r for rs in consumer.poll(timeout_ms=100).values() for r in rs], timeout_s=SETTLE_S, message="a batch"
    )


def assert_exactly_once(read: list[bytes], expected: list[bytes]) -> None:
    counts = collections.Counter(read)
    assert sorted(counts) == sorted(expected), f"lost: {sorted(set(expected) - set(counts))[:10]}"
    assert [v for v, n in counts.items() if n > 1] == [], "a record was read twice"


# --- sharing and rebalancing -----------------------------------------------------------------


@pytest.mark.parametrize("count", [1, 2, 3])
def test_members_share_the_partitions_and_read_every_record_exactly_once(admin, shared, group, consumers, count):
    """1..3 members, joining while there are records to read, split the partitions (each
    gets some) and read every record exactly once between them (auto-commit commits what
    a member gives up)."""
    driver = Driver([consumers(shared.name, group_id=group) for _ in range(count)])
    described = settle(admin, driver, group, shared.partitions)
    assert all(m.assignment for m in described.members), "a member was left without a partition"
    read_to_end(driver, len(shared.values))
    assert_exactly_once(driver.values(), shared.values)
    driver.assert_one_owner_per_generation()


@pytest.mark.parametrize("strategy", ["cooperative-sticky", "range", "consumer:uniform", "consumer:range"])
def test_joins_and_leaves_rebalance_without_two_owners_or_repeats(admin, shared, group, consumers, strategy):
    """A member joining and one leaving each start a new generation; no partition has two
    owners at any time nor in any generation, and with offsets committed on revoke by a
    listener no record is read twice. ``consumer:<assignor>``: members of Kafka 4's consumer
    protocol (KIP-848, ``group_protocol="consumer"``) naming a server assignor, the group
    described as the coordinator keeps it (its epoch as the generation)."""
    protocol, _, assignor = strategy.rpartition(":")
    config = (
        {"group_protocol": "consumer", "group_remote_assignor": assignor}
        if protocol
        else {"partition_assignment_strategy": strategy}
    )
    listeners = [Recorder() for _ in range(3)]
    members = [consumers(group_id=group, max_poll_records=5, enable_auto_commit=False, **config) for _ in range(3)]
    for consumer, listener in zip(members, listeners, strict=True):
        listener.consumer = consumer
    driver = Driver(members)
    for i in (0, 1):
        members[i].subscribe([shared.name], listener=listeners[i])
    first = settle(admin, driver, group, shared.partitions, 0, 1)
    assert (first.protocol, first.state) == (assignor, "Stable")
    assert all(m.assignment for m in first.members), "a member was left without a partition"
    members[2].subscribe([shared.name], listener=listeners[2])
    second = settle(admin, driver, group, shared.partitions, 0, 1, 2)
    assert second.generation > first.generation
    members[0].close()  # its listener commits what it read before it leaves
    third = settle(admin, driver, group, shared.partitions, 1, 2)
    assert third.generation > second.generation
    assert {m.member_id for m in third.members} == {members[i].group_metadata()["member_id"] for i in (1, 2)}
    read_to_end(driver, len(shared.values), 1, 2)
    assert_exactly_once(driver.values(), shared.values)
    if not protocol:  # (a consumer group's members move to a new epoch one by one)
        driver.assert_one_owner_per_generation()


def test_consumer_protocol_config_is_checked(cluster, group):
    with pytest.raises(InvalidConfigError, match="group_protocol"):
        Consumer(cluster, group_id=group, group_protocol="eager")
    with pytest.raises(InvalidConfigError, match="group_remote_assignor"):
        Consumer(cluster, group_id=group, group_protocol="consumer", group_remote_assignor="sticky")


def test_cooperative_sticky_moves_only_the_partitions_that_must_move(admin, shared, group, consumers):
    """With cooperative-sticky a joining member takes only its share: the others keep the
    rest and their listeners see only the moved partitions revoked; when it leaves, its
    partitions go to the others and nobody's are revoked."""
    listeners = [Recorder() for _ in range(3)]
    members = [consumers(group_id=group) for _ in range(3)]
    driver = Driver(members)
    for i in (0, 1):
        members[i].subscribe([shared.name], listener=listeners[i])
    settle(admin, driver, group, shared.partitions, 0, 1)
    before = [members[i].assignment() for i in (0, 1)]
    assert [len(a) for a in before] == [2, 2]
    for listener in listeners:
        listener.revoked.clear()  # the first member gave partitions to the second
    members[2].subscribe([shared.name], listener=listeners[2])
    settle(admin, driver, group, shared.partitions)
    after = [members[i].assignment() for i in (0, 1)]
    moved = members[2].assignment()
    assert len(moved) == 1, "the newcomer should take exactly one partition of four"
    for i in (0, 1):
        assert after[i] <= before[i], f"member {i} was given a partition it did not own"
        assert listeners[i].all_revoked() == sorted(before[i] - after[i]), "revoked more than moved"
    assert sorted(tp for i in (0, 1) for tp in before[i] - after[i]) == sorted(moved)
    members[2].close()
    settle(admin, driver, group, shared.partitions, 0, 1)
    for i in (0, 1):
        assert members[i].assignment() >= after[i], f"member {i} lost a partition when another left"
        assert listeners[i].all_revoked() == sorted(before[i] - after[i]), "a partition was revoked on a leave"
    driver.assert_one_owner_per_generation()


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [("range", [{0, 1}, {2, 3}]), ("roundrobin", [{0, 2}, {1, 3}])],
)
def test_range_and_roundrobin_assign_eagerly(admin, shared, group, consumers, strategy, expected):
    """range gives each member a contiguous block, roundrobin deals partitions in turn; both
    are eager: a rebalance revokes every partition of every member first."""
    listeners = [Recorder() for _ in range(3)]
    members = [consumers(group_id=group, partition_assignment_strategy=strategy) for _ in range(3)]
    driver = Driver(members)
    for i in (0, 1):
        members[i].subscribe([shared.name], listener=listeners[i])
    described = settle(admin, driver, group, shared.partitions, 0, 1)
    assert described.protocol == strategy
    # Members are ordered by member id.
    ordered = sorted(described.members, key=lambda m: m.member_id)
    assert [{tp.partition for tp in m.assignment} for m in ordered] == expected
    owned = [members[i].assignment() for i in (0, 1)]
    for listener in listeners:
        listener.revoked.clear()
    members[2].subscribe([shared.name], listener=listeners[2])
    settle(admin, driver, group, shared.partitions)
    for i in (0, 1):
        assert listeners[i].revoked[0] == sorted(owned[i]), "eager: everything is revoked before rejoining"
    driver.assert_one_owner_per_generation()


def test_pattern_subscription_picks_up_a_topic_created_later(admin, cluster, topic, group, consumers):
    """A member subscribed to a pattern reads the matching topics, and a matching topic
    created later joins its assignment (found within metadata_max_age_ms)."""
    first = topic(num_partitions=1)
    prefix = first.rsplit("-", 1)[0]
    with Producer(cluster) as producer:
        producer.send(first, b"first").result(timeout=30)
    member = consumers(group_id=group, metadata_max_age_ms=300)
    member.subscribe(pattern=f"{prefix}-[0-9]+")
    driver = Driver([member])
    settle(admin, driver, group, [TopicPartition(first, 0)])
    second = topic(num_partitions=1)
    with Producer(cluster) as producer:
        producer.send(second, b"second").result(timeout=30)
    settle(admin, driver, group, [TopicPartition(first, 0), TopicPartition(second, 0)])
    assert member.subscription() == {first, second}
    wait_until(lambda: driver.poll() or sorted(driver.values()) == [b"first", b"second"], timeout_s=SETTLE_S)


# --- commits -------------------------------------------------------------------------------------


def test_manual_assignment_commits_for_a_group_only_while_it_has_no_members(admin, shared, group, consumers):
    """A consumer with a group id and partitions assigned by hand commits for the group; it
    is refused while the group has active members, and allowed again once they left."""
    simple = consumers(group_id=group)
    simple.assign(shared.partitions[:2])
    wait_until(lambda: simple.poll(timeout_ms=50) is not None and at_end(simple), timeout_s=SETTLE_S)
    simple.commit()
    committed = admin.list_consumer_group_offsets(group)
    assert {tp: c[:2] for tp, c in committed.items()} == {tp: (PER_PARTITION, "") for tp in shared.partitions[:2]}
    assert all(c.leader_epoch >= 0 for c in committed.values())  # the last record's, kept (KIP-320)
    member = consumers(shared.name, group_id=group)
    settle(admin, Driver([member]), group, shared.partitions)
    with pytest.raises(UnknownMemberIdError):
        simple.commit({shared.partitions[0]: 1})
    member.close()
    simple.commit({shared.partitions[0]: 1})
    assert simple.committed([shared.partitions[0]]) == {shared.partitions[0]: OffsetAndMetadata(1)}


def test_commit_sync_async_with_metadata_and_committed(admin, shared, group, consumers):
    """commit() commits the positions, commit(offsets) given offsets with their metadata,
    commit_async calls its callback from a later poll; committed() reads them back."""
    member = consumers(shared.name, group_id=group, enable_auto_commit=False)
    driver = Driver([member])
    settle(admin, driver, group, shared.partitions)
    tp0, tp1, tp2, tp3 = shared.partitions
    assert member.committed([tp0]) == {tp0: None}
    read_to_end(driver, len(shared.values))
    member.commit({tp0: OffsetAndMetadata(3, "checkpoint-3")})
    assert member.committed([tp0, tp1]) == {tp0: OffsetAndMetadata(3, "checkpoint-3"), tp1: None}
    answers = []
    member.commit_async({tp1: 7}, callback=lambda offsets, error: answers.append((offsets, error)))
    wait_until(lambda: driver.poll() or answers, timeout_s=SETTLE_S, message="the commit_async callback")
    assert answers == [({tp1: OffsetAndMetadata(7)}, None)]
    assert member.committed([tp1])[tp1] == OffsetAndMetadata(7)
    member.commit()
    committed = member.committed(shared.partitions)
    assert {tp: c[:2] for tp, c in committed.items()} == {tp: (PER_PARTITION, "") for tp in shared.partitions}
    assert all(c.leader_epoch >= 0 for c in committed.values())  # the last record's, kept (KIP-320)
    assert admin.list_consumer_group_offsets(group) == committed


def test_rapid_commit_async_calls_take_effect_in_the_order_they_were_made(admin, shared, group, consumers):
    """Issue 25, defect 9: commit_async calls made back to back (as Kafka's consumer sends
    them, in order on one connection) take effect in that order, although the coordinator
    runs calls on many threads: once every callback ran, the committed offset is the last
    one asked, and the callbacks ran in order, each without error."""
    simple = consumers(group_id=group, enable_auto_commit=False)
    tp0 = shared.partitions[0]
    simple.assign([tp0])
    assert simple.committed([tp0]) == {tp0: None}  # the coordinator is found (commit_async never retries)
    answers: list[tuple] = []
    for offset in range(1, COMMIT_ASYNC_CALLS + 1):
        simple.commit_async({tp0: offset}, callback=lambda offsets, error: answers.append((offsets[tp0], error)))
    wait_until(
        lambda: simple.poll(timeout_ms=50) is not None and len(answers) == COMMIT_ASYNC_CALLS,
        timeout_s=SETTLE_S,
        message="every commit_async callback",
    )
    assert admin.list_consumer_group_offsets(group) == {tp0: OffsetAndMetadata(COMMIT_ASYNC_CALLS)}
    assert answers == [(OffsetAndMetadata(n), None) for n in range(1, COMMIT_ASYNC_CALLS + 1)]


def test_a_zombie_member_of_an_old_generation_cannot_commit(admin, shared, group, consumers):
    """A member that stops polling for longer than max_poll_interval_ms loses its partitions
    to the others; its commits are then refused (CommitFailedError), also once the group
    is empty, so it cannot move offsets back."""
    zombie = consumers(group_id=group, max_poll_interval_ms=1_500, enable_auto_commit=False)
    other = consumers(group_id=group, enable_auto_commit=False)
    driver = Driver([zombie, other])
    zombie.subscribe([shared.name])
    other.subscribe([shared.name])
    settle(admin, driver, group, shared.partitions)
    read_to_end(driver, len(shared.values))
    owned = sorted(zombie.assignment())
    # The zombie stops polling: after max_poll_interval_ms it is out and the other takes over.
    settle(admin, driver, group, shared.partitions, 1)
    other.commit()
    committed = admin.list_consumer_group_offsets(group)
    with pytest.raises(CommitFailedError):
        zombie.commit({tp: 0 for tp in owned})
    other.close()
    with pytest.raises(CommitFailedError):
        zombie.commit({tp: 0 for tp in owned})  # the group is empty now: still a zombie
    answers = []
    zombie.commit_async({tp: 0 for tp in owned}, callback=lambda offsets, error: answers.append(error))
    zombie.close()  # runs the callback once the commit is answered
    assert len(answers) == 1 and answers[0] is not None, "a zombie's async commit was accepted"
    assert admin.list_consumer_group_offsets(group) == committed


def test_coordinator_killed_right_after_a_rebalance_loads_every_generation_it_told(
    admin, cluster, shared, group, consumers
):
    """The coordinator cannot replicate group records (min.insync.replicas above its ISR)
    while a second member joins, and its actor is killed right after that rebalance: the
    restarted coordinator loads a generation at least as high as any a member was told,
    the group settles, no member sees its generation go back, and no partition has two
    owners in a generation."""
    first = consumers(shared.name, group_id=group, enable_auto_commit=False)
    second = consumers(group_id=group, enable_auto_commit=False)
    driver = Driver([first, second])
    settle(admin, driver, group, shared.partitions, 0)
    partition, coordinator = ray.get(cluster.controller.find_coordinator.remote(group))
    (offsets,) = admin.describe_topics([OFFSETS_TOPIC])
    probe = next(
        g for i in range(1000) if partition_for(g := f"{group}-probe-{i}", len(offsets.partitions)) == partition
    )
    probe_offsets = {shared.partitions[0]: OffsetAndMetadata(0, "")}
    try:
        admin.incremental_alter_configs({OFFSETS_TOPIC: {"min.insync.replicas": "2"}})
        wait_until(  # the coordinator has the config: its appends are refused
            lambda: (
                ray.get(coordinator.commit_offsets.remote(probe, "", -1, None, probe_offsets)).error_code
                == NotEnoughReplicasError.code
            ),
            timeout_s=SETTLE_S,
            message="the coordinator refusing appends",
        )
        second.subscribe([shared.name])
        wait_until(
            lambda: (
                driver.poll()
                or ((d := admin.describe_consumer_groups([group])[0]).generation >= 2 and len(d.members) == 2)
            ),
            timeout_s=SETTLE_S,
            message="a rebalance with both members",
        )
        driver.poll()  # the members take what they were told
        ray.kill(coordinator, no_restart=False)
        told = max([m.group_metadata()["generation"] for m in driver.members] + sum(driver.generations.values(), []))
    finally:
        admin.incremental_alter_configs({OFFSETS_TOPIC: {"min.insync.replicas": None}})
    (reloaded,) = wait_until(
        lambda: quietly(admin.describe_consumer_groups, [group]), timeout_s=SETTLE_S, message="the groups reloaded"
    )
    assert reloaded.generation >= told >= 1, f"members were told generation {told}, the log has {reloaded.generation}"
    settle(admin, driver, group, shared.partitions)
    driver.assert_generations_never_go_back()
    driver.assert_one_owner_per_generation()
    try:
        admin.delete_consumer_groups([probe])
    except GroupIdNotFoundError:
        pass  # its commit was refused from the start


def quietly(fn, *args):
    """``fn(*args)``, or None while the coordinator restarts and reloads."""
    try:
        return fn(*args)
    except (RaylogError, ray.exceptions.RayError):
        return None


def test_consumer_protocol_members_keep_one_owner_per_partition_while_their_coordinator_is_killed(
    admin, cluster, shared, group, consumers
):
    """Members of Kafka's consumer protocol (KIP-848): the coordinator's actor is killed
    while a second member joins and partitions are being handed over; the restarted
    coordinator loads the group from its log, the members' heartbeats find it again, and at
    no poll do two members own a partition; the group settles and nothing is left unread."""
    config = {"group_protocol": "consumer", "enable_auto_commit": False}
    first = consumers(shared.name, group_id=group, **config)
    second = consumers(group_id=group, **config)
    driver = Driver([first, second])
    settle(admin, driver, group, shared.partitions, 0)
    _, coordinator = ray.get(cluster.controller.find_coordinator.remote(group))
    second.subscribe([shared.name])
    wait_until(
        lambda: driver.poll() or second.group_metadata()["generation"] > 0,
        timeout_s=SETTLE_S,
        message="the second member admitted",
    )
    ray.kill(coordinator, no_restart=False)  # mid hand-over: the first still owns what it must give up
    wait_until(
        lambda: driver.poll() or quietly(settled, admin, group, driver.members, shared.partitions),
        timeout_s=SETTLE_S,
        message="the group settled after its coordinator restarted",
    )
    read_to_end(driver, len(shared.values))
    assert set(driver.values()) == set(shared.values)


def test_static_member_restarts_into_its_place_without_a_rebalance(admin, shared, group, consumers):
    """A static member (group_instance_id) closed and recreated with the same id gets the
    same partitions back in the same generation; the other member is not disturbed."""
    static = consumers(shared.name, group_id=group, group_instance_id="static-a")
    other = consumers(shared.name, group_id=group)
    driver = Driver([static, other])
    described = settle(admin, driver, group, shared.partitions)
    owned, others = static.assignment(), other.assignment()
    static.close()
    back = consumers(shared.name, group_id=group, group_instance_id="static-a")
    driver.members[0] = back
    again = settle(admin, driver, group, shared.partitions)
    assert again.generation == described.generation, "a static member's restart caused a rebalance"
    assert back.assignment() == owned
    assert other.assignment() == others and other.group_metadata()["generation"] == described.generation
    assert back.group_metadata()["group_instance_id"] == "static-a"


def test_long_step_between_polls_does_not_cause_a_rebalance(admin, shared, group, consumers):
    """With max_poll_interval_ms=None, a member that does not poll for longer than its
    session timeout (a long training step) keeps its partitions: heartbeats come from a
    thread of their own. Nothing is rebalanced."""
    stepper = consumers(shared.name, group_id=group, session_timeout_ms=3_000, max_poll_interval_ms=None)
    other = consumers(shared.name, group_id=group, session_timeout_ms=3_000)
    driver = Driver([stepper, other])
    described = settle(admin, driver, group, shared.partitions)
    owned, others = stepper.assignment(), other.assignment()
    step_s = 4.5  # the point of this test: longer than the session timeout
    started = time.monotonic()
    while time.monotonic() - started < step_s:
        driver.poll(1)  # only the other member polls meanwhile
    after = settle(admin, driver, group, shared.partitions)
    assert after.generation == described.generation, "the long step caused a rebalance"
    assert stepper.assignment() == owned and other.assignment() == others
    read_to_end(driver, len(shared.values))
    assert_exactly_once(driver.values(), shared.values)


# --- delivery semantics -----------------------------------------------------------------------


def test_at_least_once_processing_before_commit_loses_nothing(admin, shared, group, consumers):
    """Process, then commit: a consumer that dies between the two has its last batch read
    again by the next owner, and no record is lost."""
    first = consumers(
        shared.name, group_id=group, max_poll_records=10, enable_auto_commit=False, max_poll_interval_ms=1_000
    )
    processed: list[bytes] = []
    for batch in range(3):  # two batches processed and committed, a third processed only
        records = next_batch(first)
        processed.extend(r.value for r in records)
        if batch < 2:
            first.commit()
    in_flight = records
    # ``first`` is abandoned here, uncommitted: after max_poll_interval_ms it is out.
    second = consumers(shared.name, group_id=group, enable_auto_commit=False)
    driver = Driver([second])
    settle(admin, driver, group, shared.partitions)
    read_to_end(driver, 0)
    again = driver.values()
    assert set(processed) | set(again) == set(shared.values), "a record was lost"
    repeated = set(processed) & set(again)
    assert repeated == {r.value for r in in_flight}, "only the uncommitted batch may be read again"


def test_at_most_once_commit_before_processing_repeats_nothing(admin, shared, group, consumers):
    """Commit, then process: a consumer that dies mid-batch loses at most the rest of that
    batch, and the next owner reads nothing again."""
    first = consumers(
        shared.name, group_id=group, max_poll_records=10, enable_auto_commit=False, max_poll_interval_ms=1_000
    )
    processed: list[bytes] = []
    for batch in range(3):
        records = next_batch(first)
        first.commit()
        upto = len(records) if batch < 2 else len(records) // 2  # dies halfway through the third
        processed.extend(r.value for r in records[:upto])
    in_flight = {r.value for r in records}
    second = consumers(shared.name, group_id=group, enable_auto_commit=False)
    driver = Driver([second])
    settle(admin, driver, group, shared.partitions)
    read_to_end(driver, 0)
    again = driver.values()
    assert not set(processed) & set(again), "a record was processed twice"
    lost = set(shared.values) - set(processed) - set(again)
    assert lost and lost <= in_flight, "more than the in-flight batch was lost"


# --- a consumer's process killed for real ------------------------------------------------------


class GroupWorker:
    """A group member in a process of its own (a Ray actor): each ``poll`` reads a batch,
    "processes" it (returns it) and, if asked, commits it; revoked partitions are committed
    by its listener."""

    def __init__(self, cluster, topic: str, group_id: str, config: dict):
        self.consumer = Consumer(cluster, group_id=group_id, **config)
        listener = Recorder()
        listener.consumer = self.consumer
        self.consumer.subscribe([topic], listener=listener)

    def poll(self, commit: bool) -> dict:
        records = [r for rs in self.consumer.poll(timeout_ms=50).values() for r in rs]
        commit_and_carry_on(self.consumer, records and commit)
        return {
            "records": [(r.partition, r.offset, r.value) for r in records],
            "assignment": sorted(tp.partition for tp in self.consumer.assignment()),
            **self.consumer.group_metadata(),
        }


def commit_and_carry_on(consumer: Consumer, commit: bool) -> None:
    """Commit what was processed; a commit refused because the group moved to a new
    generation meanwhile is left to the next poll (which rejoins, and the listener commits
    what it gives up) — what an application does with a CommitFailedError."""
    if commit:
        try:
            consumer.commit()
        except CommitFailedError:
            pass


def test_a_killed_consumer_process_hands_its_partitions_on_from_the_committed_offsets(
    admin, cluster, shared, group, consumers
):
    """A member whose process is killed (no leave, its last batch not committed) loses its
    partitions to the survivor after the session timeout; the survivor resumes them from
    the committed offsets: nothing committed is lost, only what the dead member read after
    its last commit is read again."""
    config = {**FAST, "enable_auto_commit": False, "max_poll_records": 5}
    worker = ray.remote(GroupWorker).options(num_cpus=0).remote(cluster, shared.name, group, config)
    survivor = consumers(group_id=group, enable_auto_commit=False, max_poll_records=5)
    listener = Recorder()
    listener.consumer = survivor
    survivor.subscribe([shared.name], listener=listener)
    by_survivor: list[tuple[int, int, bytes]] = []  # (partition, offset, value), processed
    by_worker: list[tuple[int, int, bytes]] = []
    state = {}

    def survivor_poll() -> list:
        records = [r for rs in survivor.poll(timeout_ms=50).values() for r in rs]
        commit_and_carry_on(survivor, bool(records))  # process, then commit
        return [(r.partition, r.offset, r.value) for r in records]

    def worker_poll(commit: bool) -> list:
        state.update(ray.get(worker.poll.remote(commit), timeout=SETTLE_S))
        by_worker.extend(state["records"])
        return state["records"]

    def both_poll() -> None:
        by_survivor.extend(survivor_poll())
        worker_poll(True)

    def split_in_two():
        (described,) = admin.describe_consumer_groups([group])
        local = sorted(tp.partition for tp in survivor.assignment())
        return (
            described.state == "Stable"
            and len(described.members) == 2
            and state["generation"] == survivor.group_metadata()["generation"] == described.generation
            and sorted(local + state["assignment"]) == list(range(SHARED_PARTITIONS))
            and local
            and state["assignment"]
        )

    wait_until(lambda: both_poll() or split_in_two(), timeout_s=SETTLE_S, message="both members own partitions")
    taken = [TopicPartition(shared.name, p) for p in state["assignment"]]
    wait_until(
        lambda: both_poll() or sum(1 for p, _, _ in by_worker if p in state["assignment"]) >= 10,
        timeout_s=SETTLE_S,
        message="the worker reading",
    )
    # One more batch, processed but not committed, then the process dies.
    tail = wait_until(lambda: worker_poll(False), timeout_s=SETTLE_S, message="a last batch")
    committed = admin.list_consumer_group_offsets(group)
    ray.kill(worker, no_restart=True)
    killed = time.monotonic()
    after: list[tuple[int, int, bytes]] = []
    wait_until(
        lambda: after.extend(survivor_poll()) or len(survivor.assignment()) == SHARED_PARTITIONS,
        timeout_s=SETTLE_S,
        message="the survivor taking the dead member's partitions",
    )
    handed_over_s = time.monotonic() - killed
    # The session runs from the last heartbeat before the kill: half of it is a safe lower bound.
    assert handed_over_s >= FAST["session_timeout_ms"] / 1000 / 2, "handed over before the session timed out"
    wait_until(
        lambda: after.extend(survivor_poll()) or at_end(survivor), timeout_s=SETTLE_S, message="the survivor at the end"
    )
    starts = {tp: committed[tp].offset if tp in committed else 0 for tp in taken}
    for tp in taken:
        resumed = [offset for p, offset, _ in after if p == tp.partition]
        # (The worker may have read and committed a whole partition while it was alone.)
        first = [starts[tp]] if starts[tp] < PER_PARTITION else []
        assert resumed[:1] == first, f"{tp} did not resume from its committed offset {starts[tp]}: {resumed}"
    # Read by the worker past the committed offsets of the partitions it held when it died
    # (of partitions it held only earlier, what it read may have been committed since).
    uncommitted = {v for p, o, v in by_worker if (tp := TopicPartition(shared.name, p)) in starts and o >= starts[tp]}
    not_known_committed = {v for p, o, v in by_worker if o >= starts.get(TopicPartition(shared.name, p), 0)}
    assert {v for _, _, v in tail} <= uncommitted
    values = collections.Counter(v for _, _, v in by_survivor + by_worker + after)
    assert set(values) == set(shared.values), "a record was lost"
    assert {v for v, n in values.items() if n > 1} <= not_known_committed, "a committed record was read twice"
    assert uncommitted <= {v for _, _, v in after}, "what the dead member did not commit was not read again"


# --- admin and command line ---------------------------------------------------------------------


def test_admin_lists_describes_resets_and_deletes_groups(admin, cluster, shared, group, consumers):
    """Admin lists groups with their state, describes members and per partition the
    committed offset, log end offset and lag; resets offsets (earliest, latest, to a time,
    shift by N; dry runs change nothing) and deletes groups, both refused while active."""
    member = consumers(shared.name, group_id=group, enable_auto_commit=False, client_id="lag-test")
    driver = Driver([member])
    settle(admin, driver, group, shared.partitions)
    read_to_end(driver, len(shared.values))
    tp0, tp1, tp2, tp3 = shared.partitions
    member.commit({tp0: 5, tp1: PER_PARTITION, tp2: 0})
    assert (group, "Stable") in admin.list_consumer_groups()
    (described,) = admin.describe_consumer_groups([group])
    member_id = member.group_metadata()["member_id"]
    assert (described.state, described.protocol) == ("Stable", "cooperative-sticky")
    assert [(m.member_id, m.client_id, set(m.assignment)) for m in described.members] == [
        (member_id, "lag-test", set(shared.partitions))
    ]
    lags = {tp: (lag.committed, lag.log_end_offset, lag.lag, lag.member_id) for tp, lag in described.partitions.items()}
    assert lags == {
        tp0: (5, PER_PARTITION, PER_PARTITION - 5, member_id),
        tp1: (PER_PARTITION, PER_PARTITION, 0, member_id),
        tp2: (0, PER_PARTITION, PER_PARTITION, member_id),
        tp3: (None, PER_PARTITION, None, member_id),
    }
    with pytest.raises(NonEmptyGroupError):
        admin.delete_consumer_groups([group])
    with pytest.raises(NonEmptyGroupError):
        admin.reset_consumer_group_offsets(group, [tp0], to="earliest")
    member.close()
    assert (group, "Empty") in admin.list_consumer_groups()
    before = admin.list_consumer_group_offsets(group)

    def reset(**how) -> dict:
        dry = admin.reset_consumer_group_offsets(group, [tp0, tp1], dry_run=True, **how)
        assert admin.list_consumer_group_offsets(group) == before, "a dry run changed offsets"
        done = admin.reset_consumer_group_offsets(group, [tp0, tp1], **how)
        assert done == dry
        after = admin.list_consumer_group_offsets(group)
        assert {tp: after[tp].offset for tp in (tp0, tp1)} == done and after[tp2] == before[tp2]
        before.update(after)
        return {tp.partition: offset for tp, offset in done.items()}

    assert reset(to="earliest") == {0: 0, 1: 0}
    assert reset(to="latest") == {0: PER_PARTITION, 1: PER_PARTITION}
    assert reset(to_timestamp_ms=shared.base_timestamp_ms + 10 * TIMESTAMP_STEP_MS) == {0: 10, 1: 10}
    assert reset(shift_by=-3) == {0: 7, 1: 7}
    assert reset(shift_by=100) == {0: PER_PARTITION, 1: PER_PARTITION}
    reset(shift_by=-(PER_PARTITION - 20))
    # A new member starts where the offsets were reset to (tp2 at its commit, tp3 at the start).
    resumed = consumers(shared.name, group_id=group, enable_auto_commit=False)
    driver = Driver([resumed])
    settle(admin, driver, group, shared.partitions)
    read_to_end(driver, 5 + 5 + 2 * PER_PARTITION)
    firsts: dict[int, int] = {}
    for record in driver.read[0]:
        firsts.setdefault(record.partition, record.offset)
    assert firsts == {0: 20, 1: 20, 2: 0, 3: 0}
    assert len(driver.values()) == 5 + 5 + 2 * PER_PARTITION
    resumed.close()
    admin.delete_consumer_groups([group])
    assert group not in {g for g, _ in admin.list_consumer_groups()}
    with pytest.raises(GroupIdNotFoundError):
        admin.describe_consumer_groups([group])


def test_admin_deletes_the_offsets_of_topics_no_member_reads(admin, shared, group, consumers):
    """delete_consumer_group_offsets (Kafka's OffsetDelete): an empty group's offsets go;
    while a member reads the topic they stay (GROUP_SUBSCRIBED_TO_TOPIC); a group that never
    existed is GROUP_ID_NOT_FOUND."""
    tp0, tp1 = shared.partitions[:2]
    admin.alter_consumer_group_offsets(group, {tp0: 5, tp1: 6})
    admin.delete_consumer_group_offsets(group, [tp0])
    assert set(admin.list_consumer_group_offsets(group)) == {tp1}
    member = consumers(shared.name, group_id=group, enable_auto_commit=False)
    settle(admin, Driver([member]), group, shared.partitions)
    with pytest.raises(GroupSubscribedToTopicError):
        admin.delete_consumer_group_offsets(group, [tp1])
    assert set(admin.list_consumer_group_offsets(group)) == {tp1}
    member.close()
    with pytest.raises(GroupIdNotFoundError):
        admin.delete_consumer_group_offsets(f"never-{group}", [tp0])


@pytest.fixture
def run(cluster, capsys):
    """``run(*argv)`` -> (exit code, stdout, stderr) of the ``raylog`` command, in-process."""

    def invoke(*argv: str):
        code = cli.main([*argv, "--cluster-name", cluster.cluster_name])
        out, err = capsys.readouterr()
        return code, out, err

    return invoke


def test_command_line_consumes_as_a_group_and_lists_describes_resets_deletes(run, admin, shared, group, consumers):
    """``raylog consume --group`` reads as a member and commits; ``raylog groups`` lists,
    describes (with lag), resets offsets (a dry run unless --execute) and deletes groups,
    refusing with exit code 1 while the group has members."""
    total = str(len(shared.values))
    code, out, err = run(
        "consume", shared.name, "--group", group, "--from-beginning", "--max-messages", total, "--timeout-ms", "20000"
    )
    assert code == 0, err
    assert sorted(out.split()) == sorted(v.decode() for v in shared.values)
    code, out, _ = run("groups", "list")
    assert code == 0 and f"{group}\tEmpty" in out.splitlines()
    code, out, _ = run("groups", "describe", group, "--json")
    (described,) = json.loads(out)
    assert code == 0 and described["group_id"] == group and described["members"] == []
    assert {(p["partition"], p["committed"], p["log_end_offset"], p["lag"]) for p in described["partitions"]} == {
        (p, PER_PARTITION, PER_PARTITION, 0) for p in range(SHARED_PARTITIONS)
    }
    code, out, err = run("groups", "reset-offsets", group, "--topic", shared.name, "--shift-by", "-2")
    assert code == 0 and "dry run" in err
    assert [line.split()[-1] for line in out.splitlines()[1:]] == ["23"] * SHARED_PARTITIONS
    assert {o.offset for o in admin.list_consumer_group_offsets(group).values()} == {PER_PARTITION}
    code, out, _ = run("groups", "reset-offsets", group, "--topic", shared.name, "--shift-by", "-2", "--execute")
    assert code == 0
    assert {o.offset for o in admin.list_consumer_group_offsets(group).values()} == {PER_PARTITION - 2}
    code, out, err = run("consume", shared.name, "--group", group, "--max-messages", "8", "--timeout-ms", "20000")
    assert code == 0, err
    assert sorted(out.split()) == sorted(f"{p}-{i}" for p in range(SHARED_PARTITIONS) for i in (23, 24))
    member = consumers(shared.name, group_id=group)
    settle(admin, Driver([member]), group, shared.partitions)
    code, out, _ = run("groups", "describe", group)
    assert code == 0 and "Stable" in out.splitlines()[0] and member.group_metadata()["member_id"] in out
    code, _, err = run("groups", "delete", group)
    assert code == 1 and "NonEmptyGroupError" in err
    member.close()
    code, _, err = run("groups", "delete", group)
    assert code == 0, err
    code, out, _ = run("groups", "list")
    assert group not in out
