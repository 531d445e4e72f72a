"""Leadership during a fault run: every change of a partition's leader (or of its leader
epoch) the controller made, and whether a fault explains it.

A leader may lose its leadership only when its process or node was stopped, killed, cut off
or its disk failed: a leader demoted while healthy (a follower's fetch that timed out on a
busy leader, a controller that judged it dead) is a fault of raylog's, even when nothing is
lost. :class:`LeadershipWatch` samples the controller's view of the run's topic in a thread;
:func:`unexplained` keeps the changes no fault disturbing that leader explains. Each fault
names what it disturbed (:attr:`raylog.chaos.nemesis.FaultEvent.disturbed`); a change counts
as its consequence from the fault's start until :data:`GRACE_S` after it was healed, or until
the end of the run when its healing was never seen (the nemesis stopped waiting with an
error: a killed replica that Ray restarted later gets its new epoch later).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Iterable
from typing import Any

from raylog.errors import RaylogError

logger = logging.getLogger(__name__)

#: How often the watch asks the controller.
INTERVAL_S = 0.1
#: How long after a fault is healed a leadership change may still be its consequence (the
#: controller hears of a death through Ray's health checks, about 1.5 s in a soak, and a
#: follower's fetch times out before it reports its leader unreachable).
GRACE_S = 5.0
#: Partition -> (leader broker, leader epoch).
Leadership = dict[int, tuple[int, int]]


@dataclasses.dataclass(frozen=True)
class LeaderChange:
    """``partition``'s (leader, leader epoch) went from ``before`` to ``after``, seen at
    ``at`` (``time.monotonic()``)."""

    at: float
    partition: int
    before: tuple[int, int]
    after: tuple[int, int]

    def describe(self, origin: float) -> str:
        (was, was_epoch), (now, epoch) = self.before, self.after
        at = self.at - origin
        return f"p{self.partition} leader b{was} (epoch {was_epoch}) -> b{now} (epoch {epoch}) at {at:.1f}s"


class LeadershipWatch:
    """Samples ``topic``'s leaders through ``admin`` every :data:`INTERVAL_S` from
    :meth:`start` to :meth:`stop`, keeping each change. A sample that fails (the controller
    paused or moving) is skipped."""

    def __init__(self, admin: Any, topic: str):
        self.admin = admin
        self.topic = topic
        self.changes: list[LeaderChange] = []
        self._last: Leadership = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-leadership", daemon=True)

    def start(self) -> None:
        self._sample()  # the leaders before any fault
        self._thread.start()

    def stop(self) -> list[LeaderChange]:
        self._stop.set()
        self._thread.join()
        self._sample()
        return self.changes

    def _run(self) -> None:
        while not self._stop.wait(INTERVAL_S):
            self._sample()

    def _sample(self) -> None:
        try:
            (described,) = self.admin.describe_topics([self.topic])
        except RaylogError as exc:
            logger.debug("leadership watch: %s", exc)
            return
        now = time.monotonic()
        for p in described.partitions:
            state = (p.leader, p.leader_epoch)
            before = self._last.get(p.partition)
            if before is not None and before != state:
                self.changes.append(LeaderChange(now, p.partition, before, state))
            self._last[p.partition] = state


def unexplained(changes: Iterable[LeaderChange], events: Iterable[Any], origin: float) -> list[LeaderChange]:
    """The changes that took leadership from a broker (or gave it a new epoch) that no fault
    had disturbed: one is explained by a fault of ``events`` (``start_s`` / ``end_s`` seconds
    after ``origin``) whose ``disturbed`` names that broker, for that partition or for every
    partition (its node), from the fault's start to :data:`GRACE_S` after its end (to the end of
    the run for a fault that ended in an error, its healing not seen). A change
    from no leader to one is an election, not a demotion."""
    events = list(events)
    found = []
    for change in changes:
        leader = change.before[0]
        if leader < 0:
            continue
        at = change.at - origin
        if not any(
            ((change.partition, leader) in e.disturbed or (None, leader) in e.disturbed)
            and e.start_s <= at
            and (at <= e.end_s + GRACE_S or e.outcome.startswith("error"))
            for e in events
        ):
            found.append(change)
    return found
