"""Kafka's topic admin APIs on raylog's controller: CreateTopics v2-7, DeleteTopics v1-6,
CreatePartitions v0-3, DescribeConfigs v1-4, AlterConfigs v0-2, IncrementalAlterConfigs v0-1,
ElectLeaders v0-2, AlterPartitionReassignments v0-1, ListPartitionReassignments v0 and
DescribeLogDirs v1-5.

- CreateTopics: ``num_partitions`` / ``replication_factor`` of -1 take Kafka's broker
  defaults (``num.partitions`` 1, ``default.replication.factor`` 1). Manual ``assignments``
  (then both counts must be -1) create the topic with that many partitions and replicas,
  then move each partition whose placement differs to its assigned brokers with a
  reassignment (the new replicas catch up, the switch follows; Metadata shows the interim
  replica set meanwhile). ``validate_only`` checks everything the controller checks (name,
  collision, counts against the live brokers, configs, assignments) and creates nothing.
  From v5 a created (or validated) topic's partition count, replication factor and every
  config with its source come back; from v7 its topic id.
- DeleteTopics: by name, or (v6) by topic id (KIP-516: raylog's topics have ids), an
  unknown id is UNKNOWN_TOPIC_ID.
- CreatePartitions: assignments of the new partitions are honoured as CreateTopics' are
  (raylog places them, then reassigns); ``validate_only`` adds nothing.
- DescribeConfigs: a topic (resource type 2) lists every property with its value, its
  source (DYNAMIC_TOPIC_CONFIG when set on the topic, DYNAMIC_DEFAULT_BROKER_CONFIG when a
  cluster-wide dynamic broker config gives it, DEFAULT_CONFIG otherwise), not read only, its
  synonyms when asked (the topic's value, then the broker config's by its broker name, as
  Kafka names them: ``log.retention.ms``) and its documentation when asked (raylog's
  description of the setting). A broker (type 4, the broker id or "" for the cluster default)
  lists its dynamic configs, raylog's static settings (read only, STATIC_BROKER_CONFIG) and
  the topic defaults' broker names (see :mod:`raylog.coordination.broker_configs`). A group
  (type 32, Kafka 4's group configs, KIP-848) lists ``consumer.session.timeout.ms`` and
  ``consumer.heartbeat.interval.ms``: the group's own value (DYNAMIC_GROUP_CONFIG, source 8),
  else the broker's ``group.consumer.*`` setting (STATIC_BROKER_CONFIG where the cluster was
  started with one, DEFAULT_CONFIG otherwise), with that chain as synonyms, as Kafka 4.x
  describes them (see :mod:`raylog.coordination.group_configs`); the group need not exist.
- AlterConfigs replaces a resource's configs with those given (a topic's overrides: the rest
  go back to their defaults), IncrementalAlterConfigs changes only those named (SET, DELETE,
  APPEND and SUBTRACT of a list config), each topic, broker or group resource as a whole,
  atomically, as raylog's ``Admin.alter_configs`` / ``incremental_alter_configs`` do;
  ``validate_only`` checks and changes nothing. A broker's static setting is refused
  (INVALID_REQUEST, Kafka's "Cannot update these configs dynamically"). A config named twice
  in a resource, an unknown operation, or a null value to set, append or subtract is
  INVALID_REQUEST, as in Kafka.
- ElectLeaders: a preferred (v0, or election type 0) or unclean (type 1) election in each
  partition named, or in every partition when none is named (then only the partitions where
  an election was needed are answered, as Kafka does): ELECTION_NOT_NEEDED where the replica
  it would elect leads, PREFERRED_LEADER_NOT_AVAILABLE where the first replica is not live or
  not in sync, ELIGIBLE_LEADERS_NOT_AVAILABLE where no replica is live. An unclean election
  may elect a replica that lacks acknowledged records; it is the operator's to ask for.
- AlterPartitionReassignments starts moving each partition to its target replicas (the new
  ones catch up, the switch follows once all are in sync), or, for null replicas, cancels
  the reassignment under way by moving back to the replicas it started from
  (NO_REASSIGNMENT_IN_PROGRESS when there is none); v1's ``allow_replication_factor_change``
  false refuses a target of another size (INVALID_REPLICATION_FACTOR, KIP-860). A partition
  named twice refuses the whole request (INVALID_REQUEST). ListPartitionReassignments lists
  each reassignment under way (of the partitions asked, or all): the replicas now, those being
  added and those being removed.
- DescribeLogDirs: the listener's broker has one log directory, its data directory: each of
  its replicas (of the partitions asked, or all) with its size on disk and its offset lag
  (its high watermark less its log end offset, as Kafka reports it), the disk's total and
  usable bytes (v4+), never cordoned (v5). A replica that does not answer (restarting) is
  left out.

Every error is a per-topic (or per-resource) code with a message where the version has
one; a name given twice in one request is INVALID_REQUEST for each of its entries.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import shutil
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from raylog.actors.kafka.context import BrokerContext, topic_ids
from raylog.actors.kafka.coordinator_errors import code_of
from raylog.common.names import INTERNAL_TOPICS, validate_topic_name
from raylog.common.requests import PREFERRED_ELECTION
from raylog.config import LIST_PROPERTIES, ControllerConfig, TopicConfig, check_remote_storage
from raylog.coordination import broker_configs, group_configs
from raylog.coordination.consumer_group import ConsumerGroupConfig
from raylog.coordination.placement import MAX_PARTITIONS, assign_replicas
from raylog.errors import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidRequestError,
    RaylogError,
    TopicAlreadyExistsError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from raylog.kafka.codec import ApiKey, RequestHeader
from raylog.types import NewTopic

logger = logging.getLogger(__name__)

#: How long an admin call to the controller may take when the request gives no timeout.
DEFAULT_TIMEOUT_MS = 60_000
#: How often CreatePartitions asks for metadata again until the partitions it created show.
GROWTH_POLL_S = 0.05

# Kafka's ConfigResource types and ConfigEntry sources and types.
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_GROUP = 32
#: raylog's config sources (ConfigEntry.source) as Kafka's ConfigSource codes.
SOURCES = {"topic": 1, "dynamic_broker": 2, "dynamic_default_broker": 3, "static_broker": 4, "default": 5, "group": 8}
SOURCE_DEFAULT_CONFIG = SOURCES["default"]
TYPE_BOOLEAN, TYPE_STRING, TYPE_INT, TYPE_LONG, TYPE_DOUBLE, TYPE_LIST, TYPE_PASSWORD = 1, 2, 3, 5, 6, 7, 9
#: The controller's method describing each resource type, and the one altering it.
_DESCRIBE = {
    RESOURCE_TOPIC: "describe_configs",
    RESOURCE_BROKER: "describe_broker_configs",
    RESOURCE_GROUP: "describe_group_configs",
}
_ALTER = {
    RESOURCE_TOPIC: "alter_configs",
    RESOURCE_BROKER: "alter_broker_configs",
    RESOURCE_GROUP: "alter_group_configs",
}
_TYPES = "2: topic, 4: broker, 32: group"

_FIELDS = {f.name.replace("_", "."): f for f in dataclasses.fields(TopicConfig)}
#: A broker config's field: a topic default's topic property, or a static setting's.
_BROKER_FIELDS = {
    **{broker: _FIELDS[topic] for topic, broker in broker_configs.TOPIC_SYNONYMS.items()},
    **{f.name.replace("_", "."): f for f in dataclasses.fields(ControllerConfig)},
}
_DEFAULTS = TopicConfig().to_properties()


def _error(exc: BaseException) -> dict:
    """The ``error_code`` / ``error_message`` of a result reporting ``exc``."""
    return {"error_code": code_of(exc), "error_message": str(exc)}


def _duplicates(names: list) -> set:
    return {name for name, count in Counter(names).items() if count > 1}


async def _check_each(
    ctx: BrokerContext, topics: list[dict], check: Callable[[dict, dict], Any]
) -> tuple[dict, dict, dict | None]:
    """``(refused, checked, md)``: by topic name, ``check(topic, md)``'s error result or what
    it returned, against fresh metadata ``md`` (None, and every topic refused, when the
    controller does not answer); a name given twice is refused (INVALID_REQUEST) wherever
    it appears."""
    try:
        md = await ctx.metadata(refresh=True)
    except RaylogError as exc:
        return {t["name"]: _error(exc) for t in topics}, {}, None
    duplicated = _duplicates([t["name"] for t in topics])
    refused, checked = {}, {}
    for topic in topics:
        name = topic["name"]
        try:
            if name in duplicated:
                raise InvalidRequestError(f"topic {name!r} is named more than once in the request")
            checked[name] = check(topic, md)
        except RaylogError as exc:
            refused[name] = _error(exc)
    return refused, checked, md


def _timeout_s(body: dict) -> float:
    """How long the controller may take: the request's timeout, or the default for 0 or less."""
    timeout_ms = body.get("timeout_ms", DEFAULT_TIMEOUT_MS)
    return (timeout_ms if timeout_ms > 0 else DEFAULT_TIMEOUT_MS) / 1000


