"""The tiered-storage work of one partition's leader as a state machine (Kafka's
RemoteLogManager: its RLMCopyTask, its RLMExpirationTask, and what a new leader does first,
KIP-405). No I/O: the core is told the partition's state and the answers to what it asked, and
returns what to do next as small frozen dataclasses, which a pump in the replica actor carries
out against RemoteStorageManager, HistoryWriter, the local Log and ``__remote_log_metadata``::

    tasks = RemoteLogTasks(topic, partition, broker_id)
    actions = tasks.become_leader(leader_epoch, now_ms)          # or become_follower()
    actions += tasks.tick(now_ms, local_segments, lso, log_start_offset, epochs, config)
    actions += tasks.on_metadata_event(event)                    # every record read back
    actions += tasks.on_action_done(action, ok, error)           # every action, once

The cache (:attr:`RemoteLogTasks.cache`) is built only from what the topic holds, the
leader's own events included, as Kafka's TopicBasedRemoteLogMetadataManager builds it: a step
that depends on an event waits until the event is read back. Each replica runs the core, the
followers to keep that cache (their readers use it) and for their local retention.

Protocol (the order is the promise; every event carries the leader epoch it was decided in):

- Leadership. ``become_leader`` publishes a
  :class:`~raylog.storage.remote_log_metadata.RemoteLogLeaderEpoch` and waits to read it back.
  From there on the topic refuses every event of an older epoch (a dead leader's write that
  lands late), so what the cache then holds of earlier leaders is final. Kafka has no such
  record and lives with the race.
- Clean-up, before anything else. Each COPY_SEGMENT_STARTED segment is a copy its leader never
  finished. Kafka deletes unfinished copies rather than resuming them, and so does this core:
  a resumed upload could not tell its objects from those a dying leader may still be
  writing. Each one is moved to DELETE_SEGMENT_STARTED, its objects are deleted, then
  DELETE_SEGMENT_FINISHED. Each DELETE_SEGMENT_STARTED segment is deleted again and finished.
  Then copying resumes above the cache's highest copied offset in this replica's lineage
  (``highest_copied_offset_in_lineage``); a segment copied already, by any leader, is never
  copied again. The history of the newest copied segment is written (a no-op if it is there)
  and orphaned objects are swept.
- Copy, one at a time: publish COPY_SEGMENT_STARTED (read back) -> :class:`CopySegment` ->
  publish COPY_SEGMENT_FINISHED (read back) -> :class:`WriteHistory` if the topic asks for
  history. Oldest segment first, closed and wholly below the last stable offset. A copy
  whose segment leaves the local log while it waits to upload again is given up (deleted as
  unfinished).
- Deletion, at most MAX_DELETIONS_IN_FLIGHT at a time: publish DELETE_SEGMENT_STARTED (read
  back) -> :class:`DeleteRemoteSegment` (its objects, and its history file) -> publish
  DELETE_SEGMENT_FINISHED (read back). Remote retention (retention.ms, retention.bytes with the
  local-only bytes counted once, the log start offset) picks the segments, oldest first. Each
  DELETE_SEGMENT_STARTED is published once the one before it is read back, so readable
  segments go from the bottom, never leaving a hole. It takes a segment only once the local
  log holds none of its offsets, unless the log start offset is past it. Otherwise local
  retention, which needs the copy, would stop at that segment for good.
- Local retention: :class:`DeleteLocalSegments` below the first segment local retention keeps.
  A segment goes only when finished copies hold all its offsets, and only up to the highest
  offset copied in this replica's lineage. A failed local deletion is planned afresh after
  the backoff.
- The log start offset: a running leader answers :meth:`RemoteLogTasks.log_start_offset`, which
  remote retention moves up. The pump makes it the partition's log start, and followers
  follow it, dropping their local copies of what retention deleted.
- Orphan sweep (:class:`CleanOrphans`), in the copy slot every ORPHAN_SWEEP_INTERVAL_MS. It
  removes the objects of segment ids the topic does not know, left by uploads that went on
  after their segment was deleted.
- Failures: a failed action is tried again after an exponential backoff, bounded by
  RETRY_BACKOFF_MAX_MS. It is never reported done. A failed COPY_SEGMENT_STARTED is not
  published again: the next try uses a new segment id, and the clean-up deletes the first one
  if it landed. Updates are published again as they were; a duplicate is refused or changes
  nothing.
- Stale answers. ``become_follower()``, a newer epoch, or a newer leader read in the topic
  drops every queued step. An answer to an action of an earlier role is ignored.

Invariants: a segment becomes readable (COPY_SEGMENT_FINISHED) only after its upload returned,
and its objects are deleted only after DELETE_SEGMENT_STARTED is read back. So no segment is
both readable and deleted. At most one copy-slot action (fence, copy, history or sweep) is
decided at a time. At most one action rewriting the history's manifest is out at a time
(WriteHistory, DeleteRemoteSegment with history). No offset range becomes readable twice.
Every offset from the log start to the log end stays in the local log or in a readable
segment: local copies go first, remote ones after.

Concurrency: not thread-safe; the owner serializes the calls (the replica's lock). The pump may
carry out the returned actions concurrently. It answers each one exactly once, with the very
object returned (answers are matched by identity), whether or not the role changed meanwhile.
"""

