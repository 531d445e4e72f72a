"""The fault checker on hand-written histories: each anomaly class is found where it is, and
only there (no Ray)."""

from __future__ import annotations

import pytest

from raylog.chaos import checker
from raylog.chaos.checker import (
    ABORTED_READ,
    CLASSES,
    DUPLICATE,
    INCONSISTENT_OFFSETS,
    INTERMEDIATE_READ,
    LOST_WRITE,
    NONMONOTONIC_POLL,
    NONMONOTONIC_SEND,
    POLL_SKIP,
    TORN_TRANSACTION,
    UNFENCED_COMMIT,
    UNSEEN,
)
from raylog.chaos.history import (
    ABORTED,
    COMMITTED,
    FAIL,
    OK,
    UNKNOWN,
    Assign,
    Commit,
    FinalRead,
    History,
    Poll,
    Recorder,
    Revoke,
    Send,
    Txn,
)


def sent(value: str, offset: int | None, partition: int = 0, outcome: str = OK, t: int = 0, **kw) -> Send:
    return Send(
        "p0",
        partition,
        value,
        outcome if offset is not None or outcome != OK else UNKNOWN,
        offset,
        start=t,
        end=t,
        **kw,
    )


def polled(process: str, *records: tuple[int, int, str], t: int = 0, group: str | None = None, **kw) -> Poll:
    return Poll(process, tuple(records), group=group, start=t, end=t, **kw)


def found(ops: list, final: dict, committed: dict | None = None, final_read: FinalRead | None = None) -> dict:
    """Anomaly counts of the classes found (zero counts left out)."""
    history = History(ops, final_read or FinalRead.of(final, committed))
    return {k: n for k, n in checker.check(history).counts().items() if n}


CLEAN_FINAL = {0: [(0, "a"), (1, "b"), (2, "c")], 1: [(0, "d")]}
CLEAN_OPS = [
    sent("a", 0, t=1),
    sent("b", 1, t=2),
    sent("c", None, outcome=UNKNOWN, t=3),
    sent("d", 0, partition=1, t=4),
    sent("x", None, outcome=FAIL, t=5),
    polled("c1", (0, 0, "a"), (0, 1, "b"), t=6, group="g"),
    polled("c1", (0, 2, "c"), (1, 0, "d"), t=7, group="g"),
    Commit("c1", "g", ((0, 3), (1, 1)), OK, start=8, end=8),
]


def test_a_clean_history_has_no_anomaly_in_any_class():
    """Acknowledged values all read, in order, each once, committed after being polled: nothing found,
    and an unknown send that appears once or a failed one that never appears is fine."""
    assert found(CLEAN_OPS, CLEAN_FINAL, {"g": {0: 3, 1: 1}}) == {}


# --- lost write ------------------------------------------------------------------------------


def test_an_acknowledged_value_missing_from_the_final_read_is_a_lost_write():
    """Acknowledged at offset 1, the final read has offsets 0 and 2 but not that value."""
    report = checker.check(History([sent("a", 0), sent("b", 1), sent("c", 2)], FinalRead.of({0: [(0, "a"), (1, "c")]})))
    (lost,) = report.anomalies[LOST_WRITE]
    assert (lost.partition, lost.offset, lost.value) == (0, 1, "b")
    assert "send p0 'b' -> ok 1" in lost.ops[0]


def test_a_value_polled_then_gone_is_a_lost_write():
    """A consumer saw it (below the HW), the final read does not return it."""
    assert found([polled("c1", (0, 0, "a"), (0, 1, "b"))], {0: [(0, "a"), (1, "z")]}) == {
        LOST_WRITE: 1,
        INCONSISTENT_OFFSETS: 1,
    }


def test_unacknowledged_values_and_offsets_the_final_read_did_not_reach_are_not_lost():
    """Unknown and failed sends may be missing; an acknowledged value beyond an incomplete
    final read cannot be judged."""
    incomplete = FinalRead({0: [(0, "a")]}, end_offsets={0: 1}, complete={0: False})
    assert found([sent("a", 0), sent("b", 5)], {}, final_read=incomplete) == {}
    assert found([sent("a", 0), sent("u", None, outcome=UNKNOWN), sent("f", None, outcome=FAIL)], {0: [(0, "a")]}) == {}


