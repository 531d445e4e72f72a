"""Consumer-group APIs over Kafka's protocol: FindCoordinator, JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, DescribeGroups, ListGroups and DeleteGroups, answered by
raylog's group coordinator actors (:mod:`raylog.actors.group_coordinator`), and Kafka 4's
consumer protocol (KIP-848): ConsumerGroupHeartbeat and ConsumerGroupDescribe
(:mod:`raylog.coordination.consumer_group`; topics go by id on the wire, by name to the
coordinator, which is given every topic's partition count with each heartbeat).

Membership is Kafka's classic protocol (:mod:`raylog.coordination.group`): the members'
protocols go to the coordinator with their metadata, and their vote picks the group's. A
consumer protocol (type ``consumer``) whose assignor raylog runs is assigned by raylog's
coordinator, so that raylog's own consumers and Kafka's share a group: its metadata is
decoded (:mod:`raylog.kafka.consumer_protocol`) into the topics, their partition counts
from the metadata and the partitions owned with their generation; the JoinGroup answer
names a leader that is no member (:data:`LEADER`), so every member acts as a follower and
sends SyncGroup without assignments; the SyncGroup answer is raylog's assignment for the
member, encoded at the subscription version the member used. Kafka's assignor names map to
raylog's: ``range``, ``roundrobin`` and ``cooperative-sticky`` to themselves, ``sticky``
(eager) to ``cooperative-sticky`` (balanced and sticky on the server; an eager member gives
its partitions up before it joins, so it claims none). Any other protocol (a custom
assignor, Kafka Streams' ``stream``, another protocol type such as Kafka Connect's
``connect``) is run as Kafka runs it: the leader member gets every member's metadata in its
JoinGroup answer, and its SyncGroup's assignments are what every member's SyncGroup answers
(AssignGroup on the coordinator, which waits in another pool than the syncs it releases).
The answers name the protocol by the Kafka name the member proposed.

What a member joined with (the subscription version, the assignor names it proposed, the
generation it was told) is kept per client connection (:data:`~raylog.actors.kafka.context.CONNECTION`):
a consumer sends JoinGroup and SyncGroup to its coordinator on one connection. A SyncGroup
on another connection gets its assignment at version 0 (every version has the same fields).

Offsets. OffsetCommit goes to raylog's ``commit_offsets`` (generation -1 and no member id: a
commit from outside the group, allowed while it has no members); the committed leader epoch
(v6+) is kept with the offset (KIP-320) and OffsetFetch answers it (v5+), -1 where none was
committed, and offset -1 for a partition with no committed offset.
UNSTABLE_OFFSET_COMMIT (offsets of a transaction not decided yet) is answered only when the
request says ``require_stable``; otherwise the last committed offsets are.

Errors travel in the responses, never as exceptions: the coordinator's own codes as they are,
those of its ``__consumer_offsets`` append as Kafka converts them
(:mod:`raylog.actors.kafka.coordinator_errors`), an unreachable coordinator actor as
NOT_COORDINATOR (the client looks it up again), a coordinator that does not answer in time
as COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from raylog.actors.kafka.authorization import authorized_operations
from raylog.actors.kafka.context import (
    CONNECTION,
    CONTROL_CALL_TIMEOUT_S,
    BrokerContext,
    broker_addresses,
    partition_counts,
    subscribable,
    topic_ids,
    topic_names,
)
from raylog.actors.kafka.coordinator_errors import code_of, coordinator_code
from raylog.common.acl import ResourceType
from raylog.common.assignors import COOPERATIVE_STICKY, RANGE, ROUND_ROBIN
from raylog.common.group_protocol import JOIN_EPOCH, Heartbeat
from raylog.common.names import OFFSETS_TOPIC
from raylog.coordination.group import MAX_OFFSET_METADATA_BYTES
from raylog.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    GroupIdNotFoundError,
    InconsistentGroupProtocolError,
    InvalidRequestError,
    NetworkExceptionError,
    NotCoordinatorError,
    OffsetMetadataTooLargeError,
    RaylogError,
    RequestTimedOutError,
    UnknownMemberIdError,
    UnknownTopicOrPartitionError,
    UnstableOffsetCommitError,
)
from raylog.kafka import codec
from raylog.kafka.consumer_protocol import (
    Assignment,
    ConsumerProtocolError,
    Subscription,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from raylog.protocol import JoinGroupRequest
from raylog.types import OffsetAndMetadata, TopicPartition

logger = logging.getLogger(__name__)

#: The only group protocol type raylog's coordinator serves (Kafka consumers').
CONSUMER = "consumer"
#: Kafka's assignor names -> raylog's (see the module docstring).
KAFKA_ASSIGNORS = {
    "range": RANGE,
    "roundrobin": ROUND_ROBIN,
    "cooperative-sticky": COOPERATIVE_STICKY,
    "sticky": COOPERATIVE_STICKY,
}
#: raylog's assignor names -> the Kafka name that DescribeGroups and ListGroups show.
RAYLOG_ASSIGNORS = {RANGE: "range", ROUND_ROBIN: "roundrobin", COOPERATIVE_STICKY: "cooperative-sticky"}
#: The leader every JoinGroup answer names: no member's id (raylog member ids end in 12 hex
#: digits), so every member acts as a follower and takes its assignment from SyncGroup.
LEADER = "raylog-coordinator"
#: FindCoordinator's key types.
GROUP_KEY, TRANSACTION_KEY = 0, 1
#: What a JoinGroup may wait beyond its rebalance timeout (the join completes at that deadline).
JOIN_MARGIN_S = CONTROL_CALL_TIMEOUT_S
#: Errors of a coordinator as a whole (rather than of a member or partition).
_COORDINATOR_ERRORS = frozenset(
    {CoordinatorNotAvailableError.code, NotCoordinatorError.code, CoordinatorLoadInProgressError.code}
)

Handler = Callable[[BrokerContext, codec.RequestHeader, dict], Awaitable[dict]]


@dataclass
class _Joined:
    """What a member joined with on this connection."""

    version: int  # its subscription's version: its assignments are encoded at it
    protocol: str  # the Kafka name of its group's protocol, as it proposed it
    generation: int  # the generation its last JoinGroup answer told it
    protocol_type: str
    leader_assigns: bool  # its group's leader member assigns (else raylog's coordinator)
    rebalance_ms: int  # its rebalance timeout: what its sync may wait for the leader


def _joined() -> dict[tuple[str, str], _Joined]:
    """This connection's members: ``(group id, member id)`` -> :class:`_Joined`."""
    return CONNECTION.get().setdefault("groups", {})


