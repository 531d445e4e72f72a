"""A deterministic simulation of one partition replicated on brokers 0, 1 and 2, its
controller and a transaction coordinator, that runs raylog's own code over an in-memory
transport (no Ray, no threads, no sleeps).

What decides is the shipped code: every running replica process holds a real
:class:`Partition` over a real :class:`Log` in a temporary directory and, while it follows, a
:class:`FollowerFetcher`; the controller decides through :mod:`raylog.coordination.elections`.
The simulation plays only what the actors do around them, the I/O:

- Transport: every call is a message in flight, delivered after any number of other steps
  (calls are reordered), held up for a while (delayed past younger ones) or lost. A caller
  that stops waiting (a timeout) drops the answer, but its request may still reach its target
  later, as a Ray call does.
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
  with a new, empty disk (any replica, the last in-sync one too: the controller must notice),
  or fail one write of its aborted-transaction index. Its housekeeping rounds run the
  partition's own (:meth:`Partition.housekeep`: retention, the HW checkpoint, the producer
  snapshot).
- The controller: the shipped :class:`ReplicationControl` over a :class:`MetadataImage`, stepped
  with the events the actor steps it with (ISR proposals, restart reports, a follower's report
  of an unreachable leader, the brokers each round finds, elections); the simulation carries
  out its effects as :class:`ControllerActor` does: journal (here: keep) and replay the records,
  push the changed states to the replicas (pushes are calls too: delayed, reordered, lost, sent
  again with the same epochs), call the reported leader (here: it answers if it runs), answer.
- The transaction coordinator: the shipped :class:`TransactionCore` (the order of its journal
  writes, completions and answers) over a :class:`TransactionCoordinator` and a journal
  that outlives its process (its ``__transaction_state`` partition), answering
  InitProducerId, AddPartitionsToTxn, EndTxn and the leaders' verification questions
  (KIP-890), and completing prepared transactions with the shipped :class:`MarkerWriter`
  (markers are calls to the leader, which appends them and answers once the ISR has them);
  its tick aborts expired transactions and completes prepared ones. It crashes, and the next
  process loads the journal with a higher epoch.
- Clients: an idempotent producer whose batch is retried until answered (a retry may reach the
  leader that has it already), plain acks=all sends, 'latest' offset look-ups, and a
  transactional producer: transactions of a few batches, committed or aborted, some ended as a
  Kafka client at EndTxn v0-4 ends them (no epoch bump); a batch not acknowledged in time may
  make it abort and start anew (KIP-360), while that batch is still on its way.

The invariants (``check_invariants``): 1. one leader per leader epoch, epochs only grow; 2. a
leader's HW never goes down; 3. no acknowledged record lost; 4. replicas agree below the HW;
5. every ISR member holds the committed log; 6. the log's end told to clients never goes back;
7. the idempotent producer's records are written once; 8. read_committed shows no record of a
transaction aborted or not decided; 9. every acknowledged record of a committed transaction
below the LSO is shown (no torn transaction); 10. a leader's LSO never goes down and never
passes its HW; 11. no transaction is open at the leader that its coordinator does not have open
(none hangs).

``step()`` draws the next step from ``random.Random(seed)``; every kind of step is also a
method, so a test can play a scenario step by step. ``check_invariants()`` raises
``AssertionError`` naming the broken invariant; ``report()`` tells what happened.

Run many seeds: ``raylog bench simulate --schedules 100000`` (:func:`campaign`); the suite
runs seeded slices (``tests/unit/coordination/test_replication_simulation.py``,
``test_transaction_simulation.py``) and the scripted scenarios of past defects.
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

from raylog.chaos import group_simulation
from raylog.common import record_batch
from raylog.common.requests import LATEST_TIMESTAMP, PREFERRED_ELECTION, READ_COMMITTED
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
from raylog.coordination.transactions import TransactionCoordinator, TxnMetadata, TxnState
from raylog.coordination.txn_core import (
    AddPartitions,
    CompleteTransaction,
    EndTxn,
    InitProducerId,
    Journal,
    Journaled,
    MarkersWritten,
    Reply,
    Tick,
    TransactionCore,
)
from raylog.coordination.txn_markers import FindLeaders, MarkerWriter
from raylog.coordination.txn_verification import VerificationNeeded, verification_error
from raylog.errors import RaylogError, RequestTimedOutError, StorageError
from raylog.protocol import FetchRequest
from raylog.storage.log import Log
from raylog.types import PartitionInfo, TopicPartition

BROKERS = (0, 1, 2)
TOPIC = "sim"
CONTROLLER = -1  # the controller; also the address of the plain and idempotent producers
TXN_COORDINATOR = -2  # the transaction coordinator's process
TXN_CLIENT = -3  # the transactional producer
TRANSACTIONAL_ID = "tx"
TXN_TIMEOUT_MS = 5_000
#: Values of a transactional batch: b"t<producer id>.<epoch>.<n>" (the transaction it belongs to).
TXN_VALUE = b"t"
#: What a transaction marker's offset holds in the simulation's copy of a log.
MARKER = b"\x00marker"
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
#: The answer's kind to each call a leader may park.
ANSWERS = {"fetch": "fetch_answer", "produce": "produce_answer", "txn_marker": "marker_answer"}
#: The replicas' calls to the controller, and the kinds of their answers (None: not waited for).
CONTROLLER_CALLS = {"alter_isr": "isr_answer", "restarted": "restart_answer", "leader_unreachable": None}

#: Relative weights of the random step kinds.
STEP_WEIGHTS = {
    "deliver": 400,
    "lose": 4,
    "delay": 6,
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
    "txn": 60,
    "txn_tick": 10,
    "txn_time_out": 4,
    "txn_crash": 1,
    "index_fault": 2,
}
#: The faults, whose weights each run scales by one of FAULT_SCALES (drawn from its seed): some
#: runs see a fault every few hundred steps, others one every few dozen.
FAULTS = (
    "lose",
    "delay",
    "time_out",
    "crash",
    "machine_crash",
    "disk_replaced",
    "pause",
    "txn_time_out",
    "txn_crash",
    "index_fault",
)
FAULT_SCALES = (0.25, 0.5, 1, 2, 4)
#: Weights that replace some of STEP_WEIGHTS, by name (``raylog bench simulate --profile``):
#: "transactions" makes a schedule mostly transactions and the coordinator's faults.
PROFILES = {
    "default": {},
    "transactions": {"txn": 160, "txn_tick": 30, "txn_time_out": 12, "txn_crash": 3, "send": 6, "produce": 4},
    "groups": {},  # not this cluster's: :mod:`raylog.chaos.group_simulation`'s schedules
    "whole": {},  # this cluster with a consumer group's coordinator: :mod:`raylog.chaos.group_cluster`
}


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
    not_before_ms: int = 0  # a delayed message is not delivered before then


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
    #: Transactional batches whose coordinator is asked (KIP-890): the question's id -> (what, the produce).
    verifying: dict[int, tuple[VerificationNeeded, Message]] = field(default_factory=dict)
    index_fault: bool = False  # its next aborted-transaction index write fails (a disk error)
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
class Completion:
    """A prepared transaction's markers being written by the coordinator (the shipped
    MarkerWriter's rounds)."""

    writer: MarkerWriter
    round: dict[int, TopicPartition] = field(default_factory=dict)  # marker message id -> partition
    answers: dict = field(default_factory=dict)  # the round's answers so far
    backoff_until_ms: int = 0


