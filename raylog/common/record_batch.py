"""The record batch: one format from producer to disk to consumer.

A batch is a fixed 61-byte header followed by a body. Header fields, big-endian:

    field               type  notes
    base_offset         i64   stamped by the leader; outside the CRC
    batch_length        i32   bytes after this field (batch size = 12 + batch_length)
    leader_epoch        i32   stamped by the leader; outside the CRC
    magic               i8    format version, ``MAGIC``; parsers dispatch on it
    crc                 u32   CRC-32C (Kafka's checksum) of every byte after this field
    attributes          i16   codec, timestamp type, flags, which body columns are present
    last_offset_delta   i32   offset of the last record minus base_offset
    base_timestamp      i64   smallest record timestamp (ms)
    max_timestamp       i64   largest record timestamp, or the log append time
    producer_id         i64   -1 when not idempotent
    producer_epoch      i16
    base_sequence       i32   sequence number of the first record, -1 when not idempotent
    record_count        i32   >= 1

The body is one Arrow IPC record-batch message (without the schema: the schema follows
from ``magic`` and the attribute bits) with the columns, in order, each only when its
attribute bit says so: ``key`` binary, ``value`` binary (always), ``timestamp_delta``
int32 (int64 when WIDE_TIMESTAMP_DELTA), ``offset_delta`` int32, ``headers``
list<struct<key: string, value: binary>>. Columns that carry nothing are left out: keys
when all are null, headers when none were sent, timestamp deltas when all timestamps are
equal, offset deltas until compaction leaves gaps. The body may be compressed as a whole
(see :mod:`raylog.common.compression`).

Compaction (:func:`retain`) rewrites a batch keeping some of its records, as Kafka's
cleaner does: the batch keeps its base offset, ``last_offset_delta``, leader epoch and
producer fields, so its offset range and its producer's sequence range survive, and the
surviving records keep their offsets through the ``offset_delta`` column.

Invariants checked by :func:`validate`: the magic is known, lengths are consistent, the
CRC matches, the body decodes to exactly ``record_count`` rows of the promised schema,
offset deltas rise strictly and end at or below ``last_offset_delta`` (below only after
compaction), and timestamps agree with ``max_timestamp``. Decoding never runs a Python
loop per record.

Functions here are pure and thread-safe.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator, Sequence
from functools import lru_cache
from typing import Any, NamedTuple

import crc32c
import numpy as np
import pyarrow as pa

from ..errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError
from . import compression

MAGIC = 1

_FIELDS = (
    ("base_offset", "q"),
    ("batch_length", "i"),
    ("leader_epoch", "i"),
    ("magic", "b"),
    ("crc", "I"),
    ("attributes", "h"),
    ("last_offset_delta", "i"),
    ("base_timestamp", "q"),
    ("max_timestamp", "q"),
    ("producer_id", "q"),
    ("producer_epoch", "h"),
    ("base_sequence", "i"),
    ("record_count", "i"),
)
HEADER = struct.Struct(">" + "".join(code for _, code in _FIELDS))
HEADER_SIZE = HEADER.size


def _offset_of(name: str) -> int:
    index = [n for n, _ in _FIELDS].index(name)
    return struct.calcsize(">" + "".join(code for _, code in _FIELDS[:index]))


LENGTH_OFFSET = _offset_of("batch_length")
#: Bytes before the batch_length field is counted: batch size = LOG_OVERHEAD + batch_length.
LOG_OVERHEAD = _offset_of("leader_epoch")
CRC_OFFSET = _offset_of("crc")
ATTRIBUTES_OFFSET = _offset_of("attributes")
MAX_TIMESTAMP_OFFSET = _offset_of("max_timestamp")
#: The leader rewrites this prefix (base_offset, batch_length, leader_epoch): outside the CRC.
STAMP = struct.Struct(">qii")
assert STAMP.size == ATTRIBUTES_OFFSET - 5 == CRC_OFFSET - 1

# Attribute bits.
CODEC_MASK = 0x07
LOG_APPEND_TIME = 0x08
TRANSACTIONAL = 0x10
CONTROL = 0x20
HAS_KEY = 0x40
HAS_HEADERS = 0x80
HAS_OFFSET_DELTA = 0x100
HAS_TIMESTAMP_DELTA = 0x200
WIDE_TIMESTAMP_DELTA = 0x400
#: On a control batch: the marker commits its producer's transaction (else it aborts it).
#: The marker's record says the same (Kafka's control record key); the bit lets a replica
#: replay transactions from headers alone, as it replays producer state.
COMMIT_MARKER = 0x800
_SCHEMA_BITS = HAS_KEY | HAS_HEADERS | HAS_OFFSET_DELTA | HAS_TIMESTAMP_DELTA | WIDE_TIMESTAMP_DELTA
_KNOWN_BITS = CODEC_MASK | LOG_APPEND_TIME | TRANSACTIONAL | CONTROL | COMMIT_MARKER | _SCHEMA_BITS

#: An encapsulated Arrow IPC message starts with a continuation marker and the metadata length.
_IPC_PREFIX = struct.Struct("<Ii")

HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))

#: The table every decode returns (clients add topic and partition columns).
OUTPUT_SCHEMA = pa.schema(
    [
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.int64(), nullable=False),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", HEADERS_TYPE),
    ]
)

_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1

# --- Limits on what a producer's batch may hold (checked by producers and leaders). ------

#: Headers per record (Kafka has no such limit; every record field here has one).
MAX_HEADERS_PER_RECORD = 1_000
#: Bytes of a header key in UTF-8 (the largest string Kafka's protocol carries).
MAX_HEADER_KEY_BYTES = 32_767

# --- An idempotent producer's fields (Kafka's RecordBatch.NO_PRODUCER_ID, NO_SEQUENCE). ---

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1
#: Sequences are non-negative int32s that wrap (Kafka's DefaultRecordBatch.incrementSequence).
SEQUENCE_MODULUS = 2**31


def increment_sequence(sequence: int, increment: int) -> int:
    """``sequence + increment`` wrapped into ``[0, 2**31)``."""
    return (sequence + increment) % SEQUENCE_MODULUS


# --- Upper bounds on encoded sizes, so a producer can tell before building a batch
# whether it fits max.message.bytes (tests/unit/common/test_record_batch.py checks them).

#: Per record beyond its key, value and header bytes: the Arrow offsets of value, key and
#: headers (4 each), a timestamp delta (8), validity bits, and slack.
RECORD_OVERHEAD_BOUND = 32
#: Per header: the offsets of its key and value (4 each) and validity bits.
HEADER_OVERHEAD_BOUND = 10
#: Per batch: the fixed header (61), the Arrow IPC message's prefix (8) and metadata (472
#: bytes for the widest schema), the padding of its 19 buffers to 8 bytes (133), and what
#: the worst codec (snappy, n/6) adds to those: 804, rounded up.
BATCH_OVERHEAD_BOUND = 1_024


class BatchHeader(NamedTuple):
    """The decoded fixed header of one batch."""

    base_offset: int
    batch_length: int
    leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes of the whole batch, header included."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def codec(self) -> int:
        return self.attributes & CODEC_MASK


@lru_cache(maxsize=64)
def body_schema(attributes: int) -> pa.Schema:
    """The Arrow schema of a body, from the attribute bits (magic 1)."""
    fields = []
    if attributes & HAS_KEY:
        fields.append(pa.field("key", pa.binary()))
    fields.append(pa.field("value", pa.binary()))
    if attributes & HAS_TIMESTAMP_DELTA:
        wide = attributes & WIDE_TIMESTAMP_DELTA
        fields.append(pa.field("timestamp_delta", pa.int64() if wide else pa.int32(), nullable=False))
    if attributes & HAS_OFFSET_DELTA:
        fields.append(pa.field("offset_delta", pa.int32(), nullable=False))
    if attributes & HAS_HEADERS:
        fields.append(pa.field("headers", HEADERS_TYPE))
    return pa.schema(fields)


# ---------------------------------------------------------------------------------------
# Building batches (producer side)


def record_size_bound(payload_bytes: int, header_count: int = 0) -> int:
    """An upper bound on what one record adds to a batch: ``payload_bytes`` (key, value,
    header keys in UTF-8 and header values) plus the body's per-record structure."""
    return payload_bytes + RECORD_OVERHEAD_BOUND + HEADER_OVERHEAD_BOUND * header_count


