"""The soak's Kafka wire clients: unchanged confluent-kafka (librdkafka) clients talking to
the brokers' Kafka listeners beside raylog's own clients, each a thread recording what it did
in a :class:`~raylog.chaos.history.Recorder` as :mod:`raylog.chaos.workload`'s clients do.

- :class:`KafkaProducerWorker`: in its default idempotent acks=all settings, sending unique
  values to random partitions: ok with the offset its delivery report gives, unknown when
  the report is an error or never came. After a failed delivery the sends librdkafka still
  holds are not idempotent (:class:`KafkaDeliveries` says why).
- :class:`KafkaConsumerWorker`: a member of a consumer group (librdkafka's defaults:
  read_committed, eager range/round-robin assignment) committing what each batch returned,
  synchronously; its assignments and revocations come through librdkafka's rebalance
  callbacks, inside the consume call, as a raylog member's do.
- :class:`KafkaTransactionalWorker`: transactions of a few unique values through a
  transactional producer, some aborted on purpose, recorded as the raylog transactional
  worker records them (committed only if ``commit_transaction`` returned, aborted only if
  ``abort_transaction`` returned, unknown otherwise; after an unknown end a new producer with
  the same ``transactional.id`` settles it with ``init_transactions``).

confluent-kafka is a test and soak dependency (the ``dev`` extra): imported when a worker is made.
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
    Poll,
    Recorder,
    Revoke,
    Send,
)
from raylog.chaos.workload import (
    CLOSE_TIMEOUT_S,
    ISOLATION_LEVEL,
    POLL_TIMEOUT_MS,
    PRODUCER_CLOSE_TIMEOUT_S,
    TRANSACTION_TIMEOUT_MS,
    TXN_ABORT_PROBABILITY,
    TXN_CALL_TIMEOUT_S,
    TXN_RECORDS_MAX,
    TransactionalLoop,
    client_thread,
    record_send,
)
from raylog.errors import RaylogError

logger = logging.getLogger(__name__)

#: librdkafka's default isolation level is read_committed, the workload's too.
READ_COMMITTED = ISOLATION_LEVEL == "read_committed"

#: Records a Kafka consumer takes per consume call.
CONSUME_BATCH = 100
#: Commit errors by which the group coordinator refused a commit (certainly not committed).
REFUSED_COMMIT_ERRORS = frozenset(
    ("REBALANCE_IN_PROGRESS", "ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID", "FENCED_INSTANCE_ID")
)

#: Delivery errors of messages a stopping worker purged from librdkafka (never sent again).
PURGED_ERRORS = frozenset(("_PURGE_QUEUE", "_PURGE_INFLIGHT"))


class KafkaProducerWorker:
    """One thread sending through a confluent-kafka Producer (librdkafka, idempotent, acks=all:
    its defaults) at about ``rate_per_s`` records per second to the cluster's Kafka listeners
    (``bootstrap``). Each send is recorded from its delivery report: ok at the reported
    offset, else unknown (a failed delivery may still have been written); a send ``produce``
    refuses at once (a full local queue) is a fail; any report still missing when it stops
    is unknown."""

    def __init__(
        self,
        name: str,
        bootstrap: str,
        topic: str,
        partitions: int,
        recorder: Recorder,
        rng,
        *,
        rate_per_s: float = 60.0,
    ):
        from confluent_kafka import Producer as KafkaProducer  # a test and soak dependency only

        self.name = name
        self.topic = topic
        self.partitions = partitions
        self.recorder = recorder
        self._deliveries = KafkaDeliveries(recorder)
        # One logger per producer, read by LibrdkafkaLog (debug lines stop there).
        self._log = logging.getLogger(f"{__name__}.{name}")
        self._log.setLevel(logging.DEBUG)
        self._log.propagate = False
        self._log.handlers = [LibrdkafkaLog(self._deliveries)]
        self.producer = KafkaProducer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "linger.ms": 2,
                "message.timeout.ms": 20_000,
                "partitioner": "murmur2_random",
                "debug": "eos",  # its epoch bumps, for the bookkeeping of idempotence
            },
            logger=self._log,  # librdkafka's own log lines through logging, not stderr
        )
        self._rng = random.Random(rng.random())
        self._interval_s = 1.0 / rate_per_s
        self._stop = threading.Event()
        self.crashes: list[str] = []  # a fatal error (librdkafka raises it from poll) ends the thread
        self._thread = client_thread(name, self.crashes, self._run)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        from confluent_kafka import KafkaException

        sequence = 0
        while not self._stop.is_set():
            value = f"{self.name}-{sequence}"
            sequence += 1
            partition = self._rng.randrange(self.partitions)
            invocation = Send(self.name, partition, value, UNKNOWN, start=self.recorder.now())
            self._deliveries.sent(invocation)
            try:
                self.producer.produce(self.topic, value.encode(), partition=partition, on_delivery=self._delivered)
            except (KafkaException, BufferError) as exc:
                self._deliveries.refused(value, exc)
            self.producer.poll(0)  # delivery reports
            self._stop.wait(self._interval_s)

    def _delivered(self, error: Any, message: Any) -> None:
        self._deliveries.delivered(message.value().decode(), error, message.offset())

    def stop(self) -> None:
        """Stop sending, flush what is in flight for a while, then purge what librdkafka still
        holds, so that nothing is sent once the history ends (left alone, it would go on
        retrying, bump its epoch and write held messages again with nobody reading its log:
        seed 213), serve the purged reports and the log lines before them, and record any
        send still unreported as unknown."""
        self._stop.set()
        self._thread.join(CLOSE_TIMEOUT_S)
        self.producer.flush(PRODUCER_CLOSE_TIMEOUT_S)
        self.producer.purge(in_queue=True, in_flight=True)
        self.producer.flush(PRODUCER_CLOSE_TIMEOUT_S)
        self._deliveries.settle()


class KafkaDeliveries:
    """The sends of one :class:`KafkaProducerWorker` awaiting their delivery reports, and
    each report recorded: ok at the reported offset, else unknown (a failed delivery may
    still have been written). Thread-safe: librdkafka's reports come on the thread that
    polls, :meth:`settle` on the one that stops the worker.

    A failed delivery takes idempotence from every send librdkafka still holds: the failed
    message leaves a gap in the producer's sequence, which librdkafka closes by bumping its
    producer epoch and numbering every message it holds afresh from sequence 0 (its manual,
    "Message timeout considerations"; ``rd_kafka_toppar_producer_serve`` on a
    message timeout, ``rd_kafka_handle_Produce_error`` on any other permanent error), among
    them messages a broker may already have written (their batch answered with a possibly
    persisted error, such as NOT_ENOUGH_REPLICAS_AFTER_APPEND or a timeout). Those go out as
    new batches of the new epoch, which no broker can tell from new messages, Kafka's no more
    than raylog's (librdkafka issue 4953), so they are recorded as not idempotent: a
    duplicate of theirs is reported, not a broken promise. Every send still unreported when
    a failed report comes is taken as held (a few made since the bump, never in danger, are
    counted too). librdkafka bumps its epoch the same way when a Produce request times out in
    flight, before any report fails (the failed message itself may then have been written
    twice): :class:`LibrdkafkaLog` reads that bump from librdkafka's log and calls
    :meth:`epoch_bumped`. A failed send held by no bump was never sent again and keeps the
    promise."""

    def __init__(self, recorder: Recorder):
        self.recorder = recorder
        self._lock = threading.Lock()
        self._pending: dict[str, Send] = {}  # value -> the send as invoked

    def epoch_bumped(self) -> None:
        """librdkafka bumped its producer epoch (see :class:`LibrdkafkaLog`): it numbers every
        message it holds afresh, those a broker may have written included."""
        with self._lock:
            self._held_not_idempotent()

    def _held_not_idempotent(self) -> None:
        self._pending = {v: dataclasses.replace(s, idempotent=False) for v, s in self._pending.items()}

    def sent(self, invocation: Send) -> None:
        """``invocation`` is about to be handed to the producer."""
        with self._lock:
            self._pending[invocation.value] = invocation

    def refused(self, value: str, error: Exception) -> None:
        """``produce`` refused ``value`` at once (a full local queue): a fail."""
        with self._lock:
            invocation = self._pending.pop(value, None)
        if invocation is not None:
            record_send(self.recorder, invocation, FAIL, None, error)

    def delivered(self, value: str, error: Any, offset: int | None) -> None:
        """The delivery report of ``value``: ``error`` a ``KafkaError`` or None, ``offset``
        where it was written when ``error`` is None. A success without an offset (librdkafka
        infers a message written, its answer lost, from a later batch of its sequence) is
        recorded unknown: written, but where is not said. A message the worker purged as it
        stopped is unknown too, and renumbers nothing: librdkafka sends it no more."""
        with self._lock:
            invocation = self._pending.pop(value, None)
            if error is not None and error.name() not in PURGED_ERRORS:
                self._held_not_idempotent()
        if invocation is None:
            return
        if error is None and offset is not None:
            record_send(self.recorder, invocation, OK, offset, None)
        elif error is None:
            record_send(self.recorder, invocation, UNKNOWN, None, None)
        else:
            record_send(self.recorder, invocation, UNKNOWN, None, RaylogError(str(error)))

    def settle(self) -> None:
        """Record every send still without a report as unknown."""
        with self._lock:
            pending = list(self._pending.values())
            self._pending.clear()
        for invocation in pending:
            record_send(self.recorder, invocation, UNKNOWN, None, None)


class LibrdkafkaLog(logging.Handler):
    """The log of one confluent-kafka producer (its ``eos`` debug context on): a change of
    its idempotence state to DrainBump, which it makes before bumping its epoch, tells
    ``deliveries``; every line but debug ones goes on to this module's logger."""

    BUMP = "-> DrainBump"

    def __init__(self, deliveries: KafkaDeliveries):
        super().__init__(logging.DEBUG)
        self.deliveries = deliveries

    def emit(self, record: logging.LogRecord) -> None:
        if self.BUMP in record.getMessage():
            self.deliveries.epoch_bumped()
        if record.levelno > logging.DEBUG:
            logger.handle(record)


