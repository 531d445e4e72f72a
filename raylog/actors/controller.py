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
whose effects this actor carries out (journal, replay, push).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import ray

from raylog import metrics
from raylog.actors import logs
from raylog.actors.access import Access, Guard
from raylog.actors.broker_finder import BrokerFinder
from raylog.actors.kafka.fleet import ListenerFleet
from raylog.actors.replica import PEER_CALL_TIMEOUT_S
from raylog.actors.replica_fleet import REPLICA_START_TIMEOUT_S, ReplicaFleet, wait_for_event
from raylog.common import scram
from raylog.common.acl import CLUSTER_NAME, ResourceType, covers
from raylog.common.acl import ACLOperation as Op
from raylog.common.names import (
    OFFSETS_TOPIC,
    TRANSACTION_TOPIC,
    broker_id_of,
)
from raylog.config import ControllerConfig
from raylog.coordination import broker_configs, sessions
from raylog.coordination.consumer_group import ConsumerGroupConfig
from raylog.coordination.group import partition_for
from raylog.coordination.metadata import MetadataImage
from raylog.coordination.replication_control import (
    AlterIsr,
    BalanceLeaders,
    BrokersFound,
    CheckReassignment,
    ControllerResult,
    ElectLeaders,
    LeaderDead,
    LeaderUnreachable,
    ReactToLiveness,
    ReplicaRestarted,
    ReplicationControl,
)
from raylog.errors import (
    ClusterAuthorizationFailedError,
    CoordinatorNotAvailableError,
    InvalidRequestError,
    RaylogError,
    SaslAuthenticationError,
    SecurityDisabledError,
    UnknownTopicOrPartitionError,
)
from raylog.kafka.sasl import SaslExchange
from raylog.protocol import error_result
from raylog.storage.journal import MetadataJournal
from raylog.types import NewTopic, PartitionInfo

logger = logging.getLogger(__name__)

TOPIC, CLUSTER, GROUP = ResourceType.TOPIC, ResourceType.CLUSTER, ResourceType.GROUP
#: Producer ids are journaled a block at a time, not one fsync per producer.
PRODUCER_ID_BLOCK = 1000
#: How long a raylog client's SASL exchange may take between its steps, and how many may be
#: under way at once (a bound on what clients that never finish can leave behind).
SASL_EXCHANGE_TIMEOUT_S = 30.0
MAX_SASL_EXCHANGES = 1024
#: How long a leader reported by a follower has to answer the controller itself.
LEADER_CHECK_TIMEOUT_S = 2.0


