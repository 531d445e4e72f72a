"""The producer's sender against an in-memory leader: retry order, sequence numbers and
their wrap, and failures of the sender thread (no Ray runtime)."""

from __future__ import annotations

import gc
import pickle
import weakref

import pytest

from raylog.clients.producer import BatchMetadata, Producer
from raylog.clients.producer import sender as sender_module
from raylog.common import compression as codecs
from raylog.common import record_batch
from raylog.common.record_batch import SEQUENCE_MODULUS
from raylog.errors import (
    IllegalStateError,
    InvalidConfigError,
    InvalidRecordError,
    KafkaTimeoutError,
    RequestTimedOutError,
    RetriableError,
)
from tests.helpers import wait_until
from tests.unit.clients.producer_fakes import PRODUCER_ID, FakeCluster, FakeLeader


@pytest.fixture(autouse=True)
def controller_call(monkeypatch):
    """The producer's one controller call (its producer id) answered without Ray."""
    monkeypatch.setattr(
        sender_module, "call", lambda ref, timeout_s: PRODUCER_ID if ref == "init_producer_id" else None
    )


def make_producer(*leaders: FakeLeader, **options) -> Producer:
    # batch_size=1: every record closes its own batch.
    return Producer(FakeCluster(*leaders), linger_ms=0, batch_size=1, **options)


def test_retried_batches_keep_their_partitions_order():
    """Batches that fail together go out again in the order they were first sent, not reversed."""
    leader = FakeLeader()
    # The backoff keeps all three waiting to go again until the last has failed.
    producer = make_producer(
        leader, enable_idempotence=False, max_in_flight_requests_per_connection=3, retry_backoff_ms=1_000
    )
    futures = [producer.send("t", b"%d" % i) for i in range(3)]
    wait_until(lambda: len(leader.requests) == 3, timeout_s=10)
    for i in range(3):
        leader.answer(i, RequestTimedOutError("the ISR did not get it in time"))
    wait_until(lambda: len(leader.requests) == 6, timeout_s=10)
    assert [leader.values(i) for i in range(3, 6)] == [[b"0"], [b"1"], [b"2"]]
    for i in range(3, 6):
        leader.answer(i)
    assert [f.result(timeout=10).offset for f in futures] == [0, 1, 2]
    producer.close()


def test_each_request_names_the_first_unacknowledged_sequence():
    """A request carries the base sequence of the oldest batch of its partition not yet
    acknowledged, so a leader can tell a first batch from one that overtook it."""
    leader = FakeLeader()
    producer = make_producer(leader, retry_backoff_ms=0)
    futures = [producer.send("t", b"%d" % i) for i in range(3)]
    wait_until(lambda: len(leader.requests) == 3, timeout_s=10)
    assert [(leader.header(i).producer_id, leader.header(i).base_sequence) for i in range(3)] == [
        (PRODUCER_ID, 0),
        (PRODUCER_ID, 1),
        (PRODUCER_ID, 2),
    ]
    assert [request.first_unacked_sequence for request, _ in leader.requests] == [0, 0, 0]
    leader.answer(1)  # acknowledged out of order: 0 is still the oldest unacknowledged
    leader.answer(0)
    futures.append(producer.send("t", b"3"))
    wait_until(lambda: len(leader.requests) == 4, timeout_s=10)
    assert (leader.header(3).base_sequence, leader.requests[3][0].first_unacked_sequence) == (3, 2)
    leader.answer(2)
    leader.answer(3)
    assert [f.result(timeout=10).offset for f in futures] == [1, 0, 2, 3]
    producer.close()


