"""Kafka's data-path APIs on raylog: ApiVersions, Metadata, Produce, Fetch, ListOffsets,
DeleteRecords and OffsetForLeaderEpoch; and DescribeCluster, Metadata's view of the brokers
alone.

Each partition of a request goes to its leader replica actor, all of a request's partitions
at once. A partition this broker does not lead is answered NOT_LEADER_OR_FOLLOWER (the
client looks its leader up again), as Kafka's brokers answer; so is one whose leader actor
died (metadata is refreshed at once). Record batches are converted on the way in and out
(:mod:`raylog.kafka.records`): Kafka's v2 format on the wire, raylog's on disk, offsets,
timestamps and producer fields unchanged.

Produce: a connection's batches to each partition go to the leader in the order they came,
one call at a time, and those that queued behind a call go together in the next
(:mod:`raylog.actors.kafka.appends`), so that the listener may run a connection's Produce
requests beside each other.

Fetch: Kafka's ``min_bytes`` and ``max_wait_ms`` hold for the whole request, where a raylog
replica long-polls its own partition. Every partition is first read at once; when that
gives less than ``min_bytes``, each empty partition gets a long poll at its leader and the
request is answered when the first of them brings records (or ``max_wait_ms`` passes). A long
poll still open then stays with the connection and serves that partition's next fetch at the
same offset, so a consumer never has more than one fetch waiting per partition. And once a
partition's records are answered, the listener reads ahead from where they end: the client's
next fetch (Kafka clients keep one fetch in flight per broker) finds them read, and the
leader's round trip overlaps the client's own work. Fetch sessions (KIP-227) are served
(:mod:`raylog.kafka.fetch_sessions`): an incremental fetch names only the partitions that
changed, and its answer only those with news.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import struct
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from raylog.actors.kafka.admin import ask_each
from raylog.actors.kafka.appends import Append, PartitionAppends, Sequences, Slot, placed
from raylog.actors.kafka.authorization import CLUSTER, allows, authorized_operations
from raylog.actors.kafka.context import (
    CONNECTION,
    CONTROL_CALL_TIMEOUT_S,
    BrokerContext,
    broker_addresses,
    topic_ids,
)
from raylog.actors.kafka.coordinator_errors import code_of
from raylog.common.acl import ACLOperation, ResourceType
from raylog.common.names import INTERNAL_TOPICS, validate_topic_name
from raylog.common.record_batch import CONTROL, LOG_OVERHEAD, read_header
from raylog.errors import (
    FencedLeaderEpochError,
    FetchSessionIdNotFoundError,
    InvalidFetchSessionEpochError,
    InvalidRecordError,
    InvalidRequestError,
    LeaderNotAvailableError,
    NetworkExceptionError,
    NotLeaderOrFollowerError,
    RaylogError,
    TopicAlreadyExistsError,
    TopicAuthorizationFailedError,
    UnknownLeaderEpochError,
    UnknownServerError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
    for_code,
)
from raylog.kafka import codec, records
from raylog.kafka.fetch_sessions import FINAL_EPOCH, NO_SESSION_ID, FetchContext
from raylog.protocol import (
    FetchRequest,
    FetchResponse,
    ProduceRequest,
    ProduceResponse,
    error_fields,
    records_payload,
)
from raylog.types import NewTopic

logger = logging.getLogger(__name__)

ApiKey = codec.ApiKey
#: How long past a fetch's own wait its leader may take to answer before the call is given up.
FETCH_GRACE_S = 30.0
#: A produce call's bound beyond the request's own timeout (acks=all waits for the ISR).
PRODUCE_GRACE_S = 30.0
#: A Kafka batch's ``batch_length`` and ``attributes`` (the same layout as raylog's header).
KAFKA_BATCH_HEADER = struct.Struct(">8xi9xh")
#: Errors after which the leader may have moved: metadata is asked again.
_MOVED = (NotLeaderOrFollowerError, NetworkExceptionError, LeaderNotAvailableError, UnknownLeaderEpochError)


def _error(exc: BaseException) -> dict[str, Any]:
    fields = error_fields(exc)
    return {"error_code": fields["error_code"], "error_message": fields["error_message"]}


async def _leader(ctx: BrokerContext, topic: str, partition: int) -> Any:
    """The leader replica actor of a partition this broker leads.

    Raises:
        UnknownTopicOrPartitionError, NotLeaderOrFollowerError (another broker leads, or
        none: the client asks for metadata again).
    """
    md = await ctx.metadata()
    if ctx.leader_broker(topic, partition, md) != ctx.broker_id:
        # The client's metadata may be newer than this listener's (a topic just created, a
        # leader just elected or started): look again before saying no.
        md = await ctx.metadata(refresh=True)
        if topic not in md["topics"] or not 0 <= partition < len(md["topics"][topic].partitions):
            raise UnknownTopicOrPartitionError(f"unknown partition {topic}-{partition}")
        if ctx.leader_broker(topic, partition, md) != ctx.broker_id:
            raise NotLeaderOrFollowerError(f"broker {ctx.broker_id} does not lead {topic}-{partition}")
    return md["leaders"][(topic, partition)]


async def _guarded(ctx: BrokerContext, work: Awaitable[Any]) -> Any:
    """``await work``; an error after which the leader may have moved also drops the cached
    metadata. Raises what ``work`` raises."""
    try:
        return await work
    except _MOVED as exc:
        ctx.invalidate()
        if isinstance(exc, NetworkExceptionError):
            # A leader actor gone: Kafka clients refresh metadata on this code and retry.
            raise NotLeaderOrFollowerError(str(exc)) from None
        raise


# --- ApiVersions and Metadata -------------------------------------------------------------


async def api_versions(ctx: BrokerContext, header: codec.RequestHeader, body: dict) -> dict:
    keys = [
        {"api_key": int(k), "min_version": lo, "max_version": hi} for k, (lo, hi) in sorted(codec.SUPPORTED.items())
    ]
    return {"error_code": 0, "api_keys": keys, "throttle_time_ms": 0}


async def metadata(ctx: BrokerContext, header: codec.RequestHeader, body: dict) -> dict:
    requested = body.get("topics")
    md = await ctx.metadata()
    names, unknown_ids = _requested_names(requested, md)
    if unknown_ids or (names is not None and not all(_all_led(ctx, n, md) for n in names)):
        md = await ctx.metadata(refresh=True)  # a topic created, or a leader started, a moment ago
        names, unknown_ids = _requested_names(requested, md)
    # The authorizer's: topics the principal may not describe are left out of a listing of
    # every topic (refusing nothing asked for: not a denial, neither logged nor counted), or
    # answered TOPIC_AUTHORIZATION_FAILED when named; a topic is created automatically only
    # with CREATE on it or on the cluster.
    named = names is not None
    hidden = {n for n in (md["topics"] if names is None else names) if n is not None and not _describable(n, named)}
    refused: dict[str, int] = {n: TopicAuthorizationFailedError.code for n in hidden if named}
    unknown = [] if names is None else [n for n in dict.fromkeys(names) if n not in md["topics"] and n not in hidden]
    if unknown and body.get("allow_auto_topic_creation", True) and ctx.config.auto_create_topics_enable:
        creatable = [n for n in unknown if n is not None and _creatable(n)]
        refused.update(await _create_topics(ctx, creatable, md) if creatable else {})
        md = await ctx.metadata(refresh=True)
    brokers = [{"node_id": b, **endpoint} for b, endpoint in _live_brokers(md)]
    reachable = {b["node_id"] for b in brokers}
    topics = []
    for name in sorted(set(md["topics"]) - hidden) if names is None else names:
        described = None if name in hidden else md["topics"].get(name)
        if described is None:
            code = refused.get(name, UnknownTopicOrPartitionError.code)
            topics.append({"error_code": code, "name": name, "partitions": [], "is_internal": False})
            continue
        partitions = []
        for p in described.partitions:
            leader = ctx.leader_broker(name, p.partition, md)
            if leader not in reachable:
                leader = -1
            partitions.append(
                {
                    "error_code": 0 if leader >= 0 else LeaderNotAvailableError.code,
                    "partition_index": p.partition,
                    "leader_id": leader,
                    "leader_epoch": p.leader_epoch,
                    "replica_nodes": list(p.replicas),
                    "isr_nodes": list(p.isr),
                    "offline_replicas": [b for b in p.replicas if b not in md["live"]],
                }
            )
        topics.append(
            {
                "error_code": 0,
                "name": name,
                "topic_id": uuid.UUID(hex=described.topic_id),
                "is_internal": name in INTERNAL_TOPICS,
                "partitions": partitions,
                "topic_authorized_operations": authorized_operations(
                    body.get("include_topic_authorized_operations", False), ResourceType.TOPIC, name
                ),
            }
        )
    topics += [
        {"error_code": UnknownTopicIdError.code, "name": None, "topic_id": i, "partitions": [], "is_internal": False}
        for i in unknown_ids
    ]
    return {
        "throttle_time_ms": 0,
        "brokers": brokers,
        "cluster_id": md["cluster_id"],
        "controller_id": _controller_id(md),
        "topics": topics,
        "cluster_authorized_operations": authorized_operations(
            body.get("include_cluster_authorized_operations", False), ResourceType.CLUSTER
        ),
    }


def _describable(topic: str, named: bool) -> bool:
    return allows(ACLOperation.DESCRIBE, ResourceType.TOPIC, topic, log_denied=named)


def _creatable(topic: str) -> bool:
    return allows(ACLOperation.CREATE, ResourceType.CLUSTER, CLUSTER) or allows(
        ACLOperation.CREATE, ResourceType.TOPIC, topic
    )


def _requested_names(requested: list[dict] | None, md: dict) -> tuple[list[str] | None, list[uuid.UUID]]:
    """The topic names a Metadata request asks for (None: every topic), those asked by id
    (v10+, KIP-516: a consumer group member learns its assignment by topic id) found in
    ``md``; and the ids no topic has."""
    if requested is None:
        return None, []
    ids = topic_ids(md)
    names: list[str] = []
    unknown: list[uuid.UUID] = []
    for t in requested:
        name, topic_id = t.get("name"), t.get("topic_id")
        if name is None and topic_id is not None and topic_id.int:
            name = ids.get(topic_id)
            if name is None:
                unknown.append(topic_id)
                continue
        names.append(name)
    return names, unknown


async def _create_topics(ctx: BrokerContext, names: list[str], md: dict) -> dict[str, int]:
    """Kafka's automatic topic creation: create each of ``names`` with the cluster's
    num.partitions and default.replication.factor; the error code of each that was not
    created (an illegal or internal name, too few live brokers, the controller's refusal or
    its absence), to answer in its place."""
    refused, news = {}, []
    for name in names:
        try:
            validate_topic_name(name, existing=md["topics"])
        except RaylogError as exc:
            refused[name] = code_of(exc)
            continue
        if name in INTERNAL_TOPICS:
            refused[name] = UnknownTopicOrPartitionError.code  # raylog creates those itself
            continue
        news.append(NewTopic(name, ctx.config.num_partitions, ctx.config.default_replication_factor))
    if not news:
        return refused
    answers = await ask_each(
        ctx,
        ctx.ask("create_topics", news),
        [new.name for new in news],
        CONTROL_CALL_TIMEOUT_S,
    )
    for name, (code, message, *_) in answers.items():
        if code and code != TopicAlreadyExistsError.code:  # (another request created it first)
            refused[name] = code
            logger.info("Metadata: topic %r not created automatically: %s", name, message)
        elif not code:
            logger.info("Metadata: topic %r created automatically", name)
    return refused


async def describe_cluster(ctx: BrokerContext, header: codec.RequestHeader, body: dict) -> dict:
    """Kafka's DescribeCluster (what admin clients' ``describe_cluster`` and UIs ask): the
    cluster id, the live brokers' listeners, and the broker Metadata names as controller.
    raylog has no controller listeners: asking for them (endpoint type 2) is INVALID_REQUEST."""
    answer = {"throttle_time_ms": 0, "endpoint_type": body.get("endpoint_type", 1)}
    if answer["endpoint_type"] != 1:
        refusal = InvalidRequestError("raylog's controller has no Kafka listener: ask for brokers (1)")
        return {**answer, **_error(refusal)}
    md = await ctx.metadata()
    return {
        **answer,
        "error_code": 0,
        "cluster_id": md["cluster_id"],
        "controller_id": _controller_id(md),
        "brokers": [{"broker_id": b, **endpoint} for b, endpoint in _live_brokers(md)],
        "cluster_authorized_operations": authorized_operations(
            body.get("include_cluster_authorized_operations", False), ResourceType.CLUSTER
        ),
    }


def _live_brokers(md: dict) -> list[tuple[int, dict]]:
    """``(broker id, {host, port, rack})`` of each live broker with the connection's Kafka
    listener, by id."""
    addresses = sorted(broker_addresses(md).items())
    return [(b, {"host": host, "port": port, "rack": None}) for b, (host, port) in addresses if b in md["live"]]


def _controller_id(md: dict) -> int:
    """The broker Kafka's clients are told is the controller (raylog's controller is an actor
    of no broker): the lowest id with the connection's listener, or -1."""
    return min(broker_addresses(md), default=-1)


