"""Topics as Ray Data datasets: a bounded read, an unbounded micro-batch stream, a write.

A bounded read covers one offset range ``[start, end)`` per partition (end exclusive) and
runs exactly one Ray Data read task per partition. A read task is a plain :class:`Consumer`
assigned to its partition: each fetched response is already an Arrow table (the consumer
decodes record batches without a loop per record), and it becomes a block as it is, trimmed
at ``end``. Every block has the columns of :meth:`Consumer.poll_arrow`: topic, partition,
offset, timestamp_ms, key, value, headers (an empty list for a record without headers, as
in :class:`Record`).

Where a range starts or ends is an :data:`OffsetSpec`, for all partitions or per partition
in a dict ``{partition: spec}``:

- ``"earliest"`` (the log start offset) or ``"latest"`` (the high watermark);
- an ``int`` offset;
- a :class:`datetime.datetime` with a time zone, or ``Timestamp(timestamp_ms)``: the first
  offset whose record timestamp is at or after it (the high watermark if none is);
- ``Committed(group_id)``: the group's committed offset (``reset`` where it has none).

The stream (:class:`TopicStream`) reads ranges one after another, each micro-batch from
where the last ended up to the high watermark at that moment, and keeps its progress as the
committed offsets of a consumer group: a batch's ends are committed only after the caller's
work on it succeeded, so a crash repeats at most the batch in flight, and a restarted stream
resumes where the group's commits say. Given a ``transactional_id`` the stream is exactly
once into raylog topics: a batch's output records (:meth:`MicroBatch.write`) and its offsets
commit in one transaction (see :mod:`raylog.clients.exactly_once`). :func:`write_topic`
produces from Ray tasks, one idempotent :class:`Producer` per write task.

Everything here uses raylog's public client API, so it works wherever those clients do.
"""

from __future__ import annotations

import datetime
import functools
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import ray.data
from ray.data.block import BlockMetadata
from ray.data.datasource import Datasink, Datasource, ReadTask

