"""Benchmark of raylog's storage engine (``raylog/storage``: plain Python, no Ray).

What is measured (every timing with ``time.perf_counter``; each timed run is repeated and
the table shows the best run, the one least disturbed by other work on the machine):

1. Log append: ``Log.append_as_leader`` of pre-built ~1 MiB batches (10,000 records of
   100 B, or 1,000 records of 1 KiB), against ``os.write`` of the same batch byte strings
   to a fresh file in the same directory. Only the append and write calls are timed; log
   and plain runs alternate, after one untimed run of each, so both see the same machine
   state. Target: >= 0.6x plain write.
2. Log read: the whole log from offset 0 in ``Log.read(offset, max_bytes=1 MiB)`` calls,
   advancing to the last batch header's ``next_offset`` (bodies are not decoded), against
   ``os.pread`` of the same segment file in 1 MiB chunks. Both read from the page cache:
   each is run once untimed first. Target: >= 0.8x plain read.
3. Encode: ``record_batch.build`` of Python lists of 100 B values in batches of 1,000 and
   10,000 records (~1 MiB), uncompressed and lz4. Target: >= 1,000,000 records/s.
4. Decode: ``record_batch.decode_table`` of those batches, with CRC checks on (the
   default) and off. Target: >= 20,000,000 records/s.
5. On-disk size: a log of 100 B records in 1,000-record uncompressed batches; the
   apparent size of every file in its directory over the value bytes. Target: <= 1.15x.
6. Compaction: ``Log.clean`` of a compacted log of 100 B records in 1,000-record batches,
   random keys each written 5 times on average (every record dirty, 8 MiB segments, so
   every segment is rewritten), records cleaned per second, against ``Log.read`` of the
   same segments before the clean (as in 2; bodies not decoded). No target yet.

Values are JSON-like text with a random hex tail, so lz4 finds some, not all, redundancy.
MB is 10^6 bytes; MB/s counts batch bytes as stored. Everything runs in a temporary
directory that is removed at the end.

Usage (or ``python -m raylog.benchmarks.storage_bench``)::

    raylog bench storage [--quick] [--json PATH] [--dir PARENT]
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from dataclasses import asdict, dataclass
from functools import partial

import numpy as np

from raylog.benchmarks import common
from raylog.benchmarks.common import MB, MIB, Target, best, make_values, timed_calls
from raylog.common import record_batch
from raylog.common.compression import codec_id
from raylog.config import LogConfig
from raylog.storage.log import Log
from raylog.storage.segment import file_name

#: One segment holds every run, so the plain read can read the same (single) file.
CONFIG = LogConfig.from_properties({"segment.bytes": 1024 * MIB})
#: Distinct batches built per record size; appends cycle through them.
BATCH_POOL = 4
#: (label, value size, records per batch): each batch is just under 1 MiB.
APPEND_SHAPES = (("100 B", 100, 10_000), ("1 KiB", 1024, 1_000))


@dataclass(frozen=True)
class Scale:
    """How much work each measurement does."""

    name: str
    repeats: int  # timed runs per measurement; the best is reported
    log_bytes: int  # batch bytes appended per timed append run
    codec_records: int  # records encoded or decoded per timed run
    disk_batches: int  # 1,000-record batches in the on-disk size log
    clean_batches: int  # 1,000-record batches in the compacted log


FULL = Scale("full", repeats=7, log_bytes=256 * MIB, codec_records=500_000, disk_batches=100, clean_batches=500)
QUICK = Scale("quick", repeats=3, log_bytes=32 * MIB, codec_records=50_000, disk_batches=10, clean_batches=50)


@dataclass
class Row(common.Judged):
    """One line of the results table; its ``target`` is a "ratio" or "records_per_s" goal."""

    name: str
    records_per_s: float | None = None
    mb_per_s: float | None = None
    ratio: float | None = None  # over the baseline row under it, or bytes on disk / value bytes
    target: Target | None = None
    note: str = ""

    @property
    def targets(self) -> list[Target]:
        return [] if self.target is None else [self.target]


# ---------------------------------------------------------------------------------------
# Inputs


def batch_pool(value_size: int, records: int) -> list[bytes]:
    """``BATCH_POOL`` distinct uncompressed batches of ``records`` values each."""
    values = make_values(records * BATCH_POOL, value_size)
    return [record_batch.build(values[i * records : (i + 1) * records]) for i in range(BATCH_POOL)]


# ---------------------------------------------------------------------------------------
# 1. Append


def append_to_log(directory: str, batches: list[bytes]) -> tuple[float, Log]:
    """Seconds to append ``batches`` to a new log in ``directory``, and the open log."""
    log = Log.open(directory, CONFIG)
    start = time.perf_counter()
    for batch in batches:
        log.append_as_leader(batch, leader_epoch=0)
    return time.perf_counter() - start, log


def write_plain(path: str, batches: list[bytes]) -> float:
    """Seconds to ``os.write`` ``batches`` to a new file at ``path`` (removed after)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        start = time.perf_counter()
        for batch in batches:
            if os.write(fd, batch) != len(batch):
                raise OSError(f"short write to {path}")
        return time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(path)


