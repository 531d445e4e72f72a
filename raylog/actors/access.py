"""Who may do what, asked by the actors: a listener's Kafka requests and raylog's own clients' calls.

:class:`Access` is one caller (principal and host) before the cluster's ACLs
(:class:`~raylog.coordination.acls.Authorizer`): it answers each check, logs every denial once
per principal, host, operation and resource by the ``raylog.authorizer`` logger (Kafka's
``kafka.authorizer.logger``) at INFO (then at DEBUG, as allowed checks are) and counts it in
``raylog_authorization_denials_total``.

:class:`Guard` is what an actor serving raylog's clients holds: the cluster's session key (see
:mod:`raylog.coordination.sessions`) and the latest ACLs the controller pushed. It turns a
call's session token into an :class:`Access`, or into nothing to check (no authorizer
configured, or a call of the cluster's own actors).
"""

from __future__ import annotations

import logging
import time

from raylog import metrics
from raylog.common.acl import ACLOperation, ResourceType
from raylog.coordination.acls import Authorizer
from raylog.coordination.sessions import SessionKeys
from raylog.errors import (
    AuthorizationError,
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)

logger = logging.getLogger("raylog.authorizer")

#: Denials remembered as logged once (then logged again: a bound on memory, as a hostile
#: client may name a new resource in every request).
DENIALS_REMEMBERED = 10_000
#: The error of a denial, by the resource's type.
DENIED: dict[ResourceType, type[AuthorizationError]] = {
    ResourceType.TOPIC: TopicAuthorizationFailedError,
    ResourceType.GROUP: GroupAuthorizationFailedError,
    ResourceType.CLUSTER: ClusterAuthorizationFailedError,
    ResourceType.TRANSACTIONAL_ID: TransactionalIdAuthorizationFailedError,
}


class Access:
    """One caller's principal and host before an authorizer; logs and counts each answer."""

    def __init__(self, authorizer: Authorizer, principal: str, host: str, logged: set):
        self.authorizer = authorizer
        self.principal = principal
        self.host = host
        self._logged = logged

    def allows(self, operation: ACLOperation, resource_type: ResourceType, name: str, log_denied: bool = True) -> bool:
        """Whether the caller may; ``log_denied`` False: a denial is neither logged nor counted
        (Kafka's ``logIfDenied``, false where a Metadata request of every topic leaves out
        those the caller may not describe: hiding them refuses nothing asked for)."""
        allowed = self.authorizer.authorize(self.principal, self.host, operation, resource_type, name)
        if allowed or log_denied:
            self._log(allowed, operation, resource_type, name)
        return allowed

    def allows_any(self, operation: ACLOperation, resource_type: ResourceType) -> bool:
        """Whether some resource of the type allows ``operation`` (Kafka's authorizeByResourceType)."""
        allowed = self.authorizer.authorize_any(self.principal, self.host, operation, resource_type)
        self._log(allowed, operation, resource_type, None)
        return allowed

    def require(self, operation: ACLOperation, resource_type: ResourceType, name: str) -> None:
        """Raise the resource type's authorization error unless :meth:`allows`."""
        if not self.allows(operation, resource_type, name):
            raise DENIED[resource_type](
                f"{self.principal} may not {operation.name} the {resource_type.name.lower()} {name!r}"
            )

    def _log(self, allowed: bool, operation: ACLOperation, resource_type: ResourceType, name: str | None) -> None:
        """Each denial at INFO the first time (then DEBUG) and counted; an allowed check at DEBUG.
        The line is only formatted when it is logged: checks run on every produce and fetch."""
        if allowed:
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug(self._line(True, operation, resource_type, name))
            return
        metrics.record_authorization_denial(operation.name)
        key = (self.principal, self.host, operation, resource_type, name)
        level = logging.DEBUG if key in self._logged else logging.INFO
        if len(self._logged) >= DENIALS_REMEMBERED:  # a client naming ever new resources
            self._logged.clear()
        self._logged.add(key)
        if logger.isEnabledFor(level):
            logger.log(level, self._line(False, operation, resource_type, name))

    def _line(self, allowed: bool, operation: ACLOperation, resource_type: ResourceType, name: str | None) -> str:
        kind = resource_type.name.title().replace("_", "")
        resource = f"any {kind}" if name is None else f"{kind}:{name}"
        return (
            f"Principal = {self.principal} is {'Allowed' if allowed else 'Denied'} operation = {operation.name} "
            f"from host = {self.host} on resource = {resource}"
        )


class Guard:
    """An actor's check of raylog clients' calls (see the module docstring).

    Args:
        session_key: the cluster's session key (hex).
    """

    def __init__(self, session_key: str):
        self.sessions = SessionKeys(session_key)
        self.authorizer: Authorizer | None = None
        self.version = -1
        self._logged: set = set()

    def apply(self, version: int, authorizer: Authorizer | None) -> None:
        """Authorize with ``authorizer`` (the controller's ACLs at ``version``; None: no
        authorizer) unless a newer one is in use (pushes may arrive out of order)."""
        if version > self.version:
            self.version, self.authorizer = version, authorizer

    def access(self, token: str | None) -> Access | None:
        """The caller ``token`` stands for, before the ACLs; None when nothing is to be checked.

        Raises:
            SaslAuthenticationError: a token this cluster did not sign, or one that expired.
        """
        authorizer = self.authorizer
        if authorizer is None:
            return None
        session = self.sessions.session(token, time.time() * 1000)
        if session.broker:
            return None
        return Access(authorizer, session.principal, session.host, self._logged)

    def is_broker(self, token: str | None) -> bool:
        """Whether ``token`` is one of the cluster's own actors' (checked with or without an
        authorizer: what only brokers are told depends on it).

        Raises:
            SaslAuthenticationError: a token this cluster did not sign, or one that expired.
        """
        return self.sessions.session(token, time.time() * 1000).broker

    def require(self, token: str | None, operation: ACLOperation, resource_type: ResourceType, name: str) -> None:
        """Raise unless the caller of ``token`` may do ``operation`` on the resource (see
        :meth:`access` and :meth:`Access.require`)."""
        access = self.access(token)
        if access is not None:
            access.require(operation, resource_type, name)

    def broker_token(self) -> str:
        """A token for this actor's own calls to other actors of the cluster."""
        return self.sessions.broker_token(time.time() * 1000)
