"""The group coordinator: a replica of a ``__consumer_offsets`` partition that, while it
leads, also serves the consumer groups that hash to its partition (Kafka's design).

When it becomes leader it reads its partition back into a :class:`GroupCoordinator`
(requests meanwhile get COORDINATOR_LOAD_IN_PROGRESS, which clients retry); when it stops
leading it drops that state and answers NOT_COORDINATOR, so clients find the new leader
through metadata. Every commit and group change is appended to its own partition with
acks=all before it counts, so it survives this actor, its node and its disk: the next
leader, on any broker of the ISR, loads the same offsets. A completed join is answered
only once its group record is replicated, so the next leader never loads a generation
below one a member was told (Kafka persists the group before answering SyncGroup).

Heartbeats are long polls: a heartbeat waits up to ``wait_ms`` and answers early when its
group starts rebalancing, so members hear of a rebalance at once rather than at their next
heartbeat interval.

Concurrency: as the replica's, each call on a thread of its own and every step under the
replica's lock, so each state-machine step runs alone; a join waits for its reply on a
future (set by whichever step completes the join), a heartbeat on a condition that wakes
when a group starts rebalancing. Each member holds a heartbeat while it waits:
:data:`MAX_CONCURRENCY` bounds the members one coordinator serves without delaying their
heartbeats (beyond it, a heartbeat waits in Ray's queue for at most another's ``wait_ms``).
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import threading
import time
from typing import Any

from raylog.actors.replica import PartitionReplicaActor
from raylog.coordination.group import PREPARING_REBALANCE, GroupCoordinator, Outcome
from raylog.errors import CoordinatorLoadInProgressError, NotCoordinatorError, RaylogError
from raylog.protocol import GroupResponse, JoinGroupRequest, JoinGroupResponse, SyncGroupResponse, error_fields
from raylog.storage import record_batch
from raylog.types import OffsetAndMetadata, TopicPartition

#: How often sessions and rebalance deadlines are checked.
GROUP_TICK_INTERVAL_S = 0.1
#: Bytes read per step when loading groups after becoming leader.
LOAD_READ_BYTES = 8 << 20
#: Pause before loading the groups again after a failed read.
LOAD_RETRY_S = 1.0
#: How long a commit or group record may wait for the ISR.
APPEND_TIMEOUT_S = 30.0
#: Calls a coordinator serves at once: every member's heartbeat is a long poll held here.
MAX_CONCURRENCY = 256

logger = logging.getLogger(__name__)


class GroupCoordinatorActor(PartitionReplicaActor):
    """See the module docstring."""

    MAX_CONCURRENCY = MAX_CONCURRENCY

    def __init__(self, *args: Any, **kwargs: Any):
        # Set before the replica's __init__, which may already take the leader's role.
        self._groups: GroupCoordinator | None = None
        self._coordinator_epoch = -1  # the leader epoch the groups were loaded for
        self._coordinator_stop: threading.Event | None = None  # ends the load-and-tick thread
        self._joins: set[concurrent.futures.Future] = set()
        self._rebalancing: set[str] = set()  # groups in PreparingRebalance at the last _deliver
        super().__init__(*args, **kwargs)

    # --- leadership ---------------------------------------------------------------------

    def _take_role(self, role_moved: bool, leader_handle) -> None:
        super()._take_role(role_moved, leader_handle)
        p = self.partition
        if p.is_leader and self._coordinator_epoch != p.leader_epoch and not self._stopped.is_set():
            self._unload()
            self._coordinator_epoch = p.leader_epoch
            self._coordinator_stop = threading.Event()
            self._start(self._load_and_tick, p.leader_epoch, self._coordinator_stop)
        elif not p.is_leader and self._coordinator_epoch != -1:
            self._unload()

    def _unload(self) -> None:
        """Drop the groups (holding ``_lock``) and answer every waiting join."""
        if self._coordinator_stop is not None:
            self._coordinator_stop.set()
            self._coordinator_stop = None
        self._groups = None
        self._coordinator_epoch = -1
        for future in self._joins:
            if not future.done():
                future.set_result(JoinGroupResponse(**error_fields(NotCoordinatorError("the coordinator moved"))))
        self._joins.clear()
        self._pulse()

    def _load_and_tick(self, epoch: int, stop: threading.Event) -> None:
        """Load the groups for leader ``epoch``, then tick them, until ``stop`` is set (which
        :meth:`_unload` does under the lock: no step of a stopped thread follows)."""
        while True:
            try:
                groups = self._load(stop)
                break
            except RaylogError:  # e.g. a disk error: clients get LOAD_IN_PROGRESS meanwhile
                if stop.wait(LOAD_RETRY_S):
                    return
        with self._lock:
            if stop.is_set() or self.partition.leader_epoch != epoch or not self.partition.is_leader:
                return
            self._groups = groups
        while not stop.wait(GROUP_TICK_INTERVAL_S):
            with self._lock:
                if stop.is_set():
                    return
                self._deliver(groups.tick(_now_ms()))

    def _load(self, stop: threading.Event) -> GroupCoordinator:
        """Every group of this partition, read back from its log (a read at a time under the
        lock: heartbeats get in between the reads of a large partition)."""
        groups = GroupCoordinator()
        log = self.partition.log
        offset = log.log_start_offset
        while not stop.is_set():
            with self._lock:
                if offset >= log.log_end_offset:
                    break
                data = log.read(offset, LOAD_READ_BYTES)
            if not data:
                break
            table = record_batch.decode_table(data, min_offset=offset)
            if table.num_rows:
                keys, values = table.column("key").to_pylist(), table.column("value").to_pylist()
                groups.load(zip(keys, values, strict=True), _now_ms())
            offset = _next_offset(data)
        return groups

    def _coordinator(self) -> GroupCoordinator:
        if not self.partition.is_leader:
            raise NotCoordinatorError(f"{self.partition.name} is not the leader: find the coordinator again")
        if self._groups is None:
            raise CoordinatorLoadInProgressError(f"{self.partition.name} is still loading its groups")
        return self._groups

    # --- membership ---------------------------------------------------------------------

    def join_group(self, request: JoinGroupRequest) -> JoinGroupResponse:
        """Join (or rejoin) a group; answers when the join completes."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            try:
                outcome = self._coordinator().join(request, future, _now_ms())
            except Exception as exc:  # noqa: BLE001 — every error travels back as a code
                return JoinGroupResponse(**error_fields(exc))
            self._joins.add(future)
            self._deliver(outcome)
        try:
            return future.result()  # a step completes it, or _unload does
        finally:
            with self._lock:
                self._joins.discard(future)

    def sync_group(self, group_id: str, member_id: str, generation: int, instance_id: str | None) -> SyncGroupResponse:
        with self._lock:
            try:
                assignment = self._coordinator().sync(group_id, member_id, generation, instance_id, _now_ms())
            except Exception as exc:  # noqa: BLE001
                return SyncGroupResponse(**error_fields(exc))
        return SyncGroupResponse(assignment=tuple(assignment))

    def heartbeat(
        self, group_id: str, member_id: str, generation: int, instance_id: str | None, wait_ms: int = 0
    ) -> GroupResponse:
        """The member is alive; waits up to ``wait_ms`` (a long poll) unless its group
        starts rebalancing, which it reports at once."""
        deadline = time.monotonic() + wait_ms / 1000
        with self._lock:
            try:
                self._coordinator().heartbeat(group_id, member_id, generation, instance_id, _now_ms())
                while (remaining := deadline - time.monotonic()) > 0:
                    self._group_changed.wait(remaining)
                    self._coordinator().heartbeat(group_id, member_id, generation, instance_id, None)
            except Exception as exc:  # noqa: BLE001
                return GroupResponse(**error_fields(exc))
        return GroupResponse()

    def leave_group(self, group_id: str, member_id: str, instance_id: str | None) -> GroupResponse:
        return self._step(lambda groups: groups.leave(group_id, member_id, instance_id, _now_ms()))

    # --- offsets and admin --------------------------------------------------------------

    def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        instance_id: str | None,
        offsets: dict[TopicPartition, OffsetAndMetadata],
    ) -> GroupResponse:
        """Commit once the ISR has the offsets (generation -1: from outside the group)."""
        offsets = {TopicPartition(*tp): OffsetAndMetadata(*o) for tp, o in offsets.items()}
        with self._lock:
            try:
                groups = self._coordinator()
                records = groups.prepare_commit(group_id, member_id, generation, instance_id, offsets, _now_ms())
                self._await_records(self._append_records(records))
                groups.apply_commit(group_id, offsets)
            except Exception as exc:  # noqa: BLE001
                return GroupResponse(**error_fields(exc))
        return GroupResponse()

    def fetch_offsets(self, group_id: str, partitions: list[TopicPartition] | None = None) -> GroupResponse:
        return self._answer(lambda groups: groups.committed(group_id, partitions))

    def list_groups(self) -> GroupResponse:
        return self._answer(lambda groups: groups.list_groups())

    def describe_group(self, group_id: str) -> GroupResponse:
        return self._answer(lambda groups: groups.describe(group_id))

    def delete_group(self, group_id: str) -> GroupResponse:
        with self._lock:
            try:
                self._await_records(self._append_records(self._coordinator().delete(group_id)))
            except Exception as exc:  # noqa: BLE001
                return GroupResponse(**error_fields(exc))
        return GroupResponse()

    # --- plumbing -----------------------------------------------------------------------

    def _answer(self, question) -> GroupResponse:
        """``question(groups)``'s answer as a response's value, or its error."""
        with self._lock:
            try:
                return GroupResponse(value=question(self._coordinator()))
            except Exception as exc:  # noqa: BLE001
                return GroupResponse(**error_fields(exc))

    def _step(self, step) -> GroupResponse:
        with self._lock:
            try:
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
                after = groups.append_failed(outcome, exc, _now_ms())
            else:
                after = groups.persisted(outcome, _now_ms())
            if groups is self._groups:
                self._deliver(after)
            # Else the groups were unloaded meanwhile, which answered every waiting join.

    def _append_records(self, records: list[tuple[bytes, bytes | None]]) -> int:
        """Append keyed records with acks=all (holding ``_lock``); the offset the HW must
        reach for them to count (see :meth:`_await_records`).

        Raises:
            NotEnoughReplicasError, NotLeaderOrFollowerError, KafkaStorageError, ...
        """
        if not records:
            return -1
        keys, values = zip(*records, strict=True)
        info = self.partition.append_as_leader(record_batch.build(list(values), keys=list(keys)), acks=-1)
        self._notify()
        self._maybe_propose_isr()
        return info.last_offset + 1

    def _await_records(self, appended: int | Exception) -> None:
        """Wait (holding ``_lock``) until the HW reaches ``appended``, or raise the append's error.

        Raises:
            NotEnoughReplicasError, RequestTimedOutError, NotLeaderOrFollowerError, ...
        """
        if isinstance(appended, Exception):
            raise appended
        if appended >= 0:
            error = self._await_replication(appended, time.monotonic() + APPEND_TIMEOUT_S)
            if error is not None:
                raise error

    @functools.cached_property
    def _group_changed(self) -> threading.Condition:
        """Wakes the long-polling heartbeats when a group starts rebalancing."""
        return threading.Condition(self._lock)

    def _pulse(self) -> None:
        self._group_changed.notify_all()


def _next_offset(data) -> int:
    """The offset after the last batch of ``data``."""
    *_, (_, last) = record_batch.iter_headers(data)
    return last.next_offset


def _now_ms() -> int:
    return int(time.time() * 1000)
