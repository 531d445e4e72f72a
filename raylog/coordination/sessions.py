"""Session tokens: the principal of a call from raylog's own clients, signed by the cluster.

raylog's Producer, Consumer and Admin talk to actors through Ray, where no connection says who
is calling. A client given SASL credentials (kafka-python's ``security_protocol``,
``sasl_mechanism``, ``sasl_plain_username``, ``sasl_plain_password``) authenticates once with
the controller, which checks the password against the user's SCRAM credential and hands back a
token: the principal, the host the client runs on and an expiry, signed with HMAC-SHA256 under
the cluster's session key (made at the cluster's creation, kept in the controller's journal and
given to every actor that authorizes). Every call the client makes to a replica or the
controller carries the token; the actor checks the signature (once per token: the answer is
cached until the token expires) and authorizes the principal with Kafka's ACLs. A call without
a token is ``User:ANONYMOUS``'s.

The actors of the cluster (listeners, replicas fetching from their leaders) sign their own
tokens as the broker: a broker's calls are allowed everything, as Kafka's inter-broker
principal is a super user. A user's authentication never yields a broker token.

Plain Python, no Ray: the controller issues tokens with it, actors check them with it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

import msgpack

from raylog.errors import SaslAuthenticationError
from raylog.principals import ANONYMOUS

#: The principal of the cluster's own actors (Kafka's inter-broker principal).
BROKER = "User:__raylog_broker"
#: The bytes of a session key.
KEY_BYTES = 32
#: Tokens remembered as checked, per actor (a bound on memory; the cache is emptied when full).
_CACHE_SIZE = 4096
#: How long a broker's own token is valid; it signs a new one halfway through.
BROKER_TOKEN_LIFETIME_MS = 3_600_000


def new_key() -> str:
    """A new random session key (hex), made once per cluster."""
    return secrets.token_hex(KEY_BYTES)


class Session:
    """Who a checked token speaks for."""

    __slots__ = ("broker", "expires_ms", "host", "principal")

    def __init__(self, principal: str, host: str, expires_ms: int, broker: bool = False):
        self.principal = principal
        self.host = host
        self.expires_ms = expires_ms
        self.broker = broker

    def __repr__(self) -> str:
        return f"Session({self.principal!r}, host={self.host!r}, expires_ms={self.expires_ms})"


#: The session of a call without a token.
ANONYMOUS_SESSION = Session(ANONYMOUS, "*", 2**62)


class SessionKeys:
    """Issues and checks the tokens of one cluster (its session key, hex).

    Example:
        >>> keys = SessionKeys(new_key())
        >>> token = keys.issue("User:alice", "10.0.0.7", expires_ms=2_000)
        >>> keys.session(token, now_ms=1_000).principal
        'User:alice'
        >>> keys.session(None, now_ms=1_000).principal
        'User:ANONYMOUS'
    """

    def __init__(self, key: str):
        self._key = bytes.fromhex(key)
        self._checked: dict[str, Session] = {}
        self._broker: tuple[str, float] | None = None  # (token, when to sign a new one)

    def issue(self, principal: str, host: str, expires_ms: int, broker: bool = False) -> str:
        """A token for ``principal`` on ``host``, valid until ``expires_ms`` (ms since the epoch)."""
        payload = msgpack.packb([principal, host, int(expires_ms), bool(broker)])
        return f"{_encode(payload)}.{_encode(self._sign(payload))}"

    def broker_token(self, now_ms: float) -> str:
        """A token of the cluster's own actors, valid at least half of
        :data:`BROKER_TOKEN_LIFETIME_MS` from ``now_ms`` (signed again when older)."""
        if self._broker is None or now_ms >= self._broker[1]:
            token = self.issue(BROKER, "*", int(now_ms) + BROKER_TOKEN_LIFETIME_MS, broker=True)
            self._broker = (token, now_ms + BROKER_TOKEN_LIFETIME_MS / 2)
        return self._broker[0]

    def session(self, token: str | None, now_ms: float) -> Session:
        """The session ``token`` stands for (None: the anonymous one).

        Raises:
            SaslAuthenticationError: the token is not one this cluster signed, or it expired
                (the client authenticates again).
        """
        if token is None:
            return ANONYMOUS_SESSION
        if not isinstance(token, str):
            raise SaslAuthenticationError(f"a session token is a str, not {type(token).__name__}")
        session = self._checked.get(token)
        if session is None:
            session = self._check(token)
            if len(self._checked) >= _CACHE_SIZE:
                self._checked.clear()
            self._checked[token] = session
        if now_ms >= session.expires_ms:
            self._checked.pop(token, None)
            raise SaslAuthenticationError(f"the session of {session.principal} expired: authenticate again")
        return session

    def _check(self, token: str) -> Session:
        try:
            encoded_payload, encoded_signature = token.split(".")
            payload = _decode(encoded_payload)
            signature = _decode(encoded_signature)
        except ValueError as exc:
            raise SaslAuthenticationError("a malformed session token") from exc
        if not hmac.compare_digest(signature, self._sign(payload)):
            raise SaslAuthenticationError("a session token this cluster did not sign")
        principal, host, expires_ms, broker = msgpack.unpackb(payload)
        return Session(principal, host, expires_ms, broker)

    def _sign(self, payload: bytes) -> bytes:
        return hmac.new(self._key, payload, hashlib.sha256).digest()


def _encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