import raylog
from raylog.clients.cluster import RaylogCluster
from raylog.clients.consumer import ARROW_SCHEMA, Consumer
from raylog.clients.exactly_once import abort_unless_fenced
from raylog.clients.producer import Producer
from raylog.errors import (
    IllegalStateError,
    InvalidRecordError,
    KafkaTimeoutError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from raylog.types import OffsetAndMetadata, TopicPartition

#: How long one poll of a read task waits for records (it loops until its range is read).
READ_POLL_TIMEOUT_MS = 1_000
#: CPUs reserved per read task: a read mostly waits for its partition leader's fetches, and
#: decoding is a zero-copy Arrow read, so a whole CPU each would run only as many partitions
#: at once as there are CPUs (measured here: 6 partitions of 1M records read 2x faster at 0.25).
READ_TASK_CPUS = 0.25
#: The dataset's target_max_block_size (Ray Data's default is 128 MiB): a read task's
#: fetched responses (up to ``max_partition_fetch_bytes`` each) are gathered into blocks of
#: about this size. Blocks of 128 MiB hold a read task's share of the object store budget
#: while Ray Data lets one task run at a time (10M records of 100 B over 6 partitions read in
#: 7-10 s here, 0.08-0.15x a Consumer); 32 MiB let them stream (1.7 s, 0.41-0.45x), 16 MiB
#: and 1 MiB (responses cut up) were slower again.
READ_BLOCK_BYTES = 32 << 20
#: A read task that got no record for this long while its range is not read fails
#: (a partition without a leader, or records below the high watermark that are gone).
READ_STALL_TIMEOUT_S = 120.0


class Timestamp(NamedTuple):
    """A point in time in milliseconds since the epoch, as an :data:`OffsetSpec`."""

    timestamp_ms: int


class Committed(NamedTuple):
    """A consumer group's committed offsets, as an :data:`OffsetSpec`.

    Args:
        group_id: the group whose commits to use.
        reset: where a partition the group never committed starts: "earliest" or "latest".
    """

    group_id: str
    reset: str = "earliest"


#: Where a range starts or ends, for one partition.
PartitionSpec = str | int | datetime.datetime | Timestamp | Committed
#: Where ranges start or end: one spec for every partition, or a dict by partition number
#: (partitions missing from it use the default: "earliest" for a start, "latest" for an end).
OffsetSpec = PartitionSpec | dict[int, PartitionSpec]


def read_topic(
    topic: str,
    *,
    start: OffsetSpec = "earliest",
    end: OffsetSpec = "latest",
    cluster: RaylogCluster | None = None,
) -> ray.data.Dataset:
    """A bounded dataset of the records of ``topic`` in ``[start, end)`` of each partition.

    Args:
        topic: the topic to read.
        start: where each partition's range starts (inclusive); see :data:`OffsetSpec`.
        end: where it ends (exclusive); at most the high watermark at the time of this call.
        cluster: from :func:`raylog.connect`; default ``raylog.connect()``.

    Returns:
        A lazy :class:`ray.data.Dataset` with one read task per partition; columns topic,
        partition, offset, timestamp_ms, key, value, headers (empty lists where none).

    Raises:
        UnknownTopicOrPartitionError: no such topic or partition.
        OffsetOutOfRangeError: an offset below the log start offset or above the high watermark.
        ValueError: a start after its end, or a spec that is not one of the forms above.

    Example:
        >>> ds = read_topic("clicks", start="earliest", end="latest", cluster=cluster)  # doctest: +SKIP
        >>> ds.groupby("partition").count().take_all()                                  # doctest: +SKIP
    """
    cluster = cluster or raylog.connect()
    return _dataset(cluster, topic_ranges(topic, start=start, end=end, cluster=cluster))


def topic_ranges(
    topic: str,
    *,
    start: OffsetSpec = "earliest",
    end: OffsetSpec = "latest",
    cluster: RaylogCluster,
) -> dict[TopicPartition, tuple[int, int]]:
    """The ``[start, end)`` offsets of each partition of ``topic``, as :func:`read_topic`
    resolves them (and raises)."""
    partitions = _partitions(cluster, topic)
    with _offset_consumer(cluster, start, end) as consumer:
        return _resolve_ranges(consumer, partitions, start, end)


def write_topic(
    dataset: ray.data.Dataset,
    topic: str,
    *,
    key: str | None = "key",
    value: str = "value",
    cluster: RaylogCluster | None = None,
    producer_config: dict[str, Any] | None = None,
) -> int:
    """Produce every row of ``dataset`` to ``topic`` from Ray tasks.

    Each write task runs one idempotent :class:`Producer` that sends its blocks with
    ``send_arrow`` (keyed rows land on murmur2 of the key, like Kafka) and flushes before
    the task ends, so the call returns once every record is acknowledged.

    Args:
        dataset: the rows to produce.
        topic: an existing topic.
        key: the key column (binary or string; None or a missing column: no keys).
        value: the value column (binary or string).
        cluster: from :func:`raylog.connect`; default ``raylog.connect()``.
        producer_config: keyword arguments for each task's :class:`Producer`.

    Returns:
        How many records were written.

    Raises:
        UnknownTopicOrPartitionError: no such topic.
        InvalidRecordError: a key or value column that is neither binary nor string.
        KeyError: no ``value`` column.

    Example:
        >>> ds = ray.data.from_items([{"key": b"u1", "value": b"click"}])  # doctest: +SKIP
        >>> write_topic(ds, "clicks", cluster=cluster)                      # doctest: +SKIP
        1
    """
    cluster = cluster or raylog.connect()
    _partitions(cluster, topic)  # fail here, not in a task, for an unknown topic
    sink = _TopicDatasink(cluster, topic, key, value, dict(producer_config or {}))
    dataset.write_datasink(sink)
    return sink.records_written


class MicroBatch:
    """One batch of a :class:`TopicStream`: a bounded dataset and the ranges it covers.

    Use as a context manager to commit when the block exits without an exception, or call
    :meth:`commit` once the work on :attr:`dataset` succeeded. In an exactly-once stream,
    :meth:`write` produces the batch's output in its transaction, and a block that exits
    with an exception aborts it (the stream reads the batch again).

    Concurrency: :meth:`write` and :meth:`commit` are thread-safe (they go through the
    stream's lock).

    Attributes:
        batch_id: 0, 1, 2, ... in the order the stream handed batches out.
        ranges: ``{TopicPartition: (start, end)}``, end exclusive, partitions with records only.
    """

    def __init__(self, stream: TopicStream, batch_id: int, ranges: dict[TopicPartition, tuple[int, int]]):
        self.batch_id = batch_id
        self.ranges = ranges
        self._stream = stream
        self.committed = False

    @functools.cached_property
    def dataset(self) -> ray.data.Dataset:
        """The records in :attr:`ranges` (see :func:`read_topic`), planned on first use."""
        return _dataset(self._stream.cluster, self.ranges)

    @property
    def record_count(self) -> int:
        """Records in the ranges (an upper bound for a compacted topic)."""
        return sum(end - start for start, end in self.ranges.values())

    def write(
        self, data: pa.Table | ray.data.Dataset, topic: str, *, key: str | None = "key", value: str = "value"
    ) -> int:
        """Produce the rows of ``data`` to ``topic`` in this batch's transaction (a stream with a
        ``transactional_id`` only): read_committed consumers read them once :meth:`commit`
        commits them together with the batch's offsets, or never.

        The rows go through the stream's one transactional producer, from this process: a
        dataset is executed here block by block, each block sent with ``send_arrow`` as it
        comes (so this process holds a few blocks and the producer's buffer at a time).

        Args:
            data: an Arrow table, or a dataset (e.g. made from :attr:`dataset`).
            topic: an existing topic.
            key: the key column (binary or string; None or a missing column: no keys).
            value: the value column (binary or string).

        Returns:
            How many records were sent.

        Raises:
            IllegalStateError: not an exactly-once stream, or this batch is over (committed,
                aborted, or a later batch was asked for).
            UnknownTopicOrPartitionError, InvalidRecordError, KeyError: as :func:`write_topic`.
            ProducerFencedError: a newer instance of the stream took over.

        Example:
            >>> with stream.next_batch() as batch:                                    # doctest: +SKIP
            ...     batch.write(batch.dataset.map_batches(enrich), "clicks-enriched")
        """
        tables = [data] if isinstance(data, pa.Table) else data.iter_batches(batch_size=None, batch_format="pyarrow")
        count = 0
        for table in tables:
            if table.num_rows:  # (an empty block may have no columns at all)
                records = _records_table(table, key, value)
                self._stream._send(self, topic, records)
                count += records.num_rows
        return count

    def commit(self) -> None:
        """Commit the end of every range for the stream's group (idempotent); in an
        exactly-once stream, with the records :meth:`write` sent, in one transaction.

        Raises:
            RaylogError: the group coordinator refused or could not be reached.
            IllegalStateError: (exactly once) the batch was aborted.
            TransactionAbortableError, ProducerFencedError, ...: (exactly once) the
                transaction failed; it was aborted (unless fenced) and the stream reads the
                batch again.
        """
        if not self.committed:
            self._stream._commit(self)
            self.committed = True

    def __enter__(self) -> MicroBatch:
        return self

    def __exit__(self, exc_type: Any, *exc_info: Any) -> None:
        if exc_type is None:
            self.commit()
        else:
            self._stream._abort(self)


class TopicStream:
    """An unbounded read of a topic as bounded micro-batches, progress kept by a group.

    The stream starts each partition at the group's committed offset, or at ``start`` where
    the group has none. Every batch covers, per partition, from where the previous batch
    ended up to the high watermark when the batch is made (at most
    ``max_records_per_partition``), and a batch is made only when some partition has new
    records: :meth:`next_batch` checks every ``trigger_interval_s`` until one has.

    Iterating commits each batch when the next one is asked for, that is after the loop
    body that used it finished without an exception; a body that raises leaves its batch
    uncommitted, so a restarted stream reads it again. (Leaving the loop with ``break``
    also leaves the last batch uncommitted: commit it first if its work is done.)

    Exactly once: given a ``transactional_id`` (one per pipeline instance, the same across
    its restarts), the stream owns a transactional :class:`Producer` whose
    ``init_transactions`` (when the stream starts, before the group's offsets are read)
    aborts a transaction that an older instance left open and fences that instance. Each
    batch is one transaction: what :meth:`MicroBatch.write` sends and the batch's ends,
    committed for the group with ``send_offsets_to_transaction`` instead of a plain
    commit. A batch that fails (its commit raises, its ``with`` block raises, or it is not
    committed when the next batch is asked for) is aborted: read_committed consumers never
    see its records, and the stream reads it again from the group's committed offsets. So
    the output topics' read_committed view and the group's offsets move together, each
    input record counted once; side effects of the work other than :meth:`MicroBatch.write`
    are not covered. Reads are read_committed, so input written by another exactly-once
    pipeline is read without its aborted records. A transaction starts at the batch's first
    write: keep a batch within the producer's ``transaction_timeout_ms`` (60 s unless
    ``producer_config`` says), past which the coordinator aborts it and fences the stream.

    Concurrency: thread-safe; :meth:`close` from another thread ends a wait in
    :meth:`next_batch` and the iteration.

    Args:
        topic: the topic to read (its partitions when the stream starts).
        group_id: the consumer group whose committed offsets are the stream's progress.
        start: where partitions without a committed offset start (see :data:`OffsetSpec`;
            not ``Committed``).
        trigger_interval_s: how often to look for new records while there are none.
        max_records_per_partition: the largest range per partition in one batch (None: all).
        max_records_per_batch: the most records of one batch in all partitions (None: no
            limit), shared among partitions in proportion to the records each has waiting
            (Spark's ``maxOffsetsPerTrigger``); a partition's share of less than one record
            is one.
        cluster: from :func:`raylog.connect`; default ``raylog.connect()``.
        transactional_id: makes the stream exactly once into raylog topics (see above).
        producer_config: keyword arguments for its transactional :class:`Producer`.

    Raises:
        UnknownTopicOrPartitionError, OffsetOutOfRangeError, ValueError: as :func:`read_topic`.
        ProducerFencedError, KafkaTimeoutError, ...: as :meth:`Producer.init_transactions`.

    Example:
        >>> stream = TopicStream("clicks", "click-counter", cluster=cluster)  # doctest: +SKIP
        >>> for batch in stream:                                              # doctest: +SKIP
        ...     batch.dataset.groupby("key").count().write_parquet("/tmp/counts")
        >>> exactly_once = TopicStream("clicks", "enricher", transactional_id="enricher-0")  # doctest: +SKIP
        >>> for batch in exactly_once:                                                      # doctest: +SKIP
        ...     batch.write(batch.dataset.map_batches(enrich), "clicks-enriched")
    """

    def __init__(
        self,
        topic: str,
        group_id: str,
        *,
        start: OffsetSpec = "earliest",
        trigger_interval_s: float = 1.0,
        max_records_per_partition: int | None = None,
        cluster: RaylogCluster | None = None,
        transactional_id: str | None = None,
        producer_config: dict[str, Any] | None = None,
        max_records_per_batch: int | None = None,
    ):
        if not trigger_interval_s > 0:
            raise ValueError(f"trigger_interval_s must be > 0, got {trigger_interval_s!r}")
        for name, limit in (
            ("max_records_per_partition", max_records_per_partition),
            ("max_records_per_batch", max_records_per_batch),
        ):
            if limit is not None and limit < 1:
                raise ValueError(f"{name} must be >= 1, got {limit!r}")
        if _groups(start):
            raise ValueError("a stream's start cannot be Committed(...): its own group's commits come first")
        self.cluster = cluster or raylog.connect()
        self.topic = topic
        self.group_id = group_id
        self._trigger_interval_s = trigger_interval_s
        self._max_records = max_records_per_partition
        self._max_batch_records = max_records_per_batch
        self._closed = threading.Event()
        self._lock = threading.Lock()  # the consumer is not thread-safe
        self._next_batch_id = 0
        partitions = _partitions(self.cluster, topic)
        #: Exactly once: the producer of every batch's transaction, and the batch whose
        #: transaction is open (handed out, neither committed nor aborted).
        self._producer: Producer | None = None
        self._open_batch: MicroBatch | None = None
        if transactional_id is not None:
            self._producer = Producer(self.cluster, transactional_id=transactional_id, **(producer_config or {}))
            self._producer.init_transactions()  # first: an older instance's offsets are then decided
        self._consumer = Consumer(self.cluster, group_id=group_id, enable_auto_commit=False)
        self._consumer.assign(partitions)
        committed = self._consumer.committed(partitions)
        bounds = _Bounds(self._consumer, partitions)
        fallback = _resolve(self._consumer, bounds, partitions, start, "earliest")
        self._positions = {tp: committed[tp].offset if committed[tp] else fallback[tp] for tp in partitions}
        bounds.check(self._positions)

    def next_batch(self, timeout_s: float | None = None) -> MicroBatch | None:
        """The next micro-batch, waiting until some partition has new records. (Exactly once:
        a batch handed out before and not committed is aborted first, and read again.)

        Args:
            timeout_s: how long to wait for new records (None: until :meth:`close`).

        Returns:
            A :class:`MicroBatch`, or None when the wait timed out or the stream was closed.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            with self._lock:
                if self._closed.is_set():
                    return None
                if self._open_batch is not None:
                    self._abort_open_batch()  # not committed: failed, read again
                ends = self._consumer.end_offsets(self._positions)
                ranges = {}
                for tp, position in self._positions.items():
                    end = ends[tp] if self._max_records is None else min(ends[tp], position + self._max_records)
                    if end > position:
                        ranges[tp] = (position, end)
                if self._max_batch_records is not None:
                    ranges = _share_limit(ranges, self._max_batch_records)
                if ranges:
                    batch = MicroBatch(self, self._next_batch_id, ranges)
                    self._next_batch_id += 1
                    self._positions.update({tp: end for tp, (_, end) in ranges.items()})
                    if self._producer is not None:
                        self._producer.begin_transaction()
                        self._open_batch = batch
                    return batch
            wait_s = self._trigger_interval_s
            if deadline is not None:
                wait_s = min(wait_s, deadline - time.monotonic())
                if wait_s <= 0:
                    return None
            self._closed.wait(wait_s)

    def __iter__(self) -> Iterator[MicroBatch]:
        while True:
            batch = self.next_batch()
            if batch is None:
                return
            yield batch
            batch.commit()

    def close(self) -> None:
        """Stop: a waiting :meth:`next_batch` returns None; uncommitted batches stay so (in an
        exactly-once stream, the open transaction is aborted). Idempotent.

        Raises:
            KafkaTimeoutError, RaylogError: the abort did not go through (a successor's
                ``init_transactions`` settles it); the clients are closed all the same.
        """
        self._closed.set()
        with self._lock:
            try:
                if self._open_batch is not None:
                    self._open_batch = None
                    abort_unless_fenced(self._producer)
            finally:
                self._consumer.close()
                if self._producer is not None:
                    self._producer.close()

    def __enter__(self) -> TopicStream:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def _commit(self, batch: MicroBatch) -> None:
        ends = {tp: OffsetAndMetadata(end) for tp, (_, end) in batch.ranges.items()}
        with self._lock:
            if self._producer is None:
                self._consumer.commit(ends)
                return
            self._require_open(batch)
            try:
                self._producer.send_offsets_to_transaction(ends, self.group_id)
                self._producer.commit_transaction()
            except BaseException:
                self._abort_open_batch()
                raise
            self._open_batch = None

    def _send(self, batch: MicroBatch, topic: str, records: pa.Table) -> None:
        with self._lock:
            self._require_open(batch)
            self._producer.send_arrow(topic, records)

    def _abort(self, batch: MicroBatch) -> None:
        with self._lock:
            if batch is self._open_batch:
                self._abort_open_batch()

    def _require_open(self, batch: MicroBatch) -> None:
        """Raises IllegalStateError unless ``batch``'s transaction is the open one (holding
        ``_lock``)."""
        if self._producer is None:
            raise IllegalStateError("only a stream with a transactional_id writes in a batch's transaction")
        if batch is not self._open_batch:
            raise IllegalStateError(f"batch {batch.batch_id} is over: committed, aborted, or a later one was taken")

    def _abort_open_batch(self) -> None:
        """Abort the open batch's transaction and go back to the group's committed offsets
        of its partitions (the truth after an abort, whatever a failed commit did), or its
        starts where the group has none (holding ``_lock``)."""
        batch, self._open_batch = self._open_batch, None
        abort_unless_fenced(self._producer)
        committed = self._consumer.committed(list(batch.ranges))
        for tp, (start, _) in batch.ranges.items():
            self._positions[tp] = committed[tp].offset if committed[tp] is not None else start


def _share_limit(
    ranges: dict[TopicPartition, tuple[int, int]], limit: int
) -> dict[TopicPartition, tuple[int, int]]:
    """``ranges`` cut to about ``limit`` records in all, each partition's share in proportion
    to its range's length (rounded down, but at least one record)."""
    total = sum(end - start for start, end in ranges.values())
    if total <= limit:
        return ranges
    shares = {tp: limit * (end - start) / total for tp, (start, end) in ranges.items()}
    return {tp: (start, min(end, start + max(1, int(shares[tp])))) for tp, (start, end) in ranges.items()}


