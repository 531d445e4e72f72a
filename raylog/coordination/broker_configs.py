"""Kafka's dynamic broker configs: what a broker resource may be set to, and what it does.

Kafka keeps configs set over the protocol for one broker (resource name its id) or for every
broker (the cluster default, resource name ""), and a broker reads its setting from the first
of: its own dynamic config, the cluster default, its static ``server.properties``, the
built-in default. raylog follows it:

- The broker names of topic properties (Kafka's synonyms: ``log.retention.ms`` for
  ``retention.ms``, ``log.cleanup.policy``, ``compression.type``, ``min.insync.replicas`` ...,
  :data:`TOPIC_SYNONYMS`) are the defaults of every topic that does not set the property
  itself. A cluster default reaches every topic's config (and so its replicas); a broker's
  own value reaches the replicas on that broker. Values are validated as the topic property's.
- raylog's static settings (the controller's, given when the cluster starts, and a broker's
  identity) are read-only: a change is refused as Kafka refuses a non-dynamic config.
- ``advertised.listeners`` is one broker's own (Kafka's per-broker dynamic configs: refused
  on the cluster default): it says where clients reach that broker on the listeners it names,
  over what the cluster's setting says (:func:`advertised_overrides`), for brokers behind
  addresses of their own (a NAT, a DNS name per node). Validated as the cluster's setting is.
- Any other name is kept and described as Kafka keeps a config it does not act on (Kafka's
  thread pools, SASL and SSL listener settings ...: raylog has no such part), so tools that
  set and read them back work.

Pure functions over plain dicts; :class:`~raylog.coordination.metadata.MetadataImage` keeps
the configs in its journal.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from raylog.common.names import CLUSTER_DEFAULT

from ..config import LISTENER_PREFIX, ControllerConfig, TopicConfig, list_operation, without_secret
from ..errors import InvalidConfigError, InvalidRequestError

#: Topic property -> the broker config that is its default (Kafka's synonyms; the replica and
#: producer-state settings are broker configs in Kafka, per topic in raylog, of the same name).
TOPIC_SYNONYMS: dict[str, str] = {
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "segment.index.bytes": "log.index.size.max.bytes",
    "index.interval.bytes": "log.index.interval.bytes",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "local.retention.ms": "log.local.retention.ms",
    "local.retention.bytes": "log.local.retention.bytes",
    "max.message.bytes": "message.max.bytes",
    "message.timestamp.type": "log.message.timestamp.type",
    "message.format.version": "log.message.format.version",
    "compression.type": "compression.type",
    "cleanup.policy": "log.cleanup.policy",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "log.cleaner.io.max.bytes.per.second": "log.cleaner.io.max.bytes.per.second",
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "replica.lag.time.max.ms": "replica.lag.time.max.ms",
    "replica.fetch.wait.max.ms": "replica.fetch.wait.max.ms",
    "producer.id.expiration.ms": "producer.id.expiration.ms",
    "transaction.partition.verification.enable": "transaction.partition.verification.enable",
}
#: Topic properties no broker config defaults (as in Kafka, whose brokers enable tiered
#: storage but leave each topic to ask for it; its Parquet history likewise).
WITHOUT_SYNONYM = frozenset({"remote.storage.enable", "remote.storage.history.enable"})
#: Broker config -> the topic property it is the default of.
TOPIC_DEFAULTS: dict[str, str] = {broker: topic for topic, broker in TOPIC_SYNONYMS.items()}
#: Configs given when the cluster starts (the controller's settings, and its per-listener
#: listener.name.* ones) or naming a broker: not changed over the protocol.
READ_ONLY = frozenset(ControllerConfig().to_properties()) | {"broker.id", "node.id", "log.dir", "log.dirs"}
#: Static settings a broker may also be given one by one, dynamically (Kafka's per-broker
#: dynamic configs, which have no cluster default).
PER_BROKER = frozenset({"advertised.listeners"})
#: Broker configs whose values are comma-separated lists.
LIST_CONFIGS = frozenset({"log.cleanup.policy"})
#: Configs whose values are URIs, which may hold a password (shown starred out).
URI_CONFIGS = frozenset({"remote.log.storage.uri"})
#: Configs whose values are secrets: described without their value (Kafka's PASSWORD type) and
#: not logged.
_SENSITIVE_SUFFIXES = (".password", "sasl.jaas.config")


def alter(
    current: Mapping[str, str],
    changes: Mapping[str, Any],
    *,
    incremental: bool,
    resource: str = CLUSTER_DEFAULT,
    static: ControllerConfig | None = None,
) -> dict[str, str]:
    """Broker resource ``resource``'s new dynamic configs after ``changes``, shaped as a topic's
    (see :meth:`~raylog.coordination.metadata.MetadataImage.alter_config`): a value sets, None
    deletes, ``("append" | "subtract", items)`` changes a list config (incremental only); not
    incremental, ``changes`` replaces the whole set. A topic default's value is validated and
    normalized as the topic property's (``"LZ4"`` is kept as ``lz4``); a per-broker config's
    (:data:`PER_BROKER`) against the cluster's static settings ``static``.

    Raises:
        InvalidRequestError: a read-only config (Kafka's "Cannot update these configs
            dynamically"), or a per-broker one on the cluster default.
        InvalidConfigError: a value the topic property refuses, a value that is not a string
            or number, an ``advertised.listeners`` that ``static``'s listeners refuse, or an
            append / subtract of a config that is not a list.
    """
    per_broker = sorted(name for name in changes if name in PER_BROKER)
    if per_broker and resource == CLUSTER_DEFAULT:
        raise InvalidRequestError(
            f"{per_broker} can only be set for one broker (resource name its id), not as the cluster default"
        )
    read_only = sorted(
        name for name in changes if (name in READ_ONLY and name not in PER_BROKER) or name.startswith(LISTENER_PREFIX)
    )
    if read_only:
        raise InvalidRequestError(
            f"Cannot update these configs dynamically: {read_only} "
            "(raylog's static settings, given when the cluster starts)"
        )
    configs = dict(current) if incremental else {}
    for name, change in changes.items():
        if isinstance(change, tuple):
            change = list_operation(name, configs.get(name, _default(name)), change, incremental, LIST_CONFIGS)
        if change is None:
            configs.pop(name, None)
        elif isinstance(change, bool) or not isinstance(change, str | int | float):
            raise InvalidConfigError(f"{name}: {change!r} is not a config value (a string)")
        else:
            configs[name] = _validated(name, str(change), static)
    return configs


def is_sensitive(name: str) -> bool:
    """Whether config ``name`` holds a secret (a password, a JAAS config)."""
    return name.endswith(_SENSITIVE_SUFFIXES)


def masked(configs: Mapping[str, str]) -> dict[str, str]:
    """``configs`` fit for a log line: secrets replaced."""
    return {name: "[hidden]" if is_sensitive(name) else value for name, value in configs.items()}


def shown(name: str, value: str) -> str | None:
    """What describing config ``name`` shows of ``value``: nothing of a secret, a URI without
    the password it may hold (``remote.log.storage.uri``)."""
    if is_sensitive(name):
        return None
    return without_secret(value, value) if name in URI_CONFIGS else value


def topic_defaults(*layers: Mapping[str, str]) -> dict[str, str]:
    """The topic properties that dynamic broker configs set, later layers first (a broker's
    own configs after the cluster default)."""
    return {TOPIC_DEFAULTS[name]: value for layer in layers for name, value in layer.items() if name in TOPIC_DEFAULTS}


def static_configs(controller_config: ControllerConfig, broker_id: int | None) -> dict[str, str]:
    """The read-only configs a broker resource describes: raylog's static settings and, for one
    broker, its id."""
    configs = dict(controller_config.to_properties())
    if broker_id is not None:
        configs["broker.id"] = configs["node.id"] = str(broker_id)
    return configs


def _default(name: str) -> str:
    topic_property = TOPIC_DEFAULTS.get(name)
    return TopicConfig().to_properties()[topic_property] if topic_property else ""


def advertised_overrides(
    configs: Mapping[str, Mapping[str, str]], static: ControllerConfig
) -> tuple[dict[int, dict[str, tuple[str, int]]], dict[int, str]]:
    """``(broker id -> listener name -> (host, port), broker id -> why refused)``: what brokers'
    own ``advertised.listeners`` give (``configs``: the dynamic configs by resource name), each
    over the cluster's for the listeners it names (host "": the one the broker advertises
    otherwise; port 0: the port bound); and the values the cluster's listeners no longer take
    (changed at a restart), which are left out: those brokers advertise what the cluster's
    settings say."""
    overrides, refused = {}, {}
    for resource, own in configs.items():
        value = own.get("advertised.listeners")
        if resource == CLUSTER_DEFAULT or value is None:
            continue
        try:
            overrides[int(resource)] = static.advertised(value)
        except InvalidConfigError as exc:
            refused[int(resource)] = str(exc)
    return overrides, refused


def _validated(name: str, value: str, static: ControllerConfig | None) -> str:
    if name == "advertised.listeners":
        (static or ControllerConfig()).advertised(value)
        return value
    topic_property = TOPIC_DEFAULTS.get(name)
    if topic_property is None:
        return value
    try:
        return TopicConfig.from_properties({topic_property: value}).to_properties()[topic_property]
    except InvalidConfigError as exc:
        raise InvalidConfigError(f"{name} (the default of topics' {topic_property}): {exc}") from None
