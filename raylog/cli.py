"""The ``raylog`` command.

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
raylog topics create NAME [--partitions N] [--replication-factor R] [--config k=v ...]
raylog topics list [--json]
raylog topics describe [NAME ...] [--under-replicated-partitions] [--unavailable-partitions] [--json]
        as kafka-topics --describe: leader, epoch, replicas and ISR of each partition and
        the topic's config overrides; a filter prints only the partitions it names
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
raylog reassign-partitions start TOPIC --partitions 0,1 --replicas 2,0,1 [--wait [--timeout-ms T]]
        move partitions to a new replica set (or change their replication factor); with
        --wait, until every moved partition is in sync on its new replicas
raylog reassign-partitions list [--json]      reassignments under way
raylog elect-leaders [TOPIC ...]              leadership back to preferred replicas (or --election-type unclean)
raylog produce TOPIC [--format text|json] [--key-separator SEP] [--acks all|1|0] [--compression C]
               [--partition P]
        one record per stdin line; a summary to stderr. Text: the key before the first SEP.
        JSON: an object with "key", "value", "headers" ({name: value} or [[name, value],
        ...]) and "timestamp_ms", each optional (a key or value that is not a string is
        sent as its JSON text; "topic", "partition" and "offset", which consume --format
        json prints, are ignored); blank lines are skipped
raylog consume TOPIC [--from-beginning | --offset N --partition P] [--max-messages N]
               [--timeout-ms T] [--print-offsets] [--print-key] [--key-separator SEP] [--group G]
               [--print-timestamp] [--format text|json]
        values one per line; stops after N records or T ms without records; with --group,
        a member of consumer group G (its partitions, from its committed offsets, committing).
        --print-timestamp puts the timestamp (ms) first; --format json prints one object
        per record instead (topic, partition, offset, timestamp_ms, key, value, headers)
raylog groups list [--json]                   consumer groups and their states
raylog groups describe GROUP ... [--json]     members, committed offset, log end offset, lag
raylog groups reset-offsets GROUP --topic T [--partitions 0,1]
        (--to-earliest | --to-latest | --to-timestamp-ms T | --shift-by N) [--execute]
        move an idle group's committed offsets (a dry run unless --execute)
raylog groups delete GROUP ...                delete idle groups and their offsets
raylog transactions list [--json]             transactional ids, their states and producers
raylog transactions describe ID ... [--json]  state, producer id and epoch, open partitions
raylog transactions find-hanging --topic T [--partition P] [--max-transaction-timeout-ms MS] [--json]
        transactions open in a partition that no coordinator will end (they hold its
        read_committed readers): open longer than MS (default 15 minutes, the longest
        transaction timeout) and ongoing at no coordinator; as kafka-transactions.sh
raylog transactions abort --topic T --partition P (--producer-id ID --producer-epoch E
                          [--coordinator-epoch C] | --start-offset O)
        write an abort marker for a hanging transaction (found by find-hanging), so the
        partition's last stable offset moves on
raylog quotas alter (--client-id ID | --default) [--producer-byte-rate R] [--consumer-byte-rate R]
                    [--delete-producer-byte-rate] [--delete-consumer-byte-rate]
        as kafka-configs --alter --entity-type clients: set (bytes/s) or remove a client
        id's byte-rate quotas, or the default ones of every client id without its own;
        leaders apply them at once (each partition leader enforces them on its own)
raylog quotas describe [--json]               every client quota set
raylog acls add|remove (--allow-principal P | --deny-principal P)... [--allow-host H]...
                [--deny-host H]... [--operation OP]... (--topic T | --group G
                | --transactional-id T | --cluster)... [--resource-pattern-type literal|prefixed]
        as kafka-acls --add / --remove: an ACL for each resource, principal, host (default
        *) and operation (default All); remove deletes exactly those
raylog acls list [--topic T | --group G | --transactional-id T | --cluster]... [--principal P]
                 [--json]
        every ACL, or those on the resources or of the principal named
raylog users add NAME [--mechanism M]... [--iterations N]
        as kafka-configs --alter --add-config 'SCRAM-SHA-512=[password=...]' --entity-type
        users: the password read from stdin (never from the command line), salted here; a
        SCRAM credential per mechanism (default SCRAM-SHA-256 and SCRAM-SHA-512) with which
        Kafka clients authenticate on SASL listeners
raylog users remove NAME [--mechanism M]...
        delete the user's credentials (default: both mechanisms)
raylog users list [NAME]... [--json]
        each user's mechanisms and iterations (never a key)
raylog bench produce|consume|e2e [--topic T] [--num-records N] [--record-size B] [--partitions P]
             [--replication-factor R] [--acks all|1|0] [--batch-size B] [--linger-ms L]
             [--compression C] [--arrow] [--throughput R] [--timeout-ms T] [--json] [--sync]
        Kafka's perf tests: records/s, MB/s, acknowledgement and end-to-end latency
        percentiles (see raylog.bench); on a temporary topic unless --topic names one;
        a progress bar on stderr; --arrow uses send_arrow/poll_arrow; --sync (produce)
        sends one record at a time, each acknowledged before the next; --json: the report
        as JSON
raylog bench fuzz-wire [--frames N] [--seed S] [--connections C] [--max-duration-s D]
        request frames mutated from real Kafka clients' captured requests (a checkout's
        tests/unit/kafka/captures) sent to the cluster's first Kafka listener over loopback
        (see raylog.chaos.fuzz_wire): frames/s, answered / closed / held, the listener
        process's RSS before and after, records written before still readable. Exit code 1
        on an anomaly, a lost record or RSS growth above 256 MiB
raylog bench soak [--runs N] [--seed S] [--faults K,K] [--duration-s D] [--max-faults M]
                  [--acks all|1] [--min-insync-replicas N] [--unclean] [--partitions P]
                  [--transactions] [--overlap 1|2] [--producers N] [--consumers N]
                  [--kafka-producers N] [--kafka-consumers N] [--kafka-transactional N]
                  [--rate-per-s R] [--replica-lag-time-max-ms MS]
        seeded fault runs (Jepsen's Kafka workload, see raylog.chaos): starts its own Ray
        cluster of a head and three labelled broker nodes on this machine, then N runs with
        seeds S, S+1, ...: each a fresh topic, producers and consumer groups recording a
        history while a nemesis injects faults, everything healed, a final read and the
        checker; one line per run, a total at the end. Exit code 1 if a run found an anomaly
        that its configuration promises against (acks=all, min.insync.replicas >= 2, RF 3,
        unclean election off) or did not heal; --transactions adds a transactional producer
        (read_committed consumers then must never see an aborted or unfinished transaction)
        and kill-txn-coordinator faults; --overlap 2 leaves a paused replica, delayed calls
        or a full disk in effect while a second fault runs; --producers N idempotent
        producer clients instead of one, --consumers N group members instead of two;
        --kafka-producers, --kafka-consumers and --kafka-transactional N confluent-kafka
        clients through the brokers' Kafka listeners beside them; --rate-per-s R records a
        second per producer thread; --replica-lag-time-max-ms MS the topic's lag bound. A run
        also fails if a leader was demoted while no fault disturbed its process or node; its
        line gives throughput and p50/p99 send latency
raylog bench txn-copier [--records N] [--rounds R] [--txn-records T] [--records-per-s C]
        Kafka's transactional copier test (see raylog.chaos.txn_copier): starts its own Ray
        cluster as soak does, preloads N records (100,000) and copies them in transactions
        of T (1,000) at C records a second (800) while the copier is killed and replaced,
        an output leader's node is killed and the transaction coordinator is killed (as an
        actor and with its node), each R times (3); then the output read_committed must
        equal the input exactly, and a concurrent read_committed reader must never have
        read an aborted or unfinished transaction. Exit code 1 if a check failed
raylog dump-log DIR [--records] [--json]   print a log directory's segments and batches
                                           (Kafka's kafka-dump-log), verifying CRCs;
                                           read-only, exit code 1 if a batch is invalid

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
import collections
import contextlib
import dataclasses
import json
import logging
import math
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import raylog
from raylog.actors.names import NAMESPACE, controller_name
from raylog.coordination.acls import (
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
from raylog.coordination.quotas import QUOTA_KEYS
from raylog.coordination.scram import DEFAULT_ITERATIONS, MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS
from raylog.coordination.transactions import MAX_TRANSACTION_TIMEOUT_MS
from raylog.errors import (
    GroupIdNotFoundError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidRecordError,
    InvalidReplicationFactorError,
    KafkaTimeoutError,
    LeaderNotAvailableError,
    NonEmptyGroupError,
    NotEnoughReplicasError,
    RaylogError,
    UnknownTopicOrPartitionError,
)
from raylog.storage import compression, record_batch
from raylog.types import ConfigResource, ConfigResourceType, TopicPartition

if TYPE_CHECKING:
    from raylog.clients.cluster import RaylogCluster

#: Where ``raylog start`` records the local Ray head it launched (override: RAYLOG_CLI_STATE).
DEFAULT_HEAD_FILE = os.path.join(tempfile.gettempdir(), "raylog-cli", "ray-head.json")
#: A local head's object store: raylog's batches pass through it briefly.
DEFAULT_OBJECT_STORE_BYTES = 512 * 1024 * 1024
#: The longest single poll of ``consume`` (it checks --timeout-ms between polls).
CONSUME_POLL_MS = 500
#: ``raylog status`` exit codes: a partition is under-replicated (all online) / offline.
EXIT_UNDER_REPLICATED = 3
EXIT_OFFLINE = 4
#: How often a progress line is redrawn, and ``reassign-partitions --wait`` looks again.
PROGRESS_INTERVAL_S = 0.5
#: How long ``reassign-partitions start --wait`` waits by default.
REASSIGN_WAIT_MS = 600_000


class ClusterNotRunningError(RaylogError):
    """No Ray cluster to join, or no raylog cluster of that name on it."""


class RayCommandError(RaylogError):
    """``ray start`` or ``ray stop`` failed."""


class _UsageError(Exception):
    """Arguments argparse accepts but that do not go together (exit code 2)."""


# --- connecting -----------------------------------------------------------------------


@contextlib.contextmanager
def _connected(args: argparse.Namespace, create: bool = False) -> Iterator[RaylogCluster]:
    """The one way commands reach raylog: join Ray (unless this process already is in a Ray
    session), then attach to the cluster's controller, or with ``create`` start raylog.
    Leaves Ray only if it joined it; never shuts a Ray cluster down."""
    import ray

    joined = not ray.is_initialized()
    if joined:
        _join_ray(_address(args))
    try:
        yield _create(args) if create else _attach(args.cluster_name, _credentials(args))
    finally:
        if joined:
            ray.shutdown()


def _address(args: argparse.Namespace) -> str:
    """--address, else "auto" if RAY_ADDRESS is set or ``raylog start`` launched a local head
    that is still up ("auto" finds a local head and its auth token; its address would not)."""
    if args.address:
        return args.address
    if os.environ.get("RAY_ADDRESS"):
        return "auto"
    head = _read_head()
    if head is None:
        raise ClusterNotRunningError("no Ray cluster to connect to: run `raylog start` first (or pass --address)")
    if not _reachable(head["address"]):
        raise ClusterNotRunningError(f"the local Ray head at {head['address']} is gone: run `raylog start` again")
    return "auto"


def _join_ray(address: str) -> None:
    import ray

    if not _reachable(address):
        raise ClusterNotRunningError(f"no Ray cluster answers at {address}: run `raylog start` first")
    try:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
    except ConnectionError as exc:
        raise ClusterNotRunningError(f"{exc} (or run `raylog start` first)") from None


def _reachable(address: str, timeout_s: float = 2.0) -> bool:
    """Whether something listens at a ``host:port`` address (other forms: Ray decides)."""
    host, _, port = address.rpartition(":")
    if "://" in address or not host or not port.isdigit():
        return True
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout_s):
            return True
    except OSError:
        return False


#: The settings of a --command-config file (librdkafka's names) and the client settings they are.
_COMMAND_CONFIG = {
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
}
#: The user name and password of a ``sasl.jaas.config`` (the form Kafka's Java tools take).
_JAAS = re.compile(r'(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"')


def _credentials(args: argparse.Namespace) -> dict[str, str]:
    """Who the command acts as: the client settings of ``--command-config`` (a properties file,
    as Kafka's tools take: security.protocol, sasl.mechanism and sasl.username / sasl.password
    or a sasl.jaas.config); none without it (User:ANONYMOUS)."""
    path = getattr(args, "command_config", None)
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise _UsageError(f"--command-config: {exc}") from None
    settings: dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        match = re.match(r"([^=:\s]+)\s*[=:]\s*(.*)$", line)
        if match is None:
            raise _UsageError(f"--command-config {path}:{number}: not a key=value line")
        key, value = match.groups()
        if key == "sasl.jaas.config":
            found = dict(_JAAS.findall(value))
            settings.update({_COMMAND_CONFIG[f"sasl.{k}"]: v for k, v in found.items()})
        elif key in _COMMAND_CONFIG:
            settings[_COMMAND_CONFIG[key]] = value
        else:
            known = ", ".join([*_COMMAND_CONFIG, "sasl.jaas.config"])
            raise _UsageError(f"--command-config {path}:{number}: unknown setting {key!r} (known: {known})")
    return settings


def _attach(cluster_name: str, credentials: dict[str, str]) -> RaylogCluster:
    import ray

    from raylog.clients.cluster import RaylogCluster

    try:
        controller = ray.get_actor(controller_name(cluster_name), namespace=NAMESPACE)
    except ValueError:
        raise ClusterNotRunningError(
            f"no raylog cluster {cluster_name!r} on this Ray cluster: run `raylog start --cluster-name {cluster_name}`"
        ) from None
    cluster = RaylogCluster(cluster_name, controller, credentials=credentials)
    cluster.session().token()  # refused credentials fail here
    return cluster


def _create(args: argparse.Namespace) -> RaylogCluster:
    """Start raylog (or find it running). Joined by --address or RAY_ADDRESS, its brokers are
    the Ray cluster's nodes; on the local head of ``raylog start`` (or this process's own Ray)
    it is embedded: --num-brokers brokers on that node, logs under --data-dir."""
    address = args.address or ("auto" if os.environ.get("RAY_ADDRESS") else None)
    kafka_port = getattr(args, "kafka_port", None)
    config = dict(getattr(args, "config", None) or [])
    if kafka_port is not None:
        if "listeners" in config:
            raise _UsageError("give the listener either as --kafka-port / --kafka-host or as --config listeners=...")
        config["listeners"] = f"PLAINTEXT://{args.kafka_host}:{kafka_port}"
    return raylog.connect(
        address,
        data_dir=args.data_dir,
        num_brokers=args.num_brokers,
        cluster_name=args.cluster_name,
        config=config,
        **_credentials(args),
    )


# --- the local Ray head ------------------------------------------------------------------


def _head_file() -> str:
    return os.environ.get("RAYLOG_CLI_STATE") or DEFAULT_HEAD_FILE


def _read_head() -> dict | None:
    """The local Ray head ``raylog start`` launched, if it recorded one."""
    try:
        with open(_head_file(), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


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
    os.makedirs(os.path.dirname(_head_file()), exist_ok=True)
    with open(_head_file(), "w", encoding="utf-8") as f:
        json.dump(head, f)
    return head


def _needs_head(args: argparse.Namespace) -> bool:
    """No address, no RAY_ADDRESS, no Ray in this process, no live head of ours."""
    import ray

    if args.address or os.environ.get("RAY_ADDRESS") or ray.is_initialized():
        return False
    head = _read_head()
    return head is None or not _reachable(head["address"])


# --- start, stop, status -------------------------------------------------------------------


def _start(args: argparse.Namespace) -> int:
    if _needs_head(args):
        print(f"started a local Ray head at {_launch_head(args)['address']} (ray start --head)")
    with _connected(args, create=True) as cluster:
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
    if not args.address and _read_head():
        print(f"stop the local Ray head too with `{stop} --ray`")
    return 0


def _stop(args: argparse.Namespace) -> int:
    try:
        with _connected(args) as cluster:
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
    head = _read_head()
    if head is None:
        raise ClusterNotRunningError("no local Ray head launched by `raylog start`: not running `ray stop`")
    _ray_command("stop")
    os.remove(_head_file())
    print(f"stopped the local Ray head at {head['address']} (ray stop)")


def _status(args: argparse.Namespace) -> int:
    """Exit code 0 when every partition is online and fully in sync, else
    EXIT_UNDER_REPLICATED or EXIT_OFFLINE (scripts check health by it)."""
    import ray

    with _connected(args) as cluster:
        metadata = cluster.metadata(refresh=True)
        address = ray.get_runtime_context().gcs_address
    topics = [_topic_json(metadata.topics[name]) for name in sorted(metadata.topics)]
    offline = [f"{t['name']}-{p['partition']}" for t in topics for p in t["partitions"] if _offline(p, metadata.live)]
    under = [
        f"{t['name']}-{p['partition']}"
        for t in topics
        for p in t["partitions"]
        if not _offline(p, metadata.live) and _under_replicated(p)
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
    offline = sum(_offline(p, live) for p in partitions)
    return {
        "name": topic["name"],
        "partition_count": len(partitions),
        "online": len(partitions) - offline,
        "offline": offline,
        "under_replicated": sum(not _offline(p, live) and _under_replicated(p) for p in partitions),
    }


def _offline(partition: dict, live: set[int]) -> bool:
    """No live leader (Kafka's unavailable partition)."""
    return partition["leader"] not in live


def _under_replicated(partition: dict) -> bool:
    """Fewer replicas in sync than assigned (Kafka's under-replicated partition)."""
    return len(partition["isr"]) < len(partition["replicas"])


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
        _table(brokers),
        "",
        _table(topics) if report["topics"] else "no topics",
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


def _topic_json(topic: Any) -> dict:
    partitions = [dataclasses.asdict(p) for p in topic.partitions]
    for p in partitions:
        del p["topic"]
    return {"name": topic.name, "topic_id": topic.topic_id, "config": dict(topic.config), "partitions": partitions}


def _leader(partition: dict) -> str:
    return str(partition["leader"]) if partition["leader"] >= 0 else "none"


def _ids(ids: Any) -> str:
    return ",".join(map(str, ids)) or "-"


class _Progress:
    """A one-line status redrawn in place (carriage return) on ``stream`` at most every
    PROGRESS_INTERVAL_S, when ``stream`` is a terminal; nothing at all otherwise, so that
    logs and pipes stay clean."""

    def __init__(self, stream: Any = None, enabled: bool = True):
        self._stream = stream or sys.stderr
        self._on = enabled and self._stream.isatty()
        self._drawn_at = 0.0
        self._width = 0

    def show(self, text: str) -> None:
        now = time.monotonic()
        if not self._on or now - self._drawn_at < PROGRESS_INTERVAL_S:
            return
        self._drawn_at = now
        self._stream.write("\r" + text.ljust(self._width))
        self._stream.flush()
        self._width = len(text)

    def clear(self) -> None:
        """Erase the line (the summary that follows gets a clean line)."""
        if self._width:
            self._stream.write("\r" + " " * self._width + "\r")
            self._stream.flush()
            self._width = 0


# --- topics --------------------------------------------------------------------------------


def _topics_create(args: argparse.Namespace) -> int:
    new = raylog.NewTopic(args.name, args.partitions, args.replication_factor, dict(args.config))
    with _connected(args) as cluster:
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
    progress = _Progress()
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
    with _connected(args) as cluster:
        names = raylog.Admin(cluster).list_topics()
    print(json.dumps(names) if args.json else "\n".join(names))
    return 0


def _topics_describe(args: argparse.Namespace) -> int:
    """Like kafka-topics --describe; a filter keeps only the partitions it names (and, as
    in Kafka, drops the topic lines)."""
    with _connected(args) as cluster:
        admin = raylog.Admin(cluster)
        described = admin.describe_topics(args.names or None)
        configs = admin.describe_configs([t.name for t in described])
        live = cluster.metadata().live
    topics = [
        dict(_topic_json(t), config_overrides={k: e.value for k, e in configs[t.name].items() if e.source == "topic"})
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
    return (args.under_replicated_partitions and _under_replicated(partition)) or (
        args.unavailable_partitions and _offline(partition, live)
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
        f"Replicas: {_ids(p['replicas'])}\tIsr: {_ids(p['isr'])}"
        for p in t["partitions"]
    ]
    return "\n".join(lines)


def _topics_describe_configs(args: argparse.Namespace) -> int:
    """Like kafka-configs --describe: overrides only unless --all."""
    with _connected(args) as cluster:
        described = raylog.Admin(cluster).describe_configs(args.names)
    shown = {name: _shown(entries, args.all, "topic") for name, entries in described.items()}
    _print_configs(shown, args.json, lambda name: f"topic {name}", "no overrides: every property has its default")
    return 0


def _shown(entries: dict[str, Any], every: bool, source: str) -> dict[str, Any]:
    """The described configs a describe-configs prints: those of ``source`` unless ``every``."""
    return {k: e for k, e in entries.items() if every or e.source == source}


def _print_configs(
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
            print("\n".join(f"  {line}" for line in _table(rows).splitlines()))
        else:
            print(f"  {none_shown} (--all lists them)")


def _topics_alter(args: argparse.Namespace) -> int:
    set_keys = dict(args.config)
    changes = _alter_changes(set_keys, args.delete_config, "--config")
    with _connected(args) as cluster:
        raylog.Admin(cluster).incremental_alter_configs({args.name: changes})
    done = _altered(set_keys, args.delete_config, "the default")
    print(f"altered topic {args.name!r}: {done}; its replicas apply it now")
    return 0


def _alter_changes(set_keys: dict[str, str], deleted: list[str], set_flag: str) -> dict[str, str | None]:
    """An alter's changes: each K=V set, each deleted K None.

    Raises:
        _UsageError: nothing to alter, or a config both set and deleted.
    """
    if not set_keys and not deleted:
        raise _UsageError(f"nothing to alter: give {set_flag} K=V and/or --delete-config K")
    both = sorted(set(set_keys) & set(deleted))
    if both:
        raise _UsageError(f"{', '.join(both)}: both set and deleted")
    return {**set_keys, **dict.fromkeys(deleted)}


def _altered(set_keys: dict[str, str], deleted: list[str], back_to: str) -> str:
    """What an alter did, for its output line."""
    done = [f"set {', '.join(f'{k}={v}' for k, v in set_keys.items())}"] if set_keys else []
    done += [f"deleted {', '.join(deleted)} (back to {back_to})"] if deleted else []
    return "; ".join(done)


def _topics_add_partitions(args: argparse.Namespace) -> int:
    with _connected(args) as cluster:
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
    with _connected(args) as cluster:
        raylog.Admin(cluster).delete_topics(args.names)
    print(f"deleted {', '.join(map(repr, args.names))}")
    return 0


# --- brokers -------------------------------------------------------------------------------


def _brokers_describe_configs(args: argparse.Namespace) -> int:
    """Like kafka-configs --describe --entity-type brokers: the configs set on each resource
    itself (a broker's, or the cluster default's) unless --all."""
    with _connected(args) as cluster:
        names = _broker_resources(args, cluster)
        described = raylog.Admin(cluster).describe_configs(
            [ConfigResource(ConfigResourceType.BROKER, n) for n in names]
        )
    shown = {
        name: _shown(entries, args.all, "dynamic_broker" if name else "dynamic_default_broker")
        for (_, name), entries in described.items()
    }
    none_shown = "no dynamic configs: every config has its static or default value"
    _print_configs(shown, args.json, _broker_entity, none_shown)
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
    changes = _alter_changes(set_keys, deleted, "--add-config")
    name = _broker_resource(args)
    with _connected(args) as cluster:
        raylog.Admin(cluster).incremental_alter_configs([ConfigResource(ConfigResourceType.BROKER, name, changes)])
    back_to = "the cluster default, else the static or built-in value" if name else "the static or built-in value"
    print(f"altered {_broker_entity(name)}: {_altered(set_keys, deleted, back_to)}; live replicas apply it now")
    return 0


def _add_brokers(commands: Any) -> None:
    brokers = commands.add_parser(
        "brokers", help="describe and alter dynamic broker configs (kafka-configs.sh --entity-type brokers)"
    )
    actions = brokers.add_subparsers(dest="action", required=True)
    describe = _command(actions, "describe-configs", _brokers_describe_configs, "broker configs and their sources")
    _broker_entity_arguments(describe, required=False)
    describe.add_argument("--all", action="store_true", help="every config, static and defaults too (default: dynamic)")
    describe.add_argument("--json", action="store_true", help="machine-readable output")
    alter = _command(actions, "alter-configs", _brokers_alter_configs, "set or delete dynamic broker configs (live)")
    _broker_entity_arguments(alter, required=True)
    alter.add_argument(
        "--add-config",
        type=_config_pairs,
        nargs="+",
        action="extend",
        default=[],
        metavar="K=V,...",
        help="set these, e.g. log.retention.ms=86400000,log.cleanup.policy=[delete,compact]",
    )
    alter.add_argument(
        "--delete-config",
        type=_config_names,
        nargs="+",
        action="extend",
        default=[],
        metavar="K,...",
        help="delete these (back to the cluster default, static or built-in value)",
    )


def _broker_entity_arguments(parser: argparse.ArgumentParser, required: bool) -> None:
    entity = parser.add_mutually_exclusive_group(required=required)
    entity.add_argument("--broker", type=_non_negative_int, metavar="ID", help="this broker's own configs")
    entity.add_argument(
        "--cluster-default", action="store_true", help="the cluster-wide default of every broker (Kafka's <default>)"
    )


# --- produce and consume ---------------------------------------------------------------------


class _Tally:
    """Acknowledged records per partition, and failures, of a produce run."""

    def __init__(self) -> None:
        self.partitions: collections.Counter[int] = collections.Counter()
        self.errors: list[BaseException] = []

    def add(self, future: Any) -> None:
        error = future.exception()
        if error is None:
            self.partitions[future.result().partition] += 1
        else:
            self.errors.append(error)

    @property
    def acknowledged(self) -> int:
        return sum(self.partitions.values())

    def summary(self, topic: str) -> str:
        spread = ", ".join(f"{p}: {n}" for p, n in sorted(self.partitions.items())) or "none"
        failed = f"; {len(self.errors)} failed" if self.errors else ""
        return f"produced {self.acknowledged} records to {topic!r} (per partition {spread}){failed}"


def _produce(args: argparse.Namespace) -> int:
    if args.format == "json" and args.key_separator is not None:
        raise _UsageError("--key-separator is for --format text (a JSON line carries its key)")
    tally, pending = _Tally(), collections.deque()
    progress = _Progress(enabled=not sys.stdin.isatty())  # not over what a user types
    with _connected(args) as cluster:
        producer = raylog.Producer(cluster, acks=args.acks, compression=args.compression)
        try:
            for number, line in enumerate(sys.stdin, 1):
                line = line.rstrip("\r\n")
                if args.format == "json":
                    if not line.strip():
                        continue
                    fields = _json_line(line, number)
                else:
                    fields = _split_line(line, args.key_separator, number)
                pending.append(producer.send(args.topic, partition=args.partition, **fields))
                while pending and pending[0].done():
                    tally.add(pending.popleft())
                progress.show(f"read {number:,} lines, {tally.acknowledged:,} records acknowledged")
        finally:
            producer.close()
            progress.clear()
    for future in pending:
        tally.add(future)
    print(tally.summary(args.topic), file=sys.stderr)
    if tally.errors:
        raise tally.errors[0]
    return 0


def _split_line(line: str, separator: str | None, number: int) -> dict[str, Any]:
    """A text line's ``send`` arguments: value, and the key before ``separator`` if given."""
    if separator is None:
        return {"value": line.encode()}
    key, found, value = line.partition(separator)
    if not found:
        raise InvalidRecordError(f"line {number} has no key separator {separator!r}")
    return {"key": key.encode(), "value": value.encode()}


#: Fields a JSON line may carry, and those of ``consume --format json`` output it ignores.
_JSON_FIELDS = ("key", "value", "headers", "timestamp_ms")
_JSON_IGNORED = ("topic", "partition", "offset")


def _json_line(line: str, number: int) -> dict[str, Any]:
    """A JSON line's ``send`` arguments.

    Raises:
        InvalidRecordError: not a JSON object of the known fields, or a field of a wrong type.
    """
    try:
        record = json.loads(line)
    except ValueError as exc:
        raise InvalidRecordError(f"line {number} is not JSON: {exc}") from None
    if not isinstance(record, dict):
        raise InvalidRecordError(f"line {number}: expected a JSON object with {', '.join(_JSON_FIELDS)}")
    unknown = sorted(set(record) - {*_JSON_FIELDS, *_JSON_IGNORED})
    if unknown:
        raise InvalidRecordError(f"line {number}: unknown fields {unknown}; known: {', '.join(_JSON_FIELDS)}")
    headers = record.get("headers") or []
    if isinstance(headers, dict):
        headers = list(headers.items())
    if not all(isinstance(h, (list, tuple)) and len(h) == 2 and isinstance(h[0], str) for h in headers):
        raise InvalidRecordError(f'line {number}: "headers" must be {{name: value}} or [[name, value], ...]')
    timestamp_ms = record.get("timestamp_ms")
    if timestamp_ms is not None and (isinstance(timestamp_ms, bool) or not isinstance(timestamp_ms, int)):
        raise InvalidRecordError(f'line {number}: "timestamp_ms" must be an integer, got {timestamp_ms!r}')
    return {
        "key": _json_bytes(record.get("key")),
        "value": _json_bytes(record.get("value")),
        "headers": [(name, _json_bytes(value)) for name, value in headers] or None,
        "timestamp_ms": timestamp_ms,
    }


def _json_bytes(value: Any) -> bytes | None:
    """A string as UTF-8; null as None; anything else as its compact JSON text."""
    if value is None:
        return None
    return (value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))).encode()


def _consume(args: argparse.Namespace) -> int:
    if args.offset is not None and args.partition is None:
        raise _UsageError("--offset needs --partition")
    if args.format == "json" and (args.print_offsets or args.print_key or args.print_timestamp):
        raise _UsageError("--print-* are for --format text (json prints every field)")
    with _connected(args) as cluster:
        consumer = raylog.Consumer(
            cluster, group_id=args.group, auto_offset_reset="earliest" if args.from_beginning else "latest"
        )
        try:
            if args.group is not None and args.partition is None:
                consumer.subscribe([args.topic])  # share the topic with the group's other members
            else:
                _assign(consumer, cluster, args)
            count = _print_records(consumer, args)
        finally:
            consumer.close()
    print(f"consumed {count} records", file=sys.stderr)
    return 0


def _partitions_of(cluster: RaylogCluster, topic: str, partition: int | None) -> list[TopicPartition]:
    """``partition`` of ``topic``, or every one of its partitions when None."""
    if partition is not None:
        return [TopicPartition(topic, partition)]
    return [TopicPartition(topic, p) for p in range(cluster.metadata(refresh=True).num_partitions(topic))]


def _assign(consumer: Any, cluster: RaylogCluster, args: argparse.Namespace) -> None:
    partitions = _partitions_of(cluster, args.topic, args.partition)
    consumer.assign(partitions)
    if args.offset is not None:
        consumer.seek(partitions[0], args.offset)


def _print_records(consumer: Any, args: argparse.Namespace) -> int:
    """Print records until --max-messages or --timeout-ms without any; how many printed."""
    printed, idle_since = 0, time.monotonic()
    poll_ms = CONSUME_POLL_MS if args.timeout_ms is None else min(CONSUME_POLL_MS, args.timeout_ms)
    while args.max_messages is None or printed < args.max_messages:
        wanted = None if args.max_messages is None else args.max_messages - printed
        records = [r for rs in consumer.poll(timeout_ms=poll_ms, max_records=wanted).values() for r in rs]
        for record in records:
            print(_format(record, args))
        sys.stdout.flush()
        printed += len(records)
        if records:
            idle_since = time.monotonic()
        elif args.timeout_ms is not None and (time.monotonic() - idle_since) * 1000 >= args.timeout_ms:
            break
    return printed


def _format(record: Any, args: argparse.Namespace) -> str:
    if args.format == "json":
        return json.dumps(
            {
                "topic": record.topic,
                "partition": record.partition,
                "offset": record.offset,
                "timestamp_ms": record.timestamp_ms,
                "key": _json_text(record.key),
                "value": _json_text(record.value),
                "headers": [[name, _json_text(value)] for name, value in record.headers or []],
            }
        )
    timestamp = f"{record.timestamp_ms}\t" if args.print_timestamp else ""
    offsets = f"{record.partition}:{record.offset}\t" if args.print_offsets else ""
    key = f"{_console_text(record.key)}{args.key_separator}" if args.print_key else ""
    return f"{timestamp}{offsets}{key}{_console_text(record.value)}"


def _json_text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="backslashreplace")