class KafkaConsumerWorker:
    """A confluent-kafka consumer in ``group`` reading ``topic`` until stopped and committing,
    synchronously, the offsets after each batch it consumed (auto-commit off, so that every
    commit is recorded; otherwise librdkafka's defaults, read_committed among them)."""

    def __init__(self, name: str, bootstrap: str, topic: str, partitions: int, recorder: Recorder, group: str):
        from confluent_kafka import Consumer as KafkaConsumer

        self.name = name
        self.topic = topic
        self.recorder = recorder
        self.group = group
        self.errors: list[str] = []
        self.consumer = KafkaConsumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            },
            logger=logger,
        )
        self.consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._revoked)
        self._stop = threading.Event()
        self.crashes: list[str] = []
        self._thread = client_thread(name, self.crashes, self._run)

    def start(self) -> None:
        self._thread.start()

    def _assigned(self, _consumer: Any, tps: list) -> None:
        now = self.recorder.now()
        self.recorder.add(Assign(self.name, _partitions(tps), self.group, now, now))

    def _revoked(self, _consumer: Any, tps: list) -> None:
        now = self.recorder.now()
        self.recorder.add(Revoke(self.name, _partitions(tps), self.group, now, now))

    def _run(self) -> None:
        from confluent_kafka import KafkaException

        while not self._stop.is_set():
            start = self.recorder.now()
            try:
                messages = self.consumer.consume(CONSUME_BATCH, POLL_TIMEOUT_MS / 1000)
            except KafkaException as exc:
                if exc.args[0].fatal():
                    raise  # the consumer is of no more use: the run fails on it
                self._error("consume", exc)
                continue
            records = []
            for message in messages:
                if message.error() is None:
                    records.append((message.partition(), message.offset(), message.value().decode()))
                elif message.error().fatal():
                    raise KafkaException(message.error())
                else:
                    self._error("consume", message.error())
            if not records:
                continue
            self.recorder.add(
                Poll(self.name, tuple(records), self.group, READ_COMMITTED, start=start, end=self.recorder.now())
            )
            nexts: dict[int, int] = {}
            for partition, offset, _ in records:
                nexts[partition] = max(nexts.get(partition, 0), offset + 1)
            self._commit(nexts)

    def _commit(self, nexts: dict[int, int]) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        start = self.recorder.now()
        try:
            answered = self.consumer.commit(
                offsets=[TopicPartition(self.topic, p, o) for p, o in sorted(nexts.items())], asynchronous=False
            )
            failed = [tp.error for tp in answered or () if tp.error is not None]
            outcome = OK if not failed else _commit_outcome(failed[0])
        except KafkaException as exc:
            outcome = _commit_outcome(exc.args[0])
            if outcome == UNKNOWN:
                self._error("commit", exc)
        offsets = tuple(sorted(nexts.items()))
        self.recorder.add(Commit(self.name, self.group, offsets, outcome, start, self.recorder.now()))

    def _error(self, what: str, error: Any) -> None:
        self.errors.append(f"{self.name} {what}: {error}")
        self._stop.wait(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(CLOSE_TIMEOUT_S)
        self.consumer.close()  # leaves the group


def _commit_outcome(error: Any) -> str:
    """fail when the coordinator refused the commit, else unknown (it may have been written)."""
    return FAIL if error.name() in REFUSED_COMMIT_ERRORS else UNKNOWN


def _partitions(tps: list) -> tuple[int, ...]:
    return tuple(sorted(tp.partition for tp in tps))


class KafkaTransactionalWorker(TransactionalLoop):
    """Transactions of up to :data:`~raylog.chaos.workload.TXN_RECORDS_MAX` unique values, each
    to a random partition, through a confluent-kafka producer with ``transactional_id`` (else
    librdkafka's defaults, but the transaction timeout of the raylog worker); a share is
    aborted on purpose. Each send is recorded from its delivery report once its transaction
    ended (see :class:`~raylog.chaos.workload.TransactionalLoop` for the rest)."""

    def __init__(
        self,
        name: str,
        bootstrap: str,
        topic: str,
        partitions: int,
        recorder: Recorder,
        rng: random.Random,
        transactional_id: str,
        *,
        rate_per_s: float = 60.0,
    ):
        self.bootstrap = bootstrap
        self._reports: dict[str, tuple[Any, int | None]] = {}  # value -> (error, offset)
        super().__init__(name, topic, partitions, recorder, rng, transactional_id, rate_per_s)

    def _initialised(self) -> Any:
        from confluent_kafka import KafkaException
        from confluent_kafka import Producer as KafkaProducer

        producer = KafkaProducer(
            {
                "bootstrap.servers": self.bootstrap,
                "transactional.id": self.transactional_id,
                "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
            },
            logger=logger,
        )
        try:
            producer.init_transactions(TXN_CALL_TIMEOUT_S)
        except KafkaException as exc:
            self._error("init_transactions", exc)
            return None
        return producer

    def _close(self, producer: Any) -> None:
        producer.flush(PRODUCER_CLOSE_TIMEOUT_S)

    def _transaction(self, rng: random.Random) -> int:
        """One transaction, recorded; how many records it sent."""
        from confluent_kafka import KafkaException

        txn = self._next_txn()
        start = self.recorder.now()
        try:
            self.producer.begin_transaction()
        except KafkaException as exc:
            self._error("begin_transaction", exc)
            self._abandon()
            return 0
        sends: list[Send] = []
        refused = False
        for _ in range(rng.randint(1, TXN_RECORDS_MAX)):
            invocation = self._next_value(txn, rng)
            try:
                self.producer.produce(
                    self.topic, invocation.value.encode(), partition=invocation.partition, on_delivery=self._delivered
                )
            except (KafkaException, BufferError) as exc:
                record_send(self.recorder, invocation, FAIL, None, RaylogError(str(exc)))
                refused = True
                break
            sends.append(invocation)
        outcome = self._end(abort=refused or rng.random() < TXN_ABORT_PROBABILITY)
        end = self.recorder.now()
        if self.producer is not None:
            self.producer.poll(0)  # the delivery reports the end left to serve
        for invocation in sends:
            error, offset = self._reports.pop(invocation.value, (None, None))
            if error is None and offset is not None and offset >= 0:
                record_send(self.recorder, invocation, OK, offset, None)
            else:
                record_send(self.recorder, invocation, UNKNOWN, None, RaylogError(str(error)) if error else None)
        self._ended(txn, outcome, start, end)
        if outcome == UNKNOWN:
            self._abandon()
        return len(sends)

    def _delivered(self, error: Any, message: Any) -> None:
        self._reports[message.value().decode()] = (error, None if error is not None else message.offset())

    def _end(self, abort: bool) -> str:
        """Commit or abort the open transaction; its outcome (see the module docstring). A
        commit that fails retriably is asked again until its deadline."""
        from confluent_kafka import KafkaException

        try:
            if not abort:
                deadline = time.monotonic() + TXN_CALL_TIMEOUT_S
                while True:
                    try:
                        self.producer.commit_transaction(TXN_CALL_TIMEOUT_S)
                        return COMMITTED
                    except KafkaException as exc:
                        self._error("commit_transaction", exc)
                        error = exc.args[0]
                        if error.txn_requires_abort():
                            break
                        if not error.retriable() or time.monotonic() >= deadline:
                            return UNKNOWN
            self.producer.abort_transaction(TXN_CALL_TIMEOUT_S)
            return ABORTED
        except KafkaException as exc:  # fatal, timed out, or failed after the request left
            self._error("end of transaction", exc)
            return UNKNOWN
