"""``raylog topics``, as Kafka's kafka-topics.sh (and kafka-configs.sh for a topic's configs).

raylog topics create NAME [--partitions N] [--replication-factor R] [--config k=v ...]
raylog topics list [--json]
raylog topics describe [NAME ...] [--under-replicated-partitions] [--unavailable-partitions] [--json]
        as kafka-topics --describe: leader, epoch, replicas and ISR of each partition and
        the topic's config overrides; a filter prints only the partitions it names; a tiered
        topic's partitions also show their leaders' log start and local log start, the highest
        offset in the remote tier and the bytes in each tier
raylog topics describe-configs NAME ... [--all] [--json]
        as kafka-configs --describe: a topic's config overrides (--all: every property),
        each with its source: "topic", "dynamic_default_broker" (a cluster-wide broker
        default, see brokers alter-configs) or "default"
raylog topics alter NAME [--config k=v ...] [--delete-config k ...]
        set config properties or delete overrides (back to the default); the topic's live
        replicas apply the change without a restart
raylog topics add-partitions NAME --partitions N
        grow a topic to N partitions (never fewer); keys then hash over N partitions
raylog topics delete NAME ...
raylog topics sync-iceberg NAME [--catalog k=v ...] [--table NAMESPACE.NAME] [--json]
        register a topic's Parquet history (remote.storage.history.enable) in an Iceberg table
        (default raylog.NAME) and drop the files retention deleted; run it again at will.
        --catalog: pyiceberg catalog properties, e.g. type=sql uri=sqlite:////data/iceberg.db
        (default, for a file:// store: an SQL catalog in <store>/iceberg/catalog.db). Needs
        the iceberg extra: pip install 'raylog[iceberg]'
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import raylog
from raylog.cli.arguments import UsageError, command, pairs_argument, positive_int
from raylog.cli.connection import connected
from raylog.cli.output import Progress, ids_text, table
from raylog.errors import RaylogError
from raylog.types import TopicPartition

if TYPE_CHECKING:
    from raylog.clients.cluster import RaylogCluster

#: Bound on each call asking a tiered partition's leader what it holds in each tier.
TIERS_TIMEOUT_S = 10.0


def _topics_create(args: argparse.Namespace) -> int:
    new = raylog.NewTopic(args.name, args.partitions, args.replication_factor, dict(args.config))
    with connected(args) as cluster:
        admin = raylog.Admin(cluster)
        admin.create_topics([new])
        print(
            f"created topic {args.name!r}: {args.partitions} partition(s), replication factor {args.replication_factor}"
        )
        if args.wait_ms:
            _await_leaders(admin, [args.name], args.wait_ms)
    return 0


def _await_leaders(admin: Any, topics: list[str], timeout_ms: int) -> None:
    """Wait until every partition of ``topics`` has a running leader, with a progress line,
    then say how long it took.

    Raises:
        RequestTimedOutError: some have none after ``timeout_ms`` (their replicas go on starting).
    """
    progress = Progress()
    started = time.monotonic()
    counts = [0, 0]

    def show(led: int, total: int) -> None:
        counts[:] = [led, total]
        progress.show(f"starting replicas: {led}/{total} partitions have a leader")

    try:
        admin.await_leaders(topics, timeout_ms, progress=show)
    finally:
        progress.clear()
    print(f"every partition has a leader ({counts[1]} in {time.monotonic() - started:.1f} s)")


def _topics_list(args: argparse.Namespace) -> int:
    with connected(args) as cluster:
        names = raylog.Admin(cluster).list_topics()
    print(json.dumps(names) if args.json else "\n".join(names))
    return 0


def _topics_describe(args: argparse.Namespace) -> int:
    """Like kafka-topics --describe; a filter keeps only the partitions it names (and, as
    in Kafka, drops the topic lines)."""
    with connected(args) as cluster:
        admin = raylog.Admin(cluster)
        described = admin.describe_topics(args.names or None)
        configs = admin.describe_configs([t.name for t in described])
        live = cluster.metadata().live
        topics = [
            _with_tiers(
                cluster,
                dict(
                    topic_json(t),
                    config_overrides={k: e.value for k, e in configs[t.name].items() if e.source == "topic"},
                ),
            )
            for t in described
        ]
    filtered = args.under_replicated_partitions or args.unavailable_partitions
    if filtered:
        topics = [dict(t, partitions=[p for p in t["partitions"] if _wanted(p, args, live)]) for t in topics]
        topics = [t for t in topics if t["partitions"]]
    if args.json:
        print(json.dumps(topics, indent=2))
    elif topics:
        print("\n".join(_describe_text(t, with_topic_line=not filtered) for t in topics))
    return 0


def _wanted(partition: dict, args: argparse.Namespace, live: set[int]) -> bool:
    return (args.under_replicated_partitions and is_under_replicated(partition)) or (
        args.unavailable_partitions and is_offline(partition, live)
    )


def _describe_text(t: dict, with_topic_line: bool = True) -> str:
    """Like kafka-topics --describe (its Configs: the topic's overrides)."""
    configs = ",".join(f"{k}={v}" for k, v in sorted(t["config_overrides"].items()))
    replication = len(t["partitions"][0]["replicas"]) if t["partitions"] else 0
    lines = []
    if with_topic_line:
        lines.append(
            f"Topic: {t['name']}\tTopicId: {t['topic_id']}\tPartitionCount: {len(t['partitions'])}\t"
            f"ReplicationFactor: {replication}\tConfigs: {configs}"
        )
    lines += [
        f"\tTopic: {t['name']}\tPartition: {p['partition']}\tLeader: {_leader(p)}\tEpoch: {p['leader_epoch']}\t"
        f"Replicas: {ids_text(p['replicas'])}\tIsr: {ids_text(p['isr'])}{_tiers_text(p.get('tiers'))}"
        for p in t["partitions"]
    ]
    return "\n".join(lines)


def _with_tiers(cluster: RaylogCluster, topic: dict) -> dict:
    """``topic`` (described), each partition of a tiered topic with what its leader holds in
    each tier under ``tiers`` (None where the leader did not answer)."""
    if topic["config"].get("remote.storage.enable") != "true":
        return topic
    from raylog.transport import call  # (Ray: only for tiered topics)

    handles = call(cluster.controller.replica_handles.remote(topic["name"], 0), TIERS_TIMEOUT_S)
    for p in topic["partitions"]:
        handle = handles.get((p["partition"], p["leader"]))
        try:
            state = call(handle.state.remote(), TIERS_TIMEOUT_S) if handle is not None else None
        except RaylogError:
            state = None
        p["tiers"] = (
            None
            if state is None
            else {
                "log_start_offset": state["log_start_offset"],
                "local_log_start_offset": state["local_log_start_offset"],
                "highest_remote_offset": state["highest_remote_offset"],
                "local_bytes": state["size_bytes"],
                "remote_bytes": (state["tiering"] or {}).get("remote_size_bytes", 0),
            }
        )
    return topic


def _tiers_text(tiers: dict | None) -> str:
    if tiers is None:
        return ""
    return (
        f"\tLogStartOffset: {tiers['log_start_offset']}\tLocalLogStartOffset: {tiers['local_log_start_offset']}"
        f"\tHighestTieredOffset: {tiers['highest_remote_offset']}\tLocalBytes: {tiers['local_bytes']}"
        f"\tRemoteBytes: {tiers['remote_bytes']}"
    )


def _topics_sync_iceberg(args: argparse.Namespace) -> int:
    """Bring the topic's Iceberg table up to date with its history (see
    :func:`raylog.clients.history_table.sync_history_table`)."""
    from raylog.clients.history_table import sync_history_table

    with connected(args) as cluster:
        done = sync_history_table(cluster, args.name, dict(args.catalog) or None, table=args.table)
    if args.json:
        print(json.dumps(dataclasses.asdict(done)))
    else:
        print(f"{'.'.join(done.table)}: {done.added} files added, {done.removed} dropped, {done.files} in the table")
    return 0


def _topics_describe_configs(args: argparse.Namespace) -> int:
    """Like kafka-configs --describe: overrides only unless --all."""
    with connected(args) as cluster:
        described = raylog.Admin(cluster).describe_configs(args.names)
    shown = {name: shown_configs(entries, args.all, "topic") for name, entries in described.items()}
    print_configs(shown, args.json, lambda name: f"topic {name}", "no overrides: every property has its default")
    return 0


def shown_configs(entries: dict[str, Any], every: bool, source: str) -> dict[str, Any]:
    """The described configs a describe-configs prints: those of ``source`` unless ``every``."""
    return {k: e for k, e in entries.items() if every or e.source == source}


def print_configs(
    shown: dict[str, dict[str, Any]], as_json: bool, entity: Callable[[str], str], none_shown: str
) -> None:
    """Described configs per resource name: as JSON ``{name: {config: {"value", "source"}}}``,
    or a NAME VALUE SOURCE table under "Configs for <entity(name)>:" (``none_shown`` when
    empty)."""
    if as_json:
        print(json.dumps({n: {k: e._asdict() for k, e in es.items()} for n, es in shown.items()}, indent=2))
        return
    for name, entries in shown.items():
        print(f"Configs for {entity(name)}:")
        if entries:
            rows = [("NAME", "VALUE", "SOURCE"), *((k, e.value, e.source) for k, e in entries.items())]
            print("\n".join(f"  {line}" for line in table(rows).splitlines()))
        else:
            print(f"  {none_shown} (--all lists them)")


def _topics_alter(args: argparse.Namespace) -> int:
    set_keys = dict(args.config)
    changes = alter_changes(set_keys, args.delete_config, "--config")
    with connected(args) as cluster:
        raylog.Admin(cluster).incremental_alter_configs({args.name: changes})
    done = altered(set_keys, args.delete_config, "the default")
    print(f"altered topic {args.name!r}: {done}; its replicas apply it now")
    return 0


def alter_changes(set_keys: dict[str, str], deleted: list[str], set_flag: str) -> dict[str, str | None]:
    """An alter's changes: each K=V set, each deleted K None.

    Raises:
        UsageError: nothing to alter, or a config both set and deleted.
    """
    if not set_keys and not deleted:
        raise UsageError(f"nothing to alter: give {set_flag} K=V and/or --delete-config K")
    both = sorted(set(set_keys) & set(deleted))
    if both:
        raise UsageError(f"{', '.join(both)}: both set and deleted")
    return {**set_keys, **dict.fromkeys(deleted)}


def altered(set_keys: dict[str, str], deleted: list[str], back_to: str) -> str:
    """What an alter did, for its output line."""
    done = [f"set {', '.join(f'{k}={v}' for k, v in set_keys.items())}"] if set_keys else []
    done += [f"deleted {', '.join(deleted)} (back to {back_to})"] if deleted else []
    return "; ".join(done)


def _topics_add_partitions(args: argparse.Namespace) -> int:
    with connected(args) as cluster:
        admin = raylog.Admin(cluster)
        admin.create_partitions({args.name: args.partitions})
        print(f"topic {args.name!r} now has {args.partitions} partitions")
        print(
            f"note: keys now hash over {args.partitions} partitions, so a key's new records may go to another "
            "partition than its old ones (per-key order holds only within a partition)",
            file=sys.stderr,
        )
        if args.wait_ms:
            _await_leaders(admin, [args.name], args.wait_ms)
    return 0


def _topics_delete(args: argparse.Namespace) -> int:
    with connected(args) as cluster:
        raylog.Admin(cluster).delete_topics(args.names)
    print(f"deleted {', '.join(map(repr, args.names))}")
    return 0


def topic_json(topic: Any) -> dict:
    partitions = [dataclasses.asdict(p) for p in topic.partitions]
    for p in partitions:
        del p["topic"]
    return {"name": topic.name, "topic_id": topic.topic_id, "config": dict(topic.config), "partitions": partitions}


def is_offline(partition: dict, live: set[int]) -> bool:
    """No live leader (Kafka's unavailable partition)."""
    return partition["leader"] not in live


def is_under_replicated(partition: dict) -> bool:
    """Fewer replicas in sync than assigned (Kafka's under-replicated partition)."""
    return len(partition["isr"]) < len(partition["replicas"])


def _leader(partition: dict) -> str:
    return str(partition["leader"]) if partition["leader"] >= 0 else "none"


def partitions_of(cluster: RaylogCluster, topic: str, partition: int | None) -> list[TopicPartition]:
    """``partition`` of ``topic``, or every one of its partitions when None."""
    if partition is not None:
        return [TopicPartition(topic, partition)]
    return [TopicPartition(topic, p) for p in range(cluster.metadata(refresh=True).num_partitions(topic))]


def add_commands(commands: Any) -> None:
    topics = commands.add_parser("topics", help="create, list, describe, alter, grow and delete topics")
    actions = topics.add_subparsers(dest="action", required=True)
    create = command(actions, "create", _topics_create, "create a topic")
    create.add_argument("name")
    create.add_argument("--partitions", type=int, default=1)
    create.add_argument("--replication-factor", type=int, default=1)
    create.add_argument(
        "--wait-ms",
        type=int,
        default=300_000,
        help="wait this long for every partition to have a leader, showing progress (0: return once created)",
    )
    pairs_argument(create, "--config", "topic configs by Kafka name, e.g. retention.ms=60000")
    listing = command(actions, "list", _topics_list, "list topic names")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    describe = command(actions, "describe", _topics_describe, "partitions (leader, epoch, replicas, ISR), config")
    describe.add_argument("names", nargs="*", metavar="NAME", help="default: every topic")
    describe.add_argument(
        "--under-replicated-partitions", action="store_true", help="only partitions with fewer replicas in sync"
    )
    describe.add_argument("--unavailable-partitions", action="store_true", help="only partitions without a live leader")
    describe.add_argument("--json", action="store_true", help="machine-readable output")
    configs = command(actions, "describe-configs", _topics_describe_configs, "topic configs and where they come from")
    configs.add_argument("names", nargs="+", metavar="NAME")
    configs.add_argument("--all", action="store_true", help="every property, defaults too (default: overrides)")
    configs.add_argument("--json", action="store_true", help="machine-readable output")
    alter = command(actions, "alter", _topics_alter, "set or delete topic configs (applied live)")
    alter.add_argument("name")
    pairs_argument(alter, "--config", "set these, e.g. retention.ms=60000")
    alter.add_argument(
        "--delete-config", nargs="+", action="extend", default=[], metavar="K", help="back to the default"
    )
    grow = command(actions, "add-partitions", _topics_add_partitions, "grow a topic's partition count")
    grow.add_argument("name")
    grow.add_argument("--partitions", type=positive_int, required=True, help="the new total count")
    grow.add_argument(
        "--wait-ms",
        type=int,
        default=300_000,
        help="wait this long for every partition to have a leader, showing progress (0: return once added)",
    )
    iceberg = command(actions, "sync-iceberg", _topics_sync_iceberg, "register a topic's history in an Iceberg table")
    iceberg.add_argument("name")
    pairs_argument(
        iceberg,
        "--catalog",
        "pyiceberg catalog properties, e.g. type=sql uri=sqlite:////data/iceberg.db (default: <store>/iceberg)",
    )
    iceberg.add_argument("--table", help="NAMESPACE.NAME (default: raylog.<topic>)")
    iceberg.add_argument("--json", action="store_true", help="machine-readable output")
    delete = command(actions, "delete", _topics_delete, "delete topics and their data")
    delete.add_argument("names", nargs="+", metavar="NAME")