def _console_text(data: bytes | None) -> str:
    return "null" if data is None else data.decode("utf-8", errors="backslashreplace")


# --- consumer groups -------------------------------------------------------------------------


def _groups_list(args: argparse.Namespace) -> int:
    with _connected(args) as cluster:
        groups = raylog.Admin(cluster).list_consumer_groups()
    if args.json:
        print(json.dumps([{"group_id": g, "state": state} for g, state in groups], indent=2))
    else:
        for group_id, state in groups:
            print(f"{group_id}\t{state}")
    return 0


def _groups_describe(args: argparse.Namespace) -> int:
    with _connected(args) as cluster:
        described = raylog.Admin(cluster).describe_consumer_groups(args.groups)
    if args.json:
        print(json.dumps([_group_json(g) for g in described], indent=2))
        return 0
    for g in described:
        print(
            f"group {g.group_id}: {g.state}, generation {g.generation}, assignor {g.protocol or '-'},"
            f" {len(g.members)} member(s), coordinator __consumer_offsets-{g.coordinator_partition}"
        )
        rows = [("TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "MEMBER")]
        for tp, lag in g.partitions.items():
            rows.append(
                (
                    tp.topic,
                    str(tp.partition),
                    _dash(lag.committed),
                    str(lag.log_end_offset),
                    _dash(lag.lag),
                    lag.member_id or "-",
                )
            )
        print(_table(rows))
    return 0


def _group_json(g: Any) -> dict:
    return {
        "group_id": g.group_id,
        "state": g.state,
        "generation": g.generation,
        "protocol": g.protocol,
        "coordinator_partition": g.coordinator_partition,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "assignment": [list(tp) for tp in m.assignment],
            }
            for m in g.members
        ],
        "partitions": [
            {"topic": tp.topic, "partition": tp.partition, **dataclasses.asdict(lag)}
            for tp, lag in g.partitions.items()
        ],
    }


