"""An in-memory world for raylog.coordination.remote_log_tasks: the ``__remote_log_metadata``
partition, the object store, each replica's local log, and the pump's part (carrying the
actions out, answering them, reading the topic back), with hooks to fail, delay and reorder
each piece. The scenario tests and the seeded simulation both drive it; every action a core
returns is checked against the protocol as it is decided (:meth:`World.collect`)."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from raylog.chaos import remote_log_invariants as invariants
from raylog.coordination.remote_log_tasks import (
    MAX_DELETIONS_IN_FLIGHT,
    Action,
    CleanOrphans,
    CopySegment,
    DeleteLocalSegments,
    DeleteRemoteSegment,
    PublishEvent,
    RemoteLogTasks,
    RemoteLogTasksConfig,
    WriteHistory,
    rewrites_history,
)
from raylog.errors import RemoteStorageError
from raylog.storage import remote_log_metadata as rlm
from raylog.storage.remote_log_metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata
from raylog.storage.remote_log_metadata import RemoteLogSegmentState as State
from raylog.storage.remote_log_metadata_cache import LocalSegment, RemoteLogMetadataCache
from raylog.storage.remote_storage import UploadState

TOPIC, PARTITION = "clicks", 0
START_MS = 1_700_000_000_000
RECORD_BYTES = 100
SEGMENT_RECORDS = 10  # a segment rolls at 10 records: 1_000 bytes


class LocalLog:
    """One replica's log, as the tasks see it: its segments, the active one last."""

    def __init__(self) -> None:
        self.segments: list[LocalSegment] = [LocalSegment(0, -1, 0, -1, True)]

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].last_offset + 1

    def append(self, count: int, now_ms: int) -> None:
        for _ in range(count):
            active = self.segments[-1]
            self.segments[-1] = LocalSegment(
                active.base_offset, active.last_offset + 1, active.size_bytes + RECORD_BYTES, now_ms, True
            )
            if self.segments[-1].last_offset - active.base_offset + 1 >= SEGMENT_RECORDS:
                self.roll()

    def roll(self) -> None:
        active = self.segments[-1]
        self.segments[-1] = LocalSegment(
            active.base_offset, active.last_offset, active.size_bytes, active.max_timestamp_ms, False
        )
        self.segments.append(LocalSegment(active.last_offset + 1, active.last_offset, 0, -1, True))

    def holds(self, base_offset: int, last_offset: int) -> bool:
        return any(s.base_offset == base_offset and s.last_offset == last_offset for s in self.segments)

    def delete_below(self, base_offset: int) -> None:
        self.segments = [s for s in self.segments if s.base_offset >= base_offset or s.is_active]

    def follow_log_start(self, log_start_offset: int) -> None:
        """The log start moved up: the segments wholly below it go (Log.increment_log_start_offset)."""
        self.segments = [s for s in self.segments if s.last_offset >= log_start_offset or s.is_active]


class Store:
    """Objects by segment id: ``complete`` (every object and the manifest) or ``partial``,
    with the time they were last written."""

    def __init__(self) -> None:
        self.objects: dict[RemoteLogSegmentId, tuple[str, int]] = {}

    def upload_state(self, metadata: RemoteLogSegmentMetadata) -> UploadState:
        found = self.objects.get(metadata.segment_id)
        if found is None:
            return UploadState.ABSENT
        return UploadState.COMPLETE if found[0] == "complete" else UploadState.PARTIAL


@dataclass(eq=False)
class Pending:
    """An action out: carried out (``done`` set) or not yet, answered or not yet."""

    broker: int
    core: RemoteLogTasks
    action: Action
    done: bool | None = None  # None: not carried out yet; else whether it succeeded


