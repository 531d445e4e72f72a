"""The transaction coordinator as a step core: the order of its moves and of its answers
(no Ray, clock, thread or file). The transaction coordinator actor and the seeded simulation
both pump it.

:class:`~raylog.coordination.transactions.TransactionCoordinator` says what a request moves a
transactional id to; :class:`TransactionCore` says in what order the moves are made durable,
completed and answered. ``step(event)`` returns the effects, in order:

- :class:`Journal`: append the move's record to ``__transaction_state`` with acks=all, then
  step :class:`Journaled` with the outcome; the move counts only then (one move per
  transactional id at a time: meanwhile its requests get CONCURRENT_TRANSACTIONS);
- :class:`CompleteTransaction`: a prepared transaction's markers are to be written
  (:class:`~raylog.coordination.txn_markers.MarkerWriter`'s rounds), then step
  :class:`MarkersWritten`; then its Complete record is journaled;
- :class:`Reply`: the answer to a request (the pump's handle for it), a ``(producer id,
  producer epoch)`` or a raylog error.

The sequences, as Kafka's coordinator makes them:

- InitProducerId: an open transaction is aborted first (its PrepareAbort journaled and
  completed): meanwhile the producer is answered CONCURRENT_TRANSACTIONS and asks again;
  then the id's next epoch is journaled and answered.
- AddPartitionsToTxn: the partitions journaled (none new: nothing to write), then answered.
- EndTxn: PrepareCommit or PrepareAbort journaled, the markers written, Complete journaled,
  then the producer answered with the id and epoch to use next (a retry of an ended
  transaction is answered at once). How long a pump lets the producer wait is its own
  (the actor answers CONCURRENT_TRANSACTIONS after a while; the completion goes on).
- Tick: prepared transactions whose completion is not under way (a coordinator that took
  over, a Complete record that failed) are completed; open transactions past their timeout
  are aborted (the producer is fenced by the bumped epoch) and completed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from raylog.coordination.transactions import Step, TransactionCoordinator, TxnMetadata
from raylog.errors import RaylogError

logger = logging.getLogger(__name__)


# --- events ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class InitProducerId:
    request: Any
    transactional_id: str
    timeout_ms: int
    now_ms: int


@dataclass(frozen=True)
class AddPartitions:
    request: Any
    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: tuple  # of TopicPartition
    now_ms: int


@dataclass(frozen=True)
class EndTxn:
    request: Any
    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    bump_epoch: bool
    now_ms: int


@dataclass(frozen=True)
class Tick:
    now_ms: int


@dataclass(frozen=True)
class Journaled:
    """What became of a :class:`Journal` effect: None, or the error that kept it from the ISR."""

    step: Step
    error: Exception | None = None


@dataclass(frozen=True)
class MarkersWritten:
    """A :class:`CompleteTransaction`'s markers are all written (None), or the pump gave up
    (the coordinator stopped: ``error``)."""

    transactional_id: str
    now_ms: int
    error: Exception | None = None


# --- effects --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Journal:
    step: Step


@dataclass(frozen=True)
class CompleteTransaction:
    metadata: TxnMetadata


@dataclass(frozen=True)
class Reply:
    request: Any
    answer: tuple[int, int] | Exception


class TransactionCore:
    """See the module docstring. ``new_producer_id``: the next producer id of the cluster's
    blocks (it raises CoordinatorLoadInProgressError when none is held now)."""

    def __init__(self, state: TransactionCoordinator, new_producer_id: Callable[[], int]):
        self.state = state
        self._new_producer_id = new_producer_id
        #: What each transactional id's journaled move leads to: (what next, the event).
        self._then: dict[str, tuple[str, Any]] = {}
        #: Prepared transactions whose markers are being written -> the EndTxn requests waiting.
        self.completing: dict[str, list[Any]] = {}

    def step(self, event: Any) -> list:
        handler = getattr(self, f"_on_{type(event).__name__}")
        return handler(event)

    # --- requests -------------------------------------------------------------------------

    def _on_InitProducerId(self, event: InitProducerId) -> list:  # noqa: N802 (named after the event)
        try:
            abort = self.state.abort_open(event.transactional_id, event.now_ms, self._new_producer_id)
        except RaylogError as exc:
            return [Reply(event.request, exc)]
        if abort is not None:
            return self._journal(abort, "init", event)
        return self._init(event)

    def _init(self, event: InitProducerId) -> list:
        try:
            step = self.state.init_producer(
                event.transactional_id, event.timeout_ms, event.now_ms, self._new_producer_id
            )
        except RaylogError as exc:
            return [Reply(event.request, exc)]
        return self._journal(step, "answer", event)

    def _on_AddPartitions(self, event: AddPartitions) -> list:  # noqa: N802
        try:
            step = self.state.add_partitions(
                event.transactional_id, event.producer_id, event.producer_epoch, event.partitions, event.now_ms
            )
        except RaylogError as exc:
            return [Reply(event.request, exc)]
        if step is None:
            return [Reply(event.request, (event.producer_id, event.producer_epoch))]
        return self._journal(step, "answer", event)

    def _on_EndTxn(self, event: EndTxn) -> list:  # noqa: N802
        try:
            outcome = self.state.end(
                event.transactional_id,
                event.producer_id,
                event.producer_epoch,
                event.commit,
                event.now_ms,
                self._new_producer_id,
                event.bump_epoch,
            )
        except RaylogError as exc:
            return [Reply(event.request, exc)]
        if isinstance(outcome, TxnMetadata):  # ended already (a retry), or nothing to end
            return [Reply(event.request, (outcome.producer_id, outcome.producer_epoch))]
        return self._journal(outcome, "wait", event)

    def _on_Tick(self, event: Tick) -> list:  # noqa: N802
        effects = [self._complete(m) for m in self.state.prepared() if m.transactional_id not in self.completing]
        for step in self.state.expired(event.now_ms, self._new_producer_id):
            m = step.metadata
            logger.info(
                "transaction %r of producer id %d epoch %d timed out after %d ms (%d partitions): aborting it; "
                "that producer is fenced (epoch now %d)",
                m.transactional_id,
                m.marker_producer_id,
                m.marker_epoch - 1,
                m.timeout_ms,
                len(m.partitions),
                m.producer_epoch,
            )
            effects += self._journal(step, "", None)
        return effects

    # --- the pump's outcomes --------------------------------------------------------------

    def _on_Journaled(self, event: Journaled) -> list:  # noqa: N802
        m = event.step.metadata
        then, request_event = self._then.pop(m.transactional_id, ("", None))
        if event.error is not None:
            self.state.failed(event.step)
            if then == "completed":  # the Complete record failed: the tick completes it again
                return self._replies(self.completing.pop(m.transactional_id, []), event.error)
            if request_event is None:
                logger.warning("transaction %r: %s not journaled: %s", m.transactional_id, m.state.value, event.error)
                return []
            return [Reply(request_event.request, event.error)]
        self.state.applied(event.step)
        effects = []
        if m.state.prepared:
            effects.append(self._complete(m))
        if then == "init":  # an open transaction was aborted: now the producer's own move
            effects += self._init(request_event)
        elif then == "answer":
            effects.append(Reply(request_event.request, (m.producer_id, m.producer_epoch)))
        elif then == "wait":
            self.completing[m.transactional_id].append(request_event.request)
        elif then == "completed":
            effects += self._replies(self.completing.pop(m.transactional_id, []), self._answered_end(m))
        return effects

    def _on_MarkersWritten(self, event: MarkersWritten) -> list:  # noqa: N802
        tid = event.transactional_id
        if event.error is not None:
            return self._replies(self.completing.pop(tid, []), event.error)
        step = self.state.complete(tid, event.now_ms)
        if step is None:  # not prepared any more (another completion ended it)
            current = self.state.describe(tid)
            return self._replies(self.completing.pop(tid, []), self._answered_end(current))
        return self._journal(step, "completed", None)

    # --- helpers --------------------------------------------------------------------------

    def _journal(self, step: Step, then: str, event: Any) -> list:
        self._then[step.metadata.transactional_id] = (then, event)
        return [Journal(step)]

    def _complete(self, metadata: TxnMetadata) -> CompleteTransaction:
        self.completing.setdefault(metadata.transactional_id, [])
        return CompleteTransaction(metadata)

    @staticmethod
    def _answered_end(metadata: TxnMetadata | None) -> tuple[int, int] | Exception:
        if metadata is None:
            return RaylogError("the transactional id is gone")
        return (metadata.producer_id, metadata.producer_epoch)

    @staticmethod
    def _replies(requests: list, answer: Any) -> list:
        return [Reply(request, answer) for request in requests]
