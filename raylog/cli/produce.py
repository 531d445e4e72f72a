"""``raylog produce``: stdin lines as records, as Kafka's kafka-console-producer.sh.

raylog produce TOPIC [--format text|json] [--key-separator SEP] [--acks all|1|0] [--compression C]
               [--partition P]
        one record per stdin line; a summary to stderr. Text: the key before the first SEP.
        JSON: an object with "key", "value", "headers" ({name: value} or [[name, value],
        ...]) and "timestamp_ms", each optional (a key or value that is not a string is
        sent as its JSON text; "topic", "partition" and "offset", which consume --format
        json prints, are ignored); blank lines are skipped
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from typing import Any

import raylog
from raylog.cli.arguments import UsageError, command, non_negative_int
from raylog.cli.connection import connected
from raylog.cli.output import Progress
from raylog.common import compression
from raylog.errors import InvalidRecordError


class _Tally:
    """Acknowledged records per partition, and failures, of a produce run."""

    def __init__(self) -> None:
        self.partitions: collections.Counter[int] = collections.Counter()
        self.errors: list[BaseException] = []

    def add(self, future: Any) -> None:
        error = future.exception()
        if error is None:
            self.partitions[future.result().partition] += 1
        else:
            self.errors.append(error)

    @property
    def acknowledged(self) -> int:
        return sum(self.partitions.values())

    def summary(self, topic: str) -> str:
        spread = ", ".join(f"{p}: {n}" for p, n in sorted(self.partitions.items())) or "none"
        failed = f"; {len(self.errors)} failed" if self.errors else ""
        return f"produced {self.acknowledged} records to {topic!r} (per partition {spread}){failed}"


def _produce(args: argparse.Namespace) -> int:
    if args.format == "json" and args.key_separator is not None:
        raise UsageError("--key-separator is for --format text (a JSON line carries its key)")
    tally, pending = _Tally(), collections.deque()
    progress = Progress(enabled=not sys.stdin.isatty())  # not over what a user types
    with connected(args) as cluster:
        producer = raylog.Producer(cluster, acks=args.acks, compression=args.compression)
        try:
            for number, line in enumerate(sys.stdin, 1):
                line = line.rstrip("\r\n")
                if args.format == "json":
                    if not line.strip():
                        continue
                    fields = _json_line(line, number)
                else:
                    fields = _split_line(line, args.key_separator, number)
                pending.append(producer.send(args.topic, partition=args.partition, **fields))
                while pending and pending[0].done():
                    tally.add(pending.popleft())
                progress.show(f"read {number:,} lines, {tally.acknowledged:,} records acknowledged")
        finally:
            producer.close()
            progress.clear()
    for future in pending:
        tally.add(future)
    print(tally.summary(args.topic), file=sys.stderr)
    if tally.errors:
        raise tally.errors[0]
    return 0


def _split_line(line: str, separator: str | None, number: int) -> dict[str, Any]:
    """A text line's ``send`` arguments: value, and the key before ``separator`` if given."""
    if separator is None:
        return {"value": line.encode()}
    key, found, value = line.partition(separator)
    if not found:
        raise InvalidRecordError(f"line {number} has no key separator {separator!r}")
    return {"key": key.encode(), "value": value.encode()}


#: Fields a JSON line may carry, and those of ``consume --format json`` output it ignores.
_JSON_FIELDS = ("key", "value", "headers", "timestamp_ms")
_JSON_IGNORED = ("topic", "partition", "offset")


def _json_line(line: str, number: int) -> dict[str, Any]:
    """A JSON line's ``send`` arguments.

    Raises:
        InvalidRecordError: not a JSON object of the known fields, or a field of a wrong type.
    """
    try:
        record = json.loads(line)
    except ValueError as exc:
        raise InvalidRecordError(f"line {number} is not JSON: {exc}") from None
    if not isinstance(record, dict):
        raise InvalidRecordError(f"line {number}: expected a JSON object with {', '.join(_JSON_FIELDS)}")
    unknown = sorted(set(record) - {*_JSON_FIELDS, *_JSON_IGNORED})
    if unknown:
        raise InvalidRecordError(f"line {number}: unknown fields {unknown}; known: {', '.join(_JSON_FIELDS)}")
    headers = record.get("headers") or []
    if isinstance(headers, dict):
        headers = list(headers.items())
    if not all(isinstance(h, (list, tuple)) and len(h) == 2 and isinstance(h[0], str) for h in headers):
        raise InvalidRecordError(f'line {number}: "headers" must be {{name: value}} or [[name, value], ...]')
    timestamp_ms = record.get("timestamp_ms")
    if timestamp_ms is not None and (isinstance(timestamp_ms, bool) or not isinstance(timestamp_ms, int)):
        raise InvalidRecordError(f'line {number}: "timestamp_ms" must be an integer, got {timestamp_ms!r}')
    return {
        "key": _json_bytes(record.get("key")),
        "value": _json_bytes(record.get("value")),
        "headers": [(name, _json_bytes(value)) for name, value in headers] or None,
        "timestamp_ms": timestamp_ms,
    }


def _json_bytes(value: Any) -> bytes | None:
    """A string as UTF-8; null as None; anything else as its compact JSON text."""
    if value is None:
        return None
    return (value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))).encode()


def add_commands(commands: Any) -> None:
    produce = command(commands, "produce", _produce, "send stdin lines as records, one per line")
    produce.add_argument("topic")
    produce.add_argument(
        "--format", choices=["text", "json"], default="text", help="json: key, value, headers, timestamp_ms per line"
    )
    produce.add_argument("--key-separator", help="a line's key is the text before the first SEP")
    produce.add_argument("--acks", choices=["all", "1", "0"], default="all")
    produce.add_argument("--compression", choices=sorted(compression.CODEC_IDS))
    produce.add_argument("--partition", type=non_negative_int, help="default: by key (Kafka's partitioner)")
