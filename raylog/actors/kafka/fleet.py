"""The controller's Kafka listeners: one :class:`~raylog.actors.kafka.listener.KafkaListenerActor`
per live broker, pinned to the broker's node, and the address each advertises.

The controller calls :meth:`ListenerFleet.reconcile` when it starts and at every watch round:
a broker without a listener (new, on a new node, or whose listener died) gets one; every
listener is asked to listen (one whose port is taken is logged and asked again next round).
A listener that died is started again on the port it had, also when ``listeners`` asked for
any free port, so the addresses clients bootstrap from stay true. A broker's listener actor
serves all of its named listeners; Metadata answers carry :meth:`ListenerFleet.endpoints`,
each broker's advertised address per listener name (a broker's own ``advertised.listeners``,
a dynamic config, over what its listener advertises by the cluster's settings): a listener
that listened stays there while it is only too busy to confirm in time, up to
:data:`LISTENER_SESSION_TIMEOUT_S`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Mapping
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from raylog.actors.kafka.listener import KafkaListenerActor
from raylog.common.names import LISTENER_START_TIMEOUT_S, NAMESPACE
from raylog.config import ControllerConfig
from raylog.coordination import broker_configs
from raylog.types import BrokerInfo

logger = logging.getLogger(__name__)

#: How long a running listener has to confirm it listens.
LISTENER_CHECK_TIMEOUT_S = 5.0
#: How long a listener that listened stays in Metadata answers while it does not confirm in
#: time: a busy listener is not a gone one (Kafka keeps a broker registered until its session
#: times out). A listener that died or cannot bind its port leaves at once.
LISTENER_SESSION_TIMEOUT_S = 30.0

_Remote = ray.remote(KafkaListenerActor)


def listener_name(cluster_name: str, broker_id: int, node_id: str) -> str:
    return f"raylog-{cluster_name}-kafka-b{broker_id}-{node_id[:16]}"


class ListenerFleet:
    """See the module docstring. Used from the controller's asyncio loop only."""

    def __init__(self, cluster_name: str, config: ControllerConfig, controller: Any, session_key: str):
        self.cluster_name = cluster_name
        self._session_key = session_key
        self.config = config
        self.controller = controller
        #: broker id -> (node id, actor handle)
        self._actors: dict[int, tuple[str, Any]] = {}
        #: broker id -> listener name -> advertised (host, port), for listener actors that
        #: confirmed all of the broker's listeners listen
        self._endpoints: dict[int, dict[str, tuple[str, int]]] = {}
        #: broker id -> why its listener last failed to confirm (each cause logged once)
        self._failing: dict[int, str] = {}
        #: broker id -> monotonic time its listener last confirmed it listens
        self._confirmed_at: dict[int, float] = {}
        #: broker id -> listener name -> the port it bound last (a new listener takes it again)
        self._ports: dict[int, dict[str, int]] = {}
        #: brokers' own advertised.listeners values by resource name, and what they give
        self._advertised_values: dict[str, str] = {}
        self._overrides: dict[int, dict[str, tuple[str, int]]] = {}

    def endpoints(
        self, live: set[int], dynamic: Mapping[str, Mapping[str, str]]
    ) -> dict[int, dict[str, tuple[str, int]]]:
        """``broker id -> listener name -> advertised (host, port)`` of each live broker whose
        listeners listen (names in the order of ``listeners``); ``dynamic``: the dynamic broker
        configs by resource name, whose ``advertised.listeners`` a broker advertises first."""
        overrides = self._advertised(dynamic)
        return {
            b: {name: self._override(b, name, endpoint, overrides.get(b, {})) for name, endpoint in e.items()}
            for b, e in self._endpoints.items()
            if b in live
        }

    def _advertised(self, dynamic: Mapping[str, Mapping[str, str]]) -> dict[int, dict[str, tuple[str, int]]]:
        values = {r: c["advertised.listeners"] for r, c in dynamic.items() if "advertised.listeners" in c}
        if values != self._advertised_values:
            self._advertised_values = values
            self._overrides, refused = broker_configs.advertised_overrides(dynamic, self.config)
            for broker_id, why in refused.items():
                logger.warning("broker %d: its own advertised.listeners is not used: %s", broker_id, why)
        return self._overrides

    def _override(
        self, broker_id: int, name: str, endpoint: tuple[str, int], own: dict[str, tuple[str, int]]
    ) -> tuple[str, int]:
        if name not in own:
            return endpoint
        host, port = own[name]
        return host or endpoint[0], port or self._ports.get(broker_id, {}).get(name, endpoint[1])

    async def reconcile(self, brokers: dict[int, BrokerInfo], live: set[int]) -> None:
        """Give every live broker a listener and make sure each listens."""
        by_node: dict[str, list[int]] = {}
        for b in live:
            by_node.setdefault(brokers[b].node_id, []).append(b)
        addresses = {}
        for ids in by_node.values():
            addresses.update(self.config.listener_addresses(ids))
        for b in live:
            node_id = brokers[b].node_id
            if self._actors.get(b, ("", None))[0] != node_id:
                self._endpoints.pop(b, None)
                ports = self._ports.get(b, {})
                listeners = tuple(
                    dataclasses.replace(listener, port=listener.port or ports.get(listener.name, 0))
                    for listener in addresses[b]
                )
                handle = _Remote.options(
                    name=listener_name(self.cluster_name, b, node_id),
                    namespace=NAMESPACE,
                    lifetime="detached",
                    get_if_exists=True,
                    max_concurrency=KafkaListenerActor.MAX_CONCURRENCY,
                    num_cpus=0,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
                ).remote(self.cluster_name, b, self.controller, listeners, self.config, self._session_key)
                self._actors[b] = (node_id, handle)
        await asyncio.gather(*(self._confirm(b) for b in live))

    async def _confirm(self, broker_id: int) -> None:
        timeout_s = LISTENER_CHECK_TIMEOUT_S if broker_id in self._endpoints else LISTENER_START_TIMEOUT_S
        try:
            bound = await asyncio.wait_for(self._actors[broker_id][1].start.remote(), timeout_s)
        except (OSError, ray.exceptions.RayError, asyncio.TimeoutError) as exc:
            silent_s = time.monotonic() - self._confirmed_at.get(broker_id, float("-inf"))
            busy = isinstance(exc, asyncio.TimeoutError) and silent_s <= LISTENER_SESSION_TIMEOUT_S
            if not busy:
                self._endpoints.pop(broker_id, None)
                self._confirmed_at.pop(broker_id, None)
            if isinstance(exc, ray.exceptions.ActorDiedError):
                del self._actors[broker_id]  # started again next round, on the same port
            state = "kept in metadata: busy" if busy else "tried again"
            if self._failing.get(broker_id) != state:
                logger.warning(
                    "broker %d: its Kafka listener does not confirm it listens (%s): %r", broker_id, state, exc
                )
            self._failing[broker_id] = state
            return
        self._failing.pop(broker_id, None)
        self._confirmed_at[broker_id] = time.monotonic()
        endpoints = {name: (host, port) for name, (host, port, _) in bound.items()}
        if self._endpoints.get(broker_id) != endpoints:
            advertised = ", ".join(f"{name} {host}:{port}" for name, (host, port) in endpoints.items())
            logger.info("broker %d: Kafka listeners at %s", broker_id, advertised)
        self._endpoints[broker_id] = endpoints
        self._ports[broker_id] = {name: port for name, (_, _, port) in bound.items()}

    async def push(self, update: str, version: int, payload: Any) -> None:
        """Call every listener's ``update`` (``update_acls``, ``update_credentials``) with the
        cluster's ``payload`` at ``version`` and wait until each applied it (at most
        :data:`LISTENER_CHECK_TIMEOUT_S`; one that does not answer takes it from its next
        metadata answer, within a second)."""
        calls = [
            asyncio.ensure_future(_awaited(getattr(h, update).remote(version, payload)))
            for _, h in self._actors.values()
        ]
        if not calls:
            return
        done, late = await asyncio.wait(calls, timeout=LISTENER_CHECK_TIMEOUT_S)
        missed = len(late) + sum(1 for call in done if call.exception() is not None)
        if missed:
            logger.info("%d Kafka listener(s) did not take %s version %d at once", missed, update, version)
        for call in late:
            call.cancel()

    def shutdown(self) -> None:
        """Stop every listener actor."""
        for _, handle in self._actors.values():
            ray.kill(handle, no_restart=True)
        self._actors.clear()
        self._endpoints.clear()
        self._confirmed_at.clear()


async def _awaited(ref: Any) -> Any:
    return await ref
