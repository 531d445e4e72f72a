"""Durable file operations shared by the storage modules (Kafka's ``Utils.atomicMoveWithFallback``
and ``Utils.flushDir``).

A file's data is durable once the file is fsync'd; its name (creation, rename, unlink) only
once its directory is. :func:`write_atomically` replaces a small file (a checkpoint) so that
a crash leaves either the old or the new content, and the new one durable on return.

Every write goes through :mod:`raylog.storage.faults`, so fault tests can fail it.
"""

from __future__ import annotations

import os

from ..errors import StorageError
from . import faults


def fsync_directory(directory: str) -> None:
    """Make creations, renames and unlinks in ``directory`` durable.

    Raises:
        StorageError: the directory cannot be opened or fsync'd.
    """
    try:
        faults.check_write(directory)
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise StorageError(f"cannot fsync directory {directory}: {exc}") from exc


def write_atomically(path: str, content: str | bytes) -> None:
    """Replace ``path`` by a file holding ``content`` (text in UTF-8): a temporary file,
    fsync'd, renamed over it, then the directory fsync'd.

    Raises:
        StorageError: a step failed; ``path`` holds its previous content.
    """
    tmp = path + ".tmp"
    data = content.encode() if isinstance(content, str) else content
    try:
        faults.check_write(tmp)
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        raise StorageError(f"cannot write {path}: {exc}") from exc
    fsync_directory(os.path.dirname(path) or ".")


def remove(path: str) -> None:
    """Delete ``path`` (gone already is fine).

    Raises:
        StorageError: the file exists but cannot be removed.
    """
    try:
        faults.check_shrink(path)
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise StorageError(f"cannot delete {path}: {exc}") from exc
