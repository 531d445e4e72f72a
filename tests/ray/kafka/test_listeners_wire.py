"""Several named listeners per broker (``listeners``, ``listener.security.protocol.map``,
``advertised.listeners``) with clients nobody here wrote, in their default settings but for
the security ones: confluent-kafka and kafka-python produce and consume through each
listener; each listener's Metadata and DescribeCluster answers give the brokers' addresses
on that listener only (and the advertised host where ``advertised.listeners`` names one); a
client that does not authenticate is closed out of the SASL listener and writes nothing.

``listeners_cluster`` is two brokers on this node, each with two listeners: PLAIN
(PLAINTEXT, advertising its bound 127.0.0.1) and SECURE (SASL_PLAINTEXT, bound on 127.0.0.1
and advertised as ``localhost``). Its raylog clients are ``User:admin`` (SCRAM-SHA-512, made
with the cluster), whom the Kafka clients of the SASL listener authenticate as.
"""

from __future__ import annotations

import uuid

import pytest

from raylog import Admin, NewTopic
from raylog.kafka import codec
from tests.helpers import wait_until
from tests.kafka_wire import Wire
from tests.ray.kafka.clients import deliver, records_of

#: A bound on one client call (not a measure).
TIMEOUT_S = 30.0
NUM_BROKERS = 2
PASSWORD = "admin-secret"
#: confluent-kafka's settings of each listener's clients (the SASL user is the cluster's admin).
CONFLUENT = {
    "PLAIN": {},
    "SECURE": {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "admin",
        "sasl.password": PASSWORD,
    },
}
#: kafka-python's.
KAFKA_PYTHON = {
    "PLAIN": {},
    "SECURE": {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "admin",
        "sasl_plain_password": PASSWORD,
    },
}
ApiKey = codec.ApiKey
#: SECURE's connections.max.reauth.ms, and its SCRAM-SHA-512's own (long: no test crosses them).
SECURE_REAUTH_MS, SECURE_SCRAM_REAUTH_MS = 600_000, 300_000


@pytest.fixture(scope="module")
def listeners_cluster(cluster, tmp_path_factory):
    """See the module docstring."""
    import raylog

    handle = raylog.connect(
        data_dir=str(tmp_path_factory.mktemp("raylog-listeners")),
        num_brokers=NUM_BROKERS,
        cluster_name=f"l{uuid.uuid4().hex[:8]}",
        config={
            "listeners": "PLAIN://127.0.0.1:0,SECURE://127.0.0.1:0",
            "listener.security.protocol.map": "PLAIN:PLAINTEXT,SECURE:SASL_PLAINTEXT",
            "advertised.listeners": "SECURE://localhost:0",
            # SECURE's own mechanisms and authentication lifetimes (KIP-368), PLAIN none.
            "listener.name.secure.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
            "listener.name.secure.connections.max.reauth.ms": str(SECURE_REAUTH_MS),
            "listener.name.secure.scram-sha-512.connections.max.reauth.ms": str(SECURE_SCRAM_REAUTH_MS),
            "offsets.topic.num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "group.initial.rebalance.delay.ms": "0",
        },
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="admin",
        sasl_plain_password=PASSWORD,
    )
    yield handle
    handle.shutdown()


@pytest.fixture(scope="module")
def servers(listeners_cluster) -> dict[str, list[str]]:
    """Listener name -> ``["host:port", ...]`` of each broker on it, once every broker listens."""

    def every_broker() -> dict[str, list[str]] | None:
        found = {name: listeners_cluster.bootstrap_servers(name).split(",") for name in CONFLUENT}
        return found if all(len(s) == NUM_BROKERS for s in found.values()) else None

    return wait_until(every_broker, timeout_s=60, message=f"both listeners of the {NUM_BROKERS} brokers")


def new_topic(cluster, partitions: int) -> str:
    """A fresh topic of ``partitions`` partitions (spread over the brokers), each led."""
    name = f"listeners-{uuid.uuid4().hex[:8]}"
    Admin(cluster).create_topics([NewTopic(name, partitions, 1)], wait_for_leaders_ms=60_000)
    return name


def test_the_cluster_reports_each_listener_and_the_first_by_default(listeners_cluster, servers):
    """bootstrap_servers() is the first listener's; a name in any case picks one; the SASL
    listener advertises localhost, the other its bound address; an unknown name is refused."""
    from raylog.errors import InvalidConfigError

    assert listeners_cluster.bootstrap_servers().split(",") == servers["PLAIN"]
    assert listeners_cluster.bootstrap_servers("secure").split(",") == servers["SECURE"]
    assert {s.rsplit(":", 1)[0] for s in servers["PLAIN"]} == {"127.0.0.1"}
    assert {s.rsplit(":", 1)[0] for s in servers["SECURE"]} == {"localhost"}
    assert not {s.rsplit(":", 1)[1] for s in servers["PLAIN"]} & {s.rsplit(":", 1)[1] for s in servers["SECURE"]}
    with pytest.raises(InvalidConfigError, match="no Kafka listener 'OTHER'"):
        listeners_cluster.bootstrap_servers("OTHER")


