"""Kafka record batches (magic 2) to raylog record batches (magic 1) and back.

Both formats share the 61-byte batch header (:mod:`raylog.common.record_batch`); they
differ in the magic byte and the body. A Kafka v2 body is a run of records, each
``length varint | attributes i8 | timestampDelta varlong | offsetDelta varint | keyLength
varint | key | valueLength varint | value | headerCount varint | headers`` (every varint
zig-zag encoded, -1 lengths meaning null), the whole run optionally compressed with the
codec in attribute bits 0-2. A raylog body is one Arrow IPC message of columns.

- :func:`to_raylog` takes what a Produce request carries for a partition (one or more
  Kafka batches) and returns the raylog batches a leader's produce takes.
- :func:`to_kafka` takes what a replica's fetch returns (whole raylog batches) and returns
  the Kafka batches of a Fetch response, as a list of buffers.

Everything a record or batch carries survives both ways: base offset, last offset delta,
partition leader epoch, every record's offset (compaction gaps included), timestamp, key
(null stays null, empty stays empty), value, headers (null header values included),
the timestamp type, producer id, epoch and base sequence, and the transactional and
control flags (a Kafka control batch whose record says COMMIT becomes a raylog batch
with COMMIT_MARKER). What cannot: Kafka's delete-horizon flag (bit 6; raylog does not
keep one; the records' timestamps are read as ``baseTimestamp + delta`` either way),
record attributes (always 0 in v2), a record without headers versus one with an empty
header list (both read back as null headers), and a null header inside a raylog list
(written as an empty key with a null value).

Timestamps: Kafka's base timestamp is its first record's; raylog's is the smallest, with
non-negative deltas. Converting computes every record's timestamp and re-bases it, so
the records' timestamps are equal both ways but a Kafka batch's ``baseTimestamp`` may
change. Under LogAppendTime every record reads as the batch's max timestamp in both
formats, which is kept.

Compression: the Kafka body is inflated (gzip, snappy raw or xerial-framed as the Java
client writes it, LZ4 frame, zstd), bounded while it inflates: a body that would pass
:data:`raylog.common.compression.MAX_UNCOMPRESSED_BYTES` is refused (CorruptRecordError)
after at most a chunk more than that, whatever it asks for. The raylog batch keeps the producer's codec when this
pyarrow build has it (:func:`raylog.common.compression.codec_id`), else it is stored
uncompressed. On the way out a Kafka body is compressed with the raylog batch's codec in
Kafka's framing (gzip level 1, xerial-framed snappy in 32 KiB blocks, LZ4 frames of
independent 64 KiB blocks, zstd level 3).

The per-record work runs in numba-compiled loops (one pass over the varints into offset
and length arrays, Arrow arrays built over gathered buffers; the reverse writes the varint
body in one pass from the Arrow buffers). The first call in a process compiles them, or
loads them from numba's cache; :func:`warm_up` does it on purpose.

Errors, as a Kafka broker gives them: a CRC that does not match, a batch shorter than its
header or running past the data: :class:`~raylog.errors.CorruptRecordError`; a magic
other than 2, records whose lengths or count disagree with the batch, truncated or
overlong varints, an empty batch, invalid UTF-8 in a header key:
:class:`~raylog.errors.InvalidRecordError`; a codec id above 4:
:class:`~raylog.errors.UnsupportedCompressionTypeError`.

Functions here are pure and thread-safe.
"""

from __future__ import annotations

import struct
import sys
import zlib
from typing import Any

import cramjam
import crc32c
import lz4.frame
import numpy as np
import pyarrow as pa
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from raylog.common import compression
from raylog.common import record_batch as rb

from ..errors import CorruptRecordError, InvalidRecordError, UnsupportedCompressionTypeError

__all__ = ["KAFKA_MAGIC", "to_raylog", "to_kafka", "warm_up"]

KAFKA_MAGIC = 2

#: Kafka attribute bits that mean the same in raylog (codec, timestamp type, transactional, control).
_SHARED_BITS = rb.CODEC_MASK | rb.LOG_APPEND_TIME | rb.TRANSACTIONAL | rb.CONTROL
#: Kafka's delete-horizon flag (KIP-534): no raylog counterpart, dropped.
_DELETE_HORIZON = 0x40
_KAFKA_KNOWN_BITS = _SHARED_BITS | _DELETE_HORIZON

_HEADER = rb.HEADER
_HEADER_SIZE = rb.HEADER_SIZE
_CRC_OFFSET = rb.CRC_OFFSET
_CRC_START = rb.ATTRIBUTES_OFFSET
_LOG_OVERHEAD = rb.LOG_OVERHEAD
_CONTROL_KEY = rb.CONTROL_KEY
_INT32_MAX = 2**31 - 1