def test_new_batches_wait_while_the_oldest_unacknowledged_one_would_fall_out_of_the_leaders_memory():
    """Replies may come in any order; a leader remembers a producer's last 5 batches. So a
    new batch goes only while fewer than max_in_flight batches lie between the oldest one
    unacknowledged and the newest sent: else a retry of the oldest could not be recognised."""
    leader, other = FakeLeader(), FakeLeader(auto_answer=True)
    producer = make_producer(leader, other, max_in_flight_requests_per_connection=3)
    spans = []  # per request to partition 0: sequences from the oldest unacknowledged to it

    def produce(request, produce=leader.produce.remote):
        sequence = record_batch.read_header(request.records).base_sequence
        answered = {leader.header(i).base_sequence for i, (_, f) in enumerate(leader.requests) if f.done()}
        unanswered = [leader.header(i).base_sequence for i in range(len(leader.requests))] + [sequence]
        spans.append(sequence - min(s for s in unanswered if s not in answered) + 1)
        return produce(request)

    leader.produce.remote = produce
    futures = [producer.send("t", b"%d" % i, partition=0) for i in range(5)]
    wait_until(lambda: len(leader.requests) == 3, timeout_s=10)
    leader.answer(1)
    leader.answer(2)  # 0 is still out: sending 3 now would span 0..3
    # A record to partition 1 goes out in a pass of the sender that saw those answers.
    producer.send("t", b"elsewhere", partition=1).result(timeout=10)
    assert len(leader.requests) == 3
    leader.answer(0)
    wait_until(lambda: len(leader.requests) == 5, timeout_s=10)
    leader.answer(3)
    leader.answer(4)
    assert [f.result(timeout=10).offset for f in futures] == [2, 0, 1, 3, 4]
    assert max(spans) <= 3, spans
    producer.close()


def test_sequences_wrap_after_two_to_the_31_minus_one():
    """A partition's sequence goes from 2**31 - 1 to 0, as Kafka's, instead of failing to
    encode (which killed the sender thread and left every future waiting)."""
    leader = FakeLeader(auto_answer=True)
    producer = make_producer(leader)
    producer._sender.sequences.default_factory = lambda: SEQUENCE_MODULUS - 3  # as after 2**31 - 3 records
    futures = [producer.send("t", b"%d" % i) for i in range(6)]
    assert [f.result(timeout=10).offset for f in futures] == list(range(6))
    bases = [leader.header(i).base_sequence for i in range(6)]
    assert bases == [SEQUENCE_MODULUS - 3, SEQUENCE_MODULUS - 2, SEQUENCE_MODULUS - 1, 0, 1, 2]
    producer.close()


def test_a_failed_sender_thread_fails_every_record_with_a_typed_error():
    """Should the sender thread meet an unexpected error, every record not yet done fails
    with IllegalStateError (none waits forever) and send refuses new ones."""
    leader = FakeLeader()
    producer = make_producer(leader)
    held = producer.send("t", b"in flight")
    wait_until(lambda: len(leader.requests) == 1, timeout_s=10)

    def broken(request):
        raise RuntimeError("a bug in the transport")

    leader.produce.remote = broken
    doomed = producer.send("t", b"never sent")
    assert isinstance(doomed.exception(timeout=10), IllegalStateError)
    assert isinstance(held.exception(timeout=10), IllegalStateError)
    leader.answer(0)  # a late reply changes nothing
    assert isinstance(held.exception(timeout=0), IllegalStateError)
    with pytest.raises(IllegalStateError, match="RuntimeError: a bug in the transport"):
        producer.send("t", b"after")
    producer.close(timeout=10)


def test_the_send_future_answers_kafka_pythons_calls():
    """get() as result(), succeeded/failed/is_done, add_callback / add_errback (chained, with
    extra arguments, before and after completion), and RecordMetadata with kafka-python's
    timestamp and serialized sizes (-1 for none)."""
    leader = FakeLeader()
    producer = make_producer(leader, retries=0)
    ok = producer.send("t", b"value", key=b"key", headers=[("h", b"12")], timestamp_ms=1_234)
    bad = producer.send("t", b"v")
    assert not ok.is_done and not ok.succeeded() and not ok.failed()
    seen = []
    ok.add_callback(seen.append).add_errback(lambda e: seen.append(("unexpected", e)))
    bad.add_callback(lambda m: seen.append(("unexpected", m))).add_errback(lambda tag, e: seen.append((tag, e)), "bad")
    wait_until(lambda: len(leader.requests) == 2, timeout_s=10)
    leader.answer(0)
    leader.answer(1, InvalidRecordError("refused"))
    metadata = ok.get(timeout=10)
    assert ok.is_done and ok.succeeded() and not ok.failed()
    assert bad.is_done and bad.failed() and not bad.succeeded()
    assert (metadata.offset, metadata.timestamp, metadata.timestamp_ms) == (0, 1_234, 1_234)
    assert (metadata.serialized_key_size, metadata.serialized_value_size, metadata.serialized_header_size) == (3, 5, 3)
    assert metadata.topic_partition == ("t", 0)
    with pytest.raises(InvalidRecordError, match="refused"):
        bad.get(timeout=10)
    wait_until(lambda: len(seen) == 2, timeout_s=10)
    assert seen[0] == metadata and seen[1][0] == "bad" and isinstance(seen[1][1], InvalidRecordError)
    later = []
    ok.add_callback(later.append)  # done already: runs at once
    bad.add_both(later.append)
    assert later == [metadata, bad.exception()]
    none = producer.send("t", None)
    wait_until(lambda: len(leader.requests) == 3, timeout_s=10)
    leader.answer(2)
    sizes = none.get(timeout=10)[4:]
    assert sizes == (-1, -1, -1)
    producer.close()


