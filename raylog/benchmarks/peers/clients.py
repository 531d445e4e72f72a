"""One client role of the peers benchmark, run in a process of its own.

``python -m raylog.benchmarks.peers.clients SPEC`` where SPEC is a JSON object with ``system``
(raylog, bare, queue, redis, nats), ``role`` (produce, consume, sync; bare: sync only), ``records``,
``record_size`` and the system's coordinates; it prints one JSON line: the
:class:`raylog.benchmarks.perf.Throughput` figures, ``ack_latency_ms`` and a ``note``.

- produce: ``records`` values (``raylog.benchmarks.perf.make_values``, made before the clock starts)
  from the first send to the last acknowledgement, then checks the system holds them all.
- consume: from the first read until ``records`` came back, from the start of the data.
- sync: ``records`` values one at a time, each acknowledged before the next is sent.

The raylog roles call ``raylog.benchmarks.perf`` (the same code as ``raylog bench``); the others
use each system's Python client in its usual bulk form (batches sized in ``BATCH``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from raylog.benchmarks import perf

#: Records per bulk call of each peer: Queue put/get batches, Redis pipeline and XREAD
#: COUNT, NATS async publishes in flight and fetch batch. Each the fastest of a sweep on this
#: machine (noisy: other work shared it): Queue 1,000 / 10,000 / 50,000; Redis 100 to
#: 10,000 (large XREAD replies were slower); NATS 300 / 1,000 / 4,000 (nats-py's default
#: in flight), all alike. raylog's batches are its default 1 MiB (~9,000 records of 100 B).
BATCH = {"queue": 50_000, "redis_pipeline": 1_000, "redis_read": 100, "nats_in_flight": 1_000, "nats_fetch": 1_000}
#: How long any single wait of a role may take.
TIMEOUT_S = 120.0


def _payloads(spec: dict) -> list[bytes]:
    return [row.tobytes() for row in perf.make_values(spec["records"], spec["record_size"])]


def _result(
    records: int, value_bytes: int, seconds: float, latency: perf.Latency | None = None, note: str = ""
) -> dict:
    return {**perf.Throughput(records, value_bytes, seconds).to_json(ack_latency_ms=latency), "note": note}


def _one_by_one(payloads: list[bytes], send_and_wait: Callable[[bytes], Any], note: str) -> dict:
    result, latency = perf.one_by_one(payloads, send_and_wait)
    return _result(result.records, result.value_bytes, result.seconds, latency, note)


def _check_count(what: str, found: int, expected: int) -> None:
    if found != expected:
        raise RuntimeError(f"{what}: {found:,} records stored, expected {expected:,}")


# --- raylog -------------------------------------------------------------------------------


def _join_ray(spec: dict) -> None:
    import ray

    ray.init(
        address=spec["ray_address"],
        namespace=spec["namespace"],
        configure_logging=False,
        log_to_driver=False,
        logging_level=logging.WARNING,
    )


def raylog_role(spec: dict) -> dict:
    import raylog

    _join_ray(spec)
    cluster = raylog.connect(spec["ray_address"], cluster_name=spec["cluster_name"])
    topic, count, arrow = spec["topic"], spec["records"], spec["arrow"]
    if spec["role"] == "consume":
        consumer = raylog.Consumer(cluster, topic, auto_offset_reset="earliest")
        try:
            result = perf.consume(consumer, count, arrow=arrow, timeout_s=TIMEOUT_S)
        finally:
            consumer.close()
        return _result(
            result.records, result.value_bytes, result.seconds, note="poll_arrow()" if arrow else "poll() -> Records"
        )
    values = perf.make_values(count, spec["record_size"])
    sync = spec["role"] == "sync"
    batch_size = spec.get("batch_size")  # None: the producer's default
    settings = {"linger_ms": 0} if sync else {"batch_size": batch_size} if batch_size else {}
    producer = raylog.Producer(cluster, acks=spec["acks"], **settings)
    try:
        if sync:
            result, latency = perf.produce_one_by_one(producer, topic, values, timeout_s=TIMEOUT_S)
            note = "send().result() per record, linger_ms=0"
        else:
            result, latency = perf.produce(
                producer,
                topic,
                values,
                arrow=arrow,
                timeout_s=TIMEOUT_S,
                chunk_records=perf.batch_records(spec["record_size"], batch_size),
            )
            size = (batch_size or perf.PRODUCER_BATCH_SIZE) / 2**20
            note = f"send_arrow() of batch-sized tables, {size:g} MiB batches" if arrow else "send() per record"
    finally:
        producer.close(timeout=TIMEOUT_S)
    if not sync:
        perf.wait_for_records(cluster, topic, count, TIMEOUT_S)
    return _result(result.records, result.value_bytes, result.seconds, None if not sync else latency, note)


# --- a bare Ray actor ---------------------------------------------------------------------


class _Bare:
    """A no-op call to a threaded actor, as a replica is: the floor of a synchronous send."""

    def append(self, value: bytes) -> int:
        return len(value)


def bare_role(spec: dict) -> dict:
    import ray

    from raylog.actors.replica import MAX_CONCURRENCY

    if spec["role"] != "sync":
        raise ValueError("the bare actor has a sync role only")
    _join_ray(spec)
    actor = ray.remote(_Bare).options(num_cpus=0, max_concurrency=MAX_CONCURRENCY).remote()
    try:
        payloads = _payloads(spec)
        ray.get([actor.append.remote(p) for p in payloads[:20]])  # started, warm
        return _one_by_one(payloads, lambda value: ray.get(actor.append.remote(value)), "no-op call per record")
    finally:
        ray.kill(actor)


# --- ray.util.queue.Queue ----------------------------------------------------------------


def queue_role(spec: dict) -> dict:
    import ray

    _join_ray(spec)
    with open(spec["queue_file"], "rb") as f:
        queue = ray.cloudpickle.loads(f.read())  # the driver's Queue (its actor outlives this process)
    size = BATCH["queue"]
    if spec["role"] == "consume":
        count, got, value_bytes = spec["records"], 0, 0
        start = time.perf_counter()
        while got < count:
            items = queue.get_nowait_batch(min(size, count - got))
            got += len(items)
            value_bytes += sum(map(len, items))
        return _result(got, value_bytes, time.perf_counter() - start, note=f"get_nowait_batch({size:,})")
    payloads = _payloads(spec)
    if spec["role"] == "sync":
        return _one_by_one(payloads, queue.put, "put() per record")
    start = time.perf_counter()
    for i in range(0, len(payloads), size):
        queue.put_nowait_batch(payloads[i : i + size])
    seconds = time.perf_counter() - start
    _check_count("queue", queue.qsize(), len(payloads))
    return _result(len(payloads), sum(map(len, payloads)), seconds, note=f"put_nowait_batch({size:,})")


# --- Redis Streams -----------------------------------------------------------------------


def redis_role(spec: dict) -> dict:
    import redis

    client = redis.Redis(host=spec["host"], port=spec["port"])
    key = spec["key"]
    if spec["role"] == "consume":
        count, got, value_bytes, last = spec["records"], 0, 0, "0-0"
        start = time.perf_counter()
        while got < count:
            ((_, entries),) = client.xread({key: last}, count=BATCH["redis_read"])
            got += len(entries)
            value_bytes += sum(len(fields[b"v"]) for _, fields in entries)
            last = entries[-1][0]
        return _result(
            got, value_bytes, time.perf_counter() - start, note=f"XREAD COUNT {BATCH['redis_read']:,} (hiredis parser)"
        )
    payloads = _payloads(spec)
    if spec["role"] == "sync":
        return _one_by_one(payloads, lambda v: client.xadd(key, {"v": v}), "XADD per record")
    size = BATCH["redis_pipeline"]
    start = time.perf_counter()
    for i in range(0, len(payloads), size):
        pipe = client.pipeline(transaction=False)
        for value in payloads[i : i + size]:
            pipe.xadd(key, {"v": value})
        pipe.execute()
    seconds = time.perf_counter() - start
    _check_count("redis", client.xlen(key), len(payloads))
    return _result(len(payloads), sum(map(len, payloads)), seconds, note=f"XADD pipelined {size:,} per round trip")


# --- NATS JetStream ----------------------------------------------------------------------


def nats_role(spec: dict) -> dict:
    return asyncio.run(_nats_role(spec))


async def _nats_role(spec: dict) -> dict:
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

    client = await nats.connect(f"nats://{spec['host']}:{spec['port']}")
    try:
        js = client.jetstream(publish_async_max_pending=BATCH["nats_in_flight"])
        subject, stream = spec["subject"], spec["stream"]
        if spec["role"] == "consume":
            config = ConsumerConfig(ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL)
            subscription = await js.pull_subscribe(subject, stream=stream, config=config)
            count, got, value_bytes = spec["records"], 0, 0
            start = time.perf_counter()
            while got < count:
                messages = await subscription.fetch(min(BATCH["nats_fetch"], count - got), timeout=TIMEOUT_S)
                got += len(messages)
                value_bytes += sum(len(m.data) for m in messages)
            return _result(
                got,
                value_bytes,
                time.perf_counter() - start,
                note=f"pull consumer, fetch({BATCH['nats_fetch']:,}), AckPolicy.NONE",
            )
        payloads = _payloads(spec)
        if spec["role"] == "sync":
            return await _nats_sync(js, subject, payloads)
        start = time.perf_counter()
        for value in payloads:
            await js.publish_async(subject, value)
        await asyncio.wait_for(js.publish_async_completed(), TIMEOUT_S)
        seconds = time.perf_counter() - start
        _check_count("nats", (await js.stream_info(stream)).state.messages, len(payloads))
        return _result(
            len(payloads),
            sum(map(len, payloads)),
            seconds,
            note=f"publish_async, {BATCH['nats_in_flight']:,} in flight",
        )
    finally:
        await client.close()


async def _nats_sync(js: Any, subject: str, payloads: list[bytes]) -> dict:
    latencies = np.empty(len(payloads))
    clock = time.perf_counter
    start = clock()
    for i, payload in enumerate(payloads):
        sent_at = clock()
        await js.publish(subject, payload)
        latencies[i] = (clock() - sent_at) * 1000
    seconds = clock() - start
    return _result(
        len(payloads),
        sum(map(len, payloads)),
        seconds,
        perf.Latency.of(latencies),
        "publish() per record (waits for the PubAck)",
    )


ROLES = {"raylog": raylog_role, "bare": bare_role, "queue": queue_role, "redis": redis_role, "nats": nats_role}


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    print(json.dumps(ROLES[spec["system"]](spec)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
