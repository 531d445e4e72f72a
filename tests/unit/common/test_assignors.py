"""Partition assignors: Kafka's range and round-robin layouts, the cooperative-sticky
assignor's balance and stickiness (examples and properties), and the assignor vote (no Ray)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raylog.common.assignors import (
    COOPERATIVE_STICKY,
    RANGE,
    ROUND_ROBIN,
    Subscription,
    assign,
    choose_strategy,
    current_claims,
)
from raylog.errors import InconsistentGroupProtocolError
from raylog.types import TopicPartition


def tps(topic: str, *partitions: int) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in partitions]


def subs(topics_by_member: dict[str, tuple[str, ...]], **kwargs) -> dict[str, Subscription]:
    return {m: Subscription(tuple(topics), **kwargs) for m, topics in topics_by_member.items()}


def all_partitions(counts: dict[str, int]) -> set[TopicPartition]:
    return {TopicPartition(t, p) for t, n in counts.items() for p in range(n)}


def assert_valid(assignment, subscriptions, counts) -> None:
    """Every partition some member subscribes to is assigned exactly once, to a subscriber."""
    assigned = [tp for tps_ in assignment.values() for tp in tps_]
    assert len(assigned) == len(set(assigned)), "a partition was assigned twice"
    wanted = {tp for tp in all_partitions(counts) if any(tp.topic in s.topics for s in subscriptions.values())}
    assert set(assigned) == wanted
    for member, tps_ in assignment.items():
        assert all(tp.topic in subscriptions[member].topics for tp in tps_), f"{member} got an unsubscribed topic"
    assert set(assignment) == set(subscriptions)


def assert_balanced(assignment, subscriptions) -> None:
    """Kafka's sticky-assignor balance check: a member with at least two more partitions
    than another holds none the other could take."""
    for big, big_tps in assignment.items():
        for small, small_tps in assignment.items():
            if len(big_tps) > len(small_tps) + 1:
                movable = [tp for tp in big_tps if tp.topic in subscriptions[small].topics]
                assert not movable, f"{movable} could move from {big} ({len(big_tps)}) to {small} ({len(small_tps)})"


def moved(before: dict[str, list[TopicPartition]], after: dict[str, list[TopicPartition]]) -> int:
    """How many partitions a member had before and does not have after (left members excluded)."""
    return sum(len(set(tps_) - set(after[m])) for m, tps_ in before.items() if m in after)


def spread(assignment) -> int:
    sizes = [len(t) for t in assignment.values()]
    return max(sizes) - min(sizes)


# --- range ----------------------------------------------------------------------------------


def test_range_kafka_javadoc_example():
    """Kafka's RangeAssignor Javadoc: C0, C1 on t0, t1 of three partitions each."""
    result = assign(RANGE, subs({"C0": ("t0", "t1"), "C1": ("t0", "t1")}), {"t0": 3, "t1": 3})
    assert result == {"C0": tps("t0", 0, 1) + tps("t1", 0, 1), "C1": tps("t0", 2) + tps("t1", 2)}


def test_range_mixed_subscriptions():
    """Kafka's RangeAssignorTest.testMultipleConsumersMixedTopics: each topic is ranged over
    its own subscribers only."""
    subscriptions = subs({"consumer1": ("topic1",), "consumer2": ("topic1", "topic2"), "consumer3": ("topic1",)})
    result = assign(RANGE, subscriptions, {"topic1": 3, "topic2": 2})
    assert result == {
        "consumer1": tps("topic1", 0),
        "consumer2": tps("topic1", 1) + tps("topic2", 0, 1),
        "consumer3": tps("topic1", 2),
    }


def test_range_more_members_than_partitions_and_uneven_counts():
    """Extra members get nothing; with a remainder the first members get one more each."""
    result = assign(RANGE, subs({"a": ("t",), "b": ("t",), "c": ("t",)}), {"t": 1})
    assert result == {"a": tps("t", 0), "b": [], "c": []}
    result = assign(RANGE, subs({"a": ("t",), "b": ("t",), "c": ("t",)}), {"t": 8})
    assert result == {"a": tps("t", 0, 1, 2), "b": tps("t", 3, 4, 5), "c": tps("t", 6, 7)}