async def ask_each(ctx: BrokerContext, ref: Any, names: list, timeout_s: float) -> dict:
    """A per-name controller answer ``{name: (code, message, ...)}``; a failed call gives
    its error for every name."""
    try:
        return await ctx.call(ref, timeout_s)
    except RaylogError as exc:
        return {name: (code_of(exc), str(exc)) for name in names}


# --- CreateTopics -------------------------------------------------------------------------


@dataclasses.dataclass
class _Creation:
    """One topic of a CreateTopics request as raylog creates it."""

    new: NewTopic
    #: Partition -> its assigned brokers (manual assignments), or None.
    assignments: dict[int, list[int]] | None
    overrides: set


def _creation(topic: dict, md: dict, defaults: ControllerConfig) -> _Creation:
    """Check one requested topic against ``md`` (what the controller will check too); a count
    left to the broker (-1) is ``defaults``' num.partitions or default.replication.factor.

    Raises:
        InvalidTopicError, TopicAlreadyExistsError, InvalidPartitionsError,
        InvalidReplicationFactorError, InvalidReplicaAssignmentError, InvalidConfigError,
        InvalidRequestError.
    """
    name = validate_topic_name(topic["name"], existing=md["topics"])
    if name in md["topics"]:
        raise TopicAlreadyExistsError(f"topic {name!r} already exists")
    if name in INTERNAL_TOPICS:
        raise InvalidRequestError(f"{name!r} is an internal topic: raylog creates it")
    config = {c["name"]: c["value"] for c in topic.get("configs") or () if c["value"] is not None}
    overrides = {TopicConfig.property_name(key) for key in config}
    check_remote_storage(TopicConfig.from_properties(config).to_properties(), None, defaults.remote_log_storage_uri)
    num_partitions, replication_factor = topic["num_partitions"], topic["replication_factor"]
    live = sorted(md["live"])
    assignments = None
    if topic.get("assignments"):
        if num_partitions != -1 or replication_factor != -1:
            raise InvalidRequestError(
                f"topic {name!r}: give assignments or num_partitions/replication_factor, not both "
                f"(got {num_partitions} and {replication_factor} with assignments)"
            )
        assignments = {a["partition_index"]: list(a["broker_ids"]) for a in topic["assignments"]}
        if sorted(assignments) != list(range(len(topic["assignments"]))):
            raise InvalidReplicaAssignmentError(
                f"topic {name!r}: assignments must number partitions 0 to {len(topic['assignments']) - 1} once each"
            )
        _check_assignments(name, list(assignments.values()), md)
        num_partitions, replication_factor = len(assignments), len(assignments[0])
    else:
        num_partitions = defaults.num_partitions if num_partitions == -1 else num_partitions
        replication_factor = defaults.default_replication_factor if replication_factor == -1 else replication_factor
    assign_replicas(num_partitions, replication_factor, live)  # the counts against the live brokers
    new = NewTopic(name, num_partitions=num_partitions, replication_factor=replication_factor, config=config)
    return _Creation(new, assignments, overrides)


