"""Entry point of the peers benchmark (``python -m raylog.benchmarks.peers``); see the package docstring."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from importlib import metadata

from raylog.benchmarks import common, peers
from raylog.benchmarks.common import BenchError, Target, number, times
from raylog.benchmarks.peers import servers
from raylog.benchmarks.peers.clients import BATCH, TIMEOUT_S

#: (records per throughput run, records of the synchronous mode)
FULL = (1_000_000, 2_000)
QUICK = (20_000, 200)
RECORD_BYTES = 100
#: A small object store: batches only pass through it (the machine is shared).
OBJECT_STORE_BYTES = 300 * 1024 * 1024
DEFAULT_PNG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results.png")
#: How long one client process may run (start-up, data generation, the measurement).
PROCESS_TIMEOUT_S = 3 * TIMEOUT_S

#: raylog's largest batch (max.message.bytes), for the extra row with as many bytes per call as the Queue's.
BIG_BATCH_BYTES = 8 * 1024 * 1024
#: The baselines every row is compared with: raylog's fast path, RF=1 and RF=3.
RF1, RF3 = "raylog RF=1 acks=1", "raylog RF=3 acks=all"
FAST, PER_RECORD, SYNC = "send_arrow/poll_arrow", "send()/poll()", "send().result()"
#: The sync mode's floor: a no-op call to a threaded Ray actor (as a replica is).
BARE = "bare Ray actor call"
#: Sync mode targets: raylog RF=1's p50 over the bare call's, RF=3's over RF=1's.
SYNC_RF1_VS_BARE, SYNC_RF3_VS_RF1 = 1.2, 3.0
MODES = ("produce", "consume", "sync")


@dataclass
class Row(common.Judged):
    """One line of the table: a system in one mode."""

    section: str  # the mode: produce, consume or sync
    name: str  # the system
    records_per_s: float | None = None
    mb_per_s: float | None = None
    vs_rf1: float | None = None
    vs_rf3: float | None = None
    ack_p50_ms: float | None = None
    ack_p99_ms: float | None = None
    ratio: float | None = None  # sync mode: ack p50 over its baseline's (see SYNC_RF1_VS_BARE)
    seconds: float | None = None
    records: int | None = None
    verdict: str | None = None
    targets: list[Target] = field(default_factory=list)
    note: str = ""
    error: str | None = None


class Runner(common.Phases):
    """Runs each system's client processes and keeps their rows."""

    tag = "peers"
    row_type = Row

    def __init__(self, records: int, sync_records: int):
        self.records, self.sync_records = records, sync_records
        self.rows: list[Row] = []

    def client(self, spec: dict) -> dict:
        """Run one client role in a process of its own; its result.

        Raises:
            BenchError: the process failed or timed out.
        """
        argv = [sys.executable, "-m", "raylog.benchmarks.peers.clients", json.dumps(spec)]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=PROCESS_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise BenchError(f"{spec['system']} {spec['role']}: no result within {PROCESS_TIMEOUT_S:g} s") from None
        if done.returncode != 0:
            tail = common.strip_ansi(done.stderr).strip().splitlines()[-3:]
            raise BenchError(f"{spec['system']} {spec['role']} exited with {done.returncode}: {' | '.join(tail)}")
        return json.loads(done.stdout.strip().splitlines()[-1])

    def system(self, name: str, spec: dict, modes: tuple[str, ...] = MODES) -> None:
        """produce, consume (and sync) rows of one system; each a phase of its own."""
        for mode in modes:
            count = self.sync_records if mode == "sync" else self.records
            self.phase(mode, name, lambda mode=mode, count=count: self._one(name, mode, count, spec))

    def _one(self, name: str, mode: str, count: int, spec: dict) -> None:
        role_spec = {**spec, "role": mode, "records": count, "record_size": RECORD_BYTES}
        result = self.client(role_spec)
        if result["records"] != count:
            raise BenchError(f"{name} {mode}: {result['records']:,} records, expected {count:,}")
        latency = result.get("ack_latency_ms") or {}
        self.rows.append(
            Row(
                mode,
                name,
                result["records_per_s"],
                result["mb_per_s"],
                ack_p50_ms=latency.get("p50_ms"),
                ack_p99_ms=latency.get("p99_ms"),
                seconds=result["seconds"],
                records=result["records"],
                note=result["note"],
            )
        )