from __future__ import annotations

import collections
import enum
import itertools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields

from ..errors import FencedLeaderEpochError, InvalidRemoteLogSegmentStateError, RemoteResourceNotFoundError
from ..storage.remote_log_metadata import (
    RemoteLogEvent,
    RemoteLogLeaderEpoch,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    leader_epochs_in_range,
)
from ..storage.remote_log_metadata_cache import (
    LocalSegment,
    RemoteLogMetadataCache,
    TieredRetentionConfig,
    local_only_size_bytes,
    local_segments_to_delete,
    remote_segments_to_delete,
    segments_to_copy,
)

log = logging.getLogger(__name__)

_FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED

#: The first pause after a failure: long enough not to hammer a store that is down, short
#: enough that a blip costs a copy little.
RETRY_BACKOFF_MS = 500
#: Pauses double with each failure in a row up to this bound (Kafka's RLM tasks run every
#: remote.log.manager.task.interval.ms, 30 s): an outage of the store is noticed within a minute
#: of its end.
RETRY_BACKOFF_MAX_MS = 60_000
#: Remote deletions out at once. Retention after a long pause or a lowered limit deletes many
#: segments, a few requests each; a few in parallel make it short without flooding the store.
#: Kafka's RLMExpirationTask deletes one at a time.
MAX_DELETIONS_IN_FLIGHT = 4
#: How often the leader sweeps orphaned objects. Orphans come only from uploads that outlived
#: their leader: rare, and harmless but for their bytes.
ORPHAN_SWEEP_INTERVAL_MS = 60 * 60 * 1000
#: A sweep leaves objects younger than this (a former leader's upload may still be running),
#: as the history's orphans (raylog.storage.history.ORPHAN_MIN_AGE_MS).
ORPHAN_MIN_AGE_MS = 10 * 60 * 1000
#: The leader epoch of what a follower decides.
NO_LEADER_EPOCH = -1


def retry_backoff_ms(failures: int) -> int:
    """The pause after the ``failures``-th failure in a row (1, 2, ...)."""
    return min(RETRY_BACKOFF_MAX_MS, RETRY_BACKOFF_MS << min(max(failures, 1) - 1, 20))


# --- actions ------------------------------------------------------------------------------


@dataclass(frozen=True)
class PublishEvent:
    """Write ``event`` to ``__remote_log_metadata`` (``remote_log_metadata.encode``). Done when
    the write is acknowledged; the step after it waits until the event is read back."""

    event: RemoteLogEvent
    leader_epoch: int


@dataclass(frozen=True)
class CopySegment:
    """Upload the closed local segment at ``base_offset`` as ``metadata``'s objects:
    ``store.copy_log_segment_data(metadata, LogSegmentData.in_directory(dir, base_offset,
    next_offset))`` (``next_offset``: the next segment's base offset, its producer snapshot's
    name). A retry uploads the same id again (the manifest goes first, comes back last)."""

    metadata: RemoteLogSegmentMetadata
    base_offset: int
    next_offset: int
    leader_epoch: int


@dataclass(frozen=True)
class WriteHistory:
    """Write the copied segment's records as Parquet: ``history.write_segment(metadata,
    segment_table(...))`` (idempotent: a segment listed already is not written again)."""

    metadata: RemoteLogSegmentMetadata
    leader_epoch: int


@dataclass(frozen=True)
class DeleteRemoteSegment:
    """Delete the segment's objects (``store.delete_log_segment_data``) and, with ``history``,
    its history file (``history.delete_segment``); both may be repeated."""

    metadata: RemoteLogSegmentMetadata
    history: bool
    leader_epoch: int


@dataclass(frozen=True)
class DeleteLocalSegments:
    """Delete the local segments whose base offset is below ``up_to_base_offset`` (the first
    segment kept begins there); repeating it deletes nothing more."""

    up_to_base_offset: int
    leader_epoch: int


@dataclass(frozen=True)
class CleanOrphans:
    """Sweep orphans: ``store.clean_orphans(topic, partition, keep, now_ms - min_age_ms)`` and,
    with ``history``, ``history.clean_orphans(topic, partition, now_ms, min_age_ms)``."""

    keep: frozenset[RemoteLogSegmentId]
    now_ms: int
    min_age_ms: int
    history: bool
    leader_epoch: int


Action = PublishEvent | CopySegment | WriteHistory | DeleteRemoteSegment | DeleteLocalSegments | CleanOrphans


