"""Kafka record batch v2 <-> raylog batch conversion (raylog.kafka.records; no Ray).

Round trips of raylog batches through Kafka bytes, and cross-checks against two
independent implementations of Kafka's format: batches built by aiokafka's (Cython) and
kafka-python's (pure Python) builders convert to raylog batches with the same records,
and Kafka bytes made from raylog batches read back with those libraries' readers, CRC
included. kafka-python here has no snappy or zstd library, so it is checked with the
codecs it has; aiokafka (cramjam) checks all five."""

from __future__ import annotations

import struct
import subprocess
import sys
import zlib

import cramjam
import crc32c
import lz4.frame
import pyarrow as pa
import pytest
from aiokafka.record import default_records as aio
from aiokafka.record.control_record import ControlRecord
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka import codec as kafka_python_codec
from kafka.record import default_records as kp

from raylog.common import compression
from raylog.common import record_batch as rb
from raylog.errors import CorruptRecordError, InvalidRecordError, UnsupportedCompressionTypeError
from raylog.kafka import records

CODECS = [compression.NONE, compression.GZIP, compression.SNAPPY, compression.LZ4, compression.ZSTD]
KAFKA_PYTHON_CODECS = [
    cid
    for cid, available in [
        (compression.NONE, True),
        (compression.GZIP, kafka_python_codec.has_gzip()),
        (compression.SNAPPY, kafka_python_codec.has_snappy()),
        (compression.LZ4, kafka_python_codec.has_lz4()),
        (compression.ZSTD, kafka_python_codec.has_zstd()),
    ]
    if available
]
BUILDERS = {"aiokafka": aio.DefaultRecordBatchBuilder, "kafka-python": kp.DefaultRecordBatchBuilder}
READERS = {"aiokafka": aio.DefaultRecordBatch, "kafka-python": kp.DefaultRecordBatch}
ROUND_TRIP = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
#: A batch header field's byte position (struct format before it).
LAST_OFFSET_DELTA_AT = struct.calcsize(">qiibIh")
RECORD_COUNT_AT = rb.HEADER_SIZE - 4


# ---------------------------------------------------------------------------------------
# Helpers


def joined(buffers: list) -> bytes:
    return b"".join(bytes(memoryview(b).cast("B")) for b in buffers)


def rows(raylog_bytes) -> list[dict]:
    """Every record of the raylog batches, control batches included (decode_table drops
    them), as dicts: offset, timestamp, key, value, headers."""
    view = memoryview(raylog_bytes).cast("B")
    out = []
    for pos, header in rb.iter_headers(view):
        body = rb.decode_body(view, pos, header)
        out += rb._output_batch(header, body).to_pylist()
    return out


def headers_of(raylog_bytes) -> list[rb.BatchHeader]:
    return [header for _, header in rb.iter_headers(memoryview(raylog_bytes).cast("B"))]


def recrc(batch: bytearray) -> bytearray:
    """The Kafka batch with its CRC made to match its bytes again."""
    struct.pack_into(">I", batch, rb.CRC_OFFSET, crc32c.crc32c(bytes(batch[rb.ATTRIBUTES_OFFSET :])))
    return batch


def kafka_rows(reader, data: bytes) -> list[dict]:
    """The records a library's reader finds in one Kafka batch, as ``rows`` gives them."""
    batch = reader(data)
    assert batch.validate_crc()
    out = []
    for record in batch:
        out.append(
            {
                "offset": record.offset,
                "timestamp": record.timestamp,
                "key": record.key,
                "value": record.value,
                "headers": [{"key": k, "value": v} for k, v in record.headers] or None,
            }
        )
    return out


def build_kafka(library: str, codec: int, recs: list[tuple], transactional=False, producer=(-1, -1, -1)) -> bytes:
    """A Kafka batch from a library's builder: ``recs`` of (offset delta, timestamp, key,
    value, headers)."""
    builder = BUILDERS[library](2, codec, int(transactional), *producer, 1 << 30)
    for delta, stamp, key, value, headers in recs:
        builder.append(delta, stamp, key, value, headers)
    return bytes(builder.build())