@pytest.mark.parametrize("listener", ["PLAIN", "SECURE"])
def test_each_listeners_metadata_lists_that_listeners_addresses(servers, listener):
    """confluent-kafka's list_topics() and kafka-python's describe_cluster() on a listener see
    every broker at its address on that listener (the advertised localhost on SECURE), not
    the other listener's."""
    from confluent_kafka.admin import AdminClient
    from kafka.admin import KafkaAdminClient

    bootstrap = ",".join(servers[listener])
    brokers = (
        AdminClient({"bootstrap.servers": bootstrap, **CONFLUENT[listener]}).list_topics(timeout=TIMEOUT_S).brokers
    )
    assert sorted(f"{b.host}:{b.port}" for b in brokers.values()) == sorted(servers[listener])

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **KAFKA_PYTHON[listener])
    try:
        described = admin.describe_cluster()
    finally:
        admin.close()
    assert sorted(f"{b['host']}:{b['port']}" for b in described["brokers"]) == sorted(servers[listener])


@pytest.mark.parametrize("listener", ["PLAIN", "SECURE"])
def test_confluent_kafka_and_kafka_python_produce_and_consume_through_each_listener(
    listeners_cluster, servers, listener
):
    """Through one listener only, each client writes to both partitions (one per broker) and
    reads back what both wrote."""
    from confluent_kafka import Consumer, Producer
    from kafka import KafkaConsumer, KafkaProducer

    topic = new_topic(listeners_cluster, NUM_BROKERS)
    bootstrap = ",".join(servers[listener])
    confluent = Producer({"bootstrap.servers": bootstrap, **CONFLUENT[listener]})
    for partition in range(NUM_BROKERS):
        confluent.produce(topic, f"confluent {partition}".encode(), partition=partition)
    assert confluent.flush(TIMEOUT_S) == 0
    producer = KafkaProducer(bootstrap_servers=bootstrap, **KAFKA_PYTHON[listener])
    try:
        for partition in range(NUM_BROKERS):
            producer.send(topic, f"kafka-python {partition}".encode(), partition=partition).get(timeout=TIMEOUT_S)
    finally:
        producer.close()
    written = {f"{client} {p}".encode() for client in ("confluent", "kafka-python") for p in range(NUM_BROKERS)}

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{topic}",
            "auto.offset.reset": "earliest",
            **CONFLUENT[listener],
        }
    )
    seen: set[bytes] = set()
    try:
        consumer.subscribe([topic])

        def all_read() -> bool:
            message = consumer.poll(1.0)
            if message is not None:
                assert message.error() is None, message.error()
                seen.add(message.value())
            return seen == written

        wait_until(all_read, timeout_s=TIMEOUT_S, message="confluent-kafka's records")
    finally:
        consumer.close()

    kp = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", **KAFKA_PYTHON[listener])
    seen = set()
    try:
        wait_until(
            lambda: (seen.update(r.value for rs in kp.poll(1000).values() for r in rs), seen == written)[1],
            timeout_s=TIMEOUT_S,
            message="kafka-python's records",
        )
    finally:
        kp.close()


def test_a_client_that_does_not_authenticate_is_closed_out_of_the_sasl_listener(listeners_cluster, servers):
    """On SECURE, a Metadata before SASL closes the connection (the same request on PLAIN is
    answered); confluent-kafka in its default settings delivers nothing there."""
    metadata = {"topics": None, "allow_auto_topic_creation": False}
    plain = Wire(servers["PLAIN"][0])
    try:
        assert len(plain.ask(ApiKey.METADATA, 9, metadata)["brokers"]) == NUM_BROKERS
    finally:
        plain.close()
    secure = Wire(servers["SECURE"][0])
    try:
        secure.send(ApiKey.METADATA, 9, metadata)
        assert secure.closed()
    finally:
        secure.close()

    topic = new_topic(listeners_cluster, 1)
    assert deliver(",".join(servers["SECURE"]), topic, b"unauthenticated", **{"message.timeout.ms": 5_000}) is not None
    assert records_of(listeners_cluster, topic) == []


def _authenticate(wire: Wire, mechanism: str) -> dict:
    """Authenticate ``wire`` as the admin by ``mechanism``: the last SaslAuthenticate answer."""
    from scramp import ScramClient

    assert wire.ask(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mechanism})["error_code"] == 0
    if mechanism == "PLAIN":
        return wire.ask(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"\0admin\0" + PASSWORD.encode()})
    scram = ScramClient([mechanism], "admin", PASSWORD)
    first = wire.ask(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": scram.get_client_first().encode()})
    scram.set_server_first(first["auth_bytes"].decode())
    final = wire.ask(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": scram.get_client_final().encode()})
    scram.set_server_final(final["auth_bytes"].decode())
    return final


def test_each_listener_and_mechanism_tells_its_own_authentication_lifetime(servers):
    """listener.name.secure.connections.max.reauth.ms and its SCRAM-SHA-512 override: a client
    authenticated by PLAIN on SECURE is told the listener's lifetime, one by SCRAM-SHA-512 the
    mechanism's (the broker-wide setting is 0: never); PLAIN, which the broker-wide
    sasl.enabled.mechanisms leaves out, is enabled on SECURE by its own."""
    told = {}
    for mechanism in ("PLAIN", "SCRAM-SHA-512"):
        wire = Wire(servers["SECURE"][0])
        try:
            answer = _authenticate(wire, mechanism)
            assert answer["error_code"] == 0, answer
            told[mechanism] = answer["session_lifetime_ms"]
            metadata = wire.ask(ApiKey.METADATA, 9, {"topics": None, "allow_auto_topic_creation": False})
            assert len(metadata["brokers"]) == NUM_BROKERS  # authenticated: served
        finally:
            wire.close()
    assert told == {"PLAIN": SECURE_REAUTH_MS, "SCRAM-SHA-512": SECURE_SCRAM_REAUTH_MS}
