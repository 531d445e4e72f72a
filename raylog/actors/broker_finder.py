"""Where the brokers are: the controller's broker registration (KRaft's broker heartbeats
and registrations, found here in Ray's node table).

In the embedded mode, ``num_brokers`` brokers share the head node, each with its own data
directory ``<data_dir>/broker-<id>``. Otherwise a node labelled ``raylog.broker=<id>`` is
broker <id> (data directory from the label ``raylog.data_dir``, else ``RAYLOG_DATA_DIR`` on
that node, else ``DEFAULT_DATA_DIR``); with no labelled node, every node is a broker whose id
is assigned once and kept in ``<data_dir>/meta.json``. A node whose data directory belongs to
another cluster or broker is refused (kept in :attr:`BrokerFinder.refused`, shown by
``raylog status``). A broker that (re)joins counts as found only once the logs on its disk
that are not its replicas' are moved out of the way (:mod:`raylog.storage.log_dirs`).

What the brokers found decide (the live set, elections) is the controller's
:class:`~raylog.coordination.replication_control.ReplicationControl`'s: this class only asks
the nodes.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from raylog.actors.replica_parts import PEER_CALL_TIMEOUT_S
from raylog.common.names import DEFAULT_DATA_DIR
from raylog.coordination.metadata import MetadataImage
from raylog.errors import RaylogError, StorageError
from raylog.storage import log_dirs
from raylog.types import BrokerInfo

logger = logging.getLogger(__name__)

BROKER_LABEL = "raylog.broker"
DATA_DIR_LABEL = "raylog.data_dir"


def broker_identity(data_dir: str | None, cluster_id: str, broker_id: int | None) -> tuple[int, str, str] | None:
    """Read (or, given ``broker_id``, format) the data directory of the broker on this node
    (:func:`raylog.storage.log_dirs.load_data_dir`).

    Returns:
        ``(broker_id, data_dir, directory_id)`` kept on disk, or None when there is none and
        no id to give.

    Raises:
        InconsistentClusterIdError: the directory belongs to another cluster.
        InvalidConfigError: it belongs to another broker id.
        StorageError: its ``meta.json`` cannot be read or written.
    """
    data_dir = data_dir or os.environ.get("RAYLOG_DATA_DIR") or DEFAULT_DATA_DIR
    identity = log_dirs.load_data_dir(data_dir, cluster_id, broker_id)
    return None if identity is None else (identity.broker_id, data_dir, identity.directory_id)


_remote_broker_identity = ray.remote(num_cpus=0, max_retries=0)(broker_identity)
_remote_mark_stray_logs = ray.remote(num_cpus=0, max_retries=0)(log_dirs.mark_stray_logs)
_remote_delete_stray_logs = ray.remote(num_cpus=0, max_retries=0)(log_dirs.delete_stray_logs)


class BrokerFinder:
    """See the module docstring. Concurrency: the controller's event loop, one round at a time."""

    def __init__(
        self, image: MetadataImage, data_dir: str, num_brokers: int, embedded: bool, spawn: Callable[[Any], None]
    ):
        self.image = image
        self.data_dir = data_dir
        self.num_brokers = num_brokers
        self.embedded = embedded
        self._spawn = spawn
        #: Node id -> why it was refused as a broker (e.g. a disk of another cluster).
        self.refused: dict[str, str] = {}
        # Broker id -> its scan for stray logs, unfinished when last looked at.
        self._stray_scans: dict[int, Any] = {}
        #: (node id, data dir, broker id) -> the broker-identity task that has not answered
        #: yet (awaited again by the next round).
        self._identity_asks: dict[tuple, Any] = {}

    async def find(self, live: set[int]) -> dict[int, tuple[str, str, str]]:
        """The brokers found: broker id -> (node id, data directory, directory id). One that
        was not ``live`` (or moved to another node) is left out until its stray logs are out
        of the way.

        Raises:
            InconsistentClusterIdError, InvalidConfigError or StorageError: embedded mode, a
                broker's data directory is refused (the start fails with it).
        """
        found = await (self._embedded() if self.embedded else self._nodes())
        for b, (node_id, d, _) in list(found.items()):
            returning = b not in live or self.image.brokers[b].node_id != node_id
            if returning and not await self._remove_stray_logs(b, node_id, d):
                del found[b]  # live only once its stray logs are out of the way: next round
        return found

    async def _embedded(self) -> dict[int, tuple[str, str, str]]:
        """Raises: InconsistentClusterIdError, InvalidConfigError or StorageError when a broker's
        data directory is refused (the start fails with it)."""
        node_id = ray.get_runtime_context().get_node_id()
        found = {}
        for b in range(self.num_brokers):
            data_dir = os.path.join(self.data_dir, f"broker-{b}")
            try:
                broker_id, d, directory_id = broker_identity(data_dir, self.image.cluster_id, b)
            except RaylogError as exc:
                logger.error("broker %d refused: %s", b, exc)
                raise
            found[broker_id] = (node_id, d, directory_id)
        return found

    async def _nodes(self) -> dict[int, tuple[str, str, str]]:
        every_node = ray.nodes()
        nodes = [n for n in every_node if n["Alive"]]
        alive = {n["NodeID"] for n in nodes}
        self.refused = {node_id: why for node_id, why in self.refused.items() if node_id in alive}
        labelled = [n for n in nodes if BROKER_LABEL in n.get("Labels", {}) and n["NodeID"] not in self.refused]
        found: dict[int, tuple[str, str, str]] = {}
        # A cluster with labelled brokers stays one even while all of them are down (dead
        # nodes stay in Ray's table): the unlabelled nodes must not become brokers then.
        if any(BROKER_LABEL in n.get("Labels", {}) for n in every_node):
            for node in labelled:
                labels = node["Labels"]
                known = self.image.brokers.get(int(labels[BROKER_LABEL]))
                try:
                    if known is not None and known.node_id in alive:
                        # The registered node still lives: it stays the broker, even while a
                        # replacement with the same label joins before Ray declares it dead.
                        identity = self._known_identity(known) or await self._identity(
                            known.node_id, known.data_dir, known.broker_id
                        )
                        node_id = known.node_id
                    else:
                        identity = await self._identity(
                            node["NodeID"], labels.get(DATA_DIR_LABEL), int(labels[BROKER_LABEL])
                        )
                        node_id = node["NodeID"]
                except _Unanswered:
                    continue
                if identity is not None:
                    found[identity[0]] = (node_id, *identity[1:])
            return found
        unknown = []
        for node in (n for n in nodes if n["NodeID"] not in self.refused):
            known = [b for b in self.image.brokers.values() if b.node_id == node["NodeID"]]
            try:
                identity = (known and self._known_identity(known[0])) or await self._identity(
                    node["NodeID"], None, None
                )
            except _Unanswered:
                continue
            if identity is None:
                unknown.append(node)
            else:
                found[identity[0]] = (node["NodeID"], *identity[1:])
        next_id = max([*found, *self.image.brokers, -1]) + 1
        for node in sorted((n for n in unknown if n["NodeID"] not in self.refused), key=lambda n: n["NodeID"]):
            try:
                identity = await self._identity(node["NodeID"], None, next_id)
            except _Unanswered:
                continue
            if identity is not None:
                found[identity[0]] = (node["NodeID"], *identity[1:])
                next_id += 1
        return found

    def _known_identity(self, known: BrokerInfo) -> tuple[int, str, str] | None:
        """A registered broker's identity as journaled; None when its directory id is not
        (a journal from before directory ids): then it is read from its disk once."""
        directory_id = self.image.directory_ids.get(known.broker_id)
        return None if directory_id is None else (known.broker_id, known.data_dir, directory_id)

    async def _remove_stray_logs(self, broker_id: int, node_id: str, data_dir: str) -> bool:
        """Move the stray logs of a broker that (re)joins out of the way (topics deleted,
        created again or moved off it while it was away: see :mod:`raylog.storage.log_dirs`),
        then delete them in the background. Returns whether the broker may be live: not
        while a scan of its directory is unfinished, for a late scan would take the logs of
        replicas created since for strays. In the embedded mode the scan runs here and a
        failure fails the start.

        Raises:
            StorageError: embedded mode, the scan failed.
        """
        assigned = {
            (p.topic, p.partition): self.image.topics[p.topic].topic_id
            for p in self.image.partitions()
            if broker_id in p.replicas
        }
        strategy = NodeAffinitySchedulingStrategy(node_id, soft=False)
        if self.embedded:
            stray = log_dirs.mark_stray_logs(data_dir, assigned)
        else:
            pending = self._stray_scans.pop(broker_id, None)
            if pending is not None and not ray.wait([pending], timeout=0)[0]:
                self._stray_scans[broker_id] = pending
                return False
            scan = _remote_mark_stray_logs.options(scheduling_strategy=strategy).remote(data_dir, assigned)
            try:
                stray = await asyncio.wait_for(scan, PEER_CALL_TIMEOUT_S)
            except asyncio.TimeoutError:
                self._stray_scans[broker_id] = scan
                return False
            except ray.exceptions.RayError as exc:
                logger.warning("broker %d: cannot look for stray logs in %s: %s", broker_id, data_dir, exc)
                return False
        if stray:
            logger.warning("broker %d: stray logs in %s, deleting them: %s", broker_id, data_dir, stray)
        # Also those that an earlier deletion left behind. In the embedded mode in a thread
        # here: a Ray task would start a worker process for it.
        if self.embedded:
            self._spawn(_delete_stray_logs_here(broker_id, data_dir))
        else:
            self._spawn(quietly(_remote_delete_stray_logs.options(scheduling_strategy=strategy).remote(data_dir)))
        return True

    async def _identity(self, node_id: str, data_dir: str | None, broker_id: int | None) -> tuple | None:
        """:func:`broker_identity` run on node ``node_id``; None when it has none to give, or
        when the node is refused (its data directory belongs to another cluster or broker, or
        cannot be read): logged, kept in :attr:`refused` (shown by ``raylog status``) and not
        asked again while the node lives.

        Raises:
            _Unanswered: the node did not answer within ``PEER_CALL_TIMEOUT_S`` (its first
                worker is still starting): the next round awaits the same task again.
        """
        strategy = NodeAffinitySchedulingStrategy(node_id, soft=False)
        question = (node_id, data_dir, broker_id)
        ask = self._identity_asks.pop(question, None) or _remote_broker_identity.options(
            scheduling_strategy=strategy
        ).remote(data_dir, self.image.cluster_id, broker_id)
        try:
            return await asyncio.wait_for(ask, PEER_CALL_TIMEOUT_S)
        except asyncio.TimeoutError:
            # A node still starting its first worker (a loaded machine): not a broker yet,
            # asked again (the same task) by the next round of the watch.
            self._identity_asks[question] = ask
            logger.warning("node %s: no broker identity within %.0f s; asked again", node_id, PEER_CALL_TIMEOUT_S)
            raise _Unanswered(node_id) from None
        except RaylogError as exc:
            cause = getattr(exc, "cause", exc)  # the error raised on the node, without Ray's traceback
            why = f"{type(cause).__name__}: {cause}"
            self.refused[node_id] = why
            logger.error("node %s refused as a broker of cluster %s: %s", node_id, self.image.cluster_id, why)
            return None


class _Unanswered(Exception):
    """A node did not answer in time whether it is a broker (see ``BrokerFinder._identity``)."""


async def _delete_stray_logs_here(broker_id: int, data_dir: str) -> None:
    try:
        await asyncio.to_thread(log_dirs.delete_stray_logs, data_dir)
    except StorageError as exc:
        logger.warning("broker %d: %s", broker_id, exc)


async def quietly(ref) -> None:
    """Await a fire-and-forget call to another actor; a failure is left to retries elsewhere."""
    try:
        await asyncio.wait_for(ref, PEER_CALL_TIMEOUT_S)
    except (asyncio.TimeoutError, ray.exceptions.RayError):
        pass
