"""The transaction coordinator's state machine (Kafka's TransactionCoordinator), no Ray.

Each transactional id has one :class:`TxnMetadata`: the producer id and epoch its current
producer instance uses, its transaction timeout, its state and the partitions of its open
transaction. States and moves::

    Empty / CompleteCommit / CompleteAbort --add_partitions--> Ongoing
    Ongoing --end(commit)--> PrepareCommit --markers written--> CompleteCommit
    Ongoing --end(abort), timeout, init_producer--> PrepareAbort --markers--> CompleteAbort
    any but Prepare* --init_producer--> Empty (epoch bumped: older instances are fenced)

Every move is a :class:`Step`: the metadata it leads to and the record that says so (key:
the transactional id; value: msgpack), which the actor appends to its ``__transaction_state``
partition with acks=all; the move counts (:meth:`TransactionCoordinator.applied`) only once
that record is replicated, and while it is in flight every other request for the same id
gets CONCURRENT_TRANSACTIONS (retriable). A coordinator that takes over reads the partition
back (:meth:`load`) and finishes every transaction its log says was prepared
(:meth:`prepared`): markers are idempotent.

Epochs (KIP-890's design, against the late-write anomalies Jepsen found in Kafka's
protocol): ending a transaction bumps the producer's epoch. The markers carry the bumped
epoch, and a partition takes no batch with an older epoch after one (see
:mod:`raylog.coordination.producer_state`), so a write of the ended transaction that
arrives late is fenced instead of joining the next transaction or hanging in a new one;
the producer gets the bumped epoch in the answer. When the epoch would reach
:data:`MAX_EPOCH` the next one comes with a new producer id. A Kafka client speaking
EndTxn v0-4 gets no epoch in the answer and keeps its own, so its transactions end
without a bump (``bump_epoch=False``, Kafka's behaviour before KIP-890): the markers carry
the producer's current epoch (:attr:`TxnMetadata.bumps_epoch` tells partitions and group
coordinators so), and such a producer has Kafka's older guarantees against late writes.
Aborts the coordinator decides (a timeout, a new instance) always bump.

Concurrency: not thread-safe; the actor calls it under its lock.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

import msgpack

from raylog.common.requests import MAX_TRANSACTION_TIMEOUT_MS

from ..errors import (
    ConcurrentTransactionsError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    ProducerFencedError,
    RaylogError,
)
from ..types import TopicPartition

#: The largest producer epoch (an int16); the epoch after it comes with a new producer id.
MAX_EPOCH = 2**15 - 1

logger = logging.getLogger(__name__)


class TxnState(enum.Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"

    @property
    def prepared(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def idle(self) -> bool:
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


@dataclass(frozen=True)
class TxnMetadata:
    """One transactional id's state. In a Prepare state, ``marker_producer_id`` and
    ``marker_epoch`` are what the markers carry (the bumped epoch of the producer id the
    transaction ran with); ``producer_id``/``producer_epoch`` are what the producer uses next."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: frozenset = field(default_factory=frozenset)  # of TopicPartition
    start_ms: int = -1  # when the open transaction began
    updated_ms: int = 0
    marker_producer_id: int = -1
    marker_epoch: int = -1
    #: Whether the prepared transaction's markers carry a bumped epoch (False: the
    #: producer's current one, for a Kafka client at EndTxn v0-4; see the module docstring).
    bumps_epoch: bool = True

    def record(self) -> tuple[bytes, bytes]:
        value = {
            "pid": self.producer_id,
            "epoch": self.producer_epoch,
            "timeout": self.timeout_ms,
            "state": self.state.value,
            "partitions": sorted([tp.topic, tp.partition] for tp in self.partitions),
            "start": self.start_ms,
            "updated": self.updated_ms,
            "marker_pid": self.marker_producer_id,
            "marker_epoch": self.marker_epoch,
            "bump": self.bumps_epoch,
        }
        return self.transactional_id.encode(), msgpack.packb(value)

    @classmethod
    def from_record(cls, key: bytes, value: bytes) -> TxnMetadata:
        v = msgpack.unpackb(value)
        return cls(
            key.decode(),
            v["pid"],
            v["epoch"],
            v["timeout"],
            TxnState(v["state"]),
            frozenset(TopicPartition(t, p) for t, p in v["partitions"]),
            v["start"],
            v["updated"],
            v["marker_pid"],
            v["marker_epoch"],
            v.get("bump", True),  # (records written before the field existed always bumped)
        )

    @property
    def committing(self) -> bool:
        return self.state is TxnState.PREPARE_COMMIT


