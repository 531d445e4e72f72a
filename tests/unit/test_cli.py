"""The ``raylog`` command's storage tools and status text (no Ray)."""

from __future__ import annotations

import functools
import io
import json

import pytest

from raylog import cli
from raylog.cli import bench as bench_cli
from raylog.cli import cluster as cluster_cli
from raylog.cli import connection
from raylog.cli.acls import acls_named
from raylog.cli.arguments import UsageError
from raylog.cli.output import Progress
from raylog.common import record_batch


def test_dump_log_prints_batches_and_records(open_log, capsys):
    """dump-log lists every batch with its offsets and, with --records, the records."""
    log = open_log(segment_bytes=2_000)
    for i in range(10):
        log.append_as_leader(record_batch.build([b"value-%d" % i] * 20, keys=[b"k"] * 20), leader_epoch=3)
    log.close()
    assert cli.main(["dump-log", log.dir, "--json", "--records"]) == 0
    report = json.loads(capsys.readouterr().out)
    batches = [b for s in report["segments"] for b in s["batches"]]
    assert [b["base_offset"] for b in batches] == [i * 20 for i in range(10)]
    assert batches[3]["records"][0] == {
        "offset": 60,
        "timestamp_ms": batches[3]["max_timestamp"],
        "key": "k",
        "value": "value-3",
    }
    assert cli.main(["dump-log", log.dir]) == 0
    assert "baseOffset 180 lastOffset 199 count 20 epoch 3" in capsys.readouterr().out


def test_dump_log_reports_corruption_without_repairing(open_log, capsys):
    """A torn tail is reported with exit code 1 and left on disk untouched."""
    log = open_log()
    log.append_as_leader(record_batch.build([b"x"] * 5), 0)
    log.close()
    path = f"{log.dir}/00000000000000000000.log"
    with open(path, "ab") as f:
        f.write(b"garbage")
    size = len(open(path, "rb").read())
    assert cli.main(["dump-log", log.dir]) == 1
    assert "INVALID" in capsys.readouterr().out
    assert len(open(path, "rb").read()) == size
    assert cli.main(["dump-log", log.dir + "/nope"]) == 2


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_draws_in_place_only_on_a_terminal():
    """A progress line is redrawn with carriage returns (at most every PROGRESS_INTERVAL_S) and
    erased at the end on a terminal; on anything else nothing is written."""
    terminal = _Terminal()
    progress = Progress(terminal)
    progress.show("read 1,000 lines")
    progress.show("read 2,000 lines")  # within the interval: not drawn
    progress.clear()
    assert terminal.getvalue() == "\rread 1,000 lines" + "\r" + " " * 16 + "\r"
    piped = io.StringIO()
    progress = Progress(piped)
    progress.show("read 1,000 lines")
    progress.clear()
    assert piped.getvalue() == ""


def test_status_text_names_lost_partitions_and_refused_brokers():
    """status says which partitions lost every in-sync replica (wiped disks) and which nodes
    were refused as brokers (a disk of another cluster), and then never says "ok"."""
    report = {
        "cluster_name": "c",
        "cluster_id": "id",
        "ray_address": "a:1",
        "controller": {"name": "n", "namespace": "raylog"},
        "brokers": [{"broker_id": 0, "node_id": "n0", "data_dir": "/d", "live": True}],
        "topics": [],
        "offline_partitions": ["t-0"],
        "under_replicated_partitions": [],
        "lost_partitions": ["t-0"],
        "refused_brokers": {"n9": "InconsistentClusterIdError: /x/meta.json belongs to raylog cluster other"},
        "healthy": False,
    }
    text = cluster_cli._status_text(report)
    assert "health: REFUSED: node n9 is not a broker of this cluster: InconsistentClusterIdError: " in text
    assert "health: LOST: 1 partition(s) without any in-sync replica (t-0)" in text
    assert "health: ok" not in text


def test_bench_soak_refuses_unknown_fault_kinds_before_starting_anything(capsys):
    """A misspelt fault kind is a usage error (exit 2) naming the known kinds; no Ray is started."""
    assert cli.main(["bench", "soak", "--faults", "kill-leader,kill-everything"]) == 2
    err = capsys.readouterr().err
    assert "unknown fault kinds kill-everything" in err and "pause-controller" in err