def _check_assignments(name: str, assignments: list[list[int]], md: dict) -> None:
    """Raises InvalidReplicaAssignmentError unless every replica list is as long as the
    first and holds distinct registered brokers."""
    brokers = set(md["brokers"])
    for replicas in assignments:
        if not replicas or len(replicas) != len(assignments[0]):
            raise InvalidReplicaAssignmentError(
                f"topic {name!r}: every partition needs the same number (at least 1) of replicas, got {assignments}"
            )
        if len(set(replicas)) != len(replicas) or not set(replicas) <= brokers:
            raise InvalidReplicaAssignmentError(
                f"topic {name!r}: replicas {replicas} must be distinct broker ids of {sorted(brokers)}"
            )


def _configs(properties: dict[str, str], overrides: set) -> list[dict]:
    """CreateTopics v5+'s configs of a topic."""
    return [
        {
            "name": key,
            "value": value,
            "read_only": False,
            "config_source": SOURCES["topic"] if key in overrides else SOURCE_DEFAULT_CONFIG,
            "is_sensitive": False,
        }
        for key, value in sorted(properties.items())
    ]


async def create_topics(ctx: BrokerContext, header: RequestHeader, body: dict) -> dict:
    topics = body["topics"]
    results, creations, md = await _check_each(ctx, topics, functools.partial(_creation, defaults=ctx.config))
    if creations and not body.get("validate_only", False):
        answers = await ask_each(
            ctx,
            ctx.ask("create_topics", [c.new for c in creations.values()]),
            list(creations),
            _timeout_s(body),
        )
        for name, (code, message, *_) in answers.items():
            if code:
                results[name] = {"error_code": code, "error_message": message}
                creations.pop(name)
        if creations:
            md = await ctx.metadata(refresh=True)
            await _reassign(ctx, md, {n: c.assignments for n, c in creations.items() if c.assignments}, results)
    answer = []
    for topic in topics:
        name = topic["name"]
        if name in results:
            answer.append({"name": name, **results[name]})
            continue
        created = creations[name]
        described = md["topics"].get(name)
        answer.append(
            {
                "name": name,
                "topic_id": uuid.UUID(hex=described.topic_id) if described is not None else None,
                "error_code": 0,
                "error_message": None,
                "num_partitions": created.new.num_partitions,
                "replication_factor": created.new.replication_factor,
                "configs": _configs(
                    # as created (under the cluster's dynamic defaults), or as it would be
                    described.config
                    if described is not None
                    else TopicConfig.from_properties(created.new.config).to_properties(),
                    created.overrides,
                ),
            }
        )
    return {"topics": answer}


