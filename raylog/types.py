"""Small value types shared by clients, actors and coordination (no behaviour)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class Record(NamedTuple):
    """A consumed record. ``headers`` is a list of ``(str, bytes | None)`` pairs."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: Any
    value: Any
    headers: list


class RecordMetadata(NamedTuple):
    """Where a produced record landed (offset -1 when acks=0)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp_ms: int


class OffsetAndMetadata(NamedTuple):
    """A committed offset: the next record the group will read, and free-form metadata."""

    offset: int
    metadata: str = ""


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
    """One topic config property as described: its value and where it comes from,
    ``"topic"`` (set on the topic) or ``"default"``."""

    value: str
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
