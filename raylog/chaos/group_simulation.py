"""A deterministic simulation of a consumer group's coordinator: the shipped
:class:`~raylog.coordination.group_core.GroupCore` over a real :class:`Partition` of
``__consumer_offsets`` (its :class:`Log` in a temporary directory), pumped as
:class:`~raylog.actors.group_coordinator.GroupCoordinatorActor` pumps it, with consumers
following the client's own membership rules (:class:`~raylog.clients.member.MemberState`) and
a transactional producer committing offsets in its transactions (no Ray, no threads, no
sleeps).

What decides is the shipped code; the simulation plays only the I/O and the schedule:

- The partition: the coordinator appends each :class:`Append` to the leader with acks=all
  (as a transactional batch for a TxnOffsetCommit) and parks a :class:`DelayedProduce` for it;
  a follower copies the log and later tells the leader how far it got (the HW moves); the
  operations that are done are stepped as :class:`Persisted` in a random order (the order
  in which the actor's waiting threads happen to wake). The ISR may shrink to the leader
  (appends fail NOT_ENOUGH_REPLICAS) and grow back; an append may time out.
- Offsets follow the log: before every step the coordinator replays the partition up to the
  HW into its groups (:class:`LogReplay`), as the actor does.
- Fail-over: the coordinator's process dies; the follower's copy (which may hold appends never
  acknowledged) becomes the log of a new leader epoch, whose coordinator loads it; every call
  waiting on the old one is answered NOT_COORDINATOR.
- Consumers join, sync, heartbeat (long polls answered early when the group rebalances),
  commit the offsets of the partitions they hold, leave, crash, and pause past their session.
- The transactional producer commits offsets in a transaction, then its coordinator writes a
  commit marker if that commit was acknowledged, else an abort marker (a client that timed out
  aborts while its TxnOffsetCommit may still be waiting for the ISR).

Checked after every step (:class:`GroupWorld`, which :mod:`raylog.chaos.group_cluster` shares):
1. the offsets the coordinator serves (caught up with the HW) are those a load of its log gives
up to where it applied it, pending transactions included; 2. no acknowledged commit is lost:
its record is in the log below the committed end; 3. no offset of an aborted transaction is
ever served; 4. no member is told a generation or an assignment before its group record is
below the committed end, and no fail-over loads a generation below one a member was told; 5.
each member is told ever higher generations; 6. a partition has at most one owner per
generation over the run, and the members the coordinator counts never hold a partition at
once; 7. each call is answered once. Once quiet (the members commit twice at once each for a
few rounds, every append goes through), every partition has one owner and the load is
balanced.

``run(directory, seed, strategy)`` plays one schedule; a failure raises ``AssertionError``
naming the seed.
"""

from __future__ import annotations

import functools
import itertools
import random
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from raylog.clients.member import NO_GENERATION, MemberState, assignment_change
from raylog.common import record_batch
from raylog.common.assignors import COOPERATIVE, COOPERATIVE_STICKY, RANGE, ROUND_ROBIN
from raylog.config import TopicConfig
from raylog.coordination.group import STABLE, GroupCoordinator
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
from raylog.coordination.partition import Partition
from raylog.coordination.purgatory import DelayedProduce
from raylog.coordination.replay import LogReplay
from raylog.errors import IllegalGenerationError, RaylogError, RebalanceInProgressError, UnknownMemberIdError
from raylog.protocol import JoinGroupRequest, JoinGroupResponse, SyncGroupResponse, error_of
from raylog.storage.log import Log
from raylog.types import OffsetAndMetadata, TopicPartition

