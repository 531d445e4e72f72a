"""One partition's batch of records in the producer (Kafka's ``ProducerBatch``): the
records as ``send`` or ``send_arrow`` gave them, encoded once into the record-batch format
when first sent, and the completion state their futures share."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pyarrow as pa

from raylog.clients.producer.future import CALLBACK_LOCK, run_callback
from raylog.common import record_batch
from raylog.errors import RaylogError
from raylog.types import TopicPartition


class ProducerBatch:
    """Records for one partition plus the completion state their futures share."""

    __slots__ = (
        "tp",
        "leader",
        "unreachable_until_s",
        "arrow_rows",
        "producer_id",
        "producer_epoch",
        "transactional",
        "base_sequence",
        "values",
        "keys",
        "timestamps",
        "headers",
        "size_bytes",
        "bound_bytes",
        "created_s",
        "created_ms",
        "data",
        "record_count",
        "event",
        "base_offset",
        "log_append_time_ms",
        "error",
        "callbacks",
        "attempts",
        "retry_at_s",
        "deadline_s",
        "dispatch_order",
        "partition_index",
    )

    def __init__(self, tp: TopicPartition, delivery_timeout_s: float):
        self.tp = tp
        self.values: list = []
        self.keys: list = []
        self.timestamps: list = []
        self.headers: list = []
        #: Columns of send_arrow chunks, instead of the lists: each call's rows with their
        #: creation time (calls queued behind a full pipe share a batch).
        self.arrow_rows: list[tuple[dict, int]] = []
        self.size_bytes = 0
        self.bound_bytes = 0  # the records' record_size_bound, summed: keeps the batch under its limit
        self.created_s = time.monotonic()
        self.created_ms = time.time_ns() // 1_000_000
        self.data: Any = None  # encoded batch bytes, built once
        self.record_count = 0
        self.event = threading.Event()
        self.base_offset = -1
        self.log_append_time_ms = -1
        self.error: RaylogError | None = None
        self.callbacks: list = []
        self.attempts = 0
        self.retry_at_s = 0.0
        self.deadline_s = self.created_s + delivery_timeout_s
        self.producer_id = -1
        self.producer_epoch = -1
        self.transactional = False
        self.base_sequence = -1
        self.dispatch_order = -1  # rank of its first dispatch in this producer; -1: not sent yet
        self.partition_index = -1  # idempotent: rank among its partition's batches, from 0
        self.leader: Any = None  # the actor the last attempt went to
        self.unreachable_until_s = 0.0  # until then, wait for another leader than that one

    def encode(self, codec: int) -> Any:
        """The batch bytes, built once (a retry resends the same bytes and sequence)."""
        if self.data is None:
            fields = {
                "codec": codec,
                "now_ms": self.created_ms,
                "producer_id": self.producer_id,
                "producer_epoch": self.producer_epoch,
                "base_sequence": self.base_sequence,
                "transactional": self.transactional,
            }
            if self.arrow_rows:
                rows = merged(self.arrow_rows)
                self.data = record_batch.build_arrow(
                    rows["values"], rows.get("keys"), rows.get("timestamps_ms"), rows.get("headers"), **fields
                )
            else:
                # Lists stay empty until a record needs them (then earlier records get None).
                keys = self._padded(self.keys)
                headers = self._padded(self.headers)
                timestamps = self._padded(self.timestamps)
                if timestamps is not None:
                    timestamps = [self.created_ms if t is None else t for t in timestamps]
                self.data = record_batch.build(self.values, keys, timestamps, headers, **fields)
            # The encoded batch is all that is kept.
            self.values = self.keys = self.timestamps = self.headers = self.arrow_rows = []
        return self.data

    def _padded(self, column: list) -> list | None:
        if not column:
            return None
        return column + [None] * (self.record_count - len(column))

    def finish(self, base_offset: int, log_append_time_ms: int, error: RaylogError | None) -> None:
        """Complete the batch's futures (the first call wins: a failed sender may have
        completed it before its reply came)."""
        with CALLBACK_LOCK:
            if self.event.is_set():
                return
            self.base_offset, self.log_append_time_ms, self.error = base_offset, log_append_time_ms, error
            self.event.set()
            callbacks, self.callbacks = self.callbacks, []
        for future, fn in callbacks:
            run_callback(fn, future)


def merged(parts: list[tuple[dict, int]]) -> dict:
    """The columns of a batch's send_arrow chunks as one set of columns. Rows without
    timestamps keep their own call's time when chunks of several calls share the batch."""
    if len(parts) == 1:
        return parts[0][0]
    if "timestamps_ms" not in parts[0][0]:
        parts = [
            ({**rows, "timestamps_ms": record_batch.arrow_of(np.full(len(rows["values"]), now_ms))}, now_ms)
            for rows, now_ms in parts
        ]
    return {key: pa.concat_arrays([rows[key] for rows, _ in parts]) for key in parts[0][0]}
