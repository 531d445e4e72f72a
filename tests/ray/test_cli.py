"""The ``raylog`` command against the session's raylog cluster, called in-process.

``start``/``stop`` never run a real ``ray start``/``ray stop`` here (that would disturb the
shared Ray session): the ``ray`` executable is replaced by a fake, and ``start`` is
exercised on the Ray this process is already in.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import types
import uuid

import pytest
import ray

import raylog
from raylog import Producer
from raylog.cli import cluster as cluster_cli
from raylog.cli import connection
from raylog.common.names import NAMESPACE, controller_name


@pytest.fixture
def no_local_head(monkeypatch, tmp_path):
    """No RAY_ADDRESS and no recorded local head; ``ray`` commands go to a fake that records them."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAYLOG_CLI_STATE", str(tmp_path / "head.json"))
    calls = []

    def fake_run(cmd, **kwargs):
        calls.append(cmd)
        return types.SimpleNamespace(returncode=0, stdout="", stderr="")

    monkeypatch.setattr(cluster_cli, "subprocess", types.SimpleNamespace(run=fake_run))
    return calls


def _fresh_name() -> str:
    return f"cli-{uuid.uuid4().hex[:8]}"


def _controller_exists(cluster_name: str) -> bool:
    try:
        ray.get_actor(controller_name(cluster_name), namespace=NAMESPACE)
        return True
    except ValueError:
        return False


def test_topics_create_list_describe_delete_round_trip(run, admin):
    """topics create/list/describe/delete work end to end and show partitions, leaders and config."""
    name = _fresh_name()
    try:
        code, out, _ = run("topics", "create", name, "--partitions", "3", "--config", "retention.ms=60000")
        assert code == 0 and name in out and "every partition has a leader (3 in" in out
        code, out, _ = run("topics", "list")
        assert code == 0 and name in out.splitlines()
        code, out, _ = run("topics", "describe", name)
        lines = out.splitlines()
        assert code == 0
        assert f"Topic: {name}\t" in lines[0] and "PartitionCount: 3" in lines[0]
        assert "ReplicationFactor: 1" in lines[0] and "retention.ms=60000" in lines[0]
        assert [line.split("\t")[2] for line in lines[1:]] == ["Partition: 0", "Partition: 1", "Partition: 2"]
        assert all("Leader: 0" in line and "Replicas: 0" in line and "Isr: 0" in line for line in lines[1:])
        code, out, _ = run("topics", "describe", name, "--json")
        (described,) = json.loads(out)
        assert [p["leader"] for p in described["partitions"]] == [0, 0, 0]
        assert described["config"]["retention.ms"] == "60000"
        code, out, _ = run("topics", "delete", name)
        assert code == 0
        assert name not in run("topics", "list")[1].splitlines()
    finally:
        if name in admin.list_topics():
            admin.delete_topics([name])


def test_produce_from_stdin_then_consume_from_beginning(run, topic):
    """Lines produced from stdin (key before the separator) come back with the same keys and values."""
    name = topic(3)
    lines = [f"user-{i % 4}:click {i}" for i in range(20)]
    code, _, err = run("produce", name, "--key-separator", ":", "--compression", "lz4", stdin="\n".join(lines) + "\n")
    assert code == 0
    assert "produced 20 records" in err
    code, out, err = run(
        "consume", name, "--from-beginning", "--max-messages", "20", "--print-key", "--key-separator", ":"
    )
    assert code == 0
    assert sorted(out.splitlines()) == sorted(lines)
    for key in {line.split(":")[0] for line in lines}:  # per key (one partition), order is kept
        assert [x for x in out.splitlines() if x.startswith(key + ":")] == [x for x in lines if x.startswith(key + ":")]
    assert "consumed 20 records" in err


def test_consume_from_an_offset_of_one_partition_with_offsets(run, topic):
    """--partition P --offset N starts there, --print-offsets prefixes partition:offset, --max-messages stops."""
    name = topic(2)
    assert run("produce", name, "--partition", "1", stdin="a\nb\nc\nd\ne\n")[0] == 0
    code, out, _ = run("consume", name, "--partition", "1", "--offset", "2", "--print-offsets", "--max-messages", "2")
    assert code == 0
    assert out.splitlines() == ["1:2\tc", "1:3\td"]


