"""Benchmark of fan-in on one leader: many acks=all produces at once (issue 25's target: 256
concurrent acks=all produces on one RF3 leader with ``min.insync.replicas=2`` all answer
within their timeout, with no demotion and no ISR change).

What is measured, all in one run, on an embedded cluster of three brokers on this node:

- ``bare actor`` (the floor): a burst of N calls at once to a plain threaded actor with the
  replica's produce pool (``max_concurrency`` = ``MAX_CONCURRENCY``) whose method answers
  at once: what Ray's queueing alone costs a burst of that size.
- ``RF1 acks=1``: the same burst of one-record produces on a replication-factor-1 leader.
- ``RF3 acks=all``: the same burst on a replication-factor-3 leader (``min.insync.replicas=2``):
  each produce waits until both followers fetched it (the followers' fetches run in the
  leader's ``replication`` pool, not behind the parked produces).

Each call's latency is from the moment the whole burst was sent to its answer; after one
warm-up burst per kind, bursts are repeated and every call's latency pooled; p50, p99 and max
are nearest-rank. Every answer must be a success, and the RF3 partition's metadata (leader,
leader epoch, ISR, partition epoch) must be the same after the bursts as before: a demotion
or an ISR change is an ERROR row, not a slow one. Ratios are p99 against the bare actor's p99
in the same run (the machine is shared and noisy).

Usage (or ``python -m raylog.benchmarks.fanin_bench``)::

    raylog bench fanin [--quick] [--json PATH] [--dir PARENT]
"""

from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass, field

import ray

import raylog
from raylog import Admin, NewTopic
from raylog.actors.replica import MAX_CONCURRENCY
from raylog.benchmarks import common
from raylog.benchmarks.common import BenchError, get
from raylog.benchmarks.perf import nearest_rank
from raylog.common import record_batch
from raylog.protocol import ProduceRequest

NUM_BROKERS = 3
SAFE_TOPIC = {"min.insync.replicas": "2"}
#: Each produce's own timeout (Kafka's request.timeout.ms default).
PRODUCE_TIMEOUT_MS = 30_000


@dataclass(frozen=True)
class Scale:
    name: str
    burst: int  # calls sent at once
    bursts: int  # bursts per kind, latencies pooled
    timeout_s: float


FULL = Scale("full", burst=256, bursts=10, timeout_s=120.0)
QUICK = Scale("quick", burst=256, bursts=2, timeout_s=120.0)


@dataclass
class Row(common.Judged):
    name: str
    calls: int | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None
    ratio: float | None = None  # p99 / the bare actor's p99
    error: str | None = None
    note: str = ""
    section: str = "fan-in"
    targets: list = field(default_factory=list)


COLUMNS = [
    ("kind", 16, lambda r: r.name),
    ("calls", 7, lambda r: common.number(r.calls, ",d")),
    ("p50 ms", 8, lambda r: common.number(r.p50_ms, ".1f")),
    ("p99 ms", 8, lambda r: common.number(r.p99_ms, ".1f")),
    ("max ms", 8, lambda r: common.number(r.max_ms, ".1f")),
    ("p99/floor", 10, lambda r: common.times(r.ratio)),
]


class BareActor:
    """The floor: a threaded actor that answers at once."""

    def produce(self, request: ProduceRequest) -> int:
        return 0


def burst_latencies(send_all, timeout_s: float, check=None) -> list[float]:
    """Send a burst (``send_all()`` -> refs), return each call's seconds from the send to its
    answer; ``check(answer)`` raises on a wrong one."""
    started = time.perf_counter()
    pending = list(send_all())
    latencies = []
    deadline = started + timeout_s
    while pending:
        done, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, deadline - time.perf_counter()))
        if not done:
            raise BenchError(f"{len(pending)} calls of a burst unanswered after {timeout_s:.0f} s")
        latencies.append(time.perf_counter() - started)
        if check is not None:
            check(ray.get(done[0]))
    return latencies


