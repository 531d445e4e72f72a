"""Kafka 4's consumer protocol over the wire (ConsumerGroupHeartbeat, ConsumerGroupDescribe,
OffsetCommit v9): requests encoded as a client would, decoded and handled against a fake
broker context whose coordinator runs raylog's group state machine, responses decoded back;
topics by id on the wire. No Ray."""

from __future__ import annotations

import uuid

from raylog.coordination.group_core import ConsumerBeat
from raylog.errors import (
    FencedMemberEpochError,
    GroupIdNotFoundError,
    InvalidRequestError,
    StaleMemberEpochError,
    UnsupportedAssignorError,
)
from raylog.kafka import codec
from tests.unit.kafka.test_groups_handlers import NOW, TOPIC, FakeContext, FakeCoordinator, Method, roundtrip

A = codec.ApiKey
TOPIC_ID = uuid.UUID(int=7)


class Coordinator(FakeCoordinator):
    def __init__(self) -> None:
        super().__init__()
        self.consumer_heartbeat = Method(self._consumer_heartbeat)
        self.describe_consumer_group = Method(self._describe_consumer_group)

    def _consumer_heartbeat(self, request, topics):
        return self._call(lambda waiter: ConsumerBeat(waiter, request, topics, NOW, "made-here"))

    def _describe_consumer_group(self, group_id):
        return self._answer(lambda: self.groups.describe_consumer_group(group_id))


def context() -> FakeContext:
    ctx = FakeContext(Coordinator())
    ctx.md["topics"][TOPIC].topic_id = TOPIC_ID.hex
    ctx.md["topics"]["__consumer_offsets"].topic_id = uuid.UUID(int=1).hex
    return ctx


def heartbeat(ctx, version: int = 1, **fields) -> dict:
    body = {"group_id": "g", "member_id": "m1", "member_epoch": 0, **fields}
    return roundtrip(ctx, A.CONSUMER_GROUP_HEARTBEAT, version, body)


def joined(ctx, member_id: str = "m1", version: int = 1, **fields) -> dict:
    fields = {"rebalance_timeout_ms": 30_000, "subscribed_topic_names": [TOPIC], "topic_partitions": [], **fields}
    return heartbeat(ctx, version, member_id=member_id, **fields)


def test_a_member_joins_by_heartbeat_and_is_assigned_by_topic_id():
    ctx = context()
    answer = joined(ctx)
    assert (answer["error_code"], answer["member_id"], answer["member_epoch"]) == (0, "m1", 1)
    assert answer["heartbeat_interval_ms"] == 5_000
    assert answer["assignment"] == {"topic_partitions": [{"topic_id": TOPIC_ID, "partitions": [0, 1, 2, 3]}]}
    # A heartbeat that changes nothing carries no assignment.
    again = heartbeat(ctx, member_epoch=1)
    assert again["error_code"] == 0 and again["member_epoch"] == 1 and again["assignment"] is None
    # A second member: the first is told to give up half, by topic id, and stays at epoch 1.
    assert joined(ctx, "m2")["member_epoch"] == 2
    owned = [{"topic_id": TOPIC_ID, "partitions": [0, 1, 2, 3]}]
    first = heartbeat(ctx, member_epoch=1, topic_partitions=owned)
    assert first["member_epoch"] == 1 and len(first["assignment"]["topic_partitions"][0]["partitions"]) == 2


def test_errors_a_kafka_client_expects():
    ctx = context()
    assert heartbeat(ctx, member_id="", rebalance_timeout_ms=1, subscribed_topic_names=[TOPIC])["error_code"] == (
        InvalidRequestError.code  # from v1 the client makes its member id
    )
    made = heartbeat(ctx, version=0, member_id="", rebalance_timeout_ms=1, subscribed_topic_names=[TOPIC])
    assert made["member_id"] == "made-here" and made["error_code"] == 0
    joined(ctx)
    assert heartbeat(ctx, member_epoch=9)["error_code"] == FencedMemberEpochError.code
    assert joined(ctx, "m3", server_assignor="sticky")["error_code"] == UnsupportedAssignorError.code


def test_offset_commit_v9_carries_the_member_epoch():
    ctx = context()
    epoch = joined(ctx)["member_epoch"]

    def commit(member_epoch: int) -> int:
        body = {
            "group_id": "g",
            "generation_id_or_member_epoch": member_epoch,
            "member_id": "m1",
            "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 5}]}],
        }
        return roundtrip(ctx, A.OFFSET_COMMIT, 9, body)["topics"][0]["partitions"][0]["error_code"]

    assert commit(epoch) == 0
    assert commit(epoch - 1) == StaleMemberEpochError.code
    assert commit(epoch + 1) == FencedMemberEpochError.code


def test_consumer_group_describe_reports_epochs_members_and_assignments_by_id_and_name():
    ctx = context()
    joined(ctx)
    joined(ctx, "m2")
    answer = roundtrip(
        ctx, A.CONSUMER_GROUP_DESCRIBE, 0, {"group_ids": ["g", "nope"], "include_authorized_operations": False}
    )
    described, missing = answer["groups"]
    assert missing["error_code"] == GroupIdNotFoundError.code
    assert (described["group_state"], described["group_epoch"], described["assignor_name"]) == (
        "Reconciling",
        2,
        "uniform",
    )
    members = {m["member_id"]: m for m in described["members"]}
    assert members["m1"]["assignment"]["topic_partitions"][0]["topic_name"] == TOPIC
    assert members["m1"]["subscribed_topic_names"] == [TOPIC]
    targets = [m["target_assignment"]["topic_partitions"][0]["partitions"] for m in members.values()]
    assert sorted(p for ps in targets for p in ps) == [0, 1, 2, 3]


def test_the_listener_advertises_the_consumer_protocol():
    versions = {k["api_key"]: (k["min_version"], k["max_version"]) for k in codec.supported_api_keys()}
    assert versions[68] == (0, 1) and versions[69] == (0, 0) and versions[8][1] == 9