GROUP = "g"
TXN_GROUP = "tg"  # the transactional producer's group (it commits from outside the group)
PARTITIONS = 10
SESSION_MS = 10_000
REBALANCE_MS = 60_000
APPEND_TIMEOUT_MS = 30_000  # the actor's APPEND_TIMEOUT_S
LEADER, FOLLOWER = 1, 2
PRODUCER_ID = 5
EVERYTHING = frozenset(TopicPartition("t", p) for p in range(PARTITIONS))
#: A protocol the coordinator does not run: the group's leader member assigns (eagerly,
#: round-robin over the members it is told) and sends the assignments with its sync.
LEADER_ASSIGNED = "sim-leader-assigned"
#: The assignors schedules run with (a campaign's seed picks one).
STRATEGIES = (COOPERATIVE_STICKY, RANGE, ROUND_ROBIN, LEADER_ASSIGNED)
#: Random steps per schedule, then at most this many quiet rounds to settle.
STEPS, QUIET_ROUNDS = 150, 100
#: Quiet rounds in which the members commit.
COMMIT_ROUNDS = 3
#: What a step does, and how often.
ACTIONS = {
    "start": 8,
    "leave": 3,
    "crash": 2,
    "pause": 3,
    "wake": 3,
    "copy": 10,
    "acknowledge": 10,
    "persist": 15,
    "shrink_isr": 1,
    "expand_isr": 4,
    "fail_over": 1.5,
    "tick": 20,
    "poll": 45,
    "commit": 12,
    "txn": 8,
}


class GroupPump:
    """A coordinator's process on the leader of its partition: the shipped core, pumped as the
    actor pumps it (load the log, catch up with the HW before every step, append what the core
    asks with acks=all and wait for the ISR in a :class:`DelayedProduce`, step the outcome);
    ``on_reply(waiter, response)`` carries each answer to its caller."""

    def __init__(self, partition: Partition, clock: Any, on_reply: Any) -> None:
        self.partition, self.clock, self.on_reply = partition, clock, on_reply
        log = partition.log
        groups = load(log, log.log_end_offset, clock())
        groups.serve()
        self.core = GroupCore(groups)
        self.replay = LogReplay(functools.partial(_apply, groups, clock), groups.next_offset)
        #: Appends waiting for the ISR (each operation's token: the core's).
        self.waiting: list[DelayedProduce] = []
        self.beats: dict[Any, int] = {}  # a long-polling heartbeat -> when its wait is over

    def step(self, event: Any) -> None:
        """Catch the groups up with the HW, step the core and carry out its effects."""
        self.replay.catch_up(self.partition.log, self.partition.high_watermark, 1 << 20)
        for effect in self.core.step(event):
            if isinstance(effect, Reply):
                self.beats.pop(effect.waiter, None)
                self.on_reply(effect.waiter, effect.response)
            elif isinstance(effect, Append):
                keys, values = zip(*effect.records, strict=True)
                batch = record_batch.build(list(values), keys=list(keys), **effect.batch)
                try:
                    info = self.partition.append_as_leader(batch, acks=-1)
                except RaylogError as exc:
                    self.step(Persisted(effect.token, self.clock(), exc))
                    continue
                end = info.last_offset + 1
                deadline = self.clock() + APPEND_TIMEOUT_MS
                self.waiting.append(DelayedProduce(end, self.partition.leader_epoch, deadline, token=effect.token))
        if isinstance(event, Beat) and event.waiter in self.core.beats:
            self.beats[event.waiter] = event.now_ms + event.wait_ms

    def persist(self, rng: random.Random) -> bool:
        """One append whose wait is over (a random one: waiting threads wake in any order)
        goes on; False if none is."""
        now = self.clock()
        done = [op for op in self.waiting if op.try_complete(self.partition, now)]
        if not done:
            return False
        op = rng.choice(done)
        self.waiting.remove(op)
        self.step(Persisted(op.token, now, op.answer))
        return True

    def tick(self) -> None:
        now = self.clock()
        for waiter in [w for w, due in self.beats.items() if due <= now]:
            self.beats.pop(waiter)
            self.step(BeatDue(waiter))
        self.step(Tick(now))


