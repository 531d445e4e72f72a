"""Benchmark of reading a raylog topic through Ray Data and into Spark (RayDP), with
baselines measured in the same run.

Set-up: a local Ray started here (the embedded default's settings: a 512 MiB object store,
no dashboard, every CPU), one embedded raylog broker with its data in a temporary directory,
a topic of 6 partitions (replication factor 1) filled with ``send_arrow`` with N records of
100-byte values (keys ``user-<n>``, 500 distinct), and the same records (every column a read
with ``includeHeaders`` returns: Spark's Kafka source columns) written to Parquet in the same
directory, one file per partition, pyarrow's defaults (snappy). Everything is removed at the end.

What is measured (``time.perf_counter``, best of the repeats: the run least disturbed by
the rest of this 2-core machine):

1. Ray Data against a plain Consumer, before Spark starts (so both have every CPU):
   ``raylog.data.read_topic(topic)`` iterated in the driver with
   ``iter_batches(batch_size=None, batch_format="pyarrow")`` (one read task per partition,
   each a Consumer; blocks go through Ray's object store to the driver), against one
   ``Consumer`` assigned the 6 partitions from offset 0 calling ``poll_arrow()`` until N
   records came. Targets: Ray Data >= 0.8x the Consumer's records/s (meant at 10M records:
   ``--records 10000000``), and its first block in the driver within 0.5 s of ``read_topic``.
2. Spark (RayDP, ``raylog_spark.init_spark`` defaults: half the CPUs for executors) running
   one aggregate over every column, ``count(*), count(topic), max(partition), max(offset),
   max(timestamp), sum(length(key)), sum(length(value)), count(headers)`` and collecting
   it: on ``raylog_spark.read_topic(spark, topic, includeHeaders=True)`` by both of its paths, ``via="executors"``
   (the default: each partition range read by a Spark task on RayDP's executors, Arrow record
   batches through ``mapInArrow``) and ``via="ray_data"`` (Ray Data read, then the blocks as
   Arrow IPC bytes to RayDP's JVM reader), against ``spark.read.parquet`` of the Parquet copy.
   Target: the topic read >= 0.5x the Parquet read's records/s. Every run checks the count
   and the value bytes.

MB is 10^6 bytes of values.

Usage (or ``python -m raylog.benchmarks.spark_bench``)::

    raylog bench spark [--quick] [--records N] [--json PATH] [--dir PARENT]
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
import uuid
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import raylog
from raylog import Admin, Consumer, NewTopic, Producer, TopicPartition
from raylog.benchmarks import common
from raylog.benchmarks.common import MB, BenchError, Target, number, times
from raylog.clients.cluster import RaylogCluster
from raylog.errors import RaylogError

PARTITIONS = 6
#: Target: a Ray Data read hands its first block to the driver within this many seconds.
FIRST_BLOCK_S = 0.5
VALUE_BYTES = 100
DISTINCT_KEYS = 500
AGGREGATE = [
    "count(*) as records",
    "count(topic)",
    "max(partition)",
    "max(offset)",
    "max(timestamp)",
    "sum(length(key))",
    "sum(length(value)) as value_bytes",
    "count(headers)",
]


@dataclass(frozen=True)
class Scale:
    """How much work each measurement does."""

    name: str
    records: int
    repeats: int  # timed runs per measurement; the best is reported
    timeout_s: float  # bound on one read
    rounds: int = 1  # Spark rows measured this many times in one Spark session (the benchmark history's samples)


FULL = Scale("full", records=1_000_000, repeats=3, timeout_s=600.0)
QUICK = Scale("quick", records=100_000, repeats=1, timeout_s=180.0)


@dataclass
class Row(common.Judged):
    """One line of a results table; ``section`` says which table."""

    section: str  # "ray data" or "spark"
    name: str
    seconds: float | None = None
    records_per_s: float | None = None
    mb_per_s: float | None = None
    ratio: float | None = None  # records/s over the section's baseline
    targets: list[Target] = field(default_factory=list)
    note: str = ""
    error: str | None = None


def rate_row(section: str, name: str, seconds: float, count: int, **extra) -> Row:
    return Row(section, name, seconds, count / seconds, count * VALUE_BYTES / seconds / MB, **extra)


TABLE: common.Columns = [
    ("measurement", 44, None),
    ("s", 7, lambda r: number(r.seconds, ".2f")),
    ("records/s", 11, lambda r: number(r.records_per_s, ",.0f")),
    ("MB/s", 7, lambda r: number(r.mb_per_s, ".1f")),
    ("x base", 7, lambda r: times(r.ratio)),
]
TABLES = {"ray data": (TABLE, 10), "spark": (TABLE, 10)}


class Runner(common.Phases):
    """Fills the topic and the Parquet copy, then measures; rows go to ``self.rows``."""

    tag = "spark-bench"
    row_type = Row

    def __init__(self, cluster: RaylogCluster, scale: Scale, workdir: str):
        self.cluster, self.scale, self.workdir = cluster, scale, workdir
        self.rows: list[Row] = []
        self.topic = f"bench-{uuid.uuid4().hex[:8]}"
        self.parquet_dir = os.path.join(workdir, "parquet")

    def fill(self) -> None:
        Admin(self.cluster).create_topics([NewTopic(self.topic, num_partitions=PARTITIONS)])
        values = common.make_values(self.scale.records, VALUE_BYTES)
        keys = [b"user-%d" % (i % DISTINCT_KEYS) for i in range(self.scale.records)]
        with Producer(self.cluster, acks=1) as producer:
            producer.send_arrow(self.topic, pa.table({"key": pa.array(keys), "value": pa.array(values)}))
            producer.flush()
        os.makedirs(self.parquet_dir)
        with Consumer(self.cluster, self.topic, auto_offset_reset="earliest") as consumer:
            tables = read_all(consumer, self.scale)
        from raylog_spark.topics import RowShape  # (the spark extra; Spark runs below)

        rows = RowShape({self.topic: 0}, include_headers=True)  # the columns of a Spark read
        for partition in range(PARTITIONS):
            part = tables.filter(pc.equal(tables.column("partition"), partition))
            pq.write_table(rows.rows(part), os.path.join(self.parquet_dir, f"partition-{partition}.parquet"))

    def delete(self) -> None:
        with contextlib.suppress(RaylogError):
            Admin(self.cluster).delete_topics([self.topic])

    def ray_data(self) -> None:
        from raylog import data

        def consumer_run() -> float:
            start = time.perf_counter()
            with Consumer(self.cluster, auto_offset_reset="earliest") as consumer:
                consumer.assign([TopicPartition(self.topic, p) for p in range(PARTITIONS)])
                # Counted, not kept (as the Ray Data read below): tables kept pin the fetched
                # batches in Ray's object store, which then spills (10M records: 18 s, not 1).
                read_all(consumer, self.scale, keep=False)
            return time.perf_counter() - start

        first_blocks: list[float] = []

        def ray_data_run() -> float:
            start = time.perf_counter()
            dataset = data.read_topic(self.topic, cluster=self.cluster)
            count = 0
            for batch in dataset.iter_batches(batch_size=None, batch_format="pyarrow"):
                if not count:
                    first_blocks.append(time.perf_counter() - start)
                count += batch.num_rows
            seconds = time.perf_counter() - start
            check(count, self.scale.records, "Ray Data read")
            return seconds

        base = common.best(consumer_run, self.scale.repeats)
        self.rows.append(rate_row("ray data", "baseline: Consumer.poll_arrow, 6 partitions", base, self.scale.records))
        seconds = common.best(ray_data_run, self.scale.repeats)
        self.rows.append(
            rate_row(
                "ray data",
                "raylog.data.read_topic -> iter_batches",
                seconds,
                self.scale.records,
                ratio=base / seconds,
                targets=[Target("ratio", ">=", 0.8)],
                note="6 read tasks; blocks via the object store",
            )
        )
        self.rows.append(
            Row(
                "ray data",
                "read_topic: its first block in the driver",
                min(first_blocks),
                targets=[Target("seconds", "<=", FIRST_BLOCK_S)],
                note="from read_topic() to the first batch of iter_batches (the least of the runs)",
            )
        )

    def spark(self) -> None:
        import raydp

        import raylog_spark

        spark = raylog_spark.init_spark("raylog-spark-bench", configs={"spark.ui.enabled": "false"})
        try:
            spark.sparkContext.setLogLevel("ERROR")
            executors = spark.conf.get("spark.executor.instances")
            cores = spark.conf.get("spark.executor.cores")

            def parquet_run() -> float:
                return self.timed_aggregate(lambda: spark.read.parquet(self.parquet_dir), "parquet")

            def topic_run(via: str) -> float:
                return self.timed_aggregate(
                    lambda: raylog_spark.read_topic(
                        spark, self.topic, cluster=self.cluster, via=via, includeHeaders=True
                    ),
                    "topic",
                )

            for via in raylog_spark.READ_PATHS:
                topic_run(via)  # warm-up: the first workers and JIT of each read path
            parquet_run()
            for _ in range(self.scale.rounds):
                self._spark_rows(parquet_run, topic_run, f"{executors} executor(s) x {cores} core(s)")
        finally:
            raydp.stop_spark()

    def _spark_rows(self, parquet_run, topic_run, executors_note: str) -> None:
        """One round of the Spark rows: the Parquet read (the baseline), then each read path."""
        import raylog_spark

        base = common.best(parquet_run, self.scale.repeats)
        self.rows.append(
            rate_row(
                "spark", "baseline: spark.read.parquet (local disk)", base, self.scale.records, note=executors_note
            )
        )
        notes = {
            "executors": "Spark tasks on RayDP's executors, a Consumer each, mapInArrow (default)",
            "ray_data": "Ray Data read, then the blocks to RayDP's JVM reader",
        }
        for via in raylog_spark.READ_PATHS:
            seconds = common.best(lambda via=via: topic_run(via), self.scale.repeats)
            self.rows.append(
                rate_row(
                    "spark",
                    f"raylog_spark.read_topic(via={via!r})",
                    seconds,
                    self.scale.records,
                    ratio=base / seconds,
                    targets=[Target("ratio", ">=", 0.5)],
                    note=notes[via],
                )
            )

    def timed_aggregate(self, make_df, what: str) -> float:
        start = time.perf_counter()
        (row,) = make_df().selectExpr(*AGGREGATE).collect()
        seconds = time.perf_counter() - start
        check(row.records, self.scale.records, f"Spark {what} read")
        check(row.value_bytes, self.scale.records * VALUE_BYTES, f"Spark {what} read (value bytes)")
        return seconds


def read_all(consumer: Consumer, scale: Scale, keep: bool = True) -> pa.Table | None:
    """Every record of the consumer's partitions: ``poll_arrow`` until ``scale.records`` came
    (as one table, or None when not ``keep``)."""
    tables, count = [], 0
    deadline = time.monotonic() + scale.timeout_s
    while count < scale.records:
        if time.monotonic() > deadline:
            raise BenchError(f"only {count:,} of {scale.records:,} records within {scale.timeout_s:.0f} s")
        table = consumer.poll_arrow(timeout_ms=1_000)
        if keep:
            tables.append(table)
        count += table.num_rows
    check(count, scale.records, "Consumer read")
    return pa.concat_tables(tables) if keep else None


def check(got: int, expected: int, what: str) -> None:
    if got != expected:
        raise BenchError(f"{what}: {got:,} where {expected:,} were expected")


def run(scale: Scale, parent: str | None) -> list[Row]:
    """Every measurement on a fresh local Ray and raylog cluster, removed at the end."""
    with contextlib.ExitStack() as stack:
        workdir = common.temp_workdir(stack, "raylog-spark-bench-", parent)
        common.start_local_ray(stack)
        cluster = raylog.connect(data_dir=os.path.join(workdir, "data"), cluster_name=f"bench{uuid.uuid4().hex[:8]}")
        stack.callback(cluster.shutdown)
        runner = Runner(cluster, scale, workdir)
        stack.callback(runner.delete)
        runner.phase("ray data", "fill the topic and the Parquet copy", runner.fill)
        if runner.rows:  # filling failed: nothing to measure
            return runner.rows
        runner.phase("ray data", "Ray Data vs Consumer", runner.ray_data)
        runner.phase("spark", "Spark topic read vs Parquet read", runner.spark)
        return runner.rows


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = common.bench_parser(__doc__, "a fast smoke run (100,000 records, one run each)", prog)
    parser.add_argument("--records", type=int, help=f"records in the topic (default {FULL.records:,})")
    args = parser.parse_args(argv)
    common.require("pyspark", "raydp", extra="spark")
    scale = QUICK if args.quick else FULL
    if args.records:
        scale = dataclasses.replace(scale, records=args.records)
    watch = common.RunWatch()
    rows = run(scale, args.dir)
    watch.stop()
    print(
        f"raylog Ray Data / Spark read benchmark, {scale.name} mode: {scale.records:,} records of "
        f"{VALUE_BYTES} B in {PARTITIONS} partitions, embedded cluster, 1 broker; best of {scale.repeats} run(s)"
    )
    print("x base: records/s over the baseline of the same table (Consumer; spark.read.parquet)")
    print("BELOW: target missed; ERROR: the measurement failed (see stderr)")
    common.print_tables(rows, TABLES)
    print()
    document = {"mode": scale.name, "records": scale.records, "value_bytes": VALUE_BYTES, "partitions": PARTITIONS}
    return common.finish(rows, watch, args.json, document, "other work on the machine lowers every figure")


if __name__ == "__main__":
    common.run_script(main)
