"""Metadata of tiered storage's remote log segments (Kafka's RemoteLogSegmentId,
RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate and RemoteLogSegmentState, KIP-405),
and their records in the internal topic ``__remote_log_metadata``.

A partition's leader copies each closed segment of its log to an object store under a fresh
:class:`RemoteLogSegmentId` and announces every step as an event, in order, in the internal
topic: first the segment's :class:`RemoteLogSegmentMetadata` in state COPY_SEGMENT_STARTED,
then :class:`RemoteLogSegmentMetadataUpdate` events that move it on. Every replica (and a
new leader) rebuilds what is in the store by applying those events
(:class:`~raylog.storage.remote_log_metadata_cache.RemoteLogMetadataCache`). The legal
moves (:func:`is_valid_transition`), as Kafka's::

    (new) -> COPY_SEGMENT_STARTED -> COPY_SEGMENT_FINISHED -> DELETE_SEGMENT_STARTED -> DELETE_SEGMENT_FINISHED
             COPY_SEGMENT_STARTED -----------------------> DELETE_SEGMENT_STARTED   (an orphaned copy's clean-up)

and a state to itself (an event replayed after a fail-over changes nothing). Only a
COPY_SEGMENT_FINISHED segment is readable.

Leader epochs (raylog's, not Kafka's: its events carry no epoch). Each event carries the leader
epoch of the leader that decided it (``event_leader_epoch``; -1: not known), and a leader's
first record in its epoch is a :class:`RemoteLogLeaderEpoch`. From that record on, the
partition's events of older epochs are refused by every reader
(:meth:`RemoteLogMetadataCache.apply
<raylog.storage.remote_log_metadata_cache.RemoteLogMetadataCache.apply>`): an old leader's
COPY_SEGMENT_FINISHED that lands late cannot make a copy readable once the new leader has
looked at what is unfinished, so the new leader's clean-up never deletes a readable copy. Kafka
lives with that race (its RLMCopyTask checks its leadership before each step, which does not
stop a write already sent).

Invariants of a segment's metadata: ``[start_offset, end_offset]`` is its range, both ends
inclusive, ``start_offset <= end_offset``; ``segment_leader_epochs`` maps each leader epoch
whose records the segment holds to the first offset of that epoch in the segment, epochs and
offsets both rising, the first offset being ``start_offset`` (an epoch begun in an earlier
segment is cut at this one's start: :func:`leader_epochs_in_range`) and the last at most
``end_offset``.

Record format. Key: ``<topic>-<partition>`` in UTF-8 (:func:`record_key`), so that the events
of one partition land in one partition of the internal topic and stay in order. Value: a
msgpack map; a reader refuses a version it does not know, a field missing or of the wrong
type, with :class:`~raylog.errors.CorruptRecordError`::

    field      type        notes
    v          int         ``VERSION``
    type       str         ``"add"`` (a RemoteLogSegmentMetadata), ``"update"`` or ``"leader"``
    topic      str
    partition  int
    id         str         the segment's uuid, canonical form
    event_ms   int         when the event was made (event_timestamp_ms), by its broker's clock
    broker     int         the broker that made the event
    state      int         RemoteLogSegmentState's value (Kafka's ids, 0 to 3)
    -- "add" only:
    start      int         start_offset
    end        int         end_offset (inclusive)
    max_ts     int         max_timestamp_ms of the segment's records (-1: none)
    epochs     [[int,int]] segment_leader_epochs as (epoch, first offset) pairs
    size       int         segment_size_bytes
    -- "add" and "update", optional (absent: -1):
    leader_epoch  int      event_leader_epoch
    -- "leader" (a RemoteLogLeaderEpoch) has no id, state or segment fields:
    leader_epoch  int      the leader epoch it starts

Concurrency: immutable values and pure functions; any thread.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import msgpack

from ..errors import CorruptRecordError, InvalidRemoteLogSegmentStateError

#: The internal topic the events are written to (Kafka's name).
METADATA_TOPIC = "__remote_log_metadata"
#: The version of the value format this module writes; it reads no other.
VERSION = 1


class RemoteLogSegmentState(enum.IntEnum):
    """Where a remote segment is in its life (Kafka's ids, which its records carry)."""

    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3


_NEXT_STATES: dict[RemoteLogSegmentState | None, frozenset[RemoteLogSegmentState]] = {
    None: frozenset({RemoteLogSegmentState.COPY_SEGMENT_STARTED}),
    RemoteLogSegmentState.COPY_SEGMENT_STARTED: frozenset(
        {RemoteLogSegmentState.COPY_SEGMENT_FINISHED, RemoteLogSegmentState.DELETE_SEGMENT_STARTED}
    ),
    RemoteLogSegmentState.COPY_SEGMENT_FINISHED: frozenset({RemoteLogSegmentState.DELETE_SEGMENT_STARTED}),
    RemoteLogSegmentState.DELETE_SEGMENT_STARTED: frozenset({RemoteLogSegmentState.DELETE_SEGMENT_FINISHED}),
    RemoteLogSegmentState.DELETE_SEGMENT_FINISHED: frozenset(),
}


def is_valid_transition(source: RemoteLogSegmentState | None, target: RemoteLogSegmentState) -> bool:
    """Whether a segment in ``source`` (None: not known yet) may move to ``target``
    (Kafka's RemoteLogSegmentState.isValidTransition); a state to itself is valid."""
    return source == target or target in _NEXT_STATES[source]


def check_transition(
    segment_id: RemoteLogSegmentId, source: RemoteLogSegmentState | None, target: RemoteLogSegmentState
) -> None:
    """Raises:
    InvalidRemoteLogSegmentStateError: ``source`` may not move to ``target``.
    """
    if not is_valid_transition(source, target):
        name = "no state" if source is None else source.name
        raise InvalidRemoteLogSegmentStateError(f"remote segment {segment_id}: {name} cannot move to {target.name}")


@dataclass(frozen=True)
class RemoteLogSegmentId:
    """A remote segment's identity (Kafka's RemoteLogSegmentId): its partition and a uuid
    chosen for each copy, so a segment copied again (after a failed copy, or by a new
    leader) never overwrites an earlier copy's objects."""

    topic: str
    partition: int
    id: str  # a uuid in canonical form: 8-4-4-4-12 lower-case hex digits

    def __post_init__(self) -> None:
        if not isinstance(self.topic, str) or not self.topic:
            raise ValueError(f"a remote segment's topic must be a non-empty string, not {self.topic!r}")
        if type(self.partition) is not int or self.partition < 0:
            raise ValueError(f"a remote segment's partition must be an int >= 0, not {self.partition!r}")
        if not isinstance(self.id, str) or not _is_canonical_uuid(self.id):
            raise ValueError(f"a remote segment's id must be a uuid in canonical form, not {self.id!r}")

    @classmethod
    def generate(cls, topic: str, partition: int) -> RemoteLogSegmentId:
        """A new id for a copy of a segment of ``topic``-``partition`` (a random uuid)."""
        return cls(topic, partition, str(uuid.uuid4()))

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}:{self.id}"


