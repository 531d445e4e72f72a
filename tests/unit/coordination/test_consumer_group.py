"""Kafka 4's consumer group protocol (KIP-848, raylog.coordination.consumer_group): the
coordinator assigns on the server and reconciles each member one heartbeat at a time; no
Ray, no clock. The seeded runs at the end drive it with clients that follow the protocol as
librdkafka does and check that no partition is ever held by two of them."""

from __future__ import annotations

import itertools
import random

import pytest

from raylog.clients.member import ConsumerProtocolMember
from raylog.common.group_protocol import JOIN_EPOCH, LEAVE_EPOCH, RANGE, STATIC_LEAVE_EPOCH, Heartbeat
from raylog.coordination.consumer_group import (
    ASSIGNING,
    EMPTY,
    RECONCILING,
    STABLE_GROUP,
    UNRELEASED_PARTITIONS,
    UNREVOKED_PARTITIONS,
    ConsumerGroupConfig,
    ConsumerGroups,
    group_record,
)
from raylog.errors import (
    FencedMemberEpochError,
    GroupMaxSizeReachedError,
    InvalidRegularExpressionError,
    InvalidRequestError,
    StaleMemberEpochError,
    UnknownMemberIdError,
    UnreleasedInstanceIdError,
    UnsupportedAssignorError,
)
from raylog.types import TopicPartition

TOPICS = {"orders": 4, "clicks": 2}
_ids = (f"generated-{i}" for i in itertools.count())  # (ids of members that send none)


def tps(topic: str, *partitions: int) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(topic, p) for p in partitions)


def join(member_id: str, topics=("orders",), **fields) -> Heartbeat:
    fields = {"rebalance_timeout_ms": 60_000, "owned": frozenset(), **fields}
    return Heartbeat("g", member_id, JOIN_EPOCH, topics=topics, **fields)


def beat(groups: ConsumerGroups, request: Heartbeat, now_ms: int = 0, topics=TOPICS):
    answer, _ = groups.heartbeat(request, topics, now_ms, lambda: next(_ids))
    return answer


def test_a_first_member_gets_every_partition_and_a_second_one_gets_half_once_the_first_revoked_them():
    groups = ConsumerGroups()
    a = beat(groups, join("a"))
    assert (a.member_epoch, a.assignment) == (1, tps("orders", 0, 1, 2, 3))
    b = beat(groups, join("b"))
    group = groups.describe("g")
    assert group.epoch == 2 and b.member_epoch == 2 and b.assignment == frozenset()  # all still held by a
    assert group.members["b"].state == UNRELEASED_PARTITIONS
    # a is told to give up half: it stays at epoch 1 until it says it did.
    a = beat(groups, Heartbeat("g", "a", 1, owned=tps("orders", 0, 1, 2, 3)))
    assert a.member_epoch == 1 and len(a.assignment) == 2
    assert groups.describe("g").members["a"].state == UNREVOKED_PARTITIONS
    kept = a.assignment
    assert beat(groups, Heartbeat("g", "b", 2, owned=frozenset())).assignment is None  # nothing released yet
    a = beat(groups, Heartbeat("g", "a", 1, owned=kept))
    assert a.member_epoch == 2 and a.assignment == kept
    b = beat(groups, Heartbeat("g", "b", 2, owned=frozenset()))
    assert b.assignment == tps("orders", 0, 1, 2, 3) - kept
    assert groups.describe("g").state() == STABLE_GROUP