def discard(log: Log) -> None:
    """Close and delete a log without first flushing its data to disk."""
    log.truncate_fully_and_start_at(0)
    log.close()
    shutil.rmtree(log.dir)


def bench_append(workdir: str, batches: list[bytes], repeats: int) -> tuple[float, float, Log]:
    """Best seconds of log appends and of plain writes, alternating after one untimed run
    of each (a fresh process's first writes pay for page-cache memory: ~10x slower here).
    The last log stays open."""
    log_times, write_times = [], []
    log = None
    for run in range(repeats + 1):
        if log is not None:
            discard(log)
        elapsed, log = append_to_log(os.path.join(workdir, f"append-{run}"), batches)
        log_times.append(elapsed)
        write_times.append(write_plain(os.path.join(workdir, "plain.bin"), batches))
    return min(log_times[1:]), min(write_times[1:]), log


# ---------------------------------------------------------------------------------------
# 2. Read


def read_log(log: Log) -> int:
    """Read the whole log in 1 MiB reads, stepping by batch headers; returns records read."""
    offset, end, records = 0, log.log_end_offset, 0
    while offset < end:
        data = log.read(offset, MIB)
        if not data:
            raise RuntimeError(f"empty read at offset {offset} below the log end offset {end}")
        for _, header in record_batch.iter_headers(data):
            records += header.record_count
        offset = header.next_offset
    return records


def read_plain(fd: int) -> int:
    """Read the file behind ``fd`` from the start in 1 MiB ``pread`` calls; returns bytes read."""
    position = 0
    while chunk := os.pread(fd, MIB, position):
        position += len(chunk)
    return position


def bench_read(log: Log, repeats: int) -> tuple[float, float]:
    """Best seconds of reading ``log`` whole and of plain reads of its segment file."""
    if log.segment_count != 1:
        raise RuntimeError("the read benchmark expects a single-segment log")
    fd = os.open(os.path.join(log.dir, file_name(0, ".log")), os.O_RDONLY)
    try:
        if read_log(log) != log.log_end_offset or read_plain(fd) != log.size_bytes:  # warm the cache
            raise RuntimeError("a read came back short")
        log_times, plain_times = [], []
        for _ in range(repeats):
            log_times.append(timed_calls(partial(read_log, log), 1))
            plain_times.append(timed_calls(partial(read_plain, fd), 1))
        return min(log_times), min(plain_times)
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------
# 1 and 2: rows


