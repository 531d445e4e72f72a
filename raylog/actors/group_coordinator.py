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

Concurrency: like the replica, one asyncio loop; each state-machine step runs alone.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from raylog.actors.replica import PartitionReplicaActor, wait_for_event
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

logger = logging.getLogger(__name__)


class GroupCoordinatorActor(PartitionReplicaActor):
    """See the module docstring."""

    def __init__(self, *args: Any, **kwargs: Any):
        # Set before the replica's __init__, which may already take the leader's role.
        self._groups: GroupCoordinator | None = None
        self._coordinator_epoch = -1  # the leader epoch the groups were loaded for
        self._coordinator_tasks: list[asyncio.Task] = []
        self._joins: set[asyncio.Future] = set()
        self._group_changed: asyncio.Event | None = None
        self._rebalancing: set[str] = set()  # groups in PreparingRebalance at the last _deliver
        super().__init__(*args, **kwargs)

    # --- leadership ---------------------------------------------------------------------

    def _take_role(self, role_moved: bool, leader_handle) -> None:
        super()._take_role(role_moved, leader_handle)
        p = self.partition
        if p.is_leader and self._coordinator_epoch != p.leader_epoch:
            self._unload()
            self._coordinator_epoch = p.leader_epoch
            self._coordinator_tasks = [self._spawn(self._load_and_tick(p.leader_epoch))]
        elif not p.is_leader and self._coordinator_epoch != -1:
            self._unload()

    def _unload(self) -> None:
        for task in self._coordinator_tasks:
            task.cancel()
        self._coordinator_tasks = []
        self._groups = None
        self._coordinator_epoch = -1
        for future in self._joins:
            if not future.done():
                future.set_result(JoinGroupResponse(**error_fields(NotCoordinatorError("the coordinator moved"))))
        self._joins.clear()
        self._pulse()

    async def _load_and_tick(self, epoch: int) -> None:
        while True:
            try:
                groups = await self._load()
                break
            except RaylogError:  # e.g. a disk error: clients get LOAD_IN_PROGRESS meanwhile
                await asyncio.sleep(LOAD_RETRY_S)
        if self.partition.leader_epoch != epoch or not self.partition.is_leader:
            return
        self._groups = groups
        while True:
            await asyncio.sleep(GROUP_TICK_INTERVAL_S)
            await self._deliver(groups.tick(_now_ms()))

    async def _load(self) -> GroupCoordinator:
        """Every group of this partition, read back from its log."""
        groups = GroupCoordinator()
        log = self.partition.log
        offset = log.log_start_offset
        while offset < log.log_end_offset:
            data = log.read(offset, LOAD_READ_BYTES)
            if not data:
                break
            table = record_batch.decode_table(data, min_offset=offset)
            if table.num_rows:
                keys, values = table.column("key").to_pylist(), table.column("value").to_pylist()
                groups.load(zip(keys, values, strict=True), _now_ms())
            offset = _next_offset(data)
            await asyncio.sleep(0)  # let heartbeats in between reads of a large partition
        return groups

    def _coordinator(self) -> GroupCoordinator:
        if not self.partition.is_leader:
            raise NotCoordinatorError(f"{self.partition.name} is not the leader: find the coordinator again")
        if self._groups is None:
            raise CoordinatorLoadInProgressError(f"{self.partition.name} is still loading its groups")
        return self._groups

    # --- membership ---------------------------------------------------------------------

    async def join_group(self, request: JoinGroupRequest) -> JoinGroupResponse:
        """Join (or rejoin) a group; answers when the join completes."""
        future = asyncio.get_running_loop().create_future()
        try:
            outcome = self._coordinator().join(request, future, _now_ms())
        except Exception as exc:  # noqa: BLE001 — every error travels back as a code
            return JoinGroupResponse(**error_fields(exc))
        self._joins.add(future)
        await self._deliver(outcome)
        try:
            return await future
        finally:
            self._joins.discard(future)

    async def sync_group(
        self, group_id: str, member_id: str, generation: int, instance_id: str | None
    ) -> SyncGroupResponse:
        try:
            assignment = self._coordinator().sync(group_id, member_id, generation, instance_id, _now_ms())
        except Exception as exc:  # noqa: BLE001
            return SyncGroupResponse(**error_fields(exc))
        return SyncGroupResponse(assignment=tuple(assignment))

    async def heartbeat(
        self, group_id: str, member_id: str, generation: int, instance_id: str | None, wait_ms: int = 0
    ) -> GroupResponse:
        """The member is alive; waits up to ``wait_ms`` (a long poll) unless its group
        starts rebalancing, which it reports at once."""
        deadline = time.monotonic() + wait_ms / 1000
        try:
            self._coordinator().heartbeat(group_id, member_id, generation, instance_id, _now_ms())
            while (remaining := deadline - time.monotonic()) > 0:
                changed = self._changed_event()
                await wait_for_event(changed, remaining)
                self._coordinator().heartbeat(group_id, member_id, generation, instance_id, None)
        except Exception as exc:  # noqa: BLE001
            return GroupResponse(**error_fields(exc))
        return GroupResponse()

    async def leave_group(self, group_id: str, member_id: str, instance_id: str | None) -> GroupResponse:
        return await self._step(lambda groups: groups.leave(group_id, member_id, instance_id, _now_ms()))

    # --- offsets and admin --------------------------------------------------------------

    async def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        instance_id: str | None,
        offsets: dict[TopicPartition, OffsetAndMetadata],
    ) -> GroupResponse:
        """Commit once the ISR has the offsets (generation -1: from outside the group)."""
        offsets = {TopicPartition(*tp): OffsetAndMetadata(*o) for tp, o in offsets.items()}
        try:
            groups = self._coordinator()
            records = groups.prepare_commit(group_id, member_id, generation, instance_id, offsets, _now_ms())
            await self._append(records)
            groups.apply_commit(group_id, offsets)
        except Exception as exc:  # noqa: BLE001
            return GroupResponse(**error_fields(exc))
        return GroupResponse()

    async def fetch_offsets(self, group_id: str, partitions: list[TopicPartition] | None = None) -> GroupResponse:
        try:
            return GroupResponse(value=self._coordinator().committed(group_id, partitions))
        except Exception as exc:  # noqa: BLE001
            return GroupResponse(**error_fields(exc))

    async def list_groups(self) -> GroupResponse:
        try:
            return GroupResponse(value=self._coordinator().list_groups())
        except Exception as exc:  # noqa: BLE001
            return GroupResponse(**error_fields(exc))

    async def describe_group(self, group_id: str) -> GroupResponse:
        try:
            return GroupResponse(value=self._coordinator().describe(group_id))
        except Exception as exc:  # noqa: BLE001
            return GroupResponse(**error_fields(exc))

    async def delete_group(self, group_id: str) -> GroupResponse:
        try:
            await self._append(self._coordinator().delete(group_id))
        except Exception as exc:  # noqa: BLE001
            return GroupResponse(**error_fields(exc))
        return GroupResponse()

    # --- plumbing -----------------------------------------------------------------------

    async def _step(self, step) -> GroupResponse:
        try:
            outcome: Outcome = step(self._coordinator())
        except Exception as exc:  # noqa: BLE001
            return GroupResponse(**error_fields(exc))
        await self._deliver(outcome)
        return GroupResponse()

    async def _deliver(self, outcome: Outcome) -> None:
        """Release the replies that promise nothing, and append the group records in the
        background; the replies held for them go out once they are replicated."""
        for future, response in outcome.replies:
            if not future.done():
                future.set_result(response)
        if outcome.records:
            assert self._groups is not None, "records come from a step of the loaded groups"
            self._spawn(self._persist(self._groups, outcome))
        # A group that starts rebalancing (a join, a leave, an expired session) wakes the
        # long-polling heartbeats, so its members rejoin now rather than at their next beat.
        groups = self._groups.groups.values() if self._groups is not None else ()
        rebalancing = {g.group_id for g in groups if g.state == PREPARING_REBALANCE}
        if outcome.replies or outcome.records or rebalancing - self._rebalancing:
            self._pulse()
        self._rebalancing = rebalancing

    async def _persist(self, groups: GroupCoordinator, outcome: Outcome) -> None:
        """Append ``outcome``'s records (acks=all), then release its held replies, or tell
        their members the append failed. Appends start in call order, so the log keeps the
        groups' changes in the order they were made."""
        try:
            await self._append(outcome.records)
        except Exception as exc:  # noqa: BLE001 — every failure must release the held replies
            logger.warning("%s: group records not replicated (%s); their members rejoin", self.partition.name, exc)
            after = groups.append_failed(outcome, exc, _now_ms())
        else:
            after = groups.persisted(outcome, _now_ms())
        if groups is self._groups:
            await self._deliver(after)
        # Else the groups were unloaded meanwhile, which answered every waiting join.

    async def _append(self, records: list[tuple[bytes, bytes | None]]) -> None:
        """Append keyed records with acks=all.

        Raises:
            NotEnoughReplicasError, RequestTimedOutError, NotLeaderOrFollowerError, ...
        """
        if not records:
            return
        keys, values = zip(*records, strict=True)
        info = self.partition.append_as_leader(record_batch.build(list(values), keys=list(keys)), acks=-1)
        self._notify()
        self._maybe_propose_isr()
        error = await self._await_replication(info.last_offset + 1, time.monotonic() + APPEND_TIMEOUT_S)
        if error is not None:
            raise error

    def _changed_event(self) -> asyncio.Event:
        if self._group_changed is None:
            self._group_changed = asyncio.Event()
        return self._group_changed

    def _pulse(self) -> None:
        if self._group_changed is not None:
            self._group_changed.set()
            self._group_changed = None


def _next_offset(data) -> int:
    """The offset after the last batch of ``data``."""
    *_, (_, last) = record_batch.iter_headers(data)
    return last.next_offset


def _now_ms() -> int:
    return int(time.time() * 1000)
