"""The log cleaner (compaction): what survives, when, crash safety, and reads of a compacted log (no Ray)."""

from __future__ import annotations

import os
import pickle
import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raylog import errors
from raylog.common import compression
from raylog.common import record_batch as rb
from raylog.config import NEVER, LogConfig
from raylog.coordination.producer_state import ProducerStateManager
from raylog.storage import cleaner
from raylog.storage.log import Log
from raylog.storage.segment import file_name

DAY_MS = 24 * 3600 * 1000
#: Small segments (a few batches each) so that a test log spans many.
COMPACT = {"cleanup.policy": "compact", "segment.bytes": 1024, "index.interval.bytes": 256}


def keyed(pairs, now_ms, **options) -> bytes:
    """A batch of ``(key, value)`` pairs; a None value is a tombstone."""
    return rb.build([v for _, v in pairs], keys=[k for k, _ in pairs], now_ms=now_ms, **options)


def write(log: Log, pairs, now_ms: int, per_batch: int = 3) -> list[tuple[int, bytes, bytes | None]]:
    """Append ``pairs`` in batches of ``per_batch``; returns ``(offset, key, value)`` per record."""
    written = []
    for i in range(0, len(pairs), per_batch):
        chunk = pairs[i : i + per_batch]
        info = log.append_as_leader(keyed(chunk, now_ms), leader_epoch=0)
        written += [(info.first_offset + j, k, v) for j, (k, v) in enumerate(chunk)]
    return written


def records(log: Log, start: int | None = None) -> list[tuple[int, bytes, bytes | None]]:
    """Every ``(offset, key, value)`` readable from ``start`` to the log end, as a consumer
    reads: from each batch's next offset on."""
    offset = log.log_start_offset if start is None else start
    out = []
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        assert data, f"empty read at {offset} below the log end {log.log_end_offset}"
        table = rb.decode_table(data, min_offset=offset)
        out += zip(*(table.column(c).to_pylist() for c in ("offset", "key", "value")), strict=True)
        offset = list(rb.iter_headers(data))[-1][1].next_offset
    return out


def fold(rows) -> dict:
    """key -> latest value (None: deleted), as a consumer restoring state computes it."""
    state = {}
    for _, key, value in rows:
        state[key] = value
    return state


def live(state: dict) -> dict:
    return {k: v for k, v in state.items() if v is not None}


def updates(n_keys: int, n_records: int, seed: int = 0, tombstone_every: int = 0) -> list[tuple[bytes, bytes | None]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n_records):
        key = b"key-%03d" % rng.integers(n_keys)
        value = None if tombstone_every and i % tombstone_every == tombstone_every - 1 else b"value-%05d" % i
        out.append((key, value))
    return out


def files(directory) -> dict[str, bytes]:
    return {name: open(os.path.join(directory, name), "rb").read() for name in sorted(os.listdir(directory))}


# ---------------------------------------------------------------------------------------
# What survives


def test_latest_value_per_key_survives_with_its_original_offset(open_log, clock):
    """After cleaning, each key's latest record is there at the offset it was written at, and nothing older."""
    log = open_log(**COMPACT)
    written = write(log, updates(8, 120), clock.now_ms)
    log.roll()
    end = log.log_end_offset
    stats = log.clean(force=True)
    assert stats is not None and stats.records_read == 120 and stats.map_keys == 8
    after = records(log)
    latest = {}
    for offset, key, value in written:
        latest[key] = (offset, key, value)
    assert sorted(after) == sorted(latest.values())
    assert stats.records_kept == 8 and stats.bytes_written < stats.bytes_read
    assert (log.log_start_offset, log.log_end_offset) == (0, end)


def test_cleaning_keeps_batch_ranges_producer_fields_and_codec(open_log, clock):
    """A partly kept batch keeps its base offset, last offset, epoch, producer id/epoch/sequence and codec,
    so the producer's sequence range survives a restart's state rebuild."""
    log = open_log(**COMPACT)
    batch = rb.build(
        [b"a1", b"b1", b"a2", b"c1"],
        keys=[b"a", b"b", b"a", b"c"],
        now_ms=clock.now_ms,
        codec=compression.LZ4,
        producer_id=7,
        producer_epoch=2,
        base_sequence=10,
    )
    log.append_as_leader(batch, leader_epoch=3)
    log.append_as_leader(keyed([(b"c", b"c2")], clock.now_ms), leader_epoch=3)
    log.roll()
    before = [h for _, h in rb.iter_headers(log.read(0, 1 << 20))][0]
    log.clean(force=True)
    data = log.read(0, 1 << 20)
    header = next(h for _, h in rb.iter_headers(data))
    rb.validate(data)
    assert records(log) == [(1, b"b", b"b1"), (2, b"a", b"a2"), (4, b"c", b"c2")]
    assert (header.base_offset, header.last_offset_delta, header.leader_epoch) == (0, 3, 3)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 2, 10)
    assert (header.codec, header.record_count) == (compression.LZ4, 2)
    rebuilt, original = ProducerStateManager(), ProducerStateManager()
    rebuilt.apply([header], 0)
    original.apply([before], 0)
    assert rebuilt.rows() == original.rows() and rebuilt.rows()[0].last_sequence == 13


