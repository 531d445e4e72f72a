"""Helpers shared by the test suites."""

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


def record_rows(table) -> list[tuple]:
    """``(value, key, timestamp_ms, headers)`` per row of a decoded batch table."""
    columns = ("value", "key", "timestamp_ms", "headers")
    return list(zip(*(table.column(c).to_pylist() for c in columns), strict=True))
