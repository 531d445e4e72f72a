"""The group coordinator's state machine: joins, generations, rebalances, sessions, static
and cooperative membership, offset commits, fail-over from records, deletion (no Ray;
time is a plain ``now_ms`` integer)."""

from __future__ import annotations

import itertools

import pytest

from raylog.common.assignors import COOPERATIVE_STICKY, RANGE, ROUND_ROBIN
from raylog.common.names import MAX_GROUP_ID_BYTES
from raylog.coordination.group import (
    COMPLETING_REBALANCE,
    EMPTY,
    MAX_OFFSET_METADATA_BYTES,
    MAX_SESSION_TIMEOUT_MS,
    MIN_SESSION_TIMEOUT_MS,
    PREPARING_REBALANCE,
    STABLE,
    TOPICS_CHANGED_GRACE_MS,
    GroupCoordinator,
    Outcome,
    offset_record,
    partition_for,
)
from raylog.errors import (
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    InvalidSessionTimeoutError,
    MemberIdRequiredError,
    NonEmptyGroupError,
    NotCoordinatorError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetMetadataTooLargeError,
    RebalanceInProgressError,
    RequestTimedOutError,
    StorageError,
    UnknownMemberIdError,
)
from raylog.protocol import JoinGroupRequest, JoinGroupResponse, error_of
from raylog.types import OffsetAndMetadata, TopicPartition

GROUP = "g"
T0 = 1_000_000
SESSION_MS = 10_000
REBALANCE_MS = 60_000


def tps(topic: str, *partitions: int) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in partitions]


def request(
    member_id: str = "",
    *,
    topics: tuple[str, ...] = ("t",),
    counts: dict[str, int] | None = None,
    strategies: tuple[str, ...] = (COOPERATIVE_STICKY,),
    owned=(),
    owned_generation: int = -1,
    instance_id: str | None = None,
    client_id: str = "c",
    session_timeout_ms: int = SESSION_MS,
    rebalance_timeout_ms: int = REBALANCE_MS,
    group_id: str = GROUP,
    require_known_member_id: bool = False,
    protocol_type: str = "consumer",
    metadata: tuple[bytes, ...] = (),
) -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=group_id,
        member_id=member_id,
        topics=topics,
        partition_counts=counts if counts is not None else {t: 4 for t in topics},
        strategies=strategies,
        owned=tuple(owned),
        owned_generation=owned_generation,
        instance_id=instance_id,
        client_id=client_id,
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=rebalance_timeout_ms,
        require_known_member_id=require_known_member_id,
        protocol_type=protocol_type,
        metadata=metadata,
    )


class Coordinator:
    """A GroupCoordinator plus what its actor does: every record it is asked to append goes
    to ``log`` (the ``__consumer_offsets`` partition), and only then are the replies held
    for it released (all kept by waiter). With ``hold_appends`` set, appends wait in
    ``in_flight`` for :meth:`complete` or :meth:`fail`; with ``append_error`` set they fail.
    Every generation a reply tells a member is checked to be in the log already."""

    def __init__(self, initial_rebalance_delay_ms: int = 0) -> None:
        self.groups = GroupCoordinator(initial_rebalance_delay_ms)
        self.replies: dict[object, JoinGroupResponse] = {}
        self.log: list[tuple[bytes, bytes | None]] = []
        self.durable = GroupCoordinator()  # the log as a coordinator loading it would see it
        self.hold_appends = False
        self.append_error: Exception | None = None
        self.in_flight: list[Outcome] = []

    def take(self, outcome: Outcome, now_ms: int) -> Outcome:
        self.release(outcome.replies)
        if outcome.records:
            self.in_flight.append(outcome)
            if not self.hold_appends:
                if self.append_error is None:
                    self.complete(now_ms)
                else:
                    self.fail(self.append_error, now_ms)
        return outcome

    def complete(self, now_ms: int) -> None:
        """The appends in flight are replicated."""
        while self.in_flight:
            outcome = self.in_flight.pop(0)
            self.log.extend(outcome.records)
            self.durable.load(outcome.records, now_ms)
            self.take(self.groups.persisted(outcome, now_ms), now_ms)

    def fail(self, exc: Exception, now_ms: int) -> None:
        """The appends in flight failed with ``exc``."""
        while self.in_flight:
            self.take(self.groups.append_failed(self.in_flight.pop(0), exc, now_ms), now_ms)

    def release(self, replies) -> None:
        for waiter, response in replies:
            assert waiter not in self.replies, f"{waiter} answered twice"
            if response.error_code == 0 and isinstance(response, JoinGroupResponse):
                assert any(
                    response.member_id in g.members and g.generation >= response.generation
                    for g in self.durable.groups.values()
                ), f"{waiter} told generation {response.generation} before it was durable"
            self.replies[waiter] = response

    def join(self, waiter, now_ms: int, member_id: str = "", **kwargs) -> JoinGroupResponse | None:
        """Send a join; its reply if the join completed at once."""
        self.take(self.groups.join(request(member_id, **kwargs), waiter, now_ms), now_ms)
        return self.replies.get(waiter)

    def tick(self, now_ms: int) -> Outcome:
        return self.take(self.groups.tick(now_ms), now_ms)

    def leave(self, member_id: str, now_ms: int, instance_id: str | None = None) -> Outcome:
        return self.take(self.groups.leave(GROUP, member_id, instance_id, now_ms), now_ms)

    def commit(self, member_id: str, generation: int, offsets: dict, now_ms: int, instance_id=None, group_id=GROUP):
        """Commit the way the actor does: records appended, then applied."""
        offsets = {TopicPartition(*tp): OffsetAndMetadata(*o) for tp, o in offsets.items()}
        records = self.groups.prepare_commit(group_id, member_id, generation, instance_id, offsets, now_ms)
        self.log.extend(records)
        self.groups.apply_commit(group_id, offsets)

    def sync(self, response: JoinGroupResponse, now_ms: int, instance_id=None, assignments=None, waiter=None):
        """A sync's assignment (raising its error), or None while it waits for the leader's."""
        waiter = waiter or object()
        args = (GROUP, response.member_id, response.generation, instance_id, waiter, now_ms, assignments)
        self.take(self.groups.sync(*args), now_ms)
        return self.synced(waiter)

    def synced(self, waiter):
        """A sync's answer, if it came: its assignment (raw bytes where the leader assigns)."""
        reply = self.replies.get(waiter)
        if reply is None:
            return None
        if (error := error_of(reply)) is not None:
            raise error
        return list(reply.assignment) if reply.assigned is None else reply.assigned

    def heartbeat(
        self, response: JoinGroupResponse, now_ms: int, instance_id=None, generation=None, topics=None
    ) -> Outcome:
        generation = response.generation if generation is None else generation
        beat = self.groups.heartbeat(GROUP, response.member_id, generation, instance_id, now_ms, topics)
        return self.take(beat, now_ms)

    def state(self) -> str:
        return self.groups.describe(GROUP)["state"]

    def generation(self) -> int:
        return self.groups.describe(GROUP)["generation"]

    def reloaded(self, now_ms: int) -> GroupCoordinator:
        """A fresh coordinator loaded from the records, as after a fail-over."""
        fresh = GroupCoordinator()
        fresh.load(list(self.log), now_ms)
        return fresh


@pytest.fixture
def coord() -> Coordinator:
    return Coordinator()


def stable_pair(coord: Coordinator, strategies=(RANGE,), now_ms: int = T0):
    """Members a and b in a Stable group of generation 2 (``a`` joined first, and leads)."""
    a1 = coord.join("a1", now_ms, client_id="a", strategies=strategies)
    owned = coord.sync(a1, now_ms)
    coord.join("b1", now_ms, client_id="b", strategies=strategies)
    a2 = coord.join("a2", now_ms, a1.member_id, client_id="a", strategies=strategies, owned=owned)
    b1 = coord.replies["b1"]
    assert a2.generation == b1.generation == 2 and coord.state() == STABLE
    return a2, b1


# --- joining --------------------------------------------------------------------------------


def test_first_member_joins_at_once_as_leader_of_generation_1(coord):
    """A lone member's join completes at once: generation 1, it leads, it gets everything."""
    reply = coord.join("w", T0, counts={"t": 3})
    assert reply.error_code == 0
    assert reply.generation == 1 and reply.leader_id == reply.member_id and reply.protocol == COOPERATIVE_STICKY
    assert [m.member_id for m in reply.members] == [reply.member_id] and not reply.leader_assigns
    assert coord.state() == STABLE
    assert coord.sync(reply, T0) == tps("t", 0, 1, 2)
    coord.heartbeat(reply, T0 + 1)
    assert coord.groups.list_groups() == [(GROUP, STABLE, COOPERATIVE_STICKY, "consumer")]


def test_second_member_waits_for_the_first_to_rejoin(coord):
    """A new member starts a rebalance: the first member's heartbeat and sync say
    RebalanceInProgress, and the join completes (generation 2) only once it rejoins."""
    a1 = coord.join("a1", T0, client_id="a", strategies=(RANGE,))
    assert coord.join("b1", T0 + 1, client_id="b", strategies=(RANGE,)) is None
    assert coord.state() == PREPARING_REBALANCE
    with pytest.raises(RebalanceInProgressError):
        coord.heartbeat(a1, T0 + 2)
    with pytest.raises(RebalanceInProgressError):
        coord.sync(a1, T0 + 2)
    a2 = coord.join("a2", T0 + 3, a1.member_id, client_id="a", strategies=(RANGE,))
    b1 = coord.replies["b1"]
    assert a2.generation == b1.generation == 2 and a2.member_id == a1.member_id
    assert a2.leader_id == b1.leader_id == a1.member_id
    assert {m.member_id for m in a2.members} == {a1.member_id, b1.member_id} and b1.members == ()  # the leader only
    assert coord.sync(a2, T0 + 4) == tps("t", 0, 1) and coord.sync(b1, T0 + 4) == tps("t", 2, 3)
    with pytest.raises(IllegalGenerationError):
        coord.heartbeat(a1, T0 + 5)  # generation 1 is over