class Client:
    """A consumer: its membership rules are the real client's (MemberState); it heartbeats
    (a long poll, one at a time) unless a join is outstanding, rejoins when told, syncs when
    its join completes, and commits the partitions it holds (one commit at a time)."""

    def __init__(self, name: str, strategy: str):
        self.name, self.strategy = name, strategy
        self.state = MemberState()
        self.held: set[TopicPartition] = set()
        self.waiter: Any = None  # its join
        self.sync_waiter: Any = None  # its sync
        self.beat_waiter: Any = None
        #: Its commits not answered yet (asynchronous commits: up to two at once), by waiter.
        self.commits: dict[Any, dict[TopicPartition, int]] = {}
        self.sent_as: tuple[str, int] = ("", NO_GENERATION)
        self.rejoin = True
        self.paused = False
        self.told: list[int] = []
        self.calls = itertools.count()

    def _waiter(self, kind: str) -> tuple:
        return (self.name, kind, next(self.calls))

    def poll(self, sim: Simulation) -> None:
        c = sim
        lost = self.state.lost(self.held)
        if lost:
            self.held -= set(lost)
            self.rejoin = True
        for waiter in [w for w in self.commits if w in c.answers]:
            self.committed(sim, self.commits.pop(waiter), c.answers.pop(waiter))
        if self.beat_waiter is not None and self.beat_waiter in c.answers:
            response = c.answers.pop(self.beat_waiter)
            self.beat_waiter = None
            if error_of(response) is not None:
                self.failed(error_of(response), self.beat_sent_as)
        if self.waiter is not None:
            response = c.answers.pop(self.waiter, None)
            if response is not None:
                self.waiter = None
                self.finish_join(sim, response)
        elif self.sync_waiter is not None:
            response = c.answers.pop(self.sync_waiter, None)
            if response is not None:
                self.sync_waiter = None
                self.finish_sync(response, self.sent_as)
        elif self.rejoin:
            self.start_join(sim)
        elif self.state.generation != NO_GENERATION and self.beat_waiter is None:
            self.beat_sent_as = (self.state.member_id, self.state.generation)
            self.beat_waiter = self._waiter("beat")
            wait_ms = sim.rng.choice((0, 500, 3_000))
            sim.call(Beat(self.beat_waiter, GROUP, *self.beat_sent_as, None, sim.clock(), wait_ms))

    def start_join(self, sim: Simulation) -> None:
        plan = self.state.prepare_join(self.held, self.strategy in COOPERATIVE)
        self.held -= set(plan.lost) | set(plan.revoked)
        self.sent_as = (self.state.member_id, self.state.generation)
        self.waiter, self.rejoin = self._waiter("join"), False
        request = JoinGroupRequest(
            group_id=GROUP,
            member_id=self.sent_as[0],
            topics=("t",),
            partition_counts={"t": PARTITIONS},
            strategies=(self.strategy,),
            metadata=(self.name.encode(),) if self.strategy == LEADER_ASSIGNED else (),
            owned=plan.owned,
            owned_generation=plan.generation,
            client_id=self.name,
            session_timeout_ms=sim.session_ms,
            rebalance_timeout_ms=sim.rebalance_ms,
        )
        sim.call(Join(self.waiter, request, sim.clock()))

    def finish_join(self, sim: Simulation, response: JoinGroupResponse) -> None:
        error = error_of(response)
        if error is not None:
            return self.failed(error, self.sent_as)
        assert not self.told or response.generation > self.told[-1], f"{self.name}: generation went back"
        self.told.append(response.generation)
        self.state.joined(response.member_id, response.generation)
        self.sent_as = (response.member_id, response.generation)
        assignments = None
        if response.leader_assigns and response.leader_id == response.member_id and response.members:
            members = sorted(m.member_id for m in response.members)
            plan = {m: [p for p in range(PARTITIONS) if p % len(members) == i] for i, m in enumerate(members)}
            assignments = {m: ",".join(map(str, ps)).encode() for m, ps in plan.items()}
        self.sync_waiter = self._waiter("sync")
        sim.syncs[self.sync_waiter] = (response.member_id, response.generation)
        sim.call(Sync(self.sync_waiter, GROUP, *self.sent_as, None, sim.clock(), assignments))
        synced = sim.answers.pop(self.sync_waiter, None)  # where the coordinator assigns: at once
        if synced is not None:
            self.sync_waiter = None
            self.finish_sync(synced, self.sent_as)
        return None

    def finish_sync(self, synced: SyncGroupResponse, sent_as: tuple[str, int]) -> None:
        error = error_of(synced)
        if error is not None:
            return self.failed(error, sent_as)
        if synced.assigned is not None:
            assignment = [TopicPartition("t", int(p)) for p in synced.assigned.decode().split(",") if p]
        else:
            assignment = list(synced.assignment)
        _, revoked = assignment_change(self.held, assignment)
        self.held = set(assignment)
        if revoked and self.strategy in COOPERATIVE:
            self.rejoin = True
        return None

    def failed(self, exc: RaylogError, sent_as: tuple[str, int]) -> None:
        assert isinstance(exc, RebalanceInProgressError | UnknownMemberIdError | IllegalGenerationError) or (
            exc.retriable
        ), exc
        self.state.failed(exc, *sent_as)
        self.rejoin = True

    def start_commit(self, sim: Simulation) -> None:
        if len(self.commits) > 1 or not self.held or self.state.generation == NO_GENERATION:
            return
        offsets = {tp: next(sim.offsets) for tp in sorted(self.held)[: sim.rng.randint(1, 3)]}
        waiter = self._waiter("commit")
        self.commits[waiter] = offsets
        committed = {tp: OffsetAndMetadata(o) for tp, o in offsets.items()}
        sim.call(Commit(waiter, GROUP, *self.sent_as, None, committed, sim.clock()))

    def committed(self, sim: Simulation, offsets: dict[TopicPartition, int], response: Any) -> None:
        if error_of(response) is None:
            sim.group_stats["commits acknowledged"] += 1
            sim.acked_commits.update(offsets.items())
        elif isinstance(error_of(response), RebalanceInProgressError | UnknownMemberIdError | IllegalGenerationError):
            self.failed(error_of(response), self.sent_as)

    def leave(self, sim: Simulation) -> None:
        self.held = set()
        if self.state.member_id:
            sim.call(Leave(self._waiter("leave"), GROUP, self.state.member_id, None, sim.clock()))


