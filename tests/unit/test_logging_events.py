"""What raylog logs for an operator, checked where each event is decided (no Ray): segment
rolls, retention deletions and recovery in the storage log; truncations, ISR proposals and
the replica's role in a partition; the controller's election and ISR decisions; rebalances
in the group state machine; fencing in the transaction state machine; quota throttling at
DEBUG only; and nothing above DEBUG on the produce and fetch path."""

from __future__ import annotations

import logging
import os

import pytest

from raylog.common import record_batch
from raylog.config import TopicConfig
from raylog.coordination import elections
from raylog.coordination.fetcher import (
    LEADER_REPORT_INTERVAL_MS,
    REPEATED_FAILURE_LOG_INTERVAL_MS,
    EpochAnswer,
    FollowerFetcher,
    Next,
)
from raylog.coordination.group import GroupCoordinator
from raylog.coordination.partition import Partition
from raylog.coordination.quotas import PRODUCER_BYTE_RATE, QuotaManager
from raylog.coordination.transactions import TransactionCoordinator
from raylog.errors import ProducerFencedError
from raylog.protocol import JoinGroupRequest
from raylog.storage.segment import file_name
from raylog.types import PartitionInfo, TopicPartition

#: One record of 200 bytes: a batch of 429 bytes, so two batches fill a segment of 1024.
VALUE = b"v" * 200
BATCH_BYTES = 429


@pytest.fixture
def logs(caplog):
    """``logs(name)``: what logger ``name`` logged so far, as ``(level, message)`` pairs."""
    caplog.set_level(logging.DEBUG, logger="raylog")

    def of(name: str) -> list[tuple[int, str]]:
        return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == name]

    return of


def _append(log, clock, count: int = 1) -> None:
    for _ in range(count):
        info = log.append_as_leader(record_batch.build([VALUE], timestamps_ms=[clock()]), leader_epoch=0)
        assert info.batches[0].size == BATCH_BYTES


def _containing(entries: list[tuple[int, str]], text: str) -> list[tuple[int, str]]:
    return [(level, message) for level, message in entries if text in message]


# --- storage ----------------------------------------------------------------------------


def test_segment_rolls_say_where_and_why(open_log, clock, logs):
    """A roll names the new segment's base offset and its cause, segment.bytes or segment.ms."""
    log = open_log(**{"segment.bytes": "1024", "segment.ms": "60000"})
    _append(log, clock, 3)
    clock.advance(61_000)
    _append(log, clock)
    assert _containing(logs("raylog.storage.log"), " rolled a new segment ") == [
        (
            logging.INFO,
            f"log {log.dir} rolled a new segment at offset 2 (segment.bytes 1024 reached); "
            f"the previous one, at 0, holds {2 * BATCH_BYTES} bytes",
        ),
        (
            logging.INFO,
            f"log {log.dir} rolled a new segment at offset 3 (segment.ms 60000 passed); "
            f"the previous one, at 2, holds {BATCH_BYTES} bytes",
        ),
    ]


def test_retention_by_time_logs_the_offsets_it_deleted(open_log, clock, logs):
    """One line per round: how many segments, their offsets and bytes, why, the new log start."""
    log = open_log(**{"segment.bytes": "1024", "retention.ms": "3600000"})
    _append(log, clock, 5)  # segments at 0, 2 and 4
    clock.advance(3_600_001)
    _append(log, clock)  # into the active segment, which retention never deletes
    assert log.apply_retention(high_watermark=log.log_end_offset) == [0, 2]
    assert _containing(logs("raylog.storage.log"), " for retention ") == [
        (
            logging.INFO,
            f"log {log.dir} deletes 2 segment(s) for retention (retention.ms 3600000): offsets 0 to 3, "
            f"{4 * BATCH_BYTES} bytes; log start offset now 4",
        )
    ]


