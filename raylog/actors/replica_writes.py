"""A leader's writes: producers' batches (idempotent and transactional, verified with the
transaction coordinator), transaction markers, acks=all waits for the ISR, and
DeleteRecords.

A part of :class:`~raylog.actors.replica.PartitionReplicaActor` (see
:class:`~raylog.actors.replica_parts.ReplicaPart` for what the parts share).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import ray

from raylog import metrics
from raylog.actors.replica_parts import PEER_CALL_TIMEOUT_S, ReplicaPart, now_ms
from raylog.common.acl import ACLOperation, ResourceType
from raylog.common.names import validate_client_id
from raylog.coordination.partition import SequenceGap
from raylog.coordination.purgatory import DelayedDelete, DelayedProduce, DelayedRetry
from raylog.coordination.txn_verification import VerificationNeeded, verification_error
from raylog.errors import (
    AuthorizationError,
    CoordinatorNotAvailableError,
    InvalidRequestError,
    NotLeaderOrFollowerError,
    OutOfOrderSequenceError,
    RaylogError,
    RequestTimedOutError,
    SaslAuthenticationError,
)
from raylog.protocol import (
    DeleteRecordsResponse,
    ProduceRequest,
    ProduceResponse,
    error_fields,
    error_of,
)
from raylog.types import ProducerState

logger = logging.getLogger(__name__)


class LeaderWrites(ReplicaPart):
    """See the module docstring."""

    def produce(self, request: ProduceRequest) -> ProduceResponse:
        """Append a producer's batch; for acks=all, wait until the ISR has it; the response
        says how long the client is to hold back for its producer quota.

        An idempotent batch that arrives before an earlier one of its producer waits for it
        (Ray may run pipelined calls out of order), unless the request says its batches come
        in order (a Kafka connection): then it is refused at once. A retry of a batch already
        appended is answered with the original offsets, after the same wait for the ISR. A
        transaction's first batch here is verified with its coordinator first
        (:meth:`_verify_transaction`)."""
        try:
            validate_client_id(request.client_id)
            self._guard.require(request.session, ACLOperation.WRITE, ResourceType.TOPIC, self.partition.topic)
        except (InvalidRequestError, AuthorizationError, SaslAuthenticationError) as exc:
            return _produce_error(exc)
        response = self._append(request)
        with self._lock:
            throttle_ms = self._produce_quotas.record(request.client_id, len(request.records), now_ms())
        return self._throttled(response, throttle_ms, "producer")

    def _append(self, request: ProduceRequest) -> ProduceResponse:
        started = now_ms()
        deadline_ms = started + request.timeout_ms
        with self._lock:
            while True:
                try:
                    outcome = self.partition.append_as_leader(
                        request.records,
                        request.acks,
                        request.first_unacked_sequence,
                        request.transactional_id,
                        verify=True,
                        in_order=request.in_order,
                    )
                    break
                except VerificationNeeded as needed:
                    error = self._verify_transaction(needed, deadline_ms)
                    if error is not None:
                        return _produce_error(error)
                except SequenceGap:  # tried again once another batch is appended
                    gap = OutOfOrderSequenceError("an earlier batch of this producer never arrived")
                    error = self._await(DelayedRetry(gap, deadline_ms))
                    if error is not None:
                        return _produce_error(error)
                except Exception as exc:  # noqa: BLE001 — every error travels back as a code
                    return ProduceResponse(**error_fields(exc), record_errors=getattr(exc, "record_errors", ()))
            self._notify()
            self._maybe_propose_isr()
            if request.acks == -1:
                error = self._await_replication(outcome.last_offset + 1, deadline_ms, "produce")
                if error is not None:
                    return _produce_error(error)
            log_start_offset = self.partition.log_start_offset
        latency_s = (now_ms() - started) / 1000
        metrics.record_produce(self._metric_tags, outcome.record_count, len(request.records), latency_s)
        return ProduceResponse(
            base_offset=outcome.first_offset,
            log_append_time_ms=outcome.log_append_time_ms,
            log_start_offset=log_start_offset,
        )

    @ray.method(concurrency_group="control")
    def describe_producers(self, session: str | None = None) -> list[ProducerState]:
        """The producers this leader knows (Kafka's DescribeProducers), for finding hanging
        transactions (see :mod:`raylog.coordination.txn_verification`).

        Raises:
            NotLeaderOrFollowerError: this replica does not lead.
            TopicAuthorizationFailedError: the caller of ``session`` may not read the topic.
        """
        self._guard.require(session, ACLOperation.READ, ResourceType.TOPIC, self.partition.topic)
        with self._lock:
            p = self.partition
            if not p.is_leader:
                raise NotLeaderOrFollowerError(f"{p.name}: broker {p.broker_id} does not lead")
            return p.producers.describe()

    def _verify_transaction(self, needed: VerificationNeeded, deadline_ms: float) -> RaylogError | None:
        """Ask the coordinator of ``needed``'s transactional id whether this partition is in
        the producer's ongoing transaction (holding ``_lock`` once, released while it asks);
        None when it is (recorded in the partition), else what to answer the producer."""
        p = self.partition
        timeout_s = min(PEER_CALL_TIMEOUT_S, max(0.0, deadline_ms - now_ms()) / 1000)
        self._lock.release()
        try:
            error = _ask_transaction_coordinator(
                self._controller, needed, p.topic, p.partition, timeout_s, self._guard.broker_token()
            )
        finally:
            self._lock.acquire()
        p.verification_answered(needed, error is None)
        return error

    @ray.method(concurrency_group="markers")
    def write_txn_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        timeout_ms: int = 30_000,
        bumps_epoch: bool = True,
    ) -> ProduceResponse:
        """A transaction coordinator's marker (see :meth:`Partition.append_marker`), answered
        once the ISR has it; a stale marker is answered once the ISR has everything this
        replica holds (the first attempt, written but not answered, may still be
        replicating). Either way it is then told to :meth:`_marker_written`."""
        deadline_ms = now_ms() + timeout_ms
        with self._lock:
            try:
                self._require_markers_accepted()
                info = self.partition.append_marker(producer_id, producer_epoch, commit, coordinator_epoch, bumps_epoch)
            except Exception as exc:  # noqa: BLE001 — every error travels back as a code
                return ProduceResponse(**error_fields(exc))
            self._notify()
            self._maybe_propose_isr()
            end = self.partition.log.log_end_offset if info is None else info.last_offset + 1
            error = self._await_replication(end, deadline_ms, "markers")
            if error is not None:
                return _produce_error(error)
            self._marker_written(producer_id, producer_epoch, commit, bumps_epoch)
        return ProduceResponse(base_offset=-1 if info is None else info.first_offset)

    def _require_markers_accepted(self) -> None:
        """Raise a retriable error while this replica cannot take markers (holding ``_lock``)."""

    def _marker_written(self, producer_id: int, producer_epoch: int, commit: bool, bumps_epoch: bool) -> None:
        """A marker of ``producer_id`` with ``producer_epoch`` (bumped, or the producer's
        current epoch) is replicated, now or before (holding ``_lock``)."""

    def _await_replication(self, offset: int, deadline_ms: float, pool: str) -> RaylogError | None:
        """Wait (holding ``_lock``, released meanwhile, parked in the purgatory as a call of
        ``pool``) until the HW reaches ``offset`` in this leader epoch (see
        :class:`~raylog.coordination.purgatory.DelayedProduce`); None, or the error to answer."""
        return self._await(DelayedProduce(offset, self.partition.leader_epoch, deadline_ms, pool))

    def delete_records(self, offset: int, timeout_ms: int, session: str | None = None) -> DeleteRecordsResponse:
        """Kafka's DeleteRecords on this leader: the records below ``offset`` (-1: the HW) are
        deleted here at once and answered once every ISR member deleted them too (the low
        watermark reached ``offset``), or REQUEST_TIMED_OUT after ``timeout_ms`` (they are
        deleted all the same, followers on their next fetches). The caller of ``session``
        needs DELETE on the topic."""
        deadline_ms = now_ms() + timeout_ms
        p = self.partition
        with self._lock:
            try:
                self._guard.require(session, ACLOperation.DELETE, ResourceType.TOPIC, p.topic)
                target, epoch = p.delete_records(offset), p.leader_epoch
            except Exception as exc:  # noqa: BLE001 — every error travels back as a code
                return DeleteRecordsResponse(**error_fields(exc))
            self._notify()  # parked follower fetches end now, with the new log start
            error = self._await(DelayedDelete(target, epoch, deadline_ms))
            if error is None:
                return DeleteRecordsResponse(low_watermark=p.low_watermark)
            if isinstance(error, RequestTimedOutError):
                return DeleteRecordsResponse(**error_fields(error), low_watermark=p.low_watermark)
            return DeleteRecordsResponse(**error_fields(error))


def _ask_transaction_coordinator(
    controller: Callable[[], Any],
    needed: VerificationNeeded,
    topic: str,
    partition: int,
    timeout_s: float,
    session: str,
) -> RaylogError | None:
    """The coordinator's word on ``needed`` within ``timeout_s`` (Kafka's AddPartitionsToTxn
    with verifyOnly), asked as the broker (``session``): None if the partition is in the
    producer's ongoing transaction, else the error to answer the producer (see
    :func:`verification_error`)."""
    started = time.monotonic()
    try:
        _, coordinator = ray.get(
            controller().find_transaction_coordinator.remote(needed.transactional_id, session=session),
            timeout=timeout_s,
        )
        if coordinator is None:
            raise CoordinatorNotAvailableError(f"no coordinator for {needed.transactional_id!r} right now")
        answer = ray.get(
            coordinator.verify_transaction.remote(
                needed.transactional_id, needed.producer_id, needed.producer_epoch, topic, partition
            ),
            timeout=max(0.0, timeout_s - (time.monotonic() - started)),
        )
        error = error_of(answer)
    except (ValueError, ray.exceptions.RayError) as exc:  # (a timeout is a RayError)
        error = RequestTimedOutError(f"the transaction coordinator did not answer: {exc!r}")
    except RaylogError as exc:
        error = exc
    return None if error is None else verification_error(error)


def _produce_error(error: RaylogError) -> ProduceResponse:
    return ProduceResponse(**error_fields(error))
