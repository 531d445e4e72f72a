"""A tiered replica's writer and reader of its partition's events in ``__remote_log_metadata``
(Kafka's TopicBasedRemoteLogMetadataManager, its producer and consumer, KIP-405).

The events of one partition live in one partition of the internal topic (keyed
``<topic>-<partition>``, placed as a group id is: see
:meth:`~raylog.actors.controller_lookup.ClusterLookup.find_remote_log_metadata_partition`,
which creates the topic on first use). :meth:`RemoteLogMetadataTopic.publish` writes one event
with acks=all to that partition's leader and returns once it is acknowledged;
:meth:`~RemoteLogMetadataTopic.poll` reads on from where the last read ended, up to the high
watermark, and returns this partition's events in the topic's order (an event acknowledged to
its writer is read back by every reader). Reading starts at the topic's first offset: every
replica, and a new leader, rebuilds its view from the whole history.

Errors: every failure (no leader yet, a leader moving, a call that timed out, a refused write)
raises a :class:`~raylog.errors.RaylogError` that the caller treats as retriable; the next call
asks the controller where the leader is. A publish that failed may have landed all the same: the
tasks publish updates again as they were, and a duplicate is refused or changes nothing. A
record that is not an event (written by something else) is skipped with an error logged.

Concurrency: one thread (the replica's tiering pump) calls it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import ray

from raylog.actors.replica_parts import PEER_CALL_TIMEOUT_S
from raylog.common import record_batch
from raylog.errors import CorruptRecordError, LeaderNotAvailableError, RequestTimedOutError
from raylog.protocol import FetchRequest, ProduceRequest, error_of
from raylog.storage import remote_log_metadata
from raylog.storage.remote_log_metadata import RemoteLogEvent

logger = logging.getLogger(__name__)

#: The most bytes one poll reads (events are a few hundred bytes each).
POLL_MAX_BYTES = 1 << 20


class RemoteLogMetadataTopic:
    """See the module docstring.

    Args:
        topic, partition: the tiered partition whose events are read and written.
        controller: the controller's actor handle (asked where the leader is).
        session: the broker's session token, fresh at each call.
    """

    def __init__(self, topic: str, partition: int, controller: Callable[[], Any], session: Callable[[], str | None]):
        self.topic, self.partition = topic, partition
        self._key = remote_log_metadata.record_key(topic, partition)
        self._controller = controller
        self._session = session
        self._leader = None
        #: The next offset to read in the metadata partition.
        self.position = 0
        #: Whether a poll read up to the partition's high watermark (every event written
        #: before it began has been returned).
        self.caught_up = False

    def publish(self, event: RemoteLogEvent) -> None:
        """Write ``event``, acks=all; returns once acknowledged.

        Raises:
            RaylogError: not written, or not known to be (retriable).
        """
        key, value = remote_log_metadata.encode(event)
        request = ProduceRequest(
            record_batch.build([value], keys=[key]),
            acks=-1,
            timeout_ms=int(PEER_CALL_TIMEOUT_S * 1000),
            session=self._session(),
        )
        self._answer(lambda leader: leader.produce.remote(request), 2 * PEER_CALL_TIMEOUT_S)

    def poll(self, max_wait_ms: int = 0) -> list[RemoteLogEvent]:
        """This partition's events written since the last poll (waiting up to ``max_wait_ms``
        for one), in the topic's order.

        Raises:
            RaylogError: nothing read (retriable); the position stays.
        """
        request = FetchRequest(
            self.position, max_bytes=POLL_MAX_BYTES, max_wait_ms=max_wait_ms, session=self._session()
        )
        answer = self._answer(lambda leader: leader.fetch.remote(request), max_wait_ms / 1000 + PEER_CALL_TIMEOUT_S)
        headers = list(record_batch.iter_headers(answer.records))
        end = headers[-1][1].next_offset if headers else self.position
        self.caught_up = end >= answer.high_watermark
        if not headers:
            return []
        table = record_batch.decode_table(answer.records, min_offset=self.position)
        self.position = end
        events = []
        for offset, key, value in zip(
            table.column("offset").to_pylist(),
            table.column("key").to_pylist(),
            table.column("value").to_pylist(),
            strict=True,
        ):
            if key != self._key:
                continue
            try:
                events.append(remote_log_metadata.decode(key, value))
            except CorruptRecordError as exc:
                logger.error(
                    "%s-%d: record %d of __remote_log_metadata is not an event, skipped: %s",
                    self.topic,
                    self.partition,
                    offset,
                    exc,
                )
        return events

    def _answer(self, call: Callable[[Any], Any], timeout_s: float) -> Any:
        """The leader's answer to ``call(leader)``, its error raised (the leader forgotten, to
        be asked for again)."""
        leader = self._leader_actor()
        try:
            answer = ray.get(call(leader), timeout=timeout_s)
        except ray.exceptions.GetTimeoutError:
            self._leader = None
            raise RequestTimedOutError("__remote_log_metadata's leader did not answer in time") from None
        except ray.exceptions.RayError as exc:
            self._leader = None
            raise LeaderNotAvailableError(f"__remote_log_metadata's leader is unreachable: {exc}") from None
        error = error_of(answer)
        if error is not None:
            self._leader = None
            raise error
        return answer

    def _leader_actor(self) -> Any:
        if self._leader is None:
            try:
                call = self._controller().find_remote_log_metadata_partition.remote(
                    self.topic, self.partition, session=self._session()
                )
                _, leader = ray.get(call, timeout=PEER_CALL_TIMEOUT_S)
            except (ValueError, ray.exceptions.RayError) as exc:
                raise LeaderNotAvailableError(
                    f"the controller did not say where __remote_log_metadata is: {exc}"
                ) from None
            if leader is None:
                raise LeaderNotAvailableError("__remote_log_metadata has no live leader yet")
            self._leader = leader
        return self._leader
