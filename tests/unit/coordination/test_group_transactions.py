"""Offsets committed in transactions (Kafka's TxnOffsetCommit) in the group coordinator:
held until the producer's marker, visible on commit, dropped on abort, UNSTABLE_OFFSET_COMMIT
meanwhile, and rebuilt the same from the log (no Ray)."""

from __future__ import annotations

import pytest

from raylog.coordination.group import GroupCoordinator, offset_record
from raylog.errors import UnstableOffsetCommitError
from raylog.types import OffsetAndMetadata, TopicPartition

NOW = 1_000_000
A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def om(offset: int, metadata: str = "") -> OffsetAndMetadata:
    return OffsetAndMetadata(offset, metadata)


def test_committed_offsets_become_visible_with_the_commit_marker():
    """Pending offsets are not the group's until their producer's commit marker; then they
    replace what was committed before."""
    g = GroupCoordinator()
    g.apply_commit("g", {A0: om(1)})
    g.add_pending(5, 0, "g", {A0: om(10, "txn"), A1: om(11)})
    assert g.groups["g"].offsets == {A0: om(1)}
    g.complete_transaction(5, 1, committed=True)
    assert g.committed("g") == {A0: om(10, "txn"), A1: om(11)}
    assert g.pending == {}


def test_aborted_offsets_are_dropped():
    """An abort marker drops the pending offsets; the earlier commits stay; a group that
    only had aborted offsets does not come to exist."""
    g = GroupCoordinator()
    g.apply_commit("g", {A0: om(1)})
    g.add_pending(5, 0, "g", {A0: om(10), B0: om(3)})
    g.add_pending(5, 0, "h", {A0: om(7)})
    g.complete_transaction(5, 1, committed=False)
    assert g.committed("g") == {A0: om(1)} and g.committed("h") == {}
    assert "h" not in g.groups and g.pending == {}


def test_pending_offsets_make_only_their_partitions_unstable():
    """While a transaction holds offsets of a group, fetching those partitions (or all of
    the group's) is UNSTABLE_OFFSET_COMMIT (retriable); other partitions and other groups
    answer; after the marker everything answers."""
    g = GroupCoordinator()
    g.apply_commit("g", {A0: om(1), B0: om(2)})
    g.add_pending(5, 0, "g", {A1: om(9)})
    with pytest.raises(UnstableOffsetCommitError):
        g.committed("g")
    with pytest.raises(UnstableOffsetCommitError):
        g.committed("g", [A1])
    with pytest.raises(UnstableOffsetCommitError):
        g.committed("g", [("a", 0), ("a", 1)])  # plain tuples as clients send them
    assert g.committed("g", [A0, B0]) == {A0: om(1), B0: om(2)}
    assert g.committed("g", [("a", 0)]) == {A0: om(1)}
    assert g.committed("other") == {}
    g.complete_transaction(6, 1, committed=True)  # another producer's marker: no change
    with pytest.raises(UnstableOffsetCommitError):
        g.committed("g", [A1])
    g.complete_transaction(5, 1, committed=True)
    assert g.committed("g") == {A0: om(1), A1: om(9), B0: om(2)}


def test_two_producers_transactions_are_decided_apart():
    """Each producer's pending offsets follow its own marker; a later add in the same
    transaction overrides an earlier one of the same partition."""
    g = GroupCoordinator()
    g.add_pending(5, 0, "g", {A0: om(10)})
    g.add_pending(6, 0, "g", {A1: om(20)})
    g.add_pending(5, 0, "g", {A0: om(12)})
    g.complete_transaction(6, 1, committed=False)
    with pytest.raises(UnstableOffsetCommitError):
        g.committed("g", [A0])
    assert g.committed("g", [A1]) == {}
    g.complete_transaction(5, 1, committed=True)
    assert g.committed("g") == {A0: om(12)}


def replay(log: list[tuple]) -> GroupCoordinator:
    """A coordinator loaded from ``log`` in order, as the actor loads its partition: plain
    batches by load(), transactional ones by load_pending(), markers complete."""
    g = GroupCoordinator()
    for kind, producer_id, payload in log:
        if kind == "plain":
            g.load(payload, NOW)
        elif kind == "txn":
            g.load_pending(producer_id, 0, payload)
        else:
            g.complete_transaction(producer_id, 1, payload)
    return g


