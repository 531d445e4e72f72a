"""Transactions in a partition over a real log: the last stable offset, markers, the
aborted-transaction index, read_committed reads, late writes fenced by the bumped epoch,
and all of it across restarts, truncation and retention (no Ray)."""

from __future__ import annotations

import errno
import os
import struct

import crc32c
import pytest

from raylog.common import record_batch
from raylog.common.requests import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, READ_COMMITTED, READ_UNCOMMITTED
from raylog.config import LogConfig, TopicConfig
from raylog.coordination.partition import Partition
from raylog.coordination.transactions import MAX_EPOCH
from raylog.errors import InvalidProducerEpochError, InvalidRequestError, OutOfOrderSequenceError, StorageError
from raylog.storage import faults, producer_snapshot, txn_index
from raylog.storage.log import Log
from raylog.storage.txn_index import AbortedTxn

ALL = 1 << 20
COORDINATOR_EPOCH = 4


def reopen(open_log, clock, **config) -> Partition:
    """The partition as a (re)started replica finds it on disk, leading (sole ISR member)."""
    topic_config = TopicConfig.from_properties(config)
    part = Partition("t", 0, 1, open_log(**topic_config.log_config().to_properties()), topic_config, clock=clock)
    part.become_leader(leader_epoch=9, replicas=(1,), isr=(1,))
    return part


@pytest.fixture
def part(open_log, clock) -> Partition:
    return reopen(open_log, clock)


def txn(values, pid, seq=0, epoch=0, **options) -> bytes:
    """A transactional batch of producer ``pid``."""
    return record_batch.build(
        values, producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True, **options
    )


def plain(values, **options) -> bytes:
    return record_batch.build(values, **options)


def produce(p: Partition, data: bytes) -> int:
    """Append as leader (acks=1); the first offset."""
    return p.append_as_leader(data, acks=1).first_offset


def marker(p: Partition, pid: int, epoch: int, commit: bool) -> int | None:
    """The coordinator's marker for ``pid`` (``epoch``: the producer's next); its offset."""
    info = p.append_marker(pid, epoch, commit, COORDINATOR_EPOCH)
    return None if info is None else info.first_offset


def values(p: Partition, offset=0, isolation_level=READ_COMMITTED, with_aborted=True) -> list[bytes]:
    """What a consumer decodes reading from ``offset`` (read_committed: without aborted
    transactions, from the answer's list)."""
    result = p.read(offset, ALL, isolation_level=isolation_level)
    aborted = result.aborted if isolation_level == READ_COMMITTED and with_aborted else None
    return record_batch.decode_table(result.data, aborted=aborted).column("value").to_pylist()


def test_open_transactions_hold_the_last_stable_offset_while_the_high_watermark_moves(part):
    """The LSO is the first offset of the oldest open transaction (the HW without one);
    a commit marker moves it up to the next open transaction, or the HW."""
    produce(part, plain([b"p0"]))
    assert part.last_stable_offset == part.high_watermark == 1
    assert produce(part, txn([b"a1", b"a2"], pid=5)) == 1
    assert (part.high_watermark, part.last_stable_offset) == (3, 1)
    assert produce(part, txn([b"b1"], pid=6)) == 3
    produce(part, plain([b"p1"]))
    produce(part, txn([b"a3"], pid=5, seq=2))  # pid 5's transaction is open since 1
    assert (part.high_watermark, part.last_stable_offset) == (6, 1)
    assert part.producers.first_open_offset() == 1
    assert marker(part, 5, 1, commit=True) == 6
    assert (part.high_watermark, part.last_stable_offset) == (7, 3)  # pid 6 is still open
    assert marker(part, 6, 1, commit=True) == 7
    assert part.last_stable_offset == part.high_watermark == 8
    assert part.producers.first_open_offset() is None
    assert part.txn_index.all() == []  # commits are not indexed


def test_read_committed_reads_below_the_lso_and_uncommitted_below_the_hw(part):
    """A read_committed read stops at the LSO (nothing at all from above it), a
    read_uncommitted one at the HW; the answer carries the LSO."""
    produce(part, plain([b"p0"]))
    produce(part, txn([b"a1"], pid=5))
    produce(part, plain([b"p1"]))
    assert values(part) == [b"p0"]
    assert values(part, isolation_level=READ_UNCOMMITTED) == [b"p0", b"a1", b"p1"]
    result = part.read(2, ALL, isolation_level=READ_COMMITTED)
    assert (result.data, result.last_stable_offset, result.high_watermark) == (b"", 1, 3)
    assert part.read(0, ALL).last_stable_offset == 1
    marker(part, 5, 1, commit=True)
    assert values(part) == [b"p0", b"a1", b"p1"]


