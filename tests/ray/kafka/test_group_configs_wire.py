"""Kafka 4's group configs (GROUP config resources, KIP-848) over the wire: confluent-kafka's
AdminClient alters and describes a group's ``consumer.heartbeat.interval.ms``, a value past
the broker's bounds is INVALID_CONFIG, the ACLs on the group decide who may do either, and a
member of the group's consumer protocol is told the group's interval at its next heartbeat."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

from raylog import ACL, ACLFilter, ACLOperation, ACLPermissionType, ResourcePattern
from raylog import ResourceType as AclResourceType
from raylog.kafka import codec
from tests.helpers import wait_until
from tests.kafka_wire import Wire

#: A bound on one admin call (not a measure).
TIMEOUT_S = 30.0
INTERVAL = "consumer.heartbeat.interval.ms"
SESSION = "consumer.session.timeout.ms"


@pytest.fixture
def admin(bootstrap) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _alter(admin: AdminClient, group: str, value: str | None) -> None:
    """Set (or, None, delete) the group's heartbeat interval; raises KafkaException if refused."""
    operation = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    entry = ConfigEntry(INTERVAL, value, incremental_operation=operation)
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])
    admin.incremental_alter_configs([resource], request_timeout=TIMEOUT_S)[resource].result(timeout=TIMEOUT_S)


def _described(admin: AdminClient, group: str) -> dict[str, tuple[str, ConfigSource]]:
    resource = ConfigResource(ResourceType.GROUP, group)
    entries = admin.describe_configs([resource], request_timeout=TIMEOUT_S)[resource].result(timeout=TIMEOUT_S)
    return {name: (entry.value, ConfigSource(entry.source)) for name, entry in entries.items()}


def _error_of(call) -> int:
    with pytest.raises(KafkaException) as raised:
        call()
    return raised.value.args[0].code()


def test_a_group_heartbeat_interval_is_altered_described_and_bounded(admin):
    group = f"cfg-{uuid.uuid4().hex[:8]}"
    # Before any config of its own (it need not exist): the broker's setting.
    assert _described(admin, group) == {
        INTERVAL: ("1000", ConfigSource.STATIC_BROKER_CONFIG),
        SESSION: ("45000", ConfigSource.DEFAULT_CONFIG),
    }
    _alter(admin, group, "2000")
    assert _described(admin, group)[INTERVAL] == ("2000", ConfigSource.GROUP_CONFIG)
    # group.consumer.max.heartbeat.interval.ms is 15 s: refused, and nothing changes.
    assert _error_of(lambda: _alter(admin, group, "16000")) == KafkaError.INVALID_CONFIG
    assert _described(admin, group)[INTERVAL] == ("2000", ConfigSource.GROUP_CONFIG)
    _alter(admin, group, None)
    assert _described(admin, group)[INTERVAL] == ("1000", ConfigSource.STATIC_BROKER_CONFIG)


def test_group_configs_need_describe_and_alter_configs_on_the_group(admin, kafka_admin):
    group = f"cfg-{uuid.uuid4().hex[:8]}"
    denials = [
        ACL("User:ANONYMOUS", "*", operation, ACLPermissionType.DENY, ResourcePattern(AclResourceType.GROUP, group))
        for operation in (ACLOperation.DESCRIBE_CONFIGS, ACLOperation.ALTER_CONFIGS)
    ]
    kafka_admin.create_acls(denials)
    try:
        denied = KafkaError.GROUP_AUTHORIZATION_FAILED
        assert _error_of(lambda: _described(admin, group)) == denied
        assert _error_of(lambda: _alter(admin, group, "2000")) == denied
    finally:
        kafka_admin.delete_acls([ACLFilter.exactly(acl) for acl in denials])


def _coordinator(bootstrap: str, group: str) -> str:
    """``host:port`` of the group's coordinator (FindCoordinator v4, asked again while the
    offsets topic is created)."""

    def found() -> str | None:
        wire = Wire(bootstrap.split(",")[0])
        try:
            answer = wire.ask(codec.ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [group]})
        finally:
            wire.close()
        (coordinator,) = answer["coordinators"]
        return f"{coordinator['host']}:{coordinator['port']}" if coordinator["error_code"] == 0 else None

    return wait_until(found, timeout_s=TIMEOUT_S, message=f"the coordinator of group {group!r}")


def test_a_member_of_the_consumer_protocol_is_told_its_groups_heartbeat_interval(admin, bootstrap, kafka_topic):
    """A member joins with the broker's interval (1 s); once the group's config is altered its
    next heartbeat answers the group's (2 s); after DeleteGroups the config stays, as in Kafka
    4 (group configs are the controller's metadata, not the group's state)."""
    topic = kafka_topic()
    group = f"{topic}-cfg"
    wire = Wire(_coordinator(bootstrap, group))
    heartbeat = {"group_id": group, "rebalance_timeout_ms": 30_000, "subscribed_topic_names": [topic]}
    try:
        joined = wire.ask(
            codec.ApiKey.CONSUMER_GROUP_HEARTBEAT,
            0,
            {**heartbeat, "member_id": "", "member_epoch": 0, "topic_partitions": []},
        )
        assert joined["error_code"] == 0, joined
        assert joined["heartbeat_interval_ms"] == 1000
        _alter(admin, group, "2000")
        member = {"member_id": joined["member_id"], "member_epoch": joined["member_epoch"]}
        next_beat = wire.ask(codec.ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, {"group_id": group, **member})
        assert next_beat["error_code"] == 0, next_beat
        assert next_beat["heartbeat_interval_ms"] == 2000
        left = wire.ask(codec.ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, {"group_id": group, **member, "member_epoch": -1})
        assert left["error_code"] == 0, left
    finally:
        wire.close()
    admin.delete_consumer_groups([group], request_timeout=TIMEOUT_S)[group].result(timeout=TIMEOUT_S)
    assert _described(admin, group)[INTERVAL] == ("2000", ConfigSource.GROUP_CONFIG)
    _alter(admin, group, None)
