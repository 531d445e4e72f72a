"""The producer's RecordAccumulator on its own: batching, buffer memory, send_arrow chunks,
retry order, flush and failure (no sender thread, no producer, no Ray)."""

from __future__ import annotations

import threading

import pytest

from raylog.clients.producer.record_accumulator import RecordAccumulator
from raylog.common import record_batch
from raylog.errors import IllegalStateError, KafkaTimeoutError
from raylog.types import TopicPartition

TP = TopicPartition("t", 0)
SIZES = (-1, 1, -1)


class Hooks:
    """The producer's side: whether appends are refused, and the batches closed."""

    def __init__(self):
        self.closed: list[TopicPartition] = []
        self.refuse: Exception | None = None

    def require_open(self) -> None:
        if self.refuse is not None:
            raise self.refuse

    def batch_closed(self, tp: TopicPartition) -> None:
        self.closed.append(tp)


def accumulator(hooks: Hooks, batch_size: int = 100, buffer_memory: int = 1_000, max_block_s: float = 5.0):
    return RecordAccumulator(batch_size, buffer_memory, max_block_s, 60.0, hooks.require_open, hooks.batch_closed)


def append(acc: RecordAccumulator, value: bytes = b"v", size: int = 10, bound: int = 10, capacity: int = 1_000, **kw):
    return acc.append(TP, value, kw.get("key"), kw.get("timestamp_ms"), kw.get("headers"), size, bound, capacity, SIZES)


def test_records_join_their_partitions_open_batch_until_it_reaches_batch_size():
    hooks = Hooks()
    acc = accumulator(hooks, batch_size=30)
    first, second = append(acc), append(acc, key=b"k")
    batch = acc.open[TP]
    assert first._batch is second._batch is batch and (first._index, second._index) == (0, 1)
    assert batch.keys == [None, b"k"] and batch.timestamps == []  # a column appears with its first value
    assert acc.buffered_bytes == 20 and acc.incomplete == {batch}
    third = append(acc)  # 30 bytes: the batch is full and goes to the queue
    assert third._batch is batch and TP not in acc.open and list(acc.queues[TP]) == [batch]
    assert hooks.closed == [TP]
    assert append(acc)._batch is not batch


def test_a_record_that_would_pass_the_batch_limit_opens_a_new_batch():
    acc = accumulator(Hooks())
    first = append(acc, bound=600)
    second = append(acc, bound=600)
    assert first._batch is not second._batch
    assert list(acc.queues[TP]) == [first._batch] and acc.open[TP] is second._batch


def test_an_append_waits_for_buffer_room_that_a_done_batch_frees():
    acc = accumulator(Hooks(), batch_size=10, buffer_memory=20)
    done = append(acc)._batch
    append(acc)
    result = []
    waiter = threading.Thread(target=lambda: result.append(append(acc)))
    waiter.start()
    waiter.join(0.1)
    assert waiter.is_alive()  # 20 of 20 bytes held
    with acc.cond:
        assert acc.deallocate(done) and not acc.deallocate(done)  # released once
        acc.cond.notify_all()
    waiter.join(5)
    assert result and acc.buffered_bytes == 20


def test_no_room_within_max_block_is_kafka_timeout_error():
    acc = accumulator(Hooks(), batch_size=10, buffer_memory=10, max_block_s=0.05)
    append(acc)
    with pytest.raises(KafkaTimeoutError, match="buffer_memory=10"):
        append(acc)
    assert acc.buffered_bytes == 10


def test_send_arrow_chunks_join_a_never_sent_tail_of_the_same_shape_within_its_limit():
    hooks = Hooks()
    acc = accumulator(hooks)
    opened = append(acc)._batch  # an open batch of send(): closed first, to keep the order
    rows = {"values": record_batch.binary_of([b"a", b"b"])}
    first = acc.append_arrow(TP, (rows, 20, 20), capacity=100)
    assert list(acc.queues[TP]) == [opened, first.batch] and (first.start, first.count) == (0, 2)
    joined = acc.append_arrow(TP, (rows, 20, 20), capacity=100)
    assert joined.batch is first.batch and joined.start == 2 and first.batch.record_count == 4
    keyed = {"values": rows["values"], "keys": record_batch.binary_of([b"k", b"l"])}
    assert acc.append_arrow(TP, (keyed, 20, 20), capacity=100).batch is not first.batch  # other columns
    alone = acc.append_arrow(TP, (keyed, 20, 90), capacity=100)  # past the limit together
    assert alone.batch.record_count == 2 and len(acc.queues[TP]) == 4
    alone.batch.dispatch_order = 0  # sent: nothing joins it any more
    assert acc.append_arrow(TP, (keyed, 20, 5), capacity=100).batch is not alone.batch


def test_a_retried_batch_goes_back_after_earlier_retries_ahead_of_everything_later():
    acc = accumulator(Hooks(), batch_size=1)
    batches = [append(acc)._batch for _ in range(4)]
    queue = acc.queues[TP]
    for order, batch in enumerate(batches[:3]):
        batch.dispatch_order = order
    queue.clear()
    queue.append(batches[3])  # never sent
    with acc.cond:
        acc.requeue(batches[2])
        acc.requeue(batches[0])
        acc.requeue(batches[1])
    assert list(queue) == [batches[0], batches[1], batches[2], batches[3]]


def test_flush_closes_open_batches_and_waits_for_the_batches_not_done():
    hooks = Hooks()
    acc = accumulator(hooks)
    batch = append(acc)._batch
    with pytest.raises(KafkaTimeoutError):
        acc.flush(timeout=0.05)
    assert list(acc.queues[TP]) == [batch] and acc.flushing == 0
    threading.Timer(0.05, batch.finish, (0, -1, None)).start()
    acc.flush(timeout=5)


def test_abort_all_drops_every_batch_and_later_appends_are_refused():
    hooks = Hooks()
    acc = accumulator(hooks, batch_size=10)
    batches = {append(acc)._batch, append(acc)._batch}
    error = IllegalStateError("the sender failed")
    with acc.cond:
        assert set(acc.abort_all(error)) == batches
    assert acc.failure is error and not acc.open and not acc.queues and acc.buffered_bytes == 0
    hooks.refuse = error
    with pytest.raises(IllegalStateError):
        append(acc)
    with pytest.raises(IllegalStateError):
        acc.append_arrow(TP, ({"values": record_batch.binary_of([b"a"])}, 10, 10), capacity=100)


def test_close_refuses_appends_through_the_producers_check():
    hooks = Hooks()
    acc = accumulator(hooks)
    acc.close()
    assert acc.closed
    hooks.refuse = IllegalStateError("closed")
    with pytest.raises(IllegalStateError, match="closed"):
        append(acc)