def test_the_lso_is_bounded_by_the_high_watermark_too(part):
    """With a follower behind, the LSO is the HW when that is lower than the first open
    transaction."""
    part.become_leader(10, replicas=(1, 2), isr=(1, 2))
    produce(part, plain([b"p0", b"p1"]))
    produce(part, txn([b"a1"], pid=5))
    assert (part.high_watermark, part.last_stable_offset) == (0, 0)
    part.read(1, ALL, replica_id=2)
    assert (part.high_watermark, part.last_stable_offset) == (1, 1)
    part.read(3, ALL, replica_id=2)
    assert (part.high_watermark, part.last_stable_offset) == (3, 2)


def test_an_aborted_transaction_is_indexed_and_dropped_by_read_committed_readers(part):
    """An abort marker indexes (producer, first offset, marker offset); a read_committed
    read lists it, and decoding with that list drops exactly that producer's transactional
    records up to the marker, keeping other producers' records interleaved with them,
    non-transactional ones and the same producer's later committed transaction."""
    layout = [
        (txn([b"a1"], pid=5), 0),
        (txn([b"b1"], pid=6), 1),
        (plain([b"p0"]), 2),
        (txn([b"a2", b"a3"], pid=5, seq=1), 3),
        (txn([b"b2"], pid=6, seq=1), 5),
    ]
    for data, offset in layout:
        assert produce(part, data) == offset
    assert marker(part, 5, 1, commit=False) == 6
    assert marker(part, 6, 1, commit=True) == 7
    assert produce(part, txn([b"a4"], pid=5, epoch=1)) == 8  # pid 5's next transaction
    assert produce(part, plain([b"p1"])) == 9
    assert marker(part, 5, 2, commit=True) == 10
    assert produce(part, txn([b"a5"], pid=5, epoch=2)) == 11
    assert marker(part, 5, 3, commit=False) == 12
    assert part.txn_index.all() == [AbortedTxn(5, 0, 6), AbortedTxn(5, 11, 12)]
    assert part.last_stable_offset == part.high_watermark == 13

    result = part.read(0, ALL, isolation_level=READ_COMMITTED)
    assert result.aborted == ((5, 0), (5, 11))
    table = record_batch.decode_table(result.data, aborted=result.aborted)
    assert table.column("value").to_pylist() == [b"b1", b"p0", b"b2", b"a4", b"p1"]
    assert table.column("offset").to_pylist() == [1, 2, 5, 8, 9]
    # Everything (but markers) without the list: what read_uncommitted consumers see.
    assert values(part, isolation_level=READ_UNCOMMITTED) == [
        b"a1",
        b"b1",
        b"p0",
        b"a2",
        b"a3",
        b"b2",
        b"a4",
        b"p1",
        b"a5",
    ]
    # From inside the aborted transaction: it is still listed and still dropped.
    assert part.read(4, ALL, isolation_level=READ_COMMITTED).aborted == ((5, 0), (5, 11))
    assert values(part, 4) == [b"b2", b"a4", b"p1"]  # (read from the batch holding 4)
    # From past its marker: only the later one.
    assert part.read(7, ALL, isolation_level=READ_COMMITTED).aborted == ((5, 11),)
    assert values(part, 7) == [b"a4", b"p1"]
    # A read_uncommitted answer lists nothing.
    assert part.read(0, ALL).aborted == ()


def test_control_batches_never_reach_decoded_output(part):
    """Markers take an offset each but are no records: decode_table skips them whatever
    the isolation, and a read from a marker's offset starts after it."""
    produce(part, txn([b"a"], pid=5))
    commit_at = marker(part, 5, 1, commit=True)
    produce(part, txn([b"b"], pid=6))
    abort_at = marker(part, 6, 1, commit=False)
    produce(part, plain([b"c"]))
    data = part.read(0, ALL).data
    headers = [h for _, h in record_batch.iter_headers(data)]
    assert [h.base_offset for h in headers if h.attributes & record_batch.CONTROL] == [commit_at, abort_at] == [1, 3]
    assert [bool(h.attributes & record_batch.COMMIT_MARKER) for h in headers] == [False, True, False, False, False]
    table = record_batch.decode_table(data)
    assert table.column("offset").to_pylist() == [0, 2, 4]
    assert record_batch.decode_table(data, aborted=[(6, 2)]).column("value").to_pylist() == [b"a", b"c"]
    assert record_batch.decode_table(part.read(commit_at, ALL).data).column("offset").to_pylist() == [2, 4]