def expected_rows(recs: list[tuple], base_offset: int = 0) -> list[dict]:
    return [
        {
            "offset": base_offset + delta,
            "timestamp": stamp,
            "key": key,
            "value": value,
            "headers": [{"key": k, "value": v} for k, v in headers] or None,
        }
        for delta, stamp, key, value, headers in recs
    ]


SAMPLE = [
    (0, 1_700_000_000_005, b"k0", b"v" * 100, [("trace", b"\x00\xff"), ("é-ключ", None)]),
    (1, 1_700_000_000_001, None, b"", []),
    (2, 1_700_000_000_009, b"", None, [("h", b"")]),
    (3, 1_700_000_000_009, b"k3", b"value 3", []),
]


# ---------------------------------------------------------------------------------------
# Round trips: raylog -> Kafka -> raylog

binaries = st.one_of(st.none(), st.binary(max_size=40))
header_lists = st.one_of(
    st.none(),
    st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=12))), min_size=1, max_size=3),
)


@st.composite
def raylog_batches(draw):
    """(raylog batch bytes, the records it holds) over every field a batch can carry."""
    count = draw(st.integers(1, 30))
    values = draw(st.lists(binaries, min_size=count, max_size=count))
    keys = draw(st.one_of(st.none(), st.lists(binaries, min_size=count, max_size=count)))
    headers = draw(st.one_of(st.none(), st.lists(header_lists, min_size=count, max_size=count)))
    low = draw(st.integers(-(2**62), 2**62))
    spread = draw(st.sampled_from([0, 1000, 2**31 + 5, 2**61]))
    stamps = draw(st.lists(st.integers(low, low + spread), min_size=count, max_size=count))
    gaps = draw(st.lists(st.integers(1, 4), min_size=count, max_size=count))
    compacted = draw(st.booleans())
    deltas = [sum(gaps[: i + 1]) - gaps[0] for i in range(count)] if compacted else list(range(count))
    tail = draw(st.integers(0, 3)) if compacted else 0
    options = dict(
        codec=draw(st.sampled_from(CODECS)),
        producer_id=draw(st.sampled_from([-1, 0, 2**40])),
        producer_epoch=draw(st.sampled_from([-1, 0, 32767])),
        base_sequence=draw(st.sampled_from([-1, 0, 2**31 - 1 - count])),
        transactional=draw(st.booleans()),
    )
    batch = rb.build(
        values,
        keys=keys,
        timestamps_ms=stamps,
        headers=headers,
        offset_deltas=deltas if compacted else None,
        last_offset_delta=deltas[-1] + tail,
        **options,
    )
    view = memoryview(batch)
    if draw(st.booleans()):  # LogAppendTime
        batch = bytes(rb.with_log_append_time(view, 0, rb.read_header(view), draw(st.integers(0, 2**62))))
    base_offset, epoch = draw(st.integers(0, 2**62)), draw(st.integers(-1, 2**31 - 1))
    batch = rb.stamp(rb.read_header(batch), base_offset, epoch) + batch[rb.STAMP.size :]
    return batch


def kafka_view(header: rb.BatchHeader) -> tuple:
    """The header fields both formats keep (raylog's schema bits and commit marker aside)."""
    return (
        header.base_offset,
        header.leader_epoch,
        header.attributes & 0x3F,
        header.last_offset_delta,
        header.max_timestamp if header.attributes & rb.LOG_APPEND_TIME else None,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        header.record_count,
    )


@ROUND_TRIP
@given(raylog_batches())
def test_round_trip_keeps_every_record_and_batch_field(batch):
    kafka = joined(records.to_kafka(batch))
    back = records.to_raylog(kafka)
    assert rows(back) == rows(batch)
    (before,), (after,) = headers_of(batch), headers_of(back)
    assert kafka_view(after) == kafka_view(before)
    assert after.codec == before.codec
    # aiokafka reads the Kafka bytes as the same records, CRC checked.
    assert kafka_rows(aio.DefaultRecordBatch, kafka) == rows(batch)
    kafka_header = rb.BatchHeader._make(rb.HEADER.unpack_from(kafka))
    assert kafka_header.magic == 2 and kafka_view(kafka_header) == kafka_view(before)