def test_an_acknowledged_value_above_a_complete_final_read_is_lost():
    """The log was truncated below an acknowledged offset and nothing was written after it."""
    assert found([sent("a", 0), sent("b", 1)], {0: [(0, "a")]}) == {LOST_WRITE: 1}


# --- duplicate -------------------------------------------------------------------------------


def test_one_value_at_two_offsets_or_in_two_partitions_is_a_duplicate():
    """The final read has one value twice in a partition, and another in two partitions."""
    ops = [sent("a", 0), sent("b", None, outcome=UNKNOWN)]
    final = {0: [(0, "a"), (1, "b"), (2, "b")], 1: [(0, "a")]}
    report = checker.check(History(ops, FinalRead.of(final)))
    assert {(a.value, a.partition, a.offset) for a in report.anomalies[DUPLICATE]} == {("a", 0, 0), ("b", 0, 1)}


def test_a_value_polled_at_one_offset_and_read_at_another_is_a_duplicate():
    """Seen by a consumer at offset 0, by the final read at offset 1 (written twice over time)."""
    ops = [sent("a", 1), polled("c1", (0, 0, "a"))]
    assert found(ops, {0: [(0, "z"), (1, "a")]})[DUPLICATE] == 1


def test_duplicates_break_the_promise_of_idempotent_producers_only():
    """A producer without idempotence may write a retried value twice: reported, not a violation."""
    final = {0: [(0, "a"), (1, "a"), (2, "b"), (3, "b")]}
    ops = [sent("a", 0, idempotent=False), sent("b", 2, idempotent=True)]
    report = checker.check(History(ops, FinalRead.of(final)))
    assert report.counts()[DUPLICATE] == 2
    assert [a.value for a in report.violations(safe=True)] == ["b"]
    assert report.violations(safe=False) == []


def test_one_value_read_at_the_same_offset_by_many_readers_is_not_a_duplicate():
    """Many polls of one record at one offset are one position."""
    ops = [sent("a", 0), polled("c1", (0, 0, "a")), polled("c2", (0, 0, "a"), t=1)]
    assert found(ops, {0: [(0, "a")]}) == {}


# --- inconsistent offsets --------------------------------------------------------------------


def test_two_values_at_one_offset_are_inconsistent_offsets():
    """Two readers saw different values at offset 1."""
    ops = [polled("c1", (0, 0, "a"), (0, 1, "b")), polled("c2", (0, 0, "a"), (0, 1, "c"), t=1)]
    report = checker.check(History(ops, FinalRead.of({0: [(0, "a"), (1, "b"), (2, "c")]})))
    (anomaly,) = report.anomalies[INCONSISTENT_OFFSETS]
    assert (anomaly.partition, anomaly.offset) == (0, 1) and len(anomaly.ops) == 2


def test_an_acknowledged_offset_holding_another_value_is_inconsistent():
    """The producer was told offset 0; the final read has another value there."""
    assert found([sent("a", 0), sent("b", 1)], {0: [(0, "z"), (1, "b"), (2, "a")]}) == {INCONSISTENT_OFFSETS: 1}


def test_the_same_value_at_an_offset_seen_by_every_reader_is_consistent():
    """Acknowledgement, poll and final read all agree."""
    assert found([sent("a", 0), polled("c1", (0, 0, "a"))], {0: [(0, "a")]}) == {}


# --- non-monotonic send ----------------------------------------------------------------------


def test_one_process_sends_acknowledged_at_decreasing_offsets_are_non_monotonic():
    """Invoked b after a, b landed before a."""
    ops = [sent("a", 1, t=1), sent("b", 0, t=2)]
    report = checker.check(History(ops, FinalRead.of({0: [(0, "b"), (1, "a")]})))
    (anomaly,) = report.anomalies[NONMONOTONIC_SEND]
    assert anomaly.value == "b" and anomaly.idempotent


