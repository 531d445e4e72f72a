"""Producer accumulation, bounded memory, timeouts, partitioner hooks, and idempotence
under paused followers, reordered calls and wrapping sequences, through Ray."""

from __future__ import annotations

import concurrent.futures
import copy
import os
import signal
import threading
import uuid
from types import SimpleNamespace

import pytest
import ray

import raylog
from raylog import Admin, NewTopic, Producer, TopicPartition
from raylog.common import record_batch
from raylog.common.record_batch import SEQUENCE_MODULUS
from raylog.errors import KafkaTimeoutError
from raylog.protocol import FetchRequest
from tests.helpers import paused_controller, wait_until

#: Bound on a write made while the controller is paused (the controller is resumed after it).
PAUSED_BOUND_S = 20


def batch_sizes(cluster, topic: str, partition: int = 0) -> list[int]:
    """Record counts of the batches stored in a partition, in order."""
    leader = cluster.metadata(refresh=True).leader(TopicPartition(topic, partition))
    response = ray.get(leader.fetch.remote(FetchRequest(0, max_bytes=64 << 20, max_wait_ms=0)))
    return [h.record_count for _, h in record_batch.iter_headers(response.records)]


def committed(cluster, topic: str, partition: int = 0) -> list[tuple[int, bytes]]:
    """``(offset, value)`` of every committed record of a partition, as its leader serves them."""
    leader = cluster.metadata(refresh=True).leader(TopicPartition(topic, partition))
    response = ray.get(leader.fetch.remote(FetchRequest(0, max_bytes=64 << 20, max_wait_ms=0)))
    table = record_batch.decode_table(response.records)
    return list(zip(table.column("offset").to_pylist(), table.column("value").to_pylist(), strict=True))


@pytest.fixture
def three_brokers(cluster, tmp_path):
    """A second raylog cluster, of three brokers on this node (each replica an actor process)."""
    handle = raylog.connect(data_dir=str(tmp_path / "data"), num_brokers=3, cluster_name=f"b3{uuid.uuid4().hex[:8]}")
    yield handle
    handle.shutdown()


def test_a_retried_acks_all_batch_is_not_acknowledged_while_only_the_leader_has_it(three_brokers):
    """acks=all, replication factor 3, min.insync.replicas=2, both followers' processes
    paused (SIGSTOP): the first attempt times out at the leader, and each retry, which the
    leader finds is a duplicate, waits for the ISR as the first did; so nothing is
    acknowledged while only the leader has the record. Resumed, the followers catch up and
    the record is acknowledged once, at its original offset."""
    name = "acks-all"
    Admin(three_brokers).create_topics([NewTopic(name, 1, replication_factor=3, config={"min.insync.replicas": "2"})])
    Admin(three_brokers).await_leaders([name], 120_000, followers=True)
    (described,) = Admin(three_brokers).describe_topics([name])
    leader_id = described.partitions[0].leader
    assert len(described.partitions[0].isr) == 3
    handles = ray.get(three_brokers.controller.replica_handles.remote(name))
    followers = [ray.get(h.state.remote())["pid"] for (_, broker), h in handles.items() if broker != leader_id]
    assert len(followers) == 2
    producer = Producer(three_brokers, acks="all", request_timeout_ms=1000, linger_ms=0)
    for pid in followers:
        os.kill(pid, signal.SIGSTOP)
    try:
        future = producer.send(name, b"only the leader has it")
        # Two failed attempts: the first one and a retry the leader took for a duplicate.
        wait_until(lambda: future._batch.attempts >= 2, timeout_s=30, message="a second retry")
        assert not future.done()
    finally:
        for pid in followers:
            os.kill(pid, signal.SIGCONT)
    metadata = future.result(timeout=60)
    producer.close()
    assert metadata.offset == 0
    assert committed(three_brokers, name) == [(0, b"only the leader has it")]


class ReorderingLeader:
    """A leader's actor handle whose first produce call is held back until the second went
    out and ``hold_s`` passed (Ray may run pipelined calls in any order; this makes it so)."""

    def __init__(self, actor, hold_s: float):
        self.actor, self.hold_s = actor, hold_s
        self.sent: list[int] = []  # base sequences, in the order the leader got them
        self._held = None
        self._lock = threading.Lock()
        self.produce = SimpleNamespace(remote=self._produce)

    def _produce(self, request):
        with self._lock:
            if self._held is None:
                self._held = (request, concurrent.futures.Future())
                return SimpleNamespace(future=lambda held=self._held[1]: held)
        threading.Timer(self.hold_s, self._release).start()
        return self._send(request)

    def _send(self, request):
        self.sent.append(record_batch.read_header(request.records).base_sequence)
        return self.actor.produce.remote(request)

    def _release(self):
        request, held = self._held
        self._send(request).future().add_done_callback(lambda done: held.set_result(done.result()))


