"""The Kafka listener's Metadata handler on a hand-made metadata cache and controller (no
Ray): Kafka's automatic topic creation (``auto.create.topics.enable``, librdkafka test 0033)."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

from raylog.actors.kafka import data
from raylog.actors.kafka.context import BrokerContext
from raylog.config import ControllerConfig
from raylog.errors import (
    InvalidReplicationFactorError,
    InvalidTopicError,
    LeaderNotAvailableError,
    UnknownTopicOrPartitionError,
)
from raylog.kafka import codec
from raylog.types import NewTopic, PartitionInfo, TopicDescription

HEADER = codec.RequestHeader(codec.ApiKey.METADATA, 12, 1, "test")


class Controller:
    """Creates the topics asked for (its answers: per name (code, message)), leader-less."""

    def __init__(self, md: dict, brokers: int):
        self.md = md
        self.brokers = brokers
        self.asked: list[NewTopic] = []
        self.create_topics = SimpleNamespace(remote=self._create)

    def _create(self, news: list[NewTopic], session=None) -> dict:
        answers = {}
        for new in news:
            self.asked.append(new)
            if new.replication_factor > self.brokers:
                answers[new.name] = (InvalidReplicationFactorError.code, "too few brokers")
                continue
            partitions = tuple(
                PartitionInfo(new.name, p, -1, 0, tuple(range(new.replication_factor)), ())
                for p in range(new.num_partitions)
            )
            self.md["topics"][new.name] = TopicDescription(new.name, uuid.uuid4().hex, partitions, {})
            answers[new.name] = (0, "")
        return answers


class Context(BrokerContext):
    async def metadata(self, refresh: bool = False) -> dict:
        return self.controller.md

    async def call(self, ref, timeout_s=None):
        return ref  # the fake controller answered already


def context(brokers: int = 1, **config) -> Context:
    config = {"auto.create.topics.enable": "true", **config}
    md = {
        "topics": {},
        "leaders": {},
        "live": set(range(brokers)),
        "listeners": {0: {"PLAINTEXT": ("127.0.0.1", 9092)}},
        "cluster_id": "c",
    }
    return Context("c", 0, Controller(md, brokers), ControllerConfig.from_properties(config))


def ask(ctx: Context, *names: str, allow: bool = True) -> dict:
    body = {"topics": [{"name": n} for n in names], "allow_auto_topic_creation": allow}
    answer = asyncio.run(data.metadata(ctx, HEADER, body))
    return {t["name"]: (t["error_code"], len(t["partitions"])) for t in answer["topics"]}


def test_a_topic_asked_for_is_created_with_the_broker_defaults():
    """With auto.create.topics.enable=true, a Kafka producer's Metadata for a topic that does
    not exist creates it with num.partitions and default.replication.factor; the answer lists
    it, leader-less until its leader starts (the client asks again)."""
    ctx = context(brokers=3, **{"num.partitions": "4", "default.replication.factor": "3"})
    answers = ask(ctx, "clicks")
    assert [(n.name, n.num_partitions, n.replication_factor) for n in ctx.controller.asked] == [("clicks", 4, 3)]
    assert answers == {"clicks": (0, 4)}
    partitions = asyncio.run(data.metadata(ctx, HEADER, {"topics": [{"name": "clicks"}]}))["topics"][0]["partitions"]
    assert {p["error_code"] for p in partitions} == {LeaderNotAvailableError.code}


def test_nothing_is_created_unless_both_the_request_and_the_cluster_allow_it():
    """A consumer's Metadata (librdkafka: allow.auto.create.topics=false) or a cluster with
    auto.create.topics.enable=false (the default) answers UNKNOWN_TOPIC_OR_PARTITION and
    creates nothing."""
    default = Context("c", 0, context().controller, ControllerConfig())
    for ctx, allow in ((context(), False), (default, True)):
        assert ask(ctx, "clicks", allow=allow) == {"clicks": (UnknownTopicOrPartitionError.code, 0)}
        assert ctx.controller.asked == []


def test_a_topic_that_cannot_be_created_gets_kafkas_error_and_the_others_are_answered():
    """An illegal name is INVALID_TOPIC_EXCEPTION and an internal one is never created by a
    client; a replication factor above the live brokers is INVALID_REPLICATION_FACTOR. The
    other topics of the request are answered as usual."""
    ctx = context(brokers=1, **{"default.replication.factor": "3"})
    answers = ask(ctx, "bad name!", "__consumer_offsets", "clicks")
    assert answers == {
        "bad name!": (InvalidTopicError.code, 0),
        "__consumer_offsets": (UnknownTopicOrPartitionError.code, 0),
        "clicks": (InvalidReplicationFactorError.code, 0),
    }
    assert [n.name for n in ctx.controller.asked] == ["clicks"]


def test_a_create_topics_count_left_to_the_broker_takes_the_same_defaults():
    """CreateTopics with num_partitions and replication_factor -1 (KIP-464: Kafka's admin
    clients' default) creates with num.partitions and default.replication.factor."""
    from raylog.actors.kafka import admin

    ctx = context(brokers=3, **{"num.partitions": "4", "default.replication.factor": "3"})
    header = codec.RequestHeader(codec.ApiKey.CREATE_TOPICS, 7, 1, "test")
    body = {"topics": [{"name": "clicks", "num_partitions": -1, "replication_factor": -1}], "timeout_ms": 1000}
    answer = asyncio.run(admin.create_topics(ctx, header, body))["topics"][0]
    assert (answer["error_code"], answer["num_partitions"], answer["replication_factor"]) == (0, 4, 3)
    assert [(n.num_partitions, n.replication_factor) for n in ctx.controller.asked] == [(4, 3)]


def test_topics_asked_for_by_id_are_answered_by_name_and_id():
    """Metadata v10+ may name a topic by its id alone (KIP-516): a member of Kafka 4's consumer
    protocol learns its assignment by topic id and asks so; an id no topic has is
    UNKNOWN_TOPIC_ID. librdkafka's consumer waited for ever before (answered by name only)."""
    from raylog.errors import UnknownTopicIdError

    ctx = context(brokers=1, **{"num.partitions": "2", "default.replication.factor": "1"})
    ask(ctx, "clicks")  # created
    ctx.controller.md.pop("topic_ids")  # (the fake changes its answer in place; a real one is new)
    known = uuid.UUID(hex=ctx.controller.md["topics"]["clicks"].topic_id)
    stranger = uuid.uuid4()
    body = {"topics": [{"topic_id": known, "name": None}, {"topic_id": stranger, "name": None}]}
    topics = asyncio.run(data.metadata(ctx, HEADER, body))["topics"]
    assert [(t["name"], t["topic_id"], t["error_code"], len(t["partitions"])) for t in topics] == [
        ("clicks", known, 0, 2),
        (None, stranger, UnknownTopicIdError.code, 0),
    ]


def test_topics_left_out_of_an_all_topics_answer_are_not_denials(caplog):
    """With the authorizer, a Metadata request of every topic leaves out those the principal
    may not describe without logging or remembering a denial (Kafka's logIfDenied=false for
    that filter); a topic named is answered TOPIC_AUTHORIZATION_FAILED and logged as denied."""
    from raylog.actors.kafka import authorization
    from raylog.actors.kafka.context import CONNECTION
    from raylog.common.acl import ACL, ACLOperation, ACLPermissionType, ResourcePattern
    from raylog.common.acl import ResourceType as Kind
    from raylog.coordination.acls import Authorizer
    from raylog.errors import TopicAuthorizationFailedError

    ctx = context(brokers=1, **{"num.partitions": "1", "default.replication.factor": "1"})
    ask(ctx, "open", "secret")  # created
    readable = ACL("User:*", "*", ACLOperation.DESCRIBE, ACLPermissionType.ALLOW, ResourcePattern(Kind.TOPIC, "open"))
    acls = Authorizer([readable])

    async def authorizer():
        return acls

    ctx.authorizer = authorizer
    logged: set = set()

    def metadata_of(topics: list[dict] | None) -> dict:
        async def scenario():
            CONNECTION.set({"principal": "User:ANONYMOUS", "host": "10.0.0.9"})
            body = {"topics": topics, "allow_auto_topic_creation": False}
            answer = await authorization.authorized(ctx, HEADER, body, data.metadata, logged)
            return {t["name"]: t["error_code"] for t in answer["topics"]}

        return asyncio.run(scenario())

    with caplog.at_level("DEBUG", logger="raylog.authorizer"):
        assert metadata_of(None) == {"open": 0}
        assert not [r for r in caplog.records if "Denied" in r.getMessage()] and not logged
        assert metadata_of([{"name": "secret"}]) == {"secret": TopicAuthorizationFailedError.code}
    assert [r.levelname for r in caplog.records if "Denied" in r.getMessage()] == ["INFO"]
    assert len(logged) == 1
