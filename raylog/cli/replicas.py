"""``raylog reassign-partitions``, ``elect-leaders``, ``delete-records`` and ``get-offsets``:
where replicas and leaders are, and where a log starts and ends (Kafka's
kafka-reassign-partitions.sh, kafka-leader-election.sh, kafka-delete-records.sh and
kafka-get-offsets.sh).

raylog reassign-partitions start TOPIC --partitions 0,1 --replicas 2,0,1 [--wait [--timeout-ms T]]
        move partitions to a new replica set (or change their replication factor); with
        --wait, until every moved partition is in sync on its new replicas
raylog reassign-partitions list [--json]      reassignments under way
raylog elect-leaders [TOPIC ...]              leadership back to preferred replicas (or --election-type unclean)
raylog get-offsets TOPIC [--partitions 0,1] [--time latest|earliest|max-timestamp|earliest-local|latest-tiered|MS]
        one line TOPIC:PARTITION:OFFSET a partition (-1: none), as kafka-get-offsets.sh prints
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import raylog
from raylog.cli.arguments import command, id_list, non_negative_int
from raylog.cli.connection import connected
from raylog.cli.output import PROGRESS_INTERVAL_S, Progress, ids_text
from raylog.errors import KafkaTimeoutError
from raylog.types import OffsetSpec, TopicPartition

#: How long ``reassign-partitions start --wait`` waits by default.
REASSIGN_WAIT_MS = 600_000
#: ``get-offsets --time`` by name, with the numbers kafka-get-offsets.sh takes for them.
OFFSET_SPECS = {
    "latest": OffsetSpec.latest(),
    "earliest": OffsetSpec.earliest(),
    "max-timestamp": OffsetSpec.max_timestamp(),
    "earliest-local": OffsetSpec.earliest_local(),
    "latest-tiered": OffsetSpec.latest_tiered(),
}

_NAMED_OR_NUMBERED = {**OFFSET_SPECS, **{str(spec.timestamp): spec for spec in OFFSET_SPECS.values()}}


def offset_spec(text: str) -> OffsetSpec:
    """``--time``: a name of :data:`OFFSET_SPECS`, its Kafka number (-1 to -5), or a time in ms."""
    if text in _NAMED_OR_NUMBERED:
        return _NAMED_OR_NUMBERED[text]
    try:
        return OffsetSpec.for_timestamp(int(text))
    except (ValueError, raylog.InvalidConfigError):
        names = ", ".join(OFFSET_SPECS)
        raise argparse.ArgumentTypeError(f"expected one of {names}, -1 to -5 or a time in ms, got {text!r}") from None


def _reassign_partitions(args: argparse.Namespace) -> int:
    targets = {raylog.TopicPartition(args.topic, p): args.replicas for p in args.partitions}
    with connected(args) as cluster:
        admin = raylog.Admin(cluster)
        admin.alter_partition_reassignments(targets)
        if args.wait:
            _await_reassignment(admin, set(targets), args.timeout_ms)
    if args.wait:
        print(f"reassigned {args.topic} partitions {args.partitions} to brokers {args.replicas}")
    else:
        print(
            f"reassigning {args.topic} partitions {args.partitions} to brokers {args.replicas}: new replicas "
            "fill by fetching; old ones go once every new one is in sync (see `raylog reassign-partitions list`)"
        )
    return 0


def _await_reassignment(admin: Any, moving: set[TopicPartition], timeout_ms: int) -> None:
    """Wait until none of ``moving`` is being reassigned, with a progress line.

    Raises:
        KafkaTimeoutError: still moving after ``timeout_ms`` (the move goes on regardless).
    """
    progress = Progress()
    deadline = time.monotonic() + timeout_ms / 1000
    try:
        while left := moving & set(admin.list_partition_reassignments()):
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(
                    f"{len(left)} of {len(moving)} partitions still moving after {timeout_ms} ms; the move goes on "
                    "(see `raylog reassign-partitions list`)"
                )
            progress.show(f"reassigning: {len(moving) - len(left)}/{len(moving)} partitions in sync on their targets")
            time.sleep(PROGRESS_INTERVAL_S)
    finally:
        progress.clear()


def _list_reassignments(args: argparse.Namespace) -> int:
    with connected(args) as cluster:
        pending = raylog.Admin(cluster).list_partition_reassignments()
    rows = [{"topic": tp.topic, "partition": tp.partition, "target": list(t)} for tp, t in sorted(pending.items())]
    print(
        json.dumps(rows, indent=2)
        if args.json
        else "\n".join(f"{r['topic']}-{r['partition']} -> {ids_text(r['target'])}" for r in rows)
        or "no reassignment under way"
    )
    return 0


def _elect_leaders(args: argparse.Namespace) -> int:
    with connected(args) as cluster:
        moved = raylog.Admin(cluster).elect_leaders(args.topics or None, election_type=args.election_type)
    print(f"{args.election_type} leader election: {moved} partitions changed leader")
    return 0


def _delete_records(args: argparse.Namespace) -> int:
    with connected(args) as cluster:
        asked = {TopicPartition(args.topic, p): args.offset for p in args.partitions}
        low_watermarks = raylog.Admin(cluster).delete_records(asked)
    for tp, low_watermark in sorted(low_watermarks.items()):
        print(f"{tp.topic}-{tp.partition}\tlow watermark {low_watermark}")
    return 0


def _get_offsets(args: argparse.Namespace) -> int:
    with connected(args) as cluster:
        admin = raylog.Admin(cluster)
        partitions = args.partitions
        if partitions is None:
            (description,) = admin.describe_topics([args.topic])
            partitions = [p.partition for p in description.partitions]
        found = admin.list_offsets(
            {TopicPartition(args.topic, p): args.time for p in partitions}, isolation_level=args.isolation_level
        )
    for tp, answer in found.items():
        print(f"{tp.topic}:{tp.partition}:{answer.offset}")
    return 0


def add_commands(commands: Any) -> None:
    reassign = commands.add_parser("reassign-partitions", help="move partitions to other brokers, change replication")
    actions = reassign.add_subparsers(dest="action", required=True)
    start = command(actions, "start", _reassign_partitions, "move partitions to a new replica set")
    start.add_argument("topic")
    start.add_argument("--partitions", type=id_list, required=True, help="e.g. 0,1,2")
    start.add_argument("--replicas", type=id_list, required=True, help="target brokers, preferred leader first")
    start.add_argument("--wait", action="store_true", help="return once every moved partition is in sync")
    start.add_argument(
        "--timeout-ms", type=non_negative_int, default=REASSIGN_WAIT_MS, help="how long --wait waits (600,000)"
    )
    listing = command(actions, "list", _list_reassignments, "reassignments under way")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    elect = command(
        commands, "elect-leaders", _elect_leaders, "move leadership back to preferred replicas, or elect unclean"
    )
    elect.add_argument("topics", nargs="*", metavar="TOPIC", help="default: every topic")
    elect.add_argument(
        "--election-type",
        choices=("preferred", "unclean"),
        default="preferred",
        help="unclean: a leader for each partition without a live one, from any live replica "
        "(acknowledged records only the lost replicas held are gone)",
    )
    delete = command(commands, "delete-records", _delete_records, "delete every record below an offset")
    delete.add_argument("topic")
    delete.add_argument("--partitions", type=id_list, required=True, help="e.g. 0,1,2")
    delete.add_argument(
        "--offset", type=int, required=True, help="records below it go; -1: below the high watermark (all committed)"
    )
    offsets = command(commands, "get-offsets", _get_offsets, "an offset of each partition, by time or a sentinel")
    offsets.add_argument("topic")
    offsets.add_argument("--partitions", type=id_list, help="e.g. 0,1,2 (default: every partition)")
    offsets.add_argument(
        "--time",
        type=offset_spec,
        default=OffsetSpec.latest(),
        help="latest (-1, the default), earliest (-2), max-timestamp (-3), earliest-local (-4), latest-tiered "
        "(-5), or a time in ms: the first record at or after it",
    )
    offsets.add_argument(
        "--isolation-level", choices=("read_uncommitted", "read_committed"), default="read_uncommitted"
    )