#: Worst-case bytes a record adds besides its key, value and headers: length (5),
#: attributes (1), timestamp delta (10), offset delta (5), key and value lengths (5 each),
#: header count (5). A header adds two lengths (5 each).
_RECORD_OVERHEAD = 36
_HEADER_OVERHEAD = 10

# ---------------------------------------------------------------------------------------
# Compression in Kafka's framing

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_BE_INT = struct.Struct(">i")
_GZIP_LEVEL = 1
_ZSTD_LEVEL = 3
_LZ4_BLOCK = lz4.frame.BLOCKSIZE_MAX64KB
#: Bytes inflated at a time while the output is checked against the limit.
_INFLATE_CHUNK = 1 << 20


def _inflate(codec: int, data: memoryview) -> Any:
    """A Kafka batch's records section, uncompressed (bytes-like).

    The output is bounded while it is inflated, never after: a few KiB of zeros can ask for
    terabytes, and a batch may inflate to at most :data:`compression.MAX_UNCOMPRESSED_BYTES`.
    """
    limit = compression.MAX_UNCOMPRESSED_BYTES
    try:
        if codec == compression.GZIP:
            inflater = zlib.decompressobj(wbits=47)  # gzip or zlib header, detected
            out = inflater.decompress(data, limit + 1)
            if not inflater.eof and len(out) <= limit:
                raise CorruptRecordError("gzip body ends before its stream does")
        elif codec == compression.SNAPPY:
            out = _snappy_inflate(data, limit)
        elif codec in (compression.LZ4, compression.ZSTD):
            out = _stream_inflate(compression.CODEC_NAMES[codec], data, limit)
        else:
            raise UnsupportedCompressionTypeError(f"unknown compression codec id {codec}")
    except (CorruptRecordError, UnsupportedCompressionTypeError):
        raise
    except Exception as exc:  # zlib.error, cramjam's DecompressionError, pyarrow's OSError
        raise CorruptRecordError(f"batch body does not inflate with {compression.CODEC_NAMES[codec]}: {exc}") from None
    if len(out) > limit:
        raise _past_limit(limit)
    return out


def _past_limit(limit: int) -> CorruptRecordError:
    return CorruptRecordError(f"batch body inflates past the {limit}-byte limit")


def _stream_inflate(name: str, data: memoryview, limit: int) -> bytearray:
    """``data`` (LZ4 frames or zstd frames) inflated :data:`_INFLATE_CHUNK` bytes at a time,
    refused as soon as the output passes ``limit`` (Arrow's streams grow their output buffer
    only when no byte fits, so one read holds at most about a chunk)."""
    stream = pa.CompressedInputStream(pa.BufferReader(data), name)
    out = bytearray()
    while chunk := stream.read(_INFLATE_CHUNK):
        out += chunk
        if len(out) > limit:
            raise _past_limit(limit)
    return out


def _snappy_raw(data: memoryview, budget: int) -> Any:
    """Raw snappy, its declared length (the varint it starts with) checked against ``budget``
    before anything is allocated."""
    if cramjam.snappy.decompress_raw_len(data) > budget:
        raise _past_limit(compression.MAX_UNCOMPRESSED_BYTES)
    return cramjam.snappy.decompress_raw(data)


def _snappy_inflate(data: memoryview, limit: int) -> Any:
    if bytes(data[: len(_XERIAL_MAGIC)]) != _XERIAL_MAGIC:
        return _snappy_raw(data, limit)
    # xerial framing: a 16-byte header, then blocks of ``length i32 | raw snappy``.
    out, pos, end = bytearray(), len(_XERIAL_HEADER), len(data)
    while pos < end:
        if end - pos < 4:
            raise CorruptRecordError("xerial snappy block length is truncated")
        (size,) = _BE_INT.unpack_from(data, pos)
        pos += 4
        if size < 0 or size > end - pos:
            raise CorruptRecordError(f"xerial snappy block of {size} bytes runs past the body")
        out += _snappy_raw(data[pos : pos + size], limit - len(out))
        pos += size
    return out


