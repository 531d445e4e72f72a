"""The controller's pushes to replica actors, made until they arrive or a newer one replaces them.

A push (a partition's state, a topic's config, the client quotas) is the controller's word to
one replica actor. It may not arrive: the actor is paused, restarting, or its node is cut off,
and a call that timed out may or may not have run. Kafka's controller keeps a request queue per
broker and sends each LeaderAndIsr until the broker answers; here each replica's latest push of
each kind is sent again after every failure or timeout, until the actor answers, a newer push of
the same kind for the same replica replaces it, or the replica is no longer wanted (its broker
left, its topic was deleted, its actor was replaced). Replicas ignore a push older than what
they hold, so a push that arrives twice, or late, changes nothing. A caller that must answer only
once a push arrived (client quotas an admin just set) awaits the future :meth:`Pushes.push` returns.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Coroutine, Hashable
from typing import Any

from ray.exceptions import RayError

logger = logging.getLogger(__name__)


class Pushes:
    """The pushes under way, at most one per key (a replica and a kind of push).

    Args:
        spawn: runs a coroutine in the background (the controller's task set).
        timeout_s: how long one attempt waits for the actor's answer.
        retry_s: the pause after a failed or timed-out attempt.
    """

    def __init__(self, spawn: Callable[[Coroutine], None], timeout_s: float, retry_s: float):
        self._spawn = spawn
        self._timeout_s = timeout_s
        self._retry_s = retry_s
        self._latest: dict[Hashable, int] = {}
        self._tickets = itertools.count()

    def push(self, key: Hashable, wanted: Callable[[], bool], method: Any, *args: Any) -> asyncio.Future:
        """Call ``method.remote(*args)`` (a replica actor's method) until it answers, while
        ``wanted()`` holds and no later push of ``key`` was made. The future returned is True
        once the actor answered, False once the push was given up (replaced or not wanted)."""
        ticket = next(self._tickets)
        self._latest[key] = ticket
        delivered = asyncio.get_running_loop().create_future()
        self._spawn(self._deliver(key, ticket, wanted, method, args, delivered))
        return delivered

    def pending(self) -> int:
        """Pushes not answered yet."""
        return len(self._latest)

    async def _deliver(
        self,
        key: Hashable,
        ticket: int,
        wanted: Callable[[], bool],
        method: Any,
        args: tuple,
        delivered: asyncio.Future,
    ) -> None:
        attempts = 0
        try:
            while self._latest.get(key) == ticket and wanted():
                try:
                    await asyncio.wait_for(method.remote(*args), self._timeout_s)
                    delivered.set_result(True)
                    return
                except (asyncio.TimeoutError, RayError) as exc:
                    attempts += 1
                    if attempts == 1 or attempts % 10 == 0:
                        logger.info("push %s not answered (attempt %d), sent again: %r", key, attempts, exc)
                    await asyncio.sleep(self._retry_s)
        finally:
            if not delivered.done():
                delivered.set_result(False)
            if self._latest.get(key) == ticket:
                del self._latest[key]
