"""Benchmark of many partitions per node: start-up, memory, idle CPU and throughput of N
partitions (one Ray actor process per replica) on one machine, against bare Ray actors
measured in the same run.

Set-up: a local Ray started here (``ray.init(address="local")`` with the embedded default's
settings: a 512 MiB object store, no dashboard). RF1: one embedded raylog broker
(``raylog.connect(data_dir=...)``); RF3: afterwards, in the same Ray, an embedded cluster of
three brokers on this node (``num_brokers=3``). Data in a temporary directory; every topic
is deleted after it was measured (and its processes gone before the next count starts).
A fixed set of 8 bare Ray actors (``num_cpus=0``, threaded as a replica is: ``max_concurrency``
of ``raylog.actors.replica.MAX_CONCURRENCY``; a ``ready()`` returning the pid, no
imports) stays alive for the whole run: the memory and idle-CPU baseline.

For each partition count N (``--counts``, RF1; ``--rf3-counts``, RF3), in this order:

1. Start-up (``time.perf_counter``): N bare Ray actors created at once, from the first
   ``.remote()`` until ``ray.get`` of every ``ready()`` returned (then killed, and their
   processes gone, before raylog starts); then ``Admin.create_topics([NewTopic(topic, N,
   rf)], wait_for_leaders_ms=...)`` from the call until it returns, i.e. until every
   partition has a leader actor that answered. Ratio: leaders time over bare time of N actors (for RF3
   too: leaders start first, followers after them; the note gives when all N x rf replicas
   answered). Targets: ratio <= 1.3 at 128 RF1 partitions; no timeout (600 s) at 256.
2. Idle memory, a few seconds after every replica answered: mean USS (``psutil ...
   memory_full_info().uss``) of the N x rf replica processes against the mean USS of the 8
   bare actors, read at the same moment. Target ratio <= 1.2.
3. Idle CPU: user + system CPU time (``psutil cpu_times``) of all N x rf replica processes
   over ``--idle-s`` seconds, as % of one core, next to the bare actors' over the same
   window, per actor x N x rf (what Ray alone costs that many processes). Targets: 128 RF1
   replicas <= 5%, 32 RF3 partitions (96 replicas on 3 brokers) <= 15%.
4. Throughput: 1M records of 100 B (``make_values``) in one pre-built pyarrow table with
   only a ``value`` column, sent S times with ``send_arrow`` by a fresh
   ``Producer(acks=1)`` (batches as large as a request may be, up to 8 MiB, one partition after
   the other), timed from the first call until ``flush()`` returned, then (untimed) checked
   against the high watermarks, which with RF3 and acks=1 move once the followers fetched
   the records; then read by a fresh ``Consumer(topic, auto_offset_reset="earliest")`` with
   ``poll_arrow`` until all S x 1M records arrived (``client_bench.timed_consume``). S is the
   same for every count of an RF: enough for every partition of its largest count to get a
   full batch (RF1 to 256: S = 21), so that each count is measured with data in all its
   partitions and the same load. The note says how many partitions got records. Ratio:
   records/s over a 6-partition topic of the same RF and load measured in the same run.
   Target: ratio >= 0.8 at 64 RF1 partitions, produce and consume. Beside each RF1 count,
   the floor of that ratio: as many fresh bare threaded actors answering 320 calls of a full
   batch's size (6.5 MB, NumPy, out of band), in turn, 7 in flight (what a consumer's
   default ``fetch_max_bytes`` holds), over 6 bare actors doing the same.
5. Loaded memory: the replicas' mean USS after that load and ``--idle-s`` seconds idle (the
   CPU of that idle window is shown too), against the bare actors'. Target ratio <= 1.5.

A count whose processes would not fit in the available memory is refused (ERROR row).
MB is 10^6 bytes.

``--replica-fetch-wait-ms`` sets the RF3 topics' ``replica.fetch.wait.max.ms`` (Kafka's 500
by default): how long an idle follower's fetch waits at its leader, so how often it calls.

Usage (or ``python -m raylog.benchmarks.density_bench``)::

    raylog bench density [--quick] [--json PATH] [--dir PARENT]
        [--counts 1,16,64,128,256] [--rf3-counts 1,16,32,64] [--idle-s 30]
        [--replica-fetch-wait-ms 500]
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import ray

import raylog
from raylog import Admin, Consumer, NewTopic
from raylog.actors.replica import MAX_CONCURRENCY
from raylog.benchmarks import common
from raylog.benchmarks.client_bench import Workload, batch_note, make_workload, new_producer, timed_consume, uss_mb
from raylog.benchmarks.common import MB, BenchError, get, number, times
from raylog.benchmarks.perf import high_watermarks, wait_for_records
from raylog.clients.cluster import RaylogCluster
from raylog.config import LogConfig
from raylog.types import TopicPartition

VALUE_BYTES = 100
REFERENCE_PARTITIONS = 6
#: Bare actors kept alive for the whole run: the memory and idle-CPU baseline.
BASELINE_ACTORS = 8
#: Memory left free when deciding whether a count fits.
RESERVE_MB = 2_000
#: Assumed USS of a replica until one was measured.
GUESS_REPLICA_MB = 120.0
#: The bare actors' fetch floor (RF1 counts): calls of a full batch's size, in turn, with as
#: many in flight as fit a consumer's default fetch_max_bytes (50 MiB).
BARE_FETCH_BYTES = 6_500_000
BARE_FETCH_CALLS = 320
BARE_FETCH_IN_FLIGHT = 7


@dataclass(frozen=True)
class Scale:
    name: str
    counts: tuple[int, ...]
    rf3_counts: tuple[int, ...]
    records: int
    idle_s: float
    settle_s: float  # pause after every replica answered, before the idle measurements
    leaders_timeout_s: float  # bound on starting N actors or N leaders
    timeout_s: float  # bound on any other wait (produce, consume, a call)
    replica_fetch_wait_ms: int = 500  # the RF3 topics' replica.fetch.wait.max.ms


FULL = Scale("full", (1, 16, 64, 128, 256), (1, 16, 32, 64), 1_000_000, 30.0, 5.0, 600.0, 300.0)
QUICK = Scale("quick", (1, 16), (1, 8), 200_000, 5.0, 2.0, 180.0, 120.0)


@dataclass(frozen=True)
class Target(common.Target):
    """common.Target that also shows CPU targets (metric ``cpu_pct``)."""

    def __str__(self) -> str:
        if self.metric == "cpu_pct":
            return f"CPU {self.op} {self.value:g}%"
        return super().__str__()


@dataclass
class Row(common.Judged):
    """One line of a results table; ``section`` says which table."""

    section: str  # "start", "memory", "cpu" or "throughput"
    name: str
    partitions: int | None = None
    replicas: int | None = None  # replica processes (partitions x rf)
    bare_s: float | None = None  # start of N bare actors
    leaders_s: float | None = None  # create_topics until every partition has a leader
    uss_mb: float | None = None  # mean over the replicas
    bare_uss_mb: float | None = None  # mean over the baseline bare actors, same moment
    cpu_pct: float | None = None  # all replicas, % of one core
    bare_cpu_pct: float | None = None  # bare actors' per-actor figure x replicas
    records_per_s: float | None = None
    mb_per_s: float | None = None
    ratio: float | None = None
    targets: list[Target] = field(default_factory=list)
    note: str = ""
    error: str | None = None


class BareActor:
    """A Ray actor that imports nothing: what any actor costs."""

    def ready(self) -> int:
        return os.getpid()

    def fetch(self, size: int) -> Any:
        """``size`` bytes as a leader answers a fetch: a NumPy view of fresh bytes (shipped out
        of band), from a threaded actor as a replica is (imports NumPy: for the throughput
        floor only, never on the actors whose memory is the baseline)."""
        import numpy as np

        return np.frombuffer(bytes(size), dtype=np.uint8)


# ---------------------------------------------------------------------------------------
# Processes


def wait_gone(pids: list[int], timeout_s: float) -> int:
    """Wait until no process of ``pids`` runs (zombies count as gone); how many still do."""
    import psutil  # Ray's own copy (on the path once Ray is imported) if not installed

    deadline = time.monotonic() + timeout_s
    while True:
        alive = 0
        for pid in pids:
            with contextlib.suppress(psutil.NoSuchProcess):
                alive += psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


def mean_uss_mb(pids: list[int]) -> tuple[float, float, float]:
    """Mean, least and most USS of ``pids``, MB."""
    values = [uss_mb(pid) for pid in pids]
    return sum(values) / len(values), min(values), max(values)


def idle_cpu(replica_pids: list[int], bare_pids: list[int], seconds: float) -> tuple[float, float]:
    """% of one core used over ``seconds`` by all of ``replica_pids``, and by one bare actor (mean)."""
    before = common.cpu_seconds(*replica_pids), common.cpu_seconds(*bare_pids)
    start = time.perf_counter()
    time.sleep(seconds)
    after = common.cpu_seconds(*replica_pids), common.cpu_seconds(*bare_pids)
    elapsed = time.perf_counter() - start
    return (
        100 * (after[0] - before[0]) / elapsed,
        100 * (after[1] - before[1]) / elapsed / len(bare_pids),
    )


def require_memory(processes: int, per_process_mb: float, what: str) -> None:
    import psutil

    available = psutil.virtual_memory().available / MB
    needed = processes * per_process_mb + RESERVE_MB
    if needed > available:
        raise BenchError(
            f"{what}: {processes} processes of ~{per_process_mb:.0f} MB need ~{needed:,.0f} MB with a reserve, "
            f"{available:,.0f} MB available"
        )


def start_bare_actors(count: int, timeout_s: float) -> tuple[list[Any], list[int], float]:
    """``count`` bare actors created at once: handles, pids, seconds until all answered."""
    cls = ray.remote(BareActor).options(num_cpus=0, max_concurrency=MAX_CONCURRENCY)  # threaded, as a replica
    start = time.perf_counter()
    actors = [cls.remote() for _ in range(count)]
    try:
        pids = get([a.ready.remote() for a in actors], timeout_s, f"{count} bare actors")
    except BaseException:
        kill_bare_actors(actors, [])
        raise
    return actors, pids, time.perf_counter() - start


def bare_fetch_rate(actors: list[Any], timeout_s: float) -> float:
    """Bytes per second of BARE_FETCH_CALLS calls of BARE_FETCH_BYTES, to ``actors`` in turn
    with BARE_FETCH_IN_FLIGHT outstanding: a consumer's reading of full batches (that many
    fit its default ``fetch_max_bytes``) without raylog, the floor of poll_arrow's ratio.
    Each actor answers one small call first (untimed): NumPy imported, as in a replica."""
    get([actor.fetch.remote(1) for actor in actors], timeout_s, "bare actors' first fetch")
    start, pending, sent = time.perf_counter(), [], 0
    while sent < BARE_FETCH_CALLS or pending:
        while sent < BARE_FETCH_CALLS and len(pending) < BARE_FETCH_IN_FLIGHT:
            pending.append(actors[sent % len(actors)].fetch.remote(BARE_FETCH_BYTES))
            sent += 1
        ready, pending = ray.wait(pending, num_returns=1, timeout=timeout_s)
        if not ready:
            raise BenchError(f"a bare actor's fetch took over {timeout_s:.0f} s")
        get(ready, timeout_s, "bare fetch")
    return BARE_FETCH_CALLS * BARE_FETCH_BYTES / (time.perf_counter() - start)


def kill_bare_actors(actors: list[Any], pids: list[int]) -> None:
    for actor in actors:
        ray.kill(actor)
    if wait_gone(pids, 60):
        print("[density_bench] some killed bare actors still run after 60 s", file=sys.stderr)


# ---------------------------------------------------------------------------------------
# raylog


def create_with_leaders(admin: Admin, new: NewTopic, timeout_s: float) -> float:
    """Seconds from ``create_topics`` until every partition of ``new`` has a leader."""
    start = time.perf_counter()
    admin.create_topics([new], wait_for_leaders_ms=int(timeout_s * 1000))
    return time.perf_counter() - start


def replica_pids(cluster: RaylogCluster, topic: str, expected: int, timeout_s: float) -> list[int]:
    """The pids of every replica of ``topic`` once all ``expected`` answered."""
    deadline = time.monotonic() + timeout_s
    while True:
        handles = get(cluster.controller.replica_handles.remote(topic), timeout_s, "replica handles")
        if len(handles) >= expected:
            break
        if time.monotonic() > deadline:
            raise BenchError(f"{topic}: {len(handles)} of {expected} replicas answered within {timeout_s:.0f} s")
        time.sleep(0.5)
    states = get([h.state.remote() for h in handles.values()], timeout_s, "replica states")
    return [s["pid"] for s in states]


def sends_for(counts: tuple[int, ...], work: Workload) -> int:
    """How many sends of ``work.table`` give each partition of the largest of ``counts`` a
    full batch (the load of every count of one RF)."""
    return max(1, -(-max(counts, default=1) * LogConfig.max_message_bytes // work.table.nbytes))


def timed_send_arrow(
    cluster: RaylogCluster, topic: str, work: Workload, sends: int, timeout_s: float
) -> tuple[float, str]:
    """Seconds for ``sends`` calls of ``send_arrow(work.table)`` by a fresh
    ``Producer(acks=1)`` until ``flush()`` returned, and a note on batching. Unlike
    ``client_bench.timed_produce`` it then waits (untimed) for the high watermarks: with RF3
    and acks=1 they advance only once the followers fetched the records."""
    before = high_watermarks(cluster, topic)
    producer = new_producer(cluster, acks=1)
    try:
        start = time.perf_counter()
        futures = [producer.send_arrow(topic, work.table) for _ in range(sends)]
        producer.flush(timeout=timeout_s)
        seconds = time.perf_counter() - start
        for future in futures:
            future.result(timeout=timeout_s)  # raises the first failed batch's error
        note = batch_note(producer, work.count * sends)
    finally:
        producer.close(timeout=timeout_s)
    wait_for_records(cluster, topic, before + work.count * sends, timeout_s)
    return seconds, note


def partitions_written(cluster: RaylogCluster, topic: str, partitions: int) -> int:
    consumer = Consumer(cluster)
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        return sum(end > 0 for end in consumer.end_offsets(consumer.assignment()).values())
    finally:
        consumer.close()


class Runner(common.Phases):
    """Holds the run's Ray baselines and rows; one cluster (RF1, then RF3) at a time."""

    tag = "density_bench"
    row_type = Row

    def __init__(self, scale: Scale, work: Workload, bare_pids: list[int]):
        self.scale = scale
        self.work = work
        self.bare_pids = bare_pids
        self.rows: list[Row] = []
        self.cluster: RaylogCluster | None = None
        self.admin: Admin | None = None
        self.rf = 1
        self.sends = 1  # send_arrow calls of the workload per throughput run, for this RF
        self.reference: dict[str, float] = {}  # "produce"/"consume" -> records/s at 6 partitions
        self.bare_fetch_reference: float | None = None  # bytes/s of REFERENCE_PARTITIONS bare actors
        self.replica_mb = GUESS_REPLICA_MB

    def use(self, cluster: RaylogCluster, rf: int, counts: tuple[int, ...]) -> None:
        self.cluster, self.rf, self.reference = cluster, rf, {}
        self.sends = sends_for(counts, self.work)
        self.admin = Admin(cluster, request_timeout_ms=int((self.scale.leaders_timeout_s + 60) * 1000))

    def _topic(self, partitions: int) -> str:
        return f"density-rf{self.rf}-{partitions}p-{uuid.uuid4().hex[:6]}"

    def _new_topic(self, name: str, partitions: int) -> NewTopic:
        config = {"replica.fetch.wait.max.ms": str(self.scale.replica_fetch_wait_ms)} if self.rf > 1 else {}
        return NewTopic(name, partitions, self.rf, config=config)

    def _delete(self, topic: str, pids: list[int]) -> None:
        self.admin.delete_topics([topic])
        if wait_gone(pids, 120):
            print(f"[density_bench] replicas of {topic} still run 120 s after its deletion", file=sys.stderr)

    # --- throughput reference ------------------------------------------------------------

    def reference_run(self) -> None:
        n = REFERENCE_PARTITIONS
        if self.rf == 1:
            actors, pids, _ = start_bare_actors(n, self.scale.leaders_timeout_s)
            try:
                self.bare_fetch_reference = bare_fetch_rate(actors, self.scale.timeout_s)
            finally:
                kill_bare_actors(actors, pids)
            self.rows.append(self._bare_fetch_row(n, self.bare_fetch_reference, "reference: "))
        topic = self._topic(n)
        create_with_leaders(self.admin, self._new_topic(topic, n), self.scale.leaders_timeout_s)
        pids = replica_pids(self.cluster, topic, n * self.rf, self.scale.leaders_timeout_s)
        try:
            for kind, rate, note in self._load(topic, n):
                self.reference[kind] = rate
                self.rows.append(
                    Row(
                        "throughput",
                        f"reference: {kind}, {n} partitions, RF{self.rf}",
                        partitions=n,
                        records_per_s=rate,
                        mb_per_s=rate * VALUE_BYTES / MB,
                        ratio=1.0,
                        note=note,
                    )
                )
        finally:
            self._delete(topic, pids)

    def _load(self, topic: str, partitions: int) -> list[tuple[str, float, str]]:
        """Produce the workload with send_arrow, then consume it: (kind, records/s, note)."""
        count = self.work.count * self.sends
        produce_s, batches = timed_send_arrow(self.cluster, topic, self.work, self.sends, self.scale.timeout_s)
        written = partitions_written(self.cluster, topic, partitions)
        consume_s = timed_consume(self.cluster, topic, count, "poll_arrow", self.scale)
        spread = f"{count:,} rec in {written} of {partitions} partitions"
        return [
            ("send_arrow", count / produce_s, f"{spread}; {batches}" if batches else spread),
            ("poll_arrow", count / consume_s, spread),
        ]

    def _bare_fetch_row(self, n: int, rate: float, prefix: str) -> Row:
        return Row(
            "throughput",
            f"{prefix}bare actors' fetches, {n} actors",
            n,
            n,
            mb_per_s=rate / MB,
            ratio=rate / self.bare_fetch_reference if self.bare_fetch_reference else None,
            note=(
                f"{BARE_FETCH_CALLS} calls of {BARE_FETCH_BYTES / MB:.1f} MB in turn, {BARE_FETCH_IN_FLIGHT} "
                "in flight: poll_arrow's floor at this many processes"
            ),
        )

    # --- one count ----------------------------------------------------------------------

    def count(self, n: int) -> None:
        """Every measurement of ``n`` partitions; each step's failure is a row of its own."""
        rf, scale, label = self.rf, self.scale, f"{n} partition{'s' if n > 1 else ''}, RF{self.rf}"
        state: dict[str, Any] = {}

        def start() -> None:
            bare_mb = mean_uss_mb(self.bare_pids)[0]
            require_memory(n, 1.1 * bare_mb, f"{n} bare actors")  # their unshared memory, with a margin
            actors, pids, bare_s = start_bare_actors(n, scale.leaders_timeout_s)
            try:  # (their fetch floor now, while no replica of this count runs)
                if rf == 1 and self.bare_fetch_reference:
                    state["bare_fetch"] = bare_fetch_rate(actors, scale.timeout_s)
            finally:
                kill_bare_actors(actors, pids)
            require_memory(n * rf, self.replica_mb, label)
            topic = self._topic(n)
            created = time.perf_counter()
            state["topic"] = topic
            new = self._new_topic(topic, n)
            leaders_s = create_with_leaders(self.admin, new, scale.leaders_timeout_s)
            state["pids"] = replica_pids(self.cluster, topic, n * rf, scale.leaders_timeout_s)
            all_s = time.perf_counter() - created
            targets = []
            if rf == 1 and n == 128:
                targets.append(Target("ratio", "<=", 1.3))
            if rf == 1 and n == 256:
                targets.append(Target("leaders_s", "<=", scale.leaders_timeout_s))
            note = f"all {n * rf} replicas answered after {all_s:.2f} s"
            self.rows.append(
                Row(
                    "start",
                    f"time to leaders, {label}",
                    n,
                    n * rf,
                    bare_s=bare_s,
                    leaders_s=leaders_s,
                    ratio=leaders_s / bare_s,
                    targets=targets,
                    note=note,
                )
            )

        def idle() -> None:
            time.sleep(scale.settle_s)
            self._memory(state["pids"], f"idle replicas, {label}", 1.2, f"{scale.settle_s:g} s after all answered")
            self._cpu(state["pids"], n, f"idle CPU, {label}", "before any load")

        def load() -> None:
            targeted = rf == 1 and n == 64
            for kind, rate, note in self._load(state["topic"], n):
                base = self.reference.get(kind)
                self.rows.append(
                    Row(
                        "throughput",
                        f"{kind}, {label}",
                        n,
                        n * rf,
                        records_per_s=rate,
                        mb_per_s=rate * VALUE_BYTES / MB,
                        ratio=rate / base if base else None,
                        targets=[Target("ratio", ">=", 0.8)] if targeted else [],
                        note=note,
                    )
                )
            state["loaded"] = True
            if "bare_fetch" in state:
                self.rows.append(self._bare_fetch_row(n, state["bare_fetch"], ""))

        def loaded() -> None:
            self._cpu(state["pids"], n, f"CPU after load, {label}", f"the {scale.idle_s:g} s after the load (extra)")
            self._memory(
                state["pids"],
                f"loaded replicas, {label}",
                1.5,
                f"after {self.work.count * self.sends:,} rec and {scale.idle_s:g} s idle",
            )

        try:
            self.phase("start", f"start, {label}", start)
            if "pids" not in state:
                return
            self.phase("memory", f"idle, {label}", idle)
            self.phase("throughput", f"load, {label}", load)
            if state.get("loaded"):
                self.phase("memory", f"after load, {label}", loaded)
        finally:
            if "topic" in state:
                self.phase("start", f"delete, {label}", lambda: self._delete(state["topic"], state.get("pids", [])))

    def _memory(self, pids: list[int], name: str, target: float, note: str) -> None:
        mean, least, most = mean_uss_mb(pids)
        bare = mean_uss_mb(self.bare_pids)[0]
        if name.startswith("idle"):  # what a count's start needs: idle replicas, with a margin
            self.replica_mb = mean * 1.1
        self.rows.append(
            Row(
                "memory",
                name,
                replicas=len(pids),
                uss_mb=mean,
                bare_uss_mb=bare,
                ratio=mean / bare,
                targets=[Target("ratio", "<=", target)],
                note=f"{note}; replicas {least:.1f}..{most:.1f} MB",
            )
        )

    def _cpu(self, pids: list[int], n: int, name: str, note: str) -> None:
        replicas, per_bare = idle_cpu(pids, self.bare_pids, self.scale.idle_s)
        floor = per_bare * len(pids)
        targets = []
        if "idle" in name and self.rf == 1 and n == 128:
            targets = [Target("cpu_pct", "<=", 5)]
        if "idle" in name and self.rf == 3 and n == 32:
            targets = [Target("cpu_pct", "<=", 15)]
        self.rows.append(
            Row(
                "cpu",
                name,
                n,
                len(pids),
                cpu_pct=replicas,
                bare_cpu_pct=floor,
                ratio=replicas / floor if floor > 0 else None,
                targets=targets,
                note=f"{note}; over {self.scale.idle_s:g} s; bare actor {per_bare:.3f}% each",
            )
        )


