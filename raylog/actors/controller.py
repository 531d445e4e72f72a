"""The controller actor: one named, detached actor per raylog cluster, on the head node.

It hosts the :class:`~raylog.coordination.metadata.MetadataImage` and its journal (on the
head node's disk, replayed when Ray restarts the actor), registers brokers, places
replicas, creates the replica actors (hard node affinity, restarted in place by Ray) and
answers metadata requests. Every change is journaled before it is applied or acted on.

Brokers: in the embedded mode, ``num_brokers`` brokers share the head node, each with its
own data directory ``<data_dir>/broker-<id>``. Otherwise a node labelled
``raylog.broker=<id>`` is broker <id> (data directory from the label ``raylog.data_dir``,
else ``RAYLOG_DATA_DIR`` on that node, else ``DEFAULT_DATA_DIR``); with no labelled node,
every node is a broker whose id is assigned once and kept in ``<data_dir>/meta.json``.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from raylog.actors.names import NAMESPACE, replica_name
from raylog.actors.replica import PartitionReplicaActor
from raylog.coordination.metadata import MetadataImage, MetadataJournal
from raylog.errors import InvalidConfigError, RaylogError
from raylog.protocol import error_fields
from raylog.types import NewTopic, TopicDescription

DEFAULT_DATA_DIR = "/tmp/raylog"
BROKER_LABEL = "raylog.broker"
DATA_DIR_LABEL = "raylog.data_dir"
HEAD_RESOURCE = "node:__internal_head__"
#: Producer ids are journaled a block at a time, not one fsync per producer.
PRODUCER_ID_BLOCK = 1000


def broker_identity(data_dir: str | None, cluster_id: str, broker_id: int | None) -> tuple[int, str] | None:
    """Read (or, given ``broker_id``, write) ``<data_dir>/meta.json`` on this node.

    Returns:
        ``(broker_id, data_dir)`` kept on disk, or None when there is none and no id to give.

    Raises:
        InvalidConfigError: the disk belongs to another cluster or another broker id.
    """
    data_dir = data_dir or os.environ.get("RAYLOG_DATA_DIR") or DEFAULT_DATA_DIR
    path = os.path.join(data_dir, "meta.json")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            meta = json.load(f)
        if meta["cluster_id"] != cluster_id:
            raise InvalidConfigError(f"{path} belongs to raylog cluster {meta['cluster_id']}, not {cluster_id}")
        if broker_id is not None and meta["broker_id"] != broker_id:
            raise InvalidConfigError(f"{path} says broker {meta['broker_id']}, the node label says {broker_id}")
        return meta["broker_id"], data_dir
    if broker_id is None:
        return None
    os.makedirs(data_dir, exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump({"cluster_id": cluster_id, "broker_id": broker_id, "version": 1}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)
    return broker_id, data_dir


_remote_broker_identity = ray.remote(num_cpus=0, max_retries=0)(broker_identity)


class ControllerActor:
    """See the module docstring. Concurrency: one asyncio loop; metadata changes run one at
    a time under ``_lock``."""

    def __init__(self, cluster_name: str, data_dir: str, num_brokers: int, embedded: bool):
        self.cluster_name = cluster_name
        self.data_dir = data_dir
        self.num_brokers = num_brokers
        self.embedded = embedded
        self.image = MetadataImage()
        self.journal = MetadataJournal(os.path.join(data_dir, "controller", "metadata.journal"))
        for record in self.journal.replay():
            self.image.apply(record)
        if self.image.cluster_id is None:
            self._commit([{"type": "cluster", "cluster_id": uuid.uuid4().hex}])
        self.replicas: dict[tuple[str, int, int], Any] = {}
        # Ids of the block journaled last may have been handed out before a restart: skip it.
        self._next_producer_id = self.image.producer_id_block_end
        self._lock: asyncio.Lock | None = None
        self._started = False

    def _commit(self, records: list[dict[str, Any]]) -> None:
        self.journal.append(records)
        for record in records:
            self.image.apply(record)

    def _guard(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    # --- start-up -----------------------------------------------------------------------

    async def start(self) -> dict:
        """Register brokers and make sure every replica actor exists (idempotent)."""
        async with self._guard():
            if not self._started:
                await self._register_brokers()
                for topic in list(self.image.topics.values()):
                    await self._ensure_replicas(topic)
                self._started = True
        return {"cluster_id": self.image.cluster_id, "brokers": sorted(self.image.brokers)}

    async def _register_brokers(self) -> None:
        found = await (self._embedded_brokers() if self.embedded else self._node_brokers())
        changes = [
            {"type": "broker", "broker_id": b, "node_id": node_id, "data_dir": d}
            for b, (node_id, d) in sorted(found.items())
            if b not in self.image.brokers
            or self.image.brokers[b].node_id != node_id
            or self.image.brokers[b].data_dir != d
        ]
        if changes:
            self._commit(changes)

    async def _embedded_brokers(self) -> dict[int, tuple[str, str]]:
        node_id = ray.get_runtime_context().get_node_id()
        found = {}
        for b in range(self.num_brokers):
            broker_id, d = broker_identity(os.path.join(self.data_dir, f"broker-{b}"), self.image.cluster_id, b)
            found[broker_id] = (node_id, d)
        return found

    async def _node_brokers(self) -> dict[int, tuple[str, str]]:
        nodes = [n for n in ray.nodes() if n["Alive"]]
        labelled = [n for n in nodes if BROKER_LABEL in n.get("Labels", {})]
        found: dict[int, tuple[str, str]] = {}
        if labelled:
            for node in labelled:
                labels = node["Labels"]
                broker_id, d = await self._identity(node, labels.get(DATA_DIR_LABEL), int(labels[BROKER_LABEL]))
                found[broker_id] = (node["NodeID"], d)
            return found
        unknown = []
        for node in nodes:
            identity = await self._identity(node, None, None)
            if identity is None:
                unknown.append(node)
            else:
                found[identity[0]] = (node["NodeID"], identity[1])
        next_id = max([*found, *self.image.brokers, -1]) + 1
        for node in sorted(unknown, key=lambda n: n["NodeID"]):
            broker_id, d = await self._identity(node, None, next_id)
            found[broker_id] = (node["NodeID"], d)
            next_id += 1
        return found

    async def _identity(self, node: dict, data_dir: str | None, broker_id: int | None):
        strategy = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
        return await _remote_broker_identity.options(scheduling_strategy=strategy).remote(
            data_dir, self.image.cluster_id, broker_id
        )

    # --- replicas -----------------------------------------------------------------------

    async def _ensure_replicas(self, topic: TopicDescription) -> None:
        waits = []
        for p in topic.partitions:
            for broker_id in p.replicas:
                handle = self._replica_actor(topic, p.partition, broker_id)
                waits.append(handle.ready.remote())
        await asyncio.gather(*waits)

    def _replica_actor(self, topic: TopicDescription, partition: int, broker_id: int):
        key = (topic.name, partition, broker_id)
        if key in self.replicas:
            return self.replicas[key]
        broker = self.image.brokers[broker_id]
        state = topic.partitions[partition]
        handle = (
            ray.remote(PartitionReplicaActor)
            .options(
                name=replica_name(self.cluster_name, topic.topic_id, partition, broker_id),
                namespace=NAMESPACE,
                lifetime="detached",
                get_if_exists=True,
                max_restarts=-1,
                max_task_retries=0,
                num_cpus=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(broker.node_id, soft=False),
            )
            .remote(
                topic.name,
                partition,
                broker_id,
                broker.data_dir,
                topic.config,
                state.leader,
                state.leader_epoch,
                list(state.replicas),
                list(state.isr),
            )
        )
        self.replicas[key] = handle
        return handle

    # --- admin --------------------------------------------------------------------------

    async def create_topics(self, topics: list[NewTopic]) -> dict[str, tuple[int, str]]:
        """Create each topic; per topic ``(error_code, message)``, code 0 on success."""
        await self.start()
        results = {}
        async with self._guard():
            for new in topics:
                try:
                    record = self.image.create_topic(new.name, new.num_partitions, new.replication_factor, new.config)
                    self._commit([record])
                    await self._ensure_replicas(self.image.topics[new.name])
                    results[new.name] = (0, "")
                except RaylogError as exc:
                    fields = error_fields(exc)
                    results[new.name] = (fields["error_code"], fields["error_message"])
        return results

    async def delete_topics(self, names: list[str]) -> dict[str, tuple[int, str]]:
        """Delete each topic and its replicas' data; per topic ``(error_code, message)``."""
        await self.start()
        results = {}
        async with self._guard():
            for name in names:
                try:
                    record = self.image.delete_topic(name)
                    topic = self.image.topics[name]
                    self._commit([record])
                    await self._remove_replicas(topic)
                    results[name] = (0, "")
                except RaylogError as exc:
                    fields = error_fields(exc)
                    results[name] = (fields["error_code"], fields["error_message"])
        return results

    async def _remove_replicas(self, topic: TopicDescription) -> None:
        handles = [
            self.replicas.pop((topic.name, p.partition, b), None) or self._lookup(topic, p.partition, b)
            for p in topic.partitions
            for b in p.replicas
        ]
        handles = [h for h in handles if h is not None]
        await asyncio.gather(*(h.delete_data.remote() for h in handles), return_exceptions=True)
        for handle in handles:
            ray.kill(handle, no_restart=True)

    def _lookup(self, topic: TopicDescription, partition: int, broker_id: int):
        try:
            return ray.get_actor(replica_name(self.cluster_name, topic.topic_id, partition, broker_id), NAMESPACE)
        except ValueError:
            return None

    async def init_producer_id(self) -> int:
        """A producer id never handed out before (Kafka's InitProducerId)."""
        if self._next_producer_id >= self.image.producer_id_block_end:
            self._commit([self.image.allocate_producer_ids(PRODUCER_ID_BLOCK)])
            self._next_producer_id = self.image.producer_id_block_end - PRODUCER_ID_BLOCK
        self._next_producer_id += 1
        return self._next_producer_id - 1

    # --- metadata -----------------------------------------------------------------------

    async def metadata(self, topics: list[str] | None = None) -> dict:
        """Brokers, topics (all, or those named that exist) and each partition leader's actor."""
        await self.start()
        names = list(self.image.topics) if topics is None else [t for t in topics if t in self.image.topics]
        described = {name: self.image.topics[name] for name in names}
        leaders = {}
        for topic in described.values():
            for p in topic.partitions:
                if p.leader >= 0:
                    leaders[(topic.name, p.partition)] = self._replica_actor(topic, p.partition, p.leader)
        return {
            "cluster_id": self.image.cluster_id,
            "brokers": dict(self.image.brokers),
            "topics": described,
            "leaders": leaders,
        }

    async def replica_handles(self, topic: str) -> dict[tuple[int, int], Any]:
        """Every replica actor of ``topic`` by ``(partition, broker_id)`` (tests, tools)."""
        await self.start()
        described = self.image.topic(topic)
        return {
            (p.partition, b): self._replica_actor(described, p.partition, b)
            for p in described.partitions
            for b in p.replicas
        }

    async def shutdown(self) -> None:
        """Kill every replica actor (data stays on disk); the caller then kills this actor."""
        for handle in self.replicas.values():
            ray.kill(handle, no_restart=True)
        self.replicas.clear()
