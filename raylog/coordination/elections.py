"""The controller's rules for leaders and ISRs (Kafka's PartitionLeaderElectionAlgorithms).

Pure functions from a partition's state (and the live brokers) to its next state; the
controller journals what they return and tells the replicas. Every change bumps the
partition epoch; a change of leader also bumps the leader epoch.

- :func:`elect_leader`: the first live ISR member in replica order; with
  ``unclean.leader.election.enable`` and no live ISR member, the first live replica (which
  may lose committed records: availability over consistency, as Kafka documents); else no
  leader (offline) with the ISR kept, so that a returning ISR member can lead again.
- :func:`alter_isr`: a leader's ISR proposal, refused when its epochs are stale.
- :func:`preferred_leader`: leadership back to the first replica when it is in sync.
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import FencedLeaderEpochError, InvalidRequestError
from ..types import PartitionInfo

NO_LEADER = -1


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
    info: PartitionInfo, leader: int, leader_epoch: int, partition_epoch: int, isr: tuple[int, ...]
) -> PartitionInfo:
    """Apply a leader's ISR proposal.

    Raises:
        FencedLeaderEpochError: the proposer is not the current leader, or its view is stale.
        InvalidRequestError: the ISR leaves out the leader or names non-replicas.
    """
    if leader != info.leader or leader_epoch != info.leader_epoch or partition_epoch != info.partition_epoch:
        raise FencedLeaderEpochError(
            f"stale ISR proposal for {info.topic}-{info.partition}: leader {leader} epoch {leader_epoch}/"
            f"{partition_epoch}, current {info.leader} epoch {info.leader_epoch}/{info.partition_epoch}"
        )
    if leader not in isr or not set(isr) <= set(info.replicas):
        raise InvalidRequestError(f"ISR {list(isr)} must hold the leader and only replicas {list(info.replicas)}")
    ordered = tuple(r for r in info.replicas if r in isr)
    return replace(info, isr=ordered, partition_epoch=info.partition_epoch + 1)


def preferred_leader(info: PartitionInfo, live: set[int]) -> PartitionInfo | None:
    """The partition led by its first replica, if that one is live, in sync and not leading."""
    preferred = info.replicas[0]
    if info.leader == preferred or preferred not in info.isr or preferred not in live:
        return None
    return replace(info, leader=preferred, leader_epoch=info.leader_epoch + 1, partition_epoch=info.partition_epoch + 1)


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
