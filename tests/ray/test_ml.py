"""raylog.ml: training streams split partitions between workers and keep membership
through long steps."""

from __future__ import annotations

import threading
import time

import numpy as np
import pyarrow as pa
import pytest

from raylog import Producer
from raylog.ml import TrainingStream, values_as_float32

WIDTH = 4
FAST_GROUP = {"session_timeout_ms": 3_000, "heartbeat_interval_ms": 500}


def _produce_vectors(cluster, topic: str, count: int) -> np.ndarray:
    """``count`` float32 vectors whose first element is the record number."""
    vectors = np.zeros((count, WIDTH), dtype="<f4")
    vectors[:, 0] = np.arange(count)
    values = pa.array([v.tobytes() for v in vectors], pa.binary())
    with Producer(cluster) as producer:
        producer.send_arrow(topic, pa.table({"key": values, "value": values}))
    return vectors


def test_two_workers_split_partitions_and_see_each_record_once_per_epoch(cluster, topic):
    name = topic(4)
    _produce_vectors(cluster, name, 1_000)
    seen: dict[int, list[list[float]]] = {0: [], 1: []}
    assignments: dict[int, set] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(2, timeout=90)  # as Ray Train workers would synchronise

    def worker(rank: int) -> None:
        try:
            stream = TrainingStream(
                cluster,
                [name],
                group_id=f"train-{name}",
                batch_size=64,
                decode=values_as_float32(WIDTH),
                epochs=True,
                consumer_config=FAST_GROUP,
            )
            assignments[rank] = stream.wait_for_members(2, timeout_s=60)
            barrier.wait()
            for _ in range(2):
                seen[rank].append([float(x) for batch in stream for x in batch[:, 0]])
            barrier.wait()
            stream.close()
        except BaseException as exc:  # noqa: BLE001 — reported by the test thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(rank,)) for rank in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert assignments[0] and assignments[1] and not assignments[0] & assignments[1]
    assert len(assignments[0] | assignments[1]) == 4
    for epoch in range(2):
        together = seen[0][epoch] + seen[1][epoch]
        assert sorted(together) == [float(i) for i in range(1_000)], f"epoch {epoch}: each record exactly once"


def test_continuous_stream_commits_what_it_handed_out_and_survives_a_long_step(cluster, topic):
    name = topic(2)
    _produce_vectors(cluster, name, 300)
    group = f"cont-{name}"
    stream = TrainingStream(
        cluster,
        [name],
        group_id=group,
        batch_size=100,
        decode=values_as_float32(WIDTH),
        idle_timeout_s=2.0,
        consumer_config=FAST_GROUP,
    )
    batches = iter(stream)
    first = next(batches)
    generation = stream.consumer.group_metadata()["generation"]
    time.sleep(4.0)  # a training step longer than the session timeout (the point of the test)
    rest = list(batches)
    assert stream.consumer.group_metadata()["generation"] == generation, "a long step cost the membership"
    ids = sorted(float(x) for b in [first, *rest] for x in b[:, 0])
    assert ids == [float(i) for i in range(300)]
    committed = stream.consumer.committed(stream.consumer.assignment())
    assert sum(c.offset for c in committed.values()) == 300
    stream.close()


def test_records_the_joining_poll_fetched_are_handed_out(cluster, topic, monkeypatch):
    """wait_for_members polls to join the group, and on a quiet machine the poll that completes
    the join goes on to fetch from the partitions it was just given: the stream hands those
    records out rather than skipping them (one handed out 4,620 of 5,120 records and committed
    all 5,120). The joining poll here goes on until it fetched, whatever the machine's load."""
    name = topic(2)
    _produce_vectors(cluster, name, 300)
    stream = TrainingStream(
        cluster,
        [name],
        group_id=f"joined-{name}",
        batch_size=50,
        decode=values_as_float32(WIDTH),
        idle_timeout_s=3.0,
        consumer_config=FAST_GROUP,
    )
    poll = stream.consumer.poll
    fetched: list[int] = []

    def joining_poll(timeout_ms: int):
        if fetched:
            return poll(timeout_ms=timeout_ms)
        deadline = time.monotonic() + 60
        while not (got := poll(timeout_ms=timeout_ms)) and time.monotonic() < deadline:
            pass
        fetched.append(sum(len(records) for records in got.values()))
        return got

    monkeypatch.setattr(stream.consumer, "poll", joining_poll)
    assert len(stream.wait_for_members(1, timeout_s=90)) == 2
    assert fetched[0] > 0, "the joining poll fetched nothing"
    ids = sorted(float(x) for batch in stream for x in batch[:, 0])
    assert ids == [float(i) for i in range(300)], f"{len(ids)} of 300 records handed out"
    committed = stream.consumer.committed(stream.consumer.assignment())
    assert sum(c.offset for c in committed.values()) == 300
    stream.close()


def test_batch_size_must_be_positive(cluster, topic):
    with pytest.raises(ValueError, match="batch_size"):
        TrainingStream(cluster, [topic()], group_id="g", batch_size=0)
