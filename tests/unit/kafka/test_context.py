"""The Kafka listener's broker context (raylog.actors.kafka.context) finds coordinators in its
metadata cache and keeps one actor handle per actor across refreshes: a Ray actor handle costs
~60 KiB, and calls that wait long (joins) each kept the handle of their own lookup, which grew
a fuzzed listener by ~100 MiB per 40,000 frames. Without Ray, against a fake controller whose
every answer brings new handle objects, as Ray's deserialization does."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from raylog.actors.kafka import context
from raylog.actors.kafka.context import BrokerContext
from raylog.common.names import OFFSETS_TOPIC, TRANSACTION_TOPIC
from raylog.coordination import producer_ids
from raylog.coordination.group import partition_for
from raylog.coordination.producer_ids import FETCH_COUNT
from raylog.errors import CoordinatorLoadInProgressError, RequestTimedOutError


class Handle:
    """An actor handle as Ray deserializes it: a new object per answer, equal by actor id."""

    def __init__(self, actor_id: str):
        self.actor_id = actor_id

    def __eq__(self, other):
        return isinstance(other, Handle) and other.actor_id == self.actor_id

    def __hash__(self):
        return hash(self.actor_id)


class Controller:
    """``metadata()`` and the coordinator look-ups of a controller whose internal topics have
    ``partitions`` partitions, each led by broker ``p % 3`` (none created until looked up)."""

    def __init__(self, partitions: int = 5):
        self.partitions = partitions
        self.created: set[str] = set()
        self.calls: list[str] = []
        self.metadata = self._method("metadata", self._metadata)
        self.find_coordinator = self._method("find_coordinator", lambda key: self._find(OFFSETS_TOPIC, key))
        self.find_transaction_coordinator = self._method(
            "find_transaction_coordinator", lambda key: self._find(TRANSACTION_TOPIC, key)
        )
        self.next_producer_id = 1000
        self.allocate_producer_ids = self._method("allocate_producer_ids", self._allocate)

    def silence(self) -> asyncio.Event:
        """From now on ``metadata()`` answers only once the returned event is set (a paused
        or restarting controller)."""
        gate, real = asyncio.Event(), self._metadata

        async def held(*args, session=None):
            await gate.wait()
            return real(*args)

        self.metadata = SimpleNamespace(remote=held)
        return gate

    def _allocate(self, count: int) -> list[int]:
        self.next_producer_id += count
        return list(range(self.next_producer_id - count, self.next_producer_id))

    def _method(self, name, answer):
        async def call(*args, session=None):
            self.calls.append(name)
            return answer(*args)

        return SimpleNamespace(remote=call)

    def _find(self, topic: str, key: str):
        self.created.add(topic)
        partition = partition_for(key, self.partitions)
        return partition, Handle(f"{topic}-{partition}")

    def _metadata(self, topics=None, acls_version=None, credentials_version=None):
        parts = tuple(SimpleNamespace(partition=p, leader=p % 3) for p in range(self.partitions))
        topics = {name: SimpleNamespace(partitions=parts) for name in self.created}
        leaders = {(name, p): Handle(f"{name}-{p}") for name in self.created for p in range(self.partitions)}
        return {"topics": topics, "leaders": leaders, "listeners": {}, "acls": None}


def test_a_coordinator_is_found_in_the_metadata_cache_and_its_handle_kept_across_refreshes():
    controller = Controller()
    ctx = BrokerContext("c", 0, controller)

    async def lookups():
        first = await ctx.group_coordinator("orders")  # creates __consumer_offsets
        controller.calls.clear()
        again = [await ctx.group_coordinator("orders")]
        ctx.invalidate()
        again.append(await ctx.group_coordinator("orders"))
        ctx.invalidate()
        again.append(await ctx.group_coordinator("orders"))
        return first, again

    (broker, handle), again = asyncio.run(lookups())
    partition = partition_for("orders", controller.partitions)
    assert (broker, handle) == (partition % 3, Handle(f"{OFFSETS_TOPIC}-{partition}"))
    assert all(b == broker and h is handle for b, h in again), "one handle object per actor"
    assert "find_coordinator" not in controller.calls, "found in the metadata cache, as Kafka's brokers find it"
    assert controller.calls == ["metadata", "metadata"]  # the two refreshes asked for


def test_the_controller_creates_an_internal_topic_on_its_first_look_up():
    controller = Controller()
    ctx = BrokerContext("c", 0, controller)

    async def lookups():
        found = await ctx.transaction_coordinator("tx-1")
        partition = await ctx.coordinator_partition(TRANSACTION_TOPIC, "tx-1")
        return found, partition

    (broker, handle), partition = asyncio.run(lookups())
    assert controller.created == {TRANSACTION_TOPIC}
    assert controller.calls.count("find_transaction_coordinator") == 1
    assert partition == partition_for("tx-1", controller.partitions)
    assert handle == Handle(f"{TRANSACTION_TOPIC}-{partition}") and broker == partition % 3


def test_a_partition_without_a_running_leader_has_no_coordinator():
    controller = Controller()
    ctx = BrokerContext("c", 0, controller)
    real = controller._metadata

    def leaderless(*args):
        md = real(*args)
        md["leaders"] = {}
        return md

    controller.metadata = controller._method("metadata", leaderless)
    assert asyncio.run(ctx.group_coordinator("orders")) == (-1, None)


def test_aged_metadata_is_asked_again_and_serves_while_the_controller_is_silent(monkeypatch):
    """An aged cache is asked again and the answer waited for, briefly: a controller that
    answers gives the new answer (a topic created a moment ago is listed), one that does not
    (paused, restarting) holds up no request the old answer can serve, not even one that asks
    afresh or follows invalidate() (a leader moved): the client asks again, as it would of a
    Kafka broker whose cache lags. The old code waited up to a control call's 30 s for those,
    past a Kafka client's flush."""
    monkeypatch.setattr("raylog.actors.kafka.context.METADATA_MAX_AGE_S", 0.0)  # always aged
    monkeypatch.setattr("raylog.actors.kafka.context.REFRESH_WAIT_S", 0.05)
    controller = Controller()
    ctx = BrokerContext("c", 0, controller)

    async def scenario():
        first = await ctx.metadata()
        answered = await ctx.metadata()
        gate = controller.silence()
        # The old code waited for the silent controller (wait_for's 5 s would fail it).
        served = await asyncio.wait_for(asyncio.gather(*(ctx.metadata() for _ in range(3))), 5)
        afresh = await asyncio.wait_for(ctx.metadata(refresh=True), 5)
        ctx.invalidate()
        invalidated = await asyncio.wait_for(ctx.metadata(), 5)
        gate.set()
        await asyncio.sleep(0.01)  # the call under way ends
        fresh = await ctx.metadata(refresh=True)
        return first, answered, served + [afresh, invalidated], fresh

    first, answered, served, fresh = asyncio.run(scenario())
    assert answered is not first, "an aged cache gives the controller's new answer when it comes in time"
    assert all(s is answered for s in served), "the cached answer serves while the controller is silent"
    assert fresh is not answered, "the controller's answer serves once it comes"