class ReorderingCluster:
    """The session's cluster, but produce calls for ``topic`` go through a ReorderingLeader."""

    def __init__(self, cluster, topic: str, hold_s: float):
        self._cluster, self._topic = cluster, topic
        self.controller = cluster.controller
        self.leader = ReorderingLeader(cluster.metadata(refresh=True).leader(TopicPartition(topic, 0)), hold_s)

    def metadata(self, refresh: bool = False):
        metadata = copy.copy(self._cluster.metadata(refresh))
        metadata.leaders = {**metadata.leaders, (self._topic, 0): self.leader}
        return metadata

    def session(self):
        return self._cluster.session()


def test_a_batch_that_overtakes_its_producers_first_waits_for_it(cluster, topic):
    """Sequence 1 reaching a leader that does not know its producer before sequence 0 (by a
    second here) is not taken for the producer's first batch: it waits for 0, and both are
    appended, in sequence order, with no OutOfOrderSequence for the real first."""
    name = topic()
    reordering = ReorderingCluster(cluster, name, hold_s=1.0)
    producer = Producer(reordering, linger_ms=0, batch_size=1)
    futures = [producer.send(name, b"first"), producer.send(name, b"second")]
    offsets = [f.result(timeout=60).offset for f in futures]
    producer.close()
    assert reordering.leader.sent == [1, 0]
    assert offsets == [0, 1]
    assert committed(cluster, name) == [(0, b"first"), (1, b"second")]


def test_sequences_wrap_at_two_to_the_31_through_the_leader(cluster, topic):
    """A producer whose partition sequence passes 2**31 - 1 goes on at 0 and the leader
    follows: every record is acknowledged, in order (the encoder's struct.error used to
    kill the sender thread and leave every future waiting)."""
    name = topic()
    producer = Producer(cluster, linger_ms=0, batch_size=1)
    producer._sender.sequences.default_factory = lambda: SEQUENCE_MODULUS - 3  # as after 2**31 - 3 records
    futures = [producer.send(name, b"%d" % i) for i in range(6)]
    assert [f.result(timeout=60).offset for f in futures] == list(range(6))
    producer.close()
    assert committed(cluster, name) == [(i, b"%d" % i) for i in range(6)]


def test_linger_gathers_records_into_one_batch(cluster, topic):
    """Records sent within linger_ms travel as one batch; batch_size closes batches early."""
    lingering = topic()
    with Producer(cluster, linger_ms=500) as producer:
        futures = [producer.send(lingering, b"x" * 100) for _ in range(200)]
    assert [f.result(10).offset for f in futures] == list(range(200))
    assert batch_sizes(cluster, lingering) == [200]

    small = topic()
    with Producer(cluster, linger_ms=500, batch_size=2_000) as producer:
        for _ in range(200):
            producer.send(small, b"x" * 100)
    sizes = batch_sizes(cluster, small)
    assert sum(sizes) == 200 and len(sizes) >= 10 and max(sizes) <= 17


def test_custom_partitioner_is_used(cluster, topic):
    """A partitioner callable decides where records go."""
    name = topic(num_partitions=3)
    with Producer(cluster, partitioner=lambda topic, key, n: n - 1) as producer:
        assert {producer.send(name, b"v", key=b"k%d" % i).result(10).partition for i in range(20)} == {2}


def test_full_buffer_blocks_then_times_out_and_undeliverable_records_fail(cluster, topic):
    """With the leader gone for good, buffer_memory fills, send raises after max_block_ms,
    and queued records fail once delivery_timeout_ms passes."""
    name = topic()
    leader = cluster.metadata(refresh=True).leader(TopicPartition(name, 0))
    ray.kill(leader, no_restart=True)
    producer = Producer(
        cluster,
        buffer_memory=5_000,
        batch_size=1_000,
        max_block_ms=200,
        delivery_timeout_ms=1_500,
        retry_backoff_ms=50,
        linger_ms=0,
    )
    futures = []
    with pytest.raises(KafkaTimeoutError):
        for _ in range(1_000):
            futures.append(producer.send(name, b"x" * 100))
    assert 0 < len(futures) < 100
    wait_until(lambda: all(f.done() for f in futures), timeout_s=30)
    with pytest.raises(KafkaTimeoutError):
        futures[0].result()
    producer.close(timeout=5)


