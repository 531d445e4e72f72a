"""The partition leader's rules over a real log: acks, min ISR, HW, fencing, sequences (no Ray)."""

from __future__ import annotations

import pytest

from raylog.common import record_batch
from raylog.common.requests import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
)
from raylog.config import TopicConfig
from raylog.coordination import partition as partition_module
from raylog.coordination.partition import Partition, SequenceGap
from raylog.errors import (
    FencedLeaderEpochError,
    InvalidRequestError,
    InvalidRequiredAcksError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetMovedToTieredStorageError,
    OffsetNotAvailableError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    PolicyViolationError,
    UnknownLeaderEpochError,
)
from raylog.protocol import FetchRequest, error_of
from raylog.storage import producer_snapshot


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


def test_every_list_offsets_sentinel(partition):
    """Kafka's sentinels: the local log start is the log start (no remote tier), the highest
    tiered offset is -1, MAX_TIMESTAMP finds the first record of the largest timestamp with
    it, and (-1, -1) on an empty partition."""
    part = partition()
    assert part.list_offset(MAX_TIMESTAMP) == (-1, -1) and part.list_offset(EARLIEST_LOCAL_TIMESTAMP) == (0, -1)
    part.append_as_leader(record_batch.build([b"a", b"b", b"c"], timestamps_ms=[20, 70, 70]), acks=1)
    part.append_as_leader(record_batch.build([b"d"], timestamps_ms=[40]), acks=1)
    assert part.list_offset(MAX_TIMESTAMP) == (1, 70)
    assert part.list_offset(LATEST_TIERED_TIMESTAMP) == (-1, -1)
    part.log.increment_log_start_offset(2)
    assert part.list_offset(EARLIEST_LOCAL_TIMESTAMP) == part.list_offset(EARLIEST_TIMESTAMP) == (2, -1)
    assert part.list_offset(MAX_TIMESTAMP) == (2, 70)


def test_a_tiered_partition_starts_where_its_remote_tier_does_and_sends_reads_below_its_local_log_there(partition):
    """On a tiered partition the log start is the remote tier's first offset while it holds
    offsets below the local log's (never below DeleteRecords'): a consumer's fetch there is
    sent to the remote tier, a follower's too (its answer carrying the local log start), and
    until the pump has read the metadata through, what may lie there is not answered."""
    part = partition(**{"remote.storage.enable": "true", "segment.bytes": "1024"})
    part.update_config(part.config)  # (the fixture's log was opened with the defaults)
    for i in range(12):
        part.append_as_leader(record_batch.build([b"%03d" % i + b"x" * 200], timestamps_ms=[i]), acks=1)
    local = part.log.segment_base_offsets[2]
    part.delete_local_segments_below(local)
    assert part.log.log_start_offset == local
    with pytest.raises(OffsetNotAvailableError):  # the remote tier's extent not known yet
        part.list_offset(EARLIEST_TIMESTAMP)
    with pytest.raises(OffsetNotAvailableError):
        part.read(0, 1 << 20)
    # Nor does it say it starts at its local start: a follower taking that start for the
    # partition's would checkpoint it, and never serve the remote tier below it when it leads.
    assert part.log_start_offset == 0 and part.fetch(FetchRequest(local, replica_id=2)).log_start_offset == 0
    part.remote_tier_ready, part.remote_log_start_offset, part.highest_remote_offset = True, 0, local - 1
    assert part.log_start_offset == 0 and part.list_offset(EARLIEST_TIMESTAMP) == (0, -1)
    assert part.list_offset(EARLIEST_LOCAL_TIMESTAMP) == (local, -1)
    assert part.list_offset(LATEST_TIERED_TIMESTAMP) == (local - 1, -1)
    with pytest.raises(OffsetMovedToTieredStorageError):
        part.read(1, 1 << 20)
    answer = part.fetch(FetchRequest(1, replica_id=2))
    assert isinstance(error_of(answer), OffsetMovedToTieredStorageError) and answer.log_start_offset == local
    consumer = part.fetch(FetchRequest(local))
    assert error_of(consumer) is None and consumer.log_start_offset == 0

    part.delete_records(1)  # DeleteRecords below the local log start: the remote tier's part goes
    assert part.log_start_offset == 1 and part.log.log_start_offset == local
    with pytest.raises(OffsetOutOfRangeError):
        part.read(0, 1 << 20)
    part.remote_log_start_offset = local + 1  # remote retention took every copy below the local log
    assert part.log_start_offset == local


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


