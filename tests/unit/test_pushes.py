"""The controller's pushes reach replicas that were unreachable or slow for a while (no Ray
runtime: a fake actor method stands for the replica)."""

from __future__ import annotations

import asyncio

from ray.exceptions import RayActorError

from raylog.actors.pushes import Pushes

TIMEOUT_S = 0.05
RETRY_S = 0.01


class Replica:
    """A replica actor's method whose first ``hang`` calls never answer and next ``fail``
    calls find the actor unavailable; it keeps the arguments of every call that answered."""

    def __init__(self, hang: int = 0, fail: int = 0):
        self.hang, self.fail = hang, fail
        self.calls = 0
        self.received: list[tuple] = []

    def remote(self, *args):
        self.calls += 1
        return self._answer(args)

    async def _answer(self, args: tuple) -> None:
        if self.hang:
            self.hang -= 1
            await asyncio.sleep(3600)
        if self.fail:
            self.fail -= 1
            raise RayActorError()
        self.received.append(args)


def run(scenario) -> None:
    async def main() -> None:
        tasks: set[asyncio.Task] = set()
        pushes = Pushes(lambda coroutine: tasks.add(asyncio.ensure_future(coroutine)), TIMEOUT_S, RETRY_S)
        await scenario(pushes)
        await asyncio.wait_for(asyncio.gather(*tasks), 5)

    asyncio.run(main())


def test_a_push_that_timed_out_is_made_again_until_the_replica_answers():
    """A paused replica's call times out (it may or may not have run): the push is made
    again and arrives once the replica answers."""
    replica = Replica(hang=3)

    async def scenario(pushes: Pushes) -> None:
        pushes.push("p0-b1", lambda: True, replica, "state 7")

    run(scenario)
    assert replica.received == [("state 7",)] and replica.calls == 4


def test_an_unreachable_replica_gets_the_push_however_long_it_is_away():
    """An actor that Ray is restarting, or whose node is cut off, for longer than a few
    retries still gets the state once it is back."""
    replica = Replica(fail=40)

    async def scenario(pushes: Pushes) -> None:
        pushes.push("p0-b1", lambda: True, replica, "state 7")

    run(scenario)
    assert replica.received == [("state 7",)] and replica.calls == 41


def test_a_newer_push_replaces_the_one_not_delivered():
    """Only the newest state of a replica is made again; another replica's push is its own."""
    slow, other = Replica(hang=2), Replica(hang=1)

    async def scenario(pushes: Pushes) -> None:
        pushes.push("p0-b1", lambda: True, slow, "state 7")
        pushes.push("p1-b1", lambda: True, other, "state 3")
        await asyncio.sleep(TIMEOUT_S / 2)
        pushes.push("p0-b1", lambda: True, slow, "state 8")
        assert pushes.pending() == 2

    run(scenario)
    assert slow.received == [("state 8",)]
    assert other.received == [("state 3",)]


def test_a_push_to_a_replica_no_longer_wanted_stops():
    """A replica whose broker left (or whose topic was deleted) is not pushed to any more."""
    replica = Replica(fail=1000)
    wanted = {"p0-b1": True}

    async def scenario(pushes: Pushes) -> None:
        pushes.push("p0-b1", lambda: wanted["p0-b1"], replica, "state 7")
        await asyncio.sleep(RETRY_S * 5)
        wanted["p0-b1"] = False

    run(scenario)
    assert replica.received == [] and 1 < replica.calls < 1000


def test_a_push_can_be_awaited_until_it_is_delivered():
    """A caller that must answer only once the replica holds the push (the client quotas an
    admin just set) awaits it: True once delivered, False when a newer push replaced it or
    the replica is no longer wanted."""
    slow, gone = Replica(hang=2), Replica(fail=1000)
    wanted = {"gone": True}

    async def scenario(pushes: Pushes) -> None:
        delivered = pushes.push("p0-b1", lambda: True, slow, "quotas 1")
        abandoned = pushes.push("p1-b1", lambda: wanted["gone"], gone, "quotas 1")
        assert not delivered.done()
        assert await asyncio.wait_for(delivered, 5) is True
        assert slow.received == [("quotas 1",)]
        replaced = pushes.push("p0-b2", lambda: True, Replica(hang=1000), "quotas 1")
        pushes.push("p0-b2", lambda: True, Replica(), "quotas 2")
        assert await asyncio.wait_for(replaced, 5) is False
        wanted["gone"] = False
        assert await asyncio.wait_for(abandoned, 5) is False

    run(scenario)
