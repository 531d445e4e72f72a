"""The metadata image's topic-config and add-partitions commands, their journal records and
their replay (no Ray)."""

from __future__ import annotations

import random

import pytest

from raylog.common.names import INTERNAL_TOPICS
from raylog.config import TopicConfig
from raylog.coordination.metadata import MetadataImage
from raylog.coordination.placement import assign_replicas
from raylog.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    NoReassignmentInProgressError,
    UnknownTopicOrPartitionError,
)
from raylog.storage.journal import MetadataJournal
from raylog.types import ConfigEntry

DEFAULTS = TopicConfig().to_properties()


class Controller:
    """The controller's commit step without Ray: journal the records, then apply them."""

    def __init__(self, path: str, brokers: int = 3):
        self.journal = MetadataJournal(path)
        self.image = MetadataImage()
        self.commit(
            [{"type": "cluster", "cluster_id": "c"}]
            + [{"type": "broker", "broker_id": b, "node_id": f"n{b}", "data_dir": f"/d{b}"} for b in range(brokers)]
        )

    def commit(self, records: list[dict]) -> None:
        self.journal.append(records)
        for record in records:
            self.image.apply(record)

    def replayed(self) -> MetadataImage:
        image = MetadataImage()
        for record in MetadataJournal(self.journal.path).replay():
            image.apply(record)
        return image


@pytest.fixture
def controller(tmp_path) -> Controller:
    return Controller(str(tmp_path / "controller" / "metadata.journal"))


def test_alter_config_sets_and_deletes_overrides_and_survives_replay(controller):
    """Altering sets properties (Kafka names or field names), None deletes an override back to
    its default, describe tells topic from default values, and a replay rebuilds all of it."""
    image = controller.image
    controller.commit([image.create_topic("t", 2, 1, {"retention_ms": "60000", "segment.bytes": "4096"})])
    assert image.describe_config("t")["retention.ms"] == ConfigEntry("60000", "topic")
    controller.commit([image.alter_config("t", {"retention.ms": "1000", "min_insync_replicas": 2})])
    controller.commit([image.alter_config("t", {"segment.bytes": None, "flush.ms": "10"})])
    described = image.describe_config("t")
    assert described["retention.ms"] == ConfigEntry("1000", "topic")
    assert described["min.insync.replicas"] == ConfigEntry("2", "topic")
    assert described["flush.ms"] == ConfigEntry("10", "topic")
    assert described["segment.bytes"] == ConfigEntry(DEFAULTS["segment.bytes"], "default")
    assert described["max.message.bytes"] == ConfigEntry(DEFAULTS["max.message.bytes"], "default")
    assert set(described) == set(DEFAULTS)
    assert image.topics["t"].config == {k: e.value for k, e in described.items()}
    assert image.config_versions["t"] == 2
    replayed = controller.replayed()
    assert replayed.topics == image.topics
    assert replayed.config_overrides == image.config_overrides
    assert replayed.config_versions == image.config_versions


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"retention.ms": "soon"}, "retention.ms"),
        ({"min.insync.replicas": "0"}, "min.insync.replicas"),
        ({"retention.ms": "1000", "segment.bytes": "12"}, "segment.bytes"),
        ({"no.such.config": "1"}, "no.such.config"),
    ],
)
def test_a_refused_alter_names_the_property_and_changes_nothing(controller, change, named):
    """A bad value or unknown property is refused with InvalidConfigError naming it (an
    unknown one with the known names), and no record comes out, even for the good keys."""
    image = controller.image
    controller.commit([image.create_topic("t", 1, 1, {"retention.ms": "60000"})])
    before = (image.topics["t"], image.config_overrides["t"], image.config_versions["t"])
    with pytest.raises(InvalidConfigError, match=named.replace(".", r"\.")) as raised:
        image.alter_config("t", change)
    if named == "no.such.config":
        assert "known: " in str(raised.value) and "retention.ms" in str(raised.value)
    assert (image.topics["t"], image.config_overrides["t"], image.config_versions["t"]) == before


def test_config_commands_on_an_unknown_topic_are_refused(controller):
    """Altering or describing a topic that does not exist is UnknownTopicOrPartitionError."""
    with pytest.raises(UnknownTopicOrPartitionError):
        controller.image.alter_config("nope", {"retention.ms": "1"})
    with pytest.raises(UnknownTopicOrPartitionError):
        controller.image.describe_config("nope")


def test_a_deleted_topic_created_again_starts_from_defaults(controller):
    """Deleting a topic forgets its overrides and config version."""
    image = controller.image
    controller.commit([image.create_topic("t", 1, 1, {"retention.ms": "60000"})])
    controller.commit([image.alter_config("t", {"flush.ms": "5"})])
    controller.commit([image.delete_topic("t")])
    controller.commit([image.create_topic("t", 1, 1)])
    assert {e.source for e in image.describe_config("t").values()} == {"default"}
    assert image.config_versions["t"] == 0
    assert controller.replayed().config_overrides == image.config_overrides


