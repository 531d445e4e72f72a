"""The consumer's SubscriptionState on its own: assignment and subscription, positions and
seeks, and the KIP-320 leader epoch a commit carries."""

from __future__ import annotations

import re

import pytest

from raylog.clients.consumer.subscription_state import SubscriptionState
from raylog.errors import IllegalStateError, InvalidTopicError
from raylog.types import OffsetAndMetadata, TopicPartition

T0, T1, T2 = (TopicPartition("t", p) for p in range(3))


def test_a_new_assignment_keeps_the_positions_of_partitions_kept_and_forgets_the_others():
    state = SubscriptionState("earliest")
    state.assign([T0, T1, T0])
    assert state.assignment == [T0, T1] and state.positions == {T0: None, T1: None}
    state.seek(T0, 5)
    state.seek(T1, 7)
    state.next_fetch[T1] = 9
    state.paused |= {T0, T1}
    state.assign([T1, T2])
    assert state.positions == {T1: 7, T2: None}
    assert state.paused == {T1} and state.next_fetch == {T1: 9}


def test_assigned_answers_a_topic_partition_or_refuses_one_not_assigned():
    state = SubscriptionState("latest")
    state.assign([T0])
    assert state.assigned(("t", 0)) == T0 and isinstance(state.assigned(("t", 0)), TopicPartition)
    with pytest.raises(IllegalStateError, match="not assigned"):
        state.assigned(T1)


def test_a_seek_forgets_what_was_fetched_past_the_position_and_its_epoch():
    state = SubscriptionState("earliest")
    state.assign([T0])
    state.positions[T0], state.next_fetch[T0], state.fetched_epochs[T0] = 10, 25, 3
    assert state.fetch_offset(T0) == 25
    state.seek(T0, 4)
    assert state.positions[T0] == 4 and state.fetch_offset(T0) == 4 and T0 not in state.fetched_epochs
    assert state.fetch_offset(T1) is None  # not assigned


def test_a_seek_to_a_committed_offset_with_its_epoch_makes_the_next_fetch_check_it():
    state = SubscriptionState("earliest")
    state.assign([T0])
    state.validated_epochs[T0] = 2
    state.seek(T0, 8, leader_epoch=0)
    assert state.positions[T0] == 8 and state.fetched_epochs[T0] == 0
    assert state.validated_epochs[T0] == -1  # no leader epoch is -1: the fetch loop validates first
    state.seek(T0, 9)
    assert T0 not in state.fetched_epochs


def test_commits_carry_the_epoch_of_the_last_record_once_every_fetched_record_was_handed_out():
    state = SubscriptionState("earliest")
    state.assign([T0, T1, T2])
    state.positions[T0], state.next_fetch[T0], state.fetched_epochs[T0] = 10, 10, 3
    state.positions[T1], state.next_fetch[T1], state.fetched_epochs[T1] = 4, 12, 3  # 4..11 not read yet
    assert state.position_epoch(T0) == 3 and state.position_epoch(T1) == -1
    assert state.consumed() == {T0: OffsetAndMetadata(10, "", 3), T1: OffsetAndMetadata(4, "", -1)}  # T2: no position


def test_a_subscription_is_topics_or_a_pattern_and_excludes_assigning_by_hand():
    state = SubscriptionState("earliest")
    state.subscribe(["a", "b", "a"], None)
    assert state.subscribed == ("a", "b") and state.subscription_text() == ("a", "b")
    state.subscribe(None, "cl.*")
    assert isinstance(state.subscribed, re.Pattern) and state.subscription_text() == "cl.*"
    with pytest.raises(ValueError):
        state.subscribe(None, None)
    with pytest.raises(ValueError):
        state.subscribe(["a"], "a")
    with pytest.raises(TypeError, match="list of topic names"):
        state.subscribe("abc", None)
    with pytest.raises(InvalidTopicError):
        state.subscribe(["a b"], None)
    by_hand = SubscriptionState("earliest")
    by_hand.assign([T0])
    with pytest.raises(IllegalStateError, match="assigned by hand"):
        by_hand.subscribe(["t"], None)
    assert by_hand.subscription_text() is None
