"""Access control lists as Kafka's clients and brokers both name them (KIP-11 and KIP-290's
prefixed patterns).

An :class:`ACL` (Kafka's ``AclBinding``) says that a principal (``"User:alice"``, or
``"User:*"`` for every principal) from a host (an address, or ``"*"`` for every host) is
allowed or denied an operation on the resources a :class:`ResourcePattern` names: one
resource (LITERAL), every resource of the type (LITERAL ``"*"``) or every resource whose
name starts with the pattern's (PREFIXED); the broker's authorizer answers from them
(:mod:`raylog.coordination.acls`). :class:`ResourcePatternFilter` and :class:`ACLFilter`
(Kafka's ``ResourcePatternFilter`` and ``AclBindingFilter``) select ACLs for DescribeAcls
and DeleteAcls; :func:`validate_acl` and :func:`validate_filter` refuse what Kafka's
CreateAcls, DescribeAcls and DeleteAcls refuse.

Every value here is immutable.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ..errors import InvalidRequestError


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


def is_principal(value: object) -> bool:
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
    if not is_principal(acl.principal):
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
