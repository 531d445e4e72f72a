"""Producer state snapshot files: what a partition knew of its idempotent producers at an
offset (Kafka's ``<offset>.snapshot`` files of the ProducerStateManager).

A file ``<offset>.snapshot`` (the offset in 20 digits, as segment files) holds the state
implied by every batch below ``offset``: per producer, its epoch and its last batches
(up to the number retained for duplicate detection). Byte layout, big-endian::

    field            type  notes
    version          i16   ``VERSION``; a reader dispatches on it
    crc              u32   CRC-32C of every byte after this field
    row_count        i32   rows that follow
    rows             one per retained batch, oldest first within a producer:
      producer_id    i64
      producer_epoch i16
      first_sequence i32
      last_sequence  i32
      first_offset   i64
      last_offset    i64
      max_timestamp  i64   the batch's max timestamp, as in its header
      appended_ms    i64   when this replica appended (or replayed) it, by its clock
      txn_first_offset i64 the first offset of the producer's open transaction, or -1

A producer without a batch in its epoch (a transaction marker bumped it) has one row with
``first_sequence`` -1. Version 1 files (without ``txn_first_offset``) are still read.

Written whole to ``<name>.tmp``, fsync'd, renamed: a file is either complete or, after a
crash or a bad disk, caught by its CRC (:class:`CorruptRecordError`), and the caller falls
back on an older snapshot or on the log. Which snapshots exist and which to trust is the
caller's business (:mod:`raylog.coordination.partition`); this module reads, writes,
lists and deletes files.

Functions here are stateless; one writer per directory.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from typing import NamedTuple

import crc32c

from ..errors import CorruptRecordError, StorageError
from .files import remove, write_atomically

VERSION = 2
SUFFIX = ".snapshot"
#: version, crc, row_count
HEADER = struct.Struct(">hIi")
#: producer_id, producer_epoch, first_sequence, last_sequence, first_offset, last_offset,
#: max_timestamp, appended_ms, txn_first_offset (version 1: without it)
ROW = struct.Struct(">qhiiqqqqq")
ROW_V1 = struct.Struct(">qhiiqqqq")
CRC_START = struct.calcsize(">hI")  # the CRC covers everything from row_count on


class SnapshotBatch(NamedTuple):
    """One retained batch of one producer, as a snapshot row."""

    producer_id: int
    producer_epoch: int
    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    max_timestamp: int
    appended_ms: int
    txn_first_offset: int = -1


def path(directory: str, offset: int) -> str:
    return os.path.join(directory, f"{offset:020d}{SUFFIX}")


def offsets(directory: str) -> list[int]:
    """The offsets of the snapshot files in ``directory``, rising.

    Raises:
        StorageError: the directory cannot be listed.
    """
    try:
        names = os.listdir(directory)
    except OSError as exc:
        raise StorageError(f"cannot list {directory}: {exc}") from exc
    found = []
    for name in names:
        stem, suffix = os.path.splitext(name)
        if suffix == SUFFIX and len(stem) == 20 and stem.isdigit():
            found.append(int(stem))
    return sorted(found)


def encode(rows: Iterable[SnapshotBatch]) -> bytes:
    """The bytes of a snapshot file holding ``rows``."""
    rows = list(rows)
    body = bytearray(HEADER.size + ROW.size * len(rows))
    struct.pack_into(">i", body, CRC_START, len(rows))
    for i, row in enumerate(rows):
        ROW.pack_into(body, HEADER.size + i * ROW.size, *row)
    HEADER.pack_into(body, 0, VERSION, crc32c.crc32c(memoryview(body)[CRC_START:]), len(rows))
    return bytes(body)


def decode(data: bytes) -> list[SnapshotBatch]:
    """The rows of a snapshot file's bytes.

    Raises:
        CorruptRecordError: unknown version, wrong length or CRC mismatch.
    """
    if len(data) < HEADER.size:
        raise CorruptRecordError(f"producer snapshot of {len(data)} bytes is shorter than its header")
    version, crc, count = HEADER.unpack_from(data)
    row = {VERSION: ROW, 1: ROW_V1}.get(version)
    if row is None:
        raise CorruptRecordError(f"unknown producer snapshot version {version}")
    if crc32c.crc32c(memoryview(data)[CRC_START:]) != crc:
        raise CorruptRecordError("producer snapshot CRC mismatch")
    if count < 0 or len(data) != HEADER.size + count * row.size:
        raise CorruptRecordError(f"producer snapshot of {len(data)} bytes cannot hold {count} rows")
    return [SnapshotBatch(*fields) for fields in row.iter_unpack(memoryview(data)[HEADER.size :])]


def write(directory: str, offset: int, rows: Iterable[SnapshotBatch]) -> None:
    """Write the snapshot at ``offset`` atomically (:func:`~raylog.storage.files.write_atomically`).

    Raises:
        StorageError: the write failed; any earlier file at ``offset`` is still in place.
    """
    write_atomically(path(directory, offset), encode(rows))


def read(directory: str, offset: int) -> list[SnapshotBatch]:
    """The rows of the snapshot at ``offset``.

    Raises:
        CorruptRecordError: the file is damaged (see :func:`decode`).
        StorageError: the file cannot be read.
    """
    target = path(directory, offset)
    try:
        with open(target, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise StorageError(f"cannot read {target}: {exc}") from exc
    return decode(data)


def delete(directory: str, offset: int) -> None:
    """Remove the snapshot at ``offset`` (gone already is fine).

    Raises:
        StorageError: the file exists but cannot be removed.
    """
    remove(path(directory, offset))
