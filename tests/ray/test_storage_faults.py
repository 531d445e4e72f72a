"""Bad input and bad disks through Ray: a leader refuses what a client must not send, a full or failing disk
fails produces with KAFKA_STORAGE_ERROR and loses nothing acknowledged, the cleaner runs off the replica's
event loop, and a follower that finds a corrupt tail at restart re-copies it from the leader byte for byte."""

from __future__ import annotations

import errno
import os
import signal
import uuid

import pytest
import ray

import raylog
from raylog import Admin, Consumer, NewTopic, Producer, TopicPartition
from raylog.common import record_batch
from raylog.errors import (
    InvalidRecordError,
    InvalidRequestError,
    RecordTooLargeError,
    StorageError,
)
from raylog.protocol import FetchRequest, ProduceRequest, error_of
from tests.helpers import wait_until


def consume_all(cluster, name: str, count: int, partitions: int = 1) -> list:
    consumer = Consumer(cluster, name, auto_offset_reset="earliest")
    records: list = []
    wait_until(
        lambda: (
            records.extend(r for rs in consumer.poll(timeout_ms=200).values() for r in rs) or (len(records) >= count)
        ),
        timeout_s=60,
        message=f"{count} records of {name}",
    )
    consumer.close()
    return records


def leader_of(cluster, name: str):
    return cluster.metadata(refresh=True).leader(TopicPartition(name, 0))


# ---------------------------------------------------------------------------------------
# What a leader refuses


def test_a_leader_refuses_what_a_client_must_not_send(cluster, topic):
    """Batches sent straight to a replica: above max.message.bytes (MESSAGE_TOO_LARGE), too many headers
    (INVALID_RECORD), a bad client id or fetch size (INVALID_REQUEST); nothing of them is appended."""
    name = topic(**{"max.message.bytes": "16384"})
    leader = leader_of(cluster, name)
    refused = {
        RecordTooLargeError: ProduceRequest(record_batch.build([b"x" * 20_000]), acks=1),
        InvalidRecordError: ProduceRequest(
            record_batch.build([b"h"], headers=[[("h", None)] * (record_batch.MAX_HEADERS_PER_RECORD + 1)]), acks=1
        ),
        InvalidRequestError: ProduceRequest(record_batch.build([b"id"]), acks=1, client_id=None),
    }
    for error, request in refused.items():
        response = ray.get(leader.produce.remote(request))
        assert isinstance(error_of(response), error) and response.error_code == error.code
    assert (RecordTooLargeError.code, InvalidRecordError.code, InvalidRequestError.code) == (10, 87, 42)
    for request in (FetchRequest(0, client_id=7), FetchRequest(0, max_bytes=-1)):
        assert isinstance(error_of(ray.get(leader.fetch.remote(request))), InvalidRequestError)
    assert error_of(ray.get(leader.produce.remote(ProduceRequest(record_batch.build([b"ok"]), acks=1)))) is None
    assert [r.value for r in consume_all(cluster, name, 1)] == [b"ok"]


# ---------------------------------------------------------------------------------------
# A full or failing disk


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EIO], ids=["ENOSPC", "EIO"])
def test_a_disk_fault_fails_produces_with_storage_error_and_loses_nothing(cluster, topic, error):
    """While the leader's disk fails, produces get KAFKA_STORAGE_ERROR (56, retriable) and a producer keeps
    retrying; once it clears, appends resume and every acknowledged record is there, once."""
    name = topic()
    leader = leader_of(cluster, name)
    with Producer(cluster, acks=1) as producer:
        acked = [producer.send(name, b"before-%d" % i) for i in range(50)]
        producer.flush()
        ray.get(leader.inject_disk_fault.remote(error))
        try:
            response = ray.get(leader.produce.remote(ProduceRequest(record_batch.build([b"refused"]), acks=1)))
            assert response.error_code == StorageError.code == 56 and StorageError.retriable
            during = producer.send(name, b"during")  # retried until the disk is back
        finally:
            ray.get(leader.inject_disk_fault.remote(None))
        after = [producer.send(name, b"after-%d" % i) for i in range(10)]
        producer.flush()
        assert during.result(timeout=60).offset == 50
        assert [f.result().offset for f in acked + after] == list(range(50)) + list(range(51, 61))
    if error == errno.EIO:  # the log went offline, and housekeeping brought it back
        assert not ray.get(leader.state.remote())["log_offline"]
    values = [r.value for r in consume_all(cluster, name, 61)]
    assert values == [b"before-%d" % i for i in range(50)] + [b"during"] + [b"after-%d" % i for i in range(10)]


# ---------------------------------------------------------------------------------------
# The cleaner off the event loop


