"""Training streams: fixed-size NumPy (or PyTorch) batches from a topic, read as a member
of a consumer group, so that each Ray Train worker gets its own share of the partitions.

A :class:`TrainingStream` is a group member with heartbeats on a background thread and no
``max.poll.interval.ms`` by default, so a training step of any length between two batches
does not cost it its partitions. Records arrive as Arrow tables (no loop per record); the
user's ``decode`` turns a table of exactly ``batch_size`` rows into arrays.

Two ways to read:

- continuous (default): from the group's committed offsets on, as records arrive; the
  offsets of a batch are committed when the next batch is asked for (the step that used it
  is over), so a restarted worker repeats at most the batch it was training on;
- epochs (``epochs=True``): each iteration is one pass over the member's partitions from
  the log start to the high watermark when the pass began: every record once per epoch.
  Start every worker (and :meth:`wait_for_members`) before the first epoch, so partitions
  do not move in the middle of one.

Concurrency: like a Consumer, one thread iterates; heartbeats run on their own thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raylog.clients.admin import Admin
from raylog.clients.cluster import RaylogCluster
from raylog.clients.consumer import Consumer
from raylog.errors import GroupIdNotFoundError, KafkaTimeoutError
from raylog.types import OffsetAndMetadata, TopicPartition

#: How long one poll waits for records.
POLL_TIMEOUT_MS = 200

Decoded = Any  # what ``decode`` returns: an array, or a dict / tuple of arrays


def values_as_float32(width: int) -> Callable[[pa.Table], np.ndarray]:
    """A ``decode`` for values that are packed little-endian float32 vectors of ``width``:
    ``(rows, width)`` float32, straight from the value column's buffer (no loop per record)."""

    def decode(table: pa.Table) -> np.ndarray:
        values = table.column("value").combine_chunks()
        data = np.frombuffer(values.buffers()[2], dtype=np.uint8)
        offsets = np.frombuffer(values.buffers()[1], dtype=np.int32)[values.offset : values.offset + len(values) + 1]
        return data[offsets[0] : offsets[-1]].view("<f4").reshape(len(values), width)

    return decode


