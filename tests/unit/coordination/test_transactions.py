"""The transaction coordinator's state machine: epochs, fencing, steps in flight, timeouts,
epoch exhaustion and the records it is replayed from (no Ray)."""

from __future__ import annotations

import itertools

import pytest

from raylog.common.requests import MAX_TRANSACTION_TIMEOUT_MS
from raylog.coordination.transactions import MAX_EPOCH, Step, TransactionCoordinator, TxnMetadata, TxnState
from raylog.errors import (
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    InvalidProducerIdMappingError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    ProducerFencedError,
)
from raylog.types import TopicPartition

TIMEOUT_MS = 60_000
T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)
U0 = TopicPartition("u", 0)


class Ids:
    """A producer id allocator that remembers what it handed out."""

    def __init__(self, start: int = 1000):
        self._next = itertools.count(start)
        self.given: list[int] = []

    def __call__(self) -> int:
        pid = next(self._next)
        self.given.append(pid)
        return pid


@pytest.fixture
def ids() -> Ids:
    return Ids()


def apply(coordinator: TransactionCoordinator, step: Step | None) -> TxnMetadata:
    """Apply a step (its record replicated) and return what it led to."""
    assert isinstance(step, Step)
    coordinator.applied(step)
    return step.metadata


def no_step(call) -> bool:
    """Whether ``call`` (abort_open or complete while a move is in flight) gives no step:
    their docstrings say None, the code raises CONCURRENT_TRANSACTIONS; either way nothing
    is written and the caller retries."""
    try:
        return call() is None
    except ConcurrentTransactionsError:
        return True


def init(coordinator, ids, tid="tx", timeout_ms=TIMEOUT_MS, now_ms=0) -> TxnMetadata:
    return apply(coordinator, coordinator.init_producer(tid, timeout_ms, now_ms, ids))


def open_txn(coordinator, ids, tid="tx", partitions=(T0,), now_ms=0) -> TxnMetadata:
    """An initialised producer with an Ongoing transaction over ``partitions``."""
    m = init(coordinator, ids, tid, now_ms=now_ms)
    return apply(coordinator, coordinator.add_partitions(tid, m.producer_id, m.producer_epoch, partitions, now_ms))


def test_init_allocates_a_producer_id_and_init_again_bumps_the_epoch(ids):
    """An unknown transactional id gets a fresh producer id at epoch 0; a second init keeps
    the id and bumps the epoch, fencing the first instance."""
    c = TransactionCoordinator()
    first = init(c, ids, now_ms=5)
    assert (first.producer_id, first.producer_epoch, first.state) == (1000, 0, TxnState.EMPTY)
    assert (first.timeout_ms, first.updated_ms, first.partitions) == (TIMEOUT_MS, 5, frozenset())
    second = init(c, ids, timeout_ms=1234, now_ms=6)
    assert (second.producer_id, second.producer_epoch, second.timeout_ms) == (1000, 1, 1234)
    assert ids.given == [1000]  # no second id was taken
    assert c.describe("tx") == second
    with pytest.raises(ProducerFencedError):
        c.add_partitions("tx", 1000, 0, [T0], 7)  # the first instance
    assert init(c, ids, tid="other").producer_id == 1001


def test_add_partitions_opens_the_transaction_and_is_a_no_op_when_nothing_is_new(ids):
    """The first add opens the transaction (Ongoing, start time set); adding what it holds
    already writes nothing; adding more keeps its start time (the timeout counts from it)."""
    c = TransactionCoordinator()
    m = init(c, ids)
    opened = apply(c, c.add_partitions("tx", m.producer_id, m.producer_epoch, [("t", 0), ("t", 1)], 10))
    assert (opened.state, opened.partitions, opened.start_ms) == (TxnState.ONGOING, frozenset({T0, T1}), 10)
    assert c.add_partitions("tx", m.producer_id, m.producer_epoch, [T1], 20) is None
    assert c.add_partitions("tx", m.producer_id, m.producer_epoch, [], 20) is None
    grown = apply(c, c.add_partitions("tx", m.producer_id, m.producer_epoch, [T1, U0], 30))
    assert (grown.partitions, grown.start_ms, grown.updated_ms) == (frozenset({T0, T1, U0}), 10, 30)
    assert (grown.producer_id, grown.producer_epoch) == (m.producer_id, m.producer_epoch)


