"""Topics as Ray Data datasets: a bounded read, a write, and an unbounded micro-batch stream.

Ray Data's own interfaces: :class:`RaylogDatasource` is a ``ray.data.Datasource`` and
:class:`RaylogDatasink` a ``ray.data.Datasink``, used as any other::

    ds = ray.data.read_datasource(RaylogDatasource(cluster, ["clicks", "views"]), override_num_blocks=12)
    ds.write_datasink(RaylogDatasink(cluster, "clicks-copy", producer_config={"acks": "all"}))

:func:`read_topic` takes the parameters of ``ray.data.read_kafka`` that mean the same here
(topics, start_offset, end_offset, timeout_ms, consumer_config, override_num_blocks, num_cpus
and the other remote parameters, ray_remote_args) and :func:`write_topic` those of
``Dataset.write_kafka`` (producer_config, ray_remote_args, concurrency); both are the source
and sink above with raylog's defaults (one read task per partition, blocks of
READ_BLOCK_BYTES, read tasks of READ_TASK_CPUS).

A bounded read covers one offset range ``[start, end)`` per partition (end exclusive),
resolved when the datasource is made, so reading the dataset again reads the same records
(``read_kafka`` resolves them when each task starts). A read task is a plain
:class:`Consumer` assigned to its ranges: each fetched response is already an Arrow table
(the consumer decodes record batches without a loop per record), trimmed at ``end``. Every
block has the columns of :meth:`Consumer.poll_arrow`: topic, partition, offset, timestamp,
key, value, headers (an empty list for a record without headers, as in :class:`Record`).

Where a range starts or ends is an :data:`OffsetSpec`: one for all partitions, a dict
``{partition: spec}`` (one topic), or ``{topic: {partition: spec}}`` as ``read_kafka`` has it;
partitions left out start at "earliest" and end at "latest". A spec is:

- ``"earliest"`` (the log start offset) or ``"latest"`` (the high watermark; the last stable
  offset for read_committed reads, the default);
- an ``int`` offset;
- a :class:`datetime.datetime`, or ``Timestamp(timestamp_ms)``: the first offset whose record
  timestamp is at or after it (the high watermark if none is). Given as ``start_offset`` /
  ``end_offset`` (``read_kafka``'s names), a datetime without a time zone is UTC, as
  ``read_kafka`` reads it; given as ``start`` / ``end`` (raylog's names), it needs a time zone;
- ``Committed(group_id)``: the group's committed offset (``reset`` where it has none).

The stream (:class:`TopicStream`) reads ranges one after another, each micro-batch from
where the last ended up to the high watermark at that moment, and keeps its progress as the
committed offsets of a consumer group: a batch's ends are committed only after the caller's
work on it succeeded, so a crash repeats at most the batch in flight, and a restarted stream
resumes where the group's commits say. Given a ``transactional_id`` the stream is exactly
once into raylog topics: a batch's output records (:meth:`MicroBatch.write`) and its offsets
commit in one transaction (see :mod:`raylog.clients.exactly_once`).

Everything here uses raylog's public client API, so it works wherever those clients do.
"""

from __future__ import annotations