def test_a_marker_carries_the_commit_flag_and_the_coordinator_epoch(part):
    """The marker is a control batch of one record keyed by (version, type: 1 commit, 0
    abort) with the coordinator's epoch in its value, and the producer's next epoch."""
    produce(part, txn([b"a"], pid=5))
    marker(part, 5, 1, commit=True)
    data = part.read(1, ALL).data
    header = record_batch.read_header(data)
    assert (header.producer_id, header.producer_epoch, header.record_count) == (5, 1, 1)
    assert header.attributes & record_batch.TRANSACTIONAL
    record_batch.validate(data)
    body = record_batch.decode_body(memoryview(data), 0, header)
    assert record_batch.CONTROL_KEY.unpack(body.column("key")[0].as_py()) == (0, 1)
    assert record_batch.CONTROL_VALUE.unpack(body.column("value")[0].as_py()) == (0, COORDINATOR_EPOCH)


def test_a_stale_marker_writes_nothing(part):
    """A marker whose epoch is not above the producer's known one (sent again, or a late
    copy) is not written and returns None; a marker for a producer this partition never
    saw is written (it fences that epoch here) but closes nothing."""
    produce(part, txn([b"a"], pid=5))
    assert marker(part, 5, 0, commit=False) is None  # the producer's own epoch: stale
    assert part.last_stable_offset == 0  # still open
    assert marker(part, 5, 1, commit=False) == 1
    end = part.log.log_end_offset
    assert marker(part, 5, 1, commit=False) is None
    assert marker(part, 5, 1, commit=True) is None
    assert marker(part, 5, 0, commit=True) is None
    assert part.log.log_end_offset == end and part.txn_index.all() == [AbortedTxn(5, 0, 1)]
    assert marker(part, 77, 3, commit=True) == end
    assert part.txn_index.all() == [AbortedTxn(5, 0, 1)] and part.producers.first_open_offset() is None
    with pytest.raises(InvalidProducerEpochError):
        produce(part, txn([b"late"], pid=77, epoch=2))
    assert marker(part, 77, 3, commit=False) is None


def test_a_late_write_of_an_ended_transaction_is_fenced_by_the_markers_epoch(part):
    """After the marker (epoch + 1), a batch of the ended transaction arriving late (a new
    sequence, or a retry of one written) is INVALID_PRODUCER_EPOCH and opens nothing, as is
    a transactional write without sequence (offsets); the next transaction's first batch
    (the bumped epoch) must start at sequence 0."""
    produce(part, txn([b"a0"], pid=5))
    produce(part, txn([b"a1"], pid=5, seq=1))
    marker(part, 5, 1, commit=True)
    end = part.log.log_end_offset
    for late in (txn([b"a2"], pid=5, seq=2), txn([b"a1"], pid=5, seq=1), txn([b"a0"], pid=5)):
        with pytest.raises(InvalidProducerEpochError):
            produce(part, late)
    with pytest.raises(InvalidProducerEpochError):
        produce(part, txn([b"offsets"], pid=5, seq=-1))
    assert part.log.log_end_offset == end
    assert part.producers.first_open_offset() is None and part.last_stable_offset == end
    with pytest.raises(OutOfOrderSequenceError):
        produce(part, txn([b"n"], pid=5, seq=2, epoch=1))
    assert produce(part, txn([b"n0"], pid=5, seq=0, epoch=1)) == end
    assert part.last_stable_offset == end  # the new transaction is open
    assert produce(part, txn([b"n1"], pid=5, seq=1, epoch=1)) == end + 1


def test_markers_at_the_last_epoch_of_a_producer_id(part):
    """The coordinator's last marker for a producer id carries MAX_EPOCH (an int16): it is
    written, fences everything older, and is stale when sent again."""
    produce(part, txn([b"a"], pid=5, epoch=MAX_EPOCH - 1))
    assert marker(part, 5, MAX_EPOCH, commit=False) == 1
    assert record_batch.read_header(part.read(1, ALL).data).producer_epoch == MAX_EPOCH
    assert part.txn_index.all() == [AbortedTxn(5, 0, 1)]
    with pytest.raises(InvalidProducerEpochError):
        produce(part, txn([b"late"], pid=5, seq=1, epoch=MAX_EPOCH - 1))
    assert marker(part, 5, MAX_EPOCH, commit=False) is None


