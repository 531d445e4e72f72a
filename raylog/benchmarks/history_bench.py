"""Benchmark of reading a topic's history as Parquet (``remote.storage.history.enable``): Ray
Data's and Spark's reads of a tiered topic over the offsets its history files cover, against
``ray.data.read_parquet`` and ``spark.read.parquet`` of the very same files in the same run.

Set-up: a local Ray started here (the embedded default's settings), one embedded raylog broker
with its data and its remote store (``remote.log.storage.uri=file://...``) in a temporary
directory, one topic of 4 partitions (so reads run in parallel) with ``remote.storage.enable``
and ``remote.storage.history.enable``, 8 MiB segments (quick: 512 KiB, so each partition has
several files), ``local.retention.bytes`` one segment and ``retention.ms=-1``, filled with N
records (100-byte values, keys ``user-<n>``, ``send_arrow``). Then the run waits (at most
SETTLE_TIMEOUT_S) until every partition's leader has copied every closed segment, its history
manifest covers everything copied, contiguously from offset 0, and the files hold at least
80% of the records. Each read covers ``[0, history end)`` of every partition, the history
end being the end of that partition's last listed file, so both sides of each ratio read
exactly the same records (counted on both sides; a mismatch fails the row). Everything is
removed at the end.

What is measured (``time.perf_counter``, best of the repeats, the two sides of a ratio
alternating; each path warmed up once first):

1. Ray Data, before Spark starts (so both have every CPU): ``raylog.data.read_topic(topic,
   start=0, end=<history end>)`` iterated in the driver with ``iter_batches(batch_size=None,
   batch_format="pyarrow")`` (its read tasks read the files themselves), against
   ``ray.data.read_parquet`` of the files the manifests list, iterated the same way.
   Target: >= 0.9x the Parquet read's records/s.
2. Spark (RayDP, ``raylog_spark.init_spark`` defaults): ``raylog_spark.read_topic(spark, topic,
   start=..., end=...)`` by each of its read paths (``via="executors"``, the default, and
   ``via="ray_data"``), then ``count(*), sum(length(value))`` collected, against
   ``spark.read.parquet`` of the same files (``file://`` URIs) with the same aggregate.
   Target: >= 0.9x the Parquet read's records/s.

MB is 10^6 bytes of values.

Usage (or ``python -m raylog.benchmarks.history_bench``)::

    raylog bench tiered-history [--quick] [--records N] [--json PATH] [--dir PARENT]
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa
import ray

import raylog
from raylog import Admin, NewTopic, Producer
from raylog.benchmarks import common
from raylog.benchmarks.common import MB, BenchError, Target, number, times
from raylog.clients.cluster import RaylogCluster

PARTITIONS = 4
VALUE_BYTES = 100
DISTINCT_KEYS = 500
#: The least share of the records the history files must hold before the reads.
MIN_HISTORY_SHARE = 0.8
#: How long the leaders may take to copy the topic and write its history.
SETTLE_TIMEOUT_S = 300.0
#: How long everything closed may stay copied with less than MIN_HISTORY_SHARE in the files.
SHORT_HISTORY_S = 15.0
#: Target: each read of the history >= this x its Parquet baseline's records/s.
RATIO_TARGET = 0.9
AGGREGATE = ["count(*) as records", "sum(length(value)) as value_bytes"]


@dataclass(frozen=True)
class Scale:
    name: str
    records: int
    repeats: int
    segment_bytes: int


FULL = Scale("full", records=2_000_000, repeats=3, segment_bytes=8 << 20)
QUICK = Scale("quick", records=200_000, repeats=1, segment_bytes=512 << 10)


@dataclass
class Row(common.Judged):
    section: str  # "ray data" or "spark"
    name: str
    seconds: float | None = None
    records_per_s: float | None = None
    mb_per_s: float | None = None
    ratio: float | None = None  # records/s over the section's baseline
    targets: list[Target] = field(default_factory=list)
    note: str = ""
    error: str | None = None


TABLE: common.Columns = [
    ("measurement", 48, None),
    ("s", 7, lambda r: number(r.seconds, ".2f")),
    ("records/s", 11, lambda r: number(r.records_per_s, ",.0f")),
    ("MB/s", 7, lambda r: number(r.mb_per_s, ".1f")),
    ("x base", 7, lambda r: times(r.ratio)),
]
TABLES = {"ray data": (TABLE, 10), "spark": (TABLE, 10)}


class Runner(common.Phases):
    """Fills the topic, waits for its history, then measures; rows go to ``self.rows``."""

    tag = "history-bench"
    row_type = Row

    def __init__(self, cluster: RaylogCluster, scale: Scale):
        self.cluster, self.scale = cluster, scale
        self.rows: list[Row] = []
        self.topic = f"history-{uuid.uuid4().hex[:8]}"
        #: Per partition, the end (exclusive) of the history read from offset 0.
        self.ends: dict[int, int] = {}
        #: The history files of those ranges, every partition's in offset order.
        self.paths: list[str] = []
        self.records = 0  # records in the history files read (the count both sides must get)
        self.history_bytes = 0
        self._short_since: float | None = None

    # --- set-up ---------------------------------------------------------------------------

    def fill(self) -> None:
        config = {
            "remote.storage.enable": "true",
            "remote.storage.history.enable": "true",
            "segment.bytes": str(self.scale.segment_bytes),
            "local.retention.bytes": str(self.scale.segment_bytes),
            "retention.ms": "-1",
        }
        common.create_started(Admin(self.cluster), [NewTopic(self.topic, PARTITIONS, config=config)])
        self.settle(
            lambda states, _: all((s["tiering"] or {}).get("phase") == "running" for s in states.values()),
            "every partition's pump leading",
        )
        values = common.make_values(self.scale.records, VALUE_BYTES)
        keys = [b"user-%d" % (i % DISTINCT_KEYS) for i in range(self.scale.records)]
        table = pa.table({"key": pa.array(keys), "value": pa.array(values)})
        # A segment rolls between batches: slices of about an eighth of a segment a
        # partition, each flushed (the producer would otherwise merge them into batches
        # larger than a segment, and the active segment would hold much of the topic).
        step = max(1, PARTITIONS * self.scale.segment_bytes // (8 * (VALUE_BYTES + 20)))
        with Producer(self.cluster, acks=1) as producer:
            for start in range(0, self.scale.records, step):
                producer.send_arrow(self.topic, table.slice(start, step))
                producer.flush()
        plans = self.settle(self._history_caught_up, "its copies and history files")
        for p, plan in sorted(plans.items()):
            self.ends[p] = plan.history_end_offset
            self.paths.extend(plan.paths)
            self.records += sum(f.record_count for f in plan.files)
            self.history_bytes += sum(f.size_bytes for f in plan.files)
        if self.records != sum(self.ends.values()):
            raise BenchError(f"the history files hold {self.records:,} records for {sum(self.ends.values()):,} offsets")

    def _history_caught_up(self, states: dict[int, dict], plans: dict) -> bool:
        """Every partition's closed segments copied, its manifest covering all of them from
        offset 0 on, and the files holding MIN_HISTORY_SHARE of the records. Raises
        BenchError when all is copied but the files hold less, for SHORT_HISTORY_S: the
        active segments hold the rest, and nothing closes them."""
        for p, state in states.items():
            tiering = state["tiering"] or {}
            if tiering.get("copy_lag_segments", 1) or state["highest_remote_offset"] < 0:
                return False
            if plans[p].history_end_offset != state["highest_remote_offset"] + 1:
                return False
        covered = sum(plan.history_end_offset for plan in plans.values())
        if covered >= MIN_HISTORY_SHARE * self.scale.records:
            return True
        now = time.monotonic()
        self._short_since = self._short_since or now
        if now - self._short_since > SHORT_HISTORY_S:
            raise BenchError(
                f"{self.topic}: every closed segment is in the history, but only {covered:,} of "
                f"{self.scale.records:,} records (less than {MIN_HISTORY_SHARE:.0%}): the active segments hold the rest"
            )
        return False

    def settle(self, done: Callable[[dict[int, dict], dict], bool], what: str) -> dict:
        """The history plans from offset 0 of every partition once ``done(leader states,
        plans)``, polled; raises BenchError after SETTLE_TIMEOUT_S."""
        from raylog.clients.history import history_source
        from raylog.common.history_format import plan_history_read
        from raylog.common.object_store import filesystem_from_uri

        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        source = filesystem = None
        while True:
            states = self.leader_states()
            if source is None:
                source = history_source(self.cluster, self.topic)
                if source is None:
                    raise BenchError(f"{self.topic} keeps no history (remote.storage.history.enable not taken?)")
                filesystem, base = filesystem_from_uri(source.uri)
            plans = {p: plan_history_read(filesystem, base, source.name, p, 0) for p in states}
            if done(states, plans):
                return plans
            if time.monotonic() > deadline:
                keys = ("phase", "segments_copied", "copy_lag_segments", "history_failures", "last_error")
                summary = {
                    p: {
                        "log_end": s["log_end_offset"],
                        "segments": s["segments"],
                        "highest_copied": s["highest_remote_offset"],
                        "history_end": plans[p].history_end_offset,
                        **{k: (s["tiering"] or {}).get(k) for k in keys},
                    }
                    for p, s in states.items()
                }
                raise BenchError(f"{self.topic}: {what} not reached within {SETTLE_TIMEOUT_S:.0f} s: {summary}")
            time.sleep(0.5)

    def leader_states(self) -> dict[int, dict]:
        handles = common.get(self.cluster.controller.replica_handles.remote(self.topic), 60, "replica_handles")
        if len(handles) != PARTITIONS:
            raise BenchError(f"{self.topic}: {len(handles)} replicas for {PARTITIONS} partitions")
        states = common.get([h.state.remote() for h in handles.values()], 30, "the leaders' states")
        return {p: state for (p, _), state in zip(handles, states, strict=True)}

    def delete(self) -> None:
        with contextlib.suppress(Exception):
            Admin(self.cluster).delete_topics([self.topic])

    # --- measurements ---------------------------------------------------------------------

    def ray_data(self) -> None:
        from raylog import data

        def iterate(make: Callable[[], ray.data.Dataset], what: str) -> float:
            start = time.perf_counter()
            count = 0
            for batch in make().iter_batches(batch_size=None, batch_format="pyarrow"):
                count += batch.num_rows
            seconds = time.perf_counter() - start
            self.check(count, what)
            return seconds

        def parquet_run() -> float:
            # (as many read tasks as read_topic's, one a partition: Ray Data would otherwise
            # read a few dozen small files in one task)
            read = functools.partial(ray.data.read_parquet, self.paths, override_num_blocks=PARTITIONS)
            return iterate(read, "ray.data.read_parquet")

        def topic_run() -> float:
            starts = dict.fromkeys(self.ends, 0)
            return iterate(
                lambda: data.read_topic(self.topic, start=starts, end=dict(self.ends), cluster=self.cluster),
                "raylog.data.read_topic",
            )

        base, seconds = self.alternate(parquet_run, topic_run)
        self.rows.append(
            self.rate("ray data", "baseline: ray.data.read_parquet, the files", base, note=self.files_note)
        )
        self.rows.append(
            self.rate(
                "ray data",
                "raylog.data.read_topic, [0, history end)",
                seconds,
                ratio=base / seconds,
                targets=[Target("ratio", ">=", RATIO_TARGET)],
                note="iter_batches in the driver, both sides",
            )
        )

    def spark(self) -> None:
        import raydp

        import raylog_spark

        spark = raylog_spark.init_spark("raylog-history-bench", configs={"spark.ui.enabled": "false"})
        try:
            spark.sparkContext.setLogLevel("ERROR")
            executors = spark.conf.get("spark.executor.instances")
            cores = spark.conf.get("spark.executor.cores")
            uris = [f"file://{os.path.abspath(path)}" for path in self.paths]
            starts = dict.fromkeys(self.ends, 0)

            def parquet_run() -> float:
                return self.timed_aggregate(lambda: spark.read.parquet(*uris), "spark.read.parquet")

            def topic_run(via: str) -> float:
                return self.timed_aggregate(
                    lambda: raylog_spark.read_topic(
                        spark, self.topic, start=starts, end=dict(self.ends), cluster=self.cluster, via=via
                    ),
                    f"raylog_spark.read_topic(via={via!r})",
                )

            baseline: Row | None = None
            for via in raylog_spark.READ_PATHS:
                parquet, seconds = self.alternate(parquet_run, lambda via=via: topic_run(via))
                if baseline is None:
                    note = f"{executors} executor(s) x {cores} core(s); {self.files_note}"
                    baseline = self.rate("spark", "baseline: spark.read.parquet, the files", parquet, note=note)
                    self.rows.append(baseline)
                elif parquet < baseline.seconds:  # the best Parquet run of all: the table's baseline
                    baseline.seconds, baseline.records_per_s, baseline.mb_per_s = self.figures(parquet)
                self.rows.append(
                    self.rate(
                        "spark",
                        f"raylog_spark.read_topic(via={via!r})",
                        seconds,
                        ratio=parquet / seconds,
                        targets=[Target("ratio", ">=", RATIO_TARGET)],
                        note=f"{', '.join(AGGREGATE)}; x base: over the Parquet runs alternating with it",
                    )
                )
        finally:
            raydp.stop_spark()

    def alternate(self, base_run: Callable[[], float], run: Callable[[], float]) -> tuple[float, float]:
        """The best seconds of ``base_run`` and of ``run``, after a warm-up of each, the
        repeats alternating between them (so a noisy spell of the machine hits both)."""
        base_run()
        run()
        bases, runs = [], []
        for _ in range(self.scale.repeats):
            bases.append(base_run())
            runs.append(run())
        return min(bases), min(runs)

    def timed_aggregate(self, make_df, what: str) -> float:
        start = time.perf_counter()
        (row,) = make_df().selectExpr(*AGGREGATE).collect()
        seconds = time.perf_counter() - start
        self.check(row.records, what)
        if row.value_bytes != row.records * VALUE_BYTES:
            raise BenchError(f"{what}: {row.value_bytes:,} value bytes in {row.records:,} records")
        return seconds

    def check(self, got: int, what: str) -> None:
        if got != self.records:
            raise BenchError(f"{what}: {got:,} records where the history files hold {self.records:,}")

    @property
    def files_note(self) -> str:
        return f"{len(self.paths)} files, {self.history_bytes / MB:.0f} MB"

    def figures(self, seconds: float) -> tuple[float, float, float]:
        """Seconds, records/s and MB/s of a read of the history records taking ``seconds``."""
        return seconds, self.records / seconds, self.records * VALUE_BYTES / seconds / MB

    def rate(self, section: str, name: str, seconds: float, **extra) -> Row:
        return Row(section, name, *self.figures(seconds), **extra)


def run(scale: Scale, parent: str | None) -> tuple[list[Row], Runner | None]:
    """Every measurement on a fresh local Ray and raylog cluster, removed at the end."""
    with contextlib.ExitStack() as stack:
        workdir = common.temp_workdir(stack, "raylog-history-bench-", parent)
        common.start_local_ray(stack)
        cluster = raylog.connect(
            data_dir=os.path.join(workdir, "data"),
            cluster_name=f"bench{uuid.uuid4().hex[:8]}",
            config={"remote.log.storage.uri": f"file://{os.path.join(workdir, 'remote')}"},
        )
        stack.callback(cluster.shutdown)
        runner = Runner(cluster, scale)
        stack.callback(runner.delete)
        runner.phase("ray data", "fill the topic and wait for its history", runner.fill)
        if runner.rows:  # filling failed: nothing to measure
            return runner.rows, runner
        runner.phase("ray data", "Ray Data: history read vs read_parquet", runner.ray_data)
        runner.phase("spark", "Spark: history read vs spark.read.parquet", runner.spark)
        return runner.rows, runner


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = common.bench_parser(
        __doc__, f"a fast smoke run ({QUICK.records:,} records, 512 KiB segments, one run each)", prog
    )
    parser.add_argument("--records", type=int, help=f"records in the topic (default {FULL.records:,})")
    args = parser.parse_args(argv)
    common.require("pyspark", "raydp", extra="spark")
    scale = QUICK if args.quick else FULL
    if args.records:
        scale = dataclasses.replace(scale, records=args.records)
    watch = common.RunWatch()
    rows, runner = run(scale, args.dir)
    watch.stop()
    share = runner.records / scale.records if runner and scale.records else 0.0
    print(
        f"raylog history-as-Parquet read benchmark, {scale.name} mode: {scale.records:,} records of {VALUE_BYTES} B "
        f"in {PARTITIONS} partitions, {scale.segment_bytes >> 10} KiB segments, embedded cluster, 1 broker, "
        f"a file:// store; {share:.1%} of the records in history files, read from offset 0 to each partition's "
        f"history end; best of {scale.repeats} run(s)"
    )
    print("x base: records/s over the Parquet read of the same files (ray.data.read_parquet; spark.read.parquet)")
    print("BELOW: target missed; ERROR: the measurement failed (see stderr)")
    common.print_tables(rows, TABLES)
    print()
    document = {
        "mode": scale.name,
        "records": scale.records,
        "value_bytes": VALUE_BYTES,
        "partitions": PARTITIONS,
        "segment_bytes": scale.segment_bytes,
        "history_records": runner.records if runner else 0,
        "history_files": len(runner.paths) if runner else 0,
        "history_bytes": runner.history_bytes if runner else 0,
    }
    return common.finish(rows, watch, args.json, document, "other work on the machine lowers every figure")


if __name__ == "__main__":
    common.run_script(main)
