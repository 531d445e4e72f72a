"""TLS on the Kafka listeners: the server's SSL context from Kafka's settings.

Kafka's SSL listener presents the broker's certificate (``ssl.keystore.location``; here a PEM
file holding the certificate chain and its private key, Kafka's ``ssl.keystore.type=PEM``) and,
with ``ssl.client.auth`` ``requested`` or ``required``, asks the client for one signed by a CA
of ``ssl.truststore.location`` (PEM). Who a client certificate stands for: see
:mod:`raylog.principals`.

No Ray here: the listener actor builds its context with this.
"""

from __future__ import annotations

import ssl

from raylog.errors import InvalidConfigError

#: ``ssl.client.auth``'s values and the verify mode each gives the server's context.
CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def server_context(keystore: str, key_password: str, truststore: str, client_auth: str) -> ssl.SSLContext:
    """The listener's TLS context: TLS 1.2 or later, its certificate and key from the PEM file
    ``keystore`` (the key decrypted with ``key_password`` when it is encrypted), and the client
    certificates ``client_auth`` asks for checked against the CAs of ``truststore``.

    Raises:
        InvalidConfigError: a file that cannot be read or is not PEM, a wrong key password, or
            an ``ssl.client.auth`` that is not one of :data:`CLIENT_AUTH`.
    """
    if client_auth not in CLIENT_AUTH:
        raise InvalidConfigError(f"ssl.client.auth must be one of {sorted(CLIENT_AUTH)}, got {client_auth!r}")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(keystore, password=key_password or None)
    except (OSError, ssl.SSLError) as exc:
        raise InvalidConfigError(f"ssl.keystore.location {keystore!r}: no certificate and key read: {exc}") from None
    if truststore:
        try:
            context.load_verify_locations(cafile=truststore)
        except (OSError, ssl.SSLError) as exc:
            raise InvalidConfigError(f"ssl.truststore.location {truststore!r}: no CA read: {exc}") from None
    elif client_auth != "none":
        context.load_default_certs(ssl.Purpose.CLIENT_AUTH)  # the system's CAs
    context.verify_mode = CLIENT_AUTH[client_auth]
    return context