async def _call(
    ctx: BrokerContext, group_id: str, method: str, *args: Any, timeout_s: float = CONTROL_CALL_TIMEOUT_S
) -> Any:
    """The answer of ``group_id``'s coordinator to ``method(*args)`` (a raylog response).

    Raises:
        CoordinatorNotAvailableError: the group's partition has no leader now, or it did not
            answer in time.
        NotCoordinatorError: its actor is gone (died, moved).
        ApiError: the controller's error finding it.
    """
    _, handle = await ctx.group_coordinator(group_id)
    if handle is None:
        raise CoordinatorNotAvailableError(f"no coordinator for group {group_id!r} right now")
    try:
        return await ctx.call(getattr(handle, method).remote(*args, session=ctx.broker_token()), timeout_s)
    except NetworkExceptionError as exc:
        ctx.invalidate()
        raise NotCoordinatorError(f"the coordinator of group {group_id!r} is unreachable: {exc}") from exc
    except RequestTimedOutError as exc:
        raise CoordinatorNotAvailableError(f"the coordinator of group {group_id!r} did not answer: {exc}") from exc


async def _ask(ctx: BrokerContext, group_id: str, method: str, *args: Any, timeout_s: float = CONTROL_CALL_TIMEOUT_S):
    """``(value, error code)`` of a coordinator call: a GroupResponse's value, or the response
    itself for the others (SyncGroupResponse); the value is None with an error, whose code
    is the one a Kafka client gets (:func:`coordinator_code`)."""
    try:
        response = await _call(ctx, group_id, method, *args, timeout_s=timeout_s)
    except RaylogError as exc:
        return None, coordinator_code(exc)
    return getattr(response, "value", response), coordinator_code(response.error_code)


# --- FindCoordinator --------------------------------------------------------------------


