"""Partition assignors: who in a consumer group reads which partition.

Every assignor is a pure function of the members' subscriptions (and, for the sticky one,
of what each member owns now) and of the partition counts; members are ordered by
``group.instance.id`` when they have one, else by member id, so that every coordinator
computes the same answer.

- ``range``: per topic, contiguous ranges of partitions; the first members get one more
  when the count does not divide (Kafka's RangeAssignor).
- ``roundrobin``: all partitions of all topics, in order, dealt one at a time to the
  members subscribed to their topic (Kafka's RoundRobinAssignor).
- ``cooperative-sticky``: balanced (partition counts differ by at most one among members
  that could take each other's partitions), keeping every partition with its current
  owner where the balance allows, so a rebalance moves as few partitions as it can
  (Kafka's CooperativeStickyAssignor). It is run with the incremental protocol: a
  partition that moves is first revoked by its owner, then assigned in a follow-up round.

What a member claims to own counts only when claimed in the latest generation any member
is in (:func:`current_claims`, Kafka's KIP-792): a member that lost its membership and
claims what it held in an older generation cannot keep a partition given to another since.
"""

from __future__ import annotations

import collections
import heapq
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from ..errors import InconsistentGroupProtocolError
from ..types import TopicPartition

RANGE = "range"
ROUND_ROBIN = "roundrobin"
COOPERATIVE_STICKY = "cooperative-sticky"
#: Assignors whose members keep their partitions during a rebalance (incremental protocol).
COOPERATIVE = frozenset({COOPERATIVE_STICKY})


@dataclass(frozen=True)
class Subscription:
    """What a member asks for: its topics and, for sticky assignment, what it owns now and
    the generation it owns it in (-1: none given)."""

    topics: tuple[str, ...]
    owned: tuple[TopicPartition, ...] = ()
    instance_id: str | None = None
    strategies: tuple[str, ...] = field(default=(COOPERATIVE_STICKY,))
    generation: int = -1


Assignment = dict[str, list[TopicPartition]]


def current_claims(
    subscriptions: Mapping[str, Subscription],
) -> tuple[dict[str, tuple[TopicPartition, ...]], frozenset[TopicPartition]]:
    """Which ownership claims count: ``({member: partitions it may keep}, contested)``.

    Only claims made in the highest generation any member is in count (older ones come
    from a member that lost its place, whose partitions may have moved since); a
    partition claimed by two members in that generation is ``contested`` and counts for
    neither (one of them is wrong, and neither may keep it).
    """
    latest = max((s.generation for s in subscriptions.values()), default=-1)
    claimants: dict[TopicPartition, str] = {}
    contested: set[TopicPartition] = set()
    for member, subscription in subscriptions.items():
        if subscription.generation != latest:
            continue
        for tp in subscription.owned:
            if claimants.setdefault(tp, member) != member:
                contested.add(tp)
    claims = {
        m: tuple(tp for tp in s.owned if claimants.get(tp) == m and tp not in contested)
        for m, s in subscriptions.items()
    }
    return claims, frozenset(contested)


def choose_strategy(subscriptions: Mapping[str, Subscription]) -> str:
    """The assignor every member supports, by the members' order of preference (Kafka's
    vote: each member votes for its first choice among those all support).

    Raises:
        InconsistentGroupProtocolError: no assignor is supported by every member.
    """
    common = set.intersection(*(set(s.strategies) for s in subscriptions.values()))
    if not common:
        raise InconsistentGroupProtocolError("the members of the group support no partition assignor in common")
    votes: dict[str, int] = {}
    for subscription in subscriptions.values():
        first = next(s for s in subscription.strategies if s in common)
        votes[first] = votes.get(first, 0) + 1
    return max(sorted(votes), key=lambda s: votes[s])


def assign(strategy: str, subscriptions: Mapping[str, Subscription], partition_counts: Mapping[str, int]) -> Assignment:
    """``{member_id: [TopicPartition, ...]}`` for every member (sorted lists).

    Args:
        strategy: one of ``range``, ``roundrobin``, ``cooperative-sticky``.
        subscriptions: member id -> :class:`Subscription` (claims that do not count, see
            :func:`current_claims`, are ignored).
        partition_counts: topic -> number of partitions (topics missing here are skipped).
    """
    assignor = ASSIGNORS.get(strategy)
    if assignor is None:
        raise InconsistentGroupProtocolError(f"unknown assignor {strategy!r}; known: {sorted(ASSIGNORS)}")
    claims, _ = current_claims(subscriptions)
    subscriptions = {m: replace(s, owned=claims[m]) for m, s in subscriptions.items()}
    result = assignor(subscriptions, partition_counts)
    return {member: sorted(result.get(member, [])) for member in subscriptions}


def _order(subscriptions: Mapping[str, Subscription]) -> list[str]:
    # Kafka's MemberInfo order: static members first, by instance id, then dynamic ones by
    # member id, so that a dynamic member's random id never shifts a static member's place.
    def key(member: str) -> tuple[bool, str, str]:
        instance_id = subscriptions[member].instance_id
        return instance_id is None, instance_id or member, member

    return sorted(subscriptions, key=key)