def test_consume_stops_after_timeout_without_records(run, topic):
    """With no records, consume returns after --timeout-ms and prints nothing."""
    code, out, err = run("consume", topic(1), "--from-beginning", "--timeout-ms", "300")
    assert (code, out) == (0, "")
    assert "consumed 0 records" in err


@pytest.mark.parametrize(
    ("argv", "stdin", "error"),
    [
        (["topics", "describe", "no-such-topic"], None, "UnknownTopicOrPartitionError"),
        (["topics", "delete", "no-such-topic"], None, "UnknownTopicOrPartitionError"),
        (["topics", "create", "bad name!"], None, "InvalidTopicError"),
        (["topics", "create", "PARTITIONS", "--partitions", "0"], None, "InvalidPartitionsError"),
        (["topics", "create", "PARTITIONS", "--replication-factor", "5"], None, "InvalidReplicationFactorError"),
        (["produce", "no-such-topic"], "x\n", "UnknownTopicOrPartitionError"),
        (["produce", "TOPIC", "--key-separator", ":"], "k:v\nno separator\n", "InvalidRecordError"),
        (["consume", "no-such-topic", "--timeout-ms", "0"], None, "UnknownTopicOrPartitionError"),
        (["consume", "TOPIC", "--partition", "7", "--timeout-ms", "0"], None, "UnknownTopicOrPartitionError"),
    ],
)
def test_bad_inputs_give_exit_code_1_and_one_typed_error_line(run, topic, admin, argv, stdin, error):
    """A refused request exits 1 with exactly one stderr line, ``raylog: <ErrorName>: <message>``."""
    fresh = _fresh_name()
    argv = [fresh if a == "PARTITIONS" else topic(1) if a == "TOPIC" else a for a in argv]
    code, _, err = run(*argv, stdin=stdin)
    assert code == 1
    assert len(err.strip().splitlines()) == 1
    assert err.startswith(f"raylog: {error}: ")
    assert fresh not in admin.list_topics()


@pytest.mark.parametrize(
    "argv",
    [
        ["consume", "t", "--offset", "3"],
        ["consume", "t", "--from-beginning", "--offset", "1", "--partition", "0"],
        ["consume", "t", "--max-messages", "0"],
        ["topics", "create", "t", "--config", "no-value"],
        ["topics"],
        ["produce"],
        ["produce", "t", "--acks", "2"],
        ["start", "--num-brokers", "0"],
        ["stop", "--no-such-flag"],
    ],
)
def test_usage_errors_exit_2(run, argv):
    """Arguments that do not parse or do not go together exit 2 before touching the cluster."""
    code, _, err = run(*argv)
    assert code == 2
    assert "error:" in err


def test_status_shows_brokers_controller_and_topics(run, topic, cluster):
    """status lists the broker with its node, data dir and liveness, the controller, and each
    topic's partition health; a healthy cluster exits 0."""
    name = topic(2)
    code, out, _ = run("status", "--json")
    assert code == 0
    report = json.loads(out)
    broker = cluster.metadata(refresh=True).brokers[0]
    listed = report["brokers"][0]
    assert listed == {"broker_id": 0, "node_id": broker.node_id, "data_dir": broker.data_dir, "live": True}
    assert report["controller"] == {"name": controller_name(cluster.cluster_name), "namespace": NAMESPACE}
    (health,) = [t for t in report["topics"] if t["name"] == name]
    assert health == {"name": name, "partition_count": 2, "online": 2, "offline": 0, "under_replicated": 0}
    assert (report["offline_partitions"], report["under_replicated_partitions"], report["healthy"]) == ([], [], True)
    code, out, _ = run("status")
    assert code == 0
    rows = [line.split() for line in out.splitlines()]
    assert ["0", broker.node_id, broker.data_dir, "yes"] in rows and [name, "2", "2", "0", "0"] in rows
    assert "health: ok: every partition is online and fully in sync" in out


def test_commands_on_an_unknown_cluster_name_fail_without_creating_it(run):
    """Only start creates a raylog cluster: status on an unknown name is an error, and nothing is started."""
    name = _fresh_name()
    code, _, err = run("status", cluster_name=name)
    assert code == 1
    assert err.startswith("raylog: ClusterNotRunningError: ") and "raylog start" in err
    assert not _controller_exists(name)


