"""``raylog acls``, as Kafka's kafka-acls.sh.

raylog acls add|remove (--allow-principal P | --deny-principal P)... [--allow-host H]...
                [--deny-host H]... [--operation OP]... (--topic T | --group G
                | --transactional-id T | --cluster)... [--resource-pattern-type literal|prefixed]
        as kafka-acls --add / --remove: an ACL for each resource, principal, host (default
        *) and operation (default All); remove deletes exactly those
raylog acls list [--topic T | --group G | --transactional-id T | --cluster]... [--principal P]
                 [--json]
        every ACL, or those on the resources or of the principal named
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import raylog
from raylog.cli.arguments import UsageError, command
from raylog.cli.connection import connected
from raylog.cli.output import table
from raylog.common.acl import (
    ACL,
    CLUSTER_NAME,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)


def acls_named(args: argparse.Namespace) -> list[ACL]:
    """The ACLs ``raylog acls add|remove`` arguments name, as ``kafka-acls.sh`` reads its
    own: one for each resource, principal (allowed or denied), host of that permission
    (default ``*``) and operation (default ALL)."""
    pattern_type = PatternType[args.resource_pattern_type.upper()]
    grants = [(p, ACLPermissionType.ALLOW, args.allow_host or ["*"]) for p in args.allow_principal]
    grants += [(p, ACLPermissionType.DENY, args.deny_host or ["*"]) for p in args.deny_principal]
    operations = [ACLOperation[o.upper()] for o in args.operation] or [ACLOperation.ALL]
    return [
        ACL(principal, host, operation, permission, ResourcePattern(resource_type, name, pattern_type))
        for resource_type, name in _acl_resources(args)
        for principal, permission, hosts in grants
        for host in hosts
        for operation in operations
    ]


def _acl_resources(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    named = [(ResourceType.TOPIC, t) for t in args.topic] + [(ResourceType.GROUP, g) for g in args.group]
    named += [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]
    return named + ([(ResourceType.CLUSTER, CLUSTER_NAME)] if args.cluster else [])


def _acls_change(args: argparse.Namespace) -> int:
    acls = acls_named(args)
    if not acls:
        raise UsageError("name a resource (--topic, --group, --transactional-id or --cluster) and a principal")
    with connected(args) as cluster:
        admin = raylog.Admin(cluster)
        if args.action == "add":
            admin.create_acls(acls)
        else:
            admin.delete_acls([ACLFilter.exactly(acl) for acl in acls])
    verb = "added" if args.action == "add" else "removed"
    print(f"{verb} {len(acls)} ACL(s); every Kafka listener applies them now")
    return 0


def _acls_list(args: argparse.Namespace) -> int:
    resources = _acl_resources(args) or [(ResourceType.ANY, None)]
    with connected(args) as cluster:
        admin = raylog.Admin(cluster)
        filters = [ACLFilter(args.principal, pattern=ResourcePatternFilter(t, name)) for t, name in resources]
        found = dict.fromkeys(acl for acl_filter in filters for acl in admin.describe_acls(acl_filter))
    rows = [
        (a.pattern.resource_type.name, a.pattern.name, a.pattern.pattern_type.name, a.principal, a.host,
         a.operation.name, a.permission_type.name)
        for a in found
    ]  # fmt: skip
    if args.json:
        keys = ("resource_type", "name", "pattern_type", "principal", "host", "operation", "permission_type")
        print(json.dumps([dict(zip(keys, row, strict=True)) for row in rows], indent=2))
    elif rows:
        print(table([("RESOURCE_TYPE", "NAME", "PATTERN", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"), *rows]))
    else:
        print("no ACLs")
    return 0


def add_commands(commands: Any) -> None:
    acls = commands.add_parser("acls", help="add, remove and list Kafka ACLs (as kafka-acls.sh)")
    actions = acls.add_subparsers(dest="action", required=True)
    for name, run, summary in (
        ("add", _acls_change, "add ACLs"),
        ("remove", _acls_change, "remove exactly the ACLs named"),
        ("list", _acls_list, "list ACLs"),
    ):
        sub = command(actions, name, run, summary)
        for flag, what in (("--topic", "a topic"), ("--group", "a group"), ("--transactional-id", "an id")):
            sub.add_argument(flag, action="append", default=[], help=f"{what} (repeatable)")
        sub.add_argument("--cluster", action="store_true", help="the cluster resource")
        if name == "list":
            sub.add_argument("--principal", help="only this principal's ACLs (e.g. User:alice)")
            sub.add_argument("--json", action="store_true", help="machine-readable output")
            continue
        for flag in ("--allow-principal", "--deny-principal", "--allow-host", "--deny-host"):
            sub.add_argument(flag, action="append", default=[], help="repeatable")
        operations = [o.name.title().replace("_", "") for o in ACLOperation if o > ACLOperation.ANY]
        sub.add_argument("--operation", action="append", default=[], type=_acl_operation, help=", ".join(operations))
        sub.add_argument("--resource-pattern-type", default="literal", choices=("literal", "prefixed"))


def _acl_operation(value: str) -> str:
    """An operation as kafka-acls.sh names it (Read, DescribeConfigs, ...), as ACLOperation's name."""
    wanted = value.replace("_", "").replace("-", "").upper()
    for operation in ACLOperation:
        if operation > ACLOperation.ANY and operation.name.replace("_", "") == wanted:
            return operation.name
    raise argparse.ArgumentTypeError(f"unknown operation {value!r}")
