"""The topics' family of the Admin (Kafka's Admin.createTopics, deleteTopics, listTopics,
describeTopics and createPartitions; kafka-topics.sh): :class:`TopicAdmin`, and the checks of
topic names and partition counts made before anything is sent."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from raylog.clients.admin.base import AdminBase, names, raise_first
from raylog.common.names import INTERNAL_TOPICS, validate_topic_name
from raylog.errors import InvalidReplicaAssignmentError, InvalidTopicError, RequestTimedOutError
from raylog.types import NewPartitions, NewTopic, TopicDescription

#: How often :meth:`Admin.await_leaders` reports progress.
PROGRESS_STEP_MS = 500


class TopicAdmin(AdminBase):
    """Creating, growing, listing, describing and deleting topics, and waiting for their
    partitions' leaders."""

    def create_topics(
        self, new_topics: list[NewTopic], *, wait_for_leaders_ms: int | None = None, timeout_ms: int | None = None
    ) -> None:
        """Create topics; each is created or refused on its own. As in Kafka, a topic exists
        once the controller has journaled it: its replica actors then start in the background
        (a few at a time, leaders first), and clients get LEADER_NOT_AVAILABLE, and retry, for
        a partition whose leader is not running yet.

        Args:
            wait_for_leaders_ms: also wait until every partition of the created topics has a
                running leader, at most this long (see :meth:`await_leaders`).
            timeout_ms: how long the controller may take (default: the Admin's
                ``request_timeout_ms``), as kafka-python's.

        Raises:
            The first refusal's typed error (InvalidTopicError, TopicAlreadyExistsError,
            InvalidPartitionsError, InvalidReplicationFactorError, InvalidConfigError), after
            every other topic was handled (an illegal name is refused before anything is
            sent, and the controller checks names again).
            RequestTimedOutError: the topics were created, but not every partition has a
                leader after ``wait_for_leaders_ms``.
        """
        new_topics = list(new_topics)
        refused, valid = _legal_names(new_topics, lambda new: new.name)
        timeout_s = self._call_timeout_s(timeout_ms)
        results = self._answer(self._ask("create_topics", valid), timeout_s) if valid else {}
        self._cluster.metadata(refresh=True)
        created = [name for name, (code, _) in results.items() if not code]
        if wait_for_leaders_ms is not None and created:
            self.await_leaders(created, wait_for_leaders_ms)
        raise_first({**refused, **results})

    def await_leaders(
        self,
        topics: list[str],
        timeout_ms: int,
        progress: Callable[[int, int], None] | None = None,
        followers: bool = False,
    ) -> None:
        """Wait until every partition of ``topics`` has a running leader.

        Args:
            timeout_ms: how long to wait at most.
            progress: called with ``(partitions ready, partitions)`` as they come up.
            followers: also wait until every replica on a live broker runs. A new topic's
                replicas are all in its ISR, so an ``acks="all"`` record waits for followers
                still starting (each a process: about a second each here); a benchmark or a
                latency-bound first send waits for them with this instead.

        Raises:
            RequestTimedOutError: some partitions are not ready after ``timeout_ms`` (the
                topics exist; their replicas go on starting).
            UnknownTopicOrPartitionError: a name that is not a topic.
        """
        topics = list(topics)
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            remaining_ms = max(0, int((deadline - time.monotonic()) * 1000))
            step_ms = remaining_ms if progress is None else min(remaining_ms, PROGRESS_STEP_MS)
            answer = self._answer(
                self._cluster.controller.await_leaders.remote(topics, step_ms, followers),
                step_ms / 1000 + self._timeout_s,
            )
            raise_first({name: (code, message) for name, (code, message, _, _) in answer.items()})
            led = sum(count for _, _, count, _ in answer.values())
            total = sum(total for _, _, _, total in answer.values())
            if progress is not None:
                progress(led, total)
            if led == total:
                self._cluster.metadata(refresh=True)
                return
            if time.monotonic() >= deadline:
                missing = "a replica not running" if followers else "no leader"
                raise RequestTimedOutError(
                    f"{total - led} of {total} partitions of {', '.join(topics)} have {missing} after {timeout_ms} ms "
                    "(the topics exist: their replicas are still starting)"
                )

    def delete_topics(self, topics: list[str], *, timeout_ms: int | None = None) -> None:
        """Delete topics and their data (``timeout_ms``: as at :meth:`create_topics`).

        Raises:
            UnknownTopicOrPartitionError: a name that is not a topic (the others are deleted).
            InvalidTopicError: a name that is not a legal topic name (checked before sending;
                the others are deleted).
        """
        refused, valid = _legal_names(names(topics), lambda name: name)
        timeout_s = self._call_timeout_s(timeout_ms)
        results = self._answer(self._ask("delete_topics", valid), timeout_s) if valid else {}
        self._cluster.metadata(refresh=True)
        raise_first({**refused, **results})

    def list_topics(self, include_internal: bool = False) -> list[str]:
        names = self._cluster.metadata(refresh=True).topics
        return sorted(n for n in names if include_internal or n not in INTERNAL_TOPICS)

    def describe_topics(self, topics: list[str] | None = None) -> list[TopicDescription]:
        """Leader, leader epoch, replicas and ISR of each partition, and the topic config
        (of every topic when ``topics`` is None).

        Raises:
            UnknownTopicOrPartitionError: a name that is not a topic.
            TopicAuthorizationFailedError: a name the Admin's principal may not describe
                (whether or not it is a topic).
        """
        known = self._cluster.metadata(refresh=True).topics
        wanted = sorted(known) if topics is None else names(topics)
        missing = [n for n in wanted if n not in known]
        if missing:
            raise self._cluster.missing_topics_error(missing)
        return [known[n] for n in wanted]

    def create_partitions(
        self,
        new_partitions: dict[str, int | NewPartitions],
        *,
        wait_for_leaders_ms: int | None = None,
        timeout_ms: int | None = None,
    ) -> None:
        """Add partitions to topics (Kafka's CreatePartitions): each topic grows to its new
        total count, given as a number or as ``NewPartitions(total_count)``; the new
        partitions are placed like a new topic's and their replicas start in the
        background, as at :meth:`create_topics`. Keys then map to other partitions (murmur2
        modulo the count), as in Kafka. Producers and consumers see the new partitions on
        their next metadata refresh.

        Args:
            wait_for_leaders_ms: also wait until every partition has a running leader.
            timeout_ms: as at :meth:`create_topics`.

        Raises:
            The first refusal's typed error (UnknownTopicOrPartitionError;
            InvalidPartitionsError for a count not above the current one or for an internal
            topic; InvalidReplicationFactorError when fewer brokers are live than the topic's
            replication factor), after every other topic was handled.
            InvalidReplicaAssignmentError: ``NewPartitions.new_assignments`` given (raylog
                places new partitions; move them afterwards with
                :meth:`alter_partition_reassignments`).
            TypeError: a count that is neither an integer nor a NewPartitions.
            RequestTimedOutError: as :meth:`create_topics`.
        """
        counts = {name: _total_count(name, wanted) for name, wanted in dict(new_partitions).items()}
        timeout_s = self._call_timeout_s(timeout_ms)
        results = self._answer(self._ask("create_partitions", counts), timeout_s)
        self._cluster.metadata(refresh=True)
        grown = [name for name, (code, _) in results.items() if not code]
        if wait_for_leaders_ms is not None and grown:
            self.await_leaders(grown, wait_for_leaders_ms)
        raise_first(results)


