"""TLS on the Kafka listeners without Ray: the server context from Kafka's settings (a real
handshake over a local socket, certificates from a test CA), the principal a client
certificate stands for, Kafka's ssl.principal.mapping.rules, and the settings refused."""

from __future__ import annotations

import asyncio
import ssl

import pytest
import trustme

from raylog.config import ControllerConfig, listener_address
from raylog.errors import InvalidConfigError
from raylog.kafka.tls import server_context
from raylog.principals import ANONYMOUS, PrincipalMapper, subject_name


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def files(ca, tmp_path):
    """The broker's PEM keystore, the CA's PEM truststore, and a client's key and chain."""
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert(
        "alice@example.org", common_name="alice", organization_name="acme", organization_unit_name="eng"
    )
    paths = {name: tmp_path / f"{name}.pem" for name in ("keystore", "truststore", "client")}
    server.private_key_and_cert_chain_pem.write_to_path(str(paths["keystore"]))
    ca.cert_pem.write_to_path(str(paths["truststore"]))
    client.private_key_and_cert_chain_pem.write_to_path(str(paths["client"]))
    return {name: str(path) for name, path in paths.items()}


def handshake(context: ssl.SSLContext, client: ssl.SSLContext) -> dict | None:
    """Connect ``client`` to a local server of ``context``: the peer certificate the server saw."""

    async def run() -> dict | None:
        seen: asyncio.Future = asyncio.get_running_loop().create_future()

        async def serve(reader, writer):
            seen.set_result(writer.get_extra_info("peercert"))
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=context)
        port = server.sockets[0].getsockname()[1]
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname="localhost")
            # The server closes an accepted connection at once; a refused one ends in an alert.
            await asyncio.wait_for(reader.read(), 30)
            writer.close()
            if not seen.done():
                raise ConnectionError("the server never accepted the connection")
            return seen.result()
        finally:
            server.close()

    return asyncio.run(run())


def client_context(ca: trustme.CA, files: dict, with_cert: bool) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    if with_cert:
        context.load_cert_chain(files["client"])
    return context


@pytest.mark.parametrize("client_auth", ["requested", "required"])
def test_a_client_certificate_is_the_connections_principal(ca, files, client_auth):
    """Asked for (requested or required), a client's certificate signed by the truststore's CA
    reaches the server, whose principal is User: and the subject as Kafka writes it."""
    context = server_context(files["keystore"], "", files["truststore"], client_auth)
    seen = handshake(context, client_context(ca, files, with_cert=True))
    assert PrincipalMapper().principal(seen) == "User:CN=alice,OU=eng,O=acme"


def test_without_a_client_certificate_the_principal_is_anonymous(ca, files):
    """ssl.client.auth none (or requested and none shown): User:ANONYMOUS."""
    for client_auth in ("none", "requested"):
        context = server_context(files["keystore"], "", files["truststore"], client_auth)
        assert PrincipalMapper().principal(handshake(context, client_context(ca, files, with_cert=False))) == ANONYMOUS


def test_a_required_certificate_not_shown_fails_the_handshake(ca, files):
    """ssl.client.auth=required: a client without a certificate is refused in the handshake."""
    context = server_context(files["keystore"], "", files["truststore"], "required")
    with pytest.raises((ssl.SSLError, ConnectionError)):
        handshake(context, client_context(ca, files, with_cert=False))


def test_a_certificate_of_another_ca_fails_the_handshake(ca, files, tmp_path):
    """A client certificate that the truststore's CAs did not sign is refused."""
    stranger = trustme.CA().issue_cert("mallory", common_name="mallory")
    stranger.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "mallory.pem"))
    client = client_context(ca, files, with_cert=False)
    client.load_cert_chain(str(tmp_path / "mallory.pem"))
    context = server_context(files["keystore"], "", files["truststore"], "required")
    with pytest.raises((ssl.SSLError, ConnectionError)):
        handshake(context, client)


