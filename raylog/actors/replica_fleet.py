"""The controller's replica actors: created on their brokers' nodes, found again after a
controller restart, and told their partition's state, config, quotas, ACLs and group configs.

One actor per replica (hard node affinity, restarted in place by Ray, named by cluster, topic
id, partition, broker and node: see :func:`raylog.common.names.replica_name`), created in
the background at most :data:`MAX_STARTING_REPLICAS` at a time, leaders first (a partition
serves once its leader runs). A replica is *ready* once its actor, as cached here, answered
``ready``. Every push to a replica is made again until it answers, a newer one replaces it,
or the replica is no longer wanted (:class:`~raylog.actors.pushes.Pushes`).

What to push is decided elsewhere (the metadata image and the controller's
:class:`~raylog.coordination.replication_control.ReplicationControl`); this class carries it
to the actors.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from raylog.actors.group_coordinator import GroupCoordinatorActor
from raylog.actors.pushes import Pushes
from raylog.actors.replica import PartitionReplicaActor
from raylog.actors.replica_parts import PEER_CALL_TIMEOUT_S
from raylog.actors.transaction_coordinator import TransactionCoordinatorActor
from raylog.common.names import NAMESPACE, OFFSETS_TOPIC, TRANSACTION_TOPIC, replica_name
from raylog.config import ControllerConfig
from raylog.coordination.acls import Authorizer, parse_super_users
from raylog.coordination.consumer_group import ConsumerGroupConfig
from raylog.coordination.metadata import MetadataImage
from raylog.coordination.replication_control import ReplicationControl
from raylog.types import PartitionInfo, TopicDescription

logger = logging.getLogger(__name__)

#: How long the controller waits for a new replica actor to answer (process start and log
#: recovery); one that has not answered by then is tried again in the next watch round.
REPLICA_START_TIMEOUT_S = 60.0
#: Replica actors started at once, in the background. Each is a process that imports Ray and
#: raylog and recovers its log: more at once only queue behind the node's cores and Ray's
#: worker start-up, and would hold up the leaders that are started first.
MAX_STARTING_REPLICAS = 8
#: The pause before a push to a replica is made again (its actor was unreachable, e.g. Ray
#: is restarting it or this process has not yet heard where it restarted, or did not answer).
PUSH_RETRY_S = 0.5


class ReplicaFleet:
    """See the module docstring. Concurrency: the controller's event loop."""

    def __init__(
        self,
        cluster_name: str,
        image: MetadataImage,
        replication: ReplicationControl,
        config: ControllerConfig,
        consumer_groups: ConsumerGroupConfig,
        spawn: Callable[[Any], None],
    ):
        self.cluster_name = cluster_name
        self.image = image
        self._replication = replication
        self.config = config
        self._consumer_groups = consumer_groups
        self._spawn = spawn
        self._pushes = Pushes(spawn, PEER_CALL_TIMEOUT_S, PUSH_RETRY_S)
        # (topic, partition, broker) -> (node the actor is pinned to, actor handle)
        self.replicas: dict[tuple[str, int, int], tuple[str, Any]] = {}
        #: Keys whose actor, as cached, answered ``ready``.
        self.ready: set[tuple[str, int, int]] = set()
        # Start-up (see start_replicas): keys waiting, leaders first; the event wakes await_leaders.
        self._leaders_to_start: collections.deque[tuple[str, int, int]] = collections.deque()
        self._followers_to_start: collections.deque[tuple[str, int, int]] = collections.deque()
        self._starting: set[tuple[str, int, int]] = set()
        self._starting_leaders: set[tuple[str, int, int]] = set()
        self._leaders_starting = 0  # leaders taken from the queue, not started yet
        self._starters = 0
        self._leaders_changed: asyncio.Event | None = None
        #: The ACLs as an authorizer for the replicas, and the ACLs' version it was built at.
        self._authorizer: tuple[int, Authorizer | None] = (-1, None)

    @property
    def live(self) -> set[int]:
        return self._replication.live

    def ensure_replicas(self, name: str) -> None:
        """Start every live replica actor of topic ``name`` that is not running (in the
        background: see :meth:`start_replicas`)."""
        topic = self.image.topic(name)
        keys = [(name, p.partition, b) for p in topic.partitions for b in p.replicas if b in self.live]
        self.start_replicas([k for k in keys if not self.is_ready(k)])

    async def find_running_replicas(self) -> None:
        """After a controller restart: take the replica actors that still run (found by name,
        in a thread: each look-up asks Ray's GCS) as running, so that clients keep their
        leaders, and tell them the current state (a push may have been lost in the restart)."""
        keys = [(t.name, p.partition, b) for t in self.image.topics.values() for p in t.partitions for b in p.replicas]
        names = {key: self._replica_name(key) for key in keys if key[2] in self.live}
        found = await asyncio.to_thread(lambda: {key: h for key, name in names.items() if (h := _running(name))})
        for key, handle in found.items():
            self._keep_replica(key, handle)
            self.ready.add(key)
        self.push(self.image.partitions())

    def start_missing_replicas(self) -> None:
        """:meth:`ensure_replicas` for every topic: after a (controller) start, for brokers
        back on new nodes, and for replicas whose start failed. Checked every watch round."""
        for name in list(self.image.topics):
            self.ensure_replicas(name)

    def start_replicas(self, keys: list[tuple[str, int, int]]) -> None:
        """Queue replica actors to start, at most :data:`MAX_STARTING_REPLICAS` at a time, as
        Kafka brokers do after a topic is created: the topic exists once journaled, and its
        partitions get leaders as their actors answer (clients get LEADER_NOT_AVAILABLE and
        retry meanwhile). Leaders first: a partition serves once its leader runs, and a
        follower is created with its leader's actor."""
        for key in keys:
            if key in self._starting:
                continue
            self._starting.add(key)
            if self.image.topics[key[0]].partitions[key[1]].leader == key[2]:
                self._starting_leaders.add(key)
                self._leaders_to_start.append(key)
            else:
                self._followers_to_start.append(key)
        while self._starters < MAX_STARTING_REPLICAS and (self._leaders_to_start or self._followers_to_start):
            self._starters += 1
            self._spawn(self._run_starter())

    async def _run_starter(self) -> None:
        """Start queued replicas one after another: leaders first, and followers only once no
        leader is starting (on a node of few cores, a follower's process start would slow
        the leaders' down, and a partition serves once its leader runs)."""
        try:
            while self._leaders_to_start or self._followers_to_start:
                if self._leaders_to_start:
                    key = self._leaders_to_start.popleft()
                    self._leaders_starting += 1
                elif self._leaders_starting:
                    await wait_for_event(self.leaders_event(), REPLICA_START_TIMEOUT_S)
                    continue
                else:
                    key = self._followers_to_start.popleft()
                leads = key in self._starting_leaders
                try:
                    await self._start_replica(key)
                except Exception:  # noqa: BLE001 — the next watch round tries it again
                    logger.exception("starting replica %s-%d on broker %d failed", *key)
                finally:
                    self._starting.discard(key)
                    if leads:
                        self._starting_leaders.discard(key)
                        self._leaders_starting -= 1
                        self.notify_leaders()
        finally:
            self._starters -= 1

    async def _start_replica(self, key: tuple[str, int, int]) -> None:
        """Create the replica actor of ``key`` (or find it, after a controller restart), wait
        until it answers, and tell it the partition's state if that moved meanwhile (pushes
        skip replicas that are not running yet). Created in a thread: creating a named actor
        waits for Ray's GCS, which on the event loop would hold up elections meanwhile."""
        name, partition, broker_id = key
        topic = self.image.topics.get(name)
        if topic is None or broker_id not in self.live or broker_id not in topic.partitions[partition].replicas:
            return
        config_version = self.image.config_versions[name]
        handle = self.cached(key)
        created = handle is None
        if created:
            cls, options, args, kwargs = self._replica_spec(key)
            handle = await asyncio.to_thread(lambda: _remote(cls).options(**options).remote(*args, **kwargs))
            now = self.image.topics.get(name)
            if now is None or now.topic_id != topic.topic_id:
                await self.remove_replica_actors([handle], topic_deleted=True)  # deleted meanwhile
                return
            self._keep_replica(key, handle)
        try:
            answer = await asyncio.wait_for(handle.ready.remote(), REPLICA_START_TIMEOUT_S)
        except (asyncio.TimeoutError, ray.exceptions.RayError) as exc:
            logger.warning("replica %s-%d on broker %d did not start (tried again later): %r", *key, exc)
            return
        if self.cached(key) is not handle or name not in self.image.topics:
            return  # deleted or moved meanwhile
        self.ready.add(key)
        info = self.image.partition(name, partition)
        if created and info.leader == broker_id:
            # Its running followers were told of no actor of it, or of one on the node its
            # broker left: they follow this one from now on.
            self.push([info])
        elif (answer["leader_epoch"], answer["partition_epoch"]) != (info.leader_epoch, info.partition_epoch) or (
            config_version != self.image.config_versions[name]
        ):
            self.push([info], only=broker_id)
        self.notify_leaders()

    def is_ready(self, key: tuple[str, int, int]) -> bool:
        return key in self.ready and self.cached(key) is not None

    def notify_leaders(self) -> None:
        if self._leaders_changed is not None:
            self._leaders_changed.set()
            self._leaders_changed = None

    def leaders_event(self) -> asyncio.Event:
        if self._leaders_changed is None:
            self._leaders_changed = asyncio.Event()
        return self._leaders_changed

    def live_leader(self, info: PartitionInfo):
        """The running actor of ``info``'s leader, or None (not live, or not started yet)."""
        key = (info.topic, info.partition, info.leader)
        return self.cached(key) if info.leader in self.live and self.is_ready(key) else None

    def partition_ready(self, info: PartitionInfo, followers: bool) -> bool:
        """Whether ``info``'s leader runs, and with ``followers`` every replica on a live broker."""
        if self.live_leader(info) is None:
            return False
        live = (b for b in info.replicas if b in self.live)
        return not followers or all(self.is_ready((info.topic, info.partition, b)) for b in live)

    def _replica_actor(self, topic_name: str, partition: int, broker_id: int):
        """The replica actor of ``broker_id`` for the partition on its broker's current node,
        created here if this controller has none (blocking the event loop: only for the
        leader of a follower being created, which is normally started already)."""
        key = (topic_name, partition, broker_id)
        handle = self.cached(key)
        if handle is None:
            cls, options, args, kwargs = self._replica_spec(key)
            handle = self._keep_replica(key, _remote(cls).options(**options).remote(*args, **kwargs))
        return handle

    def cached(self, key: tuple[str, int, int]):
        cached = self.replicas.get(key)
        return cached[1] if cached is not None and cached[0] == self.image.brokers[key[2]].node_id else None

    def _keep_replica(self, key: tuple[str, int, int], handle):
        self.replicas[key] = (self.image.brokers[key[2]].node_id, handle)
        self.ready.discard(key)
        self.push_quotas([key])
        self.push_acls([key])
        self.push_group_configs([key])
        return handle

    def _replica_name(self, key: tuple[str, int, int]) -> str:
        topic_name, partition, broker_id = key
        node_id = self.image.brokers[broker_id].node_id
        return replica_name(self.cluster_name, self.image.topics[topic_name].topic_id, partition, broker_id, node_id)

    def _replica_spec(self, key: tuple[str, int, int]) -> tuple[type, dict, tuple, dict]:
        """How to create the replica actor of ``key``: its class, options and arguments (the
        partition's state and, for a follower, its live leader's actor; a group coordinator's
        settings)."""
        topic_name, partition, broker_id = key
        broker = self.image.brokers[broker_id]
        topic = self.image.topics[topic_name]
        state = topic.partitions[partition]
        leader = None
        if state.leader >= 0 and state.leader != broker_id and state.leader in self.live:
            leader = self._replica_actor(topic_name, partition, state.leader)
        options = {
            "name": self._replica_name(key),
            "namespace": NAMESPACE,
            "lifetime": "detached",
            "get_if_exists": True,
            "max_restarts": -1,
            "max_task_retries": 0,
            "num_cpus": 0,
            "scheduling_strategy": NodeAffinitySchedulingStrategy(broker.node_id, soft=False),
        }
        args = (
            self.cluster_name,
            topic.name,
            topic.topic_id,
            partition,
            broker_id,
            broker.data_dir,
            self.image.replica_config(topic.name, broker_id),
            state,
            leader,
        )
        actor_class = {OFFSETS_TOPIC: GroupCoordinatorActor, TRANSACTION_TOPIC: TransactionCoordinatorActor}.get(
            topic_name, PartitionReplicaActor
        )
        options["max_concurrency"] = actor_class.MAX_CONCURRENCY
        kwargs: dict[str, Any] = {
            "session_key": self.image.session_key,
            "acls": self.authorizer(),
            "remote_log_storage_uri": self.config.remote_log_storage_uri,
        }
        if actor_class is GroupCoordinatorActor:
            kwargs["initial_rebalance_delay_ms"] = self.config.group_initial_rebalance_delay_ms
            kwargs["consumer_groups"] = self._consumer_groups
        return actor_class, options, args, kwargs

    def push(self, partitions: list[PartitionInfo], only: int | None = None) -> None:
        """Tell every running replica of each partition (or broker ``only``'s) its new state and
        its topic's config, in the background until it answers (see :class:`Pushes`). A
        replica not started yet gets the state it will start with, or is told once it answers."""
        for info in partitions:
            for broker_id in info.replicas:
                key = (info.topic, info.partition, broker_id)
                handle = self.cached(key)
                if broker_id in self.live and handle is not None and only in (None, broker_id):
                    leader, config = self.role(info, broker_id)
                    self._pushes.push(
                        ("state", *key), self._still(key, handle), handle.update_state, info, leader, config
                    )

    def _still(self, key: tuple[str, int, int], handle) -> Callable[[], bool]:
        """Whether pushes to ``handle`` are still wanted: its broker is live and it is still
        the replica's actor (not deleted with its topic, nor replaced on a new node)."""
        return lambda: key[2] in self.live and self.cached(key) is handle

    def role(self, info: PartitionInfo, broker_id: int) -> tuple[Any, tuple[int, dict]]:
        """What broker ``broker_id``'s replica of ``info``'s partition is told with its state:
        the leader's actor (None when the leader is not live or its actor not created yet: it
        is told when the leader answers) and ``(config version, config)``, the topic's under
        the broker's own dynamic defaults."""
        key = (info.topic, info.partition, info.leader)
        leader = self.cached(key) if info.leader in self.live else None
        return leader, (self.image.config_versions[info.topic], self.image.replica_config(info.topic, broker_id))

    def push_quotas(self, keys: list[tuple[str, int, int]]) -> list[asyncio.Future]:
        """Tell the replicas of ``keys`` the client quotas and their version (as :meth:`push`);
        the pushes, to await."""
        if not self.image.client_quotas_version:
            return []  # never set: replicas start without quotas
        version, quotas = self.image.client_quotas_version, dict(self.image.client_quotas)
        return self._push_to_replicas(keys, "quotas", "update_quotas", version, quotas)

    def push_group_configs(self, keys: list[tuple[str, int, int]]) -> list[asyncio.Future]:
        """Tell the group coordinators among the replicas of ``keys`` the groups' dynamic
        configs and their version (as :meth:`push`); the pushes, to await."""
        if not self.image.group_configs_version:
            return []  # never set: coordinators start with the broker's settings
        version, configs = self.image.group_configs_version, dict(self.image.group_configs)
        coordinators = [key for key in keys if key[0] == OFFSETS_TOPIC]
        return self._push_to_replicas(coordinators, "group_configs", "update_group_configs", version, configs)

    def push_acls(self, keys: list[tuple[str, int, int]]) -> list[asyncio.Future]:
        """Tell the replicas of ``keys`` the ACLs as an authorizer (as :meth:`push`); the
        pushes, to await."""
        if not self.config.authorizer:
            return []  # replicas start without an authorizer
        return self._push_to_replicas(keys, "acls", "update_acls", *self.authorizer())

    def _push_to_replicas(self, keys: list[tuple[str, int, int]], kind: str, method: str, *args) -> list:
        pushes = []
        for key in keys:
            handle = self.cached(key)
            if handle is not None:
                pushes.append(self._pushes.push((kind, *key), self._still(key, handle), getattr(handle, method), *args))
        return pushes

    def authorizer(self) -> tuple[int, Authorizer | None]:
        """``(ACLs version, authorizer)`` for the replicas (None without the authorizer
        setting), built once per version of the ACLs."""
        if not self.config.authorizer:
            return self.image.acls_version, None
        if self._authorizer[0] != self.image.acls_version:
            super_users = parse_super_users(self.config.super_users)
            everyone = self.config.allow_everyone_if_no_acl_found
            self._authorizer = (self.image.acls_version, Authorizer(self.image.acls, super_users, everyone))
        return self._authorizer

    def remove_replicas(self, topic: TopicDescription) -> Awaitable[None]:
        """Forget ``topic``'s replica actors; the removal of their data and processes, to await."""
        keys = [(topic.name, p.partition, b) for p in topic.partitions for b in p.replicas]
        self.ready.difference_update(keys)
        handles = [self.replicas.pop(key, (None, None))[1] for key in keys]
        return self.remove_replica_actors([h for h in handles if h is not None], topic_deleted=True)

    async def remove_replica_actors(self, handles: list, topic_deleted: bool = False) -> None:
        """Delete the replicas' data (with ``topic_deleted``, their partitions' remote objects
        too) and stop their actors."""
        await asyncio.gather(
            *(asyncio.wait_for(h.delete_data.remote(topic_deleted), PEER_CALL_TIMEOUT_S) for h in handles),
            return_exceptions=True,
        )
        for handle in handles:
            ray.kill(handle, no_restart=True)


@functools.cache
def _remote(actor_class: type):
    """The Ray actor class of ``actor_class`` with its concurrency groups (which ``.options()``
    cannot set), made once (each ``ray.remote`` exports the class anew)."""
    return ray.remote(concurrency_groups=actor_class.CONCURRENCY_GROUPS)(actor_class)


def _running(name: str):
    """The actor named ``name`` in raylog's namespace, or None."""
    try:
        return ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        return None


async def wait_for_event(event: asyncio.Event, timeout_s: float) -> None:
    """Wait until ``event`` is set or ``timeout_s`` passes."""
    try:
        await asyncio.wait_for(event.wait(), timeout_s)
    except asyncio.TimeoutError:
        pass
