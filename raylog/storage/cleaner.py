"""The log cleaner: compaction of one log (Kafka's ``LogCleaner``), plain Python.

A compacted log keeps at least the latest record of every key; offsets never change
(a read at an offset that was compacted away returns the next batch), and tombstones
(keyed records with a null value) delete their key, then go themselves once
``delete.retention.ms`` has passed since the cleaner first cleaned them.

The log, by offset::

    [log start, first dirty)          clean: compacted by earlier rounds
    [first dirty, first uncleanable)  dirty: written since the last round
    [first uncleanable, LEO)          not cleanable yet

``first dirty`` comes from the checkpoint file; ``first uncleanable`` is the base offset of
the first segment that is the active one, or holds a record newer than
``min.compaction.lag.ms``, or ends above ``max_offset`` (the high watermark: a leader never
compacts records it may yet lose, or a follower's truncation could leave a key with no
value). The dirty ratio is dirty bytes / (clean + dirty bytes), by whole segments.

A round (:func:`clean`):

1. Build the offset map, key -> latest offset, over the dirty section (pyarrow group-by
   per chunk, then over the partial results; no per-record Python loop).
2. Group the segments below ``first uncleanable``: consecutive segments that together fit
   in ``segment.bytes`` and one index (Kafka's groupSegmentsBySize).
3. For each group, oldest first, keep a record only if it has a key, no later record of its
   key is in the map, and it is not a tombstone below the tombstone horizon (the end of the
   section cleaned ``delete.retention.ms`` ago or earlier); but the last batch of each
   producer the caller names (``producer_last_offsets``: producer id -> the last offset of
   its last batch) keeps at least its last record, so the batch and its header (producer
   id, epoch, sequence range) survive and the producer's state can be rebuilt from the log,
   as Kafka's cleaner keeps an active producer's last batch. Whole batches that keep every
   record are copied byte for byte; others are rebuilt by :func:`record_batch.retain`
   (original offsets, offset range and producer fields kept). A single segment that keeps
   everything is left alone. Control batches (transaction markers) are kept; records of
   aborted transactions (``aborted``: the log's aborted-transaction index) are dropped and
   never enter the offset map, so an aborted write never shadows a committed one. The caller
   passes ``max_offset`` at the last stable offset: below it every transaction is decided.
4. Swap the cleaned segment in (below); a group that kept nothing is dropped, except the
   first segment of the log, which stays (empty) so the log start offset never moves.
5. Write the checkpoint: ``first dirty`` := ``first uncleanable``, and remember that the
   section up to it was cleaned at ``now``.

Crash safety (Kafka's ``.cleaned`` / ``.swap`` protocol): a cleaned group is written as
``<base>.log.cleaned`` (+ ``.index.cleaned``, ``.timeindex.cleaned``) and fsync'd, renamed
to ``.swap`` (indexes first, ``.log`` last), swapped into the segment list, the old
segments are deleted, and the ``.swap`` files are renamed to their final names (indexes
first). :func:`recover_swaps`, run when a log opens, deletes ``.cleaned`` files and
completes every ``<base>.log.swap``: old segments with a base in ``[base, max(base + 1,
swap's next offset))`` are deleted and the swap files renamed in (a missing index is
rebuilt). Any prefix of a round's groups being swapped is a consistent log: records are
only ever dropped when a later record of their key survives, or they are tombstones whose
older values an earlier, completed round already removed.

Checkpoint file ``cleaner-offset-checkpoint`` (ASCII, written atomically)::

    1                       format version
    <first dirty offset>
    <end offset> <cleaned at ms>    one line per round still within delete.retention.ms
    ...

Throttling: a round reads and writes at most ``log.cleaner.io.max.bytes.per.second``
(a :class:`~raylog.storage.throttler.Throttler` paces every chunk read or written).

Concurrency: :func:`clean` may run in a thread of its own (the replica runs it off its
event loop) while the log's writer thread appends, rolls, truncates and applies retention:
a round only reads segments below the active one, writes files of its own (``.cleaned``),
and changes the log in two short steps under the log's lock — each swap and the checkpoint
write — each checked against what the writer did meanwhile: a swap whose old segments are
no longer in the log (retention deleted them) is dropped, and a truncation, a revive or a
close since the round started aborts it (its ``.cleaned`` files deleted, nothing swapped
after). Readers keep reading the segments they hold. One round at a time per log.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from raylog.common import record_batch
from raylog.common.record_batch import CONTROL, HAS_KEY, HEADER_SIZE, TRANSACTIONAL, BatchHeader

from ..errors import CorruptRecordError, StorageError
from . import faults
from .file_records import FileRecords
from .files import fsync_directory, remove, write_atomically
from .segment import MAX_RELATIVE_OFFSET, AppendedBatch, LogSegment, file_name
from .throttler import Throttler
from .txn_index import AbortedTxn

if TYPE_CHECKING:
    from .log import Log

CHECKPOINT_FILE = "cleaner-offset-checkpoint"
CHECKPOINT_VERSION = 1
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
#: Bytes of whole batches read and decoded at a time (one map look-up per chunk).
CHUNK_BYTES = 16 * 1024 * 1024
#: Rounds remembered for tombstone horizons; beyond, neighbours merge (later time: safe).
MAX_CHECKPOINT_ROUNDS = 64
_SEGMENT_SUFFIXES = (".index", ".timeindex", ".log")  # the order files are renamed in
_EMPTY_KEYS = pa.nulls(0, pa.binary())  # pa.array would import pandas into every replica

logger = logging.getLogger(__name__)


def _unpaced(nbytes: int) -> None:
    """No throttling, no abort check (tools and tests that read outside a round)."""


@dataclass(frozen=True)
class CleanerStats:
    """What one round did (for metrics); bytes and records of the rewritten section."""

    first_dirty_offset: int  # the dirty section cleaned: [first_dirty_offset, end_offset)
    end_offset: int
    map_keys: int  # distinct keys in the dirty section
    map_bytes_read: int  # bytes read to build the offset map
    bytes_read: int  # bytes of the segments cleaned (the whole cleanable section)
    bytes_written: int  # bytes of the cleaned segments swapped in
    records_read: int
    records_kept: int
    tombstones_dropped: int  # tombstones past delete.retention.ms, dropped
    segments_before: int  # segments in the cleanable section, before and after
    segments_after: int
    dirty_ratio_before: float
    dirty_ratio_after: float
    elapsed_s: float


@dataclass(frozen=True)
class Checkpoint:
    """The cleaner's state in the log directory (see the module docstring)."""

    first_dirty_offset: int = 0
    #: ``(end_offset, cleaned_ms)`` per remembered round, both rising: offsets below
    #: ``end_offset`` had all been cleaned by ``cleaned_ms``.
    rounds: tuple[tuple[int, int], ...] = ()

    def tombstone_horizon(self, now_ms: int, delete_retention_ms: int) -> int:
        """Tombstones below this offset were cleaned delete.retention.ms ago or earlier."""
        return max((end for end, at in self.rounds if at + delete_retention_ms <= now_ms), default=0)

    def after_round(self, end_offset: int, now_ms: int, delete_retention_ms: int) -> Checkpoint:
        """The checkpoint once ``[.., end_offset)`` was cleaned at ``now_ms``."""
        rounds = [r for r in self.rounds if r[0] < end_offset] + [(end_offset, now_ms)]
        expired = [i for i, (_, at) in enumerate(rounds) if at + delete_retention_ms <= now_ms]
        if len(expired) > 1:  # expired rounds only matter through the last of them
            rounds = rounds[expired[-1] :]
        while len(rounds) > MAX_CHECKPOINT_ROUNDS:
            # Forget the round closest in time to its successor: its tombstones now count as
            # cleaned at the successor's (later) time, which only keeps them longer.
            i = min(range(len(rounds) - 1), key=lambda j: rounds[j + 1][1] - rounds[j][1])
            del rounds[i]
        return Checkpoint(end_offset, tuple(rounds))

    def truncated_to(self, offset: int) -> Checkpoint:
        """The checkpoint once the log was cut to end at ``offset``."""
        rounds = tuple((min(end, offset), at) for end, at in self.rounds)
        deduped = tuple(r for i, r in enumerate(rounds) if i + 1 == len(rounds) or rounds[i + 1][0] > r[0])
        return Checkpoint(min(self.first_dirty_offset, offset), deduped)


