"""The cleaner's I/O throttler holds a process to its rate on a fake clock (no sleeps, no Ray)."""

from __future__ import annotations

import pytest

from raylog.storage.throttler import Throttler


class FakeTime:
    """Seconds that move when work is done (``work``) or when the throttler sleeps."""

    def __init__(self):
        self.now_s = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now_s

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now_s += seconds


def run(rate: float, chunk: int, chunk_s: float, chunks: int) -> tuple[FakeTime, Throttler]:
    time = FakeTime()
    throttler = Throttler(rate, clock_s=time, sleep=time.sleep, check_interval_s=0.3)
    start = time.now_s
    for _ in range(chunks):
        time.now_s += chunk_s  # the work itself
        throttler.maybe_throttle(chunk)
    time.now_s += 0.31  # a last check interval closes the last period
    throttler.maybe_throttle(0)
    time.elapsed = time.now_s - start
    return time, throttler


def test_work_faster_than_the_rate_is_slowed_to_it():
    """1 MiB chunks done in 10 ms each against 10 MB/s: the total time is what 10 MB/s takes."""
    time, throttler = run(rate=10e6, chunk=1 << 20, chunk_s=0.01, chunks=100)
    expected_s = 100 * (1 << 20) / 10e6
    assert time.slept and throttler.throttled_s == pytest.approx(sum(time.slept))
    assert time.elapsed == pytest.approx(expected_s, rel=0.01)


def test_work_slower_than_the_rate_never_sleeps():
    """Chunks that already take longer than the rate allows are not slowed further."""
    time, throttler = run(rate=10e6, chunk=1 << 20, chunk_s=0.2, chunks=20)
    assert time.slept == [] and throttler.throttled_s == 0


def test_nothing_is_measured_before_a_check_interval_passes():
    """Within one check interval the throttler only counts (as Kafka's): a burst passes, the next check pays for it."""
    time = FakeTime()
    throttler = Throttler(1_000.0, clock_s=time, sleep=time.sleep, check_interval_s=0.3)
    for _ in range(10):
        time.now_s += 0.01
        throttler.maybe_throttle(1_000)
    assert time.slept == []
    time.now_s += 0.21  # 0.31 s since the start: 10,000 units that should have taken 10 s
    throttler.maybe_throttle(0)
    assert time.slept == [pytest.approx(9.69)]
