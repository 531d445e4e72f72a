"""The controller's replication control as a step core (Kafka's ReplicationControlManager).

The controller is the single writer of every partition's leader, leader epoch and ISR. What
it decides, and in which order, is here: :meth:`ReplicationControl.step` takes one event (a
leader's ISR proposal, a restarted replica's report, a follower's word that its leader is
unreachable, the brokers found in a round, an operator's election, a round's check of the
leaders' balance or of a reassignment) and returns a :class:`ControllerResult`, the effects
to carry out, in this order:

1. journal ``records`` (one batch: all of them or none);
2. :meth:`ReplicationControl.replay` the result: the records go into the image, the live
   brokers are taken and each decision is logged with its cause;
3. push each partition in ``push`` to its live replicas;
4. ``check``: call that leader and step :class:`LeaderDead` if it does not answer in time;
5. answer the caller with ``response``.

Nothing is decided from a state that is not journaled: a step reads the image as replayed,
and a step whose journal write failed changes nothing (its result is dropped, the event is
tried again by the caller or by the next round). The controller actor
(:class:`~raylog.actors.controller.ControllerActor`) and the seeded simulation
(``raylog/chaos/simulation.py``) are both pumps over this class: the rules run
under test are the rules that run in the cluster.

The rules themselves are the pure functions of :mod:`raylog.coordination.elections`.
Deterministic, no I/O, no clock, no threads: not thread-safe; the actor steps it under its lock.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from raylog.common.requests import PREFERRED_ELECTION

from ..errors import ElectionNotNeededError, RaylogError
from ..protocol import error_result
from ..types import PartitionInfo
from . import elections
from .metadata import MetadataImage, partition_record

logger = logging.getLogger(__name__)


# --- events --------------------------------------------------------------------------------


@dataclass(frozen=True)
class AlterIsr:
    """A leader's ISR proposal (Kafka's AlterPartition); answered ``(accepted, state)``, or
    None when the partition is gone."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]


@dataclass(frozen=True)
class ReplicaRestarted:
    """A replica that Ray restarted reports itself; answered with the state it is to take
    (None when the partition is gone)."""

    topic: str
    partition: int
    broker: int


@dataclass(frozen=True)
class LeaderUnreachable:
    """A follower found the leader of ``leader_epoch`` dead or unresponsive: the controller
    calls that leader itself (the result's ``check``) before anything moves."""

    topic: str
    partition: int
    leader_epoch: int


@dataclass(frozen=True)
class LeaderDead:
    """The controller's own call to the leader of ``leader_epoch`` failed or timed out."""

    topic: str
    partition: int
    broker: int
    leader_epoch: int


@dataclass(frozen=True)
class BrokersFound:
    """A round found these brokers live: broker id -> (node id, data directory, directory id)."""

    brokers: Mapping[int, tuple[str, str, str]]


@dataclass(frozen=True)
class ReactToLiveness:
    """New leaders where the leader is not live, ISRs without dead brokers, an offline
    partition led again once an ISR member is back."""


@dataclass(frozen=True)
class ElectLeaders:
    """An operator's election (Kafka's ElectLeaders) in ``partitions``, or in every
    partition (None); answered per partition ``(error_code, message)``."""

    election_type: int
    partitions: tuple[tuple[str, int], ...] | None = None


@dataclass(frozen=True)
class BalanceLeaders:
    """A round of the leaders' balance: leadership back to preferred replicas when more than
    ``max_imbalance_percent`` of online partitions are led elsewhere."""

    max_imbalance_percent: float


@dataclass(frozen=True)
class CheckReassignment:
    """Finish the reassignment under way of one partition if every target replica is in
    sync; answered with the brokers whose replicas it removed (None: not finished)."""

    topic: str
    partition: int


# --- effects -------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckLeader:
    """Call ``broker``, the leader of ``leader_epoch``; if it does not answer in time, step
    :class:`LeaderDead`."""

    topic: str
    partition: int
    broker: int
    leader_epoch: int


