"""The controller's metadata journal: an fsync'd, framed, append-only file of the records
:class:`raylog.coordination.metadata.MetadataImage` applies (msgpack maps).

Each record is framed as ``length u32 | crc32c u32 | msgpack`` (big-endian); every append is
fsync'd, all of its records or none; a replay stops at (and cuts) a torn or corrupt tail, so
what survives is a prefix of what was appended (Kafka's metadata log, without its Raft).

Concurrency: single-threaded; the controller actor owns it.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from typing import Any

import crc32c
import msgpack

from ..errors import StorageError

_FRAME = struct.Struct(">II")
#: A journal record is a small map; anything larger is corruption.
MAX_RECORD_BYTES = 16 * 1024 * 1024


class MetadataJournal:
    """An fsync'd, framed, append-only file of metadata records."""

    def __init__(self, path: str):
        self.path = path
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.truncated_bytes = 0

    def replay(self) -> Iterator[dict[str, Any]]:
        """Yield every whole record; cut the file after the last one."""
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return
        position = 0
        while position + _FRAME.size <= len(data):
            length, crc = _FRAME.unpack_from(data, position)
            body = data[position + _FRAME.size : position + _FRAME.size + length]
            if length > MAX_RECORD_BYTES or len(body) < length or crc32c.crc32c(body) != crc:
                break
            try:
                record = msgpack.unpackb(body, raw=False, strict_map_key=False)
            except (ValueError, msgpack.UnpackException):
                break
            yield record
            position += _FRAME.size + length
        if position < len(data):
            self.truncated_bytes = len(data) - position
            with open(self.path, "r+b") as f:
                f.truncate(position)
                os.fsync(f.fileno())

    def append(self, records: list[dict[str, Any]]) -> None:
        """Append and fsync ``records``, all or nothing.

        Raises:
            StorageError: the disk failed; the file is cut back to where it was.
        """
        frames = []
        for record in records:
            body = msgpack.packb(record, use_bin_type=True)
            frames.append(_FRAME.pack(len(body), crc32c.crc32c(body)) + body)
        data = b"".join(frames)
        try:
            with open(self.path, "ab") as f:
                start = f.tell()
                try:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                except OSError:
                    f.truncate(start)
                    raise
        except OSError as exc:
            raise StorageError(f"cannot append to metadata journal {self.path}: {exc}") from exc