def _is_canonical_uuid(text: str) -> bool:
    try:
        return str(uuid.UUID(text)) == text
    except ValueError:
        return False


@dataclass(frozen=True)
class RemoteLogSegmentMetadata:
    """A remote segment as its latest event describes it (Kafka's RemoteLogSegmentMetadata).

    Args:
        segment_id: the segment's identity.
        start_offset: the first offset in the segment.
        end_offset: the last offset in the segment (inclusive).
        max_timestamp_ms: the largest record timestamp in the segment (-1: none).
        broker_id: the broker that made the latest event.
        event_timestamp_ms: when the latest event was made.
        segment_leader_epochs: ``(epoch, first offset of that epoch in the segment)`` pairs,
            rising (a mapping epoch -> offset is taken too, in its order).
        segment_size_bytes: the size of the segment's ``.log`` object.
        state: the segment's state.
        event_leader_epoch: the leader epoch in which the latest event was decided (-1: not
            known); not ``segment_leader_epochs``, the epochs of the segment's records.

    Raises:
        ValueError: the invariants of the module docstring do not hold.

    Example::

        RemoteLogSegmentMetadata(RemoteLogSegmentId.generate("t", 0), 0, 99, 1_700_000_000_000,
                                 1, 1_700_000_000_500, ((0, 0), (3, 40)), 16_384)
    """

    segment_id: RemoteLogSegmentId
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_leader_epochs: tuple[tuple[int, int], ...]
    segment_size_bytes: int
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_STARTED
    event_leader_epoch: int = -1

    def __post_init__(self) -> None:
        epochs = self.segment_leader_epochs
        pairs = epochs.items() if isinstance(epochs, Mapping) else epochs
        object.__setattr__(self, "segment_leader_epochs", tuple((e, o) for e, o in pairs))
        object.__setattr__(self, "state", RemoteLogSegmentState(self.state))
        if not isinstance(self.segment_id, RemoteLogSegmentId):
            raise ValueError(f"segment_id must be a RemoteLogSegmentId, not {self.segment_id!r}")
        _check_ints(self, "start_offset", "end_offset", "max_timestamp_ms", "broker_id", "event_timestamp_ms")
        _check_ints(self, "segment_size_bytes", "event_leader_epoch")
        if self.event_leader_epoch < -1:
            raise ValueError(f"{self.segment_id}: event_leader_epoch {self.event_leader_epoch} is below -1")
        if not 0 <= self.start_offset <= self.end_offset:
            raise ValueError(f"{self.segment_id}: offsets [{self.start_offset}, {self.end_offset}] are not a range")
        if self.max_timestamp_ms < -1 or self.segment_size_bytes < 0:
            raise ValueError(f"{self.segment_id}: negative max_timestamp_ms or segment_size_bytes")
        _check_leader_epochs(self)

    @property
    def leader_epochs(self) -> dict[int, int]:
        """``segment_leader_epochs`` as a dict, epoch -> first offset, in epoch order."""
        return dict(self.segment_leader_epochs)

    def epoch_end_offset(self, epoch: int) -> int | None:
        """The last offset (inclusive) of ``epoch`` in this segment, or None if the segment
        holds no record of that epoch."""
        entries = self.segment_leader_epochs
        for i, (e, _) in enumerate(entries):
            if e == epoch:
                return entries[i + 1][1] - 1 if i + 1 < len(entries) else self.end_offset
        return None

    def with_update(self, update: RemoteLogSegmentMetadataUpdate) -> RemoteLogSegmentMetadata:
        """This segment after ``update`` (Kafka's createWithUpdates).

        Raises:
            InvalidRemoteLogSegmentStateError: the update names another segment, or its state
                may not follow this one's.
        """
        if update.segment_id != self.segment_id:
            raise InvalidRemoteLogSegmentStateError(f"update of {update.segment_id} applied to {self.segment_id}")
        check_transition(self.segment_id, self.state, update.state)
        return replace(
            self,
            state=update.state,
            event_timestamp_ms=update.event_timestamp_ms,
            broker_id=update.broker_id,
            event_leader_epoch=update.event_leader_epoch,
        )


