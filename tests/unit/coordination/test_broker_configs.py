"""Dynamic broker configs (Kafka's AlterConfigs / IncrementalAlterConfigs / DescribeConfigs of
a broker resource) in the metadata image: topic defaults reach topics and replicas, read-only
settings are refused, other names are kept, and all of it replays from the journal."""

from __future__ import annotations

import pytest

from raylog.config import ControllerConfig, TopicConfig
from raylog.coordination import broker_configs
from raylog.errors import InvalidConfigError, InvalidRequestError
from raylog.types import ConfigEntry
from tests.unit.coordination.test_metadata import Controller

DEFAULTS = TopicConfig().to_properties()
STATIC = ControllerConfig().to_properties()


@pytest.fixture
def controller(tmp_path) -> Controller:
    return Controller(str(tmp_path / "controller" / "metadata.journal"))


def test_a_cluster_default_reaches_every_topic_that_does_not_set_the_property(controller):
    """log.retention.ms set on the cluster default ("") becomes retention.ms of every topic
    without its own (existing and new ones, versions moved so replicas take it); a topic's
    override wins; deleting the default brings the built-in value back; replay rebuilds it."""
    image = controller.image
    controller.commit([image.create_topic("plain", 1, 1), image.create_topic("own", 1, 1, {"retention.ms": "5000"})])
    versions = dict(image.config_versions)
    controller.commit([image.alter_broker_config("", {"log.retention.ms": "60000"}, incremental=True)])
    assert image.topics["plain"].config["retention.ms"] == "60000"
    assert image.describe_config("plain")["retention.ms"] == ConfigEntry("60000", "dynamic_default_broker")
    assert image.topics["own"].config["retention.ms"] == "5000"
    assert image.config_versions["plain"] == versions["plain"] + 1
    assert image.config_versions["own"] == versions["own"]
    controller.commit([image.create_topic("new", 1, 1)])
    assert image.topics["new"].config["retention.ms"] == "60000"
    controller.commit([image.alter_config("own", {"retention.ms": None})])
    assert image.topics["own"].config["retention.ms"] == "60000"
    replayed = controller.replayed()
    assert replayed.topics == image.topics and replayed.config_versions == image.config_versions
    assert replayed.broker_configs == {"": {"log.retention.ms": "60000"}}
    controller.commit([image.alter_broker_config("", {"log.retention.ms": None}, incremental=True)])
    assert image.topics["plain"].config["retention.ms"] == DEFAULTS["retention.ms"]
    assert image.describe_config("plain")["retention.ms"] == ConfigEntry(DEFAULTS["retention.ms"], "default")
    assert image.broker_configs == {}


def test_a_brokers_own_default_reaches_only_its_replicas(controller):
    """A broker's own log.cleanup.policy (APPEND, as librdkafka's admin test does) is the
    config of the replicas on it; the topic's and other brokers' stay; SUBTRACT undoes it."""
    image = controller.image
    controller.commit([image.create_topic("t", 1, 2)])
    on, off = image.topics["t"].partitions[0].replicas
    version = image.config_versions["t"]
    change = {"log.cleanup.policy": ("append", "compact"), "background.threads": "9"}
    controller.commit([image.alter_broker_config(str(on), change, incremental=True)])
    assert image.replica_config("t", on)["cleanup.policy"] == "delete,compact"
    assert image.replica_config("t", off) == image.topics["t"].config
    assert image.topics["t"].config["cleanup.policy"] == "delete"
    assert image.config_versions["t"] == version + 1
    described = image.describe_broker_config(str(on), STATIC)
    assert described["log.cleanup.policy"] == ConfigEntry("delete,compact", "dynamic_broker")
    assert described["background.threads"] == ConfigEntry("9", "dynamic_broker")
    assert described["log.retention.ms"] == ConfigEntry(DEFAULTS["retention.ms"], "default")
    assert described["num.partitions"] == ConfigEntry(STATIC["num.partitions"], "static_broker")
    assert image.describe_broker_config(str(off), STATIC)["log.cleanup.policy"] == ConfigEntry("delete", "default")
    change = {"log.cleanup.policy": ("subtract", "compact"), "background.threads": None}
    controller.commit([image.alter_broker_config(str(on), change, incremental=True)])
    assert image.replica_config("t", on)["cleanup.policy"] == "delete"
    assert image.broker_configs[str(on)] == {"log.cleanup.policy": "delete"}
    assert controller.replayed().broker_configs == image.broker_configs


def test_alter_configs_replaces_a_brokers_whole_set(controller):
    """Not incremental (Kafka's AlterConfigs), the configs given are the whole new set."""
    image = controller.image
    controller.commit([image.alter_broker_config("0", {"a.b": "1", "c.d": "2"}, incremental=True)])
    controller.commit([image.alter_broker_config("0", {"c.d": "3"}, incremental=False)])
    assert image.broker_configs["0"] == {"c.d": "3"}


