"""A deterministic simulation of one partition replicated on brokers 0, 1 and 2 that runs
raylog's own replication code over an in-memory transport (no Ray, no threads, no sleeps).

What decides is the shipped code: every running replica process holds a real
:class:`Partition` over a real :class:`Log` in a temporary directory and, while it follows, a
:class:`FollowerFetcher`; the controller decides through :mod:`raylog.coordination.elections`.
The simulation plays only what the actors do around them, the I/O:

- Transport: every call is a message in flight, delivered after any number of other steps
  (calls are delayed and reordered) or lost. A caller that stops waiting (a timeout) drops the
  answer, but its request may still reach its target later, as a Ray call does.
- Replica processes: the shipped :class:`ReplicaCore` (what to follow, one ISR proposal at a
  time, no role after a restart until the controller answered its report), whose effects
  the simulation carries out as :class:`PartitionReplicaActor` does, the actor's loops
  around it (the follower's fetch loop), and the shipped :class:`Purgatory` of each leader:
  acks=all produces, long-polling fetches and batches after a sequence gap wait there, and are
  answered when their operation says it is done. A process may crash
  (its files stay; it restarts, takes no role, and reports to the controller until it gets its
  state in the answer), be paused (SIGSTOP: it handles nothing until resumed) or lose its
  machine (the unflushed tail of its last segment is cut, the controller sees the node die and,
  later, come back; never the last in-sync replica, see ``may_lose_unflushed``), or come back
  with a new, empty disk (any replica, the last in-sync one too: the controller must notice).
- The controller: the shipped :class:`ReplicationControl` over a :class:`MetadataImage`, stepped
  with the events the actor steps it with (ISR proposals, restart reports, a follower's report
  of an unreachable leader, the brokers each round finds, elections); the simulation carries
  out its effects as :class:`ControllerActor` does: journal (here: keep) and replay the records,
  push the changed states to the replicas (pushes are calls too: delayed, reordered, lost, sent
  again with the same epochs), call the reported leader (here: it answers if it runs), answer.
- Clients: an idempotent producer whose batch is retried until answered (a retry may reach the
  leader that has it already), plain acks=all sends, and 'latest' offset look-ups.

``step()`` draws the next step from ``random.Random(seed)``; every kind of step is also a
method, so a test can play a scenario step by step. ``check_invariants()`` raises
``AssertionError`` naming the broken invariant; ``report()`` tells what happened.

Run many seeds: ``raylog bench simulate --schedules 100000`` (:func:`campaign`); the suite
runs a seeded slice (``tests/unit/coordination/test_replication_simulation.py``).
"""

from __future__ import annotations

import functools
import itertools
import logging
import multiprocessing
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from raylog.common import record_batch
from raylog.common.requests import LATEST_TIMESTAMP, PREFERRED_ELECTION
from raylog.config import TopicConfig
from raylog.coordination.elections import NO_LEADER
from raylog.coordination.fetcher import EpochAnswer, EpochQuery, Next
from raylog.coordination.metadata import MetadataImage
from raylog.coordination.partition import Partition, SequenceGap
from raylog.coordination.purgatory import Delayed, DelayedFetch, DelayedProduce, DelayedRetry, Purgatory
from raylog.coordination.replica_core import (
    Changed,
    Follow,
    IsrAnswered,
    ProposeIsr,
    ReplicaCore,
    ReportRestart,
    Restarted,
    RoleAnswered,
    StatePushed,
    StopFollowing,
)
from raylog.coordination.replication_control import (
    AlterIsr,
    BrokersFound,
    ControllerResult,
    ElectLeaders,
    LeaderDead,
    LeaderUnreachable,
    ReactToLiveness,
    ReplicaRestarted,
    ReplicationControl,
)
from raylog.errors import RaylogError
from raylog.protocol import FetchRequest
from raylog.storage.log import Log
from raylog.types import PartitionInfo

BROKERS = (0, 1, 2)
TOPIC = "sim"
CONTROLLER = -1
PRODUCER_ID = 7
FETCH_MAX_BYTES = (1, 300, 1 << 20)  # 1: exactly one batch per fetch
#: A follower's pause after a failed fetch (the actor's REPLICA_BACKOFF_S).
BACKOFF_MS = 100
#: How long a leader holds a follower's fetch that finds nothing new (replica.fetch.wait.max.ms).
LONG_POLL_MS = 500
#: How long an acks=all produce (or a batch after a sequence gap) may wait at its leader.
PRODUCE_TIMEOUT_MS = 30_000
#: At most this many messages in flight: further sends wait (the steps deliver or lose some first).
MAX_IN_FLIGHT = 24
#: The replicas' calls to the controller, and the kinds of their answers (None: not waited for).
CONTROLLER_CALLS = {"alter_isr": "isr_answer", "restarted": "restart_answer", "leader_unreachable": None}

#: Relative weights of the random step kinds.
STEP_WEIGHTS = {
    "deliver": 400,
    "lose": 4,
    "follow": 50,
    "time_out": 3,
    "housekeeping": 16,
    "send": 28,
    "produce": 16,
    "list_latest": 4,
    "repush": 6,
    "tick": 10,
    "crash": 2,
    "machine_crash": 2,
    "disk_replaced": 1,
    "pause": 2,
    "resume": 10,
    "restart": 20,
    "node_back": 12,
    "elect_preferred": 2,
}
#: The faults, whose weights each run scales by one of FAULT_SCALES (drawn from its seed): some
#: runs see a fault every few hundred steps, others one every few dozen.
FAULTS = ("lose", "time_out", "crash", "machine_crash", "disk_replaced", "pause")
FAULT_SCALES = (0.25, 0.5, 1, 2, 4)


def _step(method):
    """A step method: once it is done, the leaders answer what waits in their purgatories and is
    done now."""

    @functools.wraps(method)
    def run(self, *args, **kwargs):
        self.actions += 1
        result = method(self, *args, **kwargs)
        self.complete_delayed()
        return result

    return run


@dataclass
class Message:
    """A call (or its answer) in flight."""

    id: int
    kind: str
    src: int  # broker, or CONTROLLER
    dst: int
    payload: Any
    src_incarnation: int = -1  # the sending process (answers go back to it only)
    reply_to: int = -1  # for an answer: the id of the request


