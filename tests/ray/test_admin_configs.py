"""Admin.alter_configs / incremental_alter_configs / describe_configs / create_partitions
against the session's cluster: configs reach the live replicas, alter_configs replaces a
topic's overrides where incremental_alter_configs changes only the properties named, dynamic
broker configs default topics' properties, and new partitions take records from producers."""

from __future__ import annotations

import time

import pytest
import ray

from raylog import (
    AlterConfigOp,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    Consumer,
    NewPartitions,
    Producer,
    TopicPartition,
)
from raylog.clients.cluster import RaylogCluster
from raylog.clients.partitioner import partition_for_key
from raylog.config import TopicConfig
from raylog.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidRequestError,
    NotEnoughReplicasError,
    UnknownTopicOrPartitionError,
)
from tests.helpers import wait_until

HOUR_MS = 3_600_000
DEFAULTS = TopicConfig().to_properties()


def _leader_state(cluster, name: str, partition: int = 0) -> dict:
    handles = ray.get(cluster.controller.replica_handles.remote(name))
    return ray.get(handles[(partition, 0)].state.remote())


def test_alter_then_describe_configs(admin, topic):
    """Set properties show with source "topic", a deleted override goes back to its default,
    and describe_topics shows the same values."""
    name = topic(1, **{"retention.ms": "60000"})
    assert admin.describe_configs([name])[name]["retention.ms"] == ConfigEntry("60000", "topic")
    admin.incremental_alter_configs({name: {"flush.ms": "500", "retention.ms": None}})
    described = admin.describe_configs([name])[name]
    default = TopicConfig().to_properties()
    assert described["flush.ms"] == ConfigEntry("500", "topic")
    assert described["retention.ms"] == ConfigEntry(default["retention.ms"], "default")
    assert {k for k, e in described.items() if e.source == "topic"} == {"flush.ms"}
    (description,) = admin.describe_topics([name])
    assert description.config == {k: e.value for k, e in described.items()}


def _overrides(admin, name: str) -> dict[str, str]:
    return {k: e.value for k, e in admin.describe_configs([name])[name].items() if e.source == "topic"}


def test_alter_configs_replaces_the_overrides_where_incremental_keeps_the_others(admin, topic):
    """alter_configs (Kafka's AlterConfigs): the properties given become the topic's whole
    set of overrides, the others go back to their defaults; incremental_alter_configs sets,
    deletes, appends and subtracts only the properties named. Both take ConfigResources."""
    name = topic(1, **{"retention.ms": "60000", "segment.bytes": "1048576"})
    admin.alter_configs({name: {"flush.ms": "500", "retention.ms": "120000"}})
    assert _overrides(admin, name) == {"flush.ms": "500", "retention.ms": "120000"}
    admin.incremental_alter_configs(
        [
            ConfigResource(
                ConfigResourceType.TOPIC,
                name,
                {
                    "segment.bytes": "2097152",
                    "flush.ms": (AlterConfigOp.DELETE, None),
                    "cleanup.policy": (AlterConfigOp.APPEND, "compact"),
                },
            )
        ]
    )
    assert _overrides(admin, name) == {
        "retention.ms": "120000",
        "segment.bytes": "2097152",
        "cleanup.policy": "delete,compact",
    }
    admin.incremental_alter_configs([ConfigResource("topic", name, {"cleanup.policy": ("subtract", "delete")})])
    assert _overrides(admin, name)["cleanup.policy"] == "compact"
    admin.alter_configs([ConfigResource("TOPIC", name, {"retention.ms": "90000", "flush.ms": None})])
    assert _overrides(admin, name) == {"retention.ms": "90000"}
    admin.alter_configs({name: {}})
    assert _overrides(admin, name) == {}