def _all_led(ctx: BrokerContext, topic: str, md: dict) -> bool:
    """Whether ``md`` knows ``topic`` and a running leader for each of its partitions."""
    described = md["topics"].get(topic)
    return described is not None and all(ctx.leader_broker(topic, p.partition, md) >= 0 for p in described.partitions)


# --- Produce ------------------------------------------------------------------------------


async def produce(ctx: BrokerContext, header: codec.RequestHeader, body: dict) -> dict | None:
    acks, timeout_ms = body["acks"], body["timeout_ms"]
    client_id = header.client_id or ""
    tid = body.get("transactional_id")
    places = [
        (t["name"], p, _appends(ctx, t["name"], p["index"]).reserve())
        for t in body["topic_data"]
        for p in t["partition_data"]
    ]
    placed()
    calls = [
        (topic, p["index"], _produce_partition(ctx, topic, p, slot, acks, timeout_ms, client_id, tid))
        for topic, p, slot in places
    ]
    try:
        answers = await asyncio.gather(*(c for _, _, c in calls))
    finally:
        for *_, slot in places:
            slot.fill(None)  # (a place left empty, by a cancelled request, would hold the others up)
    if acks == 0:
        return None
    by_topic: dict[str, list] = {}
    for (topic, _, _), answer in zip(calls, answers, strict=True):
        by_topic.setdefault(topic, []).append(answer)
    throttle = max((a.pop("throttle_time_ms") for a in answers), default=0)
    return {
        "responses": [{"name": t, "partition_responses": parts} for t, parts in by_topic.items()],
        "throttle_time_ms": throttle,
    }