@dataclass
class TxnProducer:
    """A transactional producer committing offsets of :data:`TXN_GROUP` in transactions: a
    TxnOffsetCommit, then its coordinator's marker (commit if the commit was acknowledged,
    else abort: it gave up waiting), then the next transaction at the next epoch."""

    epoch: int = 0
    waiter: Any = None
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    acknowledged: bool = False
    marker: bool | None = None  # the marker to write (True: commit), until replicated
    marker_op: DelayedProduce | None = None  # its append, waiting for the ISR
    calls: Any = field(default_factory=itertools.count)


class GroupWorld:
    """The consumers and what the invariants remember, whatever runs the coordinator: a
    subclass says how a call reaches it (:meth:`call`; its answer lands in :attr:`answers`)
    and calls :meth:`check_reply` on every answer its coordinator gives and
    :meth:`check_groups` after every step."""

    rng: random.Random
    clock: Any
    #: The members' session and rebalance timeouts.
    session_ms, rebalance_ms = SESSION_MS, REBALANCE_MS

    def __init__(self, strategy: str) -> None:
        self.strategy = strategy
        self.clients: list[Client] = []
        self.names = (f"c{i}" for i in itertools.count())
        self.answers: dict[Any, Any] = {}  # the replies, until their caller takes them
        self.offsets = itertools.count(1)  # commits carry rising offsets
        self.acked_commits: set[tuple[TopicPartition, int]] = set()  # commits of GROUP acknowledged
        self.syncs: dict[Any, tuple[str, int]] = {}  # a sync's waiter -> (member id, generation)
        self.told = -1  # the highest generation any member was told
        self.owners: dict[tuple[int, TopicPartition], set[str]] = defaultdict(set)
        #: What happened, for a campaign's totals.
        self.group_stats = {"generations told": 0, "commits acknowledged": 0, "fail-overs": 0}
        self._commits: dict[Log, tuple[LogReplay, set]] = {}  # see commits()

    def call(self, event: Any) -> None:
        raise NotImplementedError

    def answered(self, waiter: Any, response: Any) -> None:
        """7. each call is answered once."""
        assert waiter not in self.answers, f"7. {waiter} answered twice"
        self.answers[waiter] = response

    def client_step(self, action: str) -> None:
        """A consumer's move: ``start``, ``leave``, ``crash``, ``pause``, ``wake``, ``poll``,
        ``commit``, or ``beats`` (every awake member polls, as their heartbeat threads do)."""
        rng = self.rng
        awake = [c for c in self.clients if not c.paused]
        if action == "start" and len(self.clients) < 6:
            self.clients.append(Client(next(self.names), self.strategy))
        elif action == "leave" and awake:
            client = rng.choice(awake)
            self.clients.remove(client)
            client.leave(self)
        elif action == "crash" and self.clients:
            self.clients.pop(rng.randrange(len(self.clients)))  # holds nothing any more; its member expires
        elif action == "pause" and awake:
            rng.choice(awake).paused = True  # a long GC, a stopped process ...
        elif action == "wake" and len(awake) < len(self.clients):
            client = rng.choice([x for x in self.clients if x.paused])  # ... back, maybe after its session
            client.paused, client.rejoin = False, client.rejoin or rng.random() < 0.5
            client.poll(self)
        elif action == "poll" and awake:
            rng.choice(awake).poll(self)
        elif action == "commit" and awake:
            rng.choice(awake).start_commit(self)
        elif action == "beats":
            for client in awake:
                client.poll(self)

    def settled(self, pump: GroupPump | None) -> bool:
        """Every partition owned once, balanced, and the group Stable (or empty)."""
        if not self.clients:
            return True
        counts = sorted(len(c.held) for c in self.clients)
        held = [tp for c in self.clients for tp in c.held]
        return (
            pump is not None
            and set(held) == EVERYTHING
            and len(held) == PARTITIONS
            and counts[-1] - counts[0] <= 1
            and not pump.waiting
            and pump.core.groups.describe(GROUP)["state"] == STABLE
            and all(c.waiter is None and c.sync_waiter is None and not c.rejoin and not c.commits for c in self.clients)
        )

    # --- the invariants -----------------------------------------------------------------

    def commits(self, log: Log, end_offset: int) -> set[tuple[TopicPartition, int]]:
        """Every offset committed to :data:`GROUP` outside transactions in ``log`` below
        ``end_offset`` (read on from the last call: nothing below a committed end is ever
        truncated, which the replication simulation checks)."""
        if log not in self._commits:
            found: set[tuple[TopicPartition, int]] = set()

            def apply(header: record_batch.BatchHeader, records: list) -> None:
                if not header.attributes & (record_batch.CONTROL | record_batch.TRANSACTIONAL):
                    seen = GroupCoordinator()
                    seen.load(records, 0)
                    found.update((tp, o.offset) for tp, o in seen.committed(GROUP, require_stable=False).items())

            self._commits[log] = (LogReplay(apply, log.log_start_offset), found)
        replay, found = self._commits[log]
        replay.catch_up(log, end_offset, 1 << 20)
        return found

    def check_reply(self, waiter: Any, response: Any, log: Log, committed_end: int) -> None:
        """4. a member is told its generation (and its leader's assignment) only once its group
        record is below ``committed_end`` in ``log`` (its coordinator's), and only in that
        generation."""
        if response.error_code or not isinstance(response, JoinGroupResponse | SyncGroupResponse):
            return
        # (A reply held for a record may be released after a younger record is replicated too.)
        durable = generations(log, committed_end, self.clock())
        if isinstance(response, JoinGroupResponse):
            members = durable.get(response.generation, {})
            assert response.member_id in members, f"4. generation {response.generation} told before it was durable"
            self.told = max(self.told, response.generation)
            self.group_stats["generations told"] += 1
        else:
            member_id, generation = self.syncs.pop(waiter)
            members = durable.get(generation, {})
            assert member_id in members, f"4. a sync answered in generation {generation}, never durable"
            if response.assigned is not None:
                assert members[member_id] == response.assigned, "4. an assignment not durable"

    def check_loaded(self, pump: GroupPump) -> None:
        """4. no fail-over loads a generation below one a member was told."""
        loaded = pump.core.groups.groups.get(GROUP)
        assert (loaded.generation if loaded else -1) >= self.told, "4. the loaded generation went backwards"

    def check_groups(self, pump: GroupPump | None, committed_end: int, aborted: Iterable[int] = ()) -> None:
        """1-3 at ``pump`` (the coordinator, if one serves) and 6 everywhere."""
        if pump is not None:
            log = pump.partition.log
            pump.replay.catch_up(log, pump.partition.high_watermark, 1 << 20)
            assert pump.replay.next_offset >= pump.partition.high_watermark, "1. the groups did not catch up"
            groups = pump.core.groups
            durable = load(log, pump.replay.next_offset, self.clock())  # what the groups applied, as the log says
            for group_id in (GROUP, TXN_GROUP):
                served = groups.committed(group_id, require_stable=False)
                logged = durable.committed(group_id, require_stable=False)
                assert served == logged, f"1. group {group_id} serves offsets {served}, its log says {logged}"
                for tp, offset in served.items():
                    assert offset.offset not in aborted, f"3. {group_id} serves {tp} at {offset.offset}, aborted"
            assert groups.pending == durable.pending, (
                f"1. pending offsets {groups.pending}, the log's {durable.pending}"
            )
            lost = self.acked_commits - self.commits(log, committed_end)
            assert not lost, f"2. acknowledged commits lost: {sorted(lost)[:3]}"
            group = groups.groups.get(GROUP)
            members = [x for x in self.clients if group is not None and x.state.member_id in group.members]
            for x, y in itertools.combinations(members, 2):
                assert not x.held & y.held, f"6. {sorted(x.held & y.held)} held by {x.name} and {y.name} at once"
        for client in self.clients:
            if client.state.generation != NO_GENERATION:
                for tp in client.held:
                    owners = self.owners[client.state.generation, tp]
                    owners.add(client.name)
                    assert len(owners) == 1, (
                        f"6. {tp} had owners {sorted(owners)} in generation {client.state.generation}"
                    )