def _check_ints(value: Any, *names: str) -> None:
    for name in names:
        if type(getattr(value, name)) is not int:
            raise ValueError(f"{type(value).__name__}.{name} must be an int, not {getattr(value, name)!r}")


def _check_leader_epochs(metadata: RemoteLogSegmentMetadata) -> None:
    entries = metadata.segment_leader_epochs
    if not entries:
        raise ValueError(f"{metadata.segment_id}: segment_leader_epochs is empty")
    if any(type(e) is not int or type(o) is not int for e, o in entries):
        raise ValueError(f"{metadata.segment_id}: segment_leader_epochs holds a non-int: {entries}")
    rising = all(a[0] < b[0] and a[1] < b[1] for a, b in zip(entries, entries[1:], strict=False))
    first, last = entries[0][1], entries[-1][1]
    if not rising or entries[0][0] < 0 or first != metadata.start_offset or last > metadata.end_offset:
        raise ValueError(
            f"{metadata.segment_id}: segment_leader_epochs {entries} must rise, start at "
            f"{metadata.start_offset} and stay within {metadata.end_offset}"
        )


def leader_epochs_in_range(
    entries: Iterable[tuple[int, int]], start_offset: int, end_offset: int
) -> tuple[tuple[int, int], ...]:
    """The ``segment_leader_epochs`` of a segment ``[start_offset, end_offset]`` (inclusive)
    from a log's epoch history (:attr:`~raylog.storage.leader_epoch.LeaderEpochCache.entries`,
    ``(epoch, start offset)`` pairs, rising): the epochs whose records fall in the range, the
    first cut at ``start_offset`` (Kafka's LeaderEpochFileCache.epochEntriesInRange)."""
    kept: list[tuple[int, int]] = []
    for epoch, offset in entries:
        if offset > end_offset:
            break
        if offset <= start_offset:
            kept = [(epoch, start_offset)]
        else:
            kept.append((epoch, offset))
    return tuple(kept)


