"""``raylog bench``: Kafka's perf tests, every benchmark of :mod:`raylog.benchmarks`, and the
fault campaigns of :mod:`raylog.chaos`.

raylog bench produce|consume|e2e [--topic T] [--num-records N] [--record-size B] [--partitions P]
             [--replication-factor R] [--acks all|1|0] [--batch-size B] [--linger-ms L]
             [--compression C] [--arrow] [--throughput R] [--timeout-ms T] [--json] [--sync]
        Kafka's perf tests: records/s, MB/s, acknowledgement and end-to-end latency
        percentiles (see raylog.benchmarks.perf); on a temporary topic unless --topic names one;
        a progress bar on stderr; --arrow uses send_arrow/poll_arrow; --sync (produce)
        sends one record at a time, each acknowledged before the next; --json: the report
        as JSON
raylog bench NAME [OPTIONS]
        the benchmark NAME of raylog.benchmarks.BENCHMARKS (storage, client, replication,
        kafka, history, ...; `raylog bench --help` lists them) with its own options (`raylog
        bench NAME --help`), as `python -m raylog.benchmarks.<module>` runs it; exit code 2 if
        a package it needs is missing (with the extra to install), 1 if it failed
raylog bench fuzz-wire [--frames N] [--seed S] [--connections C] [--max-duration-s D]
        request frames mutated from real Kafka clients' captured requests (a checkout's
        tests/unit/kafka/captures) sent to the cluster's first Kafka listener over loopback
        (see raylog.chaos.fuzz_wire): frames/s, answered / closed / held, the listener
        process's RSS before and after, records written before still readable. Exit code 1
        on an anomaly, a lost record or RSS growth above 256 MiB
raylog bench soak [--runs N] [--seed S] [--faults K,K] [--duration-s D] [--max-faults M]
                  [--acks all|1] [--min-insync-replicas N] [--unclean] [--partitions P]
                  [--transactions] [--overlap 1|2] [--producers N] [--consumers N]
                  [--kafka-producers N] [--kafka-consumers N] [--kafka-transactional N]
                  [--rate-per-s R] [--replica-lag-time-max-ms MS]
        seeded fault runs (Jepsen's Kafka workload, see raylog.chaos): starts its own Ray
        cluster of a head and three labelled broker nodes on this machine, then N runs with
        seeds S, S+1, ...: each a fresh topic, producers and consumer groups recording a
        history while a nemesis injects faults, everything healed, a final read and the
        checker; one line per run, a total at the end. Exit code 1 if a run found an anomaly
        that its configuration promises against (acks=all, min.insync.replicas >= 2, RF 3,
        unclean election off) or did not heal; --transactions adds a transactional producer
        (read_committed consumers then must never see an aborted or unfinished transaction)
        and kill-txn-coordinator faults; --overlap 2 leaves a paused replica, delayed calls
        or a full disk in effect while a second fault runs; --producers N idempotent
        producer clients instead of one, --consumers N group members instead of two;
        --kafka-producers, --kafka-consumers and --kafka-transactional N confluent-kafka
        clients through the brokers' Kafka listeners beside them; --rate-per-s R records a
        second per producer thread; --replica-lag-time-max-ms MS the topic's lag bound. A run
        also fails if a leader was demoted while no fault disturbed its process or node; its
        line gives throughput and p50/p99 send latency
raylog bench simulate [--schedules N] [--first-seed S] [--steps K] [--workers W] [--profile P]
        the seeded simulation of one partition on three brokers and the controller (see
        raylog.chaos.simulation: the shipped ReplicationControl, ReplicaCore, Purgatory,
        Partition and Log over an in-memory network with loss, reordering, crashes, pauses,
        lost machines and replaced disks), every invariant checked after every step; no Ray.
        Prints the schedules run, the time and the failures (each with its seed and trace);
        --profile transactions makes the schedules mostly transactions (the coordinator's
        faults too); --profile groups runs raylog.chaos.group_simulation instead (a consumer
        group's coordinator, the shipped GroupCore over a real partition, with members, commits,
        a transactional producer, slow and failed appends and fail-overs); --profile whole runs
        the replication simulation with a consumer group's coordinator on the partition's
        leader (raylog.chaos.group_cluster: every invariant of both; 600 steps suit it). Exit
        code 1 if a schedule broke an invariant
raylog bench txn-copier [--records N] [--rounds R] [--txn-records T] [--records-per-s C]
        Kafka's transactional copier test (see raylog.chaos.txn_copier): starts its own Ray
        cluster as soak does, preloads N records (100,000) and copies them in transactions
        of T (1,000) at C records a second (800) through R rounds (2) of five faults (the
        copier killed and replaced with a transaction written and while committing one, an
        output leader's node killed, the transaction coordinator killed as an actor and
        with its node), then at full speed; the output read_committed must equal the input
        exactly, and a concurrent read_committed reader must never have read an aborted or
        unfinished transaction. Exit code 1 if a check failed
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from typing import Any

from raylog.benchmarks import BENCHMARKS
from raylog.cli.arguments import UsageError, command, non_negative_int, positive_float, positive_int
from raylog.cli.connection import connected
from raylog.cli.output import Progress
from raylog.common import compression
from raylog.errors import InvalidConfigError

#: ``raylog bench`` options -> BenchConfig fields (options left out keep BenchConfig's defaults).
_BENCH_OPTIONS = {
    "num_records": "num_records",
    "record_size": "record_size_bytes",
    "topic": "topic",
    "partitions": "num_partitions",
    "replication_factor": "replication_factor",
    "acks": "acks",
    "batch_size": "batch_size",
    "linger_ms": "linger_ms",
    "compression": "compression",
    "arrow": "arrow",
    "sync": "sync",
    "throughput": "throughput_records_per_s",
    "timeout_ms": "timeout_ms",
}


def _bench(args: argparse.Namespace) -> int:
    from raylog.benchmarks import perf  # imports Ray: only when benchmarking

    given = {field: getattr(args, option, None) for option, field in _BENCH_OPTIONS.items()}
    try:
        config = perf.BenchConfig(args.action, **{k: v for k, v in given.items() if v is not None})
    except InvalidConfigError as exc:
        raise UsageError(str(exc)) from None
    progress = Progress()
    try:
        with connected(args) as cluster:
            report = perf.run(cluster, config, show_progress=progress.show)
    finally:
        progress.clear()
    print(json.dumps(report, indent=2) if args.json else perf.format_report(report))
    return 0


def _run_benchmark(args: argparse.Namespace) -> int:
    from raylog.benchmarks import common  # the benchmark's own imports: only when running it

    module = importlib.import_module(f"raylog.benchmarks.{BENCHMARKS[args.action][0]}")
    prog = f"raylog bench {args.action}"
    try:
        return common.run(lambda: module.main(args.arguments, prog), prog)
    except SystemExit as exc:  # its own parser's --help (0) or usage error (2), returned as main() does
        return exc.code if isinstance(exc.code, int) else 2


#: RSS the listener may grow by over a fuzz campaign (issue 25's bound).
FUZZ_RSS_GROWTH_MAX_BYTES = 256 << 20


def _bench_fuzz_wire(args: argparse.Namespace) -> int:
    from raylog.chaos import fuzz_wire

    with connected(args) as cluster:
        if not cluster.bootstrap_servers():
            raise UsageError("the cluster runs no Kafka listener (raylog start --kafka-port)")
        try:
            report, rss, lost = fuzz_wire.run_against(
                cluster,
                args.frames,
                args.seed,
                args.connections,
                args.max_duration_s,
                progress=lambda r: print(f"  {r.frames} frames...", file=sys.stderr, flush=True),
            )
        except (FileNotFoundError, ValueError) as exc:
            raise UsageError(str(exc)) from None
    print(fuzz_wire.format_report(report, rss))
    print(f"  records acknowledged before the campaign and lost: {lost}")
    grew = rss is not None and rss[1] - rss[0] > FUZZ_RSS_GROWTH_MAX_BYTES
    return 1 if report.anomalies or lost or grew else 0


def _bench_soak(args: argparse.Namespace) -> int:
    from raylog.chaos import soak  # imports Ray and starts nodes: only when soaking

    config = _soak_config(args)
    began = time.monotonic()
    with soak.SoakCluster(listeners=config.kafka_clients > 0) as env:
        print(
            f"soak: a head and {env.num_brokers} broker nodes up in {time.monotonic() - began:.1f} s; "
            f"{args.runs} run(s) from seed {args.seed}, {config.describe()}, faults {','.join(config.fault_kinds)}",
            flush=True,
        )
        results = soak.soak(env, args.runs, args.seed, config, out=lambda line: print(line, flush=True))
    print(soak.totals(results, time.monotonic() - began))
    return 1 if any(r.failed for r in results) else 0


def _bench_simulate(args: argparse.Namespace) -> int:
    from raylog.chaos import simulation

    report = simulation.campaign(args.schedules, args.first_seed, args.steps, args.workers, args.profile)
    print(report.summary())
    for failure in report.failures[:3]:
        print("\n" + failure)
    return 1 if report.failures else 0


def _bench_txn_copier(args: argparse.Namespace) -> int:
    from raylog.chaos import soak, txn_copier  # imports Ray and starts nodes: only when copying

    began = time.monotonic()
    with soak.SoakCluster() as env:
        print(
            f"txn-copier: a head and {env.num_brokers} broker nodes up in {time.monotonic() - began:.1f} s; "
            f"{args.records} records in transactions of {args.txn_records} at {args.records_per_s:g}/s, "
            f"{args.rounds} round(s) of faults",
            flush=True,
        )
        try:
            report = txn_copier.copy_through_faults(
                env.cluster, env.start_broker, env.kill_broker, **_copier_options(args)
            )
        except AssertionError as exc:  # CopyFailed, or a wait that timed out
            print(f"txn-copier: FAILED after {time.monotonic() - began:.0f} s: {exc}", flush=True)
            return 1
    print(report.text)
    print(f"transactions: {report.outcomes}")
    print(f"txn-copier: ok, {args.records} records copied exactly once in {time.monotonic() - began:.0f} s")
    return 0


def _copier_options(args: argparse.Namespace) -> dict:
    """The :func:`raylog.chaos.txn_copier.copy_through_faults` sizes that ``bench txn-copier`` chooses."""
    return {
        "records": args.records,
        "rounds": args.rounds,
        "txn_records": args.txn_records,
        "records_per_s": args.records_per_s,
    }


def _soak_config(args: argparse.Namespace):
    """The :class:`raylog.chaos.soak.RunConfig` that ``bench soak``'s options choose."""
    from raylog.chaos.nemesis import FAULT_KINDS, TRANSACTION_FAULTS
    from raylog.chaos.soak import RunConfig

    faults = RunConfig.faults if args.faults is None else tuple(k for k in args.faults.split(",") if k)
    unknown = sorted(set(faults) - set(FAULT_KINDS))
    if unknown:
        raise UsageError(f"unknown fault kinds {', '.join(unknown)}; known: {', '.join(FAULT_KINDS)}")
    needing = sorted(set(faults) & set(TRANSACTION_FAULTS))
    if needing and not (args.transactions or args.kafka_transactional):
        raise UsageError(f"fault kinds {', '.join(needing)} need --transactions or --kafka-transactional")
    given = {
        "duration_s": args.duration_s,
        "max_faults": args.max_faults,
        "acks": args.acks,
        "min_insync_replicas": args.min_insync_replicas,
        "partitions": args.partitions,
        "overlap": args.overlap,
        "producers": args.producers,
        "consumers": args.consumers,
        "kafka_producers": args.kafka_producers,
        "kafka_consumers": args.kafka_consumers,
        "kafka_transactional": args.kafka_transactional,
        "rate_per_s": args.rate_per_s,
        "replica_lag_time_max_ms": args.replica_lag_time_max_ms,
    }
    return RunConfig(
        faults=faults,
        unclean=args.unclean,
        transactions=args.transactions,
        **{k: v for k, v in given.items() if v is not None},
    )