def test_only_a_coordinator_writes_control_batches(part):
    """A producer's batch flagged as control is refused before anything is written."""
    forged = record_batch.build_marker(5, 0, True, 0)
    with pytest.raises(InvalidRequestError):
        produce(part, forged)
    assert part.log.log_end_offset == 0


def aborted_and_open(p: Partition) -> None:
    """pid 5: an aborted transaction (index entry (5, 0, 2)); pid 6: one open since 3;
    pid 7: a committed one; pid 8: an idempotent, non-transactional producer."""
    produce(p, txn([b"a0"], pid=5))
    produce(p, txn([b"a1"], pid=5, seq=1))
    marker(p, 5, 1, commit=False)
    produce(p, txn([b"b0"], pid=6))
    produce(p, txn([b"c0"], pid=7))
    marker(p, 7, 1, commit=True)
    produce(p, record_batch.build([b"d0"], producer_id=8, producer_epoch=0, base_sequence=0))


def state_of(p: Partition) -> tuple:
    return (
        p.txn_index.all(),
        p.producers.first_open_offset(),
        p.last_stable_offset,
        p.read(0, ALL, isolation_level=READ_COMMITTED).aborted,
    )


@pytest.mark.parametrize("snapshot", ["none", "at the end", "in the middle"])
def test_the_index_and_open_transactions_survive_a_restart(open_log, clock, snapshot):
    """A restarted replica has the same aborted transactions, open transactions (so LSO)
    and fenced epochs, whether it loads a snapshot holding it all, a snapshot and then the
    log's batches after it, or the whole log (its index files deleted: rebuilt by replay)."""
    p = reopen(open_log, clock)
    if snapshot == "in the middle":
        produce(p, txn([b"a0"], pid=5))
        p.checkpoint_producer_state()  # pid 5 open at 0, in the snapshot
        produce(p, txn([b"a1"], pid=5, seq=1))
        marker(p, 5, 1, commit=False)
        produce(p, txn([b"b0"], pid=6))
        produce(p, txn([b"c0"], pid=7))
        marker(p, 7, 1, commit=True)
        produce(p, record_batch.build([b"d0"], producer_id=8, producer_epoch=0, base_sequence=0))
    else:
        aborted_and_open(p)
    if snapshot == "at the end":
        p.checkpoint_producer_state()
        assert producer_snapshot.offsets(p.log.dir) == [p.log.log_end_offset]
    elif snapshot == "none":
        assert producer_snapshot.offsets(p.log.dir) == []
    before = state_of(p)
    assert before == ([AbortedTxn(5, 0, 2)], 3, 3, ((5, 0),))
    if snapshot != "at the end":  # the log's replay covers the marker: rebuilt from it
        for name in os.listdir(p.log.dir):
            if name.endswith(txn_index.SUFFIX):
                os.unlink(os.path.join(p.log.dir, name))
    restarted = reopen(open_log, clock)
    assert state_of(restarted) == before
    assert len(txn_index.TransactionIndex(restarted.log.dir)) == 1  # (back on disk)
    for late in (txn([b"late"], pid=5, seq=2), txn([b"late"], pid=7, seq=1)):
        with pytest.raises(InvalidProducerEpochError):
            produce(restarted, late)
    assert marker(restarted, 5, 1, commit=False) is None  # the same marker again: stale
    assert marker(restarted, 6, 1, commit=False) == restarted.log.log_end_offset - 1
    assert restarted.last_stable_offset == restarted.high_watermark
    assert values(restarted) == [b"c0", b"d0"]
    assert restarted.txn_index.all() == [AbortedTxn(5, 0, 2), AbortedTxn(6, 3, 7)]


