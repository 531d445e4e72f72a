"""The producer's background thread (Kafka's ``Sender``): takes the batches that may go from
the accumulator, numbers them (idempotence: producer id, epoch and per-partition sequence),
makes one leader call per batch, and completes, retries or fails each on its reply.

Up to ``max_in_flight`` batches per partition are in flight; retriable errors are retried
after ``backoff_s`` with a metadata refresh, until the batch's delivery timeout. A retried
batch goes back into its partition's queue in the order it was first sent, ahead of batches
not sent yet. With idempotence each request says the sequence of the oldest batch of its
partition not yet acknowledged (see :mod:`raylog.coordination.producer_state`).

Should the thread fail (a bug), every record not yet done fails with
:class:`IllegalStateError` and the accumulator refuses new ones: no future is left waiting.
"""

from __future__ import annotations

import collections
import concurrent.futures
import itertools
import logging
import struct
import threading
import time
from typing import Any

from raylog import metrics
from raylog.clients.cluster import METADATA_TIMEOUT_S, RaylogCluster
from raylog.clients.producer.producer_batch import ProducerBatch
from raylog.clients.producer.record_accumulator import RecordAccumulator
from raylog.clients.producer.transaction_manager import TransactionManager
from raylog.clients.security import ClientSession
from raylog.common.record_batch import NO_SEQUENCE, increment_sequence
from raylog.errors import (
    IllegalStateError,
    InvalidProducerEpochError,
    InvalidRecordError,
    KafkaTimeoutError,
    NetworkExceptionError,
    RaylogError,
)
from raylog.protocol import ProduceRequest, error_of, records_payload
from raylog.transport import call, translate
from raylog.types import TopicPartition

#: After a leader's process dies, how long a batch waits for metadata naming another leader
#: before it is sent to the same actor again (Ray restarts it in about that time or more).
LEADER_FAILOVER_WAIT_S = 1.5
#: How long the sender waits for metadata it asked for before it sends with what it knows
#: (a refresh takes milliseconds; a paused or restarting controller must not stop writes to
#: leaders that are up).
METADATA_REFRESH_WAIT_S = 1.0

logger = logging.getLogger("raylog.clients.producer")