def batch_size_bound(records_bound: int, codec: int) -> int:
    """An upper bound on the bytes of a batch whose records' :func:`record_size_bound`
    add up to ``records_bound``, compressed with ``codec``."""
    return BATCH_OVERHEAD_BOUND + compression.max_compressed_bytes(codec, records_bound)


def records_capacity(max_batch_bytes: int, codec: int) -> int:
    """The largest sum of :func:`record_size_bound` a batch of at most ``max_batch_bytes``
    surely holds (0: not even an empty record)."""
    return compression.max_input_bytes(codec, max_batch_bytes - BATCH_OVERHEAD_BOUND)


def build(
    values: Sequence[Any],
    keys: Sequence[Any] | None = None,
    timestamps_ms: Sequence[int] | None = None,
    headers: Sequence[Any] | None = None,
    **options: Any,
) -> bytes:
    """Build one batch from Python lists.

    Args:
        values: bytes (or str, encoded as UTF-8) or None per record.
        keys: like values, or None when no record has a key.
        timestamps_ms: per-record timestamps, or None to stamp all with ``now_ms``.
        headers: per record a list of ``(str, bytes)`` pairs (or None).
        options: as for :func:`build_arrow`.

    Returns:
        The batch bytes, base_offset 0 and leader_epoch -1 until a leader stamps them.

    Raises:
        TypeError: a value, key or header of a type that is not bytes, str or None.

    Example:
        >>> batch = build([b"a", b"b"], keys=[b"k", None])
        >>> decode_table(batch).column("value").to_pylist()
        [b'a', b'b']
    """
    value_array = binary_of(values)
    key_array = None if keys is None else binary_of(keys)
    header_array = None if headers is None else headers_of(headers)
    ts_array = None if timestamps_ms is None else np.asarray(timestamps_ms, dtype=np.int64)
    return build_arrow(value_array, key_array, ts_array, header_array, **options)


