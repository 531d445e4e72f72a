"""SASL on a Kafka listener (``listeners=SASL_PLAINTEXT://...`` and ``SASL_SSL``) with clients
nobody here wrote, in their default settings but for the credentials: users are made over
the wire with AlterUserScramCredentials (confluent-kafka's admin client), confluent-kafka and
kafka-python authenticate with SCRAM-SHA-512, SCRAM-SHA-256 and PLAIN and produce and consume
what their ACLs allow; a wrong password and an unknown user are refused with
SASL_AUTHENTICATION_FAILED, a client that speaks no SASL and raw requests sent before or out
of the exchange are closed out, and nothing unauthenticated reaches the log.

``sasl_cluster`` is one broker whose listener speaks SASL_PLAINTEXT with every mechanism
enabled, the authorizer on and ``User:admin`` a super user; ``sasl_ssl_cluster`` the same over
TLS (SCRAM only).
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import struct
import time
import uuid

import pytest

from raylog import (
    Admin,
    NewTopic,
)
from raylog.kafka import codec
from tests.helpers import wait_until
from tests.ray.kafka import clients
from tests.ray.kafka.clients import deliver, first_message, records_of

#: A bound on one client call (not a measure).
TIMEOUT_S = 30.0
PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
MECHANISMS = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
#: Who the tests' cluster handles are (raylog.connect creates the user with the cluster).
ADMIN = {
    "security_protocol": "SASL_PLAINTEXT",
    "sasl_mechanism": "SCRAM-SHA-512",
    "sasl_plain_username": "admin",
    "sasl_plain_password": PASSWORDS["admin"],
}


def start_cluster(tmp_path_factory, listener: str, **extra: str):
    import raylog

    return raylog.connect(
        data_dir=str(tmp_path_factory.mktemp("raylog-sasl")),
        num_brokers=1,
        cluster_name=f"s{uuid.uuid4().hex[:8]}",
        config={
            "listeners": listener,
            "authorizer": "acl",
            "super.users": "User:admin",
            "offsets.topic.num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "group.initial.rebalance.delay.ms": "0",
            **extra,
        },
        **ADMIN,
    )


def make_users(bootstrap: str, security: dict, mechanisms=("SCRAM-SHA-256", "SCRAM-SHA-512")) -> None:
    """Every user of PASSWORDS gets a credential per mechanism over the wire (confluent-kafka's
    AlterUserScramCredentials: the client salts the password)."""
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    admin = AdminClient({"bootstrap.servers": bootstrap, **security})
    upsertions = [
        UserScramCredentialUpsertion(
            user, ScramCredentialInfo(getattr(ScramMechanism, m.replace("-", "_")), 4096), pw.encode()
        )
        for user, pw in PASSWORDS.items()
        for m in mechanisms
    ]
    for future in admin.alter_user_scram_credentials(upsertions).values():
        future.result(timeout=TIMEOUT_S)


@pytest.fixture(scope="module")
def sasl_cluster(cluster, tmp_path_factory):
    handle = start_cluster(tmp_path_factory, "SASL_PLAINTEXT://127.0.0.1:0", **{"sasl.enabled.mechanisms": MECHANISMS})
    yield handle
    handle.shutdown()


@pytest.fixture(scope="module")
def sasl_bootstrap(sasl_cluster) -> str:
    servers = wait_until(lambda: sasl_cluster.bootstrap_servers() or None, timeout_s=60, message="the SASL listener")
    # The first user is made with the cluster (raylog.connect as admin), the rest over the
    # wire by that user.
    make_users(servers, sasl("SCRAM-SHA-512", "admin"))
    return servers


@pytest.fixture(scope="module")
def granted_topic(sasl_cluster, sasl_bootstrap):
    """A topic alice may write and read (group ``readers``)."""
    return clients.granted_topic(sasl_cluster, "User:alice", "readers")


def sasl(mechanism: str, user: str, password: str | None = None, protocol: str = "SASL_PLAINTEXT") -> dict:
    """confluent-kafka's settings of a SASL client."""
    return {
        "security.protocol": protocol,
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": PASSWORDS.get(user, "") if password is None else password,
    }


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"])
def test_confluent_kafka_authenticates_and_produces_and_consumes_as_the_acls_allow(
    sasl_bootstrap, granted_topic, mechanism
):
    """alice, authenticated by each mechanism, writes and reads in group readers; bob,
    authenticated as well, may not read."""
    from confluent_kafka import KafkaError

    value = f"alice by {mechanism}".encode()
    assert deliver(sasl_bootstrap, granted_topic, value, **sasl(mechanism, "alice")) is None

    def read_as(user: str):
        return first_message(sasl_bootstrap, granted_topic, "readers", **sasl(mechanism, user))

    message = read_as("alice")
    assert message.error() is None and message.value().startswith(b"alice by")
    refused = read_as("bob")
    assert refused.error() is not None
    assert refused.error().code() in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED)


