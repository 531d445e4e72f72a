"""New segments, truncations, deletions and checkpoints are fsync'd with their directory (no Ray)."""

from __future__ import annotations

import os

import pytest

from raylog.config import TopicConfig
from raylog.coordination.partition import Partition
from raylog.storage.log import HIGH_WATERMARK_FILE, RECOVERY_POINT_FILE
from tests.unit.storage.test_log import batch


@pytest.fixture
def synced(monkeypatch):
    """The set of paths fsync'd (files and directories) since the fixture started, by name."""
    paths: list[str] = []
    real_fsync, real_fdatasync = os.fsync, os.fdatasync

    def record(real):
        def sync(fd):
            paths.append(os.readlink(f"/proc/self/fd/{fd}"))
            return real(fd)

        return sync

    monkeypatch.setattr(os, "fsync", record(real_fsync))
    monkeypatch.setattr(os, "fdatasync", record(real_fdatasync))
    return paths


def names(paths: list[str], directory: str) -> set[str]:
    """Base names of the files of ``directory`` in ``paths``; "." for the directory itself."""
    directory = os.path.realpath(directory)
    out = set()
    for path in paths:
        if path == directory:
            out.add(".")
        elif os.path.dirname(path) == directory:
            out.add(os.path.basename(path).removesuffix(" (deleted)"))
    return out


def test_a_new_segment_and_its_directory_entry_are_fsynced_before_it_takes_appends(open_log, synced):
    """A roll fsyncs the new segment's files and the directory (a crash cannot leave a hole between segments)."""
    log = open_log(segment_bytes=1_500)
    log.append_as_leader(batch(5), 0)
    synced.clear()
    log.append_as_leader(batch(10, 5), 0)  # rolls
    assert log.segment_count == 2
    base = f"{log._segments[-1].base_offset:020d}"
    assert {".", f"{base}.log", f"{base}.index", f"{base}.timeindex"} <= names(synced, log.dir)


def test_truncation_is_fsynced_with_the_deleted_segments(open_log, synced):
    """truncate_to fsyncs the cut segment's files and the directory whose segments it deleted."""
    log = open_log(segment_bytes=1_500, index_interval_bytes=100)
    for i in range(12):
        log.append_as_leader(batch(5, i * 5), 0)
    assert log.segment_count > 3
    synced.clear()
    log.truncate_to(12)
    base = f"{log._segments[-1].base_offset:020d}"
    wanted = {".", f"{base}.log", f"{base}.index", f"{base}.timeindex", f"{RECOVERY_POINT_FILE}.tmp"}
    assert wanted <= names(synced, log.dir)

    synced.clear()
    log.truncate_fully_and_start_at(100)
    assert "." in names(synced, log.dir)


def test_retention_fsyncs_the_directory_after_deleting_segments(open_log, clock, synced):
    """Deleted segments do not come back after a crash: the directory is fsync'd."""
    log = open_log(segment_bytes=1_500, retention_bytes=0)
    for i in range(6):
        log.append_as_leader(batch(5, i * 5), 0)
    synced.clear()
    assert log.apply_retention(log.log_end_offset)
    assert "." in names(synced, log.dir)


def test_checkpoints_are_fsynced_and_so_is_their_rename(open_log, synced):
    """The recovery point and the high watermark checkpoint are written, fsync'd, renamed, and the rename fsync'd."""
    log = open_log()
    log.append_as_leader(batch(5), 0)
    partition = Partition("t", 0, 1, log, TopicConfig())
    partition.become_leader(1, (1,), (1,))
    synced.clear()
    log.flush()
    partition.checkpoint_high_watermark()
    assert {".", f"{RECOVERY_POINT_FILE}.tmp", f"{HIGH_WATERMARK_FILE}.tmp"} <= names(synced, log.dir)
    with open(os.path.join(log.dir, HIGH_WATERMARK_FILE)) as f:
        assert f.read() == "5"


def test_an_idle_partitions_housekeeping_writes_nothing(open_log, clock, synced, monkeypatch):
    """Housekeeping rounds of a partition where nothing happened write, fsync and list nothing:
    a node hosts hundreds of replicas, each running a round every few seconds."""
    log = open_log(flush_ms=1)
    log.append_as_leader(batch(5), 0)
    partition = Partition("t", 0, 1, log, TopicConfig(), clock=clock)
    partition.become_leader(1, (1,), (1,))

    def housekeeping_round() -> None:
        log.apply_retention(partition.high_watermark)
        log.maybe_flush()
        partition.checkpoint_high_watermark()
        partition.checkpoint_producer_state()

    clock.advance(1_000)
    housekeeping_round()  # the first round after the append flushes and writes its checkpoints
    assert {f"{HIGH_WATERMARK_FILE}.tmp"} <= names(synced, log.dir)
    listed: list[str] = []
    real_listdir = os.listdir
    monkeypatch.setattr(os, "listdir", lambda path=".": listed.append(path) or real_listdir(path))
    synced.clear()
    for _ in range(3):
        clock.advance(1_000)
        housekeeping_round()
    assert synced == [] and listed == []

    log.append_as_leader(batch(5, 5), 0)  # something happens: the next round writes again
    partition.high_watermark = log.log_end_offset
    housekeeping_round()
    assert {f"{HIGH_WATERMARK_FILE}.tmp"} <= names(synced, log.dir)