def read_checkpoint(directory: str) -> Checkpoint:
    """The checkpoint in ``directory``; an empty one if there is none or it is unreadable.

    Raises:
        StorageError: the file exists but cannot be read.
    """
    path = os.path.join(directory, CHECKPOINT_FILE)
    try:
        with open(path, encoding="ascii") as f:
            lines = f.read().split("\n")
    except FileNotFoundError:
        return Checkpoint()
    except (OSError, UnicodeDecodeError) as exc:
        raise StorageError(f"cannot read {path}: {exc}") from exc
    try:
        if int(lines[0]) != CHECKPOINT_VERSION:
            return Checkpoint()
        rounds = tuple((int(a), int(b)) for a, b in (line.split() for line in lines[2:] if line.strip()))
        return Checkpoint(max(0, int(lines[1])), rounds)
    except (ValueError, IndexError):
        return Checkpoint()  # garbage: clean everything again (safe, only slower)


def write_checkpoint(directory: str, checkpoint: Checkpoint) -> None:
    """Write the checkpoint atomically (:func:`~raylog.storage.files.write_atomically`).

    Raises:
        StorageError: the write failed; the previous checkpoint is still in place.
    """
    lines = [str(CHECKPOINT_VERSION), str(checkpoint.first_dirty_offset)]
    lines += [f"{end} {at}" for end, at in checkpoint.rounds]
    write_atomically(os.path.join(directory, CHECKPOINT_FILE), "\n".join(lines) + "\n")


