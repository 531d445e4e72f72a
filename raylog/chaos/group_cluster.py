"""The replication simulation (:class:`~raylog.chaos.simulation.Cluster`: three replicas, the
controller, a transaction coordinator and their clients) with a consumer group's coordinator
on its partition: whichever replica leads the partition loads the groups from its log and
serves them through the shipped :class:`~raylog.coordination.group_core.GroupCore`
(:class:`~raylog.chaos.group_simulation.GroupPump`), as a ``__consumer_offsets`` replica does,
while the partition's leaders change by the controller's elections, processes crash, pause and
lose their machines, and calls are delayed, reordered and lost. The group's appends wait for
the ISR that the simulated followers' fetches move; the producers' records share the log (a
coordinator skips records without keys).

Consumers (:class:`~raylog.chaos.group_simulation.Client`) call the broker the controller names
as leader; a broker that does not coordinate answers NOT_COORDINATOR, a dead one fails the
calls waiting in it, and a call not answered in :data:`CALL_TIMEOUT_MS` times out at its caller
(its answer, if it comes later, is dropped). Every invariant of both simulations is checked
after every step.
"""

from __future__ import annotations

import functools
from typing import Any

from raylog.chaos.group_simulation import STRATEGIES, GroupPump, GroupWorld
from raylog.chaos.simulation import BROKERS, MAX_IN_FLIGHT, Cluster, Message
from raylog.coordination.group_core import Unload, response_type
from raylog.errors import NotCoordinatorError, RequestTimedOutError
from raylog.protocol import error_fields

#: The consumers' address.
CONSUMERS = -4
#: How long a consumer waits for an answer (a heartbeat's long poll is at most 3 s).
CALL_TIMEOUT_MS = 8_000
#: The steps this adds, and their weights beside :data:`~raylog.chaos.simulation.STEP_WEIGHTS`.
GROUP_STEPS = {
    "group_start": 10,
    "group_leave": 1,
    "group_crash": 1,
    "group_pause": 1,
    "group_wake": 4,
    "group_poll": 120,
    "group_commit": 80,
    "group_beats": 40,
    "group_tick": 40,
    "group_time_out": 10,
    # fewer of the producers' steps: the group's calls get their share of the network
    "send": 8,
    "produce": 4,
    "txn": 15,
}


