"""Kafka's transaction admin APIs, what ``kafka-transactions.sh`` and admin clients call to
find and inspect transactions: DescribeProducers v0, DescribeTransactions v0 and
ListTransactions v0-2.

- DescribeProducers: the producers each partition's leader knows (its producer state), with
  the first offset of the transaction each has open there (-1: none); the coordinator epoch
  is not kept per producer in raylog (0). Served on any listener (the leader actor is asked
  wherever it runs); an unknown partition is UNKNOWN_TOPIC_OR_PARTITION.
- DescribeTransactions: each transactional id's state from its coordinator (any listener
  asks it); an id no producer initialised is TRANSACTIONAL_ID_NOT_FOUND.
- ListTransactions: as Kafka's, per broker: the transactional ids whose coordinator is on
  this listener's broker (the ``__transaction_state`` partitions it leads), so that an admin
  client asking every broker lists each id once. Filtered by state (names Kafka does not
  know come back in ``unknown_state_filters``), producer id, (v1) open for at least
  ``duration_filter`` ms and (v2, KIP-1152) a transactional id regular expression (Python's
  ``re``, matched in full; a pattern that does not compile is INVALID_REQUEST). A
  coordinator still loading answers COORDINATOR_LOAD_IN_PROGRESS.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

from raylog.actors.kafka.context import BrokerContext
from raylog.actors.kafka.coordinator_errors import code_of
from raylog.common.names import TRANSACTION_TOPIC
from raylog.coordination.transactions import TxnState
from raylog.errors import (
    CoordinatorNotAvailableError,
    InvalidRequestError,
    NotLeaderOrFollowerError,
    RaylogError,
    TransactionalIdNotFoundError,
    UnknownTopicOrPartitionError,
)
from raylog.kafka.codec import ApiKey, RequestHeader
from raylog.protocol import error_of

logger = logging.getLogger(__name__)

#: Kafka's transaction state names (raylog's are the same), for ListTransactions' filter.
STATES = frozenset(s.value for s in TxnState) | {"Dead", "PrepareEpochFence"}


def _error(exc: BaseException) -> dict:
    return {"error_code": code_of(exc), "error_message": str(exc)}


# --- DescribeProducers --------------------------------------------------------------------


async def describe_producers(ctx: BrokerContext, header: RequestHeader, body: dict) -> dict:
    topics = []
    for topic in body["topics"]:
        partitions = []
        for index in topic["partition_indexes"]:
            entry = {"partition_index": index, "error_code": 0, "active_producers": []}
            try:
                entry["active_producers"] = await _producers(ctx, topic["name"], index)
            except RaylogError as exc:
                entry.update(_error(exc))
            partitions.append(entry)
        topics.append({"name": topic["name"], "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}


async def _producers(ctx: BrokerContext, topic: str, partition: int) -> list[dict]:
    """The producers ``topic``-``partition``'s leader knows, as DescribeProducers lists them.

    Raises:
        UnknownTopicOrPartitionError, NotLeaderOrFollowerError (no running leader), or the
        controller's or the leader call's error.
    """
    md = await ctx.metadata()
    described = md["topics"].get(topic)
    if described is None or not 0 <= partition < len(described.partitions):
        raise UnknownTopicOrPartitionError(f"unknown partition {topic}-{partition}")
    leader = md["leaders"].get((topic, partition))
    if leader is None:
        ctx.invalidate()
        raise NotLeaderOrFollowerError(f"{topic}-{partition} has no running leader")
    states = await ctx.call(leader.describe_producers.remote(ctx.broker_token()))
    return [
        {
            "producer_id": s.producer_id,
            "producer_epoch": s.producer_epoch,
            "last_sequence": s.last_sequence,
            "last_timestamp": s.last_timestamp,
            "coordinator_epoch": 0,
            "current_txn_start_offset": s.current_transaction_start_offset,
        }
        for s in states
    ]


# --- DescribeTransactions -----------------------------------------------------------------


async def describe_transactions(ctx: BrokerContext, header: RequestHeader, body: dict) -> dict:
    states = []
    for transactional_id in body["transactional_ids"]:
        entry = {"error_code": 0, "transactional_id": transactional_id}
        try:
            entry.update(_described(await _describe(ctx, transactional_id)))
        except RaylogError as exc:
            entry["error_code"] = code_of(exc)
            logger.debug("DescribeTransactions of %r: %s", transactional_id, exc)
        states.append(entry)
    return {"throttle_time_ms": 0, "transaction_states": states}


async def _describe(ctx: BrokerContext, transactional_id: str) -> dict:
    """The coordinator's description of ``transactional_id``.

    Raises:
        TransactionalIdNotFoundError, or the coordinator's or its call's error.
    """
    _, coordinator = await ctx.transaction_coordinator(transactional_id)
    if coordinator is None:
        raise CoordinatorNotAvailableError(f"no coordinator for transactional id {transactional_id!r} yet")
    found = _value(
        await ctx.call(coordinator.describe_transactions.remote([transactional_id], session=ctx.broker_token()))
    )
    if not found:
        raise TransactionalIdNotFoundError(f"no transactional id {transactional_id!r}")
    return found[0]


def _described(d: dict) -> dict:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in d["partitions"]:
        by_topic.setdefault(topic, []).append(partition)
    return {
        "transaction_state": d["state"],
        "transaction_timeout_ms": d["timeout_ms"],
        "transaction_start_time_ms": d["start_ms"],
        "producer_id": d["producer_id"],
        "producer_epoch": d["producer_epoch"],
        "topics": [{"topic": t, "partitions": parts} for t, parts in by_topic.items()],
    }


def _value(answer: Any) -> list[dict]:
    """A coordinator's TxnResponse value.

    Raises:
        The error it reports.
    """
    error = error_of(answer)
    if error is not None:
        raise error
    return answer.value


# --- ListTransactions ---------------------------------------------------------------------


async def list_transactions(ctx: BrokerContext, header: RequestHeader, body: dict) -> dict:
    state_filters = set(body.get("state_filters") or ())
    producer_ids = set(body.get("producer_id_filters") or ())
    duration_ms = body.get("duration_filter", -1) if header.api_version >= 1 else -1
    answer = {"throttle_time_ms": 0, "error_code": 0, "unknown_state_filters": sorted(state_filters - STATES)}
    try:
        pattern = _pattern(body.get("transactional_id_pattern") if header.api_version >= 2 else None)
        described = await _coordinated_here(ctx)
    except RaylogError as exc:
        return {**answer, "error_code": code_of(exc), "transaction_states": []}
    now_ms = int(time.time() * 1000)
    listed = [
        {"transactional_id": d["transactional_id"], "producer_id": d["producer_id"], "transaction_state": d["state"]}
        for d in described
        if (not state_filters or d["state"] in state_filters)
        and (not producer_ids or d["producer_id"] in producer_ids)
        and (duration_ms < 0 or (d["start_ms"] >= 0 and now_ms - d["start_ms"] >= duration_ms))
        and (pattern is None or pattern.fullmatch(d["transactional_id"]))
    ]
    return {**answer, "transaction_states": sorted(listed, key=lambda t: t["transactional_id"])}


def _pattern(pattern: str | None) -> re.Pattern | None:
    """``transactional_id_pattern`` compiled (None or "" for every id).

    Raises:
        InvalidRequestError: it does not compile.
    """
    if not pattern:
        return None
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise InvalidRequestError(f"transactional_id_pattern {pattern!r} is not a regular expression: {exc}") from None


async def _coordinated_here(ctx: BrokerContext) -> list[dict]:
    """Every transactional id coordinated on this listener's broker.

    Raises:
        CoordinatorLoadInProgressError, or a coordinator call's error.
    """
    md = await ctx.metadata()
    described = md["topics"].get(TRANSACTION_TOPIC)
    if described is None:
        return []
    found = []
    for p in described.partitions:
        leader = md["leaders"].get((TRANSACTION_TOPIC, p.partition))
        if p.leader == ctx.broker_id and leader is not None:
            found += _value(await ctx.call(leader.describe_transactions.remote(None, session=ctx.broker_token())))
    return found


HANDLERS: dict[ApiKey, Callable[[BrokerContext, RequestHeader, dict], Awaitable[dict]]] = {
    ApiKey.DESCRIBE_PRODUCERS: describe_producers,
    ApiKey.DESCRIBE_TRANSACTIONS: describe_transactions,
    ApiKey.LIST_TRANSACTIONS: list_transactions,
}