async def find_coordinator(ctx: BrokerContext, header: codec.RequestHeader, body: dict) -> dict:
    key_type = body.get("key_type", GROUP_KEY)
    if header.api_version >= 4:
        keys = list(body.get("coordinator_keys") or [])
        found = [await _find(ctx, key_type, key) for key in keys]
        return {"throttle_time_ms": 0, "coordinators": [{"key": key, **f} for key, f in zip(keys, found, strict=True)]}
    return {"throttle_time_ms": 0, **await _find(ctx, key_type, body.get("key", ""))}


async def _find(ctx: BrokerContext, key_type: int, key: str) -> dict:
    """node_id / host / port / error_code / error_message of one key's coordinator."""
    try:
        if key_type not in (GROUP_KEY, TRANSACTION_KEY):
            raise InvalidRequestError(f"unknown coordinator key type {key_type} (0: group, 1: transaction)")
        if not key:
            raise InvalidRequestError("an empty coordinator key")
        if key_type == GROUP_KEY:
            broker, handle = await ctx.group_coordinator(key)
        else:
            broker, handle = await ctx.transaction_coordinator(key)
        if handle is None or broker < 0:
            raise CoordinatorNotAvailableError(f"no coordinator for {key!r} right now")
        address = broker_addresses(await ctx.metadata()).get(broker)
        if address is None:
            address = broker_addresses(await ctx.metadata(refresh=True)).get(broker)
        if address is None:
            raise CoordinatorNotAvailableError(f"broker {broker}, the coordinator of {key!r}, has no listener running")
    except RaylogError as exc:
        return {"node_id": -1, "host": "", "port": -1, "error_code": code_of(exc), "error_message": str(exc)}
    host, port = address
    return {"node_id": broker, "host": host, "port": port, "error_code": 0, "error_message": None}


# --- JoinGroup / SyncGroup / Heartbeat / LeaveGroup -------------------------------------


def _join_error(code: int, member_id: str) -> dict:
    return {"error_code": code, "generation_id": -1, "protocol_name": "", "leader": "", "member_id": member_id}


def _consumer_protocols(
    protocols: Iterable[dict], problems: list[str]
) -> tuple[Subscription | None, list[tuple[str, str, bytes]]]:
    """A consumer's subscription (from the first protocol whose metadata decodes as one) and
    its protocols, most preferred first, as ``(name for the coordinator, Kafka's name,
    metadata)``: an assignor raylog runs under raylog's name (once, however many of Kafka's
    names map to it), any other under its own. A protocol of an assignor raylog runs whose
    metadata does not decode is dropped (raylog could not assign it), and why is added to
    ``problems``."""
    subscription: Subscription | None = None
    found: dict[str, tuple[str, str, bytes]] = {}
    for protocol in protocols:
        name, metadata = protocol["name"], protocol["metadata"] or b""
        try:
            decoded = decode_subscription(metadata)
        except ConsumerProtocolError as exc:
            if name in KAFKA_ASSIGNORS:
                problems.append(f"{name!r}: {exc}")
                continue
            decoded = None
        subscription = subscription or decoded
        found.setdefault(KAFKA_ASSIGNORS.get(name, name), (KAFKA_ASSIGNORS.get(name, name), name, metadata))
    return subscription, list(found.values())


