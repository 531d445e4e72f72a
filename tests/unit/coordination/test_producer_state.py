"""Idempotent-producer sequence rules: in order, duplicates, gaps, stale epochs (no Ray)."""

from __future__ import annotations

import pytest

from raylog.common.record_batch import SEQUENCE_MODULUS, BatchHeader, increment_sequence
from raylog.coordination.producer_state import ProducerStateManager, Verdict, sequence_after
from raylog.errors import InvalidProducerEpochError, OutOfOrderSequenceError

TOP = SEQUENCE_MODULUS - 1  # the largest sequence: 2**31 - 1


def header(producer_id=7, epoch=0, sequence=0, count=10, offset=0, timestamp=0) -> BatchHeader:
    return BatchHeader(offset, 100, 0, 1, 0, 0, count - 1, 0, timestamp, producer_id, epoch, sequence, count)


def test_sequences_append_in_order_and_detect_gaps():
    """The next sequence appends; a later one is a gap until the earlier one arrives."""
    state = ProducerStateManager()
    assert state.check(header(sequence=0)) == (Verdict.APPEND, None)
    state.update(header(sequence=0, offset=0), 0)
    assert state.check(header(sequence=20)) == (Verdict.GAP, None)
    assert state.check(header(sequence=10)) == (Verdict.APPEND, None)
    state.update(header(sequence=10, offset=10), 0)
    assert state.check(header(sequence=20)) == (Verdict.APPEND, None)


def test_recent_retries_are_duplicates_with_their_offset():
    """A batch among the last five appended is answered with its original offset."""
    state = ProducerStateManager()
    for i in range(7):
        state.update(header(sequence=i * 10, offset=100 + i * 10), 0)
    verdict, original = state.check(header(sequence=60))
    assert verdict is Verdict.DUPLICATE and (original.first_offset, original.last_offset) == (160, 169)
    assert state.check(header(sequence=20))[1].first_offset == 120
    with pytest.raises(OutOfOrderSequenceError):
        state.check(header(sequence=10))  # too old to remember
    with pytest.raises(OutOfOrderSequenceError):
        state.check(header(sequence=65, count=3))  # overlaps without matching


def test_epochs_fence_zombies_and_restart_sequences():
    """An older epoch is fenced; a newer epoch must start at sequence 0."""
    state = ProducerStateManager()
    state.update(header(epoch=1, sequence=0), 0)
    with pytest.raises(InvalidProducerEpochError):
        state.check(header(epoch=0, sequence=10))
    with pytest.raises(OutOfOrderSequenceError):
        state.check(header(epoch=2, sequence=10))
    assert state.check(header(epoch=2, sequence=0)) == (Verdict.APPEND, None)


def test_a_batch_that_overtakes_the_first_of_a_new_epoch_waits_for_it():
    """A transaction starts a new epoch at sequence 0; its second batch may reach the leader
    first (pipelined calls run out of order): it waits (a gap), it does not fail."""
    state = ProducerStateManager()
    state.update(header(epoch=0, sequence=0), 0)
    assert state.check(header(epoch=1, sequence=10), first_unacked_sequence=0) == (Verdict.GAP, None)
    assert state.check(header(epoch=1, sequence=0), first_unacked_sequence=0) == (Verdict.APPEND, None)
    with pytest.raises(OutOfOrderSequenceError):
        state.check(header(epoch=1, sequence=10))  # a client that delivers in order says nothing


def test_replayed_log_headers_continue_each_producers_sequence():
    """State replayed from the log's batch headers continues each producer's sequence."""
    state = ProducerStateManager()
    state.apply([header(producer_id=1, sequence=0), header(producer_id=-1), header(producer_id=1, sequence=10)], 0)
    assert len(state) == 1
    assert state.check(header(producer_id=1, sequence=20)) == (Verdict.APPEND, None)


def test_sequence_arithmetic_wraps_at_two_to_the_31():
    """As Kafka's: the sequence after 2**31 - 1 is 0, and "after" compares modulo 2**31."""
    assert increment_sequence(TOP, 1) == 0 and increment_sequence(TOP - 1, 5) == 3
    assert sequence_after(0, TOP) and sequence_after(3, TOP - 2) and not sequence_after(TOP, 0)
    assert not sequence_after(5, 5) and not sequence_after(0, 2**30)


