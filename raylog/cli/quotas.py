"""``raylog quotas``: client byte-rate quotas, as kafka-configs.sh --entity-type clients.

raylog quotas alter (--client-id ID | --default) [--producer-byte-rate R] [--consumer-byte-rate R]
                    [--delete-producer-byte-rate] [--delete-consumer-byte-rate]
        as kafka-configs --alter --entity-type clients: set (bytes/s) or remove a client
        id's byte-rate quotas, or the default ones of every client id without its own;
        leaders apply them at once (each partition leader enforces them on its own)
raylog quotas describe [--json]               every client quota set
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import raylog
from raylog.cli.arguments import UsageError, command, positive_float
from raylog.cli.connection import connected
from raylog.cli.output import table
from raylog.coordination.quotas import QUOTA_KEYS


def _quotas_alter(args: argparse.Namespace) -> int:
    change: dict[str, float | None] = {}
    for key in QUOTA_KEYS:
        rate, delete = getattr(args, key), getattr(args, f"delete_{key}")
        if rate is not None and delete:
            raise UsageError(f"{key}: both set and deleted")
        if rate is not None or delete:
            change[key] = rate
    if not change:
        raise UsageError("nothing to alter: give --producer-byte-rate, --consumer-byte-rate or a --delete-... flag")
    client_id = None if args.default else args.client_id
    with connected(args) as cluster:
        raylog.Admin(cluster).alter_client_quotas({client_id: change})
    done = ", ".join(f"{k}={v:g}" if v is not None else f"deleted {k}" for k, v in change.items())
    print(f"altered quotas of {_quota_entity(client_id)}: {done}; leaders apply them now")
    return 0


def _quotas_describe(args: argparse.Namespace) -> int:
    with connected(args) as cluster:
        quotas = raylog.Admin(cluster).describe_client_quotas()
    # The default quota first, then client ids in order.
    ordered = sorted(quotas.items(), key=lambda item: (item[0] is not None, item[0] or ""))
    if args.json:
        print(json.dumps([{"client_id": c, **q} for c, q in ordered], indent=2))
        return 0
    if not ordered:
        print("no client quotas: every client is unlimited")
        return 0
    header = ("CLIENT_ID", *(k.upper() for k in QUOTA_KEYS))
    rows = [(_quota_entity(c), *(f"{q[k]:g}" if k in q else "-" for k in QUOTA_KEYS)) for c, q in ordered]
    print(table([header, *rows]))
    return 0


def _quota_entity(client_id: str | None) -> str:
    return "<default>" if client_id is None else repr(client_id)


def add_commands(commands: Any) -> None:
    quotas = commands.add_parser("quotas", help="alter and describe client byte-rate quotas")
    actions = quotas.add_subparsers(dest="action", required=True)
    alter = command(actions, "alter", _quotas_alter, "set or remove a client id's (or the default) byte-rate quotas")
    entity = alter.add_mutually_exclusive_group(required=True)
    entity.add_argument("--client-id", help="the client id the quotas are for")
    entity.add_argument("--default", action="store_true", help="the default quotas of client ids without their own")
    for key in QUOTA_KEYS:
        flag = key.replace("_", "-")
        alter.add_argument(f"--{flag}", dest=key, type=positive_float, metavar="R", help="bytes/s")
        alter.add_argument(f"--delete-{flag}", dest=f"delete_{key}", action="store_true", help="remove this quota")
    describe = command(actions, "describe", _quotas_describe, "every client quota set")
    describe.add_argument("--json", action="store_true", help="machine-readable output")
