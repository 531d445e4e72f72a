"""Fuzzing the record batch parser: hostile bytes only ever raise CorruptRecordError, quickly, also
through Log recovery and the follower append path (no Ray)."""

from __future__ import annotations

import os
import struct
from datetime import timedelta

import crc32c
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from raylog.common import compression
from raylog.common import record_batch as rb
from raylog.config import LogConfig
from raylog.errors import CorruptRecordError, InvalidRequestError
from raylog.storage.log import Log
from tests.helpers import record_rows

CODECS = [compression.NONE, compression.LZ4, compression.ZSTD]
INT64_MAX = 2**63 - 1
#: decode_table drops records below min_offset; fuzzed base offsets may be negative.
ALL_OFFSETS = -(2**63)
#: Header bytes outside the CRC that carry no record data: base_offset and leader_epoch.
OUTSIDE_CRC = frozenset(range(0, 8)) | frozenset(range(12, 16))

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MUTATE = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------------------------------
# Helpers


def _parse_everything(data: bytes) -> None:
    """Run every public parser over ``data``; anything but CorruptRecordError escapes."""
    for parse in (
        lambda: list(rb.iter_headers(data)),
        lambda: rb.validate(data),
        lambda: rb.decode_table(data),
        lambda: rb.decode_table(data, check_crcs=False, min_offset=ALL_OFFSETS),
    ):
        try:
            parse()
        except CorruptRecordError:
            pass


def _recompute_crc(buf: bytearray) -> None:
    if len(buf) >= rb.ATTRIBUTES_OFFSET:
        struct.pack_into(">I", buf, rb.CRC_OFFSET, crc32c.crc32c(bytes(buf[rb.ATTRIBUTES_OFFSET :])))


def _fix_length(buf: bytearray) -> None:
    if len(buf) >= rb.LOG_OVERHEAD:
        struct.pack_into(">i", buf, rb.LENGTH_OFFSET, len(buf) - rb.LOG_OVERHEAD)


def _expected_rows(values, keys, timestamps, headers) -> list[tuple]:
    n = len(values)
    keys = keys if keys is not None else [None] * n
    headers = headers if headers is not None else [None] * n
    decoded_headers = [None if h is None else [{"key": k, "value": v} for k, v in h] for h in headers]
    return list(zip(values, keys, timestamps, decoded_headers, strict=True))


# ---------------------------------------------------------------------------------------
# Strategies

_value = st.one_of(st.none(), st.just(b""), st.binary(max_size=40))
# An explicit alphabet (1- to 4-byte UTF-8) spares hypothesis building its unicode tables.
_header_key = st.text(alphabet="ab\x00\u00e9\u4e2d\U0001f600", max_size=8)
_header_list = st.one_of(
    st.none(), st.lists(st.tuples(_header_key, st.one_of(st.none(), st.binary(max_size=8))), max_size=3)
)


@st.composite
def batch_inputs(draw, max_records: int = 12):
    """Values, keys, timestamps and headers for one batch (keys/headers may be absent)."""
    n = draw(st.integers(1, max_records))
    values = draw(st.lists(_value, min_size=n, max_size=n))
    keys = draw(st.one_of(st.none(), st.lists(_value, min_size=n, max_size=n)))
    headers = draw(st.one_of(st.none(), st.lists(_header_list, min_size=n, max_size=n)))
    base = draw(st.one_of(st.integers(0, 2**41), st.integers(-(2**40), 2**60)))
    spread = draw(st.sampled_from([0, 1_000, 2**31 - 1, 2**31, 2**40]))
    timestamps = [base + d for d in draw(st.lists(st.integers(0, spread), min_size=n, max_size=n))]
    codec = draw(st.sampled_from(CODECS))
    return values, keys, timestamps, headers, codec


def _build(inputs) -> bytes:
    values, keys, timestamps, headers, codec = inputs
    return rb.build(values, keys, timestamps, headers, codec=codec)


_mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 2**16), st.integers(0, 7)),
    st.tuples(st.just("overwrite"), st.integers(0, 2**16), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("truncate"), st.integers(0, 2**16)),
    st.tuples(st.just("extend"), st.binary(min_size=1, max_size=200)),
)