def test_epochs_a_member_may_send():
    groups = ConsumerGroups()
    beat(groups, join("a"))
    beat(groups, join("b"))
    with pytest.raises(FencedMemberEpochError):
        beat(groups, Heartbeat("g", "a", 7))
    with pytest.raises(UnknownMemberIdError):
        beat(groups, Heartbeat("g", "nobody", 1))
    with pytest.raises(InvalidRequestError):
        beat(groups, Heartbeat("g", "", 1))
    with pytest.raises(InvalidRequestError):
        beat(groups, Heartbeat("g", "a", -3))
    # a is told to revoke half, does, and moves to epoch 2; that answer is lost: a sends
    # epoch 1 again, owning part of its assignment, and is accepted (told epoch 2 again).
    a = beat(groups, Heartbeat("g", "a", 1, owned=tps("orders", 0, 1, 2, 3)))
    kept = a.assignment
    assert beat(groups, Heartbeat("g", "a", 1, owned=kept)).member_epoch == 2
    assert beat(groups, Heartbeat("g", "a", 1, owned=kept)).member_epoch == 2
    with pytest.raises(FencedMemberEpochError):  # the epoch before, owning what it was not given
        beat(groups, Heartbeat("g", "a", 1, owned=tps("orders", 0, 1, 2, 3)))


def test_a_joining_member_must_say_what_it_subscribes_to_and_own_nothing():
    groups = ConsumerGroups()
    for bad in (
        Heartbeat("g", "a", JOIN_EPOCH, topics=("orders",)),  # no rebalance timeout
        Heartbeat("g", "a", JOIN_EPOCH, rebalance_timeout_ms=1000),  # no subscription
        join("a", owned=tps("orders", 0)),
        Heartbeat("", "a", JOIN_EPOCH, rebalance_timeout_ms=1000, topics=("orders",)),
    ):
        with pytest.raises(InvalidRequestError):
            beat(groups, bad)
    with pytest.raises(UnsupportedAssignorError):
        beat(groups, join("a", assignor="sticky"))
    with pytest.raises(InvalidRegularExpressionError):
        beat(groups, Heartbeat("g", "a", JOIN_EPOCH, rebalance_timeout_ms=1000, regex="orders("))
    assert groups.describe("g") is None, "a refused heartbeat changes nothing"
    answer, _ = groups.heartbeat(join(""), TOPICS, 0, lambda: "given")  # a v0 client sends none
    assert answer.member_id == "given" and set(groups.describe("g").members) == {"given"}


def test_a_static_member_away_for_a_while_keeps_its_partitions_and_gets_them_back_without_a_rebalance():
    groups = ConsumerGroups()
    a = beat(groups, join("a1", instance_id="host-a"))
    epoch = groups.describe("g").epoch
    assert beat(groups, Heartbeat("g", "a1", a.member_epoch, owned=a.assignment)).member_epoch == a.member_epoch
    assert beat(groups, Heartbeat("g", "a1", STATIC_LEAVE_EPOCH)).member_epoch == STATIC_LEAVE_EPOCH
    with pytest.raises(UnknownMemberIdError):  # gone for now: it comes back with epoch 0
        beat(groups, Heartbeat("g", "a1", a.member_epoch))
    back = beat(groups, join("a2", instance_id="host-a"))
    assert (back.member_epoch, back.assignment) == (a.member_epoch, a.assignment)
    assert groups.describe("g").epoch == epoch, "no rebalance"
    with pytest.raises(UnreleasedInstanceIdError):  # held by a2, which did not leave
        beat(groups, join("a3", instance_id="host-a"))


def test_leaving_frees_the_partitions_at_once():
    groups = ConsumerGroups()
    beat(groups, join("a"))
    beat(groups, join("b"))
    assert beat(groups, Heartbeat("g", "a", LEAVE_EPOCH)).member_epoch == LEAVE_EPOCH
    b = beat(groups, Heartbeat("g", "b", 2, owned=frozenset()))
    assert b.assignment == tps("orders", 0, 1, 2, 3)


