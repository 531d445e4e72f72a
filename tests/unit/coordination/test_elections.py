"""The controller's election and ISR rules (no Ray)."""

from __future__ import annotations

import pytest

from raylog.common.requests import PREFERRED_ELECTION, UNCLEAN_ELECTION
from raylog.coordination.elections import (
    NO_LEADER,
    alter_isr,
    directory_replaced,
    elect_leader,
    finish_reassignment,
    imbalance,
    preferred_leader,
    remove_from_isr,
    requested_election,
)
from raylog.errors import (
    ElectionNotNeededError,
    EligibleLeadersNotAvailableError,
    InvalidRequestError,
    PreferredLeaderNotAvailableError,
)
from raylog.types import PartitionInfo


def info(leader=0, epoch=3, replicas=(0, 1, 2), isr=(0, 1, 2), partition_epoch=7) -> PartitionInfo:
    return PartitionInfo("t", 0, leader, epoch, replicas, isr, partition_epoch)


def test_clean_election_picks_a_live_isr_member_and_bumps_epochs():
    """The first live ISR member in replica order leads under a new epoch."""
    new = elect_leader(info(isr=(0, 2)), live={1, 2}, unclean=False)
    assert (new.leader, new.leader_epoch, new.isr, new.partition_epoch) == (2, 4, (2,), 8)


def test_no_live_isr_member_means_offline_unless_unclean():
    """Without a live ISR member the partition goes offline, keeping its ISR; unclean
    election takes any live replica instead."""
    offline = elect_leader(info(isr=(0,)), live={1, 2}, unclean=False)
    assert (offline.leader, offline.isr) == (NO_LEADER, (0,))
    unclean = elect_leader(info(isr=(0,)), live={1, 2}, unclean=True)
    assert (unclean.leader, unclean.isr) == (1, (1,))
    back = elect_leader(offline, live={0}, unclean=False)
    assert back.leader == 0 and back.leader_epoch > offline.leader_epoch


def test_isr_proposals_are_fenced_by_epochs():
    """Only the current leader with current epochs may change the ISR, never dropping itself
    nor admitting a broker that is not live; every answer carries the current state."""
    current, live = info(isr=(0, 1)), {0, 1, 2}
    accepted, new = alter_isr(current, 0, 3, 7, (0, 1, 2), live)
    assert accepted and (new.isr, new.partition_epoch) == ((0, 1, 2), 8)
    for leader, epoch, partition_epoch in ((1, 3, 7), (0, 2, 7), (0, 3, 6), (0, 3, 8)):
        assert alter_isr(current, leader, epoch, partition_epoch, (0,), live) == (False, current)
    assert alter_isr(current, 0, 3, 7, (1, 2), live) == (False, current)  # without the leader
    assert alter_isr(current, 0, 3, 7, (0, 1, 2), {0, 1}) == (False, current)  # 2 is not live
    assert remove_from_isr(current, {1}).isr == (0,)


def test_a_retried_isr_proposal_is_answered_with_the_state_it_made():
    """Defect 3: a proposal whose answer was lost is sent again under the partition epoch it was
    made in; the controller, which committed it, answers with that state instead of a refusal."""
    before = info(isr=(0, 1))
    accepted, after = alter_isr(before, 0, 3, 7, (0, 1, 2), {0, 1, 2})
    assert accepted
    assert alter_isr(after, 0, 3, 7, (0, 1, 2), {0, 1, 2}) == (True, after)
    assert alter_isr(after, 0, 3, 7, (0, 2), {0, 1, 2}) == (False, after)  # not what it is now


def test_preferred_leader_and_imbalance():
    """Leadership goes back to the first replica only when it is live and in sync."""
    elsewhere = info(leader=1)
    assert imbalance([elsewhere, info()]) == 0.5
    assert preferred_leader(elsewhere, live={0, 1, 2}).leader == 0
    assert preferred_leader(elsewhere, live={1, 2}) is None
    assert preferred_leader(info(leader=1, isr=(1, 2)), live={0, 1, 2}) is None