@dataclass
class Replica:
    """One replica process: its partition, and the state of the actor's loops around it."""

    broker: int
    incarnation: int
    core: ReplicaCore
    request: tuple[int, EpochQuery | FetchRequest] | None = None  # awaiting an answer
    backoff_until_ms: int = 0
    report: int | None = None  # the restart report in flight
    paused: bool = False
    #: The calls waiting at this leader; each operation's token: (request, first offset of its batch).
    purgatory: Purgatory = field(default_factory=Purgatory)
    isr_request: int | None = None  # the message id of the ISR proposal whose answer is awaited

    @property
    def partition(self) -> Partition:
        return self.core.partition

    @property
    def fetcher(self):
        return self.core.fetcher


@dataclass
class Batch:
    """The idempotent producer's batch: sent, retried with the same sequence, until answered."""

    sequence: int
    values: list[bytes]
    attempt: int | None = None  # the message id of the attempt it waits on


@dataclass
class Stats:
    produced: int = 0
    acknowledged: int = 0
    refused: int = 0
    retries: int = 0
    duplicates: int = 0  # retries the leader found already appended
    failed_after_append: int = 0
    fetches: int = 0
    lost_messages: int = 0
    timeouts: int = 0
    isr_changes: int = 0
    refused_isr_proposals: int = 0
    leader_changes: int = 0
    crashes: int = 0
    machine_crashes: int = 0
    disks_replaced: int = 0
    pauses: int = 0
    bytes_lost: int = 0
    offline_steps: int = 0
    truncations: int = 0
    latest_answers: int = 0
    offsets_not_available: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)