def test_sends_of_different_processes_or_partitions_need_no_order():
    """Order is per process and partition; unacknowledged sends are not ordered."""
    ops = [
        sent("a", 1, t=1),
        Send("p1", 0, "b", OK, 0, start=2, end=2),
        sent("c", 0, partition=1, t=3),
        sent("d", None, outcome=UNKNOWN, t=4),
        sent("e", 2, t=5),
    ]
    assert found(ops, {0: [(0, "b"), (1, "a"), (2, "e")], 1: [(0, "c")]}) == {}


# --- non-monotonic poll and poll skip --------------------------------------------------------

FINAL4 = {0: [(0, "a"), (1, "b"), (2, "c"), (3, "d")]}


def test_a_consumer_going_back_without_a_seek_is_a_non_monotonic_poll():
    """Offsets 0, 1 then 1 again in the next poll."""
    ops = [polled("c1", (0, 0, "a"), (0, 1, "b")), polled("c1", (0, 1, "b"), (0, 2, "c"), t=1)]
    assert found(ops, FINAL4) == {NONMONOTONIC_POLL: 1}


def test_going_back_after_an_assignment_or_seek_is_fine():
    """A rebalance (or seek) between the polls restarts the sequence."""
    ops = [
        polled("c1", (0, 0, "a"), (0, 1, "b")),
        Assign("c1", (0,), start=1, end=1),
        polled("c1", (0, 0, "a"), (0, 1, "b"), (0, 2, "c"), (0, 3, "d"), t=2),
    ]
    assert found(ops, FINAL4) == {}


def test_an_assignment_made_inside_a_poll_restarts_the_order_of_that_polls_records():
    """A group member is assigned (and positioned) while poll runs: that poll's records start anew."""
    ops = [
        polled("c1", (0, 2, "c"), (0, 3, "d")),
        Poll("c1", ((0, 0, "a"), (0, 1, "b")), start=1, end=3),
        Assign("c1", (0,), start=2, end=2),
    ]
    assert found(ops, FINAL4) == {}


def test_a_consumer_jumping_over_offsets_that_exist_is_a_poll_skip():
    """0, 1 then 3: offset 2 exists in the final read; also within one poll."""
    ops = [
        polled("c1", (0, 0, "a"), (0, 1, "b")),
        polled("c1", (0, 3, "d"), t=1),
        polled("c2", (0, 0, "a"), (0, 2, "c")),
    ]
    report = checker.check(History(ops, FinalRead.of(FINAL4)))
    assert {(a.offset, a.ops[-1]) for a in report.anomalies[POLL_SKIP]} == {
        (3, "skipped offsets 2"),
        (2, "skipped offsets 1"),
    }


def test_gaps_that_are_not_in_the_final_read_are_not_skips():
    """Offsets missing from the log (e.g. control batches, compaction) may be jumped."""
    assert found([polled("c1", (0, 0, "a"), (0, 3, "d"))], {0: [(0, "a"), (3, "d")]}) == {}


def test_each_consumer_and_partition_is_ordered_on_its_own():
    """Interleaved partitions and consumers are separate sequences."""
    final = {0: [(0, "a"), (1, "b")], 1: [(0, "c"), (1, "d")]}
    ops = [
        polled("c1", (0, 0, "a"), (1, 0, "c")),
        polled("c2", (0, 0, "a"), t=1),
        polled("c1", (1, 1, "d"), (0, 1, "b"), t=2),
        polled("c2", (0, 1, "b"), t=3),
    ]
    assert found(ops, final) == {}


# --- unseen ----------------------------------------------------------------------------------


def test_a_value_below_the_groups_commit_never_polled_by_it_is_unseen():
    """The group committed offset 3, but no member ever got offset 1."""
    ops = [
        polled("c1", (0, 0, "a"), group="g"),
        polled("c2", (0, 2, "c"), group="g", t=1),
        Commit("c2", "g", ((0, 3),), OK, start=2, end=2),
    ]
    report = checker.check(History(ops, FinalRead.of(FINAL4)))
    (anomaly,) = report.anomalies[UNSEEN]
    assert (anomaly.offset, anomaly.value) == (1, "b") and "commit g [p0@3]" in anomaly.ops[0]


