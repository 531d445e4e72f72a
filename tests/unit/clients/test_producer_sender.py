"""The producer's Sender on its own: a RecordAccumulator filled by hand, fake leaders and a
fake transaction manager (no Producer, no Ray)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from raylog.clients.producer import sender as sender_module
from raylog.clients.producer.record_accumulator import RecordAccumulator
from raylog.clients.producer.sender import Sender
from raylog.clients.security import ClientSession
from raylog.errors import (
    IllegalStateError,
    InvalidProducerEpochError,
    KafkaTimeoutError,
    NotLeaderOrFollowerError,
    ProducerFencedError,
    TopicAuthorizationFailedError,
)
from raylog.types import TopicPartition
from tests.helpers import wait_until
from tests.unit.clients.producer_fakes import PRODUCER_ID, FakeCluster, FakeLeader

TP = TopicPartition("t", 0)


@pytest.fixture(autouse=True)
def controller_call(monkeypatch):
    monkeypatch.setattr(
        sender_module, "call", lambda ref, timeout_s: PRODUCER_ID if ref == "init_producer_id" else None
    )


class FakeTransactions:
    """A TransactionManager's face to the sender: partitions added, errors noted."""

    def __init__(self, transactional_id: str | None = None, add_error: Exception | None = None):
        self.transactional_id = transactional_id
        self.add_error = add_error
        self.added: list[tuple] = []
        self.errors: list = []
        self.fenced = None

    def add_partitions(self, partitions, producer_id, producer_epoch):
        self.added.append((sorted(partitions), producer_id, producer_epoch))
        if self.add_error is not None:
            self.failed(self.add_error)  # (as the manager: the call's failure is the transaction's)
            raise self.add_error

    def failed(self, error):
        self.errors.append(error)
        if isinstance(error, InvalidProducerEpochError):
            self.fenced = ProducerFencedError(f"fenced: {error}")


def started(leader: FakeLeader, transactions=None, **options) -> tuple[RecordAccumulator, Sender]:
    acc = RecordAccumulator(1, 1 << 20, 5.0, options.pop("delivery_timeout_s", 60.0), lambda: None, lambda tp: None)
    cluster = FakeCluster(leader)
    settings = {
        "acks": -1,
        "request_timeout_ms": 1_000,
        "client_id": "",
        "codec": 0,
        "linger_s": 0.0,
        "max_in_flight": 5,
        "retries": 2**31 - 1,
        "backoff_s": 0.01,
        "idempotent": True,
        "metadata_max_age_s": 300.0,
    }
    settings.update(options)
    sender = Sender(cluster, ClientSession(cluster, "PLAINTEXT"), acc, transactions or FakeTransactions(), **settings)
    sender.start()
    return acc, sender


def send(acc: RecordAccumulator, value: bytes = b"v"):
    return acc.append(TP, value, None, None, None, 17, 30, 1 << 20, (-1, len(value), -1))


def stop(acc: RecordAccumulator, sender: Sender) -> None:
    acc.close()
    sender.join(10)
    assert not sender._thread.is_alive()


def test_batches_go_numbered_under_the_controllers_producer_id_and_free_their_memory_when_acknowledged():
    leader = FakeLeader(auto_answer=True)
    acc, sender = started(leader)
    futures = [send(acc, b"%d" % i) for i in range(3)]
    assert [f.get(timeout=10).offset for f in futures] == [0, 1, 2]
    assert [leader.header(i).base_sequence for i in range(3)] == [0, 1, 2]
    assert {leader.header(i).producer_id for i in range(3)} == {PRODUCER_ID}
    assert [request.first_unacked_sequence for request, _ in leader.requests] == [0, 1, 2]
    assert acc.buffered_bytes == 0 and not acc.incomplete and sender.producer_id == PRODUCER_ID
    stop(acc, sender)


