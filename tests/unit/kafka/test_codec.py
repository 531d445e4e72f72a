"""The Kafka protocol codec: every API at every supported version round-trips through its
compiled writer and reader, absent fields take their defaults, tagged fields are written only
when they differ from their defaults and unknown ones are skipped, records are never copied,
malformed frames raise InvalidRequestError only, and unsupported versions get a response a
client can read (ApiVersions at version 0, as KIP-511 has it)."""

from __future__ import annotations

import struct
import uuid

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raylog.errors import InvalidRequestError
from raylog.kafka import codec
from raylog.kafka.codec import primitives as prim
from raylog.kafka.codec.messages import MESSAGES, SUPPORTED, ApiKey, Field, parse_table

CASES = [
    (kind, key, version)
    for key, (low, high) in sorted(SUPPORTED.items())
    for kind in ("request", "response")
    for version in range(low, high + 1)
]
IDS = [f"{MESSAGES[(k, kind)].name}-{kind}-v{v}" for kind, k, v in CASES]

INTS = {
    "int8": st.integers(-(2**7), 2**7 - 1),
    "int16": st.integers(-(2**15), 2**15 - 1),
    "int32": st.integers(-(2**31), 2**31 - 1),
    "int64": st.integers(-(2**63), 2**63 - 1),
    "uint16": st.integers(0, 2**16 - 1),
}


EMPTY = {"string": "", "bytes": b"", "records": b""}


def value_strategy(f: Field, version: int, flexible: bool):
    """Values of field ``f`` that its version can carry."""
    t = f.type
    if t in INTS:
        base = INTS[t]
    elif t == "bool":
        base = st.booleans()
    elif t == "float64":
        base = st.floats(allow_nan=False)
    elif t == "uuid":
        base = st.uuids()
    elif t == "string":
        base = st.text(max_size=12)
    elif t in ("bytes", "records"):
        base = st.binary(max_size=24)
    elif t == "{}":
        base = body_strategy(f.fields, version, flexible)
    elif t == "[]":
        base = st.lists(body_strategy(f.fields, version, flexible), max_size=3)
    else:
        element = Field("e", f.element, f.versions)
        base = st.lists(value_strategy(element, version, flexible), max_size=4)
    return st.none() | base if f.nullable_in(version) else base


def body_strategy(fields: list[Field], version: int, flexible: bool):
    present = {f.name: value_strategy(f, version, flexible) for f in fields if version in f.versions}
    return st.fixed_dictionaries(present)


def expected(fields: list[Field], version: int, body: dict) -> dict:
    """What the reader returns for ``body``: every field, defaults where absent at ``version``."""
    out = {}
    for f in fields:
        if version not in f.versions:
            out[f.name] = f.default_value()
            continue
        value = body.get(f.name, f.default_value())
        if value is None and not f.nullable_in(version) and f.tag is None:
            value = EMPTY.get(f.type, [])  # None where null cannot be written reads back empty
        if value is not None and f.type == "[]":
            value = [expected(f.fields, version, e) for e in value]
        elif value is not None and f.type == "{}":
            value = expected(f.fields, version, value)
        out[f.name] = value
    return out


def plain(value):
    """Memoryviews as bytes, recursively, to compare decoded bodies."""
    if isinstance(value, memoryview):
        return value.tobytes()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def joined(buffers) -> bytes:
    return b"".join(memoryview(b).cast("B").tobytes() for b in buffers)


def round_trip(kind: str, key: ApiKey, version: int, body: dict) -> dict:
    header = codec.RequestHeader(key, version, 12345, "client-1")
    if kind == "request":
        frame = joined(codec.encode_request(header, body))
        assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
        decoded_header, decoded = codec.decode_request(frame[4:])
        assert decoded_header == header
        return decoded
    frame = joined(codec.encode_response(header, body))
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
    correlation_id, decoded = codec.decode_response(key, version, frame[4:])
    assert correlation_id == 12345
    return decoded