@pytest.mark.parametrize("method", ["alter_configs", "incremental_alter_configs"])
def test_a_refused_alter_changes_nothing(admin, topic, method):
    """A bad value (even beside a good one) or an unknown property is refused with
    InvalidConfigError naming it; an unknown topic is refused; the config stays as it was."""
    alter = getattr(admin, method)
    name = topic(1, **{"retention.ms": "60000"})
    before = admin.describe_configs([name])
    with pytest.raises(InvalidConfigError, match=r"min\.insync\.replicas"):
        alter({name: {"retention.ms": "1000", "min.insync.replicas": "0"}})
    with pytest.raises(InvalidConfigError, match=r"unknown config 'retention\.hours'.*known: .*retention\.ms"):
        alter({name: {"retention.hours": "1"}})
    with pytest.raises(UnknownTopicOrPartitionError):
        alter({"no-such-topic": {"retention.ms": "1000"}})
    with pytest.raises(InvalidConfigError, match="retention.ms is not a list config"):
        admin.incremental_alter_configs({name: {"retention.ms": (AlterConfigOp.APPEND, "1000")}})
    with pytest.raises(InvalidConfigError, match="only sets values"):
        admin.alter_configs({name: {"retention.ms": (AlterConfigOp.DELETE, None)}})
    with pytest.raises(InvalidRequestError, match="is not a broker id"):
        alter([ConfigResource(ConfigResourceType.BROKER, "broker-0", {"log.retention.ms": "1000"})])
    with pytest.raises(InvalidRequestError, match="named twice"):
        alter([ConfigResource("topic", name, {}), ConfigResource("topic", name, {})])
    with pytest.raises(TypeError, match="ConfigResource"):
        alter([name])
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.describe_configs([name, "no-such-topic"])
    assert admin.describe_configs([name]) == before


#: Longer than retention.ms's default: a cluster default that deletes nothing the session keeps.
TWO_WEEKS_MS = 14 * 24 * HOUR_MS


def test_broker_configs_default_topics_and_are_described(admin, topic, cluster):
    """Dynamic broker configs through the Admin, as kafka-configs.sh --entity-type brokers:
    log.retention.ms on the cluster default becomes retention.ms of a topic that sets none
    (source "dynamic_default_broker") while a topic's own wins; log.cleanup.policy APPEND
    compact on a broker is its own ("dynamic_broker"); a read-only static setting and an
    unknown broker are refused (the first refusal raised once the other resources were
    altered); every broker config set is removed again (the cluster is the session's)."""
    plain, own = topic(1), topic(1, **{"retention.ms": "60000"})
    broker = str(min(cluster.metadata(refresh=True).brokers))
    default_key, broker_key = (ConfigResourceType.BROKER, ""), (ConfigResourceType.BROKER, broker)
    try:
        admin.incremental_alter_configs([ConfigResource("broker", "", {"log.retention.ms": str(TWO_WEEKS_MS)})])
        described = admin.describe_configs([plain, ConfigResource(ConfigResourceType.BROKER, ""), own])
        assert list(described) == [plain, default_key, own]
        assert described[plain]["retention.ms"] == ConfigEntry(str(TWO_WEEKS_MS), "dynamic_default_broker")
        assert described[own]["retention.ms"] == ConfigEntry("60000", "topic")
        assert described[default_key]["log.retention.ms"] == ConfigEntry(str(TWO_WEEKS_MS), "dynamic_default_broker")
        assert admin.describe_topics([plain])[0].config["retention.ms"] == str(TWO_WEEKS_MS)
        admin.incremental_alter_configs(
            [ConfigResource(4, broker, {"log.cleanup.policy": (AlterConfigOp.APPEND, "compact")})]
        )
        mine = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, broker)])[broker_key]
        assert mine["log.cleanup.policy"] == ConfigEntry("delete,compact", "dynamic_broker")
        assert mine["log.retention.ms"] == ConfigEntry(str(TWO_WEEKS_MS), "dynamic_default_broker")
        assert mine["num.partitions"].source == "static_broker"
        assert admin.describe_configs([plain])[plain]["cleanup.policy"] == ConfigEntry("delete", "default")
        with pytest.raises(InvalidRequestError, match=r"dynamically: \['num\.partitions'\]"):
            admin.incremental_alter_configs([ConfigResource("broker", broker, {"num.partitions": "3"})])
        with pytest.raises(InvalidRequestError, match="no broker 999"):
            admin.incremental_alter_configs(
                [
                    ConfigResource("broker", "999", {"log.retention.ms": "1000"}),
                    ConfigResource("topic", own, {"flush.ms": "500"}),
                ]
            )
        assert admin.describe_configs([own])[own]["flush.ms"] == ConfigEntry("500", "topic")
    finally:
        admin.incremental_alter_configs(
            [
                ConfigResource("broker", "", {"log.retention.ms": None}),
                ConfigResource("broker", broker, {"log.cleanup.policy": None}),
            ]
        )
    left = admin.describe_configs([ConfigResource("broker", ""), ConfigResource("broker", broker)])
    assert left[default_key]["log.retention.ms"].source == "default"
    assert left[broker_key]["log.cleanup.policy"] == ConfigEntry("delete", "default")
    assert admin.describe_configs([plain])[plain]["retention.ms"] == ConfigEntry(DEFAULTS["retention.ms"], "default")