@dataclass(frozen=True)
class RemoteLogSegmentMetadataUpdate:
    """An event that moves a known remote segment on (Kafka's RemoteLogSegmentMetadataUpdate);
    never to COPY_SEGMENT_STARTED, which only a :class:`RemoteLogSegmentMetadata` announces.
    ``event_leader_epoch``: the leader epoch in which it was decided (-1: not known).

    Raises:
        ValueError: ``state`` is COPY_SEGMENT_STARTED, or a field has the wrong type.
    """

    segment_id: RemoteLogSegmentId
    event_timestamp_ms: int
    state: RemoteLogSegmentState
    broker_id: int
    event_leader_epoch: int = -1

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", RemoteLogSegmentState(self.state))
        if not isinstance(self.segment_id, RemoteLogSegmentId):
            raise ValueError(f"segment_id must be a RemoteLogSegmentId, not {self.segment_id!r}")
        _check_ints(self, "event_timestamp_ms", "broker_id", "event_leader_epoch")
        if self.event_leader_epoch < -1:
            raise ValueError(f"{self.segment_id}: event_leader_epoch {self.event_leader_epoch} is below -1")
        if self.state == RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            raise ValueError(f"{self.segment_id}: an update cannot move a segment to COPY_SEGMENT_STARTED")


@dataclass(frozen=True)
class RemoteLogLeaderEpoch:
    """A leader's first record in ``__remote_log_metadata`` in its leader epoch (raylog's; the
    nearest in Kafka is KRaft's LeaderChangeMessage): once it is applied, events of older
    leader epochs are refused (see the module docstring). A record of an epoch not above the
    highest one applied changes nothing.

    Raises:
        ValueError: a field has the wrong type, or ``leader_epoch`` is negative.
    """

    topic: str
    partition: int
    leader_epoch: int
    broker_id: int
    event_timestamp_ms: int

    def __post_init__(self) -> None:
        if not isinstance(self.topic, str) or not self.topic:
            raise ValueError(f"a leader epoch record's topic must be a non-empty string, not {self.topic!r}")
        _check_ints(self, "partition", "leader_epoch", "broker_id", "event_timestamp_ms")
        if self.partition < 0 or self.leader_epoch < 0:
            raise ValueError(f"{self}: negative partition or leader epoch")


#: What the internal topic carries about segments.
RemoteLogSegmentEvent = RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate
#: What the internal topic carries.
RemoteLogEvent = RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate | RemoteLogLeaderEpoch


def partition_of(event: RemoteLogEvent) -> tuple[str, int]:
    """The ``(topic, partition)`` an event is about."""
    if isinstance(event, RemoteLogLeaderEpoch):
        return event.topic, event.partition
    return event.segment_id.topic, event.segment_id.partition


def record_key(topic: str, partition: int) -> bytes:
    """The key of a partition's events in ``__remote_log_metadata``: ``<topic>-<partition>``
    (one-to-one: the partition is the digits after the last ``-``)."""
    return f"{topic}-{partition}".encode()