def add_commands(commands: Any) -> None:
    bench = commands.add_parser(
        "bench", help="measure throughput and latency (Kafka's perf tests, the benchmarks, the fault campaigns)"
    )
    workloads = bench.add_subparsers(dest="action", required=True)
    for name, summary in (
        ("produce", "records/s, MB/s and acknowledgement latency of one producer"),
        ("consume", "records/s and MB/s of one consumer reading from the beginning"),
        ("e2e", "end-to-end latency: a consumer in another process reads while this one produces"),
    ):
        sub = command(workloads, name, _bench, summary)
        sub.add_argument("--topic", help="an existing topic (default: a temporary one, deleted after the run)")
        sub.add_argument("--num-records", type=positive_int, help="default 100,000")
        sub.add_argument("--record-size", type=positive_int, help="bytes per value (default 100)")
        sub.add_argument("--partitions", type=positive_int, help="of the temporary topic (default 1)")
        sub.add_argument("--replication-factor", type=positive_int, help="of the temporary topic (default 1)")
        sub.add_argument("--acks", choices=["all", "1", "0"], help="default all")
        sub.add_argument("--batch-size", type=positive_int, help="producer batch bytes (default: the producer's)")
        sub.add_argument("--linger-ms", type=non_negative_int, help="default: the producer's (0 with --sync)")
        sub.add_argument("--compression", choices=sorted(compression.CODEC_IDS))
        sub.add_argument("--arrow", action="store_true", help="send_arrow in batch-sized chunks, poll_arrow")
        sub.add_argument("--throughput", type=float, metavar="RECORDS_PER_S", help="cap the send rate")
        sub.add_argument("--timeout-ms", type=non_negative_int, help="wait bound for acks and records (60,000)")
        sub.add_argument("--json", action="store_true", help="machine-readable output")
        if name == "produce":
            sub.add_argument("--sync", action="store_true", help="one record at a time, each acknowledged first")
    for name, (_, summary) in BENCHMARKS.items():
        # Its options are the benchmark's own (--help included): argparse takes every word after
        # the name as they are, options too, with a prefix no argument can start with.
        sub = workloads.add_parser(name, help=summary, description=summary, add_help=False, prefix_chars="\0")
        sub.add_argument("arguments", nargs=argparse.REMAINDER, help="the benchmark's options")
        sub.set_defaults(run=_run_benchmark)
    fuzz = command(
        workloads,
        "fuzz-wire",
        _bench_fuzz_wire,
        "mutated Kafka request frames against the cluster's first Kafka listener (loopback, from a checkout)",
    )
    fuzz.add_argument("--frames", type=positive_int, default=1_000_000, help="default 1,000,000")
    fuzz.add_argument("--seed", type=int, default=0, help="of the mutations (default 0)")
    fuzz.add_argument("--connections", type=positive_int, default=32, help="batches in flight (default 32)")
    fuzz.add_argument("--max-duration-s", type=positive_float, default=3600.0, help="stop early after (3,600)")
    _add_bench_soak(workloads)
    _add_bench_txn_copier(workloads)
    simulate = workloads.add_parser(
        "simulate", help="seeded schedules of the replication simulation, invariants checked after each step (no Ray)"
    )
    simulate.set_defaults(run=_bench_simulate)
    simulate.add_argument("--schedules", type=positive_int, default=10_000, help="seeds to run (10,000)")
    simulate.add_argument("--first-seed", type=non_negative_int, default=0, help="(0)")
    simulate.add_argument("--steps", type=positive_int, default=200, help="random steps per schedule (200)")
    simulate.add_argument("--workers", type=positive_int, help="processes (default: one per core)")
    simulate.add_argument(
        "--profile",
        choices=["default", "transactions", "groups", "whole"],
        default="default",
        help="the steps' weights (default)",
    )