@dataclass(frozen=True)
class RemoteLogTasksConfig:
    """What a tiered topic asks of these tasks: its retention limits, and whether it keeps its
    history as Parquet (written after each copy, deleted with each remote segment)."""

    retention: TieredRetentionConfig = TieredRetentionConfig()
    write_history: bool = False


@dataclass(frozen=True)
class RemoteLogTaskMetrics:
    """Counters since the core was made, and the copy lag as of the last tick.

    The copy lag is what is still only local among the segments ready to copy (closed,
    wholly below the last stable offset, above the highest copied offset), in segments and
    bytes (Kafka's RemoteCopyLagSegments / RemoteCopyLagBytes)."""

    segments_copied: int = 0
    bytes_copied: int = 0
    copy_lag_segments: int = 0
    copy_lag_bytes: int = 0
    remote_segments_deleted: int = 0
    remote_bytes_deleted: int = 0
    copy_failures: int = 0
    deletion_failures: int = 0
    publish_failures: int = 0
    history_failures: int = 0
    local_deletion_failures: int = 0
    sweep_failures: int = 0
    events_refused: int = 0


class Phase(enum.Enum):
    """Where the core is in its role (:attr:`RemoteLogTasks.phase`)."""

    FOLLOWER = "follower"  # applies events; local retention only
    FENCING = "fencing"  # leader: its RemoteLogLeaderEpoch is not read back yet
    CLEANING = "cleaning"  # leader: finishing what earlier leaders left
    RUNNING = "running"  # leader: copying and expiring
    FENCED = "fenced"  # was leader: a newer leader is in the topic (local retention only)


# --- jobs ---------------------------------------------------------------------------------


class _Step(enum.Enum):
    FENCE = "fence"  # publish the RemoteLogLeaderEpoch, await it
    COPY_START = "copy_start"  # publish COPY_SEGMENT_STARTED, await it
    UPLOAD = "upload"
    COPY_FINISH = "copy_finish"  # publish COPY_SEGMENT_FINISHED, await it
    HISTORY = "history"
    SWEEP = "sweep"
    DELETE_START = "delete_start"  # publish DELETE_SEGMENT_STARTED, await it
    DELETE = "delete"
    DELETE_FINISH = "delete_finish"  # publish DELETE_SEGMENT_FINISHED, await it
    LOCAL = "local"


#: The state each publishing step announces.
_ANNOUNCES = {
    _Step.COPY_FINISH: RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
    _Step.DELETE_START: RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
    _Step.DELETE_FINISH: RemoteLogSegmentState.DELETE_SEGMENT_FINISHED,
}
#: The counter a failure of each action adds to.
_FAILURE_COUNTERS = {
    PublishEvent: "publish_failures",
    CopySegment: "copy_failures",
    WriteHistory: "history_failures",
    DeleteRemoteSegment: "deletion_failures",
    DeleteLocalSegments: "local_deletion_failures",
    CleanOrphans: "sweep_failures",
}


@dataclass(eq=False)
class _Job:
    """One piece of work in progress: its step, what it waits for."""

    step: _Step
    metadata: RemoteLogSegmentMetadata | None = None
    base_offset: int = -1  # CopySegment's
    next_offset: int = -1  # CopySegment's
    up_to_base_offset: int = -1  # DeleteLocalSegments'
    awaiting: RemoteLogEvent | None = None  # the event whose read-back moves it on
    published: bool = False  # ``awaiting`` was sent (its read-back is awaited)
    busy: bool = False  # its step's action is out
    retry_at_ms: int | None = None  # failed: its step is tried again from then on
    failures: int = 0  # in a row, at this step


@dataclass(frozen=True)
class _View:
    """The partition's state as of the last tick."""

    local: tuple[LocalSegment, ...]
    last_stable_offset: int
    log_start_offset: int
    epoch_entries: tuple[tuple[int, int], ...]
    highest_copied_offset: int  # in this replica's lineage; -1: none

    @classmethod
    def of(cls, local, last_stable_offset, log_start_offset, epoch_entries, cache) -> _View:
        local, entries = tuple(local), tuple(epoch_entries)
        log_end_offset = local[-1].last_offset + 1 if local else log_start_offset
        highest = cache.highest_copied_offset_in_lineage(entries, log_end_offset)
        return cls(local, last_stable_offset, log_start_offset, entries, highest)

    def to_copy(self) -> tuple[LocalSegment, ...]:
        """The segments ready to copy, oldest first (none wholly below the log start)."""
        ready = segments_to_copy(self.local, self.last_stable_offset, self.highest_copied_offset)
        return tuple(s for s in ready if s.last_offset >= self.log_start_offset)

    def holds(self, base_offset: int, last_offset: int) -> bool:
        """Whether the local log still has that segment (and the log start is not past it)."""
        found = any(s.base_offset == base_offset and s.last_offset == last_offset for s in self.local)
        return found and last_offset >= self.log_start_offset


