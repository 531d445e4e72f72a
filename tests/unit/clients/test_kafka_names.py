"""Kafka's and kafka-python's names in raylog's API without Ray: error classes and their
aliases, the record types' fields, the admin's ConfigResource / NewPartitions forms, the
consumer's timestamp types, and what ``raylog`` exports."""

from __future__ import annotations

import importlib
import pickle
import types

import pytest

import raylog
import raylog.errors as errors
from raylog.clients.admin import base as admin_base
from raylog.clients.admin.configs import _config_changes
from raylog.clients.admin.topics import _total_count
from raylog.clients.consumer import Consumer, consumer_coordinator, log_append_time_ranges, timestamp_types
from raylog.clients.group import ConsumerRebalanceListener, offsets_to_commit
from raylog.clients.security import ClientSession
from raylog.common import record_batch
from raylog.coordination.metadata import MetadataImage
from raylog.types import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    AlterConfigOp,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    NewPartitions,
    NewTopic,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    Record,
    RecordMetadata,
    TopicPartition,
)
from tests.unit.clients.test_client_inputs import NoCluster

#: kafka-python's ``kafka.errors`` names (3.0) for the codes raylog has, by code.
KAFKA_PYTHON_NAMES = {
    -1: "UnknownError",
    1: "OffsetOutOfRangeError",
    2: "CorruptRecordError",
    3: "UnknownTopicOrPartitionError",
    5: "LeaderNotAvailableError",
    6: "NotLeaderForPartitionError",
    7: "RequestTimedOutError",
    10: "MessageSizeTooLargeError",
    12: "OffsetMetadataTooLargeError",
    13: "NetworkExceptionError",
    14: "CoordinatorLoadInProgressError",
    15: "CoordinatorNotAvailableError",
    16: "NotCoordinatorError",
    17: "InvalidTopicError",
    19: "NotEnoughReplicasError",
    20: "NotEnoughReplicasAfterAppendError",
    21: "InvalidRequiredAcksError",
    22: "IllegalGenerationError",
    23: "InconsistentGroupProtocolError",
    24: "InvalidGroupIdError",
    25: "UnknownMemberIdError",
    26: "InvalidSessionTimeoutError",
    27: "RebalanceInProgressError",
    29: "TopicAuthorizationFailedError",
    30: "GroupAuthorizationFailedError",
    31: "ClusterAuthorizationFailedError",
    33: "UnsupportedSaslMechanismError",
    34: "IllegalSaslStateError",
    35: "UnsupportedVersionError",
    36: "TopicAlreadyExistsError",
    37: "InvalidPartitionsError",
    38: "InvalidReplicationFactorError",
    39: "InvalidReplicationAssignmentError",
    40: "InvalidConfigurationError",
    42: "InvalidRequestError",
    44: "PolicyViolationError",
    45: "OutOfOrderSequenceNumberError",
    47: "InvalidProducerEpochError",
    48: "InvalidTxnStateError",
    49: "InvalidProducerIdMappingError",
    50: "InvalidTransactionTimeoutError",
    51: "ConcurrentTransactionsError",
    53: "TransactionalIdAuthorizationFailedError",
    54: "SecurityDisabledError",
    58: "SaslAuthenticationFailedError",
    55: "OperationNotAttemptedError",
    56: "KafkaStorageError",
    68: "NonEmptyGroupError",
    69: "GroupIdNotFoundError",
    70: "FetchSessionIdNotFoundError",
    71: "InvalidFetchSessionEpochError",
    74: "FencedLeaderEpochError",
    75: "UnknownLeaderEpochError",
    76: "UnsupportedCompressionTypeError",
    78: "OffsetNotAvailableError",
    79: "MemberIdRequiredError",
    80: "PreferredLeaderNotAvailableError",
    81: "GroupMaxSizeReachedError",
    82: "FencedInstanceIdError",
    83: "EligibleLeadersNotAvailableError",
    84: "ElectionNotNeededError",
    85: "NoReassignmentInProgressError",
    86: "GroupSubscribedToTopicError",
    87: "InvalidRecordError",
    88: "UnstableOffsetCommitError",
    90: "ProducerFencedError",
    91: "ResourceNotFoundError",
    92: "DuplicateResourceError",
    93: "UnacceptableCredentialError",
    100: "UnknownTopicIdError",
    103: "InconsistentTopicIdError",
    104: "InconsistentClusterIdError",
    109: "OffsetMovedToTieredStorageError",
    105: "TransactionalIdNotFoundError",
    110: "FencedMemberEpochError",
    111: "UnreleasedInstanceIdError",
    112: "UnsupportedAssignorError",
    113: "StaleMemberEpochError",
    128: "InvalidRegularExpressionError",  # (not in kafka-python 2.2)
}


