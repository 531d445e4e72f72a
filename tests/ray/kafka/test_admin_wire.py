"""Kafka's topic admin APIs over raylog's Kafka listener (raylog/actors/kafka/admin.py):
confluent-kafka's AdminClient and kafka-python's KafkaAdminClient create, grow, describe,
alter and delete topics that raylog's own Admin then sees; refusals come back as each client's
typed error with Kafka's codes; what no client here sends (DeleteTopics by topic id,
assignments that do not fit, a name given twice) goes as raw requests encoded with
raylog's codec.
"""

from __future__ import annotations

import itertools
import os
import socket
import struct
import uuid

import pytest

from raylog import Admin, NewTopic, TopicPartition
from raylog.errors import UnknownTopicOrPartitionError
from raylog.kafka import codec
from tests.helpers import wait_until

#: A bound on one admin call of a client (not a measure).
CALL_TIMEOUT_S = 60.0

_correlation = itertools.count(1)
_names = itertools.count()


def fresh_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}-{next(_names)}"


def wire(bootstrap: str, api_key: codec.ApiKey, version: int, body: dict) -> dict:
    """Send one request to the first listener of ``bootstrap``; its decoded response body."""
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    header = codec.RequestHeader(api_key, version, next(_correlation), "raw-test")
    with socket.create_connection((host, int(port)), timeout=CALL_TIMEOUT_S) as sock:
        sock.sendall(b"".join(bytes(b) for b in codec.encode_request(header, body)))
        (size,) = struct.unpack(">i", _read(sock, 4))
        correlation_id, answer = codec.decode_response(api_key, version, _read(sock, size))
    assert correlation_id == header.correlation_id
    return answer


def _advertised_by(address: str) -> list[str]:
    """The brokers' addresses that the listener at ``address`` advertises in Metadata."""
    brokers = wire(address, codec.ApiKey.METADATA, 12, {"topics": []})["brokers"]
    return sorted(f"{b['host']}:{b['port']}" for b in brokers)