def test_an_empty_groups_first_rebalance_waits_for_more_members_then_forms_one_generation():
    """group.initial.rebalance.delay.ms: members of an empty group that join within the delay
    of each other land in one generation (not one rebalance each); the delay starts again
    with each new member. Later rebalances of the group do not wait."""
    coord = Coordinator(initial_rebalance_delay_ms=3_000)
    assert coord.join("a1", T0, client_id="a", strategies=(RANGE,)) is None
    assert coord.state() == PREPARING_REBALANCE
    assert coord.join("b1", T0 + 2, client_id="b", strategies=(RANGE,)) is None
    coord.tick(T0 + 3_000)  # the delay runs from b's join
    assert coord.replies == {}
    coord.tick(T0 + 3_002)
    a1, b1 = coord.replies["a1"], coord.replies["b1"]
    assert a1.generation == b1.generation == 1 and a1.leader_id == b1.leader_id == a1.member_id
    assert coord.sync(a1, T0 + 3_003) == tps("t", 0, 1) and coord.sync(b1, T0 + 3_003) == tps("t", 2, 3)
    assert coord.join("c1", T0 + 4_000, client_id="c", strategies=(RANGE,)) is None
    coord.join("a2", T0 + 4_001, a1.member_id, client_id="a", strategies=(RANGE,))
    coord.join("b2", T0 + 4_001, b1.member_id, client_id="b", strategies=(RANGE,))
    assert coord.replies["c1"].generation == coord.replies["b2"].generation == 2  # at once: not empty


def test_the_initial_delay_of_an_empty_group_ends_at_the_rebalance_timeout():
    """Members joining one after another cannot hold the first rebalance past the rebalance
    timeout (Kafka's InitialDelayedJoin waits at most that long in all)."""
    coord = Coordinator(initial_rebalance_delay_ms=3_000)
    for i, at in enumerate((T0, T0 + 2_500, T0 + 4_500)):
        assert coord.join(f"m{i}", at, client_id=f"m{i}", rebalance_timeout_ms=5_000) is None
    coord.tick(T0 + 4_999)
    assert coord.replies == {}
    coord.tick(T0 + 5_000)
    assert {coord.replies[f"m{i}"].generation for i in range(3)} == {1}
    assert coord.state() == STABLE


def test_an_empty_group_left_during_its_initial_delay_starts_the_delay_again_for_the_next():
    coord = Coordinator(initial_rebalance_delay_ms=3_000)
    assert coord.join("a1", T0, client_id="a") is None
    member = next(iter(coord.groups.groups[GROUP].members))
    coord.leave(member, T0 + 1_000)
    assert coord.replies["a1"].error_code != 0 and coord.state() == EMPTY
    assert coord.join("b1", T0 + 2_000, client_id="b") is None
    coord.tick(T0 + 4_999)
    assert "b1" not in coord.replies
    coord.tick(T0 + 5_000)
    assert coord.replies["b1"].error_code == 0 and coord.replies["b1"].generation >= 1


def test_join_sent_again_replaces_the_waiting_one(coord):
    """A retried join answers the one it replaces with RebalanceInProgress; only the new
    waiter gets the result."""
    a, b = stable_pair(coord)
    coord.join("a3", T0 + 1, a.member_id, client_id="a", strategies=(RANGE,))
    coord.join("a4", T0 + 2, a.member_id, client_id="a", strategies=(RANGE,))
    assert isinstance(error_of(coord.replies["a3"]), RebalanceInProgressError)
    coord.join("b2", T0 + 3, b.member_id, client_id="b", strategies=(RANGE,))
    assert coord.replies["a4"].generation == coord.replies["b2"].generation == 3


def test_a_new_kafka_member_gets_its_id_first_and_the_group_waits_only_once_it_is_back(coord):
    """KIP-394 (Kafka's JoinGroup v4+): a new member's first join is answered at once with
    MEMBER_ID_REQUIRED and its member id, and starts no rebalance; joining again with that id
    makes it a member like any other."""
    a, b = stable_pair(coord)
    first = coord.join("c1", T0 + 1, client_id="c", strategies=(RANGE,), require_known_member_id=True)
    assert isinstance(error_of(first), MemberIdRequiredError) and first.member_id.startswith("c-")
    assert coord.state() == STABLE and coord.generation() == 2
    coord.heartbeat(a, T0 + 2)  # no rebalance to hear of
    assert (
        coord.join("c2", T0 + 3, first.member_id, client_id="c", strategies=(RANGE,), require_known_member_id=True)
        is None
    )
    assert coord.state() == PREPARING_REBALANCE
    for waiter, member in (("a3", a), ("b3", b)):
        coord.join(waiter, T0 + 4, member.member_id, client_id=member.member_id[0], strategies=(RANGE,))
    c2 = coord.replies["c2"]
    assert c2.error_code == 0 and c2.member_id == first.member_id and c2.generation == 3
    assert first.member_id in coord.groups.groups[GROUP].members


def test_member_ids_handed_out_that_never_come_back_hold_nothing_and_expire(coord):
    """Clients that go away after their first join (a hostile or timed-out client, once per
    connection) leave no member for the group to wait for, and their ids expire with their
    session timeout: joining with one after that is UNKNOWN_MEMBER_ID."""
    a, b = stable_pair(coord)
    ids = [
        coord.join(f"x{i}", T0 + 1, client_id="x", strategies=(RANGE,), require_known_member_id=True).member_id
        for i in range(100)
    ]
    assert len(set(ids)) == 100 and coord.state() == STABLE
    assert set(coord.groups.groups[GROUP].members) == {a.member_id, b.member_id}
    coord.heartbeat(a, T0 + SESSION_MS)
    coord.heartbeat(b, T0 + SESSION_MS)
    coord.tick(T0 + 1 + SESSION_MS)
    assert coord.groups.groups[GROUP].pending_members == {}
    with pytest.raises(UnknownMemberIdError):
        coord.join(
            "late", T0 + 2 + SESSION_MS, ids[0], client_id="x", strategies=(RANGE,), require_known_member_id=True
        )
    assert coord.state() == STABLE and coord.generation() == 2


def test_a_member_id_handed_out_before_a_coordinator_fail_over_is_unknown_to_the_next(coord):
    """Member ids handed out are kept in memory only (as in Kafka): after the coordinator moves,
    the member's second join is UNKNOWN_MEMBER_ID, so it joins from scratch, and the group
    the new coordinator loaded neither waits for it nor lost its members."""
    a, b = stable_pair(coord)
    first = coord.join("c1", T0 + 1, client_id="c", strategies=(RANGE,), require_known_member_id=True)
    assert isinstance(error_of(first), MemberIdRequiredError)
    fresh = coord.reloaded(T0 + 2)
    fresh.serve()
    again = request(first.member_id, client_id="c", strategies=(RANGE,), require_known_member_id=True)
    with pytest.raises(UnknownMemberIdError):
        fresh.join(again, "c2", T0 + 3)
    assert set(fresh.groups[GROUP].members) == {a.member_id, b.member_id}
    retry = fresh.join(request(client_id="c", strategies=(RANGE,), require_known_member_id=True), "c3", T0 + 4)
    [(_, reply)] = retry.replies
    assert isinstance(error_of(reply), MemberIdRequiredError) and reply.member_id != first.member_id


def test_a_static_member_joins_at_once_without_a_member_id_round(coord):
    """As in Kafka, a member with a group.instance.id is not asked for a member id first."""
    reply = coord.join("s1", T0, instance_id="i-1", client_id="s", require_known_member_id=True)
    assert reply.error_code == 0 and reply.generation == 1


def test_rebalance_deadline_completes_without_the_missing_member(coord):
    """A member that keeps heartbeating but does not rejoin within the rebalance timeout is
    dropped when the deadline passes; the others (who waited longer than their session
    timeout) complete the join without it."""
    a, b = stable_pair(coord)
    coord.join("c1", T0 + 1_000, client_id="c", strategies=(RANGE,))
    coord.join("a3", T0 + 2_000, a.member_id, client_id="a", strategies=(RANGE,))
    deadline = T0 + 1_000 + REBALANCE_MS
    for now in range(T0 + 3_000, deadline, 3_000):  # b is alive, just slow to rejoin
        with pytest.raises(RebalanceInProgressError):
            coord.heartbeat(b, now)
        assert coord.tick(now).held == []
    assert coord.state() == PREPARING_REBALANCE
    outcome = coord.tick(deadline)
    assert {w for w, _ in outcome.held} == {"c1", "a3"}
    assert coord.generation() == 3 and coord.state() == STABLE
    members = {m["member_id"] for m in coord.groups.describe(GROUP)["members"]}
    assert members == {a.member_id, coord.replies["c1"].member_id}
    with pytest.raises(UnknownMemberIdError):
        coord.heartbeat(b, deadline + 1)
    assert sorted(coord.sync(coord.replies["a3"], deadline) + coord.sync(coord.replies["c1"], deadline)) == tps(
        "t", 0, 1, 2, 3
    )


