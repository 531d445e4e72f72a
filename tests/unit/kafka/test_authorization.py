"""The listener's authorization gate without Ray: each API's rule against an authorizer,
with a handler that records what reaches it (raylog.actors.kafka.authorization), and the
context's authorizer kept from the controller's metadata answers."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

import pytest

from raylog.actors.kafka import authorization
from raylog.actors.kafka.context import CONNECTION, BrokerContext
from raylog.common.acl import ACL, ACLOperation, ACLPermissionType, PatternType, ResourcePattern, ResourceType
from raylog.config import ControllerConfig
from raylog.coordination.acls import Authorizer
from raylog.kafka import codec
from raylog.kafka.codec.messages import SUPPORTED, ApiKey
from tests.unit.kafka.test_codec import SAMPLE_REQUESTS, error_codes

TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED, TXN_DENIED = 29, 30, 31, 53
ANON = authorization.ANONYMOUS
Op = ACLOperation


def acl(operation, resource_type, name, permission=ACLPermissionType.ALLOW, principal="User:*", pattern_type=None):
    pattern = ResourcePattern(resource_type, name, pattern_type or PatternType.LITERAL)
    return ACL(principal, "*", operation, permission, pattern)


class Gate:
    """Runs requests through the rules with an authorizer of ``acls``; remembers what the
    handler was given."""

    def __init__(self, acls=(), allow_everyone=False):
        self.authorizer = Authorizer(acls, allow_everyone_if_no_acl_found=allow_everyone)
        self.seen: list[dict] = []

    async def _authorizer(self):
        return self.authorizer

    async def _metadata(self, refresh: bool = False):
        return {"topics": {name: SimpleNamespace(topic_id=i.hex) for name, i in TOPIC_IDS.items()}}

    def run(self, key: ApiKey, body: dict, version: int | None = None, answer=None):
        version = SUPPORTED[key][1] if version is None else version
        header = codec.RequestHeader(key, version, 7, "client")
        ctx = SimpleNamespace(authorizer=self._authorizer, metadata=self._metadata)

        async def handler(ctx, header, served):
            self.seen.append(served)
            return answer(served) if answer is not None else codec.error_bodies.BUILDERS[key](served, 0)

        async def scenario():
            CONNECTION.set({"principal": ANON, "host": "10.0.0.9"})
            return await authorization.authorized(ctx, header, body, handler, set())

        response = asyncio.run(scenario())
        if response is not None:
            codec.encode_response(header, response)  # a valid answer at this version
        return response


#: The topics the fake metadata knows, by id.
TOPIC_IDS = {"a": uuid.UUID(int=1), "c": uuid.UUID(int=3)}


def test_every_supported_api_has_a_rule():
    assert set(authorization.RULES) == set(SUPPORTED)


#: Request-level fields of the APIs whose rules check a group, transactional id or key.
LEVEL = {
    "group_id": "g",
    "transactional_id": "t",
    "v3_and_below_transactional_id": "t",
    "key": "k",
    "subscribed_topic_names": ["a"],
}


@pytest.mark.parametrize("key", sorted(k for k, r in authorization.RULES.items() if r is not authorization._open))
def test_with_no_acl_nothing_denied_reaches_a_handler_and_every_answer_is_valid(key):
    """With no ACL (and allow.everyone.if.no.acl.found off), every API that names a
    resource is refused with its authorization error; a listing comes back empty; the
    answer encodes at the API's newest version."""
    gate = Gate()
    body = {**LEVEL, **SAMPLE_REQUESTS.get(key, {})}
    response = gate.run(key, body)
    codes = set(error_codes(response))
    assert codes <= {0, TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED, TXN_DENIED}, response
    for served in gate.seen:  # a listing's handler runs; what it answers is filtered
        assert key in (ApiKey.LIST_GROUPS, ApiKey.LIST_TRANSACTIONS), (key, served)