def _read(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "the listener closed the connection"
        data += chunk
    return bytes(data)


@pytest.fixture
def confluent_admin(bootstrap):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


@pytest.fixture
def names(kafka_admin):
    """``names(prefix)`` -> a fresh topic name, deleted after the test if it exists then."""
    made: list[str] = []

    def make(prefix: str = "adm") -> str:
        made.append(fresh_name(prefix))
        return made[-1]

    yield make
    existing = set(kafka_admin.list_topics())
    leftovers = [n for n in made if n in existing]
    if leftovers:
        kafka_admin.delete_topics(leftovers)


def result_of(futures: dict, key):
    return futures[key].result(timeout=CALL_TIMEOUT_S)


def error_code_of(futures: dict, key) -> int:
    from confluent_kafka import KafkaException

    with pytest.raises(KafkaException) as raised:
        result_of(futures, key)
    return raised.value.args[0].code()


def partitions_of(kafka_admin: Admin, name: str) -> list[tuple[int, ...]]:
    (described,) = kafka_admin.describe_topics([name])
    return [p.replicas for p in described.partitions]


def test_confluent_admin_creates_grows_describes_and_deletes_a_topic(confluent_admin, kafka_admin, names):
    from confluent_kafka.admin import ConfigResource, ConfigSource, NewPartitions, NewTopic

    name = names()
    futures = confluent_admin.create_topics(
        [NewTopic(name, num_partitions=2, replication_factor=2, config={"retention.ms": "3600000"})],
        request_timeout=CALL_TIMEOUT_S,
    )
    assert result_of(futures, name) is None
    replicas = partitions_of(kafka_admin, name)
    assert len(replicas) == 2 and all(len(r) == 2 for r in replicas)
    assert kafka_admin.describe_configs([name])[name]["retention.ms"].value == "3600000"

    futures = confluent_admin.create_partitions([NewPartitions(name, 4)], request_timeout=CALL_TIMEOUT_S)
    assert result_of(futures, name) is None
    assert len(partitions_of(kafka_admin, name)) == 4

    resource = ConfigResource("topic", name)
    described = result_of(confluent_admin.describe_configs([resource], request_timeout=CALL_TIMEOUT_S), resource)
    retention = described["retention.ms"]
    assert (retention.value, retention.is_default, retention.is_read_only) == ("3600000", False, False)
    assert retention.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    segment = described["segment.bytes"]
    assert segment.source == ConfigSource.DEFAULT_CONFIG.value and segment.is_default
    assert segment.value == kafka_admin.describe_configs([name])[name]["segment.bytes"].value
    assert set(described) == set(kafka_admin.describe_configs([name])[name])

    futures = confluent_admin.delete_topics([name], request_timeout=CALL_TIMEOUT_S)
    assert result_of(futures, name) is None
    assert name not in kafka_admin.list_topics()
    with pytest.raises(UnknownTopicOrPartitionError):
        kafka_admin.describe_topics([name])


def test_confluent_admin_gets_kafkas_errors_for_refused_topics(confluent_admin, kafka_admin, kafka_topic, names):
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import NewPartitions, NewTopic

    existing = kafka_topic(num_partitions=2)
    bad = {
        existing: NewTopic(existing, num_partitions=1),
        names(): NewTopic("", num_partitions=1),
        (too_many := names()): NewTopic(too_many, num_partitions=1, replication_factor=9),
        (bad_config := names()): NewTopic(bad_config, num_partitions=1, config={"no.such.setting": "1"}),
        (bad_value := names()): NewTopic(bad_value, num_partitions=1, config={"retention.ms": "soon"}),
    }
    del bad[next(k for k, v in bad.items() if v.topic == "")]  # (librdkafka refuses an empty name itself)
    futures = confluent_admin.create_topics(list(bad.values()), request_timeout=CALL_TIMEOUT_S)
    assert error_code_of(futures, existing) == KafkaError.TOPIC_ALREADY_EXISTS
    assert error_code_of(futures, too_many) == KafkaError.INVALID_REPLICATION_FACTOR
    assert error_code_of(futures, bad_config) == KafkaError.INVALID_CONFIG
    assert error_code_of(futures, bad_value) == KafkaError.INVALID_CONFIG
    assert not {too_many, bad_config, bad_value} & set(kafka_admin.list_topics())

    futures = confluent_admin.create_partitions(
        [NewPartitions(existing, 1), NewPartitions(unknown := names(), 3)], request_timeout=CALL_TIMEOUT_S
    )
    assert error_code_of(futures, existing) == KafkaError.INVALID_PARTITIONS
    assert error_code_of(futures, unknown) == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert len(partitions_of(kafka_admin, existing)) == 2

    futures = confluent_admin.delete_topics([unknown], request_timeout=CALL_TIMEOUT_S)
    assert error_code_of(futures, unknown) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_validate_only_checks_and_creates_nothing(confluent_admin, kafka_admin, kafka_topic, names):
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import NewPartitions, NewTopic

    good, bad = names(), names()
    futures = confluent_admin.create_topics(
        [NewTopic(good, num_partitions=3, replication_factor=3), NewTopic(bad, num_partitions=0)],
        validate_only=True,
        request_timeout=CALL_TIMEOUT_S,
    )
    assert result_of(futures, good) is None
    assert error_code_of(futures, bad) == KafkaError.INVALID_PARTITIONS
    assert not {good, bad} & set(kafka_admin.list_topics())

    existing = kafka_topic(num_partitions=1)
    futures = confluent_admin.create_partitions(
        [NewPartitions(existing, 3)], validate_only=True, request_timeout=CALL_TIMEOUT_S
    )
    assert result_of(futures, existing) is None
    assert len(partitions_of(kafka_admin, existing)) == 1


def test_manual_assignments_place_the_replicas(confluent_admin, kafka_admin, kafka_cluster, names):
    """A topic created with replica assignments (and partitions added with theirs) ends with
    exactly those replica lists, preferred leader first."""
    from confluent_kafka.admin import NewPartitions, NewTopic

    brokers = sorted(kafka_cluster.metadata(refresh=True).brokers)
    a, b, c = brokers[:3]
    name = names()
    wanted = [(a, b), (b, c), (c, a)]
    futures = confluent_admin.create_topics(
        [NewTopic(name, num_partitions=len(wanted), replica_assignment=[list(r) for r in wanted])],
        request_timeout=CALL_TIMEOUT_S,
    )
    assert result_of(futures, name) is None
    wait_until(lambda: partitions_of(kafka_admin, name) == wanted, timeout_s=60, message=f"replicas {wanted}")

    futures = confluent_admin.create_partitions(
        [NewPartitions(name, 4, replica_assignment=[[c, b]])], request_timeout=CALL_TIMEOUT_S
    )
    assert result_of(futures, name) is None
    wait_until(
        lambda: partitions_of(kafka_admin, name) == [*wanted, (c, b)], timeout_s=60, message="the new partition's"
    )


def test_kafka_python_admin_creates_describes_grows_and_deletes(bootstrap, kafka_admin, kafka_cluster, names):
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewPartitions, NewTopic
    from kafka.errors import TopicAlreadyExistsError

    client = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(CALL_TIMEOUT_S * 1000))
    try:
        name = names("kp")
        client.create_topics([NewTopic(name, 1, 1, topic_configs={"cleanup.policy": "compact"})])
        assert kafka_admin.describe_configs([name])[name]["cleanup.policy"].value == "compact"
        with pytest.raises(TopicAlreadyExistsError):
            client.create_topics([NewTopic(name, 1, 1)])

        client.create_partitions({name: NewPartitions(total_count=3)})
        assert len(partitions_of(kafka_admin, name)) == 3

        resource = ConfigResource(ConfigResourceType.TOPIC, name)
        modified = client.describe_configs([resource], include_synonyms=True)["topic"][name]
        assert set(modified) == {"cleanup.policy"}
        cleanup = modified["cleanup.policy"]
        assert (cleanup["value"], cleanup["config_source"], cleanup["read_only"]) == (
            "compact",
            "DYNAMIC_TOPIC_CONFIG",
            False,
        )
        assert [(s["name"], s["value"], s["source"]) for s in cleanup["synonyms"]] == [
            ("cleanup.policy", "compact", "DYNAMIC_TOPIC_CONFIG"),
            ("log.cleanup.policy", "delete", "DEFAULT_CONFIG"),  # the default by its broker name, as Kafka
        ]
        every = client.describe_configs([resource], config_filter="all")["topic"][name]
        ours = kafka_admin.describe_configs([name])[name]
        assert {k: c["value"] for k, c in every.items()} == {k: e.value for k, e in ours.items()}

        broker_id = str(min(kafka_cluster.metadata().brokers))
        broker = client.describe_configs([ConfigResource(ConfigResourceType.BROKER, broker_id)], config_filter="all")
        described = broker["broker"][broker_id]
        retention = described["log.retention.ms"]
        assert (retention["value"], retention["config_source"], retention["read_only"]) == (
            every["retention.ms"]["value"],
            "DEFAULT_CONFIG",
            False,
        )
        static = described["num.partitions"]
        assert (static["config_source"], static["read_only"]) == ("STATIC_BROKER_CONFIG", True)
        assert described["broker.id"]["value"] == broker_id

        client.delete_topics([name])
        assert name not in kafka_admin.list_topics()
    finally:
        client.close()