def test_members_waiting_in_a_join_are_not_expired(coord):
    """A member whose join is waiting for others cannot heartbeat (a new one does not even
    know its id yet); like Kafka, its session does not run out while it waits, only the
    rebalance deadline bounds the wait."""
    a, b = stable_pair(coord)
    coord.join("c1", T0, client_id="c", strategies=(RANGE,))
    with pytest.raises(RebalanceInProgressError):
        coord.heartbeat(b, T0 + 5_000)
    coord.join("b2", T0 + 5_000, b.member_id, client_id="b", strategies=(RANGE,))
    with pytest.raises(RebalanceInProgressError):
        coord.heartbeat(a, T0 + 9_000)
    outcome = coord.tick(T0 + 3 * SESSION_MS)  # a missed its session: expired, which completes the join
    assert {w for w, _ in outcome.held} == {"c1", "b2"}
    assert all(r.error_code == 0 and r.generation == 3 for _, r in outcome.held)
    assert coord.state() == STABLE and len(coord.groups.describe(GROUP)["members"]) == 2


def test_session_expiry_removes_the_member_and_rebalances(coord):
    """A member silent for more than session.timeout.ms is removed by tick; the rest must
    rejoin, and the survivor then gets every partition."""
    a, b = stable_pair(coord)
    coord.heartbeat(a, T0 + 8_000)
    coord.tick(T0 + SESSION_MS)  # exactly the timeout: still alive
    assert coord.state() == STABLE
    coord.tick(T0 + SESSION_MS + 1)
    assert coord.state() == PREPARING_REBALANCE
    with pytest.raises(UnknownMemberIdError):
        coord.heartbeat(b, T0 + SESSION_MS + 2)
    with pytest.raises(RebalanceInProgressError):
        coord.heartbeat(a, T0 + SESSION_MS + 2)
    a3 = coord.join("a3", T0 + SESSION_MS + 3, a.member_id, client_id="a", strategies=(RANGE,))
    assert a3.generation == 3 and coord.sync(a3, T0 + SESSION_MS + 4) == tps("t", 0, 1, 2, 3)
    coord.tick(T0 + SESSION_MS + 4 + SESSION_MS + 1)  # and then a too
    assert coord.state() == EMPTY and coord.generation() == 4


def test_leave_rebalances_at_once_and_the_last_leaves_an_empty_group(coord):
    """A leave starts the rebalance without waiting for a session timeout; the last member
    leaving empties the group and bumps the generation (fencing stragglers)."""
    a, b = stable_pair(coord)
    coord.leave(b.member_id, T0 + 1)
    assert coord.state() == PREPARING_REBALANCE
    with pytest.raises(RebalanceInProgressError):
        coord.heartbeat(a, T0 + 2)
    a3 = coord.join("a3", T0 + 3, a.member_id, client_id="a", strategies=(RANGE,))
    assert a3.generation == 3 and a3.leader_id == a.member_id
    with pytest.raises(UnknownMemberIdError):
        coord.leave(b.member_id, T0 + 4)
    outcome = coord.leave(a.member_id, T0 + 5)
    assert outcome.records and coord.state() == EMPTY and coord.generation() == 4
    with pytest.raises(UnknownMemberIdError):
        coord.commit(a.member_id, 3, {("t", 0): (1, "")}, T0 + 6)


def test_leaving_during_a_rebalance_completes_it_for_the_others(coord):
    """The member everyone waits for leaves: the join completes at once without it, and the
    leaver's own waiting join is answered with an error."""
    a, b = stable_pair(coord)
    coord.join("c1", T0 + 1, client_id="c", strategies=(RANGE,))
    coord.join("a3", T0 + 2, a.member_id, client_id="a", strategies=(RANGE,))
    outcome = coord.leave(b.member_id, T0 + 3)
    assert {w for w, _ in outcome.held} == {"c1", "a3"} and coord.generation() == 3
    coord.join("c2", T0 + 4, coord.replies["c1"].member_id, client_id="c", strategies=(RANGE,))
    coord.leave(coord.replies["c1"].member_id, T0 + 5)
    assert isinstance(error_of(coord.replies["c2"]), UnknownMemberIdError)


def test_unknown_members_and_groups(coord):
    """Every call from a member the coordinator does not know is UnknownMemberId; a join
    with a made-up member id creates no group."""
    with pytest.raises(UnknownMemberIdError):
        coord.join("x", T0, "ghost")
    assert coord.groups.list_groups() == []
    with pytest.raises(GroupIdNotFoundError):
        coord.groups.describe(GROUP)
    a, _ = stable_pair(coord)
    ghost = JoinGroupResponse(generation=a.generation, member_id="ghost")
    for call in (
        lambda: coord.heartbeat(ghost, T0),
        lambda: coord.sync(ghost, T0),
        lambda: coord.leave("ghost", T0),
        lambda: coord.commit("ghost", a.generation, {("t", 0): (1, "")}, T0),
        lambda: coord.join("y", T0, "ghost"),
        lambda: coord.groups.heartbeat("other-group", a.member_id, a.generation, None, T0),
    ):
        with pytest.raises(UnknownMemberIdError):
            call()
    assert coord.state() == STABLE and coord.generation() == 2


@pytest.mark.parametrize("timeout_ms", [0, MIN_SESSION_TIMEOUT_MS - 1, MAX_SESSION_TIMEOUT_MS + 1])
def test_invalid_session_timeout(coord, timeout_ms):
    """session.timeout.ms outside the coordinator's bounds is refused; the bounds are fine."""
    with pytest.raises(InvalidSessionTimeoutError):
        coord.join("w", T0, session_timeout_ms=timeout_ms)
    assert coord.groups.list_groups() == []
    coord.join("lo", T0, session_timeout_ms=MIN_SESSION_TIMEOUT_MS, group_id="lo")
    coord.join("hi", T0, session_timeout_ms=MAX_SESSION_TIMEOUT_MS, group_id="hi")


@pytest.mark.parametrize("group_id", ["", None, 7, b"g", "x" * (MAX_GROUP_ID_BYTES + 1), "é" * MAX_GROUP_ID_BYTES])
def test_invalid_group_id(coord, group_id):
    """A group id must be a non-empty string of at most MAX_GROUP_ID_BYTES bytes of UTF-8,
    for every group call alike (INVALID_GROUP_ID, code 24); nothing is created."""
    groups = coord.groups
    for call in (
        lambda: coord.join("w", T0, group_id=group_id),
        lambda: coord.commit("", -1, {("t", 0): (1, "")}, T0, group_id=group_id),
        lambda: groups.sync(group_id, "m", 1, None, object(), T0),
        lambda: groups.heartbeat(group_id, "m", 1, None, T0),
        lambda: groups.leave(group_id, "m", None, T0),
        lambda: groups.committed(group_id),
        lambda: groups.describe(group_id),
        lambda: groups.delete(group_id),
    ):
        with pytest.raises(InvalidGroupIdError) as refused:
            call()
        assert refused.value.code == 24
    assert groups.list_groups() == []
    coord.join("w", T0, group_id="x" * MAX_GROUP_ID_BYTES)


def test_inconsistent_protocol_refuses_only_the_joiner(coord):
    """A member supporting no assignor the group uses is refused (INCONSISTENT_GROUP_PROTOCOL
    in its join reply); the group goes on undisturbed."""
    a, b = stable_pair(coord)
    with pytest.raises(InconsistentGroupProtocolError) as refused:
        coord.join("c1", T0 + 1, client_id="c", strategies=(ROUND_ROBIN,))
    assert refused.value.code == 23
    assert coord.state() == STABLE and coord.generation() == 2
    coord.heartbeat(a, T0 + 2)
    coord.heartbeat(b, T0 + 2)
    # A member of the group may not switch to an assignor the others lack either.
    with pytest.raises(InconsistentGroupProtocolError):
        coord.join("a3", T0 + 3, a.member_id, client_id="a", strategies=(ROUND_ROBIN,))
    assert coord.state() == STABLE
    with pytest.raises(InconsistentGroupProtocolError):
        coord.join("c2", T0 + 4, client_id="c", strategies=())
    # One that also supports the group's assignor is welcome.
    coord.join("c3", T0 + 5, client_id="c", strategies=(ROUND_ROBIN, RANGE))
    assert coord.state() == PREPARING_REBALANCE


def test_the_vote_picks_the_assignor(coord):
    """The group uses the assignor the members vote for, among those all support."""
    a1 = coord.join("a1", T0, client_id="a", strategies=(ROUND_ROBIN, RANGE))
    assert a1.protocol == ROUND_ROBIN
    coord.join("b1", T0, client_id="b", strategies=(RANGE, ROUND_ROBIN))
    coord.join("c1", T0, client_id="c", strategies=(RANGE,))
    a2 = coord.join("a2", T0, a1.member_id, client_id="a", strategies=(ROUND_ROBIN, RANGE))
    assert a2.protocol == RANGE and coord.groups.list_groups() == [(GROUP, STABLE, RANGE, "consumer")]


