"""A partition's log: a directory of segments, appended at the end, read anywhere.

Directory layout::

    00000000000000000000.log / .index / .timeindex     one segment per base offset
    recovery-point                                     offset below which all is flushed
    log-start-offset                                   the log start offset (DeleteRecords)
    cleaner-offset-checkpoint                          compacted logs: see cleaner.py
    00000000000000000000.snapshot                      producer state: see producer_snapshot.py
    00000000000000000000.log.deleted (and indexes)     a removed segment: file.delete.delay.ms

Invariants: segments are sorted by base offset and never overlap; the last one (the
active segment) takes every append; ``log_start_offset`` is the first offset a reader may
read: the base offset of the first segment, or past it where records were deleted below an
offset (:meth:`Log.increment_log_start_offset`, Kafka's DeleteRecords: the segments wholly
below go, the offset is checkpointed); ``log_end_offset`` (LEO) is the offset the next record
will get; everything below the recovery point was fsync'd. When the log is opened, segments from the one holding the
recovery point onwards are verified batch by batch (CRC) and cut at the first bad byte;
later segments are then dropped, so what survives is always a prefix of what was written.
A swap the cleaner left half done is completed first (:func:`cleaner.recover_swaps`).
Producer snapshots are the owner's (it reads and writes them through
:mod:`producer_snapshot`); the log tells it when it rolls (``on_roll``).

``cleanup.policy`` says what removes old data: ``delete`` (retention by time and size,
whole segments), ``compact`` (:meth:`clean`: the latest record per key is kept, offsets
unchanged, so a compacted log has gaps; reads at a missing offset return the next batch),
or both. A compacted log refuses records without a key from producers.

Disk errors (a full disk, I/O errors) raise StorageError and never leave a partial batch:
a failed append is cut back to the last whole batch. When that cut, a truncation or an
fsync fails, the log goes offline (Kafka marks its log directory offline): every call
raises StorageError until :meth:`revive` has recovered it from disk, back to the log end
offset it had (so an append that failed never reappears, and nothing acknowledged is lost).
New segments, deletions, truncations and checkpoints are fsync'd with their directory.

Concurrency: one writer thread calls the mutating methods (``append_*``, ``roll``,
``truncate_*``, ``flush``, ``maybe_flush``, ``apply_retention``, ``revive``, ``close``).
``read``, ``offsets_for_time`` and the offset properties may run in other threads at the
same time: they work on an immutable snapshot of the segment list and never see bytes past
the LEO they read first. :meth:`clean` may run in one other thread (a cleaner thread) while
the writer goes on: it swaps segments and writes its checkpoint under the log's lock, which
the writer also takes to change the segment list (roll, retention, truncation, revive,
close; appends into the active segment take no lock), and it gives up a round during which
the writer truncated, revived or closed the log (``layout`` changed). A segment deleted by
retention or replaced by the cleaner stays readable by a reader that already holds it.
``truncate_to`` must not race with readers of the offsets it removes (callers truncate only
while they are not serving those offsets).
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from raylog.common import compression, record_batch
from raylog.common.record_batch import BatchHeader
from raylog.common.requests import MAX_READ_BYTES

from ..config import LogConfig
from ..errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidRequestError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    StorageError,
)
from . import cleaner
from .cleaner import CleanerStats
from .files import fsync_directory, write_atomically
from .remote_log_metadata_cache import LocalSegment
from .segment import DELETED_SUFFIX, AppendedBatch, LogSegment
from .throttler import Throttler
from .txn_index import AbortedTxn

RECOVERY_POINT_FILE = "recovery-point"
#: The high watermark its partition last checkpointed (a lower bound after a restart).
HIGH_WATERMARK_FILE = "high-watermark"
LOG_START_OFFSET_FILE = "log-start-offset"
_SEGMENT_SUFFIXES = (".log", ".index", ".timeindex")
#: The codec each compression.type stores batches with (``producer``: whichever they came with).
_CODECS = {("uncompressed" if cid == compression.NONE else name): cid for name, cid in compression.CODEC_IDS.items()}

logger = logging.getLogger(__name__)


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class AppendInfo:
    """The outcome of an append: offsets as stamped, inclusive at both ends."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time_ms: int  # -1 unless the topic uses LogAppendTime
    record_count: int
    batches: tuple[BatchHeader, ...]  # headers as written (offsets and epoch stamped)


@dataclass(frozen=True)
class RecoveryReport:
    """What opening the log found and repaired."""

    recovered_segments: int  # segments verified batch by batch
    truncated_bytes: int  # torn or corrupt bytes cut off, deleted segments included
    deleted_segments: int  # segments after a cut, dropped whole
    rebuilt_indexes: bool  # always true after recovery of a segment


@dataclass(frozen=True)
class TimestampOffset:
    offset: int
    timestamp_ms: int


def read_max_bytes(max_bytes: int) -> int:
    """A read's ``max_bytes``, at most MAX_READ_BYTES.

    Raises:
        InvalidRequestError: ``max_bytes`` is not a non-negative integer.
    """
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
        raise InvalidRequestError(f"a fetch's max bytes must be a non-negative integer, got {max_bytes!r}")
    return min(max_bytes, MAX_READ_BYTES)