def truncate_checkpoint(directory: str, offset: int) -> None:
    """Keep the checkpoint at or below ``offset`` after the log was cut there (or cut back
    by recovery), so records written anew above it count as dirty."""
    checkpoint = read_checkpoint(directory)
    truncated = checkpoint.truncated_to(offset)
    if truncated != checkpoint:
        write_checkpoint(directory, truncated)


# ---------------------------------------------------------------------------------------
# Which part of the log is cleanable


@dataclass(frozen=True)
class Sections:
    """The log's sections at one moment (see the module docstring), by whole segments."""

    cleanable: tuple[LogSegment, ...]  # every segment below first_uncleanable_offset
    dirty: tuple[LogSegment, ...]  # the last of those, from the one holding first_dirty_offset
    first_dirty_offset: int
    first_uncleanable_offset: int

    @property
    def dirty_bytes(self) -> int:
        return sum(s.size for s in self.dirty)

    @property
    def dirty_ratio(self) -> float:
        total = sum(s.size for s in self.cleanable)
        return self.dirty_bytes / total if total else 0.0

    @property
    def dirty_since_ms(self) -> int | None:
        """When the oldest dirty segment's first batch was written (its max timestamp)."""
        return min((s.first_batch_timestamp for s in self.dirty if s.first_batch_timestamp is not None), default=None)


def sections(log: Log, now_ms: int, max_offset: int | None = None) -> Sections:
    """The clean, dirty and uncleanable sections of ``log`` at ``now_ms``.

    Args:
        max_offset: nothing at or above it is cleanable (the high watermark); None: no bound.
    """
    segments = log._segments
    lag_ms = log.config.min_compaction_lag_ms
    cleanable: list[LogSegment] = []
    for segment, following in zip(segments, segments[1:], strict=False):  # never the active segment
        if max_offset is not None and following.base_offset > max_offset:
            break
        if lag_ms > 0 and segment.max_timestamp > now_ms - lag_ms:
            break
        cleanable.append(segment)
    first_uncleanable = segments[len(cleanable)].base_offset
    first_dirty = min(max(read_checkpoint(log.dir).first_dirty_offset, log.log_start_offset), first_uncleanable)
    ends = [s.base_offset for s in segments[1 : len(cleanable) + 1]]
    dirty = tuple(s for s, end in zip(cleanable, ends, strict=True) if end > first_dirty)
    return Sections(tuple(cleanable), dirty, first_dirty, first_uncleanable)


def needs_cleaning(log: Log, found: Sections, now_ms: int) -> bool:
    """The dirty ratio reached min.cleanable.dirty.ratio, or a dirty record waited longer
    than max.compaction.lag.ms."""
    if found.dirty_bytes == 0:
        return False
    config = log.config
    overdue = found.dirty_since_ms is not None and now_ms - found.dirty_since_ms > config.max_compaction_lag_ms
    return overdue or found.dirty_ratio >= config.min_cleanable_dirty_ratio


# ---------------------------------------------------------------------------------------
# A round


class _Aborted(Exception):
    """The log's writer truncated, revived or closed the log during the round."""


