"""A replica's role as a step core: what it follows, one ISR proposal at a time, and no role
after a restart until the controller answered (no Ray)."""

from __future__ import annotations

import pytest

from raylog.config import TopicConfig
from raylog.coordination.partition import Partition
from raylog.coordination.replica_core import (
    Changed,
    Follow,
    IsrAnswered,
    ProposeIsr,
    ReplicaCore,
    ReportRestart,
    Restarted,
    RoleAnswered,
    StatePushed,
    StopFollowing,
)
from raylog.types import PartitionInfo

LAG_MS = 1000


def state(leader: int, leader_epoch: int, partition_epoch: int, isr=(0, 1, 2)) -> PartitionInfo:
    return PartitionInfo("t", 0, leader, leader_epoch, (0, 1, 2), isr, partition_epoch)


@pytest.fixture
def core(open_log, clock) -> ReplicaCore:
    """Broker 1's replica, before any state."""
    config = TopicConfig.from_properties({"replica.lag.time.max.ms": str(LAG_MS)})
    return ReplicaCore(Partition("t", 0, broker_id=1, log=open_log(), config=config, clock=clock), clock=clock)


def test_a_follower_fetches_from_the_leader_its_state_names_and_anew_only_when_the_role_moves(core):
    (follow,) = core.step(StatePushed(state(0, 0, 0), "actor-0"))
    assert isinstance(follow, Follow) and follow.leader == "actor-0" and follow.fetcher.leader_epoch == 0
    assert core.step(StatePushed(state(0, 0, 0), "actor-0")) == []  # told again: nothing moves
    assert core.step(StatePushed(state(0, 0, 1, isr=(0, 1)), None)) == []  # an ISR change: same loop
    stop, again = core.step(StatePushed(state(2, 1, 2), "actor-2"))
    assert isinstance(stop, StopFollowing) and (again.leader, again.fetcher.leader_epoch) == ("actor-2", 1)


def test_the_leaders_actor_re_created_on_another_node_is_followed_anew(core):
    core.step(StatePushed(state(0, 0, 0), "actor-0"))
    stop, follow = core.step(StatePushed(state(0, 0, 1), "actor-0-elsewhere"))
    assert isinstance(stop, StopFollowing) and follow.leader == "actor-0-elsewhere"


def test_a_role_moved_without_the_leaders_actor_waits_for_a_push_naming_it(core):
    core.step(StatePushed(state(0, 0, 0), "actor-0"))
    assert core.step(StatePushed(state(2, 1, 1), None)) == [StopFollowing()]
    assert not core.following
    (follow,) = core.step(StatePushed(state(2, 1, 1), "actor-2"))  # the same epochs, now named
    assert follow.leader == "actor-2"


def test_a_fetch_loop_that_ended_on_its_own_is_started_again_by_the_next_state(core):
    (follow,) = core.step(StatePushed(state(0, 0, 0), "actor-0"))
    core.partition.become_follower(2, 1, (0, 1, 2), (0, 1, 2), 1)  # the fetcher's epoch is gone
    assert follow.fetcher.next_request() is None and not core.following
    stop, again = core.step(StatePushed(state(0, 0, 0), "actor-0"))
    assert isinstance(stop, StopFollowing) and isinstance(again, Follow) and again.fetcher is not follow.fetcher


def test_leading_or_going_offline_stops_the_fetch_loop(core):
    core.step(StatePushed(state(0, 0, 0), "actor-0"))
    assert core.step(StatePushed(state(1, 1, 1), None)) == [StopFollowing()]
    assert core.step(StatePushed(state(-1, 2, 2), None)) == []  # nothing was running


def test_one_isr_proposal_at_a_time_and_one_unanswered_is_sent_again(core, clock):
    """A leader proposes a shrink once a follower lagged past replica.lag.time.max.ms; while it
    is out nothing else is proposed; without an answer (a timeout) it stays pending and the
    next round sends it again, unchanged."""
    core.step(StatePushed(state(1, 0, 0), None))
    assert core.step(Changed()) == []
    clock.advance(LAG_MS + 1)
    (proposal,) = core.step(Changed())
    assert proposal == ProposeIsr((1,), 0, 0) and core.proposing == (1,)
    assert core.step(Changed()) == []  # one at a time
    assert core.step(IsrAnswered((1,), None)) == [] and core.proposing is None
    assert core.partition.pending_isr == (1,)
    assert core.step(Changed()) == [ProposeIsr((1,), 0, 0)]
    accepted = state(1, 0, 1, isr=(1,))
    assert core.step(IsrAnswered((1,), (True, accepted))) == []
    assert core.partition.isr == (1,) and core.partition.pending_isr is None and core.step(Changed()) == []


def test_an_isr_answer_naming_another_leader_makes_the_old_leader_wait_for_the_push(core, clock):
    core.step(StatePushed(state(1, 0, 0), None))
    clock.advance(LAG_MS + 1)
    core.step(Changed())
    assert core.step(IsrAnswered((1,), (False, state(2, 1, 1)))) == []  # (no actor named yet)
    assert not core.partition.is_leader and core.proposing is None
    (follow,) = core.step(StatePushed(state(2, 1, 1), "actor-2"))
    assert follow.leader == "actor-2"


def test_a_restarted_replica_takes_no_role_until_its_report_is_answered(core):
    """A push that reaches the new process first (a retry of one sent to the old process) may
    carry the very role it held, leadership included: it is held, not taken, and taken after
    the controller's answer only if newer."""
    assert core.step(Restarted()) == [ReportRestart()]
    assert core.step(StatePushed(state(1, 0, 0), None)) == []
    assert core.partition.leader_epoch == -1 and not core.partition.is_leader
    assert core.step(Changed()) == []  # no proposals either
    (follow,) = core.step(RoleAnswered(state(0, 1, 1), "actor-0"))
    assert follow.leader == "actor-0" and core.partition.leader_epoch == 1 and not core.awaiting_role
    assert core.step(RoleAnswered(state(1, 0, 0), None)) == []  # a second answer: nothing


def test_a_push_newer_than_the_restart_answer_is_taken_after_it(core):
    core.step(Restarted())
    core.step(StatePushed(state(1, 0, 0), None))
    core.step(StatePushed(state(2, 2, 3), "actor-2"))  # the newest is held
    core.step(StatePushed(state(0, 1, 1), "actor-0"))
    effects = core.step(RoleAnswered(state(0, 1, 2), "actor-0"))
    assert [type(e) for e in effects] == [Follow, StopFollowing, Follow] and effects[-1].leader == "actor-2"
    assert (core.partition.leader, core.partition.leader_epoch) == (2, 2)


def test_a_restart_answered_for_a_deleted_partition_takes_nothing(core):
    core.step(Restarted())
    core.step(StatePushed(state(0, 0, 0), "actor-0"))
    assert core.step(RoleAnswered(None)) == [] and not core.awaiting_role
    assert core.partition.leader_epoch == -1
