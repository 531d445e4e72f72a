"""Benchmark of raylog's replication: what replication factor 3 costs in throughput, and how
long a partition is unwritable after its leader's process or node dies.

Durability in every measurement is Kafka's default: no fsync (``flush.messages`` and
``flush.ms`` are "never"). An ``acks=1`` write is acknowledged once it is in the leader's
page cache; an ``acks=all`` write once every in-sync replica has it in its page cache
(``min.insync.replicas=2``: at least two copies, so one process or node may die).

What is measured (``time.perf_counter``), all in one run:

1. Throughput, embedded mode with ``num_brokers=3`` (three brokers on this node), 100 B
   values, a 1-partition topic with replication factor 3 written with ``acks="all"``
   against a 1-partition topic with replication factor 1 written with ``acks=1``;
   ``send_arrow(topic, table)`` of a pre-built table and ``send()`` per record, a fresh
   ``Producer`` per run (``linger_ms=5``, ``batch_size=1 MiB``, idempotent, 5 in flight).
   From the first call to ``flush()`` returning; RF1 and RF3 runs alternate, each repeated,
   the best run shown; every run is checked against the high watermark, and the RF3 ISR is
   checked to be full after its runs (acks=all then waited for all three copies). Target:
   RF3/RF1 >= 0.6x (Kafka's 2014 figure, 3x synchronous replication against none, was
   0.51x). Extra rows (no target): the same with 3 partitions (each broker leads one).
2. Leader fail-over after the leader replica's PROCESS dies (same embedded cluster, an RF3
   topic with ``min.insync.replicas=2``): the leader actor is found from the metadata
   (``cluster.metadata(refresh=True).leader(tp)``) and killed with ``ray.kill(handle,
   no_restart=False)``; Ray restarts it, the restarted replica reports to the controller,
   which moves leadership to another ISR member. Measured: time from the kill to the first
   acknowledged ``acks="all"`` write of a fresh ``Producer(retry_backoff_ms=20,
   linger_ms=0)`` created once the old process is gone (its pid no longer runs, so the
   write cannot land on the dying process). A producer whose record fails for good is
   replaced by a new one, and the bench then refreshes the shared metadata cache first
   (the note says when that was needed). Between trials the ISR must be full again. Also
   shown (no target): when the controller named the new leader (direct
   ``controller.metadata`` calls every 20 ms, leaving the client cache alone), when the
   killed replica answered again, and, as a baseline, how long Ray takes to restart a plain
   actor with the replica's imports killed the same way. Targets: p50 <= 2 s, max <= 5 s.
3. Leader fail-over after a NODE dies: a ``ray.cluster_utils.Cluster`` with a head (the
   controller, no broker label) and three nodes labelled ``raylog.broker=<id>`` (with
   ``raylog.data_dir``), Ray's node health checks at ``_system_config =
   {health_check_period_ms: 500, health_check_failure_threshold: 3,
   health_check_timeout_ms: 500}``, controller ``node.check.interval.ms=200``. The
   leader's node is removed with ``remove_node(node, allow_graceful=False)``; time from the
   removal to the first acknowledged acks=all write (as in 2), the controller's election
   (as in 2) and, polled from a thread every 50 ms, the time until ``ray.nodes()`` shows
   the node ``Alive=False`` (Ray's detection). Between trials the node is added back with
   the same labels and data directory and the ISR must be full again. Target: fail-over
   <= detection + 1 s in every trial.

In both fail-over measurements a "strict client" runs alongside: its own metadata cache
(a second ``RaylogCluster`` handle, primed before the kill, as in any application process)
and fresh acks=all producers one after another (0.1 s apart after a failure), never
refreshing the metadata itself; it gets until 3 s after the measured write. Its row says
whether raylog's clients recover on their own (OK, with times) or not (FAIL).

Automatic preferred-leader rebalancing is off in both clusters
(``auto.leader.rebalance.enable=false``) so that leadership moves only when a trial
kills a leader. ``replica.lag.time.max.ms`` keeps its default (30 s). MB is 10^6 bytes of
values. Ray and raylog are started here and shut down at the end; data lives in a
temporary directory that is removed.

Usage (or ``python -m raylog.benchmarks.replication_bench``)::

    raylog bench replication [--quick] [--json PATH] [--dir PARENT]
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import ray

import raylog
from raylog import Admin, NewTopic, Producer, TopicPartition
from raylog.benchmarks import common
from raylog.benchmarks.client_bench import make_workload, timed_produce
from raylog.benchmarks.common import MB, MIB, BenchError, get
from raylog.benchmarks.perf import nearest_rank
from raylog.clients.cluster import RaylogCluster
from raylog.errors import RaylogError

VALUE_BYTES = 100
NUM_BROKERS = 3
SAFE_TOPIC = {"min.insync.replicas": "2"}
CONTROLLER_CONFIG = {"auto.leader.rebalance.enable": "false"}
FAST_FAILURE_DETECTION = {
    "health_check_period_ms": 500,
    "health_check_failure_threshold": 3,
    "health_check_timeout_ms": 500,
}
NODE_CONTROLLER_CONFIG = {"node.check.interval.ms": "200", **CONTROLLER_CONFIG}
NODE_OBJECT_STORE_BYTES = 80 * MIB
#: How often the detection thread reads Ray's node table.
DETECTION_POLL_S = 0.05
#: Producer settings of the fail-over probes.
PROBE_PRODUCER = {"acks": "all", "linger_ms": 0, "retry_backoff_ms": 20}
#: How long the strict client may go on after the measured write before it counts as not recovered.
STRICT_GRACE_S = 3.0


@dataclass(frozen=True)
class Scale:
    """How much work each measurement does."""

    name: str
    repeats: int  # timed runs per throughput measurement; the best is reported
    arrow_records: int
    send_records: int
    process_trials: int
    node_trials: int
    timeout_s: float  # bound on any single wait (a produce run, a fail-over, an ISR refill)


FULL = Scale(
    "full", repeats=3, arrow_records=500_000, send_records=200_000, process_trials=10, node_trials=3, timeout_s=120.0
)
QUICK = Scale(
    "quick", repeats=1, arrow_records=20_000, send_records=10_000, process_trials=2, node_trials=1, timeout_s=60.0
)


class Target(common.Target):
    """A goal for one figure of a row (metric ratio, p50_s or max_s); ratios are RF3/RF1."""

    def __str__(self) -> str:
        if self.metric == "ratio":
            return f"RF3/RF1 {self.op} {self.value:g}x"
        return super().__str__()


@dataclass
class Row(common.Judged):
    """One line of a results table; ``section`` says which table."""

    section: str  # "throughput" or "failover"
    name: str
    records_per_s: float | None = None
    mb_per_s: float | None = None
    ratio: float | None = None  # RF3 over RF1
    trials: int | None = None
    p50_s: float | None = None
    max_s: float | None = None
    values_s: list[float] = field(default_factory=list)  # per trial
    targets: list[Target] = field(default_factory=list)
    note: str = ""
    error: str | None = None
    verdict: str | None = None  # a pass/fail observation without a figure ("OK", "FAIL")


# ---------------------------------------------------------------------------------------
# Helpers


def wait_for(predicate: Callable[[], Any], timeout_s: float, what: str, interval_s: float = 0.05) -> Any:
    """Poll ``predicate`` (exceptions count as not yet) until truthy; BenchError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last_error = None
    while True:
        try:
            result = predicate()
            if result:
                return result
        except (RaylogError, ray.exceptions.RayError) as exc:
            last_error = exc
        if time.monotonic() > deadline:
            extra = f" (last error: {type(last_error).__name__}: {last_error})" if last_error else ""
            raise BenchError(f"{what}: not within {timeout_s:.0f} s{extra}")
        time.sleep(interval_s)