def test_unknown_topics_and_members_without_topics_get_nothing():
    """A topic missing from the partition counts is skipped; every member has an entry."""
    for strategy in (RANGE, ROUND_ROBIN, COOPERATIVE_STICKY):
        result = assign(strategy, subs({"a": ("t", "missing"), "b": ()}), {"t": 2})
        assert result == {"a": tps("t", 0, 1), "b": []}, strategy


def test_unknown_assignor_is_refused():
    """Asking for an assignor that does not exist is an inconsistent group protocol."""
    with pytest.raises(InconsistentGroupProtocolError, match="unknown assignor"):
        assign("sticky-ish", subs({"a": ("t",)}), {"t": 1})


def test_members_are_ordered_by_instance_id_when_set():
    """Static members are ordered by group.instance.id, not by their (random) member id, so
    a restart under a new member id keeps the same partitions (Kafka's
    testStaticMemberRangeAssignmentPersistent)."""
    counts = {"t": 4}
    first = {
        "zz-1": Subscription(("t",), instance_id="instance-a"),
        "aa-1": Subscription(("t",), instance_id="instance-b"),
    }
    for strategy in (RANGE, ROUND_ROBIN):
        result = assign(strategy, first, counts)
        restarted = {
            "bb-2": Subscription(("t",), instance_id="instance-a"),
            "yy-2": Subscription(("t",), instance_id="instance-b"),
        }
        again = assign(strategy, restarted, counts)
        assert result["zz-1"] == again["bb-2"] and result["aa-1"] == again["yy-2"], strategy
    assert assign(RANGE, first, counts) == {"zz-1": tps("t", 0, 1), "aa-1": tps("t", 2, 3)}


def test_static_members_come_before_dynamic_ones():
    """Like Kafka's MemberInfo order, static members sort before dynamic ones, so a dynamic
    member's random id never shifts a static member's place."""
    subscriptions = {
        "consumer-000": Subscription(("t",)),
        "consumer-zzz": Subscription(("t",), instance_id="instance-2"),
        "consumer-aaa": Subscription(("t",), instance_id="instance-1"),
    }
    result = assign(RANGE, subscriptions, {"t": 3})
    assert result == {"consumer-aaa": tps("t", 0), "consumer-zzz": tps("t", 1), "consumer-000": tps("t", 2)}


# --- round robin ----------------------------------------------------------------------------


def test_round_robin_kafka_javadoc_example():
    """Kafka's RoundRobinAssignor Javadoc: C0, C1 on t0, t1 of three partitions each."""
    result = assign(ROUND_ROBIN, subs({"C0": ("t0", "t1"), "C1": ("t0", "t1")}), {"t0": 3, "t1": 3})
    assert result == {"C0": tps("t0", 0, 2) + tps("t1", 1), "C1": tps("t0", 1) + tps("t1", 0, 2)}


def test_round_robin_unequal_subscriptions_javadoc_example():
    """Kafka's Javadoc: C0 on t0, C1 on t0 and t1, C2 on t0, t1, t2 (1, 2, 3 partitions)."""
    subscriptions = subs({"C0": ("t0",), "C1": ("t0", "t1"), "C2": ("t0", "t1", "t2")})
    result = assign(ROUND_ROBIN, subscriptions, {"t0": 1, "t1": 2, "t2": 3})
    assert result == {"C0": tps("t0", 0), "C1": tps("t1", 0), "C2": tps("t1", 1) + tps("t2", 0, 1, 2)}


def test_round_robin_mixed_subscriptions():
    """Kafka's RoundRobinAssignorTest.testMultipleConsumersMixedTopics."""
    subscriptions = subs({"consumer1": ("topic1",), "consumer2": ("topic1", "topic2"), "consumer3": ("topic1",)})
    result = assign(ROUND_ROBIN, subscriptions, {"topic1": 3, "topic2": 2})
    assert result == {
        "consumer1": tps("topic1", 0),
        "consumer2": tps("topic1", 1) + tps("topic2", 0, 1),
        "consumer3": tps("topic1", 2),
    }


def test_eager_assignors_ignore_owned_partitions():
    """Range and round-robin depend on subscriptions only, never on what members own."""
    plain = subs({"a": ("t",), "b": ("t",)})
    owning = {"a": Subscription(("t",), owned=tuple(tps("t", 2, 3))), "b": Subscription(("t",), tps("t", 0, 1))}
    for strategy in (RANGE, ROUND_ROBIN):
        assert assign(strategy, owning, {"t": 4}) == assign(strategy, plain, {"t": 4}), strategy


