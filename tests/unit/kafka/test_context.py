"""The Kafka listener's broker context (raylog.actors.kafka.context) finds coordinators in its
metadata cache and keeps one actor handle per actor across refreshes: a Ray actor handle costs
~60 KiB, and calls that wait long (joins) each kept the handle of their own lookup, which grew
a fuzzed listener by ~100 MiB per 40,000 frames. Without Ray, against a fake controller whose
every answer brings new handle objects, as Ray's deserialization does."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from raylog.actors.kafka.context import BrokerContext
from raylog.coordination.group import partition_for
from raylog.coordination.placement import OFFSETS_TOPIC, TRANSACTION_TOPIC


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

    def _method(self, name, answer):
        async def call(*args):
            self.calls.append(name)
            return answer(*args)

        return SimpleNamespace(remote=call)

    def _find(self, topic: str, key: str):
        self.created.add(topic)
        partition = partition_for(key, self.partitions)
        return partition, Handle(f"{topic}-{partition}")

    def _metadata(self):
        parts = tuple(SimpleNamespace(partition=p, leader=p % 3) for p in range(self.partitions))
        topics = {name: SimpleNamespace(partitions=parts) for name in self.created}
        leaders = {(name, p): Handle(f"{name}-{p}") for name in self.created for p in range(self.partitions)}
        return {"topics": topics, "leaders": leaders, "listeners": {}}


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

    def leaderless():
        md = real()
        md["leaders"] = {}
        return md

    controller.metadata = controller._method("metadata", leaderless)
    assert asyncio.run(ctx.group_coordinator("orders")) == (-1, None)