def _groups_reset_offsets(args: argparse.Namespace) -> int:
    with _connected(args) as cluster:
        admin = raylog.Admin(cluster)
        metadata = cluster.metadata(refresh=True)
        partitions = [TopicPartition(args.topic, p) for p in range(metadata.num_partitions(args.topic))]
        if args.partitions:
            partitions = [TopicPartition(args.topic, p) for p in args.partitions]
        new = admin.reset_consumer_group_offsets(
            args.group,
            partitions,
            to="earliest" if args.to_earliest else "latest" if args.to_latest else None,
            to_timestamp_ms=args.to_timestamp_ms,
            shift_by=args.shift_by,
            dry_run=not args.execute,
        )
    if args.json:
        print(json.dumps([{"topic": tp.topic, "partition": tp.partition, "offset": o} for tp, o in new.items()]))
    else:
        print(
            _table(
                [("TOPIC", "PARTITION", "NEW-OFFSET")]
                + [(tp.topic, str(tp.partition), str(o)) for tp, o in new.items()]
            )
        )
        if not args.execute:
            print("(dry run: add --execute to apply)", file=sys.stderr)
    return 0


def _groups_delete(args: argparse.Namespace) -> int:
    with _connected(args) as cluster:
        raylog.Admin(cluster).delete_consumer_groups(args.groups)
    print(f"deleted {', '.join(args.groups)}", file=sys.stderr)
    return 0


