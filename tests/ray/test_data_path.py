"""The data path through Ray actors: producer -> leader replica -> consumer, and its errors."""

from __future__ import annotations

import json
import threading
import time

import pyarrow as pa
import pytest
import ray

import raylog
from raylog import Consumer, NewTopic, Producer, TopicPartition
from raylog.clients.partitioner import partition_for_key
from raylog.common import record_batch
from raylog.errors import (
    CorruptRecordError,
    IllegalStateError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    NoOffsetForPartitionError,
    RecordTooLargeError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from raylog.protocol import ProduceRequest, error_of
from tests.helpers import wait_until


def consume_all(cluster, topic: str, expected: int, timeout_s: float = 60, **config) -> list:
    """Every record of ``topic`` from the beginning, until ``expected`` arrived."""
    consumer = Consumer(cluster, topic, auto_offset_reset="earliest", **config)
    records: list = []
    deadline = time.monotonic() + timeout_s
    while len(records) < expected and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=500).values():
            records.extend(batch)
    consumer.close()
    return records


@pytest.mark.parametrize("compression", [None, "lz4", "zstd"])
def test_round_trip_across_partitions_and_codecs(cluster, topic, compression):
    """Every record sent comes back once, with its key, value, headers and offset."""
    name = topic(num_partitions=3)
    with Producer(cluster, compression=compression, linger_ms=2) as producer:
        futures = [
            producer.send(name, b"value-%d" % i, key=b"k%d" % (i % 17), headers=[("n", b"%d" % i)])
            for i in range(3_000)
        ]
        producer.flush()
    metadata = [f.result(timeout=10) for f in futures]
    records = consume_all(cluster, name, 3_000)
    assert len(records) == 3_000
    by_value = {r.value: r for r in records}
    for i, meta in enumerate(metadata):
        record = by_value[b"value-%d" % i]
        assert (record.partition, record.offset) == (meta.partition, meta.offset)
        assert record.key == b"k%d" % (i % 17) and record.headers == (("n", b"%d" % i),)


def test_keyed_records_land_where_kafka_puts_them(cluster, topic):
    """Keys go to murmur2(key) % partitions, checked against Kafka's own test vectors."""
    name = topic(num_partitions=6)
    vectors = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536}
    with Producer(cluster) as producer:
        for key, hashed in vectors.items():
            meta = producer.send(name, b"v", key=key).result(timeout=10)
            assert meta.partition == (hashed & 0x7FFFFFFF) % 6 == partition_for_key(key, 6)


def test_order_is_kept_per_partition(cluster, topic):
    """Within a partition, records are read in the order they were sent."""
    name = topic(num_partitions=2)
    with Producer(cluster, linger_ms=0, batch_size=4096) as producer:
        for i in range(2_000):
            producer.send(name, b"%06d" % i, key=b"same-key")
    records = consume_all(cluster, name, 2_000)
    assert [r.value for r in records] == [b"%06d" % i for i in range(2_000)]
    assert [r.offset for r in records] == list(range(2_000))


def test_serializers_and_deserializers(cluster, topic):
    """The guide's producer example with serializers: JSON values in, JSON values out."""
    name = topic()
    with Producer(
        cluster, acks="all", linger_ms=5, compression="lz4", value_serializer=lambda v: json.dumps(v).encode()
    ) as producer:
        meta = producer.send(name, value={"page": "/home"}, key=b"user-42", headers=[("h", b"v")]).result(10)
    assert meta.topic == name and meta.offset == 0
    [record] = consume_all(cluster, name, 1, value_deserializer=json.loads)
    assert record.value == {"page": "/home"} and record.key == b"user-42" and record.headers == (("h", b"v"),)


