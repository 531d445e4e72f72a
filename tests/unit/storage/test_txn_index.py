"""The aborted-transaction index files, and the producer snapshot rows transactions added
(version 2: the open transaction's first offset, batch-less rows) (no Ray)."""

from __future__ import annotations

import logging
import os
import struct

import crc32c
import pytest

from raylog.common.record_batch import COMMIT_MARKER, CONTROL, TRANSACTIONAL, BatchHeader
from raylog.coordination.producer_state import ProducerStateManager
from raylog.errors import CorruptRecordError
from raylog.storage import producer_snapshot, txn_index
from raylog.storage.producer_snapshot import SnapshotBatch
from raylog.storage.txn_index import AbortedTxn, TransactionIndex

BASES = (0, 100, 200)


def files(directory) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.endswith(txn_index.SUFFIX))


def read(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def filled(directory) -> TransactionIndex:
    """Entries in segments 0 (markers 10, 50), 100 (150) and 200 (250)."""
    index = TransactionIndex(str(directory))
    for entry in (AbortedTxn(1, 5, 10), AbortedTxn(2, 8, 50), AbortedTxn(1, 120, 150), AbortedTxn(3, 40, 250)):
        index.add(entry, BASES)
    return index


def test_entries_go_to_the_file_of_the_segment_holding_their_marker(tmp_path):
    """Each entry lands in ``<segment base>.txnindex`` of its marker's segment; all() lists
    them by marker offset whatever the order they were added in."""
    index = TransactionIndex(str(tmp_path))
    index.add(AbortedTxn(3, 40, 250), BASES)
    index.add(AbortedTxn(1, 5, 10), BASES)
    index.add(AbortedTxn(2, 8, 100), BASES)  # a marker at a segment's base offset
    assert files(tmp_path) == [f"{b:020d}.txnindex" for b in BASES]
    assert [e.marker_offset for e in index.all()] == [10, 100, 250] and len(index) == 3
    assert txn_index.decode(read(txn_index.path(str(tmp_path), 100))) == [AbortedTxn(2, 8, 100)]


def test_add_is_idempotent(tmp_path):
    """A replay meeting a marker again adds nothing, and does not rewrite the file."""
    index = filled(tmp_path)
    path = txn_index.path(str(tmp_path), 0)
    before = read(path)
    os.utime(path, ns=(1, 1))
    index.add(AbortedTxn(2, 8, 50), BASES)
    assert os.stat(path).st_mtime_ns == 1 and read(path) == before
    assert len(index) == 4


def test_collect_finds_every_transaction_a_read_may_meet(tmp_path):
    """collect(from, upper): entries whose marker is at or after ``from`` (the read may meet
    their batches) and whose first offset is below ``upper`` (the read may reach them)."""
    index = filled(tmp_path)
    assert index.collect(0, 1000) == [(1, 5), (2, 8), (1, 120), (3, 40)]
    assert index.collect(11, 1000) == [(2, 8), (1, 120), (3, 40)]  # marker 10 is behind
    assert index.collect(50, 1000) == [(2, 8), (1, 120), (3, 40)]  # marker 50 is still met
    assert index.collect(51, 120) == [(3, 40)]  # first offset 120 is not below 120
    assert index.collect(0, 6) == [(1, 5)]
    assert index.collect(251, 1000) == []
    assert TransactionIndex(str(tmp_path / "..")).collect(0, 10) == []


def test_truncate_to_drops_entries_at_and_above_the_cut(tmp_path):
    """A log cut at ``offset`` drops the entries whose marker is at or above it; emptied
    files are deleted, partly emptied ones rewritten."""
    index = filled(tmp_path)
    index.truncate_to(250)
    assert [e.marker_offset for e in index.all()] == [10, 50, 150]
    assert files(tmp_path) == [f"{b:020d}.txnindex" for b in (0, 100)]
    index.truncate_to(11)
    assert index.all() == [AbortedTxn(1, 5, 10)] and files(tmp_path) == [f"{0:020d}.txnindex"]
    assert TransactionIndex(str(tmp_path)).all() == [AbortedTxn(1, 5, 10)]
    index.truncate_to(1000)  # nothing at or above
    assert index.all() == [AbortedTxn(1, 5, 10)]


def test_retain_drops_entries_below_the_log_start(tmp_path):
    """Retention drops the entries whose marker is below the new log start, keeping one
    whose transaction began earlier but whose marker is kept."""
    index = filled(tmp_path)
    index.retain(50)
    assert index.all() == [AbortedTxn(2, 8, 50), AbortedTxn(1, 120, 150), AbortedTxn(3, 40, 250)]
    index.retain(200)
    assert index.all() == [AbortedTxn(3, 40, 250)] and files(tmp_path) == [f"{200:020d}.txnindex"]
    index.retain(251)
    assert index.all() == [] and files(tmp_path) == []
    assert index.collect(0, 1000) == []


def test_the_index_persists_across_reopening(tmp_path):
    """A new TransactionIndex on the directory finds the same entries; other files there
    (segments, names that only look alike) are ignored."""
    filled(tmp_path).truncate_to(200)
    (tmp_path / "00000000000000000000.log").write_bytes(b"")
    (tmp_path / "abc.txnindex").write_bytes(b"junk")
    (tmp_path / "0001.txnindex").write_bytes(b"junk")
    reopened = TransactionIndex(str(tmp_path))
    assert reopened.all() == [AbortedTxn(1, 5, 10), AbortedTxn(2, 8, 50), AbortedTxn(1, 120, 150)]
    assert reopened.collect(51, 1000) == [(1, 120)]
    assert (tmp_path / "abc.txnindex").exists()  # not its file: left alone


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[:-1],  # torn
        lambda data: data[:3],  # shorter than a header
        lambda data: data[:-1] + bytes([data[-1] ^ 0x10]),  # a flipped bit
        lambda data: b"\x00\x07" + data[2:],  # unknown version
        lambda data: data + b"\x00" * 24,  # an entry the count does not cover
        lambda data: b"",
    ],
)
def test_a_corrupt_file_is_dropped_with_a_warning(tmp_path, caplog, damage):
    """A damaged file is deleted and its entries forgotten (logged, no exception); the
    other segments' files load."""
    filled(tmp_path)
    path = txn_index.path(str(tmp_path), 100)
    data = read(path)
    with open(path, "wb") as f:
        f.write(damage(data))
    with caplog.at_level(logging.WARNING, logger=txn_index.__name__):
        reopened = TransactionIndex(str(tmp_path))
    assert [e.marker_offset for e in reopened.all()] == [10, 50, 250]
    assert not os.path.exists(path)
    assert any("dropping aborted-transaction index" in r.getMessage() for r in caplog.records)
    reopened.add(AbortedTxn(1, 120, 150), BASES)  # a replay rebuilds it
    assert len(TransactionIndex(str(tmp_path))) == 4


