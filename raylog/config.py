"""Frozen, validated configurations.

Each scope has one frozen dataclass. Fields use Python names with units
(``segment_bytes``, ``retention_ms``); :meth:`from_properties` also accepts Kafka's
property names (``segment.bytes``, ``retention.ms``) with string or numeric values, as
users type them in topic configs. Unknown keys are rejected with the list of known ones.

Every field is declared with :func:`setting`: its default, a description and the values it
accepts (:class:`Valid`). The checks every config makes and the configuration reference
(``docs/configuration.md``, written by ``python -m raylog.docs_gen``) both come from there,
so what is documented is what is enforced.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import sys
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from raylog.errors import InvalidConfigError
from raylog.principals import PrincipalMapper
from raylog.protocol import MAX_REQUEST_BYTES

#: Kafka's default ``listener.security.protocol.map``: each security protocol is also a name.
DEFAULT_PROTOCOL_MAP = "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
#: The SASL mechanisms a listener can accept.
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

#: Kafka writes "never" as Long.MAX_VALUE; so do we, for flush and retention limits.
NEVER = 2**63 - 1
#: Kafka writes "no limit" on a rate as Double.MAX_VALUE.
UNLIMITED_RATE = sys.float_info.max

_KIB = 1024
_MIB = 1024 * _KIB
_GIB = 1024 * _MIB


#: The most of a value an error message quotes: messages reach Kafka clients in strings of
#: at most 32,767 bytes (an int16 length), and never echo unbounded input, as Kafka's.
QUOTED_CHARS_MAX = 100


def _quoted(value: Any) -> str:
    """``repr(value)``, cut to :data:`QUOTED_CHARS_MAX` characters (saying how long it was)."""
    text = repr(value)
    if len(text) <= QUOTED_CHARS_MAX:
        return text
    return f"{text[:QUOTED_CHARS_MAX]}... ({len(text)} characters)"


def _kafka_name(field_name: str) -> str:
    return field_name.replace("_", ".")


def _coerce(value: Any, to: type, key: str) -> Any:
    if to is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise InvalidConfigError(f"{key} must be true or false, got {_quoted(value)}")
    if to is float:
        if isinstance(value, bool):
            raise InvalidConfigError(f"{key} must be a number, got {_quoted(value)}")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise InvalidConfigError(f"{key} must be a number, got {_quoted(value)}") from None
    if to is int:
        if isinstance(value, bool):
            raise InvalidConfigError(f"{key} must be an integer, got {_quoted(value)}")
        try:
            return int(value)
        except (TypeError, ValueError):
            raise InvalidConfigError(f"{key} must be an integer, got {_quoted(value)}") from None
    return value if isinstance(value, to) else str(value)


@dataclass(frozen=True)
class Valid:
    """The values a setting accepts: bounds, choices and the meaning of special values.

    Bounds may name another field of the same config (``below``, ``at_most``), for rules
    between two settings. An empty :class:`Valid` accepts every value of the field's type.
    """

    #: Inclusive lower bound.
    minimum: float | None = None
    #: Inclusive upper bound.
    maximum: float | None = None
    #: Exclusive lower bound.
    above: float | None = None
    #: Exclusive upper bound: the value of this other field.
    below: str | None = None
    #: Inclusive upper bound: the value of this other field.
    at_most: str | None = None
    #: Inclusive lower bound: the value of this other field.
    at_least: str | None = None
    #: The only values allowed.
    choices: tuple[str, ...] | None = None
    #: A comma-separated list of these words, each at most once.
    list_of: tuple[str, ...] | None = None
    #: ``(regular expression the whole value matches, the values in words)``.
    pattern: tuple[str, str] | None = None
    #: ``(value, meaning)`` of values that mean something special (-1: no limit).
    meanings: tuple[tuple[Any, str], ...] = ()

    def problem(self, value: Any, config: Any) -> str | None:
        """What is wrong with ``value`` in ``config`` (a sentence without the setting's name), or None."""
        if self.choices is not None and value not in self.choices:
            return f"must be one of {', '.join(self.choices)}, got {_quoted(value)}"
        if self.pattern is not None and not re.fullmatch(self.pattern[0], value):
            return f"must be {self.pattern[1]}, got {_quoted(value)}"
        if self.list_of is not None:
            words = [w.strip() for w in value.split(",")]
            if len(set(words)) != len(words) or not set(words) <= set(self.list_of):
                return f"must be a comma-separated list of {', '.join(self.list_of)} (each once), got {_quoted(value)}"
        low_ok = (self.minimum is None or value >= self.minimum) and (self.above is None or value > self.above)
        if self.at_least is not None:
            low_ok = low_ok and value >= getattr(config, self.at_least)
        high_ok = (self.maximum is None or value <= self.maximum) and (
            self.below is None or value < getattr(config, self.below)
        )
        if self.at_most is not None:
            high_ok = high_ok and value <= getattr(config, self.at_most)
        if low_ok and high_ok:
            return None
        bound = self.describe(lambda name: f"{_kafka_name(name)} ({getattr(config, name)})")
        special = "".join(f" ({v}: {text})" for v, text in self.meanings)
        return f"must be {bound}{special}, got {_quoted(value)}"

    def describe(self, other: Callable[[str], str] | None = None) -> str:
        """The accepted values in words (``other`` renders a bound that is another field)."""
        other = other or _kafka_name
        if self.choices is not None:
            return "one of " + ", ".join(self.choices)
        if self.pattern is not None:
            return self.pattern[1]
        if self.list_of is not None:
            return "a comma-separated list of " + ", ".join(self.list_of)
        parts = []
        if self.minimum is not None and self.maximum is not None:
            parts.append(f"in [{_number(self.minimum)}, {_number(self.maximum)}]")
        elif self.minimum is not None:
            parts.append(f">= {_number(self.minimum)}")
        elif self.maximum is not None:
            parts.append(f"<= {_number(self.maximum)}")
        if self.above is not None:
            parts.append(f"> {_number(self.above)}")
        if self.below is not None:
            parts.append(f"below {other(self.below)}")
        if self.at_least is not None:
            parts.append(f"at least {other(self.at_least)}")
        if self.at_most is not None:
            parts.append(f"at most {other(self.at_most)}")
        return " and ".join(parts)

    def meaning(self, value: Any) -> str | None:
        """What a special ``value`` means (``-1``: "no limit"), or None."""
        return next((text for special, text in self.meanings if special == value), None)


def _number(x: float) -> str:
    return str(int(x)) if isinstance(x, float) and x.is_integer() else str(x)


def setting(default: Any, doc: str, **valid: Any) -> Any:
    """A config field: its ``default``, what it does (``doc``, sentences) and the values it
    accepts (the keywords of :class:`Valid`)."""
    return dataclasses.field(default=default, metadata={"doc": doc, "valid": Valid(**valid)})


#: The special values of limits that Kafka writes as Long.MAX_VALUE.
_NEVER = ((NEVER, "never"),)


class _Config:
    """Shared behaviour of the frozen config dataclasses."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            problem = f.metadata["valid"].problem(getattr(self, f.name), self)
            self._require(problem is None, f"{_kafka_name(f.name)} {problem}")

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
            raise InvalidConfigError(f"unknown config {_quoted(key)} for {cls.__name__}; known: {known}")
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


_DAY_MS = 24 * 3600 * 1000


def local_retention_problem(unit: str, whole: int, local: int) -> str | None:
    """What is wrong with ``local.retention.<unit>`` = ``local`` beside ``retention.<unit>`` =
    ``whole`` on a tiered topic (Kafka's checks: -2 is "as the whole log's"; -1, no limit,
    only when the whole log has none; never more than the whole log's limit), or None."""
    if whole != -1 and local == -1:
        return f"local.retention.{unit} cannot be -1 (no limit) when retention.{unit} is {whole}"
    if whole != -1 and local > whole:
        return f"local.retention.{unit} {local} is more than retention.{unit} {whole}"
    return None


def without_secret(text: str, uri: str) -> str:
    """``text`` with the password of ``uri``'s user info (``s3://key:secret@bucket``) starred out."""
    try:
        secret = urllib.parse.urlsplit(uri).password
    except ValueError:
        secret = None
    return text.replace(secret, "***") if secret else text


def check_remote_storage(
    config: Mapping[str, str], previous: Mapping[str, str] | None, remote_log_storage_uri: str
) -> None:
    """Kafka's checks of a topic's ``remote.storage.enable`` (``config``, its properties as
    strings) against the cluster and the topic's ``previous`` config (None: a new topic).

    Raises:
        InvalidConfigError: tiered storage asked for in a cluster without a remote store, or
            turned off on a topic that had it.
    """
    enabled = config.get("remote.storage.enable") == "true"
    if enabled and not remote_log_storage_uri:
        raise InvalidConfigError(
            "remote.storage.enable: tiered storage is off in this cluster (remote.log.storage.uri "
            "is not set), so no topic can keep its log in a remote store"
        )
    if not enabled and previous is not None and previous.get("remote.storage.enable") == "true":
        raise InvalidConfigError(
            "remote.storage.enable cannot be turned off once on: the remote store holds part of "
            "the topic's log (delete the topic to drop it)"
        )


@dataclass(frozen=True)
class LogConfig(_Config):
    """How one partition's log stores, indexes, flushes and deletes its data.

    Defaults follow Kafka's, except ``max_message_bytes``: raylog's calls carry large
    batches (a Ray call costs ~1 ms, so throughput needs MiB-sized batches), so the largest
    accepted batch is 8 MiB rather than Kafka's 1 MiB.
    """

    segment_bytes: int = setting(
        _GIB,
        "The active segment rolls (a new segment file starts) before it would grow past this "
        "size. Below 2 GiB: index entries hold 32-bit positions.",
        minimum=1024,
        maximum=2**31 - 1,
    )
    segment_ms: int = setting(
        7 * _DAY_MS,
        "The active segment rolls when it has been open this long, by record time (its first "
        "batch's timestamp against the incoming batch's), so that retention and compaction, "
        "which never touch the active segment, reach its data.",
        minimum=1,
    )
    segment_index_bytes: int = setting(
        10 * _MIB,
        "Size of each segment's offset and time index files; a segment whose index is full rolls.",
        minimum=64,
    )
    index_interval_bytes: int = setting(
        4096,
        "Bytes of batches between two entries of the sparse offset index: smaller means "
        "larger indexes and shorter scans for a read at an offset.",
        minimum=0,
    )
    flush_messages: int = setting(
        NEVER,
        "Force an fsync of the log after this many records. Durability comes from "
        "replication and the page cache, as in Kafka, so the default never forces one.",
        minimum=1,
        meanings=_NEVER,
    )
    flush_ms: int = setting(
        NEVER,
        "Force an fsync of the log when this long has passed since the last one (checked at "
        "appends and housekeeping rounds).",
        minimum=0,
        meanings=_NEVER,
    )
    retention_ms: int = setting(
        7 * _DAY_MS,
        "Delete a segment (never the active one, never above the high watermark) once its "
        "newest record is older than this (cleanup.policy delete).",
        minimum=-1,
        meanings=((-1, "keep forever"),),
    )
    retention_bytes: int = setting(
        -1,
        "Delete the oldest segments while the rest of the partition's log still holds more "
        "than this many bytes (cleanup.policy delete).",
        minimum=-1,
        meanings=((-1, "no size limit"),),
    )
    remote_storage_enable: bool = setting(
        False,
        "Tiered storage (Kafka's KIP-405): the leader copies each closed segment below the last "
        "stable offset to the cluster's remote store (remote.log.storage.uri); local.retention.ms "
        "and local.retention.bytes then bound what stays on the brokers' disks (a segment leaves "
        "only once copied), retention.ms and retention.bytes the whole log, local and remote, and "
        "reads below the local log start are served from the store. Refused on a compacted topic "
        "and in a cluster without a remote store; once on, it cannot be turned off (as in Kafka "
        "before 3.9): delete the topic instead.",
    )
    remote_storage_history_enable: bool = setting(
        False,
        "With remote.storage.enable: each segment copied to the remote store is also written "
        "there as a Parquet file in the columns of Spark's Kafka source (key, value, topic, "
        "partition, offset, timestamp, timestampType, headers; records of aborted transactions "
        "left out), under <store>/history/<topic>-<topic id>/partition=<p>/ with a manifest of "
        "offset ranges, and deleted with it. raylog.read_topic and raylog_spark read the history "
        "from those files in their own tasks and only the rest from the brokers. raylog's own "
        "setting (Kafka has none): the nearest are Redpanda's Iceberg topics and Confluent's "
        "Tableflow.",
    )
    local_retention_ms: int = setting(
        -2,
        "With remote.storage.enable: a segment already copied to the remote store is deleted from "
        "the brokers' disks once its newest record is older than this (never the active segment). "
        "At most retention.ms.",
        minimum=-2,
        meanings=((-2, "as retention.ms"), (-1, "keep forever, only with retention.ms -1")),
    )
    local_retention_bytes: int = setting(
        -2,
        "With remote.storage.enable: segments already copied to the remote store are deleted from "
        "the brokers' disks, oldest first, while the rest of the local log still holds more than "
        "this many bytes. At most retention.bytes.",
        minimum=-2,
        meanings=((-2, "as retention.bytes"), (-1, "no size limit, only with retention.bytes -1")),
    )
    max_message_bytes: int = setting(
        8 * _MIB,
        "The largest record batch a leader accepts (RecordTooLargeError above it); a producer "
        "fails a single record above it at send. Kafka's default is 1 MiB; raylog moves "
        "MiB-sized batches because a Ray call costs about a millisecond.",
        minimum=64,
    )
    message_timestamp_type: str = setting(
        "CreateTime",
        "Which time records carry: the producer's (CreateTime) or the leader's clock when it "
        "appends the batch (LogAppendTime).",
        choices=("CreateTime", "LogAppendTime"),
    )
    message_format_version: str = setting(
        "3.0-IV1",
        "Kafka's deprecated record format version, accepted for the clients and tools that "
        "still set it and then ignored, as Kafka 3.x ignores it (from "
        "inter.broker.protocol.version 3.0 on): raylog always writes and serves the v2 batch "
        "format of Kafka 0.11 and later.",
        pattern=(r"(0\.(8|9|10|11)\.\d+|[1-3]\.\d+)(\.\d+)*(-IV\d+)?", "a Kafka version (0.8.0 to 3.x, e.g. 2.8-IV1)"),
    )
    compression_type: str = setting(
        "producer",
        "The codec a leader stores batches with: the producer's own (producer), or it "
        "recompresses every batch that arrives with another (uncompressed, gzip, snappy, lz4, "
        "zstd), as Kafka's broker does; a batch that grows past max.message.bytes by it is "
        "refused (RecordTooLargeError).",
        choices=("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
    )
    cleanup_policy: str = setting(
        "delete",
        '"delete" (retention by time and size), "compact" (keep the latest record per key, '
        'see raylog.storage.cleaner), or both ("compact,delete"). A compacted topic refuses '
        "records without a key.",
        list_of=("delete", "compact"),
    )
    min_cleanable_dirty_ratio: float = setting(
        0.5,
        "Clean when dirty bytes / cleanable bytes reach this (or max.compaction.lag.ms passed).",
        minimum=0.0,
        maximum=1.0,
    )
    delete_retention_ms: int = setting(
        _DAY_MS,
        "How long a tombstone (a keyed record with a null value) survives after the cleaner "
        "first cleaned the range holding it, so consumers behind by less still see the delete.",
        minimum=0,
    )
    file_delete_delay_ms: int = setting(
        0,
        "How long the files of a segment that retention, compaction, DeleteRecords or a "
        "truncation removed stay on disk, renamed <name>.deleted, before they are unlinked "
        "(a restart unlinks them at once). Kafka waits 60 s so that reads under way finish; "
        "raylog's readers hold a segment's open files, which keep reading after an unlink, so "
        "it deletes at once unless told to wait.",
        minimum=0,
    )
    min_compaction_lag_ms: int = setting(
        0,
        "Records are not compacted until their segment's newest record is this old.",
        minimum=0,
        at_most="max_compaction_lag_ms",
    )
    max_compaction_lag_ms: int = setting(
        NEVER,
        "Dirty records older than this are compacted even below the dirty ratio (a compacted "
        "log's active segment also rolls at this age).",
        minimum=1,
        meanings=_NEVER,
    )
    log_cleaner_io_max_bytes_per_second: float = setting(
        UNLIMITED_RATE,
        "The cleaner's reads and writes, per replica (a broker setting in Kafka, where it "
        "bounds all cleaner threads together; per topic here, like replica.lag.time.max.ms).",
        above=0,
        meanings=((UNLIMITED_RATE, "no limit"),),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require(
            self.remote_storage_enable or not self.remote_storage_history_enable,
            "remote.storage.history.enable needs remote.storage.enable: the history is written as "
            "segments are copied to the remote store",
        )
        if self.remote_storage_enable:
            self._require(
                not self.compact,
                "remote.storage.enable is not supported on a compacted topic (cleanup.policy "
                f"{self.cleanup_policy}): compaction rewrites segments that the remote store keeps as copied",
            )
            for unit in ("ms", "bytes"):
                problem = local_retention_problem(
                    unit, getattr(self, f"retention_{unit}"), getattr(self, f"local_retention_{unit}")
                )
                self._require(problem is None, str(problem))

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

    min_insync_replicas: int = setting(
        1,
        'An acks="all" produce is refused with NotEnoughReplicasError while the ISR has fewer '
        "members than this, and fails with NotEnoughReplicasAfterAppendError if the ISR shrank "
        "below it before the batch was replicated.",
        minimum=1,
    )
    unclean_leader_election_enable: bool = setting(
        False,
        "When no in-sync replica is left, let an out-of-sync replica lead: the partition comes "
        "back sooner, and acknowledged records it lacks are lost.",
    )
    replica_lag_time_max_ms: int = setting(
        30_000,
        "A follower that has not caught up for this long leaves the ISR (a broker setting in "
        "Kafka; per topic here so that tests and latency-sensitive topics can lower it).",
        minimum=1,
    )
    replica_fetch_wait_max_ms: int = setting(
        500,
        "How long the leader holds a follower's fetch that finds nothing new (a broker setting "
        "in Kafka, per topic here): an idle follower makes one call per this many ms, so a "
        "node of many idle followers spends less with a longer wait. Data and new leaders do "
        "not wait for it. Below replica.lag.time.max.ms, as Kafka requires, or an idle "
        "follower would leave the ISR.",
        minimum=0,
        below="replica_lag_time_max_ms",
    )
    producer_id_expiration_ms: int = setting(
        _DAY_MS,
        "A producer id whose last batch is this old is forgotten by the partition (a broker "
        "setting in Kafka, per topic here like replica.lag.time.max.ms): its next batch is "
        "then taken as its first (see raylog.coordination.producer_state).",
        minimum=1,
    )
    transaction_partition_verification_enable: bool = setting(
        True,
        "A producer's transactional batch opens its transaction in the partition only once "
        "the transaction coordinator of its transactional id confirmed the partition is in "
        "that producer's ongoing transaction (KIP-890 part 1; a broker setting in Kafka, per "
        "topic here). Off, a write no coordinator knows (a made-up producer id, a late batch "
        "of a Kafka client's ended transaction) opens a transaction that never ends, holding "
        "every read_committed reader: `raylog transactions find-hanging` and `abort` end it.",
    )

    def log_config(self) -> LogConfig:
        """The part of this config the storage engine uses."""
        names = {f.name for f in dataclasses.fields(LogConfig)}
        return LogConfig(**{k: v for k, v in dataclasses.asdict(self).items() if k in names})


@dataclass(frozen=True)
class ControllerConfig(_Config):
    """The controller's cluster-wide settings (Kafka's broker settings of the same names)."""

    node_check_interval_ms: int = setting(
        500,
        "How often Ray's node table is read to notice dead and returning brokers (and "
        "reassignments checked for progress).",
        minimum=10,
    )
    auto_leader_rebalance_enable: bool = setting(
        True,
        "Move leadership back to preferred (first-listed) replicas when too many partitions "
        "are led elsewhere (see leader.imbalance.per.broker.percentage).",
    )
    leader_imbalance_per_broker_percentage: int = setting(
        10,
        "Automatic rebalancing starts when more than this percentage of the online partitions "
        "(counted over the whole cluster) are not led by their preferred replica.",
        minimum=0,
        maximum=100,
    )
    leader_imbalance_check_interval_seconds: int = setting(
        30,
        "How often the controller checks the leader imbalance.",
        minimum=1,
    )
    auto_create_topics_enable: bool = setting(
        False,
        "A Kafka client's Metadata request naming a topic that does not exist creates it (with "
        "num.partitions and default.replication.factor) when the request allows it, as Kafka's "
        "brokers do: Kafka producers (librdkafka, the Java client) allow it, consumers only with "
        "allow.auto.create.topics. Off by default, unlike Kafka (as on Amazon MSK): each "
        "partition replica is a process here, so a mistyped or hostile topic name would cost "
        "processes. With the authorizer, only a principal with CREATE on the topic or the cluster "
        "creates it. raylog's own clients never create topics.",
    )
    num_partitions: int = setting(
        1,
        "Partitions of a topic created automatically or by a CreateTopics request that leaves "
        "the count to the broker (-1).",
        minimum=1,
    )
    default_replication_factor: int = setting(
        1,
        "Replicas of each partition of a topic created automatically or by a CreateTopics "
        "request that leaves the factor to the broker (-1); more than the live brokers fails "
        "the creation (INVALID_REPLICATION_FACTOR).",
        minimum=1,
    )
    offsets_topic_num_partitions: int = setting(
        3,
        "Partitions of __consumer_offsets (created on the first group look-up): few, since "
        "each replica is an actor process (Kafka's default of 50 would be 150 processes).",
        minimum=1,
    )
    group_initial_rebalance_delay_ms: int = setting(
        3_000,
        "How long the first rebalance of an empty consumer group waits for more members, again "
        "after each new one (up to the rebalance timeout): consumers that start together form "
        "one generation instead of one rebalance each. 0 rebalances at the first join. Read by "
        "each group coordinator when it starts.",
        minimum=0,
    )
    group_consumer_session_timeout_ms: int = setting(
        45_000,
        "How long a member of a consumer group of Kafka's consumer protocol (KIP-848, "
        "group.protocol=consumer) keeps its partitions without a heartbeat (the coordinator "
        "decides it in that protocol, not the client), unless its group sets "
        "consumer.session.timeout.ms (a GROUP config resource). Read by each group coordinator "
        "when it starts.",
        minimum=2,
        at_least="group_consumer_min_session_timeout_ms",
        at_most="group_consumer_max_session_timeout_ms",
    )
    group_consumer_min_session_timeout_ms: int = setting(
        45_000,
        "The lowest consumer.session.timeout.ms a group may be given (INVALID_CONFIG below).",
        minimum=1,
    )
    group_consumer_max_session_timeout_ms: int = setting(
        60_000,
        "The highest consumer.session.timeout.ms a group may be given (INVALID_CONFIG above).",
        at_least="group_consumer_min_session_timeout_ms",
    )
    group_consumer_heartbeat_interval_ms: int = setting(
        5_000,
        "How often members of a consumer group of Kafka's consumer protocol heartbeat (told to "
        "them in every answer), unless their group sets consumer.heartbeat.interval.ms; below "
        "group.consumer.session.timeout.ms. A member learns of a rebalance at its next "
        "heartbeat, so a lower interval moves partitions sooner.",
        minimum=1,
        below="group_consumer_session_timeout_ms",
        at_least="group_consumer_min_heartbeat_interval_ms",
        at_most="group_consumer_max_heartbeat_interval_ms",
    )
    group_consumer_min_heartbeat_interval_ms: int = setting(
        5_000,
        "The lowest consumer.heartbeat.interval.ms a group may be given (INVALID_CONFIG below).",
        minimum=1,
    )
    group_consumer_max_heartbeat_interval_ms: int = setting(
        15_000,
        "The highest consumer.heartbeat.interval.ms a group may be given (INVALID_CONFIG above).",
        at_least="group_consumer_min_heartbeat_interval_ms",
    )
    group_consumer_max_size: int = setting(
        2**31 - 1,
        "Most members a consumer group of Kafka's consumer protocol admits (GROUP_MAX_SIZE_REACHED beyond).",
        minimum=1,
    )
    offsets_topic_replication_factor: int = setting(
        3,
        "Replicas of each __consumer_offsets partition, capped at the number of brokers when "
        "the topic is created (min.insync.replicas is 2 from three replicas up).",
        minimum=1,
    )
    offsets_topic_segment_bytes: int = setting(
        100 * _MIB,
        "segment.bytes of __consumer_offsets: below the topic default, so that segments roll "
        "and compaction, which skips the active segment, reaches old commits.",
        minimum=1024,
    )
    transaction_state_log_num_partitions: int = setting(
        3,
        "Partitions of __transaction_state (created on the first transactional producer), "
        "as offsets.topic.num.partitions.",
        minimum=1,
    )
    transaction_state_log_replication_factor: int = setting(
        3,
        "Replicas of each __transaction_state partition, capped at the number of brokers when the topic is created.",
        minimum=1,
    )
    transaction_state_log_segment_bytes: int = setting(
        100 * _MIB,
        "segment.bytes of __transaction_state.",
        minimum=1024,
    )
    listeners: str = setting(
        "",
        "Where each broker's Kafka listeners accept Kafka protocol clients: a comma-separated "
        "list of NAME://host:port, each name once and of a security protocol in "
        "listener.security.protocol.map (PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL by the "
        "names of Kafka's default map; empty: no listener). An empty host listens on the "
        "loopback address only (127.0.0.1, advertised as such); 0.0.0.0 listens on every "
        "interface and advertises the broker's node address; port 0 takes a free port; brokers "
        "sharing a node (the embedded mode) listen on port, port + 1, ... in broker order, so "
        "give a node's listeners ports at least as many apart as it has brokers.",
    )
    listener_security_protocol_map: str = setting(
        DEFAULT_PROTOCOL_MAP,
        "The security protocol of each listener name, comma-separated NAME:PROTOCOL, PROTOCOL "
        "one of PLAINTEXT, SSL (TLS, see ssl.keystore.location), SASL_PLAINTEXT or SASL_SSL "
        "(clients authenticate, see sasl.enabled.mechanisms); e.g. "
        "INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL with listeners=INTERNAL://10.0.0.5:9092,"
        "EXTERNAL://0.0.0.0:9094.",
    )
    advertised_listeners: str = setting(
        "",
        "The address Kafka clients are told to reach each broker at on a listener, where it is "
        "not the one bound (behind NAT, a DNS name): comma-separated NAME://host:port, each "
        "name one of listeners and at most once. A listener it does not name advertises its "
        "bound address (by the host rules of listeners); port 0 advertises the port bound; "
        "brokers sharing a node advertise port, port + 1, ... as they listen. Metadata answers "
        "give each broker's address on the listener the request came in on.",
    )

    authorizer: str = setting(
        "",
        'Who may do what: "" (no authorizer: every request is allowed, '
        "and the ACL requests answer SECURITY_DISABLED, as a Kafka broker without "
        "authorizer.class.name) or \"acl\" (Kafka's ACLs, with the rules of Kafka's "
        "StandardAuthorizer: created with CreateAcls, Admin.create_acls or kafka-acls.sh, kept in "
        "the controller's journal, pushed to every listener and replica: a change is answered "
        "once the listeners and the running replicas it concerns hold it). They hold for Kafka "
        "clients of the listeners and for raylog's own clients alike; a client that did not "
        "authenticate is User:ANONYMOUS (docs/security.md).",
        choices=("", "acl"),
    )
    super_users: str = setting(
        "",
        "Principals allowed every operation whatever the ACLs say, separated by ';' (e.g. User:admin;User:ops).",
        pattern=(r"(\s*[^\s;:]+:[^;]+(;\s*[^\s;:]+:[^;]+)*)?", "principals of the form Type:name separated by ';'"),
    )
    allow_everyone_if_no_acl_found: bool = setting(
        False,
        "With the authorizer, whether a request on a resource that no ACL names (for any "
        "principal) is allowed; Kafka's default, false, denies it.",
    )
    max_connections: int = setting(
        2**31 - 1,
        "Connections a broker's Kafka listener holds at once; one more is closed as it is accepted (logged once).",
        minimum=0,
    )
    max_connections_per_ip: int = setting(
        2**31 - 1,
        "Connections a broker's Kafka listener holds at once from one client address; one "
        "more is closed as it is accepted (logged once).",
        minimum=0,
    )
    queued_max_requests: int = setting(
        64,
        "Requests a Kafka listener reads ahead on one connection before answering them (per "
        "connection, where Kafka's 500 is per broker): past it the listener stops reading the "
        "connection and the socket's buffers hold the rest.",
        minimum=1,
    )
    queued_max_request_bytes: int = setting(
        256 * _MIB,
        "Bytes of requests a Kafka listener holds across its connections (a memory pool, as "
        "Kafka's): a connection whose next request finds the pool used up waits to read it "
        "until memory frees (a request is let in while any memory is free, so one larger than "
        "the pool still goes through alone). At least socket.request.max.bytes, or -1.",
        minimum=-1,
        meanings=((-1, "no limit"),),
    )
    socket_request_max_bytes: int = setting(
        MAX_REQUEST_BYTES,
        "The largest request frame a Kafka listener reads; a larger one closes the connection, "
        "as Kafka does (its length cannot be trusted to find the next request).",
        minimum=1,
    )
    connections_max_idle_ms: int = setting(
        600_000,
        "A Kafka listener closes a connection that sent nothing and has no request left to answer for this long.",
        minimum=1,
    )
    connections_max_reauth_ms: int = setting(
        0,
        "On a SASL listener, how long an authentication holds (KIP-368): a client is told this "
        "lifetime and authenticates again on its connection before it ends (with the same user; "
        "a deleted user or a changed password then refuses it), and a connection that sends "
        "anything else once it ended is closed. 0: never (authenticated connections keep their "
        "user until they close).",
        minimum=0,
    )
    sasl_enabled_mechanisms: str = setting(
        "SCRAM-SHA-256,SCRAM-SHA-512",
        "The SASL mechanisms a SASL_PLAINTEXT or SASL_SSL listener accepts, comma-separated, of "
        "PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512. Users and their SCRAM credentials are made "
        "with AlterUserScramCredentials (kafka-configs.sh --entity-type users, Admin."
        "alter_user_scram_credentials, raylog users); PLAIN checks a password against them "
        "and sends it in clear on SASL_PLAINTEXT. raylog's own clients authenticate with the "
        "controller by the same mechanisms.",
        list_of=SASL_MECHANISMS,
    )
    session_token_lifetime_ms: int = setting(
        3_600_000,
        "How long the session token the controller gives an authenticated raylog client "
        "(Producer, Consumer, Admin with sasl_plain_username) is valid; the client "
        "authenticates again halfway through.",
        minimum=10_000,
    )
    ssl_keystore_location: str = setting(
        "",
        "An SSL listener's certificate chain and private key: a PEM file (Kafka's "
        "ssl.keystore.location with ssl.keystore.type=PEM), at this path on every node that runs "
        "a broker. Required by an SSL listener.",
    )
    ssl_key_password: str = setting(
        "",
        "The password of the keystore's private key when it is encrypted. Never shown: "
        "DescribeConfigs answers it as sensitive, with no value.",
    )
    ssl_truststore_location: str = setting(
        "",
        "The CA certificates (a PEM file, on every node) that client certificates must be signed "
        "by when ssl.client.auth asks for them (empty: the system's CAs, as Kafka falls back "
        "to the JVM's truststore).",
    )
    ssl_client_auth: str = setting(
        "none",
        "Whether an SSL listener asks clients for a certificate: none, requested (a client "
        "without one is User:ANONYMOUS) or required (a client without a valid one is refused "
        "in the handshake). A client certificate's subject is the connection's principal for "
        "the authorizer: User:CN=alice,OU=eng,... after ssl.principal.mapping.rules.",
        choices=("none", "requested", "required"),
    )
    ssl_principal_mapping_rules: str = setting(
        "DEFAULT",
        "Kafka's rules rewriting a client certificate's subject into its principal's name: "
        "comma-separated RULE:pattern/replacement/[LU] tried in order ($1 a group of the "
        "pattern; L or U lower- or upper-cases the result), DEFAULT keeping the subject as is. "
        "E.g. RULE:^CN=(.*?),OU=eng.*$/$1/L,DEFAULT",
    )
    remote_log_storage_uri: str = setting(
        "",
        "Where tiered storage keeps topics' remote log segments: a pyarrow filesystem URI, "
        "s3://bucket/prefix (S3 options may ride in the query, e.g. "
        "?region=eu-west-1 or ?endpoint_override=host:9000&scheme=http), gs://bucket/prefix, "
        "hdfs://namenode:8020/path or file:///path (a directory every broker node shares). "
        "Credentials come from the environment or the machine's role. Kafka's "
        "remote.log.storage.system.enable and its RemoteStorageManager's settings in one: "
        "empty, tiered storage is off and no topic may set remote.storage.enable.",
        pattern=(
            r"|(file|s3|gs|gcs|hdfs|viewfs|abfs|abfss)://\S+",
            "empty or a URI of a filesystem pyarrow knows (file, s3, gs, gcs, hdfs, viewfs, abfs, abfss)",
        ),
    )
    remote_log_metadata_topic_num_partitions: int = setting(
        1,
        "Partitions of __remote_log_metadata, where the leaders of tiered topics record each "
        "remote segment's state (created with the first tiered topic); every tiered replica "
        "reads the partition of its own events. Kafka's default is 50, here each replica is a "
        "process.",
        minimum=1,
    )
    remote_log_metadata_topic_replication_factor: int = setting(
        3,
        "Replicas of each __remote_log_metadata partition, capped at the number of brokers when "
        "the topic is created (min.insync.replicas is 2 from three replicas up).",
        minimum=1,
    )
    listener_name: tuple[tuple[str, str], ...] = setting(
        (),
        "Kafka's per-listener settings, each a property of its own: listener.name.<listener>."
        "<setting> (the listener's name lower-cased) sets one of ssl.keystore.location, "
        "ssl.key.password, ssl.truststore.location, ssl.client.auth, ssl.principal.mapping.rules, "
        "sasl.enabled.mechanisms and connections.max.reauth.ms for that listener alone, over the "
        "broker-wide one; listener.name.<listener>.<mechanism>.connections.max.reauth.ms (the "
        "SASL mechanism lower-cased) sets the lifetime of that mechanism's authentications on "
        "the listener, over the listener's. E.g. "
        "listener.name.external.ssl.keystore.location=/etc/raylog/external.pem, "
        "listener.name.internal.sasl.enabled.mechanisms=PLAIN and "
        "listener.name.external.scram-sha-512.connections.max.reauth.ms=3600000. A listener name "
        "that is not in listeners, or another setting, is refused.",
    )

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any] | None = None, **overrides: Any):
        """As :meth:`_Config.from_properties`, with Kafka's ``listener.name.<listener>.<setting>``
        properties gathered into ``listener_name``.

        Raises:
            InvalidConfigError: an unknown key, a value of the wrong type or out of range.
        """
        given = {**(properties or {}), **overrides}
        per_listener = tuple(sorted((k, str(v)) for k, v in given.items() if k.startswith(LISTENER_PREFIX)))
        rest = {k: v for k, v in given.items() if not k.startswith(LISTENER_PREFIX)}
        return super().from_properties(rest, **({"listener_name": per_listener} if per_listener else {}))

    def to_properties(self) -> dict[str, str]:
        """The config as Kafka property names, each per-listener setting under its own name."""
        out = super().to_properties()
        del out[_kafka_name("listener_name")]
        out.update(self.listener_name)
        return out

    def __post_init__(self) -> None:
        super().__post_init__()
        for listener in self.named_listeners:
            own = self.for_listener(listener.name)
            self._require(
                not listener.tls or bool(own.ssl_keystore_location),
                f"listener {listener.name} ({listener.protocol}) needs ssl.keystore.location "
                "(a PEM file of its certificate and key)",
            )
            self._require(
                not listener.sasl or bool(own.sasl_mechanisms),
                f"listener {listener.name} ({listener.protocol}) needs sasl.enabled.mechanisms",
            )
        PrincipalMapper(self.ssl_principal_mapping_rules)  # bad rules are refused here
        for name, own in self.listener_settings.items():
            if own.ssl_principal_mapping_rules == self.ssl_principal_mapping_rules:
                continue
            try:
                PrincipalMapper(own.ssl_principal_mapping_rules)
            except InvalidConfigError as exc:
                raise InvalidConfigError(f"{LISTENER_PREFIX}{name.lower()}.{exc}") from None
        pool = self.queued_max_request_bytes
        self._require(
            pool == -1 or pool >= self.socket_request_max_bytes,
            f"queued.max.request.bytes ({pool}) must be -1 or at least socket.request.max.bytes "
            f"({self.socket_request_max_bytes})",
        )

    @functools.cached_property
    def named_listeners(self) -> tuple[Listener, ...]:
        """The listeners of ``listeners``, in order, with their security protocols and what
        ``advertised.listeners`` says they advertise (none without ``listeners``).

        Raises:
            InvalidConfigError: what Kafka refuses: a malformed entry, a name twice or not in
                ``listener.security.protocol.map``, one non-zero port twice, an advertised name
                that is no listener's or an advertised 0.0.0.0.
        """
        protocols = _protocol_map(self.listener_security_protocol_map)
        bound = _listener_list(self.listeners, "listeners")
        for name, _, _ in bound:
            if name not in protocols:
                raise InvalidConfigError(
                    f"listeners: the listener name {name} is not in listener.security.protocol.map "
                    f"({', '.join(protocols)}), got {_quoted(self.listeners)}"
                )
        ports = [port for _, _, port in bound if port]
        if len(set(ports)) != len(ports):
            raise InvalidConfigError(f"listeners: each listener needs a port of its own, got {_quoted(self.listeners)}")
        advertised = self.advertised(self.advertised_listeners)
        return tuple(
            Listener(name, protocols[name], host, port, *advertised.get(name, ("", 0))) for name, host, port in bound
        )

    def advertised(self, value: str) -> dict[str, tuple[str, int]]:
        """``listener name -> (host, port)`` that an ``advertised.listeners`` value gives (the
        cluster's setting, or one broker's dynamic config, see
        :mod:`raylog.coordination.broker_configs`).

        Raises:
            InvalidConfigError: a malformed entry, a name twice, a name that is none of
                ``listeners``' or the host 0.0.0.0 or :: (clients cannot connect to them).
        """
        advertised = {name: (host, port) for name, host, port in _listener_list(value, "advertised.listeners")}
        unknown = set(advertised) - {name for name, _, _ in _listener_list(self.listeners, "listeners")}
        if unknown:
            raise InvalidConfigError(
                f"advertised.listeners: {', '.join(sorted(unknown))} is not a name in listeners "
                f"({_quoted(self.listeners)}), got {_quoted(value)}"
            )
        if any(host in EVERY_INTERFACE for host, _ in advertised.values()):
            raise InvalidConfigError(
                "advertised.listeners cannot advertise 0.0.0.0 or :: (clients cannot connect to "
                f"them), got {_quoted(value)}"
            )
        return advertised

    def listener_addresses(self, broker_ids: list[int]) -> dict[int, tuple[Listener, ...]]:
        """``broker id -> its listeners`` for brokers sharing a node (sorted ids): the i-th binds
        and advertises each non-zero port + i."""
        return {
            b: tuple(
                dataclasses.replace(
                    listener,
                    port=listener.port + i if listener.port else 0,
                    advertised_port=listener.advertised_port + i if listener.advertised_port else 0,
                )
                for listener in self.named_listeners
            )
            for i, b in enumerate(sorted(broker_ids))
        }

    @property
    def sasl_mechanisms(self) -> tuple[str, ...]:
        """The mechanisms of ``sasl.enabled.mechanisms``, in order."""
        return _mechanisms(self.sasl_enabled_mechanisms)

    @functools.cached_property
    def listener_settings(self) -> dict[str, ListenerSettings]:
        """``listener name -> its settings``: the broker-wide ones, as its
        ``listener.name.<listener>.<setting>`` properties override them.

        Raises:
            InvalidConfigError: naming the property: a listener name not in ``listeners``
                (lower-cased, as Kafka reads them), a setting a listener cannot override, or
                a value the setting refuses.
        """
        if not isinstance(self.listener_name, tuple):
            raise InvalidConfigError(
                "listener.name: give each per-listener setting as a property of its own, "
                f"listener.name.<listener>.<setting>, got {_quoted(self.listener_name)}"
            )
        names = {listener.name.lower(): listener.name for listener in self.named_listeners}
        fields = {f.name: f for f in dataclasses.fields(self)}
        own: dict[str, dict[str, Any]] = {name: {} for name in names.values()}
        for key, value in self.listener_name:
            listener, _, name = key.removeprefix(LISTENER_PREFIX).partition(".")
            if listener not in names:
                raise InvalidConfigError(
                    f"{key}: {_quoted(listener)} is not the lower-cased name of a listener of "
                    f"listeners ({', '.join(names) or 'none'})"
                )
            mechanism, _, rest = name.partition(".")
            if mechanism.upper() in SASL_MECHANISMS and rest == REAUTH_SETTING:
                if mechanism != mechanism.lower():
                    raise InvalidConfigError(f"{key}: name the SASL mechanism lower-cased, as Kafka reads it")
                by_mechanism = own[names[listener]].setdefault("reauth_ms_by_mechanism", {})
                by_mechanism[mechanism.upper()] = self._checked(fields["connections_max_reauth_ms"], value, key)
                continue
            field = name.replace(".", "_")
            if field not in LISTENER_SETTINGS:
                raise InvalidConfigError(
                    f"{key}: a listener may override {', '.join(map(_kafka_name, LISTENER_SETTINGS))}, "
                    f"not {_quoted(name)}"
                )
            own[names[listener]][field] = self._checked(fields[field], value, key)
        return {name: self._listener_settings(settings) for name, settings in own.items()}

    def _checked(self, field: dataclasses.Field, value: Any, key: str) -> Any:
        """``value`` of property ``key`` as ``field`` takes it, refused as the field refuses it."""
        coerced = _coerce(value, type(field.default), key)
        problem = field.metadata["valid"].problem(coerced, self)
        if problem is not None:
            raise InvalidConfigError(f"{key} {problem}")
        return coerced

    def for_listener(self, name: str) -> ListenerSettings:
        """The settings of the listener ``name`` (the broker-wide ones for a listener that
        ``listeners`` does not name)."""
        return self.listener_settings.get(name) or self._listener_settings({})

    def _listener_settings(self, overrides: dict[str, Any]) -> ListenerSettings:
        by_mechanism = tuple(sorted(overrides.get("reauth_ms_by_mechanism", {}).items()))
        return ListenerSettings(
            **{f: overrides.get(f, getattr(self, f)) for f in LISTENER_SETTINGS}, reauth_ms_by_mechanism=by_mechanism
        )


#: What ``listener.name.<listener>.<setting>`` may set (Kafka's per-listener configs).
LISTENER_PREFIX = "listener.name."
LISTENER_SETTINGS = (
    "ssl_keystore_location",
    "ssl_key_password",
    "ssl_truststore_location",
    "ssl_client_auth",
    "ssl_principal_mapping_rules",
    "sasl_enabled_mechanisms",
    "connections_max_reauth_ms",
)
#: ``listener.name.<listener>.<mechanism>.`` + this: one mechanism's authentication lifetime.
REAUTH_SETTING = "connections.max.reauth.ms"


@dataclass(frozen=True)
class ListenerSettings:
    """One listener's TLS and SASL settings (``ControllerConfig.listener_settings``)."""

    ssl_keystore_location: str
    ssl_key_password: str
    ssl_truststore_location: str
    ssl_client_auth: str
    ssl_principal_mapping_rules: str
    sasl_enabled_mechanisms: str
    connections_max_reauth_ms: int
    #: ``(mechanism, ms)`` of its ``<mechanism>.connections.max.reauth.ms`` settings.
    reauth_ms_by_mechanism: tuple[tuple[str, int], ...] = ()

    @property
    def sasl_mechanisms(self) -> tuple[str, ...]:
        """The mechanisms of its ``sasl.enabled.mechanisms``, in order."""
        return _mechanisms(self.sasl_enabled_mechanisms)

    @property
    def reauthenticates(self) -> bool:
        """Whether an authentication by some mechanism here has a lifetime (KIP-368)."""
        return self.connections_max_reauth_ms > 0 or any(ms > 0 for _, ms in self.reauth_ms_by_mechanism)

    def reauth_ms(self, mechanism: str) -> int:
        """How long an authentication by ``mechanism`` holds here (0: until the connection
        closes): the mechanism's own setting, else the listener's, as Kafka looks them up."""
        return dict(self.reauth_ms_by_mechanism).get(mechanism, self.connections_max_reauth_ms)


def _mechanisms(value: str) -> tuple[str, ...]:
    return tuple(m.strip() for m in value.split(",") if m.strip())


@dataclass(frozen=True)
class Listener:
    """One of a broker's Kafka listeners: its name, security protocol, the address it binds
    (host "": the loopback; port 0: a free port) and the one it advertises (host "": by the
    host rules of ``listeners``; port 0: the port bound)."""

    name: str
    protocol: str
    host: str
    port: int
    advertised_host: str = ""
    advertised_port: int = 0

    @property
    def tls(self) -> bool:
        """Whether its connections are TLS (SSL, SASL_SSL)."""
        return self.protocol in TLS_PROTOCOLS

    @property
    def sasl(self) -> bool:
        """Whether its clients authenticate with SASL (SASL_PLAINTEXT, SASL_SSL)."""
        return self.protocol.startswith("SASL_")


def listener_address(value: str) -> tuple[str, str, int]:
    """``(name, host, port)`` of one ``NAME://host:port`` listener (the name upper-cased, as
    Kafka normalises it; the host may be empty, an IPv6 one without its brackets).

    Raises:
        InvalidConfigError: another form, or a port outside [0, 65535].
    """
    scheme, sep, rest = value.partition("://")
    host, colon, port = rest.rpartition(":")
    name = scheme.strip().upper()
    if sep != "://" or not _LISTENER_NAME.fullmatch(name) or not colon or not port.isdigit() or int(port) > 65535:
        raise InvalidConfigError(
            f"a listener must be NAME://host:port (NAME of letters, digits and _), got {_quoted(value)}"
        )
    return name, host.strip("[]"), int(port)


def _listener_list(value: str, key: str) -> list[tuple[str, str, int]]:
    """The ``(name, host, port)`` of each listener of ``value`` (comma-separated, empty items
    skipped as Kafka skips them).

    Raises:
        InvalidConfigError: a malformed entry or a name twice (the message names ``key``).
    """
    try:
        listeners = [listener_address(item.strip()) for item in value.split(",") if item.strip()]
    except InvalidConfigError as exc:
        raise InvalidConfigError(f"{key}: {exc}") from None
    names = [name for name, _, _ in listeners]
    if len(set(names)) != len(names):
        raise InvalidConfigError(f"{key}: each listener name may appear once, got {_quoted(value)}")
    return listeners


def _protocol_map(value: str) -> dict[str, str]:
    """``listener name -> security protocol`` of a ``listener.security.protocol.map``.

    Raises:
        InvalidConfigError: an entry not NAME:PROTOCOL of a known protocol, or a name twice.
    """
    protocols: dict[str, str] = {}
    for item in (i.strip() for i in value.split(",")):
        if not item:
            continue
        name, colon, protocol = (part.strip().upper() for part in item.partition(":"))
        if not colon or not _LISTENER_NAME.fullmatch(name) or protocol not in LISTENER_PROTOCOLS or name in protocols:
            raise InvalidConfigError(
                f"listener.security.protocol.map must be comma-separated NAME:PROTOCOL, each name "
                f"once, PROTOCOL one of {', '.join(LISTENER_PROTOCOLS)}, got {_quoted(value)}"
            )
        protocols[name] = protocol
    return protocols


#: The security protocols a listener speaks, and those of them over TLS.
LISTENER_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
TLS_PROTOCOLS = ("SSL", "SASL_SSL")
#: Hosts that bind every interface (and so advertise the node's address).
EVERY_INTERFACE = ("0.0.0.0", "::")
#: A listener name: Kafka's names are case-insensitive (upper-cased here) words.
_LISTENER_NAME = re.compile(r"[A-Z0-9_]+")


#: Topic properties whose value is a comma-separated list (AlterConfigOp APPEND / SUBTRACT).
LIST_PROPERTIES = frozenset({"cleanup.policy"})


def list_operation(name: str, current: str, operation: tuple, incremental: bool, lists: frozenset) -> str:
    """The new value of list config ``name`` (one of ``lists``) after ``(op, items)``:
    "append" adds the comma-separated items not there yet, "subtract" removes those that are.

    Raises:
        InvalidConfigError: not an ``("append" | "subtract", items)`` of an incremental alter,
            or ``name`` is not a list config.
    """
    op, items = operation if len(operation) == 2 else (None, None)
    if not incremental or op not in ("append", "subtract") or not isinstance(items, str):
        raise InvalidConfigError(
            f'{name}: {operation!r} is not a change: give a value, None, or ("append" | "subtract", items) '
            "in an incremental alter"
        )
    if name not in lists:
        raise InvalidConfigError(f"{name} is not a list config: only {', '.join(sorted(lists))} can {op}")
    values = [v.strip() for v in current.split(",") if v.strip()]
    given = [v.strip() for v in items.split(",") if v.strip()]
    if op == "append":
        values += [v for v in given if v not in values]
    else:
        values = [v for v in values if v not in given]
    return ",".join(values)
