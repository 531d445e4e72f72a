"""``raylog topics`` alter / describe-configs / add-partitions / describe filters, ``raylog
brokers`` alter-configs / describe-configs, ``status`` health and exit codes, and the console
producer's and consumer's formats, called in-process (the ``run`` fixture) against the
session's raylog cluster.

A single embedded broker is never degraded, so the unhealthy cases run on a stand-in
cluster handle whose metadata has an under-replicated and an offline partition.
"""

from __future__ import annotations

import contextlib
import json
import types

import pytest
import ray

from raylog.cli import cluster as cluster_cli
from raylog.cli import topics as topics_cli
from raylog.clients.cluster import Metadata
from raylog.clients.security import ClientSession
from raylog.config import TopicConfig
from raylog.types import BrokerInfo, ConfigEntry, PartitionInfo, TopicDescription

DEFAULTS = TopicConfig().to_properties()


def _rows(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines()]


def test_alter_then_describe_configs(run, topic):
    """alter sets and deletes overrides; describe-configs shows overrides (with --all every
    property) and their sources, as text and as JSON; describe's Configs are the overrides."""
    name = topic(1, **{"retention.ms": "60000"})
    code, out, _ = run("topics", "alter", name, "--config", "flush.ms=500", "segment.ms=600000")
    assert code == 0 and f"altered topic {name!r}: set flush.ms=500, segment.ms=600000" in out
    code, out, _ = run("topics", "alter", name, "--delete-config", "retention.ms", "segment.ms")
    assert code == 0 and "deleted retention.ms, segment.ms (back to the default)" in out
    code, out, _ = run("topics", "describe-configs", name)
    assert code == 0
    assert _rows(out) == [
        ["Configs", "for", "topic", f"{name}:"],
        ["NAME", "VALUE", "SOURCE"],
        ["flush.ms", "500", "topic"],
    ]
    code, out, _ = run("topics", "describe-configs", name, "--all", "--json")
    described = json.loads(out)[name]
    assert described["flush.ms"] == {"value": "500", "source": "topic"}
    assert described["retention.ms"] == {"value": DEFAULTS["retention.ms"], "source": "default"}
    assert set(described) == set(DEFAULTS)
    code, out, _ = run("topics", "describe", name)
    assert out.splitlines()[0].endswith("\tConfigs: flush.ms=500")
    (topic_json,) = json.loads(run("topics", "describe", name, "--json")[1])
    assert topic_json["config_overrides"] == {"flush.ms": "500"} and topic_json["config"]["flush.ms"] == "500"


def test_describe_configs_of_a_topic_without_overrides(run, topic):
    """With no overrides, describe-configs says so and points at --all."""
    name = topic(1)
    code, out, _ = run("topics", "describe-configs", name)
    assert code == 0 and "no overrides: every property has its default (--all lists them)" in out
    assert json.loads(run("topics", "describe-configs", name, "--json")[1]) == {name: {}}