def test_the_groups_final_committed_offset_counts_too():
    """No commit acknowledged in the history, but the group's offset at the end is 2."""
    assert found([polled("c1", (0, 0, "a"), group="g")], FINAL4, {"g": {0: 2}}) == {UNSEEN: 1}


def test_values_above_the_commit_or_polled_by_another_member_or_committed_by_a_failed_commit_are_seen():
    """Polled by any member counts; failed commits and other groups' polls do not commit."""
    ops = [
        polled("c1", (0, 0, "a"), group="g"),
        polled("c2", (0, 1, "b"), group="g", t=1),
        polled("other", (0, 2, "c"), group="h", t=2),
        Commit("c2", "g", ((0, 2),), OK, start=3, end=3),
        Commit("c2", "g", ((0, 4),), UNKNOWN, start=4, end=4),
    ]
    assert found(ops, FINAL4) == {}


# --- unfenced commit ------------------------------------------------------------------------


def test_a_commit_accepted_from_a_member_while_another_owned_the_partition_is_unfenced():
    """c1 owned p0 and was expired without knowing; c2 got p0; c1's commit was still accepted."""
    ops = [
        Assign("c1", (0,), "g", start=1, end=1),
        polled("c1", (0, 0, "a"), group="g", t=2),
        Assign("c2", (0,), "g", start=3, end=3),
        Commit("c1", "g", ((0, 1),), OK, start=4, end=5),
        Revoke("c1", (0,), "g", start=6, end=6),
    ]
    report = checker.check(History(ops, FinalRead.of(FINAL4)))
    (anomaly,) = report.anomalies[UNFENCED_COMMIT]
    assert (anomaly.partition, anomaly.offset) == (0, 1) and "c2 assign [0]" in anomaly.ops[1]


def test_commits_refused_or_made_before_another_member_owned_the_partition_are_fenced():
    """A commit before the other's assignment, a refused one after it, one after the other gave
    the partition up, and commits of other groups or partitions are all fine."""
    ops = [
        Assign("c1", (0, 1), "g", start=1, end=1),
        Commit("c1", "g", ((0, 1),), OK, start=2, end=4),
        Revoke("c1", (0,), "g", start=3, end=3),
        Assign("c2", (0,), "g", start=5, end=5),
        Commit("c1", "g", ((0, 2),), FAIL, start=6, end=6),
        Commit("c1", "g", ((1, 2),), OK, start=7, end=7),
        Commit("c3", "h", ((0, 2),), OK, start=8, end=8),
        Commit("c2", "g", ((0, 2),), OK, start=9, end=9),
        Revoke("c2", (0,), "g", start=10, end=10),
        Assign("c1", (0,), "g", start=11, end=11),
        Commit("c1", "g", ((0, 3),), OK, start=12, end=12),
    ]
    assert UNFENCED_COMMIT not in found(ops, FINAL4)


def test_the_new_owners_commits_are_fine_while_an_expired_member_has_not_noticed():
    """Soak seed 113: member-sync owned p1 and was expired without knowing (its polls hung on a
    paused replica), member2 got p1 in the next generation and committed it, and member-sync
    learnt of its end at its next poll. The new owner's commits are the ones the coordinator
    must accept; only the expired member's would be unfenced."""
    ops = [
        Assign("c1", (0,), "g", start=1, end=1),
        Assign("c2", (0,), "g", start=3, end=3),
        Commit("c2", "g", ((0, 1),), OK, start=4, end=5),
        Revoke("c1", (0,), "g", start=6, end=6),
    ]
    assert UNFENCED_COMMIT not in found(ops, FINAL4)


# --- transactions ----------------------------------------------------------------------------