def test_retention_by_size_names_retention_bytes(open_log, clock, logs):
    log = open_log(**{"segment.bytes": "1024", "retention.bytes": "1000"})
    _append(log, clock, 5)  # 2,145 bytes: the oldest segment goes, the next would leave too little
    assert log.apply_retention(high_watermark=log.log_end_offset) == [0]
    assert _containing(logs("raylog.storage.log"), " for retention ") == [
        (
            logging.INFO,
            f"log {log.dir} deletes 1 segment(s) for retention (retention.bytes 1000): offsets 0 to 1, "
            f"{2 * BATCH_BYTES} bytes; log start offset now 2",
        )
    ]


def test_recovery_on_open_says_what_it_cut(open_log, clock, logs):
    """A log reopened after a crash that left a torn batch: a WARNING with the segments
    recovered, the bytes cut and the log end offset; every open says what it loaded."""
    log = open_log()
    _append(log, clock, 3)
    for segment in log._segments:
        segment.close()
    with open(os.path.join(log.dir, file_name(0, ".log")), "ab") as f:
        f.write(b"\x00\x01torn")
    reopened = open_log()
    assert reopened.log_end_offset == 3
    entries = logs("raylog.storage.log")
    assert _containing(entries, " recovered ") == [
        (
            logging.WARNING,
            f"log {log.dir} recovered 1 segment(s) past the recovery point 0: cut 6 torn or corrupt byte(s), "
            "deleted 0 later segment(s); log end offset 3",
        )
    ]
    assert _containing(entries, " loaded: ")[-1] == (
        logging.INFO,
        f"log {log.dir} loaded: 1 segment(s), offsets 0 to 3, {3 * BATCH_BYTES} bytes",
    )


def test_appends_and_reads_log_nothing_above_debug(open_log, clock, logs):
    """The hot path: producing into and reading from a partition logs nothing (no roll here)."""
    part = Partition("t", 0, broker_id=1, log=open_log(), config=TopicConfig(), clock=clock)
    part.apply_state(PartitionInfo("t", 0, leader=1, leader_epoch=1, replicas=(1,), isr=(1,), partition_epoch=1))
    before = len(logs("raylog.coordination.partition"))
    for i in range(50):
        part.append_as_leader(record_batch.build([b"r%d" % i]), acks=-1)
        part.read(i, 1 << 20)
    assert [r for r in logs("raylog.coordination.partition")][before:] == []
    assert _containing(logs("raylog.storage.log"), " rolled a new segment ") == []


# --- a partition's replication ----------------------------------------------------------


@pytest.fixture
def replica(open_log, clock):
    """``replica(broker_id, replicas, isr)``: a replica of t-0 leading epoch 3 (lag 1 s)."""

    def make(broker_id: int = 1, replicas=(1, 2), isr=(1, 2)) -> Partition:
        config = TopicConfig.from_properties({"replica.lag.time.max.ms": "1000"})
        part = Partition("t", 0, broker_id=broker_id, log=open_log(), config=config, clock=clock)
        state = PartitionInfo("t", 0, broker_id, 3, tuple(replicas), tuple(isr), partition_epoch=7)
        part.apply_state(state)
        return part

    return make


def test_a_new_role_is_logged_once_per_leader_epoch(replica, logs):
    part = replica()
    part.apply_state(PartitionInfo("t", 0, 1, 3, (1, 2), (1,), partition_epoch=8))  # an ISR change: no line
    part.apply_state(PartitionInfo("t", 0, 2, 4, (1, 2), (1, 2), partition_epoch=9))
    part.apply_state(PartitionInfo("t", 0, -1, 5, (1, 2), (2,), partition_epoch=10))
    assert logs("raylog.coordination.partition") == [
        (logging.INFO, "t-0: broker 1 leads in leader epoch 3 from offset 0 (high watermark 0), ISR [1, 2]"),
        (logging.INFO, "t-0: broker 1 follows leader 2 in leader epoch 4 from log end offset 0"),
        (logging.WARNING, "t-0: no leader in leader epoch 5 (offline); broker 1 holds offsets to 0"),
    ]


