"""The cleaner in its own thread: throttled, safe against appends, rolls, retention and truncation (no Ray)."""

from __future__ import annotations

import functools
import os
import threading

import pytest

from raylog.config import LogConfig
from raylog.storage import cleaner
from raylog.storage import log as log_module
from raylog.storage.log import Log
from raylog.storage.throttler import Throttler
from tests.helpers import wait_until
from tests.unit.storage.test_cleaner import COMPACT, fold, live, records, updates, write

NOW_MS = 1_700_000_000_000


@pytest.fixture(autouse=True)
def no_fsync(monkeypatch):
    """Threads interleave in memory here; a power cut is not what these tests simulate."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    monkeypatch.setattr(os, "fdatasync", lambda fd: None)


class Interleave:
    """A throttler whose "sleep" runs the writer's step once, at the ``at``-th chunk of a round."""

    def __init__(self, step, at: int = 1):
        self.step, self.at, self.calls, self.ran = step, at, 0, False

    def throttler(self) -> Throttler:
        clock = [0.0]

        def now() -> float:
            clock[0] += 1.0  # every chunk "takes" a second: each call checks
            return clock[0]

        def sleep(_: float) -> None:
            self.calls += 1
            if self.calls == self.at and not self.ran:
                self.ran = True
                self.step()

        return Throttler(1.0, clock_s=now, sleep=sleep, check_interval_s=0.5)


def compacted(tmp_path, **config) -> tuple[Log, list]:
    log = Log.open(str(tmp_path / "log"), LogConfig.from_properties({**COMPACT, **config}), lambda: NOW_MS)
    written = write(log, updates(n_keys=20, n_records=300, seed=1), NOW_MS)
    return log, written


def no_leftovers(log: Log) -> bool:
    return not [n for n in os.listdir(log.dir) if n.endswith((".cleaned", ".swap"))]


def test_appends_and_rolls_during_a_round_are_kept(tmp_path):
    """Batches appended (and segments rolled) while a round runs in another thread all survive the swap."""
    log, written = compacted(tmp_path)
    later = []
    step = Interleave(lambda: later.extend(write(log, updates(20, 60, seed=2), NOW_MS)), at=3)
    stats = log.clean(force=True, throttler=step.throttler())
    assert step.ran and stats is not None and stats.segments_after < stats.segments_before
    rows = records(log)
    assert live(fold(rows)) == live(fold(written + later))
    assert [r for r in rows if r[0] >= later[0][0]] == later  # nothing after the round's section was touched
    log.close()
    assert records(Log.open(log.dir, log.config, lambda: NOW_MS)) == rows


def test_retention_during_a_round_drops_the_swap_not_the_data(tmp_path):
    """Retention deleting the segments a round is cleaning makes the round skip their swap, leaving no stray files."""
    log, written = compacted(tmp_path, **{"cleanup.policy": "compact,delete", "retention.bytes": 6_000})
    deleted = []
    step = Interleave(lambda: deleted.extend(log.apply_retention(log.log_end_offset)), at=20)
    log.clean(force=True, throttler=step.throttler())
    assert step.ran and deleted
    assert no_leftovers(log)
    rows = records(log)
    assert rows[0][0] >= log.log_start_offset >= deleted[-1]
    kept = [r for r in written if r[0] >= log.log_start_offset]
    assert live(fold(rows)) == live(fold(kept))
    log.close()
    assert records(Log.open(log.dir, log.config, lambda: NOW_MS)) == rows


@pytest.mark.parametrize("at", [1, 10, 30])
def test_a_truncation_during_a_round_aborts_it(tmp_path, at):
    """A truncation during a round aborts it: nothing past the cut comes back, the checkpoint stays below it."""
    log, written = compacted(tmp_path)
    cut = written[150][0]
    step = Interleave(lambda: log.truncate_to(cut), at=at)
    assert log.clean(force=True, throttler=step.throttler()) is None or not step.ran
    assert step.ran or at > 10
    assert no_leftovers(log)
    assert log.log_end_offset <= cut
    assert cleaner.read_checkpoint(log.dir).first_dirty_offset <= log.log_end_offset
    rows = records(log)
    assert live(fold(rows)) == live(fold([r for r in written if r[0] < log.log_end_offset]))


def test_a_throttled_round_moves_no_faster_than_its_rate(tmp_path):
    """log.cleaner.io.max.bytes.per.second: a round's reads and writes, paced on a fake clock, take bytes/rate."""
    log, _ = compacted(tmp_path)
    clock, slept = [0.0], []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock[0] += seconds

    def now() -> float:
        clock[0] += 1e-6  # the work itself is (almost) instant
        return clock[0]

    rate = 10_000.0
    throttler = Throttler(rate, clock_s=now, sleep=sleep, check_interval_s=0.0)
    stats = log.clean(force=True, throttler=throttler)
    moved = stats.map_bytes_read + stats.bytes_read * 2 + stats.bytes_written  # map, decide, rewrite, write
    assert sum(slept) == pytest.approx(moved / rate, rel=0.2)


def test_a_cleaner_thread_and_a_busy_writer_keep_the_log_whole(tmp_path):
    """Real threads: rounds run while the writer appends, rolls and applies retention; every live key survives."""
    log, written = compacted(tmp_path, **{"cleanup.policy": "compact,delete", "retention.ms": "-1"})
    done = threading.Event()
    errors: list[BaseException] = []

    def clean_in_a_loop() -> None:
        try:
            while not done.is_set():
                log.clean(force=True)
        except BaseException as exc:  # noqa: BLE001 — reported below
            errors.append(exc)

    thread = threading.Thread(target=clean_in_a_loop)
    thread.start()
    try:
        for seed in range(15):
            written += write(log, updates(n_keys=20, n_records=30, seed=10 + seed), NOW_MS)
            log.apply_retention(log.log_end_offset)
    finally:
        done.set()
        thread.join()
    assert errors == []
    assert no_leftovers(log)
    rows = records(log)
    assert live(fold(rows)) == live(fold(written))
    log.close()
    assert records(Log.open(log.dir, log.config, lambda: NOW_MS)) == rows


def test_closing_the_log_wakes_a_round_sleeping_in_its_throttler(tmp_path, monkeypatch):
    """A round throttled to 1 byte/s gives up as soon as the log is closed, not after its pause."""
    monkeypatch.setattr(log_module, "Throttler", functools.partial(Throttler, check_interval_s=0.0))
    log, _ = compacted(tmp_path, **{"log.cleaner.io.max.bytes.per.second": "1"})
    sleeping = threading.Event()

    class Watched(threading.Event):
        def wait(self, timeout=None):
            sleeping.set()
            return super().wait(timeout)

    log._layout_moved = Watched()
    result: list = []
    thread = threading.Thread(target=lambda: result.append(log.clean(force=True)))
    thread.start()
    wait_until(sleeping.is_set, timeout_s=30, message="the round pausing in its throttler")
    log.close()
    thread.join(timeout=30)
    assert not thread.is_alive() and result == [None]
    assert no_leftovers(log)
