"""A replica's role as a step core: what it follows, when it proposes an ISR change, and
what it takes from the controller after a restart.

:class:`ReplicaCore` holds a :class:`Partition` and the sequencing around it that the replica
actor (:class:`~raylog.actors.replica.PartitionReplicaActor`) and the seeded simulation
(``raylog/chaos/simulation.py``) both run: :meth:`ReplicaCore.step` takes one
event and returns the effects to carry out, in order:

- :class:`Follow`: run a fetch loop with ``fetcher`` against ``leader`` (an actor handle in
  the cluster, a broker id in the simulation), in place of any loop running;
- :class:`StopFollowing`: end the fetch loop (nothing it receives afterwards is applied);
- :class:`ProposeIsr`: ask the controller (AlterPartition) and step :class:`IsrAnswered`
  with its answer, or with None when none came in time;
- :class:`ReportRestart`: tell the controller that this replica restarted, until it answers,
  and step :class:`RoleAnswered` with that answer.

Rules:

- One ISR proposal at a time: while one is out, a change is proposed only once its answer
  (or its timeout) is in; a proposal without an answer stays pending in the partition and is
  sent again (:meth:`Partition.isr_to_resend`).
- A role moves on a newer state (:meth:`Partition.apply_state`); a follower starts fetching
  anew when its leader epoch moved, when the leader's actor changed (re-created on another
  node) or when its fetch loop ended; a replica that leads, is offline or is no replica any
  more stops fetching. A state that moved the role without naming the leader's actor (an ISR
  answer) keeps the actor it follows until a push names it.
- After a restart a replica takes no role until the controller answered its report: the role
  it held is stale (a restarted former leader must not accept writes), and a push that
  reaches the new process first may carry that very role (the controller's pushes to the old
  process are retried, and Ray delivers them to the new one). Such a push is held and taken
  after the answer (the newer state wins), so nothing the controller said is lost.

Deterministic, no I/O, no clock of its own (the fetcher's is given), not thread-safe: the
actor steps it under its lock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..storage.log import wall_clock_ms
from ..types import PartitionInfo
from .fetcher import FollowerFetcher
from .partition import Partition

# --- events --------------------------------------------------------------------------------


@dataclass(frozen=True)
class StatePushed:
    """The controller's state of the partition (Kafka's LeaderAndIsr) and the leader's actor
    (None when it is not live or not started: a later push names it)."""

    state: PartitionInfo
    leader: Any = None


@dataclass(frozen=True)
class Restarted:
    """The process was restarted (by Ray, in place): it reports itself before it takes a role."""


@dataclass(frozen=True)
class RoleAnswered:
    """The controller's answer to the restart report: the state to take and the leader's
    actor (``state`` None: the partition was deleted meanwhile)."""

    state: PartitionInfo | None
    leader: Any = None


@dataclass(frozen=True)
class Changed:
    """The log, the HW or a follower's position moved (an append, a fetch), or a
    housekeeping round came: an ISR change may be due."""


@dataclass(frozen=True)
class IsrAnswered:
    """The controller's answer to ``proposal``: ``(accepted, state)``, or None if none came."""

    proposal: tuple[int, ...]
    answer: tuple[bool, PartitionInfo] | None


# --- effects -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Follow:
    fetcher: FollowerFetcher
    leader: Any


@dataclass(frozen=True)
class StopFollowing:
    pass


@dataclass(frozen=True)
class ProposeIsr:
    isr: tuple[int, ...]
    leader_epoch: int
    partition_epoch: int


@dataclass(frozen=True)
class ReportRestart:
    pass


class ReplicaCore:
    """See the module docstring."""

    def __init__(self, partition: Partition, clock: Callable[[], int] = wall_clock_ms):
        self.partition = partition
        self._clock = clock
        #: The running fetch loop's fetcher (None: not following), and the leader it fetches from.
        self.fetcher: FollowerFetcher | None = None
        self.leader: Any = None
        #: The ISR proposal whose answer is awaited.
        self.proposing: tuple[int, ...] | None = None
        #: Restarted and not answered yet: no role; the newest push meanwhile, held.
        self.awaiting_role = False
        self._held: StatePushed | None = None
        self._handlers = {
            StatePushed: self._state_pushed,
            Restarted: self._restarted,
            RoleAnswered: self._role_answered,
            Changed: self._changed,
            IsrAnswered: self._isr_answered,
        }

    def step(self, event) -> list:
        """The effects of ``event`` (see the module docstring)."""
        return self._handlers[type(event)](event)

    @property
    def following(self) -> bool:
        """Whether a fetch loop runs (it ends on its own when its fetcher stops)."""
        return self.fetcher is not None and self.fetcher.active

    # --- the steps -------------------------------------------------------------------------

    def _state_pushed(self, event: StatePushed) -> list:
        if self.awaiting_role:
            held = self._held
            if held is None or _epochs(event.state) > _epochs(held.state):
                self._held = event
            return []
        return self._take_role(self.partition.apply_state(event.state), event.leader)

    def _restarted(self, _: Restarted) -> list:
        self.awaiting_role = True
        return [*self._take_role(False, None), ReportRestart()]

    def _role_answered(self, event: RoleAnswered) -> list:
        if not self.awaiting_role:
            return []
        self.awaiting_role, held, self._held = False, self._held, None
        effects = [] if event.state is None else self._state_pushed(StatePushed(event.state, event.leader))
        if held is not None and event.state is not None:
            effects += self._state_pushed(held)
        return effects

    def _changed(self, _: Changed) -> list:
        if self.proposing is not None or self.awaiting_role:
            return []  # its answer, or the next round, looks again
        p = self.partition
        proposal = p.propose_isr() or p.isr_to_resend()
        if proposal is None:
            return []
        self.proposing = proposal
        return [ProposeIsr(proposal, p.leader_epoch, p.partition_epoch)]

    def _isr_answered(self, event: IsrAnswered) -> list:
        self.proposing = None
        return self._take_role(self.partition.isr_answer(event.proposal, event.answer), None)

    def _take_role(self, role_moved: bool, leader: Any) -> list:
        """Act on the role the partition holds now (after every state or ISR answer)."""
        p = self.partition
        if self.awaiting_role or p.is_leader or p.leader is None or p.leader < 0 or p.broker_id not in p.replicas:
            return self._stop()
        leader = leader if leader is not None or role_moved else self.leader
        if self.following and not role_moved and leader == self.leader:
            return []
        effects = self._stop()
        self.leader = leader
        if leader is None:
            return effects  # a push names the leader's actor
        self.fetcher = FollowerFetcher(p, p.leader, p.leader_epoch, clock=self._clock)
        return [*effects, Follow(self.fetcher, leader)]

    def _stop(self) -> list:
        if self.fetcher is None:
            return []
        self.fetcher = None
        return [StopFollowing()]


def _epochs(state: PartitionInfo) -> tuple[int, int]:
    return state.leader_epoch, state.partition_epoch
