"""LogConfig validation and Kafka property names; error codes."""

from __future__ import annotations

import pickle
import re

import pytest

from raylog import errors
from raylog.config import ControllerConfig, Listener, LogConfig


def test_kafka_property_names_and_strings_are_accepted():
    """Users type Kafka's dotted names with string values; both forms give the same config."""
    config = LogConfig.from_properties({"retention.ms": "1000", "segment.bytes": 4096}, flush_messages=5)
    assert (config.retention_ms, config.segment_bytes, config.flush_messages) == (1000, 4096, 5)
    assert config.to_properties()["retention.ms"] == "1000"
    assert LogConfig.from_properties(config.to_properties()) == config


def test_unknown_keys_list_the_known_ones():
    """An unknown key is refused with the list of known keys."""
    with pytest.raises(errors.InvalidConfigError, match="known: .*retention.ms"):
        LogConfig.from_properties({"retention.hours": "5"})


@pytest.mark.parametrize(
    "properties",
    [
        {"segment.bytes": "12"},
        {"segment.bytes": "lots"},
        {"retention.ms": "-5"},
        {"flush.messages": 0},
        {"message.timestamp.type": "WallClock"},
        {"index.interval.bytes": True},
    ],
)
def test_bad_values_are_typed_errors(properties):
    """Out-of-range or mistyped values raise InvalidConfigError (a ValueError)."""
    with pytest.raises(errors.InvalidConfigError):
        LogConfig.from_properties(properties)
    with pytest.raises(ValueError):
        LogConfig.from_properties(properties)


def test_error_codes_are_kafkas_and_errors_pickle():
    """API errors carry Kafka's codes, are found by code, and survive pickling (Ray)."""
    assert errors.for_code(1) is errors.OffsetOutOfRangeError
    assert errors.CorruptRecordError.code == 2 and errors.CorruptRecordError.name == "CORRUPT_MESSAGE"
    assert errors.UnknownTopicOrPartitionError.invalid_metadata
    error = pickle.loads(pickle.dumps(errors.StorageError("disk full")))
    assert isinstance(error, errors.StorageError) and error.retriable and str(error) == "disk full"


@pytest.mark.parametrize(
    "properties",
    [{"retention.ms": "9" * 32_700 + "x"}, {"cleanup.policy": "c" * 32_700}, {"k" * 32_700: "1"}],
    ids=["not-a-number", "not-a-choice", "unknown-key"],
)
def test_an_error_quotes_at_most_the_start_of_a_long_value(properties):
    """Messages go back to Kafka clients in int16-length strings: a 32.7 KB value is quoted
    cut short, with its length, never whole."""
    with pytest.raises(errors.InvalidConfigError) as refused:
        LogConfig.from_properties(properties)
    assert len(str(refused.value)) < 2_000
    assert re.search(r"\.\.\. \(3270\d characters\)", str(refused.value))


def test_the_request_memory_pool_holds_at_least_one_largest_request():
    """As Kafka's: queued.max.request.bytes is -1 or at least socket.request.max.bytes."""
    from raylog.config import ControllerConfig

    with pytest.raises(errors.InvalidConfigError, match="queued.max.request.bytes"):
        ControllerConfig.from_properties({"queued.max.request.bytes": "1000", "socket.request.max.bytes": "1001"})
    assert ControllerConfig.from_properties({"queued.max.request.bytes": "-1"}).queued_max_request_bytes == -1


# --- listeners, listener.security.protocol.map, advertised.listeners ------------------------

#: Two listeners of custom names, as Kafka users write them.
TWO_LISTENERS = {
    "listeners": "INTERNAL://10.0.0.5:9092,external://0.0.0.0:9094",
    "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:SASL_PLAINTEXT",
}


def test_listeners_are_a_list_of_named_listeners_each_of_its_mapped_protocol():
    """Kafka's form: NAME://host:port, comma-separated, the name's protocol from the map
    (names case-insensitive, upper-cased as Kafka normalises them)."""
    listeners = ControllerConfig.from_properties(TWO_LISTENERS).named_listeners
    assert listeners == (
        Listener("INTERNAL", "PLAINTEXT", "10.0.0.5", 9092),
        Listener("EXTERNAL", "SASL_PLAINTEXT", "0.0.0.0", 9094),
    )
    assert [(x.tls, x.sasl) for x in listeners] == [(False, False), (False, True)]


def test_the_default_map_names_each_protocol_after_itself():
    """Without listener.security.protocol.map, Kafka's default: PLAINTEXT://, SSL://, ... as today."""
    config = ControllerConfig.from_properties(
        {"listeners": "PLAINTEXT://:9092,SSL://[::1]:9093", "ssl.keystore.location": "k.pem"}
    )
    assert config.named_listeners == (Listener("PLAINTEXT", "PLAINTEXT", "", 9092), Listener("SSL", "SSL", "::1", 9093))
    assert ControllerConfig().named_listeners == ()


