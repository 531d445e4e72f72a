"""A tiered replica's pump (Kafka's RemoteLogManager in its broker, KIP-405): the thread that
runs :class:`~raylog.coordination.remote_log_tasks.RemoteLogTasks` for this replica and
carries out what it decides, and the reads a leader serves from the remote tier.

Once the topic sets ``remote.storage.enable`` (and the cluster has a store,
``remote.log.storage.uri``), each replica runs a pump. Every round it reads its partition's
new events from ``__remote_log_metadata``
(:class:`~raylog.actors.remote_log_metadata_topic.RemoteLogMetadataTopic`) into the tasks' cache
and the remote reader's, takes the partition's state under the replica's lock (leadership and
epoch, local segments, last stable offset, log start, epoch history, config), ticks the tasks
and carries out their actions one after the other without the lock: events published acks=all,
segments copied to and deleted from the store (:class:`~raylog.storage.remote_storage.RemoteStorageManager`),
local segments deleted once copied (local retention), orphans swept. It then tells the
partition what the remote tier holds (:attr:`Partition.remote_log_start_offset
<raylog.coordination.partition.Partition.remote_log_start_offset>`), which moves the
partition's log start. A leader leads the tasks in its epoch; a follower applies events and
runs its own local retention. The log's own retention is off on a tiered topic
(:meth:`Log.apply_retention <raylog.storage.log.Log.apply_retention>`): a segment leaves the
disk only once copied.

Reads: a consumer's fetch below the local log start is answered from the remote tier
(:meth:`Tiering._remote_fetch`, without the replica's lock), read_committed with the aborted
transactions of both tiers. Until the pump has read the metadata topic to its end once, such a
fetch and an EARLIEST look-up get the retriable OFFSET_NOT_AVAILABLE: the remote tier's extent
is not known yet. A store that fails makes remote reads fail with the retriable
KAFKA_STORAGE_ERROR while the local tail goes on serving, and copying resumes when it is back.

History: on a topic that sets ``remote.storage.history.enable`` the leader also writes each
copied segment as Parquet (:class:`~raylog.storage.history.HistoryWriter`, under the same
store), its rows decoded from the copy in the store with the aborted transactions of both
tiers, and deletes the file with the remote segment.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import dataclasses
import functools
import logging
import threading
from collections.abc import Callable

import numpy as np

from raylog import metrics
from raylog.actors.remote_log_metadata_topic import RemoteLogMetadataTopic
from raylog.actors.replica_parts import ReplicaPart
from raylog.common.record_batch import iter_headers
from raylog.coordination.partition import CONSUMER_REPLICA_ID, READ_COMMITTED
from raylog.coordination.remote_log_tasks import (
    Action,
    CleanOrphans,
    CopySegment,
    DeleteLocalSegments,
    DeleteRemoteSegment,
    Phase,
    PublishEvent,
    RemoteLogTasks,
    RemoteLogTasksConfig,
    WriteHistory,
)
from raylog.errors import (
    InvalidConfigError,
    OffsetNotAvailableError,
    RaylogError,
    RemoteStorageError,
    StorageError,
)
from raylog.protocol import FetchRequest, FetchResponse, ListOffsetsResponse, error_fields
from raylog.storage.history import HistoryWriter, aborted_in, segment_table
from raylog.storage.log import wall_clock_ms
from raylog.storage.remote_log_metadata_cache import RemoteLogMetadataCache, TieredRetentionConfig
from raylog.storage.remote_log_reader import RemoteLogReader
from raylog.storage.remote_storage import LogSegmentData, RemoteStorageManager

logger = logging.getLogger(__name__)

#: How often a pump without work (:attr:`RemoteLogTasks.has_work`) looks for new events; it
#: looks at once when a segment closed since is ready to copy (:class:`PumpPause`).
TIER_INTERVAL_S = 1.0
#: How long a busy pump's read of the metadata topic waits for its own event to come back.
READ_BACK_WAIT_MS = 200
#: The pause after the store or the metadata topic failed.
TIERING_RETRY_S = 1.0
#: A failure that repeats is logged at most this often.
FAILURE_LOG_INTERVAL_S = 60.0


class Tiering(ReplicaPart):
    """See the module docstring. Concurrency: the pump is one thread; ``_remote_reader`` is
    thread-safe (fetch threads read through it while the pump applies events)."""

    _remote_log_storage_uri: str
    _remote_topic: str  # see raylog.common.names.remote_topic_name
    _tiering: threading.Thread | None
    _remote_reader: RemoteLogReader | None
    _tiering_pump: _Pump | None
    _remote_fetches: int  # consumer fetches answered from the remote tier (under _lock)

    def _maybe_start_tiering(self) -> None:
        """Start the pump when the topic asks for tiered storage (holding ``_lock``; at start
        and at each config change: tiered storage, once on, stays on)."""
        p = self.partition
        if self._tiering is not None or not p.config.remote_storage_enable or self._stopped.is_set():
            return
        if not self._remote_log_storage_uri:
            logger.error(
                "%s: remote.storage.enable is on but the cluster has no remote store (remote.log.storage.uri): "
                "its segments stay on local disk, none is deleted until the store is configured again",
                p.name,
            )
            return
        self._tiering = self._start(self._tier)

    def _tier(self) -> None:
        """The pump (see the module docstring), until the replica stops."""
        store = self._open_store()
        if store is None:
            return
        p, name = self.partition, self._remote_topic
        pump = _Pump(
            self,
            store,
            RemoteLogTasks(name, p.partition, p.broker_id),
            RemoteLogMetadataTopic(name, p.partition, self._controller, self._guard.broker_token),
        )
        self._remote_reader, self._tiering_pump = pump.reader, pump
        pump.run()

    def _open_store(self) -> RemoteStorageManager | None:
        """The cluster's store, tried again until it can be set up (None: stopped, or a URI
        pyarrow refuses, logged)."""
        while not self._stopped.is_set():
            try:
                return RemoteStorageManager.from_uri(self._remote_log_storage_uri)
            except InvalidConfigError as exc:
                logger.error("%s: tiered storage is off: %s", self.partition.name, exc)
                return None
            except RemoteStorageError as exc:
                logger.warning("%s: remote store not reachable, trying again: %s", self.partition.name, exc)
                self._stopped.wait(TIERING_RETRY_S)
        return None

    def _delete_remote_partition(self) -> None:
        """The topic is deleted: delete the partition's objects in the store (every replica
        tries; the first does it). A failure is logged: what is left is never read again (a
        topic created again under the name has another topic id, see :func:`~raylog.common.names.remote_topic_name`)."""
        p = self.partition
        if not p.config.remote_storage_enable or not self._remote_log_storage_uri:
            return
        try:
            store = RemoteStorageManager.from_uri(self._remote_log_storage_uri)
            store.delete_partition(self._remote_topic, p.partition)
            HistoryWriter(store.filesystem, store.base_path).delete_partition(self._remote_topic, p.partition)
        except (InvalidConfigError, RemoteStorageError) as exc:
            logger.warning("%s: the deleted topic's remote segments are left in the store: %s", p.name, exc)

    def _remote_fetch(self, request: FetchRequest, response: FetchResponse) -> FetchResponse:
        """Answer a fetch that ``response`` sent to the remote tier (OFFSET_MOVED_TO_TIERED_STORAGE)
        from it, for a consumer; a follower gets ``response`` as it is (it starts at the local
        log start the response carries). Called without ``_lock``."""
        reader = self._remote_reader
        if request.replica_id != CONSUMER_REPLICA_ID:
            return response
        try:
            with self._lock:
                p = self.partition
                if reader is None or not p.remote_tier_ready:
                    raise OffsetNotAvailableError(f"{p.name}: the remote tier's metadata is still being read")
                epochs, answered = reader.history_for(p.epochs.entries), self._remote_answer(p)
            data = reader.read(request.offset, request.max_bytes, epochs)
            aborted: tuple = ()
            if request.isolation_level == READ_COMMITTED and data:
                end = _end_offset(data)
                remote = reader.aborted_transactions(request.offset, end, leader_epoch_history=epochs)
                with self._lock:
                    local = self.partition.txn_index.collect(request.offset, end)
                aborted = tuple(dict.fromkeys(map(tuple, remote + local)))
        except RemoteStorageError as exc:
            failed = StorageError(f"{self.partition.name}: remote storage: {exc}")
            return dataclasses.replace(response, **error_fields(failed))
        except RaylogError as exc:
            return dataclasses.replace(response, **error_fields(exc))
        with self._lock:
            self._remote_fetches += 1
        return dataclasses.replace(answered, records=np.frombuffer(data, dtype=np.uint8), aborted_transactions=aborted)

    def _remote_offset_for_time(self, timestamp_ms: int, local: ListOffsetsResponse, end: int) -> ListOffsetsResponse:
        """A time look-up on a tiered partition whose remote tier holds offsets below its local
        log: the first record at or after ``timestamp_ms`` in the remote tier if there is one
        below ``end`` and below ``local``'s answer (the local log's), else ``local``; as Kafka
        searches the remote tier first. Called without ``_lock``."""
        reader = self._remote_reader
        with self._lock:
            p = self.partition
            if reader is None or not p.remote_tier_ready:
                return ListOffsetsResponse(
                    **error_fields(OffsetNotAvailableError(f"{p.name}: the remote tier's metadata is still being read"))
                )
            start, history = p.log_start_offset, reader.history_for(p.epochs.entries)
        try:
            found = reader.offset_for_timestamp(timestamp_ms, start_offset=start, leader_epoch_history=history)
        except RemoteStorageError as exc:
            return ListOffsetsResponse(**error_fields(StorageError(f"{p.name}: remote storage: {exc}")))
        except RaylogError as exc:
            return ListOffsetsResponse(**error_fields(exc))
        if found is None or found.offset >= end or (0 <= local.offset < found.offset):
            return local
        return dataclasses.replace(local, offset=found.offset, timestamp_ms=found.timestamp_ms)

    def _nudge_tiering(self) -> None:
        """Wake a paused pump if a segment is ready to copy (holding ``_lock``; from every
        change that wakes parked calls: see :meth:`PumpPause.nudge`)."""
        pump = self._tiering_pump
        if pump is not None and pump.pause.paused_at is not None:  # (a pump at work: nothing to look up)
            p = self.partition
            pump.pause.nudge(p.log.segment_base_offsets[-1], lambda: p.last_stable_offset)

    def _end_tiering_pause(self) -> None:
        """The replica is closing: a paused pump goes on at once, and sees it stopped."""
        pump = self._tiering_pump
        if pump is not None:
            pump.pause.woken.set()

    def _tiering_state(self) -> dict | None:
        """The pump's phase, epoch, last error and counters as of its last round, and the
        consumer fetches answered from the remote tier so far (None: no pump runs yet)."""
        pump = self._tiering_pump
        if pump is None or pump.state is None:
            return None
        return {**pump.state, "remote_fetches": self._remote_fetches}

    @staticmethod
    def _remote_answer(p) -> FetchResponse:
        """A fetch answer's watermarks, as of now (holding ``_lock``)."""
        return FetchResponse(
            high_watermark=p.high_watermark,
            log_start_offset=p.log_start_offset,
            log_end_offset=p.log.log_end_offset,
            leader_epoch=p.leader_epoch,
            last_stable_offset=p.last_stable_offset,
        )


