"""Kafka's DescribeClientQuotas and AlterClientQuotas handlers (raylog/actors/kafka/client_quotas.py)
against a fake controller holding client-id quotas, each request and answer through the codec
as a client sends and reads them (no Ray)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from raylog.actors.kafka.client_quotas import HANDLERS
from raylog.actors.kafka.context import BrokerContext
from raylog.coordination.quotas import alter_client_quotas
from raylog.errors import InvalidConfigError
from raylog.kafka import codec
from raylog.kafka.codec import ApiKey


class Controller:
    def __init__(self):
        self.quotas: dict = {"etl": {"producer_byte_rate": 1000.0}, None: {"consumer_byte_rate": 50.0}}
        self.describe_client_quotas = SimpleNamespace(remote=self._describe)
        self.alter_client_quotas = SimpleNamespace(remote=self._alter)

    async def _describe(self, session=None):
        return {k: dict(v) for k, v in self.quotas.items()}

    async def _alter(self, changes, session=None):
        try:
            new = alter_client_quotas(self.quotas, changes)
        except InvalidConfigError as exc:
            return exc.code, str(exc)
        for client_id, values in new.items():
            self.quotas[client_id] = values
        return 0, ""


def ask(controller: Controller, key: ApiKey, version: int, body: dict) -> dict:
    header = codec.RequestHeader(key, version, 7, "test")
    _, decoded = codec.decode_request(b"".join(bytes(b) for b in codec.encode_request(header, body))[4:])
    answer = asyncio.run(HANDLERS[key](BrokerContext("c", 0, controller), header, decoded))
    frame = b"".join(bytes(b) for b in codec.encode_response(header, answer))
    return codec.decode_response(key, version, frame[4:])[1]


def described(controller: Controller, components: list[dict], strict: bool = False) -> dict:
    answer = ask(controller, ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, {"components": components, "strict": strict})
    assert answer["error_code"] == 0, answer
    return {
        tuple((c["entity_type"], c["entity_name"]) for c in e["entity"]): {v["key"]: v["value"] for v in e["values"]}
        for e in answer["entries"]
    }


def test_quotas_are_described_by_client_id_exact_default_or_any():
    controller = Controller()
    etl, default = (("client-id", "etl"),), (("client-id", None),)
    everything = {default: {"consumer_byte_rate": 50.0}, etl: {"producer_byte_rate": 1000.0}}
    assert described(controller, []) == everything
    assert described(controller, [{"entity_type": "client-id", "match_type": 2, "match": None}]) == everything
    assert described(controller, [{"entity_type": "client-id", "match_type": 0, "match": "etl"}]) == {
        etl: {"producer_byte_rate": 1000.0}
    }
    assert described(controller, [{"entity_type": "client-id", "match_type": 1, "match": None}]) == {
        default: {"consumer_byte_rate": 50.0}
    }
    assert described(controller, [{"entity_type": "user", "match_type": 2, "match": None}]) == {}
    assert described(controller, [], strict=True) == {}
    refused = ask(
        controller, ApiKey.DESCRIBE_CLIENT_QUOTAS, 0, {"components": [{"entity_type": "client-id", "match_type": 5}]}
    )
    assert refused["error_code"] == 42 and refused["entries"] is None


def test_quotas_are_altered_all_or_nothing_and_validate_only_changes_nothing():
    controller = Controller()

    def alter(entries: list[tuple[list, list]], validate_only: bool = False) -> list[int]:
        body = {
            "entries": [
                {"entity": [{"entity_type": t, "entity_name": n} for t, n in entity], "ops": ops}
                for entity, ops in entries
            ],
            "validate_only": validate_only,
        }
        return [e["error_code"] for e in ask(controller, ApiKey.ALTER_CLIENT_QUOTAS, 1, body)["entries"]]

    rate = {"key": "producer_byte_rate", "value": 5.0, "remove": False}
    remove = {"key": "consumer_byte_rate", "value": 0.0, "remove": True}
    assert alter([([("client-id", "new")], [rate])], validate_only=True) == [0]
    assert "new" not in controller.quotas
    assert alter([([("client-id", "new")], [rate]), ([("client-id", None)], [remove])]) == [0, 0]
    assert controller.quotas["new"] == {"producer_byte_rate": 5.0} and controller.quotas[None] == {}
    unknown = {"key": "request_percentage", "value": 5.0, "remove": False}
    assert alter([([("client-id", "a")], [rate]), ([("client-id", "b")], [unknown])]) == [40, 40]
    assert "a" not in controller.quotas
    assert alter([([("client-id", "a")], [rate]), ([("user", "alice")], [rate])]) == [42, 42]
    assert "a" not in controller.quotas
