"""Kafka clients (confluent-kafka, default settings) keep writing, reading and committing through
raylog's listeners while the controller's process is stopped: a listener waits briefly for
the controller's new metadata, then serves from its cache however old, and hands out
producer ids from a block it holds (KIP-730), as Kafka's brokers do whatever the controller
does."""

from __future__ import annotations

import time

from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import Producer as KafkaProducer

from raylog.actors.kafka.context import METADATA_MAX_AGE_S
from tests.helpers import paused_controller

#: Bound on each step made while the controller is paused (it is resumed after the test).
PAUSED_BOUND_S = 20
COUNT = 10


def _consume(consumer: KafkaConsumer, count: int) -> list[bytes]:
    values: list[bytes] = []
    deadline = time.monotonic() + PAUSED_BOUND_S
    while len(values) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None:
            assert message.error() is None, message.error()
            values.append(message.value())
    return values


def test_kafka_clients_go_on_while_the_controller_is_paused(bootstrap, kafka_cluster, kafka_topic):
    topic = kafka_topic(replication_factor=3, **{"min.insync.replicas": "2"})
    producer = KafkaProducer({"bootstrap.servers": bootstrap})
    consumer = KafkaConsumer(
        {"bootstrap.servers": bootstrap, "group.id": f"{topic}-group", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    before = [b"before-%d" % i for i in range(COUNT)]
    paused = [b"paused-%d" % i for i in range(COUNT)]
    started = [b"started-%d" % i for i in range(COUNT)]
    try:
        for value in before:
            producer.produce(topic, value)
        assert producer.flush(PAUSED_BOUND_S) == 0
        assert _consume(consumer, COUNT) == before
        with paused_controller(kafka_cluster):
            time.sleep(METADATA_MAX_AGE_S * 1.5)  # every listener's cached metadata is now past its age
            for value in paused:
                producer.produce(topic, value)
            assert producer.flush(PAUSED_BOUND_S) == 0, "not acknowledged while the controller was paused"
            # A producer that starts now gets its producer id from the ids its listener holds.
            idempotent = KafkaProducer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
            for value in started:
                idempotent.produce(topic, value)
            assert idempotent.flush(PAUSED_BOUND_S) == 0, "an idempotent producer started while paused wrote nothing"
            assert _consume(consumer, 2 * COUNT) == paused + started, "not read while the controller was paused"
            committed = consumer.commit(asynchronous=False)
            assert [(c.topic, c.offset, c.error) for c in committed] == [(topic, 3 * COUNT, None)]
    finally:
        consumer.close()
