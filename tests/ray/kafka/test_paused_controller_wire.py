"""Kafka clients (confluent-kafka, default settings) keep writing, reading and committing through
raylog's listeners while the controller's process is stopped: a listener waits briefly for
the controller's new metadata, then serves from its cache however old, and hands out
producer ids from a block it holds (KIP-730), as Kafka's brokers do whatever the controller
does. A listener that started a moment before the pause serves too: it asks for metadata as
it starts, not at its first client's request (whose Metadata then waited for the silent
controller: 7 of 12 fresh idempotent producers wrote nothing in 20 s)."""

from __future__ import annotations

import time

import ray
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import Producer as KafkaProducer

from raylog.actors.kafka.context import METADATA_MAX_AGE_S
from raylog.actors.kafka.fleet import listener_name
from raylog.common.names import NAMESPACE
from tests.helpers import paused_controller, wait_until

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


def _restart_a_listener(kafka_cluster) -> str:
    """Kill a broker's listener and wait until the controller's new one (on the same port) and
    every other listener have in their metadata caches what the controller now lists, without
    sending any of them a request; its ``host:port``."""
    metadata = kafka_cluster.metadata(refresh=True)
    broker = min(metadata.listeners)
    names = {b: listener_name(kafka_cluster.cluster_name, b, metadata.brokers[b].node_id) for b in metadata.listeners}
    ray.kill(ray.get_actor(names[broker], namespace=NAMESPACE))
    wait_until(
        lambda: kafka_cluster.metadata(refresh=True).listeners == metadata.listeners,
        timeout_s=120,
        message="the controller listing every listener where it was",
    )

    def cached(name: str) -> bool:
        try:
            listener = ray.get_actor(name, namespace=NAMESPACE)
            cached_listeners = ray.get(listener.__ray_call__.remote(_cached_listeners), timeout=5)
            return cached_listeners == metadata.listener_endpoints
        except (ValueError, ray.exceptions.RayError):
            return False  # not started again yet

    wait_until(
        lambda: all(cached(name) for name in names.values()),
        timeout_s=60,
        message="every listener's cached metadata listing every listener",
    )
    host, port = metadata.listeners[broker]
    return f"{host}:{port}"


def _cached_listeners(listener) -> dict | None:
    cached = listener.context._metadata
    return None if cached is None else cached["listeners"]


def test_kafka_clients_go_on_while_the_controller_is_paused(bootstrap, kafka_cluster, kafka_topic):
    topic = kafka_topic(replication_factor=3, **{"min.insync.replicas": "2"})
    restarted = _restart_a_listener(kafka_cluster)  # before this test's clients can ask it anything
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
            # One whose first request reaches the listener that started just before the pause.
            late = KafkaProducer({"bootstrap.servers": restarted, "enable.idempotence": True})
            late.produce(topic, b"late")
            assert late.flush(PAUSED_BOUND_S) == 0, "a new listener's first client wrote nothing"
            assert _consume(consumer, 2 * COUNT + 1) == paused + started + [b"late"], "not read while paused"
            committed = consumer.commit(asynchronous=False)
            assert [(c.topic, c.offset, c.error) for c in committed] == [(topic, 3 * COUNT + 1, None)]
    finally:
        consumer.close()
