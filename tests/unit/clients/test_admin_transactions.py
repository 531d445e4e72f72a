"""The Admin's transactions family without Ray: transactional ids from their coordinators,
producers from partition leaders, hanging transactions found from both, and the abort
marker written to a partition's leader."""

from __future__ import annotations

import time

import pytest

from raylog.clients.admin.transactions import HangingTransaction, find_hanging
from raylog.errors import InvalidTxnStateError, NotLeaderOrFollowerError, TransactionalIdNotFoundError
from raylog.protocol import ProduceResponse, TxnResponse, error_fields
from raylog.types import ProducerState, TopicPartition, TransactionDescription
from tests.unit.clients.admin_fakes import FakeActor, FakeCluster, make_admin

TXN_TOPIC = "__transaction_state"
T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


def _described(tid: str, producer_id: int, state: str = "Ongoing", partitions=(("t", 0),)) -> dict:
    return {
        "transactional_id": tid,
        "state": state,
        "producer_id": producer_id,
        "producer_epoch": 1,
        "timeout_ms": 60_000,
        "partitions": list(partitions),
        "start_ms": 5,
    }


def test_list_transactions_asks_every_coordinator_and_sorts_by_id(monkeypatch):
    cluster = FakeCluster({TXN_TOPIC: 2})
    cluster.leader(TXN_TOPIC, 0).answers["describe_transactions"] = TxnResponse(value=[_described("b", 1)])
    cluster.leader(TXN_TOPIC, 1).answers["describe_transactions"] = TxnResponse(value=[_described("a", 2)])
    admin, _ = make_admin(monkeypatch, cluster)
    listed = admin.list_transactions()
    assert listed == [
        TransactionDescription("a", "Ongoing", 2, 1, 60_000, (T0,), 5, coordinator_partition=1),
        TransactionDescription("b", "Ongoing", 1, 1, 60_000, (T0,), 5, coordinator_partition=0),
    ]
    assert cluster.leader(TXN_TOPIC, 0).sent("describe_transactions") == [(None,)]  # None: every id
    admin, _ = make_admin(monkeypatch, FakeCluster({"t": 1}))
    assert admin.list_transactions() == []


def test_list_transactions_raises_a_coordinators_error(monkeypatch):
    cluster = FakeCluster({TXN_TOPIC: 1})
    moved = TxnResponse(**error_fields(NotLeaderOrFollowerError("moved")))
    cluster.leader(TXN_TOPIC, 0).answers["describe_transactions"] = moved
    admin, _ = make_admin(monkeypatch, cluster)
    with pytest.raises(NotLeaderOrFollowerError, match="moved"):
        admin.list_transactions()


def test_describe_transactions_asks_each_ids_coordinator(monkeypatch):
    coordinator = FakeActor(
        describe_transactions=lambda ids: TxnResponse(value=[_described(t, 3) for t in ids if t != "never"])
    )
    controller = FakeActor(find_transaction_coordinator=lambda tid: (7, coordinator))
    admin, _ = make_admin(monkeypatch, FakeCluster(controller=controller))
    (described,) = admin.describe_transactions(["x"])
    assert (described.transactional_id, described.producer_id, described.coordinator_partition) == ("x", 3, 7)
    with pytest.raises(TransactionalIdNotFoundError, match="'never'"):
        admin.describe_transactions(["x", "never"])
    assert coordinator.sent("describe_transactions") == [(["x"],), (["x"],), (["never"],)]


def test_hanging_transactions_are_the_old_open_ones_no_coordinator_has(monkeypatch):
    now_ms = int(time.time() * 1000)
    cluster = FakeCluster({"t": 2, TXN_TOPIC: 1})
    cluster.leader("t", 0).answers["describe_producers"] = lambda token: [
        ProducerState(10, 0, 4, now_ms - 3_600_000, 100),  # open an hour, its id gone: hanging
        ProducerState(11, 0, 4, now_ms - 3_600_000, 200),  # open an hour, still ongoing
        ProducerState(12, 0, 4, now_ms, 300),  # open just now
    ]
    cluster.leader("t", 1).answers["describe_producers"] = lambda token: [
        ProducerState(10, 0, 4, now_ms - 3_600_000, -1)
    ]
    ongoing = TxnResponse(value=[_described("live", 11, partitions=[("t", 0)])])
    cluster.leader(TXN_TOPIC, 0).answers["describe_transactions"] = ongoing
    admin, _ = make_admin(monkeypatch, cluster)
    hanging = admin.find_hanging_transactions([T0, T1], max_transaction_timeout_ms=900_000)
    assert hanging == [HangingTransaction(T0, 10, 0, 100, now_ms - 3_600_000)]


def test_abort_transaction_writes_an_abort_marker_that_does_not_bump_the_epoch(monkeypatch):
    cluster = FakeCluster({"t": 1})
    leader = cluster.leader("t", 0)
    leader.answers["write_txn_marker"] = lambda *args, bumps_epoch: ProduceResponse(
        base_offset=-1 if bumps_epoch else 9
    )
    admin, _ = make_admin(monkeypatch, cluster, request_timeout_ms=3000)
    admin.abort_transaction(T0, 10, 2, coordinator_epoch=4)
    assert leader.sent("write_txn_marker") == [(10, 2, False, 4, 3000)]  # False: abort


def test_aborting_where_no_transaction_is_open_is_invalid_txn_state(monkeypatch):
    cluster = FakeCluster({"t": 1})
    cluster.leader("t", 0).answers["write_txn_marker"] = [
        ProduceResponse(base_offset=-1),
        ProduceResponse(**error_fields(NotLeaderOrFollowerError("not the leader"))),
    ]
    admin, _ = make_admin(monkeypatch, cluster)
    with pytest.raises(InvalidTxnStateError, match="producer id 10 has no transaction open in t-0 at epoch 2"):
        admin.abort_transaction(T0, 10, 2)
    with pytest.raises(NotLeaderOrFollowerError):
        admin.abort_transaction(T0, 10, 2)


def test_find_hanging_lists_old_open_transactions_no_coordinator_has_open_here():
    timeout_ms = 60_000
    ongoing = TransactionDescription("copier", "Ongoing", 5, 0, timeout_ms, (T0,), 0, 0)
    elsewhere = TransactionDescription("other", "Ongoing", 6, 0, timeout_ms, (TopicPartition("t", 1),), 0, 0)
    ended = TransactionDescription("done", "CompleteCommit", 8, 3, timeout_ms, (), -1, 0)
    producers = [
        ProducerState(5, 0, 0, 0, 3),  # ongoing at its coordinator
        ProducerState(6, 0, 0, 0, 4),  # its coordinator's transaction does not have T0: hanging
        ProducerState(8, 3, 0, 0, 5),  # its transaction ended without a marker here: hanging
        ProducerState(424242, 0, 0, 0, 7),  # no coordinator knows it: hanging
        ProducerState(99, 0, 0, 0, -1),  # no transaction open here
        ProducerState(77, 2, 0, timeout_ms, 9),  # too recent to tell
    ]
    hanging = find_hanging(T0, producers, [ongoing, elsewhere, ended], timeout_ms + 1, timeout_ms)
    assert hanging == [
        HangingTransaction(T0, 6, 0, 4, 0),
        HangingTransaction(T0, 8, 3, 5, 0),
        HangingTransaction(T0, 424242, 0, 7, 0),
    ]