def clean(
    log: Log,
    now_ms: int,
    max_offset: int | None = None,
    force: bool = False,
    producer_last_offsets: Mapping[int, int] | None = None,
    throttler: Throttler | None = None,
    aborted: Iterable[AbortedTxn] = (),
) -> CleanerStats | None:
    """Compact ``log`` if it needs it (or ``force`` and anything is dirty).

    Args:
        aborted: the aborted transactions of the log (their records are dropped).
        producer_last_offsets: producer id -> the last offset of its last batch; each of
            those batches keeps at least one record (see the module docstring).
        throttler: paces the round's I/O (default: none).

    Returns:
        What the round did, or None when there was nothing to do or the round was aborted.

    Raises:
        CorruptRecordError: a batch in the cleanable section is corrupt (nothing swapped
            past it; the next round tries again).
        StorageError: the disk failed; what was swapped in is consistent.
    """
    started = time.perf_counter()
    layout = log.layout
    before = sections(log, now_ms, max_offset)
    if before.dirty_bytes == 0 or not (force or needs_cleaning(log, before, now_ms)):
        return None

    def pace(nbytes: int) -> None:
        if log.layout != layout:
            raise _Aborted()
        if throttler is not None:
            throttler.maybe_throttle(nbytes)

    try:
        for segment in before.cleanable:  # the records that outlive older ones must be on disk before those go
            segment.flush()
        checkpoint = read_checkpoint(log.dir)
        is_aborted = _aborted_batches(aborted)
        map_keys, map_offsets, map_bytes = build_offset_map(before.dirty, before.first_dirty_offset, pace, is_aborted)
        horizon = min(checkpoint.tombstone_horizon(now_ms, log.config.delete_retention_ms), before.first_dirty_offset)
        retention = _Retention(map_keys, map_offsets, horizon, producer_last_offsets or {}, is_aborted)
        totals = _Totals()
        after_segments = 0
        for group in group_segments(before.cleanable, log.config):
            kept = _clean_group(log, group, retention, totals, pace, layout)
            after_segments += len(kept)
        after = checkpoint.after_round(before.first_uncleanable_offset, now_ms, log.config.delete_retention_ms)
        if not log._write_cleaner_checkpoint(after, layout):
            raise _Aborted()
    except (_Aborted, CorruptRecordError, StorageError):
        if log.layout == layout:
            raise
        logger.info("cleaning of %s stopped: the log was truncated, revived or closed meanwhile", log.dir)
        return None
    stats = CleanerStats(
        first_dirty_offset=before.first_dirty_offset,
        end_offset=before.first_uncleanable_offset,
        map_keys=len(map_keys),
        map_bytes_read=map_bytes,
        bytes_read=totals.bytes_read,
        bytes_written=totals.bytes_written,
        records_read=totals.records_read,
        records_kept=totals.records_kept,
        tombstones_dropped=totals.tombstones_dropped,
        segments_before=len(before.cleanable),
        segments_after=after_segments,
        dirty_ratio_before=before.dirty_ratio,
        dirty_ratio_after=sections(log, now_ms, max_offset).dirty_ratio,
        elapsed_s=time.perf_counter() - started,
    )
    logger.info(
        "cleaned log %s below offset %d (dirty from %d) in %.3f s: %d of %d records kept (%d tombstones dropped), "
        "%d -> %d bytes, %d -> %d segments, dirty ratio %.2f -> %.2f",
        log.dir,
        stats.end_offset,
        stats.first_dirty_offset,
        stats.elapsed_s,
        stats.records_kept,
        stats.records_read,
        stats.tombstones_dropped,
        stats.bytes_read,
        stats.bytes_written,
        stats.segments_before,
        stats.segments_after,
        stats.dirty_ratio_before,
        stats.dirty_ratio_after,
    )
    return stats


@dataclass
class _Totals:
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    tombstones_dropped: int = 0


def group_segments(segments: Sequence[LogSegment], config) -> list[list[LogSegment]]:
    """Consecutive segments that fit together in one segment and its indexes."""
    groups: list[list[LogSegment]] = []
    for i, segment in enumerate(segments):
        if groups:
            group = groups[-1]
            end = segments[i + 1].base_offset if i + 1 < len(segments) else segment.next_offset
            fits = (
                sum(s.size for s in group) + segment.size <= config.segment_bytes
                and sum(len(s.offset_index) for s in group) + len(segment.offset_index)
                < group[0].offset_index.max_entries
                and sum(len(s.time_index) for s in group) + len(segment.time_index) < group[0].time_index.max_entries
                and end - group[0].base_offset <= MAX_RELATIVE_OFFSET
            )
            if fits:
                group.append(segment)
                continue
        groups.append([segment])
    return groups


