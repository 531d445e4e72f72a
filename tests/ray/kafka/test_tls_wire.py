"""TLS on a Kafka listener (``listeners=SSL://...``) with clients nobody here wrote: confluent-kafka
and kafka-python produce and consume over TLS, the principal of a client certificate (after
``ssl.principal.mapping.rules``) is what Kafka's ACLs decide on, a client that shows no
certificate is User:ANONYMOUS, and a plaintext client on the TLS port is refused and writes
nothing. Certificates come from a test CA (trustme).

``tls_cluster`` is a raylog cluster of one broker on the session's Ray whose listeners speak
TLS and ask clients for certificates (``ssl.client.auth=requested``), with the authorizer on
and nothing allowed that no ACL allows. Its second listener, UPPER, presents a certificate
of its own and maps clients' certificates to principals by rules of its own.
"""

from __future__ import annotations

import socket
import ssl
import uuid

import pytest

from tests.helpers import wait_until
from tests.ray.kafka import clients
from tests.ray.kafka.clients import deliver, first_message, records_of

#: A bound on one client call (not a measure).
TIMEOUT_S = 30.0
#: ssl.principal.mapping.rules of the cluster: a certificate's common name is the user.
RULES = r"RULE:^CN=([^,]*),.*$/$1/,DEFAULT"
#: The second listener's own rules (listener.name.upper.ssl.principal.mapping.rules): upper-cased.
UPPER_RULES = r"RULE:^CN=([^,]*),.*$/$1/U,DEFAULT"
#: The common name of the UPPER listener's own certificate (listener.name.upper.ssl.keystore.location).
UPPER_CN = "raylog-upper-listener"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """The CA's PEM, the broker's keystore, the UPPER listener's own keystore, and alice's and
    bob's key-and-chain PEMs."""
    import trustme

    ca = trustme.CA()
    folder = tmp_path_factory.mktemp("tls")
    files = {"ca": folder / "ca.pem", "broker": folder / "broker.pem"}
    ca.cert_pem.write_to_path(str(files["ca"]))
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(str(files["broker"]))
    files["upper"] = folder / "upper.pem"
    upper = ca.issue_cert("127.0.0.1", "localhost", common_name=UPPER_CN)
    upper.private_key_and_cert_chain_pem.write_to_path(str(files["upper"]))
    for user in ("alice", "bob"):
        files[user] = folder / f"{user}.pem"
        leaf = ca.issue_cert(f"{user}@example.org", common_name=user, organization_name="acme")
        leaf.private_key_and_cert_chain_pem.write_to_path(str(files[user]))
    return {name: str(path) for name, path in files.items()}


@pytest.fixture(scope="module")
def tls_cluster(cluster, pki, tmp_path_factory):
    import raylog

    handle = raylog.connect(
        data_dir=str(tmp_path_factory.mktemp("raylog-tls")),
        num_brokers=1,
        cluster_name=f"t{uuid.uuid4().hex[:8]}",
        config={
            "listeners": "SSL://127.0.0.1:0,UPPER://127.0.0.1:0",
            "listener.security.protocol.map": "SSL:SSL,UPPER:SSL",
            "listener.name.upper.ssl.principal.mapping.rules": UPPER_RULES,
            "listener.name.upper.ssl.keystore.location": pki["upper"],
            "ssl.keystore.location": pki["broker"],
            "ssl.truststore.location": pki["ca"],
            "ssl.client.auth": "requested",
            "ssl.principal.mapping.rules": RULES,
            "authorizer": "acl",
            "super.users": "User:admin",
            "offsets.topic.num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "group.initial.rebalance.delay.ms": "0",
        },
        # raylog's own clients on this handle are admin (created with the cluster).
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="admin",
        sasl_plain_password="admin-secret",
    )
    yield handle
    handle.shutdown()


@pytest.fixture(scope="module")
def tls_bootstrap(tls_cluster) -> str:
    return wait_until(lambda: tls_cluster.bootstrap_servers() or None, timeout_s=60, message="the TLS listener")


@pytest.fixture(scope="module")
def granted_topic(tls_cluster):
    """A topic alice may write, read and describe, and read as the group ``readers``."""
    return clients.granted_topic(tls_cluster, "User:alice", "readers")


def ssl_config(pki: dict, user: str | None) -> dict:
    """confluent-kafka's settings for a TLS client that trusts the CA and shows ``user``'s
    certificate (None: none)."""
    config = {"security.protocol": "SSL", "ssl.ca.location": pki["ca"]}
    if user:
        config.update({"ssl.certificate.location": pki[user], "ssl.key.location": pki[user]})
    return config


def test_a_certificates_principal_produces_and_consumes_what_the_acls_allow(tls_bootstrap, pki, granted_topic):
    """alice (her certificate's CN, by the mapping rules) writes and reads in group readers
    over TLS with confluent-kafka; bob, with a certificate of the same CA, may not read."""
    from confluent_kafka import KafkaError

    assert deliver(tls_bootstrap, granted_topic, b"from alice", **ssl_config(pki, "alice")) is None

    def read_as(user: str):
        return first_message(tls_bootstrap, granted_topic, "readers", **ssl_config(pki, user))

    message = read_as("alice")
    assert message.error() is None and message.value() == b"from alice"
    refused = read_as("bob")
    assert refused.error() is not None
    assert refused.error().code() in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED)