def test_commit_prepares_with_the_bumped_epoch_then_completes(ids):
    """end(commit) gives PrepareCommit whose markers carry the old producer id with epoch + 1
    (the producer's next epoch too); complete gives CompleteCommit with no partitions."""
    c = TransactionCoordinator()
    m = open_txn(c, ids, partitions=(T0, T1))
    prepared = apply(c, c.end("tx", m.producer_id, m.producer_epoch, True, 50, ids))
    assert prepared.state is TxnState.PREPARE_COMMIT and prepared.committing
    assert (prepared.marker_producer_id, prepared.marker_epoch) == (m.producer_id, m.producer_epoch + 1)
    assert (prepared.producer_id, prepared.producer_epoch) == (m.producer_id, m.producer_epoch + 1)
    assert prepared.partitions == frozenset({T0, T1})  # the markers' partitions
    assert c.prepared() == [prepared]
    done = apply(c, c.complete("tx", 60))
    assert (done.state, done.partitions, done.start_ms) == (TxnState.COMPLETE_COMMIT, frozenset(), -1)
    assert (done.producer_id, done.producer_epoch) == (prepared.producer_id, prepared.producer_epoch)
    assert c.prepared() == [] and c.complete("tx", 70) is None  # nothing prepared any more


def test_a_failed_complete_leaves_the_transaction_prepared_and_can_be_tried_again(ids):
    """A Complete step whose record was not replicated changes nothing: the transaction is
    still prepared (listed by prepared()), and complete() gives the same step again."""
    c = TransactionCoordinator()
    m = open_txn(c, ids)
    prepared = apply(c, c.end("tx", m.producer_id, m.producer_epoch, True, 50, ids))
    step = c.complete("tx", 60)
    c.failed(step)
    assert c.describe("tx") == prepared and c.prepared() == [prepared]
    again = c.complete("tx", 61)
    assert again.metadata.state is TxnState.COMPLETE_COMMIT and again.record[0] == step.record[0]


def test_abort_prepares_then_completes_abort(ids):
    """end(abort) gives PrepareAbort (bumped epoch) and then CompleteAbort; the next
    transaction opens with the bumped epoch and the older one is fenced."""
    c = TransactionCoordinator()
    m = open_txn(c, ids)
    prepared = apply(c, c.end("tx", m.producer_id, m.producer_epoch, False, 50, ids))
    assert prepared.state is TxnState.PREPARE_ABORT and not prepared.committing
    assert prepared.marker_epoch == m.producer_epoch + 1
    assert apply(c, c.complete("tx", 60)).state is TxnState.COMPLETE_ABORT
    reopened = apply(c, c.add_partitions("tx", m.producer_id, m.producer_epoch + 1, [U0], 70))
    assert (reopened.state, reopened.partitions) == (TxnState.ONGOING, frozenset({U0}))
    with pytest.raises(ProducerFencedError):
        c.add_partitions("tx", m.producer_id, m.producer_epoch, [U0], 80)


def test_a_retried_end_after_completion_answers_the_completed_metadata(ids):
    """A producer whose end answer was lost retries with its old epoch: once complete it
    gets the completed metadata (with its new epoch), at once and writing nothing; asking
    the other outcome is INVALID_TXN_STATE; while the markers are being written the retry
    is CONCURRENT_TRANSACTIONS (retriable)."""
    c = TransactionCoordinator()
    m = open_txn(c, ids)
    apply(c, c.end("tx", m.producer_id, m.producer_epoch, True, 50, ids))
    with pytest.raises(ConcurrentTransactionsError):
        c.end("tx", m.producer_id, m.producer_epoch, True, 55, ids)
    done = apply(c, c.complete("tx", 60))
    answer = c.end("tx", m.producer_id, m.producer_epoch, True, 70, ids)
    assert answer == done and isinstance(answer, TxnMetadata)
    assert "tx" not in c._in_flight  # nothing to write: a later request is not held up
    with pytest.raises(InvalidTxnStateError):
        c.end("tx", m.producer_id, m.producer_epoch, False, 70, ids)
    assert c.describe("tx") == done


