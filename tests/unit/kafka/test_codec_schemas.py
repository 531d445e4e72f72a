"""raylog's table of Kafka messages (raylog/kafka/codec/messages.py) against Kafka's own message
definitions, the JSON files of Apache Kafka's ``clients/src/main/resources/common/message``
that kafka-python ships: at every version raylog supports, each request and response has
the same fields, in the same order, of the same types, nullable and tagged in the same
versions, and is flexible from the same version. A field written from memory that Kafka
spells, types or versions otherwise fails here before a client meets it."""

from __future__ import annotations

import importlib.resources
import json
import re

import pytest

from raylog.kafka.codec.messages import MESSAGES, SUPPORTED, Field, Message

#: Where kafka-python keeps Kafka's message definitions.
KAFKA_SCHEMAS = "kafka.protocol.schemas.resources"
#: Kafka's comment lines, which its JSON files carry (not JSON).
_COMMENTS = re.compile(r"(?m)^\s*//.*$")


def kafka_message(message: Message) -> dict:
    """Kafka's definition of ``message``, common structs resolved."""
    text = importlib.resources.files(KAFKA_SCHEMAS).joinpath(f"{message.name}{message.kind.title()}.json").read_text()
    data = json.loads(_COMMENTS.sub("", text))
    common = {s["name"]: s["fields"] for s in data.get("commonStructs", [])}
    _resolve(data["fields"], common)
    return data


def _resolve(fields: list[dict], common: dict[str, list[dict]]) -> None:
    for f in fields:
        struct = f["type"].removeprefix("[]")
        if struct[:1].isupper() and "fields" not in f:
            f["fields"] = common[struct]
        _resolve(f.get("fields", []), common)


def kafka_versions(spec: str | None) -> range:
    """A Kafka versions string (``3+``, ``0-7``, ``5``, ``none``) as a range."""
    if spec in (None, "none"):
        return range(0)
    if spec.endswith("+"):
        return range(int(spec[:-1]), 1 << 15)
    low, _, high = spec.partition("-")
    return range(int(low), int(high or low) + 1)


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def kafka_shape(fields: list[dict], version: int, flexible: bool) -> list[tuple]:
    """``(name, type, nullable, tag, nested shape)`` of each field on the wire at ``version``."""
    shape = []
    for f in fields:
        tagged = flexible and version in kafka_versions(f.get("taggedVersions"))
        if version not in kafka_versions(f["versions"]) or ("tag" in f and not tagged):
            continue
        kind = f["type"]
        if "fields" in f:
            kind = "[]" if kind.startswith("[]") else "{}"
        nullable = version in kafka_versions(f.get("nullableVersions"))
        nested = kafka_shape(f.get("fields", []), version, flexible)
        shape.append((snake(f["name"]), kind, nullable, f["tag"] if tagged else None, nested))
    return shape


def raylog_shape(fields: list[Field], version: int) -> list[tuple]:
    shape = []
    for f in fields:
        if version not in f.versions:
            continue
        nested = raylog_shape(f.fields, version)
        shape.append((f.name, f.type, f.nullable_in(version), f.tag, nested))
    return shape


#: Messages whose definition kafka-python (2.2) does not ship: Kafka 4's consumer protocol
#: (KIP-848). They are checked on the wire against librdkafka instead
#: (tests/ray/kafka/test_consumer_protocol_wire.py), and here again once kafka-python has them.
NOT_SHIPPED = {"ConsumerGroupHeartbeat", "ConsumerGroupDescribe"}


def _shipped(message: Message) -> bool:
    name = f"{message.name}{message.kind.title()}.json"
    return importlib.resources.files(KAFKA_SCHEMAS).joinpath(name).is_file()


CASES = [
    (MESSAGES[(key, kind)], version)
    for key, (low, high) in sorted(SUPPORTED.items())
    for kind in ("request", "response")
    for version in range(low, high + 1)
    if MESSAGES[(key, kind)].name not in NOT_SHIPPED or _shipped(MESSAGES[(key, kind)])
]


def test_only_the_messages_kafka_python_does_not_ship_are_checked_elsewhere():
    names = {m.name for m in MESSAGES.values()}
    assert NOT_SHIPPED <= names
    assert all(not _shipped(m) for m in MESSAGES.values() if m.name in NOT_SHIPPED)


@pytest.mark.parametrize(("message", "version"), CASES, ids=[f"{m.name}{m.kind.title()}-v{v}" for m, v in CASES])
def test_every_message_is_kafkas_at_every_supported_version(message, version):
    kafka = kafka_message(message)
    assert int(kafka["apiKey"]) == message.api_key
    assert version in kafka_versions(kafka["validVersions"]), f"Kafka has no v{version}"
    flexible = version in kafka_versions(kafka.get("flexibleVersions"))
    assert message.is_flexible(version) == flexible
    assert raylog_shape(message.fields, version) == kafka_shape(kafka["fields"], version, flexible)