def test_send_arrow_and_poll_arrow(cluster, topic):
    """A bulk Arrow table goes in by key partition and comes out as one Arrow table."""
    name = topic(num_partitions=3)
    n = 20_000
    table = pa.table({"key": [b"user-%d" % (i % 50) for i in range(n)], "value": [b"%d" % i for i in range(n)]})
    with Producer(cluster, max_request_size=64 * 1024) as producer:
        sent = producer.send_arrow(name, table).result(timeout=30)
    assert sum(b.record_count for b in sent) == n and len(sent) > 3  # batches of at most 64 KiB
    consumer = Consumer(cluster, name, auto_offset_reset="earliest")
    tables = []
    wait_until(lambda: tables.append(consumer.poll_arrow(timeout_ms=500)) or sum(t.num_rows for t in tables) >= n)
    out = pa.concat_tables(tables)
    assert out.column_names == ["topic", "partition", "offset", "timestamp", "key", "value", "headers"]
    assert sorted(out.column("value").to_pylist()) == sorted(table.column("value").to_pylist())
    for key, partition in zip(
        out.column("key").to_pylist()[:200], out.column("partition").to_pylist()[:200], strict=True
    ):
        assert partition == partition_for_key(key, 3)


def test_partitions_share_fetch_max_bytes_and_every_record_comes_once_in_order(cluster, topic):
    """A consumer of many partitions whose batches pass fetch_max_bytes: at most about fetch_max_bytes is buffered
    or on its way at once (not a batch of every partition), and still every record comes, once, in order."""
    name = topic(num_partitions=8)
    rows, size = 4_000, 200  # ~820 KB a partition, in batches of at most 100 KB
    with Producer(cluster, max_request_size=100_000) as producer:
        for p in range(8):
            values = pa.array([b"%d:%06d:" % (p, i) + b"x" * (size - 10) for i in range(rows)], pa.binary())
            producer.send_arrow(name, pa.table({"value": values}), partition=p)
    consumer = Consumer(cluster, name, auto_offset_reset="earliest", fetch_max_bytes=150_000)
    got: dict[int, list[bytes]] = {p: [] for p in range(8)}
    most = 0
    deadline = time.monotonic() + 60
    while sum(map(len, got.values())) < 8 * rows and time.monotonic() < deadline:
        table = consumer.poll_arrow(timeout_ms=500)
        for p, value in zip(table.column("partition").to_pylist(), table.column("value").to_pylist(), strict=True):
            got[p].append(value[:9])
        most = max(most, consumer._fetcher.bytes_used())
    consumer.close()
    assert all(got[p] == [b"%d:%06d:" % (p, i) for i in range(rows)] for p in range(8))
    assert most <= 150_000 + 100_000  # the limit, passed by one batch at most


def test_long_poll_wakes_on_new_data(cluster, topic):
    """A consumer waiting in poll gets a record produced meanwhile well before its timeout."""
    name = topic()
    consumer = Consumer(cluster, name, auto_offset_reset="earliest", fetch_max_wait_ms=10_000)
    consumer.poll(timeout_ms=200)  # the fetch is now parked at the leader
    producer = Producer(cluster, linger_ms=0)
    timer = threading.Timer(0.5, lambda: producer.send(name, b"wake"))
    started = time.monotonic()
    timer.start()
    got = consumer.poll(timeout_ms=8_000)
    elapsed = time.monotonic() - started
    producer.close()
    assert [r.value for rs in got.values() for r in rs] == [b"wake"]
    assert elapsed < 5, f"long poll took {elapsed:.1f} s to wake"


def test_consumer_positions_seek_pause_and_offsets_for_times(cluster, topic):
    """seek, seek_to_beginning/end, position, pause/resume and offsets_for_times behave as Kafka's."""
    name = topic()
    tp = TopicPartition(name, 0)
    with Producer(cluster) as producer:
        for i in range(100):
            producer.send(name, b"%d" % i, timestamp_ms=1_000_000 + i * 10)
    consumer = Consumer(cluster, auto_offset_reset="latest")
    consumer.assign([tp])
    assert consumer.position(tp) == 100
    consumer.seek(tp, 42)
    assert [r.offset for r in consumer.poll(timeout_ms=2_000)[tp]][:1] == [42]
    consumer.seek_to_beginning(tp)
    assert consumer.position(tp) == 0
    consumer.pause(tp)
    assert consumer.poll(timeout_ms=300) == {}
    consumer.resume(tp)
    assert consumer.poll(timeout_ms=2_000)[tp][0].offset == 0
    found = consumer.offsets_for_times({tp: 1_000_000 + 555})
    assert found[tp].offset == 56 and found[tp].timestamp_ms == 1_000_560
    assert consumer.offsets_for_times({tp: 10**13})[tp] is None
    assert consumer.end_offsets([tp]) == {tp: 100} and consumer.beginning_offsets([tp]) == {tp: 0}
    consumer.seek_to_end(tp)
    assert consumer.position(tp) == 100