def test_isr_shrink_and_expand_proposals_give_the_followers_lag(replica, clock, logs):
    """The leader says whom it drops (not caught up for replica.lag.time.max.ms) or admits
    (caught up), with their log end offsets and how long ago they last caught up."""
    part = replica()
    part.append_as_leader(record_batch.build([b"a", b"b"]), acks=1)
    part.read(0, 1 << 20, replica_id=2)  # follower 2 fetches at offset 0: caught up as of now
    clock.advance(1_500)
    assert part.propose_isr() == (1,)
    part.apply_isr((1,), partition_epoch=8)
    part.read(2, 1 << 20, replica_id=2)  # at the log end: caught up
    assert part.propose_isr() == (1, 2)
    assert _containing(logs("raylog.coordination.partition"), "proposes") == [
        (
            logging.INFO,
            "t-0: leader 1 proposes to shrink the ISR from [1, 2] to [1] (broker 2: log end offset 0, last caught "
            "up 1500 ms ago; replica.lag.time.max.ms 1000, leader log end offset 2, high watermark 0)",
        ),
        (
            logging.INFO,
            "t-0: leader 1 proposes to expand the ISR from [1] to [1, 2] (broker 2: log end offset 2, last caught "
            "up 0 ms ago; replica.lag.time.max.ms 1000, leader log end offset 2, high watermark 2)",
        ),
    ]


def test_a_refused_isr_proposal_is_logged(replica, clock, logs):
    part = replica(isr=(1,))
    part.append_as_leader(record_batch.build([b"a"]), acks=1)
    part.read(1, 1 << 20, replica_id=2)
    proposal = part.propose_isr()
    part.isr_answer(proposal, (False, PartitionInfo("t", 0, 1, 3, (1, 2), (1,), partition_epoch=7)))
    assert _containing(logs("raylog.coordination.partition"), "refused") == [
        (logging.INFO, "t-0: the controller refused ISR [1, 2] (its ISR [1], partition epoch 7)")
    ]


def test_a_truncation_says_from_where_to_where_and_why(replica, logs):
    """A follower whose epoch-3 records run past where the new leader says epoch 3 ends cuts
    them, and says so once (diverging epoch), with both ends."""
    part = replica()
    for value in (b"a", b"b", b"c", b"d", b"e"):
        part.append_as_leader(record_batch.build([value]), acks=1)
    part.apply_state(PartitionInfo("t", 0, 2, 4, (1, 2), (1, 2), partition_epoch=8))
    fetcher = FollowerFetcher(part, leader=2, leader_epoch=4)
    assert fetcher.on_answer(fetcher.next_request(), EpochAnswer(0, 3, 2)) is Next.AGAIN
    assert part.log.log_end_offset == 2
    assert _containing(logs("raylog.coordination.partition"), "truncated") == [
        (
            logging.INFO,
            "t-0: broker 1 truncated its log, log end offset 5 -> 2: diverging epoch: leader 2 says epoch 3 "
            "ends at 2, ours ends at 5 (our latest epoch 3)",
        )
    ]
    assert logs("raylog.coordination.fetcher") == []  # said once, by the partition
    part.truncate_to_leader_end(1)  # the leader's log ends below ours (an unclean election)
    assert _containing(logs("raylog.coordination.partition"), "truncated")[-1] == (
        logging.WARNING,
        "t-0: broker 1 truncated its log, log end offset 2 -> 1: our log runs past leader 2's log end offset 1",
    )


