"""Benchmark of raylog's clients (Producer, Consumer) on an embedded cluster, with Ray
baselines measured in the same run.

Set-up: a local Ray started here (``ray.init(address="local")`` with the embedded default's
settings: a 512 MiB object store, no dashboard), one embedded raylog broker with its data
in a temporary directory, topics with replication factor 1, producers with ``acks=1``.
Durability is Kafka's default: no fsync (``flush.messages`` and ``flush.ms`` are "never"),
so an acknowledged record is in the page cache. Everything is removed at the end.

What is measured (``time.perf_counter``; each throughput run is repeated and the table
shows the best run, the one least disturbed by the rest of this 2-core machine):

1. Produce, 100 B and 1 KiB values, to a 1-partition and to a 6-partition topic, from the
   first call to ``flush()`` returning, with ``Producer(acks=1)`` and otherwise default
   settings (``linger_ms=5``, ``batch_size=1 MiB``, no compression), a fresh producer per run:
   (a) ``send(topic, value)`` per record, (b) ``send(topic, value, key=key)`` with 500
   distinct keys, (c) one ``send_arrow(topic, table)`` call on a pre-built table with only
   a ``value`` column, and (extra, no target) the same with a ``key`` column. Targets:
   (a) >= 500,000 records/s, (b) >= 400,000, (c) >= 1,500,000 for 100 B, >= 400 MB/s for 1 KiB.
   Every run is checked against the partitions' high watermarks.
2. Consume the data of (a) from offset 0, ``Consumer(auto_offset_reset="earliest")``, a fresh
   consumer per run, from the first poll until N records came back: ``poll_arrow()`` with
   the default 1 MiB ``max_partition_fetch_bytes`` and with 8 MiB, and ``poll()`` (Record
   objects, default ``max_poll_records=500``). Targets: poll_arrow >= 2,000,000 records/s,
   poll() >= 800,000.
3. End-to-end latency: the driver sends 100 B records with ``linger_ms=0`` at a fixed rate
   (10,000, 1,000 and 100 records/s, open loop) to a 1-partition topic, each value starting
   with ``time.time_ns()``; a consumer in a Ray actor (another process, same clock) polls with
   ``poll_arrow`` and stamps each poll's records with ``time.time_ns()`` on return
   (``raylog.benchmarks.perf.StampReader``, as ``raylog bench e2e``). Records sent in the first second
   (warm-up) are left out; 5 s are measured per rate. Records still missing once none came
   for 60 s count as infinitely late (nearest-rank percentiles). The note gives the
   producer's acknowledgement latency (send to future done), how long the whole run took
   to arrive, the produce calls made and the CPU the leader, the consumer and the producer's
   process used while sending (% of a core). Baseline, first: 1,000 round trips of 100 B,
   one at a time, to a no-op method of a threaded Ray actor (as a replica is). Targets: p50
   <= 2x that bare call, and p99 <= 10 ms at 10,000/s, <= 5 ms at 100/s.
4. Baselines for the same values: a ``ray.util.queue.Queue`` fed with
   ``put_nowait_batch`` of 1,000 records and drained with ``get_nowait_batch(1,000)``; a bare
   Ray actor that appends ~1 MiB blobs (the record batches raylog would store, built from
   the same values) to a file with ``os.write`` (up to 5 calls in flight, the producer's
   ``max_in_flight_requests_per_connection``) and reads them back with ``os.pread`` (one call
   in flight, like one partition's fetch), returning them as NumPy arrays (zero-copy, as
   raylog's fetch does). raylog rows show ratios to these: produce rows to put/append,
   consume rows to get/read, same record size.
5. Memory: USS (``psutil ... memory_full_info().uss``) of the replica actor of a new, idle
   1-partition topic, against a plain Ray actor that only imports pyarrow, lz4 and
   msgpack (and, for reference, one that imports nothing, and the replica of the 1 KiB,
   1-partition topic after its runs). Target: idle replica <= 80 MB.

MB is 10^6 bytes; MB/s counts value bytes (plus key bytes for keyed rows).

Usage (or ``python -m raylog.benchmarks.client_bench``)::

    raylog bench client [--quick] [--json PATH] [--dir PARENT]
"""

from __future__ import annotations

import contextlib
import os
import struct
import time
import uuid
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import ray