# --- resolving offset specs ---------------------------------------------------------------


def _partitions(cluster: RaylogCluster, topic: str) -> list[TopicPartition]:
    (description,) = raylog.Admin(cluster).describe_topics([topic])
    return [TopicPartition(topic, p.partition) for p in description.partitions]


def _groups(spec: OffsetSpec) -> set[str]:
    """The groups whose commits ``spec`` names."""
    return {s.group_id for s in (spec.values() if isinstance(spec, dict) else [spec]) if isinstance(s, Committed)}


def _offset_consumer(cluster: RaylogCluster, start: OffsetSpec, end: OffsetSpec) -> Consumer:
    """A consumer for offset look-ups, in the group that a ``Committed`` spec names."""
    groups = _groups(start) | _groups(end)
    if len(groups) > 1:
        raise ValueError(f"start and end may name one group's commits, not {sorted(groups)}")
    if groups:
        return Consumer(cluster, group_id=groups.pop(), enable_auto_commit=False)
    return Consumer(cluster)


def _resolve_ranges(
    consumer: Consumer, partitions: list[TopicPartition], start: OffsetSpec, end: OffsetSpec
) -> dict[TopicPartition, tuple[int, int]]:
    bounds = _Bounds(consumer, partitions)
    starts = _resolve(consumer, bounds, partitions, start, "earliest")
    ends = _resolve(consumer, bounds, partitions, end, "latest")
    for tp in partitions:
        if starts[tp] > ends[tp]:
            raise ValueError(f"{tp.topic}-{tp.partition}: start {starts[tp]} is after end {ends[tp]}")
    bounds.check(starts)
    bounds.check(ends)
    return {tp: (starts[tp], ends[tp]) for tp in partitions}


