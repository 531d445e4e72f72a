"""A cluster handle whose clients' actor calls can be delayed, and so reordered.

Clients reach actors only through handles they get from the cluster handle: partition
leaders from :meth:`RaylogCluster.metadata` and a group's coordinator from the controller's
``find_coordinator``. :class:`DelayedCluster` hands out wrapped handles instead: while its
:class:`CallDelays` is switched on, a call goes through a small proxy actor that waits a
random delay before making it (two calls made in one order may reach the actor in the
other), and otherwise straight to the actor. The proxy turns Ray's failures into raylog's
errors (:func:`raylog.transport.translate`), so clients see what they would have
seen without it. Calls to the controller itself are not delayed (pause it instead).

Wrapped handles compare equal to their wrapped handles' wrappers (the producer compares
leaders), and a wrapped handle built in the proxy's process (a coordinator) becomes a
wrapped handle again when it reaches the process that owns the :class:`CallDelays`.
"""

from __future__ import annotations

import asyncio
import copy
import random
import threading
import uuid
from typing import Any

import ray
from ray.exceptions import RayError

from raylog.clients.cluster import RaylogCluster
from raylog.transport import translate

#: The :class:`CallDelays` of this process, by key (wrapped handles find theirs here).
_DELAYS: dict[str, CallDelays] = {}


class CallProxy:
    """The actor that makes delayed calls (async: it holds many at once)."""

    async def forward(self, handle: Any, method: str, delay_s: float, args: tuple, kwargs: dict) -> Any:
        await asyncio.sleep(delay_s)
        try:
            return await getattr(handle, method).remote(*args, **kwargs)
        except RayError as exc:
            raise translate(exc) from None

    async def find_coordinator(
        self, controller: Any, group_id: str, key: str, delay_s: float, session: str | None = None
    ) -> tuple[int, Any]:
        """The controller's answer, with the coordinator's handle wrapped for ``key``'s delays."""
        partition, handle = await self.forward(
            controller, "find_coordinator", delay_s, (group_id,), {"session": session}
        )
        return partition, None if handle is None else _DelayedHandle(handle, key)


def start_proxy(node_id: str | None = None) -> Any:
    """A :class:`CallProxy` actor (on ``node_id`` when given, e.g. the head, which faults spare)."""
    options: dict[str, Any] = {"num_cpus": 0, "max_concurrency": 1000}
    if node_id is not None:
        options["scheduling_strategy"] = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(node_id, False)
    return ray.remote(CallProxy).options(**options).remote()


class CallDelays:
    """Decides which calls are delayed and by how much: off until :meth:`start`. Seeded.

    Concurrency: thread-safe (clients call from their background threads)."""

    def __init__(self, proxy: Any, seed: int):
        self.proxy = proxy
        self.key = uuid.uuid4().hex
        self.delayed_count = 0
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._probability = 0.0
        self._max_delay_s = 0.0
        _DELAYS[self.key] = self

    def start(self, probability: float, max_delay_s: float) -> None:
        """From now on delay each call with ``probability`` by up to ``max_delay_s``."""
        with self._lock:
            self._probability, self._max_delay_s = probability, max_delay_s

    def stop(self) -> None:
        with self._lock:
            self._probability = 0.0

    def next_delay_s(self) -> float | None:
        """The delay of the next call, or None to make it directly."""
        with self._lock:
            if self._probability <= 0 or self._rng.random() >= self._probability:
                return None
            self.delayed_count += 1
            return self._rng.uniform(0, self._max_delay_s)

    def close(self) -> None:
        self.stop()
        _DELAYS.pop(self.key, None)


class _DelayedHandle:
    """An actor handle whose method calls may be delayed (see the module docstring)."""

    def __init__(self, handle: Any, key: str):
        self._handle = handle
        self._key = key

    def __getattr__(self, method: str) -> _DelayedMethod:
        if method.startswith("_"):
            raise AttributeError(method)
        return _DelayedMethod(self._handle, method, self._key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _DelayedHandle) and self._handle == other._handle

    def __hash__(self) -> int:
        return hash(self._handle)

    def __reduce__(self):
        return (_rebuild_handle, (self._handle, self._key))


def _rebuild_handle(handle: Any, key: str) -> Any:
    return _DelayedHandle(handle, key) if key in _DELAYS else handle


class _DelayedMethod:
    def __init__(self, handle: Any, method: str, key: str):
        self._handle, self._method, self._key = handle, method, key

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        delays = _DELAYS.get(self._key)
        delay_s = None if delays is None else delays.next_delay_s()
        if delay_s is None:
            return getattr(self._handle, self._method).remote(*args, **kwargs)
        return delays.proxy.forward.remote(self._handle, self._method, delay_s, args, kwargs)


class _Controller:
    """The controller's handle, with ``find_coordinator`` answering wrapped coordinators."""

    def __init__(self, controller: Any, delays: CallDelays):
        self._controller = controller
        self._delays = delays

    def __getattr__(self, method: str) -> Any:
        if method == "find_coordinator":
            return _FindCoordinator(self._controller, self._delays)
        return getattr(self._controller, method)


class _FindCoordinator:
    def __init__(self, controller: Any, delays: CallDelays):
        self._controller, self._delays = controller, delays

    def remote(self, group_id: str, session: str | None = None) -> Any:
        delay_s = self._delays.next_delay_s() or 0.0
        return self._delays.proxy.find_coordinator.remote(
            self._controller, group_id, self._delays.key, delay_s, session
        )


class DelayedCluster(RaylogCluster):
    """A cluster handle for clients whose calls :class:`CallDelays` may delay.

    It has its own metadata cache (like a copy of the cluster handle). Pickled, it is the
    plain cluster handle."""

    def __init__(self, cluster: RaylogCluster, delays: CallDelays):
        super().__init__(cluster.cluster_name, _Controller(cluster.controller, delays))
        self._key = delays.key
        self._wrap_lock = threading.Lock()
        self._source: Any = None
        self._wrapped: Any = None

    def metadata(self, refresh: bool = False):
        source = super().metadata(refresh)
        with self._wrap_lock:
            if source is not self._source:
                wrapped = copy.copy(source)
                wrapped.leaders = {tp: _DelayedHandle(h, self._key) for tp, h in source.leaders.items()}
                self._source, self._wrapped = source, wrapped
            return self._wrapped