import raylog
from raylog import Admin, Consumer, NewTopic, Producer
from raylog.actors.replica import MAX_CONCURRENCY
from raylog.benchmarks import common
from raylog.benchmarks.common import MB, MIB, BenchError, Target, get, number, times
from raylog.benchmarks.perf import StampReader, high_watermarks, nearest_rank
from raylog.clients.cluster import RaylogCluster
from raylog.clients.producer.sender import Sender
from raylog.common import record_batch
from raylog.errors import KafkaTimeoutError

#: (label, value size): the record shapes measured.
SIZES = (("100 B", 100), ("1 KiB", 1024))
PARTITION_COUNTS = (1, 6)
DISTINCT_KEYS = 500
#: Distinct values per size; a run's values cycle through them.
VALUE_POOL = 10_000
#: Records per ~1 MiB blob of the file baseline, per value size (as storage_bench).
BLOB_RECORDS = {100: 10_000, 1024: 1_000}
QUEUE_BATCH = 1_000
#: The producer's default max_in_flight_requests_per_connection.
IN_FLIGHT = 5
LATENCY_RATES = (10_000, 1_000, 100)
LATENCY_VALUE_BYTES = 100
#: End-to-end latency targets: p50 <= this many bare Ray actor calls (measured in the same
#: run), and p99 <= the rate's bound in ms.
LATENCY_P50_BARE_CALLS = 2.0
LATENCY_P99_MS = {10_000: 10.0, 100: 5.0}
#: Round trips timed for the bare call baseline.
BARE_CALLS = 1_000
BIG_FETCH_BYTES = 8 * MIB


@dataclass(frozen=True)
class Scale:
    """How much work each measurement does."""

    name: str
    repeats: int  # timed runs per throughput measurement; the best is reported
    records: dict  # value size -> records per produce / consume run
    latency_seconds: float  # measured seconds per latency rate (after the warm-up)
    warmup_seconds: float
    drain_seconds: float  # how long records may take to arrive after the sending ended
    timeout_s: float  # bound on any single wait


FULL = Scale(
    "full",
    repeats=3,
    records={100: 500_000, 1024: 200_000},
    latency_seconds=5.0,
    warmup_seconds=1.0,
    drain_seconds=60.0,
    timeout_s=180.0,
)
QUICK = Scale(
    "quick",
    repeats=1,
    records={100: 20_000, 1024: 5_000},
    latency_seconds=0.5,
    warmup_seconds=0.25,
    drain_seconds=10.0,
    timeout_s=60.0,
)


@dataclass
class Row(common.Judged):
    """One line of a results table; ``section`` says which table."""

    section: str  # "throughput", "latency" or "memory"
    name: str
    records_per_s: float | None = None
    mb_per_s: float | None = None
    vs_queue: float | None = None  # throughput over the Ray Queue baseline of the same kind
    vs_file: float | None = None  # throughput over the actor + file baseline of the same kind
    p50_ms: float | None = None
    p99_ms: float | None = None
    p999_ms: float | None = None
    max_ms: float | None = None
    uss_mb: float | None = None
    ratio: float | None = None  # memory: USS over the plain actor's; latency: p50 over a bare call's
    targets: list[Target] = field(default_factory=list)
    note: str = ""
    error: str | None = None


# ---------------------------------------------------------------------------------------
# Inputs


@dataclass
class Workload:
    """The records of one value size: Python lists for send(), tables for send_arrow()."""

    value_size: int
    values: list[bytes]
    keys: list[bytes]
    table: pa.Table  # value column only
    keyed_table: pa.Table  # key and value columns

    @property
    def count(self) -> int:
        return len(self.values)

    @property
    def value_bytes(self) -> int:
        return self.count * self.value_size

    @property
    def key_bytes(self) -> int:
        return sum(map(len, self.keys))


def make_workload(value_size: int, count: int) -> Workload:
    pool = common.make_values(min(VALUE_POOL, count), value_size)
    values = [pool[i % len(pool)] for i in range(count)]
    key_pool = [b"key-%05d" % i for i in range(DISTINCT_KEYS)]
    keys = [key_pool[i % DISTINCT_KEYS] for i in range(count)]
    value_array = pa.array(values, type=pa.binary())
    return Workload(
        value_size,
        values,
        keys,
        pa.table({"value": value_array}),
        pa.table({"key": pa.array(keys, type=pa.binary()), "value": value_array}),
    )


# ---------------------------------------------------------------------------------------
# Helpers