def test_partition_counts_use_the_largest_any_member_saw(coord):
    """Members with older metadata do not hide partitions from the assignment."""
    a1 = coord.join("a1", T0, client_id="a", strategies=(RANGE,), counts={"t": 2})
    coord.join("b1", T0, client_id="b", strategies=(RANGE,), counts={"t": 6})
    a2 = coord.join("a2", T0, a1.member_id, client_id="a", strategies=(RANGE,), counts={"t": 2})
    assert coord.sync(a2, T0) + coord.sync(coord.replies["b1"], T0) == tps("t", *range(6))


@pytest.mark.parametrize(
    ("now", "why"),
    [
        ({"t": 4}, "a subscribed topic deleted"),
        ({"t": 6, "u": 2}, "partitions added"),
        ({"t": 4, "u": 2, "v": 3}, "a topic subscribed by name created"),
    ],
)
def test_a_heartbeat_seeing_the_subscribed_topics_change_starts_a_rebalance(coord, now, why):
    """Where the coordinator assigns, it does what Kafka's leader member does: a heartbeat
    that brings the cluster's partition counts (a Kafka listener's) and finds the group's
    topics changed since its assignment starts a rebalance, which the heartbeat reports; the
    members rejoin with the new counts and the group is stable again."""
    a1 = coord.join("a1", T0, client_id="a", strategies=(RANGE,), topics=("t", "u", "v"), counts={"t": 4, "u": 2})
    assert coord.sync(a1, T0) == tps("t", 0, 1, 2, 3) + tps("u", 0, 1)
    outcome = coord.heartbeat(a1, T0 + 1, topics={"t": 4, "u": 2, "other": 9})  # (not subscribed: no change)
    assert not outcome.replies and coord.state() == STABLE
    # A change must last TOPICS_CHANGED_GRACE_MS (members fetching from a deleted topic see
    # it gone and revoke it as lost first); one that goes away again is forgotten.
    coord.heartbeat(a1, T0 + 2, topics=now)
    coord.heartbeat(a1, T0 + 3, topics={"t": 4, "u": 2})
    coord.heartbeat(a1, T0 + 2 + TOPICS_CHANGED_GRACE_MS, topics=now)
    assert coord.state() == STABLE
    coord.heartbeat(a1, T0 + 1 + 2 * TOPICS_CHANGED_GRACE_MS, topics=now)
    assert coord.state() == STABLE
    later = T0 + 2 + 3 * TOPICS_CHANGED_GRACE_MS
    coord.heartbeat(a1, later, topics=now)
    assert coord.state() == PREPARING_REBALANCE, why
    with pytest.raises(RebalanceInProgressError):
        coord.heartbeat(a1, later + 1)
    counts = {t: n for t, n in now.items() if t in ("t", "u", "v")}
    rejoin = {"client_id": "a", "strategies": (RANGE,), "topics": ("t", "u", "v"), "counts": counts}
    a2 = coord.join("a2", later + 2, a1.member_id, **rejoin)
    assigned = coord.sync(a2, later + 2)
    assert sorted(assigned) == sorted(TopicPartition(t, p) for t, n in counts.items() for p in range(n))
    coord.heartbeat(a2, later + 3 + TOPICS_CHANGED_GRACE_MS, topics=now)
    assert coord.state() == STABLE


def test_a_topic_change_is_acted_on_by_a_coordinator_that_took_over_mid_grace(coord):
    """The coordinator fails over while a change waits out its grace (what it noted is in
    memory only): the new coordinator, loaded from the log, notes the change at the next
    heartbeat and rebalances once it has lasted the grace; the member's heartbeat is retried
    to it and nothing is lost or done twice."""
    a1 = coord.join("a1", T0, client_id="a", strategies=(RANGE,), counts={"t": 4})
    coord.sync(a1, T0)
    coord.heartbeat(a1, T0 + 1, topics={"t": 6})  # noted; the coordinator then dies
    fresh = Coordinator()
    fresh.groups, fresh.log = coord.reloaded(T0 + 2), list(coord.log)
    fresh.heartbeat(a1, T0 + 1 + TOPICS_CHANGED_GRACE_MS, topics={"t": 6})  # noted anew
    fresh.heartbeat(a1, T0 + 1 + TOPICS_CHANGED_GRACE_MS, topics={"t": 6})  # a retry: the same
    assert fresh.state() == STABLE
    fresh.heartbeat(a1, T0 + 1 + 2 * TOPICS_CHANGED_GRACE_MS, topics={"t": 6})
    assert fresh.state() == PREPARING_REBALANCE
    with pytest.raises(RebalanceInProgressError):
        fresh.heartbeat(a1, T0 + 2 + 2 * TOPICS_CHANGED_GRACE_MS, topics={"t": 6})


def test_a_heartbeat_without_the_clusters_topics_or_of_a_leader_assigned_group_starts_no_rebalance(coord):
    """raylog's own consumers rejoin by themselves when their subscription changes (their
    heartbeats bring no topics); where a leader member assigns, the leader watches the
    topics, as in Kafka."""
    a1 = coord.join("a1", T0, client_id="a", strategies=(RANGE,), counts={"t": 4})
    coord.sync(a1, T0)
    coord.heartbeat(a1, T0 + 1)
    assert coord.state() == STABLE
    leader_assigned = Coordinator()
    a2, b1 = leader_assigned_pair(leader_assigned, counts={"t": 4})
    leader_assigned.sync(a2, T0, assignments={a2.member_id: b"A", b1.member_id: b"B"})
    leader_assigned.heartbeat(b1, T0 + 1, topics={"t": 8})
    leader_assigned.heartbeat(b1, T0 + 1 + TOPICS_CHANGED_GRACE_MS, topics={"t": 8})
    assert leader_assigned.state() == STABLE


# --- generations and fencing ----------------------------------------------------------------


def test_stale_generation_is_illegal(coord):
    """After a rebalance, heartbeats, syncs and commits of the old generation are refused."""
    a1 = coord.join("a1", T0, client_id="a", strategies=(RANGE,))
    coord.commit(a1.member_id, 1, {("t", 0): (5, "")}, T0)
    a, _ = stable_pair_after(coord, a1)
    for call in (
        lambda: coord.heartbeat(a, T0 + 1, generation=1),
        lambda: coord.sync(a1, T0 + 1),
        lambda: coord.commit(a.member_id, 1, {("t", 0): (9, "")}, T0 + 1),
        lambda: coord.commit(a.member_id, 3, {("t", 0): (9, "")}, T0 + 1),
    ):
        with pytest.raises(IllegalGenerationError):
            call()
    assert coord.groups.committed(GROUP) == {TopicPartition("t", 0): OffsetAndMetadata(5, "")}
    coord.commit(a.member_id, 2, {("t", 0): (9, "")}, T0 + 2)
    assert coord.groups.committed(GROUP)[TopicPartition("t", 0)].offset == 9


def stable_pair_after(coord: Coordinator, a1: JoinGroupResponse):
    coord.join("b1", T0, client_id="b", strategies=(RANGE,))
    a2 = coord.join("a2", T0, a1.member_id, client_id="a", strategies=(RANGE,))
    return a2, coord.replies["b1"]


def test_commits_during_a_rebalance_are_allowed_for_the_current_generation(coord):
    """Like Kafka, a member may commit (e.g. what it is about to revoke) while the group is
    preparing a rebalance, as long as its generation is still the current one."""
    a, b = stable_pair(coord)
    coord.join("c1", T0 + 1, client_id="c", strategies=(RANGE,))
    coord.commit(b.member_id, b.generation, {("t", 2): (3, "before revoking")}, T0 + 2)
    assert coord.groups.committed(GROUP, [("t", 2)]) == {
        TopicPartition("t", 2): OffsetAndMetadata(3, "before revoking")
    }


def test_commits_from_outside_the_group_only_while_it_is_empty(coord):
    """Generation -1 (a consumer not using group management, or an admin) may commit while
    the group has no members, never while it has some."""
    coord.commit("", -1, {("t", 0): (10, "manual")}, T0)
    assert coord.groups.committed(GROUP) == {TopicPartition("t", 0): OffsetAndMetadata(10, "manual")}
    a, b = stable_pair(coord)
    with pytest.raises(UnknownMemberIdError):
        coord.commit("", -1, {("t", 0): (11, "")}, T0 + 1)
    coord.leave(a.member_id, T0 + 2)
    coord.leave(b.member_id, T0 + 3)
    coord.commit("", -1, {("t", 0): (12, "")}, T0 + 4)
    assert coord.groups.committed(GROUP, [TopicPartition("t", 0)])[TopicPartition("t", 0)].offset == 12