def build_arrow(
    values: pa.Array,
    keys: pa.Array | None = None,
    timestamps_ms: pa.Array | np.ndarray | None = None,
    headers: pa.Array | None = None,
    *,
    codec: int = compression.NONE,
    now_ms: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
    commit_marker: bool = False,
    offset_deltas: np.ndarray | None = None,
    last_offset_delta: int | None = None,
) -> bytes:
    """Build one batch from Arrow arrays (binary or string values and keys).

    Args:
        values: the record values; at least one.
        keys: keys of the same length, or None.
        timestamps_ms: int64 timestamps of the same length, or None for ``now_ms``.
        headers: a ``HEADERS_TYPE`` array of the same length, or None.
        codec: a :mod:`raylog.common.compression` codec id.
        now_ms: the timestamp for records without one (default: the wall clock).
        producer_id, producer_epoch, base_sequence: idempotence fields.
        transactional, control, commit_marker: the transaction flags.
        offset_deltas: each record's offset minus the base offset, rising strictly from 0
            or more (a compacted batch); None for consecutive offsets from 0.
        last_offset_delta: the batch's last offset minus its base offset, at least the last
            of ``offset_deltas`` (compaction keeps a batch's original range); default: that.

    Raises:
        ValueError: no values, lengths that differ, or offset deltas out of order.
    """
    count = len(values)
    if count == 0:
        raise ValueError("a batch holds at least one record")
    last_delta = count - 1
    columns: dict[str, pa.Array] = {}
    attributes = codec & CODEC_MASK
    if transactional:
        attributes |= TRANSACTIONAL
    if control:
        attributes |= CONTROL
    if commit_marker:
        attributes |= COMMIT_MARKER
    if keys is not None and keys.null_count < len(keys):
        _require_length(keys, count, "keys")
        columns["key"] = _as_binary(keys)
        attributes |= HAS_KEY
    columns["value"] = _as_binary(values)

    if timestamps_ms is None:
        base_ts = max_ts = int(now_ms if now_ms is not None else time.time_ns() // 1_000_000)
    else:
        _require_length(timestamps_ms, count, "timestamps_ms")
        if isinstance(timestamps_ms, pa.ChunkedArray):
            timestamps_ms = timestamps_ms.combine_chunks()
        if isinstance(timestamps_ms, pa.Array):
            if timestamps_ms.null_count:
                raise ValueError("timestamps_ms has nulls")
            timestamps_ms = values_of(timestamps_ms)
        ts = np.asarray(timestamps_ms, dtype=np.int64)
        base_ts, max_ts = int(ts.min()), int(ts.max())
        if max_ts != base_ts:
            delta = ts - base_ts
            if max_ts - base_ts > _INT32_MAX:
                attributes |= HAS_TIMESTAMP_DELTA | WIDE_TIMESTAMP_DELTA
                columns["timestamp_delta"] = arrow_of(delta)
            else:
                attributes |= HAS_TIMESTAMP_DELTA
                columns["timestamp_delta"] = arrow_of(delta.astype(np.int32))

    if headers is not None and headers.null_count < len(headers):
        _require_length(headers, count, "headers")
        if headers.type != HEADERS_TYPE:
            raise TypeError(f"headers must be of type {HEADERS_TYPE}, got {headers.type}")
        columns["headers"] = headers
        attributes |= HAS_HEADERS

    if offset_deltas is not None:
        _require_length(offset_deltas, count, "offset_deltas")
        deltas = np.asarray(offset_deltas, dtype=np.int64)
        if deltas[0] < 0 or deltas[-1] > _INT32_MAX or (count > 1 and np.any(np.diff(deltas) <= 0)):
            raise ValueError("offset_deltas must rise strictly from 0 or more and fit in an int32")
        # Offset deltas go after the timestamps in the body (see body_schema's order).
        columns = {name: columns[name] for name in ("key", "value", "timestamp_delta") if name in columns} | {
            "offset_delta": arrow_of(deltas.astype(np.int32)),
            **({"headers": columns["headers"]} if "headers" in columns else {}),
        }
        attributes |= HAS_OFFSET_DELTA
        last_delta = int(deltas[-1])
    if last_offset_delta is not None:
        if not last_delta <= last_offset_delta <= _INT32_MAX:
            raise ValueError(f"last_offset_delta {last_offset_delta} is below the last record's delta {last_delta}")
        last_delta = last_offset_delta

    body_batch = pa.RecordBatch.from_arrays(list(columns.values()), schema=body_schema(attributes))
    body = body_batch.serialize()
    if codec != compression.NONE:
        body = compression.compress(codec, body)
    return _assemble(
        body,
        attributes=attributes,
        last_offset_delta=last_delta,
        base_timestamp=base_ts,
        max_timestamp=max_ts,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        record_count=count,
    )


_BINARY_LIKE = (pa.binary(), pa.string(), pa.large_binary(), pa.large_string(), pa.binary_view(), pa.string_view())


def is_binary_like(data_type: pa.DataType) -> bool:
    """Whether keys or values of this Arrow type can go into a batch (as binary)."""
    return data_type in _BINARY_LIKE


def _as_binary(array: pa.Array) -> pa.Array:
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if array.type == pa.binary():
        return array
    if is_binary_like(array.type):
        return array.cast(pa.binary())
    raise TypeError(f"keys and values must be binary or string arrays, got {array.type}")


def _require_length(array: Any, count: int, what: str) -> None:
    if len(array) != count:
        raise ValueError(f"{what} has {len(array)} entries for {count} values")


def _assemble(body: pa.Buffer | bytes, **fields: int) -> bytes:
    head = bytearray(HEADER_SIZE)
    HEADER.pack_into(
        head,
        0,
        0,  # base_offset: stamped by the leader
        HEADER_SIZE - LOG_OVERHEAD + len(body),
        -1,  # leader_epoch: stamped by the leader
        MAGIC,
        0,  # crc: computed below
        fields["attributes"],
        fields["last_offset_delta"],
        fields["base_timestamp"],
        fields["max_timestamp"],
        fields["producer_id"],
        fields["producer_epoch"],
        fields["base_sequence"],
        fields["record_count"],
    )
    crc = crc32c.crc32c(body, crc32c.crc32c(memoryview(head)[ATTRIBUTES_OFFSET:]))
    struct.pack_into(">I", head, CRC_OFFSET, crc)
    return b"".join((head, body))


# ---------------------------------------------------------------------------------------
# Reading and validating batches


def read_header(view: memoryview | bytes, pos: int = 0) -> BatchHeader:
    """The header of the batch at ``pos``, checked for magic and plausible fields.

    The body is not looked at and need not be in ``view`` (see :func:`parse_header`).

    Raises:
        CorruptRecordError: fewer than HEADER_SIZE bytes, an unknown magic or attribute
            bit, or an impossible length or count.
    """
    if len(view) - pos < HEADER_SIZE:
        raise CorruptRecordError(f"truncated batch header at byte {pos}")
    header = BatchHeader._make(HEADER.unpack_from(view, pos))
    if header.magic != MAGIC:
        raise CorruptRecordError(f"unknown batch magic {header.magic} at byte {pos}")
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordError(f"batch length {header.batch_length} shorter than a header at byte {pos}")
    if header.record_count < 1 or header.last_offset_delta < header.record_count - 1:
        raise CorruptRecordError(
            f"batch at byte {pos} claims {header.record_count} records and last offset delta {header.last_offset_delta}"
        )
    if header.attributes & ~_KNOWN_BITS:
        raise CorruptRecordError(f"unknown attribute bits {header.attributes:#x} at byte {pos}")
    if header.base_offset < 0 or header.base_offset + header.last_offset_delta > _INT64_MAX:
        raise CorruptRecordError(f"batch at byte {pos} has impossible offsets from {header.base_offset}")
    return header


def parse_header(view: memoryview | bytes, pos: int = 0) -> BatchHeader:
    """Like :func:`read_header`, and the whole batch must lie within ``view``."""
    header = read_header(view, pos)
    if pos + header.size > len(view):
        raise CorruptRecordError(f"batch at byte {pos} runs past the end of the data")
    return header


def iter_headers(data: Any) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for each batch of a buffer of whole batches.

    Raises:
        CorruptRecordError: as :func:`parse_header`, including a partial last batch.
    """
    view = memoryview(data).cast("B")
    pos, end = 0, len(view)
    while pos < end:
        header = parse_header(view, pos)
        yield pos, header
        pos += header.size


def check_crc(view: memoryview, pos: int, header: BatchHeader) -> None:
    """Raises CorruptRecordError when the batch's CRC does not match its bytes."""
    actual = crc32c.crc32c(view[pos + ATTRIBUTES_OFFSET : pos + header.size])
    if actual != header.crc:
        raise CorruptRecordError(f"CRC mismatch in batch at offset {header.base_offset} (byte {pos})")


def decode_body(view: memoryview, pos: int, header: BatchHeader) -> pa.RecordBatch:
    """The body of the batch at ``pos`` as an Arrow batch in its stored schema, validated.

    Raises:
        CorruptRecordError: the body does not decode to ``record_count`` valid rows
            consistent with the header.
    """
    body = view[pos + HEADER_SIZE : pos + header.size]
    codec = header.attributes & CODEC_MASK
    buffer = pa.py_buffer(body) if codec == compression.NONE else compression.decompress(codec, body)
    schema = body_schema(header.attributes & _SCHEMA_BITS)
    try:
        message = pa.ipc.read_message(buffer)
        batch = pa.ipc.read_record_batch(message, schema)
        batch.validate(full=True)
    except (pa.ArrowException, ValueError, OSError, EOFError) as exc:
        raise CorruptRecordError(f"batch at offset {header.base_offset} has an undecodable body: {exc}") from None
    if _IPC_PREFIX.size + message.metadata.size + message.body.size != buffer.size:
        # (Kafka refuses a batch whose declared size leaves bytes after its last record.)
        raise CorruptRecordError(f"batch at offset {header.base_offset} has bytes after its Arrow message")
    if batch.num_rows != header.record_count:
        raise CorruptRecordError(
            f"batch at offset {header.base_offset} holds {batch.num_rows} rows, header says {header.record_count}"
        )
    if not batch.schema.equals(schema):
        raise CorruptRecordError(f"batch at offset {header.base_offset} has body schema {batch.schema}")
    _check_deltas(batch, header)
    return batch


def _check_deltas(batch: pa.RecordBatch, header: BatchHeader) -> None:
    attributes = header.attributes
    if attributes & HAS_OFFSET_DELTA:
        deltas = _numpy(batch.column("offset_delta"), header)
        if deltas[0] < 0 or deltas[-1] > header.last_offset_delta or (deltas.size > 1 and np.any(np.diff(deltas) <= 0)):
            raise CorruptRecordError(f"batch at offset {header.base_offset} has out-of-order offset deltas")
    elif header.last_offset_delta != header.record_count - 1:
        raise CorruptRecordError(f"batch at offset {header.base_offset} skips offsets without offset deltas")
    if attributes & LOG_APPEND_TIME:
        return
    top = header.base_timestamp
    if attributes & HAS_TIMESTAMP_DELTA:
        deltas = _numpy(batch.column("timestamp_delta"), header)
        if deltas.min() < 0:
            raise CorruptRecordError(f"batch at offset {header.base_offset} has timestamps below its base")
        top += int(deltas.max())
    if top != header.max_timestamp:
        raise CorruptRecordError(f"batch at offset {header.base_offset} has a max timestamp its records do not have")


def _numpy(column: pa.Array, header: BatchHeader) -> np.ndarray:
    """A delta column's values (see :func:`values_of`)."""
    if column.null_count:
        raise CorruptRecordError(f"batch at offset {header.base_offset} has null {column.type} deltas")
    return values_of(column)


def values_of(column: pa.Array) -> np.ndarray:
    """A fixed-width column without nulls as numpy, read where it lies. Not ``to_numpy``, nor
    ``pa.array`` / ``pa.scalar`` the other way (:func:`arrow_of`): pyarrow's first such call in
    a process imports pandas (0.2-0.5 s; it cost a replica its first batch with deltas, and a
    fresh consumer its first poll: issue 27)."""
    dtype = np.dtype(column.type.to_pandas_dtype())
    return np.frombuffer(column.buffers()[1], dtype=dtype, count=len(column), offset=column.offset * dtype.itemsize)


def values_or(column: pa.Array, fill: int) -> np.ndarray:
    """:func:`values_of`, with ``fill`` where the column is null (not ``fill_null``, whose
    scalar is made with ``pa.scalar``)."""
    values = values_of(column)
    if not column.null_count:
        return values
    return np.where(validity_of(column), values, fill)


def validity_of(column: pa.Array) -> np.ndarray:
    """Whether each entry of a column (of any type) is not null, as numpy bools read from its
    validity bitmap (see :func:`values_of`)."""
    if not column.null_count:
        return np.ones(len(column), dtype=bool)
    bits = np.frombuffer(column.buffers()[0], dtype=np.uint8)
    return np.unpackbits(bits, count=column.offset + len(column), bitorder="little")[column.offset :].astype(bool)


def arrow_of(values: np.ndarray) -> pa.Array:
    """A 1-D numpy array of a fixed-width type as an Arrow array over the same memory
    (see :func:`values_of`)."""
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values), [None, pa.py_buffer(values)])