class GroupCluster(GroupWorld, Cluster):
    """See the module docstring."""

    #: (Its clock moves about 20 ms a step.)
    session_ms, rebalance_ms = 2_000, 4_000

    def __init__(self, directory: str, seed: int, **kwargs: Any) -> None:
        GroupWorld.__init__(self, STRATEGIES[seed % len(STRATEGIES)])
        self.pumps: dict[int, tuple[int, GroupPump]] = {}  # broker -> (leader epoch, its coordinator)
        self.requests: dict[Any, Message] = {}  # a call being served -> its message
        self.calls: dict[Any, tuple[int, type]] = {}  # a call not answered yet -> (sent at, response type)
        self.group_hw = 0  # the highest HW a coordinator's leader had (see committed_end)
        weights = {**GROUP_STEPS, **kwargs.pop("weights", {})}
        Cluster.__init__(self, directory, seed, weights=weights, **kwargs)

    # --- the consumers' calls -----------------------------------------------------------

    def call(self, event: Any) -> None:
        self.calls[event.waiter] = (self.clock(), response_type(event))
        if len(self.in_flight) < MAX_IN_FLIGHT:  # (else it times out)
            leader = self.info.leader
            self._send("group", CONSUMERS, leader if leader in BROKERS else BROKERS[0], event)

    def _on_group(self, message: Message) -> None:
        event = message.payload
        replica, served = self.replicas[message.dst], self.pumps.get(message.dst)
        if replica is None or served is None:
            moved = response_type(event)(**error_fields(NotCoordinatorError("not the coordinator")))
            self._answer(message, "group_answer", (event.waiter, moved))
            return
        self.requests[event.waiter] = message
        served[1].step(event)

    def _replied(self, broker: int, waiter: Any, response: Any) -> None:
        served = self.pumps.get(broker)
        if served is not None:
            self.check_reply(waiter, response, served[1].partition.log, self.committed_end(served[1]))
        message = self.requests.pop(waiter, None)
        if message is not None:
            self._answer(message, "group_answer", (waiter, response))

    def _on_group_answer(self, message: Message) -> None:
        _, (waiter, response) = message.payload
        if self.calls.pop(waiter, None) is not None:  # (else its caller stopped waiting)
            self.answered(waiter, response)

    def more_step(self, kind: str) -> None:
        """The group's steps: a consumer's move (``group_start``, ``group_poll``, ...: see
        :meth:`~raylog.chaos.group_simulation.GroupWorld.client_step`), the coordinators' tick,
        and the consumers' call timeouts."""
        if kind == "group_tick":
            self._tick_coordinators()
        elif kind == "group_time_out":
            self._time_out_calls()
        elif kind.startswith("group_"):
            self.client_step(kind.removeprefix("group_"))

    def _time_out_calls(self) -> None:
        """Calls not answered in time fail at their callers (their messages may still arrive)."""
        now = self.clock()
        for waiter, (sent, kind) in list(self.calls.items()):
            if now - sent >= CALL_TIMEOUT_MS:
                del self.calls[waiter]
                self.answered(waiter, kind(**error_fields(RequestTimedOutError("no answer in time"))))

    def _tick_coordinators(self) -> None:
        """Each coordinator's tick (sessions, rebalance deadlines, long polls whose wait is over)."""
        for broker, (_, pump) in list(self.pumps.items()):
            if not self.replicas[broker].paused:
                pump.tick()

    # --- the coordinators: one per leader epoch, on the leader ---------------------------

    def _replica_step(self, replica: Any, event: Any) -> None:
        super()._replica_step(replica, event)
        p, broker = replica.partition, replica.broker
        served = self.pumps.get(broker)
        if p.is_leader and (served is None or served[0] != p.leader_epoch or served[1].partition is not p):
            self._unload(broker)
            self.group_stats["fail-overs"] += bool(self.group_hw)  # (not the first leader's load)
            pump = GroupPump(p, self.clock, functools.partial(self._replied, broker))
            self.pumps[broker] = (p.leader_epoch, pump)
            self.check_loaded(pump)
        elif not p.is_leader and served is not None:
            self._unload(broker)

    def _unload(self, broker: int) -> None:
        """``broker`` stops coordinating: every call waiting in it is answered NOT_COORDINATOR."""
        served = self.pumps.get(broker)
        if served is not None:
            served[1].step(Unload())
            del self.pumps[broker]

    def _stop(self, broker: int) -> None:
        """The process is gone with its coordinator: the calls waiting in it fail (Ray's
        ActorDiedError), and the consumers look for the coordinator again."""
        self.pumps.pop(broker, None)
        for waiter, message in list(self.requests.items()):
            if message.dst == broker:
                del self.requests[waiter]
                kind = self.calls.get(waiter, (0, None))[1]
                if kind is not None:
                    self._answer(message, "group_answer", (waiter, kind(**error_fields(NotCoordinatorError("died")))))
        super()._stop(broker)

    def complete_delayed(self) -> None:
        """Also each coordinator's appends whose wait is over, in a random order."""
        super().complete_delayed()
        for broker, (_, pump) in list(self.pumps.items()):
            if broker in self.pumps and not self.replicas[broker].paused:
                while self.pumps.get(broker, (0, None))[1] is pump and pump.persist(self.rng):
                    pass

    # --- the invariants -----------------------------------------------------------------

    def committed_end(self, pump: GroupPump) -> int:
        """What the ISR had at the most (a new leader's HW starts lower, and catches up)."""
        self.group_hw = max(self.group_hw, pump.partition.high_watermark)
        return self.group_hw

    def check_invariants(self, reread: bool = False) -> None:
        super().check_invariants(reread)
        served = self.pumps.get(self.info.leader)
        pump = served[1] if served is not None else None
        self.check_groups(pump, self.committed_end(pump) if pump is not None else self.group_hw)


def run(directory: str, seed: int, steps: int) -> GroupCluster:
    """Play ``steps`` random steps of seed ``seed``, every invariant checked after each; raises
    AssertionError with the seed and a report."""
    cluster = GroupCluster(directory, seed)
    for step in range(steps):
        cluster.step()
        try:
            cluster.check_invariants(reread=step % 100 == 99)
        except AssertionError as exc:
            raise AssertionError(f"seed {seed}, step {step}: {exc}\n{cluster.report()}") from None
    return cluster