def test_brokers_alter_then_describe_configs(run, topic, cluster):
    """brokers alter-configs sets and deletes dynamic broker configs as kafka-configs.sh
    --entity-type brokers does (comma-separated, a bracketed list value); describe-configs
    shows what is set on the resource itself (--all: every config with its source, as text
    and JSON keyed by broker id, "" for the cluster default), a topic without its own
    retention.ms takes the cluster default's; everything set is deleted again."""
    name = topic(1)
    broker = str(min(cluster.metadata(refresh=True).brokers))
    retention = str(14 * 24 * 3_600_000)
    try:
        code, out, _ = run(
            "brokers", "alter-configs", "--cluster-default", "--add-config", f"log.retention.ms={retention}"
        )
        assert code == 0 and f"altered the cluster default (every broker): set log.retention.ms={retention}" in out
        argv = ["--add-config", "log.cleanup.policy=[delete,compact],background.threads=9"]
        code, out, _ = run("brokers", "alter-configs", "--broker", broker, *argv)
        assert (
            code == 0 and f"altered broker {broker}: set log.cleanup.policy=delete,compact, background.threads=9" in out
        )
        code, out, _ = run("brokers", "describe-configs", "--broker", broker)
        assert code == 0
        assert _rows(out) == [
            ["Configs", "for", "broker", f"{broker}:"],
            ["NAME", "VALUE", "SOURCE"],
            ["background.threads", "9", "dynamic_broker"],
            ["log.cleanup.policy", "delete,compact", "dynamic_broker"],
        ]
        described = json.loads(run("brokers", "describe-configs", "--json")[1])
        assert list(described) == ["", broker]
        assert described[""] == {"log.retention.ms": {"value": retention, "source": "dynamic_default_broker"}}
        every = json.loads(run("brokers", "describe-configs", "--broker", broker, "--all", "--json")[1])[broker]
        assert every["log.retention.ms"] == {"value": retention, "source": "dynamic_default_broker"}
        assert every["num.partitions"]["source"] == "static_broker"
        assert every["log.segment.bytes"] == {"value": DEFAULTS["segment.bytes"], "source": "default"}
        topic_configs = json.loads(run("topics", "describe-configs", name, "--all", "--json")[1])[name]
        assert topic_configs["retention.ms"] == {"value": retention, "source": "dynamic_default_broker"}
    finally:
        deleted = [
            run(
                "brokers",
                "alter-configs",
                "--broker",
                broker,
                "--delete-config",
                "log.cleanup.policy,background.threads",
            ),
            run("brokers", "alter-configs", "--cluster-default", "--delete-config", "log.retention.ms"),
        ]
    assert [code for code, _, _ in deleted] == [0, 0]
    assert "deleted log.cleanup.policy, background.threads (back to the cluster default" in deleted[0][1]
    assert "deleted log.retention.ms (back to the static or built-in value)" in deleted[1][1]
    code, out, _ = run("brokers", "describe-configs", "--cluster-default")
    assert code == 0 and out.splitlines() == [
        "Configs for the cluster default (every broker):",
        "  no dynamic configs: every config has its static or default value (--all lists them)",
    ]
    assert json.loads(run("brokers", "describe-configs", "--broker", broker, "--json")[1]) == {broker: {}}


def test_a_refused_broker_alter_exits_1_and_changes_nothing(run, cluster):
    """A static setting, a bad topic default's value and an unknown broker exit 1 with one
    error line naming why; no broker config is set."""
    broker = str(min(cluster.metadata(refresh=True).brokers))
    before = run("brokers", "describe-configs", "--all", "--json")[1]
    for argv, error, says in (
        (["--broker", broker, "--add-config", "num.partitions=3"], "InvalidRequestError", "dynamically"),
        (["--cluster-default", "--add-config", "log.retention.ms=soon"], "InvalidConfigError", "log.retention.ms"),
        (["--broker", "999", "--add-config", "log.retention.ms=1000"], "InvalidRequestError", "no broker 999"),
    ):
        code, _, err = run("brokers", "alter-configs", *argv)
        assert code == 1 and err.startswith(f"raylog: {error}: ") and len(err.splitlines()) == 1, err
        assert says in err
    assert run("brokers", "describe-configs", "--all", "--json")[1] == before


#: ``topics alter`` arguments refused, and what the error line says.
REFUSED_ALTERS = [
    (["--config", "min.insync.replicas=0"], "min.insync.replicas must be >= 1"),
    (["--config", "retention.ms=soon"], "retention.ms must be an integer"),
    (["--config", "retention.hours=1"], "known: "),
    (["--delete-config", "no.such"], "unknown config 'no.such'"),
]