async def _produce_partition(
    ctx: BrokerContext, topic: str, p: dict, slot: Slot, acks: int, timeout_ms: int, client_id: str, tid: str | None
) -> dict:
    """One partition's answer: its batch converted, then appended in its place ``slot``."""
    answer: dict[str, Any] = {"index": p["index"], "base_offset": -1, "log_append_time_ms": -1, "throttle_time_ms": 0}
    try:
        try:
            converted = await ctx.convert(records.to_raylog, _one_batch(topic, p["index"], p["records"]))
            append = Append(converted, read_header(converted), acks, timeout_ms, client_id, tid)
        except BaseException:
            slot.fill(None)  # (refused, or cancelled: the appends after it go on)
            raise
        slot.fill(append)
        response = await slot.answer
    except RaylogError as exc:
        answer.update(_error(exc))
        return answer
    answer.update(
        error_code=response.error_code,
        error_message=response.error_message or None,
        base_offset=response.base_offset,
        log_append_time_ms=response.log_append_time_ms,
        log_start_offset=response.log_start_offset,
        throttle_time_ms=response.throttle_time_ms,
        record_errors=[{"batch_index": i, "batch_index_error_message": why} for i, why in response.record_errors],
    )
    return answer


def _appends(ctx: BrokerContext, topic: str, partition: int) -> PartitionAppends:
    """The connection's queue of appends to the partition (a fresh one outside a connection)."""
    queues = CONNECTION.get({}).setdefault("appends", {})
    queue = queues.get((topic, partition))
    if queue is None:
        queue = queues[(topic, partition)] = PartitionAppends(functools.partial(_send, ctx, topic, partition))
    return queue


