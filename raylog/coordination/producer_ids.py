"""Producer ids fetched ahead of need (Kafka's ProducerIdManager), no Ray.

A transaction coordinator gives each new transactional id a producer id, and a new one when
an id's epochs run out; a Kafka listener gives one to each idempotent Kafka producer that
asks (InitProducerId). Those ids come from the controller, and asking it is a call that may
wait (up to a peer call's timeout; a paused or restarting controller does not answer), while
the coordinator makes its moves under its lock and a producer waits for its id. So the ids
are fetched ahead, in the background, as Kafka's brokers fetch the next block of ids from
the controller before the current one runs out (KIP-730): the pool keeps what was fetched,
and once it holds fewer than ``low_count`` ids :meth:`ProducerIdPool.start_fetch` tells its
owner to fetch ``fetch_count`` more (one fetch at a time); a round that failed (a busy or
paused controller's timeout) is fetched again after a backoff :meth:`ProducerIdPool.fetch_failed`
returns, not left until the next producer asks. Taking from an empty pool raises
COORDINATOR_LOAD_IN_PROGRESS (retriable), Kafka's answer while its next block is on its way.
Ids fetched and never used are skipped for good (the controller never hands them out
again), as Kafka skips the rest of a block its coordinator dropped.

Concurrency: not thread-safe (coordination has no threads); a Kafka listener uses it on its
asyncio loop, and the transaction coordinator's threads through
:class:`raylog.actors.producer_ids.SharedProducerIdPool`, which locks it and lets a thread wait
for the round under way.
"""

from __future__ import annotations

import collections

from ..errors import CoordinatorLoadInProgressError

#: Producer ids fetched per round (one controller call).
FETCH_COUNT = 16
#: The next round is fetched once fewer ids than this are left.
LOW_COUNT = 4
#: How long after a failed round its owner fetches again; doubled for each failure in a
#: row, up to RETRY_BACKOFF_MAX_S (Kafka's retry.backoff.ms and retry.backoff.max.ms).
RETRY_BACKOFF_S = 0.1
RETRY_BACKOFF_MAX_S = 1.0


class ProducerIdPool:
    """See the module docstring."""

    def __init__(self, fetch_count: int = FETCH_COUNT, low_count: int = LOW_COUNT):
        assert 0 < low_count <= fetch_count, (low_count, fetch_count)
        self.fetch_count = fetch_count
        self.low_count = low_count
        self._ids: collections.deque[int] = collections.deque()
        #: A round is under way (its owner calls fetched() or fetch_failed() next).
        self.fetching = False
        #: Rounds that ended, fetched or failed (what a waiter for the round watches).
        self.fetches_ended = 0
        self._failures = 0  # rounds failed in a row

    def available(self) -> bool:
        return bool(self._ids)

    def take(self) -> int:
        """The next producer id, at once.

        Raises:
            CoordinatorLoadInProgressError: none is held (the next round is not in yet).
        """
        if not self._ids:
            raise CoordinatorLoadInProgressError("the coordinator is fetching producer ids: retry")
        return self._ids.popleft()

    def start_fetch(self) -> int:
        """How many ids the owner must fetch now (then it reports :meth:`fetched` or
        :meth:`fetch_failed`): 0 while enough are held or a round is under way."""
        if self.fetching or len(self._ids) >= self.low_count:
            return 0
        self.fetching = True
        return self.fetch_count

    def fetched(self, ids: list[int]) -> None:
        """The round's ids came."""
        self._ids.extend(ids)
        self._failures = 0
        self._end_fetch()

    def fetch_failed(self) -> float:
        """The round brought nothing: the seconds after which the owner calls
        :meth:`start_fetch` again (a producer that asks meanwhile may start a round sooner)."""
        self._failures += 1
        self._end_fetch()
        return min(RETRY_BACKOFF_MAX_S, RETRY_BACKOFF_S * 2 ** (self._failures - 1))

    def _end_fetch(self) -> None:
        self.fetching = False
        self.fetches_ended += 1
