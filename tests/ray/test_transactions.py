"""Transactions through Ray: what read_committed consumers see, fencing of older producer
instances, timeouts, late and repeated calls (the anomalies Jepsen found in Kafka's
protocol), offsets committed with a transaction, and the Ray Data read path."""

from __future__ import annotations

import json
import uuid

import pytest
import ray

import raylog.data
from raylog import Consumer, Producer, TopicPartition
from raylog.common import record_batch
from raylog.errors import (
    IllegalStateError,
    InvalidConfigError,
    InvalidProducerEpochError,
    InvalidTransactionTimeoutError,
    ProducerFencedError,
)
from raylog.protocol import ProduceRequest, error_of
from tests.helpers import read_values, wait_until

TIMEOUT_S = 30


def _id() -> str:
    return f"txn-{uuid.uuid4().hex[:8]}"


def coordinator(cluster, transactional_id: str):
    _, handle = ray.get(cluster.controller.find_transaction_coordinator.remote(transactional_id))
    return handle


def started(cluster, **config) -> Producer:
    producer = Producer(cluster, transactional_id=config.pop("transactional_id", _id()), **config)
    producer.init_transactions()
    return producer


def test_read_committed_sees_committed_transactions_whole_and_aborted_ones_never(cluster, topic):
    name = topic(2)
    with started(cluster) as producer:
        producer.begin_transaction()
        for i in range(10):
            producer.send(name, b"c%d" % i, key=b"%d" % i)
        producer.commit_transaction()
        producer.begin_transaction()
        for i in range(5):
            producer.send(name, b"a%d" % i, key=b"%d" % i)
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(name, b"d0", key=b"0")
        producer.commit_transaction()
    committed = sorted(read_values(cluster, name, 2))
    assert committed == sorted([b"c%d" % i for i in range(10)] + [b"d0"])
    everything = sorted(read_values(cluster, name, 2, "read_uncommitted"))
    assert everything == sorted(committed + [b"a%d" % i for i in range(5)])


def test_an_open_transaction_holds_read_committed_readers_at_its_first_offset(cluster, topic):
    """The last stable offset stops at the open transaction; records of other producers
    after it wait too, and all appear at once when it commits."""
    name = topic()
    tp = TopicPartition(name, 0)
    with started(cluster) as producer, Producer(cluster) as plain:
        plain.send(name, b"before").result(TIMEOUT_S)
        producer.begin_transaction()
        producer.send(name, b"in-txn")
        producer.flush()
        plain.send(name, b"after").result(TIMEOUT_S)
        with Consumer(cluster, isolation_level="read_committed") as committed:
            assert committed.end_offsets([tp])[tp] == 1
        with Consumer(cluster, isolation_level="read_uncommitted") as uncommitted:
            assert uncommitted.end_offsets([tp])[tp] == 3
        assert read_values(cluster, name) == [b"before"]
        producer.commit_transaction()
    assert read_values(cluster, name) == [b"before", b"in-txn", b"after"]


def test_a_new_instance_aborts_the_open_transaction_and_fences_the_old_one(cluster, topic):
    name = topic()
    transactional_id = _id()
    zombie = started(cluster, transactional_id=transactional_id)
    zombie.begin_transaction()
    zombie.send(name, b"zombie-1")
    zombie.flush()
    successor = started(cluster, transactional_id=transactional_id)
    with pytest.raises(ProducerFencedError):
        zombie.send(name, b"zombie-2")
        zombie.commit_transaction()
    with pytest.raises(ProducerFencedError):
        zombie.begin_transaction()
    successor.begin_transaction()
    successor.send(name, b"successor")
    successor.commit_transaction()
    assert read_values(cluster, name) == [b"successor"]
    assert read_values(cluster, name, isolation_level="read_uncommitted")[0] == b"zombie-1"
    zombie.close(0)
    successor.close()


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(cluster, admin, topic):
    name = topic()
    transactional_id = _id()
    producer = started(cluster, transactional_id=transactional_id, transaction_timeout_ms=500)
    producer.begin_transaction()
    producer.send(name, b"too-slow")
    producer.flush()
    wait_until(
        lambda: admin.describe_transactions([transactional_id])[0].state == "CompleteAbort",
        TIMEOUT_S,
        message="the coordinator's abort",
    )
    (described,) = admin.describe_transactions([transactional_id])
    assert described.producer_epoch == producer._sender.producer_epoch + 1 and described.partitions == ()
    assert transactional_id in {t.transactional_id for t in admin.list_transactions()}
    with pytest.raises(ProducerFencedError):
        producer.commit_transaction()
    assert read_values(cluster, name) == []
    producer.close(0)


def test_a_late_write_of_an_ended_transaction_is_fenced_and_holds_nothing_open(cluster, topic):
    """KIP-890's case: a batch of a committed transaction that reaches the leader after the
    marker (a retry, a call delivered late) must neither join the next transaction nor
    open one that no marker will ever end (which would hold the LSO forever)."""
    name = topic()
    tp = TopicPartition(name, 0)
    with started(cluster) as producer:
        producer.begin_transaction()
        producer.send(name, b"on-time")
        producer.commit_transaction()
        old_epoch = producer._sender.producer_epoch - 1  # the epoch the committed transaction ran with
        late = record_batch.build(
            [b"late"],
            producer_id=producer._sender.producer_id,
            producer_epoch=old_epoch,
            base_sequence=1,
            transactional=True,
        )
        leader = cluster.metadata(refresh=True).leader(tp)
        response = ray.get(leader.produce.remote(ProduceRequest(late, acks=-1)))
        assert isinstance(error_of(response), InvalidProducerEpochError)
        producer.begin_transaction()
        producer.send(name, b"next")
        producer.commit_transaction()
    assert read_values(cluster, name) == [b"on-time", b"next"]
    with Consumer(cluster) as consumer:
        assert consumer.end_offsets([tp])[tp] == ray.get(leader.state.remote())["high_watermark"]


