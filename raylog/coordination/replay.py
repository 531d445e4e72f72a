"""A coordinator's state follows its partition's log: :class:`LogReplay` hands each batch of
a :class:`~raylog.storage.log.Log` to the state once, in offset order, up to an end offset
(the log end while a new leader loads its state, the high watermark while it serves).

Why (Kafka's group coordinator loads and completes its offsets in log order too): a
coordinator appends records for many calls at once, and each call waits for the ISR on a
thread of its own. If each call applied its own record when it woke, the order of the
wake-ups, not the log, would decide the state: an older offset commit applied after a newer
one moves the committed offset backwards, and a transactional offset commit applied after
its own abort marker stays pending for good. Applying the log itself, whichever call drives
the replay, leaves one order, the log's, and the state in memory after replaying up to the
high watermark is the state the next leader loads.

Reading (:meth:`LogReplay.read`) and applying (:meth:`LogReplay.apply`) are separate steps so
that a load can decode a large partition outside the caller's lock.

Concurrency: not thread-safe; one caller at a time.
"""

from __future__ import annotations

from collections.abc import Callable

from raylog.common import record_batch

from ..storage.log import Log

#: A batch's header and its ``(key, value)`` records (none for a control batch, or for a
#: data batch compaction emptied).
ApplyBatch = Callable[[record_batch.BatchHeader, list[tuple[bytes | None, bytes | None]]], None]


class LogReplay:
    """Applies the batches of a log from ``next_offset`` on, each once, in offset order.

    Example::

        replay = LogReplay(state.apply_batch, next_offset=log.log_start_offset)
        replay.catch_up(log, partition.high_watermark, max_bytes=1 << 20)
    """

    def __init__(self, apply: ApplyBatch, next_offset: int):
        self._apply = apply
        #: The first offset not applied yet.
        self.next_offset = next_offset

    def read(self, log: Log, end_offset: int, max_bytes: int) -> bytes:
        """The whole batches from :attr:`next_offset` that end below ``end_offset``
        (exclusive), at most ``max_bytes`` but at least one batch; empty when none.

        Raises:
            StorageError: the log is offline, or the disk failed.
        """
        if self.next_offset >= end_offset:
            return b""
        return log.read(max(self.next_offset, log.log_start_offset), max_bytes, max_offset=end_offset)

    def apply(self, data: bytes) -> None:
        """Apply the batches of ``data`` (what :meth:`read` returned) not applied yet.

        Raises:
            CorruptRecordError: a batch fails its checks (it is applied by the next try).
        """
        view = memoryview(data).cast("B")
        for pos, header in record_batch.iter_headers(view):
            if header.next_offset <= self.next_offset:
                continue
            records: list[tuple[bytes | None, bytes | None]] = []
            if not header.attributes & record_batch.CONTROL:
                table = record_batch.decode_table(view[pos : pos + header.size], min_offset=self.next_offset)
                records = list(zip(table.column("key").to_pylist(), table.column("value").to_pylist(), strict=True))
            self._apply(header, records)
            self.next_offset = header.next_offset

    def catch_up(self, log: Log, end_offset: int, max_bytes: int) -> None:
        """Apply every batch below ``end_offset`` (exclusive), reading ``max_bytes`` at a time.

        Raises:
            StorageError, CorruptRecordError.
        """
        while data := self.read(log, end_offset, max_bytes):
            self.apply(data)
