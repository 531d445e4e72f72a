"""A rate limiter that sleeps its caller (Kafka's ``Throttler``): the log cleaner's I/O
is held to ``log.cleaner.io.max.bytes.per.second``.

The caller reports what it did (:meth:`Throttler.maybe_throttle`); once a check interval
has passed, the throttler compares the rate of that interval with the desired one and,
when it was faster, sleeps for as long as the same amount of work should have taken at
the desired rate, minus the time it did take. The clock and the sleep are parameters, so
tests run it on a fake clock.

Concurrency: one caller thread (each cleaning round has its own throttler).
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: How often the rate is measured; Kafka's cleaner uses 300 ms.
CHECK_INTERVAL_S = 0.3


class Throttler:
    """See the module docstring.

    Example:
        >>> throttler = Throttler(10e6)          # 10 MB/s
        >>> throttler.maybe_throttle(4096)       # after reading 4 KiB; sleeps when too fast
    """

    def __init__(
        self,
        rate_per_s: float,
        *,
        clock_s: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        check_interval_s: float = CHECK_INTERVAL_S,
    ):
        assert rate_per_s > 0, f"a throttler needs a positive rate, got {rate_per_s}"
        self.rate_per_s = rate_per_s
        self._clock_s = clock_s
        self._sleep = sleep
        self._check_interval_s = check_interval_s
        self._period_start_s = clock_s()
        self._observed = 0.0
        #: Seconds slept so far (for metrics and tests).
        self.throttled_s = 0.0

    def maybe_throttle(self, observed: float) -> None:
        """Count ``observed`` units of work; sleep if the last interval ran too fast."""
        self._observed += observed
        elapsed_s = self._clock_s() - self._period_start_s
        if elapsed_s <= self._check_interval_s or self._observed <= 0:
            return
        if self._observed / elapsed_s > self.rate_per_s:
            pause_s = self._observed / self.rate_per_s - elapsed_s
            if pause_s > 0:
                self._sleep(pause_s)
                self.throttled_s += pause_s
        self._period_start_s = self._clock_s()
        self._observed = 0.0