def test_add_partitions_continues_the_placement_and_survives_replay(controller):
    """New partitions are numbered on, led by their first replica with every replica in sync,
    placed from the topic's count and partition 0's first replica (so first replicas go on
    round-robin), and the journal replays to the same topic."""
    image = controller.image
    controller.commit([image.create_topic("t", 2, 2, rng=random.Random(7))])
    first = image.topics["t"].partitions[0].replicas[0]
    controller.commit([image.add_partitions("t", 7)])
    partitions = image.topics["t"].partitions
    assert [p.partition for p in partitions] == list(range(7))
    assert [p.replicas for p in partitions[2:]] == assign_replicas(
        5, 2, [0, 1, 2], first_partition=2, start_index=first
    )
    assert [p.replicas[0] for p in partitions] == [(first + p) % 3 for p in range(7)]
    assert all(p.leader == p.replicas[0] and p.isr == p.replicas and p.leader_epoch == 0 for p in partitions[2:])
    assert controller.replayed().topics == image.topics


def test_continued_placement_follows_kafka():
    """assign_replicas from ``first_partition`` with a fixed start index is Kafka's
    assignReplicasToBrokersRackUnaware(startPartitionId, fixedStartIndex), worked by hand:
    first replica ``(p + start) % n``, the shift growing at each multiple of n from there."""
    placed = assign_replicas(5, 3, [3, 5, 8, 9], first_partition=6, start_index=1)
    assert placed == [(9, 5, 8), (3, 8, 9), (5, 3, 8), (8, 5, 9), (9, 8, 3)]


def test_add_partitions_uses_only_live_brokers(controller):
    """New replicas go to live brokers; fewer live brokers than the replication factor is refused."""
    image = controller.image
    controller.commit([image.create_topic("t", 1, 2)])
    controller.commit([image.add_partitions("t", 4, live={0, 2})])
    assert all(set(p.replicas) == {0, 2} for p in image.topics["t"].partitions[1:])
    with pytest.raises(InvalidReplicationFactorError):
        image.add_partitions("t", 5, live={1})


@pytest.mark.parametrize("count", [1, 3, 0, -1, True, "5", 10_001])
def test_add_partitions_only_grows(controller, count):
    """A count not above the current one (or not an integer, or above the maximum) is
    InvalidPartitionsError, Kafka's code 37."""
    image = controller.image
    controller.commit([image.create_topic("t", 3, 1)])
    with pytest.raises(InvalidPartitionsError) as raised:
        image.add_partitions("t", count)
    assert raised.value.code == 37
    assert len(image.topics["t"].partitions) == 3


def test_add_partitions_refuses_internal_and_unknown_topics(controller):
    """The partition count of an internal topic never changes; an unknown topic is refused."""
    image = controller.image
    for internal in INTERNAL_TOPICS:
        image.apply(dict(image.create_topic("t", 1, 1), name=internal))
        with pytest.raises(InvalidPartitionsError, match="internal topic"):
            image.add_partitions(internal, 2)
    with pytest.raises(UnknownTopicOrPartitionError):
        image.add_partitions("nope", 2)


def test_a_journal_written_before_overrides_were_recorded_replays(controller):
    """A topic record without ``overrides`` (older journals) replays with every property a default."""
    record = controller.image.create_topic("old", 1, 1, {"retention.ms": "5"})
    del record["overrides"]
    controller.commit([record])
    described = controller.replayed().describe_config("old")
    assert described["retention.ms"] == ConfigEntry("5", "default")


def test_directory_ids_of_brokers_replay_and_older_broker_records_have_none(controller):
    """A broker record's directory id is kept per broker and survives replay; the broker
    records of journals from before directory ids (the fixture's) leave it unknown."""
    assert controller.image.directory_ids == {}
    controller.commit([{"type": "broker", "broker_id": 1, "node_id": "n9", "data_dir": "/d1", "directory_id": "x"}])
    controller.commit([{"type": "broker", "broker_id": 1, "node_id": "n9", "data_dir": "/d1", "directory_id": "y"}])
    replayed = controller.replayed()
    assert replayed.directory_ids == {1: "y"} and replayed.brokers[1].node_id == "n9"


