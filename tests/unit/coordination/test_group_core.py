"""The group coordinator's sequencing as a step core: a generation is told once its record is
persisted, a commit is answered once persisted, long-polling heartbeats wake when their group
rebalances, every caller is answered once, and nothing is applied when an append's wait ends
(no Ray)."""

from __future__ import annotations

import pytest

from raylog.coordination.group import GroupCoordinator
from raylog.coordination.group_core import (
    Append,
    Beat,
    BeatDue,
    Commit,
    GroupCore,
    Join,
    Leave,
    Persisted,
    Reply,
    Sync,
    Tick,
    Unload,
)
from raylog.errors import (
    IllegalGenerationError,
    NotCoordinatorError,
    NotEnoughReplicasError,
    RebalanceInProgressError,
)
from raylog.protocol import error_of
from raylog.types import OffsetAndMetadata, TopicPartition
from tests.unit.coordination.test_group import GROUP, request

NOW = 1_000_000
TP = TopicPartition("t", 0)


@pytest.fixture
def core() -> GroupCore:
    groups = GroupCoordinator()
    groups.serve()
    return GroupCore(groups)


def of(effects: list, kind: type) -> list:
    return [e for e in effects if isinstance(e, kind)]


def joined(core: GroupCore, waiter: str) -> tuple[str, int]:
    """A member joins alone and syncs: its id and generation."""
    effects = core.step(Join(waiter, request(), NOW))
    (append,) = of(effects, Append)
    assert not of(effects, Reply), "a generation is told only once its record is persisted"
    (reply,) = of(core.step(Persisted(append.token, NOW)), Reply)
    assert reply.waiter == waiter and error_of(reply.response) is None
    member, generation = reply.response.member_id, reply.response.generation
    (synced,) = of(core.step(Sync(waiter + "-sync", GROUP, member, generation, None, NOW)), Reply)
    assert error_of(synced.response) is None
    return member, generation


def test_a_join_is_answered_once_its_record_is_persisted_and_a_failed_append_answers_its_error(core):
    (append,) = of(core.step(Join("a", request(), NOW)), Append)
    (reply,) = of(core.step(Persisted(append.token, NOW, NotEnoughReplicasError("ISR too small"))), Reply)
    assert reply.waiter == "a" and error_of(reply.response) is not None
    assert error_of(reply.response).retriable
    assert not core.waiting


def test_a_commit_is_answered_once_persisted_and_applies_nothing_itself(core):
    member, generation = joined(core, "a")
    effects = core.step(Commit("c", GROUP, member, generation, None, {TP: OffsetAndMetadata(7)}, NOW))
    (append,) = of(effects, Append)
    assert not of(effects, Reply) and append.batch == {}
    (reply,) = of(core.step(Persisted(append.token, NOW)), Reply)
    assert reply.waiter == "c" and error_of(reply.response) is None
    # Offsets follow the log (the pump replays it): a persisted commit moves nothing itself.
    assert core.groups.committed(GROUP) == {}


def test_a_transactional_commit_is_appended_as_its_producers_batch(core):
    offsets = {TP: OffsetAndMetadata(3)}
    (append,) = of(core.step(Commit("c", "other", "", -1, None, offsets, NOW, producer=(5, 2))), Append)
    assert append.batch == {"producer_id": 5, "producer_epoch": 2, "transactional": True}


def test_an_empty_commit_and_a_refused_one_are_answered_at_once(core):
    member, generation = joined(core, "a")
    (reply,) = of(core.step(Commit("empty", GROUP, member, generation, None, {}, NOW)), Reply)
    assert error_of(reply.response) is None
    effects = core.step(Commit("old", GROUP, member, generation - 1, None, {TP: OffsetAndMetadata(1)}, NOW))
    assert not of(effects, Append)
    assert isinstance(error_of(of(effects, Reply)[0].response), IllegalGenerationError)


def test_a_long_polling_heartbeat_wakes_when_its_group_starts_rebalancing(core):
    member, generation = joined(core, "a")
    assert not core.step(Beat("beat", GROUP, member, generation, None, NOW, wait_ms=5_000))
    assert "beat" in core.beats
    effects = core.step(Join("b", request(), NOW))  # a second member: the group rebalances
    (reply,) = [r for r in of(effects, Reply) if r.waiter == "beat"]
    assert isinstance(error_of(reply.response), RebalanceInProgressError)
    assert not core.beats


def test_a_heartbeat_whose_wait_is_over_is_answered_once(core):
    member, generation = joined(core, "a")
    core.step(Beat("beat", GROUP, member, generation, None, NOW, wait_ms=5_000))
    (reply,) = of(core.step(BeatDue("beat")), Reply)
    assert error_of(reply.response) is None
    assert core.step(BeatDue("beat")) == []  # (a late second wake-up answers nothing)
    assert core.step(Tick(NOW + 1)) == []


def test_a_leave_is_answered_at_once_and_wakes_the_others(core):
    member, generation = joined(core, "a")
    core.step(Beat("beat", GROUP, member, generation, None, NOW, wait_ms=5_000))
    effects = core.step(Leave("leave", GROUP, member, None, NOW))
    assert {r.waiter for r in of(effects, Reply)} == {"leave", "beat"}


def test_unloading_answers_every_waiting_call_not_coordinator_once(core):
    member, generation = joined(core, "a")
    core.step(Beat("beat", GROUP, member, generation, None, NOW, wait_ms=5_000))
    (append,) = of(core.step(Commit("c", GROUP, member, generation, None, {TP: OffsetAndMetadata(1)}, NOW)), Append)
    core.step(Join("b", request(), NOW))  # waits for the rebalance
    replies = of(core.step(Unload()), Reply)
    assert {r.waiter for r in replies} >= {"c", "b"}
    for r in replies:
        assert isinstance(error_of(r.response), NotCoordinatorError | RebalanceInProgressError)
    assert not core.waiting and not core.beats
    assert of(core.step(Persisted(append.token, NOW)), Reply) == []  # (answered already)


def test_appends_persisted_in_any_order_release_each_reply_once(core):
    member, generation = joined(core, "a")
    commits = [
        of(core.step(Commit(f"c{i}", GROUP, member, generation, None, {TP: OffsetAndMetadata(i)}, NOW)), Append)[0]
        for i in range(3)
    ]
    answered = [of(core.step(Persisted(a.token, NOW)), Reply)[0].waiter for a in reversed(commits)]
    assert answered == ["c2", "c1", "c0"]
