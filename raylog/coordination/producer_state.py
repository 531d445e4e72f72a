"""Idempotent-producer state of one partition replica (Kafka's ProducerStateManager).

Every batch from an idempotent producer carries ``producer_id``, ``producer_epoch`` and
``base_sequence`` (the sequence number of its first record; sequences count records per
producer and partition from 0 and wrap as Kafka's do: after ``2**31 - 1`` comes 0, see
:func:`increment_sequence`; "ahead" and "behind" compare modulo ``2**31``, see
:func:`sequence_after`). The leader appends a producer's batches strictly in sequence
order, which keeps a partition in send order even though Ray may run pipelined calls to
a threaded actor out of order. :meth:`ProducerStateManager.check` decides:

- ``APPEND``: the batch continues the producer's sequence; or it is the first batch its
  producer has not had acknowledged (below);
- ``DUPLICATE``: the batch is one of the last ``RETAINED_BATCHES`` appended (a retry whose
  first attempt was written): the caller answers with the original batch's offsets once
  they are as replicated as the request asks, and appends nothing;
- ``GAP``: an earlier batch of the producer has not arrived yet; the caller waits for a
  change and asks again (bounded by the request's timeout);
- ``OutOfOrderSequenceError`` / ``InvalidProducerEpochError``: a stale or broken producer.

The first unacknowledged sequence. A leader that does not know a producer (never seen it,
expired it, or lost its batches with a log that was cut) cannot tell the producer's first
batch from a later one that overtook it. So each produce request says the base sequence
of the oldest batch of that partition its producer has not had acknowledged. Every batch
before that one was acknowledged, and none of them is still on its way (a batch is retried
only after its previous attempt was answered), so:

- a batch *at* that sequence has nothing left to wait for: a leader that does not know the
  producer, or knows less than was acknowledged (its state is behind), appends it, as
  Kafka accepts any sequence from a producer it has no state for;
- a batch *after* that sequence waits for the earlier ones (``GAP``), never taking their
  place. A request that does not say (``-1``: a client that delivers in order) is taken as
  Kafka takes it: a producer without state may start at any sequence.

Transactions (Kafka's, KIP-98). A transactional batch (``TRANSACTIONAL`` bit) opens its
producer's transaction in this partition at its base offset unless one is open (a leader
lets a client's batch do so only once its coordinator vouched for it, see
:mod:`raylog.coordination.txn_verification`; :meth:`ProducerStateManager.in_transaction`
tells when no call is needed); a
transaction marker (a control batch, written by the transaction coordinator) closes it,
committed or aborted: :meth:`ProducerStateManager.update` returns what it closed, so that
the partition indexes aborted transactions. :meth:`first_open_offset` bounds the last
stable offset. A marker carries the producer's *next* epoch (the coordinator bumps the
epoch with every transaction it ends, as KIP-890 does): from then on this partition fences
every batch of the ended transaction that arrives late (a retry, a call Ray delivered
late), so no late write can join, or hang, a later transaction; and a marker whose epoch
is not above the producer's known one is stale (sent again, or late) and is not written
(:meth:`ProducerStateManager.marker_is_stale`). A producer with an open transaction is
never expired.

State is kept in memory and persisted in snapshot files
(:mod:`raylog.storage.producer_snapshot`, see :mod:`raylog.coordination.partition` for
when); :meth:`ProducerStateManager.rows` and :meth:`load` convert. A producer idle for
``producer.id.expiration.ms`` is forgotten (:meth:`remove_expired`). Idle is measured by
this replica's clock from when it appended (or replayed, after a restart) the producer's
last batch, not, as Kafka does, from the batch's record timestamps: a producer writing old
event times (a backfill) would otherwise be forgotten at once, and a retry of its last
batch appended twice.

Concurrency: not thread-safe; the replica actor calls it under its lock.
"""

from __future__ import annotations

import collections
import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from raylog.common.record_batch import (
    COMMIT_MARKER,
    CONTROL,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    SEQUENCE_MODULUS,
    TRANSACTIONAL,
    BatchHeader,
    increment_sequence,
)
from raylog.common.requests import RETAINED_BATCHES