def test_a_member_whose_session_ends_or_that_does_not_revoke_in_time_is_fenced():
    config = ConsumerGroupConfig(group_consumer_session_timeout_ms=10_000)
    groups = ConsumerGroups(config)
    a = beat(groups, join("a", rebalance_timeout_ms=60_000), now_ms=0)
    beat(groups, join("b"), now_ms=0)
    beat(groups, Heartbeat("g", "a", a.member_epoch, owned=a.assignment), now_ms=5_000)  # told to revoke
    assert groups.tick(9_999) == {}
    records = groups.tick(10_000)  # b's session ran out
    assert list(records) == ["g"] and set(groups.describe("g").members) == {"a"}
    groups = ConsumerGroups(config)
    a = beat(groups, Heartbeat("g", "a", 0, rebalance_timeout_ms=3_000, topics=("orders",), owned=frozenset()))
    beat(groups, Heartbeat("g", "b", 0, rebalance_timeout_ms=3_000, topics=("orders",), owned=frozenset()))
    beat(groups, Heartbeat("g", "a", a.member_epoch, owned=a.assignment), now_ms=1_000)
    beat(groups, Heartbeat("g", "a", a.member_epoch, owned=a.assignment), now_ms=3_000)  # still holds them
    groups.tick(4_000)
    assert "a" not in groups.describe("g").members, "fenced 3 s after it was told to revoke"


def test_offset_commits_carry_the_members_epoch():
    groups = ConsumerGroups()
    a = beat(groups, join("a"))
    groups.check_commit("g", "a", a.member_epoch)
    with pytest.raises(StaleMemberEpochError):
        groups.check_commit("g", "a", a.member_epoch - 1)
    with pytest.raises(FencedMemberEpochError):
        groups.check_commit("g", "a", a.member_epoch + 1)
    with pytest.raises(UnknownMemberIdError):
        groups.check_commit("g", "z", 1)
    with pytest.raises(UnknownMemberIdError):  # an admin's commit while the group has members
        groups.check_commit("g", "", -1)
    groups.check_commit("empty", "", -1)


def test_a_subscribed_topic_that_grows_or_appears_moves_the_group_epoch_on():
    groups = ConsumerGroups()
    a = beat(groups, Heartbeat("g", "a", 0, rebalance_timeout_ms=1_000, regex="or.*", owned=frozenset()))
    assert a.assignment == tps("orders", 0, 1, 2, 3)
    grown = {**TOPICS, "orders": 6, "orbit": 1}
    a = beat(groups, Heartbeat("g", "a", a.member_epoch, owned=a.assignment), topics=grown)
    assert a.member_epoch == 2 and a.assignment == tps("orders", 0, 1, 2, 3, 4, 5) | tps("orbit", 0)


def test_the_range_assignor_and_the_groups_vote():
    groups = ConsumerGroups()
    a = beat(groups, join("a", topics=("orders", "clicks"), assignor=RANGE))
    assert groups.describe("g").assignor == RANGE
    assert a.assignment == tps("orders", 0, 1, 2, 3) | tps("clicks", 0, 1)


def test_the_group_size_is_bounded():
    groups = ConsumerGroups(ConsumerGroupConfig(group_consumer_max_size=1))
    beat(groups, join("a"))
    with pytest.raises(GroupMaxSizeReachedError):
        beat(groups, join("b"))


def test_a_new_coordinator_loads_the_epochs_and_assignments_members_were_told():
    groups = ConsumerGroups()
    records = []
    for request in (join("a", instance_id="i"), join("b", topics=("orders", "clicks"))):
        records.append(groups.heartbeat(request, TOPICS, 0, lambda: "x")[1])
    a = groups.describe("g").members["a"]
    records.append(groups.heartbeat(Heartbeat("g", "a", a.epoch, owned=a.assigned), TOPICS, 0, lambda: "x")[1])
    loaded = ConsumerGroups()
    for _, value in filter(None, records):
        loaded.load("g", value, now_ms=100)
    old, new = groups.describe("g"), loaded.describe("g")
    assert (new.epoch, new.assignment_epoch, new.assignor, new.counts, new.target) == (
        old.epoch,
        old.assignment_epoch,
        old.assignor,
        old.counts,
        old.target,
    )
    for member_id, member in old.members.items():
        again = new.members[member_id]
        assert (again.epoch, again.assigned, again.revoking, again.state, again.instance_id) == (
            member.epoch,
            member.assigned,
            member.revoking,
            member.state,
            member.instance_id,
        )
    assert loaded.delete("nope") is None
    with pytest.raises(InvalidRequestError):
        loaded.delete("g")