def test_a_failure_that_repeats_is_logged_at_its_level_once_every_interval(replica, clock, logs):
    """A follower retries every 100 ms: a dead leader is warned about when first seen and then
    at most every REPEATED_FAILURE_LOG_INTERVAL_MS while it stays dead (DEBUG in between),
    though the controller hears of it every LEADER_REPORT_INTERVAL_MS."""
    part = replica()
    part.apply_state(PartitionInfo("t", 0, 2, 4, (1, 2), (1, 2), partition_epoch=8))
    fetcher = FollowerFetcher(part, leader=2, leader_epoch=4, clock=clock)
    fetcher.on_answer(fetcher.next_request(), EpochAnswer(0, 3, 0))
    request = fetcher.next_request()
    outcomes = []
    for _ in range(REPEATED_FAILURE_LOG_INTERVAL_MS // LEADER_REPORT_INTERVAL_MS + 1):
        outcomes.append(fetcher.on_failure(request))
        clock.advance(LEADER_REPORT_INTERVAL_MS)
    assert set(outcomes) == {Next.REPORT_LEADER}
    levels = [level for level, _ in logs("raylog.coordination.fetcher")]
    assert levels == [logging.WARNING] + [logging.DEBUG] * (len(outcomes) - 2) + [logging.WARNING]
    assert logs("raylog.coordination.fetcher")[0][1] == "t-0: fetch from leader 2 failed: no answer from leader 2"


# --- the controller's decisions ---------------------------------------------------------


def _info(leader: int, epoch: int, isr, replicas=(1, 2, 3), partition_epoch: int = 10) -> PartitionInfo:
    return PartitionInfo("t", 0, leader, epoch, tuple(replicas), tuple(isr), partition_epoch)


def test_elections_are_logged_with_their_kind_cause_leader_and_epoch(logs):
    before = _info(1, 5, (1, 2, 3))
    clean = elections.elect_leader(before, live={2, 3}, unclean=False)
    elections.log_decision(before, clean, "live brokers [2, 3]")
    lonely = _info(1, 5, (1,))
    unclean = elections.elect_leader(lonely, live={2, 3}, unclean=True)
    elections.log_decision(lonely, unclean, "live brokers [2, 3]")
    offline = elections.elect_leader(lonely, live={2, 3}, unclean=False)
    elections.log_decision(lonely, offline, "live brokers [2, 3]")
    moved = _info(2, 6, (1, 2, 3))
    preferred = elections.preferred_leader(moved, live={1, 2, 3})
    elections.log_decision(moved, preferred, elections.PREFERRED)
    assert logs("raylog.coordination.elections") == [
        (logging.INFO, "t-0: clean leader election (live brokers [2, 3]): leader 1 -> 2, leader epoch 6, ISR [2, 3]"),
        (logging.WARNING, "t-0: unclean leader election (live brokers [2, 3]): leader 1 -> 2, leader epoch 6, ISR [2]"),
        (
            logging.WARNING,
            "t-0: offline leader election (live brokers [2, 3]): leader 1 -> -1, leader epoch 6, ISR [1]",
        ),
        (
            logging.INFO,
            "t-0: preferred leader election (preferred replica election): leader 2 -> 1, leader epoch 7, ISR [1, 2, 3]",
        ),
    ]


def test_isr_decisions_are_logged_with_who_left_or_joined(logs):
    before = _info(1, 5, (1, 2, 3))
    shrunk = elections.remove_from_isr(before, {3})
    elections.log_decision(before, shrunk, "live brokers [1, 2]")
    accepted, grown = elections.alter_isr(shrunk, 1, 5, shrunk.partition_epoch, (1, 2, 3), live={1, 2, 3})
    assert accepted
    elections.log_decision(shrunk, grown, elections.ISR_PROPOSAL)
    assert logs("raylog.coordination.elections") == [
        (logging.INFO, "t-0: ISR [1, 2, 3] -> [1, 2] (shrinks by [3]; live brokers [1, 2]), partition epoch 11"),
        # The leader logged its proposal with the lag: the controller's word on it is DEBUG.
        (logging.DEBUG, "t-0: ISR [1, 2] -> [1, 2, 3] (expands by [3]; the leader's ISR proposal), partition epoch 12"),
    ]


def test_a_completed_reassignment_logs_the_replicas(logs):
    before = _info(1, 5, (1, 2, 3, 4), replicas=(4, 1, 2, 3))
    after = elections.finish_reassignment(before, (4, 2, 3))
    elections.log_decision(before, after, "reassignment to [4, 2, 3] complete")
    assert logs("raylog.coordination.elections") == [
        (
            logging.INFO,
            "t-0: clean leader election (reassignment to [4, 2, 3] complete): leader 1 -> 4, leader epoch 6, "
            "ISR [4, 2, 3], replicas [4, 1, 2, 3] -> [4, 2, 3]",
        )
    ]


# --- groups and transactions ------------------------------------------------------------


def _join(member_id: str = "", session_timeout_ms: int = 10_000) -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id="g",
        member_id=member_id,
        topics=("t",),
        partition_counts={"t": 2},
        strategies=("range",),
        client_id="c",
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=5_000,
    )