def test_reassignment_finishes_only_when_every_target_is_in_sync():
    """The switch to the target replicas waits for all of them to be in the ISR."""
    moving = info(replicas=(3, 0, 1, 2), isr=(0, 1, 2))
    assert finish_reassignment(moving, (3, 1)) is None
    done = finish_reassignment(info(replicas=(3, 0, 1, 2), isr=(3, 0, 1, 2)), (3, 1))
    assert (done.replicas, done.isr, done.leader) == ((3, 1), (3, 1), 3)
    assert done.leader_epoch == 4


def test_a_restarted_replica_hands_over_and_leaves_the_isr():
    """After a restart a leader hands over to a live ISR member (or leads again under a new
    epoch when alone); a follower leaves the ISR. The epochs always move."""
    from raylog.coordination.elections import after_restart

    handed = after_restart(info(leader=0), 0, live={0, 1, 2})
    assert (handed.leader, handed.leader_epoch) == (1, 4) and 0 not in handed.isr
    alone = after_restart(info(leader=0, isr=(0,)), 0, live={0, 1, 2})
    assert (alone.leader, alone.leader_epoch, alone.isr) == (0, 4, (0,))
    follower = after_restart(info(leader=0), 2, live={0, 1, 2})
    assert follower.isr == (0, 1) and follower.partition_epoch == 8


def never(topic: str) -> bool:
    return False


def always(topic: str) -> bool:
    return True


def test_a_broker_back_with_a_new_log_directory_leaves_every_isr_and_leadership():
    """A broker whose log directory was replaced leaves the ISR of each partition it was in
    (partition epoch bumped); where it led, another live ISR member leads under a new epoch.
    Where it is a replica out of sync the partition epoch moves too: an ISR proposal the
    leader made on what that replica fetched before it lost its disk must be refused (the
    simulation found one accepted: seed 7226). Partitions it has no replica of stay."""
    follower, led, outside = info(leader=1), info(leader=0), info(leader=1, isr=(1, 2))
    elsewhere = info(leader=1, replicas=(1, 2), isr=(1, 2))
    changed = directory_replaced([follower, led, outside, elsewhere], 0, live={0, 1, 2}, unclean=never)
    assert len(changed) == 3
    assert (changed[0].leader, changed[0].leader_epoch, changed[0].isr, changed[0].partition_epoch) == (1, 3, (1, 2), 8)
    assert (changed[1].leader, changed[1].leader_epoch, changed[1].isr, changed[1].partition_epoch) == (1, 4, (1, 2), 8)
    assert (changed[2].isr, changed[2].partition_epoch) == ((1, 2), 8)
    before = alter_isr(outside, 1, 3, 7, (0, 1, 2), {0, 1, 2})  # proposed before the disk was replaced
    assert before[0] and alter_isr(changed[2], 1, 3, 7, (0, 1, 2), {0, 1, 2}) == (False, changed[2])


def test_a_broker_back_with_a_new_log_directory_is_never_elected_from_a_stale_isr():
    """As the last ISR member (partition offline, or leading alone) the broker leaves the
    ISR all the same: the ISR is empty and no clean election can pick it (its log is empty;
    were it elected, the others would truncate to it). Unclean election picks another live
    replica; once the broker has caught up, a leader can admit it like any follower."""
    offline = info(leader=NO_LEADER, isr=(0,))
    (lost,) = directory_replaced([offline], 0, live={0, 1, 2}, unclean=never)
    assert (lost.leader, lost.isr) == (NO_LEADER, ())
    assert elect_leader(lost, live={0, 1, 2}, unclean=False).leader == NO_LEADER

    (alone,) = directory_replaced([info(leader=0, isr=(0,))], 0, live={0, 1, 2}, unclean=never)
    assert (alone.leader, alone.leader_epoch, alone.isr) == (NO_LEADER, 4, ())

    (unclean,) = directory_replaced([info(leader=0, isr=(0,))], 0, live={0, 1, 2}, unclean=always)
    assert (unclean.leader, unclean.isr) == (1, (1,))
    accepted, rejoined = alter_isr(unclean, 1, unclean.leader_epoch, unclean.partition_epoch, (1, 0), {0, 1, 2})
    assert accepted and rejoined.isr == (0, 1)


