"""A failing disk (full, or I/O errors) fails writes with StorageError and loses nothing acknowledged (no Ray)."""

from __future__ import annotations

import errno
import os

import pytest

from raylog.common import record_batch as rb
from raylog.errors import StorageError
from raylog.storage import cleaner, faults, producer_snapshot
from raylog.storage.leader_epoch import LeaderEpochCache
from tests.unit.storage.test_log import batch, read_all


def test_a_failed_index_write_leaves_no_batch_behind(open_log, monkeypatch):
    """A batch whose index entry failed to write is taken back whole: the next batch gets its offsets."""
    log = open_log(index_interval_bytes=0)
    log.append_as_leader(batch(5), 0)
    real_pwrite = os.pwrite

    def full_disk(fd, data, offset):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full_disk)
    with pytest.raises(StorageError):
        log.append_as_leader(batch(5, 5), 0)
    monkeypatch.setattr(os, "pwrite", real_pwrite)
    assert log.log_end_offset == 5
    log.append_as_leader(batch(3, 100), 0)
    assert read_all(log).column("offset").to_pylist() == list(range(8))
    log.close()
    reopened = open_log(index_interval_bytes=0)
    assert reopened.log_end_offset == 8
    values = read_all(reopened).column("value").to_pylist()
    assert [v[:10] for v in values] == [b"%010d" % i for i in (0, 1, 2, 3, 4, 100, 101, 102)]


# ---------------------------------------------------------------------------------------
# The write-fault hook (raylog.storage.faults)


@pytest.fixture(autouse=True)
def no_fault_left():
    """Every test here ends with the process-wide switch off, whatever it did."""
    yield
    faults.inject(None)


def offsets(log) -> list[int]:
    return read_all(log).column("offset").to_pylist()


def fill(log, batches: int, start: int = 0) -> None:
    for i in range(batches):
        log.append_as_leader(batch(5, start + 5 * i), 0)


def _append_in_place(log):
    log.append_as_leader(batch(5, 900), 0)


def _append_that_rolls(log):
    log.append_as_leader(batch(40, 900), 0)  # larger than what is left of segment.bytes


def _follower_append(log):
    log.append_as_follower(rb.stamp(rb.read_header(batch(5)), log.log_end_offset, 0) + batch(5)[rb.STAMP.size :])


def _roll(log):
    log.roll()


def _flush(log):
    log.flush()


def _truncate(log):
    log.truncate_to(12)


def _truncate_fully(log):
    log.truncate_fully_and_start_at(500)


WRITES = [_append_in_place, _append_that_rolls, _follower_append, _roll, _flush, _truncate, _truncate_fully]


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EIO], ids=["ENOSPC", "EIO"])
@pytest.mark.parametrize("write", WRITES, ids=lambda w: w.__name__.strip("_"))
def test_a_failed_write_raises_storage_error_and_loses_nothing(open_log, error, write):
    """Every write on a full or failing disk raises StorageError; then the log holds what it held; appends resume."""
    config = {"segment_bytes": 4_000, "index_interval_bytes": 200}
    log = open_log(**config)
    fill(log, 12)
    log.flush()
    fill(log, 3, 60)  # unflushed data too
    before = offsets(log)
    faults.inject(error)
    with pytest.raises(StorageError):
        write(log)
    faults.inject(None)
    assert log.revive()
    if write is _truncate:
        expected = [o for o in before if o < 10]  # whole batches: 12 is inside [10, 15)
    elif write is _truncate_fully:
        expected = []
    else:
        expected = before
    assert offsets(log) == expected
    end = log.log_end_offset
    log.append_as_leader(batch(5, 700), 0)
    assert offsets(log) == expected + list(range(end, end + 5))
    log.close()
    reopened = open_log(**config)
    assert offsets(reopened) == expected + list(range(end, end + 5))
    assert reopened.recovery.truncated_bytes == 0