@pytest.mark.parametrize(
    ("mechanism", "user", "password"),
    [("SCRAM-SHA-512", "alice", "wrong"), ("SCRAM-SHA-256", "mallory", "x"), ("PLAIN", "alice", "wrong")],
)
def test_wrong_passwords_and_unknown_users_are_refused_and_write_nothing(
    sasl_cluster, sasl_bootstrap, granted_topic, mechanism, user, password
):
    before = records_of(sasl_cluster, granted_topic)
    error = deliver(sasl_bootstrap, granted_topic, b"intruder", **sasl(mechanism, user, password))
    assert error in ("SASL_AUTHENTICATION_FAILED", "_AUTHENTICATION"), error
    assert records_of(sasl_cluster, granted_topic) == before


def test_a_client_without_sasl_is_closed_out_and_writes_nothing(sasl_cluster, sasl_bootstrap, granted_topic):
    """A client in its default settings (PLAINTEXT) sends Metadata before any SASL: the
    listener closes its connections; its record is not delivered."""
    before = records_of(sasl_cluster, granted_topic)
    error = deliver(sasl_bootstrap, granted_topic, b"plaintext", **{"message.timeout.ms": 5_000})
    assert error is not None
    assert records_of(sasl_cluster, granted_topic) == before


def kafka_python_producer(bootstrap: str, **config):
    """kafka-python's producer, as alice by SCRAM-SHA-512."""
    from kafka import KafkaProducer

    return KafkaProducer(
        bootstrap_servers=bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="alice",
        sasl_plain_password=PASSWORDS["alice"],
        **config,
    )


def test_kafka_python_authenticates_with_scram(sasl_cluster, sasl_bootstrap, granted_topic):
    producer = kafka_python_producer(sasl_bootstrap)
    try:
        producer.send(granted_topic, b"kafka-python by scram").get(timeout=TIMEOUT_S)
    finally:
        producer.close()
    assert b"kafka-python by scram" in records_of(sasl_cluster, granted_topic)


def test_credentials_are_described_and_deleted_over_the_wire(sasl_bootstrap):
    """DescribeUserScramCredentials tells mechanisms and iterations (never keys); a deleted
    credential no longer authenticates."""
    from confluent_kafka.admin import AdminClient, ScramMechanism, UserScramCredentialDeletion

    admin = AdminClient({"bootstrap.servers": sasl_bootstrap, **sasl("SCRAM-SHA-512", "admin")})
    described = admin.describe_user_scram_credentials(["bob"])["bob"].result(timeout=TIMEOUT_S)
    infos = sorted((i.mechanism, i.iterations) for i in described.scram_credential_infos)
    assert infos == [(ScramMechanism.SCRAM_SHA_256, 4096), (ScramMechanism.SCRAM_SHA_512, 4096)]
    deletion = UserScramCredentialDeletion("bob", ScramMechanism.SCRAM_SHA_256)
    admin.alter_user_scram_credentials([deletion])["bob"].result(timeout=TIMEOUT_S)
    topic = f"nothing-{uuid.uuid4().hex[:6]}"
    assert deliver(sasl_bootstrap, topic, b"x", **sasl("SCRAM-SHA-256", "bob")) in (
        "SASL_AUTHENTICATION_FAILED",
        "_AUTHENTICATION",
    )
    make_users(sasl_bootstrap, sasl("SCRAM-SHA-512", "admin"))