def test_a_retriable_error_sends_the_batch_again_with_its_sequence():
    leader = FakeLeader()
    acc, sender = started(leader)
    future = send(acc)
    wait_until(lambda: len(leader.requests) == 1, timeout_s=10)
    leader.answer(0, NotLeaderOrFollowerError("moved"))
    wait_until(lambda: len(leader.requests) == 2, timeout_s=10)
    assert leader.header(1).base_sequence == leader.header(0).base_sequence == 0
    leader.answer(1)
    assert future.get(timeout=10).offset == 0
    stop(acc, sender)


def test_a_retriable_error_past_the_delivery_timeout_fails_with_kafka_timeout_error_and_a_new_producer_id():
    leader = FakeLeader()
    acc, sender = started(leader, delivery_timeout_s=0.005)
    future = send(acc)
    wait_until(lambda: len(leader.requests) == 1, timeout_s=10)
    leader.answer(0, NotLeaderOrFollowerError("moved"))
    error = future.exception(timeout=10)
    assert isinstance(error, KafkaTimeoutError) and isinstance(error.__cause__, NotLeaderOrFollowerError)
    assert sender.producer_id == -1  # the next batch is numbered under a new one
    assert acc.buffered_bytes == 0
    stop(acc, sender)


def test_partitions_join_the_transaction_before_their_first_batch_goes_and_a_refusal_fails_the_batch():
    leader = FakeLeader(auto_answer=True)
    transactions = FakeTransactions("tx")
    acc, sender = started(leader, transactions)
    sender.set_producer_id(7, 2)
    assert send(acc).get(timeout=10).offset == 0
    assert transactions.added == [([TP], 7, 2)]
    assert leader.header(0).producer_epoch == 2 and leader.requests[0][0].transactional_id == "tx"
    transactions.add_error = TopicAuthorizationFailedError("no")
    assert isinstance(send(acc).exception(timeout=10), TopicAuthorizationFailedError)
    assert len(leader.requests) == 1 and isinstance(transactions.errors[-1], TopicAuthorizationFailedError)
    stop(acc, sender)


def test_an_old_epoch_in_a_transaction_fails_the_batch_with_the_fencing_error():
    leader = FakeLeader()
    transactions = FakeTransactions("tx")
    acc, sender = started(leader, transactions)
    sender.set_producer_id(7, 2)
    future = send(acc)
    wait_until(lambda: len(leader.requests) == 1, timeout_s=10)
    leader.answer(0, InvalidProducerEpochError("epoch 2 is old"))
    assert isinstance(future.exception(timeout=10), ProducerFencedError)
    stop(acc, sender)


def test_a_failed_sender_fails_every_batch_and_the_accumulator_refuses_more():
    leader = FakeLeader()
    acc, sender = started(leader)
    held = send(acc)
    wait_until(lambda: len(leader.requests) == 1, timeout_s=10)
    leader.produce = SimpleNamespace(remote=lambda request: 1 / 0)
    doomed = send(acc)
    assert isinstance(doomed.exception(timeout=10), IllegalStateError)
    assert isinstance(held.exception(timeout=10), IllegalStateError)
    assert isinstance(acc.failure, IllegalStateError) and "ZeroDivisionError" in str(acc.failure)
    assert not acc.incomplete and acc.buffered_bytes == 0
    sender.join(10)
    assert not sender._thread.is_alive()


def test_the_sender_stops_once_closed_and_drained():
    leader = FakeLeader()
    acc, sender = started(leader)
    future = send(acc)
    wait_until(lambda: len(leader.requests) == 1, timeout_s=10)
    acc.close()
    sender.join(0.05)
    assert sender._thread.is_alive()  # a batch is still in flight
    leader.answer(0)
    future.get(timeout=10)
    sender.join(10)
    assert not sender._thread.is_alive()


def test_acks_0_completes_a_batch_as_it_is_sent():
    leader = FakeLeader()
    acc, sender = started(leader, acks=0, idempotent=False)
    assert send(acc).get(timeout=10).offset == -1
    assert leader.header(0).producer_id == -1 and leader.requests[0][0].acks == 0
    stop(acc, sender)