def test_several_brokers_back_with_new_log_directories_leave_a_partition_lost():
    """Every broker of the ISR back on a fresh disk (say, new brokers under an old controller
    journal): applied one after another, the partition ends offline with an empty ISR."""
    partitions = [info()]
    for broker in (0, 1, 2):
        partitions = directory_replaced(partitions, broker, live={0, 1, 2}, unclean=never) or partitions
    (lost,) = partitions
    assert (lost.leader, lost.isr) == (NO_LEADER, ())


def test_brokers_registered_on_a_new_node_or_disk_are_treated_from_the_journal():
    """A broker whose journaled node differs restarted from its disk: it hands leadership over
    and leaves the ISR (also when the controller was down while it moved, and so never saw it
    go); one with a new directory id lost its replicas; each partition changes once."""
    from raylog.coordination.elections import brokers_registered

    led, followed = info(leader=1), PartitionInfo("t", 1, 0, 3, (0, 1, 2), (0, 1, 2), 7)
    other = PartitionInfo("u", 0, 0, 3, (0, 2), (0, 2), 7)
    changed = {(p.topic, p.partition): p for p in brokers_registered([led, followed, other], [1], [], {0, 1, 2}, _no)}
    assert set(changed) == {("t", 0), ("t", 1)}
    assert changed[("t", 0)].leader != 1 and 1 not in changed[("t", 0)].isr
    assert changed[("t", 1)].leader == 0 and changed[("t", 1)].isr == (0, 2)
    replaced = brokers_registered([info(leader=1, isr=(1,))], [1], [1], {0, 1, 2}, _no)
    assert [(p.leader, p.isr) for p in replaced] == [(NO_LEADER, ())]


def _no(topic: str) -> bool:
    return False


def test_an_operators_preferred_election_moves_leadership_to_the_first_replica_or_says_why_not():
    """Kafka's ElectLeaders, type PREFERRED: the first replica leads if it is live and in
    sync; ELECTION_NOT_NEEDED when it already leads, PREFERRED_LEADER_NOT_AVAILABLE otherwise."""
    moved = requested_election(info(leader=1), live={0, 1, 2}, election_type=PREFERRED_ELECTION)
    assert (moved.leader, moved.leader_epoch, moved.isr, moved.partition_epoch) == (0, 4, (0, 1, 2), 8)
    with pytest.raises(ElectionNotNeededError):
        requested_election(info(leader=0), live={0, 1, 2}, election_type=PREFERRED_ELECTION)
    with pytest.raises(PreferredLeaderNotAvailableError, match="not live"):
        requested_election(info(leader=1), live={1, 2}, election_type=PREFERRED_ELECTION)
    with pytest.raises(PreferredLeaderNotAvailableError, match="not in sync"):
        requested_election(info(leader=1, isr=(1, 2)), live={0, 1, 2}, election_type=PREFERRED_ELECTION)


def test_an_operators_unclean_election_elects_only_where_no_live_leader_is():
    """Type UNCLEAN: a partition with a live leader needs none; an offline one takes a live
    ISR member if there is one (clean), else any live replica (it may lack acknowledged
    records), else ELIGIBLE_LEADERS_NOT_AVAILABLE."""
    with pytest.raises(ElectionNotNeededError):
        requested_election(info(leader=0), live={0, 1, 2}, election_type=UNCLEAN_ELECTION)
    offline = info(leader=NO_LEADER, isr=(0,))
    with pytest.raises(EligibleLeadersNotAvailableError):
        requested_election(offline, live=set(), election_type=UNCLEAN_ELECTION)
    unclean = requested_election(offline, live={2}, election_type=UNCLEAN_ELECTION)
    assert (unclean.leader, unclean.isr, unclean.leader_epoch) == (2, (2,), 4)
    clean = requested_election(info(leader=NO_LEADER, isr=(0, 1)), live={1, 2}, election_type=UNCLEAN_ELECTION)
    assert (clean.leader, clean.isr) == (1, (1,))
    dead_leader = requested_election(info(leader=0, isr=(0, 1)), live={1}, election_type=UNCLEAN_ELECTION)
    assert dead_leader.leader == 1
    with pytest.raises(InvalidRequestError, match="election type 2"):
        requested_election(info(), live={0}, election_type=2)
