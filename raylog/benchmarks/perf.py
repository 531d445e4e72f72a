"""Measurements behind ``raylog bench`` (Kafka's kafka-producer-perf-test,
kafka-consumer-perf-test and end-to-end latency tool), usable from Python too.

Three workloads, on a topic that is created for the run and deleted after it unless one
is named (a named topic must exist; it is never deleted):

- ``produce``: N records of S bytes from one :class:`~raylog.Producer`, timed from the
  first send to the last acknowledgement (``flush``). Acknowledgement latency is send to
  future done. With ``arrow`` the records go through ``Producer.send_arrow`` in chunks of
  about one batch (``batch_size`` bytes), the chunks spread over the partitions in turn;
  otherwise ``send()`` is called per record and the latency of every k-th record is kept
  (at most ``MAX_LATENCY_SAMPLES``). With ``sync`` one record is sent at a time and each is
  acknowledged before the next (latency without batching; use ``linger_ms=0``).
- ``consume``: N records read from the beginning by a new :class:`~raylog.Consumer`
  (``poll_arrow`` with ``arrow``, else ``poll``), timed from the first poll until N came
  back. A temporary topic is filled first with ``send_arrow``, untimed.
- ``e2e``: a consumer in a Ray actor (another process, on this node so both read the same
  clock) reads the topic from its end while this process produces N records whose values
  start with their send time (``time.time_ns()``, 8 bytes big-endian); a record's latency
  is its receive time minus that stamp.

After every produce run the partitions' high watermarks must have grown by N (waited for
up to the timeout: with ``acks`` 0 or 1 followers may still be fetching). Values are random
capital letters, as kafka-producer-perf-test's are. Percentiles are nearest-rank; MB is
10^6 bytes of values. A ``throughput_records_per_s`` cap paces the sending (open loop).

Concurrency: every function runs on the calling thread; one run at a time per producer.

Example:
    >>> report = run(cluster, BenchConfig("produce", num_records=100_000, arrow=True))  # doctest: +SKIP
    >>> report["produce"]["records_per_s"]                                              # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import struct
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from raylog.clients.admin import Admin
from raylog.clients.cluster import RaylogCluster
from raylog.clients.consumer import Consumer
from raylog.clients.producer import RECORD_OVERHEAD_BYTES, Producer
from raylog.common import compression as codecs
from raylog.errors import InvalidConfigError, KafkaTimeoutError, RaylogError
from raylog.types import NewTopic, TopicPartition

WORKLOADS = ("produce", "consume", "e2e")
#: The producer's own default ``batch_size`` (its keyword's default), for chunking send_arrow.
PRODUCER_BATCH_SIZE: int = inspect.signature(Producer).parameters["batch_size"].default
MB = 1_000_000
#: Acknowledgement latencies kept per ``send()`` run: every k-th record, k = N // this.
MAX_LATENCY_SAMPLES = 20_000
#: The send time at the start of an e2e record's value (big-endian int64 nanoseconds).
STAMP = struct.Struct(">q")
#: Takes a progress bar's text (e.g. to redraw a status line in place).
Show = Callable[[str], object]
#: How often the progress bar is rebuilt.
PROGRESS_INTERVAL_S = 0.2
#: The longest single poll of a consume run (it checks its timeout between polls).
POLL_MS = 500
#: How often a run waits between looks at the high watermarks.
WATERMARK_CHECK_S = 0.05


class BenchmarkError(RaylogError):
    """A run's records did not all arrive where they should (none lost is a precondition
    of every figure)."""


@dataclass(frozen=True)
class BenchConfig:
    """One ``raylog bench`` run.

    Args:
        workload: "produce", "consume" or "e2e".
        num_records: records to send (or read).
        record_size_bytes: bytes of each value (at least 8 for e2e: the send-time stamp).
        topic: an existing topic to use; None for a temporary one.
        num_partitions, replication_factor: of the temporary topic.
        acks, batch_size, linger_ms, compression: the producer's settings (None: the
            producer's default; linger_ms 0 with ``sync``).
        arrow: send with ``send_arrow`` and read with ``poll_arrow``.
        sync: produce only: one record at a time, each acknowledged before the next.
        throughput_records_per_s: cap on the send rate (None: as fast as possible).
        timeout_ms: how long a run may wait for acknowledgements or records.

    Raises:
        InvalidConfigError: a value out of range or options that do not go together.
    """

    workload: str
    num_records: int = 100_000
    record_size_bytes: int = 100
    topic: str | None = None
    num_partitions: int = 1
    replication_factor: int = 1
    acks: str = "all"
    batch_size: int | None = None
    linger_ms: int | None = None
    compression: str | None = None
    arrow: bool = False
    sync: bool = False
    throughput_records_per_s: float | None = None
    timeout_ms: int = 60_000

    def __post_init__(self) -> None:
        def require(condition: bool, message: str) -> None:
            if not condition:
                raise InvalidConfigError(f"bench: {message}")

        require(self.workload in WORKLOADS, f"workload must be one of {', '.join(WORKLOADS)}, got {self.workload!r}")
        for name in ("num_records", "record_size_bytes", "num_partitions", "replication_factor"):
            require(getattr(self, name) >= 1, f"{name} must be >= 1, got {getattr(self, name)}")
        require(self.batch_size is None or self.batch_size >= 1, f"batch_size must be >= 1, got {self.batch_size}")
        require(self.timeout_ms >= 0, f"timeout_ms must be >= 0, got {self.timeout_ms}")
        codecs.codec_id(self.compression)  # raises InvalidConfigError for an unknown codec
        require(
            self.workload != "e2e" or self.record_size_bytes >= STAMP.size,
            f"e2e needs record_size_bytes >= {STAMP.size} (the send-time stamp)",
        )
        require(not self.sync or self.workload == "produce", "sync is for the produce workload")
        require(not (self.sync and self.arrow), "sync sends one record at a time: not with arrow")
        require(
            self.throughput_records_per_s is None or self.throughput_records_per_s > 0,
            "throughput_records_per_s must be > 0",
        )

    @property
    def timeout_s(self) -> float:
        return self.timeout_ms / 1000

    @property
    def chunk_records(self) -> int:
        """Records per ``send_arrow`` call: one batch's worth."""
        return batch_records(self.record_size_bytes, self.batch_size)

    def producer(self, cluster: RaylogCluster) -> Producer:
        """A producer with this run's settings."""
        settings = {"batch_size": self.batch_size, "linger_ms": 0 if self.sync else None}
        if self.linger_ms is not None:
            settings["linger_ms"] = self.linger_ms
        chosen = {k: v for k, v in settings.items() if v is not None}
        return Producer(cluster, acks=self.acks, compression=self.compression, **chosen)