def test_truncation_below_a_marker_reopens_its_transaction(open_log, clock):
    """A follower cut below an abort marker drops its index entry and has the transaction
    open again (the LSO falls back to its first offset, the epoch is the old one); the
    marker fetched again from the leader closes and indexes it anew."""
    p = reopen(open_log, clock)
    produce(p, txn([b"a0"], pid=5))
    produce(p, txn([b"a1"], pid=5, seq=1))
    produce(p, plain([b"p"]))
    marker(p, 5, 1, commit=False)
    produce(p, plain([b"q"]))
    p.checkpoint_producer_state()  # a snapshot at 5, above the cut: deleted by it
    marker_bytes = p.read(3, ALL).data[: record_batch.read_header(p.read(3, ALL).data).size]
    assert p.txn_index.all() == [AbortedTxn(5, 0, 3)]
    p.become_follower(2, 10, replicas=(1, 2), isr=(2,))
    p.truncate_to_leader_end(3)
    assert p.log.log_end_offset == 3 and producer_snapshot.offsets(p.log.dir) == []
    assert p.txn_index.all() == [] and len(txn_index.TransactionIndex(p.log.dir)) == 0
    assert p.producers.first_open_offset() == 0 and p.last_stable_offset == 0
    assert not p.producers.marker_is_stale(5, 1)  # that epoch is not known here any more
    p.append_as_follower(marker_bytes, leader_high_watermark=4)
    assert p.txn_index.all() == [AbortedTxn(5, 0, 3)] and p.producers.first_open_offset() is None
    assert (p.high_watermark, p.last_stable_offset) == (4, 4)


def test_truncation_below_a_transactions_start_forgets_it(open_log, clock):
    """Cut below the first batch of an open transaction, it is not open any more."""
    p = reopen(open_log, clock)
    produce(p, plain([b"p"]))
    produce(p, txn([b"a0"], pid=5))
    p.become_follower(2, 10, replicas=(1, 2), isr=(2,))
    p.truncate_to_leader_end(1)
    assert p.producers.first_open_offset() is None and p.last_stable_offset == p.high_watermark == 1


def test_retention_drops_index_entries_below_the_log_start(open_log, clock):
    """Once retention removed the segment holding an abort marker, the next checkpoint
    drops its entry (and file); an entry whose marker is kept stays, also across a restart."""
    config = {"retention.ms": str(7 * 24 * 3600 * 1000)}
    p = reopen(open_log, clock, **config)
    old = [clock.now_ms]
    produce(p, txn([b"a"], pid=5, timestamps_ms=old))
    marker(p, 5, 1, commit=False)  # in segment 0
    p.log.roll()
    produce(p, txn([b"b"], pid=6, timestamps_ms=old))
    marker(p, 6, 1, commit=False)  # in segment 2
    p.log.roll()
    produce(p, plain([b"c"]))
    assert p.log.segment_base_offsets == (0, 2, 4)
    assert p.txn_index.all() == [AbortedTxn(5, 0, 1), AbortedTxn(6, 2, 3)]
    dir_ = p.log.dir
    assert txn_index.path(dir_, 0) != txn_index.path(dir_, 2)
    clock.advance(8 * 24 * 3600 * 1000)
    produce(p, plain([b"d"]))  # keeps the active segment's time recent
    assert p.log.apply_retention(p.high_watermark) == [0, 2]
    assert p.log.log_start_offset == 4
    p.checkpoint_producer_state()
    assert p.txn_index.all() == []
    assert len(txn_index.TransactionIndex(dir_)) == 0
    assert reopen(open_log, clock, **config).txn_index.all() == []


def test_retention_keeps_entries_whose_marker_is_kept(open_log, clock):
    """Retention of the segment holding a transaction's first batch only (its marker in a
    later segment) keeps the entry: a read from the log start still needs it."""
    config = {"retention.ms": str(24 * 3600 * 1000)}
    p = reopen(open_log, clock, **config)
    produce(p, txn([b"a0"], pid=5, timestamps_ms=[clock.now_ms]))
    p.log.roll()
    produce(p, txn([b"a1"], pid=5, seq=1))
    clock.advance(2 * 24 * 3600 * 1000)
    produce(p, plain([b"p"]))
    marker(p, 5, 1, commit=False)
    assert p.log.apply_retention(p.high_watermark) == [0]
    p.checkpoint_producer_state()
    assert p.txn_index.all() == [AbortedTxn(5, 0, 3)]
    result = p.read(1, ALL, isolation_level=READ_COMMITTED)
    assert result.aborted == ((5, 0),)
    assert record_batch.decode_table(result.data, aborted=result.aborted).column("value").to_pylist() == [b"p"]


