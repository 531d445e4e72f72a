"""Tiered storage's settings (KIP-405): a topic's ``remote.storage.enable`` and
``local.retention.*``, the cluster's ``remote.log.storage.uri``, and the checks Kafka makes of
them when a topic is created or altered and when a broker default changes."""

from __future__ import annotations

import pytest

from raylog.actors.kafka.admin import _creation
from raylog.config import ControllerConfig, TopicConfig
from raylog.errors import InvalidConfigError
from tests.unit.coordination.test_metadata import Controller

STORE = "s3://bucket/raylog?region=eu-west-1"
TIERED = {"remote.storage.enable": "true"}


@pytest.fixture
def controller(tmp_path) -> Controller:
    return Controller(str(tmp_path / "controller" / "metadata.journal"))


def test_a_tiered_topics_settings_default_to_the_whole_logs_retention():
    config = TopicConfig.from_properties({**TIERED, "retention.ms": "86400000"})
    assert (config.remote_storage_enable, config.local_retention_ms, config.local_retention_bytes) == (True, -2, -2)
    assert TopicConfig().to_properties()["remote.storage.enable"] == "false"


@pytest.mark.parametrize(
    "properties, message",
    [
        ({"cleanup.policy": "compact"}, "compacted topic"),
        ({"cleanup.policy": "compact,delete"}, "compacted topic"),
        ({"local.retention.ms": "-1"}, "local.retention.ms cannot be -1 .* retention.ms is 604800000"),
        (
            {"retention.ms": "1000", "local.retention.ms": "2000"},
            "local.retention.ms 2000 is more than retention.ms 1000",
        ),
        ({"retention.bytes": "100", "local.retention.bytes": "-1"}, "local.retention.bytes cannot be -1"),
        ({"retention.bytes": "100", "local.retention.bytes": "101"}, "local.retention.bytes 101 is more than"),
        ({"local.retention.bytes": "-3"}, "local.retention.bytes must be >= -2"),
        ({"local.retention.ms": "soon"}, "local.retention.ms must be an integer"),
    ],
)
def test_what_kafka_refuses_on_a_tiered_topic_is_refused_naming_it(properties, message):
    with pytest.raises(InvalidConfigError, match=message):
        TopicConfig.from_properties({**TIERED, **properties})


@pytest.mark.parametrize(
    "properties",
    [
        {"retention.ms": "-1", "local.retention.ms": "-1"},
        {"retention.ms": "-1", "local.retention.ms": "123456789"},
        {"retention.ms": "5000", "local.retention.ms": "5000"},
        {"retention.bytes": "-1", "local.retention.bytes": "1048576"},
        {"local.retention.ms": "0", "local.retention.bytes": "0"},
    ],
)
def test_local_limits_up_to_the_whole_logs_are_taken(properties):
    config = TopicConfig.from_properties({**TIERED, **properties})
    assert config.to_properties()["local.retention.ms"] == properties.get("local.retention.ms", "-2")


def test_local_limits_of_a_topic_that_is_not_tiered_are_not_checked_against_the_whole_logs():
    """As Kafka: the local limits mean nothing until the topic is tiered, and are checked then."""
    config = TopicConfig.from_properties({"retention.ms": "1000", "local.retention.ms": "2000"})
    assert config.local_retention_ms == 2000


@pytest.mark.parametrize(
    "uri",
    [
        "",
        "s3://bucket/prefix",
        "s3://bucket?endpoint_override=127.0.0.1:9000&scheme=http",
        "file:///mnt/raylog",
        "gs://bucket/p",
        "hdfs://namenode:8020/raylog",
        "abfss://c@account.dfs.core.windows.net/p",
    ],
)
def test_the_cluster_store_is_empty_or_a_uri_pyarrow_knows(uri):
    assert ControllerConfig.from_properties({"remote.log.storage.uri": uri}).remote_log_storage_uri == uri