class Client:
    """A consumer as librdkafka runs KIP-848: it owns what its last answer assigned, gives
    up what an answer took away before its next heartbeat, rejoins with epoch 0 (owning
    nothing) when fenced."""

    def __init__(self, member_id: str, topics: tuple[str, ...], instance_id: str | None = None):
        self.member_id, self.topics, self.instance_id = member_id, topics, instance_id
        self.epoch = JOIN_EPOCH
        self.owned: frozenset[TopicPartition] = frozenset()
        self.told: frozenset[TopicPartition] | None = None  # what it last said it owns
        self.joined = False

    def request(self, rng: random.Random) -> Heartbeat:
        if not self.joined:
            return Heartbeat(
                "g",
                self.member_id,
                JOIN_EPOCH,
                instance_id=self.instance_id,
                rebalance_timeout_ms=30_000,
                topics=self.topics,
                owned=frozenset(),
            )
        # What it owns goes with a heartbeat when it changed since it last said (and now
        # and then anyway, as a full heartbeat).
        if self.owned != self.told or rng.random() < 0.2:
            self.told = self.owned
            return Heartbeat("g", self.member_id, self.epoch, owned=self.owned)
        return Heartbeat("g", self.member_id, self.epoch)

    def answered(self, answer) -> None:
        if not self.joined:
            self.told = frozenset()  # it joined owning nothing
        self.joined = True
        self.epoch = answer.member_epoch
        if answer.assignment is not None:
            self.owned = answer.assignment

    def fenced(self) -> None:
        self.joined, self.epoch, self.owned, self.told = False, JOIN_EPOCH, frozenset(), None


class RaylogClient:
    """A raylog Consumer with ``group_protocol="consumer"``: the member rules it runs
    (:class:`raylog.clients.member.ConsumerProtocolMember`), its heartbeat thread
    (:meth:`beat`) and its polls (:meth:`poll`, which apply the last answer), interleaved at
    random. ``owned`` is what it reads."""

    def __init__(self, member_id: str, topics: tuple[str, ...], instance_id: str | None = None):
        self.state = ConsumerProtocolMember(member_id)
        self.member_id, self.topics, self.instance_id = member_id, topics, instance_id
        self.owned: frozenset[TopicPartition] = frozenset()

    @property
    def joined(self) -> bool:
        return self.state.epoch > JOIN_EPOCH

    def beat(self, groups: ConsumerGroups, topics: dict, now: int, lose_answer: bool) -> None:
        if self.state.lost:
            return  # it joins again only once a poll gave up what it held
        request = self.state.request(
            "g", self.topics, self.owned, instance_id=self.instance_id, assignor=None, rebalance_timeout_ms=30_000
        )
        try:
            answer = _checked(groups, request, topics, now)
        except (FencedMemberEpochError, UnknownMemberIdError) as exc:
            assert self.state.failed(exc, request.member_epoch)
            return
        except UnreleasedInstanceIdError:
            return  # the earlier holder of its instance id has not left yet
        if not lose_answer:
            self.state.answered(answer, request.member_epoch)

    def poll(self) -> None:
        added, revoked, lost = self.state.take(self.owned)
        assert not (lost and added)
        self.owned = (self.owned | frozenset(added)) - frozenset(revoked)

    def leave(self, groups: ConsumerGroups, topics: dict, now: int) -> None:
        if self.joined:
            try:
                _checked(groups, self.state.leave_request("g", self.instance_id), topics, now)
            except (FencedMemberEpochError, UnknownMemberIdError):
                pass  # expired already (the client lets the session timeout remove it)
        self.state.left()
        self.poll()

    def fenced(self) -> None:
        """Its session ran out: it gives up what it reads as lost (a real client learns it
        from its next heartbeat, and reads on until then: Kafka's zombie, whose commits the
        member epoch refuses; the other Client here learns it at once too)."""
        self.state.left()
        self.poll()


