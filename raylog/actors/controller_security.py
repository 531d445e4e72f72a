"""Who may call: ACLs and SCRAM credentials (journaled, pushed to the listeners and replicas
before the change is answered), raylog clients' SASL exchanges, and the caller of each admin
call.

A part of :class:`~raylog.actors.controller.ControllerActor` (see
:class:`~raylog.actors.controller_parts.ControllerPart` for what the parts share).
"""

from __future__ import annotations

import logging
import time

from raylog.actors.access import Access
from raylog.actors.controller_parts import CLUSTER, ControllerPart, awaited, require
from raylog.common import scram
from raylog.common.acl import ACLOperation as Op
from raylog.common.acl import ResourceType, covers
from raylog.common.names import (
    OFFSETS_TOPIC,
    TRANSACTION_TOPIC,
)
from raylog.errors import (
    ClusterAuthorizationFailedError,
    RaylogError,
    SaslAuthenticationError,
    SecurityDisabledError,
)
from raylog.kafka.sasl import SaslExchange
from raylog.protocol import error_result

logger = logging.getLogger(__name__)

#: How long a raylog client's SASL exchange may take between its steps, and how many may be
#: under way at once (a bound on what clients that never finish can leave behind).
SASL_EXCHANGE_TIMEOUT_S = 30.0
MAX_SASL_EXCHANGES = 1024


