"""A partition's records as Arrow columns, in the two shapes readers know: the consumer's
``poll_arrow`` table (:data:`ARROW_SCHEMA`, Kafka's ConsumerRecord fields) and the rows of
Spark's Kafka source (:func:`kafka_arrow_schema`). Shared by the clients (the consumer's
tables, raylog_spark's DataFrames) and the broker's storage (a segment's history as Parquet,
:mod:`raylog.storage.history`), so that every reader sees one record the same way.

Spark's Kafka source shape (Spark 3.5, names, types and order)::

    column          Arrow type                              notes
    key             binary                                  null: no key
    value           binary
    topic           string
    partition       int32
    offset          int64
    timestamp       timestamp[us, UTC]                      the record's ms, widened
    timestampType   int32                                   0 CreateTime, 1 LogAppendTime
    headers         list<struct<key: string, value: binary>>  only with includeHeaders;
                                                            null for a record without any

A record's timestamp type is its batch's (the LOG_APPEND_TIME attribute bit), as Kafka's
consumer reports it: :func:`log_append_time_ranges` and :func:`timestamp_type_values`.

Columns are made from buffers (:func:`raylog.common.record_batch.arrow_of`), never with
``pa.array``, ``pa.scalar`` or ``pa.repeat``, nor with compute functions given Python
scalars: their first call in a process imports pandas (issue 27), which a replica writing
history (:mod:`raylog.storage.history`) would pay for.

Functions here are pure and thread-safe.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ..types import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, TopicPartition
from . import record_batch

#: The ``timestampType`` column's values by ``message.timestamp.type`` (Kafka's ids).
TIMESTAMP_TYPES = {"CreateTime": TIMESTAMP_CREATE_TIME, "LogAppendTime": TIMESTAMP_LOG_APPEND_TIME}
#: The headers type, as the batch format, the consumer and Spark's Kafka source have it.
HEADERS_TYPE = record_batch.HEADERS_TYPE

#: The consumer's ``poll_arrow`` table: a decoded fetch (:data:`record_batch.OUTPUT_SCHEMA`)
#: with its topic and partition in front (:func:`labelled`).
ARROW_SCHEMA = pa.schema(
    [pa.field("topic", pa.string()), pa.field("partition", pa.int32()), *record_batch.OUTPUT_SCHEMA]
)

KAFKA_FIELDS = (
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestampType", pa.int32()),
)

#: Which records of a fetch carry the leader's append time: None (none), True (all), or the
#: ``(first, last)`` offsets of each batch that does.
LogAppendTime = bool | list[tuple[int, int]] | None


def kafka_arrow_schema(include_headers: bool = False) -> pa.Schema:
    """The Arrow schema of Spark's Kafka source (see the module docstring)."""
    return pa.schema([*KAFKA_FIELDS, *([pa.field("headers", HEADERS_TYPE)] if include_headers else [])])


def labelled(tp: TopicPartition, table: pa.Table) -> pa.Table:
    """A decoded table (:data:`record_batch.OUTPUT_SCHEMA`) with the topic and partition
    columns of :data:`ARROW_SCHEMA` in front."""
    return table.add_column(0, "topic", repeated_string(tp.topic, table.num_rows)).add_column(
        1, "partition", record_batch.arrow_of(np.full(table.num_rows, tp.partition, dtype=np.int32))
    )


def repeated_string(text: str, count: int) -> pa.Array:
    """``text`` ``count`` times as a string column, made from buffers (not ``pa.repeat``,
    whose first call in a process imports pandas: see :func:`record_batch.values_of`)."""
    data = text.encode()
    offsets = np.arange(count + 1, dtype=np.int32) * len(data)
    return pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(data * count)])


def log_append_time_ranges(headers: list) -> LogAppendTime:
    """Where batches' timestamps are LogAppendTime, from their ``(position, BatchHeader)``
    pairs (a batch attribute, as in Kafka; control batches are never read)."""
    data = [h for _, h in headers if not h.attributes & record_batch.CONTROL]
    stamped = [(h.base_offset, h.last_offset) for h in data if h.attributes & record_batch.LOG_APPEND_TIME]
    if not stamped:
        return None
    return True if len(stamped) == len(data) else stamped


