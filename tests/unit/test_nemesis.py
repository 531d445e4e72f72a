"""The nemesis's account of what a fault did, when the fault fails midway (no Ray: the
cluster and its brokers are stand-ins)."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from raylog.chaos import nemesis
from raylog.errors import RaylogError


class _Env:
    def __init__(self):
        self.done: list[tuple[str, int]] = []

    def kill_broker(self, broker: int) -> None:
        self.done.append(("kill", broker))

    def wipe_broker(self, broker: int) -> None:
        self.done.append(("wipe", broker))

    def start_broker(self, broker: int) -> None:
        self.done.append(("start", broker))


class _Nemesis(nemesis.Nemesis):
    """The replace-disk steps against stand-ins: partition 0 led by broker 1, followers 0
    and 2; the wait for the broker to come back fails, as on a loaded machine."""

    def __init__(self, comes_back: bool, comes_online: bool):
        self.env = _Env()
        self.cluster = SimpleNamespace(metadata=lambda refresh=False: SimpleNamespace(live={0, 2}))
        self.rng = random.Random(0)
        self.offline_ok, self._dead_brokers, self._stopped_pids = set(), set(), set()
        self._linger_until = None
        self._event = nemesis.FaultEvent("replace-disk")
        self.comes_back, self.online = comes_back, comes_online
        self.leader = 1

    def _leader(self):
        return 0, 1, object()

    def _followers(self, partition, leader):
        return {0: 100, 2: 102}

    def _pause(self, pid):
        pass

    def _resume(self, pid):
        pass

    def _hold(self, seconds):
        pass

    def _describe(self, partition):
        return SimpleNamespace(isr=(self.leader,), leader=-1)

    def _wait(self, predicate, what):
        if what == "the broker back" and not self.comes_back:
            raise RaylogError(f"{what}: not within 30.0 s")

    def _comes_online(self, partition):
        return self.online


def test_a_replace_disk_that_fails_after_the_wipe_lets_the_partition_stay_offline():
    """Seeds 458 and 473: the disk was wiped, the broker came back later than the nemesis
    waited, the fault was counted as failed, and the partition left offline (rightly: its
    only in-sync replica lost its data) failed the run as not healed."""
    chaos = _Nemesis(comes_back=False, comes_online=False)
    with pytest.raises(RaylogError, match="the broker back"):
        chaos._replace_disk()
    assert chaos.env.done == [("kill", 1), ("wipe", 1), ("start", 1)]
    assert chaos.offline_ok == {0}


@pytest.mark.parametrize("online", [True, False])
def test_a_replace_disk_that_completes_allows_offline_only_when_the_partition_stays_so(online):
    chaos = _Nemesis(comes_back=True, comes_online=online)
    target = chaos._replace_disk()
    assert chaos.offline_ok == (set() if online else {0})
    assert target.endswith("stays offline") != online


class _Clock:
    """``time.monotonic`` and ``time.sleep`` of a clock that only sleeping moves."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class _Scheduled(nemesis.Nemesis):
    """The schedule alone: each fault takes ``fault_s`` of the clock and is healed at once."""

    def __init__(self, clock: _Clock, max_faults: int, fault_s: float):
        self.rng = random.Random(1)
        self.kinds, self._lingering, self.overlap = ("kill-node",), [], 1
        self.max_faults, self.events, self._linger_until = max_faults, [], None
        self.clock, self.fault_s = clock, fault_s

    def _inject(self, event):
        self.clock.sleep(self.fault_s)

    def heal(self):
        pass


@pytest.mark.parametrize(("max_faults", "fault_s", "ends_at"), [(2, 4.0, None), (3, 15.0, 30.0), (5, 7.0, 30.0)])
def test_the_run_ends_soon_after_its_last_fault_once_every_fault_was_tried(monkeypatch, max_faults, fault_s, ends_at):
    """All faults tried well before the duration: the workload runs AFTER_FAULTS_S past the
    last heal, not to the end of the duration (the suite's fault runs waited for it). Faults
    that run past the duration: the run ends with it (or with the heal of the fault under way
    then), the faults not started skipped."""
    clock = _Clock()
    monkeypatch.setattr(nemesis, "time", clock)
    chaos = _Scheduled(clock, max_faults, fault_s)
    chaos.run(30.0)
    last_healed = chaos.events[-1].end_s
    if ends_at is None:
        assert len(chaos.events) == max_faults
        assert clock.now == pytest.approx(last_healed + nemesis.AFTER_FAULTS_S)
    else:
        assert len(chaos.events) < max_faults
        assert clock.now == pytest.approx(max(ends_at, last_healed))


def test_a_run_without_faults_lasts_its_duration(monkeypatch):
    """``--max-faults 0`` (a baseline run): every fault was tried, none ran; the workload runs
    its whole duration, not AFTER_FAULTS_S."""
    clock = _Clock()
    monkeypatch.setattr(nemesis, "time", clock)
    chaos = _Scheduled(clock, 0, 4.0)
    chaos.run(30.0)
    assert chaos.events == [] and clock.now == pytest.approx(30.0)
