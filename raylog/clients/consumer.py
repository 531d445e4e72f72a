"""The Consumer: pulls record batches from partition leaders (Kafka's KafkaConsumer).

Each assigned, unpaused partition has at most one fetch in flight; all run concurrently,
a fetch that has not answered by the end of one ``poll`` is kept for the next, and the
next fetch goes out as soon as a response arrives (up to ``BUFFERED_FETCHES`` decoded
responses wait per partition), so fetching overlaps decoding, like Kafka's fetcher. A
leader holds a fetch until ``fetch_min_bytes`` are there or ``fetch_max_wait_ms`` passed
(long poll). Fetched bytes are the stored batches themselves,
read zero-copy from Ray's object store and decoded to Arrow without a Python loop per
record; :meth:`poll` then makes :class:`Record` objects, :meth:`poll_arrow` does not.

Positions start from ``auto_offset_reset`` ("earliest", "latest" or "none", which raises)
unless set by :meth:`seek`. Consumer groups (subscribe, commit) come with their own issue;
here partitions are assigned by hand, or all partitions of the topics given.

Concurrency: not thread-safe, like Kafka's consumer; use one per thread.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa
import ray
from ray.exceptions import RayError

from raylog.clients.cluster import RaylogCluster
from raylog.clients.transport import call, translate
from raylog.coordination.partition import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from raylog.errors import (
    IllegalStateError,
    InvalidConfigError,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
    RaylogError,
)
from raylog.protocol import FetchRequest, error_of
from raylog.storage import record_batch
from raylog.types import OffsetAndTimestamp, Record, TopicPartition

#: Decoded responses kept per partition before fetching pauses (bounds memory).
BUFFERED_FETCHES = 2

ARROW_SCHEMA = pa.schema(
    [pa.field("topic", pa.string()), pa.field("partition", pa.int32()), *record_batch.OUTPUT_SCHEMA]
)


class _Buffered:
    """A decoded fetch not yet handed out."""

    __slots__ = ("table", "cursor")

    def __init__(self, table: pa.Table):
        self.table, self.cursor = table, 0


class Consumer:
    """Reads records from raylog partitions.

    Args:
        cluster: from :func:`raylog.connect`.
        topics: topics whose every partition to read (or call :meth:`assign`).
        auto_offset_reset: "earliest", "latest" or "none".
        fetch_min_bytes, fetch_max_wait_ms: the long poll of each fetch.
        max_partition_fetch_bytes: bytes per partition per fetch (at least one batch); large,
            because a Ray call costs about a millisecond whatever it carries.
        max_poll_records: records :meth:`poll` returns at most.
        request_timeout_ms: how long offset look-ups may take.
        check_crcs: verify batch CRCs on decode.
        consumer_timeout_ms: iteration stops after this long without records (None: never).
        key_deserializer, value_deserializer: applied by :meth:`poll` and iteration.

    Example:
        >>> consumer = Consumer(cluster, "clicks", auto_offset_reset="earliest")  # doctest: +SKIP
        >>> for record in consumer: ...                                          # doctest: +SKIP
    """

    def __init__(
        self,
        cluster: RaylogCluster,
        *topics: str,
        auto_offset_reset: str = "latest",
        fetch_min_bytes: int = 1,
        fetch_max_wait_ms: int = 500,
        max_partition_fetch_bytes: int = 8 << 20,
        max_poll_records: int = 500,
        request_timeout_ms: int = 30_000,
        check_crcs: bool = True,
        consumer_timeout_ms: int | None = None,
        key_deserializer: Callable[[bytes], Any] | None = None,
        value_deserializer: Callable[[bytes], Any] | None = None,
    ):
        self._config = {k: v for k, v in locals().items() if k not in ("self", "cluster", "topics")}
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise InvalidConfigError(f"auto_offset_reset must be earliest, latest or none, got {auto_offset_reset!r}")
        for name in (
            "fetch_min_bytes",
            "fetch_max_wait_ms",
            "max_partition_fetch_bytes",
            "max_poll_records",
            "request_timeout_ms",
        ):
            value = self._config[name]
            if (
                isinstance(value, bool)
                or not isinstance(value, int)
                or value < (1 if name != "fetch_max_wait_ms" else 0)
            ):
                raise InvalidConfigError(f"{name} must be a positive integer, got {value!r}")
        self._cluster = cluster
        self._reset = auto_offset_reset
        self._min_bytes = fetch_min_bytes
        self._max_wait_ms = fetch_max_wait_ms
        self._max_bytes = max_partition_fetch_bytes
        self._max_records = max_poll_records
        self._timeout_s = request_timeout_ms / 1000
        self._check_crcs = check_crcs
        self._iteration_timeout_ms = consumer_timeout_ms
        self._key_deserializer = key_deserializer
        self._value_deserializer = value_deserializer
        self._assignment: list[TopicPartition] = []
        self._positions: dict[TopicPartition, int | None] = {}
        self._paused: set[TopicPartition] = set()
        self._in_flight: dict[Any, tuple[TopicPartition, int]] = {}  # ObjectRef -> (tp, offset)
        self._fetching: dict[TopicPartition, Any] = {}  # tp -> its one fetch in flight
        self._buffers: dict[TopicPartition, collections.deque[_Buffered]] = {}
        self._next_fetch: dict[TopicPartition, int] = {}  # where the next fetch starts
        self._closed = False
        if topics:
            metadata = cluster.metadata(refresh=True)
            self.assign([TopicPartition(t, p) for t in topics for p in range(metadata.num_partitions(t))])

    def __reduce__(self):
        # A consumer shipped to another process keeps its assignment and positions.
        return (_rebuild_consumer, (self._cluster, self._config, list(self._assignment), dict(self._positions)))

    # --- assignment and positions -------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these partitions (positions of partitions kept are kept).

        Raises:
            UnknownTopicOrPartitionError: a partition that does not exist.
        """
        self._require_open()
        wanted = [TopicPartition(*tp) for tp in partitions]
        metadata = self._cluster.metadata()
        for tp in wanted:
            try:
                metadata.leader(tp)
            except RaylogError:
                metadata = self._cluster.metadata(refresh=True)
                metadata.leader(tp)
        self._assignment = list(dict.fromkeys(wanted))
        self._positions = {tp: self._positions.get(tp) for tp in self._assignment}
        self._paused &= set(self._assignment)
        self._buffers = {tp: b for tp, b in self._buffers.items() if tp in self._positions}
        self._next_fetch = {tp: o for tp, o in self._next_fetch.items() if tp in self._positions}

    def assignment(self) -> set[TopicPartition]:
        return set(self._assignment)

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
        return {
            TopicPartition(*tp): self._list_offset(TopicPartition(*tp), EARLIEST_TIMESTAMP).offset for tp in partitions
        }

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The high watermark of each partition (the offset the next committed record gets)."""
        return {
            TopicPartition(*tp): self._list_offset(TopicPartition(*tp), LATEST_TIMESTAMP).offset for tp in partitions
        }

    # --- polling ------------------------------------------------------------------------

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> dict[TopicPartition, list[Record]]:
        """Records fetched since the last poll, waiting up to ``timeout_ms`` for some.

        Raises:
            NoOffsetForPartitionError: auto_offset_reset="none" and a position is unknown.
            CorruptRecordError: a fetched batch failed its checks.
        """
        out: dict[TopicPartition, list[Record]] = {}
        for tp, table in self._poll_tables(timeout_ms, max_records or self._max_records):
            out[tp] = self._records(tp, table)
        return out

    def poll_arrow(self, timeout_ms: int = 0, max_records: int | None = None) -> pa.Table:
        """Like :meth:`poll`, as one Arrow table: topic, partition, offset, timestamp_ms, key,
        value, headers (keys and values as bytes; deserializers are not applied)."""
        tables = [
            table.add_column(0, "topic", pa.repeat(tp.topic, table.num_rows)).add_column(
                1, "partition", pa.repeat(pa.scalar(tp.partition, pa.int32()), table.num_rows)
            )
            for tp, table in self._poll_tables(timeout_ms, max_records or 2**62)
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
        """Stop; fetches in flight are abandoned. Idempotent."""
        self._closed = True
        self._in_flight.clear()
        self._fetching.clear()
        self._buffers.clear()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # --- internals ----------------------------------------------------------------------

    def _poll_tables(self, timeout_ms: int, max_records: int) -> list[tuple[TopicPartition, pa.Table]]:
        self._require_open()
        if not self._assignment:
            raise IllegalStateError("no partitions assigned: give topics or call assign()")
        deadline = time.monotonic() + max(0, timeout_ms) / 1000
        while True:
            self._send_fetches()
            out = self._drain(max_records)
            remaining = deadline - time.monotonic()
            if out or remaining <= 0 or not self._in_flight:
                return out
            ready, _ = ray.wait(list(self._in_flight), num_returns=1, timeout=remaining)
            for ref in ready + ray.wait(list(self._in_flight), num_returns=len(self._in_flight), timeout=0)[0]:
                if ref in self._in_flight:
                    self._complete_fetch(ref)

    def _send_fetches(self) -> None:
        for tp in self._assignment:
            if tp in self._fetching or tp in self._paused or len(self._buffers.get(tp, ())) >= BUFFERED_FETCHES:
                continue
            if self._positions[tp] is None:
                self._reset_position(tp)
            offset = self._next_fetch.get(tp, self._positions[tp])
            try:
                leader = self._cluster.metadata().leader(tp)
            except RaylogError:
                self._cluster.metadata(refresh=True)
                continue
            request = FetchRequest(offset, self._max_bytes, self._min_bytes, self._max_wait_ms)
            ref = leader.fetch.remote(request)
            self._in_flight[ref] = (tp, offset)
            self._fetching[tp] = ref

    def _complete_fetch(self, ref: Any) -> None:
        tp, offset = self._in_flight.pop(ref)
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
        if len(response.records):
            table = record_batch.decode_table(response.records, check_crcs=self._check_crcs, min_offset=offset)
            if table.num_rows:
                self._buffers.setdefault(tp, collections.deque()).append(_Buffered(table))
                self._next_fetch[tp] = table.column("offset")[-1].as_py() + 1
            else:
                # Batches wholly below the position (e.g. control batches): skip past them.
                last = list(record_batch.iter_headers(response.records))[-1][1]
                self._next_fetch[tp] = max(offset, last.next_offset)
                if not self._buffers.get(tp):
                    self._positions[tp] = self._next_fetch[tp]

    def _drain(self, max_records: int) -> list[tuple[TopicPartition, pa.Table]]:
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
            self._positions[tp] = table.column("offset")[-1].as_py() + 1
            out.append((tp, table))
            max_records -= take
        return out

    def _records(self, tp: TopicPartition, table: pa.Table) -> list[Record]:
        n = table.num_rows
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
        return list(
            map(
                Record,
                [tp.topic] * n,
                [tp.partition] * n,
                table.column("offset").to_pylist(),
                table.column("timestamp_ms").to_pylist(),
                keys,
                values,
                headers,
            )
        )

    def _set_position(self, tp: TopicPartition, offset: int) -> None:
        self._positions[tp] = offset
        self._next_fetch.pop(tp, None)
        self._buffers.pop(tp, None)
        self._fetching.pop(tp, None)  # a fetch in flight for the old offset is ignored on arrival

    def _reset_position(self, tp: TopicPartition) -> None:
        if self._reset == "none":
            raise NoOffsetForPartitionError(f"no position for {tp} and auto_offset_reset is none")
        timestamp = EARLIEST_TIMESTAMP if self._reset == "earliest" else LATEST_TIMESTAMP
        self._set_position(tp, self._list_offset(tp, timestamp).offset)

    def _list_offset(self, tp: TopicPartition, timestamp: int) -> OffsetAndTimestamp:
        for attempt in range(3):
            leader = self._cluster.metadata(refresh=attempt > 0).leader(tp)
            try:
                response = call(leader.list_offsets.remote(timestamp), self._timeout_s)
            except RaylogError as exc:
                if not exc.retriable or attempt == 2:
                    raise
                continue
            error = error_of(response)
            if error is None:
                return OffsetAndTimestamp(response.offset, response.timestamp_ms)
            if not error.retriable or attempt == 2:
                raise error
        raise AssertionError("unreachable")

    def _assigned(self, tp: Any) -> TopicPartition:
        tp = TopicPartition(*tp)
        if tp not in self._positions:
            raise IllegalStateError(f"{tp} is not assigned to this consumer")
        return tp

    def _require_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the consumer is closed")


def _rebuild_consumer(cluster: RaylogCluster, config: dict, assignment: list, positions: dict) -> Consumer:
    consumer = Consumer(cluster, **config)
    consumer.assign(assignment)
    for tp, offset in positions.items():
        if offset is not None:
            consumer.seek(tp, offset)
    return consumer