def test_raw_requests_for_what_clients_do_not_send(bootstrap, kafka_admin, kafka_cluster, names):
    """DeleteTopics v6 by topic id (and an unknown id); CreateTopics v7's topic id, counts
    and configs, a name given twice, -1 counts with assignments; DescribeConfigs v4 of
    chosen keys with documentation, of an unknown topic and of an unknown resource type."""
    name = names("raw")
    answer = wire(
        bootstrap,
        codec.ApiKey.CREATE_TOPICS,
        7,
        {
            "topics": [
                {
                    "name": name,
                    "num_partitions": -1,
                    "replication_factor": -1,
                    "configs": [{"name": "retention.bytes", "value": "1048576"}],
                },
                {"name": (twice := names("raw")), "num_partitions": 1, "replication_factor": 1},
                {"name": twice, "num_partitions": 1, "replication_factor": 1},
                {
                    "name": (both := names("raw")),
                    "num_partitions": 2,
                    "replication_factor": 1,
                    "assignments": [{"partition_index": 0, "broker_ids": [min(kafka_cluster.metadata().brokers)]}],
                },
            ],
            "timeout_ms": 30_000,
        },
    )
    created, first, second, mixed = answer["topics"]
    (described,) = kafka_admin.describe_topics([name])
    assert (created["error_code"], created["num_partitions"], created["replication_factor"]) == (0, 1, 1)
    assert created["topic_id"] == uuid.UUID(hex=described.topic_id)
    configs = {c["name"]: c for c in created["configs"]}
    assert (configs["retention.bytes"]["value"], configs["retention.bytes"]["config_source"]) == ("1048576", 1)
    assert configs["retention.ms"]["config_source"] == 5
    assert first["error_code"] == second["error_code"] == 42 and "more than once" in first["error_message"]
    assert mixed["error_code"] == 42
    assert not {twice, both} & set(kafka_admin.list_topics())

    answer = wire(
        bootstrap,
        codec.ApiKey.DESCRIBE_CONFIGS,
        4,
        {
            "resources": [
                {"resource_type": 2, "resource_name": name, "configuration_keys": ["retention.bytes", "no.such"]},
                {"resource_type": 2, "resource_name": names("raw"), "configuration_keys": None},
                {"resource_type": 8, "resource_name": "x", "configuration_keys": None},
            ],
            "include_documentation": True,
        },
    )
    topic, unknown, other = answer["results"]
    (entry,) = topic["configs"]
    assert (entry["name"], entry["value"], entry["config_type"]) == ("retention.bytes", "1048576", 5)
    assert entry["documentation"] and entry["synonyms"] == []
    assert unknown["error_code"] == 3 and other["error_code"] == 42

    doomed = names("raw")
    kafka_admin.create_topics([NewTopic(doomed)], wait_for_leaders_ms=60_000)
    doomed_id = uuid.UUID(hex=kafka_admin.describe_topics([doomed])[0].topic_id)
    answer = wire(
        bootstrap,
        codec.ApiKey.DELETE_TOPICS,
        6,
        {
            "topics": [{"name": None, "topic_id": doomed_id}, {"name": None, "topic_id": uuid.uuid4()}],
            "timeout_ms": 30_000,
        },
    )
    deleted, missing = answer["responses"]
    assert (deleted["name"], deleted["topic_id"], deleted["error_code"]) == (doomed, doomed_id, 0)
    assert missing["error_code"] == 100 and missing["error_message"]
    assert doomed not in kafka_admin.list_topics()


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")  # the API under test
def test_confluent_admin_alters_configs_incrementally_and_whole(confluent_admin, kafka_admin, kafka_topic):
    """IncrementalAlterConfigs (SET, APPEND, DELETE) and AlterConfigs (the overrides replaced)
    over the wire, validate_only changing nothing, and Kafka's errors for a bad value and a
    broker resource (librdkafka's tests 0011 and 0092 need both APIs)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    topic = kafka_topic(1, **{"segment.ms": "600000"})

    def configs() -> dict:
        return {k: (e.value, e.source) for k, e in kafka_admin.describe_configs([topic])[topic].items()}

    def incremental(*entries: ConfigEntry, validate_only: bool = False) -> None:
        resource = ConfigResource("topic", topic, incremental_configs=list(entries))
        futures = confluent_admin.incremental_alter_configs([resource], validate_only=validate_only)
        result_of(futures, resource)

    set_retention = ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)
    incremental(set_retention, validate_only=True)
    assert configs()["retention.ms"][1] == "default"
    incremental(set_retention, ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND))
    assert configs()["retention.ms"] == ("3600000", "topic")
    assert configs()["cleanup.policy"] == ("delete,compact", "topic")
    assert configs()["segment.ms"] == ("600000", "topic")  # not named: kept
    incremental(ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE))
    assert configs()["retention.ms"][1] == "default"

    whole = ConfigResource("topic", topic, set_config={"max.message.bytes": "65536"})
    result_of(confluent_admin.alter_configs([whole]), whole)
    overridden = {k for k, (_, source) in configs().items() if source == "topic"}
    assert overridden == {"max.message.bytes"}  # AlterConfigs replaced every override

    bad = ConfigResource("topic", topic, set_config={"retention.ms": "soon"})
    with pytest.raises(KafkaException) as raised:
        result_of(confluent_admin.alter_configs([bad]), bad)
    assert raised.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert configs()["max.message.bytes"] == ("65536", "topic")  # the refused change altered nothing
    broker = ConfigResource("broker", "0", set_config={"num.partitions": "7"})
    with pytest.raises(KafkaException) as raised:
        result_of(confluent_admin.alter_configs([broker]), broker)
    assert raised.value.args[0].code() == KafkaError.INVALID_REQUEST  # a static setting
    assert "dynamically" in raised.value.args[0].str()


def test_dynamic_broker_configs_over_the_wire_default_topics_and_replicas(
    bootstrap, confluent_admin, kafka_admin, kafka_topic
):
    """confluent-kafka sets broker configs as kafka-configs.sh does (the cluster default, a
    resource librdkafka will not name, as a raw request): the cluster default's
    log.retention.ms becomes the retention of a topic that sets none (described with Kafka's
    source and synonyms), a topic's own value wins, a broker's own log.cleanup.policy (APPEND,
    as librdkafka's admin test) is its own, configs Kafka has and raylog does not act on are
    kept and described, and DELETE / SUBTRACT take them all back."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource

    plain, own = kafka_topic(1), kafka_topic(1, **{"retention.ms": "5000"})

    def alter(name: str, *entries: tuple[str, str | None, AlterConfigOpType]) -> None:
        if name:
            configs = [ConfigEntry(k, v, incremental_operation=op) for k, v, op in entries]
            resource = ConfigResource("broker", name, incremental_configs=configs)
            result_of(confluent_admin.incremental_alter_configs([resource]), resource)
            return
        configs = [{"name": k, "config_operation": op.value, "value": v} for k, v, op in entries]
        body = {"resources": [{"resource_type": 4, "resource_name": "", "configs": configs}], "validate_only": False}
        (answer,) = wire(bootstrap, codec.ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body)["responses"]
        assert answer["error_code"] == 0, answer

    def described(kind: str, name: str) -> dict:
        resource = ConfigResource(kind, name)
        return result_of(confluent_admin.describe_configs([resource]), resource)

    broker = str(min(kafka_admin.describe_cluster()))
    try:
        alter("", ("log.retention.ms", "86400000", AlterConfigOpType.SET))
        retention = described("topic", plain)["retention.ms"]
        assert (retention.value, retention.source) == ("86400000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
        assert "log.retention.ms" in retention.synonyms  # (confluent-kafka keeps one synonym per name)
        assert described("topic", own)["retention.ms"].value == "5000"
        alter(
            broker,
            ("log.cleanup.policy", "compact", AlterConfigOpType.APPEND),
            ("background.threads", "9", AlterConfigOpType.SET),
        )
        mine = described("broker", broker)
        assert (mine["log.cleanup.policy"].value, mine["log.cleanup.policy"].source) == (
            "delete,compact",
            ConfigSource.DYNAMIC_BROKER_CONFIG.value,
        )
        assert mine["background.threads"].value == "9"
        assert mine["log.retention.ms"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
        assert kafka_admin.describe_configs([plain])[plain]["cleanup.policy"].value == "delete"  # the topic's
    finally:
        alter("", ("log.retention.ms", None, AlterConfigOpType.DELETE))
        alter(
            broker,
            ("log.cleanup.policy", "compact", AlterConfigOpType.SUBTRACT),
            ("background.threads", None, AlterConfigOpType.DELETE),
        )
    assert described("topic", plain)["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert described("broker", broker)["log.cleanup.policy"].value == "delete"


def test_a_brokers_own_advertised_listeners_reach_kafka_clients(
    bootstrap, confluent_admin, kafka_admin, kafka_cluster, kafka_topic
):
    """advertised.listeners set for one broker (a per-broker dynamic config, as
    kafka-configs.sh --entity-type brokers --entity-name 1 sets it): Metadata gives clients
    that broker at its own address (here localhost, port 0: the port bound), fresh clients in
    their default settings produce to and read from its partition there, the config is
    described as the broker's own and not read-only; the cluster default and a listener name
    the brokers do not have are refused; deleting it brings the address back."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource

    topic = kafka_topic(3)
    broker = 1

    def alter(name: str, value: str | None) -> None:
        op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
        entry = ConfigEntry("advertised.listeners", value, incremental_operation=op)
        resource = ConfigResource("broker", name, incremental_configs=[entry])
        result_of(confluent_admin.incremental_alter_configs([resource]), resource)

    def advertised() -> tuple[str, int]:
        described = confluent_admin.list_topics(timeout=CALL_TIMEOUT_S).brokers[broker]
        return described.host, described.port

    def at_its_new_address(call):
        """``call()`` again while the request fails in transport: once librdkafka sees the broker
        at a new address it closes the connection to the old one, and a request already on it
        fails with _TRANSPORT (the suite beside a busy core), which the application retries."""

        def once():
            try:
                return call()
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError._TRANSPORT:
                    raise
                return None

        return wait_until(once, message="a request to broker 1 at its new address")

    def its_configs() -> dict:
        resource = ConfigResource("broker", str(broker))
        return result_of(confluent_admin.describe_configs([resource]), resource)

    host, port = advertised()
    assert host == "127.0.0.1"
    try:
        alter(str(broker), "PLAINTEXT://localhost:0")
        wait_until(lambda: advertised() == ("localhost", port), message="broker 1 advertised at localhost")
        assert f"localhost:{port}" in kafka_cluster.bootstrap_servers().split(",")
        mine = at_its_new_address(its_configs)
        entry = mine["advertised.listeners"]
        assert (entry.value, entry.source, entry.is_read_only) == (
            "PLAINTEXT://localhost:0",
            ConfigSource.DYNAMIC_BROKER_CONFIG.value,
            False,
        )
        with pytest.raises(KafkaException) as raised:
            at_its_new_address(lambda: alter("1", "EXTERNAL://localhost:0"))  # no listener of that name
        assert raised.value.args[0].code() == KafkaError.INVALID_CONFIG
        # The cluster default (a resource librdkafka will not name), as a raw request.
        entry = {"name": "advertised.listeners", "config_operation": 0, "value": "PLAINTEXT://localhost:0"}
        body = {"resources": [{"resource_type": 4, "resource_name": "", "configs": [entry]}], "validate_only": False}
        (answer,) = wire(bootstrap, codec.ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body)["responses"]
        assert answer["error_code"] == KafkaError.INVALID_REQUEST, answer
        (led,) = [
            p.id for p in confluent_admin.list_topics(topic).topics[topic].partitions.values() if p.leader == broker
        ][:1]
        producer = Producer({"bootstrap.servers": bootstrap})
        delivered = []
        producer.produce(
            topic, b"through localhost", partition=led, on_delivery=lambda e, m: delivered.append((e, m.offset()))
        )
        assert producer.flush(CALL_TIMEOUT_S) == 0
        assert [e for e, _ in delivered] == [None]
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": fresh_name("adv")})
        try:
            consumer.assign([TopicPartition(topic, led, delivered[0][1])])
            message = wait_until(lambda: consumer.poll(1.0), message="the record read from broker 1")
            assert (message.error(), message.value()) == (None, b"through localhost")
        finally:
            consumer.close()
    finally:
        alter(str(broker), None)
    # Nothing left behind for the next tests: every listener advertises broker 1 where it was
    # (each caches the controller's metadata for a second: the next test's DescribeCluster
    # got localhost from another listener, the suite beside a busy core), and the shared
    # admin client has moved back (a first request on its closed connection failed in transport).
    everyone = sorted(bootstrap.split(","))
    wait_until(
        lambda: all(_advertised_by(address) == everyone for address in everyone),
        message="every listener advertising broker 1 at 127.0.0.1 again",
    )
    at_its_new_address(its_configs)


def test_kafka_python_admin_alters_configs_both_ways(bootstrap, kafka_admin, kafka_topic):
    """kafka-python 3 alters incrementally when the broker offers IncrementalAlterConfigs, and
    with AlterConfigs when told to."""
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    topic = kafka_topic(1)
    client = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(CALL_TIMEOUT_S * 1000))
    try:
        client.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "7200000"})])
        client.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, configs={"segment.ms": "900000"})], incremental=False
        )
    finally:
        client.close()
    described = kafka_admin.describe_configs([topic])[topic]
    assert (described["segment.ms"].value, described["segment.ms"].source) == ("900000", "topic")
    # kafka-python fills in the other overrides before an AlterConfigs, so retention.ms stays
    assert (described["retention.ms"].value, described["retention.ms"].source) == ("7200000", "topic")


def test_admin_clients_describe_the_cluster(confluent_admin, bootstrap, kafka_cluster):
    """DescribeCluster: the cluster id and every live broker's listener, as Metadata names them
    (confluent-kafka's and kafka-python's describe_cluster)."""
    from kafka.admin import KafkaAdminClient

    listeners = sorted(bootstrap.split(","))
    described = confluent_admin.describe_cluster(request_timeout=CALL_TIMEOUT_S).result(timeout=CALL_TIMEOUT_S)
    assert sorted(f"{n.host}:{n.port}" for n in described.nodes) == listeners
    assert described.cluster_id and described.controller.id == min(n.id for n in described.nodes)
    client = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(CALL_TIMEOUT_S * 1000))
    try:
        cluster = client.describe_cluster()
    finally:
        client.close()
    assert sorted(f"{b['host']}:{b['port']}" for b in cluster["brokers"]) == listeners
    assert cluster["cluster_id"] == described.cluster_id


def test_admin_clients_elect_leaders_preferred_and_unclean(confluent_admin, bootstrap, kafka_admin, kafka_topic):
    """ElectLeaders: confluent-kafka's elect_leaders moves a partition's leadership to its
    preferred replica (first in its replica list, reordered here by a reassignment) and says
    ELECTION_NOT_NEEDED where it leads already; kafka-python's asks an unclean election, not
    needed while the leader lives, and an unknown partition gets UNKNOWN_TOPIC_OR_PARTITION."""
    from confluent_kafka import ElectionType, KafkaError
    from confluent_kafka import TopicPartition as KafkaTopicPartition
    from kafka.admin import KafkaAdminClient

    topic = kafka_topic(num_partitions=2, replication_factor=3)
    before = kafka_admin.describe_topics([topic])[0].partitions[0]
    reordered = [r for r in before.replicas if r != before.leader] + [before.leader]
    kafka_admin.alter_partition_reassignments({TopicPartition(topic, 0): reordered})
    wait_until(lambda: not kafka_admin.list_partition_reassignments(), timeout_s=60, message="the reassignment")
    assert kafka_admin.describe_topics([topic])[0].partitions[0].leader == before.leader  # not preferred now

    asked = [KafkaTopicPartition(topic, 0), KafkaTopicPartition(topic, 1)]
    future = confluent_admin.elect_leaders(ElectionType.PREFERRED, asked)
    results = {(tp.topic, tp.partition): error for tp, error in future.result(timeout=CALL_TIMEOUT_S).items()}
    assert results[(topic, 0)] is None
    assert results[(topic, 1)].code() == KafkaError.ELECTION_NOT_NEEDED  # (a KafkaError, not raised)
    assert kafka_admin.describe_topics([topic])[0].partitions[0].leader == reordered[0]

    client = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(CALL_TIMEOUT_S * 1000))
    try:
        answer = client.elect_leaders(1, {topic: [0, 1, 7]}, raise_errors=False)
    finally:
        client.close()
    codes = {
        (r.topic, p.partition_id): p.error_code for r in answer.replica_election_results for p in r.partition_result
    }
    assert codes == {(topic, 0): 84, (topic, 1): 84, (topic, 7): 3}


def test_kafka_python_moves_lists_and_cancels_partition_reassignments(bootstrap, kafka_admin, kafka_topic):
    """AlterPartitionReassignments / ListPartitionReassignments with kafka-python's admin: a
    partition moved to other brokers ends on exactly them (listed meanwhile with the replicas
    being added and removed), a cancel where none is under way is
    NO_REASSIGNMENT_IN_PROGRESS, an unknown partition UNKNOWN_TOPIC_OR_PARTITION."""
    from kafka import TopicPartition as KafkaTopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.errors import NoReassignmentInProgressError, UnknownTopicOrPartitionError

    topic = kafka_topic(num_partitions=2, replication_factor=1)
    (start,) = kafka_admin.describe_topics([topic])[0].partitions[0].replicas
    target = sorted({b for b in kafka_admin.describe_cluster()} - {start})
    moved, other, unknown = (KafkaTopicPartition(topic, p) for p in (0, 1, 9))
    client = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(CALL_TIMEOUT_S * 1000))
    try:
        assert client.alter_partition_reassignments({moved: target, other: None, unknown: [start]}) == {
            moved: None,
            other: NoReassignmentInProgressError,
            unknown: UnknownTopicOrPartitionError,
        }
        listed = client.list_partition_reassignments({topic: [0, 1]})
        assert listed in (
            {},
            {moved: {"replicas": [*target, start], "adding_replicas": target, "removing_replicas": [start]}},
        )
        wait_until(lambda: partitions_of(kafka_admin, topic)[0] == tuple(target), timeout_s=60, message="the move")
        wait_until(lambda: client.list_partition_reassignments([moved]) == {}, timeout_s=60, message="an empty list")
    finally:
        client.close()


def test_records_below_an_offset_are_deleted_on_every_replica_by_each_client(
    bootstrap, confluent_admin, kafka_admin, kafka_cluster, kafka_topic
):
    """DeleteRecords: confluent-kafka's, kafka-python's and aiokafka's delete_records and
    raylog's Admin.delete_records move a 3-replica partition's log start, answered with the
    low watermark once every in-sync replica deleted them; reads below it are
    OFFSET_OUT_OF_RANGE and the earliest offset is the new start. Past the high watermark is
    OFFSET_OUT_OF_RANGE, a compact-only topic POLICY_VIOLATION."""
    import asyncio

    import ray
    from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka import TopicPartition as KafkaTopicPartition
    from kafka import TopicPartition as KafkaPythonTopicPartition
    from kafka.admin import KafkaAdminClient

    from raylog import Consumer, Producer
    from raylog.errors import OffsetOutOfRangeError, PolicyViolationError

    topic = kafka_topic(num_partitions=1, replication_factor=3)
    tp = TopicPartition(topic, 0)
    with Producer(kafka_cluster, acks="all") as producer:
        for i in range(20):
            producer.send(topic, b"%d" % i, partition=0)
    futures = confluent_admin.delete_records([KafkaTopicPartition(topic, 0, 5)], request_timeout=CALL_TIMEOUT_S)
    assert futures[KafkaTopicPartition(topic, 0, 5)].result(timeout=CALL_TIMEOUT_S).low_watermark == 5
    client = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(CALL_TIMEOUT_S * 1000))
    try:
        answer = client.delete_records({KafkaPythonTopicPartition(topic, 0): 8})
    finally:
        client.close()
    assert answer[KafkaPythonTopicPartition(topic, 0)]["low_watermark"] == 8

    async def aiokafka_delete() -> dict:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            return await admin.delete_records({tp: RecordsToDelete(before_offset=10)}, timeout_ms=30_000)
        finally:
            await admin.close()

    assert list(asyncio.run(aiokafka_delete()).values()) == [10]
    assert kafka_admin.delete_records({tp: 12}) == {tp: 12}
    replicas = ray.get(kafka_cluster.controller.replica_handles.remote(topic), timeout=CALL_TIMEOUT_S)
    assert [s["log_start_offset"] for s in ray.get([h.state.remote() for h in replicas.values()])] == [12, 12, 12]
    consumer = Consumer(kafka_cluster, auto_offset_reset="earliest")
    try:
        consumer.assign([tp])
        consumer.seek(tp, 3)  # below the log start: OFFSET_OUT_OF_RANGE, reset to the earliest
        first = wait_until(lambda: consumer.poll(timeout_ms=1_000).get(tp), timeout_s=CALL_TIMEOUT_S)
        assert (first[0].offset, first[0].value) == (12, b"12")
        assert consumer.beginning_offsets([tp]) == {tp: 12}
    finally:
        consumer.close()
    with pytest.raises(OffsetOutOfRangeError):
        kafka_admin.delete_records({tp: 21})
    compacted = kafka_topic(num_partitions=1, **{"cleanup.policy": "compact"})
    with pytest.raises(PolicyViolationError):
        kafka_admin.delete_records({TopicPartition(compacted, 0): -1})
    futures = confluent_admin.delete_records([KafkaTopicPartition(compacted, 0, -1)], request_timeout=CALL_TIMEOUT_S)
    with pytest.raises(KafkaException) as refused:
        next(iter(futures.values())).result(timeout=CALL_TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.POLICY_VIOLATION


def test_delete_records_ends_the_followers_long_polls_rather_than_waiting_them_out(
    kafka_admin, kafka_cluster, kafka_topic
):
    """DeleteRecords is answered once every in-sync follower deleted too: the leader ends the
    followers' parked fetches when its log start moves, so they follow at once, not when a
    long poll of replica.fetch.wait.max.ms (25 s here) would have ended by itself."""
    import ray

    from raylog import Producer

    topic = kafka_topic(num_partitions=1, replication_factor=3, **{"replica.fetch.wait.max.ms": "25000"})
    tp = TopicPartition(topic, 0)
    with Producer(kafka_cluster, acks="all") as producer:
        for i in range(10):
            producer.send(topic, b"%d" % i, partition=0)
    replicas = ray.get(kafka_cluster.controller.replica_handles.remote(topic), timeout=CALL_TIMEOUT_S)
    leader = replicas[(0, kafka_cluster.metadata(refresh=True).topics[topic].partitions[0].leader)]

    def followers_parked() -> bool:  # every replica has the records, both followers' fetches wait
        ends = [s["log_end_offset"] for s in ray.get([h.state.remote() for h in replicas.values()])]
        return ends == [10] * 3 and ray.get(leader.state.remote())["waiting"].get("replication") == 2

    wait_until(followers_parked, timeout_s=CALL_TIMEOUT_S)
    assert kafka_admin.delete_records({tp: 5}, timeout_ms=10_000) == {tp: 5}
    assert [s["log_start_offset"] for s in ray.get([h.state.remote() for h in replicas.values()])] == [5, 5, 5]


def test_kafka_python_describes_each_brokers_log_directory(bootstrap, kafka_admin, kafka_cluster, kafka_topic):
    """DescribeLogDirs with kafka-python's admin: each broker answers its data directory with
    the replicas it holds there, each with its size on disk (the records written), and the
    disk's total and usable bytes."""
    from kafka.admin import KafkaAdminClient

    from raylog import Producer

    topic = kafka_topic(num_partitions=1, replication_factor=3)
    with Producer(kafka_cluster, acks="all") as producer:
        for _ in range(10):
            producer.send(topic, os.urandom(1000), partition=0)
    brokers = kafka_cluster.metadata(refresh=True).brokers
    client = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(CALL_TIMEOUT_S * 1000))
    try:
        described = client.describe_log_dirs({topic: [0]})
    finally:
        client.close()
    assert sorted(d["broker"] for d in described) == sorted(brokers)
    for answer in described:
        (log_dir,) = answer["log_dirs"]
        assert log_dir["error_code"] == 0 and log_dir["log_dir"] == brokers[answer["broker"]].data_dir
        assert 0 < log_dir["usable_bytes"] <= log_dir["total_bytes"]
        ((name, partitions),) = [(t["name"], t["partitions"]) for t in log_dir["topics"]]
        ((index, size),) = [(p["partition_index"], p["partition_size"]) for p in partitions]
        assert (name, index) == (topic, 0) and size > 10_000


def test_client_quotas_altered_and_described_over_the_wire_are_raylogs(bootstrap, kafka_admin):
    """AlterClientQuotas and DescribeClientQuotas (what kafka-configs.sh --entity-type clients
    sends; none of the Python clients here has them) set and read the quotas raylog's Admin
    sees, and a user entity is refused."""
    client_id = fresh_name("quota-client")
    entity = [{"entity_type": "client-id", "entity_name": client_id}]
    ops = [{"key": "producer_byte_rate", "value": 2048.0, "remove": False}]
    answer = wire(bootstrap, codec.ApiKey.ALTER_CLIENT_QUOTAS, 1, {"entries": [{"entity": entity, "ops": ops}]})
    assert [e["error_code"] for e in answer["entries"]] == [0]
    try:
        assert kafka_admin.describe_client_quotas()[client_id] == {"producer_byte_rate": 2048.0}
        components = [{"entity_type": "client-id", "match_type": 0, "match": client_id}]
        described = wire(bootstrap, codec.ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, {"components": components})
        assert [(e["entity"], e["values"]) for e in described["entries"]] == [
            (entity, [{"key": "producer_byte_rate", "value": 2048.0}])
        ]
        user = [{"entity_type": "user", "entity_name": "alice"}]
        refused = wire(bootstrap, codec.ApiKey.ALTER_CLIENT_QUOTAS, 0, {"entries": [{"entity": user, "ops": ops}]})
        assert [e["error_code"] for e in refused["entries"]] == [42]
    finally:
        kafka_admin.alter_client_quotas({client_id: {"producer_byte_rate": None}})