class TrainingStream:
    """Batches of ``batch_size`` records from ``topics`` for one training worker.

    Args:
        cluster: from :func:`raylog.connect` (pickles: build the stream inside the worker).
        topics: topic names to subscribe to.
        group_id: the consumer group the workers share.
        batch_size: rows per batch (the last batch of an epoch may be smaller unless
            ``drop_last``).
        decode: Arrow table (columns topic, partition, offset, timestamp, key, value,
            headers) -> arrays; default: the raw value column as a NumPy object array.
        epochs: read in epochs (see the module docstring) instead of continuously.
        as_torch: yield ``torch.Tensor`` (via ``torch.from_numpy``) where decode gives arrays.
        drop_last: drop an epoch's (or an idle stream's) last, short batch.
        idle_timeout_s: continuous mode: stop after this long without records (None: never).
        consumer_config: more Consumer settings (e.g. ``session_timeout_ms``).

    Example:
        >>> stream = TrainingStream(cluster, ["features"], group_id="trainer", batch_size=256,
        ...                         decode=values_as_float32(16))  # doctest: +SKIP
        >>> for x in stream: model.partial_fit(x)                  # doctest: +SKIP
    """

    def __init__(
        self,
        cluster: RaylogCluster,
        topics: list[str],
        *,
        group_id: str,
        batch_size: int,
        decode: Callable[[pa.Table], Decoded] | None = None,
        epochs: bool = False,
        as_torch: bool = False,
        drop_last: bool = False,
        idle_timeout_s: float | None = None,
        consumer_config: dict[str, Any] | None = None,
    ):
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        if as_torch:
            import torch  # noqa: F401 — fail now, not at the first batch, if it is missing
        self.cluster = cluster
        self.group_id = group_id
        self.batch_size = batch_size
        self._decode = decode or (lambda table: np.asarray(table.column("value").to_pylist(), dtype=object))
        self._epochs = epochs
        self._as_torch = as_torch
        self._drop_last = drop_last
        self._idle_timeout_s = idle_timeout_s
        config = {
            "auto_offset_reset": "earliest",
            "enable_auto_commit": False,
            "max_poll_interval_ms": None,
            **(consumer_config or {}),
        }
        self.consumer = Consumer(cluster, group_id=group_id, **config)
        self.consumer.subscribe(list(topics))
        self._pending: list[pa.Table] = []  # fetched rows not yet in a batch
        self._last_records = time.monotonic()
        self._yielded: dict[TopicPartition, int] = {}  # next offset after rows handed out

    def wait_for_members(self, count: int, timeout_s: float = 60.0) -> set[TopicPartition]:
        """Join the group and wait until it has ``count`` members among which every
        partition is assigned (call on every worker before the first epoch; a cooperative
        rebalance hands moved partitions on in a second round). Returns the assignment.

        Every worker must have returned from it before any worker closes its stream: a
        worker that closes leaves the group, and one still waiting then waits for a member
        that is gone. Workers that run an epoch each keep their streams open until all
        are done, as Ray Train's workers do until training ends.

        Raises:
            KafkaTimeoutError: the group did not reach ``count`` members in time.
        """
        admin = Admin(self.cluster)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.consumer.pause(*self.consumer.assignment())
            # A poll that completes the join may fetch from the partitions it was just given:
            # those records are not handed out, so they are read again from where they start.
            for tp, records in self.consumer.poll(timeout_ms=POLL_TIMEOUT_MS).items():
                self.consumer.seek(tp, records[0].offset)
            try:
                (described,) = admin.describe_consumer_groups([self.group_id])
            except GroupIdNotFoundError:
                continue  # no member's first join has completed yet: the group does not exist
            mine = self.consumer.group_metadata()
            wanted = sum(self.cluster.metadata().num_partitions(t) for t in self.consumer.subscription())
            if (
                len(described.members) == count
                and described.state == "Stable"
                and described.generation == mine["generation"]
                and sum(len(m.assignment) for m in described.members) == wanted
            ):
                self.consumer.resume(*self.consumer.assignment())
                return self.consumer.assignment()
        raise KafkaTimeoutError(f"group {self.group_id!r} did not reach {count} members in {timeout_s} s")

    def __iter__(self) -> Iterator[Decoded]:
        return self._epoch() if self._epochs else self._continuous()

    def close(self) -> None:
        """Commit what was handed out (continuous mode) and leave the group."""
        if not self._epochs:
            self._commit()
        self.consumer.close()

    def __enter__(self) -> TrainingStream:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # --- internals ----------------------------------------------------------------------

    def _continuous(self) -> Iterator[Decoded]:
        self._last_records = time.monotonic()

        def idle() -> bool:
            limit = self._idle_timeout_s
            return limit is not None and time.monotonic() - self._last_records >= limit

        while (table := self._next_table(idle)) is not None:
            yield self._output(table)
            self._commit()  # the step that used the batch is over
            self._last_records = time.monotonic()  # idle time counts from here, not the step
        yield from self._rest()
        self._commit()

    def _epoch(self) -> Iterator[Decoded]:
        assignment = sorted(self.consumer.assignment())
        ends = self.consumer.end_offsets(assignment)
        self.consumer.seek_to_beginning(*assignment)
        self._pending = []
        remaining = {tp for tp in assignment if self.consumer.position(tp) < ends[tp]}

        def finished() -> bool:
            for tp in list(remaining):
                if self.consumer.position(tp) >= ends[tp]:
                    self.consumer.pause(tp)
                    remaining.discard(tp)
            return not remaining

        while (table := self._next_table(finished, ends)) is not None:
            yield self._output(table)
        yield from self._rest()
        self.consumer.resume(*assignment)

    def _rest(self) -> Iterator[Decoded]:
        """The last, short batch (unless drop_last)."""
        pending, self._pending = self._pending, []
        rows = pa.concat_tables(pending) if pending else None
        if rows is not None and rows.num_rows and not self._drop_last:
            yield self._output(rows)

    def _next_table(self, finished: Callable[[], bool], ends: dict | None = None) -> pa.Table | None:
        """Exactly ``batch_size`` rows, or None once ``finished()`` and not enough are left."""
        have = sum(t.num_rows for t in self._pending)
        while have < self.batch_size:
            if finished():
                return None
            table = self.consumer.poll_arrow(timeout_ms=POLL_TIMEOUT_MS)
            if ends is not None and table.num_rows:
                table = _below_ends(table, ends)
            if table.num_rows:
                self._pending.append(table)
                have += table.num_rows
                self._last_records = time.monotonic()
        rows = pa.concat_tables(self._pending)
        self._pending = [rows.slice(self.batch_size)] if rows.num_rows > self.batch_size else []
        return rows.slice(0, self.batch_size)

    def _output(self, table: pa.Table) -> Decoded:
        for tp, last in _last_offsets(table).items():
            self._yielded[tp] = last + 1
        decoded = self._decode(table)
        if not self._as_torch:
            return decoded
        import torch

        if isinstance(decoded, dict):
            return {k: torch.from_numpy(v) for k, v in decoded.items()}
        if isinstance(decoded, tuple):
            return tuple(torch.from_numpy(v) for v in decoded)
        return torch.from_numpy(decoded)

    def _commit(self) -> None:
        owned = self.consumer.assignment()
        offsets = {tp: OffsetAndMetadata(o) for tp, o in self._yielded.items() if tp in owned}
        if offsets:
            self.consumer.commit(offsets)


def _last_offsets(table: pa.Table) -> dict[TopicPartition, int]:
    """The highest offset of each partition in ``table`` (one mask per partition)."""
    out = {}
    for topic in pc.unique(table.column("topic")).to_pylist():
        of_topic = table.filter(pc.equal(table.column("topic"), topic))
        for partition in pc.unique(of_topic.column("partition")).to_pylist():
            rows = of_topic.filter(pc.equal(of_topic.column("partition"), partition))
            out[TopicPartition(topic, partition)] = pc.max(rows.column("offset")).as_py()
    return out


def _below_ends(table: pa.Table, ends: dict[TopicPartition, int]) -> pa.Table:
    """Rows below their partition's epoch end (one vectorised mask per partition)."""
    keep = None
    for tp, end in ends.items():
        mine = pc.and_(pc.equal(table.column("topic"), tp.topic), pc.equal(table.column("partition"), tp.partition))
        below = pc.and_(mine, pc.less(table.column("offset"), end))
        keep = below if keep is None else pc.or_(keep, below)
    return table if keep is None else table.filter(keep)