@pytest.mark.parametrize(("kind", "key", "version"), CASES, ids=IDS)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_message_round_trips_at_every_version(kind, key, version, data):
    message = MESSAGES[(key, kind)]
    body = data.draw(body_strategy(message.fields, version, message.is_flexible(version)))
    if key == ApiKey.API_VERSIONS and kind == "response" and body.get("error_code") == 35:
        body["error_code"] = 0  # read back at version 0, as clients do: tested below
    assert plain(round_trip(kind, key, version, body)) == expected(message.fields, version, body)


@pytest.mark.parametrize(("kind", "key", "version"), CASES, ids=IDS)
def test_an_empty_body_encodes_every_default(kind, key, version):
    message = MESSAGES[(key, kind)]
    assert plain(round_trip(kind, key, version, {})) == expected(message.fields, version, {})


def test_defaults_follow_the_table():
    header = codec.RequestHeader(ApiKey.FETCH, 11, 1, None)
    _, body = codec.decode_request(joined(codec.encode_request(header, {}))[4:])
    assert body["replica_id"] == -1 and body["max_bytes"] == 2**31 - 1 and body["session_epoch"] == -1
    assert body["cluster_id"] is None and body["rack_id"] == "" and body["topics"] == []
    _, metadata = codec.decode_response(
        3, 12, joined(codec.encode_response(header._replace(api_key=3, api_version=12), {}))[4:]
    )
    assert metadata["controller_id"] == -1 and metadata["cluster_id"] is None
    assert metadata["cluster_authorized_operations"] == -(2**31)


def test_a_produce_request_at_v9_has_the_bytes_the_protocol_defines():
    """Flexible versions: compact strings and arrays (length + 1), tagged-field sections, header v2."""
    header = codec.RequestHeader(ApiKey.PRODUCE, 9, 7, "me")
    body = {
        "acks": -1,
        "timeout_ms": 1000,
        "topic_data": [{"name": "t", "partition_data": [{"index": 2, "records": b"RB"}]}],
    }
    frame = joined(codec.encode_request(header, body))
    assert frame[4:] == (
        struct.pack(">hhih", 0, 9, 7, 2) + b"me" + b"\x00"  # header v2: client id, no tags
        + b"\x00" + struct.pack(">hi", -1, 1000)  # null transactional id, acks, timeout
        + b"\x02" + b"\x02t" + b"\x02" + struct.pack(">i", 2) + b"\x03RB" + b"\x00" + b"\x00"  # topics, tags
        + b"\x00"  # the request's tagged fields
    )  # fmt: skip
    classic = joined(codec.encode_request(header._replace(api_version=7), body))
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
    assert classic[4:] == (
        struct.pack(">hhih", 0, 7, 7, 2) + b"me"
        + b"\xff\xff" + struct.pack(">hi", -1, 1000)
        + struct.pack(">ih", 1, 1) + b"t" + struct.pack(">iii", 1, 2, 2) + b"RB"
    )  # fmt: skip


def test_produce_records_are_views_of_the_frame_and_fetch_records_are_passed_through():
    records = [bytes([i]) * (1000 + i) for i in range(3)]
    header = codec.RequestHeader(ApiKey.PRODUCE, 8, 1, "p")
    body = {
        "acks": 1,
        "topic_data": [{"name": "t", "partition_data": [{"index": i, "records": r} for i, r in enumerate(records)]}],
    }
    frame = bytearray(joined(codec.encode_request(header, body))[4:])
    _, decoded = codec.decode_request(frame)
    views = [p["records"] for p in decoded["topic_data"][0]["partition_data"]]
    assert all(isinstance(v, memoryview) and v.obj is frame for v in views)
    assert [v.tobytes() for v in views] == records

    array = np.frombuffer(records[0], dtype=np.uint8)
    view = memoryview(records[1])
    fetch = {
        "responses": [
            {
                "topic": "t",
                "partitions": [
                    {"partition_index": 0, "records": [array, view]},
                    {"partition_index": 1, "records": records[2]},
                ],
            }
        ]
    }
    buffers = codec.encode_response(codec.RequestHeader(ApiKey.FETCH, 12, 9, "c"), fetch)
    assert (
        any(b is array for b in buffers) and any(b is view for b in buffers) and any(b is records[2] for b in buffers)
    )
    _, decoded = codec.decode_response(1, 12, joined(buffers)[4:])
    parts = decoded["responses"][0]["partitions"]
    assert parts[0]["records"].tobytes() == records[0] + records[1] and parts[1]["records"].tobytes() == records[2]


