"""The consumer-group handlers (raylog.actors.kafka.groups) through the codec at every
version they speak, without Ray: requests are encoded as a client would, decoded, handled
against a fake broker context whose coordinator runs raylog's real group state machine
(raylog.coordination.group) in place of the actor, and the responses encoded and decoded
back."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from raylog.actors.kafka import groups
from raylog.actors.kafka.context import CONNECTION
from raylog.coordination.group import TOPICS_CHANGED_GRACE_MS, GroupCoordinator
from raylog.coordination.group_core import Beat, Commit, GroupCore, Join, Leave, Persisted, Reply, Sync
from raylog.errors import (
    CoordinatorNotAvailableError,
    MemberIdRequiredError,
    NetworkExceptionError,
    RebalanceInProgressError,
    RequestTimedOutError,
)
from raylog.kafka import codec
from raylog.kafka.consumer_protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_subscription,
)
from raylog.protocol import GroupResponse, error_fields
from raylog.types import OffsetAndMetadata, TopicPartition

A = codec.ApiKey
NOW = 1_000_000
TOPIC = "clicks"


class Method:
    """``handle.method.remote(*args, session=...)``: runs the fake's method now (the broker's
    session token set aside); the 'ref' is its answer."""

    def __init__(self, fn):
        self.remote = lambda *args, session=None, **kwargs: fn(*args, **kwargs)


class FakeCoordinator:
    """raylog's group coordinator core behind the group coordinator actor's methods, pumped
    as the actor pumps it, except that records count as replicated at once (the log's
    replay applies them, then the core hears they are persisted)."""

    def __init__(self) -> None:
        self.groups = GroupCoordinator()
        self.groups.serve()
        self.core = GroupCore(self.groups)
        self.pending_txn: set[str] = set()
        self.now = NOW  # the heartbeats' clock
        for name in ("join_group", "sync_group", "assign_group", "heartbeat", "leave_group", "commit_offsets"):
            setattr(self, name, Method(getattr(self, f"_{name}")))
        for name in ("fetch_offsets", "describe_group", "list_groups"):
            setattr(self, name, Method(getattr(self, f"_{name}")))

    def _call(self, event_of) -> Any:
        """Step the core with the request ``event_of(waiter)`` makes: its reply."""
        waiter, replies = object(), {}
        events = [event_of(waiter)]
        while events:
            for effect in self.core.step(events.pop(0)):
                if isinstance(effect, Reply):
                    replies[effect.waiter] = effect.response
                else:  # replicated at once: the replay applies the records, then they are persisted
                    self.groups.load(effect.records, NOW)
                    events.append(Persisted(effect.token, NOW))
        assert waiter in replies, "the tests' calls are answered at once"
        return replies[waiter]

    def _join_group(self, request):
        return self._call(lambda waiter: Join(waiter, request, NOW))

    def _sync_group(self, group_id, member_id, generation, instance_id, assignments=None):
        return self._call(lambda waiter: Sync(waiter, group_id, member_id, generation, instance_id, NOW, assignments))

    def _assign_group(self, group_id, member_id, generation, instance_id, assignments):
        return self._sync_group(group_id, member_id, generation, instance_id, assignments)

    def _answer(self, question) -> GroupResponse:
        try:
            return GroupResponse(value=question())
        except Exception as exc:  # noqa: BLE001
            return GroupResponse(**error_fields(exc))

    def _heartbeat(self, group_id, member_id, generation, instance_id, wait_ms, topics):
        assert wait_ms == 0, "Kafka clients heartbeat on their own interval"
        return self._call(
            lambda waiter: Beat(waiter, group_id, member_id, generation, instance_id, self.now, 0, topics)
        )

    def _leave_group(self, group_id, member_id, instance_id):
        return self._call(lambda waiter: Leave(waiter, group_id, member_id, instance_id, NOW))

    def _commit_offsets(self, group_id, member_id, generation, instance_id, offsets):
        return self._call(lambda waiter: Commit(waiter, group_id, member_id, generation, instance_id, offsets, NOW))

    def _fetch_offsets(self, group_id, partitions, require_stable):
        if group_id in self.pending_txn:
            self.groups.add_pending(9, 0, group_id, {TopicPartition(TOPIC, 0): OffsetAndMetadata(99)})
            self.pending_txn.discard(group_id)
        return self._answer(lambda: self.groups.committed(group_id, partitions, require_stable))

    def _describe_group(self, group_id):
        return self._answer(lambda: self.groups.describe(group_id))

    def _list_groups(self):
        return self._answer(self.groups.list_groups)


class FakeContext:
    """The BrokerContext a handler gets: broker 1 leads the one offsets partition."""

    def __init__(self, coordinator: FakeCoordinator | None, fail: Exception | None = None) -> None:
        self.broker_id = 1
        self.coordinator = coordinator
        self.fail = fail
        self.invalidated = 0
        partitions = tuple(SimpleNamespace(partition=p, leader=1) for p in range(4))
        offsets = SimpleNamespace(partitions=(SimpleNamespace(partition=0, leader=1),))
        self.md = {
            "topics": {TOPIC: SimpleNamespace(partitions=partitions), "__consumer_offsets": offsets},
            "leaders": {("__consumer_offsets", 0): coordinator},
            "listeners": {1: {"PLAINTEXT": ("127.0.0.1", 19092)}, 2: {"PLAINTEXT": ("127.0.0.1", 19093)}},
        }

    async def metadata(self, refresh: bool = False) -> dict:
        return self.md

    def broker_token(self) -> str:
        return "broker"

    async def call(self, ref: Any, timeout_s: float | None = None) -> Any:
        if self.fail is not None:
            raise self.fail
        return ref

    def invalidate(self) -> None:
        self.invalidated += 1

    async def group_coordinator(self, group_id: str):
        return (1, self.coordinator) if self.coordinator is not None else (-1, None)

    async def transaction_coordinator(self, transactional_id: str):
        return (2, object())


def roundtrip(ctx, api_key: codec.ApiKey, version: int, body: dict) -> dict:
    """Encode ``body`` as a client would, decode it as the listener does, handle it, and
    return the response as the client decodes it."""
    frame = b"".join(bytes(b) for b in codec.encode_request(codec.RequestHeader(api_key, version, 7, "cli"), body))
    header, decoded = codec.decode_request(frame[4:])
    response = asyncio.run(_handle(ctx, header, decoded))
    wire = b"".join(bytes(b) for b in codec.encode_response(header, response))
    correlation_id, answer = codec.decode_response(api_key, version, wire[4:])
    assert correlation_id == 7
    return answer


async def _handle(ctx, header, body):
    CONNECTION.set(connection)
    return await groups.HANDLERS[header.api_key](ctx, header, body)


connection: dict = {}


@pytest.fixture(autouse=True)
def fresh_connection():
    connection.clear()


def versions(api_key: codec.ApiKey) -> list[int]:
    low, high = codec.SUPPORTED[api_key]
    return list(range(low, high + 1))


def join_body(version: int, member_id: str = "", protocols=None, protocol_type: str = "consumer", **extra) -> dict:
    if protocols is None:
        protocols = [{"name": "range", "metadata": encode_subscription(Subscription(0, (TOPIC,)))}]
    return {
        "group_id": "g",
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 20_000,
        "member_id": member_id,
        "group_instance_id": None,
        "protocol_type": protocol_type,
        "protocols": protocols,
        **extra,
    }


def join(ctx: FakeContext, version: int, body: dict) -> dict:
    """A JoinGroup as a Kafka client makes it: from v4 on, a new member's first answer is
    MEMBER_ID_REQUIRED with its member id, and it joins again with that id (KIP-394)."""
    answer = roundtrip(ctx, A.JOIN_GROUP, version, body)
    if answer["error_code"] == MemberIdRequiredError.code:
        answer = roundtrip(ctx, A.JOIN_GROUP, version, {**body, "member_id": answer["member_id"]})
    return answer


@pytest.mark.parametrize("version", versions(A.JOIN_GROUP))
def test_a_new_member_is_asked_for_its_member_id_first_from_join_group_v4_on(version):
    """KIP-394: a member joining for the first time at v4+ is answered at once with
    MEMBER_ID_REQUIRED and its member id, and is no member until it joins with it; earlier
    versions join at once."""
    coordinator = FakeCoordinator()
    ctx = FakeContext(coordinator)
    first = roundtrip(ctx, A.JOIN_GROUP, version, join_body(version))
    if version < 4:
        assert first["error_code"] == 0 and first["generation_id"] == 1
        return
    assert first["error_code"] == MemberIdRequiredError.code and first["member_id"]
    assert first["generation_id"] == -1 and coordinator.groups.groups["g"].members == {}
    again = roundtrip(ctx, A.JOIN_GROUP, version, join_body(version, member_id=first["member_id"]))
    assert again["error_code"] == 0 and again["member_id"] == first["member_id"] and again["generation_id"] == 1


@pytest.mark.parametrize("version", versions(A.JOIN_GROUP))
def test_a_member_joins_as_a_follower_and_syncs_its_assignment_at_its_version(version):
    ctx = FakeContext(FakeCoordinator())
    subscription = Subscription(2, (TOPIC,), b"ud", (), -1)
    protocols = [
        {"name": "roundrobin", "metadata": encode_subscription(subscription)},
        {"name": "unknown-assignor", "metadata": b"\x00"},
    ]
    joined = join(ctx, version, join_body(version, protocols=protocols))
    assert joined["error_code"] == 0 and joined["generation_id"] == 1
    assert joined["protocol_name"] == "roundrobin" and joined["leader"] == groups.LEADER != joined["member_id"]
    assert joined["members"] == []
    if version >= 7:
        assert joined["protocol_type"] == "consumer"
    for sync_version in versions(A.SYNC_GROUP):
        body = {"group_id": "g", "generation_id": 1, "member_id": joined["member_id"], "assignments": []}
        synced = roundtrip(ctx, A.SYNC_GROUP, sync_version, body)
        assert synced["error_code"] == 0
        assignment = decode_assignment(synced["assignment"])
        assert assignment == Assignment(2, tuple(TopicPartition(TOPIC, p) for p in range(4)), None)
        if sync_version >= 5:
            assert (synced["protocol_type"], synced["protocol_name"]) == ("consumer", "roundrobin")
    for hb_version in versions(A.HEARTBEAT):
        body = {"group_id": "g", "generation_id": 1, "member_id": joined["member_id"]}
        assert roundtrip(ctx, A.HEARTBEAT, hb_version, body)["error_code"] == 0
        assert roundtrip(ctx, A.HEARTBEAT, hb_version, {**body, "generation_id": 0})["error_code"] == 22


def test_a_heartbeat_brings_every_topics_partition_count_and_a_change_rebalances_the_group():
    """A Kafka member's heartbeat carries the listener's partition counts of every topic,
    internal ones too (a member may read ``__consumer_offsets``: it is not rebalanced for
    it); partitions added to its topic rebalance the group once the change has lasted."""
    coordinator = FakeCoordinator()
    ctx = FakeContext(coordinator)
    subscription = Subscription(0, (TOPIC, "__consumer_offsets"))
    protocols = [{"name": "range", "metadata": encode_subscription(subscription)}]
    joined = join(ctx, 4, join_body(4, protocols=protocols))
    body = {"group_id": "g", "generation_id": 1, "member_id": joined["member_id"]}

    def beat(after_ms: int) -> int:
        coordinator.now += after_ms
        return roundtrip(ctx, A.HEARTBEAT, 4, body)["error_code"]

    assert [beat(0), beat(TOPICS_CHANGED_GRACE_MS)] == [0, 0]
    grown = tuple(SimpleNamespace(partition=p, leader=1) for p in range(6))
    topics = {**ctx.md["topics"], TOPIC: SimpleNamespace(partitions=grown)}
    ctx.md = {"topics": topics, "leaders": ctx.md["leaders"], "listeners": ctx.md["listeners"]}  # a new answer
    assert [beat(0), beat(TOPICS_CHANGED_GRACE_MS)] == [0, RebalanceInProgressError.code]


def test_the_subscription_reaches_raylog_with_its_owned_partitions_and_strategies():
    coordinator = FakeCoordinator()
    ctx = FakeContext(coordinator)
    first = join(ctx, 7, join_body(7, protocols=[_cooperative(())]))
    member = first["member_id"]
    assert first["protocol_name"] == "cooperative-sticky"
    owned = (TopicPartition(TOPIC, 1),)
    # A v1 subscription says no generation: the member's is the one it was told.
    again = join(ctx, 7, join_body(7, member_id=member, protocols=[_cooperative(owned, 1)]))
    assert again["generation_id"] == 2
    m = coordinator.groups.groups["g"].members[member]
    assert m.subscription.owned == owned and m.subscription.generation == 1
    assert m.subscription.strategies == ("cooperative-sticky",)
    assert m.partition_counts == {TOPIC: 4} and m.client_id == "cli"
    assert (m.session_timeout_ms, m.rebalance_timeout_ms) == (10_000, 20_000)


def _cooperative(owned, version: int = 2):
    generation = 1 if version >= 2 else -1
    raw = encode_subscription(Subscription(version, (TOPIC,), None, tuple(owned), generation))
    return {"name": "cooperative-sticky", "metadata": raw}


def test_eager_sticky_maps_to_raylogs_sticky_assignor_and_claims_nothing():
    coordinator = FakeCoordinator()
    ctx = FakeContext(coordinator)
    raw = encode_subscription(Subscription(1, (TOPIC,), None, (TopicPartition(TOPIC, 0),)))
    joined = join(ctx, 5, join_body(5, protocols=[{"name": "sticky", "metadata": raw}]))
    assert joined["protocol_name"] == "sticky"
    m = coordinator.groups.groups["g"].members[joined["member_id"]]
    assert m.subscription.strategies == ("cooperative-sticky",) and m.subscription.owned == ()


@pytest.mark.parametrize("version", [0, 7])
def test_unusable_protocols_and_another_protocol_type_than_the_groups_are_inconsistent(version, caplog):
    ctx = FakeContext(FakeCoordinator())
    connect = join_body(version, protocol_type="connect", protocols=[{"name": "default", "metadata": b"w1"}])
    assert join(ctx, version, connect)["error_code"] == 0  # the group's protocol type is "connect" now
    consumer = join(ctx, version, join_body(version))
    assert consumer["error_code"] == 23 and consumer["generation_id"] == -1
    assert "protocol type 'connect'" in caplog.text
    assert join(ctx, version, join_body(version, protocol_type="", group_id="h"))["error_code"] == 23
    garbled = join_body(version, protocols=[{"name": "range", "metadata": b"\x00\x00\x00"}])
    assert join(ctx, version, garbled)["error_code"] == 23
    assert "truncated" in caplog.text
    assert join(ctx, version, join_body(version, protocols=[]))["error_code"] == 23


def test_coordinator_failures_become_retriable_coordinator_errors():
    assert join(FakeContext(None), 7, join_body(7))["error_code"] == 15
    gone = FakeContext(FakeCoordinator(), fail=NetworkExceptionError("actor died"))
    body = {"group_id": "g", "generation_id": 1, "member_id": "m"}
    assert roundtrip(gone, A.HEARTBEAT, 4, body)["error_code"] == 16  # NOT_COORDINATOR: look it up again
    assert gone.invalidated == 1
    slow = FakeContext(FakeCoordinator(), fail=RequestTimedOutError("no reply"))
    assert roundtrip(slow, A.HEARTBEAT, 4, body)["error_code"] == 15


@pytest.mark.parametrize("version", versions(A.FIND_COORDINATOR))
def test_find_coordinator_answers_the_listener_fronting_it(version):
    ctx = FakeContext(FakeCoordinator())
    if version >= 4:
        body = {"key_type": 0, "coordinator_keys": ["g1", "g2", ""]}
        answer = roundtrip(ctx, A.FIND_COORDINATOR, version, body)
        found = [(c["key"], c["node_id"], c["host"], c["port"], c["error_code"]) for c in answer["coordinators"]]
        assert found == [("g1", 1, "127.0.0.1", 19092, 0), ("g2", 1, "127.0.0.1", 19092, 0), ("", -1, "", -1, 42)]
        txn = roundtrip(ctx, A.FIND_COORDINATOR, version, {"key_type": 1, "coordinator_keys": ["t"]})
        assert txn["coordinators"][0]["node_id"] == 2 and txn["coordinators"][0]["port"] == 19093
        return
    answer = roundtrip(ctx, A.FIND_COORDINATOR, version, {"key": "g", "key_type": 0})
    assert (answer["error_code"], answer["node_id"], answer["host"], answer["port"]) == (0, 1, "127.0.0.1", 19092)
    missing = roundtrip(FakeContext(None), A.FIND_COORDINATOR, version, {"key": "g", "key_type": 0})
    assert (missing["error_code"], missing["node_id"]) == (15, -1)
    if version >= 1:
        bad = roundtrip(ctx, A.FIND_COORDINATOR, version, {"key": "g", "key_type": 5})
        assert bad["error_code"] == 42 and "key type 5" in bad["error_message"]


def _commit_body(offsets: dict[tuple[str, int], tuple[int, str | None]], generation=-1, member="") -> dict:
    topics: dict[str, list] = {}
    for (topic, p), (offset, metadata) in offsets.items():
        topics.setdefault(topic, []).append(
            {
                "partition_index": p,
                "committed_offset": offset,
                "committed_leader_epoch": 5,
                "committed_metadata": metadata,
            }
        )
    return {
        "group_id": "g",
        "generation_id_or_member_epoch": generation,
        "member_id": member,
        "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
    }


@pytest.mark.parametrize("version", versions(A.OFFSET_COMMIT))
def test_offset_commit_from_outside_the_group_and_per_partition_errors(version):
    coordinator = FakeCoordinator()
    ctx = FakeContext(coordinator)
    body = _commit_body(
        {(TOPIC, 0): (10, "m"), (TOPIC, 1): (11, None), (TOPIC, 9): (1, ""), ("nope", 0): (1, ""), (TOPIC, 2): (-5, "")}
    )
    answer = roundtrip(ctx, A.OFFSET_COMMIT, version, body)
    codes = {(t["name"], p["partition_index"]): p["error_code"] for t in answer["topics"] for p in t["partitions"]}
    assert codes == {(TOPIC, 0): 0, (TOPIC, 1): 0, (TOPIC, 9): 3, ("nope", 0): 3, (TOPIC, 2): 42}
    epoch = 5 if version >= 6 else -1  # the committed leader epoch is kept (KIP-320; OffsetCommit v6+)
    assert coordinator.groups.committed("g") == {
        TopicPartition(TOPIC, 0): OffsetAndMetadata(10, "m", epoch),
        TopicPartition(TOPIC, 1): OffsetAndMetadata(11, "", epoch),
    }
    too_long = roundtrip(ctx, A.OFFSET_COMMIT, version, _commit_body({(TOPIC, 3): (1, "x" * 5000)}))
    assert too_long["topics"][0]["partitions"][0]["error_code"] == 12
    # A member's commit with a generation that is over is refused for every partition.
    joined = join(ctx, 7, join_body(7))
    stale = _commit_body({(TOPIC, 0): (20, ""), (TOPIC, 1): (21, "")}, generation=0, member=joined["member_id"])
    answer = roundtrip(ctx, A.OFFSET_COMMIT, version, stale)
    assert [p["error_code"] for p in answer["topics"][0]["partitions"]] == [22, 22]


@pytest.mark.parametrize("version", versions(A.OFFSET_FETCH))
def test_offset_fetch_answers_minus_one_for_none_and_unstable_only_when_asked(version):
    coordinator = FakeCoordinator()
    ctx = FakeContext(coordinator)
    roundtrip(ctx, A.OFFSET_COMMIT, 8, _commit_body({(TOPIC, 0): (10, "m")}))

    def fetch(require_stable: bool, group: str = "g") -> dict:
        topics = [{"name": TOPIC, "partition_indexes": [0, 1]}]
        if version >= 8:
            body = {"groups": [{"group_id": group, "topics": topics}], "require_stable": require_stable}
            (answer,) = roundtrip(ctx, A.OFFSET_FETCH, version, body)["groups"]
            return answer
        return roundtrip(
            ctx, A.OFFSET_FETCH, version, {"group_id": group, "topics": topics, "require_stable": require_stable}
        )

    def found(answer):
        return {
            p["partition_index"]: (p["committed_offset"], p["metadata"], p["committed_leader_epoch"], p["error_code"])
            for t in answer["topics"]
            for p in t["partitions"]
        }

    epoch = 5 if version >= 5 else -1  # as committed (KIP-320; OffsetFetch v5+ says it)
    assert found(fetch(False)) == {0: (10, "m", epoch, 0), 1: (-1, "", -1, 0)}
    coordinator.pending_txn.add("g")
    assert found(fetch(False)) == {0: (10, "m", epoch, 0), 1: (-1, "", -1, 0)}
    if version >= 7:
        answer = fetch(True)
        assert answer["error_code"] == 0
        assert {p: f[3] for p, f in found(answer).items()} == {0: 88, 1: 88}
    if version >= 2:
        everything = {"group_id": "g", "topics": None}
        body = {"groups": [everything, {"group_id": "h", "topics": None}]} if version >= 8 else everything
        answer = roundtrip(ctx, A.OFFSET_FETCH, version, body)
        listed = answer["groups"][0] if version >= 8 else answer
        assert found(listed) == {0: (10, "m", epoch, 0)}
        if version >= 8:
            assert answer["groups"][1] == {"group_id": "h", "topics": [], "error_code": 0}


def test_offset_fetch_group_errors_go_where_each_version_has_room():
    ctx = FakeContext(None)
    topics = [{"name": TOPIC, "partition_indexes": [0]}]
    v1 = roundtrip(ctx, A.OFFSET_FETCH, 1, {"group_id": "g", "topics": topics})
    assert v1["topics"][0]["partitions"][0]["error_code"] == 15
    v7 = roundtrip(ctx, A.OFFSET_FETCH, 7, {"group_id": "g", "topics": topics})
    assert (v7["error_code"], v7["topics"]) == (15, [])
    v8 = roundtrip(ctx, A.OFFSET_FETCH, 8, {"groups": [{"group_id": "g", "topics": topics}]})
    assert v8["groups"][0]["error_code"] == 15


@pytest.mark.parametrize("version", versions(A.LEAVE_GROUP))
def test_leave_group_single_and_batched(version):
    coordinator = FakeCoordinator()
    ctx = FakeContext(coordinator)
    joined = join(ctx, 7, join_body(7, group_instance_id="static-1"))
    member = joined["member_id"]
    if version < 3:
        assert roundtrip(ctx, A.LEAVE_GROUP, version, {"group_id": "g", "member_id": "stranger"})["error_code"] == 25
        assert roundtrip(ctx, A.LEAVE_GROUP, version, {"group_id": "g", "member_id": member})["error_code"] == 0
    else:
        # By instance id alone (Kafka's admin removes static members so), and a stranger.
        members = [{"member_id": "", "group_instance_id": "static-1"}, {"member_id": "x", "group_instance_id": None}]
        answer = roundtrip(ctx, A.LEAVE_GROUP, version, {"group_id": "g", "members": members})
        assert answer["error_code"] == 0
        assert [(m["group_instance_id"], m["error_code"]) for m in answer["members"]] == [("static-1", 0), (None, 25)]
        gone = roundtrip(FakeContext(None), A.LEAVE_GROUP, version, {"group_id": "g", "members": members})
        assert gone["error_code"] == 15 and gone["members"] == []
    assert coordinator.groups.groups["g"].members == {}


@pytest.mark.parametrize("version", versions(A.DESCRIBE_GROUPS))
def test_describe_groups_encodes_members_as_consumer_protocol(version):
    ctx = FakeContext(FakeCoordinator())
    joined = join(ctx, 7, join_body(7))
    answer = roundtrip(
        ctx, A.DESCRIBE_GROUPS, version, {"groups": ["g", "none"], "include_authorized_operations": True}
    )
    described, missing = answer["groups"]
    assert (described["error_code"], described["group_state"], described["protocol_type"]) == (0, "Stable", "consumer")
    assert described["protocol_data"] == "range"
    (member,) = described["members"]
    assert member["member_id"] == joined["member_id"] and member["client_id"] == "cli"
    assert decode_subscription(member["member_metadata"]).topics == (TOPIC,)
    assert decode_assignment(member["member_assignment"]).partitions == tuple(
        TopicPartition(TOPIC, p) for p in range(4)
    )
    assert (missing["error_code"], missing["group_state"], missing["members"]) == (0, "Dead", [])
    if version >= 3:
        # No authorizer: all of Kafka 4's: READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS.
        assert described["authorized_operations"] == (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11)


@pytest.mark.parametrize("version", versions(A.LIST_GROUPS))
def test_list_groups_lists_the_groups_this_broker_coordinates(version):
    coordinator = FakeCoordinator()
    ctx = FakeContext(coordinator)
    join(ctx, 7, join_body(7))
    roundtrip(ctx, A.OFFSET_COMMIT, 8, {**_commit_body({(TOPIC, 0): (1, "")}), "group_id": "h"})
    answer = roundtrip(ctx, A.LIST_GROUPS, version, {})
    assert answer["error_code"] == 0
    assert [(g["group_id"], g["protocol_type"]) for g in answer["groups"]] == [("g", "consumer"), ("h", "consumer")]
    if version >= 4:
        assert [g["group_state"] for g in answer["groups"]] == ["Stable", "Empty"]
        stable = roundtrip(ctx, A.LIST_GROUPS, version, {"states_filter": ["stable"]})
        assert [g["group_id"] for g in stable["groups"]] == ["g"]
    elsewhere = FakeContext(coordinator)
    elsewhere.broker_id = 2  # leads no offsets partition
    assert roundtrip(elsewhere, A.LIST_GROUPS, version, {})["groups"] == []
    failing = FakeContext(coordinator, fail=CoordinatorNotAvailableError("loading"))
    assert roundtrip(failing, A.LIST_GROUPS, version, {})["error_code"] == 15


def test_a_connection_keeps_one_member_per_group():
    """What a member joined with is kept per connection, once per group: a consumer that
    joins again under a new id (after UNKNOWN_MEMBER_ID) leaves no stale entry behind."""
    coordinator = FakeCoordinator()
    ctx = FakeContext(coordinator)
    first = join(ctx, 7, join_body(7))["member_id"]
    coordinator.groups.leave("g", first, None, NOW)  # expired, say: the consumer joins anew
    second = join(ctx, 7, join_body(7))["member_id"]
    other = join(ctx, 7, {**join_body(7), "group_id": "h"})["member_id"]
    assert first != second
    assert sorted(connection["groups"]) == [("g", second), ("h", other)]


@pytest.mark.parametrize("version", versions(A.JOIN_GROUP))
def test_a_protocol_raylog_does_not_run_is_assigned_by_the_leader_member(version):
    """Kafka's classic protocol for any protocol type and name: the leader gets every
    member's metadata, its SyncGroup carries the assignments, every SyncGroup answers the
    member's as it was sent; DescribeGroups and ListGroups show the members' own bytes."""
    ctx = FakeContext(FakeCoordinator())
    body = join_body(version, protocol_type="connect", protocols=[{"name": "sessioned", "metadata": b"worker-1"}])
    joined = join(ctx, version, body)
    member = joined["member_id"]
    assert joined["error_code"] == 0 and joined["leader"] == member and joined["protocol_name"] == "sessioned"
    assert [(m["member_id"], m["metadata"]) for m in joined["members"]] == [(member, b"worker-1")]
    if version >= 7:
        assert joined["protocol_type"] == "connect"
    sync = {"group_id": "g", "generation_id": 1, "member_id": member, "protocol_type": "connect"}
    assigned = roundtrip(ctx, A.SYNC_GROUP, 5, {**sync, "assignments": [{"member_id": member, "assignment": b"A"}]})
    assert (assigned["error_code"], assigned["assignment"], assigned["protocol_type"]) == (0, b"A", "connect")
    again = roundtrip(ctx, A.SYNC_GROUP, 0, {**sync, "assignments": []})  # a follower's sync, at any version
    assert (again["error_code"], again["assignment"]) == (0, b"A")
    wrong = roundtrip(ctx, A.SYNC_GROUP, 5, {**sync, "protocol_type": "consumer"})
    assert wrong["error_code"] == 23
    (described,) = roundtrip(ctx, A.DESCRIBE_GROUPS, 5, {"groups": ["g"]})["groups"]
    assert (described["protocol_type"], described["protocol_data"]) == ("connect", "sessioned")
    assert [(m["member_metadata"], m["member_assignment"]) for m in described["members"]] == [(b"worker-1", b"A")]
    (listed,) = roundtrip(ctx, A.LIST_GROUPS, 4, {})["groups"]
    assert (listed["group_id"], listed["protocol_type"]) == ("g", "connect")


def test_a_consumers_custom_assignor_is_the_leaders_and_kafkas_names_stay_its_own():
    """A consumer proposing an assignor raylog does not run first: its vote makes the leader
    assign; its subscription's topics still reach the coordinator."""
    coordinator = FakeCoordinator()
    ctx = FakeContext(coordinator)
    raw = encode_subscription(Subscription(1, (TOPIC,), b"custom"))
    protocols = [{"name": "my-assignor", "metadata": raw}, {"name": "range", "metadata": raw}]
    joined = join(ctx, 7, join_body(7, protocols=protocols))
    assert joined["protocol_name"] == "my-assignor" and joined["leader"] == joined["member_id"]
    assert joined["members"][0]["metadata"] == raw
    m = coordinator.groups.groups["g"].members[joined["member_id"]]
    assert m.subscription.topics == (TOPIC,) and m.subscription.strategies == ("my-assignor", "range")