def test_a_listener_warmed_as_it_starts_serves_its_first_request_while_the_controller_is_silent():
    """Only a listener with no answer cached waits for the controller in full, so the listener
    asks for metadata as it starts: a Kafka client whose first request reaches it while the
    controller is paused is answered (it was not, for 30 s, and a fresh producer's flush
    failed: tests/ray/kafka/test_paused_controller_wire.py)."""
    controller = Controller()

    async def scenario():
        warmed = BrokerContext("c", 0, controller)
        warmed.warm()
        await asyncio.sleep(0.05)  # the listener's loop runs on; the answer comes
        cold = BrokerContext("c", 1, controller)
        gate = controller.silence()
        served = await asyncio.wait_for(warmed.metadata(refresh=True), 5)
        waiting = asyncio.ensure_future(cold.metadata())
        await asyncio.sleep(0.2)
        blocked = not waiting.done()
        gate.set()
        await waiting
        warmed.close()
        return served, blocked

    served, blocked = asyncio.run(scenario())
    assert served["topics"] == {} and "leaders" in served
    assert blocked, "a listener with nothing cached waits for the controller's first answer"


def test_producer_ids_come_from_ids_held_ahead_while_the_controller_is_silent(monkeypatch):
    """KIP-730: a listener hands out producer ids from a block the controller gave it, fetching
    the next block in the background; a producer that starts while the controller does not
    answer gets an id from what is held, waits only once none is left, and gets Kafka's
    retriable COORDINATOR_LOAD_IN_PROGRESS if the controller then fails the call."""
    monkeypatch.setattr(context, "PRODUCER_ID_WAIT_S", 0.5)
    controller = Controller()
    ctx = BrokerContext("c", 0, controller)
    gate = asyncio.Event()
    answers = controller.allocate_producer_ids

    async def held(count):
        await gate.wait()
        return await answers.remote(count)

    async def failing(count):
        raise RequestTimedOutError("no reply from the actor in time")

    async def scenario():
        ctx.fetch_producer_ids()  # as the listener starts
        first = await ctx.new_producer_id()
        controller.allocate_producer_ids = SimpleNamespace(remote=held)
        held_ids = [await asyncio.wait_for(ctx.new_producer_id(), 5) for _ in range(FETCH_COUNT - 1)]
        waiting = asyncio.ensure_future(ctx.new_producer_id())
        await asyncio.sleep(0.1)
        waited = not waiting.done()
        gate.set()
        after = await waiting
        controller.allocate_producer_ids = SimpleNamespace(remote=failing)
        ids = [after]
        try:
            while True:
                ids.append(await ctx.new_producer_id())
        except CoordinatorLoadInProgressError:
            refused = True
        return first, held_ids, waited, ids, refused

    first, held_ids, waited, ids, refused = asyncio.run(scenario())
    handed = [first, *held_ids, *ids]
    assert len(set(handed)) == len(handed) == 2 * FETCH_COUNT, "each id once, two blocks"
    assert waited, "the id after the block waits for the next block"
    assert refused
    assert controller.calls.count("allocate_producer_ids") == 2  # one call per block (the failing ones aside)