@pytest.mark.parametrize("uri", ["/mnt/raylog", "s4://bucket", "s3://", "s3://bucket with space", "bucket"])
def test_a_cluster_store_that_is_not_such_a_uri_is_refused(uri):
    with pytest.raises(InvalidConfigError, match="remote.log.storage.uri must be empty or a URI"):
        ControllerConfig.from_properties({"remote.log.storage.uri": uri})


def test_a_tiered_topic_needs_a_cluster_with_a_store(controller):
    image = controller.image
    with pytest.raises(InvalidConfigError, match="tiered storage is off in this cluster"):
        image.create_topic("t", 1, 1, TIERED)
    assert "t" not in image.topics
    controller.commit([image.create_topic("t", 1, 1, TIERED, remote_log_storage_uri=STORE)])
    assert image.topics["t"].config["remote.storage.enable"] == "true"
    assert controller.replayed().topics["t"].config == image.topics["t"].config


def test_tiered_storage_can_be_turned_on_and_never_off(controller):
    image = controller.image
    controller.commit([image.create_topic("t", 1, 1)])
    with pytest.raises(InvalidConfigError, match="tiered storage is off"):
        image.alter_config("t", TIERED)
    controller.commit([image.alter_config("t", TIERED, remote_log_storage_uri=STORE)])
    for change, incremental in (
        ({"remote.storage.enable": "false"}, True),
        ({"remote.storage.enable": None}, True),  # back to the default, false
        ({"retention.ms": "1000"}, False),  # a whole set of overrides without it
    ):
        with pytest.raises(InvalidConfigError, match="cannot be turned off once on"):
            image.alter_config("t", change, incremental=incremental, remote_log_storage_uri=STORE)
    with pytest.raises(InvalidConfigError, match="compacted topic"):
        image.alter_config("t", {"cleanup.policy": "compact"}, remote_log_storage_uri=STORE)
    assert image.topics["t"].config["remote.storage.enable"] == "true"
    controller.commit([image.alter_config("t", {"local.retention.bytes": "1048576"}, remote_log_storage_uri=STORE)])
    assert image.topics["t"].config["local.retention.bytes"] == "1048576"


def test_a_broker_default_a_tiered_topic_could_not_take_is_refused_naming_the_topic(controller):
    image = controller.image
    controller.commit(
        [image.create_topic("t", 1, 1, {**TIERED, "retention.ms": "60000"}, remote_log_storage_uri=STORE)]
    )
    with pytest.raises(InvalidConfigError, match="'t'.*local.retention.ms 120000 is more than retention.ms 60000"):
        image.alter_broker_config("", {"log.local.retention.ms": "120000"}, incremental=True)
    controller.commit([image.alter_broker_config("", {"log.local.retention.ms": "30000"}, incremental=True)])
    assert image.topics["t"].config["local.retention.ms"] == "30000"


def test_describing_the_broker_shows_the_store_without_its_password(controller):
    static = ControllerConfig.from_properties(
        {"remote.log.storage.uri": "s3://AKIAKEY:hunter2secret@bucket/p"}
    ).to_properties()
    entry = controller.image.describe_broker_config("", static)["remote.log.storage.uri"]
    assert (entry.value, entry.source) == ("s3://AKIAKEY:***@bucket/p", "static_broker")


def test_the_kafka_listener_refuses_a_tiered_topic_where_the_cluster_has_no_store():
    request = {
        "name": "t",
        "num_partitions": 1,
        "replication_factor": 1,
        "assignments": [],
        "configs": [{"name": "remote.storage.enable", "value": "true"}],
    }
    metadata = {"topics": {}, "live": [0], "brokers": {0: None}}
    with pytest.raises(InvalidConfigError, match="tiered storage is off"):
        _creation(request, metadata, ControllerConfig())
    assert _creation(request, metadata, ControllerConfig(remote_log_storage_uri=STORE)).new.config == {
        "remote.storage.enable": "true"
    }
