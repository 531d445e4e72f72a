"""Admin: create, delete, list and describe topics."""

from __future__ import annotations

from raylog.clients.cluster import METADATA_TIMEOUT_S, RaylogCluster
from raylog.clients.transport import call
from raylog.coordination.placement import INTERNAL_TOPICS
from raylog.errors import UnknownTopicOrPartitionError, for_code
from raylog.types import BrokerInfo, NewTopic, TopicDescription, TopicPartition


class Admin:
    """Topic administration (Kafka's AdminClient, synchronous).

    Example:
        >>> admin = Admin(cluster)                                     # doctest: +SKIP
        >>> admin.create_topics([NewTopic("clicks", num_partitions=6)])  # doctest: +SKIP
    """

    def __init__(self, cluster: RaylogCluster, *, request_timeout_ms: int = int(METADATA_TIMEOUT_S * 1000)):
        self._cluster = cluster
        self._timeout_s = request_timeout_ms / 1000

    def create_topics(self, new_topics: list[NewTopic]) -> None:
        """Create topics; each is created or refused on its own.

        Raises:
            The first refusal's typed error (InvalidTopicError, TopicAlreadyExistsError,
            InvalidPartitionsError, InvalidReplicationFactorError, InvalidConfigError), after
            every other topic was handled.
        """
        results = call(self._cluster.controller.create_topics.remote(list(new_topics)), self._timeout_s)
        self._cluster.metadata(refresh=True)
        _raise_first(results)

    def delete_topics(self, names: list[str]) -> None:
        """Delete topics and their data.

        Raises:
            UnknownTopicOrPartitionError: a name that is not a topic (the others are deleted).
        """
        results = call(self._cluster.controller.delete_topics.remote(list(names)), self._timeout_s)
        self._cluster.metadata(refresh=True)
        _raise_first(results)

    def list_topics(self, include_internal: bool = False) -> list[str]:
        names = self._cluster.metadata(refresh=True).topics
        return sorted(n for n in names if include_internal or n not in INTERNAL_TOPICS)

    def describe_topics(self, names: list[str] | None = None) -> list[TopicDescription]:
        """Leader, leader epoch, replicas and ISR of each partition, and the topic config.

        Raises:
            UnknownTopicOrPartitionError: a name that is not a topic.
        """
        topics = self._cluster.metadata(refresh=True).topics
        wanted = sorted(topics) if names is None else list(names)
        missing = [n for n in wanted if n not in topics]
        if missing:
            raise UnknownTopicOrPartitionError(f"unknown topics: {', '.join(map(repr, missing))}")
        return [topics[n] for n in wanted]

    def alter_partition_reassignments(self, reassignments: dict[TopicPartition, list[int]]) -> None:
        """Move partitions to new replica sets (Kafka's AlterPartitionReassignments); also
        raises or lowers the replication factor. Returns once started: new replicas fill by
        fetching and the old ones are removed only when every new one is in sync.

        Raises:
            UnknownTopicOrPartitionError, InvalidReplicaAssignmentError: the first refusal.
        """
        targets = {(tp.topic, tp.partition): list(replicas) for tp, replicas in reassignments.items()}
        results = call(self._cluster.controller.alter_partition_reassignments.remote(targets), self._timeout_s)
        self._cluster.metadata(refresh=True)
        _raise_first({f"{t}-{p}": r for (t, p), r in results.items()})

    def list_partition_reassignments(self) -> dict[TopicPartition, tuple[int, ...]]:
        """Reassignments under way: partition -> target replicas."""
        answer = self._cluster.metadata(refresh=True).reassignments
        return {TopicPartition(t, p): target for (t, p), target in answer.items()}

    def elect_leaders(self, topics: list[str] | None = None) -> int:
        """Preferred-leader election: leadership back to each partition's first replica where
        it is live and in sync. Returns how many partitions changed leader."""
        moved = call(self._cluster.controller.elect_preferred_leaders.remote(topics), self._timeout_s)
        self._cluster.metadata(refresh=True)
        return moved

    def describe_cluster(self) -> dict[int, BrokerInfo]:
        """The brokers by id."""
        return dict(self._cluster.metadata(refresh=True).brokers)


def _raise_first(results: dict[str, tuple[int, str]]) -> None:
    for code, message in results.values():
        if code:
            raise for_code(code)(message)
