"""A connection's appends to each partition: in the order its Produce requests came, one call
to the leader at a time, and what queued behind a call sent together in the next.

Kafka's broker takes a connection's requests one at a time, and so keeps each partition's
batches in the order the client sent them. The listener lets a connection's consecutive
Produce requests run beside each other (see :mod:`raylog.actors.kafka.listener`), so that a
client that pipelines (librdkafka sends without waiting, up to ``max.in.flight``) is not held
to one acks=all round trip per request; the order is kept here instead, per partition
(Kafka promises no order across partitions). Each request reserves its places in its
partitions' queues before anything else (:meth:`PartitionAppends.reserve`), and the listener
starts a connection's next Produce only once the one before has (:func:`placed`), so the
places follow the order of the requests, whichever batch is converted first; each place is
filled once its batch is converted. While a call to the leader is under way, the
batches that arrive for the partition wait; then those without a producer id (not idempotent,
not transactional) that share acks, timeout and client id go in one call of several batches,
which the leader appends in order and atomically (all or none, see
:meth:`raylog.storage.log.Log.append_as_leader`), and each request is answered with its own
batch's offsets. An idempotent producer's batches go together when they are a chain (the
same producer and epoch, no transaction, consecutive sequences: librdkafka keeps up to five
in flight per partition), which the leader admits or refuses whole by the first one's
sequence; a transaction's batches go alone. The connection's record of unacknowledged
sequences (:class:`Sequences`) is kept per call, by its first batch.

Where the shared call is refused for what one batch may hold (a corrupt or too large batch,
a record the log does not take, a chain whose first batch is a duplicate or out of order),
nothing was appended, and each batch is sent again alone, so that each request gets the
answer it would have had at Kafka's broker (a duplicate its original offsets). Any other refusal (no
leader here, too few in-sync replicas, a timeout) is every batch's.

Plain asyncio on the listener's loop, no Ray: the call to the leader is the caller's ``send``.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from raylog.common.record_batch import NO_PRODUCER_ID, NO_SEQUENCE
from raylog.coordination.producer_state import chained
from raylog.errors import CorruptRecordError, InvalidRecordError, OutOfOrderSequenceError, RecordTooLargeError
from raylog.protocol import ProduceResponse

#: Error codes of a shared call that one batch may have caused (or, for a chain of an idempotent
#: producer's batches, a first batch appended before): each batch is sent again alone.
BATCH_ERRORS = frozenset(
    {CorruptRecordError.code, InvalidRecordError.code, RecordTooLargeError.code, OutOfOrderSequenceError.code}
)
#: At most this many bytes of batches go in one shared call.
SHARED_CALL_MAX_BYTES = 8 << 20


@dataclasses.dataclass(frozen=True)
class Append:
    """One Produce request's batch for the partition, converted to raylog's format, and what
    its request asks (``header``: the batch's header, :func:`raylog.common.record_batch.read_header`)."""

    batch: Any
    header: Any
    acks: int
    timeout_ms: int
    client_id: str
    transactional_id: str | None

    def may_precede(self, other: Append) -> bool:
        """Whether ``other`` may follow this batch in one call to the leader: both ask the
        same (acks, timeout, client), and either neither has a producer id, or ``other`` is
        the next batch of this one's idempotent producer (same id and epoch, no transaction,
        its sequence right after this one's last)."""
        if (self.acks, self.timeout_ms, self.client_id, self.transactional_id) != (
            other.acks,
            other.timeout_ms,
            other.client_id,
            other.transactional_id,
        ):
            return False
        if self.header.producer_id == other.header.producer_id == NO_PRODUCER_ID:
            return True
        return self.transactional_id is None and chained(self.header, other.header)


#: The future a Produce request sets once its batches hold their places (:func:`placed`): the
#: listener starts the connection's next Produce then (see the module docstring).
ORDERED: contextvars.ContextVar[asyncio.Future | None] = contextvars.ContextVar("raylog_produce_ordered", default=None)


def placed() -> None:
    """The running Produce request reserved its places in its partitions' queues."""
    ordered = ORDERED.get()
    if ordered is not None and not ordered.done():
        ordered.set_result(None)


#: ``send(appends)``: one call to the partition's leader with the batches of ``appends`` in
#: order, its answer (a :class:`ProduceResponse`) or the error that kept it from one
#: (raised); more than one append only when they share a call.
Send = Callable[[list[Append]], Awaitable[ProduceResponse]]


class Slot:
    """One request's place in a partition's queue: its append once converted (None: nothing
    to send, its conversion failed), and then its answer."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.append: asyncio.Future = loop.create_future()
        self.answer: asyncio.Future = loop.create_future()

    def fill(self, append: Append | None) -> None:
        if not self.append.done():
            self.append.set_result(append)


class PartitionAppends:
    """One connection's queue of appends to one partition (see the module docstring)."""

    def __init__(self, send: Send):
        self._send = send
        self._waiting: list[Slot] = []
        self._draining: asyncio.Task | None = None

    @property
    def idle(self) -> bool:
        """Nothing waits and no call is under way."""
        return self._draining is None and not self._waiting

    def reserve(self) -> Slot:
        """A place after every one reserved before; :meth:`Slot.fill` it (always: the appends
        after it wait for it), then await its ``answer`` (what ``send`` answered or raised)."""
        slot = Slot(asyncio.get_running_loop())
        self._waiting.append(slot)
        if self._draining is None:
            self._draining = asyncio.ensure_future(self._drain())
        return slot

    async def _drain(self) -> None:
        try:
            while self._waiting:
                head = await self._waiting[0].append
                if head is None:
                    self._waiting.pop(0)
                    continue
                group = self._next_group(head)
                try:
                    answers = await self._answers([head] + [slot.append.result() for slot in group[1:]])
                except Exception as exc:  # noqa: BLE001 — each waiting request gets the error
                    answers = [exc] * len(group)
                for slot, answer in zip(group, answers, strict=True):
                    if slot.answer.done():
                        continue  # its request was cancelled (the listener stops)
                    if isinstance(answer, BaseException):
                        slot.answer.set_exception(answer)
                    else:
                        slot.answer.set_result(answer)
        finally:
            self._draining = None

    def _next_group(self, head: Append) -> list[Slot]:
        """The first waiting slot (holding ``head``) and the converted ones right after it
        that may follow it in its call."""
        size, taken, last = len(head.batch), 1, head
        for slot in self._waiting[1:]:
            append = slot.append.result() if slot.append.done() else None
            if append is None or not last.may_precede(append) or size + len(append.batch) > SHARED_CALL_MAX_BYTES:
                break
            size += len(append.batch)
            taken, last = taken + 1, append
        group, self._waiting = self._waiting[:taken], self._waiting[taken:]
        return group

    async def _answers(self, appends: list[Append]) -> list[ProduceResponse | BaseException]:
        """Each append's answer from one shared call, or from one call each where the shared
        one was refused for what a batch may hold."""
        response = await self._send(appends)
        if len(appends) == 1:
            return [response]
        if response.error_code in BATCH_ERRORS:
            answers: list[ProduceResponse | BaseException] = []
            for append in appends:
                try:
                    answers.append(await self._send([append]))
                except Exception as exc:  # noqa: BLE001 — this request's error
                    answers.append(exc)
            return answers
        if response.error_code:
            return [response] * len(appends)
        answers, offset = [], response.base_offset
        for append in appends:
            answers.append(dataclasses.replace(response, base_offset=offset))
            offset += append.header.record_count
        return answers


class Sequences:
    """The idempotent batches a connection sent that were not acknowledged: per partition and
    producer id, the epoch and base sequence of the oldest (the first unacknowledged sequence
    that raylog's own Producer tells the leader itself).

    A Kafka client sends a partition's batches in order on one connection, and Kafka's broker
    takes them one at a time: a batch after one that was not appended is refused as out of
    order. But a leader that knows nothing of the producer yet (its first batches) takes any
    sequence, and here a batch can fail on the way to the leader (a look-up or a call that timed
    out) while the next one arrives: appended, it makes the retry of the earlier one out of
    order, which Kafka clients take as fatal. So the leader is told the oldest unacknowledged
    sequence, and refuses what comes after it until it arrives. A batch acknowledged, or one of
    a newer epoch, replaces what was held; at most :data:`HELD_MAX` are held per connection
    (the oldest is forgotten first). The listener keeps one per connection.
    """

    HELD_MAX = 4096

    def __init__(self) -> None:
        self._held: dict[tuple[str, int, int], tuple[int, int]] = {}

    def first_unacked(self, topic: str, partition: int, batch: Any) -> int:
        """The base sequence of the oldest unacknowledged batch of ``batch``'s producer and
        epoch to the partition, or ``NO_SEQUENCE``."""
        held = self._held.get((topic, partition, batch.producer_id))
        return held[1] if held is not None and held[0] == batch.producer_epoch else NO_SEQUENCE

    def answered(self, topic: str, partition: int, batch: Any, acknowledged: bool) -> None:
        if batch.producer_id == NO_PRODUCER_ID or batch.base_sequence == NO_SEQUENCE:
            return
        key = (topic, partition, batch.producer_id)
        held = self._held.get(key)
        if acknowledged:
            if held is not None and held[0] <= batch.producer_epoch:
                del self._held[key]
        elif held is None or held[0] < batch.producer_epoch:
            self._held.pop(key, None)
            self._held[key] = (batch.producer_epoch, batch.base_sequence)
            if len(self._held) > self.HELD_MAX:
                del self._held[next(iter(self._held))]