def describe(cluster: RaylogCluster, topic: str):
    return Admin(cluster).describe_topics([topic])[0].partitions[0]


def pid_running(pid: int) -> bool:
    import psutil  # Ray's own copy (on the path once Ray is imported) if not installed

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def seconds_list(values: list[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


def stats(values: list[float]) -> tuple[float, float]:
    ordered = np.sort(np.asarray(values, dtype=float))
    return nearest_rank(ordered, 0.5), float(ordered[-1])


def short_error(exc: BaseException) -> str:
    text = common.strip_ansi(str(exc)).splitlines()
    return f"{type(exc).__name__}: {text[0][:110] if text else ''}"


def close_quietly(producer: Producer) -> None:
    """Close a fail-over probe's producer; its errors are already counted."""
    with contextlib.suppress(RaylogError):
        producer.close(timeout=1)


@dataclass
class Probe:
    """The outcome of :func:`first_acknowledged_write`."""

    seconds: float
    attempts: int | None  # sends of the acknowledged record's batch (1 = no retry)
    producers: int  # fresh producers used (1 = the first one succeeded)
    refreshes: int  # metadata refreshes the bench made after a producer failed for good
    failures: list[tuple[float, str]]  # (seconds after the kill, error) of each failed producer

    def note(self) -> str:
        parts = [] if self.attempts is None else [f"{self.attempts} send(s)"]
        if self.failures:
            parts.append(
                f"{len(self.failures)} producer(s) failed first, e.g. at {self.failures[0][0]:.2f} s: "
                f"{self.failures[0][1]}"
            )
        return ", ".join(parts)


def first_acknowledged_write(
    cluster: RaylogCluster, topic: str, t0: float, timeout_s: float, refresh_after_failure: bool = True
) -> Probe:
    """A fresh acks=all producer's single record, until one is acknowledged: seconds from
    ``t0``. A producer whose record fails for good (a non-retriable error or its delivery
    timeout) is closed and a new one made; with ``refresh_after_failure`` the bench first
    refreshes the cluster's shared metadata cache (what an application catching the error
    might do), since the producer itself refreshes it only after retriable errors."""
    deadline = t0 + timeout_s
    failures: list[tuple[float, str]] = []
    producers = refreshes = 0
    while True:
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            shown = "; ".join(f"{t:.1f} s {e}" for t, e in failures[:2])
            raise BenchError(
                f"no acks=all write acknowledged within {timeout_s:.0f} s of the kill "
                f"({producers} fresh producers, {refreshes} metadata refreshes by the bench)"
                + (f"; failures: {shown}" if shown else "")
            )
        if failures and refresh_after_failure:
            try:
                cluster.metadata(refresh=True)
                refreshes += 1
            except RaylogError:
                pass
        producer = Producer(cluster, **PROBE_PRODUCER, delivery_timeout_ms=max(1000, int(remaining * 1000)))
        producers += 1
        try:
            future = producer.send(topic, b"failover-probe-%d" % producers)
            future.result(timeout=remaining + 1)
            attempts = getattr(getattr(future, "_batch", None), "attempts", None)
            return Probe(
                time.perf_counter() - t0, None if attempts is None else attempts + 1, producers, refreshes, failures
            )
        except RaylogError as exc:  # KafkaTimeoutError included
            failures.append((time.perf_counter() - t0, short_error(exc)))
            time.sleep(0.02)
        finally:
            close_quietly(producer)


class Poller(threading.Thread):
    """Calls ``check()`` every ``interval_s`` from ``t0`` on; ``seconds`` is when it first
    returned true (None if it never did before ``stop`` or the bound)."""

    def __init__(self, check: Callable[[], bool], t0: float, interval_s: float, bound_s: float):
        super().__init__(daemon=True)
        self.check, self.t0, self.interval_s, self.bound_s = check, t0, interval_s, bound_s
        self.seconds: float | None = None
        self.stop = threading.Event()
        self.start()

    def run(self) -> None:
        while not self.stop.is_set() and time.perf_counter() < self.t0 + self.bound_s:
            try:
                if self.check():
                    self.seconds = time.perf_counter() - self.t0
                    return
            except Exception:  # noqa: BLE001 — a failed look counts as not yet
                pass
            self.stop.wait(self.interval_s)


def controller_leader(cluster: RaylogCluster, topic: str) -> int:
    """Partition 0's leader as the controller has it now (a direct call: the shared
    metadata cache of ``cluster`` is left alone)."""
    answer = ray.get(cluster.controller.metadata.remote([topic]), timeout=5)
    return answer["topics"][topic].partitions[0].leader


class RestartProbe:
    """A plain actor with the replica's imports (the restart baseline)."""

    def __init__(self):
        import raylog.actors.replica  # noqa: F401 — pyarrow, numpy, raylog, as a replica loads

    def pid(self) -> int:
        return os.getpid()


class StrictClient(threading.Thread):
    """A client with its own metadata cache (primed before the kill, like any running
    application), making fresh acks=all producers one after another and never refreshing
    the metadata itself: it shows whether raylog's clients recover on their own."""

    def __init__(self, cluster: RaylogCluster, topic: str, t0: float, bound_s: float):
        super().__init__(daemon=True)
        self.cluster = RaylogCluster(cluster.cluster_name, cluster.controller)
        self.cluster.metadata(refresh=True)
        self.topic, self.t0, self.bound_s = topic, t0, bound_s
        self.seconds: float | None = None
        self.failures: list[tuple[float, str]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set() and time.perf_counter() < self.t0 + self.bound_s:
            producer = Producer(self.cluster, **PROBE_PRODUCER, delivery_timeout_ms=5_000)
            try:
                producer.send(self.topic, b"strict-probe").result(timeout=6)
                self.seconds = time.perf_counter() - self.t0
                return
            except RaylogError as exc:
                self.failures.append((time.perf_counter() - self.t0, short_error(exc)))
                self.stop.wait(0.1)
            finally:
                close_quietly(producer)


def _seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.2f} s"


@dataclass
class Trial:
    """One kill: what happened and when (seconds after the kill)."""

    old_leader: int
    gone_s: float  # the old leader's process no longer runs
    probe: Probe | None = None
    elected_s: float | None = None  # the controller names another leader
    strict_s: float | None = None  # the strict client's first acknowledged write
    strict_failures: list = field(default_factory=list)
    strict_window_s: float = 0.0
    new_leader: int = -1
    epoch: int = -1
    refill_s: float = 0.0

    def describe(self) -> str:
        return (
            f"write after {self.probe.seconds:.2f} s (leader {self.old_leader} -> {self.new_leader}, epoch "
            f"{self.epoch}; {self.probe.note()}); old pid gone {self.gone_s:.2f} s, controller elected "
            f"{_seconds(self.elected_s)}, strict client {_seconds(self.strict_s)} "
            f"({len(self.strict_failures)} failed producers)"
        )


# ---------------------------------------------------------------------------------------
# The runner


class Runner(common.Phases):
    """Holds the rows; every phase appends rows (an ERROR row when it fails)."""

    tag = "replication_bench"
    row_type = Row

    def __init__(self, scale: Scale, workdir: str):
        self.scale = scale
        self.workdir = workdir
        self.rows: list[Row] = []
        self.messages: list[str] = []

    # --- phases 1 and 2: embedded cluster with three brokers ---------------------------

    def embedded(self) -> None:
        with contextlib.ExitStack() as stack:
            common.start_local_ray(stack)
            cluster = raylog.connect(
                data_dir=os.path.join(self.workdir, "embedded"),
                num_brokers=NUM_BROKERS,
                cluster_name=f"rb{uuid.uuid4().hex[:8]}",
                config=CONTROLLER_CONFIG,
            )
            stack.callback(cluster.shutdown)
            topics: list[str] = []
            stack.callback(self.delete_topics, cluster, topics, "the embedded topics")
            admin = Admin(cluster)

            def create(partitions: int, rf: int, config: dict | None = None) -> str:
                name = f"repl-{len(topics)}-rf{rf}-{partitions}p-{uuid.uuid4().hex[:6]}"
                new = NewTopic(name, partitions, replication_factor=rf, config=dict(config or {}))
                common.create_started(admin, [new])
                topics.append(name)
                return name

            self.phase("throughput", "throughput, 1 partition", lambda: self.throughput(cluster, create, 1, True))
            self.phase(
                "throughput", "throughput, 3 partitions (extra)", lambda: self.throughput(cluster, create, 3, False)
            )
            self.phase(
                "failover",
                "fail-over after the leader's process dies",
                lambda: self.process_failover(cluster, create(1, 3, SAFE_TOPIC)),
            )
            self.phase("failover", "baseline: a plain Ray actor restarted after ray.kill", self.restart_baseline)

    def delete_topics(self, cluster: RaylogCluster, topics: list[str], what: str, **admin_config: Any) -> None:
        """Delete ``topics`` (if any) at the end of a phase; a failure becomes a note."""
        if topics:
            try:
                Admin(cluster, **admin_config).delete_topics(topics)
            except Exception as exc:  # noqa: BLE001
                self.messages.append(f"deleting {what} failed: {exc}")

    def seed(self, cluster: RaylogCluster, topic: str) -> None:
        """Some data in the log before the first fail-over trial."""
        with Producer(cluster, acks="all") as producer:
            for i in range(1_000):
                producer.send(topic, b"%06d" % i)
            producer.flush(timeout=self.scale.timeout_s)

    def throughput(self, cluster: RaylogCluster, create: Callable, partitions: int, with_targets: bool) -> None:
        scale = self.scale
        rf1, rf3 = create(partitions, 1), create(partitions, 3, SAFE_TOPIC)
        shape = f"100 B, {partitions} partition{'s' if partitions > 1 else ''}"
        modes = [("arrow", "send_arrow(table)", scale.arrow_records)]
        if with_targets:
            modes.append(("send", "send() per record", scale.send_records))
        for mode, title, count in modes:
            work = make_workload(VALUE_BYTES, count)
            runs: dict[int, list[tuple[float, str]]] = {1: [], 3: []}
            for _ in range(scale.repeats):  # alternate, so both see the same machine state
                runs[1].append(timed_produce(cluster, rf1, work, mode, scale.timeout_s, acks=1))
                runs[3].append(timed_produce(cluster, rf3, work, mode, scale.timeout_s, acks="all"))
            isrs = [list(p.isr) for p in Admin(cluster).describe_topics([rf3])[0].partitions]
            shrunk = any(len(isr) < NUM_BROKERS for isr in isrs)
            best1, best3 = min(runs[1])[0], min(runs[3])[0]
            rate1, rate3 = count / best1, count / best3
            ratio = rate3 / rate1
            spread = lambda rs, count=count: ", ".join(f"{count / s:,.0f}" for s, _ in rs)  # noqa: E731
            self.rows.append(
                Row(
                    "throughput",
                    f"RF1 acks=1, {title}, {shape}",
                    rate1,
                    rate1 * VALUE_BYTES / MB,
                    note=f"{count:,} rec; runs/s: {spread(runs[1])}; {min(runs[1])[1]}",
                )
            )
            isr_note = f"ISR SHRANK during the runs: {isrs}" if shrunk else f"ISR after the runs: {isrs}"
            self.rows.append(
                Row(
                    "throughput",
                    f"RF3 acks=all, {title}, {shape}",
                    rate3,
                    rate3 * VALUE_BYTES / MB,
                    ratio,
                    targets=[Target("ratio", ">=", 0.6)] if with_targets else [],
                    note=f"{count:,} rec; runs/s: {spread(runs[3])}; {min(runs[3])[1]}; {isr_note}",
                )
            )

    def process_failover(self, cluster: RaylogCluster, topic: str) -> None:
        scale = self.scale
        tp = TopicPartition(topic, 0)
        self.seed(cluster, topic)
        trials: list[Trial] = []
        restart: list[float | None] = []
        for number in range(scale.process_trials):
            before = self.full_isr(cluster, topic, f"process trial {number}")
            handle = cluster.metadata(refresh=True).leader(tp)
            state = get(handle.state.remote(), scale.timeout_s, "leader state")
            if state["leader"] != before.leader:
                raise BenchError(f"trial {number}: metadata leader {before.leader}, the replica says {state['leader']}")
            old_pid = state["pid"]
            strict = StrictClient(cluster, topic, 0.0, scale.timeout_s)  # primed before the kill
            t0 = time.perf_counter()
            ray.kill(handle, no_restart=False)
            elected = self.election_watch(cluster, topic, before.leader, t0)
            restarted = Poller(
                lambda h=handle, pid=old_pid: ray.get(h.state.remote(), timeout=10)["pid"] != pid,
                t0,
                0.02,
                scale.timeout_s,
            )
            trial = self.probe_after_kill(
                cluster, topic, before.leader, old_pid, f"trial {number}: leader process", t0, strict, elected
            )
            restarted.join(max(0.0, t0 + scale.timeout_s - time.perf_counter()))
            restart.append(restarted.seconds)
            after = describe(cluster, topic)
            trial.new_leader, trial.epoch = after.leader, after.leader_epoch
            refill_start = time.perf_counter()
            self.full_isr(cluster, topic, f"process trial {number}: the ISR refilling after the kill")
            trial.refill_s = time.perf_counter() - refill_start + trial.probe.seconds
            new_pid = get(handle.state.remote(), scale.timeout_s, "restarted replica state")["pid"]
            if new_pid == old_pid:
                raise BenchError(f"trial {number}: the killed replica still runs as pid {old_pid}")
            trials.append(trial)
            print(
                f"[replication_bench]   process trial {number}: {trial.describe()}; Ray restarted the replica "
                f"{_seconds(restarted.seconds)}; ISR full after {trial.refill_s:.2f} s",
                file=sys.stderr,
                flush=True,
            )
        answered = [r for r in restart if r is not None]
        sub = []
        if answered:
            p50, worst = stats(answered)
            sub.append(
                Row(
                    "failover",
                    "  Ray restarted the killed replica (its first reply)",
                    trials=len(answered),
                    p50_s=p50,
                    max_s=worst,
                    values_s=answered,
                    note=f"s: {seconds_list(answered)}; state() calls from the driver on the killed handle "
                    "(an upper bound: a call caught by the death fails late, then the next one waits); "
                    "old pid "
                    f"gone after p50 {stats([t.gone_s for t in trials])[0] * 1000:.0f} ms",
                )
            )
        self.failover_rows(
            "leader process killed (ray.kill, restarted)",
            trials,
            [Target("p50_s", "<=", 2), Target("max_s", "<=", 5)],
            "ISR full again (from the kill)",
            sub,
        )

    def restart_baseline(self) -> None:
        """Ray alone: a plain actor with the replica's imports and restart options, killed
        like the leader; time until it answers again (from the driver, as the probes)."""
        scale = self.scale
        actor = ray.remote(RestartProbe).options(max_restarts=-1, max_task_retries=0, num_cpus=0).remote()
        times: list[float] = []
        try:
            for number in range(scale.process_trials):
                old_pid = get(actor.pid.remote(), scale.timeout_s, "plain actor")
                t0 = time.perf_counter()
                ray.kill(actor, no_restart=False)
                back = Poller(
                    lambda pid=old_pid: ray.get(actor.pid.remote(), timeout=10) != pid, t0, 0.02, scale.timeout_s
                )
                back.join(scale.timeout_s + 1)
                back.stop.set()
                if back.seconds is None:
                    raise BenchError(f"baseline trial {number}: the plain actor did not come back")
                times.append(back.seconds)
        finally:
            ray.kill(actor, no_restart=True)
        p50, worst = stats(times)
        self.rows.append(
            Row(
                "failover",
                "  baseline: plain Ray actor (same imports) killed: first reply",
                trials=len(times),
                p50_s=p50,
                max_s=worst,
                values_s=times,
                note=f"s: {seconds_list(times)}; max_restarts=-1, imports raylog.actors.replica; "
                "Ray's own restart time, no log recovery",
            )
        )

    def full_isr(self, cluster: RaylogCluster, topic: str, what: str):
        """The partition once its ISR holds every replica and it has a leader."""

        def check():
            p = describe(cluster, topic)
            return p if len(p.isr) == NUM_BROKERS and p.leader >= 0 else None

        try:
            return wait_for(check, self.scale.timeout_s, what, 0.05)
        except BenchError as exc:
            states = {}
            try:
                handles = get(cluster.controller.replica_handles.remote(topic), 10, "replica handles")
                for (_, broker), h in sorted(handles.items()):
                    try:
                        st = ray.get(h.state.remote(), timeout=5)
                        states[broker] = {
                            k: st[k] for k in ("leader", "leader_epoch", "isr", "high_watermark", "log_end_offset")
                        }
                    except Exception as inner:  # noqa: BLE001
                        states[broker] = short_error(inner)
            except Exception as inner:  # noqa: BLE001
                states["?"] = short_error(inner)
            raise BenchError(f"{exc}; controller: {describe(cluster, topic)}; replicas: {states}") from None

    def election_watch(self, cluster: RaylogCluster, topic: str, old_leader: int, t0: float) -> Poller:
        """A Poller of when the controller names a leader other than ``old_leader``."""
        return Poller(lambda: controller_leader(cluster, topic) not in (old_leader, -1), t0, 0.02, self.scale.timeout_s)

    def probe_after_kill(
        self,
        cluster: RaylogCluster,
        topic: str,
        old_leader: int,
        old_pid: int,
        what: str,
        t0: float,
        strict: StrictClient,
        elected: Poller,
    ) -> Trial:
        """Once the killed leader's process ``old_pid`` is gone, the measured write (from
        ``t0``, the kill) with the strict client running alongside."""
        wait_for(lambda: not pid_running(old_pid), 30, f"{what} {old_pid} exiting", 0.005)
        trial = Trial(old_leader, gone_s=time.perf_counter() - t0)
        strict.t0 = t0
        strict.start()
        trial.probe = first_acknowledged_write(cluster, topic, t0, self.scale.timeout_s)
        self.finish_watchers(trial, t0, strict, elected)
        return trial

    def finish_watchers(self, trial: Trial, t0: float, strict: StrictClient, elected: Poller) -> None:
        """Give the strict client until STRICT_GRACE_S after the measured write, then stop it."""
        strict.join(max(0.0, t0 + trial.probe.seconds + STRICT_GRACE_S - time.perf_counter()))
        strict.stop.set()
        strict.join(10)
        elected.join(max(0.0, t0 + self.scale.timeout_s - time.perf_counter()))
        elected.stop.set()
        trial.elected_s = elected.seconds
        trial.strict_s = strict.seconds
        trial.strict_failures = list(strict.failures)
        trial.strict_window_s = time.perf_counter() - t0

    def failover_rows(
        self,
        title: str,
        trials: list[Trial],
        targets: list[Target],
        refill_what: str,
        sub: list[Row],
        detection: list[float] | None = None,
    ) -> None:
        times = [t.probe.seconds for t in trials]
        p50, worst = stats(times)
        refreshed = [t for t in trials if t.probe.refreshes]
        moved = sum(t.new_leader != t.old_leader for t in trials)
        note = (
            f"s: {seconds_list(times)}; leader moved in {moved}/{len(trials)}; "
            f"{refill_what} p50 {stats([t.refill_s for t in trials])[0]:.1f} s"
        )
        if refreshed:
            note += (
                f"; in {len(refreshed)}/{len(trials)} trials a producer failed for good and the bench refreshed "
                f"the metadata before the next one (first failure: {refreshed[0].probe.failures[0][1]})"
            )
        retried = [t.probe.attempts for t in trials if t.probe.attempts and t.probe.attempts > 1]
        if retried:
            note += f"; the record was resent in {len(retried)} trials (up to {max(retried)} sends)"
        self.rows.append(
            Row(
                "failover",
                title + ": first acks=all write",
                trials=len(trials),
                p50_s=p50,
                max_s=worst,
                values_s=times,
                targets=targets,
                note=note,
            )
        )
        self.rows += sub
        elected = [t.elected_s for t in trials if t.elected_s is not None]
        if elected:
            p50, worst = stats(elected)
            self.rows.append(
                Row(
                    "failover",
                    "  controller elected a new leader",
                    trials=len(elected),
                    p50_s=p50,
                    max_s=worst,
                    values_s=elected,
                    note=f"s: {seconds_list(elected)}; direct controller.metadata() calls every 20 ms"
                    + (
                        ""
                        if len(elected) == len(trials)
                        else f"; NO new leader within the bound in {len(trials) - len(elected)} trials"
                    ),
                )
            )
        if detection is not None:
            over = [t.probe.seconds - d for t, d in zip(trials, detection, strict=True)]
            p50, worst = stats(over)
            self.rows.append(
                Row(
                    "failover",
                    "  first write minus Ray's detection time",
                    trials=len(over),
                    p50_s=p50,
                    max_s=worst,
                    values_s=over,
                    targets=[Target("max_s", "<=", 1.0)],
                    note=f"s: {seconds_list(over)}; the controller reads ray.nodes() every 200 ms",
                )
            )
        recovered = [t for t in trials if t.strict_s is not None]
        failed = [t for t in trials if t.strict_s is None]
        if failed:
            worst_trial = failed[0]
            last = worst_trial.strict_failures[-1] if worst_trial.strict_failures else (0.0, "no attempt")
            note = (
                f"did NOT recover in {len(failed)}/{len(trials)} trials: e.g. {len(worst_trial.strict_failures)} "
                f"fresh producers over {worst_trial.strict_window_s:.1f} s after the kill all failed (the new "
                f"leader was elected at {_seconds(worst_trial.elected_s)}), the last at {last[0]:.1f} s with "
                f"{last[1]}"
            )
            if recovered:
                note += f"; recovered in {len(recovered)} trials (s: {seconds_list([t.strict_s for t in recovered])})"
            self.rows.append(
                Row(
                    "failover",
                    "  client on its own (own metadata cache, no manual refresh)",
                    trials=len(trials),
                    verdict="FAIL",
                    note=note,
                )
            )
        else:
            values = [t.strict_s for t in trials]
            p50, worst = stats(values)
            self.rows.append(
                Row(
                    "failover",
                    "  client on its own (own metadata cache, no manual refresh)",
                    trials=len(trials),
                    p50_s=p50,
                    max_s=worst,
                    values_s=values,
                    verdict="OK",
                    note=f"s: {seconds_list(values)}; fresh producers every 0.1 s after a failure, "
                    "concurrently with the measured probe",
                )
            )

    # --- phase 3: multi-node Ray cluster, a node dies ---------------------------------------

    def node_failover(self) -> None:
        from ray.cluster_utils import Cluster

        if ray.is_initialized():
            raise BenchError("Ray is still initialized from the previous phase")
        scale = self.scale
        nodes: dict[int, Any] = {}
        data_root = os.path.join(self.workdir, "nodes")
        with contextlib.ExitStack() as stack:
            ray_cluster = Cluster(
                initialize_head=True,
                head_node_args={
                    "num_cpus": 1,
                    "object_store_memory": NODE_OBJECT_STORE_BYTES,
                    "_system_config": dict(FAST_FAILURE_DETECTION),
                },
            )
            stack.callback(ray_cluster.shutdown)
            stack.callback(ray.shutdown)

            def start_broker(broker_id: int) -> None:
                nodes[broker_id] = ray_cluster.add_node(
                    num_cpus=1,
                    object_store_memory=NODE_OBJECT_STORE_BYTES,
                    labels={
                        "raylog.broker": str(broker_id),
                        "raylog.data_dir": os.path.join(data_root, f"broker-{broker_id}"),
                    },
                )

            for broker_id in range(NUM_BROKERS):
                start_broker(broker_id)
            ray_cluster.wait_for_nodes(timeout=scale.timeout_s)
            ray.init(address=ray_cluster.address, configure_logging=False, log_to_driver=False)
            cluster = raylog.connect(
                address=ray_cluster.address,
                data_dir=os.path.join(self.workdir, "controller"),
                cluster_name=f"rn{uuid.uuid4().hex[:8]}",
                config=NODE_CONTROLLER_CONFIG,
            )
            stack.callback(cluster.shutdown)
            topic = f"repl-node-{uuid.uuid4().hex[:6]}"
            stack.callback(self.delete_topics, cluster, [topic], "the node-phase topic", request_timeout_ms=30_000)
            common.create_started(Admin(cluster), [NewTopic(topic, 1, replication_factor=3, config=dict(SAFE_TOPIC))])
            self.seed(cluster, topic)
            self._node_trials(cluster, topic, nodes, ray_cluster, start_broker)

    def _node_trials(self, cluster: RaylogCluster, topic: str, nodes: dict, ray_cluster, start_broker) -> None:
        scale = self.scale
        trials: list[Trial] = []
        detection: list[float] = []
        removal: list[float] = []
        for number in range(scale.node_trials):
            before = self.full_isr(cluster, topic, f"node trial {number}")
            handle = cluster.metadata(refresh=True).leader(TopicPartition(topic, 0))
            old_pid = get(handle.state.remote(), scale.timeout_s, "leader state")["pid"]
            node = nodes.pop(before.leader)
            node_id = node.node_id
            strict = StrictClient(cluster, topic, 0.0, scale.timeout_s)  # primed before the kill
            t0 = time.perf_counter()
            detected = Poller(
                lambda nid=node_id: any(n["NodeID"] == nid and not n["Alive"] for n in ray.nodes()),
                t0,
                DETECTION_POLL_S,
                scale.timeout_s,
            )
            elected = self.election_watch(cluster, topic, before.leader, t0)
            ray_cluster.remove_node(node, allow_graceful=False)
            removal.append(time.perf_counter() - t0)
            trial = self.probe_after_kill(
                cluster, topic, before.leader, old_pid, f"node trial {number}: leader", t0, strict, elected
            )
            detected.join(max(0.0, t0 + scale.timeout_s - time.perf_counter()))
            if detected.seconds is None:
                raise BenchError(
                    f"node trial {number}: Ray did not declare node {node_id[:8]} dead within {scale.timeout_s:.0f} s"
                )
            detection.append(detected.seconds)
            after = describe(cluster, topic)
            trial.new_leader, trial.epoch = after.leader, after.leader_epoch
            start_broker(before.leader)  # back with the same labels and data directory
            ray_cluster.wait_for_nodes(timeout=scale.timeout_s)
            refill_start = time.perf_counter()
            self.full_isr(
                cluster, topic, f"node trial {number}: the ISR refilling after broker {before.leader} rejoined"
            )
            trial.refill_s = time.perf_counter() - refill_start
            trials.append(trial)
            print(
                f"[replication_bench]   node trial {number}: {trial.describe()}; Ray declared the node dead after "
                f"{detected.seconds:.2f} s (remove_node returned after {removal[-1]:.2f} s); ISR full "
                f"{trial.refill_s:.1f} s after re-adding the node",
                file=sys.stderr,
                flush=True,
            )
        p50, worst = stats(detection)
        detection_row = Row(
            "failover",
            "  Ray declared the node dead (ray.nodes() Alive=False)",
            trials=len(detection),
            p50_s=p50,
            max_s=worst,
            values_s=detection,
            note=f"s: {seconds_list(detection)}; polled every {DETECTION_POLL_S * 1000:.0f} ms; "
            f"remove_node() returned after p50 {stats(removal)[0]:.2f} s, the leader's "
            f"process was gone after p50 {stats([t.gone_s for t in trials])[0]:.2f} s",
        )
        self.failover_rows(
            "leader node killed (remove_node)",
            trials,
            [],
            "ISR full again after re-adding the node",
            [detection_row],
            detection,
        )


# ---------------------------------------------------------------------------------------
# Output


TABLES = {
    "throughput": (
        (
            ("measurement", 62, None),
            ("records/s", 11, lambda r: common.number(r.records_per_s, ",.0f")),
            ("MB/s", 6, lambda r: common.number(r.mb_per_s, ",.1f")),
            ("RF3/RF1", 7, lambda r: common.times(r.ratio)),
        ),
        18,
    ),
    "failover": (
        (
            ("measurement", 62, None),
            ("trials", 6, lambda r: common.number(r.trials, "d")),
            ("p50 s", 6, lambda r: common.number(r.p50_s, ".2f")),
            ("max s", 6, lambda r: common.number(r.max_s, ".2f")),
        ),
        18,
    ),
}


def json_document(scale: Scale, messages: list[str]) -> dict[str, object]:
    return {
        "mode": scale.name,
        "scale": asdict(scale),
        "statistic": f"best of {scale.repeats} runs (throughput)",
        "mb": MB,
        "value_bytes": VALUE_BYTES,
        "durability": "no fsync (page cache); RF1 acks=1 vs RF3 acks=all min.insync.replicas=2",
        "failure_detection": FAST_FAILURE_DETECTION,
        "controller_config": NODE_CONTROLLER_CONFIG,
        "messages": messages,
    }


# ---------------------------------------------------------------------------------------
# Entry point


def run(scale: Scale, parent: str | None) -> Runner:
    with contextlib.ExitStack() as stack:
        runner = Runner(scale, common.temp_workdir(stack, "raylog-replication-bench-", parent))
        stack.callback(common.shutdown_ray)
        runner.phase("throughput", "embedded cluster (throughput, process fail-over)", runner.embedded)
        runner.phase("failover", "fail-over after the leader's node dies", runner.node_failover)
        return runner


DETECTION_HELP = """\
Shortening Ray's node-death detection (fail-over after a node dies waits for it):
  Ray's GCS health-checks every raylet each health_check_period_ms, each probe timing out after
  health_check_timeout_ms, and declares the node dead after health_check_failure_threshold failures in a
  row: about period x threshold. Ray's defaults (3000 ms, 10000 ms, 5) take ~15 s or more; this run used
  {used}.
  Set them where the head node (GCS) starts:
    ray.init(_system_config={{"health_check_period_ms": 500, "health_check_failure_threshold": 3,
                             "health_check_timeout_ms": 500}})                  # a local head
    Cluster(head_node_args={{"_system_config": {{...}}}})                          # ray.cluster_utils
    ray start --head --system-config='{{"health_check_period_ms": 500, ...}}'   # or RAY_health_check_period_ms=500
  raylog's controller then notices within node.check.interval.ms (default 500 ms, 200 here). Shorter periods
  cost more health-check traffic and risk declaring a briefly stalled node (GC pause, overload) dead."""


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    args = common.bench_parser(__doc__, "a fast smoke run (< 2 minutes)", prog).parse_args(argv)
    scale = QUICK if args.quick else FULL
    watch = common.RunWatch()
    with contextlib.redirect_stdout(sys.stderr):  # Ray prints dead raylets' logs: keep stdout for the tables
        runner = run(scale, args.dir)
    watch.stop()
    rows = runner.rows
    print(
        f"raylog replication benchmark, {scale.name} mode; durability: no fsync (page cache + replication, "
        "Kafka's default)"
    )
    print(
        f"throughput: embedded cluster, {NUM_BROKERS} brokers on this node, {VALUE_BYTES} B values, best of "
        f"{scale.repeats} runs ({scale.arrow_records:,} records for send_arrow, {scale.send_records:,} for send()); "
        "RF1 acks=1 vs RF3 acks=all min.insync.replicas=2; MB = 10^6 value bytes"
    )
    print(
        f"fail-over: time from the kill to the first acknowledged acks=all write of a fresh producer "
        f"({', '.join(f'{k}={v}' for k, v in PROBE_PRODUCER.items())}); {scale.process_trials} process trials, "
        f"{scale.node_trials} node trials"
    )
    print("BELOW: target missed; ERROR: the measurement failed (see stderr)")
    common.print_tables(rows, TABLES)
    print()
    print(DETECTION_HELP.format(used=", ".join(f"{k}={v}" for k, v in FAST_FAILURE_DETECTION.items())))
    print()
    return common.finish(
        rows,
        watch,
        args.json,
        json_document(scale, runner.messages),
        "the machine is shared: other work lowers throughput and lengthens fail-over",
        notes=runner.messages,
    )


if __name__ == "__main__":
    common.run_script(main)
