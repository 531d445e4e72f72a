"""A log segment: one ``.log`` file of batches with its ``.index`` and ``.timeindex``.

Files are named by the segment's base offset in 20 digits (``00000000000000000000.log``).
A segment holds the batches with offsets in ``[base_offset, next_offset)``. A segment the
cleaner rewrote may start above its base offset and have gaps between and inside batches;
while it is written and swapped in, its files carry a suffix (``.log.cleaned``,
``.log.swap``; see :mod:`raylog.storage.cleaner`).

Invariants: batches are whole and their offsets rise; every index entry points at the
start of a batch; ``max_timestamp`` is the largest record timestamp in the segment (-1
when empty).

A write that fails (full disk, I/O error) is taken back whole: :meth:`append` cuts the
files back to where they were; if even that fails the segment is ``torn`` and its log
must stop using it (see :class:`~raylog.storage.log.Log`).

Concurrency: as :class:`~raylog.storage.file_records.FileRecords` — one writer thread,
concurrent readers of what was published.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from raylog.common import record_batch
from raylog.common.record_batch import HEADER_SIZE

from ..errors import CorruptRecordError, StorageError
from . import faults
from .file_records import FileRecords
from .index import OffsetIndex, TimeIndex

#: Bytes read at a time when recovery verifies a segment's batches.
RECOVERY_CHUNK_BYTES = 8 * 1024 * 1024
#: Relative offsets are u32 in the index; Kafka keeps them within an int32.
MAX_RELATIVE_OFFSET = 2**31 - 1
#: The suffix of a deleted segment's files until ``file.delete.delay.ms`` has passed.
DELETED_SUFFIX = ".deleted"


def file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class AppendedBatch(NamedTuple):
    """What a segment needs to know of a batch it appends (offsets as stamped)."""

    base_offset: int
    next_offset: int
    max_timestamp: int
    size: int


class SegmentMark(NamedTuple):
    """A segment's end state, to roll an append back to (:meth:`LogSegment.roll_back`)."""

    size: int
    offset_entries: int
    time_entries: int
    next_offset: int
    max_timestamp: int
    first_batch_timestamp: int | None
    bytes_since_index_entry: int