def _mutate(data: bytes, mutations) -> bytearray:
    buf = bytearray(data)
    for mutation in mutations:
        kind = mutation[0]
        if kind == "flip" and buf:
            buf[mutation[1] % len(buf)] ^= 1 << mutation[2]
        elif kind == "overwrite" and buf:
            pos = mutation[1] % len(buf)
            patch = mutation[2][: len(buf) - pos]
            buf[pos : pos + len(patch)] = patch
        elif kind == "truncate":
            del buf[mutation[1] % max(1, len(buf)) :]
        elif kind == "extend":
            buf += mutation[1]
    return buf


@st.composite
def plausible_batches(draw):
    """A header that passes read_header, a matching CRC, and a hostile body."""
    attributes = draw(st.integers(0, rb._KNOWN_BITS)) & rb._KNOWN_BITS
    count = draw(st.integers(1, 6))
    last_delta = count - 1 + draw(st.sampled_from([0, 0, 0, 1, 5]))
    body = draw(
        st.one_of(
            st.binary(max_size=400),
            # A real body (possibly of another schema or codec), hostile in its header instead.
            batch_inputs(max_records=6).map(lambda i: _build(i)[rb.HEADER_SIZE :]),
            # A compressed-looking body: size field then random bytes.
            st.tuples(st.integers(0, 4096), st.binary(max_size=200)).map(lambda t: struct.pack(">I", t[0]) + t[1]),
        )
    )
    base_ts = draw(st.integers(-(2**40), 2**41))
    max_ts = base_ts + draw(st.sampled_from([0, 1, 2**31]))
    buf = bytearray(rb.HEADER_SIZE)
    rb.HEADER.pack_into(
        buf,
        0,
        draw(st.integers(-5, 5)),
        rb.HEADER_SIZE - rb.LOG_OVERHEAD + len(body),
        -1,
        rb.MAGIC,
        0,
        attributes,
        last_delta,
        base_ts,
        max_ts,
        -1,
        -1,
        -1,
        count,
    )
    buf += body
    _recompute_crc(buf)
    return bytes(buf)


# ---------------------------------------------------------------------------------------
# (a) random bytes


@FUZZ
@given(data=st.binary(max_size=400))
@example(data=b"")
@example(data=b"\x00" * rb.HEADER_SIZE)
def test_random_bytes_raise_only_corrupt_record_error(data):
    """Arbitrary bytes given to validate/decode_table/iter_headers raise nothing but CorruptRecordError."""
    _parse_everything(data)


def _header_only_batch(body: bytes = b"") -> bytes:
    """A batch whose header (CRC included) is valid, with ``body`` for a body."""
    buf = bytearray(rb.HEADER_SIZE)
    rb.HEADER.pack_into(
        buf, 0, 0, rb.HEADER_SIZE - rb.LOG_OVERHEAD + len(body), -1, rb.MAGIC, 0, 0, 0, 0, 0, -1, -1, -1, 1
    )
    buf += body
    _recompute_crc(buf)
    return bytes(buf)


@FUZZ
@given(data=plausible_batches())
@example(data=_header_only_batch())  # an empty body
@example(data=_header_only_batch(b"\xff\xff\xff\xff\x00\x00\x00\x00"))  # an Arrow IPC end-of-stream marker
def test_plausible_header_with_hostile_body_raises_only_corrupt_record_error(data):
    """A header that passes every header check (CRC included) over a random body raises only CorruptRecordError."""
    _parse_everything(data)


# ---------------------------------------------------------------------------------------
# (b) mutated valid batches, CRC left alone