def test_loading_the_log_in_order_rebuilds_the_same_state():
    """A coordinator that replays the records (plain commits, transactional commits,
    markers, records without key or value) in log order holds the committed and pending
    offsets the live one held."""
    live, log = GroupCoordinator(), []

    def plain(group, offsets):
        records = live.prepare_commit(group, "", -1, None, offsets, NOW)
        log.append(("plain", None, records))
        live.apply_commit(group, offsets)

    def txn(pid, group, offsets):
        records = live.prepare_commit(group, "", -1, None, offsets, NOW)
        log.append(("txn", pid, records))
        live.add_pending(pid, 0, group, offsets)

    def marker(pid, commit):
        log.append(("marker", pid, commit))
        live.complete_transaction(pid, 1, commit)

    plain("g", {A0: om(1), A1: om(1)})
    txn(5, "g", {A0: om(5, "five")})
    txn(6, "g", {A1: om(6)})
    txn(5, "h", {B0: om(50)})
    marker(6, False)
    txn(7, "g", {B0: om(70)})
    marker(5, True)
    plain("h", {A0: om(3)})
    txn(8, "h", {A0: om(80)})  # still open at the end
    log.append(("txn", 9, [(None, b"x"), (offset_record("g", A0, om(1), NOW)[0], None)]))  # nothing to hold
    marker(7, True)

    loaded = replay(log)
    assert {k: v.offsets for k, v in loaded.groups.items()} == {k: v.offsets for k, v in live.groups.items()}
    assert loaded.pending == live.pending == {(8, 0): {"h": {A0: om(80)}}}
    assert loaded.committed("g") == {A0: om(5, "five"), A1: om(1), B0: om(70)}
    with pytest.raises(UnstableOffsetCommitError):
        loaded.committed("h", [A0])
    assert loaded.committed("h", [B0]) == {B0: om(50)}


def test_a_plain_commit_after_a_transactional_one_survives_its_commit_marker():
    """Kafka keeps, on a commit marker, whichever offset of a partition was appended last
    (GroupMetadata.completePendingTransactionalOffsetCommit compares log positions): a plain
    commit appended after the transaction's offset record, before its marker, stays. Here the
    marker overwrites it; and since the offsets partition is compacted (the later record of
    the key is kept, the transactional one removed), a coordinator loaded after compaction
    then disagrees with the live one that answered consumers."""
    live = GroupCoordinator()
    txn_records = live.prepare_commit("g", "", -1, None, {A0: om(5)}, NOW)
    live.add_pending(5, 0, "g", {A0: om(5)})
    plain_records = live.prepare_commit("g", "", -1, None, {A0: om(9)}, NOW)
    live.apply_commit("g", {A0: om(9)})
    live.complete_transaction(5, 1, committed=True)
    assert txn_records[0][0] == plain_records[0][0]  # one key: compaction keeps only the later
    compacted = replay([("txn", 5, []), ("plain", None, plain_records), ("marker", 5, True)])
    assert compacted.committed("g") == {A0: om(9)}
    assert live.committed("g") == compacted.committed("g")  # fails: the live one says 5


def test_without_require_stable_the_last_committed_offsets_answer_meanwhile():
    """Kafka's OffsetFetch without RequireStable: the offsets committed before the pending
    transaction, never its offsets nor UNSTABLE_OFFSET_COMMIT, until its marker comes."""
    g = GroupCoordinator()
    g.apply_commit("g", {A0: om(1)})
    g.add_pending(5, 0, "g", {A0: om(10), A1: om(11)})
    assert g.committed("g", require_stable=False) == {A0: om(1)}
    assert g.committed("g", [A0, A1], require_stable=False) == {A0: om(1)}
    with pytest.raises(UnstableOffsetCommitError):
        g.committed("g", [A0])
    g.complete_transaction(5, 1, committed=True)
    assert g.committed("g", require_stable=False) == {A0: om(10), A1: om(11)}
