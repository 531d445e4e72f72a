"""The protocol's primitive types: fixed-width big-endian integers, zigzag and unsigned
varints, UUIDs, strings, byte strings, arrays and tagged-field sections, each in its classic
(int16/int32 length) and compact (unsigned varint length + 1) form.

Readers take a ``memoryview`` of format ``B`` and a position and return ``(value, new_position)``;
they raise :class:`Truncated` when the bytes end early and :class:`Malformed` when a length or
varint is out of range. Writers append to a ``bytearray``. The compiled message readers and
writers (:mod:`raylog.kafka.codec.compiler`) use these for everything that is not a run of
fixed-width fields, and :mod:`raylog.kafka.records` uses the varints for record batches.
"""

from __future__ import annotations

import struct
import uuid

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UINT16 = struct.Struct(">H")
UINT32 = struct.Struct(">I")
FLOAT64 = struct.Struct(">d")

ZERO_UUID = uuid.UUID(int=0)

#: struct format character and width of each fixed-width type.
FIXED = {
    "int8": ("b", 1),
    "int16": ("h", 2),
    "int32": ("i", 4),
    "int64": ("q", 8),
    "uint16": ("H", 2),
    "uint32": ("I", 4),
    "bool": ("?", 1),
    "float64": ("d", 8),
    "uuid": ("16s", 16),
}

#: The one-byte unsigned varints, as bytes, indexed by value.
UVARINT1 = tuple(bytes((i,)) for i in range(128))


class Malformed(ValueError):
    """Bytes that do not follow the protocol (a bad length, an overlong varint, bad UTF-8)."""


class Truncated(Malformed):
    """The bytes end before the value does."""


# --- varints -------------------------------------------------------------------------


def read_uvarint(b, p: int) -> tuple[int, int]:
    """An unsigned varint (at most 5 bytes: 32 bits) at ``b[p]``."""
    return _read_unsigned(b, p, 28, "unsigned varint longer than 5 bytes")


def read_uvarlong(b, p: int) -> tuple[int, int]:
    """An unsigned varint of at most 10 bytes (64 bits) at ``b[p]``."""
    return _read_unsigned(b, p, 63, "varlong longer than 10 bytes")


def _read_unsigned(b, p: int, max_shift: int, too_long: str) -> tuple[int, int]:
    try:
        x = b[p]
        if x < 0x80:
            return x, p + 1
        value = x & 0x7F
        shift = 7
        while True:
            p += 1
            x = b[p]
            value |= (x & 0x7F) << shift
            if x < 0x80:
                return value, p + 1
            shift += 7
            if shift > max_shift:
                raise Malformed(too_long)
    except IndexError:
        raise Truncated("bytes end inside a varint") from None


def read_varint(b, p: int) -> tuple[int, int]:
    """A zigzag-encoded signed 32-bit varint."""
    u, p = read_uvarint(b, p)
    return (u >> 1) ^ -(u & 1), p


def read_varlong(b, p: int) -> tuple[int, int]:
    """A zigzag-encoded signed 64-bit varint."""
    u, p = read_uvarlong(b, p)
    return (u >> 1) ^ -(u & 1), p


def write_uvarint(o: bytearray, value: int) -> None:
    """Append ``value`` (0 <= value < 2**64) as an unsigned varint."""
    if value < 0x80:
        if value < 0:
            raise ValueError(f"unsigned varint cannot hold {value}")
        o.append(value)
        return
    while value >= 0x80:
        o.append((value & 0x7F) | 0x80)
        value >>= 7
    o.append(value)


def uvarint_bytes(value: int) -> bytes:
    """``value`` as an unsigned varint."""
    if 0 <= value < 0x80:
        return UVARINT1[value]
    o = bytearray()
    write_uvarint(o, value)
    return bytes(o)


