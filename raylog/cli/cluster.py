"""``raylog start``, ``stop`` and ``status``: a raylog cluster's life and health.

raylog start [--address A] [--data-dir D] [--num-brokers N]
             [--num-cpus C] [--object-store-memory B] [--ray-port P]
             [--kafka-port P] [--kafka-host H] [--config K=V ...]
        start raylog. With an address ("auto" or a Ray address) it joins that Ray cluster
        (brokers are its nodes); without one it reuses the local Ray head an earlier
        ``raylog start`` launched, or launches one (``ray start --head``), and puts
        N brokers on it with data under D. raylog's actors are detached: they outlive it.
        --kafka-port runs a PLAINTEXT Kafka listener on each broker; --config gives any
        cluster setting (listeners=SSL://:9093 ssl.keystore.location=... authorizer=acl)
raylog stop [--ray]
        stop raylog's actors (data stays on disk); ``--ray`` also runs ``ray stop`` for
        the local Ray head ``raylog start`` launched (never for any other Ray cluster)
raylog status [--json]
        brokers (id, node, data dir, live), the controller, and per topic how many
        partitions are online, offline (no live leader) and under-replicated (fewer in
        sync than assigned); the exit code tells the health (see below)

Exit codes of ``status``: 3 some partition is under-replicated, every one online; 4 some
partition is offline.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from typing import Any

from raylog.cli.arguments import command, pairs_argument, port, positive_int
from raylog.cli.connection import ClusterNotRunningError, connected, head_file, reachable, read_head
from raylog.cli.output import table
from raylog.cli.topics import is_offline, is_under_replicated, topic_json
from raylog.common.names import NAMESPACE, controller_name
from raylog.errors import InvalidConfigError, RaylogError

#: A local head's object store: raylog's batches pass through it briefly.
DEFAULT_OBJECT_STORE_BYTES = 512 * 1024 * 1024
#: ``raylog status`` exit codes: a partition is under-replicated (all online) / offline.
EXIT_UNDER_REPLICATED = 3
EXIT_OFFLINE = 4


class RayCommandError(RaylogError):
    """``ray start`` or ``ray stop`` failed."""


def _ray_command(*args: str) -> str:
    """Run the venv's ``ray`` (next to this Python); its output.

    Raises:
        RayCommandError: it failed.
    """
    executable = os.path.join(os.path.dirname(sys.executable), "ray")
    result = subprocess.run([executable, *args], capture_output=True, text=True)
    if result.returncode != 0:
        lines = (result.stderr or result.stdout).strip().splitlines() or ["no output"]
        raise RayCommandError(f"`ray {' '.join(args)}` failed (exit {result.returncode}): {lines[-1]}")
    return result.stdout


def _launch_head(args: argparse.Namespace) -> dict:
    """``ray start --head`` sized for a laptop, recorded for later commands."""
    import ray.util

    _ray_command(
        "start",
        "--head",
        f"--port={args.ray_port}",
        f"--num-cpus={args.num_cpus}",
        f"--object-store-memory={args.object_store_memory}",
        "--include-dashboard=false",
        "--disable-usage-stats",
    )
    head = {"address": f"{ray.util.get_node_ip_address()}:{args.ray_port}", "started_at": time.time()}
    os.makedirs(os.path.dirname(head_file()), exist_ok=True)
    with open(head_file(), "w", encoding="utf-8") as f:
        json.dump(head, f)
    return head


def _needs_head(args: argparse.Namespace) -> bool:
    """No address, no RAY_ADDRESS, no Ray in this process, no live head of ours."""
    import ray

    if args.address or os.environ.get("RAY_ADDRESS") or ray.is_initialized():
        return False
    head = read_head()
    return head is None or not reachable(head["address"])


def _start(args: argparse.Namespace) -> int:
    if _needs_head(args):
        print(f"started a local Ray head at {_launch_head(args)['address']} (ray start --head)")
    with connected(args, create=True) as cluster:
        metadata = cluster.metadata(refresh=True)
    print(f"raylog cluster {args.cluster_name!r} is running with {len(metadata.brokers)} broker(s):")
    # A listener's name is shown when there are several (one is simply "kafka host:port").
    named = len(metadata.listener_names) > 1
    for b in sorted(metadata.brokers.values(), key=lambda b: b.broker_id):
        endpoints = metadata.listener_endpoints.get(b.broker_id, {}).items()
        listeners = "".join(f"  kafka {name + ' ' if named else ''}{h}:{p}" for name, (h, p) in endpoints)
        print(f"  broker {b.broker_id}  node {b.node_id}  data {b.data_dir}{listeners}")
    if metadata.listener_endpoints:
        for name in metadata.listener_names:
            servers = ",".join(f"{h}:{p}" for h, p in metadata.addresses(name).values())
            print(f"Kafka clients connect with bootstrap.servers={servers}{f' (listener {name})' if named else ''}")
    elif args.kafka_port is not None:
        raise InvalidConfigError(
            f"raylog cluster {args.cluster_name!r} was already running without Kafka listeners: "
            f"stop it (`raylog stop --cluster-name {args.cluster_name}`) and start it again with --kafka-port"
        )
    stop = f"raylog stop --cluster-name {args.cluster_name}"
    print(f"stop it with `{stop}` (its data stays on disk)")
    if not args.address and read_head():
        print(f"stop the local Ray head too with `{stop} --ray`")
    return 0


def _stop(args: argparse.Namespace) -> int:
    try:
        with connected(args) as cluster:
            cluster.shutdown()  # RaylogCluster(started_ray=False): leaves Ray running
        print(f"stopped raylog cluster {args.cluster_name!r} (its data stays on disk)")
    except ClusterNotRunningError as exc:
        if not args.ray:
            raise
        print(f"raylog: {exc}", file=sys.stderr)
    if args.ray:
        _stop_head()
    return 0


def _stop_head() -> None:
    head = read_head()
    if head is None:
        raise ClusterNotRunningError("no local Ray head launched by `raylog start`: not running `ray stop`")
    _ray_command("stop")
    os.remove(head_file())
    print(f"stopped the local Ray head at {head['address']} (ray stop)")


def _status(args: argparse.Namespace) -> int:
    """Exit code 0 when every partition is online and fully in sync, else
    EXIT_UNDER_REPLICATED or EXIT_OFFLINE (scripts check health by it)."""
    import ray

    with connected(args) as cluster:
        metadata = cluster.metadata(refresh=True)
        address = ray.get_runtime_context().gcs_address
    topics = [topic_json(metadata.topics[name]) for name in sorted(metadata.topics)]
    offline = [f"{t['name']}-{p['partition']}" for t in topics for p in t["partitions"] if is_offline(p, metadata.live)]
    under = [
        f"{t['name']}-{p['partition']}"
        for t in topics
        for p in t["partitions"]
        if not is_offline(p, metadata.live) and is_under_replicated(p)
    ]
    lost = [f"{tp.topic}-{tp.partition}" for tp in metadata.lost_partitions]
    report = {
        "cluster_name": args.cluster_name,
        "cluster_id": metadata.cluster_id,
        "ray_address": address,
        "controller": {"name": controller_name(args.cluster_name), "namespace": NAMESPACE},
        "brokers": [
            {**dataclasses.asdict(metadata.brokers[b]), "live": b in metadata.live} for b in sorted(metadata.brokers)
        ],
        "topics": [_topic_health(t, metadata.live) for t in topics],
        "offline_partitions": offline,
        "under_replicated_partitions": under,
        "lost_partitions": lost,
        "refused_brokers": dict(metadata.refused_brokers),
        "healthy": not (offline or under or metadata.refused_brokers),
    }
    print(json.dumps(report, indent=2) if args.json else _status_text(report))
    return EXIT_OFFLINE if offline else EXIT_UNDER_REPLICATED if under else 0


def _topic_health(topic: dict, live: set[int]) -> dict:
    partitions = topic["partitions"]
    offline = sum(is_offline(p, live) for p in partitions)
    return {
        "name": topic["name"],
        "partition_count": len(partitions),
        "online": len(partitions) - offline,
        "offline": offline,
        "under_replicated": sum(not is_offline(p, live) and is_under_replicated(p) for p in partitions),
    }


def _status_text(report: dict) -> str:
    brokers = [("BROKER", "NODE", "DATA-DIR", "LIVE")] + [
        (str(b["broker_id"]), b["node_id"], b["data_dir"], "yes" if b["live"] else "NO") for b in report["brokers"]
    ]
    topics = [("TOPIC", "PARTITIONS", "ONLINE", "OFFLINE", "UNDER-REPLICATED")] + [
        (t["name"], str(t["partition_count"]), str(t["online"]), str(t["offline"]), str(t["under_replicated"]))
        for t in report["topics"]
    ]
    lines = [
        f"raylog cluster {report['cluster_name']!r} (id {report['cluster_id']}) on Ray at {report['ray_address']}",
        f"controller: {report['controller']['name']} (namespace {report['controller']['namespace']})",
        "",
        table(brokers),
        "",
        table(topics) if report["topics"] else "no topics",
        "",
    ]
    offline, under = report["offline_partitions"], report["under_replicated_partitions"]
    lost = report["lost_partitions"]
    for node_id, why in sorted(report["refused_brokers"].items()):
        lines.append(f"health: REFUSED: node {node_id} is not a broker of this cluster: {why}")
    if lost:
        lines.append(
            f"health: LOST: {len(lost)} partition(s) without any in-sync replica ({_some(lost)}): their brokers came "
            "back with new log directories (wiped or replaced disks), so their records are gone; delete them, or "
            "bring them back with what is left: raylog elect-leaders --election-type unclean TOPIC (or "
            "unclean.leader.election.enable on their topics)"
        )
    if offline:
        lines.append(
            f"health: OFFLINE: {len(offline)} partition(s) without a live leader ({_some(offline)}); "
            "see `raylog topics describe --unavailable-partitions`"
        )
    if under:
        lines.append(
            f"health: DEGRADED: {len(under)} partition(s) under-replicated ({_some(under)}); "
            "see `raylog topics describe --under-replicated-partitions`"
        )
    if report["healthy"]:
        lines.append("health: ok: every partition is online and fully in sync")
    return "\n".join(lines)


def _some(names: list[str], shown: int = 10) -> str:
    more = f", ... ({len(names) - shown} more)" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def add_commands(commands: Any) -> None:
    start = command(commands, "start", _start, "start raylog (and, without --address, a local Ray head)")
    start.add_argument("--data-dir", help="where brokers keep their logs (default $RAYLOG_DATA_DIR or /tmp/raylog)")
    start.add_argument("--num-brokers", type=positive_int, help="brokers on the local head (default 1)")
    start.add_argument("--num-cpus", type=positive_int, default=os.cpu_count() or 1, help="CPUs of a local head")
    start.add_argument(
        "--object-store-memory",
        type=positive_int,
        default=DEFAULT_OBJECT_STORE_BYTES,
        help="object store bytes of a local head",
    )
    start.add_argument("--ray-port", type=positive_int, default=6379, help="GCS port of a local head")
    start.add_argument(
        "--kafka-port",
        type=port,
        help="run a Kafka protocol listener on each broker (brokers sharing a node take this port and the next "
        "ones; 0: any free port), so that Kafka clients (librdkafka, kafka-python, kcat...) connect",
    )
    start.add_argument(
        "--kafka-host",
        default="",
        help="the address Kafka listeners bind and advertise (default: the loopback, 127.0.0.1; 0.0.0.0: every "
        "interface, the node's address advertised)",
    )
    pairs_argument(
        start,
        "--config",
        "cluster settings by Kafka name (docs/configuration.md), e.g. listeners=SSL://:9093 "
        "ssl.keystore.location=/etc/raylog/broker.pem authorizer=acl",
    )
    stop = command(commands, "stop", _stop, "stop raylog's actors (data stays on disk)")
    stop.add_argument("--ray", action="store_true", help="also `ray stop` the local head `raylog start` launched")
    status = command(commands, "status", _status, "brokers, controller, topics, leaders and ISR")
    status.add_argument("--json", action="store_true", help="machine-readable output")