def _add_groups(commands: Any) -> None:
    groups = commands.add_parser("groups", help="list, describe, reset offsets of and delete consumer groups")
    actions = groups.add_subparsers(dest="action", required=True)
    listing = _command(actions, "list", _groups_list, "every consumer group and its state")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    describe = _command(actions, "describe", _groups_describe, "members, committed offsets, log end offsets and lag")
    describe.add_argument("groups", nargs="+")
    describe.add_argument("--json", action="store_true", help="machine-readable output")
    reset = _command(actions, "reset-offsets", _groups_reset_offsets, "move a group's committed offsets (group idle)")
    reset.add_argument("group")
    reset.add_argument("--topic", required=True)
    reset.add_argument("--partitions", type=_id_list, help="comma-separated (default: all)")
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-timestamp-ms", type=_non_negative_int, help="first offset at or after this time")
    to.add_argument("--shift-by", type=int, help="move by N (negative: back) from the committed offsets")
    reset.add_argument("--execute", action="store_true", help="apply (default: print what would change)")
    reset.add_argument("--json", action="store_true", help="machine-readable output")
    delete = _command(actions, "delete", _groups_delete, "delete idle groups and their committed offsets")
    delete.add_argument("groups", nargs="+")


# --- transactions ----------------------------------------------------------------------------