def test_a_retried_abort_after_completion_and_a_commit_after_an_abort(ids):
    """A retried abort answers CompleteAbort. A commit asked with the old epoch after an
    abort is not that producer's retry (it asked to commit: the abort was a timeout's or a
    newer instance's): the producer is fenced."""
    c = TransactionCoordinator()
    m = open_txn(c, ids)
    apply(c, c.end("tx", m.producer_id, m.producer_epoch, False, 50, ids))
    done = apply(c, c.complete("tx", 60))
    assert c.end("tx", m.producer_id, m.producer_epoch, False, 70, ids) == done
    with pytest.raises(ProducerFencedError):
        c.end("tx", m.producer_id, m.producer_epoch, True, 70, ids)
    timed_out = open_txn(c, ids, tid="slow", now_ms=0)
    (step,) = c.expired(TIMEOUT_MS + 1, ids)
    apply(c, step)
    apply(c, c.complete("slow", TIMEOUT_MS + 2))
    with pytest.raises(ProducerFencedError):
        c.end("slow", timed_out.producer_id, timed_out.producer_epoch, True, TIMEOUT_MS + 3, ids)
    assert c.end("slow", timed_out.producer_id, timed_out.producer_epoch, False, TIMEOUT_MS + 3, ids).state is (
        TxnState.COMPLETE_ABORT
    )


def test_older_epochs_other_ids_and_unknown_ids_are_refused(ids):
    """An epoch older than the current one is PRODUCER_FENCED (also an end two epochs back,
    which is no retry), another producer id is PRODUCER_FENCED, a newer epoch or an id never
    initialised is INVALID_PRODUCER_ID_MAPPING."""
    c = TransactionCoordinator()
    init(c, ids)
    m = init(c, ids)  # epoch 1
    with pytest.raises(ProducerFencedError):
        c.add_partitions("tx", m.producer_id, 0, [T0], 0)
    with pytest.raises(ProducerFencedError):
        c.end("tx", m.producer_id, 0, True, 0, ids)
    with pytest.raises(ProducerFencedError):
        c.add_partitions("tx", m.producer_id + 1, 1, [T0], 0)
    with pytest.raises(InvalidProducerIdMappingError):
        c.add_partitions("tx", m.producer_id, 2, [T0], 0)
    with pytest.raises(InvalidProducerIdMappingError):
        c.add_partitions("nobody", m.producer_id, 1, [T0], 0)
    with pytest.raises(InvalidProducerIdMappingError):
        c.end("nobody", m.producer_id, 1, True, 0, ids)
    # After a completed transaction, an end two epochs back is fenced, not a retry.
    opened = apply(c, c.add_partitions("tx", m.producer_id, 1, [T0], 0))
    apply(c, c.end("tx", opened.producer_id, 1, True, 0, ids))
    apply(c, c.complete("tx", 0))
    with pytest.raises(ProducerFencedError):
        c.end("tx", m.producer_id, 0, True, 0, ids)
    assert c.describe("tx").state is TxnState.COMPLETE_COMMIT


def test_an_empty_transaction_ends_without_a_step(ids):
    """end with nothing added answers the metadata at once (no markers, no epoch bump)."""
    c = TransactionCoordinator()
    m = init(c, ids)
    for commit in (True, False):
        assert c.end("tx", m.producer_id, m.producer_epoch, commit, 10, ids) == m
    assert c.describe("tx") == m and "tx" not in c._in_flight


