"""Transactional writes verified over the Kafka wire (issue 25, defect 1; KIP-890 part 1):
a raw Produce v9 to the partition's leader listener, with the TRANSACTIONAL bit and a
producer id no coordinator gave out, or carrying a late batch of a transaction that EndTxn
v3 ended without epoch bump, is answered INVALID_TXN_STATE, and read_committed readers go on
reading what comes after."""

from __future__ import annotations

from raylog.common import record_batch
from raylog.kafka import codec, records
from tests.ray.kafka.test_listener import Wire, _leader_address, _produce_body, wire  # noqa: F401 (wire: fixture)
from tests.ray.kafka.test_transactions_wire import NONE, add_partitions, end, fresh, handle, init_txn  # noqa: F401

INVALID_TXN_STATE = 48


def txn_batch(value: bytes, pid: int, epoch: int, seq: int) -> bytes:
    batch = record_batch.build([value], producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True)
    return b"".join(bytes(part) for part in records.to_kafka(batch))


def produce(leader: Wire, topic: str, data: bytes, tid: str | None) -> int:
    body = _produce_body(topic, 0, data, acks=-1) | {"transactional_id": tid}
    (answer,) = leader.ask(codec.ApiKey.PRODUCE, 9, body)["responses"]
    return answer["partition_responses"][0]["error_code"]


def test_a_raw_transactional_produce_no_coordinator_knows_is_refused(wire, handle, kafka_topic, read_back):  # noqa: F811
    topic = kafka_topic()
    leader = Wire(_leader_address(wire, topic)[0])
    try:
        tid = fresh("tx-verify")
        pid = init_txn(handle, tid)["producer_id"]
        assert produce(leader, topic, txn_batch(b"bogus", 987_654_321, 0, 0), tid) == INVALID_TXN_STATE
        assert produce(leader, topic, txn_batch(b"bogus", 987_654_321, 0, 0), None) == INVALID_TXN_STATE
        assert add_partitions(handle, tid, pid, 0, {topic: [0]}) == {(topic, 0): NONE}
        assert produce(leader, topic, txn_batch(b"on-time", pid, 0, 0), tid) == NONE
        assert end(handle, tid, pid, 0, True) == NONE  # EndTxn v3: the epoch stays 0
        assert produce(leader, topic, txn_batch(b"late", pid, 0, 1), tid) == INVALID_TXN_STATE
        plain = b"".join(bytes(part) for part in records.to_kafka(record_batch.build([b"later"])))
        assert produce(leader, topic, plain, None) == NONE
    finally:
        leader.close()
    assert [r.value for r in read_back(topic)] == [b"on-time", b"later"]