def test_encode_decode_round_trip_and_damage():
    """Entries come back as written (also none, and extreme offsets); every damage raises
    ValueError."""
    entries = [AbortedTxn(2**62, 0, 2**63 - 1), AbortedTxn(-1, 3, 4), AbortedTxn(7, 5, 6)]
    assert txn_index.decode(txn_index.encode(entries)) == entries
    assert txn_index.decode(txn_index.encode([])) == []
    data = txn_index.encode(entries)
    assert len(data) == 10 + 24 * len(entries)
    for bad in (data[:-1], data[:9], b"\x00\x02" + data[2:], data + b"\x00" * 24, data[:-24]):
        with pytest.raises(ValueError):
            txn_index.decode(bad)
    # A count that does not match the entries, with a CRC that does.
    counted = struct.pack(">i", 5) + data[10:]
    with pytest.raises(ValueError):
        txn_index.decode(struct.pack(">hI", txn_index.VERSION, crc32c.crc32c(counted)) + counted)


# --- producer snapshot rows (version 2) --------------------------------------------------


def encode_v1(rows) -> bytes:
    """A version 1 snapshot file (rows without txn_first_offset), as older replicas wrote."""
    body = struct.pack(">i", len(rows)) + b"".join(producer_snapshot.ROW_V1.pack(*row[:8]) for row in rows)
    return struct.pack(">hI", 1, crc32c.crc32c(body)) + body