def _api_errors() -> list[type[errors.ApiError]]:
    return [
        cls
        for cls in vars(errors).values()
        if isinstance(cls, type) and issubclass(cls, errors.ApiError) and cls.code is not None
    ]


def test_every_error_code_is_known_by_kafka_pythons_name():
    """Each code raylog answers with is importable from raylog.errors under kafka-python's
    name, as the same class (so ``except`` clauses written for kafka-python catch it)."""
    codes = {cls.code for cls in _api_errors()}
    assert codes == set(KAFKA_PYTHON_NAMES)
    for code, name in KAFKA_PYTHON_NAMES.items():
        assert getattr(errors, name) is errors.for_code(code), name


def test_client_side_errors_and_bases_have_kafka_pythons_names():
    assert errors.KafkaError is errors.RaylogError and raylog.KafkaError is errors.RaylogError
    assert errors.BrokerResponseError is errors.ApiError
    for name in ("KafkaTimeoutError", "CommitFailedError", "IllegalStateError", "NoOffsetForPartitionError"):
        assert issubclass(getattr(errors, name), errors.KafkaError)
    assert errors.KafkaConfigurationError is errors.InvalidConfigError
    assert errors.KafkaConnectionError is errors.NetworkExceptionError


def test_renamed_classes_keep_raylogs_earlier_names():
    """Code 13 is NetworkExceptionError (Kafka's NETWORK_EXCEPTION) now; raylog's earlier
    name still names it."""
    assert errors.BrokerUnavailableError is errors.NetworkExceptionError
    assert errors.NetworkExceptionError.__name__ == "NetworkExceptionError"
    assert errors.NetworkExceptionError.code == 13 and errors.NetworkExceptionError.name == "NETWORK_EXCEPTION"


def test_retriable_flags_and_bases_agree():
    """A retriable error derives from RetriableError, one that also invalidates metadata from
    InvalidMetadataError (kafka-python's hierarchy), and the flags clients read say the same."""
    for cls in [*_api_errors(), errors.KafkaTimeoutError, errors.CommitFailedError, errors.IllegalStateError]:
        assert cls.retriable == issubclass(cls, errors.RetriableError), cls
        assert cls.invalid_metadata == issubclass(cls, errors.InvalidMetadataError), cls
    assert issubclass(errors.NotLeaderForPartitionError, errors.InvalidMetadataError)
    assert issubclass(errors.KafkaTimeoutError, errors.RetriableError)
    assert not issubclass(errors.TopicAlreadyExistsError, errors.RetriableError)


def test_errors_keep_their_class_across_pickling():
    """Errors cross Ray's process boundaries by pickle: an aliased one comes back as itself."""
    error = errors.NotLeaderForPartitionError("moved")
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is errors.NotLeaderOrFollowerError and back.args == ("moved",)


