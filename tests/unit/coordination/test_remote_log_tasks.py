"""The leader's tiered-storage tasks of one partition (raylog.coordination.remote_log_tasks):
a table of scenarios, the hand-over's interleavings, and a seeded simulation of an old and a
new leader with crashes and reordered answers, against an in-memory topic, store and logs
(tests/unit/coordination/remote_log_world.py), the invariants checked after every step. No
Ray, a fake clock in milliseconds, no sleeps."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from raylog.chaos import remote_log_invariants as invariants
from raylog.coordination.remote_log_tasks import (
    MAX_DELETIONS_IN_FLIGHT,
    ORPHAN_MIN_AGE_MS,
    ORPHAN_SWEEP_INTERVAL_MS,
    RETRY_BACKOFF_MAX_MS,
    RETRY_BACKOFF_MS,
    Action,
    CleanOrphans,
    CopySegment,
    DeleteLocalSegments,
    DeleteRemoteSegment,
    Phase,
    PublishEvent,
    RemoteLogTaskMetrics,
    RemoteLogTasks,
    RemoteLogTasksConfig,
    WriteHistory,
    retry_backoff_ms,
)
from raylog.storage import remote_log_metadata as rlm
from raylog.storage.remote_log_metadata import RemoteLogSegmentState as State
from raylog.storage.remote_log_metadata_cache import TieredRetentionConfig, local_segments_to_delete
from raylog.storage.remote_storage import UploadState

from .remote_log_world import PARTITION, START_MS, TOPIC, LocalLog, Pending, World

STARTED, FINISHED = "COPY_SEGMENT_STARTED", "COPY_SEGMENT_FINISHED"
DELETE_STARTED, DELETE_FINISHED = "DELETE_SEGMENT_STARTED", "DELETE_SEGMENT_FINISHED"
NO_RETENTION = TieredRetentionConfig(retention_ms=-1, local_retention_ms=-1, local_retention_bytes=-1)


def config(history: bool = False, **retention) -> RemoteLogTasksConfig:
    return RemoteLogTasksConfig(dataclasses.replace(NO_RETENTION, **retention), history)


# --- steps of the scenarios -----------------------------------------------------------


def drive_until(world: World, wanted: Callable[[Action], bool]) -> Pending:
    """Run the pump, oldest first, until an action ``wanted`` is out; return it, not carried out."""
    for _ in range(500):
        for pending in world.pool:
            if wanted(pending.action) and pending.done is None:
                return pending
        if world.pool:
            pending = world.pool[0]
            world.carry_out(pending)
            world.answer(pending)
        else:
            for broker in world.cores:
                world.deliver(broker)
                world.tick(broker)
    raise AssertionError("the action never came")


def publishes(kind: type | State) -> Callable[[Action], bool]:
    """Whether an action publishes an event of ``kind`` (an update: of that state)."""

    def match(action: Action) -> bool:
        if not isinstance(action, PublishEvent):
            return False
        if isinstance(kind, State):
            return getattr(action.event, "state", None) == kind
        return isinstance(action.event, kind)

    return match


def fail_first(kind: type) -> Callable[[Action], bool]:
    """A failure picker failing the first action of ``kind`` only."""
    failed: list[Action] = []

    def pick(action: Action) -> bool:
        if isinstance(action, kind) and not failed:
            failed.append(action)
            return True
        return False

    return pick


def kill_mid(kind: type, broker: int) -> Callable[[World], None]:
    """``broker``'s leader dies while an action of ``kind`` is half done: the action leaves
    its work partial (a partial upload, or objects half deleted) and nobody hears of it."""

    def step(world: World) -> None:
        pending = drive_until(world, lambda a: isinstance(a, kind))
        world.carry_out(pending, fail=True)
        world.pool.remove(pending)
        world.restart(broker)

    return step


def advance(ms: int) -> Callable[[World], None]:
    def step(world: World) -> None:
        world.now_ms += ms

    return step


def settle(fail: Callable[[Action], bool] | None = None) -> Callable[[World], None]:
    return lambda world: world.settle(fail or (lambda action: False))


def elect(broker: int) -> Callable[[World], None]:
    return lambda world: world.elect(broker)


def append(count: int) -> Callable[[World], None]:
    return lambda world: world.append(count)


def hold_lso(offset: int | None) -> Callable[[World], None]:
    def step(world: World) -> None:
        world.lso_hold = offset

    return step


def follow(broker: int) -> Callable[[World], None]:
    return lambda world: world.cores[broker].become_follower()


def expect_events(*expected: tuple[str, int, str]) -> Callable[[World], None]:
    """The segment events in the topic, in order: ``(state, start offset, id)``, ids written
    as letters by first appearance (the same letter: the same segment id)."""

    def step(world: World) -> None:
        letters: dict[str, str] = {}
        seen = [
            (state, start, letters.setdefault(sid, "ABCDEFGHIJ"[len(letters)]))
            for state, start, sid in world.segment_events()
        ]
        assert seen == list(expected)

    return step


def expect_moves(copied: list[int], deleted: list[int]) -> Callable[[World], None]:
    """The start offsets of the segments copied, and of those deleted, each in the topic's order."""

    def step(world: World) -> None:
        events = world.segment_events()
        assert [start for state, start, _ in events if state == FINISHED] == copied
        assert [start for state, start, _ in events if state == DELETE_FINISHED] == deleted

    return step