def _transactions_list(args: argparse.Namespace) -> int:
    with _connected(args) as cluster:
        return _print_transactions(raylog.Admin(cluster).list_transactions(), args.json)


def _transactions_describe(args: argparse.Namespace) -> int:
    with _connected(args) as cluster:
        return _print_transactions(raylog.Admin(cluster).describe_transactions(args.ids), args.json)


def _print_transactions(described: list, as_json: bool) -> int:
    if as_json:
        rows = [dataclasses.asdict(t) | {"partitions": [list(tp) for tp in t.partitions]} for t in described]
        print(json.dumps(rows, indent=2))
        return 0
    rows = [("TRANSACTIONAL-ID", "STATE", "PRODUCER-ID", "EPOCH", "TIMEOUT-MS", "PARTITIONS", "COORDINATOR")]
    for t in described:
        partitions = ",".join(f"{tp.topic}-{tp.partition}" for tp in t.partitions) or "-"
        coordinator = f"__transaction_state-{t.coordinator_partition}"
        rows.append(
            (
                t.transactional_id,
                t.state,
                str(t.producer_id),
                str(t.producer_epoch),
                str(t.timeout_ms),
                partitions,
                coordinator,
            )
        )
    print(_table(rows))
    return 0


def _transactions_find_hanging(args: argparse.Namespace) -> int:
    with _connected(args) as cluster:
        partitions = _partitions_of(cluster, args.topic, args.partition)
        hanging = raylog.Admin(cluster).find_hanging_transactions(partitions, args.max_transaction_timeout_ms)
    if args.json:
        found = [h._asdict() | {"topic": h.partition.topic, "partition": h.partition.partition} for h in hanging]
        print(json.dumps(found))
        return 0
    rows = [("TOPIC", "PARTITION", "PRODUCER-ID", "PRODUCER-EPOCH", "START-OFFSET", "LAST-TIMESTAMP")]
    rows += [
        (h.partition.topic, str(h.partition.partition), str(h.producer_id), str(h.producer_epoch))
        + (str(h.start_offset), str(h.last_timestamp))
        for h in hanging
    ]
    print(_table(rows))
    return 0


def _transactions_abort(args: argparse.Namespace) -> int:
    tp = TopicPartition(args.topic, args.partition)
    with _connected(args) as cluster:
        admin = raylog.Admin(cluster)
        pid, epoch = args.producer_id, args.producer_epoch
        if args.start_offset is not None:
            producers = admin.describe_producers([tp])[tp]
            found = [p for p in producers if p.current_transaction_start_offset == args.start_offset]
            if not found:
                raise _UsageError(f"no transaction open in {args.topic}-{args.partition} starts at {args.start_offset}")
            pid, epoch = found[0].producer_id, found[0].producer_epoch
        elif pid is None or epoch is None:
            raise _UsageError("give --producer-id and --producer-epoch, or --start-offset")
        admin.abort_transaction(tp, pid, epoch, args.coordinator_epoch)
    print(f"aborted the transaction of producer id {pid} epoch {epoch} in {args.topic}-{args.partition}")
    return 0


def _add_transactions(commands: Any) -> None:
    transactions = commands.add_parser("transactions", help="list, describe and abort transactions")
    actions = transactions.add_subparsers(dest="action", required=True)
    listing = _command(actions, "list", _transactions_list, "every transactional id and its state")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    describe = _command(actions, "describe", _transactions_describe, "the state of transactional ids")
    describe.add_argument("ids", nargs="+")
    describe.add_argument("--json", action="store_true", help="machine-readable output")
    hanging = _command(
        actions, "find-hanging", _transactions_find_hanging, "transactions open in a partition no coordinator will end"
    )
    hanging.add_argument("--topic", required=True)
    hanging.add_argument("--partition", type=int, help="one partition (default: every partition of the topic)")
    hanging.add_argument(
        "--max-transaction-timeout-ms",
        type=int,
        default=MAX_TRANSACTION_TIMEOUT_MS,
        help="report transactions whose producer wrote last longer ago than this (default: the longest "
        "transaction timeout)",
    )
    hanging.add_argument("--json", action="store_true", help="machine-readable output")
    abort = _command(actions, "abort", _transactions_abort, "write an abort marker for a hanging transaction")
    abort.add_argument("--topic", required=True)
    abort.add_argument("--partition", type=int, required=True)
    abort.add_argument("--producer-id", type=int)
    abort.add_argument("--producer-epoch", type=int)
    abort.add_argument("--coordinator-epoch", type=int, default=0)
    abort.add_argument("--start-offset", type=int, help="the transaction's first offset (instead of producer id/epoch)")


def _quotas_alter(args: argparse.Namespace) -> int:
    change: dict[str, float | None] = {}
    for key in QUOTA_KEYS:
        rate, delete = getattr(args, key), getattr(args, f"delete_{key}")
        if rate is not None and delete:
            raise _UsageError(f"{key}: both set and deleted")
        if rate is not None or delete:
            change[key] = rate
    if not change:
        raise _UsageError("nothing to alter: give --producer-byte-rate, --consumer-byte-rate or a --delete-... flag")
    client_id = None if args.default else args.client_id
    with _connected(args) as cluster:
        raylog.Admin(cluster).alter_client_quotas({client_id: change})
    done = ", ".join(f"{k}={v:g}" if v is not None else f"deleted {k}" for k, v in change.items())
    print(f"altered quotas of {_quota_entity(client_id)}: {done}; leaders apply them now")
    return 0


def _quotas_describe(args: argparse.Namespace) -> int:
    with _connected(args) as cluster:
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
    print(_table([header, *rows]))
    return 0


def _quota_entity(client_id: str | None) -> str:
    return "<default>" if client_id is None else repr(client_id)


