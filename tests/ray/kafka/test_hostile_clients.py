"""The Kafka listener against clients that send what no well-behaved client sends, over real
sockets to the ``kafka_cluster`` listeners: every answer still goes out, or the connection is
closed as Kafka closes it, and the connection (or the broker) keeps serving the others."""

from __future__ import annotations

import uuid

import pytest

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