class _Bounds:
    """Each partition's log start offset and high watermark, looked up once."""

    def __init__(self, consumer: Consumer, partitions: list[TopicPartition]):
        self.log_start = consumer.beginning_offsets(partitions)
        self.high_watermark = consumer.end_offsets(partitions)

    def check(self, offsets: dict[TopicPartition, int]) -> None:
        """Every offset within ``[log start offset, high watermark]`` of its partition."""
        for tp, offset in offsets.items():
            if not self.log_start[tp] <= offset <= self.high_watermark[tp]:
                raise OffsetOutOfRangeError(
                    f"{tp.topic}-{tp.partition}: offset {offset} is outside "
                    f"[{self.log_start[tp]}, {self.high_watermark[tp]}]"
                )


def _resolve(
    consumer: Consumer, bounds: _Bounds, partitions: list[TopicPartition], spec: OffsetSpec, default: str
) -> dict[TopicPartition, int]:
    """The offset ``spec`` names in each partition."""
    if isinstance(spec, dict):
        unknown = set(spec) - {tp.partition for tp in partitions}
        if unknown:
            raise UnknownTopicOrPartitionError(f"{partitions[0].topic} has no partitions {sorted(unknown)}")
        by_tp = {tp: spec.get(tp.partition, default) for tp in partitions}
    else:
        by_tp = {tp: spec for tp in partitions}
    out: dict[TopicPartition, int] = {}
    kinds: dict[str, list[TopicPartition]] = {}
    for tp, one in by_tp.items():
        kinds.setdefault(_kind(one), []).append(tp)
    for kind, tps in kinds.items():
        if kind == "earliest":
            out.update({tp: bounds.log_start[tp] for tp in tps})
        elif kind == "latest":
            out.update({tp: bounds.high_watermark[tp] for tp in tps})
        elif kind == "offset":
            out.update({tp: by_tp[tp] for tp in tps})
        elif kind == "time":
            found = consumer.offsets_for_times({tp: _timestamp_ms(by_tp[tp]) for tp in tps})
            out.update({tp: found[tp].offset if found[tp] is not None else bounds.high_watermark[tp] for tp in tps})
        else:
            committed = consumer.committed(tps)
            for reset in ("earliest", "latest"):
                fallback = [tp for tp in tps if committed[tp] is None and by_tp[tp].reset == reset]
                out.update(_resolve(consumer, bounds, fallback, reset, reset) if fallback else {})
            out.update({tp: committed[tp].offset for tp in tps if committed[tp] is not None})
    return out


