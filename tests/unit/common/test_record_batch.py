"""The record batch format: building, validation and decoding (no Ray, no disk)."""

from __future__ import annotations

import struct

import crc32c
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raylog.common import compression
from raylog.common import record_batch as rb
from raylog.errors import CorruptRecordError, InvalidConfigError, RecordTooLargeError

CODECS = ["none", "lz4", "zstd", "gzip", "snappy"]


def _values(n: int, size: int = 100) -> list[bytes]:
    return [(b"%08d" % i) * (size // 8) for i in range(n)]


def test_header_layout_is_kafkas_61_bytes():
    """The fixed header is 61 bytes with the CRC and stamp fields where the layout says."""
    assert rb.HEADER_SIZE == 61
    assert (rb.LENGTH_OFFSET, rb.CRC_OFFSET, rb.ATTRIBUTES_OFFSET) == (8, 17, 21)
    assert rb.STAMP.size == 16


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_every_codec(codec):
    """Values, keys, headers and timestamps come back exactly, for every codec."""
    n = 500
    values = _values(n)
    values[7] = None  # a tombstone
    keys = [b"k%d" % (i % 13) if i % 3 else None for i in range(n)]
    headers = [[("trace", b"%d" % i), ("empty", None)] if i % 5 == 0 else None for i in range(n)]
    timestamps = [1_000 + i for i in range(n)]
    data = rb.build(values, keys, timestamps, headers, codec=compression.codec_id(codec))
    table = rb.decode_table(data)
    assert table.schema == rb.OUTPUT_SCHEMA
    assert table.column("offset").to_pylist() == list(range(n))
    assert table.column("value").to_pylist() == values
    assert table.column("key").to_pylist() == keys
    assert table.column("timestamp").to_pylist() == timestamps
    got_headers = table.column("headers").to_pylist()
    assert got_headers[5] == [{"key": "trace", "value": b"5"}, {"key": "empty", "value": None}]
    assert got_headers[1] is None
    header = rb.parse_header(data)
    assert header.codec == compression.codec_id(codec)
    assert (header.record_count, header.last_offset_delta) == (n, n - 1)
    assert (header.base_timestamp, header.max_timestamp) == (1_000, 1_000 + n - 1)


def test_small_records_stay_small():
    """Columns that carry nothing are left out: 1,000 100-byte values cost <= 1.15x on disk."""
    data = rb.build(_values(1000), now_ms=5)
    header = rb.parse_header(data)
    assert not header.attributes & (rb.HAS_KEY | rb.HAS_HEADERS | rb.HAS_TIMESTAMP_DELTA | rb.HAS_OFFSET_DELTA)
    assert len(data) <= 1.15 * 100_000
    assert rb.decode_table(data).column("timestamp").to_pylist() == [5] * 1000


def test_wide_timestamp_range_uses_int64_deltas():
    """Timestamps more than 2**31 ms apart (backfilled data) still round-trip."""
    timestamps = [0, 2**40, 5]
    data = rb.build([b"a", b"b", b"c"], timestamps_ms=timestamps)
    assert rb.parse_header(data).attributes & rb.WIDE_TIMESTAMP_DELTA
    assert rb.decode_table(data).column("timestamp").to_pylist() == timestamps


def test_build_from_arrow_accepts_strings_and_chunked_arrays():
    """Arrow builders take binary or string columns, chunked or not."""
    values = pa.chunked_array([pa.array(["x", "y"]), pa.array(["z"])])
    data = rb.build_arrow(values, keys=pa.array([b"k", None, b"m"]), timestamps_ms=np.array([3, 1, 2]))
    table = rb.decode_table(data)
    assert table.column("value").to_pylist() == [b"x", b"y", b"z"]
    assert table.column("key").to_pylist() == [b"k", None, b"m"]
    assert table.column("timestamp").to_pylist() == [3, 1, 2]


def test_bad_inputs_to_builders():
    """Builders reject wrong types and lengths with TypeError / ValueError."""
    with pytest.raises(TypeError):
        rb.build([1, 2, 3])
    with pytest.raises(ValueError):
        rb.build([])
    with pytest.raises(ValueError):
        rb.build([b"a"], keys=[b"a", b"b"])
    with pytest.raises(TypeError):
        rb.build_arrow(pa.array([1, 2]))
    with pytest.raises(InvalidConfigError):
        compression.codec_id("brotli-9000")


def test_decode_many_batches_and_min_offset():
    """A buffer of several stamped batches decodes in offset order from ``min_offset``."""
    first = bytearray(rb.build(_values(10)))
    second = bytearray(rb.build(_values(5)))
    rb.STAMP.pack_into(second, 0, 10, rb.parse_header(second).batch_length, 7)  # as a leader would
    data = bytes(first) + bytes(second)
    table = rb.decode_table(data, min_offset=8)
    assert table.column("offset").to_pylist() == [8, 9, 10, 11, 12, 13, 14]
    assert rb.decode_table(data, min_offset=15).num_rows == 0
    assert rb.decode_table(b"").num_rows == 0


def _flip(data: bytes, position: int) -> bytes:
    out = bytearray(data)
    out[position] ^= 0xFF
    return bytes(out)


def test_crc_covers_everything_after_itself():
    """Flipping any byte after the CRC is caught; base offset and leader epoch are outside it."""
    data = rb.build(_values(20), keys=[b"k"] * 20)
    for position in (rb.ATTRIBUTES_OFFSET + 2, rb.HEADER_SIZE + 3, len(data) - 1):
        with pytest.raises(CorruptRecordError):
            rb.validate(_flip(data, position))
    for position in (7, 12, 15):
        rb.validate(_flip(data, position))
    with pytest.raises(CorruptRecordError, match="impossible offsets"):
        rb.validate(_flip(data, 0))  # a negative base offset is outside the CRC yet still caught


def test_validation_errors_are_typed():
    """Bad magic, short data, wrong lengths, oversize and hostile bodies raise typed errors."""
    data = rb.build(_values(3))
    with pytest.raises(CorruptRecordError, match="magic"):
        rb.validate(data[:16] + b"\x09" + data[17:])
    with pytest.raises(CorruptRecordError, match="truncated"):
        rb.validate(data[:30])
    with pytest.raises(CorruptRecordError, match="past the end"):
        rb.validate(data[:-1])
    with pytest.raises(CorruptRecordError):
        rb.validate(b"")
    with pytest.raises(RecordTooLargeError):
        rb.validate(data, max_batch_bytes=len(data) - 1)


def _recrc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, rb.CRC_OFFSET, crc32c.crc32c(bytes(batch[rb.ATTRIBUTES_OFFSET :])))
    return bytes(batch)


def test_header_lies_are_caught_even_with_a_valid_crc():
    """A producer whose header disagrees with its body is refused, CRC or not."""
    data = bytearray(rb.build(_values(4), timestamps_ms=[1, 2, 3, 4]))
    count_lie = bytearray(data)
    struct.pack_into(">i", count_lie, rb.HEADER_SIZE - 4, 5)
    struct.pack_into(">i", count_lie, rb.ATTRIBUTES_OFFSET + 2, 4)
    with pytest.raises(CorruptRecordError, match="rows"):
        rb.validate(_recrc(count_lie))
    time_lie = bytearray(data)
    struct.pack_into(">q", time_lie, rb.MAX_TIMESTAMP_OFFSET, 99)
    with pytest.raises(CorruptRecordError, match="max timestamp"):
        rb.validate(_recrc(time_lie))
    schema_lie = bytearray(data)
    struct.pack_into(">h", schema_lie, rb.ATTRIBUTES_OFFSET, rb.parse_header(data).attributes | rb.HAS_KEY)
    with pytest.raises(CorruptRecordError):
        rb.validate(_recrc(schema_lie))


def test_compressed_size_field_is_bounded():
    """A compressed body claiming a huge inflated size is refused before allocating it."""
    with pytest.raises(CorruptRecordError, match="limit"):
        compression.decompress(compression.LZ4, memoryview(struct.pack(">I", 2**31) + b"xx"))
    with pytest.raises(CorruptRecordError):
        compression.decompress(compression.ZSTD, memoryview(struct.pack(">I", 10) + b"not zstd"))
    with pytest.raises(CorruptRecordError):
        compression.decompress(7, memoryview(b"\x00\x00\x00\x01x"))


def test_log_append_time_rewrites_only_the_header():
    """LogAppendTime stamps max_timestamp, keeps the body, and every record reads as that time."""
    data = rb.build(_values(3), timestamps_ms=[1, 2, 3])
    header = rb.parse_header(data)
    rewritten = rb.with_log_append_time(memoryview(data), 0, header, 777)
    rb.validate(rewritten)
    assert rewritten[rb.HEADER_SIZE :] == data[rb.HEADER_SIZE :]
    assert rb.decode_table(rewritten).column("timestamp").to_pylist() == [777] * 3


_bound_codecs = [
    c for c in ("none", "lz4", "zstd", "gzip", "snappy") if c in ("none", "lz4") or pa.Codec.is_available(c)
]


@settings(max_examples=150, deadline=None)
@given(
    records=st.lists(
        st.tuples(
            st.one_of(st.none(), st.binary(max_size=300)),
            st.one_of(st.none(), st.binary(max_size=40)),
            st.one_of(
                st.none(), st.lists(st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=30))))
            ),
            st.integers(0, 2**40),
        ),
        min_size=1,
        max_size=60,
    ),
    codec=st.sampled_from(_bound_codecs),
    random_bytes=st.binary(min_size=64, max_size=64),
)
def test_batch_size_bound_holds_for_any_records(records, codec, random_bytes):
    """batch_size_bound over record_size_bound is never below a built batch's size, any codec or data."""
    values = [None if v is None else (v + random_bytes) for v, _, _, _ in records]  # defeat compression
    keys = [k for _, k, _, _ in records]
    headers = [h for _, _, h, _ in records]
    bound = sum(
        rb.record_size_bound(
            len(v or b"") + len(k or b"") + sum(len(hk.encode()) + len(hv or b"") for hk, hv in h or ()), len(h or ())
        )
        for v, k, h in zip(values, keys, headers, strict=True)
    )
    cid = compression.codec_id(codec)
    data = rb.build(values, keys, [t for *_, t in records], headers, codec=cid)
    assert len(data) <= rb.batch_size_bound(bound, cid)
    assert rb.records_capacity(rb.batch_size_bound(bound, cid), cid) >= bound


