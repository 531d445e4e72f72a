"""Kafka 4's consumer group protocol (KIP-848) as a state machine, no Ray.

A member sends a ConsumerGroupHeartbeat every heartbeat interval with its epoch, its
subscription (when it changed) and the partitions it owns (when they changed); the
coordinator assigns on the server and moves each member towards its target one heartbeat at
a time:

- the **group epoch** moves on when what the assignment depends on changes: a member joins,
  leaves or is fenced, a subscription or a member's server assignor changes, a subscribed
  topic is created, deleted or gains partitions;
- the **target assignment** is computed for the group epoch (which becomes the assignment
  epoch) by the server-side assignor the members ask for: ``uniform`` (balanced, each
  partition kept with its owner where the balance allows: the sticky assignor of
  :mod:`raylog.common.assignors`) or ``range``;
- a **member is reconciled** towards its target: the partitions it must give up are revoked
  first, and it stays at its epoch until a heartbeat shows it no longer owns them (past its
  rebalance timeout it is fenced); then it moves to the assignment epoch and gets the
  target's partitions that no other member holds; a partition still held elsewhere comes in
  a later heartbeat, once released. A partition so has one owner at most at any time,
  whatever the order of the members' heartbeats.

Epochs a heartbeat may carry: 0 joins (with the member id the client made, as KIP-1082's
clients do, or one given here when it sent none); -1 leaves; -2 is a static member leaving
for a while: it keeps its assignment until its session times out, for the same
``group.instance.id`` to take back; otherwise the member's current epoch, or the one before
it when what the member owns is part of its assignment (its last answer was lost). Anything
else is FENCED_MEMBER_EPOCH: the member gives up its partitions and joins again with 0.

A group's state is one record in ``__consumer_offsets`` (:func:`group_record`, key
``[3, group id]``), returned with every heartbeat that changed it: the shell appends it and
answers only once it is replicated, so a new coordinator loads the epochs and assignments
members were told. Sessions are not persisted: a loaded group's members get a full session.

Concurrency: not thread-safe; the coordinator's shell steps it under its lock.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from dataclasses import fields as dataclass_fields
from typing import Any

import msgpack

from raylog.common import assignors
from raylog.common.assignors import Subscription
from raylog.common.group_protocol import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    RANGE,
    SERVER_ASSIGNORS,
    STATIC_LEAVE_EPOCH,
    UNIFORM,
    Heartbeat,
    HeartbeatAnswer,
)

from ..errors import (
    FencedMemberEpochError,
    GroupMaxSizeReachedError,
    InvalidRegularExpressionError,
    InvalidRequestError,
    StaleMemberEpochError,
    UnknownMemberIdError,
    UnreleasedInstanceIdError,
    UnsupportedAssignorError,
)
from ..types import TopicPartition

#: Member states (Kafka's MemberState).
STABLE, UNREVOKED_PARTITIONS, UNRELEASED_PARTITIONS = "stable", "unrevoked_partitions", "unreleased_partitions"
#: Group states as ConsumerGroupDescribe names them.
EMPTY, ASSIGNING, RECONCILING, STABLE_GROUP = "Empty", "Assigning", "Reconciling", "Stable"
#: The record key type of a consumer group's state in __consumer_offsets (1: offsets,
#: 2: classic groups; see raylog.coordination.group).
CONSUMER_GROUP_KEY = 3
_RECORD_VERSION = 1


@dataclass(frozen=True)
class ConsumerGroupConfig:
    """The broker's consumer group settings (Kafka's names with dots as underscores); a
    group's own configs (:mod:`raylog.coordination.group_configs`) replace the session
    timeout and heartbeat interval for its members, within the min / max bounds."""

    group_consumer_session_timeout_ms: int = 45_000
    group_consumer_heartbeat_interval_ms: int = 5_000
    group_consumer_max_size: int = 2**31 - 1
    group_consumer_assignors: tuple[str, ...] = (UNIFORM, RANGE)  # the first is the default
    group_consumer_min_session_timeout_ms: int = 45_000
    group_consumer_max_session_timeout_ms: int = 60_000
    group_consumer_min_heartbeat_interval_ms: int = 5_000
    group_consumer_max_heartbeat_interval_ms: int = 15_000

    @classmethod
    def of(cls, settings: Any) -> ConsumerGroupConfig:
        """The settings of ``settings`` (the controller's config) that this holds."""
        shared = {f.name for f in dataclass_fields(cls)} & set(vars(settings))
        return cls(**{name: getattr(settings, name) for name in shared})


@dataclass
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = 300_000
    topics: tuple[str, ...] = ()
    regex: str | None = None
    assignor: str | None = None
    epoch: int = 0
    previous_epoch: int = -1
    state: str = STABLE
    assigned: frozenset[TopicPartition] = frozenset()
    revoking: frozenset[TopicPartition] = frozenset()
    left: bool = False  # a static member gone for a while (epoch -2)
    session_deadline_ms: int = 0
    revocation_deadline_ms: int | None = None

    def owns(self) -> frozenset[TopicPartition]:
        """What it holds now: its assignment and what it has not revoked yet."""
        return self.assigned | self.revoking


@dataclass
class ConsumerGroup:
    group_id: str
    epoch: int = 0
    assignment_epoch: int = 0
    assignor: str = UNIFORM
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, frozenset[TopicPartition]] = field(default_factory=dict)
    #: Partitions of each subscribed topic as the group epoch last saw them.
    counts: dict[str, int] = field(default_factory=dict)
    #: Partition -> the member that owns it (assigned or revoking): an index of the
    #: members' own sets, kept by :func:`_hold` (not persisted: rebuilt on load).
    owners: dict[TopicPartition, str] = field(default_factory=dict, repr=False, compare=False)

    def state(self) -> str:
        if not self.members:
            return EMPTY
        if self.epoch > self.assignment_epoch:
            return ASSIGNING
        if any(m.epoch != self.assignment_epoch or m.state != STABLE for m in self.members.values()):
            return RECONCILING
        return STABLE_GROUP

    def static_member(self, instance_id: str) -> ConsumerMember | None:
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)


