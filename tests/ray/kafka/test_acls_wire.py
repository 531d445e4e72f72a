"""Kafka's ACLs over raylog's Kafka listeners, with clients nobody here wrote: confluent-kafka's
and kafka-python's admin clients create, describe and delete ACLs that raylog's Admin sees;
producers, consumers, groups and transactional ids the ACLs deny are refused with the errors
those clients expect while the rest is served; a deleted ACL stops applying on connections
already open. ``kafka_cluster`` runs the authorizer with allow.everyone.if.no.acl.found, and
every client here is User:ANONYMOUS (the listeners do not authenticate yet), so the ACLs
name ``User:*``; each test deletes its own.
"""

from __future__ import annotations

import uuid

import pytest

from raylog import ACL, ACLFilter, ACLOperation, ACLPermissionType, PatternType, ResourcePattern, ResourceType
from raylog.errors import SecurityDisabledError
from tests.helpers import wait_until

#: A bound on one client call or on an ACL change reaching every listener (not a measure:
#: the listeners apply a change at their next metadata answer, within about a second).
TIMEOUT_S = 30.0
EVERYONE = "User:*"


def binding(operation, resource_type, name, permission=ACLPermissionType.DENY) -> ACL:
    return ACL(EVERYONE, "*", operation, permission, ResourcePattern(resource_type, name))


@pytest.fixture
def acls(kafka_admin):
    """``acls(*acl)`` creates ACLs through raylog's Admin; every ACL on the cluster is deleted
    after the test (tests that create ACLs over the wire are cleaned up too)."""

    def create(*made: ACL) -> None:
        kafka_admin.create_acls(list(made))

    yield create
    kafka_admin.delete_acls([ACLFilter()])


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def delivery_error(bootstrap: str, topic: str, **config) -> str | None:
    """The error name of one record's delivery to ``topic`` by a fresh confluent-kafka
    producer (None: delivered)."""
    from confluent_kafka import Producer

    outcome: list = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10_000, **config})
    producer.produce(topic, b"v", on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(TIMEOUT_S)
    assert outcome, "no delivery report"
    return None if outcome[0] is None else outcome[0].name()


def test_confluent_and_kafka_python_admins_create_describe_and_delete_acls(bootstrap, kafka_admin, acls):
    from confluent_kafka.admin import AclBinding, AclBindingFilter, AdminClient
    from confluent_kafka.admin import AclOperation as CkOperation
    from confluent_kafka.admin import AclPermissionType as CkPermission
    from confluent_kafka.admin import ResourcePatternType as CkPatternType
    from confluent_kafka.admin import ResourceType as CkResourceType
    from kafka.admin import ACL as KpACL
    from kafka.admin import ACLFilter as KpACLFilter
    from kafka.admin import ACLOperation as KpOperation
    from kafka.admin import ACLPermissionType as KpPermission
    from kafka.admin import ACLResourcePatternType, KafkaAdminClient
    from kafka.admin import ResourcePattern as KpPattern
    from kafka.admin import ResourcePatternFilter as KpPatternFilter
    from kafka.admin import ResourceType as KpResourceType

    topic = fresh("acl-ck")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    made = AclBinding(
        CkResourceType.TOPIC, topic, CkPatternType.PREFIXED, EVERYONE, "*", CkOperation.READ, CkPermission.ALLOW
    )
    assert admin.create_acls([made])[made].result(timeout=TIMEOUT_S) is None
    expected = ACL(
        EVERYONE,
        "*",
        ACLOperation.READ,
        ACLPermissionType.ALLOW,
        ResourcePattern(ResourceType.TOPIC, topic, PatternType.PREFIXED),
    )
    assert kafka_admin.describe_acls(ACLFilter.exactly(expected)) == [expected]
    any_of_topic = AclBindingFilter(
        CkResourceType.TOPIC, topic, CkPatternType.ANY, None, None, CkOperation.ANY, CkPermission.ANY
    )
    assert admin.describe_acls(any_of_topic).result(timeout=TIMEOUT_S) == [made]
    deleted = admin.delete_acls([any_of_topic])[any_of_topic].result(timeout=TIMEOUT_S)
    assert deleted == [made] and kafka_admin.describe_acls(ACLFilter.exactly(expected)) == []

    group = fresh("acl-kp")
    client = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        kp = KpACL(EVERYONE, "*", KpOperation.DESCRIBE, KpPermission.DENY, KpPattern(KpResourceType.GROUP, group))
        created = client.create_acls([kp])
        assert not created["failed"] and len(created["succeeded"]) == 1
        as_raylog = binding(ACLOperation.DESCRIBE, ResourceType.GROUP, group)
        assert kafka_admin.describe_acls(ACLFilter.exactly(as_raylog)) == [as_raylog]
        kp_filter = KpACLFilter(
            None,
            None,
            KpOperation.ANY,
            KpPermission.ANY,
            KpPatternFilter(KpResourceType.GROUP, group, ACLResourcePatternType.ANY),
        )
        described, error = client.describe_acls(kp_filter)
        assert error.errno == 0 and [(a.principal, a.operation) for a in described] == [
            (EVERYONE, KpOperation.DESCRIBE)
        ]
        results = client.delete_acls([kp_filter])
        [(_, matched, error)] = results
        assert error.errno == 0 and len(matched) == 1 and kafka_admin.describe_acls(ACLFilter.exactly(as_raylog)) == []
    finally:
        client.close()


def test_a_topic_denied_to_everyone_is_refused_and_hidden_while_others_are_served(bootstrap, kafka_topic, acls):
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient

    denied, allowed = kafka_topic(), kafka_topic()
    acls(binding(ACLOperation.ALL, ResourceType.TOPIC, denied))
    wait_until(lambda: delivery_error(bootstrap, denied) == "TOPIC_AUTHORIZATION_FAILED", TIMEOUT_S, 0.5, "denial")
    assert delivery_error(bootstrap, allowed) is None
    listed = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=TIMEOUT_S).topics
    assert allowed in listed and denied not in listed  # on every broker: CreateAcls returned once all had it

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": fresh("g"), "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([denied])
        errors = []
        wait_until(lambda: _consumer_error(consumer, errors), TIMEOUT_S, 0.0, "a consumer error")
        assert errors[0] == "TOPIC_AUTHORIZATION_FAILED"
    finally:
        consumer.close()


