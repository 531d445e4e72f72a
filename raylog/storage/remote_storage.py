"""Tiered storage's object store (Kafka's RemoteStorageManager, KIP-405) over ``pyarrow.fs``:
a local directory, S3, GCS or HDFS, named by a URI (``file:///...``, ``s3://bucket/prefix``,
``gs://...``, ``hdfs://...``) or given as a built ``pyarrow.fs.FileSystem`` and a base path.

A copied segment is a set of objects, named by the segment's start offset (20 digits, as
local segment files) and its remote segment id's uuid::

    <base>/<topic>-<partition>/<start offset>-<uuid>.log                       the batches
    <base>/<topic>-<partition>/<start offset>-<uuid>.index                     offset index
    <base>/<topic>-<partition>/<start offset>-<uuid>.timeindex                 time index
    <base>/<topic>-<partition>/<start offset>-<uuid>.snapshot                  producer snapshot
    <base>/<topic>-<partition>/<start offset>-<uuid>.leader-epoch-checkpoint   leader epochs
    <base>/<topic>-<partition>/<start offset>-<uuid>.txnindex                  aborted transactions
                                                                               (only if any)
    <base>/<topic>-<partition>/<start offset>-<uuid>.manifest                  written last

A half-finished upload is detectable: :meth:`RemoteStorageManager.copy_log_segment_data`
deletes any manifest of the segment first, uploads the indexes, then the ``.log``, and only
then writes the manifest, a small msgpack map of the segment's id, offsets and every object's
size in bytes. :meth:`~RemoteStorageManager.upload_state` says COMPLETE only when the manifest
is there and every object it lists is there with that size; any object without it is PARTIAL.
Object stores and ``pyarrow.fs`` cannot abort an upload (closing an S3 output stream after a
failed write still completes it, and a local file is visible while it is written), so a
truncated object may well exist: the manifest, not the objects, says a copy is whole. A copy
that raised is not reported as copied: its caller announces COPY_SEGMENT_FINISHED only after
it returned, and deletes what a failed copy left (:meth:`~RemoteStorageManager.delete_log_segment_data`,
after DELETE_SEGMENT_STARTED). Deletion removes the manifest first, so a deletion cut short
leaves a PARTIAL set, never a COMPLETE one with objects missing.

Orphans: objects of a segment id that ``__remote_log_metadata`` no longer knows (or never
knew), left by an upload that went on after its segment's deletion (a former leader's, still
running when the new leader cleaned up its copy). :meth:`~RemoteStorageManager.clean_orphans`
deletes those of the ids its caller does not keep, once none of their objects is younger than
a cut-off (an upload in flight is left alone).

Errors: every failure of the store (``OSError``, ``pyarrow.ArrowException``) is raised as
:class:`~raylog.errors.RemoteStorageError` (retriable); a missing object as its subclass
:class:`~raylog.errors.RemoteResourceNotFoundError`.

Concurrency: the manager keeps no state besides its filesystem, which ``pyarrow.fs`` makes
thread-safe: any number of threads may call it at once. Two calls on the same segment's
objects (a copy and a deletion of one segment id) must not overlap; its leader orders them.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

import msgpack
import pyarrow.fs as pafs

from ..common.object_store import delete_dir, filesystem_from_uri, is_object_store, remote_errors
from ..errors import RemoteResourceNotFoundError, RemoteStorageError
from . import leader_epoch, producer_snapshot, txn_index
from .remote_log_metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata
from .segment import file_name

logger = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
MANIFEST_SUFFIX = ".manifest"
#: The manifest's format version; a manifest of another version makes its upload PARTIAL.
MANIFEST_VERSION = 1
#: Bytes read from a local file and written to the store at a time.
COPY_CHUNK_BYTES = 8 * 1024 * 1024
#: The largest manifest read back (a manifest is a few hundred bytes).
MAX_MANIFEST_BYTES = 64 * 1024


class IndexType(enum.Enum):
    """The objects of a copied segment besides its ``.log`` (Kafka's
    RemoteStorageManager.IndexType); the value is the object's suffix."""

    OFFSET = ".index"
    TIMESTAMP = ".timeindex"
    PRODUCER_SNAPSHOT = producer_snapshot.SUFFIX
    LEADER_EPOCH = ".leader-epoch-checkpoint"
    TRANSACTION = txn_index.SUFFIX


class UploadState(enum.Enum):
    """What the store holds of one segment id (:meth:`RemoteStorageManager.upload_state`)."""

    ABSENT = "absent"  # no object at all
    PARTIAL = "partial"  # some objects, but no manifest, or one they do not match
    COMPLETE = "complete"  # the manifest and every object it lists, of the sizes it lists


