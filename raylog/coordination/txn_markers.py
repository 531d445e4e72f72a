"""Writing a prepared transaction's markers (Kafka's TransactionMarkerChannelManager) as a
core: the transaction coordinator's completion and the seeded simulation both run it.

A prepared transaction (PrepareCommit or PrepareAbort replicated) is decided; what is left is
a marker in each of its partitions, written by that partition's current leader with acks=all
(:meth:`~raylog.actors.replica.PartitionReplicaActor.write_txn_marker`). :class:`MarkerWriter`
says what to do next, in rounds:

1. the leaders of the partitions whose leader is not known (:class:`FindLeaders`, the
   controller's metadata; none: pause and start the round again);
2. one marker to each partition whose leader is known (:class:`WriteMarkers`); a partition
   whose topic was deleted needs none, one with no leader now waits for the next round;
3. each answer: written, or UNKNOWN_TOPIC_OR_PARTITION (deleted meanwhile), is done; any
   other error forgets that partition's leader, to be asked again; while partitions are
   left, pause, then the next round.

Markers are idempotent (a partition answers a marker it has with success once the ISR has
it), so a round may send a marker again that a lost answer already wrote. The known leaders
are shared between the coordinator's transactions (a steady pipeline asks the controller
nothing). No Ray, clock or thread here: the pump makes the calls and pauses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from raylog.coordination.fetcher import Next
from raylog.coordination.transactions import TxnMetadata
from raylog.errors import UnknownTopicOrPartitionError
from raylog.types import TopicPartition


@dataclass(frozen=True)
class FindLeaders:
    """Ask the controller for these topics' partition leaders."""

    topics: tuple[str, ...]


@dataclass(frozen=True)
class WriteMarkers:
    """One marker to each partition's leader (the pump's handle), all with the same fields."""

    leaders: dict  # TopicPartition -> the leader's handle
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    bumps_epoch: bool


class MarkerWriter:
    """The markers of one prepared transaction; see the module docstring.

    ``leaders``: the partition leaders known so far, shared with the coordinator's other
    writers (updated here); ``coordinator_epoch``: the leader epoch of the coordinator's
    ``__transaction_state`` partition (partitions fence markers of older coordinators)."""

    def __init__(self, metadata: TxnMetadata, leaders: dict[TopicPartition, Any], coordinator_epoch: int):
        self.metadata = metadata
        self.remaining = set(metadata.partitions)
        self.leaders = leaders
        self.coordinator_epoch = coordinator_epoch
        self.failed = 0  # markers answered with an error, over every round
        self._looking_up: tuple[str, ...] | None = None  # the topics this round asked about

    @property
    def done(self) -> bool:
        return not self.remaining

    def next_request(self) -> FindLeaders | WriteMarkers | None:
        """What to ask next: leaders, or this round's markers; None once every marker is written."""
        if not self.remaining:
            return None
        if self._looking_up is None:
            unknown = tuple(sorted({tp.topic for tp in self.remaining if tp not in self.leaders}))
            if unknown:
                self._looking_up = unknown
                return FindLeaders(unknown)
        self._looking_up = None
        m = self.metadata
        return WriteMarkers(
            {tp: self.leaders[tp] for tp in sorted(self.remaining) if tp in self.leaders},
            m.marker_producer_id,
            m.marker_epoch,
            m.committing,
            self.coordinator_epoch,
            m.bumps_epoch,
        )

    def on_leaders(self, found: dict | None) -> Next:
        """The controller's metadata of the topics asked about (``{"topics": {name: ...},
        "leaders": {(topic, partition): handle or None}}``; a deleted topic is missing), or
        None when it did not answer: pause and ask again."""
        asked = self._looking_up
        if found is None or asked is None:
            self._looking_up = None
            return Next.BACKOFF
        for tp in sorted(self.remaining):
            if tp.topic not in asked or tp in self.leaders:
                continue
            if tp.topic not in found["topics"]:
                self.remaining.discard(tp)  # the topic was deleted: nothing to mark
            elif (leader := found["leaders"].get((tp.topic, tp.partition))) is not None:
                self.leaders[tp] = leader
        return Next.AGAIN  # the round goes on to its markers

    def on_answers(self, answers: dict[TopicPartition, BaseException | None]) -> Next:
        """Each marker's outcome (None: written). AGAIN once every marker is written, else
        BACKOFF before the next round."""
        for tp, error in answers.items():
            if error is None or isinstance(error, UnknownTopicOrPartitionError):
                self.remaining.discard(tp)
            else:
                self.failed += 1
                self.leaders.pop(tp, None)  # ask the controller for its leader again
        return Next.BACKOFF if self.remaining else Next.AGAIN
