"""The group coordinator: a replica of a ``__consumer_offsets`` partition that, while it
leads, also serves the consumer groups that hash to its partition (Kafka's design; the
loading, the acks=all appends and the hand-over are :mod:`raylog.actors.coordinator`'s).

A completed join is answered only once its group record is replicated, so the next leader
never loads a generation below one a member was told (Kafka persists the group before
answering SyncGroup).

Heartbeats are long polls: a heartbeat waits up to ``wait_ms`` and answers early when its
group starts rebalancing, so members hear of a rebalance at once rather than at their next
heartbeat interval.

Offsets committed in a transaction (:meth:`GroupCoordinatorActor.txn_commit_offsets`, Kafka's
TxnOffsetCommit) are appended as a transactional batch of their producer and held aside
until the transaction coordinator's marker for that producer reaches this partition: a
commit marker makes them the group's, an abort marker drops them. Meanwhile a fetch of
those partitions' offsets gets the retriable UNSTABLE_OFFSET_COMMIT (KIP-447), so a new
consumer never starts from offsets a transaction is about to move.

Offsets follow the log: no call applies its own record when it wakes from its wait for the
ISR. Every step first replays the partition up to the high watermark into the groups
(:meth:`GroupCoordinatorActor._catch_up`, a :class:`~raylog.coordination.replay.LogReplay`):
offset commits, transactional offsets and markers take effect in log order, whichever call
wakes first, and a commit that timed out waiting but was replicated after all counts as the
next leader would count it.

Concurrency: as the replica's, each call on a thread of its own and every step under the
replica's lock, so each state-machine step runs alone; a join or a sync waits for its
reply on a future (set by whichever step completes the join, or brings and replicates the
leader member's assignment), a heartbeat on a condition that wakes when a group starts
rebalancing, a commit or a leader's assignment for the ISR. The calls that wait run in Ray
concurrency groups of their own (:data:`CONCURRENCY_GROUPS`), each a bounded pool of
threads, so that however many members wait, the calls that end their waits never queue
behind them: the replica's own calls (followers' fetches, markers, the controller's), and
leaves and offset fetches, run in the default pool (:data:`MAX_CONCURRENCY`). Beyond a
pool's bound a call waits in Ray's queue: a heartbeat for at most another's ``wait_ms``, a
commit for at most another's wait for the ISR, a join until the join it waits behind
completes (at the latest at its rebalance deadline, without the members still queued), a
sync until the leader's assignment or the sync deadline.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import threading
import time
import uuid
from typing import Any

import ray

from raylog.actors.coordinator import CoordinatorActor, now_ms
from raylog.actors.group_admin import GroupAdmin
from raylog.common import record_batch
from raylog.common.acl import ACLOperation as Op
from raylog.common.acl import ResourceType
from raylog.common.group_protocol import Heartbeat
from raylog.coordination import group_configs
from raylog.coordination.consumer_group import ConsumerGroupConfig
from raylog.coordination.group import PREPARING_REBALANCE, GroupCoordinator, Outcome
from raylog.coordination.replay import LogReplay
from raylog.errors import NotCoordinatorError, RaylogError
from raylog.protocol import GroupResponse, JoinGroupRequest, JoinGroupResponse, SyncGroupResponse, error_fields
from raylog.types import OffsetAndMetadata, TopicPartition

#: Calls a coordinator serves at once besides joins, heartbeats and commits (Ray's
#: ``max_concurrency``): the replica's calls (followers' long polls, markers waiting for the
#: ISR, the controller's) and syncs, leaves, offset fetches and admin calls, which never wait.
MAX_CONCURRENCY = 64
#: Members waiting in a join at once, on one coordinator (every group it serves).
JOIN_CONCURRENCY = 256
#: Long-polling heartbeats held at once.
HEARTBEAT_CONCURRENCY = 256
#: Syncs waiting for their leader member's assignment at once.
SYNC_CONCURRENCY = 256
#: Offset commits (plain or transactional), leaders' assignments and group deletions
#: waiting for the ISR at once.
COMMIT_CONCURRENCY = 64
#: Ray concurrency groups of the calls that wait (each a pool of its own; threads cost ~10 KiB
#: each and no CPU while they wait).
CONCURRENCY_GROUPS = {
    "joins": JOIN_CONCURRENCY,
    "syncs": SYNC_CONCURRENCY,
    "heartbeats": HEARTBEAT_CONCURRENCY,
    "commits": COMMIT_CONCURRENCY,
}
#: Bytes read per step when the groups catch up with the high watermark.
REPLAY_READ_BYTES = 1 << 20

logger = logging.getLogger(__name__)
GROUP = ResourceType.GROUP


class GroupCoordinatorActor(GroupAdmin, CoordinatorActor):
    """See the module docstring."""

    MAX_CONCURRENCY = MAX_CONCURRENCY
    #: The replica's own groups (its methods name them), and these.
    CONCURRENCY_GROUPS = {**CoordinatorActor.CONCURRENCY_GROUPS, **CONCURRENCY_GROUPS}

    def __init__(
        self,
        *args: Any,
        initial_rebalance_delay_ms: int = 0,
        consumer_groups: ConsumerGroupConfig | None = None,
        **kwargs: Any,
    ):
        self._initial_rebalance_delay_ms = initial_rebalance_delay_ms  # group.initial.rebalance.delay.ms
        self._consumer_groups = consumer_groups  # group.consumer.* (KIP-848)
        #: The controller's dynamic group configs and their version (:meth:`update_group_configs`).
        self._group_configs: tuple[int, dict[str, dict[str, str]]] = (0, {})
        #: Joins and syncs waiting for their reply -> the kind of reply they wait for.
        self._awaiting_reply: dict[concurrent.futures.Future, type] = {}
        self._rebalancing: set[str] = set()  # groups in PreparingRebalance at the last _deliver
        self._replay: LogReplay | None = None  # brings the loaded groups up to the HW
        super().__init__(*args, **kwargs)

    # --- the state ----------------------------------------------------------------------

    def _new_state(self) -> GroupCoordinator:
        state = GroupCoordinator(self._initial_rebalance_delay_ms, self._consumer_groups)
        self._apply_group_configs(state)  # the members it loads get their group's session timeout
        return state

    def _load_batch(self, state: GroupCoordinator, header: record_batch.BatchHeader, records: list) -> None:
        state.apply_batch(header, records, now_ms())

    def _loaded(self, state: GroupCoordinator) -> None:
        self._apply_group_configs(state)  # (configs pushed while it loaded)
        state.serve()
        self._replay = LogReplay(functools.partial(self._load_batch, state), state.next_offset)
        self._catch_up()

    def _tick(self, state: GroupCoordinator) -> None:
        self._catch_up_or_later()
        self._deliver(state.tick(now_ms()))

    def _describe_state(self, state: GroupCoordinator) -> str:
        return f"{len(state.groups)} group(s)"

    def _unloaded(self) -> None:
        """Answer every waiting join and sync."""
        moved = error_fields(NotCoordinatorError("the coordinator moved"))
        for future, kind in self._awaiting_reply.items():
            if not future.done():
                future.set_result(kind(**moved))
        self._awaiting_reply.clear()
        self._replay = None
        self._pulse()

    @ray.method(concurrency_group="control")
    def update_group_configs(self, version: int, configs: dict[str, dict[str, str]]) -> None:
        """The controller's dynamic group configs of ``version`` (Kafka 4's GROUP config
        resources; an older push is ignored): each group's members of the consumer protocol
        get its settings from their next heartbeat on."""
        with self._lock:
            if version > self._group_configs[0]:
                self._group_configs = (version, configs)
                if self._groups is not None:
                    self._apply_group_configs(self._groups)

    def _apply_group_configs(self, state: GroupCoordinator) -> None:
        broker = state.consumer.config
        configs = self._group_configs[1]
        state.consumer.group_configs = {g: group_configs.effective(broker, c) for g, c in configs.items()}

    def _require_markers_accepted(self) -> None:
        if self.partition.is_leader:
            self._loaded_state()  # a marker must reach loaded groups: retry while they load

    def _marker_written(self, producer_id: int, producer_epoch: int, commit: bool, bumps_epoch: bool) -> None:
        self._catch_up_or_later()  # the marker is replicated: it decides the pending offsets, in log order

    @property
    def _groups(self) -> GroupCoordinator | None:
        return self._state

    def _coordinator(self) -> GroupCoordinator:
        """The loaded groups, caught up with the high watermark."""
        groups = self._loaded_state()
        self._catch_up()
        return groups

    def _catch_up(self) -> None:
        """Apply what the ISR has of the partition and the groups have not seen yet, in log
        order (holding ``_lock``)."""
        if self._replay is not None:
            self._replay.catch_up(self.partition.log, self.partition.high_watermark, REPLAY_READ_BYTES)

    def _catch_up_or_later(self) -> None:
        """:meth:`_catch_up` where no caller can be told it failed (the tick, a written
        marker): what is left is applied by the next step, which reports the error."""
        try:
            self._catch_up()
        except RaylogError as exc:
            logger.debug("%s: the groups did not catch up with the log now: %s", self.partition.name, exc)

    # --- membership ---------------------------------------------------------------------

    @ray.method(concurrency_group="joins")
    def join_group(self, request: JoinGroupRequest, session: str | None = None) -> JoinGroupResponse:
        """Join (or rejoin) a group; answers when the join completes. ``session``: the
        caller's token (every method here: READ on the group to be a member or commit,
        DESCRIBE to read it, DELETE to delete it; see :class:`~raylog.actors.access.Guard`)."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            try:
                self._guard.require(session, Op.READ, GROUP, request.group_id)
                outcome = self._coordinator().join(request, future, now_ms())
            except Exception as exc:  # noqa: BLE001 — every error travels back as a code
                return JoinGroupResponse(**error_fields(exc))
            self._awaiting_reply[future] = JoinGroupResponse
            self._deliver(outcome)
        return self._reply(future)

    @ray.method(concurrency_group="syncs")
    def sync_group(
        self, group_id: str, member_id: str, generation: int, instance_id: str | None, session: str | None = None
    ) -> SyncGroupResponse:
        """The member's assignment; where the group's leader member assigns, answered once
        the leader's assignment (:meth:`assign_group`) is replicated."""
        return self._sync(group_id, member_id, generation, instance_id, None, session)

    @ray.method(concurrency_group="commits")
    def assign_group(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        instance_id: str | None,
        assignments: dict[str, bytes],
        session: str | None = None,
    ) -> SyncGroupResponse:
        """The leader member's sync, with every member's assignment (Kafka's SyncGroup from
        the leader); answered, with its own, once they are replicated. It waits in another
        pool than the syncs it releases."""
        return self._sync(group_id, member_id, generation, instance_id, assignments, session)

    def _sync(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        instance_id: str | None,
        assignments: dict[str, bytes] | None,
        session: str | None,
    ) -> SyncGroupResponse:
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            try:
                self._guard.require(session, Op.READ, GROUP, group_id)
                outcome = self._coordinator().sync(
                    group_id, member_id, generation, instance_id, future, now_ms(), assignments
                )
            except Exception as exc:  # noqa: BLE001 — every error travels back as a code
                return SyncGroupResponse(**error_fields(exc))
            self._awaiting_reply[future] = SyncGroupResponse
            self._deliver(outcome)
        return self._reply(future)

    @ray.method(concurrency_group="heartbeats")
    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        instance_id: str | None,
        wait_ms: int = 0,
        topics: dict[str, int] | None = None,
        session: str | None = None,
    ) -> GroupResponse:
        """The member is alive; waits up to ``wait_ms`` (a long poll) unless its group
        starts rebalancing, which it reports at once. ``topics``: the cluster's topics and
        their partition counts, from a Kafka listener (a change to the group's starts a
        rebalance where raylog assigns: see ``GroupCoordinator.heartbeat``)."""
        deadline = time.monotonic() + wait_ms / 1000
        with self._lock:
            try:
                self._guard.require(session, Op.READ, GROUP, group_id)
                beat = self._coordinator().heartbeat(group_id, member_id, generation, instance_id, now_ms(), topics)
                self._deliver(beat)
                while True:  # (the groups may be reloaded while it waits: asked afresh)
                    self._coordinator().heartbeat(group_id, member_id, generation, instance_id, None)
                    if (remaining := deadline - time.monotonic()) <= 0:
                        break
                    self._group_changed.wait(remaining)
            except Exception as exc:  # noqa: BLE001
                return GroupResponse(**error_fields(exc))
        return GroupResponse()

    @ray.method(concurrency_group="commits")
    def consumer_heartbeat(
        self, request: Heartbeat, topics: dict[str, int], session: str | None = None
    ) -> GroupResponse:
        """A ConsumerGroupHeartbeat of Kafka's consumer protocol (KIP-848); ``topics``: the
        cluster's topics and their partition counts. Its value (a
        :class:`~raylog.common.group_protocol.HeartbeatAnswer`) comes once the group's
        record is replicated when the heartbeat changed the group, at once otherwise."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            try:
                self._guard.require(session, Op.READ, GROUP, request.group_id)
                outcome = self._coordinator().consumer_heartbeat(
                    request, topics, future, now_ms(), lambda: str(uuid.uuid4())
                )
            except Exception as exc:  # noqa: BLE001 — every error travels back as a code
                return GroupResponse(**error_fields(exc))
            self._awaiting_reply[future] = GroupResponse
            self._deliver(outcome)
        return self._reply(future)

    def describe_consumer_group(self, group_id: str, session: str | None = None) -> GroupResponse:
        """A consumer group of Kafka's consumer protocol as ConsumerGroupDescribe reports it
        (its :class:`~raylog.coordination.consumer_group.ConsumerGroup`; GROUP_ID_NOT_FOUND
        when there is none)."""
        return self._answer(lambda groups: groups.describe_consumer_group(group_id), (session, Op.DESCRIBE, group_id))

    def leave_group(
        self, group_id: str, member_id: str, instance_id: str | None, session: str | None = None
    ) -> GroupResponse:
        return self._step(lambda groups: groups.leave(group_id, member_id, instance_id, now_ms()), (session, group_id))

    # --- offsets --------------------------------------------------------------

    @ray.method(concurrency_group="commits")
    def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        instance_id: str | None,
        offsets: dict[TopicPartition, OffsetAndMetadata],
        after: Any = None,
        session: str | None = None,
    ) -> GroupResponse:
        """Commit once the ISR has the offsets (generation -1: from outside the group).

        ``after``: the caller's previous commit, still unanswered when it sent this one (an
        object reference, not its value): Ray starts this call only once that one answered,
        so one consumer's commits take effect in the order it made them (its value is not
        used)."""
        return self._commit_offsets(session, group_id, member_id, generation, instance_id, offsets)

    @ray.method(concurrency_group="commits")
    def txn_commit_offsets(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        instance_id: str | None,
        producer_id: int,
        producer_epoch: int,
        offsets: dict[TopicPartition, OffsetAndMetadata],
        session: str | None = None,
    ) -> GroupResponse:
        """Offsets committed in the producer's transaction: appended as its transactional
        batch (a fenced producer's is refused), held until its marker comes."""
        batch = {"producer_id": producer_id, "producer_epoch": producer_epoch, "transactional": True}
        return self._commit_offsets(session, group_id, member_id, generation, instance_id, offsets, **batch)

    def _commit_offsets(
        self, session: str | None, group_id: str, member_id: str, generation: int, instance_id: str | None,
        offsets: dict, **batch_fields,
    ) -> GroupResponse:  # fmt: skip
        """Append the commit (as the transactional batch of ``batch_fields`` if given) and
        answer once the ISR has it. Needs READ on the group and on each topic (Kafka's OffsetCommit)."""
        offsets = {TopicPartition(*tp): OffsetAndMetadata(*o) for tp, o in offsets.items()}
        with self._lock:
            try:
                access = self._guard.access(session)
                if access is not None:
                    access.require(Op.READ, GROUP, group_id)
                    for topic in sorted({tp.topic for tp in offsets}):
                        access.require(Op.READ, ResourceType.TOPIC, topic)
                records = self._coordinator().prepare_commit(
                    group_id, member_id, generation, instance_id, offsets, now_ms()
                )
                self._await_records(self._append_records(records, **batch_fields))
                self._catch_up()
            except Exception as exc:  # noqa: BLE001
                return GroupResponse(**error_fields(exc))
        return GroupResponse()

    def fetch_offsets(
        self,
        group_id: str,
        partitions: list[TopicPartition] | None = None,
        require_stable: bool = True,
        session: str | None = None,
    ) -> GroupResponse:
        """Committed offsets; ``require_stable`` False: the last committed ones even where a
        transaction is about to move them (Kafka's OffsetFetch without RequireStable)."""
        return self._answer(
            lambda groups: groups.committed(group_id, partitions, require_stable), (session, Op.DESCRIBE, group_id)
        )

    # --- plumbing -----------------------------------------------------------------------

    def _answer(self, question, needs: tuple[str | None, Op, str] | None = None) -> GroupResponse:
        """``question(groups)``'s answer as a response's value, or its error; ``needs``: the
        caller's session, the operation it needs on the group and the group's id."""
        with self._lock:
            try:
                if needs is not None:
                    self._guard.require(needs[0], needs[1], GROUP, needs[2])
                return GroupResponse(value=question(self._coordinator()))
            except Exception as exc:  # noqa: BLE001
                return GroupResponse(**error_fields(exc))

    def _step(self, step, member: tuple[str | None, str]) -> GroupResponse:
        """``step(groups)``'s outcome delivered; ``member``: the caller's session and the group
        it needs READ on."""
        with self._lock:
            try:
                self._guard.require(member[0], Op.READ, GROUP, member[1])
                outcome: Outcome = step(self._coordinator())
            except Exception as exc:  # noqa: BLE001
                return GroupResponse(**error_fields(exc))
            self._deliver(outcome)
        return GroupResponse()

    def _deliver(self, outcome: Outcome) -> None:
        """Release the replies that promise nothing, and append the group records now (in
        the order the steps were made) while a thread of their own waits for the ISR; the
        replies held for them go out once they are replicated. Holding ``_lock``."""
        for future, response in outcome.replies:
            if not future.done():
                future.set_result(response)
        if outcome.records:
            assert self._groups is not None, "records come from a step of the loaded groups"
            try:
                appended: int | Exception = self._append_records(outcome.records)
            except Exception as exc:  # noqa: BLE001 — the thread tells the members
                appended = exc
            self._start(self._persist, self._groups, outcome, appended)
        # A group that starts rebalancing (a join, a leave, an expired session) wakes the
        # long-polling heartbeats, so its members rejoin now rather than at their next beat.
        groups = self._groups.groups.values() if self._groups is not None else ()
        rebalancing = {g.group_id for g in groups if g.state == PREPARING_REBALANCE}
        if outcome.replies or outcome.records or rebalancing - self._rebalancing:
            self._pulse()
        self._rebalancing = rebalancing

    def _persist(self, groups: GroupCoordinator, outcome: Outcome, appended: int | Exception) -> None:
        """Wait until ``outcome``'s records (appended up to offset ``appended``, or failed with
        it) are replicated, then release its held replies, or tell their members the append
        failed."""
        with self._lock:
            try:
                self._await_records(appended)
            except Exception as exc:  # noqa: BLE001 — every failure must release the held replies
                logger.warning("%s: group records not replicated (%s); their members rejoin", self.partition.name, exc)
                after = groups.append_failed(outcome, exc, now_ms())
            else:
                after = groups.persisted(outcome, now_ms())
            if groups is self._groups:
                self._deliver(after)
            # Else the groups were unloaded meanwhile, which answered every waiting join.

    def _reply(self, future: concurrent.futures.Future) -> Any:
        """The reply a waiting join or sync gets: a step completes ``future``, or
        :meth:`_unloaded` does."""
        try:
            return future.result()
        finally:
            with self._lock:
                self._awaiting_reply.pop(future, None)

    @functools.cached_property
    def _group_changed(self) -> threading.Condition:
        """Wakes the long-polling heartbeats when a group starts rebalancing."""
        return threading.Condition(self._lock)

    def _pulse(self) -> None:
        self._group_changed.notify_all()
