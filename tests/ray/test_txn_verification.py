"""Transactional writes verified against the transaction coordinator through Ray (issue 25,
defect 1; Kafka's KIP-890 part 1): a write no coordinator knows is refused with
INVALID_TXN_STATE and pins nothing, and a hanging transaction left from before (or written
with verification off) is found and aborted by the operator's tools."""

from __future__ import annotations

import json
import uuid

import ray

from raylog import Consumer, Producer, TopicPartition
from raylog.common import record_batch
from raylog.errors import InvalidTxnStateError, RetriableError
from raylog.protocol import ProduceRequest, error_of
from tests.helpers import read_values, wait_until

MADE_UP_PID = 987_654_321
MADE_UP_TID = "made-up"


def _id() -> str:
    return f"txn-{uuid.uuid4().hex[:8]}"


def bogus_batch(value: bytes, pid: int = MADE_UP_PID, epoch: int = 0, seq: int = 0) -> bytes:
    return record_batch.build([value], producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True)


def coordinator_of(cluster, tid: str):
    """The transaction coordinator of ``tid``, once it leads (the first call creates
    ``__transaction_state``; until its leaders are up, a verification answers the retriable
    NOT_ENOUGH_REPLICAS)."""
    return wait_until(lambda: ray.get(cluster.controller.find_transaction_coordinator.remote(tid))[1], timeout_s=60)


def _initialised(coordinator, tid: str):
    """The coordinator's InitProducerId answer for ``tid``, or None after a retriable error."""
    answer = ray.get(coordinator.init_producer_id.remote(tid, 60_000))
    error = error_of(answer)
    if error is not None and not isinstance(error, RetriableError):
        raise error
    return answer if error is None else None


def lso_is_hw(cluster, tp: TopicPartition) -> bool:
    """Whether a read_committed reader's end offset (the LSO) is the high watermark."""
    state = ray.get(cluster.metadata(refresh=True).leader(tp).state.remote())
    with Consumer(cluster, isolation_level="read_committed") as consumer:
        return consumer.end_offsets([tp])[tp] == state["high_watermark"]


def plain(cluster, name: str, value: bytes) -> None:
    with Producer(cluster) as producer:
        producer.send(name, value).get(timeout=30)


def test_a_made_up_producers_transactional_write_is_refused_and_pins_nothing(cluster, topic):
    """Trigger (b): a Produce with the TRANSACTIONAL bit and a producer id no coordinator
    gave out, straight to the leader (with or without a transactional id), is refused with
    INVALID_TXN_STATE; read_committed readers still read later records."""
    name = topic()
    tp = TopicPartition(name, 0)
    leader = cluster.metadata(refresh=True).leader(tp)
    coordinator_of(cluster, MADE_UP_TID)
    for tid in (None, MADE_UP_TID):
        request = ProduceRequest(bogus_batch(b"bogus"), acks=-1, transactional_id=tid)
        assert isinstance(error_of(ray.get(leader.produce.remote(request))), InvalidTxnStateError)
    plain(cluster, name, b"later")
    assert read_values(cluster, name) == [b"later"]
    assert lso_is_hw(cluster, tp)


def test_a_late_batch_of_a_transaction_ended_without_bump_is_refused(cluster, topic):
    """Trigger (a): a Kafka client at EndTxn v0-3 keeps its epoch; a batch of its ended
    transaction that reaches the leader after the marker is refused (the coordinator says
    the transaction is over) instead of opening one that no marker will end."""
    name = topic()
    tp = TopicPartition(name, 0)
    tid = _id()
    coordinator = coordinator_of(cluster, tid)
    # A coordinator that has just come to lead may answer a retriable error first (loading).
    started = wait_until(lambda: _initialised(coordinator, tid), timeout_s=60, message="InitProducerId")
    pid, epoch = started.producer_id, started.producer_epoch
    assert error_of(ray.get(coordinator.add_partitions.remote(tid, pid, epoch, [(name, 0)]))) is None
    leader = cluster.metadata(refresh=True).leader(tp)
    first = ProduceRequest(bogus_batch(b"on-time", pid, epoch, 0), acks=-1, transactional_id=tid)
    assert error_of(ray.get(leader.produce.remote(first))) is None
    ended = ray.get(coordinator.end_txn.remote(tid, pid, epoch, True, bump_epoch=False))
    assert error_of(ended) is None and (ended.producer_id, ended.producer_epoch) == (pid, epoch)
    late = ProduceRequest(bogus_batch(b"late", pid, epoch, 1), acks=-1, transactional_id=tid)
    assert isinstance(error_of(ray.get(leader.produce.remote(late))), InvalidTxnStateError)
    plain(cluster, name, b"later")
    assert read_values(cluster, name) == [b"on-time", b"later"]
    assert lso_is_hw(cluster, tp)


def test_a_hanging_transaction_is_found_and_aborted(cluster, admin, topic, run):
    """With verification off (Kafka before 3.6, or a partition from before the fix), a
    made-up producer's write opens a transaction no coordinator ends: find-hanging lists
    it, abort ends it, and the LSO moves (Admin, then the CLI)."""
    name = topic(**{"transaction.partition.verification.enable": "false"})
    tp = TopicPartition(name, 0)
    leader = cluster.metadata(refresh=True).leader(tp)
    for pid in (MADE_UP_PID, MADE_UP_PID + 1):
        request = ProduceRequest(bogus_batch(b"bogus", pid), acks=-1, transactional_id=_id())
        assert error_of(ray.get(leader.produce.remote(request))) is None
    plain(cluster, name, b"later")
    assert read_values(cluster, name) == []
    (producer,) = [p for p in admin.describe_producers([tp])[tp] if p.producer_id == MADE_UP_PID]
    assert producer.current_transaction_start_offset == 0
    hanging = admin.find_hanging_transactions([tp], max_transaction_timeout_ms=0)
    assert sorted(h.producer_id for h in hanging) == [MADE_UP_PID, MADE_UP_PID + 1]
    first = next(h for h in hanging if h.producer_id == MADE_UP_PID)
    admin.abort_transaction(tp, first.producer_id, first.producer_epoch, coordinator_epoch=0)
    assert read_values(cluster, name) == []  # the second one still holds the LSO at 1
    code, out, _ = run("transactions", "find-hanging", "--topic", name, "--max-transaction-timeout-ms", "0", "--json")
    assert code == 0
    (listed,) = json.loads(out)
    assert listed["producer_id"] == MADE_UP_PID + 1 and listed["start_offset"] == 1
    code, out, _ = run("transactions", "abort", "--topic", name, "--partition", "0", "--start-offset", "1")
    assert code == 0 and str(MADE_UP_PID + 1) in out
    assert read_values(cluster, name) == [b"later"]
    assert lso_is_hw(cluster, tp)
    code, out, _ = run("transactions", "find-hanging", "--topic", name, "--max-transaction-timeout-ms", "0", "--json")
    assert code == 0 and json.loads(out) == []
