"""Kafka's ACLs on the listener's requests: who may send what, checked before a handler runs.

With the ``authorizer`` setting at ``acl``, every request is authorized for the connection's
principal (from its TLS client certificate, see :mod:`raylog.principals`; else
``User:ANONYMOUS``) and host (the
client's address) against the cluster's ACLs (:class:`~raylog.coordination.acls.Authorizer`,
kept by the :class:`BrokerContext` from the controller's pushes and metadata answers). Each API has a rule in
:data:`RULES`, with the checks of Kafka's ``KafkaApis`` and its error codes:

- a request-level resource (a group, a transactional id, the cluster) not authorized answers
  the whole request with that resource's error (GROUP_, TRANSACTIONAL_ID_ or
  CLUSTER_AUTHORIZATION_FAILED in every place the response has an error code);
- the topics of a request are split: those not authorized are answered
  TOPIC_AUTHORIZATION_FAILED, the handler serves the rest, and the two answers are merged;
- listings (groups, transactions, every topic of a Metadata request) leave out what the
  principal may not describe (a Metadata request's hidden topics are not denials: neither
  logged nor counted, as Kafka's logIfDenied=false; a topic it names is).

Metadata and Fetch check their topics inside their handlers (:func:`allows`): Metadata
decides automatic topic creation by the CREATE permission, and a Fetch reads partitions of
its fetch session that the request does not name. An API without a rule cannot be served
(a test holds :data:`RULES` to every supported API). Every denial is logged once per
principal, host, operation and resource by the ``raylog.authorizer`` logger (Kafka's
``kafka.authorizer.logger``), at INFO, then at DEBUG, as allowed requests are; and counted
in the ``raylog_authorization_denials_total`` metric.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from raylog.actors.access import DENIED as access_errors
from raylog.actors.access import Access
from raylog.actors.kafka.context import CONNECTION, BrokerContext, topic_ids
from raylog.common.acl import CLUSTER_NAME, ACLOperation, ResourceType
from raylog.kafka import codec
from raylog.kafka.codec.error_bodies import BUILDERS
from raylog.principals import ANONYMOUS

#: The name of the cluster resource (Kafka's).
CLUSTER = CLUSTER_NAME

TOPIC = ResourceType.TOPIC
GROUP = ResourceType.GROUP
TXN = ResourceType.TRANSACTIONAL_ID
Op = ACLOperation

#: The error code of a resource type's denial.
DENIED = {resource_type: error.code for resource_type, error in access_errors.items()}

Handler = Callable[[BrokerContext, codec.RequestHeader, dict], Awaitable[Any]]

#: The operations each resource type has (Kafka's AclEntry.supportedOperations): what a
#: response's authorized operations (KIP-430) may list.
SUPPORTED_OPERATIONS = {
    TOPIC: (Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
    GROUP: (Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
    ResourceType.CLUSTER: (
        Op.CREATE,
        Op.CLUSTER_ACTION,
        Op.DESCRIBE_CONFIGS,
        Op.ALTER_CONFIGS,
        Op.IDEMPOTENT_WRITE,
        Op.ALTER,
        Op.DESCRIBE,
    ),
    TXN: (Op.DESCRIBE, Op.WRITE),
}
#: The ACL resource of a config resource type (Kafka's ConfigResource codes) other than a
#: broker's (the cluster).
_CONFIG_RESOURCES = {2: TOPIC, 32: GROUP}
#: A response's authorized operations when the request did not ask for them (Kafka's INT32 minimum).
NOT_REQUESTED = -(2**31)


def access() -> Access | None:
    """The current request's :class:`Access` (None without an authorizer: everything is allowed)."""
    return CONNECTION.get({}).get("access")


def allows(operation: ACLOperation, resource_type: ResourceType, name: str, log_denied: bool = True) -> bool:
    """Whether the current request may do ``operation`` on the resource (True without an
    authorizer); ``log_denied`` False: a denial is neither logged nor counted (see Access.allows)."""
    current = access()
    return current is None or current.allows(operation, resource_type, name, log_denied)


