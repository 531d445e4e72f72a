"""The group coordinator's state machine: consumer-group membership and committed offsets.

One :class:`GroupCoordinator` serves the groups whose id hashes to one partition of the
internal topic ``__consumer_offsets`` (:func:`partition_for`, Kafka's rule); it lives with
that partition's leader replica. Everything it must not forget (committed offsets, each
generation's members and assignment, deletions) is a keyed record of that compacted
partition: :func:`offset_record` and :meth:`GroupCoordinator._group_record` make them,
:meth:`load` folds them back after a fail-over. Records reach the log through the caller.

Offsets follow the log: the caller hands every batch of the partition to
:meth:`GroupCoordinator.apply_batch`, in offset order and once the ISR has it
(:class:`~raylog.coordination.replay.LogReplay`), never a call its own record as it wakes:
plain commits, offsets committed in a transaction and the transaction's marker then take
effect in the order of the log, whichever waiting call drives the replay, and the offsets
in memory are those the next leader loads. Membership is decided here instead: its records
persist what memory holds, and restore it only while loading (until :meth:`serve`).

No member is told a generation before it is durable (Kafka persists the group before it
answers SyncGroup): a join that completes returns the group record to append, and holds
the replies that carry the new generation (:attr:`Outcome.held`) until the caller reports
the append replicated (:meth:`persisted`). If the append fails (:meth:`append_failed`) the
waiting members get a retriable COORDINATOR_NOT_AVAILABLE or NOT_COORDINATOR instead and
the group rebalances again, so nothing was promised. Hence after a fail-over the loaded
generation is at least every generation any member was told, and generations are never
reused with another membership or assignment.

Membership is Kafka's classic protocol: members join (the join completes when every known
member has rejoined, or at the rebalance deadline without the missing ones), the members'
vote picks the group's protocol, the generation goes up, each member fetches its assignment
(sync) and heartbeats. Who assigns depends on the protocol chosen. A consumer assignor this
coordinator runs (``range``, ``roundrobin``, ``cooperative-sticky``: raylog's members, and
Kafka's consumers proposing them) is run here when the join completes, so raylog and Kafka
members mix in one group. Any other protocol (a custom assignor, Kafka Streams' ``stream``,
Kafka Connect's protocol type ``connect``) is the members' business, as in Kafka: the leader
member is told every member's metadata, the generation waits in CompletingRebalance for the
leader's sync, which carries each member's assignment as opaque bytes, and every sync is
answered once that assignment is replicated (a leader that never sends it is removed at the
rebalance deadline, with the members that never synced, and the group rebalances).

A member that misses ``session.timeout.ms`` of heartbeats is removed, and so is one that
does not rejoin within its rebalance timeout (``max.poll.interval.ms``). With the
cooperative assignor run here a partition never has two owners in one generation: one that
moves is withheld from its new member until its owner revoked it and rejoined (the
follow-up rebalance); a claim counts only if made in the latest generation any member is in
(a member that lost its place claims nothing). A leader member running a cooperative
assignor does the same on its side (KIP-429). Static members (``group.instance.id``) that
come back with the same subscription take their old place without a rebalance (a leader
among them is told to skip assigning, KIP-814).

States (Kafka's names): Empty, PreparingRebalance, CompletingRebalance (the join is
complete, the group record not durable yet; or, where the leader member assigns, its
assignment not received or not durable yet), Stable, Dead.

Inputs are requests and :meth:`tick` with the time; outputs are :class:`Outcome` (replies
for waiting joins, records to append) or a raised typed error. No clock, no I/O.
Concurrency: not thread-safe; one caller at a time (the coordinator actor, under its lock).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgpack

from raylog.common import record_batch
from raylog.common.assignors import ASSIGNORS, COOPERATIVE, Subscription, assign, choose_strategy, current_claims
from raylog.common.group_protocol import Heartbeat
from raylog.common.names import check_group_id

from ..errors import (
    ApiError,
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidSessionTimeoutError,
    MemberIdRequiredError,
    NonEmptyGroupError,
    NotCoordinatorError,
    NotLeaderOrFollowerError,
    OffsetMetadataTooLargeError,
    RebalanceInProgressError,
    StorageError,
    UnknownMemberIdError,
    UnstableOffsetCommitError,
)
from ..protocol import (
    GroupResponse,
    JoinedMember,
    JoinGroupRequest,
    JoinGroupResponse,
    SyncGroupResponse,
    error_fields,
)
from ..types import OffsetAndMetadata, TopicPartition
from .consumer_group import CONSUMER_GROUP_KEY, ConsumerGroup, ConsumerGroupConfig, ConsumerGroups, group_key

EMPTY, PREPARING_REBALANCE, STABLE, DEAD = "Empty", "PreparingRebalance", "Stable", "Dead"
#: The protocol type of consumers (raylog's and Kafka's): the only one whose protocols this
#: coordinator may run itself (the assignors of :mod:`raylog.common.assignors`).
CONSUMER_PROTOCOL_TYPE = "consumer"
COMPLETING_REBALANCE = "CompletingRebalance"
#: Bounds on a member's session timeout (Kafka's group.min/max.session.timeout.ms).
MIN_SESSION_TIMEOUT_MS = 1_000
MAX_SESSION_TIMEOUT_MS = 30 * 60_000
#: Longest metadata string kept with a committed offset (offset.metadata.max.bytes).
MAX_OFFSET_METADATA_BYTES = 4096
#: How long the group's topics must stay changed before a heartbeat rebalances the group
#: (see :meth:`GroupCoordinator.heartbeat`): about what a consumer fetching from a deleted
#: topic takes to see it gone (its fetch fails, it refreshes its metadata).
TOPICS_CHANGED_GRACE_MS = 3_000
#: Record key types in ``__consumer_offsets`` (the first element of each msgpack key).
_OFFSET_KEY, _GROUP_KEY = 1, 2

logger = logging.getLogger(__name__)


def partition_for(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition whose leader coordinates ``group_id``: the
    absolute value of Java's ``String.hashCode`` of the id modulo the partition count
    (Kafka's rule, so a group maps to the same partition number in both systems)."""
    units = group_id.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    signed = h - (1 << 32) if h >= 1 << 31 else h
    return (0 if signed == -(1 << 31) else abs(signed)) % num_partitions


def offset_record(group_id: str, tp: TopicPartition, committed: OffsetAndMetadata | None, now_ms: int) -> tuple:
    key = msgpack.packb([_OFFSET_KEY, group_id, tp.topic, tp.partition])
    if committed is None:
        return key, None
    return key, msgpack.packb([committed.offset, committed.metadata, now_ms, committed.leader_epoch])