def test_topics_are_split_and_the_answers_merged():
    """A Produce to an allowed and a denied topic: the handler sees only the allowed one,
    the denied one is answered TOPIC_AUTHORIZATION_FAILED; the same for the other topic APIs."""
    gate = Gate([acl(Op.WRITE, ResourceType.TOPIC, "a")])
    response = gate.run(ApiKey.PRODUCE, SAMPLE_REQUESTS[ApiKey.PRODUCE])
    assert [t["name"] for t in gate.seen[0]["topic_data"]] == ["a"]
    codes = {t["name"]: {p["error_code"] for p in t["partition_responses"]} for t in response["responses"]}
    assert codes == {"a": {0}, "b": {TOPIC_DENIED}}

    prefixed = Gate([acl(Op.ALL, ResourceType.TOPIC, "orders-", pattern_type=PatternType.PREFIXED)])
    body = {"topics": [{"name": "orders-eu", "partitions": [{"partition_index": 0}]}, {"name": "x", "partitions": []}]}
    response = prefixed.run(ApiKey.LIST_OFFSETS, body)
    assert [t["name"] for t in prefixed.seen[0]["topics"]] == ["orders-eu"]
    assert {t["name"] for t in response["topics"]} == {"orders-eu", "x"}


def test_a_denied_group_or_transactional_id_refuses_the_whole_request():
    gate = Gate([acl(Op.READ, ResourceType.TOPIC, "a"), acl(Op.WRITE, ResourceType.TOPIC, "a")])
    assert gate.run(ApiKey.JOIN_GROUP, {"group_id": "g"})["error_code"] == GROUP_DENIED
    committed = gate.run(ApiKey.OFFSET_COMMIT, {"group_id": "g", **SAMPLE_REQUESTS[ApiKey.OFFSET_COMMIT]})
    assert set(error_codes(committed)) == {GROUP_DENIED}
    produced = gate.run(ApiKey.PRODUCE, {"transactional_id": "t", **SAMPLE_REQUESTS[ApiKey.PRODUCE]})
    assert set(error_codes(produced)) == {TXN_DENIED} and not gate.seen

    gate = Gate([acl(Op.READ, ResourceType.GROUP, "g"), acl(Op.READ, ResourceType.TOPIC, "a")])
    committed = gate.run(ApiKey.OFFSET_COMMIT, {"group_id": "g", "topics": [{"name": "a"}, {"name": "b"}]})
    assert [t["name"] for t in gate.seen[0]["topics"]] == ["a"]
    assert {t["name"] for t in committed["topics"]} == {"a", "b"}


def test_init_producer_id_needs_the_transactional_id_or_an_idempotent_write():
    """Transactional: WRITE on the id. Idempotent: IDEMPOTENT_WRITE on the cluster, or WRITE
    on some topic (Kafka's authorizeByResourceType)."""
    assert Gate().run(ApiKey.INIT_PRODUCER_ID, {"transactional_id": "t"})["error_code"] == TXN_DENIED
    assert Gate().run(ApiKey.INIT_PRODUCER_ID, {"transactional_id": None})["error_code"] == CLUSTER_DENIED
    writer = Gate([acl(Op.WRITE, ResourceType.TOPIC, "orders-", pattern_type=PatternType.PREFIXED)])
    assert writer.run(ApiKey.INIT_PRODUCER_ID, {"transactional_id": None})["error_code"] == 0
    idempotent = Gate([acl(Op.IDEMPOTENT_WRITE, ResourceType.CLUSTER, "kafka-cluster")])
    assert idempotent.run(ApiKey.INIT_PRODUCER_ID, {"transactional_id": None})["error_code"] == 0
    txn = Gate([acl(Op.WRITE, ResourceType.TRANSACTIONAL_ID, "t")])
    assert txn.run(ApiKey.INIT_PRODUCER_ID, {"transactional_id": "t"})["error_code"] == 0


