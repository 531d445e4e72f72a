"""The promises of a partition's tiered storage, checked against what the metadata topic, the
object store and the local logs hold (plain Python, no Ray). The seeded simulation of
:mod:`raylog.coordination.remote_log_tasks` checks them after every step. The replica's
integration tests check the same functions against a real store and a real
``__remote_log_metadata``.

Each check returns the violations it finds, as sentences (an empty list: none):

- :func:`readable_segments_are_whole`: no segment is readable (COPY_SEGMENT_FINISHED) whose
  upload is not COMPLETE in the store (never finished, or deleted under a reader).
- :class:`CopiedOnce`: no offset range became readable twice (two copies of one segment, the
  second by a leader that did not know of the first).
- :func:`nothing_left_unfinished`: once a leader's clean-up is over and nothing is in flight,
  no copy and no deletion is left half done.
- :func:`no_orphans`: once swept, the store holds objects only of segment ids the topic knows.
- :func:`no_offset_lost`: every offset from a start to the local log's end is in the local log
  or in a readable segment (local copies go before remote ones).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from raylog.errors import RaylogError
from raylog.storage.remote_log_metadata import RemoteLogEvent, RemoteLogSegmentId, RemoteLogSegmentMetadata
from raylog.storage.remote_log_metadata import RemoteLogSegmentState as State
from raylog.storage.remote_log_metadata_cache import LocalSegment, RemoteLogMetadataCache
from raylog.storage.remote_storage import UploadState


def replay(topic: str, partition: int, events: Iterable[RemoteLogEvent]) -> RemoteLogMetadataCache:
    """What every reader of the topic knows: the events applied in order, those the cache
    refuses skipped (as the replicas skip them)."""
    cache = RemoteLogMetadataCache(topic, partition)
    for event in events:
        try:
            cache.apply(event)
        except RaylogError:
            pass
    return cache


def readable_segments_are_whole(
    cache: RemoteLogMetadataCache, upload_state: Callable[[RemoteLogSegmentMetadata], UploadState]
) -> list[str]:
    """Every COPY_SEGMENT_FINISHED segment's objects are all in the store."""
    return [
        f"{m.segment_id} [{m.start_offset}, {m.end_offset}] is readable but its upload is {state.value}"
        for m in cache.segments(State.COPY_SEGMENT_FINISHED)
        if (state := upload_state(m)) is not UploadState.COMPLETE
    ]


class CopiedOnce:
    """Follows a cache as events are applied to it (call :meth:`check` after each): every
    segment that ever became readable holds offsets no earlier readable segment held."""

    def __init__(self) -> None:
        self._ranges: dict[RemoteLogSegmentId, tuple[int, int]] = {}

    def check(self, cache: RemoteLogMetadataCache) -> list[str]:
        violations = []
        for m in cache.segments(State.COPY_SEGMENT_FINISHED):
            if m.segment_id in self._ranges:
                continue
            for other, (start, end) in self._ranges.items():
                if m.start_offset <= end and start <= m.end_offset:
                    violations.append(
                        f"{m.segment_id} [{m.start_offset}, {m.end_offset}] copies offsets of {other} [{start}, {end}]"
                    )
            self._ranges[m.segment_id] = (m.start_offset, m.end_offset)
        return violations


def nothing_left_unfinished(cache: RemoteLogMetadataCache) -> list[str]:
    """No COPY_SEGMENT_STARTED and no DELETE_SEGMENT_STARTED segment is left."""
    return [
        f"{m.segment_id} [{m.start_offset}, {m.end_offset}] is left in {m.state.name}"
        for m in cache.unfinished_copies() + cache.deletions_in_progress()
    ]


def no_orphans(cache: RemoteLogMetadataCache, stored: Iterable[RemoteLogSegmentId]) -> list[str]:
    """Every segment id with objects in the store is one the topic knows."""
    return [f"{sid} has objects in the store but no metadata" for sid in stored if cache.segment(sid) is None]


def no_offset_lost(
    cache: RemoteLogMetadataCache, local_segments: Sequence[LocalSegment], from_offset: int
) -> list[str]:
    """Every offset in ``[from_offset, log end)`` is in a local segment or in a readable one."""
    if not local_segments:
        return []
    ranges = sorted(
        [(m.start_offset, m.end_offset) for m in cache.segments(State.COPY_SEGMENT_FINISHED)]
        + [(s.base_offset, s.last_offset) for s in local_segments if not s.is_empty]
    )
    next_offset, log_end_offset = from_offset, local_segments[-1].last_offset + 1
    for start, end in ranges:
        if start > next_offset:
            break
        next_offset = max(next_offset, end + 1)
    if next_offset >= log_end_offset:
        return []
    return [f"offsets from {next_offset} (below the log end {log_end_offset}) are in neither tier"]