@pytest.mark.parametrize(
    ("resource", "change", "error", "named"),
    [
        ("0", {"num.partitions": "3"}, InvalidRequestError, "num.partitions"),
        ("", {"broker.id": "7"}, InvalidRequestError, "broker.id"),
        ("0", {"listener.name.external.ssl.client.auth": "required"}, InvalidRequestError, "listener.name.external"),
        ("", {"log.retention.ms": "soon"}, InvalidConfigError, "log.retention.ms"),
        ("", {"compression.type": "brotli"}, InvalidConfigError, "compression.type"),
        ("0", {"background.threads": ("append", "1")}, InvalidConfigError, "background.threads"),
        ("0", {"log.cleanup.policy": ("append", "compact")}, InvalidConfigError, "incremental"),
        ("9", {"log.retention.ms": "1000"}, InvalidRequestError, "no broker 9"),
        ("broker-0", {"log.retention.ms": "1000"}, InvalidRequestError, "broker-0"),
        ("00", {"log.retention.ms": "1000"}, InvalidRequestError, "'00'"),
        ("\u00b2", {"log.retention.ms": "1000"}, InvalidRequestError, "not a broker id"),
        ("\u0660", {"log.retention.ms": "1000"}, InvalidRequestError, "not a broker id"),
        ("", {"log.retention.ms": True}, InvalidConfigError, "log.retention.ms"),
    ],
)
def test_a_refused_broker_alter_names_why_and_changes_nothing(controller, resource, change, error, named):
    """Read-only settings, bad values, a list operation on a config that is not a list (or
    outside an incremental alter) and a resource that is no broker are refused, typed."""
    image = controller.image
    incremental = named != "incremental"
    with pytest.raises(error, match=named.replace(".", r"\.")):
        image.alter_broker_config(resource, change, incremental=incremental)
    assert image.broker_configs == {}


LISTENING = ControllerConfig(
    listeners="INTERNAL://:9092,EXTERNAL://0.0.0.0:9192",
    listener_security_protocol_map="INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
    advertised_listeners="EXTERNAL://nat.example.com:9192",
)


def test_a_broker_is_given_its_own_advertised_listeners(controller):
    """advertised.listeners, a static setting of the cluster, is also one broker's dynamic
    config (Kafka's per-broker configs): set for broker 1, described as its own (the
    cluster's static value stays for the others), kept in the journal, deleted back."""
    image = controller.image
    own = "EXTERNAL://b1.example.com:19192"
    change = {"advertised.listeners": own}
    controller.commit([image.alter_broker_config("1", change, incremental=True, static=LISTENING)])
    static = LISTENING.to_properties()
    assert image.describe_broker_config("1", static)["advertised.listeners"] == ConfigEntry(own, "dynamic_broker")
    described = image.describe_broker_config("2", static)["advertised.listeners"]
    assert described == ConfigEntry("EXTERNAL://nat.example.com:9192", "static_broker")
    assert controller.replayed().broker_configs == {"1": change}
    assert broker_configs.advertised_overrides(image.broker_configs, LISTENING) == (
        {1: {"EXTERNAL": ("b1.example.com", 19192)}},
        {},
    )
    controller.commit([image.alter_broker_config("1", {"advertised.listeners": None}, incremental=True)])
    assert image.broker_configs == {}


@pytest.mark.parametrize(
    ("resource", "value", "error", "named"),
    [
        ("", "EXTERNAL://b.example.com:9192", InvalidRequestError, "one broker"),
        ("1", "OTHER://b.example.com:9192", InvalidConfigError, "OTHER is not a name in listeners"),
        ("1", "EXTERNAL://0.0.0.0:9192", InvalidConfigError, "cannot advertise 0.0.0.0"),
        ("1", "EXTERNAL://b.example.com", InvalidConfigError, "NAME://host:port"),
        ("1", "EXTERNAL://a:1,EXTERNAL://b:2", InvalidConfigError, "once"),
        ("1", "EXTERNAL://b.example.com:70000", InvalidConfigError, "NAME://host:port"),
    ],
)
def test_a_brokers_advertised_listeners_that_do_not_fit_its_listeners_are_refused(
    controller, resource, value, error, named
):
    """Checked as the cluster's setting is, against its listeners; never a cluster default."""
    with pytest.raises(error, match=named):
        controller.image.alter_broker_config(
            resource, {"advertised.listeners": value}, incremental=True, static=LISTENING
        )
    assert controller.image.broker_configs == {}


def test_a_default_a_topic_could_not_take_is_refused_naming_the_topic(controller):
    """replica.fetch.wait.max.ms must stay below replica.lag.time.max.ms: a cluster default
    that breaks it for a topic that sets the other is refused, naming that topic."""
    image = controller.image
    controller.commit([image.create_topic("tight", 1, 1, {"replica.lag.time.max.ms": "1000"})])
    with pytest.raises(InvalidConfigError, match="tight"):
        image.alter_broker_config("", {"replica.fetch.wait.max.ms": "2000"}, incremental=True)
    assert image.broker_configs == {}


def test_every_topic_property_has_a_broker_synonym():
    """Each topic property has the broker config that defaults it (Kafka's synonyms)."""
    assert set(broker_configs.TOPIC_SYNONYMS) == set(DEFAULTS) - broker_configs.WITHOUT_SYNONYM
    assert not set(broker_configs.TOPIC_DEFAULTS) & broker_configs.READ_ONLY