def test_listings_show_what_the_principal_may_describe():
    groups = [{"group_id": g, "protocol_type": "consumer"} for g in ("a", "b")]
    gate = Gate([acl(Op.READ, ResourceType.GROUP, "a")])  # READ implies DESCRIBE
    listed = gate.run(ApiKey.LIST_GROUPS, {}, answer=lambda _: {"error_code": 0, "groups": list(groups)})
    assert [g["group_id"] for g in listed["groups"]] == ["a"]
    everyone = Gate([acl(Op.DESCRIBE, ResourceType.CLUSTER, "kafka-cluster")])
    listed = everyone.run(ApiKey.LIST_GROUPS, {}, answer=lambda _: {"error_code": 0, "groups": list(groups)})
    assert [g["group_id"] for g in listed["groups"]] == ["a", "b"]


def test_groups_ids_and_config_resources_are_answered_one_by_one():
    gate = Gate([acl(Op.DESCRIBE, ResourceType.GROUP, "g1"), acl(Op.DESCRIBE_CONFIGS, ResourceType.TOPIC, "a")])
    described = gate.run(ApiKey.DESCRIBE_GROUPS, {"groups": ["g1", "g2"]})
    assert gate.seen[-1]["groups"] == ["g1"]
    assert {g["group_id"]: g["error_code"] for g in described["groups"]} == {"g1": 0, "g2": GROUP_DENIED}
    found = gate.run(ApiKey.FIND_COORDINATOR, {"key_type": 0, "coordinator_keys": ["g1", "g2"]})
    assert {c["key"]: c["error_code"] for c in found["coordinators"]} == {"g1": 0, "g2": GROUP_DENIED}
    resources = [{"resource_type": 2, "resource_name": "a"}, {"resource_type": 2, "resource_name": "b"}]
    resources.append({"resource_type": 4, "resource_name": "0"})
    configs = gate.run(ApiKey.DESCRIBE_CONFIGS, {"resources": resources})
    codes = {(r["resource_type"], r["resource_name"]): r["error_code"] for r in configs["results"]}
    assert codes == {(2, "a"): 0, (2, "b"): TOPIC_DENIED, (4, "0"): CLUSTER_DENIED}


def test_offset_fetch_answers_topics_not_described_as_denied():
    gate = Gate([acl(Op.DESCRIBE, ResourceType.GROUP, "g"), acl(Op.DESCRIBE, ResourceType.TOPIC, "a")])

    def committed(_):
        parts = [{"partition_index": 0, "committed_offset": 5, "error_code": 0}]
        topics = [{"name": "a", "partitions": parts}, {"name": "b", "partitions": parts}]
        return {"groups": [{"group_id": "g", "topics": topics, "error_code": 0}]}

    body = {"groups": [{"group_id": "g", "topics": None}, {"group_id": "h", "topics": None}]}
    answer = gate.run(ApiKey.OFFSET_FETCH, body, answer=committed)
    by_group = {g["group_id"]: g for g in answer["groups"]}
    assert by_group["h"]["error_code"] == GROUP_DENIED and [g["group_id"] for g in gate.seen[0]["groups"]] == ["g"]
    offsets = {t["name"]: t["partitions"][0] for t in by_group["g"]["topics"]}
    assert offsets["a"]["committed_offset"] == 5 and offsets["b"]["error_code"] == TOPIC_DENIED
    assert offsets["b"]["committed_offset"] == -1


def test_super_users_and_allow_everyone():
    super_user = Authorizer([], super_users=[ANON])
    gate = Gate()
    gate.authorizer = super_user
    assert gate.run(ApiKey.ELECT_LEADERS, {})["error_code"] == 0
    open_cluster = Gate(allow_everyone=True)
    assert open_cluster.run(ApiKey.JOIN_GROUP, {"group_id": "g"})["error_code"] == 0
    denied = Gate([acl(Op.READ, ResourceType.GROUP, "g", ACLPermissionType.DENY)], allow_everyone=True)
    assert denied.run(ApiKey.JOIN_GROUP, {"group_id": "g"})["error_code"] == GROUP_DENIED


