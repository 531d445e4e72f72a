"""A leader's purgatory: each waiting request woken by what it waits for and nothing else (no Ray)."""

from __future__ import annotations

import pytest

from raylog.common import record_batch
from raylog.config import TopicConfig
from raylog.coordination.partition import Partition
from raylog.coordination.purgatory import (
    STALE_ENTRIES_MAX,
    DelayedDelete,
    DelayedFetch,
    DelayedProduce,
    DelayedRetry,
    Purgatory,
)
from raylog.errors import NotEnoughReplicasAfterAppendError, NotLeaderOrFollowerError, RequestTimedOutError
from raylog.protocol import FetchRequest
from raylog.types import PartitionInfo

DEADLINE = 10_000


@pytest.fixture
def leader(open_log, clock) -> Partition:
    """Broker 0 leads t-0 with followers 1 and 2 in sync (min ISR 2)."""
    config = TopicConfig.from_properties({"min.insync.replicas": "2"})
    p = Partition("t", 0, broker_id=0, log=open_log(), config=config, clock=clock)
    p.become_leader(0, replicas=(0, 1, 2), isr=(0, 1, 2))
    return p


def append(p: Partition, count: int = 1) -> int:
    """The end offset of ``count`` records appended on the leader."""
    return p.append_as_leader(record_batch.build([b"v"] * count), acks=-1).last_offset + 1


def follow(p: Partition, replica: int, offset: int, log_start: int = 0) -> None:
    """Follower ``replica``'s fetch at ``offset`` (its log end), as it tells the leader."""
    p.fetch(FetchRequest(offset, replica_id=replica, log_start_offset=log_start))


def parked(purgatory: Purgatory, op, p: Partition, now: float = 0) -> None:
    assert not op.try_complete(p, now)
    purgatory.park(op)


def test_an_acks_all_batch_is_woken_when_the_hw_covers_it_and_not_before(leader):
    purgatory = Purgatory()
    purgatory.wake(leader)  # (the first look takes the role as it is)
    first, second = DelayedProduce(append(leader), 0, DEADLINE), DelayedProduce(append(leader, 2), 0, DEADLINE)
    parked(purgatory, first, leader)
    parked(purgatory, second, leader)
    assert purgatory.sizes() == {"produce": 2}
    follow(leader, 1, 1)
    assert purgatory.wake(leader) == []  # one follower has offset 0: the HW waits for follower 2
    follow(leader, 2, 1)
    assert purgatory.wake(leader) == [first]
    assert first.try_complete(leader, 0) and first.answer is None
    follow(leader, 1, 3), follow(leader, 2, 3)
    assert purgatory.wake(leader) == [second] and len(purgatory) == 0


def test_a_leadership_change_wakes_every_operation_with_its_answer(leader):
    purgatory = Purgatory()
    purgatory.wake(leader)
    produce = DelayedProduce(append(leader), 0, DEADLINE)
    fetch_request = FetchRequest(1, replica_id=1)
    fetch = DelayedFetch(fetch_request, leader.fetch(fetch_request), DEADLINE)
    delete = DelayedDelete(1, 0, DEADLINE)
    for op in (produce, fetch, delete):
        parked(purgatory, op, leader)
    leader.become_follower(1, 1, (0, 1, 2), (0, 1, 2), 1)
    woken = purgatory.wake(leader)
    assert set(woken) == {produce, fetch, delete}
    for op in woken:
        assert op.try_complete(leader, 0)
    assert isinstance(produce.answer, NotLeaderOrFollowerError)
    assert isinstance(delete.answer, NotLeaderOrFollowerError)
    assert fetch.answer.error_code  # NOT_LEADER_OR_FOLLOWER as a code


def test_a_batch_replicated_after_the_isr_shrank_below_min_isr_fails_as_kafka_answers(leader):
    purgatory = Purgatory()
    purgatory.wake(leader)
    produce = DelayedProduce(append(leader), 0, DEADLINE)
    parked(purgatory, produce, leader)
    leader.apply_state(PartitionInfo("t", 0, 0, 0, (0, 1, 2), (0,), 1))  # the controller shrank the ISR
    assert purgatory.wake(leader) == [produce]
    assert produce.try_complete(leader, 0) and isinstance(produce.answer, NotEnoughReplicasAfterAppendError)


def test_a_consumer_fetch_wakes_on_the_hw_and_reads_again_until_it_has_min_bytes(leader):
    purgatory = Purgatory()
    purgatory.wake(leader)
    request = FetchRequest(0, min_bytes=1)
    fetch = DelayedFetch(request, leader.fetch(request), DEADLINE)
    parked(purgatory, fetch, leader)
    end = append(leader)
    assert purgatory.wake(leader) == []  # appended, not committed: a consumer sees nothing yet
    follow(leader, 1, end), follow(leader, 2, end)
    assert purgatory.wake(leader) == [fetch]
    assert fetch.try_complete(leader, 0) and len(fetch.answer.records) > 0


