"""The Admin's topics family without Ray: what is checked before anything is sent (topic
names, partition counts, timeouts), what the controller is sent, and how its per-topic
answers become Kafka's errors after every topic was handled."""

from __future__ import annotations

import pytest

from raylog.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidTopicError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from raylog.types import NewPartitions, NewTopic
from tests.unit.clients.admin_fakes import FakeActor, FakeCluster, make_admin

EXISTS = (TopicAlreadyExistsError.code, "topic 'old' already exists")


def _answer_each(code_of: dict[str, tuple[int, str]] | None = None):
    """A controller call answering each topic named: ``code_of``'s answer, else (0, "")."""
    return lambda asked, *args: {
        getattr(t, "name", t): (code_of or {}).get(getattr(t, "name", t), (0, "")) for t in asked
    }


def test_create_topics_sends_only_legal_names_and_raises_the_first_refusal_after_all(monkeypatch):
    controller = FakeActor(create_topics=_answer_each({"old": EXISTS}))
    cluster = FakeCluster(controller=controller)
    admin, waits = make_admin(monkeypatch, cluster, request_timeout_ms=4000)
    topics = [NewTopic("a"), NewTopic("bad name"), NewTopic("old")]
    with pytest.raises(InvalidTopicError, match="bad name"):
        admin.create_topics(topics)
    assert controller.sent("create_topics") == [([topics[0], topics[2]],)]
    assert waits == [4.0]
    assert cluster.refreshes == 1  # the new topics are seen at once
    with pytest.raises(TopicAlreadyExistsError, match="'old' already exists"):
        admin.create_topics([NewTopic("old"), NewTopic("b")])


def test_create_topics_of_illegal_names_only_sends_nothing(monkeypatch):
    controller = FakeActor()
    admin, _ = make_admin(monkeypatch, FakeCluster(controller=controller))
    with pytest.raises(InvalidTopicError):
        admin.create_topics([NewTopic("x" * 250), NewTopic("..")])
    assert controller.calls == []


def test_create_topics_waits_for_the_leaders_of_the_created_topics_only(monkeypatch):
    controller = FakeActor(
        create_topics=_answer_each({"old": EXISTS}),
        await_leaders=lambda topics, step_ms, followers: {t: (0, "", 2, 2) for t in topics},
    )
    admin, waits = make_admin(monkeypatch, FakeCluster(controller=controller))
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics([NewTopic("new"), NewTopic("old")], wait_for_leaders_ms=5000, timeout_ms=2500)
    ((topics, step_ms, followers),) = controller.sent("await_leaders")
    assert topics == ["new"] and 0 < step_ms <= 5000 and followers is False
    assert waits[0] == 2.5  # timeout_ms is the controller's time


@pytest.mark.parametrize("timeout_ms", [-1, True, 1.5, "1000"])
def test_a_bad_timeout_ms_is_refused_before_anything_is_sent(monkeypatch, timeout_ms):
    controller = FakeActor()
    admin, _ = make_admin(monkeypatch, FakeCluster({"t": 1}, controller=controller))
    with pytest.raises(InvalidConfigError, match="timeout_ms"):
        admin.create_topics([NewTopic("t")], timeout_ms=timeout_ms)
    with pytest.raises(InvalidConfigError, match="timeout_ms"):
        admin.delete_topics(["t"], timeout_ms=timeout_ms)
    with pytest.raises(InvalidConfigError, match="timeout_ms"):
        admin.create_partitions({"t": 2}, timeout_ms=timeout_ms)
    assert controller.calls == []


def test_await_leaders_reports_progress_until_every_partition_is_led(monkeypatch):
    controller = FakeActor(await_leaders=[{"t": (0, "", 1, 3)}, {"t": (0, "", 3, 3)}])
    cluster = FakeCluster(controller=controller)
    admin, waits = make_admin(monkeypatch, cluster, request_timeout_ms=1000)
    seen = []
    admin.await_leaders(["t"], 60_000, progress=lambda led, total: seen.append((led, total)), followers=True)
    assert seen == [(1, 3), (3, 3)]
    steps = [step_ms for _, step_ms, _ in controller.sent("await_leaders")]
    assert steps == [500, 500]  # the progress step, not the whole minute
    assert [followers for _, _, followers in controller.sent("await_leaders")] == [True, True]
    assert waits == [1.5, 1.5]  # the step and the request timeout
    assert cluster.refreshes == 1


