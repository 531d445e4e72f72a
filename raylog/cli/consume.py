"""``raylog consume``: records to stdout, as Kafka's kafka-console-consumer.sh.

raylog consume TOPIC [--from-beginning | --offset N --partition P] [--max-messages N]
               [--timeout-ms T] [--print-offsets] [--print-key] [--key-separator SEP] [--group G]
               [--print-timestamp] [--format text|json]
        values one per line; stops after N records or T ms without records; with --group,
        a member of consumer group G (its partitions, from its committed offsets, committing).
        --print-timestamp puts the timestamp (ms) first; --format json prints one object
        per record instead (topic, partition, offset, timestamp_ms, key, value, headers)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING, Any

import raylog
from raylog.cli.arguments import UsageError, command, non_negative_int, positive_int
from raylog.cli.connection import connected
from raylog.cli.topics import partitions_of

if TYPE_CHECKING:
    from raylog.clients.cluster import RaylogCluster


#: The longest single poll of ``consume`` (it checks --timeout-ms between polls).
CONSUME_POLL_MS = 500


def _consume(args: argparse.Namespace) -> int:
    if args.offset is not None and args.partition is None:
        raise UsageError("--offset needs --partition")
    if args.format == "json" and (args.print_offsets or args.print_key or args.print_timestamp):
        raise UsageError("--print-* are for --format text (json prints every field)")
    with connected(args) as cluster:
        consumer = raylog.Consumer(
            cluster, group_id=args.group, auto_offset_reset="earliest" if args.from_beginning else "latest"
        )
        try:
            if args.group is not None and args.partition is None:
                consumer.subscribe([args.topic])  # share the topic with the group's other members
            else:
                _assign(consumer, cluster, args)
            count = _print_records(consumer, args)
        finally:
            consumer.close()
    print(f"consumed {count} records", file=sys.stderr)
    return 0


def _assign(consumer: Any, cluster: RaylogCluster, args: argparse.Namespace) -> None:
    partitions = partitions_of(cluster, args.topic, args.partition)
    consumer.assign(partitions)
    if args.offset is not None:
        consumer.seek(partitions[0], args.offset)


def _print_records(consumer: Any, args: argparse.Namespace) -> int:
    """Print records until --max-messages or --timeout-ms without any; how many printed."""
    printed, idle_since = 0, time.monotonic()
    poll_ms = CONSUME_POLL_MS if args.timeout_ms is None else min(CONSUME_POLL_MS, args.timeout_ms)
    while args.max_messages is None or printed < args.max_messages:
        wanted = None if args.max_messages is None else args.max_messages - printed
        records = [r for rs in consumer.poll(timeout_ms=poll_ms, max_records=wanted).values() for r in rs]
        for record in records:
            print(_format(record, args))
        sys.stdout.flush()
        printed += len(records)
        if records:
            idle_since = time.monotonic()
        elif args.timeout_ms is not None and (time.monotonic() - idle_since) * 1000 >= args.timeout_ms:
            break
    return printed


def _format(record: Any, args: argparse.Namespace) -> str:
    if args.format == "json":
        return json.dumps(
            {
                "topic": record.topic,
                "partition": record.partition,
                "offset": record.offset,
                "timestamp_ms": record.timestamp_ms,
                "key": _json_text(record.key),
                "value": _json_text(record.value),
                "headers": [[name, _json_text(value)] for name, value in record.headers or []],
            }
        )
    timestamp = f"{record.timestamp_ms}\t" if args.print_timestamp else ""
    offsets = f"{record.partition}:{record.offset}\t" if args.print_offsets else ""
    key = f"{_console_text(record.key)}{args.key_separator}" if args.print_key else ""
    return f"{timestamp}{offsets}{key}{_console_text(record.value)}"


def _json_text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="backslashreplace")


def _console_text(data: bytes | None) -> str:
    return "null" if data is None else data.decode("utf-8", errors="backslashreplace")


def add_commands(commands: Any) -> None:
    consume = command(commands, "consume", _consume, "print records' values, one per line")
    consume.add_argument("topic")
    start = consume.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="default: only records produced from now on")
    start.add_argument("--offset", type=non_negative_int, help="start at this offset (needs --partition)")
    consume.add_argument("--partition", type=non_negative_int, help="read this partition only")
    consume.add_argument(
        "--group", help="consume as a member of this consumer group, from its committed offsets (committing as it goes)"
    )
    consume.add_argument("--max-messages", type=positive_int, help="stop after this many records")
    consume.add_argument("--timeout-ms", type=non_negative_int, help="stop after this long without records")
    consume.add_argument("--print-offsets", action="store_true", help="prefix partition:offset")
    consume.add_argument("--print-key", action="store_true", help="print KEY<SEP>VALUE")
    consume.add_argument("--key-separator", default="\t", help="between key and value (default: tab)")
    consume.add_argument("--print-timestamp", action="store_true", help="prefix the record's timestamp (ms)")
    consume.add_argument(
        "--format", choices=["text", "json"], default="text", help="json: one object per record, every field"
    )