# ---------------------------------------------------------------------------------------
# The offset map


def build_offset_map(
    segments: Sequence[LogSegment],
    first_dirty_offset: int,
    pace: Callable[[int], None] = _unpaced,
    is_aborted: Callable[[BatchHeader], bool] | None = None,
) -> tuple[pa.Array, np.ndarray, int]:
    """``(keys, latest offsets, bytes read)``: each key with a record at or above
    ``first_dirty_offset`` in ``segments`` (not in an aborted transaction), and the offset
    of its last such record."""
    partials = []
    bytes_read = 0
    for segment in segments:
        for chunk in _chunks(segment, pace, is_aborted):
            bytes_read += len(chunk.view)
            keyed = chunk.keys.is_valid().to_numpy(zero_copy_only=False) & (chunk.offsets >= first_dirty_offset)
            if not keyed.any():
                continue
            table = pa.table({"key": chunk.keys, "offset": chunk.offsets}).filter(pa.array(keyed))
            partials.append(_latest(table))
    if not partials:
        return _EMPTY_KEYS, np.empty(0, dtype=np.int64), bytes_read
    latest = _latest(pa.concat_tables(partials)) if len(partials) > 1 else partials[0]
    return latest.column("key").combine_chunks(), latest.column("offset").to_numpy(), bytes_read


def _latest(table: pa.Table) -> pa.Table:
    """One row per key with its largest offset."""
    grouped = table.group_by("key", use_threads=False).aggregate([("offset", "max")])
    return grouped.rename_columns({"offset_max": "offset"})


# ---------------------------------------------------------------------------------------
# Reading segments a chunk at a time


@dataclass
class _Chunk:
    """Whole batches of a segment, decoded: one entry per record of the data batches."""

    position: int  # of the chunk in its segment
    view: memoryview
    batches: list[tuple[int, BatchHeader]]  # (position in the chunk, header)
    bodies: list[pa.RecordBatch | None]  # None for control batches (kept whole)
    keys: pa.Array  # binary, null where a record has no key
    offsets: np.ndarray  # int64
    tombstones: np.ndarray  # bool: the value is null


def _aborted_batches(aborted: Iterable[AbortedTxn]) -> Callable[[BatchHeader], bool]:
    """Whether a batch belongs to one of the ``aborted`` transactions."""
    ranges: dict[int, list[tuple[int, int]]] = {}
    for txn in aborted:
        ranges.setdefault(txn.producer_id, []).append((txn.first_offset, txn.marker_offset))

    def is_aborted(header: BatchHeader) -> bool:
        spans = ranges.get(header.producer_id) if header.attributes & TRANSACTIONAL else None
        return bool(spans) and any(first <= header.base_offset < marker for first, marker in spans)

    return is_aborted


def _chunks(
    segment: LogSegment,
    pace: Callable[[int], None],
    is_aborted: Callable[[BatchHeader], bool] | None = None,
    chunk_bytes: int = CHUNK_BYTES,
) -> Iterator[_Chunk]:
    """The segment's batches, CRC-checked and decoded, about ``chunk_bytes`` at a time;
    ``pace`` is told the bytes of each chunk before it is read. The records of batches
    ``is_aborted`` names count as keyless: no offset map holds them and no round keeps them.

    Raises:
        CorruptRecordError: a batch is torn or fails its checks.
    """
    size, position = segment.size, 0
    while position < size:
        pace(min(chunk_bytes, size - position))
        view = memoryview(segment.records.read(position, min(chunk_bytes, size - position)))
        batches, pos = [], 0
        while pos + HEADER_SIZE <= len(view):
            header = record_batch.read_header(view, pos)
            if pos + header.size > len(view):
                break
            batches.append((pos, header))
            pos += header.size
        if not batches:  # a batch larger than a chunk: read it whole
            header = record_batch.read_header(view)
            view = memoryview(segment.records.read(position, header.size))
            if len(view) < header.size:
                raise CorruptRecordError(f"batch at byte {position} of {segment.records.path} is torn")
            batches, pos = [(0, header)], header.size
        yield _decode(position, view[:pos], batches, is_aborted or _never)
        position += pos


