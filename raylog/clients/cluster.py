"""``raylog.connect()``: find or start a raylog cluster on Ray, and cache its metadata.

Embedded default (no address): starts a local Ray if none is running, and a raylog
cluster with ``num_brokers`` brokers on this node, data under ``data_dir``. With an
address (``"auto"`` or ``"ray://..."``/``"host:port"``), joins that Ray cluster and starts
raylog there if it is not running yet; brokers are its nodes (see the controller).

A :class:`RaylogCluster` pickles by name, so clients built on it work inside Ray tasks and
actors (which are already connected to Ray).
"""

from __future__ import annotations

import copy
import logging
import os
import threading
import time
from functools import cached_property
from typing import Any

import ray

from raylog.clients.security import ClientSession
from raylog.common.names import (
    INTERNAL_TOPICS,
    LISTENER_START_TIMEOUT_S,
    NAMESPACE,
    controller_name,
)
from raylog.config import ControllerConfig
from raylog.errors import (
    InvalidConfigError,
    LeaderNotAvailableError,
    RaylogError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)
from raylog.launcher import create_controller
from raylog.transport import call
from raylog.types import BrokerInfo, TopicDescription, TopicPartition

logger = logging.getLogger(__name__)

#: How long a metadata call may take (the controller may be restarting).
METADATA_TIMEOUT_S = 60.0
#: How long the controller's start may take: registering the brokers, then (with the
#: ``listeners`` setting) each broker's Kafka listener starting, which waits up to
#: LISTENER_START_TIMEOUT_S for a process that imports raylog and compiles its conversions.
START_TIMEOUT_S = METADATA_TIMEOUT_S + LISTENER_START_TIMEOUT_S
#: Object store of an embedded Ray: raylog's batches pass through it briefly.
EMBEDDED_OBJECT_STORE_BYTES = 512 * 1024 * 1024


class Metadata:
    """An immutable snapshot of what the controller said."""

    def __init__(self, answer: dict[str, Any]):
        self.cluster_id: str = answer["cluster_id"]
        self.brokers: dict[int, BrokerInfo] = answer["brokers"]
        self.topics: dict[str, TopicDescription] = answer["topics"]
        self.leaders: dict[tuple[str, int], Any] = answer["leaders"]
        self.live: set[int] = answer["live"]
        self.reassignments: dict[tuple[str, int], tuple[int, ...]] = answer["reassignments"]
        #: Node id -> why the controller refused it as a broker (e.g. a disk of another cluster).
        self.refused_brokers: dict[str, str] = answer.get("refused_brokers", {})
        #: The names of the controller's ``listeners`` setting, in order (none without it).
        self.listener_names: tuple[str, ...] = answer.get("listener_names", ())
        #: Broker id -> listener name -> advertised ``(host, port)`` (live brokers whose
        #: Kafka listeners listen).
        self.listener_endpoints: dict[int, dict[str, tuple[str, int]]] = answer.get("listeners", {})
        #: Broker id -> advertised ``(host, port)`` of its first Kafka listener (see :meth:`addresses`).
        self.listeners: dict[int, tuple[str, int]] = self.addresses()

    def addresses(self, listener: str | None = None) -> dict[int, tuple[str, int]]:
        """Broker id -> advertised ``(host, port)`` on Kafka listener ``listener`` (a name of the
        ``listeners`` setting, in any case; None: the first), of the live brokers where it listens.

        Raises:
            InvalidConfigError: the cluster has no listener of that name.
        """
        if listener is None:
            if not self.listener_names:
                return {}
            listener = self.listener_names[0]
        name = listener.upper()
        if name not in self.listener_names:
            known = ", ".join(self.listener_names) or "none"
            raise InvalidConfigError(f"the cluster has no Kafka listener {listener!r} (its listeners: {known})")
        return {b: by_name[name] for b, by_name in sorted(self.listener_endpoints.items()) if name in by_name}

    @property
    def lost_partitions(self) -> list[TopicPartition]:
        """Partitions with no in-sync replica: every broker of their ISR came back with a new
        (wiped or replaced) log directory, so no replica is known to hold their records. They
        stay offline unless unclean leader election is enabled for their topic."""
        return [TopicPartition(t.name, p.partition) for t in self.topics.values() for p in t.partitions if not p.isr]

    @cached_property
    def partition_counts(self) -> dict[str, int]:
        """Topic -> partition count of every topic a consumer may subscribe to (internal ones
        left out)."""
        return {name: len(t.partitions) for name, t in self.topics.items() if name not in INTERNAL_TOPICS}

    def num_partitions(self, topic: str) -> int:
        try:
            return len(self.topics[topic].partitions)
        except KeyError:
            raise UnknownTopicOrPartitionError(f"unknown topic {topic!r}") from None

    def leader_epoch(self, tp: TopicPartition) -> int:
        """The leader epoch of ``tp`` as the controller said (-1 if unknown)."""
        try:
            return self.topics[tp.topic].partitions[tp.partition].leader_epoch
        except (KeyError, IndexError):
            return -1

    def has_partition(self, tp: TopicPartition) -> bool:
        return tp.topic in self.topics and 0 <= tp.partition < len(self.topics[tp.topic].partitions)

    def leader(self, tp: TopicPartition) -> Any:
        """The leader replica actor of ``tp``.

        Raises:
            UnknownTopicOrPartitionError, LeaderNotAvailableError (none live, or its actor is
            still starting: retriable).
        """
        if not self.has_partition(tp):
            raise UnknownTopicOrPartitionError(f"unknown partition {tp.topic}-{tp.partition}")
        try:
            return self.leaders[(tp.topic, tp.partition)]
        except KeyError:
            raise LeaderNotAvailableError(f"{tp.topic}-{tp.partition} has no leader right now") from None


