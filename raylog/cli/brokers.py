"""``raylog brokers``: dynamic broker configs, as kafka-configs.sh --entity-type brokers.

raylog brokers describe-configs [--broker ID | --cluster-default] [--all] [--json]
        as kafka-configs --describe --entity-type brokers [--entity-name ID | --entity-default]:
        the dynamic configs set on a broker or on the cluster default (every broker), of
        each broker and the cluster default when neither is named; --all: every config, each
        with its source: "dynamic_broker", "dynamic_default_broker", "static_broker" (given
        when the cluster started, read-only) or "default". JSON is keyed by the broker id,
        "" for the cluster default
raylog brokers alter-configs (--broker ID | --cluster-default) [--add-config k=v,k2=[a,b] ...]
                             [--delete-config k,k2 ...]
        as kafka-configs --alter --entity-type brokers: set or delete dynamic broker configs.
        A topic property's broker name (log.retention.ms for retention.ms) is the default of
        every topic that does not set it (a broker's own: of its replicas), applied live;
        raylog's static settings (num.partitions ...) are refused; other names are kept
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

import raylog
from raylog.cli.arguments import command, config_names, config_pairs, non_negative_int
from raylog.cli.connection import connected
from raylog.cli.topics import alter_changes, altered, print_configs, shown_configs
from raylog.types import ConfigResource, ConfigResourceType

if TYPE_CHECKING:
    from raylog.clients.cluster import RaylogCluster


def _brokers_describe_configs(args: argparse.Namespace) -> int:
    """Like kafka-configs --describe --entity-type brokers: the configs set on each resource
    itself (a broker's, or the cluster default's) unless --all."""
    with connected(args) as cluster:
        names = _broker_resources(args, cluster)
        described = raylog.Admin(cluster).describe_configs(
            [ConfigResource(ConfigResourceType.BROKER, n) for n in names]
        )
    shown = {
        name: shown_configs(entries, args.all, "dynamic_broker" if name else "dynamic_default_broker")
        for (_, name), entries in described.items()
    }
    none_shown = "no dynamic configs: every config has its static or default value"
    print_configs(shown, args.json, _broker_entity, none_shown)
    return 0


def _broker_resources(args: argparse.Namespace, cluster: RaylogCluster) -> list[str]:
    """The broker resources named (--broker, --cluster-default), else the cluster default and
    every broker."""
    if args.cluster_default or args.broker is not None:
        return [_broker_resource(args)]
    return ["", *(str(b) for b in sorted(cluster.metadata(refresh=True).brokers))]


def _broker_resource(args: argparse.Namespace) -> str:
    """The broker resource's name: the broker id, or "" for the cluster default."""
    return "" if args.cluster_default else str(args.broker)


def _broker_entity(name: str) -> str:
    return f"broker {name}" if name else "the cluster default (every broker)"


def _brokers_alter_configs(args: argparse.Namespace) -> int:
    set_keys = dict(pair for pairs in args.add_config for pair in pairs)
    deleted = [key for keys in args.delete_config for key in keys]
    changes = alter_changes(set_keys, deleted, "--add-config")
    name = _broker_resource(args)
    with connected(args) as cluster:
        raylog.Admin(cluster).incremental_alter_configs([ConfigResource(ConfigResourceType.BROKER, name, changes)])
    back_to = "the cluster default, else the static or built-in value" if name else "the static or built-in value"
    print(f"altered {_broker_entity(name)}: {altered(set_keys, deleted, back_to)}; live replicas apply it now")
    return 0


def add_commands(commands: Any) -> None:
    brokers = commands.add_parser(
        "brokers", help="describe and alter dynamic broker configs (kafka-configs.sh --entity-type brokers)"
    )
    actions = brokers.add_subparsers(dest="action", required=True)
    describe = command(actions, "describe-configs", _brokers_describe_configs, "broker configs and their sources")
    _broker_entity_arguments(describe, required=False)
    describe.add_argument("--all", action="store_true", help="every config, static and defaults too (default: dynamic)")
    describe.add_argument("--json", action="store_true", help="machine-readable output")
    alter = command(actions, "alter-configs", _brokers_alter_configs, "set or delete dynamic broker configs (live)")
    _broker_entity_arguments(alter, required=True)
    alter.add_argument(
        "--add-config",
        type=config_pairs,
        nargs="+",
        action="extend",
        default=[],
        metavar="K=V,...",
        help="set these, e.g. log.retention.ms=86400000,log.cleanup.policy=[delete,compact]",
    )
    alter.add_argument(
        "--delete-config",
        type=config_names,
        nargs="+",
        action="extend",
        default=[],
        metavar="K,...",
        help="delete these (back to the cluster default, static or built-in value)",
    )


def _broker_entity_arguments(parser: argparse.ArgumentParser, required: bool) -> None:
    entity = parser.add_mutually_exclusive_group(required=required)
    entity.add_argument("--broker", type=non_negative_int, metavar="ID", help="this broker's own configs")
    entity.add_argument(
        "--cluster-default", action="store_true", help="the cluster-wide default of every broker (Kafka's <default>)"
    )
