"""The partition log: append, read, roll, indexes, retention, truncation, flush (no Ray)."""

from __future__ import annotations

import errno
import os
import threading

import pytest

from raylog.common import compression
from raylog.common import record_batch as rb
from raylog.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidRequestError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    StorageError,
)
from raylog.storage.log import LOG_START_OFFSET_FILE, RECOVERY_POINT_FILE, TimestampOffset


def batch(n: int, start: int = 0, size: int = 100, timestamps=None) -> bytes:
    values = [(b"%010d" % (start + i)).ljust(size, b".") for i in range(n)]
    return rb.build(values, timestamps_ms=timestamps, now_ms=1_000)


def read_all(log, start=None, max_bytes=1 << 20):
    """Every record from ``start`` (default: log start) to the log end, as a table."""
    import pyarrow as pa

    offset = log.log_start_offset if start is None else start
    tables = []
    while offset < log.log_end_offset:
        data = log.read(offset, max_bytes)
        table = rb.decode_table(data, min_offset=offset)
        tables.append(table)
        offset = list(rb.iter_headers(data))[-1][1].next_offset
    return pa.concat_tables(tables) if tables else rb.decode_table(b"")


def test_leader_append_assigns_offsets_and_epoch(open_log):
    """Offsets follow on from the log end and each batch carries the leader epoch."""
    log = open_log()
    first = log.append_as_leader(batch(10), leader_epoch=4)
    second = log.append_as_leader(batch(5, 10) + batch(3, 15), leader_epoch=4)
    assert (first.first_offset, first.last_offset, first.record_count) == (0, 9, 10)
    assert (second.first_offset, second.last_offset, second.record_count) == (10, 17, 8)
    assert [h.base_offset for h in second.batches] == [10, 15]
    assert log.log_end_offset == 18
    data = log.read(0, 1 << 20)
    assert [(h.base_offset, h.leader_epoch) for _, h in rb.iter_headers(data)] == [(0, 4), (10, 4), (15, 4)]
    assert read_all(log).column("value").to_pylist()[12].startswith(b"0000000012")


