"""A partition's history as Parquet (issue 31): each closed segment that tiered storage
copies is also kept, in an object store, as one Parquet file of its records in the rows of
Spark's Kafka source, so that Spark or Ray Data read a topic's past straight from the store
(:func:`plan_history_read`, :func:`read_history`) and only the live tail from the brokers.
Kafka has no twin; the nearest are Redpanda's Iceberg topics and Confluent's Tableflow (a
topic's records as table files in an object store, written by the broker), here without
their catalog: one manifest per partition plays the part of Iceberg's table metadata.

Layout, under the store's base path (hive-style, so directory readers find the partition)::

    <base>/history/<topic>/partition=<p>/<first offset>-<last offset>-<uuid>.parquet
    <base>/history/<topic>/partition=<p>/_raylog_manifest.json

Offsets are 20 digits, both ends inclusive: the range of offsets the file answers for (its
segment's, or the part of it no earlier file covers); the uuid is the remote segment id's.
A file's columns are :data:`HISTORY_SCHEMA`, Spark's Kafka source with headers
(:func:`raylog.common.kafka_columns.kafka_arrow_schema`): key, value, topic, partition,
offset, timestamp (us, UTC), timestampType, headers (null for a record without any). Rows
rise by offset, in row groups of at most ``row_group_rows`` rows with min/max statistics on
offset, timestamp, partition and timestampType, so a read of an offset range skips the row
groups outside it. The ``partition`` column is in the files and in the directory name both:
``pyarrow.dataset`` (hive partitioning) and Spark read it as one column, the file's, at its
place in the schema (Spark's partition discovery replaces an overlapping data column by the
directory's value, of the same type int); Ray Data's ``read_parquet`` keeps the file's and
logs that it did. Without it in the files a directory read would append ``partition`` last
(and as a string in Ray Data) and a file read alone would lack it.

The manifest is JSON, every file of the partition's history::

    {"version": 1, "topic": str, "partition": int,
     "files": [{"name": str, "first_offset": int, "last_offset": int, "record_count": int,
                "size_bytes": int, "max_timestamp_ms": int (-1: no record), "segment_id": str}]}

Invariants: the manifest is the truth, a file is part of the history when the manifest lists
it, and it lists a file only once the file is whole. Listed ranges never overlap and rise.
A file holds exactly the records a read_committed consumer reads in its range
(:func:`segment_table`). ``_``- and ``.``-prefixed names are hidden from Spark and
``pyarrow.dataset``, names not ending ``.parquet`` from Ray Data: the manifest and temporary
files never look like data.

Writing (:class:`HistoryWriter`), one writer per partition, its leader: the Parquet file
first, then the manifest rewritten whole. On a store with rename (a local or network
filesystem) each is written under a hidden temporary name and renamed into place (atomic);
on an object store each is one upload, which becomes visible whole or not at all, except that
a failed upload may be completed truncated (see :mod:`~raylog.storage.remote_storage`):
such a file is never listed. A write that failed after its file and before its manifest
leaves an orphan: a file the manifest does not list, which readers of the manifest never see
and :meth:`~HistoryWriter.clean_orphans` deletes. Only files older than a grace period are
deleted, so that a write in flight (a former leader's) is not cut from under it. A directory
read (``spark.read.parquet(dir)``) sees orphans until then: read the files a plan names for
exactly the partition's records. A new leader continues without duplicates: each write reads
the manifest first, leaves out the part of its segment that listed files already cover, and
writes nothing for a segment id already listed (a write retried). Retention
(:meth:`~HistoryWriter.delete_segment`) unlists the file first, then deletes it.

Errors: every failure of the store is a :class:`~raylog.errors.RemoteStorageError`
(retriable); a file a plan names but retention deleted meanwhile is a
:class:`~raylog.errors.RemoteResourceNotFoundError` (plan again).

Concurrency: a writer keeps no state besides its filesystem (thread-safe). Calls for one
partition must not overlap; its leader orders them (the manifest is read, changed and written
whole, so concurrent writers would lose each other's entries: files the manifest then does
not list, orphans, never wrong records). Plans and reads run anywhere, any number at once.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import logging
import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from ..common import kafka_columns, record_batch
from ..errors import RemoteResourceNotFoundError, RemoteStorageError
from ..types import TopicPartition
from .remote_log_metadata import RemoteLogSegmentMetadata
from .remote_storage import filesystem_from_uri, is_object_store, remote_errors
from .txn_index import AbortedTxn

logger = logging.getLogger(__name__)

#: The columns of every history file: Spark's Kafka source with headers.
HISTORY_SCHEMA = kafka_columns.kafka_arrow_schema(include_headers=True)
#: The directory under the store's base path that holds every topic's history.
HISTORY_DIR = "history"
MANIFEST_NAME = "_raylog_manifest.json"
MANIFEST_VERSION = 1
#: The largest manifest read (about 200 bytes a file: some 300,000 files).
MAX_MANIFEST_BYTES = 64 * 1024 * 1024
#: Rows per row group: a read starting inside a file decodes at most this many rows it skips
#: (row groups are skipped by their offset statistics), and a group of small records is
#: still large enough to compress and scan well.
ROW_GROUP_ROWS = 65_536
#: zstd: read by pyarrow, Ray Data and Spark (3.2 and later); denser than Parquet's usual
#: snappy at a similar decoding speed, for files kept as long as the topic's history.
COMPRESSION = "zstd"
#: Columns with min/max statistics: the ones reads filter on (statistics of keys and values
#: would only grow the footers).
STATISTICS_COLUMNS = ("partition", "offset", "timestamp", "timestampType")
#: An orphan younger than this may be a write in flight (a former leader's): left alone.
ORPHAN_MIN_AGE_MS = 10 * 60 * 1000

_FILE_NAME = re.compile(r"^(\d{20})-(\d{20})-([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.parquet$")
_TEMP_SUFFIX = ".tmp"
_INT_FIELDS = ("first_offset", "last_offset", "record_count", "size_bytes", "max_timestamp_ms")


# --- a segment's records as rows ---------------------------------------------------------


def segment_table(log_bytes: Any, topic: str, partition: int, aborted: Iterable[AbortedTxn]) -> pa.Table:
    """The records of one closed segment's ``.log`` as rows of :data:`HISTORY_SCHEMA`:
    exactly what a read_committed consumer reads of it, decoded as it decodes (CRCs checked).

    Control batches are left out, and so are the records of aborted transactions, by
    :func:`raylog.common.record_batch.decode_table` from the batches' headers (Kafka's
    read_committed rule); compaction's gaps stay as they are. A record's ``timestampType``
    is its batch's, as the consumer reports it (the LOG_APPEND_TIME attribute, which the
    leader sets on every batch of a LogAppendTime topic). No Python loop per record.

    Args:
        log_bytes: the segment's whole batches (its ``.log``, local or fetched from the store).
        topic, partition: the segment's partition.
        aborted: the partition's aborted transactions (:class:`AbortedTxn`) that may touch
            the segment: its own ``.txnindex`` and those of later segments, since a
            transaction open across the segment's end is aborted by a marker further on
            (e.g. ``TransactionIndex.all()``); entries whose marker lies before the segment or
            whose first offset lies after it are ignored. The segment must lie below the last
            stable offset, every transaction in it ended (tiered storage copies no other).

    Raises:
        CorruptRecordError: a batch fails its checks.
    """
    headers = list(record_batch.iter_headers(log_bytes))
    if not headers:
        return HISTORY_SCHEMA.empty_table()
    first, last = headers[0][1].base_offset, headers[-1][1].last_offset
    starts = [(t.producer_id, t.first_offset) for t in aborted if t.marker_offset >= first and t.first_offset <= last]
    records = kafka_columns.labelled(
        TopicPartition(topic, partition), record_batch.decode_table(log_bytes, aborted=starts)
    )
    types = kafka_columns.timestamp_type_values(
        _int64_values(records.column("offset")), kafka_columns.log_append_time_ranges(headers)
    )
    return kafka_columns.kafka_rows(records, record_batch.arrow_of(types), include_headers=True)


def _int64_values(column: pa.ChunkedArray) -> np.ndarray:
    """A column of 8-byte values without nulls (int64, timestamps) as one int64 array."""
    chunks = [record_batch.values_of(chunk.view(pa.int64())) for chunk in column.chunks]
    return np.concatenate(chunks) if chunks else np.empty(0, dtype=np.int64)


# --- the manifest ----------------------------------------------------------------------


@dataclass(frozen=True)
class HistoryFile:
    """One file of a partition's history, as its manifest lists it: offsets
    ``[first_offset, last_offset]`` (inclusive) of the remote segment ``segment_id``."""

    name: str
    first_offset: int
    last_offset: int
    record_count: int
    size_bytes: int
    max_timestamp_ms: int
    segment_id: str


def file_name(first_offset: int, last_offset: int, segment_id: str) -> str:
    """A history file's name: ``<20-digit first>-<20-digit last>-<uuid>.parquet``."""
    return f"{first_offset:020d}-{last_offset:020d}-{segment_id}.parquet"