def _end_offset(data: bytes) -> int:
    """The offset after the last batch of ``data`` (whole batches)."""
    end = -1
    for _, header in iter_headers(data):
        end = header.next_offset
    return end


@dataclasses.dataclass(eq=False)
class PumpPause:
    """A pump's pause with nothing to do, cut short once a segment that closed since is wholly
    below the last stable offset, so ready to copy. Were the pump to wait out every pause, the
    segments closing meanwhile (two a second at 16 MB/s with 8 MiB segments) would wait on the
    disk for the next round, past local.retention.bytes.

    ``paused_at`` is the base of the log's active segment as of the last tick (None: not
    paused): once the active segment's base is above it, the segment that was active has
    closed, and once the LSO reaches the new base it is stable. Thread-safe: :meth:`nudge` is
    called holding the replica's lock, which :meth:`wait` takes to begin the pause."""

    woken: threading.Event = dataclasses.field(default_factory=threading.Event)
    paused_at: int | None = None

    def nudge(self, active_base_offset: int, last_stable_offset: Callable[[], int]) -> None:
        """Wake the pause if a segment closed since it began is ready to copy (the LSO looked up
        only once one has closed)."""
        paused_at = self.paused_at
        if paused_at is not None and paused_at < active_base_offset <= last_stable_offset():
            self.paused_at = None
            self.woken.set()

    def wait(
        self,
        wait_s: float,
        lock: threading.RLock,
        stopped: threading.Event,
        active_base_offset: int | None,
        nudge: Callable[[], None],
    ) -> None:
        """Pause up to ``wait_s``, until ``stopped`` (whoever sets it then sets :attr:`woken`
        holding ``lock``) or, given ``active_base_offset`` (the last tick's), until
        :meth:`nudge` finds a segment ready: ``nudge()`` (the replica's, holding ``lock``) looks
        at once, as the tick's view may be old already."""
        with lock:
            self.woken.clear()
            if stopped.is_set():
                return
            if active_base_offset is not None:
                self.paused_at = active_base_offset
                nudge()
        self.woken.wait(wait_s)
        self.paused_at = None


