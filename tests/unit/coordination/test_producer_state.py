"""Idempotent-producer sequence rules: in order, duplicates, gaps, stale epochs (no Ray)."""

from __future__ import annotations

import pytest

from raylog.coordination.producer_state import ProducerStateManager, Verdict
from raylog.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from raylog.storage.record_batch import BatchHeader


def header(producer_id=7, epoch=0, sequence=0, count=10, offset=0) -> BatchHeader:
    return BatchHeader(offset, 100, 0, 1, 0, 0, count - 1, 0, 0, producer_id, epoch, sequence, count)


def test_sequences_append_in_order_and_detect_gaps():
    """The next sequence appends; a later one is a gap until the earlier one arrives."""
    state = ProducerStateManager()
    assert state.check(header(sequence=0)) == (Verdict.APPEND, -1)
    state.update(header(sequence=0, offset=0))
    assert state.check(header(sequence=20)) == (Verdict.GAP, -1)
    assert state.check(header(sequence=10)) == (Verdict.APPEND, -1)
    state.update(header(sequence=10, offset=10))
    assert state.check(header(sequence=20)) == (Verdict.APPEND, -1)


def test_recent_retries_are_duplicates_with_their_offset():
    """A batch among the last five appended is answered with its original offset."""
    state = ProducerStateManager()
    for i in range(7):
        state.update(header(sequence=i * 10, offset=100 + i * 10))
    assert state.check(header(sequence=60)) == (Verdict.DUPLICATE, 160)
    assert state.check(header(sequence=20)) == (Verdict.DUPLICATE, 120)
    with pytest.raises(OutOfOrderSequenceError):
        state.check(header(sequence=10))  # too old to remember
    with pytest.raises(OutOfOrderSequenceError):
        state.check(header(sequence=65, count=3))  # overlaps without matching


def test_epochs_fence_zombies_and_restart_sequences():
    """An older epoch is fenced; a newer epoch must start at sequence 0."""
    state = ProducerStateManager()
    state.update(header(epoch=1, sequence=0))
    with pytest.raises(InvalidProducerEpochError):
        state.check(header(epoch=0, sequence=10))
    with pytest.raises(OutOfOrderSequenceError):
        state.check(header(epoch=2, sequence=10))
    assert state.check(header(epoch=2, sequence=0)) == (Verdict.APPEND, -1)


def test_rebuild_from_log_headers():
    """State rebuilt from the log's batch headers continues each producer's sequence."""
    state = ProducerStateManager()
    state.rebuild([header(producer_id=1, sequence=0), header(producer_id=-1), header(producer_id=1, sequence=10)])
    assert state.is_known(1) and not state.is_known(-1)
    assert state.check(header(producer_id=1, sequence=20)) == (Verdict.APPEND, -1)