async def _reassign(ctx: BrokerContext, md: dict, assignments: dict[str, dict], results: dict) -> None:
    """Move each partition of ``assignments`` ({topic: {partition: brokers}}) whose replicas
    differ from its assignment; a refusal becomes its topic's result."""
    targets = {}
    for name, by_partition in assignments.items():
        described = md["topics"].get(name)
        for partition, brokers in by_partition.items():
            known = described is not None and partition < len(described.partitions)
            if not known or tuple(brokers) != described.partitions[partition].replicas:
                targets[(name, partition)] = brokers
    if not targets:
        return
    answers = await ask_each(
        ctx,
        ctx.ask("alter_partition_reassignments", targets),
        list(targets),
        DEFAULT_TIMEOUT_MS / 1000,
    )
    for (name, partition), (code, message, *_) in answers.items():
        if code and name not in results:
            results[name] = {"error_code": code, "error_message": f"partition {partition}: {message}"}
    ctx.invalidate()


async def _metadata_showing(ctx: BrokerContext, counts: dict[str, int], timeout_s: float) -> dict:
    """Metadata in which each topic of ``counts`` has its new partition count: a refresh may
    serve the cached answer (the controller slower than the listener waits for it), which
    does not have the partitions just created; asked again until ``timeout_s``, then the
    last answer."""
    deadline = time.monotonic() + timeout_s
    while True:
        md = await ctx.metadata(refresh=True)
        grown = all(name in md["topics"] and len(md["topics"][name].partitions) >= n for name, n in counts.items())
        if grown or time.monotonic() >= deadline:
            return md
        await asyncio.sleep(GROWTH_POLL_S)


# --- DeleteTopics -------------------------------------------------------------------------


async def delete_topics(ctx: BrokerContext, header: RequestHeader, body: dict) -> dict:
    by_id = header.api_version >= 6
    requested = body["topics"] if by_id else [{"name": name, "topic_id": None} for name in body["topic_names"]]
    try:
        md = await ctx.metadata(refresh=True)
    except RaylogError as exc:
        return {"responses": [{"name": r["name"], "topic_id": r["topic_id"], **_error(exc)} for r in requested]}
    ids = topic_ids(md)
    entries = []  # (name or None, topic id or None, error or None)
    for r in requested:
        name, topic_id = r["name"], r.get("topic_id")
        if topic_id is not None and topic_id.int == 0:
            topic_id = None
        if name is None and topic_id is None:
            entries.append((None, None, InvalidRequestError("a topic to delete needs a name or a topic id")))
        elif name is None:
            found = ids.get(topic_id)
            error = None if found else UnknownTopicIdError(f"no topic has id {topic_id}")
            entries.append((found, topic_id, error))
        else:
            entries.append((name, topic_id, None))
    duplicated = _duplicates([name for name, _, error in entries if error is None])
    names = sorted({name for name, _, error in entries if error is None and name not in duplicated})
    answers = await ask_each(ctx, ctx.ask("delete_topics", names), names, _timeout_s(body)) if names else {}
    responses = []
    for name, topic_id, error in entries:
        if error is None and name in duplicated:
            error = InvalidRequestError(f"topic {name!r} is named more than once in the request")
        if error is not None:
            result = _error(error)
        else:
            code, message, *_ = answers[name]
            result = {"error_code": code, "error_message": message or None}
            if topic_id is None and name in md["topics"]:
                topic_id = uuid.UUID(hex=md["topics"][name].topic_id)
        responses.append({"name": name, "topic_id": topic_id, **result})
    ctx.invalidate()
    return {"responses": responses}


