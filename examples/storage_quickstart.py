"""A tour of raylog's storage engine: write a keyed clickstream into a partition log, crash,
recover, and read it back as Arrow.

The recovery's warning (the torn bytes it cut) shows with the example's lines; ``--verbose``
shows the storage engine's INFO lines too.

Run: .venv/bin/python examples/storage_quickstart.py [--verbose]
"""

from __future__ import annotations

import os
import random
import tempfile
import time

import pyarrow as pa
from _support import arguments, configure_output

from raylog.common import compression, record_batch
from raylog.config import LogConfig
from raylog.storage.log import Log

RECORDS = 200_000
BATCH_RECORDS = 5_000


def clickstream_batches(rng: random.Random, now_ms: int):
    """Batches of JSON-ish click events keyed by user, 1 ms apart."""
    pages = [b"/home", b"/cart", b"/search", b"/item/%d"]
    for start in range(0, RECORDS, BATCH_RECORDS):
        users = [b"user-%d" % rng.randrange(500) for _ in range(BATCH_RECORDS)]
        values = [b'{"page": "%s", "n": %d}' % (rng.choice(pages), start + i) for i in range(BATCH_RECORDS)]
        stamps = [now_ms + start + i for i in range(BATCH_RECORDS)]
        yield record_batch.build(values, keys=users, timestamps_ms=stamps, codec=compression.LZ4)


def read_everything(log: Log):
    tables, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, max_bytes=4 << 20)
        tables.append(record_batch.decode_table(data, min_offset=offset))
        offset = tables[-1].column("offset")[-1].as_py() + 1
    return tables


def main(argv: list[str] | None = None) -> None:
    configure_output(arguments(__doc__).parse_args(argv).verbose)
    rng = random.Random(42)
    now_ms = time.time_ns() // 1_000_000
    config = LogConfig.from_properties({"segment.bytes": 1 << 20, "retention.ms": -1})
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "clicks-0")
        log = Log.open(path, config)
        started = time.perf_counter()
        for data in clickstream_batches(rng, now_ms):
            log.append_as_leader(data, leader_epoch=0)
        elapsed = time.perf_counter() - started
        print(
            f"generated and appended {log.log_end_offset:,} records in {log.segment_count} segments "
            f"({log.log_end_offset / elapsed:,.0f} records/s, lz4, {log.size_bytes / 1e6:.1f} MB on disk)"
        )

        # A crash: the unflushed tail of the active segment gets torn and garbage lands after it.
        active = sorted(name for name in os.listdir(path) if name.endswith(".log"))[-1]
        with open(os.path.join(path, active), "r+b") as f:
            f.truncate(os.path.getsize(f.name) - 1_000)
            f.seek(0, os.SEEK_END)
            f.write(os.urandom(4_096))
        log = Log.open(path, config)
        print(f"recovered after a simulated crash: {log.recovery}; log end offset now {log.log_end_offset:,}")

        tables = read_everything(log)
        table = pa.concat_tables(tables)
        rows = table.num_rows
        offsets_ok = table["offset"].to_numpy().tolist() == list(range(rows))
        print(f"read back {rows:,} records as Arrow ({len(tables)} reads); offsets contiguous: {offsets_ok}")
        hit = log.offsets_for_time(now_ms + 123_456)
        print(f"first record at or after t0+123.456 s: offset {hit.offset:,}")
        log.close()
        assert rows == log.log_end_offset and hit.offset == 123_456 and offsets_ok


if __name__ == "__main__":
    main()