class LogSegment:
    """See the module docstring."""

    def __init__(
        self,
        directory: str,
        base_offset: int,
        *,
        index_interval_bytes: int,
        index_max_bytes: int,
        created_ms: int,
        suffix: str = "",
    ):
        self.base_offset = base_offset
        self.created_ms = created_ms
        self.index_interval_bytes = index_interval_bytes
        self.records = FileRecords(os.path.join(directory, file_name(base_offset, ".log" + suffix)))
        try:
            self.offset_index = OffsetIndex(
                os.path.join(directory, file_name(base_offset, ".index" + suffix)), base_offset, index_max_bytes
            )
            self.time_index = TimeIndex(
                os.path.join(directory, file_name(base_offset, ".timeindex" + suffix)), base_offset, index_max_bytes
            )
        except StorageError:
            self.records.close()
            raise
        self.next_offset = base_offset
        self.max_timestamp = -1
        #: Max timestamp of the first batch: segment.ms measures from it (as Kafka does).
        self.first_batch_timestamp: int | None = None
        self._bytes_since_index_entry = 0
        #: ``(next_offset, size)`` published together after each change, for readers in
        #: other threads: the bytes up to ``size`` hold exactly the offsets below ``next_offset``.
        self.published = (base_offset, 0)
        #: A failed write could not be taken back: the files hold bytes past their state.
        self.torn = False

    @property
    def size(self) -> int:
        return self.records.size

    def _publish_end(self) -> None:
        self.published = (self.next_offset, self.records.size)

    # --- writing ----------------------------------------------------------------------

    def append(self, buffers: list, batches: list[AppendedBatch]) -> None:
        """Write the bytes of ``batches`` (already validated and stamped) and index them.

        Raises:
            StorageError: a write failed; the segment is as it was before the call, or
                ``torn`` if it could not be cut back.
        """
        mark = self.mark()
        try:
            position = self.records.append(buffers)
            for batch in batches:
                self._index(batch, position)
                position += batch.size
        except StorageError:
            self.roll_back(mark)
            raise
        self._publish_end()

    def mark(self) -> SegmentMark:
        return SegmentMark(
            self.records.size,
            len(self.offset_index),
            len(self.time_index),
            self.next_offset,
            self.max_timestamp,
            self.first_batch_timestamp,
            self._bytes_since_index_entry,
        )

    def roll_back(self, mark: SegmentMark) -> None:
        """Cut the files and the state back to ``mark`` (taken since the last truncation),
        torn bytes of a failed write included; on failure the segment is ``torn``.

        Raises:
            StorageError: a file could not be cut.
        """
        try:
            self.records.truncate_to(mark.size)
            self.offset_index.truncate_entries(mark.offset_entries)
            self.time_index.truncate_entries(mark.time_entries)
        except StorageError:
            self.torn = True
            raise
        self.next_offset, self.max_timestamp = mark.next_offset, mark.max_timestamp
        self.first_batch_timestamp = mark.first_batch_timestamp
        self._bytes_since_index_entry = mark.bytes_since_index_entry
        self._publish_end()

    def _index(self, batch: AppendedBatch, position: int) -> None:
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = batch.max_timestamp
        if self._bytes_since_index_entry > self.index_interval_bytes:
            # Every record below this batch is no newer than max_timestamp (so far).
            self.time_index.maybe_append(self.max_timestamp, batch.base_offset)
            self.offset_index.append(batch.base_offset, position)
            self._bytes_since_index_entry = 0
        self._bytes_since_index_entry += batch.size
        self.max_timestamp = max(self.max_timestamp, batch.max_timestamp)
        self.next_offset = batch.next_offset

    def is_full_for(self, size: int, last_offset: int, segment_bytes: int) -> bool:
        """True when ``size`` more bytes up to ``last_offset`` must go into a new segment."""
        return self.size > 0 and (
            self.size + size > segment_bytes
            or self.offset_index.is_full
            or self.time_index.is_full
            or last_offset - self.base_offset > MAX_RELATIVE_OFFSET
        )

    def time_waited_ms(self, now_ms: int, incoming_max_timestamp: int) -> int:
        """How long this segment has been open, by record time when it has records."""
        if self.first_batch_timestamp is None:
            return now_ms - self.created_ms
        return incoming_max_timestamp - self.first_batch_timestamp

    # --- reading ----------------------------------------------------------------------

    def find_position(self, offset: int, end: int | None = None) -> int | None:
        """Position of the first batch holding an offset >= ``offset``; None if none."""
        end = self.size if end is None else end
        _, start = self.offset_index.lookup(offset)
        for position, header in self.records.batch_headers(start, end):
            if header.next_offset > offset:
                return position
        return None

    def end_position(self, start: int, max_bytes: int, limit: int) -> int:
        """End of the whole batches from ``start`` that fit in ``max_bytes`` and end by
        ``limit``; at least one batch when one starts before ``limit``."""
        bound = min(limit, start + max_bytes)
        position = max(start, self.offset_index.lookup_position(bound))
        for batch_position, header in self.records.batch_headers(position, limit):
            if batch_position + header.size > bound:
                break
            position = batch_position + header.size
        if position == start and start < limit:
            position = start + record_batch.read_header(self.records.read(start, HEADER_SIZE)).size
        return position

    def read(self, start: int, end: int) -> bytes:
        return self.records.read(start, end - start)

    # --- loading and recovery ---------------------------------------------------------

    def load(self) -> None:
        """Open an existing segment that was flushed: trust its indexes if they pass the
        sanity checks (else rebuild them from batch headers) and find its end.

        Raises:
            CorruptRecordError: the batch headers do not walk cleanly (recover instead).
        """
        size = self.size
        loaded = self.offset_index.load() and self.offset_index.sanity_check(size)
        if not loaded or (len(self.offset_index) == 0 and size > self.index_interval_bytes):
            self._rebuild_indexes()  # unreadable, or empty where it cannot be (deleted)
            return
        position = self.offset_index.last_position
        last_indexed = self.offset_index.lookup(self.base_offset + MAX_RELATIVE_OFFSET)[0]
        self._bytes_since_index_entry = 0
        self.next_offset = self.base_offset
        max_ts = -1
        for batch_position, header in self.records.batch_headers(position, size):
            # (An unindexed segment's first batch may start above the base: compacted.)
            if batch_position == position and len(self.offset_index) and header.base_offset != last_indexed:
                self._rebuild_indexes()  # the index points at the wrong batch
                return
            _require_rising(header, self.next_offset, self.records.path)
            self._bytes_since_index_entry += header.size
            self.next_offset = header.next_offset
            max_ts = max(max_ts, header.max_timestamp)
        if not (self.time_index.load() and self.time_index.sanity_check(self.next_offset)):
            self._rebuild_indexes()
            return
        self.max_timestamp = max(max_ts, self.time_index.last_timestamp)
        self._load_first_timestamp()
        self._publish_end()

    def _load_first_timestamp(self) -> None:
        if self.size:
            self.first_batch_timestamp = record_batch.read_header(self.records.read(0, HEADER_SIZE)).max_timestamp

    def _rebuild_indexes(self) -> None:
        self._reset()
        for position, header in self.records.batch_headers(0, self.size):
            _require_rising(header, self.next_offset, self.records.path)
            self._index(_appended(header), position)
        self._publish_end()

    def _reset(self) -> None:
        self.offset_index.reset()
        self.time_index.reset()
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self.first_batch_timestamp = None
        self._bytes_since_index_entry = 0

    def recover(self) -> int:
        """Verify every batch (header, size, CRC, rising offsets), rebuild the indexes,
        and cut the file at the first bad byte.

        Returns:
            The number of bytes cut off (0 when the segment was whole).
        """
        self._reset()
        size = self.size
        position = 0
        chunk, chunk_start = b"", 0
        while position < size:
            if position + HEADER_SIZE > chunk_start + len(chunk):
                chunk_start, chunk = position, self.records.read(position, RECOVERY_CHUNK_BYTES)
            try:
                header = record_batch.read_header(chunk, position - chunk_start)
                if position + header.size > size:  # (not max.message.bytes: it may have been lowered since)
                    break
                if position + header.size > chunk_start + len(chunk):
                    chunk_start = position
                    chunk = self.records.read(position, max(RECOVERY_CHUNK_BYTES, header.size))
                record_batch.check_crc(memoryview(chunk), position - chunk_start, header)
            except CorruptRecordError:
                break
            if header.base_offset < self.next_offset or header.last_offset - self.base_offset > MAX_RELATIVE_OFFSET:
                break
            self._index(_appended(header), position)
            position += header.size
        truncated = size - position
        self.records.truncate_to(position)
        self._publish_end()
        return truncated

    def truncate_to(self, offset: int) -> int:
        """Remove every batch holding an offset >= ``offset``, durably (the files are fsync'd).

        Returns:
            The bytes removed.

        Raises:
            StorageError: a file could not be cut or fsync'd; the segment is ``torn``.
        """
        position = self.find_position(offset)
        if position is None:
            return 0
        try:
            removed = self._truncate(position)
            self.flush()
        except StorageError:
            self.torn = True
            raise
        return removed

    def _truncate(self, position: int) -> int:
        removed = self.size - position
        cut_offset = record_batch.read_header(self.records.read(position, HEADER_SIZE)).base_offset
        self.records.truncate_to(position)
        self.offset_index.truncate_to(cut_offset)
        self.time_index.truncate_to(cut_offset)
        # Re-derive the end state from the last indexed batch onwards.
        self._bytes_since_index_entry = 0
        self.next_offset = self.base_offset
        max_ts = self.time_index.last_timestamp
        for _, header in self.records.batch_headers(self.offset_index.last_position, position):
            self._bytes_since_index_entry += header.size
            self.next_offset = header.next_offset
            max_ts = max(max_ts, header.max_timestamp)
        self.max_timestamp = max_ts if position else -1
        if not position:
            self.first_batch_timestamp = None
        self._publish_end()
        return removed

    # --- lifecycle --------------------------------------------------------------------

    def flush(self) -> None:
        self.records.flush()
        self.offset_index.flush()
        self.time_index.flush()

    def close(self) -> None:
        self.records.close()
        self.offset_index.close()
        self.time_index.close()

    def change_suffix(self, old: str, new: str) -> None:
        """Rename the three files from ``<name>{old}`` to ``<name>{new}``: the indexes
        first, the ``.log`` last (a ``.log`` file's name is what recovery goes by).

        Raises:
            StorageError: a rename failed.
        """
        for file in (self.offset_index, self.time_index, self.records):
            assert file.path.endswith(old), f"{file.path} does not end with {old!r}"
            _rename(file, file.path[: len(file.path) - len(old)] + new)

    def mark_deleted(self) -> None:
        """Rename the three files to ``<name>.deleted`` (Kafka's name for a segment waiting for
        ``file.delete.delay.ms``), the ``.log`` first: a crash midway leaves no segment that
        a restart would load (it deletes ``.deleted`` files and indexes without a ``.log``).
        Readers holding this segment keep reading; :meth:`delete` unlinks the renamed files.

        Raises:
            StorageError: a rename failed.
        """
        for file in (self.records, self.offset_index, self.time_index):
            _rename(file, file.path + DELETED_SUFFIX, missing_ok=file is not self.records)

    def delete(self) -> None:
        """Unlink the files; readers holding this segment can still finish their reads."""
        self.records.delete()
        self.offset_index.delete()
        self.time_index.delete()


def _rename(file, path: str, missing_ok: bool = False) -> None:
    """Rename one of a segment's files (its ``path`` follows)."""
    try:
        faults.check_write(path)
        os.replace(file.path, path)
    except FileNotFoundError:
        if not missing_ok:
            raise StorageError(f"cannot rename {file.path} to {path}: it is gone") from None
    except OSError as exc:
        raise StorageError(f"cannot rename {file.path} to {path}: {exc}") from exc
    file.path = path


def _appended(header: record_batch.BatchHeader) -> AppendedBatch:
    return AppendedBatch(header.base_offset, header.next_offset, header.max_timestamp, header.size)


def _require_rising(header: record_batch.BatchHeader, next_offset: int, path: str) -> None:
    """Offsets rise from batch to batch; a header that goes back is garbage, not a batch."""
    if header.base_offset < next_offset:
        raise CorruptRecordError(f"batch at offset {header.base_offset} in {path} goes back below {next_offset}")
