"""Fetches from partition leaders (Kafka's Fetcher): which partitions to fetch and how much
of ``fetch_max_bytes`` each may ask, the calls, and their answers decoded into buffered
tables that polls hand out.

Each assigned, unpaused partition has at most one fetch in flight; all run concurrently,
a fetch that has not answered by the end of one ``poll`` is kept for the next, and the
next fetch goes out as soon as a response arrives (up to ``BUFFERED_FETCHES`` decoded
responses wait per partition), so fetching overlaps decoding. Fetched bytes are the stored
batches themselves, read zero-copy from Ray's object store and decoded to Arrow without a
Python loop per record.
"""

from __future__ import annotations

import collections
import logging
import math
import time
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import ray
from ray.exceptions import RayError

from raylog import metrics
from raylog.clients.cluster import RaylogCluster
from raylog.clients.consumer.completed_fetch import CompletedFetch, LogAppendTime, log_append_time_ranges
from raylog.clients.consumer.offset_fetcher import OffsetFetcher
from raylog.clients.consumer.subscription_state import SubscriptionState
from raylog.clients.security import ClientSession
from raylog.common import record_batch
from raylog.common.requests import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, READ_COMMITTED
from raylog.errors import LogTruncationError, NoOffsetForPartitionError, OffsetOutOfRangeError, RaylogError
from raylog.protocol import FetchRequest, FetchResponse, error_of
from raylog.transport import translate
from raylog.types import TopicPartition

log = logging.getLogger(__name__)

#: Decoded responses kept per partition before fetching pauses (bounds memory).
BUFFERED_FETCHES = 2


def fetch_ask(used: int, fetch_max_bytes: int, partition_max_bytes: int, batch_bytes: int) -> tuple[int, int] | None:
    """The ``(max_bytes, expected_bytes)`` of a fetch of a partition with records to read, or
    None: ``fetch_max_bytes`` is spent (``used`` bytes are buffered or expected from fetches in
    flight). A leader answers at least one batch however little is asked, so a partition
    whose last answer was ``batch_bytes`` is expected to bring that much; one fetch is always
    allowed when nothing is used, as Kafka returns at least one batch per fetch request."""
    ask = min(partition_max_bytes, max(1, fetch_max_bytes - used))
    expected = max(ask, batch_bytes)
    if used > 0 and used + expected > fetch_max_bytes:
        return None
    return ask, expected