def expect_local(broker: int, *bases: int) -> Callable[[World], None]:
    def step(world: World) -> None:
        assert [s.base_offset for s in world.logs[broker].segments] == list(bases)

    return step


def expect_stored(*starts: int) -> Callable[[World], None]:
    """The start offsets of the segments whose upload is whole, and no other object."""

    def step(world: World) -> None:
        known = {m.segment_id: m for m in world.truth.segments()}
        assert all(state == "complete" for state, _ in world.store.objects.values())
        assert sorted(known[sid].start_offset for sid in world.store.objects) == list(starts)

    return step


def expect_metrics(**values: int) -> Callable[[World], None]:
    def step(world: World) -> None:
        metrics = dataclasses.asdict(world.cores[world.leader].metrics())
        assert {k: metrics[k] for k in values} == values

    return step


@dataclass
class Scenario:
    name: str
    config: RemoteLogTasksConfig
    steps: list[Callable[[World], object]] = field(default_factory=list)


SCENARIOS = [
    Scenario(
        "the first leader copies three segments in order and local retention follows",
        config(local_retention_bytes=1_000),
        [
            elect(1),
            append(35),
            settle(),
            expect_events(
                (STARTED, 0, "A"),
                (FINISHED, 0, "A"),
                (STARTED, 10, "B"),
                (FINISHED, 10, "B"),
                (STARTED, 20, "C"),
                (FINISHED, 20, "C"),
            ),
            expect_local(1, 20, 30),  # 1_000 bytes kept besides the active segment
            expect_local(2, 20, 30),  # a follower's local retention too
            expect_stored(0, 10, 20),
            expect_metrics(segments_copied=3, bytes_copied=3_000, copy_lag_segments=0, copy_failures=0),
        ],
    ),
    Scenario(
        "a copy that fails is uploaded again under the same id after the backoff, and only then finished",
        config(),
        [
            elect(1),
            append(15),
            settle(fail_first(CopySegment)),
            expect_events((STARTED, 0, "A")),
            lambda world: world.store.objects and next(iter(world.store.objects.values()))[0] == "partial",
            advance(RETRY_BACKOFF_MS - 1),
            settle(),
            expect_events((STARTED, 0, "A")),  # not before the backoff is over
            advance(1),
            settle(),
            expect_events((STARTED, 0, "A"), (FINISHED, 0, "A")),
            expect_stored(0),
            expect_metrics(copy_failures=1, segments_copied=1),
        ],
    ),
    Scenario(
        "a leader killed between STARTED and FINISHED: the next one deletes that copy and copies anew",
        config(),
        [
            elect(1),
            append(25),
            kill_mid(CopySegment, broker=1),
            elect(2),
            settle(),
            expect_events(
                (STARTED, 0, "A"),
                (DELETE_STARTED, 0, "A"),
                (DELETE_FINISHED, 0, "A"),
                (STARTED, 0, "B"),
                (FINISHED, 0, "B"),
                (STARTED, 10, "C"),
                (FINISHED, 10, "C"),
            ),
            expect_stored(0, 10),  # A's partial upload is gone, nothing twice
        ],
    ),
    Scenario(
        "a leader killed in the middle of a deletion: the next one deletes again and finishes it",
        config(retention_ms=60_000, local_retention_ms=1_000),
        [
            elect(1),
            append(15),
            settle(),
            advance(2_000),
            settle(),  # the local copy goes first
            expect_local(1, 10),
            advance(60_000),
            kill_mid(DeleteRemoteSegment, broker=1),
            lambda world: world.truth.deletions_in_progress(),
            elect(2),
            settle(),
            expect_events((STARTED, 0, "A"), (FINISHED, 0, "A"), (DELETE_STARTED, 0, "A"), (DELETE_FINISHED, 0, "A")),
            expect_stored(),
        ],
    ),
    Scenario(
        "the last stable offset holds back a segment with an open transaction",
        config(),
        [
            elect(1),
            append(25),
            hold_lso(15),  # a transaction open from offset 15
            settle(),
            expect_events((STARTED, 0, "A"), (FINISHED, 0, "A")),
            expect_metrics(copy_lag_segments=0),  # [10, 19] is not below the LSO
            hold_lso(None),
            settle(),
            expect_events((STARTED, 0, "A"), (FINISHED, 0, "A"), (STARTED, 10, "B"), (FINISHED, 10, "B")),
        ],
    ),
    Scenario(
        "remote retention by time deletes the oldest expired segments once their local copies are gone",
        config(retention_ms=10_000, local_retention_ms=1_000),
        [
            elect(1),
            append(10),  # [0, 9] at t
            advance(4_000),
            append(10),  # [10, 19] at t + 4 s
            advance(4_000),
            append(15),  # [20, 29] at t + 8 s
            settle(),
            expect_local(1, 20, 30),
            advance(3_000),  # t + 11 s: [0, 9] is past retention.ms, [10, 19] is not
            settle(),
            expect_events(
                (STARTED, 0, "A"),
                (FINISHED, 0, "A"),
                (STARTED, 10, "B"),
                (FINISHED, 10, "B"),
                (STARTED, 20, "C"),
                (FINISHED, 20, "C"),
                (DELETE_STARTED, 0, "A"),
                (DELETE_FINISHED, 0, "A"),
            ),
            expect_local(1, 30),
            lambda world: world.cores[1].remote_log_start_offset() == 10,
            lambda world: world.cores[1].log_start_offset(30) == 10,
        ],
    ),
    Scenario(
        "remote retention by bytes counts the local-only bytes once",
        config(retention_bytes=3_000, local_retention_bytes=1_500),
        [
            elect(1),
            append(45),  # four closed segments of 1_000 bytes, 500 in the active one
            settle(),
            # local: [30, 39] (copied) and the active 500 bytes; remote: four segments. The whole log
            # is 4_000 remote + 500 local-only: 1_500 over, so one segment goes (two if the local
            # copy of [30, 39] were counted as well).
            expect_moves(copied=[0, 10, 20, 30], deleted=[0]),
            expect_local(1, 30, 40),
            expect_stored(10, 20, 30),
            expect_metrics(remote_segments_deleted=1, remote_bytes_deleted=1_000),
        ],
    ),
    Scenario(
        "become_follower drops the leader's work: the answer to its upload moves nothing",
        config(),
        [
            elect(1),
            append(15),
            lambda world: drive_until(world, lambda a: isinstance(a, CopySegment)),
            follow(1),
            settle(),
            expect_events((STARTED, 0, "A")),  # no FINISHED: the answer came to a follower
            lambda world: world.cores[1].phase is Phase.FOLLOWER and world.cores[1].idle,
            elect(2),
            settle(),
            expect_events(
                (STARTED, 0, "A"),
                (DELETE_STARTED, 0, "A"),
                (DELETE_FINISHED, 0, "A"),
                (STARTED, 0, "B"),
                (FINISHED, 0, "B"),
            ),
            expect_stored(0),
        ],
    ),
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_scenario(scenario: Scenario):
    """Each scenario's steps give exactly its events, local segments and objects; the
    invariants hold after every step."""
    world = World(config=scenario.config)
    retention = scenario.config.retention
    from_offset = None if retention.retention_ms >= 0 or retention.retention_bytes >= 0 else 0
    for step in scenario.steps:
        result = step(world)
        assert result is not False, f"{scenario.name}: a check failed"
        world.check(from_offset)


# --- the hand-over's interleavings ------------------------------------------------------


def old_leader_finishing_late(world: World) -> Pending:
    """Leader 1 uploaded segment [0, 9] and sent COPY_SEGMENT_FINISHED; it is dead before the
    write lands, and leader 2 takes over. Returns the write, not carried out yet."""
    world.elect(1)
    world.append(15)
    finish = drive_until(world, publishes(State.COPY_SEGMENT_FINISHED))
    world.pool.remove(finish)  # in flight, carried out when the test says
    world.restart(1)
    world.elect(2)
    return finish


def test_a_late_finished_after_the_new_leaders_fence_is_refused_and_the_copy_deleted():
    """The old leader's COPY_SEGMENT_FINISHED lands after the new leader's RemoteLogLeaderEpoch:
    every reader refuses it, the copy is deleted as unfinished and the segment copied anew once."""
    world = World()
    finish = old_leader_finishing_late(world)
    world.carry_out(drive_until(world, publishes(rlm.RemoteLogLeaderEpoch)))
    world.carry_out(finish)  # lands after the fence
    world.check()
    assert world.truth.segments()[0].state == State.COPY_SEGMENT_STARTED  # refused: never readable
    world.settle()
    world.check()
    assert [(s, o) for s, o, _ in world.segment_events()] == [
        (STARTED, 0),
        (FINISHED, 0),
        (DELETE_STARTED, 0),
        (DELETE_FINISHED, 0),
        (STARTED, 0),
        (FINISHED, 0),
    ]
    assert invariants.nothing_left_unfinished(world.truth) == [] and len(world.store.objects) == 1
    assert world.cores[2].metrics().events_refused == 1


def test_a_late_finished_before_the_new_leaders_fence_keeps_the_copy():
    """The same write lands before the fence: the copy is whole and readable, the new leader
    keeps it and goes on after it (nothing deleted, nothing copied twice)."""
    world = World()
    finish = old_leader_finishing_late(world)
    world.carry_out(finish)
    world.settle()
    world.check()
    assert [(s, o) for s, o, _ in world.segment_events()] == [(STARTED, 0), (FINISHED, 0)]
    world.append(10)
    world.settle()
    assert [(s, o) for s, o, _ in world.segment_events()][2:] == [(STARTED, 10), (FINISHED, 10)]


def test_an_upload_outliving_its_leader_leaves_an_orphan_that_the_sweep_removes():
    """The old leader's upload finishes after the new leader deleted its copy: objects of an id
    the topic forgot. They stay while younger than ORPHAN_MIN_AGE_MS, then a sweep removes them."""
    world = World()
    world.elect(1)
    world.append(15)
    upload = drive_until(world, lambda a: isinstance(a, CopySegment))
    world.pool.remove(upload)  # still running
    world.restart(1)
    world.elect(2)
    world.settle()  # A deleted, [0, 9] copied as B, a first sweep done
    world.now_ms += ORPHAN_SWEEP_INTERVAL_MS - ORPHAN_MIN_AGE_MS // 2
    world.carry_out(upload)  # the old upload completes now
    stale = upload.action.metadata.segment_id
    orphaned = invariants.no_orphans(world.truth, world.store.objects)
    assert orphaned == [f"{stale} has objects in the store but no metadata"]
    world.now_ms += ORPHAN_MIN_AGE_MS // 2
    world.settle()  # the next sweep: the orphan is younger than ORPHAN_MIN_AGE_MS
    assert stale in world.store.objects
    world.now_ms += ORPHAN_SWEEP_INTERVAL_MS
    world.settle()
    assert invariants.no_orphans(world.truth, world.store.objects) == [] and len(world.store.objects) == 1
    world.check()


def test_a_leader_that_reads_a_newer_leader_stops():
    """A leader not told of its successor reads the newer RemoteLogLeaderEpoch in the topic:
    it drops its work and decides nothing more; its own late events are refused."""
    world = World()
    world.elect(1)
    world.append(15)
    drive_until(world, lambda a: isinstance(a, CopySegment))
    world.elect(2)  # leader 1 is told nothing
    world.settle()
    assert world.cores[1].phase is Phase.FENCED and world.cores[1].idle
    assert world.cores[1].tick(world.now_ms, world.logs[1].segments, 15, 0, world.epochs, world.config) == []
    assert invariants.nothing_left_unfinished(world.truth) == [] and world.truth.leader_epoch == 2
    world.check()


def test_answers_to_an_earlier_role_are_ignored_and_a_stale_epoch_is_refused():
    """An answer to an action of a role the core left moves nothing; become_leader with an epoch
    not above one it led is ignored."""
    world = World()
    world.elect(1)
    (fence,) = [p.action for p in world.pool]
    core = world.cores[1]
    core.become_follower()
    assert core.on_action_done(fence, True) == [] and core.idle
    assert core.become_leader(1, world.now_ms) == [] and core.phase is Phase.FOLLOWER
    actions = core.become_leader(2, world.now_ms)
    assert [type(a) for a in actions] == [PublishEvent] and actions[0].leader_epoch == 2
    assert core.on_action_done(fence, False) == []  # the epoch-1 fence's answer: ignored
    assert core.on_action_done(dataclasses.replace(actions[0]), True) == []  # not the object returned


def test_a_failed_started_is_never_published_again():
    """COPY_SEGMENT_STARTED whose write failed: the copy starts again after the backoff under a
    new id; if the first write landed all the same, the leader deletes that copy."""
    world = World()
    world.elect(1)
    world.append(15)
    started = drive_until(world, publishes(rlm.RemoteLogSegmentMetadata))
    world.carry_out(started, fail=True, lands_anyway=True)  # written, but the answer says failed
    world.answer(started)
    world.settle()
    world.now_ms += RETRY_BACKOFF_MS
    world.settle()
    events = [(s, o) for s, o, _ in world.segment_events()]
    assert events == [(STARTED, 0), (DELETE_STARTED, 0), (DELETE_FINISHED, 0), (STARTED, 0), (FINISHED, 0)]
    assert world.cores[1].metrics().publish_failures == 1
    world.check()


def test_a_copy_whose_segment_leaves_the_local_log_is_given_up_and_deleted():
    """A copy that failed is not tried again once its segment is gone from the local log (the
    log start offset moved past it): its partial upload is deleted as an unfinished copy, and
    copying goes on with the next segment."""
    world = World()
    world.elect(1)
    world.append(25)
    world.settle(fail_first(CopySegment))
    world.log_start_offset = 10  # DeleteRecords
    for local in world.logs.values():
        local.follow_log_start(10)
    world.now_ms += RETRY_BACKOFF_MS
    world.settle()
    world.check(from_offset=10)
    expect_moves(copied=[10], deleted=[0])(world)
    assert invariants.no_orphans(world.truth, world.store.objects) == [] and len(world.store.objects) == 1


# --- history, sweeps, metrics ---------------------------------------------------------


def test_history_follows_each_copy_and_a_new_leader_writes_the_newest():
    """With history asked, WriteHistory follows each COPY_SEGMENT_FINISHED; a leader killed
    before it leaves the newest copy without history, which the next leader writes first."""
    world = World(config=config(history=True))
    world.elect(1)
    world.append(25)
    pending = drive_until(world, lambda a: isinstance(a, WriteHistory))
    assert pending.action.metadata.state == State.COPY_SEGMENT_FINISHED and pending.action.metadata.start_offset == 0
    world.settle()
    assert len(world.history) == 2
    world.append(10)
    drive_until(world, lambda a: isinstance(a, WriteHistory) and a.metadata.start_offset == 20)
    world.restart(1, lose_actions=True)
    world.elect(2)
    written = drive_until(world, lambda a: isinstance(a, WriteHistory))
    assert written.action.metadata.start_offset == 20 and written.broker == 2
    world.settle()
    assert world.history == {m.segment_id for m in world.truth.segments()}


def test_remote_deletions_with_history_rewrite_the_manifest_one_at_a_time():
    """Retention deleting several segments with history: at most MAX_DELETIONS_IN_FLIGHT
    deletions, and one action rewriting the history's manifest, out at a time (World.collect
    checks both as each is decided); each deletes the history file too."""
    world = World(config=config(history=True, retention_ms=1_000, local_retention_ms=1_000))
    world.elect(1)
    world.append(95)
    world.settle()
    world.now_ms += 2_000
    world.settle()
    deleted = [e for e in world.events() if getattr(e, "state", None) == State.DELETE_SEGMENT_FINISHED]
    assert len(deleted) == 9 and world.history == set() and world.store.objects == {}
    world.check(from_offset=None)


def test_the_sweep_runs_after_the_clean_up_and_then_every_interval():
    """The first sweep follows the clean-up (before the first copy), keeping every id the topic
    knows; the next one ORPHAN_SWEEP_INTERVAL_MS later."""
    world = World()
    world.elect(1)
    world.append(15)
    sweep = drive_until(world, lambda a: isinstance(a, CleanOrphans))
    assert sweep.action.now_ms == START_MS and sweep.action.min_age_ms == ORPHAN_MIN_AGE_MS
    assert not world.segment_events()  # before any copy
    world.settle()
    world.now_ms += ORPHAN_SWEEP_INTERVAL_MS - 1
    world.settle()
    world.now_ms += 1
    sweep = drive_until(world, lambda a: isinstance(a, CleanOrphans))
    assert sweep.action.keep == {m.segment_id for m in world.truth.segments()} != frozenset()


def test_metrics_count_copies_failures_and_the_copy_lag():
    """The copy lag is what is ready to copy and not copied (segments and bytes); the snapshot
    is frozen."""
    world = World()
    world.elect(1)
    world.append(35)
    world.tick(1)
    world.deliver(1)
    world.tick(1)
    metrics = world.cores[1].metrics()
    assert (metrics.copy_lag_segments, metrics.copy_lag_bytes) == (3, 3_000)
    with pytest.raises(dataclasses.FrozenInstanceError):
        metrics.segments_copied = 1  # type: ignore[misc]
    world.settle(fail_first(PublishEvent))
    world.now_ms += RETRY_BACKOFF_MS
    world.settle()
    metrics = world.cores[1].metrics()
    assert (metrics.copy_lag_segments, metrics.segments_copied, metrics.publish_failures) == (0, 3, 1)
    assert isinstance(metrics, RemoteLogTaskMetrics)


def test_backoff_doubles_up_to_its_bound():
    """The pause after each failure in a row: RETRY_BACKOFF_MS, doubling, at most RETRY_BACKOFF_MAX_MS."""
    assert [retry_backoff_ms(n) for n in (1, 2, 3)] == [RETRY_BACKOFF_MS, 2 * RETRY_BACKOFF_MS, 4 * RETRY_BACKOFF_MS]
    assert retry_backoff_ms(1_000) == RETRY_BACKOFF_MAX_MS


def test_local_retention_stops_at_what_is_not_copied_and_at_the_lineage():
    """A local segment goes only once a finished copy holds it, and never past the highest
    offset copied in this replica's lineage."""
    world = World(config=config(local_retention_bytes=0))
    world.elect(1)
    world.append(25)
    world.lso_hold = 12
    world.settle()
    assert [s.base_offset for s in world.logs[1].segments] == [10, 20]  # [10, 19] is not copied
    core = RemoteLogTasks(TOPIC, PARTITION, 3)
    for event in world.events():
        core.on_metadata_event(event)
    replica = LocalLog()
    replica.append(25, world.now_ms)
    local = replica.segments
    diverged = [(0, 0), (5, 5)]  # this replica's epoch 5 began at 5: the copy's epoch 1 is not its history
    assert core.tick(world.now_ms, local, 25, 0, diverged, world.config) == []
    (deletion,) = core.tick(world.now_ms, local, 25, 0, [(1, 0)], world.config)
    assert deletion == DeleteLocalSegments(10, -1)


# --- the seeded simulation ------------------------------------------------------------


def run_simulation(seed: int, steps: int) -> World:
    """Two replicas hand leadership back and forth; each step is one of: records appended, a
    core ticked (the clock moving), topic records read by a core, an action carried out
    (failing at times, a publish landing even when it failed), an answer given, a publish
    timing out while its write is still on its way (it may land later), the LSO held or
    released, a hand-over (the old leader crashed, told or not told). Actions and answers are
    taken in random order. Half the seeds have remote retention by bytes. The invariants are
    checked after every step."""
    rng = random.Random(seed)
    history = rng.random() < 0.5
    retention = {"local_retention_bytes": rng.choice([0, 2_000, 5_000])}
    if rng.random() < 0.5:
        retention["retention_bytes"] = rng.choice([8_000, 20_000])
    world = World(config=config(history=history, **retention), rng=random.Random(seed + 1))
    from_offset = None if "retention_bytes" in retention else 0
    world.elect(1)
    untold: int | None = None
    ghosts: list[Pending] = []  # publishes answered as failed, their writes still on their way
    for _ in range(steps):
        untold = _step(world, rng, untold, ghosts)
        world.check(from_offset)
    for ghost in ghosts:
        if rng.random() < 0.5:
            world.carry_out(ghost)
    _quiesce(world, untold, from_offset)
    return world


def _time_out_or_land(world: World, rng: random.Random, ghosts: list[Pending]) -> None:
    """A publish not carried out is answered as failed (its write goes on), or a write of an
    earlier such publish lands."""
    if ghosts and rng.random() < 0.5:
        world.carry_out(ghosts.pop(rng.randrange(len(ghosts))))
        return
    waiting = [p for p in world.pool if p.done is None and isinstance(p.action, PublishEvent)]
    if waiting:
        ghost = rng.choice(waiting)
        ghost.done = False
        world.answer(ghost)
        ghosts.append(ghost)


def _step(world: World, rng: random.Random, untold: int | None, ghosts: list[Pending]) -> int | None:
    roll = rng.random()
    brokers = list(world.cores)
    if roll < 0.12:
        world.append(rng.randint(1, 12))
    elif roll < 0.37:
        world.now_ms += rng.randint(0, 3_000)
        world.tick(rng.choice(brokers))
    elif roll < 0.57:
        broker = rng.choice(brokers)
        world.deliver(broker, rng.randint(1, 5))
    elif roll < 0.75:
        waiting = [p for p in world.pool if p.done is None]
        if waiting:
            fail = rng.random() < 0.2
            world.carry_out(rng.choice(waiting), fail=fail, lands_anyway=fail and rng.random() < 0.5)
    elif roll < 0.93:
        done = [p for p in world.pool if p.done is not None]
        if done:
            world.answer(rng.choice(done))
    elif roll < 0.95:
        _time_out_or_land(world, rng, ghosts)
    elif roll < 0.97:
        world.lso_hold = None if world.lso_hold is not None else world.logs[world.leader].log_end_offset
    elif roll < 0.985:
        return _hand_over(world, rng, untold)
    if untold is not None and rng.random() < 0.05:
        world.cores[untold].become_follower()
        return None
    return untold


def _hand_over(world: World, rng: random.Random, untold: int | None) -> int | None:
    """The other replica leads in the next epoch; the old leader crashes, is told at once, or is
    told only later (a leader that does not know yet)."""
    old, new = world.leader, 3 - world.leader
    if untold is not None:
        world.cores[untold].become_follower()
    fate = rng.choice(["crash", "told", "later"])
    if fate == "crash":
        world.restart(old)
    elif fate == "told":
        world.cores[old].become_follower()
    world.elect(new)
    return old if fate == "later" else None


def _quiesce(world: World, untold: int | None, from_offset: int | None) -> None:
    """No more faults: every action out is carried out (a dead leader's too), the cores catch
    up and the leader finishes its work; then a sweep past ORPHAN_MIN_AGE_MS."""
    if untold is not None:
        world.cores[untold].become_follower()
    world.lso_hold = None
    for pending in [p for p in world.pool if p.done is None]:
        world.carry_out(pending)
    world.settle()
    world.now_ms += ORPHAN_SWEEP_INTERVAL_MS + ORPHAN_MIN_AGE_MS
    world.settle()
    world.check(from_offset)


@pytest.mark.parametrize("seed", range(12))
def test_seeded_hand_overs_keep_every_promise(seed):
    """Whatever the crashes and the order of answers: after every step no segment is readable
    without its whole upload, no offsets become readable twice, no offset is in neither tier on
    any replica; at the end the last leader's clean-up left nothing half done, no orphan, and
    every closed segment below the LSO copied."""
    world = run_simulation(seed, steps=1_500)
    leader = world.cores[world.leader]
    assert leader.phase is Phase.RUNNING, f"seed {seed}"
    assert invariants.nothing_left_unfinished(world.truth) == [], f"seed {seed}"
    assert invariants.no_orphans(world.truth, world.store.objects) == [], f"seed {seed}"
    assert leader.metrics().copy_lag_segments == 0, f"seed {seed}"
    closed = [s for s in world.logs[world.leader].segments if not s.is_active]
    assert all(s.last_offset <= world.truth.highest_copied_offset for s in closed), f"seed {seed}"
    assert all(state is UploadState.COMPLETE for state in map(world.store.upload_state, world.truth.segments()))
    assert local_retention_left(world) == (), f"seed {seed}: local retention is stuck"


def local_retention_left(world: World) -> tuple:
    """What local retention would still delete from the leader's log if every offset copied
    once were still copied: nothing, unless a local copy outlived its remote one (which would
    stop local retention there for good)."""
    copied = world.truth.highest_copied_offset
    if copied < 0:
        return ()
    everything = rlm.RemoteLogSegmentMetadata(
        world.new_id(TOPIC, PARTITION), 0, copied, -1, 0, 0, ((0, 0),), 0, State.COPY_SEGMENT_FINISHED
    )
    local = world.logs[world.leader].segments
    plan = local_segments_to_delete(local, [everything], world.config.retention, world.now_ms)
    return tuple(s for s in plan if s.last_offset <= copied)


def test_the_simulation_is_deterministic():
    """The same seed makes the same topic (a failure's seed replays it)."""
    assert run_simulation(5, steps=300).records == run_simulation(5, steps=300).records


def test_a_deletion_bound_is_kept_during_a_large_clean_up():
    """More unfinished copies than MAX_DELETIONS_IN_FLIGHT: the clean-up deletes them in turns,
    never more at once (World.collect checks), and copying waits until all are done."""
    world = World()
    world.elect(1)
    world.append(10 * (MAX_DELETIONS_IN_FLIGHT + 3) + 5)
    world.publish(rlm.RemoteLogLeaderEpoch(TOPIC, PARTITION, 1, 1, START_MS))
    for n in range(MAX_DELETIONS_IN_FLIGHT + 3):
        world.publish(
            rlm.RemoteLogSegmentMetadata(
                world.new_id(TOPIC, PARTITION),
                10 * n,
                10 * n + 9,
                START_MS,
                1,
                START_MS,
                ((1, 10 * n),),
                1_000,
                event_leader_epoch=1,
            )
        )
    world.restart(1)
    world.elect(2)
    world.settle()
    states = [s for s, _, _ in world.segment_events()]
    assert states.count(DELETE_FINISHED) == MAX_DELETIONS_IN_FLIGHT + 3
    first_copy = len(states) - states[::-1].index(DELETE_FINISHED)
    assert set(states[first_copy:]) == {STARTED, FINISHED}
    assert invariants.nothing_left_unfinished(world.truth) == []


def test_the_pump_goes_on_at_once_while_segments_wait_for_their_copy():
    """Each copy ends with the core idle (its history written). While more segments are ready,
    ``has_work`` asks the pump for its next round at once (a pump that paused whenever the
    core was idle copied one segment per pause, however fast the topic grew); once every
    segment is copied, or while a failed copy waits out its backoff, the pump may pause."""
    world = World(config=config(history=True))
    world.elect(1)
    world.append(35)  # three closed segments
    core, rounds_idle_with_work = world.cores[1], 0
    for _ in range(200):  # the pump's rounds: read the events, tick, carry out and answer
        world.deliver(1)
        world.tick(1)
        while world.pool:
            world.carry_out(world.pool[0])
            world.answer(world.pool[0])
        if core.idle and len(world.truth.segments()) < 3:
            assert core.has_work, "idle with segments still to copy, and no round asked for"
            rounds_idle_with_work += 1
        if len(world.history) == 3 and core.idle:
            break
    assert rounds_idle_with_work >= 2  # (between the copies: the case that paused)
    world.tick(1)
    assert core.idle and not core.has_work
    world.append(10)  # a fourth segment closes; its first publish fails and backs off
    world.settle(fail_first(PublishEvent))
    assert not core.has_work and core.metrics().copy_lag_segments == 1
    world.now_ms += RETRY_BACKOFF_MS
    world.settle()
    assert len(world.history) == 4 and not core.has_work
