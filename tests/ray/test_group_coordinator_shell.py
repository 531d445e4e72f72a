"""The group coordinator's shell, driven on a bare instance with a real Partition (no Ray
cluster): its calls wait for the ISR on threads of their own, and whichever the test wakes
first, the offsets in memory are those of the log, in log order (issue 25, defects 2 and 9)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from raylog.actors.access import Guard
from raylog.actors.group_coordinator import GroupCoordinatorActor
from raylog.config import TopicConfig
from raylog.coordination.consumer_group import ConsumerGroup, ConsumerMember, group_record
from raylog.coordination.group import GroupCoordinator
from raylog.coordination.partition import Partition
from raylog.coordination.purgatory import Purgatory
from raylog.coordination.sessions import new_key
from raylog.errors import StorageError
from raylog.protocol import error_of
from raylog.storage.log import Log
from raylog.types import OffsetAndMetadata, TopicPartition
from tests.helpers import wait_until

A0, A1 = TopicPartition("a", 0), TopicPartition("a", 1)
WAIT_S = 30.0
FOLLOWER = 2


class ScriptedWakeups(threading.Condition):
    """The test's scheduler for the actor's waits: a waiting thread wakes only once the test
    chose it (:meth:`wake`); every other notify leaves it waiting, as a scheduler that woke
    the others first would."""

    def __init__(self, lock) -> None:
        super().__init__(lock)
        self.waiting: set[str] = set()
        self._chosen: set[str] = set()

    def wait(self, timeout: float | None = None) -> bool:
        me = threading.current_thread().name
        self.waiting.add(me)
        try:
            while me not in self._chosen:
                assert super().wait(WAIT_S), f"{me} was never woken"
            self._chosen.discard(me)
            return True
        finally:
            self.waiting.discard(me)

    def wake(self, name: str) -> None:
        with self:
            self._chosen.add(name)
            self.notify_all()


class Shell:
    """A bare GroupCoordinatorActor leading ``__consumer_offsets-0`` with a follower that
    fetches only when told (:meth:`replicate`)."""

    def __init__(self, tmp_path) -> None:
        config = TopicConfig.from_properties({"cleanup.policy": "compact"})
        self.partition = Partition("__consumer_offsets", 0, 1, Log.open(str(tmp_path / "offsets-0")), config)
        self.partition.become_leader(1, replicas=(1, FOLLOWER), isr=(1, FOLLOWER))
        actor = object.__new__(GroupCoordinatorActor)
        actor._lock = threading.RLock()
        self.wakeups = ScriptedWakeups(actor._lock)
        actor._condition = lambda: self.wakeups  # every parked call waits on the test's scheduler
        actor._purgatory = Purgatory()
        actor._tiering_pump = None  # (a compacted topic: never tiered)
        actor._guard = Guard(new_key())  # no authorizer: every call is allowed
        actor._maybe_propose_isr = lambda: None
        actor._initial_rebalance_delay_ms, actor._consumer_groups = 0, None
        actor._group_configs = (0, {})  # no group has configs of its own
        actor.partition, actor._state = self.partition, GroupCoordinator()
        actor._loaded(actor._state)
        self.actor = actor
        self.results: dict[str, object] = {}
        self._threads: dict[str, threading.Thread] = {}

    def start(self, name: str, call: Callable[[], object]) -> None:
        """Run ``call`` on a thread named ``name`` until it waits for the ISR."""

        def run() -> None:
            self.results[name] = call()

        self._threads[name] = thread = threading.Thread(target=run, name=name, daemon=True)
        thread.start()
        wait_until(lambda: name in self.wakeups.waiting or not thread.is_alive(), WAIT_S, message=f"{name} waits")

    def replicate(self) -> None:
        """The follower fetches everything: the HW reaches the log end."""
        with self.actor._lock:
            self.partition.read(self.partition.log.log_end_offset, 1 << 20, replica_id=FOLLOWER)

    def wake(self, name: str) -> object:
        """Let ``name`` go on; its answer."""
        self.wakeups.wake(name)
        self._threads[name].join(WAIT_S)
        assert not self._threads[name].is_alive(), f"{name} did not finish"
        return self.results[name]

    def replicated(self, name: str, call: Callable[[], object]) -> object:
        """Run ``call`` until it waits, replicate, let it go on: its answer."""
        self.start(name, call)
        self.replicate()
        return self.wake(name)

    def committed(self, group_id: str = "g") -> dict:
        response = self.actor.fetch_offsets(group_id)
        assert error_of(response) is None, error_of(response)
        return response.value

    def loaded(self) -> GroupCoordinator:
        """The groups a new leader would load from this log."""
        return self.actor._load(threading.Event())


def commit(shell: Shell, offsets: dict) -> Callable[[], object]:
    return lambda: shell.actor.commit_offsets("g", "", -1, None, offsets)


def txn_commit(shell: Shell, producer_epoch: int, offsets: dict) -> Callable[[], object]:
    return lambda: shell.actor.txn_commit_offsets("g", "", -1, None, 5, producer_epoch, offsets)


def marker(shell: Shell, producer_epoch: int, commit: bool) -> Callable[[], object]:
    return lambda: shell.actor.write_txn_marker(5, producer_epoch, commit, coordinator_epoch=1)


def test_two_commits_woken_newest_first_leave_the_newest_offset(tmp_path):
    """Defect 9: two commits of one partition wait for the ISR; one HW step covers both and
    the newer one's thread wakes first. The committed offset is still the newer one, as in the
    log (before: the older one's thread applied its offset last, moving it backwards)."""
    shell = Shell(tmp_path)
    shell.start("older", commit(shell, {A0: (10, "")}))
    shell.start("newer", commit(shell, {A0: (20, "")}))
    shell.replicate()
    assert error_of(shell.wake("newer")) is None
    assert error_of(shell.wake("older")) is None
    assert shell.committed() == {A0: OffsetAndMetadata(20, "")}
    assert shell.loaded().committed("g") == shell.committed()


def test_an_abort_marker_woken_before_its_transactions_offset_commit_drops_the_offsets(tmp_path):
    """Defect 2: a TxnOffsetCommit and the abort marker appended after it wait for the ISR;
    one HW step covers both and the marker's thread wakes first. The offsets are dropped, the
    group answers (not UNSTABLE_OFFSET_COMMIT), and the producer's next committed transaction
    commits only its own offsets (before: the aborted offsets were added after their marker,
    stayed pending, and the next commit marker of the producer committed them)."""
    shell = Shell(tmp_path)
    shell.start("txn-offsets", txn_commit(shell, 0, {A0: (10, "")}))
    shell.start("abort", marker(shell, 1, commit=False))
    shell.replicate()
    assert error_of(shell.wake("abort")) is None
    assert error_of(shell.wake("txn-offsets")) is None
    assert shell.committed() == {}
    assert error_of(shell.replicated("next-txn-offsets", txn_commit(shell, 1, {A1: (30, "")}))) is None
    assert error_of(shell.replicated("commit", marker(shell, 2, commit=True))) is None
    assert shell.committed() == {A1: OffsetAndMetadata(30, "")}
    assert shell.loaded().committed("g") == shell.committed()


def test_a_marker_retried_after_a_replication_error_still_releases_the_pending_offsets(tmp_path):
    """The offsets partition's replica answers a coordinator's marker and, once replicated,
    hands it to the group state (``_marker_written``). When the first attempt is written but
    its replication wait fails (a timeout; the ISR shrank), the coordinator sends the marker
    again; that retry is stale (written already) and answered with success once replicated,
    so the pending offsets must be released then."""
    shell = Shell(tmp_path)
    assert error_of(shell.replicated("txn-offsets", txn_commit(shell, 0, {A0: (10, "")}))) is None
    first = shell.actor.write_txn_marker(5, 1, True, coordinator_epoch=1, timeout_ms=0)
    assert error_of(first) is not None  # written, but not replicated in time
    shell.replicate()  # now the follower has it
    retry = shell.actor.write_txn_marker(5, 1, True, coordinator_epoch=1, timeout_ms=0)
    assert error_of(retry) is None and shell.partition.log.log_end_offset == 2  # stale: not written again
    assert shell.committed() == {A0: OffsetAndMetadata(10, "")}


def test_a_failed_read_while_ticking_is_caught_up_by_the_next_step(tmp_path, monkeypatch):
    """The tick replays the log too (a commit replicated after its caller gave up counts);
    when that read fails (a disk error) the tick goes on, and the next call applies what was
    left and answers."""
    shell = Shell(tmp_path)
    with shell.actor._lock:  # a commit whose caller timed out: appended, never applied by it
        shell.actor._append_records(shell.actor._state.prepare_commit("g", "", -1, None, {A0: OffsetAndMetadata(4)}, 0))
    shell.replicate()

    def failing_read(*args, **kwargs):
        raise StorageError("the disk failed")

    with monkeypatch.context() as patch:
        patch.setattr(shell.partition.log, "read", failing_read)
        with shell.actor._lock:
            shell.actor._tick(shell.actor._state)  # no exception: the tick thread goes on
        assert isinstance(error_of(shell.actor.fetch_offsets("g")), StorageError)
    assert shell.committed() == {A0: OffsetAndMetadata(4, "")}


def test_members_loaded_by_a_new_leader_get_their_groups_session_timeout():
    """A group's own consumer.session.timeout.ms (50 s, the broker's being 45 s) times the
    sessions of the members a coordinator loads from the log: the groups' configs are in its
    state before the log is replayed into it."""
    actor = object.__new__(GroupCoordinatorActor)
    actor._initial_rebalance_delay_ms, actor._consumer_groups = 0, None
    actor._group_configs = (1, {"g": {"consumer.session.timeout.ms": "50000"}})
    state = actor._new_state()
    _, value = group_record(ConsumerGroup("g", members={"m": ConsumerMember("m")}))
    state.consumer.load("g", value, 0)
    assert state.consumer.groups["g"].members["m"].session_deadline_ms == 50_000