def test_a_reassignment_keeps_the_replicas_it_started_from_and_lists_what_it_adds_and_removes(controller):
    """Kafka's ListPartitionReassignments: the replicas now (target first, then those being
    removed), the ones being added and the ones being removed; a second reassignment of the
    same partition keeps the first one's starting replicas, and all of it survives replay."""
    image = controller.image
    controller.commit([image.create_topic("t", 1, 2, {}, live={0, 1, 2})])
    start = image.partition("t", 0).replicas
    (outside,) = {0, 1, 2} - set(start)
    controller.commit(image.reassign("t", 0, [outside, start[0]]))
    listed = image.listed_reassignments()
    assert listed == {("t", 0): ((outside, start[0], start[1]), (outside,), (start[1],))}
    controller.commit(image.reassign("t", 0, [outside]))
    assert image.listed_reassignments()[("t", 0)] == ((outside, start[0], start[1]), (outside,), start)
    assert controller.replayed().listed_reassignments() == image.listed_reassignments()


def test_cancelling_a_reassignment_moves_back_to_the_replicas_it_started_from(controller):
    """Kafka's cancel (AlterPartitionReassignments with null replicas): the partition is
    reassigned back to where it started, the added replicas leave once that completes;
    cancelling where none is under way is NO_REASSIGNMENT_IN_PROGRESS."""
    image = controller.image
    controller.commit([image.create_topic("t", 1, 2, {}, live={0, 1, 2})])
    start = image.partition("t", 0).replicas
    with pytest.raises(NoReassignmentInProgressError):
        image.cancel_reassignment("t", 0)
    (outside,) = {0, 1, 2} - set(start)
    controller.commit(image.reassign("t", 0, [outside]))
    controller.commit(image.cancel_reassignment("t", 0))
    assert image.reassignments[("t", 0)] == start
    assert image.listed_reassignments()[("t", 0)] == ((*start, outside), (), (outside,))


def test_a_journal_written_before_reassignment_origins_were_recorded_replays(controller):
    """An older ``reassignment`` record has no ``original``: the replicas it does not keep
    are listed as removed, none as added."""
    image = controller.image
    controller.commit([image.create_topic("t", 1, 2, {}, live={0, 1, 2})])
    start = image.partition("t", 0).replicas
    (outside,) = {0, 1, 2} - set(start)
    records = image.reassign("t", 0, [outside, start[0]])
    del records[0]["original"]
    controller.commit(records)
    assert controller.replayed().listed_reassignments() == {("t", 0): ((outside, *start), (), (start[1],))}


def test_a_reassignment_that_may_not_change_the_replication_factor_is_refused_when_it_would(controller):
    """KIP-860: with allow_replication_factor_change false, a target of another size is
    INVALID_REPLICATION_FACTOR; one of the same size is taken."""
    image = controller.image
    controller.commit([image.create_topic("t", 1, 2, {}, live={0, 1, 2})])
    start = image.partition("t", 0).replicas
    with pytest.raises(InvalidReplicationFactorError, match="replication factor 2"):
        image.reassign("t", 0, [0, 1, 2], allow_replication_factor_change=False)
    controller.commit(image.reassign("t", 0, list(reversed(start)), allow_replication_factor_change=False))
    assert image.reassignments[("t", 0)] == tuple(reversed(start))


def test_acls_are_created_and_deleted_by_journal_records_and_survive_replay(controller):
    """CreateAcls and DeleteAcls as records: creating one twice adds it once, an invalid one
    refuses the whole creation, a filter deletes every ACL it matches (and says which), the
    version moves with each change, and a replay rebuilds the same set."""
    from raylog.common.acl import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        PatternType,
        ResourcePattern,
        ResourcePatternFilter,
        ResourceType,
    )
    from raylog.errors import InvalidRequestError

    image = controller.image
    topic = ResourcePattern(ResourceType.TOPIC, "orders-", PatternType.PREFIXED)
    read = ACL("User:etl", "*", ACLOperation.READ, ACLPermissionType.ALLOW, topic)
    deny = ACL("User:*", "10.0.0.9", ACLOperation.ALL, ACLPermissionType.DENY, ResourcePattern(ResourceType.GROUP, "g"))
    controller.commit(image.create_acls([read, deny, read]))
    assert image.acls == {read, deny} and image.acls_version == 2
    assert image.create_acls([read]) == []  # there already
    with pytest.raises(InvalidRequestError):
        image.create_acls([ACL("etl", "*", ACLOperation.READ, ACLPermissionType.ALLOW, topic)])  # no principal type
    assert image.describe_acls(
        ACLFilter(pattern=ResourcePatternFilter(ResourceType.TOPIC, "orders-eu", PatternType.MATCH))
    ) == [read]
    records, matched = image.delete_acls([ACLFilter(principal="User:*"), ACLFilter(operation=ACLOperation.ALL)])
    assert matched == [[deny], [deny]] and len(records) == 1
    controller.commit(records)
    assert image.acls == {read} and image.acls_version == 3
    replayed = controller.replayed()
    assert replayed.acls == {read} and replayed.acls_version == 3