def test_each_producers_last_batch_keeps_a_record_so_its_state_survives(open_log, clock):
    """A batch that is a known producer's last keeps its last record (and so its header:
    producer id, epoch, sequence range) even when every record in it is obsolete; older
    batches of that producer, and other producers' obsolete batches, go as usual."""
    log = open_log(**COMPACT)

    def idempotent(pid, sequence, pairs):
        return log.append_as_leader(
            keyed(pairs, clock.now_ms, producer_id=pid, producer_epoch=0, base_sequence=sequence), 0
        )

    idempotent(7, 0, [(b"a", b"1")])  # offset 0: not 7's last batch
    last = idempotent(7, 1, [(b"a", b"2"), (b"b", b"2")])  # offsets 1-2: 7's last batch
    idempotent(8, 0, [(b"b", b"x")])  # offset 3: an expired producer's last batch
    log.append_as_leader(keyed([(b"a", b"3"), (b"b", b"3")], clock.now_ms), 0)  # obsoletes all above
    log.roll()
    log.clean(force=True, producer_last_offsets={7: last.last_offset, 9: 99})
    assert records(log) == [(2, b"b", b"2"), (4, b"a", b"3"), (5, b"b", b"3")]
    kept = next(h for _, h in rb.iter_headers(log.read(0, 1 << 20)))
    assert (kept.producer_id, kept.base_sequence, kept.base_offset, kept.last_offset) == (7, 1, 1, 2)
    log.clean(force=True, producer_last_offsets={7: last.last_offset})  # stable: nothing more goes
    assert records(log) == [(2, b"b", b"2"), (4, b"a", b"3"), (5, b"b", b"3")]


def test_log_append_time_batches_keep_their_time(open_log, clock):
    """A LogAppendTime batch rebuilt by the cleaner still reads with the time the log stamped."""
    log = open_log(**COMPACT, message_timestamp_type="LogAppendTime")
    log.append_as_leader(keyed([(b"a", b"1"), (b"b", b"1")], now_ms=5), 0)
    log.append_as_leader(keyed([(b"a", b"2")], now_ms=5), 0)
    log.roll()
    log.clean(force=True)
    table = rb.decode_table(log.read(0, 1 << 20))
    assert table.column("offset").to_pylist() == [1, 2]
    assert set(table.column("timestamp").to_pylist()) == {clock.now_ms}


def test_tombstones_are_kept_then_dropped_after_delete_retention(open_log, clock):
    """A tombstone deletes its key at once and survives delete.retention.ms after it was first cleaned."""
    log = open_log(**COMPACT, delete_retention_ms=DAY_MS)
    write(log, [(b"a", b"1"), (b"b", b"1"), (b"a", None)], clock.now_ms, per_batch=1)
    log.roll()
    stats = log.clean(force=True)
    assert records(log) == [(1, b"b", b"1"), (2, b"a", None)] and stats.tombstones_dropped == 0

    clock.advance(DAY_MS - 1)  # not yet: cleaned a day ago minus a millisecond
    write(log, [(b"c", b"1")], clock.now_ms)
    log.roll()
    assert log.clean(force=True).tombstones_dropped == 0
    assert (2, b"a", None) in records(log)

    clock.advance(1)
    write(log, [(b"d", b"1")], clock.now_ms)
    log.roll()
    stats = log.clean(force=True)
    assert stats.tombstones_dropped == 1
    assert [r[1] for r in records(log)] == [b"b", b"c", b"d"]


