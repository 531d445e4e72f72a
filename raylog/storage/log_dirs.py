"""Identities on a broker's disk: whose data directory it is, and which topic each log is of.

A broker's data directory holds ``meta.json`` and one log directory per replica::

    meta.json                               {"version": 2, "cluster_id", "broker_id",
                                             "directory_id"}
    <topic>-<partition>-<topic_id>/         a replica's log (see log.py), with
        partition.metadata                  "version: 0" and "topic_id: <id>" lines
    <topic>-<partition>/                    a log of the layout before topic ids
    <log dir name>.<uuid>-stray/            a stray log being removed

``meta.json`` (KIP-858): the cluster id and broker id say whose directory it is; the
directory id, a uuid drawn when the directory is formatted, says which directory: a
broker that comes back with an empty or replaced disk presents a new one, so the
controller knows that it holds none of its replicas any more. Version 1 files (no
directory id) get one once, when first read.

Log directories (KIP-516): a log is named by its topic id as well as its topic name, so a
topic deleted while a broker was down and created again with the same name never reopens
the old incarnation's segments, epoch checkpoint or high watermark; ``partition.metadata``
keeps the id inside the directory, and a log whose file names another id is refused with
INCONSISTENT_TOPIC_ID. A log of the old layout is adopted once, by the first replica of
its topic and partition that opens it: it gets the file, then its new name (as Kafka
assigns a topic id to a log that has none). Logs that are not the current incarnation of
a partition assigned to this broker (topic deleted, replica moved away, same name with
another id) are stray: :func:`mark_stray_logs` renames each atomically out of the log
namespace (``-stray``), and :func:`delete_stray_logs` deletes them; an interrupted
deletion is finished by the next one.

Every file is written whole (temporary file, fsync, rename, fsync of the directory).

Concurrency: a replica opens only its own log directory; the controller scans a broker's
directory for strays only while that broker is not live (no replica of it opens a log then).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..errors import InconsistentClusterIdError, InconsistentTopicIdError, InvalidConfigError, StorageError
from .files import fsync_directory, write_atomically

logger = logging.getLogger(__name__)

META_FILE = "meta.json"
META_VERSION = 2
PARTITION_METADATA_FILE = "partition.metadata"
PARTITION_METADATA_VERSION = 0
STRAY_SUFFIX = "-stray"
#: ``<topic>-<partition>`` and, optionally, ``-<topic id>`` (32 hex digits, as uuid4().hex).
_LOG_DIR_NAME = re.compile(r"^(?P<topic>.+?)-(?P<partition>\d+)(?:-(?P<topic_id>[0-9a-f]{32}))?$")
_SEGMENT_FILE = re.compile(r"^\d{20}\.log$")


@dataclass(frozen=True)
class DataDirIdentity:
    """What ``meta.json`` says: the cluster, the broker and the directory itself."""

    cluster_id: str
    broker_id: int
    directory_id: str


def load_data_dir(
    data_dir: str, cluster_id: str, broker_id: int | None, new_id: Callable[[], str] = lambda: uuid.uuid4().hex
) -> DataDirIdentity | None:
    """Read ``<data_dir>/meta.json``, or format the directory for ``broker_id``.

    Args:
        data_dir: the broker's data directory.
        cluster_id: the cluster asking (the controller journal's).
        broker_id: the broker this directory must belong to, or None to take the one on disk.
        new_id: draws a directory id (when formatting, or for a version 1 file).

    Returns:
        The identity on disk (written now if the directory was new), or None when the
        directory holds none and ``broker_id`` is None.

    Raises:
        InconsistentClusterIdError: the directory belongs to another cluster.
        InvalidConfigError: it belongs to another broker id.
        StorageError: ``meta.json`` cannot be read, parsed or written.
    """
    path = os.path.join(data_dir, META_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            meta = json.load(f)
    except FileNotFoundError:
        meta = None
    except (OSError, ValueError) as exc:
        raise StorageError(f"cannot read {path}: {exc}") from exc
    if meta is None:
        if broker_id is None:
            return None
        identity = DataDirIdentity(cluster_id, broker_id, new_id())
        _write_meta(data_dir, identity)
        logger.info(
            "formatted %s for broker %d of cluster %s: directory %s",
            data_dir,
            broker_id,
            cluster_id,
            identity.directory_id,
        )
        return identity
    try:
        found = DataDirIdentity(str(meta["cluster_id"]), int(meta["broker_id"]), str(meta.get("directory_id", "")))
    except (KeyError, TypeError, ValueError) as exc:
        raise StorageError(f"{path} is not a raylog meta.json: {meta!r}") from exc
    if found.cluster_id != cluster_id:
        raise InconsistentClusterIdError(
            f"{path} belongs to raylog cluster {found.cluster_id}, not to cluster {cluster_id} whose controller "
            "asked: refusing this broker (give it an empty data directory to join this cluster)"
        )
    if broker_id is not None and found.broker_id != broker_id:
        raise InvalidConfigError(f"{path} says broker {found.broker_id}, the node label says {broker_id}")
    if not found.directory_id:
        found = DataDirIdentity(found.cluster_id, found.broker_id, new_id())
        _write_meta(data_dir, found)
        logger.info("%s had no directory id: gave it %s", path, found.directory_id)
    return found


def _write_meta(data_dir: str, identity: DataDirIdentity) -> None:
    meta = {
        "version": META_VERSION,
        "cluster_id": identity.cluster_id,
        "broker_id": identity.broker_id,
        "directory_id": identity.directory_id,
    }
    _write_file(data_dir, META_FILE, json.dumps(meta))


def log_dir_name(topic: str, partition: int, topic_id: str) -> str:
    return f"{topic}-{partition}-{topic_id}"


def open_log_dir(data_dir: str, topic: str, partition: int, topic_id: str) -> str:
    """The log directory of ``topic``'s partition in its incarnation ``topic_id``, created
    (with its ``partition.metadata``) or adopted from the old layout when there is none.

    Raises:
        InconsistentTopicIdError: the directory's ``partition.metadata`` names another id.
        StorageError: the disk failed, or ``partition.metadata`` is unreadable.
    """
    path = os.path.join(data_dir, log_dir_name(topic, partition, topic_id))
    legacy = os.path.join(data_dir, f"{topic}-{partition}")
    try:
        if not os.path.isdir(path) and os.path.isdir(legacy) and read_topic_id(legacy) in (None, topic_id):
            write_topic_id(legacy, topic_id)
            os.rename(legacy, path)
            fsync_directory(data_dir)
            logger.info("log %s of the layout without topic ids adopted as %s", legacy, path)
        if os.path.isdir(path):
            found = read_topic_id(path)
            if found is not None and found != topic_id:
                raise InconsistentTopicIdError(
                    f"log directory {path} holds topic id {found}, not {topic_id}: not opening it"
                )
            if found is None:  # created, then a crash before its file was written
                write_topic_id(path, topic_id)
            return path
        os.makedirs(path)
        write_topic_id(path, topic_id)
        fsync_directory(data_dir)
    except OSError as exc:
        raise StorageError(f"cannot prepare log directory {path}: {exc}") from exc
    return path


def read_topic_id(directory: str) -> str | None:
    """The topic id in ``directory``'s ``partition.metadata``, None when it has none.

    Raises:
        StorageError: the file is unreadable, of an unknown version, or names no topic id.
    """
    path = os.path.join(directory, PARTITION_METADATA_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc}") from exc
    fields = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
    if fields.get("version") != str(PARTITION_METADATA_VERSION) or not fields.get("topic_id"):
        raise StorageError(f"{path} is not a version {PARTITION_METADATA_VERSION} partition metadata file: {text!r}")
    return fields["topic_id"]


def write_topic_id(directory: str, topic_id: str) -> None:
    """Write ``directory``'s ``partition.metadata`` (whole, durable)."""
    _write_file(directory, PARTITION_METADATA_FILE, f"version: {PARTITION_METADATA_VERSION}\ntopic_id: {topic_id}\n")


def mark_stray_logs(data_dir: str, assigned: Mapping[tuple[str, int], str]) -> list[str]:
    """Rename every stray log of ``data_dir`` out of the log namespace.

    Args:
        assigned: ``(topic, partition) -> topic id`` of every replica this broker holds.

    Returns:
        The names of the logs found stray (each now ``<name>.<uuid>-stray``).

    Raises:
        StorageError: the directory cannot be listed, or a rename failed.
    """
    try:
        names = os.listdir(data_dir)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise StorageError(f"cannot list {data_dir}: {exc}") from exc
    stray = [name for name in sorted(names) if _is_stray(data_dir, name, names, assigned)]
    for name in stray:
        renamed = f"{name}.{uuid.uuid4().hex}{STRAY_SUFFIX}"
        try:
            os.rename(os.path.join(data_dir, name), os.path.join(data_dir, renamed))
        except OSError as exc:
            raise StorageError(f"cannot rename stray log {name} in {data_dir}: {exc}") from exc
        logger.warning(
            "stray log %s in %s (topic deleted, re-created or moved away) renamed %s", name, data_dir, renamed
        )
    if stray:
        fsync_directory(data_dir)
    return stray


def _is_stray(data_dir: str, name: str, names: list[str], assigned: Mapping[tuple[str, int], str]) -> bool:
    match = _LOG_DIR_NAME.match(name)
    if match is None or not _is_log_dir(os.path.join(data_dir, name)):
        return False
    key = (match["topic"], int(match["partition"]))
    if match["topic_id"] is not None:
        return assigned.get(key) != match["topic_id"]
    # The old layout: kept for the replica to adopt, unless it cannot be this partition's.
    return key not in assigned or log_dir_name(*key, assigned[key]) in names


def _is_log_dir(path: str) -> bool:
    """A directory that a replica wrote (not, say, another broker's data directory)."""
    try:
        files = os.listdir(path)
    except OSError:
        return False
    if META_FILE in files:
        return False
    return PARTITION_METADATA_FILE in files or any(_SEGMENT_FILE.match(f) for f in files)


def delete_stray_logs(data_dir: str) -> list[str]:
    """Delete the logs :func:`mark_stray_logs` renamed; returns their names.

    Raises:
        StorageError: the directory cannot be listed or a log not deleted.
    """
    try:
        names = [n for n in os.listdir(data_dir) if n.endswith(STRAY_SUFFIX)]
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise StorageError(f"cannot list {data_dir}: {exc}") from exc
    for name in names:
        try:
            shutil.rmtree(os.path.join(data_dir, name))
        except OSError as exc:
            raise StorageError(f"cannot delete stray log {name} in {data_dir}: {exc}") from exc
        logger.info("deleted stray log %s in %s", name, data_dir)
    return names


def remove_log_dir(path: str) -> None:
    """Remove a replica's log directory: renamed stray first (atomic), so that a removal
    cut short is finished by :func:`delete_stray_logs`, never reopened as a log.

    Raises:
        StorageError: the rename or the deletion failed.
    """
    parent, name = os.path.split(path)
    stray = os.path.join(parent, f"{name}.{uuid.uuid4().hex}{STRAY_SUFFIX}")
    try:
        os.rename(path, stray)
        fsync_directory(parent)
        shutil.rmtree(stray)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StorageError(f"cannot remove log directory {path}: {exc}") from exc


def _write_file(directory: str, name: str, text: str) -> None:
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"cannot create {directory}: {exc}") from exc
    write_atomically(os.path.join(directory, name), text)