import datetime
import functools
import heapq
import logging
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
from raylog.clients.security import security_settings
from raylog.errors import (
    IllegalStateError,
    InvalidConfigError,
    InvalidRecordError,
    KafkaTimeoutError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from raylog.types import OffsetAndMetadata, TopicPartition

log = logging.getLogger(__name__)

#: How long one poll of a read task waits for records (it loops until its range is read).
READ_POLL_TIMEOUT_MS = 1_000
#: CPUs reserved per read task by :func:`read_topic` (``num_cpus`` changes it): a read
#: mostly waits for its partition leader's fetches, and decoding is a zero-copy Arrow read,
#: so a whole CPU each would run only as many partitions at once as there are CPUs
#: (measured here: 6 partitions of 1M records read 2x faster at 0.25).
READ_TASK_CPUS = 0.25
#: The target_max_block_size of :func:`read_topic`'s datasets (Ray Data's default is
#: 128 MiB): a read task's fetched responses (up to ``max_partition_fetch_bytes`` each) are
#: gathered into blocks of about this size. Blocks of 128 MiB hold a read task's share of the
#: object store budget while Ray Data lets one task run at a time (10M records of 100 B over
#: 6 partitions read in 7-10 s here, 0.08-0.15x a Consumer); 32 MiB let them stream (1.7 s,
#: 0.41-0.45x), 16 MiB and 1 MiB (responses cut up) were slower again.
READ_BLOCK_BYTES = 32 << 20
#: A read task that got no record for this long while its range is not read fails
#: (a partition without a leader, or records below the high watermark that are gone).
READ_STALL_TIMEOUT_S = 120.0
#: The fewest records a read task gets when a partition's range is cut into several tasks
#: (:meth:`RaylogDatasource.get_read_tasks`): a task's own cost (a consumer, its first
#: fetches, a Ray task) is a few tens of milliseconds, about what 100,000 records of 100 B
#: take to read.
MIN_ROWS_PER_READ_TASK = 100_000
#: Consumer settings a read task sets itself: it reads assigned ranges, outside any group.
_READ_TASK_CONSUMER_SETTINGS = ("group_id", "group_instance_id", "auto_offset_reset", "enable_auto_commit")


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
#: Where ranges start or end: one spec for every partition, a dict by partition number (one
#: topic), or a dict by topic of dicts by partition number (``read_kafka``'s form); partitions
#: missing from a dict use the default: "earliest" for a start, "latest" for an end.
OffsetSpec = PartitionSpec | dict[int, PartitionSpec] | dict[str, dict[int, PartitionSpec]]
#: A read task's share of a read: ``(partition, start, end)`` ranges, read one after another.
Piece = tuple[TopicPartition, int, int]


# --- reading ------------------------------------------------------------------------------


def read_topic(
    topics: str | list[str],
    *,
    start_offset: OffsetSpec | None = None,
    end_offset: OffsetSpec | None = None,
    start: OffsetSpec | None = None,
    end: OffsetSpec | None = None,
    cluster: RaylogCluster | str | None = None,
    trigger: str = "once",
    consumer_config: dict[str, Any] | None = None,
    timeout_ms: int | None = None,
    override_num_blocks: int | None = None,
    num_cpus: float | None = None,
    num_gpus: float | None = None,
    memory: float | None = None,
    concurrency: int | None = None,
    label_selector: dict[str, str] | None = None,
    fallback_strategy: list[dict[str, Any]] | None = None,
    max_calls: int | None = None,
    resources: dict[str, float] | None = None,
    accelerator_type: str | None = None,
    runtime_env: dict[str, Any] | None = None,
    ray_remote_args: dict[str, Any] | None = None,
) -> ray.data.Dataset:
    """A bounded dataset of the records of ``topics`` in ``[start, end)`` of each partition:
    ``ray.data.read_datasource`` of a :class:`RaylogDatasource`, with the parameters of
    ``ray.data.read_kafka`` that mean the same here.

    Args:
        topics: a topic or a list of topics.
        start_offset: where each partition's range starts (inclusive); see :data:`OffsetSpec`
            (a datetime without a time zone is UTC, as for ``read_kafka``). Default "earliest".
        end_offset: where it ends (exclusive), at most the high watermark at the time of this
            call. Default "latest".
        start, end: the same under raylog's first names (a datetime needs a time zone); give
            each bound once, under either name.
        cluster: a :class:`RaylogCluster`, a Ray address for :func:`raylog.connect`, or None
            for ``raylog.connect()``.
        trigger: "once" (a bounded read; the only trigger, as for ``read_kafka``; see
            :class:`TopicStream` for an unbounded read).
        consumer_config: keyword arguments for each read task's :class:`Consumer` (e.g.
            ``isolation_level``, ``max_partition_fetch_bytes``); not group settings.
        timeout_ms: how long each read task reads at most; a task that runs out logs a
            warning and returns what it read (``read_kafka``'s rule). None: until its end.
        override_num_blocks: how many read tasks (and so blocks) to make; default one per
            partition with records. More than that cuts partitions into offset ranges of at
            least MIN_ROWS_PER_READ_TASK records (Ray Data cuts the blocks further), fewer
            gives a task several partitions.
        num_cpus: CPUs per read task (default READ_TASK_CPUS).
        num_gpus, memory, concurrency, label_selector, fallback_strategy, max_calls,
            resources, accelerator_type, runtime_env, ray_remote_args: as for
            ``ray.data.read_datasource``.

    Returns:
        A lazy :class:`ray.data.Dataset`; columns topic, partition, offset, timestamp, key,
        value, headers (empty lists where none).

    Raises:
        UnknownTopicOrPartitionError: no such topic or partition.
        OffsetOutOfRangeError: an offset below the log start offset or above the high watermark.
        InvalidConfigError (a ValueError): a start after its end, a spec that is not one of the
            forms above, a bound given twice, a bad trigger, timeout, block count or setting.

    Example:
        >>> ds = read_topic(["clicks", "views"], start_offset={"clicks": {0: 100}}, cluster=cluster)  # doctest: +SKIP
        >>> ds.groupby("topic").count().take_all()                                                # doctest: +SKIP
    """
    if trigger != "once":
        raise InvalidConfigError(f"trigger must be 'once' (a bounded read; TopicStream reads on), got {trigger!r}")
    cluster = _cluster(cluster)
    consumer_config = _consumer_config(consumer_config)
    ranges = topic_ranges(
        topics,
        start=start,
        end=end,
        start_offset=start_offset,
        end_offset=end_offset,
        cluster=cluster,
        consumer_config=consumer_config,
    )
    source = RaylogDatasource._of_ranges(cluster, ranges, consumer_config=consumer_config, timeout_ms=timeout_ms)
    return _read_dataset(
        source,
        override_num_blocks=override_num_blocks,
        num_cpus=num_cpus,
        num_gpus=num_gpus,
        memory=memory,
        concurrency=concurrency,
        label_selector=label_selector,
        fallback_strategy=fallback_strategy,
        max_calls=max_calls,
        resources=resources,
        accelerator_type=accelerator_type,
        runtime_env=runtime_env,
        ray_remote_args=ray_remote_args,
    )


def topic_ranges(
    topics: str | list[str],
    *,
    start: OffsetSpec | None = None,
    end: OffsetSpec | None = None,
    cluster: RaylogCluster,
    start_offset: OffsetSpec | None = None,
    end_offset: OffsetSpec | None = None,
    consumer_config: dict[str, Any] | None = None,
) -> dict[TopicPartition, tuple[int, int]]:
    """The ``[start, end)`` offsets of each partition of ``topics``, as :func:`read_topic`
    resolves them (and raises)."""
    return _topic_ranges(
        _cluster(cluster),
        _topic_list(topics),
        _one_bound("start", start, start_offset, "earliest"),
        _one_bound("end", end, end_offset, "latest"),
        _consumer_config(consumer_config),
    )


class RaylogDatasource(Datasource):
    """Partition offset ranges of raylog topics, as a Ray Data datasource.

    ``ray.data.read_datasource(RaylogDatasource(cluster, topics, ...), override_num_blocks=...,
    num_cpus=..., ...)`` reads them. The ranges are resolved here, once (errors are raised
    here, before any task runs); :meth:`get_read_tasks` shares them out among read tasks:

    - ``parallelism`` (``override_num_blocks``) at most the number of partitions with
      records: that many tasks, each with whole partitions, balanced by offsets;
    - more: partitions are cut into contiguous offset ranges, the largest first, each of at
      least ``min_rows_per_task`` records, up to ``parallelism`` tasks. (Without
      ``override_num_blocks`` Ray Data asks for ~200, so a small topic is one task per
      partition; Ray Data then cuts each task's output to make up the block count.)

    Columns are :meth:`Consumer.poll_arrow`'s (topic, partition, offset, timestamp, key,
    value, headers); a projection (``select_columns``) is read with only its columns. Against
    ``ray.data.read_kafka``'s: ``timestamp`` is the same (int64 milliseconds, the
    producer's time or the log append time per the topic's ``message.timestamp.type``), there
    is no ``timestamp_type``, and headers are a list of ``{key, value}`` structs
    (order and repeated keys kept, as Kafka's headers) where read_kafka has a map.

    Concurrency: immutable once built; Ray Data pickles it and runs its read tasks anywhere.

    Args:
        cluster: a :class:`RaylogCluster`, a Ray address for :func:`raylog.connect`, or None
            for ``raylog.connect()``.
        topics: a topic or a list of topics.
        start_offset, end_offset: see :data:`OffsetSpec` (a datetime without a time zone is
            UTC, as for ``read_kafka``).
        consumer_config: keyword arguments for each read task's :class:`Consumer`.
        timeout_ms: how long a read task reads at most (then it logs a warning and returns
            what it read); None: until its ranges are read.
        min_rows_per_task: the fewest records of a task cut from a partition.

    Raises:
        UnknownTopicOrPartitionError, OffsetOutOfRangeError, InvalidConfigError: as
        :func:`read_topic`.
    """

    def __init__(
        self,
        cluster: RaylogCluster | str | None,
        topics: str | list[str],
        *,
        start_offset: OffsetSpec = "earliest",
        end_offset: OffsetSpec = "latest",
        consumer_config: dict[str, Any] | None = None,
        timeout_ms: int | None = None,
        min_rows_per_task: int = MIN_ROWS_PER_READ_TASK,
    ):
        super().__init__()
        cluster = _cluster(cluster)
        consumer_config = _consumer_config(consumer_config)
        ranges = topic_ranges(
            topics, start_offset=start_offset, end_offset=end_offset, cluster=cluster, consumer_config=consumer_config
        )
        self._setup(
            cluster, ranges, consumer_config=consumer_config, timeout_ms=timeout_ms, min_rows_per_task=min_rows_per_task
        )

    @classmethod
    def from_ranges(
        cls,
        cluster: RaylogCluster | str | None,
        ranges: dict[TopicPartition, tuple[int, int]],
        *,
        consumer_config: dict[str, Any] | None = None,
        timeout_ms: int | None = None,
        min_rows_per_task: int = MIN_ROWS_PER_READ_TASK,
    ) -> RaylogDatasource:
        """A datasource of the given ``{TopicPartition: (start, end)}`` ranges (end
        exclusive), e.g. from :func:`topic_ranges` or a :class:`MicroBatch`.

        Raises:
            InvalidConfigError: a range that is not two offsets with start <= end.
            UnknownTopicOrPartitionError: no such partition.
            OffsetOutOfRangeError: an offset outside the partition's log.
        """
        cluster = _cluster(cluster)
        consumer_config = _consumer_config(consumer_config)
        checked: dict[TopicPartition, tuple[int, int]] = {}
        for tp, bounds in ranges.items():
            if not isinstance(tp, TopicPartition) or not (
                isinstance(bounds, tuple) and len(bounds) == 2 and all(_is_offset(b) for b in bounds)
            ):
                raise InvalidConfigError(f"a range is TopicPartition: (start, end) offsets, got {tp!r}: {bounds!r}")
            if bounds[0] > bounds[1]:
                raise InvalidConfigError(f"{tp.topic}-{tp.partition}: start {bounds[0]} is after end {bounds[1]}")
            checked[tp] = (int(bounds[0]), int(bounds[1]))
        known = set(_partitions(cluster, sorted({tp.topic for tp in checked}), consumer_config))
        missing = sorted(set(checked) - known)
        if missing:
            raise UnknownTopicOrPartitionError(f"no such partitions: {missing}")
        if checked:
            with _offset_consumer(cluster, set(), consumer_config) as consumer:
                bounds = _Bounds(consumer, list(checked))
                bounds.check({tp: start for tp, (start, _) in checked.items()})
                bounds.check({tp: end for tp, (_, end) in checked.items()})
        return cls._of_ranges(
            cluster,
            checked,
            consumer_config=consumer_config,
            timeout_ms=timeout_ms,
            min_rows_per_task=min_rows_per_task,
        )

    @classmethod
    def _of_ranges(
        cls, cluster: RaylogCluster, ranges: dict[TopicPartition, tuple[int, int]], **settings: Any
    ) -> RaylogDatasource:
        """A datasource of ranges already checked (resolved here, or a stream's); ``settings``
        as :meth:`_setup` takes them."""
        source = cls.__new__(cls)
        Datasource.__init__(source)
        source._setup(cluster, ranges, **settings)
        return source

    def _setup(
        self,
        cluster: RaylogCluster,
        ranges: dict[TopicPartition, tuple[int, int]],
        *,
        consumer_config: dict[str, Any] | None = None,
        timeout_ms: int | None = None,
        min_rows_per_task: int = MIN_ROWS_PER_READ_TASK,
    ) -> None:
        if timeout_ms is not None and (not _is_offset(timeout_ms) or timeout_ms <= 0):
            raise InvalidConfigError(f"timeout_ms must be a positive integer or None, got {timeout_ms!r}")
        if not _is_offset(min_rows_per_task) or min_rows_per_task < 1:
            raise InvalidConfigError(f"min_rows_per_task must be a positive integer, got {min_rows_per_task!r}")
        self._cluster = cluster
        self._ranges = dict(sorted(ranges.items()))
        self._consumer_config = consumer_config or {}
        self._timeout_ms = timeout_ms
        self._min_rows_per_task = int(min_rows_per_task)
        self._projection_map: dict[str, str] | None = None

    @property
    def ranges(self) -> dict[TopicPartition, tuple[int, int]]:
        """``{TopicPartition: (start, end)}`` of every partition read, end exclusive."""
        return dict(self._ranges)

    @property
    def num_partitions_with_records(self) -> int:
        """How many ranges are not empty (:func:`read_topic`'s default block count)."""
        return sum(1 for start, end in self._ranges.values() if end > start)

    def get_name(self) -> str:
        return "Raylog"

    def estimate_inmemory_data_size(self) -> int | None:
        return None  # record sizes are unknown until read (offsets do not tell bytes)

    def supports_projection_pushdown(self) -> bool:
        return True

    def get_read_tasks(
        self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None
    ) -> list[ReadTask]:
        columns = self._get_data_columns()
        if columns == []:
            columns = ["offset"]  # (e.g. for count(): an Arrow table of no columns has no rows)
        schema = ARROW_SCHEMA if columns is None else pa.schema([ARROW_SCHEMA.field(c) for c in columns])
        tasks = plan_read_tasks(self._ranges, parallelism, self._min_rows_per_task)
        if not tasks:  # one task of one empty block: the dataset still has its schema
            metadata = BlockMetadata(num_rows=0, size_bytes=0, exec_stats=None, input_files=None)
            return [ReadTask(functools.partial(_empty_block, schema), metadata, schema=schema)]
        return [
            ReadTask(
                functools.partial(
                    _read_pieces, self._cluster, pieces, self._consumer_config, self._timeout_ms, columns
                ),
                # Rows are unknown up front: a compacted topic has gaps between offsets, and
                # transaction markers and aborted records take offsets too.
                BlockMetadata(
                    num_rows=None,
                    size_bytes=None,
                    exec_stats=None,
                    input_files=[f"raylog://{tp.topic}/{tp.partition}" for tp, _, _ in pieces],
                ),
                schema=schema,
                per_task_row_limit=per_task_row_limit,
            )
            for pieces in tasks
        ]


def plan_read_tasks(
    ranges: dict[TopicPartition, tuple[int, int]], parallelism: int, min_rows_per_task: int = MIN_ROWS_PER_READ_TASK
) -> list[list[Piece]]:
    """How :class:`RaylogDatasource` shares ``ranges`` out among read tasks: each task's
    pieces in (topic, partition) order; no task for an empty range.

    With ``parallelism`` at most the number of non-empty ranges, that many tasks of whole
    ranges (the largest range first, each to the task with the fewest offsets so far).
    Otherwise every range is one task or more: the range whose pieces are largest is cut
    again, into equal contiguous parts of at least ``min_rows_per_task`` offsets, while tasks
    are fewer than ``parallelism``.
    """
    nonempty = sorted((tp, start, end) for tp, (start, end) in ranges.items() if end > start)
    wanted = max(1, parallelism)
    if not nonempty:
        return []
    if wanted <= len(nonempty):
        tasks: list[list[Piece]] = [[] for _ in range(wanted)]
        loads = [(0, i) for i in range(wanted)]
        for piece in sorted(nonempty, key=lambda p: (p[1] - p[2], p[0])):
            load, i = heapq.heappop(loads)
            tasks[i].append(piece)
            heapq.heappush(loads, (load + piece[2] - piece[1], i))
        return [sorted(task) for task in tasks]
    sizes = [end - start for _, start, end in nonempty]
    cuts = [1] * len(nonempty)
    most = [max(1, size // min_rows_per_task) for size in sizes]
    largest = [(-size, i) for i, size in enumerate(sizes) if most[i] > 1]
    heapq.heapify(largest)
    spare = wanted - len(nonempty)
    while spare and largest:
        _, i = heapq.heappop(largest)
        cuts[i] += 1
        spare -= 1
        if cuts[i] < most[i]:
            heapq.heappush(largest, (-sizes[i] / cuts[i], i))
    return [
        [(tp, start + size * j // k, start + size * (j + 1) // k)]
        for (tp, start, _), size, k in zip(nonempty, sizes, cuts, strict=True)
        for j in range(k)
    ]


def read_range(
    cluster: RaylogCluster,
    tp: TopicPartition,
    start: int,
    end: int,
    *,
    consumer_config: dict[str, Any] | None = None,
    deadline_s: float | None = None,
) -> Iterator[pa.Table]:
    """The records of ``tp`` in ``[start, end)``, one Arrow table per fetched response (no
    empty ones: an empty range yields nothing), headers as empty lists where none: what a
    read task of :class:`RaylogDatasource` runs per range, in any process that can reach Ray.

    Args:
        consumer_config: keyword arguments for the :class:`Consumer` (not group settings).
        deadline_s: a ``time.monotonic()`` time at which to stop early (with a warning).

    Raises:
        KafkaTimeoutError: no record came for READ_STALL_TIMEOUT_S below ``end``."""
    if start >= end:
        return
    with Consumer(cluster, **(consumer_config or {}), auto_offset_reset="none") as consumer:
        consumer.assign([tp])
        consumer.seek(tp, start)
        progress_s = time.monotonic()
        while consumer.position(tp) < end:
            wait_ms = READ_POLL_TIMEOUT_MS
            if deadline_s is not None:
                wait_ms = min(wait_ms, int((deadline_s - time.monotonic()) * 1000))
                if wait_ms <= 0:
                    log.warning(
                        "%s-%d: read stopped by its timeout at offset %d, below its end %d",
                        tp.topic,
                        tp.partition,
                        consumer.position(tp),
                        end,
                    )
                    return
            table = consumer.poll_arrow(timeout_ms=wait_ms)
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


def _read_pieces(
    cluster: RaylogCluster,
    pieces: list[Piece],
    consumer_config: dict[str, Any],
    timeout_ms: int | None,
    columns: list[str] | None,
) -> Iterator[pa.Table]:
    """A read task: its pieces one after another, within ``timeout_ms`` in all."""
    deadline_s = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000
    for tp, start, end in pieces:
        for table in read_range(cluster, tp, start, end, consumer_config=consumer_config, deadline_s=deadline_s):
            yield table if columns is None else table.select(columns)


def _empty_block(schema: pa.Schema) -> list[pa.Table]:
    return [schema.empty_table()]


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


def _read_dataset(
    source: RaylogDatasource, *, override_num_blocks: int | None = None, **remote: Any
) -> ray.data.Dataset:
    """``read_datasource`` with raylog's defaults: a task per partition with records, blocks
    of READ_BLOCK_BYTES, READ_TASK_CPUS per task unless ``num_cpus`` says otherwise."""
    if override_num_blocks is None:
        # As many blocks as tasks: Ray Data would otherwise cut the output of a few read
        # tasks into its default ~200 blocks; each fetched response is one block already.
        override_num_blocks = max(1, source.num_partitions_with_records)
    elif not _is_offset(override_num_blocks) or override_num_blocks < 1:
        raise InvalidConfigError(f"override_num_blocks must be a positive integer, got {override_num_blocks!r}")
    if remote.get("num_cpus") is None and "num_cpus" not in (remote.get("ray_remote_args") or {}):
        remote["num_cpus"] = READ_TASK_CPUS
    dataset = ray.data.read_datasource(source, override_num_blocks=override_num_blocks, **remote)
    dataset.context.target_max_block_size = READ_BLOCK_BYTES  # (this dataset's copy of the context)
    return dataset


# --- writing ------------------------------------------------------------------------------


def write_topic(
    dataset: ray.data.Dataset,
    topic: str,
    *,
    key: str | None = "key",
    value: str = "value",
    headers: str | None = "headers",
    timestamp: str | None = None,
    cluster: RaylogCluster | str | None = None,
    producer_config: dict[str, Any] | None = None,
    ray_remote_args: dict[str, Any] | None = None,
    concurrency: int | None = None,
) -> int:
    """Produce every row of ``dataset`` to ``topic`` from Ray tasks:
    ``dataset.write_datasink(RaylogDatasink(...))`` (see :class:`RaylogDatasink`), with the
    parameters of ``Dataset.write_kafka`` that mean the same here.

    Args:
        dataset: the rows to produce.
        topic, key, value, headers, timestamp, cluster, producer_config: as
            :class:`RaylogDatasink`.
        ray_remote_args, concurrency: as for ``Dataset.write_datasink``.

    Returns:
        How many records were written (each acknowledged as ``producer_config`` asks).

    Raises:
        UnknownTopicOrPartitionError, InvalidRecordError, InvalidConfigError: as
        :class:`RaylogDatasink`.

    Example:
        >>> ds = ray.data.from_items([{"key": b"u1", "value": b"click"}])  # doctest: +SKIP
        >>> write_topic(ds, "clicks", cluster=cluster)                      # doctest: +SKIP
        1
    """
    sink = RaylogDatasink(
        cluster,
        topic,
        key=key,
        value=value,
        headers=headers,
        timestamp=timestamp,
        producer_config=producer_config,
    )
    dataset.write_datasink(sink, ray_remote_args=ray_remote_args, concurrency=concurrency)
    return sink.records_written


class RaylogDatasink(Datasink):
    """A raylog topic as a Ray Data datasink: ``dataset.write_datasink(RaylogDatasink(cluster,
    topic, ...))``.

    Each write task runs one idempotent :class:`Producer` that sends its blocks with
    ``send_arrow`` (keyed rows land on murmur2 of the key, like Kafka) and flushes before the
    task ends, so the write returns once every record is acknowledged (``acks`` in
    ``producer_config``: "all" by default). Columns are checked on the driver when the write
    starts, so a dataset of the wrong shape writes nothing. A write task that Ray retries
    sends its blocks again with a new producer (at least once, as ``Dataset.write_kafka``);
    a failed write leaves what finished tasks wrote.

    Concurrency: each write task gets its own unpickled copy; :attr:`records_written` is set
    on the driver's copy when the write completes.

    Args:
        cluster: a :class:`RaylogCluster`, a Ray address for :func:`raylog.connect`, or None
            for ``raylog.connect()``.
        topic: an existing topic.
        key: the key column (binary or string; None or a missing column: no keys).
        value: the value column (binary or string).
        headers: the headers column (``list<struct<key: string, value: binary>>``, as
            :func:`read_topic` returns them; None or a missing column: no headers).
        timestamp: a column of record timestamps (integer milliseconds or an Arrow
            timestamp); None: the producer's time.
        producer_config: keyword arguments for each task's :class:`Producer` (e.g. ``acks``,
            ``linger_ms``, ``compression``); not ``transactional_id``.

    Attributes:
        records_written: records written by the last completed write.

    Raises:
        UnknownTopicOrPartitionError: no such topic.
        InvalidConfigError: a producer setting the :class:`Producer` refuses, or a column
            name that is not a string.
        InvalidRecordError: (when the write starts) no value column, or a column of the wrong
            type.
    """

    def __init__(
        self,
        cluster: RaylogCluster | str | None,
        topic: str,
        *,
        key: str | None = "key",
        value: str = "value",
        headers: str | None = "headers",
        timestamp: str | None = None,
        producer_config: dict[str, Any] | None = None,
    ):
        for name, column in (("key", key), ("value", value), ("headers", headers), ("timestamp", timestamp)):
            if not (isinstance(column, str) or (column is None and name != "value")):
                raise InvalidConfigError(f"{name} must name a column, got {column!r}")
        producer_config = dict(producer_config or {})
        if "transactional_id" in producer_config:
            raise InvalidConfigError("a write's tasks cannot share a transactional_id (each would fence the others)")
        self._cluster = _cluster(cluster)
        _partitions(self._cluster, [topic], producer_config)  # fail here, not in a task, for an unknown topic
        try:
            Producer(self._cluster, **producer_config).close()  # fail here for bad settings
        except TypeError as e:
            raise InvalidConfigError(f"producer_config: {e}") from None
        self._topic = topic
        self._columns = {"key": key, "value": value, "headers": headers, "timestamp": timestamp}
        self._producer_config = producer_config
        self.records_written = 0

    def get_name(self) -> str:
        return "Raylog"

    def on_write_start(self, schema: pa.Schema | None = None) -> None:
        if isinstance(schema, pa.Schema):
            _records_table(schema.empty_table(), self._columns)  # raises for a missing or bad column

    def write(self, blocks: Iterable[Any], ctx: Any) -> int:
        count = 0
        with Producer(self._cluster, **self._producer_config) as producer:
            futures = []
            for block in blocks:
                block = pa.table(block)
                if not block.num_rows:
                    continue  # e.g. an empty shuffle output, which may have no columns at all
                records = _records_table(block, self._columns)
                futures.append(_send_records(producer, self._topic, records))
                count += records.num_rows
            producer.flush()
            for future in futures:
                future.result()  # raises the typed error of a batch that failed
        return count

    def on_write_complete(self, write_result: Any) -> None:
        self.records_written = sum(write_result.write_returns)

    def on_write_failed(self, error: Exception) -> None:
        log.warning("write to topic %s failed (records of the tasks that finished stay): %r", self._topic, error)


def _records_table(block: pa.Table, columns: dict[str, str | None]) -> pa.Table:
    """A block's record columns as ``send_arrow`` takes them: value, and key, headers and
    timestamp where ``columns`` names them and the block has them.

    Raises:
        InvalidRecordError: no value column, or a column of the wrong type."""
    value = columns["value"]
    if value not in block.column_names:
        raise InvalidRecordError(f"no value column {value!r} among {block.column_names}")
    out = {"value": _binary(block.column(value), value)}
    key, headers, timestamp = columns.get("key"), columns.get("headers"), columns.get("timestamp")
    if key is not None and key in block.column_names:
        out["key"] = _binary(block.column(key), key)
    if headers is not None and headers in block.column_names:
        out["headers"] = _typed(block.column(headers), headers, ARROW_SCHEMA.field("headers").type)
    if timestamp is not None:
        if timestamp not in block.column_names:
            raise InvalidRecordError(f"no timestamp column {timestamp!r} among {block.column_names}")
        out["timestamp"] = _timestamps_ms(block.column(timestamp), timestamp)
    return pa.table(out)


def _send_records(producer: Producer, topic: str, records: pa.Table) -> Any:
    """``send_arrow`` of a :func:`_records_table` table; the future of its batches."""
    return producer.send_arrow(
        topic,
        records,
        headers_column="headers" if "headers" in records.column_names else None,
        timestamp_column="timestamp" if "timestamp" in records.column_names else None,
    )


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


def _timestamps_ms(column: pa.ChunkedArray, name: str) -> pa.ChunkedArray:
    """Integer milliseconds since the epoch from integers or Arrow timestamps (cut to whole
    milliseconds), or InvalidRecordError."""
    if pa.types.is_integer(column.type):
        return column.cast(pa.int64())
    if pa.types.is_timestamp(column.type):
        return column.cast(pa.timestamp("ms", tz=column.type.tz), safe=False).cast(pa.int64())
    raise InvalidRecordError(f"column {name!r} must hold integer milliseconds or timestamps, got {column.type}")


def _typed(column: pa.ChunkedArray, name: str, arrow_type: pa.DataType) -> pa.ChunkedArray:
    """``column`` as ``arrow_type`` (e.g. headers that went through pandas come back with
    large types), or InvalidRecordError."""
    if column.type == arrow_type:
        return column
    try:
        return column.cast(arrow_type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        raise InvalidRecordError(f"column {name!r} must be of type {arrow_type}, got {column.type}") from None


# --- micro-batch streams --------------------------------------------------------------------


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


# --- resolving offset specs ---------------------------------------------------------------


def _cluster(cluster: RaylogCluster | str | None) -> RaylogCluster:
    """A cluster handle from a handle, a Ray address, or None (``raylog.connect()``)."""
    if isinstance(cluster, RaylogCluster):
        return cluster
    if cluster is None or isinstance(cluster, str):
        return raylog.connect(cluster)
    raise InvalidConfigError(f"cluster must be a RaylogCluster, a Ray address or None, got {cluster!r}")


def _topic_list(topics: str | list[str]) -> list[str]:
    names = [topics] if isinstance(topics, str) else topics
    if not isinstance(names, (list, tuple)) or not names or not all(isinstance(n, str) for n in names):
        raise InvalidConfigError(f"topics must be a topic name or a non-empty list of them, got {topics!r}")
    if len(set(names)) != len(names):
        raise InvalidConfigError(f"a topic is listed twice in {names!r}")
    return list(names)


def _consumer_config(config: dict[str, Any] | None) -> dict[str, Any]:
    """``consumer_config`` checked: keyword arguments a read task's Consumer takes."""
    config = dict(config or {})
    taken = sorted(set(config) & set(_READ_TASK_CONSUMER_SETTINGS))
    if taken:
        raise InvalidConfigError(f"consumer_config cannot set {taken}: read tasks read assigned ranges, in no group")
    return config


def _partitions(
    cluster: RaylogCluster, topics: list[str], client_config: dict[str, Any] | None = None
) -> list[TopicPartition]:
    """The partitions of ``topics``, described as the user that ``client_config`` (a read's
    consumer_config, a write's producer_config) names by its security settings, if it does
    (else the handle's): the user of the tasks, who may describe other topics.

    Raises:
        UnknownTopicOrPartitionError, TopicAuthorizationFailedError: as Admin.describe_topics.
    """
    descriptions = raylog.Admin(cluster, **security_settings(client_config or {})).describe_topics(topics)
    return [TopicPartition(d.name, p.partition) for d in descriptions for p in d.partitions]


def _one_bound(name: str, shipped: OffsetSpec | None, kafka_named: OffsetSpec | None, default: str) -> OffsetSpec:
    """A bound given as raylog's ``name`` or as read_kafka's ``<name>_offset`` (whose naive
    datetimes are UTC), not both."""
    if shipped is not None and kafka_named is not None:
        raise InvalidConfigError(f"give {name} or {name}_offset, not both")
    if kafka_named is not None:
        return _naive_as_utc(kafka_named)
    return default if shipped is None else shipped


def _naive_as_utc(spec: Any) -> Any:
    """``spec`` with every datetime without a time zone taken as UTC (read_kafka's rule)."""
    if isinstance(spec, dict):
        return {k: _naive_as_utc(v) for k, v in spec.items()}
    if isinstance(spec, datetime.datetime) and spec.tzinfo is None:
        return spec.replace(tzinfo=datetime.timezone.utc)
    return spec


def _specs(spec: OffsetSpec, partitions: list[TopicPartition], default: str) -> dict[TopicPartition, PartitionSpec]:
    """Each partition's spec (``default`` where a dict leaves it out).

    Raises:
        InvalidConfigError: a dict of neither form, by partition with several topics, or
            naming a topic that is not read.
        UnknownTopicOrPartitionError: a dict naming a partition that does not exist.
    """
    if not isinstance(spec, dict):
        return {tp: spec for tp in partitions}
    topics = list(dict.fromkeys(tp.topic for tp in partitions))
    if all(isinstance(k, str) for k in spec):
        by_topic = spec
    elif all(_is_offset(k) for k in spec):
        if len(topics) != 1:
            raise InvalidConfigError(
                f"offsets by partition name no topic; with several topics give {{topic: {{partition: spec}}}}: {spec!r}"
            )
        by_topic = {topics[0]: spec}
    else:
        raise InvalidConfigError(f"offsets by partition or by topic, not both: {spec!r}")
    out = {tp: default for tp in partitions}
    for topic, by_partition in by_topic.items():
        if topic not in topics:
            raise InvalidConfigError(f"offsets name topic {topic!r}, which is not read ({topics})")
        if not isinstance(by_partition, dict) or not all(_is_offset(p) for p in by_partition):
            raise InvalidConfigError(f"offsets of {topic!r} must be a dict by partition number, got {by_partition!r}")
        for partition, one in by_partition.items():
            tp = TopicPartition(topic, int(partition))
            if tp not in out:
                raise UnknownTopicOrPartitionError(f"{topic} has no partition {partition}")
            out[tp] = one
    return out


def _groups(specs: dict[TopicPartition, PartitionSpec]) -> set[str]:
    """The groups whose commits ``specs`` name."""
    return {s.group_id for s in specs.values() if isinstance(s, Committed)}


def _offset_consumer(cluster: RaylogCluster, groups: set[str], consumer_config: dict[str, Any]) -> Consumer:
    """A consumer for offset look-ups (with the read's isolation level), in the group that a
    ``Committed`` spec names.

    Raises:
        InvalidConfigError: specs naming several groups, or settings the Consumer refuses."""
    if len(groups) > 1:
        raise InvalidConfigError(f"start and end may name one group's commits, not {sorted(groups)}")
    group = {"group_id": next(iter(groups)), "enable_auto_commit": False} if groups else {}
    try:
        return Consumer(cluster, **consumer_config, **group)
    except TypeError as e:
        raise InvalidConfigError(f"consumer_config: {e}") from None


def _topic_ranges(
    cluster: RaylogCluster, topics: list[str], start: OffsetSpec, end: OffsetSpec, consumer_config: dict[str, Any]
) -> dict[TopicPartition, tuple[int, int]]:
    partitions = _partitions(cluster, topics, consumer_config)
    starts, ends = _specs(start, partitions, "earliest"), _specs(end, partitions, "latest")
    with _offset_consumer(cluster, _groups(starts) | _groups(ends), consumer_config) as consumer:
        bounds = _Bounds(consumer, partitions)
        first = _resolve(consumer, bounds, starts)
        last = _resolve(consumer, bounds, ends)
    for tp in partitions:
        if first[tp] > last[tp]:
            raise InvalidConfigError(f"{tp.topic}-{tp.partition}: start {first[tp]} is after end {last[tp]}")
    bounds.check(first)
    bounds.check(last)
    return {tp: (first[tp], last[tp]) for tp in partitions}


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
    consumer: Consumer, bounds: _Bounds, specs: dict[TopicPartition, PartitionSpec]
) -> dict[TopicPartition, int]:
    """The offset each partition's spec names."""
    out: dict[TopicPartition, int] = {}
    kinds: dict[str, list[TopicPartition]] = {}
    for tp, one in specs.items():
        kinds.setdefault(_kind(one), []).append(tp)
    for kind, tps in kinds.items():
        if kind == "earliest":
            out.update({tp: bounds.log_start[tp] for tp in tps})
        elif kind == "latest":
            out.update({tp: bounds.high_watermark[tp] for tp in tps})
        elif kind == "offset":
            out.update({tp: int(specs[tp]) for tp in tps})
        elif kind == "time":
            found = consumer.offsets_for_times({tp: _timestamp_ms(specs[tp]) for tp in tps})
            out.update({tp: found[tp].offset if found[tp] is not None else bounds.high_watermark[tp] for tp in tps})
        else:
            committed = consumer.committed(tps)
            for tp in tps:
                reset = specs[tp].reset
                if committed[tp] is not None:
                    out[tp] = committed[tp].offset
                else:
                    out[tp] = bounds.log_start[tp] if reset == "earliest" else bounds.high_watermark[tp]
    return out


def _is_offset(value: Any) -> bool:
    """An integer (NumPy's too), not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _kind(spec: Any) -> str:
    """What ``spec`` names: "earliest", "latest", "offset", "time" or "committed".

    Raises:
        InvalidConfigError: not a spec."""
    if isinstance(spec, str) and spec in ("earliest", "latest"):
        return spec
    if _is_offset(spec):
        if spec < 0:
            raise InvalidConfigError(f"offsets are >= 0, got {spec}")
        return "offset"
    if isinstance(spec, (datetime.datetime, Timestamp)):
        _timestamp_ms(spec)
        return "time"
    if isinstance(spec, Committed):
        if spec.reset not in ("earliest", "latest"):
            raise InvalidConfigError(f"Committed.reset must be 'earliest' or 'latest', got {spec.reset!r}")
        return "committed"
    raise InvalidConfigError(
        f"not an offset spec: {spec!r} (expected 'earliest', 'latest', an offset, a datetime, "
        "Timestamp(ms), Committed(group_id), or a dict of those by partition or by topic and partition)"
    )


def _timestamp_ms(spec: datetime.datetime | Timestamp) -> int:
    if isinstance(spec, Timestamp):
        if not _is_offset(spec.timestamp_ms) or spec.timestamp_ms < 0:
            raise InvalidConfigError(f"timestamps are integer ms >= 0, got {spec.timestamp_ms!r}")
        return int(spec.timestamp_ms)
    if spec.tzinfo is None:
        raise InvalidConfigError(
            f"a datetime given as start or end needs a time zone (naive times are ambiguous; "
            f"as start_offset / end_offset it is UTC): {spec!r}"
        )
    return int(spec.timestamp() * 1000)