# ---------------------------------------------------------------------------------------
# Output


def _int(value: int | None) -> str:
    return "" if value is None else str(value)


TABLES: dict[str, tuple[common.Columns, int]] = {
    "start": (
        (
            ("measurement", 36, None),
            ("replicas", 8, lambda r: _int(r.replicas)),
            ("bare s", 7, lambda r: number(r.bare_s, ".2f")),
            ("leaders s", 9, lambda r: number(r.leaders_s, ".2f")),
            ("ratio", 6, lambda r: times(r.ratio)),
        ),
        20,
    ),
    "memory": (
        (
            ("measurement", 36, None),
            ("replicas", 8, lambda r: _int(r.replicas)),
            ("USS MB", 7, lambda r: number(r.uss_mb, ".1f")),
            ("bare MB", 7, lambda r: number(r.bare_uss_mb, ".1f")),
            ("ratio", 6, lambda r: times(r.ratio)),
        ),
        16,
    ),
    "cpu": (
        (
            ("measurement", 36, None),
            ("replicas", 8, lambda r: _int(r.replicas)),
            ("CPU %", 7, lambda r: number(r.cpu_pct, ".2f")),
            ("bare %", 7, lambda r: number(r.bare_cpu_pct, ".2f")),
            ("ratio", 6, lambda r: times(r.ratio)),
        ),
        16,
    ),
    "throughput": (
        (
            ("measurement", 42, None),
            ("records/s", 11, lambda r: number(r.records_per_s, ",.0f")),
            ("MB/s", 6, lambda r: number(r.mb_per_s, ",.0f")),
            ("x 6p", 6, lambda r: times(r.ratio)),
        ),
        16,
    ),
}


