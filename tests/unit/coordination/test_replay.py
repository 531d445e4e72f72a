"""The group coordinator's offsets follow its partition's log (issue 25, defects 2 and 9):
batches applied by :class:`LogReplay` in offset order up to the high watermark, whichever
waiting call drives the replay, give the state a new leader loads from the same log (no
Ray; a real log in ``tmp_path``)."""

from __future__ import annotations

import itertools

import msgpack
import pytest

from raylog.common import record_batch
from raylog.coordination.group import GroupCoordinator, offset_record
from raylog.coordination.replay import LogReplay
from raylog.errors import UnstableOffsetCommitError
from raylog.storage.log import Log
from raylog.types import OffsetAndMetadata, TopicPartition

NOW = 1_000_000
EPOCH = 0
A0, A1 = TopicPartition("a", 0), TopicPartition("a", 1)


def om(offset: int) -> OffsetAndMetadata:
    return OffsetAndMetadata(offset, "")


class OffsetsLog:
    """``__consumer_offsets-0`` as the coordinator writes it: each append's end offset kept."""

    def __init__(self, tmp_path) -> None:
        self.log = Log.open(str(tmp_path / "offsets-0"))
        self.ends: list[int] = []

    def _append(self, batch: bytes) -> None:
        self.ends.append(self.log.append_as_leader(batch, EPOCH).last_offset + 1)

    def commit(self, offsets: dict, group_id: str = "g") -> None:
        keys, values = zip(*[offset_record(group_id, tp, o, NOW) for tp, o in offsets.items()], strict=True)
        self._append(record_batch.build(list(values), keys=list(keys)))

    def txn_commit(self, producer_id: int, producer_epoch: int, offsets: dict) -> None:
        keys, values = zip(*[offset_record("g", tp, o, NOW) for tp, o in offsets.items()], strict=True)
        fields = {"producer_id": producer_id, "producer_epoch": producer_epoch, "transactional": True}
        self._append(record_batch.build(list(values), keys=list(keys), **fields))

    def marker(self, producer_id: int, producer_epoch: int, commit: bool) -> None:
        self._append(record_batch.build_marker(producer_id, producer_epoch, commit, coordinator_epoch=1))

    def group_record(self, generation: int, members: list) -> None:
        value = {"generation": generation, "protocol": "range", "leader": members[0][0], "members": members}
        key = msgpack.packb([2, "g"])
        self._append(record_batch.build([msgpack.packb(value)], keys=[key]))

    def loaded(self, end_offset: int) -> GroupCoordinator:
        """What a new leader holding the log up to ``end_offset`` loads."""
        fresh = GroupCoordinator()
        LogReplay(lambda header, records: fresh.apply_batch(header, records, NOW), 0).catch_up(
            self.log, end_offset, 1 << 20
        )
        return fresh


def serving(log: OffsetsLog) -> tuple[GroupCoordinator, LogReplay]:
    """A coordinator that loaded the empty partition and serves, with its replay."""
    groups = GroupCoordinator()
    groups.serve()
    return groups, LogReplay(lambda header, records: groups.apply_batch(header, records, NOW), 0)


def offsets_of(groups: GroupCoordinator) -> tuple[dict, dict]:
    return {g: dict(group.offsets) for g, group in groups.groups.items() if group.offsets}, groups.pending


def test_every_order_of_wake_ups_leaves_the_offsets_of_the_log(tmp_path):
    """Five appends (a transaction's offsets, a plain commit between them and its abort
    marker, the producer's next transaction and its commit marker) each
    wait for the ISR; in every order of their wake-ups (each wakes once the HW covers its own
    batch, and replays up to the HW), the offsets after each wake-up are those loaded from
    the log up to the HW, and at the end those of the whole log."""
    log = OffsetsLog(tmp_path)
    log.txn_commit(5, 0, {A0: om(15), A1: om(5)})
    log.commit({A0: om(10)})
    log.marker(5, 1, commit=False)
    log.txn_commit(5, 1, {A1: om(30)})
    log.marker(5, 2, commit=True)
    expected = {end: offsets_of(log.loaded(end)) for end in log.ends}
    assert expected[log.ends[-1]] == ({"g": {A0: om(10), A1: om(30)}}, {})
    for order in itertools.permutations(range(len(log.ends))):
        groups, replay = serving(log)
        high_watermark = 0
        for waiter in order:
            high_watermark = max(high_watermark, log.ends[waiter])
            replay.catch_up(log.log, high_watermark, 1 << 20)
            assert offsets_of(groups) == expected[high_watermark], f"wake-ups {order}"