def test_a_tombstone_in_the_dirty_section_stays_even_when_retention_is_zero(open_log, clock):
    """delete.retention.ms=0 drops a tombstone only in the round after the one that first cleaned it."""
    log = open_log(**COMPACT, delete_retention_ms=0)
    write(log, [(b"a", b"1"), (b"a", None)], clock.now_ms, per_batch=1)
    log.roll()
    log.clean(force=True)
    assert records(log) == [(1, b"a", None)]
    write(log, [(b"b", b"1")], clock.now_ms)
    log.roll()
    log.clean(force=True)
    assert records(log) == [(2, b"b", b"1")]


def test_records_without_a_key_are_dropped_by_the_cleaner(open_log, clock):
    """Keyless records written before the topic became compacted go at the first clean (as in Kafka)."""
    log = open_log(segment_bytes=1024)
    log.append_as_leader(rb.build([b"no key", b"keyed"], keys=[None, b"k"], now_ms=clock.now_ms), 0)
    log.roll()
    log.config = LogConfig.from_properties(COMPACT)  # as Partition.update_config does
    log.append_as_leader(keyed([(b"j", b"1")], clock.now_ms), 0)
    log.clean(force=True)
    assert records(log) == [(1, b"k", b"keyed"), (2, b"j", b"1")]


# ---------------------------------------------------------------------------------------
# What is cleanable, and when


def test_the_active_segment_is_never_touched(open_log, clock):
    """Superseded records in the active segment stay; its files are not rewritten."""
    log = open_log(**COMPACT)
    write(log, updates(2, 12), clock.now_ms)
    log.roll()
    write(log, [(b"key-000", b"x"), (b"key-000", b"y")], clock.now_ms, per_batch=1)
    active = log._segments[-1]
    before = open(active.records.path, "rb").read()
    log.clean(force=True)
    assert log._segments[-1] is active and open(active.records.path, "rb").read() == before
    tail = records(log, active.base_offset)
    assert [v for _, _, v in tail] == [b"x", b"y"]


def test_nothing_is_cleanable_in_a_single_segment_log(open_log, clock):
    """A log that is only its active segment has nothing dirty: clean does nothing."""
    log = open_log(**COMPACT)
    write(log, [(b"a", b"1"), (b"a", b"2")], clock.now_ms)
    assert log.dirty_ratio() == 0.0 and log.clean(force=True) is None


def test_min_compaction_lag_keeps_recent_segments_uncleaned(open_log, clock):
    """Segments whose newest record is younger than min.compaction.lag.ms (and all after them) are not cleaned."""
    log = open_log(**COMPACT, min_compaction_lag_ms=60_000)
    write(log, [(b"a", b"old")] * 3, clock.now_ms - 120_000)
    log.roll()
    write(log, [(b"a", b"new")] * 3, clock.now_ms)
    log.roll()
    write(log, [(b"b", b"1")], clock.now_ms)
    stats = log.clean(force=True)
    assert stats.end_offset == 3
    assert [o for o, _, _ in records(log)] == [2, 3, 4, 5, 6]  # the old segment cleaned within itself
    clock.advance(60_001)
    log.clean(force=True)
    assert [o for o, _, _ in records(log)] == [5, 6]


def test_dirty_ratio_decides_when_to_clean(open_log, clock):
    """Below min.cleanable.dirty.ratio nothing happens; at it, or past max.compaction.lag.ms, a round runs."""
    log = open_log(**COMPACT, min_cleanable_dirty_ratio=0.6, max_compaction_lag_ms=DAY_MS)
    write(log, updates(4, 30, seed=1), clock.now_ms)
    log.roll()
    assert log.dirty_ratio() == 1.0
    assert log.clean() is not None and log.dirty_ratio() == 0.0
    clean_bytes = log.size_bytes - log._segments[-1].size
    write(log, [(b"key-000", b"v" * 40)], clock.now_ms)
    log.roll()
    ratio = log.dirty_ratio()
    assert 0 < ratio < 0.6
    assert ratio == pytest.approx((log.size_bytes - clean_bytes) / log.size_bytes)
    assert log.clean() is None
    clock.advance(DAY_MS + 1)  # the dirty record has waited longer than max.compaction.lag.ms
    assert log.clean() is not None


def test_cleaning_stops_at_max_offset(open_log, clock):
    """Segments ending above max_offset (the high watermark) stay dirty."""
    log = open_log(**COMPACT)
    write(log, [(b"a", b"1")] * 3, clock.now_ms)
    log.roll()
    write(log, [(b"a", b"2")] * 3, clock.now_ms)
    log.roll()
    write(log, [(b"b", b"1")], clock.now_ms)
    assert log.clean(max_offset=5, force=True).end_offset == 3
    assert [o for o, _, _ in records(log)] == [2, 3, 4, 5, 6]


