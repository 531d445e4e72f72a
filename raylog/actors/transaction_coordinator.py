"""The transaction coordinator: a replica of a ``__transaction_state`` partition that, while
it leads, serves the transactional ids that hash to its partition (Kafka's design; loading,
acks=all appends and hand-over are :mod:`raylog.actors.coordinator`'s, the state machine is
:mod:`raylog.coordination.transactions`, the order of its moves and answers
:class:`~raylog.coordination.txn_core.TransactionCore`'s, of which this actor is a pump:
:meth:`TransactionCoordinatorActor._run_txn`).

Ending a transaction takes three steps: the Prepare record (acks=all: from then on the
outcome is decided, whoever coordinates), a marker in every partition of the transaction
(:meth:`PartitionReplicaActor.write_txn_marker`, acks=all, retried against each
partition's current leader until written), and the Complete record. The producer is
answered after the Complete record, so once ``commit_transaction()`` returns, every
partition's read_committed consumers may read the transaction (Kafka answers after the
Prepare record and lets the next transaction wait). A coordinator that takes over, or finds
a transaction past its timeout, runs the same completion: markers are idempotent.

Producer ids for new transactional ids come from the controller, fetched ahead on a thread
of their own (:mod:`raylog.coordination.producer_ids`): a request never waits for the
controller holding the lock.

Concurrency: as the replica's; each transaction's completion runs on a thread of its own,
outside the lock while it calls partition leaders, one at a time per transactional id; the
lock is never held across a call to a peer actor.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import Any

import ray

from raylog.actors.coordinator import CoordinatorActor, now_ms
from raylog.actors.producer_ids import SharedProducerIdPool
from raylog.actors.replica_parts import PEER_CALL_TIMEOUT_S, REPLICA_BACKOFF_S
from raylog.common import record_batch
from raylog.common.acl import ACLOperation as Op
from raylog.common.acl import ResourceType
from raylog.common.names import OFFSETS_TOPIC
from raylog.coordination.fetcher import Next
from raylog.coordination.transactions import TransactionCoordinator, TxnMetadata
from raylog.coordination.txn_core import (
    AddPartitions,
    CompleteTransaction,
    EndTxn,
    InitProducerId,
    Journal,
    Journaled,
    MarkersWritten,
    Reply,
    Tick,
    TransactionCore,
)
from raylog.coordination.txn_markers import FindLeaders, MarkerWriter, WriteMarkers
from raylog.errors import (
    ConcurrentTransactionsError,
    NotCoordinatorError,
    RaylogError,
)
from raylog.protocol import TxnResponse, error_fields, error_of
from raylog.types import TopicPartition

#: Calls a coordinator serves at once (each producer's calls are short; end_txn waits for
#: its markers).
MAX_CONCURRENCY = 64
#: How long an end_txn call waits for its markers before answering CONCURRENT_TRANSACTIONS
#: (Kafka's answer while a transaction completes: the completion goes on, the producer asks
#: again and is answered once it is done).
END_TXN_WAIT_S = 20.0

logger = logging.getLogger(__name__)
TXN = ResourceType.TRANSACTIONAL_ID


class TransactionCoordinatorActor(CoordinatorActor):
    """See the module docstring."""

    MAX_CONCURRENCY = MAX_CONCURRENCY
    TICK_INTERVAL_S = 0.5

    def __init__(self, *args: Any, **kwargs: Any):
        self._core: TransactionCore | None = None  # the loaded state's sequencing
        #: The leader actor each marker last went to (asked of the controller when unknown
        #: or after a failed marker): markers of a steady pipeline cost no controller call.
        self._marker_leaders: dict[TopicPartition, Any] = {}
        self._producer_ids = SharedProducerIdPool()
        super().__init__(*args, **kwargs)

    # --- the state ----------------------------------------------------------------------

    def _new_state(self) -> TransactionCoordinator:
        return TransactionCoordinator()

    def _load_batch(self, state: TransactionCoordinator, header: record_batch.BatchHeader, records: list) -> None:
        if not header.attributes & record_batch.CONTROL:
            state.load(records)

    def _loaded(self, state: TransactionCoordinator) -> None:
        self._core = TransactionCore(state, self._new_producer_id)
        self._run_txn(self._core, self._core.step(Tick(now_ms())))  # what was prepared completes
        self._fetch_producer_ids_later()

    def _describe_state(self, state: TransactionCoordinator) -> str:
        return f"{len(state.transactions)} transactional id(s), {len(state.prepared())} to complete"

    def _tick(self, state: TransactionCoordinator) -> None:
        self._run_txn(self._core, self._core.step(Tick(now_ms())))

    # --- requests -----------------------------------------------------------------------

    def init_producer_id(self, transactional_id: str, timeout_ms: int, session: str | None = None) -> TxnResponse:
        """The producer id and next epoch of a transactional producer instance (fencing every
        older one); an open transaction is aborted first (CONCURRENT_TRANSACTIONS meanwhile).
        With no producer id fetched yet, it waits for one first, without the lock
        (COORDINATOR_LOAD_IN_PROGRESS if none comes and a new id needs one). ``session``: the
        caller's token (every request here needs WRITE on the transactional id, and adding
        partitions WRITE on their topics; see :class:`~raylog.actors.access.Guard`)."""
        try:
            self._guard.require(session, Op.WRITE, TXN, transactional_id)
        except RaylogError as exc:
            return TxnResponse(**error_fields(exc))
        if not self._producer_ids.available():
            self._fetch_producer_ids_later()
            self._producer_ids.wait(PEER_CALL_TIMEOUT_S)
        return self._request(lambda request: InitProducerId(request, transactional_id, timeout_ms, now_ms()))

    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list,
        session: str | None = None,
    ) -> TxnResponse:
        """Partitions (and group offset partitions) join the producer's transaction."""

        def event(request: concurrent.futures.Future) -> AddPartitions:
            self._require_partitions(session, transactional_id, partitions)
            return AddPartitions(request, transactional_id, producer_id, producer_epoch, tuple(partitions), now_ms())

        return self._request(event)

    def end_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        bump_epoch: bool = True,
        session: str | None = None,
    ) -> TxnResponse:
        """Commit or abort the producer's transaction; answered once every marker is written
        (CONCURRENT_TRANSACTIONS after ``END_TXN_WAIT_S``: ask again), with the producer id
        and epoch to use next (the same with ``bump_epoch=False``: a
        Kafka client at EndTxn v0-4, see :mod:`raylog.coordination.transactions`)."""
        try:
            self._guard.require(session, Op.WRITE, TXN, transactional_id)
        except RaylogError as exc:
            return TxnResponse(**error_fields(exc))
        return self._request(
            lambda request: EndTxn(request, transactional_id, producer_id, producer_epoch, commit, bump_epoch, now_ms())
        )

    def verify_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str, partition: int
    ) -> TxnResponse:
        """Whether the partition is in the producer's ongoing transaction (a partition leader
        asks before the transaction's first batch there opens it: KIP-890 part 1's
        AddPartitionsToTxn with verifyOnly); the error says why not (see
        :meth:`TransactionCoordinator.verify`)."""
        with self._lock:
            try:
                tp = TopicPartition(topic, partition)
                self._loaded_state().verify(transactional_id, producer_id, producer_epoch, tp)
            except Exception as exc:  # noqa: BLE001 — every error travels back as a code
                return TxnResponse(**error_fields(exc))
        return TxnResponse(producer_id=producer_id, producer_epoch=producer_epoch)

    def describe_transactions(
        self, transactional_ids: list[str] | None = None, session: str | None = None
    ) -> TxnResponse:
        """The state of the ids named (those known), or of every id this coordinator serves,
        as dicts (Kafka's DescribeTransactions / ListTransactions); only the ids the caller
        may DESCRIBE."""
        with self._lock:
            try:
                state = self._loaded_state()
                access = self._guard.access(session)
            except Exception as exc:  # noqa: BLE001
                return TxnResponse(**error_fields(exc))
            found = [state.describe(t) for t in transactional_ids] if transactional_ids else state.transactions.values()
            return TxnResponse(
                value=[
                    _described(m)
                    for m in found
                    if m is not None and (access is None or access.allows(Op.DESCRIBE, TXN, m.transactional_id))
                ]
            )

    def _require_partitions(self, session: str | None, transactional_id: str, partitions: list) -> None:
        """AddPartitionsToTxn's checks: WRITE on the transactional id and on each topic (a
        group's offsets partition is the group's, checked where the offsets are committed)."""
        access = self._guard.access(session)
        if access is not None:
            access.require(Op.WRITE, TXN, transactional_id)
            for topic in sorted({topic for topic, _ in partitions} - {OFFSETS_TOPIC}):
                access.require(Op.WRITE, ResourceType.TOPIC, topic)

    # --- the pump ---------------------------------------------------------------------

    def _request(self, make_event: Callable[[concurrent.futures.Future], Any]) -> TxnResponse:
        """Step the core with the request ``make_event`` makes and answer it: at once, or once
        its transaction completed (EndTxn: CONCURRENT_TRANSACTIONS after ``END_TXN_WAIT_S``,
        the completion goes on)."""
        request: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            try:
                self._loaded_state()
                core = self._core
                self._run_txn(core, core.step(make_event(request)))
            except Exception as exc:  # noqa: BLE001 — every error travels back as a code
                return TxnResponse(**error_fields(exc))
        try:
            answer = request.result(timeout=END_TXN_WAIT_S)
        except concurrent.futures.TimeoutError:
            answer = ConcurrentTransactionsError("the transaction's markers are not all written yet")
        if isinstance(answer, Exception):
            return TxnResponse(**error_fields(answer))
        return TxnResponse(producer_id=answer[0], producer_epoch=answer[1])

    def _run_txn(self, core: TransactionCore, effects: list) -> None:
        """Do what ``core`` asks, in order (holding ``_lock``; see
        :mod:`~raylog.coordination.txn_core`): journal a move (acks=all; the lock is released
        while the ISR gets it) and step the outcome, answer a request, start a completion."""
        effects = list(effects)
        while effects:
            effect = effects.pop(0)
            if isinstance(effect, Journal):
                error = None
                try:
                    self._await_records(self._append_records([effect.step.record]))
                except Exception as exc:  # noqa: BLE001 — the core decides what it means
                    error = exc
                effects[:0] = core.step(Journaled(effect.step, error))
            elif isinstance(effect, Reply):
                if not effect.request.done():
                    effect.request.set_result(effect.answer)
            elif isinstance(effect, CompleteTransaction):
                self._start(self._complete, core, effect.metadata, self._coordinator_stop)

    def _complete(self, core: TransactionCore, metadata: TxnMetadata, stop: threading.Event | None) -> None:
        """Write every marker of ``metadata``'s transaction (without the lock), then step the
        core (which journals the Complete record)."""
        error = None
        try:
            self._write_markers(metadata, stop)
        except Exception as exc:  # noqa: BLE001 — told to the waiting EndTxn, if any
            error = exc
        with self._lock:
            if error is None and (stop is None or stop.is_set()):
                error = NotCoordinatorError("the coordinator moved before the transaction completed")
            if error is not None:
                logger.warning(
                    "%s: transaction %r not completed: %s", self.partition.name, metadata.transactional_id, error
                )
            self._run_txn(core, core.step(MarkersWritten(metadata.transactional_id, now_ms(), error)))

    def _write_markers(self, metadata: TxnMetadata, stop: threading.Event | None) -> None:
        """A marker in every partition of the transaction, each retried against the
        partition's current leader until written, or until this coordinator stops: the
        rounds are :class:`~raylog.coordination.txn_markers.MarkerWriter`'s, the calls here.

        Raises:
            NotCoordinatorError: the coordinator stopped first.
        """
        writer = MarkerWriter(metadata, self._marker_leaders, self.partition.leader_epoch)
        while (request := writer.next_request()) is not None:
            if stop is None or stop.is_set():
                raise NotCoordinatorError("the coordinator moved before the markers were written")
            if isinstance(request, FindLeaders):
                then = writer.on_leaders(self._leaders(list(request.topics)))
            else:
                then = writer.on_answers(self._send_markers(request))
            if then is Next.BACKOFF:
                stop.wait(REPLICA_BACKOFF_S)

    def _send_markers(self, request: WriteMarkers) -> dict[TopicPartition, BaseException | None]:
        """Each marker of ``request`` sent to its leader at once; what each answered (None: written)."""
        calls = {
            tp: leader.write_txn_marker.remote(
                request.producer_id,
                request.producer_epoch,
                request.commit,
                request.coordinator_epoch,
                bumps_epoch=request.bumps_epoch,
            )
            for tp, leader in request.leaders.items()
        }
        answers: dict[TopicPartition, BaseException | None] = {}
        for tp, ref in calls.items():
            try:
                answers[tp] = error_of(ray.get(ref, timeout=PEER_CALL_TIMEOUT_S))
            except ray.exceptions.RayError as exc:  # (a timeout is a RayError)
                answers[tp] = exc
            if answers[tp] is not None:
                logger.info("%s: marker for %s not written yet: %s", self.partition.name, tp, answers[tp])
        return answers

    def _leaders(self, topics: list[str]) -> dict | None:
        """The controller's metadata of ``topics`` (those deleted are missing), or None."""
        try:
            return ray.get(
                self._controller().metadata.remote(topics, session=self._guard.broker_token()),
                timeout=PEER_CALL_TIMEOUT_S,
            )
        except (ValueError, ray.exceptions.RayError):
            return None

    def _new_producer_id(self) -> int:
        """A producer id fetched ahead (holding ``_lock``, so never waiting for the
        controller: a new transactional id or an exhausted epoch); fetches more when few
        are left.

        Raises:
            CoordinatorLoadInProgressError: none is held now (retriable).
        """
        try:
            return self._producer_ids.take()
        finally:
            self._fetch_producer_ids_later()

    def _fetch_producer_ids_later(self) -> None:
        """Fetch the next producer ids on a thread of their own, if the pool runs low and
        no fetch is under way."""
        count = self._producer_ids.start_fetch()
        if count:
            self._start(self._fetch_producer_ids, count)

    def _fetch_producer_ids(self, count: int) -> None:
        """``count`` producer ids from the controller, into the pool (without ``_lock``); a
        failed round is fetched again after the pool's backoff, until one brings ids or the
        replica stops."""
        while count:
            try:
                ids = ray.get(self._controller().allocate_producer_ids.remote(count), timeout=PEER_CALL_TIMEOUT_S)
            except (ValueError, ray.exceptions.RayError) as exc:  # (a timeout is a RayError)
                backoff_s = self._producer_ids.fetch_failed()
                logger.warning(
                    "%s: no producer ids from the controller (%r): asking again in %.1f s",
                    self.partition.name,
                    exc,
                    backoff_s,
                )
                if self._stopped.wait(backoff_s):
                    return
                count = self._producer_ids.start_fetch()
            else:
                self._producer_ids.fetched(ids)
                return

    def _unloaded(self) -> None:
        core, self._core = self._core, None
        for requests in core.completing.values() if core is not None else ():
            for request in requests:
                if not request.done():
                    request.set_result(NotCoordinatorError("the coordinator moved"))


def _described(m: TxnMetadata) -> dict:
    return {
        "transactional_id": m.transactional_id,
        "state": m.state.value,
        "producer_id": m.producer_id,
        "producer_epoch": m.producer_epoch,
        "timeout_ms": m.timeout_ms,
        "partitions": sorted(m.partitions),
        "start_ms": m.start_ms,
    }
