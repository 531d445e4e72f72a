"""ACLs and the authorizer: Kafka's StandardAuthorizer rules (super users, wildcards,
implied operations, DENY over ALLOW, prefixes, the no-ACL default), authorizeByResourceType,
filters, validation, the authorization errors, and a seeded comparison with a brute-force
reference (no Ray)."""

from __future__ import annotations

import itertools
import random

import pytest

import raylog
from raylog import errors
from raylog.common.acl import (
    ACL,
    CLUSTER_NAME,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    covers,
    validate_acl,
    validate_filter,
)
from raylog.coordination.acls import Authorizer, parse_super_users
from raylog.errors import InvalidConfigError, InvalidRequestError

Op, Perm, RT, PT = ACLOperation, ACLPermissionType, ResourceType, PatternType
ALLOW, DENY = Perm.ALLOW, Perm.DENY
HOST = "10.0.0.1"
#: Every operation an ACL may name (not the filter values ANY and UNKNOWN).
OPERATIONS = [op for op in Op if op not in (Op.ANY, Op.UNKNOWN)]


def topic(name: str, pattern_type: PatternType = PT.LITERAL) -> ResourcePattern:
    return ResourcePattern(RT.TOPIC, name, pattern_type)


def acl(
    operation: ACLOperation,
    permission: ACLPermissionType = ALLOW,
    pattern: ResourcePattern | None = None,
    principal: str = "User:alice",
    host: str = WILDCARD,
) -> ACL:
    return ACL(principal, host, operation, permission, pattern or topic("clicks"))


def can(
    authorizer: Authorizer,
    operation: ACLOperation,
    name: str = "clicks",
    principal: str = "User:alice",
    host: str = HOST,
    resource_type: ResourceType = RT.TOPIC,
) -> bool:
    return authorizer.authorize(principal, host, operation, resource_type, name)


def can_any(
    authorizer: Authorizer,
    operation: ACLOperation,
    principal: str = "User:alice",
    host: str = HOST,
    resource_type: ResourceType = RT.TOPIC,
) -> bool:
    return authorizer.authorize_any(principal, host, operation, resource_type)


# --- authorize ------------------------------------------------------------------------------


def test_super_users_may_do_everything_whatever_the_acls():
    """A super user is allowed every operation on every resource, even under a DENY ALL of
    every principal; the same principal's ACLs do not matter, and others are still denied."""
    deny_all = [
        ACL(WILDCARD_PRINCIPAL, WILDCARD, Op.ALL, DENY, ResourcePattern(resource_type, name))
        for resource_type, name in (
            (RT.TOPIC, WILDCARD),
            (RT.GROUP, WILDCARD),
            (RT.CLUSTER, CLUSTER_NAME),
            (RT.TRANSACTIONAL_ID, WILDCARD),
        )
    ]
    authorizer = Authorizer(deny_all, super_users=["User:admin"])
    for operation, (resource_type, name) in itertools.product(
        OPERATIONS, ((RT.TOPIC, "clicks"), (RT.GROUP, "etl"), (RT.CLUSTER, CLUSTER_NAME))
    ):
        assert can(authorizer, operation, name, principal="User:admin", resource_type=resource_type)
        assert can_any(authorizer, operation, principal="User:admin", resource_type=resource_type)
        assert not can(authorizer, operation, name, resource_type=resource_type)
        assert not can_any(authorizer, operation, resource_type=resource_type)
    # The super-user check is by the whole principal string: another type is not a super user.
    assert not can(authorizer, Op.READ, principal="Group:admin")


def test_principal_matches_exactly_or_the_user_wildcard():
    """An ACL applies to its own principal (the exact string) and, if it is "User:*", to every
    principal of any type; "Group:*" is not a wildcard, only a principal of that name."""
    authorizer = Authorizer([acl(Op.READ, principal="User:alice"), acl(Op.WRITE, principal="Group:*")])
    assert can(authorizer, Op.READ, principal="User:alice")
    for other in ("User:alicia", "user:alice", "User:Alice", "Group:alice", "User:alice "):
        assert not can(authorizer, Op.READ, principal=other)
    assert not can(authorizer, Op.WRITE, principal="Group:ops")
    assert can(authorizer, Op.WRITE, principal="Group:*")

    everyone = Authorizer([acl(Op.READ, principal=WILDCARD_PRINCIPAL)])
    for principal in ("User:alice", "User:bob", "Group:ops", "ServiceAccount:x"):
        assert can(everyone, Op.READ, principal=principal)


def test_host_matches_exactly_or_the_wildcard():
    """An ACL applies from its own host (the exact address) or, if it is "*", from every host."""
    authorizer = Authorizer([acl(Op.READ, host="10.0.0.1"), acl(Op.WRITE, host=WILDCARD)])
    assert can(authorizer, Op.READ, host="10.0.0.1")
    assert not can(authorizer, Op.READ, host="10.0.0.2")
    assert not can(authorizer, Op.READ, host="10.0.0.10")
    assert can(authorizer, Op.WRITE, host="10.0.0.2")
    assert can(authorizer, Op.WRITE, host="::1")


