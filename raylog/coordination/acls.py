"""The authorizer that answers from ACLs (:mod:`raylog.common.acl`), with the rules of
Kafka's KRaft ``StandardAuthorizer``. A request is authorized thus:

1. a super user (``super.users``) may do everything, whatever the ACLs say;
2. the ACLs that apply are those whose pattern matches the resource and whose principal
   and host match the request's;
3. an applying DENY of the operation (or of ALL) refuses it, whatever ALLOWs apply;
4. else an applying ALLOW of the operation (or of ALL) permits it; an ALLOW of READ, WRITE,
   DELETE or ALTER also permits DESCRIBE, and one of ALTER_CONFIGS also DESCRIBE_CONFIGS
   (a DENY implies nothing: DENY READ does not deny DESCRIBE);
5. else, if no ACL at all matches the resource (of any principal, host, operation or
   permission), the answer is ``allow.everyone.if.no.acl.found`` (default: refused);
   if some ACL matches the resource but none applies, it is refused.

The answer does not depend on the order of the ACLs.

Concurrency: an :class:`Authorizer` is built once per set of ACLs and may be shared.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from raylog.common.acl import (
    ACL,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    ACLOperation,
    ACLPermissionType,
    PatternType,
    ResourceType,
    is_principal,
    validate_acl,
)
from raylog.errors import InvalidConfigError

logger = logging.getLogger(__name__)


def parse_super_users(value: str) -> frozenset[str]:
    """Kafka's ``super.users``: principals separated by ``;`` (``"User:admin;User:ops"``),
    each trimmed; empty entries are skipped, so ``""`` is no super user.

    Raises:
        InvalidConfigError: an entry that is not of the form ``Type:name``.
    """
    if not isinstance(value, str):
        raise InvalidConfigError(f"super.users must be a string of principals separated by ';', got {value!r}")
    users = set()
    for entry in value.split(";"):
        entry = entry.strip()
        if not entry:
            continue
        if not is_principal(entry):
            raise InvalidConfigError(f"super.users: {entry!r} is not a principal of the form Type:name")
        users.add(entry)
    return frozenset(users)


#: Every operation, as a bit mask (an ALL ACL covers each, ALL itself included).
_EVERY_OPERATION = (1 << (max(ACLOperation) + 1)) - 1
#: The operations an ALLOW of each operation permits besides itself (Kafka's IMPLIES_DESCRIBE
#: and IMPLIES_DESCRIBE_CONFIGS); a DENY implies nothing.
_ALLOW_IMPLIES = {
    ACLOperation.READ: ACLOperation.DESCRIBE,
    ACLOperation.WRITE: ACLOperation.DESCRIBE,
    ACLOperation.DELETE: ACLOperation.DESCRIBE,
    ACLOperation.ALTER: ACLOperation.DESCRIBE,
    ACLOperation.ALTER_CONFIGS: ACLOperation.DESCRIBE_CONFIGS,
}
#: The resource name Kafka's ``Authorizer.authorizeByResourceType`` asks ``authorize`` about
#: first (so that super users and ``allow.everyone.if.no.acl.found`` decide as they would
#: for a resource no ACL names); kept as Kafka's so that the answers are Kafka's.
_PROBE_NAME = "hardcode"


def _masks(acl: ACL) -> tuple[int, int]:
    """(operations it denies, operations it allows) as bit masks."""
    if acl.operation == ACLOperation.ALL:
        mask = _EVERY_OPERATION
    else:
        mask = 1 << acl.operation
        if acl.permission_type == ACLPermissionType.ALLOW and acl.operation in _ALLOW_IMPLIES:
            mask |= 1 << _ALLOW_IMPLIES[acl.operation]
    return (mask, 0) if acl.permission_type == ACLPermissionType.DENY else (0, mask)


#: One pattern's ACLs: (principal, host) -> [operations denied, operations allowed].
_Rules = dict[tuple[str, str], list[int]]


def _check_request(operation: ACLOperation, resource_type: ResourceType) -> None:
    if resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
        raise ValueError(f"authorize needs a resource type, not {resource_type!r}")
    if operation in (ACLOperation.ANY, ACLOperation.UNKNOWN):
        raise ValueError(f"authorize needs an operation, not {operation!r}")


class Authorizer:
    """An immutable, indexed view of a set of ACLs answering Kafka's ``StandardAuthorizer``'s
    question (see the module docstring for the rules). Build a new one whenever the ACLs,
    the super users or ``allow.everyone.if.no.acl.found`` change.

    LITERAL patterns are found by (type, name), the wildcard by (type, ``"*"``), PREFIXED
    patterns by looking up the request's name cut at each length some prefix of its type
    has; within a pattern, by (principal, host) for the request's and the wildcards. An
    answer so costs a few dictionary look-ups, however many ACLs there are.

    Args:
        acls: the ACLs (each valid by :func:`validate_acl`); their order and repeats do not matter.
        super_users: principals allowed everything (see :func:`parse_super_users`).
        allow_everyone_if_no_acl_found: the answer for a resource no ACL matches.

    Raises:
        InvalidRequestError: an ACL :func:`validate_acl` refuses.
        InvalidConfigError: a super user not of the form ``Type:name``.

    Example:
        >>> topic = ResourcePattern(ResourceType.TOPIC, "clicks")
        >>> authorizer = Authorizer([ACL("User:etl", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW, topic)])
        >>> authorizer.authorize("User:etl", "10.0.0.7", ACLOperation.DESCRIBE, ResourceType.TOPIC, "clicks")
        True
        >>> authorizer.authorize("User:bob", "10.0.0.7", ACLOperation.READ, ResourceType.TOPIC, "clicks")
        False
    """

    def __init__(
        self, acls: Iterable[ACL] = (), super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False
    ):
        self._acls = frozenset(acls)
        self._super_users = frozenset(super_users)
        for user in self._super_users:
            if not is_principal(user):
                raise InvalidConfigError(f"super user {user!r} is not a principal of the form Type:name")
        self._default = bool(allow_everyone_if_no_acl_found)
        # (type, name) -> rules of the LITERAL patterns (the wildcard's under name "*").
        self._literal: dict[tuple[ResourceType, str], _Rules] = {}
        # type -> (the lengths of its PREFIXED patterns' names, ascending; name -> rules).
        self._prefixed: dict[ResourceType, tuple[tuple[int, ...], dict[str, _Rules]]] = {}
        # type -> principal -> its ACLs of the type (for authorize_any).
        self._by_principal: dict[ResourceType, dict[str, list[ACL]]] = {}
        prefixed: dict[ResourceType, dict[str, _Rules]] = {}
        for acl in self._acls:
            validate_acl(acl)
            pattern = acl.pattern
            resource_type = ResourceType(pattern.resource_type)
            if pattern.pattern_type == PatternType.LITERAL:
                rules = self._literal.setdefault((resource_type, pattern.name), {})
            else:
                rules = prefixed.setdefault(resource_type, {}).setdefault(pattern.name, {})
            masks = rules.setdefault((acl.principal, acl.host), [0, 0])
            deny, allow = _masks(acl)
            masks[0] |= deny
            masks[1] |= allow
            self._by_principal.setdefault(resource_type, {}).setdefault(acl.principal, []).append(acl)
        for resource_type, by_name in prefixed.items():
            self._prefixed[resource_type] = (tuple(sorted({len(name) for name in by_name})), by_name)
        logger.debug(
            "authorizer over %d ACL(s), %d super user(s), allow.everyone.if.no.acl.found=%s",
            len(self._acls),
            len(self._super_users),
            self._default,
        )

    @property
    def acls(self) -> frozenset[ACL]:
        return self._acls

    @property
    def super_users(self) -> frozenset[str]:
        return self._super_users

    @property
    def allow_everyone_if_no_acl_found(self) -> bool:
        return self._default

    def authorize(
        self, principal: str, host: str, operation: ACLOperation, resource_type: ResourceType, name: str
    ) -> bool:
        """Whether ``principal`` connected from ``host`` may do ``operation`` on the resource
        of ``resource_type`` named ``name`` (Kafka's ``StandardAuthorizer.authorize`` of one
        action on a LITERAL resource).

        Raises:
            ValueError: ``operation`` or ``resource_type`` is ANY or UNKNOWN (filter values).
        """
        _check_request(operation, resource_type)
        if principal in self._super_users:
            return True
        matched: list[_Rules] = []
        rules = self._literal.get((resource_type, name))
        if rules is not None:
            matched.append(rules)
        if name != WILDCARD:
            rules = self._literal.get((resource_type, WILDCARD))
            if rules is not None:
                matched.append(rules)
        prefixed = self._prefixed.get(resource_type)
        if prefixed is not None:
            lengths, by_name = prefixed
            for length in lengths:
                if length > len(name):
                    break
                rules = by_name.get(name[:length])
                if rules is not None:
                    matched.append(rules)
        if not matched:
            return self._default  # no ACL at all on this resource
        bit = 1 << operation
        # (Repeats when the request's principal or host is a wildcard: harmless.)
        keys = ((principal, host), (principal, WILDCARD), (WILDCARD_PRINCIPAL, host), (WILDCARD_PRINCIPAL, WILDCARD))
        allowed = False
        for rules in matched:
            for key in keys:
                masks = rules.get(key)
                if masks is not None:
                    if masks[0] & bit:
                        return False
                    allowed = allowed or bool(masks[1] & bit)
        return allowed

    def authorize_any(self, principal: str, host: str, operation: ACLOperation, resource_type: ResourceType) -> bool:
        """Whether ``principal`` from ``host`` may do ``operation`` on at least one resource of
        ``resource_type``, by the rules of Kafka's default ``Authorizer.authorizeByResourceType``
        (which ``StandardAuthorizer`` keeps; a broker asks it, for one, whether an idempotent
        producer without IDEMPOTENT_WRITE on the cluster may WRITE some topic):

        1. yes if :meth:`authorize` allows the operation on a resource of the type named as
           Kafka's probe name (``"hardcode"``): so super users, an ALLOW on the wildcard that
           no DENY overrides, and ``allow.everyone.if.no.acl.found`` where no ACL of the type
           matches that name, answer yes;
        2. else, among the principal's (and ``"User:*"``'s) ACLs of the type from its host (or
           ``"*"``) whose operation is this one or ALL (no implied operations here): no if a
           DENY is on the LITERAL wildcard; yes if an ALLOW is on the LITERAL wildcard; yes if
           an ALLOW of a LITERAL name has no DENY of the same LITERAL name and no DENY on a
           PREFIXED pattern that is a prefix of that name; yes if an ALLOW of a PREFIXED
           pattern has no DENY on a PREFIXED pattern that is a prefix of it (a DENY of a
           LITERAL name does not dominate a PREFIXED ALLOW); else no.

        Raises:
            ValueError: ``operation`` or ``resource_type`` is ANY or UNKNOWN.
        """
        _check_request(operation, resource_type)
        if self.authorize(principal, host, operation, resource_type, _PROBE_NAME):
            return True
        by_principal = self._by_principal.get(resource_type, {})
        candidates = list(by_principal.get(principal, ()))
        if principal != WILDCARD_PRINCIPAL:
            candidates += by_principal.get(WILDCARD_PRINCIPAL, ())
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allow_literal: set[str] = set()
        allow_prefixed: set[str] = set()
        wildcard_allowed = False
        for acl in candidates:
            if acl.host not in (host, WILDCARD) or acl.operation not in (operation, ACLOperation.ALL):
                continue
            pattern = acl.pattern
            literal = pattern.pattern_type == PatternType.LITERAL
            if acl.permission_type == ACLPermissionType.DENY:
                if literal and pattern.name == WILDCARD:
                    return False
                (deny_literal if literal else deny_prefixed).add(pattern.name)
            elif literal and pattern.name == WILDCARD:
                wildcard_allowed = True
            else:
                (allow_literal if literal else allow_prefixed).add(pattern.name)
        if wildcard_allowed:
            return True

        def dominated(name: str) -> bool:
            return any(name[:length] in deny_prefixed for length in range(1, len(name) + 1))

        if any(name not in deny_literal and not dominated(name) for name in allow_literal):
            return True
        return any(not dominated(name) for name in allow_prefixed)
