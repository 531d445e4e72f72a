"""The format of a topic's history as Parquet (issue 31), which the broker writes
(:mod:`raylog.storage.history`) and Spark and Ray Data read in their own tasks
(:func:`plan_history_read`, :func:`read_history`): the files' layout, columns and manifest,
and how a read of an offset range is planned over them.

Layout, under the store's base path (hive-style, so directory readers find the partition)::

    <base>/history/<topic>-<topic id>/partition=<p>/<first offset>-<last offset>-<uuid>.parquet
    <base>/history/<topic>-<topic id>/partition=<p>/_raylog_manifest.json

(the topic id keeps a topic created again under a deleted one's name apart from its history).
Offsets are 20 digits, both ends inclusive: the range of offsets the file answers for (its
segment's, or the part of it no earlier file covers); the uuid is the remote segment id's.
A file's columns are :data:`HISTORY_SCHEMA`, Spark's Kafka source with headers
(:func:`raylog.common.kafka_columns.kafka_arrow_schema`): key, value, topic, partition,
offset, timestamp (us, UTC), timestampType, headers (null for a record without any). Rows
rise by offset, in row groups with min/max statistics on offset, timestamp, partition and
timestampType, so a read of an offset range skips the row groups outside it. The
``partition`` column is in the files and in the directory name both: ``pyarrow.dataset``
(hive partitioning) and Spark read it as one column, the file's, at its place in the schema
(Spark's partition discovery replaces an overlapping data column by the directory's value, of
the same type int); Ray Data's ``read_parquet`` keeps the file's and logs that it did.
Without it in the files a directory read would append ``partition`` last (and as a string in
Ray Data) and a file read alone would lack it.

The manifest is JSON, every file of the partition's history::

    {"version": 1, "topic": str, "partition": int,
     "files": [{"name": str, "first_offset": int, "last_offset": int, "record_count": int,
                "size_bytes": int, "max_timestamp_ms": int (-1: no record), "segment_id": str,
                "aborted": bool (records of aborted transactions left out)}]}

Invariants: the manifest is the truth, a file is part of the history when the manifest lists
it, and it lists a file only once the file is whole. Listed ranges never overlap and rise.
A file holds exactly the records a read_committed consumer reads in its range; where that
drops aborted records the manifest says so, and a read_uncommitted plan stops before that
file. ``_``- and ``.``-prefixed names are hidden from Spark and ``pyarrow.dataset``, names
not ending ``.parquet`` from Ray Data: the manifest and temporary files never look like data.
A directory read (``spark.read.parquet(dir)``) may see a file whose write failed before the
manifest listed it, until the broker sweeps it: read the files a plan names for exactly the
partition's records.

Errors: every failure of the store is a :class:`~raylog.errors.RemoteStorageError`
(retriable); a file a plan names but retention deleted meanwhile is a
:class:`~raylog.errors.RemoteResourceNotFoundError` (plan again). Plans and reads run
anywhere, any number at once.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from ..errors import RemoteResourceNotFoundError, RemoteStorageError
from . import kafka_columns
from .object_store import remote_errors

#: The columns of every history file: Spark's Kafka source with headers.
HISTORY_SCHEMA = kafka_columns.kafka_arrow_schema(include_headers=True)
#: The directory under the store's base path that holds every topic's history.
HISTORY_DIR = "history"
MANIFEST_NAME = "_raylog_manifest.json"
MANIFEST_VERSION = 1
#: The largest manifest read (about 200 bytes a file: some 300,000 files).
MAX_MANIFEST_BYTES = 64 * 1024 * 1024
#: A history file's name (see the module docstring); group 3 is its segment's uuid.
FILE_NAME = re.compile(r"^(\d{20})-(\d{20})-([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.parquet$")
_INT_FIELDS = ("first_offset", "last_offset", "record_count", "size_bytes", "max_timestamp_ms")


# --- the manifest ----------------------------------------------------------------------


@dataclass(frozen=True)
class HistoryFile:
    """One file of a partition's history, as its manifest lists it: offsets
    ``[first_offset, last_offset]`` (inclusive) of the remote segment ``segment_id``;
    ``aborted``: records of aborted transactions in that range were left out (a
    read_uncommitted read of it is served by the brokers)."""

    name: str
    first_offset: int
    last_offset: int
    record_count: int
    size_bytes: int
    max_timestamp_ms: int
    segment_id: str
    aborted: bool


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

    def contiguous_from(
        self, start_offset: int, end_offset: int | None, read_committed: bool = True
    ) -> tuple[tuple[HistoryFile, ...], int]:
        """The files covering ``[start_offset, end_offset)`` from ``start_offset`` on without
        a gap (for a read_uncommitted read, up to the first file that left aborted records
        out), and the offset where they stop covering it (``start_offset`` when none does;
        at most ``end_offset``; None: no end)."""
        lasts = [f.last_offset for f in self.files]
        chosen, next_offset = [], start_offset
        for f in self.files[bisect.bisect_left(lasts, start_offset) :]:
            done = end_offset is not None and next_offset >= end_offset
            if done or f.first_offset > next_offset or (f.aborted and not read_committed):
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
            types_ok = all(type(getattr(f, n)) is int for n in _INT_FIELDS) and type(f.aborted) is bool
            if not types_ok or not isinstance(f.segment_id, str):
                raise ValueError(f"{f} has a field of the wrong type")
            if f.name != file_name(f.first_offset, f.last_offset, f.segment_id) or not FILE_NAME.match(f.name):
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
    read_committed: bool = True,
) -> HistoryPlan:
    """The history files that serve ``[start_offset, end_offset)`` of a partition, as far as
    the manifest lists files covering it from ``start_offset`` on without a gap (holes that
    compaction left inside files are no gap; a range no file covers is), and where the live
    tail begins. ``end_offset`` None: as far as the history goes. A read_uncommitted read
    (``read_committed`` False) stops at the first file that left aborted records out.

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
    files, history_end = manifest.contiguous_from(start_offset, end_offset, read_committed)
    directory = partition_path(base_path, topic, partition)
    paths = tuple(f"{directory}/{f.name}" for f in files)
    return HistoryPlan(filesystem, topic, partition, start_offset, end_offset, history_end, files, paths)


def read_history(plan: HistoryPlan) -> pa.Table:
    """The rows a plan names (:data:`HISTORY_SCHEMA`), in offset order, as one table.

    Raises:
        RemoteResourceNotFoundError, RemoteStorageError: as :func:`iter_history`.
    """
    return pa.concat_tables([HISTORY_SCHEMA.empty_table(), *iter_history(plan)])


def iter_history(plan: HistoryPlan) -> Iterator[pa.Table]:
    """The rows a plan names (:data:`HISTORY_SCHEMA`), one table a file, in offset order:
    each file read with the plan's filter pushed down to its row groups.

    Raises:
        RemoteResourceNotFoundError: a file is gone (retention deleted it: plan again).
        RemoteStorageError: the store failed, or a file is not valid Parquet.
    """
    import pyarrow.dataset as ds  # here: see HistoryPlan.filter

    for path in plan.paths:
        with remote_errors("read", path):
            dataset = ds.dataset(path, schema=HISTORY_SCHEMA, format="parquet", filesystem=plan.filesystem)
            table = dataset.to_table(filter=plan.filter)
        yield table