class Raw:
    """A raw Kafka connection (raylog's codec encodes and decodes)."""

    def __init__(self, bootstrap: str):
        host, port = bootstrap.split(",")[0].rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=TIMEOUT_S)
        self.correlation = 0

    def send(self, api_key: codec.ApiKey, version: int, body: dict) -> None:
        self.correlation += 1
        header = codec.RequestHeader(api_key, version, self.correlation, "raw")
        self.sock.sendall(b"".join(bytes(b) for b in codec.encode_request(header, body)))

    def answer(self, api_key: codec.ApiKey, version: int) -> dict | None:
        """The next response's body, or None when the listener closed the connection."""
        size = self._read(4)
        if size is None:
            return None
        body = self._read(struct.unpack(">i", size)[0])
        return None if body is None else codec.decode_response(api_key, version, body)[1]

    def _read(self, n: int) -> bytes | None:
        data = bytearray()
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                return None
            data += chunk
        return bytes(data)


def test_requests_out_of_the_exchange_close_the_connection(sasl_bootstrap):
    """Before authenticating: Metadata closes the connection; SaslAuthenticate before the
    handshake is ILLEGAL_SASL_STATE; an unknown mechanism is refused with the list of enabled
    ones; garbage SCRAM and a failed PLAIN are answered SASL_AUTHENTICATION_FAILED and the
    connection closed; a second handshake after authenticating is ILLEGAL_SASL_STATE."""
    early = Raw(sasl_bootstrap)
    early.send(codec.ApiKey.METADATA, 9, {"topics": None, "allow_auto_topic_creation": False})
    assert early.answer(codec.ApiKey.METADATA, 9) is None

    out_of_turn = Raw(sasl_bootstrap)
    out_of_turn.send(codec.ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"\0alice\0alice-secret"})
    assert out_of_turn.answer(codec.ApiKey.SASL_AUTHENTICATE, 2)["error_code"] == 34
    out_of_turn.send(codec.ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
    answer = out_of_turn.answer(codec.ApiKey.SASL_HANDSHAKE, 1)
    assert answer["error_code"] == 33 and set(answer["mechanisms"]) == set(MECHANISMS.split(","))

    for mechanism, message in [("SCRAM-SHA-256", b"\xff garbage"), ("PLAIN", b"\0alice\0wrong")]:
        bad = Raw(sasl_bootstrap)
        bad.send(codec.ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mechanism})
        assert bad.answer(codec.ApiKey.SASL_HANDSHAKE, 1)["error_code"] == 0
        bad.send(codec.ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": message})
        assert bad.answer(codec.ApiKey.SASL_AUTHENTICATE, 2)["error_code"] == 58
        assert bad.answer(codec.ApiKey.SASL_AUTHENTICATE, 2) is None  # closed

    good = Raw(sasl_bootstrap)
    good.send(codec.ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    good.answer(codec.ApiKey.SASL_HANDSHAKE, 1)
    good.send(codec.ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"\0alice\0alice-secret"})
    assert good.answer(codec.ApiKey.SASL_AUTHENTICATE, 2)["error_code"] == 0
    good.send(codec.ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    assert good.answer(codec.ApiKey.SASL_HANDSHAKE, 1)["error_code"] == 34
    good.send(codec.ApiKey.METADATA, 9, {"topics": None, "allow_auto_topic_creation": False})
    assert good.answer(codec.ApiKey.METADATA, 9)["brokers"]


def test_sasl_handshake_v0_takes_unframed_tokens(sasl_bootstrap):
    """After SaslHandshake v0 the SASL messages go without Kafka's framing (KIP-43), each
    length-prefixed both ways: SCRAM-SHA-256 (scramp's client) and PLAIN authenticate and
    then serve requests; a refused token gets no answer and the connection closes."""
    import scramp

    def raw_token(conn: Raw, token: bytes) -> bytes | None:
        conn.sock.sendall(struct.pack(">i", len(token)) + token)
        size = conn._read(4)
        return None if size is None else conn._read(struct.unpack(">i", size)[0])

    def handshake_v0(mechanism: str) -> Raw:
        conn = Raw(sasl_bootstrap)
        conn.send(codec.ApiKey.SASL_HANDSHAKE, 0, {"mechanism": mechanism})
        assert conn.answer(codec.ApiKey.SASL_HANDSHAKE, 0)["error_code"] == 0
        return conn

    scram_conn = handshake_v0("SCRAM-SHA-256")
    client = scramp.ScramClient(["SCRAM-SHA-256"], "alice", PASSWORDS["alice"])
    client.set_server_first(raw_token(scram_conn, client.get_client_first().encode()).decode())
    client.set_server_final(raw_token(scram_conn, client.get_client_final().encode()).decode())
    plain_conn = handshake_v0("PLAIN")
    assert raw_token(plain_conn, b"\0alice\0" + PASSWORDS["alice"].encode()) == b""
    for conn in (scram_conn, plain_conn):
        conn.send(codec.ApiKey.METADATA, 9, {"topics": None, "allow_auto_topic_creation": False})
        assert conn.answer(codec.ApiKey.METADATA, 9)["brokers"]
    refused = handshake_v0("PLAIN")
    assert raw_token(refused, b"\0alice\0wrong") is None  # closed without an answer


@pytest.fixture(scope="module")
def sasl_ssl_cluster(cluster, tmp_path_factory):
    import trustme

    ca = trustme.CA()
    folder = tmp_path_factory.mktemp("sasl-ssl")
    ca.cert_pem.write_to_path(str(folder / "ca.pem"))
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(str(folder / "broker.pem"))
    handle = start_cluster(
        tmp_path_factory, "SASL_SSL://127.0.0.1:0", **{"ssl.keystore.location": str(folder / "broker.pem")}
    )
    yield handle, str(folder / "ca.pem")
    handle.shutdown()


def test_scram_over_tls(sasl_ssl_cluster):
    """SASL_SSL: the SCRAM user the cluster was made with writes over TLS; PLAIN is not enabled
    there (the default sasl.enabled.mechanisms: SCRAM only)."""
    cluster, ca = sasl_ssl_cluster
    bootstrap = wait_until(lambda: cluster.bootstrap_servers() or None, timeout_s=60, message="listener")
    admin = Admin(cluster)
    topic = f"tls-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, 1, 1)])
    tls = {"ssl.ca.location": ca}
    assert deliver(bootstrap, topic, b"over tls", **sasl("SCRAM-SHA-256", "admin", protocol="SASL_SSL"), **tls) is None
    assert records_of(cluster, topic) == [b"over tls"]
    refused = deliver(bootstrap, topic, b"plain", **sasl("PLAIN", "admin", protocol="SASL_SSL"), **tls)
    assert refused is not None


def test_aiokafka_and_kcat_over_sasl_ssl_with_scram_sha_512(sasl_ssl_cluster, kcat):
    """Two more clients nobody here wrote, in their default settings but for TLS and SCRAM:
    aiokafka (pure Python, its own SCRAM) and kcat (Debian's librdkafka, with OpenSSL) write
    and read over SASL_SSL; each with a wrong password is refused and writes nothing."""
    import ssl

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.errors import KafkaError as AioKafkaError

    cluster, ca = sasl_ssl_cluster
    bootstrap = wait_until(lambda: cluster.bootstrap_servers() or None, timeout_s=60, message="listener")
    topic = f"aio-{uuid.uuid4().hex[:6]}"
    Admin(cluster).create_topics([NewTopic(topic, 1, 1)], wait_for_leaders_ms=60_000)
    context = ssl.create_default_context(cafile=ca)

    def settings(password: str) -> dict:
        return {
            "bootstrap_servers": bootstrap,
            "security_protocol": "SASL_SSL",
            "ssl_context": context,
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": "admin",
            "sasl_plain_password": password,
        }

    async def aiokafka_round_trip() -> list[bytes]:
        producer = AIOKafkaProducer(**settings(PASSWORDS["admin"]))
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"from aiokafka")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **settings(PASSWORDS["admin"]))
        await consumer.start()
        try:
            return [(await consumer.getone()).value]
        finally:
            await consumer.stop()

    async def aiokafka_refused() -> bool:
        producer = AIOKafkaProducer(**settings("wrong"), request_timeout_ms=10_000)
        try:
            await producer.start()
        except AioKafkaError:
            return True
        await producer.stop()
        return False

    assert asyncio.run(aiokafka_round_trip()) == [b"from aiokafka"]
    assert asyncio.run(aiokafka_refused())

    def kcat_args(password: str) -> list[str]:
        return [
            "-b", bootstrap, "-X", "security.protocol=SASL_SSL", "-X", f"ssl.ca.location={ca}",
            "-X", "sasl.mechanisms=SCRAM-SHA-512", "-X", "sasl.username=admin", "-X", f"sasl.password={password}",
        ]  # fmt: skip

    done = kcat.run(*kcat_args(PASSWORDS["admin"]), "-P", "-t", topic, stdin="from kcat\n")
    assert done.returncode == 0, done.stderr
    done = kcat.run(*kcat_args(PASSWORDS["admin"]), "-C", "-t", topic, "-e", "-q", "-o", "beginning")
    assert done.stdout.split() == ["from", "aiokafka", "from", "kcat"], done.stderr
    refused = kcat.run(*kcat_args("wrong"), "-X", "message.timeout.ms=5000", "-P", "-t", topic, stdin="never\n")
    assert "Authentication failed" in refused.stderr, refused.stderr
    assert records_of(cluster, topic) == [b"from aiokafka", b"from kcat"]