def test_raylog_exports_the_common_names():
    """``from raylog import ...`` works for the errors users catch most and the kafka-python
    types, and importing raylog.errors alone does not import Ray's client modules."""
    for name in (
        "KafkaError",
        "RaylogError",
        "KafkaTimeoutError",
        "CommitFailedError",
        "TopicAlreadyExistsError",
        "UnknownTopicOrPartitionError",
        "NotLeaderForPartitionError",
        "ProducerFencedError",
        "ConsumerRebalanceListener",
        "NewPartitions",
        "ConfigResource",
        "ConfigResourceType",
        "AlterConfigOp",
    ):
        assert name in raylog.__all__ and getattr(raylog, name) is not None, name
    assert raylog.ConsumerRebalanceListener is ConsumerRebalanceListener
    assert raylog.KafkaTimeoutError is errors.KafkaTimeoutError
    assert set(dir(raylog)) >= set(raylog.__all__)
    with pytest.raises(AttributeError, match="no attribute 'KafkaProducer'"):
        importlib.import_module("raylog").KafkaProducer  # noqa: B018 — the import is renamed instead


def test_records_answer_kafka_pythons_field_names_and_keep_raylogs():
    record = Record("t", 0, 5, 1_000, b"k", b"v", [("h", b"1")], TIMESTAMP_LOG_APPEND_TIME)
    assert (record.timestamp, record.timestamp_ms, record.timestamp_type) == (1_000, 1_000, 1)
    assert Record("t", 0, 5, 1_000, b"k", b"v", []).timestamp_type == TIMESTAMP_CREATE_TIME == 0
    assert record[:7] == ("t", 0, 5, 1_000, b"k", b"v", [("h", b"1")])
    metadata = RecordMetadata("t", 1, 7, 2_000)
    assert (metadata.timestamp_ms, metadata.topic_partition, metadata.serialized_key_size) == (2_000, ("t", 1), -1)
    found = OffsetAndTimestamp(3, 4_000)
    assert (found.timestamp, found.timestamp_ms) == (4_000, 4_000)
    assert pickle.loads(pickle.dumps(record)) == record


def test_new_topic_takes_kafka_pythons_topic_configs():
    assert NewTopic("a", 2, 1, topic_configs={"retention.ms": "1"}) == NewTopic("a", 2, 1, config={"retention.ms": "1"})
    assert NewTopic("a", config={"x": "1"}).topic_configs == {"x": "1"}
    same = NewTopic("a", config={"x": "1"}, topic_configs={"x": "1"})
    assert same.config == {"x": "1"}
    with pytest.raises(errors.InvalidConfigError, match="config and topic_configs differ"):
        NewTopic("a", config={"x": "1"}, topic_configs={"x": "2"})


def test_offsets_to_commit_takes_numbers_and_offset_and_metadata():
    """kafka-python lets metadata be None: it counts as ""."""
    assert offsets_to_commit({("t", 0): 5, TopicPartition("t", 1): OffsetAndMetadata(6, None)}) == {
        TopicPartition("t", 0): OffsetAndMetadata(5, ""),
        TopicPartition("t", 1): OffsetAndMetadata(6, ""),
    }


def test_config_changes_accept_the_dict_form_and_config_resources():
    """The dict form and ConfigResources (by enum, name or code; kafka-python's objects are
    read by their attributes) give the controller the same changes; operations map to a
    value, None (DELETE) or an ("append" | "subtract", items) pair."""
    by_dict = _config_changes({"t": {"retention.ms": "1", "segment.bytes": None}}, incremental=True)
    for kind in (ConfigResourceType.TOPIC, "topic", "TOPIC", 2):
        resource = ConfigResource(kind, "t", {"retention.ms": "1", "segment.bytes": None})
        assert _config_changes([resource], incremental=True) == by_dict
    ops = {
        "a": (AlterConfigOp.SET, "1"),
        "b": ("delete", "ignored"),
        "c": (AlterConfigOp.APPEND, "compact"),
        "d": (3, "delete"),
    }
    assert _config_changes({"t": ops}, incremental=True) == {
        "t": {"a": "1", "b": None, "c": ("append", "compact"), "d": ("subtract", "delete")}
    }
    assert _config_changes([ConfigResource("topic", "t")], incremental=False) == {"t": {}}
    assert _config_changes({"t": {"a": (AlterConfigOp.SET, "1")}}, incremental=False) == {"t": {"a": "1"}}