class CountingSender(Sender):
    """A producer's Sender that counts the batches it ships (for the notes only)."""

    def __init__(self, *args: Any, **kwargs: Any):
        self.batches_sent = 0  # set before the thread starts
        self.batch_bytes = 0
        super().__init__(*args, **kwargs)

    def _dispatch(self, batch: Any) -> None:
        super()._dispatch(batch)
        self.batches_sent += 1
        if isinstance(batch.data, (bytes, bytearray)):
            self.batch_bytes += len(batch.data)


class CountingProducer(Producer):
    """A Producer whose sender counts the batches it ships (for the notes only)."""

    _sender_type = CountingSender

    @property
    def batches_sent(self) -> int:
        return self._sender.batches_sent

    @property
    def batch_bytes(self) -> int:
        return self._sender.batch_bytes


def new_producer(cluster: RaylogCluster, **config: Any) -> Producer:
    """A CountingProducer, or a plain Producer if the internals it relies on moved."""
    cls = CountingProducer if hasattr(Sender, "_dispatch") and hasattr(Producer, "_sender_type") else Producer
    return cls(cluster, **config)


def batch_note(producer: Producer, records: int) -> str:
    sent = getattr(producer, "batches_sent", 0)
    if not sent:
        return ""
    return f"{sent:,} batches, avg {records / sent:,.0f} rec / {producer.batch_bytes / sent / 1024:,.0f} KiB"


def uss_mb(pid: int) -> float:
    import psutil  # Ray's own copy (on the path once Ray is imported) if not installed

    return psutil.Process(pid).memory_full_info().uss / MB


# ---------------------------------------------------------------------------------------
# Actors of this benchmark (module level; shipped by value when imported, see run())


class FileActor:
    """Appends blobs to one file and reads byte ranges back: no format, no index."""

    def __init__(self, path: str):
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        self.size = 0

    def append(self, blob: bytes) -> int:
        position = self.size
        if os.write(self.fd, blob) != len(blob):
            raise OSError(f"short write to {self.path}")
        self.size += len(blob)
        return position

    def read(self, position: int, length: int) -> np.ndarray:
        return np.frombuffer(os.pread(self.fd, length, position), dtype=np.uint8)

    def reset(self) -> None:
        os.ftruncate(self.fd, 0)
        self.size = 0

    def close(self) -> None:
        os.close(self.fd)
        os.unlink(self.path)


class PlainActor:
    """Only imports the libraries a replica needs, to compare memory with."""

    def __init__(self, imports: bool):
        if imports:
            import lz4.frame  # noqa: F401
            import msgpack  # noqa: F401
            import pyarrow  # noqa: F401

    def pid(self) -> int:
        return os.getpid()

    def echo(self, value: bytes) -> int:
        """A no-op call: the latency baseline (as a threaded actor, as a replica is)."""
        return len(value)


# ---------------------------------------------------------------------------------------
# 4. Baselines


@dataclass
class Baseline:
    queue_put: float = 0.0  # records/s
    queue_get: float = 0.0
    file_append: float = 0.0
    file_read: float = 0.0


def queue_rows(work: Workload, label: str, scale: Scale) -> tuple[list[Row], float, float]:
    from ray.util.queue import Queue

    chunks = [work.values[i : i + QUEUE_BATCH] for i in range(0, work.count, QUEUE_BATCH)]
    queue = Queue(actor_options={"num_cpus": 0})
    try:
        get(queue.actor.qsize.remote(), scale.timeout_s, "queue actor start")  # start-up is not timed
        put_s, get_s = [], []
        for _ in range(scale.repeats):
            start = time.perf_counter()
            for chunk in chunks:
                queue.put_nowait_batch(chunk)
            put_s.append(time.perf_counter() - start)
            start, got = time.perf_counter(), 0
            while got < work.count:
                got += len(queue.get_nowait_batch(min(QUEUE_BATCH, work.count - got)))
            get_s.append(time.perf_counter() - start)
    finally:
        queue.shutdown(force=True)
    put, got = work.count / min(put_s), work.count / min(get_s)
    note = f"{work.count:,} records, {QUEUE_BATCH:,} per call"
    return (
        [
            Row(
                "throughput",
                f"baseline: Ray Queue put_nowait_batch, {label}",
                put,
                put * work.value_size / MB,
                note=note,
            ),
            Row(
                "throughput",
                f"baseline: Ray Queue get_nowait_batch, {label}",
                got,
                got * work.value_size / MB,
                note=note,
            ),
        ],
        put,
        got,
    )


