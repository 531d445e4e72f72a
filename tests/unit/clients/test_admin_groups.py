"""The Admin's consumer groups family without Ray, against a scripted group coordinator:
how a classic or a KIP-848 group's description and its offsets become a
ConsumerGroupDescription with lags, how offsets are reset, and which error each refusal is."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from raylog.common.requests import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from raylog.errors import (
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    NonEmptyGroupError,
    UnknownMemberIdError,
)
from raylog.protocol import GroupResponse, error_fields
from raylog.types import MemberDescription, OffsetAndMetadata, PartitionLag, TopicPartition
from tests.unit.clients.admin_fakes import FakeActor, FakeCluster, make_admin

T0, T1, T2 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)
NOT_FOUND = GroupResponse(**error_fields(GroupIdNotFoundError("no group 'g'")))
CLASSIC = {
    "state": "Stable",
    "generation": 3,
    "protocol": "range",
    "members": [{"member_id": "m1", "instance_id": None, "client_id": "c1", "assignment": [("t", 0), ("t", 1)]}],
}


def _cluster(coordinator: FakeActor, **offsets: tuple[int, int]) -> FakeCluster:
    """Group coordinators on partition 4 of the offsets topic, the log of ``t`` from
    ``offsets["p<i>"] = (start, end)``."""
    controller = FakeActor(find_coordinator=lambda group_id: (4, coordinator))
    cluster = FakeCluster({"t": 3}, controller=controller)
    for name, (start, end) in offsets.items():
        cluster.offsets[TopicPartition("t", int(name[1:]))] = {EARLIEST_TIMESTAMP: start, LATEST_TIMESTAMP: end}
    return cluster


def _committed(**offsets: int) -> GroupResponse:
    return GroupResponse(value={("t", int(p[1:])): (offset, "", -1) for p, offset in offsets.items()})


def test_a_classic_group_is_described_with_each_partitions_lag_and_owner(monkeypatch):
    coordinator = FakeActor(
        describe_consumer_group=NOT_FOUND,
        describe_group=GroupResponse(value=CLASSIC),
        fetch_offsets=_committed(p1=4, p2=9),
    )
    admin, _ = make_admin(monkeypatch, _cluster(coordinator, p0=(0, 5), p1=(0, 10), p2=(2, 8)))
    (described,) = admin.describe_consumer_groups(["g"])
    assert (described.group_id, described.state, described.generation, described.protocol) == (
        "g",
        "Stable",
        3,
        "range",
    )
    assert described.coordinator_partition == 4
    assert described.members == (MemberDescription("m1", None, "c1", (T0, T1)),)
    assert described.partitions == {
        T0: PartitionLag(None, 5, None, "m1"),  # read, nothing committed yet
        T1: PartitionLag(4, 10, 6, "m1"),
        T2: PartitionLag(9, 8, 0, None),  # committed past the end (truncated): no negative lag
    }


def test_a_consumer_protocol_group_with_members_is_described_from_its_epoch_and_assignor(monkeypatch):
    member = SimpleNamespace(member_id="m2", instance_id="i2", assigned={("t", 2), ("t", 0)})
    group = SimpleNamespace(members={"m2": member}, state=lambda: "Stable", epoch=7, assignor="uniform")
    coordinator = FakeActor(describe_consumer_group=GroupResponse(value=group), fetch_offsets=_committed())
    admin, _ = make_admin(monkeypatch, _cluster(coordinator, p0=(0, 1), p2=(0, 2)))
    (described,) = admin.describe_consumer_groups(["g"])
    assert (described.generation, described.protocol) == (7, "uniform")
    assert described.members == (MemberDescription("m2", "i2", "", (T0, T2)),)
    assert set(described.partitions) == {T0, T2}
    assert coordinator.sent("describe_group") == []


def test_an_empty_consumer_protocol_group_is_described_as_the_classic_side_has_it(monkeypatch):
    empty = SimpleNamespace(members={}, state=lambda: "Empty", epoch=2, assignor="uniform")
    coordinator = FakeActor(
        describe_consumer_group=GroupResponse(value=empty),
        describe_group=GroupResponse(value={**CLASSIC, "state": "Empty", "members": []}),
        fetch_offsets=_committed(p1=3),
    )
    admin, _ = make_admin(monkeypatch, _cluster(coordinator, p1=(0, 3)))
    (described,) = admin.describe_consumer_groups(["g"])
    assert (described.state, described.protocol, described.members) == ("Empty", "range", ())
    assert described.partitions == {T1: PartitionLag(3, 3, 0, None)}
    coordinator.answers["describe_group"] = NOT_FOUND
    (described,) = admin.describe_consumer_groups(["g"])
    assert (described.state, described.generation, described.protocol) == ("Empty", 2, "uniform")


def test_an_unknown_group_is_not_found(monkeypatch):
    coordinator = FakeActor(describe_consumer_group=NOT_FOUND, describe_group=NOT_FOUND)
    admin, _ = make_admin(monkeypatch, _cluster(coordinator))
    with pytest.raises(GroupIdNotFoundError, match="'g'"):
        admin.describe_consumer_groups(["g"])


def test_list_consumer_groups_asks_every_offsets_partitions_leader(monkeypatch):
    cluster = FakeCluster({"__consumer_offsets": 2})
    cluster.leader("__consumer_offsets", 0).answers["list_groups"] = GroupResponse(value=[("b", "Stable", "x")])
    cluster.leader("__consumer_offsets", 1).answers["list_groups"] = GroupResponse(value=[("a", "Empty", "y")])
    admin, _ = make_admin(monkeypatch, cluster)
    assert admin.list_consumer_groups() == [("a", "Empty"), ("b", "Stable")]
    admin, _ = make_admin(monkeypatch, FakeCluster({"t": 1}))
    assert admin.list_consumer_groups() == []  # no offsets topic yet: no group


def test_altering_offsets_of_a_group_with_members_is_non_empty_group(monkeypatch):
    coordinator = FakeActor(commit_offsets=GroupResponse())
    admin, _ = make_admin(monkeypatch, _cluster(coordinator))
    admin.alter_consumer_group_offsets("g", {T0: 5, T1: OffsetAndMetadata(7, None)})
    assert coordinator.sent("commit_offsets") == [
        ("g", "", -1, None, {T0: OffsetAndMetadata(5, ""), T1: OffsetAndMetadata(7, "")})
    ]
    coordinator.answers["commit_offsets"] = GroupResponse(**error_fields(UnknownMemberIdError("members: m1")))
    with pytest.raises(NonEmptyGroupError, match="members: m1"):
        admin.alter_consumer_group_offsets("g", {T0: 5})


@pytest.mark.parametrize(
    "how", [{}, {"to": "earliest", "shift_by": 1}, {"to": "middle"}, {"to_timestamp_ms": 5, "shift_by": -1}]
)
def test_reset_wants_exactly_one_way(monkeypatch, how):
    coordinator = FakeActor()
    admin, _ = make_admin(monkeypatch, _cluster(coordinator))
    with pytest.raises(ValueError, match="exactly one"):
        admin.reset_consumer_group_offsets("g", [T0], **how)
    assert coordinator.calls == []


def test_reset_to_earliest_latest_or_a_time_commits_the_new_offsets(monkeypatch):
    coordinator = FakeActor(commit_offsets=GroupResponse())
    cluster = _cluster(coordinator, p0=(2, 10), p1=(0, 4))
    cluster.offsets[T0][1000] = 6
    cluster.offsets[T1][1000] = -1  # no record at or after the time: the end
    admin, _ = make_admin(monkeypatch, cluster)
    assert admin.reset_consumer_group_offsets("g", [T0, ("t", 1)], to="earliest") == {T0: 2, T1: 0}
    assert admin.reset_consumer_group_offsets("g", [T0, T1], to="latest") == {T0: 10, T1: 4}
    assert admin.reset_consumer_group_offsets("g", [T0, T1], to_timestamp_ms=1000) == {T0: 6, T1: 4}
    committed = [offsets for *_, offsets in coordinator.sent("commit_offsets")]
    assert committed[-1] == {T0: OffsetAndMetadata(6, ""), T1: OffsetAndMetadata(4, "")}
    assert len(committed) == 3


def test_reset_by_a_shift_moves_from_the_committed_offset_within_the_log_and_a_dry_run_commits_nothing(monkeypatch):
    coordinator = FakeActor(fetch_offsets=_committed(p0=5))
    admin, _ = make_admin(monkeypatch, _cluster(coordinator, p0=(2, 10), p1=(3, 4), p2=(0, 9)))
    assert admin.reset_consumer_group_offsets("g", [T0, T1], shift_by=3, dry_run=True) == {T0: 8, T1: 4}
    assert admin.reset_consumer_group_offsets("g", [T0, T2], shift_by=-9, dry_run=True) == {T0: 2, T2: 0}
    assert coordinator.sent("fetch_offsets") == [("g", [T0, T1]), ("g", [T0, T2])]
    assert coordinator.sent("commit_offsets") == []


def test_deleting_offsets_a_member_reads_names_the_partition_after_the_others_went(monkeypatch):
    subscribed = GroupSubscribedToTopicError.code
    coordinator = FakeActor(delete_offsets=GroupResponse(value={("t", 0): 0, ("t", 1): subscribed}))
    admin, _ = make_admin(monkeypatch, _cluster(coordinator))
    with pytest.raises(GroupSubscribedToTopicError, match="t-1 is read by a member of group 'g'"):
        admin.delete_consumer_group_offsets("g", [T0, T1])
    assert coordinator.sent("delete_offsets") == [("g", [("t", 0), ("t", 1)])]


def test_delete_consumer_groups_asks_each_groups_coordinator_and_raises_its_refusal(monkeypatch):
    coordinator = FakeActor(delete_group=[GroupResponse(), GroupResponse(**error_fields(NonEmptyGroupError("b")))])
    admin, _ = make_admin(monkeypatch, _cluster(coordinator))
    with pytest.raises(NonEmptyGroupError):
        admin.delete_consumer_groups(["a", "b"])
    assert coordinator.sent("delete_group") == [("a",), ("b",)]