@pytest.mark.parametrize(
    ("resources", "error", "match"),
    [
        ("t", TypeError, "expected"),
        (5, TypeError, "expected"),
        (["t"], TypeError, "ConfigResource"),
        ({"t": ["retention.ms"]}, TypeError, "must be a dict"),
        ({"t": {7: "1"}}, TypeError, "named by a string"),
        ({"t": {"a": ("set",)}}, TypeError, "a change is a value"),
        ({"t": {"a": ("multiply", "2")}}, TypeError, "unknown operation"),
        ({"t": {"a": (AlterConfigOp.DELETE, None)}}, errors.InvalidConfigError, "only sets values"),
        ([ConfigResource("cluster", "x", {})], errors.InvalidRequestError, "unknown resource type"),
        ([ConfigResource(8, "x", {})], errors.InvalidRequestError, "unknown resource type"),
        ([ConfigResource("topic", 7, {})], TypeError, "must be a string"),
        ({7: {"retention.ms": "1"}}, TypeError, "must be a string"),
        ({(ConfigResourceType.BROKER, "0"): {}}, TypeError, "must be a string"),
        ([ConfigResource("topic", "t"), ConfigResource("topic", "t")], errors.InvalidRequestError, "named twice"),
        ([ConfigResource("broker", 0, {})], TypeError, "broker resource's name must be a string"),
        ([ConfigResource("broker", "0"), ConfigResource(4, "0")], errors.InvalidRequestError, "broker 0 is named"),
        ([ConfigResource("broker", ""), ConfigResource(4, "")], errors.InvalidRequestError, "cluster default.*twice"),
        (
            [ConfigResource("broker", "0", {"log.cleanup.policy": (AlterConfigOp.SUBTRACT, "compact")})],
            errors.InvalidConfigError,
            "broker 0 log.cleanup.policy: alter_configs .* only sets values",
        ),
        ([ConfigResource("broker", "0", {"a": ("multiply", "2")})], TypeError, "broker 0 a: unknown operation"),
    ],
)
def test_config_changes_refuse_bad_shapes(resources, error, match):
    with pytest.raises(error, match=match):
        _config_changes(resources, incremental="only sets values" not in match)


@pytest.mark.parametrize("name", ["broker-0", "00", "-1", "+1", " 1", "1 ", "1.0", "\u0661", "\u00b2", "0x1"])
def test_a_broker_resource_is_named_by_a_broker_id_or_the_empty_string(name):
    """A broker id as str(id) writes it, or "" (the cluster default): a name the controller
    would read as another broker's, or as none, is refused before anything is sent."""
    with pytest.raises(errors.InvalidRequestError, match="is not a broker id"):
        _config_changes([ConfigResource(ConfigResourceType.BROKER, name, {"log.retention.ms": "1"})], incremental=True)


def test_config_changes_key_broker_resources_apart_from_topics_in_order():
    """Broker resources (by enum, name or code) are keyed (BROKER, name), topics by their
    name, in the order given: a topic named "0" is not broker 0; operations map as topics'."""
    resources = [
        ConfigResource(ConfigResourceType.BROKER, "0", {"log.cleanup.policy": (AlterConfigOp.APPEND, "compact")}),
        ConfigResource("topic", "0", {"retention.ms": "1"}),
        ConfigResource("BROKER", "", {"log.retention.ms": "5", "background.threads": (AlterConfigOp.DELETE, None)}),
        ConfigResource(4, "12"),
    ]
    changes = _config_changes(resources, incremental=True)
    assert list(changes.items()) == [
        ((ConfigResourceType.BROKER, "0"), {"log.cleanup.policy": ("append", "compact")}),
        ("0", {"retention.ms": "1"}),
        ((ConfigResourceType.BROKER, ""), {"log.retention.ms": "5", "background.threads": None}),
        ((ConfigResourceType.BROKER, "12"), {}),
    ]