class Sender:
    """Ships the accumulator's batches to their partitions' leaders from its own thread.

    Args:
        accumulator: the batches to send; its :attr:`~RecordAccumulator.cond` guards the
            sender's state too.
        transactions: the producer's transaction state (partitions are added to the open
            transaction before their first batch goes).
        acks, request_timeout_ms, client_id, codec: what each request carries.
        linger_s: how long an open batch waits for more records.
        max_in_flight: batches in flight per partition.
        retries, backoff_s: the retry policy.
        idempotent: number the batches (producer id, epoch and sequence).
        metadata_max_age_s: refresh metadata at least this often.
    """

    def __init__(
        self,
        cluster: RaylogCluster,
        session: ClientSession,
        accumulator: RecordAccumulator,
        transactions: TransactionManager,
        *,
        acks: int,
        request_timeout_ms: int,
        client_id: str,
        codec: int,
        linger_s: float,
        max_in_flight: int,
        retries: int,
        backoff_s: float,
        idempotent: bool,
        metadata_max_age_s: float,
    ):
        self._cluster, self._session = cluster, session
        self._accumulator = accumulator
        self._cond = accumulator.cond
        self._transactions = transactions
        self._transactional_id = transactions.transactional_id
        self._acks = acks
        self._request_timeout_ms = request_timeout_ms
        self._client_id = client_id
        self._codec = codec
        self._linger_s = linger_s
        self._max_in_flight = max_in_flight
        self._retries = retries
        self._backoff_s = backoff_s
        self._idempotent = idempotent
        self._metadata_max_age_s = metadata_max_age_s
        self._metadata_stale = False
        self._metadata_refreshed_s = time.monotonic()
        self.throttle_time_ms = 0
        #: Partitions whose leader asked this client to hold back, until when (monotonic s).
        self._throttled_until: dict[TopicPartition, float] = {}
        self._in_flight: dict[TopicPartition, int] = collections.defaultdict(int)
        self.producer_id = -1  # from the controller as the sender starts (sender thread only)
        self.producer_epoch = 0
        self.sequences: dict[TopicPartition, int] = collections.defaultdict(int)
        #: Idempotence, per partition: batches sent and not done yet, in the order first sent,
        #: and how many batches were ever sent (the next ``partition_index``).
        self._unacked: dict[TopicPartition, list[ProducerBatch]] = collections.defaultdict(list)
        self._sent_count: dict[TopicPartition, int] = collections.defaultdict(int)
        self._dispatch_orders = itertools.count()
        self._thread = threading.Thread(target=self.run, name="raylog-producer-sender", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float | None) -> None:
        self._thread.join(timeout)

    def set_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        """Number the next batches under this producer id and epoch, from sequence 0 (the
        transaction coordinator's answer to init_transactions or end_txn; holding ``_cond``)."""
        self.producer_id, self.producer_epoch = producer_id, producer_epoch
        self.sequences.clear()

    def run(self) -> None:
        try:
            self._take_producer_id()
            while True:
                with self._cond:
                    batches = self._wait_for_sendable()
                    if batches is None:
                        return
                if self._metadata_stale or time.monotonic() - self._metadata_refreshed_s >= self._metadata_max_age_s:
                    try:
                        self._metadata_stale = not self._cluster.refresh_metadata(METADATA_REFRESH_WAIT_S)
                    except RaylogError:
                        self._metadata_stale = True
                    if not self._metadata_stale:
                        self._metadata_refreshed_s = time.monotonic()
                if self._transactional_id is not None:
                    batches = self._add_to_transaction(batches)
                for batch in batches:
                    self._dispatch(batch)
        except BaseException as exc:  # a bug: no future may wait for a thread that is gone
            logger.exception("producer sender thread failed; failing every record not yet done")
            self._fail_everything(exc)

    def _fail_everything(self, cause: BaseException) -> None:
        """Fail every batch not done with IllegalStateError, and refuse sends from now on."""
        error = IllegalStateError(f"the producer's sender failed: {type(cause).__name__}: {cause}")
        error.__cause__ = cause
        with self._cond:
            batches = self._accumulator.abort_all(error)
            self._unacked.clear()
        for batch in batches:
            batch.finish(-1, -1, error)

    def _wait_for_sendable(self) -> list[ProducerBatch] | None:
        """Block (holding ``_cond``) until batches can go; None when closed and drained."""
        accumulator = self._accumulator
        while True:
            now = time.monotonic()
            wake_at = None
            for batch in list(accumulator.open.values()):
                due = batch.created_s + self._linger_s
                if due > now and not (accumulator.flushing or accumulator.closed):
                    wake_at = due if wake_at is None else min(wake_at, due)
                elif not accumulator.queues[batch.tp] and self._can_send_new(batch.tp):
                    accumulator.close_batch(batch)
                # else: its partition's pipe is full; the batch keeps growing until a reply
                # frees a slot (the reply wakes this loop), as Kafka's accumulator does.
            ready = []
            for tp, queue in accumulator.queues.items():
                throttled_until = self._throttled_until.get(tp, 0.0)
                if queue and throttled_until > now:
                    wake_at = throttled_until if wake_at is None else min(wake_at, throttled_until)
                    continue
                while queue and self._in_flight[tp] < self._max_in_flight:
                    head = queue[0]
                    if head.retry_at_s > now:
                        wake_at = head.retry_at_s if wake_at is None else min(wake_at, head.retry_at_s)
                        break
                    if head.dispatch_order < 0 and not self._can_send_new(tp):
                        break  # a reply makes room (and wakes this loop)
                    ready.append(queue.popleft())
                    self._in_flight[tp] += 1
                    if head.dispatch_order < 0:
                        self._first_send(head)
            if ready:
                return ready
            if accumulator.closed and not accumulator.incomplete:
                return None
            self._cond.wait(None if wake_at is None else max(0.0, wake_at - now))

    def _can_send_new(self, tp: TopicPartition) -> bool:
        """Whether a batch not sent yet may go (holding ``_cond``): a slot in flight and, with
        idempotence, fewer than ``max_in_flight`` batches from the oldest one unacknowledged
        to the newest sent. Replies may come in any order, and a leader remembers only its
        producer's last batches: a retry of the oldest must still be recognised there."""
        if self._in_flight[tp] >= self._max_in_flight:
            return False
        unacked = self._unacked[tp]
        return not unacked or self._sent_count[tp] - unacked[0].partition_index < self._max_in_flight

    def _first_send(self, batch: ProducerBatch) -> None:
        """Rank a batch about to be sent for the first time (holding ``_cond``)."""
        batch.dispatch_order = next(self._dispatch_orders)
        if self._idempotent:
            batch.partition_index = self._sent_count[batch.tp]
            self._sent_count[batch.tp] += 1
            self._unacked[batch.tp].append(batch)

    def _add_to_transaction(self, batches: list[ProducerBatch]) -> list[ProducerBatch]:
        """Add the partitions of ``batches`` that are new to the transaction (one call); the
        batches that may go (the rest fail with the call's error)."""
        try:
            self._transactions.add_partitions({b.tp for b in batches}, self.producer_id, self.producer_epoch)
        except RaylogError as exc:
            for batch in batches:
                self._completed(batch, None, exc, sent=False)
            return []
        return batches

    def _dispatch(self, batch: ProducerBatch) -> None:
        try:
            if self._idempotent and batch.producer_id < 0:
                self._assign_sequence(batch)
            data = batch.encode(self._codec)
            leader = self._cluster.metadata().leader(batch.tp)
            if leader == batch.leader and time.monotonic() < batch.unreachable_until_s:
                # Its process just died: calls to it would wait for Ray to restart it, while
                # the controller may already be electing another. Look again shortly.
                raise NetworkExceptionError(f"the leader of {batch.tp} is down; waiting for a new one")
            batch.leader = leader
            # As an array, Ray ships the bytes out of band (the leader reads them where they lie
            # in the object store); as bytes they are copied into the pickle and out again:
            # a 6.5 MB call took 8-11 ms that way, 3 ms this way. A small batch rides inside
            # the call either way, and as bytes it costs each side ~50 us less CPU.
            request = ProduceRequest(
                records_payload(data),
                self._acks,
                self._request_timeout_ms,
                self._client_id,
                self._first_unacked_sequence(batch),
                transactional_id=self._transactional_id if batch.transactional else None,
                session=self._session.token(),
            )
            ref = leader.produce.remote(request)
        except RaylogError as exc:
            # Not sent (e.g. no leader yet: a new topic's replicas are starting). As in Kafka,
            # the batch waits for its leader until its delivery timeout; no retry is spent.
            self._completed(batch, None, exc, sent=False)
            return
        except (TypeError, ValueError, OverflowError, struct.error) as exc:  # records the format refuses
            self._completed(batch, None, InvalidRecordError(f"{type(exc).__name__}: {exc}"))
            return
        if self._acks == 0:
            self._completed(batch, None, None)
            return
        ref.future().add_done_callback(lambda future: self._on_reply(batch, future))

    def _take_producer_id(self) -> None:
        """An idempotent producer takes its producer id as it starts, as Kafka's clients do, so
        that its first batches do not wait on the controller (a controller paused or restarting
        then delays only producers started meanwhile). One that fails is taken again at the
        first send (sender thread only)."""
        if not self._idempotent or self._transactional_id is not None:
            return  # a transactional producer's comes from init_transactions()
        try:
            self.producer_id = self._producer_id_from_controller()
        except RaylogError as exc:
            logger.warning("no producer id from the controller (asked again at the first send): %s", exc)

    def _producer_id_from_controller(self) -> int:
        return call(self._cluster.controller.init_producer_id.remote(session=self._session.token()), METADATA_TIMEOUT_S)

    def _assign_sequence(self, batch: ProducerBatch) -> None:
        """Number the batch: sequences follow first dispatch order, which is queue order."""
        if self.producer_id < 0:
            self.producer_id = self._producer_id_from_controller()
            self.sequences.clear()
        batch.producer_id = self.producer_id
        batch.producer_epoch = self.producer_epoch
        batch.transactional = self._transactional_id is not None
        batch.base_sequence = self.sequences[batch.tp]
        self.sequences[batch.tp] = increment_sequence(batch.base_sequence, batch.record_count)

    def _first_unacked_sequence(self, batch: ProducerBatch) -> int:
        """The base sequence of the oldest batch of ``batch``'s partition and producer id
        not done yet (``batch`` itself at the latest); NO_SEQUENCE if not idempotent."""
        if batch.producer_id < 0:
            return NO_SEQUENCE
        with self._cond:
            unacked = self._unacked[batch.tp]
            return next((b.base_sequence for b in unacked if b.producer_id == batch.producer_id), batch.base_sequence)

    def _on_reply(self, batch: ProducerBatch, future: concurrent.futures.Future) -> None:
        try:
            try:
                response = future.result()
            except Exception as exc:  # noqa: BLE001 — Ray's failures and any other become raylog errors
                self._completed(batch, None, translate(exc))
                return
            self._completed(batch, response, error_of(response))
        except BaseException as exc:  # a bug: no future may wait for a reply that was dropped
            logger.exception("producer failed on a reply; failing every record not yet done")
            self._fail_everything(exc)

    def _completed(self, batch: ProducerBatch, response: Any, error: RaylogError | None, sent: bool = True) -> None:
        now = time.monotonic()
        if response is not None:
            self.throttle_time_ms = response.throttle_time_ms
            if response.throttle_time_ms:
                metrics.record_throttle("producer", self._client_id, response.throttle_time_ms)
        accumulator = self._accumulator
        retry = (
            error is not None
            and error.retriable
            and (batch.attempts < self._retries or not sent)
            and now + self._backoff_s < batch.deadline_s
            and not accumulator.closed
            and accumulator.failure is None
        )
        if isinstance(error, NetworkExceptionError) and batch.leader is not None and not batch.unreachable_until_s:
            batch.unreachable_until_s = now + LEADER_FAILOVER_WAIT_S
        with self._cond:
            self._in_flight[batch.tp] -= 1
            if response is not None and response.throttle_time_ms:
                until = now + response.throttle_time_ms / 1000
                self._throttled_until[batch.tp] = max(until, self._throttled_until.get(batch.tp, 0.0))
            if retry:
                batch.attempts += sent
                batch.retry_at_s = now + self._backoff_s
                self._metadata_stale = self._metadata_stale or error.invalid_metadata
                accumulator.requeue(batch)
            elif accumulator.deallocate(batch) and self._idempotent:  # (False: failed with everything meanwhile)
                self._unacked[batch.tp].remove(batch)
            self._cond.notify_all()
        if retry:
            return
        self._finish(batch, response, error, now)

    def _finish(self, batch: ProducerBatch, response: Any, error: RaylogError | None, now: float) -> None:
        """Complete a batch that is not retried, with ``error`` made final."""
        if error is not None and error.retriable and now + self._backoff_s >= batch.deadline_s:
            cause = error
            error = KafkaTimeoutError(f"delivery_timeout_ms passed for {batch.tp}: {cause}")
            error.__cause__ = cause
        if error is not None and batch.transactional:
            self._transactions.failed(error)
            if isinstance(error, InvalidProducerEpochError):
                error = self._transactions.fenced
        elif error is not None and batch.producer_id >= 0:
            # The leader may now wait for this batch's sequence forever: number the next
            # batches under a new producer id (batches in flight under the old one may
            # then fail with OutOfOrderSequenceError, never be reordered).
            with self._cond:
                if self.producer_id == batch.producer_id:
                    self.producer_id = -1
        if response is None or error is not None:
            batch.finish(-1, -1, error)
        else:
            batch.finish(response.base_offset, response.log_append_time_ms, None)
