"""Small value types shared by clients, actors and coordination (no behaviour)."""

from __future__ import annotations

import enum
import operator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from raylog.common.requests import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
)
from raylog.errors import InvalidConfigError


class TopicPartition(NamedTuple):
    topic: str
    partition: int


#: ``Record.timestamp_type``: the producer's timestamp (Kafka's CreateTime)...
TIMESTAMP_CREATE_TIME = 0
#: ... or the leader's clock when it appended the batch (``message.timestamp.type`` LogAppendTime).
TIMESTAMP_LOG_APPEND_TIME = 1


#: ``timestamp_ms``, raylog's earlier name of ``timestamp``, kept on every type that has one.
_TIMESTAMP_MS = property(operator.attrgetter("timestamp"), doc="The same as ``timestamp`` (raylog's earlier name).")


class Record(NamedTuple):
    """A consumed record (kafka-python's ConsumerRecord). ``headers`` is a tuple of
    ``(str, bytes | None)`` pairs (``()`` when none; a sequence, as aiokafka's, that
    :meth:`Producer.send` takes back); ``timestamp`` is in ms since the epoch, and
    ``timestamp_type`` says whose clock it is: :data:`TIMESTAMP_CREATE_TIME` (0, the
    producer's) or :data:`TIMESTAMP_LOG_APPEND_TIME` (1, the leader's), as in Kafka.

    A record is immutable, headers included, and holds no container of its own: a poll makes
    one object per record for Python's cycle collector to track, not two (with a list of
    headers per record, a Ray client's heap had a full collection, ~80 ms, once per ~110,000
    records polled)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: Any
    value: Any
    headers: tuple
    timestamp_type: int = TIMESTAMP_CREATE_TIME

    timestamp_ms = _TIMESTAMP_MS


class RecordMetadata(NamedTuple):
    """Where a produced record landed (offset -1 when acks=0), as kafka-python's: its
    ``timestamp`` (the leader's append time on a LogAppendTime topic, else the record's),
    and the bytes of its key, value and headers as sent (-1 for none)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    serialized_key_size: int = -1
    serialized_value_size: int = -1
    serialized_header_size: int = -1

    timestamp_ms = _TIMESTAMP_MS

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


class OffsetAndTimestamp(NamedTuple):
    """An offset found by time (``Consumer.offsets_for_times``) and its record's timestamp (ms)."""

    offset: int
    timestamp: int

    timestamp_ms = _TIMESTAMP_MS


@dataclass(frozen=True)
class OffsetSpec:
    """What ``Admin.list_offsets`` looks up in a partition (Kafka's OffsetSpec): make one with
    :meth:`earliest`, :meth:`latest`, :meth:`max_timestamp`, :meth:`earliest_local`,
    :meth:`latest_tiered` or :meth:`for_timestamp`. ``timestamp`` is what ListOffsets carries:
    a time in ms, or Kafka's negative sentinel."""

    timestamp: int

    @classmethod
    def earliest(cls) -> OffsetSpec:
        """The log start offset."""
        return cls(EARLIEST_TIMESTAMP)

    @classmethod
    def latest(cls) -> OffsetSpec:
        """The high watermark (the last stable offset, read_committed)."""
        return cls(LATEST_TIMESTAMP)

    @classmethod
    def max_timestamp(cls) -> OffsetSpec:
        """The first record with the partition's largest timestamp, and that timestamp (KIP-734)."""
        return cls(MAX_TIMESTAMP)

    @classmethod
    def earliest_local(cls) -> OffsetSpec:
        """The first offset in the leader's local log (the log start without a remote tier)."""
        return cls(EARLIEST_LOCAL_TIMESTAMP)

    @classmethod
    def latest_tiered(cls) -> OffsetSpec:
        """The highest offset in the remote tier (-1 without one, KIP-1005)."""
        return cls(LATEST_TIERED_TIMESTAMP)

    @classmethod
    def for_timestamp(cls, timestamp_ms: int) -> OffsetSpec:
        """The first record with a timestamp at or after ``timestamp_ms``, and its timestamp.

        Raises:
            InvalidConfigError: a negative time (the negative values are the sentinels above).
        """
        if isinstance(timestamp_ms, bool) or not isinstance(timestamp_ms, int) or timestamp_ms < 0:
            raise InvalidConfigError(f"timestamp_ms must be a non-negative integer, got {timestamp_ms!r}")
        return cls(timestamp_ms)


