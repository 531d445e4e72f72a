"""The Producer: accumulates records per partition into record batches and ships them to
partition leaders from a background sender thread.

``send()`` only serializes, picks a partition and appends to that partition's open batch;
it returns a light future that shares its batch's completion state. A batch closes when
it reaches ``batch_size`` bytes or ``linger_ms`` after it opened (or on ``flush``); the
sender encodes it once into the record-batch format and makes one actor call for it.
Up to ``max_in_flight_requests_per_connection`` batches per partition are in flight;
retriable errors are retried after ``retry_backoff_ms`` with a metadata refresh, until
``delivery_timeout_ms``. A retried batch goes back into its partition's queue in the
order it was first sent, ahead of batches not sent yet. As in Kafka without idempotence, a
retry can reorder or duplicate records when more than one batch per partition is in flight.

With idempotence (the default) each batch carries the producer id and the sequence of its
first record in its partition (31-bit, wrapping after ``2**31 - 1`` as Kafka's), and each
request says the sequence of the oldest batch of that partition not yet acknowledged, so
a leader appends every batch once and in sequence order whatever order Ray delivers them
in (see :mod:`raylog.coordination.producer_state`).

Should the sender thread fail (a bug), every record not yet done fails with
:class:`IllegalStateError` and ``send`` refuses new ones: no future is left waiting.

Memory is bounded by ``buffer_memory``: ``send`` blocks up to ``max_block_ms`` for room.

Requests carry ``client_id``, whose ``producer_byte_rate`` quota leaders enforce as Kafka
does since KIP-219: a response over the quota comes at once with a throttle time, and the
sender sends that partition nothing more until it has passed. Each throttled response is
recorded in the ``raylog_throttle_time_seconds`` metric.

Concurrency: ``send``, ``send_arrow``, ``flush`` and ``close`` may be called from any
number of threads. Records without a timestamp get their batch's opening time.
"""

from __future__ import annotations

import collections
import concurrent.futures
import itertools
import logging
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raylog.actors import metrics
from raylog.actors.transport import call, translate
from raylog.clients.cluster import METADATA_TIMEOUT_S, RaylogCluster, client_handle, require_cluster
from raylog.clients.group import CoordinatorClient, offsets_to_commit
from raylog.clients.partitioner import DefaultPartitioner, Partitioner
from raylog.clients.producer.future import ArrowPart, FutureRecordMetadata, gather
from raylog.clients.producer.producer_batch import ProducerBatch
from raylog.config import LogConfig
from raylog.coordination.placement import OFFSETS_TOPIC, validate_client_id, validate_topic_name
from raylog.coordination.producer_state import NO_SEQUENCE, RETAINED_BATCHES, increment_sequence
from raylog.errors import (
    ConcurrentTransactionsError,
    IllegalStateError,
    InvalidConfigError,
    InvalidProducerEpochError,
    InvalidRecordError,
    KafkaTimeoutError,
    NetworkExceptionError,
    ProducerFencedError,
    RaylogError,
    RecordTooLargeError,
    TransactionAbortableError,
    UnknownTopicOrPartitionError,
)
from raylog.protocol import ProduceRequest, error_of, records_payload
from raylog.storage import compression as codecs
from raylog.storage import record_batch
from raylog.types import OffsetAndMetadata, TopicPartition

#: Bytes counted per record beyond its key, value and headers (offsets, timestamp).
RECORD_OVERHEAD_BYTES = 16
#: After a leader's process dies, how long a batch waits for metadata naming another leader
#: before it is sent to the same actor again (Ray restarts it in about that time or more).
LEADER_FAILOVER_WAIT_S = 1.5
#: How long the sender waits for metadata it asked for before it sends with what it knows
#: (a refresh takes milliseconds; a paused or restarting controller must not stop writes to
#: leaders that are up).
METADATA_REFRESH_WAIT_S = 1.0
#: Pause before asking a transaction coordinator again after CONCURRENT_TRANSACTIONS (a
#: step of the same transactional id in flight, or markers being written: milliseconds).
CONCURRENT_TRANSACTIONS_BACKOFF_S = 0.01
_ACKS = {"all": -1, "-1": -1, -1: -1, "1": 1, 1: 1, "0": 0, 0: 0}

logger = logging.getLogger(__name__)


