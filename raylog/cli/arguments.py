"""Argument helpers every command family shares: a subcommand that talks to a cluster, and
the types argparse checks option values with.
"""

from __future__ import annotations

import argparse
import math
import re
from typing import Any


class UsageError(Exception):
    """Arguments argparse accepts but that do not go together (exit code 2)."""


def command(commands: Any, name: str, run: Any, summary: str) -> argparse.ArgumentParser:
    """A subcommand that talks to a cluster: it takes --address and --cluster-name."""
    sub = commands.add_parser(name, help=summary, description=summary)
    sub.add_argument("--address", help='"auto" or a Ray address (default: RAY_ADDRESS, else `raylog start`\'s head)')
    sub.add_argument("--cluster-name", default="default", help="raylog clusters share Ray by name")
    sub.add_argument(
        "--command-config",
        metavar="FILE",
        help="who to act as: a properties file of security.protocol, sasl.mechanism, sasl.username and "
        "sasl.password (or sasl.jaas.config), as Kafka's tools take; with start, that user is created "
        "with the cluster",
    )
    sub.set_defaults(run=run)
    return sub


def pairs_argument(parser: argparse.ArgumentParser, flag: str, help_text: str) -> None:
    """A repeatable ``flag K=V ...`` option gathering ``(K, V)`` pairs."""
    parser.add_argument(flag, type=_config_pair, nargs="+", action="extend", default=[], metavar="K=V", help=help_text)


def _config_pair(text: str) -> tuple[str, str]:
    key, found, value = text.partition("=")
    if not found or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def config_pairs(text: str) -> list[tuple[str, str]]:
    """Comma-separated K=V pairs, as kafka-configs --add-config reads them: a list value in
    brackets (``log.cleanup.policy=[delete,compact]``) keeps its commas, without brackets."""
    pairs = [_config_pair(part) for part in re.split(r",(?![^\[]*\])", text)]
    return [(key, value[1:-1] if value.startswith("[") and value.endswith("]") else value) for key, value in pairs]


def config_names(text: str) -> list[str]:
    """Comma-separated config names."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected config names, got {text!r}")
    return names


def id_list(text: str) -> list[int]:
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not ids or any(i < 0 for i in ids):
        raise argparse.ArgumentTypeError(f"expected non-negative integers, got {text!r}")
    return ids


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port in [0, 65535], got {value}")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value