def authorized_operations(asked: bool, resource_type: ResourceType, name: str = CLUSTER) -> int:
    """KIP-430's authorized operations of a resource for the current request: a bit per
    operation (1 << its code) the principal may do of those the resource type has (all of them
    without an authorizer); :data:`NOT_REQUESTED` when the request did not ask."""
    if not asked:
        return NOT_REQUESTED
    return sum(1 << op for op in SUPPORTED_OPERATIONS[resource_type] if allows(op, resource_type, name))


async def authorized(ctx: BrokerContext, header: codec.RequestHeader, body: dict, handler: Handler, logged: set):
    """``handler``'s answer to the request as its rule lets it through (see the module docstring)."""
    authorizer = await ctx.authorizer()
    connection = CONNECTION.get({})
    if authorizer is None:
        connection.pop("access", None)
        return await handler(ctx, header, body)
    current = Access(authorizer, connection.get("principal", ANONYMOUS), connection.get("host", ""), logged)
    connection["access"] = current
    return await RULES[header.api_key](current, ctx, header, body, handler)


# --- rules ----------------------------------------------------------------------------------


async def _open(access: Access, ctx: BrokerContext, header, body: dict, handler: Handler):
    return await handler(ctx, header, body)


@dataclass(frozen=True)
class Check:
    """A request-level resource the request needs ``operation`` on; ``name`` picks its name
    from the body (None: the request has none, nothing to check)."""

    resource_type: ResourceType
    operation: ACLOperation
    name: Callable[[dict], str | None] = lambda body: CLUSTER


@dataclass(frozen=True)
class Topics:
    """The request's topic list (``key``, each entry's name under ``name``) needs
    ``operation`` on each topic; the response lists topics under ``answer``."""

    operation: ACLOperation
    key: str = "topics"
    answer: str = "topics"
    name: str = "name"
    #: Also allowed by this operation on the cluster (CreateTopics: CREATE on the cluster).
    cluster_fallback: bool = False


def rule(*checks: Check, topics: Topics | None = None):
    """A rule: every request-level check first (the first denied answers the whole request
    with its error), then the topic split."""

    async def run(access: Access, ctx: BrokerContext, header, body: dict, handler: Handler):
        for check in checks:
            name = check.name(body)
            if name is not None and not access.allows(check.operation, check.resource_type, name):
                return BUILDERS[header.api_key](body, DENIED[check.resource_type])
        if topics is None or body.get(topics.key) is None:
            return await handler(ctx, header, body)
        return await _split(access, ctx, header, body, handler, topics)

    return run


async def _split(access: Access, ctx: BrokerContext, header, body: dict, handler: Handler, topics: Topics):
    allowed, denied = [], []
    cluster_ok = topics.cluster_fallback and access.allows(topics.operation, ResourceType.CLUSTER, CLUSTER)
    ids: dict | None = None
    for entry in body[topics.key]:
        name = entry if isinstance(entry, str) else entry.get(topics.name)
        if name is None and not isinstance(entry, str) and entry.get("topic_id") is not None:
            ids = topic_ids(await ctx.metadata()) if ids is None else ids  # (DeleteTopics v6 by id)
            name = ids.get(entry["topic_id"])
            if name is None:  # no such topic: the handler answers UNKNOWN_TOPIC_ID
                allowed.append(entry)
                continue
        ok = cluster_ok or (name is not None and access.allows(topics.operation, TOPIC, name))
        (allowed if ok else denied).append(entry)
    if not denied:
        return await handler(ctx, header, body)
    refused = BUILDERS[header.api_key]({**body, topics.key: denied}, DENIED[TOPIC])
    if not allowed:
        return refused
    answer = await handler(ctx, header, {**body, topics.key: allowed})
    if answer is not None:
        answer[topics.answer] = list(answer.get(topics.answer) or []) + refused[topics.answer]
    return answer


def _unanswered_at_acks_0(checked: Callable) -> Callable:
    """A Produce rule whose refusals are not answered when the request's acks is 0 (nothing
    is: the client expects no response; the denials are logged and counted)."""

    async def run(access: Access, ctx: BrokerContext, header, body: dict, handler: Handler):
        answer = await checked(access, ctx, header, body, handler)
        return None if body.get("acks") == 0 else answer

    return run


def _field(key: str) -> Callable[[dict], str | None]:
    return lambda body: body.get(key)