def test_re_cleaning_is_idempotent(open_log, clock):
    """Cleaning a cleaned log again (its checkpoint lost) keeps the same records; rounds reach a fixed
    point where nothing is rewritten."""
    log = open_log(**COMPACT)
    write(log, updates(6, 90, seed=2, tombstone_every=7), clock.now_ms)
    log.roll()
    write(log, [(b"x", b"1")], clock.now_ms)
    log.clean(force=True)
    rows = records(log)
    layouts = []
    for _ in range(4):
        os.unlink(os.path.join(log.dir, cleaner.CHECKPOINT_FILE))  # everything counts as dirty again
        stats = log.clean(force=True)
        assert records(log) == rows
        layouts.append((stats.bytes_written, files(log.dir).items() - {cleaner.CHECKPOINT_FILE: b""}.items()))
    assert layouts[-1][0] == 0
    before = {k: v for k, v in files(log.dir).items() if k != cleaner.CHECKPOINT_FILE}
    os.unlink(os.path.join(log.dir, cleaner.CHECKPOINT_FILE))
    log.clean(force=True)
    assert {k: v for k, v in files(log.dir).items() if k != cleaner.CHECKPOINT_FILE} == before


def test_the_first_segment_stays_when_emptied(open_log, clock):
    """Compaction never moves the log start offset: an emptied first segment stays, empty."""
    log = open_log(**COMPACT)
    big = b"x" * 300
    write(log, [(b"a", big)] * 2, clock.now_ms, per_batch=1)
    log.roll()
    write(log, [(b"a", big)] * 2, clock.now_ms, per_batch=1)  # too big to merge with the first
    log.roll()
    write(log, [(b"b", b"1")], clock.now_ms)
    log.clean(force=True)
    assert log.log_start_offset == 0 and log._segments[0].size == 0
    assert records(log) == [(3, b"a", big), (4, b"b", b"1")]
    assert records(log, 0) == records(log, 2) == records(log, 3)
    log.close()
    reopened = Log.open(log.dir, log.config, clock)
    assert reopened.log_start_offset == 0 and records(reopened) == [(3, b"a", big), (4, b"b", b"1")]


def test_small_cleaned_segments_are_merged(open_log, clock):
    """Consecutive cleaned segments that fit in segment.bytes become one, named by the first base offset."""
    log = open_log(**COMPACT)
    write(log, updates(3, 60, seed=3), clock.now_ms)
    log.roll()
    segments = log.segment_count
    log.clean(force=True)
    assert log.segment_count < segments
    assert all(os.path.exists(os.path.join(log.dir, file_name(s.base_offset, ".log"))) for s in log._segments)


# ---------------------------------------------------------------------------------------
# Reads, time look-ups and replication of a compacted log


def test_reads_at_compacted_away_offsets_return_the_next_batch(open_log, clock):
    """Any offset in [log start, LEO] is readable: a missing one reads as the next that exists."""
    log = open_log(**COMPACT)
    written = write(log, updates(5, 80, seed=4), clock.now_ms)
    log.roll()
    write(log, [(b"tail", b"1")], clock.now_ms)
    log.clean(force=True)
    survivors = records(log)
    offsets = [o for o, _, _ in survivors]
    assert len(survivors) < len(written) + 1
    for offset in range(log.log_end_offset):
        expected = [r for r in survivors if r[0] >= offset]
        assert records(log, offset) == expected, offset
        data = log.read(offset, 1)  # at least one batch, holding a record at or after offset
        first = rb.decode_table(data, min_offset=offset)
        assert first.num_rows == 0 or first.column("offset")[0].as_py() == expected[0][0]
    assert log.read(log.log_end_offset, 1 << 20) == b""
    with pytest.raises(errors.OffsetOutOfRangeError):
        log.read(log.log_end_offset + 1, 1 << 20)
    assert offsets == sorted(set(offsets))


def test_offsets_for_time_skips_compacted_records(open_log, clock):
    """offsets_for_time returns the first surviving record at or after the time."""
    log = open_log(**COMPACT)
    t0 = clock.now_ms - 1000
    for i in range(12):
        log.append_as_leader(keyed([(b"k%d" % (i % 3), b"%d" % i)], t0 + i * 10), 0)
    log.roll()
    write(log, [(b"z", b"1")], clock.now_ms)
    log.clean(force=True)
    survivors = {o: None for o, _, _ in records(log)}
    assert sorted(survivors) == [9, 10, 11, 12]
    for i in range(12):
        found = log.offsets_for_time(t0 + i * 10)
        expected = min(o for o in survivors if o >= i)
        assert found.offset == expected
        assert found.timestamp_ms == (t0 + expected * 10 if expected < 12 else clock.now_ms)
    assert log.offsets_for_time(clock.now_ms + 1) is None