def measure(name: str, scale: Scale, send_all, check=None) -> Row:
    pooled: list[float] = []
    try:
        burst_latencies(send_all, scale.timeout_s, check)  # warm-up: not counted
        for _ in range(scale.bursts):
            pooled += burst_latencies(send_all, scale.timeout_s, check)
    except (BenchError, ray.exceptions.RayError) as exc:
        message = common.strip_ansi(str(exc))[:300]
        return Row(name, error=message, note=message)
    pooled.sort()
    return Row(
        name,
        calls=len(pooled),
        p50_ms=nearest_rank(pooled, 0.50) * 1000,
        p99_ms=nearest_rank(pooled, 0.99) * 1000,
        max_ms=pooled[-1] * 1000,
    )


def leader_of(cluster, topic: str):
    info = Admin(cluster).describe_topics([topic])[0].partitions[0]
    handles = get(cluster.controller.replica_handles.remote(topic), 60, "the replicas' handles")
    return info, handles[(0, info.leader)]


def produce_burst(leader, scale: Scale, acks: int):
    def send_all():
        return [
            leader.produce.remote(
                ProduceRequest(record_batch.build([b"%05d" % i]), acks=acks, timeout_ms=PRODUCE_TIMEOUT_MS)
            )
            for i in range(scale.burst)
        ]

    return send_all


def succeeded(answer) -> None:
    if answer.error_code:
        raise BenchError(f"a produce failed: error {answer.error_code} {answer.error_message}")


def run(scale: Scale, parent: str | None) -> list[Row]:
    rows: list[Row] = []
    with contextlib.ExitStack() as stack:
        workdir = common.temp_workdir(stack, "raylog-fanin-", parent)
        common.start_local_ray(stack, ship=__name__)
        cluster = raylog.connect(data_dir=workdir, num_brokers=NUM_BROKERS, cluster_name="fanin")
        stack.callback(cluster.shutdown)
        admin = Admin(cluster)
        admin.create_topics(
            [NewTopic("fanin-rf1", 1, replication_factor=1), NewTopic("fanin-rf3", 1, 3, config=SAFE_TOPIC)],
            wait_for_leaders_ms=60_000,
        )
        bare = ray.remote(BareActor).options(num_cpus=0, max_concurrency=MAX_CONCURRENCY).remote()
        request = ProduceRequest(record_batch.build([b"x"]))
        rows.append(measure("bare actor", scale, lambda: [bare.produce.remote(request) for _ in range(scale.burst)]))
        _, rf1 = leader_of(cluster, "fanin-rf1")
        rows.append(measure("RF1 acks=1", scale, produce_burst(rf1, scale, 1), succeeded))
        deadline = time.monotonic() + scale.timeout_s
        while len(admin.describe_topics(["fanin-rf3"])[0].partitions[0].isr) < NUM_BROKERS:
            if time.monotonic() > deadline:
                raise BenchError("the RF3 partition's ISR did not fill")
            time.sleep(0.1)
        before, rf3 = leader_of(cluster, "fanin-rf3")
        row = measure("RF3 acks=all", scale, produce_burst(rf3, scale, -1), succeeded)
        after = admin.describe_topics(["fanin-rf3"])[0].partitions[0]
        if after != before and row.error is None:
            row.error = row.note = f"the partition changed under load: {before} -> {after}"
        rows.append(row)
    floor = rows[0].p99_ms
    for r in rows:
        if r.p99_ms is not None and floor:
            r.ratio = r.p99_ms / floor
    return rows


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    args = common.bench_parser(__doc__, "two bursts per kind instead of ten", prog).parse_args(argv)
    scale = QUICK if args.quick else FULL
    watch = common.RunWatch()
    with contextlib.redirect_stdout(sys.stderr):
        rows = run(scale, args.dir)
    watch.stop()
    print(f"raylog fan-in benchmark, {scale.name} mode: bursts of {scale.burst} one-record produces at once on one")
    print(
        f"leader ({scale.bursts} bursts per kind, latencies pooled, from the burst's send to each answer); "
        f"embedded cluster of {NUM_BROKERS} brokers; RF3 with min.insync.replicas=2; ERROR: a failure, a demotion "
        "or an ISR change"
    )
    print()
    print(common.format_table(COLUMNS, rows))
    print()
    return common.finish(
        rows,
        watch,
        args.json,
        {"benchmark": "fanin", "scale": scale.name},
        "the machine is shared: other work lengthens every burst",
    )


if __name__ == "__main__":
    common.run_script(main)
