"""An append-only file of whole record batches (Kafka's ``FileRecords``).

The file holds batches back to back in the format of :mod:`raylog.common.record_batch`;
nothing else. Positions are byte offsets into the file.

Concurrency: one writer thread calls :meth:`append`, :meth:`truncate_to`, :meth:`flush`;
any number of threads may :meth:`read` at the same time (``pread`` on a shared descriptor;
the size is published only after a write completed). The descriptor is closed by
:meth:`close` or, once the file was deleted, when the last reader lets go of the object,
so a reader never sees a closed (or reused) descriptor.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterator, Sequence

from raylog.common.record_batch import HEADER_SIZE, BatchHeader, read_header

from ..errors import CorruptRecordError, StorageError
from . import faults

#: Bytes read at a time when walking batch headers without their bodies.
HEADER_WALK_CHUNK_BYTES = 8192
#: Buffers per pwritev call (Linux IOV_MAX is 1024).
_IOV_MAX = 1024


class FileRecords:
    """A file of record batches; see the module docstring for the concurrency contract."""

    def __init__(self, path: str):
        self.path = path
        try:
            faults.check_create(path)
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StorageError(f"cannot open {path}: {exc}") from exc
        self._close = weakref.finalize(self, os.close, self._fd)
        self._size = os.fstat(self._fd).st_size

    @property
    def size(self) -> int:
        return self._size

    def append(self, buffers: Sequence[bytes | memoryview]) -> int:
        """Write ``buffers`` at the end of the file.

        Returns:
            The position at which the first buffer was written.

        Raises:
            StorageError: the write failed (full disk, I/O error). The size is unchanged,
                but the file may hold torn bytes past it: the caller cuts them off
                (:meth:`truncate_to` the size) before the file is used further.
        """
        start = self._size
        position = start
        try:
            for i in range(0, len(buffers), _IOV_MAX):
                chunk = list(buffers[i : i + _IOV_MAX])
                want = sum(len(b) for b in chunk)
                written = faults.pwritev(self._fd, chunk, position, self.path)
                if written < want:  # short write: finish what is left of this chunk
                    rest = b"".join(bytes(b) for b in chunk)[written:]
                    while rest:
                        n = os.pwrite(self._fd, rest, position + written)
                        written, rest = written + n, rest[n:]
                position += written
        except OSError as exc:
            raise StorageError(f"append to {self.path} failed: {exc}") from exc
        self._size = position
        return start

    def read(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes from ``position`` (fewer at the end of the file)."""
        try:
            return os.pread(self._fd, size, position)
        except OSError as exc:
            raise StorageError(f"read of {self.path} failed: {exc}") from exc

    def batch_headers(self, start: int, end: int) -> Iterator[tuple[int, BatchHeader]]:
        """``(position, header)`` of each batch in ``[start, end)``, bodies not read.

        Raises:
            CorruptRecordError: a header is invalid or a batch runs past ``end``.
        """
        position, chunk, chunk_start = start, b"", start
        while position < end:
            if position + HEADER_SIZE > chunk_start + len(chunk):
                chunk_start = position
                chunk = self.read(position, min(HEADER_WALK_CHUNK_BYTES, end - position))
            header = read_header(chunk, position - chunk_start)
            if position + header.size > end:
                raise CorruptRecordError(f"batch at byte {position} of {self.path} runs past byte {end}")
            yield position, header
            position += header.size

    def truncate_to(self, size: int) -> None:
        """Cut the file to ``size`` bytes (not above its size), torn bytes of a failed
        append included. Durable only after :meth:`flush`.

        Raises:
            StorageError: the truncation failed; the size is unchanged.
        """
        size = min(size, self._size)
        try:
            faults.check_shrink(self.path)
            os.ftruncate(self._fd, size)
        except OSError as exc:
            raise StorageError(f"truncate of {self.path} failed: {exc}") from exc
        self._size = size

    def flush(self) -> None:
        """fsync the data (and the size) written so far.

        Raises:
            StorageError: the fsync failed: what was written may be lost (the caller must
                not trust the file any more).
        """
        try:
            faults.check_write(self.path)
            os.fdatasync(self._fd)
        except OSError as exc:
            raise StorageError(f"flush of {self.path} failed: {exc}") from exc

    def close(self) -> None:
        self._close()

    def delete(self) -> None:
        """Unlink the file; open readers keep reading until they let go of this object."""
        try:
            faults.check_shrink(self.path)
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StorageError(f"cannot delete {self.path}: {exc}") from exc