@MUTATE
@given(inputs=batch_inputs(), mutations=st.lists(_mutation, min_size=1, max_size=3))
@example(  # the CONTROL attribute bit flipped on (inside the CRC)
    inputs=([b"a", b"b"], None, [1, 2], None, compression.NONE), mutations=[("flip", rb.ATTRIBUTES_OFFSET + 1, 5)]
)
@example(  # base_offset (outside the CRC) so large that the last offset does not fit in an int64
    inputs=([b"a", b"b"], None, [1, 2], None, compression.NONE), mutations=[("overwrite", 0, b"\x7f" + b"\xff" * 7)]
)
@example(  # base_offset negative (outside the CRC): impossible offsets
    inputs=([b"a"], None, [1], None, compression.LZ4), mutations=[("flip", 0, 7)]
)
@example(  # leader_epoch (outside the CRC)
    inputs=([b"a"], [b"k"], [1], [[("h", b"v")]], compression.ZSTD), mutations=[("overwrite", 12, b"\x00\x00\x00\x07")]
)
@example(  # base_offset (outside the CRC) changed to another possible offset
    inputs=([b"a", None], None, [1, 2**40], None, compression.NONE), mutations=[("overwrite", 6, b"\x01")]
)
def test_mutated_batch_is_rejected_unless_only_offset_or_epoch_changed(inputs, mutations):
    """A mutated batch raises CorruptRecordError, or decodes exactly if only base_offset/leader_epoch changed."""
    original = _build(inputs)
    buf = _mutate(original, mutations)
    data = bytes(buf)
    changed = {i for i in range(len(data)) if data[i] != original[i]} if len(data) == len(original) else None
    try:
        list(rb.iter_headers(data))
    except CorruptRecordError:
        pass
    if changed is not None and changed <= OUTSIDE_CRC:
        (base_offset,) = struct.unpack_from(">q", data, 0)
        count = len(inputs[0])
        if base_offset < 0 or base_offset + count - 1 > INT64_MAX:
            # Impossible offsets (negative, or past an int64): a corrupt batch, not an OverflowError.
            with pytest.raises(CorruptRecordError):
                rb.validate(data)
            with pytest.raises(CorruptRecordError):
                rb.decode_table(data, min_offset=ALL_OFFSETS)
            return
        rb.validate(data)
        table = rb.decode_table(data, min_offset=ALL_OFFSETS)
        assert table.column("offset").to_pylist() == list(range(base_offset, base_offset + count))
        assert record_rows(table) == _expected_rows(*inputs[:4])
    elif not data:  # cut to nothing: no batch to validate, and zero batches decode to no rows
        with pytest.raises(CorruptRecordError):
            rb.validate(data)
        assert rb.decode_table(data).num_rows == 0
    else:
        with pytest.raises(CorruptRecordError):
            rb.validate(data)
        with pytest.raises(CorruptRecordError):
            rb.decode_table(data, min_offset=ALL_OFFSETS)
        with pytest.raises(CorruptRecordError):
            rb.decode_table(data)


# ---------------------------------------------------------------------------------------
# (c) mutated valid batches, CRC (and optionally length) recomputed: the body parser is fuzzed


@MUTATE
@given(inputs=batch_inputs(), mutations=st.lists(_mutation, min_size=1, max_size=4), fix_length=st.booleans())
@example(  # a body cut short with a consistent length and CRC
    inputs=([b"abc"] * 3, [b"k", None, b"k"], [1, 2, 3], None, compression.NONE),
    mutations=[("truncate", 100)],
    fix_length=True,
)
@example(  # the body cut off entirely, length and CRC consistent
    inputs=([b"abc"], None, [1], None, compression.NONE), mutations=[("truncate", rb.HEADER_SIZE)], fix_length=True
)
@example(  # lz4 has no checksum of its own: a flipped literal inflates to a different Arrow body
    inputs=([b"x" * 30] * 4, None, [5, 5, 5, 5], None, compression.LZ4),
    mutations=[("flip", rb.HEADER_SIZE + 10, 0)],
    fix_length=False,
)
def test_mutated_batch_with_valid_crc_raises_only_corrupt_record_error(inputs, mutations, fix_length):
    """With the CRC recomputed after mutation, the Arrow body parser raises nothing but CorruptRecordError."""
    buf = _mutate(_build(inputs), mutations)
    if fix_length:
        _fix_length(buf)
    _recompute_crc(buf)
    data = bytes(buf)
    _parse_everything(data)
    try:
        batches = rb.validate(data)
    except CorruptRecordError:
        return
    # What validate accepts must decode, to exactly the records its headers promise.
    table = rb.decode_table(data, min_offset=ALL_OFFSETS)
    expected = sum(h.record_count for _, h in batches if not h.attributes & rb.CONTROL)
    assert table.num_rows == expected
    assert table.schema == rb.OUTPUT_SCHEMA


