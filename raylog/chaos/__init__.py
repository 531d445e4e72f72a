"""Jepsen-style fault runs against raylog: a history recorder and its checker (plain
Python, no Ray), the workloads that record histories, the nemesis that injects faults,
and the soak runner shared by ``tests/cluster/test_fault_runs.py`` and ``raylog bench soak``.

- :mod:`raylog.chaos.history`: the operations clients attempted, with their outcomes.
- :mod:`raylog.chaos.checker`: Jepsen's anomaly classes for Kafka-like logs, counted.
- :mod:`raylog.chaos.remote_log_invariants`: tiered storage's promises, checked against a
  metadata topic, an object store and local logs.
- :mod:`raylog.chaos.faulty`: a cluster handle whose actor calls can be delayed/reordered.
- :mod:`raylog.chaos.workload`: producers and consumers that record what they did.
- :mod:`raylog.chaos.nemesis`: seeded faults, bounded in time and count, each healed.
- :mod:`raylog.chaos.soak`: one Ray cluster, many seeded runs, a summary line per run.
- :mod:`raylog.chaos.txn_copier`: Kafka's transactional copier test through faults
  (``raylog bench txn-copier``, and ``tests/cluster/test_transaction_faults.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T], timeout_s: float = 30.0, interval_s: float = 0.05, message: str = "condition"
) -> T:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{message} not reached within {timeout_s} s")
        time.sleep(interval_s)