def test_a_refused_alter_exits_1_and_changes_nothing(run, topic):
    """A bad value or unknown property (beside a good one) exits 1 with one InvalidConfigError
    line naming it; the config is unchanged."""
    name = topic(1, **{"retention.ms": "60000"})
    before = run("topics", "describe-configs", name, "--all", "--json")[1]
    for argv, says in REFUSED_ALTERS:
        code, _, err = run("topics", "alter", name, "--config", "flush.ms=5", *argv)
        assert code == 1 and err.startswith("raylog: InvalidConfigError: ") and len(err.splitlines()) == 1
        assert says in err
    assert run("topics", "describe-configs", name, "--all", "--json")[1] == before


def test_errors_say_what_to_do(run):
    """An unknown topic's error line ends with where to look."""
    for argv in (
        ["topics", "alter", "no-such-topic", "--config", "flush.ms=5"],
        ["topics", "describe-configs", "no-such-topic"],
    ):
        code, _, err = run(*argv)
        assert code == 1 and err.startswith("raylog: UnknownTopicOrPartitionError: ")
        assert err.rstrip().endswith("(see `raylog topics list` and `raylog topics describe`)")


@pytest.mark.parametrize(
    "argv",
    [
        ["topics", "alter", "t"],
        ["topics", "alter", "t", "--config", "flush.ms=5", "--delete-config", "flush.ms"],
        ["topics", "add-partitions", "t"],
        ["topics", "add-partitions", "t", "--partitions", "0"],
        ["topics", "describe-configs"],
        ["brokers", "alter-configs", "--add-config", "log.retention.ms=1"],
        ["brokers", "alter-configs", "--broker", "0"],
        ["brokers", "alter-configs", "--broker", "0", "--cluster-default", "--add-config", "a=1"],
        ["brokers", "alter-configs", "--broker", "0", "--add-config", "a=1", "--delete-config", "b,a"],
        ["brokers", "alter-configs", "--broker", "0", "--add-config", "a"],
        ["brokers", "describe-configs", "--broker", "-1"],
        ["produce", "t", "--format", "json", "--key-separator", ":"],
        ["produce", "t", "--format", "xml"],
        ["consume", "t", "--format", "json", "--print-key"],
    ],
)
def test_usage_errors_exit_2(run, argv):
    """Options that do not parse or do not go together exit 2 before touching the cluster."""
    code, _, err = run(*argv)
    assert code == 2 and "error:" in err


def test_add_partitions_then_produce_into_them(run, topic):
    """add-partitions grows the topic (with a note on keys), the new partitions take records,
    and asking for fewer partitions exits 1 with InvalidPartitionsError and a hint."""
    name = topic(1)
    code, out, err = run("topics", "add-partitions", name, "--partitions", "3")
    assert code == 0 and f"topic {name!r} now has 3 partitions" in out and "keys now hash over 3" in err
    lines = run("topics", "describe", name)[1].splitlines()
    assert "PartitionCount: 3" in lines[0] and [line.split("\t")[2] for line in lines[1:]] == [
        "Partition: 0",
        "Partition: 1",
        "Partition: 2",
    ]
    assert run("produce", name, "--partition", "2", stdin="a\nb\n")[0] == 0
    code, out, _ = run("consume", name, "--partition", "2", "--offset", "0", "--max-messages", "2", "--print-offsets")
    assert code == 0 and out.splitlines() == ["2:0\ta", "2:1\tb"]
    code, _, err = run("topics", "add-partitions", name, "--partitions", "2")
    assert code == 1 and err.startswith("raylog: InvalidPartitionsError: ") and "can only grow" in err
    assert "(see `raylog topics describe TOPIC` for the partition count)" in err


def test_listings_have_json(run, topic):
    """topics list --json is a JSON list of names."""
    name = topic(1)
    code, out, _ = run("topics", "list", "--json")
    assert code == 0 and name in json.loads(out)


def test_describe_filters_print_nothing_on_a_healthy_topic(run, topic):
    """On a healthy topic the under-replicated and unavailable filters match no partition."""
    name = topic(2)
    for flag in ("--under-replicated-partitions", "--unavailable-partitions"):
        assert run("topics", "describe", name, flag) == (0, "", "")
        assert json.loads(run("topics", "describe", name, flag, "--json")[1]) == []