def test_a_follower_copies_a_compacted_leader(tmp_path, clock):
    """A follower fetching from a compacted leader copies its batches, gaps and all, and ends at its LEO."""
    config = LogConfig.from_properties(COMPACT)
    leader = Log.open(str(tmp_path / "leader"), config, clock)
    follower = Log.open(str(tmp_path / "follower"), config, clock)
    write(leader, updates(4, 40, seed=5, tombstone_every=9), clock.now_ms)
    leader.roll()
    write(follower, [], clock.now_ms)
    offset = 0
    while offset < 20:  # the follower copied the first half before the leader compacted
        data = leader.read(offset, 600)
        follower.append_as_follower(data)
        offset = follower.log_end_offset
    write(leader, [(b"key-001", b"last")], clock.now_ms)
    leader.clean(force=True)
    while follower.log_end_offset < leader.log_end_offset:
        follower.append_as_follower(leader.read(follower.log_end_offset, 600))
    assert follower.log_end_offset == leader.log_end_offset
    assert live(fold(records(follower))) == live(fold(records(leader)))
    follower.roll()
    follower.clean(force=True)  # followers compact on their own
    assert live(fold(records(follower))) == live(fold(records(leader)))


def test_truncation_moves_the_checkpoint_back(open_log, clock):
    """Records written again after a truncation below the cleaned section count as dirty."""
    log = open_log(**COMPACT)
    write(log, updates(3, 30, seed=6), clock.now_ms)
    log.roll()
    write(log, [(b"t", b"1")], clock.now_ms)
    log.clean(force=True)
    assert cleaner.read_checkpoint(log.dir).first_dirty_offset == 30
    log.truncate_to(20)
    checkpoint = cleaner.read_checkpoint(log.dir)
    assert checkpoint.first_dirty_offset <= 20 and all(end <= 20 for end, _ in checkpoint.rounds)
    log.truncate_fully_and_start_at(5)
    checkpoint = cleaner.read_checkpoint(log.dir)
    assert checkpoint.first_dirty_offset <= 5 and all(end <= 5 for end, _ in checkpoint.rounds)
    write(log, [(b"t", b"2"), (b"t", b"3")], clock.now_ms, per_batch=1)
    log.roll()
    write(log, [(b"u", b"1")], clock.now_ms)
    assert log.dirty_ratio() == 1.0 and log.clean().first_dirty_offset == 5
    assert records(log) == [(6, b"t", b"3"), (7, b"u", b"1")]


# ---------------------------------------------------------------------------------------
# Policy and producers


def test_a_compacted_log_refuses_records_without_a_key(open_log, clock):
    """INVALID_RECORD (87) for a keyless record; nothing of the request is appended; keyed appends go on."""
    log = open_log(**COMPACT)
    log.append_as_leader(keyed([(b"a", b"1")], clock.now_ms), 0)
    for bad, at_fault in (
        (rb.build([b"v"], now_ms=clock.now_ms), [0]),
        (rb.build([b"v", b"w", b"x", b"y"], keys=[b"k", None, b"k", None], now_ms=clock.now_ms), [1, 3]),
        (keyed([(b"b", b"1")], clock.now_ms) + rb.build([b"v"], now_ms=clock.now_ms), [0]),
    ):
        with pytest.raises(errors.InvalidRecordError, match="without key") as raised:
            log.append_as_leader(bad, 0)
        assert raised.value.code == 87 and raised.value.name == "INVALID_RECORD"
        # KIP-467: the records at fault by their index in the batch, also across processes.
        again = pickle.loads(pickle.dumps(raised.value))
        assert [i for i, _ in again.record_errors] == at_fault and str(again) == str(raised.value)
    assert log.log_end_offset == 1
    log.append_as_leader(keyed([(b"a", None)], clock.now_ms), 0)  # a tombstone has a key
    assert records(log) == [(0, b"a", b"1"), (1, b"a", None)]
    plain = Log.open(log.dir + "-plain", LogConfig(), clock)
    plain.append_as_leader(rb.build([b"v"], now_ms=clock.now_ms), 0)


