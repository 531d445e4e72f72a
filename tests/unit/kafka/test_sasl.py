"""SASL exchanges of one connection without Ray: PLAIN and SCRAM-SHA-256/512 against stored
credentials, with scramp's client (an implementation nobody here wrote) on the other side, and
the hostile inputs: wrong passwords, unknown users, replayed, truncated, oversized and
out-of-order messages, a second handshake. Every failure is the one typed error with the one
message, and no failure authenticates."""

from __future__ import annotations

import os

import pytest
import scramp

from raylog.common import scram
from raylog.config import SASL_MECHANISMS as MECHANISMS
from raylog.errors import IllegalSaslStateError, SaslAuthenticationError, UnsupportedSaslMechanismError
from raylog.kafka.sasl import FAILED, MAX_MESSAGE_BYTES, SaslExchange

PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret"}


def _credentials() -> dict:
    out: dict = {}
    for user, password in PASSWORDS.items():
        for code, mechanism in scram.MECHANISMS.items():
            salt = os.urandom(16)
            salted = scram.salted_password(mechanism, password, salt, 4096)
            out.setdefault(user, {})[mechanism] = scram.credential(user, code, 4096, salt, salted)
    return out


CREDENTIALS = _credentials()


def exchange(mechanism: str = "SCRAM-SHA-512", enabled: tuple[str, ...] = MECHANISMS) -> SaslExchange:
    sasl = SaslExchange(enabled, CREDENTIALS.get)
    sasl.handshake(mechanism)
    return sasl


def scram_login(sasl: SaslExchange, mechanism: str, user: str, password: str) -> None:
    client = scramp.ScramClient([mechanism], user, password)
    client.set_server_first(sasl.authenticate(client.get_client_first().encode()).decode())
    client.set_server_final(sasl.authenticate(client.get_client_final().encode()).decode())


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_authenticates_the_user_and_proves_the_server(mechanism):
    """scramp's client logs in and checks the server's signature (the server knew the keys)."""
    sasl = exchange(mechanism)
    scram_login(sasl, mechanism, "alice", "alice-secret")
    assert sasl.complete and sasl.principal == "User:alice"


@pytest.mark.parametrize(("user", "password"), [("alice", "wrong"), ("mallory", "alice-secret"), ("bob", "")])
@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
def test_wrong_passwords_and_unknown_users_fail_alike(mechanism, user, password):
    sasl = exchange(mechanism)
    with pytest.raises(SaslAuthenticationError) as refused:
        if mechanism == "PLAIN":
            sasl.authenticate(f"\0{user}\0{password}".encode())
        else:
            scram_login(sasl, mechanism, user, password)
    assert str(refused.value) == FAILED and not sasl.complete and sasl.principal is None


def test_plain_checks_the_password_against_the_scram_credential():
    sasl = exchange("PLAIN")
    assert sasl.authenticate(b"\0bob\0bob-secret") == b""
    assert sasl.principal == "User:bob"
    other = exchange("PLAIN")
    assert other.authenticate(b"bob\0bob\0bob-secret") == b"" and other.principal == "User:bob"


@pytest.mark.parametrize(
    "message",
    [b"", b"\0alice", b"\0\0", b"alice\0alice-secret", b"carol\0alice\0alice-secret", b"\xff\0alice\0x", b"\0" * 5],
)
def test_malformed_plain_messages_are_refused(message):
    """Too few or too many fields, an authorization id other than the user, bad UTF-8."""
    sasl = exchange("PLAIN")
    with pytest.raises(SaslAuthenticationError):
        sasl.authenticate(message)
    assert not sasl.complete


@pytest.mark.parametrize(
    "first",
    [
        b"",
        b"garbage",
        b"n,,",
        b"n,,n=alice",
        b"p=tls-unique,,n=alice,r=abc",
        b"\xff\xfe",
        b"n,,n=alice,r=" + b"x" * 100,
    ],
)
def test_malformed_scram_first_messages_are_refused(first):
    sasl = exchange("SCRAM-SHA-256")
    try:
        answer = sasl.authenticate(first)
    except SaslAuthenticationError:
        assert not sasl.complete
        return
    # A first message that parses gets the server's first; the proof that follows must fail.
    assert answer.startswith(b"r=")
    with pytest.raises(SaslAuthenticationError):
        sasl.authenticate(b"c=biws,r=nonsense,p=AAAA")
    assert not sasl.complete


def test_a_replayed_final_message_does_not_authenticate_another_exchange():
    """A client-final message recorded from one exchange fails in another (a new server nonce)."""
    recorded = exchange("SCRAM-SHA-512")
    client = scramp.ScramClient(["SCRAM-SHA-512"], "alice", "alice-secret")
    first = client.get_client_first().encode()
    client.set_server_first(recorded.authenticate(first).decode())
    final = client.get_client_final().encode()
    recorded.authenticate(final)
    replay = exchange("SCRAM-SHA-512")
    replay.authenticate(first)
    with pytest.raises(SaslAuthenticationError):
        replay.authenticate(final)
    assert not replay.complete