def test_a_groups_configs_are_set_replaced_described_and_bounded(admin):
    """A GROUP resource (Kafka 4's group configs): set incrementally, replaced by
    alter_configs, described with the broker's group.consumer.* setting where the group sets
    none (this cluster's heartbeat interval, 500 ms, given at start), refused past the
    broker's bounds (max 15 s) with InvalidConfigError, and "" is no group."""
    group = f"cfg-{time.monotonic_ns()}"
    key = (ConfigResourceType.GROUP, group)
    interval, session = "consumer.heartbeat.interval.ms", "consumer.session.timeout.ms"
    admin.incremental_alter_configs([ConfigResource(ConfigResourceType.GROUP, group, {interval: "2000"})])
    assert admin.describe_configs([ConfigResource("group", group)])[key] == {
        interval: ConfigEntry("2000", "group"),
        session: ConfigEntry("45000", "default"),
    }
    with pytest.raises(InvalidConfigError, match="group.consumer.max.heartbeat.interval.ms"):
        admin.incremental_alter_configs([ConfigResource("group", group, {interval: "16000"})])
    admin.alter_configs([ConfigResource("group", group, {session: "50000"})])
    assert admin.describe_configs([ConfigResource("group", group)])[key] == {
        interval: ConfigEntry("500", "static_broker"),
        session: ConfigEntry("50000", "group"),
    }
    with pytest.raises(InvalidRequestError):
        admin.describe_configs([ConfigResource("group", "")])


