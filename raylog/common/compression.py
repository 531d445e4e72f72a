"""Batch body codecs, numbered as Kafka numbers them (attributes bits 0-2).

A compressed body is stored as ``uncompressed_size u32 | codec bytes``: the size lets the
reader allocate once and bounds what a hostile header can make it allocate. lz4 uses the
``lz4`` block format (fast, no framing needed once the size is known); gzip, snappy and
zstd use pyarrow's codecs, where the pyarrow build has them.
"""

from __future__ import annotations

import functools
import struct

import lz4.block
import pyarrow as pa

from ..errors import CorruptRecordError, InvalidConfigError

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODEC_IDS = {"none": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
CODEC_NAMES = {v: k for k, v in CODEC_IDS.items()}

#: The largest body a batch may inflate to. Batches are bounded by max.message.bytes
#: (8 MiB by default) when compressed; this bounds the allocation a corrupt or hostile
#: size field can cause while still allowing 32x compression of the largest batch.
MAX_UNCOMPRESSED_BYTES = 256 * 1024 * 1024

_SIZE = struct.Struct(">I")
#: gzip's level: Kafka's default (compression.gzip.level -1, zlib's 6). pyarrow's own default,
#: 9, took 52 ms to compress a 1.2 MB batch here against 21 ms at 6 (8 ms at 1).
GZIP_LEVEL = 6

#: Worst-case growth of incompressible input, per codec, as a fraction of the input plus a
#: constant (lz4's LZ4_compressBound is n/255 + 16, zstd's ZSTD_compressBound n/256 + 64,
#: deflate's stored blocks 5 bytes per 16 KiB plus gzip's 18-byte frame, snappy's
#: MaxCompressedLength n/6 + 32); the size field comes on top.
_GROWTH = {NONE: (0, 0), LZ4: (1 / 255, 16), ZSTD: (1 / 256, 64), GZIP: (1 / 3000, 64), SNAPPY: (1 / 6, 32)}


def max_compressed_bytes(cid: int, size: int) -> int:
    """An upper bound on the stored body of ``size`` bytes compressed with codec ``cid``."""
    if cid == NONE:
        return size
    ratio, constant = _GROWTH[cid]
    return _SIZE.size + size + int(size * ratio) + 1 + constant


def max_input_bytes(cid: int, stored: int) -> int:
    """The largest body whose :func:`max_compressed_bytes` is at most ``stored`` (0 if none)."""
    if cid == NONE:
        return max(0, stored)
    ratio, constant = _GROWTH[cid]
    size = max(0, int((stored - _SIZE.size - 1 - constant) / (1 + ratio)))
    while size and max_compressed_bytes(cid, size) > stored:  # (float rounding, either way)
        size -= 1
    while max_compressed_bytes(cid, size + 1) <= stored:
        size += 1
    return size


def codec_id(name: str | None) -> int:
    """The codec id for a user-facing name (``None`` means no compression).

    Raises:
        InvalidConfigError: the name is unknown or this pyarrow build lacks the codec.
    """
    key = "none" if name is None else str(name).lower()
    if key not in CODEC_IDS:
        raise InvalidConfigError(f"unknown compression {name!r}; known: {', '.join(CODEC_IDS)}")
    cid = CODEC_IDS[key]
    if cid in (GZIP, SNAPPY, ZSTD) and not pa.Codec.is_available(key):
        raise InvalidConfigError(f"compression {key!r} is not available in this pyarrow build")
    return cid


def compress(cid: int, body: pa.Buffer | bytes) -> bytes:
    """Compress a body with codec ``cid`` (not NONE) into ``size | codec bytes``."""
    size = _SIZE.pack(len(body))
    if cid == LZ4:
        return size + lz4.block.compress(body, store_size=False)
    return size + _codec(cid).compress(body, asbytes=True)


@functools.cache
def _codec(cid: int) -> pa.Codec:
    if cid == GZIP:
        return pa.Codec("gzip", compression_level=GZIP_LEVEL)
    return pa.Codec(CODEC_NAMES[cid])


def decompress(cid: int, data: memoryview) -> pa.Buffer:
    """Inverse of :func:`compress`.

    Raises:
        CorruptRecordError: unknown codec, a size out of bounds, or bytes that do not inflate.
    """
    if cid not in CODEC_NAMES or cid == NONE:
        raise CorruptRecordError(f"unknown compression codec id {cid}")
    if len(data) < _SIZE.size:
        raise CorruptRecordError("compressed body shorter than its size field")
    (size,) = _SIZE.unpack_from(data)
    if size > MAX_UNCOMPRESSED_BYTES:
        raise CorruptRecordError(f"compressed body claims {size} bytes, above the {MAX_UNCOMPRESSED_BYTES} limit")
    payload = data[_SIZE.size :]
    try:
        if cid == LZ4:
            out = pa.py_buffer(lz4.block.decompress(payload, uncompressed_size=size))
        else:
            name = CODEC_NAMES[cid]
            if not pa.Codec.is_available(name):
                raise CorruptRecordError(f"batch uses codec {name!r}, not available in this pyarrow build")
            out = pa.decompress(payload, decompressed_size=size, codec=name)
    except CorruptRecordError:
        raise
    except Exception as exc:  # lz4.block.LZ4BlockError, pyarrow.ArrowException, OSError
        raise CorruptRecordError(f"body does not inflate with {CODEC_NAMES[cid]}: {exc}") from None
    if out.size != size:
        raise CorruptRecordError(f"{CODEC_NAMES[cid]} body inflated to the wrong size")
    return out
