"""Request frames captured from real clients (confluent-kafka 2.16.1 with librdkafka 2.16.0,
kafka-python 3.0.12, aiokafka 0.14.0, kcat 1.7.1 with librdkafka 2.0.2) decode to what those
clients sent. The frames were recorded by captures/capture.py, whose minimal server answered
them with this codec: the three libraries got through ApiVersions, Metadata, an idempotent or
plain Produce, a consumer group's join, sync, offset fetch, list offsets and fetch, a commit
and a leave, and kcat through metadata, produce, list offsets and fetch, so those responses
were read by the real clients too."""

from __future__ import annotations

import os
import struct

import pytest

from raylog.kafka import codec
from raylog.kafka.codec import ApiKey

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "captures")
CLIENTS = {
    "confluent_kafka": "capture-confluent",
    "kafka_python": "capture-kafka-python",
    "aiokafka": "capture-aiokafka",
    "kcat": "capture-kcat",
}
GROUP_CLIENTS = ["confluent_kafka", "kafka_python", "aiokafka"]


def captured(client: str) -> dict[tuple[int, int], bytes]:
    frames = {}
    with open(os.path.join(HERE, f"{client}.txt")) as lines:
        for line in lines:
            if not line.startswith("#"):
                key, version, data = line.split()
                frames[(int(key), int(version))] = bytes.fromhex(data)
    return frames


def decoded(client: str) -> dict[ApiKey, tuple[int, dict]]:
    """``{api: (version, body)}`` of every supported frame the client sent."""
    out = {}
    for (key, version), frame in sorted(captured(client).items()):
        if version > codec.SUPPORTED[ApiKey(key)][1]:
            continue
        header, body = codec.decode_request(frame)
        assert header.client_id == CLIENTS[client] and (header.api_key, header.api_version) == (key, version)
        out[header.api_key] = (version, body)
    return out


#: What each client negotiated: the version of each api it used against our ApiVersions answer.
VERSIONS = {
    "confluent_kafka": {
        ApiKey.API_VERSIONS: 3, ApiKey.METADATA: 12, ApiKey.INIT_PRODUCER_ID: 4, ApiKey.PRODUCE: 9,
        ApiKey.FIND_COORDINATOR: 2, ApiKey.JOIN_GROUP: 5, ApiKey.SYNC_GROUP: 3, ApiKey.HEARTBEAT: 3,
        ApiKey.OFFSET_FETCH: 8, ApiKey.LIST_OFFSETS: 7, ApiKey.FETCH: 12, ApiKey.OFFSET_COMMIT: 8,
        ApiKey.LEAVE_GROUP: 1, ApiKey.CREATE_TOPICS: 4,
    },
    "kafka_python": {
        ApiKey.API_VERSIONS: 3, ApiKey.METADATA: 12, ApiKey.INIT_PRODUCER_ID: 4, ApiKey.PRODUCE: 9,
        ApiKey.FIND_COORDINATOR: 4, ApiKey.JOIN_GROUP: 7, ApiKey.SYNC_GROUP: 5, ApiKey.OFFSET_FETCH: 8,
        ApiKey.LIST_OFFSETS: 7, ApiKey.FETCH: 12, ApiKey.OFFSET_COMMIT: 8, ApiKey.LEAVE_GROUP: 4,
    },
    "aiokafka": {
        ApiKey.API_VERSIONS: 0, ApiKey.METADATA: 5, ApiKey.PRODUCE: 7, ApiKey.FIND_COORDINATOR: 1,
        ApiKey.JOIN_GROUP: 5, ApiKey.SYNC_GROUP: 3, ApiKey.OFFSET_FETCH: 3, ApiKey.LIST_OFFSETS: 3,
        ApiKey.FETCH: 11, ApiKey.OFFSET_COMMIT: 3, ApiKey.LEAVE_GROUP: 1,
    },
    "kcat": {ApiKey.API_VERSIONS: 3, ApiKey.METADATA: 4, ApiKey.PRODUCE: 7, ApiKey.LIST_OFFSETS: 2, ApiKey.FETCH: 11},
}  # fmt: skip


@pytest.mark.parametrize("client", CLIENTS)
def test_every_captured_frame_decodes_at_the_version_the_client_negotiated(client):
    assert {key: version for key, (version, _) in decoded(client).items()} == VERSIONS[client]


@pytest.mark.parametrize("client", CLIENTS)
def test_captured_produce_requests_carry_a_v2_record_batch_uncopied(client):
    version, body = decoded(client)[ApiKey.PRODUCE]
    idempotent = client in ("confluent_kafka", "kafka_python")
    assert body["acks"] == (1 if client == "aiokafka" else -1) and body["transactional_id"] is None
    (topic,) = body["topic_data"]
    (partition,) = topic["partition_data"]
    assert topic["name"] == "captured" and partition["index"] == 0
    records = partition["records"]
    assert isinstance(records, memoryview)
    base_offset, batch_length, _epoch, magic = struct.unpack_from(">qiib", records, 0)
    assert base_offset == 0 and magic == 2 and batch_length + 12 == len(records)
    producer_id, _producer_epoch, base_sequence, count = struct.unpack_from(">qhii", records, 43)
    assert count >= 1
    assert producer_id == (1000 if idempotent else -1)  # the producer id capture.py's server gave
    if idempotent:
        assert base_sequence == 0  # (aiokafka's plain batches say 0 too, where Kafka's own clients say -1)


