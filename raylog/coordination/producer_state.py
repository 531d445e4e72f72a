"""Idempotent-producer state of one partition leader (Kafka's ProducerStateManager).

Every batch from an idempotent producer carries ``producer_id``, ``producer_epoch`` and
``base_sequence`` (the sequence number of its first record; sequences count records per
producer and partition from 0). The leader appends a producer's batches strictly in
sequence order, which is what keeps a partition in send order even though Ray may run
pipelined calls to an async actor out of order:

- ``APPEND``: the batch continues the sequence (or comes from a producer not seen yet);
- ``DUPLICATE``: the batch is one of the last ``RETAINED_BATCHES`` appended (a retry whose
  first attempt succeeded): answer with its original offset, append nothing;
- ``GAP``: an earlier batch has not arrived yet; the caller waits for it and asks again;
- ``OutOfOrderSequenceError`` / ``InvalidProducerEpochError``: a stale or broken producer.

State is rebuilt from batch headers when a log is opened (:meth:`rebuild`).

Concurrency: single-threaded (the replica actor's event loop).
"""

from __future__ import annotations

import collections
import enum
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..errors import InvalidProducerEpochError, OutOfOrderSequenceError
from ..storage.record_batch import BatchHeader

#: Batches remembered per producer for duplicate detection (Kafka keeps 5, matching the
#: largest in-flight window a producer may use with idempotence).
RETAINED_BATCHES = 5
NO_PRODUCER_ID = -1


class Verdict(enum.Enum):
    APPEND = "append"
    DUPLICATE = "duplicate"
    GAP = "gap"


@dataclass
class _Entry:
    epoch: int
    # (first_sequence, last_sequence, first_offset) of the last batches, oldest first.
    batches: collections.deque = field(default_factory=lambda: collections.deque(maxlen=RETAINED_BATCHES))

    @property
    def last_sequence(self) -> int:
        return self.batches[-1][1] if self.batches else -1


class ProducerStateManager:
    """See the module docstring."""

    def __init__(self) -> None:
        self._producers: dict[int, _Entry] = {}

    def check(self, header: BatchHeader) -> tuple[Verdict, int]:
        """What to do with a batch; for DUPLICATE also the offset it was appended at.

        Raises:
            InvalidProducerEpochError: the producer's epoch is older than one already seen.
            OutOfOrderSequenceError: the sequence is behind and not a recent duplicate.
        """
        entry = self._producers.get(header.producer_id)
        if entry is None:
            return Verdict.APPEND, -1
        if header.producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {header.producer_id} epoch {header.producer_epoch} is older than {entry.epoch}"
            )
        if header.producer_epoch > entry.epoch:
            if header.base_sequence != 0:
                raise OutOfOrderSequenceError(
                    f"producer {header.producer_id} began epoch "
                    f"{header.producer_epoch} at sequence {header.base_sequence}, not 0"
                )
            return Verdict.APPEND, -1
        last_sequence = header.base_sequence + header.last_offset_delta
        for first, last, offset in entry.batches:
            if (first, last) == (header.base_sequence, last_sequence):
                return Verdict.DUPLICATE, offset
        expected = entry.last_sequence + 1
        if header.base_sequence == expected:
            return Verdict.APPEND, -1
        if header.base_sequence > expected:
            return Verdict.GAP, -1
        raise OutOfOrderSequenceError(
            f"producer {header.producer_id} sent sequence {header.base_sequence}, expected {expected}"
        )

    def is_known(self, producer_id: int) -> bool:
        return producer_id in self._producers

    def update(self, header: BatchHeader) -> None:
        """Record an appended batch (its header as written, offsets stamped)."""
        if header.producer_id == NO_PRODUCER_ID:
            return
        entry = self._producers.get(header.producer_id)
        if entry is None or header.producer_epoch > entry.epoch:
            entry = self._producers[header.producer_id] = _Entry(header.producer_epoch)
        # Sequences follow offsets within a batch: a compacted batch keeps its last offset
        # delta (and so its sequence range) though it holds fewer records (as in Kafka).
        last_sequence = header.base_sequence + header.last_offset_delta
        entry.batches.append((header.base_sequence, last_sequence, header.base_offset))

    def rebuild(self, headers: Iterable[BatchHeader]) -> None:
        """Replace the state with what ``headers`` (in log order) imply."""
        self._producers.clear()
        for header in headers:
            self.update(header)
