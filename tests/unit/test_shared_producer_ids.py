"""A transaction coordinator's producer-id pool shared by its threads
(raylog.actors.producer_ids, no Ray): a request thread that finds no id waits for the round
under way, woken when it ends."""

from __future__ import annotations

import threading

from raylog.actors.producer_ids import SharedProducerIdPool
from raylog.coordination.producer_ids import ProducerIdPool

#: A bound on a wait that must end (not a measure).
WAIT_S = 30.0


def test_a_waiter_wakes_when_the_round_under_way_ends():
    pool = SharedProducerIdPool(ProducerIdPool(fetch_count=2, low_count=1))
    assert pool.wait(WAIT_S) is False  # no round under way: nothing to wait for
    assert pool.start_fetch() == 2
    woke = []
    waiter = threading.Thread(target=lambda: woke.append(pool.wait(WAIT_S)))
    waiter.start()
    pool.fetch_failed()
    waiter.join(WAIT_S)
    assert woke == [False]
    assert pool.start_fetch() == 2
    waiter = threading.Thread(target=lambda: woke.append(pool.wait(WAIT_S)))
    waiter.start()
    pool.fetched([7, 8])
    waiter.join(WAIT_S)
    assert woke == [False, True] and pool.available() and pool.take() == 7