class _Jobs:
    """The steps in progress of one role: the copy slot (the fence, a copy, a history write or
    a sweep), the local deletion, the remote deletions by segment id; the action out of each
    (by ``id(action)``, with the step it was sent in) and the events awaited. A new role starts
    a new book: what is still out of the old one is answered to nobody."""

    def __init__(self) -> None:
        self.slot: _Job | None = None
        self.local: _Job | None = None
        self.deletions: dict[RemoteLogSegmentId, _Job] = {}
        self.out: dict[int, tuple[Action, _Job, _Step]] = {}
        self.awaited: dict[RemoteLogEvent, _Job] = {}

    @property
    def idle(self) -> bool:
        return self.slot is None and self.local is None and not self.deletions and not self.out

    def all(self) -> list[_Job]:
        return [job for job in (self.slot, self.local, *self.deletions.values()) if job is not None]

    def owns(self, job: _Job) -> bool:
        if job.metadata is not None and self.deletions.get(job.metadata.segment_id) is job:
            return True
        return job is self.slot or job is self.local

    def finish(self, job: _Job) -> None:
        if job is self.slot:
            self.slot = None
        elif job is self.local:
            self.local = None
        elif job.metadata is not None and self.deletions.get(job.metadata.segment_id) is job:
            del self.deletions[job.metadata.segment_id]
        if job.awaiting is not None and self.awaited.get(job.awaiting) is job:
            del self.awaited[job.awaiting]

    def send(self, job: _Job, action: Action) -> Action:
        job.busy, job.retry_at_ms, job.published = True, None, isinstance(action, PublishEvent)
        self.out[id(action)] = (action, job, job.step)
        return action

    def answered(self, action: Action) -> _Job | None:
        """The job ``action`` was sent for, if it is still at that step; else None (ignore)."""
        entry = self.out.pop(id(action), None)
        if entry is None or entry[0] is not action:
            return None
        _, job, step = entry
        if job.step is not step or not self.owns(job):
            return None
        job.busy = False
        return job

    def give_up_a_copy_gone(self, view: _View) -> None:
        """A copy waiting to upload again whose segment left the local log (the log start
        moved past it) is given up: the clean-up deletes what it uploaded."""
        slot = self.slot
        if slot is not None and slot.step is _Step.UPLOAD and not slot.busy:
            if not view.holds(slot.base_offset, slot.metadata.end_offset):
                self.finish(slot)

    def rewriting_history(self) -> bool:
        """An action rewriting the history's manifest is out."""
        return any(rewrites_history(action) for action, _, _ in self.out.values())


# --- the core -----------------------------------------------------------------------------


