"""The consumer's ConsumerCoordinator against a fake group coordinator and a fake membership
(no Ray, no heartbeat thread): what commits send, commit_async's order and callbacks,
automatic commits, a rebalance's partitions given and taken, and leaving."""

from __future__ import annotations

import time

import pytest

from raylog.clients.consumer import Consumer
from raylog.clients.group import ConsumerRebalanceListener
from raylog.errors import CommitFailedError, IllegalStateError, TopicAuthorizationFailedError
from raylog.types import OffsetAndMetadata, TopicPartition
from tests.unit.clients.consumer_fakes import (
    FakeCluster,
    FakeCoordinatorClient,
    FakeLeader,
    small_batches,
)

T0, T1, T2 = (TopicPartition("t", p) for p in range(3))

pytestmark = pytest.mark.usefixtures("fake_ray")


class Revocations(ConsumerRebalanceListener):
    def __init__(self):
        self.revoked: list = []

    def on_partitions_revoked(self, revoked):
        self.revoked.append(sorted(revoked))


class FakeMembership:
    """A group member of generation 3, whose synchronous commits are recorded."""

    def __init__(self):
        self.commits: list[dict] = []
        self.listener = Revocations()
        self.closed: bool | None = None

    def commit(self, offsets):
        self.commits.append(offsets)

    def commit_args(self):
        return "m-1", 3, None

    member_commit_args = commit_args

    def maintain(self):
        pass

    def waitables(self):
        return []

    def close(self, leave):
        self.closed = leave


def member(*leaders: FakeLeader, committed: dict | None = None, **options):
    """A consumer of group "g" reading every partition from 0, as a member when ``committed``
    is not None (else outside any generation, partitions assigned by hand)."""
    consumer = Consumer(FakeCluster(*leaders), group_id="g", auto_offset_reset="earliest", **options)
    consumer.assign([TopicPartition("t", p) for p in range(len(leaders))])
    coordinator = consumer._coordinator
    coordinator.client = FakeCoordinatorClient(committed=committed)
    if committed is not None:
        coordinator.group = FakeMembership()
    return consumer, coordinator


def read(consumer: Consumer, count: int) -> None:
    n = 0
    while n < count:
        n += sum(map(len, consumer.poll(timeout_ms=1_000).values()))


def test_commit_sends_the_positions_with_the_epoch_of_the_last_record_read():
    leader = FakeLeader(small_batches(1, 3, epoch=5))
    consumer, coordinator = member(leader, max_poll_records=2)
    read(consumer, 2)
    consumer.commit()  # records fetched past the position: no epoch
    read(consumer, 1)
    consumer.commit()
    consumer.commit({T0: 1, TopicPartition("u", 0): OffsetAndMetadata(4, "m", 2)})
    assert coordinator.client.calls == [
        ("commit_offsets", ("g", "", -1, None, {T0: OffsetAndMetadata(2, "", -1)})),
        ("commit_offsets", ("g", "", -1, None, {T0: OffsetAndMetadata(3, "", 5)})),
        ("commit_offsets", ("g", "", -1, None, {T0: OffsetAndMetadata(1), TopicPartition("u", 0): (4, "m", 2)})),
    ]


def test_a_member_commits_in_its_generation_and_nothing_is_sent_without_positions():
    consumer, coordinator = member(FakeLeader(small_batches(1, 3)), FakeLeader(small_batches(1, 3)), committed={})
    consumer.commit()
    assert coordinator.group.commits == []  # no position known yet: nothing to commit
    consumer.seek(T1, 2)
    consumer.commit()
    assert coordinator.group.commits == [{T1: OffsetAndMetadata(2, "", -1)}]
    metadata = {"group_id": "g", "member_id": "m-1", "generation": 3, "group_instance_id": None}
    assert consumer.group_metadata() == metadata