@pytest.mark.parametrize(
    ("properties", "message"),
    [
        ({"listeners": "OTHER://:9092"}, "OTHER is not in listener.security.protocol.map"),
        ({"listeners": "PLAINTEXT://:9092,plaintext://:9093"}, "each listener name may appear once"),
        ({"listeners": "PLAINTEXT://:9092,SSL://:9092", "ssl.keystore.location": "k.pem"}, "a port of its own"),
        ({"listeners": "PLAINTEXT://:9092,SSL"}, "must be NAME://host:port"),
        ({"listeners": "PLAINTEXT://:port"}, "must be NAME://host:port"),
        ({"listeners": "PLAINTEXT://:70000"}, "must be NAME://host:port"),
        ({"listeners": "A-B://:9092"}, "must be NAME://host:port"),
        ({"listener.security.protocol.map": "A:PLAINTEXT,A:SSL"}, "each name once"),
        ({"listener.security.protocol.map": "A:KERBEROS"}, "PROTOCOL one of"),
        ({"listener.security.protocol.map": "A"}, "NAME:PROTOCOL"),
        ({**TWO_LISTENERS, "advertised.listeners": "OTHER://h:1"}, "OTHER is not a name in listeners"),
        (
            {**TWO_LISTENERS, "advertised.listeners": "INTERNAL://a:1,INTERNAL://b:2"},
            "each listener name may appear once",
        ),
        ({**TWO_LISTENERS, "advertised.listeners": "EXTERNAL://0.0.0.0:9094"}, "cannot advertise 0.0.0.0"),
        ({**TWO_LISTENERS, "advertised.listeners": "EXTERNAL://broker"}, "must be NAME://host:port"),
        (
            {
                "listeners": "INTERNAL://:9092,EXTERNAL://:9094",
                "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:SSL",
            },
            r"listener EXTERNAL \(SSL\) needs ssl.keystore.location",
        ),
    ],
)
def test_what_kafka_refuses_in_listeners_is_refused_naming_the_value(properties, message):
    """A name not in the map or twice, one non-zero port twice, a malformed entry, an
    advertised name that is no listener's: InvalidConfigError naming the setting's value."""
    with pytest.raises(errors.InvalidConfigError, match=message):
        ControllerConfig.from_properties(properties)


def test_port_zero_may_repeat_and_empty_entries_are_skipped():
    """Port 0 (a free port) is no port of its own; empty items are skipped as Kafka's lists skip them."""
    config = ControllerConfig.from_properties(
        {
            "listeners": "INTERNAL://:0, ,EXTERNAL://:0,",
            "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
        }
    )
    assert [x.name for x in config.named_listeners] == ["INTERNAL", "EXTERNAL"]


def test_advertised_listeners_override_what_a_named_listener_advertises():
    """advertised.listeners replaces a listener's advertised host and port; a listener it does
    not name advertises its bound address; port 0 advertises the port bound."""
    config = ControllerConfig.from_properties(
        {**TWO_LISTENERS, "advertised.listeners": "external://broker.example.com:0"}
    )
    internal, external = config.named_listeners
    assert (internal.advertised_host, internal.advertised_port) == ("", 0)
    assert (external.advertised_host, external.advertised_port) == ("broker.example.com", 0)


def test_brokers_sharing_a_node_take_successive_ports_per_listener():
    """Embedded mode: the i-th broker of a node (by id) binds and advertises each listener's
    non-zero port + i; port 0 stays a free port."""
    config = ControllerConfig.from_properties(
        {
            "listeners": "INTERNAL://:9092,EXTERNAL://:0",
            "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
            "advertised.listeners": "INTERNAL://nat.example.com:19092",
        }
    )
    addresses = config.listener_addresses([7, 3])
    assert [(x.port, x.advertised_port) for x in addresses[3]] == [(9092, 19092), (0, 0)]
    assert [(x.port, x.advertised_port) for x in addresses[7]] == [(9093, 19093), (0, 0)]


TLS_AND_SASL_LISTENERS = {
    "listeners": "INTERNAL://:9092,EXTERNAL://:9192",
    "listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT,EXTERNAL:SASL_SSL",
    "ssl.keystore.location": "/etc/raylog/broker.pem",
}


def test_listener_name_properties_set_one_listeners_tls_and_sasl_settings():
    """Kafka's listener.name.<listener>.<setting> (the name lower-cased): the listener's own
    keystore, client authentication and SASL mechanisms over the broker-wide ones; the others
    keep those. They survive to_properties (DescribeConfigs lists them by their own names)
    and pickling; a TLS listener's keystore may be its own alone."""
    config = ControllerConfig.from_properties(
        {
            **TLS_AND_SASL_LISTENERS,
            "listener.name.external.ssl.keystore.location": "/etc/raylog/external.pem",
            "listener.name.external.ssl.client.auth": "required",
            "listener.name.internal.sasl.enabled.mechanisms": "PLAIN",
        }
    )
    internal, external = config.listener_settings["INTERNAL"], config.listener_settings["EXTERNAL"]
    assert (internal.ssl_keystore_location, internal.ssl_client_auth) == ("/etc/raylog/broker.pem", "none")
    assert (external.ssl_keystore_location, external.ssl_client_auth) == ("/etc/raylog/external.pem", "required")
    assert internal.sasl_mechanisms == ("PLAIN",)
    assert external.sasl_mechanisms == config.sasl_mechanisms == ("SCRAM-SHA-256", "SCRAM-SHA-512")
    properties = config.to_properties()
    assert properties["listener.name.internal.sasl.enabled.mechanisms"] == "PLAIN"
    assert "listener.name" not in properties
    assert ControllerConfig.from_properties(properties) == config == pickle.loads(pickle.dumps(config))
    own_keystore_only = {**TLS_AND_SASL_LISTENERS, "ssl.keystore.location": ""}
    own_keystore_only["listener.name.external.ssl.keystore.location"] = "/etc/raylog/external.pem"
    assert ControllerConfig.from_properties(own_keystore_only).listener_settings["EXTERNAL"].ssl_keystore_location