def encode(event: RemoteLogEvent) -> tuple[bytes, bytes]:
    """The ``(key, value)`` of ``event``'s record in ``__remote_log_metadata``."""
    topic, partition = partition_of(event)
    fields: dict[str, Any] = {"v": VERSION, "topic": topic, "partition": partition}
    fields.update(event_ms=event.event_timestamp_ms, broker=event.broker_id)
    if isinstance(event, RemoteLogLeaderEpoch):
        fields.update(type="leader", leader_epoch=event.leader_epoch)
        return record_key(topic, partition), msgpack.packb(fields, use_bin_type=True)
    fields.update(
        type="add" if isinstance(event, RemoteLogSegmentMetadata) else "update",
        id=event.segment_id.id,
        state=int(event.state),
        leader_epoch=event.event_leader_epoch,
    )
    if isinstance(event, RemoteLogSegmentMetadata):
        fields.update(
            start=event.start_offset,
            end=event.end_offset,
            max_ts=event.max_timestamp_ms,
            epochs=[list(pair) for pair in event.segment_leader_epochs],
            size=event.segment_size_bytes,
        )
    return record_key(topic, partition), msgpack.packb(fields, use_bin_type=True)


def decode(key: bytes | None, value: bytes) -> RemoteLogEvent:
    """The event of a ``__remote_log_metadata`` record.

    Raises:
        CorruptRecordError: the value is not a map of this format's version, a field is
            missing, of the wrong type or out of range, or the key is not the event's
            partition's.
    """
    try:
        fields = msgpack.unpackb(value, raw=False)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CorruptRecordError(f"remote log metadata record is not msgpack: {exc}") from exc
    if not isinstance(fields, dict):
        raise CorruptRecordError(f"remote log metadata record is a {type(fields).__name__}, not a map")
    if _field(fields, "v", int) != VERSION:
        raise CorruptRecordError(f"remote log metadata record of unknown version {fields['v']}")
    kind = _field(fields, "type", str)
    parsers = {"add": _metadata_of, "update": _update_of, "leader": _leader_epoch_of}
    if kind not in parsers:
        raise CorruptRecordError(f"remote log metadata record of unknown type {kind!r}")
    try:
        event = parsers[kind](fields)
    except ValueError as exc:  # the values' invariants (RemoteLogSegmentState too)
        raise CorruptRecordError(f"remote log metadata record is not valid: {exc}") from exc
    if key != record_key(*partition_of(event)):
        raise CorruptRecordError(f"remote log metadata record of {partition_of(event)} has the key {key!r}")
    return event


def _field(fields: dict, name: str, kind: type, default: Any = None) -> Any:
    if default is not None and name not in fields:
        return default
    value = fields.get(name)
    if type(value) is not kind:
        raise CorruptRecordError(f"remote log metadata record: field {name!r} is {value!r}, not a {kind.__name__}")
    return value


def _segment_id_of(fields: dict) -> RemoteLogSegmentId:
    return RemoteLogSegmentId(_field(fields, "topic", str), _field(fields, "partition", int), _field(fields, "id", str))


def _metadata_of(fields: dict) -> RemoteLogSegmentMetadata:
    epochs = _field(fields, "epochs", list)
    if not all(type(pair) is list and len(pair) == 2 for pair in epochs):
        raise CorruptRecordError(f"remote log metadata record: field 'epochs' is {epochs!r}, not pairs")
    return RemoteLogSegmentMetadata(
        segment_id=_segment_id_of(fields),
        start_offset=_field(fields, "start", int),
        end_offset=_field(fields, "end", int),
        max_timestamp_ms=_field(fields, "max_ts", int),
        broker_id=_field(fields, "broker", int),
        event_timestamp_ms=_field(fields, "event_ms", int),
        segment_leader_epochs=tuple((e, o) for e, o in epochs),
        segment_size_bytes=_field(fields, "size", int),
        state=RemoteLogSegmentState(_field(fields, "state", int)),
        event_leader_epoch=_field(fields, "leader_epoch", int, -1),
    )


def _update_of(fields: dict) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(
        segment_id=_segment_id_of(fields),
        event_timestamp_ms=_field(fields, "event_ms", int),
        state=RemoteLogSegmentState(_field(fields, "state", int)),
        broker_id=_field(fields, "broker", int),
        event_leader_epoch=_field(fields, "leader_epoch", int, -1),
    )


def _leader_epoch_of(fields: dict) -> RemoteLogLeaderEpoch:
    return RemoteLogLeaderEpoch(
        topic=_field(fields, "topic", str),
        partition=_field(fields, "partition", int),
        leader_epoch=_field(fields, "leader_epoch", int),
        broker_id=_field(fields, "broker", int),
        event_timestamp_ms=_field(fields, "event_ms", int),
    )