# ---------------------------------------------------------------------------------------
# (d) round trip


@settings(max_examples=300, deadline=None)
@given(inputs=batch_inputs(max_records=40))
@example(inputs=([None], None, [0], None, compression.NONE))
@example(inputs=([b"", None, b""], [b"", None, None], [-(2**40), 2**60, 0], [[], None, [("", b"")]], compression.ZSTD))
@example(inputs=([b"a", b"b"], [None, None], [0, 2**31], [None, None], compression.LZ4))
def test_round_trip_is_exact_for_every_codec(inputs):
    """Any values/keys/headers/timestamps (None, empty, > 2**31 ms apart) decode back exactly, every codec."""
    values, keys, timestamps, headers, codec = inputs
    data = _build(inputs)
    [(position, header)] = rb.validate(data)
    assert (position, header.size) == (0, len(data))
    assert header.codec == codec
    assert (header.record_count, header.last_offset_delta) == (len(values), len(values) - 1)
    assert (header.base_timestamp, header.max_timestamp) == (min(timestamps), max(timestamps))
    table = rb.decode_table(data)
    assert table.schema == rb.OUTPUT_SCHEMA
    assert table.column("offset").to_pylist() == list(range(len(values)))
    assert record_rows(table) == _expected_rows(values, keys, timestamps, headers)
    # Two batches back to back decode as one table, the second after the first.
    both = rb.decode_table(data + data)
    assert record_rows(both) == record_rows(table) * 2


# ---------------------------------------------------------------------------------------
# (e) targeted: headers, the Arrow IPC message, lz4 bodies, lying lengths and counts.
# A deadline catches a hang: parsing a batch of a few KiB takes milliseconds.

TARGETED = settings(max_examples=200, deadline=timedelta(seconds=10), suppress_health_check=[HealthCheck.too_slow])


def _with_body(header_of: bytes, body: bytes, **fields) -> bytes:
    """A batch with the header of ``header_of`` (fields overridden), ``body`` for a body,
    and a length and CRC that match (so only the body's own checks can refuse it)."""
    header = rb.read_header(header_of)._replace(**fields)
    buf = bytearray(rb.HEADER.pack(*header)) + body
    _fix_length(buf)
    _recompute_crc(buf)
    return bytes(buf)


_any_key = st.binary(max_size=6)  # not necessarily UTF-8: the schema says string


@st.composite
def foreign_bodies(draw):
    """A real Arrow IPC record-batch message of another schema than the attributes promise:
    header keys of arbitrary bytes, other column types, extra or missing columns, nulls."""
    n = draw(st.integers(1, 5))
    columns = {"value": pa.array(draw(st.lists(_value, min_size=n, max_size=n)), type=pa.binary())}
    choice = draw(st.sampled_from(["binary header keys", "wrong delta type", "extra column", "nullable deltas"]))
    if choice == "binary header keys":
        pairs = st.lists(st.tuples(_any_key, st.one_of(st.none(), st.binary(max_size=4))), max_size=3)
        headers = [[{"key": k, "value": v} for k, v in draw(pairs)] for _ in range(n)]
        columns["headers"] = pa.array(headers, type=pa.list_(pa.struct([("key", pa.binary()), ("value", pa.binary())])))
    elif choice == "wrong delta type":
        columns["timestamp_delta"] = pa.array(draw(st.lists(st.integers(-(2**62), 2**62), min_size=n, max_size=n)))
    elif choice == "extra column":
        columns["x"] = pa.array(range(n), type=pa.int16())
    else:
        columns["offset_delta"] = pa.array([None if i % 2 else i for i in range(n)], type=pa.int32())
    body = pa.RecordBatch.from_pydict(columns).serialize().to_pybytes()
    attributes = draw(st.integers(0, rb._KNOWN_BITS)) & (rb._SCHEMA_BITS | rb.LOG_APPEND_TIME)
    return _with_body(rb.build([b"x"] * n), body, attributes=attributes)