def test_list_offset_latest_is_the_lso_for_read_committed(part, clock):
    """LATEST is the LSO read_committed and the HW read_uncommitted; a timestamp look-up
    read_committed finds nothing at or above the LSO."""
    produce(part, plain([b"p"], timestamps_ms=[clock.now_ms]))
    produce(part, txn([b"a"], pid=5, timestamps_ms=[clock.now_ms + 10]))
    produce(part, plain([b"q"], timestamps_ms=[clock.now_ms + 20]))
    assert part.list_offset(LATEST_TIMESTAMP, isolation_level=READ_COMMITTED) == (1, -1)
    assert part.list_offset(LATEST_TIMESTAMP, isolation_level=READ_UNCOMMITTED) == (3, -1)
    assert part.list_offset(EARLIEST_TIMESTAMP, isolation_level=READ_COMMITTED) == (0, -1)
    assert part.list_offset(clock.now_ms + 5, isolation_level=READ_COMMITTED) == (-1, -1)
    assert part.list_offset(clock.now_ms + 5, isolation_level=READ_UNCOMMITTED) == (1, clock.now_ms + 10)
    marker(part, 5, 1, commit=True)
    assert part.list_offset(LATEST_TIMESTAMP, isolation_level=READ_COMMITTED) == (4, -1)
    assert part.list_offset(clock.now_ms + 15, isolation_level=READ_COMMITTED) == (2, clock.now_ms + 20)


def test_a_producer_with_an_open_transaction_is_never_expired(open_log, clock):
    """producer.id.expiration.ms forgets idle producers, but not one whose transaction is
    open here (its LSO hold, and its fencing, would go); once its marker is written it
    expires like any other, also across a restart."""
    config = {"producer.id.expiration.ms": "60000"}
    p = reopen(open_log, clock, **config)
    produce(p, txn([b"a"], pid=5))
    produce(p, record_batch.build([b"i"], producer_id=6, producer_epoch=0, base_sequence=0))
    clock.advance(120_000)
    p.checkpoint_producer_state()
    assert len(p.producers) == 1 and p.producers.first_open_offset() == 0 and p.last_stable_offset == 0
    restarted = reopen(open_log, clock, **config)
    assert len(restarted.producers) == 1 and restarted.last_stable_offset == 0
    marker(restarted, 5, 1, commit=True)
    assert restarted.last_stable_offset == restarted.high_watermark == 3
    clock.advance(120_000)
    restarted.checkpoint_producer_state()
    assert len(restarted.producers) == 0
    assert len(reopen(open_log, clock, **config).producers) == 0


def test_follower_replay_indexes_aborts_and_tracks_open_transactions(open_log, clock, tmp_path):
    """A follower appending the leader's bytes keeps the same index and open
    transactions as the leader (so it can lead with the same LSO)."""
    leader = reopen(open_log, clock)
    aborted_and_open(leader)
    follower_log = Log.open(str(tmp_path / "follower"), LogConfig.from_properties({}), clock=clock)
    try:
        follower = Partition("t", 0, 2, follower_log, TopicConfig.from_properties({}), clock=clock)
        follower.become_follower(1, 9, replicas=(1, 2), isr=(1, 2))
        follower.append_as_follower(leader.read(0, ALL, replica_id=2, record_fetch=False).data, leader.high_watermark)
        assert follower.txn_index.all() == leader.txn_index.all() == [AbortedTxn(5, 0, 2)]
        assert follower.producers.first_open_offset() == 3
        follower.become_leader(10, replicas=(1, 2), isr=(2,))
        assert follower.last_stable_offset == 3
    finally:
        follower_log.close()


def test_the_lso_never_falls_below_the_log_start(open_log, clock):
    """Retention may delete the segment holding an open transaction's first batch (it is
    below the HW); the LSO is then the log start, as Kafka bounds its first unstable offset
    (UnifiedLog.maybeIncrementFirstUnstableOffset): LATEST read_committed is never below
    EARLIEST, and a read_committed read from the log start is answered, not refused."""
    config = {"retention.ms": str(24 * 3600 * 1000)}
    p = reopen(open_log, clock, **config)
    produce(p, plain([b"p0"], timestamps_ms=[clock.now_ms]))
    produce(p, txn([b"a0"], pid=5, timestamps_ms=[clock.now_ms]))  # open from offset 1
    p.log.roll()
    clock.advance(2 * 24 * 3600 * 1000)
    produce(p, plain([b"p1"]))
    assert p.log.apply_retention(p.high_watermark) == [0]
    start = p.log.log_start_offset
    assert start == 2 and p.producers.first_open_offset() == 1
    assert p.last_stable_offset >= start
    earliest = p.list_offset(EARLIEST_TIMESTAMP, isolation_level=READ_COMMITTED)[0]
    assert p.list_offset(LATEST_TIMESTAMP, isolation_level=READ_COMMITTED)[0] >= earliest
    assert p.read(start, ALL, isolation_level=READ_COMMITTED).data == b""  # (pid 5 still open)