def test_bench_soak_refuses_transaction_faults_without_the_transactional_workload(capsys):
    """Killing the transaction coordinator needs --transactions (there is none otherwise)."""
    assert cli.main(["bench", "soak", "--faults", "kill-txn-coordinator"]) == 2
    assert "kill-txn-coordinator need --transactions or --kafka-transactional" in capsys.readouterr().err


def test_a_soak_runs_replay_flags_choose_its_configuration_again():
    """The options a failed run prints for its replay build the same run configuration."""
    from raylog.chaos.soak import RunConfig

    for config in (
        RunConfig(),
        RunConfig(duration_s=3.0, max_faults=2, partitions=1),
        RunConfig(acks="1", faults=("lose-tail",), max_faults=1),
        RunConfig(acks="1", faults=("lose-tail",), max_faults=1, partitions=1, replica_lag_time_max_ms=10_000),
        RunConfig(min_insync_replicas=1, unclean=True, faults=("isolate-leader", "kill-node")),
        RunConfig(partitions=1, transactions=True),
        RunConfig(overlap=2, producers=32, kafka_producers=4),
        RunConfig(consumers=8, kafka_consumers=8, kafka_transactional=4, rate_per_s=10.0),
    ):
        args = cli._parser().parse_args(["bench", "soak", *config.flags().split()])
        assert bench_cli._soak_config(args) == config


def test_bench_txn_copier_runs_the_full_campaign_by_default_and_takes_its_sizes():
    """``raylog bench txn-copier`` with no options is Kafka's full system test (the package's
    sizes); each option sets one size of the campaign."""
    from raylog.chaos import txn_copier

    args = cli._parser().parse_args(["bench", "txn-copier"])
    assert args.run is bench_cli._bench_txn_copier
    assert bench_cli._copier_options(args) == {
        "records": txn_copier.RECORDS,
        "rounds": txn_copier.ROUNDS,
        "txn_records": txn_copier.TXN_RECORDS,
        "records_per_s": txn_copier.COPY_RECORDS_PER_S,
    }
    given = ["--records", "2000", "--rounds", "1", "--txn-records", "200", "--records-per-s", "400"]
    args = cli._parser().parse_args(["bench", "txn-copier", *given])
    assert bench_cli._copier_options(args) == {"records": 2000, "rounds": 1, "txn_records": 200, "records_per_s": 400.0}


def test_bench_txn_copier_refuses_a_size_of_zero(capsys):
    """Sizes are positive: a usage error (exit 2), before any Ray is started."""
    with pytest.raises(SystemExit) as exited:
        cli._parser().parse_args(["bench", "txn-copier", "--txn-records", "0"])
    assert exited.value.code == 2
    assert "--txn-records" in capsys.readouterr().err


def test_acls_arguments_name_the_acls_kafka_acls_would():
    """``raylog acls add`` reads kafka-acls.sh's options: one ACL per resource, principal,
    host of its permission (default every host) and operation (default All)."""
    from raylog.common.acl import ACLOperation, ACLPermissionType, PatternType, ResourceType

    argv = ["acls", "add", "--deny-principal", "User:*", "--operation", "Read", "--operation", "DescribeConfigs"]
    argv += ["--topic", "a", "--group", "g", "--allow-principal", "User:etl", "--allow-host", "10.0.0.1"]
    acls = acls_named(cli._parser().parse_args(argv))
    assert len(acls) == 2 * 2 * 2  # resources x grants x operations
    assert {(a.principal, a.host, a.permission_type) for a in acls} == {
        ("User:*", "*", ACLPermissionType.DENY),
        ("User:etl", "10.0.0.1", ACLPermissionType.ALLOW),
    }
    assert {a.operation for a in acls} == {ACLOperation.READ, ACLOperation.DESCRIBE_CONFIGS}
    assert {(a.pattern.resource_type, a.pattern.name) for a in acls} == {
        (ResourceType.TOPIC, "a"),
        (ResourceType.GROUP, "g"),
    }
    everything = acls_named(
        cli._parser().parse_args(
            ["acls", "remove", "--allow-principal", "User:x", "--cluster", "--resource-pattern-type", "prefixed"]
        )
    )
    assert [(a.operation, a.pattern.name, a.pattern.pattern_type) for a in everything] == [
        (ACLOperation.ALL, "kafka-cluster", PatternType.PREFIXED)
    ]
    with pytest.raises(SystemExit):
        cli._parser().parse_args(["acls", "add", "--operation", "Fly", "--topic", "a"])