def test_null_and_empty_records():
    """Records left out of a Fetch response are empty, not null (kafka-python cannot read null records)."""
    fetch = {
        "responses": [
            {
                "topic": "t",
                "partitions": [
                    {"partition_index": 0, "records": None},
                    {"partition_index": 1, "records": b""},
                    {"partition_index": 2, "records": []},
                    {"partition_index": 3},
                ],
            }
        ]
    }
    for version in (4, 12):
        frame = joined(codec.encode_response(codec.RequestHeader(ApiKey.FETCH, version, 1, None), fetch))
        _, decoded = codec.decode_response(1, version, frame[4:])
        assert [plain(p["records"]) for p in decoded["responses"][0]["partitions"]] == [None, b"", b"", b""]


def test_tagged_fields_are_written_only_when_they_differ_from_their_defaults():
    header = codec.RequestHeader(ApiKey.API_VERSIONS, 3, 1, None)
    plain_frame = joined(codec.encode_response(header, {"api_keys": []}))
    assert plain_frame.endswith(b"\x00")  # no tagged fields
    features = [{"name": "metadata.version", "min_version": 1, "max_version": 20}]
    frame = joined(codec.encode_response(header, {"supported_features": features, "zk_migration_ready": True}))
    _, body = codec.decode_response(18, 3, frame[4:])
    assert body["supported_features"] == features and body["zk_migration_ready"] is True
    assert body["finalized_features_epoch"] == -1 and body["finalized_features"] == []
    # ApiVersions answers with response header v0 (no tagged fields after the correlation id).
    assert frame[4:8] == struct.pack(">i", 1) and frame[8:10] == b"\x00\x00"

    fetch = {"responses": [{"topic": "t", "partitions": [{"partition_index": 0, "current_leader": {"leader_id": 3}}]}]}
    _, body = codec.decode_response(
        1, 12, joined(codec.encode_response(header._replace(api_key=1, api_version=12), fetch))[4:]
    )
    partition = body["responses"][0]["partitions"][0]
    assert partition["current_leader"] == {"leader_id": 3, "leader_epoch": -1}
    assert partition["diverging_epoch"] == {"epoch": -1, "end_offset": -1}


def _with_tags(tags: list[tuple[int, bytes]]) -> bytes:
    out = bytearray(prim.uvarint_bytes(len(tags)))
    for tag, data in tags:
        out += prim.uvarint_bytes(tag) + prim.uvarint_bytes(len(data)) + data
    return bytes(out)


def test_unknown_tagged_fields_are_skipped_in_headers_and_bodies():
    """A Fetch v12 request with unknown tags in its header and body, and a known one (cluster id)."""
    cluster_id = bytearray()
    prim.write_string(cluster_id, "kafka-cluster", True, True)
    header = struct.pack(">hhih", 1, 12, 77, 3) + b"abc" + _with_tags([(5, b"\x01\x02\x03")])
    body = (
        struct.pack(">iiiibii", -1, 500, 1, 1 << 20, 1, 0, -1) + b"\x01" + b"\x01" + b"\x01"
    )  # no topics, none forgotten, rack ""
    frame = header + body + _with_tags([(0, bytes(cluster_id)), (9, b"unknown tag"), (300, b"")])
    decoded_header, decoded = codec.decode_request(frame)
    assert decoded_header == (ApiKey.FETCH, 12, 77, "abc")
    assert (
        decoded["cluster_id"] == "kafka-cluster" and decoded["max_wait_ms"] == 500 and decoded["isolation_level"] == 1
    )
    assert decoded["topics"] == [] and decoded["forgotten_topics_data"] == [] and decoded["rack_id"] == ""