def txn_send(value: str, offset: int, txn: str, partition: int = 0, t: int = 0) -> Send:
    return Send("tx", partition, value, OK, offset, txn=txn, start=t, end=t)


def test_a_read_committed_poll_of_an_aborted_transaction_is_an_aborted_read():
    """Transaction T1 aborted, yet a read_committed consumer returned its value."""
    ops = [
        txn_send("a", 0, "T1"),
        Txn("tx", "T1", ABORTED, start=1, end=1),
        polled("c1", (0, 0, "a"), t=2, read_committed=True),
    ]
    assert found(ops, {0: []}) == {ABORTED_READ: 1, LOST_WRITE: 1}


def test_read_uncommitted_polls_and_committed_transactions_are_not_aborted_reads():
    """read_uncommitted may see aborted data (which the read_committed final read then does
    not return: not lost either); committed data is for everyone."""
    ops = [
        txn_send("a", 0, "T1"),
        Txn("tx", "T1", ABORTED, start=1, end=1),
        txn_send("b", 1, "T2", t=2),
        Txn("tx", "T2", COMMITTED, start=3, end=3),
        polled("c1", (0, 0, "a"), (0, 1, "b"), t=4),
        polled("c2", (0, 1, "b"), t=5, read_committed=True),
    ]
    assert found(ops, {0: [(1, "b")]}) == {}


def test_the_final_read_returning_a_value_of_an_aborted_transaction_is_an_aborted_read():
    """The final read is read_committed too: an aborted value in it was read."""
    ops = [txn_send("a", 0, "T1"), Txn("tx", "T1", ABORTED, start=1, end=1)]
    report = checker.check(History(ops, FinalRead.of({0: [(0, "a")]})))
    (anomaly,) = report.anomalies[ABORTED_READ]
    assert anomaly.ops[0] == "final read p0@0" and "txn T1 -> aborted" in anomaly.ops[1]


def test_a_read_committed_poll_of_a_transaction_still_writing_there_is_an_intermediate_read():
    """T1 wrote a, the poll returned it, then T1 wrote b to the same partition and committed."""
    ops = [
        txn_send("a", 0, "T1", t=1),
        polled("c1", (0, 0, "a"), t=2, read_committed=True),
        txn_send("b", 1, "T1", t=3),
        Txn("tx", "T1", COMMITTED, start=4, end=4),
    ]
    assert found(ops, {0: [(0, "a"), (1, "b")]}) == {INTERMEDIATE_READ: 1}


def test_reading_a_transaction_after_its_last_write_there_is_not_intermediate():
    """T1 wrote more later, but to another partition."""
    ops = [
        txn_send("a", 0, "T1", t=1),
        polled("c1", (0, 0, "a"), t=2, read_committed=True),
        txn_send("b", 0, "T1", partition=1, t=3),
        Txn("tx", "T1", COMMITTED, start=4, end=4),
    ]
    assert found(ops, {0: [(0, "a")], 1: [(0, "b")]}) == {}


def test_values_of_transactions_that_did_not_commit_may_be_missing_from_the_final_read():
    """Acknowledged sends of an aborted transaction and of one whose end is unknown stay in
    the log, unread by read_committed: not lost. Once a read_committed poll returned a
    value, though, its transaction committed: then it must stay."""
    ops = [
        txn_send("a", 0, "T1"),
        Txn("tx", "T1", ABORTED, start=1, end=1),
        txn_send("b", 2, "T2", t=2),
        Txn("tx", "T2", UNKNOWN, start=3, end=3),
        txn_send("c", 4, "T3", t=4),
        Txn("tx", "T3", UNKNOWN, start=5, end=5),
        polled("c1", (0, 4, "c"), t=6, read_committed=True),
    ]
    assert found(ops, {0: [(6, "z")]}) == {LOST_WRITE: 1}
    assert found(ops[:-1], {0: [(6, "z")]}) == {}