def test_await_leaders_times_out_naming_how_many_partitions_lack_a_leader(monkeypatch):
    controller = FakeActor(await_leaders=lambda topics, step_ms, followers: {"t": (0, "", 1, 3), "u": (0, "", 2, 2)})
    admin, _ = make_admin(monkeypatch, FakeCluster(controller=controller))
    with pytest.raises(RequestTimedOutError, match="2 of 5 partitions of t, u have no leader after 0 ms"):
        admin.await_leaders(["t", "u"], 0)
    with pytest.raises(RequestTimedOutError, match="a replica not running"):
        admin.await_leaders(["t", "u"], 0, followers=True)


def test_await_leaders_of_an_unknown_topic_raises_the_controllers_error(monkeypatch):
    unknown = (UnknownTopicOrPartitionError.code, "unknown topic 'nope'")
    controller = FakeActor(await_leaders=lambda topics, step_ms, followers: {"nope": (*unknown, 0, 0)})
    admin, _ = make_admin(monkeypatch, FakeCluster(controller=controller))
    with pytest.raises(UnknownTopicOrPartitionError, match="'nope'"):
        admin.await_leaders(["nope"], 10_000)


def test_delete_topics_refuses_a_string_and_deletes_the_legal_names_before_raising(monkeypatch):
    controller = FakeActor(delete_topics=_answer_each())
    admin, _ = make_admin(monkeypatch, FakeCluster({"a": 1}, controller=controller))
    with pytest.raises(TypeError, match="list of names"):
        admin.delete_topics("a")
    with pytest.raises(InvalidTopicError):
        admin.delete_topics(["a", "a/b"])
    assert controller.sent("delete_topics") == [(["a"],)]


def test_list_and_describe_topics_read_the_refreshed_metadata(monkeypatch):
    cluster = FakeCluster({"b": 1, "a": 2, "__consumer_offsets": 3})
    admin, _ = make_admin(monkeypatch, cluster)
    assert admin.list_topics() == ["a", "b"]
    assert admin.list_topics(include_internal=True) == ["__consumer_offsets", "a", "b"]
    assert [t.name for t in admin.describe_topics(["b", "a"])] == ["b", "a"]
    assert [t.name for t in admin.describe_topics()] == ["__consumer_offsets", "a", "b"]
    with pytest.raises(UnknownTopicOrPartitionError, match="'x', 'y'"):
        admin.describe_topics(["a", "x", "y"])
    with pytest.raises(TypeError):
        admin.describe_topics("a")
    assert cluster.refreshes == 6


def test_create_partitions_sends_total_counts_and_waits_for_the_grown_topics_only(monkeypatch):
    refused = {"internal": (InvalidPartitionsError.code, "internal topic")}
    controller = FakeActor(
        create_partitions=lambda counts: {t: refused.get(t, (0, "")) for t in counts},
        await_leaders=lambda topics, step_ms, followers: {t: (0, "", 1, 1) for t in topics},
    )
    admin, _ = make_admin(monkeypatch, FakeCluster(controller=controller))
    with pytest.raises(InvalidPartitionsError, match="internal topic"):
        admin.create_partitions({"a": 3, "b": NewPartitions(5), "internal": 9}, wait_for_leaders_ms=1000)
    assert controller.sent("create_partitions") == [({"a": 3, "b": 5, "internal": 9},)]
    assert [topics for topics, _, _ in controller.sent("await_leaders")] == [["a", "b"]]


@pytest.mark.parametrize(
    "wanted, error",
    [
        (NewPartitions(4, new_assignments=[[0], [1]]), InvalidReplicaAssignmentError),
        (True, TypeError),
        ("4", TypeError),
        (NewPartitions(4.0), TypeError),
    ],
)
def test_create_partitions_refuses_what_raylog_cannot_send(monkeypatch, wanted, error):
    controller = FakeActor()
    admin, _ = make_admin(monkeypatch, FakeCluster(controller=controller))
    with pytest.raises(error, match="'a'"):
        admin.create_partitions({"a": wanted})
    assert controller.calls == []
