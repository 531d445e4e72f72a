"""Helpers shared by the test suites."""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import signal
from collections.abc import Callable, Iterator

from raylog.chaos import wait_until  # noqa: F401 -- the tests' wait, the fault campaigns' too

_topic_names = itertools.count()


@contextlib.contextmanager
def paused_controller(cluster) -> Iterator[None]:
    """A raylog cluster's controller process stopped (SIGSTOP) for the block, resumed after
    it whatever happens."""
    import ray

    pid = ray.get(cluster.controller.__ray_call__.remote(lambda _: os.getpid()))
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


@contextlib.contextmanager
def topic_factory(admin, test_name: str) -> Iterator[Callable[..., str]]:
    """``make(num_partitions=1, replication_factor=1, **config)`` creating fresh topics through
    ``admin`` (named after the test), every partition led; all are deleted on exit."""
    from raylog import NewTopic

    created: list[str] = []

    def make(num_partitions: int = 1, replication_factor: int = 1, **config) -> str:
        name = f"{re.sub(r'[^a-zA-Z0-9._-]', '_', test_name[:40])}-{next(_topic_names)}"
        topic = NewTopic(name, num_partitions=num_partitions, replication_factor=replication_factor, config=config)
        admin.create_topics([topic], wait_for_leaders_ms=60_000)
        created.append(name)
        return name

    try:
        yield make
    finally:
        if created:
            admin.delete_topics(created)


def record_rows(table) -> list[tuple]:
    """``(value, key, timestamp, headers)`` per row of a decoded batch table."""
    columns = ("value", "key", "timestamp", "headers")
    return list(zip(*(table.column(c).to_pylist() for c in columns), strict=True))


def read_values(cluster, topic: str, partitions: int = 1, isolation_level: str = "read_committed") -> list[bytes]:
    """Every value of ``topic`` readable now, partition after partition in offset order
    (read_committed: up to the last stable offset; read_uncommitted: the high watermark)."""
    from raylog import Consumer, TopicPartition

    tps = [TopicPartition(topic, p) for p in range(partitions)]
    with Consumer(cluster, auto_offset_reset="earliest", isolation_level=isolation_level) as consumer:
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        by_partition: dict = {tp: [] for tp in tps}
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            for tp, records in consumer.poll(timeout_ms=1_000).items():
                by_partition[tp] += [r.value for r in records]
        return [value for tp in tps for value in by_partition[tp]]


def only_replica(cluster, name: str):
    """The actor of the one replica of a 1-partition, 1-replica topic (on whichever broker)."""
    import ray

    (handle,) = ray.get(cluster.controller.replica_handles.remote(name)).values()
    return handle


#: A tiered topic's settings for the tests: 4 KiB segments, 8 KiB kept on the broker's disk.
TIERED_TOPIC = {
    "remote.storage.enable": "true",
    "remote.storage.history.enable": "true",
    "segment.bytes": "4096",
    "local.retention.bytes": "8192",
    "retention.ms": "-1",
}


@contextlib.contextmanager
def tiered_topic(cluster, admin, name: str, records: int = 600, **overrides: str) -> Iterator[list[tuple]]:
    """A 1-partition tiered topic ``name`` on ``cluster`` (whose controller has a remote store)
    holding ``records`` records, each with a key, a header and a timestamp of its own, its
    copied segments deleted from the broker's disk down to local.retention.bytes and, with its
    history on (TIERED_TOPIC's default), each copied segment's history file listed: yields the
    records as ``(key, value, timestamp_ms, headers)``; the topic is deleted on exit.
    ``overrides``: topic configs over TIERED_TOPIC's."""
    import ray

    from raylog import NewTopic, Producer
    from raylog.clients.history import history_source

    config = {**TIERED_TOPIC, **overrides}
    admin.create_topics([NewTopic(name, 1, 1, config=config)], wait_for_leaders_ms=60_000)
    try:
        sent = [
            (b"k%d" % (i % 7), b"value-%05d-" % i + b"x" * 80, 1_700_000_000_000 + i, [("n", b"%d" % i)])
            for i in range(records)
        ]
        with Producer(cluster, linger_ms=0, batch_size=1024) as producer:
            for key, value, ts, headers in sent:
                producer.send(name, value, key=key, timestamp_ms=ts, headers=headers)
        leader = only_replica(cluster, name)

        def held() -> dict | None:
            state = ray.get(leader.state.remote())
            known = state["remote_log_start_offset"] is not None  # (its pump read the metadata through)
            return state if known and state["size_bytes"] <= 8192 + 4096 and history_written(state) else None

        def history_written(state: dict) -> bool:
            history = history_source(cluster, name)
            if history is None:
                return True
            end = state["highest_remote_offset"] + 1
            plan = history.plan(0, 0, end, read_committed=True)
            return plan is not None and plan.history_end_offset == end

        state = wait_until(held, timeout_s=60, message="local retention of the tiered topic")
        assert state["local_log_start_offset"] > records // 2 and state["remote_log_start_offset"] == 0
        yield sent
    finally:
        admin.delete_topics([name])
