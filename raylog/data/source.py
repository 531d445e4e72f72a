"""Topics as a Ray Data datasource: :class:`RaylogDatasource`, and :func:`read_topic` with the
parameters of ``ray.data.read_kafka`` that mean the same here.

A bounded read covers one offset range ``[start, end)`` per partition (end exclusive),
resolved when the datasource is made, so reading the dataset again reads the same records
(``read_kafka`` resolves them when each task starts). A read task is a plain
:class:`Consumer` assigned to its ranges: each fetched response is already an Arrow table
(the consumer decodes record batches without a loop per record), trimmed at ``end``. Every
block has the columns of :meth:`Consumer.poll_arrow`: topic, partition, offset, timestamp,
key, value, headers (an empty list for a record without headers, as in :class:`Record`).
"""

from __future__ import annotations

import datetime
import functools
import heapq
import logging
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import ray.data
from ray.data.block import BlockMetadata
from ray.data.datasource import Datasource, ReadTask

from raylog.clients.cluster import RaylogCluster
from raylog.clients.consumer import ARROW_SCHEMA, Consumer
from raylog.clients.history import HistorySource, history_source
from raylog.common.history_format import iter_history
from raylog.common.kafka_columns import consumer_rows
from raylog.data.offsets import OffsetSpec, _Bounds, _cluster, _groups, _is_offset, _partitions, _resolve, _specs
from raylog.errors import InvalidConfigError, KafkaTimeoutError, RemoteStorageError, UnknownTopicOrPartitionError
from raylog.types import TopicPartition

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
        #: Where each topic's Parquet history lies (None: it keeps none), for the read tasks.
        topics = sorted({tp.topic for tp in ranges})
        self._histories = {topic: history_source(cluster, topic, self._consumer_config) for topic in topics}
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
                    _read_pieces,
                    self._cluster,
                    pieces,
                    self._consumer_config,
                    self._timeout_ms,
                    columns,
                    {tp.topic: self._histories.get(tp.topic) for tp, _, _ in pieces},
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
    history: HistorySource | None = None,
) -> Iterator[pa.Table]:
    """The records of ``tp`` in ``[start, end)``, one Arrow table per fetched response or
    history file (no empty ones: an empty range yields nothing) as ``Consumer.poll_arrow``
    gives them (headers null where a batch carries none): what a read task of
    :class:`RaylogDatasource` runs per range (it then gives empty lists for null headers), in
    any process that can reach Ray.

    Args:
        consumer_config: keyword arguments for the :class:`Consumer` (not group settings).
        deadline_s: a ``time.monotonic()`` time at which to stop early (with a warning).
        history: where the topic's Parquet history lies (:func:`history_source`): the part of
            the range its files hold is read from them here, the rest from the brokers.

    Raises:
        KafkaTimeoutError: no record came for READ_STALL_TIMEOUT_S below ``end``."""
    if start < end and history is not None:
        start = yield from _read_history(history, tp, start, end, consumer_config or {})
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
                yield table if keep == table.num_rows else table.slice(0, keep)


def _read_history(
    history: HistorySource, tp: TopicPartition, start: int, end: int, consumer_config: dict[str, Any]
) -> Iterator[pa.Table]:
    """The part of ``[start, end)`` the history files hold, a table a file, as the consumer's
    rows; returns where the brokers take over (where the files end, or the first file that
    could not be read: the brokers then serve it from the remote tier)."""
    read_committed = consumer_config.get("isolation_level", "read_committed") == "read_committed"
    plan = history.plan(tp.partition, start, end, read_committed)
    if plan is None:
        return start
    tables = iter_history(plan)
    for listed in plan.files:
        try:
            rows = next(tables)
        except RemoteStorageError as exc:
            log.warning("%s-%d: history file not readable, reading from the brokers at %d: %s", *tp, start, exc)
            return start
        if rows.num_rows:
            yield consumer_rows(rows)
        start = min(listed.last_offset + 1, end)
    return start


def _read_pieces(
    cluster: RaylogCluster,
    pieces: list[Piece],
    consumer_config: dict[str, Any],
    timeout_ms: int | None,
    columns: list[str] | None,
    histories: dict[str, HistorySource | None],
) -> Iterator[pa.Table]:
    """A read task: its pieces one after another, within ``timeout_ms`` in all."""
    deadline_s = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000
    for tp, start, end in pieces:
        history = histories.get(tp.topic)
        ranged = read_range(
            cluster, tp, start, end, consumer_config=consumer_config, deadline_s=deadline_s, history=history
        )
        for table in ranged:
            table = _headers_not_null(table)
            yield table if columns is None else table.select(columns)


def _empty_block(schema: pa.Schema) -> list[pa.Table]:
    return [schema.empty_table()]


def _headers_not_null(table: pa.Table) -> pa.Table:
    """``table`` with an empty list, not null, for records without headers: the shape of
    :func:`read_topic`'s blocks, one for every block however its batches were written."""
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


# --- a read's arguments and ranges ----------------------------------------------------------


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
