"""A leader's reads: consumers' and followers' fetches (long polls, quotas, ACLs), offset look-
ups and the leader-epoch queries of followers (KIP-101) and consumers (KIP-320).

A part of :class:`~raylog.actors.replica.PartitionReplicaActor` (see
:class:`~raylog.actors.replica_parts.ReplicaPart` for what the parts share).
"""

from __future__ import annotations

import logging

import ray

from raylog import metrics
from raylog.actors.replica_parts import ReplicaPart, now_ms
from raylog.common.acl import CLUSTER_NAME, ACLOperation, ResourceType
from raylog.common.names import validate_client_id
from raylog.coordination.partition import READ_COMMITTED
from raylog.coordination.purgatory import DelayedFetch
from raylog.errors import (
    AuthorizationError,
    InvalidRequestError,
    OffsetMovedToTieredStorageError,
    SaslAuthenticationError,
)
from raylog.protocol import (
    FetchRequest,
    FetchResponse,
    ListOffsetsResponse,
    error_fields,
)

logger = logging.getLogger(__name__)

#: The longest a fetch waits for records, whatever its ``max_wait_ms`` asks (a follower's
#: replica.fetch.wait.max.ms too): a consumer's holds one of the ``fetch`` threads while it
#: is parked (:class:`~raylog.coordination.purgatory.DelayedFetch`),
#: and a client that asks days and goes away (a Kafka fetch of max_wait_ms 2**31 - 1 over a
#: connection it closes) must not keep it. An answer with no records before the client's wait
#: ends is one Kafka may give too; a Kafka consumer's request.timeout.ms (30 s by default) ends
#: its own wait no later.
FETCH_MAX_WAIT_MS_MAX = 30_000


class LeaderReads(ReplicaPart):
    """See the module docstring."""

    @ray.method(concurrency_group="fetch")
    def fetch(self, request: FetchRequest) -> FetchResponse:
        """Batches from ``request.offset``; waits (long poll) for ``min_bytes``; for a consumer,
        the response says how long to hold back for its consumer quota."""
        try:
            validate_client_id(request.client_id)
            self._authorize_fetch(request)
        except (InvalidRequestError, AuthorizationError, SaslAuthenticationError) as exc:
            return FetchResponse(**error_fields(exc))
        response = self._read(request)
        if request.replica_id >= 0:
            return response  # replication is never throttled
        with self._lock:
            throttle_ms = self._fetch_quotas.record(request.client_id, len(response.records), now_ms())
        return self._throttled(response, throttle_ms, "consumer")

    def _authorize_fetch(self, request: FetchRequest) -> None:
        """A consumer needs READ on the topic, a follower (a replica id) is the broker."""
        access = self._guard.access(request.session)
        if access is None:
            return
        if request.replica_id >= 0:
            access.require(ACLOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)
        access.require(ACLOperation.READ, ResourceType.TOPIC, self.partition.topic)

    def _read(self, request: FetchRequest) -> FetchResponse:
        started = now_ms()
        deadline_ms = started + min(max(0, request.max_wait_ms), FETCH_MAX_WAIT_MS_MAX)
        with self._lock:
            p = self.partition
            watermarks = (p.high_watermark, p.low_watermark)
            response = p.fetch(request)
            if response.error_code and response.error_code != OffsetMovedToTieredStorageError.code:
                return response
            if request.replica_id >= 0:
                if (p.high_watermark, p.low_watermark) != watermarks:
                    self._notify()  # wake acks=all producers, consumers, DeleteRecords
                self._maybe_propose_isr()
            if not response.error_code:
                response = self._await(DelayedFetch(request, response, deadline_ms))
        if response.error_code:  # below the local log start: the remote tier's
            response = self._remote_fetch(request, response)
            if response.error_code:
                return response
        latency_s = (now_ms() - started) / 1000
        metrics.record_fetch(self._metric_tags, request.replica_id >= 0, len(response.records), latency_s)
        return response

    def list_offsets(
        self, timestamp_ms: int, current_leader_epoch: int = -1, isolation_level: int = 0, session: str | None = None
    ) -> ListOffsetsResponse:
        """Kafka's ListOffsets of this partition; the caller of ``session`` needs DESCRIBE on the topic."""
        with self._lock:
            p = self.partition
            try:
                self._guard.require(session, ACLOperation.DESCRIBE, ResourceType.TOPIC, p.topic)
                offset, timestamp = p.list_offset(timestamp_ms, current_leader_epoch, isolation_level)
            except Exception as exc:  # noqa: BLE001
                return ListOffsetsResponse(**error_fields(exc))
            answer = ListOffsetsResponse(offset=offset, timestamp_ms=timestamp, leader_epoch=p.leader_epoch)
            if timestamp_ms < 0 or p.log_start_offset >= p.log.log_start_offset:
                return answer  # a sentinel, or nothing below the local log start
            end = p.last_stable_offset if isolation_level == READ_COMMITTED else p.high_watermark
        return self._remote_offset_for_time(timestamp_ms, answer, end)

    @ray.method(concurrency_group="replication")
    def end_offset_for_epoch(self, epoch: int, session: str | None = None) -> tuple[int, int, int]:
        """``(error_code, epoch', end_offset)`` for a follower truncating (KIP-101), or a
        consumer checking its position (KIP-320; DESCRIBE on the topic)."""
        try:
            self._guard.require(session, ACLOperation.DESCRIBE, ResourceType.TOPIC, self.partition.topic)
        except (AuthorizationError, SaslAuthenticationError) as exc:
            return exc.code, -1, -1
        with self._lock:
            return self.partition.answer_epoch_query(epoch)