def test_a_committed_transaction_visible_in_one_partition_only_is_torn():
    """T1 committed a to partition 0 and b to partition 1; the final read has only a."""
    ops = [txn_send("a", 0, "T1"), txn_send("b", 0, "T1", partition=1), Txn("tx", "T1", COMMITTED, start=1, end=1)]
    assert found(ops, {0: [(0, "a")], 1: []}) == {TORN_TRANSACTION: 1, LOST_WRITE: 1}


def test_whole_or_aborted_transactions_are_not_torn():
    """All of a committed transaction visible; none of an aborted one."""
    ops = [
        txn_send("a", 0, "T1"),
        txn_send("b", 0, "T1", partition=1),
        Txn("tx", "T1", COMMITTED, start=1, end=1),
        Send("tx", 0, "c", UNKNOWN, txn="T2", start=2, end=2),
        Send("tx", 1, "d", UNKNOWN, txn="T2", start=2, end=2),
        Txn("tx", "T2", ABORTED, start=3, end=3),
    ]
    assert found(ops, {0: [(0, "a")], 1: [(0, "b")]}) == {}


def test_a_transaction_whose_end_is_unknown_is_read_whole_or_not_at_all():
    """An unknown end (a timed-out commit) may have committed or aborted, never in part."""
    ops = [txn_send("a", 0, "T1"), txn_send("b", 0, "T1", partition=1), Txn("tx", "T1", UNKNOWN, start=1, end=1)]
    assert found(ops, {0: [(0, "a")], 1: []}) == {TORN_TRANSACTION: 1}
    assert found(ops, {0: [(0, "a")], 1: [(0, "b")]}) == {}
    assert found(ops, {0: [], 1: []}) == {}


def test_a_send_refused_before_it_was_queued_is_no_part_of_its_transaction():
    """send raised (never written): the transaction's other values are all of it."""
    ops = [
        txn_send("a", 0, "T1"),
        Send("tx", 1, "b", FAIL, txn="T1", start=1, end=1),
        Txn("tx", "T1", COMMITTED, start=2, end=2),
    ]
    assert found(ops, {0: [(0, "a")], 1: []}) == {}


def worker_transaction(name: str, outcome: str, t: int, *sends: tuple[int, str, int | None]) -> list:
    """The ops :class:`~raylog.chaos.workload.TransactionalWorker` records for one transaction
    begun at ``t``: each ``(partition, value, offset)`` invoked in turn (an offset of None:
    its future failed), the end, then each send's outcome once the end returned."""
    n = len(sends)
    ops = [
        Send("txn", p, v, OK if o is not None else UNKNOWN, o, txn=name, start=t + 1 + i, end=t + n + 2 + i)
        for i, (p, v, o) in enumerate(sends)
    ]
    return ops + [Txn("txn", name, outcome, start=t, end=t + n + 1)]


#: A transactional worker's history: T0 committed over both partitions (its markers at
#: p0@1, p1@1), T1 aborted (p0@2, its marker p0@3), T2 unknown and then committed by the
#: next init (p1@2, marker p1@3), T3 aborted before anything was acknowledged; an
#: idempotent producer's value at p0@4. A group member reads read_committed.
WORKER_OPS = [
    *worker_transaction("txn#0", COMMITTED, 0, (0, "a", 0), (1, "b", 0)),
    *worker_transaction("txn#1", ABORTED, 10, (0, "c", 2)),
    *worker_transaction("txn#2", UNKNOWN, 20, (1, "d", 2)),
    *worker_transaction("txn#3", ABORTED, 30, (1, "e", None)),
    Send("idem/t0", 0, "f", OK, 4, start=40, end=41),
    polled("m", (0, 0, "a"), (1, 0, "b"), t=42, group="g", read_committed=True),
    polled("m", (0, 4, "f"), (1, 2, "d"), t=43, group="g", read_committed=True),
    Commit("m", "g", ((0, 5), (1, 4)), OK, start=44, end=44),
]
WORKER_FINAL = {0: [(0, "a"), (4, "f")], 1: [(0, "b"), (2, "d")]}