@TARGETED
@given(data=foreign_bodies())
def test_a_body_of_another_schema_raises_only_corrupt_record_error(data):
    """Header keys that are not UTF-8, columns of the wrong type, extra columns, null deltas: CorruptRecordError."""
    _parse_everything(data)
    try:
        rb.validate(data)
    except CorruptRecordError:
        return
    assert rb.decode_table(data).schema == rb.OUTPUT_SCHEMA


def _ipc_metadata_end(body: bytes) -> int:
    """Where an IPC message's flatbuffer metadata ends (continuation marker, length, metadata)."""
    (length,) = struct.unpack_from("<i", body, 4)
    return 8 + length


@TARGETED
@given(inputs=batch_inputs(max_records=6), mutations=st.lists(_mutation, min_size=1, max_size=3), data=st.data())
def test_lying_arrow_metadata_raises_only_corrupt_record_error(inputs, mutations, data):
    """Mutations aimed at the IPC message's flatbuffer (buffer offsets, lengths, counts), CRC kept valid."""
    values, keys, timestamps, headers, _ = inputs
    batch = rb.build(values, keys, timestamps, headers)
    body = bytearray(batch[rb.HEADER_SIZE :])
    end = _ipc_metadata_end(bytes(body))
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, end - 1))
        body[position] = data.draw(st.integers(0, 255))
    _parse_everything(_with_body(batch, bytes(body)))


@st.composite
def lz4_bodies(draw):
    """An lz4 body whose size field lies, whose block is mutated, or that inflates to garbage."""
    inputs = draw(batch_inputs(max_records=6))
    values, keys, timestamps, headers, _ = inputs
    batch = rb.build(values, keys, timestamps, headers, codec=compression.LZ4)
    body = bytearray(batch[rb.HEADER_SIZE :])
    kind = draw(st.sampled_from(["size", "block", "garbage", "huge"]))
    if kind == "size":
        (size,) = struct.unpack_from(">I", body)
        struct.pack_into(">I", body, 0, max(0, size + draw(st.integers(-64, 64))))
    elif kind == "block":
        body = _mutate(bytes(body[:4]) + bytes(body[4:]), draw(st.lists(_mutation, min_size=1, max_size=3)))
    elif kind == "garbage":
        junk = draw(st.binary(min_size=1, max_size=300))
        body = bytearray(compression.compress(compression.LZ4, junk))
    else:  # a size at the limit (or past it) over a few bytes
        limit = compression.MAX_UNCOMPRESSED_BYTES
        struct.pack_into(">I", body, 0, draw(st.sampled_from([limit, limit + 1, 2**32 - 1])))
    return _with_body(batch, bytes(body))


@TARGETED
@given(data=lz4_bodies())
def test_hostile_lz4_bodies_raise_only_corrupt_record_error(data):
    """lz4 bodies with lying sizes, mutated blocks or garbage inside raise only CorruptRecordError, quickly."""
    _parse_everything(data)


@TARGETED
@given(
    inputs=batch_inputs(max_records=6),
    record_count=st.one_of(st.integers(-3, 10), st.just(2**31 - 1)),
    extra_delta=st.sampled_from([0, 1, 2**20, 2**31 - 1]),
    trailing=st.binary(max_size=20),
)
def test_counts_and_lengths_that_lie_raise_only_corrupt_record_error(inputs, record_count, extra_delta, trailing):
    """record_count, last_offset_delta and batch_length that disagree with the body: CorruptRecordError."""
    data = _build(inputs)
    last_delta = min(2**31 - 1, max(record_count, 1) - 1 + extra_delta)
    lying = _with_body(data, data[rb.HEADER_SIZE :] + trailing, record_count=record_count, last_offset_delta=last_delta)
    _parse_everything(lying)
    honest = record_count == len(inputs[0]) and last_delta == record_count - 1 and not trailing
    if not honest:
        with pytest.raises(CorruptRecordError):
            rb.validate(lying)


# ---------------------------------------------------------------------------------------
# (f) a buffer of batches cut anywhere, and hostile bytes through the Log


