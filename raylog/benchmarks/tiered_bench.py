"""Benchmark of tiered storage (KIP-405): a Consumer reading a topic's history from the remote
tier, against the same records read from a broker's local log in the same run, and the local
disk held under ``local.retention.bytes`` while the topic grows to many times that.

Set-up: a local Ray started here (the embedded default's settings), one embedded raylog broker
with its data and its remote store (``remote.log.storage.uri=file://...``) in a temporary
directory, two 1-partition topics filled with the same N records (100-byte values, keys
``user-<n>``, ``send_arrow``): ``local`` (as every topic) and ``tiered``
(``remote.storage.enable``, 8 MiB segments, ``local.retention.bytes`` one segment, so all but
the newest segments are read from the store). The tiered topic is written in rounds of 2 MB
of values, at 16 MB/s at most (a sustained stream: a burst outruns any copier); after each the
broker's local size of the partition is sampled (the pump copies and deletes while it grows).
Everything is removed at the end.

What is measured (``time.perf_counter``, best of the repeats):

1. One ``Consumer`` assigned the partition from offset 0, ``poll_arrow`` until N records came:
   on ``local`` (the baseline) and on ``tiered``, whose records below the local log start come
   from the store (4 MiB chunks, prefetched). Target: the remote read >= 0.5x the local read's
   records/s (meant at 10M records: ``--records 10000000``).
2. The largest local size of the tiered partition sampled while it was written (once its
   pump leads), over ``local.retention.bytes``: at most 1 + 2 x segment.bytes /
   local.retention.bytes (a closed segment being copied, and the active one) while the topic
   grows to many times that (30x at the default 2M records).

MB is 10^6 bytes of values.

Usage (or ``python -m raylog.benchmarks.tiered_bench``)::

    raylog bench tiered [--quick] [--records N] [--json PATH] [--dir PARENT]
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
import uuid
from dataclasses import dataclass, field

import pyarrow as pa
import ray

import raylog
from raylog import Admin, Consumer, NewTopic, Producer, TopicPartition
from raylog.benchmarks import common
from raylog.benchmarks.common import MB, BenchError, Target, number, times
from raylog.clients.cluster import RaylogCluster

VALUE_BYTES = 100
SEGMENT_BYTES = 8 << 20
LOCAL_RETENTION_BYTES = SEGMENT_BYTES
#: The tiered topic is written in rounds of this many bytes of values, its local size sampled
#: after each (a quarter of a segment: rounds of a fixed count grew with --records, and at 10M
#: records each was three segments sent at once, a burst, not a stream)...
ROUND_BYTES = 2_000_000
#: ...at this rate at most (a sustained stream; a burst outruns any copier, Kafka's too).
FILL_BYTES_PER_S = 16_000_000
#: How long the pump may take to copy and delete what the last round wrote.
SETTLE_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Scale:
    name: str
    records: int
    repeats: int
    timeout_s: float


FULL = Scale("full", records=2_000_000, repeats=3, timeout_s=600.0)
QUICK = Scale("quick", records=300_000, repeats=1, timeout_s=180.0)


@dataclass
class Row(common.Judged):
    section: str
    name: str
    seconds: float | None = None
    records_per_s: float | None = None
    mb_per_s: float | None = None
    ratio: float | None = None
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
TABLES = {"reads": (TABLE, 10), "disk": (TABLE, 10)}


class Runner(common.Phases):
    """Fills both topics, then measures; rows go to ``self.rows``."""

    tag = "tiered-bench"
    row_type = Row

    def __init__(self, cluster: RaylogCluster, scale: Scale):
        self.cluster, self.scale = cluster, scale
        self.rows: list[Row] = []
        suffix = uuid.uuid4().hex[:8]
        self.local, self.tiered = f"local-{suffix}", f"tiered-{suffix}"
        self.largest_local_bytes = 0

    def fill(self) -> None:
        admin = Admin(self.cluster)
        tiered = {
            "remote.storage.enable": "true",
            "segment.bytes": str(SEGMENT_BYTES),
            "local.retention.bytes": str(LOCAL_RETENTION_BYTES),
            "retention.ms": "-1",
        }
        common.create_started(admin, [NewTopic(self.local, 1), NewTopic(self.tiered, 1, config=tiered)])
        self.settle(lambda state: (state["tiering"] or {}).get("phase") == "running", "its pump leading")
        values = common.make_values(self.scale.records, VALUE_BYTES)
        keys = [b"user-%d" % (i % 500) for i in range(self.scale.records)]
        table = pa.table({"key": pa.array(keys), "value": pa.array(values)})
        step = ROUND_BYTES // VALUE_BYTES
        with Producer(self.cluster, acks=1) as producer:
            producer.send_arrow(self.local, table)
            began = time.monotonic()
            for start in range(0, self.scale.records, step):
                producer.send_arrow(self.tiered, table.slice(start, step))
                producer.flush()
                self.largest_local_bytes = max(self.largest_local_bytes, self.tiered_state()["size_bytes"])
                due = began + (start + step) * VALUE_BYTES / FILL_BYTES_PER_S
                time.sleep(max(0.0, due - time.monotonic()))
        state = self.settle(
            lambda state: not state["tiering"]["copy_lag_segments"] and state["size_bytes"] <= 2 * SEGMENT_BYTES,
            "its copies and local deletions",
        )
        if state["local_log_start_offset"] == 0:
            raise BenchError("nothing of the tiered topic left the local disk")

    def settle(self, done, what: str) -> dict:
        """The tiered partition's leader state once ``done(state)``, polled."""
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while not done(state := self.tiered_state()):
            if time.monotonic() > deadline:
                raise BenchError(f"the tiered topic: {what} not reached within {SETTLE_TIMEOUT_S:.0f} s: {state}")
            time.sleep(0.2)
        return state

    def tiered_state(self) -> dict:
        (handle,) = ray.get(self.cluster.controller.replica_handles.remote(self.tiered)).values()
        return ray.get(handle.state.remote(), timeout=30)

    def delete(self) -> None:
        with contextlib.suppress(Exception):
            Admin(self.cluster).delete_topics([self.local, self.tiered])

    def reads(self) -> None:
        def read(topic: str) -> float:
            start = time.perf_counter()
            with Consumer(self.cluster, auto_offset_reset="earliest") as consumer:
                consumer.assign([TopicPartition(topic, 0)])
                count, deadline = 0, time.monotonic() + self.scale.timeout_s
                while count < self.scale.records:
                    if time.monotonic() > deadline:
                        raise BenchError(f"{topic}: {count:,} of {self.scale.records:,} records in time")
                    count += consumer.poll_arrow(timeout_ms=1_000).num_rows
            if count != self.scale.records:
                raise BenchError(f"{topic}: {count:,} records where {self.scale.records:,} were expected")
            return time.perf_counter() - start

        base = common.best(lambda: read(self.local), self.scale.repeats)
        self.rows.append(self.rate("baseline: Consumer, a local log", base))
        remote = common.best(lambda: read(self.tiered), self.scale.repeats)
        state = self.tiered_state()
        local_share = 1 - state["local_log_start_offset"] / self.scale.records
        self.rows.append(
            self.rate(
                "Consumer, the same records from the remote tier",
                remote,
                ratio=base / remote,
                targets=[Target("ratio", ">=", 0.5)],
                note=f"{local_share:.1%} of them still local; file:// store",
            )
        )
        self.rows.append(
            Row(
                "disk",
                "largest local size / local.retention.bytes",
                ratio=self.largest_local_bytes / LOCAL_RETENTION_BYTES,
                targets=[Target("ratio", "<=", 1 + 2 * SEGMENT_BYTES / LOCAL_RETENTION_BYTES)],
                note=f"the topic grew to {state['log_end_offset'] * (VALUE_BYTES + 20) / LOCAL_RETENTION_BYTES:.0f}x",
            )
        )

    def rate(self, name: str, seconds: float, **extra) -> Row:
        records = self.scale.records
        return Row("reads", name, seconds, records / seconds, records * VALUE_BYTES / seconds / MB, **extra)