class OffsetAndMetadata(NamedTuple):
    """A committed offset: the next record the group will read, free-form metadata, and the
    leader epoch of the last record read before it (-1 if unknown), kept with the offset as
    Kafka keeps it (KIP-320) so that a consumer starting from it can find a log truncated
    under it (kafka-python's ``OffsetAndMetadata`` has the same three fields)."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1


@dataclass(frozen=True)
class NewTopic:
    """A topic to create.

    Args:
        name: legal Kafka topic name (``[a-zA-Z0-9._-]``, at most 249 characters).
        num_partitions: at least 1.
        replication_factor: 1 up to the number of brokers.
        config: topic configs by Kafka name, e.g. ``{"retention.ms": "60000"}``.
    """

    name: str
    num_partitions: int = 1
    replication_factor: int = 1
    config: dict[str, Any] = field(default_factory=dict)
    #: kafka-python's name of ``config`` (give either; both must then agree).
    topic_configs: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.topic_configs is not None and self.topic_configs is not self.config:
            if self.config and dict(self.config) != dict(self.topic_configs):
                raise InvalidConfigError(f"topic {self.name!r}: config and topic_configs differ; give one of them")
            object.__setattr__(self, "config", dict(self.topic_configs))
        object.__setattr__(self, "topic_configs", self.config)


@dataclass(frozen=True)
class NewPartitions:
    """kafka-python's argument of ``create_partitions``: grow a topic to ``total_count``
    partitions. raylog places the new partitions itself (as a new topic's), so
    ``new_assignments`` must be None (``Admin.alter_partition_reassignments`` moves them
    afterwards)."""

    total_count: int
    new_assignments: list[list[int]] | None = None


class ConfigResourceType(enum.IntEnum):
    """What a :class:`ConfigResource` names (Kafka's codes): a topic, or a broker resource
    holding Kafka's dynamic broker configs, named by a broker id (``"0"``) or ``""`` (the
    cluster default, every broker). A broker config named after a topic property
    (``log.retention.ms``) is the default of topics that do not set it; raylog's static
    settings, given to ``raylog.connect(config=...)`` when the cluster starts, are read-only
    (see :mod:`raylog.coordination.broker_configs`). A group resource, named by its group id,
    holds Kafka 4's group configs (``consumer.session.timeout.ms``,
    ``consumer.heartbeat.interval.ms``) for its members of the consumer protocol (see
    :mod:`raylog.coordination.group_configs`)."""

    TOPIC = 2
    BROKER = 4
    GROUP = 32


class AlterConfigOp(enum.IntEnum):
    """How ``Admin.incremental_alter_configs`` changes a config given as ``(op, value)``:
    set it, delete its override (back to the default), or append to / subtract from a list
    config such as a topic's ``cleanup.policy`` or a broker's ``log.cleanup.policy``
    (Kafka's codes)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass
class ConfigResource:
    """A resource and its configs, as kafka-python's and confluent-kafka's admin clients
    take them: ``ConfigResource(ConfigResourceType.TOPIC, "clicks", {"retention.ms":
    "3600000"})``, ``ConfigResource(ConfigResourceType.BROKER, "", {"log.retention.ms":
    "3600000"})`` (a broker id, or "" for the cluster default), ``ConfigResource("group",
    "orders", {"consumer.heartbeat.interval.ms": "2000"})``. ``resource_type`` may also be
    its name (``"topic"``, ``"broker"``, ``"group"``) or code."""

    resource_type: ConfigResourceType | str | int
    name: str
    configs: dict[str, Any] | None = None


@dataclass(frozen=True)
class PartitionInfo:
    """One partition as metadata describes it (broker ids; -1 for no leader)."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    partition_epoch: int = 0  # bumped by every change of leader, ISR or replicas


@dataclass(frozen=True)
class TopicDescription:
    name: str
    topic_id: str
    partitions: tuple[PartitionInfo, ...]
    config: dict[str, str]


class ConfigEntry(NamedTuple):
    """One config as described: its value and where it comes from, ``"topic"`` (set on the
    topic), ``"dynamic_broker"`` (set for the broker), ``"dynamic_default_broker"`` (set on
    the cluster default), ``"group"`` (set on the group), ``"static_broker"`` (a setting given
    when the cluster started) or ``"default"``. A secret's value (``ssl.key.password``) is
    None, as Kafka describes it."""

    value: str | None
    source: str


@dataclass(frozen=True)
class BrokerInfo:
    """A broker: a stable id, the Ray node it runs on now, and its data directory."""

    broker_id: int
    node_id: str
    data_dir: str


@dataclass(frozen=True)
class MemberDescription:
    """A consumer-group member and the partitions it owns in the current generation."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True)
class PartitionLag:
    """A group's progress on one partition: committed offset (None if none), the log end
    offset (high watermark), the lag between them, and the member that owns it."""

    committed: int | None
    log_end_offset: int
    lag: int | None
    member_id: str | None


@dataclass(frozen=True)
class ProducerState:
    """A producer as one partition's leader knows it (Kafka's DescribeProducers):
    ``current_transaction_start_offset`` is the first offset of its transaction open there
    (-1: none), ``last_timestamp`` when the leader last appended its batch (ms)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int  # -1 when its epoch has no batch there yet
    last_timestamp: int
    current_transaction_start_offset: int


@dataclass(frozen=True)
class TransactionDescription:
    transactional_id: str
    state: str  # Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit or CompleteAbort
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    partitions: tuple[TopicPartition, ...]  # of the open transaction
    start_ms: int  # when the open transaction began (-1: none open)
    coordinator_partition: int  # the __transaction_state partition whose leader coordinates it


@dataclass(frozen=True)
class ConsumerGroupDescription:
    group_id: str
    state: str  # Empty, PreparingRebalance, Stable or Dead
    generation: int
    protocol: str  # the assignor in use
    coordinator_partition: int  # the __consumer_offsets partition whose leader coordinates it
    members: tuple[MemberDescription, ...]
    partitions: dict[TopicPartition, PartitionLag]
