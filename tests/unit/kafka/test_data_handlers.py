"""The Produce and Fetch handlers (raylog.actors.kafka.data) convert record batches on the
broker context's conversion threads, never on the event loop that serves every connection
(a batch's work grows with what it inflates to); without Ray, against a context whose
conversions are watched."""

from __future__ import annotations

import asyncio
import threading

from raylog.actors.kafka import data
from raylog.actors.kafka.context import CONNECTION, BrokerContext
from raylog.common import record_batch as rb
from raylog.config import TopicConfig
from raylog.coordination.partition import Partition
from raylog.errors import CorruptRecordError, OutOfOrderSequenceError, RaylogError, RequestTimedOutError
from raylog.kafka import codec, records
from raylog.kafka.fetch_sessions import FetchContext
from raylog.protocol import FetchResponse, ProduceRequest, ProduceResponse, error_fields


def watched(monkeypatch, name: str) -> list[threading.Thread]:
    """Replace ``records.<name>`` with itself plus a note of the thread it runs on."""
    threads: list[threading.Thread] = []
    real = getattr(records, name)

    def conversion(batch, *args, **kwargs):
        threads.append(threading.current_thread())
        return real(batch, *args, **kwargs)

    monkeypatch.setattr(records, name, conversion)
    return threads


def test_a_produce_is_converted_off_the_event_loop(monkeypatch):
    threads = watched(monkeypatch, "to_raylog")
    batch = bytearray(b"".join(bytes(part) for part in records.to_kafka(rb.build([b"value"]))))
    batch[-1] ^= 1  # a CRC that fails: the answer comes from the conversion alone
    body = {
        "acks": 1,
        "timeout_ms": 1000,
        "topic_data": [{"name": "clicks", "partition_data": [{"index": 0, "records": bytes(batch)}]}],
    }
    header = codec.RequestHeader(codec.ApiKey.PRODUCE, 9, 1, "test")

    async def produce():
        return threading.current_thread(), await data.produce(BrokerContext("c", 0, None), header, body)

    loop_thread, answer = asyncio.run(produce())
    [part] = answer["responses"][0]["partition_responses"]
    assert part["error_code"] == CorruptRecordError.code
    assert threads and loop_thread not in threads


def test_a_fetch_answer_is_converted_off_the_event_loop(monkeypatch):
    threads = watched(monkeypatch, "to_kafka_within")
    stored = rb.stamp(rb.read_header(rb.build([b"value"])), 7, 0) + rb.build([b"value"])[rb.STAMP.size :]
    key = ("clicks", 0)
    partition = {"partition": 0, "fetch_offset": 7, "partition_max_bytes": 1 << 20}
    results = {key: FetchResponse(high_watermark=8, records=stored)}

    async def answer():
        ctx = BrokerContext("c", 0, None)
        wanted = [("clicks", partition)]
        sessionless = FetchContext(None, wanted, incremental=False)
        return threading.current_thread(), await data._fetch_answer(ctx, {}, wanted, results, {}, sessionless)

    loop_thread, (response, sent) = asyncio.run(answer())
    assert sent == {key: 8}
    assert response["responses"][0]["partitions"][0]["records"]
    assert threads and loop_thread not in threads


class _Leader:
    """A leader replica as the Produce handler meets it: ``produce.remote(request)`` answers
    from a real Partition, as the replica actor answers."""

    def __init__(self, partition: Partition):
        self.partition = partition
        self.produce = self

    def remote(self, request: ProduceRequest) -> ProduceResponse:
        try:
            info = self.partition.append_as_leader(
                request.records, request.acks, request.first_unacked_sequence, in_order=request.in_order
            )
        except RaylogError as exc:
            return ProduceResponse(**error_fields(exc))
        return ProduceResponse(base_offset=info.first_offset)


class _Context(BrokerContext):
    async def call(self, ref, timeout_s=None):
        return ref  # the fake leader answered already


def test_a_connections_batch_after_one_that_failed_is_refused_even_by_a_new_producer(monkeypatch, open_log):
    """An idempotent producer's first batch (sequence 0) fails before it reaches the leader (its
    lookup timed out); the next batch on the connection (sequence 2) must not be appended: the
    leader knows nothing of the producer, so only the connection knows that sequence 0 is
    missing. Appended, it makes the retry of sequence 0 out of order, which Kafka clients take
    as fatal (librdkafka: "sequence desynchronization")."""
    partition = Partition("clicks", 0, broker_id=0, log=open_log(), config=TopicConfig())
    partition.become_leader(leader_epoch=0, replicas=(0,), isr=(0,), partition_epoch=0)
    lookups = iter([RequestTimedOutError("no reply from the controller in time")])

    async def leader(ctx, topic, index):
        for failure in lookups:
            raise failure
        return _Leader(partition)

    monkeypatch.setattr(data, "_leader", leader)

    async def connection(steps):
        CONNECTION.set({})
        return [await data.produce(ctx, *step) for step in steps]

    ctx = _Context("c", 0, None)
    header = codec.RequestHeader(codec.ApiKey.PRODUCE, 9, 1, "test")

    def request(base_sequence: int, count: int) -> tuple:
        batch = rb.build([b"v"] * count, producer_id=7, producer_epoch=0, base_sequence=base_sequence)
        kafka_batch = b"".join(records.to_kafka(batch))
        topic_data = [{"name": "clicks", "partition_data": [{"index": 0, "records": kafka_batch}]}]
        return header, {"acks": 1, "timeout_ms": 1000, "topic_data": topic_data}

    answers = asyncio.run(connection([request(0, 2), request(2, 1), request(0, 2), request(2, 1)]))
    codes = [a["responses"][0]["partition_responses"][0]["error_code"] for a in answers]
    assert codes == [RequestTimedOutError.code, OutOfOrderSequenceError.code, 0, 0]
    assert partition.log.log_end_offset == 3  # 0..1 then 2, in the producer's order
