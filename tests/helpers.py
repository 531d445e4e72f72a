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