def test_raylog_users_adds_lists_and_removes_credentials(run, sasl_cluster, sasl_bootstrap, granted_topic, tmp_path):
    """``raylog users``, as admin (``--command-config``, as Kafka's tools take it; without it
    the command is User:ANONYMOUS's, and refused): the password from stdin (never argv), the
    credential then authenticates a Kafka client; listing tells mechanisms and iterations;
    remove deletes."""
    cluster_name = sasl_cluster.cluster_name
    code, _, err = run("users", "add", "carol", stdin="carol-pw\n", cluster_name=cluster_name)
    assert code == 1 and "ClusterAuthorizationFailedError" in err
    config = tmp_path / "admin.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
        'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" '
        f'password="{PASSWORDS["admin"]}";\n'
    )
    args = ("--command-config", str(config))
    code, out, err = run(
        "users", "add", "carol", "--mechanism", "SCRAM-SHA-512", *args, stdin="carol-pw\n", cluster_name=cluster_name
    )
    assert code == 0 and "SCRAM-SHA-512" in out, err
    PASSWORDS["carol"] = "carol-pw"
    try:
        # authenticated (not SASL_AUTHENTICATION_FAILED), and no ACL lets her write
        assert deliver(sasl_bootstrap, granted_topic, b"x", **sasl("SCRAM-SHA-512", "carol")) == (
            "TOPIC_AUTHORIZATION_FAILED"
        )
        code, out, err = run("users", "list", "carol", "--json", *args, cluster_name=cluster_name)
        assert code == 0 and json.loads(out) == {"carol": [{"mechanism": "SCRAM-SHA-512", "iterations": 8192}]}, err
        code, out, err = run("users", "remove", "carol", *args, cluster_name=cluster_name)
        assert code == 0, err
        code, out, err = run("users", "list", "carol", *args, cluster_name=cluster_name)
        assert code == 1 and "ResourceNotFoundError" in err
        code, _, err = run("users", "add", "dave", *args, stdin="\n", cluster_name=cluster_name)
        assert code == 2 and "stdin" in err
    finally:
        PASSWORDS.pop("carol")