class RemoteLogTasks:
    """See the module docstring. One per partition replica.

    Args:
        topic, partition: the partition.
        broker_id: this replica's broker (its events' ``broker_id``).
        new_segment_id: makes each copy's id (a random uuid; seeded in simulations).

    Example::

        tasks = RemoteLogTasks("clicks", 3, broker_id=1)
        for action in tasks.become_leader(7, now_ms):
            pump.start(action)  # answers come back through on_action_done
    """

    def __init__(
        self,
        topic: str,
        partition: int,
        broker_id: int,
        *,
        new_segment_id: Callable[[str, int], RemoteLogSegmentId] = RemoteLogSegmentId.generate,
    ):
        self.topic, self.partition, self.broker_id = topic, partition, broker_id
        self.cache = RemoteLogMetadataCache(topic, partition)
        self._new_segment_id = new_segment_id
        self.phase = Phase.FOLLOWER
        self.leader_epoch = NO_LEADER_EPOCH
        self._led_epoch = NO_LEADER_EPOCH  # the highest epoch this core ever led in
        self._fence: RemoteLogLeaderEpoch | None = None
        self._now_ms = 0
        self._config = RemoteLogTasksConfig()
        self._view: _View | None = None
        self._counts: collections.Counter[str] = collections.Counter()
        self._drop()

    def _drop(self) -> None:
        """Forget every step of the role (answers still out will be ignored)."""
        self._jobs = _Jobs()
        self._history_due = False  # after the clean-up: write the newest copy's history
        self._next_sweep_ms: int | None = None
        #: Steps planned afresh after a failure (COPY_START, LOCAL): failures in a row, and when.
        self._replan_failures: collections.Counter[_Step] = collections.Counter()
        self._replan_at_ms: dict[_Step, int] = {}

    # --- inputs -----------------------------------------------------------------------

    def become_leader(self, leader_epoch: int, now_ms: int) -> list[Action]:
        """Lead the partition in ``leader_epoch``: drop every step of the earlier role and
        announce the epoch. An epoch not above one this core led before is ignored."""
        if leader_epoch <= self._led_epoch:
            log.warning("%s: leader epoch %d is not above %d; ignored", self._name, leader_epoch, self._led_epoch)
            return []
        self._drop()
        self._now_ms = max(self._now_ms, now_ms)
        self.phase, self.leader_epoch, self._led_epoch = Phase.FENCING, leader_epoch, leader_epoch
        self._fence = RemoteLogLeaderEpoch(self.topic, self.partition, leader_epoch, self.broker_id, self._now_ms)
        self._jobs.slot = _Job(_Step.FENCE)
        self._enter(self._jobs.slot, _Step.FENCE)
        return self._next_actions()

    def become_follower(self) -> None:
        """Follow: drop every step of the leader (its answers will be ignored)."""
        self._drop()
        self.phase, self.leader_epoch = Phase.FOLLOWER, NO_LEADER_EPOCH

    def on_metadata_event(self, event: RemoteLogEvent) -> list[Action]:
        """Apply the partition's next event of ``__remote_log_metadata`` (in the topic's
        order, every replica, this leader's own events included). An event the cache refuses
        (an older epoch's, a duplicate, a move its segment's state does not allow) is counted
        and skipped, as every reader skips it.

        Raises:
            ValueError: the event is of another partition (the pump's mistake).
        """
        refused = self._apply(event)
        if self.phase not in (Phase.FENCING, Phase.CLEANING, Phase.RUNNING):
            return []
        if self.cache.leader_epoch > self.leader_epoch or self._another_leader_of_this_epoch(event):
            log.warning("%s: another leader is in the topic (%s); epoch %d stops", self._name, event, self.leader_epoch)
            self._drop()
            self.phase = Phase.FENCED
            return []
        job = self._jobs.awaited.pop(event, None)
        if job is not None and refused is not None:
            log.error("%s: own event %s refused: %s", self._name, event, refused)
            self._jobs.finish(job)
        elif job is not None:
            self._read_back(job)
        return self._next_actions()

    def on_action_done(self, action: Action, ok: bool, error: BaseException | None = None) -> list[Action]:
        """The answer to an action this core returned: done (``ok``) or failed with ``error``.
        An answer to an action of an earlier role, or of a step that moved on, is ignored."""
        job = self._jobs.answered(action)
        if job is None:
            return []
        if ok:
            self._succeeded(job)
        else:
            self._failed(job, action, error)
        return self._next_actions()

    def tick(
        self,
        now_ms: int,
        local_segments: Sequence[LocalSegment],
        last_stable_offset: int,
        log_start_offset: int,
        leader_epoch_entries: Sequence[tuple[int, int]],
        config: RemoteLogTasksConfig,
    ) -> list[Action]:
        """Plan with the partition's state: retries whose pause is over, the next copy, the
        retention on both tiers, the sweep.

        Args:
            now_ms: the time (events' timestamps, retention.ms, backoffs).
            local_segments: the local log's segments, oldest first, the active one last.
            last_stable_offset: the partition's LSO (no undecided transaction below it, all of
                it below the high watermark).
            log_start_offset: the partition's log start offset (moved by DeleteRecords).
            leader_epoch_entries: the local epoch history, ``(epoch, start offset)`` rising.
            config: the topic's retention and history settings.
        """
        self._now_ms = max(self._now_ms, now_ms)
        self._config = config
        view = _View.of(local_segments, last_stable_offset, log_start_offset, leader_epoch_entries, self.cache)
        self._view = view
        ready = view.to_copy()
        self._counts["copy_lag_segments"] = len(ready)
        self._counts["copy_lag_bytes"] = sum(s.size_bytes for s in ready)
        if self.phase in (Phase.FOLLOWER, Phase.FENCED, Phase.RUNNING):
            self._plan_local_retention(view)
        if self.phase is Phase.RUNNING:
            self._jobs.give_up_a_copy_gone(view)
            self._plan_remote_retention(view)
            self._plan_slot(view)
        return self._next_actions()

    # --- answers ----------------------------------------------------------------------

    def remote_log_start_offset(self) -> int | None:
        """The first offset the remote tier holds (the first readable segment's), or None."""
        return self.cache.remote_log_start_offset

    def log_start_offset(self, local_log_start_offset: int) -> int | None:
        """The log start offset the leader reports (Kafka's UnifiedLog.logStartOffset with
        tiered storage, moved by updateLogStartOffsetFromRemoteTier): the remote log's start
        while a readable segment is below the local log's start, the local log's otherwise.
        Remote retention moves it up; followers follow it and drop their local segments below
        it (their copies' remote segments are gone). None until the clean-up is over: a view
        of the topic not yet complete could put it past offsets still held."""
        if self.phase is not Phase.RUNNING:
            return None
        remote = self.cache.remote_log_start_offset
        return local_log_start_offset if remote is None else min(remote, local_log_start_offset)

    def metrics(self) -> RemoteLogTaskMetrics:
        """The counters as of now (a frozen snapshot)."""
        names = {f.name for f in fields(RemoteLogTaskMetrics)}
        return RemoteLogTaskMetrics(**{k: v for k, v in self._counts.items() if k in names})

    @property
    def idle(self) -> bool:
        """Nothing decided is waiting: no job, no answer out (a quiet leader, or a follower)."""
        return self._jobs.idle

    @property
    def has_work(self) -> bool:
        """Whether the next tick should come at once: a job is in progress, or a leader's copy
        slot is free with a history write due or, as of the last tick, a segment ready to copy
        and no backoff holding copies back (at worst one round too many: the last tick's copy
        lag may count a copy finished since). Otherwise the pump may pause: were it to pause
        whenever it is idle, each copy would wait out a pause, one segment per pause however
        fast the topic grows."""
        if not self._jobs.idle:
            return True
        if self.phase is not Phase.RUNNING:
            return False
        copy_due = self._counts["copy_lag_segments"] > 0 and self._now_ms >= self._replan_at_ms.get(_Step.COPY_START, 0)
        return copy_due or (self._history_due and self._config.write_history)

    # --- events -----------------------------------------------------------------------

    def _apply(self, event: RemoteLogEvent) -> Exception | None:
        try:
            self.cache.apply(event)
        except (FencedLeaderEpochError, InvalidRemoteLogSegmentStateError, RemoteResourceNotFoundError) as exc:
            self._counts["events_refused"] += 1
            log.debug("%s: event refused: %s", self._name, exc)
            return exc
        return None

    def _another_leader_of_this_epoch(self, event: RemoteLogEvent) -> bool:
        """Another leader announced this core's epoch: two leaders cannot fence each other, so
        neither may act (raylog's controller gives each leadership its own epoch)."""
        return (
            isinstance(event, RemoteLogLeaderEpoch) and event.leader_epoch == self.leader_epoch and event != self._fence
        )

    def _read_back(self, job: _Job) -> None:
        """``job``'s event is in the topic (and the cache): its next step."""
        job.retry_at_ms, job.failures = None, 0
        if job.step is _Step.FENCE:
            self._jobs.finish(job)
            self.phase = Phase.CLEANING
        elif job.step is _Step.COPY_START:
            self._enter(job, _Step.UPLOAD)
        elif job.step is _Step.COPY_FINISH:
            self._copied(job)
        elif job.step is _Step.DELETE_START:
            job.metadata = self.cache.segment(job.metadata.segment_id) or job.metadata
            self._enter(job, _Step.DELETE)
        elif job.step is _Step.DELETE_FINISH:
            self._counts["remote_segments_deleted"] += 1
            self._counts["remote_bytes_deleted"] += job.metadata.segment_size_bytes
            self._jobs.finish(job)

    def _copied(self, job: _Job) -> None:
        metadata = self.cache.segment(job.metadata.segment_id)
        self._counts["segments_copied"] += 1
        self._counts["bytes_copied"] += job.metadata.segment_size_bytes
        self._replan_failures[_Step.COPY_START] = 0
        if self._config.write_history and metadata is not None:
            job.metadata = metadata
            self._enter(job, _Step.HISTORY)
        else:
            self._jobs.finish(job)

    # --- answers to actions -----------------------------------------------------------

    def _succeeded(self, job: _Job) -> None:
        if job.step is _Step.UPLOAD:
            self._enter(job, _Step.COPY_FINISH)
        elif job.step is _Step.DELETE:
            self._enter(job, _Step.DELETE_FINISH)
        elif job.step is _Step.SWEEP:
            self._next_sweep_ms = self._now_ms + ORPHAN_SWEEP_INTERVAL_MS
            self._jobs.finish(job)
        elif job.step in (_Step.HISTORY, _Step.LOCAL):
            self._replan_failures[job.step] = 0
            self._jobs.finish(job)
        # A publish: its step goes on when the event is read back.

    def _failed(self, job: _Job, action: Action, error: BaseException | None) -> None:
        self._counts[_FAILURE_COUNTERS[type(action)]] += 1
        job.failures += 1
        level = logging.WARNING if job.failures == 1 else logging.DEBUG
        name = type(action).__name__
        log.log(level, "%s: %s failed (%d in a row): %r", self._name, name, job.failures, error)
        if job.step in (_Step.COPY_START, _Step.LOCAL):
            # Planned afresh after the backoff. A COPY_SEGMENT_STARTED is never published twice
            # (a late first one would bring a deleted id back): the next try takes a new id and
            # the clean-up deletes this one if it landed. A local deletion is decided again on
            # what the copies cover then.
            self._jobs.finish(job)
            self._replan_failures[job.step] += 1
            self._replan_at_ms[job.step] = self._now_ms + retry_backoff_ms(self._replan_failures[job.step])
        else:
            job.retry_at_ms = self._now_ms + retry_backoff_ms(job.failures)

    # --- planning (tick) --------------------------------------------------------------

    def _plan_local_retention(self, view: _View) -> None:
        if self._jobs.local is None and self._now_ms >= self._replan_at_ms.get(_Step.LOCAL, 0):
            finished = self.cache.segments(_FINISHED)
            end = local_retention_end(view, finished, self._config.retention, self._now_ms)
            self._jobs.local = None if end is None else _Job(_Step.LOCAL, up_to_base_offset=end)

    def _plan_remote_retention(self, view: _View) -> None:
        """Deletions for what remote retention takes, up to the bound in flight. Each starts
        once the one before it is read back: the readable segments lose their oldest first,
        never one above another that stays."""
        deletions, slot = self._jobs.deletions, self._jobs.slot
        if any(job.step is _Step.DELETE_START for job in deletions.values()):
            return
        finished = self.cache.segments(_FINISHED)
        writing = slot.metadata if slot and slot.step is _Step.HISTORY else None
        for metadata in remote_retention_plan(view, finished, self._config.retention, self._now_ms):
            if len(deletions) >= MAX_DELETIONS_IN_FLIGHT or metadata == writing:
                return  # (a prefix: nothing above a segment kept goes)
            if metadata.segment_id not in deletions:
                self._delete(metadata, _Step.DELETE_START)
                return

    def _plan_slot(self, view: _View) -> None:
        """The copy slot's next job: the newest copy's history, a sweep, or the next copy."""
        if self._jobs.slot is not None:
            return
        finished = self.cache.segments(_FINISHED)
        if self._history_due:
            self._history_due = False
            if self._config.write_history and finished:
                self._jobs.slot = _Job(_Step.HISTORY, metadata=finished[-1])
                return
        if self._next_sweep_ms is not None and self._now_ms >= self._next_sweep_ms:
            self._jobs.slot = _Job(_Step.SWEEP)
        elif self._now_ms >= self._replan_at_ms.get(_Step.COPY_START, 0):
            self._jobs.slot = self._plan_copy(view)

    def _plan_copy(self, view: _View) -> _Job | None:
        ready = view.to_copy()
        if not ready:
            return None
        try:
            sid = self._new_segment_id(self.topic, self.partition)
            job = _copy_job(view, ready[0], sid, self.broker_id, self._now_ms, self.leader_epoch)
        except ValueError as exc:  # the epoch history does not reach back to the segment
            self._counts["copy_failures"] += 1
            log.error("%s: cannot copy the segment at %d: %s", self._name, ready[0].base_offset, exc)
            self._replan_at_ms[_Step.COPY_START] = self._now_ms + RETRY_BACKOFF_MAX_MS
            return None
        self._enter(job, _Step.COPY_START)
        return job

    # --- carrying on ------------------------------------------------------------------

    def _next_actions(self) -> list[Action]:
        """What every job is ready to do now; the clean-up planned first."""
        if self.phase in (Phase.CLEANING, Phase.RUNNING):
            self._plan_clean_up()
        if self.phase is Phase.CLEANING and not self._jobs.deletions and not self._strays():
            self.phase = Phase.RUNNING
            self._history_due, self._next_sweep_ms = True, self._now_ms
        actions = []
        for job in self._jobs.all():
            if job.busy or (job.published and job.retry_at_ms is None):
                continue  # (published: its event is awaited)
            if job.retry_at_ms is not None and job.retry_at_ms > self._now_ms:
                continue
            action = self._action(job)
            if action is not None:
                actions.append(self._jobs.send(job, action))
        return actions

    def _action(self, job: _Job) -> Action | None:
        """The action of ``job``'s step, or None when it must wait (or is over)."""
        epoch = self.leader_epoch
        if job.awaiting is not None:
            return PublishEvent(job.awaiting, epoch)
        if job.step is _Step.UPLOAD:
            return CopySegment(job.metadata, job.base_offset, job.next_offset, epoch)
        writing_history = self._jobs.rewriting_history()
        if job.step is _Step.HISTORY:
            if (
                not self._config.write_history
                or getattr(self.cache.segment(job.metadata.segment_id), "state", None) != _FINISHED
            ):
                self._jobs.finish(job)  # turned off, or retention took the segment meanwhile
                return None
            return None if writing_history else WriteHistory(job.metadata, epoch)
        if job.step is _Step.DELETE:  # (the history setting as of now: a leftover may come before a tick)
            history = self._config.write_history
            return None if history and writing_history else DeleteRemoteSegment(job.metadata, history, epoch)
        if job.step is _Step.SWEEP:
            keep = frozenset(m.segment_id for m in self.cache.segments())
            return CleanOrphans(keep, self._now_ms, ORPHAN_MIN_AGE_MS, self._config.write_history, epoch)
        assert job.step is _Step.LOCAL, job.step
        return DeleteLocalSegments(job.up_to_base_offset, epoch)

    def _plan_clean_up(self) -> None:
        """Deletions for what no step of this leader owns: unfinished copies (an earlier
        leader's, or a COPY_SEGMENT_STARTED of this one that landed after it gave up on it)
        and deletions in progress; up to the bound in flight, the rest later."""
        slot, deletions = self._jobs.slot, self._jobs.deletions
        copying = slot.metadata.segment_id if slot is not None and slot.metadata else None
        for metadata in self._strays():
            if len(deletions) >= MAX_DELETIONS_IN_FLIGHT:
                return
            if metadata.segment_id != copying and metadata.segment_id not in deletions:
                started = metadata.state == RemoteLogSegmentState.COPY_SEGMENT_STARTED
                self._delete(metadata, _Step.DELETE_START if started else _Step.DELETE)

    def _strays(self) -> tuple[RemoteLogSegmentMetadata, ...]:
        return self.cache.unfinished_copies() + self.cache.deletions_in_progress()

    # --- jobs -------------------------------------------------------------------------

    def _delete(self, metadata: RemoteLogSegmentMetadata, step: _Step) -> None:
        job = _Job(step, metadata=metadata)
        self._jobs.deletions[metadata.segment_id] = job
        self._enter(job, step)

    def _enter(self, job: _Job, step: _Step) -> None:
        """Move ``job`` to ``step``; a publishing step makes its event and awaits it."""
        job.step, job.busy, job.published, job.retry_at_ms = step, False, False, None
        if step is _Step.FENCE:
            job.awaiting = self._fence
        elif step is _Step.COPY_START:
            job.awaiting = job.metadata
        elif step in _ANNOUNCES:
            job.awaiting = RemoteLogSegmentMetadataUpdate(
                job.metadata.segment_id, self._now_ms, _ANNOUNCES[step], self.broker_id, self.leader_epoch
            )
        else:
            job.awaiting = None
        if job.awaiting is not None:
            self._jobs.awaited[job.awaiting] = job

    @property
    def _name(self) -> str:
        return f"{self.topic}-{self.partition}"