# --- results ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Latency:
    """Percentiles of a set of latencies (nearest-rank), in milliseconds."""

    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    samples: int

    @classmethod
    def of(cls, latencies_ms: np.ndarray) -> Latency | None:
        """The percentiles of ``latencies_ms`` (None when empty)."""
        if len(latencies_ms) == 0:
            return None
        ordered = np.sort(latencies_ms)
        p50, p95, p99 = (nearest_rank(ordered, q) for q in (0.50, 0.95, 0.99))
        return cls(p50, p95, p99, float(ordered[-1]), len(ordered))

    def text(self) -> str:
        return f"p50 {self.p50_ms:.2f} ms, p95 {self.p95_ms:.2f} ms, p99 {self.p99_ms:.2f} ms, max {self.max_ms:.2f} ms"


@dataclass(frozen=True)
class Throughput:
    """``records`` (of ``value_bytes`` bytes of values in all) moved in ``seconds``."""

    records: int
    value_bytes: int
    seconds: float

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else float("inf")

    @property
    def mb_per_s(self) -> float:
        return self.value_bytes / MB / self.seconds if self.seconds > 0 else float("inf")

    def to_json(self, **latencies: Latency | None) -> dict[str, Any]:
        """The figures as JSON items, with each given latency under its name."""
        out: dict[str, Any] = {
            "records": self.records,
            "value_bytes": self.value_bytes,
            "seconds": self.seconds,
            "records_per_s": self.records_per_s,
            "mb_per_s": self.mb_per_s,
        }
        for name, latency in latencies.items():
            out[name] = None if latency is None else dataclasses.asdict(latency)
        return out


def nearest_rank(ordered: np.ndarray, q: float) -> float:
    """The ``q`` quantile of sorted values by the nearest-rank rule (defined with inf in them)."""
    if len(ordered) == 0:
        return float("nan")
    return float(ordered[min(len(ordered) - 1, max(0, int(np.ceil(q * len(ordered))) - 1))])