async def _send(ctx: BrokerContext, topic: str, partition: int, appends: list[Append]) -> ProduceResponse:
    """One call to the partition's leader with the batches of ``appends`` (see
    :mod:`raylog.actors.kafka.appends`).

    Raises:
        RaylogError: no leader here, or the call failed.
    """
    first = appends[0]
    data = first.batch if len(appends) == 1 else b"".join(bytes(a.batch) for a in appends)
    sequences = CONNECTION.get({}).setdefault("sequences", Sequences())
    try:
        leader = await _leader(ctx, topic, partition)
        request = ProduceRequest(
            records_payload(data),
            first.acks,
            first.timeout_ms,
            first.client_id,
            first_unacked_sequence=sequences.first_unacked(topic, partition, first.header),
            transactional_id=first.transactional_id,
            in_order=True,
            session=ctx.broker_token(),
        )
        response = await _guarded(
            ctx, ctx.call(leader.produce.remote(request), first.timeout_ms / 1000 + PRODUCE_GRACE_S)
        )
    except RaylogError:
        sequences.answered(topic, partition, first.header, acknowledged=False)
        raise
    sequences.answered(topic, partition, first.header, acknowledged=not response.error_code)
    if response.error_code and issubclass(codec_error(response.error_code), _MOVED):
        ctx.invalidate()
    return response