def file_rows(work: Workload, label: str, scale: Scale, workdir: str) -> tuple[list[Row], float, float]:
    per_blob = BLOB_RECORDS[work.value_size]
    blobs = [record_batch.build(work.values[i : i + per_blob]) for i in range(0, work.count, per_blob)]
    total = sum(map(len, blobs))
    actor = ray.remote(FileActor).options(num_cpus=0).remote(os.path.join(workdir, f"file-{work.value_size}.bin"))
    try:
        append_s, read_s = [], []
        for _ in range(scale.repeats):
            get(actor.reset.remote(), scale.timeout_s, "file actor reset")
            start = time.perf_counter()
            positions, in_flight = [], []
            for blob in blobs:
                if len(in_flight) >= IN_FLIGHT:
                    positions.append(get(in_flight.pop(0), scale.timeout_s, "file actor append"))
                in_flight.append(actor.append.remote(blob))
            positions += get(in_flight, scale.timeout_s, "file actor append")
            append_s.append(time.perf_counter() - start)
            start, read = time.perf_counter(), 0
            for position, blob in zip(positions, blobs, strict=True):
                read += len(get(actor.read.remote(position, len(blob)), scale.timeout_s, "file actor read"))
            read_s.append(time.perf_counter() - start)
            if read != total:
                raise BenchError(f"file baseline read {read} bytes of {total}")
        get(actor.close.remote(), scale.timeout_s, "file actor close")
    finally:
        ray.kill(actor)
    append, read = work.count / min(append_s), work.count / min(read_s)
    note = f"{len(blobs)} blobs of {total / len(blobs) / MIB:.2f} MiB ({per_blob:,} records)"
    return (
        [
            Row(
                "throughput",
                f"baseline: actor os.write of ~1 MiB blobs, {label}",
                append,
                append * work.value_size / MB,
                note=note + f", {IN_FLIGHT} in flight",
            ),
            Row(
                "throughput",
                f"baseline: actor os.pread of the blobs, {label}",
                read,
                read * work.value_size / MB,
                note=note + ", 1 in flight, NumPy result",
            ),
        ],
        append,
        read,
    )


# ---------------------------------------------------------------------------------------
# 1. Produce and 2. consume


def timed_produce(
    cluster: RaylogCluster, topic: str, work: Workload, mode: str, timeout_s: float, acks: int | str = 1
) -> tuple[float, str]:
    """Seconds for one produce run of ``work`` in ``mode`` (send, send_keyed, arrow,
    arrow_keyed) by a fresh producer with ``acks``, and a note on batching; every record
    must be under the high watermarks afterwards."""
    before = high_watermarks(cluster, topic)
    producer = new_producer(cluster, acks=acks)
    try:
        send = producer.send
        start = time.perf_counter()
        if mode == "send":
            for value in work.values:
                send(topic, value)
        elif mode == "send_keyed":
            for key, value in zip(work.keys, work.values, strict=True):
                send(topic, value, key=key)
        else:
            future = producer.send_arrow(topic, work.keyed_table if mode == "arrow_keyed" else work.table)
        producer.flush(timeout=timeout_s)
        seconds = time.perf_counter() - start
        if mode.startswith("arrow"):
            future.result(timeout=timeout_s)  # raises the first failed batch's error
        note = batch_note(producer, work.count)
    finally:
        producer.close(timeout=timeout_s)
    written = high_watermarks(cluster, topic) - before
    if written != work.count:
        raise BenchError(
            f"{mode} to {topic} (acks={acks}): {written:,} records under the high watermarks, expected {work.count:,}"
        )
    return seconds, note


def timed_consume(cluster: RaylogCluster, topic: str, count: int, method: str, scale: Scale, **config: Any) -> float:
    """Seconds to read ``count`` records of ``topic`` from the start with ``method``."""
    consumer = Consumer(cluster, topic, auto_offset_reset="earliest", **config)
    try:
        got = 0
        start = time.perf_counter()
        deadline = start + scale.timeout_s
        if method == "poll_arrow":
            while got < count:
                got += consumer.poll_arrow(timeout_ms=1000).num_rows
                if time.perf_counter() > deadline:
                    break
        else:
            while got < count:
                got += sum(map(len, consumer.poll(timeout_ms=1000).values()))
                if time.perf_counter() > deadline:
                    break
        seconds = time.perf_counter() - start
    finally:
        consumer.close()
    if got < count:
        raise BenchError(f"{method} of {topic}: {got:,} of {count:,} records within {scale.timeout_s:.0f} s")
    return seconds