def test_all_covers_every_operation_for_allow_and_deny():
    """ALL in an ALLOW permits every operation; in a DENY it refuses every one."""
    allow_all = Authorizer([acl(Op.ALL, ALLOW)])
    deny_all = Authorizer([acl(Op.ALL, DENY), *(acl(operation, ALLOW) for operation in OPERATIONS)])
    for operation in OPERATIONS:
        assert can(allow_all, operation)
        assert not can(deny_all, operation)


@pytest.mark.parametrize(
    "granted, implied",
    [
        (Op.READ, Op.DESCRIBE),
        (Op.WRITE, Op.DESCRIBE),
        (Op.DELETE, Op.DESCRIBE),
        (Op.ALTER, Op.DESCRIBE),
        (Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS),
    ],
)
def test_allow_implies_describe_and_deny_implies_nothing(granted, implied):
    """An ALLOW of READ, WRITE, DELETE or ALTER permits DESCRIBE, one of ALTER_CONFIGS
    permits DESCRIBE_CONFIGS; a DENY of the same operation does not deny the implied one
    (only a DENY of it, or of ALL, does)."""
    assert can(Authorizer([acl(granted, ALLOW)]), implied)
    assert not can(Authorizer([acl(granted, DENY), acl(implied, ALLOW)]), granted)
    assert can(Authorizer([acl(granted, DENY), acl(implied, ALLOW)]), implied)
    assert not can(Authorizer([acl(granted, ALLOW), acl(implied, DENY)]), implied)
    assert can(Authorizer([acl(granted, ALLOW), acl(implied, DENY)]), granted)
    assert not can(Authorizer([acl(granted, ALLOW), acl(Op.ALL, DENY)]), implied)


def test_implication_goes_one_way_only():
    """DESCRIBE implies no other operation; CREATE, CLUSTER_ACTION, IDEMPOTENT_WRITE and
    DESCRIBE_CONFIGS imply nothing; ALTER_CONFIGS does not imply DESCRIBE."""
    for granted in (Op.DESCRIBE, Op.CREATE, Op.CLUSTER_ACTION, Op.IDEMPOTENT_WRITE, Op.DESCRIBE_CONFIGS):
        authorizer = Authorizer([acl(granted, ALLOW)])
        assert [operation for operation in OPERATIONS if can(authorizer, operation)] == [granted]
    assert not can(Authorizer([acl(Op.ALTER_CONFIGS, ALLOW)]), Op.DESCRIBE)
    assert not can(Authorizer([acl(Op.READ, ALLOW)]), Op.DESCRIBE_CONFIGS)


def test_deny_wins_over_allow_from_any_matching_pattern():
    """One applying DENY refuses however many ALLOWs apply, whichever patterns they are on:
    a LITERAL ALLOW loses to a PREFIXED or wildcard DENY, and the other way round."""
    allows = [
        acl(Op.READ, ALLOW, topic("clicks")),
        acl(Op.READ, ALLOW, topic("cl", PT.PREFIXED)),
        acl(Op.READ, ALLOW, topic(WILDCARD)),
        acl(Op.READ, ALLOW, principal=WILDCARD_PRINCIPAL),
    ]
    assert can(Authorizer(allows), Op.READ)
    for deny in (
        acl(Op.READ, DENY, topic("clicks")),
        acl(Op.READ, DENY, topic("c", PT.PREFIXED)),
        acl(Op.READ, DENY, topic("clicks", PT.PREFIXED)),
        acl(Op.READ, DENY, topic(WILDCARD)),
        acl(Op.READ, DENY, principal=WILDCARD_PRINCIPAL, host=HOST),
        acl(Op.ALL, DENY, topic("cli", PT.PREFIXED)),
    ):
        assert not can(Authorizer([*allows, deny]), Op.READ), deny
    # A DENY that does not apply (another principal, host, operation or resource) does not refuse.
    for deny in (
        acl(Op.READ, DENY, principal="User:bob"),
        acl(Op.READ, DENY, host="10.9.9.9"),
        acl(Op.WRITE, DENY),
        acl(Op.READ, DENY, topic("clicks2")),
        acl(Op.READ, DENY, topic("clicksx", PT.PREFIXED)),
        acl(Op.READ, DENY, ResourcePattern(RT.GROUP, WILDCARD)),
    ):
        assert can(Authorizer([*allows, deny]), Op.READ), deny


def test_literal_wildcard_matches_every_name_of_its_type_only():
    """LITERAL "*" covers every name of its resource type, "*" itself included, and no
    resource of another type."""
    authorizer = Authorizer([acl(Op.READ, pattern=topic(WILDCARD))])
    for name in ("clicks", "a", "*", "x" * 249):
        assert can(authorizer, Op.READ, name)
    assert not can(authorizer, Op.READ, "clicks", resource_type=RT.GROUP)