class Cluster:
    """See the module docstring."""

    def __init__(
        self,
        directory: str,
        seed: int = 0,
        *,
        properties: dict | None = None,
        acks: int = -1,
        weights: dict[str, int] | None = None,
    ):
        self.directory = directory
        self.seed = seed
        self.rng = random.Random(seed)
        self.clock = ManualClock()
        self.config = TopicConfig.from_properties(
            {
                "min.insync.replicas": "2",
                "replica.lag.time.max.ms": "1000",
                "segment.bytes": "2048",  # several segments: truncation and recovery cross them
                **(properties or {}),
            }
        )
        self.acks = acks
        scale = self.rng.choice(FAULT_SCALES)
        self.weights = {k: w * scale if k in FAULTS else w for k, w in STEP_WEIGHTS.items()}
        self.weights.update(weights or {})
        # The controller: the single writer of leader, leader epoch and ISR.
        self.controller = ReplicationControl(MetadataImage())
        #: Each broker's node as a round finds it: (node id, data directory, directory id).
        self.nodes = {b: (f"node-{b}", f"broker-{b}", f"directory-{b}") for b in BROKERS}
        self.nodes_down: set[int] = set()
        self.wiped: set[int] = set()  # brokers whose node is down and whose disk was replaced
        topic = {"type": "topic", "name": TOPIC, "topic_id": TOPIC, "replicas": [list(BROKERS)]}
        self.controller.replay(ControllerResult(({**topic, "config": self.config.to_properties()},)))
        self._find_brokers()
        self.replicas: dict[int, Replica | None] = {}
        self.incarnations = dict.fromkeys(BROKERS, 0)
        self.in_flight: dict[int, Message] = {}
        self._ids = itertools.count()
        self.batch: Batch | None = None
        self.next_sequence = 0
        self.next_value = 0
        self.acknowledged: dict[int, bytes] = {}  # offset -> value, every record a client was told is safe
        self.sent_values: dict[int, list[bytes]] = {}  # produce request id -> values (plain sends)
        self.idempotent_values: set[bytes] = set()
        self.latest_answers: list[tuple[int, int]] = []  # (leader epoch, offset) a client was told
        self.stats = Stats()
        self.trace: list[str] = []
        self.steps = 0
        self.actions = 0
        # What the invariants remember between steps.
        self._epoch_leaders: dict[int, int] = {}
        self._checked: tuple | None = None  # the state the log-content checks last passed on
        self._controller_epoch = self.info.leader_epoch
        self._replica_epochs: dict[tuple[int, int], int] = {}
        self._leader_hw: dict[tuple[int, int, int], int] = {}
        self._contents: dict[int, list[bytes]] = {}
        for broker in BROKERS:
            self.replicas[broker] = self._start(broker)
            self._replica_step(self.replicas[broker], StatePushed(self.info, self._handle(self.info)))

    # --- the random driver ----------------------------------------------------------------

    def step(self) -> None:
        """One random step (one that cannot happen now, such as a second crash, does nothing)."""
        kinds = list(self.weights)
        kind = self.rng.choices(kinds, weights=[self.weights[k] for k in kinds])[0]
        self.stats.by_kind[kind] = self.stats.by_kind.get(kind, 0) + 1
        rng = self.rng
        if kind == "deliver":
            # Mostly the oldest deliverable message, sometimes a younger one: calls are reordered.
            ready = self.deliverable()
            if ready:
                self.deliver(ready[min(int(rng.expovariate(1.0)), len(ready) - 1)])
        elif kind == "lose" and self.in_flight:
            self.lose(rng.choice(sorted(self.in_flight)))
        elif kind == "follow":
            self.follow(rng.choice(BROKERS))
        elif kind == "time_out":
            self.time_out(rng.choice(BROKERS))
        elif kind == "housekeeping":
            self.housekeeping(rng.choice(BROKERS))
        elif kind == "send":
            self.send(rng.randint(1, 4))
        elif kind == "produce":
            self.produce(rng.randint(1, 3))
        elif kind == "list_latest":
            self.list_latest()
        elif kind == "repush":
            self.repush(rng.choice(BROKERS))
        elif kind == "tick":
            self.tick(rng.choice((50, 200, 400, 700, 1200)))
        elif kind == "crash" and not self.down:
            self.crash(rng.choice(BROKERS))
        elif kind == "machine_crash" and not self.down:
            broker = rng.choice(BROKERS)
            # The last in-sync replica's machine dies without losing what it wrote (see may_lose_unflushed).
            self.machine_crash(broker, cut=rng.random() if self.may_lose_unflushed(broker) else 1.0)
        elif kind == "disk_replaced" and not self.down:
            self.disk_replaced(rng.choice(BROKERS))
        elif kind == "pause" and not self.down:
            self.pause(rng.choice(BROKERS))
        elif kind == "resume":
            paused = [b for b in BROKERS if self.replicas[b] is not None and self.replicas[b].paused]
            if paused:
                self.resume(rng.choice(paused))
        elif kind == "restart":
            gone = [b for b in BROKERS if self.replicas[b] is None and b in self.live]
            if gone:
                self.restart(gone[0])
        elif kind == "node_back":
            dead = [b for b in BROKERS if b not in self.live]
            if dead:
                self.node_back(dead[0])
        elif kind == "elect_preferred":
            self.elect_preferred()
        self.clock.advance(rng.randint(0, 30))
        self.steps += 1
        if self.info.leader == NO_LEADER:
            self.stats.offline_steps += 1

    @property
    def info(self) -> PartitionInfo:
        """The partition's state as the controller journaled it."""
        return self.controller.image.partition(TOPIC, 0)

    @property
    def live(self) -> set[int]:
        """Brokers whose node is up (the controller's view)."""
        return self.controller.live

    @property
    def down(self) -> list[int]:
        """Brokers whose process is not running, or paused."""
        return [b for b in BROKERS if self.replicas[b] is None or self.replicas[b].paused]

    def may_lose_unflushed(self, broker: int) -> bool:
        """The fault model: a machine crash never hits the last in-sync replica.

        Nothing is ever fsync'd, so a machine crash of the only ISR member may take acknowledged
        records with it wherever else they had been (Kafka's "last replica standing", KIP-966)."""
        return broker not in self.info.isr or len(self.info.isr) > 1

    def running(self, broker: int) -> Replica | None:
        """The broker's process if it runs and is not paused."""
        replica = self.replicas.get(broker)
        return replica if replica is not None and not replica.paused else None

    # --- the transport --------------------------------------------------------------------

    def _send(self, kind: str, src: int, dst: int, payload: Any, reply_to: int = -1) -> int:
        incarnation = self.replicas[src].incarnation if src != CONTROLLER and self.replicas[src] else -1
        message = Message(next(self._ids), kind, src, dst, payload, incarnation, reply_to)
        self.in_flight[message.id] = message
        return message.id

    def deliverable(self) -> list[int]:
        """Messages that can be delivered now, oldest first (not those to a paused process)."""
        return [
            m.id
            for m in self.in_flight.values()
            if m.dst == CONTROLLER or self.replicas[m.dst] is None or not self.replicas[m.dst].paused
        ]

    @_step
    def lose(self, message_id: int) -> None:
        """A message is lost. A leader whose ISR proposal (or its answer) is lost hears no answer
        in time: as the actor after its timeout, it keeps the proposal pending and sends it again."""
        message = self.in_flight.pop(message_id)
        self.stats.lost_messages += 1
        self._log(f"lost {message.kind} {message.src}->{message.dst}")
        if message.kind in ("alter_isr", "isr_answer"):
            proposer = message.src if message.kind == "alter_isr" else message.dst
            request_id = message.id if message.kind == "alter_isr" else message.reply_to
            replica = self.replicas[proposer]
            if replica is not None and replica.isr_request == request_id:
                replica.isr_request = None
                self._replica_step(replica, IsrAnswered(replica.core.proposing, None))

    @_step
    def deliver(self, message_id: int) -> None:
        """Deliver one message in flight (a paused target leaves it in flight)."""
        message = self.in_flight[message_id]
        if message.dst != CONTROLLER:
            target = self.replicas[message.dst]
            if target is not None and target.paused:
                return
        del self.in_flight[message_id]
        if message.kind in CONTROLLER_CALLS:
            self._control(message.payload, message)
        else:
            getattr(self, f"_on_{message.kind}")(message)

    def _answer(self, request: Message, kind: str, payload: Any) -> None:
        """Answer ``request``: only the process that sent it, still waiting for it, takes it."""
        self._send(kind, request.dst, request.src, (request.src_incarnation, payload), reply_to=request.id)

    def _answered(self, message: Message) -> tuple[Replica | None, Any]:
        """The process an answer is for (None if it is gone), and the answer."""
        incarnation, payload = message.payload
        replica = self.replicas[message.dst]
        if replica is None or replica.incarnation != incarnation:
            return None, payload
        return replica, payload

    # --- replica processes: the follower's loop -------------------------------------------

    @_step
    def follow(self, broker: int) -> bool:
        """The follower loop of ``broker`` sends its next request after a pause (False if it
        sends nothing now); a restarted replica still waiting for its role reports again."""
        replica = self.running(broker)
        if replica is not None and replica.core.awaiting_role and replica.report not in self.in_flight:
            replica.report = self._send("restarted", broker, CONTROLLER, ReplicaRestarted(TOPIC, 0, broker))
        if replica is None or self.clock() < replica.backoff_until_ms:
            return False
        return self._send_next(replica)

    def _send_next(self, replica: Replica) -> bool:
        """The fetch loop's next request, unless one is out already or the role moved on."""
        if replica.fetcher is None or replica.request is not None or len(self.in_flight) >= MAX_IN_FLIGHT:
            return False
        request = replica.fetcher.next_request()
        if request is None:
            return False  # the loop ended on its own (the core starts another on a new role)
        if isinstance(request, FetchRequest):
            request = FetchRequest(
                request.offset,
                self.rng.choice(FETCH_MAX_BYTES),
                request.min_bytes,
                request.max_wait_ms,
                replica_id=request.replica_id,
                current_leader_epoch=request.current_leader_epoch,
            )
            kind = "fetch"
        else:
            kind = "epoch_query"
        replica.request = (self._send(kind, replica.broker, replica.fetcher.leader, request), request)
        return True

    def _on_fetch(self, message: Message) -> None:
        leader = self.replicas[message.dst]
        if leader is None:
            self._failed_call(message)
            return
        before = leader.partition.high_watermark
        response = leader.partition.fetch(message.payload)
        self.stats.fetches += 1
        self._log(
            f"fetch {message.src} <- {message.dst} at {message.payload.offset}: "
            f"{response.error_code or len(response.records)} (HW {before} -> {response.high_watermark})"
        )
        if not response.error_code:
            self._replica_step(leader, Changed())
        self._delay(leader, DelayedFetch(message.payload, response, self.clock() + LONG_POLL_MS, (message, None)))

    def _delay(self, replica: Replica, op: Delayed) -> None:
        """Answer ``op``'s request if the operation is done, else park it in ``replica``'s
        purgatory (the actor's ``_await``)."""
        if not op.try_complete(replica.partition, self.clock()):
            replica.purgatory.park(op)
            return
        message, first_offset = op.token
        if isinstance(op, DelayedFetch):
            self._answer(message, "fetch_answer", op.answer)
        elif isinstance(op, DelayedRetry) and op.answer is None:
            self._on_produce(message)  # another batch came: the producer's batch is tried again
        else:
            self.stats.failed_after_append += isinstance(op, DelayedProduce) and op.answer is not None
            self._answer(message, "produce_answer", first_offset if op.answer is None else op.answer)

    def complete_delayed(self) -> None:
        """Each running leader tries again what its purgatory wakes (the operations its last
        change or the clock may complete), as the actor's parked calls wake."""
        for replica in self.replicas.values():
            if replica is not None and not replica.paused:
                for op in replica.purgatory.wake(replica.partition) + replica.purgatory.expired(self.clock()):
                    self._delay(replica, op)

    def _on_epoch_query(self, message: Message) -> None:
        leader = self.replicas[message.dst]
        if leader is None:
            self._failed_call(message)
            return
        self._answer(message, "epoch_answer", EpochAnswer(*leader.partition.answer_epoch_query(message.payload.epoch)))

    def _on_fetch_answer(self, message: Message) -> None:
        self._on_follower_answer(message)

    def _on_epoch_answer(self, message: Message) -> None:
        self._on_follower_answer(message)

    def _on_follower_answer(self, message: Message) -> None:
        replica, answer = self._answered(message)
        if replica is None or replica.request is None or replica.request[0] != message.reply_to:
            return  # the process is gone or stopped waiting (a timeout): the answer is dropped
        request = replica.request[1]
        replica.request = None
        fetcher = replica.fetcher
        before = replica.partition.log.log_end_offset
        if answer is None:
            then = fetcher.on_failure(request)
        else:
            then = fetcher.on_answer(request, answer)
        after = replica.partition.log.log_end_offset
        if after < before:
            self.stats.truncations += 1
            del self._contents[replica.broker][after:]
        self._after(replica, then)

    def _failed_call(self, message: Message) -> None:
        """A call to a process that is gone: the caller hears of it at once (Ray's ActorDiedError)."""
        self._answer(message, "fetch_answer" if message.kind == "fetch" else "epoch_answer", None)

    @_step
    def time_out(self, broker: int) -> None:
        """``broker``'s follower loop stops waiting for its request (which stays in flight)."""
        replica = self.running(broker)
        if replica is None or replica.request is None:
            return
        request = replica.request[1]
        replica.request = None
        self.stats.timeouts += 1
        self._log(f"timeout {broker}: stops waiting for its {type(request).__name__}")
        self._after(replica, replica.fetcher.on_failure(request))

    def _after(self, replica: Replica, then: Next) -> None:
        """What the fetch loop does after an answer: the next request at once, or a pause."""
        if then is Next.REPORT_LEADER and replica.fetcher is not None:
            report = LeaderUnreachable(TOPIC, 0, replica.fetcher.leader_epoch)
            self._send("leader_unreachable", replica.broker, CONTROLLER, report)
        if then is Next.AGAIN:
            self._send_next(replica)
        else:
            replica.backoff_until_ms = self.clock() + BACKOFF_MS

    # --- replica processes: roles and the leader's ISR proposals --------------------------

    def _replica_step(self, replica: Replica, event: Any) -> None:
        """Step ``replica``'s core and carry out its effects as the actor's ``_carry_out``."""
        broker = replica.broker
        for effect in replica.core.step(event):
            if isinstance(effect, StopFollowing):
                replica.request = None
            elif isinstance(effect, Follow):
                replica.request, replica.backoff_until_ms = None, 0
                self._send_next(replica)
            elif isinstance(effect, ProposeIsr):
                epochs = (effect.leader_epoch, effect.partition_epoch)
                replica.isr_request = self._send(
                    "alter_isr", broker, CONTROLLER, AlterIsr(TOPIC, 0, broker, *epochs, effect.isr)
                )
                self._log(f"ISR proposal {list(effect.isr)} from {broker} (epochs {epochs[0]}/{epochs[1]})")
            elif isinstance(effect, ReportRestart):
                replica.report = self._send("restarted", broker, CONTROLLER, ReplicaRestarted(TOPIC, 0, broker))

    def _handle(self, info: PartitionInfo) -> int | None:
        """The leader's "actor" the controller names with a state: its broker, if live."""
        return info.leader if info.leader in self.live else None

    def _on_push(self, message: Message) -> None:
        replica = self.replicas[message.dst]
        if replica is not None:  # (a push to a process that is gone is lost)
            self._replica_step(replica, StatePushed(*message.payload))

    @_step
    def housekeeping(self, broker: int) -> None:
        """A leader's housekeeping round: it proposes an ISR change, or sends again one unanswered."""
        replica = self.running(broker)
        if replica is not None:
            self._replica_step(replica, Changed())

    def _on_isr_answer(self, message: Message) -> None:
        replica, answer = self._answered(message)
        if replica is None or replica.isr_request != message.reply_to:
            return
        replica.isr_request = None
        self._replica_step(replica, IsrAnswered(replica.core.proposing, answer))

    def _on_restart_answer(self, message: Message) -> None:
        replica, answer = self._answered(message)
        if replica is not None:
            self._replica_step(replica, RoleAnswered(*answer))

    # --- the controller -------------------------------------------------------------------

    def _control(self, event: Any, request: Message | None = None) -> ControllerResult:
        """Step the controller with ``event`` and carry out the effects as the actor does:
        journal (keep) and replay, push each changed state to its live replicas, call a
        reported leader (it answers if it runs), answer ``request``."""
        before = self.info
        result = self.controller.step(event)
        self.controller.replay(result)
        if self.info != before:
            self._log(
                f"controller: leader {before.leader} -> {self.info.leader}, epoch {self.info.leader_epoch}, "
                f"ISR {list(self.info.isr)}, partition epoch {self.info.partition_epoch} ({type(event).__name__})"
            )
            self.stats.leader_changes += self.info.leader != before.leader
        for info in result.push:
            for broker in info.replicas:
                if broker in self.live:
                    self._send("push", CONTROLLER, broker, (info, self._handle(info)))
        check = result.check
        if check is not None and self.running(check.broker) is None:
            self._control(LeaderDead(check.topic, check.partition, check.broker, check.leader_epoch))
        if isinstance(event, AlterIsr) and result.response is not None:
            accepted = result.response[0]
            self.stats.refused_isr_proposals += not accepted
            self.stats.isr_changes += bool(result.push)
            verdict = "accepted" if accepted else "refused"
            self._log(f"controller: ISR proposal {list(event.isr)} from {event.leader}: {verdict}")
        answer = result.response
        if isinstance(event, ReplicaRestarted) and answer is not None:
            answer = (answer, self._handle(answer))  # the actor answers with the leader's actor too
        if request is not None and CONTROLLER_CALLS[request.kind] is not None:
            self._answer(request, CONTROLLER_CALLS[request.kind], answer)
        return result

    def _find_brokers(self) -> None:
        """A round of the controller's: the brokers whose node is up, then its reaction."""
        self._control(BrokersFound({b: node for b, node in self.nodes.items() if b not in self.nodes_down}))
        self._control(ReactToLiveness())

    @_step
    def repush(self, broker: int) -> None:
        """The controller tells ``broker`` the current state again (a retried push, alter_configs,
        a healing round): the same epochs as it may hold already."""
        if broker in self.live:
            self._send("push", CONTROLLER, broker, (self.info, self._handle(self.info)))

    @_step
    def elect_preferred(self) -> None:
        self._control(ElectLeaders(PREFERRED_ELECTION, ((TOPIC, 0),)))

    # --- faults ---------------------------------------------------------------------------

    @_step
    def crash(self, broker: int) -> None:
        """``broker``'s process dies (its files stay, as after kill -9); Ray restarts it later."""
        replica = self.replicas[broker]
        if replica is None:
            return
        self._stop(broker)
        self.stats.crashes += 1
        self._log(f"crash {broker}")

    @_step
    def machine_crash(self, broker: int, cut: float = 0.0) -> None:
        """``broker``'s machine dies: its last segment is cut at a byte in [recovery point, end]
        chosen by ``cut`` (0: lose everything unflushed); the controller sees the node die."""
        replica = self.replicas[broker]
        if replica is None:
            return
        log = replica.partition.log
        last = log._segments[-1]
        path, size = last.records.path, last.size
        floor = _position_of(log, log.recovery_point)
        self._stop(broker)
        keep = floor + round(cut * (size - floor))
        os.truncate(path, keep)
        self.stats.machine_crashes += 1
        self.stats.bytes_lost += size - keep
        self._log(f"machine crash {broker}: {os.path.basename(path)} cut from {size} to {keep} bytes, floor {floor}")
        # Calls from the dead machine's processes die with it (it is down far longer than any call lives).
        for message_id in [m.id for m in self.in_flight.values() if m.src == broker]:
            del self.in_flight[message_id]
        self.nodes_down.add(broker)
        self._find_brokers()

    def _stop(self, broker: int) -> None:
        """The process is gone: its files stay (no flush), and every call waiting in it fails."""
        replica = self.replicas[broker]
        for segment in replica.partition.log._segments:
            segment.close()
        self.replicas[broker] = None
        self._contents.pop(broker, None)
        for op in replica.purgatory:
            message = op.token[0]
            if message.kind == "fetch":
                self._failed_call(message)
            else:
                self._answer(message, "produce_answer", RaylogError("died"))

    @_step
    def disk_replaced(self, broker: int) -> None:
        """``broker``'s machine dies and comes back later with a new, empty disk (the controller
        sees a new directory id when it registers again)."""
        if self.replicas[broker] is None:
            return
        self.machine_crash(broker, cut=1.0)
        shutil.rmtree(os.path.join(self.directory, f"broker-{broker}"))
        self.wiped.add(broker)
        self.stats.disks_replaced += 1

    @_step
    def pause(self, broker: int) -> None:
        """SIGSTOP: the process handles nothing (calls to it wait) until resumed."""
        replica = self.replicas[broker]
        if replica is not None and not replica.paused:
            replica.paused = True
            self.stats.pauses += 1
            self._log(f"pause {broker}")

    @_step
    def resume(self, broker: int) -> None:
        replica = self.replicas[broker]
        if replica is not None and replica.paused:
            replica.paused = False
            self._log(f"resume {broker}")

    @_step
    def restart(self, broker: int) -> None:
        """Ray restarts ``broker``'s replica process: it recovers its log, takes no role and
        reports to the controller (as the actor does after a restart)."""
        assert self.replicas[broker] is None and broker in self.live
        replica = self.replicas[broker] = self._start(broker)
        self._replica_step(replica, Restarted())
        self._log(
            f"restart {broker}: LEO {replica.partition.log.log_end_offset}, recovery {replica.partition.log.recovery}"
        )

    @_step
    def node_back(self, broker: int) -> None:
        """``broker``'s node is back: the controller registers it, its replica restarts from disk
        (leaving the ISR until it catches up, as ``_heal_replicas``), and a new replica actor
        starts there with the current state (a first start: no report)."""
        assert broker not in self.live and self.replicas[broker] is None
        node_id, data_dir, directory_id = self.nodes[broker]
        if broker in self.wiped:  # a new directory id: it lost every replica
            self.wiped.discard(broker)
            directory_id = f"directory-{broker}-{self.incarnations[broker]}"
        self.nodes[broker] = (f"node-{broker}-{self.incarnations[broker]}", data_dir, directory_id)
        self.nodes_down.discard(broker)
        self._find_brokers()
        replica = self.replicas[broker] = self._start(broker)
        self._replica_step(replica, StatePushed(self.info, self._handle(self.info)))
        self._log(f"node back {broker}: LEO {replica.partition.log.log_end_offset}")

    # --- clients --------------------------------------------------------------------------

    @_step
    def send(self, count: int, retry_now: bool = False) -> None:
        """The idempotent producer sends its batch, or sends it again (same sequence) after a
        timeout (``retry_now``: at once) or a retriable error; a new batch only once the last one
        was acknowledged."""
        leader = self.info.leader
        if leader == NO_LEADER or len(self.in_flight) >= MAX_IN_FLIGHT:
            return
        if self.batch is None:
            values = [f"i{self.next_value + i}".encode() for i in range(count)]
            self.next_value += count
            self.batch = Batch(self.next_sequence, values)
            self.next_sequence += count
        elif self._waiting(self.batch.attempt) and not retry_now and self.rng.random() < 0.8:
            return  # still waiting for the answer (a retry now is a timeout)
        else:
            self.stats.retries += 1
        batch = self.batch
        data = record_batch.build(
            batch.values, producer_id=PRODUCER_ID, producer_epoch=0, base_sequence=batch.sequence, now_ms=self.clock()
        )
        batch.attempt = self._send("produce", CONTROLLER, leader, (data, True))
        self.stats.produced += 1

    @_step
    def produce(self, count: int) -> None:
        """A plain (not idempotent) acks send of ``count`` new values, never retried."""
        leader = self.info.leader
        if leader == NO_LEADER or len(self.in_flight) >= MAX_IN_FLIGHT:
            return
        values = [f"v{self.next_value + i}".encode() for i in range(count)]
        self.next_value += count
        message_id = self._send("produce", CONTROLLER, leader, (record_batch.build(values, now_ms=self.clock()), False))
        self.sent_values[message_id] = values
        self.stats.produced += 1

    def _waiting(self, request_id: int | None) -> bool:
        """Whether the answer to ``request_id`` may still come: the request or its answer is in
        flight, or it waits in a leader's purgatory."""
        return request_id is not None and (
            request_id in self.in_flight
            or any(op.token[0].id == request_id for r in self.replicas.values() if r for op in r.purgatory)
            or any(m.reply_to == request_id for m in self.in_flight.values())
        )

    def _on_produce(self, message: Message) -> None:
        replica = self.replicas[message.dst]
        data, idempotent = message.payload
        if replica is None:
            self._answer(message, "produce_answer", RaylogError("the leader's process is gone"))
            return
        p = replica.partition
        # The producer sends one batch at a time: the oldest it has not had acknowledged.
        first_unacked = record_batch.parse_header(memoryview(data).cast("B")).base_sequence if idempotent else -1
        try:
            outcome = p.append_as_leader(data, self.acks, first_unacked_sequence=first_unacked)
        except SequenceGap:  # waits for the earlier batch (or its deadline), as the actor's
            gap = RaylogError("an earlier batch never came")
            self._delay(replica, DelayedRetry(gap, self.clock() + PRODUCE_TIMEOUT_MS, (message, None)))
            return
        except RaylogError as exc:
            self.stats.refused += 1
            self._answer(message, "produce_answer", exc)
            return
        first, end = outcome.first_offset, outcome.last_offset + 1
        if not outcome.batches:  # a retry of a batch already appended: its original offsets
            self.stats.duplicates += 1
        else:
            self._replica_step(replica, Changed())
        self._log(f"produce at {message.dst}: offsets {first}..{end - 1}, HW {p.high_watermark}")
        if self.acks == 1:
            self._answer(message, "produce_answer", first)
        else:
            deadline = self.clock() + PRODUCE_TIMEOUT_MS
            self._delay(replica, DelayedProduce(end, p.leader_epoch, deadline, token=(message, first)))

    def _on_produce_answer(self, message: Message) -> None:
        _, answer = message.payload
        values = self.sent_values.pop(message.reply_to, None)
        batch = self.batch
        if values is None:
            if batch is None or batch.attempt != message.reply_to:
                return  # an earlier attempt: the producer stopped waiting for it
            values = batch.values
            batch.attempt = None
        if isinstance(answer, RaylogError):
            self._log(f"  produce failed: {answer}")
            return  # the idempotent batch is sent again by a later step
        records = list(zip(range(answer, answer + len(values)), values, strict=True))
        self.acknowledged.update(records)
        self.stats.acknowledged += 1
        if values and values[0].startswith(b"i"):
            self.idempotent_values.update(values)
            self.batch = None
        self._log(f"  acknowledged offsets {records[0][0]}..{records[-1][0]}")

    @_step
    def list_latest(self) -> None:
        """A client with the controller's current metadata asks the leader for the log's end."""
        replica = self.running(self.info.leader)
        if replica is None:
            return
        try:
            offset, _ = replica.partition.list_offset(LATEST_TIMESTAMP, self.info.leader_epoch)
        except RaylogError as exc:
            self.stats.offsets_not_available += exc.name == "OFFSET_NOT_AVAILABLE"
            return
        self.stats.latest_answers += 1
        self.latest_answers.append((replica.partition.leader_epoch, offset))

    @_step
    def tick(self, ms: int) -> None:
        self.clock.advance(ms)

    # --- scripted scenarios ---------------------------------------------------------------

    def settle(self, hold: tuple[str, ...] = (), limit: int = 1000) -> None:
        """Deliver every message in flight, oldest first, and those they cause, until none is
        left (messages to a paused process stay, and those of the kinds in ``hold``)."""
        for _ in range(limit):
            ready = [i for i in self.deliverable() if self.in_flight[i].kind not in hold]
            if not ready:
                return
            self.deliver(ready[0])
        raise AssertionError(f"still messages in flight after {limit} deliveries")

    def fetch_now(self, broker: int) -> bool:
        """``broker``'s request in flight (sending one if it has none) reaches the leader and
        the answer comes back at once (False if it has none to send)."""
        replica = self.running(broker)
        if replica is None or (replica.request is None and not self.follow(broker)):
            return False
        request_id = replica.request[0]
        self.deliver(request_id)
        answer = next(m.id for m in self.in_flight.values() if m.reply_to == request_id)
        self.deliver(answer)
        return True

    def in_flight_ids(self, kind: str) -> list[int]:
        return [m.id for m in self.in_flight.values() if m.kind == kind]

    # --- plumbing -------------------------------------------------------------------------

    def _start(self, broker: int) -> Replica:
        log = Log.open(
            os.path.join(self.directory, f"broker-{broker}", f"{TOPIC}-0"), self.config.log_config(), clock=self.clock
        )
        self._contents[broker] = []
        self.incarnations[broker] += 1
        partition = Partition(TOPIC, 0, broker, log, self.config, clock=self.clock)
        return Replica(broker, self.incarnations[broker], ReplicaCore(partition, clock=self.clock))

    # --- reading logs ---------------------------------------------------------------------

    def values(self, broker: int) -> list[bytes]:
        """Every value in ``broker``'s log by offset (read incrementally: logs only grow between cuts)."""
        part = self.replicas[broker].partition
        known = self._contents[broker]
        del known[part.log.log_end_offset :]
        known.extend(read_values(part.log, len(known)))
        return known

    def lost_acknowledged(self) -> list[tuple[int, bytes]]:
        """Acknowledged records missing from the current leader's log (empty without one)."""
        if self.replicas.get(self.info.leader) is None:
            return []
        log = self.values(self.info.leader)
        return [(o, v) for o, v in sorted(self.acknowledged.items()) if o >= len(log) or log[o] != v]

    # --- invariants -----------------------------------------------------------------------

    def check_invariants(self, reread: bool = False) -> None:
        """Raise AssertionError naming the first broken invariant; ``reread`` also re-reads every log whole."""
        running = [b for b in BROKERS if self.replicas[b] is not None]
        if reread:
            for broker in running:
                whole = read_values(self.replicas[broker].partition.log, 0)
                assert whole == self.values(broker), f"broker {broker}'s log changed below its end"
        self._check_epochs(running)
        self._check_high_watermarks(running)
        self._check_latest()
        # The checks of log contents hold or fail on what this signature covers: skip them when it
        # did not change since they last passed (most steps change nothing they read).
        signature = (self.info, len(self.acknowledged), *(self._replica_signature(b) for b in running))
        if signature == self._checked and not reread:
            return
        if self.replicas.get(self.info.leader) is not None:
            self._check_acknowledged()
            self._check_no_duplicates()
            self._check_agreement(running)
            self._check_isr(running)
        self._checked = signature

    def _replica_signature(self, broker: int) -> tuple:
        replica = self.replicas[broker]
        p, fetcher = replica.partition, replica.fetcher
        truncated = fetcher is not None and fetcher.truncated and fetcher.leader_epoch
        return broker, replica.incarnation, p.log.log_end_offset, p.high_watermark, p.leader_epoch, truncated

    def _check_epochs(self, running: list[int]) -> None:
        """1. At most one replica ever leads a leader epoch, and epochs only grow (the
        controller's, and each replica's). A deposed leader that has not heard of its successor
        yet still leads its older epoch: that is allowed, and 3-5 check it can do no harm."""
        assert self.info.leader_epoch >= self._controller_epoch, "1. the controller's leader epoch went down"
        self._controller_epoch = self.info.leader_epoch
        for broker in running:
            replica = self.replicas[broker]
            part = replica.partition
            key = (broker, replica.incarnation)
            assert part.leader_epoch >= self._replica_epochs.get(key, -1), f"1. broker {broker}'s epoch went down"
            self._replica_epochs[key] = part.leader_epoch
            if part.is_leader:
                first = self._epoch_leaders.setdefault(part.leader_epoch, broker)
                assert first == broker, f"1. brokers {first} and {broker} both led leader epoch {part.leader_epoch}"

    def _check_high_watermarks(self, running: list[int]) -> None:
        """2. A leader's HW never goes down while it leads one epoch (and no HW is past its LEO)."""
        for broker in running:
            replica = self.replicas[broker]
            part = replica.partition
            assert part.high_watermark <= part.log.log_end_offset, f"2. broker {broker}'s HW is past its LEO"
            if part.is_leader:
                key = (broker, replica.incarnation, part.leader_epoch)
                before = self._leader_hw.get(key, -1)
                assert part.high_watermark >= before, (
                    f"2. leader {broker}'s HW went down from {before} to {part.high_watermark} in epoch {key[2]}"
                )
                self._leader_hw[key] = part.high_watermark

    def _check_latest(self) -> None:
        """6. The log's end as told to clients never goes back: an answer from a leader of an
        epoch is never below one given earlier by a leader of the same or an older epoch."""
        if len(self.latest_answers) < 2:
            return
        epoch, offset = self.latest_answers[-1]
        for earlier_epoch, earlier in self.latest_answers[:-1]:
            assert earlier_epoch > epoch or earlier <= offset, (
                f"6. latest went back from {earlier} (epoch {earlier_epoch}) to {offset} (epoch {epoch})"
            )

    def _check_acknowledged(self) -> None:
        """3. Every acknowledged record is in the current leader's log at its offset."""
        lost = self.lost_acknowledged()
        assert not lost, (
            f"3. acknowledged records lost from leader {self.info.leader}'s log: {lost[:5]} "
            f"({len(lost)} in all; its LEO {self.replicas[self.info.leader].partition.log.log_end_offset})"
        )

    def _check_no_duplicates(self) -> None:
        """7. The idempotent producer's values are in the leader's log at most once each."""
        ours = [v for v in self.values(self.info.leader) if v.startswith(b"i")]
        assert len(ours) == len(set(ours)), f"7. the idempotent producer's records were written twice: {ours}"

    def _check_agreement(self, running: list[int]) -> None:
        """4. Replicas never diverge below the high watermark.

        Below the leader's HW for a follower that has truncated to this leader's epoch; below its
        own HW for one that has not yet: until then it may hold an uncommitted tail of an older
        epoch that the new leader never had, as in Kafka."""
        leader = self.info.leader
        ours = self.values(leader)
        leader_part = self.replicas[leader].partition
        for broker in running:
            if broker == leader:
                continue
            replica = self.replicas[broker]
            fetcher = replica.fetcher
            truncated = fetcher is not None and fetcher.truncated and fetcher.leader_epoch == leader_part.leader_epoch
            bound = leader_part.high_watermark if truncated else replica.partition.high_watermark
            at = _first_difference(self.values(broker), ours, bound)
            assert at is None, f"4. broker {broker} diverges from leader {leader} at offset {at}, below HW {bound}"

    def _check_isr(self, running: list[int]) -> None:
        """5. Every running member of the controller's ISR holds the committed log (what makes 3
        hold when the leader fails next: checked at once, not only once the loss shows)."""
        leader = self.info.leader
        ours, hw = self.values(leader), self.replicas[leader].partition.high_watermark
        for broker in running:
            if broker not in self.info.isr:
                continue
            theirs = self.values(broker)
            assert len(theirs) >= hw, (
                f"5. ISR member {broker} lacks committed records: its LEO {len(theirs)} < leader {leader}'s HW {hw}"
            )
            assert _first_difference(theirs, ours, hw) is None, f"5. ISR member {broker} diverges below the HW {hw}"

    # --- reporting ------------------------------------------------------------------------

    def state(self) -> str:
        lines = [f"controller: {self.info}, live {sorted(self.live)}"]
        for broker in BROKERS:
            replica = self.replicas[broker]
            if replica is None:
                lines.append(f"  broker {broker}: down")
                continue
            part = replica.partition
            role = "leader" if part.is_leader else f"follower of {part.leader}"
            followers = {r: (f.end_offset, self.clock() - f.last_caught_up_ms) for r, f in part.followers.items()}
            lines.append(
                f"  broker {broker}{' (paused)' if replica.paused else ''}: {role}, epoch {part.leader_epoch}/"
                f"{part.partition_epoch}, LEO {part.log.log_end_offset}, HW {part.high_watermark}, ISR "
                f"{list(part.isr)} (pending {part.pending_isr}), epochs {part.epochs.entries}"
                + (f", followers (end, ms since caught up) {followers}" if followers else "")
            )
        lines.append(f"in flight: {[(m.kind, m.src, m.dst) for m in self.in_flight.values()]}")
        return "\n".join(lines)

    def report(self, last: int = 40) -> str:
        return (
            f"seed {self.seed}, after {self.steps} random steps ({self.actions} actions)\n{self.state()}\n"
            f"last steps:\n" + "\n".join(self.trace[-last:])
        )

    def _log(self, message: str) -> None:
        self.trace.append(f"[{self.actions}] {message}")