PRODUCE_MODES = (
    ("send", "send() per record, no key"),
    ("send_keyed", f"send() per record, {DISTINCT_KEYS} keys"),
    ("arrow", "send_arrow(table), no key"),
    ("arrow_keyed", f"send_arrow(table), {DISTINCT_KEYS} keys (extra)"),
)


def produce_target(mode: str, value_size: int) -> list[Target]:
    if mode == "send":
        return [Target("records_per_s", ">=", 500_000)]
    if mode == "send_keyed":
        return [Target("records_per_s", ">=", 400_000)]
    if mode == "arrow":
        return [Target("records_per_s", ">=", 1_500_000)] if value_size == 100 else [Target("mb_per_s", ">=", 400)]
    return []


class Runner(common.Phases):
    """Holds the cluster, the created topics and the rows; every phase appends rows."""

    tag = "client_bench"
    row_type = Row

    def __init__(self, cluster: RaylogCluster, scale: Scale, workdir: str):
        self.cluster = cluster
        self.admin = Admin(cluster)
        self.scale = scale
        self.workdir = workdir
        self.rows: list[Row] = []
        self.topics: list[str] = []
        self.baselines: dict[int, Baseline] = {}
        self.loaded_replica_pid: int | None = None
        self.bare_call_ms: float | None = None  # p50 round trip of a no-op call, 100 B

    # --- plumbing -------------------------------------------------------------------

    def create_topic(self, partitions: int) -> str:
        name = f"bench-{len(self.topics)}-{partitions}p-{uuid.uuid4().hex[:6]}"
        common.create_started(self.admin, [NewTopic(name, num_partitions=partitions, replication_factor=1)])
        self.topics.append(name)
        return name

    def delete_topic(self, name: str) -> None:
        if name in self.topics:
            self.topics.remove(name)
            self.admin.delete_topics([name])

    def delete_all(self) -> None:
        if self.topics:
            names, self.topics = list(self.topics), []
            self.admin.delete_topics(names)

    def replica_pid(self, topic: str) -> int:
        handles = get(self.cluster.controller.replica_handles.remote(topic), self.scale.timeout_s, "replica handles")
        handle = handles[(0, min(b for p, b in handles if p == 0))]
        return get(handle.state.remote(), self.scale.timeout_s, "replica state")["pid"]

    # --- 5. memory ----------------------------------------------------------------------

    def memory(self) -> None:
        topic = self.create_topic(1)
        plain = ray.remote(PlainActor).options(num_cpus=0).remote(True)
        bare = ray.remote(PlainActor).options(num_cpus=0).remote(False)
        try:
            pids = {
                "replica": self.replica_pid(topic),
                "plain": get(plain.pid.remote(), self.scale.timeout_s, "plain actor"),
                "bare": get(bare.pid.remote(), self.scale.timeout_s, "bare actor"),
            }
            time.sleep(2.0)  # let every process settle after start-up
            uss = {name: uss_mb(pid) for name, pid in pids.items()}
        finally:
            ray.kill(plain)
            ray.kill(bare)
            self.delete_topic(topic)
        self.rows += [
            Row(
                "memory",
                "idle replica actor (new 1-partition topic)",
                uss_mb=uss["replica"],
                ratio=uss["replica"] / uss["plain"],
                targets=[Target("uss_mb", "<=", 80)],
                note=f"pid {pids['replica']}; ratio over the plain actor below",
            ),
            Row("memory", "  plain actor importing pyarrow, lz4, msgpack", uss_mb=uss["plain"], ratio=1.0),
            Row("memory", "  bare Ray actor (no imports)", uss_mb=uss["bare"], ratio=uss["bare"] / uss["plain"]),
        ]
        self._plain_uss = uss["plain"]

    def loaded_memory(self) -> None:
        if self.loaded_replica_pid is None:
            raise BenchError("the loaded replica's pid is unknown (its phase failed)")
        uss = uss_mb(self.loaded_replica_pid)
        plain = getattr(self, "_plain_uss", None)
        self.rows.append(
            Row(
                "memory",
                "replica after its produce/consume runs (1 KiB, 1 partition)",
                uss_mb=uss,
                ratio=None if plain is None else uss / plain,
                note="idle again, data still held",
            )
        )

    # --- 4. baselines ---------------------------------------------------------------------

    def baselines_for(self, label: str, work: Workload) -> None:
        rows_q, put, got = queue_rows(work, label, self.scale)
        rows_f, append, read = file_rows(work, label, self.scale, self.workdir)
        self.baselines[work.value_size] = Baseline(put, got, append, read)
        self.rows += rows_q + rows_f

    # --- 1 and 2 ----------------------------------------------------------------------

    def throughput(self, label: str, work: Workload, partitions: int) -> None:
        base = self.baselines.get(work.value_size, Baseline())
        topic = self.create_topic(partitions)
        shape = f"{label}, {partitions} partition{'s' if partitions > 1 else ''}"
        try:
            for mode, title in PRODUCE_MODES:
                self.phase(
                    "throughput",
                    f"produce {title}, {shape}",
                    lambda mode=mode, title=title: self._produce(topic, work, mode, title, shape, base),
                )
                if mode == "send":
                    self.phase("throughput", f"consume, {shape}", lambda: self._consume(topic, work, shape, base))
            if work.value_size == 1024 and partitions == 1:
                self.loaded_replica_pid = self.replica_pid(topic)
        finally:
            if work.value_size == 1024 and partitions == 1:
                self.phase("memory", "replica after load", self.loaded_memory)
            self.delete_topic(topic)

    def _produce(self, topic: str, work: Workload, mode: str, title: str, shape: str, base: Baseline) -> None:
        seconds, note = common.best(
            partial(timed_produce, self.cluster, topic, work, mode, self.scale.timeout_s), self.scale.repeats
        )
        rate = work.count / seconds
        payload = work.value_bytes + (work.key_bytes if mode.endswith("keyed") else 0)
        self.rows.append(
            Row(
                "throughput",
                f"produce {title}, {shape}",
                rate,
                payload / seconds / MB,
                _ratio(rate, base.queue_put),
                _ratio(rate, base.file_append),
                targets=produce_target(mode, work.value_size),
                note=f"{work.count:,} rec; {note}" if note else f"{work.count:,} records",
            )
        )

    def _consume(self, topic: str, work: Workload, shape: str, base: Baseline) -> None:
        count = work.count
        variants = (
            ("poll_arrow", "poll_arrow(), 1 MiB fetches (default)", {}, 2_000_000),
            ("poll_arrow", "poll_arrow(), 8 MiB fetches", {"max_partition_fetch_bytes": BIG_FETCH_BYTES}, 2_000_000),
            ("poll", "poll() -> Records, max_poll_records=500", {}, 800_000),
        )
        for method, title, config, target in variants:

            def one(method=method, title=title, config=config, target=target) -> None:
                seconds = common.best(
                    partial(timed_consume, self.cluster, topic, count, method, self.scale, **config), self.scale.repeats
                )
                rate = count / seconds
                ref_q, ref_f = base.queue_get, base.file_read
                self.rows.append(
                    Row(
                        "throughput",
                        f"consume {title}, {shape}",
                        rate,
                        work.value_bytes / seconds / MB,
                        _ratio(rate, ref_q),
                        _ratio(rate, ref_f),
                        targets=[Target("records_per_s", ">=", target)],
                        note=f"{count:,} records of the send() no-key data, from offset 0",
                    )
                )

            self.phase("throughput", f"consume {title}, {shape}", one)

    # --- 3. latency -------------------------------------------------------------------

    def latency(self) -> None:
        self.phase("latency", "baseline: bare Ray actor call", self._bare_call)
        topic = self.create_topic(1)
        try:
            for rate in LATENCY_RATES:
                self.phase("latency", f"e2e latency at {rate:,} rec/s", lambda rate=rate: self._latency(topic, rate))
        finally:
            self.delete_topic(topic)

    def _bare_call(self) -> None:
        """Round trips of 100 B to a no-op method of a threaded actor, one at a time."""
        options = {"num_cpus": 0, "max_concurrency": MAX_CONCURRENCY}
        actor = ray.remote(PlainActor).options(**options).remote(True)
        payload = os.urandom(LATENCY_VALUE_BYTES)
        try:
            get([actor.echo.remote(payload) for _ in range(20)], self.scale.timeout_s, "bare actor start")
            samples = []
            for _ in range(BARE_CALLS):
                start = time.perf_counter_ns()
                ray.get(actor.echo.remote(payload))
                samples.append(time.perf_counter_ns() - start)
        finally:
            ray.kill(actor)
        latencies = np.sort(samples) / 1e6
        self.bare_call_ms = nearest_rank(latencies, 0.5)
        self.rows.append(
            Row(
                "latency",
                "baseline: bare Ray actor call, 100 B",
                p50_ms=self.bare_call_ms,
                p99_ms=nearest_rank(latencies, 0.99),
                p999_ms=nearest_rank(latencies, 0.999),
                max_ms=float(latencies[-1]),
                ratio=1.0,
                note=f"{BARE_CALLS:,} round trips one at a time, a no-op method of a threaded actor (as a replica is)",
            )
        )

    def _latency(self, topic: str, rate: int) -> None:
        scale = self.scale
        count = int(rate * (scale.warmup_seconds + scale.latency_seconds))
        send_s = scale.warmup_seconds + scale.latency_seconds
        actor = ray.remote(StampReader).options(num_cpus=0).remote(self.cluster, topic)
        producer = new_producer(self.cluster, acks=1, linger_ms=0)
        acks: list[tuple[int, int]] = []  # (send time_ns, acknowledged time_ns), from Ray's callback thread
        flush_note = ""
        try:
            consumer_pid = get(actor.ready.remote(), scale.timeout_s, "latency consumer start")
            leader = self.cluster.metadata(refresh=True).leader(raylog.TopicPartition(topic, 0))
            pids = {"leader": get(leader.state.remote(), scale.timeout_s, "leader state")["pid"]}
            pids.update(consumer=consumer_pid, producer=os.getpid())
            cpu_before = {name: common.cpu_seconds(pid) for name, pid in pids.items()}
            pending = actor.run.remote(count, scale.drain_seconds)
            time.sleep(0.2)  # the consumer is in its poll loop
            pad = b"x" * (LATENCY_VALUE_BYTES - 8)
            send, pack, clock = producer.send, struct.Struct(">q").pack, time.time_ns
            warm_until_ns = clock() + int(scale.warmup_seconds * 1e9)
            expected = 0  # records sent after the warm-up

            def send_stamped() -> None:
                nonlocal expected
                now = clock()
                send(topic, pack(now) + pad).add_done_callback(lambda _, now=now: acks.append((now, time.time_ns())))
                expected += now >= warm_until_ns

            elapsed = common.send_at_rate(count, rate, send_stamped)
            cpu = {name: (common.cpu_seconds(pid) - cpu_before[name]) / elapsed for name, pid in pids.items()}
            calls = batch_note(producer, count).split(" batches")[0]
            try:
                producer.flush(timeout=scale.drain_seconds)
            except KafkaTimeoutError:
                flush_note = f"; NOT all acknowledged {scale.drain_seconds:g} s after sending"
            sent_ns, recv_ns = get(pending, send_s + scale.drain_seconds + 30, "latency consumer")
        finally:
            producer.close(timeout=scale.timeout_s)
            ray.kill(actor)
        measured = (recv_ns - sent_ns)[sent_ns >= warm_until_ns] / 1e6
        missing = max(0, expected - len(measured))  # not received in time: counted as infinitely late
        latencies = np.sort(np.concatenate([measured, np.full(missing, np.inf)]))
        if len(latencies) == 0:
            raise BenchError("no record was sent after the warm-up")
        p50, p99, p999 = (nearest_rank(latencies, q) for q in (0.50, 0.99, 0.999))
        ack_ms = np.sort([(done - sent) / 1e6 for sent, done in list(acks) if sent >= warm_until_ns])
        ack = (
            f"; producer acks p50 {nearest_rank(ack_ms, 0.5):.1f} / p99 {nearest_rank(ack_ms, 0.99):.1f} ms"
            if len(ack_ms)
            else ""
        )
        drained = (recv_ns.max() - sent_ns.min()) / 1e9 if len(recv_ns) else float("nan")
        bare = self.bare_call_ms
        targets = []
        if rate in LATENCY_P99_MS and bare:
            targets = [Target("ratio", "<=", LATENCY_P50_BARE_CALLS), Target("p99_ms", "<=", LATENCY_P99_MS[rate])]
        self.rows.append(
            Row(
                "latency",
                f"e2e latency, 100 B, linger_ms=0, at {rate:,} rec/s",
                records_per_s=count / elapsed,
                p50_ms=p50,
                p99_ms=p99,
                p999_ms=p999,
                max_ms=float(latencies[-1]),
                ratio=p50 / bare if bare else None,
                targets=targets,
                note=(
                    f"{len(measured):,} of {expected:,} after warm-up"
                    + (f", {missing:,} not received (inf)" if missing else "")
                    + f"; all in {drained:.1f} s for {send_s:g} s of sending{ack}{flush_note}"
                    + f"; {calls} produce calls; CPU while sending, % of a core: "
                    + ", ".join(f"{name} {100 * share:.0f}" for name, share in cpu.items())
                ),
            )
        )