def binary_of(items: Sequence[Any], string: bool = False) -> pa.Array:
    """bytes, str (UTF-8) or None per item as an Arrow binary (or, ``string``, UTF-8) array made
    from buffers, not with ``pa.array`` (see :func:`values_of`: it cost a producer's first
    batch 0.2 s).

    Raises:
        TypeError: an item of another type (or, for strings, not UTF-8).
    """
    n = len(items)
    try:
        data = b"".join(items)  # all bytes-like (the usual case): no Python loop
        lengths = np.fromiter(map(len, items), dtype=np.int64, count=n)
        exact = int(lengths.sum()) == len(data)  # (len() of a buffer of wider items is not its bytes)
    except TypeError:  # a None or a str among them
        exact = False
    validity = None
    if not exact:
        encoded = [_encoded(item) for item in items]
        present = [item is not None for item in encoded]
        data = b"".join(item for item in encoded if item is not None)
        lengths = np.fromiter((0 if item is None else len(item) for item in encoded), dtype=np.int64, count=n)
        if not all(present):
            validity = pa.py_buffer(np.packbits(np.array(present, dtype=bool), bitorder="little"))
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > np.iinfo(np.int32).max:
        raise TypeError(f"{offsets[-1]} bytes do not fit one Arrow binary array")
    type_ = pa.string() if string else pa.binary()
    array = pa.Array.from_buffers(type_, n, [validity, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)])
    if string:
        try:
            array.validate(full=True)
        except pa.ArrowInvalid as exc:
            raise TypeError(f"strings must be UTF-8: {exc}") from None
    return array