def read_values(log: Log, start: int) -> list[bytes]:
    """The values of ``log`` from offset ``start`` (a batch boundary or inside a batch) to its end."""
    out: list[bytes] = []
    offset = start
    while offset < log.log_end_offset:
        table = record_batch.decode_table(log.read(offset, 1 << 20), min_offset=offset)
        offsets = table.column("offset").to_pylist()
        assert offsets and offsets == list(range(offset, offset + len(offsets))), f"offsets not contiguous at {offset}"
        out.extend(table.column("value").to_pylist())
        offset += len(offsets)
    return out


def _first_difference(theirs: list[bytes], ours: list[bytes], bound: int) -> int | None:
    """The first offset below ``min(len(theirs), bound)`` where ``theirs`` differs from (or goes past) ``ours``."""
    n = min(len(theirs), bound)
    if theirs[:n] == ours[:n]:
        return None
    return next(i for i in range(n) if i >= len(ours) or theirs[i] != ours[i])


def _position_of(log: Log, offset: int) -> int:
    """The byte position of ``offset``'s batch in the last segment (0 if it lies before that segment)."""
    last = log._segments[-1]
    if offset <= last.base_offset:
        return 0
    position = last.find_position(offset, last.size)
    return last.size if position is None else position


# --- running many schedules -------------------------------------------------------------------