@dataclass
class TxnCoordinatorProcess:
    """The transaction coordinator: the shipped state machine over a journal that outlives it
    (its ``__transaction_state`` partition, whose replication the brokers' part covers)."""

    incarnation: int
    epoch: int  # its partition's leader epoch, which markers carry
    core: TransactionCore
    completions: dict[str, Completion] = field(default_factory=dict)
    leaders: dict = field(default_factory=dict)  # the markers' leaders it knows


@dataclass
class TxnClient:
    """The transactional producer: an id, then transactions of a few batches, each committed or
    aborted; a batch not acknowledged in time may make it abort, then start anew (KIP-360)."""

    phase: str = "init"  # init, begin, send, end
    producer_id: int = -1
    producer_epoch: int = -1
    sequence: int = 0
    request: int | None = None  # the message id of the call it waits on
    batch: Batch | None = None
    txn: int = -1  # the transaction's number (in its values)
    batches: int = 0  # batches it is to have
    sent: int = 0  # batches acknowledged
    commit: bool = True
    bump: bool = True  # False: ended as a Kafka client at EndTxn v0-4 does (no epoch bump)
    then: str = "begin"  # the phase after the end (init: it aborted over a lost batch)
    next_value: int = 0


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
    txn_commits: int = 0  # transactions the producer was told committed
    txn_aborts: int = 0
    txn_inits: int = 0
    txn_crashes: int = 0
    marker_failures: int = 0
    verifications_refused: int = 0
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
        # Transactions: the coordinator, its journal, the transactional producer, and what the
        # coordinator decided (transaction number -> commit), which the invariants read against.
        self.tc = TxnCoordinatorProcess(0, 0, TransactionCore(TransactionCoordinator(), self._new_producer_id))
        self.txn_journal: list[tuple[bytes, bytes]] = []
        self.txn_client = TxnClient()
        self._producer_ids = itertools.count(1000)
        self._txn_numbers = itertools.count()
        self._txn_of: dict[tuple[int, int], int] = {}  # (producer id, epoch) -> the transaction it runs
        self.decisions: dict[int, bool] = {}
        self._leader_lso: dict[tuple[int, int, int], int] = {}
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
        elif kind == "delay" and self.in_flight:
            self.delay(rng.choice(sorted(self.in_flight)), rng.choice((100, 500, 2000, 5000)))
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
        elif kind == "txn":
            self.txn()
        elif kind == "txn_tick":
            self.txn_tick()
        elif kind == "txn_time_out":
            self.txn_time_out()
        elif kind == "txn_crash":
            self.txn_crash()
        elif kind == "index_fault":
            self.index_fault(rng.choice(BROKERS))
        else:
            self.more_step(kind)
        self.clock.advance(rng.randint(0, 30))
        self.steps += 1
        if self.info.leader == NO_LEADER:
            self.stats.offline_steps += 1

    def more_step(self, kind: str) -> None:
        """A step of a kind a subclass adds to the weights (none here; a kind above that cannot
        happen now lands here too and does nothing)."""

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
        if src == TXN_COORDINATOR:
            incarnation = self.tc.incarnation
        else:
            incarnation = self.replicas[src].incarnation if src >= 0 and self.replicas[src] else -1
        message = Message(next(self._ids), kind, src, dst, payload, incarnation, reply_to)
        self.in_flight[message.id] = message
        return message.id

    def deliverable(self) -> list[int]:
        """Messages that can be delivered now, oldest first (not those to a paused process)."""
        now = self.clock()
        return [
            m.id
            for m in self.in_flight.values()
            if m.not_before_ms <= now and (m.dst < 0 or self.replicas[m.dst] is None or not self.replicas[m.dst].paused)
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
    def delay(self, message_id: int, ms: int) -> None:
        """A message is held up on the way for ``ms`` (it arrives after younger ones: a request
        its caller stopped waiting for may arrive after the caller moved on)."""
        message = self.in_flight[message_id]
        message.not_before_ms = self.clock() + ms
        self._log(f"delayed {message.kind} {message.src}->{message.dst} by {ms} ms")

    @_step
    def deliver(self, message_id: int) -> None:
        """Deliver one message in flight (a paused target leaves it in flight)."""
        message = self.in_flight[message_id]
        if message.dst >= 0:
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
        if isinstance(op, DelayedRetry) and op.answer is None:
            self._on_produce(message)  # another batch came: the producer's batch is tried again
            return
        self.stats.failed_after_append += isinstance(op, DelayedProduce) and op.answer is not None
        answer = op.answer if isinstance(op, DelayedFetch) or op.answer is not None else first_offset
        self._answer(message, ANSWERS[message.kind], answer)

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
        """A replica's housekeeping round, as the actor's: a leader proposes an ISR change (or
        sends again one unanswered), then retention, flush policy, the HW checkpoint and the
        producer snapshot (a disk error skips the rest of the round)."""
        replica = self.running(broker)
        if replica is not None:
            self._replica_step(replica, Changed())
            try:
                replica.partition.housekeep()
            except RaylogError as exc:
                self._log(f"housekeeping {broker}: {exc}")

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
                self._answer(message, ANSWERS[message.kind], RaylogError("died"))

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
        batch.attempt = self._send("produce", CONTROLLER, leader, (data, "idempotent"))
        self.stats.produced += 1

    @_step
    def produce(self, count: int) -> None:
        """A plain (not idempotent) acks send of ``count`` new values, never retried."""
        leader = self.info.leader
        if leader == NO_LEADER or len(self.in_flight) >= MAX_IN_FLIGHT:
            return
        values = [f"v{self.next_value + i}".encode() for i in range(count)]
        self.next_value += count
        data = record_batch.build(values, now_ms=self.clock())
        message_id = self._send("produce", CONTROLLER, leader, (data, "plain"))
        self.sent_values[message_id] = values
        self.stats.produced += 1

    def _waiting(self, request_id: int | None) -> bool:
        """Whether the answer to ``request_id`` may still come: the request or its answer is in
        flight, or it waits in a leader's purgatory."""
        return request_id is not None and (
            request_id in self.in_flight
            or any(op.token[0].id == request_id for r in self.replicas.values() if r for op in r.purgatory)
            or any(m.id == request_id for r in self.replicas.values() if r for _, m in r.verifying.values())
            or any(m.id == request_id for waiting in self.tc.core.completing.values() for m in waiting)
            or any(m.reply_to == request_id for m in self.in_flight.values())
        )

    def _on_produce(self, message: Message) -> None:
        replica = self.replicas[message.dst]
        data, mode = message.payload
        if replica is None:
            self._answer(message, "produce_answer", RaylogError("the leader's process is gone"))
            return
        p = replica.partition
        # The producers send one batch at a time: the oldest they have not had acknowledged.
        first_unacked = record_batch.parse_header(memoryview(data).cast("B")).base_sequence if mode != "plain" else -1
        transactional_id = TRANSACTIONAL_ID if mode == "transactional" else None
        try:
            outcome = p.append_as_leader(
                data, self.acks, first_unacked, transactional_id, verify=transactional_id is not None
            )
        except VerificationNeeded as needed:  # ask the coordinator first (KIP-890), as the actor
            question = self._send("verify", message.dst, TXN_COORDINATOR, needed)
            replica.verifying[question] = (needed, message)
            return
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
        if message.dst == TXN_CLIENT:
            self._on_txn_answer(message)
            return
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

    # --- transactions: the producer ---------------------------------------------------------

    @_step
    def txn(self) -> None:
        """The transactional producer's next call, unless it waits for an answer."""
        c = self.txn_client
        if c.request is not None and self._waiting(c.request):
            return
        c.request = None
        if c.phase == "init":
            c.request = self._send("init_pid", TXN_CLIENT, TXN_COORDINATOR, (TRANSACTIONAL_ID, TXN_TIMEOUT_MS))
        elif c.phase == "begin":
            ids = (TRANSACTIONAL_ID, c.producer_id, c.producer_epoch)
            c.request = self._send("add_partitions", TXN_CLIENT, TXN_COORDINATOR, ids)
        elif c.phase == "end":
            ids = (TRANSACTIONAL_ID, c.producer_id, c.producer_epoch, c.commit, c.bump)
            c.request = self._send("end_txn", TXN_CLIENT, TXN_COORDINATOR, ids)
        elif self.info.leader != NO_LEADER and len(self.in_flight) < MAX_IN_FLIGHT:
            if c.batch is None:
                count = self.rng.randint(1, 3)
                values = [TXN_VALUE + f"{c.txn}.{c.next_value + i}".encode() for i in range(count)]
                c.next_value += count
                c.batch = Batch(c.sequence, values)
            data = record_batch.build(
                c.batch.values,
                producer_id=c.producer_id,
                producer_epoch=c.producer_epoch,
                base_sequence=c.batch.sequence,
                transactional=True,
                now_ms=self.clock(),
            )
            c.request = c.batch.attempt = self._send("produce", TXN_CLIENT, self.info.leader, (data, "transactional"))

    def _on_txn_answer(self, message: Message) -> None:
        """The answer to the producer's call it waits on (others: it stopped waiting)."""
        c = self.txn_client
        _, answer = message.payload
        if message.reply_to != c.request:
            return
        c.request = None
        if isinstance(answer, RaylogError):
            self._log(f"  txn {c.phase} failed: {answer!r}")
            if not answer.retriable and not (c.phase == "send" and type(answer) is RaylogError):
                # Fenced, or the transaction is gone: a new producer instance (KIP-360).
                c.phase, c.batch = "init", None
            return
        if c.phase == "init":
            c.producer_id, c.producer_epoch = answer
            c.sequence, c.phase = 0, "begin"
            self.stats.txn_inits += 1
            self._begin_txn()
        elif c.phase == "begin":
            c.phase, c.sent, c.batches = "send", 0, self.rng.randint(1, 3)
            c.commit, c.bump, c.then = self.rng.random() < 0.7, self.rng.random() < 0.7, "begin"
        elif c.phase == "send":
            records = list(zip(range(answer, answer + len(c.batch.values)), c.batch.values, strict=True))
            self.acknowledged.update(records)
            self._log(f"  transaction {c.txn}: acknowledged offsets {records[0][0]}..{records[-1][0]}")
            c.sequence += len(c.batch.values)
            c.batch, c.sent = None, c.sent + 1
            if c.sent >= c.batches:
                c.phase = "end"
        else:
            if c.commit:
                self.stats.txn_commits += 1
            else:
                self.stats.txn_aborts += 1
            self._log(f"  transaction {c.txn} {'committed' if c.commit else 'aborted'}")
            if answer != (c.producer_id, c.producer_epoch):
                c.sequence = 0
            c.producer_id, c.producer_epoch = answer
            c.phase = c.then
            if c.phase == "begin":
                self._begin_txn()

    def _begin_txn(self) -> None:
        """The producer's next transaction gets its number (in its values), known by the
        (producer id, epoch) it runs with until the coordinator decides it."""
        c = self.txn_client
        c.txn = next(self._txn_numbers)
        self._txn_of[(c.producer_id, c.producer_epoch)] = c.txn

    # --- transactions: the coordinator ------------------------------------------------------

    def _on_init_pid(self, message: Message) -> None:
        tid, timeout_ms = message.payload
        self._tc_step(InitProducerId(message, tid, timeout_ms, self.clock()))

    def _on_add_partitions(self, message: Message) -> None:
        tid, producer_id, producer_epoch = message.payload
        partitions = (TopicPartition(TOPIC, 0),)
        self._tc_step(AddPartitions(message, tid, producer_id, producer_epoch, partitions, self.clock()))

    def _on_end_txn(self, message: Message) -> None:
        tid, producer_id, producer_epoch, commit, bump = message.payload
        self._tc_step(EndTxn(message, tid, producer_id, producer_epoch, commit, bump, self.clock()))

    def _on_verify(self, message: Message) -> None:
        needed: VerificationNeeded = message.payload
        try:
            self.tc.core.state.verify(
                needed.transactional_id, needed.producer_id, needed.producer_epoch, TopicPartition(TOPIC, 0)
            )
        except RaylogError as exc:
            self._answer(message, "verify_answer", exc)
            return
        self._answer(message, "verify_answer", None)

    def _new_producer_id(self) -> int:
        return next(self._producer_ids)

    def _tc_step(self, event: Any) -> None:
        """Step the coordinator's shipped core and carry out its effects, as the actor's
        ``_run_txn``: journal a move (the journal is its replicated partition, which never
        fails here) and step the outcome, answer a request, start a completion."""
        effects = self.tc.core.step(event)
        while effects:
            effect = effects.pop(0)
            if isinstance(effect, Journal):
                self.txn_journal.append(effect.step.record)
                self._decided(effect.step.metadata)
                effects[:0] = self.tc.core.step(Journaled(effect.step))
            elif isinstance(effect, Reply):
                self._answer(effect.request, "txn_answer", effect.answer)
            elif isinstance(effect, CompleteTransaction):
                tid = effect.metadata.transactional_id
                if tid not in self.tc.completions:
                    self.tc.completions[tid] = Completion(MarkerWriter(effect.metadata, self.tc.leaders, self.tc.epoch))
                self._tc_drive(tid)

    def _decided(self, m: TxnMetadata) -> None:
        """What the coordinator decided, for the invariants: a journaled Prepare decides the
        transaction the producer ran with (producer id, epoch before the bump)."""
        if m.state.prepared:
            ran_with = (m.marker_producer_id, m.marker_epoch - 1 if m.bumps_epoch else m.marker_epoch)
            txn = self._txn_of.get(ran_with)
            if txn is not None:
                self.decisions.setdefault(txn, m.committing)
            self._log(f"coordinator: transaction {txn} prepared to {'commit' if m.committing else 'abort'}")

    def _tc_drive(self, tid: str) -> None:
        """A completion's next rounds (MarkerWriter's: leaders from the controller's metadata, one
        marker message per partition), then the core is told the markers are written."""
        tc = self.tc
        completion = tc.completions.get(tid)
        while completion is not None and not completion.round and self.clock() >= completion.backoff_until_ms:
            request = completion.writer.next_request()
            if request is None:
                del tc.completions[tid]
                self._tc_step(MarkersWritten(tid, self.clock()))
                return
            if isinstance(request, FindLeaders):
                leader = None if self.info.leader == NO_LEADER else self.info.leader
                then = completion.writer.on_leaders({"topics": {TOPIC: None}, "leaders": {(TOPIC, 0): leader}})
            else:
                for tp, broker in request.leaders.items():
                    fields = (request.producer_id, request.producer_epoch, request.commit)
                    marker = (*fields, request.coordinator_epoch, request.bumps_epoch)
                    completion.round[self._send("txn_marker", TXN_COORDINATOR, broker, marker)] = tp
                if completion.round:
                    return  # the round's answers come as messages
                then = completion.writer.on_answers({})
            if then is Next.BACKOFF:
                completion.backoff_until_ms = self.clock() + BACKOFF_MS

    def _on_marker_answer(self, message: Message) -> None:
        incarnation, answer = message.payload
        if incarnation != self.tc.incarnation:
            return  # for a coordinator process that is gone
        for tid, completion in self.tc.completions.items():
            if message.reply_to in completion.round:
                completion.answers[completion.round.pop(message.reply_to)] = answer
                if not completion.round:
                    self._tc_round_done(tid)
                return

    def _tc_round_done(self, tid: str) -> None:
        completion = self.tc.completions[tid]
        answers, completion.answers = completion.answers, {}
        self.stats.marker_failures += sum(a is not None for a in answers.values())
        if completion.writer.on_answers(answers) is Next.BACKOFF:
            completion.backoff_until_ms = self.clock() + BACKOFF_MS
        self._tc_drive(tid)

    @_step
    def txn_tick(self) -> None:
        """The coordinator's tick: the core completes prepared transactions again and aborts
        those past their timeout; completions past their pause go on."""
        self._tc_step(Tick(self.clock()))
        for tid in list(self.tc.completions):
            self._tc_drive(tid)

    @_step
    def txn_time_out(self) -> None:
        """The producer stops waiting for its call (a batch not acknowledged in time may make it
        abort the transaction, and then start anew), or the coordinator for a round of
        markers; the calls stay in flight."""
        c = self.txn_client
        rounds = [tid for tid, completion in self.tc.completions.items() if completion.round]
        if rounds and self.rng.random() < 0.5:
            completion = self.tc.completions[rounds[0]]
            late = RequestTimedOutError("the marker was not answered in time")
            completion.answers.update(dict.fromkeys(completion.round.values(), late))
            completion.round.clear()
            self._tc_round_done(rounds[0])
        elif c.request is not None:
            self._log(f"transactional producer: stops waiting in {c.phase}")
            if c.request in self.in_flight:  # what made it late: the call is held up on the way
                self.in_flight[c.request].not_before_ms = self.clock() + self.rng.choice((500, 2000))
            c.request = None
            if c.phase == "send" and self.rng.random() < 0.5:
                c.phase, c.commit, c.then, c.batch = "end", False, "init", None

    @_step
    def txn_crash(self) -> None:
        """The coordinator's process dies; the next one (its partition's next leader: epoch + 1)
        loads the journal and ticks at once (as the actor does once loaded): what was prepared
        completes."""
        state = TransactionCoordinator()
        state.load(self.txn_journal)
        old = self.tc
        self.tc = TxnCoordinatorProcess(
            old.incarnation + 1, old.epoch + 1, TransactionCore(state, self._new_producer_id)
        )
        self.stats.txn_crashes += 1
        self._log(f"transaction coordinator crashed: epoch {self.tc.epoch}")
        self._tc_step(Tick(self.clock()))

    # --- transactions: the partition's side ---------------------------------------------------

    def _on_verify_answer(self, message: Message) -> None:
        replica, answer = self._answered(message)
        if replica is None or message.reply_to not in replica.verifying:
            return
        needed, produce = replica.verifying.pop(message.reply_to)
        error = None if answer is None else verification_error(answer)
        replica.partition.verification_answered(needed, error is None)
        if error is None:
            self._on_produce(produce)
        else:
            self.stats.verifications_refused += 1
            self._answer(produce, "produce_answer", error)

    @_step
    def index_fault(self, broker: int) -> None:
        """``broker``'s next write of its aborted-transaction index fails (the disk errs once):
        the abort is indexed in memory only until a later write gets it to disk."""
        replica = self.running(broker)
        if replica is None or replica.index_fault:
            return
        replica.index_fault = True
        index = replica.partition.txn_index

        def flush() -> None:
            del index.flush  # one write fails; the next is the index's own
            replica.index_fault = False
            self._log(f"broker {broker}: the aborted-transaction index was not written")
            raise StorageError(f"broker {broker}: injected: the aborted-transaction index was not written")

        index.flush = flush

    def _on_txn_marker(self, message: Message) -> None:
        replica = self.replicas[message.dst]
        if replica is None:
            self._answer(message, "marker_answer", RaylogError("the leader's process is gone"))
            return
        p = replica.partition
        try:
            info = p.append_marker(*message.payload)
        except RaylogError as exc:
            self._answer(message, "marker_answer", exc)
            return
        if info is not None:
            self._replica_step(replica, Changed())
        end = p.log.log_end_offset if info is None else info.last_offset + 1
        deadline = self.clock() + PRODUCE_TIMEOUT_MS
        self._delay(replica, DelayedProduce(end, p.leader_epoch, deadline, "markers", token=(message, None)))

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
        self._check_stable_offsets(running)
        self._check_latest()
        # The checks of log contents hold or fail on what this signature covers: skip them when it
        # did not change since they last passed (most steps change nothing they read).
        signature = (
            self.info,
            len(self.acknowledged),
            len(self.decisions),
            len(self.txn_journal),
            *(self._replica_signature(b) for b in running),
        )
        if signature == self._checked and not reread:
            return
        if self.replicas.get(self.info.leader) is not None:
            self._check_acknowledged()
            self._check_no_duplicates()
            self._check_agreement(running)
            self._check_isr(running)
            self._check_transactions()
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

    def _check_stable_offsets(self, running: list[int]) -> None:
        """10. A leader's LSO never goes down while it leads one epoch, and is never past its HW."""
        for broker in running:
            replica = self.replicas[broker]
            part = replica.partition
            if part.is_leader:
                lso = part.last_stable_offset
                assert lso <= part.high_watermark, f"10. leader {broker}'s LSO {lso} is past its HW"
                key = (broker, replica.incarnation, part.leader_epoch)
                before = self._leader_lso.get(key, -1)
                assert lso >= before, f"10. leader {broker}'s LSO went down from {before} to {lso} in epoch {key[2]}"
                self._leader_lso[key] = lso

    def _check_transactions(self) -> None:
        """On the controller's leader: 8. read_committed shows no record of a transaction its
        coordinator aborted or has not decided; 9. every acknowledged record of a committed
        transaction below the LSO is shown (no transaction read torn); 11. every transaction
        open there is one the coordinator has open (none hangs, pinning the LSO for good)."""
        leader = self.info.leader
        p = self.replicas[leader].partition
        if not p.is_leader or p.leader_epoch != self.info.leader_epoch:
            return  # it has not taken the role yet
        shown = read_committed(p)
        for offset, value in shown.items():
            if value.startswith(TXN_VALUE):
                txn = _txn_of(value)
                decided = {True: "committed", False: "aborted", None: "not decided"}[self.decisions.get(txn)]
                assert decided == "committed", (
                    f"8. read_committed at leader {leader} shows offset {offset} of transaction {txn}, {decided}"
                )
        lso = p.last_stable_offset
        for offset, value in self.acknowledged.items():
            if offset < lso and value.startswith(TXN_VALUE) and self.decisions.get(_txn_of(value)):
                assert shown.get(offset) == value, (
                    f"9. offset {offset} of committed transaction {_txn_of(value)} is below leader {leader}'s "
                    f"LSO {lso}, but read_committed does not show it"
                )
        current = self.tc.core.state.describe(TRANSACTIONAL_ID)
        running = None  # the (producer id, epoch) of the transaction the coordinator has open
        if current is not None and current.state is TxnState.ONGOING:
            running = (current.producer_id, current.producer_epoch)
        elif current is not None and current.state.prepared:
            running = (current.marker_producer_id, current.marker_epoch - current.bumps_epoch)
        for producer in p.producers.describe():
            if producer.current_transaction_start_offset < 0:
                continue
            assert (producer.producer_id, producer.producer_epoch) == running, (
                f"11. a transaction of producer id {producer.producer_id} epoch {producer.producer_epoch} is open "
                f"at leader {leader} from offset {producer.current_transaction_start_offset}, which its coordinator "
                f"does not have open ({current})"
            )

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
    """The values of ``log`` from offset ``start`` (a batch boundary or inside a batch) to its
    end, :data:`MARKER` at a transaction marker's offset."""
    out: list[bytes] = []
    offset = start
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        markers, end = set(), offset
        for _, header in record_batch.iter_headers(memoryview(data).cast("B")):
            end = max(end, header.next_offset)
            if header.attributes & record_batch.CONTROL:
                markers.update(range(header.base_offset, header.next_offset))
        table = record_batch.decode_table(data, min_offset=offset)
        values = dict(zip(table.column("offset").to_pylist(), table.column("value").to_pylist(), strict=True))
        assert end > offset and all(o in values or o in markers for o in range(offset, end)), (
            f"offsets not contiguous at {offset}"
        )
        out.extend(values.get(o, MARKER) for o in range(offset, end))
        offset = end
    return out


def read_committed(p: Partition) -> dict[int, bytes]:
    """What a read_committed consumer reads from leader ``p``, from its log start to its LSO
    (offset -> value), one fetch at a time, aborted transactions dropped as the consumer drops them."""
    shown: dict[int, bytes] = {}
    offset = p.log.log_start_offset
    while offset < p.last_stable_offset:
        result = p.read(offset, 1 << 20, isolation_level=READ_COMMITTED)
        if not result.data:
            break
        table = record_batch.decode_table(result.data, min_offset=offset, aborted=result.aborted)
        shown.update(zip(table.column("offset").to_pylist(), table.column("value").to_pylist(), strict=True))
        offset = max(h.next_offset for _, h in record_batch.iter_headers(memoryview(result.data).cast("B")))
    return shown


def _txn_of(value: bytes) -> int:
    """The transaction number a transactional value carries (b"t<number>.<n>")."""
    return int(value[len(TXN_VALUE) :].split(b".")[0])


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


def _run_seeds(args: tuple[int, int, int, str]) -> tuple[int, list[str], dict[str, int]]:
    """Run seeds ``range(start, stop)`` with a profile's weights; returns (schedules run,
    failures, summed stats)."""
    start, stop, steps, profile = args
    _no_fsync()
    logging.disable(logging.CRITICAL)  # the replicas log every failed fetch: the trace tells more
    failures, totals = [], {}
    root = tempfile.mkdtemp(prefix="raylog-sim-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    try:
        for seed in range(start, stop):
            directory = os.path.join(root, str(seed))
            try:
                if profile == "groups":
                    stats = group_simulation.run(directory, seed, steps=steps).group_stats
                elif profile == "whole":
                    from raylog.chaos import group_cluster  # (it builds on this module)

                    cluster = group_cluster.run(directory, seed, steps)
                    stats = {**vars(cluster.stats), **cluster.group_stats}
                else:
                    stats = vars(run(directory, seed, steps, weights=PROFILES[profile]).stats)
                for name, value in stats.items():
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
    profile: str
    workers: int
    elapsed_s: float
    failures: list[str]  # each: the seed, the step, the broken invariant and the trace
    totals: dict[str, int]  # the runs' Stats, summed

    def summary(self) -> str:
        last = self.first_seed + self.schedules - 1
        return (
            f"{self.schedules} schedules x {self.steps} steps (seeds {self.first_seed}..{last}, "
            f"profile {self.profile}) in {self.elapsed_s:.1f} s on {self.workers} workers: "
            f"{len(self.failures)} failed\n"
            "totals: " + ", ".join(f"{k} {v}" for k, v in sorted(self.totals.items()))
        )


def campaign(
    schedules: int, first_seed: int = 0, steps: int = 200, workers: int | None = None, profile: str = "default"
) -> CampaignReport:
    """Run seeds ``first_seed .. first_seed + schedules - 1``, ``steps`` random steps each with
    the weights of ``profile`` (:data:`PROFILES`), checking every invariant after every step, on
    ``workers`` processes (default: one per core)."""
    workers = workers or os.cpu_count() or 1
    started = time.monotonic()
    chunk = 50
    end = first_seed + schedules
    jobs = [(s, min(s + chunk, end), steps, profile) for s in range(first_seed, end, chunk)]
    done, failures, totals = 0, [], {}
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        for count, failed, stats in pool.imap_unordered(_run_seeds, jobs):
            done += count
            failures += failed
            for name, value in stats.items():
                totals[name] = totals.get(name, 0) + value
    return CampaignReport(done, first_seed, steps, profile, workers, time.monotonic() - started, failures, totals)


class ManualClock:
    """A millisecond clock that moves only when told to."""

    def __init__(self, now_ms: int = 1_700_000_000_000):
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms
