"""What the producer knows of the topics it sends to (Kafka's ``ProducerMetadata``): per
topic, its partitions and how much a batch for it may hold, read again from each new
metadata snapshot of the cluster handle."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from raylog.clients.cluster import RaylogCluster
from raylog.common import record_batch
from raylog.common.names import validate_topic_name
from raylog.config import LogConfig
from raylog.errors import RecordTooLargeError
from raylog.types import TopicPartition


class ProducerMetadata:
    """Partitions and batch capacity per topic, for batches of at most ``max_request_size``
    bytes compressed with ``codec``."""

    def __init__(self, cluster: RaylogCluster, max_request_size: int, codec: int):
        self._cluster = cluster
        self._max_request_size = max_request_size
        self._codec = codec
        #: topic -> (its partitions, the records_capacity of its batches, the metadata
        #: snapshot both were read from)
        self._routes: dict[str, tuple[list[TopicPartition], int, Any]] = {}

    def route(self, topic: str) -> tuple[list[TopicPartition], int]:
        """``topic``'s partitions in the cluster's latest metadata, and how much of
        record_size_bound a batch for it surely holds within ``max_request_size`` and its
        ``max.message.bytes`` (see :meth:`limit`). Read again from each new metadata
        snapshot, so that partitions added to a topic appear after any refresh; refreshed
        once if unknown.

        Raises:
            InvalidTopicError: not a legal topic name.
            UnknownTopicOrPartitionError: no such topic.
            TopicAuthorizationFailedError: the producer's principal may not describe it.
        """
        metadata = self._cluster.metadata()
        route = self._routes.get(topic)
        if route is None or route[2] is not metadata:  # (on a send: only for a new snapshot)
            if route is None:
                validate_topic_name(topic)
            if topic not in metadata.topics:
                metadata = self._cluster.metadata(refresh=True)
                if topic not in metadata.topics:
                    raise self._cluster.missing_topics_error([topic])
            partitions = [TopicPartition(topic, p) for p in range(metadata.num_partitions(topic))]
            capacity = record_batch.records_capacity(self.limit(topic, metadata), self._codec)
            route = self._routes[topic] = (partitions, capacity, metadata)
        return route[0], route[1]

    def num_partitions(self, topic: str) -> int:
        """Of the latest metadata (see :meth:`route`)."""
        return len(self.route(topic)[0])

    def routed_partitions(self, topic: str) -> int:
        """How many partitions ``topic`` had when last routed (no metadata read)."""
        return len(self._routes[topic][0])

    def limit(self, topic: str, metadata: Any = None) -> int:
        """The most bytes a batch for ``topic`` may have (in ``metadata``, else the latest)."""
        config = (metadata or self._cluster.metadata()).topics[topic].config
        return min(self._max_request_size, int(config.get("max.message.bytes", LogConfig.max_message_bytes)))

    def require_fits_alone(self, topic: str, values: pa.Array, **columns: Any) -> None:
        """A record whose size bound passes the capacity may still fit alone (the bound is
        loose for small limits): build its batch and measure.

        Raises:
            RecordTooLargeError: its batch is larger than :meth:`limit`.
        """
        size = len(record_batch.build_arrow(values, codec=self._codec, now_ms=0, **columns))
        if size > self.limit(topic):
            raise RecordTooLargeError(
                f"a record makes a batch of {size} bytes, above max_request_size={self._max_request_size} "
                f"or {topic!r}'s max.message.bytes"
            )