@pytest.fixture
def degraded(monkeypatch, cluster):
    """Commands see a cluster whose broker 1 is down: topic "t" has a healthy, an
    under-replicated and an offline partition (``offline=False``: the last one is healthy)."""

    def install(offline: bool = True):
        partitions = (
            PartitionInfo("t", 0, 0, 3, (0,), (0,)),
            PartitionInfo("t", 1, 0, 3, (0, 1), (0,)),
            PartitionInfo("t", 2, -1 if offline else 0, 4, (1,) if offline else (0,), (1,) if offline else (0,)),
        )
        answer = {
            "cluster_id": "c",
            "brokers": {0: BrokerInfo(0, "node-a", "/data/a"), 1: BrokerInfo(1, "node-b", "/data/b")},
            "live": {0},
            "topics": {"t": TopicDescription("t", "id", partitions, dict(DEFAULTS))},
            "leaders": {},
            "reassignments": {},
        }
        configs = {"t": (0, "", {k: ConfigEntry(v, "default") for k, v in DEFAULTS.items()})}
        controller = types.SimpleNamespace(
            describe_configs=types.SimpleNamespace(remote=lambda names, session=None: ray.put(configs))
        )
        stand_in = types.SimpleNamespace(metadata=lambda refresh=False: Metadata(answer), controller=controller)
        stand_in.session = lambda: ClientSession(stand_in, "PLAINTEXT")  # an anonymous client
        for commands in (cluster_cli, topics_cli):  # status, topics describe
            monkeypatch.setattr(commands, "connected", lambda args, create=False: contextlib.nullcontext(stand_in))

    return install


def test_status_exit_codes_tell_offline_from_under_replicated(run, degraded):
    """status exits 4 with an offline partition, 3 with under-replicated ones only, and lists
    them, the dead broker and per-topic counts."""
    degraded(offline=True)
    code, out, _ = run("status", "--json")
    report = json.loads(out)
    assert code == cluster_cli.EXIT_OFFLINE == 4
    assert [b["live"] for b in report["brokers"]] == [True, False]
    assert report["topics"] == [{"name": "t", "partition_count": 3, "online": 2, "offline": 1, "under_replicated": 1}]
    assert (report["offline_partitions"], report["under_replicated_partitions"], report["healthy"]) == (
        ["t-2"],
        ["t-1"],
        False,
    )
    code, out, _ = run("status")
    assert code == 4 and ["1", "node-b", "/data/b", "NO"] in _rows(out) and ["t", "3", "2", "1", "1"] in _rows(out)
    assert "health: OFFLINE: 1 partition(s) without a live leader (t-2)" in out
    assert "health: DEGRADED: 1 partition(s) under-replicated (t-1)" in out
    degraded(offline=False)
    code, out, _ = run("status")
    assert code == cluster_cli.EXIT_UNDER_REPLICATED == 3 and "health: OFFLINE" not in out and "health: DEGRADED" in out


def test_describe_filters_keep_only_the_partitions_they_name(run, degraded):
    """--under-replicated-partitions and --unavailable-partitions print only those partitions
    (no topic line, as kafka-topics), together the union."""
    degraded(offline=True)

    def partitions(*flags: str) -> list[str]:
        code, out, _ = run("topics", "describe", *flags)
        assert code == 0 and "PartitionCount" not in out
        return [line.split("\t")[2] for line in out.splitlines()]

    assert partitions("--under-replicated-partitions") == ["Partition: 1"]
    assert partitions("--unavailable-partitions") == ["Partition: 2"]
    assert partitions("--under-replicated-partitions", "--unavailable-partitions") == ["Partition: 1", "Partition: 2"]
    (t,) = json.loads(run("topics", "describe", "--unavailable-partitions", "--json")[1])
    assert [p["partition"] for p in t["partitions"]] == [2]


