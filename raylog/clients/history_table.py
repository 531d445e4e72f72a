"""A topic's Parquet history registered as an Apache Iceberg table (``pyiceberg``, the
``iceberg`` extra), so that any Iceberg engine (Spark, Trino, DuckDB, pyiceberg itself) queries
it by name with snapshots, partition pruning and statistics, without raylog.

:func:`sync_history_table` brings the table up to date with the history's manifests, which
stay the truth (:mod:`raylog.common.history_format`): it adds the files the manifests list and
the table lacks (metadata only: the files are not copied or rewritten), and drops the entries
of files the manifests no longer list (retention deleted them). It is idempotent and may run
anywhere, any time, as often as wanted: after a crash it is simply run again. Each run that
changes the table commits one snapshot per partition changed.

The table is partitioned by ``partition`` (identity) and holds what a read_committed consumer
reads of the history (the files leave aborted records out); the live tail, not yet in the
history, is not in it. Between two runs it lags the history; an entry whose file retention
deleted since the last run makes a scan that reaches it fail until the next run, so a topic
with remote retention wants the sync run more often than retention deletes (see
docs/operations.md, "History as an Iceberg table").
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from raylog.clients.history import HistorySource, history_source
from raylog.common.history_format import HISTORY_DIR, HISTORY_SCHEMA, partition_path, read_manifest
from raylog.common.object_store import filesystem_from_uri
from raylog.errors import InvalidConfigError, RemoteStorageError

log = logging.getLogger(__name__)

#: The namespace a topic's table is created in unless a table name is given.
DEFAULT_NAMESPACE = "raylog"
#: A file:// store's directory for the tables' metadata and, without catalog properties, the
#: SQL catalog's SQLite file (the embedded default).
ICEBERG_DIR, CATALOG_FILE = "iceberg", "catalog.db"
#: The table's properties: no commit retried by pyiceberg itself, which would put an append on
#: top of another sync's without checking it again, and so register the same files twice; a
#: sync whose commit is refused plans again against the table as the other left it.
TABLE_PROPERTIES = {"commit.retry.num-retries": "0"}
#: What an SQL catalog's database says when two syncs created the same row or table at once.
RACED_SQL_ERRORS = ("already exists", "database is locked", "UNIQUE constraint failed", "duplicate key value")
#: Syncs tried again when another writer committed to the table meanwhile (the catalog
#: refused the commit, or pyiceberg found files the other one dropped), each after a random
#: pause of up to this many seconds times the try's number.
COMMIT_TRIES, COMMIT_BACKOFF_S = 10, 0.05


@dataclasses.dataclass(frozen=True)
class HistoryTableSync:
    """What a sync did: the table's identifier, the files added and the entries dropped."""

    table: tuple[str, ...]
    added: int
    removed: int
    files: int  # the table's files after the sync
    held_back: int = 0  # listed files left out: one of them or one below is not in the store


def sync_history_table(
    cluster,
    topic: str,
    catalog: Mapping[str, str] | None = None,
    table: str | tuple[str, ...] | None = None,
    client_config: dict[str, Any] | None = None,
) -> HistoryTableSync:
    """Register ``topic``'s history files in an Iceberg table and drop what retention deleted.

    Args:
        cluster: a raylog cluster handle.
        topic: a topic with ``remote.storage.history.enable``.
        catalog: pyiceberg catalog properties (``pyiceberg.catalog.load_catalog``; the
            catalog's name is ``raylog``), e.g. ``{"type": "sql", "uri": "sqlite:////data/iceberg.db"}``
            for an SQL catalog on SQLite, or a REST, Glue or Hive catalog's. With a ``file://``
            store, none means an SQL catalog in ``<store>/iceberg/catalog.db`` and no
            ``warehouse`` (where the tables' metadata goes) means ``<store>/iceberg``; any
            other store needs both a ``type`` and a ``warehouse``.
        table: the table's identifier (default: ``raylog.<topic>``); created when missing.
        client_config: the security settings to ask the controller with (as a Consumer's).

    Raises:
        InvalidConfigError: the topic keeps no history, or the catalog properties are not usable.
        RemoteStorageError: the store or a manifest could not be read (retriable).
        ImportError: pyiceberg is not installed (``pip install 'raylog[iceberg]'``).
        TopicAuthorizationFailedError, UnknownTopicOrPartitionError: as a Consumer's.
    """
    source = history_source(cluster, topic, client_config)
    if source is None:
        raise InvalidConfigError(f"topic {topic!r} keeps no history (remote.storage.history.enable)")
    return register_history(source, topic, catalog, table)