def test_literal_name_matches_only_itself():
    authorizer = Authorizer([acl(Op.READ, pattern=topic("clicks"))])
    assert can(authorizer, Op.READ, "clicks")
    for name in ("click", "clicks2", "Clicks", "*"):
        assert not can(authorizer, Op.READ, name)


def test_prefixed_pattern_matches_the_names_starting_with_it():
    """PREFIXED "cl" covers "cl", "clicks", "clock"; not "c", "acl" or "CLICKS". A PREFIXED
    "*" is no wildcard: it covers only names that start with "*"."""
    authorizer = Authorizer([acl(Op.READ, pattern=topic("cl", PT.PREFIXED))])
    for name in ("cl", "clicks", "clock"):
        assert can(authorizer, Op.READ, name)
    for name in ("c", "acl", "CLICKS", "*"):
        assert not can(authorizer, Op.READ, name)
    star = Authorizer([acl(Op.READ, pattern=ResourcePattern(RT.GROUP, WILDCARD, PT.PREFIXED))])
    assert can(star, Op.READ, "*", resource_type=RT.GROUP)
    assert can(star, Op.READ, "*etl", resource_type=RT.GROUP)
    assert not can(star, Op.READ, "etl", resource_type=RT.GROUP)


def test_prefixes_of_many_lengths_are_all_found():
    """Every PREFIXED pattern that is a prefix of the name applies, at every length, beside
    patterns of the same type that are not prefixes of it."""
    names = ["a", "ab", "abc", "abcd", "abcde", "b", "abx", "abcx"]
    acls = [acl(Op.READ, ALLOW, topic(name, PT.PREFIXED), principal=f"User:{name}") for name in names]
    authorizer = Authorizer(acls)
    for principal in names:
        assert can(authorizer, Op.READ, "abcde", principal=f"User:{principal}") == "abcde".startswith(principal)
    denied = Authorizer([*acls, acl(Op.READ, DENY, topic("abcd", PT.PREFIXED), principal="User:a")])
    assert not can(denied, Op.READ, "abcde", principal="User:a")
    assert can(denied, Op.READ, "abc", principal="User:a")


def test_no_acl_on_the_resource_gives_the_default_any_acl_on_it_counts():
    """allow.everyone.if.no.acl.found decides only when no ACL at all matches the resource
    (Kafka's hasResourceAcls): an ACL on the resource for another principal, host or
    operation, or of DENY, makes the answer a refusal; ACLs on other resources do not; a
    wildcard or prefix ACL that covers the resource counts as one on it."""
    assert not can(Authorizer(), Op.READ)
    assert can(Authorizer(allow_everyone_if_no_acl_found=True), Op.READ)
    for elsewhere in (
        acl(Op.READ, ALLOW, topic("other")),
        acl(Op.READ, ALLOW, topic("clicksx", PT.PREFIXED)),
        acl(Op.READ, ALLOW, ResourcePattern(RT.GROUP, "clicks")),
        acl(Op.READ, ALLOW, ResourcePattern(RT.GROUP, WILDCARD)),
    ):
        assert can(Authorizer([elsewhere], allow_everyone_if_no_acl_found=True), Op.READ), elsewhere
        assert not can(Authorizer([elsewhere]), Op.READ), elsewhere
    for on_it in (
        acl(Op.READ, ALLOW, principal="User:bob"),
        acl(Op.READ, ALLOW, host="10.9.9.9"),
        acl(Op.WRITE, ALLOW),
        acl(Op.DESCRIBE, ALLOW),
        acl(Op.WRITE, DENY),
        acl(Op.CREATE, ALLOW, topic(WILDCARD), principal="User:bob"),
        acl(Op.CREATE, ALLOW, topic("cl", PT.PREFIXED), principal="User:bob"),
    ):
        assert not can(Authorizer([on_it], allow_everyone_if_no_acl_found=True), Op.READ), on_it
    # ... while an ACL that applies decides as usual under either default.
    assert can(Authorizer([acl(Op.READ, ALLOW)], allow_everyone_if_no_acl_found=False), Op.READ)
    assert not can(Authorizer([acl(Op.READ, DENY)], allow_everyone_if_no_acl_found=True), Op.READ)


def test_answers_do_not_depend_on_the_order_or_repeats_of_the_acls():
    acls = [
        acl(Op.READ, ALLOW, topic("cl", PT.PREFIXED)),
        acl(Op.READ, DENY, topic("clicks"), host="10.0.0.2"),
        acl(Op.ALL, ALLOW, topic(WILDCARD), principal="User:bob"),
        acl(Op.WRITE, DENY, topic("c", PT.PREFIXED), principal=WILDCARD_PRINCIPAL),
        acl(Op.ALTER, ALLOW, topic("clicks")),
    ]
    requests = list(
        itertools.product(("User:alice", "User:bob"), (HOST, "10.0.0.2"), OPERATIONS, ("clicks", "clock", "other", "c"))
    )

    def answers(authorizer: Authorizer) -> list[bool]:
        return [
            authorizer.authorize(principal, host, operation, RT.TOPIC, name)
            for principal, host, operation, name in requests
        ]

    expected = answers(Authorizer(acls))
    for permutation in itertools.permutations(acls):
        assert answers(Authorizer(permutation)) == expected
    assert answers(Authorizer(acls + acls[::-1])) == expected
    assert Authorizer(acls + acls).acls == frozenset(acls)