@dataclasses.dataclass(eq=False)
class _Pump:
    """One replica's pump (see the module docstring)."""

    replica: Tiering
    store: RemoteStorageManager
    tasks: RemoteLogTasks
    topic: RemoteLogMetadataTopic

    def __post_init__(self) -> None:
        cache = RemoteLogMetadataCache(self.tasks.topic, self.tasks.partition)
        self.reader = RemoteLogReader(cache, self.store, executor=_prefetch())
        self.history = HistoryWriter(self.store.filesystem, self.store.base_path)
        self._logged: dict[str, float] = {}
        #: The last failure, as ``"<what>: <error>"`` (None: none yet).
        self.last_error: str | None = None
        self._counted: dict[str, int] = {}  # the counters as last recorded
        #: The phase, epoch, last error and counters as of the last round (replaced whole:
        #: other threads read it, never the tasks, which only this thread touches).
        self.state: dict | None = None
        self.pause = PumpPause()
        self._active_base_offset: int | None = None  # the log's active segment, as of the last tick

    def run(self) -> None:
        """Rounds until the replica stops; a round that raised something unforeseen is logged
        with its traceback and the next one starts after a pause (the pump never dies of it).
        Only the pause with nothing to do ends early for a segment ready to copy; the one
        after a failure is waited out."""
        replica = self.replica
        p = replica.partition
        while not replica._stopped.is_set():
            try:
                idle = self._round()
            except Exception:  # noqa: BLE001 — logged; the pump must outlive it
                logger.exception("%s: tiered storage: a round of the pump failed", p.name)
                idle = None
            if idle is not False:
                self.pause.wait(
                    TIER_INTERVAL_S if idle else TIERING_RETRY_S,
                    replica._lock,
                    replica._stopped,
                    self._active_base_offset if idle else None,
                    replica._nudge_tiering,
                )

    def _round(self) -> bool | None:
        """Read the new events, tick, carry out. Whether the pump may pause, idle (False while
        a step waits for its event to come back: the next read waits for it); None: it failed
        to read the metadata topic, and pauses for the retry."""
        actions: list[Action] = []
        failed = False
        try:
            events = self.topic.poll(max_wait_ms=READ_BACK_WAIT_MS if not self.tasks.idle else 0)
        except RaylogError as exc:
            self._failed("reading __remote_log_metadata", exc)
            events, failed = [], True
        for event in events:
            actions += self.tasks.on_metadata_event(event)
            with contextlib.suppress(RaylogError):  # refused by every reader alike (the tasks count it)
                self.reader.apply(event)
        actions += self._tick()
        self._carry_out(actions)
        self._tell_partition()
        self._record_metrics()
        if failed:
            return None
        return not self.tasks.has_work

    def _tick(self) -> list[Action]:
        """Take the role and tick the tasks with the partition's state."""
        with self.replica._lock:
            p = self.replica.partition
            leading, epoch = p.is_leader, p.leader_epoch
            state = (p.log.local_segments(), p.last_stable_offset, p.log_start_offset, p.epochs.entries)
            self._active_base_offset = p.log.segment_base_offsets[-1]
            config = RemoteLogTasksConfig(TieredRetentionConfig.of(p.config), p.config.remote_storage_history_enable)
        now = wall_clock_ms()
        actions: list[Action] = []
        if leading and epoch > self.tasks.leader_epoch:
            logger.info("%s: tiered storage: leading the remote tier in leader epoch %d", p.name, epoch)
            actions += self.tasks.become_leader(epoch, now)
        elif not leading and self.tasks.phase is not Phase.FOLLOWER:
            logger.info("%s: tiered storage: following (leader epoch %d)", p.name, epoch)
            self.tasks.become_follower()
        return actions + self.tasks.tick(now, *state, config)

    def _carry_out(self, actions: list[Action]) -> None:
        """Do each action, oldest first, and each that its answer asks for next."""
        queue = collections.deque(actions)
        while queue and not self.replica._stopped.is_set():
            action = queue.popleft()
            try:
                self._do(action)
            except (RaylogError, OSError) as exc:
                self._failed(type(action).__name__, exc)
                queue.extend(self.tasks.on_action_done(action, False, exc))
            else:
                queue.extend(self.tasks.on_action_done(action, True))

    def _do(self, action: Action) -> None:
        p = self.replica.partition
        if isinstance(action, PublishEvent):
            self.topic.publish(action.event)
        elif isinstance(action, CopySegment):
            files = LogSegmentData.in_directory(p.log.dir, action.base_offset, action.next_offset)
            self.store.copy_log_segment_data(action.metadata, files)
        elif isinstance(action, WriteHistory):
            self._write_history(action)
        elif isinstance(action, DeleteRemoteSegment):
            self.store.delete_log_segment_data(action.metadata)
            if action.history:
                self.history.delete_segment(action.metadata)
        elif isinstance(action, DeleteLocalSegments):
            with self.replica._lock:
                p.delete_local_segments_below(action.up_to_base_offset)
        else:
            assert isinstance(action, CleanOrphans), action
            cut = action.now_ms - action.min_age_ms
            self.store.clean_orphans(self.tasks.topic, p.partition, action.keep, cut)
            if action.history:
                self.history.clean_orphans(self.tasks.topic, p.partition, action.now_ms, action.min_age_ms)

    def _write_history(self, action: WriteHistory) -> None:
        """The copied segment as a history file: its bytes read back from the store (the local
        copy may be gone by a retry), decoded without the records of transactions aborted in
        either tier (a marker may lie in a later segment, remote or local)."""
        metadata, p = action.metadata, self.replica.partition
        data = self.store.fetch_log_segment(metadata, 0)
        with self.replica._lock:
            local = p.txn_index.all()
            history = self.reader.history_for(p.epochs.entries)
        remote = self.reader.aborted_entries(
            metadata.start_offset, metadata.end_offset + 1, leader_epoch_history=history
        )
        aborted = list(dict.fromkeys(remote + local))
        rows = segment_table(data, p.topic, p.partition, aborted)
        left_out = bool(aborted_in(aborted, metadata.start_offset, metadata.end_offset))
        self.history.write_segment(metadata, rows, left_out)

    def _tell_partition(self) -> None:
        """What the remote tier holds, for the partition's log start and look-ups."""
        cache = self.tasks.cache
        with self.replica._lock:
            p = self.replica.partition
            p.remote_log_start_offset = cache.remote_log_start_offset
            p.highest_remote_offset = cache.highest_copied_offset
            p.remote_tier_ready = p.remote_tier_ready or self.topic.caught_up

    def _record_metrics(self) -> None:
        """The counters' increments since the last round, and the gauges."""
        task_counts = dataclasses.asdict(self.tasks.metrics())
        now = {**task_counts, **dataclasses.asdict(self.reader.stats())}
        increments = {f: now[f] - self._counted.get(f, 0) for f in metrics.TIERING_COUNTERS}
        self._counted = now
        self.state = {
            "phase": self.tasks.phase.value,
            "leader_epoch": self.tasks.leader_epoch,
            "last_error": self.last_error,
            "remote_size_bytes": self.tasks.cache.remote_size_bytes,
            **now,
        }
        copies = self.tasks.phase is not Phase.FOLLOWER  # (a follower's lag is its leader's to report)
        metrics.record_tiering(
            self.replica._metric_tags,
            increments,
            task_counts["copy_lag_segments"] if copies else 0,
            task_counts["copy_lag_bytes"] if copies else 0,
            self.state["remote_size_bytes"],
        )

    def _failed(self, what: str, exc: BaseException) -> None:
        """Log a failure: at WARNING when new or every FAILURE_LOG_INTERVAL_S, else DEBUG."""
        name = self.replica.partition.name
        self.last_error = f"{what}: {type(exc).__name__}: {exc}"
        now = wall_clock_ms() / 1000
        key = f"{what}: {type(exc).__name__}"
        level = (
            logging.DEBUG
            if now - self._logged.get(key, -FAILURE_LOG_INTERVAL_S) < FAILURE_LOG_INTERVAL_S
            else logging.WARNING
        )
        if level == logging.WARNING:
            self._logged[key] = now
        logger.log(level, "%s: tiered storage: %s failed, tried again: %s", name, what, exc)


@functools.cache
def _prefetch() -> concurrent.futures.ThreadPoolExecutor:
    """This process's thread fetching remote chunks ahead of sequential reads."""
    return concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="raylog-remote-prefetch")
