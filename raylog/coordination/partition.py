"""One replica of one partition: its log plus the leader's rules (no Ray).

The replica actor hosts a :class:`Partition` and turns calls into its steps:

- ``append_as_leader`` checks the role and ``acks``, refuses acks=all while the ISR is
  smaller than ``min.insync.replicas``, appends, and advances the high watermark;
- ``read`` serves consumers below the high watermark and followers below the log end
  offset, fencing callers whose leader epoch is stale or ahead; a follower's fetch offset
  is its log end offset, from which the leader moves the high watermark;
- ``list_offset`` answers earliest / latest / by-timestamp.

Invariants: the high watermark never goes down while a replica leads, never exceeds the
log end offset, and equals the smallest log end offset among the ISR.

Concurrency: single-threaded (the actor's event loop); reads may also run on other threads
as the :class:`~raylog.storage.log.Log` allows.
"""

from __future__ import annotations

from dataclasses import dataclass

from raylog.config import TopicConfig
from raylog.coordination.producer_state import NO_PRODUCER_ID, ProducerStateManager, Verdict
from raylog.errors import (
    FencedLeaderEpochError,
    InvalidRequestError,
    InvalidRequiredAcksError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    UnknownLeaderEpochError,
)
from raylog.storage import record_batch
from raylog.storage.log import AppendInfo, Log

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
#: replica_id of a consumer's fetch (followers send their broker id).
CONSUMER_REPLICA_ID = -1
#: Segments whose batch headers rebuild the idempotent-producer state on start.
PRODUCER_STATE_SEGMENTS = 2


class SequenceGap(Exception):
    """An idempotent batch arrived before an earlier one of its producer: wait and retry."""


@dataclass(frozen=True)
class ReadResult:
    data: bytes
    high_watermark: int
    log_start_offset: int
    log_end_offset: int