def test_start_then_stop_a_second_cluster_in_this_ray(run, no_local_head, tmp_path, cluster):
    """start creates a raylog cluster on the Ray this process is in (no ray start); stop removes its
    actors but leaves Ray and the other raylog cluster running."""
    name = _fresh_name()
    code, out, _ = run("start", "--data-dir", str(tmp_path / "data"), "--num-brokers", "2", cluster_name=name)
    assert code == 0
    assert f"broker 1  node {ray.get_runtime_context().get_node_id()}  data {tmp_path}/data/broker-1" in out
    assert f"raylog stop --cluster-name {name}" in out and "--ray" not in out
    assert no_local_head == []  # no `ray start`: this process already is in a Ray session
    assert _controller_exists(name)
    assert run("topics", "create", "t", "--partitions", "2", cluster_name=name)[0] == 0
    code, out, _ = run("stop", cluster_name=name)
    assert code == 0 and "stopped raylog cluster" in out
    assert not _controller_exists(name)
    assert ray.is_initialized()
    assert cluster.metadata(refresh=True).brokers  # the session's cluster still answers
    assert os.path.isdir(tmp_path / "data" / "broker-0")  # data stays on disk
    again = raylog.connect(data_dir=str(tmp_path / "data"), num_brokers=2, cluster_name=name)
    assert again.metadata(refresh=True).num_partitions("t") == 2  # and comes back
    again.shutdown()


def test_stop_ray_only_stops_a_head_that_raylog_start_launched(run, no_local_head, tmp_path):
    """stop --ray runs `ray stop` only when `raylog start` recorded a local head, then forgets it."""
    name = _fresh_name()
    code, _, err = run("stop", "--ray", cluster_name=name)
    assert code == 1 and err.splitlines()[-1].startswith("raylog: ClusterNotRunningError: no local Ray head")
    assert no_local_head == []
    (tmp_path / "head.json").write_text(json.dumps({"address": "10.0.0.1:6379"}))
    code, out, _ = run("stop", "--ray", cluster_name=name)
    assert code == 0 and "stopped the local Ray head at 10.0.0.1:6379" in out
    assert no_local_head == [[os.path.join(os.path.dirname(sys.executable), "ray"), "stop"]]
    assert not (tmp_path / "head.json").exists()


def test_launch_head_runs_ray_start_and_records_the_address(no_local_head):
    """start without an address launches `ray start --head` with the venv's ray and laptop-sized
    resources, and records the head for later commands."""
    args = argparse.Namespace(ray_port=6390, num_cpus=2, object_store_memory=256 << 20)
    head = cluster_cli._launch_head(args)
    (command,) = no_local_head
    assert command[:3] == [os.path.join(os.path.dirname(sys.executable), "ray"), "start", "--head"]
    assert {"--port=6390", "--num-cpus=2", f"--object-store-memory={256 << 20}"} <= set(command)
    assert head["address"].endswith(":6390")
    assert connection.read_head() == head


def test_default_address_resolution(no_local_head, monkeypatch, tmp_path):
    """--address wins, then RAY_ADDRESS, then a live head of `raylog start` (both "auto"); with none,
    or a recorded head that is gone, the error says to run start."""
    no_address = argparse.Namespace(address=None)
    with pytest.raises(connection.ClusterNotRunningError, match="run `raylog start` first"):
        connection._address(no_address)
    assert connection._address(argparse.Namespace(address="10.0.0.1:6379")) == "10.0.0.1:6379"
    with socket.create_server(("127.0.0.1", 0)) as server:  # stands in for a live head's GCS
        (tmp_path / "head.json").write_text(json.dumps({"address": f"127.0.0.1:{server.getsockname()[1]}"}))
        assert connection._address(no_address) == "auto"
    with pytest.raises(connection.ClusterNotRunningError, match="is gone: run `raylog start` again"):
        connection._address(no_address)
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.2:6379")
    assert connection._address(no_address) == "auto"