def test_offset_validation(coord):
    """Metadata up to offset.metadata.max.bytes (in UTF-8 bytes) is kept, longer is refused;
    a negative offset is refused; nothing is committed by a refused request."""
    limit = "x" * MAX_OFFSET_METADATA_BYTES
    coord.commit("", -1, {("t", 0): (1, limit)}, T0)
    with pytest.raises(OffsetMetadataTooLargeError):
        coord.commit("", -1, {("t", 0): (2, limit + "x")}, T0)
    with pytest.raises(OffsetMetadataTooLargeError):
        coord.commit("", -1, {("t", 0): (2, "é" * (MAX_OFFSET_METADATA_BYTES // 2 + 1))}, T0)
    with pytest.raises(ValueError):
        coord.commit("", -1, {("t", 1): (3, ""), ("t", 0): (-1, "")}, T0)
    assert coord.groups.committed(GROUP) == {TopicPartition("t", 0): OffsetAndMetadata(1, limit)}


def test_apply_commit_then_committed(coord):
    """Offsets become visible only when applied; committed() filters by partition."""
    offsets = {TopicPartition("t", p): OffsetAndMetadata(p * 10, f"m{p}") for p in range(3)}
    records = coord.groups.prepare_commit(GROUP, "", -1, None, offsets, T0)
    assert len(records) == 3 and coord.groups.committed(GROUP) == {}
    coord.groups.apply_commit(GROUP, offsets)
    assert coord.groups.committed(GROUP) == offsets
    assert coord.groups.committed(GROUP, [("t", 1), ("t", 9)]) == {TopicPartition("t", 1): OffsetAndMetadata(10, "m1")}
    assert coord.groups.committed("nobody") == {}


def test_a_committed_leader_epoch_is_kept_with_its_offset_through_the_log():
    """KIP-320: the leader epoch a commit carries is written with the offset and loaded back
    by the next coordinator; a record written before epochs were kept loads as epoch -1."""
    import msgpack

    tp = TopicPartition("t", 0)
    old_value = msgpack.packb([7, "old", T0])
    records = [
        offset_record(GROUP, TopicPartition("t", 1), OffsetAndMetadata(3, "m", leader_epoch=5), T0),
        (offset_record(GROUP, tp, OffsetAndMetadata(0), T0)[0], old_value),
    ]
    loaded = GroupCoordinator()
    loaded.load(records, T0)
    assert loaded.committed(GROUP) == {
        TopicPartition("t", 1): OffsetAndMetadata(3, "m", 5),
        tp: OffsetAndMetadata(7, "old", -1),
    }


# --- static membership ----------------------------------------------------------------------


def static_group(coord: Coordinator, strategies=(RANGE,)):
    """Static member s (instance "i-s", leader) and dynamic member d, generation 2."""
    s1 = coord.join("s1", T0, client_id="s", instance_id="i-s", strategies=strategies)
    coord.join("d1", T0, client_id="d", strategies=strategies)
    s2 = coord.join("s2", T0, s1.member_id, client_id="s", instance_id="i-s", strategies=strategies)
    return s2, coord.replies["d1"]


def test_static_member_takes_its_place_back_without_a_rebalance(coord):
    """A static member restarting (member id "") with the same topics gets its old
    assignment at once in the same generation, under a new member id; the old id is fenced."""
    s, d = static_group(coord)
    before = coord.sync(s, T0, "i-s")
    records = len(coord.log)
    back = coord.join("s3", T0 + 1, client_id="s", instance_id="i-s", strategies=(RANGE,))
    assert back is not None and back.error_code == 0
    assert back.generation == s.generation == 2 and back.member_id != s.member_id
    assert back.leader_id == back.member_id  # it led before
    assert coord.state() == STABLE and len(coord.log) == records + 1
    assert coord.sync(back, T0 + 2, "i-s") == before
    coord.heartbeat(d, T0 + 2)  # the other member noticed nothing
    coord.heartbeat(back, T0 + 2, "i-s")
    with pytest.raises(FencedInstanceIdError):
        coord.heartbeat(s, T0 + 3, "i-s")
    with pytest.raises(FencedInstanceIdError):
        coord.commit(s.member_id, s.generation, {("t", 0): (1, "")}, T0 + 3, instance_id="i-s")
    with pytest.raises(FencedInstanceIdError):
        coord.join("s4", T0 + 3, s.member_id, client_id="s", instance_id="i-s", strategies=(RANGE,))
    with pytest.raises(FencedInstanceIdError):
        coord.groups.leave(GROUP, s.member_id, "i-s", T0 + 3)
    coord.commit(back.member_id, back.generation, {("t", 0): (1, "")}, T0 + 4, instance_id="i-s")


def test_static_member_with_new_topics_rebalances(coord):
    """A static member back with a changed subscription triggers a rebalance."""
    s, d = static_group(coord)
    assert coord.join("s3", T0 + 1, client_id="s", instance_id="i-s", strategies=(RANGE,), topics=("t", "u")) is None
    assert coord.state() == PREPARING_REBALANCE
    coord.join("d2", T0 + 2, d.member_id, client_id="d", strategies=(RANGE,))
    back = coord.replies["s3"]
    assert back.generation == 3
    assert coord.sync(back, T0 + 3, "i-s") == tps("t", 0, 1) + tps("u", 0, 1, 2, 3)


def test_static_member_replaced_while_its_join_waits_is_fenced(coord):
    """A second process with the same instance id during a rebalance takes over: the first
    one's waiting join is answered FENCED_INSTANCE_ID."""
    s, d = static_group(coord)
    coord.join("s3", T0 + 1, s.member_id, client_id="s", instance_id="i-s", strategies=(RANGE,))
    coord.join("s4", T0 + 2, client_id="s", instance_id="i-s", strategies=(RANGE,))
    assert isinstance(error_of(coord.replies["s3"]), FencedInstanceIdError)
    coord.join("d2", T0 + 3, d.member_id, client_id="d", strategies=(RANGE,))
    assert coord.replies["s4"].generation == 3 and coord.replies["s4"].member_id != s.member_id


def test_static_member_expires_like_any_other(coord):
    """A static member that stays away longer than its session timeout is removed."""
    s, d = static_group(coord)
    coord.heartbeat(d, T0 + SESSION_MS)
    coord.tick(T0 + SESSION_MS + 1)
    assert coord.state() == PREPARING_REBALANCE
    d3 = coord.join("d3", T0 + SESSION_MS + 2, d.member_id, client_id="d", strategies=(RANGE,))
    assert d3.generation == 3 and coord.sync(d3, T0 + SESSION_MS + 2) == tps("t", 0, 1, 2, 3)
    back = coord.join("s5", T0 + SESSION_MS + 3, client_id="s", instance_id="i-s", strategies=(RANGE,))
    assert back is None and coord.state() == PREPARING_REBALANCE  # a new member now


# --- cooperative rebalancing ----------------------------------------------------------------


class Clients:
    """What each consumer process owns right now, updated the way a cooperative client does
    when it syncs: keep the intersection, revoke the rest, add the new."""

    def __init__(self) -> None:
        self.owned: dict[str, set[TopicPartition]] = {}

    def sync(self, coord: Coordinator, name: str, response: JoinGroupResponse, now_ms: int) -> list[TopicPartition]:
        assignment = coord.sync(response, now_ms)
        revoked = self.owned.get(name, set()) - set(assignment)
        self.owned[name] = set(assignment)
        self.check()
        return sorted(revoked)

    def check(self) -> None:
        """No partition has two owners."""
        for (x, xs), (y, ys) in itertools.combinations(self.owned.items(), 2):
            assert not xs & ys, f"{sorted(xs & ys)} owned by both {x} and {y}"


def test_cooperative_partition_moves_only_after_its_owner_revoked_it(coord):
    """A partition that moves from a to b is withheld from b until a rejoins without it, so
    no partition ever has two owners; the follow-up rebalance then hands it over."""
    clients = Clients()
    a1 = coord.join("a1", T0, client_id="a", counts={"t": 6})
    clients.sync(coord, "a", a1, T0)
    assert clients.owned["a"] == set(tps("t", *range(6)))
    coord.join("b1", T0 + 1, client_id="b", counts={"t": 6})
    with pytest.raises(RebalanceInProgressError):
        coord.heartbeat(a1, T0 + 2)
    a2 = coord.join("a2", T0 + 3, a1.member_id, client_id="a", counts={"t": 6}, owned=sorted(clients.owned["a"]))
    b1 = coord.replies["b1"]
    assert a2.generation == b1.generation == 2
    assert clients.sync(coord, "b", b1, T0 + 4) == [] and clients.owned["b"] == set()  # withheld
    revoked = clients.sync(coord, "a", a2, T0 + 4)
    assert revoked == tps("t", 3, 4, 5)
    # a revoked: it rejoins (the follow-up round), b learns of it from its heartbeat.
    a3 = coord.join("a3", T0 + 5, a1.member_id, client_id="a", counts={"t": 6}, owned=sorted(clients.owned["a"]))
    assert a3 is None
    with pytest.raises(RebalanceInProgressError):
        coord.heartbeat(b1, T0 + 6)
    coord.join("b2", T0 + 7, b1.member_id, client_id="b", counts={"t": 6}, owned=sorted(clients.owned["b"]))
    a3, b2 = coord.replies["a3"], coord.replies["b2"]
    assert a3.generation == b2.generation == 3
    assert clients.sync(coord, "a", a3, T0 + 8) == []
    clients.sync(coord, "b", b2, T0 + 8)
    assert clients.owned == {"a": set(tps("t", 0, 1, 2)), "b": set(tps("t", 3, 4, 5))}


def test_a_stale_claim_does_not_keep_a_partition_its_new_owner_holds(coord):
    """A member that lost its place (its session ran out) and rejoins under a new id still
    claiming what it held in an older generation does not get it back while the member it
    went to holds it: the older claim does not count (KIP-792), the newer one does, and the
    partition stays with its owner. Only claims of the latest generation count."""
    a1 = coord.join("a1", T0, client_id="a")
    owned_a = coord.sync(a1, T0)
    coord.join("b1", T0, client_id="b")
    a2 = coord.join("a2", T0, a1.member_id, client_id="a", owned=owned_a, owned_generation=1)
    b1 = coord.replies["b1"]
    owned_a, owned_b = coord.sync(a2, T0), coord.sync(b1, T0)
    a3 = coord.join("a3", T0, a1.member_id, client_id="a", owned=owned_a, owned_generation=2)
    coord.join("b2", T0, b1.member_id, client_id="b", owned=owned_b, owned_generation=2)
    a3, b2 = coord.replies["a3"], coord.replies["b2"]
    assert (a3.generation, coord.sync(a3, T0), coord.sync(b2, T0)) == (3, tps("t", 0, 1), tps("t", 2, 3))
    # b stops; its session runs out and a takes everything in generation 4.
    coord.heartbeat(a3, T0 + SESSION_MS)
    coord.tick(T0 + SESSION_MS + 1)
    a4 = coord.join("a4", T0 + SESSION_MS + 1, a1.member_id, client_id="a", owned=tps("t", 0, 1), owned_generation=3)
    assert a4.generation == 4 and coord.sync(a4, T0 + SESSION_MS + 1) == tps("t", 0, 1, 2, 3)
    # b wakes up, is told it is unknown, and rejoins under a new id claiming its old half.
    with pytest.raises(UnknownMemberIdError):
        coord.join("b3", T0 + SESSION_MS + 2, b1.member_id, client_id="b", owned=tps("t", 2, 3), owned_generation=3)
    coord.join("b4", T0 + SESSION_MS + 2, client_id="b", owned=tps("t", 2, 3), owned_generation=3)
    everything = tps("t", 0, 1, 2, 3)
    coord.join("a5", T0 + SESSION_MS + 3, a1.member_id, client_id="a", owned=everything, owned_generation=4)
    a5, b4 = coord.replies["a5"], coord.replies["b4"]
    assert a5.generation == b4.generation == 5
    assert coord.sync(b4, T0 + SESSION_MS + 4) == []  # a holds them until it revoked them
    assert coord.sync(a5, T0 + SESSION_MS + 4) == tps("t", 0, 1)


def test_claims_made_twice_in_one_generation_count_for_neither(coord):
    """Two members claiming one partition in the same generation (one is wrong): neither
    keeps it and nobody else gets it until both gave it up."""
    a1 = coord.join("a1", T0, client_id="a")
    coord.sync(a1, T0)
    coord.join("b1", T0, client_id="b")
    a2 = coord.join("a2", T0, a1.member_id, client_id="a", owned=tps("t", 0, 1, 2, 3), owned_generation=1)
    b1 = coord.replies["b1"]
    assert a2.generation == 2
    coord.sync(a2, T0)
    coord.join("a3", T0, a1.member_id, client_id="a", owned=tps("t", 0, 1), owned_generation=2)
    coord.join("b2", T0, b1.member_id, client_id="b", owned=tps("t", 1), owned_generation=2)
    assert TopicPartition("t", 1) not in coord.sync(coord.replies["a3"], T0) + coord.sync(coord.replies["b2"], T0)


def test_cooperative_owner_that_did_not_rejoin_loses_its_claim(coord):
    """Only the owners in this join are respected: a member dropped at the deadline does
    not hold its partitions back."""
    a, b = stable_pair(coord, strategies=(COOPERATIVE_STICKY,))  # b's half is withheld in generation 2
    owned_a, owned_b = coord.sync(a, T0), coord.sync(b, T0)
    assert owned_a == tps("t", 0, 1) and owned_b == []
    coord.join("a3", T0 + 1, a.member_id, client_id="a", owned=owned_a)
    coord.join("b2", T0 + 1, b.member_id, client_id="b", owned=owned_b)
    a3, b2 = coord.replies["a3"], coord.replies["b2"]
    owned_b = coord.sync(b2, T0 + 2)
    assert owned_b == tps("t", 2, 3)
    coord.join("a4", T0 + 3, a.member_id, client_id="a", owned=coord.sync(a3, T0 + 2))
    with pytest.raises(RebalanceInProgressError):
        coord.heartbeat(b2, T0 + 5_000)  # b is alive but never rejoins
    coord.tick(T0 + 3 + REBALANCE_MS)
    a4 = coord.replies["a4"]
    assert a4.generation == 4 and coord.sync(a4, T0 + 3 + REBALANCE_MS) == tps("t", 0, 1, 2, 3)


def test_eager_assignors_ignore_what_members_claim_to_own(coord):
    """With range (eager: everything is revoked before joining), nothing is withheld."""
    a1 = coord.join("a1", T0, client_id="a", strategies=(RANGE,))
    coord.join("b1", T0 + 1, client_id="b", strategies=(RANGE,))
    a2 = coord.join("a2", T0 + 2, a1.member_id, client_id="a", strategies=(RANGE,), owned=tps("t", 0, 1, 2, 3))
    assert coord.sync(coord.replies["b1"], T0 + 3) == tps("t", 2, 3)
    assert coord.sync(a2, T0 + 3) == tps("t", 0, 1)


# --- fail-over: records and load() ----------------------------------------------------------


def test_load_restores_offsets_generation_members_and_assignment(coord):
    """A fresh coordinator fed the records in order has the same groups: offsets, generation,
    leader, members, subscriptions and assignments; restored members can go on heartbeating
    and committing in their generation."""
    s, d = static_group(coord)
    coord.commit(s.member_id, 2, {("t", 0): (7, "meta"), ("t", 1): (8, "")}, T0 + 1, instance_id="i-s")
    coord.commit(d.member_id, 2, {("t", 0): (9, "later wins")}, T0 + 2)
    coord.commit("", -1, {("u", 0): (1, "")}, T0 + 3, group_id="other")
    fresh = coord.reloaded(T0 + 100_000)
    assert fresh.describe(GROUP) == coord.groups.describe(GROUP)
    assert fresh.committed(GROUP) == coord.groups.committed(GROUP)
    assert fresh.committed(GROUP)[TopicPartition("t", 0)] == OffsetAndMetadata(9, "later wins")
    assert fresh.committed("other") == {TopicPartition("u", 0): OffsetAndMetadata(1, "")}
    assert fresh.list_groups() == coord.groups.list_groups()
    # Sessions restart at load time (members need time to find the new coordinator).
    fresh.heartbeat(GROUP, d.member_id, 2, None, T0 + 100_000 + SESSION_MS)
    assert fresh.tick(T0 + 100_000 + SESSION_MS).held == []
    (_, answer), *_ = fresh.sync(GROUP, s.member_id, 2, "i-s", "w", T0 + 100_000).replies
    assert list(answer.assignment) == coord.sync(s, T0, "i-s")
    fresh.prepare_commit(GROUP, s.member_id, 2, "i-s", {TopicPartition("t", 0): OffsetAndMetadata(10)}, T0)
    with pytest.raises(IllegalGenerationError):
        fresh.prepare_commit(GROUP, s.member_id, 1, "i-s", {TopicPartition("t", 0): OffsetAndMetadata(10)}, T0)


def test_load_after_static_rejoin_and_rebalances_keeps_the_latest(coord):
    """The last group record wins: a static member's new id, later generations."""
    s, d = static_group(coord)
    back = coord.join("s3", T0 + 1, client_id="s", instance_id="i-s", strategies=(RANGE,))
    fresh = coord.reloaded(T0 + 2)
    assert fresh.describe(GROUP) == coord.groups.describe(GROUP)
    with pytest.raises(FencedInstanceIdError):
        fresh.heartbeat(GROUP, s.member_id, 2, "i-s", T0 + 2)
    fresh.heartbeat(GROUP, back.member_id, 2, "i-s", T0 + 2)
    # A static member's restart works on the new coordinator too.
    outcome = fresh.join(request(client_id="s", instance_id="i-s", strategies=(RANGE,)), "s4", T0 + 3)
    assert outcome.held[0][1].generation == 2


def test_load_of_an_emptied_group_keeps_its_generation(coord):
    """A group whose members all left comes back Empty with its generation (so a straggler
    of the last generation stays fenced) and its offsets."""
    a, b = stable_pair(coord)
    coord.commit(a.member_id, 2, {("t", 0): (4, "")}, T0)
    coord.leave(a.member_id, T0 + 1)
    coord.leave(b.member_id, T0 + 2)
    fresh = coord.reloaded(T0 + 3)
    described = fresh.describe(GROUP)
    assert described["state"] == EMPTY and described["generation"] == 3 and described["members"] == []
    assert fresh.committed(GROUP) == {TopicPartition("t", 0): OffsetAndMetadata(4, "")}


def test_delete_tombstones_erase_the_group_on_load(coord):
    """delete() of an empty group returns tombstones for its offsets and its group record;
    loading the whole partition afterwards knows nothing of the group."""
    a, b = stable_pair(coord)
    coord.commit(a.member_id, 2, {("t", 0): (4, ""), ("t", 1): (5, "")}, T0)
    coord.commit("", -1, {("u", 0): (1, "")}, T0, group_id="kept")
    with pytest.raises(NonEmptyGroupError):
        coord.groups.delete(GROUP)
    coord.leave(a.member_id, T0 + 1)
    coord.leave(b.member_id, T0 + 2)
    tombstones = coord.groups.delete(GROUP)
    assert len(tombstones) == 3 and all(value is None for _, value in tombstones)
    coord.log.extend(tombstones)
    assert coord.groups.list_groups() == [("kept", EMPTY, "", "consumer")]
    with pytest.raises(GroupIdNotFoundError):
        coord.groups.describe(GROUP)
    with pytest.raises(GroupIdNotFoundError):
        coord.groups.delete(GROUP)
    fresh = coord.reloaded(T0 + 3)
    assert fresh.list_groups() == [("kept", EMPTY, "", "consumer")]
    assert fresh.committed(GROUP) == {}
    with pytest.raises(GroupIdNotFoundError):
        fresh.describe(GROUP)
    # The id can be used again from scratch.
    assert coord.join("n1", T0 + 4).generation == 1


def test_load_ignores_records_without_a_key_and_tolerates_compaction(coord):
    """Records without a key are skipped; a compacted log (only the latest value per key,
    in any order of keys) loads the same state."""
    a, b = stable_pair(coord)
    coord.commit(a.member_id, 2, {("t", 0): (1, ""), ("t", 1): (2, "")}, T0)
    coord.commit(a.member_id, 2, {("t", 0): (3, "")}, T0)
    latest = dict(coord.log)
    fresh = GroupCoordinator()
    fresh.load([(None, b"junk"), *reversed(list(latest.items()))], T0)
    assert fresh.describe(GROUP) == coord.groups.describe(GROUP)
    assert fresh.committed(GROUP) == coord.groups.committed(GROUP)


def test_offset_delete_forgets_offsets_of_topics_the_members_do_not_read(coord):
    """Kafka's OffsetDelete: the committed offsets of partitions whose topic no member
    subscribes to are deleted (tombstoned, so a reload knows them no more); those of a topic
    a member reads are GROUP_SUBSCRIBED_TO_TOPIC and kept; a partition with no offset is no
    error; once the group is empty, every topic's go."""
    a, b = stable_pair(coord)
    t0, u0, v0 = TopicPartition("t", 0), TopicPartition("u", 0), TopicPartition("v", 0)
    coord.commit(a.member_id, 2, {("t", 0): (4, ""), ("u", 0): (5, "")}, T0)
    tombstones, results = coord.groups.delete_offsets(GROUP, [t0, u0, v0])
    assert {tp: type(error) for tp, error in results.items()} == {
        t0: GroupSubscribedToTopicError,
        u0: type(None),
        v0: type(None),
    }
    assert len(tombstones) == 1 and tombstones[0][1] is None
    coord.log.extend(tombstones)
    assert set(coord.groups.committed(GROUP)) == {t0}
    assert set(coord.reloaded(T0 + 1).committed(GROUP)) == {t0}
    coord.leave(a.member_id, T0 + 2)
    coord.leave(b.member_id, T0 + 3)
    tombstones, results = coord.groups.delete_offsets(GROUP, [t0])
    assert results == {t0: None} and len(tombstones) == 1
    assert coord.groups.committed(GROUP) == {}
    with pytest.raises(GroupIdNotFoundError):
        coord.groups.delete_offsets("nope", [t0])


def test_delete_of_unknown_group(coord):
    """Deleting a group that does not exist is GROUP_ID_NOT_FOUND."""
    with pytest.raises(GroupIdNotFoundError):
        coord.groups.delete("nope")


# --- a generation is durable before it is told ----------------------------------------------


def test_join_replies_wait_until_the_group_record_is_durable(coord):
    """A completed join tells no member its generation before the group record (generation,
    members, assignment) is replicated: meanwhile the group is CompletingRebalance, nobody
    can sync or commit in the new generation, and the waiting members' sessions hold; the
    append releases the replies, and their sessions start then."""
    a1 = coord.join("a1", T0, client_id="a", strategies=(RANGE,))
    coord.hold_appends = True
    coord.join("b1", T0, client_id="b", strategies=(RANGE,))
    assert coord.join("a2", T0, a1.member_id, client_id="a", strategies=(RANGE,)) is None
    assert coord.state() == COMPLETING_REBALANCE and coord.generation() == 2
    assert "b1" not in coord.replies and len(coord.in_flight) == 1
    assert coord.durable.describe(GROUP)["generation"] == 1
    for call in (
        lambda: coord.groups.sync(GROUP, a1.member_id, 2, None, object(), T0),
        lambda: coord.groups.heartbeat(GROUP, a1.member_id, 2, None, T0),
        lambda: coord.commit(a1.member_id, 2, {("t", 0): (1, "")}, T0),
        lambda: coord.commit(a1.member_id, 1, {("t", 0): (1, "")}, T0),
    ):
        with pytest.raises(RebalanceInProgressError):
            call()
    late = T0 + 10 * SESSION_MS  # a slow append: nobody expires while it waits
    assert coord.tick(late).records == [] and len(coord.groups.describe(GROUP)["members"]) == 2
    coord.complete(late)
    a2, b1 = coord.replies["a2"], coord.replies["b1"]
    assert a2.generation == b1.generation == 2 and coord.state() == STABLE
    assert coord.sync(a2, late) == tps("t", 0, 1) and coord.sync(b1, late) == tps("t", 2, 3)
    coord.tick(late + SESSION_MS)
    assert coord.state() == STABLE


def test_static_member_back_is_answered_once_its_new_id_is_durable(coord):
    """A static member taking its place back gets its new member id only once the record
    naming it is replicated (else a fail-over would revive the old id)."""
    s, d = static_group(coord)
    coord.hold_appends = True
    assert coord.join("s3", T0 + 1, client_id="s", instance_id="i-s", strategies=(RANGE,)) is None
    coord.complete(T0 + 2)
    back = coord.replies["s3"]
    assert back.generation == 2 and coord.reloaded(T0 + 3).describe(GROUP) == coord.groups.describe(GROUP)


@pytest.mark.parametrize(
    ("append_error", "told"),
    [
        (NotEnoughReplicasError, CoordinatorNotAvailableError),
        (RequestTimedOutError, CoordinatorNotAvailableError),
        (NotLeaderOrFollowerError, NotCoordinatorError),
        (StorageError, NotCoordinatorError),
    ],
)
def test_a_failed_group_append_answers_a_retriable_error_not_the_generation(coord, append_error, told):
    """When the group record cannot be replicated the waiting members are told
    COORDINATOR_NOT_AVAILABLE or NOT_COORDINATOR (Kafka's mapping; both retriable), not the
    generation; a member that never learnt its id is dropped, and the group rebalances
    again: the members that rejoin get a later generation, once it is durable."""
    a1 = coord.join("a1", T0, client_id="a", strategies=(RANGE,))
    coord.append_error = append_error("the ISR is gone")
    coord.join("b1", T0, client_id="b", strategies=(RANGE,))
    coord.join("a2", T0, a1.member_id, client_id="a", strategies=(RANGE,))
    for waiter in ("a2", "b1"):
        error = error_of(coord.replies[waiter])
        assert isinstance(error, told) and error.retriable
    described = coord.groups.describe(GROUP)
    assert described["state"] == PREPARING_REBALANCE and [m["member_id"] for m in described["members"]] == [
        a1.member_id
    ]
    with pytest.raises(RebalanceInProgressError):
        coord.heartbeat(a1, T0 + 1)
    coord.append_error = None
    a3 = coord.join("a3", T0 + 2, a1.member_id, client_id="a", strategies=(RANGE,))
    assert a3.generation == 3 and coord.sync(a3, T0 + 2) == tps("t", 0, 1, 2, 3)
    coord.join("b2", T0 + 3, client_id="b", strategies=(RANGE,))
    a4 = coord.join("a4", T0 + 3, a1.member_id, client_id="a", strategies=(RANGE,))
    assert a4.generation == coord.replies["b2"].generation == 4


def test_fail_over_continues_from_the_persisted_generation(coord):
    """A coordinator that dies while a generation's record is in flight told no one that
    generation; the next coordinator loads the last durable one, its members go on in it,
    and the next rebalance gets a generation above every one ever told."""
    a, b = stable_pair(coord)  # generation 2, durable and told
    told, b_owns = {a.generation, b.generation}, coord.sync(b, T0)
    coord.hold_appends = True
    coord.join("c1", T0 + 1, client_id="c", strategies=(RANGE,))
    coord.join("a3", T0 + 1, a.member_id, client_id="a", strategies=(RANGE,))
    coord.join("b2", T0 + 1, b.member_id, client_id="b", strategies=(RANGE,))
    assert coord.generation() == 3 and not {"c1", "a3", "b2"} & set(coord.replies)
    # The coordinator dies: its record of generation 3 never reached the log.
    fresh = Coordinator()
    fresh.log, fresh.durable = list(coord.log), coord.reloaded(T0 + 2)
    fresh.groups = coord.reloaded(T0 + 2)
    assert fresh.generation() == 2 >= max(told)
    fresh.heartbeat(a, T0 + 3)
    assert fresh.sync(b, T0 + 3) == b_owns  # b goes on with what it was told
    fresh.join("c2", T0 + 4, client_id="c", strategies=(RANGE,))
    fresh.join("a4", T0 + 4, a.member_id, client_id="a", strategies=(RANGE,))
    fresh.join("b3", T0 + 4, b.member_id, client_id="b", strategies=(RANGE,))
    assert {fresh.replies[w].generation for w in ("c2", "a4", "b3")} == {3}
    assert fresh.reloaded(T0 + 5).describe(GROUP)["generation"] == 3


# --- partition_for --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("group_id", "java_hash_code"),
    [
        ("hello", 99162322),
        ("hello world", 1794106052),
        ("Hello World", -862545276),
        ("my-consumer-group", 1513705513),
        ("é", 233),
        ("\U0001f600", 1772899),  # a surrogate pair in UTF-16, as Java hashes it
    ],
)
def test_partition_for_matches_kafka(group_id, java_hash_code):
    """abs(String.hashCode) % n, with hash codes as Java computes them."""
    for n in (1, 7, 50, 2**31 - 1):
        assert partition_for(group_id, n) == abs(java_hash_code) % n


def test_partition_for_integer_min_value_hash_is_zero():
    """Kafka's Utils.abs maps Integer.MIN_VALUE (which Math.abs leaves negative) to 0."""
    for group_id in ("polygenelubricants", "GydZG_"):
        assert all(partition_for(group_id, n) == 0 for n in (1, 3, 50, 2**31 - 1))


# --- protocols the leader member assigns (Kafka's classic protocol) ---------------------

CUSTOM = "my-assignor"


def leader_assigned_pair(coord: Coordinator, now_ms: int = T0, **kwargs):
    """Members a (the leader) and b joined a group whose protocol only they know: the join
    replies of generation 2, once durable."""
    a1 = coord.join("a1", now_ms, client_id="a", strategies=(CUSTOM,), metadata=(b"meta-a",), **kwargs)
    assert a1.leader_assigns and a1.leader_id == a1.member_id
    coord.sync(a1, now_ms, assignments={a1.member_id: b"all"})
    assert coord.join("b1", now_ms, client_id="b", strategies=(CUSTOM,), metadata=(b"meta-b",), **kwargs) is None
    a2 = coord.join("a2", now_ms, a1.member_id, client_id="a", strategies=(CUSTOM,), metadata=(b"meta-a2",), **kwargs)
    return a2, coord.replies["b1"]


def test_a_protocol_the_coordinator_does_not_run_is_assigned_by_the_leader_member(coord):
    """The leader is told every member's metadata; the followers' syncs wait for its
    assignment, which every sync answers once it is durable (opaque bytes, as sent)."""
    a2, b1 = leader_assigned_pair(coord)
    assert (a2.generation, b1.generation, a2.protocol) == (2, 2, CUSTOM)
    assert a2.leader_assigns and b1.leader_assigns and b1.leader_id == a2.member_id and b1.members == ()
    assert {(m.member_id, m.metadata) for m in a2.members} == {(a2.member_id, b"meta-a2"), (b1.member_id, b"meta-b")}
    assert coord.state() == COMPLETING_REBALANCE
    assert coord.sync(b1, T0 + 1, waiter="b-sync") is None  # waits for the leader
    coord.heartbeat(b1, T0 + 1)  # a member told its generation heartbeats it meanwhile
    with pytest.raises(RebalanceInProgressError):
        coord.commit(b1.member_id, 2, {("t", 0): (1, "")}, T0 + 1)
    coord.hold_appends = True
    assert coord.sync(a2, T0 + 2, assignments={a2.member_id: b"A", b1.member_id: b"B"}, waiter="a-sync") is None
    assert coord.synced("b-sync") is None and coord.state() == COMPLETING_REBALANCE  # not durable yet
    assert coord.sync(b1, T0 + 3, waiter="b-sync-again") is None
    coord.complete(T0 + 4)
    assert [coord.synced(w) for w in ("a-sync", "b-sync", "b-sync-again")] == [b"A", b"B", b"B"]
    assert coord.state() == STABLE and coord.sync(b1, T0 + 5) == b"B"
    described = coord.groups.describe(GROUP)
    assert described["leader_assigns"] and {m["member_id"]: m["assigned"] for m in described["members"]} == {
        a2.member_id: b"A",
        b1.member_id: b"B",
    }
    assert coord.groups.list_groups() == [(GROUP, STABLE, CUSTOM, "consumer")]
    fresh = coord.reloaded(T0 + 6)  # a fail-over keeps the assignment and the metadata
    assert fresh.describe(GROUP) == {**described}
    (_, answer), *_ = fresh.sync(GROUP, b1.member_id, 2, None, "w", T0 + 6).replies
    assert answer.assigned == b"B"


def test_the_members_vote_decides_who_assigns():
    """Each member votes for its first protocol all support: a protocol the coordinator
    runs is run here, any other by the leader."""
    coord = Coordinator()
    coord.join("a1", T0, client_id="a", strategies=(CUSTOM, RANGE), metadata=(b"x", b"y"))
    a1 = coord.replies["a1"]
    assert a1.protocol == CUSTOM and a1.leader_assigns
    other = Coordinator()
    b1 = other.join("b1", T0, client_id="b", strategies=(CUSTOM, RANGE), metadata=(b"x", b"y"))
    other.sync(b1, T0, assignments={b1.member_id: b""})
    assert other.join("c1", T0 + 1, client_id="c", strategies=(RANGE,)) is None  # a raylog member: range only
    b2 = other.join("b2", T0 + 2, b1.member_id, client_id="b", strategies=(CUSTOM, RANGE), metadata=(b"x", b"y"))
    assert b2.protocol == RANGE and not b2.leader_assigns and b2.members[0].metadata in (b"y", b"")
    assert sorted(other.sync(b2, T0 + 3) + other.sync(other.replies["c1"], T0 + 3)) == tps("t", 0, 1, 2, 3)


def test_a_member_of_another_protocol_type_or_without_a_shared_protocol_is_refused(coord):
    coord.join("w1", T0, protocol_type="connect", strategies=("sessioned",), metadata=(b"w",))
    with pytest.raises(InconsistentGroupProtocolError, match="protocol type 'connect'"):
        coord.join("c1", T0 + 1, client_id="c")
    with pytest.raises(InconsistentGroupProtocolError):
        coord.join("w2", T0 + 1, protocol_type="connect", strategies=("default",), metadata=(b"w",))
    with pytest.raises(InconsistentGroupProtocolError, match="pair up"):
        coord.join("w3", T0 + 1, protocol_type="connect", strategies=("sessioned",), metadata=(b"a", b"b"))
    assert coord.groups.list_groups()[0][3] == "connect"


def test_a_leader_that_never_assigns_is_removed_at_the_rebalance_timeout(coord):
    """Kafka's pending-sync timeout: the leader goes, with every member that never synced;
    the syncs that waited are told to rejoin."""
    a2, b1 = leader_assigned_pair(coord)
    assert coord.sync(b1, T0 + 1, waiter="b-sync") is None
    for now_ms in range(T0, T0 + REBALANCE_MS, SESSION_MS // 2):  # the leader is alive, but does not assign
        coord.heartbeat(a2, now_ms)
        coord.tick(now_ms)
    assert coord.synced("b-sync") is None
    coord.tick(T0 + REBALANCE_MS + 1)
    with pytest.raises(RebalanceInProgressError):
        coord.synced("b-sync")
    assert coord.state() == PREPARING_REBALANCE and set(coord.groups.groups[GROUP].members) == {b1.member_id}
    with pytest.raises(UnknownMemberIdError):
        coord.heartbeat(a2, T0 + REBALANCE_MS + 2)
    b2 = coord.join("b2", T0 + REBALANCE_MS + 2, b1.member_id, client_id="b", strategies=(CUSTOM,), metadata=(b"m",))
    assert b2.generation == 3 and b2.leader_id == b1.member_id  # b leads now


def test_an_assignment_that_is_not_replicated_fails_the_syncs_and_rebalances(coord):
    a2, b1 = leader_assigned_pair(coord)
    coord.sync(b1, T0 + 1, waiter="b-sync")
    coord.append_error = NotEnoughReplicasError("ISR too small")
    with pytest.raises(CoordinatorNotAvailableError):
        coord.sync(a2, T0 + 2, assignments={a2.member_id: b"A", b1.member_id: b"B"}, waiter="a-sync")
    for waiter in ("a-sync", "b-sync"):
        with pytest.raises(CoordinatorNotAvailableError):
            coord.synced(waiter)
    assert coord.state() == PREPARING_REBALANCE


def test_a_fail_over_before_the_leaders_assignment_makes_the_members_join_again(coord):
    a2, b1 = leader_assigned_pair(coord)
    fresh = coord.reloaded(T0 + 1)
    assert fresh.describe(GROUP)["state"] == PREPARING_REBALANCE
    with pytest.raises(RebalanceInProgressError):
        fresh.heartbeat(GROUP, b1.member_id, 2, None, T0 + 1)


def test_a_static_leader_back_keeps_its_place_and_is_told_to_skip_assigning(coord):
    """KIP-345 and KIP-814: a static member back in a Stable group takes its old place and
    assignment without a rebalance; as the leader it must not assign again."""
    a2, b1 = leader_assigned_pair(coord, instance_id=None)
    coord.sync(a2, T0 + 1, assignments={a2.member_id: b"A", b1.member_id: b"B"})
    static = Coordinator()
    s1 = static.join("s1", T0, client_id="s", strategies=(CUSTOM,), metadata=(b"m",), instance_id="i-s")
    assert static.sync(s1, T0, "i-s", assignments={s1.member_id: b"S"}) == b"S"
    back = static.join("s2", T0 + 1, client_id="s", strategies=(CUSTOM,), metadata=(b"m2",), instance_id="i-s")
    assert back.member_id != s1.member_id and back.generation == s1.generation and back.skip_assignment
    assert back.leader_id == back.member_id and static.state() == STABLE
    assert static.sync(back, T0 + 2, "i-s") == b"S"
    with pytest.raises(FencedInstanceIdError):
        static.heartbeat(s1, T0 + 2, "i-s")
