"""Outside Kafka clients' one-shot calls shared by the wire tests of the security protocols."""

from __future__ import annotations

import uuid

from raylog import (
    ACL,
    ACLOperation,
    ACLPermissionType,
    Admin,
    Consumer,
    NewTopic,
    ResourcePattern,
    ResourceType,
    TopicPartition,
)
from tests.helpers import wait_until

#: A bound on one client call (not a measure).
TIMEOUT_S = 30.0


def granted_topic(cluster, principal: str, group: str) -> str:
    """A new 1-partition topic that ``principal`` may write and read, as a member of ``group``
    (made with raylog's own Admin, as the user of the ``cluster`` handle)."""
    admin = Admin(cluster)
    name = f"granted-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, 1, 1)])

    def allow(operation: ACLOperation, kind: ResourceType, resource: str) -> ACL:
        return ACL(principal, "*", operation, ACLPermissionType.ALLOW, ResourcePattern(kind, resource))

    admin.create_acls(
        [
            allow(ACLOperation.WRITE, ResourceType.TOPIC, name),
            allow(ACLOperation.READ, ResourceType.TOPIC, name),
            allow(ACLOperation.READ, ResourceType.GROUP, group),
        ]
    )
    return name


def deliver(bootstrap: str, topic: str, value: bytes, **config) -> str | None:
    """One record sent by a fresh confluent-kafka producer: None once delivered, else the name
    of the first error it met (an authentication error as soon as librdkafka reports it; the
    record then purged, never sent)."""
    from confluent_kafka import Producer

    outcome: list = []
    errors: list = []
    producer = Producer(
        {"bootstrap.servers": bootstrap, "message.timeout.ms": 10_000, "error_cb": errors.append, **config}
    )
    producer.produce(topic, value, on_delivery=lambda err, msg: outcome.append(err))
    wait_until(lambda: (producer.poll(0.1), outcome or errors)[1], timeout_s=TIMEOUT_S, message="an outcome")
    if outcome and outcome[0] is None:
        return None
    producer.purge()
    producer.flush(TIMEOUT_S)
    return (errors or outcome)[0].name()


def first_message(bootstrap: str, topic: str, group: str, **config):
    """The first message (or error) a fresh confluent-kafka consumer of ``group`` polls from
    ``topic``, from its start."""
    from confluent_kafka import Consumer as CkConsumer

    settings = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest", **config}
    consumer = CkConsumer(settings)
    try:
        consumer.subscribe([topic])
        return wait_until(lambda: consumer.poll(1.0), timeout_s=TIMEOUT_S, message="a first message")
    finally:
        consumer.close()


def records_of(cluster, topic: str) -> list[bytes]:
    """Every record of ``topic``'s partition 0, read by raylog's own Consumer."""
    with Consumer(cluster, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        out: list[bytes] = []
        while batch := consumer.poll(timeout_ms=1000).get(TopicPartition(topic, 0)):
            out += [r.value for r in batch]
        return out
