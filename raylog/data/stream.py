"""Topics as an unbounded Ray Data stream of bounded micro-batches.

The stream (:class:`TopicStream`) reads ranges one after another, each micro-batch from
where the last ended up to the high watermark at that moment, and keeps its progress as the
committed offsets of a consumer group: a batch's ends are committed only after the caller's
work on it succeeded, so a crash repeats at most the batch in flight, and a restarted stream
resumes where the group's commits say. Given a ``transactional_id`` the stream is exactly
once into raylog topics: a batch's output records (:meth:`MicroBatch.write`) and its offsets
commit in one transaction (see :mod:`raylog.clients.exactly_once`).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import ray.data

from raylog.clients.cluster import RaylogCluster
from raylog.clients.consumer import Consumer
from raylog.clients.exactly_once import abort_unless_fenced
from raylog.clients.producer import Producer
from raylog.data.offsets import OffsetSpec, _Bounds, _cluster, _groups, _kind, _partitions, _resolve, _specs
from raylog.data.sink import _records_table, _send_records
from raylog.data.source import RaylogDatasource, _read_dataset
from raylog.errors import IllegalStateError, InvalidConfigError
from raylog.types import OffsetAndMetadata, TopicPartition


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
        return _read_dataset(RaylogDatasource._of_ranges(self._stream.cluster, self.ranges))

    @property
    def record_count(self) -> int:
        """Records in the ranges (an upper bound for a compacted topic)."""
        return sum(end - start for start, end in self.ranges.values())

    def write(
        self,
        data: pa.Table | ray.data.Dataset,
        topic: str,
        *,
        key: str | None = "key",
        value: str = "value",
        headers: str | None = "headers",
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
            headers: the headers column (as :class:`RaylogDatasink`; None or a missing
                column: no headers).

        Returns:
            How many records were sent.

        Raises:
            IllegalStateError: not an exactly-once stream, or this batch is over (committed,
                aborted, or a later batch was asked for).
            UnknownTopicOrPartitionError, InvalidRecordError: as :class:`RaylogDatasink`.
            ProducerFencedError: a newer instance of the stream took over.

        Example:
            >>> with stream.next_batch() as batch:                                    # doctest: +SKIP
            ...     batch.write(batch.dataset.map_batches(enrich), "clicks-enriched")
        """
        tables = [data] if isinstance(data, pa.Table) else data.iter_batches(batch_size=None, batch_format="pyarrow")
        count = 0
        for table in tables:
            if table.num_rows:  # (an empty block may have no columns at all)
                records = _records_table(table, {"key": key, "value": value, "headers": headers})
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
        cluster: a :class:`RaylogCluster`, a Ray address for :func:`raylog.connect`, or None
            for ``raylog.connect()``.
        transactional_id: makes the stream exactly once into raylog topics (see above).
        producer_config: keyword arguments for its transactional :class:`Producer`.

    Raises:
        UnknownTopicOrPartitionError, OffsetOutOfRangeError, InvalidConfigError: as
            :func:`read_topic`.
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
            raise InvalidConfigError(f"trigger_interval_s must be > 0, got {trigger_interval_s!r}")
        for name, limit in (
            ("max_records_per_partition", max_records_per_partition),
            ("max_records_per_batch", max_records_per_batch),
        ):
            if limit is not None and limit < 1:
                raise InvalidConfigError(f"{name} must be >= 1, got {limit!r}")
        self.cluster = _cluster(cluster)
        self.topic = topic
        self.group_id = group_id
        self._trigger_interval_s = trigger_interval_s
        self._max_records = max_records_per_partition
        self._max_batch_records = max_records_per_batch
        self._closed = threading.Event()
        self._lock = threading.Lock()  # the consumer is not thread-safe
        self._next_batch_id = 0
        partitions = _partitions(self.cluster, [topic])
        start_specs = _specs(start, partitions, "earliest")
        for spec in start_specs.values():
            _kind(spec)  # raises for a bad spec before anything starts
        if _groups(start_specs):
            raise InvalidConfigError("a stream's start cannot be Committed(...): its own group's commits come first")
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
        fallback = _resolve(self._consumer, bounds, start_specs)
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
            _send_records(self._producer, topic, records)

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


def _share_limit(ranges: dict[TopicPartition, tuple[int, int]], limit: int) -> dict[TopicPartition, tuple[int, int]]:
    """``ranges`` cut to about ``limit`` records in all, each partition's share in proportion
    to its range's length (rounded down, but at least one record)."""
    total = sum(end - start for start, end in ranges.values())
    if total <= limit:
        return ranges
    shares = {tp: limit * (end - start) / total for tp, (start, end) in ranges.items()}
    return {tp: (start, min(end, start + max(1, int(shares[tp])))) for tp, (start, end) in ranges.items()}