async def join_group(ctx: BrokerContext, header: codec.RequestHeader, body: dict) -> dict:
    group_id, member_id = body["group_id"], body["member_id"]
    protocol_type = body.get("protocol_type") or ""
    raw = list(body.get("protocols") or [])
    subscription: Subscription | None = None
    problems: list[str] = []
    if protocol_type == CONSUMER:
        subscription, protocols = _consumer_protocols(raw, problems)
    else:
        protocols = [(p["name"], p["name"], p["metadata"] or b"") for p in raw]
    if not protocol_type or not protocols:
        logger.warning(
            "group %r: client %r joins with protocol type %r and no usable protocol (%s%s):"
            " INCONSISTENT_GROUP_PROTOCOL",
            group_id,
            header.client_id,
            protocol_type,
            [p["name"] for p in raw],
            "".join(f"; {problem}" for problem in problems),
        )
        return _join_error(InconsistentGroupProtocolError.code, member_id)
    topics = sorted(set(subscription.topics)) if subscription is not None else []
    md = await ctx.metadata()
    if any(t not in md["topics"] for t in topics):
        md = await ctx.metadata(refresh=True)
    counts = {t: len(md["topics"][t].partitions) for t in topics if t in md["topics"]}
    # An eager member gave its partitions up before joining: it claims none (only members
    # running the cooperative protocol keep theirs through a rebalance).
    cooperative = any(kafka_name == "cooperative-sticky" for _, kafka_name, _ in protocols)
    known = _joined().get((group_id, member_id))
    generation = subscription.generation_id if subscription is not None else -1
    if subscription is not None and subscription.version < 2 and known is not None:
        generation = known.generation  # its subscription does not say: the one it was told
    session_ms = body["session_timeout_ms"]
    rebalance_ms = body.get("rebalance_timeout_ms", -1)
    if rebalance_ms is None or rebalance_ms < 0:
        rebalance_ms = session_ms  # JoinGroup v0: Kafka's rebalance timeout is the session's
    request = JoinGroupRequest(
        group_id=group_id,
        member_id=member_id,
        topics=tuple(topics),
        partition_counts=counts,
        strategies=tuple(name for name, _, _ in protocols),
        owned=subscription.owned_partitions if cooperative and subscription is not None else (),
        owned_generation=generation if cooperative else -1,
        instance_id=body.get("group_instance_id"),
        client_id=header.client_id or "",
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=rebalance_ms,
        require_known_member_id=header.api_version >= 4,  # KIP-394, as Kafka's JoinGroup v4+
        protocol_type=protocol_type,
        metadata=tuple(metadata for _, _, metadata in protocols),
    )
    try:
        response = await _call(ctx, group_id, "join_group", request, timeout_s=rebalance_ms / 1000 + JOIN_MARGIN_S)
    except RaylogError as exc:
        return _join_error(coordinator_code(exc), member_id)
    if response.error_code:
        if response.error_code == InconsistentGroupProtocolError.code:
            logger.warning("group %r: client %r refused: %s", group_id, header.client_id, response.error_message)
        return _join_error(coordinator_code(response.error_code), response.member_id or member_id)
    kafka_name = next((kafka for name, kafka, _ in protocols if name == response.protocol), protocols[0][1])
    joined = _joined()
    for key in [k for k in joined if k[0] == group_id]:
        del joined[key]  # a consumer is one member of a group: its earlier ids are over
    joined[(group_id, response.member_id)] = _Joined(
        subscription.version if subscription is not None else 0,
        kafka_name,
        response.generation,
        protocol_type,
        response.leader_assigns,
        rebalance_ms,
    )
    answer = {
        "throttle_time_ms": 0,
        "error_code": 0,
        "generation_id": response.generation,
        "protocol_type": protocol_type,
        "protocol_name": kafka_name,
        "member_id": response.member_id,
    }
    if not response.leader_assigns:
        return {**answer, "leader": LEADER, "members": []}
    # A static leader back without a rebalance must not assign again (KIP-814): before
    # JoinGroup v9 it is told no members, and its sync gets the assignment it made before.
    members = () if response.skip_assignment else response.members
    return {
        **answer,
        "leader": response.leader_id,
        "members": [
            {"member_id": m.member_id, "group_instance_id": m.instance_id, "metadata": m.metadata} for m in members
        ],
    }


