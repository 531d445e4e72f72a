"""Topics, partitions, elections and reassignments: Kafka's CreateTopics, DeleteTopics,
CreatePartitions, ElectLeaders and (List)PartitionReassignments, each journaled and then
carried to the replica actors.

A part of :class:`~raylog.actors.controller.ControllerActor` (see
:class:`~raylog.actors.controller_parts.ControllerPart` for what the parts share).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from raylog.actors.controller_parts import CLUSTER, TOPIC, ControllerPart, require
from raylog.common.acl import CLUSTER_NAME
from raylog.common.acl import ACLOperation as Op
from raylog.coordination.replication_control import (
    CheckReassignment,
    ElectLeaders,
)
from raylog.errors import RaylogError
from raylog.protocol import error_result
from raylog.types import NewTopic

logger = logging.getLogger(__name__)


class TopicAdmin(ControllerPart):
    """See the module docstring."""

    async def create_topics(self, topics: list[NewTopic], session: str | None = None) -> dict[str, tuple[int, str]]:
        """Create each topic (CREATE on the cluster or the topic); per topic ``(error_code,
        message)``, code 0 on success."""
        access = self._caller(session)

        def create(new: NewTopic) -> None:
            if access is not None and not access.allows(Op.CREATE, CLUSTER, CLUSTER_NAME):
                access.require(Op.CREATE, TOPIC, new.name)
            self._commit(
                [
                    self.image.create_topic(
                        new.name,
                        new.num_partitions,
                        new.replication_factor,
                        new.config,
                        live=self.live,
                        remote_log_storage_uri=self.config.remote_log_storage_uri,
                    )
                ]
            )
            self.fleet.ensure_replicas(new.name)

        return await self._each({new.name: new for new in topics}, create)

    async def delete_topics(self, names: list[str], session: str | None = None) -> dict[str, tuple[int, str]]:
        """Delete each topic and its replicas' data (DELETE on the topic); per topic
        ``(error_code, message)``."""
        access = self._caller(session)

        def delete(name: str) -> Awaitable[None]:
            require(access, Op.DELETE, TOPIC, name)
            record = self.image.delete_topic(name)
            topic = self.image.topics[name]
            self._commit([record])
            return self.fleet.remove_replicas(topic)

        return await self._each({name: name for name in names}, delete)

    async def create_partitions(self, counts: dict[str, int], session: str | None = None) -> dict[str, tuple[int, str]]:
        """Grow each topic to its new partition count: the new partitions are placed,
        journaled and get their replica actors as at topic creation (led by their first
        replica, every replica in sync); per topic ``(error_code, message)``."""

        access = self._caller(session)

        def add(item: tuple[str, int]) -> None:
            name, total_count = item
            require(access, Op.ALTER, TOPIC, name)
            self._commit([self.image.add_partitions(name, total_count, live=self.live)])
            self.fleet.ensure_replicas(name)

        return await self._each({name: (name, count) for name, count in counts.items()}, add)

    async def _each(self, items: dict, step: Callable[[Any], Awaitable[None] | None]) -> dict:
        """Run ``step`` on each item, one at a time under the lock (it journals the change and
        starts what follows from it), then await what each step returned (replica actors
        starting or being removed) with the lock released: elections, ISR changes and restart
        reports must not wait for processes to start (a topic of many partitions takes
        seconds). Per key ``(error_code, message)``, code 0 where the step succeeded."""
        await self.start()
        results, pending = {}, {}
        async with self._guard():
            for key, item in items.items():
                try:
                    pending[key] = step(item)
                    results[key] = (0, "")
                except RaylogError as exc:
                    results[key] = error_result(exc)
        for key, then in pending.items():
            try:
                if then is not None:
                    await then
            except RaylogError as exc:
                results[key] = error_result(exc)
        return results

    async def elect_leaders(
        self, election_type: int, partitions: list[tuple[str, int]] | None = None, session: str | None = None
    ) -> dict[tuple[str, int], tuple[int, str]]:
        """Kafka's ElectLeaders: a preferred or unclean election (see
        :func:`~raylog.coordination.elections.requested_election`) in each partition, or in
        every partition when ``partitions`` is None (then those needing none are left out of
        the answer, as Kafka does); all journaled in one batch. Per partition
        ``(error_code, message)``, code 0 where a leader was elected.

        Raises:
            ClusterAuthorizationFailedError: the caller may not ALTER the cluster.
        """
        await self.start()
        require(self._caller(session), Op.ALTER, CLUSTER)
        keys = None if partitions is None else tuple(tuple(key) for key in partitions)
        async with self._guard():
            return self._carry_out(self.replication.step(ElectLeaders(election_type, keys)))

    async def alter_partition_reassignments(
        self,
        targets: dict[tuple[str, int], list[int] | None],
        allow_replication_factor_change: bool = True,
        session: str | None = None,
    ) -> dict:
        """Start moving partitions to new replica sets (also raising or lowering the
        replication factor unless not ``allow_replication_factor_change``), or cancel the
        reassignment under way where the target is None (back to the replicas it started
        from); per partition ``(error_code, message)``. New replicas fill by fetching; old
        ones are removed only once every target replica is in sync. Needs ALTER on the cluster.

        Raises:
            ClusterAuthorizationFailedError: the caller may not ALTER the cluster.
        """
        require(self._caller(session), Op.ALTER, CLUSTER)

        def reassign(item: tuple[tuple[str, int], list[int] | None]) -> None:
            (topic, partition), target = item
            if target is None:
                self._commit(self.image.cancel_reassignment(topic, partition))
            else:
                self._commit(self.image.reassign(topic, partition, target, allow_replication_factor_change))
            self._start_reassignment(topic, partition)

        return await self._each({key: (key, target) for key, target in targets.items()}, reassign)

    async def list_partition_reassignments(
        self, session: str | None = None
    ) -> dict[tuple[str, int], tuple[tuple[int, ...], ...]]:
        """Per reassignment under way: ``(replicas, adding, removing)`` (see
        :meth:`MetadataImage.listed_reassignments`); needs DESCRIBE on the cluster."""
        await self.start()
        require(self._caller(session), Op.DESCRIBE, CLUSTER)
        return self.image.listed_reassignments()

    def _start_reassignment(self, topic: str, partition: int) -> None:
        """The new replicas' actors, the partition's new state to every replica, then wait
        until they are in sync to complete it (in the background)."""
        self.fleet.ensure_replicas(topic)
        self.fleet.push([self.image.partition(topic, partition)])
        self._spawn(self._complete_reassignment(topic, partition))

    async def _complete_reassignment(self, topic: str, partition: int) -> None:
        """Switch to the target replicas once all are in sync; then remove the others."""
        while (topic, partition) in self.image.reassignments:
            await asyncio.sleep(self.config.node_check_interval_ms / 1000)
            async with self._guard():
                removed = self._carry_out(self.replication.step(CheckReassignment(topic, partition)))
                if removed is None:
                    continue
                handles = [self.fleet.replicas.pop((topic, partition, b), (None, None))[1] for b in removed]
            await self.fleet.remove_replica_actors([h for h in handles if h is not None])
            return