# --- which ownership claims count -------------------------------------------------------------


def test_only_claims_of_the_latest_generation_count():
    """A claim made in an older generation than another member's (it lost its place since)
    counts for nothing, so the sticky assignor does not keep the partition with it; a
    member in no generation claims nothing either while others are in one."""
    subscriptions = {
        "a": Subscription(("t",), tuple(tps("t", 0, 1, 2, 3)), generation=4),
        "b": Subscription(("t",), tuple(tps("t", 2, 3)), generation=3),
        "c": Subscription(("t",), tuple(tps("t", 3)), generation=-1),
        "d": Subscription(("t",), generation=4),
    }
    claims, contested = current_claims(subscriptions)
    assert claims == {"a": tuple(tps("t", 0, 1, 2, 3)), "b": (), "c": (), "d": ()} and contested == frozenset()
    result = assign(COOPERATIVE_STICKY, subscriptions, {"t": 4})
    assert result["a"] == tps("t", 0) and all(len(result[m]) == 1 for m in "bcd")


def test_a_partition_claimed_twice_in_one_generation_counts_for_neither():
    """Two claims of one partition in the same generation: one is wrong, so it is contested
    and neither claimant's claim to it counts (their other claims do)."""
    subscriptions = {
        "a": Subscription(("t",), tuple(tps("t", 0, 1)), generation=2),
        "b": Subscription(("t",), tuple(tps("t", 1, 2)), generation=2),
    }
    claims, contested = current_claims(subscriptions)
    assert claims == {"a": tuple(tps("t", 0)), "b": tuple(tps("t", 2))} and contested == {TopicPartition("t", 1)}


def test_claims_without_a_generation_count_when_no_member_has_one():
    """Claims that carry no generation (-1) still count when no member is in a generation
    (as Kafka's assignor does for members of older versions)."""
    subscriptions = {"a": Subscription(("t",), tuple(tps("t", 0, 1))), "b": Subscription(("t",), tuple(tps("t", 2)))}
    assert current_claims(subscriptions) == ({"a": tuple(tps("t", 0, 1)), "b": tuple(tps("t", 2))}, frozenset())


# --- cooperative sticky ---------------------------------------------------------------------


def sticky(owned: dict[str, list[TopicPartition]], topics=("t",), counts=None) -> dict[str, list[TopicPartition]]:
    subscriptions = {m: Subscription(tuple(topics), tuple(o)) for m, o in owned.items()}
    counts = counts or {"t": 12}
    result = assign(COOPERATIVE_STICKY, subscriptions, counts)
    assert_valid(result, subscriptions, counts)
    assert_balanced(result, subscriptions)
    return result


def test_sticky_fresh_group_is_balanced():
    """With nothing owned, the assignment is balanced: sizes differ by at most one."""
    for members in range(1, 8):
        result = sticky({f"m{i}": [] for i in range(members)}, counts={"t": 10, "u": 3})
        assert spread(result) <= 1, members


def test_sticky_member_added_moves_the_minimum():
    """Kafka's testAddRemoveConsumerOneTopic: a second member takes one of three, the
    first keeps the lowest two; then a fifth member among four takes just two of twelve."""
    result = sticky({"c1": tps("t", 0, 1, 2), "c2": []}, counts={"t": 3})
    assert result == {"c1": tps("t", 0, 1), "c2": tps("t", 2)}
    before = {f"m{i}": tps("t", *range(3 * i, 3 * i + 3)) for i in range(4)}
    after = sticky({**before, "m4": []})
    assert moved(before, after) == 2
    assert sorted(len(t) for t in after.values()) == [2, 2, 2, 3, 3]


def test_sticky_member_removed_only_its_partitions_move():
    """One member of four leaves: every other member keeps all it had, and the leaver's
    partitions are spread over them."""
    before = {f"m{i}": tps("t", *range(3 * i, 3 * i + 3)) for i in range(4)}
    after = sticky({m: o for m, o in before.items() if m != "m2"})
    for member in after:
        assert set(before[member]) <= set(after[member]), member
    assert sorted(len(t) for t in after.values()) == [4, 4, 4]


