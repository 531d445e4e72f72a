"""Topics start as in Kafka: created once the controller journaled them, their replica actors
started in the background; clients wait for leaders instead of failing, and no admin call
waits for processes (unless asked to, with progress)."""

from __future__ import annotations

import uuid

import pytest
import ray

import raylog
from raylog import Admin, Consumer, NewTopic, Producer, TopicPartition
from raylog.errors import RequestTimedOutError, UnknownTopicOrPartitionError
from tests.helpers import wait_until


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def test_records_sent_right_after_creation_wait_for_their_leaders(cluster, admin):
    """A producer with retries=0 sends to every partition of a topic created a moment ago:
    partitions without a running leader yet make records wait (as Kafka's producer waits for
    metadata), not fail; a consumer then reads every record back."""
    name = _name("fresh")
    admin.create_topics([NewTopic(name, num_partitions=6)])
    try:
        with Producer(cluster, retries=0, linger_ms=0) as producer:
            futures = [producer.send(name, b"%d" % i, partition=i % 6) for i in range(60)]
            offsets = [f.result(timeout=60) for f in futures]
        assert sorted((m.partition, m.offset) for m in offsets) == sorted((p, o) for p in range(6) for o in range(10))
        consumer = Consumer(cluster, auto_offset_reset="earliest")
        consumer.assign([TopicPartition(name, p) for p in range(6)])
        seen = []
        wait_until(lambda: seen.extend(consumer.poll_arrow(timeout_ms=500)["value"].to_pylist()) or len(seen) >= 60)
        assert sorted(seen) == sorted(b"%d" % i for i in range(60))
        consumer.close()
    finally:
        admin.delete_topics([name])


def test_wait_for_leaders_reports_progress_until_every_partition_leads(cluster, admin):
    """create_topics(wait_for_leaders_ms) returns once every partition has a running leader;
    await_leaders reports non-decreasing progress ending at (partitions, partitions), and the
    metadata then names a leader actor for each partition."""
    name = _name("waited")
    admin.create_topics([NewTopic(name, num_partitions=8)], wait_for_leaders_ms=120_000)
    try:
        metadata = cluster.metadata()
        assert all((name, p) in metadata.leaders for p in range(8))
        reports: list[tuple[int, int]] = []
        admin.create_partitions({name: 12})
        admin.await_leaders([name], 120_000, progress=lambda led, total: reports.append((led, total)))
        assert reports[-1] == (12, 12)
        assert [led for led, _ in reports] == sorted(led for led, _ in reports)
        assert all((name, p) in cluster.metadata().leaders for p in range(12))
    finally:
        admin.delete_topics([name])


def test_await_leaders_refuses_an_unknown_topic(admin):
    """A name that is not a topic: UnknownTopicOrPartitionError, not a wait."""
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.await_leaders(["no-such-topic"], 60_000)


@ray.remote(num_cpus=0)
class _StuckController:
    """Answers await_leaders as a controller whose replicas never start."""

    def __init__(self):
        self.asked: list[bool] = []

    def await_leaders(self, topics: list[str], timeout_ms: int, followers: bool = False) -> dict:
        self.asked.append(followers)
        return {name: (0, "", 1, 4) for name in topics}

    def followers_asked(self) -> list[bool]:
        return self.asked


def test_await_leaders_times_out_with_a_typed_error_saying_the_topic_exists(cluster):
    """Partitions still without a leader after the wait: RequestTimedOutError naming how many,
    and saying the topic exists (its replicas go on starting)."""
    stuck = raylog.RaylogCluster(cluster.cluster_name, _StuckController.remote())
    with pytest.raises(RequestTimedOutError, match=r"3 of 4 partitions of t have no leader.*topics exist"):
        Admin(stuck).await_leaders(["t"], 300)


def test_await_leaders_with_followers_asks_the_controller_for_every_replica(cluster):
    """followers=True goes to the controller, and a timeout then says replicas are not running
    (a new topic's followers are in its ISR, so an acks=all record waits for their start)."""
    controller = _StuckController.remote()
    stuck = raylog.RaylogCluster(cluster.cluster_name, controller)
    with pytest.raises(RequestTimedOutError, match=r"3 of 4 partitions of t have a replica not running"):
        Admin(stuck).await_leaders(["t"], 300, followers=True)
    assert set(ray.get(controller.followers_asked.remote())) == {True}


def test_a_controller_killed_while_replicas_start_finishes_starting_them(cluster, admin):
    """The controller's process is killed while a topic's replicas start: Ray restarts it, it
    finds the replica actors already created (by name) and starts the others; every partition
    gets one leader that answers as such."""
    name = _name("restarted")
    admin.create_topics([NewTopic(name, num_partitions=10)])
    try:
        ray.kill(cluster.controller, no_restart=False)
        admin.await_leaders([name], 120_000)
        handles = ray.get(cluster.controller.replica_handles.remote(name), timeout=120)
        assert sorted(handles) == [(p, 0) for p in range(10)]
        states = ray.get([h.state.remote() for h in handles.values()], timeout=60)
        assert [s["leader"] for s in states] == [0] * 10
        assert len({s["pid"] for s in states}) == 10  # one process per replica, none started twice
    finally:
        admin.delete_topics([name])