def test_version_1_snapshots_still_decode(tmp_path):
    """A version 1 file reads as rows with no open transaction (txn_first_offset -1), and
    loads into the producer state as it did."""
    rows = [SnapshotBatch(7, 0, 0, 9, 100, 109, 5, 6), SnapshotBatch(8, 2, 10, 19, 110, 119, 7, 8)]
    data = encode_v1(rows)
    decoded = producer_snapshot.decode(data)
    assert decoded == rows and all(row.txn_first_offset == -1 for row in decoded)
    with open(producer_snapshot.path(str(tmp_path), 120), "wb") as f:
        f.write(data)
    state = ProducerStateManager()
    state.load(producer_snapshot.read(str(tmp_path), 120))
    assert state.last_offsets() == {7: 109, 8: 119} and state.first_open_offset() is None
    with pytest.raises(CorruptRecordError):
        producer_snapshot.decode(data[:-1])
    with pytest.raises(CorruptRecordError):  # version 1 header with version 2 rows
        producer_snapshot.decode(b"\x00\x01" + producer_snapshot.encode(rows)[2:])


def test_version_2_rows_round_trip_with_open_transactions_and_batchless_producers(tmp_path):
    """Rows keep txn_first_offset, and a producer with no batch in its epoch (a marker
    bumped it) has one row with first_sequence -1; the state loaded from them is the state
    written: open transactions (so the LSO bound), epochs (so fencing), sequences."""
    rows = [
        SnapshotBatch(7, 0, 0, 9, 100, 109, 5, 6, 100),
        SnapshotBatch(7, 0, 10, 19, 110, 119, 5, 6, 100),
        SnapshotBatch(8, 3, -1, -1, -1, -1, -1, 42, -1),
    ]
    assert producer_snapshot.decode(producer_snapshot.encode(rows)) == rows
    assert producer_snapshot.decode(producer_snapshot.encode(rows))[0].txn_first_offset == 100

    def header(pid, epoch, seq, offset, attributes=TRANSACTIONAL, count=1):
        return BatchHeader(offset, 100, 0, 1, 0, attributes, count - 1, 0, 0, pid, epoch, seq, count)

    state = ProducerStateManager()
    state.update(header(7, 0, 0, 100, count=10), 6)  # pid 7: open since 100
    state.update(header(8, 2, 0, 110), 6)
    closed = state.update(header(8, 3, -1, 111, CONTROL | TRANSACTIONAL), 42)  # pid 8 aborted: no batch
    assert closed is not None and (closed.first_offset, closed.marker_offset, closed.committed) == (110, 111, False)
    state.update(header(9, 0, 0, 112), 7)
    state.update(header(9, 1, -1, 113, CONTROL | TRANSACTIONAL | COMMIT_MARKER), 8)  # pid 9 committed
    written = state.rows()
    assert {row.producer_id: (row.first_sequence, row.txn_first_offset) for row in written} == {
        7: (0, 100),
        8: (-1, -1),
        9: (-1, -1),
    }
    producer_snapshot.write(str(tmp_path), 114, written)
    loaded = ProducerStateManager()
    loaded.load(producer_snapshot.read(str(tmp_path), 114))
    assert loaded.rows() == written
    assert loaded.first_open_offset() == 100 and len(loaded) == 3
    assert loaded.marker_is_stale(8, 3) and not loaded.marker_is_stale(8, 4)
    assert loaded.last_offsets() == {7: 109}
    closed = loaded.update(header(7, 1, -1, 114, CONTROL | TRANSACTIONAL | COMMIT_MARKER), 9)
    assert closed is not None and (closed.producer_id, closed.first_offset, closed.committed) == (7, 100, True)
    assert loaded.first_open_offset() is None