@dataclass(frozen=True)
class HistoryManifest:
    """The files of a partition's history (see the module docstring), by first offset."""

    topic: str
    partition: int
    files: tuple[HistoryFile, ...] = ()

    @property
    def end_offset(self) -> int | None:
        """The offset after the last file's range (None: no file)."""
        return self.files[-1].last_offset + 1 if self.files else None

    def by_segment(self, segment_id: str) -> HistoryFile | None:
        return next((f for f in self.files if f.segment_id == segment_id), None)

    def uncovered(self, first_offset: int, last_offset: int) -> tuple[int, int] | None:
        """The lowest range within ``[first_offset, last_offset]`` that no file covers
        (inclusive ends), None when files cover it all: what a new file there may hold."""
        low, high = first_offset, last_offset
        for f in self.files:
            if f.last_offset < low:
                continue
            if f.first_offset > high:
                break
            if f.first_offset > low:  # a file starts inside: keep the part below it
                high = f.first_offset - 1
                break
            low = f.last_offset + 1
        return (low, high) if low <= high else None

    def contiguous_from(self, start_offset: int, end_offset: int | None) -> tuple[tuple[HistoryFile, ...], int]:
        """The files covering ``[start_offset, end_offset)`` from ``start_offset`` on without
        a gap, and the offset where they stop covering it (``start_offset`` when none does;
        at most ``end_offset``; None: no end)."""
        lasts = [f.last_offset for f in self.files]
        chosen, next_offset = [], start_offset
        for f in self.files[bisect.bisect_left(lasts, start_offset) :]:
            if (end_offset is not None and next_offset >= end_offset) or f.first_offset > next_offset:
                break  # done, or a gap: the rest is read from the brokers
            chosen.append(f)
            next_offset = f.last_offset + 1
        return tuple(chosen), next_offset if end_offset is None else min(next_offset, end_offset)

    def with_file(self, added: HistoryFile) -> HistoryManifest:
        return replace(self, files=tuple(sorted((*self.files, added), key=lambda f: f.first_offset)))

    def without(self, segment_id: str) -> HistoryManifest:
        return replace(self, files=tuple(f for f in self.files if f.segment_id != segment_id))

    def encode(self) -> bytes:
        files = [asdict(f) for f in self.files]
        body = {"version": MANIFEST_VERSION, "topic": self.topic, "partition": self.partition, "files": files}
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes, topic: str, partition: int) -> HistoryManifest:
        """Raises ValueError: not a manifest of this version and partition, or its files
        are not valid (names, ranges rising without overlap)."""
        try:
            body = json.loads(data)
            if body["version"] != MANIFEST_VERSION or (body["topic"], body["partition"]) != (topic, partition):
                raise ValueError(f"version {body['version']} of {body['topic']}-{body['partition']}")
            files = tuple(HistoryFile(**entry) for entry in body["files"])
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not a history manifest: {exc!r}") from None
        previous = -1
        for f in files:
            if not all(type(getattr(f, n)) is int for n in _INT_FIELDS) or not isinstance(f.segment_id, str):
                raise ValueError(f"{f} has a field of the wrong type")
            if f.name != file_name(f.first_offset, f.last_offset, f.segment_id) or not _FILE_NAME.match(f.name):
                raise ValueError(f"{f.name} is not the name of its range and segment")
            if not previous < f.first_offset <= f.last_offset:
                raise ValueError(f"{f.name} overlaps or precedes the file before it")
            previous = f.last_offset
        return cls(topic, partition, files)