def test_authorize_refuses_filter_values_and_invalid_construction():
    """ANY and UNKNOWN are not operations or resource types to authorize; an invalid ACL or
    super user is refused when the authorizer is built."""
    authorizer = Authorizer([acl(Op.READ)])
    for operation, resource_type in ((Op.ANY, RT.TOPIC), (Op.UNKNOWN, RT.TOPIC), (Op.READ, RT.ANY)):
        with pytest.raises(ValueError):
            authorizer.authorize("User:alice", HOST, operation, resource_type, "clicks")
        with pytest.raises(ValueError):
            authorizer.authorize_any("User:alice", HOST, operation, resource_type)
    with pytest.raises(InvalidRequestError):
        Authorizer([acl(Op.ANY)])
    with pytest.raises(InvalidConfigError):
        Authorizer(super_users=["admin"])
    built = Authorizer([acl(Op.READ)], super_users=parse_super_users("User:admin"), allow_everyone_if_no_acl_found=1)
    assert built.super_users == {"User:admin"}
    assert built.allow_everyone_if_no_acl_found is True


# --- authorize_any (Kafka's authorizeByResourceType) ---------------------------------------


def test_authorize_any_allow_then_deny_on_the_same_resource():
    """An ALLOW on one topic answers yes; a DENY on the same topic then answers no (Kafka's
    testAuthorizeByResourceTypeMultipleAddAndRemove and ...DenyTakesPrecedence)."""
    allow = acl(Op.WRITE, ALLOW, host=HOST)
    deny = acl(Op.WRITE, DENY, host=HOST)
    assert not can_any(Authorizer(), Op.WRITE)
    assert can_any(Authorizer([allow]), Op.WRITE)
    assert not can_any(Authorizer([allow, deny]), Op.WRITE)
    # Unrelated DENYs (another principal, host or topic) do not dominate the ALLOW.
    assert can_any(
        Authorizer(
            [
                allow,
                acl(Op.WRITE, DENY, principal="User:bob"),
                acl(Op.WRITE, DENY, host="10.0.0.2"),
                acl(Op.WRITE, DENY, topic("other")),
                acl(Op.WRITE, DENY, ResourcePattern(RT.GROUP, "s", PT.PREFIXED)),
            ]
        ),
        Op.WRITE,
    )
    assert not can_any(Authorizer([allow]), Op.WRITE, resource_type=RT.GROUP)
    assert not can_any(Authorizer([allow]), Op.WRITE, host="10.0.0.2")


def test_authorize_any_prefixed_deny_dominates_longer_allows():
    """Kafka's testAuthorizeByResourceTypePrefixedResourceDenyDominate, step by step."""
    acls = [acl(Op.READ, ALLOW, ResourcePattern(RT.GROUP, "abcde", PT.PREFIXED))]
    steps = [
        (None, True),
        (acl(Op.READ, DENY, ResourcePattern(RT.GROUP, "abcd", PT.PREFIXED)), False),
        (acl(Op.READ, ALLOW, ResourcePattern(RT.GROUP, "abc", PT.PREFIXED)), True),
        (acl(Op.READ, DENY, ResourcePattern(RT.GROUP, "a", PT.PREFIXED)), False),
        (acl(Op.READ, ALLOW, ResourcePattern(RT.GROUP, "ab", PT.PREFIXED)), False),
    ]
    for added, expected in steps:
        if added is not None:
            acls.append(added)
        assert can_any(Authorizer(acls), Op.READ, resource_type=RT.GROUP) is expected, added


def test_authorize_any_literal_rules():
    """A LITERAL ALLOW is dominated by a LITERAL DENY of the same name or a PREFIXED DENY
    that is a prefix of it; a LITERAL DENY does not dominate a PREFIXED ALLOW, nor a LITERAL
    ALLOW of another name."""
    allow = acl(Op.READ, ALLOW, topic("clicks"))
    assert not can_any(Authorizer([allow, acl(Op.READ, DENY, topic("clicks"))]), Op.READ)
    assert not can_any(Authorizer([allow, acl(Op.READ, DENY, topic("click", PT.PREFIXED))]), Op.READ)
    assert not can_any(Authorizer([allow, acl(Op.READ, DENY, topic("clicks", PT.PREFIXED))]), Op.READ)
    assert can_any(Authorizer([allow, acl(Op.READ, DENY, topic("clicks2", PT.PREFIXED))]), Op.READ)
    assert can_any(Authorizer([allow, acl(Op.READ, DENY, topic("click"))]), Op.READ)
    prefixed_allow = acl(Op.READ, ALLOW, topic("cl", PT.PREFIXED))
    assert can_any(Authorizer([prefixed_allow, acl(Op.READ, DENY, topic("cl"))]), Op.READ)
    assert can_any(Authorizer([prefixed_allow, acl(Op.READ, DENY, topic("clicks", PT.PREFIXED))]), Op.READ)