def _ratio(value: float, baseline: float) -> float | None:
    return value / baseline if baseline else None


# ---------------------------------------------------------------------------------------
# Output


TABLES = {
    "throughput": (
        (
            ("measurement", 66, None),
            ("records/s", 11, lambda r: number(r.records_per_s, ",.0f")),
            ("MB/s", 7, lambda r: number(r.mb_per_s, ",.0f")),
            ("x queue", 7, lambda r: times(r.vs_queue)),
            ("x file", 7, lambda r: times(r.vs_file)),
        ),
        16,
    ),
    "latency": (
        (
            ("measurement", 50, None),
            ("sent/s", 9, lambda r: number(r.records_per_s, ",.0f")),
            ("p50 ms", 7, lambda r: number(r.p50_ms, ".2f")),
            ("p99 ms", 7, lambda r: number(r.p99_ms, ".2f")),
            ("p99.9 ms", 8, lambda r: number(r.p999_ms, ".2f")),
            ("max ms", 7, lambda r: number(r.max_ms, ".1f")),
            ("p50 x bare", 10, lambda r: times(r.ratio)),
        ),
        34,
    ),
    "memory": (
        (
            ("measurement", 62, None),
            ("USS MB", 7, lambda r: number(r.uss_mb, ".1f")),
            ("ratio", 6, lambda r: times(r.ratio)),
        ),
        16,
    ),
}


