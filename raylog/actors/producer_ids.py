"""A transaction coordinator's producer-id pool shared by its threads (no Ray).

:class:`raylog.coordination.producer_ids.ProducerIdPool` is the bookkeeping, with no lock; the
coordinator takes ids under its own lock on request threads while a thread of its own fetches
the next round from the controller, and a request that finds none held waits for the round
under way without the coordinator's lock (:meth:`SharedProducerIdPool.wait`).
"""

from __future__ import annotations

import threading

from raylog.coordination.producer_ids import ProducerIdPool


class SharedProducerIdPool:
    """A :class:`ProducerIdPool` behind a condition variable: each method is the pool's, made
    under the lock; the end of a round wakes :meth:`wait`."""

    def __init__(self, pool: ProducerIdPool | None = None):
        self._pool = ProducerIdPool() if pool is None else pool
        self._changed = threading.Condition()

    def available(self) -> bool:
        with self._changed:
            return self._pool.available()

    def take(self) -> int:
        """See :meth:`ProducerIdPool.take` (raises what it raises)."""
        with self._changed:
            return self._pool.take()

    def start_fetch(self) -> int:
        with self._changed:
            return self._pool.start_fetch()

    def fetched(self, ids: list[int]) -> None:
        with self._changed:
            self._pool.fetched(ids)
            self._changed.notify_all()

    def fetch_failed(self) -> float:
        with self._changed:
            backoff_s = self._pool.fetch_failed()
            self._changed.notify_all()
            return backoff_s

    def wait(self, timeout_s: float) -> bool:
        """Wait, up to ``timeout_s``, while no id is held and the round under way (if any)
        has not ended; whether an id is held."""
        pool = self._pool
        with self._changed:
            ended = pool.fetches_ended
            self._changed.wait_for(
                lambda: pool.available() or not pool.fetching or pool.fetches_ended != ended, timeout_s
            )
            return pool.available()