def _one_batch(topic: str, partition: int, data: Any) -> Any:
    """A Produce's records for one partition, which Kafka (v3+) takes as exactly one batch
    and never a control batch (only transaction coordinators write those).

    Raises:
        InvalidRequestError: no records. InvalidRecordError: several batches, or a control one.
    """
    if data is None or not len(data):
        raise InvalidRequestError(f"a produce to {topic}-{partition} without records")
    if len(data) >= KAFKA_BATCH_HEADER.size:
        batch_length, attributes = KAFKA_BATCH_HEADER.unpack_from(data)
        if LOG_OVERHEAD + batch_length < len(data):
            raise InvalidRecordError(f"a produce to {topic}-{partition} holds more than one record batch")
        if attributes & CONTROL:
            raise InvalidRecordError(f"a produce to {topic}-{partition} holds a control batch")
    return data


def codec_error(code: int) -> type:
    """The raylog error class of a Kafka error code (UnknownServerError's for an unknown one)."""
    try:
        return for_code(code)
    except KeyError:
        return UnknownServerError


# --- Fetch --------------------------------------------------------------------------------


@dataclass
class _Poll:
    """A long poll of one partition held for a connection: the offset and isolation it reads,
    and the call (a task resolving to a FetchResponse or an error)."""

    offset: int
    isolation_level: int
    task: asyncio.Task


