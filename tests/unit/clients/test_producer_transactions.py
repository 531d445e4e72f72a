"""A transactional Producer end to end against fake leaders and a scripted coordinator: the
face, the transaction manager and the sender wired together (no Ray)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from raylog.clients.producer import Producer
from raylog.clients.producer import sender as sender_module
from raylog.clients.producer import transaction_manager as tm_module
from raylog.errors import IllegalStateError, InvalidProducerEpochError, ProducerFencedError
from raylog.protocol import TxnResponse
from raylog.types import TopicPartition
from tests.helpers import wait_until
from tests.unit.clients.producer_fakes import FakeCluster, FakeLeader, ScriptedCoordinator


@pytest.fixture
def coordinator(monkeypatch):
    scripted = ScriptedCoordinator()
    monkeypatch.setattr(tm_module, "CoordinatorClient", scripted.client)
    monkeypatch.setattr(tm_module, "call", lambda ref, timeout_s: ref)  # a "reference" is its answer
    monkeypatch.setattr(sender_module, "call", lambda ref, timeout_s: pytest.fail("asked the controller for an id"))
    return scripted


def transactional(leader: FakeLeader) -> Producer:
    cluster = FakeCluster(leader)
    cluster.controller.find_coordinator = SimpleNamespace(remote=lambda group_id, session: (12, "handle"))
    return Producer(cluster, transactional_id="tx", linger_ms=0)


def test_a_transaction_numbers_its_batches_under_the_coordinators_id_and_commits_its_offsets(coordinator):
    leader = FakeLeader(auto_answer=True)
    producer = transactional(leader)
    with pytest.raises(IllegalStateError, match="within a transaction"):
        producer.send("t", b"early")
    with pytest.raises(IllegalStateError, match="init_transactions"):
        producer.begin_transaction()
    producer.init_transactions()
    with pytest.raises(IllegalStateError, match="already"):
        producer.init_transactions()
    producer.begin_transaction()
    future = producer.send("t", b"v")
    assert future.get(timeout=10).offset == 0
    producer.send_offsets_to_transaction({TopicPartition("in", 0): 5}, "g")
    coordinator.script["end_txn"] = [TxnResponse(producer_id=7, producer_epoch=4)]
    producer.commit_transaction()
    header = leader.header(0)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 3, 0)
    assert leader.requests[0][0].transactional_id == "tx"
    steps = [(method, args) for _, method, args in coordinator.calls]
    assert steps == [
        ("init_producer_id", ("tx", 60_000)),
        ("add_partitions", ("tx", 7, 3, [("t", 0)])),
        ("add_partitions", ("tx", 7, 3, [("__consumer_offsets", 12)])),
        ("txn_commit_offsets", ("g", "", -1, None, 7, 3, steps[3][1][-1])),
        ("end_txn", ("tx", 7, 3, True)),
    ]
    with pytest.raises(IllegalStateError, match="within a transaction"):
        producer.send("t", b"between")
    producer.begin_transaction()  # the next epoch numbers from sequence 0 again
    producer.send("t", b"w").get(timeout=10)
    assert (leader.header(1).producer_epoch, leader.header(1).base_sequence) == (4, 0)
    assert coordinator.calls[-1][1:] == ("add_partitions", ("tx", 7, 4, [("__consumer_offsets", 12), ("t", 0)]))
    producer.abort_transaction()
    assert coordinator.calls[-1][1:] == ("end_txn", ("tx", 7, 4, False))
    producer.close()


def test_a_batch_refused_for_an_old_epoch_fences_the_producer(coordinator):
    leader = FakeLeader()
    producer = transactional(leader)
    producer.init_transactions()
    producer.begin_transaction()
    future = producer.send("t", b"v")
    wait_until(lambda: len(leader.requests) == 1, timeout_s=10)
    leader.answer(0, InvalidProducerEpochError("a newer instance has epoch 4"))
    assert isinstance(future.exception(timeout=10), ProducerFencedError)
    with pytest.raises(ProducerFencedError):
        producer.commit_transaction()
    with pytest.raises(ProducerFencedError):
        producer.abort_transaction()
    with pytest.raises(ProducerFencedError):
        producer.begin_transaction()
    producer.close()
