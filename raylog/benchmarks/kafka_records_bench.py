"""Benchmark of Kafka record batch conversion (``raylog/kafka/records.py``; plain Python, no Ray).

What is measured (``time.perf_counter``, best of several timed runs after an untimed one),
on batches of 10,000 records of 100 B values (``common.make_values``) in three shapes:
values only; 16 B keys; 16 B keys and two headers per record:

1. Kafka -> raylog (what a Produce request costs the listener), three ways:
   (a) ``records.to_raylog``: numba-compiled varint pass, Arrow arrays over gathered
   buffers, one Arrow IPC body; (b) aiokafka's Cython ``DefaultRecordBatch`` reader
   (C-accelerated, a Python object per record) into Python lists and
   ``record_batch.build`` (raylog's producer path), the best a per-record reader can do.
2. raylog -> Kafka (what a Fetch costs it): (a) ``records.to_kafka``; (b)
   ``record_batch.decode_table`` columns to Python lists, then aiokafka's Cython
   ``DefaultRecordBatchBuilder``.
3. Floors measured in the same run on the same records: a copy of the Kafka batch's
   bytes into a buffer already allocated (a memcpy), and raylog's own encode
   (``record_batch.build`` of the Python lists) and decode (``record_batch.decode_table``).
   The ratio column is the path's records/s over the floor named in the note.
4. Each codec both ways with (a), keys shape: the Kafka batch compressed as a Java client
   does it (aiokafka's builder), and the raylog batch stored with that codec.
5. numba's first-call cost in a fresh process: ``import raylog.kafka.records`` plus
   ``records.warm_up()``, with an empty numba cache (compiling) and with the cache it
   left (loading).

(c) numpy vectorisation is not measured: a record's varints must be decoded to find where
the next record starts, a dependency no vectorised numpy expression can express without
a per-record Python loop.

Target: >= 1,000,000 records/s each way for (a), uncompressed.

Usage (or ``python -m raylog.benchmarks.kafka_records_bench``)::

    raylog bench kafka-records [--quick] [--json PATH]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from raylog.benchmarks import common
from raylog.benchmarks.common import Target, make_values
from raylog.common import compression
from raylog.common import record_batch as rb
from raylog.kafka import records

RECORDS = 10_000
VALUE_SIZE = 100
TARGET = Target("records_per_s", ">=", 1_000_000)
#: A copy takes tens of microseconds: timed as the mean of this many, as one call is noise.
COPIES = 20
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


@dataclass
class Row(common.Judged):
    name: str
    records_per_s: float | None = None
    ratio: float | None = None
    note: str = ""
    section: str = "paths"
    targets: list[Target] = field(default_factory=list)
    seconds: float | None = None
    error: str | None = None


@dataclass(frozen=True)
class Shape:
    name: str
    keys: list[bytes] | None
    headers: list[list[tuple[str, bytes]]] | None


def shapes(values: list[bytes]) -> list[Shape]:
    keys = [b"user-%011d" % i for i in range(len(values))]
    headers = [[("trace-id", b"%016x" % i), ("source", b"web")] for i in range(len(values))]
    return [Shape("values", None, None), Shape("keys", keys, None), Shape("keys+headers", keys, headers)]


def kafka_batch(values: list[bytes], shape: Shape, timestamps: list[int], codec: int = 0) -> bytes:
    """The batch a Java-like client sends (aiokafka's builder: xerial snappy, LZ4 frames)."""
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(2, codec, 0, 1000, 0, 0, 1 << 30)
    keys = shape.keys or [None] * len(values)
    headers = shape.headers or [[]] * len(values)
    for i, value in enumerate(values):
        builder.append(i, timestamps[i], keys[i], value, headers[i])
    return bytes(builder.build())


def timed(fn: Any, repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def aiokafka_to_raylog(data: bytes) -> bytes:
    from aiokafka.record.default_records import DefaultRecordBatch

    batch = DefaultRecordBatch(data)
    if not batch.validate_crc():
        raise common.BenchError("aiokafka: CRC mismatch")
    keys, values, stamps, headers = [], [], [], []
    for record in batch:
        keys.append(record.key)
        values.append(record.value)
        stamps.append(record.timestamp)
        headers.append(record.headers or None)
    return rb.build(
        values,
        keys=keys,
        timestamps_ms=stamps,
        headers=headers,
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence,
    )


def aiokafka_to_kafka(data: bytes) -> bytes:
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    header = rb.read_header(data)
    table = rb.decode_table(data)
    builder = DefaultRecordBatchBuilder(2, header.codec, 0, header.producer_id, header.producer_epoch, 0, 1 << 30)
    columns = [table.column(name).to_pylist() for name in ("offset", "timestamp", "key", "value", "headers")]
    for offset, stamp, key, value, headers in zip(*columns, strict=True):
        pairs = [(h["key"], h["value"]) for h in headers] if headers else []
        builder.append(offset - header.base_offset, stamp, key, value, pairs)
    return bytes(builder.build())


def bench_shape(values: list[bytes], shape: Shape, timestamps: list[int], repeats: int) -> list[Row]:
    kafka = kafka_batch(values, shape, timestamps)
    raylog = rb.build(values, keys=shape.keys, timestamps_ms=timestamps, headers=shape.headers)
    if rb.decode_table(records.to_raylog(kafka)).drop_columns(["offset"]) != rb.decode_table(raylog).drop_columns(
        ["offset"]
    ):
        raise common.BenchError(f"{shape.name}: to_raylog does not give raylog's own batch")
    target = memoryview(bytearray(len(kafka)))  # a memcpy into memory already mapped: the floor
    copy_s = timed(lambda: [target.__setitem__(slice(None), kafka) for _ in range(COPIES)], repeats) / COPIES
    encode_s = timed(
        lambda: rb.build(values, keys=shape.keys, timestamps_ms=timestamps, headers=shape.headers), repeats
    )
    decode_s = timed(lambda: rb.decode_table(raylog), repeats)
    rows = [
        Row(f"{shape.name}: bytes copy", RECORDS / copy_s, 1.0, "floor: memcpy", section="floors"),
        Row(f"{shape.name}: record_batch.build", RECORDS / encode_s, 1.0, "floor: raylog encode", section="floors"),
        Row(f"{shape.name}: record_batch.decode", RECORDS / decode_s, 1.0, "floor: raylog decode", section="floors"),
    ]
    paths = [
        ("(a) to_raylog [numba]", lambda: records.to_raylog(kafka), encode_s, "build", [TARGET]),
        ("(b) to_raylog [aiokafka]", lambda: aiokafka_to_raylog(kafka), encode_s, "build", []),
        ("(a) to_kafka [numba]", lambda: records.to_kafka(raylog), decode_s, "decode", [TARGET]),
        ("(b) to_kafka [aiokafka]", lambda: aiokafka_to_kafka(raylog), decode_s, "decode", []),
    ]
    for name, fn, floor_s, floor, targets in paths:
        seconds = timed(fn, repeats)
        rows.append(
            Row(
                f"{shape.name}: {name}",
                RECORDS / seconds,
                floor_s / seconds,
                f"vs record_batch.{floor}; {copy_s / seconds:.3f}x a bytes copy",
                targets=targets,
            )
        )
    return rows


def bench_codecs(values: list[bytes], shape: Shape, timestamps: list[int], repeats: int) -> list[Row]:
    rows = []
    for name in CODECS:
        codec = compression.CODEC_IDS[name]
        kafka = kafka_batch(values, shape, timestamps, codec)
        raylog = records.to_raylog(kafka)
        if rb.read_header(raylog).codec != codec:
            raise common.BenchError(f"{name}: the raylog batch did not keep the codec")
        size = len(kafka)
        for direction, fn in (
            ("to_raylog", lambda k=kafka: records.to_raylog(k)),
            ("to_kafka", lambda r=raylog: records.to_kafka(r)),
        ):
            seconds = timed(fn, repeats)
            rows.append(
                Row(
                    f"{name}: {direction}",
                    RECORDS / seconds,
                    None,
                    f"Kafka batch {size / 1e6:.3f} MB, raylog {len(raylog) / 1e6:.3f} MB",
                    section="codecs",
                    targets=[TARGET] if name == "none" else [],
                )
            )
    return rows


_STARTUP = (
    "import time; t0 = time.perf_counter(); from raylog.kafka import records; t1 = time.perf_counter(); "
    "records.warm_up(); t2 = time.perf_counter(); print(t1 - t0, t2 - t1)"
)


def bench_startup() -> list[Row]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="raylog-numba-cache-") as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        for label in ("empty cache (compiles)", "warm cache (loads)"):
            result = subprocess.run(
                [sys.executable, "-c", _STARTUP], env=env, capture_output=True, text=True, timeout=300, check=True
            )
            import_s, warm_s = map(float, result.stdout.split())
            rows.append(
                Row(
                    f"first call, {label}",
                    None,
                    None,
                    f"import {import_s * 1000:.0f} ms, warm_up {warm_s * 1000:.0f} ms",
                    section="startup",
                    seconds=import_s + warm_s,
                )
            )
    return rows


COLUMNS: dict[str, common.Columns] = {
    section: [
        ("measurement", 44, None),
        ("records/s", 12, lambda r: common.number(r.records_per_s, ",.0f")),
        ("ratio", 8, lambda r: common.times(r.ratio)),
        ("seconds", 8, lambda r: common.number(r.seconds, ".2f")),
    ]
    for section in ("floors", "paths", "codecs", "startup")
}


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    args = common.bench_parser(__doc__, "fewer repeats and one shape (< 30 s)", prog).parse_args(argv)
    common.require("aiokafka")
    repeats = 3 if args.quick else 10
    start = time.perf_counter()
    values = make_values(RECORDS, VALUE_SIZE)
    timestamps = [1_700_000_000_000 + i for i in range(RECORDS)]
    all_shapes = shapes(values)
    rows: list[Row] = []
    for shape in all_shapes[1:2] if args.quick else all_shapes:
        rows += bench_shape(values, shape, timestamps, repeats)
    rows += bench_codecs(values, all_shapes[1], timestamps, repeats)
    rows += bench_startup()
    seconds = time.perf_counter() - start
    print(f"Kafka record batch conversion: {RECORDS:,} records of {VALUE_SIZE} B per batch, best of {repeats} runs")
    print("(a) numba (raylog.kafka.records), (b) aiokafka's Cython reader/builder with Python lists")
    common.print_tables(rows, {section: (columns, 16) for section, columns in COLUMNS.items()})
    print()
    print(common.totals_line(seconds, common.environment(with_ray=False)))
    if args.json:
        common.dump_json(args.json, {"rows": common.rows_json(rows), "seconds": seconds})
    return 0


if __name__ == "__main__":
    common.run_script(main)
