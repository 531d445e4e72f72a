"""Exactly-once consume-transform-produce: Kafka's transactional loop (KIP-98, KIP-447).

A transactional producer sends what a poll's records turned into *and* the consumer's next
offsets in one transaction. Read_committed readers of the output and the group's committed
offsets therefore move together, both or neither: records are never lost and never counted
twice, whatever fails in between. On a failure the transaction is aborted (read_committed
readers never see its records, its offsets never count) and the consumer goes back to the
group's committed offsets, so the same records go into the next transaction. A process that
dies mid-transaction is covered by its successor: a producer with the same transactional id
calling ``init_transactions`` aborts the open transaction and fences the old producer.

What is exactly once is the output topics' read_committed view and the group's offsets;
side effects of ``transform`` (files, calls to other systems) are repeated after a failure.

:func:`transactional_copy` runs the loop for plain Python code; :class:`raylog.data.TopicStream`
and ``raylog_spark.MicroBatchStream`` run it per micro-batch, with :func:`abort_unless_fenced`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from raylog.clients.consumer import Consumer
from raylog.clients.producer import Producer
from raylog.errors import ProducerFencedError
from raylog.types import Record, TopicPartition

#: What ``transform`` returns: ``(topic, key, value)`` per output record (key may be None).
OutputRecord = tuple[str, Any, Any]


def transactional_copy(
    consumer: Consumer,
    producer: Producer,
    transform: Callable[[list[Record]], Iterable[OutputRecord]],
    *,
    poll_timeout_ms: int = 1_000,
    max_records: int | None = None,
    idle_timeout_s: float | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Poll, transform, produce and commit, one transaction per poll that returned records.

    Each round polls ``consumer``, begins a transaction, sends every ``(topic, key, value)``
    that ``transform(records)`` returns, adds the consumer's positions of the polled
    partitions for its group (``send_offsets_to_transaction``) and commits. When anything of
    that raises, the transaction is aborted, each polled partition still assigned is sought
    back to the group's committed offset, and the error is raised: call again to go on (the
    same records come back), or let a restarted process take over.

    Args:
        consumer: a consumer with a ``group_id``, subscribed (a group member, with
            ``enable_auto_commit=False``: commits outside the transactions would break
            them) or assigned; read_committed (its default) so that aborted input is skipped.
        producer: a producer with a ``transactional_id``, ``init_transactions()`` called.
        transform: the records of one poll to the records to produce, as
            ``(topic, key, value)`` tuples (serialized by the producer's serializers, if any).
        poll_timeout_ms, max_records: of each :meth:`Consumer.poll`.
        idle_timeout_s: return after this long without records (None: never).
        stop: return once set (checked between rounds).

    Returns:
        How many records were consumed and committed.

    Raises:
        ValueError: a group member with auto-commit on.
        IllegalStateError: a consumer without a group, or a producer not transactional or not
            initialised.
        ProducerFencedError: a newer producer with the same transactional id took over.
        Exception: whatever ``transform`` or a send raised (after the abort and the rewind).

    Example:
        >>> consumer = Consumer(cluster, "clicks", group_id="upper", enable_auto_commit=False)  # doctest: +SKIP
        >>> producer = Producer(cluster, transactional_id="upper-0")                          # doctest: +SKIP
        >>> producer.init_transactions()                                                       # doctest: +SKIP
        >>> upper = lambda records: [("clicks-upper", r.key, r.value.upper()) for r in records]
        >>> transactional_copy(consumer, producer, upper, idle_timeout_s=10)                   # doctest: +SKIP
    """
    if consumer.subscription() and consumer._config["enable_auto_commit"]:
        raise ValueError("a consumer of an exactly-once loop must not auto-commit: pass enable_auto_commit=False")
    consumer.group_metadata()  # raises now for a consumer without a group, not after a poll
    copied = 0
    idle_since = time.monotonic()
    while stop is None or not stop.is_set():
        polled = consumer.poll(timeout_ms=poll_timeout_ms, max_records=max_records)
        if not polled:
            if idle_timeout_s is not None and time.monotonic() - idle_since >= idle_timeout_s:
                break
            continue
        producer.begin_transaction()
        try:
            for topic, key, value in transform([record for records in polled.values() for record in records]):
                producer.send(topic, value, key=key)
            # A member's generation may change in any poll: the offsets carry the current one.
            offsets = {tp: consumer.position(tp) for tp in polled}
            producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
            producer.commit_transaction()
        except BaseException:
            abort_unless_fenced(producer)
            _rewind(consumer, {tp: records[0].offset for tp, records in polled.items()})
            raise
        copied += sum(len(records) for records in polled.values())
        idle_since = time.monotonic()
    return copied


def abort_unless_fenced(producer: Producer) -> None:
    """Abort ``producer``'s open transaction; nothing to do when a newer instance fenced it
    (that instance's ``init_transactions`` aborted it).

    Raises:
        KafkaTimeoutError, RaylogError: the abort did not go through (e.g. a commit whose
            outcome is unknown): restart, and ``init_transactions`` settles it.
    """
    try:
        producer.abort_transaction()
    except ProducerFencedError:
        pass


def _rewind(consumer: Consumer, first_offsets: dict[TopicPartition, int]) -> None:
    """Seek each polled partition still assigned back to the group's committed offset (the
    truth after an abort, whatever the failed commit did), or, where the group has none, to
    the first record polled."""
    committed = consumer.committed(list(first_offsets))
    for tp in first_offsets.keys() & consumer.assignment():
        consumer.seek(tp, committed[tp].offset if committed[tp] is not None else first_offsets[tp])
