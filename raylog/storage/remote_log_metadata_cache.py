"""What one partition has in tiered storage (Kafka's RemoteLogMetadataCache, KIP-405), and the
plans its leader acts on: which local segments to copy, which local segments local retention
may delete, which remote segments retention deletes.

:class:`RemoteLogMetadataCache` applies the partition's events of ``__remote_log_metadata``
(:mod:`raylog.storage.remote_log_metadata`) in their order: a segment's metadata in
COPY_SEGMENT_STARTED, then its updates, each checked against the segment's state. It answers
which remote segment holds an offset written in a leader epoch (only COPY_SEGMENT_FINISHED
segments are readable), how far copies have got (the copier resumes after the highest copied
offset), and what a new leader must clean up: copies never finished (their leader died
mid-copy) and deletions never finished. It also keeps the highest leader epoch announced
(:class:`~raylog.storage.remote_log_metadata.RemoteLogLeaderEpoch`) and refuses the events of
older epochs from then on, so that every reader of the topic refuses the same ones.

Invariants: a segment is known from its COPY_SEGMENT_STARTED event until its
DELETE_SEGMENT_FINISHED event, after which it is forgotten; the offset index per leader epoch
holds exactly the COPY_SEGMENT_FINISHED segments; the highest copied offsets only rise (a
remote segment deleted by retention stays copied: the copier must not copy it again); the
leader epoch only rises, and no event of an epoch below it is applied after it rose.

The plans are pure functions of explicit inputs: the local segments as
:class:`LocalSegment` values (not the :class:`~raylog.storage.log.Log`, so each plan is
tested alone), the remote segments' metadata, the limits (:class:`TieredRetentionConfig`)
and the time. Each returns the oldest segments first, and stops at the first segment that
does not qualify: retention removes a prefix, never a hole.

Concurrency: :class:`RemoteLogMetadataCache` is not thread-safe: one thread applies the
events and asks the questions (the owner serializes them). The plans are pure: any thread.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..config import LogConfig, local_retention_problem
from ..errors import (
    FencedLeaderEpochError,
    InvalidConfigError,
    InvalidRemoteLogSegmentStateError,
    RemoteResourceNotFoundError,
)
from .remote_log_metadata import (
    RemoteLogEvent,
    RemoteLogLeaderEpoch,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
)

logger = logging.getLogger(__name__)

_STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
_FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
_DELETE_STARTED = RemoteLogSegmentState.DELETE_SEGMENT_STARTED
_DELETE_FINISHED = RemoteLogSegmentState.DELETE_SEGMENT_FINISHED

#: Kafka's ``local.retention.*`` value meaning "as ``retention.*``".
USE_RETENTION = -2
#: Kafka's value of the ``retention.*`` settings meaning "no limit".
UNLIMITED = -1


class _EpochSegments:
    """The readable segments holding records of one leader epoch, by the first offset of the
    epoch in each (Kafka's RemoteLogLeaderEpochState): a floor look-up finds the segment that
    may hold an offset. A later segment with the same first offset replaces the earlier one
    (a copy made again), as Kafka's map does."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ids: list[RemoteLogSegmentId] = []

    def __len__(self) -> int:
        return len(self._starts)

    def add(self, start_offset: int, segment_id: RemoteLogSegmentId) -> None:
        i = bisect.bisect_left(self._starts, start_offset)
        if i < len(self._starts) and self._starts[i] == start_offset:
            self._ids[i] = segment_id
        else:
            self._starts.insert(i, start_offset)
            self._ids.insert(i, segment_id)

    def remove(self, start_offset: int, segment_id: RemoteLogSegmentId) -> None:
        i = bisect.bisect_left(self._starts, start_offset)
        if i < len(self._starts) and self._ids[i] == segment_id:
            del self._starts[i], self._ids[i]

    def floor(self, offset: int) -> RemoteLogSegmentId | None:
        i = bisect.bisect_right(self._starts, offset) - 1
        return self._ids[i] if i >= 0 else None


class RemoteLogMetadataCache:
    """See the module docstring. One per partition (``topic``, ``partition``).

    Example::

        cache = RemoteLogMetadataCache("t", 0)
        for key, value in records_of_the_partition:
            cache.apply(remote_log_metadata.decode(key, value))
        cache.segment_for(leader_epoch=3, offset=1_234)
    """

    def __init__(self, topic: str, partition: int):
        self.topic = topic
        self.partition = partition
        #: Every known segment (any state before DELETE_SEGMENT_FINISHED), by id.
        self._segments: dict[RemoteLogSegmentId, RemoteLogSegmentMetadata] = {}
        #: The COPY_SEGMENT_FINISHED segments, per leader epoch.
        self._epochs: dict[int, _EpochSegments] = {}
        #: Per leader epoch, the highest offset of that epoch ever copied (Kafka's highestLogOffset).
        self._highest_offsets: dict[int, int] = {}
        self._highest_copied_offset = -1
        #: The highest leader epoch announced in the topic (-1: none).
        self.leader_epoch = -1

    def __len__(self) -> int:
        return len(self._segments)

    # --- applying events --------------------------------------------------------------

    def apply(self, event: RemoteLogEvent) -> None:
        """Apply the next event of this partition, in the internal topic's order. A
        :class:`RemoteLogLeaderEpoch` above the cache's leader epoch raises it; one not above
        changes nothing.

        Raises:
            FencedLeaderEpochError: the event was decided in a leader epoch below the highest
                announced (an earlier leader's event that landed late); nothing changes.
            InvalidRemoteLogSegmentStateError: the event does not fit its segment's state.
            RemoteResourceNotFoundError: an update of a segment that is not known.
            ValueError: the event belongs to another partition.
        """
        if isinstance(event, RemoteLogLeaderEpoch):
            if (event.topic, event.partition) != (self.topic, self.partition):
                raise ValueError(f"{event} applied to the cache of {self.topic}-{self.partition}")
            self.leader_epoch = max(self.leader_epoch, event.leader_epoch)
            return
        sid = event.segment_id
        if (sid.topic, sid.partition) != (self.topic, self.partition):
            raise ValueError(f"event of {sid} applied to the cache of {self.topic}-{self.partition}")
        if event.event_leader_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(
                f"{type(event).__name__} of {sid} ({event.state.name}) decided in leader epoch "
                f"{event.event_leader_epoch}, after leader epoch {self.leader_epoch} began"
            )
        if isinstance(event, RemoteLogSegmentMetadata):
            self.add_copy_in_progress_segment(event)
        else:
            self.update_remote_log_segment_metadata(event)

    def add_copy_in_progress_segment(self, metadata: RemoteLogSegmentMetadata) -> None:
        """A copy started (Kafka's addCopyInProgressSegment). The same event again changes
        nothing.

        Raises:
            InvalidRemoteLogSegmentStateError: ``metadata`` is not in COPY_SEGMENT_STARTED, or
                its segment is known already with other metadata.
        """
        sid = metadata.segment_id
        existing = self._segments.get(sid)
        if existing == metadata:
            return
        if metadata.state != _STARTED:
            raise InvalidRemoteLogSegmentStateError(f"remote segment {sid} announced in {metadata.state.name}")
        if existing is not None:
            raise InvalidRemoteLogSegmentStateError(f"remote segment {sid} announced again: was {existing}")
        self._segments[sid] = metadata
        logger.debug(
            "remote segment %s: copy started, offsets %d to %d", sid, metadata.start_offset, metadata.end_offset
        )

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        """Move a known segment on (Kafka's updateRemoteLogSegmentMetadata).

        Raises:
            RemoteResourceNotFoundError: the segment is not known (never added, or its
                deletion finished).
            InvalidRemoteLogSegmentStateError: its state may not move to ``update.state``.
        """
        sid = update.segment_id
        existing = self._segments.get(sid)
        if existing is None:
            raise RemoteResourceNotFoundError(f"no remote segment {sid} to move to {update.state.name}")
        updated = existing.with_update(update)
        if updated.state == _DELETE_FINISHED:
            del self._segments[sid]
        else:
            self._segments[sid] = updated
        if existing.state != _FINISHED and updated.state == _FINISHED:
            self._index(updated)
        elif existing.state == _FINISHED and updated.state != _FINISHED:
            self._unindex(updated)
        logger.debug("remote segment %s: %s -> %s", sid, existing.state.name, updated.state.name)

    def _index(self, metadata: RemoteLogSegmentMetadata) -> None:
        for epoch, start_offset in metadata.segment_leader_epochs:
            self._epochs.setdefault(epoch, _EpochSegments()).add(start_offset, metadata.segment_id)
            end_offset = metadata.epoch_end_offset(epoch)
            assert end_offset is not None
            self._highest_offsets[epoch] = max(self._highest_offsets.get(epoch, -1), end_offset)
        self._highest_copied_offset = max(self._highest_copied_offset, metadata.end_offset)

    def _unindex(self, metadata: RemoteLogSegmentMetadata) -> None:
        for epoch, start_offset in metadata.segment_leader_epochs:
            segments = self._epochs.get(epoch)
            if segments is None:  # a later copy of the same offsets replaced it, and went first
                continue
            segments.remove(start_offset, metadata.segment_id)
            if not segments:
                del self._epochs[epoch]

    # --- questions --------------------------------------------------------------------

    def segment(self, segment_id: RemoteLogSegmentId) -> RemoteLogSegmentMetadata | None:
        """The known segment of that id, in whatever state, or None."""
        return self._segments.get(segment_id)

    def segment_for(self, leader_epoch: int, offset: int) -> RemoteLogSegmentMetadata | None:
        """The readable (COPY_SEGMENT_FINISHED) segment holding ``offset`` as written in
        ``leader_epoch`` (Kafka's remoteLogSegmentMetadata(epoch, offset)), or None: no copied
        segment holds records of that epoch at that offset."""
        segments = self._epochs.get(leader_epoch)
        sid = segments.floor(offset) if segments is not None else None
        if sid is None:
            return None
        metadata = self._segments[sid]
        epoch_end_offset = metadata.epoch_end_offset(leader_epoch)
        return metadata if epoch_end_offset is not None and offset <= epoch_end_offset else None

    def highest_offset_for_epoch(self, leader_epoch: int) -> int | None:
        """The highest offset of ``leader_epoch`` ever copied (Kafka's highestOffsetForEpoch),
        or None if no copy of its records finished."""
        return self._highest_offsets.get(leader_epoch)

    @property
    def highest_copied_offset(self) -> int:
        """The highest offset any finished copy held (-1: none): the copier resumes above it."""
        return self._highest_copied_offset

    def highest_copied_offset_in_lineage(self, epoch_entries: Sequence[tuple[int, int]], log_end_offset: int) -> int:
        """The highest copied offset along the local log's own epoch history (Kafka's
        RemoteLogManager.findHighestRemoteOffset), or -1: the newest local epoch with a copy,
        its highest copied offset capped at the end of that epoch in the local log. After an
        unclean election, copies of a diverged history do not count beyond where the local
        log's history leaves them.

        Args:
            epoch_entries: the local log's ``(epoch, start offset)`` pairs, rising
                (:attr:`~raylog.storage.leader_epoch.LeaderEpochCache.entries`).
            log_end_offset: the local log's end offset (where its latest epoch ends).
        """
        for i in range(len(epoch_entries) - 1, -1, -1):
            highest = self._highest_offsets.get(epoch_entries[i][0])
            if highest is not None:
                epoch_end = epoch_entries[i + 1][1] if i + 1 < len(epoch_entries) else log_end_offset
                return min(highest, epoch_end - 1)
        return -1

    def segments(self, state: RemoteLogSegmentState | None = None) -> tuple[RemoteLogSegmentMetadata, ...]:
        """The known segments (those in ``state`` only, if given) in offset order."""
        chosen = (m for m in self._segments.values() if state is None or m.state == state)
        return tuple(sorted(chosen, key=lambda m: (m.start_offset, m.end_offset, m.segment_id.id)))

    def unfinished_copies(self) -> tuple[RemoteLogSegmentMetadata, ...]:
        """Copies started and never finished (their leader failed mid-copy): a new leader
        deletes them (COPY_SEGMENT_STARTED -> DELETE_SEGMENT_STARTED), in offset order."""
        return self.segments(_STARTED)

    def deletions_in_progress(self) -> tuple[RemoteLogSegmentMetadata, ...]:
        """Segments whose deletion started and did not finish: a leader deletes them again."""
        return self.segments(_DELETE_STARTED)

    @property
    def remote_log_start_offset(self) -> int | None:
        """The first offset a readable segment holds, or None when none is readable."""
        return min((m.start_offset for m in self._segments.values() if m.state == _FINISHED), default=None)

    @property
    def remote_size_bytes(self) -> int:
        """The bytes of the readable segments' ``.log`` objects (what ``retention.bytes``
        counts of the remote log)."""
        return sum(m.segment_size_bytes for m in self._segments.values() if m.state == _FINISHED)


# --- plans ----------------------------------------------------------------------------


@dataclass(frozen=True)
class LocalSegment:
    """What the plans need to know of one local segment."""

    base_offset: int
    last_offset: int  # inclusive; base_offset - 1 for an empty segment
    size_bytes: int
    max_timestamp_ms: int  # -1 for an empty segment
    is_active: bool  # the log's last segment, which takes appends

    @property
    def is_empty(self) -> bool:
        return self.last_offset < self.base_offset


@dataclass(frozen=True)
class TieredRetentionConfig:
    """A tiered topic's retention limits, in Kafka's meanings: ``retention_ms`` and
    ``retention_bytes`` bound the whole log (local and remote; -1: no limit);
    ``local_retention_ms`` and ``local_retention_bytes`` bound the local log only (-2: as
    the whole log's; -1: no limit), and may not exceed the whole log's (as Kafka checks).

    Raises:
        InvalidConfigError: a value is out of range, or a local limit exceeds its whole-log limit.
    """

    retention_ms: int = 7 * 24 * 60 * 60 * 1000
    retention_bytes: int = UNLIMITED
    local_retention_ms: int = USE_RETENTION
    local_retention_bytes: int = USE_RETENTION

    @classmethod
    def of(cls, config: LogConfig) -> TieredRetentionConfig:
        """A topic's limits (``config`` checked them already)."""
        return cls(config.retention_ms, config.retention_bytes, config.local_retention_ms, config.local_retention_bytes)

    def __post_init__(self) -> None:
        _check_limits("ms", self.retention_ms, self.local_retention_ms)
        _check_limits("bytes", self.retention_bytes, self.local_retention_bytes)

    @property
    def effective_local_retention_ms(self) -> int:
        return self.retention_ms if self.local_retention_ms == USE_RETENTION else self.local_retention_ms

    @property
    def effective_local_retention_bytes(self) -> int:
        return self.retention_bytes if self.local_retention_bytes == USE_RETENTION else self.local_retention_bytes


def _check_limits(unit: str, whole: int, local: int) -> None:
    if type(whole) is not int or whole < UNLIMITED:
        raise InvalidConfigError(f"retention.{unit} must be an int >= -1, not {whole!r}")
    if type(local) is not int or local < USE_RETENTION:
        raise InvalidConfigError(f"local.retention.{unit} must be an int >= -2, not {local!r}")
    problem = local_retention_problem(unit, whole, local)
    if problem is not None:
        raise InvalidConfigError(problem)


def segments_to_copy(
    local_segments: Iterable[LocalSegment], last_stable_offset: int, highest_copied_offset: int
) -> tuple[LocalSegment, ...]:
    """The local segments to copy to remote storage next, oldest first (Kafka's
    RLMCopyTask's candidate segments): closed (not the active segment), not empty, wholly
    below the last stable offset (no undecided transaction, nothing above the high
    watermark) and holding offsets above ``highest_copied_offset`` (-1: none copied)."""
    chosen = []
    for segment in local_segments:
        if segment.is_active or segment.last_offset >= last_stable_offset:
            break
        if not segment.is_empty and segment.last_offset > highest_copied_offset:
            chosen.append(segment)
    return tuple(chosen)


def local_only_size_bytes(local_segments: Iterable[LocalSegment], highest_copied_offset: int) -> int:
    """The bytes of the local segments not copied yet (based above ``highest_copied_offset``;
    Kafka's onlyLocalLogSegmentsSize): with the remote size, the whole log's size, each
    byte counted once."""
    return sum(s.size_bytes for s in local_segments if s.base_offset > highest_copied_offset)


def local_segments_to_delete(
    local_segments: Sequence[LocalSegment],
    remote_segments: Iterable[RemoteLogSegmentMetadata],
    config: TieredRetentionConfig,
    now_ms: int,
) -> tuple[LocalSegment, ...]:
    """The oldest local segments local retention deletes: each closed, copied already (the
    COPY_SEGMENT_FINISHED ones among ``remote_segments`` cover all its offsets), and past
    ``local.retention.ms`` (its newest record older than ``now_ms`` minus it) or beyond
    ``local.retention.bytes`` (the local log as big as it or bigger even without the segment:
    as Kafka, retention never cuts a log below its limit)."""
    retention_ms = config.effective_local_retention_ms
    retention_bytes = config.effective_local_retention_bytes
    covered = _copied_ranges(remote_segments)
    excess = sum(s.size_bytes for s in local_segments) - retention_bytes if retention_bytes >= 0 else 0
    chosen = []
    for segment in local_segments:
        copied = segment.is_empty or _covers(covered, segment.base_offset, segment.last_offset)
        expired = retention_ms >= 0 and segment.max_timestamp_ms < now_ms - retention_ms
        oversize = retention_bytes >= 0 and excess - segment.size_bytes >= 0
        if segment.is_active or not copied or not (expired or oversize):
            break
        excess -= segment.size_bytes
        chosen.append(segment)
    return tuple(chosen)


def remote_segments_to_delete(
    remote_segments: Iterable[RemoteLogSegmentMetadata],
    config: TieredRetentionConfig,
    now_ms: int,
    *,
    local_only_size_bytes: int,
    log_start_offset: int,
) -> tuple[RemoteLogSegmentMetadata, ...]:
    """The oldest readable remote segments retention deletes (Kafka's
    RemoteLogRetentionHandler), each wholly below ``log_start_offset`` (moved up by
    DeleteRecords), past ``retention.ms`` (its newest record older than ``now_ms`` minus it),
    or beyond ``retention.bytes`` (the whole log, ``local_only_size_bytes`` and the remote
    segments, as big as it or bigger even without the segment). Only COPY_SEGMENT_FINISHED segments
    are considered: unfinished copies and deletions are cleaned up apart."""
    finished = sorted(
        (m for m in remote_segments if m.state == _FINISHED), key=lambda m: (m.start_offset, m.end_offset)
    )
    retention_ms, retention_bytes = config.retention_ms, config.retention_bytes
    total_bytes = local_only_size_bytes + sum(m.segment_size_bytes for m in finished)
    excess = total_bytes - retention_bytes if retention_bytes >= 0 else 0
    chosen = []
    for metadata in finished:
        deleted_records = metadata.end_offset < log_start_offset
        expired = retention_ms >= 0 and metadata.max_timestamp_ms < now_ms - retention_ms
        oversize = retention_bytes >= 0 and excess - metadata.segment_size_bytes >= 0
        if not (deleted_records or expired or oversize):
            break
        excess -= metadata.segment_size_bytes
        chosen.append(metadata)
    return tuple(chosen)


def _copied_ranges(remote_segments: Iterable[RemoteLogSegmentMetadata]) -> list[tuple[int, int]]:
    """The offsets the COPY_SEGMENT_FINISHED segments hold, as merged ``[first, last]`` ranges
    (inclusive), rising."""
    ranges = sorted((m.start_offset, m.end_offset) for m in remote_segments if m.state == _FINISHED)
    merged: list[tuple[int, int]] = []
    for first, last in ranges:
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return merged


def _covers(ranges: list[tuple[int, int]], first: int, last: int) -> bool:
    i = bisect.bisect_right(ranges, first, key=lambda r: r[0]) - 1
    return i >= 0 and ranges[i][1] >= last