def test_async_commits_go_in_order_and_their_callbacks_run_in_order_on_later_polls():
    consumer, coordinator = member(FakeLeader(small_batches(1, 3)), committed={})
    client, done = coordinator.client, []
    consumer.commit_async({T0: 1}, lambda offsets, error: done.append((offsets, error)))
    consumer.commit_async({T0: 2}, lambda offsets, error: done.append((offsets, error)))
    assert client.afters == [None, client.refs[0]]  # the second waits for the first at the coordinator
    assert [args[1:4] for _, args in client.calls] == [("m-1", 3, None)] * 2
    client.release(None)
    consumer.poll(timeout_ms=0)
    assert done == [({T0: OffsetAndMetadata(1)}, None)]
    failed = CommitFailedError("generation over")
    client.release(None, failed)
    consumer.poll(timeout_ms=0)
    assert done[1] == ({T0: OffsetAndMetadata(2)}, failed) and client.forgotten == [failed]
    consumer.commit_async({T0: 3})
    assert client.afters[-1] is None  # the previous one answered already


def test_auto_commit_commits_what_polls_returned_once_the_interval_passed():
    consumer, coordinator = member(FakeLeader(small_batches(1, 3)), committed={}, auto_commit_interval_ms=1)
    read(consumer, 3)
    time.sleep(0.01)
    consumer.poll(timeout_ms=0)
    commits = [args[-1] for method, args in coordinator.client.calls if method == "commit_offsets"]
    assert commits == [{T0: OffsetAndMetadata(3, "", 0)}]
    _, manual = member(FakeLeader(small_batches(1, 3)), committed={}, enable_auto_commit=False)
    manual._next_auto_commit = 0.0
    manual.maybe_auto_commit()
    assert manual.client.calls == []


def test_a_rebalance_commits_what_it_takes_and_starts_what_it_gives_at_the_committed_offsets():
    leaders = [FakeLeader(small_batches(1, 9)) for _ in range(3)]
    committed = {T2: OffsetAndMetadata(8, "", 0)}
    consumer, coordinator = member(*leaders, committed=committed)
    consumer.assign([T0, T1])
    consumer.seek(T0, 4)
    consumer.seek(T1, 6)
    coordinator._apply_assignment([T2], [T1])
    assert coordinator.group.commits == [{T1: OffsetAndMetadata(6, "", -1)}]
    assert consumer.assignment() == {T0, T2}
    assert consumer.position(T0) == 4 and consumer.position(T2) == 8
    state = consumer._subscriptions
    assert state.fetched_epochs[T2] == 0 and state.validated_epochs[T2] == -1  # checked by the next fetch
    coordinator._apply_assignment([T1], [])
    assert consumer.position(T1) == 0  # nothing committed: auto_offset_reset


def test_close_commits_tells_the_listener_and_leaves():
    consumer, coordinator = member(FakeLeader(small_batches(1, 3)), FakeLeader(small_batches(1, 3)), committed={})
    group = coordinator.group
    consumer.seek(T0, 2)
    consumer.close()
    assert group.commits == [{T0: OffsetAndMetadata(2, "", -1)}]
    assert group.listener.revoked == [[T0, T1]] and group.closed is True and coordinator.group is None
    with pytest.raises(IllegalStateError, match="closed"):
        consumer.commit()


def test_committed_answers_the_groups_offsets():
    consumer, _ = member(FakeLeader(), committed={T0: OffsetAndMetadata(9, "m", 1)})
    assert consumer.committed([T0, T1]) == {T0: OffsetAndMetadata(9, "m", 1), T1: None}
    assert consumer.committed(T0) == 9


def test_topics_the_principal_may_not_describe_are_raised_once_by_the_next_poll():
    cluster = FakeCluster(FakeLeader(small_batches(1, 1)))
    cluster.missing_topics_error = lambda missing: TopicAuthorizationFailedError(f"not yours: {missing}")
    consumer = Consumer(cluster, group_id="g")
    consumer._subscriptions.subscribe(["t", "secret"], None)
    coordinator = consumer._coordinator
    coordinator.group = FakeMembership()
    assert consumer.subscription() == {"t"}
    with pytest.raises(TopicAuthorizationFailedError, match="secret"):
        coordinator.maintain()
    coordinator.maintain()  # once per metadata refresh