class Fetcher:
    """The fetches of one consumer, and what they brought that is not handed out yet.

    Args:
        cluster, session: the consumer's handle and principal.
        subscriptions: what to fetch and from where (positions move as records are handed out).
        offsets: the look-ups that reset and check positions.
        config: the Consumer's keywords (the fetch_* ones, max_partition_fetch_bytes,
            check_crcs, client_id).
        isolation_level: READ_COMMITTED or READ_UNCOMMITTED.
        group_id: the consumer's group, whose lag metric fetches record (None: not recorded).

    Attributes:
        in_flight: each fetch in flight -> ``(tp, offset, epoch, bytes expected of fetch_max_bytes)``.
        fetching: each partition's one fetch in flight.
        buffers: each partition's decoded answers, oldest first.
        throttle_time_ms: how long the leader held the latest fetch response back for the quota.
    """

    def __init__(
        self,
        cluster: RaylogCluster,
        session: ClientSession,
        subscriptions: SubscriptionState,
        offsets: OffsetFetcher,
        config: dict[str, Any],
        isolation_level: int,
        group_id: str | None,
    ):
        self._cluster, self._session = cluster, session
        self._subscriptions, self._offsets = subscriptions, offsets
        self._min_bytes = config["fetch_min_bytes"]
        self._max_wait_ms = config["fetch_max_wait_ms"]
        self._partition_max_bytes = config["max_partition_fetch_bytes"]
        self._fetch_max_bytes = config["fetch_max_bytes"]
        self._check_crcs = config["check_crcs"]
        self._client_id = config["client_id"]
        self._isolation = isolation_level
        self._read_committed = isolation_level == READ_COMMITTED
        self._group_id = group_id
        self.in_flight: dict[Any, tuple[TopicPartition, int, int, int]] = {}
        self.fetching: dict[TopicPartition, Any] = {}
        self.buffers: dict[TopicPartition, collections.deque[CompletedFetch]] = {}
        self._high_watermarks: dict[TopicPartition, int] = {}  # from each partition's last answer
        self._batch_bytes: dict[TopicPartition, int] = {}  # its last answer's size with records
        self._fetch_turn = 0  # which partition goes first, in turn
        self.throttle_time_ms = 0
        #: Partitions whose leader asked this client to hold back, until when (monotonic s).
        self._throttled_until: dict[TopicPartition, float] = {}

    # --- positions ------------------------------------------------------------------------

    def reassign(self, wanted: list[TopicPartition]) -> None:
        """Read exactly ``wanted`` (see :meth:`SubscriptionState.assign`); what is buffered of
        partitions no longer assigned is dropped."""
        self._subscriptions.assign(wanted)
        self.buffers = {tp: b for tp, b in self.buffers.items() if tp in self._subscriptions.positions}

    def seek(self, tp: TopicPartition, offset: int, leader_epoch: int = -1) -> None:
        """Read ``tp`` from ``offset`` (see :meth:`SubscriptionState.seek`): what is buffered of
        it is dropped, and a fetch in flight for the old offset is ignored on arrival."""
        self._subscriptions.seek(tp, offset, leader_epoch)
        self.buffers.pop(tp, None)
        self.fetching.pop(tp, None)

    def seek_to(self, partitions: Iterable[Any], timestamp: int) -> None:
        """Read each of ``partitions`` from its offset for ``timestamp`` (its leader asked).

        Raises:
            IllegalStateError: a partition that is not assigned.
        """
        for tp in partitions:
            self.seek(self._subscriptions.assigned(tp), self._offsets.offset(tp, timestamp).offset)

    def reset_positions(self, tps: list[TopicPartition]) -> None:
        """Positions by ``auto_offset_reset``, the partitions' leaders asked all at once.

        Raises:
            NoOffsetForPartitionError: auto_offset_reset is "none".
        """
        if not tps:
            return
        reset = self._subscriptions.reset
        if reset == "none":
            raise NoOffsetForPartitionError(f"no position for {tps[0]} and auto_offset_reset is none")
        for tp, found in self._offsets.offsets(
            tps, EARLIEST_TIMESTAMP if reset == "earliest" else LATEST_TIMESTAMP
        ).items():
            self.seek(tp, found.offset)

    def _validate_position(self, tp: TopicPartition, leader: Any, epoch: int) -> bool:
        """After a leader change, ask the new leader where the epoch of the last fetched batch
        ends there (KIP-320): if before our position, the log was truncated under us (an unclean
        election): go back to where it diverged (or raise, with auto_offset_reset "none"), so
        that the records now at those offsets are read, not skipped. False: try again later.

        Raises:
            LogTruncationError: truncation found and auto_offset_reset is "none".
        """
        subscriptions = self._subscriptions
        fetched = subscriptions.fetched_epochs.get(tp)
        if fetched is None:
            subscriptions.validated_epochs[tp] = epoch
            return True
        code, found, end = self._offsets.epoch_end(leader, fetched)
        if code:
            self._cluster.metadata(refresh=True)
            return False
        position = subscriptions.fetch_offset(tp)
        if found >= 0 and end < position:
            if subscriptions.reset == "none":
                # Left unvalidated: every poll raises it until the application seeks.
                raise LogTruncationError(f"{tp}: the log diverged at offset {end}, before our position {position}")
            consumed = subscriptions.positions[tp]
            log.warning(
                "%s: log truncated at %d (epoch %d) below our position %d: reading on from there",
                tp,
                end,
                fetched,
                position,
            )
            self.seek(tp, min(end, consumed) if consumed is not None else end)
        subscriptions.validated_epochs[tp] = epoch
        return True

    # --- fetching -------------------------------------------------------------------------

    def bytes_used(self) -> int:
        """What is buffered and expected from fetches in flight, of ``fetch_max_bytes``."""
        used = sum(b.nbytes for queue in self.buffers.values() for b in queue)
        return used + sum(expected for *_, expected in self.in_flight.values())

    def max_bytes(self) -> int:
        """What a caught-up partition's long poll asks: its share of ``fetch_max_bytes`` among
        the partitions assigned, at most ``max_partition_fetch_bytes``."""
        return min(
            self._partition_max_bytes, max(1, self._fetch_max_bytes // max(1, len(self._subscriptions.assignment)))
        )

    def _fetchable(self) -> list[TopicPartition]:
        """The partitions to fetch now, a different one first each time (their positions
        reset where unknown)."""
        now = time.monotonic()
        for tp in [tp for tp, until in self._throttled_until.items() if until <= now]:
            del self._throttled_until[tp]
        subscriptions = self._subscriptions
        fetchable = [
            tp
            for tp in subscriptions.assignment
            if tp not in self.fetching
            and tp not in subscriptions.paused
            and tp not in self._throttled_until
            and len(self.buffers.get(tp, ())) < BUFFERED_FETCHES
        ]
        self.reset_positions([tp for tp in fetchable if subscriptions.positions[tp] is None])
        if fetchable:
            self._fetch_turn = (self._fetch_turn + 1) % len(fetchable)
            fetchable = fetchable[self._fetch_turn :] + fetchable[: self._fetch_turn]
        return fetchable

    def send_fetches(self) -> None:
        """A fetch for each partition to fetch, while ``fetch_max_bytes`` lasts."""
        used = self.bytes_used()
        for tp in self._fetchable():
            metadata = self._cluster.metadata()
            try:
                leader, epoch = metadata.leader(tp), metadata.leader_epoch(tp)
                validated = self._subscriptions.validated_epochs.get(tp, epoch)
                if validated != epoch and not self._validate_position(tp, leader, epoch):
                    continue
            except LogTruncationError:
                raise  # (a RaylogError, but the application's to handle, not a metadata refresh's)
            except RaylogError:
                self._cluster.metadata(refresh=True)
                continue
            offset = self._subscriptions.fetch_offset(tp)
            # Records to read: a share of fetch_max_bytes, answered at once. Not known yet (the
            # first fetch): the same, without a long poll, so that the answer tells.
            max_wait_ms = self._max_wait_ms
            if offset < self._high_watermarks.get(tp, offset + 1):
                plan = fetch_ask(used, self._fetch_max_bytes, self._partition_max_bytes, self._batch_bytes.get(tp, 0))
                if plan is None:
                    continue  # its turn comes once buffered records are handed out
                max_bytes, expected = plan
                if tp not in self._high_watermarks:
                    max_wait_ms = 0
            else:  # caught up: a long poll, answered when records come; it holds no share
                max_bytes, expected = self.max_bytes(), 0
            request = FetchRequest(
                offset,
                max_bytes,
                self._min_bytes,
                max_wait_ms,
                current_leader_epoch=epoch,
                client_id=self._client_id,
                isolation_level=self._isolation,
                session=self._session.token(),
            )
            ref = leader.fetch.remote(request)
            self.in_flight[ref] = (tp, offset, epoch, expected)
            self.fetching[tp] = ref
            used += expected

    def await_answers(self, remaining_s: float, others: list[Any], idle_s: float) -> bool:
        """Wait up to ``remaining_s`` for a fetch (or one of ``others``, the group's calls) to
        answer, and take the fetches' answers; with nothing to wait on, sleep until a
        throttled partition may be fetched again, or for ``idle_s`` at most.

        Returns:
            False: nothing to wait for (no fetch, no other call, no throttle, ``idle_s`` infinite).
        """
        # A throttled partition is fetched again once its throttle time has passed.
        throttled_s = min(self._throttled_until.values(), default=math.inf) - time.monotonic()
        waiting = list(self.in_flight) + others
        if not waiting:
            if idle_s == math.inf and throttled_s == math.inf:
                return False
            time.sleep(max(0.0, min(remaining_s, throttled_s, idle_s)))
            return True
        ready, _ = ray.wait(waiting, num_returns=1, timeout=max(0.0, min(remaining_s, throttled_s)))
        for ref in ready + ray.wait(waiting, num_returns=len(waiting), timeout=0)[0]:
            if ref in self.in_flight:
                self._complete_fetch(ref)
        return True

    def _complete_fetch(self, ref: Any) -> None:
        tp, offset, epoch, _ = self.in_flight.pop(ref)
        if self.fetching.get(tp) == ref:
            del self.fetching[tp]
        try:
            response = ray.get(ref)
        except RayError as exc:
            error = translate(exc)
            if error.retriable:
                self._cluster.metadata(refresh=True)
                return
            raise error from None
        self.throttle_time_ms = response.throttle_time_ms
        if response.throttle_time_ms:
            metrics.record_throttle("consumer", self._client_id, response.throttle_time_ms)
            self._throttled_until[tp] = time.monotonic() + response.throttle_time_ms / 1000
        if self._subscriptions.fetch_offset(tp) != offset:
            return  # sought elsewhere (or unassigned) meanwhile
        error = error_of(response)
        if isinstance(error, OffsetOutOfRangeError):
            self.reset_positions([tp])
            return
        if error is not None:
            if error.invalid_metadata or error.retriable:
                self._cluster.metadata(refresh=True)
                return
            raise error
        self._buffer(tp, offset, epoch, response)

    def _buffer(self, tp: TopicPartition, offset: int, epoch: int, response: FetchResponse) -> None:
        """Decode a fetch's records (from ``offset``, fetched under leader ``epoch``) into ``tp``'s buffer."""
        end = response.last_stable_offset if self._read_committed else response.high_watermark
        self._high_watermarks[tp] = end
        if not len(response.records):
            return
        subscriptions = self._subscriptions
        self._batch_bytes[tp] = len(response.records)
        table = record_batch.decode_table(
            response.records,
            check_crcs=self._check_crcs,
            min_offset=offset,
            aborted=response.aborted_transactions if self._read_committed else None,
        )
        headers = list(record_batch.iter_headers(response.records))
        # Past the last batch, also where compaction removed its last records.
        last = headers[-1][1]
        after = last.next_offset
        subscriptions.fetched_epochs[tp], subscriptions.validated_epochs[tp] = last.leader_epoch, epoch
        if table.num_rows:
            buffered = CompletedFetch(table, len(response.records), log_append_time_ranges(headers))
            self.buffers.setdefault(tp, collections.deque()).append(buffered)
            subscriptions.next_fetch[tp] = max(after, table.column("offset")[-1].as_py() + 1)
            if self._group_id is not None:
                lag = max(0, end - subscriptions.next_fetch[tp])
                metrics.record_consumer_lag(self._group_id, tp.topic, tp.partition, lag)
        else:
            # Batches wholly below the position (e.g. control batches): skip past them.
            subscriptions.next_fetch[tp] = max(offset, after)
            if not self.buffers.get(tp):
                subscriptions.positions[tp] = subscriptions.next_fetch[tp]

    def drain(self, max_records: int) -> list[tuple[TopicPartition, pa.Table, LogAppendTime]]:
        """Up to ``max_records`` buffered records, a table per partition (paused ones left),
        moving the positions past them."""
        positions, next_fetch, paused = (
            self._subscriptions.positions,
            self._subscriptions.next_fetch,
            self._subscriptions.paused,
        )
        out = []
        for tp in list(self.buffers):
            if max_records <= 0:
                break
            if tp in paused:
                continue
            queue = self.buffers[tp]
            buffered = queue[0]
            take = min(max_records, buffered.table.num_rows - buffered.cursor)
            table = buffered.table.slice(buffered.cursor, take)
            buffered.cursor += take
            if buffered.cursor >= buffered.table.num_rows:
                queue.popleft()
                if not queue:
                    del self.buffers[tp]
            if tp in self.buffers:
                positions[tp] = table.column("offset")[-1].as_py() + 1
            else:
                # Everything fetched is handed out: the position moves past what the fetches
                # skipped after the last record too (a transaction's marker, aborted records),
                # as Kafka's does, so that a read up to the last stable offset ends there.
                positions[tp] = next_fetch[tp]
            out.append((tp, table, buffered.log_append_time))
            max_records -= take
        return out

    def close(self) -> None:
        """Abandon the fetches in flight and what is buffered."""
        self.in_flight.clear()
        self.fetching.clear()
        self.buffers.clear()