class _ConfigController:
    """A controller stand-in for the Admin's config calls (``call`` made the identity):
    records each call, answers each resource at once, refusing those in ``refused``
    ({name: code})."""

    def __init__(self, refused: dict[str, int] | None = None):
        self.calls: list[tuple] = []
        self.refused = refused or {}

    def __getattr__(self, method: str):
        def remote(resources, *args, session=None):
            self.calls.append((method, resources, *args))
            answers = {r: (self.refused.get(r, 0), f"{method} refused {r!r}") for r in resources}
            if method.startswith("describe"):
                return {r: (*answer, {"k": ConfigEntry(r, method)}) for r, answer in answers.items()}
            return answers

        return types.SimpleNamespace(remote=remote)


@pytest.fixture
def stand_in(monkeypatch):
    """``stand_in(refused=None)``: an Admin on a stand-in cluster, and its controller."""
    monkeypatch.setattr(admin_base, "call", lambda ref, timeout_s: ref)

    def make(refused: dict[str, int] | None = None) -> tuple[raylog.Admin, _ConfigController]:
        controller = _ConfigController(refused)
        cluster = types.SimpleNamespace(controller=controller, metadata=lambda refresh=False: None)
        cluster.session = lambda: ClientSession(cluster, "PLAINTEXT")
        return raylog.Admin(cluster), controller

    return make


def test_describe_configs_asks_topics_and_brokers_apart_and_keys_them_as_asked(stand_in):
    """Topics go to describe_configs, broker resources to describe_broker_configs (one call
    each, only when named); the result keeps the order asked, a topic by its name, a broker
    resource by (BROKER, name)."""
    admin, controller = stand_in()
    described = admin.describe_configs(["b", ConfigResource("broker", "0"), ConfigResource(4, ""), "a"])
    assert controller.calls == [("describe_configs", ["b", "a"]), ("describe_broker_configs", ["0", ""])]
    assert list(described) == ["b", (ConfigResourceType.BROKER, "0"), (ConfigResourceType.BROKER, ""), "a"]
    assert described[(ConfigResourceType.BROKER, "0")] == {"k": ConfigEntry("0", "describe_broker_configs")}
    assert described["a"] == {"k": ConfigEntry("a", "describe_configs")}
    admin, controller = stand_in()
    assert list(admin.describe_configs([ConfigResource("broker", "")])) == [(ConfigResourceType.BROKER, "")]
    assert controller.calls == [("describe_broker_configs", [""])]


def test_alter_configs_sends_each_kind_to_its_call_and_raises_the_first_refusal_after_all(stand_in):
    """Topic changes go to alter_configs, broker changes to alter_broker_configs, both sent
    with the same incremental flag even when one of them is refused; the first refusal in
    the order given is raised."""
    admin, controller = stand_in(refused={"9": errors.InvalidRequestError.code, "t": 3})
    resources = [
        ConfigResource("broker", "9", {"log.retention.ms": "5"}),
        ConfigResource("topic", "t", {"retention.ms": "5"}),
        ConfigResource("broker", "", {"log.retention.ms": None}),
    ]
    with pytest.raises(errors.InvalidRequestError, match="alter_broker_configs refused '9'"):
        admin.incremental_alter_configs(resources)
    assert controller.calls == [
        ("alter_configs", {"t": {"retention.ms": "5"}}, True),
        ("alter_broker_configs", {"9": {"log.retention.ms": "5"}, "": {"log.retention.ms": None}}, True),
    ]
    admin, controller = stand_in(refused={"t": 3})
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        admin.alter_configs(resources[1:])
    assert [call[0] for call in controller.calls] == ["alter_configs", "alter_broker_configs"]
    assert controller.calls[1][2] is False
    admin, controller = stand_in()
    admin.alter_configs([ConfigResource("broker", "0", {"background.threads": "9"})])
    assert controller.calls == [("alter_broker_configs", {"0": {"background.threads": "9"}}, False)]