def write_varint(o: bytearray, value: int) -> None:
    """Append a signed 32-bit value, zigzag-encoded."""
    if not -0x80000000 <= value <= 0x7FFFFFFF:
        raise ValueError(f"varint out of int32 range: {value}")
    write_uvarint(o, ((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def write_varlong(o: bytearray, value: int) -> None:
    """Append a signed 64-bit value, zigzag-encoded."""
    if not -0x8000000000000000 <= value <= 0x7FFFFFFFFFFFFFFF:
        raise ValueError(f"varlong out of int64 range: {value}")
    write_uvarint(o, ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def uvarint_size(value: int) -> int:
    """Bytes an unsigned varint of ``value`` takes."""
    size = 1
    while value >= 0x80:
        value >>= 7
        size += 1
    return size


# --- lengths, strings, bytes -----------------------------------------------------------


def _span(b, p: int, length: int) -> int:
    end = p + length
    if end > len(b):
        raise Truncated(f"a {length}-byte value runs past the end of the frame")
    return end


def read_length(b, p: int, compact: bool) -> tuple[int, int]:
    """A length or array count: int32 (or int16 for classic strings, see :func:`read_string`),
    or an unsigned varint minus one when compact; -1 means null."""
    if compact:
        u, p = read_uvarint(b, p)
        return u - 1, p
    if p + 4 > len(b):
        raise Truncated("bytes end inside a length")
    return INT32.unpack_from(b, p)[0], p + 4


def read_string(b, p: int, compact: bool, nullable: bool) -> tuple[str | None, int]:
    """A string (int16 length, or compact); None for a null string when ``nullable``."""
    if compact:
        length, p = read_uvarint(b, p)
        length -= 1
    else:
        if p + 2 > len(b):
            raise Truncated("bytes end inside a string length")
        length = INT16.unpack_from(b, p)[0]
        p += 2
    if length < 0:
        if length == -1 and nullable:
            return None, p
        raise Malformed(f"string length {length}")
    end = _span(b, p, length)
    try:
        return str(b[p:end], "utf-8"), end
    except UnicodeDecodeError as exc:
        raise Malformed(f"string is not UTF-8: {exc}") from None


def read_bytes(b, p: int, compact: bool, nullable: bool) -> tuple[bytes | None, int]:
    """A byte string (int32 length, or compact), copied; None for null when ``nullable``."""
    length, p = read_length(b, p, compact)
    if length < 0:
        if length == -1 and nullable:
            return None, p
        raise Malformed(f"bytes length {length}")
    end = _span(b, p, length)
    return bytes(b[p:end]), end


def read_records(b, p: int, compact: bool, nullable: bool):
    """A records field (a byte string) as a memoryview of ``b``: never copied."""
    length, p = read_length(b, p, compact)
    if length < 0:
        if length == -1 and nullable:
            return None, p
        raise Malformed(f"records length {length}")
    end = _span(b, p, length)
    return b[p:end], end


def read_uuid(b, p: int) -> tuple[uuid.UUID, int]:
    end = _span(b, p, 16)
    return uuid.UUID(bytes=bytes(b[p:end])), end


def write_string(o: bytearray, s: str | None, compact: bool, nullable: bool) -> None:
    """Append a string; None is written as null when ``nullable``, else as the empty string."""
    if s is None:
        if nullable:
            o += b"\x00" if compact else b"\xff\xff"
        else:
            o += b"\x01" if compact else b"\x00\x00"
        return
    e = s.encode()
    if compact:
        write_uvarint(o, len(e) + 1)
    else:
        if len(e) > 0x7FFF:
            raise ValueError(f"string of {len(e)} bytes is longer than an int16 length allows")
        o += INT16.pack(len(e))
    o += e


def write_bytes(o: bytearray, data, compact: bool, nullable: bool) -> None:
    """Append a byte string; None is null when ``nullable``, else empty."""
    if data is None:
        if nullable:
            o += b"\x00" if compact else b"\xff\xff\xff\xff"
        else:
            o += b"\x01" if compact else b"\x00\x00\x00\x00"
        return
    size = nbytes(data)
    if compact:
        write_uvarint(o, size + 1)
    else:
        o += INT32.pack(size)
    o += data


def write_length(o: bytearray, length: int, compact: bool) -> None:
    """Append an array count or byte length (-1 for null)."""
    if compact:
        write_uvarint(o, length + 1)
    else:
        o += INT32.pack(length)


def uuid_bytes(value) -> bytes:
    """16 bytes of a UUID given as :class:`uuid.UUID`, 16 bytes, or None (the zero UUID)."""
    if value is None:
        return bytes(16)
    if isinstance(value, uuid.UUID):
        return value.bytes
    data = bytes(value)
    if len(data) != 16:
        raise ValueError(f"a UUID is 16 bytes, not {len(data)}")
    return data


def nbytes(buf) -> int:
    """Size in bytes of a bytes-like object (bytes, bytearray, memoryview, numpy array)."""
    if type(buf) is bytes or type(buf) is bytearray:
        return len(buf)
    return memoryview(buf).nbytes


# --- tagged fields ---------------------------------------------------------------------


def skip_tagged_fields(b, p: int) -> int:
    """Skip a whole tagged-field section (used where no tag is known: request headers)."""
    count, p = read_uvarint(b, p)
    for _ in range(count):
        _tag, p = read_uvarint(b, p)
        size, p = read_uvarint(b, p)
        p = _span(b, p, size)
    return p


def read_tagged_fields(b, p: int) -> tuple[dict[int, memoryview], int]:
    """A tagged-field section as ``{tag: raw bytes}`` (views of ``b``)."""
    count, p = read_uvarint(b, p)
    fields = {}
    for _ in range(count):
        tag, p = read_uvarint(b, p)
        size, p = read_uvarint(b, p)
        end = _span(b, p, size)
        fields[tag] = b[p:end]
        p = end
    return fields, p
