"""How ``send_arrow`` cuts a table into batches, without a loop per record: the columns it
sends, each row's size bound, the rows of each partition and their slices of at most a
batch (raylog's own seam: Kafka's clients send one record at a time)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raylog.clients.partitioner import DefaultPartitioner
from raylog.clients.producer.record_accumulator import RECORD_OVERHEAD_BYTES
from raylog.common import record_batch
from raylog.errors import InvalidRecordError

#: A batch's rows, their bytes in buffer memory and their record_size_bound, summed.
Chunk = tuple[dict, int, int]


def columns_of(
    table: pa.Table, key_column: str, value_column: str, timestamp_column: str | None, headers_column: str | None
) -> dict:
    """The columns of ``table`` a batch is built from, each one array.

    Raises:
        KeyError: no value column.
        TypeError: a key or value column that is not binary or string, headers not of
            ``record_batch.HEADERS_TYPE``.
    """
    columns = {"values": _binary_column(table.column(value_column), value_column)}
    if key_column in table.column_names:
        columns["keys"] = _binary_column(table.column(key_column), key_column)
    if timestamp_column is not None:
        columns["timestamps_ms"] = table.column(timestamp_column).cast(pa.int64())
    if headers_column is not None:
        columns["headers"] = table.column(headers_column)
        if columns["headers"].type != record_batch.HEADERS_TYPE:
            raise TypeError(f"headers must be of type {record_batch.HEADERS_TYPE}, got {columns['headers'].type}")
    return {k: one_chunk(v) for k, v in columns.items()}


def split(
    partitioner: DefaultPartitioner,
    topic: str,
    columns: dict,
    count: int,
    partition: int | None,
    capacity: int,
    buffer_memory: int,
) -> Iterator[tuple[int, Chunk]]:
    """``(partition, (rows, size_bytes, bound_bytes))`` per batch to send, in order.

    Unkeyed rows (or all rows, given a partition) go out as zero-copy slices, one batch
    per partition in turn (sticky partitioning at batch granularity); keyed rows are
    gathered per partition by murmur2 of the key (one copy), then sliced.
    """
    rows = {k: one_chunk(v) for k, v in columns.items()}
    keys = rows.get("keys")
    if partition is not None or keys is None or keys.null_count == len(keys):
        first = partition if partition is not None else partitioner(topic, None, count)
        last = first
        for i, chunk in enumerate(chunks(rows, capacity, buffer_memory)):
            last = first if partition is not None else (first + i) % count
            yield last, chunk
        if partition is None:  # the next call goes on from here
            partitioner.stick_to(topic, (last + 1) % count)
        return
    targets = partitioner.partitions_for_keys(keys, count)
    unkeyed = targets < 0
    if unkeyed.any():  # null keys among keyed rows: the sticky partition takes them
        targets[unkeyed] = partitioner(topic, None, count)
    order = np.argsort(targets, kind="stable")
    gathered = {k: v.take(record_batch.arrow_of(order)) for k, v in rows.items()}
    bounds = np.searchsorted(targets[order], np.arange(count + 1))
    for part in range(count):
        lo, hi = int(bounds[part]), int(bounds[part + 1])
        if hi > lo:
            for chunk in chunks({k: v.slice(lo, hi - lo) for k, v in gathered.items()}, capacity, buffer_memory):
                yield part, chunk


def chunks(rows: dict, capacity: int, buffer_memory: int) -> Iterator[Chunk]:
    """Slices of ``rows`` of at most ``buffer_memory`` bytes each (at least one row) whose
    records' size bounds add up to at most ``capacity`` (each row fits alone), as
    ``(rows, size_bytes, bound_bytes)``."""
    values = rows["values"]
    sizes = record_batch.values_or(pc.binary_length(values), 0) + RECORD_OVERHEAD_BYTES
    if "keys" in rows:
        sizes = sizes + record_batch.values_or(pc.binary_length(rows["keys"]), 0)
    ends = sizes.cumsum()
    bound_ends = row_bounds(rows).cumsum()
    start, n = 0, len(values)
    while start < n:
        base = ends[start - 1] if start else 0
        bound_base = bound_ends[start - 1] if start else 0
        stop = min(
            int(np.searchsorted(ends, base + buffer_memory, side="right")),
            int(np.searchsorted(bound_ends, bound_base + capacity, side="right")),
        )
        stop = max(start + 1, stop)
        chunk = {k: v.slice(start, stop - start) for k, v in rows.items()}
        yield chunk, int(ends[stop - 1] - base), int(bound_ends[stop - 1] - bound_base)
        start = stop


def one_chunk(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A plain array, copying only when a chunked column has several chunks."""
    if isinstance(column, pa.ChunkedArray):
        return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    return column


def _binary_column(column: pa.Array | pa.ChunkedArray, name: str) -> pa.Array | pa.ChunkedArray:
    if not record_batch.is_binary_like(column.type):
        raise TypeError(f"column {name!r} must be binary or string, got {column.type}")
    return column


def row_bounds(rows: dict) -> np.ndarray:
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