def test_empty_header_lists_read_back_as_null_headers():
    batch = rb.build([b"a", b"b"], headers=[[], [("k", b"v")]])
    assert [r["headers"] for r in rows(records.to_raylog(joined(records.to_kafka(batch))))] == [
        None,
        [{"key": "k", "value": b"v"}],
    ]


def test_a_null_header_in_a_list_is_written_with_an_empty_key_and_null_value():
    headers = pa.array([[None, {"key": "x", "value": b"1"}]], type=rb.HEADERS_TYPE)
    batch = rb.build_arrow(pa.array([b"v"]), headers=headers)
    (record,) = kafka_rows(aio.DefaultRecordBatch, joined(records.to_kafka(batch)))
    assert record["headers"] == [{"key": "", "value": None}, {"key": "x", "value": b"1"}]


def test_several_batches_convert_in_order_both_ways():
    first = rb.build([b"a", b"b"], keys=[b"x", None], codec=compression.LZ4)
    second = rb.build([b"c"], headers=[[("h", b"1")]])
    second = rb.stamp(rb.read_header(second), 2, 7) + second[rb.STAMP.size :]
    kafka = joined(records.to_kafka(first + second))
    back = records.to_raylog(kafka)
    assert rows(back) == rows(first + second)
    assert [h.base_offset for h in headers_of(back)] == [0, 2]
    assert records.to_kafka(b"") == []


def test_a_fetch_answer_keeps_within_its_bound_by_whole_batches():
    """Kafka's Fetch bound (KIP-74): whole batches while they fit, and the first one always
    when the answer has none yet (a client's receive bound is only a little above its
    fetch.max.bytes: librdkafka's test 0082 allows 512 bytes)."""
    batches = []
    for i in range(3):
        batch = rb.build([b"%d" % i * 1000])
        batches.append(rb.stamp(rb.read_header(batch), 10 * i, 1) + batch[rb.STAMP.size :])
    data = b"".join(batches)
    sizes = [len(joined(records.to_kafka(b))) for b in batches]
    every, after, size = records.to_kafka_within(data, sum(sizes))
    assert (joined(every), after, size) == (joined(records.to_kafka(data)), 21, sum(sizes))
    two, after, size = records.to_kafka_within(data, sum(sizes) - 1)
    assert (len(joined(two)), after, size) == (sizes[0] + sizes[1], 11, sizes[0] + sizes[1])
    one, after, size = records.to_kafka_within(data, 1)
    assert (joined(one), after, size) == (joined(records.to_kafka(batches[0])), 1, sizes[0])
    assert records.to_kafka_within(data, sizes[0] - 1, at_least_one=False) == ([], None, 0)
    assert records.to_kafka_within(b"", 100) == ([], None, 0)


def test_compacted_batch_keeps_offsets_gaps_and_range():
    original = rb.build([b"a", b"b", b"c", b"d"], keys=[b"1", b"2", b"3", b"4"], codec=compression.ZSTD)
    original = rb.stamp(rb.read_header(original), 100, 3) + original[rb.STAMP.size :]
    view = memoryview(original)
    header = rb.read_header(view)
    compacted = rb.retain(header, rb.decode_body(view, 0, header), [False, True, False, True])
    kafka = joined(records.to_kafka(compacted))
    assert [r["offset"] for r in kafka_rows(aio.DefaultRecordBatch, kafka)] == [101, 103]
    assert aio.DefaultRecordBatch(kafka).next_offset == 104
    back = records.to_raylog(kafka)
    assert rows(back) == rows(compacted)
    assert headers_of(back)[0].last_offset_delta == 3