def _deflate(codec: int, data: Any) -> list[Any]:
    """``data`` compressed as a Kafka records section, as buffers."""
    if codec == compression.GZIP:
        deflater = zlib.compressobj(_GZIP_LEVEL, zlib.DEFLATED, 31)
        return [deflater.compress(data), deflater.flush()]
    if codec == compression.SNAPPY:
        view = memoryview(data).cast("B")
        out: list[Any] = [_XERIAL_HEADER]
        for pos in range(0, len(view), _XERIAL_BLOCK):
            block = cramjam.snappy.compress_raw(view[pos : pos + _XERIAL_BLOCK])
            out += [_BE_INT.pack(len(block)), memoryview(block)]  # (the codec takes memoryviews)
        return out
    if codec == compression.LZ4:
        return [
            lz4.frame.compress(
                data, block_size=_LZ4_BLOCK, block_linked=False, content_checksum=False, store_size=False
            )
        ]
    if codec == compression.ZSTD:
        return [memoryview(cramjam.zstd.compress(data, level=_ZSTD_LEVEL))]
    raise UnsupportedCompressionTypeError(f"unknown compression codec id {codec}")


# ---------------------------------------------------------------------------------------
# The compiled loops. Errors come back as a code and the byte position (see _PARSE_ERRORS).

_TRUNCATED, _VARINT_TOO_LONG, _BAD_LENGTH, _SIZE_MISMATCH, _TRAILING, _BAD_HEADER_COUNT, _BAD_TIMESTAMP = range(1, 8)
_PARSE_ERRORS = {
    _TRUNCATED: "a record is truncated",
    _VARINT_TOO_LONG: "a varint is too long",
    _BAD_LENGTH: "a record has an invalid length",
    _SIZE_MISMATCH: "a record's fields do not fill its declared size",
    _TRAILING: "bytes remain after the batch's declared record count",
    _BAD_HEADER_COUNT: "a record has an invalid header count",
    _BAD_TIMESTAMP: "a record's timestamp overflows",
}


@intrinsic
def _copy_bytes(typingctx, dst, dst_at, src, src_at, count):  # pragma: no cover - compiled
    """``dst[dst_at:dst_at + count] = src[src_at:src_at + count]`` as one memcpy (numba's
    slice assignment copies byte by byte: ten times slower on 100-byte values)."""
    signature = types.void(dst, types.intp, src, types.intp, types.intp)

    def codegen(context, builder, sig, args):
        dst_array = context.make_array(sig.args[0])(context, builder, args[0])
        src_array = context.make_array(sig.args[2])(context, builder, args[2])
        to = builder.gep(dst_array.data, [args[1]])
        source = builder.gep(src_array.data, [args[3]])
        cgutils.raw_memcpy(builder, to, source, args[4], 1)

    return signature, codegen


@njit(cache=True, nogil=True, inline="always")
def _read_varint(buf, pos, end, max_bytes):  # pragma: no cover - compiled
    """(value, next position) of the zig-zag varint at ``pos``; position -1: truncated,
    -2: longer than ``max_bytes``."""
    result = np.uint64(0)
    shift = np.uint64(0)
    for _ in range(max_bytes):
        if pos >= end:
            return np.int64(0), -1
        byte = np.uint64(buf[pos])
        pos += 1
        result |= (byte & np.uint64(0x7F)) << shift
        if byte < np.uint64(0x80):
            return np.int64(result >> np.uint64(1)) ^ -np.int64(result & np.uint64(1)), pos
        shift += np.uint64(7)
    return np.int64(0), -2


@njit(cache=True, nogil=True, inline="always")
def _read_length(buf, pos, end, least):  # pragma: no cover - compiled
    """(length, next position, error code) of the length varint at ``pos``: at least
    ``least`` and no more than the bytes left before ``end``."""
    size, pos = _read_varint(buf, pos, end, 5)
    if pos < 0:
        return size, pos, _TRUNCATED if pos == -1 else _VARINT_TOO_LONG
    if size < least or size > end - pos:
        return size, pos, _BAD_LENGTH
    return size, pos, 0