def test_produce_and_fetch_are_served_while_a_throttled_cleaning_round_runs(cluster, topic):
    """A compacted topic's cleaning round runs in the cleaner thread, throttled to 2 KB/s: meanwhile the
    replica answers produces and fetches at once."""
    name = topic(
        **{
            "cleanup.policy": "compact",
            "segment.bytes": "1024",
            "min.cleanable.dirty.ratio": "0.01",
            "log.cleaner.io.max.bytes.per.second": "2000",
        }
    )
    leader = leader_of(cluster, name)
    with Producer(cluster, acks=1, linger_ms=0, batch_size=512) as producer:  # ~500 segments to clean
        futures = [producer.send(name, b"v" * 100, key=b"k%d" % (i % 10)) for i in range(2_000)]
        producer.flush()
    assert all(f.result().offset >= 0 for f in futures)
    wait_until(lambda: ray.get(leader.state.remote())["cleaning"], timeout_s=30, message="a cleaning round")
    for i in range(20):
        batch = record_batch.build([b"during-%d" % i], keys=[b"new"])
        response = ray.get(leader.produce.remote(ProduceRequest(batch, acks=1)), timeout=5)
        assert error_of(response) is None
        assert error_of(ray.get(leader.fetch.remote(FetchRequest(0, max_wait_ms=0)), timeout=5)) is None
    assert ray.get(leader.state.remote())["cleaning"], "the round ended before the calls: nothing was shown"


# ---------------------------------------------------------------------------------------
# A corrupt tail found at restart


@pytest.fixture(scope="module")
def three_brokers(cluster, tmp_path_factory):
    """A second raylog cluster in the session's Ray: three brokers on this node, each its own data dir."""
    handle = raylog.connect(
        num_brokers=3, data_dir=str(tmp_path_factory.mktemp("three")), cluster_name=f"t3{uuid.uuid4().hex[:6]}"
    )
    yield handle
    handle.shutdown()


def segment_bytes(directory: str) -> bytes:
    """A log's batches as stored: its .log files in base offset order, concatenated."""
    names = sorted(n for n in os.listdir(directory) if n.endswith(".log"))
    return b"".join(open(os.path.join(directory, n), "rb").read() for n in names)


def cut_short(path: str) -> None:
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size - size // 3)


def flip_bytes(path: str) -> None:
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))


@pytest.mark.parametrize("damage", [cut_short, flip_bytes], ids=["cut-short", "flipped-bytes"])
def test_a_follower_with_a_corrupt_tail_recovers_its_prefix_and_recopies_the_rest(three_brokers, damage):
    """A follower's segment damaged while its process is down: at restart it keeps the valid prefix, fetches
    the rest from the leader, and ends with the leader's bytes exactly; no acknowledged record is lost."""
    cluster = three_brokers
    admin = Admin(cluster)
    name = f"tail-{damage.__name__.replace('_', '-')}"
    config = {"min.insync.replicas": "2", "segment.bytes": "16384", "replica.lag.time.max.ms": "3000"}
    admin.create_topics([NewTopic(name, 1, replication_factor=3, config=config)])
    try:
        with Producer(cluster, acks="all", batch_size=2_048) as producer:  # ~35 batches, 5 segments
            acked = [producer.send(name, os.urandom(200), key=b"%d" % i) for i in range(300)]
            producer.flush()
        assert all(f.result().offset >= 0 for f in acked)
        replicas = ray.get(cluster.controller.replica_handles.remote(name))
        leader_id = admin.describe_topics([name])[0].partitions[0].leader
        leader = replicas[(0, leader_id)]
        follower = next(h for (_, b), h in replicas.items() if b != leader_id)
        end = ray.get(leader.state.remote())["log_end_offset"]
        wait_until(lambda: ray.get(follower.state.remote())["log_end_offset"] == end, timeout_s=30)
        state = ray.get(follower.state.remote())
        segments = sorted(n for n in os.listdir(state["log_dir"]) if n.endswith(".log"))
        assert len(segments) > 2
        # Freeze the follower, damage its middle segment, then kill it: Ray restarts it on that disk.
        os.kill(state["pid"], signal.SIGSTOP)
        damage(os.path.join(state["log_dir"], segments[len(segments) // 2]))
        os.kill(state["pid"], signal.SIGKILL)
        recovery = wait_until(lambda: _ready(follower), timeout_s=60)["recovery"]
        assert recovery["truncated_bytes"] > 0
        with Producer(cluster, acks="all") as producer:
            producer.send(name, b"after the restart").result(timeout=30)
        end = ray.get(leader.state.remote())["log_end_offset"]
        wait_until(lambda: ray.get(follower.state.remote())["log_end_offset"] == end, timeout_s=60)
        leader_dir = ray.get(leader.state.remote())["log_dir"]
        assert segment_bytes(state["log_dir"]) == segment_bytes(leader_dir)
        assert len(consume_all(cluster, name, 301)) == 301
    finally:
        admin.delete_topics([name])


def _ready(handle):
    try:
        answer = ray.get(handle.ready.remote(), timeout=5)
    except (ray.exceptions.RayError, TimeoutError):
        return None
    return answer
