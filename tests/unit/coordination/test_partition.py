"""The partition leader's rules over a real log: acks, min ISR, HW, fencing, sequences (no Ray)."""

from __future__ import annotations

import pytest

from raylog.config import TopicConfig
from raylog.coordination.partition import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, Partition, SequenceGap
from raylog.errors import (
    FencedLeaderEpochError,
    InvalidRequiredAcksError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
)
from raylog.storage import record_batch


@pytest.fixture
def partition(open_log):
    def make(**config) -> Partition:
        part = Partition("t", 0, broker_id=1, log=open_log(), config=TopicConfig.from_properties(config))
        part.become_leader(leader_epoch=3, replicas=(1,), isr=(1,))
        return part

    return make


def test_leader_appends_and_serves_below_the_high_watermark(partition):
    """A sole in-sync leader moves the HW with each append; consumers read up to it."""
    part = partition()
    info = part.append_as_leader(record_batch.build([b"a", b"b"]), acks=1)
    assert (info.first_offset, part.high_watermark) == (0, 2)
    result = part.read(0, 1 << 20)
    assert record_batch.decode_table(result.data).column("value").to_pylist() == [b"a", b"b"]
    assert part.list_offset(EARLIEST_TIMESTAMP) == (0, -1) and part.list_offset(LATEST_TIMESTAMP) == (2, -1)


def test_acks_and_min_insync_replicas(partition):
    """acks outside 0/1/-1 is refused; acks=all needs min.insync.replicas in the ISR."""
    part = partition(**{"min.insync.replicas": "2"})
    with pytest.raises(InvalidRequiredAcksError):
        part.append_as_leader(record_batch.build([b"x"]), acks=2)
    with pytest.raises(NotEnoughReplicasError):
        part.append_as_leader(record_batch.build([b"x"]), acks=-1)
    part.append_as_leader(record_batch.build([b"x"]), acks=1)
    assert part.log.log_end_offset == 1


def test_followers_hold_the_high_watermark_back(partition):
    """With a follower in the ISR, the HW is the smallest log end offset among them."""
    part = partition()
    part.become_leader(4, replicas=(1, 2), isr=(1, 2))
    part.append_as_leader(record_batch.build([b"a", b"b", b"c"]), acks=1)
    assert part.high_watermark == 0
    assert part.read(0, 1 << 20).data == b""  # nothing committed yet
    part.read(2, 1 << 20, replica_id=2)  # the follower has offsets below 2
    assert part.high_watermark == 2
    with pytest.raises(NotLeaderOrFollowerError):
        part.read(0, 100, replica_id=9)


def test_epoch_fencing_and_role(partition):
    """Stale epochs are fenced, future ones unknown; a non-leader refuses produce and fetch."""
    part = partition()
    with pytest.raises(FencedLeaderEpochError):
        part.read(0, 100, current_leader_epoch=2)
    with pytest.raises(UnknownLeaderEpochError):
        part.read(0, 100, current_leader_epoch=9)
    part.leader = 2
    with pytest.raises(NotLeaderOrFollowerError):
        part.append_as_leader(record_batch.build([b"x"]), acks=1)


def test_idempotent_batches_append_in_sequence_order_once(partition):
    """Sequence gaps wait, retries return their first offset, and order follows sequences."""
    part = partition()

    def batch(sequence, values):
        return record_batch.build(values, producer_id=5, producer_epoch=0, base_sequence=sequence)

    part.append_as_leader(batch(0, [b"a"]), acks=1)
    second, third = batch(1, [b"b", b"c"]), batch(3, [b"d"])
    with pytest.raises(SequenceGap):
        part.append_as_leader(third, acks=1)
    assert part.append_as_leader(second, acks=1).first_offset == 1
    assert part.append_as_leader(third, acks=1).first_offset == 3
    assert part.append_as_leader(second, acks=1) == 1  # a retry: its original offset
    assert part.log.log_end_offset == 4
    with pytest.raises(SequenceGap):  # unknown producer, not at its start: wait a while
        part.append_as_leader(record_batch.build([b"z"], producer_id=6, producer_epoch=0, base_sequence=9), acks=1)
    late = record_batch.build([b"z"], producer_id=6, producer_epoch=0, base_sequence=9)
    assert part.append_as_leader(late, acks=1, accept_unknown_producer=True).first_offset == 4


def test_an_altered_config_applies_to_the_next_produce_and_retention_round(partition, clock):
    """update_config: a lowered segment.bytes rolls at the next appends, a lowered retention.ms
    deletes the old segments at the next retention round, and min.insync.replicas refuses the
    next acks=all produce."""
    part = partition()
    part.update_config(TopicConfig.from_properties({"segment.bytes": "1024"}))
    for _ in range(4):
        part.append_as_leader(record_batch.build([b"x" * 600], timestamps_ms=[clock.now_ms]), acks=-1)
    assert part.log.segment_count == 4
    clock.advance(60_000)
    assert part.log.apply_retention() == []  # the default keeps a week
    part.update_config(TopicConfig.from_properties({"retention.ms": "1000", "min.insync.replicas": "2"}))
    assert len(part.log.apply_retention()) == 3  # never the active segment
    with pytest.raises(NotEnoughReplicasError):
        part.append_as_leader(record_batch.build([b"y"]), acks=-1)
