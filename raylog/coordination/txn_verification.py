"""Transactional writes verified against the transaction coordinator (Kafka's KIP-890
part 1, ``transaction.partition.verification.enable``), and hanging transactions (no Ray).

A transactional batch opens its producer's transaction in a partition (see
:mod:`raylog.coordination.producer_state`), which holds the last stable offset until a
coordinator's marker ends it. A batch no coordinator knows of (a made-up producer id, or a
late batch of a transaction that already got its marker when the marker could not fence it:
a Kafka client at EndTxn v0-3 keeps its epoch) would open a transaction that never ends,
stopping every read_committed reader, producer expiry and the cleaner for good. So the
leader, before the first batch of a producer's transaction in the partition, asks the
coordinator of the batch's transactional id (the produce request carries it, as Kafka's
Produce v3+ does) whether that partition is in that producer's ongoing transaction:

- :class:`TxnVerifications` keeps, per producer id, the *guard* of the verification under
  way: :meth:`~TxnVerifications.check` raises :class:`VerificationNeeded` (with a new guard)
  until the coordinator's yes was recorded with :meth:`~TxnVerifications.answered`; a marker
  for the producer drops its guard (:meth:`~TxnVerifications.ended`), so a yes that was
  asked before the marker and arrives after it opens nothing, as Kafka's VerificationGuard.
- Once the batch opened the transaction, the producer's later batches in it need no call
  (the partition's producer state says the transaction is open); the marker ends it, and
  the next transaction's first batch is verified again.
- :func:`verification_error`: what the producer is answered when the coordinator could not
  answer (retriable NOT_ENOUGH_REPLICAS, as Kafka's ReplicaManager maps them).

Writers inside the cluster (the group coordinator writing a transaction's offsets) are
trusted and not verified.

Concurrency: not thread-safe; the replica actor calls it under its lock.
"""

from __future__ import annotations

from ..errors import (
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    NotCoordinatorError,
    NotEnoughReplicasError,
    RaylogError,
    RequestTimedOutError,
)

#: Coordinator answers that only say "not now": the produce is retried (Kafka's list, plus
#: our own call's timeout, which Kafka sees as NETWORK_EXCEPTION).
_RETRIABLE = (
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    NotCoordinatorError,
    RequestTimedOutError,
)


class VerificationNeeded(Exception):
    """A transactional batch waits for its coordinator: ask whether the partition is in
    ``producer_id``'s ongoing transaction (without the partition lock), then pass this to
    :meth:`TxnVerifications.answered` and append again."""

    def __init__(self, transactional_id: str, producer_id: int, producer_epoch: int, guard: object):
        super().__init__(f"producer id {producer_id} epoch {producer_epoch} of {transactional_id!r} to verify")
        self.transactional_id = transactional_id
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.guard = guard


class _Guard:
    __slots__ = ("epoch", "verified")

    def __init__(self, epoch: int):
        self.epoch = epoch
        self.verified = False


class TxnVerifications:
    """One partition's verifications under way or answered (see the module docstring)."""

    def __init__(self) -> None:
        self._guards: dict[int, _Guard] = {}

    def check(self, transactional_id: str, producer_id: int, producer_epoch: int) -> None:
        """Return if the coordinator vouched for this producer's transaction here since its
        last marker; else raise :class:`VerificationNeeded`."""
        guard = self._guards.get(producer_id)
        if guard is not None and guard.epoch == producer_epoch and guard.verified:
            return
        if guard is None or guard.epoch != producer_epoch:
            guard = self._guards[producer_id] = _Guard(producer_epoch)
        raise VerificationNeeded(transactional_id, producer_id, producer_epoch, guard)

    def answered(self, needed: VerificationNeeded, vouched: bool) -> None:
        """The coordinator said yes (``vouched``) or no to ``needed``: a yes counts unless a
        marker came meanwhile; a no forgets the guard (a made-up producer id leaves nothing)."""
        if self._guards.get(needed.producer_id) is not needed.guard:
            return
        if vouched:
            needed.guard.verified = True
        else:
            del self._guards[needed.producer_id]

    def opened(self, producer_id: int) -> None:
        """The producer's transaction is open here now: its state says so from then on."""
        self._guards.pop(producer_id, None)

    def ended(self, producer_id: int) -> None:
        """A marker for the producer: what was verified before it ends with it."""
        self._guards.pop(producer_id, None)

    def clear(self) -> None:
        """Leadership moved or the log was cut: verify again."""
        self._guards.clear()

    def __len__(self) -> int:
        return len(self._guards)


def verification_error(error: RaylogError) -> RaylogError:
    """What the producer is answered when verifying its batch failed with ``error``: the
    coordinator's refusal as it is; a coordinator that could not answer as retriable
    NOT_ENOUGH_REPLICAS (Kafka's choice: every client retries it, none refreshes metadata)."""
    if isinstance(error, _RETRIABLE):
        return NotEnoughReplicasError(f"unable to verify the partition is in the transaction: {error}")
    return error
