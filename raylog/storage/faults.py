"""A process-wide disk-fault switch for fault tests: storage writes fail while it is on.

:func:`inject` turns it on with an errno (``errno.ENOSPC`` for a full disk, ``errno.EIO``
for a failing one), for good or for a while, or off with None (a fault for a while ends by
itself, so one switched on late, by a call its caller gave up on, still ends). While it is
on, every write the storage engine makes raises ``OSError(errno)`` before it touches the
disk, as the kernel would: appends to segments and indexes (after writing a torn prefix,
the worst case a crash or a full disk leaves), fsyncs, renames, file creation and the
atomic checkpoint writes. A full disk still lets files shrink (truncation, unlink free
space); an I/O error fails those too.

The storage modules call the ``check_*`` functions (and :func:`pwritev`, :func:`pwrite`)
at each write; with the switch off they cost one global read. Nothing in production turns
it on: the replica actor's test-only ``inject_disk_fault`` and unit tests do.

Concurrency: the switch is a module global read without a lock; a write racing a flip
sees either state.
"""

from __future__ import annotations

import errno as errnos
import os
import time
from collections.abc import Sequence

#: Errors under which files may still shrink (deleting and truncating free space).
_SHRINK_OK = frozenset({errnos.ENOSPC, errnos.EDQUOT})

_errno: int | None = None
_until: float | None = None  # time.monotonic() at which the fault ends by itself, if it does


def inject(error: int | None, duration_s: float | None = None) -> None:
    """Make every storage write in this process fail with ``OSError(error)`` (for
    ``duration_s`` only, if given); None stops it."""
    global _errno, _until
    assert error is None or (isinstance(error, int) and error > 0), f"not an errno: {error!r}"
    _until = None if error is None or duration_s is None else time.monotonic() + duration_s
    _errno = error


def active() -> int | None:
    """The errno writes fail with now, or None."""
    global _errno
    if _errno is not None and _until is not None and time.monotonic() >= _until:
        _errno = None
    return _errno


def _fail(path: str) -> None:
    error = active()
    if error is not None:
        raise OSError(error, os.strerror(error), path)


def check_write(path: str) -> None:
    """Raise the injected error, if any, before a write, fsync or rename of ``path``."""
    if _errno is not None:
        _fail(path)


def check_shrink(path: str) -> None:
    """Raise the injected error before a truncation or unlink of ``path``, unless it is a
    full disk (which still lets files shrink)."""
    if _errno is not None and active() not in _SHRINK_OK:
        _fail(path)


def check_create(path: str) -> None:
    """Raise the injected error before ``path`` is created (opening an existing file is no write)."""
    if _errno is not None and not os.path.exists(path):
        _fail(path)


def pwritev(fd: int, buffers: Sequence[bytes | memoryview], position: int, path: str) -> int:
    """``os.pwritev``, or under a fault a torn write of half the bytes, then the error."""
    if _errno is not None and active() is not None:
        _tear(fd, b"".join(bytes(b) for b in buffers), position, path)
    return os.pwritev(fd, buffers, position)


def pwrite(fd: int, data: bytes, position: int, path: str) -> int:
    """``os.pwrite``, or under a fault a torn write of half the bytes, then the error."""
    if _errno is not None and active() is not None:
        _tear(fd, data, position, path)
    return os.pwrite(fd, data, position)


def _tear(fd: int, data: bytes, position: int, path: str) -> None:
    os.pwrite(fd, data[: len(data) // 2], position)
    _fail(path)
