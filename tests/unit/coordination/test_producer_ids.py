"""The pool of producer ids a transaction coordinator fetches ahead (no Ray)."""

from __future__ import annotations

import pytest

from raylog.coordination import producer_ids
from raylog.coordination.producer_ids import ProducerIdPool
from raylog.errors import CoordinatorLoadInProgressError


def test_ids_are_taken_at_once_and_the_next_round_is_asked_for_before_they_run_out():
    pool = ProducerIdPool(fetch_count=4, low_count=2)
    with pytest.raises(CoordinatorLoadInProgressError):
        pool.take()  # nothing fetched yet: retriable, never a wait
    assert pool.start_fetch() == 4
    assert pool.start_fetch() == 0  # one round at a time
    pool.fetched([10, 11, 12, 13])
    assert pool.start_fetch() == 0  # enough held
    assert [pool.take(), pool.take()] == [10, 11]
    assert pool.start_fetch() == 0  # 2 left
    assert pool.take() == 12
    assert pool.start_fetch() == 4  # fewer than 2 left: the next round, before they run out
    pool.fetch_failed()
    assert pool.start_fetch() == 4  # a failed round is tried again
    pool.fetched([20, 21, 22, 23])
    assert [pool.take() for _ in range(5)] == [13, 20, 21, 22, 23]


def test_a_failed_round_is_retried_after_a_backoff_that_doubles_until_a_round_brings_ids(monkeypatch):
    """Ids are fetched ahead so that a producer gets one while the controller is silent: a
    round that failed (a busy controller's timeout) is not left until the next producer
    asks, the owner fetches again after the backoff this returns, longer each time in a row."""
    monkeypatch.setattr(producer_ids, "RETRY_BACKOFF_S", 0.5)
    monkeypatch.setattr(producer_ids, "RETRY_BACKOFF_MAX_S", 3.0)
    pool = ProducerIdPool(fetch_count=2, low_count=1)
    backoffs = []
    for _ in range(5):
        assert pool.start_fetch() == 2
        backoffs.append(pool.fetch_failed())
    assert backoffs == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert pool.start_fetch() == 2
    pool.fetched([1, 2])
    assert [pool.take(), pool.take()] == [1, 2] and pool.start_fetch() == 2
    assert pool.fetch_failed() == 0.5  # a round that brought ids starts the backoff anew