@njit(cache=True, nogil=True)
def _parse_records(buf, pos, end, count, base_ts):  # pragma: no cover - compiled
    """One pass over ``count`` Kafka records in ``buf[pos:end]``.

    Returns (error code, error position, timestamps, offset deltas, key positions, key
    lengths, value positions, value lengths, header-section positions, header counts,
    total headers). Lengths are -1 for null."""
    ts = np.empty(count, np.int64)
    offsets = np.empty(count, np.int64)
    kpos = np.empty(count, np.int64)
    klen = np.empty(count, np.int64)
    vpos = np.empty(count, np.int64)
    vlen = np.empty(count, np.int64)
    hpos = np.empty(count, np.int64)
    hcount = np.empty(count, np.int64)
    total = 0
    err = 0
    start = pos
    for i in range(count):
        start = pos
        length, pos, err = _read_length(buf, pos, end, 1)
        if err:
            break
        rend = pos + length
        pos += 1  # attributes: unused in v2
        delta, pos = _read_varint(buf, pos, rend, 10)
        if pos >= 0:
            ts[i] = t = base_ts + delta
            if (delta > 0 and t < base_ts) or (delta < 0 and t > base_ts):
                err = _BAD_TIMESTAMP
                break
            offsets[i], pos = _read_varint(buf, pos, rend, 5)
        if pos < 0:
            err = _TRUNCATED if pos == -1 else _VARINT_TOO_LONG
            break
        klen[i], kpos[i], err = _read_length(buf, pos, rend, -1)
        if err:
            break
        vlen[i], vpos[i], err = _read_length(buf, kpos[i] + max(klen[i], 0), rend, -1)
        if err:
            break
        hcount[i], hpos[i], err = _read_length(buf, vpos[i] + max(vlen[i], 0), rend, 0)
        if err:
            err = _BAD_HEADER_COUNT if err == _BAD_LENGTH else err
            break
        pos = hpos[i]
        for _ in range(hcount[i]):
            size, pos, err = _read_length(buf, pos, rend, 0)
            if err:
                break
            size, pos, err = _read_length(buf, pos + size, rend, -1)
            if err:
                break
            pos += max(size, 0)
        if err:
            break
        total += hcount[i]
        if pos != rend:
            err = _SIZE_MISMATCH
            break
    if err:
        pos = start
    elif pos != end:
        err = _TRAILING
    return err, pos, ts, offsets, kpos, klen, vpos, vlen, hpos, hcount, total


@njit(cache=True, nogil=True)
def _parse_headers(buf, hpos, hcount, total):  # pragma: no cover - compiled
    """Positions and lengths of every header key and value (already checked by
    _parse_records), and the list offsets per record."""
    list_offsets = np.empty(hpos.size + 1, np.int32)
    kpos = np.empty(total, np.int64)
    klen = np.empty(total, np.int64)
    vpos = np.empty(total, np.int64)
    vlen = np.empty(total, np.int64)
    j = 0
    list_offsets[0] = 0
    for i in range(hpos.size):
        pos = hpos[i]
        end = buf.size
        for _ in range(hcount[i]):
            size, pos = _read_varint(buf, pos, end, 5)
            kpos[j] = pos
            klen[j] = size
            pos += size
            size, pos = _read_varint(buf, pos, end, 5)
            vpos[j] = pos
            vlen[j] = size
            if size > 0:
                pos += size
            j += 1
        list_offsets[i + 1] = j
    return list_offsets, kpos, klen, vpos, vlen


