"""The clients of a fault run, each a thread that records what it did in a :class:`Recorder`.

- :class:`ProducerWorker`: threads sharing one Producer send unique values to random
  partitions, a few at a time, each awaited: ok with its offset, or unknown (an error
  after ``send`` returned: it may have been written), or fail (``send`` refused it).
- :class:`ConsumerWorker`: a group member (committing what each poll returned, sync or
  async) or a consumer with every partition assigned (committing for a group of its own,
  as Kafka allows with no active member), polling until stopped. Group members record
  each assignment, after which their order of records restarts.
- :func:`final_read`: a fresh consumer reads every partition from its log start up to
  its end offset, and each group's committed offsets are fetched.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Any

from raylog.chaos.history import FAIL, OK, UNKNOWN, Assign, Commit, FinalRead, Poll, Recorder, Revoke, Send
from raylog.clients.admin import Admin
from raylog.clients.consumer import Consumer
from raylog.clients.group import ConsumerRebalanceListener
from raylog.clients.producer import Producer
from raylog.errors import (
    CommitFailedError,
    IllegalStateError,
    InvalidRecordError,
    RaylogError,
    RecordTooLargeError,
    UnknownTopicOrPartitionError,
)
from raylog.types import TopicPartition

logger = logging.getLogger(__name__)

#: Errors ``send`` raises before a record leaves the client: certainly not written.
DEFINITE_SEND_ERRORS = (IllegalStateError, InvalidRecordError, RecordTooLargeError, UnknownTopicOrPartitionError)
#: Sends a producer thread makes before awaiting them (they share batches).
SENDS_PER_ROUND_MAX = 4
#: How long a consumer's poll may wait for records.
POLL_TIMEOUT_MS = 200
#: Bound on a final read and on each producer's close.
FINAL_READ_TIMEOUT_S = 60.0
CLOSE_TIMEOUT_S = 30.0
#: How long a producer's close may wait for sends in flight (then they are unknown).
PRODUCER_CLOSE_TIMEOUT_S = 5.0


class ProducerWorker:
    """``threads`` threads sending through one Producer (acks and idempotence as given) at
    about ``rate_per_s`` records per second each."""

    def __init__(
        self,
        name: str,
        cluster: Any,
        topic: str,
        partitions: int,
        recorder: Recorder,
        rng: random.Random,
        *,
        acks: str | int = "all",
        idempotent: bool = True,
        threads: int = 2,
        rate_per_s: float = 60.0,
        request_timeout_ms: int = 5_000,
    ):
        self.name = name
        self.topic = topic
        self.partitions = partitions
        self.recorder = recorder
        self.idempotent = idempotent
        self.producer = Producer(
            cluster,
            acks=acks,
            enable_idempotence=idempotent,
            linger_ms=2,
            retry_backoff_ms=50,
            request_timeout_ms=request_timeout_ms,
            delivery_timeout_ms=20_000,
        )
        self._interval_s = 1.0 / rate_per_s
        self._stop = threading.Event()
        self._pending: dict[int, tuple[Send, Any]] = {}  # start -> (invocation, future)
        self._lock = threading.Lock()
        self._wakes = [threading.Event() for _ in range(threads)]  # a send completed, or stop
        self._threads = [
            threading.Thread(
                target=self._run, args=(f"{name}/t{i}", random.Random(rng.random()), self._wakes[i]), daemon=True
            )
            for i in range(threads)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def _run(self, process: str, rng: random.Random, wake: threading.Event) -> None:
        sequence = 0
        while not self._stop.is_set():
            began = time.monotonic()
            round_ = []
            for _ in range(rng.randint(1, SENDS_PER_ROUND_MAX)):
                value = f"{process}-{sequence}"
                sequence += 1
                round_.append(self._send(process, rng.randrange(self.partitions), value))
            for invocation in round_:
                if invocation is not None and not self._await(invocation, wake):
                    return
            pause = len(round_) * self._interval_s - (time.monotonic() - began)
            if pause > 0:
                self._stop.wait(pause)

    def _send(self, process: str, partition: int, value: str) -> int | None:
        start = self.recorder.now()
        invocation = Send(process, partition, value, UNKNOWN, idempotent=self.idempotent, start=start)
        try:
            future = self.producer.send(self.topic, value.encode(), partition=partition)
        except DEFINITE_SEND_ERRORS as exc:
            self._finish(invocation, FAIL, None, exc)
            return None
        except RaylogError as exc:  # e.g. no buffer room in time: the record was not queued
            self._finish(invocation, FAIL, None, exc)
            return None
        with self._lock:
            self._pending[start] = (invocation, future)
        return start

    def _await(self, start: int, wake: threading.Event) -> bool:
        """Record the send's outcome once it completes; False if stopped first (a send still
        in flight is decided by :meth:`stop`)."""
        with self._lock:
            invocation, future = self._pending[start]
        future.add_done_callback(lambda _: wake.set())
        while not future.done():
            if self._stop.is_set():
                return False
            wake.wait()
            wake.clear()
        try:
            metadata = future.result(0)
        except RaylogError as exc:
            self._finish(invocation, UNKNOWN, None, exc)
        else:
            self._finish(invocation, OK, metadata.offset, None)
        with self._lock:
            self._pending.pop(start, None)
        return True

    def _finish(self, invocation: Send, outcome: str, offset: int | None, error: Exception | None) -> None:
        self.recorder.add(
            Send(
                invocation.process,
                invocation.partition,
                invocation.value,
                outcome,
                offset,
                invocation.idempotent,
                None if error is None else type(error).__name__,
                start=invocation.start,
                end=self.recorder.now(),
            )
        )

    def stop(self) -> None:
        """Stop sending, give what is in flight a little time to complete, record the rest as
        unknown (a partition left offline would hold them until the delivery timeout)."""
        self._stop.set()
        for wake in self._wakes:
            wake.set()
        for thread in self._threads:
            thread.join(CLOSE_TIMEOUT_S)
        try:
            self.producer.close(timeout=PRODUCER_CLOSE_TIMEOUT_S)
        except RaylogError as exc:
            logger.info("%s: close: %s", self.name, exc)
        with self._lock:
            pending = list(self._pending.items())
            self._pending.clear()
        for _, (invocation, future) in pending:
            if future.done() and future.exception(0) is None:
                self._finish(invocation, OK, future.result(0).offset, None)
            else:
                self._finish(invocation, UNKNOWN, None, future.exception(0) if future.done() else None)


class _Listener(ConsumerRebalanceListener):
    def __init__(self, worker: ConsumerWorker):
        self.worker = worker

    def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        worker, now = self.worker, self.worker.recorder.now()
        worker.recorder.add(Assign(worker.name, _partitions(assigned), worker.group, now, now))

    def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        worker, now = self.worker, self.worker.recorder.now()
        worker.recorder.add(Revoke(worker.name, _partitions(revoked), worker.group, now, now))


def _partitions(tps: list[TopicPartition]) -> tuple[int, ...]:
    return tuple(sorted(tp.partition for tp in tps))


class ConsumerWorker:
    """A consumer polling ``topic`` in its own thread until stopped, committing each poll's
    offsets for ``group``. ``member``: subscribe as a group member (else assign every
    partition); ``commit``: "sync" or "async"."""

    def __init__(
        self,
        name: str,
        cluster: Any,
        topic: str,
        partitions: int,
        recorder: Recorder,
        group: str,
        *,
        member: bool = True,
        commit: str = "sync",
    ):
        self.name = name
        self.topic = topic
        self.recorder = recorder
        self.group = group
        self.commit_mode = commit
        self.errors: list[str] = []
        config = {
            "group_id": group,
            "auto_offset_reset": "earliest",
            "enable_auto_commit": False,
            "fetch_max_wait_ms": POLL_TIMEOUT_MS,
            "max_poll_records": 100,
            "session_timeout_ms": 10_000,
            "heartbeat_interval_ms": 1_000,
            "request_timeout_ms": 10_000,
        }
        self.consumer = Consumer(cluster, **config)
        if member:
            self.consumer.subscribe([topic], listener=_Listener(self))
        else:
            tps = [TopicPartition(topic, p) for p in range(partitions)]
            self.consumer.assign(tps)
            now = recorder.now()
            recorder.add(Assign(name, tuple(range(partitions)), None, now, now))
        self._pending_async: dict[int, tuple[int, ...]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            start = self.recorder.now()
            try:
                polled = self.consumer.poll(timeout_ms=POLL_TIMEOUT_MS)
            except RaylogError as exc:
                self._error("poll", exc)
                continue
            records = tuple((tp.partition, r.offset, r.value.decode()) for tp, rs in polled.items() for r in rs)
            if not records:
                continue
            self.recorder.add(Poll(self.name, records, self.group, start=start, end=self.recorder.now()))
            offsets = {TopicPartition(self.topic, tp.partition): rs[-1].offset + 1 for tp, rs in polled.items()}
            self._commit(offsets)

    def _commit(self, offsets: dict[TopicPartition, int]) -> None:
        as_pairs = tuple(sorted((tp.partition, o) for tp, o in offsets.items()))
        start = self.recorder.now()
        if self.commit_mode == "async":

            def done(_: Any, error: Exception | None) -> None:
                outcome = OK if error is None else (FAIL if isinstance(error, CommitFailedError) else UNKNOWN)
                self.recorder.add(Commit(self.name, self.group, as_pairs, outcome, start, self.recorder.now()))

            try:
                self.consumer.commit_async(offsets, callback=done)
            except RaylogError as exc:
                self._error("commit_async", exc)
            return
        try:
            self.consumer.commit(offsets)
            outcome = OK
        except CommitFailedError:
            outcome = FAIL
        except RaylogError as exc:
            self._error("commit", exc)
            outcome = UNKNOWN
        self.recorder.add(Commit(self.name, self.group, as_pairs, outcome, start, self.recorder.now()))

    def _error(self, what: str, exc: Exception) -> None:
        self.errors.append(f"{what}: {type(exc).__name__}: {exc}")
        self._stop.wait(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(CLOSE_TIMEOUT_S)
        try:
            self.consumer.close()
        except RaylogError as exc:
            logger.info("%s: close: %s", self.name, exc)


def final_read(cluster: Any, topic: str, partitions: int, groups: list[str]) -> FinalRead:
    """Every partition from its log start to its end offset, with a fresh consumer; and
    each group's committed offsets. A partition without a leader is left unread (not complete)."""
    leaders = cluster.metadata(refresh=True).leaders
    tps = [TopicPartition(topic, p) for p in range(partitions) if (topic, p) in leaders]
    records: dict[int, list[tuple[int, str]]] = {p: [] for p in range(partitions)}
    reached = dict.fromkeys(range(partitions), 0)
    ends: dict[TopicPartition, int] = {}
    consumer = Consumer(cluster, auto_offset_reset="earliest", request_timeout_ms=10_000)
    try:
        if tps:
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
            ends = _retrying(lambda: consumer.end_offsets(tps))
        deadline = time.monotonic() + FINAL_READ_TIMEOUT_S
        while any(reached[tp.partition] < ends[tp] for tp in tps) and time.monotonic() < deadline:
            try:
                polled = consumer.poll(timeout_ms=500)
            except RaylogError as exc:
                logger.info("final read: %s", exc)
                continue
            for tp, rs in polled.items():
                records[tp.partition].extend((r.offset, r.value.decode()) for r in rs)
                reached[tp.partition] = max(reached[tp.partition], rs[-1].offset + 1)
    finally:
        consumer.close()
    complete = {p: TopicPartition(topic, p) in ends and reached[p] >= ends[TopicPartition(topic, p)] for p in records}
    admin = Admin(cluster)
    committed = {}
    for group in groups:
        found = _retrying(lambda g=group: admin.list_consumer_group_offsets(g))
        committed[group] = {tp.partition: om.offset for tp, om in found.items() if tp.topic == topic}
    return FinalRead(records, reached, complete, committed)


def _retrying(fn, timeout_s: float = FINAL_READ_TIMEOUT_S):
    """``fn()``, retried on raylog errors until ``timeout_s`` (the cluster is settling)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return fn()
        except RaylogError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
