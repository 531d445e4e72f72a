"""How every command but ``dump-log`` reaches raylog: the Ray cluster to join (``--address``,
RAY_ADDRESS or the local head ``raylog start`` launched), who to act as (``--command-config``)
and the raylog cluster to attach to (``--cluster-name``), or with ``start`` to create.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import socket
import tempfile
from collections.abc import Iterator
from typing import TYPE_CHECKING

import raylog
from raylog.cli.arguments import UsageError
from raylog.common.names import NAMESPACE, controller_name
from raylog.errors import RaylogError

if TYPE_CHECKING:
    from raylog.clients.cluster import RaylogCluster


#: Where ``raylog start`` records the local Ray head it launched (override: RAYLOG_CLI_STATE).
DEFAULT_HEAD_FILE = os.path.join(tempfile.gettempdir(), "raylog-cli", "ray-head.json")


class ClusterNotRunningError(RaylogError):
    """No Ray cluster to join, or no raylog cluster of that name on it."""


@contextlib.contextmanager
def connected(args: argparse.Namespace, create: bool = False) -> Iterator[RaylogCluster]:
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
    head = read_head()
    if head is None:
        raise ClusterNotRunningError("no Ray cluster to connect to: run `raylog start` first (or pass --address)")
    if not reachable(head["address"]):
        raise ClusterNotRunningError(f"the local Ray head at {head['address']} is gone: run `raylog start` again")
    return "auto"


def _join_ray(address: str) -> None:
    import ray

    if not reachable(address):
        raise ClusterNotRunningError(f"no Ray cluster answers at {address}: run `raylog start` first")
    try:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
    except ConnectionError as exc:
        raise ClusterNotRunningError(f"{exc} (or run `raylog start` first)") from None


def reachable(address: str, timeout_s: float = 2.0) -> bool:
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
        raise UsageError(f"--command-config: {exc}") from None
    settings: dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        match = re.match(r"([^=:\s]+)\s*[=:]\s*(.*)$", line)
        if match is None:
            raise UsageError(f"--command-config {path}:{number}: not a key=value line")
        key, value = match.groups()
        if key == "sasl.jaas.config":
            found = dict(_JAAS.findall(value))
            settings.update({_COMMAND_CONFIG[f"sasl.{k}"]: v for k, v in found.items()})
        elif key in _COMMAND_CONFIG:
            settings[_COMMAND_CONFIG[key]] = value
        else:
            known = ", ".join([*_COMMAND_CONFIG, "sasl.jaas.config"])
            raise UsageError(f"--command-config {path}:{number}: unknown setting {key!r} (known: {known})")
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
            raise UsageError("give the listener either as --kafka-port / --kafka-host or as --config listeners=...")
        config["listeners"] = f"PLAINTEXT://{args.kafka_host}:{kafka_port}"
    return raylog.connect(
        address,
        data_dir=args.data_dir,
        num_brokers=args.num_brokers,
        cluster_name=args.cluster_name,
        config=config,
        **_credentials(args),
    )


def head_file() -> str:
    return os.environ.get("RAYLOG_CLI_STATE") or DEFAULT_HEAD_FILE


def read_head() -> dict | None:
    """The local Ray head ``raylog start`` launched, if it recorded one."""
    try:
        with open(head_file(), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
