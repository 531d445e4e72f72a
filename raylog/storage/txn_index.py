"""The aborted-transaction index of a log (Kafka's ``.txnindex`` files).

A read_committed fetch must tell its consumer which transactions in the range it reads
were aborted, without decoding the range: this index lists, per segment, the aborted
transactions whose abort marker lies in that segment, as :class:`AbortedTxn` entries
(producer id, the transaction's first offset in this partition, the marker's offset).
A fetch from offset ``o`` up to ``u`` needs every entry with ``marker_offset >= o`` and
``first_offset < u`` (:meth:`TransactionIndex.collect`); the consumer drops those
producers' transactional batches from ``first_offset`` up to the marker, from their
headers alone (:func:`raylog.common.record_batch.decode_table`).

A file ``<base offset>.txnindex`` (20 digits, as segment files) holds the entries of the
segment at that base, rewritten whole and atomically (:func:`~raylog.storage.files.write_atomically`)
on each change: aborts are rare next to appends, and a file is then either complete or
caught by its CRC. Byte layout, big-endian::

    version i16, crc u32 (CRC-32C of what follows), count i32,
    count x (producer_id i64, first_offset i64, marker_offset i64)

An entry is indexed in memory first, then its file is written: when that write fails the
entry still counts for reads, the file is :attr:`~TransactionIndex.unwritten` and is
written again by the next :meth:`~TransactionIndex.add` or :meth:`~TransactionIndex.flush`.
The owner flushes before anything makes a restart skip the marker (a producer snapshot
after it, a retried marker answered as written): else the entry would be lost for good.

The index is derived from the log: a replica rebuilds the entries of what it replays (the
batches after its newest producer snapshot) and cuts entries above a truncation; entries
whose markers retention removed are dropped by :meth:`retain`. A corrupt
file is deleted (logged) and :attr:`TransactionIndex.rebuild_from` says from where the
owner must replay the log to index its markers again (a replay from a producer snapshot
above it would not meet them).

Concurrency: not thread-safe; the partition calls it under the replica's lock.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
from collections.abc import Iterable
from typing import NamedTuple

import crc32c

from ..errors import StorageError
from .files import remove, write_atomically

logger = logging.getLogger(__name__)

VERSION = 1
SUFFIX = ".txnindex"
_HEADER = struct.Struct(">hIi")
_ENTRY = struct.Struct(">qqq")
_CRC_START = struct.calcsize(">hI")


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    marker_offset: int


def path(directory: str, base_offset: int) -> str:
    return os.path.join(directory, f"{base_offset:020d}{SUFFIX}")


def encode(entries: Iterable[AbortedTxn]) -> bytes:
    entries = list(entries)
    body = b"".join(_ENTRY.pack(*e) for e in entries)
    counted = struct.pack(">i", len(entries)) + body
    return struct.pack(">hI", VERSION, crc32c.crc32c(counted)) + counted


def decode(data: bytes) -> list[AbortedTxn]:
    """Raises ValueError when the bytes are not a whole, intact index file."""
    if len(data) < _HEADER.size:
        raise ValueError(f"{len(data)} bytes are shorter than the header")
    version, crc, count = _HEADER.unpack_from(data)
    if version != VERSION or crc32c.crc32c(memoryview(data)[_CRC_START:]) != crc:
        raise ValueError("unknown version or CRC mismatch")
    if count < 0 or len(data) != _HEADER.size + count * _ENTRY.size:
        raise ValueError(f"{len(data)} bytes cannot hold {count} entries")
    return [AbortedTxn._make(e) for e in _ENTRY.iter_unpack(memoryview(data)[_HEADER.size :])]


class TransactionIndex:
    """The aborted transactions of one log directory. See the module docstring."""

    def __init__(self, directory: str):
        self.dir = directory
        self._files: dict[int, list[AbortedTxn]] = {}  # segment base -> its entries, by marker offset
        #: The lowest segment base whose file was dropped as corrupt: the owner replays the
        #: log from at most there, then sets it back to None.
        self.rebuild_from: int | None = None
        self._unwritten: set[int] = set()  # bases whose file lacks entries held in memory
        for name in _listdir(directory):
            stem, suffix = os.path.splitext(name)
            if suffix != SUFFIX or len(stem) != 20 or not stem.isdigit():
                continue
            base = int(stem)
            try:
                with open(path(directory, base), "rb") as f:
                    self._files[base] = decode(f.read())
            except (OSError, ValueError) as exc:
                logger.warning("%s: dropping aborted-transaction index %s, to rebuild: %s", directory, name, exc)
                self._delete(base)
                self.rebuild_from = base if self.rebuild_from is None else min(self.rebuild_from, base)
        self._sorted: list[AbortedTxn] = []
        self._markers: list[int] = []
        self._resort()

    def __len__(self) -> int:
        return len(self._sorted)

    @property
    def unwritten(self) -> bool:
        """Whether entries held in memory are missing from their files (a write failed)."""
        return bool(self._unwritten)

    def add(self, entry: AbortedTxn, segment_bases: tuple[int, ...]) -> None:
        """Index an aborted transaction in the segment holding its marker (in memory at once;
        indexed already, as replays meet the same markers again, it is not added twice),
        then write every file that lacks entries (see :meth:`flush`).

        Raises:
            StorageError: a file could not be written: the entry stays indexed in memory
                and its file :attr:`unwritten`.
        """
        i = bisect.bisect_right(segment_bases, entry.marker_offset) - 1
        base = segment_bases[i] if i >= 0 else 0
        entries = self._files.get(base, [])
        if entry not in entries:
            self._files[base] = sorted([*entries, entry], key=lambda e: e.marker_offset)
            self._unwritten.add(base)
            self._resort()
        self.flush()

    def flush(self) -> None:
        """Write the files whose entries a failed write left in memory only.

        Raises:
            StorageError: a file could not be written (it stays :attr:`unwritten`).
        """
        for base in sorted(self._unwritten):
            write_atomically(path(self.dir, base), encode(self._files[base]))
            self._unwritten.discard(base)

    def collect(self, from_offset: int, upper_offset: int) -> list[tuple[int, int]]:
        """``(producer_id, first_offset)`` of every aborted transaction that a read of
        ``[from_offset, upper_offset)`` may meet."""
        if not self._sorted:
            return []
        start = bisect.bisect_left(self._markers, from_offset)
        return [(e.producer_id, e.first_offset) for e in self._sorted[start:] if e.first_offset < upper_offset]

    def all(self) -> list[AbortedTxn]:
        return list(self._sorted)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or above ``offset`` (the log was cut there).

        Raises:
            StorageError: a file could not be rewritten or removed.
        """
        self._keep(lambda e: e.marker_offset < offset)

    def retain(self, log_start_offset: int) -> None:
        """Drop the entries whose marker is below ``log_start_offset`` (retention took it: no
        fetch starts there any more). A file keeps its name when compaction merges its
        segment into an earlier one: markers survive compaction, so its entries still count.

        Raises:
            StorageError: a file could not be rewritten or removed.
        """
        self._keep(lambda e: e.marker_offset >= log_start_offset)

    def _keep(self, wanted) -> None:
        changed = False
        for base, entries in list(self._files.items()):
            kept = [e for e in entries if wanted(e)]
            if len(kept) == len(entries):
                continue
            changed = True
            if kept:
                write_atomically(path(self.dir, base), encode(kept))
                self._files[base] = kept
                self._unwritten.discard(base)
            else:
                self._delete(base)
        if changed:
            self._resort()

    def _delete(self, base: int) -> None:
        self._files.pop(base, None)
        self._unwritten.discard(base)
        remove(path(self.dir, base))

    def _resort(self) -> None:
        self._sorted = sorted((e for entries in self._files.values() for e in entries), key=lambda e: e.marker_offset)
        self._markers = [e.marker_offset for e in self._sorted]


def _listdir(directory: str) -> list[str]:
    try:
        return os.listdir(directory)
    except OSError as exc:
        raise StorageError(f"cannot list {directory}: {exc}") from exc
