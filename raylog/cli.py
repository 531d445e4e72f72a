"""The ``raylog`` command.

raylog start [--address A] [--data-dir D] [--num-brokers N]
             [--num-cpus C] [--object-store-memory B] [--ray-port P]
        start raylog. With an address ("auto" or a Ray address) it joins that Ray cluster
        (brokers are its nodes); without one it reuses the local Ray head an earlier
        ``raylog start`` launched, or launches one (``ray start --head``), and puts
        N brokers on it with data under D. raylog's actors are detached: they outlive it.
raylog stop [--ray]
        stop raylog's actors (data stays on disk); ``--ray`` also runs ``ray stop`` for
        the local Ray head ``raylog start`` launched (never for any other Ray cluster)
raylog status [--json]
        brokers, controller, topics with each partition's leader and ISR, offline partitions
raylog topics create NAME [--partitions N] [--replication-factor R] [--config k=v ...]
raylog topics list
raylog topics describe [NAME ...] [--json]    leader, epoch, replicas, ISR, config
raylog topics delete NAME ...
raylog reassign-partitions start TOPIC --partitions 0,1 --replicas 2,0,1
        move partitions to a new replica set (or change their replication factor)
raylog reassign-partitions list [--json]      reassignments under way
raylog elect-leaders [TOPIC ...]              leadership back to preferred replicas
raylog produce TOPIC [--key-separator SEP] [--acks all|1|0] [--compression C] [--partition P]
        one record per stdin line (the key before the first SEP); a summary to stderr
raylog consume TOPIC [--from-beginning | --offset N --partition P] [--max-messages N]
               [--timeout-ms T] [--print-offsets] [--print-key] [--key-separator SEP]
        values one per line; stops after N records or T ms without records
raylog dump-log DIR [--records] [--json]   print a log directory's segments and batches
                                           (Kafka's kafka-dump-log), verifying CRCs;
                                           read-only, exit code 1 if a batch is invalid

Every command but dump-log takes ``--address`` (default: "auto" when RAY_ADDRESS is set,
else the local head ``raylog start`` launched, else an error asking to run ``raylog start``)
and ``--cluster-name`` (default "default"); only ``start`` creates a raylog cluster. In a
process already connected to Ray (``ray.is_initialized()``), commands use that Ray.

Exit codes: 0 success; 1 a raylog error, printed as ``raylog: <ErrorName>: <message>``;
2 a usage error; 130 interrupted.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import raylog
from raylog.actors.names import NAMESPACE, controller_name
from raylog.errors import InvalidRecordError, RaylogError
from raylog.storage import compression, record_batch
from raylog.types import TopicPartition

if TYPE_CHECKING:
    from raylog.clients.cluster import RaylogCluster

#: Where ``raylog start`` records the local Ray head it launched (override: RAYLOG_CLI_STATE).
DEFAULT_HEAD_FILE = os.path.join(tempfile.gettempdir(), "raylog-cli", "ray-head.json")
#: A local head's object store: raylog's batches pass through it briefly.
DEFAULT_OBJECT_STORE_BYTES = 512 * 1024 * 1024
#: The longest single poll of ``consume`` (it checks --timeout-ms between polls).
CONSUME_POLL_MS = 500


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
        yield _create(args) if create else _attach(args.cluster_name)
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


def _attach(cluster_name: str) -> RaylogCluster:
    import ray

    from raylog.clients.cluster import RaylogCluster

    try:
        controller = ray.get_actor(controller_name(cluster_name), namespace=NAMESPACE)
    except ValueError:
        raise ClusterNotRunningError(
            f"no raylog cluster {cluster_name!r} on this Ray cluster: run `raylog start --cluster-name {cluster_name}`"
        ) from None
    return RaylogCluster(cluster_name, controller)


def _create(args: argparse.Namespace) -> RaylogCluster:
    """Start raylog (or find it running). Joined by --address or RAY_ADDRESS, its brokers are
    the Ray cluster's nodes; on the local head of ``raylog start`` (or this process's own Ray)
    it is embedded: --num-brokers brokers on that node, logs under --data-dir."""
    address = args.address or ("auto" if os.environ.get("RAY_ADDRESS") else None)
    return raylog.connect(address, data_dir=args.data_dir, num_brokers=args.num_brokers, cluster_name=args.cluster_name)


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
        brokers = cluster.metadata(refresh=True).brokers
    print(f"raylog cluster {args.cluster_name!r} is running with {len(brokers)} broker(s):")
    for b in sorted(brokers.values(), key=lambda b: b.broker_id):
        print(f"  broker {b.broker_id}  node {b.node_id}  data {b.data_dir}")
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
    import ray

    with _connected(args) as cluster:
        metadata = cluster.metadata(refresh=True)
        address = ray.get_runtime_context().gcs_address
    topics = [_topic_json(metadata.topics[name]) for name in sorted(metadata.topics)]
    report = {
        "cluster_name": args.cluster_name,
        "cluster_id": metadata.cluster_id,
        "ray_address": address,
        "controller": {"name": controller_name(args.cluster_name), "namespace": NAMESPACE},
        "brokers": [dataclasses.asdict(metadata.brokers[b]) for b in sorted(metadata.brokers)],
        "topics": topics,
        "offline_partitions": [
            f"{t['name']}-{p['partition']}" for t in topics for p in t["partitions"] if p["leader"] < 0
        ],
    }
    print(json.dumps(report, indent=2) if args.json else _status_text(report))
    return 0


def _status_text(report: dict) -> str:
    lines = [
        f"raylog cluster {report['cluster_name']!r} (id {report['cluster_id']}) on Ray at {report['ray_address']}",
        f"controller: {report['controller']['name']} (namespace {report['controller']['namespace']})",
        f"brokers: {len(report['brokers'])}",
        *(f"  broker {b['broker_id']}  node {b['node_id']}  data {b['data_dir']}" for b in report["brokers"]),
        f"topics: {len(report['topics'])}",
    ]
    for t in report["topics"]:
        lines.append(f"  {t['name']}  partitions {len(t['partitions'])}")
        lines += [f"    {p['partition']}  leader {_leader(p)}  isr {_ids(p['isr'])}" for p in t["partitions"]]
    lines.append(f"offline partitions: {', '.join(report['offline_partitions']) or 'none'}")
    return "\n".join(lines)


def _topic_json(topic: Any) -> dict:
    partitions = [dataclasses.asdict(p) for p in topic.partitions]
    for p in partitions:
        del p["topic"]
    return {"name": topic.name, "topic_id": topic.topic_id, "config": dict(topic.config), "partitions": partitions}


def _leader(partition: dict) -> str:
    return str(partition["leader"]) if partition["leader"] >= 0 else "none"


def _ids(ids: Any) -> str:
    return ",".join(map(str, ids)) or "-"


# --- topics --------------------------------------------------------------------------------


def _topics_create(args: argparse.Namespace) -> int:
    new = raylog.NewTopic(args.name, args.partitions, args.replication_factor, dict(args.config))
    with _connected(args) as cluster:
        raylog.Admin(cluster).create_topics([new])
    print(f"created topic {args.name!r}: {args.partitions} partition(s), replication factor {args.replication_factor}")
    return 0


def _topics_list(args: argparse.Namespace) -> int:
    with _connected(args) as cluster:
        names = raylog.Admin(cluster).list_topics()
    for name in names:
        print(name)
    return 0


def _topics_describe(args: argparse.Namespace) -> int:
    with _connected(args) as cluster:
        topics = [_topic_json(t) for t in raylog.Admin(cluster).describe_topics(args.names or None)]
    print(json.dumps(topics, indent=2) if args.json else "\n".join(map(_describe_text, topics)))
    return 0


def _describe_text(t: dict) -> str:
    """Like kafka-topics --describe."""
    configs = ",".join(f"{k}={v}" for k, v in sorted(t["config"].items()))
    replication = len(t["partitions"][0]["replicas"]) if t["partitions"] else 0
    lines = [
        f"Topic: {t['name']}\tTopicId: {t['topic_id']}\tPartitionCount: {len(t['partitions'])}\t"
        f"ReplicationFactor: {replication}\tConfigs: {configs}"
    ]
    lines += [
        f"\tTopic: {t['name']}\tPartition: {p['partition']}\tLeader: {_leader(p)}\tEpoch: {p['leader_epoch']}\t"
        f"Replicas: {_ids(p['replicas'])}\tIsr: {_ids(p['isr'])}"
        for p in t["partitions"]
    ]
    return "\n".join(lines)


def _topics_delete(args: argparse.Namespace) -> int:
    with _connected(args) as cluster:
        raylog.Admin(cluster).delete_topics(args.names)
    print(f"deleted {', '.join(map(repr, args.names))}")
    return 0


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

    def summary(self, topic: str) -> str:
        spread = ", ".join(f"{p}: {n}" for p, n in sorted(self.partitions.items())) or "none"
        failed = f"; {len(self.errors)} failed" if self.errors else ""
        return f"produced {sum(self.partitions.values())} records to {topic!r} (per partition {spread}){failed}"


def _produce(args: argparse.Namespace) -> int:
    tally, pending = _Tally(), collections.deque()
    with _connected(args) as cluster:
        producer = raylog.Producer(cluster, acks=args.acks, compression=args.compression)
        try:
            for number, line in enumerate(sys.stdin, 1):
                key, value = _split_line(line.rstrip("\r\n"), args.key_separator, number)
                pending.append(producer.send(args.topic, value, key=key, partition=args.partition))
                while pending and pending[0].done():
                    tally.add(pending.popleft())
        finally:
            producer.close()
    for future in pending:
        tally.add(future)
    print(tally.summary(args.topic), file=sys.stderr)
    if tally.errors:
        raise tally.errors[0]
    return 0


def _split_line(line: str, separator: str | None, number: int) -> tuple[bytes | None, bytes]:
    if separator is None:
        return None, line.encode()
    key, found, value = line.partition(separator)
    if not found:
        raise InvalidRecordError(f"line {number} has no key separator {separator!r}")
    return key.encode(), value.encode()


def _consume(args: argparse.Namespace) -> int:
    if args.offset is not None and args.partition is None:
        raise _UsageError("--offset needs --partition")
    with _connected(args) as cluster:
        consumer = raylog.Consumer(cluster, auto_offset_reset="earliest" if args.from_beginning else "latest")
        try:
            _assign(consumer, cluster, args)
            count = _print_records(consumer, args)
        finally:
            consumer.close()
    print(f"consumed {count} records", file=sys.stderr)
    return 0


def _assign(consumer: Any, cluster: RaylogCluster, args: argparse.Namespace) -> None:
    if args.partition is None:
        count = cluster.metadata(refresh=True).num_partitions(args.topic)
        partitions = [TopicPartition(args.topic, p) for p in range(count)]
    else:
        partitions = [TopicPartition(args.topic, args.partition)]
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
    offsets = f"{record.partition}:{record.offset}\t" if args.print_offsets else ""
    key = f"{_console_text(record.key)}{args.key_separator}" if args.print_key else ""
    return f"{offsets}{key}{_console_text(record.value)}"


def _console_text(data: bytes | None) -> str:
    return "null" if data is None else data.decode("utf-8", errors="backslashreplace")


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
                        "timestamp_ms": r["timestamp_ms"],
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
                print(f"    | offset {r['offset']} ts {r['timestamp_ms']} key {r['key']} value {r['value']}")
        if segment["error"]:
            print(f"  INVALID {segment['error']} (the log recovers by cutting here)")


def _text(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.hex()


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # usage errors (2) and --help (0), as a return value
        return exc.code if isinstance(exc.code, int) else 2
    try:
        return args.run(args)
    except RaylogError as exc:
        print(f"raylog: {type(exc).__name__}: {exc}", file=sys.stderr)
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
    commands = parser.add_subparsers(dest="command", required=True)
    _add_start_stop_status(commands)
    _add_topics(commands)
    _add_replica_management(commands)
    _add_produce_consume(commands)
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
    stop = _command(commands, "stop", _stop, "stop raylog's actors (data stays on disk)")
    stop.add_argument("--ray", action="store_true", help="also `ray stop` the local head `raylog start` launched")
    status = _command(commands, "status", _status, "brokers, controller, topics, leaders and ISR")
    status.add_argument("--json", action="store_true", help="machine-readable output")


def _add_topics(commands: Any) -> None:
    topics = commands.add_parser("topics", help="create, list, describe and delete topics")
    actions = topics.add_subparsers(dest="action", required=True)
    create = _command(actions, "create", _topics_create, "create a topic")
    create.add_argument("name")
    create.add_argument("--partitions", type=int, default=1)
    create.add_argument("--replication-factor", type=int, default=1)
    create.add_argument(
        "--config",
        type=_config_pair,
        nargs="+",
        action="extend",
        default=[],
        metavar="K=V",
        help="topic configs by Kafka name, e.g. retention.ms=60000",
    )
    _command(actions, "list", _topics_list, "list topic names")
    describe = _command(actions, "describe", _topics_describe, "partitions (leader, epoch, replicas, ISR), config")
    describe.add_argument("names", nargs="*", metavar="NAME", help="default: every topic")
    describe.add_argument("--json", action="store_true", help="machine-readable output")
    delete = _command(actions, "delete", _topics_delete, "delete topics and their data")
    delete.add_argument("names", nargs="+", metavar="NAME")


def _reassign_partitions(args: argparse.Namespace) -> int:
    targets = {raylog.TopicPartition(args.topic, p): args.replicas for p in args.partitions}
    with _connected(args) as cluster:
        raylog.Admin(cluster).alter_partition_reassignments(targets)
    print(
        f"reassigning {args.topic} partitions {args.partitions} to brokers {args.replicas}: new replicas "
        "fill by fetching; old ones go once every new one is in sync (see 'raylog reassign-partitions --list')"
    )
    return 0


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
        moved = raylog.Admin(cluster).elect_leaders(args.topics or None)
    print(f"preferred-leader election: {moved} partitions changed leader")
    return 0


def _add_replica_management(commands: Any) -> None:
    reassign = commands.add_parser("reassign-partitions", help="move partitions to other brokers, change replication")
    actions = reassign.add_subparsers(dest="action", required=True)
    start = _command(actions, "start", _reassign_partitions, "move partitions to a new replica set")
    start.add_argument("topic")
    start.add_argument("--partitions", type=_id_list, required=True, help="e.g. 0,1,2")
    start.add_argument("--replicas", type=_id_list, required=True, help="target brokers, preferred leader first")
    listing = _command(actions, "list", _list_reassignments, "reassignments under way")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    elect = _command(commands, "elect-leaders", _elect_leaders, "move leadership back to preferred replicas")
    elect.add_argument("topics", nargs="*", metavar="TOPIC", help="default: every topic")


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
    consume.add_argument("--max-messages", type=_positive_int, help="stop after this many records")
    consume.add_argument("--timeout-ms", type=_non_negative_int, help="stop after this long without records")
    consume.add_argument("--print-offsets", action="store_true", help="prefix partition:offset")
    consume.add_argument("--print-key", action="store_true", help="print KEY<SEP>VALUE")
    consume.add_argument("--key-separator", default="\t", help="between key and value (default: tab)")


def _config_pair(text: str) -> tuple[str, str]:
    key, found, value = text.partition("=")
    if not found or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


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


if __name__ == "__main__":
    sys.exit(main())