def test_command_config_takes_kafka_tools_properties(tmp_path):
    """--command-config: librdkafka's names or a JAAS line (as Kafka's Java tools take it),
    comments and blank lines skipped; an unknown setting or a line without = is a usage error."""
    path = tmp_path / "client.properties"
    path.write_text(
        "# who runs the command\n\nsecurity.protocol=SASL_PLAINTEXT\nsasl.mechanism : SCRAM-SHA-512\n"
        'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="ops" '
        'password="p=w:d";\n'
    )
    args = cli._parser().parse_args(["status", "--command-config", str(path)])
    assert connection._credentials(args) == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "ops",
        "sasl_plain_password": "p=w:d",
    }
    assert connection._credentials(cli._parser().parse_args(["status"])) == {}
    for text, problem in (("ssl.keystore.location=x\n", "unknown setting"), ("just words\n", "not a key=value")):
        path.write_text(text)
        with pytest.raises(UsageError, match=problem):
            connection._credentials(args)
    args = cli._parser().parse_args(["status", "--command-config", str(tmp_path / "missing")])
    with pytest.raises(UsageError, match="--command-config"):
        connection._credentials(args)


def test_bench_simulate_runs_seeded_schedules_and_fails_on_a_broken_invariant(capsys, monkeypatch):
    """``raylog bench simulate`` runs the replication simulation's campaign from the installed
    package: every schedule checked, exit 1 with the failing seed when one breaks an invariant."""
    from raylog.chaos import simulation

    assert (
        cli.main(["bench", "simulate", "--schedules", "6", "--first-seed", "10", "--steps", "60", "--workers", "1"])
        == 0
    )
    out = capsys.readouterr().out
    assert out.startswith("6 schedules x 60 steps (seeds 10..15, profile default)") and ": 0 failed" in out

    def broken(cluster, step):
        assert cluster.seed != 12 or step < 30, "a planted failure"

    monkeypatch.setattr(simulation, "run", functools.partial(simulation.run, check=broken))
    assert (
        cli.main(["bench", "simulate", "--schedules", "6", "--first-seed", "10", "--steps", "60", "--workers", "1"])
        == 1
    )
    out = capsys.readouterr().out
    assert ": 1 failed" in out and "seed 12, step 30: a planted failure" in out


def test_bench_simulate_groups_runs_the_group_coordinators_schedules(capsys):
    """``--profile groups`` runs the group coordinator's simulation: its totals show members
    told generations, commits acknowledged and fail-overs."""
    argv = ["bench", "simulate", "--profile", "groups", "--schedules", "4", "--steps", "150", "--workers", "1"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("4 schedules x 150 steps (seeds 0..3, profile groups)") and ": 0 failed" in out
    totals = dict(item.rsplit(" ", 1) for item in out.split("totals: ", 1)[1].strip().split(", "))
    assert int(totals["generations told"]) > 0 and int(totals["fail-overs"]) > 0


def test_get_offsets_time_takes_kafkas_names_numbers_and_times():
    """``get-offsets --time``: each spec by name or by kafka-get-offsets.sh's number, a time in
    ms; anything else is a usage error naming what it takes."""
    import argparse

    from raylog.cli.replicas import offset_spec
    from raylog.types import OffsetSpec

    assert offset_spec("max-timestamp") == offset_spec("-3") == OffsetSpec.max_timestamp()
    assert offset_spec("earliest-local") == offset_spec("-4") == OffsetSpec(-4)
    assert offset_spec("latest") == offset_spec("-1") and offset_spec("-5") == OffsetSpec.latest_tiered()
    assert offset_spec("1700000000000") == OffsetSpec.for_timestamp(1_700_000_000_000)
    for bad in ("-6", "soon", "1.5", ""):
        with pytest.raises(argparse.ArgumentTypeError, match="max-timestamp"):
            offset_spec(bad)