class Partition:
    """See the module docstring."""

    def __init__(self, topic: str, partition: int, broker_id: int, log: Log, config: TopicConfig):
        self.topic = topic
        self.partition = partition
        self.broker_id = broker_id
        self.log = log
        self.config = config
        self.leader_epoch = -1
        self.leader: int | None = None
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self.follower_end_offsets: dict[int, int] = {}
        self.high_watermark = 0
        self.producers = ProducerStateManager()
        self.producers.rebuild(log.tail_headers(PRODUCER_STATE_SEGMENTS))

    @property
    def is_leader(self) -> bool:
        return self.leader == self.broker_id

    def become_leader(self, leader_epoch: int, replicas: tuple[int, ...], isr: tuple[int, ...]) -> None:
        """Lead from ``leader_epoch`` with the given replicas and ISR."""
        self.leader_epoch, self.leader = leader_epoch, self.broker_id
        self.replicas, self.isr = tuple(replicas), tuple(isr)
        self.follower_end_offsets = {
            r: self.follower_end_offsets.get(r, 0) for r in self.replicas if r != self.broker_id
        }
        self.high_watermark = min(max(self.high_watermark, self._isr_min_end_offset()), self.log.log_end_offset)

    # --- produce ----------------------------------------------------------------------

    def append_as_leader(self, data, acks: int, accept_unknown_producer: bool = False) -> AppendInfo | int:
        """Validate and append a producer's batches.

        Returns:
            The append's info, or for an idempotent batch already appended (a retry) the
            offset it was appended at.

        Raises:
            SequenceGap: an idempotent batch came before an earlier one of its producer (or
                from a producer not known yet, unless ``accept_unknown_producer``).
            InvalidRequiredAcksError: ``acks`` not in (0, 1, -1).
            NotLeaderOrFollowerError: this replica does not lead.
            NotEnoughReplicasError: acks=-1 with fewer in-sync replicas than required.
            OutOfOrderSequenceError, InvalidProducerEpochError: a stale or broken producer.
            CorruptRecordError, RecordTooLargeError, StorageError: from the log.
        """
        if acks not in (0, 1, -1):
            raise InvalidRequiredAcksError(f"acks must be 0, 1 or -1 (all), got {acks!r}")
        self._require_leader()
        if acks == -1 and len(self.isr) < self.config.min_insync_replicas:
            raise NotEnoughReplicasError(
                f"{self.topic}-{self.partition}: ISR {list(self.isr)} is smaller than "
                f"min.insync.replicas={self.config.min_insync_replicas}"
            )
        duplicate = self._check_sequence(data, accept_unknown_producer)
        if duplicate is not None:
            return duplicate
        info = self.log.append_as_leader(data, self.leader_epoch)
        for header in info.batches:
            self.producers.update(header)
        self._advance_high_watermark()
        return info

    def _check_sequence(self, data, accept_unknown_producer: bool) -> int | None:
        """The offset of a duplicate, None to append; raises SequenceGap to wait."""
        header = record_batch.parse_header(memoryview(data).cast("B"))
        if header.producer_id == NO_PRODUCER_ID:
            return None
        if header.size != len(data):
            raise InvalidRequestError("an idempotent produce request carries exactly one batch")
        if not self.producers.is_known(header.producer_id) and header.base_sequence > 0 and not accept_unknown_producer:
            raise SequenceGap()
        verdict, offset = self.producers.check(header)
        if verdict is Verdict.GAP:
            raise SequenceGap()
        return offset if verdict is Verdict.DUPLICATE else None

    # --- fetch ------------------------------------------------------------------------

    def read(
        self, offset: int, max_bytes: int, replica_id: int = CONSUMER_REPLICA_ID, current_leader_epoch: int = -1
    ) -> ReadResult:
        """Batches from ``offset``: below the high watermark for consumers, below the log
        end offset for followers (whose fetch offset reports their log end offset).

        Raises:
            NotLeaderOrFollowerError, FencedLeaderEpochError, UnknownLeaderEpochError,
            OffsetOutOfRangeError.
        """
        self._check_epoch(current_leader_epoch)
        self._require_leader()
        if replica_id != CONSUMER_REPLICA_ID:
            if replica_id not in self.follower_end_offsets:
                raise NotLeaderOrFollowerError(f"broker {replica_id} is not a replica of {self.topic}-{self.partition}")
            if offset > self.log.log_end_offset:
                raise OffsetOutOfRangeError(f"follower {replica_id} fetch offset {offset} is past the log end")
            self.follower_end_offsets[replica_id] = offset
            self._advance_high_watermark()
            limit = None
        else:
            limit = self.high_watermark
            if offset > limit and offset <= self.log.log_end_offset:
                # Offsets above the HW exist but are not yet committed: nothing to read yet.
                return ReadResult(b"", self.high_watermark, self.log.log_start_offset, self.log.log_end_offset)
        data = self.log.read(offset, max_bytes, max_offset=limit)
        return ReadResult(data, self.high_watermark, self.log.log_start_offset, self.log.log_end_offset)

    def list_offset(self, timestamp_ms: int) -> tuple[int, int]:
        """``(offset, timestamp_ms)`` for EARLIEST / LATEST or the first record at or after
        ``timestamp_ms``; ``(-1, -1)`` when no committed record is that recent."""
        self._require_leader()
        if timestamp_ms == EARLIEST_TIMESTAMP:
            return self.log.log_start_offset, -1
        if timestamp_ms == LATEST_TIMESTAMP:
            return self.high_watermark, -1
        found = self.log.offsets_for_time(timestamp_ms)
        if found is None or found.offset >= self.high_watermark:
            return -1, -1
        return found.offset, found.timestamp_ms

    # --- internals --------------------------------------------------------------------

    def _require_leader(self) -> None:
        if not self.is_leader:
            raise NotLeaderOrFollowerError(
                f"broker {self.broker_id} does not lead {self.topic}-{self.partition} (leader {self.leader})"
            )

    def _check_epoch(self, current_leader_epoch: int) -> None:
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return
        if current_leader_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(
                f"{self.topic}-{self.partition}: epoch {current_leader_epoch} is older than {self.leader_epoch}"
            )
        raise UnknownLeaderEpochError(
            f"{self.topic}-{self.partition}: epoch {current_leader_epoch} is newer than {self.leader_epoch}"
        )

    def _isr_min_end_offset(self) -> int:
        ends = [self.log.log_end_offset]
        ends += [self.follower_end_offsets.get(r, 0) for r in self.isr if r != self.broker_id]
        return min(ends)

    def _advance_high_watermark(self) -> bool:
        """Move the HW up to what every ISR member has; True if it moved."""
        candidate = self._isr_min_end_offset()
        if candidate > self.high_watermark:
            self.high_watermark = candidate
            return True
        return False