def idempotent(values, sequence, producer_id=5, **options) -> bytes:
    return record_batch.build(values, producer_id=producer_id, producer_epoch=0, base_sequence=sequence, **options)


def test_idempotent_batches_append_in_sequence_order_once(partition):
    """Sequence gaps wait, retries return their original offsets, and order follows sequences."""
    part = partition()
    part.append_as_leader(idempotent([b"a"], 0), acks=1)
    second, third = idempotent([b"b", b"c"], 1), idempotent([b"d"], 3)
    with pytest.raises(SequenceGap):
        part.append_as_leader(third, acks=1)
    assert part.append_as_leader(second, acks=1).first_offset == 1
    assert part.append_as_leader(third, acks=1).first_offset == 3
    retry = part.append_as_leader(second, acks=1)  # a retry: its original offsets, nothing written
    assert (retry.first_offset, retry.last_offset, retry.batches) == (1, 2, ())
    assert part.log.log_end_offset == 4


def test_a_chain_of_a_producers_next_batches_is_admitted_or_refused_whole(partition):
    """Several batches of one idempotent producer in one append (a Kafka connection's
    pipelined batches, sent together) are appended when they are its next batches in
    order; a chain whose first batch was appended before is refused as out of order (each
    is then sent alone), and a chain that breaks its sequence, mixes producers or epochs,
    or holds a transaction's batch is refused as a bad request, nothing written."""
    part = partition()
    part.append_as_leader(idempotent([b"a"], 0), acks=1)
    chain = idempotent([b"b"], 1) + idempotent([b"c", b"d"], 2) + idempotent([b"e"], 4)
    info = part.append_as_leader(chain, acks=1)
    assert (info.first_offset, info.last_offset, len(info.batches)) == (1, 4, 3)
    assert part.append_as_leader(idempotent([b"f"], 5), acks=1).first_offset == 5  # the state follows the chain
    with pytest.raises(OutOfOrderSequenceError):
        part.append_as_leader(idempotent([b"f"], 5) + idempotent([b"g"], 6), acks=1)
    refused = (
        idempotent([b"g"], 6) + idempotent([b"h"], 8),  # sequence 7 missing
        idempotent([b"g"], 6) + idempotent([b"h"], 7, producer_id=9),
        idempotent([b"g"], 6) + record_batch.build([b"h"], producer_id=5, producer_epoch=1, base_sequence=0),
        idempotent([b"g"], 6) + idempotent([b"h"], 7, transactional=True),
    )
    for data in refused:
        with pytest.raises(InvalidRequestError):
            part.append_as_leader(data, acks=1)
    assert part.log.log_end_offset == 6
    assert part.append_as_leader(idempotent([b"g"], 6), acks=1).first_offset == 6


def test_a_producer_not_known_waits_for_its_first_unacknowledged_batch(partition):
    """Batches overtaken in transit (sequence 1 before 0) wait, however long, for the
    producer's first unacknowledged one, then append in sequence order."""
    part = partition()
    first, second = idempotent([b"a"], 0, producer_id=6), idempotent([b"b"], 1, producer_id=6)
    with pytest.raises(SequenceGap):
        part.append_as_leader(second, acks=1, first_unacked_sequence=0)
    assert part.append_as_leader(first, acks=1, first_unacked_sequence=0).first_offset == 0
    assert part.append_as_leader(second, acks=1, first_unacked_sequence=0).first_offset == 1
    resumed = idempotent([b"c"], 9, producer_id=7)  # 0..8 acknowledged, state lost
    assert part.append_as_leader(resumed, acks=1, first_unacked_sequence=9).first_offset == 2


def test_a_retried_acks_all_batch_is_done_only_when_the_isr_has_it(partition):
    """A duplicate of an acks=all batch that only the leader has is not done: like the
    first attempt, it waits for the HW, and is answered with the original offsets."""
    part = partition(**{"min.insync.replicas": "2"})
    part.become_leader(4, replicas=(1, 2, 3), isr=(1, 2, 3))
    data = idempotent([b"a", b"b"], 0)
    first = part.append_as_leader(data, acks=-1)
    retry = part.append_as_leader(data, acks=-1)
    assert (retry.first_offset, retry.last_offset) == (first.first_offset, first.last_offset) == (0, 1)
    assert part.log.log_end_offset == 2
    assert part.replication_done(retry.last_offset + 1, 4) == (False, None)
    part.read(2, 1 << 20, replica_id=2)
    assert part.replication_done(retry.last_offset + 1, 4) == (False, None)  # broker 3 lacks it
    part.read(2, 1 << 20, replica_id=3)
    assert part.replication_done(retry.last_offset + 1, 4) == (True, None)