def test_group_resources_go_to_the_group_calls_keyed_by_type_and_id(stand_in):
    """Kafka 4's group configs: a group resource is described by describe_group_configs and
    altered by alter_group_configs, keyed (GROUP, group id); "" is no group."""
    admin, controller = stand_in()
    described = admin.describe_configs([ConfigResource("group", "g"), "t"])
    assert controller.calls == [("describe_configs", ["t"]), ("describe_group_configs", ["g"])]
    assert list(described) == [(ConfigResourceType.GROUP, "g"), "t"]
    admin, controller = stand_in()
    admin.incremental_alter_configs([ConfigResource(32, "g", {"consumer.heartbeat.interval.ms": "2000"})])
    assert controller.calls == [("alter_group_configs", {"g": {"consumer.heartbeat.interval.ms": "2000"}}, True)]
    with pytest.raises(errors.InvalidRequestError, match="group"):
        admin.describe_configs([ConfigResource("group", "")])


def _image_with_topic(**config) -> MetadataImage:
    image = MetadataImage()
    image.apply({"type": "cluster", "cluster_id": "c"})
    image.apply({"type": "broker", "broker_id": 0, "node_id": "n", "data_dir": "/d"})
    image.apply(image.create_topic("t", 1, 1, config))
    return image


def _overrides(image: MetadataImage) -> dict[str, str]:
    return {k: e.value for k, e in image.describe_config("t").items() if e.source == "topic"}


def test_a_replacing_alter_resets_what_it_does_not_name_and_an_incremental_one_keeps_it():
    image = _image_with_topic(**{"retention.ms": "1000", "segment.bytes": "2048"})
    image.apply(image.alter_config("t", {"flush.ms": "5"}))
    assert _overrides(image) == {"retention.ms": "1000", "segment.bytes": "2048", "flush.ms": "5"}
    image.apply(image.alter_config("t", {"flush.ms": "6", "segment.bytes": None}, incremental=False))
    assert _overrides(image) == {"flush.ms": "6"}
    image.apply(image.alter_config("t", {"cleanup.policy": ("append", "compact, delete")}))
    assert _overrides(image)["cleanup.policy"] == "delete,compact"
    image.apply(image.alter_config("t", {"cleanup.policy": ("subtract", "delete")}))
    assert _overrides(image)["cleanup.policy"] == "compact"


@pytest.mark.parametrize(
    ("change", "incremental", "match"),
    [
        ({"retention.ms": ("append", "5")}, True, "not a list config"),
        ({"cleanup.policy": ("append", "compact")}, False, "not a change"),
        ({"cleanup.policy": ("subtract", "delete")}, True, "cleanup.policy must be"),
        ({"cleanup.policy": ("append", 5)}, True, "not a change"),
    ],
)
def test_list_operations_are_refused_where_they_do_not_apply(change, incremental, match):
    image = _image_with_topic()
    with pytest.raises(errors.InvalidConfigError, match=match):
        image.alter_config("t", change, incremental=incremental)
    assert _overrides(image) == {}


def test_new_partitions_gives_its_total_count():
    assert _total_count("t", 4) == 4
    assert _total_count("t", NewPartitions(5)) == 5
    with pytest.raises(errors.InvalidReplicaAssignmentError, match="new_assignments"):
        _total_count("t", NewPartitions(5, [[0]]))
    for bad in (True, "3", 2.0, NewPartitions("3")):
        with pytest.raises(TypeError, match="NewPartitions"):
            _total_count("t", bad)