#: connections.max.reauth.ms of ``reauth_cluster``: short, so that tests cross it.
REAUTH_MS = 2_000
#: Records a producer that never stops keeps in flight.
WINDOW = 10


@pytest.fixture(scope="module")
def reauth_cluster(cluster, tmp_path_factory):
    """A SASL_PLAINTEXT listener whose authentications hold REAUTH_MS (KIP-368)."""
    handle = start_cluster(
        tmp_path_factory,
        "SASL_PLAINTEXT://127.0.0.1:0",
        **{"sasl.enabled.mechanisms": MECHANISMS, "connections.max.reauth.ms": str(REAUTH_MS)},
    )
    bootstrap = wait_until(lambda: handle.bootstrap_servers() or None, timeout_s=60, message="listener")
    make_users(bootstrap, sasl("SCRAM-SHA-512", "admin"))
    yield handle, bootstrap
    handle.shutdown()


def test_clients_reauthenticate_and_a_deleted_user_is_cut_off_within_the_session(reauth_cluster):
    """KIP-368: confluent-kafka is told the session's lifetime and authenticates again on its
    connection, so a producer writing across several lifetimes goes on; once its user is
    deleted, its next re-authentication fails and it writes nothing more. A raw client that
    does not re-authenticate is closed at its first request after the lifetime, and one that
    re-authenticates as another user is refused."""
    from confluent_kafka import Producer as KafkaProducer

    cluster, bootstrap = reauth_cluster
    topic = clients.granted_topic(cluster, "User:carol", "carols")
    PASSWORDS["carol"] = "carol-secret"
    try:
        Admin(cluster).alter_user_scram_credentials({"carol": PASSWORDS["carol"]})
        errors: list = []
        producer = KafkaProducer(
            {"bootstrap.servers": bootstrap, "message.timeout.ms": 10_000, **sasl("SCRAM-SHA-512", "carol")}
        )
        deadline = time.monotonic() + 3 * REAUTH_MS / 1000
        sent = 0
        while time.monotonic() < deadline:
            producer.produce(topic, b"%d" % sent, on_delivery=lambda err, _: err is not None and errors.append(err))
            sent += 1
            producer.flush(TIMEOUT_S)
            time.sleep(0.2)
        assert not errors and len(records_of(cluster, topic)) == sent
        Admin(cluster).alter_user_scram_credentials(deletions=[("carol", "SCRAM-SHA-256"), ("carol", "SCRAM-SHA-512")])
        time.sleep(1.5 * REAUTH_MS / 1000)
        producer.produce(topic, b"after", on_delivery=lambda err, _: errors.append(err))
        producer.flush(15)
        assert errors and errors[-1] is not None, "a deleted user's producer still wrote"
        assert b"after" not in records_of(cluster, topic)
    finally:
        PASSWORDS.pop("carol")

    raw = Raw(bootstrap)
    raw.send(codec.ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    raw.answer(codec.ApiKey.SASL_HANDSHAKE, 1)
    raw.send(codec.ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"\0alice\0alice-secret"})
    assert raw.answer(codec.ApiKey.SASL_AUTHENTICATE, 2)["session_lifetime_ms"] == REAUTH_MS
    raw.send(codec.ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})  # re-authenticates as bob
    assert raw.answer(codec.ApiKey.SASL_HANDSHAKE, 1)["error_code"] == 0
    raw.send(codec.ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"\0bob\0bob-secret"})
    assert raw.answer(codec.ApiKey.SASL_AUTHENTICATE, 2)["error_code"] == 58
    assert raw.answer(codec.ApiKey.SASL_AUTHENTICATE, 2) is None  # closed

    late = Raw(bootstrap)
    late.send(codec.ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    late.answer(codec.ApiKey.SASL_HANDSHAKE, 1)
    late.send(codec.ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"\0alice\0alice-secret"})
    late.answer(codec.ApiKey.SASL_AUTHENTICATE, 2)
    late.send(codec.ApiKey.METADATA, 9, {"topics": None, "allow_auto_topic_creation": False})
    assert late.answer(codec.ApiKey.METADATA, 9) is not None  # within the session
    time.sleep(REAUTH_MS / 1000 + 0.5)
    late.send(codec.ApiKey.METADATA, 9, {"topics": None, "allow_auto_topic_creation": False})
    assert late.answer(codec.ApiKey.METADATA, 9) is None  # closed: the session ended


