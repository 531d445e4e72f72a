"""Who a raylog client is: kafka-python's security settings, authenticated with the controller.

A Producer, Consumer or Admin given ``security_protocol="SASL_PLAINTEXT"`` (or ``"SASL_SSL"``),
a ``sasl_mechanism`` and ``sasl_plain_username`` / ``sasl_plain_password`` authenticates with
the cluster's controller as a Kafka client does with a SASL listener: SCRAM-SHA-256 or
SCRAM-SHA-512 (RFC 5802, through ``scramp``: the password never leaves the client, and the
client checks that the controller knows the user's credential too) or PLAIN (the password is
sent, inside Ray's transport). The controller answers a signed session token (see
:mod:`raylog.coordination.sessions`) that each of the client's calls carries; the client
authenticates again halfway through the token's lifetime. Without credentials
(``PLAINTEXT``, the default) the client's calls carry no token: they are ``User:ANONYMOUS``'s.

raylog's clients reach the cluster through Ray, not a Kafka port: ``SASL_SSL`` asks that Ray's
own transport be encrypted (Ray's TLS, ``RAY_USE_TLS=1``) and is refused otherwise; ``SSL``
(a TLS client certificate as the principal) is a Kafka listener's, and refused here.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from typing import Any

import ray
import scramp

from raylog.errors import InvalidConfigError, SaslAuthenticationError
from raylog.transport import call

#: The security protocols raylog's clients take (kafka-python's names).
SECURITY_PROTOCOLS = ("PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL")
#: The settings that say who a client is (kafka-python's names), in ClientSession's order.
SECURITY_SETTINGS = ("security_protocol", "sasl_mechanism", "sasl_plain_username", "sasl_plain_password")
#: The SASL mechanisms they authenticate with.
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def security_settings(client_config: dict[str, Any]) -> dict[str, Any]:
    """The settings of ``client_config`` (a client's keyword arguments) that say who the client
    is: for what is done on the client's behalf before the client exists (a write's topic
    described on the driver before its tasks' producers send)."""
    return {name: value for name, value in client_config.items() if name in SECURITY_SETTINGS}


def _ray_tls() -> bool:
    return os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true")


class ClientSession:
    """A client's principal toward one cluster (see the module docstring).

    Args:
        cluster: the cluster handle (its controller authenticates).
        security_protocol, sasl_mechanism, sasl_plain_username, sasl_plain_password:
            kafka-python's settings of the same names; none given: the client is who the
            handle's other clients are (``RaylogCluster.session``: the settings given to
            ``raylog.connect``, else ``User:ANONYMOUS``).
        timeout_s: how long one authentication call may take.

    Raises:
        InvalidConfigError: an unknown protocol or mechanism, SASL without a user name and
            password, SASL_SSL without Ray's TLS, or SSL.
    """

    def __init__(
        self,
        cluster: Any,
        security_protocol: str | None = None,
        sasl_mechanism: str | None = None,
        sasl_plain_username: str | None = None,
        sasl_plain_password: str | None = None,
        timeout_s: float = 30.0,
    ):
        settings = (security_protocol, sasl_mechanism, sasl_plain_username, sasl_plain_password)
        #: No settings of its own: the handle's session speaks for this client.
        self.inherited = all(value is None for value in settings)
        security_protocol = security_protocol or "PLAINTEXT"
        if security_protocol == "SSL":
            raise InvalidConfigError(
                "security_protocol SSL (a TLS client certificate) is for Kafka clients of a listener: "
                "raylog's clients reach the cluster through Ray; use SASL_SSL with Ray's TLS (RAY_USE_TLS=1)"
            )
        if security_protocol not in SECURITY_PROTOCOLS:
            raise InvalidConfigError(
                f"security_protocol must be one of {', '.join(SECURITY_PROTOCOLS)}, got {security_protocol!r}"
            )
        sasl = security_protocol != "PLAINTEXT"
        if sasl:
            if sasl_mechanism not in SASL_MECHANISMS:
                raise InvalidConfigError(
                    f"sasl_mechanism must be one of {', '.join(SASL_MECHANISMS)} with {security_protocol}, "
                    f"got {sasl_mechanism!r}"
                )
            if not sasl_plain_username or sasl_plain_password is None:
                raise InvalidConfigError(f"{security_protocol} needs sasl_plain_username and sasl_plain_password")
            if security_protocol == "SASL_SSL" and not _ray_tls():
                raise InvalidConfigError(
                    "SASL_SSL asks for an encrypted transport: raylog's clients talk through Ray, whose TLS is "
                    "off here (RAY_USE_TLS); use SASL_PLAINTEXT, or turn on Ray's TLS"
                )
        elif sasl_plain_username is not None or sasl_plain_password is not None:
            raise InvalidConfigError("sasl_plain_username and sasl_plain_password need security_protocol SASL_*")
        #: The settings given (pickled with a client's own handle, see ``client_handle``).
        self.settings = {n: value for n, value in zip(SECURITY_SETTINGS, settings, strict=True) if value is not None}
        self._cluster = cluster
        self._mechanism = sasl_mechanism if sasl else None
        self._user = sasl_plain_username
        self._password = sasl_plain_password
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._token: str | None = None
        self._renew_at_s = 0.0  # wall clock: authenticate again from then on

    @classmethod
    def checked(cls, cluster: Any, timeout_s: float, *settings: str | None) -> ClientSession:
        """A client's session (``settings``: security_protocol, sasl_mechanism,
        sasl_plain_username, sasl_plain_password), authenticated now if the client has
        credentials of its own: refused ones fail where the client is made, not at its first
        call.

        Raises:
            InvalidConfigError, SaslAuthenticationError, UnsupportedSaslMechanismError.
        """
        session = cls(cluster, *settings, timeout_s=timeout_s)
        if not session.inherited:
            session.token()
        return session

    @property
    def principal(self) -> str:
        """``User:<name>``, or ``User:ANONYMOUS`` without credentials."""
        if self.inherited:
            return self._cluster.session().principal
        return f"User:{self._user}" if self._mechanism is not None else "User:ANONYMOUS"

    def token(self) -> str | None:
        """The token the client's calls carry (None: anonymous), authenticating first when
        there is none yet or it is halfway through its lifetime.

        Raises:
            SaslAuthenticationError: the controller refused the credentials.
            UnsupportedSaslMechanismError: the cluster does not enable the mechanism.
        """
        if self.inherited:
            return self._cluster.session().token()
        if self._mechanism is None:
            return None
        if self._token is not None and time.time() < self._renew_at_s:
            return self._token
        with self._lock:
            if self._token is None or time.time() >= self._renew_at_s:
                self._authenticate()
            return self._token

    def _authenticate(self) -> None:
        exchange_id = uuid.uuid4().hex
        host = ray.util.get_node_ip_address()
        started_s = time.time()

        def step(message: bytes) -> tuple[bytes, str | None, int]:
            ref = self._cluster.controller.authenticate.remote(exchange_id, self._mechanism, message, host)
            return call(ref, self._timeout_s)

        if self._mechanism == "PLAIN":
            _, token, expires_ms = step(f"\0{self._user}\0{self._password}".encode())
        else:
            client = scramp.ScramClient([self._mechanism], self._user, self._password)
            server_first, _, _ = step(client.get_client_first().encode())
            try:
                client.set_server_first(server_first.decode())
                final = client.get_client_final()
            except scramp.ScramException as exc:
                raise SaslAuthenticationError(f"the controller's SCRAM answer was refused: {exc}") from None
            server_final, token, expires_ms = step(final.encode())
            try:
                client.set_server_final(server_final.decode())  # the controller proves it knows the credential
            except scramp.ScramException as exc:
                raise SaslAuthenticationError(f"the controller's SCRAM signature was refused: {exc}") from None
        if token is None:
            raise SaslAuthenticationError("the controller did not complete the authentication")
        self._token = token
        self._renew_at_s = started_s + (expires_ms / 1000 - started_s) / 2