def _kind(spec: Any) -> str:
    if spec in ("earliest", "latest"):
        return spec
    if isinstance(spec, bool):
        raise ValueError(f"not an offset spec: {spec!r}")
    if isinstance(spec, (int, np.integer)):
        if spec < 0:
            raise ValueError(f"offsets are >= 0, got {spec}")
        return "offset"
    if isinstance(spec, (datetime.datetime, Timestamp)):
        return "time"
    if isinstance(spec, Committed):
        if spec.reset not in ("earliest", "latest"):
            raise ValueError(f"Committed.reset must be 'earliest' or 'latest', got {spec.reset!r}")
        return "committed"
    raise ValueError(
        f"not an offset spec: {spec!r} (expected 'earliest', 'latest', an offset, a datetime, "
        "Timestamp(ms), Committed(group_id) or a dict of those by partition)"
    )


def _timestamp_ms(spec: datetime.datetime | Timestamp) -> int:
    if isinstance(spec, Timestamp):
        if spec.timestamp_ms < 0:
            raise ValueError(f"timestamps are >= 0 ms, got {spec.timestamp_ms}")
        return int(spec.timestamp_ms)
    if spec.tzinfo is None:
        raise ValueError(f"a datetime needs a time zone (naive times are ambiguous): {spec!r}")
    return int(spec.timestamp() * 1000)