def test_a_tagged_field_longer_than_its_size_is_malformed():
    header = struct.pack(">hhih", 1, 12, 1, -1) + b"\x00"
    body = struct.pack(">iiiibii", -1, 500, 1, 1 << 20, 1, 0, -1) + b"\x01\x01\x01"
    with pytest.raises(InvalidRequestError, match="cluster_id"):
        codec.decode_request(header + body + _with_tags([(0, b"\x05")]))  # a 4-byte string in 1 byte


VALID_REQUESTS = {
    (ApiKey.PRODUCE, 9): {
        "transactional_id": "tx",
        "acks": -1,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b"r" * 30}]}],
    },
    (ApiKey.PRODUCE, 3): {
        "acks": 1,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b"r" * 30}]}],
    },
    (ApiKey.FETCH, 12): {
        "topics": [{"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 5}]}],
        "cluster_id": "c",
    },
    (ApiKey.METADATA, 12): {"topics": [{"name": "t", "topic_id": uuid.uuid4()}]},
    (ApiKey.JOIN_GROUP, 5): {"group_id": "g", "protocols": [{"name": "range", "metadata": b"\x00\x01"}]},
    (ApiKey.DESCRIBE_CONFIGS, 4): {
        "resources": [{"resource_type": 2, "resource_name": "t", "configuration_keys": None}]
    },
}


@pytest.mark.parametrize(("key", "version"), list(VALID_REQUESTS), ids=lambda x: str(x))
def test_every_truncation_is_an_invalid_request_and_trailing_bytes_are_ignored(key, version):
    frame = joined(codec.encode_request(codec.RequestHeader(key, version, 1, "cid"), VALID_REQUESTS[(key, version)]))[
        4:
    ]
    codec.decode_request(frame)
    for end in range(len(frame)):
        with pytest.raises(InvalidRequestError):
            codec.decode_request(frame[:end])
    # Kafka's parser ignores bytes after a complete request body (librdkafka sends 3 after an
    # all-topics Metadata v9+ request); a frame that does not decode is still refused.
    assert codec.decode_request(frame + b"\x00\x00\x00") == codec.decode_request(frame)


@settings(max_examples=400, deadline=None)
@given(
    key=st.sampled_from(sorted(SUPPORTED)),
    offset=st.integers(0, 2),
    tail=st.binary(max_size=80),
)
def test_random_bytes_never_raise_anything_but_typed_errors(key, offset, tail):
    low, high = SUPPORTED[key]
    frame = struct.pack(">hhih", key, low + offset % (high - low + 1), 3, 1) + b"c" + tail
    try:
        header, body = codec.decode_request(frame)
    except InvalidRequestError:
        return
    assert header.api_key == key and isinstance(body, dict)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), index=st.integers(0, 2**31))
def test_flipped_bytes_in_valid_requests_raise_only_typed_errors(data, index):
    key, version = data.draw(st.sampled_from(sorted(VALID_REQUESTS)))
    frame = bytearray(
        joined(codec.encode_request(codec.RequestHeader(key, version, 1, "c"), VALID_REQUESTS[(key, version)]))[4:]
    )
    i = index % len(frame)
    frame[i] = data.draw(st.integers(0, 255))
    try:
        codec.decode_request(frame)
    except (InvalidRequestError, codec.UnsupportedVersionError):
        pass


def test_a_huge_array_count_is_refused_without_allocating():
    frame = struct.pack(">hhih", 3, 4, 1, -1) + struct.pack(">i", 2**31 - 1)
    with pytest.raises(InvalidRequestError, match="topics"):
        codec.decode_request(frame)
    frame = struct.pack(">hhih", 15, 0, 1, -1) + struct.pack(">i", 2**31 - 1)  # DescribeGroups: an array of strings
    with pytest.raises(InvalidRequestError):
        codec.decode_request(frame)


def test_short_frames_and_bad_strings_are_invalid_requests():
    with pytest.raises(InvalidRequestError, match="shorter than a request header"):
        codec.decode_request(b"\x00\x03\x00")
    with pytest.raises(InvalidRequestError, match="client id"):
        codec.decode_request(struct.pack(">hhih", 3, 1, 1, 10) + b"abc")
    bad_utf8 = struct.pack(">hhih", 3, 1, 1, -1) + struct.pack(">ih", 1, 2) + b"\xff\xfe"
    with pytest.raises(InvalidRequestError, match="UTF-8|utf-8"):
        codec.decode_request(bad_utf8)
    null_name = struct.pack(">hhih", 3, 1, 1, -1) + struct.pack(">ih", 1, -1)  # names are nullable from v10
    with pytest.raises(InvalidRequestError, match="not nullable"):
        codec.decode_request(null_name)


