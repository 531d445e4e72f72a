"""What the parts of the controller actor share.

:class:`~raylog.actors.controller.ControllerActor` is one Ray actor (one process, one asyncio
loop) made of parts, each a class of its own module, one job each, as KRaft splits its
controller:

- :mod:`~raylog.actors.controller`: the journal, start-up, the watch rounds, and the
  replicas' calls about leaders and ISRs, stepped through
  :class:`~raylog.coordination.replication_control.ReplicationControl`;
- :mod:`~raylog.actors.controller_topics`: topics, partitions, elections, reassignments;
- :mod:`~raylog.actors.controller_configs`: topic, broker and group configs, client quotas;
- :mod:`~raylog.actors.controller_security`: ACLs, SCRAM credentials, SASL, callers;
- :mod:`~raylog.actors.controller_lookup`: metadata, coordinators, producer ids, replica
  actors, waiting for leaders.

Every part reads the state and takes the steps :class:`ControllerPart` lists, which
``ControllerActor`` owns; no part keeps state of its own beyond it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from raylog.actors.access import Access, Guard
from raylog.actors.broker_finder import BrokerFinder
from raylog.actors.kafka.fleet import ListenerFleet
from raylog.actors.replica_fleet import ReplicaFleet
from raylog.actors.replica_parts import PEER_CALL_TIMEOUT_S
from raylog.common.acl import CLUSTER_NAME, ResourceType
from raylog.common.acl import ACLOperation as Op
from raylog.config import ControllerConfig
from raylog.coordination.consumer_group import ConsumerGroupConfig
from raylog.coordination.metadata import MetadataImage
from raylog.coordination.replication_control import ControllerResult, ReplicationControl
from raylog.kafka.sasl import SaslExchange
from raylog.storage.journal import MetadataJournal

logger = logging.getLogger(__name__)

TOPIC, CLUSTER, GROUP = ResourceType.TOPIC, ResourceType.CLUSTER, ResourceType.GROUP


class ControllerPart:
    """The controller actor's state and steps that its parts use (set and defined by
    :class:`~raylog.actors.controller.ControllerActor`)."""

    cluster_name: str
    config: ControllerConfig
    #: The broker's consumer group settings: the group coordinators', and the bounds of
    #: groups' dynamic configs.
    _consumer_groups: ConsumerGroupConfig
    image: MetadataImage
    journal: MetadataJournal
    replication: ReplicationControl
    fleet: ReplicaFleet
    broker_finder: BrokerFinder
    listeners: ListenerFleet | None
    #: Who calls the admin API: the session key and the ACLs (see raylog.actors.access).
    _callers: Guard
    #: SASL exchanges of raylog's clients under way: id -> (exchange, when it started).
    _exchanges: dict[str, tuple[SaslExchange, float]]
    _next_producer_id: int
    live: set[int]
    start: Callable[[], Any]  # (a coroutine function: register brokers and replicas once)
    _commit: Callable[[list[dict[str, Any]]], None]
    _carry_out: Callable[[ControllerResult], Any]
    _guard: Callable[[], asyncio.Lock]
    _spawn: Callable[[Any], None]
    _caller: Callable[[str | None], Access | None]


def require(access: Access | None, operation: Op, resource_type: ResourceType, name: str = CLUSTER_NAME) -> None:
    """Raise the resource type's authorization error unless ``access`` (None: anyone) may."""
    if access is not None:
        access.require(operation, resource_type, name)


async def awaited(pushes: list[asyncio.Future], what: str) -> None:
    """Wait for ``pushes`` for at most :data:`PEER_CALL_TIMEOUT_S` (the replicas that do not
    answer get ``what`` when they do)."""
    if pushes:
        _, late = await asyncio.wait(pushes, timeout=PEER_CALL_TIMEOUT_S)
        if late:
            logger.info("%d replica(s) did not take %s at once", len(late), what)