def test_denials_are_logged_once_each_then_at_debug(caplog):
    gate = Gate()
    logged: set = set()
    access = authorization.Access(gate.authorizer, ANON, "10.0.0.9", logged)
    with caplog.at_level("DEBUG", logger="raylog.authorizer"):
        for _ in range(3):
            assert not access.allows(Op.READ, ResourceType.TOPIC, "secret")
    levels = [r.levelname for r in caplog.records if "Denied" in r.getMessage()]
    assert levels == ["INFO", "DEBUG", "DEBUG"]
    assert (
        "Principal = User:ANONYMOUS is Denied operation = READ from host = 10.0.0.9" in caplog.records[0].getMessage()
    )


def test_a_topic_left_out_of_a_listing_is_not_logged_as_a_denial(caplog):
    """``log_denied=False`` (a Metadata answer of every topic hiding those the caller may not
    describe, as Kafka's logIfDenied): the same answer, nothing logged or remembered."""
    gate = Gate()
    logged: set = set()
    access = authorization.Access(gate.authorizer, ANON, "10.0.0.9", logged)
    with caplog.at_level("DEBUG", logger="raylog.authorizer"):
        assert not access.allows(Op.DESCRIBE, ResourceType.TOPIC, "secret", log_denied=False)
    assert not [r for r in caplog.records if "Denied" in r.getMessage()] and not logged


def test_a_guard_tells_the_clusters_own_actors_from_clients_with_or_without_an_authorizer():
    from raylog.actors.access import Guard
    from raylog.coordination.sessions import SessionKeys, new_key
    from raylog.errors import SaslAuthenticationError

    key = new_key()
    guard = Guard(key)  # no authorizer applied
    keys = SessionKeys(key)
    assert guard.is_broker(guard.broker_token())
    assert not guard.is_broker(keys.issue("User:alice", "*", expires_ms=2**62))
    assert not guard.is_broker(None)
    with pytest.raises(SaslAuthenticationError):
        guard.is_broker(SessionKeys(new_key()).broker_token(0))


def test_the_denials_remembered_as_logged_are_bounded():
    """A client naming a new topic in every request does not grow the broker's memory."""
    from raylog.actors import access as access_module

    gate = Gate()
    logged: set = set()
    access = authorization.Access(gate.authorizer, ANON, "10.0.0.9", logged)
    for i in range(access_module.DENIALS_REMEMBERED + 10):
        access.allows(Op.READ, ResourceType.TOPIC, f"t{i}")
    assert len(logged) <= access_module.DENIALS_REMEMBERED


class AclController:
    """A controller whose metadata answers carry ``acls`` as the real one does: the set when
    the caller's version differs, else None."""

    def __init__(self):
        self.version, self.acls, self.asked = 1, {acl(Op.READ, ResourceType.TOPIC, "a")}, []

    def _remote(self, topics=None, acls_version=None, credentials_version=None, session=None):
        self.asked.append(acls_version)

        async def answer():
            acls = None if acls_version == self.version else frozenset(self.acls)
            return {"topics": {}, "leaders": {}, "listeners": {}, "acls": (self.version, acls)}

        return answer()

    @property
    def metadata(self):
        return SimpleNamespace(remote=self._remote)


def test_the_context_keeps_an_authorizer_of_the_latest_acls():
    controller = AclController()
    ctx = BrokerContext("c", 0, controller, ControllerConfig.from_properties({"authorizer": "acl"}))

    async def scenario():
        first = await ctx.authorizer()
        await ctx.metadata(refresh=True)
        same = await ctx.authorizer()
        controller.version, controller.acls = 2, set()
        await ctx.metadata(refresh=True)
        return first, same, await ctx.authorizer()

    first, same, latest = asyncio.run(scenario())
    assert first.authorize(ANON, "h", Op.READ, ResourceType.TOPIC, "a") and same is first
    assert controller.asked == [None, 1, 1] and latest.acls == frozenset()
    plain = BrokerContext("c", 0, controller)
    assert asyncio.run(plain.authorizer()) is None


