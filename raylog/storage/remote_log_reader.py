"""Reads of a partition's records from tiered storage, below its local log start (Kafka's
RemoteLogManager.read with its RemoteLogReader and RemoteIndexCache, KIP-405).

A fetch at an offset the local log no longer holds is answered from the remote segment that
holds it. :meth:`RemoteLogReader.read` keeps :meth:`Log.read <raylog.storage.log.Log.read>`'s
contract: whole batches from the one holding the offset (or the next one after a gap), up to
``max_bytes`` but at least one batch however large, never past the segment's end (the caller
reads again from the next offset), the bytes exactly as stored.
:meth:`~RemoteLogReader.offset_for_timestamp` answers ListOffsets by time from the remote time
indexes, :meth:`~RemoteLogReader.aborted_transactions` a read_committed fetch's aborted
transactions from the remote transaction indexes, both as the local log answers them.

Finding a batch: the leader epoch that holds the offset in the caller's epoch history
(``(epoch, start offset)`` pairs, rising, as
:attr:`LeaderEpochCache.entries <raylog.storage.leader_epoch.LeaderEpochCache.entries>`)
picks the segment (:meth:`RemoteLogMetadataCache.segment_for
<raylog.storage.remote_log_metadata_cache.RemoteLogMetadataCache.segment_for>`, as Kafka: after
an unclean election, a copy of a diverged history is never read), then the segment's remote
offset index the position to scan from. A remote segment's indexes are relative to its
``start_offset``: the base offset of the local segment it was copied from.

Two caches, each an LRU bounded by the bytes it holds:

- the index cache: a segment's parsed indexes (offset, time, aborted transactions, and what
  its producer snapshot says of the transactions open at its end), each fetched whole once,
  weighed by its object's bytes plus INDEX_ENTRY_OVERHEAD_BYTES (an absent index weighs too);
- the chunk cache: ``.log`` objects read in aligned chunks, chunk ``k`` holding bytes
  ``[k * chunk_bytes, (k + 1) * chunk_bytes)`` (shorter at the object's end), each one ranged
  read. A batch straddling chunks is assembled from them. When a read ends in the last part
  of its chunk (fewer bytes left in it than the read returned, or than a quarter of a chunk),
  the next chunk of the segment is fetched ahead on the ``executor`` (prefetch); the next
  sequential read finds it in the cache, or waits for it while it is in flight.

Invariants: a read returns only whole batches whose headers pass
:func:`~raylog.common.record_batch.read_header`'s checks, whose offsets rise within the
segment's ``[start_offset, end_offset]`` (an indexed position holding the indexed batch), and
whose CRCs match: remote bytes that are not that raise CorruptRecordError, never a torn or
garbled batch. A fetch that failed leaves nothing in a cache (the next read fetches again);
an absent transaction index or producer snapshot is an answer (none; unknown) and is cached.
Each cache holds at most its bound.

Concurrency: fetch threads may call every method at once. One lock guards both caches, the
chunk fetches in flight, the counters and the questions to the metadata cache; it is never
held across a call to the store or to the executor. Threads needing the same chunk share one
fetch (a prefetch in flight included); an index two threads miss together may be fetched by
both. The metadata cache is not thread-safe: once a reader serves reads, the owner applies
the partition's events through :meth:`RemoteLogReader.apply`, under the same lock.
"""

from __future__ import annotations

import bisect
import collections
import concurrent.futures
import contextlib
import logging
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from raylog.common import record_batch
from raylog.common.record_batch import HEADER_SIZE, BatchHeader

from ..errors import (
    CorruptRecordError,
    InvalidConfigError,
    OffsetOutOfRangeError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)
from . import producer_snapshot, txn_index
from .index import OffsetEntries, TimeEntries
from .log import TimestampOffset, first_record_at_or_after, read_max_bytes
from .remote_log_metadata import (
    RemoteLogEvent,
    RemoteLogLeaderEpoch,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
)
from .remote_log_metadata_cache import RemoteLogMetadataCache
from .remote_storage import IndexType, RemoteStorageManager
from .txn_index import AbortedTxn

logger = logging.getLogger(__name__)