def partition_path(base_path: str, topic: str, partition: int) -> str:
    """The directory of a partition's history files and manifest."""
    base = base_path.rstrip("/")
    return f"{base + '/' if base else ''}{HISTORY_DIR}/{topic}/partition={partition}"


def read_manifest(filesystem: pafs.FileSystem, base_path: str, topic: str, partition: int) -> HistoryManifest:
    """A partition's manifest (no file yet: an empty one).

    Raises:
        RemoteStorageError: the store failed, or the manifest is not valid.
    """
    path = f"{partition_path(base_path, topic, partition)}/{MANIFEST_NAME}"
    try:
        with remote_errors("read", path), filesystem.open_input_file(path) as source:
            if source.size() > MAX_MANIFEST_BYTES:
                raise RemoteStorageError(f"{path} has {source.size()} bytes, more than {MAX_MANIFEST_BYTES}")
            data = source.read()
    except RemoteResourceNotFoundError:
        return HistoryManifest(topic, partition)
    try:
        return HistoryManifest.decode(data, topic, partition)
    except ValueError as exc:
        raise RemoteStorageError(f"{path} is not a valid history manifest: {exc}") from exc


# --- writing -----------------------------------------------------------------------------


class HistoryWriter:
    """Writes and deletes a partition's history files and keeps its manifest (see the module
    docstring for the layout, the order of writes and the concurrency contract).

    Args:
        filesystem: the store, e.g. ``pyarrow.fs.S3FileSystem(endpoint_override=...)``.
        base_path: the directory (``bucket/prefix`` for S3) under which ``history/`` lies.
        row_group_rows: rows per Parquet row group (ROW_GROUP_ROWS).

    Example::

        history = HistoryWriter.from_uri("s3://bucket/raylog")
        rows = segment_table(log_bytes, "clicks", 3, transaction_index.all())
        history.write_segment(metadata, rows)
        history.clean_orphans("clicks", 3, now_ms=clock())
    """

    def __init__(self, filesystem: pafs.FileSystem, base_path: str, *, row_group_rows: int = ROW_GROUP_ROWS):
        if row_group_rows < 1:
            raise ValueError(f"row_group_rows must be at least 1, not {row_group_rows}")
        self.filesystem = filesystem
        self.base_path = base_path.rstrip("/")
        self.row_group_rows = row_group_rows

    @classmethod
    def from_uri(cls, uri: str, **options: Any) -> HistoryWriter:
        """The history under the store a URI names (as RemoteStorageManager.from_uri).

        Raises:
            InvalidConfigError, RemoteStorageError: as :func:`~raylog.storage.remote_storage.filesystem_from_uri`.
        """
        return cls(*filesystem_from_uri(uri), **options)

    def partition_path(self, topic: str, partition: int) -> str:
        return partition_path(self.base_path, topic, partition)

    def manifest(self, topic: str, partition: int) -> HistoryManifest:
        """The partition's manifest (see :func:`read_manifest`)."""
        return read_manifest(self.filesystem, self.base_path, topic, partition)

    def write_segment(self, metadata: RemoteLogSegmentMetadata, table: pa.Table) -> HistoryFile | None:
        """Write a segment's rows (:func:`segment_table`) as a history file and list it: the
        file first, then the manifest. Offsets that listed files cover already are left out
        (a new leader continuing an earlier one's history); a segment id listed already is
        not written again.

        Args:
            metadata: the remote segment the rows are of; its range is the file's.
            table: rows of :data:`HISTORY_SCHEMA`, offsets rising within the segment's range.

        Returns:
            The file listed, the one listed already for the segment id, or None when listed
            files cover the whole range.

        Raises:
            ValueError: the table is not of HISTORY_SCHEMA, or its offsets do not rise within
                the segment's range.
            RemoteStorageError: the store failed; the manifest is as it was (a file written
                is an orphan).
        """
        sid = metadata.segment_id
        offsets = _checked_offsets(metadata, table)
        manifest = self.manifest(sid.topic, sid.partition)
        listed = manifest.by_segment(sid.id)
        if listed is not None:
            return listed
        span = manifest.uncovered(metadata.start_offset, metadata.end_offset)
        if span is None:
            logger.info(
                "history of %s: offsets %d to %d are covered already", sid, metadata.start_offset, metadata.end_offset
            )
            return None
        first, last = span
        low, high = np.searchsorted(offsets, first, side="left"), np.searchsorted(offsets, last, side="right")
        rows = table.slice(int(low), int(high - low))
        directory = self.partition_path(sid.topic, sid.partition)
        name = file_name(first, last, sid.id)
        size = self._write(f"{directory}/{name}", lambda sink: self._write_parquet(rows, sink))
        timestamps_us = _int64_values(rows.column("timestamp"))
        max_timestamp_ms = int(timestamps_us.max()) // 1_000 if len(timestamps_us) else -1
        added = HistoryFile(name, first, last, rows.num_rows, size, max_timestamp_ms, sid.id)
        self._write_manifest(manifest.with_file(added))
        logger.info("history of %s written: %s, %d records, %d bytes", sid, name, rows.num_rows, size)
        return added

    def _write_parquet(self, rows: pa.Table, sink: pa.NativeFile) -> None:
        import pyarrow.parquet as pq  # here: a replica that writes no history never pays for it

        pq.write_table(
            rows,
            sink,
            row_group_size=self.row_group_rows,
            compression=COMPRESSION,
            write_statistics=list(STATISTICS_COLUMNS),
            sorting_columns=[pq.SortingColumn(HISTORY_SCHEMA.get_field_index("offset"))],
        )

    def _write_manifest(self, manifest: HistoryManifest) -> None:
        data = manifest.encode()
        path = f"{self.partition_path(manifest.topic, manifest.partition)}/{MANIFEST_NAME}"
        self._write(path, lambda sink: sink.write(data))

    def _write(self, path: str, write: Callable[[pa.NativeFile], Any]) -> int:
        """Write an object whole at ``path`` (see the module docstring): on an object store
        one upload; elsewhere a hidden temporary file renamed over ``path``. Returns its bytes.

        Raises:
            RemoteStorageError: the store failed (a temporary file is deleted if it can be).
        """
        directory, _, name = path.rpartition("/")
        target = path if is_object_store(self.filesystem) else f"{directory}/.{name}.{uuid.uuid4().hex}{_TEMP_SUFFIX}"
        try:
            with remote_errors("write", path, missing_is_not_found=False):
                if target != path:
                    self.filesystem.create_dir(directory, recursive=True)
                with self.filesystem.open_output_stream(target, compression=None) as sink:
                    write(sink)
                    size = sink.tell()
                if target != path:
                    self.filesystem.move(target, path)
        except RemoteStorageError:
            if target != path:
                with contextlib.suppress(OSError, pa.ArrowException):
                    self.filesystem.delete_file(target)
            raise
        return size

    # --- deleting --------------------------------------------------------------------

    def delete_segment(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Remove a segment's history file (retention): unlisted first, then deleted. A
        segment not listed has any file of its id deleted (what a failed write left), so a
        deletion may be repeated.

        Raises:
            RemoteStorageError: the store failed; what was unlisted stays unlisted.
        """
        sid = metadata.segment_id
        directory = self.partition_path(sid.topic, sid.partition)
        manifest = self.manifest(sid.topic, sid.partition)
        listed = manifest.by_segment(sid.id)
        if listed is not None:
            self._write_manifest(manifest.without(sid.id))
            names = [listed.name]
        else:
            names = [i.base_name for i in self._list(directory) if _segment_of(i.base_name) == sid.id]
        for name in names:
            self._delete(f"{directory}/{name}")
        logger.info("history of %s deleted: %s", sid, names or "no file")

    def orphans(self, topic: str, partition: int) -> list[str]:
        """The paths of the partition's history files and temporary files that its manifest
        does not list: writes that failed (or are in flight)."""
        return [info.path for info in self._orphans(topic, partition)]

    def clean_orphans(self, topic: str, partition: int, now_ms: int, min_age_ms: int = ORPHAN_MIN_AGE_MS) -> list[str]:
        """Delete the orphans last modified at least ``min_age_ms`` before ``now_ms`` (an
        orphan whose store tells no time only with ``min_age_ms`` 0); returns their paths.

        Raises:
            RemoteStorageError: the store failed; what was deleted stays deleted.
        """
        deleted = []
        for info in self._orphans(topic, partition):
            modified_ms = None if info.mtime_ns is None else info.mtime_ns // 1_000_000
            if min_age_ms and (modified_ms is None or modified_ms > now_ms - min_age_ms):
                continue
            self._delete(info.path)
            deleted.append(info.path)
        if deleted:
            logger.info("history of %s-%d: %d orphans deleted: %s", topic, partition, len(deleted), deleted)
        return deleted

    def _orphans(self, topic: str, partition: int) -> list[pafs.FileInfo]:
        # Listed before the manifest is read: a file listed there by then is not taken.
        found = [i for i in self._list(self.partition_path(topic, partition)) if _is_written_here(i.base_name)]
        listed = {f.name for f in self.manifest(topic, partition).files}
        return [i for i in found if i.base_name not in listed]

    def _list(self, directory: str) -> list[pafs.FileInfo]:
        selector = pafs.FileSelector(directory, allow_not_found=True)
        with remote_errors("list", directory, missing_is_not_found=False):
            return [i for i in self.filesystem.get_file_info(selector) if i.type == pafs.FileType.File]

    def _delete(self, path: str) -> None:
        with remote_errors("delete", path, missing_is_not_found=False):
            with contextlib.suppress(FileNotFoundError):
                self.filesystem.delete_file(path)


def _checked_offsets(metadata: RemoteLogSegmentMetadata, table: pa.Table) -> np.ndarray:
    """The table's offsets, once checked to be history rows of the segment."""
    if not table.schema.equals(HISTORY_SCHEMA):
        raise ValueError(f"history rows must have the schema {HISTORY_SCHEMA}, not {table.schema}")
    offsets = _int64_values(table.column("offset"))
    inside = not len(offsets) or (metadata.start_offset <= offsets[0] and offsets[-1] <= metadata.end_offset)
    if not inside or np.any(np.diff(offsets) <= 0):
        raise ValueError(
            f"offsets of {metadata.segment_id}'s rows do not rise within "
            f"[{metadata.start_offset}, {metadata.end_offset}]"
        )
    return offsets


def _segment_of(name: str) -> str | None:
    match = _FILE_NAME.match(name)
    return match.group(3) if match else None


def _is_written_here(name: str) -> bool:
    """A history file's name, or a temporary file's (``.<name>.<hex>.tmp``)."""
    return bool(_FILE_NAME.match(name)) or (name.startswith(".") and name.endswith(_TEMP_SUFFIX))


# --- reading -----------------------------------------------------------------------------


@dataclass(frozen=True)
class HistoryPlan:
    """What a read of ``[start_offset, end_offset)`` takes from the history: the files
    covering ``[start_offset, history_end_offset)`` without a gap, in offset order, and the
    row filter on ``offset`` that cuts them to it; the rest, from ``live_start_offset`` on,
    is read from the brokers. Picklable (a Ray or Spark task reads it)."""

    filesystem: pafs.FileSystem
    topic: str
    partition: int
    start_offset: int
    end_offset: int | None
    history_end_offset: int
    files: tuple[HistoryFile, ...]
    paths: tuple[str, ...]

    @property
    def live_start_offset(self) -> int:
        """Where the read continues from the brokers (``end_offset``: nothing left)."""
        return self.history_end_offset

    @property
    def filter(self) -> Any:
        """``start_offset <= offset < history_end_offset``, a ``pyarrow.dataset`` expression
        (Parquet readers push it down to the row groups' statistics)."""
        import pyarrow.dataset as ds  # here: it imports pandas, which a writer never needs

        return (ds.field("offset") >= self.start_offset) & (ds.field("offset") < self.history_end_offset)


def plan_history_read(
    filesystem: pafs.FileSystem,
    base_path: str,
    topic: str,
    partition: int,
    start_offset: int,
    end_offset: int | None = None,
) -> HistoryPlan:
    """The history files that serve ``[start_offset, end_offset)`` of a partition, as far as
    the manifest lists files covering it from ``start_offset`` on without a gap (holes that
    compaction left inside files are no gap; a range no file covers is), and where the live
    tail begins. ``end_offset`` None: as far as the history goes.

    Raises:
        ValueError: ``start_offset`` is negative or ``end_offset`` below it.
        RemoteStorageError: the store failed, or the manifest is not valid.

    Example::

        plan = plan_history_read(filesystem, "bucket/raylog", "clicks", 3, 0, high_watermark)
        past = read_history(plan)  # then the brokers from plan.live_start_offset
    """
    if start_offset < 0 or (end_offset is not None and end_offset < start_offset):
        raise ValueError(f"[{start_offset}, {end_offset}) is not a range of offsets")
    manifest = read_manifest(filesystem, base_path, topic, partition)
    files, history_end = manifest.contiguous_from(start_offset, end_offset)
    directory = partition_path(base_path, topic, partition)
    paths = tuple(f"{directory}/{f.name}" for f in files)
    return HistoryPlan(filesystem, topic, partition, start_offset, end_offset, history_end, files, paths)


def read_history(plan: HistoryPlan) -> pa.Table:
    """The rows a plan names (:data:`HISTORY_SCHEMA`), in offset order: each file read with
    the plan's filter pushed down to its row groups.

    Raises:
        RemoteResourceNotFoundError: a file is gone (retention deleted it: plan again).
        RemoteStorageError: the store failed, or a file is not valid Parquet.
    """
    import pyarrow.dataset as ds  # here: see HistoryPlan.filter

    tables = [HISTORY_SCHEMA.empty_table()]
    for path in plan.paths:
        with remote_errors("read", path):
            dataset = ds.dataset(path, schema=HISTORY_SCHEMA, format="parquet", filesystem=plan.filesystem)
            tables.append(dataset.to_table(filter=plan.filter))
    return pa.concat_tables(tables)