def _listing(list_key: str, resource_type: ResourceType, name_key: str, cluster_wide: ACLOperation | None = None):
    """A rule for a listing: entries of the response's ``list_key`` the principal may not
    DESCRIBE are left out (all shown when ``cluster_wide`` is allowed on the cluster)."""

    async def run(access: Access, ctx: BrokerContext, header, body: dict, handler: Handler):
        answer = await handler(ctx, header, body)
        if cluster_wide is not None and access.allows(cluster_wide, ResourceType.CLUSTER, CLUSTER):
            return answer
        listed = answer.get(list_key) or []
        answer[list_key] = [e for e in listed if access.allows(Op.DESCRIBE, resource_type, e[name_key])]
        return answer

    return run


def _each(request_key: str, answer_key: str, resource_type: ResourceType, operation: ACLOperation, id_key: str):
    """A rule for requests naming several groups or transactional ids (``request_key``, a
    list of names): those not authorized are answered with their error in ``answer_key``'s
    entries (named by ``id_key``), the rest served."""

    async def run(access: Access, ctx: BrokerContext, header, body: dict, handler: Handler):
        names = body.get(request_key) or []
        denied = [n for n in names if not access.allows(operation, resource_type, n)]
        if not denied:
            return await handler(ctx, header, body)
        refused = BUILDERS[header.api_key]({**body, request_key: denied}, DENIED[resource_type])[answer_key]
        for entry in refused:
            entry.setdefault(id_key, None)
        allowed = [n for n in names if n not in denied]
        answer = await handler(ctx, header, {**body, request_key: allowed}) if allowed else {answer_key: []}
        answer[answer_key] = list(answer[answer_key]) + refused
        return answer

    return run


async def _find_coordinator(access: Access, ctx: BrokerContext, header, body: dict, handler: Handler):
    resource_type = TXN if body.get("key_type") == 1 else GROUP
    if header.api_version < 4:
        if not access.allows(Op.DESCRIBE, resource_type, body.get("key") or ""):
            return BUILDERS[header.api_key](body, DENIED[resource_type])
        return await handler(ctx, header, body)
    keys = body.get("coordinator_keys") or []
    denied = [k for k in keys if not access.allows(Op.DESCRIBE, resource_type, k)]
    allowed = [k for k in keys if k not in denied]
    answer = await handler(ctx, header, {**body, "coordinator_keys": allowed}) if allowed else {"coordinators": []}
    code = DENIED[resource_type]
    answer["coordinators"] = list(answer["coordinators"]) + [
        {"key": k, "node_id": -1, "host": "", "port": -1, "error_code": code} for k in denied
    ]
    return answer


async def _offset_fetch(access: Access, ctx: BrokerContext, header, body: dict, handler: Handler):
    """OffsetFetch: DESCRIBE on each group, DESCRIBE on each topic named; of a group's every
    committed offset (no topics named), the topics the principal may describe."""
    if header.api_version >= 8:
        groups = body.get("groups") or []
        denied = [g for g in groups if not access.allows(Op.DESCRIBE, GROUP, g["group_id"])]
        allowed = [g for g in groups if g not in denied]
        answer = await handler(ctx, header, {**body, "groups": allowed}) if allowed else {"groups": []}
        for group in answer["groups"]:
            group["topics"] = _described_topics(access, group.get("topics") or [], partitions="partitions")
        answer["groups"] = list(answer["groups"]) + [
            {"group_id": g["group_id"], "topics": [], "error_code": DENIED[GROUP]} for g in denied
        ]
        return answer
    if not access.allows(Op.DESCRIBE, GROUP, body.get("group_id") or ""):
        return BUILDERS[header.api_key](body, DENIED[GROUP])
    answer = await handler(ctx, header, body)
    answer["topics"] = _described_topics(access, answer.get("topics") or [], partitions="partitions")
    return answer


def _described_topics(access: Access, topics: Iterable[dict], partitions: str) -> list[dict]:
    """Topics of an OffsetFetch answer: those the principal may not describe answered
    TOPIC_AUTHORIZATION_FAILED per partition."""
    out = []
    for topic in topics:
        if not access.allows(Op.DESCRIBE, TOPIC, topic["name"]):
            code = DENIED[TOPIC]
            topic = {
                **topic,
                partitions: [{**p, "committed_offset": -1, "error_code": code} for p in topic[partitions]],
            }
        out.append(topic)
    return out