def test_nothing_beyond_the_high_watermark_is_applied(tmp_path):
    """A commit appended but not replicated is not visible; once the HW covers it, it is."""
    log = OffsetsLog(tmp_path)
    log.commit({A0: om(1)})
    log.commit({A0: om(2)})
    groups, replay = serving(log)
    replay.catch_up(log.log, log.ends[0], 1 << 20)
    assert groups.committed("g") == {A0: om(1)} and replay.next_offset == log.ends[0]
    replay.catch_up(log.log, log.ends[1], 1 << 20)
    assert groups.committed("g") == {A0: om(2)} and groups.next_offset == log.ends[1]


def test_each_batch_is_applied_once_in_order_whatever_the_read_size(tmp_path):
    """Reads of one byte (each returns one whole batch) and repeated catch-ups hand every
    batch over once, in offset order, markers included."""
    log = OffsetsLog(tmp_path)
    log.commit({A0: om(1)})
    log.txn_commit(5, 0, {A1: om(2)})
    log.marker(5, 1, commit=True)
    seen: list[int] = []
    replay = LogReplay(lambda header, records: seen.append(header.base_offset), 0)
    for _ in range(3):
        replay.catch_up(log.log, log.ends[-1], 1)
    assert seen == [0, *log.ends[:-1]]


def test_a_pending_transaction_answers_unstable_until_its_marker_is_replicated(tmp_path):
    """KIP-447: the group's offsets of a transaction answer UNSTABLE_OFFSET_COMMIT from the
    time its offsets are replicated until its marker is."""
    log = OffsetsLog(tmp_path)
    log.txn_commit(5, 0, {A0: om(7)})
    log.marker(5, 0, commit=True)  # no bump: a Kafka client at EndTxn v0-4
    groups, replay = serving(log)
    replay.catch_up(log.log, log.ends[0], 1 << 20)
    with pytest.raises(UnstableOffsetCommitError):
        groups.committed("g")
    replay.catch_up(log.log, log.ends[1], 1 << 20)
    assert groups.committed("g") == {A0: om(7)}


def test_a_marker_decides_its_producers_transactions_up_to_its_epoch_never_a_later_one(tmp_path):
    """In log order a marker carries the next epoch of its producer (or, not bumped, the
    transaction's own) and decides the transactions before it; the next transaction's
    offsets follow it and wait for their own marker."""
    log = OffsetsLog(tmp_path)
    log.txn_commit(5, 0, {A0: om(10)})
    log.marker(5, 1, commit=True)
    log.txn_commit(5, 1, {A1: om(11)})
    log.marker(5, 1, commit=False)  # (not bumped)
    log.txn_commit(5, 1, {A1: om(12)})
    groups, replay = serving(log)
    replay.catch_up(log.log, log.ends[2], 1 << 20)
    assert groups.pending == {(5, 1): {"g": {A1: om(11)}}} and groups.committed("g", [A0]) == {A0: om(10)}
    replay.catch_up(log.log, log.ends[4], 1 << 20)
    assert groups.pending == {(5, 1): {"g": {A1: om(12)}}} and groups.committed("g", [A0]) == {A0: om(10)}


def test_while_serving_group_records_do_not_restore_membership_and_tombstones_create_nothing(tmp_path):
    """Membership is decided in memory and persisted by the group records: once serving, a
    replayed group record (an older generation's) changes no member, and an offset
    tombstone of a deleted group does not bring the group back. Loading restores both."""
    log = OffsetsLog(tmp_path)
    log.group_record(1, [["m-1", None, "c", 10_000, 60_000, ["a"], ["range"], {"a": 2}, [["a", 0]]]])
    log.commit({A0: None}, group_id="gone")
    groups, replay = serving(log)
    replay.catch_up(log.log, log.ends[-1], 1 << 20)
    assert groups.groups == {}
    assert log.loaded(log.ends[-1]).describe("g")["generation"] == 1