def test_a_producer_batch_with_offset_gaps_is_refused(open_log, clock):
    """Only the cleaner makes gaps: a producer's batch must number its records densely."""
    log = open_log()
    gapped = rb.build_arrow(
        rb.pa.array([b"a", b"b"]), rb.pa.array([b"k", b"k"]), now_ms=1, offset_deltas=np.array([0, 2])
    )
    with pytest.raises(errors.InvalidRecordError):
        log.append_as_leader(gapped, 0)
    assert log.log_end_offset == 0


def test_compact_alone_disables_time_and_size_retention(open_log, clock):
    """cleanup.policy=compact: retention deletes nothing; compact,delete: both apply."""
    for policy, survives in (("compact", True), ("compact,delete", False), ("delete", False)):
        log = open_log(segment_bytes=1024, retention_ms=1000, cleanup_policy=policy)
        log.truncate_fully_and_start_at(0)
        write(log, [(b"a", b"1")] * 6, clock.now_ms - 5000)
        log.roll()
        write(log, [(b"b", b"1")], clock.now_ms)
        deleted = log.apply_retention(log.log_end_offset)
        assert (deleted == []) == survives, policy


@pytest.mark.parametrize(
    "properties",
    [
        {"cleanup.policy": "compaction"},
        {"cleanup.policy": "compact,compact"},
        {"cleanup.policy": ""},
        {"min.cleanable.dirty.ratio": "1.5"},
        {"min.cleanable.dirty.ratio": "-0.1"},
        {"min.cleanable.dirty.ratio": "half"},
        {"min.cleanable.dirty.ratio": True},
        {"delete.retention.ms": -1},
        {"min.compaction.lag.ms": -1},
        {"max.compaction.lag.ms": 0},
        {"min.compaction.lag.ms": 10, "max.compaction.lag.ms": 5},
    ],
)
def test_bad_compaction_configs_are_refused(properties):
    """Out-of-range or mistyped compaction settings raise InvalidConfigError."""
    with pytest.raises(errors.InvalidConfigError):
        LogConfig.from_properties(properties)


def test_compaction_config_names_and_defaults():
    """Kafka's names and defaults; both orders of the two policies."""
    config = LogConfig()
    assert (config.cleanup_policy, config.min_cleanable_dirty_ratio, config.delete_retention_ms) == (
        "delete",
        0.5,
        86_400_000,
    )
    assert (config.min_compaction_lag_ms, config.max_compaction_lag_ms) == (0, NEVER)
    assert (config.compact, config.delete) == (False, True)
    for policy in ("compact,delete", "delete,compact", "delete, compact"):
        both = LogConfig.from_properties({"cleanup.policy": policy, "min.cleanable.dirty.ratio": "0.25"})
        assert both.compact and both.delete and both.min_cleanable_dirty_ratio == 0.25
        assert LogConfig.from_properties(both.to_properties()) == both
    assert not LogConfig.from_properties({"cleanup.policy": "compact"}).delete


# ---------------------------------------------------------------------------------------
# Crash safety


class Crash(Exception):
    """Raised in place of a file-system step: the process 'died' there."""


def compacted_log(directory: str, clock) -> tuple[Log, list]:
    """A log cleaned once a day ago and written on since: its next round merges small
    segments, rebuilds partly kept batches, drops emptied segments and expired tombstones."""
    log = Log.open(directory, LogConfig.from_properties(COMPACT), clock)
    written = []
    for i in range(4):  # small segments, each keeping one record of three
        written += write(log, [(b"s%02d" % i, b"%d" % j) for j in range(3)], clock.now_ms)
        log.roll()
    written += write(log, updates(6, 40, seed=7, tombstone_every=11), clock.now_ms)
    written += write(log, [(b"gone", b"1"), (b"gone", None)], clock.now_ms)  # expires by the next round
    log.roll()
    log.clean(force=True)
    clock.advance(DAY_MS)
    for i in range(4, 8):
        written += write(log, [(b"s%02d" % i, b"%d" % j) for j in range(3)], clock.now_ms)
        log.roll()
    written += write(log, updates(8, 30, seed=8, tombstone_every=5), clock.now_ms)
    log.roll()
    written += write(log, [(b"key-000", b"tail")], clock.now_ms)
    log.flush()
    return log, written