@pytest.mark.parametrize("commit", [True, False])
def test_transaction_markers_convert_both_ways(commit):
    marker = rb.build_marker(producer_id=42, producer_epoch=3, commit=commit, coordinator_epoch=9, now_ms=5)
    kafka = joined(records.to_kafka(marker))
    batch = aio.DefaultRecordBatch(kafka)
    assert batch.validate_crc() and batch.is_control_batch and batch.is_transactional
    (record,) = list(batch)
    assert ControlRecord.parse(record.key) == ControlRecord(0, 1 if commit else 0)
    assert struct.unpack(">hi", record.value) == (0, 9)
    back = records.to_raylog(kafka)
    (header,) = headers_of(back)
    assert header.attributes & rb.CONTROL and header.attributes & rb.TRANSACTIONAL
    assert bool(header.attributes & rb.COMMIT_MARKER) == commit
    assert bytes(back) == bytes(marker)


# ---------------------------------------------------------------------------------------
# Cross-checks against independent implementations


@pytest.mark.parametrize(
    "library, codec",
    [("aiokafka", c) for c in CODECS] + [("kafka-python", c) for c in KAFKA_PYTHON_CODECS],
)
def test_client_built_batches_convert_to_the_same_records(library, codec):
    kafka = build_kafka(library, codec, SAMPLE, transactional=True, producer=(77, 2, 1000))
    raylog = records.to_raylog(kafka)
    assert rows(raylog) == expected_rows(SAMPLE)
    assert rb.decode_table(raylog).to_pylist() == expected_rows(SAMPLE)
    (header,) = headers_of(raylog)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 2, 1000)
    assert header.attributes & rb.TRANSACTIONAL and header.codec == codec
    assert (header.base_timestamp, header.max_timestamp) == (1_700_000_000_001, 1_700_000_000_009)
    rb.validate(raylog)


@pytest.mark.parametrize(
    "library, codec",
    [("aiokafka", c) for c in CODECS] + [("kafka-python", c) for c in KAFKA_PYTHON_CODECS],
)
def test_converted_batches_read_back_with_client_readers(library, codec):
    delta, stamps, keys, values, headers = zip(*SAMPLE, strict=True)
    batch = rb.build(
        list(values),
        keys=list(keys),
        timestamps_ms=list(stamps),
        headers=[h or None for h in headers],
        codec=codec,
        producer_id=5,
        producer_epoch=1,
        base_sequence=10,
    )
    batch = rb.stamp(rb.read_header(batch), 1000, 4) + batch[rb.STAMP.size :]
    kafka = joined(records.to_kafka(batch))
    reader = READERS[library](kafka)
    assert reader.validate_crc()
    assert reader.compression_type == codec and reader.base_offset == 1000
    assert rb.BatchHeader._make(rb.HEADER.unpack_from(kafka)).leader_epoch == 4
    assert (reader.producer_id, reader.producer_epoch, reader.base_sequence) == (5, 1, 10)
    assert kafka_rows(READERS[library], kafka) == expected_rows(SAMPLE, base_offset=1000)


def test_a_large_batch_of_each_codec_converts_both_ways():
    values = [b"%08d" % i * 12 for i in range(5000)]
    recs = [(i, 1_700_000_000_000 + i % 7, b"key-%d" % (i % 13), v, [("n", b"%d" % i)]) for i, v in enumerate(values)]
    for codec in CODECS:
        raylog = records.to_raylog(build_kafka("aiokafka", codec, recs))
        assert rows(raylog) == expected_rows(recs)
        assert kafka_rows(aio.DefaultRecordBatch, joined(records.to_kafka(raylog))) == expected_rows(recs)


def kafka_with_records_section(section: bytes, codec: int, template: bytes) -> bytes:
    """``template`` (an uncompressed Kafka batch) with its records section replaced."""
    batch = bytearray(template[: rb.HEADER_SIZE] + section)
    struct.pack_into(">i", batch, rb.LENGTH_OFFSET, len(batch) - rb.LOG_OVERHEAD)
    struct.pack_into(">h", batch, rb.ATTRIBUTES_OFFSET, codec)
    return bytes(recrc(batch))


