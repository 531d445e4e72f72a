"""Where sent records wait for the sender (Kafka's ``RecordAccumulator``): per partition, an
open batch that records join and a queue of closed batches in send order, the batches not
done yet, and the buffer memory they hold.

Every method that changes this state runs holding :attr:`RecordAccumulator.cond`, which the
sender shares: appends wake it, and its replies free room for appends waiting on it.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from typing import Any

from raylog.clients.producer.future import ArrowPart, FutureRecordMetadata
from raylog.clients.producer.producer_batch import ProducerBatch
from raylog.errors import IllegalStateError, KafkaTimeoutError
from raylog.types import TopicPartition

#: Bytes counted per record beyond its key, value and headers (offsets, timestamp).
RECORD_OVERHEAD_BYTES = 16


class RecordAccumulator:
    """Batches per partition, and the buffer memory of those not done.

    Args:
        batch_size: bytes at which a batch of ``send`` closes.
        buffer_memory: bytes of records not done allowed before an append waits.
        max_block_s: how long an append waits for room.
        delivery_timeout_s: each batch's time to be done, from its creation.
        require_sendable: raises if the transaction state refuses appends now (called
            holding :attr:`cond`).
        batch_closed: told of each batch closed by an append or a flush (holding :attr:`cond`).
    """

    def __init__(
        self,
        batch_size: int,
        buffer_memory: int,
        max_block_s: float,
        delivery_timeout_s: float,
        require_sendable: Callable[[], None],
        batch_closed: Callable[[TopicPartition], None],
    ):
        self._batch_size = batch_size
        self._buffer_memory = buffer_memory
        self._max_block_s = max_block_s
        self._delivery_timeout_s = delivery_timeout_s
        self._require_sendable = require_sendable
        self._batch_closed = batch_closed
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.open: dict[TopicPartition, ProducerBatch] = {}
        self.queues: dict[TopicPartition, collections.deque[ProducerBatch]] = collections.defaultdict(collections.deque)
        self.incomplete: set[ProducerBatch] = set()
        self.buffered_bytes = 0
        self.flushing = 0
        self.closed = False
        self.failure: IllegalStateError | None = None  # set if the sender thread failed

    def require_open(self) -> None:
        """Raises why appends are refused now, if they are.

        Raises:
            IllegalStateError: the sender failed, the producer is closed, or (transactional)
                no transaction is open.
            ProducerFencedError: a newer instance of the transactional id took over.
        """
        if self.failure is not None:
            raise self.failure
        if self.closed:
            raise IllegalStateError("cannot send: the producer is closed")
        self._require_sendable()

    def append(
        self,
        tp: TopicPartition,
        value: Any,
        key: Any,
        timestamp_ms: int | None,
        headers: list | None,
        size: int,
        bound: int,
        capacity: int,
        sizes: tuple[int, int, int],
    ) -> FutureRecordMetadata:
        """Add one checked record of ``size`` bytes (``bound`` of record_size_bound) to its
        partition's open batch, whose bounds may add up to ``capacity``; its future.

        Raises:
            IllegalStateError: the sender failed, or the producer closed.
            KafkaTimeoutError: no buffer room within ``max_block_ms``.
        """
        with self.lock:
            if self.failure is not None or self.closed:  # the sender failed, or close ran, meanwhile
                self.require_open()
            if self.buffered_bytes + size > self._buffer_memory:
                self.reserve(size)
            else:
                self.buffered_bytes += size
            batch = self.open.get(tp)
            full = batch is not None and batch.size_bytes + size > self._batch_size
            if full or (batch is not None and batch.bound_bytes + bound > capacity):
                self.close_batch(batch)
                batch = None
            if batch is None:
                batch = self.open[tp] = ProducerBatch(tp, self._delivery_timeout_s)
                self.incomplete.add(batch)
                self.cond.notify()
            index = batch.record_count
            batch.values.append(value)
            if key is not None or batch.keys:
                if not batch.keys:
                    batch.keys = [None] * index
                batch.keys.append(key)
            if timestamp_ms is not None or batch.timestamps:
                if not batch.timestamps:
                    batch.timestamps = [None] * index
                batch.timestamps.append(timestamp_ms)
            if headers or batch.headers:
                if not batch.headers:
                    batch.headers = [None] * index
                batch.headers.append(headers)
            batch.record_count = index + 1
            batch.size_bytes += size
            batch.bound_bytes += bound
            if batch.size_bytes >= self._batch_size:
                self.close_batch(batch)
                self.cond.notify()
        return FutureRecordMetadata(batch, index, timestamp_ms, sizes)

    def append_arrow(self, tp: TopicPartition, chunk: tuple[dict, int, int], capacity: int) -> ArrowPart:
        """Queue a send_arrow chunk: in the batch waiting last in its partition's queue when
        that one was never sent, holds rows of the same columns and types and has room within
        ``capacity`` (a call behind a full pipe joins it, as records join a growing batch
        in Kafka's accumulator: one leader call fewer), else in a batch of its own."""
        rows, size, bound = chunk
        count = len(rows["values"])
        now_ms = time.time_ns() // 1_000_000
        with self.cond:
            self.require_open()
            self.reserve(size)
            queue = self.queues[tp]
            tail = queue[-1] if queue else None
            if (
                tail is not None
                and tail.arrow_rows
                and tail.dispatch_order < 0
                and tail.bound_bytes + bound <= capacity
                and _same_columns(tail.arrow_rows[0][0], rows)
            ):
                start = tail.record_count
                tail.arrow_rows.append((rows, now_ms))
                tail.record_count += count
                tail.size_bytes += size
                tail.bound_bytes += bound
                return ArrowPart(tail, start, count)
            batch = ProducerBatch(tp, self._delivery_timeout_s)
            batch.record_count, batch.size_bytes, batch.bound_bytes = count, size, bound
            batch.arrow_rows.append((rows, now_ms))  # encoded by the sender, numbered in this partition's order
            self.incomplete.add(batch)
            open_batch = self.open.get(tp)
            if open_batch is not None:
                self.close_batch(open_batch)  # keep this partition's order
            queue.append(batch)
            self.cond.notify()
        return ArrowPart(batch, 0, count)

    def reserve(self, size: int) -> None:
        """Wait (holding the lock) for ``size`` bytes of buffer room."""
        deadline = time.monotonic() + self._max_block_s
        while self.buffered_bytes + size > self._buffer_memory and self.buffered_bytes > 0:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.closed:
                raise KafkaTimeoutError(f"no room in buffer_memory={self._buffer_memory} within max_block_ms")
            self.cond.wait(remaining)
            self.require_open()
        self.buffered_bytes += size

    def close_batch(self, batch: ProducerBatch) -> None:
        """Move an open batch to its partition's send queue (holding :attr:`cond`)."""
        if self.open.get(batch.tp) is batch:
            del self.open[batch.tp]
            self.queues[batch.tp].append(batch)
            self._batch_closed(batch.tp)

    def flush(self, timeout: float | None) -> None:
        """Close every open batch and wait until each batch not done now is.

        Raises:
            KafkaTimeoutError: not all were done within ``timeout`` seconds.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.cond:
            pending = list(self.incomplete)
            self.flushing += 1
            for batch in list(self.open.values()):
                self.close_batch(batch)
            self.cond.notify_all()
        try:
            for batch in pending:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not batch.event.wait(remaining):
                    raise KafkaTimeoutError(f"flush did not finish within {timeout} s")
        finally:
            with self.cond:
                self.flushing -= 1

    def close(self) -> None:
        """Refuse appends from now on; the sender stops once every batch is done."""
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def requeue(self, batch: ProducerBatch) -> None:
        """Put a batch to retry back in its partition's queue (holding :attr:`cond`): after the
        batches to retry that were sent before it, ahead of every later or unsent one."""
        queue = self.queues[batch.tp]
        i = 0
        while i < len(queue) and 0 <= queue[i].dispatch_order < batch.dispatch_order:
            i += 1
        queue.insert(i, batch)

    def deallocate(self, batch: ProducerBatch) -> bool:
        """Release a batch done (holding :attr:`cond`); False if it was released already
        (failed with everything meanwhile)."""
        if batch not in self.incomplete:
            return False
        self.incomplete.discard(batch)
        self.buffered_bytes -= batch.size_bytes
        return True

    def abort_all(self, error: IllegalStateError) -> list[ProducerBatch]:
        """Drop every batch not done, and refuse appends with ``error`` from now on (holding
        :attr:`cond`); the batches dropped, for the caller to fail."""
        self.failure = error
        batches = list(self.incomplete)
        self.incomplete.clear()
        self.open.clear()
        self.queues.clear()
        self.buffered_bytes = 0
        self.cond.notify_all()
        return batches


def _same_columns(rows: dict, other: dict) -> bool:
    """Whether two send_arrow chunks have the same columns of the same types (a batch's
    chunks are concatenated column by column)."""
    return rows.keys() == other.keys() and all(rows[key].type == other[key].type for key in rows)