def _encoded(item: Any) -> bytes | None:
    if item is None or isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return item.encode()
    if isinstance(item, (bytearray, memoryview)):
        return bytes(item)
    raise TypeError(f"records must be bytes, str or None, got {type(item).__name__}")


def headers_of(headers: Sequence[Any]) -> pa.Array:
    """Per record None or a list of ``(str, bytes or None)`` pairs as a :data:`HEADERS_TYPE`
    array made from buffers (see :func:`binary_of`).

    Raises:
        TypeError: a record's headers are not such a list.
    """
    try:
        pairs = [(key, value) for record in headers if record for key, value in record]
        counts = np.fromiter((len(record) if record else 0 for record in headers), dtype=np.int64, count=len(headers))
    except (TypeError, ValueError):
        raise TypeError("headers must be a list of (str, bytes or None) pairs per record") from None
    entry = HEADERS_TYPE.value_type
    entries = pa.StructArray.from_arrays(
        [binary_of([key for key, _ in pairs], string=True), binary_of([value for _, value in pairs])],
        fields=[entry.field(0), entry.field(1)],
    )
    offsets = np.zeros(len(headers) + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:], dtype=np.int32)
    present = [record is not None for record in headers]
    validity = None if all(present) else pa.py_buffer(np.packbits(np.array(present, dtype=bool), bitorder="little"))
    return pa.Array.from_buffers(HEADERS_TYPE, len(headers), [validity, pa.py_buffer(offsets)], children=[entries])