async def fetch(ctx: BrokerContext, header: codec.RequestHeader, body: dict) -> dict:
    connection = CONNECTION.get()
    polls: dict[tuple[str, int], _Poll] = connection.setdefault("polls", {})
    known: dict[tuple[str, int], tuple[int, int, int]] = connection.setdefault("known", {})
    isolation = body.get("isolation_level", 0)
    max_wait_ms = max(0, body["max_wait_ms"])
    client_id = header.client_id or ""
    by_id = header.api_version >= 13  # KIP-516: topics named by their ids
    ids = await _topic_ids(ctx, body) if by_id else {}
    unknown = [
        (t["topic_id"], p) for t in body["topics"] if by_id and t["topic_id"] not in ids for p in t["partitions"]
    ]
    asked = [(_topic(t, ids), p) for t in body["topics"] if not by_id or t["topic_id"] in ids for p in t["partitions"]]
    forgotten = [
        (_topic(t, ids), p)
        for t in body.get("forgotten_topics_data") or ()
        if not by_id or t["topic_id"] in ids
        for p in t["partitions"]
    ]
    try:
        session = ctx.fetch_sessions.begin(
            body.get("session_id", NO_SESSION_ID),
            body.get("session_epoch", FINAL_EPOCH),  # before Fetch v7: no sessions
            asked,
            forgotten,
            int(time.time() * 1000),
        )
    except (FetchSessionIdNotFoundError, InvalidFetchSessionEpochError) as exc:
        logger.debug("fetch of client %r: %s", client_id, exc)
        return {"throttle_time_ms": 0, "error_code": exc.code, "session_id": NO_SESSION_ID, "responses": []}
    # No partition reads past the answer's bound (the answer trims to it: _fetch_answer).
    cap = body.get("max_bytes", 2**31 - 1)
    wanted = [(topic, {**p, "partition_max_bytes": min(p["partition_max_bytes"], cap)}) for topic, p in session.wanted]
    results: dict[tuple[str, int], Any] = {}
    now: dict[tuple[str, int], Awaitable] = {}
    readable = {t: allows(ACLOperation.READ, ResourceType.TOPIC, t) for t in dict.fromkeys(t for t, _ in wanted)}
    for topic, p in wanted:
        key = (topic, p["partition"])
        if not readable[topic]:  # (also a partition of the fetch session the request does not name)
            denied = polls.pop(key, None)
            if denied is not None:
                denied.task.cancel()
            results[key] = TopicAuthorizationFailedError(f"not authorized to read topic {topic!r}")
            continue
        poll = polls.get(key)
        if poll is not None and (poll.offset, poll.isolation_level) == (p["fetch_offset"], isolation):
            if poll.task.done():
                results[key] = _outcome(polls.pop(key).task)
            continue  # its read (ahead, or a long poll) is still open: it answers below, or later
        polls.pop(key, None)
        now[key] = _fetch_partition(ctx, topic, p, p["fetch_offset"], isolation, client_id, 0)
    for key, outcome in zip(now, await asyncio.gather(*now.values(), return_exceptions=True), strict=True):
        results[key] = outcome
    gathered = sum(len(r.records) for r in results.values() if isinstance(r, FetchResponse))
    if gathered < max(1, body["min_bytes"]) and max_wait_ms > 0:
        for topic, p in wanted:
            key = (topic, p["partition"])
            if key not in polls and isinstance(results.get(key), FetchResponse) and not results[key].error_code:
                del results[key]
                _poll(ctx, polls, topic, p, p["fetch_offset"], isolation, client_id, max_wait_ms)
        waiting = [polls[(t, p["partition"])].task for t, p in wanted if (t, p["partition"]) in polls]
        if waiting:
            await asyncio.wait(waiting, timeout=max_wait_ms / 1000, return_when=asyncio.FIRST_COMPLETED)
            for topic, p in wanted:
                key = (topic, p["partition"])
                poll = polls.get(key)
                if poll is not None and poll.task.done():
                    results[key] = _outcome(polls.pop(key).task)
    answer, sent = await _fetch_answer(ctx, body, wanted, results, known, session)
    if by_id:
        named = {name: topic_id for topic_id, name in ids.items()}
        for response in answer["responses"]:
            response["topic_id"] = named[response["topic"]]
        answer["responses"] += _unknown_topic_ids(unknown)
    for topic, p in wanted:
        next_offset = sent.get((topic, p["partition"]))
        if next_offset is not None and (topic, p["partition"]) not in polls:
            # Read ahead: the client's next fetch of this partition will most likely ask
            # from here, and finds the records read (or a long poll waiting) meanwhile.
            _poll(ctx, polls, topic, p, next_offset, isolation, client_id, max_wait_ms)
    return answer


async def _topic_ids(ctx: BrokerContext, body: dict) -> dict[uuid.UUID, str]:
    """Topic id -> name of every topic (metadata refreshed once if the request names an
    id not known yet: a topic just created)."""
    ids = topic_ids(await ctx.metadata())
    named = {t["topic_id"] for t in [*body["topics"], *(body.get("forgotten_topics_data") or ())]}
    if not named <= ids.keys():
        ids = topic_ids(await ctx.metadata(refresh=True))
    return ids


def _topic(entry: dict, ids: dict[uuid.UUID, str]) -> str:
    """A request entry's topic name (by its id from Fetch v13 on)."""
    return ids[entry["topic_id"]] if "topic_id" in entry and entry["topic_id"] in ids else entry["topic"]


def _unknown_topic_ids(unknown: list[tuple[uuid.UUID, dict]]) -> list[dict]:
    """UNKNOWN_TOPIC_ID for each partition asked of a topic id no topic has (KIP-516)."""
    by_topic: dict[uuid.UUID, list] = {}
    for topic_id, p in unknown:
        by_topic.setdefault(topic_id, []).append(
            {"partition_index": p["partition"], "error_code": UnknownTopicIdError.code, "high_watermark": -1}
        )
    return [{"topic_id": topic_id, "partitions": parts} for topic_id, parts in by_topic.items()]


def _poll(
    ctx: BrokerContext,
    polls: dict[tuple[str, int], _Poll],
    topic: str,
    p: dict,
    offset: int,
    isolation: int,
    client_id: str,
    max_wait_ms: int,
) -> None:
    """Start reading ``topic``'s partition from ``offset`` for this connection (a long poll of
    ``max_wait_ms`` at the leader); the connection's next fetch from there takes its answer."""
    task = asyncio.ensure_future(_fetch_partition(ctx, topic, p, offset, isolation, client_id, max_wait_ms))
    task.add_done_callback(_observed)
    polls[(topic, p["partition"])] = _Poll(offset, isolation, task)