def test_a_retried_batch_gets_the_isr_errors_of_any_acks_all_produce(partition):
    """A duplicate is refused with NOT_ENOUGH_REPLICAS when the ISR is already too small,
    and gets NOT_ENOUGH_REPLICAS_AFTER_APPEND when it shrank below min.insync.replicas while
    it waited; and once leadership moved, neither attempt counts as done well."""
    part = partition(**{"min.insync.replicas": "2"})
    part.become_leader(4, replicas=(1, 2, 3), isr=(1, 2, 3))
    data = idempotent([b"a"], 0)
    part.append_as_leader(data, acks=-1)
    retry = part.append_as_leader(data, acks=-1)
    part.apply_isr((1,), partition_epoch=1)  # the followers fell out: the HW is the leader's
    done, error = part.replication_done(retry.last_offset + 1, 4)
    assert done and isinstance(error, NotEnoughReplicasAfterAppendError)
    with pytest.raises(NotEnoughReplicasError):
        part.append_as_leader(data, acks=-1)
    part.become_follower(2, 5, replicas=(1, 2, 3), isr=(2, 3))
    done, error = part.replication_done(retry.last_offset + 1, 4)
    assert done and isinstance(error, NotLeaderOrFollowerError)


SMALL_SEGMENTS = {"segment.bytes": "1024"}


def big(values_count=1, size=600) -> list[bytes]:
    """Values that fill most of a 1024-byte segment (each batch rolls a new one)."""
    return [b"x" * size] * values_count


def reopen(open_log, clock, **config) -> Partition:
    """The partition as a restarted replica finds it on disk, leading again."""
    topic_config = TopicConfig.from_properties(config)
    part = Partition("t", 0, 1, open_log(**topic_config.log_config().to_properties()), topic_config, clock=clock)
    part.become_leader(leader_epoch=9, replicas=(1,), isr=(1,))
    return part


def test_a_retry_after_a_restart_is_a_duplicate_though_its_batch_is_in_an_old_segment(open_log, clock):
    """Producer state survives a restart (snapshots written at each roll, then the log after
    the newest): a retry of a producer's last batch, now several segments back, is answered
    with its original offset and not written again."""
    part = reopen(open_log, clock, **SMALL_SEGMENTS)
    last = idempotent(big(), 0, producer_id=5)
    original = part.append_as_leader(last, acks=1)
    for _ in range(4):
        part.append_as_leader(record_batch.build(big()), acks=1)
    assert part.log.segment_count == 5
    restarted = reopen(open_log, clock, **SMALL_SEGMENTS)
    retry = restarted.append_as_leader(last, acks=1)
    assert retry.first_offset == original.first_offset and restarted.log.log_end_offset == 5


def test_a_corrupt_snapshot_is_set_aside_for_an_older_one_or_the_log(open_log, clock, tmp_path):
    """A snapshot whose CRC fails is deleted and an older one (or none: the whole log) used;
    the state is the same either way."""
    part = reopen(open_log, clock, **SMALL_SEGMENTS)
    last = idempotent(big(), 0, producer_id=5)
    part.append_as_leader(last, acks=1)
    for _ in range(3):
        part.append_as_leader(record_batch.build(big()), acks=1)
    part.append_as_leader(idempotent(big(), 1, producer_id=6), acks=1)
    directory = part.log.dir
    assert producer_snapshot.offsets(directory) == [1, 2, 3, 4]
    for corrupt in ([4], [1, 2, 3]):
        for offset in corrupt:
            path = producer_snapshot.path(directory, offset)
            data = bytearray(open(path, "rb").read())
            data[-1] ^= 0xFF
            open(path, "wb").write(bytes(data))
        restarted = reopen(open_log, clock, **SMALL_SEGMENTS)
        assert restarted.append_as_leader(last, acks=1).first_offset == 0
        assert restarted.append_as_leader(idempotent(big(), 1, producer_id=6), acks=1).first_offset == 4
        assert restarted.log.log_end_offset == 5
    assert producer_snapshot.offsets(directory) == []


