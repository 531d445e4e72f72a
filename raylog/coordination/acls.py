"""Access control lists (Kafka's ACLs, KIP-11 and KIP-290's prefixed patterns) and the
authorizer that answers from them, with the rules of Kafka's KRaft ``StandardAuthorizer``.

An :class:`ACL` (Kafka's ``AclBinding``) says that a principal (``"User:alice"``, or
``"User:*"`` for every principal) from a host (an address, or ``"*"`` for every host) is
allowed or denied an operation on the resources a :class:`ResourcePattern` names: one
resource (LITERAL), every resource of the type (LITERAL ``"*"``) or every resource whose
name starts with the pattern's (PREFIXED). A request is authorized thus:

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

The answer does not depend on the order of the ACLs. :class:`ResourcePatternFilter` and
:class:`ACLFilter` (Kafka's ``ResourcePatternFilter`` and ``AclBindingFilter``) select ACLs
for DescribeAcls and DeleteAcls; :func:`validate_acl` and :func:`validate_filter` refuse
what Kafka's CreateAcls, DescribeAcls and DeleteAcls refuse.

Concurrency: every value here is immutable; an :class:`Authorizer` is built once per set of
ACLs and may be shared.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import InvalidConfigError, InvalidRequestError

logger = logging.getLogger(__name__)


class ResourceType(enum.IntEnum):
    """What an ACL names (Kafka's ``ResourceType`` codes). UNKNOWN and ANY occur only in
    filters (ANY: every type)."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    """How a pattern's name selects resources (Kafka's ``PatternType`` codes): LITERAL (the
    name itself; ``"*"`` every name) or PREFIXED (every name starting with it). ANY and
    MATCH occur only in filters: ANY selects patterns of either type by their own name,
    MATCH the patterns that would match a resource of the filter's name."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class ACLOperation(enum.IntEnum):
    """An operation an ACL allows or denies (Kafka's ``AclOperation`` codes). ALL in an ACL
    stands for every operation; ANY and UNKNOWN occur only in filters."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class ACLPermissionType(enum.IntEnum):
    """Whether an ACL allows or denies (Kafka's ``AclPermissionType`` codes); ANY and
    UNKNOWN occur only in filters."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: The one name of the CLUSTER resource (Kafka's ``Resource.CLUSTER_NAME``).
CLUSTER_NAME = "kafka-cluster"
#: A LITERAL resource name, or an ACL's host, that matches every name or host.
WILDCARD = "*"
#: The ACL principal that matches every principal (Kafka's ``WILDCARD_PRINCIPAL``): only this
#: one; ``"Group:*"`` is a principal like any other.
WILDCARD_PRINCIPAL = "User:*"


@dataclass(frozen=True)
class ResourcePattern:
    """The resources an ACL names (Kafka's ``ResourcePattern``): one resource (LITERAL), all
    of the type (LITERAL :data:`WILDCARD`) or all whose name starts with ``name`` (PREFIXED)."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL


def covers(pattern: ResourcePattern, resource_type: ResourceType, name: str) -> bool:
    """Whether ``pattern`` applies to the resource ``name`` of ``resource_type``: its own name
    or the wildcard (LITERAL), or a prefix of it (PREFIXED)."""
    if pattern.resource_type != resource_type:
        return False
    if pattern.pattern_type == PatternType.PREFIXED:
        return name.startswith(pattern.name)
    return pattern.name in (name, WILDCARD)


@dataclass(frozen=True)
class ResourcePatternFilter:
    """Selects resource patterns (Kafka's ``ResourcePatternFilter``): ANY resource type or
    one; any name (None) or one; and by pattern type ANY (either type, by the pattern's own
    name), LITERAL or PREFIXED (that type only), or MATCH (every pattern that matches a
    resource named ``name``: the LITERAL name, the LITERAL wildcard and each PREFIXED
    pattern that is a prefix of it)."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY

    def matches(self, pattern: ResourcePattern) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != pattern.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        # MATCH: the patterns that would match a resource of this name.
        if pattern.pattern_type == PatternType.LITERAL:
            return pattern.name in (self.name, WILDCARD)
        if pattern.pattern_type == PatternType.PREFIXED:
            return self.name.startswith(pattern.name)
        return False


@dataclass(frozen=True)
class ACL:
    """One access control entry and the resources it applies to (Kafka's ``AclBinding``).

    Args:
        principal: ``"Type:name"``, e.g. ``"User:alice"``; :data:`WILDCARD_PRINCIPAL`
            (``"User:*"``) for every principal.
        host: the client's address, or :data:`WILDCARD` (``"*"``) for every host.
        operation: what is allowed or denied (ALL: every operation).
        permission_type: ALLOW or DENY.
        pattern: the resources it applies to.
    """

    principal: str
    host: str
    operation: ACLOperation
    permission_type: ACLPermissionType
    pattern: ResourcePattern


@dataclass(frozen=True)
class ACLFilter:
    """Selects ACLs (Kafka's ``AclBindingFilter``: a ``ResourcePatternFilter`` and an
    ``AccessControlEntryFilter``): None, ANY or the default pattern filter match every value
    of a field; any other value only itself (no wildcard expansion: principal ``"User:*"``
    selects the ACLs of the wildcard principal, not every principal's)."""

    principal: str | None = None
    host: str | None = None
    operation: ACLOperation = ACLOperation.ANY
    permission_type: ACLPermissionType = ACLPermissionType.ANY
    pattern: ResourcePatternFilter = ResourcePatternFilter()

    @classmethod
    def exactly(cls, acl: ACL) -> ACLFilter:
        """The filter that matches ``acl`` and no other ACL (what ``kafka-acls.sh --remove``
        deletes)."""
        p = acl.pattern
        pattern = ResourcePatternFilter(p.resource_type, p.name, p.pattern_type)
        return cls(acl.principal, acl.host, acl.operation, acl.permission_type, pattern)

    def matches(self, acl: ACL) -> bool:
        return (
            (self.principal is None or self.principal == acl.principal)
            and (self.host is None or self.host == acl.host)
            and (self.operation == ACLOperation.ANY or self.operation == acl.operation)
            and (self.permission_type == ACLPermissionType.ANY or self.permission_type == acl.permission_type)
            and self.pattern.matches(acl.pattern)
        )


def _is_principal(value: object) -> bool:
    """``Type:name`` with a non-empty type and name (the name may hold more colons)."""
    if not isinstance(value, str):
        return False
    principal_type, colon, name = value.partition(":")
    return bool(principal_type and colon and name)


def _member(enum_type: type[enum.IntEnum], value: object, field: str, refused: tuple = ()) -> enum.IntEnum:
    """``value`` as a member of ``enum_type``; InvalidRequestError if it is none, or one of ``refused``."""
    try:
        member = enum_type(value) if not isinstance(value, bool) else None
    except (ValueError, TypeError):
        member = None
    if member is None or member in refused:
        allowed = ", ".join(m.name for m in enum_type if m not in refused)
        raise InvalidRequestError(f"invalid {field} {value!r}: must be one of {allowed}")
    return member


def validate_acl(acl: ACL) -> None:
    """Refuse what Kafka's CreateAcls refuses (the controller's ``validateNewAcl`` and the
    broker's checks before it): a resource type, operation or permission type that is
    UNKNOWN or ANY, a pattern type other than LITERAL or PREFIXED, an empty resource name, a
    CLUSTER resource not named :data:`CLUSTER_NAME`, a principal not of the form
    ``Type:name``, an empty host. A PREFIXED pattern named ``"*"`` is accepted, as Kafka
    accepts it: it matches the names that start with ``"*"``, not every name.

    Raises:
        InvalidRequestError: the message says what is wrong.
    """
    if not isinstance(acl, ACL) or not isinstance(acl.pattern, ResourcePattern):
        raise InvalidRequestError(f"not an ACL with a ResourcePattern: {acl!r}")
    pattern = acl.pattern
    resource_type = _member(
        ResourceType, pattern.resource_type, "resource type", (ResourceType.UNKNOWN, ResourceType.ANY)
    )
    _member(
        PatternType,
        pattern.pattern_type,
        "pattern type",
        (PatternType.UNKNOWN, PatternType.ANY, PatternType.MATCH),
    )
    _member(ACLOperation, acl.operation, "operation", (ACLOperation.UNKNOWN, ACLOperation.ANY))
    _member(
        ACLPermissionType, acl.permission_type, "permission type", (ACLPermissionType.UNKNOWN, ACLPermissionType.ANY)
    )
    if not isinstance(pattern.name, str) or not pattern.name:
        raise InvalidRequestError(f"an ACL's resource name must be a non-empty string, got {pattern.name!r}")
    if resource_type == ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
        raise InvalidRequestError(f"the CLUSTER resource's only name is {CLUSTER_NAME!r}, got {pattern.name!r}")
    if not _is_principal(acl.principal):
        raise InvalidRequestError(
            f"an ACL's principal must be of the form Type:name (e.g. 'User:alice', or '{WILDCARD_PRINCIPAL}' "
            f"for every principal), got {acl.principal!r}"
        )
    if not isinstance(acl.host, str) or not acl.host:
        raise InvalidRequestError(f"an ACL's host must be an address or '{WILDCARD}', got {acl.host!r}")


def validate_filter(acl_filter: ACLFilter) -> None:
    """Refuse what Kafka's DescribeAcls and DeleteAcls refuse: a resource type, pattern
    type, operation or permission type that is UNKNOWN (or no member at all). ANY, MATCH and
    None select broadly and are valid.

    Raises:
        InvalidRequestError: the message says what is wrong.
    """
    if not isinstance(acl_filter, ACLFilter) or not isinstance(acl_filter.pattern, ResourcePatternFilter):
        raise InvalidRequestError(f"not an ACLFilter with a ResourcePatternFilter: {acl_filter!r}")
    pattern = acl_filter.pattern
    _member(ResourceType, pattern.resource_type, "resource type filter", (ResourceType.UNKNOWN,))
    _member(PatternType, pattern.pattern_type, "pattern type filter", (PatternType.UNKNOWN,))
    _member(ACLOperation, acl_filter.operation, "operation filter", (ACLOperation.UNKNOWN,))
    _member(ACLPermissionType, acl_filter.permission_type, "permission type filter", (ACLPermissionType.UNKNOWN,))
    for field, value in (
        ("resource name", pattern.name),
        ("principal", acl_filter.principal),
        ("host", acl_filter.host),
    ):
        if value is not None and not isinstance(value, str):
            raise InvalidRequestError(f"an ACL filter's {field} must be a string or None, got {value!r}")


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
        if not _is_principal(entry):
            raise InvalidConfigError(f"super.users: {entry!r} is not a principal of the form Type:name")
        users.add(entry)
    return frozenset(users)


# --- the authorizer -----------------------------------------------------------------------

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
            if not _is_principal(user):
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