def test_authorize_any_wildcard_deny_dominates_and_wildcard_allow_wins():
    """Kafka's testAuthorizeByResourceTypeWildcardResourceDenyDominate: a DENY on the LITERAL
    wildcard refuses whatever is allowed; an ALLOW on it answers yes."""
    group = RT.GROUP
    prefixed_allow = acl(Op.WRITE, ALLOW, ResourcePattern(group, "hello", PT.PREFIXED))
    wildcard_deny = acl(Op.WRITE, DENY, ResourcePattern(group, WILDCARD))
    wildcard_allow = acl(Op.WRITE, ALLOW, ResourcePattern(group, WILDCARD))
    literal_allow = acl(Op.WRITE, ALLOW, ResourcePattern(group, "aloha"))
    assert can_any(Authorizer([prefixed_allow]), Op.WRITE, resource_type=group)
    assert not can_any(Authorizer([prefixed_allow, wildcard_deny]), Op.WRITE, resource_type=group)
    assert not can_any(
        Authorizer([prefixed_allow, wildcard_deny, wildcard_allow, literal_allow]), Op.WRITE, resource_type=group
    )
    assert can_any(Authorizer([wildcard_allow]), Op.WRITE, resource_type=group)


def test_authorize_any_all_operation_hosts_and_principals():
    """ALL covers the operation for ALLOW and DENY; "*" hosts and "User:*" apply as in
    authorize (Kafka's ...WithAllOperationAce, ...WithAllHostAce, ...WithAllPrincipalAce)."""
    allow_all, deny_write = acl(Op.ALL, ALLOW, host=HOST), acl(Op.WRITE, DENY, host=HOST)
    assert can_any(Authorizer([allow_all, deny_write]), Op.READ)
    assert not can_any(Authorizer([allow_all, deny_write, acl(Op.ALL, DENY, host=HOST)]), Op.READ)
    allow_host1 = acl(Op.READ, ALLOW, host=HOST)
    assert not can_any(Authorizer([allow_host1, acl(Op.READ, DENY, host=WILDCARD)]), Op.READ)
    assert can_any(Authorizer([acl(Op.READ, ALLOW, topic("t2"), host=WILDCARD)]), Op.READ, host="10.0.0.2")
    everyone = acl(Op.READ, ALLOW, topic("t2"), principal=WILDCARD_PRINCIPAL)
    assert can_any(Authorizer([everyone]), Op.READ, principal="User:bob")
    assert not can_any(
        Authorizer([everyone, acl(Op.READ, DENY, topic("t2"), principal=WILDCARD_PRINCIPAL)]),
        Op.READ,
        principal="User:bob",
    )


def test_authorize_any_uses_no_implied_operations_past_the_probe():
    """Beyond the probe authorization, only ACLs of the operation itself or ALL count: an
    ALLOW of WRITE on a topic does not answer yes for DESCRIBE (as in Kafka)."""
    assert can(Authorizer([acl(Op.WRITE, ALLOW)]), Op.DESCRIBE)
    assert not can_any(Authorizer([acl(Op.WRITE, ALLOW)]), Op.DESCRIBE)
    assert can_any(Authorizer([acl(Op.WRITE, ALLOW)]), Op.WRITE)


def test_authorize_any_default_and_super_users():
    """allow.everyone.if.no.acl.found answers yes when no ACL of the type matches Kafka's
    probe resource name (Kafka's testAuthorizeByResourceTypeNoAclFoundOverride), even if
    ACLs name other resources; a wildcard ACL on the type matches it; super users: yes."""
    assert can_any(Authorizer(allow_everyone_if_no_acl_found=True), Op.WRITE)
    assert can_any(Authorizer([acl(Op.WRITE, DENY)], allow_everyone_if_no_acl_found=True), Op.WRITE)
    wildcard_bob = acl(Op.WRITE, ALLOW, topic(WILDCARD), principal="User:bob")
    assert not can_any(Authorizer([wildcard_bob], allow_everyone_if_no_acl_found=True), Op.WRITE)
    assert not can_any(Authorizer(allow_everyone_if_no_acl_found=False), Op.WRITE)
    assert can_any(Authorizer(super_users={"User:alice"}), Op.WRITE)


