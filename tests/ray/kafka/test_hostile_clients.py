"""The Kafka listener against clients that send what no well-behaved client sends, over real
sockets to the ``kafka_cluster`` listeners: every answer still goes out, or the connection is
closed as Kafka closes it, and the connection (or the broker) keeps serving the others."""

from __future__ import annotations

import uuid

import pytest
import ray

from raylog.actors.kafka.listener import KafkaListenerActor
from raylog.chaos import fuzz_wire
from raylog.config import ControllerConfig, Listener
from raylog.errors import InvalidConfigError
from raylog.kafka import codec
from tests.kafka_wire import Wire

ApiKey = codec.ApiKey


@pytest.fixture
def wire(bootstrap):
    connection = Wire(bootstrap.split(",")[0])
    yield connection
    connection.close()


@pytest.mark.parametrize("version", [2, 4, 7])
def test_a_create_topics_echoing_a_long_config_value_is_answered_and_the_connection_goes_on(wire, version):
    """A config value of 32,767 bytes (the most an int16 string holds) is refused with INVALID_CONFIG and
    a message that fits the response; before, the echo did not encode and the connection never
    answered again."""
    name = f"hostile-{uuid.uuid4().hex[:8]}"
    topic = {
        "name": name,
        "num_partitions": 1,
        "replication_factor": 1,
        "assignments": [],
        "configs": [{"name": "retention.ms", "value": "9" * 32_766 + "x"}],
    }
    answer = wire.ask(ApiKey.CREATE_TOPICS, version, {"topics": [topic], "timeout_ms": 30_000})
    [result] = answer["topics"]
    assert (result["name"], result["error_code"]) == (name, InvalidConfigError.code)
    assert "retention.ms" in result["error_message"] and len(result["error_message"]) < 2_000
    assert wire.ask(ApiKey.API_VERSIONS, 0, {})["error_code"] == 0


@pytest.fixture
def strict_listener(kafka_cluster):
    """``start(**settings)``: another listener for a broker of ``kafka_cluster`` (its address),
    with these broker settings; stopped after the test."""
    started = []

    def start(**settings) -> str:
        metadata = kafka_cluster.metadata(refresh=True)
        broker = min(metadata.listeners)
        actor = ray.remote(KafkaListenerActor).options(num_cpus=0, max_concurrency=KafkaListenerActor.MAX_CONCURRENCY)
        plaintext = Listener("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 0)
        handle = actor.remote(
            kafka_cluster.cluster_name, broker, kafka_cluster.controller, (plaintext,), ControllerConfig(**settings)
        )
        started.append(handle)
        host, port, _ = ray.get(handle.start.remote(), timeout=120)["PLAINTEXT"]
        return f"{host}:{port}"

    yield start
    for handle in started:
        ray.kill(handle, no_restart=True)


def test_a_kafka_client_is_served_beside_a_client_refused_for_max_connections_per_ip(
    strict_listener, kafka_topic, read_back
):
    """A client host over max.connections.per.ip gets its extra connection closed at once; a
    kafka-python producer bootstrapping from the same listener meanwhile produces."""
    from kafka import KafkaProducer

    address = strict_listener(max_connections_per_ip=1)
    topic = kafka_topic(1)
    held = Wire(address, source="127.0.0.2")
    assert held.ask(ApiKey.API_VERSIONS, 0, {})["error_code"] == 0
    refused = Wire(address, source="127.0.0.2")
    assert refused.closed()
    producer = KafkaProducer(bootstrap_servers=address, acks="all", request_timeout_ms=20_000, max_block_ms=30_000)
    try:
        sent = producer.send(topic, value=b"beside a refused client").get(timeout=60)
    finally:
        producer.close(timeout=30)
    assert (sent.partition, sent.offset) == (0, 0)
    assert [r.value for r in read_back(topic)] == [b"beside a refused client"]
    assert held.ask(ApiKey.API_VERSIONS, 0, {})["error_code"] == 0
    held.close()
    refused.close()


def test_a_quick_fuzz_slice_keeps_the_broker_up_and_loses_nothing(kafka_cluster, bootstrap):
    """5,000 frames mutated from real clients' captured requests (raylog bench fuzz-wire runs
    the long campaign): every frame answered, or closed with its connection, or held by a
    request Kafka would hold; records acknowledged before are all readable after; every
    listener still answers."""
    report, rss, lost = fuzz_wire.run_against(kafka_cluster, frames=5_000, seed=7, connections=4, max_duration_s=50)
    assert report.frames >= 2_500, fuzz_wire.format_report(report, rss)
    assert report.anomalies == 0, fuzz_wire.format_report(report, rss)
    assert report.answered and report.closed, fuzz_wire.format_report(report, rss)
    assert lost == 0
    for address in bootstrap.split(","):
        wire = Wire(address)
        assert wire.ask(ApiKey.API_VERSIONS, 0, {})["error_code"] == 0
        wire.close()