class RaylogCluster:
    """A handle on a running raylog cluster: the controller plus a metadata cache.

    Concurrency: thread-safe (clients refresh metadata from their background threads).
    """

    def __init__(
        self, cluster_name: str, controller: Any, started_ray: bool = False, credentials: dict[str, Any] | None = None
    ):
        self.cluster_name = cluster_name
        self.controller = controller
        self._started_ray = started_ray
        #: Who the clients made on this handle are unless they say otherwise: kafka-python's
        #: security settings given to :func:`connect` (see :mod:`raylog.clients.security`).
        self._credentials = dict(credentials or {})
        self._session: ClientSession | None = None
        self._lock = threading.Lock()
        self._metadata: Metadata | None = None
        #: A metadata call of refresh_metadata() still on its way, and when it was made.
        self._refresh: tuple[Any, float] | None = None

    def __reduce__(self):
        # The Ray address goes along for processes that are not Ray workers (a Spark
        # executor's Python worker under RayDP): unpickling there connects to Ray first.
        # The credentials go along too: a task's clients are who the driver's are.
        return (_reattach, (self.cluster_name, ray.get_runtime_context().gcs_address, self._credentials))

    def session(self) -> ClientSession:
        """The principal of this handle's clients (authenticated once per process and handle,
        as the first client asks for its token)."""
        with self._lock:
            if self._session is None:
                self._session = ClientSession(self, **{"security_protocol": "PLAINTEXT", **self._credentials})
            return self._session

    def metadata(self, refresh: bool = False) -> Metadata:
        """The cached metadata of every topic this handle's principal may describe (fetched
        on first use or when ``refresh``)."""
        cached = self._metadata  # (read without the lock: a snapshot is replaced, never changed)
        if cached is not None and not refresh:
            return cached
        token = self.session().token()
        with self._lock:
            if self._metadata is None or refresh:
                ref = self.controller.metadata.remote(session=token)
                self._metadata = Metadata(call(ref, METADATA_TIMEOUT_S))
            return self._metadata

    def missing_topics_error(self, topics: list[str]) -> RaylogError:
        """Why ``topics``, named by a client, are not in its metadata, as the controller
        answers when asked for them by name: TopicAuthorizationFailedError when this handle's
        principal may not describe one (whether or not it exists, as Kafka answers, so that
        its existence does not leak), else UnknownTopicOrPartitionError."""
        session = self.session()
        answer = call(self.controller.metadata.remote(list(topics), session=session.token()), METADATA_TIMEOUT_S)
        if answer["denied"]:
            names = ", ".join(map(repr, answer["denied"]))
            return TopicAuthorizationFailedError(f"{session.principal} may not DESCRIBE the topics {names}")
        return UnknownTopicOrPartitionError(f"unknown topics: {', '.join(map(repr, topics))}")

    def refresh_metadata(self, wait_s: float) -> bool:
        """Ask the controller for fresh metadata without stopping long for it: wait for the
        answer until the call under way (made now if there is none) is ``wait_s`` old, as a
        Kafka listener waits for its own refresh (``BrokerContext.metadata``); an answer that
        comes later replaces the cached snapshot at the next call. Kafka's clients go on
        sending with what they know while a metadata update is in flight, so a controller that
        is paused or restarting holds up only what needs new metadata. Whether the snapshot is
        now fresh.

        Raises:
            RaylogError: the controller's call failed (the next call asks again).
        """
        token = self.session().token()
        with self._lock:
            if self._refresh is None or time.monotonic() - self._refresh[1] > METADATA_TIMEOUT_S:
                self._refresh = (self.controller.metadata.remote(session=token), time.monotonic())
            ref, asked_at = self._refresh
        ready, _ = ray.wait([ref], timeout=max(0.0, wait_s - (time.monotonic() - asked_at)))
        if not ready:
            return False
        with self._lock:
            if self._refresh is not None and self._refresh[0] is ref:
                self._refresh = None
            self._metadata = Metadata(call(ref, None))
        return True

    def bootstrap_servers(self, listener: str | None = None) -> str:
        """Kafka's ``bootstrap.servers`` for this cluster: ``"host:port,..."`` of every live
        broker's Kafka listener ``listener`` (a name of the controller's ``listeners``
        setting; None: its first), as advertised ("" when ``listeners`` is not set, or
        before the listeners start). Asks the controller (listeners start after the brokers).

        Raises:
            InvalidConfigError: the cluster has no listener of that name.

        Example: ``cluster.bootstrap_servers("EXTERNAL")`` -> ``"broker1.example.com:9094"``.
        """
        addresses = self.metadata(refresh=True).addresses(listener)
        return ",".join(f"{host}:{port}" for host, port in addresses.values())

    def speaking_for(self, session: ClientSession) -> RaylogCluster:
        """A copy of this handle for a client with credentials of its own (``session``): its
        metadata cache is its own (a principal sees the topics it may describe, and each Kafka
        client has its own metadata), and it pickles with the client's credentials."""
        handle = copy.copy(self)
        handle._lock = threading.Lock()
        handle._metadata = handle._refresh = None
        handle._session, handle._credentials = session, session.settings
        return handle

    def shutdown(self) -> None:
        """Stop every raylog actor of this cluster (data stays on disk), and Ray too if
        :func:`connect` started it."""
        try:
            call(self.controller.shutdown.remote(), METADATA_TIMEOUT_S)
        finally:
            ray.kill(self.controller, no_restart=True)
            if self._started_ray:
                ray.shutdown()


