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

The order of appends and answers is :class:`~raylog.coordination.group_core.GroupCore`'s (a
step core the seeded simulation runs too); this actor is its pump (:meth:`_run_groups`): it
appends what the core asks, waits for the ISR, steps the outcome, and answers the callers.

Concurrency: as the replica's, each call on a thread of its own and every step under the
replica's lock, so each step of the core runs alone. A join, a sync, a commit or a
ConsumerGroupHeartbeat waits for its reply on a future the core's Reply sets (its own
thread first waits for the appends its step made); a heartbeat waits on its future up to
``wait_ms`` and is answered early when its group starts rebalancing. Appends a tick makes
are awaited on a thread of their own. The calls that wait run in Ray concurrency groups of
their own (:data:`CONCURRENCY_GROUPS`), each a bounded pool of threads, so that however many
members wait, the calls that end their waits never queue behind them: the replica's own
calls (followers' fetches, markers, the controller's), and leaves and offset fetches, run in
the default pool (:data:`MAX_CONCURRENCY`). Beyond a pool's bound a call waits in Ray's
queue: a heartbeat for at most another's ``wait_ms``, a commit for at most another's wait for
the ISR, a join until the join it waits behind completes (at the latest at its rebalance
deadline, without the members still queued), a sync until the leader's assignment or the
sync deadline.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import uuid
from collections.abc import Callable
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
from raylog.coordination.group import GroupCoordinator
from raylog.coordination.group_core import (
    Append,
    Beat,
    BeatDue,
    Commit,
    ConsumerBeat,
    GroupCore,
    Join,
    Leave,
    Persisted,
    Reply,
    Sync,
    Tick,
    Unload,
)
from raylog.coordination.replay import LogReplay
from raylog.errors import RaylogError
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
        self._core: GroupCore | None = None  # the loaded groups' step core
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
        self._core = GroupCore(state)
        self._replay = LogReplay(functools.partial(self._load_batch, state), state.next_offset)
        self._catch_up()

    def _tick(self, state: GroupCoordinator) -> None:
        self._catch_up_or_later()
        core = self._core
        if core is not None:
            for append in self._run_groups(core, core.step(Tick(now_ms()))):
                self._start(self._persist, core, *append)

    def _describe_state(self, state: GroupCoordinator) -> str:
        return f"{len(state.groups)} group(s)"

    def _unloaded(self) -> None:
        """Answer every waiting call."""
        core, self._core, self._replay = self._core, None, None
        if core is not None:
            self._run_groups(core, core.step(Unload()))

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
        marker, a persisted append): what is left is applied by the next step, which reports
        the error."""
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
        return self._call(
            JoinGroupResponse,
            lambda: self._guard.require(session, Op.READ, GROUP, request.group_id),
            lambda future: Join(future, request, now_ms()),
        )

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
        return self._call(
            SyncGroupResponse,
            lambda: self._guard.require(session, Op.READ, GROUP, group_id),
            lambda future: Sync(future, group_id, member_id, generation, instance_id, now_ms(), assignments),
        )

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
        return self._call(
            GroupResponse,
            lambda: self._guard.require(session, Op.READ, GROUP, group_id),
            lambda future: Beat(future, group_id, member_id, generation, instance_id, now_ms(), wait_ms, topics),
            wait_ms,
        )

    @ray.method(concurrency_group="commits")
    def consumer_heartbeat(
        self, request: Heartbeat, topics: dict[str, int], session: str | None = None
    ) -> GroupResponse:
        """A ConsumerGroupHeartbeat of Kafka's consumer protocol (KIP-848); ``topics``: the
        cluster's topics and their partition counts. Its value (a
        :class:`~raylog.common.group_protocol.HeartbeatAnswer`) comes once the group's
        record is replicated when the heartbeat changed the group, at once otherwise."""
        return self._call(
            GroupResponse,
            lambda: self._guard.require(session, Op.READ, GROUP, request.group_id),
            lambda future: ConsumerBeat(future, request, topics, now_ms(), str(uuid.uuid4())),
        )

    def describe_consumer_group(self, group_id: str, session: str | None = None) -> GroupResponse:
        """A consumer group of Kafka's consumer protocol as ConsumerGroupDescribe reports it
        (its :class:`~raylog.coordination.consumer_group.ConsumerGroup`; GROUP_ID_NOT_FOUND
        when there is none)."""
        return self._answer(lambda groups: groups.describe_consumer_group(group_id), (session, Op.DESCRIBE, group_id))

    def leave_group(
        self, group_id: str, member_id: str, instance_id: str | None, session: str | None = None
    ) -> GroupResponse:
        return self._call(
            GroupResponse,
            lambda: self._guard.require(session, Op.READ, GROUP, group_id),
            lambda future: Leave(future, group_id, member_id, instance_id, now_ms()),
            inline=False,
        )

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
        return self._commit_offsets(session, group_id, member_id, generation, instance_id, offsets, None)

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
        producer = (producer_id, producer_epoch)
        return self._commit_offsets(session, group_id, member_id, generation, instance_id, offsets, producer)

    def _commit_offsets(
        self, session: str | None, group_id: str, member_id: str, generation: int, instance_id: str | None,
        offsets: dict, producer: tuple[int, int] | None,
    ) -> GroupResponse:  # fmt: skip
        """Append the commit (as ``producer``'s transactional batch if given) and answer once
        the ISR has it. Needs READ on the group and on each topic (Kafka's OffsetCommit)."""
        offsets = {TopicPartition(*tp): OffsetAndMetadata(*o) for tp, o in offsets.items()}

        def check() -> None:
            access = self._guard.access(session)
            if access is not None:
                access.require(Op.READ, GROUP, group_id)
                for topic in sorted({tp.topic for tp in offsets}):
                    access.require(Op.READ, ResourceType.TOPIC, topic)

        return self._call(
            GroupResponse,
            check,
            lambda future: Commit(future, group_id, member_id, generation, instance_id, offsets, now_ms(), producer),
        )

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

    # --- the pump -----------------------------------------------------------------------

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

    def _call(
        self,
        kind: type,
        check: Callable[[], None],
        event_of: Callable[[concurrent.futures.Future], Any],
        wait_ms: int | None = None,
        inline: bool = True,
    ) -> Any:
        """Step the core with the request ``event_of`` makes (once ``check`` allowed the
        caller), carry out the effects, and return its reply: a heartbeat's after at most
        ``wait_ms`` (then its wait is over). The appends the step made are awaited first,
        on this thread; ``inline`` False: on threads of their own (a call of the default pool,
        which the followers' fetches that replicate them need)."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            try:
                check()
                self._coordinator()
                core = self._core
                assert core is not None, "a loaded coordinator has its core"
                appends = self._run_groups(core, core.step(event_of(future)))
            except Exception as exc:  # noqa: BLE001 — every error travels back as a code
                return kind(**error_fields(exc))
        for append in appends:  # (this caller's reply waits for them, or comes after them)
            if inline:
                self._persist(core, *append)
            else:
                self._start(self._persist, core, *append)
        if wait_ms is not None and not future.done():
            try:
                return future.result(timeout=wait_ms / 1000)
            except concurrent.futures.TimeoutError:
                with self._lock:
                    if core is self._core:
                        self._run_groups(core, core.step(BeatDue(future)))
        return future.result()  # (unloading the core answers every call waiting on it)

    def _run_groups(self, core: GroupCore, effects: list) -> list[tuple[int, int | Exception]]:
        """Do what ``core`` asks, in order (holding ``_lock``): answer the callers, append the
        records (in the order the steps made them). Returns each append's token and the
        offset the HW must reach (or the append's error), for :meth:`_persist`."""
        appends = []
        for effect in effects:
            if isinstance(effect, Reply):
                if not effect.waiter.done():
                    effect.waiter.set_result(effect.response)
            elif isinstance(effect, Append):
                try:
                    appended: int | Exception = self._append_records(effect.records, **effect.batch)
                except Exception as exc:  # noqa: BLE001 — the core tells the callers
                    appended = exc
                appends.append((effect.token, appended))
        return appends

    def _persist(self, core: GroupCore, token: int, appended: int | Exception) -> None:
        """Wait until the records of append ``token`` (appended up to offset ``appended``, or
        failed with it) are replicated, then step the core with it, and so on for the appends
        that step makes."""
        pending = [(token, appended)]
        with self._lock:
            while pending:
                token, appended = pending.pop(0)
                try:
                    self._await_records(appended)
                    error = None
                except Exception as exc:  # noqa: BLE001 — every failure must release the waiting calls
                    logger.warning("%s: group records not replicated (%s)", self.partition.name, exc)
                    error = exc
                if core is not self._core:
                    return  # the groups were unloaded meanwhile, which answered every waiting call
                self._catch_up_or_later()  # (offsets follow the log: a commit's own records first)
                pending += self._run_groups(core, core.step(Persisted(token, now_ms(), error)))