def test_a_listeners_principal_rules_and_authentication_lifetimes_are_its_own():
    """Kafka's per-listener ssl.principal.mapping.rules and connections.max.reauth.ms, and
    listener.name.<listener>.<mechanism>.connections.max.reauth.ms: a mechanism's lifetime
    on a listener is its own setting, else the listener's, else the broker-wide one (as
    Kafka's SaslChannelBuilder looks them up)."""
    config = ControllerConfig.from_properties(
        {
            **TLS_AND_SASL_LISTENERS,
            "connections.max.reauth.ms": "600000",
            "ssl.principal.mapping.rules": "RULE:^CN=(.*?),.*$/$1/,DEFAULT",
            "listener.name.external.ssl.principal.mapping.rules": "RULE:^CN=(.*?),.*$/$1/U,DEFAULT",
            "listener.name.external.connections.max.reauth.ms": "60000",
            "listener.name.external.scram-sha-512.connections.max.reauth.ms": "3600000",
            "listener.name.internal.plain.connections.max.reauth.ms": "0",
        }
    )
    internal, external = config.listener_settings["INTERNAL"], config.listener_settings["EXTERNAL"]
    assert internal.ssl_principal_mapping_rules == "RULE:^CN=(.*?),.*$/$1/,DEFAULT"
    assert external.ssl_principal_mapping_rules == "RULE:^CN=(.*?),.*$/$1/U,DEFAULT"
    assert [external.reauth_ms(m) for m in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")] == [60_000, 60_000, 3_600_000]
    assert [internal.reauth_ms(m) for m in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")] == [0, 600_000, 600_000]
    assert internal.reauthenticates and external.reauthenticates
    only_one = ControllerConfig.from_properties(
        {**TLS_AND_SASL_LISTENERS, "listener.name.internal.scram-sha-256.connections.max.reauth.ms": "5000"}
    )
    assert only_one.listener_settings["INTERNAL"].reauthenticates
    assert not only_one.listener_settings["EXTERNAL"].reauthenticates
    properties = config.to_properties()
    assert properties["listener.name.external.scram-sha-512.connections.max.reauth.ms"] == "3600000"
    assert ControllerConfig.from_properties(properties) == config == pickle.loads(pickle.dumps(config))


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("listener.name.external.ssl.principal.mapping.rules", "RULE:x", "cannot read the rules"),
        ("listener.name.internal.connections.max.reauth.ms", "-1", "must be >= 0"),
        ("listener.name.internal.scram-sha-512.connections.max.reauth.ms", "-5", "must be >= 0"),
        ("listener.name.internal.scram-sha-512.connections.max.reauth.ms", "soon", "integer"),
        ("listener.name.internal.SCRAM-SHA-512.connections.max.reauth.ms", "5000", "lower-cased"),
        ("listener.name.internal.gssapi.connections.max.reauth.ms", "5000", "a listener may override"),
        ("listener.name.other.ssl.client.auth", "none", "'other' is not the lower-cased name of a listener"),
        ("listener.name.INTERNAL.ssl.client.auth", "none", "'INTERNAL' is not the lower-cased name"),
        ("listener.name.internal.num.partitions", "3", "a listener may override"),
        ("listener.name.internal.ssl.client.auth", "sometimes", "must be one of none, requested, required"),
        ("listener.name.internal.sasl.enabled.mechanisms", "GSSAPI", "comma-separated list of PLAIN"),
        ("listener.name", "internal.ssl.client.auth=none", "as a property of its own"),
    ],
)
def test_a_listener_name_property_kafka_would_not_read_is_refused_naming_it(key, value, message):
    with pytest.raises(errors.InvalidConfigError, match=re.escape(key)) as refused:
        ControllerConfig.from_properties({**TLS_AND_SASL_LISTENERS, key: value})
    assert message in str(refused.value)


def test_a_configs_listeners_are_parsed_once():
    """named_listeners and listener_settings are computed once per config object (the
    controller reads them on every metadata answer)."""
    config = ControllerConfig.from_properties(TLS_AND_SASL_LISTENERS)
    assert config.named_listeners is config.named_listeners
    assert config.listener_settings is config.listener_settings