def test_a_rebalance_logs_its_cause_generation_and_members(logs):
    groups = GroupCoordinator()
    outcome = groups.join(_join(), waiter="w1", now_ms=0)
    groups.persisted(outcome, now_ms=0)
    (first,) = groups.groups["g"].members
    groups.join(_join(), waiter="w2", now_ms=10)  # a second member: the first must rejoin
    outcome = groups.tick(now_ms=6_000)  # the first did not rejoin within its rebalance timeout
    entries = logs("raylog.coordination.group")
    (second,) = groups.groups["g"].members
    assert entries == [
        (logging.INFO, f"group g: rebalance in state Empty, generation 0, 1 member(s): member {first} joined"),
        (logging.INFO, f"group g: generation 1 with 1 member(s) ['{first}'], assignor range, leader {first}"),
        (logging.INFO, f"group g: rebalance in state Stable, generation 1, 2 member(s): member {second} joined"),
        (logging.INFO, f"group g: member(s) ['{first}'] did not rejoin before the rebalance deadline: removed"),
        (logging.INFO, f"group g: generation 2 with 1 member(s) ['{second}'], assignor range, leader {second}"),
    ]


def test_a_session_timeout_is_logged_as_the_rebalance_cause(logs):
    groups = GroupCoordinator()
    groups.persisted(groups.join(_join(), waiter="w1", now_ms=0), now_ms=0)
    (member,) = groups.groups["g"].members
    groups.tick(now_ms=10_001)
    assert logs("raylog.coordination.group")[-1] == (
        logging.INFO,
        f"group g: empty in generation 2, member(s) ['{member}'] removed: the session timed out",
    )


def test_fencing_a_producer_is_logged_with_both_epochs(logs):
    ids = iter(range(1000, 2000))
    txns = TransactionCoordinator()
    first = txns.init_producer("copier", 60_000, now_ms=0, new_producer_id=lambda: next(ids))
    txns.applied(first)
    second = txns.init_producer("copier", 60_000, now_ms=1, new_producer_id=lambda: next(ids))
    txns.applied(second)
    with pytest.raises(ProducerFencedError):
        txns.add_partitions("copier", 1000, 0, [TopicPartition("t", 0)], now_ms=2)
    assert logs("raylog.coordination.transactions") == [
        (logging.INFO, "transactional id 'copier': producer id 1000 epoch 0 initialised"),
        (
            logging.INFO,
            "transactional id 'copier': producer id 1000 epoch 1 initialised; producer id 1000 epochs up to 0 are "
            "fenced",
        ),
        (
            logging.INFO,
            "refused a request of fenced producer id 1000 epoch 0: producer epoch 0 of 'copier' is fenced by epoch 1",
        ),
    ]


def test_throttling_is_logged_at_debug_only(logs):
    quotas = QuotaManager(PRODUCER_BYTE_RATE)
    quotas.update_quotas({"etl": {PRODUCER_BYTE_RATE: 1_000.0}})
    assert quotas.record("etl", 5_000, now_ms=0) == 0  # within the burst the windows allow
    throttle_ms = quotas.record("etl", 20_000, now_ms=0)
    assert throttle_ms > 0
    entries = logs("raylog.coordination.quotas")
    assert [level for level, _ in entries] == [logging.DEBUG]
    assert entries[0][1].startswith("client 'etl' at ")
    assert entries[0][1].endswith(f"over its producer_byte_rate of 1000 B/s: throttled {throttle_ms} ms")
