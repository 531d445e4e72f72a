"""Writing a partition's history as Parquet (issue 31): each closed segment that tiered
storage copies is also kept, in the object store, as one Parquet file of its records in the
rows of Spark's Kafka source, so that Spark or Ray Data read a topic's past straight from the
store and only the live tail from the brokers. The layout, columns, manifest and the readers'
side are :mod:`raylog.common.history_format`. Kafka has no twin; the nearest are Redpanda's
Iceberg topics and Confluent's Tableflow (a topic's records as table files in an object
store, written by the broker), here without their catalog: one manifest per partition plays
the part of Iceberg's table metadata.

Writing (:class:`HistoryWriter`), one writer per partition, its leader: the Parquet file
first, then the manifest rewritten whole. On a store with rename (a local or network
filesystem) each is written under a hidden temporary name and renamed into place (atomic);
on an object store each is one upload, which becomes visible whole or not at all, except that
a failed upload may be completed truncated (see :mod:`~raylog.storage.remote_storage`):
such a file is never listed. A write that failed after its file and before its manifest
leaves an orphan: a file the manifest does not list, which readers of the manifest never see
and :meth:`~HistoryWriter.clean_orphans` deletes. Only files older than a grace period are
deleted, so that a write in flight (a former leader's) is not cut from under it. A new leader
continues without duplicates: each write reads the manifest first, leaves out the part of its
segment that listed files already cover, and writes nothing for a segment id already listed
(a write retried). Retention (:meth:`~HistoryWriter.delete_segment`) unlists the file first,
then deletes it.

Errors: every failure of the store is a :class:`~raylog.errors.RemoteStorageError`
(retriable).

Concurrency: a writer keeps no state besides its filesystem (thread-safe). Calls for one
partition must not overlap; its leader orders them (the manifest is read, changed and written
whole, so concurrent writers would lose each other's entries: files the manifest then does
not list, orphans, never wrong records).
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from ..common import kafka_columns, record_batch
from ..common.history_format import (
    FILE_NAME,
    HISTORY_SCHEMA,
    MANIFEST_NAME,
    HistoryFile,
    HistoryManifest,
    file_name,
    partition_path,
    read_manifest,
)
from ..common.object_store import delete_dir, filesystem_from_uri, is_object_store, remote_errors
from ..errors import RemoteStorageError
from ..types import TopicPartition
from .remote_log_metadata import RemoteLogSegmentMetadata
from .txn_index import AbortedTxn

logger = logging.getLogger(__name__)

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

_TEMP_SUFFIX = ".tmp"


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
    starts = aborted_in(aborted, first, last)
    records = kafka_columns.labelled(
        TopicPartition(topic, partition), record_batch.decode_table(log_bytes, aborted=starts)
    )
    types = kafka_columns.timestamp_type_values(
        _int64_values(records.column("offset")), kafka_columns.log_append_time_ranges(headers)
    )
    return kafka_columns.kafka_rows(records, record_batch.arrow_of(types), include_headers=True)


def aborted_in(aborted: Iterable[AbortedTxn], first_offset: int, last_offset: int) -> list[tuple[int, int]]:
    """``(producer_id, first_offset)`` of the aborted transactions whose records may lie in
    ``[first_offset, last_offset]``: marker at or past its start, first offset at or below its
    end (none: a read_uncommitted consumer reads the same records there as a read_committed one)."""
    return [
        (t.producer_id, t.first_offset)
        for t in aborted
        if t.marker_offset >= first_offset and t.first_offset <= last_offset
    ]


def _int64_values(column: pa.ChunkedArray) -> np.ndarray:
    """A column of 8-byte values without nulls (int64, timestamps) as one int64 array."""
    chunks = [record_batch.values_of(chunk.view(pa.int64())) for chunk in column.chunks]
    return np.concatenate(chunks) if chunks else np.empty(0, dtype=np.int64)


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

    def write_segment(
        self, metadata: RemoteLogSegmentMetadata, table: pa.Table, aborted: bool = False
    ) -> HistoryFile | None:
        """Write a segment's rows (:func:`segment_table`) as a history file and list it: the
        file first, then the manifest. Offsets that listed files cover already are left out
        (a new leader continuing an earlier one's history); a segment id listed already is
        not written again.

        Args:
            metadata: the remote segment the rows are of; its range is the file's.
            table: rows of :data:`HISTORY_SCHEMA`, offsets rising within the segment's range.
            aborted: records of aborted transactions were left out of ``table``
                (:func:`aborted_in` the segment's range is not empty).

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
        added = HistoryFile(name, first, last, rows.num_rows, size, max_timestamp_ms, sid.id, aborted)
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

    def delete_partition(self, topic: str, partition: int) -> None:
        """Delete the partition's whole history, manifest and all (its topic was deleted).

        Raises:
            RemoteStorageError: the store failed; what was deleted stays deleted.
        """
        directory = self.partition_path(topic, partition)
        delete_dir(self.filesystem, directory)
        # The topic's directory too, once its last partition's is gone (a filesystem with real
        # directories keeps an empty one; the topic is deleted, nothing writes there).
        parent = directory.rpartition("/")[0]
        with contextlib.suppress(FileNotFoundError, OSError):
            if not self.filesystem.get_file_info(pafs.FileSelector(parent, allow_not_found=True)):
                self.filesystem.delete_dir(parent)
        logger.info("history of %s-%d deleted", topic, partition)

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
    match = FILE_NAME.match(name)
    return match.group(3) if match else None


def _is_written_here(name: str) -> bool:
    """A history file's name, or a temporary file's (``.<name>.<hex>.tmp``)."""
    return bool(FILE_NAME.match(name)) or (name.startswith(".") and name.endswith(_TEMP_SUFFIX))