def test_bad_appends_change_nothing(open_log):
    """A corrupt or oversized batch is refused whole: nothing of it reaches the log."""
    log = open_log(max_message_bytes=2_000)
    log.append_as_leader(batch(5), 0)
    good, bad = batch(2), bytearray(batch(2))
    bad[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(good + bytes(bad), 0)
    with pytest.raises(RecordTooLargeError):
        log.append_as_leader(batch(50), 0)
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(b"not a batch at all", 0)
    assert log.log_end_offset == 5
    assert read_all(log).num_rows == 5


def test_full_disk_is_a_storage_error_and_loses_nothing(open_log, monkeypatch):
    """ENOSPC mid-write gives StorageError, the file is cut back, and later appends work."""
    log = open_log()
    log.append_as_leader(batch(5), 0)
    size_before = log.size_bytes

    def full_disk(fd, buffers, offset):
        os.pwrite(fd, bytes(buffers[0])[:7], offset)  # a partial write, then the disk fills
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwritev", full_disk)
    with pytest.raises(StorageError, match="No space"):
        log.append_as_leader(batch(5, 5), 0)
    monkeypatch.undo()
    assert (log.log_end_offset, log.size_bytes) == (5, size_before)
    log.append_as_leader(batch(5, 5), 0)
    assert read_all(log).column("offset").to_pylist() == list(range(10))


def test_read_returns_whole_batches_from_the_one_holding_the_offset(open_log):
    """Reads start at the batch holding the offset, fit max_bytes, yet return >= 1 batch."""
    log = open_log()
    for i in range(10):
        log.append_as_leader(batch(10, i * 10), 0)
    one_batch = len(batch(10))
    data = log.read(25, 2 * one_batch + 5)
    assert [h.base_offset for _, h in rb.iter_headers(data)] == [20, 30]
    assert [h.base_offset for _, h in rb.iter_headers(log.read(25, 1))] == [20]
    assert log.read(100, 1 << 20) == b""
    assert [h.base_offset for _, h in rb.iter_headers(log.read(0, 1 << 20, max_offset=30))] == [0, 10, 20]
    assert log.read(30, 1 << 20, max_offset=30) == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(101, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)


def test_segments_roll_on_size_and_reads_cross_them(open_log):
    """segment.bytes rolls the log; reads continue across segment files."""
    log = open_log(segment_bytes=5_000, index_interval_bytes=500)
    for i in range(40):
        log.append_as_leader(batch(10, i * 10), 0)
    assert log.segment_count > 5
    names = sorted(os.listdir(log.dir))
    assert "00000000000000000000.log" in names and "00000000000000000000.index" in names
    table = read_all(log, max_bytes=3_000)
    assert table.column("offset").to_pylist() == list(range(400))
    for offset in (0, 1, 99, 250, 399):
        assert rb.decode_table(log.read(offset, 1), min_offset=offset).column("offset")[0].as_py() == offset


def test_segments_roll_on_time_and_on_full_index(open_log, clock):
    """segment.ms (by record time) and a full offset index each start a new segment."""
    log = open_log(segment_ms=1_000)
    log.append_as_leader(batch(1, timestamps=[clock()]), 0)
    log.append_as_leader(batch(1, timestamps=[clock() + 500]), 0)
    assert log.segment_count == 1
    log.append_as_leader(batch(1, timestamps=[clock() + 1_001]), 0)
    assert log.segment_count == 2

    log2 = open_log(segment_index_bytes=64, index_interval_bytes=0)  # 8 entries
    before = log2.segment_count
    for i in range(20):
        log2.append_as_leader(batch(1, i), 0)
    assert log2.segment_count > before


def test_offsets_for_time_finds_the_first_record_at_or_after(open_log):
    """offsets_for_time returns the earliest offset whose timestamp >= the target."""
    log = open_log(segment_bytes=3_000, index_interval_bytes=200)
    for i in range(30):
        log.append_as_leader(batch(5, i * 5, timestamps=[10_000 + (i * 5 + j) * 10 for j in range(5)]), 0)
    assert log.offsets_for_time(0).offset == 0
    found = log.offsets_for_time(10_000 + 77 * 10 - 3)
    assert (found.offset, found.timestamp_ms) == (77, 10_770)
    assert log.offsets_for_time(10_000 + 149 * 10).offset == 149
    assert log.offsets_for_time(10_000 + 150 * 10) is None


def test_offsets_for_time_with_out_of_order_timestamps(open_log):
    """Timestamps need not rise: the first record reaching the target wins."""
    log = open_log(index_interval_bytes=0)
    log.append_as_leader(batch(3, 0, timestamps=[50, 10, 20]), 0)
    log.append_as_leader(batch(3, 3, timestamps=[5, 60, 30]), 0)
    assert log.offsets_for_time(55).offset == 4
    assert log.offsets_for_time(15).offset == 0
    assert log.offsets_for_time(61) is None


def test_max_timestamp_offset_is_the_first_record_of_the_largest_timestamp(open_log):
    """ListOffsets MAX_TIMESTAMP: the first record carrying the largest timestamp, in whichever
    segment and batch it is, not the last record nor the first of its batch; the first of
    several with it; None for a log without records."""
    log = open_log(segment_bytes=1_024, index_interval_bytes=0)
    assert log.max_timestamp_offset() is None
    stamps = [[30, 10, 20], [40, 95, 50], [5, 60, 95], [90, 1, 2]]
    for i, timestamps in enumerate(stamps):
        log.append_as_leader(batch(3, 3 * i, timestamps=timestamps), 0)
    assert log.segment_count > 1
    assert log.max_timestamp_offset() == TimestampOffset(4, 95)
    log.append_as_leader(batch(2, 12, timestamps=[96, 96]), 0)
    assert log.max_timestamp_offset() == TimestampOffset(12, 96)


def test_max_timestamp_offset_skips_what_the_log_start_removed_and_finds_markers(open_log):
    """Records below the log start are not answered (Kafka answers their offset): the next
    record of the same timestamp is, or None; a transaction marker with the largest timestamp
    is answered with its own offset, as Kafka does."""
    log = open_log(index_interval_bytes=0)
    log.append_as_leader(batch(3, 0, timestamps=[30, 90, 10]), 0)
    log.append_as_leader(batch(2, 3, timestamps=[90, 50]), 0)
    assert log.max_timestamp_offset() == TimestampOffset(1, 90)
    log.increment_log_start_offset(2)
    assert log.max_timestamp_offset() == TimestampOffset(3, 90)
    log.increment_log_start_offset(4)
    assert log.max_timestamp_offset() is None
    log.append_as_leader(rb.build_marker(5, 0, commit=True, coordinator_epoch=0, now_ms=99), 0)
    assert log.max_timestamp_offset() == TimestampOffset(5, 99)


def test_follower_append_keeps_offsets_and_refuses_going_back(open_log, tmp_path, clock):
    """Followers append leader bytes unchanged; offsets below their LEO are refused."""
    leader = open_log()
    leader.append_as_leader(batch(4) + batch(6, 4), leader_epoch=2)
    from raylog.config import LogConfig
    from raylog.storage.log import Log

    follower = Log.open(str(tmp_path / "follower"), LogConfig(), clock)
    data = leader.read(0, 1 << 20)
    info = follower.append_as_follower(data)
    assert (info.first_offset, info.last_offset, follower.log_end_offset) == (0, 9, 10)
    assert follower.read(0, 1 << 20) == data
    with pytest.raises(InvalidRequestError):
        follower.append_as_follower(data)
    follower.close()


def test_truncate_to_removes_whole_batches_and_segments(open_log):
    """truncate_to drops every batch at or above the offset, across segments."""
    log = open_log(segment_bytes=3_000, index_interval_bytes=100)
    for i in range(30):
        log.append_as_leader(batch(5, i * 5), 0)
    segments = log.segment_count
    assert log.truncate_to(52) == 50  # 52 is inside the batch [50, 55)
    assert log.segment_count < segments
    assert read_all(log).column("offset").to_pylist() == list(range(50))
    log.append_as_leader(batch(5, 50), 1)
    assert read_all(log).column("offset").to_pylist() == list(range(55))
    assert log.offsets_for_time(1_000).offset == 0
    with pytest.raises(OffsetOutOfRangeError):
        log.truncate_to(-1)


def test_truncate_fully_and_start_at(open_log):
    """A follower far behind a leader whose log start moved on restarts its log there."""
    log = open_log(segment_bytes=2_000)
    for i in range(10):
        log.append_as_leader(batch(5, i * 5), 0)
    log.truncate_fully_and_start_at(1_000)
    assert (log.log_start_offset, log.log_end_offset, log.segment_count) == (1_000, 1_000, 1)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    log.append_as_leader(batch(2), 0)
    assert read_all(log).column("offset").to_pylist() == [1_000, 1_001]
    log.close()
    reopened = open_log(segment_bytes=2_000)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (1_000, 1_002)


def test_retention_by_time_and_bytes_never_deletes_the_active_segment(open_log, clock):
    """retention.ms and retention.bytes delete whole old segments, oldest first, not the active."""
    log = open_log(segment_bytes=3_000, retention_ms=60_000)
    now = clock()
    for i in range(20):
        log.append_as_leader(batch(5, i * 5, timestamps=[now - 120_000 + i] * 5), 0)
    log.append_as_leader(batch(5, 100, timestamps=[now] * 5), 0)
    deleted = log.apply_retention(log.log_end_offset)
    assert deleted and deleted[0] == 0
    assert log.segment_count == 1 and log.log_start_offset == 100
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    clock.advance(10**9)
    assert log.apply_retention(log.log_end_offset) == []  # only the active segment is left

    sized = open_log(segment_bytes=3_000, retention_bytes=7_000, retention_ms=-1)
    for i in range(30):
        sized.append_as_leader(batch(5, 105 + i * 5), 0)
    sized.apply_retention(sized.log_end_offset)
    assert sized.size_bytes <= 7_000 + 3_000
    assert sized.segment_count >= 2


def test_a_tiered_log_keeps_its_segments_until_its_owner_deletes_the_copied_ones(open_log, clock):
    """On a tiered log (remote.storage.enable) retention deletes nothing by itself: a segment
    leaves only through delete_segments_below, once copied; never the active one."""
    log = open_log(segment_bytes=3_000, retention_ms=60_000, retention_bytes=3_000, remote_storage_enable=True)
    now = clock()
    for i in range(20):
        log.append_as_leader(batch(5, i * 5, timestamps=[now - 120_000 + i] * 5), 0)
    assert log.apply_retention(log.log_end_offset) == [] and log.log_start_offset == 0
    segments = log.local_segments()
    assert [s.base_offset for s in segments] == list(log.segment_base_offsets)
    assert [s.is_active for s in segments] == [False] * (len(segments) - 1) + [True]
    assert all(s.last_offset + 1 == t.base_offset for s, t in zip(segments, segments[1:], strict=False))
    assert (
        segments[-1].last_offset == log.log_end_offset - 1
        and segments[0].max_timestamp_ms == now - 120_000 + segments[0].last_offset // 5
    )
    assert sum(s.size_bytes for s in segments) == log.size_bytes

    second = segments[1].base_offset
    assert log.delete_segments_below(second, "local.retention.bytes 3000") == [0]
    assert log.log_start_offset == second and log.delete_segments_below(second, "again") == []
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    assert log.delete_segments_below(10**9, "all") == [s.base_offset for s in segments[1:-1]]
    assert log.segment_count == 1 and log.log_start_offset == segments[-1].base_offset
    assert read_all(log).column("offset").to_pylist() == list(range(segments[-1].base_offset, 100))


def test_flush_policy_moves_the_recovery_point(open_log, clock):
    """flush.messages and flush.ms fsync and checkpoint the recovery point."""
    log = open_log(flush_messages=10)
    log.append_as_leader(batch(6), 0)
    assert log.recovery_point == 0
    log.append_as_leader(batch(6, 6), 0)
    assert log.recovery_point == 12
    with open(os.path.join(log.dir, RECOVERY_POINT_FILE)) as f:
        assert f.read() == "12"

    timed = open_log(flush_ms=1_000)
    timed.append_as_leader(batch(1, 12), 0)
    timed.maybe_flush()
    assert timed.recovery_point < timed.log_end_offset
    clock.advance(1_000)
    timed.maybe_flush()
    assert timed.recovery_point == timed.log_end_offset


def test_log_append_time_topics_stamp_the_broker_time(open_log, clock):
    """With message.timestamp.type=LogAppendTime every record reads as the append time."""
    log = open_log(**{"message.timestamp.type": "LogAppendTime"})
    info = log.append_as_leader(batch(3, timestamps=[1, 2, 3]), 0)
    assert info.log_append_time_ms == clock()
    assert read_all(log).column("timestamp").to_pylist() == [clock()] * 3


@pytest.mark.parametrize("compression_type", ["zstd", "uncompressed", "gzip"])
def test_compression_type_stores_every_data_batch_with_the_topics_codec(open_log, compression_type):
    """Kafka's topic compression.type: a leader recompresses a batch that came with another
    codec (here lz4), keeping its records, offsets, timestamps and producer fields; a batch
    already in the codec is stored as it came."""
    log = open_log(**{"compression.type": compression_type})
    codec = {"zstd": compression.ZSTD, "uncompressed": compression.NONE, "gzip": compression.GZIP}[compression_type]
    values = [b"%05d" % i * 20 for i in range(50)]
    sent = rb.build(values, keys=[b"k"] * 50, timestamps_ms=list(range(50)), codec=compression.LZ4,
                    producer_id=9, producer_epoch=2, base_sequence=7)  # fmt: skip
    log.append_as_leader(sent, 0)
    log.append_as_leader(rb.build([b"as it came"], codec=codec, now_ms=1_000), 0)
    headers = [h for _, h in rb.iter_headers(log.read(0, 1 << 20))]
    assert [h.codec for h in headers] == [codec, codec]
    assert (headers[0].producer_id, headers[0].producer_epoch, headers[0].base_sequence) == (9, 2, 7)
    table = read_all(log)
    assert table.column("value").to_pylist() == values + [b"as it came"]
    assert table.column("offset").to_pylist() == list(range(51))
    assert table.column("timestamp").to_pylist()[:50] == list(range(50))


def test_compression_type_refuses_a_batch_it_would_store_past_max_message_bytes(open_log):
    """A batch that fits as the producer compressed it but not uncompressed is refused
    (RecordTooLargeError), and nothing is appended."""
    log = open_log(**{"compression.type": "uncompressed", "max.message.bytes": 4096})
    with pytest.raises(RecordTooLargeError, match="compression.type=uncompressed"):
        log.append_as_leader(rb.build([b"x" * 20_000], codec=compression.LZ4), 0)
    assert log.log_end_offset == 0


def test_compression_type_producer_keeps_each_batchs_own_codec(open_log):
    log = open_log(**{"compression.type": "producer"})
    log.append_as_leader(rb.build([b"a" * 100], codec=compression.LZ4), 0)
    log.append_as_leader(rb.build([b"b" * 100], codec=compression.ZSTD), 0)
    assert [h.codec for _, h in rb.iter_headers(log.read(0, 1 << 20))] == [compression.LZ4, compression.ZSTD]


def test_compression_type_leaves_transaction_markers_as_they_are(open_log):
    log = open_log(**{"compression.type": "zstd"})
    log.append_as_leader(rb.build_marker(5, 0, commit=True, coordinator_epoch=0), 0)
    [(_, marker)] = rb.iter_headers(log.read(0, 1 << 20))
    assert marker.codec == compression.NONE and marker.attributes & rb.CONTROL


def test_clean_close_needs_no_recovery(open_log):
    """A closed log reopens with its data, trusting its flushed indexes."""
    log = open_log(segment_bytes=3_000)
    for i in range(20):
        log.append_as_leader(batch(5, i * 5), 0)
    log.close()
    reopened = open_log(segment_bytes=3_000)
    assert reopened.recovery.recovered_segments == 0
    assert reopened.log_end_offset == 100
    assert read_all(reopened).column("offset").to_pylist() == list(range(100))


def test_reads_do_not_block_or_tear_during_appends(open_log):
    """Reader threads see only whole batches below the LEO they observed while one writer appends."""
    log = open_log(segment_bytes=20_000, index_interval_bytes=1_000)
    stop = threading.Event()
    errors: list[BaseException] = []

    def reader():
        try:
            while not stop.is_set():
                end = log.log_end_offset
                offset = log.log_start_offset
                while offset < end:
                    data = log.read(offset, 4_000, max_offset=end)
                    headers = [h for _, h in rb.iter_headers(data)]
                    assert headers and headers[0].base_offset <= offset < headers[-1].next_offset <= end
                    offset = headers[-1].next_offset
        except BaseException as exc:  # surfaced in the main thread below
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for i in range(300):
        log.append_as_leader(batch(4, i * 4), 0)
    stop.set()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors


def test_retention_never_deletes_a_segment_above_the_high_watermark(open_log, clock):
    """Retention deletes only segments wholly below the high watermark (Kafka's bound): uncommitted data stays."""
    log = open_log(segment_bytes=1_500, retention_bytes=0, retention_ms=1)
    for i in range(12):
        log.append_as_leader(batch(5, i * 5), 0)
    clock.advance(10_000)
    bases = [s.base_offset for s in log._segments]
    high_watermark = bases[2] + 1  # inside the third segment
    deleted = log.apply_retention(high_watermark)
    assert deleted == bases[:2]
    assert log.log_start_offset == bases[2] <= high_watermark
    assert log.apply_retention(high_watermark) == []


def test_a_leader_refuses_records_beyond_the_header_limits(open_log):
    """Too many headers on a record, or too long a header key: InvalidRecordError, nothing appended."""
    log = open_log()
    log.append_as_leader(batch(2), 0)
    many = rb.build([b"v", b"w"], headers=[[("h", b"x")] * (rb.MAX_HEADERS_PER_RECORD + 1), None])
    long_key = rb.build([b"v"], headers=[[("k" * (rb.MAX_HEADER_KEY_BYTES + 1), None)]])
    for bad in (many, long_key):
        with pytest.raises(InvalidRecordError):
            log.append_as_leader(bad, 0)
    at_limits = rb.build(
        [b"v", b"w"], headers=[[("h", b"x")] * rb.MAX_HEADERS_PER_RECORD, [("k" * rb.MAX_HEADER_KEY_BYTES, None)]]
    )
    log.append_as_leader(at_limits, 0)
    assert log.log_end_offset == 4


def test_a_read_is_bounded_whatever_it_asks(open_log, monkeypatch):
    """max_bytes is capped at MAX_READ_BYTES (still at least one batch); a negative or non-integer one is refused."""
    from raylog.storage import log as log_module

    log = open_log()
    for i in range(10):
        log.append_as_leader(batch(10, i * 10), 0)
    one = len(batch(10))
    monkeypatch.setattr(log_module, "MAX_READ_BYTES", 3 * one)
    assert len(log.read(0, 2**62)) == 3 * one
    monkeypatch.setattr(log_module, "MAX_READ_BYTES", 1)
    assert len(log.read(0, 2**62)) == one  # at least one batch
    for bad in (-1, 1.5, None, True):
        with pytest.raises(InvalidRequestError):
            log.read(0, bad)


def test_records_below_an_offset_are_deleted_and_the_log_start_survives_a_reopen(open_log):
    """Kafka's DeleteRecords on the log: the log start moves to the offset (inside a segment
    too), reads below it are OFFSET_OUT_OF_RANGE, the segments wholly below it are deleted,
    the active one never, and a reopen keeps the log start. It never moves back, nor past
    the log end."""
    log = open_log(segment_bytes=1_500)
    for i in range(12):
        log.append_as_leader(batch(5, i * 5), 0)
    bases = [s.base_offset for s in log._segments]
    inside = bases[2] + 2
    assert log.increment_log_start_offset(inside) == bases[:2]
    assert (log.log_start_offset, log._segments[0].base_offset) == (inside, bases[2])
    with pytest.raises(OffsetOutOfRangeError):
        log.read(inside - 1, 1 << 20)
    assert read_all(log).column("offset").to_pylist()[0] == inside
    assert log.increment_log_start_offset(inside - 1) == []  # never back
    assert log.offsets_for_time(0).offset == inside  # the earliest timestamp: the first record left
    assert log.log_start_offset == inside
    with pytest.raises(OffsetOutOfRangeError):
        log.increment_log_start_offset(log.log_end_offset + 1)
    log.close()
    reopened = open_log(segment_bytes=1_500)
    assert reopened.log_start_offset == inside
    end = reopened.log_end_offset
    assert reopened.increment_log_start_offset(end) == bases[2:-1]  # the active segment stays
    assert (reopened.log_start_offset, reopened.segment_count) == (end, 1)
    assert reopened.read(end, 1 << 20) == b""


def test_a_log_start_past_the_end_after_a_crash_is_clamped_and_a_full_truncation_moves_it(open_log, tmp_path):
    """The checkpointed log start is clamped to the log found on disk (its end may have been
    cut by recovery); truncating fully to another offset starts the log there."""
    log = open_log()
    log.append_as_leader(batch(5), 0)
    log.increment_log_start_offset(3)
    log.close()
    with open(tmp_path / "topic-0" / LOG_START_OFFSET_FILE, "w") as f:
        f.write("50")
    reopened = open_log()
    assert reopened.log_start_offset == reopened.log_end_offset == 5
    reopened.truncate_fully_and_start_at(2)
    assert reopened.log_start_offset == reopened.log_end_offset == 2
    reopened.close()
    assert open_log().log_start_offset == 2


# ---------------------------------------------------------------------------------------
# file.delete.delay.ms


def _names(log, suffix: str) -> list[str]:
    return sorted(n for n in os.listdir(log.dir) if n.endswith(suffix))


def test_removed_segments_wait_as_deleted_files_for_file_delete_delay_ms(open_log, clock):
    """With file.delete.delay.ms, retention, DeleteRecords and a truncation rename a removed
    segment's three files to ``.deleted`` (the log no longer has it: its offsets are out of
    range) and unlink them once the delay has passed, not before; a reader holding the
    segment reads it meanwhile and after."""
    log = open_log(segment_bytes=3_000, retention_ms=60_000, file_delete_delay_ms=30_000)
    now = clock()
    for i in range(12):
        log.append_as_leader(batch(5, i * 5, timestamps=[now - 120_000] * 5), 0)
    log.append_as_leader(batch(5, 60, timestamps=[now] * 5), 0)
    held = log._segments[0]
    deleted = log.apply_retention(log.log_end_offset)
    assert deleted and log.log_start_offset == log._segments[0].base_offset
    waiting = _names(log, ".deleted")
    assert len(waiting) == 3 * len(deleted)
    assert not {f"{b:020d}.log" for b in deleted} & set(os.listdir(log.dir))
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    assert rb.decode_table(held.read(0, 1 << 20), min_offset=0).num_rows > 0  # held: still readable

    clock.advance(29_999)
    assert log.delete_retired_segments() == 0 and _names(log, ".deleted") == waiting
    clock.advance(1)
    assert log.delete_retired_segments() == len(deleted) and _names(log, ".deleted") == []
    assert rb.decode_table(held.read(0, 1 << 20), min_offset=0).num_rows > 0  # an unlinked file reads on

    for i in range(8):
        log.append_as_leader(batch(5, 65 + i * 5, timestamps=[clock()] * 5), 0)
    bases = [s.base_offset for s in log._segments]
    log.increment_log_start_offset(bases[1])  # DeleteRecords
    log.truncate_to(bases[-2])  # a follower cutting its divergent tail
    assert _names(log, ".log.deleted") == [f"{bases[0]:020d}.log.deleted", f"{bases[-1]:020d}.log.deleted"]
    clock.advance(30_000)
    assert log.delete_retired_segments() == 2 and _names(log, ".deleted") == []


def test_a_restart_deletes_deleted_files_and_never_loads_them(open_log, clock):
    """A log opened after a crash unlinks every ``.deleted`` file, those whose rename a
    crash interrupted included (the ``.log`` is renamed first: its indexes are then
    orphans), and loads none of their records; closing a log unlinks the waiting ones."""
    log = open_log(segment_bytes=3_000, file_delete_delay_ms=60_000)
    for i in range(30):
        log.append_as_leader(batch(5, i * 5), 0)
    bases = [s.base_offset for s in log._segments]
    assert len(bases) >= 4
    log.truncate_to(bases[-2])
    log.flush()
    assert _names(log, ".log.deleted") == [f"{bases[-2]:020d}.log.deleted", f"{bases[-1]:020d}.log.deleted"]
    cut = log._segments[-1].base_offset  # as if a crash came midway through its rename: the .log went first
    os.replace(log._segments[-1].records.path, log._segments[-1].records.path + ".deleted")

    reopened = open_log(segment_bytes=3_000, file_delete_delay_ms=60_000)  # (the first never closed: a crash)
    assert _names(reopened, ".deleted") == []
    assert not [n for n in os.listdir(reopened.dir) if n.startswith(f"{cut:020d}.")]
    assert reopened.log_end_offset == cut and read_all(reopened).num_rows == cut

    reopened.increment_log_start_offset(bases[1])
    assert len(_names(reopened, ".deleted")) == 3
    reopened.close()
    assert _names(reopened, ".deleted") == []


def test_compaction_retires_the_segments_it_replaced(open_log, clock):
    """The segments a cleaning round swapped out wait as ``.deleted`` files too."""
    log = open_log(cleanup_policy="compact", segment_bytes=1024, index_interval_bytes=256, file_delete_delay_ms=5_000)
    for i in range(40):
        log.append_as_leader(rb.build([b"v%03d" % i] * 3, keys=[b"k1", b"k2", b"k3"], now_ms=clock()), 0)
    log.roll()
    before = read_all(log).num_rows
    log.clean(force=True)
    assert read_all(log).num_rows < before
    assert _names(log, ".log.deleted")
    clock.advance(5_000)
    assert log.delete_retired_segments() > 0 and _names(log, ".deleted") == []