def test_auto_offset_reset_none_raises(cluster, topic):
    """With auto_offset_reset='none' and no position, poll raises NoOffsetForPartitionError."""
    name = topic()
    consumer = Consumer(cluster, name, auto_offset_reset="none")
    with pytest.raises(NoOffsetForPartitionError):
        consumer.poll(timeout_ms=100)


def test_bad_inputs_give_typed_errors(cluster, admin, topic):
    """Invalid names, unknown topics, bad partitions, oversize records, closed producers."""
    name = topic(num_partitions=2)
    with pytest.raises(InvalidTopicError):
        admin.create_topics([NewTopic("bad name!", 1)])
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics([NewTopic(name, 1)])
    with pytest.raises(InvalidPartitionsError):
        admin.create_topics([NewTopic("zero-partitions", 0)])
    with pytest.raises(InvalidConfigError):
        admin.create_topics([NewTopic("bad-config", 1, config={"retention.ms": "soon"})])
    producer = Producer(cluster, max_request_size=1_000)
    with pytest.raises(UnknownTopicOrPartitionError):
        producer.send("no-such-topic", b"x")
    for partition in (-1, 2, "0"):
        with pytest.raises(UnknownTopicOrPartitionError):
            producer.send(name, b"x", partition=partition)
    with pytest.raises(RecordTooLargeError):
        producer.send(name, b"x" * 2_000)
    with pytest.raises(TypeError):
        producer.send(name, "not bytes")
    producer.send(name, b"kept", partition=1).result(timeout=10)
    producer.close()
    with pytest.raises(IllegalStateError):
        producer.send(name, b"late")
    with pytest.raises(UnknownTopicOrPartitionError):
        Consumer(cluster, "no-such-topic")
    with pytest.raises(InvalidConfigError):
        Producer(cluster, acks=2)
    assert [r.value for r in consume_all(cluster, name, 1)] == [b"kept"]
    assert "zero-partitions" not in admin.list_topics()


def test_corrupt_batch_sent_straight_to_a_replica_is_refused(cluster, topic):
    """A batch with a broken CRC is refused with CORRUPT_MESSAGE and nothing is appended."""
    name = topic()
    leader = cluster.metadata(refresh=True).leader(TopicPartition(name, 0))
    good = record_batch.build([b"a", b"b"])
    bad = bytearray(good)
    bad[-1] ^= 0xFF
    for data in (bytes(bad), b"\x00" * 100, good[:-3]):
        response = ray.get(leader.produce.remote(ProduceRequest(data, acks=1)))
        assert isinstance(error_of(response), CorruptRecordError)
    assert error_of(ray.get(leader.produce.remote(ProduceRequest(good, acks=1)))) is None
    assert [r.value for r in consume_all(cluster, name, 2)] == [b"a", b"b"]


def test_record_too_large_for_the_topic_is_refused(cluster, topic):
    """max.message.bytes is enforced by the producer before sending (the leader checks it again, see
    tests/ray/test_storage_faults.py): send raises RecordTooLargeError and its neighbours go through."""
    name = topic(**{"max.message.bytes": "2000"})
    with Producer(cluster) as producer:
        before = producer.send(name, b"before")
        with pytest.raises(RecordTooLargeError):
            producer.send(name, b"x" * 5_000)
        producer.send(name, b"small").result(timeout=10)
        assert before.result(timeout=10).offset == 0
    assert [r.value for r in consume_all(cluster, name, 2)] == [b"before", b"small"]