@pytest.mark.parametrize("raylog_share", [0.0, 0.6])
@pytest.mark.parametrize("seed", range(100))
def test_seeded_heartbeats_never_give_a_partition_to_two_members_and_converge(seed, raylog_share):
    """Random heartbeats, lost answers, joins, leaves, static restarts and session
    expiries, from librdkafka-like clients alone or beside raylog's own member rules (whose
    polls come in any order with its heartbeats): at every step each partition is owned by
    one client at most (the clients' own view, what they would be reading), and once the
    group is left alone every subscribed partition is owned, each once, within a few rounds
    of heartbeats, balanced among members with the same subscription."""
    rng = random.Random(seed)
    topics = {"orders": rng.randint(1, 8), "clicks": rng.randint(1, 4)}
    groups = ConsumerGroups(ConsumerGroupConfig(group_consumer_session_timeout_ms=20_000))
    clients: dict[str, Client | RaylogClient] = {}
    now = 0
    for step in range(300):
        now += rng.randint(1, 500)
        event = rng.random()
        if event < 0.08 and len(clients) < 6:
            name = f"m{step}"
            static = f"i{rng.randint(0, 3)}" if rng.random() < 0.3 else None
            if static is None or all(c.instance_id != static for c in clients.values()):
                kind = RaylogClient if rng.random() < raylog_share else Client
                clients[name] = kind(name, rng.choice([("orders",), ("orders", "clicks"), ("clicks",)]), static)
        elif event < 0.12 and clients:
            client = clients.pop(rng.choice(sorted(clients)))
            if isinstance(client, RaylogClient):
                client.leave(groups, topics, now)
            elif client.joined:
                epoch = STATIC_LEAVE_EPOCH if client.instance_id and rng.random() < 0.5 else LEAVE_EPOCH
                _checked(groups, Heartbeat("g", client.member_id, epoch), topics, now)
        elif event < 0.14:
            for record in groups.tick(now + 25_000).values():  # every session runs out
                assert record
            for client in clients.values():
                client.fenced()
        elif clients:
            client = clients[rng.choice(sorted(clients))]
            if isinstance(client, RaylogClient) and rng.random() < 0.5:
                client.poll()
            elif isinstance(client, RaylogClient):
                client.beat(groups, topics, now, lose_answer=rng.random() < 0.1)
            else:
                _librdkafka_beat(groups, client, topics, now, rng, lose_answer=rng.random() < 0.1)
        _check_one_owner(clients)
    # Left alone: every client heartbeats (and polls) every 5 s; members no client speaks
    # for (gone without leaving, or static ones away) run out of session after 20 s.
    for _ in range(16):
        now += 5_000
        groups.tick(now)
        for client in clients.values():
            if isinstance(client, RaylogClient):
                client.beat(groups, topics, now, lose_answer=False)
                client.poll()
            else:
                _librdkafka_beat(groups, client, topics, now, random.Random(0), lose_answer=False)
            _check_one_owner(clients)
    joined = [c for c in clients.values() if c.joined]
    assert all(not c.owned for c in clients.values() if not c.joined)
    if joined:
        assert groups.describe("g").state() == STABLE_GROUP, seed
        wanted = {TopicPartition(t, p) for c in joined for t in c.topics for p in range(topics[t])}
        assert set().union(*(c.owned for c in joined)) == wanted
        sizes = [len(c.owned) for c in joined if c.topics == ("orders", "clicks")]
        assert not sizes or max(sizes) - min(sizes) <= 1


