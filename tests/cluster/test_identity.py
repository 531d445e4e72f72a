"""Identities of topics and log directories on a real multi-node cluster: a log belongs to
one incarnation of a topic (KIP-516), a data directory to one broker of one cluster (KIP-858)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import ray

from raylog import Admin, Consumer, NewTopic, Producer, TopicPartition
from raylog.chaos.soak import NODE_ARGS
from raylog.chaos.txn_copier import out_of_sync
from raylog.common.record_batch import decode_table
from raylog.storage.log import Log
from tests.cluster.test_replication import SAFE, describe
from tests.helpers import wait_until


def _live(cluster) -> set[int]:
    return cluster.metadata(refresh=True).live


def _replica_states(cluster, topic: str) -> dict[tuple[int, int], dict]:
    handles = ray.get(cluster.controller.replica_handles.remote(topic), timeout=60)
    return {key: ray.get(handle.state.remote(), timeout=30) for key, handle in handles.items()}


def _all_values(cluster, topic: str, partitions: int, count: int) -> list[bytes]:
    """Every committed value of the topic's partitions, until ``count`` are read."""
    consumer = Consumer(cluster, auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    values: list[bytes] = []

    def polled_all() -> bool:
        values.extend(r.value for records in consumer.poll(timeout_ms=500).values() for r in records)
        return len(values) >= count

    wait_until(polled_all, timeout_s=60, message=f"{count} records")
    consumer.close()
    return values


def _in_sync(cluster, topic: str) -> bool:
    partitions = Admin(cluster).describe_topics([topic])[0].partitions
    return all(set(p.isr) == {0, 1, 2} and p.leader >= 0 for p in partitions)


def test_a_topic_deleted_while_a_broker_is_down_comes_back_without_its_old_records(multinode):
    """A topic deleted while one of its brokers is down, then created again with the same
    name once the broker is back, holds only its new records on every replica, and the
    broker's directories of the old topic are gone."""
    cluster, brokers = multinode
    admin = Admin(cluster)
    topic, partitions = "recreated", 3
    admin.create_topics([NewTopic(topic, partitions, replication_factor=3, config=SAFE)])
    with Producer(cluster, acks="all") as producer:
        for i in range(30):
            producer.send(topic, b"old-%d" % i, partition=i % partitions).result(timeout=30)
    old_id = admin.describe_topics([topic])[0].topic_id
    down = 2
    brokers.kill_broker(down)
    wait_until(lambda: down not in _live(cluster), timeout_s=30, message="the broker seen down")
    admin.delete_topics([topic])
    brokers.start_broker(down)
    wait_until(lambda: down in _live(cluster), timeout_s=60, message="the broker back")

    admin.create_topics([NewTopic(topic, partitions, replication_factor=3, config=SAFE)])
    try:
        new_id = admin.describe_topics([topic])[0].topic_id
        with Producer(cluster, acks="all") as producer:
            for i in range(6):
                producer.send(topic, b"new-%d" % i, partition=i % partitions).result(timeout=30)
        wait_until(lambda: _in_sync(cluster, topic), timeout_s=60, message="every replica in sync")
        values = _all_values(cluster, topic, partitions, 6)
        assert sorted(values) == sorted(b"new-%d" % i for i in range(6)), "old records in the new topic"
        ends = {key: state["log_end_offset"] for key, state in _replica_states(cluster, topic).items()}
        assert ends == {(p, b): 2 for p in range(partitions) for b in range(3)}, ends
        broker_dir = Path(brokers.data_dir(down))
        names = [n for n in os.listdir(broker_dir) if n.startswith(topic)]
        assert not [n for n in names if new_id not in n], f"old directories left: {names} (old id {old_id})"
    finally:
        admin.delete_topics([topic])


def test_a_broker_back_with_a_wiped_disk_never_leads_and_nothing_acknowledged_is_lost(multinode):
    """A broker that was the last in-sync replica comes back with a wiped data directory
    while its partition is offline: it is out of the ISR and never leads (its empty log would
    truncate the others), so the records acknowledged by all three stay on the other two."""
    cluster, brokers = multinode
    admin = Admin(cluster)
    topic = "wiped"
    admin.create_topics([NewTopic(topic, 1, replication_factor=3, config=SAFE)])
    try:
        with Producer(cluster, acks="all") as producer:
            acknowledged = [b"%d" % i for i in range(20)]
            for value in acknowledged:
                producer.send(topic, value).result(timeout=30)
        info = describe(cluster, topic)
        last, others = info.leader, [r for r in info.replicas if r != info.leader]
        for broker in others:
            brokers.kill_broker(broker)
        wait_until(lambda: describe(cluster, topic).isr == (last,), timeout_s=30, message="ISR down to the leader")
        brokers.kill_broker(last)
        wait_until(lambda: describe(cluster, topic).leader == -1, timeout_s=30, message="the partition offline")
        brokers.wipe_broker(last)
        for broker in others:
            brokers.start_broker(broker)
        brokers.start_broker(last)
        wait_until(lambda: _live(cluster) == {0, 1, 2}, timeout_s=60, message="every broker back")
        after = wait_until(lambda: _decided(cluster, topic), timeout_s=60, message="a leader, or the ISR emptied")
        assert after.leader != last, f"broker {last} leads with a wiped log: {after}"
        assert after.leader == -1 and after.isr == (), after  # lost: only an unclean election could bring it back
        for broker in others:
            assert _values_on_disk(Path(brokers.data_dir(broker)), topic) == acknowledged
    finally:
        admin.delete_topics([topic])
        # The whole disk went, and with it the broker's replicas of the internal topics,
        # whose last in-sync member it was as well: they are lost the same way. The
        # operator's way back (as `raylog status` says), so that the cluster's next tests
        # find a group coordinator: an unclean election on them.
        _recover_lost_partitions(admin, admin.list_topics(include_internal=True))


def _recover_lost_partitions(admin: Admin, topics: list[str]) -> None:
    """Bring back the partitions of ``topics`` left without an in-sync replica (their records
    are gone) by an unclean election the operator asks for (Kafka's kafka-leader-election.sh
    --election-type UNCLEAN)."""
    lost = sorted({t.name for t in admin.describe_topics(topics) for p in t.partitions if p.leader < 0 and not p.isr})
    if not lost:
        return
    assert admin.elect_leaders(lost, election_type="unclean") >= 1
    wait_until(lambda: not out_of_sync(admin, lost), timeout_s=60, message=f"{lost} back by unclean election")


def _decided(cluster, topic: str):
    """The partition once it has a leader again or has no in-sync replica left, else None."""
    p = describe(cluster, topic)
    return p if p.leader >= 0 or not p.isr else None


def _values_on_disk(broker_dir, topic: str) -> list[bytes]:
    """The values in a broker's log of partition 0 of ``topic`` (a copy is opened: the
    replica actor still has the log open)."""
    (name,) = [n for n in os.listdir(broker_dir) if n.startswith(f"{topic}-0")]
    copy = broker_dir.parent / f"copy-of-{broker_dir.name}-{name}"
    shutil.copytree(broker_dir / name, copy)
    try:
        log = Log.open(str(copy))
        table = decode_table(log.read(0, 1 << 30))
        log.close()
        return table.column("value").to_pylist()
    finally:
        shutil.rmtree(copy)


def test_a_node_whose_disk_belongs_to_another_cluster_is_refused_and_the_others_go_on(
    multinode, replicated_topic, tmp_path
):
    """A labelled node whose data directory another raylog cluster formatted is refused
    (INCONSISTENT_CLUSTER_ID, in the metadata that ``raylog status`` shows) while the other
    brokers serve on; its directory is left as it was."""
    cluster, brokers = multinode
    meta = tmp_path / "foreign" / "meta.json"
    meta.parent.mkdir()
    written = json.dumps({"version": 2, "cluster_id": "another-cluster", "broker_id": 3, "directory_id": "d"})
    meta.write_text(written)
    node = brokers.ray_cluster.add_node(
        num_cpus=1,
        **NODE_ARGS,
        labels={"raylog.broker": "3", "raylog.data_dir": str(meta.parent)},
    )
    try:
        refused = wait_until(lambda: cluster.metadata(refresh=True).refused_brokers, timeout_s=60, message="refusal")
        (why,) = refused.values()
        assert why.startswith("InconsistentClusterIdError: ") and "another-cluster" in why
        assert _live(cluster) == {0, 1, 2}
        topic = replicated_topic(**SAFE)
        with Producer(cluster, acks="all") as producer:
            producer.send(topic, b"ok").result(timeout=30)
    finally:
        brokers.ray_cluster.remove_node(node)
    assert meta.read_text() == written