@dataclass(frozen=True)
class LogSegmentData:
    """The local files of a closed segment to copy (Kafka's LogSegmentData): paths.

    ``leader_epoch_checkpoint`` holds the leader epochs up to the segment's end (Kafka uploads
    the partition's entries below the next segment's base offset); ``transaction_index`` is
    None when the segment's aborted-transaction index has no entries (it has no file then).
    """

    log_segment: str
    offset_index: str
    time_index: str
    producer_snapshot: str
    leader_epoch_checkpoint: str
    transaction_index: str | None = None

    @classmethod
    def in_directory(cls, directory: str, base_offset: int, next_offset: int) -> LogSegmentData:
        """The files of the segment at ``base_offset`` in a log directory, named as the log
        names them: its ``.log``, ``.index`` and ``.timeindex``, the producer snapshot taken
        when the next segment began (``<next_offset>.snapshot``), its ``.txnindex`` if there
        is one, and the partition's ``leader-epoch-checkpoint`` as it is now (entries of later
        epochs included: a copier wanting Kafka's exact content writes the entries below
        ``next_offset`` to a file of its own instead).
        """
        transactions = txn_index.path(directory, base_offset)
        return cls(
            log_segment=os.path.join(directory, file_name(base_offset, LOG_SUFFIX)),
            offset_index=os.path.join(directory, file_name(base_offset, IndexType.OFFSET.value)),
            time_index=os.path.join(directory, file_name(base_offset, IndexType.TIMESTAMP.value)),
            producer_snapshot=os.path.join(directory, file_name(next_offset, producer_snapshot.SUFFIX)),
            leader_epoch_checkpoint=os.path.join(directory, leader_epoch.FILE_NAME),
            transaction_index=transactions if os.path.exists(transactions) else None,
        )

    def uploads(self) -> tuple[tuple[str, str], ...]:
        """``(object suffix, local path)`` in upload order: the indexes, then the ``.log``."""
        files = [
            (IndexType.OFFSET.value, self.offset_index),
            (IndexType.TIMESTAMP.value, self.time_index),
            (IndexType.PRODUCER_SNAPSHOT.value, self.producer_snapshot),
            (IndexType.LEADER_EPOCH.value, self.leader_epoch_checkpoint),
        ]
        if self.transaction_index is not None:
            files.append((IndexType.TRANSACTION.value, self.transaction_index))
        return (*files, (LOG_SUFFIX, self.log_segment))


#: Every suffix a segment's objects may have, the manifest first (the order deletion takes).
_ALL_SUFFIXES = (MANIFEST_SUFFIX, LOG_SUFFIX, *(kind.value for kind in IndexType))
#: An object's name: ``<20-digit start offset>-<uuid><suffix>``.
_OBJECT_NAME = re.compile(r"^\d{20}-([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})(\..+)$")