class ConsumerGroups:
    """The KIP-848 groups one coordinator serves; see the module docstring."""

    def __init__(self, config: ConsumerGroupConfig | None = None):
        self.config = config or ConsumerGroupConfig()
        #: Group id -> its settings where the group has configs of its own (Kafka's GROUP
        #: config resources, applied from each group's next heartbeat on).
        self.group_configs: Mapping[str, ConsumerGroupConfig] = {}
        self.groups: dict[str, ConsumerGroup] = {}
        self._persisted: dict[str, bytes | None] = {}  # the last replicated state of each group

    # --- requests ---------------------------------------------------------------------

    def heartbeat(
        self, request: Heartbeat, topics: Mapping[str, int], now_ms: int, new_member_id: Callable[[], str]
    ) -> tuple[HeartbeatAnswer, tuple | None]:
        """Step the group for one heartbeat.

        Args:
            topics: every topic a member may subscribe to -> its partition count (the
                cluster's metadata, internal topics left out).
            new_member_id: makes a member id for a joining member that sent none.

        Returns:
            ``(answer, record)``: the record is the group's new state to append before the
            answer is sent (None when nothing persisted changed).

        Raises:
            InvalidRequestError, UnknownMemberIdError, FencedMemberEpochError,
            UnreleasedInstanceIdError, UnsupportedAssignorError, GroupMaxSizeReachedError,
            InvalidRegularExpressionError: the heartbeat is refused; nothing changed.
        """
        _validate(request, self.config)
        group = self.groups.get(request.group_id) or ConsumerGroup(request.group_id, assignor=self._default_assignor())
        before = _outline(group, request.member_id)
        if request.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            answer = self._leave(group, request)
        else:
            member, moved = self._member(group, request, now_ms, new_member_id)
            full = request.topics is not None and request.owned is not None and request.rebalance_timeout_ms != -1
            given = member.assigned
            counts = _subscribed_counts(group, topics)
            if moved or counts != group.counts:  # one epoch for whatever moved in one heartbeat
                group.counts = counts
                group.epoch += 1
                group.assignor = _group_assignor(group, self._default_assignor())
            if group.epoch > group.assignment_epoch:
                self._assign(group, topics)
            _reconcile(member, group, topics, request.owned, now_ms)
            changed = member.assigned != given or request.member_epoch != member.epoch
            answer = HeartbeatAnswer(
                member.member_id,
                member.epoch,
                self._settings(group.group_id).group_consumer_heartbeat_interval_ms,
                member.assigned if changed or full or request.member_epoch == JOIN_EPOCH else None,
            )
        self.groups[group.group_id] = group
        return answer, (group_record(group) if _outline(group, answer.member_id) != before else None)

    def tick(self, now_ms: int) -> dict[str, tuple[bytes, bytes]]:
        """Fence the members whose session ran out, or who did not revoke within their
        rebalance timeout; group id -> record of each group that changed."""
        records = {}
        for group in self.groups.values():
            expired = [
                m
                for m in group.members.values()
                if m.session_deadline_ms <= now_ms
                or (m.revocation_deadline_ms is not None and m.revocation_deadline_ms <= now_ms)
            ]
            for member in expired:
                self._remove(group, member)
            if expired:
                records[group.group_id] = group_record(group)
        return records

    def check_commit(self, group_id: str, member_id: str, member_epoch: int) -> None:
        """An OffsetCommit (v9+) of a consumer group member may go ahead (Kafka's
        validateOffsetCommit): its member exists and sent its current epoch. A commit with
        no member (epoch -1, no member id) is an admin's and goes ahead only while the group
        has no member.

        Raises:
            UnknownMemberIdError, StaleMemberEpochError (an older epoch),
            FencedMemberEpochError (a newer one).
        """
        group = self.groups.get(group_id)
        members = group.members if group is not None else {}
        if member_epoch < 0 and not member_id:
            if members:
                raise UnknownMemberIdError(f"group {group_id!r} has members: a commit must name one")
            return
        member = members.get(member_id)
        if member is None:
            raise UnknownMemberIdError(f"member {member_id!r} is not in group {group_id!r}")
        if member_epoch > member.epoch:
            raise FencedMemberEpochError(f"member epoch {member_epoch} is newer than the member's {member.epoch}")
        if member_epoch < member.epoch:
            raise StaleMemberEpochError(f"member epoch {member_epoch} is older than the member's {member.epoch}")

    def describe(self, group_id: str) -> ConsumerGroup | None:
        return self.groups.get(group_id)

    def delete(self, group_id: str) -> tuple | None:
        """Forget a group without members (DeleteGroups); its tombstone record, or None when
        it is unknown here.

        Raises:
            InvalidRequestError: it has members.
        """
        group = self.groups.get(group_id)
        if group is None:
            return None
        if group.members:
            raise InvalidRequestError(f"group {group_id!r} has members")
        del self.groups[group_id]
        return group_key(group_id), None

    def persisted(self, group_id: str, value: bytes | None) -> None:
        """A record of the group (its value) is replicated: :meth:`revert` comes back to it."""
        self._persisted[group_id] = value

    def revert(self, group_id: str, now_ms: int) -> None:
        """A record of the group could not be replicated: back to what the log holds (the
        members told nothing of the lost steps learn it from their next heartbeat's epoch)."""
        self.load(group_id, self._persisted.get(group_id), now_ms)

    def load(self, group_id: str, value: bytes | None, now_ms: int) -> None:
        """Apply one record of the log: a group's state (:func:`group_record`), or its
        tombstone (None)."""
        self._persisted[group_id] = value
        if value is None:
            self.groups.pop(group_id, None)
            return
        group = _from_record(group_id, value)
        session_ms = self._settings(group_id).group_consumer_session_timeout_ms
        for member in group.members.values():
            member.session_deadline_ms = now_ms + session_ms
            if member.state == UNREVOKED_PARTITIONS:
                member.revocation_deadline_ms = now_ms + member.rebalance_timeout_ms
        self.groups[group_id] = group

    # --- steps ------------------------------------------------------------------------

    def _default_assignor(self) -> str:
        return self.config.group_consumer_assignors[0]

    def _settings(self, group_id: str) -> ConsumerGroupConfig:
        """The settings of ``group_id``'s members: its own configs', else the broker's."""
        return self.group_configs.get(group_id, self.config)

    def _member(
        self, group: ConsumerGroup, request: Heartbeat, now_ms: int, new_member_id: Callable[[], str]
    ) -> tuple[ConsumerMember, bool]:
        """The member the heartbeat is from, joined (epoch 0) or checked, with what the
        request changed, and whether the group epoch must move on (the member is new, or
        its subscription or assignor changed)."""
        if request.member_epoch == JOIN_EPOCH:
            member = self._join(group, request, new_member_id)
        else:
            member = group.members.get(request.member_id)
            if member is None or member.left:
                raise UnknownMemberIdError(f"member {request.member_id!r} is not in group {group.group_id!r}")
            lost_answer = (
                request.member_epoch == member.previous_epoch
                and request.owned is not None
                and request.owned <= member.assigned
            )
            if request.member_epoch != member.epoch and not lost_answer:
                raise FencedMemberEpochError(
                    f"member {member.member_id!r} of group {group.group_id!r} sent epoch {request.member_epoch}, "
                    f"its epoch is {member.epoch}: it must rejoin"
                )
        subscription = (member.topics, member.regex, member.assignor)
        if request.topics is not None:
            member.topics = tuple(sorted(set(request.topics)))
        if request.regex is not None:
            member.regex = request.regex or None
        if request.assignor is not None:
            member.assignor = request.assignor
        if request.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = request.rebalance_timeout_ms
        if request.rack_id is not None:
            member.rack_id = request.rack_id
        moved = member.member_id not in group.members or (member.topics, member.regex, member.assignor) != subscription
        group.members[member.member_id] = member
        member.session_deadline_ms = now_ms + self._settings(group.group_id).group_consumer_session_timeout_ms
        return member, moved

    def _join(self, group: ConsumerGroup, request: Heartbeat, new_member_id: Callable[[], str]) -> ConsumerMember:
        member_id = request.member_id or new_member_id()
        if request.instance_id is not None:
            held = group.static_member(request.instance_id)
            if held is not None and not held.left and held.member_id != member_id:
                raise UnreleasedInstanceIdError(
                    f"group.instance.id {request.instance_id!r} is still held by member {held.member_id!r}"
                )
            if held is not None:  # the instance comes back: it takes its assignment and epoch again
                del group.members[held.member_id]
                taken = replace(held, member_id=member_id, left=False)
                group.members[member_id] = taken
                group.target[member_id] = group.target.pop(held.member_id, frozenset())
                _hold(group, held, frozenset(), frozenset())
                _hold(group, taken, taken.assigned, taken.revoking)
                return taken
        existing = group.members.get(member_id)
        if existing is not None:  # joined again (it gave up what it held): reconciled anew
            existing.epoch, existing.previous_epoch, existing.state = JOIN_EPOCH, -1, STABLE
            _hold(group, existing, frozenset(), frozenset())
            existing.revocation_deadline_ms = None
            return existing
        if len(group.members) >= self.config.group_consumer_max_size:
            raise GroupMaxSizeReachedError(f"group {group.group_id!r} has {len(group.members)} members")
        return ConsumerMember(member_id, instance_id=request.instance_id, rack_id=request.rack_id)

    def _leave(self, group: ConsumerGroup, request: Heartbeat) -> HeartbeatAnswer:
        member = group.members.get(request.member_id)
        if member is None:
            raise UnknownMemberIdError(f"member {request.member_id!r} is not in group {group.group_id!r}")
        interval = self._settings(group.group_id).group_consumer_heartbeat_interval_ms
        if request.member_epoch == STATIC_LEAVE_EPOCH:
            if member.instance_id is None:
                raise InvalidRequestError("epoch -2 is for static members (group.instance.id) only")
            member.left = True  # it keeps its partitions until its session times out
            return HeartbeatAnswer(member.member_id, STATIC_LEAVE_EPOCH, interval, None)
        self._remove(group, member)
        return HeartbeatAnswer(member.member_id, LEAVE_EPOCH, interval, None)

    def _remove(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        del group.members[member.member_id]
        _hold(group, member, frozenset(), frozenset())
        group.target.pop(member.member_id, None)
        group.epoch += 1
        group.assignor = _group_assignor(group, self._default_assignor())

    def _assign(self, group: ConsumerGroup, topics: Mapping[str, int]) -> None:
        """The target assignment for the group epoch, keeping partitions with the members
        they are now given to where the assignor can."""
        subscriptions = {
            m.member_id: Subscription(
                topics=tuple(sorted(_subscribed(m, topics))),
                owned=tuple(sorted(group.target.get(m.member_id, ()))),
                instance_id=m.instance_id,
                strategies=(SERVER_ASSIGNORS[group.assignor],),
                generation=group.assignment_epoch,
            )
            for m in group.members.values()
        }
        plan = assignors.assign(SERVER_ASSIGNORS[group.assignor], subscriptions, topics) if subscriptions else {}
        group.target = {member: frozenset(tps) for member, tps in plan.items()}
        group.counts = _subscribed_counts(group, topics)
        group.assignment_epoch = group.epoch


def _reconcile(
    member: ConsumerMember,
    group: ConsumerGroup,
    topics: Mapping[str, int],
    owned: frozenset[TopicPartition] | None,
    now_ms: int,
) -> None:
    """Move ``member`` towards its target (Kafka's CurrentAssignmentBuilder)."""
    if member.state == STABLE and member.epoch == group.assignment_epoch:
        return
    if member.state == UNREVOKED_PARTITIONS and _still_owns(owned, member.revoking):
        return
    subscribed = _subscribed(member, topics)
    target = frozenset(tp for tp in group.target.get(member.member_id, ()) if tp.topic in subscribed)
    keep = member.assigned & target
    revoke = member.assigned - keep
    wanted = target - keep
    unreleased = frozenset(tp for tp in wanted if group.owners.get(tp, member.member_id) != member.member_id)
    if revoke and _still_owns(owned, revoke):
        member.state = UNREVOKED_PARTITIONS
        _hold(group, member, keep, revoke)
        if member.revocation_deadline_ms is None:
            member.revocation_deadline_ms = now_ms + member.rebalance_timeout_ms
        return
    member.previous_epoch, member.epoch = member.epoch, group.assignment_epoch
    _hold(group, member, keep | (wanted - unreleased), frozenset())
    member.state = UNRELEASED_PARTITIONS if unreleased else STABLE
    member.revocation_deadline_ms = None


def _hold(
    group: ConsumerGroup,
    member: ConsumerMember,
    assigned: frozenset[TopicPartition],
    revoking: frozenset[TopicPartition],
) -> None:
    """Give ``member`` what it now owns, keeping the group's index of owners with it."""
    for tp in member.owns() - assigned - revoking:
        if group.owners.get(tp) == member.member_id:
            del group.owners[tp]
    member.assigned, member.revoking = assigned, revoking
    for tp in assigned | revoking:
        group.owners[tp] = member.member_id


def _still_owns(owned: frozenset[TopicPartition] | None, revoking: Iterable[TopicPartition]) -> bool:
    """Whether the member still holds any of ``revoking`` (unknown: it did not say)."""
    return owned is None or any(tp in owned for tp in revoking)


def _subscribed(member: ConsumerMember, topics: Mapping[str, int]) -> set[str]:
    names = {t for t in member.topics if t in topics}
    if member.regex:
        pattern = re.compile(member.regex)
        names.update(t for t in topics if pattern.fullmatch(t))
    return names


def _subscribed_counts(group: ConsumerGroup, topics: Mapping[str, int]) -> dict[str, int]:
    names = set().union(*(_subscribed(m, topics) for m in group.members.values())) if group.members else set()
    return {t: topics[t] for t in sorted(names)}


def _group_assignor(group: ConsumerGroup, default: str) -> str:
    """The assignor most members ask for (ties to the name first in order), else the default."""
    votes: dict[str, int] = {}
    for member in group.members.values():
        if member.assignor:
            votes[member.assignor] = votes.get(member.assignor, 0) + 1
    return max(sorted(votes), key=lambda a: votes[a]) if votes else default


def _validate(request: Heartbeat, config: ConsumerGroupConfig) -> None:
    if not request.group_id:
        raise InvalidRequestError("a consumer group heartbeat needs a group id")
    if request.member_epoch < STATIC_LEAVE_EPOCH:
        raise InvalidRequestError(f"member epoch {request.member_epoch} is not one a member may send")
    if request.member_epoch != JOIN_EPOCH and not request.member_id:
        raise InvalidRequestError("a member id is required once the member has joined")
    if request.member_epoch == JOIN_EPOCH:
        if request.rebalance_timeout_ms == -1:
            raise InvalidRequestError("a joining member must give its rebalance timeout")
        if request.topics is None and request.regex is None:
            raise InvalidRequestError("a joining member must give its subscription")
        if request.owned:
            raise InvalidRequestError("a joining member owns no partition")
    if request.assignor is not None and request.assignor not in config.group_consumer_assignors:
        raise UnsupportedAssignorError(
            f"server assignor {request.assignor!r} is not one of {list(config.group_consumer_assignors)}"
        )
    if request.regex:
        try:
            re.compile(request.regex)
        except re.error as exc:
            raise InvalidRegularExpressionError(f"topic regular expression {request.regex!r}: {exc}") from None


# --- records --------------------------------------------------------------------------


def group_key(group_id: str) -> bytes:
    return msgpack.packb([CONSUMER_GROUP_KEY, group_id])


def group_record(group: ConsumerGroup) -> tuple[bytes, bytes]:
    """``(key, value)`` of the group's state in ``__consumer_offsets``."""
    return group_key(group.group_id), msgpack.packb(_state(group))


def _state(group: ConsumerGroup) -> list:
    """What is persisted of a group (sessions are not)."""
    members = [_row(m) for m in sorted(group.members.values(), key=lambda m: m.member_id)]
    target = {member: _pairs(tps) for member, tps in sorted(group.target.items())}
    return [_RECORD_VERSION, group.epoch, group.assignment_epoch, group.assignor, group.counts, members, target]


def _row(m: ConsumerMember) -> list:
    return [
        m.member_id,
        m.instance_id,
        m.rack_id,
        m.rebalance_timeout_ms,
        list(m.topics),
        m.regex,
        m.assignor,
        m.epoch,
        m.previous_epoch,
        m.state,
        _pairs(m.assigned),
        _pairs(m.revoking),
        m.left,
    ]


def _outline(group: ConsumerGroup, member_id: str) -> tuple:
    """What a heartbeat of ``member_id`` can change of the group's :func:`_state`, without
    serializing the whole group: the epochs (a new target or another member removed moves
    one of them), assignor, counts, which members there are, and that member's own row."""
    member = group.members.get(member_id)
    return (
        group.epoch,
        group.assignment_epoch,
        group.assignor,
        tuple(group.counts.items()),
        tuple(group.members),
        None if member is None else _row(member),
    )


def _from_record(group_id: str, value: bytes) -> ConsumerGroup:
    _, epoch, assignment_epoch, assignor, counts, members, target = msgpack.unpackb(value, strict_map_key=False)
    group = ConsumerGroup(group_id, epoch, assignment_epoch, assignor, counts=dict(counts))
    for fields in members:
        member_id, instance_id, rack_id, timeout_ms, topics, regex, chosen, m_epoch, previous, state, *rest = fields
        assigned, revoking, left = rest
        group.members[member_id] = ConsumerMember(
            member_id,
            instance_id,
            rack_id,
            timeout_ms,
            tuple(topics),
            regex,
            chosen,
            m_epoch,
            previous,
            state,
            _partitions(assigned),
            _partitions(revoking),
            left,
        )
    group.target = {member: _partitions(tps) for member, tps in target.items()}
    for member in group.members.values():
        _hold(group, member, member.assigned, member.revoking)
    return group


def _pairs(partitions: Iterable[TopicPartition]) -> list[list]:
    return [[tp.topic, tp.partition] for tp in sorted(partitions)]


def _partitions(pairs: Iterable[list]) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(t, p) for t, p in pairs)
