"""The Kafka listener itself, spoken to byte by byte: framing, pipelining, errors that keep the
connection and errors that close it, routing to leaders, long polls, and a listener that Ray
restarts. (Real clients are in test_clients.py and the other files of this folder.)"""

from __future__ import annotations

import struct
import time

import pytest
import ray

from raylog import Producer
from raylog.actors.kafka.fleet import listener_name
from raylog.common import record_batch
from raylog.common.names import NAMESPACE
from raylog.kafka import codec, records
from raylog.protocol import MAX_REQUEST_BYTES
from tests.helpers import wait_until
from tests.kafka_wire import READ_TIMEOUT_S, Wire

ApiKey = codec.ApiKey


def _metadata(wire: Wire, topic: str) -> dict:
    return wire.ask(ApiKey.METADATA, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})


def _leader_address(wire: Wire, topic: str, partition: int = 0) -> tuple[str, str]:
    """``(leader's address, another broker's address)`` of a partition, from Metadata (asked
    again while it answers LEADER_NOT_AVAILABLE, as a Kafka client does)."""
    answer = wait_until(
        lambda: (a := _metadata(wire, topic))["topics"][0]["partitions"][partition]["leader_id"] >= 0 and a,
        message=f"a leader of {topic}-{partition} in Metadata",
    )
    brokers = {b["node_id"]: f"{b['host']}:{b['port']}" for b in answer["brokers"]}
    leader = answer["topics"][0]["partitions"][partition]["leader_id"]
    other = next(b for b in brokers if b != leader)
    return brokers[leader], brokers[other]


def _produce_body(topic: str, partition: int, data: bytes, acks: int = 1) -> dict:
    return {
        "acks": acks,
        "timeout_ms": 30_000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": data}]}],
    }


def _kafka_batch(values: list[bytes]) -> bytes:
    """A Kafka v2 batch of ``values`` (built by raylog, converted by the listener's codec)."""
    return b"".join(bytes(part) for part in records.to_kafka(record_batch.build(values)))


def _fetch_body(topic: str, partition: int, offset: int, max_wait_ms: int = 0, min_bytes: int = 1) -> dict:
    return {
        "replica_id": -1,
        "max_wait_ms": max_wait_ms,
        "min_bytes": min_bytes,
        "max_bytes": 1 << 20,
        "topics": [
            {
                "topic": topic,
                "partitions": [{"partition": partition, "fetch_offset": offset, "partition_max_bytes": 1 << 20}],
            }
        ],
    }


@pytest.fixture
def wire(bootstrap):
    connection = Wire(bootstrap.split(",")[0])
    yield connection
    connection.close()


def test_api_versions_lists_what_the_codec_supports(wire):
    answer = wire.ask(ApiKey.API_VERSIONS, 3, {"client_software_name": "wire-test", "client_software_version": "1"})
    assert answer["error_code"] == 0
    assert {k["api_key"]: (k["min_version"], k["max_version"]) for k in answer["api_keys"]} == {
        int(k): v for k, v in codec.SUPPORTED.items()
    }


def test_metadata_advertises_every_brokers_listener(wire, bootstrap, kafka_cluster, kafka_topic):
    topic = kafka_topic(3, replication_factor=3)

    # A listener whose refresh from the controller is slow (a loaded machine) answers from its
    # cached metadata, where the new topic's leaders may not be yet: a Kafka client asks again
    # while a partition answers LEADER_NOT_AVAILABLE, and so does this test.
    def led() -> dict | None:
        answer = _metadata(wire, topic)
        return answer if all(p["error_code"] == 0 for p in answer["topics"][0]["partitions"]) else None

    answer = wait_until(led, message=f"every partition of {topic} led in Metadata")
    assert sorted(f"{b['host']}:{b['port']}" for b in answer["brokers"]) == sorted(bootstrap.split(","))
    (described,) = answer["topics"]
    assert described["error_code"] == 0 and described["name"] == topic and not described["is_internal"]
    assert described["topic_id"].hex == kafka_cluster.metadata(refresh=True).topics[topic].topic_id
    for p in described["partitions"]:
        assert p["error_code"] == 0 and p["leader_id"] in p["isr_nodes"] and sorted(p["replica_nodes"]) == [0, 1, 2]
    unknown = _metadata(wire, f"{topic}-missing")["topics"][0]
    assert unknown["error_code"] == 3  # UNKNOWN_TOPIC_OR_PARTITION: no auto-creation