class SecurityAdmin(ControllerPart):
    """See the module docstring."""

    async def create_acls(self, acls: list, session: str | None = None) -> tuple[int, str]:
        """Create Kafka ACLs (:class:`~raylog.common.acl.ACL`), all or nothing,
        journaled and pushed to the listeners, answered once they apply them. ``(error_code,
        message)``: SECURITY_DISABLED without the authorizer, INVALID_REQUEST for an ACL Kafka
        refuses, CLUSTER_AUTHORIZATION_FAILED without ALTER on the cluster, code 0 on success."""
        await self.start()
        access = self._caller(session)
        async with self._guard():
            try:
                self._require_authorizer()
                require(access, Op.ALTER, CLUSTER)
                created = [acl for acl in dict.fromkeys(acls) if acl not in self.image.acls]
                self._commit(self.image.create_acls(acls))
            except RaylogError as exc:
                return error_result(exc)
        await self._push_acls(created)
        return 0, ""

    async def delete_acls(self, filters: list, session: str | None = None) -> tuple[int, str, list[list]]:
        """Delete every ACL matching one of ``filters`` (:class:`~raylog.common.acl.ACLFilter`),
        journaled: ``(error_code, message, the ACLs each filter matched)``; needs ALTER on the cluster."""
        await self.start()
        access = self._caller(session)
        async with self._guard():
            try:
                self._require_authorizer()
                require(access, Op.ALTER, CLUSTER)
                records, matched = self.image.delete_acls(filters)
                self._commit(records)
            except RaylogError as exc:
                return (*error_result(exc), [])
        await self._push_acls([acl for found in matched for acl in found])
        return 0, "", matched

    async def describe_acls(self, acl_filter, session: str | None = None) -> tuple[int, str, list]:
        """``(error_code, message, the ACLs matching acl_filter)``; needs DESCRIBE on the cluster."""
        await self.start()
        try:
            self._require_authorizer()
            require(self._caller(session), Op.DESCRIBE, CLUSTER)
            return 0, "", self.image.describe_acls(acl_filter)
        except RaylogError as exc:
            return (*error_result(exc), [])

    async def _push_acls(self, changed: list) -> None:
        """Every listener and live replica gets the ACLs. The listeners and the running
        replicas whose decisions ``changed`` (the ACLs created or deleted) can change apply
        them before the change is answered (a client that changed them and sends its next
        request or call finds them in force), or after :data:`PEER_CALL_TIMEOUT_S` for those
        that do not answer (they get them when they do). The others, and replicas still
        starting (as their first call), get them without the answer waiting: an ACL on one
        topic does not wait for hundreds of replicas of others, nor for processes to start."""
        live = [key for key in self.fleet.replicas if key[2] in self.live]
        answered_first = {key for key in live if self.fleet.is_ready(key) and decides(changed, key[0])}
        self.fleet.push_acls([key for key in live if key not in answered_first])
        pushes = self.fleet.push_acls(list(answered_first))
        if self.listeners is not None:
            await self.listeners.push("update_acls", self.image.acls_version, frozenset(self.image.acls))
        await awaited(pushes, f"ACLs version {self.image.acls_version}")

    async def alter_user_scram_credentials(
        self,
        deletions: list[tuple[str, int]],
        upsertions: list[tuple[str, int, int, bytes, bytes]],
        session: str | None = None,
    ) -> dict[str, tuple[int, str]]:
        """Kafka's AlterUserScramCredentials (see
        :func:`~raylog.common.scram.alter`): the accepted users' changes journaled and
        pushed to the listeners before the answer; per user ``(error_code, message)``. Needs
        ALTER on the cluster (else every user is answered CLUSTER_AUTHORIZATION_FAILED)."""
        await self.start()
        try:
            require(self._caller(session), Op.ALTER, CLUSTER)
        except ClusterAuthorizationFailedError as exc:
            return {user: error_result(exc) for user, *_ in [*deletions, *upsertions]}
        async with self._guard():
            records, results = self.image.alter_scram_credentials(deletions, upsertions)
            self._commit(records)
        if records:
            logger.info("SCRAM credentials altered: %s", sorted({r["user"] for r in records}))
            await self._push_credentials()
        return {user: (0, "") if refusal is None else error_result(refusal) for user, refusal in results.items()}

    async def authenticate(self, exchange_id: str, mechanism: str, message: bytes, host: str) -> tuple:
        """One step of a raylog client's SASL exchange (``mechanism`` of ``sasl.enabled.mechanisms``
        against the users' SCRAM credentials, as a SASL listener does; see
        :class:`~raylog.kafka.sasl.SaslExchange`), named by the client's ``exchange_id``.

        Returns:
            ``(the server's message, token, its expiry in ms since the epoch)``: the token (see
            :mod:`~raylog.coordination.sessions`, for ``User:<name>`` on ``host``) once the
            exchange is complete, else None and -1 (the client sends its next message).

        Raises:
            SaslAuthenticationError: the credentials are refused (one message for an unknown
                user and a wrong password) or the exchange is malformed.
            UnsupportedSaslMechanismError: ``mechanism`` is not enabled.
        """
        await self.start()
        now = time.monotonic()
        for stale in [k for k, (_, started) in self._exchanges.items() if now - started > SASL_EXCHANGE_TIMEOUT_S]:
            del self._exchanges[stale]
        exchange, started = self._exchanges.pop(exchange_id, (None, now))
        try:
            if exchange is None:
                if len(self._exchanges) >= MAX_SASL_EXCHANGES:
                    raise SaslAuthenticationError("too many authentications under way: try again")
                exchange = SaslExchange(self.config.sasl_mechanisms, self.image.scram_credentials.get)
                exchange.handshake(mechanism)
            answer = exchange.authenticate(message)
        except RaylogError as exc:
            logger.info("a raylog client on %s failed to authenticate (%s): %s", host, mechanism, exc)
            raise
        if not exchange.complete:
            self._exchanges[exchange_id] = (exchange, started)
            return answer, None, -1
        expires_ms = int(time.time() * 1000) + self.config.session_token_lifetime_ms
        logger.info("%s authenticated (%s) from %s", exchange.principal, mechanism, host)
        return answer, self._callers.sessions.issue(exchange.principal, host, expires_ms), expires_ms

    async def describe_user_scram_credentials(
        self, users: list[str] | None, session: str | None = None
    ) -> dict[str, tuple[int, str, list]]:
        """Kafka's DescribeUserScramCredentials: per user ``(error_code, message, [(mechanism
        code, iterations)])``; ``users`` None: every user with a credential.

        Raises:
            ClusterAuthorizationFailedError: the caller may not DESCRIBE the cluster.
        """
        await self.start()
        require(self._caller(session), Op.DESCRIBE, CLUSTER)
        described = scram.describe(self.image.scram_credentials, users)
        return {
            user: ((0, "") if refusal is None else error_result(refusal)) + (infos,)
            for user, (refusal, infos) in described.items()
        }

    async def _push_credentials(self) -> None:
        """The listeners authenticate with the new credentials before a change is answered."""
        if self.listeners is not None:
            await self.listeners.push("update_credentials", self.image.scram_version, self._credentials())

    def _credentials(self) -> dict:
        return {user: dict(by_mechanism) for user, by_mechanism in self.image.scram_credentials.items()}

    def _caller(self, session: str | None) -> Access | None:
        """The caller of a session token before the ACLs (see :class:`~raylog.actors.access.Guard`);
        None when nothing is to be checked (no authorizer, or one of the cluster's own actors).

        Raises:
            SaslAuthenticationError: a token the cluster did not sign, or one that expired.
        """
        self._callers.apply(*self.fleet.authorizer())
        return self._callers.access(session)

    def _require_authorizer(self) -> None:
        if not self.config.authorizer:
            raise SecurityDisabledError("no authorizer is configured: ACLs need the setting authorizer=acl")


def decides(changed: list, topic: str) -> bool:
    """Whether a replica of ``topic`` may decide differently once ``changed`` (ACLs created
    or deleted) hold: a TOPIC ACL covering it, a GROUP one for the replicas of the offsets
    topic (its group coordinators), a TRANSACTIONAL_ID one for the transaction state's, a
    CLUSTER one (IDEMPOTENT_WRITE) for every replica."""
    for acl in changed:
        kind = acl.pattern.resource_type
        if (
            kind == ResourceType.CLUSTER
            or (kind == ResourceType.TOPIC and covers(acl.pattern, kind, topic))
            or (kind == ResourceType.GROUP and topic == OFFSETS_TOPIC)
            or (kind == ResourceType.TRANSACTIONAL_ID and topic == TRANSACTION_TOPIC)
        ):
            return True
    return False