def test_a_fetch_that_read_too_little_parks_again_past_what_it_saw(leader):
    """Woken by a change that brings less than its min_bytes, it waits for the next one rather
    than being woken again at once (a busy loop)."""
    purgatory = Purgatory()
    purgatory.wake(leader)
    request = FetchRequest(0, min_bytes=1 << 20, replica_id=1)
    fetch = DelayedFetch(request, leader.fetch(request), DEADLINE)
    parked(purgatory, fetch, leader)
    append(leader)
    assert purgatory.wake(leader) == [fetch]
    parked(purgatory, fetch, leader)
    assert purgatory.wake(leader) == []
    append(leader)
    assert purgatory.wake(leader) == [fetch]


def test_a_follower_fetch_wakes_on_an_append_and_on_a_new_log_start(leader):
    purgatory = Purgatory()
    purgatory.wake(leader)
    request = FetchRequest(0, replica_id=1)
    fetch = DelayedFetch(request, leader.fetch(request), DEADLINE)
    parked(purgatory, fetch, leader)
    append(leader)
    assert purgatory.wake(leader) == [fetch] and fetch.try_complete(leader, 0) and len(fetch.answer.records)
    end = append(leader, 3)
    follow(leader, 1, end), follow(leader, 2, end)
    at_end = FetchRequest(end, replica_id=1)
    fetch = DelayedFetch(at_end, leader.fetch(at_end), DEADLINE)
    parked(purgatory, fetch, leader)
    leader.delete_records(2)
    assert purgatory.wake(leader) == [fetch]
    assert fetch.try_complete(leader, 0) and fetch.answer.log_start_offset == 2 and not len(fetch.answer.records)


def test_deadlines_end_the_wait_with_the_kafka_answer(leader):
    purgatory = Purgatory()
    purgatory.wake(leader)
    produce = DelayedProduce(append(leader), 0, deadline_ms=100)
    request = FetchRequest(leader.log.log_end_offset)
    fetch = DelayedFetch(request, leader.fetch(request), deadline_ms=200)
    for op in (produce, fetch):
        parked(purgatory, op, leader, now=50)
    assert purgatory.expired(99) == []
    assert purgatory.expired(100) == [produce]
    assert produce.try_complete(leader, 100) and isinstance(produce.answer, RequestTimedOutError)
    assert purgatory.expired(250) == [fetch]
    assert fetch.try_complete(leader, 250) and fetch.answer.error_code == 0 and not len(fetch.answer.records)


def test_delete_records_completes_once_the_low_watermark_reaches_it(leader):
    purgatory = Purgatory()
    purgatory.wake(leader)
    end = append(leader, 4)
    follow(leader, 1, end), follow(leader, 2, end)
    leader.delete_records(3)
    purgatory.wake(leader)  # (the log start moved: a new generation)
    delete = DelayedDelete(3, 0, DEADLINE)
    parked(purgatory, delete, leader)
    follow(leader, 1, end, log_start=3)
    assert purgatory.wake(leader) == []
    follow(leader, 2, end, log_start=3)
    assert purgatory.wake(leader) == [delete] and delete.try_complete(leader, 0) and delete.answer is None


def test_a_batch_after_a_sequence_gap_tries_again_once_another_batch_is_appended(leader):
    purgatory = Purgatory()
    purgatory.wake(leader)
    retry = DelayedRetry(RequestTimedOutError("gap"), DEADLINE)
    parked(purgatory, retry, leader)
    assert purgatory.wake(leader) == []
    append(leader)
    assert purgatory.wake(leader) == [retry] and retry.try_complete(leader, 0) and retry.answer is None
    late = DelayedRetry(RequestTimedOutError("gap"), deadline_ms=5)
    parked(purgatory, late, leader)
    assert late.try_complete(leader, 5) and isinstance(late.answer, RequestTimedOutError)


def test_operations_ended_by_their_deadline_leave_nothing_behind(leader):
    """A quiet partition's long polls end by their deadline, many times over: the heaps do not grow."""
    purgatory = Purgatory()
    purgatory.wake(leader)
    request = FetchRequest(0)
    for _ in range(10 * STALE_ENTRIES_MAX):
        fetch = DelayedFetch(request, leader.fetch(request), DEADLINE)
        parked(purgatory, fetch, leader)
        purgatory.unpark(fetch)
    assert len(purgatory) == 0
    assert sum(len(heap) for heap in purgatory._heaps.values()) <= STALE_ENTRIES_MAX + 1