def forget_connection(connection: dict) -> None:
    """The connection closed: stop its reads ahead and long polls (their answers have no one to go to)."""
    for poll in connection.pop("polls", {}).values():
        poll.task.cancel()


def _observed(task: asyncio.Task) -> None:
    """A read nobody takes (the client moved on) must not log "exception never retrieved"."""
    if not task.cancelled():
        task.exception()


def _outcome(task: asyncio.Task) -> Any:
    return task.exception() or task.result()


async def _fetch_partition(
    ctx: BrokerContext, topic: str, p: dict, offset: int, isolation: int, client_id: str, max_wait_ms: int
) -> FetchResponse:
    leader = await _leader(ctx, topic, p["partition"])
    request = FetchRequest(
        offset=offset,
        max_bytes=max(1, p["partition_max_bytes"]),
        min_bytes=1,
        max_wait_ms=max_wait_ms,
        current_leader_epoch=p.get("current_leader_epoch", -1),
        client_id=client_id,
        isolation_level=isolation,
        session=ctx.broker_token(),
    )
    response = await _guarded(ctx, ctx.call(leader.fetch.remote(request), max_wait_ms / 1000 + FETCH_GRACE_S))
    if response.error_code and issubclass(codec_error(response.error_code), _MOVED):
        ctx.invalidate()
    return response


async def _fetch_answer(
    ctx: BrokerContext,
    body: dict,
    wanted: list[tuple[str, dict]],
    results: dict[tuple[str, int], Any],
    known: dict[tuple[str, int], tuple[int, int, int]],
    session: FetchContext,
) -> tuple[dict, dict[tuple[str, int], int]]:
    """The Fetch response: every partition asked (in an incremental fetch, those with news),
    records up to the request's ``max_bytes`` (at least the first partition's, as Kafka), the
    last known offsets for a partition whose read is still open; and the offset after the
    records sent, by partition."""
    room = body.get("max_bytes", 2**31 - 1)
    sent: dict[tuple[str, int], int] = {}
    throttle = 0
    topics: dict[str, list] = {}
    for topic, p in wanted:
        key = (topic, p["partition"])
        result = results.get(key)
        part: dict[str, Any] = {"partition_index": p["partition"], "high_watermark": -1, "last_stable_offset": -1}
        if isinstance(result, BaseException):
            part.update(error_code=error_fields(result)["error_code"])
        elif result is None:
            hw, lso, log_start = known.get(key, (-1, -1, -1))
            part.update(high_watermark=hw, last_stable_offset=lso, log_start_offset=log_start)
        else:
            known[key] = (result.high_watermark, result.last_stable_offset, result.log_start_offset)
            part.update(
                error_code=result.error_code,
                high_watermark=result.high_watermark,
                last_stable_offset=result.last_stable_offset,
                log_start_offset=result.log_start_offset,
            )
            if len(result.records) and not result.error_code and (room > 0 or not sent):
                within = functools.partial(records.to_kafka_within, max_bytes=room, at_least_one=not sent)
                converted, next_offset, size = await ctx.convert(within, result.records)
                if next_offset is not None:
                    part["records"] = converted
                    part["aborted_transactions"] = [
                        {"producer_id": pid, "first_offset": first} for pid, first in result.aborted_transactions
                    ]
                    room -= size
                    sent[key] = next_offset
            throttle = max(throttle, result.throttle_time_ms)
        offsets = (part["high_watermark"], part["last_stable_offset"], part.get("log_start_offset", -1))
        if session.include(key, offsets, news=bool(part.get("error_code") or part.get("records"))):
            topics.setdefault(topic, []).append(part)
    answer = {
        "throttle_time_ms": throttle,
        "error_code": 0,
        "session_id": session.session_id,
        "responses": [{"topic": t, "partitions": parts} for t, parts in topics.items()],
    }
    return answer, sent


# --- ListOffsets and OffsetForLeaderEpoch ------------------------------------------------