def client_handle(cluster: Any, timeout_s: float, *settings: str | None) -> tuple[Any, ClientSession]:
    """The handle and session of a client made on ``cluster`` with kafka-python's security
    ``settings`` (see :meth:`ClientSession.checked`): ``cluster`` itself when the client
    gives none (it is who the handle's clients are), else :meth:`RaylogCluster.speaking_for`
    the client.

    Raises:
        InvalidConfigError, SaslAuthenticationError, UnsupportedSaslMechanismError.
    """
    session = ClientSession.checked(cluster, timeout_s, *settings)
    return (cluster, session) if session.inherited else (cluster.speaking_for(session), session)


def require_cluster(cluster: Any, client: str) -> None:
    """Refuse what a kafka-python user passes where raylog wants the cluster handle (a
    ``bootstrap_servers`` string or list, or a KafkaConsumer's first topic).

    Raises:
        TypeError: ``cluster`` is a string, bytes, or a list or tuple.
    """
    if isinstance(cluster, (str, bytes, list, tuple)):
        raise TypeError(
            f"{client}'s first argument is the cluster from raylog.connect() (where kafka-python takes "
            f"bootstrap_servers=...; a consumer's topics follow it), got {cluster!r}"
        )


def _reattach(cluster_name: str, ray_address: str, credentials: dict[str, Any]) -> RaylogCluster:
    if not ray.is_initialized():
        ray.init(address=ray_address, configure_logging=False, log_to_driver=False)
    controller = ray.get_actor(controller_name(cluster_name), namespace=NAMESPACE)
    return RaylogCluster(cluster_name, controller, credentials=credentials)