@dataclass
class World:
    """See the module docstring. ``config`` is every tick's; ``rng`` picks failures."""

    config: RemoteLogTasksConfig = field(default_factory=RemoteLogTasksConfig)
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    now_ms: int = START_MS
    log_start_offset: int = 0
    lso_hold: int | None = None  # an open transaction's first offset holds the LSO there
    records: list[tuple[bytes, bytes]] = field(default_factory=list)  # the metadata partition
    store: Store = field(default_factory=Store)
    history: set[RemoteLogSegmentId] = field(default_factory=set)
    logs: dict[int, LocalLog] = field(default_factory=lambda: {1: LocalLog(), 2: LocalLog()})
    cores: dict[int, RemoteLogTasks] = field(default_factory=dict)
    read: dict[int, int] = field(default_factory=dict)  # records each broker's core has read
    pool: list[Pending] = field(default_factory=list)
    epochs: list[tuple[int, int]] = field(default_factory=list)  # the log's epoch history
    leader: int = 1
    epoch: int = 0

    def __post_init__(self) -> None:
        self.truth = RemoteLogMetadataCache(TOPIC, PARTITION)  # what every reader knows
        self.copied_once = invariants.CopiedOnce()
        for broker in self.logs:
            self.restart(broker)

    # --- set-up -------------------------------------------------------------------------

    def new_id(self, topic: str, partition: int) -> RemoteLogSegmentId:
        return RemoteLogSegmentId(topic, partition, str(uuid.UUID(int=self.rng.getrandbits(128), version=4)))

    def restart(self, broker: int, lose_actions: bool = False) -> RemoteLogTasks:
        """A fresh core on ``broker``, a follower that reads the topic from its start. The old
        one's actions out run on unanswered, or (``lose_actions``) die with it."""
        if broker in self.cores and lose_actions:
            self.pool = [p for p in self.pool if p.core is not self.cores[broker]]
        self.cores[broker] = RemoteLogTasks(TOPIC, PARTITION, broker, new_segment_id=self.new_id)
        self.read[broker] = 0
        return self.cores[broker]

    def elect(self, broker: int) -> list[Action]:
        """``broker`` leads in the next epoch (the others are told nothing here)."""
        self.leader, self.epoch = broker, self.epoch + 1
        start = self.logs[broker].log_end_offset  # an epoch without records is replaced (LeaderEpochCache.assign)
        self.epochs = [(e, o) for e, o in self.epochs if o < start] + [(self.epoch, start)]
        return self.collect(broker, self.cores[broker].become_leader(self.epoch, self.now_ms))

    def append(self, count: int) -> None:
        """``count`` records replicated to every log."""
        for local in self.logs.values():
            local.append(count, self.now_ms)

    @property
    def last_stable_offset(self) -> int:
        log_end_offset = self.logs[self.leader].log_end_offset
        return log_end_offset if self.lso_hold is None else min(self.lso_hold, log_end_offset)

    # --- the pump -----------------------------------------------------------------------

    def tick(self, broker: int) -> list[Action]:
        """Tick ``broker``'s core; the leader's then reports the log start offset, which every
        replica follows (the followers through their fetches)."""
        core, local = self.cores[broker], self.logs[broker]
        lso = min(self.last_stable_offset, local.log_end_offset)
        actions = core.tick(self.now_ms, list(local.segments), lso, self.log_start_offset, self.epochs, self.config)
        start = core.log_start_offset(local.segments[0].base_offset) if broker == self.leader else None
        if start is not None and start > self.log_start_offset:
            self.log_start_offset = start
            for replica in self.logs.values():
                replica.follow_log_start(start)
        return self.collect(broker, actions)

    def deliver(self, broker: int, count: int | None = None) -> list[Action]:
        """The next ``count`` records (all: None) of the topic to ``broker``'s core."""
        end = len(self.records) if count is None else min(len(self.records), self.read[broker] + count)
        actions = []
        while self.read[broker] < end:
            key, value = self.records[self.read[broker]]
            self.read[broker] += 1
            actions += self.collect(broker, self.cores[broker].on_metadata_event(rlm.decode(key, value)))
        return actions

    def carry_out(self, pending: Pending, fail: bool = False, lands_anyway: bool = False) -> None:
        """Do what ``pending`` asks; ``fail``: it fails (a publish that ``lands_anyway`` is
        written all the same, its answer lost)."""
        action, local = pending.action, self.logs[pending.broker]
        if isinstance(action, PublishEvent):
            if not fail or lands_anyway:
                self.publish(action.event)
        elif isinstance(action, CopySegment):
            present = local.holds(action.base_offset, action.metadata.end_offset)
            fail = fail or not present
            self.store.objects[action.metadata.segment_id] = ("partial" if fail else "complete", self.now_ms)
        elif isinstance(action, DeleteRemoteSegment):
            if fail and action.metadata.segment_id in self.store.objects:
                self.store.objects[action.metadata.segment_id] = ("partial", self.now_ms)
            elif not fail:
                self.store.objects.pop(action.metadata.segment_id, None)
                self.history.discard(action.metadata.segment_id)
        elif isinstance(action, DeleteLocalSegments) and not fail:
            local.delete_below(action.up_to_base_offset)
        elif isinstance(action, WriteHistory) and not fail:
            self.history.add(action.metadata.segment_id)
        elif isinstance(action, CleanOrphans) and not fail:
            cut = action.now_ms - action.min_age_ms
            for sid, (_, written_ms) in list(self.store.objects.items()):
                if sid not in action.keep and written_ms < cut:
                    del self.store.objects[sid]
        pending.done = not fail

    def answer(self, pending: Pending) -> list[Action]:
        """The answer to a carried-out action, to the core that asked (a crashed one hears nothing)."""
        self.pool.remove(pending)
        if self.cores[pending.broker] is not pending.core:
            return []
        error = None if pending.done else RemoteStorageError("injected")
        actions = pending.core.on_action_done(pending.action, pending.done, error)
        return self.collect(pending.broker, actions)

    def publish(self, event: rlm.RemoteLogEvent) -> None:
        self.records.append(rlm.encode(event))
        try:
            self.truth.apply(event)
        except Exception:  # noqa: BLE001 — refused as every reader refuses it
            pass

    def settle(self, fail: Callable[[Action], bool] = lambda action: False, ticks: int = 1) -> None:
        """Run the pump until nothing moves: each round reads the topic to every core, carries
        out and answers every action (oldest first; ``fail`` picks failures), ticks every core."""
        for _ in range(5_000):
            before = (len(self.records), len(self.pool), self.snapshot())
            for broker in self.cores:
                self.deliver(broker)
            for pending in list(self.pool):
                if pending in self.pool:
                    self.carry_out(pending, fail(pending.action))
                    self.answer(pending)
            for broker in self.cores:
                for _ in range(ticks):
                    self.tick(broker)
            if not self.pool and before == (len(self.records), 0, self.snapshot()):
                return
        raise AssertionError("the world did not settle in 5_000 rounds")

    def snapshot(self) -> tuple:
        stored = tuple(sorted(sid.id for sid in self.store.objects))
        return tuple(tuple(local.segments) for local in self.logs.values()), stored

    # --- the protocol, as actions are decided ------------------------------------------

    def collect(self, broker: int, actions: list[Action]) -> list[Action]:
        """Check each action against the protocol as its core decided it, and put it out."""
        core = self.cores[broker]
        for action in actions:
            assert action.leader_epoch == core.leader_epoch, action
            self.check_decided(core, broker, action)
            self.pool.append(Pending(broker, core, action))
        out = [p.action for p in self.pool if p.core is core]
        assert sum(isinstance(a, CopySegment) for a in out) <= 1, "two copies out"
        assert sum(isinstance(a, DeleteRemoteSegment) for a in out) <= MAX_DELETIONS_IN_FLIGHT
        assert sum(rewrites_history(a) for a in out) <= 1, "two rewrites of the history's manifest out"
        return actions

    def check_decided(self, core: RemoteLogTasks, broker: int, action: Action) -> None:

        def state(metadata: RemoteLogSegmentMetadata) -> State | None:
            return getattr(core.cache.segment(metadata.segment_id), "state", None)

        if isinstance(action, CopySegment):
            assert state(action.metadata) == State.COPY_SEGMENT_STARTED, "uploaded before STARTED was read back"
            assert self.logs[broker].holds(action.base_offset, action.metadata.end_offset), "copy of no segment"
        elif isinstance(action, DeleteRemoteSegment):
            assert state(action.metadata) == State.DELETE_SEGMENT_STARTED, "deleted before DELETE_STARTED"
        elif isinstance(action, WriteHistory):
            assert state(action.metadata) == State.COPY_SEGMENT_FINISHED
        elif isinstance(action, PublishEvent) and isinstance(action.event, rlm.RemoteLogSegmentMetadataUpdate):
            if action.event.state == State.COPY_SEGMENT_FINISHED:
                assert self.store.upload_state(core.cache.segment(action.event.segment_id)) == UploadState.COMPLETE
        elif isinstance(action, DeleteLocalSegments):
            for segment in self.logs[broker].segments:
                if segment.base_offset < action.up_to_base_offset:
                    assert _covered(core.cache, segment), f"{segment} deleted locally but not copied"

    # --- invariants -------------------------------------------------------------------

    def check(self, from_offset: int | None = 0) -> None:
        """The invariants that hold after every step (``from_offset``: where no offset may be
        lost from, None when retention may remove a prefix)."""
        assert invariants.readable_segments_are_whole(self.truth, self.store.upload_state) == []
        assert self.copied_once.check(self.truth) == []
        for local in self.logs.values():
            start = from_offset
            if start is None:  # retention may take a prefix: from what the partition reports as its start
                remote, local_start = self.truth.remote_log_start_offset, local.segments[0].base_offset
                start = local_start if remote is None else min(remote, local_start)
            assert invariants.no_offset_lost(self.truth, local.segments, start) == []

    def events(self) -> list[rlm.RemoteLogEvent]:
        return [rlm.decode(key, value) for key, value in self.records]

    def segment_events(self) -> list[tuple[str, int, str]]:
        """``(state, start offset, id)`` of each segment event in the topic, in its order."""
        starts = {}
        out = []
        for event in self.events():
            if isinstance(event, RemoteLogSegmentMetadata):
                starts[event.segment_id] = event.start_offset
            if not isinstance(event, rlm.RemoteLogLeaderEpoch):
                out.append((event.state.name, starts.get(event.segment_id, -1), event.segment_id.id))
        return out


def _covered(cache: RemoteLogMetadataCache, segment: LocalSegment) -> bool:
    """Whether readable segments hold every offset of ``segment`` (asked of no_offset_lost with
    a local log that is only an empty segment at the segment's end)."""
    end = segment.last_offset + 1
    return invariants.no_offset_lost(cache, [LocalSegment(end, end - 1, 0, -1, True)], segment.base_offset) == []
