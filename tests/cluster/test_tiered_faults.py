"""Tiered storage under faults (KIP-405), on the multi-node cluster: the leader of a tiered
topic is killed (its process, SIGKILL) again and again while it copies segments to the store
and remote retention deletes them. Nothing acknowledged above the log start is lost, every
unfinished copy and deletion is finished by the next leader's clean-up, no offset is copied
twice, every readable segment's upload is whole and the store holds no object the metadata
does not know."""

from __future__ import annotations

import contextlib
import os
import signal

import pyarrow.fs as pafs
import ray

from raylog import Admin, Consumer, TopicPartition
from raylog.chaos import remote_log_invariants as invariants
from raylog.common.names import REMOTE_LOG_METADATA_TOPIC, remote_topic_name
from raylog.errors import RaylogError
from raylog.storage import remote_log_metadata
from raylog.storage.remote_log_metadata import RemoteLogSegmentId
from raylog.storage.remote_log_metadata_cache import RemoteLogMetadataCache
from raylog.storage.remote_storage import RemoteStorageManager
from tests.cluster.test_replication import SAFE, Writer, describe, read_values
from tests.helpers import wait_until

TIERED = {
    **SAFE,
    "remote.storage.enable": "true",
    "segment.bytes": "2048",
    "local.retention.bytes": "4096",
    "retention.bytes": "40960",
}
KILLS = 3


def _events(cluster, remote: str) -> list:
    """Every event of partition 0 of the topic named ``remote`` in the remote tier (see
    remote_topic_name) in ``__remote_log_metadata``, in the topic's order."""
    key = remote_log_metadata.record_key(remote, 0)
    partitions = len(Admin(cluster).describe_topics([REMOTE_LOG_METADATA_TOPIC])[0].partitions)
    events = []
    with Consumer(cluster, auto_offset_reset="earliest") as consumer:
        tps = [TopicPartition(REMOTE_LOG_METADATA_TOPIC, p) for p in range(partitions)]
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            for records in consumer.poll(timeout_ms=1_000).values():
                events += [remote_log_metadata.decode(r.key, r.value) for r in records if r.key == key]
    return events


def _stored_ids(store: RemoteStorageManager, topic: str) -> set[RemoteLogSegmentId]:
    infos = store.filesystem.get_file_info(pafs.FileSelector(store.partition_path(topic, 0), allow_not_found=True))
    return {RemoteLogSegmentId(topic, 0, info.base_name.split("-", 1)[1].split(".")[0]) for info in infos}


def _leader_tiering(cluster, topic: str) -> dict | None:
    """The tiering state of the partition's leader, or None while it has none."""
    leader = describe(cluster, topic).leader
    handle = ray.get(cluster.controller.replica_handles.remote(topic)).get((0, leader))
    state = ray.get(handle.state.remote()) if handle is not None else None
    return state["tiering"] if state is not None and state["leader"] == leader else None


def test_the_leader_killed_while_it_copies_and_deletes_loses_nothing_and_leaves_nothing_behind(
    multinode, replicated_topic
):
    cluster, soak = multinode
    topic = replicated_topic(**TIERED)
    writer = Writer(cluster, topic)
    writer.start()
    try:
        for _ in range(KILLS):
            # Each leader copies (and remote retention deletes) before it is killed, at
            # whatever step it is then.
            wait_until(
                lambda: (_leader_tiering(cluster, topic) or {}).get("segments_copied", 0) >= 2,
                timeout_s=60,
                message="the leader copying",
            )
            old = describe(cluster, topic)
            handles = ray.get(cluster.controller.replica_handles.remote(topic))
            pid = ray.get(handles[(0, old.leader)].state.remote())["pid"]
            os.kill(pid, signal.SIGKILL)  # Ray restarts it in place; another ISR member leads
            wait_until(
                lambda: describe(cluster, topic).leader_epoch > old.leader_epoch,  # noqa: B023
                timeout_s=60,
                message="a new leader epoch",
            )
    finally:
        acknowledged = writer.finish()
    values = read_values(cluster, topic)
    assert values == sorted(values) and len(set(values)) == len(values), "records out of order or twice"
    assert {v for v in acknowledged if v >= values[0]} <= set(values), "an acknowledged record was lost"

    # The last leader cleans up what its predecessors left unfinished, then copies on.
    remote = remote_topic_name(topic, Admin(cluster).describe_topics([topic])[0].topic_id)
    store = RemoteStorageManager.from_uri(soak.config["remote.log.storage.uri"])
    wait_until(
        lambda: (
            ((t := _leader_tiering(cluster, topic)) or {}).get("phase") == "running"
            and t["copy_lag_segments"] == 0
            and not invariants.nothing_left_unfinished(invariants.replay(remote, 0, _events(cluster, remote)))
        ),
        timeout_s=60,
        message="the last leader's clean-up and copies",
    )
    cache, copied_once, violations = RemoteLogMetadataCache(remote, 0), invariants.CopiedOnce(), []
    for event in _events(cluster, remote):
        with contextlib.suppress(RaylogError):  # refused as every reader refuses it
            cache.apply(event)
        violations += copied_once.check(cache)
    violations += invariants.readable_segments_are_whole(cache, store.upload_state)
    violations += invariants.no_orphans(cache, _stored_ids(store, remote))
    assert violations == []
    assert cache.segments(), "nothing was copied"


def test_a_replica_down_past_the_local_retention_comes_back_at_the_local_log_start_and_leads_the_whole_log(
    multinode, replicated_topic
):
    """A broker is down while its partition's leader copies and deletes locally past where the
    broker's log ends: back, its replica restarts its log at the leader's local log start (the
    remote tier holds what is below), catches up, and once it leads, serves every record from
    offset 0, the old ones from the remote tier through the remote tier's epoch history."""
    from tests.cluster.test_replication import _lead_from

    cluster, soak = multinode
    topic = replicated_topic(**{**TIERED, "retention.bytes": "-1"})
    writer = Writer(cluster, topic)
    writer.start()
    try:
        wait_until(lambda: len(writer.acknowledged) >= 200, timeout_s=60, message="writes")
        away = next(b for b in describe(cluster, topic).replicas if b != describe(cluster, topic).leader)
        soak.kill_broker(away)
        before = len(writer.acknowledged)
        wait_until(lambda: len(writer.acknowledged) >= before + 1500, timeout_s=120, message="writes while away")
    finally:
        acknowledged = writer.finish()
    handles = ray.get(cluster.controller.replica_handles.remote(topic))
    leader = describe(cluster, topic).leader
    wait_until(
        lambda: ray.get(handles[(0, leader)].state.remote())["local_log_start_offset"] > 400,
        timeout_s=60,
        message="the leader's local log past the away replica's end",
    )
    soak.start_broker(away)
    _lead_from(cluster, topic, away)
    replica = ray.get(cluster.controller.replica_handles.remote(topic))[(0, away)]
    # (its pump reads __remote_log_metadata through before the remote tier's start is known:
    # until then reads below its local log start get OFFSET_NOT_AVAILABLE)
    wait_until(
        lambda: ray.get(replica.state.remote())["remote_log_start_offset"] == 0,
        timeout_s=60,
        message="the new leader's pump to learn the remote tier's start",
    )
    state = ray.get(replica.state.remote())
    assert state["local_log_start_offset"] > 0 and state["log_start_offset"] == 0
    values = read_values(cluster, topic)
    assert values == sorted(values) and len(set(values)) == len(values), "records out of order or twice"
    assert set(acknowledged) <= set(values), "an acknowledged record was lost"