# --- Ray Data source and sink ---------------------------------------------------------------


def _dataset(cluster: RaylogCluster, ranges: dict[TopicPartition, tuple[int, int]]) -> ray.data.Dataset:
    # As many blocks as tasks: Ray Data would otherwise cut the output of a few read tasks
    # into its default ~200 blocks; each fetched response is one block already.
    dataset = ray.data.read_datasource(
        _TopicDatasource(cluster, ranges), override_num_blocks=len(ranges), num_cpus=READ_TASK_CPUS
    )
    dataset.context.target_max_block_size = READ_BLOCK_BYTES  # (this dataset's copy of the context)
    return dataset


class _TopicDatasource(Datasource):
    """One read task per partition range.

    Concurrency: immutable once built; Ray Data pickles it and runs its read tasks anywhere.
    """

    def __init__(self, cluster: RaylogCluster, ranges: dict[TopicPartition, tuple[int, int]]):
        super().__init__()
        self._cluster = cluster
        self._ranges = ranges

    def get_name(self) -> str:
        return "Raylog"

    def estimate_inmemory_data_size(self) -> int | None:
        return None  # record sizes are unknown until read

    def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None):
        # One task per partition whatever ``parallelism`` asks: a range is read in order by
        # one consumer, as Kafka's design has it (one task per partition, restartable).
        return [
            ReadTask(
                functools.partial(read_range, self._cluster, tp, start, end),
                # Rows are unknown up front: a compacted topic has gaps between offsets.
                BlockMetadata(num_rows=None, size_bytes=None, exec_stats=None, input_files=None),
                schema=ARROW_SCHEMA,
                per_task_row_limit=per_task_row_limit,
            )
            for tp, (start, end) in self._ranges.items()
        ]