def _add_bench_soak(workloads: Any) -> None:
    soak = workloads.add_parser(
        "soak", help="seeded fault runs judged by a Jepsen-style checker (on a Ray cluster of its own)"
    )
    soak.set_defaults(run=_bench_soak)
    soak.add_argument("--runs", type=positive_int, default=1, help="how many runs (default 1)")
    soak.add_argument("--seed", type=int, default=1, help="of the first run; run i uses seed + i (default 1)")
    soak.add_argument("--faults", help="comma-separated fault kinds (default: all this build supports)")
    soak.add_argument(
        "--duration-s",
        type=positive_float,
        help="workload time per run at most (default 6; it ends 3 s after the last fault once all were tried)",
    )
    soak.add_argument("--max-faults", type=non_negative_int, help="faults per run at most (default 3)")
    soak.add_argument("--acks", choices=["all", "1"], help="of the producers (default all)")
    soak.add_argument("--min-insync-replicas", type=positive_int, help="of the topic (default 2)")
    soak.add_argument("--unclean", action="store_true", help="unclean.leader.election.enable=true")
    soak.add_argument("--partitions", type=positive_int, help="of each run's topic (default 2)")
    soak.add_argument(
        "--overlap",
        type=int,
        choices=[1, 2],
        help="faults in effect at once: 2 leaves a paused replica, delayed calls or a full disk in effect "
        "while a second fault runs (default 1)",
    )
    soak.add_argument(
        "--producers", type=positive_int, help="idempotent producer clients, two threads each (default 1)"
    )
    soak.add_argument("--consumers", type=non_negative_int, help="consumer group members (default 2)")
    soak.add_argument(
        "--kafka-producers",
        type=non_negative_int,
        help="confluent-kafka producers writing through the brokers' Kafka listeners (default 0)",
    )
    soak.add_argument(
        "--kafka-consumers",
        type=non_negative_int,
        help="confluent-kafka consumers in a group of their own, through the listeners (default 0)",
    )
    soak.add_argument(
        "--kafka-transactional",
        type=non_negative_int,
        help="confluent-kafka transactional producers through the listeners, with kill-txn-coordinator "
        "faults (default 0)",
    )
    soak.add_argument("--rate-per-s", type=positive_float, help="records per second per producer thread (default 40)")
    soak.add_argument(
        "--replica-lag-time-max-ms",
        type=positive_int,
        help="of the topic: how long a follower may lag and stay in the ISR (default 1500)",
    )
    soak.add_argument(
        "--transactions",
        action="store_true",
        help="add a transactional producer and kill-txn-coordinator faults (read_committed consumers)",
    )


def _add_bench_txn_copier(workloads: Any) -> None:
    # The defaults are raylog.chaos.txn_copier's (not imported here: it imports Ray).
    copier = workloads.add_parser(
        "txn-copier",
        help="Kafka's transactional copier test through copier, leader-node and coordinator kills "
        "(on a Ray cluster of its own)",
    )
    copier.set_defaults(run=_bench_txn_copier)
    copier.add_argument("--records", type=positive_int, default=100_000, help="preloaded and copied (100,000)")
    copier.add_argument(
        "--rounds", type=positive_int, default=2, help="rounds of faults, each every variant of each kind once (2)"
    )
    copier.add_argument("--txn-records", type=positive_int, default=1_000, help="records a transaction takes (1,000)")
    copier.add_argument(
        "--records-per-s", type=positive_float, default=800.0, help="the copier's pace, records a second (800)"
    )
