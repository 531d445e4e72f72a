"""A leader's purgatory: the requests that wait for something, each kept under what it waits
for (Kafka's ``DelayedOperationPurgatory`` with ``DelayedProduce``, ``DelayedFetch`` and
``DelayedDeleteRecords``).

An operation says when it is done (:meth:`Delayed.try_complete`, Kafka's ``tryComplete``),
reading the :class:`~raylog.coordination.partition.Partition` it waits on, and what it waits
for when it is not: a position of the partition and the value that position must reach.

=====================  ==========================================  =================================
operation              done when                                   waits for
=====================  ==========================================  =================================
:class:`DelayedProduce` the HW covers its batch (acks=all, a        the HW reaching its end offset
                        marker, a coordinator's record), or
                        leadership moved
:class:`DelayedFetch`   ``min_bytes`` to read, an error, the log   a consumer: the HW moving; a
                        start moved (a follower)                    follower: the log end moving
:class:`DelayedDelete`  every ISR member deleted below its offset   the low watermark reaching it
:class:`DelayedRetry`   another batch was appended (a producer's    the log end moving
                        batch after a sequence gap waits for the
                        missing one)
=====================  ==========================================  =================================

Every operation is also done once its deadline passes, and each is woken whenever the
leadership, the leader epoch or the log start changes, or the log goes offline.

:meth:`Purgatory.wake` returns the operations whose position reached its mark since they
were parked; no other operation is woken, so a change wakes only what it may complete (one
condition woken for all had every long poll re-read on every append). The pump, which owns
the waiting, carries out the rest: the replica actor parks the calling thread on a condition
of its own per operation (a threaded actor answers a call from the thread that took it); the
seeded simulation keeps the request message and answers it when the operation completes.
No clock, thread or I/O here: the pump passes the time.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from typing import Any

from raylog.coordination.partition import Partition
from raylog.errors import NotLeaderOrFollowerError, RaylogError, RequestTimedOutError
from raylog.protocol import FetchRequest, FetchResponse

#: The positions an operation may wait on (the attribute of :meth:`Purgatory._positions`).
HIGH_WATERMARK, LOG_END, LOW_WATERMARK = "high_watermark", "log_end", "low_watermark"
#: A purgatory rebuilds its heaps once this many entries belong to operations no longer
#: parked (ended by their deadline), so that a quiet partition's long polls leave nothing behind.
STALE_ENTRIES_MAX = 64


class Delayed:
    """A request that waits: :meth:`try_complete` says whether it is done and sets
    :attr:`answer`; meanwhile it waits for :attr:`position` to reach :attr:`mark`."""

    #: The position this operation waits on and the value it must reach (set by try_complete).
    position: str = HIGH_WATERMARK
    mark: int = 0
    #: The request pool the operation counts in (the replica's Ray concurrency group).
    pool: str = "produce"

    def __init__(self, deadline_ms: float, token: Any = None):
        self.deadline_ms = deadline_ms
        #: The pump's handle for it (the replica's condition; the simulation's message).
        self.token = token
        self.answer: Any = None
        self.parked = False
        self.entry = -1  # its entry in the purgatory's heap while parked

    def try_complete(self, p: Partition, now_ms: float) -> bool:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.position} >= {self.mark}, deadline {self.deadline_ms})"


class DelayedProduce(Delayed):
    """An acks=all batch (or a transaction marker, or a coordinator's records) appended below
    ``end_offset`` in ``leader_epoch``; :attr:`answer`: None once replicated, else the error
    (see :meth:`Partition.replication_done`; REQUEST_TIMED_OUT past the deadline)."""

    def __init__(
        self, end_offset: int, leader_epoch: int, deadline_ms: float, pool: str = "produce", token: Any = None
    ):
        super().__init__(deadline_ms, token)
        self.end_offset, self.leader_epoch, self.pool = end_offset, leader_epoch, pool

    def try_complete(self, p: Partition, now_ms: float) -> bool:
        done, self.answer = p.replication_done(self.end_offset, self.leader_epoch)
        if not done and now_ms >= self.deadline_ms:
            late = f"{p.name}: the ISR {list(p.isr)} did not get the batch in time"
            done, self.answer = True, RequestTimedOutError(late)
        self.position, self.mark = HIGH_WATERMARK, self.end_offset
        return done


class DelayedFetch(Delayed):
    """A fetch whose first read (:meth:`Partition.fetch`, ``first``) found less than its
    ``min_bytes``: read again (without counting the fetch again) until there is enough, an
    error, the deadline, or, for a follower, a new log start (it follows DeleteRecords at
    once). :attr:`answer`: the response to send."""

    def __init__(self, request: FetchRequest, first: FetchResponse, deadline_ms: float, token: Any = None):
        super().__init__(deadline_ms, token)
        self.request, self.answer = request, first
        self.follower = request.replica_id >= 0
        self.pool = "replication" if self.follower else "fetch"
        self.position = LOG_END if self.follower else HIGH_WATERMARK
        self._log_start = first.log_start_offset
        self._read_again = False  # the first try judges the first read

    def try_complete(self, p: Partition, now_ms: float) -> bool:
        if self._read_again:
            self.answer = p.fetch(self.request, record_fetch=False)
        self._read_again = True
        if self._complete(self.answer, now_ms):
            return True
        self.mark = 1 + (p.log.log_end_offset if self.follower else p.high_watermark)
        return False

    def _complete(self, response: FetchResponse, now_ms: float) -> bool:
        return bool(
            response.error_code
            or len(response.records) >= self.request.min_bytes
            or now_ms >= self.deadline_ms
            or (self.follower and response.log_start_offset != self._log_start)
        )


class DelayedDelete(Delayed):
    """DeleteRecords below ``target`` on the leader of ``leader_epoch``: done once the low
    watermark reached it (:attr:`answer` None), or with an error once leadership moved or the
    deadline passed."""

    def __init__(self, target: int, leader_epoch: int, deadline_ms: float, token: Any = None):
        super().__init__(deadline_ms, token)
        self.target, self.leader_epoch = target, leader_epoch
        self.position, self.mark = LOW_WATERMARK, target

    def try_complete(self, p: Partition, now_ms: float) -> bool:
        self.answer = None
        if p.low_watermark >= self.target:
            return True
        if not p.is_leader or p.leader_epoch != self.leader_epoch:
            self.answer = NotLeaderOrFollowerError(f"{p.name}: leadership moved before every replica deleted")
        elif now_ms >= self.deadline_ms:
            late = f"{p.name}: the ISR's low watermark is {p.low_watermark}, not {self.target}"
            self.answer = RequestTimedOutError(late)
        return self.answer is not None


class DelayedRetry(Delayed):
    """A step to try again once another batch is appended (a producer's batch that came before
    an earlier one of its producer); :attr:`answer`: None to try again, the error past the deadline."""

    position = LOG_END

    def __init__(self, error: RaylogError, deadline_ms: float, token: Any = None):
        super().__init__(deadline_ms, token)
        self._error, self._seen = error, None

    def try_complete(self, p: Partition, now_ms: float) -> bool:
        end = p.log.log_end_offset
        if self._seen is not None and end != self._seen:
            self.answer = None
            return True
        if now_ms >= self.deadline_ms:
            self.answer = self._error
            return True
        self._seen, self.mark = end, end + 1
        return False


class Purgatory:
    """The operations parked on one partition, each under the position it waits on."""

    def __init__(self) -> None:
        self._heaps: dict[str, list[tuple[int, int, Delayed]]] = {HIGH_WATERMARK: [], LOG_END: [], LOW_WATERMARK: []}
        self._parked: dict[int, Delayed] = {}
        self._order = itertools.count()
        self._generation: tuple | None = None
        self._stale = 0

    def park(self, op: Delayed) -> None:
        """Keep ``op`` until its position reaches its mark (after a failed :meth:`Delayed.try_complete`)."""
        op.parked, op.entry = True, next(self._order)
        self._parked[id(op)] = op
        heapq.heappush(self._heaps[op.position], (op.mark, op.entry, op))

    def unpark(self, op: Delayed) -> None:
        """Forget ``op`` (its deadline passed, or its caller went away) if it is parked."""
        if self._parked.pop(id(op), None) is not None:
            op.parked = False
            self._stale += 1
            if self._stale > STALE_ENTRIES_MAX:
                self._rebuild()

    def wake(self, p: Partition) -> list[Delayed]:
        """The parked operations that ``p``'s change may complete, taken out: those whose position
        reached its mark, or every one when the role, the leader epoch or the log start moved
        or the log went offline. The caller tries each again and parks what is not done."""
        generation = (p.is_leader, p.leader_epoch, p.log.log_start_offset, p.log.offline is None)
        if generation != self._generation:
            self._generation = generation
            woken = list(self._parked.values())
            self._parked.clear()
            for heap in self._heaps.values():
                heap.clear()
            self._stale = 0
        else:
            woken = []
            for position, heap in self._heaps.items():
                if heap:
                    value = self._position(p, position)
                    while heap and heap[0][0] <= value:
                        _, entry, op = heapq.heappop(heap)
                        if op.parked and op.entry == entry:
                            del self._parked[id(op)]
                            woken.append(op)
                        else:
                            self._stale -= 1
        for op in woken:
            op.parked = False
        return woken

    def expired(self, now_ms: float) -> list[Delayed]:
        """The parked operations whose deadline passed, taken out (for a pump whose waits do
        not end on their own)."""
        late = [op for op in self._parked.values() if now_ms >= op.deadline_ms]
        for op in late:
            self.unpark(op)
        return late

    def sizes(self) -> dict[str, int]:
        """Parked operations by request pool (Kafka's purgatory size)."""
        return dict(Counter(op.pool for op in self._parked.values()))

    def __len__(self) -> int:
        return len(self._parked)

    def __iter__(self):
        return iter(list(self._parked.values()))

    @staticmethod
    def _position(p: Partition, position: str) -> int:
        if position == HIGH_WATERMARK:
            return p.high_watermark
        if position == LOG_END:
            return p.log.log_end_offset
        return p.low_watermark

    def _rebuild(self) -> None:
        for heap in self._heaps.values():
            heap[:] = [(mark, entry, op) for mark, entry, op in heap if op.parked and op.entry == entry]
            heapq.heapify(heap)
        self._stale = 0
