"""``raylog groups``: consumer groups, as Kafka's kafka-consumer-groups.sh.

raylog groups list [--json]                   consumer groups and their states
raylog groups describe GROUP ... [--json]     members, committed offset, log end offset, lag
raylog groups reset-offsets GROUP --topic T [--partitions 0,1]
        (--to-earliest | --to-latest | --to-timestamp-ms T | --shift-by N) [--execute]
        move an idle group's committed offsets (a dry run unless --execute)
raylog groups delete GROUP ...                delete idle groups and their offsets
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

import raylog
from raylog.cli.arguments import command, id_list, non_negative_int
from raylog.cli.connection import connected
from raylog.cli.output import table
from raylog.types import TopicPartition


def _groups_list(args: argparse.Namespace) -> int:
    with connected(args) as cluster:
        groups = raylog.Admin(cluster).list_consumer_groups()
    if args.json:
        print(json.dumps([{"group_id": g, "state": state} for g, state in groups], indent=2))
    else:
        for group_id, state in groups:
            print(f"{group_id}\t{state}")
    return 0


def _groups_describe(args: argparse.Namespace) -> int:
    with connected(args) as cluster:
        described = raylog.Admin(cluster).describe_consumer_groups(args.groups)
    if args.json:
        print(json.dumps([_group_json(g) for g in described], indent=2))
        return 0
    for g in described:
        print(
            f"group {g.group_id}: {g.state}, generation {g.generation}, assignor {g.protocol or '-'},"
            f" {len(g.members)} member(s), coordinator __consumer_offsets-{g.coordinator_partition}"
        )
        rows = [("TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "MEMBER")]
        for tp, lag in g.partitions.items():
            rows.append(
                (
                    tp.topic,
                    str(tp.partition),
                    _dash(lag.committed),
                    str(lag.log_end_offset),
                    _dash(lag.lag),
                    lag.member_id or "-",
                )
            )
        print(table(rows))
    return 0


def _group_json(g: Any) -> dict:
    return {
        "group_id": g.group_id,
        "state": g.state,
        "generation": g.generation,
        "protocol": g.protocol,
        "coordinator_partition": g.coordinator_partition,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "assignment": [list(tp) for tp in m.assignment],
            }
            for m in g.members
        ],
        "partitions": [
            {"topic": tp.topic, "partition": tp.partition, **dataclasses.asdict(lag)}
            for tp, lag in g.partitions.items()
        ],
    }


def _groups_reset_offsets(args: argparse.Namespace) -> int:
    with connected(args) as cluster:
        admin = raylog.Admin(cluster)
        metadata = cluster.metadata(refresh=True)
        partitions = [TopicPartition(args.topic, p) for p in range(metadata.num_partitions(args.topic))]
        if args.partitions:
            partitions = [TopicPartition(args.topic, p) for p in args.partitions]
        new = admin.reset_consumer_group_offsets(
            args.group,
            partitions,
            to="earliest" if args.to_earliest else "latest" if args.to_latest else None,
            to_timestamp_ms=args.to_timestamp_ms,
            shift_by=args.shift_by,
            dry_run=not args.execute,
        )
    if args.json:
        print(json.dumps([{"topic": tp.topic, "partition": tp.partition, "offset": o} for tp, o in new.items()]))
    else:
        print(
            table(
                [("TOPIC", "PARTITION", "NEW-OFFSET")]
                + [(tp.topic, str(tp.partition), str(o)) for tp, o in new.items()]
            )
        )
        if not args.execute:
            print("(dry run: add --execute to apply)", file=sys.stderr)
    return 0


def _groups_delete(args: argparse.Namespace) -> int:
    with connected(args) as cluster:
        raylog.Admin(cluster).delete_consumer_groups(args.groups)
    print(f"deleted {', '.join(args.groups)}", file=sys.stderr)
    return 0


def _dash(value: int | None) -> str:
    return "-" if value is None else str(value)


def add_commands(commands: Any) -> None:
    groups = commands.add_parser("groups", help="list, describe, reset offsets of and delete consumer groups")
    actions = groups.add_subparsers(dest="action", required=True)
    listing = command(actions, "list", _groups_list, "every consumer group and its state")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    describe = command(actions, "describe", _groups_describe, "members, committed offsets, log end offsets and lag")
    describe.add_argument("groups", nargs="+")
    describe.add_argument("--json", action="store_true", help="machine-readable output")
    reset = command(actions, "reset-offsets", _groups_reset_offsets, "move a group's committed offsets (group idle)")
    reset.add_argument("group")
    reset.add_argument("--topic", required=True)
    reset.add_argument("--partitions", type=id_list, help="comma-separated (default: all)")
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-timestamp-ms", type=non_negative_int, help="first offset at or after this time")
    to.add_argument("--shift-by", type=int, help="move by N (negative: back) from the committed offsets")
    reset.add_argument("--execute", action="store_true", help="apply (default: print what would change)")
    reset.add_argument("--json", action="store_true", help="machine-readable output")
    delete = command(actions, "delete", _groups_delete, "delete idle groups and their committed offsets")
    delete.add_argument("groups", nargs="+")
