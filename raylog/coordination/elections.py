"""The controller's rules for leaders and ISRs (Kafka's PartitionLeaderElectionAlgorithms).

Pure functions from a partition's state (and the live brokers) to its next state; the
controller journals what they return and tells the replicas. Every change bumps the
partition epoch; a change of leader also bumps the leader epoch.

- :func:`elect_leader`: the first live ISR member in replica order; with
  ``unclean.leader.election.enable`` and no live ISR member, the first live replica (which
  may lose committed records: availability over consistency, as Kafka documents); else no
  leader (offline) with the ISR kept, so that a returning ISR member can lead again.
- :func:`alter_isr`: a leader's ISR proposal, refused when its epochs are stale; answered
  with the current state either way, and idempotent for a retry.
- :func:`react_to_liveness`, :func:`demote`: the controller's reaction to brokers that died
  or came back, to a replica that restarted and to a leader reported dead.
- :func:`preferred_leader`: leadership back to the first replica when it is in sync.
- :func:`directory_replaced`: a broker back with a new log directory (KIP-858) leaves every
  ISR, even as its last member, and leads nothing.
- :func:`log_decision`: the log line of a change the controller journals (an election with
  its kind, or an ISR change), with the cause the controller gives.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import replace

from raylog.common.requests import PREFERRED_ELECTION, UNCLEAN_ELECTION

from ..errors import (
    ElectionNotNeededError,
    EligibleLeadersNotAvailableError,
    InvalidRequestError,
    PreferredLeaderNotAvailableError,
)
from ..types import PartitionInfo

NO_LEADER = -1
#: Causes the controller gives :func:`log_decision` (others are free text).
PREFERRED = "preferred replica election"
UNCLEAN = "an operator's unclean election"
ISR_PROPOSAL = "the leader's ISR proposal"

logger = logging.getLogger(__name__)


def election_kind(before: PartitionInfo, after: PartitionInfo, cause: str) -> str | None:
    """How ``after``'s leader was chosen: ``preferred``, ``clean`` (an ISR member of
    ``before``), ``unclean`` (one that was not: it may lack committed records), ``offline`` (no
    leader), ``same leader`` (the leader kept, under a new epoch), or None (no new leader epoch)."""
    if after.leader_epoch == before.leader_epoch:
        return None
    if after.leader == NO_LEADER:
        return "offline"
    if after.leader == before.leader:
        return "same leader"
    if cause == PREFERRED:
        return "preferred"
    return "clean" if after.leader in before.isr else "unclean"


def log_decision(before: PartitionInfo, after: PartitionInfo, cause: str) -> None:
    """Log what changed from ``before`` to ``after`` and why (``cause``), once, where the
    controller journals it: a leader election (WARNING when unclean or offline), an ISR change
    (INFO; DEBUG for a leader's own proposal, which the leader logged with its followers'
    lag) and a change of replicas (a reassignment)."""
    name = f"{after.topic}-{after.partition}"
    kind = election_kind(before, after, cause)
    replicas = (
        "" if after.replicas == before.replicas else f", replicas {list(before.replicas)} -> {list(after.replicas)}"
    )
    if kind is not None:
        logger.log(
            logging.WARNING if kind in ("unclean", "offline") else logging.INFO,
            "%s: %s leader election (%s): leader %d -> %d, leader epoch %d, ISR %s%s",
            name,
            kind,
            cause,
            before.leader,
            after.leader,
            after.leader_epoch,
            list(after.isr),
            replicas,
        )
        return
    left, joined = sorted(set(before.isr) - set(after.isr)), sorted(set(after.isr) - set(before.isr))
    if not (left or joined or replicas):
        return
    changes = [f"shrinks by {left}" if left else "", f"expands by {joined}" if joined else ""]
    logger.log(
        logging.DEBUG if cause == ISR_PROPOSAL and not replicas else logging.INFO,
        "%s: ISR %s -> %s (%s)%s, partition epoch %d",
        name,
        list(before.isr),
        list(after.isr),
        "; ".join([c for c in changes if c] + [cause]),
        replicas,
        after.partition_epoch,
    )


def elect_leader(info: PartitionInfo, live: set[int], unclean: bool) -> PartitionInfo:
    """The partition after its leader is gone (or to elect one for an offline partition)."""
    isr_live = [r for r in info.replicas if r in info.isr and r in live]
    if isr_live:
        leader, isr = isr_live[0], tuple(r for r in info.isr if r in live)
    elif unclean and any(r in live for r in info.replicas):
        leader = next(r for r in info.replicas if r in live)
        isr = (leader,)
    else:
        # Offline: keep the last ISR so that one of its members can lead when it returns.
        leader, isr = NO_LEADER, info.isr
    epoch = info.leader_epoch + 1 if leader != info.leader or leader == NO_LEADER else info.leader_epoch
    return replace(info, leader=leader, leader_epoch=epoch, isr=isr, partition_epoch=info.partition_epoch + 1)


def remove_from_isr(info: PartitionInfo, gone: set[int]) -> PartitionInfo:
    """The partition after followers in ``gone`` died (the leader is not among them)."""
    isr = tuple(r for r in info.isr if r not in gone)
    if isr == info.isr or not isr:
        return info
    return replace(info, isr=isr, partition_epoch=info.partition_epoch + 1)


def alter_isr(
    info: PartitionInfo,
    leader: int,
    leader_epoch: int,
    partition_epoch: int,
    isr: tuple[int, ...],
    live: set[int] | frozenset[int],
) -> tuple[bool, PartitionInfo]:
    """A leader's ISR proposal: ``(accepted, the partition's state after it)``.

    Accepted when it comes from the current leader with the current epochs, holds the leader
    and only replicas, and admits no broker that is not live; the partition epoch moves on.
    A proposal made under an older partition epoch whose ISR is already the current one is a
    retry whose answer was lost: accepted again, without a change (Kafka's controller answers
    such a retry with the current state). Anything else is refused with the current state,
    which tells the leader whether it is stale (newer epochs) or was simply refused (the same).
    """
    ordered = tuple(r for r in info.replicas if r in isr)
    if (leader, leader_epoch) != (info.leader, info.leader_epoch):
        return False, info
    if partition_epoch != info.partition_epoch:
        return partition_epoch < info.partition_epoch and ordered == info.isr, info
    if leader not in isr or not set(isr) <= set(info.replicas) or not set(ordered) - set(info.isr) <= set(live):
        return False, info
    return True, replace(info, isr=ordered, partition_epoch=info.partition_epoch + 1)


def react_to_liveness(
    partitions: Iterable[PartitionInfo], live: set[int] | frozenset[int], unclean: Callable[[str], bool]
) -> list[PartitionInfo]:
    """The partitions that change now that ``live`` are the live brokers: a new leader where
    the leader is not live (``unclean(topic)``: whether the topic allows unclean election),
    and ISRs without the dead followers; an offline partition elects again once an ISR member
    is back."""
    changed = []
    for info in partitions:
        if info.leader not in live:
            new = elect_leader(info, live, unclean(info.topic))
            if new.leader != info.leader or new.isr != info.isr:
                changed.append(new)
        else:
            new = remove_from_isr(info, set(info.replicas) - live)
            if new is not info:
                changed.append(new)
    return changed


def demote(
    info: PartitionInfo, broker: int, live: set[int] | frozenset[int], leader_epoch: int | None = None
) -> PartitionInfo | None:
    """The partition after ``broker``'s replica restarted (see :func:`after_restart`) or, given
    ``leader_epoch``, after the leader of that epoch was found dead: then only another live
    in-sync replica may take over (None: no change; the node's death, or its restart, will
    tell)."""
    if leader_epoch is not None and (info.leader_epoch, info.leader) != (leader_epoch, broker):
        return None
    new = after_restart(info, broker, live)
    if leader_epoch is not None and new.leader == broker:
        return None
    return new


def requested_election(info: PartitionInfo, live: set[int], election_type: int) -> PartitionInfo:
    """The partition after the election an operator asked for (Kafka's ElectLeaders):
    ``PREFERRED_ELECTION`` moves leadership to the first replica, ``UNCLEAN_ELECTION`` elects
    a leader for a partition without a live one, from its live ISR members if any, else from
    any live replica (which may lack acknowledged records).

    Raises:
        ElectionNotNeededError: the replica the election would pick already leads.
        PreferredLeaderNotAvailableError: the first replica is not live or not in sync.
        EligibleLeadersNotAvailableError: no replica is live.
        InvalidRequestError: an election type Kafka does not define.
    """
    name = f"{info.topic}-{info.partition}"
    if election_type == PREFERRED_ELECTION:
        preferred = info.replicas[0]
        if info.leader == preferred:
            raise ElectionNotNeededError(f"{name}: its preferred replica {preferred} leads")
        if preferred not in live or preferred not in info.isr:
            why = "not live" if preferred not in live else f"not in sync (ISR {list(info.isr)})"
            raise PreferredLeaderNotAvailableError(f"{name}: its preferred replica {preferred} is {why}")
        return replace(
            info, leader=preferred, leader_epoch=info.leader_epoch + 1, partition_epoch=info.partition_epoch + 1
        )
    if election_type != UNCLEAN_ELECTION:
        raise InvalidRequestError(f"unknown election type {election_type}")
    if info.leader != NO_LEADER and info.leader in live:
        raise ElectionNotNeededError(f"{name}: broker {info.leader} leads and is live")
    elected = elect_leader(info, live, unclean=True)
    if elected.leader == NO_LEADER:
        raise EligibleLeadersNotAvailableError(f"{name}: none of its replicas {list(info.replicas)} is live")
    return elected


def preferred_leader(info: PartitionInfo, live: set[int]) -> PartitionInfo | None:
    """The partition led by its first replica, if that one is live, in sync and not leading."""
    try:
        return requested_election(info, live, PREFERRED_ELECTION)
    except (ElectionNotNeededError, PreferredLeaderNotAvailableError):
        return None


def imbalance(partitions: list[PartitionInfo]) -> float:
    """Share of online partitions not led by their preferred (first) replica."""
    online = [p for p in partitions if p.leader != NO_LEADER]
    if not online:
        return 0.0
    return sum(p.leader != p.replicas[0] for p in online) / len(online)


def finish_reassignment(info: PartitionInfo, target: tuple[int, ...]) -> PartitionInfo | None:
    """The partition on exactly its ``target`` replicas, once all of them are in sync (else
    None); leadership moves to the first in-sync target if the leader is being removed."""
    if not set(target) <= set(info.isr):
        return None
    isr = tuple(r for r in target if r in info.isr)
    leader = info.leader if info.leader in target else isr[0]
    epoch = info.leader_epoch + (leader != info.leader)
    return replace(
        info,
        replicas=tuple(target),
        isr=isr,
        leader=leader,
        leader_epoch=epoch,
        partition_epoch=info.partition_epoch + 1,
    )


def after_restart(info: PartitionInfo, broker: int, live: set[int]) -> PartitionInfo:
    """The partition after ``broker``'s replica restarted (it lost its in-memory state): a
    leader hands over to another live ISR member, or leads again under a new epoch when it
    is the only one left; a follower leaves the ISR until it catches up. Either way the
    epochs move, so every replica re-reads who leads and reconnects."""
    if info.leader == broker:
        new = elect_leader(info, live - {broker}, unclean=False)
        if new.leader != NO_LEADER:
            return new
        return replace(info, leader_epoch=info.leader_epoch + 1, partition_epoch=info.partition_epoch + 1)
    new = remove_from_isr(info, {broker})
    return new if new is not info else replace(info, partition_epoch=info.partition_epoch + 1)


def directory_replaced(
    partitions: Iterable[PartitionInfo], broker: int, live: set[int] | frozenset[int], unclean: Callable[[str], bool]
) -> list[PartitionInfo]:
    """The partitions that change because ``broker`` came back with a new log directory (a
    wiped or replaced disk): its replicas hold nothing, so it leaves every ISR, also as the
    last member (the ISR is then empty: no replica is known to hold the committed records,
    and the partition stays offline unless ``unclean(topic)``, its topic allows unclean
    election). Where it led, another live ISR member leads, or with unclean election any
    other live replica, or none. Like any follower it rejoins an ISR once it has caught up with the leader."""
    changed = []
    for info in partitions:
        if broker not in info.replicas and info.leader != broker:
            continue
        # The partition epoch moves also where it was no ISR member: an ISR proposal made on
        # what its replica fetched before the disk was replaced must be refused.
        lost = replace(info, isr=tuple(r for r in info.isr if r != broker))
        if info.leader == broker:
            changed.append(elect_leader(lost, set(live) - {broker}, unclean(info.topic)))
        else:
            changed.append(replace(lost, partition_epoch=info.partition_epoch + 1))
    return changed


def brokers_registered(
    partitions: Iterable[PartitionInfo],
    moved: Iterable[int],
    replaced: Iterable[int],
    live: set[int] | frozenset[int],
    unclean: Callable[[str], bool],
) -> list[PartitionInfo]:
    """The partitions that change because brokers registered again: ``moved`` on another node
    than the one journaled (their replicas restarted from their disk, which may have lost what
    it had not flushed: see :func:`after_restart`), ``replaced`` with another directory id (see
    :func:`directory_replaced`). Decided from the journal, not from what this controller saw
    happen, so a broker that moved while the controller was down is treated the same."""
    current = {(p.topic, p.partition): p for p in partitions}
    before = dict(current)
    for b in sorted(set(replaced)):
        for new in directory_replaced(list(current.values()), b, live, unclean):
            current[(new.topic, new.partition)] = new
    for b in sorted(set(moved) - set(replaced)):
        for key, info in current.items():
            if b in info.replicas:
                current[key] = after_restart(info, b, set(live))
    return [p for key, p in current.items() if p is not before[key]]