async def sync_group(ctx: BrokerContext, header: codec.RequestHeader, body: dict) -> dict:
    group_id, member_id, generation = body["group_id"], body["member_id"], body["generation_id"]
    known = _joined().get((group_id, member_id))
    protocol_name = body.get("protocol_name") or (known.protocol if known else None)
    protocol_type = known.protocol_type if known is not None else body.get("protocol_type") or CONSUMER
    answer = {"throttle_time_ms": 0, "protocol_type": protocol_type, "protocol_name": protocol_name}
    if body.get("protocol_type") not in (None, protocol_type):
        logger.warning("group %r: SyncGroup of protocol type %r refused", group_id, body["protocol_type"])
        return {**answer, "error_code": InconsistentGroupProtocolError.code, "assignment": b""}
    args = (group_id, member_id, generation, body.get("group_instance_id"))
    # A sync may wait for the leader's assignment: up to the group's rebalance timeout.
    timeout_s = (known.rebalance_ms / 1000 if known is not None else 0) + JOIN_MARGIN_S
    assignments = body.get("assignments")
    if assignments:  # the leader member's, with every member's assignment
        assigned = {a["member_id"]: a["assignment"] or b"" for a in assignments}
        value, code = await _ask(ctx, group_id, "assign_group", *args, assigned, timeout_s=timeout_s)
    else:
        value, code = await _ask(ctx, group_id, "sync_group", *args, timeout_s=timeout_s)
    if code:
        return {**answer, "error_code": code, "assignment": b""}
    if value.assigned is not None:
        return {**answer, "error_code": 0, "assignment": value.assigned}
    version = known.version if known is not None else 0
    assignment = encode_assignment(Assignment(version, tuple(TopicPartition(*tp) for tp in value.assignment)))
    return {**answer, "error_code": 0, "assignment": assignment}


async def heartbeat(ctx: BrokerContext, header: codec.RequestHeader, body: dict) -> dict:
    group_id = body["group_id"]
    # The cluster's topics go with it: where raylog assigns, it rebalances the group when they
    # change, as Kafka's leader member does (a Kafka follower member never rejoins for it).
    topics = partition_counts(await ctx.metadata())
    args = (group_id, body["member_id"], body["generation_id"], body.get("group_instance_id"), 0, topics)
    _, code = await _ask(ctx, group_id, "heartbeat", *args)
    return {"throttle_time_ms": 0, "error_code": code}


async def leave_group(ctx: BrokerContext, header: codec.RequestHeader, body: dict) -> dict:
    group_id = body["group_id"]
    if header.api_version < 3:
        code = await _leave(ctx, group_id, body["member_id"], None)
        return {"throttle_time_ms": 0, "error_code": code}
    members = []
    for member in body.get("members") or []:
        member_id, instance_id = member["member_id"], member.get("group_instance_id")
        code = await _leave(ctx, group_id, member_id, instance_id)
        if code in _COORDINATOR_ERRORS:  # the group's, not the member's: the client retries it whole
            return {"throttle_time_ms": 0, "error_code": code, "members": []}
        members.append({"member_id": member_id, "group_instance_id": instance_id, "error_code": code})
    return {"throttle_time_ms": 0, "error_code": 0, "members": members}


async def _leave(ctx: BrokerContext, group_id: str, member_id: str, instance_id: str | None) -> int:
    if not member_id and instance_id is not None:
        # A static member removed by its instance id alone (Kafka's admin removeMembers).
        described, code = await _ask(ctx, group_id, "describe_group", group_id)
        if code:
            return UnknownMemberIdError.code if code == GroupIdNotFoundError.code else code
        member_id = next((m["member_id"] for m in described["members"] if m["instance_id"] == instance_id), "")
        if not member_id:
            return UnknownMemberIdError.code
    _, code = await _ask(ctx, group_id, "leave_group", group_id, member_id, instance_id)
    _joined().pop((group_id, member_id), None)
    return code


# --- OffsetCommit / OffsetFetch ---------------------------------------------------------


async def offset_commit(ctx: BrokerContext, header: codec.RequestHeader, body: dict) -> dict:
    group_id = body["group_id"]
    topics = body.get("topics") or []
    md = await ctx.metadata()
    if any(t["name"] not in md["topics"] for t in topics):
        md = await ctx.metadata(refresh=True)
    codes: dict[TopicPartition, int] = {}
    offsets: dict[TopicPartition, OffsetAndMetadata] = {}
    for topic in topics:
        described = md["topics"].get(topic["name"])
        for p in topic.get("partitions") or []:
            tp = TopicPartition(topic["name"], p["partition_index"])
            metadata = p.get("committed_metadata") or ""
            if described is None or not 0 <= tp.partition < len(described.partitions):
                codes[tp] = UnknownTopicOrPartitionError.code
            elif p["committed_offset"] < 0:
                codes[tp] = InvalidRequestError.code
            elif len(metadata.encode("utf-8")) > MAX_OFFSET_METADATA_BYTES:
                codes[tp] = OffsetMetadataTooLargeError.code
            else:
                offsets[tp] = OffsetAndMetadata(p["committed_offset"], metadata, p.get("committed_leader_epoch", -1))
    if offsets:
        args = (
            group_id,
            body.get("member_id", ""),
            body.get("generation_id_or_member_epoch", -1),
            body.get("group_instance_id"),
            offsets,
        )
        _, code = await _ask(ctx, group_id, "commit_offsets", *args)
        codes.update(dict.fromkeys(offsets, code))
    return {
        "throttle_time_ms": 0,
        "topics": [
            {
                "name": topic["name"],
                "partitions": [
                    {
                        "partition_index": p["partition_index"],
                        "error_code": codes[(topic["name"], p["partition_index"])],
                    }
                    for p in topic.get("partitions") or []
                ],
            }
            for topic in topics
        ],
    }


