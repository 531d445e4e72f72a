"""Tiered storage end to end (KIP-405): a topic with ``remote.storage.enable`` copies its closed
segments to the session cluster's store (a local directory), keeps only
``local.retention.bytes`` on the broker's disk, and still serves every record from offset 0,
the old ones from the remote tier."""

from __future__ import annotations

import ray

from raylog import Consumer, OffsetSpec, Producer, TopicPartition
from tests.helpers import wait_until

RECORDS = 600
TIERED = {
    "remote.storage.enable": "true",
    "segment.bytes": "4096",
    "local.retention.bytes": "8192",
    "retention.ms": "-1",
}


def _leader_state(cluster, name: str) -> dict:
    handles = ray.get(cluster.controller.replica_handles.remote(name))
    return ray.get(handles[(0, 0)].state.remote())


def _records() -> list[tuple[bytes, bytes, int, list]]:
    return [
        (b"k%d" % (i % 7), b"value-%05d-" % i + b"x" * 80, 1_700_000_000_000 + i, [("n", b"%d" % i)])
        for i in range(RECORDS)
    ]


def test_a_tiered_topic_serves_every_record_from_offset_0_with_its_disk_held_to_local_retention(cluster, admin, topic):
    name = topic(1, 1, **TIERED)
    sent = _records()
    with Producer(cluster, linger_ms=0, batch_size=1024) as producer:
        for key, value, ts, headers in sent:
            producer.send(name, value, key=key, timestamp_ms=ts, headers=headers)
    # Copied segments leave the local disk down to local.retention.bytes (with the active
    # segment): the local log starts past 0, the remote tier at 0, the partition at 0.
    state = wait_until(
        lambda: (s := _leader_state(cluster, name))["size_bytes"] <= 8192 + 4096 and s,
        timeout_s=60,
    )
    assert state["local_log_start_offset"] > RECORDS // 2 and state["remote_log_start_offset"] == 0
    assert state["log_start_offset"] == 0

    tp = TopicPartition(name, 0)
    assert admin.list_offsets({tp: OffsetSpec.earliest()})[tp].offset == 0
    local = admin.list_offsets({tp: OffsetSpec.earliest_local()})[tp].offset
    tiered = admin.list_offsets({tp: OffsetSpec.latest_tiered()})[tp].offset
    assert local == state["local_log_start_offset"] and local - 1 <= tiered < RECORDS

    with Consumer(cluster, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        got = []
        wait_until(lambda: got.extend(consumer.poll(timeout_ms=500).get(tp, [])) or len(got) >= RECORDS, timeout_s=60)
    assert [r.offset for r in got] == list(range(RECORDS))
    assert [(r.key, r.value, r.timestamp, [tuple(h) for h in r.headers]) for r in got] == [
        (k, v, t, h) for k, v, t, h in sent
    ]