class Producer:
    """Sends records to raylog topics (Kafka's KafkaProducer).

    Args:
        cluster: from :func:`raylog.connect`.
        acks: 0 (no wait), 1 (leader wrote it) or "all" / -1 (every in-sync replica has it).
        linger_ms: how long a batch waits for more records before it is sent.
        batch_size: bytes at which a batch of :meth:`send` closes (raylog moves MiB batches;
            Kafka's 16 KiB would cost an actor call per 16 KiB; :meth:`send_arrow` makes
            batches as large as a request may be).
        compression_type: None (or "none"), "lz4", "zstd", "gzip" or "snappy" (whole-batch
            compression; Kafka's name). ``compression`` is the same setting under raylog's
            earlier name: give either (both must then agree).
        buffer_memory: bytes of unsent records allowed before ``send`` blocks.
        max_block_ms: how long ``send`` may block for room or metadata.
        max_in_flight_requests_per_connection: batches in flight per partition.
        retries, retry_backoff_ms, delivery_timeout_ms, request_timeout_ms: retry policy.
        max_request_size: the largest record accepted by ``send``.
        key_serializer, value_serializer: callables to bytes (else values must be bytes).
        partitioner: ``(topic, key_bytes, num_partitions) -> partition``; default Kafka's.
            It is given the partition count of the latest metadata, so partitions added to
            a topic are used once the metadata is refreshed (after an error, an Admin call
            on the same cluster handle, or ``metadata_max_age_ms``).
        metadata_max_age_ms: refresh metadata at least this often while sending.
        enable_idempotence: number each partition's batches (producer id and sequence) so
            the leader appends them in order, exactly once, across retries and pipelining.
            Without it, more than one batch in flight per partition may be reordered.
        client_id: the name leaders hold to a client quota (``producer_byte_rate``, see
            :meth:`Admin.alter_client_quotas`); clients without one share the default quota.
        transactional_id: makes the producer transactional (Kafka's transactions, see
            :meth:`init_transactions`): what it sends between :meth:`begin_transaction` and
            :meth:`commit_transaction` is read by read_committed consumers all at once or,
            if aborted, never; offsets sent with :meth:`send_offsets_to_transaction` commit
            with it. Requires idempotence and acks="all". The id names the application
            instance across restarts: a new producer with the same id fences the old one.
        transaction_timeout_ms: how long a transaction may stay open before the coordinator
            aborts it (and fences this producer).
        security_protocol, sasl_mechanism, sasl_plain_username, sasl_plain_password: who the
            client is (kafka-python's settings): with ``SASL_PLAINTEXT`` it authenticates as
            ``User:<sasl_plain_username>`` with the controller once, here, and its calls carry the
            session token the controller signs; the cluster's ACLs (``authorizer=acl``) then
            decide what it may do. None given: who the cluster handle's clients are (the
            settings given to :func:`raylog.connect`, else ``User:ANONYMOUS``). See
            :mod:`raylog.clients.security`.

    Example:
        >>> with Producer(cluster, linger_ms=5) as producer:           # doctest: +SKIP
        ...     producer.send("clicks", b"hello", key=b"user-1").result(timeout=10)
    """

    def __init__(
        self,
        cluster: RaylogCluster,
        *,
        acks: int | str = "all",
        linger_ms: int = 5,
        batch_size: int = 1 << 20,
        compression_type: str | None = None,
        compression: str | None = None,
        buffer_memory: int = 32 << 20,
        max_block_ms: int = 60_000,
        max_in_flight_requests_per_connection: int = 5,
        retries: int = 2**31 - 1,
        retry_backoff_ms: int = 100,
        delivery_timeout_ms: int = 120_000,
        request_timeout_ms: int = 30_000,
        max_request_size: int = 8 << 20,
        key_serializer: Callable[[Any], bytes] | None = None,
        value_serializer: Callable[[Any], bytes] | None = None,
        partitioner: Partitioner | None = None,
        enable_idempotence: bool = True,
        metadata_max_age_ms: int = 300_000,
        client_id: str = "",
        transactional_id: str | None = None,
        transaction_timeout_ms: int = 60_000,
        security_protocol: str | None = None,
        sasl_mechanism: str | None = None,
        sasl_plain_username: str | None = None,
        sasl_plain_password: str | None = None,
    ):
        self._config = {k: v for k, v in locals().items() if k not in ("self", "cluster")}
        require_cluster(cluster, "Producer")
        if acks not in _ACKS:
            raise InvalidConfigError(f"acks must be 0, 1, -1 or 'all', got {acks!r}")
        for name in (
            "linger_ms",
            "batch_size",
            "buffer_memory",
            "max_block_ms",
            "retries",
            "retry_backoff_ms",
            "delivery_timeout_ms",
            "request_timeout_ms",
            "max_request_size",
            "metadata_max_age_ms",
        ):
            value = self._config[name]
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidConfigError(f"{name} must be a non-negative integer, got {value!r}")
        if not 1 <= max_in_flight_requests_per_connection <= (RETAINED_BATCHES if enable_idempotence else 2**31):
            raise InvalidConfigError(
                f"max_in_flight_requests_per_connection must be >= 1 (and <= {RETAINED_BATCHES} with idempotence)"
            )
        if batch_size < 1 or batch_size > buffer_memory:
            raise InvalidConfigError("batch_size must be in [1, buffer_memory]")
        if transactional_id is not None:
            if not isinstance(transactional_id, str) or not transactional_id:
                raise InvalidConfigError(f"transactional_id must be a non-empty string, got {transactional_id!r}")
            if not enable_idempotence or _ACKS[acks] != -1:
                raise InvalidConfigError('a transactional producer needs enable_idempotence=True and acks="all"')
            if isinstance(transaction_timeout_ms, bool) or not isinstance(transaction_timeout_ms, int):
                raise InvalidConfigError(f"transaction_timeout_ms must be an integer, got {transaction_timeout_ms!r}")
        validate_client_id(client_id, InvalidConfigError)
        settings = (security_protocol, sasl_mechanism, sasl_plain_username, sasl_plain_password)
        self._cluster, self._session = client_handle(cluster, request_timeout_ms / 1000, *settings)
        self._acks = _ACKS[acks]
        self._linger_s = linger_ms / 1000
        self._batch_size = batch_size
        if (
            compression_type is not None
            and compression is not None
            and str(compression_type).lower() != str(compression).lower()
        ):
            raise InvalidConfigError(
                f"compression_type={compression_type!r} and compression={compression!r} differ: give one of them"
            )
        self._codec = codecs.codec_id(compression_type if compression_type is not None else compression)
        self._buffer_memory = buffer_memory
        self._max_block_s = max_block_ms / 1000
        self._max_in_flight = max_in_flight_requests_per_connection
        self._retries = retries
        self._backoff_s = retry_backoff_ms / 1000
        self._delivery_timeout_s = delivery_timeout_ms / 1000
        self._request_timeout_ms = request_timeout_ms
        self._max_request_size = max_request_size
        self._key_serializer = key_serializer
        self._value_serializer = value_serializer
        self._default_partitioner = DefaultPartitioner()
        self._partitioner = partitioner or self._default_partitioner
        self._client_id = client_id
        self._throttle_time_ms = 0
        #: Partitions whose leader asked this client to hold back, until when (monotonic s).
        self._throttled_until: dict[TopicPartition, float] = {}

        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._open: dict[TopicPartition, ProducerBatch] = {}
        self._queues: dict[TopicPartition, collections.deque[ProducerBatch]] = collections.defaultdict(
            collections.deque
        )
        self._in_flight: dict[TopicPartition, int] = collections.defaultdict(int)
        self._incomplete: set[ProducerBatch] = set()
        self._buffered_bytes = 0
        self._flushing = 0
        self._closed = False
        self._sender_error: IllegalStateError | None = None  # set if the sender thread failed
        self._metadata_stale = False
        self._metadata_max_age_s = metadata_max_age_ms / 1000
        self._metadata_refreshed_s = time.monotonic()
        #: topic -> (its partitions, the records_capacity of its batches, the metadata
        #: snapshot both were read from)
        self._routes: dict[str, tuple[list[TopicPartition], int, Any]] = {}
        self._idempotent = enable_idempotence
        self._producer_id = -1  # from the controller as the sender starts (sender thread only)
        self._producer_epoch = 0
        self._transactional_id = transactional_id
        self._transaction_timeout_ms = transaction_timeout_ms
        self._txn_coordinator: CoordinatorClient | None = None
        #: Per group id sent offsets for: its coordinator, and its __consumer_offsets partition.
        self._group_coordinators: dict[str, CoordinatorClient] = {}
        self._offsets_partitions: dict[str, TopicPartition] = {}
        #: Transactional: sends are refused outside a transaction (never True otherwise).
        self._outside_txn = transactional_id is not None
        self._txn_partitions: set[TopicPartition] = set()  # added to the open transaction
        #: Groups whose offsets the open (and the previous) transaction sent: a transaction
        #: adds the previous one's offsets partitions with its first partitions, in one call
        #: (a loop sends offsets every time; a partition added for nothing costs one marker).
        self._txn_groups: set[str] = set()
        self._previous_txn_groups: set[str] = set()
        #: One add_partitions call at a time (the sender's and send_offsets_to_transaction's):
        #: a second call meanwhile would get CONCURRENT_TRANSACTIONS and back off.
        self._registering = threading.Lock()
        self._txn_error: RaylogError | None = None  # a send of the open transaction failed
        self._txn_fenced: RaylogError | None = None  # a newer instance took over: nothing works
        self._sequences: dict[TopicPartition, int] = collections.defaultdict(int)
        #: Idempotence, per partition: batches sent and not done yet, in the order first sent,
        #: and how many batches were ever sent (the next ``partition_index``).
        self._unacked: dict[TopicPartition, list[ProducerBatch]] = collections.defaultdict(list)
        self._sent_count: dict[TopicPartition, int] = collections.defaultdict(int)
        self._dispatch_orders = itertools.count()
        self._sender = threading.Thread(target=self._run_sender, name="raylog-producer-sender", daemon=True)
        self._sender.start()

    def __reduce__(self):
        # A producer shipped to another process (a Ray task, a Spark executor) starts afresh
        # there with the same configuration; records in flight here stay here.
        return (_rebuild_producer, (self._cluster, self._config))

    # --- sending ------------------------------------------------------------------------

    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: list | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> FutureRecordMetadata:
        """Queue one record; returns a future of its :class:`RecordMetadata`.

        Every check is made here, before the record is queued: a refused record fails alone
        and nothing of it is sent.

        Raises:
            IllegalStateError: the producer is closed.
            TypeError: key or value is not bytes (and no serializer was given), a header is
                not a ``(str, bytes or None)`` pair, or the timestamp is not an integer.
            ValueError: a negative timestamp.
            InvalidRecordError: more than MAX_HEADERS_PER_RECORD headers, or a header key
                longer than MAX_HEADER_KEY_BYTES (see :mod:`raylog.storage.record_batch`).
            RecordTooLargeError: the record cannot fit a batch of ``max_request_size`` or of
                the topic's ``max.message.bytes``, or is larger than ``buffer_memory``.
            InvalidTopicError: not a legal topic name.
            UnknownTopicOrPartitionError: no such topic or partition (after a metadata refresh).
            KafkaTimeoutError: no buffer room within ``max_block_ms``.
        """
        if self._sender_error is not None or self._closed or self._outside_txn:
            self._require_open()
        if key is not None and self._key_serializer is not None:
            key = self._key_serializer(key)
        if value is not None and self._value_serializer is not None:
            value = self._value_serializer(value)
        value_size = len(value) if type(value) is bytes else _byte_length(value, "value")
        key_size = header_size = -1  # kafka-python's sizes of none
        payload = value_size
        if key is not None:
            key_size = len(key) if type(key) is bytes else _byte_length(key, "key")
            payload += key_size
        header_count = 0
        if headers is not None:
            header_bytes, header_count = _header_bytes(headers)
            payload += header_bytes
            if headers:
                header_size = header_bytes
        if timestamp_ms is not None:
            _check_timestamp(timestamp_ms)
        size = RECORD_OVERHEAD_BYTES + payload
        bound = record_batch.record_size_bound(payload, header_count)
        partitions, capacity = self._route(topic)
        if bound > capacity:
            self._require_fits_alone(
                topic,
                record_batch.binary_of([value]),
                keys=None if key is None else record_batch.binary_of([key]),
                headers=record_batch.headers_of([headers]) if headers else None,
            )
        if size > self._buffer_memory:
            raise RecordTooLargeError(f"record of {size} bytes is larger than buffer_memory={self._buffer_memory}")
        if partition is None:
            partition = self._partitioner(topic, key, len(partitions))
        elif isinstance(partition, bool) or not isinstance(partition, int) or not 0 <= partition < len(partitions):
            raise UnknownTopicOrPartitionError(
                f"partition {partition!r} is not in [0, {len(partitions)}) for {topic!r}"
            )
        tp = partitions[partition]
        with self._lock:
            if self._sender_error is not None or self._closed:  # the sender failed, or close ran, meanwhile
                self._require_open()
            if self._buffered_bytes + size > self._buffer_memory:
                self._reserve(size)
            else:
                self._buffered_bytes += size
            batch = self._open.get(tp)
            full = batch is not None and batch.size_bytes + size > self._batch_size
            if full or (batch is not None and batch.bound_bytes + bound > capacity):
                self._close_batch(batch)
                batch = None
            if batch is None:
                batch = self._open[tp] = ProducerBatch(tp, self._delivery_timeout_s)
                self._incomplete.add(batch)
                self._cond.notify()
            index = batch.record_count
            batch.values.append(value)
            if key is not None or batch.keys:
                if not batch.keys:
                    batch.keys = [None] * index
                batch.keys.append(key)
            if timestamp_ms is not None or batch.timestamps:
                if not batch.timestamps:
                    batch.timestamps = [None] * index
                batch.timestamps.append(timestamp_ms)
            if headers or batch.headers:
                if not batch.headers:
                    batch.headers = [None] * index
                batch.headers.append(headers)
            batch.record_count = index + 1
            batch.size_bytes += size
            batch.bound_bytes += bound
            if batch.size_bytes >= self._batch_size:
                self._close_batch(batch)
                self._cond.notify()
        return FutureRecordMetadata(
            batch, index, timestamp_ms, (key_size, -1 if value is None else value_size, header_size)
        )

    def _require_open(self) -> None:
        if self._sender_error is not None:
            raise self._sender_error
        if self._closed:
            raise IllegalStateError("cannot send: the producer is closed")
        if self._outside_txn:
            raise self._txn_fenced or IllegalStateError("a transactional producer sends only within a transaction")

    def send_arrow(
        self,
        topic: str,
        table: pa.Table,
        *,
        key_column: str = "key",
        value_column: str = "value",
        timestamp_column: str | None = None,
        headers_column: str | None = None,
        partition: int | None = None,
    ) -> concurrent.futures.Future:
        """Send a whole Arrow table: rows are split by partition (murmur2 of the key column,
        when present and not null; otherwise spread by batch over partitions) and into
        batches, encoded columnar without a loop per record.

        A leader call costs about the same whatever it carries, so a bulk send makes as few
        as it can: its batches are as large as ``max_request_size``, the topic's
        ``max.message.bytes`` and ``buffer_memory`` allow (``batch_size`` is for
        :meth:`send`). Unkeyed rows fill one batch per partition in turn, from the sticky
        partition on, and the next call goes on from the partition after the last one, so
        partitions even out over calls.

        Returns:
            A future of the list of :class:`BatchMetadata` of the batches sent, in order.

        Every row is checked before any is queued: a refused table sends nothing.

        Raises:
            IllegalStateError, KeyError (missing value column), UnknownTopicOrPartitionError,
            KafkaTimeoutError (no buffer room), TypeError (a key or value column that is not
            binary or string, headers not of ``record_batch.HEADERS_TYPE``),
            InvalidRecordError and RecordTooLargeError (a row that :meth:`send` would refuse).
        """
        self._require_open()
        count = self._num_partitions(topic)
        if partition is not None and not (isinstance(partition, int) and 0 <= partition < count):
            raise UnknownTopicOrPartitionError(f"partition {partition!r} is not in [0, {count}) for {topic!r}")
        columns = {"values": _binary_column(table.column(value_column), value_column)}
        if key_column in table.column_names:
            columns["keys"] = _binary_column(table.column(key_column), key_column)
        if timestamp_column is not None:
            columns["timestamps_ms"] = table.column(timestamp_column).cast(pa.int64())
        if headers_column is not None:
            columns["headers"] = table.column(headers_column)
            if columns["headers"].type != record_batch.HEADERS_TYPE:
                raise TypeError(f"headers must be of type {record_batch.HEADERS_TYPE}, got {columns['headers'].type}")
        columns = {k: _one_chunk(v) for k, v in columns.items()}
        bounds = _row_bounds(columns)
        partitions, capacity = self._route(topic)
        for row in np.flatnonzero(bounds > capacity):  # alone in its batch, if it fits at all
            self._require_fits_alone(topic, **{k: v.slice(int(row), 1) for k, v in columns.items()})
        parts = [
            self._enqueue_prebuilt(partitions[part], chunk, capacity)
            for part, chunk in self._split(topic, columns, count, partition, capacity)
        ]
        return gather(parts)

    def _split(self, topic: str, columns: dict, count: int, partition: int | None, capacity: int):
        """``(partition, (rows, size_bytes, bound_bytes))`` per batch to send, in order.

        Unkeyed rows (or all rows, given a partition) go out as zero-copy slices, one batch
        per partition in turn (sticky partitioning at batch granularity); keyed rows are
        gathered per partition by murmur2 of the key (one copy), then sliced.
        """
        rows = {k: _one_chunk(v) for k, v in columns.items()}
        keys = rows.get("keys")
        if partition is not None or keys is None or keys.null_count == len(keys):
            first = partition if partition is not None else self._default_partitioner(topic, None, count)
            last = first
            for i, chunk in enumerate(self._chunks(rows, capacity)):
                last = first if partition is not None else (first + i) % count
                yield last, chunk
            if partition is None:  # the next call goes on from here
                self._default_partitioner.stick_to(topic, (last + 1) % count)
            return
        targets = self._default_partitioner.partitions_for_keys(keys, count)
        unkeyed = targets < 0
        if unkeyed.any():  # null keys among keyed rows: the sticky partition takes them
            targets[unkeyed] = self._default_partitioner(topic, None, count)
        order = np.argsort(targets, kind="stable")
        gathered = {k: v.take(record_batch.arrow_of(order)) for k, v in rows.items()}
        bounds = np.searchsorted(targets[order], np.arange(count + 1))
        for part in range(count):
            lo, hi = int(bounds[part]), int(bounds[part + 1])
            if hi > lo:
                for chunk in self._chunks({k: v.slice(lo, hi - lo) for k, v in gathered.items()}, capacity):
                    yield part, chunk

    def _chunks(self, rows: dict, capacity: int):
        """Slices of ``rows`` of at most ``buffer_memory`` bytes each (at least one row) whose
        records' size bounds add up to at most ``capacity`` (each row fits alone), as
        ``(rows, size_bytes, bound_bytes)``."""
        values = rows["values"]
        sizes = record_batch.values_or(pc.binary_length(values), 0) + RECORD_OVERHEAD_BYTES
        if "keys" in rows:
            sizes = sizes + record_batch.values_or(pc.binary_length(rows["keys"]), 0)
        ends = sizes.cumsum()
        bound_ends = _row_bounds(rows).cumsum()
        start, n = 0, len(values)
        while start < n:
            base = ends[start - 1] if start else 0
            bound_base = bound_ends[start - 1] if start else 0
            stop = min(
                int(np.searchsorted(ends, base + self._buffer_memory, side="right")),
                int(np.searchsorted(bound_ends, bound_base + capacity, side="right")),
            )
            stop = max(start + 1, stop)
            chunk = {k: v.slice(start, stop - start) for k, v in rows.items()}
            yield chunk, int(ends[stop - 1] - base), int(bound_ends[stop - 1] - bound_base)
            start = stop

    def _enqueue_prebuilt(self, tp: TopicPartition, chunk: tuple[dict, int, int], capacity: int) -> ArrowPart:
        """Queue a send_arrow chunk: in the batch waiting last in its partition's queue when
        that one was never sent, holds rows of the same columns and types and has room within
        ``capacity`` (a call behind a full pipe joins it, as records join a growing batch
        in Kafka's accumulator: one leader call fewer), else in a batch of its own."""
        rows, size, bound = chunk
        count = len(rows["values"])
        now_ms = time.time_ns() // 1_000_000
        with self._cond:
            self._require_open()
            self._reserve(size)
            queue = self._queues[tp]
            tail = queue[-1] if queue else None
            if (
                tail is not None
                and tail.arrow_rows
                and tail.dispatch_order < 0
                and tail.bound_bytes + bound <= capacity
                and _same_columns(tail.arrow_rows[0][0], rows)
            ):
                start = tail.record_count
                tail.arrow_rows.append((rows, now_ms))
                tail.record_count += count
                tail.size_bytes += size
                tail.bound_bytes += bound
                return ArrowPart(tail, start, count)
            batch = ProducerBatch(tp, self._delivery_timeout_s)
            batch.record_count, batch.size_bytes, batch.bound_bytes = count, size, bound
            batch.arrow_rows.append((rows, now_ms))  # encoded by the sender, numbered in this partition's order
            self._incomplete.add(batch)
            open_batch = self._open.get(tp)
            if open_batch is not None:
                self._close_batch(open_batch)  # keep this partition's order
            queue.append(batch)
            self._cond.notify()
        return ArrowPart(batch, 0, count)

    def flush(self, timeout: float | None = None) -> None:
        """Send every queued record now and wait until each is acknowledged or failed.

        Raises:
            KafkaTimeoutError: not all were done within ``timeout`` seconds.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            pending = list(self._incomplete)
            self._flushing += 1
            for batch in list(self._open.values()):
                self._close_batch(batch)
            self._cond.notify_all()
        try:
            for batch in pending:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not batch.event.wait(remaining):
                    raise KafkaTimeoutError(f"flush did not finish within {timeout} s")
        finally:
            with self._cond:
                self._flushing -= 1

    def close(self, timeout: float | None = None) -> None:
        """Flush, then stop the sender thread. Idempotent."""
        if self._closed:
            return
        try:
            self.flush(timeout)
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()
            self._sender.join(timeout)

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    @property
    def throttle_time_ms(self) -> int:
        """How long the leader held the latest response back for this client's quota (0: not)."""
        return self._throttle_time_ms

    def partitions_for(self, topic: str) -> list[int]:
        return list(range(self._num_partitions(topic)))

    # --- transactions ---------------------------------------------------------------------

    def init_transactions(self, timeout: float | None = None) -> None:
        """Register the transactional id with its coordinator: aborts a transaction a previous
        instance left open, fences every older instance (their next write or commit fails
        with ProducerFencedError), and gets this instance's producer id and epoch. Call once,
        before the first transaction.

        Raises:
            IllegalStateError: not a transactional producer, or already initialised.
            ProducerFencedError, InvalidTransactionTimeoutError, KafkaTimeoutError, ...
        """
        if self._transactional_id is None:
            raise IllegalStateError("init_transactions needs a transactional_id")
        if self._producer_id >= 0:
            raise IllegalStateError("init_transactions was called already")
        answer = self._txn_call(
            "init_producer_id", self._transactional_id, self._transaction_timeout_ms, timeout=timeout
        )
        with self._cond:
            self._producer_id, self._producer_epoch = answer.producer_id, answer.producer_epoch
            self._sequences.clear()

    def begin_transaction(self) -> None:
        """Open a transaction: sends are part of it until it is committed or aborted.

        Raises:
            IllegalStateError: not initialised, or a transaction is open already.
            ProducerFencedError: a newer instance took over.
        """
        if self._txn_fenced is not None:
            raise self._txn_fenced
        if self._transactional_id is None or self._producer_id < 0:
            raise IllegalStateError("call init_transactions before begin_transaction")
        if not self._outside_txn:
            raise IllegalStateError("a transaction is open already")
        self._txn_partitions.clear()
        self._txn_error = None
        self._outside_txn = False

    def send_offsets_to_transaction(
        self,
        offsets: dict[TopicPartition, OffsetAndMetadata | int],
        group_metadata: dict[str, Any] | str,
        timeout: float | None = None,
    ) -> None:
        """Commit a consumer group's offsets as part of the open transaction (the offsets of
        the next records to read): they count if and when the transaction commits.

        Args:
            offsets: per partition, the offset of the next record to read.
            group_metadata: ``consumer.group_metadata()`` (its generation fences a consumer
                that lost its partitions), or a group id for a consumer outside any group.

        Raises:
            IllegalStateError: no transaction is open.
            ProducerFencedError, IllegalGenerationError, UnknownMemberIdError, ...
        """
        self._require_transaction()
        meta = {"group_id": group_metadata} if isinstance(group_metadata, str) else group_metadata
        group_id = meta["group_id"]
        committed = offsets_to_commit(offsets)
        try:
            coordinator = self._group_coordinators.get(group_id)
            if coordinator is None:  # kept: the next transactions find it without the controller
                coordinator = CoordinatorClient(
                    self._cluster, group_id, self._max_block_s, self._backoff_s, session=self._session
                )
                token = self._session.token()
                partition, _ = call(
                    self._cluster.controller.find_coordinator.remote(group_id, session=token), self._max_block_s
                )
                self._group_coordinators[group_id] = coordinator
                self._offsets_partitions[group_id] = TopicPartition(OFFSETS_TOPIC, partition)
            self._txn_groups.add(group_id)
            self._register([self._offsets_partitions[group_id]], timeout)
            coordinator.call(
                "txn_commit_offsets",
                group_id,
                meta.get("member_id", ""),
                meta.get("generation", -1),
                meta.get("group_instance_id"),
                self._producer_id,
                self._producer_epoch,
                committed,
            )
        except RaylogError as exc:
            self._transaction_failed(exc)
            if self._txn_fenced is not None:
                raise self._txn_fenced from exc  # (the group's partition says INVALID_PRODUCER_EPOCH)
            raise

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Send what is queued, then commit: once this returns, read_committed consumers of
        every partition written read the transaction, and its offsets are the group's.

        Raises:
            TransactionAbortableError: a send of the transaction failed: abort it.
            ProducerFencedError: a newer instance took over (or the transaction timed out).
            KafkaTimeoutError: not done within ``timeout``: call again (the retry is
                answered once the first call's commit completes).
        """
        self._require_transaction()
        self.flush(timeout)
        if self._txn_fenced is not None:
            raise self._txn_fenced
        if self._txn_error is not None:
            raise TransactionAbortableError(f"a send of the transaction failed, abort it: {self._txn_error}")
        self._end_transaction(True, timeout)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the open transaction: read_committed consumers never see what it wrote.

        Raises:
            IllegalStateError: no transaction is open.
            ProducerFencedError, KafkaTimeoutError.
        """
        self._require_transaction()
        try:
            self.flush(timeout)  # the batches in flight land (or fail) before the markers
        except KafkaTimeoutError:
            pass
        if self._txn_fenced is not None:
            raise self._txn_fenced
        self._end_transaction(False, timeout)

    def _end_transaction(self, commit: bool, timeout: float | None) -> None:
        answer = self._txn_call(
            "end_txn", self._transactional_id, self._producer_id, self._producer_epoch, commit, timeout=timeout
        )
        with self._cond:
            self._producer_id, self._producer_epoch = answer.producer_id, answer.producer_epoch
            self._sequences.clear()  # a new epoch numbers from 0
            self._outside_txn = True
        self._previous_txn_groups, self._txn_groups = self._txn_groups, set()

    def _require_transaction(self) -> None:
        if self._txn_fenced is not None:
            raise self._txn_fenced
        if self._transactional_id is None or self._outside_txn:
            raise IllegalStateError("no transaction is open (call begin_transaction)")

    def _transaction_failed(self, error: RaylogError) -> None:
        """A call of the open transaction failed: fenced for good, or abortable."""
        if isinstance(error, (ProducerFencedError, InvalidProducerEpochError)):
            fenced = ProducerFencedError(f"transactional id {self._transactional_id!r}: {error}")
            self._txn_fenced = fenced
        elif self._txn_error is None:
            self._txn_error = error

    def _add_to_transaction(self, batches: list[ProducerBatch]) -> list[ProducerBatch]:
        """Add the partitions of ``batches`` that are new to the transaction (one call in the
        sender thread); the batches that may go (the rest fail with the call's error)."""
        new = {b.tp for b in batches} - self._txn_partitions
        if not new:
            return batches
        new |= {self._offsets_partitions[g] for g in self._previous_txn_groups} - self._txn_partitions
        try:
            self._register(sorted(new), None)
        except RaylogError as exc:
            self._transaction_failed(exc)
            for batch in batches:
                self._completed(batch, None, exc, sent=False)
            return []
        return batches

    def _register(self, partitions: list[TopicPartition], timeout: float | None) -> None:
        with self._registering:
            new = [tp for tp in partitions if tp not in self._txn_partitions]
            if new:
                self._txn_call(
                    "add_partitions",
                    self._transactional_id,
                    self._producer_id,
                    self._producer_epoch,
                    [tuple(tp) for tp in new],
                    timeout=timeout,
                )
                self._txn_partitions.update(new)

    def _txn_call(self, method: str, *args: Any, timeout: float | None) -> Any:
        """A call to the transactional id's coordinator, retried on retriable errors (for
        ``max_block_ms``, or ``timeout``)."""
        if self._txn_coordinator is None:
            self._txn_coordinator = CoordinatorClient(
                self._cluster,
                self._transactional_id,
                self._max_block_s,
                self._backoff_s,
                find="find_transaction_coordinator",
                session=self._session,
            )
        coordinator = self._txn_coordinator
        deadline = time.monotonic() + self._txn_timeout_s(timeout)
        while True:
            try:
                response = call(coordinator.remote(method, *args), self._txn_timeout_s(timeout))
                if (error := error_of(response)) is not None:
                    raise error
                return response
            except RaylogError as exc:
                if isinstance(exc, (ProducerFencedError, InvalidProducerEpochError)):
                    self._transaction_failed(exc)
                    raise self._txn_fenced from None
                if not exc.retriable or time.monotonic() + self._backoff_s >= deadline:
                    if exc.retriable:
                        raise KafkaTimeoutError(
                            f"{method} of {self._transactional_id!r} not done in time: {exc}"
                        ) from exc
                    raise
                if isinstance(exc, ConcurrentTransactionsError):  # the same coordinator, done in ms
                    time.sleep(min(self._backoff_s, CONCURRENT_TRANSACTIONS_BACKOFF_S))
                else:
                    coordinator.after_error(exc)
                    time.sleep(self._backoff_s)

    def _txn_timeout_s(self, timeout: float | None) -> float:
        return self._max_block_s if timeout is None else timeout

    # --- internals: accumulator -------------------------------------------------------

    def _route(self, topic: str) -> tuple[list[TopicPartition], int]:
        """``topic``'s partitions in the cluster's latest metadata, and how much of
        record_size_bound a batch for it surely holds within ``max_request_size`` and its
        ``max.message.bytes`` (see :meth:`_limit`). Read again from each new metadata
        snapshot, so that partitions added to a topic appear after any refresh; refreshed
        once if unknown.

        Raises:
            InvalidTopicError: not a legal topic name.
            UnknownTopicOrPartitionError: no such topic.
            TopicAuthorizationFailedError: the producer's principal may not describe it.
        """
        metadata = self._cluster.metadata()
        route = self._routes.get(topic)
        if route is None or route[2] is not metadata:  # (on a send: only for a new snapshot)
            if route is None:
                validate_topic_name(topic)
            if topic not in metadata.topics:
                metadata = self._cluster.metadata(refresh=True)
                if topic not in metadata.topics:
                    raise self._cluster.missing_topics_error([topic])
            partitions = _partitions(metadata, topic)
            capacity = record_batch.records_capacity(self._limit(topic, metadata), self._codec)
            route = self._routes[topic] = (partitions, capacity, metadata)
        return route[0], route[1]

    def _limit(self, topic: str, metadata: Any = None) -> int:
        """The most bytes a batch for ``topic`` may have (in ``metadata``, else the latest)."""
        config = (metadata or self._cluster.metadata()).topics[topic].config
        return min(self._max_request_size, int(config.get("max.message.bytes", LogConfig.max_message_bytes)))

    def _require_fits_alone(self, topic: str, values: pa.Array, **columns: Any) -> None:
        """A record whose size bound passes the capacity may still fit alone (the bound is
        loose for small limits): build its batch and measure.

        Raises:
            RecordTooLargeError: its batch is larger than :meth:`_limit`.
        """
        size = len(record_batch.build_arrow(values, codec=self._codec, now_ms=0, **columns))
        if size > self._limit(topic):
            raise RecordTooLargeError(
                f"a record makes a batch of {size} bytes, above max_request_size={self._max_request_size} "
                f"or {topic!r}'s max.message.bytes"
            )

    def _num_partitions(self, topic: str) -> int:
        return len(self._route(topic)[0])

    def _reserve(self, size: int) -> None:
        """Wait (holding the lock) for ``size`` bytes of buffer room."""
        deadline = time.monotonic() + self._max_block_s
        while self._buffered_bytes + size > self._buffer_memory and self._buffered_bytes > 0:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._closed:
                raise KafkaTimeoutError(f"no room in buffer_memory={self._buffer_memory} within max_block_ms")
            self._cond.wait(remaining)
            self._require_open()
        self._buffered_bytes += size

    def _close_batch(self, batch: ProducerBatch) -> None:
        """Move an open batch to its partition's send queue (holding ``_cond``)."""
        if self._open.get(batch.tp) is batch:
            del self._open[batch.tp]
            self._queues[batch.tp].append(batch)
            self._default_partitioner.on_batch_closed(
                batch.tp.topic, batch.tp.partition, len(self._routes[batch.tp.topic][0])
            )

    # --- internals: sender thread -----------------------------------------------------

    def _run_sender(self) -> None:
        try:
            self._take_producer_id()
            while True:
                with self._cond:
                    batches = self._wait_for_sendable()
                    if batches is None:
                        return
                if self._metadata_stale or time.monotonic() - self._metadata_refreshed_s >= self._metadata_max_age_s:
                    try:
                        self._metadata_stale = not self._cluster.refresh_metadata(METADATA_REFRESH_WAIT_S)
                    except RaylogError:
                        self._metadata_stale = True
                    if not self._metadata_stale:
                        self._metadata_refreshed_s = time.monotonic()
                if self._transactional_id is not None:
                    batches = self._add_to_transaction(batches)
                for batch in batches:
                    self._dispatch(batch)
        except BaseException as exc:  # a bug: no future may wait for a thread that is gone
            logger.exception("producer sender thread failed; failing every record not yet done")
            self._fail_everything(exc)

    def _fail_everything(self, cause: BaseException) -> None:
        """Fail every batch not done with IllegalStateError, and refuse sends from now on."""
        error = IllegalStateError(f"the producer's sender failed: {type(cause).__name__}: {cause}")
        error.__cause__ = cause
        with self._cond:
            self._sender_error = error
            batches = list(self._incomplete)
            self._incomplete.clear()
            self._open.clear()
            self._queues.clear()
            self._unacked.clear()
            self._buffered_bytes = 0
            self._cond.notify_all()
        for batch in batches:
            batch.finish(-1, -1, error)

    def _wait_for_sendable(self) -> list[ProducerBatch] | None:
        """Block (holding ``_cond``) until batches can go; None when closed and drained."""
        while True:
            now = time.monotonic()
            wake_at = None
            for batch in list(self._open.values()):
                due = batch.created_s + self._linger_s
                if due > now and not (self._flushing or self._closed):
                    wake_at = due if wake_at is None else min(wake_at, due)
                elif not self._queues[batch.tp] and self._can_send_new(batch.tp):
                    self._close_batch(batch)
                # else: its partition's pipe is full; the batch keeps growing until a reply
                # frees a slot (the reply wakes this loop), as Kafka's accumulator does.
            ready = []
            for tp, queue in self._queues.items():
                throttled_until = self._throttled_until.get(tp, 0.0)
                if queue and throttled_until > now:
                    wake_at = throttled_until if wake_at is None else min(wake_at, throttled_until)
                    continue
                while queue and self._in_flight[tp] < self._max_in_flight:
                    head = queue[0]
                    if head.retry_at_s > now:
                        wake_at = head.retry_at_s if wake_at is None else min(wake_at, head.retry_at_s)
                        break
                    if head.dispatch_order < 0 and not self._can_send_new(tp):
                        break  # a reply makes room (and wakes this loop)
                    ready.append(queue.popleft())
                    self._in_flight[tp] += 1
                    if head.dispatch_order < 0:
                        self._first_send(head)
            if ready:
                return ready
            if self._closed and not self._incomplete:
                return None
            self._cond.wait(None if wake_at is None else max(0.0, wake_at - now))

    def _can_send_new(self, tp: TopicPartition) -> bool:
        """Whether a batch not sent yet may go (holding ``_cond``): a slot in flight and, with
        idempotence, fewer than ``max_in_flight`` batches from the oldest one unacknowledged
        to the newest sent. Replies may come in any order, and a leader remembers only its
        producer's last batches: a retry of the oldest must still be recognised there."""
        if self._in_flight[tp] >= self._max_in_flight:
            return False
        unacked = self._unacked[tp]
        return not unacked or self._sent_count[tp] - unacked[0].partition_index < self._max_in_flight

    def _first_send(self, batch: ProducerBatch) -> None:
        """Rank a batch about to be sent for the first time (holding ``_cond``)."""
        batch.dispatch_order = next(self._dispatch_orders)
        if self._idempotent:
            batch.partition_index = self._sent_count[batch.tp]
            self._sent_count[batch.tp] += 1
            self._unacked[batch.tp].append(batch)

    def _dispatch(self, batch: ProducerBatch) -> None:
        try:
            if self._idempotent and batch.producer_id < 0:
                self._assign_sequence(batch)
            data = batch.encode(self._codec)
            leader = self._cluster.metadata().leader(batch.tp)
            if leader == batch.leader and time.monotonic() < batch.unreachable_until_s:
                # Its process just died: calls to it would wait for Ray to restart it, while
                # the controller may already be electing another. Look again shortly.
                raise NetworkExceptionError(f"the leader of {batch.tp} is down; waiting for a new one")
            batch.leader = leader
            # As an array, Ray ships the bytes out of band (the leader reads them where they lie
            # in the object store); as bytes they are copied into the pickle and out again:
            # a 6.5 MB call took 8-11 ms that way, 3 ms this way. A small batch rides inside
            # the call either way, and as bytes it costs each side ~50 us less CPU.
            request = ProduceRequest(
                records_payload(data),
                self._acks,
                self._request_timeout_ms,
                self._client_id,
                self._first_unacked_sequence(batch),
                transactional_id=self._transactional_id if batch.transactional else None,
                session=self._session.token(),
            )
            ref = leader.produce.remote(request)
        except RaylogError as exc:
            # Not sent (e.g. no leader yet: a new topic's replicas are starting). As in Kafka,
            # the batch waits for its leader until its delivery timeout; no retry is spent.
            self._completed(batch, None, exc, sent=False)
            return
        except (TypeError, ValueError, OverflowError, struct.error) as exc:  # records the format refuses
            self._completed(batch, None, InvalidRecordError(f"{type(exc).__name__}: {exc}"))
            return
        if self._acks == 0:
            self._completed(batch, None, None)
            return
        ref.future().add_done_callback(lambda future: self._on_reply(batch, future))

    def _take_producer_id(self) -> None:
        """An idempotent producer takes its producer id as it starts, as Kafka's clients do, so
        that its first batches do not wait on the controller (a controller paused or restarting
        then delays only producers started meanwhile). One that fails is taken again at the
        first send (sender thread only)."""
        if not self._idempotent or self._transactional_id is not None:
            return  # a transactional producer's comes from init_transactions()
        try:
            self._producer_id = self._producer_id_from_controller()
        except RaylogError as exc:
            logger.warning("no producer id from the controller (asked again at the first send): %s", exc)

    def _producer_id_from_controller(self) -> int:
        return call(self._cluster.controller.init_producer_id.remote(session=self._session.token()), METADATA_TIMEOUT_S)

    def _assign_sequence(self, batch: ProducerBatch) -> None:
        """Number the batch: sequences follow first dispatch order, which is queue order."""
        if self._producer_id < 0:
            self._producer_id = self._producer_id_from_controller()
            self._sequences.clear()
        batch.producer_id = self._producer_id
        batch.producer_epoch = self._producer_epoch
        batch.transactional = self._transactional_id is not None
        batch.base_sequence = self._sequences[batch.tp]
        self._sequences[batch.tp] = increment_sequence(batch.base_sequence, batch.record_count)

    def _first_unacked_sequence(self, batch: ProducerBatch) -> int:
        """The base sequence of the oldest batch of ``batch``'s partition and producer id
        not done yet (``batch`` itself at the latest); NO_SEQUENCE if not idempotent."""
        if batch.producer_id < 0:
            return NO_SEQUENCE
        with self._cond:
            unacked = self._unacked[batch.tp]
            return next((b.base_sequence for b in unacked if b.producer_id == batch.producer_id), batch.base_sequence)

    def _on_reply(self, batch: ProducerBatch, future: concurrent.futures.Future) -> None:
        try:
            try:
                response = future.result()
            except Exception as exc:  # noqa: BLE001 — Ray's failures and any other become raylog errors
                self._completed(batch, None, translate(exc))
                return
            self._completed(batch, response, error_of(response))
        except BaseException as exc:  # a bug: no future may wait for a reply that was dropped
            logger.exception("producer failed on a reply; failing every record not yet done")
            self._fail_everything(exc)

    def _completed(self, batch: ProducerBatch, response: Any, error: RaylogError | None, sent: bool = True) -> None:
        now = time.monotonic()
        if response is not None:
            self._throttle_time_ms = response.throttle_time_ms
            if response.throttle_time_ms:
                metrics.record_throttle("producer", self._client_id, response.throttle_time_ms)
        retry = (
            error is not None
            and error.retriable
            and (batch.attempts < self._retries or not sent)
            and now + self._backoff_s < batch.deadline_s
            and not self._closed
            and self._sender_error is None
        )
        if isinstance(error, NetworkExceptionError) and batch.leader is not None and not batch.unreachable_until_s:
            batch.unreachable_until_s = now + LEADER_FAILOVER_WAIT_S
        with self._cond:
            self._in_flight[batch.tp] -= 1
            if response is not None and response.throttle_time_ms:
                until = now + response.throttle_time_ms / 1000
                self._throttled_until[batch.tp] = max(until, self._throttled_until.get(batch.tp, 0.0))
            if retry:
                batch.attempts += sent
                batch.retry_at_s = now + self._backoff_s
                self._metadata_stale = self._metadata_stale or error.invalid_metadata
                self._requeue(batch)
            elif batch in self._incomplete:  # (not failed with everything meanwhile)
                self._incomplete.discard(batch)
                self._buffered_bytes -= batch.size_bytes
                if self._idempotent:
                    self._unacked[batch.tp].remove(batch)
            self._cond.notify_all()
        if retry:
            return
        if error is not None and error.retriable and now + self._backoff_s >= batch.deadline_s:
            cause = error
            error = KafkaTimeoutError(f"delivery_timeout_ms passed for {batch.tp}: {cause}")
            error.__cause__ = cause
        if error is not None and batch.transactional:
            self._transaction_failed(error)
            if isinstance(error, InvalidProducerEpochError):
                error = self._txn_fenced
        elif error is not None and batch.producer_id >= 0:
            # The leader may now wait for this batch's sequence forever: number the next
            # batches under a new producer id (batches in flight under the old one may
            # then fail with OutOfOrderSequenceError, never be reordered).
            with self._cond:
                if self._producer_id == batch.producer_id:
                    self._producer_id = -1
        if response is None or error is not None:
            batch.finish(-1, -1, error)
        else:
            batch.finish(response.base_offset, response.log_append_time_ms, None)

    def _requeue(self, batch: ProducerBatch) -> None:
        """Put a batch to retry back in its partition's queue (holding ``_cond``): after the
        batches to retry that were sent before it, ahead of every later or unsent one."""
        queue = self._queues[batch.tp]
        i = 0
        while i < len(queue) and 0 <= queue[i].dispatch_order < batch.dispatch_order:
            i += 1
        queue.insert(i, batch)


def _partitions(metadata: Any, topic: str) -> list[TopicPartition]:
    """Raises UnknownTopicOrPartitionError when ``metadata`` has no such topic."""
    return [TopicPartition(topic, p) for p in range(metadata.num_partitions(topic))]


def _one_chunk(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A plain array, copying only when a chunked column has several chunks."""
    if isinstance(column, pa.ChunkedArray):
        return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    return column


def _byte_length(data: Any, what: str) -> int:
    if data is None:
        return 0
    if isinstance(data, (bytes, bytearray, memoryview)):
        return len(data)
    raise TypeError(f"{what} must be bytes (or give the producer a {what}_serializer), got {type(data).__name__}")


def _header_bytes(headers: Any) -> tuple[int, int]:
    """``(bytes, count)`` of a record's headers: the UTF-8 bytes of their keys plus their
    values, checked against the limits of the batch format.

    Raises:
        TypeError: not a list of ``(str, bytes or None)`` pairs.
        InvalidRecordError: too many headers, or too long a key.
    """
    if headers is None:
        return 0, 0
    if not isinstance(headers, (list, tuple)):
        raise TypeError(f"headers must be a list of (str, bytes) pairs, got {type(headers).__name__}")
    if len(headers) > record_batch.MAX_HEADERS_PER_RECORD:
        raise InvalidRecordError(
            f"a record has {len(headers)} headers, at most {record_batch.MAX_HEADERS_PER_RECORD} are allowed"
        )
    total = 0
    for pair in headers:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2 or not isinstance(pair[0], str):
            raise TypeError(f"a header must be a (str, bytes or None) pair, got {pair!r}")
        try:
            key_bytes = len(pair[0].encode())
        except UnicodeEncodeError:
            raise TypeError(f"header key {pair[0]!r} is not valid unicode") from None
        if key_bytes > record_batch.MAX_HEADER_KEY_BYTES:
            raise InvalidRecordError(
                f"a header key of {key_bytes} bytes is longer than {record_batch.MAX_HEADER_KEY_BYTES}"
            )
        total += key_bytes + _byte_length(pair[1], "header value")
    return total, len(headers)


def _check_timestamp(timestamp_ms: Any) -> None:
    if isinstance(timestamp_ms, bool) or not isinstance(timestamp_ms, (int, np.integer)):
        raise TypeError(f"timestamp_ms must be an integer (ms since the epoch), got {timestamp_ms!r}")
    if not 0 <= timestamp_ms < 2**63:
        raise ValueError(f"timestamp_ms must be non-negative (as Kafka's), got {timestamp_ms}")


def _binary_column(column: pa.Array | pa.ChunkedArray, name: str) -> pa.Array | pa.ChunkedArray:
    if not record_batch.is_binary_like(column.type):
        raise TypeError(f"column {name!r} must be binary or string, got {column.type}")
    return column


def _row_bounds(rows: dict) -> np.ndarray:
    """record_size_bound of each row of a send_arrow chunk (int64), header limits checked.

    Raises:
        InvalidRecordError: a row with too many headers or too long a header key.
    """
    payload = record_batch.values_or(pc.binary_length(rows["values"]), 0).astype(np.int64)
    if "keys" in rows:
        payload += record_batch.values_or(pc.binary_length(rows["keys"]), 0)
    counts = np.zeros(len(payload), dtype=np.int64)
    if "headers" in rows:
        headers = rows["headers"]
        counts = record_batch.values_or(pc.list_value_length(headers), 0).astype(np.int64)
        if len(counts) and counts.max() > record_batch.MAX_HEADERS_PER_RECORD:
            raise InvalidRecordError(f"a row has more than {record_batch.MAX_HEADERS_PER_RECORD} headers")
        entries = headers.flatten()
        key_bytes = record_batch.values_or(pc.binary_length(entries.field("key")), 0)
        if len(key_bytes) and key_bytes.max() > record_batch.MAX_HEADER_KEY_BYTES:
            raise InvalidRecordError(f"a header key is longer than {record_batch.MAX_HEADER_KEY_BYTES} bytes")
        value_bytes = record_batch.values_or(pc.binary_length(entries.field("value")), 0)
        sums = np.concatenate([[0], np.cumsum(key_bytes + value_bytes, dtype=np.int64)])
        ends = np.cumsum(counts)
        payload += sums[ends] - sums[ends - counts]
    return payload + record_batch.RECORD_OVERHEAD_BOUND + record_batch.HEADER_OVERHEAD_BOUND * counts


def _same_columns(rows: dict, other: dict) -> bool:
    """Whether two send_arrow chunks have the same columns of the same types (a batch's
    chunks are concatenated column by column)."""
    return rows.keys() == other.keys() and all(rows[key].type == other[key].type for key in rows)


def _rebuild_producer(cluster: RaylogCluster, config: dict) -> Producer:
    return Producer(cluster, **config)
