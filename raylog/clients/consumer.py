"""The Consumer: pulls record batches from partition leaders (Kafka's KafkaConsumer).

Each assigned, unpaused partition has at most one fetch in flight; all run concurrently,
a fetch that has not answered by the end of one ``poll`` is kept for the next, and the
next fetch goes out as soon as a response arrives (up to ``BUFFERED_FETCHES`` decoded
responses wait per partition), so fetching overlaps decoding, like Kafka's fetcher. A
leader holds a fetch until ``fetch_min_bytes`` are there or ``fetch_max_wait_ms`` passed
(long poll). Fetched bytes are the stored batches themselves,
read zero-copy from Ray's object store and decoded to Arrow without a Python loop per
record; :meth:`poll` then makes :class:`Record` objects, :meth:`poll_arrow` does not.

Partitions are either assigned by hand (:meth:`assign`; without a ``group_id``, topics
given to the constructor are assigned whole), or shared by the members of a consumer group
(``group_id`` with topics, or :meth:`subscribe` to topics or a pattern): each partition
goes to one member, and the group's committed offsets (:meth:`commit`, automatic every
``auto_commit_interval_ms`` by default) are where a partition's new owner starts. See
:mod:`raylog.clients.group` for membership. Positions without a committed offset start from
``auto_offset_reset`` ("earliest", "latest" or "none", which raises) unless set by
:meth:`seek`.

Delivery: with auto-commit (or a commit after processing) a crash repeats at most what was
processed since the last commit (at least once); committing before processing loses at
most that instead (at most once).

Concurrency: not thread-safe, like Kafka's consumer; use one per thread.
"""

from __future__ import annotations

import collections
import itertools
import logging
import math
import re
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import ray
from ray.exceptions import RayError

from raylog.actors import metrics
from raylog.actors.transport import call, translate
from raylog.clients.cluster import RaylogCluster, client_handle, require_cluster
from raylog.clients.consumer_protocol import ConsumerProtocolMembership
from raylog.clients.group import (
    ConsumerRebalanceListener,
    CoordinatorClient,
    GroupMembership,
    committed_offsets,
    offsets_to_commit,
)
from raylog.coordination.assignors import ASSIGNORS, COOPERATIVE_STICKY
from raylog.coordination.consumer_group import SERVER_ASSIGNORS
from raylog.coordination.group import check_group_id
from raylog.coordination.partition import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    READ_COMMITTED,
    READ_UNCOMMITTED,
)
from raylog.coordination.placement import INTERNAL_TOPICS, validate_client_id, validate_topic_name
from raylog.errors import (
    CommitFailedError,
    IllegalStateError,
    InvalidConfigError,
    LogTruncationError,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
    RaylogError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)
from raylog.protocol import FetchRequest, error_of
from raylog.storage import record_batch
from raylog.storage.log import MAX_READ_BYTES
from raylog.types import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    Record,
    TopicPartition,
)

#: Consumer(isolation_level=...) values and the fetch's isolation level each asks for.
ISOLATION_LEVELS = {"read_uncommitted": READ_UNCOMMITTED, "read_committed": READ_COMMITTED}
log = logging.getLogger(__name__)

#: Decoded responses kept per partition before fetching pauses (bounds memory).
BUFFERED_FETCHES = 2
#: The group protocols a consumer may join by (Kafka's group.protocol).
GROUP_PROTOCOLS = ("classic", "consumer")
#: Longest a poll sleeps at once while a group member has nothing to wait on.
GROUP_IDLE_STEP_S = 0.05
#: Pause before an offset look-up is asked again after a retriable error.
LIST_OFFSETS_BACKOFF_S = 0.1
#: fetch_max_bytes at most (an int32 in Kafka's protocol).
MAX_FETCH_BYTES = 2**31 - 1

ARROW_SCHEMA = pa.schema(
    [pa.field("topic", pa.string()), pa.field("partition", pa.int32()), *record_batch.OUTPUT_SCHEMA]
)


class _Buffered:
    """A decoded fetch not yet handed out (``nbytes``: the batches it came in;
    ``log_append_time``: see :func:`log_append_time_ranges`)."""

    __slots__ = ("table", "cursor", "nbytes", "log_append_time")

    def __init__(self, table: pa.Table, nbytes: int, log_append_time: LogAppendTime):
        self.table, self.cursor, self.nbytes, self.log_append_time = table, 0, nbytes, log_append_time


#: Which records of a fetch carry the leader's append time: None (none), True (all), or the
#: ``(first, last)`` offsets of each batch that does.
LogAppendTime = bool | list[tuple[int, int]] | None


def log_append_time_ranges(headers: list) -> LogAppendTime:
    """Where the fetched batches' timestamps are LogAppendTime, from their ``(position,
    BatchHeader)`` pairs (a batch attribute, as in Kafka; control batches are never read)."""
    data = [h for _, h in headers if not h.attributes & record_batch.CONTROL]
    stamped = [(h.base_offset, h.last_offset) for h in data if h.attributes & record_batch.LOG_APPEND_TIME]
    if not stamped:
        return None
    return True if len(stamped) == len(data) else stamped


def timestamp_types(offsets: list[int], log_append_time: LogAppendTime) -> Iterable[int]:
    """Each record's ``Record.timestamp_type``, by offset."""
    if log_append_time is None or log_append_time is True:
        return itertools.repeat(TIMESTAMP_LOG_APPEND_TIME if log_append_time else TIMESTAMP_CREATE_TIME, len(offsets))
    at = np.asarray(offsets, dtype=np.int64)
    types = np.full(len(at), TIMESTAMP_CREATE_TIME, dtype=np.int64)
    for first, last in log_append_time:
        types[(at >= first) & (at <= last)] = TIMESTAMP_LOG_APPEND_TIME
    return types.tolist()


def fetch_ask(used: int, fetch_max_bytes: int, partition_max_bytes: int, batch_bytes: int) -> tuple[int, int] | None:
    """The ``(max_bytes, expected_bytes)`` of a fetch of a partition with records to read, or
    None: ``fetch_max_bytes`` is spent (``used`` bytes are buffered or expected from fetches in
    flight). A leader answers at least one batch however little is asked, so a partition
    whose last answer was ``batch_bytes`` is expected to bring that much; one fetch is always
    allowed when nothing is used, as Kafka returns at least one batch per fetch request."""
    ask = min(partition_max_bytes, max(1, fetch_max_bytes - used))
    expected = max(ask, batch_bytes)
    if used > 0 and used + expected > fetch_max_bytes:
        return None
    return ask, expected


