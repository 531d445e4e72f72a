"""A consumer's membership rules (MemberState): what it gives up before joining, what it
claims, and which errors cost it its generation; and a member's of Kafka's consumer protocol
(ConsumerProtocolMember, driven against the coordinator at random in test_consumer_group)
(no Ray)."""

from __future__ import annotations

import pytest

from raylog.clients.member import NO_GENERATION, ConsumerProtocolMember, MemberState, assignment_change
from raylog.common.group_protocol import HeartbeatAnswer
from raylog.errors import (
    CoordinatorNotAvailableError,
    FencedMemberEpochError,
    IllegalGenerationError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from raylog.types import TopicPartition

HELD = [TopicPartition("t", 2), TopicPartition("t", 0)]


def member(generation: int = 7) -> MemberState:
    state = MemberState()
    state.joined("m-1", generation)
    return state


def test_a_member_in_a_generation_claims_what_it_holds_with_that_generation():
    """Cooperative: nothing is given up, the join claims what the member holds in its
    generation. Eager: everything is revoked first and nothing claimed."""
    plan = member().prepare_join(HELD, cooperative=True)
    assert (plan.lost, plan.revoked, plan.owned, plan.generation) == ((), (), tuple(sorted(HELD)), 7)
    plan = member().prepare_join(HELD, cooperative=False)
    assert (plan.lost, plan.revoked, plan.owned) == ((), tuple(sorted(HELD)), ())
    assert member().lost(HELD) == []


@pytest.mark.parametrize("error", [UnknownMemberIdError, IllegalGenerationError])
@pytest.mark.parametrize("cooperative", [True, False])
def test_a_member_that_lost_its_generation_gives_everything_up_as_lost_and_claims_nothing(error, cooperative):
    """After UNKNOWN_MEMBER_ID (id and generation reset) or ILLEGAL_GENERATION (generation
    reset, id kept) what the member holds is lost, and its next join claims nothing."""
    state = member()
    assert state.failed(error("gone"), "m-1", 7)
    assert state.member_id == ("" if error is UnknownMemberIdError else "m-1")
    assert state.generation == NO_GENERATION
    assert state.lost(HELD) == sorted(HELD)
    plan = state.prepare_join(HELD, cooperative)
    assert (plan.lost, plan.revoked, plan.owned, plan.generation) == (tuple(sorted(HELD)), (), (), NO_GENERATION)


def test_errors_about_an_older_membership_and_retriable_ones_change_nothing():
    """An error for a call sent in a generation the member has left behind (a join completed
    meanwhile) is no news; REBALANCE_IN_PROGRESS and retriable errors keep id and generation."""
    state = member(generation=8)
    assert not state.failed(UnknownMemberIdError("late"), "m-1", 7)
    assert not state.failed(IllegalGenerationError("late"), "m-0", 8)
    assert not state.failed(RebalanceInProgressError("rejoin"), "m-1", 8)
    assert not state.failed(CoordinatorNotAvailableError("moved"), "m-1", 8)
    assert (state.member_id, state.generation) == ("m-1", 8)
    state.left()
    assert (state.member_id, state.generation) == ("", NO_GENERATION) and state.lost(HELD) == sorted(HELD)


def test_illegal_generation_while_a_join_is_outstanding_is_no_news():
    """A heartbeat sent just before a join comes back ILLEGAL_GENERATION when the join has
    completed at the coordinator (its reply waits until the group is written): the member keeps
    what it holds and claims it in that generation; the join's answer decides. (Losing it made
    a lone member of a pattern subscription read its partition again from the committed offset.)"""
    state = member(generation=1)
    assert not state.failed(IllegalGenerationError("moved on"), "m-1", 1, joining=True)
    assert state.generation == 1 and state.lost(HELD) == []
    assert state.failed(UnknownMemberIdError("gone"), "m-1", 1, joining=True)  # the join will fail too


def test_assignment_change():
    """A sync's assignment against what the member holds: added and revoked, sorted."""
    t = [TopicPartition("t", p) for p in range(4)]
    assert assignment_change([t[0], t[1]], [t[3], t[1], t[2]]) == ([t[2], t[3]], [t[0]])


def _answer(epoch: int, *partitions: int) -> HeartbeatAnswer:
    return HeartbeatAnswer("m-1", epoch, 5_000, frozenset(TopicPartition("t", p) for p in partitions))


def test_a_consumer_protocol_member_takes_its_assignment_and_reports_it_owned_from_the_answer_on():
    """Joining: epoch 0, owning nothing, no commits. An answer's assignment is what it reads
    from its next poll; its heartbeats report it owned from the answer on (the client may
    start reading it any time), and with what it held until a poll gave that up."""
    state = ConsumerProtocolMember("m-1")
    request = state.request("g", ["t"], [], instance_id=None, assignor="range", rebalance_timeout_ms=300_000)
    assert (request.member_epoch, request.owned, request.topics, request.regex) == (0, frozenset(), ("t",), "")
    assert state.commit_args() == ("", -1)
    state.answered(_answer(3, 0, 1), sent_epoch=0)
    assert state.request("g", ["t"], [], instance_id=None, assignor=None, rebalance_timeout_ms=1).owned == {
        TopicPartition("t", 0),
        TopicPartition("t", 1),
    }
    assert state.take([]) == ([TopicPartition("t", 0), TopicPartition("t", 1)], [], False)
    assert state.take(HELD) == ([], [], False)  # nothing new
    assert state.commit_args() == ("m-1", 3)
    state.answered(_answer(4, 1), sent_epoch=3)
    held = [TopicPartition("t", 0), TopicPartition("t", 1)]
    assert state.request("g", ["t"], held, instance_id=None, assignor=None, rebalance_timeout_ms=1).owned == set(held)
    assert state.take(held) == ([], [TopicPartition("t", 0)], False)


def test_a_fenced_consumer_protocol_member_loses_what_it_holds_before_it_joins_again():
    state = ConsumerProtocolMember("m-1")
    state.answered(_answer(3, 0), sent_epoch=0)
    assert not state.failed(CoordinatorNotAvailableError("moved"), sent_epoch=3)  # retried: no news
    assert not state.failed(FencedMemberEpochError("x"), sent_epoch=2)  # about an epoch left behind
    assert state.failed(FencedMemberEpochError("x"), sent_epoch=3)
    assert state.epoch == 0 and state.commit_args() == ("", -1)
    state.answered(_answer(9, 0), sent_epoch=3)  # a late answer to a heartbeat before the fence
    assert state.epoch == 0
    assert state.take([TopicPartition("t", 0)]) == ([], [TopicPartition("t", 0)], True)  # lost, not revoked
    assert state.take([]) == ([], [], False)


def test_a_consumer_protocol_member_leaves_with_epoch_minus_one_or_minus_two_when_static():
    state = ConsumerProtocolMember("m-1")
    assert state.leave_request("g", None).member_epoch == -1
    assert state.leave_request("g", "i-1").member_epoch == -2
    state.answered(_answer(3, 0), sent_epoch=0)
    state.left()
    assert state.epoch == 0 and state.take([TopicPartition("t", 0)])[2]
