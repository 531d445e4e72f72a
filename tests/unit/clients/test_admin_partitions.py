"""The Admin's partitions family without Ray: DeleteRecords to each partition's leader,
reassignments and leader elections through the controller, and what each returns or raises."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from raylog.clients.admin import DELETE_RECORDS_MARGIN_S
from raylog.errors import (
    InvalidConfigError,
    InvalidReplicaAssignmentError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from raylog.protocol import DeleteRecordsResponse, error_fields
from raylog.types import BrokerInfo, TopicPartition
from tests.unit.clients.admin_fakes import FakeActor, FakeCluster, make_admin

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


def test_delete_records_asks_each_leader_and_returns_the_low_watermarks(monkeypatch):
    cluster = FakeCluster({"t": 2})
    cluster.leader("t", 0).answers["delete_records"] = lambda offset, timeout_ms, token: DeleteRecordsResponse(
        low_watermark=offset
    )
    cluster.leader("t", 1).answers["delete_records"] = DeleteRecordsResponse(low_watermark=7)
    admin, waits = make_admin(monkeypatch, cluster)
    assert admin.delete_records({T0: 5, T1: -1}, timeout_ms=3000) == {T0: 5, T1: 7}
    assert [args[:2] for args in cluster.leader("t", 0).sent("delete_records")] == [(5, 3000)]
    assert [args[:2] for args in cluster.leader("t", 1).sent("delete_records")] == [(-1, 3000)]
    assert waits == [3.0 + DELETE_RECORDS_MARGIN_S] * 2  # the leaders wait for the ISR themselves


def test_delete_records_raises_a_refusal_after_every_partition_was_asked(monkeypatch):
    cluster = FakeCluster({"t": 2})
    refused = DeleteRecordsResponse(**error_fields(OffsetOutOfRangeError("9 is past the high watermark 4")))
    cluster.leader("t", 0).answers["delete_records"] = refused
    cluster.leader("t", 1).answers["delete_records"] = DeleteRecordsResponse(low_watermark=2)
    admin, _ = make_admin(monkeypatch, cluster)
    with pytest.raises(OffsetOutOfRangeError, match="past the high watermark"):
        admin.delete_records({T0: 9, T1: 2})
    assert len(cluster.leader("t", 1).sent("delete_records")) == 1


def test_alter_partition_reassignments_sends_targets_by_partition_and_raises_the_first_refusal(monkeypatch):
    refused = (InvalidReplicaAssignmentError.code, "broker 9 is not registered")
    controller = FakeActor(alter_partition_reassignments=lambda targets: {tp: (0, "") for tp in targets})
    cluster = FakeCluster({"t": 2}, controller=controller)
    admin, _ = make_admin(monkeypatch, cluster)
    admin.alter_partition_reassignments({T0: (2, 1), T1: None})
    assert controller.sent("alter_partition_reassignments") == [({("t", 0): [2, 1], ("t", 1): None},)]
    assert cluster.refreshes == 1
    controller.answers["alter_partition_reassignments"] = {("t", 0): (0, ""), ("t", 1): refused}
    with pytest.raises(InvalidReplicaAssignmentError, match="broker 9"):
        admin.alter_partition_reassignments({T0: [0], T1: [9]})


def test_list_partition_reassignments_keys_targets_by_topic_partition(monkeypatch):
    admin, _ = make_admin(monkeypatch, FakeCluster({"t": 2}, reassignments={("t", 1): (0, 2)}))
    assert admin.list_partition_reassignments() == {T1: (0, 2)}


def test_elect_leaders_names_every_partition_of_the_topics_and_counts_the_changed_leaders(monkeypatch):
    unknown = (UnknownTopicOrPartitionError.code, "")
    controller = FakeActor(elect_leaders=lambda kind, partitions: {("t", 0): (0, ""), ("t", 1): unknown})
    admin, _ = make_admin(monkeypatch, FakeCluster({"t": 2, "u": 1}, controller=controller))
    assert admin.elect_leaders(["t", "u"]) == 1
    assert admin.elect_leaders(election_type="unclean") == 1
    (preferred, named), (unclean, everything) = controller.sent("elect_leaders")
    assert named == [("t", 0), ("t", 1), ("u", 0)] and everything is None
    assert preferred != unclean
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.elect_leaders(["nope"])


def test_elect_leaders_refuses_an_unknown_election_type_before_sending(monkeypatch):
    controller = FakeActor()
    admin, _ = make_admin(monkeypatch, FakeCluster({"t": 1}, controller=controller))
    with pytest.raises(InvalidConfigError, match="'PREFERRED'"):
        admin.elect_leaders(["t"], election_type="PREFERRED")
    assert controller.calls == []


def test_describe_cluster_is_a_copy_of_the_brokers(monkeypatch):
    brokers = {0: BrokerInfo(0, "n0", "/d0"), 1: BrokerInfo(1, "n1", "/d1")}
    admin, _ = make_admin(monkeypatch, FakeCluster(brokers=brokers))
    described = admin.describe_cluster()
    assert described == brokers
    described.clear()
    assert admin.describe_cluster() == brokers


def test_list_offsets_asks_each_leader_with_its_spec_and_isolation_level(monkeypatch):
    """Each partition's leader gets its spec's ListOffsets timestamp (the partitions of one
    spec at once) and the isolation level; the answers come back per partition, in the order
    asked."""
    from raylog.clients.consumer import offset_fetcher
    from raylog.protocol import ListOffsetsResponse
    from raylog.types import OffsetAndTimestamp, OffsetSpec

    cluster = FakeCluster({"t": 3})
    cluster.metadata().topics["t"].partitions = [SimpleNamespace(partition=p, leader_epoch=4) for p in range(3)]
    for p in range(3):
        cluster.leader("t", p).answers["list_offsets"] = lambda ts, epoch, isolation, token, p=p: ListOffsetsResponse(
            offset=10 * p + (ts if ts < 0 else 100), timestamp_ms=ts if ts >= 0 else -1
        )
    monkeypatch.setattr(offset_fetcher, "call", lambda ref, timeout_s: ref)
    admin, _ = make_admin(monkeypatch, cluster)
    T2 = TopicPartition("t", 2)
    specs = {T2: OffsetSpec.max_timestamp(), T0: OffsetSpec.for_timestamp(5), T1: OffsetSpec.max_timestamp()}
    found = admin.list_offsets(specs, isolation_level="read_committed")
    assert list(found) == [T2, T0, T1]
    assert found == {T2: OffsetAndTimestamp(17, -1), T0: OffsetAndTimestamp(100, 5), T1: OffsetAndTimestamp(7, -1)}
    assert [args[0] for args in cluster.leader("t", 1).sent("list_offsets")] == [-3]
    assert {args[1:3] for p in range(3) for args in cluster.leader("t", p).sent("list_offsets")} == {(4, 1)}
    assert [s.timestamp for s in (OffsetSpec.earliest(), OffsetSpec.latest(), OffsetSpec.earliest_local())] == [
        -2,
        -1,
        -4,
    ]
    assert OffsetSpec.latest_tiered().timestamp == -5


@pytest.mark.parametrize(
    ("specs", "options"),
    [({T0: -2}, {}), ({T0: None}, {}), ({}, {"isolation_level": "committed"})],
    ids=["a bare timestamp", "no spec", "an unknown isolation level"],
)
def test_list_offsets_refuses_what_is_not_a_spec_or_an_isolation_level(monkeypatch, specs, options):
    admin, _ = make_admin(monkeypatch, FakeCluster({"t": 1}))
    with pytest.raises(InvalidConfigError):
        admin.list_offsets(specs, **options)


@pytest.mark.parametrize("timestamp", [-1, -3, 1.5, True])
def test_a_timestamp_spec_takes_only_a_non_negative_integer(timestamp):
    from raylog.types import OffsetSpec

    with pytest.raises(InvalidConfigError):
        OffsetSpec.for_timestamp(timestamp)