# --- CreatePartitions ---------------------------------------------------------------------


def _growth(topic: dict, md: dict) -> tuple[int, dict[int, list[int]] | None]:
    """The checked new count of one requested topic and its new partitions' assignments.

    Raises:
        UnknownTopicOrPartitionError, InvalidPartitionsError, InvalidReplicationFactorError,
        InvalidReplicaAssignmentError.
    """
    name, count = topic["name"], topic["count"]
    described = md["topics"].get(name)
    if described is None:
        raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
    if name in INTERNAL_TOPICS:
        raise InvalidPartitionsError(f"the partition count of internal topic {name!r} cannot change")
    current = len(described.partitions)
    if not current < count <= MAX_PARTITIONS:
        raise InvalidPartitionsError(
            f"topic {name!r} has {current} partitions: the count can only grow, to at most {MAX_PARTITIONS}, "
            f"got {count}"
        )
    replication_factor = len(described.partitions[0].replicas)
    assign_replicas(count - current, replication_factor, sorted(md["live"]), first_partition=current, start_index=0)
    if topic.get("assignments") is None:
        return count, None
    assignments = [list(a["broker_ids"]) for a in topic["assignments"]]
    if len(assignments) != count - current:
        raise InvalidReplicaAssignmentError(
            f"topic {name!r}: {count - current} new partitions need as many assignments, got {len(assignments)}"
        )
    _check_assignments(name, assignments, md)
    return count, {current + i: brokers for i, brokers in enumerate(assignments)}


async def create_partitions(ctx: BrokerContext, header: RequestHeader, body: dict) -> dict:
    topics = body["topics"]
    results, growths, md = await _check_each(ctx, topics, _growth)
    if growths and not body.get("validate_only", False):
        counts = {name: count for name, (count, _) in growths.items()}
        answers = await ask_each(
            ctx,
            ctx.ask("create_partitions", counts),
            list(counts),
            _timeout_s(body),
        )
        for name, (code, message, *_) in answers.items():
            if code:
                results[name] = {"error_code": code, "error_message": message}
        assigned = {name: a for name, (_, a) in growths.items() if a and name not in results}
        if assigned:
            grown = {name: counts[name] for name in assigned}
            await _reassign(ctx, await _metadata_showing(ctx, grown, _timeout_s(body)), assigned, results)
        ctx.invalidate()
    return {
        "results": [
            {"name": t["name"], **results.get(t["name"], {"error_code": 0, "error_message": None})} for t in topics
        ]
    }


# --- DescribeConfigs ----------------------------------------------------------------------


def _config_type(field: dataclasses.Field | None, is_list: bool) -> int:
    """Kafka's type of a config whose raylog setting is ``field`` (None: unknown, a string)."""
    default = field.default if field is not None else ""
    if isinstance(default, bool):
        return TYPE_BOOLEAN
    if isinstance(default, int):
        return TYPE_LONG
    if isinstance(default, float):
        return TYPE_DOUBLE
    return TYPE_LIST if is_list else TYPE_STRING


def _described_config(key: str, entry: Any, synonyms: bool, documentation: bool, broker: bool = False) -> dict:
    """One DescribeConfigs entry from the controller's ``ConfigEntry(value, source)`` of a
    topic's property or (``broker``) a broker's config."""
    field = (_BROKER_FIELDS if broker else _FIELDS).get(key)
    is_list = key in (broker_configs.LIST_CONFIGS if broker else LIST_PROPERTIES)
    sensitive = broker and broker_configs.is_sensitive(key)
    if sensitive:
        config_type = TYPE_PASSWORD
    elif field is None and not broker:
        config_type = 0  # (a name no topic has: Kafka's UNKNOWN)
    else:
        config_type = _config_type(field, is_list)
    described = {
        "name": key,
        "value": entry.value,
        "read_only": broker and key in broker_configs.READ_ONLY - broker_configs.PER_BROKER,
        "is_default": entry.source == "default",
        "config_source": SOURCES[entry.source],
        "is_sensitive": sensitive,
        "synonyms": [],
        "config_type": config_type,
        "documentation": field.metadata["doc"] if documentation and field is not None else None,
    }
    if synonyms:
        described["synonyms"] = _synonyms(key, entry, broker)
    return described


