"""Sparse indexes of a segment: offset -> position and timestamp -> offset.

Both are files of fixed-size big-endian entries, appended as the segment grows, mirrored
in memory for binary search. Entries rise strictly in both fields.

    OffsetIndex entry (8 bytes):  relative_offset u32 | position u32
        the batch whose base offset is base_offset + relative_offset starts at position.
    TimeIndex entry (12 bytes):   timestamp i64 | relative_offset u32
        every record below base_offset + relative_offset has a timestamp <= timestamp.

An index is a hint, never the truth: the log rebuilds it from the batches whenever it
recovers a segment or finds an index that fails :meth:`sanity_check`.

:class:`OffsetIndex` and :class:`TimeIndex` keep a file and its entries in step;
:class:`OffsetEntries` and :class:`TimeEntries` are the same look-ups over the bytes of an
index file read whole, read-only (the copies of a segment's indexes in tiered storage:
:mod:`raylog.storage.remote_log_reader`).

Concurrency: one writer thread appends or truncates; lookups from other threads see a
consistent prefix of the entries (arrays only grow at the end; truncation happens only
while the log holds its writer role and no reader can see the removed data).
:class:`OffsetEntries` and :class:`TimeEntries` never change once parsed: any thread.
"""

from __future__ import annotations

import bisect
import os
import struct
import weakref
from array import array

import numpy as np

from ..errors import StorageError
from . import faults


class _Entries:
    """An index's entries in memory: ``(key, value)`` pairs rising strictly in both, parsed
    from the bytes of an index file (the local file, or a copy fetched from tiered storage:
    :class:`OffsetEntries`, :class:`TimeEntries`).

    Raises:
        ValueError: ``data`` is not a whole number of entries rising in both fields.
    """

    ENTRY: struct.Struct
    _DTYPE: np.dtype

    def __init__(self, base_offset: int, data: bytes = b""):
        self.base_offset = base_offset
        self._keys = array("q")
        self._values = array("q")
        if data and not self._parse(data):
            raise ValueError(f"{len(data)} bytes are not an index of rising {self.ENTRY.size}-byte entries")

    def __len__(self) -> int:
        return len(self._keys)

    def _parse(self, data: bytes) -> bool:
        """Take the entries of an index file's bytes; False (entries unchanged) if malformed."""
        if len(data) % self.ENTRY.size:
            return False
        rows = np.frombuffer(data, dtype=self._DTYPE)
        keys, values = rows["k"].astype(np.int64), rows["v"].astype(np.int64)
        if len(rows) > 1 and (np.any(np.diff(keys) <= 0) or np.any(np.diff(values) <= 0)):
            return False
        self._keys = array("q", keys.tobytes())
        self._values = array("q", values.tobytes())
        return True