def test_producers_that_never_stop_reauthenticate_without_losing_a_record(reauth_cluster, caplog):
    """KIP-368 under a steady load (librdkafka's test 0142, with a window the listener keeps
    up with): confluent-kafka (SCRAM-SHA-512) and kafka-python (3.x re-authenticates too)
    keep records in flight across several session lifetimes and re-authenticate between them;
    every record is delivered, once, in order, and neither reports an error. Each is told a
    session's lifetime at least three times: more often than it has connections (bootstrap
    and broker), so it re-authenticated. Both wait for every request in flight before they
    re-authenticate, so each keeps one request and WINDOW records in flight: a client that
    outruns the listener is closed at its session's end, as by Kafka (docs/kafka.md, 0142)."""
    from confluent_kafka import Producer as KafkaProducer

    cluster, bootstrap = reauth_cluster
    topic = clients.granted_topic(cluster, "User:alice", "alices")
    errors: list = []
    delivered: list = []
    librdkafka_log = logging.getLogger("tests.librdkafka")
    librdkafka_log.setLevel(logging.DEBUG)
    producer = KafkaProducer(
        {
            "bootstrap.servers": bootstrap,
            "error_cb": errors.append,
            "debug": "security",
            "logger": librdkafka_log,
            "max.in.flight.requests.per.connection": 1,
            **sasl("SCRAM-SHA-512", "alice"),
        }
    )
    producer.produce(topic, b"c0", on_delivery=lambda err, _: delivered.append(err))
    producer.flush(TIMEOUT_S)  # connected and authenticated: from here on, sessions run out
    values = [b"c0"]
    deadline = time.monotonic() + 3.5 * REAUTH_MS / 1000
    while time.monotonic() < deadline:
        if len(producer) >= WINDOW:
            producer.poll(TIMEOUT_S)  # returns at the next delivery report
            continue
        values.append(b"c%d" % len(values))
        producer.produce(topic, values[-1], on_delivery=lambda err, _: delivered.append(err))
        producer.poll(0.005)  # serves delivery reports; records in flight throughout
    assert producer.flush(TIMEOUT_S) == 0
    assert not errors and delivered == [None] * len(values)
    assert _told_lifetime(caplog, "tests.librdkafka", "Received session lifetime") >= 3

    caplog.set_level(logging.DEBUG, logger="kafka.net.connection")
    python_producer = kafka_python_producer(bootstrap, max_in_flight_requests_per_connection=1)
    try:
        futures = [python_producer.send(topic, b"p0")]
        futures[0].get(timeout=TIMEOUT_S)
        deadline = time.monotonic() + 3.5 * REAUTH_MS / 1000
        while time.monotonic() < deadline:
            futures.append(python_producer.send(topic, b"p%d" % len(futures)))
            futures[max(0, len(futures) - WINDOW)].get(timeout=TIMEOUT_S)
        python_producer.flush(TIMEOUT_S)
        assert all(f.succeeded() for f in futures)
    finally:
        python_producer.close()
    assert _told_lifetime(caplog, "kafka.net.connection", "Scheduling SASL re-authentication") >= 3
    assert records_of(cluster, topic) == values + [b"p%d" % i for i in range(len(futures))]