def _described_group_config(
    key: str, entry: Any, synonyms: bool, documentation: bool, broker: ConsumerGroupConfig
) -> dict:
    """One DescribeConfigs entry of a group's config, from the controller's ``ConfigEntry``;
    its synonyms run from the group's own value to the built-in default of its broker setting."""
    own = {key: entry.value} if entry.source == "group" else {}
    chain = group_configs.synonyms(key, own, broker) if synonyms else []
    field = _BROKER_FIELDS[group_configs.BROKER_SYNONYMS[key]]
    return {
        "name": key,
        "value": entry.value,
        "read_only": False,
        "is_default": entry.source == "default",
        "config_source": SOURCES[entry.source],
        "is_sensitive": False,
        "synonyms": [{"name": name, "value": value, "source": SOURCES[source]} for name, value, source in chain],
        "config_type": TYPE_INT,
        "documentation": field.metadata["doc"] if documentation else None,
    }


def _synonyms(key: str, entry: Any, broker: bool) -> list[dict]:
    """Where a value could come from, the one in force first (Kafka's ConfigSynonyms): the
    topic's own, the broker default set dynamically, the built-in default."""
    synonyms = (
        [] if entry.source == "default" else [{"name": key, "value": entry.value, "source": SOURCES[entry.source]}]
    )
    topic_property = broker_configs.TOPIC_DEFAULTS.get(key) if broker else key
    if topic_property in _DEFAULTS:
        name = broker_configs.TOPIC_SYNONYMS.get(topic_property, topic_property)
        if not broker and entry.source == "dynamic_default_broker":
            synonyms = [{"name": name, "value": entry.value, "source": SOURCES["dynamic_default_broker"]}]
        synonyms.append({"name": name, "value": _DEFAULTS[topic_property], "source": SOURCE_DEFAULT_CONFIG})
    return synonyms


async def describe_configs(ctx: BrokerContext, header: RequestHeader, body: dict) -> dict:
    resources = body["resources"]
    synonyms, documentation = body.get("include_synonyms", False), body.get("include_documentation", False)
    answers: dict[tuple, tuple] = {}
    for kind, method in _DESCRIBE.items():
        names = sorted({r["resource_name"] for r in resources if r["resource_type"] == kind})
        if names:
            answered = await ask_each(ctx, ctx.ask(method, names), names, None)
            answers.update({(kind, name): answer for name, answer in answered.items()})
    results = []
    for resource in resources:
        kind, name, keys = resource["resource_type"], resource["resource_name"], resource.get("configuration_keys")
        result = {"resource_type": kind, "resource_name": name, "error_code": 0, "error_message": None, "configs": []}
        if kind in _DESCRIBE:
            code, message, *rest = answers[(kind, name)]
            if code:
                result.update(error_code=code, error_message=message)
            else:
                entries = rest[0]
                wanted = sorted(entries) if keys is None else [k for k in keys if k in entries]
                result["configs"] = [_described(kind, k, entries[k], synonyms, documentation, ctx) for k in wanted]
        else:
            result.update(_error(InvalidRequestError(f"resource type {kind} is not described ({_TYPES})")))
        results.append(result)
    return {"results": results}


def _described(kind: int, key: str, entry: Any, synonyms: bool, documentation: bool, ctx: BrokerContext) -> dict:
    """One DescribeConfigs entry of a resource of type ``kind``."""
    if kind == RESOURCE_GROUP:
        return _described_group_config(key, entry, synonyms, documentation, ConsumerGroupConfig.of(ctx.config))
    return _described_config(key, entry, synonyms, documentation, broker=kind == RESOURCE_BROKER)


# --- AlterConfigs / IncrementalAlterConfigs ----------------------------------------------

#: IncrementalAlterConfigs' operations (Kafka's AlterConfigOp types, by id).
_SET, _DELETE, _APPEND, _SUBTRACT = 0, 1, 2, 3


async def alter_configs(ctx: BrokerContext, header: RequestHeader, body: dict) -> dict:
    return await _alter(ctx, body, incremental=False)


async def incremental_alter_configs(ctx: BrokerContext, header: RequestHeader, body: dict) -> dict:
    return await _alter(ctx, body, incremental=True)


