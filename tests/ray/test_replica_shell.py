"""The replica actor's shell against a stand-in leader: its threads act on the role it holds
now."""

from __future__ import annotations

import threading

import numpy as np
import ray

from raylog.actors.replica import CONCURRENCY_GROUPS, MAX_CONCURRENCY, PartitionReplicaActor
from raylog.common import record_batch
from raylog.coordination.sessions import new_key
from raylog.protocol import FetchResponse
from raylog.types import PartitionInfo

WAIT_S = 60.0
LEADER_EPOCH = 5


class GateLeader:
    """A stand-in leader: answers epoch queries at once (it knows none of the follower's
    epochs), holds each fetch until released (or answers at once when ``open``) with
    ``records`` (bytes of record batches), and counts the fetches it got."""

    def __init__(self, open_: bool, records: bytes = b""):
        self._cond = threading.Condition()
        self._fetches = 0
        self._released = 10**9 if open_ else 0
        self._records = np.frombuffer(records, dtype=np.uint8)

    def end_offset_for_epoch(self, epoch: int, session: str | None = None) -> tuple[int, int, int]:
        return 0, -1, -1

    def fetch(self, request) -> FetchResponse:
        with self._cond:
            self._fetches += 1
            n = self._fetches
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._released >= n, WAIT_S)
        end = 1 if len(self._records) else 0  # (one record)
        return FetchResponse(
            high_watermark=end, log_start_offset=0, log_end_offset=end, leader_epoch=LEADER_EPOCH, records=self._records
        )

    def release(self) -> None:
        with self._cond:
            self._released = 10**9
            self._cond.notify_all()

    def wait_fetches(self, n: int) -> int:
        """The fetches so far, once there are ``n`` (or WAIT_S passed)."""
        with self._cond:
            self._cond.wait_for(lambda: self._fetches >= n, WAIT_S)
            return self._fetches


def test_a_fetch_answered_after_the_leaders_actor_changed_is_dropped(cluster, tmp_path):
    """Kafka's follower fetches from one leader at a time. Here the leader's actor is
    re-created (same leader, same epoch) while a fetch is held at the old one: the follower
    fetches from the new actor, and the old fetch's late answer is dropped: nothing of it is
    appended, and its loop ends rather than fetch again (two loops would append the same
    partition twice)."""
    # A replica's follower fetches in its leader's "replication" pool: the stand-in has it too.
    gate = ray.remote(concurrency_groups=CONCURRENCY_GROUPS)(GateLeader).options(num_cpus=0, max_concurrency=8)
    batch = record_batch.build([b"late"])
    late = record_batch.stamp(record_batch.parse_header(batch), 0, LEADER_EPOCH) + batch[record_batch.STAMP.size :]
    old, new = gate.remote(False, late), gate.remote(True)
    state = PartitionInfo("shell", 0, leader=1, leader_epoch=LEADER_EPOCH, replicas=(1, 2), isr=(1, 2))
    replica = (
        ray.remote(concurrency_groups=CONCURRENCY_GROUPS)(PartitionReplicaActor)
        .options(num_cpus=0, max_concurrency=MAX_CONCURRENCY)
        .remote("no-such-cluster", "shell", "shell-id", 0, 2, str(tmp_path), {}, state, old, session_key=new_key())
    )
    try:
        assert ray.get(old.wait_fetches.remote(1)) == 1  # the follower's fetch is held there
        ray.get(replica.update_state.remote(state, new))  # Ray re-created the leader's actor
        assert ray.get(new.wait_fetches.remote(1)) >= 1
        ray.get(old.release.remote())  # the held fetch answers late
        seen = ray.get(new.wait_fetches.remote(1))
        ray.get(new.wait_fetches.remote(seen + 50))  # the follower went on fetching from the new actor
        assert ray.get(old.wait_fetches.remote(0)) == 1
        assert ray.get(replica.state.remote())["log_end_offset"] == 0
    finally:
        ray.get(replica.delete_data.remote())
        for actor in (replica, old, new):
            ray.kill(actor)