def test_out_of_order_and_oversized_messages():
    """Authenticate before the handshake, after completion, a second handshake, a mechanism not
    enabled, and a message over MAX_MESSAGE_BYTES are each refused with their typed error."""
    fresh = SaslExchange(MECHANISMS, CREDENTIALS.get)
    with pytest.raises(IllegalSaslStateError):
        fresh.authenticate(b"\0alice\0alice-secret")
    with pytest.raises(UnsupportedSaslMechanismError, match="SCRAM-SHA-256"):
        SaslExchange(("SCRAM-SHA-256",), CREDENTIALS.get).handshake("PLAIN")
    with pytest.raises(UnsupportedSaslMechanismError):
        fresh.handshake("GSSAPI")
    done = exchange("PLAIN")
    done.authenticate(b"\0alice\0alice-secret")
    with pytest.raises(IllegalSaslStateError):
        done.authenticate(b"\0bob\0bob-secret")
    with pytest.raises(IllegalSaslStateError):
        done.handshake("PLAIN")
    assert done.principal == "User:alice"
    with pytest.raises(SaslAuthenticationError, match="bytes"):
        exchange("PLAIN").authenticate(b"\0alice\0" + b"x" * MAX_MESSAGE_BYTES)


def test_a_connection_gets_one_attempt():
    """After a failure the exchange refuses every further message, the right password too (a
    client that pipelines guesses on one connection gets none of them tried)."""
    sasl = exchange("PLAIN")
    with pytest.raises(SaslAuthenticationError):
        sasl.authenticate(b"\0alice\0guess")
    with pytest.raises(IllegalSaslStateError, match="failed"):
        sasl.authenticate(b"\0alice\0alice-secret")
    assert not sasl.complete


def test_reauthentication_starts_the_exchange_again_for_the_same_user_only():
    """KIP-368: with re-authentication allowed, a handshake on an authenticated connection
    starts over (nothing else may be sent meanwhile: not complete); the same user with any
    mechanism succeeds, another user is refused and the connection keeps no principal."""
    sasl = SaslExchange(MECHANISMS, CREDENTIALS.get, reauthentication=True)
    sasl.handshake("SCRAM-SHA-512")
    scram_login(sasl, "SCRAM-SHA-512", "alice", "alice-secret")
    sasl.handshake("SCRAM-SHA-256")
    assert not sasl.complete and sasl.principal is None
    scram_login(sasl, "SCRAM-SHA-256", "alice", "alice-secret")
    assert sasl.principal == "User:alice"
    sasl.handshake("PLAIN")
    with pytest.raises(SaslAuthenticationError, match="re-authentication as User:bob on a connection of User:alice"):
        sasl.authenticate(b"\0bob\0bob-secret")
    assert not sasl.complete
    with pytest.raises(IllegalSaslStateError):
        sasl.authenticate(b"\0alice\0alice-secret")  # one attempt: the connection is to close


def test_a_deleted_user_or_changed_password_fails_the_reauthentication():
    known = {"alice": dict(CREDENTIALS["alice"])}
    sasl = SaslExchange(MECHANISMS, known.get, reauthentication=True)
    sasl.handshake("PLAIN")
    sasl.authenticate(b"\0alice\0alice-secret")
    del known["alice"]
    sasl.handshake("PLAIN")
    with pytest.raises(SaslAuthenticationError):
        sasl.authenticate(b"\0alice\0alice-secret")


def test_without_reauthentication_a_second_handshake_is_illegal():
    sasl = exchange("PLAIN")
    sasl.authenticate(b"\0alice\0alice-secret")
    with pytest.raises(IllegalSaslStateError):
        sasl.handshake("PLAIN")
    assert sasl.principal == "User:alice"


def _final_with_nonce(first_bare: str, server_first: str, nonce: str, password: str, salt: bytes, iterations: int):
    """A SCRAM-SHA-256 client-final message with ``nonce``, its proof computed over the
    message as sent (as librdkafka 2.0 computes it)."""
    import base64
    import hashlib
    import hmac

    salted = scram.salted_password("SCRAM-SHA-256", password, salt, iterations)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    stored_key = hashlib.sha256(client_key).digest()
    without_proof = f"c=biws,r={nonce}"
    auth = f"{first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(stored_key, auth, "sha256").digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def test_a_final_nonce_that_ends_with_the_servers_is_taken_as_kafka_takes_it():
    """librdkafka 2.0 (kcat on Debian 12) sends its part of the nonce twice in its final
    message; Kafka's server takes a final nonce that ends with the one it sent, and so does
    raylog's. One that does not end with it (another exchange's) is refused."""
    credential = CREDENTIALS["alice"]["SCRAM-SHA-256"]
    for doubled, accepted in ((True, True), (False, False)):
        sasl = exchange("SCRAM-SHA-256")
        first_bare = "n=alice,r=clientpart"
        server_first = sasl.authenticate(f"n,,{first_bare}".encode()).decode()
        combined = server_first.split(",")[0][2:]
        nonce = "clientpart" + combined if doubled else "clientpart" + "x" * 24
        final = _final_with_nonce(
            first_bare, server_first, nonce, "alice-secret", credential.salt, credential.iterations
        )
        if accepted:
            assert sasl.authenticate(final).startswith(b"v=") and sasl.principal == "User:alice"
        else:
            with pytest.raises(SaslAuthenticationError):
                sasl.authenticate(final)