_MIB = 1024 * 1024
#: One ranged read of a ``.log`` object: a sequential reader pays a store's latency (tens of
#: milliseconds for an S3 GET) once per four fetches of Kafka's max.partition.fetch.bytes
#: (1 MiB), and a read at a random offset pulls little it does not return (tiered storage
#: plugins chunk alike: Aiven's default is 4 MiB).
DEFAULT_CHUNK_BYTES = 4 * _MIB
#: Eight chunks: a few consumers reading this partition's remote tier in sequence each hold
#: the chunk they read and the one fetched ahead for them.
DEFAULT_CHUNK_CACHE_BYTES = 32 * _MIB
#: A 1 GiB segment indexed every 4 KiB (index.interval.bytes) has a 2 MiB offset index and at
#: most a 3 MiB time index: the indexes of the few segments being read stay cached.
DEFAULT_INDEX_CACHE_BYTES = 16 * _MIB
#: What an index cache entry weighs beyond its object's bytes (key, parsed form, bookkeeping),
#: so that absent or tiny indexes count against the bound too.
INDEX_ENTRY_OVERHEAD_BYTES = 128
#: A read ending within the last 1/PREFETCH_TAIL_DIVISOR of its chunk prefetches the next.
PREFETCH_TAIL_DIVISOR = 4

#: The producer snapshot's answer when no transaction was open at the segment's end.
_NO_OPEN_TRANSACTION = sys.maxsize
#: ... when the snapshot is absent or unreadable: a transaction may be open from anywhere.
_OPEN_UNKNOWN = -1
_FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


@dataclass(frozen=True)
class RemoteReadStats:
    """The reader's counters since it was made, and its caches' sizes now."""

    remote_bytes_read: int = 0  # bytes the store returned: chunks and indexes
    index_cache_hits: int = 0
    index_cache_misses: int = 0
    chunk_cache_hits: int = 0  # chunks served without a fetch of their own (cached, or in flight)
    chunk_cache_misses: int = 0
    prefetches_started: int = 0  # handed to the executor
    prefetches_used: int = 0  # prefetched chunks a read then took
    index_cache_bytes: int = 0
    chunk_cache_bytes: int = 0


class _ByteLru:
    """An LRU map bounded by the bytes its entries weigh; an entry heavier than the bound is
    not kept. Keys are ``(segment id, ...)`` tuples. Not thread-safe: the reader's lock."""

    def __init__(self, capacity_bytes: int):
        self.capacity_bytes = capacity_bytes
        self.bytes_used = 0
        self._entries: collections.OrderedDict[tuple[Any, ...], tuple[Any, int]] = collections.OrderedDict()

    def __contains__(self, key: tuple[Any, ...]) -> bool:
        return key in self._entries

    def get(self, key: tuple[Any, ...]) -> Any | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def put(self, key: tuple[Any, ...], value: Any, weight_bytes: int) -> None:
        self.pop(key)
        if weight_bytes > self.capacity_bytes:
            return
        while self.bytes_used + weight_bytes > self.capacity_bytes:
            _, (_, evicted_bytes) = self._entries.popitem(last=False)
            self.bytes_used -= evicted_bytes
        self._entries[key] = (value, weight_bytes)
        self.bytes_used += weight_bytes

    def pop(self, key: tuple[Any, ...]) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.bytes_used -= entry[1]

    def drop_segment(self, segment_id: RemoteLogSegmentId) -> None:
        for key in [k for k in self._entries if k[0] == segment_id]:
            self.pop(key)


@dataclass
class _Chunk:
    data: bytes
    prefetched: bool  # fetched ahead and not taken by a read yet


class _Fetch:
    """A chunk fetch in flight, which other readers of the chunk wait for once it started."""

    def __init__(self, prefetch: bool):
        self.prefetch = prefetch  # a prefetch no read has waited for yet
        #: A demand fetch starts at once; a prefetch when the executor runs it, unless a read
        #: that needs the chunk first took it over.
        self.started = not prefetch
        self.future: concurrent.futures.Future[bytes] = concurrent.futures.Future()


