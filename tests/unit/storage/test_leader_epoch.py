"""The leader epoch history: assignment, end offsets per epoch (KIP-101), truncation, persistence."""

from __future__ import annotations

from raylog.storage.leader_epoch import UNDEFINED, LeaderEpochCache


def test_end_offsets_per_epoch(tmp_path):
    """An epoch ends where the next begins; the latest ends at the log end offset."""
    cache = LeaderEpochCache(str(tmp_path))
    cache.assign(0, 0)
    cache.assign(2, 100)
    cache.assign(5, 250)
    cache.assign(4, 300)  # older than the latest: ignored
    assert cache.entries == [(0, 0), (2, 100), (5, 250)]
    assert cache.end_offset_for(0, 400) == (0, 100)
    assert cache.end_offset_for(1, 400) == (0, 100)  # epoch 1 never wrote here: epoch 0's end
    assert cache.end_offset_for(5, 400) == (5, 400)
    assert cache.end_offset_for(9, 400) == (5, 400)
    assert cache.end_offset_for(UNDEFINED, 400) == (UNDEFINED, UNDEFINED)


def test_an_epoch_older_than_all_known_ends_where_the_first_known_begins(tmp_path):
    """A leader that never saw the asker's epoch answers with its first epoch's start offset."""
    cache = LeaderEpochCache(str(tmp_path))
    cache.assign(0, 0)
    cache.assign(1, 0)  # epoch 1 starts at the same offset: epoch 0 held nothing, it goes
    assert cache.entries == [(1, 0)]
    assert cache.end_offset_for(0, 10) == (0, 0)


def test_truncation_and_persistence(tmp_path):
    """Epochs starting at or after a cut are forgotten; the file survives a reopen."""
    cache = LeaderEpochCache(str(tmp_path))
    for epoch, offset in ((0, 0), (1, 10), (3, 20)):
        cache.assign(epoch, offset)
    cache.truncate_from_end(15)
    assert cache.entries == [(0, 0), (1, 10)]
    assert LeaderEpochCache(str(tmp_path)).entries == [(0, 0), (1, 10)]
    cache.clear_and_start_at(7, 50)
    assert LeaderEpochCache(str(tmp_path)).latest_epoch == 7
