"""The Producer: accumulates records per partition into record batches and ships them to
partition leaders from a background sender thread. This module is its public face; the
accumulator, the sender, the transaction manager and the futures are its neighbours in
this package (see :mod:`raylog.clients.producer`).

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

import concurrent.futures
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from raylog.clients.cluster import RaylogCluster, client_handle, require_cluster
from raylog.clients.partitioner import DefaultPartitioner, Partitioner
from raylog.clients.producer import arrow_batches
from raylog.clients.producer.future import FutureRecordMetadata, gather
from raylog.clients.producer.producer_metadata import ProducerMetadata
from raylog.clients.producer.record_accumulator import RECORD_OVERHEAD_BYTES, RecordAccumulator
from raylog.clients.producer.sender import Sender
from raylog.clients.producer.transaction_manager import TransactionManager
from raylog.common import compression as codecs
from raylog.common import record_batch
from raylog.common.names import validate_client_id
from raylog.common.requests import RETAINED_BATCHES
from raylog.errors import (
    IllegalStateError,
    InvalidConfigError,
    InvalidRecordError,
    KafkaTimeoutError,
    RecordTooLargeError,
    UnknownTopicOrPartitionError,
)
from raylog.types import OffsetAndMetadata, TopicPartition

_ACKS = {"all": -1, "-1": -1, -1: -1, "1": 1, 1: 1, "0": 0, 0: 0}


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

    #: The sender's class (a benchmark's counts the batches it ships).
    _sender_type: type[Sender] = Sender

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
        _check_config(self._config)
        settings = (security_protocol, sasl_mechanism, sasl_plain_username, sasl_plain_password)
        self._cluster, self._session = client_handle(cluster, request_timeout_ms / 1000, *settings)
        codec = _codec(self._config)
        self._buffer_memory = buffer_memory
        self._key_serializer, self._value_serializer = key_serializer, value_serializer
        self._default_partitioner = DefaultPartitioner()
        self._partitioner = partitioner or self._default_partitioner
        self._metadata = ProducerMetadata(self._cluster, max_request_size, codec)
        backoff_s = retry_backoff_ms / 1000
        max_block_s, delivery_timeout_s = max_block_ms / 1000, delivery_timeout_ms / 1000
        self._transactions = TransactionManager(
            self._cluster, self._session, transactional_id, transaction_timeout_ms, max_block_s, backoff_s
        )
        # Its parts hold nothing of the producer: a closed one goes as soon as it is dropped.
        moved = _sticky_partition_mover(self._default_partitioner, self._metadata)
        refuse = self._transactions.require_sendable
        self._accumulator = RecordAccumulator(batch_size, buffer_memory, max_block_s, delivery_timeout_s, refuse, moved)
        self._sender = self._sender_type(
            self._cluster,
            self._session,
            self._accumulator,
            self._transactions,
            acks=_ACKS[acks],
            request_timeout_ms=request_timeout_ms,
            client_id=client_id,
            codec=codec,
            linger_s=linger_ms / 1000,
            max_in_flight=max_in_flight_requests_per_connection,
            retries=retries,
            backoff_s=backoff_s,
            idempotent=enable_idempotence,
            metadata_max_age_s=metadata_max_age_ms / 1000,
        )
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
                longer than MAX_HEADER_KEY_BYTES (see :mod:`raylog.common.record_batch`).
            RecordTooLargeError: the record cannot fit a batch of ``max_request_size`` or of
                the topic's ``max.message.bytes``, or is larger than ``buffer_memory``.
            InvalidTopicError: not a legal topic name.
            UnknownTopicOrPartitionError: no such topic or partition (after a metadata refresh).
            KafkaTimeoutError: no buffer room within ``max_block_ms``.
        """
        accumulator = self._accumulator
        if accumulator.failure is not None or accumulator.closed or self._transactions.outside:
            accumulator.require_open()
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
        partitions, capacity = self._metadata.route(topic)
        if bound > capacity:
            self._require_record_fits_alone(topic, value, key, headers)
        if size > self._buffer_memory:
            raise RecordTooLargeError(f"record of {size} bytes is larger than buffer_memory={self._buffer_memory}")
        if partition is None:
            partition = self._partitioner(topic, key, len(partitions))
        elif isinstance(partition, bool) or not isinstance(partition, int) or not 0 <= partition < len(partitions):
            raise _no_such_partition(topic, partition, len(partitions))
        tp, sizes = partitions[partition], (key_size, -1 if value is None else value_size, header_size)
        return accumulator.append(tp, value, key, timestamp_ms, headers, size, bound, capacity, sizes)

    def _require_record_fits_alone(self, topic: str, value: Any, key: Any, headers: list | None) -> None:
        """See :meth:`ProducerMetadata.require_fits_alone` (a record over its size bound)."""
        self._metadata.require_fits_alone(
            topic,
            record_batch.binary_of([value]),
            keys=None if key is None else record_batch.binary_of([key]),
            headers=record_batch.headers_of([headers]) if headers else None,
        )

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
        self._accumulator.require_open()
        count = self._metadata.num_partitions(topic)
        if partition is not None and not (isinstance(partition, int) and 0 <= partition < count):
            raise _no_such_partition(topic, partition, count)
        columns = arrow_batches.columns_of(table, key_column, value_column, timestamp_column, headers_column)
        bounds = arrow_batches.row_bounds(columns)
        partitions, capacity = self._metadata.route(topic)
        for row in np.flatnonzero(bounds > capacity):  # alone in its batch, if it fits at all
            self._metadata.require_fits_alone(topic, **{k: v.slice(int(row), 1) for k, v in columns.items()})
        parts = [
            self._accumulator.append_arrow(partitions[part], chunk, capacity)
            for part, chunk in arrow_batches.split(
                self._default_partitioner, topic, columns, count, partition, capacity, self._buffer_memory
            )
        ]
        return gather(parts)

    def flush(self, timeout: float | None = None) -> None:
        """Send every queued record now and wait until each is acknowledged or failed.

        Raises:
            KafkaTimeoutError: not all were done within ``timeout`` seconds.
        """
        self._accumulator.flush(timeout)

    def close(self, timeout: float | None = None) -> None:
        """Flush, then stop the sender thread. Idempotent."""
        if self._accumulator.closed:
            return
        try:
            self.flush(timeout)
        finally:
            self._accumulator.close()
            self._sender.join(timeout)

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    @property
    def throttle_time_ms(self) -> int:
        """How long the leader held the latest response back for this client's quota (0: not)."""
        return self._sender.throttle_time_ms

    def partitions_for(self, topic: str) -> list[int]:
        return list(range(self._metadata.num_partitions(topic)))

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
        if self._transactions.transactional_id is None:
            raise IllegalStateError("init_transactions needs a transactional_id")
        if self._sender.producer_id >= 0:
            raise IllegalStateError("init_transactions was called already")
        answer = self._transactions.init_producer_id(timeout)
        with self._accumulator.cond:
            self._sender.set_producer_id(answer.producer_id, answer.producer_epoch)

    def begin_transaction(self) -> None:
        """Open a transaction: sends are part of it until it is committed or aborted.

        Raises:
            IllegalStateError: not initialised, or a transaction is open already.
            ProducerFencedError: a newer instance took over.
        """
        self._transactions.begin(self._sender.producer_id)

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
        sender = self._sender
        self._transactions.send_offsets(offsets, group_metadata, sender.producer_id, sender.producer_epoch, timeout)

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Send what is queued, then commit: once this returns, read_committed consumers of
        every partition written read the transaction, and its offsets are the group's.

        Raises:
            TransactionAbortableError: a send of the transaction failed: abort it.
            ProducerFencedError: a newer instance took over (or the transaction timed out).
            KafkaTimeoutError: not done within ``timeout``: call again (the retry is
                answered once the first call's commit completes).
        """
        self._transactions.require_transaction()
        self.flush(timeout)
        self._transactions.require_committable()
        self._end_transaction(True, timeout)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the open transaction: read_committed consumers never see what it wrote.

        Raises:
            IllegalStateError: no transaction is open.
            ProducerFencedError, KafkaTimeoutError.
        """
        self._transactions.require_transaction()
        try:
            self.flush(timeout)  # the batches in flight land (or fail) before the markers
        except KafkaTimeoutError:
            pass
        if self._transactions.fenced is not None:
            raise self._transactions.fenced
        self._end_transaction(False, timeout)

    def _end_transaction(self, commit: bool, timeout: float | None) -> None:
        sender = self._sender
        answer = self._transactions.end(commit, sender.producer_id, sender.producer_epoch, timeout)
        with self._accumulator.cond:
            sender.set_producer_id(answer.producer_id, answer.producer_epoch)  # a new epoch numbers from 0


def _sticky_partition_mover(
    partitioner: DefaultPartitioner, metadata: ProducerMetadata
) -> Callable[[TopicPartition], None]:
    """What the accumulator calls as it closes a batch: the sticky partitioner moves on."""

    def batch_closed(tp: TopicPartition) -> None:
        partitioner.on_batch_closed(tp.topic, tp.partition, metadata.routed_partitions(tp.topic))

    return batch_closed


def _no_such_partition(topic: str, partition: Any, count: int) -> UnknownTopicOrPartitionError:
    return UnknownTopicOrPartitionError(f"partition {partition!r} is not in [0, {count}) for {topic!r}")


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


def _check_config(config: dict[str, Any]) -> None:
    """Check a producer's settings (but its compression, see :func:`_codec`).

    Raises:
        InvalidConfigError: a setting out of its range, or settings that contradict each other.
    """
    acks = config["acks"]
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
        value = config[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidConfigError(f"{name} must be a non-negative integer, got {value!r}")
    idempotent = config["enable_idempotence"]
    if not 1 <= config["max_in_flight_requests_per_connection"] <= (RETAINED_BATCHES if idempotent else 2**31):
        raise InvalidConfigError(
            f"max_in_flight_requests_per_connection must be >= 1 (and <= {RETAINED_BATCHES} with idempotence)"
        )
    if config["batch_size"] < 1 or config["batch_size"] > config["buffer_memory"]:
        raise InvalidConfigError("batch_size must be in [1, buffer_memory]")
    transactional_id, transaction_timeout_ms = config["transactional_id"], config["transaction_timeout_ms"]
    if transactional_id is not None:
        if not isinstance(transactional_id, str) or not transactional_id:
            raise InvalidConfigError(f"transactional_id must be a non-empty string, got {transactional_id!r}")
        if not idempotent or _ACKS[acks] != -1:
            raise InvalidConfigError('a transactional producer needs enable_idempotence=True and acks="all"')
        if isinstance(transaction_timeout_ms, bool) or not isinstance(transaction_timeout_ms, int):
            raise InvalidConfigError(f"transaction_timeout_ms must be an integer, got {transaction_timeout_ms!r}")
    validate_client_id(config["client_id"], InvalidConfigError)


def _codec(config: dict[str, Any]) -> int:
    """The codec ``compression_type`` or ``compression`` names.

    Raises:
        InvalidConfigError: both given, and they differ.
    """
    compression_type, compression = config["compression_type"], config["compression"]
    if (
        compression_type is not None
        and compression is not None
        and str(compression_type).lower() != str(compression).lower()
    ):
        raise InvalidConfigError(
            f"compression_type={compression_type!r} and compression={compression!r} differ: give one of them"
        )
    return codecs.codec_id(compression_type if compression_type is not None else compression)


def _rebuild_producer(cluster: RaylogCluster, config: dict) -> Producer:
    return Producer(cluster, **config)