# --- the systems --------------------------------------------------------------------------


def run_redis(runner: Runner, workdir: str) -> str:
    """The Redis rows; the server's version."""
    with servers.redis_server(workdir) as server:
        version = server.version().split()[2].removeprefix("v=")
        spec = {"system": "redis", "host": servers.LOOPBACK, "port": server.port, "key": "bench"}
        runner.system(f"Redis Streams {version}", spec)
        return version


def run_nats(runner: Runner, workdir: str) -> str:
    """The NATS JetStream rows (one file-store stream); the server's version."""
    with servers.nats_server(workdir) as server:
        version = server.version().split()[-1].removeprefix("v")
        asyncio.run(_add_stream(server.port, "BENCH", "bench"))
        spec = {"system": "nats", "host": servers.LOOPBACK, "port": server.port, "subject": "bench", "stream": "BENCH"}
        runner.system(f"NATS JetStream {version}", spec)
        return version


async def _add_stream(port: int, stream: str, subject: str) -> None:
    import nats
    from nats.js.api import StorageType

    client = await nats.connect(f"nats://{servers.LOOPBACK}:{port}")
    try:
        await client.jetstream().add_stream(name=stream, subjects=[subject], storage=StorageType.FILE)
    finally:
        await client.close()


def run_on_ray(runner: Runner, stack: contextlib.ExitStack, workdir: str) -> None:
    """A local Ray, the Queue, then raylog with 3 brokers; all shut down at the end."""
    import ray
    from ray.util.queue import Queue

    import raylog
    from raylog import Admin, NewTopic

    ray.init(
        address="local",
        num_cpus=os.cpu_count(),
        object_store_memory=OBJECT_STORE_BYTES,
        include_dashboard=False,
        configure_logging=False,
        log_to_driver=False,
        logging_level=logging.WARNING,
    )
    stack.callback(common.shutdown_ray)
    base = {"ray_address": ray.get_runtime_context().gcs_address, "namespace": f"peers-{uuid.uuid4().hex[:8]}"}

    runner.system(BARE, {**base, "system": "bare"}, ("sync",))

    def queue_phase() -> None:
        queue = Queue(actor_options={"num_cpus": 0})
        try:
            queue_file = os.path.join(workdir, "queue.pickle")
            with open(queue_file, "wb") as f:
                f.write(ray.cloudpickle.dumps(queue))
            runner.system("ray.util.queue.Queue", {**base, "system": "queue", "queue_file": queue_file})
        finally:
            queue.shutdown(force=True)

    runner.phase("produce", "ray.util.queue.Queue", queue_phase)
    cluster_name = f"peers{uuid.uuid4().hex[:8]}"
    cluster = raylog.connect(data_dir=os.path.join(workdir, "raylog"), num_brokers=3, cluster_name=cluster_name)
    stack.callback(cluster.shutdown)
    admin = Admin(cluster)
    for label, replication, acks in ((RF1, 1, "1"), (RF3, 3, "all")):
        for path, arrow in ((FAST, True), (PER_RECORD, False)):
            topic = f"peers-rf{replication}-{'arrow' if arrow else 'records'}"
            common.create_started(admin, [NewTopic(topic, num_partitions=1, replication_factor=replication)])
            spec = {
                **base,
                "system": "raylog",
                "cluster_name": cluster_name,
                "topic": topic,
                "acks": acks,
                "arrow": arrow,
            }
            try:
                runner.system(f"{label}, {path}", spec, ("produce", "consume"))
                if arrow:  # the synchronous mode sends record by record whatever the path: once
                    runner.system(f"{label}, {SYNC}", spec, ("sync",))
            finally:
                admin.delete_topics([topic])
    # As many bytes per call as the Queue's batches carry (50,000 x 100 B): raylog's largest batch.
    topic = "peers-rf1-arrow-8mib"
    common.create_started(admin, [NewTopic(topic, num_partitions=1, replication_factor=1)])
    spec = {
        **base,
        "system": "raylog",
        "cluster_name": cluster_name,
        "topic": topic,
        "acks": "1",
        "arrow": True,
        "batch_size": BIG_BATCH_BYTES,
    }
    try:
        runner.system(f"{RF1}, send_arrow, 8 MiB batches", spec, ("produce", "consume"))
    finally:
        admin.delete_topics([topic])