def test_start_needs_a_head_only_without_any_ray(no_local_head, monkeypatch, tmp_path):
    """A local head is launched only with no address, no RAY_ADDRESS, no Ray in-process and no live
    head (a recorded head that is gone is launched again)."""
    no_address = argparse.Namespace(address=None)
    assert not cluster_cli._needs_head(no_address)  # this process is in a Ray session
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    assert cluster_cli._needs_head(no_address)
    (tmp_path / "head.json").write_text(json.dumps({"address": "127.0.0.1:1"}))
    assert cluster_cli._needs_head(no_address)
    with socket.create_server(("127.0.0.1", 0)) as server:
        (tmp_path / "head.json").write_text(json.dumps({"address": f"127.0.0.1:{server.getsockname()[1]}"}))
        assert not cluster_cli._needs_head(no_address)
    assert not cluster_cli._needs_head(argparse.Namespace(address="auto"))
    monkeypatch.setenv("RAY_ADDRESS", "auto")
    assert not cluster_cli._needs_head(no_address)


def test_unreachable_address_fails_fast_with_a_typed_error():
    """Joining a host:port where nothing listens is an error at once, not a long Ray connect retry."""
    assert not connection.reachable("127.0.0.1:1")
    assert connection.reachable("auto") and connection.reachable("ray://head:10001")
    with pytest.raises(connection.ClusterNotRunningError, match="no Ray cluster answers at 127.0.0.1:1"):
        connection._join_ray("127.0.0.1:1")


def test_reassign_and_elect_leaders_commands(run, topic):
    """reassign-partitions refuses unknown brokers with a typed error, lists what is under
    way, and elect-leaders (preferred or unclean) reports how many partitions moved."""
    name = topic(num_partitions=2)
    code, _, err = run("reassign-partitions", "start", name, "--partitions", "0", "--replicas", "7")
    assert code == 1 and err.startswith("raylog: InvalidReplicaAssignmentError:") and len(err.splitlines()) == 1
    code, out, _ = run("reassign-partitions", "start", name, "--partitions", "0,1", "--replicas", "0")
    assert code == 0 and "reassigning" in out
    code, out, _ = run("reassign-partitions", "list", "--json")
    assert code == 0 and all(r["target"] == [0] for r in json.loads(out))
    code, out, _ = run("elect-leaders", name)
    assert code == 0 and "0 partitions changed leader" in out
    code, out, _ = run("elect-leaders", "--election-type", "unclean", name)  # every partition led: none needed
    assert code == 0 and out.startswith("unclean leader election: 0 partitions changed leader")
    code, _, _ = run("elect-leaders", "--election-type", "dirty", name)
    assert code == 2
    code, _, err = run("reassign-partitions", "start", name, "--partitions", "x", "--replicas", "0")
    assert code == 2


def test_delete_records_and_get_offsets_commands(run, topic, cluster):
    """delete-records moves the partitions' log start and prints each low watermark; an
    offset past the high watermark is refused with its typed error. get-offsets then prints
    each partition's new log start, or its end, as kafka-get-offsets.sh does."""
    name = topic(num_partitions=2)
    with Producer(cluster, acks="all") as producer:
        for i in range(6):
            producer.send(name, b"%d" % i, partition=i % 2)
    code, out, _ = run("delete-records", name, "--partitions", "0,1", "--offset", "2")
    assert code == 0 and out.splitlines() == [f"{name}-0\tlow watermark 2", f"{name}-1\tlow watermark 2"]
    code, out, _ = run("delete-records", name, "--partitions", "0", "--offset", "-1")
    assert code == 0 and out.strip() == f"{name}-0\tlow watermark 3"
    code, _, err = run("delete-records", name, "--partitions", "1", "--offset", "9")
    assert code == 1 and err.startswith("raylog: OffsetOutOfRangeError:")
    code, out, _ = run("get-offsets", name, "--time", "earliest")
    assert code == 0 and out.splitlines() == [f"{name}:0:3", f"{name}:1:2"]
    code, out, _ = run("get-offsets", name, "--partitions", "1")  # latest by default
    assert code == 0 and out.splitlines() == [f"{name}:1:3"]
    code, _, err = run("get-offsets", "no-such-topic")
    assert code == 1 and err.startswith("raylog: UnknownTopicOrPartitionError:")