def test_a_refused_produce_at_acks_0_is_not_answered():
    """The client expects no response at acks 0: a refusal is logged, never sent."""
    gate = Gate([acl(Op.WRITE, ResourceType.TOPIC, "a")])
    body = {"acks": 0, **SAMPLE_REQUESTS[ApiKey.PRODUCE]}
    assert gate.run(ApiKey.PRODUCE, body, answer=lambda _: None) is None
    assert [t["name"] for t in gate.seen[0]["topic_data"]] == ["a"]
    assert Gate().run(ApiKey.PRODUCE, body, answer=lambda _: None) is None


def test_authorized_operations_are_those_the_principal_may_do():
    """KIP-430: a bit per operation of the resource type the principal may do; every one
    without an authorizer; Kafka's INT32 minimum when not asked."""

    def operations(authorizer, resource_type, name="kafka-cluster"):
        async def scenario():
            connection = {"principal": ANON, "host": "h"}
            if authorizer is not None:
                connection["access"] = authorization.Access(authorizer, ANON, "h", set())
            CONNECTION.set(connection)
            return authorization.authorized_operations(True, resource_type, name)

        return asyncio.run(scenario())

    bits = lambda *ops: sum(1 << op for op in ops)  # noqa: E731
    reader = Authorizer([acl(Op.READ, ResourceType.TOPIC, "a")])
    assert operations(reader, ResourceType.TOPIC, "a") == bits(Op.READ, Op.DESCRIBE)
    assert operations(reader, ResourceType.TOPIC, "b") == 0
    assert operations(None, ResourceType.TOPIC, "a") == bits(*authorization.SUPPORTED_OPERATIONS[ResourceType.TOPIC])
    # Kafka 4's groups have configs (KIP-848): their operations include DESCRIBE_CONFIGS and ALTER_CONFIGS.
    group = bits(Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS)
    assert operations(None, ResourceType.GROUP, "g") == group
    assert authorization.authorized_operations(False, ResourceType.TOPIC, "a") == authorization.NOT_REQUESTED


def test_a_pushed_version_is_not_undone_by_an_older_metadata_answer():
    ctx = BrokerContext("c", 0, AclController(), ControllerConfig.from_properties({"authorizer": "acl"}))
    ctx.apply_acls(3, {acl(Op.READ, ResourceType.TOPIC, "a")})
    ctx.apply_acls(2, set())  # a metadata answer from before the push
    assert asyncio.run(ctx.authorizer()).authorize(ANON, "h", Op.READ, ResourceType.TOPIC, "a")
    ctx.apply_acls(4, set())
    assert asyncio.run(ctx.authorizer()).acls == frozenset()


def test_topics_named_by_id_are_authorized_by_their_names():
    """DeleteTopics v6 by topic id: the id's topic name is what the ACLs name; an unknown
    id goes on to the handler (which answers UNKNOWN_TOPIC_ID)."""
    gate = Gate([acl(Op.DELETE, ResourceType.TOPIC, "a")])
    unknown = uuid.UUID(int=2)
    body = {"topics": [{"name": None, "topic_id": TOPIC_IDS[n]} for n in ("a", "c")] + [{"topic_id": unknown}]}
    answer = gate.run(ApiKey.DELETE_TOPICS, body)
    assert [t["topic_id"] for t in gate.seen[0]["topics"]] == [TOPIC_IDS["a"], unknown]
    codes = {r["topic_id"]: r["error_code"] for r in answer["responses"]}
    assert codes[TOPIC_IDS["c"]] == TOPIC_DENIED and codes[TOPIC_IDS["a"]] == 0