def check_consistent(log: Log, written: list, cleaned_rows: list) -> None:
    """What a reopened log reads: original records at their offsets, rising, every record the
    clean keeps, and the same live state as the uncleaned log."""
    rows = records(log)
    originals = {o: (o, k, v) for o, k, v in written}
    assert all(originals[r[0]] == r for r in rows)
    offsets = [o for o, _, _ in rows]
    assert offsets == sorted(set(offsets))
    assert set(cleaned_rows) <= set(rows)
    assert live(fold(rows)) == live(fold(written))  # (an expired tombstone may be gone)
    assert log.log_end_offset == written[-1][0] + 1 and log.log_start_offset == 0


def test_crash_at_every_step_of_a_round_recovers(tmp_path, clock, monkeypatch):
    """Whatever rename or unlink a crash interrupts, reopening gives a consistent log with the same content."""
    # A process crash, not a power cut: what was written stays, so fsync only costs time here.
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    monkeypatch.setattr(os, "fdatasync", lambda fd: None)
    pristine = str(tmp_path / "pristine")
    log, written = compacted_log(pristine, clock)
    log.close()
    reference = str(tmp_path / "reference")
    shutil.copytree(pristine, reference)
    log = Log.open(reference, LogConfig.from_properties(COMPACT), clock)
    steps = []
    real_replace, real_unlink = os.replace, os.unlink
    monkeypatch.setattr(os, "replace", lambda a, b: (steps.append(("replace", a)), real_replace(a, b)))
    monkeypatch.setattr(os, "unlink", lambda a: (steps.append(("unlink", a)), real_unlink(a)))
    stats = log.clean(force=True)
    monkeypatch.setattr(os, "replace", real_replace)
    monkeypatch.setattr(os, "unlink", real_unlink)
    cleaned_rows = records(log)
    # The round merged groups, dropped segments and expired tombstones.
    assert len(steps) > 10 and stats.segments_after < stats.segments_before and stats.tombstones_dropped

    for crash_at in range(len(steps)):
        directory = str(tmp_path / f"crash-{crash_at}")
        shutil.copytree(pristine, directory)
        log = Log.open(directory, LogConfig.from_properties(COMPACT), clock)
        count = [0]

        def step(real, *args, count=count, crash_at=crash_at):
            if count[0] == crash_at:
                raise Crash()
            count[0] += 1
            return real(*args)

        monkeypatch.setattr(os, "replace", lambda a, b, step=step: step(real_replace, a, b))
        monkeypatch.setattr(os, "unlink", lambda a, step=step: step(real_unlink, a))
        with pytest.raises(Crash):
            log.clean(force=True)
        monkeypatch.setattr(os, "replace", real_replace)
        monkeypatch.setattr(os, "unlink", real_unlink)
        reopened = Log.open(directory, LogConfig.from_properties(COMPACT), clock)
        leftovers = [n for n in os.listdir(directory) if n.endswith((".cleaned", ".swap"))]
        assert leftovers == [], (crash_at, steps[crash_at], leftovers)
        check_consistent(reopened, written, cleaned_rows)
        reopened.clean(force=True)  # and the next round finishes the job
        assert records(reopened) == cleaned_rows, (crash_at, steps[crash_at])


def test_leftover_cleaned_files_are_deleted_on_open(tmp_path, clock):
    """A crash while a .cleaned segment was being written leaves partial files: opening deletes them."""
    directory = str(tmp_path / "log")
    log, written = compacted_log(directory, clock)
    log.close()
    with open(os.path.join(directory, file_name(0, ".log.cleaned")), "wb") as f:
        f.write(open(os.path.join(directory, file_name(0, ".log")), "rb").read()[:100])
    open(os.path.join(directory, file_name(0, ".index.cleaned")), "wb").close()
    reopened = Log.open(directory, LogConfig.from_properties(COMPACT), clock)
    assert not [n for n in os.listdir(directory) if n.endswith(".cleaned")]
    check_consistent(reopened, written, records(reopened))