def test_a_corrupt_index_file_is_rebuilt_though_the_newest_snapshot_is_past_its_markers(open_log, clock):
    """A damaged .txnindex is dropped at open; its aborted transactions must come back (Kafka
    rebuilds a segment's transaction index from the segment), else read_committed readers
    get aborted records. Here the newest snapshot lies after the abort marker, so the
    replay after it does not meet the marker."""
    p = reopen(open_log, clock)
    aborted_and_open(p)
    p.checkpoint_producer_state()  # the snapshot at the log end
    path = txn_index.path(p.log.dir, 0)
    with open(path, "r+b") as f:
        data = bytearray(f.read())
        data[-1] ^= 0xFF
        f.seek(0)
        f.write(bytes(data))
    restarted = reopen(open_log, clock)
    assert restarted.last_stable_offset == 3  # pid 6 is open from 3: [0, 3) is pid 5's aborted one
    assert values(restarted) == []  # fails: [b"a0", b"a1"], the aborted records
    assert restarted.txn_index.all() == [AbortedTxn(5, 0, 2)]


def test_a_replica_upgraded_from_version_1_snapshots_opens_with_its_producers(open_log, clock):
    """Snapshot files written before transactions (version 1) are still read (the module
    says so): a restarted replica loads its producers from one, so a retry of their last
    batch is still a duplicate."""
    p = reopen(open_log, clock)
    last = record_batch.build([b"a"], producer_id=5, producer_epoch=0, base_sequence=0)
    produce(p, last)
    produce(p, plain([b"p"]))
    rows = p.producers.rows()
    body = struct.pack(">i", len(rows)) + b"".join(producer_snapshot.ROW_V1.pack(*row[:8]) for row in rows)
    with open(producer_snapshot.path(p.log.dir, 2), "wb") as f:  # as the previous release wrote it
        f.write(struct.pack(">hI", 1, crc32c.crc32c(body)) + body)
    restarted = reopen(open_log, clock)  # fails: TypeError from SnapshotBatch._make (8 fields of 9)
    assert restarted.append_as_leader(last, acks=1).first_offset == 0
    assert restarted.log.log_end_offset == 2


def test_a_marker_without_bump_ends_the_transaction_and_the_epoch_goes_on(part):
    """A Kafka client at EndTxn v0-4 keeps its epoch: its markers carry that epoch. Each
    closes the open transaction (committed, or aborted and indexed), the producer's next
    transaction continues its sequence at the same epoch, and the marker sent again (or
    for a partition where nothing is open) writes nothing; an older epoch's marker is stale."""
    assert produce(part, txn([b"a0"], pid=5)) == 0
    assert part.append_marker(5, 0, True, COORDINATOR_EPOCH, bumps_epoch=False).first_offset == 1
    assert part.last_stable_offset == 2 and part.producers.first_open_offset() is None
    assert part.append_marker(5, 0, True, COORDINATOR_EPOCH, bumps_epoch=False) is None  # sent again
    assert produce(part, txn([b"a1"], pid=5, seq=1)) == 2  # the same epoch, the next sequence
    assert part.last_stable_offset == 2
    assert part.append_marker(5, 0, False, COORDINATOR_EPOCH, bumps_epoch=False).first_offset == 3
    assert part.txn_index.all() == [AbortedTxn(5, 2, 3)]
    assert values(part) == [b"a0"]
    produce(part, txn([b"b0"], pid=6, epoch=2))
    assert part.append_marker(6, 1, True, COORDINATOR_EPOCH, bumps_epoch=False) is None  # older epoch
    assert part.producers.first_open_offset() == 4


class TxnIndexFault:
    """Writes of ``.txnindex`` files fail with EIO while ``on`` (the process-wide switch of
    :mod:`raylog.storage.faults` is turned on around those writes only: the log's appends
    and the producer snapshots still succeed, as when only the index's file fails)."""

    def __init__(self, monkeypatch):
        self.on = False
        real_write = txn_index.write_atomically

        def write(path, content):
            faults.inject(errno.EIO if self.on else None)
            try:
                real_write(path, content)
            finally:
                faults.inject(None)

        monkeypatch.setattr(txn_index, "write_atomically", write)