class ControllerActor:
    """See the module docstring. Concurrency: one asyncio loop; metadata changes run one at
    a time under ``_lock``; pushes to replicas run outside it."""

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

    async def create_topics(self, topics: list[NewTopic], session: str | None = None) -> dict[str, tuple[int, str]]:
        """Create each topic (CREATE on the cluster or the topic); per topic ``(error_code,
        message)``, code 0 on success."""
        access = self._caller(session)

        def create(new: NewTopic) -> None:
            if access is not None and not access.allows(Op.CREATE, CLUSTER, CLUSTER_NAME):
                access.require(Op.CREATE, TOPIC, new.name)
            self._commit(
                [
                    self.image.create_topic(
                        new.name, new.num_partitions, new.replication_factor, new.config, live=self.live
                    )
                ]
            )
            self.fleet.ensure_replicas(new.name)

        return await self._each({new.name: new for new in topics}, create)

    async def delete_topics(self, names: list[str], session: str | None = None) -> dict[str, tuple[int, str]]:
        """Delete each topic and its replicas' data (DELETE on the topic); per topic
        ``(error_code, message)``."""
        access = self._caller(session)

        def delete(name: str) -> Awaitable[None]:
            _require(access, Op.DELETE, TOPIC, name)
            record = self.image.delete_topic(name)
            topic = self.image.topics[name]
            self._commit([record])
            return self.fleet.remove_replicas(topic)

        return await self._each({name: name for name in names}, delete)

    async def alter_configs(
        self,
        changes: dict[str, dict[str, Any]],
        incremental: bool = True,
        validate_only: bool = False,
        session: str | None = None,
    ) -> dict[str, tuple[int, str]]:
        """Alter each topic's config, incrementally or replacing its whole set of overrides
        (see :meth:`~raylog.coordination.metadata.MetadataImage.alter_config`), in one
        journal record per topic, then pushed to its live replicas; per topic
        ``(error_code, message)``. A refused topic is unchanged; ``validate_only`` checks
        each change and makes none. Needs ALTER_CONFIGS on each topic."""
        access = self._caller(session)

        def alter(item: tuple[str, dict[str, Any]]) -> None:
            name, change = item
            _require(access, Op.ALTER_CONFIGS, TOPIC, name)
            record = self.image.alter_config(name, change, incremental=incremental)
            if not validate_only:
                self._commit([record])
                self.fleet.push(list(self.image.topics[name].partitions))

        return await self._each({name: (name, change) for name, change in changes.items()}, alter)

    async def alter_broker_configs(
        self,
        changes: dict[str, dict[str, Any]],
        incremental: bool = True,
        validate_only: bool = False,
        session: str | None = None,
    ) -> dict[str, tuple[int, str]]:
        """Alter broker resources' dynamic configs (resource "" the cluster default, else a
        broker id; see :meth:`~raylog.coordination.metadata.MetadataImage.alter_broker_config`),
        one journal record each; topics' new defaults are pushed to their live replicas (a
        broker's own to its replicas). Per resource ``(error_code, message)``; a refused one is
        unchanged; ``validate_only`` checks each change and makes none. Needs ALTER_CONFIGS
        on the cluster."""
        access = self._caller(session)

        def alter(item: tuple[str, dict[str, Any]]) -> None:
            resource, change = item
            _require(access, Op.ALTER_CONFIGS, CLUSTER)
            record = self.image.alter_broker_config(resource, change, incremental=incremental, static=self.config)
            if validate_only:
                return
            self._commit([record])
            logger.info(
                "dynamic broker configs of %s set: %s",
                resource or "the cluster default",
                broker_configs.masked(record["configs"]),
            )
            only = None if resource == "" else int(resource)
            self.fleet.push([p for topic in self.image.topics.values() for p in topic.partitions], only=only)

        return await self._each({resource: (resource, change) for resource, change in changes.items()}, alter)

    async def describe_broker_configs(
        self, resources: list[str], session: str | None = None
    ) -> dict[str, tuple[int, str, dict]]:
        """Per broker resource ("" or a broker id) ``(error_code, message, {config:
        ConfigEntry})``; needs DESCRIBE_CONFIGS on the cluster."""

        def describe(resource: str) -> dict:
            static = broker_configs.static_configs(self.config, broker_id_of(resource))
            return self.image.describe_broker_config(resource, static)

        return await self._described(resources, session, CLUSTER, describe)

    async def describe_configs(self, names: list[str], session: str | None = None) -> dict[str, tuple[int, str, dict]]:
        """Per topic ``(error_code, message, {property: ConfigEntry})``; needs DESCRIBE_CONFIGS
        on each topic."""
        return await self._described(names, session, TOPIC, self.image.describe_config)

    async def _described(
        self, names: list[str], session: str | None, resource_type: ResourceType, describe: Callable[[str], dict]
    ) -> dict[str, tuple[int, str, dict]]:
        """Per name ``(error_code, message, describe(name))``; needs DESCRIBE_CONFIGS on the
        resource of ``resource_type`` by that name (on the cluster for CLUSTER)."""
        await self.start()
        access = self._caller(session)
        results = {}
        for name in names:
            try:
                _require(access, Op.DESCRIBE_CONFIGS, resource_type, CLUSTER_NAME if resource_type == CLUSTER else name)
                results[name] = (0, "", describe(name))
            except RaylogError as exc:
                results[name] = (*error_result(exc), {})
        return results

    async def alter_client_quotas(self, changes: dict, session: str | None = None) -> tuple[int, str]:
        """Alter client quotas (all or nothing; see
        :meth:`~raylog.coordination.metadata.MetadataImage.alter_client_quotas`), journaled,
        then pushed to every live replica and answered once they hold them (a client that
        starts right after finds its quota in force), or after :data:`PEER_CALL_TIMEOUT_S` if
        a replica does not answer (it gets them when it does); ``(error_code, message)``, code
        0 on success. Needs ALTER_CONFIGS on the cluster."""
        await self.start()
        access = self._caller(session)
        async with self._guard():
            try:
                _require(access, Op.ALTER_CONFIGS, CLUSTER)
                self._commit(self.image.alter_client_quotas(changes))
            except RaylogError as exc:
                return error_result(exc)
            keys = [key for key in self.fleet.replicas if key[2] in self.live]
        await _awaited(self.fleet.push_quotas(keys), f"client quotas version {self.image.client_quotas_version}")
        return 0, ""

    async def alter_group_configs(
        self,
        changes: dict[str, dict[str, Any]],
        incremental: bool = True,
        validate_only: bool = False,
        session: str | None = None,
    ) -> dict[str, tuple[int, str]]:
        """Alter groups' dynamic configs (Kafka 4's GROUP config resources, see
        :meth:`~raylog.coordination.metadata.MetadataImage.alter_group_config`), one journal
        record each, pushed to the group coordinators (every ``__consumer_offsets`` replica)
        and answered once the running ones hold them (a member's next heartbeat gets its
        group's settings), or after :data:`PEER_CALL_TIMEOUT_S` for those that do not answer
        (they get them when they do). Per group ``(error_code, message)``; a refused one is
        unchanged; ``validate_only`` checks each change and makes none. Needs ALTER_CONFIGS
        on each group (GROUP_AUTHORIZATION_FAILED)."""
        access = self._caller(session)

        def alter(item: tuple[str, dict[str, Any]]) -> None:
            group_id, change = item
            _require(access, Op.ALTER_CONFIGS, GROUP, group_id)
            record = self.image.alter_group_config(group_id, change, self._consumer_groups, incremental=incremental)
            if not validate_only:
                self._commit([record])
                logger.info("dynamic configs of group %r set: %s", group_id, record["configs"])

        results = await self._each({group_id: (group_id, change) for group_id, change in changes.items()}, alter)
        if not validate_only and any(code == 0 for code, _ in results.values()):
            keys = [key for key in self.fleet.replicas if key[0] == OFFSETS_TOPIC and key[2] in self.live]
            await _awaited(
                self.fleet.push_group_configs(keys), f"group configs version {self.image.group_configs_version}"
            )
        return results

    async def describe_group_configs(
        self, groups: list[str], session: str | None = None
    ) -> dict[str, tuple[int, str, dict]]:
        """Per group ``(error_code, message, {config: ConfigEntry})`` (see
        :meth:`~raylog.coordination.metadata.MetadataImage.describe_group_config`); needs
        DESCRIBE_CONFIGS on each group."""
        describe = functools.partial(self.image.describe_group_config, broker=self._consumer_groups)
        return await self._described(groups, session, GROUP, describe)

    async def describe_client_quotas(self, session: str | None = None) -> dict[str | None, dict[str, float]]:
        """Every client quota set: client id (None: the default) -> {quota key: bytes/s}.

        Raises:
            ClusterAuthorizationFailedError: the caller may not DESCRIBE_CONFIGS the cluster.
        """
        await self.start()
        _require(self._caller(session), Op.DESCRIBE_CONFIGS, CLUSTER)
        return {client_id: dict(quotas) for client_id, quotas in self.image.client_quotas.items()}

    async def create_acls(self, acls: list, session: str | None = None) -> tuple[int, str]:
        """Create Kafka ACLs (:class:`~raylog.common.acl.ACL`), all or nothing,
        journaled and pushed to the listeners, answered once they apply them. ``(error_code,
        message)``: SECURITY_DISABLED without the authorizer, INVALID_REQUEST for an ACL Kafka
        refuses, CLUSTER_AUTHORIZATION_FAILED without ALTER on the cluster, code 0 on success."""
        await self.start()
        access = self._caller(session)
        async with self._guard():
            try:
                self._require_authorizer()
                _require(access, Op.ALTER, CLUSTER)
                created = [acl for acl in dict.fromkeys(acls) if acl not in self.image.acls]
                self._commit(self.image.create_acls(acls))
            except RaylogError as exc:
                return error_result(exc)
        await self._push_acls(created)
        return 0, ""

    async def delete_acls(self, filters: list, session: str | None = None) -> tuple[int, str, list[list]]:
        """Delete every ACL matching one of ``filters`` (:class:`~raylog.common.acl.ACLFilter`),
        journaled: ``(error_code, message, the ACLs each filter matched)``; needs ALTER on the cluster."""
        await self.start()
        access = self._caller(session)
        async with self._guard():
            try:
                self._require_authorizer()
                _require(access, Op.ALTER, CLUSTER)
                records, matched = self.image.delete_acls(filters)
                self._commit(records)
            except RaylogError as exc:
                return (*error_result(exc), [])
        await self._push_acls([acl for found in matched for acl in found])
        return 0, "", matched

    async def describe_acls(self, acl_filter, session: str | None = None) -> tuple[int, str, list]:
        """``(error_code, message, the ACLs matching acl_filter)``; needs DESCRIBE on the cluster."""
        await self.start()
        try:
            self._require_authorizer()
            _require(self._caller(session), Op.DESCRIBE, CLUSTER)
            return 0, "", self.image.describe_acls(acl_filter)
        except RaylogError as exc:
            return (*error_result(exc), [])

    async def _push_acls(self, changed: list) -> None:
        """Every listener and live replica gets the ACLs. The listeners and the running
        replicas whose decisions ``changed`` (the ACLs created or deleted) can change apply
        them before the change is answered (a client that changed them and sends its next
        request or call finds them in force), or after :data:`PEER_CALL_TIMEOUT_S` for those
        that do not answer (they get them when they do). The others, and replicas still
        starting (as their first call), get them without the answer waiting: an ACL on one
        topic does not wait for hundreds of replicas of others, nor for processes to start."""
        live = [key for key in self.fleet.replicas if key[2] in self.live]
        awaited = {key for key in live if self.fleet.is_ready(key) and _decides(changed, key[0])}
        self.fleet.push_acls([key for key in live if key not in awaited])
        pushes = self.fleet.push_acls(list(awaited))
        if self.listeners is not None:
            await self.listeners.push("update_acls", self.image.acls_version, frozenset(self.image.acls))
        await _awaited(pushes, f"ACLs version {self.image.acls_version}")

    async def alter_user_scram_credentials(
        self,
        deletions: list[tuple[str, int]],
        upsertions: list[tuple[str, int, int, bytes, bytes]],
        session: str | None = None,
    ) -> dict[str, tuple[int, str]]:
        """Kafka's AlterUserScramCredentials (see
        :func:`~raylog.common.scram.alter`): the accepted users' changes journaled and
        pushed to the listeners before the answer; per user ``(error_code, message)``. Needs
        ALTER on the cluster (else every user is answered CLUSTER_AUTHORIZATION_FAILED)."""
        await self.start()
        try:
            _require(self._caller(session), Op.ALTER, CLUSTER)
        except ClusterAuthorizationFailedError as exc:
            return {user: error_result(exc) for user, *_ in [*deletions, *upsertions]}
        async with self._guard():
            records, results = self.image.alter_scram_credentials(deletions, upsertions)
            self._commit(records)
        if records:
            logger.info("SCRAM credentials altered: %s", sorted({r["user"] for r in records}))
            await self._push_credentials()
        return {user: (0, "") if refusal is None else error_result(refusal) for user, refusal in results.items()}

    async def authenticate(self, exchange_id: str, mechanism: str, message: bytes, host: str) -> tuple:
        """One step of a raylog client's SASL exchange (``mechanism`` of ``sasl.enabled.mechanisms``
        against the users' SCRAM credentials, as a SASL listener does; see
        :class:`~raylog.kafka.sasl.SaslExchange`), named by the client's ``exchange_id``.

        Returns:
            ``(the server's message, token, its expiry in ms since the epoch)``: the token (see
            :mod:`~raylog.coordination.sessions`, for ``User:<name>`` on ``host``) once the
            exchange is complete, else None and -1 (the client sends its next message).

        Raises:
            SaslAuthenticationError: the credentials are refused (one message for an unknown
                user and a wrong password) or the exchange is malformed.
            UnsupportedSaslMechanismError: ``mechanism`` is not enabled.
        """
        await self.start()
        now = time.monotonic()
        for stale in [k for k, (_, started) in self._exchanges.items() if now - started > SASL_EXCHANGE_TIMEOUT_S]:
            del self._exchanges[stale]
        exchange, started = self._exchanges.pop(exchange_id, (None, now))
        try:
            if exchange is None:
                if len(self._exchanges) >= MAX_SASL_EXCHANGES:
                    raise SaslAuthenticationError("too many authentications under way: try again")
                exchange = SaslExchange(self.config.sasl_mechanisms, self.image.scram_credentials.get)
                exchange.handshake(mechanism)
            answer = exchange.authenticate(message)
        except RaylogError as exc:
            logger.info("a raylog client on %s failed to authenticate (%s): %s", host, mechanism, exc)
            raise
        if not exchange.complete:
            self._exchanges[exchange_id] = (exchange, started)
            return answer, None, -1
        expires_ms = int(time.time() * 1000) + self.config.session_token_lifetime_ms
        logger.info("%s authenticated (%s) from %s", exchange.principal, mechanism, host)
        return answer, self._callers.sessions.issue(exchange.principal, host, expires_ms), expires_ms

    async def describe_user_scram_credentials(
        self, users: list[str] | None, session: str | None = None
    ) -> dict[str, tuple[int, str, list]]:
        """Kafka's DescribeUserScramCredentials: per user ``(error_code, message, [(mechanism
        code, iterations)])``; ``users`` None: every user with a credential.

        Raises:
            ClusterAuthorizationFailedError: the caller may not DESCRIBE the cluster.
        """
        await self.start()
        _require(self._caller(session), Op.DESCRIBE, CLUSTER)
        described = scram.describe(self.image.scram_credentials, users)
        return {
            user: ((0, "") if refusal is None else error_result(refusal)) + (infos,)
            for user, (refusal, infos) in described.items()
        }

    async def _push_credentials(self) -> None:
        """The listeners authenticate with the new credentials before a change is answered."""
        if self.listeners is not None:
            await self.listeners.push("update_credentials", self.image.scram_version, self._credentials())

    def _credentials(self) -> dict:
        return {user: dict(by_mechanism) for user, by_mechanism in self.image.scram_credentials.items()}

    def _caller(self, session: str | None) -> Access | None:
        """The caller of a session token before the ACLs (see :class:`~raylog.actors.access.Guard`);
        None when nothing is to be checked (no authorizer, or one of the cluster's own actors).

        Raises:
            SaslAuthenticationError: a token the cluster did not sign, or one that expired.
        """
        self._callers.apply(*self.fleet.authorizer())
        return self._callers.access(session)

    def _require_authorizer(self) -> None:
        if not self.config.authorizer:
            raise SecurityDisabledError("no authorizer is configured: ACLs need the setting authorizer=acl")

    async def create_partitions(self, counts: dict[str, int], session: str | None = None) -> dict[str, tuple[int, str]]:
        """Grow each topic to its new partition count: the new partitions are placed,
        journaled and get their replica actors as at topic creation (led by their first
        replica, every replica in sync); per topic ``(error_code, message)``."""

        access = self._caller(session)

        def add(item: tuple[str, int]) -> None:
            name, total_count = item
            _require(access, Op.ALTER, TOPIC, name)
            self._commit([self.image.add_partitions(name, total_count, live=self.live)])
            self.fleet.ensure_replicas(name)

        return await self._each({name: (name, count) for name, count in counts.items()}, add)

    async def _each(self, items: dict, step: Callable[[Any], Awaitable[None] | None]) -> dict:
        """Run ``step`` on each item, one at a time under the lock (it journals the change and
        starts what follows from it), then await what each step returned (replica actors
        starting or being removed) with the lock released: elections, ISR changes and restart
        reports must not wait for processes to start (a topic of many partitions takes
        seconds). Per key ``(error_code, message)``, code 0 where the step succeeded."""
        await self.start()
        results, pending = {}, {}
        async with self._guard():
            for key, item in items.items():
                try:
                    pending[key] = step(item)
                    results[key] = (0, "")
                except RaylogError as exc:
                    results[key] = error_result(exc)
        for key, then in pending.items():
            try:
                if then is not None:
                    await then
            except RaylogError as exc:
                results[key] = error_result(exc)
        return results

    async def elect_leaders(
        self, election_type: int, partitions: list[tuple[str, int]] | None = None, session: str | None = None
    ) -> dict[tuple[str, int], tuple[int, str]]:
        """Kafka's ElectLeaders: a preferred or unclean election (see
        :func:`~raylog.coordination.elections.requested_election`) in each partition, or in
        every partition when ``partitions`` is None (then those needing none are left out of
        the answer, as Kafka does); all journaled in one batch. Per partition
        ``(error_code, message)``, code 0 where a leader was elected.

        Raises:
            ClusterAuthorizationFailedError: the caller may not ALTER the cluster.
        """
        await self.start()
        _require(self._caller(session), Op.ALTER, CLUSTER)
        keys = None if partitions is None else tuple(tuple(key) for key in partitions)
        async with self._guard():
            return self._carry_out(self.replication.step(ElectLeaders(election_type, keys)))

    async def alter_partition_reassignments(
        self,
        targets: dict[tuple[str, int], list[int] | None],
        allow_replication_factor_change: bool = True,
        session: str | None = None,
    ) -> dict:
        """Start moving partitions to new replica sets (also raising or lowering the
        replication factor unless not ``allow_replication_factor_change``), or cancel the
        reassignment under way where the target is None (back to the replicas it started
        from); per partition ``(error_code, message)``. New replicas fill by fetching; old
        ones are removed only once every target replica is in sync. Needs ALTER on the cluster.

        Raises:
            ClusterAuthorizationFailedError: the caller may not ALTER the cluster.
        """
        _require(self._caller(session), Op.ALTER, CLUSTER)

        def reassign(item: tuple[tuple[str, int], list[int] | None]) -> None:
            (topic, partition), target = item
            if target is None:
                self._commit(self.image.cancel_reassignment(topic, partition))
            else:
                self._commit(self.image.reassign(topic, partition, target, allow_replication_factor_change))
            self._start_reassignment(topic, partition)

        return await self._each({key: (key, target) for key, target in targets.items()}, reassign)

    async def list_partition_reassignments(
        self, session: str | None = None
    ) -> dict[tuple[str, int], tuple[tuple[int, ...], ...]]:
        """Per reassignment under way: ``(replicas, adding, removing)`` (see
        :meth:`MetadataImage.listed_reassignments`); needs DESCRIBE on the cluster."""
        await self.start()
        _require(self._caller(session), Op.DESCRIBE, CLUSTER)
        return self.image.listed_reassignments()

    def _start_reassignment(self, topic: str, partition: int) -> None:
        """The new replicas' actors, the partition's new state to every replica, then wait
        until they are in sync to complete it (in the background)."""
        self.fleet.ensure_replicas(topic)
        self.fleet.push([self.image.partition(topic, partition)])
        self._spawn(self._complete_reassignment(topic, partition))

    async def _complete_reassignment(self, topic: str, partition: int) -> None:
        """Switch to the target replicas once all are in sync; then remove the others."""
        while (topic, partition) in self.image.reassignments:
            await asyncio.sleep(self.config.node_check_interval_ms / 1000)
            async with self._guard():
                removed = self._carry_out(self.replication.step(CheckReassignment(topic, partition)))
                if removed is None:
                    continue
                handles = [self.fleet.replicas.pop((topic, partition, b), (None, None))[1] for b in removed]
            await self.fleet.remove_replica_actors([h for h in handles if h is not None])
            return

    async def find_coordinator(self, group_id: str, session: str | None = None) -> tuple[int, Any]:
        """``(partition, leader actor or None)`` of the ``__consumer_offsets`` partition whose
        leader coordinates ``group_id`` (Kafka's FindCoordinator); creates the topic, compacted
        and replicated, on the first call.

        Raises:
            GroupAuthorizationFailedError: the caller may not DESCRIBE the group.
        """
        _require(self._caller(session), Op.DESCRIBE, ResourceType.GROUP, group_id)
        return await self._coordinator_of(OFFSETS_TOPIC, group_id)

    async def find_transaction_coordinator(self, transactional_id: str, session: str | None = None) -> tuple[int, Any]:
        """As :meth:`find_coordinator`, for a transactional id and ``__transaction_state``
        (DESCRIBE on the transactional id)."""
        _require(self._caller(session), Op.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id)
        return await self._coordinator_of(TRANSACTION_TOPIC, transactional_id)

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
        """Create ``__consumer_offsets`` or ``__transaction_state`` with its configured
        replicas (at most as many as the cluster has brokers, so that one broker can run
        groups and transactions) and, as their writes are acks=all, ``min.insync.replicas``
        2 from three replicas up.

        Raises:
            CoordinatorNotAvailableError: fewer brokers are live than the topic needs (retriable:
                as in Kafka, clients wait until the cluster can host it fully replicated).
        """
        c = self.config
        if name == OFFSETS_TOPIC:
            partitions, factor, segment_bytes = (
                c.offsets_topic_num_partitions,
                c.offsets_topic_replication_factor,
                c.offsets_topic_segment_bytes,
            )
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
            "cleanup.policy": "compact",
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

    # --- replicas -----------------------------------------------------------------------

    # --- metadata -----------------------------------------------------------------------

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