async def _alter(ctx: BrokerContext, body: dict, incremental: bool) -> dict:
    """Each topic, broker or group resource altered (or, ``validate_only``, checked) by the
    controller as a whole, as raylog's ``Admin.alter_configs`` / ``incremental_alter_configs``
    do; a resource refused here (named twice, of another type, a config given twice, an
    operation that is not one) alters nothing."""
    resources = body["resources"]
    duplicated = _duplicates([(r["resource_type"], r["resource_name"]) for r in resources])
    changes: dict[int, dict[str, dict]] = {kind: {} for kind in _ALTER}
    refused: dict[tuple, dict] = {}
    for resource in resources:
        key = (resource["resource_type"], resource["resource_name"])
        try:
            if key in duplicated:
                raise InvalidRequestError(f"resource {key[1]!r} is named more than once in the request")
            if key[0] not in changes:
                raise InvalidRequestError(f"resource type {key[0]} is not altered ({_TYPES})")
            changes[key[0]][key[1]] = _changes(resource["configs"], incremental)
        except RaylogError as exc:
            refused[key] = _error(exc)
    answers: dict[tuple, tuple] = {}
    for kind, alter in _ALTER.items():
        if changes[kind]:
            ref = ctx.ask(alter, changes[kind], incremental, validate_only=body["validate_only"])
            answered = await ask_each(ctx, ref, list(changes[kind]), DEFAULT_TIMEOUT_MS / 1000)
            answers.update({(kind, name): answer for name, answer in answered.items()})
    responses = []
    for resource in resources:
        key = (resource["resource_type"], resource["resource_name"])
        response = {"resource_type": key[0], "resource_name": key[1], "error_code": 0, "error_message": None}
        code, message = answers[key][:2] if key not in refused else (0, None)
        response.update(refused.get(key) or ({"error_code": code, "error_message": message} if code else {}))
        responses.append(response)
    return {"responses": responses}


def _changes(configs: list[dict], incremental: bool) -> dict:
    """A resource's configs as the controller's changes: a value sets, None (AlterConfigs) or
    DELETE goes back to the default, APPEND / SUBTRACT change a list property.

    Raises:
        InvalidRequestError: a config named twice, an unknown operation, or a null value to
            set, append or subtract (as Kafka refuses them).
    """
    changes: dict[str, Any] = {}
    for config in configs:
        name, value = config["name"], config.get("value")
        if name in changes:
            raise InvalidRequestError(f"config {name!r} is given more than once")
        operation = config.get("config_operation", _SET) if incremental else _SET
        if operation not in (_SET, _DELETE, _APPEND, _SUBTRACT):
            raise InvalidRequestError(f"config {name!r}: operation {operation} is not set, delete, append or subtract")
        if incremental and operation != _DELETE and value is None:
            raise InvalidRequestError(f"config {name!r}: a null value cannot be set, appended or subtracted")
        if operation in (_SET, _DELETE):
            changes[name] = value if operation == _SET else None
        else:
            changes[name] = ("append" if operation == _APPEND else "subtract", value)
    return changes


# --- ElectLeaders -------------------------------------------------------------------------


async def elect_leaders(ctx: BrokerContext, header: RequestHeader, body: dict) -> dict:
    requested = body.get("topic_partitions")
    partitions = None if requested is None else [(t["topic"], p) for t in requested for p in t["partitions"]]
    election_type = body.get("election_type", PREFERRED_ELECTION) if header.api_version >= 1 else PREFERRED_ELECTION
    ask = ctx.ask("elect_leaders", election_type, partitions)
    try:
        results = await ctx.call(ask, _timeout_s(body))
    except RaylogError as exc:
        if header.api_version >= 1:
            return {"throttle_time_ms": 0, **_error(exc), "replica_election_results": []}
        results = {key: (code_of(exc), str(exc)) for key in partitions or ()}
    if any(code == 0 for code, _ in results.values()):
        ctx.invalidate()
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), (code, message) in results.items():
        result = {"partition_id": partition, "error_code": code, "error_message": message or None}
        by_topic.setdefault(topic, []).append(result)
    answered = [{"topic": topic, "partition_result": partitions} for topic, partitions in by_topic.items()]
    return {"throttle_time_ms": 0, "error_code": 0, "replica_election_results": answered}


# --- AlterPartitionReassignments / ListPartitionReassignments ------------------------------


