"""Frozen, validated configurations.

Each scope has one frozen dataclass. Fields use Python names with units
(``segment_bytes``, ``retention_ms``); :meth:`from_properties` also accepts Kafka's
property names (``segment.bytes``, ``retention.ms``) with string or numeric values, as
users type them in topic configs. Unknown keys are rejected with the list of known ones.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from raylog.errors import InvalidConfigError

#: Kafka writes "never" as Long.MAX_VALUE; so do we, for flush and retention limits.
NEVER = 2**63 - 1
#: Kafka writes "no limit" on a rate as Double.MAX_VALUE.
UNLIMITED_RATE = sys.float_info.max

_KIB = 1024
_MIB = 1024 * _KIB
_GIB = 1024 * _MIB


def _kafka_name(field_name: str) -> str:
    return field_name.replace("_", ".")


def _coerce(value: Any, to: type, key: str) -> Any:
    if to is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise InvalidConfigError(f"{key} must be true or false, got {value!r}")
    if to is float:
        if isinstance(value, bool):
            raise InvalidConfigError(f"{key} must be a number, got {value!r}")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise InvalidConfigError(f"{key} must be a number, got {value!r}") from None
    if to is int:
        if isinstance(value, bool):
            raise InvalidConfigError(f"{key} must be an integer, got {value!r}")
        try:
            return int(value)
        except (TypeError, ValueError):
            raise InvalidConfigError(f"{key} must be an integer, got {value!r}") from None
    return str(value)


class _Config:
    """Shared behaviour of the frozen config dataclasses."""

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any] | None = None, **overrides: Any):
        """Build a config from Kafka property names and/or field names.

        Raises:
            InvalidConfigError: an unknown key, a value of the wrong type or out of range.
        """
        fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        values: dict[str, Any] = {}
        for key, value in {**(properties or {}), **overrides}.items():
            name = cls._field_name(key)
            values[name] = _coerce(value, type(fields[name].default), key)
        return cls(**values)

    @classmethod
    def property_name(cls, key: str) -> str:
        """The Kafka property name of ``key`` (a Kafka property name or a field name).

        Raises:
            InvalidConfigError: an unknown key; the message lists the known ones.
        """
        return _kafka_name(cls._field_name(key))

    @classmethod
    def _field_name(cls, key: str) -> str:
        fields = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        by_kafka_name = {_kafka_name(name): name for name in fields}
        name = key if key in fields else by_kafka_name.get(key)
        if name is None:
            known = ", ".join(sorted(by_kafka_name))
            raise InvalidConfigError(f"unknown config {key!r} for {cls.__name__}; known: {known}")
        return name

    def to_properties(self) -> dict[str, str]:
        """The config as Kafka property names with string values (what describe shows)."""
        out = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            out[_kafka_name(f.name)] = str(value).lower() if isinstance(value, bool) else str(value)
        return out

    def _require(self, condition: bool, message: str) -> None:
        if not condition:
            raise InvalidConfigError(f"{type(self).__name__}: {message}")


@dataclass(frozen=True)
class LogConfig(_Config):
    """How one partition's log stores, indexes, flushes and deletes its data.

    Defaults follow Kafka's, except ``max_message_bytes``: raylog's calls carry large
    batches (a Ray call costs ~1 ms, so throughput needs MiB-sized batches), so the largest
    accepted batch is 8 MiB rather than Kafka's 1 MiB.
    """

    segment_bytes: int = _GIB
    segment_ms: int = 7 * 24 * 3600 * 1000
    segment_index_bytes: int = 10 * _MIB
    index_interval_bytes: int = 4096
    flush_messages: int = NEVER
    flush_ms: int = NEVER
    retention_ms: int = 7 * 24 * 3600 * 1000  # -1: keep forever
    retention_bytes: int = -1  # -1: no size limit
    max_message_bytes: int = 8 * _MIB
    message_timestamp_type: str = "CreateTime"
    #: "delete" (retention by time and size), "compact" (keep the latest record per key,
    #: see :mod:`raylog.storage.cleaner`), or both ("compact,delete").
    cleanup_policy: str = "delete"
    #: Clean when dirty bytes / cleanable bytes reach this (or max.compaction.lag.ms passed).
    min_cleanable_dirty_ratio: float = 0.5
    #: How long a tombstone (a keyed record with a null value) survives after the cleaner
    #: first cleaned the range holding it, so consumers behind by less still see the delete.
    delete_retention_ms: int = 24 * 3600 * 1000
    #: Records are not compacted until their segment's newest record is this old.
    min_compaction_lag_ms: int = 0
    #: Dirty records older than this are compacted even below the dirty ratio.
    max_compaction_lag_ms: int = NEVER
    #: The cleaner's reads and writes, per replica (a broker setting in Kafka, where it
    #: bounds all cleaner threads together; per topic here, like replica.lag.time.max.ms).
    log_cleaner_io_max_bytes_per_second: float = UNLIMITED_RATE

    def __post_init__(self) -> None:
        self._require(self.segment_bytes >= 1024, f"segment.bytes must be >= 1024, got {self.segment_bytes}")
        self._require(self.segment_bytes < 2**31, "segment.bytes must fit in 31 bits (index positions)")
        self._require(self.segment_ms >= 1, f"segment.ms must be >= 1, got {self.segment_ms}")
        self._require(self.segment_index_bytes >= 64, "segment.index.bytes must be >= 64")
        self._require(self.index_interval_bytes >= 0, "index.interval.bytes must be >= 0")
        self._require(self.flush_messages >= 1, "flush.messages must be >= 1")
        self._require(self.flush_ms >= 0, "flush.ms must be >= 0")
        self._require(self.retention_ms >= -1, "retention.ms must be -1 (forever) or >= 0")
        self._require(self.retention_bytes >= -1, "retention.bytes must be -1 (no limit) or >= 0")
        self._require(self.max_message_bytes >= 64, "max.message.bytes must be >= 64")
        self._require(
            self.message_timestamp_type in ("CreateTime", "LogAppendTime"),
            f"message.timestamp.type must be CreateTime or LogAppendTime, got {self.message_timestamp_type!r}",
        )
        policies = [p.strip() for p in self.cleanup_policy.split(",")]
        self._require(
            len(set(policies)) == len(policies) and set(policies) <= {"delete", "compact"},
            f"cleanup.policy must be delete, compact or compact,delete, got {self.cleanup_policy!r}",
        )
        self._require(
            0.0 <= self.min_cleanable_dirty_ratio <= 1.0,
            f"min.cleanable.dirty.ratio must be in [0, 1], got {self.min_cleanable_dirty_ratio}",
        )
        self._require(self.delete_retention_ms >= 0, "delete.retention.ms must be >= 0")
        self._require(self.min_compaction_lag_ms >= 0, "min.compaction.lag.ms must be >= 0")
        self._require(self.max_compaction_lag_ms >= 1, "max.compaction.lag.ms must be >= 1")
        self._require(
            self.log_cleaner_io_max_bytes_per_second > 0,
            f"log.cleaner.io.max.bytes.per.second must be > 0, got {self.log_cleaner_io_max_bytes_per_second}",
        )
        self._require(
            self.min_compaction_lag_ms <= self.max_compaction_lag_ms,
            f"min.compaction.lag.ms {self.min_compaction_lag_ms} is above max.compaction.lag.ms "
            f"{self.max_compaction_lag_ms}",
        )

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def compact(self) -> bool:
        """Whether the cleaner compacts this log (cleanup.policy includes compact)."""
        return "compact" in (p.strip() for p in self.cleanup_policy.split(","))

    @property
    def delete(self) -> bool:
        """Whether time and size retention delete segments (cleanup.policy includes delete)."""
        return "delete" in (p.strip() for p in self.cleanup_policy.split(","))


@dataclass(frozen=True)
class TopicConfig(LogConfig):
    """A topic's configuration: its log's plus the replication settings Kafka keeps per topic."""

    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    #: A follower that has not caught up for this long leaves the ISR (a broker setting in
    #: Kafka; per topic here so that tests and latency-sensitive topics can lower it).
    replica_lag_time_max_ms: int = 30_000
    #: How long the leader holds a follower's fetch that finds nothing new (a broker setting
    #: in Kafka, per topic here): an idle follower makes one call per this many ms, so a
    #: node of many idle followers spends less with a longer wait. Data and new leaders do
    #: not wait for it. Below ``replica.lag.time.max.ms``, as Kafka requires.
    replica_fetch_wait_max_ms: int = 500
    #: A producer id whose last batch is this old is forgotten by the partition (a broker
    #: setting in Kafka, per topic here like replica.lag.time.max.ms): its next batch is
    #: then taken as its first (see :mod:`raylog.coordination.producer_state`).
    producer_id_expiration_ms: int = 24 * 3600 * 1000

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require(self.min_insync_replicas >= 1, "min.insync.replicas must be >= 1")
        self._require(self.replica_lag_time_max_ms >= 1, "replica.lag.time.max.ms must be >= 1")
        self._require(
            0 <= self.replica_fetch_wait_max_ms < self.replica_lag_time_max_ms,
            f"replica.fetch.wait.max.ms must be >= 0 and below replica.lag.time.max.ms "
            f"({self.replica_lag_time_max_ms}), or an idle follower leaves the ISR; "
            f"got {self.replica_fetch_wait_max_ms}",
        )
        self._require(self.producer_id_expiration_ms >= 1, "producer.id.expiration.ms must be >= 1")

    def log_config(self) -> LogConfig:
        """The part of this config the storage engine uses."""
        names = {f.name for f in dataclasses.fields(LogConfig)}
        return LogConfig(**{k: v for k, v in dataclasses.asdict(self).items() if k in names})


@dataclass(frozen=True)
class ControllerConfig(_Config):
    """The controller's cluster-wide settings (Kafka's broker settings of the same names)."""

    #: How often Ray's node table is read to notice dead and returning brokers.
    node_check_interval_ms: int = 500
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_per_broker_percentage: int = 10
    leader_imbalance_check_interval_seconds: int = 30
    #: ``__consumer_offsets`` (created on the first group look-up): few partitions, since
    #: each replica is an actor process (Kafka's default of 50 would be 150 processes).
    offsets_topic_num_partitions: int = 3
    #: Capped at the number of live brokers when the topic is created.
    offsets_topic_replication_factor: int = 3
    offsets_topic_segment_bytes: int = 100 * 1024 * 1024
    #: ``__transaction_state`` (created on the first transactional producer), as above.
    transaction_state_log_num_partitions: int = 3
    transaction_state_log_replication_factor: int = 3
    transaction_state_log_segment_bytes: int = 100 * 1024 * 1024

    def __post_init__(self) -> None:
        self._require(self.node_check_interval_ms >= 10, "node.check.interval.ms must be >= 10")
        self._require(self.offsets_topic_num_partitions >= 1, "offsets.topic.num.partitions must be >= 1")
        self._require(self.offsets_topic_replication_factor >= 1, "offsets.topic.replication.factor must be >= 1")
        self._require(self.offsets_topic_segment_bytes >= 1024, "offsets.topic.segment.bytes must be >= 1024")
        self._require(
            self.transaction_state_log_num_partitions >= 1, "transaction.state.log.num.partitions must be >= 1"
        )
        self._require(
            self.transaction_state_log_replication_factor >= 1,
            "transaction.state.log.replication.factor must be >= 1",
        )
        self._require(
            self.transaction_state_log_segment_bytes >= 1024, "transaction.state.log.segment.bytes must be >= 1024"
        )
        self._require(
            0 <= self.leader_imbalance_per_broker_percentage <= 100,
            "leader.imbalance.per.broker.percentage must be in [0, 100]",
        )
        self._require(
            self.leader_imbalance_check_interval_seconds >= 1, "leader.imbalance.check.interval.seconds must be >= 1"
        )