def test_get_times_out_with_kafka_timeout_error():
    """A record not acknowledged within get's timeout raises KafkaTimeoutError (retriable)."""
    leader = FakeLeader()
    producer = make_producer(leader)
    future = producer.send("t", b"v")
    with pytest.raises(KafkaTimeoutError) as raised:
        future.get(timeout=0.05)
    assert raised.value.retriable and isinstance(raised.value, RetriableError)
    wait_until(lambda: len(leader.requests) == 1, timeout_s=10)
    leader.answer(0)
    assert future.get().offset == 0
    producer.close()


def test_a_callback_that_raises_is_logged_and_the_producer_goes_on(caplog):
    """A user's callback raising in the sender thread neither fails the producer nor the
    other callbacks of the record."""
    leader = FakeLeader(auto_answer=True)
    producer = make_producer(leader)
    ran = []
    future = producer.send("t", b"v")
    future.add_callback(lambda m: 1 / 0)
    future.add_callback(ran.append)
    future.get(timeout=10)
    wait_until(lambda: ran, timeout_s=10)
    assert producer.send("t", b"w").get(timeout=10).offset == 1
    assert "a callback of a sent record raised" in caplog.text
    producer.close()


@pytest.mark.parametrize(
    ("options", "codec"),
    [
        ({"compression_type": "lz4"}, "lz4"),
        ({"compression": "zstd"}, "zstd"),
        ({"compression_type": "gzip", "compression": "GZIP"}, "gzip"),
        ({"compression_type": None}, "none"),
        ({"compression_type": "none"}, "none"),
    ],
)
def test_compression_type_is_kafkas_name_of_compression(options, codec):
    """compression_type and compression name the same setting; both given must agree."""
    leader = FakeLeader(auto_answer=True)
    producer = make_producer(leader, **options)
    producer.send("t", b"v" * 100).get(timeout=10)
    assert leader.header(0).codec == codecs.CODEC_IDS[codec]
    producer.close()


def test_conflicting_compression_settings_are_refused():
    with pytest.raises(InvalidConfigError, match="compression_type='lz4' and compression='zstd' differ"):
        make_producer(FakeLeader(), compression_type="lz4", compression="zstd")
    with pytest.raises(InvalidConfigError, match="unknown compression"):
        make_producer(FakeLeader(), compression_type="brotli")


def test_send_arrow_calls_queued_behind_a_full_pipe_go_out_as_one_batch():
    """A leader call costs about the same whatever it carries: tables sent while their
    partition's pipe is full join the batch waiting behind it (as records join a growing batch
    in Kafka's accumulator), and each call's future still says where its own rows landed."""
    import pyarrow as pa

    leader = FakeLeader()
    producer = make_producer(leader, max_in_flight_requests_per_connection=1)
    tables = [pa.table({"value": [b"%d-%d" % (call, i) for i in range(n)]}) for call, n in enumerate((2, 3, 4))]
    futures = [producer.send_arrow("t", tables[0])]
    wait_until(lambda: len(leader.requests) == 1, timeout_s=10)  # the pipe is full now
    futures += [producer.send_arrow("t", table) for table in tables[1:]]
    leader.answer(0)
    wait_until(lambda: len(leader.requests) == 2, timeout_s=10)
    leader.answer(1)
    assert leader.values(1) == [v for table in tables[1:] for v in table.column("value").to_pylist()]
    assert [f.result(timeout=10) for f in futures] == [
        [BatchMetadata("t", 0, 0, 2)],
        [BatchMetadata("t", 0, 2, 3)],
        [BatchMetadata("t", 0, 5, 4)],
    ]
    header = leader.header(1)
    assert (header.base_sequence, header.record_count) == (2, 7)
    producer.close()