def test_sticky_unsubscribed_and_deleted_partitions_are_dropped():
    """Owned partitions of topics no longer subscribed, or no longer existing, are not kept."""
    subscriptions = {
        "a": Subscription(("t",), tuple(tps("t", 0, 1) + tps("u", 0))),
        "b": Subscription(("t",), tuple(tps("t", 2, 7))),  # t-7 does not exist any more
    }
    result = assign(COOPERATIVE_STICKY, subscriptions, {"t": 4, "u": 1})
    assert result == {"a": tps("t", 0, 1), "b": tps("t", 2, 3)}


def test_sticky_duplicate_claims_keep_one_owner():
    """Two members claiming the same partition (a stale report) still yields one owner."""
    subscriptions = {"a": Subscription(("t",), tuple(tps("t", 0, 1))), "b": Subscription(("t",), tuple(tps("t", 1)))}
    result = assign(COOPERATIVE_STICKY, subscriptions, {"t": 4})
    assert_valid(result, subscriptions, {"t": 4})
    assert spread(result) == 0


def test_sticky_unequal_subscriptions_balance_where_they_overlap():
    """Kafka's testPoorRoundRobinAssignmentScenario kind: a member alone on a big topic
    keeps all of it; the overlapping members share the rest evenly."""
    subscriptions = subs({"a": ("big",), "b": ("small", "other"), "c": ("small", "other")})
    counts = {"big": 10, "small": 3, "other": 1}
    result = assign(COOPERATIVE_STICKY, subscriptions, counts)
    assert_valid(result, subscriptions, counts)
    assert_balanced(result, subscriptions)
    assert result["a"] == tps("big", *range(10))
    assert sorted(len(result[m]) for m in "bc") == [2, 2]


def test_sticky_is_deterministic_and_order_independent():
    """The same input in any dict order gives the same answer (every coordinator agrees)."""
    owned = {"m1": tps("t", 0, 5), "m2": tps("t", 1), "m3": [], "m4": tps("t", 7, 8, 9, 10)}
    a = sticky(owned)
    b = sticky(dict(reversed(list(owned.items()))))
    assert a == b


# --- properties -----------------------------------------------------------------------------


@st.composite
def groups(draw, identical: bool = False):
    """Random members, topics, partition counts and a random (possibly stale) owned state."""
    counts = {f"t{i}": n for i, n in enumerate(draw(st.lists(st.integers(0, 9), min_size=1, max_size=4)))}
    topic_names = sorted(counts)
    members = [f"m{i}" for i in range(draw(st.integers(1, 7)))]
    # The owned state drawn from a seed: cheap to generate, and the seed is in the report.
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    if identical:
        topics = {m: tuple(topic_names) for m in members}
    else:
        topics = {m: tuple(t for t in topic_names if rng.random() < 0.6) for m in members}
    # Owned partitions: a previous generation's assignment (disjoint), perhaps of more
    # partitions or topics than now exist.
    owned: dict[str, list[TopicPartition]] = {m: [] for m in members}
    for t in topic_names:
        for p in range(counts[t] + rng.randrange(3)):
            holder = rng.choice([*members, None])
            if holder is not None:
                owned[holder].append(TopicPartition(t, p))
    subscriptions = {m: Subscription(topics[m], tuple(owned[m])) for m in members}
    return subscriptions, counts


@settings(max_examples=200, deadline=None)
@given(groups())
def test_property_every_partition_once_and_balanced(group):
    """Any subscriptions and owned state: every subscribed partition goes to exactly one of
    its subscribers, and no single move could narrow the spread."""
    subscriptions, counts = group
    result = assign(COOPERATIVE_STICKY, subscriptions, counts)
    assert_valid(result, subscriptions, counts)
    assert_balanced(result, subscriptions)
    assert all(result[m] == sorted(result[m]) for m in result)
    # Kafka's isSticky check: no two members swapped partitions they could both have kept.
    lost_to = {
        (owner, taker)
        for owner, s in subscriptions.items()
        for taker, tps_ in result.items()
        for tp in tps_
        if taker != owner and tp in s.owned and tp.topic in s.topics
    }
    assert not {(a, b) for a, b in lost_to if (b, a) in lost_to}