class _ChunkCache:
    """The chunk cache of the ``.log`` objects, with the chunk fetches in flight and the
    prefetches (see the module docstring); guarded by the reader's ``lock``, whose ``counts``
    it keeps."""

    def __init__(
        self,
        store: RemoteStorageManager,
        chunk_bytes: int,
        capacity_bytes: int,
        executor: concurrent.futures.Executor | None,
        lock: threading.Lock,
        counts: collections.Counter[str],
    ):
        self._store = store
        self.chunk_bytes = chunk_bytes
        self.lru = _ByteLru(capacity_bytes)
        self._executor = executor
        self._lock = lock
        self._counts = counts
        self._in_flight: dict[tuple[RemoteLogSegmentId, int], _Fetch] = {}

    def range(self, metadata: RemoteLogSegmentMetadata, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the segment's ``.log`` from its chunks; shorter when the
        object ends first."""
        chunk_bytes = self.chunk_bytes
        parts = []
        position = start
        while position < end:
            index = position // chunk_bytes
            chunk = self._chunk(metadata, index)
            part = memoryview(chunk)[position - index * chunk_bytes : end - index * chunk_bytes]
            parts.append(part)
            position += len(part)
            if len(chunk) < chunk_bytes:  # the object ends in this chunk
                break
        return bytes(parts[0]) if len(parts) == 1 else b"".join(parts)  # (no part: start >= end)

    def _chunk(self, metadata: RemoteLogSegmentMetadata, index: int, wait: bool = True) -> bytes:
        """Chunk ``index`` of the segment's ``.log``: cached, fetched by another thread (waited
        for, unless not ``wait``), or fetched here."""
        key = (metadata.segment_id, index)
        with self._lock:
            chunk = self.lru.get(key)
            if chunk is not None:
                self._counts["chunk_cache_hits"] += 1
                if chunk.prefetched:
                    chunk.prefetched = False
                    self._counts["prefetches_used"] += 1
                return chunk.data
            awaited = self._in_flight.get(key) if wait else None
            if awaited is not None and awaited.started:
                self._counts["chunk_cache_hits"] += 1
                claimed, awaited.prefetch = awaited.prefetch, False
            else:
                # Fetched here: a prefetch still queued is taken over rather than waited for
                # (the executor's queue may be long, or be this very thread's).
                self._counts["chunk_cache_misses"] += 1
                if awaited is not None:
                    mine, awaited.started, awaited.prefetch = awaited, True, False
                else:
                    mine = None if key in self._in_flight else self._in_flight.setdefault(key, _Fetch(prefetch=False))
                awaited = None
        if awaited is None:
            return self._fetch_chunk(metadata, index, mine)
        try:
            data = awaited.future.result()
        except RemoteStorageError:
            if not claimed:
                raise  # another read's fetch failed just now: so does this read
            return self._chunk(metadata, index, wait=False)  # the prefetch failed: fetch it here
        if claimed:
            with self._lock:
                self._counts["prefetches_used"] += 1
        return data

    def _fetch_chunk(self, metadata: RemoteLogSegmentMetadata, index: int, fetch: _Fetch | None) -> bytes:
        """Fetch a chunk and cache it (an empty one, past the object's end, is not); resolve
        ``fetch`` (the in-flight entry, if any) with the outcome."""
        key = (metadata.segment_id, index)
        start = index * self.chunk_bytes
        try:
            data = self._store.fetch_log_segment(metadata, start, start + self.chunk_bytes - 1)
        except BaseException as exc:
            with self._lock:
                if fetch is not None and self._in_flight.get(key) is fetch:
                    del self._in_flight[key]
            if fetch is not None:
                fetch.future.set_exception(exc)
            raise
        with self._lock:
            if fetch is not None and self._in_flight.get(key) is fetch:
                del self._in_flight[key]
            self._counts["remote_bytes_read"] += len(data)
            if data:
                self.lru.put(key, _Chunk(data, fetch is not None and fetch.prefetch), len(data))
        if fetch is not None:
            fetch.future.set_result(data)
        return data

    def maybe_prefetch(self, metadata: RemoteLogSegmentMetadata, start: int, end: int, last: BatchHeader) -> None:
        """After a read of bytes ``[start, end)`` ending with batch ``last``: fetch the next
        chunk ahead if the read ended in the last part of its chunk (see the module docstring)
        and the segment goes on."""
        if self._executor is None or last.last_offset >= metadata.end_offset:
            return
        chunk_bytes = self.chunk_bytes
        following = (end - 1) // chunk_bytes + 1
        left_bytes = following * chunk_bytes - end
        if left_bytes >= max(chunk_bytes // PREFETCH_TAIL_DIVISOR, end - start):
            return
        if 0 < metadata.segment_size_bytes <= following * chunk_bytes:
            return
        key = (metadata.segment_id, following)
        with self._lock:
            if key in self.lru or key in self._in_flight:
                return
            fetch = self._in_flight[key] = _Fetch(prefetch=True)
            self._counts["prefetches_started"] += 1
        try:
            self._executor.submit(self._prefetch, metadata, following, fetch)
        except RuntimeError as exc:  # the executor was shut down
            with self._lock:
                del self._in_flight[key]
            fetch.future.set_exception(RemoteStorageError(f"prefetch not started: {exc}"))

    def _prefetch(self, metadata: RemoteLogSegmentMetadata, index: int, fetch: _Fetch) -> None:
        with self._lock:
            if fetch.started:  # a read took it over
                return
            fetch.started = True
        try:
            self._fetch_chunk(metadata, index, fetch)
        except RemoteStorageError as exc:
            logger.info("prefetch of chunk %d of remote segment %s failed: %s", index, metadata.segment_id, exc)


class RemoteLogReader:
    """See the module docstring. One per partition, over its metadata cache and the store.

    Args:
        cache: the partition's remote segments (see :meth:`apply` for its events).
        store: the object store holding them.
        index_cache_bytes: the bound of the index cache.
        chunk_bytes: the size of a ``.log`` chunk, one ranged read.
        chunk_cache_bytes: the bound of the chunk cache, at least one chunk.
        executor: where chunks are fetched ahead of sequential reads; None: never.

    Raises:
        InvalidConfigError: a size is not positive, or the chunk cache holds no chunk.

    Example::

        reader = RemoteLogReader(cache, store, executor=prefetch_pool)
        data = reader.read(offset, 1 << 20, leader_epochs.entries)
    """

    def __init__(
        self,
        cache: RemoteLogMetadataCache,
        store: RemoteStorageManager,
        *,
        index_cache_bytes: int = DEFAULT_INDEX_CACHE_BYTES,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        chunk_cache_bytes: int = DEFAULT_CHUNK_CACHE_BYTES,
        executor: concurrent.futures.Executor | None = None,
    ):
        if min(index_cache_bytes, chunk_bytes) <= 0 or chunk_cache_bytes < chunk_bytes:
            raise InvalidConfigError(
                f"remote reads need positive cache and chunk sizes and a chunk cache of at least one chunk: "
                f"index_cache_bytes={index_cache_bytes}, chunk_bytes={chunk_bytes}, "
                f"chunk_cache_bytes={chunk_cache_bytes}"
            )
        self.metadata_cache = cache
        self.store = store
        self._lock = threading.Lock()
        self._counts: collections.Counter[str] = collections.Counter()
        self._indexes = _ByteLru(index_cache_bytes)
        self._chunks = _ChunkCache(store, chunk_bytes, chunk_cache_bytes, executor, self._lock, self._counts)

    # --- metadata -----------------------------------------------------------------------

    def apply(self, event: RemoteLogEvent) -> None:
        """Apply the partition's next ``__remote_log_metadata`` event to the metadata cache
        (:meth:`RemoteLogMetadataCache.apply`, which raises as it does), under the reader's
        lock; a segment no longer readable leaves both caches."""
        with self._lock:
            self.metadata_cache.apply(event)
            if isinstance(event, RemoteLogLeaderEpoch):
                return
            metadata = self.metadata_cache.segment(event.segment_id)
            if metadata is None or metadata.state != _FINISHED:
                self._drop(event.segment_id)

    def history_for(self, local: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
        """The epoch history remote reads of a replica go by: its own (``local``), preceded by
        the remote tier's below its first entry (:meth:`epoch_history_below`), which a replica
        that restarted its log at its leader's local log start does not know."""
        if not local:
            return list(local)
        remote = self.epoch_history_below(local[0][1])
        return remote + [(epoch, start) for epoch, start in local if not remote or epoch > remote[-1][0]]

    def epoch_history_below(self, offset: int) -> list[tuple[int, int]]:
        """The leader epochs of the readable segments below ``offset``, as ``(epoch, start
        offset)`` pairs, both rising: the remote tier's epoch history, for a replica whose own
        starts later (one that restarted its log at its leader's local log start; Kafka restores
        its epochs from the remote leader-epoch checkpoint then). Where copies of diverged
        histories overlap, the first copy of each offset range counts."""
        with self._lock:
            segments = sorted(self.metadata_cache.segments(_FINISHED), key=lambda m: m.start_offset)
        history: list[tuple[int, int]] = []
        for metadata in segments:
            for epoch, start in metadata.segment_leader_epochs:
                if start < offset and (not history or epoch > history[-1][0] and start > history[-1][1]):
                    history.append((epoch, start))
        return history

    def stats(self) -> RemoteReadStats:
        """The counters and cache sizes, as of now."""
        with self._lock:
            return RemoteReadStats(
                **dict(self._counts),
                index_cache_bytes=self._indexes.bytes_used,
                chunk_cache_bytes=self._chunks.lru.bytes_used,
            )

    # --- reads --------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, leader_epoch_history: Sequence[tuple[int, int]]) -> bytes:
        """Whole batches of the remote segment holding ``offset``, from the batch holding it,
        up to ``max_bytes`` (at most MAX_READ_BYTES; but at least one batch).

        Args:
            offset: the first offset wanted.
            max_bytes: the most bytes wanted.
            leader_epoch_history: the log's ``(epoch, start offset)`` pairs, rising: the epoch
                holding ``offset`` picks the segment.

        Returns:
            The raw batch bytes, exactly as stored; they stop at the segment's end.

        Raises:
            OffsetOutOfRangeError: ``offset`` is below the remote log start, or no readable
                remote segment holds it in its epoch.
            InvalidRequestError: ``max_bytes`` is not a non-negative integer.
            CorruptRecordError: the remote bytes are not whole, valid batches of the segment.
            RemoteStorageError: the store failed (retriable).

        Example::

            if offset < log.log_start_offset:
                data = reader.read(offset, 1 << 20, leader_epochs.entries)
        """
        max_bytes = read_max_bytes(max_bytes)
        metadata = self._segment_at(offset, leader_epoch_history)
        with self._forgotten_if_corrupt(metadata):
            position, first = self._find_batch(metadata, offset)
            end, headers = self._extent(metadata, position, first, max_bytes)
            data = self._whole(metadata, position, end)
            _check_crcs(metadata, position, data, headers)
        self._chunks.maybe_prefetch(metadata, position, end, headers[-1])
        return data

    def offset_for_timestamp(
        self,
        timestamp_ms: int,
        *,
        start_offset: int = 0,
        leader_epoch_history: Sequence[tuple[int, int]] | None = None,
    ) -> TimestampOffset | None:
        """The first record in the remote tier at or past ``start_offset`` with a timestamp
        >= ``timestamp_ms`` (as :meth:`Log.offsets_for_time <raylog.storage.log.Log.offsets_for_time>`
        answers), or None if there is none.

        Args:
            start_offset: records below it do not count (the log start offset, which
                DeleteRecords may move into a remote segment).
            leader_epoch_history: as for :meth:`read`: the segments along it are searched;
                None: every readable segment in offset order (an overlapping one skipped).

        Raises:
            CorruptRecordError, RemoteStorageError: as :meth:`read`.
        """
        for metadata in self._lineage(start_offset, leader_epoch_history):
            if metadata.max_timestamp_ms < timestamp_ms:
                continue
            with self._forgotten_if_corrupt(metadata):
                found = self._timestamp_in(metadata, timestamp_ms, start_offset)
            if found is not None:
                return found
        return None

    def aborted_transactions(
        self,
        start_offset: int,
        end_offset: int,
        *,
        leader_epoch_history: Sequence[tuple[int, int]] | None = None,
    ) -> list[tuple[int, int]]:
        """``(producer_id, first_offset)`` of every aborted transaction whose marker is in the
        remote tier that a read of ``[start_offset, end_offset)`` may meet (marker at or past
        ``start_offset``, first offset below ``end_offset``), by marker offset: the shape of
        :meth:`TransactionIndex.collect <raylog.storage.txn_index.TransactionIndex.collect>`,
        whose answer for the local segments the caller adds (without duplicates).

        The segments from the one holding ``start_offset`` on are searched until one ends at
        or past ``end_offset`` with no transaction begun below ``end_offset`` still open (its
        producer snapshot says so): any later marker ends a transaction that began later.
        Kafka stops instead at the first marker at or past ``end_offset``, which misses a
        transaction begun in the range and aborted after another one.

        Args:
            leader_epoch_history: as for :meth:`offset_for_timestamp`.

        Raises:
            CorruptRecordError: a transaction index is not valid.
            RemoteStorageError: the store failed.
        """
        entries = self.aborted_entries(start_offset, end_offset, leader_epoch_history=leader_epoch_history)
        return [(entry.producer_id, entry.first_offset) for entry in entries]

    def aborted_entries(
        self,
        start_offset: int,
        end_offset: int,
        *,
        leader_epoch_history: Sequence[tuple[int, int]] | None = None,
    ) -> list[AbortedTxn]:
        """The entries :meth:`aborted_transactions` answers with, whole (with their marker
        offsets, as :func:`raylog.storage.history.segment_table` takes them).

        Raises:
            CorruptRecordError, RemoteStorageError: as :meth:`aborted_transactions`.
        """
        found = []
        for metadata in self._lineage(start_offset, leader_epoch_history):
            with self._forgotten_if_corrupt(metadata):
                entries = self._transactions(metadata)
            found += [e for e in entries if e.marker_offset >= start_offset and e.first_offset < end_offset]
            if metadata.end_offset + 1 >= end_offset and self._first_open_offset(metadata) >= end_offset:
                break
        return found

    @contextlib.contextmanager
    def _forgotten_if_corrupt(self, metadata: RemoteLogSegmentMetadata) -> Iterator[None]:
        """Drop the segment's cached chunks and indexes when the block finds its bytes corrupt:
        they may have been garbled on their way, and the next read fetches them anew."""
        try:
            yield
        except CorruptRecordError:
            with self._lock:
                self._drop(metadata.segment_id)
            raise

    def _drop(self, segment_id: RemoteLogSegmentId) -> None:
        """Remove a segment's entries from both caches; under the lock."""
        self._indexes.drop_segment(segment_id)
        self._chunks.lru.drop_segment(segment_id)

    # --- finding segments ---------------------------------------------------------------

    def _segment_at(self, offset: int, leader_epoch_history: Sequence[tuple[int, int]]) -> RemoteLogSegmentMetadata:
        """The readable segment holding ``offset`` in the epoch the history says wrote it.

        Raises:
            OffsetOutOfRangeError: none does (or the offset is below the remote log start).
        """
        starts = [start for _, start in leader_epoch_history]
        i = bisect.bisect_right(starts, offset) - 1
        epoch = leader_epoch_history[i][0] if i >= 0 else None
        with self._lock:
            metadata = self.metadata_cache.segment_for(epoch, offset) if epoch is not None else None
            if metadata is not None:
                return metadata
            log_start = self.metadata_cache.remote_log_start_offset  # (a scan of every segment)
        name = f"{self.metadata_cache.topic}-{self.metadata_cache.partition}"
        if log_start is None or offset < log_start:
            raise OffsetOutOfRangeError(f"offset {offset} is below the remote log start {log_start} of {name}")
        raise OffsetOutOfRangeError(f"no remote segment of {name} holds offset {offset} in leader epoch {epoch}")

    def _lineage(
        self, from_offset: int, leader_epoch_history: Sequence[tuple[int, int]] | None
    ) -> Iterator[RemoteLogSegmentMetadata]:
        """The readable segments from the one holding ``from_offset`` (or the first after it),
        in offset order: along the epoch history, or, without one, every segment that does not
        overlap the one before."""
        if leader_epoch_history is None:
            with self._lock:
                segments = self.metadata_cache.segments(_FINISHED)
            previous_end = -1
            for metadata in segments:
                if metadata.end_offset >= from_offset and metadata.start_offset > previous_end:
                    previous_end = metadata.end_offset
                    yield metadata
            return
        with self._lock:
            log_start = self.metadata_cache.remote_log_start_offset
        if log_start is None:
            return
        offset = max(from_offset, log_start)
        while True:
            try:
                metadata = self._segment_at(offset, leader_epoch_history)
            except OffsetOutOfRangeError:
                return
            yield metadata
            offset = metadata.end_offset + 1

    # --- batches ------------------------------------------------------------------------

    def _find_batch(self, metadata: RemoteLogSegmentMetadata, offset: int) -> tuple[int, BatchHeader]:
        """The position and header of the segment's first batch holding an offset >= ``offset``
        (``offset`` at most the segment's end offset), scanned from its offset index's entry."""
        indexed_offset, position = self._offset_index(metadata).lookup(offset)
        header = self._header_at(metadata, position, metadata.start_offset)
        if position and header is not None and header.base_offset != indexed_offset:
            raise _corrupt(metadata, position, f"the offset index puts offset {indexed_offset} here, not the batch")
        while header is not None and header.next_offset <= offset:
            position += header.size
            header = self._header_at(metadata, position, header.next_offset)
        if header is None:
            raise _corrupt(metadata, position, f"the .log ends before offset {offset}")
        return position, header

    def _extent(
        self, metadata: RemoteLogSegmentMetadata, position: int, first: BatchHeader, max_bytes: int
    ) -> tuple[int, list[BatchHeader]]:
        """Where the whole batches from ``first`` (at ``position``) that fit in ``max_bytes``
        end (``first`` at least), and their headers."""
        bound = position + max_bytes
        headers = [first]
        end = position + first.size
        while headers[-1].last_offset < metadata.end_offset and end + HEADER_SIZE <= bound:
            header = self._header_at(metadata, end, headers[-1].next_offset)
            if header is None or end + header.size > bound:
                break
            headers.append(header)
            end += header.size
        return end, headers

    def _header_at(self, metadata: RemoteLogSegmentMetadata, position: int, min_offset: int) -> BatchHeader | None:
        """The checked header of the batch at ``position``, or None at the object's end.

        Raises:
            CorruptRecordError: the header fails :func:`record_batch.read_header`, its offsets
                start below ``min_offset`` (they must rise) or leave the segment's range, or
                the object ends inside it.
        """
        data = self._chunks.range(metadata, position, position + HEADER_SIZE)
        if not data:
            return None
        try:
            header = record_batch.read_header(data)
        except CorruptRecordError as exc:
            raise _corrupt(metadata, position, str(exc)) from exc
        if header.base_offset < min_offset or header.last_offset > metadata.end_offset:
            raise _corrupt(
                metadata,
                position,
                f"batch of offsets [{header.base_offset}, {header.last_offset}] where offsets from {min_offset} "
                f"up to {metadata.end_offset} belong",
            )
        return header

    def _whole(self, metadata: RemoteLogSegmentMetadata, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the ``.log``, which its batch headers promise."""
        data = self._chunks.range(metadata, start, end)
        if len(data) != end - start:
            raise _corrupt(metadata, start + len(data), f"the .log ends inside a batch ending at byte {end}")
        return data

    def _timestamp_in(
        self, metadata: RemoteLogSegmentMetadata, timestamp_ms: int, start_offset: int
    ) -> TimestampOffset | None:
        """The segment's first record at or past ``start_offset`` with a timestamp >=
        ``timestamp_ms``, scanned from where its time index says records may be that new."""
        target = max(self._time_index(metadata).lookup(timestamp_ms), start_offset, metadata.start_offset)
        if target > metadata.end_offset:
            return None
        position, header = self._find_batch(metadata, target)
        while True:
            if header.max_timestamp >= timestamp_ms:
                batch = self._whole(metadata, position, position + header.size)
                try:
                    found = first_record_at_or_after(batch, timestamp_ms, start_offset)
                except CorruptRecordError as exc:
                    raise _corrupt(metadata, position, str(exc)) from exc
                if found is not None:
                    return found
            if header.last_offset >= metadata.end_offset:
                return None
            position += header.size
            following = self._header_at(metadata, position, header.next_offset)
            if following is None:
                return None
            header = following

    # --- indexes ------------------------------------------------------------------------

    def _offset_index(self, metadata: RemoteLogSegmentMetadata) -> OffsetEntries:
        return self._index(metadata, IndexType.OFFSET, lambda data: OffsetEntries(metadata.start_offset, data))

    def _time_index(self, metadata: RemoteLogSegmentMetadata) -> TimeEntries:
        return self._index(metadata, IndexType.TIMESTAMP, lambda data: TimeEntries(metadata.start_offset, data))

    def _transactions(self, metadata: RemoteLogSegmentMetadata) -> tuple[AbortedTxn, ...]:
        """The segment's aborted transactions by marker offset (none without an index)."""
        return self._index(metadata, IndexType.TRANSACTION, lambda data: tuple(txn_index.decode(data)), absent=())

    def _first_open_offset(self, metadata: RemoteLogSegmentMetadata) -> int:
        """The lowest first offset of a transaction open at the segment's end, per its producer
        snapshot: _NO_OPEN_TRANSACTION for none, _OPEN_UNKNOWN without a readable snapshot."""
        return self._index(metadata, IndexType.PRODUCER_SNAPSHOT, _first_open_offset, absent=_OPEN_UNKNOWN)

    def _index(
        self, metadata: RemoteLogSegmentMetadata, kind: IndexType, parse: Callable[[bytes], Any], absent: Any = None
    ) -> Any:
        """One of the segment's indexes, parsed, from the index cache or fetched into it.
        ``absent``: the answer when the object is not there (None: that raises).

        Raises:
            CorruptRecordError: ``parse`` refused the bytes (with ValueError, or itself).
            RemoteResourceNotFoundError: the object is not there and ``absent`` is None.
            RemoteStorageError: the store failed.
        """
        key = (metadata.segment_id, kind)
        with self._lock:
            value = self._indexes.get(key)
            self._counts["index_cache_hits" if value is not None else "index_cache_misses"] += 1
        if value is not None:
            return value
        try:
            data = self.store.fetch_index(metadata, kind)
        except RemoteResourceNotFoundError:
            if absent is None:
                raise
            data, value = b"", absent
        else:
            try:
                value = parse(data)
            except (ValueError, CorruptRecordError) as exc:
                raise _corrupt(metadata, 0, f"its {kind.value} object is not valid: {exc}") from exc
        with self._lock:
            self._counts["remote_bytes_read"] += len(data)
            self._indexes.put(key, value, len(data) + INDEX_ENTRY_OVERHEAD_BYTES)
        return value


def _first_open_offset(data: bytes) -> int:
    try:
        rows = producer_snapshot.decode(data)
    except CorruptRecordError as exc:
        logger.warning("a remote producer snapshot is not valid (%s): transactions open at its end are unknown", exc)
        return _OPEN_UNKNOWN
    return min((row.txn_first_offset for row in rows if row.txn_first_offset >= 0), default=_NO_OPEN_TRANSACTION)


def _check_crcs(metadata: RemoteLogSegmentMetadata, position: int, data: bytes, headers: list[BatchHeader]) -> None:
    """Raises CorruptRecordError unless each batch of ``data`` (read at ``position``, of
    ``headers``) has the CRC its header says."""
    view = memoryview(data)
    at = 0
    for header in headers:
        try:
            record_batch.check_crc(view, at, header)
        except CorruptRecordError as exc:
            raise _corrupt(metadata, position + at, str(exc)) from exc
        at += header.size


def _corrupt(metadata: RemoteLogSegmentMetadata, position: int, problem: str) -> CorruptRecordError:
    """The error for remote bytes that are not what they must be, logged."""
    message = (
        f"remote segment {metadata.segment_id} (offsets {metadata.start_offset} to {metadata.end_offset}) "
        f"at byte {position}: {problem}"
    )
    logger.warning("%s", message)
    return CorruptRecordError(message)