def _never(header: BatchHeader) -> bool:
    return False


def _decode(
    position: int,
    view: memoryview,
    batches: list[tuple[int, BatchHeader]],
    is_aborted: Callable[[BatchHeader], bool] = _never,
) -> _Chunk:
    bodies: list[pa.RecordBatch | None] = []
    keys, offsets, tombstones = [], [], []
    for pos, header in batches:
        record_batch.check_crc(view, pos, header)
        if header.attributes & CONTROL:
            bodies.append(None)
            continue
        body = record_batch.decode_body(view, pos, header)
        bodies.append(body)
        keyed = header.attributes & HAS_KEY and not is_aborted(header)
        keys.append(body.column("key") if keyed else pa.nulls(header.record_count, pa.binary()))
        offsets.append(record_batch.offset_deltas(header, body) + header.base_offset)
        tombstones.append(body.column("value").is_null().to_numpy(zero_copy_only=False))
    if not keys:
        return _Chunk(position, view, batches, bodies, _EMPTY_KEYS, np.empty(0, np.int64), np.empty(0, bool))
    return _Chunk(
        position, view, batches, bodies, pa.concat_arrays(keys), np.concatenate(offsets), np.concatenate(tombstones)
    )


# ---------------------------------------------------------------------------------------
# Cleaning a group of segments


@dataclass(frozen=True)
class _Retention:
    """What a round keeps: the offset map, the tombstone horizon, producers' last batches."""

    map_keys: pa.Array
    map_offsets: np.ndarray
    horizon: int
    producer_last_offsets: Mapping[int, int]
    is_aborted: Callable[[BatchHeader], bool]


def _keep(chunk: _Chunk, retention: _Retention) -> tuple[np.ndarray, int]:
    """Per record of the chunk: keep it? And how many tombstones expired."""
    import pyarrow.compute as pc  # here: importing it costs every replica process ~25 ms at start

    if not len(chunk.offsets):
        return np.empty(0, dtype=bool), 0
    has_key = chunk.keys.is_valid().to_numpy(zero_copy_only=False)
    index = pc.index_in(chunk.keys, value_set=retention.map_keys).fill_null(-1).to_numpy()
    latest = np.where(index >= 0, retention.map_offsets[index] if len(retention.map_offsets) else -1, -1)
    live = has_key & (latest <= chunk.offsets)
    expired = live & chunk.tombstones & (chunk.offsets < retention.horizon)
    keep = live & ~expired
    _keep_producers_last_batches(chunk, keep, retention.producer_last_offsets)
    return keep, int((expired & ~keep).sum())


def _keep_producers_last_batches(chunk: _Chunk, keep: np.ndarray, producer_last_offsets: Mapping[int, int]) -> None:
    """Make ``keep`` keep the last record of each producer's last batch that it would empty."""
    if not producer_last_offsets:
        return
    start = 0
    for (_, header), body in zip(chunk.batches, chunk.bodies, strict=True):
        if body is None:  # control batches are kept whole and have no entries in ``keep``
            continue
        end = start + header.record_count
        if producer_last_offsets.get(header.producer_id) == header.last_offset and not keep[start:end].any():
            keep[end - 1] = True
        start = end


def _clean_group(
    log: Log,
    group: list[LogSegment],
    retention: _Retention,
    totals: _Totals,
    pace: Callable[[int], None],
    layout: int,
) -> list[LogSegment]:
    """Clean one group and swap the result in; returns what replaced it (possibly the
    group itself, unchanged, nothing, or the group when retention took it meanwhile)."""
    decisions = []  # per segment, per chunk: the keep mask
    changed = len(group) > 1
    for segment in group:
        masks = []
        for chunk in _chunks(segment, pace, retention.is_aborted):
            keep, expired = _keep(chunk, retention)
            masks.append(keep)
            changed = changed or not keep.all()
            totals.bytes_read += len(chunk.view)
            totals.records_read += len(keep)
            totals.records_kept += int(keep.sum())
            totals.tombstones_dropped += expired
        decisions.append(masks)
    if not changed:
        return group
    cleaned = _write_cleaned(log, group, decisions, pace)
    replaced = log._replace_segments(cleaned, group, layout)
    if replaced is None:
        if log.layout != layout:
            raise _Aborted()
        return group  # retention took (part of) the group meanwhile: nothing swapped
    totals.bytes_written += cleaned.size if replaced else 0
    return replaced