def test_a_listener_whose_first_fetch_failed_holds_ids_again_before_any_producer_asks(monkeypatch):
    """The listener's first round (as it starts) timed out on a busy controller: it fetches
    again in the background, so a producer that starts later, while the controller is
    paused, still gets an id from what is held."""
    monkeypatch.setattr(producer_ids, "RETRY_BACKOFF_S", 0.01)
    controller = Controller()
    ctx = BrokerContext("c", 0, controller)
    answers = controller.allocate_producer_ids
    failures = []

    async def failing_twice(count):
        if len(failures) < 2:
            failures.append(count)
            raise RequestTimedOutError("no reply from the actor in time")
        return await answers.remote(count)

    controller.allocate_producer_ids = SimpleNamespace(remote=failing_twice)

    async def scenario():
        ctx.fetch_producer_ids()  # as the listener starts
        await asyncio.wait_for(ctx._producer_id_fetch, 5)
        controller.allocate_producer_ids = SimpleNamespace(remote=_silent)  # paused from now on
        return await asyncio.wait_for(ctx.new_producer_id(), 5)

    assert asyncio.run(scenario()) == 1000
    assert len(failures) == 2


def test_a_producer_that_finds_no_id_held_is_answered_retriable_at_once_not_after_the_call_timeout(monkeypatch):
    """With no id held and the controller silent, InitProducerId gets Kafka's retriable
    COORDINATOR_LOAD_IN_PROGRESS within a short wait (the client asks again), not after the
    controller call's timeout, which outlasts what a client waits for its answer."""
    monkeypatch.setattr(context, "PRODUCER_ID_WAIT_S", 0.05)
    controller = Controller()
    controller.allocate_producer_ids = SimpleNamespace(remote=_silent)
    ctx = BrokerContext("c", 0, controller)

    async def scenario():
        ctx.fetch_producer_ids()
        with pytest.raises(CoordinatorLoadInProgressError):
            await asyncio.wait_for(ctx.new_producer_id(), 5)

    asyncio.run(scenario())


async def _silent(count):
    """A paused controller's call: no answer."""
    await asyncio.Event().wait()


def test_the_background_refresh_outlives_a_failed_call(monkeypatch):
    """The metadata kept fresh in the background is asked again after a call that failed in
    any way (a listener whose controller handle is not ready raised AttributeError, which
    ended the loop for good)."""
    monkeypatch.setattr(context, "METADATA_MAX_AGE_S", 0.01)
    controller = Controller()
    real, failures = controller._metadata, []

    def flaky(*args):
        if len(failures) < 3:
            failures.append(1)
            raise ValueError("not ready")
        return real(*args)

    controller.metadata = controller._method("metadata", flaky)

    async def scenario():
        ctx = BrokerContext("c", 0, controller)
        ctx.warm()
        for _ in range(500):
            if ctx._metadata is not None:
                break
            await asyncio.sleep(0.01)
        ctx.close()
        return ctx._metadata

    assert asyncio.run(scenario()) is not None and len(failures) == 3
