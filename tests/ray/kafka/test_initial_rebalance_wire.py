"""``group.initial.rebalance.delay.ms`` with confluent-kafka in its default settings (librdkafka
test 0113): consumers that subscribe to a new group together form one generation, each told
its share once, rather than the first taking every partition and giving half back a moment
later."""

from __future__ import annotations

import threading
import uuid

from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import Producer as KafkaProducer

from tests.helpers import wait_until

#: Bound on each client step.
STEP_S = 60


def test_consumers_starting_together_on_an_empty_group_form_one_generation(kafka_defaults_cluster):
    bootstrap = kafka_defaults_cluster.bootstrap_servers()
    topic, group = f"initial-{uuid.uuid4().hex[:8]}", f"initial-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer({"bootstrap.servers": bootstrap})
    producer.produce(topic, b"creates the topic, 2 partitions")
    assert producer.flush(STEP_S) == 0
    assigned: dict[str, list[list[int]]] = {"a": [], "b": []}
    stop = threading.Event()

    def consume(name: str) -> None:
        consumer = KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": group})
        try:
            consumer.subscribe(
                [topic], on_assign=lambda _c, partitions: assigned[name].append(sorted(p.partition for p in partitions))
            )
            while not stop.is_set():
                consumer.poll(0.2)
        finally:
            consumer.close()

    threads = [threading.Thread(target=consume, args=(name,), daemon=True) for name in assigned]
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: all(assigned.values()), timeout_s=STEP_S, message="both consumers assigned")
    finally:
        stop.set()
        for thread in threads:
            thread.join(STEP_S)
    # One generation: each was assigned once, one partition each (with no delay, the first
    # would get both partitions, then be revoked and assigned again when the second joined).
    assert assigned["a"] in ([[0]], [[1]]) and assigned["b"] in ([[0]], [[1]]), assigned
    assert assigned["a"] != assigned["b"]
