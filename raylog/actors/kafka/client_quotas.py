"""Kafka's client quota APIs on raylog's controller: DescribeClientQuotas v0-1 and
AlterClientQuotas v0-1 (``kafka-configs.sh --entity-type clients``).

raylog keeps byte-rate quotas (``producer_byte_rate``, ``consumer_byte_rate``) per client id,
and a default one for every client id without its own: an entity is exactly one component of
type ``client-id``, named (a client id) or null (the default). Entities of Kafka's other
types (``user``, ``ip``) need principals raylog does not have yet: altering one is
INVALID_REQUEST; describing matches none of raylog's entities.

- DescribeClientQuotas lists the entities that match every component of the filter (match
  type 0: that name, 1: the default, 2: any); ``strict`` leaves out entities with components
  the filter does not name (none here: an empty strict filter matches nothing).
- AlterClientQuotas sets (or, with ``remove``, removes) each entity's quotas, the whole
  request all or nothing as raylog's ``Admin.alter_client_quotas``: an entity refused
  (an unknown key, a rate that is not positive) refuses them all, with its error; the others
  are answered INVALID_REQUEST naming it. ``validate_only`` checks and changes nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from raylog.actors.kafka.context import BrokerContext
from raylog.actors.kafka.coordinator_errors import code_of
from raylog.coordination.quotas import alter_client_quotas as altered
from raylog.errors import InvalidRequestError, RaylogError
from raylog.kafka.codec import ApiKey, RequestHeader

CLIENT_ID = "client-id"
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2


def _entity(client_id: str | None) -> list[dict]:
    return [{"entity_type": CLIENT_ID, "entity_name": client_id}]


# --- DescribeClientQuotas -----------------------------------------------------------------


async def describe_client_quotas(ctx: BrokerContext, header: RequestHeader, body: dict) -> dict:
    answer = {"throttle_time_ms": 0, "error_code": 0, "error_message": None}
    try:
        matches = _matcher(body["components"], body["strict"])
        quotas = await ctx.call(ctx.ask("describe_client_quotas"))
    except RaylogError as exc:
        return {**answer, "error_code": code_of(exc), "error_message": str(exc), "entries": None}
    entries = [
        {"entity": _entity(client_id), "values": [{"key": k, "value": float(v)} for k, v in sorted(values.items())]}
        for client_id, values in sorted(quotas.items(), key=lambda item: (item[0] is not None, item[0] or ""))
        if values and matches(client_id)
    ]
    return {**answer, "entries": entries}


def _matcher(components: list[dict], strict: bool) -> Callable[[str | None], bool]:
    """Whether a client-id entity (None: the default) matches the filter's components.

    Raises:
        InvalidRequestError: a match type Kafka does not define, or an entity type twice.
    """
    types = [c["entity_type"] for c in components]
    if len(set(types)) != len(types):
        raise InvalidRequestError(f"an entity type is named more than once in the filter: {types}")
    for c in components:
        if c["match_type"] not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY):
            raise InvalidRequestError(f"unknown match type {c['match_type']}")
    if any(t != CLIENT_ID for t in types) or (strict and not components):
        return lambda client_id: False  # raylog's entities have one client-id component only
    if not components:
        return lambda client_id: True
    (component,) = components
    if component["match_type"] == MATCH_ANY:
        return lambda client_id: True
    if component["match_type"] == MATCH_DEFAULT:
        return lambda client_id: client_id is None
    return lambda client_id: client_id is not None and client_id == component["match"]


# --- AlterClientQuotas --------------------------------------------------------------------


async def alter_client_quotas(ctx: BrokerContext, header: RequestHeader, body: dict) -> dict:
    entries = body["entries"]
    changes: dict[str | None, dict[str, float | None]] = {}
    refused: dict[int, RaylogError] = {}
    for i, entry in enumerate(entries):
        try:
            client_id = _client_id(entry["entity"])
            if client_id in changes:
                raise InvalidRequestError(f"client id {client_id!r} is named more than once in the request")
            changes[client_id] = {op["key"]: None if op["remove"] else op["value"] for op in entry["ops"]}
        except RaylogError as exc:
            refused[i] = exc
    if not refused:
        try:
            if body["validate_only"]:
                altered(await ctx.call(ctx.ask("describe_client_quotas")), changes)
            else:
                code, message = await ctx.call(ctx.ask("alter_client_quotas", changes))
                if code:
                    return _answer(entries, {i: (code, message) for i in range(len(entries))})
        except RaylogError as exc:
            return _answer(entries, {i: (code_of(exc), str(exc)) for i in range(len(entries))})
        return _answer(entries, {})
    first = next(iter(refused.values()))
    others = (InvalidRequestError.code, f"not altered: another entity of the request is refused ({first})")
    return _answer(
        entries, {i: (code_of(refused[i]), str(refused[i])) if i in refused else others for i in range(len(entries))}
    )


def _client_id(entity: list[dict]) -> str | None:
    """The client id an entity names (None: the default).

    Raises:
        InvalidRequestError: it is not exactly one ``client-id`` component.
    """
    if [c["entity_type"] for c in entity] != [CLIENT_ID]:
        named = [c["entity_type"] for c in entity]
        raise InvalidRequestError(f"raylog keeps quotas per client id only (one client-id component), not {named}")
    return entity[0]["entity_name"]


def _answer(entries: list[dict], errors: dict[int, tuple[int, str]]) -> dict:
    out = []
    for i, entry in enumerate(entries):
        code, message = errors.get(i, (0, None))
        out.append({"error_code": code, "error_message": message, "entity": entry["entity"]})
    return {"throttle_time_ms": 0, "entries": out}


HANDLERS: dict[ApiKey, Callable[[BrokerContext, RequestHeader, dict], Awaitable[dict]]] = {
    ApiKey.DESCRIBE_CLIENT_QUOTAS: describe_client_quotas,
    ApiKey.ALTER_CLIENT_QUOTAS: alter_client_quotas,
}
