"""Kafka 4's dynamic group configs (GROUP config resources, KIP-848): validated against the
broker's bounds, journaled by the metadata image, described with their sources, and applied
to the group's members of the consumer protocol (no Ray, no clock)."""

from __future__ import annotations

import pytest

from raylog.common.group_protocol import JOIN_EPOCH, Heartbeat
from raylog.config import ControllerConfig
from raylog.coordination import group_configs
from raylog.coordination.consumer_group import ConsumerGroupConfig, ConsumerGroups
from raylog.coordination.metadata import MetadataImage
from raylog.errors import InvalidConfigError, InvalidRequestError
from raylog.storage.journal import MetadataJournal
from raylog.types import ConfigEntry

SESSION, INTERVAL = group_configs.SESSION_TIMEOUT, group_configs.HEARTBEAT_INTERVAL
#: A broker whose members heartbeat every second, groups allowed [0.5 s, 15 s] and [10 s, 60 s].
BROKER = ConsumerGroupConfig(
    group_consumer_session_timeout_ms=45_000,
    group_consumer_heartbeat_interval_ms=1_000,
    group_consumer_min_heartbeat_interval_ms=500,
    group_consumer_min_session_timeout_ms=10_000,
)


def test_a_group_sets_and_deletes_its_configs_within_the_broker_bounds():
    configs = group_configs.alter({}, {INTERVAL: "2000", SESSION: 30_000}, BROKER, incremental=True)
    assert configs == {INTERVAL: "2000", SESSION: "30000"}
    assert group_configs.alter(configs, {SESSION: None}, BROKER, incremental=True) == {INTERVAL: "2000"}
    # AlterConfigs replaces the whole set.
    assert group_configs.alter(configs, {SESSION: "20000"}, BROKER, incremental=False) == {SESSION: "20000"}
    settings = group_configs.effective(BROKER, configs)
    assert (settings.group_consumer_heartbeat_interval_ms, settings.group_consumer_session_timeout_ms) == (2000, 30000)


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({INTERVAL: "15001"}, "group.consumer.max.heartbeat.interval.ms"),
        ({INTERVAL: "499"}, "group.consumer.min.heartbeat.interval.ms"),
        ({SESSION: "60001"}, "group.consumer.max.session.timeout.ms"),
        ({SESSION: "9999"}, "group.consumer.min.session.timeout.ms"),
        ({SESSION: "12000", INTERVAL: "12000"}, "must be greater than"),
        ({INTERVAL: "0"}, INTERVAL),
        ({INTERVAL: "soon"}, INTERVAL),
        ({INTERVAL: ("append", "1")}, "not a list config"),
        ({"session.timeout.ms": "30000"}, "Unknown group config name"),
        ({"share.session.timeout.ms": "30000"}, "Unknown group config name"),
    ],
)
def test_a_value_outside_the_broker_bounds_or_an_unknown_name_is_an_invalid_config(changes, named):
    with pytest.raises(InvalidConfigError, match=named):
        group_configs.alter({}, changes, BROKER, incremental=True)


def test_group_configs_are_journaled_survive_replay_and_are_described_with_their_sources(tmp_path):
    journal = MetadataJournal(str(tmp_path / "metadata.journal"))
    image = MetadataImage()
    record = image.alter_group_config("orders", {INTERVAL: "2000"}, BROKER, incremental=True)
    journal.append([record])
    image.apply(record)
    described = image.describe_group_config("orders", BROKER)
    assert described == {INTERVAL: ConfigEntry("2000", "group"), SESSION: ConfigEntry("45000", "default")}
    # The broker's own setting, given when the cluster started, is a static one.
    assert image.describe_group_config("other", BROKER)[INTERVAL] == ConfigEntry("1000", "static_broker")
    replayed = MetadataImage()
    for journaled in MetadataJournal(journal.path).replay():
        replayed.apply(journaled)
    assert replayed.group_configs == {"orders": {INTERVAL: "2000"}}
    assert replayed.group_configs_version == image.group_configs_version == 1
    # Deleting the last config forgets the group.
    image.apply(image.alter_group_config("orders", {INTERVAL: None}, BROKER, incremental=True))
    assert image.group_configs == {}
    assert image.group_configs_version == 2


def test_the_synonyms_of_a_group_config_run_from_the_group_to_the_built_in_default():
    assert group_configs.synonyms(INTERVAL, {INTERVAL: "2000"}, BROKER) == [
        (INTERVAL, "2000", "group"),
        ("group.consumer.heartbeat.interval.ms", "1000", "static_broker"),
        ("group.consumer.heartbeat.interval.ms", "5000", "default"),
    ]


def test_a_group_resource_needs_a_name():
    with pytest.raises(InvalidRequestError):
        MetadataImage().alter_group_config("", {INTERVAL: "2000"}, BROKER, incremental=True)
    with pytest.raises(InvalidRequestError):
        MetadataImage().describe_group_config("", BROKER)


def test_members_get_their_groups_heartbeat_interval_and_session_timeout():
    groups = ConsumerGroups(BROKER)
    groups.group_configs = {"g": group_configs.effective(BROKER, {INTERVAL: "2000", SESSION: "20000"})}

    def join(group_id: str):
        request = Heartbeat(group_id, "m", JOIN_EPOCH, rebalance_timeout_ms=60_000, topics=("t",), owned=frozenset())
        return groups.heartbeat(request, {"t": 1}, 0, lambda: "unused")[0]

    answer, other = join("g"), join("h")
    assert (answer.heartbeat_interval_ms, other.heartbeat_interval_ms) == (2000, 1000)
    # The group's session timeout, not the broker's 45 s, fences its silent member.
    assert set(groups.tick(20_000)) == {"g"}
    assert "m" in groups.groups["h"].members


def test_the_broker_settings_must_lie_within_the_broker_bounds():
    with pytest.raises(InvalidConfigError, match="group.consumer.heartbeat.interval.ms"):
        ControllerConfig.from_properties({"group.consumer.heartbeat.interval.ms": "1000"})
    with pytest.raises(InvalidConfigError, match="group.consumer.max.session.timeout.ms"):
        ControllerConfig.from_properties({"group.consumer.max.session.timeout.ms": "40000"})
    config = ControllerConfig.from_properties(
        {"group.consumer.heartbeat.interval.ms": "1000", "group.consumer.min.heartbeat.interval.ms": "500"}
    )
    assert ConsumerGroupConfig.of(config).group_consumer_min_heartbeat_interval_ms == 500