def validate(
    data: Any, *, max_batch_bytes: int | None = None, require_keys: bool = False, limit_headers: bool = False
) -> list[tuple[int, BatchHeader]]:
    """Check every batch of a buffer completely: header, CRC and body.

    Args:
        max_batch_bytes: the largest batch accepted (``max.message.bytes``).
        require_keys: every record of a data batch must have a key (a compacted topic).
        limit_headers: records hold at most MAX_HEADERS_PER_RECORD headers whose keys have
            at most MAX_HEADER_KEY_BYTES (a leader checks a producer's batches).

    Returns:
        ``(position, header)`` for each batch.

    Raises:
        CorruptRecordError: any batch is invalid (nothing is partially accepted).
        RecordTooLargeError: a batch is larger than ``max_batch_bytes``.
        InvalidRecordError: ``require_keys`` and a record has no key, or ``limit_headers``
            and a record has too many headers or too long a header key.
    """
    view = memoryview(data).cast("B")
    batches = list(iter_headers(view))
    if not batches:
        raise CorruptRecordError("no record batch in the data")
    for pos, header in batches:
        if max_batch_bytes is not None and header.size > max_batch_bytes:
            raise RecordTooLargeError(f"batch of {header.size} bytes is above max.message.bytes={max_batch_bytes}")
        check_crc(view, pos, header)
        body = decode_body(view, pos, header)
        if require_keys and not header.attributes & CONTROL:
            keyless = _keyless(body, header)
            if keyless:
                why = "Compacted topic cannot accept message without key"
                raise InvalidRecordError(
                    f"{why}: {len(keyless)} of the batch's {body.num_rows} records (batch at offset "
                    f"{header.base_offset})",
                    record_errors=tuple((index, why) for index in keyless),
                )
        if limit_headers and header.attributes & HAS_HEADERS:
            _check_header_limits(body.column("headers"), header)
    return batches