def test_send_arrow_tables_join_a_waiting_batch_only_within_its_limit_and_shape():
    """A table that would take the waiting batch past what a request may carry, or that has
    other columns (keys, timestamps), goes in a batch of its own; merged rows keep the
    creation time of their own call."""
    import pyarrow as pa

    leader = FakeLeader(auto_answer=False)
    producer = make_producer(leader, max_in_flight_requests_per_connection=1, max_request_size=4096)
    big = pa.table({"value": [b"x" * 1000] * 2})
    keyed = pa.table({"key": [b"k"], "value": [b"v"]})
    text = pa.table({"key": ["k"], "value": ["v"]})  # strings: the same columns, other types
    producer.send_arrow("t", pa.table({"value": [b"first"]}))
    wait_until(lambda: len(leader.requests) == 1, timeout_s=10)
    futures = [producer.send_arrow("t", table) for table in (big, big, keyed, text)]
    for sent in range(1, 5):
        leader.answer(sent - 1)
        wait_until(lambda sent=sent: len(leader.requests) == sent + 1, timeout_s=10)
    leader.answer(4)
    assert [leader.header(i).record_count for i in range(5)] == [1, 2, 2, 1, 1]
    assert [f.result(timeout=10)[0].base_offset for f in futures] == [1, 3, 5, 6]
    assert leader.values(4) == [b"v"]
    producer.close()


def test_a_merged_send_arrow_batch_that_times_out_is_retried_whole_with_its_sequence():
    """Timeout then retry: the batch that several send_arrow calls joined goes out again as
    the same bytes (same sequence, same records), and each call's rows land once."""
    import pyarrow as pa

    leader = FakeLeader()
    producer = make_producer(leader, max_in_flight_requests_per_connection=1, retry_backoff_ms=10)
    first = producer.send_arrow("t", pa.table({"value": [b"a"]}))
    wait_until(lambda: len(leader.requests) == 1, timeout_s=10)
    joined = [producer.send_arrow("t", pa.table({"value": [b"b%d" % i] * 2})) for i in range(2)]
    leader.answer(0)
    wait_until(lambda: len(leader.requests) == 2, timeout_s=10)
    leader.answer(1, RequestTimedOutError("the ISR did not get it in time"))
    wait_until(lambda: len(leader.requests) == 3, timeout_s=10)
    assert leader.requests[2][0].records == leader.requests[1][0].records
    assert (leader.header(2).base_sequence, leader.header(2).record_count) == (1, 4)
    leader.answer(2)
    assert first.result(timeout=10) == [BatchMetadata("t", 0, 0, 1)]
    assert [f.result(timeout=10) for f in joined] == [
        [BatchMetadata("t", 0, 1, 2)],
        [BatchMetadata("t", 0, 3, 2)],
    ]
    producer.close()


def test_a_pickled_producer_starts_afresh_with_the_same_settings():
    """Producer.__reduce__ ships the cluster handle and the settings; the rebuilt producer
    has its own sender, accumulator and transaction state."""
    leader = FakeLeader(auto_answer=True)
    producer = make_producer(leader, client_id="shipped", retries=3)
    rebuild, (cluster, config) = producer.__reduce__()
    assert pickle.loads(pickle.dumps(rebuild)) is rebuild  # by reference: importable where it lands
    assert config["client_id"] == "shipped" and config["retries"] == 3 and config["batch_size"] == 1
    clone = rebuild(cluster, config)
    assert isinstance(clone, Producer) and clone._config == producer._config
    assert clone._sender is not producer._sender and clone._accumulator is not producer._accumulator
    assert clone.send("t", b"v").get(timeout=10).offset == 0
    clone.close()
    producer.close()


def test_a_closed_producer_is_freed_as_soon_as_it_is_dropped():
    """Its parts hold nothing of it (no cycle through the accumulator's hooks): as before the
    split, a closed producer goes with its last reference, not at the next garbage collection."""
    producer = make_producer(FakeLeader(auto_answer=True))
    producer.send("t", b"v").get(timeout=10)
    producer.close(timeout=10)
    gone = weakref.ref(producer)
    gc.disable()
    try:
        del producer
        assert gone() is None
    finally:
        gc.enable()