def test_an_encrypted_key_needs_its_password(ca, tmp_path):
    """ssl.key.password decrypts the keystore's key; a wrong one is a typed config error."""
    from cryptography.hazmat.primitives import serialization

    leaf = ca.issue_cert("127.0.0.1")
    key = serialization.load_pem_private_key(leaf.private_key_pem.bytes(), None)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"s3cret"),
    )
    keystore = tmp_path / "encrypted.pem"
    keystore.write_bytes(encrypted + b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
    assert server_context(str(keystore), "s3cret", "", "none").verify_mode == ssl.CERT_NONE
    with pytest.raises(InvalidConfigError, match="ssl.keystore.location"):
        server_context(str(keystore), "wrong", "", "none")


@pytest.mark.parametrize(
    ("keystore", "truststore", "client_auth", "named"),
    [
        ("/no/such/keystore.pem", "", "none", "ssl.keystore.location"),
        ("KEYSTORE", "/no/such/ca.pem", "required", "ssl.truststore.location"),
        ("KEYSTORE", "", "sometimes", "ssl.client.auth"),
    ],
)
def test_unreadable_tls_files_are_typed_config_errors(files, keystore, truststore, client_auth, named):
    with pytest.raises(InvalidConfigError, match=named.replace(".", r"\.")):
        server_context(files["keystore"] if keystore == "KEYSTORE" else keystore, "", truststore, client_auth)


def test_subjects_are_written_as_rfc_2253():
    """Most specific first, multi-valued RDNs joined by +, special characters escaped."""
    cert = {
        "subject": (
            (("countryName", "US"),),
            (("organizationName", "Acme, Inc."),),
            (("organizationalUnitName", "eng"), ("userId", "7")),
            (("commonName", " alice+bob"),),
        )
    }
    assert subject_name(cert) == r"CN=\ alice\+bob,OU=eng+UID=7,O=Acme\, Inc.,C=US"


def test_kafkas_principal_mapping_rules():
    """The first rule whose pattern matches the whole subject names the principal ($1 its
    group, L / U the case); DEFAULT keeps the subject; no match keeps it too."""
    rules = PrincipalMapper(r"RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=.*$/$1@$2/U, DEFAULT")
    assert rules.name("CN=kafka-svc,OU=ServiceUsers,O=acme") == "kafka-svc"
    assert rules.name("CN=alice,OU=eng,O=acme") == "ALICE@ENG"
    assert rules.name("CN=bob") == "CN=bob"
    assert PrincipalMapper(r"RULE:^CN=([^,]*).*$/$1/L").name("CN=Carol,O=x") == "carol"
    assert PrincipalMapper(r"RULE:^O=x$/y/").name("CN=dave") == "CN=dave"
    assert PrincipalMapper(r"RULE:^CN=(.*)\/(.*)$/$2/").name("CN=a/b") == "b"


@pytest.mark.parametrize("rules", ["RULE:^CN=(.*$/$1/", "RULE:no-slashes", "DEFAULTS", "RULE:a/b/X"])
def test_bad_mapping_rules_are_refused(rules):
    with pytest.raises(InvalidConfigError, match="ssl.principal.mapping.rules"):
        PrincipalMapper(rules)


def test_tls_settings_are_checked_when_the_cluster_is_configured():
    """An SSL listener needs a keystore; the rules parse; PLAINTEXT and SSL are the protocols a
    listener speaks."""
    assert listener_address("ssl://:9093") == ("SSL", "", 9093)
    assert ControllerConfig.from_properties({"listeners": "SSL://:0", "ssl.keystore.location": "k.pem"})
    with pytest.raises(InvalidConfigError, match="ssl.keystore.location"):
        ControllerConfig.from_properties({"listeners": "SSL://:0"})
    with pytest.raises(InvalidConfigError, match="ssl.principal.mapping.rules"):
        ControllerConfig.from_properties({"ssl.principal.mapping.rules": "RULE:x"})
    with pytest.raises(InvalidConfigError, match=r"listener SASL_SSL \(SASL_SSL\) needs ssl.keystore.location"):
        ControllerConfig.from_properties({"listeners": "SASL_SSL://:0"})
    with pytest.raises(InvalidConfigError, match="SASL_OAUTH is not in listener.security.protocol.map"):
        ControllerConfig.from_properties({"listeners": "SASL_OAUTH://:0"})
