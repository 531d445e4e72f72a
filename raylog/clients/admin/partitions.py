"""The partitions' family of the Admin, on partitions that exist (Kafka's
Admin.deleteRecords, alterPartitionReassignments, listPartitionReassignments, electLeaders
and describeCluster; kafka-delete-records.sh, kafka-reassign-partitions.sh,
kafka-leader-election.sh): :class:`PartitionAdmin`."""

from __future__ import annotations

from collections.abc import Mapping

from raylog.clients.admin.base import AdminBase, checked, raise_first
from raylog.clients.consumer.consumer_config import ISOLATION_LEVELS
from raylog.clients.consumer.offset_fetcher import list_offsets
from raylog.common.requests import PREFERRED_ELECTION, UNCLEAN_ELECTION
from raylog.errors import InvalidConfigError
from raylog.types import BrokerInfo, OffsetAndTimestamp, OffsetSpec, TopicPartition

#: How much longer than its own timeout a leader's DeleteRecords answer is waited for.
DELETE_RECORDS_MARGIN_S = 10.0


class PartitionAdmin(AdminBase):
    """The records, replicas and leaders of existing partitions, and the brokers they are on."""

    def delete_records(
        self, records_to_delete: dict[TopicPartition, int], *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, int]:
        """Delete every record below an offset in each partition (Kafka's Admin.deleteRecords;
        -1: below the high watermark, so everything committed): the partition's log start
        moves there, consumers get OFFSET_OUT_OF_RANGE below it, and the segments wholly
        below it are deleted on every replica. Returns each partition's low watermark (its
        smallest log start among the in-sync replicas) once every in-sync replica deleted
        them.

        Raises:
            UnknownTopicOrPartitionError, OffsetOutOfRangeError (past the high watermark),
            PolicyViolationError (a compact-only topic), NotLeaderOrFollowerError,
            RequestTimedOutError: the first refusal (the other partitions' records are
                deleted all the same).
        """
        timeout_s = self._call_timeout_s(timeout_ms)
        metadata = self._cluster.metadata(refresh=True)
        asked = {
            tp: metadata.leader(tp).delete_records.remote(offset, int(timeout_s * 1000), self._session.token())
            for tp, offset in records_to_delete.items()
        }
        answers = {tp: self._answer(ref, timeout_s + DELETE_RECORDS_MARGIN_S) for tp, ref in asked.items()}
        for answer in answers.values():
            checked(answer)
        return {tp: answer.low_watermark for tp, answer in answers.items()}

    def list_offsets(
        self,
        specs: Mapping[TopicPartition, OffsetSpec],
        *,
        isolation_level: str = "read_uncommitted",
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, OffsetAndTimestamp]:
        """Look up an offset in each partition by its :class:`~raylog.types.OffsetSpec`
        (Kafka's Admin.listOffsets, kafka-get-offsets.sh): the log start, the high watermark
        (the last stable offset read_committed), the first record with the largest timestamp,
        the local log start, the highest offset in the remote tier, or the first record at or
        after a time. Offset and timestamp are -1 where there is no such record below the
        high watermark (the last stable offset read_committed); the timestamp is -1 for the
        offsets that are not found by time. The leaders of the partitions asked for the same
        spec are asked at once.

        Raises:
            InvalidConfigError: an isolation level other than read_uncommitted and
                read_committed, or a spec that is not an OffsetSpec.
            UnknownTopicOrPartitionError, LeaderNotAvailableError, KafkaTimeoutError: the
                first partition whose leader could not answer within the timeout.
        """
        if isolation_level not in ISOLATION_LEVELS:
            raise InvalidConfigError(
                f"isolation_level must be one of {sorted(ISOLATION_LEVELS)}, got {isolation_level!r}"
            )
        by_timestamp: dict[int, list[TopicPartition]] = {}
        for tp, spec in specs.items():
            if not isinstance(spec, OffsetSpec):
                raise InvalidConfigError(f"the spec of {tp} must be an OffsetSpec, got {spec!r}")
            by_timestamp.setdefault(spec.timestamp, []).append(TopicPartition(*tp))
        timeout_s, token = self._call_timeout_s(timeout_ms), self._session.token()
        found = {}
        for timestamp, tps in by_timestamp.items():
            found.update(
                list_offsets(self._cluster, tps, timestamp, timeout_s, ISOLATION_LEVELS[isolation_level], token)
            )
        return {TopicPartition(*tp): found[TopicPartition(*tp)] for tp in specs}

    def alter_partition_reassignments(self, reassignments: dict[TopicPartition, list[int] | None]) -> None:
        """Move partitions to new replica sets (Kafka's AlterPartitionReassignments); also
        raises or lowers the replication factor. Returns once started: new replicas fill by
        fetching and the old ones are removed only when every new one is in sync. None for a
        partition cancels its reassignment under way (it moves back to where it started).

        Raises:
            UnknownTopicOrPartitionError, InvalidReplicaAssignmentError,
            NoReassignmentInProgressError: the first refusal.
        """
        targets = {
            (tp.topic, tp.partition): None if replicas is None else list(replicas)
            for tp, replicas in reassignments.items()
        }
        results = self._answer(self._ask("alter_partition_reassignments", targets))
        self._cluster.metadata(refresh=True)
        raise_first({f"{t}-{p}": r for (t, p), r in results.items()})

    def list_partition_reassignments(self) -> dict[TopicPartition, tuple[int, ...]]:
        """Reassignments under way: partition -> target replicas."""
        answer = self._cluster.metadata(refresh=True).reassignments
        return {TopicPartition(t, p): target for (t, p), target in answer.items()}

    def elect_leaders(self, topics: list[str] | None = None, *, election_type: str = "preferred") -> int:
        """Kafka's Admin.electLeaders in every partition of ``topics`` (every topic's when None).
        ``election_type="preferred"`` moves leadership back to each partition's first replica
        where it is live and in sync; ``"unclean"`` elects a leader for each partition that has
        no live one, from any live replica when no in-sync one is left: records acknowledged
        only by the replicas that are gone are then lost (Kafka's kafka-leader-election.sh
        --election-type UNCLEAN, the operator's way back for an offline partition). Returns how
        many partitions changed leader.

        Raises:
            UnknownTopicOrPartitionError: a topic named does not exist.
            InvalidConfigError: an election type other than "preferred" or "unclean".
        """
        types = {"preferred": PREFERRED_ELECTION, "unclean": UNCLEAN_ELECTION}
        if election_type not in types:
            raise InvalidConfigError(f"election_type must be 'preferred' or 'unclean', got {election_type!r}")
        partitions = None
        if topics is not None:
            metadata = self._cluster.metadata(refresh=True)
            partitions = [(t, p) for t in topics for p in range(metadata.num_partitions(t))]
        asked = self._ask("elect_leaders", types[election_type], partitions)
        results = self._answer(asked)
        self._cluster.metadata(refresh=True)
        return sum(1 for code, _ in results.values() if code == 0)

    def describe_cluster(self) -> dict[int, BrokerInfo]:
        """The brokers by id."""
        return dict(self._cluster.metadata(refresh=True).brokers)