class RemoteStorageManager:
    """See the module docstring.

    Args:
        filesystem: the store, e.g. ``pyarrow.fs.S3FileSystem(endpoint_override=...)``.
        base_path: the directory (``bucket/prefix`` for S3) that holds the partitions.

    Example::

        store = RemoteStorageManager.from_uri("file:///var/lib/raylog/remote")
        store.copy_log_segment_data(metadata, LogSegmentData.in_directory(log_dir, 0, 1_000))
        first_batches = store.fetch_log_segment(metadata, 0, 16_383)
    """

    def __init__(self, filesystem: pafs.FileSystem, base_path: str):
        self.filesystem = filesystem
        self.base_path = base_path.rstrip("/")

    @classmethod
    def from_uri(cls, uri: str) -> RemoteStorageManager:
        """The store a URI names (see :func:`filesystem_from_uri`).

        Raises:
            InvalidConfigError, RemoteStorageError: as :func:`filesystem_from_uri`.
        """
        return cls(*filesystem_from_uri(uri))

    def partition_path(self, topic: str, partition: int) -> str:
        """The directory of a partition's objects."""
        return f"{self.base_path}/{topic}-{partition}" if self.base_path else f"{topic}-{partition}"

    def object_path(self, metadata: RemoteLogSegmentMetadata, suffix: str) -> str:
        """The path of one of a segment's objects (``suffix``: ``.log``, an :class:`IndexType`'s
        value, or ``.manifest``)."""
        sid = metadata.segment_id
        return f"{self.partition_path(sid.topic, sid.partition)}/{metadata.start_offset:020d}-{sid.id}{suffix}"

    # --- copying ----------------------------------------------------------------------

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, segment_files: LogSegmentData) -> None:
        """Upload a closed segment's files as the objects of ``metadata``'s segment id: its
        manifest removed first, the indexes, the ``.log``, then the manifest (see the module
        docstring). On return the upload is COMPLETE.

        Raises:
            RemoteStorageError: a local file could not be read (or changed size meanwhile),
                or the store failed; the upload is not COMPLETE (the manifest is not written).
        """
        uploads = segment_files.uploads()
        expected = {suffix: _local_size(path) for suffix, path in uploads}
        manifest_path = self.object_path(metadata, MANIFEST_SUFFIX)
        with remote_errors("prepare", manifest_path, missing_is_not_found=False):
            with contextlib.suppress(FileNotFoundError):
                self.filesystem.delete_file(manifest_path)
            if not is_object_store(self.filesystem):
                self.filesystem.create_dir(
                    self.partition_path(metadata.segment_id.topic, metadata.segment_id.partition)
                )
        for suffix, local_path in uploads:
            copied = self._upload(local_path, self.object_path(metadata, suffix))
            if copied != expected[suffix]:
                raise RemoteStorageError(f"{local_path} changed while copied: {expected[suffix]} -> {copied} bytes")
        manifest = {
            "v": MANIFEST_VERSION,
            "id": metadata.segment_id.id,
            "start": metadata.start_offset,
            "end": metadata.end_offset,
            "objects": expected,
        }
        with remote_errors("write", manifest_path, missing_is_not_found=False):
            with self.filesystem.open_output_stream(manifest_path, compression=None) as sink:
                sink.write(msgpack.packb(manifest, use_bin_type=True))
        logger.info(
            "remote segment %s copied: offsets %d to %d, %d objects, %d bytes",
            metadata.segment_id,
            metadata.start_offset,
            metadata.end_offset,
            len(expected),
            sum(expected.values()),
        )

    def _upload(self, local_path: str, remote_path: str) -> int:
        """Copy one local file to one object; returns the bytes copied."""
        try:
            source = open(local_path, "rb")
        except OSError as exc:
            raise RemoteStorageError(f"cannot read {local_path} to copy it: {exc}") from exc
        copied = 0
        with source, remote_errors("write", remote_path, missing_is_not_found=False):
            # compression=None: pyarrow would otherwise pick a codec by the path's extension.
            with self.filesystem.open_output_stream(remote_path, compression=None) as sink:
                while chunk := source.read(COPY_CHUNK_BYTES):
                    sink.write(chunk)
                    copied += len(chunk)
        return copied

    def upload_state(self, metadata: RemoteLogSegmentMetadata) -> UploadState:
        """Whether the store holds none, part or all of the segment's objects (see the module
        docstring). Only sizes are compared, not contents.

        Raises:
            RemoteStorageError: the store failed.
        """
        paths = [self.object_path(metadata, suffix) for suffix in _ALL_SUFFIXES]
        with remote_errors("list", self.partition_path(metadata.segment_id.topic, metadata.segment_id.partition)):
            infos = self.filesystem.get_file_info(paths)
        sizes = {s: i.size for s, i in zip(_ALL_SUFFIXES, infos, strict=True) if i.type == pafs.FileType.File}
        if not sizes:
            return UploadState.ABSENT
        if MANIFEST_SUFFIX not in sizes or sizes[MANIFEST_SUFFIX] > MAX_MANIFEST_BYTES:
            return UploadState.PARTIAL
        try:
            manifest = msgpack.unpackb(self._read_whole(self.object_path(metadata, MANIFEST_SUFFIX)), raw=False)
        except RemoteResourceNotFoundError:  # deleted meanwhile
            return UploadState.PARTIAL
        except (ValueError, TypeError, msgpack.UnpackException):
            logger.warning("remote segment %s has a manifest that is not valid", metadata.segment_id)
            return UploadState.PARTIAL
        valid = isinstance(manifest, dict) and manifest.get("v") == MANIFEST_VERSION
        objects = manifest.get("objects") if valid else None
        if not valid or manifest.get("id") != metadata.segment_id.id or not isinstance(objects, dict):
            return UploadState.PARTIAL
        whole = LOG_SUFFIX in objects and all(sizes.get(suffix) == size for suffix, size in objects.items())
        return UploadState.COMPLETE if whole else UploadState.PARTIAL

    # --- reading ----------------------------------------------------------------------

    def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int | None = None
    ) -> bytes:
        """The bytes of the segment's ``.log`` from ``start_position`` to ``end_position``
        (inclusive, as Kafka's fetchLogSegment; None: the end of the object), read as one
        ranged read; shorter when the object ends first, empty past its end.

        Raises:
            ValueError: ``start_position`` is negative or ``end_position`` below it.
            RemoteResourceNotFoundError: the object is not there.
            RemoteStorageError: the store failed, or returned fewer bytes than it holds.
        """
        if start_position < 0 or (end_position is not None and end_position < start_position):
            raise ValueError(f"positions [{start_position}, {end_position}] of a remote segment are not a range")
        path = self.object_path(metadata, LOG_SUFFIX)
        with remote_errors("read", path), self.filesystem.open_input_file(path) as source:
            size = source.size()
            last = size - 1 if end_position is None else min(end_position, size - 1)
            wanted = max(0, last - start_position + 1)
            data = source.read_at(wanted, start_position) if wanted else b""
        if len(data) != wanted:
            raise RemoteStorageError(f"short read of {path}: {len(data)} of {wanted} bytes at {start_position}")
        return data

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, kind: IndexType) -> bytes:
        """The whole content of one of the segment's indexes.

        Raises:
            RemoteResourceNotFoundError: the object is not there (a segment without aborted
                transactions has no TRANSACTION index: read that as no entries).
            RemoteStorageError: the store failed.
        """
        return self._read_whole(self.object_path(metadata, kind.value))

    def _read_whole(self, path: str) -> bytes:
        with remote_errors("read", path), self.filesystem.open_input_file(path) as source:
            return source.read()

    # --- deleting ---------------------------------------------------------------------

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Delete every object of the segment id, the manifest first; objects already gone
        are fine, so a deletion may be repeated (and cleans up a half-finished upload).

        Raises:
            RemoteStorageError: the store failed; what was deleted stays deleted, and the
                upload is no longer COMPLETE if anything was.
        """
        for suffix in _ALL_SUFFIXES:
            path = self.object_path(metadata, suffix)
            with remote_errors("delete", path, missing_is_not_found=False):
                with contextlib.suppress(FileNotFoundError):
                    self.filesystem.delete_file(path)
        logger.info(
            "remote segment %s deleted: offsets %d to %d",
            metadata.segment_id,
            metadata.start_offset,
            metadata.end_offset,
        )

    def delete_partition(self, topic: str, partition: int) -> None:
        """Delete every object of a partition (its topic is deleted, as Kafka's
        RemotePartitionDeleteState ends with the partition's objects gone); a partition without
        any is fine, so it may be repeated.

        Raises:
            RemoteStorageError: the store failed; what was deleted stays deleted.
        """
        delete_dir(self.filesystem, self.partition_path(topic, partition))

    def clean_orphans(
        self, topic: str, partition: int, keep: Iterable[RemoteLogSegmentId], modified_before_ms: int
    ) -> list[str]:
        """Delete the objects of the partition's segment ids not in ``keep`` (the ids its
        metadata knows) whose objects were all last modified before ``modified_before_ms``,
        each id's manifest first; an id whose store tells no time is kept. Returns the paths
        deleted.

        Raises:
            RemoteStorageError: the store failed; what was deleted stays deleted.
        """
        kept = {sid.id for sid in keep}
        directory = self.partition_path(topic, partition)
        with remote_errors("list", directory, missing_is_not_found=False):
            infos = self.filesystem.get_file_info(pafs.FileSelector(directory, allow_not_found=True))
        by_id: dict[str, list[pafs.FileInfo]] = {}
        for info in infos:
            match = _OBJECT_NAME.match(info.base_name) if info.type == pafs.FileType.File else None
            if match is not None and match.group(1) not in kept:
                by_id.setdefault(match.group(1), []).append(info)
        deleted = []
        for objects in by_id.values():
            if any(i.mtime_ns is None or i.mtime_ns // 1_000_000 >= modified_before_ms for i in objects):
                continue  # maybe an upload in flight
            for info in sorted(objects, key=lambda i: not i.path.endswith(MANIFEST_SUFFIX)):
                with remote_errors("delete", info.path, missing_is_not_found=False):
                    with contextlib.suppress(FileNotFoundError):
                        self.filesystem.delete_file(info.path)
                deleted.append(info.path)
        if deleted:
            logger.info("remote segments of %s-%d: %d orphaned objects deleted", topic, partition, len(deleted))
        return deleted


def _local_size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError as exc:
        raise RemoteStorageError(f"cannot read {path} to copy it: {exc}") from exc