def read_range(cluster: RaylogCluster, tp: TopicPartition, start: int, end: int) -> Iterator[pa.Table]:
    """The records of ``tp`` in ``[start, end)``, one Arrow table per fetched response (no
    empty ones: an empty range yields nothing), headers as empty lists where none: what each
    read task of :func:`read_topic` runs, in any process that can reach Ray.

    Raises:
        KafkaTimeoutError: no record came for READ_STALL_TIMEOUT_S below ``end``."""
    if start >= end:
        return
    with Consumer(cluster, auto_offset_reset="none") as consumer:
        consumer.assign([tp])
        consumer.seek(tp, start)
        progress_s = time.monotonic()
        while consumer.position(tp) < end:
            table = consumer.poll_arrow(timeout_ms=READ_POLL_TIMEOUT_MS)
            if table.num_rows == 0:
                if time.monotonic() - progress_s > READ_STALL_TIMEOUT_S:
                    raise KafkaTimeoutError(
                        f"{tp.topic}-{tp.partition}: no records for {READ_STALL_TIMEOUT_S} s "
                        f"at offset {consumer.position(tp)} below end {end}"
                    )
                continue
            progress_s = time.monotonic()
            keep = int(np.searchsorted(table.column("offset").to_numpy(), end))
            if keep:
                yield _headers_not_null(table if keep == table.num_rows else table.slice(0, keep))