def test_a_step_in_flight_holds_every_other_request_until_it_is_applied_or_failed(ids):
    """While a step's record is not replicated, every request for that id is
    CONCURRENT_TRANSACTIONS (even a first init), complete/abort_open/expired/prepared leave
    it alone; failed() undoes nothing that counted, applied() makes the move count."""
    c = TransactionCoordinator()
    first = c.init_producer("tx", TIMEOUT_MS, 0, ids)
    with pytest.raises(ConcurrentTransactionsError):
        c.init_producer("tx", TIMEOUT_MS, 0, ids)
    assert c.describe("tx") is None
    c.failed(first)
    assert c.describe("tx") is None  # the move never happened
    m = init(c, ids)
    step = c.add_partitions("tx", m.producer_id, m.producer_epoch, [T0], 0)
    for request in (
        lambda: c.init_producer("tx", TIMEOUT_MS, 0, ids),
        lambda: c.add_partitions("tx", m.producer_id, m.producer_epoch, [T1], 0),
        lambda: c.end("tx", m.producer_id, m.producer_epoch, True, 0, ids),
        lambda: c.end("tx", m.producer_id, m.producer_epoch - 1, True, 0, ids),
    ):
        with pytest.raises(ConcurrentTransactionsError):
            request()
    assert no_step(lambda: c.abort_open("tx", 0, ids))
    assert no_step(lambda: c.complete("tx", 0))
    assert c.expired(10 * TIMEOUT_MS, ids) == []
    c.failed(step)
    assert c.describe("tx") == m  # still Empty: add again
    opened = apply(c, c.add_partitions("tx", m.producer_id, m.producer_epoch, [T0], 0))
    prepare = c.end("tx", m.producer_id, m.producer_epoch, True, 0, ids)
    assert c.prepared() == []  # in flight: not yet the log's word
    assert c.describe("tx") == opened
    c.applied(prepare)
    assert [p.state for p in c.prepared()] == [TxnState.PREPARE_COMMIT]
    other = init(c, ids, tid="other")  # other ids are never held up
    assert other.producer_id != m.producer_id


def test_init_while_ongoing_is_refused_until_abort_open_has_completed(ids):
    """init_producer over an open transaction is CONCURRENT_TRANSACTIONS; abort_open gives
    the PrepareAbort step (bumped epoch); init stays refused until CompleteAbort, then bumps
    the epoch again, so the old instance is fenced twice over."""
    c = TransactionCoordinator()
    m = open_txn(c, ids)
    with pytest.raises(ConcurrentTransactionsError):
        c.init_producer("tx", TIMEOUT_MS, 10, ids)
    step = c.abort_open("tx", 10, ids)
    assert isinstance(step, Step) and step.metadata.state is TxnState.PREPARE_ABORT
    assert (step.metadata.marker_producer_id, step.metadata.marker_epoch) == (m.producer_id, m.producer_epoch + 1)
    assert no_step(lambda: c.abort_open("tx", 10, ids))  # in flight
    apply(c, step)
    assert c.abort_open("tx", 10, ids) is None  # not Ongoing any more
    with pytest.raises(ConcurrentTransactionsError):
        c.init_producer("tx", TIMEOUT_MS, 11, ids)
    apply(c, c.complete("tx", 12))
    again = init(c, ids, now_ms=13)
    assert (again.producer_id, again.producer_epoch) == (m.producer_id, m.producer_epoch + 2)
    assert again.state is TxnState.EMPTY
    assert (again.marker_producer_id, again.marker_epoch) == (-1, -1)
    with pytest.raises(ProducerFencedError):
        c.end("tx", m.producer_id, m.producer_epoch, False, 14, ids)  # no retry after a new init


def test_abort_open_is_none_when_nothing_is_open(ids):
    """abort_open has nothing to do for an unknown id or an idle transaction."""
    c = TransactionCoordinator()
    assert c.abort_open("tx", 0, ids) is None
    init(c, ids)
    assert c.abort_open("tx", 0, ids) is None


