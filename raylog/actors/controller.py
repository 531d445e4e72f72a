"""The controller actor: one named, detached actor per raylog cluster, on the head node.

It hosts the :class:`~raylog.coordination.metadata.MetadataImage` and its journal (on the
head node's disk, replayed when Ray restarts the actor), registers brokers, places
replicas, creates the replica actors (hard node affinity, restarted in place by Ray),
answers metadata requests, and is the single writer of every partition's leader, leader
epoch and ISR. Every change is journaled before it is acted on, then pushed to the
partition's replicas (:meth:`PartitionReplicaActor.update_state`, with the topic's config
and its version), which ignore states and configs older than the ones they have. Topic
configs are altered and partitions added while the topic is in use: both take effect on
the live replicas (new partitions get replica actors like a new topic's). Client quotas
(:meth:`alter_client_quotas`) are journaled likewise and pushed, with their version, to
every live replica (:meth:`PartitionReplicaActor.update_quotas`), and again to each replica
actor the controller creates or finds (a replica that Ray restarted gets them in the
answer to its report).

Failures: a loop watches Ray's node table; when a broker's node dies, every partition it
led gets a new leader from its ISR (:func:`~raylog.coordination.elections.elect_leader`)
and every ISR it was in shrinks, all in one journal batch. A replica actor that Ray
restarted reports itself (:meth:`replica_restarted`), is made a follower of another ISR
member when there is one, and gets its role, config and quotas in the answer (a push to an
actor that has just restarted may still go to its dead process). A broker that comes back
(same id, possibly a new node) gets its replicas re-created there; they truncate, catch up
and rejoin the ISR. Before a broker counts as live again, the logs on its disk that are not
its replicas' (topics deleted, created again or moved off it while it was away) are moved
out of the way and deleted (:mod:`raylog.storage.log_dirs`): a log is named by its topic
id. Leadership returns to preferred replicas on request (:meth:`elect_leaders`)
and automatically when more than ``leader.imbalance.per.broker.percentage`` of partitions
are led elsewhere.

Brokers: :class:`~raylog.actors.broker_finder.BrokerFinder` finds them each round (embedded:
``num_brokers`` on the head node; else labelled nodes, or every node), and the leaders and ISRs
are decided by stepping :class:`~raylog.coordination.replication_control.ReplicationControl`,
whose effects this actor carries out (journal, replay, push); the replica actors are
:class:`~raylog.actors.replica_fleet.ReplicaFleet`'s. The admin API and the look-ups are the
actor's parts, one module per job (:mod:`~raylog.actors.controller_parts`); this module holds
the journal, the start-up, the watch rounds and the replicas' calls about leaders and ISRs.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import ray

from raylog import metrics
from raylog.actors import logs
from raylog.actors.access import Guard
from raylog.actors.broker_finder import BrokerFinder
from raylog.actors.controller_configs import ConfigAdmin
from raylog.actors.controller_lookup import ClusterLookup
from raylog.actors.controller_security import SecurityAdmin
from raylog.actors.controller_topics import TopicAdmin
from raylog.actors.kafka.fleet import ListenerFleet
from raylog.actors.replica_fleet import ReplicaFleet
from raylog.actors.replica_parts import PEER_CALL_TIMEOUT_S
from raylog.config import ControllerConfig
from raylog.coordination import sessions
from raylog.coordination.consumer_group import ConsumerGroupConfig
from raylog.coordination.metadata import MetadataImage
from raylog.coordination.replication_control import (
    AlterIsr,
    BalanceLeaders,
    BrokersFound,
    ControllerResult,
    LeaderDead,
    LeaderUnreachable,
    ReactToLiveness,
    ReplicaRestarted,
    ReplicationControl,
)
from raylog.errors import RaylogError
from raylog.kafka.sasl import SaslExchange
from raylog.storage.journal import MetadataJournal
from raylog.types import PartitionInfo

logger = logging.getLogger(__name__)

#: How long a leader reported by a follower has to answer the controller itself.
LEADER_CHECK_TIMEOUT_S = 2.0


class ControllerActor(TopicAdmin, ConfigAdmin, SecurityAdmin, ClusterLookup):
    """See the module docstring; its parts, :mod:`~raylog.actors.controller_parts`.
    Concurrency: one asyncio loop; metadata changes run one at a time under ``_lock``;
    pushes to replicas run outside it."""

    def __init__(
        self,
        cluster_name: str,
        data_dir: str,
        num_brokers: int,
        embedded: bool,
        config: dict | None = None,
        first_users: Sequence[tuple] = (),
    ):
        logs.configure()
        self.cluster_name = cluster_name
        self.data_dir = data_dir
        self.num_brokers = num_brokers
        self.embedded = embedded
        self.config = ControllerConfig.from_properties(config or {})
        #: The broker's consumer group settings: the group coordinators', and the bounds of
        #: groups' dynamic configs.
        self._consumer_groups = ConsumerGroupConfig.of(self.config)
        self.image = MetadataImage()
        self.journal = MetadataJournal(os.path.join(data_dir, "controller", "metadata.journal"))
        for record in self.journal.replay():
            self.image.apply(record)
        #: Leaders and ISRs: the core this actor steps (and the live brokers, its view).
        self.replication = ReplicationControl(self.image)
        # Ids of the block journaled last may have been handed out before a restart: skip it.
        self._next_producer_id = self.image.producer_id_block_end
        self._lock: asyncio.Lock | None = None
        self._started = False
        self._tasks: set[asyncio.Task] = set()
        self._since_rebalance_s = 0.0  # since the last check of the leaders' balance
        #: The replica actors: started, found, told their state (see ReplicaFleet).
        self.fleet = ReplicaFleet(
            cluster_name, self.image, self.replication, self.config, self._consumer_groups, self._spawn
        )
        #: Where the brokers are (and the nodes refused as brokers).
        self.broker_finder = BrokerFinder(self.image, data_dir, num_brokers, embedded, self._spawn)
        #: Each broker's Kafka listener, when the ``listeners`` setting asks for them.
        self.listeners: ListenerFleet | None = None
        if self.image.cluster_id is None:
            self._commit([{"type": "cluster", "cluster_id": uuid.uuid4().hex}])
            self._create_first_users(first_users)
        if self.image.session_key is None:
            self._commit([{"type": "session_key", "key": sessions.new_key()}])
        #: Who calls the admin API: the session key and the ACLs (see raylog.actors.access).
        self._callers = Guard(self.image.session_key)
        #: SASL exchanges of raylog's clients under way: id -> (exchange, when it started).
        self._exchanges: dict[str, tuple[SaslExchange, float]] = {}

    def _create_first_users(self, upsertions: Sequence[tuple]) -> None:
        """The SCRAM credentials a new cluster is made with (Kafka's ``kafka-storage format
        --add-scram``): the user ``raylog.connect`` was given when it started the cluster."""
        records, refusals = self.image.alter_scram_credentials([], list(upsertions))
        self._commit(records)
        for user, refusal in refusals.items():
            if refusal is not None:
                logger.error("user %s not created with the cluster: %s", user, refusal)
        if records:
            logger.info("cluster created with the SCRAM credentials of %s", sorted({r["user"] for r in records}))

    @property
    def live(self) -> set[int]:
        """The brokers found live in the last round."""
        return self.replication.live

    def _commit(self, records: list[dict[str, Any]]) -> None:
        self._carry_out(ControllerResult(tuple(records)))

    def _carry_out(self, result: ControllerResult) -> Any:
        """A step's effects but its leader check (see :mod:`~raylog.coordination.replication_control`):
        journal its records, replay them, push the partitions that changed; its response."""
        if result.records:
            self.journal.append(list(result.records))
        self.replication.replay(result)
        if result.records:
            self.fleet.notify_leaders()
        self.fleet.push(list(result.push))
        return result.response

    def _guard(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    def _spawn(self, coroutine) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- start-up -----------------------------------------------------------------------

    async def start(self) -> dict:
        """Register brokers, make sure every replica actor exists and knows its state, and
        start watching the cluster (idempotent)."""
        if self._started:
            return {"cluster_id": self.image.cluster_id, "brokers": sorted(self.image.brokers)}
        async with self._guard():
            if not self._started:
                await self._register_brokers()
                await self._react_to_liveness()
                await self.fleet.find_running_replicas()
                self.fleet.start_missing_replicas()
                await self._reconcile_listeners()
                self._spawn(self._every_round(self._watch_round))
                if self.config.listeners:
                    self._spawn(self._every_round(self._reconcile_listeners))
                for topic, partition in self.image.reassignments:
                    self._spawn(self._complete_reassignment(topic, partition))
                self._started = True
        return {"cluster_id": self.image.cluster_id, "brokers": sorted(self.image.brokers)}

    async def _register_brokers(self) -> None:
        """Find the brokers and step :class:`~raylog.coordination.replication_control.BrokersFound`:
        what changed is journaled, the found brokers are the live set, and the replicas are
        told what that decided (a moved broker's replicas start on its new node with their state).
        A returning broker is live only once its stray logs are out of the way."""
        found = await self.broker_finder.find(self.live)
        self._carry_out(self.replication.step(BrokersFound(found)))

    # --- watching the cluster -----------------------------------------------------------

    async def _every_round(self, step: Callable[[], Awaitable[None]]) -> None:
        """``step()`` every ``node.check.interval.ms``; a round that fails is tried again at the
        next. The liveness rounds and the listeners' each have a loop of their own: a listener
        may take up to a minute to start (or confirm), and no election waits for it."""
        interval_s = self.config.node_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            try:
                await step()
            except (RaylogError, ray.exceptions.RayError, asyncio.TimeoutError):
                continue  # try again next round

    async def _watch_round(self) -> None:
        self._since_rebalance_s += self.config.node_check_interval_ms / 1000
        async with self._guard():
            if not self.embedded:
                await self._register_brokers()
            await self._react_to_liveness()
            self.fleet.start_missing_replicas()
            self._record_metrics()
            rebalance_due = self._since_rebalance_s >= self.config.leader_imbalance_check_interval_seconds
            if self.config.auto_leader_rebalance_enable and rebalance_due:
                self._since_rebalance_s = 0.0
                self._carry_out(
                    self.replication.step(BalanceLeaders(self.config.leader_imbalance_per_broker_percentage))
                )

    async def _reconcile_listeners(self) -> None:
        """Every live broker gets a Kafka listener that listens (when ``listeners`` is set)."""
        if not self.config.listeners:
            return
        if self.listeners is None:
            self.listeners = ListenerFleet(
                self.cluster_name, self.config, ray.get_runtime_context().current_actor, self.image.session_key
            )
        await self.listeners.reconcile(dict(self.image.brokers), set(self.live))

    def _record_metrics(self) -> None:
        partitions = self.image.partitions()
        metrics.record_cluster(
            self.cluster_name,
            len(self.live),
            sum(p.leader not in self.live for p in partitions),
            sum(len(p.isr) < len(p.replicas) for p in partitions),
        )

    async def _react_to_liveness(self) -> None:
        self._carry_out(self.replication.step(ReactToLiveness()))

    # --- requests from replicas ---------------------------------------------------------

    async def alter_isr(
        self, topic: str, partition: int, leader: int, leader_epoch: int, partition_epoch: int, isr: tuple[int, ...]
    ) -> tuple[bool, PartitionInfo] | None:
        """A leader's ISR proposal: ``(accepted, the partition's state)`` (see
        :func:`~raylog.coordination.elections.alter_isr`), None if the partition is gone."""
        await self.start()
        async with self._guard():
            return self._carry_out(
                self.replication.step(AlterIsr(topic, partition, leader, leader_epoch, partition_epoch, tuple(isr)))
            )

    async def replica_restarted(self, topic: str, partition: int, broker_id: int) -> tuple | None:
        """A replica actor was restarted by Ray: it loses leadership to another ISR member
        if there is one (else leads again under a new epoch) and leaves the ISR until it
        catches up.

        Returns:
            ``(state, leader handle, (config version, config), (quotas version, quotas),
            (ACLs version, authorizer))`` for the replica to take, or None when its partition
            is gone.
        """
        await self.start()
        try:
            async with self._guard():
                info = self._carry_out(self.replication.step(ReplicaRestarted(topic, partition, broker_id)))
            if info is None:
                return None
            leader, config = self.fleet.role(info, broker_id)
            if self.fleet.cached((topic, partition, broker_id)) is not None:
                self.fleet.ready.add((topic, partition, broker_id))  # it answers: it runs
                self.fleet.notify_leaders()
        except Exception:  # the replica serves nothing until answered: say why it was not
            logger.exception("restart report of %s-%d from broker %d failed", topic, partition, broker_id)
            raise
        quotas = (self.image.client_quotas_version, dict(self.image.client_quotas))
        self.fleet.push_group_configs([(topic, partition, broker_id)])  # (a coordinator restarts without them)
        return info, leader, config, quotas, self.fleet.authorizer()

    async def leader_unreachable(self, topic: str, partition: int, leader_epoch: int) -> None:
        """A follower found the leader of ``leader_epoch`` dead (Ray said so) or unresponsive:
        once this controller finds it so too, another ISR member leads (see
        :class:`~raylog.coordination.replication_control.LeaderUnreachable`)."""
        await self.start()
        check = self.replication.step(LeaderUnreachable(topic, partition, leader_epoch)).check
        handle = None if check is None else self.fleet.live_leader(self.image.partition(topic, partition))
        if handle is None:
            return  # nothing to check, or its actor is starting: nothing to judge yet
        try:
            await asyncio.wait_for(handle.ready.remote(), LEADER_CHECK_TIMEOUT_S)
            return  # it answers: alive
        except (asyncio.TimeoutError, ray.exceptions.RayError):
            pass
        async with self._guard():
            self._carry_out(self.replication.step(LeaderDead(topic, partition, check.broker, check.leader_epoch)))

    # --- admin --------------------------------------------------------------------------

    # --- replicas -----------------------------------------------------------------------

    # --- metadata -----------------------------------------------------------------------

    async def shutdown(self) -> None:
        """Close every replica's log (each within ``PEER_CALL_TIMEOUT_S``; see
        :meth:`PartitionReplicaActor.close`), then kill every replica and listener actor (data
        stays on disk); the caller then kills this actor."""
        logger.info("raylog cluster %s stops: %d replica actors", self.cluster_name, len(self.fleet.replicas))
        for task in list(self._tasks):
            task.cancel()
        handles = [handle for _, handle in self.fleet.replicas.values()]
        closed = await asyncio.gather(
            *(asyncio.wait_for(h.close.remote(), PEER_CALL_TIMEOUT_S) for h in handles), return_exceptions=True
        )
        unclosed = [r for r in closed if isinstance(r, BaseException)]
        if unclosed:  # their logs recover at the next start, as after a crash
            logger.warning("%d replica(s) did not close their logs: %r", len(unclosed), unclosed[0])
        for handle in handles:
            ray.kill(handle, no_restart=True)
        self.fleet.replicas.clear()
        self.fleet.ready.clear()
        if self.listeners is not None:
            self.listeners.shutdown()
