"""The Consumer: pulls record batches from partition leaders (Kafka's KafkaConsumer).
This module is its public face; the fetcher, the subscription state, the offset look-ups
and the group's coordinator are its neighbours in this package (see
:mod:`raylog.clients.consumer`).

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

import math
import re
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa

from raylog.clients.cluster import RaylogCluster, client_handle, require_cluster
from raylog.clients.consumer.completed_fetch import ARROW_SCHEMA, LogAppendTime, labelled, records_of
from raylog.clients.consumer.consumer_config import ISOLATION_LEVELS, check_config
from raylog.clients.consumer.consumer_coordinator import ConsumerCoordinator
from raylog.clients.consumer.consumer_metadata import ConsumerMetadata
from raylog.clients.consumer.fetcher import Fetcher
from raylog.clients.consumer.offset_fetcher import OffsetFetcher
from raylog.clients.consumer.subscription_state import SubscriptionState
from raylog.clients.group import ConsumerRebalanceListener
from raylog.common.assignors import COOPERATIVE_STICKY
from raylog.common.names import validate_topic_name
from raylog.common.requests import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from raylog.errors import IllegalStateError
from raylog.types import OffsetAndMetadata, OffsetAndTimestamp, Record, TopicPartition

#: Longest a poll sleeps at once while a group member has nothing to wait on.
GROUP_IDLE_STEP_S = 0.05


class Consumer:
    """Reads records from raylog partitions.

    Args:
        cluster: from :func:`raylog.connect`.
        topics: topics whose every partition to read (or call :meth:`assign`).
        auto_offset_reset: "earliest", "latest" or "none".
        fetch_min_bytes, fetch_max_wait_ms: the long poll of each fetch.
        max_partition_fetch_bytes: bytes per partition per fetch (at least one batch); large,
            because a Ray call costs about a millisecond whatever it carries. At most
            ``raylog.common.requests.MAX_READ_BYTES`` (what a leader returns at most).
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
        strategies = check_config(self._config, topics)
        settings = (security_protocol, sasl_mechanism, sasl_plain_username, sasl_plain_password)
        self._cluster, self._session = client_handle(cluster, request_timeout_ms / 1000, *settings)
        self._max_wait_ms = fetch_max_wait_ms
        self._max_records = max_poll_records
        isolation = ISOLATION_LEVELS[isolation_level]
        self._iteration_timeout_ms = consumer_timeout_ms
        self._key_deserializer = key_deserializer
        self._value_deserializer = value_deserializer
        self._closed = False
        self._subscriptions = SubscriptionState(auto_offset_reset)
        self._metadata = ConsumerMetadata(self._cluster, self._subscriptions, metadata_max_age_ms)
        self._offsets = OffsetFetcher(self._cluster, self._session, request_timeout_ms / 1000, isolation)
        self._fetcher = Fetcher(
            self._cluster, self._session, self._subscriptions, self._offsets, self._config, isolation, group_id
        )
        pieces = (self._cluster, self._session, self._subscriptions, self._fetcher, self._metadata, self._config)
        self._coordinator = None if group_id is None else ConsumerCoordinator(*pieces, strategies)
        if topics and group_id is not None:
            self.subscribe(list(topics))
        elif topics:
            self.assign(self._metadata.partitions_of(topics))

    def __reduce__(self):
        # A consumer shipped to another process keeps its assignment and positions, or joins
        # its group there as a new member with the same subscription.
        subscriptions = self._subscriptions
        if subscriptions.subscribed is not None:
            return (_rebuild_member, (self._cluster, self._config, subscriptions.subscription_text()))
        assignment, positions = list(subscriptions.assignment), dict(subscriptions.positions)
        return (_rebuild_consumer, (self._cluster, self._config, assignment, positions))

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
        self._subscriptions.subscribe(topics, pattern)
        self._coordinator.join(listener)

    def subscription(self) -> set[str]:
        """The topics this member subscribes to now (for a pattern: those that match)."""
        if self._subscriptions.subscribed is None:
            return set()
        return set(self._metadata.subscribed_partition_counts())

    def unsubscribe(self) -> None:
        """Leave the group (committing first with auto-commit) and drop every partition."""
        if self._coordinator is not None and self._coordinator.group is not None:
            self._coordinator.leave()
        self._subscriptions.subscribed = None
        self._fetcher.reassign([])

    def commit(self, offsets: dict[TopicPartition, int | OffsetAndMetadata] | None = None) -> None:
        """Commit ``offsets`` (default: the positions of every assigned partition, i.e. all
        that polls returned) for the group, and wait until they are replicated.

        Raises:
            IllegalStateError: no group_id.
            CommitFailedError: this member's generation is over (the group rebalanced).
            UnknownMemberIdError: assigned by hand while the group has active members.
        """
        self._require_group().commit(offsets)

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
        self._require_group().commit_async(offsets, callback)

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
        found = self._require_group().committed(wanted)
        return {tp: found.get(tp) for tp in wanted}

    def group_metadata(self) -> dict[str, Any]:
        """The group id, member id and generation of this consumer."""
        return self._require_group().metadata()

    # --- assignment and positions -------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these partitions (positions of partitions kept are kept).

        Raises:
            UnknownTopicOrPartitionError: a partition that does not exist.
            TopicAuthorizationFailedError: a topic the consumer's principal may not describe.
            InvalidTopicError: a name that is not a legal topic name.
        """
        self._require_open()
        if self._subscriptions.subscribed is not None:
            raise IllegalStateError("the consumer is subscribed to a group: unsubscribe() before assign()")
        wanted = [TopicPartition(*tp) for tp in partitions]
        for tp in wanted:
            validate_topic_name(tp.topic)
        self._metadata.check_partitions(wanted)
        self._fetcher.reassign(wanted)

    def assignment(self) -> set[TopicPartition]:
        return set(self._subscriptions.assignment)

    def topics(self) -> set[str]:
        """The cluster's topics (internal ones left out), from fresh metadata."""
        return self._metadata.topics()

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        """The partition numbers of ``topic``, or None for a topic that does not exist (as
        kafka-python's).

        Raises:
            TopicAuthorizationFailedError: the consumer's principal may not describe it
                (whether or not it exists, as Kafka's consumer raises it).
        """
        return self._metadata.partitions_for_topic(topic)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read ``partition`` from ``offset`` on (at the next poll)."""
        tp = self._subscriptions.assigned(partition)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be a non-negative integer, got {offset!r}")
        self._fetcher.seek(tp, offset)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self._fetcher.seek_to(partitions or self._subscriptions.assignment, EARLIEST_TIMESTAMP)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        self._fetcher.seek_to(partitions or self._subscriptions.assignment, LATEST_TIMESTAMP)

    def position(self, partition: TopicPartition) -> int:
        """The offset of the next record to be returned (resolving auto_offset_reset)."""
        tp = self._subscriptions.assigned(partition)
        if self._subscriptions.positions[tp] is None:
            self._fetcher.reset_positions([tp])
        return self._subscriptions.positions[tp]

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop fetching these partitions until :meth:`resume`; positions are kept."""
        for tp in partitions:
            self._subscriptions.paused.add(self._subscriptions.assigned(tp))

    def resume(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._subscriptions.paused.discard(self._subscriptions.assigned(tp))

    def paused(self) -> set[TopicPartition]:
        return set(self._subscriptions.paused)

    @property
    def throttle_time_ms(self) -> int:
        """How long the leader held the latest fetch response back for this client's quota (0: not)."""
        return self._fetcher.throttle_time_ms

    def offsets_for_times(
        self, timestamps: dict[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """For each partition the first offset whose timestamp is >= the given one (None if
        no committed record is that recent)."""
        return self._offsets.offsets_for_times(timestamps)

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._offsets.offsets_at(partitions, EARLIEST_TIMESTAMP)

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The high watermark of each partition (the offset the next committed record gets)."""
        return self._offsets.offsets_at(partitions, LATEST_TIMESTAMP)

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
        keys, values = self._key_deserializer, self._value_deserializer
        out: dict[TopicPartition, list[Record]] = {}
        for tp, table, log_append_time in self._poll_tables(timeout_ms, max_records or self._max_records):
            out[tp] = records_of(tp, table, log_append_time, keys, values)
        return out

    def poll_arrow(self, timeout_ms: int = 0, max_records: int | None = None) -> pa.Table:
        """Like :meth:`poll`, as one Arrow table: topic, partition, offset, timestamp, key,
        value, headers (keys and values as bytes; deserializers are not applied)."""
        tables = [labelled(tp, table) for tp, table, _ in self._poll_tables(timeout_ms, max_records or 2**62)]
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
            if self._coordinator is not None:
                self._coordinator.close()
        finally:
            self._closed = True
            self._fetcher.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # --- internals ----------------------------------------------------------------------

    def _poll_tables(self, timeout_ms: int, max_records: int) -> list[tuple[TopicPartition, pa.Table, LogAppendTime]]:
        self._require_open()
        coordinator = self._coordinator
        if not self._subscriptions.assignment and (coordinator is None or coordinator.group is None):
            raise IllegalStateError("no partitions assigned: give topics, call assign() or subscribe()")
        deadline = time.monotonic() + max(0, timeout_ms) / 1000
        if coordinator is not None:
            coordinator.finish_async_commits(wait=False)
            coordinator.maybe_auto_commit()
        while True:
            if coordinator is not None:
                coordinator.maintain()
            self._fetcher.send_fetches()
            out = self._fetcher.drain(max_records)
            remaining = deadline - time.monotonic()
            if out or remaining <= 0:
                return out
            member = coordinator is not None and coordinator.group is not None
            others, idle_s = (coordinator.waitables(), GROUP_IDLE_STEP_S) if member else ([], math.inf)
            if not self._fetcher.await_answers(remaining, others, idle_s):
                return out

    def _require_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the consumer is closed")

    def _require_group(self) -> ConsumerCoordinator:
        self._require_open()
        if self._coordinator is None:
            raise IllegalStateError("this needs a group_id")
        return self._coordinator


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
