"""The leader's ISR bookkeeping (no Ray): proposals live until the controller's word on them is
known, states and answers only move forward, and a follower under steady load stays in sync."""

from __future__ import annotations

import pytest

from raylog.common import record_batch
from raylog.config import TopicConfig
from raylog.coordination.partition import Partition
from raylog.types import PartitionInfo

LAG_MS = 1000


@pytest.fixture
def leader(open_log, clock):
    """Broker 1 leads epoch 3 (partition epoch 7) with replicas (1, 2); ``isr`` as given."""

    def make(isr=(1,)) -> Partition:
        config = TopicConfig.from_properties({"replica.lag.time.max.ms": str(LAG_MS)})
        part = Partition("t", 0, broker_id=1, log=open_log(), config=config, clock=clock)
        part.become_leader(leader_epoch=3, replicas=(1, 2), isr=isr, partition_epoch=7)
        return part

    return make


def _append(part: Partition, count: int = 1) -> None:
    part.append_as_leader(record_batch.build([b"x"] * count), acks=1)


def _catch_up_and_propose(part: Partition) -> tuple[int, ...]:
    """Follower 2 fetches up to the leader's end; the leader proposes it back into the ISR."""
    _append(part, 3)
    part.read(part.log.log_end_offset, 1 << 20, replica_id=2)
    proposal = part.propose_isr()
    assert proposal == (1, 2)
    return proposal


def test_an_equal_epoch_repush_keeps_the_pending_proposal_and_the_hw_waits_for_its_member(leader):
    """Defect 3: a leader told its own state again (same leader and partition epochs) keeps the
    proposal it has out, so the HW does not pass the member the controller may be admitting."""
    part = leader()
    _catch_up_and_propose(part)
    member_end = part.log.log_end_offset
    part.become_leader(leader_epoch=3, replicas=(1, 2), isr=(1,), partition_epoch=7)  # e.g. alter_configs
    _append(part, 2)
    assert part.pending_isr == (1, 2)
    assert part.high_watermark <= member_end
    part.apply_isr((1, 2), partition_epoch=8)  # the controller admitted it
    assert part.isr == (1, 2) and part.high_watermark == member_end


def test_a_proposal_whose_answer_is_unknown_stays_pending(leader):
    """Defect 3: a timed-out alter_isr may have been committed: the proposal stays pending (the
    HW keeps counting its members) and is sent again, unchanged."""
    part = leader()
    proposal = _catch_up_and_propose(part)
    member_end = part.log.log_end_offset
    part.isr_answer(proposal, None)  # no answer in time
    _append(part, 2)
    assert part.pending_isr == proposal
    assert part.high_watermark <= member_end
    assert part.propose_isr() is None  # nothing new while one is out
    assert part.isr_to_resend() == proposal


def test_a_refused_proposal_is_dropped_only_when_the_controller_says_it_holds_another_state(leader):
    """A refusal with the controller's current state: a newer state replaces the proposal; the
    same epochs (e.g. a member that is not live) mean it was not applied, so it is dropped."""
    part = leader()
    proposal = _catch_up_and_propose(part)
    same = PartitionInfo("t", 0, leader=1, leader_epoch=3, replicas=(1, 2), isr=(1,), partition_epoch=7)
    part.isr_answer(proposal, (False, same))
    assert part.pending_isr is None and part.isr == (1,)
    proposal = part.propose_isr()
    newer = PartitionInfo("t", 0, leader=1, leader_epoch=3, replicas=(1, 2), isr=(1, 2), partition_epoch=9)
    part.isr_answer(proposal, (False, newer))
    assert part.pending_isr is None and (part.isr, part.partition_epoch) == ((1, 2), 9)


def test_a_late_answer_never_moves_the_isr_or_the_partition_epoch_backwards(leader):
    """Defect 3: answers and states arrive out of order; only a newer partition epoch counts."""
    part = leader(isr=(1, 2))
    part.apply_isr((1, 2), partition_epoch=9)
    part.apply_isr((1,), partition_epoch=8)  # an older answer, delivered late
    assert (part.isr, part.partition_epoch) == ((1, 2), 9)
    part.become_leader(leader_epoch=3, replicas=(1, 2), isr=(1,), partition_epoch=8)  # an older push
    assert (part.isr, part.partition_epoch) == ((1, 2), 9)


def test_a_follower_one_fetch_behind_under_steady_load_stays_in_sync(leader, clock):
    """Defect 9: a follower that always fetches up to the leader's end as of its previous fetch
    (the leader appends between its fetches) is caught up, as in Kafka: never evicted."""
    part = leader(isr=(1, 2))
    part.read(0, 1 << 20, replica_id=2)
    for _ in range(20):
        end_at_last_fetch = part.log.log_end_offset
        _append(part)
        clock.advance(LAG_MS // 4)
        part.read(end_at_last_fetch, 1 << 20, replica_id=2)
        assert part.propose_isr() is None, f"follower 2 evicted at {clock()}"


def test_a_follower_that_stops_fetching_is_evicted_after_the_lag_time(leader, clock):
    """The other side of defect 9's rule: no fetches for replica.lag.time.max.ms leaves the ISR."""
    part = leader(isr=(1, 2))
    part.read(0, 1 << 20, replica_id=2)
    _append(part)
    clock.advance(LAG_MS + 1)
    assert part.propose_isr() == (1,)