# --- pure plans ---------------------------------------------------------------------------


def local_retention_end(
    view: _View, finished: Sequence[RemoteLogSegmentMetadata], retention: TieredRetentionConfig, now_ms: int
) -> int | None:
    """The base offset below which local retention deletes the local segments, or None: the
    plan of :func:`~raylog.storage.remote_log_metadata_cache.local_segments_to_delete` (only
    segments the finished copies cover), cut at the highest offset copied in this replica's
    lineage (after an unclean election, a copy of a diverged history covers offsets whose
    local records differ)."""
    plan = local_segments_to_delete(view.local, finished, retention, now_ms)
    plan = tuple(itertools.takewhile(lambda s: s.last_offset <= view.highest_copied_offset, plan))
    return view.local[len(plan)].base_offset if plan else None  # never the active one: one follows


def remote_retention_plan(
    view: _View, finished: Sequence[RemoteLogSegmentMetadata], retention: TieredRetentionConfig, now_ms: int
) -> tuple[RemoteLogSegmentMetadata, ...]:
    """The readable segments remote retention deletes now, oldest first: the plan of
    :func:`~raylog.storage.remote_log_metadata_cache.remote_segments_to_delete` (the local-only
    bytes counted once), cut at the first segment some of whose offsets the local log still
    holds, unless the log start offset is past it. Local copies go first, so no offset between
    the log start and the log end is ever in neither tier."""
    local_start = view.local[0].base_offset if view.local else view.log_start_offset
    plan = remote_segments_to_delete(
        finished,
        retention,
        now_ms,
        local_only_size_bytes=local_only_size_bytes(view.local, view.highest_copied_offset),
        log_start_offset=view.log_start_offset,
    )
    bound = max(local_start, view.log_start_offset)
    return tuple(itertools.takewhile(lambda m: m.end_offset < bound, plan))


def rewrites_history(action: Action) -> bool:
    """Whether ``action`` rewrites the history's manifest (one such action at a time: each
    reads it, changes it and writes it whole)."""
    return isinstance(action, WriteHistory) or (isinstance(action, DeleteRemoteSegment) and action.history)


def _copy_job(
    view: _View, segment: LocalSegment, segment_id: RemoteLogSegmentId, broker_id: int, now_ms: int, leader_epoch: int
) -> _Job:
    """The copy of a closed local segment under a new id.

    Raises:
        ValueError: the local epoch history does not reach back to the segment's start.
    """
    metadata = RemoteLogSegmentMetadata(
        segment_id,
        segment.base_offset,
        segment.last_offset,
        segment.max_timestamp_ms,
        broker_id,
        now_ms,
        leader_epochs_in_range(view.epoch_entries, segment.base_offset, segment.last_offset),
        segment.size_bytes,
        event_leader_epoch=leader_epoch,
    )
    next_offset = view.local[view.local.index(segment) + 1].base_offset  # never the active one: one follows
    return _Job(_Step.COPY_START, metadata=metadata, base_offset=segment.base_offset, next_offset=next_offset)