def test_expired_aborts_only_ongoing_transactions_past_their_timeout(ids):
    """Only Ongoing transactions older than their own timeout (strictly) are aborted; idle
    and prepared ones, and one whose abort is in flight already, are left alone."""
    c = TransactionCoordinator()
    old = open_txn(c, ids, tid="old", now_ms=0)  # timeout 60 s from 0
    young = open_txn(c, ids, tid="young", now_ms=30_000)
    init(c, ids, tid="idle")
    committing = open_txn(c, ids, tid="committing", now_ms=0)
    apply(c, c.end("committing", committing.producer_id, committing.producer_epoch, True, 1, ids))
    assert c.expired(TIMEOUT_MS, ids) == []  # exactly the timeout: not yet
    steps = c.expired(TIMEOUT_MS + 1, ids)
    assert [s.metadata.transactional_id for s in steps] == ["old"]
    aborted = steps[0].metadata
    assert aborted.state is TxnState.PREPARE_ABORT and aborted.marker_epoch == old.producer_epoch + 1
    assert aborted.partitions == old.partitions
    assert c.expired(TIMEOUT_MS + 2, ids) == []  # its step is in flight
    apply(c, steps[0])
    assert c.expired(10 * TIMEOUT_MS, ids)[0].metadata.transactional_id == "young"
    assert c.describe("young") == young  # (not applied yet)
    with pytest.raises(ProducerFencedError):  # the timed-out producer is fenced
        c.add_partitions("old", old.producer_id, old.producer_epoch, [T1], 2)


def test_epoch_exhaustion_switches_to_a_new_producer_id(ids):
    """The producer's epoch never reaches MAX_EPOCH: ending a transaction at MAX_EPOCH - 1
    gives markers for the old id at epoch MAX_EPOCH (the largest an int16 holds) and a new
    producer id at epoch 0 to the producer; the old id is fenced, a lost answer's retry is
    still recognised; init at MAX_EPOCH - 1 also moves to a new id, at MAX_EPOCH - 2 not."""
    c = TransactionCoordinator()
    near = TxnMetadata("tx", 7, MAX_EPOCH - 1, TIMEOUT_MS, TxnState.ONGOING, frozenset({T0}), 0, 0)
    c.load([near.record()])
    prepared = apply(c, c.end("tx", 7, MAX_EPOCH - 1, True, 10, ids))
    assert (prepared.marker_producer_id, prepared.marker_epoch) == (7, MAX_EPOCH)
    assert (prepared.producer_id, prepared.producer_epoch) == (ids.given[0], 0)
    done = apply(c, c.complete("tx", 11))
    assert c.end("tx", 7, MAX_EPOCH - 1, True, 12, ids) == done  # the retry of the lost answer
    with pytest.raises(ProducerFencedError):
        c.add_partitions("tx", 7, MAX_EPOCH - 1, [T0], 13)
    assert apply(c, c.add_partitions("tx", done.producer_id, 0, [T0], 14)).state is TxnState.ONGOING

    c.load([TxnMetadata("a", 8, MAX_EPOCH - 2, TIMEOUT_MS).record(), TxnMetadata("b", 9, MAX_EPOCH - 1, 1).record()])
    a = init(c, ids, tid="a")
    assert (a.producer_id, a.producer_epoch) == (8, MAX_EPOCH - 1)
    b = init(c, ids, tid="b")
    assert (b.producer_id, b.producer_epoch) == (ids.given[1], 0)
    # The abort of an Ongoing transaction at MAX_EPOCH - 1 (timeout, init) too.
    c.load([TxnMetadata("c", 11, MAX_EPOCH - 1, 1, TxnState.ONGOING, frozenset({T0}), 0, 0).record()])
    expired = c.expired(100, ids)
    assert [(s.metadata.marker_producer_id, s.metadata.marker_epoch) for s in expired] == [(11, MAX_EPOCH)]
    assert expired[0].metadata.producer_id == ids.given[2]
    assert all(m.producer_epoch < MAX_EPOCH and m.marker_epoch <= MAX_EPOCH for m in c.transactions.values())