def _check_header_limits(headers: pa.Array, header: BatchHeader) -> None:
    import pyarrow.compute as pc  # here: importing it costs every replica process ~25 ms at start

    counts = pc.list_value_length(headers)
    if len(counts) and (pc.max(counts).as_py() or 0) > MAX_HEADERS_PER_RECORD:
        raise InvalidRecordError(
            f"a record of the batch at offset {header.base_offset} has more than {MAX_HEADERS_PER_RECORD} headers"
        )
    keys = headers.flatten().field("key")
    if len(keys) and (pc.max(pc.binary_length(keys)).as_py() or 0) > MAX_HEADER_KEY_BYTES:
        raise InvalidRecordError(
            f"a header key of the batch at offset {header.base_offset} is longer than {MAX_HEADER_KEY_BYTES} bytes"
        )


def _keyless(body: pa.RecordBatch, header: BatchHeader) -> list[int]:
    """The indexes of the batch's records without a key (none: an empty list)."""
    if not header.attributes & HAS_KEY:
        return list(range(body.num_rows))
    keys = body.column("key")
    if keys.null_count == 0:
        return []
    import pyarrow.compute as pc  # here: see _check_header_limits

    return pc.indices_nonzero(keys.is_null()).to_pylist()


def decode_table(
    data: Any,
    *,
    check_crcs: bool = True,
    min_offset: int = 0,
    aborted: Sequence[tuple[int, int]] | None = None,
) -> pa.Table:
    """Decode a buffer of whole batches into one table of ``OUTPUT_SCHEMA``. Control batches
    (transaction markers) are never part of it.

    Args:
        data: bytes-like holding zero or more whole batches, as read from a log.
        check_crcs: verify each batch's CRC first (Kafka's ``check.crcs``).
        min_offset: drop records below this offset (a read starts at the batch holding it).
        aborted: for a read_committed read, the ``(producer_id, first_offset)`` of every
            aborted transaction that may overlap ``data`` (what the leader's fetch answer
            lists): the batches of such a transaction, from its first offset up to its
            abort marker, are dropped whole, from their headers (Kafka's consumer does the
            same). None: keep every data batch (read_uncommitted).

    Raises:
        CorruptRecordError: a batch fails its checks.
    """
    view = memoryview(data).cast("B")
    out = []
    starts = sorted(aborted, key=lambda txn: txn[1]) if aborted else ()
    next_start, aborting = 0, set()
    for pos, header in iter_headers(view):
        if check_crcs:  # before trusting any field inside the CRC (attributes, deltas)
            check_crc(view, pos, header)
        attributes = header.attributes
        if starts:
            while next_start < len(starts) and starts[next_start][1] <= header.last_offset:
                aborting.add(starts[next_start][0])
                next_start += 1
            if attributes & CONTROL and not attributes & COMMIT_MARKER:
                aborting.discard(header.producer_id)  # its aborted transaction ends here
            elif attributes & TRANSACTIONAL and header.producer_id in aborting:
                continue
        if header.next_offset <= min_offset or attributes & CONTROL:
            continue
        batch = _output_batch(header, decode_body(view, pos, header))
        if header.base_offset < min_offset:
            offsets = values_of(batch.column(0))
            batch = batch.slice(int(np.searchsorted(offsets, min_offset)))
        out.append(batch)
    return pa.Table.from_batches(out, schema=OUTPUT_SCHEMA)


#: A control record's key: version and type (Kafka's ControlRecordType: 0 abort, 1 commit);
#: its value: version and the coordinator epoch that wrote the marker.
CONTROL_KEY = struct.Struct(">hh")
CONTROL_VALUE = struct.Struct(">hi")


def build_marker(
    producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, now_ms: int | None = None
) -> bytes:
    """A transaction marker: a control batch of one record that commits or aborts the
    transaction of ``producer_id`` in the partition it is appended to.

    Its columns are made from buffers, not with ``pa.array``: that one's check for pandas
    objects imports pandas in the first call of a process, which cost a partition's first
    marker ~180 ms (and each replica process ~30 MB)."""
    return build_arrow(
        binary_of([CONTROL_VALUE.pack(0, coordinator_epoch)]),
        binary_of([CONTROL_KEY.pack(0, 1 if commit else 0)]),
        now_ms=now_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
        control=True,
        commit_marker=commit,
    )


def offset_deltas(header: BatchHeader, body: pa.RecordBatch) -> np.ndarray:
    """Each record's offset minus the batch's base offset (int64)."""
    if header.attributes & HAS_OFFSET_DELTA:
        return values_of(body.column("offset_delta")).astype(np.int64)
    return np.arange(header.record_count, dtype=np.int64)


