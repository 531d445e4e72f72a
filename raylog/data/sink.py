"""A topic as a Ray Data datasink: :class:`RaylogDatasink`, and :func:`write_topic` with the
parameters of ``Dataset.write_kafka`` that mean the same here; each write task is one
idempotent :class:`Producer`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import ray.data
from ray.data.datasource import Datasink

from raylog.clients.cluster import RaylogCluster
from raylog.clients.consumer import ARROW_SCHEMA
from raylog.clients.producer import Producer
from raylog.data.offsets import _cluster, _partitions
from raylog.errors import InvalidConfigError, InvalidRecordError

log = logging.getLogger(__name__)


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