def test_a_repeated_marker_cannot_end_a_later_transaction(cluster, topic):
    """The first transaction's marker, delivered again while the next transaction is open,
    is stale: nothing is written and the open transaction commits whole."""
    name = topic()
    tp = TopicPartition(name, 0)
    with started(cluster) as producer:
        producer.begin_transaction()
        producer.send(name, b"first")
        producer.commit_transaction()
        marker_epoch = producer._sender.producer_epoch  # the first transaction's markers carried it
        producer.begin_transaction()
        producer.send(name, b"second")
        producer.flush()
        leader = cluster.metadata(refresh=True).leader(tp)
        end = ray.get(leader.state.remote())["log_end_offset"]
        answer = ray.get(leader.write_txn_marker.remote(producer._sender.producer_id, marker_epoch, False, 0))
        assert error_of(answer) is None and answer.base_offset == -1
        assert ray.get(leader.state.remote())["log_end_offset"] == end
        producer.commit_transaction()
    assert read_values(cluster, name) == [b"first", b"second"]


def test_a_retried_end_is_answered_with_the_outcome_of_the_first(cluster, topic):
    name = topic()
    transactional_id = _id()
    producer = started(cluster, transactional_id=transactional_id)
    producer.begin_transaction()
    producer.send(name, b"x")
    producer.flush()
    pid, epoch = producer._sender.producer_id, producer._sender.producer_epoch
    handle = coordinator(cluster, transactional_id)
    first = ray.get(handle.end_txn.remote(transactional_id, pid, epoch, True))
    again = ray.get(handle.end_txn.remote(transactional_id, pid, epoch, True))
    assert error_of(first) is None and error_of(again) is None
    assert (again.producer_id, again.producer_epoch) == (first.producer_id, first.producer_epoch) == (pid, epoch + 1)
    other = ray.get(handle.end_txn.remote(transactional_id, pid, epoch, False))
    assert error_of(other) is not None
    assert read_values(cluster, name) == [b"x"]
    producer.close(0)


def test_offsets_sent_to_a_transaction_count_only_if_it_commits(cluster, topic):
    source, sink = topic(), topic()
    tp = TopicPartition(source, 0)
    group = f"g-{uuid.uuid4().hex[:6]}"
    with started(cluster) as producer, Consumer(cluster, group_id=group, enable_auto_commit=False) as consumer:
        producer.begin_transaction()
        producer.send(sink, b"out")
        producer.send_offsets_to_transaction({tp: 5}, group)
        producer.abort_transaction()
        assert consumer.committed([tp]) == {tp: None}
        producer.begin_transaction()
        producer.send(sink, b"out")
        producer.send_offsets_to_transaction({tp: 7}, group)
        producer.commit_transaction()
        assert consumer.committed([tp])[tp].offset == 7
    assert read_values(cluster, sink) == [b"out"]


def test_ray_data_reads_only_committed_records(cluster, topic):
    name = topic(2)
    with started(cluster) as producer:
        producer.begin_transaction()
        for i in range(20):
            producer.send(name, b"c%d" % i, key=b"%d" % i)
        producer.commit_transaction()
        producer.begin_transaction()
        for i in range(7):
            producer.send(name, b"a%d" % i, key=b"%d" % i)
        producer.abort_transaction()
    values = raylog.data.read_topic(name, cluster=cluster).to_arrow_refs()
    rows = sorted(v for t in ray.get(values) for v in t.column("value").to_pylist())
    assert rows == sorted(b"c%d" % i for i in range(20))


def test_misuse_is_refused_with_typed_errors(cluster, topic):
    name = topic()
    with pytest.raises(InvalidConfigError):
        Producer(cluster, transactional_id="x", acks=1)
    with pytest.raises(InvalidConfigError):
        Producer(cluster, transactional_id="x", enable_idempotence=False)
    with pytest.raises(InvalidConfigError):
        Consumer(cluster, isolation_level="read_dirty")
    with Producer(cluster, transactional_id=_id()) as producer:
        with pytest.raises(IllegalStateError):
            producer.begin_transaction()  # init_transactions first
        producer.init_transactions()
        with pytest.raises(IllegalStateError):
            producer.send(name, b"outside a transaction")
        with pytest.raises(IllegalStateError):
            producer.commit_transaction()
        producer.begin_transaction()
        with pytest.raises(IllegalStateError):
            producer.begin_transaction()
        producer.abort_transaction()
    with Producer(cluster, transactional_id=_id(), transaction_timeout_ms=10**9) as producer:
        with pytest.raises(InvalidTransactionTimeoutError):
            producer.init_transactions()


def test_the_cli_lists_and_describes_transactions(cluster, run):
    transactional_id = _id()
    started(cluster, transactional_id=transactional_id).close()
    code, out, _ = run("transactions", "describe", transactional_id, "--json")
    assert code == 0
    (described,) = json.loads(out)
    assert described["transactional_id"] == transactional_id and described["state"] == "Empty"
    code, out, _ = run("transactions", "list")
    assert code == 0 and transactional_id in out
    code, _, err = run("transactions", "describe", "never-initialised")
    assert code != 0 and "TRANSACTIONAL_ID_NOT_FOUND" in err or "never-initialised" in err
