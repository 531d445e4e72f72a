"""The cluster's topics as a consumer sees them (Kafka's ConsumerMetadata): the partitions
of topics named, those a subscription covers (refreshed every ``metadata_max_age_ms``), and
which missing topics are missing because the principal may not describe them."""

from __future__ import annotations

import re
import time

from raylog.clients.cluster import RaylogCluster
from raylog.clients.consumer.subscription_state import SubscriptionState
from raylog.common.names import INTERNAL_TOPICS
from raylog.errors import TopicAuthorizationFailedError, UnknownTopicOrPartitionError
from raylog.types import TopicPartition


class ConsumerMetadata:
    """A consumer's view of the cluster metadata.

    Args:
        cluster: the consumer's handle.
        subscriptions: the consumer's (its subscription says which topics it covers).
        max_age_ms: ``metadata_max_age_ms``.
    """

    def __init__(self, cluster: RaylogCluster, subscriptions: SubscriptionState, max_age_ms: int):
        self._cluster, self._subscriptions, self._max_age_ms = cluster, subscriptions, max_age_ms
        self._checked = 0.0
        #: Subscribed topics the principal may not describe, found by the last metadata
        #: refresh: raised by the next poll (as Kafka's consumer raises them once per update).
        self._refused: TopicAuthorizationFailedError | None = None

    def partitions_of(self, topics: tuple[str, ...]) -> list[TopicPartition]:
        """Every partition of ``topics``, from fresh metadata.

        Raises:
            UnknownTopicOrPartitionError, TopicAuthorizationFailedError: a topic is missing.
        """
        metadata = self._cluster.metadata(refresh=True)
        missing = [t for t in topics if t not in metadata.topics]
        if missing:
            raise self._cluster.missing_topics_error(missing)
        return [TopicPartition(t, p) for t in topics for p in range(metadata.num_partitions(t))]

    def check_partitions(self, wanted: list[TopicPartition]) -> None:
        """Refuse partitions that do not exist (the metadata refreshed before saying so).

        Raises:
            UnknownTopicOrPartitionError, TopicAuthorizationFailedError.
        """
        metadata = self._cluster.metadata()
        for tp in wanted:
            if not metadata.has_partition(tp):
                metadata = self._cluster.metadata(refresh=True)
                if tp.topic not in metadata.topics:
                    raise self._cluster.missing_topics_error([tp.topic])
                if not metadata.has_partition(tp):
                    raise UnknownTopicOrPartitionError(f"unknown partition {tp.topic}-{tp.partition}")

    def topics(self) -> set[str]:
        """The cluster's topics (internal ones left out), from fresh metadata."""
        return {name for name in self._cluster.metadata(refresh=True).topics if name not in INTERNAL_TOPICS}

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        """See ``Consumer.partitions_for_topic``."""
        metadata = self._cluster.metadata()
        if topic not in metadata.topics:
            metadata = self._cluster.metadata(refresh=True)
            if topic not in metadata.topics:
                refused = self._refused_topics([topic])
                if refused is not None:
                    raise refused
                return None
        return set(range(metadata.num_partitions(topic)))

    def _refused_topics(self, missing: list[str]) -> TopicAuthorizationFailedError | None:
        """Why ``missing`` (named, and not in the metadata) are missing, when it is that the
        principal may not describe some of them; None when they just do not exist."""
        error = self._cluster.missing_topics_error(missing)
        return error if isinstance(error, TopicAuthorizationFailedError) else None

    def request_update(self) -> None:
        """Refresh the metadata at the next :meth:`subscribed_partition_counts` (a new subscription)."""
        self._checked = 0.0

    def subscribed_partition_counts(self) -> dict[str, int]:
        """Topic -> partition count of what the subscription covers now (metadata refreshed
        every metadata_max_age_ms); topics that do not exist yet are left out, and so are
        named ones the principal may not describe (the next poll raises that)."""
        now = time.monotonic()
        refresh = (now - self._checked) * 1000 >= self._max_age_ms
        if refresh:
            self._checked = now
        topics = self._cluster.metadata(refresh=refresh).topics
        subscribed = self._subscriptions.subscribed
        if isinstance(subscribed, re.Pattern):
            names = [t for t in topics if t not in INTERNAL_TOPICS and subscribed.fullmatch(t)]
        else:
            names = [t for t in subscribed or () if t in topics]
            missing = [t for t in subscribed or () if t not in topics]
            if refresh and missing:
                self._refused = self._refused_topics(missing)
        return {t: len(topics[t].partitions) for t in sorted(names)}

    def raise_refused(self) -> None:
        """Raise (once) what the last refresh found the principal may not describe.

        Raises:
            TopicAuthorizationFailedError: subscribed topics it may not describe.
        """
        refused, self._refused = self._refused, None
        if refused is not None:
            raise refused
