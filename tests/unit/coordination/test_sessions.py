"""Session tokens of raylog's own clients: what the controller signs is what an actor accepts,
and nothing else is: a token of another cluster, one altered in any byte, one past its expiry,
garbage, or a user's token dressed as the broker's."""

from __future__ import annotations

import base64

import msgpack
import pytest

from raylog.coordination.sessions import BROKER, BROKER_TOKEN_LIFETIME_MS, SessionKeys, new_key
from raylog.errors import SaslAuthenticationError


@pytest.fixture
def keys() -> SessionKeys:
    return SessionKeys(new_key())


def test_a_token_names_its_principal_and_host_until_it_expires(keys):
    token = keys.issue("User:alice", "10.0.0.7", expires_ms=5_000)
    session = keys.session(token, now_ms=4_999)
    assert (session.principal, session.host, session.broker) == ("User:alice", "10.0.0.7", False)
    assert keys.session(token, now_ms=4_999) is session  # checked once, then remembered
    with pytest.raises(SaslAuthenticationError, match="expired"):
        keys.session(token, now_ms=5_000)


def test_no_token_is_the_anonymous_principal(keys):
    assert keys.session(None, now_ms=0).principal == "User:ANONYMOUS"


def test_another_clusters_token_is_refused(keys):
    theirs = SessionKeys(new_key()).issue("User:alice", "*", expires_ms=10**13)
    with pytest.raises(SaslAuthenticationError, match="did not sign"):
        keys.session(theirs, now_ms=0)


def test_every_byte_of_a_token_is_covered_by_its_signature(keys):
    token = keys.issue("User:alice", "*", expires_ms=10**13)
    for i in range(len(token)):
        for replacement in "A_":
            forged = token[:i] + replacement + token[i + 1 :]
            if token[i] in (replacement, ".") or _same_bytes(forged, token):
                continue  # (a padding bit of base64 may change nothing: then it is the same token)
            with pytest.raises(SaslAuthenticationError):
                keys.session(forged, now_ms=0)


def _same_bytes(a: str, b: str) -> bool:
    try:
        return [_decoded(p) for p in a.split(".")] == [_decoded(p) for p in b.split(".")]
    except ValueError:
        return False


def _decoded(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def test_a_user_cannot_make_a_token_the_brokers_or_extend_it(keys):
    token = keys.issue("User:alice", "*", expires_ms=1_000)
    payload, signature = token.split(".")
    for fields in (["User:alice", "*", 1_000, True], [BROKER, "*", 1_000, True], ["User:alice", "*", 10**13, False]):
        forged = base64.urlsafe_b64encode(msgpack.packb(fields)).rstrip(b"=").decode()
        with pytest.raises(SaslAuthenticationError, match="did not sign"):
            keys.session(f"{forged}.{signature}", now_ms=0)


@pytest.mark.parametrize("garbage", ["", ".", "..", "a.b.c", "not a token", "é.é", "AAAA.AAAA", 17, b"x.y", ["x"]])
def test_garbage_is_refused_with_a_typed_error(keys, garbage):
    with pytest.raises(SaslAuthenticationError):
        keys.session(garbage, now_ms=0)


def test_the_brokers_token_is_signed_again_halfway_through_its_lifetime(keys):
    first = keys.broker_token(now_ms=0)
    assert keys.session(first, now_ms=1).broker
    assert keys.broker_token(now_ms=BROKER_TOKEN_LIFETIME_MS / 2 - 1) == first
    second = keys.broker_token(now_ms=BROKER_TOKEN_LIFETIME_MS / 2)
    assert second != first
    assert keys.session(second, now_ms=BROKER_TOKEN_LIFETIME_MS).broker


def test_the_cache_of_checked_tokens_is_bounded(keys):
    for i in range(10_000):
        keys.session(keys.issue(f"User:u{i}", "*", expires_ms=10**13), now_ms=0)
    assert len(keys._checked) <= 4096