def log_rows(workdir: str, scale: Scale) -> list[Row]:
    """Append and read rows for each record size, each followed by its baseline."""
    appends, reads = [], []
    for label, value_size, records in APPEND_SHAPES:
        pool = batch_pool(value_size, records)
        count = max(1, scale.log_bytes // len(pool[0]))
        batches = [pool[i % BATCH_POOL] for i in range(count)]
        total_bytes, total_records = sum(map(len, batches)), count * records
        log_s, write_s, log = bench_append(workdir, batches, scale.repeats)
        read_s, plain_s = bench_read(log, scale.repeats)
        discard(log)
        shape = f"{label} records, {len(pool[0]) / MIB:.2f} MiB batches"
        appends += [
            Row(
                f"append {shape}",
                total_records / log_s,
                total_bytes / log_s / MB,
                write_s / log_s,
                Target("ratio", ">=", 0.6),
                f"{total_bytes / MIB:.0f} MiB per run",
            ),
            Row("  baseline: os.write of the same bytes", None, total_bytes / write_s / MB),
        ]
        reads += [
            Row(
                f"read {shape}",
                total_records / read_s,
                total_bytes / read_s / MB,
                plain_s / read_s,
                Target("ratio", ">=", 0.8),
                "1 MiB reads, warm page cache",
            ),
            Row("  baseline: os.pread of the segment file", None, total_bytes / plain_s / MB),
        ]
    return appends + reads


# ---------------------------------------------------------------------------------------
# 3 and 4: encode and decode


def codec_rows(scale: Scale) -> list[Row]:
    """Encode and decode rows for 1,000 and 10,000 record batches, none and lz4."""
    values = make_values(10_000, 100)
    encodes, decodes = [], []
    for records in (1_000, 10_000):
        calls = max(1, scale.codec_records // records)
        for codec in ("none", "lz4"):
            shape = f"{records:,} x 100 B, {codec}"
            build = partial(record_batch.build, values[:records], codec=codec_id(codec))
            batch = build()
            seconds = best(partial(timed_calls, build, calls), scale.repeats)
            note = f"batch {len(batch) / MIB:.2f} MiB"
            encodes.append(
                Row(
                    f"encode {shape}",
                    records * calls / seconds,
                    len(batch) * calls / seconds / MB,
                    target=Target("records_per_s", ">=", 1_000_000),
                    note=note,
                )
            )
            decodes += [decode_row(shape, batch, records, calls, crcs, scale.repeats) for crcs in (True, False)]
    return encodes + decodes


def decode_row(shape: str, batch: bytes, records: int, calls: int, check_crcs: bool, repeats: int) -> Row:
    """The decode rate of ``batch`` into an Arrow table."""
    decode = partial(record_batch.decode_table, batch, check_crcs=check_crcs)
    if decode().num_rows != records:
        raise RuntimeError(f"decoding {shape} lost records")
    seconds = best(partial(timed_calls, decode, calls), repeats)
    return Row(
        f"decode {shape}, crc {'on' if check_crcs else 'off'}",
        records * calls / seconds,
        len(batch) * calls / seconds / MB,
        target=Target("records_per_s", ">=", 20_000_000),
        note="one batch per call",
    )


# ---------------------------------------------------------------------------------------
# 5. On-disk size


def disk_row(workdir: str, scale: Scale) -> Row:
    """Bytes on disk over value bytes for 100 B records in 1,000-record batches."""
    pool = batch_pool(100, 1_000)
    directory = os.path.join(workdir, "size")
    _, log = append_to_log(directory, [pool[i % BATCH_POOL] for i in range(scale.disk_batches)])
    log.close()
    sizes = {name: os.path.getsize(os.path.join(directory, name)) for name in os.listdir(directory)}
    shutil.rmtree(directory)
    total, segment = sum(sizes.values()), sizes[file_name(0, ".log")]
    payload = scale.disk_batches * 1_000 * 100
    return Row(
        "on-disk size, 1,000 x 100 B batches, none",
        ratio=total / payload,
        target=Target("ratio", "<=", 1.15),
        note=f"{total:,} B on disk ({segment:,} B segment) for {payload:,} B of values",
    )


# ---------------------------------------------------------------------------------------
# 6. Compaction


def clean_rows(workdir: str, scale: Scale) -> list[Row]:
    """Records/s of ``Log.clean`` against ``Log.read`` of the same log, best of the repeats
    (each on a fresh copy of the log: a clean changes it)."""
    config = LogConfig.from_properties({"cleanup.policy": "compact", "segment.bytes": 8 * MIB})
    values, rng = make_values(1_000, 100), np.random.default_rng(0)
    key_ids = rng.integers(scale.clean_batches * 200, size=(scale.clean_batches, 1_000))
    batches = [record_batch.build(values, keys=[b"user-%07d" % k for k in ids]) for ids in key_ids]
    clean_times, read_times = [], []
    for run in range(scale.repeats):
        log = Log.open(os.path.join(workdir, f"clean-{run}"), config)
        for batch in batches:
            log.append_as_leader(batch, leader_epoch=0)
        log.roll()
        log.append_as_leader(batches[0], leader_epoch=0)
        read_times.append(timed_calls(partial(read_log, log), 1))
        start = time.perf_counter()
        stats = log.clean(force=True)
        clean_times.append(time.perf_counter() - start)
        discard(log)
    records, clean_s, read_s = stats.records_read, min(clean_times), min(read_times)
    return [
        Row(
            "compaction: Log.clean, 100 B records, ~5 per key",
            records / clean_s,
            stats.bytes_read / clean_s / MB,
            read_s / clean_s,
            note=f"{stats.records_read:,} records read, {stats.records_kept:,} kept",
        ),
        Row("  baseline: Log.read of the same segments", records / read_s, stats.bytes_read / read_s / MB),
    ]


# ---------------------------------------------------------------------------------------
# Output


COLUMNS = (
    ("measurement", 50, None),
    ("records/s", 13, lambda r: common.number(r.records_per_s, ",.0f")),
    ("MB/s", 9, lambda r: common.number(r.mb_per_s, ",.0f")),
    ("ratio", 7, lambda r: common.times(r.ratio)),
)


def write_json(path: str, scale: Scale, rows: list[Row], seconds: float) -> None:
    results = [
        {
            **asdict(row),
            "name": row.name.strip(),
            "target": None if row.target is None else asdict(row.target),
            "result": row.result or None,
        }
        for row in rows
    ]
    common.dump_json(
        path,
        {
            "mode": scale.name,
            "statistic": f"best of {scale.repeats} runs",
            "mb": MB,
            "total_seconds": seconds,
            "environment": common.environment(with_ray=False),
            "results": results,
        },
    )


# ---------------------------------------------------------------------------------------
# Entry point


def run(scale: Scale, parent: str | None) -> list[Row]:
    """Every measurement, in a temporary directory under ``parent``."""
    with contextlib.ExitStack() as stack:
        workdir = common.temp_workdir(stack, "raylog-bench-", parent)
        return log_rows(workdir, scale) + codec_rows(scale) + [disk_row(workdir, scale)] + clean_rows(workdir, scale)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    args = common.bench_parser(__doc__, "a fast smoke run (< 10 s), for tests", prog).parse_args(argv)
    scale = QUICK if args.quick else FULL
    start = time.perf_counter()
    rows = run(scale, args.dir)
    seconds = time.perf_counter() - start
    print(f"raylog storage benchmark, {scale.name} mode: best of {scale.repeats} timed runs each; MB = 10^6 bytes")
    print("ratio: log throughput / the plain-file baseline under it, or bytes on disk / value bytes")
    print("appends and reads: log and plain each run once untimed first (both then see a warm page cache)")
    print("BELOW: target missed")
    print()
    print(common.format_table(COLUMNS, rows))
    print()
    print(common.totals_line(seconds, common.environment(with_ray=False)))
    if args.json:
        write_json(args.json, scale, rows, seconds)
    return 0


if __name__ == "__main__":
    common.run_script(main)