def register_history(
    source: HistorySource,
    topic: str,
    catalog: Mapping[str, str] | None = None,
    table: str | tuple[str, ...] | None = None,
) -> HistoryTableSync:
    """:func:`sync_history_table` for the history at ``source`` (which
    :func:`~raylog.clients.history.history_source` names), with the same arguments and errors."""
    from pyiceberg.catalog import load_catalog

    properties = dict(catalog or {})
    local = urlsplit(source.uri).scheme in ("", "file")
    if not local and ("warehouse" not in properties or "type" not in properties):
        raise InvalidConfigError("a store that is not file:// needs catalog properties with a 'type' and a 'warehouse'")
    identifier = _identifier(table, topic)
    filesystem, base_path = filesystem_from_uri(source.uri)
    home = f"{base_path.rstrip('/')}/{ICEBERG_DIR}"
    if not properties:
        os.makedirs(home, exist_ok=True)
        properties = {"type": "sql", "uri": f"sqlite:///{home}/{CATALOG_FILE}"}
    wanted, held_back = {}, 0
    for partition in _partitions(filesystem, base_path, source.name):
        files, missing = _registrable(filesystem, base_path, source.name, partition)
        wanted[partition] = {_location(source.uri, path) for path in files}
        if missing:
            held_back += missing
            log.warning(
                "%s-%d: the history lists a file the store does not hold: %d files from it on are left out of "
                "the table (the brokers still serve those offsets)",
                topic,
                partition,
                missing,
            )
    properties.setdefault("warehouse", _location(source.uri, home))
    for attempt in range(1, COMMIT_TRIES + 1):
        try:
            try:
                iceberg = load_catalog("raylog", **properties)
            except (ValueError, NotImplementedError) as exc:
                raise InvalidConfigError(f"catalog properties not usable: {exc}") from exc
            return dataclasses.replace(_sync(iceberg, identifier, wanted), held_back=held_back)
        except Exception as exc:
            if attempt == COMMIT_TRIES or not _raced(exc):
                raise
            log.info(
                "%s: another writer committed to %s meanwhile (%s): syncing again", topic, ".".join(identifier), exc
            )
            time.sleep(random.uniform(0, COMMIT_BACKOFF_S * attempt))
    raise AssertionError("unreachable")


def _raced(exc: Exception) -> bool:
    """Whether ``exc`` is another writer's doing, which a sync run again gets past: a commit the
    catalog refused, files another sync dropped first, a namespace or table another created
    first, or an SQL catalog's own rows or tables written by two at once (SQLAlchemy's errors:
    SQLite's and PostgreSQL's words for them)."""
    from pyiceberg.exceptions import (
        CommitFailedException,
        NamespaceAlreadyExistsError,
        TableAlreadyExistsError,
        ValidationException,
    )

    raced = (CommitFailedException, ValidationException, NamespaceAlreadyExistsError, TableAlreadyExistsError)
    return isinstance(exc, raced) or any(s in str(exc) for s in RACED_SQL_ERRORS)