def test_idempotent_producer_without_idempotent_write_may_write_some_topic():
    """The question a broker asks of an idempotent producer: IDEMPOTENT_WRITE on the cluster,
    else WRITE on some topic."""
    authorizer = Authorizer([acl(Op.WRITE, ALLOW, topic("events-", PT.PREFIXED), principal="User:producer")])
    producer = "User:producer"
    assert not can(authorizer, Op.IDEMPOTENT_WRITE, CLUSTER_NAME, principal=producer, resource_type=RT.CLUSTER)
    assert can_any(authorizer, Op.WRITE, principal=producer)
    assert not can_any(authorizer, Op.WRITE, principal="User:other")


# --- filters --------------------------------------------------------------------------------


def test_resource_pattern_filter_matches_as_kafkas():
    literal, prefixed, wildcard = topic("clicks"), topic("cl", PT.PREFIXED), topic(WILDCARD)
    group = ResourcePattern(RT.GROUP, "clicks")
    patterns = [literal, prefixed, wildcard, group, topic("clicks", PT.PREFIXED), topic("other")]

    def selected(pattern_filter: ResourcePatternFilter) -> list[ResourcePattern]:
        return [pattern for pattern in patterns if pattern_filter.matches(pattern)]

    assert selected(ResourcePatternFilter()) == patterns
    assert selected(ResourcePatternFilter(RT.GROUP)) == [group]
    assert selected(ResourcePatternFilter(RT.TOPIC, "clicks")) == [literal, topic("clicks", PT.PREFIXED)]
    assert selected(ResourcePatternFilter(RT.TOPIC, "clicks", PT.LITERAL)) == [literal]
    assert selected(ResourcePatternFilter(RT.TOPIC, "cl", PT.PREFIXED)) == [prefixed]
    assert selected(ResourcePatternFilter(RT.TOPIC, None, PT.PREFIXED)) == [prefixed, topic("clicks", PT.PREFIXED)]
    # A filter for "*" selects the wildcard pattern by name, not every pattern.
    assert selected(ResourcePatternFilter(RT.TOPIC, WILDCARD, PT.LITERAL)) == [wildcard]
    # MATCH: every pattern that would match a topic named "clicks".
    assert selected(ResourcePatternFilter(RT.TOPIC, "clicks", PT.MATCH)) == [
        literal,
        prefixed,
        wildcard,
        topic("clicks", PT.PREFIXED),
    ]
    assert selected(ResourcePatternFilter(RT.ANY, "clicks", PT.MATCH)) == [
        literal,
        prefixed,
        wildcard,
        group,
        topic("clicks", PT.PREFIXED),
    ]
    assert selected(ResourcePatternFilter(RT.TOPIC, "c", PT.MATCH)) == [wildcard]
    assert selected(ResourcePatternFilter(RT.TOPIC, None, PT.MATCH)) == [p for p in patterns if p != group]


def test_acl_filter_matches_each_field_exactly_or_any():
    target = acl(Op.READ, ALLOW, topic("clicks"), principal="User:alice", host=HOST)
    assert ACLFilter().matches(target)
    assert ACLFilter(principal="User:alice", host=HOST, operation=Op.READ, permission_type=ALLOW).matches(target)
    for miss in (
        ACLFilter(principal="User:bob"),
        ACLFilter(principal=WILDCARD_PRINCIPAL),
        ACLFilter(host=WILDCARD),
        ACLFilter(operation=Op.ALL),
        ACLFilter(operation=Op.DESCRIBE),
        ACLFilter(permission_type=DENY),
        ACLFilter(pattern=ResourcePatternFilter(RT.GROUP)),
        ACLFilter(pattern=ResourcePatternFilter(RT.TOPIC, "clicks", PT.PREFIXED)),
    ):
        assert not miss.matches(target), miss
    assert ACLFilter(pattern=ResourcePatternFilter(RT.TOPIC, "clicks", PT.MATCH)).matches(target)


# --- validation -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "valid",
    [
        acl(Op.READ),
        acl(Op.ALL, DENY, topic(WILDCARD), principal=WILDCARD_PRINCIPAL),
        acl(Op.READ, pattern=topic(WILDCARD, PT.PREFIXED)),  # Kafka accepts it (names starting with "*")
        acl(Op.IDEMPOTENT_WRITE, pattern=ResourcePattern(RT.CLUSTER, CLUSTER_NAME)),
        acl(Op.DESCRIBE, pattern=ResourcePattern(RT.USER, "bob")),
        acl(Op.READ, principal="User:CN=alice,O=org:x"),
        acl(Op.READ, host="fe80::1"),
    ],
)
def test_validate_acl_accepts(valid):
    validate_acl(valid)