def _librdkafka_beat(groups, client: Client, topics: dict, now: int, rng: random.Random, lose_answer: bool) -> None:
    try:
        answer = _checked(groups, client.request(rng), topics, now)
    except (FencedMemberEpochError, UnknownMemberIdError):
        client.fenced()
    except UnreleasedInstanceIdError:
        pass  # the earlier holder of its instance id has not left yet
    else:
        if not (lose_answer and answer.assignment is None):  # (a lost answer with nothing new: nothing to miss)
            client.answered(answer)


def _checked(groups: ConsumerGroups, request: Heartbeat, topics: dict, now: int):
    """One heartbeat, with what the group keeps of itself checked: a record is returned
    exactly when the persisted state changed, and the index of owners is the members' own
    sets."""
    group = groups.describe("g")
    before = group_record(group)[1] if group is not None else None
    try:
        answer, record = groups.heartbeat(request, topics, now, lambda: "x")
    finally:
        group = groups.describe("g")
        if group is not None:
            owners = {tp: m.member_id for m in group.members.values() for tp in m.owns()}
            assert group.owners == owners
    after = group_record(group)[1]
    assert (record is not None) == (after != before)
    assert record is None or record[1] == after
    return answer


def _check_one_owner(clients) -> None:
    seen: dict[TopicPartition, str] = {}
    for client in clients.values():
        for tp in client.owned:
            assert tp not in seen, f"{tp} owned by {seen[tp]} and {client.member_id}"
            seen[tp] = client.member_id


def test_group_states():
    groups = ConsumerGroups()
    beat(groups, join("a"))
    assert groups.describe("g").state() == STABLE_GROUP
    beat(groups, join("b"))
    assert groups.describe("g").state() == RECONCILING
    groups.describe("g").epoch += 1
    assert groups.describe("g").state() == ASSIGNING
    beat(groups, Heartbeat("g", "a", LEAVE_EPOCH))
    beat(groups, Heartbeat("g", "b", LEAVE_EPOCH))
    assert groups.describe("g").state() == EMPTY


def test_a_step_whose_record_was_not_replicated_is_undone():
    groups = ConsumerGroups()
    _, record = groups.heartbeat(join("a"), TOPICS, 0, lambda: "x")
    groups.persisted("g", record[1])
    told = groups.describe("g").members["a"].assigned
    groups.heartbeat(join("b"), TOPICS, 0, lambda: "x")  # its record is lost
    groups.revert("g", now_ms=5)
    group = groups.describe("g")
    assert set(group.members) == {"a"} and group.members["a"].assigned == told and group.epoch == 1
    groups.heartbeat(Heartbeat("new", "n", 0, rebalance_timeout_ms=1, topics=("orders",)), TOPICS, 0, lambda: "x")
    groups.revert("new", now_ms=5)  # a group none of whose records was replicated is forgotten
    assert groups.describe("new") is None


# --- in the group coordinator (raylog.coordination.group) ----------------------------------


def _coordinator():
    from raylog.coordination.group import GroupCoordinator

    coordinator = GroupCoordinator()
    coordinator.serve()
    return coordinator