@njit(cache=True, nogil=True)
def _gather(buf, pos, lengths):  # pragma: no cover - compiled
    """Arrow binary buffers (validity bitmap, int32 offsets, data) of the slices
    ``buf[pos[i]:pos[i] + lengths[i]]`` (length -1: null), and the null count."""
    n = pos.size
    offsets = np.empty(n + 1, np.int32)
    validity = np.zeros((n + 7) // 8, np.uint8)
    total = 0
    nulls = 0
    offsets[0] = 0
    for i in range(n):
        size = lengths[i]
        if size < 0:
            nulls += 1
        else:
            validity[i >> 3] |= np.uint8(1 << (i & 7))
            total += size
        offsets[i + 1] = total
    data = np.empty(total, np.uint8)
    at = 0
    for i in range(n):
        size = lengths[i]
        if size > 0:
            _copy_bytes(data, at, buf, pos[i], size)
            at += size
    return validity, offsets, data, nulls


@njit(cache=True, nogil=True, inline="always")
def _varint_size(value):  # pragma: no cover - compiled
    v = (np.uint64(value) << np.uint64(1)) ^ np.uint64(value >> 63)
    size = 1
    while v >= np.uint64(0x80):
        v >>= np.uint64(7)
        size += 1
    return size


@njit(cache=True, nogil=True, inline="always")
def _write_varint(out, pos, value):  # pragma: no cover - compiled
    v = (np.uint64(value) << np.uint64(1)) ^ np.uint64(value >> 63)
    while v >= np.uint64(0x80):
        out[pos] = np.uint8((v & np.uint64(0x7F)) | np.uint64(0x80))
        v >>= np.uint64(7)
        pos += 1
    out[pos] = np.uint8(v)
    return pos + 1


@njit(cache=True, nogil=True, inline="always")
def _is_valid(bitmap, bit):  # pragma: no cover - compiled
    return bitmap.size == 0 or (bitmap[bit >> 3] >> (bit & 7)) & 1 == 1


@njit(cache=True, nogil=True, inline="always")
def _slice_size(valid, offsets, i):  # pragma: no cover - compiled
    return np.int64(offsets[i + 1]) - np.int64(offsets[i]) if valid else np.int64(-1)


@njit(cache=True, nogil=True, inline="always")
def _write_bytes(out, pos, data, offsets, i, size):  # pragma: no cover - compiled
    pos = _write_varint(out, pos, size)
    if size > 0:
        _copy_bytes(out, pos, data, offsets[i], size)
        pos += size
    return pos


@njit(cache=True, nogil=True)
def _encode_records(
    out, pos, ts, offs,
    kvalid, kbit, koffsets, kdata,
    vvalid, vbit, voffsets, vdata,
    lvalid, lbit, loffsets,
    hkvalid, hkbit, hkoffsets, hkdata,
    hvvalid, hvbit, hvoffsets, hvdata,
):  # pragma: no cover - compiled  # fmt: skip
    """Write the Kafka records of one batch into ``out`` from ``pos``; returns the end.

    Keys, values, header keys and values come as (validity bitmap or empty, its bit
    offset, int32 offsets from the array's first slot, data); ``koffsets`` empty means no
    key column, ``loffsets`` empty no headers. ``out`` must hold the worst case."""
    n = ts.size
    has_keys = koffsets.size > 0
    has_headers = loffsets.size > 0
    for i in range(n):
        ksize = _slice_size(_is_valid(kvalid, kbit + i), koffsets, i) if has_keys else np.int64(-1)
        vsize = _slice_size(_is_valid(vvalid, vbit + i), voffsets, i)
        first = 0
        nheaders = 0
        if has_headers and _is_valid(lvalid, lbit + i):
            first = loffsets[i]
            nheaders = loffsets[i + 1] - first
        size = 1 + _varint_size(ts[i]) + _varint_size(offs[i])
        size += _varint_size(ksize) + max(ksize, 0) + _varint_size(vsize) + max(vsize, 0)
        size += _varint_size(nheaders)
        for j in range(first, first + nheaders):
            hk = _slice_size(_is_valid(hkvalid, hkbit + j), hkoffsets, j)
            hk = max(hk, 0)  # a null key (a null header): written empty
            hv = _slice_size(_is_valid(hvvalid, hvbit + j), hvoffsets, j)
            size += _varint_size(hk) + hk + _varint_size(hv) + max(hv, 0)
        pos = _write_varint(out, pos, size)
        out[pos] = 0  # record attributes
        pos = _write_varint(out, pos + 1, ts[i])
        pos = _write_varint(out, pos, offs[i])
        pos = _write_bytes(out, pos, kdata, koffsets, i, ksize)
        pos = _write_bytes(out, pos, vdata, voffsets, i, vsize)
        pos = _write_varint(out, pos, nheaders)
        for j in range(first, first + nheaders):
            hk = max(_slice_size(_is_valid(hkvalid, hkbit + j), hkoffsets, j), 0)
            pos = _write_bytes(out, pos, hkdata, hkoffsets, j, hk)
            hv = _slice_size(_is_valid(hvvalid, hvbit + j), hvoffsets, j)
            pos = _write_bytes(out, pos, hvdata, hvoffsets, j, hv)
    return pos


# ---------------------------------------------------------------------------------------
# Kafka -> raylog


def to_raylog(kafka_bytes: Any) -> bytes:
    """Convert one or more Kafka v2 record batches into raylog batches.

    Args:
        kafka_bytes: bytes-like holding whole Kafka batches (a Produce request's records
            for one partition).

    Returns:
        The raylog batches, in order, one per Kafka batch: same base offset, partition
        leader epoch, last offset delta, record count, producer fields, timestamp type,
        transactional and control flags; each record's offset, timestamp, key, value and
        headers. The codec is the Kafka batch's when raylog has it, else none.

    Raises:
        CorruptRecordError: a CRC mismatch, a truncated batch, a body that does not inflate.
        InvalidRecordError: no batch, a magic other than 2, records that disagree with
            their batch (count, lengths, offsets, varints), an empty batch.
        UnsupportedCompressionTypeError: a codec id Kafka does not define.
    """
    view = memoryview(kafka_bytes).cast("B")
    end = len(view)
    if end == 0:
        raise InvalidRecordError("no record batch in the data")
    out = []
    pos = 0
    while pos < end:
        size = _kafka_batch_size(view, pos)
        out.append(_batch_to_raylog(view[pos : pos + size], pos))
        pos += size
    return out[0] if len(out) == 1 else b"".join(out)


def _kafka_batch_size(view: memoryview, pos: int) -> int:
    if len(view) - pos < _HEADER_SIZE:
        raise CorruptRecordError(f"truncated record batch header at byte {pos}")
    (length,) = _BE_INT.unpack_from(view, pos + rb.LENGTH_OFFSET)
    size = _LOG_OVERHEAD + length
    if size < _HEADER_SIZE:
        raise CorruptRecordError(f"record batch at byte {pos} is {size} bytes, shorter than its header")
    if pos + size > len(view):
        raise CorruptRecordError(f"record batch at byte {pos} of {size} bytes runs past the end of the data")
    return size


def _batch_to_raylog(batch: memoryview, at: int) -> bytes:
    header = rb.BatchHeader._make(_HEADER.unpack_from(batch))
    if header.magic != KAFKA_MAGIC:
        raise InvalidRecordError(f"record batch at byte {at} has magic {header.magic}; only magic 2 is supported")
    if crc32c.crc32c(batch[_CRC_START:]) != header.crc:
        raise CorruptRecordError(f"record batch at byte {at} fails its CRC check")
    attributes = header.attributes
    if attributes & ~_KAFKA_KNOWN_BITS:
        raise InvalidRecordError(f"record batch at byte {at} has unknown attribute bits {attributes:#x}")
    count = header.record_count
    if count < 1:
        raise InvalidRecordError(f"record batch at byte {at} holds {count} records")
    if header.last_offset_delta < count - 1:
        raise InvalidRecordError(
            f"record batch at byte {at} claims {count} records and last offset delta {header.last_offset_delta}"
        )
    codec = attributes & rb.CODEC_MASK
    body = batch[_HEADER_SIZE:]
    if codec != compression.NONE:
        body = _inflate(codec, body)
    buf = _readonly(np.frombuffer(body, dtype=np.uint8))
    err, err_pos, ts, offs, kpos, klen, vpos, vlen, hpos, hcount, total = _parse_records(
        buf, 0, buf.size, count, header.base_timestamp
    )
    if err:
        raise InvalidRecordError(f"record batch at byte {at}: {_PARSE_ERRORS[err]} (body byte {err_pos})")
    if offs[0] < 0 or offs[-1] > header.last_offset_delta or (count > 1 and np.any(offs[1:] <= offs[:-1])):
        raise InvalidRecordError(f"record batch at byte {at} has out-of-order record offsets")

    stored_codec = codec if codec == compression.NONE or _raylog_has(codec) else compression.NONE
    flags = attributes & (rb.LOG_APPEND_TIME | rb.TRANSACTIONAL | rb.CONTROL)
    if attributes & rb.CONTROL:
        flags |= _control_type(buf, count, kpos, klen, at)
    columns = {}
    if (klen >= 0).any():
        columns["key"] = _binary(buf, kpos, klen)
        flags |= rb.HAS_KEY
    columns["value"] = _binary(buf, vpos, vlen)
    base_ts, max_ts = int(ts.min()), int(ts.max())
    if max_ts != base_ts:
        if max_ts - base_ts > _INT32_MAX:
            flags |= rb.HAS_TIMESTAMP_DELTA | rb.WIDE_TIMESTAMP_DELTA
            columns["timestamp_delta"] = pa.array(ts - base_ts, type=pa.int64())
        else:
            flags |= rb.HAS_TIMESTAMP_DELTA
            columns["timestamp_delta"] = pa.array((ts - base_ts).astype(np.int32), type=pa.int32())
    if attributes & rb.LOG_APPEND_TIME:
        max_ts = header.max_timestamp
    if header.last_offset_delta != count - 1 or offs[-1] != count - 1:
        flags |= rb.HAS_OFFSET_DELTA
        columns["offset_delta"] = pa.array(offs.astype(np.int32), type=pa.int32())
    if total:
        columns["headers"] = _headers(buf, hpos, hcount, total, at)
        flags |= rb.HAS_HEADERS
    body_batch = pa.RecordBatch.from_arrays(list(columns.values()), schema=rb.body_schema(flags))
    raylog_body: Any = body_batch.serialize()
    if stored_codec != compression.NONE:
        raylog_body = compression.compress(stored_codec, raylog_body)
    return _assemble(
        raylog_body,
        rb.MAGIC,
        header._replace(attributes=flags | stored_codec, base_timestamp=base_ts, max_timestamp=max_ts),
    )


def _raylog_has(codec: int) -> bool:
    try:
        compression.codec_id(compression.CODEC_NAMES[codec])
    except Exception:  # InvalidConfigError: this pyarrow build lacks it
        return False
    return True


def _control_type(buf: np.ndarray, count: int, kpos: np.ndarray, klen: np.ndarray, at: int) -> int:
    """COMMIT_MARKER for a control record that commits, 0 for one that aborts."""
    if count != 1 or klen[0] < _CONTROL_KEY.size:
        raise InvalidRecordError(f"control batch at byte {at} does not hold one control record")
    _version, kind = _CONTROL_KEY.unpack_from(buf, kpos[0])
    if kind not in (0, 1):
        raise InvalidRecordError(f"control batch at byte {at} has control record type {kind}")
    return rb.COMMIT_MARKER if kind == 1 else 0


def _binary(buf: np.ndarray, pos: np.ndarray, lengths: np.ndarray, string: bool = False) -> pa.Array:
    validity, offsets, data, nulls = _gather(buf, pos, lengths)
    return pa.Array.from_buffers(
        pa.string() if string else pa.binary(),
        len(pos),
        [pa.py_buffer(validity) if nulls else None, pa.py_buffer(offsets), pa.py_buffer(data)],
        null_count=nulls,
    )


def _headers(buf: np.ndarray, hpos: np.ndarray, hcount: np.ndarray, total: int, at: int) -> pa.Array:
    list_offsets, kpos, klen, vpos, vlen = _parse_headers(buf, hpos, hcount, total)
    keys = _binary(buf, kpos, klen, string=True)
    try:
        keys.validate(full=True)
    except pa.ArrowInvalid:
        raise InvalidRecordError(f"record batch at byte {at} has a header key that is not UTF-8") from None
    values = _binary(buf, vpos, vlen)
    struct_type = rb.HEADERS_TYPE.value_type
    pairs = pa.Array.from_buffers(struct_type, total, [None], null_count=0, children=[keys, values])
    # A record with no headers reads as null headers, as a raylog producer writes it.
    has = hcount > 0
    validity = np.packbits(has, bitorder="little")
    nulls = int(hcount.size - np.count_nonzero(has))
    return pa.Array.from_buffers(
        rb.HEADERS_TYPE,
        hcount.size,
        [pa.py_buffer(validity) if nulls else None, pa.py_buffer(list_offsets)],
        null_count=nulls,
        children=[pairs],
    )


def _assemble(body: Any, magic: int, header: rb.BatchHeader) -> np.ndarray:
    """One buffer: the batch of ``header``'s fields (length, magic and CRC computed) and ``body``."""
    out = np.empty(_HEADER_SIZE + len(body), dtype=np.uint8)
    out[_HEADER_SIZE:] = np.frombuffer(body, dtype=np.uint8)
    _pack_header(out, magic, header, [out[_HEADER_SIZE:]])
    return out


def _pack_header(out: Any, magic: int, header: rb.BatchHeader, body: list[Any]) -> None:
    """Write the header of a batch whose body is the buffers ``body`` into ``out[:61]``."""
    _HEADER.pack_into(
        out,
        0,
        header.base_offset,
        _HEADER_SIZE - _LOG_OVERHEAD + sum(memoryview(part).nbytes for part in body),
        header.leader_epoch,
        magic,
        0,
        header.attributes,
        header.last_offset_delta,
        header.base_timestamp,
        header.max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        header.record_count,
    )
    crc = crc32c.crc32c(memoryview(out)[_CRC_START:_HEADER_SIZE])
    for part in body:
        crc = crc32c.crc32c(part, crc)
    struct.pack_into(">I", out, _CRC_OFFSET, crc)


# ---------------------------------------------------------------------------------------
# raylog -> Kafka


def _readonly(array: np.ndarray) -> np.ndarray:
    """The compiled loops take read-only arrays only (one compiled variant, not two)."""
    array.flags.writeable = False
    return array


_NO_BYTES = _readonly(np.empty(0, np.uint8))
_NO_OFFSETS = _readonly(np.empty(0, np.int32))


def to_kafka(raylog_bytes: Any) -> list[Any]:
    """Convert raylog batches (as a replica's fetch returns them) into Kafka v2 batches.

    Args:
        raylog_bytes: bytes-like holding zero or more whole raylog batches (data,
            control, compacted, any stored codec).

    Returns:
        Buffers whose concatenation is the Kafka batches, one per raylog batch, with the
        same base offset, last offset delta, partition leader epoch, timestamps, producer
        fields, flags and records (each at its own offset), compressed with the raylog
        batch's codec, each with its CRC computed.

    Raises:
        CorruptRecordError: a raylog batch fails its CRC or body checks.
    """
    return to_kafka_within(raylog_bytes, sys.maxsize)[0]


def to_kafka_within(raylog_bytes: Any, max_bytes: int, at_least_one: bool = True) -> tuple[list[Any], int | None, int]:
    """:func:`to_kafka` of the leading batches whose Kafka form fits in ``max_bytes`` together,
    and with ``at_least_one`` the first batch whatever its size (a Fetch answer's bound, as
    Kafka keeps it since KIP-74: the first batch of the first partition with records always goes).

    Returns:
        The buffers, the offset after the last batch converted (None when none fits), and
        their size in bytes.

    Raises:
        CorruptRecordError: as :func:`to_kafka`.
    """
    view = memoryview(raylog_bytes).cast("B")
    out: list[Any] = []
    size, next_offset = 0, None
    for pos, header in rb.iter_headers(view):
        rb.check_crc(view, pos, header)  # else a disk error would get a fresh, valid Kafka CRC
        batch = _batch_to_kafka(header, rb.decode_body(view, pos, header))
        batch_size = sum(memoryview(part).nbytes for part in batch)
        if size + batch_size > max_bytes and (out or not at_least_one):
            break
        out += batch
        size += batch_size
        next_offset = header.next_offset
    return out, next_offset, size


def _binary_parts(array: pa.Array) -> tuple[np.ndarray, int, np.ndarray, np.ndarray]:
    """(validity bitmap or empty, its bit offset, offsets of the array's slots, data) of a
    binary or string array."""
    validity, offsets, data = array.buffers()[:3]
    start = array.offset
    bits = _readonly(np.frombuffer(validity, np.uint8)) if array.null_count else _NO_BYTES
    slots = _readonly(np.frombuffer(offsets, np.int32)[start : start + len(array) + 1])
    return bits, start, slots, _NO_BYTES if data is None else _readonly(np.frombuffer(data, np.uint8))


def _batch_to_kafka(header: rb.BatchHeader, body: pa.RecordBatch) -> list[Any]:
    attributes = header.attributes
    count = header.record_count
    if attributes & rb.HAS_TIMESTAMP_DELTA:
        ts = body.column("timestamp_delta").to_numpy().astype(np.int64)
    else:
        ts = np.zeros(count, np.int64)
    offs = rb.offset_deltas(header, body)
    values = _binary_parts(body.column("value"))
    bound = _HEADER_SIZE + count * _RECORD_OVERHEAD + int(values[2][-1]) - int(values[2][0])
    if attributes & rb.HAS_KEY:
        keys = _binary_parts(body.column("key"))
        bound += int(keys[2][-1]) - int(keys[2][0])
    else:
        keys = (_NO_BYTES, 0, _NO_OFFSETS, _NO_BYTES)
    if attributes & rb.HAS_HEADERS:
        headers = body.column("headers")
        list_bits = _readonly(np.frombuffer(headers.buffers()[0], np.uint8)) if headers.null_count else _NO_BYTES
        list_offsets = _readonly(np.frombuffer(headers.buffers()[1], np.int32)[headers.offset :][: count + 1])
        header_keys, header_values = (_binary_parts(child) for child in headers.values.flatten())
        bound += len(headers.values) * _HEADER_OVERHEAD
        bound += int(header_keys[2][-1]) - int(header_keys[2][0]) + int(header_values[2][-1]) - int(header_values[2][0])
    else:
        list_bits, list_offsets = _NO_BYTES, _NO_OFFSETS
        header_keys = header_values = (_NO_BYTES, 0, _NO_OFFSETS, _NO_BYTES)
    out = np.empty(bound, np.uint8)
    end = _encode_records(
        out, _HEADER_SIZE, ts, offs, *keys, *values, list_bits, headers.offset if list_bits.size else 0,
        list_offsets, *header_keys, *header_values,
    )  # fmt: skip
    kafka_header = header._replace(attributes=attributes & _SHARED_BITS)
    codec = attributes & rb.CODEC_MASK
    if codec == compression.NONE:
        _pack_header(out, KAFKA_MAGIC, kafka_header, [out[_HEADER_SIZE:end]])
        return [out[:end]]
    parts = _deflate(codec, out[_HEADER_SIZE:end])
    head = np.empty(_HEADER_SIZE, np.uint8)
    _pack_header(head, KAFKA_MAGIC, kafka_header, parts)
    return [head, *parts]


def warm_up() -> None:
    """Compile (or load from numba's cache) the conversion loops now, not in the first
    request: a listener calls it when it starts."""
    batch = rb.build([b"v", None], keys=[b"k", None], timestamps_ms=[1, 2], headers=[[("h", b"x")], None])
    to_raylog(b"".join(bytes(part) for part in to_kafka(batch)))
