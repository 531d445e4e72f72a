"""``raylog users``: SCRAM credentials, as kafka-configs.sh --entity-type users.

raylog users add NAME [--mechanism M]... [--iterations N]
        as kafka-configs --alter --add-config 'SCRAM-SHA-512=[password=...]' --entity-type
        users: the password read from stdin (never from the command line), salted here; a
        SCRAM credential per mechanism (default SCRAM-SHA-256 and SCRAM-SHA-512) with which
        Kafka clients authenticate on SASL listeners
raylog users remove NAME [--mechanism M]...
        delete the user's credentials (default: both mechanisms)
raylog users list [NAME]... [--json]
        each user's mechanisms and iterations (never a key)
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import raylog
from raylog.cli.arguments import UsageError, command, positive_int
from raylog.cli.connection import connected
from raylog.cli.output import table
from raylog.common.scram import DEFAULT_ITERATIONS, MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS

SCRAM_MECHANISMS = tuple(MECHANISMS.values())


def _users_add(args: argparse.Namespace) -> int:
    password = sys.stdin.readline().rstrip("\n")
    if not password:
        raise UsageError("give the password on stdin (e.g. `printf '%s' \"$PW\" | raylog users add alice`)")
    with connected(args) as cluster:
        raylog.Admin(cluster).alter_user_scram_credentials(
            {args.name: password}, mechanisms=args.mechanism or SCRAM_MECHANISMS, iterations=args.iterations
        )
    print(f"user {args.name!r}: {', '.join(args.mechanism or SCRAM_MECHANISMS)} credentials set")
    return 0


def _users_remove(args: argparse.Namespace) -> int:
    mechanisms = args.mechanism or SCRAM_MECHANISMS
    with connected(args) as cluster:
        admin = raylog.Admin(cluster)
        held = [m for m, _ in admin.describe_user_scram_credentials([args.name])[args.name] if m in mechanisms]
        admin.alter_user_scram_credentials(deletions=[(args.name, m) for m in held])
    print(f"user {args.name!r}: {', '.join(held)} credentials deleted")
    return 0


def _users_list(args: argparse.Namespace) -> int:
    with connected(args) as cluster:
        described = raylog.Admin(cluster).describe_user_scram_credentials(args.names or None)
    if args.json:
        print(json.dumps({u: [{"mechanism": m, "iterations": i} for m, i in c] for u, c in described.items()}))
    elif described:
        print(table([("USER", "MECHANISM", "ITERATIONS"), *((u, m, i) for u, c in described.items() for m, i in c)]))
    else:
        print("no users")
    return 0


def add_commands(commands: Any) -> None:
    users = commands.add_parser("users", help="SCRAM credentials of Kafka users (kafka-configs.sh --entity-type users)")
    actions = users.add_subparsers(dest="action", required=True)
    add = command(actions, "add", _users_add, "set a user's SCRAM credentials (password on stdin)")
    remove = command(actions, "remove", _users_remove, "delete a user's SCRAM credentials")
    for sub in (add, remove):
        sub.add_argument("name")
        sub.add_argument("--mechanism", action="append", choices=SCRAM_MECHANISMS, help="repeatable (default: both)")
    add.add_argument(
        "--iterations",
        type=positive_int,
        default=DEFAULT_ITERATIONS,
        help=f"{MIN_ITERATIONS} to {MAX_ITERATIONS} (default {DEFAULT_ITERATIONS})",
    )
    listing = command(actions, "list", _users_list, "users and their mechanisms")
    listing.add_argument("names", nargs="*", metavar="NAME", help="default: every user")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