# --- output -------------------------------------------------------------------------------


def compare(rows: list[Row]) -> None:
    """Fill each row's ratios to raylog's fast path (RF=1 and RF=3; in the sync mode its
    send().result()) of the same mode, and the verdict of each peer's produce and consume rows."""
    for mode in MODES:
        chosen = [r for r in rows if r.section == mode and r.error is None]
        path = SYNC if mode == "sync" else FAST
        rf1 = next((r for r in chosen if r.name == f"{RF1}, {path}"), None)
        rf3 = next((r for r in chosen if r.name == f"{RF3}, {path}"), None)
        for row in chosen:
            row.vs_rf1 = row.records_per_s / rf1.records_per_s if rf1 else None
            row.vs_rf3 = row.records_per_s / rf3.records_per_s if rf3 else None
            if mode != "sync" and not row.name.startswith("raylog") and rf1 is not None:
                row.verdict = "raylog ahead" if rf1.records_per_s > row.records_per_s else "PEER AHEAD"
    synced = {r.name: r for r in rows if r.section == "sync" and r.error is None}
    for name, base, limit, what in (
        (f"{RF1}, {SYNC}", BARE, SYNC_RF1_VS_BARE, "the bare call's"),
        (f"{RF3}, {SYNC}", f"{RF1}, {SYNC}", SYNC_RF3_VS_RF1, "RF=1's"),
    ):
        row, baseline = synced.get(name), synced.get(base)
        if row is not None and baseline is not None and row.ack_p50_ms and baseline.ack_p50_ms:
            row.ratio = row.ack_p50_ms / baseline.ack_p50_ms
            row.targets = [Target("ratio", "<=", limit)]
            row.note = f"{row.note}; p50 ratio: over {what}"


COLUMNS = (
    ("system", 50, None),
    ("mode", 7, lambda r: r.section),
    ("records/s", 11, lambda r: number(r.records_per_s, ",.0f")),
    ("MB/s", 7, lambda r: number(r.mb_per_s, ",.1f")),
    ("x RF=1", 7, lambda r: times(r.vs_rf1)),
    ("x RF=3", 7, lambda r: times(r.vs_rf3)),
    ("ack p50 ms", 10, lambda r: number(r.ack_p50_ms, ".3f")),
    ("ack p99 ms", 10, lambda r: number(r.ack_p99_ms, ".3f")),
    ("p50 ratio", 9, lambda r: times(r.ratio)),
)


def arranged(rows: list[Row]) -> list[Row]:
    """Mode by mode, in the order the systems ran."""
    return [r for mode in MODES for r in rows if r.section == mode]


def header(records: int, sync_records: int, versions: dict[str, str]) -> list[str]:
    from raylog.config import NEVER, LogConfig

    log = LogConfig()

    def never(value: int) -> str:
        return "never" if value == NEVER else str(value)

    return [
        f"peers benchmark: {records:,} records of {RECORD_BYTES} B, one producer process then one consumer process "
        f"from the start; sync mode: {sync_records:,} records one at a time, each acknowledged before the next",
        f"durability: raylog flush.messages={never(log.flush_messages)}, flush.ms={never(log.flush_ms)} (LogConfig "
        "defaults, Kafka's: acknowledged = in the page cache of the leader, or of every in-sync replica for acks=all);",
        f"  Redis {servers.REDIS_DURABILITY}; NATS {servers.NATS_DURABILITY}; ray.util.queue.Queue: memory only",
        f"raylog: 3 embedded brokers, 1-partition topics, {FAST} is Producer.send_arrow (batch-sized pyarrow tables "
        f"of values) + Consumer.poll_arrow; {PER_RECORD} is send() per record + poll() -> Record objects",
        f"peer bulk sizes: {', '.join(f'{k} {v:,}' for k, v in BATCH.items())}",
        "x RF=1 / x RF=3: records/s over raylog's (RF=1 / RF=3) in the same mode, fast path for produce and "
        "consume; "
        "MB = 10^6 bytes of values; ack latency: sync mode only; p50 ratio: raylog RF=1's sync p50 over the "
        f"bare Ray actor call's (target <= {SYNC_RF1_VS_BARE:g}x), RF=3's over RF=1's (<= {SYNC_RF3_VS_RF1:g}x)",
        "versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()),
    ]