def _create_timestamps(header: BatchHeader, body: pa.RecordBatch) -> np.ndarray:
    """Each record's timestamp as its producer wrote it (int64 ms)."""
    if header.attributes & HAS_TIMESTAMP_DELTA:
        return values_of(body.column("timestamp_delta")).astype(np.int64) + header.base_timestamp
    return np.full(header.record_count, header.base_timestamp, dtype=np.int64)


def _output_batch(header: BatchHeader, body: pa.RecordBatch) -> pa.RecordBatch:
    count = header.record_count
    attributes = header.attributes
    offsets = offset_deltas(header, body) + header.base_offset
    if attributes & LOG_APPEND_TIME:
        timestamps = np.full(count, header.max_timestamp, dtype=np.int64)
    else:
        timestamps = _create_timestamps(header, body)
    keys = body.column("key") if attributes & HAS_KEY else pa.nulls(count, pa.binary())
    headers = body.column("headers") if attributes & HAS_HEADERS else pa.nulls(count, HEADERS_TYPE)
    return pa.RecordBatch.from_arrays(
        [arrow_of(offsets), arrow_of(timestamps), keys, body.column("value"), headers], schema=OUTPUT_SCHEMA
    )


# ---------------------------------------------------------------------------------------
# Leader-side rewriting


def stamp(header: BatchHeader, base_offset: int, leader_epoch: int) -> bytes:
    """The new first bytes of a batch given its offset and leader epoch (CRC unaffected)."""
    return STAMP.pack(base_offset, header.batch_length, leader_epoch)


def with_log_append_time(view: memoryview, pos: int, header: BatchHeader, now_ms: int) -> bytearray:
    """A copy of the batch whose timestamps all read as ``now_ms`` (LogAppendTime).

    As in Kafka, only the header changes (attribute bit and max_timestamp) and the CRC is
    recomputed; record timestamps in the body are left as the producer wrote them.
    """
    batch = bytearray(view[pos : pos + header.size])
    struct.pack_into(">h", batch, ATTRIBUTES_OFFSET, header.attributes | LOG_APPEND_TIME)
    struct.pack_into(">q", batch, MAX_TIMESTAMP_OFFSET, now_ms)
    struct.pack_into(">I", batch, CRC_OFFSET, crc32c.crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]))
    return batch


def recompress(view: memoryview, pos: int, header: BatchHeader, codec: int) -> bytes:
    """A copy of the batch at ``pos`` whose body is stored with ``codec`` (a leader applying
    a topic's compression.type, as Kafka's does): the same records, header fields and
    flags; only the codec bits, the length and the CRC change. Base offset and leader epoch
    are left for the leader to stamp.

    Raises:
        CorruptRecordError: the body does not inflate.
    """
    body = view[pos + HEADER_SIZE : pos + header.size]
    raw = body if header.codec == compression.NONE else compression.decompress(header.codec, body)
    return _assemble(
        raw if codec == compression.NONE else compression.compress(codec, raw),
        attributes=(header.attributes & ~CODEC_MASK) | codec,
        last_offset_delta=header.last_offset_delta,
        base_timestamp=header.base_timestamp,
        max_timestamp=header.max_timestamp,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        record_count=header.record_count,
    )


# ---------------------------------------------------------------------------------------
# Compaction


def retain(header: BatchHeader, body: pa.RecordBatch, keep: np.ndarray) -> bytes:
    """The batch rebuilt with only the records where ``keep`` is true (Kafka's cleaner).

    The new batch keeps the original base offset, ``last_offset_delta`` (so its offset range
    and its producer's sequence range survive), leader epoch, codec, timestamp type,
    producer id, epoch and base sequence, and transaction flags; each kept record keeps
    its offset (``offset_delta``), key, value, headers and timestamp.

    Args:
        header: the batch's header, as stored.
        body: its body as :func:`decode_body` returned it.
        keep: one bool per record; at least one true.
    """
    mask = pa.array(keep, type=pa.bool_())
    kept = body.filter(mask)
    attributes = header.attributes
    batch = build_arrow(
        kept.column("value"),
        kept.column("key") if attributes & HAS_KEY else None,
        _create_timestamps(header, body)[keep],
        kept.column("headers") if attributes & HAS_HEADERS else None,
        codec=header.codec,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        transactional=bool(attributes & TRANSACTIONAL),
        control=bool(attributes & CONTROL),
        commit_marker=bool(attributes & COMMIT_MARKER),
        offset_deltas=offset_deltas(header, body)[keep],
        last_offset_delta=header.last_offset_delta,
    )
    if attributes & LOG_APPEND_TIME:
        view = memoryview(batch)
        batch = bytes(with_log_append_time(view, 0, read_header(view), header.max_timestamp))
    new_header = read_header(batch)
    return stamp(new_header, header.base_offset, header.leader_epoch) + batch[STAMP.size :]
