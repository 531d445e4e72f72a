"""A tiered replica's pump pauses when it has nothing to do, and the pause ends as soon as a
segment that closed since is ready to copy (below the LSO), when the replica stops, and not
for a new segment while it waits out a failure (``raylog bench tiered``: without it each round
of copies waited out a second, and the local disk held 3.9x local.retention.bytes where 3x is
the bound)."""

from __future__ import annotations

import threading

from raylog.actors.replica_tiering import PumpPause

#: Every pause here is an hour: a pause that ends, ended for the reason the test gives.
HOUR_S = 3600.0
WAIT_S = 60.0


def paused(pause: PumpPause, active_base: int | None, now: tuple[int, int], stopped=None):
    """A thread paused on ``pause`` since a tick that saw the active segment at ``active_base``
    (None: the pause after a failure), ``now`` the log's (active base, LSO) as it begins; the
    thread, and the lock the replica would hold."""
    lock, stopped = threading.RLock(), stopped or threading.Event()
    nudge = lambda: pause.nudge(now[0], lambda: now[1])  # noqa: E731 — the replica's _nudge_tiering
    thread = threading.Thread(target=pause.wait, args=(HOUR_S, lock, stopped, active_base, nudge), daemon=True)
    thread.start()
    return thread, lock


def ended(thread: threading.Thread, timeout_s: float = WAIT_S) -> bool:
    thread.join(timeout_s)
    return not thread.is_alive()


def test_a_nudge_wakes_the_pause_only_once_a_segment_closed_since_is_below_the_lso():
    pause = PumpPause()
    thread, lock = paused(pause, active_base=100, now=(100, 100))
    assert not ended(thread, 0.2)
    with lock:
        pause.nudge(100, lambda: 150)  # records appended, no segment closed
        pause.nudge(200, lambda: 150)  # the segment [100, 200) closed, but the LSO is below its end
    assert not ended(thread, 0.2)
    with lock:
        pause.nudge(200, lambda: 200)  # every offset of [100, 200) is stable: ready to copy
    assert ended(thread)
    assert pause.paused_at is None


def test_a_segment_that_became_ready_between_the_tick_and_the_pause_ends_it_at_once():
    thread, _ = paused(PumpPause(), active_base=100, now=(300, 320))
    assert ended(thread)


def test_the_pause_after_a_failure_is_not_cut_short_by_new_segments_but_by_the_stop():
    pause, stopped = PumpPause(), threading.Event()
    thread, lock = paused(pause, active_base=None, now=(300, 320), stopped=stopped)
    with lock:
        pause.nudge(400, lambda: 400)
    assert not ended(thread, 0.2)
    stopped.set()  # as the replica's close does: stopped, then the pause's event, holding the lock
    with lock:
        pause.woken.set()
    assert ended(thread)


def test_a_stopped_replica_does_not_pause():
    stopped = threading.Event()
    stopped.set()
    thread, _ = paused(PumpPause(), active_base=100, now=(100, 100), stopped=stopped)
    assert ended(thread)