def versions() -> dict[str, str]:
    found = {}
    for package in ("ray", "pyarrow", "redis", "hiredis", "nats-py"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "missing"
    return found


def write_png(path: str, rows: list[Row]) -> None:
    """Bars of records/s per system for produce and consume (log scale), and of the sync
    mode's acknowledgement latency p50/p99."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_key = {(r.section, r.name): r for r in rows if r.error is None}
    systems = list(dict.fromkeys(name for mode, name in by_key if mode != "sync"))
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.5), gridspec_kw={"width_ratios": [3, 2]})
    width = 0.4
    for i, mode in enumerate(("produce", "consume")):
        heights = [getattr(by_key.get((mode, s)), "records_per_s", 0) or 0 for s in systems]
        left.bar([x + (i - 0.5) * width for x in range(len(systems))], heights, width, label=mode)
    left.set_yscale("log")
    left.set_ylabel("records/s (100 B values, log scale)")
    left.set_xticks(range(len(systems)), [_short(s) for s in systems], rotation=30, ha="right", fontsize=8)
    left.legend()
    left.set_title("throughput, one producer then one consumer process")
    synced = [name for mode, name in by_key if mode == "sync"]
    for i, (attribute, label) in enumerate((("ack_p50_ms", "p50"), ("ack_p99_ms", "p99"))):
        heights = [getattr(by_key[("sync", s)], attribute) or 0 for s in synced]
        right.bar([x + (i - 0.5) * width for x in range(len(synced))], heights, width, label=label)
    right.set_yscale("log")
    right.set_ylabel("acknowledgement latency, ms (log scale)")
    right.set_xticks(range(len(synced)), [_short(s) for s in synced], rotation=30, ha="right", fontsize=8)
    right.legend()
    right.set_title("sync mode: one record at a time")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def _short(system: str) -> str:
    return system.replace(", ", "\n", 1)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = common.bench_parser(peers.__doc__, "a fast smoke run: 20,000 records, 200 in the sync mode", prog)
    parser.add_argument("--records", type=int, help=f"records per throughput run (default {FULL[0]:,})")
    parser.add_argument("--png", default=DEFAULT_PNG, help="bar chart path (default: results.png beside this module)")
    args = parser.parse_args(argv)
    common.require("redis", "nats", *(["matplotlib"] if args.png else []))
    records, sync_records = QUICK if args.quick else FULL
    if args.records:
        records, sync_records = args.records, min(sync_records, args.records)
    runner = Runner(records, sync_records)
    watch = common.RunWatch()
    server_versions: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        workdir = common.temp_workdir(stack, "raylog-peers-", args.dir)
        runner.phase("produce", "Redis", lambda: server_versions.update(redis=run_redis(runner, workdir)))
        runner.phase("produce", "NATS", lambda: server_versions.update(nats=run_nats(runner, workdir)))
        runner.phase("produce", "Ray", lambda: run_on_ray(runner, stack, workdir))
    watch.stop()
    compare(runner.rows)
    all_versions = {**versions(), **server_versions}
    for line in header(records, sync_records, all_versions):
        print(line)
    print()
    print(common.format_table(COLUMNS, arranged(runner.rows), target_width=8))
    print()
    print(common.totals_line(watch.seconds, common.environment(with_ray=False)))
    watch.print_load("other work on the machine lowers every figure")
    watch.print_sources()
    if args.png:
        write_png(args.png, runner.rows)
        print(f"chart: {args.png}")
    if args.json:
        common.dump_json(
            args.json,
            {
                "records": records,
                "sync_records": sync_records,
                "record_bytes": RECORD_BYTES,
                "mb": common.MB,
                "header": header(records, sync_records, all_versions),
                "versions": all_versions,
                **watch.json_fields(),
                "environment": common.environment(with_ray=False),
                "results": common.rows_json(arranged(runner.rows)),
            },
        )
    return 1 if any(r.error for r in runner.rows) else 0


if __name__ == "__main__":
    common.run_script(main)
