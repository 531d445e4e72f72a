"""Benchmark of raylog's Kafka listener: unchanged Kafka clients (confluent-kafka, which
bundles librdkafka; kafka-python) against raylog's own clients, same records, same run.

Set-up: a local Ray started here (the embedded default's settings: a 512 MiB object store,
no dashboard), one embedded raylog broker with its data in a temporary directory, a Kafka
listener on a free loopback port (``listeners="PLAINTEXT://127.0.0.1:0"``) and one
``__consumer_offsets`` partition; topics with replication factor 1 created per measurement
and deleted after it. No fsync (Kafka's default). Values are 100 B
(``raylog.benchmarks.common.make_values``), no keys. Everything is removed at the end.
:func:`measure` runs the same measurements on a cluster someone else started (its brokers
must run listeners).

What is measured (``time.perf_counter``; throughput runs are repeated and the best is shown):

1. Floors, one round trip at a time, 100 B each way: a no-op method of a threaded Ray actor
   (as a replica is; ``client_bench``'s bare call, 1,000 round trips), and a plain TCP
   round trip on loopback to an asyncio echo server in a Ray actor (size-prefixed frames
   read with ``readexactly``, the listener's shape; after a warm-up): what any Ray call and
   any request over the listener's socket cost before either does work.
2. One-at-a-time produce, ``acks=1``, ``linger 0``, to a 1-partition topic, each record
   acknowledged before the next is sent: raylog's ``send().result()`` (the baseline), then
   confluent-kafka ``produce()`` + ``flush()`` and kafka-python ``send().get()`` over the
   listener. Target: confluent-kafka p50 <= 1.3x the baseline's p50.
3. Produce throughput, N records to a fresh topic (1 and, in full mode, 6 partitions), a
   fresh producer per run, first call to the last acknowledgement: raylog's per-record
   ``Producer.send()`` (``acks=1``, its defaults otherwise: ``linger_ms=5``), then a
   confluent-kafka ``Producer`` with librdkafka's defaults but ``linger.ms=5`` and
   ``acks=1``, twice: reporting only failed deliveries (as raylog's ``send()`` calls nothing
   per record; the target's row) and with a delivery callback counting every record (a full
   local queue is drained with ``poll``). Each run is checked against the partitions' high
   watermarks; the note gives the ``produce()`` calls' own rate, the client's ceiling.
   Target: confluent-kafka >= 2x raylog's ``send()``.
4. Consume throughput: the first N records of that topic from offset 0, a fresh consumer per
   run, from its first poll until N came: raylog's ``Consumer.poll()`` into Records (the
   baseline), then a confluent-kafka ``Consumer`` assigned every partition at the beginning
   (no group join, no commits; an untimed run of one record first, as it looks its group's
   coordinator up) calling ``consume(num_messages=...)`` in a loop, with librdkafka's
   ``fetch.queue.backoff.ms`` at 0 (see :data:`CONSUMER_SETTINGS`); the note gives how fast
   ``consume()`` takes records librdkafka already holds, the client's own ceiling.
   Target: confluent-kafka >= 2x raylog's ``poll()``.
5. Record conversion, in this process: Kafka record batch v2 to raylog's batch and back
   (``raylog.kafka.records``), batches of 10,000 of these records, with its floors (a
   memcpy, raylog's own encode and decode): ``raylog.benchmarks.kafka_records_bench``'s rows for
   values without keys, run from here (its target: >= 1,000,000 records/s each way).

MB is 10^6 bytes of values.

Usage (or ``python -m raylog.benchmarks.kafka_bench``)::

    raylog bench kafka [--quick] [--json PATH] [--dir PARENT]
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import ray

import raylog
from raylog import Producer
from raylog.benchmarks import client_bench, common
from raylog.benchmarks.common import MB, BenchError, Target, get, number, times
from raylog.benchmarks.perf import Latency, high_watermarks, one_by_one
from raylog.clients.cluster import RaylogCluster

VALUE_BYTES = 100
#: Where every broker of the benchmark's own cluster listens (port 0: any free port).
LISTENERS = "PLAINTEXT://127.0.0.1:0"
#: The benchmark's own cluster: a listener per broker; one partition for the consumer groups'
#: offsets (Kafka's 50 would be 50 replica processes on this machine, started by the
#: confluent-kafka consumer's first coordinator look-up).
CLUSTER_CONFIG = {"listeners": LISTENERS, "offsets.topic.num.partitions": "1"}
#: Targets of issue 15: Kafka client over the listener against raylog's own client.
PRODUCE_RATIO = 2.0
CONSUME_RATIO = 2.0
ONE_AT_A_TIME_P50_RATIO = 1.3
#: Round trips made before each latency measurement (connections, metadata, warm caches).
WARMUP_ROUND_TRIPS = 20
#: ``num_messages`` of each confluent-kafka ``consume`` call.
CONSUME_BATCH = 10_000
#: A frame of the TCP floor: a 4-byte big-endian size, then the payload (Kafka's framing).
SIZE_PREFIX = 4


@dataclass(frozen=True)
class Scale:
    """How much work each measurement does."""

    name: str
    repeats: int  # timed runs per throughput measurement; the best is reported
    records: int  # records per produce / consume run
    round_trips: int  # one-at-a-time round trips per latency row
    partitions: tuple[int, ...]  # topics the throughput rows are measured on
    timeout_s: float  # bound on any single wait


FULL = Scale("full", repeats=3, records=300_000, round_trips=2_000, partitions=(1, 6), timeout_s=180.0)
QUICK = Scale("quick", repeats=1, records=20_000, round_trips=200, partitions=(1,), timeout_s=60.0)


#: A results row: client_bench's (``ratio`` here is over raylog's own client: its records/s,
#: or its ``send().result()`` p50 for latency rows; sections "latency" and "throughput").
Row = client_bench.Row


# ---------------------------------------------------------------------------------------
# Floors: a bare Ray call and a TCP round trip


class EchoServer:
    """An asyncio server on loopback that sends every size-prefixed frame back as it came
    (an async Ray actor: the server runs on the actor's event loop between calls)."""

    async def start(self) -> int:
        """Listen on a free loopback port; the port."""
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readexactly(SIZE_PREFIX)
                body = await reader.readexactly(int.from_bytes(head, "big"))
                writer.writelines([head, body])
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client closed its end
        finally:
            writer.close()


class EchoClient:
    """A blocking loopback connection to an :class:`EchoServer`: ``round_trip(payload)``
    sends one frame and waits for it to come back whole."""

    def __init__(self, port: int, timeout_s: float):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = bytearray(1 << 16)

    def round_trip(self, payload: bytes) -> None:
        size = SIZE_PREFIX + len(payload)
        self.sock.sendall(len(payload).to_bytes(SIZE_PREFIX, "big") + payload)
        view, got = memoryview(self.buffer), 0
        while got < size:
            n = self.sock.recv_into(view[got:size])
            if n == 0:
                raise BenchError("the echo server closed the connection")
            got += n

    def close(self) -> None:
        self.sock.close()


def latency_row(name: str, latency: Latency | None, baseline_p50_ms: float | None, **fields: Any) -> Row:
    """A latency row of ``latency``'s p50, p99 and max, its p50 over ``baseline_p50_ms``."""
    if latency is None:
        raise BenchError(f"{name}: no round trip was timed")
    ratio = latency.p50_ms / baseline_p50_ms if baseline_p50_ms else None
    return Row(
        "latency", name, p50_ms=latency.p50_ms, p99_ms=latency.p99_ms, max_ms=latency.max_ms, ratio=ratio, **fields
    )


def rate_row(name: str, count: int, seconds: float, baseline: float | None, target: float | None, note: str) -> Row:
    """A throughput row: ``count`` records of ``VALUE_BYTES`` in ``seconds``, its records/s over
    ``baseline`` (None: unknown), targeted at ``target`` times the baseline if given."""
    rate = count / seconds
    return Row(
        "throughput",
        name,
        rate,
        rate * VALUE_BYTES / MB,
        ratio=rate / baseline if baseline else None,
        targets=[Target("ratio", ">=", target)] if target else [],
        note=note,
    )


def timed_round_trips(payloads: list[bytes], round_trip: Callable[[bytes], object]) -> Latency | None:
    """The latency of ``round_trip`` on each payload in turn, after an untimed warm-up."""
    one_by_one(payloads[:WARMUP_ROUND_TRIPS], round_trip)
    return one_by_one(payloads, round_trip)[1]


# ---------------------------------------------------------------------------------------
# Kafka clients over the listener


def confluent_config(bootstrap: str, **settings: Any) -> dict[str, Any]:
    """A confluent-kafka configuration for ``bootstrap`` with ``settings`` (Kafka names)."""
    return {"bootstrap.servers": bootstrap, "client.id": "raylog-kafka-bench", **settings}


class Deliveries:
    """Counts confluent-kafka delivery reports; keeps the first error."""

    def __init__(self) -> None:
        self.delivered = 0
        self.error: Any = None

    def __call__(self, err: Any, _msg: Any) -> None:
        if err is None:
            self.delivered += 1
        elif self.error is None:
            self.error = err

    def check(self, expected: int, what: str) -> None:
        if self.error is not None:
            raise BenchError(f"{what}: delivery failed: {self.error}")
        if self.delivered != expected:
            raise BenchError(f"{what}: {self.delivered:,} delivery reports of {expected:,}")


def confluent_produce(
    bootstrap: str,
    topic: str,
    values: list[bytes],
    timeout_s: float,
    every_report: bool,
    client: dict[str, Any] | None = None,
) -> tuple[float, float]:
    """Seconds for a fresh confluent-kafka producer (librdkafka's defaults but ``linger.ms=5``
    and ``acks=1``) to send ``values`` to ``topic`` and have every one acknowledged, and the
    seconds until the last ``produce()`` call returned (the client's own share). With
    ``every_report`` a delivery callback counts each record; without, librdkafka reports only
    failures (``delivery.report.only.error``), as raylog's ``send()`` calls nothing per record,
    and ``flush()`` returning 0 says every record was acknowledged or failed. ``client``: more
    settings (security)."""
    from confluent_kafka import Producer as KafkaProducer

    deliveries = Deliveries()
    settings = {"linger.ms": 5, "acks": 1, "on_delivery": deliveries, **(client or {})}
    if not every_report:
        settings["delivery.report.only.error"] = True
    producer = KafkaProducer(confluent_config(bootstrap, **settings))
    producer.list_topics(topic, timeout=timeout_s)  # connected, the topic's leaders known: untimed
    produce, poll = producer.produce, producer.poll
    start = time.perf_counter()
    for value in values:
        while True:
            try:
                produce(topic, value)
                break
            except BufferError:  # librdkafka's local queue is full: serve delivery reports
                poll(0.001)
    calls_seconds = time.perf_counter() - start
    remaining = producer.flush(timeout_s)
    seconds = time.perf_counter() - start
    if remaining:
        raise BenchError(f"confluent-kafka produce to {topic}: {remaining:,} records not delivered in {timeout_s:g} s")
    deliveries.check(len(values) if every_report else 0, f"confluent-kafka produce to {topic}")
    return seconds, calls_seconds


#: librdkafka pauses fetching a partition for ``fetch.queue.backoff.ms`` (1,000 ms by default)
#: once it holds ``queued.min.messages`` (100,000) of it, whatever the application takes
#: meanwhile: with the default, 300,000 records took two one-second pauses. A client setting
#: (it pauses against Kafka's brokers alike), turned off so that the broker path is measured.
CONSUMER_SETTINGS = {"enable.auto.commit": False, "fetch.queue.backoff.ms": 0}


def confluent_consume(
    bootstrap: str, topic: str, partitions: int, count: int, timeout_s: float, client: dict[str, Any] | None = None
) -> tuple[float, float, int]:
    """Seconds for a fresh confluent-kafka consumer, assigned every partition of ``topic`` at
    the beginning, to receive ``count`` records with ``consume(num_messages=...)``; the
    seconds until the first records came and how many came then (its start-up: connections,
    the offset look-up, librdkafka's own back-offs)."""
    consumer = _assigned_consumer(bootstrap, topic, partitions, client or {})
    try:
        consume = consumer.consume
        got = first_count = 0
        first_seconds = 0.0
        start = time.perf_counter()
        deadline = start + timeout_s
        while got < count and time.perf_counter() < deadline:
            messages = consume(num_messages=min(CONSUME_BATCH, count - got), timeout=1.0)
            _check_messages(messages, topic)
            if messages and not got:
                first_seconds, first_count = time.perf_counter() - start, len(messages)
            got += len(messages)
        seconds = time.perf_counter() - start
    finally:
        consumer.close()
    if got < count:
        raise BenchError(f"confluent-kafka consume of {topic}: {got:,} of {count:,} records within {timeout_s:g} s")
    return seconds, first_seconds, first_count


def confluent_take_ceiling(bootstrap: str, topic: str, partitions: int, count: int, timeout_s: float) -> float:
    """Records per second of ``consume(num_messages=...)`` taking ``count`` records that
    librdkafka already holds (it fetched them all first, as its statistics say): the client's
    own ceiling, no broker involved."""
    queued = [0]

    def on_stats(text: str) -> None:
        stats = json.loads(text)
        parts = stats["topics"].get(topic, {}).get("partitions", {})
        queued[0] = sum(p["fetchq_cnt"] for key, p in parts.items() if key != "-1")

    settings = {"queued.min.messages": count, "statistics.interval.ms": 50, "stats_cb": on_stats}
    consumer = _assigned_consumer(bootstrap, topic, partitions, settings)
    try:
        got, deadline = 0, time.perf_counter() + timeout_s
        while got + queued[0] < count and time.perf_counter() < deadline:
            got += len(_check_messages(consumer.consume(num_messages=1, timeout=0.05), topic))
        left = count - got
        start = time.perf_counter()
        while got < count and time.perf_counter() < deadline:
            got += len(
                _check_messages(consumer.consume(num_messages=min(CONSUME_BATCH, count - got), timeout=1.0), topic)
            )
        seconds = time.perf_counter() - start
    finally:
        consumer.close()
    if got < count:
        raise BenchError(f"confluent-kafka consume of {topic}: {got:,} of {count:,} records within {timeout_s:g} s")
    return left / seconds


def _assigned_consumer(bootstrap: str, topic: str, partitions: int, settings: dict[str, Any]) -> Any:
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition
    from confluent_kafka import Consumer as KafkaConsumer

    group = f"raylog-kafka-bench-{uuid.uuid4().hex[:8]}"
    consumer = KafkaConsumer(confluent_config(bootstrap, **{"group.id": group, **CONSUMER_SETTINGS, **settings}))
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    return consumer


def _check_messages(messages: list, topic: str) -> list:
    for message in messages:
        if message.error() is not None:
            raise BenchError(f"confluent-kafka consume of {topic}: {message.error()}")
    return messages


# ---------------------------------------------------------------------------------------
# The measurements


class Runner(client_bench.Runner):
    """client_bench's runner (its topics, its bare Ray call) with the Kafka clients'
    measurements; holds the floors and baselines measured so far, and the rows."""

    tag = "kafka_bench"

    def __init__(self, cluster: RaylogCluster, scale: Scale):
        super().__init__(cluster, scale, workdir="")  # (no file baseline here: no workdir)
        self.bootstrap = cluster.bootstrap_servers()
        if not self.bootstrap:
            raise BenchError(
                f"raylog cluster {cluster.cluster_name!r} runs no Kafka listener (start it with the "
                "'listeners' setting, or raylog start --kafka-port)"
            )
        self.payloads = common.make_values(scale.round_trips, VALUE_BYTES)
        self.raylog_one_p50_ms: float | None = None  # raylog send().result(), p50
        self.tcp_p50_ms: float | None = None

    def over_tcp(self, latency: Latency | None) -> str:
        if latency is None or self.tcp_p50_ms is None:
            return ""
        return f"; p50 {latency.p50_ms - self.tcp_p50_ms:+.3f} ms over the TCP floor"

    # --- 1. floors ------------------------------------------------------------------

    def floors(self) -> None:
        self.phase("latency", "baseline: bare Ray actor call", self._bare_call)
        self.phase("latency", "baseline: TCP round trip", self._tcp_round_trip)

    def _tcp_round_trip(self) -> None:
        server = ray.remote(EchoServer).options(num_cpus=0).remote()
        try:
            port = get(server.start.remote(), self.scale.timeout_s, "echo server start")
            client = EchoClient(port, self.scale.timeout_s)
            try:
                latency = timed_round_trips(self.payloads, client.round_trip)
            finally:
                client.close()
        finally:
            ray.kill(server)
        self.tcp_p50_ms = latency.p50_ms if latency is not None else None
        note = f"{len(self.payloads):,} size-prefixed frames to an asyncio echo server in a Ray actor"
        self.rows.append(
            latency_row(f"baseline: TCP round trip on loopback, {VALUE_BYTES} B", latency, None, note=note)
        )

    # --- 2. one at a time -----------------------------------------------------------

    def one_at_a_time(self) -> None:
        topic = self.create_topic(1)
        try:
            self.phase("latency", "raylog send().result()", lambda: self._raylog_one(topic))
            self.phase("latency", "confluent-kafka produce + flush", lambda: self._confluent_one(topic))
            self.phase("latency", "kafka-python send().get()", lambda: self._kafka_python_one(topic))
        finally:
            self.delete_topic(topic)
        floors = [r for r in self.rows if r.name.startswith("baseline:") and r.p50_ms is not None]
        for row in floors:
            row.ratio = row.p50_ms / self.raylog_one_p50_ms if self.raylog_one_p50_ms else None

    def _raylog_one(self, topic: str) -> None:
        timeout_s = self.scale.timeout_s
        producer = Producer(self.cluster, acks=1, linger_ms=0)
        try:
            send = producer.send
            latency = timed_round_trips(self.payloads, lambda value: send(topic, value).result(timeout=timeout_s))
        finally:
            producer.close(timeout=timeout_s)
        self.raylog_one_p50_ms = latency.p50_ms if latency is not None else None
        note = f"baseline; {len(self.payloads):,} records, each acknowledged before the next"
        self.rows.append(latency_row("raylog Producer send().result(), acks=1, linger 0", latency, None, note=note))

    def _confluent_one(self, topic: str) -> None:
        from confluent_kafka import Producer as KafkaProducer

        timeout_s = self.scale.timeout_s
        deliveries = Deliveries()
        config = confluent_config(self.bootstrap, **{"linger.ms": 0, "acks": 1, "on_delivery": deliveries})
        producer = KafkaProducer(config)
        producer.list_topics(topic, timeout=timeout_s)

        def round_trip(value: bytes) -> None:
            producer.produce(topic, value)
            if producer.flush(timeout_s):
                raise BenchError(f"confluent-kafka: a record to {topic} not delivered in {timeout_s:g} s")

        try:
            latency = timed_round_trips(self.payloads, round_trip)
        finally:
            producer.flush(timeout_s)
        deliveries.check(WARMUP_ROUND_TRIPS + len(self.payloads), f"confluent-kafka one at a time to {topic}")
        self.rows.append(
            latency_row(
                "confluent-kafka produce() + flush(), acks=1, linger 0",
                latency,
                self.raylog_one_p50_ms,
                targets=[Target("ratio", "<=", ONE_AT_A_TIME_P50_RATIO)],
                note=f"over the listener{self.over_tcp(latency)}",
            )
        )

    def _kafka_python_one(self, topic: str) -> None:
        from kafka import KafkaProducer

        timeout_s = self.scale.timeout_s
        producer = KafkaProducer(bootstrap_servers=self.bootstrap, acks=1, linger_ms=0, client_id="raylog-kafka-bench")
        try:
            latency = timed_round_trips(self.payloads, lambda value: producer.send(topic, value).get(timeout=timeout_s))
        finally:
            producer.close(timeout=timeout_s)
        self.rows.append(
            latency_row(
                "kafka-python send().get(), acks=1, linger 0 (extra)",
                latency,
                self.raylog_one_p50_ms,
                note=f"over the listener, a pure-Python client{self.over_tcp(latency)}",
            )
        )

    # --- 3 and 4. throughput ----------------------------------------------------------

    def throughput(self, partitions: int) -> None:
        work = client_bench.make_workload(VALUE_BYTES, self.scale.records)
        topic = self.create_topic(partitions)
        shape = f"{VALUE_BYTES} B, {partitions} partition{'s' if partitions > 1 else ''}"
        try:
            baseline: dict[str, float] = {}
            self.phase(
                "throughput", f"raylog send(), {shape}", lambda: self._raylog_produce(topic, work, shape, baseline)
            )
            self.phase(
                "throughput",
                f"confluent-kafka produce, {shape}",
                lambda: self._confluent_produce(topic, work, shape, baseline.get("produce")),
            )
            self.phase(
                "throughput", f"raylog poll(), {shape}", lambda: self._raylog_consume(topic, work, shape, baseline)
            )
            self.phase(
                "throughput",
                f"confluent-kafka consume, {shape}",
                lambda: self._confluent_consume(topic, partitions, work, shape, baseline.get("consume")),
            )
        finally:
            self.delete_topic(topic)

    def _raylog_produce(self, topic: str, work: Any, shape: str, baseline: dict[str, float]) -> None:
        seconds, note = common.best(
            partial(client_bench.timed_produce, self.cluster, topic, work, "send", self.scale.timeout_s, acks=1),
            self.scale.repeats,
        )
        baseline["produce"] = work.count / seconds
        name = f"raylog Producer send() per record, acks=1, {shape}"
        note = f"baseline; {work.count:,} records" + (f"; {note}" if note else "")
        self.rows.append(rate_row(name, work.count, seconds, baseline["produce"], None, note))

    def _confluent_produce(self, topic: str, work: Any, shape: str, baseline: float | None) -> None:
        timeout_s = self.scale.timeout_s

        def run(every_report: bool) -> tuple[float, float]:
            before = high_watermarks(self.cluster, topic)
            seconds = confluent_produce(self.bootstrap, topic, work.values, timeout_s, every_report)
            written = high_watermarks(self.cluster, topic) - before
            if written != work.count:
                raise BenchError(f"confluent-kafka to {topic}: {written:,} records written, expected {work.count:,}")
            return seconds

        for every_report, kind, target in (
            (False, "reports of failures only", PRODUCE_RATIO),
            (True, "every delivery report", None),
        ):
            seconds, calls_seconds = common.best(partial(run, every_report), self.scale.repeats)
            name = f"confluent-kafka produce(), linger.ms=5, acks=1, {kind}, {shape}"
            note = (
                f"over the listener; {work.count:,} records, high watermarks checked; the produce() calls "
                f"alone (the client's ceiling) {work.count / calls_seconds:,.0f}/s, "
                f"{100 * calls_seconds / seconds:.0f}% of the run"
            )
            self.rows.append(rate_row(name, work.count, seconds, baseline, target, note))

    def _raylog_consume(self, topic: str, work: Any, shape: str, baseline: dict[str, float]) -> None:
        seconds = common.best(
            partial(client_bench.timed_consume, self.cluster, topic, work.count, "poll", self.scale), self.scale.repeats
        )
        baseline["consume"] = work.count / seconds
        name = f"raylog Consumer poll() -> Records, {shape}"
        note = f"baseline; {work.count:,} records from offset 0"
        self.rows.append(rate_row(name, work.count, seconds, baseline["consume"], None, note))

    def _confluent_consume(self, topic: str, partitions: int, work: Any, shape: str, baseline: float | None) -> None:
        # Untimed: a confluent-kafka consumer needs a group id, so it looks its coordinator up
        # (FindCoordinator) even when it only assigns; the first look-up may start the group
        # coordinators, which is no part of a fetch.
        confluent_consume(self.bootstrap, topic, partitions, 1, self.scale.timeout_s)
        run = partial(confluent_consume, self.bootstrap, topic, partitions, work.count, self.scale.timeout_s)
        seconds, first_seconds, first_count = common.best(run, self.scale.repeats)
        ceiling = confluent_take_ceiling(self.bootstrap, topic, partitions, work.count, self.scale.timeout_s)
        after_first = (work.count - first_count) / (seconds - first_seconds) if seconds > first_seconds else None
        name = f"confluent-kafka consume(num_messages={CONSUME_BATCH:,}), {shape}"
        note = (
            f"over the listener, fetch.queue.backoff.ms=0; {work.count:,} records from offset 0, assigned "
            f"(no group); the first "
            f"{first_count:,} after {first_seconds * 1000:,.0f} ms"
            + (f", the rest at {after_first:,.0f}/s" if after_first else "")
            + f"; consume() of records it already holds (the client's ceiling) {ceiling:,.0f}/s"
        )
        self.rows.append(rate_row(name, work.count, seconds, baseline, CONSUME_RATIO, note))

    # --- 5. record conversion ---------------------------------------------------------

    def conversion(self) -> None:
        """kafka_records_bench's rows for this benchmark's records (100 B values, no keys),
        floors included, in this table's units."""
        from raylog.benchmarks import kafka_records_bench

        count = kafka_records_bench.RECORDS
        values = common.make_values(count, VALUE_BYTES)
        stamps = [1_700_000_000_000 + i for i in range(count)]
        shape = next(s for s in kafka_records_bench.shapes(values) if s.keys is None and s.headers is None)
        repeats = 3 * self.scale.repeats
        for row in kafka_records_bench.bench_shape(values, shape, stamps, repeats):
            rate = row.records_per_s
            self.rows.append(
                Row(
                    "conversion",
                    f"{row.name}, {count:,} records a batch",
                    rate,
                    rate * VALUE_BYTES / MB,
                    ratio=row.ratio,
                    targets=row.targets,
                    note=f"best of {repeats}; {row.note}",
                )
            )


# ---------------------------------------------------------------------------------------
# Output


def rate_columns(ratio_title: str, rate_width: int, mb_width: int, mb_form: str) -> common.Columns:
    """A throughput table's columns: records/s, MB/s and the ratio titled ``ratio_title``."""
    return (
        ("measurement", 70, None),
        ("records/s", rate_width, lambda r: number(r.records_per_s, ",.0f")),
        ("MB/s", mb_width, lambda r: number(r.mb_per_s, mb_form)),
        (ratio_title, 8, lambda r: times(r.ratio)),
    )


TABLES = {
    "latency": (
        (
            ("measurement (one round trip at a time)", 56, None),
            ("p50 ms", 7, lambda r: number(r.p50_ms, ".3f")),
            ("p99 ms", 7, lambda r: number(r.p99_ms, ".3f")),
            ("max ms", 7, lambda r: number(r.max_ms, ".2f")),
            ("p50 x raylog", 12, lambda r: times(r.ratio)),
        ),
        14,
    ),
    "throughput": (rate_columns("x raylog", 11, 6, ",.1f"), 10),
    "conversion": (rate_columns("x floor", 13, 8, ",.0f"), 16),
}


def print_report(rows: list[Row], scale: Scale) -> None:
    """The run's heading and its tables."""
    print(
        f"raylog Kafka listener benchmark, {scale.name} mode: topics of RF=1, acks=1, no fsync; "
        f"{VALUE_BYTES} B values, no keys"
    )
    print(
        f"throughput: best of {scale.repeats} run(s) of {scale.records:,} records; x raylog: over raylog's own "
        "client in the same run (produce: send() per record; consume: poll() into Records)"
    )
    print(
        f"latency: {scale.round_trips:,} round trips after {WARMUP_ROUND_TRIPS} untimed; p50 x raylog: over "
        "raylog's send().result() p50"
    )
    print("BELOW: target missed; ERROR: the measurement failed (see stderr)")
    common.print_tables(rows, TABLES)
    print()


def json_document(scale: Scale) -> dict[str, object]:
    return {
        "mode": scale.name,
        "statistic": f"best of {scale.repeats} runs (throughput)",
        "mb": MB,
        "records": scale.records,
        "round_trips": scale.round_trips,
        "value_bytes": VALUE_BYTES,
        "durability": "acks=1, RF=1, no fsync",
    }


# ---------------------------------------------------------------------------------------
# Entry points


def ship_actors() -> None:
    """Let Ray workers unpickle this benchmark's actors by value (they may not be able to
    import the ``benchmarks`` package)."""
    for module in (client_bench, sys.modules[__name__]):
        if module.__name__ != "__main__":
            ray.cloudpickle.register_pickle_by_value(module)


def measure(cluster: RaylogCluster, scale: Scale) -> list[Row]:
    """Every measurement on ``cluster`` (its brokers run Kafka listeners); the rows (a failed
    measurement is an ERROR row). The topics it creates are deleted before it returns.

    Raises:
        BenchError: the cluster runs no Kafka listener.
    """
    ship_actors()
    runner = Runner(cluster, scale)
    try:
        runner.floors()
        runner.phase("latency", "one at a time", runner.one_at_a_time)
        for partitions in scale.partitions:
            runner.phase(
                "throughput", f"throughput, {partitions} partitions", lambda p=partitions: runner.throughput(p)
            )
        runner.phase("conversion", "record conversion", runner.conversion)
    finally:
        runner.delete_all()
    return runner.rows


def run(scale: Scale, parent: str | None) -> list[Row]:
    """Every measurement on a fresh local Ray and raylog cluster, removed at the end."""
    with contextlib.ExitStack() as stack:
        workdir = common.temp_workdir(stack, "raylog-kafka-bench-", parent)
        common.start_local_ray(stack)
        cluster = raylog.connect(
            data_dir=os.path.join(workdir, "data"),
            cluster_name=f"kbench{uuid.uuid4().hex[:8]}",
            config=CLUSTER_CONFIG,
        )
        stack.callback(cluster.shutdown)
        return measure(cluster, scale)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Every measurement (timed, with the load and raylog's sources watched), printed with the
    run's totals, the JSON document written to ``--json`` if given; the exit code (1 if a
    measurement failed)."""
    args = common.bench_parser(__doc__, "a fast smoke run (< 60 s), for tests", prog).parse_args(argv)
    common.require("confluent_kafka", "kafka", "aiokafka")
    scale = QUICK if args.quick else FULL
    watch = common.RunWatch()
    rows = run(scale, args.dir)
    watch.stop()
    print_report(rows, scale)
    return common.finish(rows, watch, args.json, json_document(scale), "other work on the machine lowers every figure")


if __name__ == "__main__":
    common.run_script(main)