from ..errors import InvalidProducerEpochError, InvalidRequestError, OutOfOrderSequenceError
from ..storage.producer_snapshot import SnapshotBatch
from ..types import ProducerState


def sequence_after(sequence: int, other: int) -> bool:
    """Whether ``sequence`` comes after ``other`` (by less than half the sequence space)."""
    return 0 < (sequence - other) % SEQUENCE_MODULUS < SEQUENCE_MODULUS // 2


def chained(previous: BatchHeader, header: BatchHeader) -> bool:
    """Whether ``header``'s batch is the next of ``previous``'s idempotent producer: the same
    producer id and epoch, neither batch transactional or a control batch, and its sequence
    right after ``previous``'s last."""
    return (
        previous.producer_id != NO_PRODUCER_ID
        and previous.base_sequence != NO_SEQUENCE
        and (previous.producer_id, previous.producer_epoch) == (header.producer_id, header.producer_epoch)
        and not (previous.attributes | header.attributes) & (TRANSACTIONAL | CONTROL)
        and header.base_sequence == increment_sequence(last_sequence_of(previous), 1)
    )


def require_chain(headers: Iterable[tuple[int, BatchHeader]]) -> None:
    """Several batches of one idempotent producer in one append (``headers``: each batch's
    ``(position, header)``) must be a chain, each :func:`chained` to the one before, so that
    the first one's verdict is every one's: all new, or the whole append refused.

    Raises:
        InvalidRequestError: batches of another producer or epoch, a transactional or control
            batch, or a break in the sequence.
    """
    previous = None
    for _, header in headers:
        if previous is not None and not chained(previous, header):
            raise InvalidRequestError(
                f"an idempotent append of several batches breaks its chain at producer {header.producer_id} "
                f"epoch {header.producer_epoch} sequence {header.base_sequence}"
            )
        previous = header


class Verdict(enum.Enum):
    APPEND = "append"
    DUPLICATE = "duplicate"
    GAP = "gap"


class BatchMetadata(NamedTuple):
    """What is remembered of one appended batch (offsets inclusive at both ends)."""

    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    max_timestamp: int  # from the batch's header
    appended_ms: int  # when this replica appended or replayed it, by its clock


class ClosedTransaction(NamedTuple):
    """A transaction a marker closed in this partition: its producer, its first offset, the
    marker's offset, and whether it committed."""

    producer_id: int
    first_offset: int
    marker_offset: int
    committed: bool


@dataclass
class _Entry:
    epoch: int
    last_appended_ms: int = 0  # when this replica appended (or replayed) its last batch or marker
    #: The first offset of its open transaction in this partition, or -1.
    txn_first_offset: int = -1
    # The last batches of this epoch, oldest first (none yet after a marker bumped the epoch).
    batches: collections.deque = field(default_factory=lambda: collections.deque(maxlen=RETAINED_BATCHES))

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence


def last_sequence_of(header: BatchHeader) -> int:
    """The sequence of a batch's last offset. Sequences follow offsets within a batch: a
    compacted batch keeps its last offset delta, so its sequence range, as in Kafka."""
    return increment_sequence(header.base_sequence, header.last_offset_delta)