def test_a_swap_with_its_old_segments_still_there_is_completed(tmp_path, clock):
    """A .swap segment replaces every old segment it covers, also when none of them was deleted yet."""
    directory = str(tmp_path / "log")
    log, written = compacted_log(directory, clock)
    log.close()
    clean_copy = str(tmp_path / "cleaned")
    shutil.copytree(directory, clean_copy)
    cleaned = Log.open(clean_copy, LogConfig.from_properties(COMPACT), clock)
    cleaned.clean(force=True)
    rows = records(cleaned)
    old = [int(n[:20]) for n in os.listdir(directory) if n.endswith(".log")]
    # A merged group: its swap replaces several old segments.
    swapped = max(cleaned._segments[:-1], key=lambda s: sum(s.base_offset <= b < s.next_offset for b in old))
    assert sum(swapped.base_offset <= b < swapped.next_offset for b in old) > 1
    for suffix in (".log", ".index", ".timeindex"):
        name = file_name(swapped.base_offset, suffix)
        shutil.copy(os.path.join(clean_copy, name), os.path.join(directory, name + ".swap"))
    reopened = Log.open(directory, LogConfig.from_properties(COMPACT), clock)
    assert len(old) > reopened.segment_count
    in_swap = [r for r in rows if swapped.base_offset <= r[0] < swapped.next_offset]
    check_consistent(reopened, written, in_swap)
    assert [r for r in records(reopened) if swapped.base_offset <= r[0] < swapped.next_offset] == in_swap


# ---------------------------------------------------------------------------------------
# The property: cleaning never changes what a consumer restores


OPS = st.lists(
    st.tuples(
        st.lists(st.tuples(st.integers(0, 7), st.booleans()), min_size=1, max_size=6),  # a batch: (key, tombstone?)
        st.sampled_from(["append", "append", "roll", "clean", "wait"]),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS, retention_ms=st.sampled_from([0, 1000, DAY_MS]))
def test_property_cleaning_keeps_the_fold_and_the_offsets(tmp_path_factory, ops, retention_ms):
    """Random keyed writes, tombstones, rolls, cleans and waits: the live key -> value map equals the
    uncleaned fold, surviving records are the originals at their offsets, offsets rise strictly,
    and the map survives a reopen."""
    from tests.unit.conftest import FakeClock

    clock = FakeClock()
    directory = str(tmp_path_factory.mktemp("prop") / "log")
    config = LogConfig.from_properties({**COMPACT, "delete.retention.ms": retention_ms})
    log = Log.open(directory, config, clock)
    written = []
    serial = 0
    for batch, op in ops:
        pairs = []
        for key, tombstone in batch:
            pairs.append((b"k%d" % key, None if tombstone else b"v%d" % serial))
            serial += 1
        written += write(log, pairs, clock.now_ms, per_batch=len(pairs))
        if op == "roll":
            log.roll()
        elif op == "clean":
            log.clean(force=True)
        elif op == "wait":
            clock.advance(600)
    log.roll()
    log.clean(force=True)
    rows = records(log)
    originals = {o: (o, k, v) for o, k, v in written}
    assert all(originals[r[0]] == r for r in rows)
    offsets = [r[0] for r in rows]
    assert offsets == sorted(set(offsets))
    assert live(fold(rows)) == live(fold(written))
    latest = {k: o for o, k, _ in written}
    assert all(o in set(offsets) for k, o in latest.items() if originals[o][2] is not None)
    assert log.log_end_offset == written[-1][0] + 1
    log.close()
    assert records(Log.open(directory, config, clock)) == rows


def test_aborted_records_never_shadow_committed_ones_and_markers_stay(open_log, clock):
    """A key written, then overwritten in a transaction that aborted: cleaning drops the
    aborted records (they are not the key's latest value) and keeps the committed value and
    the transaction's marker, so a read_committed reader restores the committed state."""
    from raylog.storage.txn_index import AbortedTxn

    log = open_log(**COMPACT)
    write(log, [(b"k%d" % i, b"committed-%d" % i) for i in range(6)], clock.now_ms)
    txn = {"producer_id": 7, "producer_epoch": 0, "base_sequence": 0, "transactional": True}
    aborted = log.append_as_leader(keyed([(b"k0", b"aborted"), (b"k1", b"aborted")], clock.now_ms, **txn), 0)
    marker = log.append_as_leader(rb.build_marker(7, 1, commit=False, coordinator_epoch=0), 0)
    write(log, [(b"k5", b"later")], clock.now_ms)
    log.roll()
    log.clean(force=True, aborted=[AbortedTxn(7, aborted.first_offset, marker.first_offset)])
    assert fold(records(log)) == {**{b"k%d" % i: b"committed-%d" % i for i in range(5)}, b"k5": b"later"}
    headers = [h for _, h in rb.iter_headers(log.read(0, 1 << 20))]
    while headers[-1].next_offset < log.log_end_offset:
        headers += [h for _, h in rb.iter_headers(log.read(headers[-1].next_offset, 1 << 20))]
    assert any(h.attributes & rb.CONTROL and h.base_offset == marker.first_offset for h in headers)
    assert not any(h.base_offset == aborted.first_offset for h in headers)