def _headers_not_null(table: pa.Table) -> pa.Table:
    """``table`` with an empty list, not null, for records without headers, as
    :class:`Record` has (and as Spark needs: PySpark 3.5 fails to convert a batch whose
    array<struct> column is all null)."""
    headers = table.column("headers")
    if not headers.null_count:
        return table
    headers = headers.combine_chunks()
    lengths = pc.list_value_length(headers).fill_null(0).to_numpy(zero_copy_only=False)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    filled = pa.ListArray.from_arrays(pa.array(offsets), headers.flatten(), type=headers.type)
    return table.set_column(table.schema.get_field_index("headers"), table.schema.field("headers"), filled)


class _TopicDatasink(Datasink):
    """Each write task sends its blocks through one idempotent producer, then flushes.

    Concurrency: every write task gets its own unpickled copy; ``records_written`` is set on
    the driver's copy when the write completes.
    """

    def __init__(self, cluster: RaylogCluster, topic: str, key: str | None, value: str, producer_config: dict):
        self._cluster = cluster
        self._topic = topic
        self._key = key
        self._value = value
        self._producer_config = producer_config
        self.records_written = 0

    def get_name(self) -> str:
        return "Raylog"

    def write(self, blocks: Iterable[Any], ctx: Any) -> int:
        count = 0
        with Producer(self._cluster, **self._producer_config) as producer:
            futures = []
            for block in blocks:
                block = pa.table(block)
                if not block.num_rows:
                    continue  # e.g. an empty shuffle output, which may have no columns at all
                table = _records_table(block, self._key, self._value)
                if table.num_rows:
                    futures.append(producer.send_arrow(self._topic, table))
                    count += table.num_rows
            producer.flush()
            for future in futures:
                future.result()  # raises the typed error of a batch that failed
        return count

    def on_write_complete(self, write_result: Any) -> None:
        self.records_written = sum(write_result.write_returns)


def _records_table(block: pa.Table, key: str | None, value: str) -> pa.Table:
    """The ``key`` and ``value`` columns of a block, as binary."""
    columns = {"value": _binary(block.column(value), value)}
    if key is not None and key in block.column_names:
        columns["key"] = _binary(block.column(key), key)
    return pa.table(columns)


def _binary(column: pa.ChunkedArray, name: str) -> pa.ChunkedArray:
    if pa.types.is_binary(column.type):
        return column
    if (
        pa.types.is_large_binary(column.type)
        or pa.types.is_string(column.type)
        or pa.types.is_large_string(column.type)
    ):
        return column.cast(pa.binary())
    raise InvalidRecordError(f"column {name!r} must be binary or string, got {column.type}")