def test_timestamp_types_come_from_each_batchs_attribute():
    """A LogAppendTime batch's records are TIMESTAMP_LOG_APPEND_TIME, the others
    TIMESTAMP_CREATE_TIME, batch by batch within one fetch."""
    create = record_batch.build([b"a", b"b"], now_ms=1)
    stamped = bytearray(record_batch.build([b"c", b"d"], now_ms=1))
    header = record_batch.read_header(stamped)
    stamped = record_batch.with_log_append_time(memoryview(stamped), 0, header, 99)
    batches = bytearray()
    for base, data in ((0, create), (2, stamped), (4, create)):
        view = bytearray(data)
        view[: record_batch.STAMP.size] = record_batch.stamp(record_batch.read_header(view), base, 0)
        batches += view
    ranges = log_append_time_ranges(list(record_batch.iter_headers(bytes(batches))))
    assert ranges == [(2, 3)]
    assert list(timestamp_types([0, 1, 2, 3, 4, 5], ranges)) == [0, 0, 1, 1, 0, 0]
    assert log_append_time_ranges(list(record_batch.iter_headers(create))) is None
    assert log_append_time_ranges(list(record_batch.iter_headers(bytes(stamped)))) is True
    assert list(timestamp_types([7, 8], True)) == [1, 1]
    assert list(timestamp_types([7, 8], None)) == [0, 0]


def test_committed_takes_one_partition_as_kafka_python_does(monkeypatch):
    """``committed(tp)`` answers the offset (or OffsetAndMetadata with metadata=True), or
    None, as kafka-python's; a list of partitions answers raylog's dict."""
    answers = {TopicPartition("t", 0): OffsetAndMetadata(9, "m")}
    monkeypatch.setattr(
        consumer_coordinator,
        "committed_offsets",
        lambda coordinator, wanted: {tp: answers[tp] for tp in wanted if tp in answers},
    )
    consumer = Consumer(NoCluster(), group_id="g")
    assert consumer.committed(TopicPartition("t", 0)) == 9
    assert consumer.committed(TopicPartition("t", 0), metadata=True) == OffsetAndMetadata(9, "m")
    assert consumer.committed(TopicPartition("t", 1)) is None
    assert consumer.committed([("t", 0), ("t", 1)]) == {
        TopicPartition("t", 0): OffsetAndMetadata(9, "m"),
        TopicPartition("t", 1): None,
    }


@pytest.mark.parametrize("client", ["Producer", "Consumer", "Admin"])
@pytest.mark.parametrize("first", ["localhost:9092", ["localhost:9092"], b"clicks"])
def test_kafka_pythons_first_arguments_are_refused_with_a_pointer(client, first):
    """A client given kafka-python's bootstrap servers, or a topic, where raylog takes the
    cluster handle says so with a TypeError, before anything else."""
    with pytest.raises(TypeError, match=rf"{client}'s first argument is the cluster from raylog.connect\(\)"):
        getattr(raylog, client)(first)


def test_commits_carry_the_leader_epoch_of_the_last_record_read_and_a_committed_one_is_checked():
    """KIP-320, as Kafka's consumer: commit() sends with each position the leader epoch of the
    last record read before it (known once every fetched record was handed out), and a
    position taken from a committed offset with an epoch makes the next fetch ask the leader
    where that epoch ends, so that a log truncated under the offset is not skipped."""
    consumer = Consumer(NoCluster(), group_id="g")
    tp = TopicPartition("t", 0)
    state = consumer._subscriptions
    state.assignment = [tp]
    state.positions[tp], state.next_fetch[tp], state.fetched_epochs[tp] = 10, 10, 3
    assert consumer._coordinator._commit_offsets(None) == {tp: OffsetAndMetadata(10, "", 3)}
    state.next_fetch[tp] = 25  # records fetched past the position are not read yet
    assert consumer._coordinator._commit_offsets(None) == {tp: OffsetAndMetadata(10, "", -1)}
    assert offsets_to_commit({tp: raylog.OffsetAndMetadata(4, None, 2)}) == {tp: OffsetAndMetadata(4, "", 2)}

    consumer._fetcher.seek(tp, 8, 0)  # a committed offset's, as a rebalance starts an added partition
    assert state.positions[tp] == 8 and state.fetched_epochs[tp] == 0
    assert state.validated_epochs[tp] != 0  # the fetch loop validates before any epoch's fetch
    consumer._fetcher.seek(tp, 9)  # no epoch committed (-1): nothing to check
    assert tp not in state.fetched_epochs