@pytest.mark.parametrize(
    "invalid, message",
    [
        (acl(Op.ANY), "operation"),
        (acl(Op.UNKNOWN), "operation"),
        (acl(99), "operation"),
        (acl(Op.READ, Perm.ANY), "permission"),
        (acl(Op.READ, Perm.UNKNOWN), "permission"),
        (acl(Op.READ, pattern=ResourcePattern(RT.ANY, "x")), "resource type"),
        (acl(Op.READ, pattern=ResourcePattern(RT.UNKNOWN, "x")), "resource type"),
        (acl(Op.READ, pattern=topic("x", PT.MATCH)), "pattern type"),
        (acl(Op.READ, pattern=topic("x", PT.ANY)), "pattern type"),
        (acl(Op.READ, pattern=topic("x", PT.UNKNOWN)), "pattern type"),
        (acl(Op.READ, pattern=topic("")), "resource name"),
        (acl(Op.READ, pattern=ResourcePattern(RT.CLUSTER, "my-cluster")), CLUSTER_NAME),
        (acl(Op.READ, pattern=ResourcePattern(RT.CLUSTER, WILDCARD)), CLUSTER_NAME),
        (acl(Op.READ, principal="alice"), "Type:name"),
        (acl(Op.READ, principal="User:"), "Type:name"),
        (acl(Op.READ, principal=":alice"), "Type:name"),
        (acl(Op.READ, principal=""), "Type:name"),
        (acl(Op.READ, host=""), "host"),
        (ResourcePattern(RT.TOPIC, "x"), "not an ACL"),
    ],
)
def test_validate_acl_refuses_what_create_acls_refuses(invalid, message):
    with pytest.raises(InvalidRequestError, match=message):
        validate_acl(invalid)


def test_validate_filter_refuses_unknown_values_only():
    validate_filter(ACLFilter())
    validate_filter(ACLFilter("User:alice", HOST, Op.ALL, DENY, ResourcePatternFilter(RT.TOPIC, "x", PT.MATCH)))
    for invalid in (
        ACLFilter(operation=Op.UNKNOWN),
        ACLFilter(permission_type=Perm.UNKNOWN),
        ACLFilter(pattern=ResourcePatternFilter(RT.UNKNOWN)),
        ACLFilter(pattern=ResourcePatternFilter(pattern_type=PT.UNKNOWN)),
        ACLFilter(operation=42),
        ACLFilter(principal=7),
        ResourcePatternFilter(),
    ):
        with pytest.raises(InvalidRequestError):
            validate_filter(invalid)


def test_parse_super_users():
    assert parse_super_users("") == frozenset()
    assert parse_super_users(" ; ") == frozenset()
    assert parse_super_users("User:admin;User:ops") == {"User:admin", "User:ops"}
    assert parse_super_users(" User:admin ; User:CN=ops,O=x ;") == {"User:admin", "User:CN=ops,O=x"}
    for invalid in ("admin", "User:admin;ops", "User:", ":admin", None):
        with pytest.raises(InvalidConfigError):
            parse_super_users(invalid)


# --- errors and exports ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "code, name, cls",
    [
        (29, "TOPIC_AUTHORIZATION_FAILED", errors.TopicAuthorizationFailedError),
        (30, "GROUP_AUTHORIZATION_FAILED", errors.GroupAuthorizationFailedError),
        (31, "CLUSTER_AUTHORIZATION_FAILED", errors.ClusterAuthorizationFailedError),
        (53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", errors.TransactionalIdAuthorizationFailedError),
        (54, "SECURITY_DISABLED", errors.SecurityDisabledError),
    ],
)
def test_authorization_errors_have_kafkas_codes(code, name, cls):
    assert errors.for_code(code) is cls
    assert (cls.code, cls.name, cls.retriable, cls.invalid_metadata) == (code, name, False, False)
    assert issubclass(cls, errors.ApiError)
    assert issubclass(cls, errors.AuthorizationError) == (code != 54)


def test_acl_types_are_exported_lazily_from_raylog():
    for name in ("ACL", "ACLFilter", "ACLOperation", "ACLPermissionType", "PatternType"):
        assert getattr(raylog, name) is globals()[name]
    assert raylog.ResourcePattern is ResourcePattern
    assert raylog.ResourcePatternFilter is ResourcePatternFilter
    assert raylog.ResourceType is ResourceType


# --- seeded comparison with a brute-force reference -----------------------------------------

IMPLIED_BY = {Op.DESCRIBE: {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER}, Op.DESCRIBE_CONFIGS: {Op.ALTER_CONFIGS}}


def reference_authorize(acls, super_users, default, principal, host, operation, resource_type, name) -> bool:
    """StandardAuthorizer's rules as one loop over every ACL."""
    if principal in super_users:
        return True
    found = allowed = False
    for entry in acls:
        pattern = entry.pattern
        if pattern.resource_type != resource_type:
            continue
        if pattern.pattern_type == PT.LITERAL:
            covers = pattern.name in (name, WILDCARD)
        else:
            covers = name.startswith(pattern.name)
        if not covers:
            continue
        found = True
        if entry.principal not in (principal, WILDCARD_PRINCIPAL) or entry.host not in (host, WILDCARD):
            continue
        if entry.permission_type == DENY:
            if entry.operation in (operation, Op.ALL):
                return False
        elif entry.operation in (operation, Op.ALL) or entry.operation in IMPLIED_BY.get(operation, ()):
            allowed = True
    return allowed or (not found and default)