def test_unknown_apis_and_versions_raise_unsupported_version_with_the_header():
    with pytest.raises(codec.UnsupportedVersionError) as err:
        codec.decode_request(struct.pack(">hhih", 3, 13, 42, 2) + b"id")
    assert err.value.header == (ApiKey.METADATA, 13, 42, "id") and err.value.code == 35
    assert "versions 0-12 are supported" in str(err.value)
    with pytest.raises(codec.UnsupportedVersionError) as err:
        codec.decode_request(struct.pack(">hhih", 1000, 0, 43, -1))
    assert err.value.header == (1000, 0, 43, None) and "unknown" in str(err.value)
    with pytest.raises(codec.UnsupportedVersionError):
        codec.decode_request(struct.pack(">hhih", 0, 2, 1, -1) + bytes(20))  # Produce v2 is below our minimum
    answer = joined(codec.error_response(err.value.header, 35))
    assert answer == struct.pack(">iih", 6, 43, 35)


def test_an_api_versions_request_at_an_unsupported_version_gets_a_v0_answer_and_the_client_retries():
    """KIP-511: a client sends its newest ApiVersions (v4 here), reads the v0 answer with
    UNSUPPORTED_VERSION and the supported list, and retries at the highest version both know."""
    request = struct.pack(">hhih", 18, 4, 1, 6) + b"client" + b"\x00" + b"\x08librdkafka\x072.16.0\x00"
    with pytest.raises(codec.UnsupportedVersionError) as err:
        codec.decode_request(request)
    answer = joined(codec.error_response(err.value.header, 35))
    assert answer[4:10] == struct.pack(">ih", 1, 35)  # header v0, then the error code
    correlation_id, body = codec.decode_response(18, 3, answer[4:])
    assert correlation_id == 1 and body["error_code"] == 35
    versions = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}
    assert versions == {int(k): v for k, v in SUPPORTED.items()}

    retry_version = min(4, versions[18][1])
    retry = joined(
        codec.encode_request(
            codec.RequestHeader(18, retry_version, 2, "client"),
            {"client_software_name": "librdkafka", "client_software_version": "2.16.0"},
        )
    )
    header, body = codec.decode_request(retry[4:])
    assert header.api_version == 3 and body == {
        "client_software_name": "librdkafka",
        "client_software_version": "2.16.0",
    }
    reply = joined(codec.encode_response(header, {"api_keys": codec.supported_api_keys()}))
    _, body = codec.decode_response(18, 3, reply[4:])
    assert body["error_code"] == 0 and len(body["api_keys"]) == len(SUPPORTED)


def on_the_wire(fields: list[Field], version: int, body: dict) -> dict:
    """Only the fields of ``body`` that ``version`` carries."""
    out = {}
    for f in fields:
        if version in f.versions:
            value = body[f.name]
            if f.type == "[]" and value is not None:
                value = [on_the_wire(f.fields, version, e) for e in value]
            elif f.type == "{}" and value is not None:
                value = on_the_wire(f.fields, version, value)
            out[f.name] = value
    return out


def error_codes(value, found=None) -> list[int]:
    """Every error code anywhere in a decoded body."""
    found = [] if found is None else found
    if isinstance(value, dict):
        for k, v in value.items():
            if k in ("error_code", "partition_error_code"):
                found.append(v)
            else:
                error_codes(v, found)
    elif isinstance(value, list):
        for v in value:
            error_codes(v, found)
    return found