def test_a_timed_out_abort_that_needs_a_producer_id_not_yet_fetched_waits_for_a_later_tick(ids):
    """The coordinator takes producer ids from those it fetched ahead, and none may be there
    (COORDINATOR_LOAD_IN_PROGRESS). A timed-out transaction at MAX_EPOCH - 1 needs one for
    its abort: it is left for a later tick, not left in flight for good, and the other
    timed-out transactions are aborted meanwhile."""

    def none_fetched() -> int:
        raise CoordinatorLoadInProgressError("the coordinator is fetching producer ids: retry")

    c = TransactionCoordinator()
    c.load(
        [
            TxnMetadata("last-epoch", 11, MAX_EPOCH - 1, 1, TxnState.ONGOING, frozenset({T0}), 0, 0).record(),
            TxnMetadata("plain", 12, 3, 1, TxnState.ONGOING, frozenset({T1}), 0, 0).record(),
        ]
    )
    (step,) = c.expired(100, none_fetched)
    assert step.metadata.transactional_id == "plain"
    apply(c, step)
    (later,) = c.expired(200, ids)  # (before: "last-epoch" stayed in flight, never aborted)
    assert (later.metadata.transactional_id, later.metadata.producer_id) == ("last-epoch", ids.given[0])


def test_records_round_trip_and_load_replays_them(ids):
    """A step's record decodes to its metadata; a coordinator that loads the applied steps'
    records in order holds the same state, later records win and a None value deletes;
    prepared() then lists the transactions whose markers may be missing."""
    full = TxnMetadata("tx-é", 2**40, 12, 900, TxnState.PREPARE_ABORT, frozenset({T0, U0}), 5, 6, 2**40 - 1, 13)
    assert TxnMetadata.from_record(*full.record()) == full
    assert full.record()[0] == "tx-é".encode()

    live = TransactionCoordinator()
    log = []

    def run(step):
        log.append(step.record)
        return apply(live, step)

    m = run(live.init_producer("committing", TIMEOUT_MS, 0, ids))
    m = run(live.add_partitions("committing", m.producer_id, m.producer_epoch, [T0, T1], 1))
    run(live.end("committing", m.producer_id, m.producer_epoch, True, 2, ids))
    m = run(live.init_producer("aborting", TIMEOUT_MS, 0, ids))
    m = run(live.add_partitions("aborting", m.producer_id, m.producer_epoch, [U0], 1))
    run(live.end("aborting", m.producer_id, m.producer_epoch, False, 2, ids))
    m = run(live.init_producer("done", TIMEOUT_MS, 0, ids))
    m = run(live.add_partitions("done", m.producer_id, m.producer_epoch, [U0], 1))
    run(live.end("done", m.producer_id, m.producer_epoch, True, 2, ids))
    run(live.complete("done", 3))
    m = run(live.init_producer("open", TIMEOUT_MS, 0, ids))
    run(live.add_partitions("open", m.producer_id, m.producer_epoch, [T0], 1))
    run(live.init_producer("deleted", TIMEOUT_MS, 0, ids))
    log.append((b"deleted", None))

    loaded = TransactionCoordinator()
    loaded.load(log)
    assert set(loaded.transactions) == {"committing", "aborting", "done", "open"}
    assert {k: v for k, v in live.transactions.items() if k != "deleted"} == loaded.transactions
    prepared = sorted(loaded.prepared(), key=lambda p: p.transactional_id)
    assert [(p.transactional_id, p.state) for p in prepared] == [
        ("aborting", TxnState.PREPARE_ABORT),
        ("committing", TxnState.PREPARE_COMMIT),
    ]
    # The loaded coordinator finishes them as the live one would.
    assert apply(loaded, loaded.complete("committing", 9)).state is TxnState.COMPLETE_COMMIT
    assert apply(loaded, loaded.complete("aborting", 9)).state is TxnState.COMPLETE_ABORT
    assert loaded.prepared() == []


