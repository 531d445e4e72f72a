"""The cluster's metadata as a state machine over a durable journal.

:class:`MetadataImage` holds brokers, topics and per-partition state (replicas, leader,
leader epoch, ISR). It changes only by :meth:`MetadataImage.apply` of a journal record, so
replaying the journal rebuilds it exactly. Records are msgpack maps with a ``type``:

    cluster   cluster_id                        the first record of a journal
    session_key  key                            the key of the clients' session tokens
                                                (after ``cluster``; made at the first start
                                                of a journal without one)
    broker    broker_id, node_id, data_dir, directory_id
                                                a broker registered, moved to a new node or
                                                back with a new log directory (its meta.json's
                                                directory id; absent in older journals)
    topic     name, topic_id, config, replicas, overrides
                                                a topic created (replicas per partition;
                                                ``config`` every property, ``overrides``
                                                the names set explicitly)
    partition topic, partition, leader, leader_epoch, isr, replicas, partition_epoch
    delete    name                              a topic deleted
    producer_ids  end                           producer ids below ``end`` are handed out
    reassignment  topic, partition, target, original
                                                a reassignment under way (empty target:
                                                done), from the replicas ``original`` it
                                                started from (absent in older journals)
    config    name, config, overrides           a topic's config altered (the whole new
                                                config, as in ``topic``)
    add_partitions  name, replicas              partitions added to a topic, numbered on
                                                from its partition count
    client_quota  client_id, quotas             a client id's byte-rate quotas altered (the
                                                whole new set, {} for none; client_id None:
                                                the default quota)
    acl       acl, present                      an ACL created (present) or deleted: ``acl`` is
                                                [principal, host, operation, permission type,
                                                resource type, resource name, pattern type]
                                                with Kafka's codes
    scram     user, mechanism, salt, stored_key, server_key, iterations
                                                a user's SCRAM credential for a mechanism set
                                                (no salt: deleted)
    broker_config  resource, configs            a broker resource's dynamic configs altered
                                                (the whole new set; resource "" is the
                                                cluster default, else a broker id): topics'
                                                configs take the new defaults
    group_config  group, configs                a group's dynamic configs altered (Kafka's
                                                GROUP config resource; the whole new set,
                                                {} for none)

The journal's file is :class:`raylog.storage.journal.MetadataJournal`'s (coordination does no
I/O of its own).

Concurrency: single-threaded; the controller actor owns the image.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from raylog.common import scram
from raylog.common.acl import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    validate_acl,
    validate_filter,
)
from raylog.common.names import CLUSTER_DEFAULT, INTERNAL_TOPICS, broker_id_of, check_group_name, validate_topic_name

from ..config import LIST_PROPERTIES, ControllerConfig, TopicConfig, check_remote_storage, list_operation
from ..errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    NoReassignmentInProgressError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from ..types import BrokerInfo, ConfigEntry, PartitionInfo, TopicDescription
from . import broker_configs, group_configs
from .consumer_group import ConsumerGroupConfig
from .placement import MAX_PARTITIONS, assign_replicas
from .quotas import alter_client_quotas

#: Every topic property's built-in default.
_TOPIC_DEFAULTS = TopicConfig().to_properties()


class MetadataImage:
    """Brokers, topics and partition states; see the module docstring."""

    def __init__(self) -> None:
        self.cluster_id: str | None = None
        self.brokers: dict[int, BrokerInfo] = {}
        #: Broker id -> the directory id of its data directory as last registered.
        self.directory_ids: dict[int, str] = {}
        self.topics: dict[str, TopicDescription] = {}
        #: Producer ids below this were (or may have been) handed out; never reuse them.
        self.producer_id_block_end = 0
        #: Reassignments under way: (topic, partition) -> target replicas.
        self.reassignments: dict[tuple[str, int], tuple[int, ...]] = {}
        #: Reassignments under way: (topic, partition) -> the replicas the first one started from.
        self.reassignment_origins: dict[tuple[str, int], tuple[int, ...]] = {}
        #: Per topic, the config properties set explicitly (the others have their default).
        self.config_overrides: dict[str, tuple[str, ...]] = {}
        #: Per topic, how many times its config was altered: replicas ignore an older one.
        self.config_versions: dict[str, int] = {}
        #: Byte-rate quotas: client id (None: the default) -> {quota key: bytes/s}.
        self.client_quotas: dict[str | None, dict[str, float]] = {}
        #: How many times quotas were altered: replicas ignore older ones.
        self.client_quotas_version = 0
        #: Kafka's ACLs (enforced by the listeners when the authorizer is on).
        self.acls: set[ACL] = set()
        #: How many times ACLs were created or deleted: listeners rebuild their authorizer when it moves.
        self.acls_version = 0
        #: SCRAM credentials: user -> mechanism -> credential (see :mod:`~raylog.common.scram`).
        self.scram_credentials: dict[str, scram.Credentials] = {}
        #: How many times credentials changed: listeners take them again when it moves.
        self.scram_version = 0
        #: Dynamic broker configs: "" (the cluster default) or a broker id -> {config: value}
        #: (see :mod:`~raylog.coordination.broker_configs`).
        self.broker_configs: dict[str, dict[str, str]] = {}
        #: Dynamic group configs: group id -> {config: value} (see
        #: :mod:`~raylog.coordination.group_configs`).
        self.group_configs: dict[str, dict[str, str]] = {}
        #: How many times group configs were altered: group coordinators ignore older ones.
        self.group_configs_version = 0
        #: The key the cluster signs its clients' session tokens with (hex; see
        #: :mod:`~raylog.coordination.sessions`), made with the cluster.
        self.session_key: str | None = None

    # --- records in ---------------------------------------------------------------------

    def apply(self, record: dict[str, Any]) -> None:
        kind = record["type"]
        if kind == "cluster":
            self.cluster_id = record["cluster_id"]
        elif kind == "session_key":
            self.session_key = record["key"]
        elif kind == "broker":
            self.brokers[record["broker_id"]] = BrokerInfo(record["broker_id"], record["node_id"], record["data_dir"])
            if record.get("directory_id"):
                self.directory_ids[record["broker_id"]] = record["directory_id"]
        elif kind == "topic":
            name = record["name"]
            partitions = tuple(_new_partition(name, p, replicas) for p, replicas in enumerate(record["replicas"]))
            self.topics[name] = TopicDescription(name, record["topic_id"], partitions, dict(record["config"]))
            # Journals written before overrides were recorded: every property counts as a default.
            self.config_overrides[name] = tuple(record.get("overrides", ()))
            self.config_versions[name] = 0
        elif kind == "partition":
            topic = self.topics[record["topic"]]
            partitions = list(topic.partitions)
            partitions[record["partition"]] = replace(
                partitions[record["partition"]],
                leader=record["leader"],
                leader_epoch=record["leader_epoch"],
                isr=tuple(record["isr"]),
                replicas=tuple(record["replicas"]),
                partition_epoch=record["partition_epoch"],
            )
            self.topics[topic.name] = replace(topic, partitions=tuple(partitions))
        elif kind == "delete":
            self.topics.pop(record["name"], None)
            self.config_overrides.pop(record["name"], None)
            self.config_versions.pop(record["name"], None)
            self.reassignments = {k: v for k, v in self.reassignments.items() if k[0] != record["name"]}
            self.reassignment_origins = {k: v for k, v in self.reassignment_origins.items() if k[0] != record["name"]}
        elif kind == "producer_ids":
            self.producer_id_block_end = record["end"]
        elif kind == "reassignment":
            key = (record["topic"], record["partition"])
            if record["target"]:
                self.reassignments[key] = tuple(record["target"])
                if "original" in record:
                    self.reassignment_origins[key] = tuple(record["original"])
            else:
                self.reassignments.pop(key, None)
                self.reassignment_origins.pop(key, None)
        elif kind == "config":
            name = record["name"]
            self.topics[name] = replace(self.topics[name], config=dict(record["config"]))
            self.config_overrides[name] = tuple(record["overrides"])
            self.config_versions[name] += 1
        elif kind == "add_partitions":
            topic = self.topics[record["name"]]
            first = len(topic.partitions)
            added = tuple(_new_partition(topic.name, first + i, r) for i, r in enumerate(record["replicas"]))
            self.topics[topic.name] = replace(topic, partitions=topic.partitions + added)
        elif kind == "client_quota":
            _set_or_drop(self.client_quotas, record["client_id"], record["quotas"])
            self.client_quotas_version += 1
        elif kind == "acl":
            acl = _acl_of(record["acl"])
            if record["present"]:
                self.acls.add(acl)
            else:
                self.acls.discard(acl)
            self.acls_version += 1
        elif kind == "scram":
            user, mechanism = record["user"], record["mechanism"]
            if record.get("salt"):
                fields = ("salt", "stored_key", "server_key", "iterations")
                made = scram.ScramCredential(mechanism, *(record[f] for f in fields))
                self.scram_credentials.setdefault(user, {})[mechanism] = made
            else:
                self.scram_credentials.get(user, {}).pop(mechanism, None)
                if not self.scram_credentials.get(user):
                    self.scram_credentials.pop(user, None)
            self.scram_version += 1
        elif kind == "broker_config":
            resource = record["resource"]
            before = broker_configs.topic_defaults(self.broker_configs.get(resource, {}))
            _set_or_drop(self.broker_configs, resource, record["configs"])
            after = broker_configs.topic_defaults(self.broker_configs.get(resource, {}))
            if resource == CLUSTER_DEFAULT:
                self._take_topic_defaults(before, after)
            elif before != after:
                for name in self.config_versions:  # the broker's replicas take its new defaults
                    self.config_versions[name] += 1
        elif kind == "group_config":
            _set_or_drop(self.group_configs, record["group"], record["configs"])
            self.group_configs_version += 1
        else:
            raise ValueError(f"unknown metadata record type {kind!r}")

    def _take_topic_defaults(self, before: Mapping[str, str], after: Mapping[str, str]) -> None:
        """Every topic's properties that it does not set itself and whose cluster default
        moved from ``before`` to ``after`` take the new default (the built-in one when it is
        no longer set); a topic whose config changed moves its version."""
        moved = {key for key in before.keys() | after.keys() if before.get(key) != after.get(key)}
        for name, topic in self.topics.items():
            keys = moved.difference(self.config_overrides[name])
            if keys:
                config = {**topic.config, **{key: after.get(key, _TOPIC_DEFAULTS[key]) for key in keys}}
                self.topics[name] = replace(topic, config=config)
                self.config_versions[name] += 1

    def _with_defaults(self, name: str, defaults: Mapping[str, str]) -> dict[str, str]:
        """Topic ``name``'s config with ``defaults`` (topic properties) for what it does not set.

        Raises:
            InvalidConfigError: they do not fit together (the message names the topic).
        """
        topic = self.topics[name]
        overrides = set(self.config_overrides[name])
        config = {**topic.config, **{key: value for key, value in defaults.items() if key not in overrides}}
        try:
            return TopicConfig.from_properties(config).to_properties()
        except InvalidConfigError as exc:
            raise InvalidConfigError(f"topic {name!r} would be refused with these defaults: {exc}") from None

    def replica_config(self, name: str, broker_id: int) -> dict[str, str]:
        """The config of topic ``name``'s replica on broker ``broker_id``: the topic's, under
        that broker's own dynamic defaults if it has any."""
        own = broker_configs.topic_defaults(self.broker_configs.get(str(broker_id), {}))
        return self._with_defaults(name, own) if own else self.topics[name].config

    # --- commands out: validate, then return the records that carry them out -----------

    def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        config: dict[str, Any] | None = None,
        rng=None,
        live: set[int] | None = None,
        remote_log_storage_uri: str = "",
    ) -> dict[str, Any]:
        """The record creating a topic, after Kafka's validations; replicas go to the
        ``live`` brokers (default: every registered broker). ``remote_log_storage_uri`` is the
        cluster's remote store (empty: none; the topic may not ask for tiered storage).

        Raises:
            InvalidTopicError, TopicAlreadyExistsError, InvalidPartitionsError,
            InvalidReplicationFactorError, InvalidConfigError.
        """
        validate_topic_name(name, existing=self.topics)
        if name in self.topics:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists")
        properties = TopicConfig.from_properties({**self._cluster_topic_defaults(), **(config or {})}).to_properties()
        check_remote_storage(properties, None, remote_log_storage_uri)
        brokers = sorted(self.brokers if live is None else live)
        replicas = assign_replicas(num_partitions, replication_factor, brokers, rng)
        return {
            "type": "topic",
            "name": name,
            "topic_id": uuid.uuid4().hex,
            "config": properties,
            "replicas": [list(r) for r in replicas],
            "overrides": sorted({TopicConfig.property_name(key) for key in config or {}}),
        }

    def alter_config(
        self, name: str, changes: Mapping[str, Any], *, incremental: bool = True, remote_log_storage_uri: str = ""
    ) -> dict[str, Any]:
        """The record altering a topic's config. Incremental (Kafka's
        IncrementalAlterConfigs): a value sets a property, None deletes its override (back
        to the default), ``("append", value)`` / ``("subtract", value)`` add or remove
        comma-separated items of a list property (``cleanup.policy``); the properties not
        named keep their values. Not incremental (Kafka's AlterConfigs): ``changes`` is the
        topic's whole set of overrides, and every property it does not set (or sets to
        None) goes back to its default. The result is validated as a whole, so a refused
        change alters nothing. Every topic property applies to live replicas (a segment
        setting from the next segment on). ``remote_log_storage_uri``: as for
        :meth:`create_topic`; tiered storage, once on, stays on.

        Raises:
            UnknownTopicOrPartitionError: no such topic.
            InvalidConfigError: an unknown property (the message lists the known ones), a
                value out of range (the message names the property), or an append or
                subtract of a property that is not a list, or outside an incremental alter.
        """
        topic = self.topic(name)
        overrides = {key: topic.config[key] for key in self.config_overrides[name]} if incremental else {}
        for key, value in changes.items():
            prop = TopicConfig.property_name(key)
            if isinstance(value, tuple):
                value = list_operation(prop, topic.config[prop], value, incremental, LIST_PROPERTIES)
            if value is None:
                overrides.pop(prop, None)
            else:
                overrides[prop] = value
        properties = TopicConfig.from_properties({**self._cluster_topic_defaults(), **overrides}).to_properties()
        check_remote_storage(properties, topic.config, remote_log_storage_uri)
        return {"type": "config", "name": name, "config": properties, "overrides": sorted(overrides)}

    def describe_config(self, name: str) -> dict[str, ConfigEntry]:
        """Every config property of a topic with its value and source ("topic" when set
        explicitly, "dynamic_default_broker" when a cluster-wide dynamic broker config gives
        it, else "default"), by name.

        Raises:
            UnknownTopicOrPartitionError: no such topic.
        """
        config = self.topic(name).config
        overrides = set(self.config_overrides[name])
        cluster = self._cluster_topic_defaults()

        def source(key: str) -> str:
            return "topic" if key in overrides else "dynamic_default_broker" if key in cluster else "default"

        return {key: ConfigEntry(value, source(key)) for key, value in sorted(config.items())}

    def _cluster_topic_defaults(self) -> dict[str, str]:
        return broker_configs.topic_defaults(self.broker_configs.get(CLUSTER_DEFAULT, {}))

    def alter_broker_config(
        self, resource: str, changes: Mapping[str, Any], *, incremental: bool, static: ControllerConfig | None = None
    ) -> dict[str, Any]:
        """The record altering a broker resource's dynamic configs (Kafka's AlterConfigs and
        IncrementalAlterConfigs of a broker; changes shaped as :meth:`alter_config`'s, see
        :func:`~raylog.coordination.broker_configs.alter`). ``resource`` is "" (the cluster
        default, every broker) or a registered broker's id; ``static``: the cluster's settings,
        which a broker's own ``advertised.listeners`` must fit. Every topic must still take its
        new defaults, so a refused change alters nothing.

        Raises:
            InvalidRequestError: not a broker resource, or a read-only config.
            InvalidConfigError: a value refused, or a topic that would not take it (named).
        """
        self._require_broker_resource(resource)
        current = self.broker_configs.get(resource, {})
        configs = broker_configs.alter(current, changes, incremental=incremental, resource=resource, static=static)
        defaults = broker_configs.topic_defaults(configs)
        if resource == CLUSTER_DEFAULT:
            for name in self.topics:
                self._with_defaults(name, defaults)
                for broker_id in {b for p in self.topics[name].partitions for b in p.replicas}:
                    own = broker_configs.topic_defaults(self.broker_configs.get(str(broker_id), {}))
                    self._with_defaults(name, {**defaults, **own})
        else:
            cluster = self._cluster_topic_defaults()
            for name, topic in self.topics.items():
                if any(int(resource) in p.replicas for p in topic.partitions):
                    self._with_defaults(name, {**cluster, **defaults})
        return {"type": "broker_config", "resource": resource, "configs": configs}

    def describe_broker_config(self, resource: str, static: Mapping[str, str]) -> dict[str, ConfigEntry]:
        """Every config of a broker resource with its value and source: "dynamic_broker" (set
        for this broker), "dynamic_default_broker" (the cluster default), "static_broker"
        (``static``: raylog's settings given at start) or "default" (a topic default's
        built-in value). A secret's value (``ssl.key.password``) is None.

        Raises:
            InvalidRequestError: not "" nor a registered broker's id.
        """
        self._require_broker_resource(resource)
        layers = [
            (self.broker_configs.get(resource, {}) if resource else {}, "dynamic_broker"),
            (self.broker_configs.get(CLUSTER_DEFAULT, {}), "dynamic_default_broker"),
            (static, "static_broker"),
            ({broker: _TOPIC_DEFAULTS[topic] for topic, broker in broker_configs.TOPIC_SYNONYMS.items()}, "default"),
        ]
        described = {}
        for configs, source in layers:
            for name, value in configs.items():
                described.setdefault(name, ConfigEntry(broker_configs.shown(name, value), source))
        return dict(sorted(described.items()))

    def alter_group_config(
        self, group_id: str, changes: Mapping[str, Any], broker: ConsumerGroupConfig, *, incremental: bool
    ) -> dict[str, Any]:
        """The record altering a group's dynamic configs (Kafka's AlterConfigs and
        IncrementalAlterConfigs of a GROUP resource; changes shaped as :meth:`alter_config`'s,
        checked against the broker's consumer group settings ``broker``, see
        :func:`~raylog.coordination.group_configs.alter`). The group need not exist.

        Raises:
            InvalidRequestError: the group id "".
            InvalidConfigError: an unknown config, or a value refused.
        """
        check_group_name(group_id)
        current = self.group_configs.get(group_id, {})
        configs = group_configs.alter(current, changes, broker, incremental=incremental)
        return {"type": "group_config", "group": group_id, "configs": configs}

    def describe_group_config(self, group_id: str, broker: ConsumerGroupConfig) -> dict[str, ConfigEntry]:
        """Every config of a group with its value and source: "group" (set on the group),
        "static_broker" (the broker's setting ``broker`` gives it) or "default".

        Raises:
            InvalidRequestError: the group id "".
        """
        check_group_name(group_id)
        configs = self.group_configs.get(group_id, {})
        described = {}
        for name in sorted(group_configs.BROKER_SYNONYMS):
            _, value, source = group_configs.synonyms(name, configs, broker)[0]
            described[name] = ConfigEntry(value, source)
        return described

    def _require_broker_resource(self, resource: str) -> None:
        broker_id = broker_id_of(resource)
        if broker_id is not None and broker_id not in self.brokers:
            raise InvalidRequestError(f"no broker {broker_id} (brokers: {sorted(self.brokers)})")

    def add_partitions(
        self, name: str, total_count: int, rng: random.Random | None = None, live: set[int] | None = None
    ) -> dict[str, Any]:
        """The record growing a topic to ``total_count`` partitions (Kafka's CreatePartitions).
        The new ones are placed on the ``live`` brokers (default: every registered broker)
        by Kafka's scheme, continued from the topic's partition count and partition 0's
        first replica, with partition 0's replication factor (its target while it moves).

        Raises:
            UnknownTopicOrPartitionError: no such topic.
            InvalidPartitionsError: an internal topic, or ``total_count`` not above the
                current count or above ``MAX_PARTITIONS``.
            InvalidReplicationFactorError: fewer live brokers than the replication factor.
        """
        if name in INTERNAL_TOPICS:
            raise InvalidPartitionsError(f"the partition count of internal topic {name!r} cannot change")
        topic = self.topic(name)
        current = len(topic.partitions)
        if isinstance(total_count, bool) or not isinstance(total_count, int) or not current < total_count:
            raise InvalidPartitionsError(
                f"topic {name!r} has {current} partitions: the count can only grow, got {total_count!r}"
            )
        if total_count > MAX_PARTITIONS:
            raise InvalidPartitionsError(f"at most {MAX_PARTITIONS} partitions per topic, got {total_count}")
        first = topic.partitions[0]
        replication_factor = len(self.reassignments.get((name, 0), first.replicas))
        brokers = sorted(self.brokers if live is None else live)
        start = next((i for i, b in enumerate(brokers) if b >= first.replicas[0]), None)
        replicas = assign_replicas(
            total_count - current, replication_factor, brokers, rng, first_partition=current, start_index=start
        )
        return {"type": "add_partitions", "name": name, "replicas": [list(r) for r in replicas]}

    def alter_client_quotas(self, changes: Mapping[Any, Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The records altering client quotas (Kafka's AlterClientQuotas): per client id
        (None: the default quota), a rate sets a quota and None removes it.

        Raises:
            InvalidConfigError: a bad client id, quota name or rate; nothing is altered.
        """
        altered = alter_client_quotas(self.client_quotas, changes)
        return [{"type": "client_quota", "client_id": c, "quotas": quotas} for c, quotas in altered.items()]

    def create_acls(self, acls: list[ACL]) -> list[dict[str, Any]]:
        """The records creating ``acls`` (Kafka's CreateAcls), those that exist already left out.

        Raises:
            InvalidRequestError: an ACL Kafka would refuse (see :func:`~raylog.common.acl.validate_acl`);
                nothing is created.
        """
        for acl in acls:
            validate_acl(acl)
        new = [acl for acl in dict.fromkeys(acls) if acl not in self.acls]
        return [{"type": "acl", "acl": _acl_record(acl), "present": True} for acl in new]

    def delete_acls(self, filters: list[ACLFilter]) -> tuple[list[dict[str, Any]], list[list[ACL]]]:
        """The records deleting every ACL that matches one of ``filters`` (Kafka's DeleteAcls),
        and per filter the ACLs it matched.

        Raises:
            InvalidRequestError: a filter Kafka would refuse; nothing is deleted.
        """
        for acl_filter in filters:
            validate_filter(acl_filter)
        matched = [sorted((acl for acl in self.acls if f.matches(acl)), key=_acl_record) for f in filters]
        doomed = dict.fromkeys(acl for found in matched for acl in found)
        return [{"type": "acl", "acl": _acl_record(acl), "present": False} for acl in doomed], matched

    def describe_acls(self, acl_filter: ACLFilter) -> list[ACL]:
        """The ACLs matching ``acl_filter`` (Kafka's DescribeAcls), in a stable order.

        Raises:
            InvalidRequestError: a filter Kafka would refuse.
        """
        validate_filter(acl_filter)
        return sorted((acl for acl in self.acls if acl_filter.matches(acl)), key=_acl_record)

    def alter_scram_credentials(
        self, deletions: list[tuple[str, int]], upsertions: list[tuple[str, int, int, bytes, bytes]]
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The records of Kafka's AlterUserScramCredentials and per user its refusal (None:
        accepted; see :func:`~raylog.common.scram.alter`)."""
        changes, results = scram.alter(self.scram_credentials, deletions, upsertions)
        records = []
        for user, mechanism, made in changes:
            record = {"type": "scram", "user": user, "mechanism": mechanism}
            if made is not None:
                record.update(salt=made.salt, stored_key=made.stored_key, server_key=made.server_key)
                record["iterations"] = made.iterations
            records.append(record)
        return records, results

    def allocate_producer_ids(self, count: int) -> dict[str, Any]:
        """The record reserving the next ``count`` producer ids."""
        return {"type": "producer_ids", "end": self.producer_id_block_end + count}

    def partitions(self) -> list[PartitionInfo]:
        return [p for topic in self.topics.values() for p in topic.partitions]

    def reassign(
        self, topic: str, partition: int, target: list[int], allow_replication_factor_change: bool = True
    ) -> list[dict[str, Any]]:
        """Records starting a reassignment of a partition to ``target`` replicas: the
        targets join as extra replicas now; the switch comes once they are all in sync.

        Raises:
            UnknownTopicOrPartitionError, InvalidReplicaAssignmentError,
            InvalidReplicationFactorError: ``target`` changes the number of replicas and
                ``allow_replication_factor_change`` is false (KIP-860).
        """
        info = self.partition(topic, partition)
        target = list(target)
        if not target or len(set(target)) != len(target) or not set(target) <= set(self.brokers):
            raise InvalidReplicaAssignmentError(
                f"target replicas {target} must be distinct registered brokers {sorted(self.brokers)}"
            )
        original = self.reassignment_origins.get((topic, partition), info.replicas)
        if not allow_replication_factor_change and len(target) != len(original):
            raise InvalidReplicationFactorError(
                f"{topic}-{partition}: target replicas {target} change its replication factor {len(original)}"
            )
        replicas = tuple(target) + tuple(r for r in info.replicas if r not in target)
        moving = replace(info, replicas=replicas, partition_epoch=info.partition_epoch + 1)
        return [
            {"type": "reassignment", "topic": topic, "partition": partition, "target": target, "original": original},
            partition_record(moving),
        ]

    def cancel_reassignment(self, topic: str, partition: int) -> list[dict[str, Any]]:
        """Records cancelling the reassignment of a partition (Kafka's AlterPartitionReassignments
        with null replicas): a reassignment back to the replicas it started from.

        Raises:
            UnknownTopicOrPartitionError, NoReassignmentInProgressError.
        """
        self.partition(topic, partition)
        original = self.reassignment_origins.get((topic, partition))
        if original is None:  # none under way, or one of an older journal that did not record it
            raise NoReassignmentInProgressError(f"{topic}-{partition} has no reassignment to cancel")
        return self.reassign(topic, partition, list(original))

    def listed_reassignments(self) -> dict[tuple[str, int], tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
        """Per reassignment under way, as Kafka's ListPartitionReassignments: the partition's
        replicas now, those being added (in the target, not among the replicas it started
        from) and those being removed (not in the target)."""
        listed = {}
        for (topic, partition), target in self.reassignments.items():
            replicas = self.partition(topic, partition).replicas
            original = self.reassignment_origins.get((topic, partition), replicas)
            adding = tuple(r for r in target if r not in original)
            listed[(topic, partition)] = (replicas, adding, tuple(r for r in replicas if r not in target))
        return listed

    def delete_topic(self, name: str) -> dict[str, Any]:
        self.topic(name)
        return {"type": "delete", "name": name}

    def topic(self, name: str) -> TopicDescription:
        """Raises UnknownTopicOrPartitionError when there is no such topic."""
        try:
            return self.topics[name]
        except KeyError:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}") from None

    def partition(self, topic: str, partition: int) -> PartitionInfo:
        partitions = self.topic(topic).partitions
        if not isinstance(partition, int) or not 0 <= partition < len(partitions):
            raise UnknownTopicOrPartitionError(f"topic {topic!r} has no partition {partition!r}")
        return partitions[partition]


def _set_or_drop(mapping: dict, key: Any, values: dict) -> None:
    """A replayed record's settings: ``mapping[key]`` becomes a copy of ``values``, or goes
    when they are empty (the record of a deletion)."""
    if values:
        mapping[key] = dict(values)
    else:
        mapping.pop(key, None)


def _new_partition(topic: str, partition: int, replicas: list[int]) -> PartitionInfo:
    """A partition as created: led by its first replica, every replica in sync."""
    return PartitionInfo(topic, partition, replicas[0], 0, tuple(replicas), tuple(replicas))


def _acl_record(acl: ACL) -> list:
    p = acl.pattern
    return [
        acl.principal,
        acl.host,
        int(acl.operation),
        int(acl.permission_type),
        int(p.resource_type),
        p.name,
        int(p.pattern_type),
    ]


def _acl_of(fields: list) -> ACL:
    principal, host, operation, permission, resource_type, name, pattern_type = fields
    pattern = ResourcePattern(ResourceType(resource_type), name, PatternType(pattern_type))
    return ACL(principal, host, ACLOperation(operation), ACLPermissionType(permission), pattern)


def partition_record(info: PartitionInfo) -> dict[str, Any]:
    """The journal record that sets a partition to ``info``."""
    return {
        "type": "partition",
        "topic": info.topic,
        "partition": info.partition,
        "leader": info.leader,
        "leader_epoch": info.leader_epoch,
        "isr": list(info.isr),
        "replicas": list(info.replicas),
        "partition_epoch": info.partition_epoch,
    }
