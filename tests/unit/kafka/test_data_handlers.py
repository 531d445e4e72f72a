"""The Produce and Fetch handlers (raylog.actors.kafka.data) convert record batches on the
broker context's conversion threads, never on the event loop that serves every connection
(a batch's work grows with what it inflates to); without Ray, against a context whose
conversions are watched."""

from __future__ import annotations

import asyncio
import threading

from raylog.actors.kafka import data
from raylog.actors.kafka.context import BrokerContext
from raylog.errors import CorruptRecordError
from raylog.kafka import codec, records
from raylog.protocol import FetchResponse
from raylog.storage import record_batch as rb


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
        return threading.current_thread(), await data._fetch_answer(ctx, {}, [("clicks", partition)], results, {})

    loop_thread, (response, sent) = asyncio.run(answer())
    assert sent == {key: 8}
    assert response["responses"][0]["partitions"][0]["records"]
    assert threads and loop_thread not in threads
