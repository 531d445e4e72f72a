"""Benchmark of raylog's transactions: an exactly-once copier against an at-least-once one,
and read_committed reads against read_uncommitted ones, each against its baseline measured
in the same run.

Set-up: a local Ray started here (the embedded default's settings: a 512 MiB object store,
no dashboard), one embedded raylog broker with its data in a temporary directory, topics of
3 partitions (replication factor 1) with fresh names, each created with its leaders waited
for (untimed), deleted at the end. The input topic holds N records (default 200,000,
``--records``) of 100-byte values keyed ``user-<n>`` (500 distinct keys), written
beforehand with ``send_arrow`` (not timed).

What is measured (``time.perf_counter``):

1. Copier (consume-transform-produce): a ``Consumer`` (a group id of its own per run, no
   auto-commit) assigned the input's 3 partitions from offset 0 and a ``Producer`` (its
   defaults: idempotent, ``acks="all"``, ``linger_ms=5``) copy every record, key and value,
   to a fresh 3-partition topic in units of M records (default 1,000, ``--txn-records``):
   poll until the unit is full (``max_records`` = what it lacks), send, then end the unit:
   - transactional (exactly once): ``Producer(transactional_id=...)``, ``begin_transaction``
     before the unit, ``send_offsets_to_transaction(the consumer's positions,
     consumer.group_metadata())`` and ``commit_transaction`` after it;
   - baseline (at least once): the same loop with the non-transactional producer, and
     ``flush()`` then ``consumer.commit(the positions)`` after each unit (flushed first:
     offsets committed before their records are written would lose them in a crash).
   Two kinds: ``poll()`` and ``send()`` per record (the main rows), and ``poll_arrow()``
   with one ``send_arrow()`` per polled table. Timed from the first poll to the last
   commit; ``init_transactions`` comes before, and an untimed warm-up (a group commit and a
   transaction that commits only offsets) creates ``__consumer_offsets`` and
   ``__transaction_state`` first. Every run checks that the group's committed offsets are
   the input's end offsets and that a read_committed consumer reads exactly N records from
   the output. The commit columns: each unit's ``commit_transaction`` wall time (baseline:
   ``flush`` + ``commit``), nearest-rank percentiles; the note gives the p50 of
   ``send_offsets_to_transaction``, the rest of a transaction's own calls. Target:
   transactional >= 0.5x the baseline's records/s, per kind.
2. read_committed against read_uncommitted, ``poll_arrow``: a fresh ``Consumer``
   (``auto_offset_reset="earliest"``, every partition) reads the output of the per-record
   baseline copier (no transactions, so no aborts) from the first poll until N records
   came. The two alternate, 5 rounds each (which goes first alternates too); the best round
   of each is shown. Target: read_committed >= 0.9x.
3. (no target) The same over a log with 10% aborted transactions: the input's records
   written by a transactional producer with ``send_arrow`` in 20 transactions of N/20
   records (few and large, to keep the run short), the 5th and the 15th aborted. Rate: the
   records in the log (aborted ones too) over the seconds to read it through;
   read_committed returns only the committed ones.

MB is 10^6 bytes of values. Ray and raylog are started here and shut down at the end.

Usage (or ``python -m raylog.benchmarks.txn_bench``)::

    raylog bench txn [--quick] [--records N] [--txn-records M] [--json PATH] [--dir PARENT]
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

import raylog
from raylog import Admin, Consumer, NewTopic, Producer, TopicPartition
from raylog.benchmarks import common
from raylog.benchmarks.common import MB, BenchError, Target, number, times
from raylog.benchmarks.perf import POLL_MS, consume, high_watermarks, nearest_rank
from raylog.clients.cluster import RaylogCluster
from raylog.errors import RaylogError

PARTITIONS = 3
VALUE_BYTES = 100
DISTINCT_KEYS = 500
#: The log with aborted transactions: this many transactions, of which the 5th and the 15th
#: are aborted (10%).
ABORTS_LOG_TXNS = 20
ABORTED_TXNS = (4, 14)
#: Targets: records/s over the same run's baseline.
COPIER_RATIO = 0.5
READ_RATIO = 0.9
#: Copier kinds: (key, row label).
KINDS = (("records", "poll() + send() per record"), ("arrow", "poll_arrow() + send_arrow()"))


@dataclass(frozen=True)
class Scale:
    """How much work each measurement does."""

    name: str
    records: int  # in the input topic
    txn_records: int  # records per transaction (the baseline: per commit)
    rounds: int  # alternating reads of each isolation level; the best is reported
    timeout_s: float  # bound on any single wait


FULL = Scale("full", records=200_000, txn_records=1_000, rounds=5, timeout_s=120.0)
QUICK = Scale("quick", records=20_000, txn_records=1_000, rounds=1, timeout_s=60.0)


@dataclass
class Row(common.Judged):
    """One line of a results table; ``section`` says which table."""

    section: str  # "copier" or "read"
    name: str
    records_per_s: float | None = None
    mb_per_s: float | None = None
    ratio: float | None = None  # records/s over the baseline row's
    p50_ms: float | None = None  # copier: commit latency per unit
    p99_ms: float | None = None
    targets: list[Target] = field(default_factory=list)
    note: str = ""
    error: str | None = None


# ---------------------------------------------------------------------------------------
# The copy loop


#: ``move(most)``: poll at most ``most`` records and send them; how many there were.
Move = Callable[[int], int]


def record_mover(consumer: Consumer, producer: Producer, topic: str) -> Move:
    """poll() and one send() per record, key and value."""
    send = producer.send

    def move(most: int) -> int:
        moved = 0
        for records in consumer.poll(timeout_ms=POLL_MS, max_records=most).values():
            for record in records:
                send(topic, record.value, key=record.key)
            moved += len(records)
        return moved

    return move


def arrow_mover(consumer: Consumer, producer: Producer, topic: str) -> Move:
    """poll_arrow() and one send_arrow() of the table (its key and value columns)."""

    def move(most: int) -> int:
        table = consumer.poll_arrow(timeout_ms=POLL_MS, max_records=most)
        if table.num_rows:
            producer.send_arrow(topic, table)
        return table.num_rows

    return move


MOVERS: dict[str, Callable[[Consumer, Producer, str], Move]] = {"records": record_mover, "arrow": arrow_mover}


def copy_units(
    consumer: Consumer,
    move: Move,
    total: int,
    unit: int,
    begin: Callable[[], object],
    end: Callable[[dict[TopicPartition, int]], float],
    timeout_s: float,
) -> tuple[float, list[float]]:
    """Copy ``total`` records in units of ``unit``: ``begin()``, ``move`` until the unit is
    full, ``end(the consumer's positions)`` (which returns its commit's seconds).

    Returns:
        The seconds from the first poll to the last commit, and each commit's seconds.

    Raises:
        BenchError: no record came for ``timeout_s``.
    """
    partitions = sorted(consumer.assignment())
    position = consumer.position
    clock = time.perf_counter
    commits: list[float] = []
    copied = 0
    start = clock()
    while copied < total:
        begin()
        wanted = min(unit, total - copied)
        got, idle_since = 0, clock()
        while got < wanted:
            moved = move(wanted - got)
            got += moved
            if moved:
                idle_since = clock()
            elif clock() - idle_since >= timeout_s:
                raise BenchError(f"copied {copied + got:,} of {total:,} records: none came for {timeout_s:g} s")
        commits.append(end({tp: position(tp) for tp in partitions}))
        copied += got
    return clock() - start, commits


# ---------------------------------------------------------------------------------------
# The runs


class Runner(common.Phases):
    """Fills the input topic, then measures; rows go to ``self.rows``."""

    tag = "txn_bench"
    row_type = Row

    def __init__(self, cluster: RaylogCluster, scale: Scale):
        self.cluster, self.scale = cluster, scale
        self.admin = Admin(cluster)
        self.rows: list[Row] = []
        self.run_id = uuid.uuid4().hex[:8]
        self.topics: list[str] = []
        self.input = ""
        self.input_ends: dict[TopicPartition, int] = {}
        self.table: pa.Table | None = None  # the input's records (key, value)
        self.plain_log: str | None = None  # the per-record baseline copier's output, for 2

    # --- topics -----------------------------------------------------------------------

    def create_topic(self, label: str) -> str:
        name = f"txn-bench-{label}-{self.run_id}"
        self.admin.create_topics(
            [NewTopic(name, num_partitions=PARTITIONS, replication_factor=1)],
            wait_for_leaders_ms=int(self.scale.timeout_s * 1000),  # their replicas started, untimed
        )
        self.topics.append(name)
        return name

    def delete_topic(self, name: str) -> None:
        if name in self.topics:
            self.topics.remove(name)
            with contextlib.suppress(RaylogError):
                self.admin.delete_topics([name])

    def delete_all(self) -> None:
        for name in list(self.topics):
            self.delete_topic(name)

    def partitions(self, topic: str) -> list[TopicPartition]:
        return [TopicPartition(topic, p) for p in range(PARTITIONS)]

    # --- input and warm-up --------------------------------------------------------------

    def fill(self) -> None:
        """N keyed 100-byte records in the input topic, written with send_arrow."""
        count = self.scale.records
        keys = [b"user-%d" % (i % DISTINCT_KEYS) for i in range(count)]
        self.table = pa.table({"key": pa.array(keys), "value": pa.array(common.make_values(count, VALUE_BYTES))})
        self.input = self.create_topic("input")
        with Producer(self.cluster, acks=1) as producer:
            producer.send_arrow(self.input, self.table).result(timeout=self.scale.timeout_s)
        found = high_watermarks(self.cluster, self.input)
        if found != count:
            raise BenchError(f"{found:,} records under the input's high watermarks, expected {count:,}")
        with Consumer(self.cluster) as consumer:
            self.input_ends = consumer.end_offsets(self.partitions(self.input))

    def warm_up(self) -> None:
        """Create ``__consumer_offsets`` and ``__transaction_state`` (and their coordinators)
        before any timed run: a group commit and a transaction that commits only offsets."""
        group = f"warm-up-{self.run_id}"
        starts = {tp: 0 for tp in self.partitions(self.input)}
        with Consumer(self.cluster, group_id=group, enable_auto_commit=False) as consumer:
            consumer.assign(starts)
            consumer.commit(starts)
            with Producer(self.cluster, transactional_id=group) as producer:
                producer.init_transactions()
                producer.begin_transaction()
                producer.send_offsets_to_transaction(starts, consumer.group_metadata())
                producer.commit_transaction()

    # --- 1. copier ----------------------------------------------------------------------

    def copier(self, kind: str, label: str) -> None:
        base_s, base_commits, _ = self.copy(kind, transactional=False)
        txn_s, txn_commits, offsets_s = self.copy(kind, transactional=True)
        offsets_p50 = nearest_rank(np.sort(offsets_s) * 1000, 0.5)
        unit = self.scale.txn_records
        self.rows += [
            self.copier_row(
                f"baseline: {label}, commit every {unit:,}",
                base_s,
                base_commits,
                note="idempotent producer, flush() + consumer.commit() per unit (at least once)",
            ),
            self.copier_row(
                f"transactional: {label}, {unit:,} per txn",
                txn_s,
                txn_commits,
                ratio=base_s / txn_s,
                targets=[Target("ratio", ">=", COPIER_RATIO)],
                note=(
                    f"{len(txn_commits):,} txns; send_offsets_to_transaction (not in the commit columns) "
                    f"p50 {offsets_p50:.1f} ms"
                ),
            ),
        ]

    def copier_row(self, name: str, seconds: float, commits: list[float], **extra) -> Row:
        count = self.scale.records
        commit_ms = np.sort(commits) * 1000
        return Row(
            "copier",
            name,
            records_per_s=count / seconds,
            mb_per_s=count * VALUE_BYTES / seconds / MB,
            p50_ms=nearest_rank(commit_ms, 0.5),
            p99_ms=nearest_rank(commit_ms, 0.99),
            **extra,
        )

    def copy(self, kind: str, transactional: bool) -> tuple[float, list[float], list[float]]:
        """One copier run into a fresh topic, checked; (seconds, each commit's seconds, each
        send_offsets_to_transaction's seconds). The per-record baseline's output is kept for
        the reads of 2; the others are deleted."""
        scale = self.scale
        what = f"{'txn' if transactional else 'plain'}-{kind}"
        output = self.create_topic(what)
        group = f"copier-{what}-{self.run_id}"
        clock = time.perf_counter
        offsets_s: list[float] = []
        consumer = Consumer(self.cluster, group_id=group, enable_auto_commit=False, auto_offset_reset="earliest")
        producer = Producer(self.cluster, transactional_id=group if transactional else None)
        try:
            consumer.assign(self.input_ends)
            for tp in self.input_ends:
                consumer.position(tp)  # the start offsets, looked up before the timing
            if transactional:
                producer.init_transactions()
                group_metadata = consumer.group_metadata()

                def end(offsets: dict[TopicPartition, int]) -> float:
                    started = clock()
                    producer.send_offsets_to_transaction(offsets, group_metadata)
                    offsets_s.append(clock() - started)
                    started = clock()
                    producer.commit_transaction()
                    return clock() - started

                begin: Callable[[], object] = producer.begin_transaction
            else:

                def end(offsets: dict[TopicPartition, int]) -> float:
                    started = clock()
                    producer.flush(timeout=scale.timeout_s)
                    consumer.commit(offsets)
                    return clock() - started

                def begin() -> None:
                    pass

            move = MOVERS[kind](consumer, producer, output)
            seconds, commits = copy_units(consumer, move, scale.records, scale.txn_records, begin, end, scale.timeout_s)
            committed = consumer.committed(self.input_ends)
        finally:
            producer.close(timeout=scale.timeout_s)
            consumer.close()
        print(
            f"[{self.tag}]   copier {what}: {scale.records / seconds:,.0f} records/s",
            file=sys.stderr,
            flush=True,
        )
        wrong = {tp: (c and c.offset) for tp, c in committed.items() if (c and c.offset) != self.input_ends[tp]}
        if wrong:
            raise BenchError(f"copier {what}: committed offsets {wrong}, expected the input's ends {self.input_ends}")
        self.check_count(output, scale.records, f"copier {what}")
        if transactional or kind != "records":
            self.delete_topic(output)
        else:
            self.plain_log = output
        return seconds, commits, offsets_s

    def check_count(self, topic: str, expected: int, what: str) -> None:
        """A read_committed consumer reads exactly ``expected`` records from ``topic``."""
        with Consumer(self.cluster, topic, auto_offset_reset="earliest") as consumer:
            consume(consumer, expected, arrow=True, timeout_s=self.scale.timeout_s)
            surplus = consumer.poll_arrow(timeout_ms=POLL_MS).num_rows
        if surplus:
            raise BenchError(f"{what}: more than {expected:,} records in {topic} (at least {surplus:,} more)")

    # --- 2 and 3. reads ---------------------------------------------------------------------

    def plain_reads(self) -> None:
        if self.plain_log is None:
            raise BenchError("no log to read: the per-record baseline copier failed")
        count = self.scale.records
        self.compare_reads(
            self.plain_log,
            count,
            count,
            "per-record plain copier's output (no txns)",
            [Target("ratio", ">=", READ_RATIO)],
            "",
        )
        self.delete_topic(self.plain_log)
        self.plain_log = None

    def aborted_reads(self) -> None:
        scale = self.scale
        topic = self.create_topic("aborts")
        per_txn = -(-scale.records // ABORTS_LOG_TXNS)
        committed = 0
        with Producer(self.cluster, transactional_id=f"aborts-{self.run_id}") as producer:
            producer.init_transactions()
            for index in range(ABORTS_LOG_TXNS):
                part = self.table.slice(index * per_txn, per_txn)
                producer.begin_transaction()
                if part.num_rows:
                    producer.send_arrow(topic, part)
                if index in ABORTED_TXNS:
                    producer.abort_transaction()
                else:
                    producer.commit_transaction()
                    committed += part.num_rows
        self.check_count(topic, committed, "the aborts log")
        self.compare_reads(
            topic,
            scale.records,
            committed,
            f"{len(ABORTED_TXNS)} of {ABORTS_LOG_TXNS} txns aborted ({len(ABORTED_TXNS) / ABORTS_LOG_TXNS:.0%})",
            [],
            f"read_committed returns {committed:,} of the {scale.records:,}; rate: all records in the log / s",
        )
        self.delete_topic(topic)

    def compare_reads(
        self, topic: str, in_log: int, committed: int, log: str, targets: list[Target], note: str
    ) -> None:
        """read_uncommitted (baseline) and read_committed reads of ``topic`` alternating, the
        best round of each as rows; rates count the ``in_log`` records."""
        runs: dict[str, list[float]] = {"read_uncommitted": [], "read_committed": []}
        wanted = {"read_uncommitted": in_log, "read_committed": committed}
        levels = list(runs)
        for turn in range(self.scale.rounds):
            for level in levels[turn % 2 :] + levels[: turn % 2]:
                with Consumer(self.cluster, topic, auto_offset_reset="earliest", isolation_level=level) as consumer:
                    seconds = consume(consumer, wanted[level], arrow=True, timeout_s=self.scale.timeout_s).seconds
                runs[level].append(seconds)
                print(
                    f"[{self.tag}]   round {turn} {level}: {in_log / seconds:,.0f} records/s",
                    file=sys.stderr,
                    flush=True,
                )
        base = min(runs["read_uncommitted"])

        def row(level: str, name: str, **extra) -> Row:
            seconds = min(runs[level])
            per_round = ", ".join(f"{in_log / s / 1e6:.2f}" for s in runs[level])
            return Row(
                "read",
                name,
                records_per_s=in_log / seconds,
                mb_per_s=in_log * VALUE_BYTES / seconds / MB,
                note=f"M rec/s per round: {per_round}" + (f"; {note}" if note else ""),
                **extra,
            )

        self.rows += [
            row("read_uncommitted", f"baseline: read_uncommitted, {log}"),
            row(
                "read_committed",
                f"read_committed, {log}",
                ratio=base / min(runs["read_committed"]),
                targets=targets,
            ),
        ]


# ---------------------------------------------------------------------------------------
# Output


TABLES = {
    "copier": (
        (
            ("measurement", 62, None),
            ("records/s", 10, lambda r: number(r.records_per_s, ",.0f")),
            ("MB/s", 6, lambda r: number(r.mb_per_s, ",.1f")),
            ("x base", 6, lambda r: times(r.ratio)),
            ("commit p50 ms", 13, lambda r: number(r.p50_ms, ".1f")),
            ("commit p99 ms", 13, lambda r: number(r.p99_ms, ".1f")),
        ),
        10,
    ),
    "read": (
        (
            ("measurement", 62, None),
            ("records/s", 10, lambda r: number(r.records_per_s, ",.0f")),
            ("MB/s", 6, lambda r: number(r.mb_per_s, ",.1f")),
            ("x base", 6, lambda r: times(r.ratio)),
        ),
        10,
    ),
}


def json_document(scale: Scale) -> dict[str, object]:
    return {
        "mode": scale.name,
        "scale": dataclasses.asdict(scale),
        "statistic": "one run per copier; best of the alternating rounds (reads)",
        "mb": MB,
        "value_bytes": VALUE_BYTES,
        "partitions": PARTITIONS,
    }


# ---------------------------------------------------------------------------------------
# Entry point


def run(scale: Scale, parent: str | None) -> list[Row]:
    """Every measurement on a fresh local Ray and raylog cluster, removed at the end."""
    with contextlib.ExitStack() as stack:
        workdir = common.temp_workdir(stack, "raylog-txn-bench-", parent)
        common.start_local_ray(stack)
        cluster = raylog.connect(data_dir=os.path.join(workdir, "data"), cluster_name=f"txn{uuid.uuid4().hex[:8]}")
        stack.callback(cluster.shutdown)
        runner = Runner(cluster, scale)
        stack.callback(runner.delete_all)
        runner.phase("copier", "fill the input topic", runner.fill)
        if runner.rows:  # filling failed: nothing to measure
            return runner.rows
        runner.phase("copier", "warm-up: the offsets and transaction state topics", runner.warm_up)
        for kind, label in KINDS:
            runner.phase("copier", f"copier, {label}", lambda kind=kind, label=label: runner.copier(kind, label))
        runner.phase("read", "reads of a log without transactions", runner.plain_reads)
        runner.phase("read", "reads of a log with aborted transactions", runner.aborted_reads)
        return runner.rows


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = common.bench_parser(__doc__, f"a fast smoke run ({QUICK.records:,} records, one round of reads)", prog)
    parser.add_argument("--records", type=int, help=f"records in the input topic (default {FULL.records:,})")
    parser.add_argument(
        "--txn-records", type=int, help=f"records per transaction and per commit (default {FULL.txn_records:,})"
    )
    args = parser.parse_args(argv)
    scale = QUICK if args.quick else FULL
    if args.records:
        scale = dataclasses.replace(scale, records=args.records)
    if args.txn_records:
        scale = dataclasses.replace(scale, txn_records=args.txn_records)
    watch = common.RunWatch()
    rows = run(scale, args.dir)
    watch.stop()
    print(
        f"raylog transactions benchmark, {scale.name} mode: {scale.records:,} records of {VALUE_BYTES} B "
        f"({DISTINCT_KEYS} keys) in {PARTITIONS} partitions, embedded cluster, 1 broker, RF=1; copiers acks=all"
    )
    print(
        f"copier: one run each, {scale.txn_records:,} records per transaction / per commit; "
        f"reads: best of {scale.rounds} alternating round(s); MB = 10^6 bytes of values"
    )
    print("x base: records/s over the baseline row above it (same run); reads: poll_arrow, a fresh Consumer each")
    print("BELOW: target missed; ERROR: the measurement failed (see stderr)")
    common.print_tables(rows, TABLES)
    print()
    return common.finish(
        rows, watch, args.json, json_document(scale), "the machine is shared: other work lowers every figure"
    )


if __name__ == "__main__":
    common.run_script(main)
