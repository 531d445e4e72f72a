"""The transaction coordinator actor's shell, driven on an instance in this process (its
replica part a real leading Partition, nothing else of the replica actor running) against
stand-in Ray actors for the controller and for a partition's leader, each holding its
answers until released: what the coordinator answers while a peer does not."""

from __future__ import annotations

import concurrent.futures
import threading

import pytest
import ray

from raylog.actors import transaction_coordinator
from raylog.actors.access import Guard
from raylog.actors.replica import PartitionReplicaActor
from raylog.actors.transaction_coordinator import TransactionCoordinatorActor
from raylog.config import TopicConfig
from raylog.coordination.partition import Partition
from raylog.coordination.purgatory import Purgatory
from raylog.coordination.sessions import new_key
from raylog.coordination.transactions import TransactionCoordinator
from raylog.errors import ConcurrentTransactionsError
from raylog.protocol import ProduceResponse, error_of
from raylog.storage.log import Log
from tests.helpers import wait_until

# An actor class run in this process sets up its logging: put the loggers back after.
pytestmark = pytest.mark.usefixtures("restored_raylog_logging")

#: A bound on what any step may take (not a measure).
WAIT_S = 60.0
TOPIC = "out"
FIRST_PRODUCER_ID = 1000


class Gate:
    """Held answers: calls wait until the gate opens (it starts closed)."""

    def __init__(self) -> None:
        self._open = threading.Event()
        self._lock = threading.Lock()
        self._calls = 0

    def _pass(self) -> None:
        with self._lock:
            self._calls += 1
        self._open.wait()

    def open(self) -> None:
        self._open.set()

    def calls(self) -> int:
        with self._lock:
            return self._calls


class StubLeader(Gate):
    """A partition's leader whose markers are written once the gate opens."""

    def write_txn_marker(self, *args, **kwargs) -> ProduceResponse:
        self._pass()
        return ProduceResponse(base_offset=0)


class StubController(Gate):
    """The controller: producer ids once the gate opens; ``leader`` leads every partition."""

    def __init__(self, leader) -> None:
        super().__init__()
        self._leader = leader
        self._next_id = FIRST_PRODUCER_ID

    def allocate_producer_ids(self, count: int) -> list[int]:
        self._pass()
        with self._lock:
            self._next_id += count
            return list(range(self._next_id - count, self._next_id))

    def metadata(self, topics: list[str], session: str | None = None) -> dict:
        return {"topics": dict.fromkeys(topics), "leaders": {(t, 0): self._leader for t in topics}}


def _stand_in(cls):
    return ray.remote(cls).options(num_cpus=0, max_concurrency=64)


@pytest.fixture
def peers(cluster):
    """``(controller, leader)``: stand-ins, both closed."""
    leader = _stand_in(StubLeader).remote()
    controller = _stand_in(StubController).remote(leader)
    yield controller, leader
    for actor in (controller, leader):
        ray.kill(actor)


@pytest.fixture
def coordinator(peers, tmp_path, monkeypatch):
    """A TransactionCoordinatorActor built by its own constructors, the replica's replaced
    by a real Partition leading ``__transaction_state``-0 alone (appends are replicated at
    once), its state loaded (empty), its peers the stand-ins."""
    controller, _ = peers
    part = Partition("__transaction_state", 0, 1, Log.open(str(tmp_path / "txn-0")), TopicConfig.from_properties({}))
    part.become_leader(1, replicas=(1,), isr=(1,))

    def replica_init(self, *args, **kwargs):
        self._guard = Guard(new_key())  # no authorizer: every call is allowed
        self._lock = threading.RLock()
        self._purgatory = Purgatory()
        self._stopped = threading.Event()
        self._tiering_pump = None  # (never tiered)
        self.partition = part

    monkeypatch.setattr(PartitionReplicaActor, "__init__", replica_init)
    actor = TransactionCoordinatorActor()
    actor._maybe_propose_isr = lambda: None
    actor._controller = lambda: controller
    with actor._lock:
        actor._coordinator_epoch, actor._coordinator_stop = part.leader_epoch, threading.Event()
        actor._state = TransactionCoordinator()
        actor._loaded(actor._state)
    yield actor
    with actor._lock:
        actor._unload()
    part.log.close()


def test_end_txn_answers_concurrent_transactions_while_its_markers_are_still_being_written(
    coordinator, peers, monkeypatch
):
    """EndTxn waits a while for the markers; past that it answers CONCURRENT_TRANSACTIONS
    (the completion goes on, the client asks again: Kafka's answer for a transaction still
    completing), not REQUEST_TIMED_OUT (which Kafka clients take as fatal); once the
    markers are written, the retry is answered with success."""
    controller, leader = peers
    ray.get(controller.open.remote())
    monkeypatch.setattr(transaction_coordinator, "END_TXN_WAIT_S", 0.2)
    started = coordinator.init_producer_id("t", 60_000)
    assert error_of(started) is None
    pid, epoch = started.producer_id, started.producer_epoch
    assert error_of(coordinator.add_partitions("t", pid, epoch, [(TOPIC, 0)])) is None
    answer = coordinator.end_txn("t", pid, epoch, True, bump_epoch=False)  # the leader holds the marker
    assert isinstance(error_of(answer), ConcurrentTransactionsError), error_of(answer)
    ray.get(leader.open.remote())
    wait_until(
        lambda: error_of(coordinator.end_txn("t", pid, epoch, True, bump_epoch=False)) is None,
        timeout_s=WAIT_S,
        message="the retried EndTxn answered once the markers are written",
    )
    assert coordinator.describe_transactions(["t"]).value[0]["state"] == "CompleteCommit"


@pytest.fixture
def held_peer_calls(monkeypatch):
    """Calls to a stand-in that holds them wait for it, not for a timeout."""
    monkeypatch.setattr(transaction_coordinator, "PEER_CALL_TIMEOUT_S", 10 * WAIT_S)


def test_a_controller_that_does_not_answer_holds_no_other_transactional_id(held_peer_calls, coordinator, peers):
    """A new transactional id needs a producer id from the controller. While the controller
    does not answer, the coordinator's other requests (here DescribeTransactions, which the
    listener's KIP-360 check sends) are served: the coordinator never holds its lock across
    a call to a peer. Once the controller answers, the new id gets its producer id."""
    controller, _ = peers
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        new = pool.submit(coordinator.init_producer_id, "new", 60_000)
        try:
            wait_until(lambda: ray.get(controller.calls.remote()) >= 1, timeout_s=WAIT_S, message="a call held")
            other = pool.submit(coordinator.describe_transactions, ["other"])
            assert error_of(other.result(timeout=WAIT_S)) is None  # (before: held until the controller answered)
            assert not new.done()
        finally:
            ray.get(controller.open.remote())
        answer = new.result(timeout=WAIT_S)
    assert error_of(answer) is None
    assert answer.producer_id >= FIRST_PRODUCER_ID and answer.producer_epoch == 0
