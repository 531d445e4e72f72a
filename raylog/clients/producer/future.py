"""The futures a Producer returns (kafka-python's ``kafka/producer/future.py``): one per
record sent with ``send``, and one per ``send_arrow`` call.

A record's future is light: it holds its batch and its index in it, and all records of a
batch complete at once, when the sender finishes the batch (:meth:`ProducerBatch.finish`).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from raylog.errors import KafkaTimeoutError
from raylog.types import RecordMetadata

if TYPE_CHECKING:
    from raylog.clients.producer.producer_batch import ProducerBatch

#: Guards completion against a concurrent add_done_callback (callbacks run exactly once).
CALLBACK_LOCK = threading.Lock()

logger = logging.getLogger("raylog.clients.producer")


class BatchMetadata(NamedTuple):
    """Where one batch of a ``send_arrow`` call landed."""

    topic: str
    partition: int
    base_offset: int
    record_count: int


class FutureRecordMetadata:
    """The future of one sent record, with the :class:`concurrent.futures.Future` interface
    and kafka-python's (``get``, ``succeeded``, ``failed``, ``is_done``, ``add_callback``,
    ``add_errback``, ``add_both``).

    Light: it holds its batch and its index in it; all records of a batch complete at once.
    Callbacks run in the producer's sender thread (at once, in the caller's, if the record
    is done already); one that raises is logged, and the others still run.
    """

    __slots__ = ("_batch", "_index", "_timestamp_ms", "_sizes")

    def __init__(
        self,
        batch: ProducerBatch,
        index: int,
        timestamp_ms: int | None,
        sizes: tuple[int, int, int] = (-1, -1, -1),
    ):
        self._batch, self._index, self._timestamp_ms, self._sizes = batch, index, timestamp_ms, sizes

    def done(self) -> bool:
        return self._batch.event.is_set()

    @property
    def is_done(self) -> bool:
        """Whether the record was acknowledged or failed (kafka-python's attribute)."""
        return self._batch.event.is_set()

    def succeeded(self) -> bool:
        """Done and acknowledged."""
        return self.done() and self._batch.error is None

    def failed(self) -> bool:
        """Done and failed."""
        return self.done() and self._batch.error is not None

    def cancelled(self) -> bool:
        return False

    def running(self) -> bool:
        return not self.done()

    def cancel(self) -> bool:
        return False

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """Wait for the broker's acknowledgement.

        Raises:
            KafkaTimeoutError: not acknowledged within ``timeout`` seconds.
            RaylogError: the record failed (the typed error the broker or client reported).
        """
        batch = self._batch
        if not batch.event.wait(timeout):
            raise KafkaTimeoutError(f"record not acknowledged within {timeout} s")
        if batch.error is not None:
            raise batch.error
        offset = batch.base_offset + self._index if batch.base_offset >= 0 else -1
        if batch.log_append_time_ms >= 0:
            timestamp = batch.log_append_time_ms
        else:
            timestamp = batch.created_ms if self._timestamp_ms is None else self._timestamp_ms
        return RecordMetadata(batch.tp.topic, batch.tp.partition, offset, timestamp, *self._sizes)

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """kafka-python's name of :meth:`result`: wait up to ``timeout`` seconds (None:
        without limit) for the :class:`RecordMetadata`.

        Raises:
            KafkaTimeoutError: not acknowledged within ``timeout`` seconds.
            RaylogError: the record failed.
        """
        return self.result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if not self._batch.event.wait(timeout):
            raise KafkaTimeoutError(f"record not acknowledged within {timeout} s")
        return self._batch.error

    def add_done_callback(self, fn: Callable[[FutureRecordMetadata], Any]) -> None:
        """Call ``fn(future)`` once the record is done (concurrent.futures' form)."""
        batch = self._batch
        if not batch.event.is_set():
            with CALLBACK_LOCK:
                if not batch.event.is_set():
                    batch.callbacks.append((self, fn))
                    return
        run_callback(fn, self)

    def add_callback(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> FutureRecordMetadata:
        """Call ``fn(*args, record_metadata, **kwargs)`` if the record is acknowledged
        (kafka-python's form); returns this future, to chain :meth:`add_errback`."""
        self.add_done_callback(lambda f: f.succeeded() and fn(*args, f.result(), **kwargs))
        return self

    def add_errback(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> FutureRecordMetadata:
        """Call ``fn(*args, error, **kwargs)`` if the record fails (kafka-python's form);
        returns this future."""
        self.add_done_callback(lambda f: f.failed() and fn(*args, f._batch.error, **kwargs))
        return self

    def add_both(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> FutureRecordMetadata:
        """Call ``fn`` with the RecordMetadata or the error, whichever comes (kafka-python's form)."""
        return self.add_callback(fn, *args, **kwargs).add_errback(fn, *args, **kwargs)


def run_callback(fn: Callable[[FutureRecordMetadata], Any], future: FutureRecordMetadata) -> None:
    """Run a user's callback: one that raises is logged, never fails the sender (as
    concurrent.futures and kafka-python do)."""
    try:
        fn(future)
    except Exception:
        logger.exception("a callback of a sent record raised")


class ArrowPart(NamedTuple):
    """A send_arrow call's rows in a batch: ``count`` of them from the batch's ``start``-th."""

    batch: ProducerBatch
    start: int
    count: int


def gather(parts: list[ArrowPart]) -> concurrent.futures.Future:
    """One future for all ``parts`` (a send_arrow call's): where each landed, or the first error."""
    result: concurrent.futures.Future = concurrent.futures.Future()
    batches = [part.batch for part in parts]
    remaining = [len(batches)]
    lock = threading.Lock()

    def one_done(_: Any) -> None:
        with lock:
            remaining[0] -= 1
            if remaining[0]:
                return
        errors = [b.error for b in batches if b.error is not None]
        if errors:
            result.set_exception(errors[0])
        else:
            result.set_result(
                [BatchMetadata(b.tp.topic, b.tp.partition, b.base_offset + start, count) for b, start, count in parts]
            )

    if not batches:
        result.set_result([])
    for batch in batches:
        FutureRecordMetadata(batch, 0, None).add_done_callback(one_done)
    return result
