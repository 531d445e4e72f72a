"""``raylog dump-log``: a log directory's segments and batches, as Kafka's kafka-dump-log.sh.

raylog dump-log DIR [--records] [--json]   print a log directory's segments and batches
                                           (Kafka's kafka-dump-log), verifying CRCs;
                                           read-only, exit code 1 if a batch is invalid
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from raylog.common import record_batch
from raylog.errors import RaylogError


def _dump_log(args: argparse.Namespace) -> int:
    """Read-only: walks the segment files directly, never recovering or truncating them."""
    if not os.path.isdir(args.dir):
        print(f"raylog: {args.dir} is not a directory", file=sys.stderr)
        return 2
    segments = sorted(name for name in os.listdir(args.dir) if name.endswith(".log"))
    report = {"dir": args.dir, "segments": []}
    for name in segments:
        with open(os.path.join(args.dir, name), "rb") as f:
            data = f.read()
        report["segments"].append(_dump_segment(name, memoryview(data), args.records))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print_dump(report)
    return 1 if any(s["error"] for s in report["segments"]) else 0


def _dump_segment(name: str, data: memoryview, with_records: bool) -> dict:
    segment: dict = {"file": name, "size_bytes": len(data), "batches": [], "error": None}
    position = 0
    try:
        while position < len(data):
            header = record_batch.parse_header(data, position)
            record_batch.check_crc(data, position, header)
            entry = {field: getattr(header, field) for field in header._fields}
            entry["position"] = position
            if with_records:
                table = record_batch.decode_table(data[position : position + header.size])
                entry["records"] = [
                    {
                        "offset": r["offset"],
                        "timestamp_ms": r["timestamp"],
                        "key": _text(r["key"]),
                        "value": _text(r["value"]),
                    }
                    for r in table.to_pylist()
                ]
            segment["batches"].append(entry)
            position += header.size
    except RaylogError as exc:
        segment["error"] = f"at byte {position}: {exc}"
    return segment


def _print_dump(report: dict) -> None:
    for segment in report["segments"]:
        print(f"{report['dir']}/{segment['file']}: {segment['size_bytes']:,} bytes, {len(segment['batches'])} batches")
        for b in segment["batches"]:
            print(
                f"  baseOffset {b['base_offset']} lastOffset {b['base_offset'] + b['last_offset_delta']} "
                f"count {b['record_count']} epoch {b['leader_epoch']} position {b['position']} "
                f"size {12 + b['batch_length']} maxTimestamp {b['max_timestamp']} crc {b['crc']:#010x}"
            )
            for r in b.get("records", []):
                print(f"    | offset {r['offset']} ts {r['timestamp']} key {r['key']} value {r['value']}")
        if segment["error"]:
            print(f"  INVALID {segment['error']} (the log recovers by cutting here)")


def _text(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.hex()


def add_commands(commands: Any) -> None:
    dump = commands.add_parser("dump-log", help="print the segments and batches of a log directory")
    dump.add_argument("dir")
    dump.add_argument("--records", action="store_true", help="print every record too")
    dump.add_argument("--json", action="store_true", help="machine-readable output")
    dump.set_defaults(run=_dump_log)