async def offset_fetch(ctx: BrokerContext, header: codec.RequestHeader, body: dict) -> dict:
    require_stable = bool(body.get("require_stable", False))
    if header.api_version >= 8:
        groups = [await _fetch_group(ctx, g["group_id"], g.get("topics"), require_stable) for g in body["groups"]]
        return {"throttle_time_ms": 0, "groups": groups}
    topics = body.get("topics")
    if topics is None and header.api_version < 2:
        topics = []  # v1 has no "all topics"
    answer = await _fetch_group(ctx, body["group_id"], topics, require_stable)
    if header.api_version < 2 and answer["error_code"]:
        # v1 has no group error: it goes to every partition asked for.
        for topic in answer["topics"]:
            for p in topic["partitions"]:
                p["error_code"] = answer["error_code"]
    elif answer["error_code"]:
        answer["topics"] = []
    return {"throttle_time_ms": 0, "topics": answer["topics"], "error_code": answer["error_code"]}


async def _fetch_group(ctx: BrokerContext, group_id: str, topics: list[dict] | None, require_stable: bool) -> dict:
    """One group's OffsetFetch answer (v8's shape): ``group_id``, ``topics``, ``error_code``."""
    wanted = None if topics is None else [TopicPartition(t["name"], p) for t in topics for p in t["partition_indexes"]]
    committed, code = await _ask(ctx, group_id, "fetch_offsets", group_id, wanted, require_stable)
    partition_code = 0
    if code == UnstableOffsetCommitError.code:
        # A partition's error in Kafka (clients retry it), never the group's.
        committed, code, partition_code = {}, 0, UnstableOffsetCommitError.code
    committed = {TopicPartition(*tp): OffsetAndMetadata(*o) for tp, o in (committed or {}).items()}
    by_topic: dict[str, list[dict]] = {}
    for tp in committed if wanted is None else wanted:
        found = committed.get(tp)
        by_topic.setdefault(tp.topic, []).append(
            {
                "partition_index": tp.partition,
                "committed_offset": -1 if found is None else found.offset,
                "committed_leader_epoch": -1 if found is None else found.leader_epoch,
                "metadata": "" if found is None else found.metadata,
                "error_code": partition_code,
            }
        )
    return {
        "group_id": group_id,
        "topics": [{"name": name, "partitions": partitions} for name, partitions in by_topic.items()],
        "error_code": code,
    }


# --- DescribeGroups / ListGroups --------------------------------------------------------


async def describe_groups(ctx: BrokerContext, header: codec.RequestHeader, body: dict) -> dict:
    asked = body.get("include_authorized_operations", False)
    groups = []
    for group_id in body.get("groups") or []:
        described, code = await _ask(ctx, group_id, "describe_group", group_id)
        if code == GroupIdNotFoundError.code:
            described, code = None, 0  # Kafka describes a group it does not know as Dead
        operations = authorized_operations(asked, ResourceType.GROUP, group_id)
        groups.append({**_described(group_id, described, code), "authorized_operations": operations})
    return {"throttle_time_ms": 0, "groups": groups}