def test_a_transactional_workers_history_read_committed_has_no_anomaly():
    """Markers and aborted records are gaps in the final read that polls jump; aborted and
    unacknowledged values are missing; nothing is found."""
    assert found(WORKER_OPS, WORKER_FINAL, {"g": {0: 5, 1: 4}}) == {}


def test_the_checker_finds_each_transaction_class_in_a_workers_history():
    """The same history, but a read_committed poll returned T1's aborted value; another
    returned T4's first value before T4 wrote again to that partition; and the final read
    has only half of the committed T5."""
    ops = [
        *WORKER_OPS,
        polled("b", (0, 2, "c"), t=45, read_committed=True),
        Txn("txn", "txn#4", COMMITTED, start=50, end=55),
        Send("txn", 0, "g", OK, 5, txn="txn#4", start=51, end=56),
        polled("a", (0, 5, "g"), t=52, read_committed=True),
        Send("txn", 0, "h", OK, 6, txn="txn#4", start=53, end=57),
        *worker_transaction("txn#5", COMMITTED, 60, (0, "i", 8), (1, "j", 4)),
    ]
    final = {0: WORKER_FINAL[0] + [(5, "g"), (6, "h"), (8, "i")], 1: WORKER_FINAL[1]}
    report = checker.check(History(ops, FinalRead.of(final, {"g": {0: 5, 1: 4}})))
    assert {k: n for k, n in report.counts().items() if n} == {
        ABORTED_READ: 1,
        INTERMEDIATE_READ: 1,
        TORN_TRANSACTION: 1,
        LOST_WRITE: 2,  # c, polled read_committed then gone; j, committed and gone
    }
    assert [a.value for a in report.anomalies[ABORTED_READ]] == ["c"]
    assert [a.value for a in report.anomalies[INTERMEDIATE_READ]] == ["g"]
    assert [a.value for a in report.anomalies[TORN_TRANSACTION]] == ["j"]
    assert report.violations(safe=True)


# --- report and recorder ---------------------------------------------------------------------


def test_the_report_counts_every_class_and_shows_examples():
    """Counts for all classes (zero included), a summary line, a few examples per class."""
    report = checker.check(History([sent(f"v{i}", i) for i in range(5)], FinalRead.of({0: [(5, "z")]})))
    assert set(report.counts()) == set(CLASSES) and report.counts()[LOST_WRITE] == 5
    assert report.summary() == "lost-write=5"
    assert len(report.examples().splitlines()) == checker.EXAMPLES_PER_CLASS
    assert checker.check(History([], FinalRead.of({}))).summary() == "none"


def test_a_value_sent_twice_is_a_workload_bug():
    """Values must be unique for the checker to trace them."""
    with pytest.raises(AssertionError, match="sent twice"):
        checker.check(History([sent("a", 0), sent("a", 1)], FinalRead.of({})))


def test_the_recorder_orders_operations_by_invocation():
    """A logical clock shared by threads; the history lists operations by start."""
    recorder = Recorder()
    first, second = recorder.now(), recorder.now()
    recorder.add(sent("b", 1, t=second))
    recorder.add(sent("a", 0, t=first))
    history = recorder.history(FinalRead.of({}))
    assert [op.value for op in history.ops] == ["a", "b"] and len(recorder) == 2


def test_the_report_shows_what_breaks_a_promise_first_among_many_that_do_not():
    """A run with thousands of duplicates of non-idempotent sends and one of an idempotent send:
    the summary counts the violation apart, and the examples show it first."""
    ops = [sent(f"n{i}", i, idempotent=False) for i in range(5)] + [sent("i", 5)]
    records = [(i, f"n{i}") for i in range(5)] + [(5, "i")] + [(6 + i, f"n{i}") for i in range(5)] + [(11, "i")]
    report = checker.check(History(ops, FinalRead.of({0: records})))
    assert report.counts()[DUPLICATE] == 6
    assert report.summary(safe=True) == "duplicate=6 (violations: duplicate=1)"
    assert report.summary() == "duplicate=6"
    first = report.examples(safe=True).splitlines()[0]
    assert first.startswith("  violation: duplicate") and "'i'" in first