async def list_offsets(ctx: BrokerContext, header: codec.RequestHeader, body: dict) -> dict:
    isolation = body.get("isolation_level", 0)

    async def one(topic: str, p: dict) -> dict:
        answer = {"partition_index": p["partition_index"], "timestamp": -1, "offset": -1, "leader_epoch": -1}
        try:
            leader = await _leader(ctx, topic, p["partition_index"])
            ref = leader.list_offsets.remote(
                p["timestamp"], p.get("current_leader_epoch", -1), isolation, ctx.broker_token()
            )
            response = await _guarded(ctx, ctx.call(ref))
        except RaylogError as exc:
            answer["error_code"] = error_fields(exc)["error_code"]
            return answer
        answer.update(
            error_code=response.error_code,
            timestamp=response.timestamp_ms,
            offset=response.offset,
            leader_epoch=response.leader_epoch,
        )
        return answer

    return await _per_partition(body["topics"], "name", "partitions", one, "name", "partitions")


async def delete_records(ctx: BrokerContext, header: codec.RequestHeader, body: dict) -> dict:
    """Kafka's DeleteRecords: each partition's leader deletes the records below the offset
    given (-1: its high watermark) and answers its low watermark once every in-sync replica
    deleted them too, or REQUEST_TIMED_OUT after the request's ``timeout_ms``."""
    timeout_ms = max(0, body["timeout_ms"])

    async def one(topic: str, p: dict) -> dict:
        answer = {"partition_index": p["partition_index"], "low_watermark": -1}
        try:
            leader = await _leader(ctx, topic, p["partition_index"])
            ref = leader.delete_records.remote(p["offset"], timeout_ms, ctx.broker_token())
            response = await _guarded(ctx, ctx.call(ref, timeout_ms / 1000 + CONTROL_CALL_TIMEOUT_S))
        except RaylogError as exc:
            answer["error_code"] = error_fields(exc)["error_code"]
            return answer
        answer.update(error_code=response.error_code, low_watermark=response.low_watermark)
        return answer

    return await _per_partition(body["topics"], "name", "partitions", one, "name", "partitions")


async def offset_for_leader_epoch(ctx: BrokerContext, header: codec.RequestHeader, body: dict) -> dict:
    async def one(topic: str, p: dict) -> dict:
        answer = {"partition": p["partition"], "leader_epoch": -1, "end_offset": -1}
        try:
            leader = await _leader(ctx, topic, p["partition"])
            _check_epoch(await ctx.metadata(), topic, p["partition"], p.get("current_leader_epoch", -1))
            ref = leader.end_offset_for_epoch.remote(p["leader_epoch"], ctx.broker_token())
            code, epoch, end = await _guarded(ctx, ctx.call(ref))
        except RaylogError as exc:
            answer["error_code"] = error_fields(exc)["error_code"]
            return answer
        answer.update(error_code=code, leader_epoch=epoch, end_offset=end)
        return answer

    return await _per_partition(body["topics"], "topic", "partitions", one, "topic", "partitions")


def _check_epoch(md: dict, topic: str, partition: int, current: int) -> None:
    """Raises FencedLeaderEpochError / UnknownLeaderEpochError when the client's epoch is
    older / newer than the leader's (-1: not checked)."""
    epoch = md["topics"][topic].partitions[partition].leader_epoch
    if current < 0 or current == epoch:
        return
    if current < epoch:
        raise FencedLeaderEpochError(f"{topic}-{partition}: epoch {current} is older than the leader's {epoch}")
    raise UnknownLeaderEpochError(f"{topic}-{partition}: epoch {current} is newer than the leader's {epoch}")


async def _per_partition(
    topics: list[dict],
    name_key: str,
    parts_key: str,
    one: Callable[[str, dict], Awaitable[dict]],
    out_name: str,
    out_parts: str,
) -> dict:
    asked = [(t[name_key], p) for t in topics for p in t[parts_key]]
    answers = await asyncio.gather(*(one(topic, p) for topic, p in asked))
    out: dict[str, list] = {}
    for (topic, _), answer in zip(asked, answers, strict=True):
        out.setdefault(topic, []).append(answer)
    return {"throttle_time_ms": 0, "topics": [{out_name: t, out_parts: parts} for t, parts in out.items()]}


HANDLERS = {
    ApiKey.API_VERSIONS: api_versions,
    ApiKey.METADATA: metadata,
    ApiKey.PRODUCE: produce,
    ApiKey.FETCH: fetch,
    ApiKey.LIST_OFFSETS: list_offsets,
    ApiKey.DELETE_RECORDS: delete_records,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: offset_for_leader_epoch,
    ApiKey.DESCRIBE_CLUSTER: describe_cluster,
}
