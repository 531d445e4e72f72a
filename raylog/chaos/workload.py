"""The clients of a fault run, each a thread that records what it did in a :class:`Recorder`.

- :class:`ProducerWorker`: threads sharing one Producer send unique values to random
  partitions, a few at a time, each awaited: ok with its offset, or unknown (an error
  after ``send`` returned: it may have been written), or fail (``send`` refused it).
- :class:`TransactionalWorker`: a thread running transactions of a few unique values over
  the partitions through a transactional Producer, some of them aborted on purpose. Each
  send names its transaction; each transaction ends with a ``Txn`` op: committed only if
  ``commit_transaction`` returned, aborted only if ``abort_transaction`` returned (it is
  called only for transactions whose commit was never asked for), unknown otherwise. After
  an unknown end (a fenced producer, a timed-out or failed commit) a new Producer with the
  same ``transactional_id`` calls ``init_transactions``, which settles the transaction left
  behind (completes a commit the coordinator had decided, aborts anything else).
- :class:`ConsumerWorker`: a group member (committing what each poll returned, sync or
  async) or a consumer with every partition assigned (committing for a group of its own,
  as Kafka allows with no active member), polling until stopped. Group members record
  each assignment, after which their order of records restarts. Consumers read
  read_committed (the Consumer's default), and their polls say so.
- The Kafka wire clients (confluent-kafka) are in :mod:`raylog.chaos.kafka_workload`.
- :func:`final_read`: a fresh read_committed consumer reads every partition from its log
  start up to its end offset (the last stable offset), and each group's committed offsets
  are fetched.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
import time
from typing import Any

from raylog.chaos.history import (
    ABORTED,
    COMMITTED,
    FAIL,
    OK,
    UNKNOWN,
    Assign,
    Commit,
    FinalRead,
    Poll,
    Recorder,
    Revoke,
    Send,
    Txn,
)
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
    TransactionAbortableError,
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
#: Records a transaction writes at most, and the share of transactions aborted on purpose.
TXN_RECORDS_MAX = 4
TXN_ABORT_PROBABILITY = 0.25
#: Bound on each transactional call (init, commit, abort) and on a send's blocking: a commit
#: or abort that does not finish in time ends its transaction unknown.
TXN_CALL_TIMEOUT_S = 10.0
#: The coordinator aborts a transaction left open this long (one whose producer could not
#: init again to settle it).
TRANSACTION_TIMEOUT_MS = 15_000
#: How long a transactional worker tries init_transactions in a row (at its start, after an
#: unknown end, and to settle its last transaction when stopped).
TXN_INIT_TIMEOUT_S = 30.0
TXN_INIT_BACKOFF_S = 0.2
#: What the consumers read (the Consumer's default, said here because their polls record it).
ISOLATION_LEVEL = "read_committed"


def client_thread(name: str, crashes: list[str], target: Any, *args: Any) -> threading.Thread:
    """A daemon thread running ``target(*args)`` for client ``name``. An exception that ends it
    (a client's fatal error, a defect of the worker) is kept in ``crashes`` and logged: the run
    fails on it, where a worker that died quietly would only have made the run quieter."""

    def run() -> None:
        try:
            target(*args)
        except Exception as exc:  # noqa: BLE001 — every way a client thread ends early is kept
            crashes.append(f"{name}: {type(exc).__name__}: {exc}")
            logger.exception("soak client %s stopped by an error", name)

    return threading.Thread(target=run, name=f"soak-{name}", daemon=True)


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
        self.crashes: list[str] = []
        self._threads = [
            client_thread(f"{name}/t{i}", self.crashes, self._run, f"{name}/t{i}", random.Random(rng.random()), wake)
            for i, wake in enumerate(self._wakes)
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
            record_send(self.recorder, invocation, FAIL, None, exc)
            return None
        except RaylogError as exc:  # e.g. no buffer room in time: the record was not queued
            record_send(self.recorder, invocation, FAIL, None, exc)
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
        _record_future(self.recorder, invocation, future)
        with self._lock:
            self._pending.pop(start, None)
        return True

    def stop(self) -> None:
        """Stop sending, give what is in flight a little time to complete, record the rest as
        unknown (a partition left offline would hold them until the delivery timeout)."""
        self._stop.set()
        for wake in self._wakes:
            wake.set()
        for thread in self._threads:
            thread.join(CLOSE_TIMEOUT_S)
        _close(self.producer, self.name)
        with self._lock:
            pending = list(self._pending.items())
            self._pending.clear()
        for _, (invocation, future) in pending:
            _record_future(self.recorder, invocation, future)


def record_send(
    recorder: Recorder, invocation: Send, outcome: str, offset: int | None, error: Exception | None
) -> None:
    """Record ``invocation`` (a send as invoked) with its outcome."""
    error_name = None if error is None else type(error).__name__
    recorder.add(dataclasses.replace(invocation, outcome=outcome, offset=offset, error=error_name, end=recorder.now()))


def _record_future(recorder: Recorder, invocation: Send, future: Any) -> None:
    """Record a queued send by its future: ok at its offset, or unknown (failed after it was
    queued, or not done yet: it may still be written)."""
    error = future.exception(0) if future.done() else None
    if future.done() and error is None:
        record_send(recorder, invocation, OK, future.result(0).offset, None)
    else:
        record_send(recorder, invocation, UNKNOWN, None, error)


class TransactionalLoop:
    """What the transactional workers share (raylog's :class:`TransactionalWorker` and
    confluent-kafka's :class:`~raylog.chaos.kafka_workload.KafkaTransactionalWorker`): one
    thread running transactions at about ``rate_per_s`` records per second through a producer
    with ``transactional_id``. The producer is initialised in the constructor (the transaction
    coordinator, and its ``__transaction_state`` partition, exists before the nemesis can kill
    it) and again after a transaction that ended unknown (``producer`` is None meanwhile); one
    that ended unknown when the worker is stopped is settled by one more init, so that no
    transaction is open at the final read. A worker stopped before any of its transactions
    committed goes on until one does, for at most :data:`TXN_INIT_TIMEOUT_S`: the run then
    shows whether transactions complete once its faults have healed (the clients are stopped
    once the cluster is in sync again), however long the faults kept them from it under load.

    Subclasses make and initialise a producer (:meth:`_initialised`), run and record one
    transaction (:meth:`_transaction`) and close a producer (:meth:`_close`)."""

    def __init__(
        self,
        name: str,
        topic: str,
        partitions: int,
        recorder: Recorder,
        rng: random.Random,
        transactional_id: str,
        rate_per_s: float,
    ):
        self.name = name
        self.topic = topic
        self.partitions = partitions
        self.recorder = recorder
        self.transactional_id = transactional_id
        self.errors: list[str] = []
        self.crashes: list[str] = []
        self.producer: Any = None  # None: to init (again)
        self._interval_s = 1.0 / rate_per_s
        self._sequence = 0
        self._transactions = 0
        self._committed = 0
        self._stop = threading.Event()
        self._owed_until = 0.0  # (monotonic) once stopped: how long to go on for a first commit
        self._thread = client_thread(name, self.crashes, self._run, random.Random(rng.random()))
        self._init()

    def _initialised(self) -> Any:
        """A new producer with ``init_transactions`` done, or None (its error recorded)."""
        raise NotImplementedError

    def _transaction(self, rng: random.Random) -> int:
        """One transaction, recorded; how many records it sent."""
        raise NotImplementedError

    def _close(self, producer: Any) -> None:
        raise NotImplementedError

    def start(self) -> None:
        self._thread.start()

    def _run(self, rng: random.Random) -> None:
        while not self._stop.is_set() or (self._committed == 0 and time.monotonic() < self._owed_until):
            if self.producer is None:
                self._init()
                continue
            began = time.monotonic()
            sent = self._transaction(rng)
            pause = sent * self._interval_s - (time.monotonic() - began)
            if pause > 0:
                self._stop.wait(pause)
        if self.producer is None:  # the last transaction ended unknown: settle it
            self._init()
        if self.producer is not None:
            self._close(self.producer)

    def _init(self) -> None:
        """A new initialised producer (fencing the previous one and settling its transaction),
        tried for :data:`TXN_INIT_TIMEOUT_S`."""
        deadline = time.monotonic() + TXN_INIT_TIMEOUT_S
        while True:
            self.producer = self._initialised()
            if self.producer is not None or time.monotonic() >= deadline:
                return
            time.sleep(TXN_INIT_BACKOFF_S)  # the coordinator is moving: nothing to wait on

    def _next_value(self, txn: str, rng: random.Random) -> Send:
        """The next send of transaction ``txn``, as invoked: a unique value, a random partition."""
        value = f"{self.name}-{self._sequence}"
        self._sequence += 1
        return Send(self.name, rng.randrange(self.partitions), value, UNKNOWN, txn=txn, start=self.recorder.now())

    def _ended(self, txn: str, outcome: str, start: float, end: float) -> None:
        """Record transaction ``txn``'s outcome."""
        self.recorder.add(Txn(self.name, txn, outcome, start, end))
        if outcome == COMMITTED:
            self._committed += 1

    def _next_txn(self) -> str:
        txn = f"{self.name}#{self._transactions}"
        self._transactions += 1
        return txn

    def _abandon(self) -> None:
        """Drop the producer: the next transaction starts with a new one (init again)."""
        self._close(self.producer)
        self.producer = None

    def _error(self, what: str, exc: Any) -> None:
        self.errors.append(f"{self.name} {what}: {type(exc).__name__}: {exc}")

    def stop(self) -> None:
        """Stop after the transaction under way (and the init that settles it, if any), or
        after the first commit of a worker that has none yet (see the class docstring)."""
        self._owed_until = time.monotonic() + TXN_INIT_TIMEOUT_S
        self._stop.set()
        self._thread.join(CLOSE_TIMEOUT_S + 2 * TXN_INIT_TIMEOUT_S)


class TransactionalWorker(TransactionalLoop):
    """Transactions of up to :data:`TXN_RECORDS_MAX` unique values, each to a random
    partition, through a raylog transactional Producer on ``cluster``; a share
    (:data:`TXN_ABORT_PROBABILITY`) is aborted on purpose (see the module docstring for how
    each end is recorded, and :class:`TransactionalLoop` for the rest)."""

    def __init__(
        self,
        name: str,
        cluster: Any,
        topic: str,
        partitions: int,
        recorder: Recorder,
        rng: random.Random,
        transactional_id: str,
        *,
        rate_per_s: float = 60.0,
    ):
        self.cluster = cluster
        super().__init__(name, topic, partitions, recorder, rng, transactional_id, rate_per_s)

    def _initialised(self) -> Producer | None:
        producer = Producer(
            self.cluster,
            transactional_id=self.transactional_id,
            linger_ms=2,
            retry_backoff_ms=50,
            request_timeout_ms=5_000,
            delivery_timeout_ms=20_000,
            max_block_ms=int(TXN_CALL_TIMEOUT_S * 1000),
            transaction_timeout_ms=TRANSACTION_TIMEOUT_MS,
        )
        try:
            producer.init_transactions(timeout=TXN_CALL_TIMEOUT_S)
        except RaylogError as exc:
            self._error("init_transactions", exc)
            _close(producer, self.name)
            return None
        return producer

    def _close(self, producer: Producer) -> None:
        _close(producer, self.name)

    def _transaction(self, rng: random.Random) -> int:
        """One transaction, recorded; how many records it sent."""
        txn = self._next_txn()
        start = self.recorder.now()
        try:
            self.producer.begin_transaction()
        except RaylogError as exc:  # fenced
            self._error("begin_transaction", exc)
            self._abandon()
            return 0
        sends = []
        refused = False
        for _ in range(rng.randint(1, TXN_RECORDS_MAX)):
            invocation = self._next_value(txn, rng)
            try:
                future = self.producer.send(self.topic, invocation.value.encode(), partition=invocation.partition)
            except RaylogError as exc:  # not queued (e.g. fenced, no buffer room in time)
                record_send(self.recorder, invocation, FAIL, None, exc)
                refused = True
                break
            sends.append((invocation, future))
        outcome = self._end(abort=refused or rng.random() < TXN_ABORT_PROBABILITY)
        end = self.recorder.now()
        for invocation, future in sends:
            _record_future(self.recorder, invocation, future)
        self._ended(txn, outcome, start, end)
        if outcome == UNKNOWN:
            self._abandon()
        return len(sends)

    def _end(self, abort: bool) -> str:
        """Commit or abort the open transaction; its outcome. A transaction is aborted only
        if its commit was never asked for (on purpose, or because a send failed: the commit
        then refuses before it asks), so a returned abort is certain."""
        try:
            if not abort:
                try:
                    self.producer.commit_transaction(timeout=TXN_CALL_TIMEOUT_S)
                    return COMMITTED
                except TransactionAbortableError as exc:
                    self._error("commit_transaction", exc)
            self.producer.abort_transaction(timeout=TXN_CALL_TIMEOUT_S)
            return ABORTED
        except RaylogError as exc:  # fenced, timed out, or failed after the request left
            self._error("end of transaction", exc)
            return UNKNOWN


def _close(producer: Producer, name: str) -> None:
    try:
        producer.close(timeout=PRODUCER_CLOSE_TIMEOUT_S)
    except RaylogError as exc:
        logger.info("%s: close: %s", name, exc)


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
        self.crashes: list[str] = []
        config = {
            "group_id": group,
            "auto_offset_reset": "earliest",
            "enable_auto_commit": False,
            "fetch_max_wait_ms": POLL_TIMEOUT_MS,
            "max_poll_records": 100,
            "session_timeout_ms": 10_000,
            "heartbeat_interval_ms": 1_000,
            "request_timeout_ms": 10_000,
            "isolation_level": ISOLATION_LEVEL,
        }
        self.read_committed = config["isolation_level"] == "read_committed"
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
        self._thread = client_thread(name, self.crashes, self._run)

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
            self.recorder.add(
                Poll(self.name, records, self.group, self.read_committed, start=start, end=self.recorder.now())
            )
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
    """Every partition from its log start to its end offset, with a fresh read_committed
    consumer; and each group's committed offsets. A partition without a leader is left
    unread (not complete).

    A partition is read when the consumer's position reaches its end offset (the last stable
    offset): past a log's last record there may be a transaction's marker or aborted
    records, which no poll returns. A transaction left open would hold the end offset below
    what follows it, which then counts as lost."""
    leaders = cluster.metadata(refresh=True).leaders
    tps = [TopicPartition(topic, p) for p in range(partitions) if (topic, p) in leaders]
    records: dict[int, list[tuple[int, str]]] = {p: [] for p in range(partitions)}
    reached = dict.fromkeys(range(partitions), 0)
    ends: dict[TopicPartition, int] = {}
    consumer = Consumer(
        cluster, auto_offset_reset="earliest", request_timeout_ms=10_000, isolation_level=ISOLATION_LEVEL
    )
    try:
        if tps:
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
            ends = _retrying(lambda: consumer.end_offsets(tps))
        deadline = time.monotonic() + FINAL_READ_TIMEOUT_S
        while any(consumer.position(tp) < ends[tp] for tp in tps) and time.monotonic() < deadline:
            try:
                polled = consumer.poll(timeout_ms=500)
            except RaylogError as exc:
                logger.info("final read: %s", exc)
                continue
            for tp, rs in polled.items():
                records[tp.partition].extend((r.offset, r.value.decode()) for r in rs)
        reached.update({tp.partition: consumer.position(tp) for tp in tps})
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