class ProducerStateManager:
    """See the module docstring."""

    def __init__(self) -> None:
        self._producers: dict[int, _Entry] = {}
        #: producer id -> first offset of its open transaction here (a subset of the entries).
        self._open: dict[int, int] = {}
        #: Bumped on every change, so that a snapshot is written only when there is news.
        self.version = 0

    def check(
        self, header: BatchHeader, first_unacked_sequence: int = NO_SEQUENCE
    ) -> tuple[Verdict, BatchMetadata | None]:
        """What to do with a batch; for DUPLICATE also the original batch.

        Args:
            header: the batch's header (one batch of an idempotent producer).
            first_unacked_sequence: the base sequence of the oldest batch of this partition
                that the producer has not had acknowledged, or ``NO_SEQUENCE`` if unknown.

        Raises:
            InvalidProducerEpochError: the producer's epoch is older than one already seen.
            OutOfOrderSequenceError: the sequence is behind and not a recent duplicate.
        """
        sequence = header.base_sequence
        first_unacked_given = first_unacked_sequence != NO_SEQUENCE
        entry = self._producers.get(header.producer_id)
        if entry is None:
            if not first_unacked_given or sequence == first_unacked_sequence:
                return Verdict.APPEND, None
            if sequence_after(sequence, first_unacked_sequence):
                return Verdict.GAP, None
            raise OutOfOrderSequenceError(
                f"producer {header.producer_id} sent sequence {sequence} before its first unacknowledged "
                f"sequence {first_unacked_sequence}"
            )
        if header.producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {header.producer_id} epoch {header.producer_epoch} is older than {entry.epoch}"
            )
        if header.producer_epoch > entry.epoch or not entry.batches:
            # The epoch's first batch here must be at sequence 0. A later batch of the epoch
            # that overtook an unacknowledged earlier one (pipelined calls to a threaded actor
            # run out of order) waits for it, as within an epoch.
            if sequence == 0:
                return Verdict.APPEND, None
            if first_unacked_given and sequence_after(sequence, first_unacked_sequence):
                return Verdict.GAP, None
            raise OutOfOrderSequenceError(
                f"producer {header.producer_id} began epoch {header.producer_epoch} at sequence {sequence}, not 0"
            )
        last_sequence = last_sequence_of(header)
        for batch in entry.batches:
            if (batch.first_sequence, batch.last_sequence) == (sequence, last_sequence):
                return Verdict.DUPLICATE, batch
        expected = increment_sequence(entry.last_sequence, 1)
        if sequence == expected:
            return Verdict.APPEND, None
        if first_unacked_given and sequence == first_unacked_sequence and sequence_after(sequence, expected):
            return Verdict.APPEND, None  # acknowledged batches are missing here: state is behind
        if sequence_after(sequence, expected):
            return Verdict.GAP, None
        raise OutOfOrderSequenceError(f"producer {header.producer_id} sent sequence {sequence}, expected {expected}")

    def check_epoch(self, producer_id: int, producer_epoch: int) -> None:
        """Raises InvalidProducerEpochError if ``producer_epoch`` is older than the known one."""
        entry = self._producers.get(producer_id)
        if entry is not None and producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {producer_id} epoch {producer_epoch} is older than {entry.epoch}"
            )

    def marker_is_stale(self, producer_id: int, producer_epoch: int, bumps_epoch: bool = True) -> bool:
        """Whether a marker for ``producer_id`` with ``producer_epoch`` (the producer's next
        epoch) ends nothing here: this partition already knows that epoch or a later one.
        A marker that does not bump (``bumps_epoch=False``: it carries the current epoch of
        a Kafka client at EndTxn v0-4, which keeps it) is stale below the known epoch, or
        at it when the producer has no transaction open here (written before, or nothing
        to end): such a producer is not fenced from a late write, as in Kafka before KIP-890."""
        entry = self._producers.get(producer_id)
        if entry is None:
            return False
        if bumps_epoch:
            return entry.epoch >= producer_epoch
        return entry.epoch > producer_epoch or (entry.epoch == producer_epoch and producer_id not in self._open)

    def in_transaction(self, producer_id: int, producer_epoch: int) -> bool:
        """Whether ``producer_id`` has a transaction open here at ``producer_epoch``."""
        entry = self._producers.get(producer_id)
        return entry is not None and entry.epoch == producer_epoch and entry.txn_first_offset >= 0

    def first_open_offset(self) -> int | None:
        """The first offset of the oldest transaction open here, or None."""
        return min(self._open.values()) if self._open else None

    def update(self, header: BatchHeader, now_ms: int) -> ClosedTransaction | None:
        """Record a batch appended at ``now_ms`` (its header as written, offsets stamped);
        for a marker, the transaction it closed (None if its producer had none open)."""
        pid = header.producer_id
        if pid == NO_PRODUCER_ID:
            return None
        entry = self._producers.get(pid)
        if entry is None or header.producer_epoch > entry.epoch:
            previous = entry
            entry = self._producers[pid] = _Entry(header.producer_epoch)
            if previous is not None:
                entry.txn_first_offset = previous.txn_first_offset
        entry.last_appended_ms = now_ms
        self.version += 1
        attributes = header.attributes
        if attributes & CONTROL:
            first, entry.txn_first_offset = entry.txn_first_offset, -1
            self._open.pop(pid, None)
            if first < 0:
                return None
            return ClosedTransaction(pid, first, header.base_offset, bool(attributes & COMMIT_MARKER))
        if attributes & TRANSACTIONAL and entry.txn_first_offset < 0:
            entry.txn_first_offset = self._open[pid] = header.base_offset
        if header.base_sequence == NO_SEQUENCE:
            return None  # a transactional write without sequence (a group's offsets)
        entry.batches.append(
            BatchMetadata(
                header.base_sequence,
                last_sequence_of(header),
                header.base_offset,
                header.last_offset,
                header.max_timestamp,
                now_ms,
            )
        )
        return None

    def apply(self, headers: Iterable[BatchHeader], now_ms: int) -> list[ClosedTransaction]:
        """Record batches appended (or replayed from the log) at ``now_ms``, in log order;
        the transactions their markers closed."""
        closed = []
        for header in headers:
            if (done := self.update(header, now_ms)) is not None:
                closed.append(done)
        return closed

    def clear(self) -> None:
        self._producers.clear()
        self._open.clear()
        self.version += 1

    def remove_expired(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Forget producers whose last batch was appended ``expiration_ms`` ago or earlier;
        returns their ids."""
        expired = [
            pid
            for pid, entry in self._producers.items()
            if now_ms - entry.last_appended_ms >= expiration_ms and entry.txn_first_offset < 0
        ]
        for pid in expired:
            del self._producers[pid]
        if expired:
            self.version += 1
        return expired

    def last_offsets(self) -> dict[int, int]:
        """The last offset of each known producer's last batch (the cleaner keeps that batch)."""
        return {pid: entry.batches[-1].last_offset for pid, entry in self._producers.items() if entry.batches}

    def describe(self) -> list[ProducerState]:
        """Every known producer, as Kafka's DescribeProducers tells them."""
        return [
            ProducerState(
                pid,
                entry.epoch,
                entry.last_sequence if entry.batches else NO_SEQUENCE,
                entry.last_appended_ms,
                entry.txn_first_offset,
            )
            for pid, entry in sorted(self._producers.items())
        ]

    def rows(self) -> list[SnapshotBatch]:
        """The state as snapshot rows: one per retained batch, or one without a batch
        (``first_sequence`` -1) for a producer that has none in its epoch yet."""
        rows = []
        for pid, entry in self._producers.items():
            batches = entry.batches or [BatchMetadata(NO_SEQUENCE, NO_SEQUENCE, -1, -1, -1, entry.last_appended_ms)]
            rows.extend(SnapshotBatch(pid, entry.epoch, *batch, entry.txn_first_offset) for batch in batches)
        return rows

    def load(self, rows: Iterable[SnapshotBatch]) -> None:
        """Replace the state with the one ``rows`` describe (from :meth:`rows`)."""
        self._producers.clear()
        self._open.clear()
        for row in rows:
            entry = self._producers.get(row.producer_id)
            if entry is None or row.producer_epoch > entry.epoch:
                entry = self._producers[row.producer_id] = _Entry(row.producer_epoch)
            entry.last_appended_ms = max(entry.last_appended_ms, row.appended_ms)
            entry.txn_first_offset = row.txn_first_offset
            if row.txn_first_offset >= 0:
                self._open[row.producer_id] = row.txn_first_offset
            if row.first_sequence != NO_SEQUENCE:
                entry.batches.append(BatchMetadata(*row[2:8]))
        self.version += 1

    def __len__(self) -> int:
        return len(self._producers)