@pytest.mark.parametrize(
    "codec, compress",
    [
        (compression.SNAPPY, lambda data: bytes(cramjam.snappy.compress_raw(data))),
        (compression.GZIP, lambda data: zlib.compress(data)),  # zlib framing, as some clients write
        (compression.ZSTD, lambda data: bytes(cramjam.zstd.compress(data, level=1))),
    ],
    ids=["snappy-raw", "zlib", "zstd"],
)
def test_other_framings_inflate(codec, compress):
    plain = build_kafka("aiokafka", 0, SAMPLE)
    kafka = kafka_with_records_section(compress(plain[rb.HEADER_SIZE :]), codec, plain)
    assert rows(records.to_raylog(kafka)) == expected_rows(SAMPLE)


def test_a_kafka_batch_that_only_declares_a_later_last_offset_keeps_it():
    plain = bytearray(build_kafka("aiokafka", 0, SAMPLE))
    struct.pack_into(">i", plain, LAST_OFFSET_DELTA_AT, 9)  # lastOffsetDelta 9 for 4 records
    raylog = records.to_raylog(bytes(recrc(plain)))
    assert headers_of(raylog)[0].next_offset == 10
    assert [r["offset"] for r in rows(raylog)] == [0, 1, 2, 3]


def test_log_append_time_batches_keep_the_append_time():
    plain = bytearray(build_kafka("aiokafka", 0, SAMPLE))
    struct.pack_into(">h", plain, rb.ATTRIBUTES_OFFSET, rb.LOG_APPEND_TIME)
    struct.pack_into(">q", plain, rb.MAX_TIMESTAMP_OFFSET, 1_800_000_000_000)
    raylog = records.to_raylog(bytes(recrc(plain)))
    assert [r["timestamp"] for r in rows(raylog)] == [1_800_000_000_000] * len(SAMPLE)
    again = aio.DefaultRecordBatch(joined(records.to_kafka(raylog)))
    assert again.timestamp_type == 1 and {r.timestamp for r in again} == {1_800_000_000_000}


# ---------------------------------------------------------------------------------------
# Errors


def sample_kafka() -> bytearray:
    return bytearray(build_kafka("aiokafka", 0, SAMPLE))