async def _init_producer_id(access: Access, ctx: BrokerContext, header, body: dict, handler: Handler):
    """A transactional producer needs WRITE on its transactional id; an idempotent one
    IDEMPOTENT_WRITE on the cluster, or WRITE on some topic (as Kafka since KIP-679)."""
    transactional_id = body.get("transactional_id")
    if transactional_id is not None:
        if not access.allows(Op.WRITE, TXN, transactional_id):
            return BUILDERS[header.api_key](body, DENIED[TXN])
    elif not (access.allows(Op.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER) or access.allows_any(Op.WRITE, TOPIC)):
        return BUILDERS[header.api_key](body, DENIED[ResourceType.CLUSTER])
    return await handler(ctx, header, body)


def _configs(operation: ACLOperation, answer_key: str):
    """DescribeConfigs / AlterConfigs / IncrementalAlterConfigs: ``operation`` on each
    topic resource (type 2) or group resource (type 32, Kafka 4's group configs), or on the
    cluster for a broker resource (type 4)."""

    def resource_type(resource: dict) -> ResourceType:
        return _CONFIG_RESOURCES.get(resource["resource_type"], ResourceType.CLUSTER)

    async def run(access: Access, ctx: BrokerContext, header, body: dict, handler: Handler):
        resources = body.get("resources") or []

        def ok(resource: dict) -> bool:
            kind = resource_type(resource)
            name = CLUSTER if kind == ResourceType.CLUSTER else resource["resource_name"]
            return access.allows(operation, kind, name)

        denied = [r for r in resources if not ok(r)]
        if not denied:
            return await handler(ctx, header, body)
        allowed = [r for r in resources if r not in denied]
        answer = await handler(ctx, header, {**body, "resources": allowed}) if allowed else {answer_key: []}
        for resource in denied:
            code = DENIED[resource_type(resource)]
            refused = BUILDERS[header.api_key]({**body, "resources": [resource]}, code)[answer_key]
            answer[answer_key] = list(answer[answer_key]) + refused
        return answer

    return run


async def _consumer_group_heartbeat(access: Access, ctx: BrokerContext, header, body: dict, handler: Handler):
    if not access.allows(Op.READ, GROUP, body.get("group_id") or ""):
        return BUILDERS[header.api_key](body, DENIED[GROUP])
    names = body.get("subscribed_topic_names") or []
    if not all(access.allows(Op.DESCRIBE, TOPIC, n) for n in names):
        return BUILDERS[header.api_key](body, DENIED[TOPIC])
    return await handler(ctx, header, body)


def _cluster(operation: ACLOperation) -> Callable:
    return rule(Check(ResourceType.CLUSTER, operation))


_GROUP_READ = Check(GROUP, Op.READ, _field("group_id"))
_TXN_WRITE = Check(TXN, Op.WRITE, _field("transactional_id"))
_TXN_WRITE_V3 = Check(TXN, Op.WRITE, _field("v3_and_below_transactional_id"))

