"""The soak's transactional workers (raylog.chaos.workload.TransactionalLoop) without a
cluster: stopped, a worker ends after the transaction under way, unless none of its
transactions committed yet: then it goes on until one does, for a bounded while, so that a
run whose faults kept every commit from completing under load still shows whether
transactions complete once they heal."""

from __future__ import annotations

import random
import threading

from raylog.chaos import workload
from raylog.chaos.history import ABORTED, COMMITTED, UNKNOWN, FinalRead, Recorder, Txn
from raylog.chaos.workload import TransactionalLoop


class Scripted(TransactionalLoop):
    """Each transaction ends with the next of ``outcomes`` (then ``then``), sends one record,
    and waits for a ``release`` before it ends (for none once ``free``): the test stops the
    worker meanwhile."""

    def __init__(self, outcomes: list[str], then: str):
        self.outcomes, self.then = list(outcomes), then
        self.began = threading.Semaphore(0)
        self.release = threading.Semaphore(0)
        self.free = threading.Event()
        self.inits = 0
        super().__init__("txn0", "t", 1, Recorder(), random.Random(0), "tid", rate_per_s=1_000.0)

    def _initialised(self):
        self.inits += 1
        return object()

    def _close(self, producer) -> None:
        pass

    def _transaction(self, rng: random.Random) -> int:
        txn = self._next_txn()
        start = self.recorder.now()
        self.began.release()
        while not self.free.is_set() and not self.release.acquire(timeout=0.01):
            pass
        outcome = self.outcomes.pop(0) if self.outcomes else self.then
        self._ended(txn, outcome, start, self.recorder.now())
        if outcome == UNKNOWN:
            self._abandon()
        return 1


def ended(worker: Scripted) -> list[str]:
    """The outcomes recorded, in order."""
    history = worker.recorder.history(FinalRead({}, {}, {}))
    return [op.outcome for op in history.ops if isinstance(op, Txn)]


def stopped_mid_transaction(worker: Scripted, before: int = 0) -> None:
    """Let ``before`` transactions end, then stop the worker while the next is under way (and
    let every transaction after the stop end at once)."""
    worker.start()
    for _ in range(before):
        assert worker.began.acquire(timeout=10)
        worker.release.release()
    assert worker.began.acquire(timeout=10)
    stopper = threading.Thread(target=worker.stop)
    stopper.start()
    while not worker._stop.is_set():
        stopper.join(0.01)
    worker.free.set()
    stopper.join(30)
    assert not stopper.is_alive()


def test_a_worker_with_a_commit_stops_after_the_transaction_under_way():
    worker = Scripted([COMMITTED], then=ABORTED)
    stopped_mid_transaction(worker, before=1)
    assert ended(worker) == [COMMITTED, ABORTED]


def test_a_worker_without_a_commit_goes_on_until_one_commits():
    """Its transactions ended unknown (the faults kept them from completing) or aborted: once
    stopped, it runs more, settling the unknown ones with an init each, until one commits."""
    worker = Scripted([UNKNOWN, ABORTED, UNKNOWN, COMMITTED], then=COMMITTED)
    stopped_mid_transaction(worker)
    assert ended(worker) == [UNKNOWN, ABORTED, UNKNOWN, COMMITTED]
    assert worker.inits == 3  # its first, and one after each unknown end


def test_a_worker_goes_on_for_a_first_commit_only_for_a_bounded_while(monkeypatch):
    monkeypatch.setattr(workload, "TXN_INIT_TIMEOUT_S", 0.3)
    worker = Scripted([], then=ABORTED)
    stopped_mid_transaction(worker)
    outcomes = ended(worker)
    assert outcomes and set(outcomes) == {ABORTED}


def test_a_worker_stopped_after_an_unknown_end_settles_it_with_an_init():
    worker = Scripted([COMMITTED, UNKNOWN], then=UNKNOWN)
    stopped_mid_transaction(worker, before=1)
    assert ended(worker) == [COMMITTED, UNKNOWN]
    assert worker.inits == 2  # its first, and the one that settles the unknown end
