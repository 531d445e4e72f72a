"""A replica's housekeeping rounds: ISR proposals, a log a disk error took offline brought
back, retention, the flush policy, the HW checkpoint, producer expiry and snapshots, and
compaction in the cleaner thread.

A part of :class:`~raylog.actors.replica.PartitionReplicaActor` (see
:class:`~raylog.actors.replica_parts.ReplicaPart` for what the parts share).
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import ctypes.util
import functools
import logging
from collections.abc import Callable

import ray

from raylog import metrics
from raylog.actors.replica_parts import ReplicaPart
from raylog.errors import RaylogError
from raylog.storage import faults

logger = logging.getLogger(__name__)

#: How often the actor applies retention, the flush.ms policy and the HW checkpoint while its
#: partition changes; rounds that find nothing changed double the pause up to the idle
#: maximum (a node hosts hundreds of idle replicas), and at most a quarter of
#: replica.lag.time.max.ms.
HOUSEKEEPING_INTERVAL_S = 1.0
HOUSEKEEPING_IDLE_MAX_S = 8.0


class Housekeeping(ReplicaPart):
    """See the module docstring."""

    def _housekeep(self) -> None:
        """Each round: ISR proposals, bringing back a log a disk error took offline (once no
        cleaning round runs), retention (below the HW), deleting the files of removed
        segments once file.delete.delay.ms has passed, the flush.ms policy, the HW
        checkpoint, producer expiry and snapshot and, for a compacted topic, a cleaning round
        (below the HW, keeping each producer's last batch) in the cleaner thread; a disk
        error (e.g. a full disk) skips the round instead of ending the loop."""
        interval_s, seen, idle = HOUSEKEEPING_INTERVAL_S, None, True
        while not self._stopped.wait(interval_s):
            if not idle:
                _release_free_memory()
            with self._lock:
                p = self.partition
                log = p.log
                now = (log.log_end_offset, p.high_watermark, log.log_start_offset, p.leader_epoch, p.isr, p.pending_isr)
                idle = now == seen and log.offline is None and not log.config.compact
                # An idle leader still drops a follower that stopped fetching, within 1.25 lag times.
                longest_s = min(HOUSEKEEPING_IDLE_MAX_S, p.config.replica_lag_time_max_ms / 4000)
                longest_s = max(HOUSEKEEPING_INTERVAL_S, longest_s)
                interval_s = min(2 * interval_s, longest_s) if idle else HOUSEKEEPING_INTERVAL_S
                seen = now
                self._maybe_propose_isr()
                if log.offline is not None and not self._cleaning_now():
                    if log.revive():
                        self._notify()
                try:
                    p.housekeep()
                    if log.config.compact and not self._cleaning_now():
                        self._cleaning = _cleaner_thread().submit(
                            self._clean, p.last_stable_offset, p.producers.last_offsets(), p.txn_index.all()
                        )
                    if not idle:
                        metrics.record_partition_state(self._metric_tags, p)
                except RaylogError:
                    continue

    def _cleaning_now(self) -> bool:
        return self._cleaning is not None and not self._cleaning.done()

    def _clean(self, last_stable_offset: int, producer_last_offsets: dict[int, int], aborted: list) -> None:
        """One cleaning round below the LSO (transactions there are decided), in this
        process's cleaner thread without ``_lock`` (the log swaps segments under its own
        lock; see :class:`~raylog.storage.log.Log`)."""
        try:
            cleaned = self.partition.log.clean(
                max_offset=last_stable_offset, producer_last_offsets=producer_last_offsets, aborted=aborted
            )
        except RaylogError as exc:
            logger.warning("%s: cleaning round failed, the next one retries: %s", self.partition.name, exc)
            return
        if cleaned is not None:
            metrics.record_cleaning(self._metric_tags, cleaned)

    @ray.method(concurrency_group="control")
    def inject_disk_fault(self, errno: int | None, duration_s: float | None = None) -> None:
        """Test only: make every storage write in this replica's process fail with
        ``OSError(errno)`` (``errno.ENOSPC``: a full disk, ``errno.EIO``: a failing one), for
        ``duration_s`` if given, or stop with None (:mod:`raylog.storage.faults`). Produces
        are then answered with KAFKA_STORAGE_ERROR; once the fault stops, the next
        housekeeping round brings a log that went offline back."""
        faults.inject(errno, duration_s)


@functools.cache
def _cleaner_thread() -> concurrent.futures.ThreadPoolExecutor:
    """This process's cleaner thread (one replica per process: one cleaner per replica)."""
    return concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="raylog-cleaner")


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def _release_free_memory() -> None:
    """Give the C heap's free pages back to the system. Calls on many threads interleave
    their large buffers (batches, fetch answers) in the heap, so freed ones stay pinned
    below live ones: a replica held ~310 MB after a load that left 78 MB on one thread;
    trimmed after each busy round, ~200 MB (fixing glibc's mmap threshold instead cost a
    third of fetch throughput)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
