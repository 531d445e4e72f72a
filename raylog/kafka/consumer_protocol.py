"""Kafka's consumer protocol: the bytes a consumer puts in its JoinGroup protocols
(ConsumerProtocolSubscription) and the bytes it reads from its SyncGroup answer
(ConsumerProtocolAssignment). The group coordinator carries them opaquely in Kafka; the
listener reads the subscriptions because raylog's coordinator assigns partitions itself.

Both start with an int16 version and then the fields of that version, in Kafka's classic
(non-flexible) encoding: int16-length strings, int32-length bytes (-1: null), int32-counted
arrays. Versions 0-3 are known:

- subscription: topics and user data (0+), owned partitions (1+), the generation they are
  owned in (2+), the rack (3+);
- assignment: assigned partitions and user data (every version).

A version above 3 is read as version 3 and what follows the known fields is ignored (newer
versions only append fields), as Kafka's own clients read them. Malformed bytes raise
:class:`ConsumerProtocolError`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from raylog.errors import InvalidRequestError
from raylog.types import TopicPartition

#: The highest version of either message this module knows.
MAX_VERSION = 3
#: Kafka's generation of a member that owns partitions in none.
NO_GENERATION = -1

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class ConsumerProtocolError(InvalidRequestError):
    """Bytes that are no consumer-protocol subscription or assignment."""


@dataclass(frozen=True)
class Subscription:
    """What a member asks for (``owned_partitions`` from v1, ``generation_id`` from v2,
    ``rack_id`` from v3; an earlier version leaves them at their defaults)."""

    version: int
    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation_id: int = NO_GENERATION
    rack_id: str | None = None


@dataclass(frozen=True)
class Assignment:
    """The partitions a member reads in its generation."""

    version: int
    partitions: tuple[TopicPartition, ...]
    user_data: bytes | None = None


# --- decoding ---------------------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes | bytearray | memoryview, what: str):
        self.data = bytes(data)
        self.pos = 0
        self.what = what

    def _take(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.data):
            raise ConsumerProtocolError(
                f"{self.what}: truncated at byte {self.pos} of {len(self.data)} (needs {n} more)"
            )
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def int16(self) -> int:
        return _I16.unpack(self._take(2))[0]

    def int32(self) -> int:
        return _I32.unpack(self._take(4))[0]

    def string(self, nullable: bool = False) -> str | None:
        n = self.int16()
        if n == -1 and nullable:
            return None
        if n < 0:
            raise ConsumerProtocolError(f"{self.what}: a string of length {n} at byte {self.pos - 2}")
        raw = self._take(n)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConsumerProtocolError(f"{self.what}: a string that is not UTF-8 at byte {self.pos - n}") from exc

    def bytes_(self) -> bytes | None:
        n = self.int32()
        if n == -1:
            return None
        return self._take(n)

    def count(self) -> int:
        n = self.int32()
        if n == -1:  # a null array reads as an empty one
            return 0
        # Each element takes at least 2 bytes: a bound that stops a corrupt count early.
        if n < 0 or n * 2 > len(self.data) - self.pos:
            raise ConsumerProtocolError(f"{self.what}: an array of {n} elements at byte {self.pos - 4}")
        return n

    def version(self) -> int:
        version = self.int16()
        if version < 0:
            raise ConsumerProtocolError(f"{self.what}: version {version}")
        return min(version, MAX_VERSION)

    def partitions(self) -> tuple[TopicPartition, ...]:
        out = []
        for _ in range(self.count()):
            topic = self.string()
            out.extend(TopicPartition(topic, self.int32()) for _ in range(self.count()))
        return tuple(out)


def decode_subscription(data: bytes | bytearray | memoryview) -> Subscription:
    """A JoinGroup protocol's metadata of protocol type ``consumer``.

    Raises:
        ConsumerProtocolError: the bytes are truncated or malformed.
    """
    r = _Reader(data, "consumer subscription")
    version = r.version()
    topics = tuple(r.string() for _ in range(r.count()))
    user_data = r.bytes_()
    owned = r.partitions() if version >= 1 else ()
    generation = r.int32() if version >= 2 else NO_GENERATION
    rack = r.string(nullable=True) if version >= 3 else None
    return Subscription(version, topics, user_data, owned, generation, rack)


def decode_assignment(data: bytes | bytearray | memoryview) -> Assignment:
    """A SyncGroup assignment of protocol type ``consumer`` (empty bytes: no assignment,
    which Kafka sends with an error).

    Raises:
        ConsumerProtocolError: the bytes are truncated or malformed.
    """
    if len(data) == 0:
        return Assignment(0, ())
    r = _Reader(data, "consumer assignment")
    version = r.version()
    partitions = r.partitions()
    return Assignment(version, partitions, r.bytes_())


# --- encoding ---------------------------------------------------------------------------


def _string(s: str | None, out: list[bytes]) -> None:
    if s is None:
        out.append(_I16.pack(-1))
        return
    raw = s.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise ConsumerProtocolError(f"a string of {len(raw)} bytes does not fit an int16 length: {s[:40]!r}…")
    out += (_I16.pack(len(raw)), raw)


def _bytes(b: bytes | None, out: list[bytes]) -> None:
    if b is None:
        out.append(_I32.pack(-1))
    else:
        out += (_I32.pack(len(b)), bytes(b))


def _partitions(partitions: Iterable[TopicPartition], out: list[bytes]) -> None:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    out.append(_I32.pack(len(by_topic)))
    for topic in sorted(by_topic):
        _string(topic, out)
        numbers = sorted(by_topic[topic])
        out.append(struct.pack(f">i{len(numbers)}i", len(numbers), *numbers))


def _check_version(version: int) -> None:
    if not 0 <= version <= MAX_VERSION:
        raise ConsumerProtocolError(f"consumer protocol versions are 0 to {MAX_VERSION}, got {version}")


def encode_subscription(subscription: Subscription) -> bytes:
    """The bytes of ``subscription`` at its version (fields of later versions are left out).

    Raises:
        ConsumerProtocolError: an unknown version or a string too long.
    """
    _check_version(subscription.version)
    out = [_I16.pack(subscription.version), _I32.pack(len(subscription.topics))]
    for topic in subscription.topics:
        _string(topic, out)
    _bytes(subscription.user_data, out)
    if subscription.version >= 1:
        _partitions(subscription.owned_partitions, out)
    if subscription.version >= 2:
        out.append(_I32.pack(subscription.generation_id))
    if subscription.version >= 3:
        _string(subscription.rack_id, out)
    return b"".join(out)


def encode_assignment(assignment: Assignment) -> bytes:
    """The bytes of ``assignment`` (partitions grouped by topic, both in order).

    Raises:
        ConsumerProtocolError: an unknown version or a string too long.
    """
    _check_version(assignment.version)
    out = [_I16.pack(assignment.version)]
    _partitions(assignment.partitions, out)
    _bytes(assignment.user_data, out)
    return b"".join(out)
