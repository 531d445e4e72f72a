"""The configs' family of the Admin (Kafka's Admin.describeConfigs, alterConfigs,
incrementalAlterConfigs, alterClientQuotas and describeClientQuotas; kafka-configs.sh):
:class:`ConfigAdmin`, and the checking of config resources and changes into what the
controller is sent, keyed by resource, before anything is sent."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from raylog.clients.admin.base import AdminBase, names, raise_first
from raylog.common.names import broker_id_of, check_group_name
from raylog.errors import InvalidConfigError, InvalidRequestError
from raylog.types import AlterConfigOp, ConfigEntry, ConfigResource, ConfigResourceType

#: What :meth:`Admin.alter_configs` and :meth:`Admin.incremental_alter_configs` take.
ConfigResources = Mapping[str, Mapping[str, Any] | None] | Iterable[ConfigResource]
#: A config resource as the Admin keys it: a topic's name, or ``(ConfigResourceType.BROKER,
#: name)`` for a broker resource (``name`` a broker id, or "" for the cluster default), or
#: ``(ConfigResourceType.GROUP, group id)``.
ResourceKey = str | tuple[ConfigResourceType, str]
#: The controller's methods describing and altering each type of resource.
_DESCRIBE = {
    ConfigResourceType.TOPIC: "describe_configs",
    ConfigResourceType.BROKER: "describe_broker_configs",
    ConfigResourceType.GROUP: "describe_group_configs",
}
_ALTER = {
    ConfigResourceType.TOPIC: "alter_configs",
    ConfigResourceType.BROKER: "alter_broker_configs",
    ConfigResourceType.GROUP: "alter_group_configs",
}


class ConfigAdmin(AdminBase):
    """The configs of topics, brokers and groups, and the client quotas."""

    def alter_configs(self, resources: ConfigResources, *, incremental: bool = False) -> None:
        """Replace the configs of topics and broker resources (Kafka's AlterConfigs,
        confluent-kafka's and kafka-python 2.x's ``alter_configs``): each resource's configs
        set become exactly those given, and every config not given (or given None) goes back
        to its default. To change some configs and keep the others, use
        :meth:`incremental_alter_configs`. Each resource is altered or refused as a whole,
        atomically; the change reaches the live replicas without a restart (segment settings
        apply from the next segment on).

        A broker resource, ``ConfigResource(ConfigResourceType.BROKER, "0")`` (a broker id)
        or ``""`` (the cluster default, every broker), holds Kafka's dynamic broker configs
        (see :mod:`raylog.coordination.broker_configs`): a topic property's broker name
        (``log.retention.ms``) is the default of every topic that does not set it itself, on
        that broker's replicas or everywhere; raylog's static settings (the controller's,
        ``num.partitions`` ...) are read-only; other names are kept.

        A group resource, ``ConfigResource(ConfigResourceType.GROUP, "orders")``, holds Kafka
        4's group configs (``consumer.session.timeout.ms``, ``consumer.heartbeat.interval.ms``;
        see :mod:`raylog.coordination.group_configs`): the group's members of Kafka's consumer
        protocol get them from their next heartbeat, in place of the broker's
        ``group.consumer.*`` settings, within its min / max bounds. The group need not exist,
        and DeleteGroups keeps them, as in Kafka.

        Args:
            resources: ``{topic: {property: value}}``, or a list of
                :class:`~raylog.types.ConfigResource` (topic, broker or group resources).
            incremental: True makes this :meth:`incremental_alter_configs` (kafka-python
                3's ``alter_configs(..., incremental=True)``). Note that kafka-python 3
                alters incrementally by default where raylog, as Kafka's AlterConfigs,
                replaces.

        Example:
            >>> admin.alter_configs({"clicks": {"retention.ms": "3600000"}})  # doctest: +SKIP

        Raises:
            The first refusal's typed error (UnknownTopicOrPartitionError, InvalidConfigError
            naming the config or the broker bound a group's value breaks, InvalidRequestError
            for a read-only broker config or a broker id that is not registered), after every
            other resource was handled.
            InvalidConfigError: an ``(op, value)`` change (incremental only).
            InvalidRequestError: a resource neither a topic, a broker nor a group, a broker
                resource named neither by a broker id nor "", a group named "", or a resource
                named twice.
            TypeError: resources, names or configs of the wrong shape.
        """
        if not isinstance(incremental, bool):
            raise TypeError(f"incremental must be True or False, got {incremental!r}")
        self._alter_configs(_config_changes(resources, incremental=incremental), incremental=incremental)

    def incremental_alter_configs(self, resources: ConfigResources) -> None:
        """Change some configs of topics and broker resources and keep the others (Kafka's
        IncrementalAlterConfigs; confluent-kafka's ``incremental_alter_configs``): a value
        sets a config, None deletes it (back to the default), and ``(AlterConfigOp, value)``
        names the operation: SET, DELETE, or APPEND / SUBTRACT comma-separated items of a
        list config (a topic's ``cleanup.policy``, a broker's ``log.cleanup.policy``). Each
        resource is altered or refused as a whole, atomically, and the change reaches the
        live replicas. Broker and group resources are as at :meth:`alter_configs`.

        Args:
            resources: ``{topic: {property: change}}``, or a list of
                :class:`~raylog.types.ConfigResource` (topic, broker or group resources).

        Example:
            >>> admin.incremental_alter_configs(                                 # doctest: +SKIP
            ...     {"clicks": {"retention.ms": "3600000", "segment.bytes": None}})
            >>> admin.incremental_alter_configs(                                 # doctest: +SKIP
            ...     [ConfigResource(ConfigResourceType.BROKER, "", {"log.retention.ms": "3600000"})])

        Raises:
            The first refusal's typed error (UnknownTopicOrPartitionError, InvalidConfigError
            naming the config, or the broker bound a group's value breaks, or for an APPEND /
            SUBTRACT of a config that is not a list, InvalidRequestError for a read-only broker
            config or a broker id that is not registered), after every other resource was
            handled.
            InvalidRequestError: a resource neither a topic, a broker nor a group, a broker
                resource named neither by a broker id nor "", a group named "", or a resource
                named twice.
            TypeError: resources, names, configs or an operation of the wrong shape.
        """
        self._alter_configs(_config_changes(resources, incremental=True), incremental=True)

    def _alter_configs(self, changes: dict[ResourceKey, dict[str, Any]], incremental: bool) -> None:
        results = self._per_resource(changes, lambda kind, named: self._ask(_ALTER[kind], named, incremental))
        self._cluster.metadata(refresh=True)
        raise_first(results)

    def describe_configs(
        self, resources: list[str | ConfigResource]
    ) -> dict[str | tuple[ConfigResourceType, str], dict[str, ConfigEntry]]:
        """Every config of each resource, ``{config: ConfigEntry(value, source)}``, keyed by
        the topic's name for a topic, by ``(ConfigResourceType.BROKER, name)`` for a broker
        resource (``name`` a broker id, or "" for the cluster default) and by
        ``(ConfigResourceType.GROUP, group id)`` for a group, in the order asked.

        A topic's sources: ``"topic"`` (set on the topic), ``"dynamic_default_broker"`` (the
        cluster default's broker config, ``log.retention.ms`` ...), else ``"default"``. A
        broker resource's: ``"dynamic_broker"`` (set for that broker),
        ``"dynamic_default_broker"``, ``"static_broker"`` (raylog's settings given when the
        cluster started; read-only), else ``"default"`` (a topic property's built-in default).
        A group's: ``"group"`` (set on the group), ``"static_broker"`` (the broker's
        ``group.consumer.*`` setting given when the cluster started), else ``"default"``.

        Args:
            resources: topic names, or :class:`~raylog.types.ConfigResource` (topic, broker or
                group resources; their configs are not looked at).

        Example:
            >>> admin.describe_configs(["clicks", ConfigResource("broker", "0")])  # doctest: +SKIP
            {'clicks': {...}, (<ConfigResourceType.BROKER: 4>, '0'): {...}}

        Raises:
            UnknownTopicOrPartitionError: a name that is not a topic.
            InvalidRequestError: a resource neither a topic, a broker nor a group, a broker
                resource that is not "" nor a registered broker's id, or a group named "".
        """
        keys = [r if isinstance(r, str) else _resource_key(*_resource(r)[:2]) for r in names(resources)]
        results = self._per_resource(dict.fromkeys(keys), lambda kind, named: self._ask(_DESCRIBE[kind], list(named)))
        raise_first({key: (code, message) for key, (code, message, _) in results.items()})
        return {key: entries for key, (_, _, entries) in results.items()}

    def _per_resource(
        self, asked: dict[ResourceKey, Any], ask: Callable[[ConfigResourceType, dict], Any]
    ) -> dict[ResourceKey, tuple]:
        """The controller's answer for each resource of ``asked`` (keyed as
        :func:`_resource_key`), in its order: those of each type from ``ask(type, {resource
        name: item})``."""
        answers: dict[ResourceKey, tuple] = {}
        for kind in ConfigResourceType:
            named = {_key_name(key): item for key, item in asked.items() if _key_type(key) == kind}
            if named:
                answered = self._answer(ask(kind, named))
                answers.update({_resource_key(kind, name): answer for name, answer in answered.items()})
        return {key: answers[key] for key in asked}

    def alter_client_quotas(self, quotas: dict[str | None, dict[str, float | None]]) -> None:
        """Set or remove client byte-rate quotas (Kafka's AlterClientQuotas for client-id
        entities), all or nothing: per client id (None: the default quota, for every client
        id without one of its own), ``producer_byte_rate`` and ``consumer_byte_rate`` in
        bytes/s; None removes a quota, a quota not named is kept. Leaders apply the change
        without a restart. Quotas hold per partition leader (see docs/guide.md, "Quotas").

        Example:
            >>> admin.alter_client_quotas({"etl": {"producer_byte_rate": 10e6}})  # doctest: +SKIP
            >>> admin.alter_client_quotas({None: {"consumer_byte_rate": None}})  # doctest: +SKIP

        Raises:
            InvalidConfigError: a client id that is not a non-empty string or None, an unknown
                quota name, or a rate that is not a positive number.
        """
        changes = {client_id: dict(change) for client_id, change in quotas.items()}
        code, message = self._answer(self._ask("alter_client_quotas", changes))
        raise_first({"quotas": (code, message)})

    def describe_client_quotas(self) -> dict[str | None, dict[str, float]]:
        """Every client quota set: ``{client_id: {"producer_byte_rate": bytes/s, ...}}``, the
        default quota under None."""
        return self._answer(self._ask("describe_client_quotas"))


def _resource(resource: Any) -> tuple[ConfigResourceType, str, Mapping[str, Any] | None]:
    """``(type, name, configs)`` of a ConfigResource (or an object shaped like kafka-python's).

    Raises:
        InvalidRequestError: a resource type other than TOPIC, BROKER or GROUP, a broker
            resource named neither by a broker id (digits, as ``str(broker_id)`` writes it)
            nor "", or a group resource named "".
        TypeError: not a ConfigResource, or a name that is not a string.
    """
    try:
        kind, name, configs = resource.resource_type, resource.name, resource.configs
    except AttributeError:
        raise TypeError(f"expected a topic name or a ConfigResource, got {resource!r}") from None
    try:
        kind = ConfigResourceType[kind.upper()] if isinstance(kind, str) else ConfigResourceType(kind)
    except (KeyError, ValueError):
        known = "TOPIC, BROKER or GROUP"
        raise InvalidRequestError(f"unknown resource type {resource.resource_type!r} ({known})") from None
    if not isinstance(name, str):
        raise TypeError(f"a {kind.name.lower()} resource's name must be a string, got {name!r}")
    if kind == ConfigResourceType.BROKER:
        broker_id_of(name)
    if kind == ConfigResourceType.GROUP:
        check_group_name(name)
    return kind, name, configs


def _resource_key(kind: ConfigResourceType, name: str) -> ResourceKey:
    """How the Admin keys a resource: a topic by its name, another by ``(type, name)``."""
    return name if kind == ConfigResourceType.TOPIC else (kind, name)


def _key_type(key: ResourceKey) -> ConfigResourceType:
    return ConfigResourceType.TOPIC if isinstance(key, str) else key[0]


def _key_name(key: ResourceKey) -> str:
    return key if isinstance(key, str) else key[1]


def _resource_label(key: ResourceKey) -> str:
    """A resource as messages name it: ``topic 'clicks'``, ``broker 0``, ``the cluster
    default``, ``group 'orders'``."""
    if isinstance(key, str):
        return f"topic {key!r}"
    if key[0] == ConfigResourceType.GROUP:
        return f"group {key[1]!r}"
    return f"broker {key[1]}" if key[1] else 'the cluster default (broker resource "")'


def _config_changes(resources: ConfigResources, incremental: bool) -> dict[ResourceKey, dict[str, Any]]:
    """``{resource: {config: change}}`` for the controller from the dict or ConfigResource
    forms, keyed as :func:`_resource_key` (the dict form names topics only), in order: a
    change is a value, None, or (incremental only) ``("append" | "subtract", items)``.

    Raises:
        InvalidRequestError: a resource neither a topic nor a broker, a broker resource's
            name that is not one, or a resource named twice.
        InvalidConfigError: an ``(op, value)`` change outside an incremental alter.
        TypeError: a shape that is neither form, a name that is not a string, or an unknown
            operation.
    """
    if isinstance(resources, Mapping):
        triples = [(ConfigResourceType.TOPIC, name, configs) for name, configs in resources.items()]
    elif isinstance(resources, (str, bytes)) or not isinstance(resources, Iterable):
        raise TypeError(f"expected {{topic: {{property: value}}}} or a list of ConfigResource, got {resources!r}")
    else:
        triples = [_resource(resource) for resource in resources]
    changes: dict[ResourceKey, dict[str, Any]] = {}
    for kind, name, configs in triples:
        if not isinstance(name, str):
            raise TypeError(f"a topic's name must be a string, got {name!r}")
        key = _resource_key(kind, name)
        label = _resource_label(key)
        if key in changes:
            raise InvalidRequestError(f"{label} is named twice")
        if configs is not None and not isinstance(configs, Mapping):
            raise TypeError(f"the configs of {label} must be a dict of config -> value, got {configs!r}")
        changes[key] = {config: _change(label, config, value, incremental) for config, value in (configs or {}).items()}
    return changes


def _change(resource: str, key: Any, value: Any, incremental: bool) -> Any:
    """One config's change for the controller (``resource`` names its resource in messages)."""
    if not isinstance(key, str):
        raise TypeError(f"a config of {resource} must be named by a string, got {key!r}")
    if not isinstance(value, tuple):
        return value
    if len(value) != 2:
        raise TypeError(f"{resource} {key}: a change is a value, None or (AlterConfigOp, value), got {value!r}")
    op, operand = value
    try:
        op = AlterConfigOp[op.upper()] if isinstance(op, str) else AlterConfigOp(op)
    except (KeyError, ValueError):
        raise TypeError(f"{resource} {key}: unknown operation {value[0]!r} (SET, DELETE, APPEND or SUBTRACT)") from None
    if not incremental and op != AlterConfigOp.SET:
        raise InvalidConfigError(
            f"{resource} {key}: alter_configs replaces the resource's configs and only sets values; "
            f"{op.name} is for incremental_alter_configs"
        )
    if op == AlterConfigOp.SET:
        return operand
    if op == AlterConfigOp.DELETE:
        return None
    return (op.name.lower(), operand)