SAMPLE_REQUESTS = {
    ApiKey.PRODUCE: {
        "topic_data": [
            {"name": "a", "partition_data": [{"index": 0}, {"index": 3}]},
            {"name": "b", "partition_data": [{"index": 1}]},
        ]
    },
    ApiKey.FETCH: {"topics": [{"topic": "a", "partitions": [{"partition": 2}]}]},
    ApiKey.LIST_OFFSETS: {"topics": [{"name": "a", "partitions": [{"partition_index": 4}]}]},
    ApiKey.METADATA: {"topics": [{"name": "a"}, {"name": "b"}]},
    ApiKey.OFFSET_COMMIT: {"topics": [{"name": "a", "partitions": [{"partition_index": 1}]}]},
    ApiKey.OFFSET_FETCH: {
        "topics": [{"name": "a", "partition_indexes": [0, 1]}],
        "groups": [{"group_id": "g", "topics": [{"name": "a", "partition_indexes": [0, 1]}]}],
    },
    ApiKey.FIND_COORDINATOR: {"coordinator_keys": ["g1", "g2"]},
    ApiKey.LEAVE_GROUP: {"members": [{"member_id": "m1"}]},
    ApiKey.DESCRIBE_GROUPS: {"groups": ["g1", "g2"]},
    ApiKey.CONSUMER_GROUP_DESCRIBE: {"group_ids": ["g1", "g2"]},
    ApiKey.CREATE_TOPICS: {"topics": [{"name": "a"}, {"name": "b"}]},
    ApiKey.DELETE_TOPICS: {"topic_names": ["a", "b"], "topics": [{"name": "a"}, {"name": "b"}]},
    ApiKey.CREATE_PARTITIONS: {"topics": [{"name": "a"}, {"name": "b"}]},
    ApiKey.DESCRIBE_CONFIGS: {"resources": [{"resource_type": 2, "resource_name": "a"}]},
    ApiKey.ALTER_CONFIGS: {"resources": [{"resource_type": 2, "resource_name": "a"}]},
    ApiKey.INCREMENTAL_ALTER_CONFIGS: {"resources": [{"resource_type": 4, "resource_name": ""}]},
    ApiKey.DELETE_GROUPS: {"groups_names": ["g1", "g2"]},
    ApiKey.ELECT_LEADERS: {"topic_partitions": [{"topic": "a", "partitions": [0, 2]}]},
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: {"topics": [{"name": "a", "partitions": [{"partition_index": 1}]}]},
    ApiKey.DELETE_RECORDS: {"topics": [{"name": "a", "partitions": [{"partition_index": 1, "offset": 4}]}]},
    ApiKey.OFFSET_DELETE: {"group_id": "g", "topics": [{"name": "a", "partitions": [{"partition_index": 1}]}]},
    ApiKey.ALTER_CLIENT_QUOTAS: {"entries": [{"entity": [{"entity_type": "client-id", "entity_name": "etl"}]}]},
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: {"deletions": [{"name": "bob"}], "upsertions": [{"name": "alice"}]},
    ApiKey.DESCRIBE_PRODUCERS: {"topics": [{"name": "a", "partition_indexes": [0, 1]}]},
    ApiKey.DESCRIBE_TRANSACTIONS: {"transactional_ids": ["t1", "t2"]},
    ApiKey.OFFSET_FOR_LEADER_EPOCH: {"topics": [{"topic": "a", "partitions": [{"partition": 0}]}]},
    ApiKey.ADD_PARTITIONS_TO_TXN: {"v3_and_below_topics": [{"name": "a", "partitions": [0, 1]}]},
    ApiKey.TXN_OFFSET_COMMIT: {"topics": [{"name": "a", "partitions": [{"partition_index": 1}]}]},
    ApiKey.CREATE_ACLS: {"creations": [{"resource_type": 2, "resource_name": "a"}, {"resource_type": 3}]},
    ApiKey.DELETE_ACLS: {"filters": [{"resource_type_filter": 1}]},
}


