"""The partition replica actor: an async Ray actor hosting one :class:`Partition`.

One actor per replica of a partition, pinned to its broker's node (hard node affinity),
its log in ``<broker data dir>/<topic>-<partition>``. Ray restarts it in place after a
crash (``max_restarts``) and ``__init__`` recovers the log from disk. Being async, one
actor serves many produce and fetch calls at once; a fetch that finds less than
``min_bytes`` waits (long poll) until an append moves the high watermark or
``max_wait_ms`` passes.

The actor only translates: requests in, :class:`Partition` steps, responses out; every
raylog error becomes a response error code.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time

import numpy as np

from raylog.config import TopicConfig
from raylog.coordination.partition import Partition, SequenceGap
from raylog.errors import OutOfOrderSequenceError
from raylog.protocol import (
    FetchRequest,
    FetchResponse,
    ListOffsetsResponse,
    ProduceRequest,
    ProduceResponse,
    error_fields,
)
from raylog.storage.log import Log

#: How often the actor applies retention and the flush.ms policy.
HOUSEKEEPING_INTERVAL_S = 5.0
#: How long a batch from a producer this replica does not know, with a sequence above 0,
#: waits for the producer's earlier batches before it is taken as the producer's first
#: (its earlier batches may be in older segments, or lost with a restart).
UNKNOWN_PRODUCER_GRACE_S = 0.25


def log_dir(data_dir: str, topic: str, partition: int) -> str:
    return os.path.join(data_dir, f"{topic}-{partition}")


class PartitionReplicaActor:
    """See the module docstring. Concurrency: one asyncio event loop; calls interleave
    only at ``await`` points, so every :class:`Partition` step runs alone."""

    def __init__(
        self,
        topic: str,
        partition: int,
        broker_id: int,
        data_dir: str,
        config: dict,
        leader: int,
        leader_epoch: int,
        replicas: list[int],
        isr: list[int],
    ):
        topic_config = TopicConfig.from_properties(config)
        self._dir = log_dir(data_dir, topic, partition)
        log = Log.open(self._dir, topic_config.log_config())
        self.partition = Partition(topic, partition, broker_id, log, topic_config)
        if leader == broker_id:
            self.partition.become_leader(leader_epoch, tuple(replicas), tuple(isr))
        self._data_event: asyncio.Event | None = None
        self._housekeeping: asyncio.Task | None = None

    async def ready(self) -> dict:
        """Wait until constructed; start housekeeping. Returns the log's recovery report."""
        if self._housekeeping is None:
            self._housekeeping = asyncio.get_running_loop().create_task(self._housekeep())
        log = self.partition.log
        return {"log_end_offset": log.log_end_offset, "recovery": vars(log.recovery)}

    async def produce(self, request: ProduceRequest) -> ProduceResponse:
        """Append a producer's batch; an idempotent batch that arrives before an earlier
        one of its producer waits for it (Ray may run pipelined calls out of order)."""
        started = time.monotonic()
        deadline = started + request.timeout_ms / 1000
        while True:
            event = self._event()
            accept_unknown = time.monotonic() - started >= UNKNOWN_PRODUCER_GRACE_S
            try:
                outcome = self.partition.append_as_leader(request.records, request.acks, accept_unknown)
                break
            except SequenceGap:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return ProduceResponse(
                        **error_fields(OutOfOrderSequenceError("an earlier batch of this producer never arrived"))
                    )
                await _wait(event, min(remaining, UNKNOWN_PRODUCER_GRACE_S))
            except Exception as exc:  # noqa: BLE001 — every error travels back as a code
                return ProduceResponse(**error_fields(exc))
        if isinstance(outcome, int):  # a retry of a batch already appended
            return ProduceResponse(base_offset=outcome, log_start_offset=self.partition.log.log_start_offset)
        self._notify_append()
        return ProduceResponse(
            base_offset=outcome.first_offset,
            log_append_time_ms=outcome.log_append_time_ms,
            log_start_offset=self.partition.log.log_start_offset,
        )

    async def fetch(self, request: FetchRequest) -> FetchResponse:
        deadline = time.monotonic() + max(0, request.max_wait_ms) / 1000
        while True:
            event = self._event()
            try:
                result = self.partition.read(
                    request.offset, request.max_bytes, request.replica_id, request.current_leader_epoch
                )
            except Exception as exc:  # noqa: BLE001
                return FetchResponse(**error_fields(exc), leader_epoch=self.partition.leader_epoch)
            remaining = deadline - time.monotonic()
            if len(result.data) >= request.min_bytes or remaining <= 0:
                return FetchResponse(
                    high_watermark=result.high_watermark,
                    log_start_offset=result.log_start_offset,
                    log_end_offset=result.log_end_offset,
                    leader_epoch=self.partition.leader_epoch,
                    records=np.frombuffer(result.data, dtype=np.uint8),
                )
            await _wait(event, remaining)

    async def list_offsets(self, timestamp_ms: int) -> ListOffsetsResponse:
        try:
            offset, timestamp = self.partition.list_offset(timestamp_ms)
        except Exception as exc:  # noqa: BLE001
            return ListOffsetsResponse(**error_fields(exc))
        return ListOffsetsResponse(offset=offset, timestamp_ms=timestamp)

    async def state(self) -> dict:
        p = self.partition
        return {
            "leader": p.leader,
            "leader_epoch": p.leader_epoch,
            "isr": list(p.isr),
            "high_watermark": p.high_watermark,
            "log_start_offset": p.log.log_start_offset,
            "log_end_offset": p.log.log_end_offset,
            "size_bytes": p.log.size_bytes,
            "segments": p.log.segment_count,
            "pid": os.getpid(),
        }

    async def delete_data(self) -> None:
        """Close and remove this replica's log (the topic is being deleted)."""
        if self._housekeeping is not None:
            self._housekeeping.cancel()
        self.partition.log.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def _event(self) -> asyncio.Event:
        if self._data_event is None:
            self._data_event = asyncio.Event()
        return self._data_event

    def _notify_append(self) -> None:
        """Wake every long-polling fetch and every batch waiting for its sequence gap."""
        if self._data_event is not None:
            self._data_event.set()
            self._data_event = None

    async def _housekeep(self) -> None:
        while True:
            await asyncio.sleep(HOUSEKEEPING_INTERVAL_S)
            self.partition.log.apply_retention()
            self.partition.log.maybe_flush()


async def _wait(event: asyncio.Event, timeout_s: float) -> None:
    """Wait until ``event`` is set or ``timeout_s`` passes."""
    try:
        await asyncio.wait_for(event.wait(), timeout_s)
    except asyncio.TimeoutError:
        pass