def first_record_at_or_after(batch: bytes, timestamp_ms: int, start_offset: int) -> TimestampOffset | None:
    """The first record of one whole ``batch`` with a timestamp >= ``timestamp_ms`` and an
    offset >= ``start_offset``, or None (a control batch has no records to find).

    Raises:
        CorruptRecordError: the batch fails its checks (CRC included).
    """
    table = record_batch.decode_table(batch)
    timestamps = record_batch.values_of(table.column("timestamp").combine_chunks())
    offsets = record_batch.values_of(table.column("offset").combine_chunks())
    found = (timestamps >= timestamp_ms) & (offsets >= start_offset)
    if not found.any():
        return None
    i = int(found.argmax())
    return TimestampOffset(int(offsets[i]), int(timestamps[i]))


def _first_in_segment(
    segment: LogSegment, timestamp_ms: int, start_offset: int, end_offset: int, markers: bool = False
) -> TimestampOffset | None:
    """The first record of ``segment`` in ``[start_offset, end_offset)`` with a timestamp >=
    ``timestamp_ms``, found from the time index; with ``markers``, a transaction marker's
    offset and timestamp where a marker comes first (Kafka's MAX_TIMESTAMP answer), else
    markers are passed over."""
    _, size = segment.published
    start = segment.find_position(segment.time_index.lookup(timestamp_ms), size)
    if start is None:
        return None
    for position, header in segment.records.batch_headers(start, size):
        if header.base_offset >= end_offset:
            break
        if header.max_timestamp < timestamp_ms or header.next_offset <= start_offset:
            continue
        if header.attributes & record_batch.CONTROL:
            if markers and header.base_offset >= start_offset:
                return TimestampOffset(header.base_offset, header.max_timestamp)
            continue
        found = first_record_at_or_after(segment.read(position, position + header.size), timestamp_ms, start_offset)
        if found is not None:
            return found
    return None