def test_future_interface(cluster, topic):
    """Futures offer result/done/exception/add_done_callback as concurrent.futures does."""
    name = topic()
    seen = []
    with Producer(cluster, linger_ms=50) as producer:
        future = producer.send(name, b"v")
        future.add_done_callback(lambda f: seen.append(f.result().offset))
        assert future.result(timeout=10).offset == 0
    assert future.done() and future.exception() is None and not future.cancelled()
    assert seen == [0]
    future.add_done_callback(lambda f: seen.append("late"))
    assert seen == [0, "late"]


def test_send_arrow_without_keys_spreads_batches_and_keeps_order_per_partition(cluster, topic):
    """Unkeyed Arrow rows go out batch by batch over the partitions, each in table order; batches are as
    large as a request may be (here max_request_size), whatever batch_size says."""
    import pyarrow as pa

    name = topic(num_partitions=3)
    n = 30_000
    table = pa.table({"value": pa.array([b"%06d" % i for i in range(n)])})
    with Producer(cluster, batch_size=1_000, max_request_size=40_000) as producer:
        sent = producer.send_arrow(name, table).result(timeout=30)
        fixed = producer.send_arrow(name, table.slice(0, 10), partition=2).result(timeout=30)
        small = [producer.send_arrow(name, table.slice(0, 10)).result(timeout=30)[0].partition for _ in range(3)]
    assert sum(b.record_count for b in sent) == n and {b.partition for b in sent} == {0, 1, 2}
    assert [b.partition for b in sent[1:]] == [(b.partition + 1) % 3 for b in sent[:-1]]  # one after the other
    assert small == [(sent[-1].partition + i) % 3 for i in (1, 2, 3)]  # the next calls go on from there
    assert 1 < len(sent) <= 2 * n * 20 // 40_000  # ~20 bytes a row: batches near 40,000 bytes, not 1,000
    assert [b.partition for b in fixed] == [2]
    for partition in range(3):
        leader = cluster.metadata(refresh=True).leader(TopicPartition(name, partition))
        data = ray.get(leader.fetch.remote(FetchRequest(0, max_bytes=64 << 20, max_wait_ms=0))).records
        values = record_batch.decode_table(data).column("value").to_pylist()
        bulk = values[: len(values) - 10 - 10 * (partition == 2)]  # then its small batch (and the fixed rows)
        assert bulk == sorted(bulk) and values[len(bulk) :] == [b"%06d" % i for i in range(10)] * (1 + (partition == 2))


@pytest.fixture
def one_broker(cluster, tmp_path):
    """A raylog cluster of its own (one broker), whose controller a test may pause."""
    handle = raylog.connect(data_dir=str(tmp_path / "data"), cluster_name=f"b1{uuid.uuid4().hex[:8]}")
    yield handle
    handle.shutdown()


def test_producers_keep_sending_while_the_controller_is_paused(one_broker):
    """The controller serves metadata and producer ids, not writes: with its process stopped,
    an idempotent producer created before (it takes its producer id as it starts, as Kafka's
    clients do, not at its first send) and a producer refreshing its metadata before every
    send (``metadata_max_age_ms=0``: a refresh that does not come is waited for only briefly)
    write to a leader they know. Before, both waited for the controller's return."""
    name = "paused-controller"
    Admin(one_broker).create_topics([NewTopic(name, 1)])
    Producer(one_broker).send(name, b"warm").get(timeout=30)  # the topic's leader is up
    fresh = Producer(one_broker, acks="all")
    refreshing = Producer(one_broker, acks="all", metadata_max_age_ms=0)
    refreshing.send(name, b"known").get(timeout=30)  # it knows the leader and has its id
    wait_until(lambda: fresh._sender.producer_id >= 0, message="the fresh producer's id")  # taken in the background
    with paused_controller(one_broker):
        first = fresh.send(name, b"fresh").get(timeout=PAUSED_BOUND_S)
        later = [refreshing.send(name, b"refreshing-%d" % i).get(timeout=PAUSED_BOUND_S) for i in range(3)]
    offsets = [m.offset for m in later]
    assert offsets == sorted(offsets) and first.offset not in offsets
    fresh.close()
    refreshing.close()