async def alter_partition_reassignments(ctx: BrokerContext, header: RequestHeader, body: dict) -> dict:
    allow = body.get("allow_replication_factor_change", True) if header.api_version >= 1 else True
    targets = {(t["name"], p["partition_index"]): p["replicas"] for t in body["topics"] for p in t["partitions"]}
    keys = list(targets)
    answer = {"throttle_time_ms": 0, "allow_replication_factor_change": allow, "error_code": 0}
    duplicated = _duplicates([(t["name"], p["partition_index"]) for t in body["topics"] for p in t["partitions"]])
    if duplicated:
        refusal = InvalidRequestError(f"partitions named more than once: {sorted(duplicated)}")
        return {**answer, **_error(refusal), "responses": []}
    ask = ctx.ask("alter_partition_reassignments", targets, allow)
    results = await ask_each(ctx, ask, keys, _timeout_s(body))
    ctx.invalidate()
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), (code, message) in results.items():
        result = {"partition_index": partition, "error_code": code, "error_message": message or None}
        by_topic.setdefault(topic, []).append(result)
    return {**answer, "responses": [{"name": t, "partitions": parts} for t, parts in by_topic.items()]}


async def list_partition_reassignments(ctx: BrokerContext, header: RequestHeader, body: dict) -> dict:
    answer = {"throttle_time_ms": 0, "error_code": 0, "topics": []}
    try:
        listed = await ctx.call(ctx.ask("list_partition_reassignments"), _timeout_s(body))
    except RaylogError as exc:
        return {**answer, **_error(exc)}
    asked = body.get("topics")
    wanted = None if asked is None else {(t["name"], p) for t in asked for p in t["partition_indexes"]}
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), (replicas, adding, removing) in sorted(listed.items()):
        if wanted is None or (topic, partition) in wanted:
            by_topic.setdefault(topic, []).append(
                {
                    "partition_index": partition,
                    "replicas": list(replicas),
                    "adding_replicas": list(adding),
                    "removing_replicas": list(removing),
                }
            )
    return {**answer, "topics": [{"name": t, "partitions": parts} for t, parts in by_topic.items()]}


# --- DescribeLogDirs ----------------------------------------------------------------------


async def describe_log_dirs(ctx: BrokerContext, header: RequestHeader, body: dict) -> dict:
    try:
        replicas = await ctx.call(ctx.controller.broker_replicas.remote(ctx.broker_id))
        md = await ctx.metadata()
    except RaylogError as exc:
        return {"throttle_time_ms": 0, "error_code": code_of(exc), "results": [{"error_code": code_of(exc)}]}
    asked = body.get("topics")
    wanted = None if asked is None else {(t["topic"], p) for t in asked for p in t["partitions"]}
    handles = {key: h for key, h in sorted(replicas.items()) if wanted is None or key in wanted}
    states = await asyncio.gather(*(ctx.call(h.state.remote()) for h in handles.values()), return_exceptions=True)
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), state in zip(handles, states, strict=True):
        if isinstance(state, BaseException):  # a replica restarting: left out, as Kafka leaves out logs it lacks
            logger.debug("DescribeLogDirs: no state of %s-%d: %s", topic, partition, state)
            continue
        lag = max(0, state["high_watermark"] - state["log_end_offset"])
        by_topic.setdefault(topic, []).append(
            {"partition_index": partition, "partition_size": state["size_bytes"], "offset_lag": lag}
        )
    data_dir = md["brokers"][ctx.broker_id].data_dir
    try:
        usage = shutil.disk_usage(data_dir)
        total, usable = usage.total, usage.free
    except OSError:
        total = usable = -1
    result = {
        "error_code": 0,
        "log_dir": data_dir,
        "topics": [{"name": topic, "partitions": partitions} for topic, partitions in by_topic.items()],
        "total_bytes": total,
        "usable_bytes": usable,
    }
    return {"throttle_time_ms": 0, "error_code": 0, "results": [result]}


HANDLERS: dict[ApiKey, Callable[[BrokerContext, RequestHeader, dict], Awaitable[dict]]] = {
    ApiKey.CREATE_TOPICS: create_topics,
    ApiKey.DELETE_TOPICS: delete_topics,
    ApiKey.CREATE_PARTITIONS: create_partitions,
    ApiKey.DESCRIBE_CONFIGS: describe_configs,
    ApiKey.ALTER_CONFIGS: alter_configs,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: incremental_alter_configs,
    ApiKey.ELECT_LEADERS: elect_leaders,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: alter_partition_reassignments,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: list_partition_reassignments,
    ApiKey.DESCRIBE_LOG_DIRS: describe_log_dirs,
}