#: Each supported API's rule (see the module docstring).
RULES: dict[codec.ApiKey, Callable] = {
    codec.ApiKey.API_VERSIONS: _open,
    codec.ApiKey.SASL_HANDSHAKE: _open,
    codec.ApiKey.SASL_AUTHENTICATE: _open,
    codec.ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: _cluster(Op.DESCRIBE),
    codec.ApiKey.ALTER_USER_SCRAM_CREDENTIALS: _cluster(Op.ALTER),
    codec.ApiKey.DESCRIBE_CLUSTER: _open,
    # Checked in their handlers (with allows()).
    codec.ApiKey.METADATA: _open,
    codec.ApiKey.FETCH: _open,
    codec.ApiKey.PRODUCE: _unanswered_at_acks_0(
        rule(_TXN_WRITE, topics=Topics(Op.WRITE, key="topic_data", answer="responses"))
    ),
    codec.ApiKey.LIST_OFFSETS: rule(topics=Topics(Op.DESCRIBE)),
    codec.ApiKey.OFFSET_FOR_LEADER_EPOCH: rule(topics=Topics(Op.DESCRIBE, name="topic")),
    codec.ApiKey.DELETE_RECORDS: rule(topics=Topics(Op.DELETE)),
    codec.ApiKey.DESCRIBE_PRODUCERS: rule(topics=Topics(Op.READ)),
    codec.ApiKey.OFFSET_COMMIT: rule(_GROUP_READ, topics=Topics(Op.READ)),
    codec.ApiKey.OFFSET_FETCH: _offset_fetch,
    codec.ApiKey.OFFSET_DELETE: rule(Check(GROUP, Op.DELETE, _field("group_id")), topics=Topics(Op.READ)),
    codec.ApiKey.FIND_COORDINATOR: _find_coordinator,
    codec.ApiKey.JOIN_GROUP: rule(_GROUP_READ),
    codec.ApiKey.SYNC_GROUP: rule(_GROUP_READ),
    codec.ApiKey.HEARTBEAT: rule(_GROUP_READ),
    codec.ApiKey.LEAVE_GROUP: rule(_GROUP_READ),
    codec.ApiKey.CONSUMER_GROUP_HEARTBEAT: _consumer_group_heartbeat,
    codec.ApiKey.DESCRIBE_GROUPS: _each("groups", "groups", GROUP, Op.DESCRIBE, "group_id"),
    codec.ApiKey.CONSUMER_GROUP_DESCRIBE: _each("group_ids", "groups", GROUP, Op.DESCRIBE, "group_id"),
    codec.ApiKey.DELETE_GROUPS: _each("groups_names", "results", GROUP, Op.DELETE, "group_id"),
    codec.ApiKey.LIST_GROUPS: _listing("groups", GROUP, "group_id", cluster_wide=Op.DESCRIBE),
    codec.ApiKey.INIT_PRODUCER_ID: _init_producer_id,
    codec.ApiKey.ADD_PARTITIONS_TO_TXN: rule(
        _TXN_WRITE_V3, topics=Topics(Op.WRITE, key="v3_and_below_topics", answer="results_by_topic_v3_and_below")
    ),
    codec.ApiKey.ADD_OFFSETS_TO_TXN: rule(_TXN_WRITE, _GROUP_READ),
    codec.ApiKey.END_TXN: rule(_TXN_WRITE),
    codec.ApiKey.TXN_OFFSET_COMMIT: rule(_TXN_WRITE, _GROUP_READ, topics=Topics(Op.READ)),
    codec.ApiKey.DESCRIBE_TRANSACTIONS: _each(
        "transactional_ids", "transaction_states", TXN, Op.DESCRIBE, "transactional_id"
    ),
    codec.ApiKey.LIST_TRANSACTIONS: _listing("transaction_states", TXN, "transactional_id"),
    codec.ApiKey.CREATE_TOPICS: rule(topics=Topics(Op.CREATE, cluster_fallback=True)),
    codec.ApiKey.DELETE_TOPICS: rule(topics=Topics(Op.DELETE, answer="responses")),
    codec.ApiKey.CREATE_PARTITIONS: rule(topics=Topics(Op.ALTER, answer="results")),
    codec.ApiKey.DESCRIBE_CONFIGS: _configs(Op.DESCRIBE_CONFIGS, "results"),
    codec.ApiKey.ALTER_CONFIGS: _configs(Op.ALTER_CONFIGS, "responses"),
    codec.ApiKey.INCREMENTAL_ALTER_CONFIGS: _configs(Op.ALTER_CONFIGS, "responses"),
    codec.ApiKey.DESCRIBE_LOG_DIRS: _cluster(Op.DESCRIBE),
    codec.ApiKey.ELECT_LEADERS: _cluster(Op.ALTER),
    codec.ApiKey.ALTER_PARTITION_REASSIGNMENTS: _cluster(Op.ALTER),
    codec.ApiKey.LIST_PARTITION_REASSIGNMENTS: _cluster(Op.DESCRIBE),
    codec.ApiKey.DESCRIBE_CLIENT_QUOTAS: _cluster(Op.DESCRIBE_CONFIGS),
    codec.ApiKey.ALTER_CLIENT_QUOTAS: _cluster(Op.ALTER_CONFIGS),
    codec.ApiKey.DESCRIBE_ACLS: _cluster(Op.DESCRIBE),
    codec.ApiKey.CREATE_ACLS: _cluster(Op.ALTER),
    codec.ApiKey.DELETE_ACLS: _cluster(Op.ALTER),
}
