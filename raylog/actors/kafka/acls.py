"""Kafka's ACL APIs on raylog's controller: DescribeAcls v1-3, CreateAcls v1-3 and
DeleteAcls v1-3 (``kafka-acls.sh``, the admin clients' ``create_acls`` and friends).

Without the authorizer every one is answered SECURITY_DISABLED, as by a Kafka broker with no
``authorizer.class.name``. CreateAcls checks each creation as Kafka does (INVALID_REQUEST
for one Kafka refuses, the others still created) and creates the valid ones in one journal
record batch; DeleteAcls deletes, in one batch, every ACL that one of its filters matches and
answers per filter the ACLs it matched (version 0 of each, without pattern types, is gone
from Kafka 4 and not served). Which principal may send these requests is the authorizer's
(:mod:`raylog.actors.kafka.authorization`: DESCRIBE or ALTER on the cluster).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from raylog.actors.kafka.context import BrokerContext
from raylog.actors.kafka.coordinator_errors import code_of
from raylog.common.acl import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    validate_acl,
)
from raylog.errors import InvalidRequestError, RaylogError
from raylog.kafka.codec import ApiKey, RequestHeader


def _enum(kind: type, value: int, field: str):
    """``kind(value)``, or InvalidRequestError naming the field (a code Kafka does not define)."""
    try:
        return kind(value)
    except ValueError:
        raise InvalidRequestError(f"unknown {field} {value}") from None


def _filter(entry: dict) -> ACLFilter:
    """The ACLFilter of a DescribeAcls request or a DeleteAcls filter (its fields' names)."""
    return ACLFilter(
        entry.get("principal_filter"),
        entry.get("host_filter"),
        _enum(ACLOperation, entry["operation"], "operation"),
        _enum(ACLPermissionType, entry["permission_type"], "permission type"),
        ResourcePatternFilter(
            _enum(ResourceType, entry["resource_type_filter"], "resource type"),
            entry.get("resource_name_filter"),
            _enum(PatternType, entry["pattern_type_filter"], "pattern type"),
        ),
    )


def _acl_fields(acl: ACL) -> dict:
    return {
        "principal": acl.principal,
        "host": acl.host,
        "operation": int(acl.operation),
        "permission_type": int(acl.permission_type),
    }


def _resource_fields(pattern: ResourcePattern) -> dict:
    return {
        "resource_type": int(pattern.resource_type),
        "resource_name": pattern.name,
        "pattern_type": int(pattern.pattern_type),
    }


async def describe_acls(ctx: BrokerContext, header: RequestHeader, body: dict) -> dict:
    answer = {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "resources": []}
    try:
        code, message, acls = await ctx.call(ctx.ask("describe_acls", _filter(body)))
    except RaylogError as exc:
        return {**answer, "error_code": code_of(exc), "error_message": str(exc)}
    if code:
        return {**answer, "error_code": code, "error_message": message}
    by_pattern: dict[ResourcePattern, list[dict]] = {}
    for acl in acls:
        by_pattern.setdefault(acl.pattern, []).append(_acl_fields(acl))
    answer["resources"] = [{**_resource_fields(p), "acls": entries} for p, entries in by_pattern.items()]
    return answer


async def create_acls(ctx: BrokerContext, header: RequestHeader, body: dict) -> dict:
    results: list[dict] = []
    valid: list[tuple[int, ACL]] = []
    for creation in body["creations"]:
        try:
            acl = ACL(
                creation["principal"],
                creation["host"],
                _enum(ACLOperation, creation["operation"], "operation"),
                _enum(ACLPermissionType, creation["permission_type"], "permission type"),
                ResourcePattern(
                    _enum(ResourceType, creation["resource_type"], "resource type"),
                    creation["resource_name"],
                    _enum(PatternType, creation["resource_pattern_type"], "pattern type"),
                ),
            )
            validate_acl(acl)
        except RaylogError as exc:
            results.append({"error_code": code_of(exc), "error_message": str(exc)})
            continue
        valid.append((len(results), acl))
        results.append({"error_code": 0, "error_message": None})
    if valid:
        try:
            code, message = await ctx.call(ctx.ask("create_acls", [acl for _, acl in valid]))
        except RaylogError as exc:
            code, message = code_of(exc), str(exc)
        for i, _ in valid:
            results[i] = {"error_code": code, "error_message": message or None}
    return {"throttle_time_ms": 0, "results": results}


async def delete_acls(ctx: BrokerContext, header: RequestHeader, body: dict) -> dict:
    answer: dict = {"throttle_time_ms": 0, "filter_results": []}
    try:
        filters = [_filter(entry) for entry in body["filters"]]
    except RaylogError as exc:
        refused = {"error_code": code_of(exc), "error_message": str(exc), "matching_acls": []}
        return {**answer, "filter_results": [refused for _ in body["filters"]]}
    try:
        code, message, matched = await ctx.call(ctx.ask("delete_acls", filters))
    except RaylogError as exc:
        code, message, matched = code_of(exc), str(exc), []
    if code:
        answer["filter_results"] = [
            {"error_code": code, "error_message": message, "matching_acls": []} for _ in filters
        ]
        return answer
    answer["filter_results"] = [
        {
            "error_code": 0,
            "error_message": None,
            "matching_acls": [
                {"error_code": 0, "error_message": None, **_resource_fields(acl.pattern), **_acl_fields(acl)}
                for acl in found
            ],
        }
        for found in matched
    ]
    return answer


HANDLERS: dict[ApiKey, Callable[[BrokerContext, RequestHeader, dict], Awaitable[dict]]] = {
    ApiKey.DESCRIBE_ACLS: describe_acls,
    ApiKey.CREATE_ACLS: create_acls,
    ApiKey.DELETE_ACLS: delete_acls,
}
