"""The ``raylog`` command: one module per command family, as Kafka's tools are one class per
command.

- :mod:`raylog.cli.cluster`: ``raylog start``, ``stop`` and ``status``
- :mod:`raylog.cli.topics`: ``raylog topics ...`` (kafka-topics.sh)
- :mod:`raylog.cli.brokers`: ``raylog brokers ...`` (kafka-configs.sh --entity-type brokers)
- :mod:`raylog.cli.replicas`: ``raylog reassign-partitions``, ``elect-leaders``, ``delete-records``
- :mod:`raylog.cli.produce` and :mod:`raylog.cli.consume`: kafka-console-producer.sh and
  kafka-console-consumer.sh
- :mod:`raylog.cli.groups`: ``raylog groups ...`` (kafka-consumer-groups.sh)
- :mod:`raylog.cli.transactions`: ``raylog transactions ...`` (kafka-transactions.sh)
- :mod:`raylog.cli.quotas`: ``raylog quotas ...`` (kafka-configs.sh --entity-type clients)
- :mod:`raylog.cli.acls`: ``raylog acls ...`` (kafka-acls.sh)
- :mod:`raylog.cli.users`: ``raylog users ...`` (kafka-configs.sh --entity-type users)
- :mod:`raylog.cli.bench`: ``raylog bench ...`` (Kafka's perf tests, the benchmarks, fault campaigns)
- :mod:`raylog.cli.dump_log`: ``raylog dump-log`` (kafka-dump-log.sh)

Each module's docstring gives its commands' usage. They share :mod:`raylog.cli.connection`
(reaching the cluster), :mod:`raylog.cli.arguments` (option types) and :mod:`raylog.cli.output`
(tables, progress lines).

Every command but dump-log takes ``--address`` (default: "auto" when RAY_ADDRESS is set,
else the local head ``raylog start`` launched, else an error asking to run ``raylog start``)
and ``--cluster-name`` (default "default"); only ``start`` creates a raylog cluster. In a
process already connected to Ray (``ray.is_initialized()``), commands use that Ray. They act
as ``User:ANONYMOUS`` unless ``--command-config FILE`` names a user (a properties file as
Kafka's tools take: ``security.protocol=SASL_PLAINTEXT``, ``sasl.mechanism``,
``sasl.username``, ``sasl.password``); ``start --command-config`` creates that user with the
cluster, the way to make the first super user of a cluster with ACLs.

Exit codes: 0 success; 1 a raylog error, printed as ``raylog: <ErrorName>: <message>``
(with what to do next, where there is something to say); 2 a usage error; 3 (``status``)
some partition is under-replicated, every one online; 4 (``status``) some partition is
offline; 130 interrupted. Progress lines are drawn on stderr only when it is a terminal.
"""

from __future__ import annotations

import argparse
import os
import sys

import raylog
from raylog.cli import (
    acls,
    bench,
    brokers,
    cluster,
    consume,
    dump_log,
    groups,
    produce,
    quotas,
    replicas,
    topics,
    transactions,
    users,
)
from raylog.cli.arguments import UsageError
from raylog.errors import (
    GroupIdNotFoundError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    LeaderNotAvailableError,
    NonEmptyGroupError,
    NotEnoughReplicasError,
    RaylogError,
    UnknownTopicOrPartitionError,
)

#: What to do after an error, appended to its message: the first entry it is an instance of.
_HINTS: tuple[tuple[type[RaylogError], str], ...] = (
    (UnknownTopicOrPartitionError, "see `raylog topics list` and `raylog topics describe`"),
    (InvalidPartitionsError, "see `raylog topics describe TOPIC` for the partition count"),
    (InvalidReplicationFactorError, "see `raylog status` for the live brokers"),
    (NotEnoughReplicasError, "see `raylog topics describe --under-replicated-partitions`"),
    (LeaderNotAvailableError, "see `raylog topics describe --unavailable-partitions`"),
    (NonEmptyGroupError, "stop the group's consumers first; `raylog groups describe GROUP` lists them"),
    (GroupIdNotFoundError, "see `raylog groups list`"),
)


def _hint(exc: RaylogError) -> str:
    for kind, hint in _HINTS:
        if isinstance(exc, kind):
            return f" ({hint})"
    return ""


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # usage errors (2) and --help (0), as a return value
        return exc.code if isinstance(exc.code, int) else 2
    try:
        return args.run(args)
    except RaylogError as exc:
        print(f"raylog: {type(exc).__name__}: {exc}{_hint(exc)}", file=sys.stderr)
        return 1
    except UsageError as exc:
        print(f"raylog {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `raylog consume TOPIC | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="raylog", description="raylog: a Kafka-design commit log on Ray")
    parser.add_argument("--version", action="version", version=f"raylog {raylog.__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    for family in (
        cluster,
        topics,
        brokers,
        replicas,
        produce,
        consume,
        groups,
        transactions,
        quotas,
        acls,
        users,
        bench,
        dump_log,
    ):
        family.add_commands(commands)
    return parser
