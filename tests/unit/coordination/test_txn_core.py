"""The transaction coordinator's sequencing as a step core: journal before a move counts,
markers before Complete, Complete before the producer's answer (no Ray)."""

from __future__ import annotations

import itertools

import pytest

from raylog.coordination.transactions import TransactionCoordinator, TxnState
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
from raylog.errors import ConcurrentTransactionsError, NotCoordinatorError, NotEnoughReplicasError
from raylog.types import TopicPartition

TP = TopicPartition("t", 0)
TIMEOUT_MS = 60_000


@pytest.fixture
def core() -> TransactionCore:
    return TransactionCore(TransactionCoordinator(), itertools.count(100).__next__)


def journaled(core: TransactionCore, effects: list, error: Exception | None = None) -> list:
    """Carry out the one Journal effect of ``effects`` (with ``error``): the core's next effects."""
    (journal,) = [e for e in effects if isinstance(e, Journal)]
    return core.step(Journaled(journal.step, error))


def ongoing(core: TransactionCore) -> None:
    """Transactional id "x": producer id 100, epoch 0, a transaction open with t-0."""
    assert journaled(core, core.step(InitProducerId("init", "x", TIMEOUT_MS, 0))) == [Reply("init", (100, 0))]
    assert journaled(core, core.step(AddPartitions("add", "x", 100, 0, (TP,), 0))) == [Reply("add", (100, 0))]


def test_a_move_counts_and_is_answered_only_once_journaled(core):
    (journal,) = core.step(InitProducerId("init", "x", TIMEOUT_MS, 0))
    assert isinstance(journal, Journal) and core.state.describe("x") is None
    assert core.step(Journaled(journal.step)) == [Reply("init", (100, 0))]
    assert core.state.describe("x").producer_id == 100


def test_end_txn_is_answered_after_its_markers_and_its_complete_record(core):
    ongoing(core)
    (prepare,) = core.step(EndTxn("end", "x", 100, 0, True, True, 10))
    (complete,) = core.step(Journaled(prepare.step))
    assert isinstance(complete, CompleteTransaction) and complete.metadata.state is TxnState.PREPARE_COMMIT
    assert core.completing == {"x": ["end"]}  # the producer waits
    retry = core.step(EndTxn("again", "x", 100, 0, True, True, 11))
    assert isinstance(retry[0].answer, ConcurrentTransactionsError)
    (record,) = core.step(MarkersWritten("x", 12))
    assert record.step.metadata.state is TxnState.COMPLETE_COMMIT
    assert core.step(Journaled(record.step)) == [Reply("end", (100, 1))]  # the bumped epoch
    assert core.completing == {}


def test_a_move_that_was_not_journaled_did_not_happen(core):
    ongoing(core)
    effects = core.step(EndTxn("end", "x", 100, 0, False, True, 10))
    failed = NotEnoughReplicasError("the ISR is too small")
    assert journaled(core, effects, failed) == [Reply("end", failed)]
    assert core.state.describe("x").state is TxnState.ONGOING  # the producer may end it again
    assert isinstance(core.step(EndTxn("end", "x", 100, 0, False, True, 11))[0], Journal)


def test_init_aborts_an_open_transaction_first_and_asks_the_producer_to_come_back(core):
    ongoing(core)
    abort = core.step(InitProducerId("init2", "x", TIMEOUT_MS, 10))
    complete, answer = journaled(core, abort)
    assert complete.metadata.state is TxnState.PREPARE_ABORT
    assert isinstance(answer, Reply) and isinstance(answer.answer, ConcurrentTransactionsError)


def test_a_failed_complete_record_fails_the_waiting_producer_and_the_tick_completes_it_again(core):
    ongoing(core)
    journaled(core, core.step(EndTxn("end", "x", 100, 0, True, True, 10)))
    failed = NotEnoughReplicasError("the ISR is too small")
    assert journaled(core, core.step(MarkersWritten("x", 11)), failed) == [Reply("end", failed)]
    (again,) = core.step(Tick(12))
    assert isinstance(again, CompleteTransaction) and again.metadata.state is TxnState.PREPARE_COMMIT


def test_a_coordinator_that_stopped_writing_markers_tells_the_waiting_producer(core):
    ongoing(core)
    journaled(core, core.step(EndTxn("end", "x", 100, 0, True, True, 10)))
    moved = NotCoordinatorError("the coordinator moved")
    assert core.step(MarkersWritten("x", 11, moved)) == [Reply("end", moved)]


def test_the_tick_aborts_a_transaction_past_its_timeout_and_completes_it(core):
    assert journaled(core, core.step(InitProducerId("init", "x", 1_000, 0)))
    journaled(core, core.step(AddPartitions("add", "x", 100, 0, (TP,), 0)))
    assert core.step(Tick(500)) == []
    effects = core.step(Tick(2_000))
    (complete,) = journaled(core, effects)
    assert complete.metadata.state is TxnState.PREPARE_ABORT and complete.metadata.producer_epoch == 1
    assert core.step(Tick(2_100)) == []  # its completion is under way