class OffsetEntries(_Entries):
    """Offset -> file position of the batch holding it (see module docstring), read-only:
    ``OffsetEntries(base_offset, data)`` parses an offset index file's bytes."""

    ENTRY = struct.Struct(">II")
    _DTYPE = np.dtype([("k", ">u4"), ("v", ">u4")])

    def lookup(self, offset: int) -> tuple[int, int]:
        """The entry with the largest offset <= ``offset``, else ``(base_offset, 0)``."""
        i = bisect.bisect_right(self._keys, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._keys[i], self._values[i]

    def lookup_position(self, position: int) -> int:
        """The largest indexed position <= ``position`` (0 when none)."""
        i = bisect.bisect_right(self._values, position) - 1
        return self._values[i] if i >= 0 else 0

    @property
    def last_position(self) -> int:
        return self._values[-1] if self._values else 0


class TimeEntries(_Entries):
    """Timestamp -> offset below which no record is newer (see module docstring), read-only:
    ``TimeEntries(base_offset, data)`` parses a time index file's bytes."""

    ENTRY = struct.Struct(">qI")
    _DTYPE = np.dtype([("k", ">i8"), ("v", ">u4")])

    def lookup(self, timestamp_ms: int) -> int:
        """An offset below which every record is older than ``timestamp_ms``."""
        i = bisect.bisect_left(self._keys, timestamp_ms) - 1
        return self.base_offset + (self._values[i] if i >= 0 else 0)

    @property
    def last_timestamp(self) -> int:
        return self._keys[-1] if self._keys else -1


class _Index(_Entries):
    """An index file: its entries (:class:`_Entries`) kept in step with the file."""

    def __init__(self, path: str, base_offset: int, max_bytes: int):
        super().__init__(base_offset)
        self.path = path
        self.max_entries = max(1, max_bytes // self.ENTRY.size)
        try:
            faults.check_create(path)
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StorageError(f"cannot open index {path}: {exc}") from exc
        self._close = weakref.finalize(self, os.close, self._fd)

    @property
    def is_full(self) -> bool:
        return len(self._keys) >= self.max_entries

    def load(self) -> bool:
        """Read the entries from disk; False (and empty) if the file is malformed."""
        size = os.fstat(self._fd).st_size
        if not self._parse(os.pread(self._fd, size, 0)):
            self.reset()
            return False
        return True

    def _append(self, key: int, value: int) -> None:
        """Raises StorageError when the write failed: the entries are unchanged, but the file
        may end in a torn entry (the next append overwrites it; :meth:`truncate_entries`
        cuts it)."""
        assert not self._keys or (key > self._keys[-1] and value > self._values[-1]), "index entries must rise"
        try:
            faults.pwrite(self._fd, self.ENTRY.pack(key, value), len(self._keys) * self.ENTRY.size, self.path)
        except OSError as exc:
            raise StorageError(f"append to index {self.path} failed: {exc}") from exc
        self._keys.append(key)
        self._values.append(value)

    def truncate_entries(self, count: int) -> None:
        """Keep the first ``count`` entries and cut the file after them (a torn entry too).

        Raises:
            StorageError: the file could not be cut; the entries are cut in memory.
        """
        del self._keys[count:]
        del self._values[count:]
        try:
            faults.check_shrink(self.path)
            os.ftruncate(self._fd, len(self._keys) * self.ENTRY.size)
        except OSError as exc:
            raise StorageError(f"truncate of index {self.path} failed: {exc}") from exc

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        self.truncate_entries(0)

    def flush(self) -> None:
        try:
            faults.check_write(self.path)
            os.fdatasync(self._fd)
        except OSError as exc:
            raise StorageError(f"flush of index {self.path} failed: {exc}") from exc

    def close(self) -> None:
        self._close()

    def delete(self) -> None:
        try:
            faults.check_shrink(self.path)
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StorageError(f"cannot delete index {self.path}: {exc}") from exc


class OffsetIndex(_Index, OffsetEntries):
    """Offset -> file position of the batch holding it (see module docstring)."""

    def append(self, offset: int, position: int) -> None:
        self._append(offset - self.base_offset, position)

    def sanity_check(self, log_size: int) -> bool:
        """True when every entry points inside a log of ``log_size`` bytes."""
        return not self._values or (self._keys[0] > 0 and self._values[-1] < log_size)

    def truncate_to(self, offset: int) -> None:
        """Drop entries for batches at or above ``offset``."""
        self.truncate_entries(bisect.bisect_left(self._keys, offset - self.base_offset))


class TimeIndex(_Index, TimeEntries):
    """Timestamp -> offset below which no record is newer (see module docstring)."""

    def maybe_append(self, timestamp_ms: int, offset: int) -> None:
        """Add ``(timestamp_ms, offset)`` if it is newer and further than the last entry."""
        relative = offset - self.base_offset
        if (not self._keys or timestamp_ms > self._keys[-1]) and (not self._values or relative > self._values[-1]):
            self._append(timestamp_ms, relative)

    def sanity_check(self, next_offset: int) -> bool:
        """True when every entry points at or below ``next_offset``."""
        return not self._values or self.base_offset + self._values[-1] <= next_offset

    def truncate_to(self, offset: int) -> None:
        """Drop entries that point above ``offset``."""
        self.truncate_entries(bisect.bisect_right(self._values, offset - self.base_offset))