def json_document(scale: Scale) -> dict[str, object]:
    return {
        "mode": scale.name,
        "statistic": f"best of {scale.repeats} runs (throughput)",
        "mb": MB,
        "records": {str(k): v for k, v in scale.records.items()},
        "durability": "acks=1, RF=1, no fsync",
    }


# ---------------------------------------------------------------------------------------
# Entry point


def run(scale: Scale, parent: str | None) -> list[Row]:
    """Every measurement on a fresh local Ray and raylog cluster, removed at the end."""
    with contextlib.ExitStack() as stack:
        workdir = common.temp_workdir(stack, "raylog-client-bench-", parent)
        common.start_local_ray(stack, ship=__name__)  # when imported, workers get this module's actors by value
        cluster = raylog.connect(data_dir=os.path.join(workdir, "data"), cluster_name=f"bench{uuid.uuid4().hex[:8]}")
        stack.callback(cluster.shutdown)
        runner = Runner(cluster, scale, workdir)
        stack.callback(runner.delete_all)
        runner.phase("memory", "idle replica memory", runner.memory)
        workloads = {size: make_workload(size, scale.records[size]) for _, size in SIZES}
        for label, size in SIZES:
            runner.phase(
                "throughput",
                f"baselines, {label}",
                lambda label=label, size=size: runner.baselines_for(label, workloads[size]),
            )
        for label, size in SIZES:
            for partitions in PARTITION_COUNTS:
                runner.phase(
                    "throughput",
                    f"throughput, {label}, {partitions} partitions",
                    lambda label=label, size=size, partitions=partitions: runner.throughput(
                        label, workloads[size], partitions
                    ),
                )
        workloads.clear()
        runner.phase("latency", "e2e latency", runner.latency)
        return runner.rows


