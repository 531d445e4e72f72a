"""The producer's TransactionManager against a scripted coordinator: the calls it makes,
its retries, and when a transaction is abortable or fenced (no producer, no Ray)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from raylog.clients.producer import transaction_manager as tm_module
from raylog.clients.producer.transaction_manager import TransactionManager
from raylog.errors import (
    ConcurrentTransactionsError,
    CoordinatorNotAvailableError,
    IllegalStateError,
    InvalidProducerEpochError,
    KafkaTimeoutError,
    ProducerFencedError,
    TopicAuthorizationFailedError,
    TransactionAbortableError,
)
from raylog.protocol import TxnResponse
from raylog.types import TopicPartition
from tests.unit.clients.producer_fakes import ScriptedCoordinator

TXN_ID = "copier-1"


@pytest.fixture
def coordinator(monkeypatch):
    scripted = ScriptedCoordinator()
    monkeypatch.setattr(tm_module, "CoordinatorClient", scripted.client)
    monkeypatch.setattr(tm_module, "call", lambda ref, timeout_s: ref)  # a "reference" is its answer
    return scripted


def manager(transactional_id: str | None = TXN_ID, max_block_s: float = 1.0) -> TransactionManager:
    controller = SimpleNamespace(find_coordinator=SimpleNamespace(remote=lambda group_id, session: (12, "handle")))
    cluster = SimpleNamespace(controller=controller)
    session = SimpleNamespace(token=lambda: "token")
    return TransactionManager(cluster, session, transactional_id, 60_000, max_block_s, backoff_s=0.001)


def test_a_producer_without_a_transactional_id_is_never_outside_a_transaction_and_refuses_every_step(coordinator):
    plain = manager(None)
    assert not plain.outside
    with pytest.raises(IllegalStateError):
        plain.begin(producer_id=5)
    with pytest.raises(IllegalStateError):
        plain.require_transaction()
    assert coordinator.calls == []


def test_a_transaction_adds_each_partition_once_and_ends_with_the_coordinators_next_epoch(coordinator):
    txn = manager()
    assert txn.outside
    answer = txn.init_producer_id(timeout=None)
    assert (answer.producer_id, answer.producer_epoch) == (7, 3)
    with pytest.raises(IllegalStateError):
        txn.require_transaction()
    txn.begin(producer_id=7)
    assert not txn.outside
    with pytest.raises(IllegalStateError, match="open already"):
        txn.begin(producer_id=7)
    a, b = TopicPartition("t", 0), TopicPartition("t", 1)
    txn.add_partitions({b, a}, 7, 3)
    txn.add_partitions({a}, 7, 3)  # nothing new: no call
    coordinator.script["end_txn"] = [TxnResponse(producer_id=7, producer_epoch=4)]
    txn.require_committable()
    assert txn.end(True, 7, 3, timeout=None).producer_epoch == 4
    assert [(method, args) for _, method, args in coordinator.calls] == [
        ("init_producer_id", (TXN_ID, 60_000)),
        ("add_partitions", (TXN_ID, 7, 3, [("t", 0), ("t", 1)])),
        ("end_txn", (TXN_ID, 7, 3, True)),
    ]


def test_offsets_go_to_the_groups_coordinator_and_their_partition_joins_the_next_transaction(coordinator):
    txn = manager()
    txn.begin(producer_id=7)
    meta = {"group_id": "g", "member_id": "m", "generation": 2, "group_instance_id": None}
    txn.send_offsets({TopicPartition("in", 0): 10}, meta, 7, 3, timeout=None)
    offsets_tp = TopicPartition("__consumer_offsets", 12)
    assert offsets_tp in txn.partitions
    group_id, method, args = coordinator.calls[-1]
    assert (group_id, method, args[:6]) == ("g", "txn_commit_offsets", ("g", "m", 2, None, 7, 3))
    txn.end(True, 7, 3, timeout=None)
    txn.begin(producer_id=7)
    assert txn.partitions == set()
    txn.add_partitions({TopicPartition("t", 0)}, 7, 4)  # the previous transaction's group comes along
    assert coordinator.calls[-1][1:] == ("add_partitions", (TXN_ID, 7, 4, [("__consumer_offsets", 12), ("t", 0)]))


def test_a_failed_send_makes_the_transaction_abortable_and_begin_clears_it(coordinator):
    txn = manager()
    txn.begin(producer_id=7)
    txn.failed(TopicAuthorizationFailedError("no"))
    txn.failed(TopicAuthorizationFailedError("a second error does not replace the first"))
    with pytest.raises(TransactionAbortableError, match="no"):
        txn.require_committable()
    txn.end(False, 7, 3, timeout=None)
    txn.begin(producer_id=7)
    txn.require_committable()


@pytest.mark.parametrize("error", [ProducerFencedError("newer"), InvalidProducerEpochError("old epoch")])
def test_a_fenced_answer_fences_for_good(coordinator, error):
    txn = manager()
    txn.begin(producer_id=7)
    coordinator.script["add_partitions"] = [error]
    with pytest.raises(ProducerFencedError, match=TXN_ID):
        txn.add_partitions({TopicPartition("t", 0)}, 7, 3)
    assert isinstance(txn.fenced, ProducerFencedError)
    for step in (txn.require_transaction, txn.require_committable, lambda: txn.begin(7)):
        with pytest.raises(ProducerFencedError):
            step()


def test_retriable_answers_are_retried_and_a_moved_coordinator_is_found_again(coordinator):
    txn = manager()
    coordinator.script["init_producer_id"] = [
        ConcurrentTransactionsError("markers being written"),
        CoordinatorNotAvailableError("moved"),
        TxnResponse(producer_id=9, producer_epoch=0),
    ]
    assert txn.init_producer_id(timeout=None).producer_id == 9
    assert len(coordinator.calls) == 3
    assert coordinator.forgotten == 1  # CONCURRENT_TRANSACTIONS asks the same coordinator again


def test_a_retriable_answer_past_the_timeout_is_kafka_timeout_error_and_others_are_raised_at_once(coordinator):
    txn = manager(max_block_s=0.05)
    coordinator.script["init_producer_id"] = [CoordinatorNotAvailableError("down")]
    with pytest.raises(KafkaTimeoutError, match="init_producer_id") as raised:
        txn.init_producer_id(timeout=None)
    assert isinstance(raised.value.__cause__, CoordinatorNotAvailableError)
    coordinator.script["end_txn"] = [TopicAuthorizationFailedError("refused")]
    calls = len(coordinator.calls)
    with pytest.raises(TopicAuthorizationFailedError):
        txn.end(True, 7, 3, timeout=5)
    assert len(coordinator.calls) == calls + 1