def _committed(value: bytes) -> OffsetAndMetadata:
    """An offset record's value: ``[offset, metadata, commit time, leader epoch]`` (records
    written before leader epochs were kept have three fields: the epoch is unknown, -1)."""
    offset, metadata, _, *leader_epoch = msgpack.unpackb(value)
    return OffsetAndMetadata(offset, metadata, *leader_epoch)


@dataclass
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    subscription: Subscription
    partition_counts: dict[str, int]
    assignment: list[TopicPartition] = field(default_factory=list)
    last_heartbeat_ms: int = 0
    join_waiter: Any = None  # the caller's token for a join waiting to complete
    #: Its join completed and the reply waits for the group record: it cannot heartbeat yet.
    reply_held: bool = False
    #: A reply carrying its member id was released (or it was loaded from the log).
    id_known: bool = True
    protocol_type: str = CONSUMER_PROTOCOL_TYPE
    #: Protocol name -> its metadata as the member joined with it (Kafka members; opaque).
    metadata: dict[str, bytes] = field(default_factory=dict)
    #: Its assignment as the group's leader member made it (a leader-assigned protocol).
    assigned: bytes = b""
    sync_waiter: Any = None  # the caller's token for a sync waiting for the leader's assignment


@dataclass
class Group:
    group_id: str
    state: str = EMPTY
    generation: int = 0
    protocol: str = ""
    protocol_type: str = ""
    #: This generation waits for its leader member's assignment (a protocol the leader
    #: assigns); until ``sync_deadline_ms`` (the rebalance timeout from the join's end).
    awaiting_assignment: bool = False
    sync_deadline_ms: int = 0
    leader: str = ""
    members: dict[str, Member] = field(default_factory=dict)
    offsets: dict[TopicPartition, OffsetAndMetadata] = field(default_factory=dict)
    rebalance_deadline_ms: int = 0
    #: The first rebalance of an empty group waits until then (ms) for more members to join
    #: (``group.initial.rebalance.delay.ms``); 0 when not waiting.
    initial_join_until_ms: int = 0
    #: When a heartbeat first saw the group's topics changed since its assignment (ms; 0:
    #: unchanged); in memory only.
    topics_changed_ms: int = 0
    #: Member ids handed out with MEMBER_ID_REQUIRED (KIP-394) -> when they expire (ms):
    #: not members until they join with them; kept in memory only, as in Kafka.
    pending_members: dict[str, int] = field(default_factory=dict)

    def static_member(self, instance_id: str | None) -> Member | None:
        if instance_id is None:
            return None
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)

    @property
    def leader_assigns(self) -> bool:
        """Whether a member (the leader) assigns this generation: any protocol but the
        consumer assignors this coordinator runs (Kafka's classic protocol)."""
        return self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol not in ASSIGNORS


@dataclass
class Outcome:
    """What a step produced.

    ``replies`` (errors: they promise nothing) may be released at once. ``records`` must be
    appended to the coordinator's partition with acks=all; ``held`` replies (each telling a
    member its generation) wait for that: release them when :meth:`GroupCoordinator.persisted`
    returns them, or what :meth:`GroupCoordinator.append_failed` returns instead.
    """

    replies: list[tuple[Any, JoinGroupResponse]] = field(default_factory=list)
    records: list[tuple[bytes, bytes | None]] = field(default_factory=list)
    held: list[tuple[Any, JoinGroupResponse]] = field(default_factory=list)
    #: group id -> the generation its group record in ``records`` persists.
    generations: dict[str, int] = field(default_factory=dict)
    #: consumer group (KIP-848) id -> the state its record in ``records`` persists.
    consumer_states: dict[str, bytes | None] = field(default_factory=dict)

    def extend(self, other: Outcome) -> None:
        self.replies.extend(other.replies)
        self.records.extend(other.records)
        self.held.extend(other.held)
        self.generations.update(other.generations)
        self.consumer_states.update(other.consumer_states)