def baselines_first(chosen: list[Row]) -> list[Row]:
    """Baseline rows first, then raylog rows in the order measured."""
    baselines = [r for r in chosen if r.name.startswith("baseline")]
    return baselines + [r for r in chosen if not r.name.startswith("baseline")]


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    args = common.bench_parser(__doc__, "a fast smoke run (< 60 s), for tests", prog).parse_args(argv)
    scale = QUICK if args.quick else FULL
    watch = common.RunWatch()
    rows = run(scale, args.dir)
    watch.stop()
    counts = ", ".join(f"{scale.records[size]:,} x {label}" for label, size in SIZES)
    print(
        f"raylog client benchmark, {scale.name} mode: embedded cluster, 1 broker, RF=1, acks=1, "
        "no fsync (page cache, Kafka's default)"
    )
    print(f"throughput: best of {scale.repeats} runs of {counts} records; MB = 10^6 bytes of values (+ keys)")
    print(
        "x queue / x file: records/s over the Ray Queue / actor + file baseline of the same record size "
        "(produce: put / append; consume: get / read)"
    )
    print("BELOW: target missed; ERROR: the measurement failed (see stderr)")
    common.print_tables(rows, TABLES, baselines_first)
    print()
    return common.finish(rows, watch, args.json, json_document(scale), "other work on the machine lowers every figure")


if __name__ == "__main__":
    common.run_script(main)
