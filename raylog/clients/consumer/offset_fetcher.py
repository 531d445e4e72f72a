"""The offset look-ups of partition leaders (Kafka's OffsetFetcher): the offset of a
timestamp (earliest, latest or a time), and where a leader epoch ends (KIP-320)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from raylog.clients.cluster import RaylogCluster
from raylog.clients.security import ClientSession
from raylog.common.requests import READ_UNCOMMITTED
from raylog.errors import RaylogError
from raylog.protocol import error_of
from raylog.transport import call
from raylog.types import OffsetAndTimestamp, TopicPartition

#: Pause before an offset look-up is asked again after a retriable error.
LIST_OFFSETS_BACKOFF_S = 0.1


class OffsetFetcher:
    """A consumer's offset look-ups, made as its principal, at its isolation level."""

    def __init__(self, cluster: RaylogCluster, session: ClientSession, timeout_s: float, isolation_level: int):
        self._cluster, self._session = cluster, session
        self._timeout_s, self._isolation = timeout_s, isolation_level

    def offset(self, tp: TopicPartition, timestamp: int) -> OffsetAndTimestamp:
        """:func:`list_offset` of ``tp``."""
        return list_offset(self._cluster, tp, timestamp, self._timeout_s, self._isolation, self._session.token())

    def offsets(self, tps: list[TopicPartition], timestamp: int) -> dict[TopicPartition, OffsetAndTimestamp]:
        """:func:`list_offsets` of ``tps``."""
        return list_offsets(self._cluster, tps, timestamp, self._timeout_s, self._isolation, self._session.token())

    def offsets_at(self, partitions: Iterable[Any], timestamp: int) -> dict[TopicPartition, int]:
        """The offset of each of ``partitions`` for ``timestamp``, their leaders asked at once."""
        found = self.offsets([TopicPartition(*tp) for tp in partitions], timestamp)
        return {tp: o.offset for tp, o in found.items()}

    def offsets_for_times(self, timestamps: dict[Any, int]) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """See ``Consumer.offsets_for_times``.

        Raises:
            ValueError: a negative timestamp.
        """
        out = {}
        for tp, ts in timestamps.items():
            if ts < 0:
                raise ValueError(f"timestamp must be >= 0, got {ts}")
            found = self.offset(TopicPartition(*tp), ts)
            out[TopicPartition(*tp)] = None if found.offset < 0 else found
        return out

    def epoch_end(self, leader: Any, epoch: int) -> tuple[int, int, int]:
        """``(error_code, epoch', end_offset)``: where ``leader``'s log has ``epoch`` end
        (``epoch'``: the largest it has up to ``epoch``; -1 when none)."""
        return call(leader.end_offset_for_epoch.remote(epoch, self._session.token()), self._timeout_s)


def list_offsets(
    cluster: RaylogCluster,
    tps: list[TopicPartition],
    timestamp: int,
    timeout_s: float,
    isolation_level: int = READ_UNCOMMITTED,
    session: str | None = None,
) -> dict[TopicPartition, OffsetAndTimestamp]:
    """:func:`list_offset` of many partitions: their leaders asked at once (a consumer of
    hundreds of partitions must not ask them one after another), any that failed then asked
    again one by one, with :func:`list_offset`'s retries."""
    metadata = cluster.metadata()
    asked = {}
    for tp in tps:
        try:
            leader = metadata.leader(tp)
            asked[tp] = leader.list_offsets.remote(timestamp, metadata.leader_epoch(tp), isolation_level, session)
        except RaylogError:
            pass
    found = {}
    for tp in tps:
        try:
            response = call(asked[tp], timeout_s) if tp in asked else None
        except RaylogError:
            response = None
        if response is not None and error_of(response) is None:
            found[tp] = OffsetAndTimestamp(response.offset, response.timestamp_ms)
        else:
            found[tp] = list_offset(cluster, tp, timestamp, timeout_s, isolation_level, session)
    return found


def list_offset(
    cluster: RaylogCluster,
    tp: TopicPartition,
    timestamp: int,
    timeout_s: float,
    isolation_level: int = READ_UNCOMMITTED,
    session: str | None = None,
) -> OffsetAndTimestamp:
    """The offset of ``tp`` for ``timestamp`` (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP — the high
    watermark, or the LSO read_committed — or a time), asking its leader with the leader epoch the metadata says (so a
    deposed leader cannot answer, KIP-320); retriable errors (a moving leader, a new leader
    whose HW has not reached its epoch yet) are retried after a metadata refresh until
    ``timeout_s``.

    Raises:
        UnknownTopicOrPartitionError, LeaderNotAvailableError, KafkaTimeoutError, and the
        leader's errors that are not retriable.
    """
    deadline = time.monotonic() + timeout_s
    refresh = False
    while True:
        metadata = cluster.metadata(refresh=refresh)
        refresh = True
        try:
            leader = metadata.leader(tp)
            ref = leader.list_offsets.remote(timestamp, metadata.leader_epoch(tp), isolation_level, session)
            response = call(ref, timeout_s)
            error = error_of(response)
        except RaylogError as exc:
            error = exc
        if error is None:
            return OffsetAndTimestamp(response.offset, response.timestamp_ms)
        if not error.retriable or time.monotonic() >= deadline:
            raise error
        time.sleep(LIST_OFFSETS_BACKOFF_S)
