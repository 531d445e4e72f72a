"""A fetched answer decoded and waiting to be handed out, and what a poll makes of it
(Kafka's CompletedFetch and FetchCollector): :class:`Record` objects for ``poll``, labelled
Arrow tables for ``poll_arrow``, without a Python loop per record but the one building each
Record."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pyarrow as pa

from raylog.common.kafka_columns import (  # (shared with the broker's storage: see there)
    ARROW_SCHEMA,
    LogAppendTime,
    labelled,
    log_append_time_ranges,
    repeated_string,
    timestamp_type_values,
)
from raylog.types import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Record, TopicPartition

__all__ = [
    "ARROW_SCHEMA",
    "CompletedFetch",
    "LogAppendTime",
    "labelled",
    "log_append_time_ranges",
    "records_of",
    "repeated_string",
    "timestamp_types",
]


class CompletedFetch:
    """A decoded fetch not yet handed out (``nbytes``: the batches it came in;
    ``log_append_time``: see :func:`log_append_time_ranges`)."""

    __slots__ = ("table", "cursor", "nbytes", "log_append_time")

    def __init__(self, table: pa.Table, nbytes: int, log_append_time: LogAppendTime):
        self.table, self.cursor, self.nbytes, self.log_append_time = table, 0, nbytes, log_append_time


def timestamp_types(offsets: list[int], log_append_time: LogAppendTime) -> Iterable[int]:
    """Each record's ``Record.timestamp_type``, by offset."""
    if log_append_time is None or log_append_time is True:
        return itertools.repeat(TIMESTAMP_LOG_APPEND_TIME if log_append_time else TIMESTAMP_CREATE_TIME, len(offsets))
    return timestamp_type_values(np.asarray(offsets, dtype=np.int64), log_append_time).tolist()


def records_of(
    tp: TopicPartition,
    table: pa.Table,
    log_append_time: LogAppendTime,
    key_deserializer: Callable[[bytes], Any] | None,
    value_deserializer: Callable[[bytes], Any] | None,
) -> list[Record]:
    """The :class:`Record` objects of ``table``, records of ``tp``, keys and values deserialized."""
    n = table.num_rows
    offsets = table.column("offset").to_pylist()
    keys = table.column("key").to_pylist()
    values = table.column("value").to_pylist()
    if key_deserializer is not None:
        keys = [None if k is None else key_deserializer(k) for k in keys]
    if value_deserializer is not None:
        values = [None if v is None else value_deserializer(v) for v in values]
    # Tuples, not a list per record: a poll makes one object per record for Python's cycle
    # collector to track, not two (see Record).
    header_column = table.column("headers")
    if header_column.null_count == n:
        headers: list = [()] * n
    else:
        headers = [tuple((h["key"], h["value"]) for h in hs) if hs else () for hs in header_column.to_pylist()]
    # tuple.__new__ builds each Record in C (Record(...) runs its Python __new__ per record).
    fields = zip(
        itertools.repeat(tp.topic, n),
        itertools.repeat(tp.partition, n),
        offsets,
        table.column("timestamp").to_pylist(),
        keys,
        values,
        headers,
        timestamp_types(offsets, log_append_time),
        strict=True,
    )
    return list(map(tuple.__new__, itertools.repeat(Record, n), fields))