def test_an_io_error_that_cannot_be_cut_back_takes_the_log_offline_until_revived(open_log):
    """EIO tears an append and fails its clean-up: the log refuses every call until revive() recovers it."""
    log = open_log()
    fill(log, 4)
    faults.inject(errno.EIO)
    with pytest.raises(StorageError):
        log.append_as_leader(batch(5, 100), 0)
    assert log.offline is not None
    for call in (
        lambda: log.append_as_leader(batch(1), 0),
        lambda: log.read(0, 1 << 20),
        lambda: log.truncate_to(3),
        lambda: log.flush(),
        lambda: log.apply_retention(0),
    ):
        with pytest.raises(StorageError, match="offline"):
            call()
    assert not log.revive()  # the disk still fails
    faults.inject(None)
    assert log.revive() and log.offline is None
    assert offsets(log) == list(range(20))
    fill(log, 1, 20)
    assert offsets(log) == list(range(25))


def test_a_failed_fsync_after_an_append_never_brings_that_batch_back(open_log):
    """A batch whose fsync failed (flush.messages=1) is refused, and revive cuts it out though it is whole."""
    log = open_log(flush_messages=1)
    fill(log, 2)
    faults.inject(errno.EIO)
    with pytest.raises(StorageError):
        log.append_as_leader(batch(5, 100), 0)  # written whole; the fsync fails
    faults.inject(None)
    assert log.revive()
    assert offsets(log) == list(range(10))


def test_a_full_disk_never_takes_the_log_offline(open_log):
    """ENOSPC lets the torn bytes be cut at once: the log stays online and the next append takes the same offsets."""
    log = open_log(index_interval_bytes=0)
    fill(log, 2)
    faults.inject(errno.ENOSPC)
    for _ in range(3):
        with pytest.raises(StorageError):
            log.append_as_leader(batch(5, 100), 0)
    assert log.offline is None
    faults.inject(None)
    fill(log, 1, 10)
    assert offsets(log) == list(range(15))


def test_a_fault_for_a_while_ends_by_itself(open_log, monkeypatch):
    """A fault switched on for a duration (by a call its caller may have given up on, so
    that no one switches it off) stops failing writes when the duration is over."""
    now = [100.0]
    monkeypatch.setattr(faults.time, "monotonic", lambda: now[0])
    log = open_log(index_interval_bytes=0)
    faults.inject(errno.ENOSPC, duration_s=2.0)
    with pytest.raises(StorageError):
        log.append_as_leader(batch(5, 100), 0)
    now[0] = 101.9
    assert faults.active() == errno.ENOSPC
    now[0] = 102.0
    assert faults.active() is None
    fill(log, 1)
    assert offsets(log) == list(range(5))


def test_revive_keeps_a_log_offline_when_its_disk_lost_acknowledged_data(open_log):
    """A log whose files came back shorter than what it acknowledged stays offline: it must be re-copied, not served."""
    log = open_log()
    fill(log, 4)
    faults.inject(errno.EIO)
    with pytest.raises(StorageError):
        log.flush()
    faults.inject(None)
    with open(log._segments[-1].records.path, "r+b") as f:
        f.truncate(30)  # the unflushed pages never reached the disk
    assert not log.revive()
    assert log.offline is not None


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EIO], ids=["ENOSPC", "EIO"])
def test_checkpoint_writes_fail_and_keep_the_previous_file(tmp_path, error):
    """Leader-epoch, cleaner and producer-state checkpoints are replaced atomically: a failed write leaves the old."""
    epochs = LeaderEpochCache(str(tmp_path))
    epochs.assign(3, 0)
    cleaner.write_checkpoint(str(tmp_path), cleaner.Checkpoint(7, ((7, 1),)))
    row = producer_snapshot.SnapshotBatch(7, 0, 0, 4, 10, 14, 1, 1)
    producer_snapshot.write(str(tmp_path), 15, [row])
    saved = {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path)}
    faults.inject(error)
    with pytest.raises(StorageError):
        epochs.assign(4, 10)
    with pytest.raises(StorageError):
        cleaner.write_checkpoint(str(tmp_path), cleaner.Checkpoint(9, ()))
    with pytest.raises(StorageError):
        producer_snapshot.write(str(tmp_path), 15, [])
    faults.inject(None)
    assert {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path)} == saved
    assert LeaderEpochCache(str(tmp_path)).entries == [(3, 0)]
    assert producer_snapshot.read(str(tmp_path), 15) == [row]