def run(scale: Scale, parent: str | None) -> list[Row]:
    with contextlib.ExitStack() as stack:
        workdir = common.temp_workdir(stack, "raylog-tiered-bench-", parent)
        common.start_local_ray(stack)
        cluster = raylog.connect(
            data_dir=os.path.join(workdir, "data"),
            cluster_name=f"bench{uuid.uuid4().hex[:8]}",
            config={"remote.log.storage.uri": f"file://{os.path.join(workdir, 'remote')}"},
        )
        stack.callback(cluster.shutdown)
        runner = Runner(cluster, scale)
        stack.callback(runner.delete)
        runner.phase("reads", "fill both topics", runner.fill)
        if runner.rows:
            return runner.rows
        runner.phase("reads", "remote-tier read vs local read", runner.reads)
        return runner.rows


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = common.bench_parser(__doc__, f"a fast smoke run ({QUICK.records:,} records, one run each)", prog)
    parser.add_argument("--records", type=int, help=f"records in each topic (default {FULL.records:,})")
    args = parser.parse_args(argv)
    scale = QUICK if args.quick else FULL
    if args.records:
        scale = dataclasses.replace(scale, records=args.records)
    watch = common.RunWatch()
    rows = run(scale, args.dir)
    watch.stop()
    print(
        f"raylog tiered storage benchmark, {scale.name} mode: {scale.records:,} records of {VALUE_BYTES} B, "
        f"1 partition, embedded cluster, 1 broker, a file:// store; best of {scale.repeats} run(s)"
    )
    print("x base: records/s over the local read's (reads); the largest local size over local.retention.bytes (disk)")
    print("BELOW: target missed; ERROR: the measurement failed (see stderr)")
    common.print_tables(rows, TABLES)
    print()
    document = {"mode": scale.name, "records": scale.records, "value_bytes": VALUE_BYTES}
    return common.finish(rows, watch, args.json, document, "other work on the machine lowers every figure")


if __name__ == "__main__":
    common.run_script(main)