@pytest.mark.parametrize("timeout_ms", [0, -1, MAX_TRANSACTION_TIMEOUT_MS + 1])
def test_an_invalid_timeout_is_refused(ids, timeout_ms):
    """transaction.timeout.ms outside [1, transaction.max.timeout.ms] is refused, for a new
    id and for a known one, and changes nothing."""
    c = TransactionCoordinator()
    with pytest.raises(InvalidTransactionTimeoutError):
        c.init_producer("tx", timeout_ms, 0, ids)
    m = init(c, ids)
    with pytest.raises(InvalidTransactionTimeoutError):
        c.init_producer("tx", timeout_ms, 0, ids)
    assert c.describe("tx") == m and ids.given == [m.producer_id]


@pytest.mark.parametrize("timeout_ms", [1, MAX_TRANSACTION_TIMEOUT_MS])
def test_the_timeout_bounds_are_accepted(ids, timeout_ms):
    """Both ends of the range are valid."""
    assert init(TransactionCoordinator(), ids, timeout_ms=timeout_ms).timeout_ms == timeout_ms


def test_an_end_without_bump_keeps_the_producers_id_and_epoch(ids):
    """bump_epoch=False (a Kafka client at EndTxn v0-4): the markers carry the producer's
    current epoch, it keeps its id and epoch for the next transaction, a retry of the end
    after completion is answered at once, and the record says the markers did not bump."""
    c = TransactionCoordinator()
    m = open_txn(c, ids, partitions=(T0,))
    prepared = apply(c, c.end("tx", m.producer_id, m.producer_epoch, True, 50, ids, bump_epoch=False))
    assert (prepared.state, prepared.bumps_epoch) == (TxnState.PREPARE_COMMIT, False)
    assert (prepared.marker_producer_id, prepared.marker_epoch) == (m.producer_id, m.producer_epoch)
    assert (prepared.producer_id, prepared.producer_epoch) == (m.producer_id, m.producer_epoch)
    assert TxnMetadata.from_record(*prepared.record()) == prepared
    done = apply(c, c.complete("tx", 60))
    assert (done.state, done.producer_id, done.producer_epoch) == (TxnState.COMPLETE_COMMIT, m.producer_id, 0)
    assert c.end("tx", m.producer_id, m.producer_epoch, True, 61, ids, bump_epoch=False) == done  # a retry
    # The same epoch opens and aborts the next transaction.
    apply(c, c.add_partitions("tx", m.producer_id, m.producer_epoch, [T1], 70))
    aborting = apply(c, c.end("tx", m.producer_id, m.producer_epoch, False, 80, ids, bump_epoch=False))
    assert (aborting.state, aborting.marker_epoch, aborting.producer_epoch) == (TxnState.PREPARE_ABORT, 0, 0)
    apply(c, c.complete("tx", 90))
    # An abort the coordinator decides (timeout) still bumps, fencing that producer.
    apply(c, c.add_partitions("tx", m.producer_id, m.producer_epoch, [T0], 100))
    (expired,) = c.expired(100 + TIMEOUT_MS + 1, ids)
    assert (expired.metadata.bumps_epoch, expired.metadata.producer_epoch) == (True, 1)
    apply(c, expired)
    apply(c, c.complete("tx", 200_000))
    with pytest.raises(ProducerFencedError):
        c.add_partitions("tx", m.producer_id, m.producer_epoch, [T0], 200_001)
    # A new instance's init clears the flag.
    assert init(c, ids).bumps_epoch is True


def test_a_record_without_the_bump_field_reads_as_bumped(ids):
    """Records written before ``bumps_epoch`` existed load as bumping (all ends bumped then)."""
    import msgpack

    m = TxnMetadata("tx", 7, 3, 900, TxnState.PREPARE_COMMIT, frozenset({T0}), 5, 6, 7, 3, bumps_epoch=False)
    key, value = m.record()
    old = msgpack.unpackb(value)
    del old["bump"]
    assert TxnMetadata.from_record(key, msgpack.packb(old)).bumps_epoch is True