def _told_lifetime(caplog, logger: str, message: str) -> int:
    """How often a client's log says it was told a session's lifetime."""
    return sum(1 for r in caplog.records if r.name == logger and message in r.getMessage())


def test_each_listener_takes_its_own_sasl_mechanisms(cluster, tmp_path_factory):
    """Kafka's listener.name.<listener>.sasl.enabled.mechanisms: a broker with two SASL
    listeners, INTERNAL taking PLAIN alone (its own setting) and EXTERNAL the broker-wide
    SCRAM mechanisms; confluent-kafka writes by each listener's mechanism and is refused by the
    other's, on either listener."""
    handle = start_cluster(
        tmp_path_factory,
        "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
        **{
            "listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT,EXTERNAL:SASL_PLAINTEXT",
            "listener.name.internal.sasl.enabled.mechanisms": "PLAIN",
        },
    )
    try:
        internal, external = (
            wait_until(lambda n=name: handle.bootstrap_servers(n) or None, timeout_s=60, message=f"listener {name}")
            for name in ("INTERNAL", "EXTERNAL")
        )
        make_users(external, sasl("SCRAM-SHA-512", "admin"))
        topic = clients.granted_topic(handle, "User:alice", "alices")
        assert deliver(internal, topic, b"plain inside", **sasl("PLAIN", "alice")) is None
        assert deliver(external, topic, b"scram outside", **sasl("SCRAM-SHA-512", "alice")) is None
        assert deliver(internal, topic, b"scram inside", **sasl("SCRAM-SHA-512", "alice")) is not None
        assert deliver(external, topic, b"plain outside", **sasl("PLAIN", "alice")) is not None
        assert records_of(handle, topic) == [b"plain inside", b"scram outside"]
    finally:
        handle.shutdown()