def _described(group_id: str, described: dict | None, code: int) -> dict:
    if described is None:
        return {
            "error_code": code,
            "group_id": group_id,
            "group_state": "Dead",
            "protocol_type": "",
            "protocol_data": "",
            "members": [],
        }
    by_leader = described["leader_assigns"]  # the members' own bytes, else raylog's assignment
    return {
        "error_code": 0,
        "group_id": group_id,
        "group_state": described["state"],
        "protocol_type": described["protocol_type"],
        "protocol_data": RAYLOG_ASSIGNORS.get(described["protocol"], described["protocol"]),
        "members": [
            {
                "member_id": m["member_id"],
                "group_instance_id": m["instance_id"],
                "client_id": m["client_id"],
                "client_host": "",
                "member_metadata": m["metadata"]
                if by_leader
                else encode_subscription(Subscription(0, tuple(m["topics"]))),
                "member_assignment": m["assigned"]
                if by_leader
                else encode_assignment(Assignment(0, tuple(TopicPartition(*tp) for tp in m["assignment"]))),
            }
            for m in described["members"]
        ],
    }


async def list_groups(ctx: BrokerContext, header: codec.RequestHeader, body: dict) -> dict:
    """The groups this broker coordinates: those of the ``__consumer_offsets`` partitions it
    leads (Kafka's admin clients ask every broker and merge)."""
    states = {s.lower() for s in body.get("states_filter") or []}
    md = await ctx.metadata()
    offsets_topic = md["topics"].get(OFFSETS_TOPIC)
    led = [
        md["leaders"][(OFFSETS_TOPIC, p.partition)]
        for p in (offsets_topic.partitions if offsets_topic is not None else ())
        if p.leader == ctx.broker_id and (OFFSETS_TOPIC, p.partition) in md["leaders"]
    ]
    groups, error = [], 0
    for handle in led:
        try:
            response = await ctx.call(handle.list_groups.remote(session=ctx.broker_token()))
        except RaylogError as exc:
            error = error or code_of(exc)
            continue
        if response.error_code:
            error = error or response.error_code
            continue
        for group_id, state, _, protocol_type in response.value:
            if not states or state.lower() in states:
                groups.append({"group_id": group_id, "protocol_type": protocol_type, "group_state": state})
    return {"throttle_time_ms": 0, "error_code": error, "groups": groups}


# --- DeleteGroups ------------------------------------------------------------------------


async def delete_groups(ctx: BrokerContext, header: codec.RequestHeader, body: dict) -> dict:
    """Each group deleted by its coordinator, with its committed offsets, as raylog's
    ``Admin.delete_consumer_groups`` does: NON_EMPTY_GROUP while it has members,
    GROUP_ID_NOT_FOUND for a group that does not exist."""
    names = list(body.get("groups_names") or [])
    answers = await asyncio.gather(*(_ask(ctx, group_id, "delete_group", group_id) for group_id in names))
    return {
        "throttle_time_ms": 0,
        "results": [{"group_id": g, "error_code": code} for g, (_, code) in zip(names, answers, strict=True)],
    }


async def offset_delete(ctx: BrokerContext, header: codec.RequestHeader, body: dict) -> dict:
    """The group's committed offsets of the partitions named deleted by its coordinator, as
    Kafka's OffsetDelete: GROUP_SUBSCRIBED_TO_TOPIC for a partition whose topic a member
    reads, GROUP_ID_NOT_FOUND (for the whole request) for a group that does not exist."""
    group_id = body["group_id"]
    partitions = [(t["name"], p["partition_index"]) for t in body["topics"] for p in t["partitions"]]
    results, code = await _ask(ctx, group_id, "delete_offsets", group_id, partitions)
    return {
        "error_code": code,
        "throttle_time_ms": 0,
        "topics": [
            {
                "name": t["name"],
                "partitions": [
                    {"partition_index": i, "error_code": code or results[(t["name"], i)]}
                    for i in (p["partition_index"] for p in t["partitions"])
                ],
            }
            for t in body["topics"]
        ],
    }


# --- Kafka 4's consumer protocol (KIP-848) ---------------------------------------------