def test_json_lines_in_and_out(run, topic):
    """produce --format json sends key, value, headers and timestamp (a non-string value as
    its JSON text, blank lines skipped); consume --format json prints them back, and its
    output produced into another topic gives the same records."""
    source, copy = topic(1), topic(1)
    lines = [
        {"key": "k1", "value": "v1", "headers": {"h": "x", "n": None}},
        {"value": {"page": "/home", "n": 1}},
        {"key": None, "value": "plain", "timestamp_ms": 1_700_000_000_000, "headers": [["a", "1"], ["a", "2"]]},
    ]
    stdin = "\n".join(json.dumps(line) for line in lines) + "\n\n"
    code, _, err = run("produce", source, "--format", "json", stdin=stdin)
    assert code == 0 and "produced 3 records" in err
    code, out, _ = run("consume", source, "--from-beginning", "--max-messages", "3", "--format", "json")
    records = [json.loads(line) for line in out.splitlines()]
    assert [(r["key"], r["value"], r["headers"]) for r in records] == [
        ("k1", "v1", [["h", "x"], ["n", None]]),
        (None, '{"page":"/home","n":1}', []),
        (None, "plain", [["a", "1"], ["a", "2"]]),
    ]
    assert [(r["topic"], r["partition"], r["offset"]) for r in records] == [
        (source, 0, 0),
        (source, 0, 1),
        (source, 0, 2),
    ]
    assert records[2]["timestamp_ms"] == 1_700_000_000_000
    assert run("produce", copy, "--format", "json", stdin=out)[0] == 0
    code, copied, _ = run("consume", copy, "--from-beginning", "--max-messages", "3", "--format", "json")
    strip = [{k: v for k, v in json.loads(line).items() if k != "topic"} for line in copied.splitlines()]
    assert strip == [{k: v for k, v in r.items() if k != "topic"} for r in records]


#: JSON lines ``produce --format json`` refuses, and what the error line says.
BAD_JSON_LINES = [
    ("not json", "line 1 is not JSON"),
    ('["a"]', "expected a JSON object"),
    ('{"value": "v", "colour": "red"}', "unknown fields ['colour']"),
    ('{"value": "v", "headers": "h"}', '"headers" must be'),
    ('{"value": "v", "timestamp_ms": "now"}', '"timestamp_ms" must be an integer'),
]


def test_bad_json_lines_exit_1(run, topic):
    """A JSON line that is not an object of the known fields is InvalidRecordError, exit 1."""
    name = topic(1)
    for line, says in BAD_JSON_LINES:
        code, _, err = run("produce", name, "--format", "json", stdin=line + "\n")
        assert code == 1 and err.splitlines()[-1].startswith("raylog: InvalidRecordError: ") and says in err


def test_consume_prints_timestamps_offsets_and_keys(run, topic):
    """--print-timestamp puts the record's timestamp first, then partition:offset, key, value."""
    name = topic(1)
    line = json.dumps({"key": "k", "value": "v", "timestamp_ms": 1_234_567})
    assert run("produce", name, "--format", "json", stdin=line + "\n")[0] == 0
    argv = ["--print-timestamp", "--print-offsets", "--print-key", "--key-separator", "="]
    code, out, _ = run("consume", name, "--from-beginning", "--max-messages", "1", *argv)
    assert code == 0 and out == "1234567\t0:0\tk=v\n"


def test_reassign_wait_returns_once_done(run, topic):
    """reassign-partitions start --wait returns after the move; with stderr not a terminal it
    draws no progress line."""
    name = topic(2)
    code, out, err = run("reassign-partitions", "start", name, "--partitions", "0,1", "--replicas", "0", "--wait")
    assert code == 0 and f"reassigned {name} partitions [0, 1] to brokers [0]" in out and err == ""
    assert json.loads(run("reassign-partitions", "list", "--json")[1]) == []