def test_the_coordinator_answers_a_heartbeat_that_changed_the_group_once_its_record_is_replicated():
    from raylog.errors import CoordinatorNotAvailableError, NotCoordinatorError, NotLeaderOrFollowerError

    coordinator = _coordinator()
    outcome = coordinator.consumer_heartbeat(join("a"), TOPICS, "waiter-a", 0, lambda: "x")
    assert outcome.replies == [] and len(outcome.records) == 1 and outcome.held[0][0] == "waiter-a"
    released = coordinator.persisted(outcome, 0)
    [(waiter, response)] = released.replies
    assert waiter == "waiter-a" and response.value.assignment == tps("orders", 0, 1, 2, 3)
    # A heartbeat that changes nothing is answered at once, with no record.
    quiet = coordinator.consumer_heartbeat(Heartbeat("g", "a", 1), TOPICS, "w", 1, lambda: "x")
    assert quiet.records == [] and quiet.replies[0][1].value.member_epoch == 1
    # One whose record is lost: its member hears NOT_COORDINATOR, and the step is undone.
    lost = coordinator.consumer_heartbeat(join("b"), TOPICS, "waiter-b", 2, lambda: "x")
    failed = coordinator.append_failed(lost, NotLeaderOrFollowerError("moved"), 3)
    assert failed.replies[0][1].error_code == NotCoordinatorError.code
    assert set(coordinator.consumer.describe("g").members) == {"a"}
    lost = coordinator.consumer_heartbeat(join("b"), TOPICS, "waiter-b", 4, lambda: "x")
    failed = coordinator.append_failed(lost, TimeoutError("slow"), 5)
    assert failed.replies[0][1].error_code == CoordinatorNotAvailableError.code


def test_a_group_id_is_a_classic_group_or_a_consumer_group_while_it_has_members():
    from raylog.errors import GroupIdNotFoundError, InconsistentGroupProtocolError
    from raylog.protocol import JoinGroupRequest

    coordinator = _coordinator()
    coordinator.persisted(coordinator.consumer_heartbeat(join("a"), TOPICS, "w", 0, lambda: "x"), 0)
    classic = JoinGroupRequest("g", "", ("orders",), dict(TOPICS), ("range",))
    with pytest.raises(InconsistentGroupProtocolError):
        coordinator.join(classic, "w", 0)
    coordinator.join(JoinGroupRequest("c", "", ("orders",), dict(TOPICS), ("range",)), "w", 0)
    with pytest.raises(GroupIdNotFoundError):
        coordinator.consumer_heartbeat(
            Heartbeat("c", "m", 0, rebalance_timeout_ms=1, topics=("x",)), TOPICS, "w", 0, str
        )
    assert ("g", STABLE_GROUP, "uniform", "consumer") in coordinator.list_groups()


def test_a_consumer_groups_commits_carry_its_members_epoch_and_a_new_coordinator_loads_both():
    from raylog.coordination.group import GroupCoordinator
    from raylog.errors import NonEmptyGroupError
    from raylog.types import OffsetAndMetadata

    coordinator = _coordinator()
    outcome = coordinator.consumer_heartbeat(join("a"), TOPICS, "w", 0, lambda: "x")
    coordinator.persisted(outcome, 0)
    offsets = {TopicPartition("orders", 0): OffsetAndMetadata(42, "")}
    with pytest.raises(StaleMemberEpochError):
        coordinator.prepare_commit("g", "a", 0, None, offsets, 1)
    records = outcome.records + coordinator.prepare_commit("g", "a", 1, None, offsets, 1)
    loaded = GroupCoordinator()
    loaded.load(records, now_ms=10)
    loaded.serve()
    assert loaded.consumer.describe("g").members["a"].epoch == 1
    assert loaded.committed("g", [TopicPartition("orders", 0)])[TopicPartition("orders", 0)].offset == 42
    with pytest.raises(NonEmptyGroupError):
        loaded.delete("g")
    loaded.persisted(loaded.consumer_heartbeat(Heartbeat("g", "a", LEAVE_EPOCH), TOPICS, "w", 11, str), 11)
    tombstones = loaded.delete("g")
    assert (loaded.consumer.describe("g"), len(tombstones)) == (None, 3)  # the group, its offset, its record


def test_the_coordinators_tick_fences_expired_consumer_group_members():
    coordinator = _coordinator()
    coordinator.persisted(coordinator.consumer_heartbeat(join("a"), TOPICS, "w", 0, lambda: "x"), 0)
    outcome = coordinator.tick(10**9)
    assert len(outcome.records) == 1 and coordinator.consumer.describe("g").members == {}
    coordinator.persisted(outcome, 10**9)
