"""The Admin's configs family without Ray, beyond the config resources' forms (in
test_kafka_names.py): a describe's refusal, the metadata refreshed after an alter, and the
client quotas."""

from __future__ import annotations

import pytest

from raylog.errors import InvalidConfigError, InvalidRequestError, UnknownTopicOrPartitionError
from raylog.types import ConfigEntry, ConfigResource, ConfigResourceType
from tests.unit.clients.admin_fakes import FakeActor, FakeCluster, make_admin

UNKNOWN = (UnknownTopicOrPartitionError.code, "unknown topic 'gone'")


def test_describe_configs_raises_the_first_refusal_in_the_order_asked(monkeypatch):
    retention = {"retention.ms": ConfigEntry("1", "topic")}
    controller = FakeActor(
        describe_configs=lambda topics: {t: (*UNKNOWN, {}) if t == "gone" else (0, "", retention) for t in topics},
        describe_broker_configs=lambda brokers: {
            b: (InvalidRequestError.code, "broker 7 is not registered", {}) for b in brokers
        },
    )
    admin, _ = make_admin(monkeypatch, FakeCluster(controller=controller))
    assert admin.describe_configs(["a"]) == {"a": retention}
    with pytest.raises(InvalidRequestError, match="broker 7"):
        admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "7"), "gone"])
    with pytest.raises(UnknownTopicOrPartitionError, match="'gone'"):
        admin.describe_configs(["a", "gone", ConfigResource(ConfigResourceType.BROKER, "7")])
    with pytest.raises(TypeError, match="list of names"):
        admin.describe_configs("a")


def test_an_alter_refreshes_the_metadata_even_when_refused(monkeypatch):
    controller = FakeActor(alter_configs=lambda changes, incremental: {t: UNKNOWN for t in changes})
    cluster = FakeCluster(controller=controller)
    admin, _ = make_admin(monkeypatch, cluster)
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.alter_configs({"gone": {"retention.ms": "1"}})
    assert cluster.refreshes == 1
    with pytest.raises(TypeError, match="incremental"):
        admin.alter_configs({"gone": {}}, incremental=1)
    assert len(controller.calls) == 1


def test_client_quotas_are_sent_as_given_and_a_refusal_is_raised(monkeypatch):
    controller = FakeActor(
        alter_client_quotas=[(0, ""), (InvalidConfigError.code, "unknown quota 'request_percentage'")],
        describe_client_quotas={None: {"consumer_byte_rate": 5.0}},
    )
    admin, _ = make_admin(monkeypatch, FakeCluster(controller=controller))
    admin.alter_client_quotas({"etl": {"producer_byte_rate": 1e6}, None: {"consumer_byte_rate": None}})
    assert controller.sent("alter_client_quotas") == [
        ({"etl": {"producer_byte_rate": 1e6}, None: {"consumer_byte_rate": None}},)
    ]
    with pytest.raises(InvalidConfigError, match="request_percentage"):
        admin.alter_client_quotas({"etl": {"request_percentage": 5}})
    assert admin.describe_client_quotas() == {None: {"consumer_byte_rate": 5.0}}