# --- inputs -----------------------------------------------------------------------------


def make_values(count: int, size_bytes: int, seed: int = 0) -> np.ndarray:
    """``count`` values of ``size_bytes`` random capital letters, one per row of a
    C-contiguous ``uint8`` matrix."""
    rng = np.random.default_rng(seed)
    return rng.integers(ord("A"), ord("Z") + 1, size=(count, size_bytes), dtype=np.uint8)


def binary_array(rows: np.ndarray) -> pa.Array:
    """The rows of a ``uint8`` matrix as an Arrow binary array, sharing its memory."""
    count, size = rows.shape
    rows = np.ascontiguousarray(rows)
    offsets = np.arange(0, (count + 1) * size, size, dtype=np.int32)
    return pa.Array.from_buffers(pa.binary(), count, [None, pa.py_buffer(offsets), pa.py_buffer(rows)])


def leading_int64(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """The big-endian int64 in the first 8 bytes of each value of a binary column."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if array.type not in (pa.binary(), pa.large_binary()):
        array = array.cast(pa.binary())
    width = 8 if array.type == pa.large_binary() else 4
    _, offsets_buf, data_buf = array.buffers()
    offsets = np.frombuffer(
        offsets_buf, dtype=np.int64 if width == 8 else np.int32, count=len(array) + 1, offset=array.offset * width
    )
    data = np.frombuffer(data_buf, dtype=np.uint8)
    return data[offsets[:-1, None] + np.arange(8)].copy().view(">i8").ravel().astype(np.int64)


def batch_records(record_size_bytes: int, batch_size: int | None = None) -> int:
    """Unkeyed records of ``record_size_bytes`` that fill one producer batch of
    ``batch_size`` bytes (None: the producer's default)."""
    return max(1, (batch_size or PRODUCER_BATCH_SIZE) // (record_size_bytes + RECORD_OVERHEAD_BYTES))


# --- progress and pacing ----------------------------------------------------------------


class Progress:
    """A progress bar of one phase of a run, handed as text to ``show`` (e.g. a status line
    redrawn in place) at most every ``PROGRESS_INTERVAL_S``; with no ``show``, nothing."""

    WIDTH = 30

    def __init__(self, label: str, total: int, show: Show | None):
        self.label, self.total, self.show = label, total, show
        self.start = time.perf_counter()
        self.drawn_at = 0.0

    def update(self, done: int) -> None:
        if self.show is None:
            return
        now = time.perf_counter()
        if now - self.drawn_at < PROGRESS_INTERVAL_S and done < self.total:
            return
        self.drawn_at = now
        filled = self.WIDTH * done // max(1, self.total)
        rate = done / (now - self.start) if now > self.start else 0.0
        self.show(
            f"{self.label} [{'#' * filled}{'.' * (self.WIDTH - filled)}] "
            f"{100 * done // max(1, self.total):3d}% {done:,}/{self.total:,} records, {rate:,.0f}/s"
        )


class _Pacer:
    """Open-loop pacing: ``wait(sent)`` sleeps until ``sent`` records are due."""

    def __init__(self, records_per_s: float | None):
        self.rate = records_per_s
        self.start = time.perf_counter()

    def wait(self, sent: int) -> None:
        if self.rate is not None:
            delay = self.start + sent / self.rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)


# --- produce ----------------------------------------------------------------------------


def produce(
    producer: Producer,
    topic: str,
    values: np.ndarray,
    *,
    arrow: bool = False,
    chunk_records: int = 10_000,
    throughput_records_per_s: float | None = None,
    stamp: bool = False,
    timeout_s: float = 60.0,
    progress: Progress | None = None,
) -> tuple[Throughput, Latency | None]:
    """Send every row of ``values`` to ``topic`` and wait for every acknowledgement.

    Args:
        producer: configured as the run wants (acks, batching, compression).
        values: a ``uint8`` matrix, one value per row (see :func:`make_values`).
        arrow: ``send_arrow`` chunks of ``chunk_records`` rows, else ``send()`` per row.
        stamp: write the send time over each value's first 8 bytes (for e2e).
        timeout_s: how long the final flush may wait.

    Returns:
        The throughput (first send to last acknowledgement) and the acknowledgement latency.

    Raises:
        KafkaTimeoutError: not all acknowledged within ``timeout_s`` after the last send.
        RaylogError: a record failed (the first error seen).
    """
    if arrow:
        return _produce_arrow(
            producer, topic, values, chunk_records, throughput_records_per_s, stamp, timeout_s, progress
        )
    return _produce_records(producer, topic, values, throughput_records_per_s, stamp, timeout_s, progress)


def _produce_records(
    producer: Producer,
    topic: str,
    values: np.ndarray,
    rate: float | None,
    stamp: bool,
    timeout_s: float,
    progress: Progress | None,
) -> tuple[Throughput, Latency | None]:
    count, size = values.shape
    payloads = [row.tobytes() for row in (values[:, STAMP.size :] if stamp else values)]
    stride = max(1, count // MAX_LATENCY_SAMPLES)
    acked: list[tuple[float, float]] = []  # (sent, acknowledged) perf_counter of each sampled record
    sampled = []
    send, clock, pack = producer.send, time.perf_counter, STAMP.pack
    pacer = _Pacer(rate)
    start = clock()
    for first in range(0, count, stride):
        chunk = payloads[first : first + stride]
        if stamp:
            chunk = [pack(time.time_ns()) + p for p in chunk]
        sent_at = clock()
        future = send(topic, chunk[0])
        future.add_done_callback(lambda _, sent_at=sent_at: acked.append((sent_at, clock())))
        sampled.append(future)
        for value in chunk[1:]:
            send(topic, value)
        if progress is not None:
            progress.update(first + len(chunk))
        pacer.wait(first + len(chunk))
    producer.flush(timeout=timeout_s)
    seconds = clock() - start
    for future in sampled:
        error = future.exception()
        if error is not None:
            raise error
    _await_callbacks(acked, len(sampled), timeout_s)
    latencies = np.array([(done - sent) * 1000 for sent, done in acked])
    return Throughput(count, count * size, seconds), Latency.of(latencies)


def _produce_arrow(
    producer: Producer,
    topic: str,
    values: np.ndarray,
    chunk_records: int,
    rate: float | None,
    stamp: bool,
    timeout_s: float,
    progress: Progress | None,
) -> tuple[Throughput, Latency | None]:
    count, size = values.shape
    partitions = len(producer.partitions_for(topic))
    bounds = list(range(0, count, chunk_records))
    # Built before the clock starts (zero-copy views), unless each needs its stamp.
    tables = None if stamp else [pa.table({"value": binary_array(values[lo : lo + chunk_records])}) for lo in bounds]
    acked: list[tuple[float, float, int]] = []  # (sent, acknowledged, records) per chunk
    futures = []
    clock = time.perf_counter
    pacer = _Pacer(rate)
    start = clock()
    for i, lo in enumerate(bounds):
        if tables is None:
            rows = values[lo : lo + chunk_records].copy()
            rows[:, : STAMP.size] = np.frombuffer(STAMP.pack(time.time_ns()), dtype=np.uint8)
            table = pa.table({"value": binary_array(rows)})
        else:
            table = tables[i]
        sent_at = clock()
        # An explicit partition per chunk: one send_arrow call's rows stick to one partition.
        future = producer.send_arrow(topic, table, partition=i % partitions)
        future.add_done_callback(lambda _, sent_at=sent_at, n=table.num_rows: acked.append((sent_at, clock(), n)))
        futures.append(future)
        if progress is not None:
            progress.update(lo + table.num_rows)
        pacer.wait(lo + table.num_rows)
    producer.flush(timeout=timeout_s)
    seconds = clock() - start
    for future in futures:
        future.result(timeout=timeout_s)  # raises the first failed batch's error
    _await_callbacks(acked, len(futures), timeout_s)
    latencies = np.concatenate([np.full(n, (done - sent) * 1000) for sent, done, n in acked]) if acked else []
    return Throughput(count, count * size, seconds), Latency.of(np.asarray(latencies))


def _await_callbacks(acked: list, expected: int, timeout_s: float) -> None:
    """Wait for the done callbacks still running: a future reports done just before its
    callbacks run, so ``flush`` may return first.

    Raises:
        KafkaTimeoutError: they did not all run within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while len(acked) < expected:
        if time.monotonic() >= deadline:
            raise KafkaTimeoutError(f"{expected - len(acked)} acknowledgement callbacks did not run in {timeout_s:g} s")
        time.sleep(0.001)


def produce_one_by_one(
    producer: Producer,
    topic: str,
    values: np.ndarray,
    *,
    timeout_s: float = 60.0,
    progress: Progress | None = None,
) -> tuple[Throughput, Latency | None]:
    """Send the rows of ``values`` one at a time, each acknowledged before the next.

    Returns:
        The throughput and the latency of every acknowledgement.

    Raises:
        KafkaTimeoutError: a record not acknowledged within ``timeout_s``.
        RaylogError: a record failed.
    """
    send = producer.send
    return one_by_one(
        [row.tobytes() for row in values], lambda value: send(topic, value).result(timeout=timeout_s), progress
    )


def one_by_one(
    payloads: list[bytes], send_and_wait: Callable[[bytes], object], progress: Progress | None = None
) -> tuple[Throughput, Latency | None]:
    """Call ``send_and_wait`` on each payload in turn (it returns once the payload is
    acknowledged); the throughput and the latency of each call."""
    latencies = np.empty(len(payloads))
    clock = time.perf_counter
    start = clock()
    for i, payload in enumerate(payloads):
        sent_at = clock()
        send_and_wait(payload)
        latencies[i] = (clock() - sent_at) * 1000
        if progress is not None:
            progress.update(i + 1)
    return Throughput(len(payloads), sum(map(len, payloads)), clock() - start), Latency.of(latencies)


# --- consume ----------------------------------------------------------------------------


def consume(
    consumer: Consumer, count: int, *, arrow: bool = False, timeout_s: float = 60.0, progress: Progress | None = None
) -> Throughput:
    """Poll ``consumer`` until ``count`` records came back.

    Returns:
        The throughput from the first poll to the last record.

    Raises:
        KafkaTimeoutError: ``timeout_s`` passed without a record before ``count`` arrived.
    """
    got = value_bytes = 0
    clock = time.perf_counter
    start = idle_since = clock()
    while got < count:
        wanted = count - got
        if arrow:
            table = consumer.poll_arrow(timeout_ms=POLL_MS, max_records=wanted)
            n = table.num_rows
            if n:
                value_bytes += pc.sum(pc.binary_length(table.column("value"))).as_py() or 0
        else:
            records = [r for rs in consumer.poll(timeout_ms=POLL_MS, max_records=wanted).values() for r in rs]
            n = len(records)
            value_bytes += sum(len(r.value) for r in records if r.value is not None)
        got += n
        now = clock()
        if n:
            idle_since = now
            if progress is not None:
                progress.update(got)
        elif now - idle_since >= timeout_s:
            raise KafkaTimeoutError(f"consumed {got:,} of {count:,} records: none came for {timeout_s:g} s")
    return Throughput(got, value_bytes, clock() - start)


# --- end to end -------------------------------------------------------------------------


class StampReader:
    """Reads one topic from its end (in a Ray actor) and notes each record's receive time
    next to the send time stamped at the start of its value."""

    def __init__(self, cluster: RaylogCluster, topic: str):
        self.consumer = Consumer(cluster, topic, auto_offset_reset="latest", fetch_max_wait_ms=POLL_MS)

    def ready(self) -> int:
        """Resolve the start positions and put the first fetches in flight; the pid."""
        self.consumer.poll_arrow(timeout_ms=0)
        return os.getpid()

    def run(self, expected: int, idle_timeout_s: float) -> tuple[np.ndarray, np.ndarray]:
        """(send time_ns, receive time_ns) of each record, until ``expected`` arrived or
        none came for ``idle_timeout_s``."""
        sent, received, got = [], [], 0
        idle_since = time.monotonic()
        while got < expected and time.monotonic() - idle_since < idle_timeout_s:
            table = self.consumer.poll_arrow(timeout_ms=100)
            now = time.time_ns()
            if table.num_rows:
                stamps = leading_int64(table.column("value"))
                sent.append(stamps)
                received.append(np.full(len(stamps), now, dtype=np.int64))
                got += len(stamps)
                idle_since = time.monotonic()
        self.consumer.close()
        if not sent:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        return np.concatenate(sent), np.concatenate(received)


def end_to_end(
    cluster: RaylogCluster,
    producer: Producer,
    topic: str,
    values: np.ndarray,
    *,
    arrow: bool = False,
    chunk_records: int = 10_000,
    throughput_records_per_s: float | None = None,
    timeout_s: float = 60.0,
    progress: Progress | None = None,
) -> tuple[Throughput, Latency | None, Throughput, Latency]:
    """Produce stamped ``values`` while a consumer in another process reads them.

    Returns:
        (produce throughput, acknowledgement latency, delivery throughput from the first
        send to the last receive, end-to-end latency).

    Raises:
        BenchmarkError: the reader saw no record for ``timeout_s`` before all arrived.
    """
    count, size = values.shape
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)
    reader = ray.remote(StampReader).options(num_cpus=0, scheduling_strategy=here).remote(cluster, topic)
    try:
        ray.get(reader.ready.remote(), timeout=timeout_s)
        pending = reader.run.remote(count, timeout_s)
        sent_total, ack_latency = produce(
            producer,
            topic,
            values,
            arrow=arrow,
            chunk_records=chunk_records,
            throughput_records_per_s=throughput_records_per_s,
            stamp=True,
            timeout_s=timeout_s,
            progress=progress,
        )
        sent_ns, received_ns = ray.get(pending)
    finally:
        ray.kill(reader)
    if len(sent_ns) < count:
        raise BenchmarkError(f"e2e: {len(sent_ns):,} of {count:,} records arrived (then none for {timeout_s:g} s)")
    delivered = Throughput(len(sent_ns), len(sent_ns) * size, (received_ns.max() - sent_ns.min()) / 1e9)
    return sent_total, ack_latency, delivered, Latency.of((received_ns - sent_ns) / 1e6)


# --- a whole run ------------------------------------------------------------------------


def run(cluster: RaylogCluster, config: BenchConfig, show_progress: Show | None = None) -> dict[str, Any]:
    """One benchmark run as ``config`` says, on a temporary topic unless it names one.

    Args:
        show_progress: called with a progress bar's text now and then (e.g. to redraw a
            status line); None: no progress.

    Returns:
        The report (what ``raylog bench ... --json`` prints): the settings, then
        ``produce``/``consume`` throughputs with ``ack_latency_ms`` and ``e2e_latency_ms``.

    Raises:
        UnknownTopicOrPartitionError: a named topic that does not exist.
        BenchmarkError, KafkaTimeoutError, RaylogError: the run failed.
    """
    admin = Admin(cluster)
    topic = config.topic or f"raylog-bench-{uuid.uuid4().hex[:8]}"
    if config.topic is None:
        admin.create_topics([NewTopic(topic, config.num_partitions, config.replication_factor)])
        # Untimed: its replicas start in the background (a process each), all in its ISR.
        admin.await_leaders([topic], int(config.timeout_s * 1000), followers=True)
    try:
        report: dict[str, Any] = dataclasses.asdict(config)
        report.update(
            topic=topic,
            temporary_topic=config.topic is None,
            num_partitions=cluster.metadata(refresh=True).num_partitions(topic),
        )
        report.update(_RUNS[config.workload](cluster, config, topic, show_progress))
        return report
    finally:
        if config.topic is None:
            admin.delete_topics([topic])


def _run_produce(cluster: RaylogCluster, config: BenchConfig, topic: str, show: Show | None) -> dict:
    values = make_values(config.num_records, config.record_size_bytes)
    before = high_watermarks(cluster, topic)
    producer = config.producer(cluster)
    progress = Progress("produce", config.num_records, show)
    try:
        if config.sync:
            result, latency = produce_one_by_one(producer, topic, values, timeout_s=config.timeout_s, progress=progress)
        else:
            result, latency = produce(
                producer,
                topic,
                values,
                arrow=config.arrow,
                chunk_records=config.chunk_records,
                throughput_records_per_s=config.throughput_records_per_s,
                timeout_s=config.timeout_s,
                progress=progress,
            )
    finally:
        producer.close(timeout=config.timeout_s)
    wait_for_records(cluster, topic, before + config.num_records, config.timeout_s)
    return {"produce": result.to_json(ack_latency_ms=latency)}


def _run_consume(cluster: RaylogCluster, config: BenchConfig, topic: str, show: Show | None) -> dict:
    if config.topic is None:
        producer = config.producer(cluster)
        progress = Progress("fill (not timed)", config.num_records, show)
        try:
            produce(
                producer,
                topic,
                make_values(config.num_records, config.record_size_bytes),
                arrow=True,
                chunk_records=config.chunk_records,
                timeout_s=config.timeout_s,
                progress=progress,
            )
        finally:
            producer.close(timeout=config.timeout_s)
        wait_for_records(cluster, topic, config.num_records, config.timeout_s)
    consumer = Consumer(cluster, topic, auto_offset_reset="earliest")
    progress = Progress("consume", config.num_records, show)
    try:
        result = consume(
            consumer, config.num_records, arrow=config.arrow, timeout_s=config.timeout_s, progress=progress
        )
    finally:
        consumer.close()
    return {"consume": result.to_json()}


def _run_e2e(cluster: RaylogCluster, config: BenchConfig, topic: str, show: Show | None) -> dict:
    values = make_values(config.num_records, config.record_size_bytes)
    producer = config.producer(cluster)
    progress = Progress("e2e", config.num_records, show)
    try:
        sent, ack_latency, delivered, latency = end_to_end(
            cluster,
            producer,
            topic,
            values,
            arrow=config.arrow,
            chunk_records=config.chunk_records,
            throughput_records_per_s=config.throughput_records_per_s,
            timeout_s=config.timeout_s,
            progress=progress,
        )
    finally:
        producer.close(timeout=config.timeout_s)
    return {
        "produce": sent.to_json(ack_latency_ms=ack_latency),
        "consume": delivered.to_json(),
        "e2e_latency_ms": dataclasses.asdict(latency),
    }


_RUNS: dict[str, Callable[[RaylogCluster, BenchConfig, str, Show | None], dict]] = {
    "produce": _run_produce,
    "consume": _run_consume,
    "e2e": _run_e2e,
}


def high_watermarks(cluster: RaylogCluster, topic: str) -> int:
    """The sum of the high watermarks of every partition of ``topic``."""
    count = cluster.metadata(refresh=True).num_partitions(topic)
    consumer = Consumer(cluster)
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(count)])
        return sum(consumer.end_offsets(consumer.assignment()).values())
    finally:
        consumer.close()


def wait_for_records(cluster: RaylogCluster, topic: str, expected: int, timeout_s: float) -> None:
    """Wait until ``topic``'s high watermarks add up to at least ``expected``.

    Raises:
        BenchmarkError: they did not within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while (found := high_watermarks(cluster, topic)) < expected:
        if time.monotonic() >= deadline:
            raise BenchmarkError(
                f"{topic}: {found:,} records under the high watermarks after {timeout_s:g} s, expected {expected:,}"
            )
        time.sleep(WATERMARK_CHECK_S)


# --- text report ------------------------------------------------------------------------


def format_report(report: dict[str, Any]) -> str:
    """The report as text, one line per measurement (like Kafka's perf tools)."""
    settings = (
        f"{report['workload']} on {report['topic']!r}{' (temporary)' if report['temporary_topic'] else ''}: "
        f"{report['num_partitions']} partition(s), RF {report['replication_factor']}, acks={report['acks']}, "
        f"{report['record_size_bytes']} B records, "
        f"{'send_arrow/poll_arrow' if report['arrow'] else 'send()/poll()'}"
        f"{', one at a time' if report['sync'] else ''}, compression={report['compression'] or 'none'}"
    )
    lines = [settings]
    for section in ("produce", "consume"):
        if section in report:
            lines.append(_throughput_line(section, report[section]))
    if "e2e_latency_ms" in report:
        lines.append(f"end-to-end latency: {Latency(**report['e2e_latency_ms']).text()}")
    return "\n".join(lines)


def _throughput_line(section: str, figures: dict[str, Any]) -> str:
    verb = {"produce": "sent", "consume": "consumed"}[section]
    line = (
        f"{figures['records']:,} records {verb} in {figures['seconds']:.2f} s: "
        f"{figures['records_per_s']:,.0f} records/s ({figures['mb_per_s']:,.2f} MB/s)"
    )
    if figures.get("ack_latency_ms"):
        line += f"; ack latency {Latency(**figures['ack_latency_ms']).text()}"
    return line