class Simulation(GroupWorld):
    """See the module docstring."""

    def __init__(self, directory: str, seed: int, strategy: str, clock: Any) -> None:
        super().__init__(strategy)
        self.seed, self.clock = seed, clock
        self.rng = random.Random(seed)
        self.config = TopicConfig.from_properties({"cleanup.policy": "compact", "min.insync.replicas": "2"})
        self.log = Log.open(directory, self.config.log_config(), clock=clock)
        self.epoch = 1
        self.coordinator = self._lead((LEADER, FOLLOWER))
        self.copied = 0  # how far the follower copied the log
        self.aborted: set[int] = set()  # offsets committed in transactions that aborted
        self.txn = TxnProducer()
        self.steps = 0
        self.group_stats.update({"txn commits": 0, "txn aborts": 0})
        self.hw = 0  # see committed_end

    def _lead(self, isr: tuple[int, ...]) -> GroupPump:
        partition = Partition("__consumer_offsets", 0, LEADER, self.log, self.config, clock=self.clock)
        partition.become_leader(self.epoch, replicas=(LEADER, FOLLOWER), isr=isr)
        return GroupPump(partition, self.clock, self._replied)

    def _replied(self, waiter: Any, response: Any) -> None:
        self.check_reply(waiter, response, self.log, self.committed_end())
        self.answered(waiter, response)

    def call(self, event: Any) -> None:
        self.coordinator.step(event)

    # --- the schedule -------------------------------------------------------------------

    def step(self) -> None:
        rng = self.rng
        (action,) = rng.choices(list(ACTIONS), weights=list(ACTIONS.values()))
        c = self.coordinator
        if action == "copy":
            self.copied = self.log.log_end_offset
        elif action == "acknowledge":
            self.acknowledge()
        elif action == "persist":
            c.persist(rng)
        elif action == "shrink_isr" and len(c.partition.isr) > 1:
            c.partition.apply_isr((LEADER,), c.partition.partition_epoch + 1)
        elif action == "expand_isr" and len(c.partition.isr) == 1 and self.copied == self.log.log_end_offset:
            c.partition.apply_isr((LEADER, FOLLOWER), c.partition.partition_epoch + 1)
        elif action == "fail_over":
            self.fail_over()
        elif action == "tick":
            self.client_step("beats")
            long = rng.random() < 0.05  # past the sessions
            self.clock.advance(rng.randrange(SESSION_MS, 3 * SESSION_MS) if long else rng.randrange(0, 3_000))
            self.coordinator.tick()
        elif action == "txn":
            self.txn_step()
        else:
            self.client_step(action)
        self.steps += 1
        self.check()

    def acknowledge(self) -> None:
        """The follower's next fetch tells the leader how far it copied: the HW moves."""
        if len(self.coordinator.partition.isr) > 1:
            self.coordinator.partition.read(self.copied, 1 << 20, replica_id=FOLLOWER)

    def fail_over(self) -> None:
        """The coordinator's process dies; the follower's copy leads from the next epoch."""
        old = self.coordinator
        self.group_stats["fail-overs"] += 1
        old.step(Unload())  # (its callers hear of it: their calls fail)
        isr = old.partition.isr
        if FOLLOWER in isr:  # the follower's copy leads
            self.log.truncate_to(self.copied)
            isr = (LEADER, FOLLOWER)
        # else the follower may not lead (not in the ISR): the leader's process starts again
        self.epoch += 1
        self.coordinator = self._lead(isr)
        self.check_loaded(self.coordinator)

    def txn_step(self) -> None:
        """The transactional producer's next move."""
        t, c = self.txn, self.coordinator
        if t.marker_op is not None:  # (markers are written as the transaction coordinator writes them)
            if not t.marker_op.try_complete(c.partition, self.clock()):
                return
            if t.marker_op.answer is not None or t.marker_op.leader_epoch != c.partition.leader_epoch:
                t.marker_op = None  # not replicated: written again (a copy that made it is stale)
                return
            t.marker_op = None
            self._txn_ended()
        elif t.marker is not None:
            try:
                info = c.partition.append_marker(PRODUCER_ID, t.epoch + 1, t.marker, coordinator_epoch=0)
            except RaylogError:
                return  # written again on a later step
            if info is None:
                self._txn_ended()  # stale: written before
            else:
                deadline = self.clock() + APPEND_TIMEOUT_MS
                t.marker_op = DelayedProduce(info.last_offset + 1, c.partition.leader_epoch, deadline)
        elif t.waiter is None:
            tps = [TopicPartition("t", p) for p in self.rng.sample(range(PARTITIONS), 2)]
            t.offsets = {tp: next(self.offsets) for tp in tps}
            t.waiter, t.acknowledged = ("txn", next(t.calls)), False
            committed = {tp: OffsetAndMetadata(o) for tp, o in t.offsets.items()}
            c.step(Commit(t.waiter, TXN_GROUP, "", -1, None, committed, self.clock(), (PRODUCER_ID, t.epoch)))
        elif t.waiter in self.answers:
            t.acknowledged = error_of(self.answers.pop(t.waiter)) is None
            t.marker = t.acknowledged and self.rng.random() < 0.8
        elif self.rng.random() < 0.3:
            t.marker = False  # it gave up waiting: it aborts while its commit may still be on its way

    def _txn_ended(self) -> None:
        t = self.txn
        self.group_stats["txn commits" if t.marker else "txn aborts"] += 1
        if not t.marker:
            self.aborted.update(t.offsets.values())
        t.epoch, t.marker, t.waiter, t.offsets = t.epoch + 1, None, None, {}

    def run(self, steps: int = STEPS) -> None:
        for _ in range(steps):
            self.step()
        self.quiet()

    def quiet(self) -> None:
        """Every append goes through and nothing fails, until the group settles; meanwhile the
        members commit (two commits at once each, for the first rounds) and the appends'
        waits end in a random order."""
        for client in self.clients:
            client.paused = False
        c = self.coordinator
        if len(c.partition.isr) == 1:
            self.copied = self.log.log_end_offset
            c.partition.apply_isr((LEADER, FOLLOWER), c.partition.partition_epoch + 1)
        for round in range(QUIET_ROUNDS):
            for client in self.clients if round < COMMIT_ROUNDS else ():
                client.start_commit(self)
                client.start_commit(self)
            self.copied = self.log.log_end_offset
            self.acknowledge()
            while self.coordinator.persist(self.rng):
                pass
            for client in self.clients:
                client.poll(self)
                self.check()
            self.clock.advance(1_000)
            self.coordinator.tick()
            self.check()
            if round >= COMMIT_ROUNDS and self.settled(self.coordinator):
                return
        assert self.settled(self.coordinator), f"not settled: {[sorted(c.held) for c in self.clients]}"

    def committed_end(self) -> int:
        """The end of what the ISR ever had (a new leader's HW starts lower, and catches up)."""
        self.hw = max(self.hw, self.coordinator.partition.high_watermark)
        return self.hw

    def check(self) -> None:
        self.check_groups(self.coordinator, self.committed_end(), self.aborted)