def connect(
    address: str | None = None,
    *,
    data_dir: str | None = None,
    num_brokers: int | None = None,
    cluster_name: str = "default",
    config: dict[str, Any] | None = None,
    security_protocol: str | None = None,
    sasl_mechanism: str | None = None,
    sasl_plain_username: str | None = None,
    sasl_plain_password: str | None = None,
) -> RaylogCluster:
    """Connect to raylog, starting it (and a local Ray) when needed.

    Args:
        address: None for the embedded default (a local Ray and a local raylog cluster);
            ``"auto"`` or a Ray address to join an existing Ray cluster.
        data_dir: where brokers keep their logs; default ``$RAYLOG_DATA_DIR`` or
            ``/tmp/raylog``. Embedded brokers use ``<data_dir>/broker-<id>``.
        num_brokers: embedded mode only: how many brokers share this node (default 1).
        cluster_name: several raylog clusters can share one Ray cluster by name.
        config: controller settings by Kafka name (see :class:`raylog.config.ControllerConfig`),
            used when this call starts the cluster.
        security_protocol, sasl_mechanism, sasl_plain_username, sasl_plain_password: who
            the clients made on the handle are (kafka-python's settings; each client may
            give its own): with ``SASL_PLAINTEXT`` they authenticate as
            ``User:<sasl_plain_username>`` (see :mod:`raylog.clients.security`). When this
            call starts the cluster, that user is created with it (SCRAM-SHA-256 and
            SCRAM-SHA-512 credentials, as Kafka's ``kafka-storage format --add-scram``): the
            first user of a cluster whose ACLs admit only its ``super.users``.

    Raises:
        InvalidConfigError: a setting refused (before anything starts).
        SaslAuthenticationError: the cluster refused the credentials.

    Returns:
        A :class:`RaylogCluster`; pass it to Producer, Consumer and Admin.

    Example:
        >>> cluster = raylog.connect()                       # doctest: +SKIP
        >>> Admin(cluster).create_topics([NewTopic("clicks", 3)])  # doctest: +SKIP
    """
    embedded = address is None
    if num_brokers is not None and (not embedded or num_brokers < 1):
        raise InvalidConfigError("num_brokers is for the embedded mode and must be >= 1")
    # A refused setting is the caller's typed error here: in the controller's creation it
    # would fail a detached actor that Ray restarts again and again.
    ControllerConfig.from_properties(config or {})
    credentials = {
        key: value
        for key, value in (
            ("security_protocol", security_protocol),
            ("sasl_mechanism", sasl_mechanism),
            ("sasl_plain_username", sasl_plain_username),
            ("sasl_plain_password", sasl_plain_password),
        )
        if value is not None
    }
    ClientSession(None, **credentials)  # refused settings fail here, before anything starts
    started_ray = False
    if not ray.is_initialized():
        # The process's logging stays the application's (Ray's warnings and errors still reach
        # stderr, its INFO lines do not). An embedded cluster's actors (every replica, Spark's
        # executors) write to Ray's log files, and to this process too only with Ray's own
        # RAY_LOG_TO_DRIVER=1; a Ray cluster that is joined forwards them as Ray does.
        if embedded:
            ray.init(
                address="local",
                object_store_memory=EMBEDDED_OBJECT_STORE_BYTES,
                include_dashboard=False,
                configure_logging=False,
                log_to_driver=os.environ.get("RAY_LOG_TO_DRIVER", "0").lower() in ("1", "true"),
            )
        else:
            ray.init(address=address, configure_logging=False)
        started_ray = True
    try:  # a running cluster: its handle is all a client needs
        controller = ray.get_actor(controller_name(cluster_name), namespace=NAMESPACE)
    except ValueError:
        controller = create_controller(cluster_name, data_dir, num_brokers or 1, embedded, config, credentials)
    call(controller.start.remote(), START_TIMEOUT_S)
    cluster = RaylogCluster(cluster_name, controller, started_ray, credentials)
    cluster.session().token()  # refused credentials fail here
    _report_identity_problems(cluster_name, cluster.metadata())
    return cluster


def _report_identity_problems(cluster_name: str, metadata: Metadata) -> None:
    """Log what the controller found wrong with the brokers' data directories (also shown by
    ``raylog status``): partitions whose data is gone, and nodes refused as brokers."""
    lost = metadata.lost_partitions
    if lost:
        shown = ", ".join(f"{tp.topic}-{tp.partition}" for tp in lost[:10]) + (" ..." if len(lost) > 10 else "")
        logger.warning(
            "raylog cluster %r: %d partition(s) have no in-sync replica left (%s): every broker of their ISR came "
            "back with a new log directory (wiped or replaced disks, or brokers on fresh disks under an older "
            "cluster's controller journal), so their records are gone. They stay offline: delete them, or enable "
            "unclean.leader.election.enable on their topics to bring them back with what their other replicas hold",
            cluster_name,
            len(lost),
            shown,
        )
    for node_id, why in sorted(metadata.refused_brokers.items()):
        logger.error("raylog cluster %r refused node %s as a broker: %s", cluster_name, node_id, why)