def test_pipelined_requests_are_answered_in_order(wire, kafka_topic):
    topic = kafka_topic(1)
    leader_wire = Wire(_leader_address(wire, topic)[0])
    try:
        for i in range(20):
            leader_wire.send(ApiKey.PRODUCE, 9, _produce_body(topic, 0, _kafka_batch([b"%d" % i])))
            leader_wire.send(ApiKey.API_VERSIONS, 0, {})
        offsets = []
        while leader_wire.sent:
            header, body = leader_wire.receive()  # receive() checks each correlation id in turn
            if header.api_key == ApiKey.PRODUCE:
                (part,) = body["responses"][0]["partition_responses"]
                assert part["error_code"] == 0
                offsets.append(part["base_offset"])
        assert offsets == list(range(20))
    finally:
        leader_wire.close()


def test_a_read_pipelined_after_a_write_sees_it(wire, kafka_topic):
    """Reads run beside each other, never before an earlier write of the same connection."""
    topic = kafka_topic(1)
    leader = Wire(_leader_address(wire, topic)[0])
    latest = {"replica_id": -1, "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}]}
    try:
        for i in range(10):
            leader.send(ApiKey.PRODUCE, 9, _produce_body(topic, 0, _kafka_batch([b"%d" % i])))
            leader.send(ApiKey.LIST_OFFSETS, 7, latest)
            leader.send(ApiKey.METADATA, 12, {"topics": [{"name": topic}]})
        ends = []
        while leader.sent:
            header, body = leader.receive()
            if header.api_key == ApiKey.LIST_OFFSETS:
                ends.append(body["topics"][0]["partitions"][0]["offset"])
        assert ends == list(range(1, 11))
    finally:
        leader.close()


def _raw_request(wire: Wire, api_key: int, version: int, correlation_id: int) -> bytes:
    """Send a request header (v1) with no body for any api key and version; the response frame."""
    client = b"wire-test"
    frame = struct.pack(">hhih", api_key, version, correlation_id, len(client)) + client
    wire.sock.sendall(struct.pack(">i", len(frame)) + frame)
    return wire.exactly(struct.unpack(">i", wire.exactly(4))[0])


def test_an_unsupported_api_or_version_is_answered_and_the_connection_stays(wire):
    unknown_api = _raw_request(wire, 57, 0, 7)  # UpdateFeatures: not served
    assert struct.unpack(">ih", unknown_api[:6]) == (7, 35)  # UNSUPPORTED_VERSION
    too_new = _raw_request(wire, ApiKey.FETCH, 99, 8)  # answered at the newest Fetch raylog speaks
    correlation_id, body = codec.decode_response(ApiKey.FETCH, codec.SUPPORTED[ApiKey.FETCH][1], too_new)
    assert (correlation_id, body["error_code"]) == (8, 35)
    assert wire.ask(ApiKey.API_VERSIONS, 0, {})["error_code"] == 0


def test_an_oversized_or_malformed_frame_closes_the_connection(bootstrap):
    address = bootstrap.split(",")[0]
    too_big = Wire(address)
    too_big.sock.sendall(struct.pack(">i", MAX_REQUEST_BYTES + 1))
    assert too_big.closed()
    too_big.close()
    garbage = Wire(address)
    garbage.sock.sendall(struct.pack(">i", 6) + struct.pack(">hhh", 3, 1, 0))  # a header cut short
    assert garbage.closed()
    garbage.close()


def test_produce_goes_to_the_leader_and_nowhere_else(wire, kafka_topic, read_back):
    topic = kafka_topic(1, replication_factor=3)
    leader, follower = _leader_address(wire, topic)
    to_follower = Wire(follower)
    try:
        part = to_follower.ask(ApiKey.PRODUCE, 9, _produce_body(topic, 0, _kafka_batch([b"x"])))
        assert part["responses"][0]["partition_responses"][0]["error_code"] == 6  # NOT_LEADER_OR_FOLLOWER
    finally:
        to_follower.close()
    to_leader = Wire(leader)
    try:
        answer = to_leader.ask(ApiKey.PRODUCE, 9, _produce_body(topic, 0, _kafka_batch([b"a", b"b"]), acks=-1))
        assert answer["responses"][0]["partition_responses"][0]["error_code"] == 0
        two = _kafka_batch([b"c"]) + _kafka_batch([b"d"])
        answer = to_leader.ask(ApiKey.PRODUCE, 9, _produce_body(topic, 0, two))
        assert answer["responses"][0]["partition_responses"][0]["error_code"] == 87  # INVALID_RECORD
        corrupt = bytearray(_kafka_batch([b"e"]))
        corrupt[-1] ^= 0xFF
        answer = to_leader.ask(ApiKey.PRODUCE, 9, _produce_body(topic, 0, bytes(corrupt)))
        assert answer["responses"][0]["partition_responses"][0]["error_code"] == 2  # CORRUPT_MESSAGE
        to_leader.send(ApiKey.PRODUCE, 9, _produce_body(topic, 0, _kafka_batch([b"f"]), acks=0))
        to_leader.sent.pop()  # acks=0: no answer comes
        assert to_leader.ask(ApiKey.API_VERSIONS, 0, {})["error_code"] == 0
    finally:
        to_leader.close()
    assert [r.value for r in wait_until(lambda: _all_of(read_back(topic), 3), timeout_s=30)] == [b"a", b"b", b"f"]


def _all_of(found: list, count: int) -> list | None:
    return found if len(found) >= count else None


def test_a_long_poll_answers_when_a_record_arrives(wire, kafka_cluster, kafka_topic):
    topic = kafka_topic(1)
    leader = Wire(_leader_address(wire, topic)[0])
    try:
        empty = leader.ask(ApiKey.FETCH, 11, _fetch_body(topic, 0, 0))
        part = empty["responses"][0]["partitions"][0]
        assert part["error_code"] == 0 and part["high_watermark"] == 0 and not bytes(part["records"])
        leader.send(ApiKey.FETCH, 11, _fetch_body(topic, 0, 0, max_wait_ms=25_000))
        with Producer(kafka_cluster) as producer:
            producer.send(topic, b"late", partition=0).get(timeout=30)
        started = time.monotonic()
        _, answer = leader.receive()
        part = answer["responses"][0]["partitions"][0]
        assert part["error_code"] == 0 and part["high_watermark"] == 1
        assert time.monotonic() - started < READ_TIMEOUT_S
        table = record_batch.decode_table(records.to_raylog(bytes(part["records"])))
        assert table.column("value").to_pylist() == [b"late"]
    finally:
        leader.close()


def test_a_restarted_listener_listens_again(wire, kafka_cluster):
    metadata = kafka_cluster.metadata(refresh=True)
    broker = max(metadata.listeners)
    name = listener_name(kafka_cluster.cluster_name, broker, metadata.brokers[broker].node_id)
    killed = ray.get_actor(name, namespace=NAMESPACE)
    ray.kill(killed)
    # ray.kill returns at once; the dying process answers for a moment after it, and the
    # controller goes on listing it until its next round finds it dead, drops it and starts
    # another. The waits below passed on that stale state, and the controller dropped the
    # broker from the metadata while the next test's `raylog start` ran (2 of 3 brokers
    # printed, the full suite beside a busy core). So first the killed actor is gone and
    # another holds its name and answers.
    wait_until(lambda: _gone(killed), timeout_s=60, message=f"broker {broker}'s killed listener gone")
    wait_until(lambda: _replaced(name, killed), timeout_s=120, message=f"broker {broker}'s listener started again")
    host, port = metadata.listeners[broker]
    address = f"{host}:{port}"  # the controller starts it again on the same port
    answer = wait_until(
        lambda: _ask_at(address, ApiKey.API_VERSIONS, 0, {}), timeout_s=120, message=f"broker {broker}'s listener again"
    )
    assert answer["error_code"] == 0
    everyone = sorted(f"{h}:{p}" for h, p in metadata.listeners.values())
    wait_until(  # and every listener's Metadata advertises it again (each caches the controller's for a second)
        lambda: all(_advertised(a) == everyone for a in everyone),
        timeout_s=60,
        message="every listener advertising every listener where it was",
    )
    # The controller lists it too before the next test: a listener serves its cached answer
    # while a refresh is slow, so the listeners can agree before the controller does (the
    # full suite beside a busy core: the next test's `raylog start` missed broker 2's).
    wait_until(
        lambda: kafka_cluster.metadata(refresh=True).listeners == metadata.listeners,
        timeout_s=60,
        message="the controller listing every listener where it was",
    )


def _replaced(name: str, killed) -> bool:
    """Another actor than ``killed`` holds listener ``name``, and it answers."""
    try:
        actor = ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        return False
    if actor._actor_id == killed._actor_id:
        return False
    try:
        ray.get(actor.start.remote(), timeout=5)
    except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
        return False
    return True


def _gone(actor) -> bool:
    try:
        ray.get(actor.start.remote(), timeout=5)
    except ray.exceptions.RayActorError:
        return True
    except ray.exceptions.GetTimeoutError:
        pass
    return False


def _advertised(address: str) -> list[str] | None:
    answer = _ask_at(address, ApiKey.METADATA, 12, {"topics": []})
    return None if answer is None else sorted(f"{b['host']}:{b['port']}" for b in answer["brokers"])


def _ask_at(address: str, api_key: ApiKey, version: int, body: dict) -> dict | None:
    """One request on a new connection to ``address``: the answer, or None when none comes."""
    try:
        connection = Wire(address)
    except OSError:
        return None
    try:
        return connection.ask(api_key, version, body)
    except (OSError, AssertionError):
        return None
    finally:
        connection.close()


def test_raylog_start_prints_the_bootstrap_servers(run, kafka_cluster, bootstrap):
    code, out, err = run("start", "--kafka-port", "0", cluster_name=kafka_cluster.cluster_name)
    assert code == 0, err
    assert f"bootstrap.servers={bootstrap}" in out
    for address in bootstrap.split(","):
        assert f"kafka {address}" in out


def test_raylog_start_with_a_kafka_port_refuses_a_cluster_running_without_listeners(run):
    code, out, err = run("start", "--kafka-port", "0")  # the session's cluster: no listeners
    assert code != 0 and "already running without Kafka listeners" in err


def test_requests_sent_before_the_client_goes_away_still_complete(wire, kafka_topic, read_back):
    """An acks=0 produce whose client closes the connection at once is written all the same."""
    topic = kafka_topic(1)
    leader = Wire(_leader_address(wire, topic)[0])
    leader.send(ApiKey.PRODUCE, 9, _produce_body(topic, 0, _kafka_batch([b"fire", b"forget"]), acks=0))
    leader.close()
    found = wait_until(lambda: _all_of(read_back(topic), 2), timeout_s=60, message="the acks=0 records")
    assert [r.value for r in found] == [b"fire", b"forget"]


def test_a_batch_after_a_sequence_gap_is_refused_at_once(wire, kafka_topic, read_back):
    """Issue 25, defect 8: a Kafka connection delivers a producer's batches in order, so a
    batch past a gap means the earlier one is lost: Kafka answers OUT_OF_ORDER_SEQUENCE_NUMBER
    at once. raylog's listener made it wait for the missing batch as long as the request's
    timeout (here ten minutes: the read below gives up long before), holding a replica thread,
    with the retry of the missing batch queued behind it on the same connection."""
    topic = kafka_topic(1)
    leader, _ = _leader_address(wire, topic)
    to_leader = Wire(leader)

    def produce(values: list[bytes], sequence: int) -> int:
        batch = record_batch.build(values, producer_id=4242, producer_epoch=0, base_sequence=sequence)
        body = _produce_body(topic, 0, b"".join(bytes(p) for p in records.to_kafka(batch)), acks=-1)
        body["timeout_ms"] = 600_000
        return to_leader.ask(ApiKey.PRODUCE, 9, body)["responses"][0]["partition_responses"][0]["error_code"]

    try:
        assert produce([b"a", b"b"], 0) == 0
        assert produce([b"e"], 4) == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER: sequences 2-3 never came
        assert produce([b"c", b"d"], 2) == 0  # the client's retry of the missing batch
        assert produce([b"e"], 4) == 0
    finally:
        to_leader.close()
    assert [r.value for r in read_back(topic)] == [b"a", b"b", b"c", b"d", b"e"]


def test_a_throttled_produce_is_answered_as_kafka_answers_it(wire, kafka_topic, kafka_admin):
    """Quotas as Kafka applies them on the wire: a Produce v7 over the client's quota is
    answered at once with its throttle time, and the listener reads nothing more from that
    connection until the time has passed (KIP-219); a Produce v5 (before KIP-219) gets its
    answer only once its throttle time has passed."""
    from raylog.coordination.quotas import PRODUCER_BYTE_RATE

    # ~100 KB from a client not seen before, its rate counted over 10 s: about 5 s throttled.
    kafka_admin.alter_client_quotas({"wire-test": {PRODUCER_BYTE_RATE: 6_500}})
    connections = []
    try:
        for version in (7, 5):
            topic = kafka_topic(1)
            leader = Wire(_leader_address(wire, topic)[0])
            connections.append(leader)
            started = time.monotonic()
            answer = leader.ask(ApiKey.PRODUCE, version, _produce_body(topic, 0, _kafka_batch([b"t" * 100_000])))
            answered = time.monotonic()
            throttle_s = answer["throttle_time_ms"] / 1000
            assert answer["responses"][0]["partition_responses"][0]["error_code"] == 0
            assert throttle_s > 1, f"v{version} not throttled"
            if version >= 6:
                assert answered - started < throttle_s, f"answered after {answered - started:.1f} s"
                leader.ask(ApiKey.API_VERSIONS, 0, {})  # read once the connection is unmuted
                assert time.monotonic() - answered >= throttle_s * 0.9, "read before the throttle time passed"
            else:
                assert answered - started >= throttle_s * 0.9, "answered before the throttle time passed"
    finally:
        kafka_admin.alter_client_quotas({"wire-test": {PRODUCER_BYTE_RATE: None}})
        for connection in connections:
            connection.close()