def test_truncation_and_retention_take_the_snapshots_of_what_they_remove(open_log, clock):
    """Cutting the log below a snapshot deletes it (its batches are gone) and forgets the
    producers of the cut batches; retention deletes the snapshots below the new log start;
    checkpoints snapshot the state only when it changed, keeping segment bases' snapshots
    and the newest."""
    part = reopen(open_log, clock, **SMALL_SEGMENTS)
    for pid in range(5):  # producer p at offset p, one segment each
        part.append_as_leader(idempotent(big(), 0, producer_id=pid, timestamps_ms=[clock.now_ms]), acks=1)
    directory = part.log.dir
    assert producer_snapshot.offsets(directory) == [1, 2, 3, 4]
    part.checkpoint_producer_state()
    assert producer_snapshot.offsets(directory) == [1, 2, 3, 4, 5]
    part.checkpoint_producer_state()  # nothing new: no new file
    assert producer_snapshot.offsets(directory) == [1, 2, 3, 4, 5]
    part.become_follower(2, 10, replicas=(1, 2), isr=(2,))
    part.truncate_to_leader_end(3)
    assert producer_snapshot.offsets(directory) == [1, 2, 3]
    assert sorted(part.producers.last_offsets()) == [0, 1, 2]
    fetched = idempotent(big(), 0, producer_id=8)  # as the leader stamped it at offset 3
    fetched = record_batch.stamp(record_batch.read_header(fetched), 3, 10) + fetched[record_batch.STAMP.size :]
    part.append_as_follower(fetched, leader_high_watermark=0)  # rolls at 3
    part.checkpoint_producer_state()
    assert producer_snapshot.offsets(directory) == [1, 2, 3, 4]
    part.update_config(TopicConfig.from_properties({**SMALL_SEGMENTS, "retention.bytes": part.log.size_bytes // 2}))
    part.log.apply_retention(part.log.log_end_offset)  # keeps 2 of the 4 (equal) segments: from offset 2 on
    part.checkpoint_producer_state()
    assert part.log.log_start_offset == 2 and producer_snapshot.offsets(directory) == [2, 3, 4]
    assert sorted(part.producers.last_offsets()) == [0, 1, 2, 8]  # state outlives the segments


def test_idle_producers_expire_and_a_restart_does_not_bring_them_back(open_log, clock):
    """producer.id.expiration.ms after the replica appended its last batch a producer is
    forgotten at the next checkpoint, whatever its records' timestamps (a backfill of old
    events is not idle), and the snapshot written then keeps it forgotten across a restart."""
    config = {**SMALL_SEGMENTS, "producer.id.expiration.ms": "60000"}
    part = reopen(open_log, clock, **config)
    part.append_as_leader(idempotent([b"a"], 0, producer_id=1, timestamps_ms=[clock.now_ms]), acks=1)
    clock.advance(30_000)
    backfill = [clock.now_ms - 2 * 24 * 3600 * 1000]
    part.append_as_leader(idempotent([b"b"], 0, producer_id=2, timestamps_ms=backfill), acks=1)
    clock.advance(30_000)
    part.checkpoint_producer_state()
    assert sorted(part.producers.last_offsets()) == [2]
    assert sorted(reopen(open_log, clock, **config).producers.last_offsets()) == [2]


def test_compaction_keeps_the_batch_a_producers_state_is_rebuilt_from(open_log, clock):
    """The cleaner keeps each known producer's last batch (a record of it) though newer
    records replace its keys, so after a restart its retry is still a duplicate."""
    config = {**SMALL_SEGMENTS, "cleanup.policy": "compact"}
    part = reopen(open_log, clock, **config)
    last = idempotent(big(), 0, producer_id=5, keys=[b"k"])
    part.append_as_leader(last, acks=1)
    for _ in range(3):
        part.append_as_leader(record_batch.build(big(), keys=[b"k"]), acks=1)
    part.log.roll()
    part.log.clean(force=True, max_offset=part.high_watermark, producer_last_offsets=part.producers.last_offsets())
    for snapshot in producer_snapshot.offsets(part.log.dir):  # and no snapshot to lean on
        producer_snapshot.delete(part.log.dir, snapshot)
    restarted = reopen(open_log, clock, **config)
    assert restarted.append_as_leader(last, acks=1).first_offset == 0
    assert restarted.log.log_end_offset == 4


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
    assert part.log.apply_retention(part.high_watermark) == []  # the default keeps a week
    part.update_config(TopicConfig.from_properties({"retention.ms": "1000", "min.insync.replicas": "2"}))
    assert len(part.log.apply_retention(part.high_watermark)) == 3  # never the active segment
    with pytest.raises(NotEnoughReplicasError):
        part.append_as_leader(record_batch.build([b"y"]), acks=-1)


def test_a_produce_request_above_the_request_limit_fails_whole(partition, monkeypatch):
    """A request larger than MAX_REQUEST_BYTES (Kafka's socket.request.max.bytes) fails with
    INVALID_REQUEST before anything of it is written, though each batch would fit."""
    part = partition()
    batch = record_batch.build([b"v" * 100])
    monkeypatch.setattr(partition_module, "MAX_REQUEST_BYTES", 2 * len(batch))
    with pytest.raises(InvalidRequestError, match="above the limit"):
        part.append_as_leader(batch + batch + batch, acks=1)
    assert part.log.log_end_offset == 0
    part.append_as_leader(batch, acks=1)
    assert part.log.log_end_offset == 1


def test_delete_records_moves_the_log_start_and_waits_on_the_isrs_low_watermark(partition):
    """Kafka's DeleteRecords on the leader: records below an offset at most the HW go (-1: the
    HW); the low watermark, the smallest log start in the ISR, follows once the follower says
    (in its fetch) that it deleted them too. A compact-only topic refuses it
    (POLICY_VIOLATION), a non-leader too."""
    part = partition()
    part.become_leader(4, replicas=(1, 2), isr=(1, 2))
    part.append_as_leader(record_batch.build([b"a", b"b", b"c", b"d", b"e"]), acks=1)
    part.fetch(FetchRequest(5, replica_id=2, log_start_offset=0))
    assert part.high_watermark == 5
    with pytest.raises(OffsetOutOfRangeError):
        part.delete_records(6)
    assert part.delete_records(3) == 3
    assert (part.log.log_start_offset, part.low_watermark) == (3, 0)
    assert error_of(part.fetch(FetchRequest(2))).__class__ is OffsetOutOfRangeError
    part.fetch(FetchRequest(5, replica_id=2, log_start_offset=3))
    assert part.low_watermark == 3
    assert part.delete_records(-1) == 5 and part.log.log_start_offset == 5
    compacted = partition(**{"cleanup.policy": "compact"})
    with pytest.raises(PolicyViolationError):
        compacted.delete_records(0)
    part.leader = 2
    with pytest.raises(NotLeaderOrFollowerError):
        part.delete_records(5)


def test_a_follower_deletes_what_its_leader_deleted_up_to_its_own_high_watermark(open_log):
    """A follower moves its log start to the leader's, but never past its own HW (records it
    does not know to be committed)."""
    follower = Partition("t", 0, broker_id=2, log=open_log(), config=TopicConfig())
    follower.become_follower(leader=1, leader_epoch=3, replicas=(1, 2), isr=(1, 2))
    follower.append_as_follower(record_batch.build([b"a", b"b", b"c", b"d"], now_ms=1), leader_high_watermark=2)
    follower.follow_log_start(3)
    assert follower.log.log_start_offset == 2
    follower.append_as_follower(b"", leader_high_watermark=4)
    follower.follow_log_start(3)
    assert follower.log.log_start_offset == 3


def test_a_tiered_follower_follows_a_log_start_below_its_local_one(open_log):
    """A leader's DeleteRecords below a tiered follower's local log start moves the follower's
    partition start too (checkpointed), so that once it leads, the deleted records stay deleted
    even where the remote tier still holds them (Kafka's follower takes the leader's
    logStartOffset, local or not)."""
    config = {"remote.storage.enable": "true", "segment.bytes": "1024"}
    follower = Partition("t", 0, broker_id=2, log=open_log(**config), config=TopicConfig.from_properties(config))
    follower.become_follower(leader=1, leader_epoch=3, replicas=(1, 2), isr=(1, 2))
    for i in range(12):
        batch = record_batch.build([b"x" * 200], now_ms=1)
        stamped = record_batch.stamp(record_batch.read_header(batch), i, 3) + batch[record_batch.STAMP.size :]
        follower.append_as_follower(stamped, leader_high_watermark=i)
    local = follower.log.segment_base_offsets[2]
    follower.delete_local_segments_below(local)
    follower.follow_log_start(1)
    assert follower.log.checkpointed_log_start_offset == 1 and follower.log.log_start_offset == local
    follower.remote_tier_ready, follower.remote_log_start_offset = True, 0
    assert follower.log_start_offset == 1