def timestamp_type_values(offsets: np.ndarray, log_append_time: LogAppendTime) -> np.ndarray:
    """Each record's timestamp type (int32: TIMESTAMP_CREATE_TIME or
    TIMESTAMP_LOG_APPEND_TIME), by its offset (int64, rising), one vector operation whatever
    the number of batches: a record is LogAppendTime when it lies in a stamped batch's range."""
    if log_append_time is None or log_append_time is True:
        kind = TIMESTAMP_LOG_APPEND_TIME if log_append_time else TIMESTAMP_CREATE_TIME
        return np.full(len(offsets), kind, dtype=np.int32)
    ranges = np.asarray(log_append_time, dtype=np.int64).reshape(-1, 2)
    at = np.searchsorted(ranges[:, 0], offsets, side="right") - 1
    inside = (at >= 0) & (offsets <= ranges[np.maximum(at, 0), 1])
    return np.where(inside, TIMESTAMP_LOG_APPEND_TIME, TIMESTAMP_CREATE_TIME).astype(np.int32)


def kafka_rows(records: pa.Table, timestamp_types: Any, include_headers: bool) -> pa.Table:
    """Records as the consumer reads them (:data:`ARROW_SCHEMA`) as rows of Spark's Kafka
    source (:func:`kafka_arrow_schema`): columns reordered, timestamps widened to
    microseconds, ``timestamp_types`` (an int32 array, one per record) as ``timestampType``,
    and headers null for a record without any (:func:`null_when_empty`)."""
    schema = kafka_arrow_schema(include_headers)
    if not records.num_rows:
        return schema.empty_table()
    timestamps = records.column("timestamp").cast(pa.timestamp("ms", tz="UTC")).cast(pa.timestamp("us", tz="UTC"))
    columns = [*(records.column(name) for name in ("key", "value", "topic", "partition", "offset")), timestamps]
    columns.append(timestamp_types)
    if include_headers:
        columns.append(null_when_empty(records.column("headers")))
    return pa.Table.from_arrays(columns, schema=schema)


def consumer_rows(rows: pa.Table) -> pa.Table:
    """Rows of Spark's Kafka source (:func:`kafka_arrow_schema` with headers, e.g. a history
    file's) as the consumer reads them (:data:`ARROW_SCHEMA`): columns reordered, timestamps
    back to milliseconds, ``timestampType`` dropped; headers stay null where none."""
    micros = [record_batch.values_of(chunk.view(pa.int64())) for chunk in rows.column("timestamp").chunks]
    millis = record_batch.arrow_of(np.concatenate(micros) // 1_000 if micros else np.empty(0, dtype=np.int64))
    columns = [rows.column(name) for name in ("topic", "partition", "offset")]
    columns += [millis, *(rows.column(name) for name in ("key", "value", "headers"))]
    return pa.Table.from_arrays(columns, schema=ARROW_SCHEMA)


def null_when_empty(headers: pa.ChunkedArray) -> pa.ChunkedArray:
    """Headers with null for a record without any, as Spark's Kafka source has them (a fetch
    gives null or, from a batch that carries headers, an empty list): each chunk's lists over
    the same values, with a validity bitmap made from its offsets (``pc.if_else`` on the
    nested type took ~1.7 µs a record, more than the read)."""
    return pa.chunked_array([_null_when_empty_chunk(chunk) for chunk in headers.chunks], headers.type)


def _null_when_empty_chunk(headers: pa.ListArray) -> pa.ListArray:
    offsets = record_batch.values_of(headers.offsets)  # a slice's own n + 1, not rebased
    valid = record_batch.validity_of(headers)
    kept = valid & (np.diff(offsets) > 0)
    if np.array_equal(kept, valid):
        return headers
    # Arrow takes a validity bitmap only with offsets from 0: rebase a slice's.
    first, last = int(offsets[0]), int(offsets[-1])
    validity = pa.py_buffer(np.packbits(kept, bitorder="little"))
    return pa.Array.from_buffers(
        headers.type,
        len(headers),
        [validity, pa.py_buffer(offsets - offsets[0])],
        children=[headers.values.slice(first, last - first)],
    )
