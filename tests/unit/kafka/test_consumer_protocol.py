"""raylog.kafka.consumer_protocol against byte strings made by hand and by two independent
implementations (kafka-python's ConsumerProtocol messages and aiokafka's structs)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raylog.errors import InvalidRequestError
from raylog.kafka.consumer_protocol import (
    Assignment,
    ConsumerProtocolError,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from raylog.types import TopicPartition as TP


def _str(s: str) -> bytes:
    return struct.pack(">h", len(s.encode())) + s.encode()


def _partitions(by_topic: dict[str, list[int]]) -> bytes:
    out = struct.pack(">i", len(by_topic))
    for topic, ps in by_topic.items():
        out += _str(topic) + struct.pack(f">i{len(ps)}i", len(ps), *ps)
    return out


def test_a_v3_subscription_by_hand_decodes_field_by_field():
    raw = (
        struct.pack(">h", 3)
        + struct.pack(">i", 2)
        + _str("clicks")
        + _str("views")
        + struct.pack(">i", 3)
        + b"abc"
        + _partitions({"clicks": [2, 0]})
        + struct.pack(">i", 7)
        + _str("rack-1")
    )
    sub = decode_subscription(raw)
    assert sub == Subscription(3, ("clicks", "views"), b"abc", (TP("clicks", 2), TP("clicks", 0)), 7, "rack-1")
    # Encoding groups partitions by topic and sorts them: the same fields come back.
    assert decode_subscription(encode_subscription(sub)).owned_partitions == (TP("clicks", 0), TP("clicks", 2))


def test_each_version_reads_only_its_fields():
    v0 = struct.pack(">hi", 0, 1) + _str("t") + struct.pack(">i", -1)
    assert decode_subscription(v0) == Subscription(0, ("t",), None, (), -1, None)
    v1 = struct.pack(">hi", 1, 1) + _str("t") + struct.pack(">i", 0) + _partitions({"t": [1]})
    assert decode_subscription(v1) == Subscription(1, ("t",), b"", (TP("t", 1),), -1, None)
    v2 = v1[:2].replace(b"\x00\x01", b"\x00\x02") + v1[2:] + struct.pack(">i", 4)
    assert decode_subscription(v2) == Subscription(2, ("t",), b"", (TP("t", 1),), 4, None)
    v3_null_rack = v2[:1] + b"\x03" + v2[2:] + struct.pack(">h", -1)
    assert decode_subscription(v3_null_rack) == Subscription(3, ("t",), b"", (TP("t", 1),), 4, None)


def test_a_later_version_reads_as_v3_and_ignores_what_follows():
    v3 = encode_subscription(Subscription(3, ("t",), None, (TP("t", 0),), 2, "r"))
    v9 = struct.pack(">h", 9) + v3[2:] + b"\x01\x02\x03 new fields"
    assert decode_subscription(v9) == Subscription(3, ("t",), None, (TP("t", 0),), 2, "r")
    assert decode_assignment(struct.pack(">h", 5) + encode_assignment(Assignment(0, (TP("t", 1),)))[2:]).partitions == (
        TP("t", 1),
    )


def test_assignment_bytes_group_by_topic_in_order():
    raw = encode_assignment(Assignment(1, (TP("b", 3), TP("a", 1), TP("b", 0)), None))
    assert raw == struct.pack(">h", 1) + _partitions({"a": [1], "b": [0, 3]}) + struct.pack(">i", -1)
    assert decode_assignment(raw) == Assignment(1, (TP("a", 1), TP("b", 0), TP("b", 3)), None)
    assert decode_assignment(b"") == Assignment(0, ())  # what an error's SyncGroup answer carries


@pytest.mark.parametrize(
    "raw",
    [
        b"\x00",  # half a version
        struct.pack(">h", -1),  # a negative version
        struct.pack(">hi", 0, 1),  # a topic promised, none there
        struct.pack(">hi", 0, 1) + struct.pack(">h", 5) + b"ab",  # a short string
        struct.pack(">hi", 0, 1) + _str("t") + struct.pack(">i", 10) + b"x",  # short user data
        struct.pack(">hi", 0, 1_000_000) + _str("t"),  # a count beyond the bytes
        struct.pack(">hi", 0, 1) + struct.pack(">h", -3),  # a negative string length
        struct.pack(">hi", 0, 1) + struct.pack(">h", 2) + b"\xff\xfe" + struct.pack(">i", -1),  # not UTF-8
        struct.pack(">hi", 1, 0) + struct.pack(">i", -1),  # v1 without its owned partitions
    ],
)
def test_malformed_subscriptions_raise_the_typed_error(raw):
    with pytest.raises(ConsumerProtocolError) as caught:
        decode_subscription(raw)
    assert isinstance(caught.value, InvalidRequestError) and caught.value.code == 42
    assert "consumer subscription" in str(caught.value)


def test_malformed_assignments_and_bad_versions_raise_the_typed_error():
    with pytest.raises(ConsumerProtocolError, match="consumer assignment"):
        decode_assignment(struct.pack(">hi", 0, 1) + _str("t") + struct.pack(">i", 2) + b"\x00\x00\x00\x01")
    with pytest.raises(ConsumerProtocolError, match="versions are 0 to 3"):
        encode_assignment(Assignment(4, ()))
    with pytest.raises(ConsumerProtocolError, match="versions are 0 to 3"):
        encode_subscription(Subscription(-1, ()))
    with pytest.raises(ConsumerProtocolError, match="int16 length"):
        encode_subscription(Subscription(0, ("x" * 40_000,)))


topics = st.lists(st.text(min_size=1, max_size=20), max_size=5, unique=True)
partitions = st.lists(
    st.tuples(st.text(min_size=1, max_size=10), st.integers(0, 2**31 - 1)), max_size=10, unique=True
).map(lambda tps: tuple(sorted(TP(*tp) for tp in tps)))
user_data = st.one_of(st.none(), st.binary(max_size=50))


@given(st.integers(0, 3), topics, user_data, partitions, st.integers(-1, 2**31 - 1), st.one_of(st.none(), st.text()))
def test_subscriptions_round_trip_at_every_version(version, topic_list, data, owned, generation, rack):
    sub = Subscription(
        version,
        tuple(topic_list),
        data,
        owned if version >= 1 else (),
        generation if version >= 2 else -1,
        rack if version >= 3 else None,
    )
    assert decode_subscription(encode_subscription(sub)) == sub
    assert decode_subscription(memoryview(encode_subscription(sub))) == sub


@given(st.integers(0, 3), partitions, user_data)
def test_assignments_round_trip_and_kafka_python_reads_them(version, assigned, data):
    raw = encode_assignment(Assignment(version, assigned, data))
    assert decode_assignment(raw) == Assignment(version, assigned, data)
    from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment

    theirs = ConsumerProtocolAssignment.decode(raw)
    assert sorted(theirs.partitions()) == [tuple(tp) for tp in assigned]
    assert theirs.user_data == data


def test_subscriptions_kafka_python_builds_decode_here():
    from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

    eager = ConsumerProtocolSubscription(0, ["a", "b"], b"").encode()
    assert decode_subscription(eager) == Subscription(0, ("a", "b"), b"")
    # kafka-python's cooperative-sticky assignor sends v1 with its owned partitions.
    cooperative = ConsumerProtocolSubscription(
        version=1, topics=["a"], user_data=b"", owned_partitions=[("a", [0, 2])]
    ).encode()
    assert decode_subscription(cooperative) == Subscription(1, ("a",), b"", (TP("a", 0), TP("a", 2)))
    ours = encode_subscription(Subscription(1, ("a", "b"), b"u", (TP("b", 1),)))
    theirs = ConsumerProtocolSubscription.decode(ours)
    assert (theirs.version, list(theirs.topics), theirs.user_data) == (1, ["a", "b"], b"u")
    assert [(o.topic, list(o.partitions)) for o in theirs.owned_partitions] == [("b", [1])]


def test_aiokafka_structs_agree_both_ways():
    from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment, ConsumerProtocolMemberMetadata

    theirs = ConsumerProtocolMemberMetadata(0, ["t1", "t2"], b"").encode()
    assert decode_subscription(theirs) == Subscription(0, ("t1", "t2"), b"")
    ours = encode_assignment(Assignment(0, (TP("t1", 0), TP("t1", 3), TP("t2", 1)), b""))
    assert sorted(ConsumerProtocolMemberAssignment.decode(ours).partitions()) == [("t1", 0), ("t1", 3), ("t2", 1)]
    assert decode_assignment(ConsumerProtocolMemberAssignment(0, [("t", [4, 5])], b"").encode()) == Assignment(
        0, (TP("t", 4), TP("t", 5)), b""
    )


CAPTURES = Path(__file__).parent / "captures"
#: What each client's captured JoinGroup proposed: ``[(assignor, subscription version)]``.
CAPTURED_JOINS = {
    "aiokafka.txt": [("roundrobin", 0)],
    "confluent_kafka.txt": [("range", 3), ("roundrobin", 3)],
    "kafka_python.txt": [("range", 0), ("roundrobin", 0)],
}


@pytest.mark.parametrize("capture", sorted(CAPTURED_JOINS))
def test_the_real_clients_captured_subscriptions_and_assignments_decode(capture):
    """JoinGroup and SyncGroup frames the clients sent (tests/unit/kafka/captures): each
    protocol's metadata is a subscription to the captured topic; the leader's assignment
    gives it partition 0."""
    from raylog.kafka import codec

    frames = [line.split() for line in (CAPTURES / capture).read_text().splitlines() if not line.startswith("#")]
    joins = [
        codec.decode_request(bytes.fromhex(raw))[1] for key, _, raw in frames if int(key) == codec.ApiKey.JOIN_GROUP
    ]
    syncs = [
        codec.decode_request(bytes.fromhex(raw))[1] for key, _, raw in frames if int(key) == codec.ApiKey.SYNC_GROUP
    ]
    assert joins and syncs
    for join in joins:
        proposed = [(p["name"], decode_subscription(p["metadata"])) for p in join["protocols"]]
        assert [(name, sub.version) for name, sub in proposed] == CAPTURED_JOINS[capture]
        assert all(sub.topics == ("captured",) and not sub.owned_partitions for _, sub in proposed)
    for sync in syncs:
        (assignment,) = sync["assignments"]
        assert decode_assignment(assignment["assignment"]).partitions == (TP("captured", 0),)
