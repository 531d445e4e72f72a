"""Kafka's SASL authentication and SCRAM credential APIs on a listener: SaslHandshake v0-1,
SaslAuthenticate v0-2, DescribeUserScramCredentials v0 and AlterUserScramCredentials v0.

On a SASL_PLAINTEXT or SASL_SSL listener every connection starts with a
:class:`~raylog.kafka.sasl.SaslExchange` in its state (:data:`CONNECTION`): until it completes,
the listener reads nothing but ApiVersions, SaslHandshake and SaslAuthenticate (another request
closes the connection, as Kafka's SaslServerAuthenticator does), and a failed authentication is
answered SASL_AUTHENTICATION_FAILED and the connection closed. With ``connections.max.reauth.ms``
(KIP-368) SaslAuthenticate tells the client its session's lifetime; the client authenticates
again on the connection before it ends (a new SaslHandshake, the same user), and a connection
whose session ended sends nothing else (the listener closes it). The principal it authenticated
is the connection's for the authorizer. After SaslHandshake v0 (kafka-python's; librdkafka
needs to see it offered) the SASL tokens come unframed, each length-prefixed, until the
exchange completes (KIP-43): the listener answers each the same way, and closes the
connection on a refusal. On a listener without SASL, both answer ILLEGAL_SASL_STATE. The
credential APIs go to the controller (which needs DESCRIBE or ALTER on the cluster:
:mod:`raylog.actors.kafka.authorization`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from raylog.actors.kafka.admin import ask_each
from raylog.actors.kafka.context import CONNECTION, BrokerContext
from raylog.actors.kafka.coordinator_errors import code_of
from raylog.errors import IllegalSaslStateError, RaylogError, SaslAuthenticationError
from raylog.kafka.codec import ApiKey, RequestHeader
from raylog.kafka.sasl import SaslExchange

logger = logging.getLogger(__name__)


def _exchange() -> SaslExchange:
    """The connection's SASL exchange.

    Raises:
        IllegalSaslStateError: the listener does not authenticate with SASL.
    """
    exchange = CONNECTION.get({}).get("sasl")
    if exchange is None:
        raise IllegalSaslStateError("this listener does not authenticate with SASL (its protocol has no SASL_)")
    return exchange


async def sasl_handshake(ctx: BrokerContext, header: RequestHeader, body: dict) -> dict:
    exchange = CONNECTION.get({}).get("sasl")
    enabled = [] if exchange is None else list(exchange.enabled)  # (the listener's own)
    try:
        _exchange().handshake(body["mechanism"])
    except RaylogError as exc:
        return {"error_code": code_of(exc), "mechanisms": enabled}
    if header.api_version == 0:  # the SASL tokens follow unframed (see the module docstring)
        CONNECTION.get({})["sasl_raw"] = True
    return {"error_code": 0, "mechanisms": enabled}


async def sasl_authenticate(ctx: BrokerContext, header: RequestHeader, body: dict) -> dict:
    connection = CONNECTION.get({})
    try:
        answer = await exchange_token(ctx, connection, body["auth_bytes"])
    except SaslAuthenticationError as exc:
        connection["close_after_answer"] = True
        # (each failure, as Kafka's authenticator logs it: a failed connection is closed)
        logger.info("broker %d: failed authentication with %s (%s)", ctx.broker_id, connection.get("host"), exc)
        return {"error_code": exc.code, "error_message": str(exc), "auth_bytes": b""}
    except RaylogError as exc:
        return {"error_code": code_of(exc), "error_message": str(exc), "auth_bytes": b""}
    exchange = _exchange()
    lifetime_ms = _lifetime_ms(connection, exchange) if exchange.complete else 0
    return {"error_code": 0, "error_message": None, "auth_bytes": answer, "session_lifetime_ms": lifetime_ms}


def _lifetime_ms(connection: dict, exchange: SaslExchange) -> int:
    """How long the connection's authentication holds: its listener's
    ``connections.max.reauth.ms`` for the mechanism it used (0: until it closes)."""
    return connection["listener_settings"].reauth_ms(exchange.mechanism)


async def exchange_token(ctx: BrokerContext, connection: dict, token: bytes) -> bytes:
    """The server's answer to the client's next SASL ``token`` (from SaslAuthenticate, or
    unframed after SaslHandshake v0); once authenticated, the connection's principal is the
    user's and, with ``connections.max.reauth.ms``, its authentication holds that long.

    Raises:
        SaslAuthenticationError: refused (the connection is to close).
        IllegalSaslStateError: out of turn, or the listener has no SASL.
    """
    exchange = _exchange()
    await ctx.credentials_known()
    answer = exchange.authenticate(token)
    if exchange.complete:
        connection["principal"] = exchange.principal
        connection.pop("sasl_raw", None)
        lifetime_ms = _lifetime_ms(connection, exchange)
        if lifetime_ms:  # KIP-368: the client is to authenticate again before this ends
            connection["session_expires_s"] = time.monotonic() + lifetime_ms / 1000
    return answer


async def describe_user_scram_credentials(ctx: BrokerContext, header: RequestHeader, body: dict) -> dict:
    users = None if body.get("users") is None else [u["name"] for u in body["users"]]
    try:
        described = await ctx.call(ctx.ask("describe_user_scram_credentials", users))
    except RaylogError as exc:
        return {"throttle_time_ms": 0, "error_code": code_of(exc), "error_message": str(exc), "results": []}
    results = [
        {
            "user": user,
            "error_code": code,
            "error_message": message or None,
            "credential_infos": [{"mechanism": m, "iterations": i} for m, i in infos],
        }
        for user, (code, message, infos) in described.items()
    ]
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "results": results}


async def alter_user_scram_credentials(ctx: BrokerContext, header: RequestHeader, body: dict) -> dict:
    deletions = [(d["name"], d["mechanism"]) for d in body["deletions"]]
    upsertions = [
        (u["name"], u["mechanism"], u["iterations"], u["salt"], u["salted_password"]) for u in body["upsertions"]
    ]
    users = list(dict.fromkeys([user for user, *_ in deletions + upsertions]))
    ref = ctx.ask("alter_user_scram_credentials", deletions, upsertions)
    answers = await ask_each(ctx, ref, users, None) if users else {}
    results = [
        {"user": user, "error_code": answers[user][0], "error_message": answers[user][1] or None} for user in users
    ]
    return {"throttle_time_ms": 0, "results": results}


HANDLERS: dict[ApiKey, Callable[[BrokerContext, RequestHeader, dict], Awaitable[dict]]] = {
    ApiKey.SASL_HANDSHAKE: sasl_handshake,
    ApiKey.SASL_AUTHENTICATE: sasl_authenticate,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: describe_user_scram_credentials,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: alter_user_scram_credentials,
}