@settings(max_examples=200, deadline=None)
@given(groups(identical=True))
def test_property_identical_subscriptions_move_the_minimum(group):
    """Identical subscriptions: sizes differ by at most one, and the number of owned
    partitions taken from their owners is the least any balanced assignment needs."""
    subscriptions, counts = group
    result = assign(COOPERATIVE_STICKY, subscriptions, counts)
    assert_valid(result, subscriptions, counts)
    assert spread(result) <= 1
    existing = all_partitions(counts)
    valid_owned = {m: set(s.owned) & existing for m, s in subscriptions.items()}
    kept = sum(len(valid_owned[m] & set(result[m])) for m in subscriptions)
    # Best possible: the members owning the most take the larger shares.
    floor, extra = divmod(len(existing), len(subscriptions))
    by_owned = sorted((len(o) for o in valid_owned.values()), reverse=True)
    best = sum(min(n, floor + (1 if i < extra else 0)) for i, n in enumerate(by_owned))
    assert kept == best


@settings(max_examples=200, deadline=None)
@given(groups())
def test_property_a_balanced_assignment_is_kept_as_it_is(group):
    """Feeding an assignment back as the owned state changes nothing (no needless moves)."""
    subscriptions, counts = group
    first = assign(COOPERATIVE_STICKY, subscriptions, counts)
    again = {m: Subscription(s.topics, tuple(first[m])) for m, s in subscriptions.items()}
    assert assign(COOPERATIVE_STICKY, again, counts) == first


@settings(max_examples=100, deadline=None)
@given(groups(), st.data())
def test_property_members_leaving_only_free_their_own_partitions_when_balanced(group, data):
    """After a balanced assignment, members of an identical-subscription group leave: the
    survivors keep everything they had."""
    subscriptions, counts = group
    topics = tuple(sorted(counts))
    subscriptions = {m: Subscription(topics) for m in subscriptions}
    first = assign(COOPERATIVE_STICKY, subscriptions, counts)
    mask = data.draw(st.integers(1, 2 ** len(subscriptions) - 1))
    survivors = [m for i, m in enumerate(sorted(subscriptions)) if mask >> i & 1]
    again = assign(COOPERATIVE_STICKY, {m: Subscription(topics, tuple(first[m])) for m in survivors}, counts)
    for m in survivors:
        assert set(first[m]) <= set(again[m])
    assert spread(again) <= 1


# --- the vote -------------------------------------------------------------------------------


def voters(*strategy_lists: tuple[str, ...]) -> dict[str, Subscription]:
    return {f"m{i}": Subscription(("t",), strategies=s) for i, s in enumerate(strategy_lists)}


def test_choose_strategy_majority_of_first_choices_among_common_ones():
    """Each member votes for its first choice among the assignors everyone supports."""
    assert choose_strategy(voters((RANGE, ROUND_ROBIN), (RANGE, ROUND_ROBIN), (ROUND_ROBIN, RANGE))) == RANGE
    assert choose_strategy(voters((ROUND_ROBIN, RANGE), (ROUND_ROBIN, RANGE), (RANGE, ROUND_ROBIN))) == ROUND_ROBIN
    # cooperative-sticky is the favourite of two, but the third does not support it.
    votes = voters((COOPERATIVE_STICKY, RANGE), (COOPERATIVE_STICKY, ROUND_ROBIN, RANGE), (ROUND_ROBIN, RANGE))
    assert choose_strategy(votes) == RANGE
    assert choose_strategy(voters((COOPERATIVE_STICKY,))) == COOPERATIVE_STICKY


def test_choose_strategy_breaks_ties_the_same_way_every_time():
    """A tie is decided by name, whatever the members' order."""
    assert choose_strategy(voters((ROUND_ROBIN, RANGE), (RANGE, ROUND_ROBIN))) == RANGE
    assert choose_strategy(voters((RANGE, ROUND_ROBIN), (ROUND_ROBIN, RANGE))) == RANGE


def test_choose_strategy_nothing_in_common():
    """No assignor supported by every member is an InconsistentGroupProtocolError."""
    with pytest.raises(InconsistentGroupProtocolError):
        choose_strategy(voters((RANGE,), (ROUND_ROBIN, COOPERATIVE_STICKY)))