def test_killed_replica_comes_back_with_every_acknowledged_record(cluster, topic):
    """ray.kill of the leader replica (restart allowed) recovers its log; no acked record is lost."""
    name = topic()
    tp = TopicPartition(name, 0)
    with Producer(cluster, acks=1) as producer:
        acked = [producer.send(name, b"%d" % i) for i in range(500)]
        producer.flush()
        leader = cluster.metadata().leader(tp)
        pid = ray.get(leader.state.remote())["pid"]
        ray.kill(leader, no_restart=False)
        after = [producer.send(name, b"after-%d" % i) for i in range(100)]
        producer.flush()
    assert all(f.result().offset >= 0 for f in acked + after)
    # ray.kill is asynchronous: the old process may answer (and acknowledge) a while longer.
    restarted = wait_until(lambda: (s := _state_or_none(leader)) and s["pid"] != pid and s, timeout_s=60)
    assert restarted["pid"] != pid, "the killed replica did not come back in a new process"
    values = [r.value for r in consume_all(cluster, name, 600)]
    assert values[:500] == [b"%d" % i for i in range(500)]
    assert sorted(values[500:]) == sorted(b"after-%d" % i for i in range(100))


def test_restarted_leader_takes_no_stale_role_and_leads_again_under_a_new_epoch(cluster, topic):
    """Ray restarts a replica with its creation-time arguments: the restarted leader must not
    lead under its old epoch (a client with cached metadata would write to a zombie); it
    waits for the controller, which, as it is the only in-sync replica, makes it lead anew."""
    name = topic()
    leader = cluster.metadata(refresh=True).leader(TopicPartition(name, 0))
    before = ray.get(leader.state.remote())
    ray.kill(leader, no_restart=False)
    seen = []

    def leads_again():
        state = _state_or_none(leader)
        if state is None or state["pid"] == before["pid"]:
            return False
        seen.append(state)
        return state["leader"] == before["leader"]

    wait_until(leads_again, timeout_s=60)
    assert all(s["leader"] != before["leader"] or s["leader_epoch"] > before["leader_epoch"] for s in seen)
    with Producer(cluster, acks=1) as producer:
        assert producer.send(name, b"after").result(timeout=30).offset == 0


def test_killed_controller_comes_back_with_every_topic(cluster, topic, admin):
    """ray.kill of the controller (restart allowed) replays its journal: topics and metadata survive."""
    names = [topic(num_partitions=2) for _ in range(2)]
    before = {d.name: d for d in admin.describe_topics(names)}
    ray.kill(cluster.controller, no_restart=False)
    after = wait_until(lambda: _describe_or_none(admin, names), timeout_s=60)
    assert {d.name: d for d in after} == before
    with Producer(cluster) as producer:
        assert producer.send(names[0], b"still works").result(timeout=30).offset == 0


def _state_or_none(replica):
    try:
        return ray.get(replica.state.remote(), timeout=10)
    except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
        return None


def _describe_or_none(admin, names):
    try:
        return admin.describe_topics(names)
    except raylog.errors.RaylogError:
        return None


@ray.remote(num_cpus=0)
def _produce_and_consume_in_a_task(producer, consumer, topic):
    producer.send(topic, b"from-a-task").result(timeout=30)
    producer.close()
    records = []
    deadline = time.monotonic() + 30
    while not records and time.monotonic() < deadline:
        records = [r.value for rs in consumer.poll(timeout_ms=500).values() for r in rs]
    return records


def test_producer_and_consumer_work_inside_a_ray_task(cluster, topic):
    """Producer and Consumer objects pickle into a Ray task and work there."""
    name = topic()
    producer = Producer(cluster, linger_ms=1)
    consumer = Consumer(cluster, name, auto_offset_reset="earliest")
    assert ray.get(_produce_and_consume_in_a_task.remote(producer, consumer, name), timeout=120) == [b"from-a-task"]
    producer.close()