def _range(subscriptions: Mapping[str, Subscription], partition_counts: Mapping[str, int]) -> Assignment:
    out: Assignment = {m: [] for m in subscriptions}
    members = _order(subscriptions)
    for topic in sorted({t for s in subscriptions.values() for t in s.topics}):
        count = partition_counts.get(topic, 0)
        takers = [m for m in members if topic in subscriptions[m].topics]
        if not count or not takers:
            continue
        share, extra = divmod(count, len(takers))
        start = 0
        for i, member in enumerate(takers):
            n = share + (1 if i < extra else 0)
            out[member].extend(TopicPartition(topic, p) for p in range(start, start + n))
            start += n
    return out


def _round_robin(subscriptions: Mapping[str, Subscription], partition_counts: Mapping[str, int]) -> Assignment:
    out: Assignment = {m: [] for m in subscriptions}
    members = _order(subscriptions)
    turn = 0
    for topic in sorted({t for s in subscriptions.values() for t in s.topics}):
        for p in range(partition_counts.get(topic, 0)):
            # The next member in the circle that subscribes to this topic.
            for step in range(len(members)):
                member = members[(turn + step) % len(members)]
                if topic in subscriptions[member].topics:
                    out[member].append(TopicPartition(topic, p))
                    turn = (turn + step + 1) % len(members)
                    break
    return out


def _sticky(subscriptions: Mapping[str, Subscription], partition_counts: Mapping[str, int]) -> Assignment:
    members = _order(subscriptions)
    rank = {m: i for i, m in enumerate(members)}
    # Members with the same topics share one set of the partitions they could take.
    topics_of = {m: frozenset(t for t in subscriptions[m].topics if partition_counts.get(t, 0)) for m in members}
    sets = {
        topics: frozenset(TopicPartition(t, p) for t in topics for p in range(partition_counts[t]))
        for topics in set(topics_of.values())
    }
    eligible = {m: sets[topics_of[m]] for m in members}
    everything = sorted(set().union(*sets.values()))
    # A member's fair share: the partitions it could take, spread over everyone who could too.
    shares = _fair_shares(collections.Counter(topics_of.values()), sets)
    quota = {m: shares[topics_of[m]] for m in members}
    out: Assignment = {m: [] for m in members}
    taken: set[TopicPartition] = set()
    for member in members:  # keep what each member owns, up to its quota
        for tp in sorted(subscriptions[member].owned):
            if tp in eligible[member] and tp not in taken and len(out[member]) < quota[member]:
                out[member].append(tp)
                taken.add(tp)

    def load(m: str) -> tuple[bool, int, int]:
        return len(out[m]) >= quota[m], len(out[m]), rank[m]

    # The rest to the least loaded member that can take it: a heap of members per topic,
    # whose keys only grow (an entry found stale is pushed again with its key of now).
    heaps = {}
    for tp in everything:
        if tp in taken:
            continue
        heap = heaps.get(tp.topic)
        if heap is None:
            heap = heaps[tp.topic] = [load(m) + (m,) for m in members if tp.topic in topics_of[m]]
            heapq.heapify(heap)
        while (now := load(heap[0][-1])) != heap[0][:-1]:
            heapq.heapreplace(heap, now + (heap[0][-1],))
        member = heap[0][-1]
        out[member].append(tp)
        taken.add(tp)
        heapq.heapreplace(heap, load(member) + (member,))
    _balance(out, eligible, members, {m: set(subscriptions[m].owned) for m in members})
    return out


def _fair_shares(
    counts: Mapping[frozenset[str], int], sets: Mapping[frozenset[str], frozenset[TopicPartition]]
) -> dict[frozenset[str], int]:
    """The quota of a member by its topics (with ``counts`` members subscribed to each set
    of topics): its partitions spread over every member that shares one of them."""
    shares = {}
    for topics, mine in sets.items():
        sharing = [other for other in counts if other & topics]
        if not mine:
            shares[topics] = 0
        elif any(other != topics for other in sharing):
            # Unequal subscriptions: the ceiling below is no bound on what a member holds in a
            # balanced assignment (a sharer may be able to take only a few), so capping at it
            # would move partitions for nothing. Keep all it owns; _balance evens it out.
            shares[topics] = len(mine)
        else:
            shares[topics] = -(-len(mine) // counts[topics])  # ceiling
    return shares


def _balance(
    out: Assignment, eligible: Mapping[str, frozenset[TopicPartition]], members: list[str], owned: Mapping[str, set]
) -> None:
    """Move partitions from the most to the least loaded member that can take them, until
    no move lowers the spread (each move shrinks the gap, so this ends). Of the moves from
    the most loaded donor that has one, take first a partition the donor did not own, then
    one the taker owned: so no two members trade partitions they could both have kept."""
    rank = {m: i for i, m in enumerate(members)}
    while True:
        least = min((len(out[m]) for m in members), default=0)
        for donor in sorted(members, key=lambda m: -len(out[m])):
            if len(out[donor]) <= least + 1:
                return  # no member has two fewer than this one or any after it
            takers = [m for m in members if len(out[m]) + 1 < len(out[donor])]
            moves = [
                (tp in owned[donor], tp not in owned[taker], len(out[taker]), rank[taker], tp, taker)
                for taker in takers
                for tp in out[donor]
                if tp in eligible[taker]
            ]
            if moves:
                *_, tp, taker = min(moves)
                out[donor].remove(tp)
                out[taker].append(tp)
                break
        else:
            return


ASSIGNORS: dict[str, Callable[[Mapping[str, Subscription], Mapping[str, int]], Assignment]] = {
    RANGE: _range,
    ROUND_ROBIN: _round_robin,
    COOPERATIVE_STICKY: _sticky,
}