def _consumer_error(consumer, errors: list) -> bool:
    message = consumer.poll(0.5)
    if message is not None and message.error() is not None:
        errors.append(message.error().name())
    return bool(errors)


def test_describe_without_read_lets_a_consumer_see_the_topic_but_not_read_it(bootstrap, kafka_topic, acls):
    """librdkafka's 0119 pattern: records written, then DESCRIBE allowed and READ denied:
    Fetch answers TOPIC_AUTHORIZATION_FAILED. WRITE is now refused too although no ACL denies
    it: ACLs name the topic now, so allow.everyone.if.no.acl.found no longer applies to it
    (Kafka's rule) and none allows WRITE."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import TopicAuthorizationFailedError

    topic = kafka_topic()
    assert delivery_error(bootstrap, topic) is None
    acls(
        binding(ACLOperation.DESCRIBE, ResourceType.TOPIC, topic, ACLPermissionType.ALLOW),
        binding(ACLOperation.READ, ResourceType.TOPIC, topic),
    )
    assert delivery_error(bootstrap, topic) == "TOPIC_AUTHORIZATION_FAILED"
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=1000)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        with pytest.raises(TopicAuthorizationFailedError):
            wait_until(lambda: consumer.poll(timeout_ms=500) and False, TIMEOUT_S, 0.0, "a refused fetch")
    finally:
        consumer.close()


def test_a_group_or_transactional_id_without_permission_is_refused(bootstrap, kafka_topic, acls):
    from confluent_kafka import KafkaException, Producer
    from kafka import KafkaConsumer
    from kafka.errors import GroupAuthorizationFailedError

    topic, group, transactional_id = kafka_topic(), fresh("g"), fresh("tx")
    acls(
        binding(ACLOperation.READ, ResourceType.GROUP, group),
        binding(ACLOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id),
    )
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest")
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            wait_until(lambda: consumer.poll(timeout_ms=500) and False, TIMEOUT_S, 0.0, "a refused join")
    finally:
        consumer.close()
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    with pytest.raises(KafkaException) as refused:
        producer.init_transactions(TIMEOUT_S)
    assert refused.value.args[0].name() == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"


def test_a_deleted_acl_stops_applying_on_an_open_connection(bootstrap, kafka_topic, kafka_admin, acls):
    """One producer, one connection per broker: denied, the ACL deleted, then served."""
    from confluent_kafka import KafkaException, Producer

    topic = kafka_topic()
    denial = binding(ACLOperation.WRITE, ResourceType.TOPIC, topic)
    acls(denial)
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 3_000, "retries": 0})
    outcome: list = []

    def sent_error():
        outcome.clear()
        try:
            producer.produce(topic, b"v", on_delivery=lambda err, msg: outcome.append(err))
        except KafkaException as exc:  # the topic's error as librdkafka knows it, at once
            return exc.args[0].name()
        producer.flush(TIMEOUT_S)
        return outcome[0].name() if outcome and outcome[0] is not None else None

    wait_until(lambda: sent_error() == "TOPIC_AUTHORIZATION_FAILED", TIMEOUT_S, 0.5, "denial")
    assert kafka_admin.delete_acls([ACLFilter.exactly(denial)]) == [denial]
    wait_until(lambda: sent_error() is None, TIMEOUT_S, 0.5, "the deletion applied")


def test_acl_requests_need_alter_on_the_cluster(bootstrap, acls):
    from confluent_kafka.admin import AclBinding, AdminClient
    from confluent_kafka.admin import AclOperation as CkOperation
    from confluent_kafka.admin import AclPermissionType as CkPermission
    from confluent_kafka.admin import ResourcePatternType as CkPatternType
    from confluent_kafka.admin import ResourceType as CkResourceType

    acls(binding(ACLOperation.ALTER, ResourceType.CLUSTER, "kafka-cluster"))
    admin = AdminClient({"bootstrap.servers": bootstrap})
    made = AclBinding(
        CkResourceType.TOPIC, fresh("t"), CkPatternType.LITERAL, EVERYONE, "*", CkOperation.READ, CkPermission.ALLOW
    )

    def refused() -> bool:
        try:
            admin.create_acls([made])[made].result(timeout=TIMEOUT_S)
            return False
        except Exception as exc:  # noqa: BLE001 — confluent-kafka's KafkaException
            return exc.args[0].name() == "CLUSTER_AUTHORIZATION_FAILED"

    wait_until(refused, TIMEOUT_S, 0.5, "CreateAcls refused")


def test_without_an_authorizer_acl_requests_are_security_disabled(kafka_defaults_cluster):
    """(confluent-kafka's describe_acls does not raise a DescribeAcls response's error:
    librdkafka reads the code and returns the empty list.)"""
    from kafka.admin import ACLFilter as KpACLFilter
    from kafka.admin import ACLOperation as KpOperation
    from kafka.admin import ACLPermissionType as KpPermission
    from kafka.admin import ACLResourcePatternType, KafkaAdminClient
    from kafka.admin import ResourcePatternFilter as KpPatternFilter
    from kafka.admin import ResourceType as KpResourceType

    from raylog import Admin

    client = KafkaAdminClient(bootstrap_servers=kafka_defaults_cluster.bootstrap_servers())
    try:
        every = KpPatternFilter(KpResourceType.ANY, None, ACLResourcePatternType.ANY)
        _, error = client.describe_acls(KpACLFilter(None, None, KpOperation.ANY, KpPermission.ANY, every))
    except Exception as exc:  # noqa: BLE001 — kafka-python raises some errors instead of returning them
        error = exc
    finally:
        client.close()
    assert type(error).__name__ == "SecurityDisabledError"
    with pytest.raises(SecurityDisabledError):
        Admin(kafka_defaults_cluster).describe_acls()