@dataclass(frozen=True)
class ControllerResult:
    """What a step asks for (see the module docstring for the order)."""

    records: tuple[dict[str, Any], ...] = ()
    #: Partitions whose new state goes to their live replicas.
    push: tuple[PartitionInfo, ...] = ()
    #: Why the partitions changed, for the log line of each decision.
    cause: str = ""
    response: Any = None
    check: CheckLeader | None = None
    #: The live brokers from now on (None: unchanged).
    live: frozenset[int] | None = None
    #: Each pushed partition's state before the step (for the log lines).
    before: tuple[PartitionInfo, ...] = field(default=(), repr=False)


NOTHING = ControllerResult()


class ReplicationControl:
    """Leaders and ISRs over a :class:`MetadataImage` and the live brokers."""

    def __init__(self, image: MetadataImage, live: Iterable[int] = ()):
        self.image = image
        self.live: set[int] = set(live)
        self._handlers = {
            AlterIsr: self._alter_isr,
            ReplicaRestarted: self._replica_restarted,
            LeaderUnreachable: self._leader_unreachable,
            LeaderDead: self._leader_dead,
            BrokersFound: self._brokers_found,
            ReactToLiveness: self._react_to_liveness,
            ElectLeaders: self._elect_leaders,
            BalanceLeaders: self._balance_leaders,
            CheckReassignment: self._check_reassignment,
        }

    def step(self, event) -> ControllerResult:
        """The effects of ``event``; nothing changes until they are replayed."""
        return self._handlers[type(event)](event)

    def replay(self, result: ControllerResult) -> None:
        """Take a result whose records are journaled: the image, the live brokers, the log."""
        for record in result.records:
            self.image.apply(record)
        if result.live is not None:
            self.live = set(result.live)
        for before, after in zip(result.before, result.push, strict=True):
            elections.log_decision(before, after, result.cause)

    def unclean(self, topic: str) -> bool:
        """Whether the topic allows unclean leader election."""
        return self.image.topics[topic].config.get("unclean.leader.election.enable", "false") == "true"

    # --- the steps -------------------------------------------------------------------------

    def _partition(self, topic: str, partition: int) -> PartitionInfo | None:
        try:
            return self.image.partition(topic, partition)
        except RaylogError:
            return None

    def _decide(self, changed: list[PartitionInfo], cause: str, **effects) -> ControllerResult:
        """Journal and push ``changed`` (after any ``records`` given in ``effects``)."""
        before = tuple(self.image.partition(p.topic, p.partition) for p in changed)
        records = (*effects.pop("records", ()), *(partition_record(p) for p in changed), *effects.pop("after", ()))
        return ControllerResult(records, tuple(changed), cause, before=before, **effects)

    def _alter_isr(self, event: AlterIsr) -> ControllerResult:
        info = self._partition(event.topic, event.partition)
        if info is None:
            return NOTHING
        accepted, new = elections.alter_isr(
            info, event.leader, event.leader_epoch, event.partition_epoch, tuple(event.isr), self.live
        )
        if new is info:
            return ControllerResult(response=(accepted, new))
        return self._decide([new], elections.ISR_PROPOSAL, response=(accepted, new))

    def _replica_restarted(self, event: ReplicaRestarted) -> ControllerResult:
        info = self._partition(event.topic, event.partition)
        if info is None:
            return NOTHING
        new = elections.demote(info, event.broker, self.live)
        return self._decide([new], f"the replica on broker {event.broker} restarted", response=new)

    def _leader_unreachable(self, event: LeaderUnreachable) -> ControllerResult:
        """One follower's word is not enough (its call may have failed for a reason of its
        own): the controller checks the leader itself."""
        info = self._partition(event.topic, event.partition)
        if info is None or info.leader_epoch != event.leader_epoch or info.leader not in self.live:
            return NOTHING
        return ControllerResult(check=CheckLeader(event.topic, event.partition, info.leader, event.leader_epoch))

    def _leader_dead(self, event: LeaderDead) -> ControllerResult:
        """Another live ISR member leads, without waiting for Ray to restart a dead leader or
        for a hung one to wake; nothing changes if the epoch moved on meanwhile."""
        info = self._partition(event.topic, event.partition)
        new = None if info is None else elections.demote(info, event.broker, self.live, event.leader_epoch)
        if new is None:
            return NOTHING
        return self._decide([new], f"leader {event.broker} of leader epoch {event.leader_epoch} is unreachable")

    def _brokers_found(self, event: BrokersFound) -> ControllerResult:
        """Journal what changed of each broker (node, data directory, directory id) and take
        the found ones as the live set. In the same batch
        (:func:`~raylog.coordination.elections.brokers_registered`): a broker on another node
        than journaled restarted from its disk (it hands over leadership and leaves the ISR
        until it catches up); one back with another directory id lost every replica."""
        found, known, directory_ids = event.brokers, self.image.brokers, self.image.directory_ids
        records = [
            {"type": "broker", "broker_id": b, "node_id": node_id, "data_dir": d, "directory_id": directory_id}
            for b, (node_id, d, directory_id) in sorted(found.items())
            if b not in known
            or (known[b].node_id, known[b].data_dir) != (node_id, d)
            or directory_ids.get(b) != directory_id
        ]
        replaced = [b for b, (_, _, new_id) in found.items() if directory_ids.get(b, new_id) != new_id]
        moved = [b for b, (node_id, _, _) in found.items() if b in known and known[b].node_id != node_id]
        changed = elections.brokers_registered(self.image.partitions(), moved, replaced, set(found), self.unclean)
        for b in replaced:
            _log_directory_replaced(b, found[b][1], found[b][2], changed)
        gone, back = sorted(self.live - set(found)), sorted(set(found) - self.live)
        if gone:
            logger.warning("brokers %s are not live any more (live: %s)", gone, sorted(found))
        if back:
            logger.info("brokers %s are live (live: %s)", back, sorted(found))
        cause = f"brokers registered on another node {sorted(moved)} or with a new log directory {sorted(replaced)}"
        return self._decide(changed, cause, records=records, live=frozenset(found))

    def _react_to_liveness(self, _: ReactToLiveness) -> ControllerResult:
        changed = elections.react_to_liveness(self.image.partitions(), self.live, self.unclean)
        return self._decide(changed, f"live brokers {sorted(self.live)}")

    def _elect_leaders(self, event: ElectLeaders) -> ControllerResult:
        keys = event.partitions
        if keys is None:
            keys = tuple((p.topic, p.partition) for p in self.image.partitions())
        results, elected = {}, []
        for key in keys:
            try:
                elected.append(elections.requested_election(self.image.partition(*key), self.live, event.election_type))
                results[key] = (0, "")
            except ElectionNotNeededError as exc:
                if event.partitions is not None:  # (Kafka leaves them out of an answer for all)
                    results[key] = error_result(exc)
            except RaylogError as exc:
                results[key] = error_result(exc)
        cause = elections.PREFERRED if event.election_type == PREFERRED_ELECTION else elections.UNCLEAN
        return self._decide(elected, cause, response=results)

    def _balance_leaders(self, event: BalanceLeaders) -> ControllerResult:
        partitions = self.image.partitions()
        if elections.imbalance(partitions) * 100 <= event.max_imbalance_percent:
            return NOTHING
        moved = [new for p in partitions if (new := elections.preferred_leader(p, self.live)) is not None]
        return self._decide(moved, elections.PREFERRED)

    def _check_reassignment(self, event: CheckReassignment) -> ControllerResult:
        target = self.image.reassignments.get((event.topic, event.partition))
        info = None if target is None else self._partition(event.topic, event.partition)
        final = None if info is None else elections.finish_reassignment(info, target)
        if final is None:
            return NOTHING
        done = {"type": "reassignment", "topic": event.topic, "partition": event.partition, "target": []}
        removed = tuple(b for b in info.replicas if b not in target)
        return self._decide([final], f"reassignment to {list(target)} complete", after=[done], response=removed)


def _log_directory_replaced(broker_id: int, data_dir: str, directory_id: str, changed: list[PartitionInfo]) -> None:
    left = [f"{p.topic}-{p.partition}" for p in changed if broker_id in p.replicas and not p.isr]
    logger.warning(
        "broker %d came back with a new log directory %s (id %s): a wiped or replaced disk holds none of its "
        "replicas, so it left every ISR and leads nothing until it has caught up; %d partition(s) have no "
        "in-sync replica left and stay offline unless unclean.leader.election.enable: %s",
        broker_id,
        data_dir,
        directory_id,
        len(left),
        left,
    )