class Log:
    """See the module docstring. Open with :meth:`open`."""

    def __init__(self, directory: str, config: LogConfig, clock: Callable[[], int]):
        self.dir = directory
        self.config = config
        self._clock = clock
        self._segments: tuple[LogSegment, ...] = ()
        self._bases: tuple[int, ...] = ()
        #: ``(segments, bases)`` published together for readers in other threads.
        self._snapshot: tuple[tuple[LogSegment, ...], tuple[int, ...]] = ((), ())
        self._next_offset = 0
        self._recovery_point = 0
        self._log_start = 0  # checkpointed; the log start is at least the first segment's base
        self._unflushed_records = 0
        self._last_flush_ms = clock()
        self.recovery = RecoveryReport(0, 0, 0, False)
        #: Called with a new active segment's base offset when the log rolls (the owner
        #: snapshots state that describes the batches below it).
        self.on_roll: Callable[[int], None] | None = None
        #: Guards changes of the segment list against the cleaner's thread (see the module docstring).
        self._lock = threading.RLock()
        #: Bumped by every truncation, revive and close: a cleaning round that sees it move gives up.
        self.layout = 0
        #: Set when the layout moves: wakes a cleaning round sleeping in its throttler.
        self._layout_moved = threading.Event()
        #: The disk error that took the log offline (None while it is online).
        self._offline: StorageError | None = None
        #: ``(floor, end, start_at)``: what :meth:`revive` must find and cut back to.
        self._revive_range: tuple[int, int, int | None] = (0, 0, None)
        #: Segments out of the log whose ``.deleted`` files wait for ``file.delete.delay.ms``:
        #: ``(due_ms, segment)``, oldest first.
        self._retired: list[tuple[int, LogSegment]] = []

    # --- opening ----------------------------------------------------------------------

    @classmethod
    def open(cls, directory: str, config: LogConfig | None = None, clock: Callable[[], int] = wall_clock_ms) -> Log:
        """Open (creating if needed) the log in ``directory`` and recover it.

        Raises:
            StorageError: the directory cannot be created or read.
        """
        log = cls(directory, config or LogConfig(), clock)
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create log directory {directory}: {exc}") from exc
        log._load()
        logger.info(
            "log %s loaded: %d segment(s), offsets %d to %d, %d bytes",
            directory,
            log.segment_count,
            log.log_start_offset,
            log.log_end_offset,
            log.size_bytes,
        )
        return log

    def _load(self) -> None:
        self._recovery_point = self._read_recovery_point()
        self._log_start = self._read_offset(LOG_START_OFFSET_FILE)
        bases = self._discover_segments()
        segments: list[LogSegment] = []
        recovered = truncated = deleted = 0
        cut = False
        for i, base in enumerate(bases):
            segment = self._new_segment(base)
            if cut:  # an earlier segment was cut: nothing after it can follow on
                truncated += segment.size
                segment.close()
                segment.delete()
                deleted += 1
                continue
            next_base = bases[i + 1] if i + 1 < len(bases) else None
            try:
                segment.load()
                end = segment.next_offset if next_base is None else next_base
                clean = end <= self._recovery_point
            except CorruptRecordError:
                clean = False
            if not clean:
                dropped = segment.recover()
                recovered += 1
                truncated += dropped
                cut = dropped > 0 and next_base is not None
            segments.append(segment)
        if not segments:
            segments.append(self._new_segment(0))
        self._publish(tuple(segments))
        self._next_offset = segments[-1].next_offset
        self.recovery = RecoveryReport(recovered, truncated, deleted, recovered > 0)
        if recovered:
            # A clean shutdown leaves nothing past the recovery point: this is a crash's tail.
            logger.log(
                logging.WARNING if truncated else logging.INFO,
                "log %s recovered %d segment(s) past the recovery point %d: cut %d torn or corrupt byte(s), "
                "deleted %d later segment(s); log end offset %d",
                self.dir,
                recovered,
                self._recovery_point,
                truncated,
                deleted,
                segments[-1].next_offset,
            )
        if recovered or self._recovery_point > self._next_offset:
            self._flush(self._next_offset)
        if self._log_start > self._next_offset:  # recovery cut the log below it
            self._log_start = self._next_offset
            self._write_log_start()
        cleaner.truncate_checkpoint(self.dir, self._next_offset)  # recovery may have cut the log

    def _discover_segments(self) -> list[int]:
        """Base offsets of the segments on disk; stray index or temporary files removed."""
        cleaner.recover_swaps(self.dir)
        try:
            names = os.listdir(self.dir)
        except OSError as exc:
            raise StorageError(f"cannot list {self.dir}: {exc}") from exc
        bases = set()
        for name in names:
            stem, suffix = os.path.splitext(name)
            if suffix == ".log" and len(stem) == 20 and stem.isdigit():
                bases.add(int(stem))
        for name in names:
            stem, suffix = os.path.splitext(name)
            orphan_index = suffix in _SEGMENT_SUFFIXES[1:] and not (stem.isdigit() and int(stem) in bases)
            if orphan_index or name.endswith((".tmp", DELETED_SUFFIX)):
                os.unlink(os.path.join(self.dir, name))
        return sorted(bases)

    def _new_segment(self, base_offset: int, suffix: str = "") -> LogSegment:
        return LogSegment(
            self.dir,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            index_max_bytes=self.config.segment_index_bytes,
            created_ms=self._clock(),
            suffix=suffix,
        )

    def _publish(self, segments: tuple[LogSegment, ...]) -> None:
        # Readers take self._snapshot once: segments and their bases always match, also
        # when the cleaner replaces segments by fewer.
        self._bases = tuple(s.base_offset for s in segments)
        self._segments = segments
        self._snapshot = (segments, self._bases)

    # --- offsets ----------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return max(self._segments[0].base_offset, self._log_start)

    @property
    def checkpointed_log_start_offset(self) -> int:
        """The highest log start asked for (DeleteRecords), which may be below the first
        segment's base: the local log no longer holds those offsets, a remote tier may."""
        return self._log_start

    @property
    def log_end_offset(self) -> int:
        return self._next_offset

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def segment_base_offsets(self) -> tuple[int, ...]:
        return self._bases

    # --- appending --------------------------------------------------------------------

    def append_as_leader(self, data: Any, leader_epoch: int) -> AppendInfo:
        """Validate batches from a producer, give them offsets and the leader epoch, append.

        Args:
            data: one or more whole batches (bytes-like).
            leader_epoch: the epoch stamped into every batch.

        A topic's compression.type other than ``producer`` has every data batch stored with
        that codec (recompressed when it came with another), as Kafka's leader does.

        Raises:
            CorruptRecordError: a batch fails validation; nothing is appended.
            RecordTooLargeError: a batch is above ``max.message.bytes``, as it came or as it is
                stored; nothing is appended.
            InvalidRecordError: a record without a key for a compacted log, offset gaps in a
                batch, or headers beyond the limits of :mod:`record_batch`; nothing is appended.
            StorageError: the disk failed; nothing is appended.
        """
        view = memoryview(data).cast("B")
        checked = record_batch.validate(
            view, max_batch_bytes=self.config.max_message_bytes, require_keys=self.config.compact, limit_headers=True
        )
        now_ms = self._clock()
        append_time = now_ms if self.config.log_append_time else -1
        codec = _CODECS.get(self.config.compression_type)
        buffers: list = []
        batches = []
        offset = self._next_offset
        for position, header in checked:
            if header.last_offset_delta != header.record_count - 1:  # only the cleaner leaves gaps
                raise InvalidRecordError(
                    f"a producer's batch must number its {header.record_count} records consecutively, "
                    f"not up to offset delta {header.last_offset_delta}"
                )
            view_of_batch = view
            if codec is not None and header.codec != codec and not header.attributes & record_batch.CONTROL:
                view_of_batch, position = memoryview(record_batch.recompress(view, position, header, codec)), 0
                header = record_batch.read_header(view_of_batch)
                if header.size > self.config.max_message_bytes:
                    raise RecordTooLargeError(
                        f"batch of {header.size} bytes once stored with compression.type="
                        f"{self.config.compression_type} is above max.message.bytes={self.config.max_message_bytes}"
                    )
            if append_time >= 0:
                rewritten = record_batch.with_log_append_time(view_of_batch, position, header, append_time)
                view_of_batch, position = memoryview(rewritten), 0
                header = record_batch.read_header(view_of_batch)
            header = header._replace(base_offset=offset, leader_epoch=leader_epoch)
            buffers.append(record_batch.stamp(header, offset, leader_epoch))
            buffers.append(view_of_batch[position + record_batch.STAMP.size : position + header.size])
            batches.append(header)
            offset = header.next_offset
        return self._append(buffers, batches, append_time)

    def append_as_follower(self, data: Any) -> AppendInfo:
        """Append batches copied from the leader, offsets as they are.

        Raises:
            CorruptRecordError: a batch fails validation; nothing is appended.
            InvalidRequestError: offsets below the log end offset or not rising.
            StorageError: the disk failed; nothing is appended.
        """
        view = memoryview(data).cast("B")
        checked = record_batch.validate(view)
        expected = self._next_offset
        for _, header in checked:
            if header.base_offset < expected:
                raise InvalidRequestError(
                    f"follower append at offset {header.base_offset} below the expected {expected}"
                )
            expected = header.next_offset
        return self._append([view], [h for _, h in checked], -1)

    def _append(self, buffers: list, headers: list[BatchHeader], append_time: int) -> AppendInfo:
        self._require_online()
        size = sum(h.size for h in headers)
        first, last = headers[0].base_offset, headers[-1].last_offset
        max_ts = max(h.max_timestamp for h in headers)
        segment = self._maybe_roll(size, first, last, max_ts)
        try:
            segment.append(
                buffers, [AppendedBatch(h.base_offset, h.next_offset, h.max_timestamp, h.size) for h in headers]
            )
        except StorageError as exc:
            if segment.torn:
                self._go_offline(exc)
            raise
        end = headers[-1].next_offset
        records = sum(h.record_count for h in headers)
        if self._unflushed_records + records >= self.config.flush_messages or self._flush_due():
            self._flush(end)  # before the LEO moves: a failed flush leaves the batch unacknowledged
        else:
            self._unflushed_records += records
        self._next_offset = end
        return AppendInfo(first, last, max_ts, append_time, records, tuple(headers))

    def _maybe_roll(self, size: int, first_offset: int, last_offset: int, max_timestamp: int) -> LogSegment:
        active = self._segments[-1]
        segment_ms = self.config.segment_ms
        if self.config.compact:  # the active segment is never cleaned: roll it in time
            segment_ms = min(segment_ms, self.config.max_compaction_lag_ms)
        aged = active.size > 0 and active.time_waited_ms(self._clock(), max_timestamp) > segment_ms
        if aged:
            reason = f"segment.ms {segment_ms} passed"
        elif active.is_full_for(size, last_offset, self.config.segment_bytes):
            reason = (
                f"segment.bytes {self.config.segment_bytes} reached"
                if active.size + size > self.config.segment_bytes
                else "its index or offset range is full"
            )
        else:
            return active
        return self.roll(first_offset, reason)

    def roll(self, base_offset: int | None = None, reason: str = "asked to") -> LogSegment:
        """Start a new active segment at ``base_offset`` (default: the log end offset); its
        files and their directory entries are fsync'd before it takes appends. ``reason``:
        why, for the log line.

        Raises:
            StorageError: the disk failed; the log is as it was.
        """
        self._require_online()
        base = self._next_offset if base_offset is None else base_offset
        active = self._segments[-1]
        if active.size == 0:
            return active
        # The old segment's time index gets its final entry (all records below base).
        active.time_index.maybe_append(active.max_timestamp, active.next_offset)
        segment = self._new_segment(base)
        try:
            segment.flush()
            fsync_directory(self.dir)
        except StorageError:
            segment.close()
            _quietly(segment.delete)
            raise
        with self._lock:
            self._publish(self._segments + (segment,))
        logger.info(
            "log %s rolled a new segment at offset %d (%s); the previous one, at %d, holds %d bytes",
            self.dir,
            base,
            reason,
            active.base_offset,
            active.size,
        )
        if self.on_roll is not None:
            self.on_roll(base)
        return segment

    # --- reading ----------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None) -> bytes:
        """Whole batches from the one holding ``offset``, up to ``max_bytes`` (at most
        MAX_READ_BYTES; but at least one batch), all below ``max_offset`` (exclusive; e.g.
        the high watermark).

        Returns:
            The raw batch bytes, exactly as stored (empty at or past ``max_offset``). Reads
            stop at a segment's end; read again from the next offset for more.

        Raises:
            OffsetOutOfRangeError: ``offset`` is below the log start or above the log end.
            InvalidRequestError: ``max_bytes`` is not a non-negative integer.
            StorageError: the log is offline, or the disk failed.
        """
        self._require_online()
        max_bytes = read_max_bytes(max_bytes)
        end_offset = self._next_offset  # read before the segments: never past this
        segments, bases = self._snapshot
        start_offset = max(segments[0].base_offset, self._log_start)
        if offset < start_offset or offset > end_offset:
            raise OffsetOutOfRangeError(f"offset {offset} is outside [{start_offset}, {end_offset}] of {self.dir}")
        stop = end_offset if max_offset is None else min(max_offset, end_offset)
        i = bisect.bisect_right(bases, offset) - 1
        while offset < stop and i < len(segments):
            segment = segments[i]
            next_offset, size = segment.published
            # ``limit``: where the batches readable below ``stop`` end in this segment.
            limit = size if stop >= next_offset else segment.find_position(stop, size)
            start = segment.find_position(offset, limit) if limit else None
            if start is not None:
                return segment.read(start, segment.end_position(start, max_bytes, limit))
            i += 1
            offset = max(offset, bases[i]) if i < len(bases) else offset
        return b""

    def offsets_for_time(self, timestamp_ms: int) -> TimestampOffset | None:
        """The first record at or past the log start with a timestamp >= ``timestamp_ms``, or
        None if there is none."""
        self._require_online()
        end_offset, start_offset = self._next_offset, self.log_start_offset
        for segment in self._segments:
            if segment.max_timestamp >= timestamp_ms:
                found = _first_in_segment(segment, timestamp_ms, start_offset, end_offset)
                if found is not None:
                    return found
        return None

    def max_timestamp_offset(self) -> TimestampOffset | None:
        """The first record at or past the log start that carries the largest timestamp the
        segments recorded, with that timestamp (ListOffsets MAX_TIMESTAMP, KIP-734), as Kafka
        finds it: in the first segment of that largest timestamp, its first batch of it (where
        that is a transaction marker, the marker's offset). None for a log without records;
        None also where DeleteRecords removed every record of that timestamp below the log
        start, where Kafka answers the offset of a record no longer readable."""
        self._require_online()
        segment = max(self._segments, key=lambda s: s.max_timestamp)  # the first of equals
        if segment.max_timestamp < 0:
            return None
        return _first_in_segment(segment, segment.max_timestamp, self.log_start_offset, self._next_offset, markers=True)

    def batch_headers(self, from_offset: int) -> Iterator[BatchHeader]:
        """Headers of every batch whose base offset is ``from_offset`` or above, in offset order."""
        segments, bases = self._snapshot
        for segment in segments[max(0, bisect.bisect_right(bases, from_offset) - 1) :]:
            _, size = segment.published
            start = segment.find_position(from_offset, size)
            if start is None:
                continue
            for _, header in segment.records.batch_headers(start, size):
                if header.base_offset >= from_offset:
                    yield header

    # --- truncation -------------------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove every batch holding an offset >= ``offset`` (a follower diverged).

        Whole batches go, so the log end offset may land below ``offset`` when it falls
        inside a batch. Returns the new log end offset.

        Raises:
            OffsetOutOfRangeError: ``offset`` is below the log start offset (use
                :meth:`truncate_fully_and_start_at`).
            StorageError: the disk failed; the log is offline (:meth:`revive` finishes the cut).
        """
        self._require_online()
        if offset >= self._next_offset:
            return self._next_offset
        if offset < self.log_start_offset:
            raise OffsetOutOfRangeError(f"cannot truncate to {offset}, below the log start {self.log_start_offset}")
        with self._lock, self._offline_on_error(0, offset):
            self._bump_layout()
            segments = list(self._segments)
            doomed = []
            while len(segments) > 1 and segments[-1].base_offset >= offset:
                doomed.append(segments.pop())
            self._publish(tuple(segments))
            self._retire(doomed)
            fsync_directory(self.dir)  # the deleted segments must not come back after a crash
            segments[-1].truncate_to(offset)
            self._next_offset = segments[-1].next_offset
            self._recovery_point = min(self._recovery_point, self._next_offset)
            self._write_recovery_point()
            cleaner.truncate_checkpoint(self.dir, self._next_offset)
        return self._next_offset

    def truncate_fully_and_start_at(self, offset: int, keep_log_start: bool = False) -> None:
        """Delete everything and start an empty log at ``offset``; the checkpointed log start
        moves there too, unless ``keep_log_start`` (a tiered log restarting at its leader's
        local log start: the partition's start, below it, stays).

        Raises:
            StorageError: the disk failed; the log is offline (:meth:`revive` finishes the cut).
        """
        self._require_online()
        with self._lock, self._offline_on_error(0, offset, start_at=offset):
            self._bump_layout()
            kept = next((s for s in self._segments if s.base_offset == offset), None)
            if kept is not None:
                kept.truncate_to(offset)  # its files have the right name: reuse them emptied
            self._retire([s for s in self._segments if s is not kept])
            self._publish((kept or self._new_segment(offset),))
            fsync_directory(self.dir)
            self._next_offset = offset
            self._recovery_point = offset
            self._write_recovery_point()
            self._log_start = min(self._log_start, offset) if keep_log_start else offset
            self._write_log_start()
            cleaner.truncate_checkpoint(self.dir, offset)  # (below the new log start: cleans from it)

    # --- retention --------------------------------------------------------------------

    def increment_log_start_offset(self, offset: int) -> list[int]:
        """Delete the records below ``offset`` (Kafka's DeleteRecords): the log start moves
        there (checkpointed and fsync'd before anything is deleted) and the segments wholly
        below it are deleted, never the active one. An offset at or below the log start
        deletes nothing, and is checkpointed (:attr:`checkpointed_log_start_offset`: on a
        tiered partition, whose remote tier may hold offsets below the local log start, it is
        the partition's log start); the caller bounds it (a leader by its high watermark).

        Returns:
            The base offsets of the deleted segments.

        Raises:
            OffsetOutOfRangeError: ``offset`` is past the log end.
            StorageError: the log is offline, or the disk failed (the log start may have
                moved all the same: a restart finds and drops the segments again).
        """
        self._require_online()
        if offset > self._next_offset:
            raise OffsetOutOfRangeError(f"cannot start {self.dir} at {offset}, past its end {self._next_offset}")
        if offset <= self.log_start_offset:
            if offset > self._log_start:  # a tiered log's start below its local segments
                self._log_start = offset
                self._write_log_start()
            return []
        with self._lock:  # (the cleaner may swap segments meanwhile)
            self._log_start = offset
            self._write_log_start()
            segments = self._segments
            doomed = 0
            while doomed + 1 < len(segments) and segments[doomed + 1].base_offset <= offset:
                doomed += 1
            if doomed:
                self._publish(segments[doomed:])
        logger.info(
            "log %s: records below offset %d deleted (%d segment(s) removed); log start offset now %d",
            self.dir,
            offset,
            doomed,
            offset,
        )
        if doomed:
            self._retire(segments[:doomed])
            fsync_directory(self.dir)
        return [s.base_offset for s in segments[:doomed]]

    def apply_retention(self, high_watermark: int) -> list[int]:
        """Delete whole segments past ``retention.ms`` or beyond ``retention.bytes``,
        oldest first, never the active segment and only segments wholly below
        ``high_watermark`` (as Kafka: uncommitted records may yet be needed, and a
        follower's log start must not pass what the leader has committed); only when
        ``cleanup.policy`` includes ``delete``, and never on a tiered log
        (``remote.storage.enable``: its owner deletes copied segments,
        :meth:`delete_segments_below`). The deletions are fsync'd (the directory).

        Returns:
            The base offsets of the deleted segments.

        Raises:
            StorageError: the log is offline, or a file could not be deleted (the segment
                is gone from the log all the same; a restart finds and drops it again).
        """
        self._require_online()
        if not self.config.delete or self.config.remote_storage_enable:
            return []
        with self._lock:  # (the cleaner may swap segments meanwhile)
            doomed = self._drop_oldest(lambda segments: self._expired_segments(segments, high_watermark))
        return self._deleted(doomed)

    def delete_segments_below(self, base_offset: int, why: str) -> list[int]:
        """Delete the segments below the one at ``base_offset`` (never the active one): a tiered
        log's local retention, once the remote store holds them. Deleting them moves the log
        start offset up to ``base_offset``; the deletions are fsync'd (the directory).

        Returns:
            The base offsets of the deleted segments (none when the log holds no segment
            below ``base_offset``).

        Raises:
            StorageError: as :meth:`apply_retention`.
        """
        self._require_online()
        with self._lock:  # (the cleaner may swap segments meanwhile)
            doomed = self._drop_oldest(
                lambda segments: [
                    why for s, _ in zip(segments, segments[1:], strict=False) if s.base_offset < base_offset
                ]
            )
        return self._deleted(doomed)

    def local_segments(self) -> list[LocalSegment]:
        """What tiered storage's plans need of each segment, oldest first, the active one last."""
        segments = self._segments
        ends = [s.base_offset for s in segments[1:]] + [self._next_offset]
        return [
            LocalSegment(s.base_offset, end - 1, s.size, s.max_timestamp, i == len(segments) - 1)
            for i, (s, end) in enumerate(zip(segments, ends, strict=True))
        ]

    def _drop_oldest(self, reasons_of: Callable[[tuple[LogSegment, ...]], list[str]]) -> tuple[LogSegment, ...]:
        """Take the oldest segments out of the log, one per reason ``reasons_of`` gives for the
        segment list (holding ``_lock``), logging why; they are to be deleted (:meth:`_deleted`)."""
        segments = self._segments
        reasons = reasons_of(segments)
        doomed = len(reasons)
        if not doomed:
            return ()
        self._publish(segments[doomed:])
        logger.info(
            "log %s deletes %d segment(s) for retention (%s): offsets %d to %d, %d bytes; log start offset now %d",
            self.dir,
            doomed,
            ", ".join(sorted(set(reasons))),
            segments[0].base_offset,
            segments[doomed].base_offset - 1,
            sum(s.size for s in segments[:doomed]),
            segments[doomed].base_offset,
        )
        return segments[:doomed]

    def _deleted(self, segments: tuple[LogSegment, ...]) -> list[int]:
        """Delete the files of ``segments``, out of the log now, and fsync the directory; their
        base offsets."""
        if segments:
            self._retire(segments)
            fsync_directory(self.dir)
        return [s.base_offset for s in segments]

    def _retire(self, segments: Iterable[LogSegment]) -> None:
        """Delete the files of ``segments``, out of the log: at once, or, with a positive
        ``file.delete.delay.ms``, renamed ``.deleted`` now and unlinked by
        :meth:`delete_retired_segments` once the delay has passed (as Kafka's broker does).
        Readers holding one of them finish their reads either way. The caller fsyncs the
        directory. Called under the lock, or by the writer.

        Raises:
            StorageError: a file could not be deleted or renamed.
        """
        delay_ms = self.config.file_delete_delay_ms
        for segment in segments:
            if delay_ms <= 0:
                segment.delete()
            else:
                segment.mark_deleted()
                self._retired.append((self._clock() + delay_ms, segment))

    def delete_retired_segments(self, force: bool = False) -> int:
        """Unlink the ``.deleted`` files whose ``file.delete.delay.ms`` has passed (all of them
        with ``force``); the writer calls it with its other housekeeping.

        Returns:
            How many segments' files were deleted.

        Raises:
            StorageError: a file could not be deleted (it is tried again on the next call;
                a restart deletes every ``.deleted`` file).
        """
        with self._lock:
            now_ms = self._clock()
            due = [entry for entry in self._retired if force or entry[0] <= now_ms]
            for entry in due:
                entry[1].delete()
                self._retired.remove(entry)
        return len(due)

    def _expired_segments(self, segments: tuple[LogSegment, ...], high_watermark: int) -> list[str]:
        """Why retention deletes each of the oldest ``segments`` it deletes (by time or by size)."""
        now_ms = self._clock()
        retention_ms, retention_bytes = self.config.retention_ms, self.config.retention_bytes
        excess = sum(s.size for s in segments) - retention_bytes if retention_bytes >= 0 else 0
        reasons = []
        for oldest, following in zip(segments, segments[1:], strict=False):  # never the active segment
            expired = retention_ms >= 0 and oldest.max_timestamp < now_ms - retention_ms
            oversize = retention_bytes >= 0 and excess - oldest.size >= 0
            if following.base_offset > high_watermark or not (expired or oversize):
                break
            excess -= oldest.size
            reasons.append(f"retention.ms {retention_ms}" if expired else f"retention.bytes {retention_bytes}")
        return reasons

    # --- compaction -------------------------------------------------------------------

    def clean(
        self,
        now_ms: int | None = None,
        max_offset: int | None = None,
        *,
        force: bool = False,
        producer_last_offsets: Mapping[int, int] | None = None,
        throttler: Throttler | None = None,
        aborted: Iterable[AbortedTxn] = (),
    ) -> CleanerStats | None:
        """Compact the log (see :mod:`raylog.storage.cleaner`) if its dirty ratio reached
        ``min.cleanable.dirty.ratio`` or a dirty record is older than ``max.compaction.lag.ms``
        (or ``force``). Whatever ``cleanup.policy`` says: the caller decides. May run in a
        thread other than the writer's (see the module docstring).

        Args:
            now_ms: the time (default: the log's clock).
            max_offset: nothing at or above it is compacted: the high watermark.
            producer_last_offsets: producer id -> the last offset of its last batch: those
                batches keep at least one record (the producer's state survives).
            throttler: paces the round's reads and writes (default: one at
                ``log.cleaner.io.max.bytes.per.second`` on the real clock).
            aborted: the aborted transactions (their records are dropped, see the cleaner).

        Returns:
            What the round did, or None when it had nothing to do or was given up.

        Raises:
            CorruptRecordError: a corrupt batch below the dirty end; StorageError.

        Example:
            >>> stats = log.clean(max_offset=partition.high_watermark)
        """
        self._require_online()
        if throttler is None:  # its pauses end early when the round must give up
            throttler = Throttler(self.config.log_cleaner_io_max_bytes_per_second, sleep=self._layout_moved.wait)
        now_ms = self._clock() if now_ms is None else now_ms
        return cleaner.clean(self, now_ms, max_offset, force, producer_last_offsets, throttler, aborted)

    def dirty_ratio(self, now_ms: int | None = None, max_offset: int | None = None) -> float:
        """Bytes written since the last clean over all cleanable bytes (0 when none)."""
        return cleaner.sections(self, self._clock() if now_ms is None else now_ms, max_offset).dirty_ratio

    def _replace_segments(self, new: LogSegment, old: list[LogSegment], layout: int) -> list[LogSegment] | None:
        """Swap ``new`` (flushed, its files named ``.cleaned``) in for ``old`` (consecutive,
        not the active segment), or just drop ``old`` when ``new`` is empty and ``old`` does
        not start the log (the log start offset never moves): see the cleaner's crash
        safety. Called from the cleaner's thread: under the lock, and only while the layout
        is still ``layout`` and ``old`` still in the log.

        Returns:
            What replaced ``old`` (``[new]`` or ``[]``), or None when nothing was swapped
            (``new`` is deleted).
        """
        with self._lock:
            segments = list(self._segments)
            i = next((j for j, s in enumerate(segments) if s is old[0]), -1)
            if self.layout != layout or i < 0 or segments[i : i + len(old)] != old or i + len(old) >= len(segments):
                new.close()
                new.delete()
                return None
            keep = new.size > 0 or i == 0
            if keep:
                new.change_suffix(cleaner.CLEANED_SUFFIX, cleaner.SWAP_SUFFIX)
                fsync_directory(self.dir)
            else:
                new.close()
                new.delete()
            segments[i : i + len(old)] = [new] if keep else []
            self._publish(tuple(segments))
            self._retire(old)
            if keep:
                new.change_suffix(cleaner.SWAP_SUFFIX, "")
            fsync_directory(self.dir)
            return [new] if keep else []

    def _write_cleaner_checkpoint(self, checkpoint: cleaner.Checkpoint, layout: int) -> bool:
        """Write the cleaner's checkpoint at the end of a round, unless the log was truncated
        (or revived, or closed) since the round started; True if written."""
        with self._lock:
            if self.layout != layout:
                return False
            cleaner.write_checkpoint(self.dir, checkpoint)
            return True

    # --- durability -------------------------------------------------------------------

    def flush(self) -> None:
        """fsync every segment with unflushed data and move the recovery point to the LEO.

        Raises:
            StorageError: an fsync failed; the log is offline (the kernel may have dropped
                what it could not write, so nothing unflushed can be trusted).
        """
        self._require_online()
        self._flush(self._next_offset)

    def _flush(self, end: int) -> None:
        with self._offline_on_error(self._next_offset, self._next_offset):
            for segment in self._segments:
                if segment.next_offset > self._recovery_point or segment is self._segments[-1]:
                    segment.flush()
            self._recovery_point = end
            self._unflushed_records = 0
            self._last_flush_ms = self._clock()
            self._write_recovery_point()

    def maybe_flush(self) -> None:
        """Flush if ``flush.ms`` has passed since the last flush with data unflushed."""
        if self._unflushed_records and self._flush_due():
            self.flush()

    def _flush_due(self) -> bool:
        return self._clock() - self._last_flush_ms >= self.config.flush_ms

    def close(self) -> None:
        """Flush and close every file; the next open needs no recovery (an offline log is
        only closed: its next open recovers it)."""
        with self._lock:
            self._bump_layout()  # a cleaning round under way gives up
            try:
                if self._offline is None:
                    self.flush()
            finally:
                for segment in self._segments:
                    segment.close()
                self.delete_retired_segments(force=True)

    # --- disk errors ------------------------------------------------------------------

    @property
    def offline(self) -> StorageError | None:
        """The disk error that took the log offline, or None while it is online."""
        return self._offline

    def _bump_layout(self) -> None:
        self.layout += 1
        self._layout_moved.set()
        self._layout_moved = threading.Event()

    def _require_online(self) -> None:
        if self._offline is not None:
            raise StorageError(f"log {self.dir} is offline after a disk error: {self._offline}")

    @contextlib.contextmanager
    def _offline_on_error(self, floor: int, end: int, start_at: int | None = None) -> Iterator[None]:
        """Take the log offline if the block raises StorageError; :meth:`revive` must then
        find a log end offset of at least ``floor`` and cuts it back to ``end`` (or restarts
        the log at ``start_at``)."""
        try:
            yield
        except StorageError as exc:
            self._go_offline(exc, floor, end, start_at)
            raise

    def _go_offline(
        self, error: StorageError, floor: int | None = None, end: int | None = None, start_at: int | None = None
    ) -> None:
        floor = self._next_offset if floor is None else floor
        end = self._next_offset if end is None else end
        if self._offline is None:
            logger.error("log %s goes offline after a disk error: %s", self.dir, error)
            self._offline = error
            self._revive_range = (floor, end, start_at)
        else:  # a second failure before a revive: the first target still holds, widened
            old_floor, old_end, old_start = self._revive_range
            self._revive_range = (min(old_floor, floor), min(old_end, end), old_start if start_at is None else start_at)

    def revive(self) -> bool:
        """Bring an offline log back: recover it from disk as :meth:`open` does, and cut it
        back to the log end offset it had when it went offline (an append that failed
        never reappears). True when the log is online.

        A log that recovers less than it had acknowledged stays offline (its disk lost
        data: the replica must be rebuilt from the others), as does one whose disk still
        fails.
        """
        if self._offline is None:
            return True
        with self._lock:
            self._bump_layout()  # a cleaning round under way gives up
            return self._revive()

    def _revive(self) -> bool:
        floor, end, start_at = self._revive_range
        try:
            self._load()
            if start_at is not None:
                self._offline = None
                self.truncate_fully_and_start_at(start_at)
            elif self._next_offset < floor:
                logger.critical(
                    "log %s recovered up to offset %d from disk, below the %d it held: it stays offline",
                    self.dir,
                    self._next_offset,
                    floor,
                )
                return False
            else:
                self._offline = None
                self.truncate_to(end)
        except StorageError as exc:
            self._offline = self._offline or exc
            return False
        logger.warning("log %s is back online at log end offset %d", self.dir, self._next_offset)
        return True

    def _read_recovery_point(self) -> int:
        """The recovery point (0 without a valid checkpoint: verify everything)."""
        return self._read_offset(RECOVERY_POINT_FILE)

    def _read_offset(self, name: str) -> int:
        """The offset checkpointed in file ``name`` of the log directory, or 0 without one."""
        path = os.path.join(self.dir, name)
        try:
            with open(path, encoding="ascii") as f:
                return max(0, int(f.read().strip()))
        except (FileNotFoundError, ValueError):
            return 0
        except OSError as exc:
            raise StorageError(f"cannot read {path}: {exc}") from exc

    def checkpointed_high_watermark(self) -> int:
        """The high watermark :meth:`checkpoint_high_watermark` last wrote (0 without one).

        Raises:
            StorageError: the file exists but cannot be read.
        """
        return self._read_offset(HIGH_WATERMARK_FILE)

    def checkpoint_high_watermark(self, high_watermark: int) -> None:
        """Persist its partition's high watermark, atomically and durably.

        Raises:
            StorageError: the write failed; the previous checkpoint is in place.
        """
        write_atomically(os.path.join(self.dir, HIGH_WATERMARK_FILE), str(high_watermark))

    def _write_recovery_point(self) -> None:
        write_atomically(os.path.join(self.dir, RECOVERY_POINT_FILE), str(self._recovery_point))

    def _write_log_start(self) -> None:
        write_atomically(os.path.join(self.dir, LOG_START_OFFSET_FILE), str(self._log_start))


def _quietly(operation: Callable[[], None]) -> None:
    """Clean up after a failure without hiding it: a second disk error is only logged."""
    try:
        operation()
    except StorageError as exc:
        logger.warning("clean-up after a disk error failed too: %s", exc)
