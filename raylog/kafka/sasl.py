"""SASL authentication of one Kafka connection (KIP-43, KIP-152): SaslHandshake picks a mechanism,
SaslAuthenticate carries its messages until the client is authenticated or refused.

Mechanisms: ``PLAIN`` (RFC 4616: the user name and password in one message, checked against
the user's SCRAM credential) and ``SCRAM-SHA-256`` / ``SCRAM-SHA-512`` (RFC 5802, RFC 7677:
two rounds, the password never sent; the server side is ``scramp``'s, fed with the stored
keys). An authenticated connection's principal is ``User:<name>``. Every failure is
:class:`~raylog.errors.SaslAuthenticationError` with the same message for an unknown user and
a wrong password (no user enumeration); the listener answers it and closes the connection.
Re-authentication (KIP-368): where the listener allows it (``connections.max.reauth.ms``), a
new SaslHandshake on an authenticated connection starts the exchange again; it must end with
the same principal. No Ray here: the listener keeps one :class:`SaslExchange` per connection.
"""

from __future__ import annotations

from collections.abc import Callable

import scramp

from raylog.common.scram import Credentials
from raylog.errors import IllegalSaslStateError, SaslAuthenticationError, UnsupportedSaslMechanismError

#: The one message of every failed authentication (Kafka's).
FAILED = "Authentication failed: invalid credentials"
#: The longest SASL message read (a name and password, or a SCRAM message, are far shorter).
MAX_MESSAGE_BYTES = 8192


class SaslExchange:
    """One connection's authentication.

    Args:
        enabled: the mechanisms the listener allows (``sasl.enabled.mechanisms``).
        credentials: a user's SCRAM credentials by mechanism (None or empty: no such user).
    """

    def __init__(
        self,
        enabled: tuple[str, ...],
        credentials: Callable[[str], Credentials | None],
        reauthentication: bool = False,
    ):
        self._enabled = enabled
        self._credentials = credentials
        self._reauthentication = reauthentication
        self._mechanism: str | None = None
        self._scram: scramp.ScramServer | None = None
        self._user = ""  # the user a SCRAM exchange names
        self._failed = False
        #: ``User:<name>`` once authenticated, else None.
        self.principal: str | None = None
        #: The principal of the authentication a re-authentication is under way for.
        self._previous: str | None = None

    @property
    def enabled(self) -> tuple[str, ...]:
        """The mechanisms the listener allows."""
        return self._enabled

    @property
    def mechanism(self) -> str | None:
        """The mechanism of the handshake, once done."""
        return self._mechanism

    @property
    def complete(self) -> bool:
        return self.principal is not None

    def handshake(self, mechanism: str) -> None:
        """SaslHandshake: use ``mechanism`` from now on.

        Raises:
            UnsupportedSaslMechanismError: not enabled here (the answer lists those that are).
            IllegalSaslStateError: a second handshake on the connection, unless it is
                authenticated and the listener re-authenticates (KIP-368).
        """
        if self.complete and self._reauthentication:
            self._previous, self.principal = self.principal, None
            self._mechanism, self._scram, self._user = None, None, ""
        if self._mechanism is not None:
            raise IllegalSaslStateError("the connection has done its SASL handshake already")
        if mechanism not in self._enabled:
            raise UnsupportedSaslMechanismError(
                f"SASL mechanism {mechanism!r} is not enabled (sasl.enabled.mechanisms: {', '.join(self._enabled)})"
            )
        self._mechanism = mechanism

    def authenticate(self, message: bytes) -> bytes:
        """SaslAuthenticate: the server's answer to the client's next message.

        Raises:
            IllegalSaslStateError: no handshake yet, or the exchange is over (authenticated,
                or failed: a connection gets one attempt).
            SaslAuthenticationError: the credentials are refused, or the message does not
                parse (too long, out of turn, not the mechanism's).
        """
        if self._mechanism is None or self.complete or self._failed:
            state = "done" if self.complete else "failed" if self._failed else "no handshake"
            raise IllegalSaslStateError(f"SaslAuthenticate out of turn: {state}")
        try:
            if len(message) > MAX_MESSAGE_BYTES:
                raise SaslAuthenticationError(f"{FAILED} (a SASL message of {len(message)} bytes)")
            answer = self._plain(message) if self._mechanism == "PLAIN" else self._scram_step(message)
            if self.complete and self._previous not in (None, self.principal):
                other, self.principal = self.principal, None
                raise SaslAuthenticationError(
                    f"{FAILED} (re-authentication as {other} on a connection of {self._previous})"
                )
            return answer
        except SaslAuthenticationError:
            self._failed = True  # one attempt per connection: no guessing on an open one
            raise

    def _plain(self, message: bytes) -> bytes:
        try:
            authzid, user, password = message.decode("utf-8").split("\0")
        except (UnicodeDecodeError, ValueError):
            raise SaslAuthenticationError(f"{FAILED} (a malformed PLAIN message)") from None
        if authzid and authzid != user:
            raise SaslAuthenticationError(f"{FAILED} (an authorization id other than the user)")
        known = self._credentials(user) or {}
        if not user or not any(credential.verifies(password) for credential in known.values()):
            raise SaslAuthenticationError(FAILED)
        self.principal = f"User:{user}"
        return b""

    def _scram_step(self, message: bytes) -> bytes:
        try:
            if self._scram is None:
                self._scram = scramp.ScramMechanism(self._mechanism).make_server(self._auth_info)
                self._scram.set_client_first(message.decode("utf-8"))
                return self._scram.get_server_first().encode("utf-8")
            final = message.decode("utf-8")
            nonce, ours = next((part[2:] for part in final.split(",") if part.startswith("r=")), ""), self._scram.nonce
            if nonce != str(ours) and nonce.endswith(str(ours)):
                # Kafka's server takes a final nonce that ends with its own (ScramSaslServer), and
                # librdkafka 2.0 (Debian 12's, under kcat) sends its part of the nonce twice; the
                # proof is checked over the message as sent, and the server's part is still in it.
                self._scram.nonce = type(ours)(nonce)
            self._scram.set_client_final(final)
            answer = self._scram.get_server_final().encode("utf-8")
        except (scramp.ScramException, UnicodeDecodeError, KeyError, ValueError):
            raise SaslAuthenticationError(FAILED) from None
        self.principal = f"User:{self._user}"
        return answer

    def _auth_info(self, user: str) -> tuple[bytes, bytes, bytes, int]:
        self._user = user
        credential = (self._credentials(user) or {}).get(self._mechanism)
        if credential is None:
            raise KeyError(user)
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations
