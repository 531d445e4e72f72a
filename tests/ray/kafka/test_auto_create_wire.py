"""Kafka's automatic topic creation (``auto.create.topics.enable``, librdkafka test 0033) with
confluent-kafka in its default settings: its producer creates the topic it writes to when the
cluster allows it, its consumer never does, and a cluster left at raylog's default (off)
creates nothing."""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import Producer as KafkaProducer

from raylog import Admin

#: Bound on each client step.
STEP_S = 60


def test_a_producer_creates_the_topic_it_writes_to_and_a_consumer_does_not(kafka_defaults_cluster):
    bootstrap = kafka_defaults_cluster.bootstrap_servers()
    written, unread = f"auto-{uuid.uuid4().hex[:8]}", f"auto-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer({"bootstrap.servers": bootstrap})
    producer.produce(written, b"first")
    assert producer.flush(STEP_S) == 0, "not delivered"
    consumer = KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": unread})
    try:
        consumer.subscribe([unread])
        consumer.poll(2)  # its metadata asks for the topic without allowing its creation
    finally:
        consumer.close()
    admin = Admin(kafka_defaults_cluster)
    assert len(admin.describe_topics([written])[0].partitions) == 2  # num.partitions
    assert unread not in admin.list_topics()


def test_a_cluster_left_at_the_default_creates_nothing(kafka_cluster, bootstrap, kafka_admin):
    name = f"auto-{uuid.uuid4().hex[:8]}"
    reports = []
    producer = KafkaProducer({"bootstrap.servers": bootstrap, "message.timeout.ms": 3000})
    producer.produce(name, b"refused", on_delivery=lambda error, _message: reports.append(error))
    assert producer.flush(STEP_S) == 0
    assert len(reports) == 1 and reports[0] is not None  # failed once message.timeout.ms passed
    assert name not in kafka_admin.list_topics()