def load(log: Log, end_offset: int, now_ms: int) -> GroupCoordinator:
    """The groups read back from ``log`` below ``end_offset``, as a coordinator loads them."""
    groups = GroupCoordinator()
    LogReplay(lambda header, records: groups.apply_batch(header, records, now_ms), log.log_start_offset).catch_up(
        log, end_offset, 1 << 20
    )
    return groups


def generations(log: Log, end_offset: int, now_ms: int) -> dict[int, dict[str, bytes]]:
    """Each generation of :data:`GROUP` that the records below ``end_offset`` ever held, with
    its members and their assignments (the last record of that generation)."""
    groups, seen = GroupCoordinator(), {}

    def apply(header: record_batch.BatchHeader, records: list) -> None:
        groups.apply_batch(header, records, now_ms)
        group = groups.groups.get(GROUP)
        if group is not None and group.members:
            seen[group.generation] = {m.member_id: m.assigned for m in group.members.values()}

    LogReplay(apply, log.log_start_offset).catch_up(log, end_offset, 1 << 20)
    return seen


def _apply(groups: GroupCoordinator, clock: Any, header: record_batch.BatchHeader, records: list) -> None:
    groups.apply_batch(header, records, clock())


def run(directory: str, seed: int, strategy: str | None = None, steps: int = STEPS) -> Simulation:
    """Play schedule ``seed`` (with ``strategy``, by default one of :data:`STRATEGIES` by the
    seed); raises AssertionError naming the seed and the broken invariant."""
    from raylog.chaos.simulation import ManualClock

    strategy = strategy or STRATEGIES[seed % len(STRATEGIES)]
    sim = Simulation(directory, seed, strategy, ManualClock())
    try:
        sim.run(steps)
    except AssertionError as exc:
        raise AssertionError(f"group schedule {seed} ({strategy}), step {sim.steps}: {exc}") from exc
    finally:
        sim.log.close()
    return sim