def run(
    directory: str, seed: int, steps: int, check: Callable[[Cluster, int], None] | None = None, **kwargs
) -> Cluster:
    """Play ``steps`` random steps of seed ``seed``, checking every invariant after each (or
    calling ``check(cluster, step)`` instead); raises AssertionError with the seed and a report."""
    cluster = Cluster(directory, seed, **kwargs)
    for step in range(steps):
        cluster.step()
        try:
            if check is not None:
                check(cluster, step)
            else:
                cluster.check_invariants(reread=step % 100 == 99)
        except AssertionError as exc:
            raise AssertionError(f"seed {seed}, step {step}: {exc}\n{cluster.report()}") from None
    return cluster


def _run_seeds(args: tuple[int, int, int]) -> tuple[int, list[str], dict[str, int]]:
    """Run seeds ``range(start, stop)``; returns (schedules run, failures, summed stats)."""
    start, stop, steps = args
    _no_fsync()
    logging.disable(logging.CRITICAL)  # the replicas log every failed fetch: the trace tells more
    failures, totals = [], {}
    root = tempfile.mkdtemp(prefix="raylog-sim-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    try:
        for seed in range(start, stop):
            directory = os.path.join(root, str(seed))
            try:
                cluster = run(directory, seed, steps)
                for name, value in vars(cluster.stats).items():
                    if isinstance(value, int):
                        totals[name] = totals.get(name, 0) + value
            except AssertionError as exc:
                failures.append(str(exc))
            shutil.rmtree(directory, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return stop - start, failures, totals


def _no_fsync() -> None:
    """Durability is the simulator's business (a machine crash cuts files past the recovery
    point), so real fsyncs only cost time."""
    os.fsync = lambda fd: None
    os.fdatasync = lambda fd: None


@dataclass
class CampaignReport:
    """What a campaign of seeded schedules found."""

    schedules: int
    first_seed: int
    steps: int
    workers: int
    elapsed_s: float
    failures: list[str]  # each: the seed, the step, the broken invariant and the trace
    totals: dict[str, int]  # the runs' Stats, summed

    def summary(self) -> str:
        last = self.first_seed + self.schedules - 1
        return (
            f"{self.schedules} schedules x {self.steps} steps (seeds {self.first_seed}..{last}) "
            f"in {self.elapsed_s:.1f} s on {self.workers} workers: {len(self.failures)} failed\n"
            "totals: " + ", ".join(f"{k} {v}" for k, v in sorted(self.totals.items()))
        )


def campaign(schedules: int, first_seed: int = 0, steps: int = 200, workers: int | None = None) -> CampaignReport:
    """Run seeds ``first_seed .. first_seed + schedules - 1``, ``steps`` random steps each,
    checking every invariant after every step, on ``workers`` processes (default: one per core)."""
    workers = workers or os.cpu_count() or 1
    started = time.monotonic()
    chunk = 50
    end = first_seed + schedules
    jobs = [(s, min(s + chunk, end), steps) for s in range(first_seed, end, chunk)]
    done, failures, totals = 0, [], {}
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        for count, failed, stats in pool.imap_unordered(_run_seeds, jobs):
            done += count
            failures += failed
            for name, value in stats.items():
                totals[name] = totals.get(name, 0) + value
    return CampaignReport(done, first_seed, steps, workers, time.monotonic() - started, failures, totals)


class ManualClock:
    """A millisecond clock that moves only when told to."""

    def __init__(self, now_ms: int = 1_700_000_000_000):
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms
