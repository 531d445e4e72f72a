"""The producer's batch and futures on their own: completion, callbacks, metadata and a
send_arrow call's gathered future (no producer, no sender, no Ray)."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from raylog.clients.producer.future import ArrowPart, BatchMetadata, FutureRecordMetadata, gather
from raylog.clients.producer.producer_batch import ProducerBatch, merged
from raylog.common import record_batch
from raylog.errors import InvalidRecordError, KafkaTimeoutError
from raylog.types import TopicPartition

TP = TopicPartition("t", 3)


def batch_of(*values: bytes) -> ProducerBatch:
    batch = ProducerBatch(TP, delivery_timeout_s=60)
    batch.values.extend(values)
    batch.record_count = len(values)
    return batch


def test_a_record_is_its_batchs_base_offset_plus_its_index_with_its_own_timestamp_or_the_batchs():
    batch = batch_of(b"a", b"b", b"c")
    stamped = FutureRecordMetadata(batch, 2, 1_234, (1, 2, 3))
    unstamped = FutureRecordMetadata(batch, 0, None)
    assert not stamped.done() and stamped.running() and not stamped.is_done
    batch.finish(100, -1, None)
    assert stamped.result(timeout=0) == ("t", 3, 102, 1_234, 1, 2, 3)
    assert unstamped.get(timeout=0).timestamp == batch.created_ms
    assert stamped.succeeded() and not stamped.failed() and not stamped.cancel() and not stamped.cancelled()


def test_log_append_time_overrides_the_records_timestamp():
    batch = batch_of(b"a")
    future = FutureRecordMetadata(batch, 0, 5)
    batch.finish(7, 99, None)
    assert (future.result().offset, future.result().timestamp) == (7, 99)


def test_a_failed_batch_fails_each_record_with_its_error_and_the_first_finish_wins():
    batch = batch_of(b"a", b"b")
    futures = [FutureRecordMetadata(batch, i, None) for i in range(2)]
    error = InvalidRecordError("refused")
    batch.finish(-1, -1, error)
    batch.finish(0, -1, None)  # a late reply after the batch failed changes nothing
    for future in futures:
        assert future.failed() and future.exception(timeout=0) is error
        with pytest.raises(InvalidRecordError):
            future.result(timeout=0)


def test_waiting_past_the_timeout_raises_kafka_timeout_error():
    future = FutureRecordMetadata(batch_of(b"a"), 0, None)
    with pytest.raises(KafkaTimeoutError):
        future.result(timeout=0.01)
    with pytest.raises(KafkaTimeoutError):
        future.exception(timeout=0.01)


def test_callbacks_run_once_at_completion_or_at_once_when_added_later():
    batch = batch_of(b"a")
    future = FutureRecordMetadata(batch, 0, None)
    seen = []
    future.add_done_callback(lambda f: seen.append("done"))
    future.add_callback(lambda tag, m: seen.append((tag, m.offset)), "ok").add_errback(seen.append)
    assert seen == []
    batch.finish(4, -1, None)
    batch.finish(5, -1, None)
    assert seen == ["done", ("ok", 4)]
    future.add_both(lambda m: seen.append(("both", m.offset)))
    assert seen[-1] == ("both", 4)


def test_a_raising_callback_is_logged_and_the_others_still_run(caplog):
    batch = batch_of(b"a")
    future = FutureRecordMetadata(batch, 0, None)
    ran = []
    future.add_done_callback(lambda f: 1 / 0)
    future.add_done_callback(ran.append)
    batch.finish(0, -1, None)
    assert ran == [future] and "a callback of a sent record raised" in caplog.text


def test_a_callback_added_while_the_batch_completes_runs_exactly_once():
    for _ in range(50):
        batch = batch_of(b"a")
        future = FutureRecordMetadata(batch, 0, None)
        ran = []
        finisher = threading.Thread(target=batch.finish, args=(0, -1, None))
        finisher.start()
        future.add_done_callback(ran.append)
        finisher.join()
        assert ran == [future]


def test_a_send_arrow_future_gathers_where_each_part_landed_or_the_first_error():
    assert gather([]).result(timeout=0) == []
    first, second = batch_of(b"a", b"b", b"c"), batch_of(b"d")
    result = gather([ArrowPart(first, 1, 2), ArrowPart(second, 0, 1)])
    first.finish(10, -1, None)
    assert not result.done()
    second.finish(20, -1, None)
    assert result.result(timeout=0) == [BatchMetadata("t", 3, 11, 2), BatchMetadata("t", 3, 20, 1)]
    failed, ok = batch_of(b"a"), batch_of(b"b")
    error = InvalidRecordError("refused")
    result = gather([ArrowPart(ok, 0, 1), ArrowPart(failed, 0, 1)])
    failed.finish(-1, -1, error)
    ok.finish(0, -1, None)
    assert result.exception(timeout=0) is error


def test_a_batch_is_encoded_once_with_columns_padded_where_later_records_gave_them():
    batch = batch_of(b"a", b"b")
    batch.keys = [None, b"k"]
    batch.timestamps = [None]  # only the first record's slot so far: padded with None
    batch.producer_id, batch.producer_epoch, batch.base_sequence = 7, 1, 40
    data = batch.encode(codec=0)
    assert batch.encode(codec=0) is data and batch.values == []
    header = record_batch.read_header(data)
    assert (header.record_count, header.producer_id, header.base_sequence) == (2, 7, 40)
    table = record_batch.decode_table(data)
    assert table.column("key").to_pylist() == [None, b"k"]
    assert table.column("timestamp").to_pylist() == [batch.created_ms] * 2


def test_send_arrow_chunks_of_several_calls_keep_each_calls_time():
    one = {"values": record_batch.binary_of([b"a"])}
    two = {"values": record_batch.binary_of([b"b", b"c"])}
    assert merged([(one, 5)]) is one
    rows = merged([(one, 5), (two, 9)])
    assert rows["values"].to_pylist() == [b"a", b"b", b"c"]
    assert rows["timestamps_ms"].to_pylist() == [5, 9, 9]
    assert isinstance(rows["values"], pa.Array)
