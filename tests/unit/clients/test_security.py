"""A raylog client's authentication without Ray: ClientSession against a stand-in controller
that runs the listeners' SaslExchange (as ControllerActor.authenticate does) and signs tokens.
SCRAM never sends the password and the client checks the controller's proof; refused
credentials, a controller that does not know the credential, and settings raylog cannot
honour are typed errors; a token is renewed halfway through its lifetime; a client without
settings is its handle's user."""

from __future__ import annotations

import os
import types

import pytest

from raylog.clients import security
from raylog.clients.security import ClientSession
from raylog.common import scram
from raylog.coordination.sessions import SessionKeys, new_key
from raylog.errors import InvalidConfigError, SaslAuthenticationError, UnsupportedSaslMechanismError
from raylog.kafka.sasl import SaslExchange

PASSWORD = "alice-secret"
LIFETIME_MS = 60_000


class Remote:
    def __init__(self, fn):
        self.remote = fn


class Controller:
    """authenticate() as the controller runs it, with every message the client sent kept."""

    def __init__(self, credentials: dict, now_ms: list[float]):
        self.keys = SessionKeys(new_key())
        self.exchanges: dict[str, SaslExchange] = {}
        self.messages: list[bytes] = []
        self.credentials = credentials
        self.now_ms = now_ms
        self.authenticate = Remote(self._authenticate)

    def _authenticate(self, exchange_id: str, mechanism: str, message: bytes, host: str):
        self.messages.append(message)
        exchange = self.exchanges.pop(exchange_id, None)
        if exchange is None:
            exchange = SaslExchange(("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"), self.credentials.get)
            exchange.handshake(mechanism)
        answer = exchange.authenticate(message)
        if not exchange.complete:
            self.exchanges[exchange_id] = exchange
            return answer, None, -1
        expires = int(self.now_ms[0]) + LIFETIME_MS
        return answer, self.keys.issue(exchange.principal, host, expires), expires


def _credentials(password: str = PASSWORD) -> dict:
    made = scram.upsertions({"alice": password}, scram.MECHANISMS, 4096)
    return {"alice": {scram.MECHANISMS[code]: scram.credential(*u) for u in made for code in [u[1]]}}


@pytest.fixture
def clock(monkeypatch) -> list[float]:
    now_ms = [1_000_000.0]
    monkeypatch.setattr(security.time, "time", lambda: now_ms[0] / 1000)
    monkeypatch.setattr(security.ray.util, "get_node_ip_address", lambda: "10.0.0.7")
    monkeypatch.setattr(security, "call", lambda value, timeout_s: value)
    return now_ms


def cluster_of(controller) -> types.SimpleNamespace:
    cluster = types.SimpleNamespace(controller=controller)
    cluster.session = lambda: ClientSession(cluster, "PLAINTEXT")
    return cluster


def sasl(mechanism: str, password: str = PASSWORD) -> tuple:
    return ("SASL_PLAINTEXT", mechanism, "alice", password)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
def test_a_client_authenticates_and_its_token_names_it(clock, mechanism):
    controller = Controller(_credentials(), clock)
    session = ClientSession.checked(cluster_of(controller), 5.0, *sasl(mechanism))
    token = session.token()
    checked = controller.keys.session(token, clock[0])
    assert (checked.principal, checked.host, checked.broker) == ("User:alice", "10.0.0.7", False)
    sent = b"".join(controller.messages)
    assert (PASSWORD.encode() in sent) == (mechanism == "PLAIN")  # SCRAM never sends it


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
def test_a_wrong_password_is_refused_where_the_client_is_made(clock, mechanism):
    controller = Controller(_credentials(), clock)
    with pytest.raises(SaslAuthenticationError):
        ClientSession.checked(cluster_of(controller), 5.0, *sasl(mechanism, "wrong"))


def test_the_client_refuses_a_controller_that_does_not_know_the_credential(clock):
    """SCRAM is mutual: a stand-in whose last answer carries a signature not made from alice's
    credential (one that relays the exchange but cannot sign) fails the client's check, and
    the token it offers is not taken."""
    impostor = Controller({}, clock)
    genuine = Controller(_credentials(), clock)

    def forged(exchange_id, mechanism, message, host):
        answer, token, expires = genuine._authenticate(exchange_id, mechanism, message, host)
        if token is not None:  # the final answer: the impostor's signature instead
            answer = b"v=" + os.urandom(64).hex().encode()
        return answer, token, expires

    impostor.authenticate = Remote(forged)
    with pytest.raises(SaslAuthenticationError, match="signature"):
        ClientSession.checked(cluster_of(impostor), 5.0, *sasl("SCRAM-SHA-512"))


def test_the_token_is_renewed_halfway_through_its_lifetime(clock):
    controller = Controller(_credentials(), clock)
    session = ClientSession.checked(cluster_of(controller), 5.0, *sasl("SCRAM-SHA-512"))
    first = session.token()
    clock[0] += LIFETIME_MS / 2 - 1
    assert session.token() == first
    clock[0] += 2
    second = session.token()
    assert second != first and controller.keys.session(second, clock[0]).principal == "User:alice"


def test_a_client_without_settings_is_its_handles_user(clock):
    controller = Controller(_credentials(), clock)
    cluster = types.SimpleNamespace(controller=controller)
    handle_session = ClientSession(cluster, *sasl("PLAIN"))
    cluster.session = lambda: handle_session
    inherited = ClientSession.checked(cluster, 5.0)
    assert inherited.inherited and inherited.principal == "User:alice"
    assert controller.keys.session(inherited.token(), clock[0]).principal == "User:alice"
    assert ClientSession(cluster, "PLAINTEXT").token() is None  # anonymous on purpose


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (("SSL", None, None, None), "TLS client certificate"),
        (("SASL_SSL", "PLAIN", "alice", PASSWORD), "RAY_USE_TLS"),
        (("KERBEROS", None, None, None), "security_protocol must be one of"),
        (("SASL_PLAINTEXT", "GSSAPI", "alice", PASSWORD), "sasl_mechanism must be one of"),
        (("SASL_PLAINTEXT", "PLAIN", None, PASSWORD), "needs sasl_plain_username"),
        (("SASL_PLAINTEXT", "PLAIN", "alice", None), "needs sasl_plain_username"),
        ((None, None, "alice", PASSWORD), "need security_protocol SASL"),
    ],
)
def test_settings_raylog_cannot_honour_are_refused_before_any_call(monkeypatch, settings, message):
    monkeypatch.delenv("RAY_USE_TLS", raising=False)
    with pytest.raises(InvalidConfigError, match=message):
        ClientSession(None, *settings)


def test_sasl_ssl_is_taken_when_rays_transport_is_encrypted(monkeypatch):
    monkeypatch.setenv("RAY_USE_TLS", "1")
    assert ClientSession(None, "SASL_SSL", "SCRAM-SHA-512", "alice", PASSWORD).principal == "User:alice"


def test_a_mechanism_the_cluster_does_not_enable_is_its_typed_error(clock):
    controller = Controller(_credentials(), clock)

    def scram_only(exchange_id, mechanism, message, host):
        exchange = SaslExchange(("SCRAM-SHA-512",), controller.credentials.get)
        exchange.handshake(mechanism)
        return exchange.authenticate(message), None, -1

    controller.authenticate = Remote(scram_only)
    with pytest.raises(UnsupportedSaslMechanismError):
        ClientSession.checked(cluster_of(controller), 5.0, *sasl("PLAIN"))
