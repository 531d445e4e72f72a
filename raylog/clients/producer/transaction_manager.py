"""A transactional producer's side of Kafka's transactions (kafka-python's
``kafka/producer/transaction_manager.py``): its calls to the transactional id's coordinator,
the partitions and consumer groups added to the open transaction, and whether the
transaction failed (abortable) or a newer instance fenced this one (for good).

The producer id and epoch the calls carry are the sender's (it numbers the batches with
them): each call takes them as arguments and the answers that change them are returned.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from raylog.clients.cluster import RaylogCluster
from raylog.clients.group import CoordinatorClient, offsets_to_commit
from raylog.clients.security import ClientSession
from raylog.common.names import OFFSETS_TOPIC
from raylog.errors import (
    ConcurrentTransactionsError,
    IllegalStateError,
    InvalidProducerEpochError,
    KafkaTimeoutError,
    ProducerFencedError,
    RaylogError,
    TransactionAbortableError,
)
from raylog.protocol import error_of
from raylog.transport import call
from raylog.types import OffsetAndMetadata, TopicPartition

#: Pause before asking a transaction coordinator again after CONCURRENT_TRANSACTIONS (a
#: step of the same transactional id in flight, or markers being written: milliseconds).
CONCURRENT_TRANSACTIONS_BACKOFF_S = 0.01


class TransactionManager:
    """The transaction state of one producer (``transactional_id`` None: not transactional,
    and every transaction call is refused; ``outside`` stays False, so sends are never)."""

    def __init__(
        self,
        cluster: RaylogCluster,
        session: ClientSession,
        transactional_id: str | None,
        transaction_timeout_ms: int,
        max_block_s: float,
        backoff_s: float,
    ):
        self._cluster, self._session = cluster, session
        self.transactional_id = transactional_id
        self._transaction_timeout_ms = transaction_timeout_ms
        self._max_block_s, self._backoff_s = max_block_s, backoff_s
        self._coordinator: CoordinatorClient | None = None
        #: Per group id sent offsets for: its coordinator, and its __consumer_offsets partition.
        self._group_coordinators: dict[str, CoordinatorClient] = {}
        self._offsets_partitions: dict[str, TopicPartition] = {}
        #: Transactional: sends are refused outside a transaction (never True otherwise).
        self.outside = transactional_id is not None
        self.partitions: set[TopicPartition] = set()  # added to the open transaction
        #: Groups whose offsets the open (and the previous) transaction sent: a transaction
        #: adds the previous one's offsets partitions with its first partitions, in one call
        #: (a loop sends offsets every time; a partition added for nothing costs one marker).
        self._groups: set[str] = set()
        self._previous_groups: set[str] = set()
        #: One add_partitions call at a time (the sender's and send_offsets_to_transaction's):
        #: a second call meanwhile would get CONCURRENT_TRANSACTIONS and back off.
        self._registering = threading.Lock()
        self.error: RaylogError | None = None  # a send of the open transaction failed
        self.fenced: RaylogError | None = None  # a newer instance took over: nothing works

    def init_producer_id(self, timeout: float | None) -> Any:
        """Register the transactional id with its coordinator; the answer carries this
        instance's producer id and epoch."""
        return self.call("init_producer_id", self.transactional_id, self._transaction_timeout_ms, timeout=timeout)

    def begin(self, producer_id: int) -> None:
        """Open a transaction (see :meth:`Producer.begin_transaction`)."""
        if self.fenced is not None:
            raise self.fenced
        if self.transactional_id is None or producer_id < 0:
            raise IllegalStateError("call init_transactions before begin_transaction")
        if not self.outside:
            raise IllegalStateError("a transaction is open already")
        self.partitions.clear()
        self.error = None
        self.outside = False

    def send_offsets(
        self,
        offsets: dict[TopicPartition, OffsetAndMetadata | int],
        group_metadata: dict[str, Any] | str,
        producer_id: int,
        producer_epoch: int,
        timeout: float | None,
    ) -> None:
        """Commit a group's offsets within the open transaction (see
        :meth:`Producer.send_offsets_to_transaction`)."""
        self.require_transaction()
        meta = {"group_id": group_metadata} if isinstance(group_metadata, str) else group_metadata
        group_id = meta["group_id"]
        committed = offsets_to_commit(offsets)
        try:
            coordinator = self._group_coordinators.get(group_id)
            if coordinator is None:  # kept: the next transactions find it without the controller
                coordinator = CoordinatorClient(
                    self._cluster, group_id, self._max_block_s, self._backoff_s, session=self._session
                )
                token = self._session.token()
                partition, _ = call(
                    self._cluster.controller.find_coordinator.remote(group_id, session=token), self._max_block_s
                )
                self._group_coordinators[group_id] = coordinator
                self._offsets_partitions[group_id] = TopicPartition(OFFSETS_TOPIC, partition)
            self._groups.add(group_id)
            self.register([self._offsets_partitions[group_id]], producer_id, producer_epoch, timeout)
            coordinator.call(
                "txn_commit_offsets",
                group_id,
                meta.get("member_id", ""),
                meta.get("generation", -1),
                meta.get("group_instance_id"),
                producer_id,
                producer_epoch,
                committed,
            )
        except RaylogError as exc:
            self.failed(exc)
            if self.fenced is not None:
                raise self.fenced from exc  # (the group's partition says INVALID_PRODUCER_EPOCH)
            raise

    def require_committable(self) -> None:
        """Raises what a commit of the open transaction would fail with, if anything."""
        if self.fenced is not None:
            raise self.fenced
        if self.error is not None:
            raise TransactionAbortableError(f"a send of the transaction failed, abort it: {self.error}")

    def end(self, commit: bool, producer_id: int, producer_epoch: int, timeout: float | None) -> Any:
        """Commit or abort the open transaction with its coordinator; the answer carries the
        producer id and epoch of the next one. Sends are refused from then on until the next
        :meth:`begin`."""
        answer = self.call("end_txn", self.transactional_id, producer_id, producer_epoch, commit, timeout=timeout)
        self.outside = True
        self._previous_groups, self._groups = self._groups, set()
        return answer

    def require_sendable(self) -> None:
        """Raises if sends are refused (a transactional producer outside a transaction)."""
        if self.outside:
            raise self.fenced or IllegalStateError("a transactional producer sends only within a transaction")

    def require_transaction(self) -> None:
        if self.fenced is not None:
            raise self.fenced
        if self.transactional_id is None or self.outside:
            raise IllegalStateError("no transaction is open (call begin_transaction)")

    def failed(self, error: RaylogError) -> None:
        """A call of the open transaction failed: fenced for good, or abortable."""
        if isinstance(error, (ProducerFencedError, InvalidProducerEpochError)):
            fenced = ProducerFencedError(f"transactional id {self.transactional_id!r}: {error}")
            self.fenced = fenced
        elif self.error is None:
            self.error = error

    def add_partitions(self, partitions: set[TopicPartition], producer_id: int, producer_epoch: int) -> None:
        """Add those of ``partitions`` new to the transaction (with the previous transaction's
        offsets partitions, on its first), in one call; nothing to do for partitions added.

        Raises:
            RaylogError: the call failed (and the transaction with it).
        """
        new = partitions - self.partitions
        if not new:
            return
        new |= {self._offsets_partitions[g] for g in self._previous_groups} - self.partitions
        try:
            self.register(sorted(new), producer_id, producer_epoch, None)
        except RaylogError as exc:
            self.failed(exc)
            raise

    def register(
        self, partitions: list[TopicPartition], producer_id: int, producer_epoch: int, timeout: float | None
    ) -> None:
        with self._registering:
            new = [tp for tp in partitions if tp not in self.partitions]
            if new:
                self.call(
                    "add_partitions",
                    self.transactional_id,
                    producer_id,
                    producer_epoch,
                    [tuple(tp) for tp in new],
                    timeout=timeout,
                )
                self.partitions.update(new)

    def call(self, method: str, *args: Any, timeout: float | None) -> Any:
        """A call to the transactional id's coordinator, retried on retriable errors (for
        ``max_block_ms``, or ``timeout``)."""
        if self._coordinator is None:
            self._coordinator = CoordinatorClient(
                self._cluster,
                self.transactional_id,
                self._max_block_s,
                self._backoff_s,
                find="find_transaction_coordinator",
                session=self._session,
            )
        coordinator = self._coordinator
        deadline = time.monotonic() + self._timeout_s(timeout)
        while True:
            try:
                response = call(coordinator.remote(method, *args), self._timeout_s(timeout))
                if (error := error_of(response)) is not None:
                    raise error
                return response
            except RaylogError as exc:
                if isinstance(exc, (ProducerFencedError, InvalidProducerEpochError)):
                    self.failed(exc)
                    raise self.fenced from None
                if not exc.retriable or time.monotonic() + self._backoff_s >= deadline:
                    if exc.retriable:
                        raise KafkaTimeoutError(
                            f"{method} of {self.transactional_id!r} not done in time: {exc}"
                        ) from exc
                    raise
                if isinstance(exc, ConcurrentTransactionsError):  # the same coordinator, done in ms
                    time.sleep(min(self._backoff_s, CONCURRENT_TRANSACTIONS_BACKOFF_S))
                else:
                    coordinator.after_error(exc)
                    time.sleep(self._backoff_s)

    def _timeout_s(self, timeout: float | None) -> float:
        return self._max_block_s if timeout is None else timeout