class Step:
    """A move of one transactional id: the metadata it leads to and its record."""

    __slots__ = ("metadata", "record")

    def __init__(self, metadata: TxnMetadata):
        self.metadata = metadata
        self.record = metadata.record()


class TransactionCoordinator:
    """See the module docstring."""

    def __init__(self) -> None:
        self.transactions: dict[str, TxnMetadata] = {}
        self._in_flight: set[str] = set()  # ids whose step's record is not replicated yet

    # --- requests -----------------------------------------------------------------------

    def init_producer(
        self, transactional_id: str, timeout_ms: int, now_ms: int, new_producer_id: Callable[[], int]
    ) -> Step:
        """A producer instance starts: the id's next epoch (fencing every older instance),
        or a first producer id. An open transaction is aborted first: the caller gets
        CONCURRENT_TRANSACTIONS while that abort completes, and asks again.

        Raises:
            InvalidTransactionTimeoutError, ConcurrentTransactionsError.
        """
        if not 1 <= timeout_ms <= MAX_TRANSACTION_TIMEOUT_MS:
            raise InvalidTransactionTimeoutError(
                f"transaction.timeout.ms must be in [1, {MAX_TRANSACTION_TIMEOUT_MS}], got {timeout_ms}"
            )
        current = self._get(transactional_id)
        if current is None:
            return self._begin(TxnMetadata(transactional_id, new_producer_id(), 0, timeout_ms, updated_ms=now_ms))
        self._require_settled(current)
        if current.state is TxnState.ONGOING:
            raise ConcurrentTransactionsError(
                f"transaction {transactional_id!r} is open: aborting it first",
            )
        pid, epoch = _next_epoch(current.producer_id, current.producer_epoch, new_producer_id)
        metadata = replace(
            current,
            producer_id=pid,
            producer_epoch=epoch,
            timeout_ms=timeout_ms,
            state=TxnState.EMPTY,
            partitions=frozenset(),
            start_ms=-1,
            updated_ms=now_ms,
            marker_producer_id=-1,
            marker_epoch=-1,
            bumps_epoch=True,
        )
        return self._begin(metadata)

    def abort_open(self, transactional_id: str, now_ms: int, new_producer_id: Callable[[], int]) -> Step | None:
        """The abort :meth:`init_producer` asks for (None: nothing open, or a move in flight)."""
        current = self._get(transactional_id)
        if current is None or current.state is not TxnState.ONGOING or transactional_id in self._in_flight:
            return None
        return self._begin(self._prepare(current, False, now_ms, new_producer_id))

    def add_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Iterable, now_ms: int
    ) -> Step | None:
        """Partitions join the producer's transaction (opening it); None when they all belong
        to it already (nothing to write).

        Raises:
            ProducerFencedError, InvalidProducerIdMappingError, ConcurrentTransactionsError,
            InvalidTxnStateError.
        """
        current = self._current(transactional_id, producer_id, producer_epoch)
        self._require_settled(current)
        wanted = frozenset(TopicPartition(*tp) for tp in partitions)
        if current.state is TxnState.ONGOING:
            if wanted <= current.partitions:
                return None
            return self._begin(replace(current, partitions=current.partitions | wanted, updated_ms=now_ms))
        if not current.state.idle:
            raise InvalidTxnStateError(f"transaction {transactional_id!r} is {current.state.value}")
        opened = replace(current, state=TxnState.ONGOING, partitions=wanted, start_ms=now_ms, updated_ms=now_ms)
        return self._begin(opened)

    def end(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        now_ms: int,
        new_producer_id: Callable[[], int],
        bump_epoch: bool = True,
    ) -> Step | TxnMetadata:
        """Commit or abort the open transaction: the Prepare step (then markers, then
        :meth:`complete`); or, for a transaction already ended this way (a retry whose first
        answer was lost, or an empty transaction), the metadata to answer with at once.
        ``bump_epoch=False`` ends it keeping the producer's id and epoch (a Kafka client at
        EndTxn v0-4, which cannot learn a new epoch; see the module docstring).

        Raises:
            ProducerFencedError, InvalidProducerIdMappingError, ConcurrentTransactionsError,
            InvalidTxnStateError.
        """
        current = self._get(transactional_id)
        if current is not None and current.state.idle and _is_retry_of_end(current, producer_id, producer_epoch):
            if current.state is (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT):
                return current
            if commit and current.state is TxnState.COMPLETE_ABORT:
                # Not this producer's abort (it asks to commit): a timeout's or a newer instance's.
                raise ProducerFencedError(f"transaction {transactional_id!r} was aborted by its coordinator")
            raise InvalidTxnStateError(f"transaction {transactional_id!r} ended otherwise: {current.state.value}")
        if current is not None and current.state.prepared and _is_retry_of_end(current, producer_id, producer_epoch):
            raise ConcurrentTransactionsError(f"transaction {transactional_id!r} is completing")
        current = self._current(transactional_id, producer_id, producer_epoch)
        self._require_settled(current)
        if current.state.idle:
            return current  # nothing was added: an empty transaction ends without markers
        if current.state is not TxnState.ONGOING:
            raise InvalidTxnStateError(f"transaction {transactional_id!r} is {current.state.value}")
        return self._begin(self._prepare(current, commit, now_ms, new_producer_id, bump_epoch))

    def complete(self, transactional_id: str, now_ms: int) -> Step | None:
        """Every marker of the prepared transaction is written: its Complete step (None when
        it is not prepared any more, or a move is in flight)."""
        current = self._get(transactional_id)
        if current is None or not current.state.prepared or transactional_id in self._in_flight:
            return None
        state = TxnState.COMPLETE_COMMIT if current.committing else TxnState.COMPLETE_ABORT
        return self._begin(replace(current, state=state, partitions=frozenset(), start_ms=-1, updated_ms=now_ms))

    def expired(self, now_ms: int, new_producer_id: Callable[[], int]) -> list[Step]:
        """Abort steps for the open transactions older than their timeout (their producers
        are fenced by the bumped epoch). One whose abort needs a new producer id that
        ``new_producer_id`` cannot give now (it raises) is left for a later call."""
        steps = []
        for tid, metadata in self.transactions.items():
            if (
                metadata.state is TxnState.ONGOING
                and tid not in self._in_flight
                and now_ms - metadata.start_ms > metadata.timeout_ms
            ):
                try:
                    prepared = self._prepare(metadata, False, now_ms, new_producer_id)
                except RaylogError as exc:
                    logger.info("transaction %r timed out; its abort waits: %s", tid, exc)
                    continue
                steps.append(self._begin(prepared))
        return steps

    def verify(self, transactional_id: str, producer_id: int, producer_epoch: int, partition: TopicPartition) -> None:
        """Return if ``partition`` is in the ongoing transaction of ``producer_id`` at
        ``producer_epoch`` (a partition leader asks before the transaction's first batch
        there opens it, see :mod:`raylog.coordination.txn_verification`).

        Raises:
            InvalidTxnStateError: no such transaction (unknown id or producer, ended, or the
                partition was not added to it).
            InvalidProducerEpochError: the producer is fenced by a newer epoch.
            ConcurrentTransactionsError: a move of the id is in flight, or it is ending.
        """
        current = self._get(transactional_id)
        refused = f"producer id {producer_id} epoch {producer_epoch} has no ongoing transaction with {partition}"
        if current is None or producer_id not in (current.producer_id, current.marker_producer_id):
            raise InvalidTxnStateError(f"{refused}: transactional id {transactional_id!r} is not its")
        if current.state.prepared:
            raise ConcurrentTransactionsError(f"transaction {transactional_id!r} is completing")
        if producer_id == current.producer_id and producer_epoch < current.producer_epoch:
            raise InvalidProducerEpochError(f"{refused}: fenced by epoch {current.producer_epoch}")
        if (
            (producer_id, producer_epoch) != (current.producer_id, current.producer_epoch)
            or current.state is not TxnState.ONGOING
            or partition not in current.partitions
        ):
            raise InvalidTxnStateError(f"{refused} ({transactional_id!r} is {current.state.value})")

    # --- the steps' fate ----------------------------------------------------------------

    def applied(self, step: Step) -> None:
        """``step``'s record is replicated: the move counts."""
        new = step.metadata
        old = self.transactions.get(new.transactional_id)
        self.transactions[new.transactional_id] = new
        self._in_flight.discard(new.transactional_id)
        if new.state is TxnState.EMPTY:
            if old is None:
                logger.info(
                    "transactional id %r: producer id %d epoch %d initialised", new.transactional_id, new.producer_id, 0
                )
            else:
                logger.info(
                    "transactional id %r: producer id %d epoch %d initialised; producer id %d epochs up to %d are "
                    "fenced",
                    new.transactional_id,
                    new.producer_id,
                    new.producer_epoch,
                    old.producer_id,
                    old.producer_epoch,
                )
        elif logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "transactional id %r: %s (producer id %d epoch %d, %d partitions)",
                new.transactional_id,
                new.state.value,
                new.producer_id,
                new.producer_epoch,
                len(new.partitions),
            )

    def failed(self, step: Step) -> None:
        """``step``'s record was not replicated: the move did not happen."""
        self._in_flight.discard(step.metadata.transactional_id)

    # --- loading ------------------------------------------------------------------------

    def load(self, records: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Replay records of the partition, in log order."""
        for key, value in records:
            if value is None:
                self.transactions.pop(key.decode(), None)
            else:
                metadata = TxnMetadata.from_record(key, value)
                self.transactions[metadata.transactional_id] = metadata

    def prepared(self) -> list[TxnMetadata]:
        """Transactions whose markers may not all be written yet."""
        return [m for tid, m in self.transactions.items() if m.state.prepared and tid not in self._in_flight]

    def describe(self, transactional_id: str) -> TxnMetadata | None:
        return self.transactions.get(transactional_id)

    # --- helpers ------------------------------------------------------------------------

    def _get(self, transactional_id: str) -> TxnMetadata | None:
        if transactional_id in self._in_flight:
            raise ConcurrentTransactionsError(f"a change of transaction {transactional_id!r} is in flight")
        return self.transactions.get(transactional_id)

    def _current(self, transactional_id: str, producer_id: int, producer_epoch: int) -> TxnMetadata:
        current = self._get(transactional_id)
        if current is None:
            raise InvalidProducerIdMappingError(f"no producer initialised transactional id {transactional_id!r}")
        fenced = None
        if producer_id != current.producer_id:
            fenced = f"transactional id {transactional_id!r} moved to producer id {current.producer_id}"
        elif producer_epoch < current.producer_epoch:
            fenced = (
                f"producer epoch {producer_epoch} of {transactional_id!r} is fenced by epoch {current.producer_epoch}"
            )
        if fenced is not None:
            logger.info("refused a request of fenced producer id %d epoch %d: %s", producer_id, producer_epoch, fenced)
            raise ProducerFencedError(fenced)
        if producer_epoch > current.producer_epoch:
            raise InvalidProducerIdMappingError(
                f"producer epoch {producer_epoch} of {transactional_id!r} is ahead of {current.producer_epoch}"
            )
        return current

    @staticmethod
    def _require_settled(current: TxnMetadata) -> None:
        if current.state.prepared:
            raise ConcurrentTransactionsError(f"transaction {current.transactional_id!r} is completing")

    def _prepare(
        self,
        current: TxnMetadata,
        commit: bool,
        now_ms: int,
        new_producer_id: Callable[[], int],
        bump_epoch: bool = True,
    ) -> TxnMetadata:
        if bump_epoch:
            marker_epoch = current.producer_epoch + 1  # <= MAX_EPOCH: see _next_epoch
            pid, epoch = _next_epoch(current.producer_id, current.producer_epoch, new_producer_id)
        else:
            marker_epoch = epoch = current.producer_epoch
            pid = current.producer_id
        return replace(
            current,
            state=TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT,
            producer_id=pid,
            producer_epoch=epoch,
            marker_producer_id=current.producer_id,
            marker_epoch=marker_epoch,
            updated_ms=now_ms,
            bumps_epoch=bump_epoch,
        )

    def _begin(self, metadata: TxnMetadata) -> Step:
        self._in_flight.add(metadata.transactional_id)
        return Step(metadata)


def _next_epoch(producer_id: int, epoch: int, new_producer_id: Callable[[], int]) -> tuple[int, int]:
    """The producer id and epoch after ``epoch``: the next epoch, or, when that would be
    :data:`MAX_EPOCH` (kept for the markers that end the id's last transaction), a new id."""
    if epoch + 1 < MAX_EPOCH:
        return producer_id, epoch + 1
    return new_producer_id(), 0


def _is_retry_of_end(current: TxnMetadata, producer_id: int, producer_epoch: int) -> bool:
    """Whether an end request comes from the producer whose transaction just ended (it still
    holds the epoch before the bump, its answer having been lost)."""
    return (
        current.marker_producer_id == producer_id
        and current.marker_epoch == producer_epoch + 1
        and (current.producer_id, current.producer_epoch) != (producer_id, producer_epoch)
    )