class GroupCoordinator:
    """See the module docstring."""

    def __init__(self, initial_rebalance_delay_ms: int = 0, consumer: ConsumerGroupConfig | None = None) -> None:
        #: Kafka's group.initial.rebalance.delay.ms: how long the first rebalance of an empty
        #: group waits for more members, again after each new one, up to the rebalance timeout.
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        #: Classic groups (JoinGroup / SyncGroup), and every group's committed offsets.
        self.groups: dict[str, Group] = {}
        #: Consumer groups of Kafka 4's protocol (KIP-848, ConsumerGroupHeartbeat); a group
        #: id is of one kind while it has members.
        self.consumer = ConsumerGroups(consumer)
        #: Offsets committed in transactions not decided yet: (producer id, epoch of the
        #: transaction) -> group -> offsets. A marker of the producer decides every pending
        #: transaction of that producer up to its own epoch (a commit makes their offsets
        #: the group's, an abort drops them); a later transaction's offsets follow the
        #: marker in the log, so it never decides them.
        self.pending: dict[tuple[int, int], dict[str, dict[TopicPartition, OffsetAndMetadata]]] = {}
        #: The offset after the last batch of the partition applied (:meth:`apply_batch`).
        self.next_offset = 0
        #: Loaded and serving: group records no longer restore the membership (:meth:`serve`).
        self.serving = False

    def serve(self) -> None:
        """The partition is loaded: from now on membership is decided here, and the group
        records :meth:`apply_batch` meets persist what memory already holds."""
        self.serving = True

    def apply_batch(
        self, header: record_batch.BatchHeader, records: list[tuple[bytes | None, bytes | None]], now_ms: int
    ) -> None:
        """Apply the next batch of the partition, in log order, once the ISR has it (or while
        loading): a plain batch's offset records commit, a transactional batch's are held
        for its producer (:meth:`load_pending`), a marker decides them
        (:meth:`complete_transaction`)."""
        if header.attributes & record_batch.CONTROL:
            committed = bool(header.attributes & record_batch.COMMIT_MARKER)
            self.complete_transaction(header.producer_id, header.producer_epoch, committed)
        elif header.attributes & record_batch.TRANSACTIONAL:
            self.load_pending(header.producer_id, header.producer_epoch, records)
        else:
            self.load(records, now_ms)
        self.next_offset = header.next_offset

    # --- fail-over ----------------------------------------------------------------------

    def load(self, records: Iterable[tuple[bytes | None, bytes | None]], now_ms: int) -> None:
        """Rebuild every group from its partition's plain records, oldest first (later
        records win, a ``None`` value deletes). Restored members get a fresh session to find
        the new coordinator and heartbeat it. Once serving, only offsets are applied."""
        for key, value in records:
            if key is None:
                continue
            kind, group_id, *rest = msgpack.unpackb(key)
            if kind == _OFFSET_KEY:
                tp = TopicPartition(rest[0], rest[1])
                if value is not None:
                    self.apply_commit(group_id, {tp: _committed(value)})
                elif group_id in self.groups:
                    self.groups[group_id].offsets.pop(tp, None)
            elif kind == _GROUP_KEY and not self.serving:
                group = self.groups.setdefault(group_id, Group(group_id))
                self._restore(group, None if value is None else msgpack.unpackb(value), now_ms)
            elif kind == CONSUMER_GROUP_KEY and not self.serving:
                self.consumer.load(group_id, value, now_ms)
        if self.serving:
            return
        for group_id in [g for g, group in self.groups.items() if not group.members and not group.offsets]:
            if self.groups[group_id].generation == 0:
                del self.groups[group_id]

    def _restore(self, group: Group, value: dict | None, now_ms: int) -> None:
        if value is None:
            group.members.clear()
            group.generation, group.protocol, group.leader, group.state = 0, "", "", EMPTY
            return
        group.generation, group.protocol, group.leader = value["generation"], value["protocol"], value["leader"]
        group.protocol_type = value.get("protocol_type", CONSUMER_PROTOCOL_TYPE)
        group.members = {}
        for m in value["members"]:
            member_id, instance_id, client_id, session_ms, rebalance_ms, topics, strategies, counts, assignment = m[:9]
            # Written before leader-assigned protocols: a consumer whose assignment was made here.
            protocol_type, metadata, assigned = m[9:] or (CONSUMER_PROTOCOL_TYPE, b"", b"")
            group.members[member_id] = Member(
                member_id,
                instance_id,
                client_id,
                session_ms,
                rebalance_ms,
                Subscription(tuple(topics), (), instance_id, tuple(strategies)),
                dict(counts),
                [TopicPartition(t, p) for t, p in assignment],
                last_heartbeat_ms=now_ms,
                protocol_type=protocol_type,
                metadata={group.protocol: metadata} if metadata else {},
                assigned=assigned,
            )
        group.state = STABLE if group.members else EMPTY
        if group.members and value.get("awaiting_assignment"):
            # Its leader's assignment was never replicated: the members must join again.
            group.state, group.awaiting_assignment = PREPARING_REBALANCE, False
            group.rebalance_deadline_ms = now_ms + max(m.rebalance_timeout_ms for m in group.members.values())

    # --- the group records' fate ------------------------------------------------------

    def persisted(self, outcome: Outcome, now_ms: int) -> Outcome:
        """``outcome``'s records are replicated: its held replies may go out. A group whose
        rebalance completed becomes Stable (where its leader member assigns, once that
        assignment is replicated: the syncs that came meanwhile are answered too), and its
        members' sessions start now (they could not heartbeat a generation they did not know)."""
        released = Outcome(replies=list(outcome.held))
        for group_id, state in outcome.consumer_states.items():
            self.consumer.persisted(group_id, state)
        for group in self._groups_of(outcome):
            for member in group.members.values():
                if member.reply_held:
                    member.reply_held, member.id_known, member.last_heartbeat_ms = False, True, now_ms
            if group.state == COMPLETING_REBALANCE and not group.awaiting_assignment:
                group.state = STABLE
                for member in group.members.values():
                    if member.sync_waiter is not None:
                        released.replies.append((member.sync_waiter, _sync_reply(group, member)))
                        member.sync_waiter = None
        return released

    def append_failed(self, outcome: Outcome, exc: Exception, now_ms: int) -> Outcome:
        """``outcome``'s records could not be replicated: its held replies become
        ``exc`` as Kafka reports a failed group append (NOT_COORDINATOR when leadership or
        the disk is gone, else COORDINATOR_NOT_AVAILABLE; both retriable), members that never
        learnt their id are dropped, and the group rebalances again (the generation in
        memory was told to no one, and the next one is above it)."""
        error = _append_error(exc)
        result = Outcome(replies=[(waiter, _held_error(held, error)) for waiter, held in outcome.held])
        for group_id in outcome.consumer_states:
            self.consumer.revert(group_id, now_ms)
        for group in self._groups_of(outcome):
            unknown = [m for m in group.members.values() if m.reply_held and not m.id_known]
            for member in group.members.values():
                if member.reply_held:
                    member.reply_held, member.last_heartbeat_ms = False, now_ms
            if unknown:
                result.extend(self._remove(group, unknown, now_ms, error))
            elif group.state in (COMPLETING_REBALANCE, STABLE):
                result.extend(self._prepare_rebalance(group, now_ms, f"its record was not replicated: {exc}"))
        return result

    def _groups_of(self, outcome: Outcome) -> list[Group]:
        """The groups with members whose record ``outcome`` carries, while still in that
        generation."""
        groups = [self.groups.get(group_id) for group_id in outcome.generations]
        return [g for g in groups if g is not None and g.members and g.generation == outcome.generations[g.group_id]]

    # --- membership ---------------------------------------------------------------------

    def join(self, request: JoinGroupRequest, waiter: Any, now_ms: int) -> Outcome:
        """A member (re)joins. Its reply arrives in an :class:`Outcome` once the join
        completes (at once for a static member taking its place back).

        Raises:
            InvalidGroupIdError, InvalidSessionTimeoutError, UnknownMemberIdError,
            FencedInstanceIdError, InconsistentGroupProtocolError.
        """
        check_group_id(request.group_id)
        if not MIN_SESSION_TIMEOUT_MS <= request.session_timeout_ms <= MAX_SESSION_TIMEOUT_MS:
            raise InvalidSessionTimeoutError(
                f"session.timeout.ms must be in [{MIN_SESSION_TIMEOUT_MS}, {MAX_SESSION_TIMEOUT_MS}],"
                f" got {request.session_timeout_ms}"
            )
        if not request.strategies:
            raise InconsistentGroupProtocolError("a member must support at least one partition assignor")
        consumer_group = self.consumer.describe(request.group_id)
        if consumer_group is not None and consumer_group.members:
            raise InconsistentGroupProtocolError(
                f"group {request.group_id!r} is a consumer group of Kafka's consumer protocol (KIP-848)"
            )
        if request.member_id and request.group_id not in self.groups:
            # Like Kafka, only a member joining for the first time creates a group.
            raise UnknownMemberIdError(f"member {request.member_id!r} is not in group {request.group_id!r}")
        if request.metadata and len(request.metadata) != len(request.strategies):
            raise InconsistentGroupProtocolError("a member's protocols and their metadata must pair up")
        group = self.groups.setdefault(request.group_id, Group(request.group_id))
        subscription = Subscription(
            tuple(sorted(request.topics)),
            tuple(TopicPartition(*tp) for tp in request.owned),
            request.instance_id,
            tuple(request.strategies),
            request.owned_generation,
        )
        static = group.static_member(request.instance_id)
        pending = request.member_id in group.pending_members
        if request.member_id == "" or pending:
            replacing = static.member_id if static is not None else None
            _check_strategies(group, request.protocol_type, request.strategies, replacing)
            group.pending_members.pop(request.member_id, None)
            if static is not None:
                return self._static_rejoin(group, static, request, subscription, waiter, now_ms)
            member_id = request.member_id or f"{request.client_id or 'consumer'}-{uuid.uuid4().hex[:12]}"
            if not pending and request.require_known_member_id and request.instance_id is None:
                group.pending_members[member_id] = now_ms + request.session_timeout_ms
                required = MemberIdRequiredError(f"join group {request.group_id!r} again with member id {member_id!r}")
                return Outcome(replies=[(waiter, JoinGroupResponse(**error_fields(required), member_id=member_id))])
            member = Member(
                member_id,
                request.instance_id,
                request.client_id,
                request.session_timeout_ms,
                request.rebalance_timeout_ms,
                subscription,
                dict(request.partition_counts),
                id_known=False,
                protocol_type=request.protocol_type,
                metadata=_metadata(request),
            )
            group.members[member.member_id] = member
        else:
            member = self._member(group, request.member_id, request.instance_id)
            _check_strategies(group, request.protocol_type, request.strategies, replacing=member.member_id)
            member.subscription = subscription
            member.metadata = _metadata(request)
            member.partition_counts = dict(request.partition_counts)
            member.session_timeout_ms = request.session_timeout_ms
            member.rebalance_timeout_ms = request.rebalance_timeout_ms
        new_member = request.member_id == "" or pending
        if member.join_waiter is not None and member.join_waiter is not waiter:
            # A retried join replaces the one that was waiting (its caller gave up on it).
            stale = member.join_waiter
            member.join_waiter = waiter
            outcome = Outcome(replies=[(stale, _join_error(RebalanceInProgressError("the join was sent again")))])
        else:
            member.join_waiter = waiter
            outcome = Outcome()
        member.last_heartbeat_ms = now_ms
        if group.state != PREPARING_REBALANCE:
            joined = "joined" if new_member else "rejoined"
            outcome.extend(self._prepare_rebalance(group, now_ms, f"member {member.member_id} {joined}"))
        elif group.initial_join_until_ms and new_member:
            group.initial_join_until_ms = min(now_ms + self.initial_rebalance_delay_ms, group.rebalance_deadline_ms)
        outcome.extend(self._maybe_complete_join(group, now_ms))
        return outcome

    def _static_rejoin(
        self, group: Group, old: Member, request: JoinGroupRequest, subscription: Subscription, waiter, now_ms: int
    ) -> Outcome:
        """A static member back (after a restart): it takes its old member's place and
        assignment, fencing the old member id. A changed subscription still rebalances (the
        group's protocol no longer among the member's, or other topics where this
        coordinator assigns); a leader back in a Stable group is told to skip assigning."""
        new_id = f"{request.instance_id}-{uuid.uuid4().hex[:12]}"
        del group.members[old.member_id]
        outcome = Outcome()
        fenced = FencedInstanceIdError("a newer member took over")
        if old.join_waiter is not None:
            outcome.replies.append((old.join_waiter, _join_error(fenced)))
        outcome.replies.extend(_release_syncs([old], fenced))
        member = Member(
            new_id,
            request.instance_id,
            request.client_id,
            request.session_timeout_ms,
            request.rebalance_timeout_ms,
            subscription,
            dict(request.partition_counts),
            list(old.assignment),
            now_ms,
            id_known=False,
            protocol_type=request.protocol_type,
            metadata=_metadata(request),
            assigned=old.assigned,
        )
        group.members[new_id] = member
        if group.leader == old.member_id:
            group.leader = new_id
        unchanged = group.protocol in request.strategies and (
            group.leader_assigns or subscription.topics == old.subscription.topics
        )
        if group.state == STABLE and unchanged:
            member.reply_held = True
            outcome.held.append((waiter, self._join_reply(group, member, skip_assignment=True)))
            self._record(group, outcome)
            return outcome
        member.join_waiter = waiter
        if group.state != PREPARING_REBALANCE:
            reason = f"static member {request.instance_id} rejoined as {new_id}"
            outcome.extend(self._prepare_rebalance(group, now_ms, reason))
        outcome.extend(self._maybe_complete_join(group, now_ms))
        return outcome

    def sync(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        instance_id: str | None,
        waiter: Any,
        now_ms: int,
        assignments: dict[str, bytes] | None = None,
    ) -> Outcome:
        """The member's assignment in ``generation``, as a reply to ``waiter`` in the
        :class:`Outcome`: at once in a Stable group; where the leader member assigns, once
        the leader's sync brought ``assignments`` (member id -> its assignment; a member it
        left out gets none) and they are replicated (held replies, with the group record).

        Raises:
            UnknownMemberIdError, FencedInstanceIdError, IllegalGenerationError,
            RebalanceInProgressError.
        """
        group = self._group(group_id)
        member = self._current_member(group_id, member_id, generation, instance_id, now_ms)
        if group.state == STABLE:
            return Outcome(replies=[(waiter, _sync_reply(group, member))])
        if member.sync_waiter is not None and member.sync_waiter is not waiter:
            # A retried sync replaces the one that was waiting (its caller gave up on it).
            stale = SyncGroupResponse(**error_fields(RebalanceInProgressError("the sync was sent again")))
            outcome = Outcome(replies=[(member.sync_waiter, stale)])
        else:
            outcome = Outcome()
        member.sync_waiter = waiter
        if group.awaiting_assignment and member.member_id == group.leader and assignments is not None:
            unknown = sorted(set(assignments) - set(group.members))
            if unknown:
                logger.info("group %s: leader %s assigned to non-members %s", group_id, member_id, unknown)
            for m in group.members.values():
                m.assigned = assignments.get(m.member_id, b"")
            group.awaiting_assignment = False
            logger.info("group %s: generation %d assigned by leader %s", group_id, group.generation, member_id)
            for m in group.members.values():
                if m.sync_waiter is not None:
                    outcome.held.append((m.sync_waiter, _sync_reply(group, m)))
                    m.sync_waiter = None
            return self._record(group, outcome)
        return outcome  # it waits for the leader's assignment (and for it to be replicated)

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        instance_id: str | None,
        now_ms: int | None,
        topics: Mapping[str, int] | None = None,
    ) -> Outcome:
        """The member is alive (``now_ms`` None: only check that it is still current).

        ``topics``: the cluster's topics and their partition counts, as the caller sees them
        (a Kafka listener's heartbeats bring them). Where this coordinator assigns, it watches
        the group's topics as Kafka's leader member does, which rejoins when a subscribed
        topic is created, deleted or given partitions: a change since the assignment starts a
        rebalance (its :class:`Outcome`), and the next check reports it to the member. (Kafka
        members other than the leader never rejoin for it; raylog's own consumers do, and
        bring no topics.) The change must last :data:`TOPICS_CHANGED_GRACE_MS` first: a member
        that fetches from a deleted topic sees it gone within that time and revokes its
        partitions there as lost, as it does before Kafka's leader rejoins.

        Raises:
            RebalanceInProgressError: the member must rejoin (its session is kept).
            UnknownMemberIdError, FencedInstanceIdError, IllegalGenerationError.
        """
        self._current_member(group_id, member_id, generation, instance_id, now_ms)
        group = self.groups[group_id]
        if topics is None or now_ms is None or group.state != STABLE or group.leader_assigns:
            return Outcome()
        assigned = _partition_counts(group)
        subscribed = {t for m in group.members.values() for t in m.subscription.topics}
        changed = sorted(t for t in subscribed if topics.get(t, 0) != assigned.get(t, 0))
        if not changed:
            group.topics_changed_ms = 0
            return Outcome()
        if not group.topics_changed_ms:
            group.topics_changed_ms = now_ms
        if now_ms - group.topics_changed_ms < TOPICS_CHANGED_GRACE_MS:
            return Outcome()
        group.topics_changed_ms = 0
        counts = {t: (assigned.get(t, 0), topics.get(t, 0)) for t in changed}
        return self._prepare_rebalance(group, now_ms, f"partition counts of subscribed topics changed: {counts}")

    def leave(self, group_id: str, member_id: str, instance_id: str | None, now_ms: int) -> Outcome:
        """The member leaves; the others rebalance at once (no wait for a session timeout).

        Raises:
            UnknownMemberIdError, FencedInstanceIdError.
        """
        group = self._group(group_id)
        member = self._member(group, member_id, instance_id)
        return self._remove(group, [member], now_ms, UnknownMemberIdError("the member left the group"))

    def consumer_heartbeat(
        self, request: Heartbeat, topics: dict[str, int], waiter: Any, now_ms: int, new_member_id
    ) -> Outcome:
        """A ConsumerGroupHeartbeat (KIP-848, :mod:`raylog.coordination.consumer_group`): its
        answer (a :class:`GroupResponse` whose value is the member's
        :class:`~raylog.common.group_protocol.HeartbeatAnswer`) is held until the
        group's record is replicated when the heartbeat changed the group.

        Raises:
            GroupIdNotFoundError: the id is a classic group's with members; and what
                :meth:`ConsumerGroups.heartbeat` raises.
        """
        check_group_id(request.group_id)
        classic = self.groups.get(request.group_id)
        if classic is not None and classic.members:
            raise GroupIdNotFoundError(f"group {request.group_id!r} is a classic group, not a consumer group")
        answer, record = self.consumer.heartbeat(request, topics, now_ms, new_member_id)
        if record is None:
            return Outcome(replies=[(waiter, GroupResponse(value=answer))])
        held = [(waiter, GroupResponse(value=answer))]
        return Outcome(records=[record], held=held, consumer_states={request.group_id: record[1]})

    def tick(self, now_ms: int) -> Outcome:
        """Expire members whose session ran out, and member ids handed out that never came
        back; finish rebalances past their deadline."""
        fenced = self.consumer.tick(now_ms)
        outcome = Outcome(records=list(fenced.values()), consumer_states={g: record[1] for g, record in fenced.items()})
        for group in list(self.groups.values()):
            for member_id in [m for m, expires_ms in group.pending_members.items() if now_ms >= expires_ms]:
                del group.pending_members[member_id]  # never came back with its id
            # A member waiting in a join or a sync, or for the reply of a join that completed,
            # need not heartbeat (a new one does not know its id yet): like Kafka, its session
            # holds while it waits; the rebalance and sync deadlines and the append bound the
            # wait instead.
            expired = [
                m
                for m in group.members.values()
                if m.join_waiter is None
                and m.sync_waiter is None
                and not m.reply_held
                and now_ms - m.last_heartbeat_ms > m.session_timeout_ms
            ]
            if expired:
                outcome.extend(self._remove(group, expired, now_ms, UnknownMemberIdError("the session timed out")))
            if group.state == COMPLETING_REBALANCE and group.awaiting_assignment and now_ms >= group.sync_deadline_ms:
                # The leader never sent its assignment: it goes, with every member that never
                # synced (Kafka's pending-sync timeout), and the others rebalance.
                late = [m for m in group.members.values() if m.member_id == group.leader or m.sync_waiter is None]
                error = UnknownMemberIdError("no assignment from the leader within the rebalance timeout")
                outcome.extend(self._remove(group, late, now_ms, error))
            if group.state == PREPARING_REBALANCE and 0 < group.initial_join_until_ms <= now_ms:
                outcome.extend(self._maybe_complete_join(group, now_ms))
            if group.state == PREPARING_REBALANCE and now_ms >= group.rebalance_deadline_ms:
                outcome.extend(self._maybe_complete_join(group, now_ms, deadline_passed=True))
        return outcome

    # --- offsets ------------------------------------------------------------------------

    def prepare_commit(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        instance_id: str | None,
        offsets: dict[TopicPartition, OffsetAndMetadata],
        now_ms: int,
    ) -> list[tuple[bytes, bytes | None]]:
        """Check that this member may commit now; returns the records to append. A member of
        an older generation is refused (so a zombie cannot move offsets backwards); a
        consumer outside the group (``generation`` -1) may commit only while it is empty.

        Raises:
            IllegalGenerationError, UnknownMemberIdError, FencedInstanceIdError,
            OffsetMetadataTooLargeError, ValueError (a negative offset).
        """
        check_group_id(group_id)
        for tp, committed in offsets.items():
            if committed.offset < 0:
                raise ValueError(f"cannot commit offset {committed.offset} for {tp}")
            if len(committed.metadata.encode()) > MAX_OFFSET_METADATA_BYTES:
                raise OffsetMetadataTooLargeError(f"metadata of {tp} is over {MAX_OFFSET_METADATA_BYTES} bytes")
        if self.consumer.describe(group_id) is not None:
            self.consumer.check_commit(group_id, member_id, generation)  # a member epoch
            return [offset_record(group_id, tp, committed, now_ms) for tp, committed in offsets.items()]
        group = self.groups.get(group_id)
        if generation < 0:
            if group is not None and group.members:
                raise UnknownMemberIdError(
                    f"group {group_id!r} has active members; only they may commit for it (or stop them first)"
                )
        else:
            if group is None:
                raise UnknownMemberIdError(f"no group {group_id!r}")
            member = self._member(group, member_id, instance_id)
            if group.state == COMPLETING_REBALANCE:
                raise RebalanceInProgressError(f"group {group_id!r} is completing a rebalance: rejoin")
            if generation != group.generation:
                raise IllegalGenerationError(
                    f"generation {generation} of group {group_id!r} is over (now {group.generation})"
                )
            member.last_heartbeat_ms = now_ms
        return [offset_record(group_id, tp, committed, now_ms) for tp, committed in offsets.items()]

    def apply_commit(self, group_id: str, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        """A plain commit's records, in log order: make the offsets visible. As the last
        record of each key wins in the log (and after compaction), they also replace what a
        pending transaction would set for those partitions."""
        self._set_offsets(group_id, offsets)
        for by_group in self.pending.values():
            undecided = by_group.get(group_id)
            for tp in offsets if undecided else ():
                undecided.pop(tp, None)

    def _set_offsets(self, group_id: str, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        self.groups.setdefault(group_id, Group(group_id)).offsets.update(offsets)

    # --- offsets in transactions (Kafka's TxnOffsetCommit) -------------------------------

    def add_pending(
        self, producer_id: int, producer_epoch: int, group_id: str, offsets: dict[TopicPartition, OffsetAndMetadata]
    ) -> None:
        """A transactional commit's records, in log order: hold the offsets until the
        producer's transaction is decided (:meth:`complete_transaction`)."""
        self.pending.setdefault((producer_id, producer_epoch), {}).setdefault(group_id, {}).update(offsets)

    def complete_transaction(self, producer_id: int, marker_epoch: int, committed: bool) -> None:
        """A marker of ``producer_id`` with ``marker_epoch``, in log order: the offsets of its
        transactions up to that epoch count, or are dropped. A marker carries the next epoch
        of its producer, or the transaction's own for a Kafka client at EndTxn v0-4 (no
        bump): either way the transaction it ends, and no later one, is before it in the
        log (the partition refuses a marker older than the producer's epoch)."""
        for key in [k for k in self.pending if k[0] == producer_id and k[1] <= marker_epoch]:
            for group_id, offsets in self.pending.pop(key).items():
                if committed:
                    self._set_offsets(group_id, offsets)

    def load_pending(
        self, producer_id: int, producer_epoch: int, records: Iterable[tuple[bytes | None, bytes | None]]
    ) -> None:
        """Replay a transactional batch of offset records (held until its marker)."""
        for key, value in records:
            if key is None or value is None:
                continue
            kind, group_id, *rest = msgpack.unpackb(key)
            if kind == _OFFSET_KEY:
                tp = TopicPartition(rest[0], rest[1])
                self.add_pending(producer_id, producer_epoch, group_id, {tp: _committed(value)})

    def committed(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None, require_stable: bool = True
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """Committed offsets of the group (all, or those of ``partitions`` that have one).

        Raises:
            UnstableOffsetCommitError: ``require_stable`` and a transaction not decided yet
                holds offsets of the group (of one of ``partitions``).
        """
        check_group_id(group_id)
        for by_group in self.pending.values() if require_stable else ():
            undecided = by_group.get(group_id, {})
            if undecided and (partitions is None or any(TopicPartition(*tp) in undecided for tp in partitions)):
                raise UnstableOffsetCommitError(f"group {group_id!r} has offsets in a transaction not decided yet")
        group = self.groups.get(group_id)
        if group is None:
            return {}
        if partitions is None:
            return dict(group.offsets)
        return {tp: group.offsets[tp] for tp in map(TopicPartition._make, partitions) if tp in group.offsets}

    # --- admin --------------------------------------------------------------------------

    def list_groups(self) -> list[tuple[str, str, str, str]]:
        """``(group_id, state, protocol, protocol type)`` of every group (a group that only
        has committed offsets has the consumers' protocol type; a consumer group of Kafka's
        consumer protocol names its server assignor as its protocol)."""
        listed = {
            g.group_id: (g.group_id, g.state, g.protocol, g.protocol_type or CONSUMER_PROTOCOL_TYPE)
            for g in self.groups.values()
        }
        for group_id, group in self.consumer.groups.items():
            listed[group_id] = (group_id, group.state(), group.assignor, CONSUMER_PROTOCOL_TYPE)
        return [listed[g] for g in sorted(listed)]

    def describe(self, group_id: str) -> dict:
        """State, generation, assignor, leader and members (with assignments) of a group.

        Raises:
            GroupIdNotFoundError.
        """
        group = self._group(group_id, GroupIdNotFoundError)
        return {
            "group_id": group.group_id,
            "state": group.state,
            "generation": group.generation,
            "protocol": group.protocol,
            "protocol_type": group.protocol_type or CONSUMER_PROTOCOL_TYPE,
            "leader_assigns": bool(group.protocol) and group.leader_assigns,
            "leader": group.leader,
            "members": [
                {
                    "member_id": m.member_id,
                    "instance_id": m.instance_id,
                    "client_id": m.client_id,
                    "topics": list(m.subscription.topics),
                    "assignment": list(m.assignment),
                    "metadata": m.metadata.get(group.protocol, b""),
                    "assigned": m.assigned,
                }
                for m in group.members.values()
            ],
        }

    def describe_consumer_group(self, group_id: str) -> ConsumerGroup:
        """A consumer group of Kafka's consumer protocol (KIP-848).

        Raises:
            GroupIdNotFoundError: there is none (a classic group is not one).
        """
        group = self.consumer.describe(group_id)
        if group is None:
            raise GroupIdNotFoundError(f"no consumer group {group_id!r}")
        return group

    def delete(self, group_id: str) -> list[tuple[bytes, bytes | None]]:
        """Forget a group with no active members: tombstones for it and its offsets.

        Raises:
            GroupIdNotFoundError, NonEmptyGroupError.
        """
        consumer_group = self.consumer.describe(group_id)
        if consumer_group is not None:
            if consumer_group.members:
                raise NonEmptyGroupError(f"group {group_id!r} has {len(consumer_group.members)} active member(s)")
            self.consumer.delete(group_id)
            records = [(group_key(group_id), None)]
            if group_id not in self.groups:
                return records
        else:
            records = []
        group = self._group(group_id, GroupIdNotFoundError)
        if group.members:
            raise NonEmptyGroupError(f"group {group_id!r} has {len(group.members)} active member(s)")
        records += [offset_record(group_id, tp, None, 0) for tp in group.offsets]
        records.append((msgpack.packb([_GROUP_KEY, group_id]), None))
        group.state = DEAD
        del self.groups[group_id]
        return records

    def delete_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition]
    ) -> tuple[list[tuple[bytes, bytes | None]], dict[TopicPartition, ApiError | None]]:
        """Forget the group's committed offsets of ``partitions`` (Kafka's OffsetDelete):
        tombstones for those it had, and per partition None or why it was kept:
        GroupSubscribedToTopicError where a member subscribes to its topic.

        Raises:
            GroupIdNotFoundError.
        """
        group = self._group(group_id, GroupIdNotFoundError)
        subscribed = {topic for m in group.members.values() for topic in m.subscription.topics}
        records, results = [], {}
        for tp in map(TopicPartition._make, partitions):
            if tp.topic in subscribed:
                results[tp] = GroupSubscribedToTopicError(f"a member of group {group_id!r} reads topic {tp.topic!r}")
                continue
            if group.offsets.pop(tp, None) is not None:
                records.append(offset_record(group_id, tp, None, 0))
            results[tp] = None
        return records, results

    # --- internals ----------------------------------------------------------------------

    def _group(self, group_id: str, missing: type = UnknownMemberIdError) -> Group:
        check_group_id(group_id)
        group = self.groups.get(group_id)
        if group is None:
            raise missing(f"no group {group_id!r}")
        return group

    def _member(self, group: Group, member_id: str, instance_id: str | None) -> Member:
        static = group.static_member(instance_id)
        if static is not None and static.member_id != member_id:
            raise FencedInstanceIdError(f"group.instance.id {instance_id!r} belongs to a newer member now")
        member = group.members.get(member_id)
        if member is None:
            raise UnknownMemberIdError(f"member {member_id!r} is not in group {group.group_id!r}")
        return member

    def _current_member(
        self, group_id: str, member_id: str, generation: int, instance_id: str | None, now_ms: int | None
    ) -> Member:
        group = self._group(group_id)
        member = self._member(group, member_id, instance_id)
        if now_ms is not None:
            member.last_heartbeat_ms = now_ms
        # Where the leader member assigns, members told their generation sync and heartbeat
        # it while the group waits for the leader's assignment (CompletingRebalance).
        if group.state == PREPARING_REBALANCE or (group.state == COMPLETING_REBALANCE and member.reply_held):
            raise RebalanceInProgressError(f"group {group_id!r} is rebalancing: rejoin")
        if generation != group.generation:
            raise IllegalGenerationError(f"generation {generation} of group {group_id!r} is over")
        return member

    def _prepare_rebalance(self, group: Group, now_ms: int, reason: str) -> Outcome:
        """Start a rebalance (its join phase); syncs waiting for a leader's assignment are
        told REBALANCE_IN_PROGRESS. An empty group's first one waits
        ``initial_rebalance_delay_ms`` for more members (Kafka's InitialDelayedJoin), so that
        consumers starting together land in one generation rather than one rebalance each."""
        if group.state == EMPTY and self.initial_rebalance_delay_ms > 0:
            group.initial_join_until_ms = now_ms + self.initial_rebalance_delay_ms
        logger.info(
            "group %s: rebalance in state %s, generation %d, %d member(s): %s",
            group.group_id,
            group.state,
            group.generation,
            len(group.members),
            reason,
        )
        group.state = PREPARING_REBALANCE
        group.awaiting_assignment = False
        group.rebalance_deadline_ms = now_ms + max(m.rebalance_timeout_ms for m in group.members.values())
        group.initial_join_until_ms = min(group.initial_join_until_ms, group.rebalance_deadline_ms)
        return Outcome(replies=_release_syncs(group.members.values(), RebalanceInProgressError(reason)))

    def _remove(self, group: Group, members: list[Member], now_ms: int, reason: Exception) -> Outcome:
        outcome = Outcome()
        for member in members:
            del group.members[member.member_id]
            if member.join_waiter is not None:
                outcome.replies.append((member.join_waiter, _join_error(reason)))
        outcome.replies.extend(_release_syncs(members, reason))
        removed = f"member(s) {[m.member_id for m in members]} removed: {reason}"
        if not group.members:
            group.state, group.leader, group.protocol = EMPTY, "", ""
            group.initial_join_until_ms, group.awaiting_assignment = 0, False
            group.generation += 1  # any straggler's commits are fenced
            logger.info("group %s: empty in generation %d, %s", group.group_id, group.generation, removed)
            self._record(group, outcome)
            return outcome
        if group.state != PREPARING_REBALANCE:
            outcome.extend(self._prepare_rebalance(group, now_ms, removed))
        else:
            logger.info("group %s: %s", group.group_id, removed)
        outcome.extend(self._maybe_complete_join(group, now_ms))
        return outcome

    def _maybe_complete_join(self, group: Group, now_ms: int, deadline_passed: bool = False) -> Outcome:
        """Finish the join phase once every member has rejoined (or the deadline passed:
        then without the members that did not), and an empty group's initial delay is over."""
        if group.state != PREPARING_REBALANCE:
            return Outcome()
        if group.initial_join_until_ms:
            if now_ms < group.initial_join_until_ms and not deadline_passed:
                return Outcome()
            group.initial_join_until_ms = 0
        missing = [m for m in group.members.values() if m.join_waiter is None]
        if missing and not deadline_passed:
            return Outcome()
        for member in missing:
            del group.members[member.member_id]
        if missing:
            logger.info(
                "group %s: member(s) %s did not rejoin before the rebalance deadline: removed",
                group.group_id,
                [m.member_id for m in missing],
            )
        if not group.members:
            group.state, group.leader, group.protocol, group.awaiting_assignment = EMPTY, "", "", False
            group.generation += 1
            logger.info("group %s: empty in generation %d", group.group_id, group.generation)
            return self._record(group, Outcome())
        subscriptions = {m.member_id: m.subscription for m in group.members.values()}
        group.protocol = choose_strategy(subscriptions)  # join() admitted only members that agree
        group.protocol_type = next(iter(group.members.values())).protocol_type
        if group.leader_assigns:
            group.awaiting_assignment = True
            group.sync_deadline_ms = now_ms + max(m.rebalance_timeout_ms for m in group.members.values())
            for member in group.members.values():
                member.assignment, member.assigned = [], b""
        else:
            self._assign(group, subscriptions)
        group.generation += 1
        group.state = COMPLETING_REBALANCE
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        outcome = Outcome()
        for member in group.members.values():
            outcome.held.append((member.join_waiter, self._join_reply(group, member)))
            member.join_waiter, member.reply_held = None, True
        logger.info(
            "group %s: generation %d with %d member(s) %s, %s %s, leader %s",
            group.group_id,
            group.generation,
            len(group.members),
            sorted(group.members),
            "protocol assigned by the leader" if group.leader_assigns else "assignor",
            group.protocol,
            group.leader,
        )
        return self._record(group, outcome)

    def _assign(self, group: Group, subscriptions: dict[str, Subscription]) -> None:
        """Run the group's assignor (the consumer protocol, assigned here)."""
        protocol = group.protocol
        target = assign(protocol, subscriptions, _partition_counts(group))
        if protocol in COOPERATIVE:
            # A partition still owned by another member waits for the follow-up rebalance,
            # and so does one that two members claim (neither may keep it).
            claims, contested = current_claims(subscriptions)
            if contested:
                logger.warning(
                    "group %s: %s claimed by two members in one generation; none of them keeps them",
                    group.group_id,
                    sorted(contested),
                )
            owners = {tp: m for m, tps in claims.items() for tp in tps}
            target = {
                m: [tp for tp in tps if owners.get(tp, m) == m and tp not in contested] for m, tps in target.items()
            }
        for member in group.members.values():
            member.assignment = target[member.member_id]

    def _join_reply(self, group: Group, member: Member, skip_assignment: bool = False) -> JoinGroupResponse:
        leads = member.member_id == group.leader
        members = tuple(
            JoinedMember(m.member_id, m.instance_id, m.metadata.get(group.protocol, b""))
            for m in group.members.values()
        )
        return JoinGroupResponse(
            generation=group.generation,
            member_id=member.member_id,
            leader_id=group.leader,
            protocol=group.protocol,
            members=members if leads else (),
            leader_assigns=group.leader_assigns,
            skip_assignment=skip_assignment and leads,
        )

    def _record(self, group: Group, outcome: Outcome) -> Outcome:
        """Add the group's record (its generation, members and assignment) to ``outcome``."""
        outcome.records.append(self._group_record(group))
        outcome.generations[group.group_id] = group.generation
        return outcome

    def _group_record(self, group: Group) -> tuple[bytes, bytes]:
        value = {
            "generation": group.generation,
            "protocol": group.protocol,
            "protocol_type": group.protocol_type,
            "leader": group.leader,
            "awaiting_assignment": group.awaiting_assignment,
            "members": [
                [
                    m.member_id,
                    m.instance_id,
                    m.client_id,
                    m.session_timeout_ms,
                    m.rebalance_timeout_ms,
                    list(m.subscription.topics),
                    list(m.subscription.strategies),
                    m.partition_counts,
                    [list(tp) for tp in m.assignment],
                    m.protocol_type,
                    m.metadata.get(group.protocol, b""),
                    m.assigned,
                ]
                for m in group.members.values()
            ],
        }
        return msgpack.packb([_GROUP_KEY, group.group_id]), msgpack.packb(value)


def _check_strategies(group: Group, protocol_type: str, strategies: Iterable[str], replacing: str | None) -> None:
    """Refuse a joining member of another protocol type than the group's, or that shares no
    protocol with the rest of the group (Kafka's supportsProtocols): only it is refused,
    rather than the whole group failing when the join completes."""
    common = set(strategies)
    for member in group.members.values():
        if member.member_id == replacing:
            continue
        if member.protocol_type != protocol_type:
            raise InconsistentGroupProtocolError(
                f"group {group.group_id!r} has members of protocol type {member.protocol_type!r}, not {protocol_type!r}"
            )
        common &= set(member.subscription.strategies)
    if not common:
        raise InconsistentGroupProtocolError(
            f"the members of group {group.group_id!r} support none of the assignors {list(strategies)}"
        )


def _partition_counts(group: Group) -> dict[str, int]:
    """Topic -> partition count the group is assigned by: the largest any member saw when it
    joined (members with older metadata do not hide partitions)."""
    counts: dict[str, int] = {}
    for member in group.members.values():
        for topic, n in member.partition_counts.items():
            counts[topic] = max(n, counts.get(topic, 0))
    return counts


def _metadata(request: JoinGroupRequest) -> dict[str, bytes]:
    """Protocol name -> the member's metadata for it (none for a raylog member)."""
    return dict(zip(request.strategies, request.metadata, strict=True)) if request.metadata else {}


def _sync_reply(group: Group, member: Member) -> SyncGroupResponse:
    if group.leader_assigns:
        return SyncGroupResponse(assigned=member.assigned)
    return SyncGroupResponse(assignment=tuple(member.assignment))


def _held_error(held: Any, error: ApiError) -> JoinGroupResponse | SyncGroupResponse | GroupResponse:
    """``error`` in place of a held reply, of the reply's kind."""
    if isinstance(held, GroupResponse):
        return GroupResponse(**error_fields(error))
    return SyncGroupResponse(**error_fields(error)) if isinstance(held, SyncGroupResponse) else _join_error(error)


def _release_syncs(members: Iterable[Member], error: Exception) -> list[tuple[Any, SyncGroupResponse]]:
    """``error`` for the syncs of ``members`` that wait for a leader's assignment."""
    released = []
    for member in members:
        if member.sync_waiter is not None:
            released.append((member.sync_waiter, SyncGroupResponse(**error_fields(error))))
            member.sync_waiter = None
    return released


def _append_error(exc: Exception) -> ApiError:
    """What members are told when a group record could not be appended (Kafka's mapping in
    its group metadata manager): NOT_COORDINATOR when this replica stopped leading or its
    disk failed, COORDINATOR_NOT_AVAILABLE otherwise (too few replicas, a timeout)."""
    if isinstance(exc, NotLeaderOrFollowerError | StorageError):
        return NotCoordinatorError(f"the group record could not be written here: {exc}")
    return CoordinatorNotAvailableError(f"the group record could not be replicated: {exc}")


def _join_error(exc: Exception) -> JoinGroupResponse:
    return JoinGroupResponse(**error_fields(exc))