def test_records_capacity_is_the_inverse_of_the_bound():
    """records_capacity(limit) is the largest records bound whose batch bound fits the limit."""
    for cid in (compression.NONE, compression.LZ4, compression.SNAPPY):
        for limit in (64, 2_048, 2_100, 1 << 20, 8 << 20):
            capacity = rb.records_capacity(limit, cid)
            assert capacity == 0 or rb.batch_size_bound(capacity, cid) <= limit
            assert rb.batch_size_bound(capacity + 1, cid) > limit


_ITEM = st.one_of(st.none(), st.binary(max_size=20), st.text(max_size=5))
_HEADER = st.one_of(
    st.none(), st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=8))), max_size=3)
)


@settings(max_examples=300, deadline=None)
@given(items=st.lists(_ITEM, max_size=30), headers=st.lists(_HEADER, max_size=30), start=st.integers(0, 5))
def test_arrays_made_from_buffers_equal_pyarrows_own(items, headers, start):
    """binary_of / headers_of (a producer's batch, without pa.array's import of pandas) give
    the arrays pa.array gives, and values_or reads a sliced column with nulls filled."""
    binary = rb.binary_of(items)
    binary.validate(full=True)
    assert binary.equals(pa.array(items, pa.binary()))
    made = rb.headers_of(headers)
    made.validate(full=True)
    assert made.equals(pa.array(headers, rb.HEADERS_TYPE))
    lengths = pa.array([None if i is None else len(i) for i in items], pa.int32()).slice(min(start, len(items)))
    expected = [-1 if n is None else n for n in lengths.to_pylist()]
    assert rb.values_or(lengths, -1).tolist() == expected


def test_arrays_made_from_buffers_refuse_what_pa_array_refuses():
    with pytest.raises(TypeError, match="bytes, str or None, got int"):
        rb.binary_of([b"a", 1])
    with pytest.raises(TypeError, match="got ndarray"):
        rb.binary_of([np.arange(3)])  # a buffer whose len() is not its bytes
    with pytest.raises(TypeError, match="UTF-8"):
        rb.binary_of([b"\xff"], string=True)
    with pytest.raises(TypeError, match="pairs"):
        rb.headers_of([[("only a key",)]])
    with pytest.raises(TypeError, match="pairs"):
        rb.headers_of([5])
    with pytest.raises(TypeError):
        rb.build([b"a", object()])