def _add_quotas(commands: Any) -> None:
    quotas = commands.add_parser("quotas", help="alter and describe client byte-rate quotas")
    actions = quotas.add_subparsers(dest="action", required=True)
    alter = _command(actions, "alter", _quotas_alter, "set or remove a client id's (or the default) byte-rate quotas")
    entity = alter.add_mutually_exclusive_group(required=True)
    entity.add_argument("--client-id", help="the client id the quotas are for")
    entity.add_argument("--default", action="store_true", help="the default quotas of client ids without their own")
    for key in QUOTA_KEYS:
        flag = key.replace("_", "-")
        alter.add_argument(f"--{flag}", dest=key, type=_positive_float, metavar="R", help="bytes/s")
        alter.add_argument(f"--delete-{flag}", dest=f"delete_{key}", action="store_true", help="remove this quota")
    describe = _command(actions, "describe", _quotas_describe, "every client quota set")
    describe.add_argument("--json", action="store_true", help="machine-readable output")


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
        raise _UsageError("name a resource (--topic, --group, --transactional-id or --cluster) and a principal")
    with _connected(args) as cluster:
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
    with _connected(args) as cluster:
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
        print(_table([("RESOURCE_TYPE", "NAME", "PATTERN", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"), *rows]))
    else:
        print("no ACLs")
    return 0


# --- users (SCRAM credentials) ------------------------------------------------------------


SCRAM_MECHANISMS = tuple(MECHANISMS.values())


def _users_add(args: argparse.Namespace) -> int:
    password = sys.stdin.readline().rstrip("\n")
    if not password:
        raise _UsageError("give the password on stdin (e.g. `printf '%s' \"$PW\" | raylog users add alice`)")
    with _connected(args) as cluster:
        raylog.Admin(cluster).alter_user_scram_credentials(
            {args.name: password}, mechanisms=args.mechanism or SCRAM_MECHANISMS, iterations=args.iterations
        )
    print(f"user {args.name!r}: {', '.join(args.mechanism or SCRAM_MECHANISMS)} credentials set")
    return 0


def _users_remove(args: argparse.Namespace) -> int:
    mechanisms = args.mechanism or SCRAM_MECHANISMS
    with _connected(args) as cluster:
        admin = raylog.Admin(cluster)
        held = [m for m, _ in admin.describe_user_scram_credentials([args.name])[args.name] if m in mechanisms]
        admin.alter_user_scram_credentials(deletions=[(args.name, m) for m in held])
    print(f"user {args.name!r}: {', '.join(held)} credentials deleted")
    return 0


def _users_list(args: argparse.Namespace) -> int:
    with _connected(args) as cluster:
        described = raylog.Admin(cluster).describe_user_scram_credentials(args.names or None)
    if args.json:
        print(json.dumps({u: [{"mechanism": m, "iterations": i} for m, i in c] for u, c in described.items()}))
    elif described:
        print(_table([("USER", "MECHANISM", "ITERATIONS"), *((u, m, i) for u, c in described.items() for m, i in c)]))
    else:
        print("no users")
    return 0


def _add_users(commands: Any) -> None:
    users = commands.add_parser("users", help="SCRAM credentials of Kafka users (kafka-configs.sh --entity-type users)")
    actions = users.add_subparsers(dest="action", required=True)
    add = _command(actions, "add", _users_add, "set a user's SCRAM credentials (password on stdin)")
    remove = _command(actions, "remove", _users_remove, "delete a user's SCRAM credentials")
    for sub in (add, remove):
        sub.add_argument("name")
        sub.add_argument("--mechanism", action="append", choices=SCRAM_MECHANISMS, help="repeatable (default: both)")
    add.add_argument(
        "--iterations",
        type=_positive_int,
        default=DEFAULT_ITERATIONS,
        help=f"{MIN_ITERATIONS} to {MAX_ITERATIONS} (default {DEFAULT_ITERATIONS})",
    )
    listing = _command(actions, "list", _users_list, "users and their mechanisms")
    listing.add_argument("names", nargs="*", metavar="NAME", help="default: every user")
    listing.add_argument("--json", action="store_true", help="machine-readable output")


def _add_acls(commands: Any) -> None:
    acls = commands.add_parser("acls", help="add, remove and list Kafka ACLs (as kafka-acls.sh)")
    actions = acls.add_subparsers(dest="action", required=True)
    for name, run, summary in (
        ("add", _acls_change, "add ACLs"),
        ("remove", _acls_change, "remove exactly the ACLs named"),
        ("list", _acls_list, "list ACLs"),
    ):
        sub = _command(actions, name, run, summary)
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


def _dash(value: int | None) -> str:
    return "-" if value is None else str(value)


def _table(rows: list[tuple[str, ...]]) -> str:
    """Rows as left-aligned columns (the first row is the header)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows)


# --- bench -----------------------------------------------------------------------------------

#: ``raylog bench`` options -> BenchConfig fields (options left out keep BenchConfig's defaults).
_BENCH_OPTIONS = {
    "num_records": "num_records",
    "record_size": "record_size_bytes",
    "topic": "topic",
    "partitions": "num_partitions",
    "replication_factor": "replication_factor",
    "acks": "acks",
    "batch_size": "batch_size",
    "linger_ms": "linger_ms",
    "compression": "compression",
    "arrow": "arrow",
    "sync": "sync",
    "throughput": "throughput_records_per_s",
    "timeout_ms": "timeout_ms",
}


def _bench(args: argparse.Namespace) -> int:
    from raylog import bench  # imports Ray: only when benchmarking

    given = {field: getattr(args, option, None) for option, field in _BENCH_OPTIONS.items()}
    try:
        config = bench.BenchConfig(args.action, **{k: v for k, v in given.items() if v is not None})
    except InvalidConfigError as exc:
        raise _UsageError(str(exc)) from None
    progress = _Progress()
    try:
        with _connected(args) as cluster:
            report = bench.run(cluster, config, show_progress=progress.show)
    finally:
        progress.clear()
    print(json.dumps(report, indent=2) if args.json else bench.format_report(report))
    return 0


def _bench_kafka(args: argparse.Namespace) -> int:
    try:
        from benchmarks import kafka_bench  # a raylog checkout's benchmarks (not installed)
    except ImportError:
        raise _UsageError(
            "raylog bench kafka runs from a raylog checkout (its benchmarks/ directory): "
            "cd there, or run python -m benchmarks.kafka_bench"
        ) from None
    scale = kafka_bench.QUICK if args.quick else kafka_bench.FULL
    with _connected(args) as cluster:
        try:
            return kafka_bench.report(scale, args.json, lambda: kafka_bench.measure(cluster, scale))
        except kafka_bench.BenchError as exc:
            raise _UsageError(str(exc)) from None


#: RSS the listener may grow by over a fuzz campaign (issue 25's bound).
FUZZ_RSS_GROWTH_MAX_BYTES = 256 << 20


def _bench_fuzz_wire(args: argparse.Namespace) -> int:
    from raylog.chaos import fuzz_wire

    with _connected(args) as cluster:
        if not cluster.bootstrap_servers():
            raise _UsageError("the cluster runs no Kafka listener (raylog start --kafka-port)")
        try:
            report, rss, lost = fuzz_wire.run_against(
                cluster,
                args.frames,
                args.seed,
                args.connections,
                args.max_duration_s,
                progress=lambda r: print(f"  {r.frames} frames...", file=sys.stderr, flush=True),
            )
        except (FileNotFoundError, ValueError) as exc:
            raise _UsageError(str(exc)) from None
    print(fuzz_wire.format_report(report, rss))
    print(f"  records acknowledged before the campaign and lost: {lost}")
    grew = rss is not None and rss[1] - rss[0] > FUZZ_RSS_GROWTH_MAX_BYTES
    return 1 if report.anomalies or lost or grew else 0


def _bench_soak(args: argparse.Namespace) -> int:
    from raylog.chaos import soak  # imports Ray and starts nodes: only when soaking

    config = _soak_config(args)
    began = time.monotonic()
    with soak.SoakCluster(listeners=config.kafka_clients > 0) as env:
        print(
            f"soak: a head and {env.num_brokers} broker nodes up in {time.monotonic() - began:.1f} s; "
            f"{args.runs} run(s) from seed {args.seed}, {config.describe()}, faults {','.join(config.fault_kinds)}",
            flush=True,
        )
        results = soak.soak(env, args.runs, args.seed, config, out=lambda line: print(line, flush=True))
    print(soak.totals(results, time.monotonic() - began))
    return 1 if any(r.failed for r in results) else 0


def _bench_txn_copier(args: argparse.Namespace) -> int:
    from raylog.chaos import soak, txn_copier  # imports Ray and starts nodes: only when copying

    began = time.monotonic()
    with soak.SoakCluster() as env:
        print(
            f"txn-copier: a head and {env.num_brokers} broker nodes up in {time.monotonic() - began:.1f} s; "
            f"{args.records} records in transactions of {args.txn_records} at {args.records_per_s:g}/s, "
            f"{args.rounds} round(s) of faults",
            flush=True,
        )
        try:
            report = txn_copier.copy_through_faults(
                env.cluster, env.start_broker, env.kill_broker, **_copier_options(args)
            )
        except AssertionError as exc:  # CopyFailed, or a wait that timed out
            print(f"txn-copier: FAILED after {time.monotonic() - began:.0f} s: {exc}", flush=True)
            return 1
    print(report.text)
    print(f"transactions: {report.outcomes}")
    print(f"txn-copier: ok, {args.records} records copied exactly once in {time.monotonic() - began:.0f} s")
    return 0


def _copier_options(args: argparse.Namespace) -> dict:
    """The :func:`raylog.chaos.txn_copier.copy_through_faults` sizes that ``bench txn-copier`` chooses."""
    return {
        "records": args.records,
        "rounds": args.rounds,
        "txn_records": args.txn_records,
        "records_per_s": args.records_per_s,
    }


def _soak_config(args: argparse.Namespace):
    """The :class:`raylog.chaos.soak.RunConfig` that ``bench soak``'s options choose."""
    from raylog.chaos.nemesis import FAULT_KINDS, TRANSACTION_FAULTS
    from raylog.chaos.soak import RunConfig

    faults = RunConfig.faults if args.faults is None else tuple(k for k in args.faults.split(",") if k)
    unknown = sorted(set(faults) - set(FAULT_KINDS))
    if unknown:
        raise _UsageError(f"unknown fault kinds {', '.join(unknown)}; known: {', '.join(FAULT_KINDS)}")
    needing = sorted(set(faults) & set(TRANSACTION_FAULTS))
    if needing and not (args.transactions or args.kafka_transactional):
        raise _UsageError(f"fault kinds {', '.join(needing)} need --transactions or --kafka-transactional")
    given = {
        "duration_s": args.duration_s,
        "max_faults": args.max_faults,
        "acks": args.acks,
        "min_insync_replicas": args.min_insync_replicas,
        "partitions": args.partitions,
        "overlap": args.overlap,
        "producers": args.producers,
        "consumers": args.consumers,
        "kafka_producers": args.kafka_producers,
        "kafka_consumers": args.kafka_consumers,
        "kafka_transactional": args.kafka_transactional,
        "rate_per_s": args.rate_per_s,
        "replica_lag_time_max_ms": args.replica_lag_time_max_ms,
    }
    return RunConfig(
        faults=faults,
        unclean=args.unclean,
        transactions=args.transactions,
        **{k: v for k, v in given.items() if v is not None},
    )


# --- dump-log --------------------------------------------------------------------------------


def _dump_log(args: argparse.Namespace) -> int:
    """Read-only: walks the segment files directly, never recovering or truncating them."""
    if not os.path.isdir(args.dir):
        print(f"raylog: {args.dir} is not a directory", file=sys.stderr)
        return 2
    segments = sorted(name for name in os.listdir(args.dir) if name.endswith(".log"))
    report = {"dir": args.dir, "segments": []}
    for name in segments:
        with open(os.path.join(args.dir, name), "rb") as f:
            data = f.read()
        report["segments"].append(_dump_segment(name, memoryview(data), args.records))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print_dump(report)
    return 1 if any(s["error"] for s in report["segments"]) else 0


def _dump_segment(name: str, data: memoryview, with_records: bool) -> dict:
    segment: dict = {"file": name, "size_bytes": len(data), "batches": [], "error": None}
    position = 0
    try:
        while position < len(data):
            header = record_batch.parse_header(data, position)
            record_batch.check_crc(data, position, header)
            entry = {field: getattr(header, field) for field in header._fields}
            entry["position"] = position
            if with_records:
                table = record_batch.decode_table(data[position : position + header.size])
                entry["records"] = [
                    {
                        "offset": r["offset"],
                        "timestamp_ms": r["timestamp"],
                        "key": _text(r["key"]),
                        "value": _text(r["value"]),
                    }
                    for r in table.to_pylist()
                ]
            segment["batches"].append(entry)
            position += header.size
    except RaylogError as exc:
        segment["error"] = f"at byte {position}: {exc}"
    return segment


def _print_dump(report: dict) -> None:
    for segment in report["segments"]:
        print(f"{report['dir']}/{segment['file']}: {segment['size_bytes']:,} bytes, {len(segment['batches'])} batches")
        for b in segment["batches"]:
            print(
                f"  baseOffset {b['base_offset']} lastOffset {b['base_offset'] + b['last_offset_delta']} "
                f"count {b['record_count']} epoch {b['leader_epoch']} position {b['position']} "
                f"size {12 + b['batch_length']} maxTimestamp {b['max_timestamp']} crc {b['crc']:#010x}"
            )
            for r in b.get("records", []):
                print(f"    | offset {r['offset']} ts {r['timestamp']} key {r['key']} value {r['value']}")
        if segment["error"]:
            print(f"  INVALID {segment['error']} (the log recovers by cutting here)")


def _text(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.hex()


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
    except _UsageError as exc:
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
    _add_start_stop_status(commands)
    _add_topics(commands)
    _add_brokers(commands)
    _add_replica_management(commands)
    _add_produce_consume(commands)
    _add_groups(commands)
    _add_transactions(commands)
    _add_quotas(commands)
    _add_acls(commands)
    _add_users(commands)
    _add_bench(commands)
    dump = commands.add_parser("dump-log", help="print the segments and batches of a log directory")
    dump.add_argument("dir")
    dump.add_argument("--records", action="store_true", help="print every record too")
    dump.add_argument("--json", action="store_true", help="machine-readable output")
    dump.set_defaults(run=_dump_log)
    return parser


def _command(commands: Any, name: str, run: Any, summary: str) -> argparse.ArgumentParser:
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


def _add_start_stop_status(commands: Any) -> None:
    start = _command(commands, "start", _start, "start raylog (and, without --address, a local Ray head)")
    start.add_argument("--data-dir", help="where brokers keep their logs (default $RAYLOG_DATA_DIR or /tmp/raylog)")
    start.add_argument("--num-brokers", type=_positive_int, help="brokers on the local head (default 1)")
    start.add_argument("--num-cpus", type=_positive_int, default=os.cpu_count() or 1, help="CPUs of a local head")
    start.add_argument(
        "--object-store-memory",
        type=_positive_int,
        default=DEFAULT_OBJECT_STORE_BYTES,
        help="object store bytes of a local head",
    )
    start.add_argument("--ray-port", type=_positive_int, default=6379, help="GCS port of a local head")
    start.add_argument(
        "--kafka-port",
        type=_port,
        help="run a Kafka protocol listener on each broker (brokers sharing a node take this port and the next "
        "ones; 0: any free port), so that Kafka clients (librdkafka, kafka-python, kcat...) connect",
    )
    start.add_argument(
        "--kafka-host",
        default="",
        help="the address Kafka listeners bind and advertise (default: the loopback, 127.0.0.1; 0.0.0.0: every "
        "interface, the node's address advertised)",
    )
    _pairs_argument(
        start,
        "--config",
        "cluster settings by Kafka name (docs/configuration.md), e.g. listeners=SSL://:9093 "
        "ssl.keystore.location=/etc/raylog/broker.pem authorizer=acl",
    )
    stop = _command(commands, "stop", _stop, "stop raylog's actors (data stays on disk)")
    stop.add_argument("--ray", action="store_true", help="also `ray stop` the local head `raylog start` launched")
    status = _command(commands, "status", _status, "brokers, controller, topics, leaders and ISR")
    status.add_argument("--json", action="store_true", help="machine-readable output")


def _add_topics(commands: Any) -> None:
    topics = commands.add_parser("topics", help="create, list, describe, alter, grow and delete topics")
    actions = topics.add_subparsers(dest="action", required=True)
    create = _command(actions, "create", _topics_create, "create a topic")
    create.add_argument("name")
    create.add_argument("--partitions", type=int, default=1)
    create.add_argument("--replication-factor", type=int, default=1)
    create.add_argument(
        "--wait-ms",
        type=int,
        default=300_000,
        help="wait this long for every partition to have a leader, showing progress (0: return once created)",
    )
    _pairs_argument(create, "--config", "topic configs by Kafka name, e.g. retention.ms=60000")
    listing = _command(actions, "list", _topics_list, "list topic names")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    describe = _command(actions, "describe", _topics_describe, "partitions (leader, epoch, replicas, ISR), config")
    describe.add_argument("names", nargs="*", metavar="NAME", help="default: every topic")
    describe.add_argument(
        "--under-replicated-partitions", action="store_true", help="only partitions with fewer replicas in sync"
    )
    describe.add_argument("--unavailable-partitions", action="store_true", help="only partitions without a live leader")
    describe.add_argument("--json", action="store_true", help="machine-readable output")
    configs = _command(actions, "describe-configs", _topics_describe_configs, "topic configs and where they come from")
    configs.add_argument("names", nargs="+", metavar="NAME")
    configs.add_argument("--all", action="store_true", help="every property, defaults too (default: overrides)")
    configs.add_argument("--json", action="store_true", help="machine-readable output")
    alter = _command(actions, "alter", _topics_alter, "set or delete topic configs (applied live)")
    alter.add_argument("name")
    _pairs_argument(alter, "--config", "set these, e.g. retention.ms=60000")
    alter.add_argument(
        "--delete-config", nargs="+", action="extend", default=[], metavar="K", help="back to the default"
    )
    grow = _command(actions, "add-partitions", _topics_add_partitions, "grow a topic's partition count")
    grow.add_argument("name")
    grow.add_argument("--partitions", type=_positive_int, required=True, help="the new total count")
    grow.add_argument(
        "--wait-ms",
        type=int,
        default=300_000,
        help="wait this long for every partition to have a leader, showing progress (0: return once added)",
    )
    delete = _command(actions, "delete", _topics_delete, "delete topics and their data")
    delete.add_argument("names", nargs="+", metavar="NAME")


def _reassign_partitions(args: argparse.Namespace) -> int:
    targets = {raylog.TopicPartition(args.topic, p): args.replicas for p in args.partitions}
    with _connected(args) as cluster:
        admin = raylog.Admin(cluster)
        admin.alter_partition_reassignments(targets)
        if args.wait:
            _await_reassignment(admin, set(targets), args.timeout_ms)
    if args.wait:
        print(f"reassigned {args.topic} partitions {args.partitions} to brokers {args.replicas}")
    else:
        print(
            f"reassigning {args.topic} partitions {args.partitions} to brokers {args.replicas}: new replicas "
            "fill by fetching; old ones go once every new one is in sync (see `raylog reassign-partitions list`)"
        )
    return 0


def _await_reassignment(admin: Any, moving: set[TopicPartition], timeout_ms: int) -> None:
    """Wait until none of ``moving`` is being reassigned, with a progress line.

    Raises:
        KafkaTimeoutError: still moving after ``timeout_ms`` (the move goes on regardless).
    """
    progress = _Progress()
    deadline = time.monotonic() + timeout_ms / 1000
    try:
        while left := moving & set(admin.list_partition_reassignments()):
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(
                    f"{len(left)} of {len(moving)} partitions still moving after {timeout_ms} ms; the move goes on "
                    "(see `raylog reassign-partitions list`)"
                )
            progress.show(f"reassigning: {len(moving) - len(left)}/{len(moving)} partitions in sync on their targets")
            time.sleep(PROGRESS_INTERVAL_S)
    finally:
        progress.clear()


def _list_reassignments(args: argparse.Namespace) -> int:
    with _connected(args) as cluster:
        pending = raylog.Admin(cluster).list_partition_reassignments()
    rows = [{"topic": tp.topic, "partition": tp.partition, "target": list(t)} for tp, t in sorted(pending.items())]
    print(
        json.dumps(rows, indent=2)
        if args.json
        else "\n".join(f"{r['topic']}-{r['partition']} -> {_ids(r['target'])}" for r in rows)
        or "no reassignment under way"
    )
    return 0


def _elect_leaders(args: argparse.Namespace) -> int:
    with _connected(args) as cluster:
        moved = raylog.Admin(cluster).elect_leaders(args.topics or None, election_type=args.election_type)
    print(f"{args.election_type} leader election: {moved} partitions changed leader")
    return 0


def _delete_records(args: argparse.Namespace) -> int:
    with _connected(args) as cluster:
        asked = {TopicPartition(args.topic, p): args.offset for p in args.partitions}
        low_watermarks = raylog.Admin(cluster).delete_records(asked)
    for tp, low_watermark in sorted(low_watermarks.items()):
        print(f"{tp.topic}-{tp.partition}\tlow watermark {low_watermark}")
    return 0


def _add_replica_management(commands: Any) -> None:
    reassign = commands.add_parser("reassign-partitions", help="move partitions to other brokers, change replication")
    actions = reassign.add_subparsers(dest="action", required=True)
    start = _command(actions, "start", _reassign_partitions, "move partitions to a new replica set")
    start.add_argument("topic")
    start.add_argument("--partitions", type=_id_list, required=True, help="e.g. 0,1,2")
    start.add_argument("--replicas", type=_id_list, required=True, help="target brokers, preferred leader first")
    start.add_argument("--wait", action="store_true", help="return once every moved partition is in sync")
    start.add_argument(
        "--timeout-ms", type=_non_negative_int, default=REASSIGN_WAIT_MS, help="how long --wait waits (600,000)"
    )
    listing = _command(actions, "list", _list_reassignments, "reassignments under way")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    elect = _command(
        commands, "elect-leaders", _elect_leaders, "move leadership back to preferred replicas, or elect unclean"
    )
    elect.add_argument("topics", nargs="*", metavar="TOPIC", help="default: every topic")
    elect.add_argument(
        "--election-type",
        choices=("preferred", "unclean"),
        default="preferred",
        help="unclean: a leader for each partition without a live one, from any live replica "
        "(acknowledged records only the lost replicas held are gone)",
    )
    delete = _command(commands, "delete-records", _delete_records, "delete every record below an offset")
    delete.add_argument("topic")
    delete.add_argument("--partitions", type=_id_list, required=True, help="e.g. 0,1,2")
    delete.add_argument(
        "--offset", type=int, required=True, help="records below it go; -1: below the high watermark (all committed)"
    )


def _id_list(text: str) -> list[int]:
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not ids or any(i < 0 for i in ids):
        raise argparse.ArgumentTypeError(f"expected non-negative integers, got {text!r}")
    return ids


def _add_produce_consume(commands: Any) -> None:
    produce = _command(commands, "produce", _produce, "send stdin lines as records, one per line")
    produce.add_argument("topic")
    produce.add_argument(
        "--format", choices=["text", "json"], default="text", help="json: key, value, headers, timestamp_ms per line"
    )
    produce.add_argument("--key-separator", help="a line's key is the text before the first SEP")
    produce.add_argument("--acks", choices=["all", "1", "0"], default="all")
    produce.add_argument("--compression", choices=sorted(compression.CODEC_IDS))
    produce.add_argument("--partition", type=_non_negative_int, help="default: by key (Kafka's partitioner)")
    consume = _command(commands, "consume", _consume, "print records' values, one per line")
    consume.add_argument("topic")
    start = consume.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="default: only records produced from now on")
    start.add_argument("--offset", type=_non_negative_int, help="start at this offset (needs --partition)")
    consume.add_argument("--partition", type=_non_negative_int, help="read this partition only")
    consume.add_argument(
        "--group", help="consume as a member of this consumer group, from its committed offsets (committing as it goes)"
    )
    consume.add_argument("--max-messages", type=_positive_int, help="stop after this many records")
    consume.add_argument("--timeout-ms", type=_non_negative_int, help="stop after this long without records")
    consume.add_argument("--print-offsets", action="store_true", help="prefix partition:offset")
    consume.add_argument("--print-key", action="store_true", help="print KEY<SEP>VALUE")
    consume.add_argument("--key-separator", default="\t", help="between key and value (default: tab)")
    consume.add_argument("--print-timestamp", action="store_true", help="prefix the record's timestamp (ms)")
    consume.add_argument(
        "--format", choices=["text", "json"], default="text", help="json: one object per record, every field"
    )


def _add_bench(commands: Any) -> None:
    bench = commands.add_parser("bench", help="measure throughput and latency (Kafka's perf tests)")
    workloads = bench.add_subparsers(dest="action", required=True)
    for name, summary in (
        ("produce", "records/s, MB/s and acknowledgement latency of one producer"),
        ("consume", "records/s and MB/s of one consumer reading from the beginning"),
        ("e2e", "end-to-end latency: a consumer in another process reads while this one produces"),
    ):
        sub = _command(workloads, name, _bench, summary)
        sub.add_argument("--topic", help="an existing topic (default: a temporary one, deleted after the run)")
        sub.add_argument("--num-records", type=_positive_int, help="default 100,000")
        sub.add_argument("--record-size", type=_positive_int, help="bytes per value (default 100)")
        sub.add_argument("--partitions", type=_positive_int, help="of the temporary topic (default 1)")
        sub.add_argument("--replication-factor", type=_positive_int, help="of the temporary topic (default 1)")
        sub.add_argument("--acks", choices=["all", "1", "0"], help="default all")
        sub.add_argument("--batch-size", type=_positive_int, help="producer batch bytes (default: the producer's)")
        sub.add_argument("--linger-ms", type=_non_negative_int, help="default: the producer's (0 with --sync)")
        sub.add_argument("--compression", choices=sorted(compression.CODEC_IDS))
        sub.add_argument("--arrow", action="store_true", help="send_arrow in batch-sized chunks, poll_arrow")
        sub.add_argument("--throughput", type=float, metavar="RECORDS_PER_S", help="cap the send rate")
        sub.add_argument("--timeout-ms", type=_non_negative_int, help="wait bound for acks and records (60,000)")
        sub.add_argument("--json", action="store_true", help="machine-readable output")
        if name == "produce":
            sub.add_argument("--sync", action="store_true", help="one record at a time, each acknowledged first")
    kafka = _command(
        workloads,
        "kafka",
        _bench_kafka,
        "Kafka clients over the Kafka listeners against raylog's own clients, same run (from a checkout)",
    )
    kafka.add_argument("--quick", action="store_true", help="a short run")
    kafka.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    fuzz = _command(
        workloads,
        "fuzz-wire",
        _bench_fuzz_wire,
        "mutated Kafka request frames against the cluster's first Kafka listener (loopback, from a checkout)",
    )
    fuzz.add_argument("--frames", type=_positive_int, default=1_000_000, help="default 1,000,000")
    fuzz.add_argument("--seed", type=int, default=0, help="of the mutations (default 0)")
    fuzz.add_argument("--connections", type=_positive_int, default=32, help="batches in flight (default 32)")
    fuzz.add_argument("--max-duration-s", type=_positive_float, default=3600.0, help="stop early after (3,600)")
    soak = workloads.add_parser(
        "soak", help="seeded fault runs judged by a Jepsen-style checker (on a Ray cluster of its own)"
    )
    soak.set_defaults(run=_bench_soak)
    soak.add_argument("--runs", type=_positive_int, default=1, help="how many runs (default 1)")
    soak.add_argument("--seed", type=int, default=1, help="of the first run; run i uses seed + i (default 1)")
    soak.add_argument("--faults", help="comma-separated fault kinds (default: all this build supports)")
    soak.add_argument("--duration-s", type=_positive_float, help="workload time per run (default 6)")
    soak.add_argument("--max-faults", type=_non_negative_int, help="faults per run at most (default 3)")
    soak.add_argument("--acks", choices=["all", "1"], help="of the producers (default all)")
    soak.add_argument("--min-insync-replicas", type=_positive_int, help="of the topic (default 2)")
    soak.add_argument("--unclean", action="store_true", help="unclean.leader.election.enable=true")
    soak.add_argument("--partitions", type=_positive_int, help="of each run's topic (default 2)")
    soak.add_argument(
        "--overlap",
        type=int,
        choices=[1, 2],
        help="faults in effect at once: 2 leaves a paused replica, delayed calls or a full disk in effect "
        "while a second fault runs (default 1)",
    )
    soak.add_argument(
        "--producers", type=_positive_int, help="idempotent producer clients, two threads each (default 1)"
    )
    soak.add_argument("--consumers", type=_non_negative_int, help="consumer group members (default 2)")
    soak.add_argument(
        "--kafka-producers",
        type=_non_negative_int,
        help="confluent-kafka producers writing through the brokers' Kafka listeners (default 0)",
    )
    soak.add_argument(
        "--kafka-consumers",
        type=_non_negative_int,
        help="confluent-kafka consumers in a group of their own, through the listeners (default 0)",
    )
    soak.add_argument(
        "--kafka-transactional",
        type=_non_negative_int,
        help="confluent-kafka transactional producers through the listeners, with kill-txn-coordinator "
        "faults (default 0)",
    )
    soak.add_argument("--rate-per-s", type=_positive_float, help="records per second per producer thread (default 40)")
    soak.add_argument(
        "--replica-lag-time-max-ms",
        type=_positive_int,
        help="of the topic: how long a follower may lag and stay in the ISR (default 1500)",
    )
    soak.add_argument(
        "--transactions",
        action="store_true",
        help="add a transactional producer and kill-txn-coordinator faults (read_committed consumers)",
    )
    _add_bench_txn_copier(workloads)


def _add_bench_txn_copier(workloads: Any) -> None:
    # The defaults are raylog.chaos.txn_copier's (not imported here: it imports Ray).
    copier = workloads.add_parser(
        "txn-copier",
        help="Kafka's transactional copier test through copier, leader-node and coordinator kills "
        "(on a Ray cluster of its own)",
    )
    copier.set_defaults(run=_bench_txn_copier)
    copier.add_argument("--records", type=_positive_int, default=100_000, help="preloaded and copied (100,000)")
    copier.add_argument("--rounds", type=_positive_int, default=3, help="times each fault kind is injected (3)")
    copier.add_argument("--txn-records", type=_positive_int, default=1_000, help="records a transaction takes (1,000)")
    copier.add_argument(
        "--records-per-s", type=_positive_float, default=800.0, help="the copier's pace, records a second (800)"
    )


def _pairs_argument(parser: argparse.ArgumentParser, flag: str, help_text: str) -> None:
    """A repeatable ``flag K=V ...`` option gathering ``(K, V)`` pairs."""
    parser.add_argument(flag, type=_config_pair, nargs="+", action="extend", default=[], metavar="K=V", help=help_text)


def _config_pair(text: str) -> tuple[str, str]:
    key, found, value = text.partition("=")
    if not found or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _config_pairs(text: str) -> list[tuple[str, str]]:
    """Comma-separated K=V pairs, as kafka-configs --add-config reads them: a list value in
    brackets (``log.cleanup.policy=[delete,compact]``) keeps its commas, without brackets."""
    pairs = [_config_pair(part) for part in re.split(r",(?![^\[]*\])", text)]
    return [(key, value[1:-1] if value.startswith("[") and value.endswith("]") else value) for key, value in pairs]


def _config_names(text: str) -> list[str]:
    """Comma-separated config names."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected config names, got {text!r}")
    return names


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port in [0, 65535], got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


if __name__ == "__main__":
    sys.exit(main())