def reference_authorize_any(acls, super_users, default, principal, host, operation, resource_type) -> bool:
    """Kafka's default Authorizer.authorizeByResourceType, read literally, over every ACL."""
    if reference_authorize(acls, super_users, default, principal, host, operation, resource_type, "hardcode"):
        return True
    deny = {PT.LITERAL: set(), PT.PREFIXED: set()}
    allow = {PT.LITERAL: set(), PT.PREFIXED: set()}
    wildcard_allow = False
    for entry in acls:
        if entry.pattern.resource_type != resource_type:
            continue
        if entry.host not in (host, WILDCARD) or entry.principal not in (principal, WILDCARD_PRINCIPAL):
            continue
        if entry.operation not in (operation, Op.ALL):
            continue
        pattern = entry.pattern
        if entry.permission_type == DENY:
            if pattern.pattern_type == PT.LITERAL and pattern.name == WILDCARD:
                return False
            deny[pattern.pattern_type].add(pattern.name)
        elif pattern.pattern_type == PT.LITERAL and pattern.name == WILDCARD:
            wildcard_allow = True
        else:
            allow[pattern.pattern_type].add(pattern.name)
    if wildcard_allow:
        return True
    for pattern_type, names in allow.items():
        for allowed_name in names:
            if pattern_type == PT.LITERAL and allowed_name in deny[PT.LITERAL]:
                continue
            prefixes = {allowed_name[:i] for i in range(1, len(allowed_name) + 1)}
            if not prefixes & deny[PT.PREFIXED]:
                return True
    return False


def test_authorizer_agrees_with_a_brute_force_reference():
    """Over many seeded random ACL sets (names sharing prefixes, both wildcards, "hardcode"
    and its prefixes, every operation), authorize and authorize_any answer as the references."""
    rng = random.Random(20261129)
    names = ["a", "ab", "abc", "abd", "b", "ba", "*", "*x", "h", "hard", "hardcode", "hardcoded"]
    principals = ["User:alice", "User:bob", WILDCARD_PRINCIPAL, "Group:alice", "Group:*"]
    hosts = [WILDCARD, "10.0.0.1", "10.0.0.2"]
    types = [RT.TOPIC, RT.GROUP]
    # Mostly operations that imply or are implied, so that ACLs of a set meet often.
    few = [Op.READ, Op.WRITE, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS, Op.ALL]

    def operation() -> ACLOperation:
        return rng.choice(few if rng.random() < 0.8 else OPERATIONS)

    checked = 0
    for _ in range(400):
        acls = [
            ACL(
                rng.choice(principals),
                rng.choice(hosts),
                operation(),
                rng.choice((ALLOW, DENY)),
                ResourcePattern(rng.choice(types), rng.choice(names), rng.choice((PT.LITERAL, PT.PREFIXED))),
            )
            for _ in range(rng.randint(0, 14))
        ]
        super_users = set(rng.sample(["User:alice", "User:root"], rng.randint(0, 1)))
        default = rng.random() < 0.3
        authorizer = Authorizer(rng.sample(acls, len(acls)), super_users, default)
        args = (acls, super_users, default)
        for _ in range(12):
            principal = rng.choice(["User:alice", "User:bob", "User:carol", "Group:alice", WILDCARD_PRINCIPAL])
            host = rng.choice(["10.0.0.1", "10.0.0.2", "10.0.0.3"])
            resource_type = rng.choice(types)
            name = rng.choice([*names, "abcd", "zzz", "*"])
            request = (principal, host, operation(), resource_type)
            assert authorizer.authorize(*request, name) == reference_authorize(*args, *request, name), (acls, request)
            assert authorizer.authorize_any(*request) == reference_authorize_any(*args, *request), (acls, request)
            checked += 1
    assert checked == 4_800


@pytest.mark.parametrize(
    ("pattern", "resource_type", "name", "expected"),
    [
        (ResourcePattern(RT.TOPIC, "orders"), RT.TOPIC, "orders", True),
        (ResourcePattern(RT.TOPIC, "orders"), RT.TOPIC, "orders-eu", False),
        (ResourcePattern(RT.TOPIC, WILDCARD), RT.TOPIC, "anything", True),
        (ResourcePattern(RT.TOPIC, "ord", PT.PREFIXED), RT.TOPIC, "orders", True),
        (ResourcePattern(RT.TOPIC, "ord", PT.PREFIXED), RT.TOPIC, "or", False),
        (ResourcePattern(RT.TOPIC, WILDCARD, PT.PREFIXED), RT.TOPIC, "orders", False),  # a literal "*" prefix
        (ResourcePattern(RT.GROUP, "orders"), RT.TOPIC, "orders", False),
    ],
)
def test_a_pattern_covers_its_literal_name_the_wildcard_or_names_it_prefixes(pattern, resource_type, name, expected):
    """What the controller waits for when ACLs change: the resources a pattern applies to,
    by Kafka's matching (the type first)."""
    assert covers(pattern, resource_type, name) is expected