def _write_cleaned(
    log: Log, group: list[LogSegment], decisions: list[list[np.ndarray]], pace: Callable[[int], None]
) -> LogSegment:
    """The group's kept batches in a new, flushed ``.cleaned`` segment named by its base."""
    cleaned = log._new_segment(group[0].base_offset, suffix=CLEANED_SUFFIX)
    try:
        if cleaned.size:  # left by a round that failed in this process
            cleaned.records.truncate_to(0)
        cleaned.offset_index.reset()
        cleaned.time_index.reset()
        for segment, masks in zip(group, decisions, strict=True):
            for chunk, keep in zip(_chunks(segment, pace), masks, strict=True):
                buffers, appended = _kept_batches(chunk, keep)
                if buffers:
                    pace(sum(len(b) for b in buffers))
                    cleaned.append(buffers, appended)
        if cleaned.size:
            cleaned.time_index.maybe_append(cleaned.max_timestamp, cleaned.next_offset)
        cleaned.flush()
    except BaseException:
        cleaned.close()
        cleaned.delete()
        raise
    return cleaned


def _kept_batches(chunk: _Chunk, keep: np.ndarray) -> tuple[list, list[AppendedBatch]]:
    """The chunk's batches with only their kept records: whole batches copied as they
    are, partly kept ones rebuilt, wholly dropped ones left out."""
    buffers: list = []
    appended = []
    start = 0
    for (pos, header), body in zip(chunk.batches, chunk.bodies, strict=True):
        mask = None
        if body is not None:  # (control batches are kept whole)
            mask = keep[start : start + header.record_count]
            start += header.record_count
            if not mask.any():
                continue
        if mask is None or mask.all():
            data: bytes | memoryview = chunk.view[pos : pos + header.size]
        else:
            data = record_batch.retain(header, body, mask)
            header = record_batch.read_header(data)
        buffers.append(data)
        appended.append(AppendedBatch(header.base_offset, header.next_offset, header.max_timestamp, header.size))
    return buffers, appended


# ---------------------------------------------------------------------------------------
# Recovery of an interrupted swap


def recover_swaps(directory: str) -> int:
    """Delete ``.cleaned`` files and complete every swap left by a crash (see the module
    docstring). Runs before the log's segments are opened.

    Returns:
        The number of swaps completed.

    Raises:
        StorageError: the directory cannot be listed or a file cannot be renamed.
    """
    names = _listdir(directory)
    for name in names:
        if name.endswith(CLEANED_SUFFIX):
            remove(os.path.join(directory, name))
    bases = sorted(int(name[:20]) for name in names if name.endswith(".log" + SWAP_SUFFIX) and name[:20].isdigit())
    logs = sorted(int(name[:20]) for name in names if name.endswith(".log") and name[:20].isdigit())
    for base in bases:
        end = max(base + 1, _next_offset(os.path.join(directory, file_name(base, ".log" + SWAP_SUFFIX)), base))
        for old in (b for b in logs if base <= b < end):
            for suffix in (".log", ".index", ".timeindex"):  # the .log first, as Segment.delete
                remove(os.path.join(directory, file_name(old, suffix)))
        for suffix in _SEGMENT_SUFFIXES:
            swap = os.path.join(directory, file_name(base, suffix + SWAP_SUFFIX))
            if os.path.exists(swap):
                _rename(swap, os.path.join(directory, file_name(base, suffix)))
    for name in _listdir(directory):  # index .swap files whose .log never became a swap
        if name.endswith(SWAP_SUFFIX):
            remove(os.path.join(directory, name))
    if bases:
        fsync_directory(directory)
    return len(bases)


def _next_offset(path: str, base: int) -> int:
    """The offset after the last whole batch of a swap file (it was fsync'd whole)."""
    records = FileRecords(path)
    end = base
    try:
        for _, header in records.batch_headers(0, records.size):
            end = header.next_offset
    except CorruptRecordError:
        pass  # recovery of the segment will cut it here too
    finally:
        records.close()
    return end


def _listdir(directory: str) -> list[str]:
    try:
        return os.listdir(directory)
    except OSError as exc:
        raise StorageError(f"cannot list {directory}: {exc}") from exc


def _rename(source: str, target: str) -> None:
    try:
        faults.check_write(target)
        os.replace(source, target)
    except OSError as exc:
        raise StorageError(f"cannot rename {source} to {target}: {exc}") from exc