def test_each_listener_maps_a_certificate_to_a_principal_by_its_own_rules(tls_bootstrap, tls_cluster, pki):
    """Kafka's listener.name.<listener>.ssl.principal.mapping.rules: on UPPER alice's
    certificate is User:ALICE, on SSL (the broker-wide rules) User:alice; each writes only
    what the ACLs grant that principal."""
    upper = wait_until(lambda: tls_cluster.bootstrap_servers("UPPER") or None, timeout_s=60, message="UPPER")
    topic = clients.granted_topic(tls_cluster, "User:ALICE", "upper-readers")
    assert deliver(upper, topic, b"as ALICE", **ssl_config(pki, "alice")) is None
    assert deliver(tls_bootstrap, topic, b"as alice", **ssl_config(pki, "alice")) == "TOPIC_AUTHORIZATION_FAILED"
    assert records_of(tls_cluster, topic) == [b"as ALICE"]


def test_each_listener_presents_its_own_certificate(tls_bootstrap, tls_cluster, pki):
    """Kafka's listener.name.<listener>.ssl.keystore.location: UPPER presents its own
    certificate, SSL the broker-wide one; both verify against the CA for 127.0.0.1 (and
    confluent-kafka, which checks a broker's host name by default, talks to UPPER in the test
    of its principal mapping rules)."""
    upper = wait_until(lambda: tls_cluster.bootstrap_servers("UPPER") or None, timeout_s=60, message="UPPER")

    def common_name(address: str) -> str | None:
        host, port = address.split(",")[0].rsplit(":", 1)
        context = ssl.create_default_context(cafile=pki["ca"])
        with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as raw:
            with context.wrap_socket(raw, server_hostname=host) as tls:
                subject = dict(item for rdn in tls.getpeercert()["subject"] for item in rdn)
        return subject.get("commonName")

    assert common_name(upper) == UPPER_CN
    assert common_name(tls_bootstrap) != UPPER_CN


def test_a_client_without_a_certificate_is_anonymous_and_refused(tls_bootstrap, tls_cluster, pki, granted_topic):
    """A TLS client that shows no certificate is User:ANONYMOUS: no ACL allows it to write."""
    before = records_of(tls_cluster, granted_topic)
    assert deliver(tls_bootstrap, granted_topic, b"anonymous", **ssl_config(pki, None)) == "TOPIC_AUTHORIZATION_FAILED"
    assert records_of(tls_cluster, granted_topic) == before


def test_a_plaintext_client_on_the_tls_port_is_refused_and_writes_nothing(tls_bootstrap, tls_cluster, granted_topic):
    """A client in its default settings (PLAINTEXT) gets no Kafka answer from a TLS port: its
    record is not delivered, and nothing reaches the log."""
    before = records_of(tls_cluster, granted_topic)
    error = deliver(tls_bootstrap, granted_topic, b"plaintext", **{"message.timeout.ms": 5_000})
    assert error in ("_MSG_TIMED_OUT", "_TRANSPORT", "_TIMED_OUT", "_ALL_BROKERS_DOWN"), error
    assert records_of(tls_cluster, granted_topic) == before


def test_kafka_python_over_tls_with_a_client_certificate(tls_bootstrap, tls_cluster, pki, granted_topic):
    """kafka-python's producer over TLS as alice (ssl_cafile, ssl_certfile, ssl_keyfile)."""
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=tls_bootstrap,
        security_protocol="SSL",
        ssl_cafile=pki["ca"],
        ssl_certfile=pki["alice"],
        ssl_keyfile=pki["alice"],
        ssl_check_hostname=True,
    )
    try:
        producer.send(granted_topic, b"kafka-python over tls").get(timeout=TIMEOUT_S)
    finally:
        producer.close()
    assert b"kafka-python over tls" in records_of(tls_cluster, granted_topic)


def test_raylog_start_takes_the_tls_settings(run, tls_cluster, tls_bootstrap, pki):
    """``raylog start --config`` passes cluster settings: an SSL listener without its keystore
    is refused before anything starts, a listener given twice is a usage error, and the TLS
    cluster's own settings start (join) it and print its bootstrap servers."""
    code, _, err = run("start", "--config", "listeners=SSL://127.0.0.1:0", cluster_name=f"t{uuid.uuid4().hex[:8]}")
    assert code == 1 and "ssl.keystore.location" in err, err
    code, _, err = run("start", "--kafka-port", "0", "--config", "listeners=SSL://127.0.0.1:0")
    assert code == 2 and "either as --kafka-port" in err, err
    settings = ["listeners=SSL://127.0.0.1:0", f"ssl.keystore.location={pki['broker']}"]
    code, out, err = run("start", "--config", *settings, cluster_name=tls_cluster.cluster_name)
    assert code == 0 and f"bootstrap.servers={tls_bootstrap}" in out, err
