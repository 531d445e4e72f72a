"""The transactions' family of the Admin (Kafka's Admin.listTransactions,
describeTransactions, describeProducers, abortTransaction, and kafka-transactions.sh
find-hanging): :class:`TransactionAdmin`, and how a coordinator's description of a
transactional id becomes a :class:`~raylog.types.TransactionDescription`.

Hanging transactions (``kafka-transactions.sh find-hanging``): :func:`find_hanging` compares
the transactions open in a partition (its producers) with the coordinators' transactions:
one open longer than the longest transaction timeout that no coordinator has ongoing with
that partition will never get its marker; ``abort`` writes one (Admin.abort_transaction)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import NamedTuple

from raylog.clients.admin.base import AdminBase, checked
from raylog.common.names import TRANSACTION_TOPIC
from raylog.common.requests import MAX_TRANSACTION_TIMEOUT_MS
from raylog.errors import InvalidTxnStateError, TransactionalIdNotFoundError
from raylog.types import ProducerState, TopicPartition, TransactionDescription


class TransactionAdmin(AdminBase):
    """Transactional ids and their coordinators' state, the producers partition leaders
    know, and ending hanging transactions."""

    def list_transactions(self) -> list[TransactionDescription]:
        """Every transactional id the transaction coordinators know (Kafka's ListTransactions)."""
        answers = self._ask_each_partition(TRANSACTION_TOPIC, "describe_transactions", None)
        out = [_transaction(d, p) for p, described in answers for d in described]
        return sorted(out, key=lambda t: t.transactional_id)

    def describe_transactions(self, transactional_ids: list[str]) -> list[TransactionDescription]:
        """The state of each transactional id, from its coordinator (Kafka's DescribeTransactions).

        Raises:
            TransactionalIdNotFoundError: an id no producer ever initialised.
        """
        out = []
        for tid in transactional_ids:
            found = self._coordinator(tid, find="find_transaction_coordinator").call("describe_transactions", [tid])
            if not found:
                raise TransactionalIdNotFoundError(f"no transactional id {tid!r}")
            partition, _ = self._answer(self._ask("find_transaction_coordinator", tid))
            out.append(_transaction(found[0], partition))
        return out

    def describe_producers(self, partitions: list[TopicPartition]) -> dict[TopicPartition, list[ProducerState]]:
        """The producers each partition's leader knows, with the first offset of the
        transaction each has open there (Kafka's Admin.describeProducers).

        Raises:
            UnknownTopicOrPartitionError, NotLeaderOrFollowerError (retriable).
        """
        metadata = self._cluster.metadata(refresh=True)
        token = self._session.token()
        return {tp: self._answer(metadata.leader(tp).describe_producers.remote(token)) for tp in partitions}

    def find_hanging_transactions(
        self, partitions: list[TopicPartition], max_transaction_timeout_ms: int = MAX_TRANSACTION_TIMEOUT_MS
    ) -> list[HangingTransaction]:
        """Transactions open in ``partitions`` that no coordinator will end: their producer
        last wrote there more than ``max_transaction_timeout_ms`` ago (the longest
        transaction.timeout.ms a coordinator accepts, by default) and no transactional id
        has them ongoing with that partition (``kafka-transactions.sh find-hanging``). Each
        holds the partition's last stable offset until :meth:`abort_transaction` ends it."""
        producers = self.describe_producers(partitions)
        transactions = self.list_transactions()
        now_ms = int(time.time() * 1000)
        return [
            hanging
            for tp in partitions
            for hanging in find_hanging(tp, producers[tp], transactions, now_ms, max_transaction_timeout_ms)
        ]

    def abort_transaction(
        self, partition: TopicPartition, producer_id: int, producer_epoch: int, coordinator_epoch: int = 0
    ) -> None:
        """Write an abort marker for ``producer_id``'s transaction open in ``partition`` at
        ``producer_epoch`` (Kafka's Admin.abortTransaction), as its coordinator would: its
        records are dropped by read_committed readers and the last stable offset moves on.
        For hanging transactions (:meth:`find_hanging_transactions`) only: aborting one a
        coordinator still runs breaks that transaction's atomicity.

        Raises:
            InvalidTxnStateError: the producer has no transaction open there at that epoch.
            NotLeaderOrFollowerError, NotEnoughReplicasError, RequestTimedOutError (retriable).
        """
        leader = self._cluster.metadata(refresh=True).leader(partition)
        timeout_ms = int(self._timeout_s * 1000)
        marker = leader.write_txn_marker.remote(
            producer_id, producer_epoch, False, coordinator_epoch, timeout_ms, bumps_epoch=False
        )
        response = checked(self._answer(marker))
        if response.base_offset < 0:
            raise InvalidTxnStateError(
                f"producer id {producer_id} has no transaction open in {partition.topic}-{partition.partition} "
                f"at epoch {producer_epoch}"
            )


def _transaction(described: dict, coordinator_partition: int) -> TransactionDescription:
    return TransactionDescription(
        transactional_id=described["transactional_id"],
        state=described["state"],
        producer_id=described["producer_id"],
        producer_epoch=described["producer_epoch"],
        timeout_ms=described["timeout_ms"],
        partitions=tuple(TopicPartition(*tp) for tp in described["partitions"]),
        start_ms=described["start_ms"],
        coordinator_partition=coordinator_partition,
    )


#: The coordinator states of a transaction that will still get its markers.
_OPEN_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort")


class HangingTransaction(NamedTuple):
    """A transaction open in a partition that no coordinator will end (find-hanging)."""

    partition: TopicPartition
    producer_id: int
    producer_epoch: int
    start_offset: int
    last_timestamp: int  # ms, when the partition last appended the producer's batch


def find_hanging(
    partition: TopicPartition,
    producers: Iterable[ProducerState],
    transactions: Iterable[TransactionDescription],
    now_ms: int,
    max_transaction_timeout_ms: int,
) -> list[HangingTransaction]:
    """The transactions open in ``partition`` (from its ``producers``) whose producer last
    wrote there more than ``max_transaction_timeout_ms`` ago and that no coordinator (of
    ``transactions``, every transactional id's state) has ongoing, or being ended, with that
    partition under that producer id."""
    alive = {t.producer_id for t in transactions if t.state in _OPEN_STATES and partition in t.partitions}
    return [
        HangingTransaction(
            partition, p.producer_id, p.producer_epoch, p.current_transaction_start_offset, p.last_timestamp
        )
        for p in producers
        if p.current_transaction_start_offset >= 0
        and now_ms - p.last_timestamp > max_transaction_timeout_ms
        and p.producer_id not in alive
    ]