def json_document(scale: Scale, runner: Runner) -> dict[str, object]:
    return {
        "mode": scale.name,
        "counts": list(scale.counts),
        "rf3_counts": list(scale.rf3_counts),
        "records": scale.records,
        "sends_per_load": {
            "rf1": sends_for(scale.counts, runner.work),
            "rf3": sends_for(scale.rf3_counts, runner.work),
        },
        "rf3_replica_fetch_wait_ms": scale.replica_fetch_wait_ms,
        "value_bytes": VALUE_BYTES,
        "idle_s": scale.idle_s,
        "baseline_bare_actors": BASELINE_ACTORS,
        "mb": MB,
        "durability": "acks=1, no fsync",
    }


# ---------------------------------------------------------------------------------------
# Entry point


def run(scale: Scale, parent: str | None) -> Runner:
    """Every measurement on a fresh local Ray, removed at the end."""
    with contextlib.ExitStack() as stack:
        workdir = common.temp_workdir(stack, "raylog-density-bench-", parent)
        common.start_local_ray(stack, ship=__name__)  # when imported, workers get BareActor by value
        baseline, bare_pids, _ = start_bare_actors(BASELINE_ACTORS, scale.timeout_s)
        stack.callback(kill_bare_actors, baseline, bare_pids)
        runner = Runner(scale, make_workload(VALUE_BYTES, scale.records), bare_pids)
        for rf, counts in ((1, scale.counts), (3, scale.rf3_counts)):
            if not counts:
                continue
            with contextlib.ExitStack() as inner:
                cluster = raylog.connect(
                    data_dir=os.path.join(workdir, f"rf{rf}"),
                    num_brokers=rf,
                    cluster_name=f"density{rf}-{uuid.uuid4().hex[:8]}",
                )
                inner.callback(cluster.shutdown)
                runner.use(cluster, rf, counts)
                runner.phase("throughput", f"reference, RF{rf}", runner.reference_run)
                for n in counts:
                    runner.count(n)
        return runner