@pytest.fixture
def txnindex_fault(monkeypatch) -> TxnIndexFault:
    return TxnIndexFault(monkeypatch)


def test_an_abort_marker_whose_index_write_failed_is_indexed_by_its_retry(open_log, clock, txnindex_fault):
    """The marker is in the log but its .txnindex write failed: read_committed readers must
    still not get the aborted records, the coordinator's retry (a stale marker) writes the
    entry before it counts as done, and a restart after the next snapshot still knows it."""
    p = reopen(open_log, clock)
    produce(p, txn([b"a0", b"a1"], pid=5))
    produce(p, plain([b"p0"]))
    txnindex_fault.on = True
    with pytest.raises(StorageError):
        marker(p, 5, 1, commit=False)
    assert p.log.log_end_offset == 4  # the marker is in the log
    assert values(p) == [b"p0"]  # held in memory meanwhile
    txnindex_fault.on = False
    assert marker(p, 5, 1, commit=False) is None  # the retry: written already, and now indexed
    assert txn_index.TransactionIndex(p.log.dir).all() == [AbortedTxn(5, 0, 3)]
    p.checkpoint_producer_state()  # the snapshot covers the marker
    restarted = reopen(open_log, clock)
    assert restarted.txn_index.all() == [AbortedTxn(5, 0, 3)]
    assert values(restarted) == [b"p0"]


def test_a_marker_whose_index_is_not_written_is_never_done_nor_covered_by_a_snapshot(open_log, clock, txnindex_fault):
    """While the index file still cannot be written, the retried marker fails (the
    coordinator retries again) and no producer snapshot is written past the marker, so a
    restart replays the marker and indexes it."""
    p = reopen(open_log, clock)
    produce(p, txn([b"a0"], pid=5))
    produce(p, plain([b"p0"]))
    txnindex_fault.on = True
    with pytest.raises(StorageError):
        marker(p, 5, 1, commit=False)
    with pytest.raises(StorageError):
        marker(p, 5, 1, commit=False)
    with pytest.raises(StorageError):
        p.checkpoint_producer_state()
    p.log.roll()  # a roll's snapshot is skipped too (logged)
    assert producer_snapshot.offsets(p.log.dir) == []
    assert values(p) == [b"p0"]
    txnindex_fault.on = False
    restarted = reopen(open_log, clock)
    assert restarted.txn_index.all() == [AbortedTxn(5, 0, 2)]
    assert values(restarted) == [b"p0"]


def test_a_follower_whose_index_write_failed_keeps_the_abort(open_log, clock, tmp_path, txnindex_fault):
    """On a follower the failed index write fails the append (its fetcher pauses and fetches
    again) but every batch of the answer is accounted for: the abort is indexed in memory,
    the transaction opened after it is tracked, and the entry reaches the disk before a
    snapshot covers it, so the follower, leading after a restart, hides the aborted records."""
    leader = reopen(open_log, clock)
    aborted_and_open(leader)  # (5, 0, 2) aborted; pid 6 open from 3
    follower_dir = str(tmp_path / "follower")
    follower_log = Log.open(follower_dir, LogConfig.from_properties({}), clock=clock)
    logs = [follower_log]
    try:
        follower = Partition("t", 0, 2, follower_log, TopicConfig.from_properties({}), clock=clock)
        follower.become_follower(1, 9, replicas=(1, 2), isr=(1, 2))
        txnindex_fault.on = True
        with pytest.raises(StorageError):
            follower.append_as_follower(
                leader.read(0, ALL, replica_id=2, record_fetch=False).data, leader.high_watermark
            )
        assert follower.log.log_end_offset == leader.log.log_end_offset
        assert follower.producers.first_open_offset() == 3
        with pytest.raises(StorageError):
            follower.checkpoint_producer_state()
        txnindex_fault.on = False
        follower.checkpoint_producer_state()
        assert producer_snapshot.offsets(follower_dir) == [follower.log.log_end_offset]
        logs.append(Log.open(follower_dir, LogConfig.from_properties({}), clock=clock))
        restarted = Partition("t", 0, 2, logs[-1], TopicConfig.from_properties({}), clock=clock)
        restarted.become_leader(10, replicas=(1, 2), isr=(2,))
        assert restarted.txn_index.all() == [AbortedTxn(5, 0, 2)]
        assert restarted.last_stable_offset == 3
        assert values(restarted) == []  # [0, 3): pid 5's aborted records and its marker
    finally:
        for log in logs:
            log.close()
