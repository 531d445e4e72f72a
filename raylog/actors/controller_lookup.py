"""What clients and brokers look up: metadata with each leader's actor, the group and
transaction coordinators (creating their internal topics on first use), producer ids, the
replica actors, and waiting for leaders.

A part of :class:`~raylog.actors.controller.ControllerActor` (see
:class:`~raylog.actors.controller_parts.ControllerPart` for what the parts share).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from raylog.actors.controller_parts import CLUSTER, TOPIC, ControllerPart, require
from raylog.actors.replica_fleet import REPLICA_START_TIMEOUT_S, wait_for_event
from raylog.common.acl import CLUSTER_NAME, ResourceType
from raylog.common.acl import ACLOperation as Op
from raylog.common.names import OFFSETS_TOPIC, REMOTE_LOG_METADATA_TOPIC, TRANSACTION_TOPIC, remote_topic_name
from raylog.config import TopicConfig
from raylog.coordination.group import partition_for
from raylog.errors import (
    CoordinatorNotAvailableError,
    InvalidRequestError,
    UnknownTopicOrPartitionError,
)
from raylog.protocol import error_result
from raylog.storage import remote_log_metadata

logger = logging.getLogger(__name__)

#: Producer ids are journaled a block at a time, not one fsync per producer.
PRODUCER_ID_BLOCK = 1000


class ClusterLookup(ControllerPart):
    """See the module docstring."""

    async def find_coordinator(self, group_id: str, session: str | None = None) -> tuple[int, Any]:
        """``(partition, leader actor or None)`` of the ``__consumer_offsets`` partition whose
        leader coordinates ``group_id`` (Kafka's FindCoordinator); creates the topic, compacted
        and replicated, on the first call.

        Raises:
            GroupAuthorizationFailedError: the caller may not DESCRIBE the group.
        """
        require(self._caller(session), Op.DESCRIBE, ResourceType.GROUP, group_id)
        return await self._coordinator_of(OFFSETS_TOPIC, group_id)

    async def find_transaction_coordinator(self, transactional_id: str, session: str | None = None) -> tuple[int, Any]:
        """As :meth:`find_coordinator`, for a transactional id and ``__transaction_state``
        (DESCRIBE on the transactional id)."""
        require(self._caller(session), Op.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id)
        return await self._coordinator_of(TRANSACTION_TOPIC, transactional_id)

    async def find_remote_log_metadata_partition(
        self, topic: str, partition: int, session: str | None = None
    ) -> tuple[int, Any]:
        """``(partition, leader actor or None)`` of the ``__remote_log_metadata`` partition that
        holds the remote segment events of ``topic``'s ``partition`` (a broker's call, from the
        replicas of a tiered topic); creates the topic, replicated, on the first call.

        Raises:
            ClusterAuthorizationFailedError: the caller is not a broker.
            InvalidRequestError: tiered storage is off in this cluster.
        """
        require(self._caller(session), Op.CLUSTER_ACTION, CLUSTER, CLUSTER_NAME)
        if not self.config.remote_log_storage_uri:
            raise InvalidRequestError("tiered storage is off in this cluster (remote.log.storage.uri is not set)")
        key = remote_log_metadata.record_key(topic, partition).decode()
        return await self._coordinator_of(REMOTE_LOG_METADATA_TOPIC, key)

    async def history_source(self, topic: str, session: str | None = None) -> tuple[str, str] | None:
        """Where ``topic``'s Parquet history lies, for readers that read it straight from the
        store (raylog.read_topic, raylog_spark): ``(remote.log.storage.uri, the topic's name
        there, <topic>-<topic id>)``, or None when the topic keeps none
        (``remote.storage.history.enable`` off). The URI carries whatever credentials the
        cluster's does: a caller that may READ the topic may read its records in the store.

        Raises:
            TopicAuthorizationFailedError: the caller may not READ the topic.
            UnknownTopicOrPartitionError: no such topic.
        """
        await self.start()
        require(self._caller(session), Op.READ, TOPIC, topic)
        described = self.image.topics.get(topic)
        if described is None:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
        if not TopicConfig.from_properties(described.config).remote_storage_history_enable:
            return None
        return self.config.remote_log_storage_uri, remote_topic_name(topic, described.topic_id)

    async def _coordinator_of(self, name: str, key: str) -> tuple[int, Any]:
        await self.start()
        if name not in self.image.topics:
            async with self._guard():
                if name not in self.image.topics:
                    await self._create_internal_topic(name)
        topic = self.image.topics[name]
        partition = topic.partitions[partition_for(key, len(topic.partitions))]
        return partition.partition, self.fleet.live_leader(partition)

    async def _create_internal_topic(self, name: str) -> None:
        """Create ``__consumer_offsets``, ``__transaction_state`` or ``__remote_log_metadata``
        with its configured replicas (at most as many as the cluster has brokers, so that one
        broker can run groups and transactions) and, as their writes are acks=all,
        ``min.insync.replicas`` 2 from three replicas up. The first two are compacted; the
        third, a history of events every reader replays, keeps everything (as Kafka's).

        Raises:
            CoordinatorNotAvailableError: fewer brokers are live than the topic needs (retriable:
                as in Kafka, clients wait until the cluster can host it fully replicated).
        """
        c = self.config
        retention = {"cleanup.policy": "compact"}
        if name == OFFSETS_TOPIC:
            partitions, factor, segment_bytes = (
                c.offsets_topic_num_partitions,
                c.offsets_topic_replication_factor,
                c.offsets_topic_segment_bytes,
            )
        elif name == REMOTE_LOG_METADATA_TOPIC:
            partitions, factor, segment_bytes = (
                c.remote_log_metadata_topic_num_partitions,
                c.remote_log_metadata_topic_replication_factor,
                TopicConfig().segment_bytes,
            )
            retention = {"cleanup.policy": "delete", "retention.ms": "-1"}
        else:
            partitions, factor, segment_bytes = (
                c.transaction_state_log_num_partitions,
                c.transaction_state_log_replication_factor,
                c.transaction_state_log_segment_bytes,
            )
        replication = max(1, min(factor, len(self.image.brokers)))
        if len(self.live) < replication:
            raise CoordinatorNotAvailableError(
                f"{name} needs {replication} live brokers to be created, {len(self.live)} are live"
            )
        config = {
            **retention,
            "segment.bytes": str(segment_bytes),
            "unclean.leader.election.enable": "false",
            "min.insync.replicas": str(max(1, min(2, replication - 1))),
        }
        record = self.image.create_topic(name, partitions, replication, config, live=self.live)
        self._commit([record])
        self.fleet.ensure_replicas(name)

    async def init_producer_id(self, session: str | None = None) -> int:
        """A producer id never handed out before (Kafka's InitProducerId of an idempotent
        producer: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic).

        Raises:
            ClusterAuthorizationFailedError: the caller may do neither.
        """
        access = self._caller(session)
        if access is not None and not access.allows_any(Op.WRITE, TOPIC):
            access.require(Op.IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME)
        return (await self.allocate_producer_ids(1))[0]

    async def allocate_producer_ids(self, count: int) -> list[int]:
        """``count`` consecutive producer ids never handed out before, in one call: the ones a
        transaction coordinator or a Kafka listener hands out without asking again, as Kafka's
        brokers hand out ids from blocks the controller gives them (KIP-730's
        AllocateProducerIds). Ids come from a block the journal reserved (at least
        ``PRODUCER_ID_BLOCK`` at a time), so a restarted controller starts past every one.

        Raises:
            InvalidRequestError: ``count`` is below 1.
        """
        if count < 1:
            raise InvalidRequestError(f"cannot allocate {count} producer ids")
        async with self._guard():
            short = count - (self.image.producer_id_block_end - self._next_producer_id)
            if short > 0:
                self._commit([self.image.allocate_producer_ids(max(short, PRODUCER_ID_BLOCK))])
            first = self._next_producer_id
            self._next_producer_id += count
            return list(range(first, first + count))

    async def metadata(
        self,
        topics: list[str] | None = None,
        acls_version: int | None = None,
        credentials_version: int | None = None,
        session: str | None = None,
    ) -> dict:
        """Brokers, topics (all, or those named that exist) and each online partition
        leader's actor, as the caller of ``session`` may see them: with the authorizer, a
        client's topics are those it may DESCRIBE, as a Kafka broker's Metadata answer, and
        ``denied`` lists the topics named that it may not (Kafka's TOPIC_AUTHORIZATION_FAILED,
        whether or not they exist, so that their existence does not leak); ``listeners``:
        ``broker id -> listener name -> advertised (host, port)`` of the live brokers whose
        Kafka listeners listen, and ``listener_names``: the names of the ``listeners``
        setting, in order. For the cluster's own actors (a broker token) only: ``acls``, with
        the authorizer, ``(version, ACLs)``, the ACLs left out (None) when the caller has that
        version already; ``credentials``, for SASL listeners, ``(version, SCRAM credentials)``
        likewise.

        Raises:
            SaslAuthenticationError: a token the cluster did not sign, or one that expired.
        """
        await self.start()
        access = self._caller(session)
        broker = self._callers.is_broker(session)
        names = list(self.image.topics) if topics is None else list(dict.fromkeys(topics))
        denied: list[str] = []
        if access is not None:
            named = topics is not None  # (every topic asked for: those hidden are not denials)
            describable = {n: access.allows(Op.DESCRIBE, ResourceType.TOPIC, n, log_denied=named) for n in names}
            names = [n for n, allowed in describable.items() if allowed]
            denied = [n for n, allowed in describable.items() if not allowed]
        described = {name: self.image.topics[name] for name in names if name in self.image.topics}
        reassignments = self.image.reassignments
        leaders = {}
        for topic in described.values():
            for p in topic.partitions:
                handle = self.fleet.live_leader(p)
                if handle is not None:
                    leaders[(topic.name, p.partition)] = handle
        return {
            "cluster_id": self.image.cluster_id,
            "brokers": dict(self.image.brokers),
            "live": set(self.live),
            "topics": described,
            "leaders": leaders,
            "denied": denied,
            "reassignments": {key: r for key, r in reassignments.items() if access is None or key[0] in described},
            "refused_brokers": dict(self.broker_finder.refused),
            "listeners": {}
            if self.listeners is None
            else self.listeners.endpoints(self.live, self.image.broker_configs),
            "listener_names": tuple(listener.name for listener in self.config.named_listeners),
            "acls": None
            if not self.config.authorizer or not broker
            else (
                self.image.acls_version,
                None if acls_version == self.image.acls_version else frozenset(self.image.acls),
            ),
            "credentials": None
            if not any(listener.sasl for listener in self.config.named_listeners) or not broker
            else (
                self.image.scram_version,
                None if credentials_version == self.image.scram_version else self._credentials(),
            ),
        }

    async def broker_replicas(self, broker_id: int) -> dict[tuple[str, int], Any]:
        """The running replica actors of broker ``broker_id`` by ``(topic, partition)`` (its
        listener's DescribeLogDirs)."""
        await self.start()
        return {(t, p): handle for (t, p, b), (_, handle) in self.fleet.replicas.items() if b == broker_id}

    async def replica_handles(self, topic: str, wait_s: float = REPLICA_START_TIMEOUT_S) -> dict[tuple[int, int], Any]:
        """Every live replica actor of ``topic`` by ``(partition, broker_id)`` (tests, tools),
        once each has answered (at most ``wait_s``: then those created, answering or not)."""
        await self.start()
        deadline = asyncio.get_running_loop().time() + wait_s
        while True:
            changed = self.fleet.leaders_event()
            described = self.image.topic(topic)
            keys = [(topic, p.partition, b) for p in described.partitions for b in p.replicas if b in self.live]
            remaining = deadline - asyncio.get_running_loop().time()
            if all(self.fleet.is_ready(k) for k in keys) or remaining <= 0:
                return {(k[1], k[2]): h for k in keys if (h := self.fleet.cached(k)) is not None}
            await wait_for_event(changed, remaining)

    async def await_leaders(
        self, topics: list[str], timeout_ms: int, followers: bool = False
    ) -> dict[str, tuple[int, int, int, str]]:
        """Wait until every partition of ``topics`` has a running leader (its replica actor
        answered), and with ``followers`` every replica on a live broker running too, at most
        ``timeout_ms``. Per topic ``(error_code, message, partitions ready, partitions)``:
        UNKNOWN_TOPIC_OR_PARTITION for a topic that does not exist."""
        await self.start()
        deadline = asyncio.get_running_loop().time() + max(0, timeout_ms) / 1000
        while True:
            changed = self.fleet.leaders_event()
            counts: dict[str, tuple[int, str, int, int]] = {}
            for name in topics:
                topic = self.image.topics.get(name)
                if topic is None:
                    counts[name] = (*error_result(UnknownTopicOrPartitionError(f"unknown topic {name!r}")), 0, 0)
                else:
                    led = sum(self.fleet.partition_ready(p, followers) for p in topic.partitions)
                    counts[name] = (0, "", led, len(topic.partitions))
            remaining = deadline - asyncio.get_running_loop().time()
            if all(led == total for _, _, led, total in counts.values()) or remaining <= 0:
                return counts
            await wait_for_event(changed, remaining)