def _repeated_string(text: str, count: int) -> pa.Array:
    """``text`` ``count`` times as a string column, made from buffers (not ``pa.repeat``,
    whose first call in a process imports pandas: see :func:`record_batch.values_of`)."""
    data = text.encode()
    offsets = np.arange(count + 1, dtype=np.int32) * len(data)
    return pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(data * count)])


class Consumer:
    """Reads records from raylog partitions.

    Args:
        cluster: from :func:`raylog.connect`.
        topics: topics whose every partition to read (or call :meth:`assign`).
        auto_offset_reset: "earliest", "latest" or "none".
        fetch_min_bytes, fetch_max_wait_ms: the long poll of each fetch.
        max_partition_fetch_bytes: bytes per partition per fetch (at least one batch); large,
            because a Ray call costs about a millisecond whatever it carries. At most
            ``raylog.storage.log.MAX_READ_BYTES`` (what a leader returns at most).
        fetch_max_bytes: bytes buffered and in flight at most, over all partitions (at least
            one batch): each fetch call here reads one partition (its leader is an actor of
            its own), and the partitions with records to read share this limit, in turn, as
            the partitions of one Kafka fetch request do, so that a consumer of hundreds of
            partitions holds no more than one of a few partitions. A caught-up partition's
            long poll waits at its leader without holding any of it.
        max_poll_records: records :meth:`poll` returns at most.
        request_timeout_ms: how long offset look-ups may take.
        check_crcs: verify batch CRCs on decode.
        isolation_level: "read_committed" (the default here; Kafka's is "read_uncommitted"):
            read only up to the last stable offset, never a record of an aborted transaction
            nor of one still open; "latest" offsets and lag count to that offset too.
            "read_uncommitted": read up to the high watermark, transactions or not. Without
            transactions both read the same records, at the same speed.
        consumer_timeout_ms: iteration stops after this long without records (None: never).
        key_deserializer, value_deserializer: applied by :meth:`poll` and iteration.
        group_id: the consumer group (a non-empty string, else InvalidGroupIdError); with
            topics, the consumer subscribes to them as a member. With :meth:`assign` instead,
            it only commits for the group (which must then have no active members).
        group_instance_id: static membership: a consumer restarted with the same id takes its
            place back without a rebalance (and does not leave the group on close).
        client_id: a name shown in group descriptions, which leaders also hold to a client
            quota (``consumer_byte_rate``, see :meth:`Admin.alter_client_quotas`: as in Kafka
            since KIP-219, a fetch over it comes with a throttle time and the partition is not
            fetched again until it has passed; recorded in ``raylog_throttle_time_seconds``).
        enable_auto_commit: commit the positions of what earlier polls returned, every
            ``auto_commit_interval_ms``, before a rebalance and on close (group members only).
        auto_commit_interval_ms: how often automatic commits happen (with ``enable_auto_commit``).
        session_timeout_ms: how long the coordinator waits for heartbeats before it gives the
            member's partitions to others.
        heartbeat_interval_ms: how often the background thread heartbeats (a third of the
            session timeout is usual).
        max_poll_interval_ms: longest allowed time between polls before the member gives its
            partitions up; None: no limit (heartbeats alone keep it, e.g. for long training steps).
        partition_assignment_strategy: "cooperative-sticky" (default), "range" or "roundrobin",
            or a list in order of preference (the classic protocol's).
        group_protocol: "classic" (the default, as in Kafka 4: JoinGroup and SyncGroup, the
            coordinator running the assignor named above) or "consumer": Kafka 4's consumer
            protocol (KIP-848), by heartbeats alone, the same group a librdkafka or Java
            consumer with ``group.protocol=consumer`` joins. Then the session timeout and the
            heartbeat interval are the coordinator's (``group.consumer.session.timeout.ms``,
            ``group.consumer.heartbeat.interval.ms``), and session_timeout_ms,
            heartbeat_interval_ms and partition_assignment_strategy are not used.
        group_remote_assignor: with group_protocol "consumer", the server assignor the member
            asks for: "uniform" or "range" (None: the coordinator's default, uniform).
        metadata_max_age_ms: how often a pattern subscription looks for new matching topics
            (and subscribed topics for new partitions).
        retry_backoff_ms: pause before retrying a failed coordinator call.
        security_protocol, sasl_mechanism, sasl_plain_username, sasl_plain_password: who the
            client is, as :class:`~raylog.clients.producer.Producer` takes them.

    Example:
        >>> consumer = Consumer(cluster, "clicks", group_id="ranker", auto_offset_reset="earliest")  # doctest: +SKIP
        >>> for record in consumer: ...                                                           # doctest: +SKIP
    """

    def __init__(
        self,
        cluster: RaylogCluster,
        *topics: str,
        auto_offset_reset: str = "latest",
        fetch_min_bytes: int = 1,
        fetch_max_wait_ms: int = 500,
        max_partition_fetch_bytes: int = 8 << 20,
        fetch_max_bytes: int = 50 << 20,
        max_poll_records: int = 500,
        request_timeout_ms: int = 30_000,
        check_crcs: bool = True,
        isolation_level: str = "read_committed",
        consumer_timeout_ms: int | None = None,
        key_deserializer: Callable[[bytes], Any] | None = None,
        value_deserializer: Callable[[bytes], Any] | None = None,
        group_id: str | None = None,
        group_instance_id: str | None = None,
        client_id: str = "",
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5_000,
        session_timeout_ms: int = 45_000,
        heartbeat_interval_ms: int = 3_000,
        max_poll_interval_ms: int | None = 300_000,
        partition_assignment_strategy: str | Iterable[str] = COOPERATIVE_STICKY,
        metadata_max_age_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        group_protocol: str = "classic",
        group_remote_assignor: str | None = None,
        security_protocol: str | None = None,
        sasl_mechanism: str | None = None,
        sasl_plain_username: str | None = None,
        sasl_plain_password: str | None = None,
    ):
        self._config = {k: v for k, v in locals().items() if k not in ("self", "cluster", "topics")}
        require_cluster(cluster, "Consumer")
        for name in topics:
            validate_topic_name(name)
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise InvalidConfigError(f"auto_offset_reset must be earliest, latest or none, got {auto_offset_reset!r}")
        for name in (
            "fetch_min_bytes",
            "fetch_max_wait_ms",
            "max_partition_fetch_bytes",
            "fetch_max_bytes",
            "max_poll_records",
            "request_timeout_ms",
            "auto_commit_interval_ms",
            "session_timeout_ms",
            "heartbeat_interval_ms",
            "metadata_max_age_ms",
            "retry_backoff_ms",
        ):
            value = self._config[name]
            if (
                isinstance(value, bool)
                or not isinstance(value, int)
                or value < (1 if name != "fetch_max_wait_ms" else 0)
            ):
                raise InvalidConfigError(f"{name} must be a positive integer, got {value!r}")
        strategies = (
            (partition_assignment_strategy,)
            if isinstance(partition_assignment_strategy, str)
            else tuple(partition_assignment_strategy)
        )
        if not strategies or any(s not in ASSIGNORS for s in strategies):
            raise InvalidConfigError(f"partition_assignment_strategy must be among {sorted(ASSIGNORS)}")
        if max_partition_fetch_bytes > MAX_READ_BYTES or fetch_max_bytes > MAX_FETCH_BYTES:
            raise InvalidConfigError(
                f"max_partition_fetch_bytes must be at most {MAX_READ_BYTES} and fetch_max_bytes at most "
                f"{MAX_FETCH_BYTES}, got {max_partition_fetch_bytes} and {fetch_max_bytes}"
            )
        validate_client_id(client_id, InvalidConfigError)
        if heartbeat_interval_ms >= session_timeout_ms:
            raise InvalidConfigError("heartbeat_interval_ms must be lower than session_timeout_ms")
        if max_poll_interval_ms is not None and (isinstance(max_poll_interval_ms, bool) or max_poll_interval_ms < 1):
            raise InvalidConfigError(
                f"max_poll_interval_ms must be a positive integer or None, got {max_poll_interval_ms!r}"
            )
        if group_protocol not in GROUP_PROTOCOLS:
            raise InvalidConfigError(f"group_protocol must be one of {GROUP_PROTOCOLS}, got {group_protocol!r}")
        if group_remote_assignor is not None and group_remote_assignor not in SERVER_ASSIGNORS:
            raise InvalidConfigError(
                f"group_remote_assignor must be among {sorted(SERVER_ASSIGNORS)} or None, not {group_remote_assignor!r}"
            )
        if group_id is not None:
            check_group_id(group_id)
        self._strategies = strategies
        settings = (security_protocol, sasl_mechanism, sasl_plain_username, sasl_plain_password)
        self._cluster, self._session = client_handle(cluster, request_timeout_ms / 1000, *settings)
        self._reset = auto_offset_reset
        self._min_bytes = fetch_min_bytes
        self._max_wait_ms = fetch_max_wait_ms
        self._partition_max_bytes = max_partition_fetch_bytes
        self._fetch_max_bytes = fetch_max_bytes
        self._max_records = max_poll_records
        self._timeout_s = request_timeout_ms / 1000
        self._check_crcs = check_crcs
        if isolation_level not in ISOLATION_LEVELS:
            raise InvalidConfigError(
                f"isolation_level must be one of {sorted(ISOLATION_LEVELS)}, got {isolation_level!r}"
            )
        self._isolation = ISOLATION_LEVELS[isolation_level]
        self._read_committed = self._isolation == READ_COMMITTED
        self._iteration_timeout_ms = consumer_timeout_ms
        self._key_deserializer = key_deserializer
        self._value_deserializer = value_deserializer
        self._assignment: list[TopicPartition] = []
        self._positions: dict[TopicPartition, int | None] = {}
        self._paused: set[TopicPartition] = set()
        #: ObjectRef -> (tp, offset, epoch, bytes expected of fetch_max_bytes)
        self._in_flight: dict[Any, tuple[TopicPartition, int, int, int]] = {}
        self._fetching: dict[TopicPartition, Any] = {}  # tp -> its one fetch in flight
        self._buffers: dict[TopicPartition, collections.deque[_Buffered]] = {}
        self._next_fetch: dict[TopicPartition, int] = {}  # where the next fetch starts
        self._high_watermarks: dict[TopicPartition, int] = {}  # from each partition's last answer
        self._batch_bytes: dict[TopicPartition, int] = {}  # its last answer's size with records
        self._fetch_turn = 0  # which partition goes first, in turn
        # KIP-320: the leader epoch of the last batch fetched, and the leader epoch (of the
        # metadata) under which the position was last fetched or checked.
        self._fetched_epochs: dict[TopicPartition, int] = {}
        self._validated_epochs: dict[TopicPartition, int] = {}
        self._closed = False
        self._client_id = client_id
        self._throttle_time_ms = 0
        #: Partitions whose leader asked this client to hold back, until when (monotonic s).
        self._throttled_until: dict[TopicPartition, float] = {}
        self._coordinator = (
            None
            if group_id is None
            else CoordinatorClient(
                self._cluster, group_id, self._timeout_s, retry_backoff_ms / 1000, session=self._session
            )
        )
        self._group: GroupMembership | ConsumerProtocolMembership | None = None
        self._subscribed: tuple[str, ...] | re.Pattern | None = None
        self._metadata_checked = 0.0
        #: Subscribed topics the principal may not describe, found by the last metadata
        #: refresh: raised by the next poll (as Kafka's consumer raises them once per update).
        self._refused: TopicAuthorizationFailedError | None = None
        self._next_auto_commit = time.monotonic() + auto_commit_interval_ms / 1000
        self._async_commits: list[tuple[Any, dict, Callable | None]] = []
        if topics and group_id is not None:
            self.subscribe(list(topics))
        elif topics:
            metadata = self._cluster.metadata(refresh=True)
            missing = [t for t in topics if t not in metadata.topics]
            if missing:
                raise self._cluster.missing_topics_error(missing)
            self.assign([TopicPartition(t, p) for t in topics for p in range(metadata.num_partitions(t))])

    def __reduce__(self):
        # A consumer shipped to another process keeps its assignment and positions, or joins
        # its group there as a new member with the same subscription.
        if self._subscribed is not None:
            subscription = self._subscribed.pattern if isinstance(self._subscribed, re.Pattern) else self._subscribed
            return (_rebuild_member, (self._cluster, self._config, subscription))
        return (_rebuild_consumer, (self._cluster, self._config, list(self._assignment), dict(self._positions)))

    # --- groups ---------------------------------------------------------------------------

    def subscribe(
        self,
        topics: Iterable[str] | None = None,
        *,
        pattern: str | re.Pattern | None = None,
        listener: ConsumerRebalanceListener | None = None,
    ) -> None:
        """Join the consumer group to share ``topics`` (or every topic whose whole name
        matches ``pattern``, including ones created later) with its other members.

        Raises:
            IllegalStateError: no group_id, or partitions assigned by hand.
            ValueError: neither or both of topics and pattern.
            TypeError: topics given as one string instead of a list of names.
            InvalidTopicError: a name that is not a legal topic name.
        """
        self._require_open()
        if self._coordinator is None:
            raise IllegalStateError("subscribe needs a group_id (or assign partitions by hand)")
        if (topics is None) == (pattern is None):
            raise ValueError("give topics or a pattern")
        if isinstance(topics, str):
            raise TypeError(f"topics must be a list of topic names, not the string {topics!r}")
        if topics is not None:
            topics = [validate_topic_name(t) for t in topics]
        if self._assignment and self._subscribed is None:
            raise IllegalStateError("partitions were assigned by hand: unsubscribe() first")
        self._subscribed = re.compile(pattern) if pattern is not None else tuple(dict.fromkeys(topics))
        if self._group is None:
            cfg = self._config
            common = {
                "instance_id": cfg["group_instance_id"],
                "max_poll_interval_ms": cfg["max_poll_interval_ms"],
                "subscription": self._subscribed_partition_counts,
                "apply": self._apply_group_assignment,
                "listener": listener or ConsumerRebalanceListener(),
            }
            if cfg["group_protocol"] == "consumer":
                self._group = ConsumerProtocolMembership(
                    self._coordinator,
                    assignor=cfg["group_remote_assignor"],
                    retry_backoff_s=cfg["retry_backoff_ms"] / 1000,
                    topics=lambda: self._cluster.metadata().partition_counts,
                    **common,
                )
            else:
                self._group = GroupMembership(
                    self._coordinator,
                    client_id=cfg["client_id"],
                    strategies=self._strategies,
                    session_timeout_ms=cfg["session_timeout_ms"],
                    heartbeat_interval_ms=cfg["heartbeat_interval_ms"],
                    owned=lambda: list(self._assignment),
                    **common,
                )
        else:
            if listener is not None:
                self._group.listener = listener
            self._group.request_rejoin()
        self._metadata_checked = 0.0

    def subscription(self) -> set[str]:
        """The topics this member subscribes to now (for a pattern: those that match)."""
        return set(self._subscribed_partition_counts()) if self._subscribed is not None else set()

    def unsubscribe(self) -> None:
        """Leave the group (committing first with auto-commit) and drop every partition."""
        if self._group is not None:
            self._leave_group()
        self._subscribed = None
        self._set_assignment([])

    def commit(self, offsets: dict[TopicPartition, int | OffsetAndMetadata] | None = None) -> None:
        """Commit ``offsets`` (default: the positions of every assigned partition, i.e. all
        that polls returned) for the group, and wait until they are replicated.

        Raises:
            IllegalStateError: no group_id.
            CommitFailedError: this member's generation is over (the group rebalanced).
            UnknownMemberIdError: assigned by hand while the group has active members.
        """
        coordinator = self._require_group()
        # After the commit_async calls made before it, as Kafka's consumer sends them all on
        # one connection: an earlier one must not land after this one. Their callbacks run.
        self._finish_async_commits(wait=True)
        committing = self._commit_offsets(offsets)
        if not committing:
            return
        if self._group is not None:
            self._group.commit(committing)
        else:
            coordinator.call("commit_offsets", coordinator.group_id, "", -1, None, committing)

    def commit_async(
        self,
        offsets: dict[TopicPartition, int | OffsetAndMetadata] | None = None,
        callback: Callable[[dict, Exception | None], None] | None = None,
    ) -> None:
        """Like :meth:`commit` without waiting; ``callback(offsets, error)`` runs in a later
        poll (or commit, or close) once the coordinator answered, callbacks in the order of
        the calls. Not retried: a later commit supersedes it.

        Commits take effect in the order they were made, as Kafka's consumer sends them in
        order on one connection: the coordinator runs calls on many threads, so each call
        is sent with the previous one still unanswered as an argument, and Ray starts it
        only once that one answered."""
        coordinator = self._require_group()
        committing = self._commit_offsets(offsets)
        if not committing:
            return
        try:
            member_id, generation, instance_id = self._group.member_commit_args() if self._group else ("", -1, None)
            previous = self._async_commits[-1][0] if self._async_commits else None
            if previous is not None and ray.wait([previous], timeout=0)[0]:
                previous = None  # answered already (an error there would fail this call too)
            ref = coordinator.remote(
                "commit_offsets", coordinator.group_id, member_id, generation, instance_id, committing, after=previous
            )
        except RaylogError as exc:
            coordinator.after_error(exc)
            if callback is not None:
                callback(committing, exc)
            return
        self._async_commits.append((ref, committing, callback))

    def committed(
        self, partitions: Iterable[TopicPartition] | TopicPartition, metadata: bool = False
    ) -> dict[TopicPartition, OffsetAndMetadata | None] | OffsetAndMetadata | int | None:
        """The group's committed offset of each partition: ``{partition: OffsetAndMetadata}``
        (None where it has none). Given one TopicPartition instead, as kafka-python's
        ``committed(partition, metadata=False)``: its committed offset (an int, or the
        OffsetAndMetadata with ``metadata=True``), or None.

        Raises:
            IllegalStateError: no group_id.
        """
        if isinstance(partitions, TopicPartition):
            found = self.committed([partitions])[partitions]
            return found if metadata or found is None else found.offset
        wanted = [TopicPartition(*tp) for tp in partitions]
        found = committed_offsets(self._require_group(), wanted)
        return {tp: found.get(tp) for tp in wanted}

    def group_metadata(self) -> dict[str, Any]:
        """The group id, member id and generation of this consumer."""
        coordinator = self._require_group()
        member_id, generation, instance_id = self._group.commit_args() if self._group else ("", -1, None)
        return {
            "group_id": coordinator.group_id,
            "member_id": member_id,
            "generation": generation,
            "group_instance_id": instance_id,
        }

    # --- assignment and positions -------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these partitions (positions of partitions kept are kept).

        Raises:
            UnknownTopicOrPartitionError: a partition that does not exist.
            TopicAuthorizationFailedError: a topic the consumer's principal may not describe.
            InvalidTopicError: a name that is not a legal topic name.
        """
        self._require_open()
        if self._subscribed is not None:
            raise IllegalStateError("the consumer is subscribed to a group: unsubscribe() before assign()")
        wanted = [TopicPartition(*tp) for tp in partitions]
        for tp in wanted:
            validate_topic_name(tp.topic)
        metadata = self._cluster.metadata()
        for tp in wanted:
            if not metadata.has_partition(tp):
                metadata = self._cluster.metadata(refresh=True)
                if tp.topic not in metadata.topics:
                    raise self._cluster.missing_topics_error([tp.topic])
                if not metadata.has_partition(tp):
                    raise UnknownTopicOrPartitionError(f"unknown partition {tp.topic}-{tp.partition}")
        self._set_assignment(wanted)

    def _set_assignment(self, wanted: list[TopicPartition]) -> None:
        self._assignment = list(dict.fromkeys(wanted))
        self._positions = {tp: self._positions.get(tp) for tp in self._assignment}
        self._paused &= set(self._assignment)
        self._buffers = {tp: b for tp, b in self._buffers.items() if tp in self._positions}
        self._next_fetch = {tp: o for tp, o in self._next_fetch.items() if tp in self._positions}

    def assignment(self) -> set[TopicPartition]:
        return set(self._assignment)

    def topics(self) -> set[str]:
        """The cluster's topics (internal ones left out), from fresh metadata."""
        return {name for name in self._cluster.metadata(refresh=True).topics if name not in INTERNAL_TOPICS}

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        """The partition numbers of ``topic``, or None for a topic that does not exist (as
        kafka-python's).

        Raises:
            TopicAuthorizationFailedError: the consumer's principal may not describe it
                (whether or not it exists, as Kafka's consumer raises it).
        """
        metadata = self._cluster.metadata()
        if topic not in metadata.topics:
            metadata = self._cluster.metadata(refresh=True)
            if topic not in metadata.topics:
                refused = self._refused_topics([topic])
                if refused is not None:
                    raise refused
                return None
        return set(range(metadata.num_partitions(topic)))

    def _refused_topics(self, missing: list[str]) -> TopicAuthorizationFailedError | None:
        """Why ``missing`` (named, and not in the metadata) are missing, when it is that the
        principal may not describe some of them; None when they just do not exist."""
        error = self._cluster.missing_topics_error(missing)
        return error if isinstance(error, TopicAuthorizationFailedError) else None

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read ``partition`` from ``offset`` on (at the next poll)."""
        tp = self._assigned(partition)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be a non-negative integer, got {offset!r}")
        self._set_position(tp, offset)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        for tp in partitions or self._assignment:
            self._set_position(self._assigned(tp), self._list_offset(tp, EARLIEST_TIMESTAMP).offset)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        for tp in partitions or self._assignment:
            self._set_position(self._assigned(tp), self._list_offset(tp, LATEST_TIMESTAMP).offset)

    def position(self, partition: TopicPartition) -> int:
        """The offset of the next record to be returned (resolving auto_offset_reset)."""
        tp = self._assigned(partition)
        if self._positions[tp] is None:
            self._reset_position(tp)
        return self._positions[tp]

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop fetching these partitions until :meth:`resume`; positions are kept."""
        for tp in partitions:
            self._paused.add(self._assigned(tp))

    def resume(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._paused.discard(self._assigned(tp))

    def paused(self) -> set[TopicPartition]:
        return set(self._paused)

    @property
    def throttle_time_ms(self) -> int:
        """How long the leader held the latest fetch response back for this client's quota (0: not)."""
        return self._throttle_time_ms

    def offsets_for_times(
        self, timestamps: dict[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """For each partition the first offset whose timestamp is >= the given one (None if
        no committed record is that recent)."""
        out = {}
        for tp, ts in timestamps.items():
            if ts < 0:
                raise ValueError(f"timestamp must be >= 0, got {ts}")
            found = self._list_offset(TopicPartition(*tp), ts)
            out[TopicPartition(*tp)] = None if found.offset < 0 else found
        return out

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._offsets_at(partitions, EARLIEST_TIMESTAMP)

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The high watermark of each partition (the offset the next committed record gets)."""
        return self._offsets_at(partitions, LATEST_TIMESTAMP)

    def _offsets_at(self, partitions: Iterable[TopicPartition], timestamp: int) -> dict[TopicPartition, int]:
        tps = [TopicPartition(*tp) for tp in partitions]
        found = list_offsets(self._cluster, tps, timestamp, self._timeout_s, self._isolation, self._session.token())
        return {tp: o.offset for tp, o in found.items()}

    # --- polling ------------------------------------------------------------------------

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> dict[TopicPartition, list[Record]]:
        """Records fetched since the last poll, waiting up to ``timeout_ms`` for some.

        Raises:
            NoOffsetForPartitionError: auto_offset_reset="none" and a position is unknown.
            CorruptRecordError: a fetched batch failed its checks.
            TopicAuthorizationFailedError: the subscription names topics the consumer's
                principal may not describe (once per metadata refresh, as Kafka's consumer:
                the other topics are assigned and read by the next polls).
        """
        out: dict[TopicPartition, list[Record]] = {}
        for tp, table, log_append_time in self._poll_tables(timeout_ms, max_records or self._max_records):
            out[tp] = self._records(tp, table, log_append_time)
        return out

    def poll_arrow(self, timeout_ms: int = 0, max_records: int | None = None) -> pa.Table:
        """Like :meth:`poll`, as one Arrow table: topic, partition, offset, timestamp, key,
        value, headers (keys and values as bytes; deserializers are not applied)."""
        tables = [
            table.add_column(0, "topic", _repeated_string(tp.topic, table.num_rows)).add_column(
                1, "partition", record_batch.arrow_of(np.full(table.num_rows, tp.partition, dtype=np.int32))
            )
            for tp, table, _ in self._poll_tables(timeout_ms, max_records or 2**62)
        ]
        return pa.concat_tables(tables) if tables else ARROW_SCHEMA.empty_table()

    def __iter__(self) -> Iterator[Record]:
        idle_since = time.monotonic()
        while not self._closed:
            batch = self.poll(timeout_ms=self._max_wait_ms or 100)
            if batch:
                idle_since = time.monotonic()
                for records in batch.values():
                    yield from records
            elif (
                self._iteration_timeout_ms is not None
                and (time.monotonic() - idle_since) * 1000 >= self._iteration_timeout_ms
            ):
                return

    def close(self) -> None:
        """Stop; fetches in flight are abandoned. A group member commits (with auto-commit)
        and leaves its group, so the others rebalance at once. Idempotent."""
        if self._closed:
            return
        try:
            if self._group is not None:
                self._leave_group()
            self._finish_async_commits(wait=True)
        finally:
            self._closed = True
            self._in_flight.clear()
        self._fetching.clear()
        self._buffers.clear()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # --- internals ----------------------------------------------------------------------

    def _poll_tables(self, timeout_ms: int, max_records: int) -> list[tuple[TopicPartition, pa.Table, LogAppendTime]]:
        self._require_open()
        if not self._assignment and self._group is None:
            raise IllegalStateError("no partitions assigned: give topics, call assign() or subscribe()")
        deadline = time.monotonic() + max(0, timeout_ms) / 1000
        self._finish_async_commits(wait=False)
        self._maybe_auto_commit()
        while True:
            if self._group is not None:
                self._group.maintain()
            refused, self._refused = self._refused, None
            if refused is not None:
                raise refused
            self._send_fetches()
            out = self._drain(max_records)
            remaining = deadline - time.monotonic()
            waiting = list(self._in_flight) + (self._group.waitables() if self._group else [])
            if out or remaining <= 0:
                return out
            # A throttled partition is fetched again once its throttle time has passed.
            throttled_s = min(self._throttled_until.values(), default=math.inf) - time.monotonic()
            if not waiting:
                if self._group is None and throttled_s == math.inf:
                    return out
                time.sleep(max(0.0, min(remaining, throttled_s, GROUP_IDLE_STEP_S if self._group else math.inf)))
                continue
            ready, _ = ray.wait(waiting, num_returns=1, timeout=max(0.0, min(remaining, throttled_s)))
            for ref in ready + ray.wait(waiting, num_returns=len(waiting), timeout=0)[0]:
                if ref in self._in_flight:
                    self._complete_fetch(ref)

    def _send_fetches(self) -> None:
        now = time.monotonic()
        for tp in [tp for tp, until in self._throttled_until.items() if until <= now]:
            del self._throttled_until[tp]
        fetchable = [
            tp
            for tp in self._assignment
            if tp not in self._fetching
            and tp not in self._paused
            and tp not in self._throttled_until
            and len(self._buffers.get(tp, ())) < BUFFERED_FETCHES
        ]
        self._reset_positions([tp for tp in fetchable if self._positions[tp] is None])
        if fetchable:
            self._fetch_turn = (self._fetch_turn + 1) % len(fetchable)
            fetchable = fetchable[self._fetch_turn :] + fetchable[: self._fetch_turn]
        used = sum(b.nbytes for queue in self._buffers.values() for b in queue)
        used += sum(expected for *_, expected in self._in_flight.values())
        for tp in fetchable:
            metadata = self._cluster.metadata()
            try:
                leader, epoch = metadata.leader(tp), metadata.leader_epoch(tp)
                if self._validated_epochs.get(tp, epoch) != epoch and not self._validate_position(tp, leader, epoch):
                    continue
            except RaylogError:
                self._cluster.metadata(refresh=True)
                continue
            offset = self._next_fetch.get(tp, self._positions[tp])
            # Records to read: a share of fetch_max_bytes, answered at once. Not known yet (the
            # first fetch): the same, without a long poll, so that the answer tells.
            max_wait_ms = self._max_wait_ms
            if offset < self._high_watermarks.get(tp, offset + 1):
                plan = fetch_ask(used, self._fetch_max_bytes, self._partition_max_bytes, self._batch_bytes.get(tp, 0))
                if plan is None:
                    continue  # its turn comes once buffered records are handed out
                max_bytes, expected = plan
                if tp not in self._high_watermarks:
                    max_wait_ms = 0
            else:  # caught up: a long poll, answered when records come; it holds no share
                max_bytes, expected = self._max_bytes(), 0
            request = FetchRequest(
                offset,
                max_bytes,
                self._min_bytes,
                max_wait_ms,
                current_leader_epoch=epoch,
                client_id=self._client_id,
                isolation_level=self._isolation,
                session=self._session.token(),
            )
            ref = leader.fetch.remote(request)
            self._in_flight[ref] = (tp, offset, epoch, expected)
            self._fetching[tp] = ref
            used += expected

    def _max_bytes(self) -> int:
        """What a caught-up partition's long poll asks: its share of ``fetch_max_bytes`` among
        the partitions assigned, at most ``max_partition_fetch_bytes``."""
        return min(self._partition_max_bytes, max(1, self._fetch_max_bytes // max(1, len(self._assignment))))

    def _validate_position(self, tp: TopicPartition, leader: Any, epoch: int) -> bool:
        """After a leader change, ask the new leader where the epoch of the last fetched batch
        ends there (KIP-320): if before our position, the log was truncated under us (an unclean
        election): go back to where it diverged (or raise, with auto_offset_reset "none"), so
        that the records now at those offsets are read, not skipped. False: try again later.

        Raises:
            LogTruncationError: truncation found and auto_offset_reset is "none".
        """
        fetched = self._fetched_epochs.get(tp)
        if fetched is None:
            self._validated_epochs[tp] = epoch
            return True
        code, found, end = call(leader.end_offset_for_epoch.remote(fetched, self._session.token()), self._timeout_s)
        if code:
            self._cluster.metadata(refresh=True)
            return False
        self._validated_epochs[tp] = epoch
        position = self._next_fetch.get(tp, self._positions[tp])
        if found < 0 or end >= position:
            return True
        consumed = self._positions[tp]
        log.warning(
            "%s: log truncated at %d (epoch %d) below our position %d: reading on from there",
            tp,
            end,
            fetched,
            position,
        )
        if self._reset == "none":
            raise LogTruncationError(f"{tp}: the log diverged at offset {end}, before our position {position}")
        self._set_position(tp, min(end, consumed) if consumed is not None else end)
        return True

    def _complete_fetch(self, ref: Any) -> None:
        tp, offset, epoch, _ = self._in_flight.pop(ref)
        if self._fetching.get(tp) == ref:
            del self._fetching[tp]
        try:
            response = ray.get(ref)
        except RayError as exc:
            error = translate(exc)
            if error.retriable:
                self._cluster.metadata(refresh=True)
                return
            raise error from None
        self._throttle_time_ms = response.throttle_time_ms
        if response.throttle_time_ms:
            metrics.record_throttle("consumer", self._client_id, response.throttle_time_ms)
            self._throttled_until[tp] = time.monotonic() + response.throttle_time_ms / 1000
        if self._next_fetch.get(tp, self._positions.get(tp)) != offset:
            return  # sought elsewhere (or unassigned) meanwhile
        error = error_of(response)
        if isinstance(error, OffsetOutOfRangeError):
            self._reset_position(tp)
            return
        if error is not None:
            if error.invalid_metadata or error.retriable:
                self._cluster.metadata(refresh=True)
                return
            raise error
        end = response.last_stable_offset if self._read_committed else response.high_watermark
        self._high_watermarks[tp] = end
        if len(response.records):
            self._batch_bytes[tp] = len(response.records)
            table = record_batch.decode_table(
                response.records,
                check_crcs=self._check_crcs,
                min_offset=offset,
                aborted=response.aborted_transactions if self._read_committed else None,
            )
            headers = list(record_batch.iter_headers(response.records))
            # Past the last batch, also where compaction removed its last records.
            last = headers[-1][1]
            after = last.next_offset
            self._fetched_epochs[tp], self._validated_epochs[tp] = last.leader_epoch, epoch
            if table.num_rows:
                buffered = _Buffered(table, len(response.records), log_append_time_ranges(headers))
                self._buffers.setdefault(tp, collections.deque()).append(buffered)
                self._next_fetch[tp] = max(after, table.column("offset")[-1].as_py() + 1)
                if self._coordinator is not None:
                    lag = max(0, end - self._next_fetch[tp])
                    metrics.record_consumer_lag(self._coordinator.group_id, tp.topic, tp.partition, lag)
            else:
                # Batches wholly below the position (e.g. control batches): skip past them.
                self._next_fetch[tp] = max(offset, after)
                if not self._buffers.get(tp):
                    self._positions[tp] = self._next_fetch[tp]

    def _drain(self, max_records: int) -> list[tuple[TopicPartition, pa.Table, LogAppendTime]]:
        out = []
        for tp in list(self._buffers):
            if max_records <= 0:
                break
            if tp in self._paused:
                continue
            queue = self._buffers[tp]
            buffered = queue[0]
            take = min(max_records, buffered.table.num_rows - buffered.cursor)
            table = buffered.table.slice(buffered.cursor, take)
            buffered.cursor += take
            if buffered.cursor >= buffered.table.num_rows:
                queue.popleft()
                if not queue:
                    del self._buffers[tp]
            if tp in self._buffers:
                self._positions[tp] = table.column("offset")[-1].as_py() + 1
            else:
                # Everything fetched is handed out: the position moves past what the fetches
                # skipped after the last record too (a transaction's marker, aborted records),
                # as Kafka's does, so that a read up to the last stable offset ends there.
                self._positions[tp] = self._next_fetch[tp]
            out.append((tp, table, buffered.log_append_time))
            max_records -= take
        return out

    def _records(self, tp: TopicPartition, table: pa.Table, log_append_time: LogAppendTime) -> list[Record]:
        n = table.num_rows
        offsets = table.column("offset").to_pylist()
        keys = table.column("key").to_pylist()
        values = table.column("value").to_pylist()
        if self._key_deserializer is not None:
            keys = [None if k is None else self._key_deserializer(k) for k in keys]
        if self._value_deserializer is not None:
            values = [None if v is None else self._value_deserializer(v) for v in values]
        header_column = table.column("headers")
        if header_column.null_count == n:
            headers: list = [[] for _ in range(n)]
        else:
            headers = [[(h["key"], h["value"]) for h in hs] if hs else [] for hs in header_column.to_pylist()]
        # tuple.__new__ builds each Record in C (Record(...) runs its Python __new__ per record).
        fields = zip(
            itertools.repeat(tp.topic, n),
            itertools.repeat(tp.partition, n),
            offsets,
            table.column("timestamp").to_pylist(),
            keys,
            values,
            headers,
            timestamp_types(offsets, log_append_time),
            strict=True,
        )
        return list(map(tuple.__new__, itertools.repeat(Record, n), fields))

    def _set_position(self, tp: TopicPartition, offset: int) -> None:
        self._positions[tp] = offset
        self._next_fetch.pop(tp, None)
        self._fetched_epochs.pop(tp, None)
        self._buffers.pop(tp, None)
        self._fetching.pop(tp, None)  # a fetch in flight for the old offset is ignored on arrival

    def _reset_position(self, tp: TopicPartition) -> None:
        self._reset_positions([tp])

    def _reset_positions(self, tps: list[TopicPartition]) -> None:
        """Positions by ``auto_offset_reset``, the partitions' leaders asked all at once."""
        if not tps:
            return
        if self._reset == "none":
            raise NoOffsetForPartitionError(f"no position for {tps[0]} and auto_offset_reset is none")
        timestamp = EARLIEST_TIMESTAMP if self._reset == "earliest" else LATEST_TIMESTAMP
        token = self._session.token()
        for tp, found in list_offsets(self._cluster, tps, timestamp, self._timeout_s, self._isolation, token).items():
            self._set_position(tp, found.offset)

    def _list_offset(self, tp: TopicPartition, timestamp: int) -> OffsetAndTimestamp:
        return list_offset(self._cluster, tp, timestamp, self._timeout_s, self._isolation, self._session.token())

    def _assigned(self, tp: Any) -> TopicPartition:
        tp = TopicPartition(*tp)
        if tp not in self._positions:
            raise IllegalStateError(f"{tp} is not assigned to this consumer")
        return tp

    def _require_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the consumer is closed")

    # --- group internals ------------------------------------------------------------------

    def _require_group(self) -> CoordinatorClient:
        self._require_open()
        if self._coordinator is None:
            raise IllegalStateError("this needs a group_id")
        return self._coordinator

    def _subscribed_partition_counts(self) -> dict[str, int]:
        """Topic -> partition count of what the subscription covers now (metadata refreshed
        every metadata_max_age_ms); topics that do not exist yet are left out, and so are
        named ones the principal may not describe (the next poll raises that)."""
        now = time.monotonic()
        refresh = (now - self._metadata_checked) * 1000 >= self._config["metadata_max_age_ms"]
        if refresh:
            self._metadata_checked = now
        topics = self._cluster.metadata(refresh=refresh).topics
        if isinstance(self._subscribed, re.Pattern):
            names = [t for t in topics if t not in INTERNAL_TOPICS and self._subscribed.fullmatch(t)]
        else:
            names = [t for t in self._subscribed or () if t in topics]
            missing = [t for t in self._subscribed or () if t not in topics]
            if refresh and missing:
                self._refused = self._refused_topics(missing)
        return {t: len(topics[t].partitions) for t in sorted(names)}

    def _apply_group_assignment(self, added: list[TopicPartition], revoked: list[TopicPartition]) -> None:
        """Take a rebalance's outcome: drop revoked partitions (and anything buffered for
        them), start added ones at the group's committed offsets."""
        if revoked and self._config["enable_auto_commit"]:
            self._commit_quietly({tp: self._positions[tp] for tp in revoked if self._positions.get(tp) is not None})
        revoked_set = set(revoked)
        self._set_assignment([tp for tp in self._assignment if tp not in revoked_set] + list(added))
        if added:
            committed = committed_offsets(self._coordinator, added)
            for tp in added:
                if tp in committed:
                    self._set_committed_position(tp, committed[tp])

    def _commit_offsets(self, offsets: dict | None) -> dict[TopicPartition, OffsetAndMetadata]:
        if offsets is None:
            return {
                tp: OffsetAndMetadata(self._positions[tp], "", self._position_epoch(tp))
                for tp in self._assignment
                if self._positions.get(tp) is not None
            }
        return offsets_to_commit(offsets)

    def _position_epoch(self, tp: TopicPartition) -> int:
        """The leader epoch of the last record read before the position, committed with it
        (KIP-320): known when every fetched record was handed out (the last fetched batch's),
        else -1. A marker or an aborted batch after the last record may say a later epoch;
        a later epoch can only hide a truncation from the next reader, never invent one."""
        if self._next_fetch.get(tp) != self._positions[tp]:
            return -1
        return self._fetched_epochs.get(tp, -1)

    def _set_committed_position(self, tp: TopicPartition, committed: OffsetAndMetadata) -> None:
        """Start from a committed offset. With its leader epoch, the first fetch asks the
        leader where that epoch ends, as Kafka's consumer does (KIP-320): a log truncated
        under the committed offset (an unclean election) is read again from where it
        diverged, not skipped."""
        self._set_position(tp, committed.offset)
        if committed.leader_epoch >= 0:
            self._fetched_epochs[tp] = committed.leader_epoch
            self._validated_epochs[tp] = -1  # never a leader epoch: the next fetch validates

    def _commit_quietly(self, offsets: dict) -> None:
        """An automatic commit: a failure (the generation is over) only means the next owner
        starts from the previous commit (at least once)."""
        try:
            self.commit(offsets)
        except (CommitFailedError, RaylogError):
            pass

    def _maybe_auto_commit(self) -> None:
        if self._group is None or not self._config["enable_auto_commit"]:
            return
        now = time.monotonic()
        if now >= self._next_auto_commit:
            self._next_auto_commit = now + self._config["auto_commit_interval_ms"] / 1000
            if self._group.commit_args()[1] >= 0:
                self.commit_async()

    def _finish_async_commits(self, wait: bool) -> None:
        """Run the callbacks of the answered commit_async calls, in the order of the calls
        (those after one still unanswered wait for it); ``wait``: for up to the timeout."""
        if not self._async_commits:
            return
        refs = [ref for ref, _, _ in self._async_commits]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=self._timeout_s if wait else 0)
        done = set(ready)
        pending = []
        for ref, offsets, callback in self._async_commits:
            if pending or ref not in done:
                pending.append((ref, offsets, callback))
                continue
            error: Exception | None = None
            try:
                self._coordinator.check(call(ref, None))
            except RaylogError as exc:
                error = exc
                self._coordinator.after_error(exc)
            if callback is not None:
                callback(offsets, error)
        self._async_commits = pending

    def _leave_group(self) -> None:
        group = self._group
        try:
            # Still a member here, so commits (automatic, or the listener's own) are accepted.
            if self._config["enable_auto_commit"]:
                self._commit_quietly({tp: p for tp, p in self._positions.items() if p is not None})
            if self._assignment:
                group.listener.on_partitions_revoked(list(self._assignment))
        finally:
            self._group = None
            group.close(leave=True)


def _rebuild_member(cluster: RaylogCluster, config: dict, subscription: tuple | str) -> Consumer:
    consumer = Consumer(cluster, **config)
    if isinstance(subscription, str):
        consumer.subscribe(pattern=subscription)
    else:
        consumer.subscribe(list(subscription))
    return consumer


def _rebuild_consumer(cluster: RaylogCluster, config: dict, assignment: list, positions: dict) -> Consumer:
    consumer = Consumer(cluster, **config)
    consumer.assign(assignment)
    for tp, offset in positions.items():
        if offset is not None:
            consumer.seek(tp, offset)
    return consumer


def list_offsets(
    cluster: RaylogCluster,
    tps: list[TopicPartition],
    timestamp: int,
    timeout_s: float,
    isolation_level: int = READ_UNCOMMITTED,
    session: str | None = None,
) -> dict[TopicPartition, OffsetAndTimestamp]:
    """:func:`list_offset` of many partitions: their leaders asked at once (a consumer of
    hundreds of partitions must not ask them one after another), any that failed then asked
    again one by one, with :func:`list_offset`'s retries."""
    metadata = cluster.metadata()
    asked = {}
    for tp in tps:
        try:
            leader = metadata.leader(tp)
            asked[tp] = leader.list_offsets.remote(timestamp, metadata.leader_epoch(tp), isolation_level, session)
        except RaylogError:
            pass
    found = {}
    for tp in tps:
        try:
            response = call(asked[tp], timeout_s) if tp in asked else None
        except RaylogError:
            response = None
        if response is not None and error_of(response) is None:
            found[tp] = OffsetAndTimestamp(response.offset, response.timestamp_ms)
        else:
            found[tp] = list_offset(cluster, tp, timestamp, timeout_s, isolation_level, session)
    return found


def list_offset(
    cluster: RaylogCluster,
    tp: TopicPartition,
    timestamp: int,
    timeout_s: float,
    isolation_level: int = READ_UNCOMMITTED,
    session: str | None = None,
) -> OffsetAndTimestamp:
    """The offset of ``tp`` for ``timestamp`` (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP — the high
    watermark, or the LSO read_committed — or a time), asking its leader with the leader epoch the metadata says (so a
    deposed leader cannot answer, KIP-320); retriable errors (a moving leader, a new leader
    whose HW has not reached its epoch yet) are retried after a metadata refresh until
    ``timeout_s``.

    Raises:
        UnknownTopicOrPartitionError, LeaderNotAvailableError, KafkaTimeoutError, and the
        leader's errors that are not retriable.
    """
    deadline = time.monotonic() + timeout_s
    refresh = False
    while True:
        metadata = cluster.metadata(refresh=refresh)
        refresh = True
        try:
            leader = metadata.leader(tp)
            ref = leader.list_offsets.remote(timestamp, metadata.leader_epoch(tp), isolation_level, session)
            response = call(ref, timeout_s)
            error = error_of(response)
        except RaylogError as exc:
            error = exc
        if error is None:
            return OffsetAndTimestamp(response.offset, response.timestamp_ms)
        if not error.retriable or time.monotonic() >= deadline:
            raise error
        time.sleep(LIST_OFFSETS_BACKOFF_S)