@pytest.mark.parametrize("client", GROUP_CLIENTS)
def test_captured_group_requests(client):
    requests = decoded(client)
    _, join = requests[ApiKey.JOIN_GROUP]
    assert join["group_id"] == "capture-group" and join["member_id"] == "" and join["protocol_type"] == "consumer"
    assert {p["name"] for p in join["protocols"]} <= {"range", "roundrobin", "cooperative-sticky"}
    assert all(b"captured" in p["metadata"] for p in join["protocols"])
    _, sync = requests[ApiKey.SYNC_GROUP]
    assert sync["generation_id"] == 1 and [a["member_id"] for a in sync["assignments"]] == ["member-1"]
    _, commit = requests[ApiKey.OFFSET_COMMIT]
    assert commit["generation_id_or_member_epoch"] == 1 and commit["member_id"] == "member-1"
    assert [
        (t["name"], [(p["partition_index"], p["committed_offset"]) for p in t["partitions"]]) for t in commit["topics"]
    ] == [("captured", [(0, 2)])]
    version, fetch_offsets = requests[ApiKey.OFFSET_FETCH]
    if version >= 8:
        (group,) = fetch_offsets["groups"]
        assert group["group_id"] == "capture-group" and group["topics"] == [
            {"name": "captured", "partition_indexes": [0]}
        ]
    else:
        assert fetch_offsets["group_id"] == "capture-group"
        assert fetch_offsets["topics"] == [{"name": "captured", "partition_indexes": [0]}]
    version, find = requests[ApiKey.FIND_COORDINATOR]
    assert (find["coordinator_keys"] if version >= 4 else [find["key"]]) == ["capture-group"]
    version, leave = requests[ApiKey.LEAVE_GROUP]
    assert (leave["members"][0]["member_id"] if version >= 3 else leave["member_id"]) == "member-1"


@pytest.mark.parametrize("client", CLIENTS)
def test_captured_fetch_and_list_offsets(client):
    requests = decoded(client)
    _, fetch = requests[ApiKey.FETCH]
    assert fetch["replica_id"] == -1 and fetch["max_wait_ms"] == 500 and fetch["min_bytes"] == 1
    assert [(t["topic"], [(p["partition"], p["fetch_offset"]) for p in t["partitions"]]) for t in fetch["topics"]] == [
        ("captured", [(0, 0)])
    ]
    assert fetch["isolation_level"] == (1 if client in ("confluent_kafka", "kcat") else 0)  # librdkafka: read_committed
    _, offsets = requests[ApiKey.LIST_OFFSETS]
    # kcat -o beginning asks for the earliest offset; the groups had no committed offset and reset to the latest.
    assert offsets["topics"][0]["partitions"][0]["timestamp"] == (-2 if client == "kcat" else -1)


def test_captured_client_software_and_admin_requests():
    _, versions = decoded("confluent_kafka")[ApiKey.API_VERSIONS]
    assert versions == {
        "client_software_name": "confluent-kafka-python",
        "client_software_version": "2.16.1-rdkafka-2.16.0",
    }
    _, versions = decoded("kafka_python")[ApiKey.API_VERSIONS]
    assert versions == {"client_software_name": "kafka-python", "client_software_version": "3.0.12"}
    _, create = decoded("confluent_kafka")[ApiKey.CREATE_TOPICS]
    assert [(t["name"], t["num_partitions"], t["replication_factor"]) for t in create["topics"]] == [("created", 3, 1)]
    _, metadata = decoded("confluent_kafka")[ApiKey.METADATA]
    assert [t["name"] for t in metadata["topics"]] == ["captured"] and metadata["allow_auto_topic_creation"] is True


def test_kafka_python_asks_api_versions_v4_first_and_reads_our_v0_answer():
    """kafka-python 3 opens with ApiVersions v4, which raylog does not support: the captured
    frame gets UNSUPPORTED_VERSION at version 0 with our list, and its next request is v3."""
    frame = captured("kafka_python")[(18, 4)]
    with pytest.raises(codec.UnsupportedVersionError) as err:
        codec.decode_request(frame)
    assert err.value.header == (ApiKey.API_VERSIONS, 4, err.value.header.correlation_id, "capture-kafka-python")
    answer = b"".join(bytes(b) for b in codec.error_response(err.value.header, 35))
    correlation_id, body = codec.decode_response(18, 4 - 1, answer[4:])
    assert correlation_id == err.value.header.correlation_id and body["error_code"] == 35
    assert {k["api_key"]: k["max_version"] for k in body["api_keys"]}[18] == 3
    assert decoded("kafka_python")[ApiKey.API_VERSIONS][0] == 3