def _legal_names(items: list, name_of) -> tuple[dict[str, tuple[int, str]], list]:
    """``(refused, legal)``: the items whose topic name is illegal, as per-topic results
    (Kafka's AdminClient fails those before sending), and the others, in order."""
    refused, legal = {}, []
    for item in items:
        try:
            validate_topic_name(name_of(item))
        except InvalidTopicError as exc:
            refused[repr(name_of(item))] = (exc.code, str(exc))
        else:
            legal.append(item)
    return refused, legal


def _total_count(topic: str, wanted: Any) -> int:
    """The partition count asked for ``topic``: a number, or a NewPartitions' total_count.

    Raises:
        InvalidReplicaAssignmentError: new_assignments given.
        TypeError: neither.
    """
    if isinstance(wanted, int) and not isinstance(wanted, bool):
        return wanted
    total = getattr(wanted, "total_count", None)
    if isinstance(total, bool) or not isinstance(total, int):
        raise TypeError(f"{topic!r}: expected a partition count or NewPartitions(total_count), got {wanted!r}")
    if getattr(wanted, "new_assignments", None) is not None:
        raise InvalidReplicaAssignmentError(
            f"{topic!r}: raylog places new partitions itself (new_assignments must be None); "
            "move them afterwards with alter_partition_reassignments"
        )
    return total