def test_a_bad_crc_is_corrupt():
    batch = sample_kafka()
    batch[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC"):
        records.to_raylog(bytes(batch))


def test_a_corrupt_raylog_batch_is_not_given_a_fresh_crc():
    batch = bytearray(rb.build([b"value"]))
    batch[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        records.to_kafka(bytes(batch))


@pytest.mark.parametrize(
    "mutate, error, match",
    [
        (lambda b: b[: rb.HEADER_SIZE - 1], CorruptRecordError, "truncated"),
        (lambda b: b[:-1], CorruptRecordError, "runs past"),
        (lambda b: b + b"\x00", CorruptRecordError, "truncated"),
        (lambda b: b"", InvalidRecordError, "no record batch"),
    ],
    ids=["short-header", "short-batch", "trailing-byte", "empty"],
)
def test_framing_errors(mutate, error, match):
    with pytest.raises(error, match=match):
        records.to_raylog(bytes(mutate(sample_kafka())))


def with_field(fmt: str, at: int, value: int) -> bytes:
    batch = sample_kafka()
    struct.pack_into(fmt, batch, at, value)
    return bytes(recrc(batch))


def test_magic_other_than_2_is_invalid():
    batch = sample_kafka()
    batch[rb.CRC_OFFSET - 1] = 1
    with pytest.raises(InvalidRecordError, match="magic 1"):
        records.to_raylog(bytes(batch))


@pytest.mark.parametrize(
    "count, last_delta, match",
    [(5, 4, "truncated"), (3, 3, "remain"), (0, 3, "holds 0"), (5, 3, "claims 5 records and last offset delta 3")],
)
def test_a_record_count_that_does_not_match_is_invalid(count, last_delta, match):
    batch = bytearray(with_field(">i", RECORD_COUNT_AT, count))
    struct.pack_into(">i", batch, LAST_OFFSET_DELTA_AT, last_delta)
    with pytest.raises(InvalidRecordError, match=match):
        records.to_raylog(bytes(recrc(batch)))


def test_an_unknown_codec_is_unsupported():
    with pytest.raises(UnsupportedCompressionTypeError):
        records.to_raylog(with_field(">h", rb.ATTRIBUTES_OFFSET, 5))


@pytest.mark.parametrize("codec", [compression.GZIP, compression.SNAPPY, compression.LZ4, compression.ZSTD])
def test_a_body_that_does_not_inflate_is_corrupt(codec):
    with pytest.raises(CorruptRecordError, match="inflate"):
        records.to_raylog(with_field(">h", rb.ATTRIBUTES_OFFSET, codec))


def test_truncated_xerial_blocks_are_corrupt():
    plain = build_kafka("aiokafka", 0, SAMPLE)
    xerial = joined(records._deflate(compression.SNAPPY, plain[rb.HEADER_SIZE :]))
    with pytest.raises(CorruptRecordError, match="xerial"):
        records.to_raylog(kafka_with_records_section(xerial[:-3], compression.SNAPPY, plain))


def one_record(body: bytes) -> bytes:
    """A Kafka batch of one record whose bytes after the length varint are ``body``."""
    plain = build_kafka("aiokafka", 0, SAMPLE[:1])
    return kafka_with_records_section(bytes([len(body) << 1]) + body, 0, plain)


@pytest.mark.parametrize(
    "body, match",
    [
        (b"\x00\x00\x00\x01", "truncated"),  # attributes, ts, offset, then the key length is cut
        (b"\x00\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", "too long"),  # an 11-byte varlong
        (b"\x00\x00\x00\x03\x00\x00", "invalid length"),  # key length -2
        (b"\x00\x00\x00\x7e\x00\x00", "invalid length"),  # key length 63, past the record
        (b"\x00\x00\x00\x01\x01\x01", "invalid header count"),  # header count -1
        (b"\x00\x00\x00\x01\x01\x02\x01", "invalid length"),  # header key length -1
        (b"\x00\x00\x00\x01\x01\x00\x00", "do not fill"),  # a byte after the headers
        (b"\x00\x00\x00\x01\x01\x02\x02\xff\x00", "UTF-8"),  # header key b"\xff"
        (b"\x00\x00\x02\x01\x01\x00", "out-of-order"),  # offset delta 1 > last offset delta 0
    ],
)
def test_malformed_records_are_invalid(body, match):
    with pytest.raises(InvalidRecordError, match=match):
        records.to_raylog(one_record(body))


def test_a_control_batch_without_a_control_record_is_invalid():
    plain = bytearray(build_kafka("aiokafka", 0, [(0, 1, b"k", b"v", [])]))
    struct.pack_into(">h", plain, rb.ATTRIBUTES_OFFSET, rb.CONTROL | rb.TRANSACTIONAL)
    with pytest.raises(InvalidRecordError, match="control"):
        records.to_raylog(bytes(recrc(plain)))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_records_only_raise_typed_errors(data):
    """Any byte of the records section changed (CRC made to match): a typed error or a
    valid raylog batch, never an IndexError, struct.error or a crash."""
    batch = bytearray(build_kafka("aiokafka", 0, SAMPLE))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(rb.HEADER_SIZE, len(batch) - 1))
        batch[at] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        batch = batch[: data.draw(st.integers(rb.HEADER_SIZE, len(batch)))]
        struct.pack_into(">i", batch, rb.LENGTH_OFFSET, len(batch) - rb.LOG_OVERHEAD)
    try:
        raylog = records.to_raylog(bytes(recrc(batch)))
    except (InvalidRecordError, CorruptRecordError):
        return
    rb.validate(raylog)


# ---------------------------------------------------------------------------------------
# Decompression bombs: a small body that inflates past the limit is refused while inflating

_MIB = 1 << 20
_ZEROS = bytes(_MIB)


def _streamed(compressor, inflated: int) -> bytes:
    """``inflated`` zero bytes through a streaming compressor (``compress``/``flush``),
    without ever holding them."""
    return b"".join([*(compressor.compress(_ZEROS) for _ in range(inflated // _MIB)), compressor.flush()])


def _raw_snappy_zeros(inflated: int) -> bytes:
    """Raw snappy of ``inflated`` (1 + 64k) zero bytes, written by hand: the length preamble,
    a one-byte literal, then copies of 64 bytes at offset 1 (3 bytes each, snappy's best)."""
    preamble = bytearray()
    n = inflated
    while n >= 0x80:
        preamble.append(n & 0x7F | 0x80)
        n >>= 7
    preamble.append(n)
    return bytes(preamble) + b"\x00\x00" + b"\xfe\x01\x00" * ((inflated - 1) // 64)


def bomb_section(kind: str, inflated: int) -> tuple[int, bytes]:
    """(codec, records section) of a body inflating to about ``inflated`` zero bytes."""
    import zstandard  # (the dev extra: an implementation other than the one under test)

    if kind == "gzip":
        return compression.GZIP, _streamed(zlib.compressobj(1, zlib.DEFLATED, 31), inflated)
    if kind == "lz4":
        compressor = lz4.frame.LZ4FrameCompressor()
        return compression.LZ4, compressor.begin() + _streamed(compressor, inflated)
    if kind == "zstd":
        return compression.ZSTD, _streamed(zstandard.ZstdCompressor(level=1).compressobj(), inflated)
    if kind == "snappy-xerial":
        block = bytes(cramjam.snappy.compress_raw(_ZEROS))
        framed = struct.pack(">i", len(block)) + block
        return compression.SNAPPY, records._XERIAL_HEADER + framed * (inflated // _MIB)
    assert kind == "snappy-raw"
    return compression.SNAPPY, _raw_snappy_zeros(inflated + 1)


BOMBS = ["gzip", "lz4", "zstd", "snappy-xerial", "snappy-raw"]


@pytest.mark.parametrize("kind", BOMBS)
def test_a_body_inflating_past_the_limit_is_corrupt(kind, monkeypatch):
    monkeypatch.setattr(compression, "MAX_UNCOMPRESSED_BYTES", _MIB)
    codec, section = bomb_section(kind, 64 * _MIB)
    with pytest.raises(CorruptRecordError, match="limit"):
        records.to_raylog(kafka_with_records_section(section, codec, sample_kafka()))


@pytest.mark.parametrize("kind", BOMBS)
def test_a_body_just_under_the_limit_inflates(kind, monkeypatch):
    """The bound refuses only what exceeds it (the records of zeros are then invalid, not corrupt)."""
    monkeypatch.setattr(compression, "MAX_UNCOMPRESSED_BYTES", 4 * _MIB)
    codec, section = bomb_section(kind, 2 * _MIB)
    with pytest.raises(InvalidRecordError):
        records.to_raylog(kafka_with_records_section(section, codec, sample_kafka()))


_PEAK_SCRIPT = """
import resource, sys
from raylog.errors import CorruptRecordError
from raylog.kafka import records
from raylog.common import compression
compression.MAX_UNCOMPRESSED_BYTES = int(sys.argv[2])
batch = open(sys.argv[1], "rb").read()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    records.to_raylog(batch)
except CorruptRecordError as exc:
    print("refused:", exc, file=sys.stderr)
    print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)
"""


@pytest.mark.parametrize("kind", BOMBS)
def test_a_decompression_bomb_is_refused_without_allocating_what_it_inflates_to(kind, tmp_path):
    """A 256 MiB bomb against an 8 MiB limit raises the process's peak RSS by far less than
    256 MiB: the output is bounded while inflating (measured in a fresh process, whose peak
    nothing else has raised)."""
    codec, section = bomb_section(kind, 256 * _MIB)
    path = tmp_path / "bomb"
    path.write_bytes(kafka_with_records_section(section, codec, sample_kafka()))
    done = subprocess.run(
        [sys.executable, "-c", _PEAK_SCRIPT, str(path), str(8 * _MIB)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip(), done.stderr
    assert "limit" in done.stderr
    growth = int(done.stdout)
    assert growth < 48 * _MIB, f"{kind}: peak RSS grew by {growth / _MIB:.0f} MiB inflating a bomb"