def _sync(iceberg, identifier: tuple[str, ...], wanted: dict[int, set[str]]) -> HistoryTableSync:
    from pyiceberg.expressions import And, EqualTo, LessThanOrEqual

    iceberg.create_namespace_if_not_exists(identifier[:-1])
    table = iceberg.create_table_if_not_exists(identifier, schema=HISTORY_SCHEMA, properties=TABLE_PROPERTIES)
    if table.spec().is_unpartitioned() or any(table.properties.get(k) != v for k, v in TABLE_PROPERTIES.items()):
        with table.transaction() as transaction:
            transaction.set_properties(TABLE_PROPERTIES)
            if table.spec().is_unpartitioned():
                with transaction.update_spec() as spec:
                    spec.add_identity("partition")
        table = iceberg.load_table(identifier)
    added = removed = 0
    for partition, files in sorted(_table_files(table).items()):
        gone = files - wanted.get(partition, set())
        if gone:
            # Whole files: every offset of a dropped file is at most its last one, and a kept
            # file dropped with it (none is, retention deletes a prefix) is added again below.
            last = max(_last_offset(location) for location in gone)
            table.delete(And(EqualTo("partition", partition), LessThanOrEqual("offset", last)))
            removed += len(gone)
    present = _table_files(table)
    for partition, files in sorted(wanted.items()):
        new = sorted(files - present.get(partition, set()))
        if new:
            table.add_files(new)
            added += len(new)
    total = sum(len(files) for files in _table_files(table).values())
    return HistoryTableSync(identifier, added, removed, total)


def _registrable(filesystem: pafs.FileSystem, base_path: str, name: str, partition: int) -> tuple[list[str], int]:
    """The paths of a partition's listed files with rows, up to the first that the store does
    not hold (a table with a gap would lose records silently: a read of the history through
    the brokers never does), and how many listed files with rows are left out from there on."""
    directory = partition_path(base_path, name, partition)
    listed = [
        f"{directory}/{f.name}"
        for f in read_manifest(filesystem, base_path, name, partition).files
        if f.record_count  # (a file without rows, a segment of markers only, adds nothing to read)
    ]
    try:
        infos = filesystem.get_file_info(listed)
    except OSError as exc:
        raise RemoteStorageError(f"cannot look up the files of {directory}: {exc}") from exc
    present = [info.type == pafs.FileType.File for info in infos]
    held = present.index(False) if False in present else len(listed)
    return listed[:held], len(listed) - held


def _table_files(table) -> dict[int, set[str]]:
    """The table's data files by partition."""
    if table.current_snapshot() is None:
        return {}
    files = table.inspect.files().select(["file_path", "partition"]).to_pylist()
    by_partition: dict[int, set[str]] = {}
    for row in files:
        by_partition.setdefault(row["partition"]["partition"], set()).add(row["file_path"])
    return by_partition


def _partitions(filesystem: pafs.FileSystem, base_path: str, name: str) -> list[int]:
    """The partitions that have a history directory."""
    base = base_path.rstrip("/")
    directory = f"{base + '/' if base else ''}{HISTORY_DIR}/{name}"
    try:
        infos = filesystem.get_file_info(pafs.FileSelector(directory, allow_not_found=True))
    except OSError as exc:
        raise RemoteStorageError(f"cannot list {directory}: {exc}") from exc
    prefix = "partition="
    return sorted(int(i.base_name[len(prefix) :]) for i in infos if i.base_name.startswith(prefix))


def _location(store_uri: str, path: str) -> str:
    """A path in the store as the URI Iceberg records (``file:///...``, ``s3://bucket/...``)."""
    parts = urlsplit(store_uri)
    if parts.scheme in ("", "file"):
        return f"file://{path}"
    if parts.scheme in ("hdfs", "viewfs"):
        return f"{parts.scheme}://{parts.netloc}/{path.lstrip('/')}"
    return f"{parts.scheme}://{path}"


def _last_offset(location: str) -> int:
    return int(location.rsplit("/", 1)[1].split("-", 2)[1])


def _identifier(table: str | tuple[str, ...] | None, topic: str) -> tuple[str, ...]:
    if table is None:
        return (DEFAULT_NAMESPACE, topic)
    identifier = tuple(table.split(".")) if isinstance(table, str) else tuple(table)
    if len(identifier) < 2 or not all(identifier):
        raise InvalidConfigError(f"table {table!r} is not <namespace>.<name>")
    return identifier