def _three_batches() -> tuple[bytes, list[int]]:
    batches = [
        rb.build([b"a" * 50, None], keys=[b"k", None], now_ms=5, headers=[[("h", b"v")], None]),
        rb.build([b"b" * 300] * 3, now_ms=6, codec=compression.LZ4),
        rb.build([b"c"], now_ms=7, codec=compression.ZSTD),
    ]
    stamped, ends, offset = b"", [], 0
    for batch in batches:
        header = rb.read_header(batch)
        stamped += rb.stamp(header, offset, 0) + batch[rb.STAMP.size :]
        offset += header.record_count
        ends.append(len(stamped))
    return stamped, ends


def test_batches_cut_at_every_byte_raise_corrupt_record_error():
    """Three batches cut at any byte: CorruptRecordError unless the cut falls between batches."""
    data, ends = _three_batches()
    rows = dict(zip([0, *ends], [0, 2, 5, 6], strict=True))
    for cut in range(len(data)):
        part = data[:cut]
        if cut in rows:
            assert rb.decode_table(part).num_rows == rows[cut]
            continue
        for parse in (rb.iter_headers, rb.validate, rb.decode_table):
            with pytest.raises(CorruptRecordError):
                list(parse(part))


def _segment_log(tmp_path_factory, tail: bytes) -> tuple[Log, int, int]:
    """A log whose only segment holds three whole batches then ``tail``, as a crash left it."""
    directory = str(tmp_path_factory.mktemp("log"))
    data, ends = _three_batches()
    with open(os.path.join(directory, f"{0:020d}.log"), "wb") as f:
        f.write(data + tail)
    return Log.open(directory, LogConfig()), len(data), ends


@FUZZ
@given(tail=st.one_of(st.binary(max_size=300), plausible_batches(), lz4_bodies(), foreign_bodies()))
def test_log_recovery_keeps_the_whole_batches_before_any_hostile_tail(tmp_path_factory, tail):
    """Recovery never raises on hostile bytes after whole batches: it keeps the batches it can verify, readable."""
    log, size, _ = _segment_log(tmp_path_factory, tail)
    assert log.log_end_offset >= 6  # the three whole batches (and a plausible tail batch, if it verifies)
    table = rb.decode_table(log.read(0, 1 << 20))
    assert table.column("offset").to_pylist()[:6] == list(range(6))
    log.close()


def test_log_recovery_cuts_a_segment_cut_at_every_byte(tmp_path_factory):
    """A segment file cut at any byte recovers exactly the whole batches before the cut."""
    data, ends = _three_batches()
    counts = [2, 5, 6]
    for cut in range(0, len(data), 7):
        directory = str(tmp_path_factory.mktemp("cut"))
        with open(os.path.join(directory, f"{0:020d}.log"), "wb") as f:
            f.write(data[:cut])
        log = Log.open(directory, LogConfig())
        whole = [c for c, e in zip(counts, ends, strict=True) if e <= cut]
        assert log.log_end_offset == (whole[-1] if whole else 0)
        assert log.recovery.truncated_bytes == cut - max([e for e in ends if e <= cut], default=0)
        log.close()


@FUZZ
@given(
    data=st.one_of(
        st.binary(max_size=300),
        plausible_batches(),
        lz4_bodies(),
        foreign_bodies(),
        batch_inputs().map(_build).map(lambda b: bytes(_mutate(b, [("flip", 40, 3)]))),
    )
)
def test_follower_append_refuses_hostile_bytes_and_changes_nothing(tmp_path_factory, data):
    """A follower given hostile bytes by its leader raises CorruptRecordError (or InvalidRequestError for offsets
    below its end) and its log is unchanged."""
    log, _, _ = _segment_log(tmp_path_factory, b"")
    before = log.read(0, 1 << 20)
    try:
        log.append_as_follower(data)
    except (CorruptRecordError, InvalidRequestError):
        pass
    else:  # a hostile buffer that is a valid batch above the log end: appended whole
        assert log.read(0, 1 << 20).startswith(before)
        return
    assert log.log_end_offset == 6 and log.read(0, 1 << 20) == before
    log.close()
