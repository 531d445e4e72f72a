"""The identity of brokers' data directories on an embedded cluster: fresh disks under an old
controller journal, and a disk of another cluster."""

from __future__ import annotations

import json
import logging
import shutil
import time
import uuid

import pytest
import ray

import raylog
from raylog import Admin, NewTopic, Producer
from raylog.actors.replica_housekeeping import HOUSEKEEPING_INTERVAL_S
from raylog.cli import cluster as cluster_cli
from raylog.common.names import NAMESPACE, controller_name
from raylog.errors import InconsistentClusterIdError
from raylog.storage.log import Log


def test_topics_of_an_old_journal_on_fresh_disks_are_reported_lost_not_served_empty(run, tmp_path, caplog):
    """The controller's journal lists a topic but its brokers' data directories are new (wiped,
    or a new cluster's fresh disks under the old journal): the topic does not come back empty
    and writable; its partitions stay offline with no in-sync replica, connect() warns, and
    ``raylog status`` reports them LOST and exits 4."""
    name = f"id-{uuid.uuid4().hex[:8]}"
    data = tmp_path / "data"
    first = raylog.connect(data_dir=str(data), num_brokers=2, cluster_name=name)
    Admin(first).create_topics([NewTopic("kept", 2, replication_factor=2)])
    with Producer(first, acks="all") as producer:
        producer.send("kept", b"acknowledged", partition=0).result(timeout=30)
    first.shutdown()
    for broker in (0, 1):
        shutil.rmtree(data / f"broker-{broker}")

    with caplog.at_level(logging.WARNING, logger="raylog.clients.cluster"):
        again = raylog.connect(data_dir=str(data), num_brokers=2, cluster_name=name)
    try:
        partitions = again.metadata(refresh=True).topics["kept"].partitions
        assert [(p.leader, p.isr) for p in partitions] == [(-1, ()), (-1, ())]
        assert "2 partition(s) have no in-sync replica left (kept-0, kept-1)" in caplog.text
        code, out, _ = run("status", cluster_name=name)
        assert code == cluster_cli.EXIT_OFFLINE
        assert "health: LOST: 2 partition(s) without any in-sync replica (kept-0, kept-1)" in out
    finally:
        again.shutdown()


def test_a_broker_disk_of_another_cluster_is_refused_with_a_typed_error(cluster, tmp_path):
    """Starting a cluster whose broker data directory was formatted by another raylog cluster
    fails with INCONSISTENT_CLUSTER_ID naming both, and leaves the directory as it was."""
    name = f"id-{uuid.uuid4().hex[:8]}"
    meta = tmp_path / "data" / "broker-0" / "meta.json"
    meta.parent.mkdir(parents=True)
    written = json.dumps({"version": 2, "cluster_id": "another-cluster", "broker_id": 0, "directory_id": "d"})
    meta.write_text(written)
    try:
        with pytest.raises(InconsistentClusterIdError, match="belongs to raylog cluster another-cluster"):
            raylog.connect(data_dir=str(tmp_path / "data"), cluster_name=name)
    finally:
        ray.kill(ray.get_actor(controller_name(name), namespace=NAMESPACE), no_restart=True)
    assert meta.read_text() == written


def test_a_shut_down_cluster_leaves_its_logs_closed_and_nothing_writing_in_them(cluster, tmp_path):
    """``shutdown()`` is a controlled shutdown, as a Kafka broker's: every replica closes its
    log (flushed, so its next open recovers nothing) before its process is killed, and once
    ``shutdown()`` returns nothing writes in the data directories any more (a new cluster, an
    operator's copy or a wipe may take them at once)."""
    name = f"id-{uuid.uuid4().hex[:8]}"
    data = tmp_path / "data"
    first = raylog.connect(data_dir=str(data), num_brokers=2, cluster_name=name)
    Admin(first).create_topics([NewTopic("closed", 2, replication_factor=2)])
    with Producer(first, acks="all") as producer:
        for partition in (0, 1):
            producer.send("closed", b"acknowledged", partition=partition).result(timeout=30)
    first.shutdown()
    logs = sorted(p.parent for p in data.glob("broker-*/closed-*/*.log"))
    assert len(logs) == 4, logs  # 2 partitions x 2 replicas
    for directory in logs:
        reopened = Log.open(str(directory))
        try:
            assert reopened.log_end_offset == 1
            assert reopened.recovery.recovered_segments == 0, f"{directory} was not closed"
        finally:
            reopened.close()
    after = _files(data)
    time.sleep(2 * HOUSEKEEPING_INTERVAL_S)  # what a replica still running would write by now
    assert _files(data) == after


def _files(root) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}
