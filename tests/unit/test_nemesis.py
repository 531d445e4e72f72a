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