def test_lowered_retention_deletes_old_segments_on_the_live_replica(admin, topic, cluster):
    """Records an hour old outlive the default retention; lowering retention.ms to ten
    minutes deletes their segments at the replica's next housekeeping round, no restart."""
    name = topic(1, **{"segment.bytes": "1024"})
    with Producer(cluster, linger_ms=0, batch_size=1024) as producer:
        old_ms = int(time.time() * 1000) - HOUR_MS
        for i in range(8):
            producer.send(name, b"x" * 500, timestamp_ms=old_ms + i).result(timeout=30)
    before = _leader_state(cluster, name)
    assert before["segments"] >= 4 and before["log_start_offset"] == 0
    admin.incremental_alter_configs({name: {"retention.ms": str(HOUR_MS // 6)}})
    after = wait_until(
        lambda: (state := _leader_state(cluster, name))["segments"] == 1 and state,
        timeout_s=20,
        message="old segments deleted",
    )
    assert after["log_start_offset"] > 0 and after["log_end_offset"] == 8


def test_min_insync_replicas_applies_to_the_next_produce(admin, topic, cluster):
    """Raising min.insync.replicas above the ISR refuses acks=all at once; deleting the
    override accepts it again."""
    name = topic(1)
    with Producer(cluster, acks="all", retries=0, linger_ms=0) as producer:
        producer.send(name, b"before").result(timeout=30)
        admin.incremental_alter_configs({name: {"min.insync.replicas": "2"}})
        wait_until(
            lambda: isinstance(producer.send(name, b"refused").exception(timeout=30), NotEnoughReplicasError),
            timeout_s=10,
            message="acks=all refused",
        )
        admin.incremental_alter_configs({name: {"min.insync.replicas": None}})
        wait_until(
            lambda: producer.send(name, b"after").exception(timeout=30) is None, timeout_s=10, message="accepted"
        )


def test_added_partitions_take_keyed_and_unkeyed_records(admin, topic, cluster):
    """create_partitions grows a topic in use: the new partitions get leaders, a producer
    that knew the old count uses the new one after the refresh, keys hash over the new
    count, and a consumer reads the records from the new partitions."""
    name = topic(2)
    with Producer(cluster, linger_ms=0) as producer:
        assert producer.partitions_for(name) == [0, 1]
        producer.send(name, b"early").result(timeout=30)
        admin.create_partitions({name: 4})
        (description,) = admin.describe_topics([name])
        assert [(p.partition, p.leader, p.isr) for p in description.partitions[2:]] == [(2, 0, (0,)), (3, 0, (0,))]
        assert producer.partitions_for(name) == [0, 1, 2, 3]  # the Admin call refreshed the metadata
        keys = [k for k in (b"key-%d" % i for i in range(100)) if partition_for_key(k, 4) >= 2][:10]
        keyed = [producer.send(name, b"keyed", key=k) for k in keys]
        unkeyed = producer.send(name, b"unkeyed", partition=3)
        placed = [f.result(timeout=30).partition for f in keyed]
        assert placed == [partition_for_key(k, 4) for k in keys] and set(placed) == {2, 3}
        assert unkeyed.result(timeout=30).partition == 3
    consumer = Consumer(cluster, auto_offset_reset="earliest")
    consumer.assign([TopicPartition(name, 2), TopicPartition(name, 3)])
    read: list = []
    wait_until(
        lambda: read.extend(r for rs in consumer.poll(timeout_ms=200).values() for r in rs) or len(read) == 11,
        timeout_s=20,
        message="records of the new partitions consumed",
    )
    consumer.close()
    assert sorted(r.key or b"" for r in read) == sorted([*keys, b""])


def test_a_producer_on_another_handle_sees_new_partitions_after_its_metadata_ages(admin, topic, cluster):
    """A producer whose cluster handle is not the Admin's picks up added partitions at its
    next metadata refresh (metadata_max_age_ms), as in Kafka."""
    name = topic(1)
    own = RaylogCluster(cluster.cluster_name, cluster.controller)
    with Producer(own, linger_ms=0, metadata_max_age_ms=0) as producer:
        producer.send(name, b"a").result(timeout=30)
        admin.create_partitions({name: 3})
        assert producer.partitions_for(name) == [0]  # its own metadata is not refreshed yet
        wait_until(
            lambda: producer.send(name, b"b").result(timeout=30) and producer.partitions_for(name) == [0, 1, 2],
            timeout_s=10,
            message="new partition count seen",
        )


@pytest.mark.parametrize("count", [2, 1])
def test_shrinking_or_keeping_the_partition_count_is_refused(admin, topic, count):
    """A count not above the current one is InvalidPartitionsError (Kafka's code 37), and the
    topic keeps its partitions; internal topics and unknown topics are refused too."""
    name = topic(2)
    with pytest.raises(InvalidPartitionsError, match="can only grow") as raised:
        admin.create_partitions({name: count})
    assert raised.value.code == 37
    assert len(admin.describe_topics([name])[0].partitions) == 2
    with pytest.raises(InvalidPartitionsError, match="internal topic"):
        admin.create_partitions({"__consumer_offsets": 100})
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.create_partitions({"no-such-topic": 3})
    with pytest.raises(InvalidReplicaAssignmentError, match="new_assignments"):
        admin.create_partitions({name: NewPartitions(3, new_assignments=[[0]])})
    with pytest.raises(TypeError, match="NewPartitions"):
        admin.create_partitions({name: "3"})
    assert len(admin.describe_topics([name])[0].partitions) == 2


def test_new_partitions_grows_a_topic_as_a_count_does(admin, topic):
    """kafka-python's NewPartitions(total_count) is taken beside the plain count."""
    name = topic(1)
    admin.create_partitions({name: NewPartitions(total_count=2)}, wait_for_leaders_ms=30_000)
    assert len(admin.describe_topics([name])[0].partitions) == 2