async def consumer_group_heartbeat(ctx: BrokerContext, header: codec.RequestHeader, body: dict) -> dict:
    md = await ctx.metadata()
    by_id, ids = topic_ids(md), topic_names(md)
    owned = body.get("topic_partitions")
    if owned is not None:  # (a topic deleted since: nothing of it is owned any more)
        owned = frozenset(
            TopicPartition(by_id[t["topic_id"]], p) for t in owned if t["topic_id"] in by_id for p in t["partitions"]
        )
    request = Heartbeat(
        group_id=body["group_id"],
        member_id=body["member_id"],
        member_epoch=body["member_epoch"],
        instance_id=body.get("instance_id"),
        rack_id=body.get("rack_id"),
        rebalance_timeout_ms=body.get("rebalance_timeout_ms", -1),
        topics=None if body.get("subscribed_topic_names") is None else tuple(body["subscribed_topic_names"]),
        regex=body.get("subscribed_topic_regex"),
        assignor=body.get("server_assignor"),
        owned=owned,
    )
    failed = {"member_id": None, "member_epoch": -1, "heartbeat_interval_ms": 0, "assignment": None}
    if header.api_version >= 1 and request.member_epoch == JOIN_EPOCH and not request.member_id:
        # From v1 the client makes its member id (KIP-1082).
        return {**failed, "error_code": InvalidRequestError.code, "error_message": "a member id is required"}
    answer, code = await _ask(ctx, request.group_id, "consumer_heartbeat", request, subscribable(md))
    if code:
        return {**failed, "error_code": code}
    assignment = None
    if answer.assignment is not None:
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(answer.assignment):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        assignment = {
            "topic_partitions": [{"topic_id": ids[t], "partitions": ps} for t, ps in by_topic.items() if t in ids]
        }
    return {
        "error_code": 0,
        "member_id": answer.member_id,
        "member_epoch": answer.member_epoch,
        "heartbeat_interval_ms": answer.heartbeat_interval_ms,
        "assignment": assignment,
    }


async def consumer_group_describe(ctx: BrokerContext, header: codec.RequestHeader, body: dict) -> dict:
    ids = topic_names(await ctx.metadata())

    def partitions(assigned) -> dict:
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(assigned):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        return {
            "topic_partitions": [
                {"topic_id": ids[t], "topic_name": t, "partitions": ps} for t, ps in by_topic.items() if t in ids
            ]
        }

    async def one(group_id: str) -> dict:
        group, code = await _ask(ctx, group_id, "describe_consumer_group", group_id)
        if code:
            return {"group_id": group_id, "error_code": code}
        return {
            "group_id": group_id,
            "error_code": 0,
            "group_state": group.state(),
            "group_epoch": group.epoch,
            "assignment_epoch": group.assignment_epoch,
            "assignor_name": group.assignor,
            "authorized_operations": authorized_operations(
                body.get("include_authorized_operations", False), ResourceType.GROUP, group_id
            ),
            "members": [
                {
                    "member_id": m.member_id,
                    "instance_id": m.instance_id,
                    "rack_id": m.rack_id,
                    "member_epoch": m.epoch,
                    "subscribed_topic_names": list(m.topics),
                    "subscribed_topic_regex": m.regex,
                    "assignment": partitions(m.assigned),
                    "target_assignment": partitions(group.target.get(m.member_id, ())),
                }
                for m in group.members.values()
            ],
        }

    return {"groups": list(await asyncio.gather(*(one(g) for g in body.get("group_ids") or ())))}


HANDLERS: dict[codec.ApiKey, Handler] = {
    codec.ApiKey.FIND_COORDINATOR: find_coordinator,
    codec.ApiKey.JOIN_GROUP: join_group,
    codec.ApiKey.SYNC_GROUP: sync_group,
    codec.ApiKey.HEARTBEAT: heartbeat,
    codec.ApiKey.LEAVE_GROUP: leave_group,
    codec.ApiKey.OFFSET_COMMIT: offset_commit,
    codec.ApiKey.OFFSET_FETCH: offset_fetch,
    codec.ApiKey.DESCRIBE_GROUPS: describe_groups,
    codec.ApiKey.LIST_GROUPS: list_groups,
    codec.ApiKey.DELETE_GROUPS: delete_groups,
    codec.ApiKey.OFFSET_DELETE: offset_delete,
    codec.ApiKey.CONSUMER_GROUP_HEARTBEAT: consumer_group_heartbeat,
    codec.ApiKey.CONSUMER_GROUP_DESCRIBE: consumer_group_describe,
}
