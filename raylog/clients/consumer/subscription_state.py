"""What the consumer reads and from where (Kafka's SubscriptionState): the partitions
assigned (by hand, or by the group to a subscription of topics or a pattern), each one's
position, the paused ones, where the next fetch of each starts, the leader epochs KIP-320
checks positions by, and the strategy that resets a position the consumer does not have."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from raylog.common.names import validate_topic_name
from raylog.errors import IllegalStateError
from raylog.types import OffsetAndMetadata, TopicPartition


class SubscriptionState:
    """The assignment and the positions of a consumer.

    Args:
        reset: ``auto_offset_reset``: "earliest", "latest" or "none".

    Attributes:
        assignment: the partitions read, in order.
        positions: each assigned partition's position, the offset of the next record handed
            out (None: not known yet, to be reset).
        paused: partitions not fetched until resumed.
        next_fetch: where the next fetch of a partition starts, past its position by what is
            fetched but not handed out yet (absent: at the position).
        fetched_epochs: the leader epoch of the last batch fetched of each partition (or of
            the committed offset its position came from).
        validated_epochs: the leader epoch (of the metadata) under which each position was
            last fetched or checked; another epoch means checking it first (KIP-320).
        subscribed: the group subscription: topics, a pattern, or None (assigned by hand).
    """

    def __init__(self, reset: str):
        self.reset = reset
        self.assignment: list[TopicPartition] = []
        self.positions: dict[TopicPartition, int | None] = {}
        self.paused: set[TopicPartition] = set()
        self.next_fetch: dict[TopicPartition, int] = {}
        self.fetched_epochs: dict[TopicPartition, int] = {}
        self.validated_epochs: dict[TopicPartition, int] = {}
        self.subscribed: tuple[str, ...] | re.Pattern | None = None

    def subscribe(self, topics: Iterable[str] | None, pattern: str | re.Pattern | None) -> None:
        """Subscribe to ``topics`` (duplicates dropped), or to ``pattern``.

        Raises:
            ValueError: neither or both of topics and pattern.
            TypeError: topics given as one string instead of a list of names.
            InvalidTopicError: a name that is not a legal topic name.
            IllegalStateError: partitions assigned by hand.
        """
        if (topics is None) == (pattern is None):
            raise ValueError("give topics or a pattern")
        if isinstance(topics, str):
            raise TypeError(f"topics must be a list of topic names, not the string {topics!r}")
        if topics is not None:
            topics = [validate_topic_name(t) for t in topics]
        if self.assignment and self.subscribed is None:
            raise IllegalStateError("partitions were assigned by hand: unsubscribe() first")
        self.subscribed = re.compile(pattern) if pattern is not None else tuple(dict.fromkeys(topics))

    def subscription_text(self) -> tuple[str, ...] | str | None:
        """The subscription as given again to ``subscribe``: the topics, the pattern's text, or None."""
        return self.subscribed.pattern if isinstance(self.subscribed, re.Pattern) else self.subscribed

    def assign(self, wanted: list[TopicPartition]) -> None:
        """Read exactly ``wanted``: positions of partitions kept are kept, new ones have none."""
        self.assignment = list(dict.fromkeys(wanted))
        self.positions = {tp: self.positions.get(tp) for tp in self.assignment}
        self.paused &= set(self.assignment)
        self.next_fetch = {tp: o for tp, o in self.next_fetch.items() if tp in self.positions}

    def assigned(self, tp: Any) -> TopicPartition:
        """``tp`` as a TopicPartition.

        Raises:
            IllegalStateError: it is not assigned.
        """
        tp = TopicPartition(*tp)
        if tp not in self.positions:
            raise IllegalStateError(f"{tp} is not assigned to this consumer")
        return tp

    def seek(self, tp: TopicPartition, offset: int, leader_epoch: int = -1) -> None:
        """Read ``tp`` from ``offset``. With the leader epoch of the record before it (a
        committed offset's), the next fetch first asks the leader where that epoch ends
        (KIP-320), so that a log truncated under the offset is read again from where it
        diverged, not skipped."""
        self.positions[tp] = offset
        self.next_fetch.pop(tp, None)
        self.fetched_epochs.pop(tp, None)
        if leader_epoch >= 0:
            self.fetched_epochs[tp] = leader_epoch
            self.validated_epochs[tp] = -1  # never a leader epoch: the next fetch validates

    def fetch_offset(self, tp: TopicPartition) -> int | None:
        """Where the next fetch of ``tp`` starts (None: unassigned, or its position unknown)."""
        return self.next_fetch.get(tp, self.positions.get(tp))

    def position_epoch(self, tp: TopicPartition) -> int:
        """The leader epoch of the last record read before the position, committed with it
        (KIP-320): known when every fetched record was handed out (the last fetched batch's),
        else -1. A marker or an aborted batch after the last record may say a later epoch;
        a later epoch can only hide a truncation from the next reader, never invent one."""
        if self.next_fetch.get(tp) != self.positions[tp]:
            return -1
        return self.fetched_epochs.get(tp, -1)

    def consumed(self) -> dict[TopicPartition, OffsetAndMetadata]:
        """What ``commit()`` commits by default: each assigned partition's position (where
        known) with its leader epoch."""
        return {
            tp: OffsetAndMetadata(self.positions[tp], "", self.position_epoch(tp))
            for tp in self.assignment
            if self.positions.get(tp) is not None
        }