def counts_arg(text: str) -> tuple[int, ...]:
    counts = tuple(int(part) for part in text.split(",") if part.strip())
    if any(c < 1 for c in counts):
        raise ValueError(f"partition counts must be >= 1: {text}")
    return counts


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = common.bench_parser(__doc__, "counts 1,16 and RF3 1,8, 200k records, 5 s idle (a couple of minutes)", prog)
    parser.add_argument("--counts", type=counts_arg, help="RF1 partition counts (default 1,16,64,128,256)")
    parser.add_argument("--rf3-counts", type=counts_arg, help="RF3 partition counts (default 1,16,32,64)")
    parser.add_argument("--idle-s", type=float, help="idle window of the CPU and loaded-memory figures (default 30)")
    parser.add_argument(
        "--replica-fetch-wait-ms", type=int, help="the RF3 topics' replica.fetch.wait.max.ms (default 500, Kafka's)"
    )
    args = parser.parse_args(argv)
    scale = QUICK if args.quick else FULL
    overrides = {
        "counts": args.counts,
        "rf3_counts": args.rf3_counts,
        "idle_s": args.idle_s,
        "replica_fetch_wait_ms": args.replica_fetch_wait_ms,
    }
    scale = Scale(**{**scale.__dict__, **{k: v for k, v in overrides.items() if v is not None}})
    watch = common.RunWatch()
    runner = run(scale, args.dir)
    watch.stop()
    rows = runner.rows
    print(
        f"raylog density benchmark, {scale.name} mode: one replica actor per partition and broker on this node; "
        f"RF1 counts {', '.join(map(str, scale.counts))}; RF3 (3 embedded brokers) counts "
        f"{', '.join(map(str, scale.rf3_counts))}"
    )
    print(
        f"bare: Ray actors with no imports ({BASELINE_ACTORS} kept alive for memory and CPU, N started for time); "
        f"load: a table of {scale.records:,} x {VALUE_BYTES} B sent S times (a full batch for every partition of "
        f"the RF's largest count: RF1 S={sends_for(scale.counts, runner.work)}, RF3 "
        f"S={sends_for(scale.rf3_counts, runner.work)}), send_arrow / poll_arrow, acks=1; x 6p: over "
        f"{REFERENCE_PARTITIONS} partitions of the same RF and load; RF3 replica.fetch.wait.max.ms "
        f"{scale.replica_fetch_wait_ms}"
    )
    print("BELOW: target missed; ERROR: the measurement failed (see stderr)")
    common.print_tables(rows, TABLES)
    print()
    notes = [
        "CPU % is of one core, summed over the replica processes; bare % is a bare actor's over the same "
        "window times the replica count: Ray's own floor"
    ]
    return common.finish(
        rows,
        watch,
        args.json,
        json_document(scale, runner),
        "other work on the machine raises the times and CPU figures",
        notes,
    )


if __name__ == "__main__":
    common.run_script(main)