def test_sequences_continue_duplicate_and_gap_across_the_wrap():
    """A producer's sequence continues from 2**31 - 1 to 0; a batch that spans the wrap is
    recognised when retried; gaps and stale batches are told apart across the wrap."""
    state = ProducerStateManager()
    state.update(header(sequence=TOP - 9, count=10, offset=0), 0)  # ends at 2**31 - 1
    assert state.check(header(sequence=0, count=4)) == (Verdict.APPEND, None)
    assert state.check(header(sequence=5, count=4)) == (Verdict.GAP, None)
    with pytest.raises(OutOfOrderSequenceError):
        state.check(header(sequence=TOP - 3, count=2))
    state.update(header(sequence=0, count=4, offset=10), 0)
    assert state.check(header(sequence=4, count=4)) == (Verdict.APPEND, None)
    spanning = ProducerStateManager()
    spanning.update(header(sequence=TOP - 1, count=4, offset=50), 0)  # TOP-1, TOP, 0, 1
    verdict, original = spanning.check(header(sequence=TOP - 1, count=4))
    assert verdict is Verdict.DUPLICATE and original.last_sequence == 1 and original.first_offset == 50
    assert spanning.check(header(sequence=2, count=1)) == (Verdict.APPEND, None)


def test_a_producer_not_known_starts_at_its_first_unacknowledged_sequence():
    """A leader without a producer's state appends the batch at the producer's first
    unacknowledged sequence (everything before was acknowledged) and holds later ones back
    (an earlier batch is still on its way); without that word it takes any sequence (Kafka)."""
    state = ProducerStateManager()
    assert state.check(header(sequence=20), first_unacked_sequence=10) == (Verdict.GAP, None)
    assert state.check(header(sequence=10), first_unacked_sequence=10) == (Verdict.APPEND, None)
    assert state.check(header(sequence=TOP), first_unacked_sequence=TOP) == (Verdict.APPEND, None)
    assert state.check(header(sequence=3), first_unacked_sequence=TOP - 5) == (Verdict.GAP, None)
    assert state.check(header(sequence=20)) == (Verdict.APPEND, None)
    with pytest.raises(OutOfOrderSequenceError):
        state.check(header(sequence=5), first_unacked_sequence=10)  # not a sequence it has yet to hear of


def test_a_leader_whose_state_is_behind_the_acknowledged_batches_takes_the_first_unacknowledged():
    """If acknowledged batches are missing here (a log cut by an unclean election), the
    first unacknowledged batch appends; a batch behind it still waits for it."""
    state = ProducerStateManager()
    state.update(header(sequence=0, offset=0), 0)  # knows 0..9; 10..29 were acknowledged elsewhere
    assert state.check(header(sequence=40), first_unacked_sequence=30) == (Verdict.GAP, None)
    assert state.check(header(sequence=30), first_unacked_sequence=30) == (Verdict.APPEND, None)
    assert state.check(header(sequence=10), first_unacked_sequence=10) == (Verdict.APPEND, None)


def test_idle_producers_expire_by_when_their_last_batch_was_appended():
    """producer.id.expiration.ms after this replica appended a producer's last batch, by its
    own clock (not the records' timestamps: a backfill writes old ones), it is forgotten."""
    state = ProducerStateManager()
    state.update(header(producer_id=1, timestamp=9_000), now_ms=1_000)
    state.update(header(producer_id=2, timestamp=0), now_ms=1_000)
    state.update(header(producer_id=2, sequence=10, offset=10, timestamp=0), now_ms=5_000)
    assert state.remove_expired(now_ms=10_999, expiration_ms=10_000) == []
    assert state.remove_expired(now_ms=11_000, expiration_ms=10_000) == [1]
    assert state.last_offsets() == {2: 19}


def test_snapshot_rows_restore_the_same_state():
    """rows() then load() gives back every producer's epoch and retained batches."""
    state = ProducerStateManager()
    for i in range(7):
        state.update(header(producer_id=3, epoch=2, sequence=i * 10, offset=i * 10, timestamp=i), 0)
    state.update(header(producer_id=4, sequence=0, offset=70), 0)
    restored = ProducerStateManager()
    restored.load(state.rows())
    assert restored.rows() == state.rows() and len(state.rows()) == 6
    assert restored.check(header(producer_id=3, epoch=2, sequence=30))[1].first_offset == 30
    with pytest.raises(InvalidProducerEpochError):
        restored.check(header(producer_id=3, epoch=1, sequence=70))