def _require(access: Access | None, operation: Op, resource_type: ResourceType, name: str = CLUSTER_NAME) -> None:
    """Raise the resource type's authorization error unless ``access`` (None: anyone) may."""
    if access is not None:
        access.require(operation, resource_type, name)


def _decides(changed: list, topic: str) -> bool:
    """Whether a replica of ``topic`` may decide differently once ``changed`` (ACLs created
    or deleted) hold: a TOPIC ACL covering it, a GROUP one for the replicas of the offsets
    topic (its group coordinators), a TRANSACTIONAL_ID one for the transaction state's, a
    CLUSTER one (IDEMPOTENT_WRITE) for every replica."""
    for acl in changed:
        kind = acl.pattern.resource_type
        if (
            kind == ResourceType.CLUSTER
            or (kind == ResourceType.TOPIC and covers(acl.pattern, kind, topic))
            or (kind == ResourceType.GROUP and topic == OFFSETS_TOPIC)
            or (kind == ResourceType.TRANSACTIONAL_ID and topic == TRANSACTION_TOPIC)
        ):
            return True
    return False


async def _awaited(pushes: list[asyncio.Future], what: str) -> None:
    """Wait for ``pushes`` for at most :data:`PEER_CALL_TIMEOUT_S` (the replicas that do not
    answer get ``what`` when they do)."""
    if pushes:
        _, late = await asyncio.wait(pushes, timeout=PEER_CALL_TIMEOUT_S)
        if late:
            logger.info("%d replica(s) did not take %s at once", len(late), what)