@pytest.mark.parametrize(("key", "version"), [(k, v) for kind, k, v in CASES if kind == "response"])
def test_error_response_is_a_valid_response_saying_the_code_everywhere(key, version):
    header = codec.RequestHeader(key, version, 99, "c")
    request = SAMPLE_REQUESTS.get(key)
    correlation_id, body = codec.decode_response(key, version, joined(codec.error_response(header, 7, request))[4:])
    codes = error_codes(on_the_wire(MESSAGES[(key, "response")].fields, version, body))
    assert correlation_id == 99 and codes and set(codes) == {7}, body
    if key == ApiKey.PRODUCE:
        assert [(t["name"], [p["index"] for p in t["partition_responses"]]) for t in body["responses"]] == [
            ("a", [0, 3]),
            ("b", [1]),
        ]
    if key == ApiKey.METADATA:
        assert [t["name"] for t in body["topics"]] == ["a", "b"]
    if key == ApiKey.FETCH:
        assert body["responses"][0]["partitions"][0]["partition_index"] == 2
    _, without_request = codec.decode_response(key, version, joined(codec.error_response(header, 7))[4:])
    assert set(error_codes(on_the_wire(MESSAGES[(key, "response")].fields, version, without_request))) <= {7}


def test_error_response_at_an_unsupported_version_answers_at_the_nearest_supported_one():
    buffers = codec.error_response(codec.RequestHeader(ApiKey.PRODUCE, 11, 5, "c"), 35, SAMPLE_REQUESTS[ApiKey.PRODUCE])
    _, body = codec.decode_response(0, 9, joined(buffers)[4:])
    assert set(error_codes(body)) == {35}


def test_bad_bodies_raise_encode_errors():
    header = codec.RequestHeader(ApiKey.METADATA, 9, 1, None)
    with pytest.raises(codec.EncodeError, match="Metadata v9 response"):
        codec.encode_response(header, {"brokers": [{"node_id": "one"}]})
    with pytest.raises(codec.EncodeError):
        codec.encode_response(header, {"throttle_time_ms": 2**40})
    with pytest.raises(codec.EncodeError):
        codec.encode_response(header, {"topics": [{"name": 5}]})
    with pytest.raises(codec.EncodeError):
        codec.encode_response(header, {"topics": ["not a dict"]})
    with pytest.raises(codec.UnsupportedVersionError):
        codec.encode_response(header._replace(api_version=13), {})


def test_uuids_are_read_as_uuid_and_written_from_uuid_bytes_or_none():
    header = codec.RequestHeader(ApiKey.METADATA, 12, 1, None)
    topic_id = uuid.uuid4()
    for given_id, expected_id in ((topic_id, topic_id), (topic_id.bytes, topic_id), (None, uuid.UUID(int=0))):
        _, body = codec.decode_response(
            3, 12, joined(codec.encode_response(header, {"topics": [{"name": "t", "topic_id": given_id}]}))[4:]
        )
        assert body["topics"][0]["topic_id"] == expected_id


def test_varints():
    for value in (0, 1, 63, 64, 127, 128, 300, 2**21, 2**31 - 1, -1, -64, -65, -(2**31)):
        out = bytearray()
        prim.write_varint(out, value)
        assert prim.read_varint(memoryview(out), 0) == (value, len(out))
    for value in (0, 2**35, 2**63 - 1, -(2**63)):
        out = bytearray()
        prim.write_varlong(out, value)
        assert prim.read_varlong(memoryview(out), 0) == (value, len(out))
    assert prim.uvarint_bytes(300) == b"\xac\x02" and prim.uvarint_size(300) == 2
    with pytest.raises(prim.Malformed):
        prim.read_uvarint(memoryview(b"\xff\xff\xff\xff\xff\x01"), 0)
    with pytest.raises(prim.Truncated):
        prim.read_uvarint(memoryview(b"\xff"), 0)
    with pytest.raises(ValueError):
        prim.write_varint(bytearray(), 2**31)


def test_the_table_refuses_bad_lines():
    with pytest.raises(ValueError, match="unknown type"):
        parse_table("X request 0 flexible -\n  a int128 0+\n")
    with pytest.raises(ValueError, match="cannot be nullable"):
        parse_table("X request 0 flexible -\n  a int32 0+ null 0+\n")
    with pytest.raises(ValueError, match="tagged field"):
        parse_table("X request 0 flexible 3+\n  a int32 0+ tag 0\n")
    with pytest.raises(ValueError, match="repeats"):
        parse_table("X request 0 flexible -\n  a int32 0+\n  a int16 0+\n")
