"""``raylog transactions``, as Kafka's kafka-transactions.sh.

raylog transactions list [--json]             transactional ids, their states and producers
raylog transactions describe ID ... [--json]  state, producer id and epoch, open partitions
raylog transactions find-hanging --topic T [--partition P] [--max-transaction-timeout-ms MS] [--json]
        transactions open in a partition that no coordinator will end (they hold its
        read_committed readers): open longer than MS (default 15 minutes, the longest
        transaction timeout) and ongoing at no coordinator; as kafka-transactions.sh
raylog transactions abort --topic T --partition P (--producer-id ID --producer-epoch E
                          [--coordinator-epoch C] | --start-offset O)
        write an abort marker for a hanging transaction (found by find-hanging), so the
        partition's last stable offset moves on
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

import raylog
from raylog.cli.arguments import UsageError, command
from raylog.cli.connection import connected
from raylog.cli.output import table
from raylog.cli.topics import partitions_of
from raylog.common.requests import MAX_TRANSACTION_TIMEOUT_MS
from raylog.types import TopicPartition


def _transactions_list(args: argparse.Namespace) -> int:
    with connected(args) as cluster:
        return _print_transactions(raylog.Admin(cluster).list_transactions(), args.json)


def _transactions_describe(args: argparse.Namespace) -> int:
    with connected(args) as cluster:
        return _print_transactions(raylog.Admin(cluster).describe_transactions(args.ids), args.json)


def _print_transactions(described: list, as_json: bool) -> int:
    if as_json:
        rows = [dataclasses.asdict(t) | {"partitions": [list(tp) for tp in t.partitions]} for t in described]
        print(json.dumps(rows, indent=2))
        return 0
    rows = [("TRANSACTIONAL-ID", "STATE", "PRODUCER-ID", "EPOCH", "TIMEOUT-MS", "PARTITIONS", "COORDINATOR")]
    for t in described:
        partitions = ",".join(f"{tp.topic}-{tp.partition}" for tp in t.partitions) or "-"
        coordinator = f"__transaction_state-{t.coordinator_partition}"
        rows.append(
            (
                t.transactional_id,
                t.state,
                str(t.producer_id),
                str(t.producer_epoch),
                str(t.timeout_ms),
                partitions,
                coordinator,
            )
        )
    print(table(rows))
    return 0


def _transactions_find_hanging(args: argparse.Namespace) -> int:
    with connected(args) as cluster:
        partitions = partitions_of(cluster, args.topic, args.partition)
        hanging = raylog.Admin(cluster).find_hanging_transactions(partitions, args.max_transaction_timeout_ms)
    if args.json:
        found = [h._asdict() | {"topic": h.partition.topic, "partition": h.partition.partition} for h in hanging]
        print(json.dumps(found))
        return 0
    rows = [("TOPIC", "PARTITION", "PRODUCER-ID", "PRODUCER-EPOCH", "START-OFFSET", "LAST-TIMESTAMP")]
    rows += [
        (h.partition.topic, str(h.partition.partition), str(h.producer_id), str(h.producer_epoch))
        + (str(h.start_offset), str(h.last_timestamp))
        for h in hanging
    ]
    print(table(rows))
    return 0


def _transactions_abort(args: argparse.Namespace) -> int:
    tp = TopicPartition(args.topic, args.partition)
    with connected(args) as cluster:
        admin = raylog.Admin(cluster)
        pid, epoch = args.producer_id, args.producer_epoch
        if args.start_offset is not None:
            producers = admin.describe_producers([tp])[tp]
            found = [p for p in producers if p.current_transaction_start_offset == args.start_offset]
            if not found:
                raise UsageError(f"no transaction open in {args.topic}-{args.partition} starts at {args.start_offset}")
            pid, epoch = found[0].producer_id, found[0].producer_epoch
        elif pid is None or epoch is None:
            raise UsageError("give --producer-id and --producer-epoch, or --start-offset")
        admin.abort_transaction(tp, pid, epoch, args.coordinator_epoch)
    print(f"aborted the transaction of producer id {pid} epoch {epoch} in {args.topic}-{args.partition}")
    return 0


def add_commands(commands: Any) -> None:
    transactions = commands.add_parser("transactions", help="list, describe and abort transactions")
    actions = transactions.add_subparsers(dest="action", required=True)
    listing = command(actions, "list", _transactions_list, "every transactional id and its state")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    describe = command(actions, "describe", _transactions_describe, "the state of transactional ids")
    describe.add_argument("ids", nargs="+")
    describe.add_argument("--json", action="store_true", help="machine-readable output")
    hanging = command(
        actions, "find-hanging", _transactions_find_hanging, "transactions open in a partition no coordinator will end"
    )
    hanging.add_argument("--topic", required=True)
    hanging.add_argument("--partition", type=int, help="one partition (default: every partition of the topic)")
    hanging.add_argument(
        "--max-transaction-timeout-ms",
        type=int,
        default=MAX_TRANSACTION_TIMEOUT_MS,
        help="report transactions whose producer wrote last longer ago than this (default: the longest "
        "transaction timeout)",
    )
    hanging.add_argument("--json", action="store_true", help="machine-readable output")
    abort = command(actions, "abort", _transactions_abort, "write an abort marker for a hanging transaction")
    abort.add_argument("--topic", required=True)
    abort.add_argument("--partition", type=int, required=True)
    abort.add_argument("--producer-id", type=int)
    abort.add_argument("--producer-epoch", type=int)
    abort.add_argument("--coordinator-epoch", type=int, default=0)
    abort.add_argument("--start-offset", type=int, help="the transaction's first offset (instead of producer id/epoch)")
