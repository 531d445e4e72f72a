"""A group coordinator's admin calls: Kafka's ListGroups, DescribeGroups, DeleteGroups and
OffsetDelete. A part of :class:`~raylog.actors.group_coordinator.GroupCoordinatorActor`
(which owns what :class:`GroupAdmin` lists; see :mod:`~raylog.actors.replica_parts`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ray

from raylog.actors.replica_parts import ReplicaPart
from raylog.common.acl import CLUSTER_NAME, ResourceType
from raylog.common.acl import ACLOperation as Op
from raylog.protocol import GroupResponse, error_fields

GROUP = ResourceType.GROUP


class GroupAdmin(ReplicaPart):
    """See the module docstring."""

    _answer: Callable[..., GroupResponse]
    _coordinator: Callable[[], Any]
    _append_records: Callable[..., int]
    _await_records: Callable[[Any], None]

    def list_groups(self, session: str | None = None) -> GroupResponse:
        """Every group here, or those the caller may DESCRIBE unless it may DESCRIBE the cluster."""
        access = self._guard.access(session)
        if access is None or access.allows(Op.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
            return self._answer(lambda groups: groups.list_groups())
        return self._answer(lambda groups: [g for g in groups.list_groups() if access.allows(Op.DESCRIBE, GROUP, g[0])])

    def describe_group(self, group_id: str, session: str | None = None) -> GroupResponse:
        return self._answer(lambda groups: groups.describe(group_id), (session, Op.DESCRIBE, group_id))

    @ray.method(concurrency_group="commits")
    def delete_group(self, group_id: str, session: str | None = None) -> GroupResponse:
        with self._lock:
            try:
                self._guard.require(session, Op.DELETE, GROUP, group_id)
                self._await_records(self._append_records(self._coordinator().delete(group_id)))
            except Exception as exc:  # noqa: BLE001
                return GroupResponse(**error_fields(exc))
        return GroupResponse()

    @ray.method(concurrency_group="commits")
    def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]], session: str | None = None
    ) -> GroupResponse:
        """Forget the group's committed offsets of ``partitions`` (Kafka's OffsetDelete), once
        their tombstones are replicated; the value is ``{(topic, partition): error code}``
        (GROUP_SUBSCRIBED_TO_TOPIC where a member reads the topic)."""
        with self._lock:
            try:
                self._guard.require(session, Op.DELETE, GROUP, group_id)
                records, results = self._coordinator().delete_offsets(group_id, partitions)
                if records:
                    self._await_records(self._append_records(records))
            except Exception as exc:  # noqa: BLE001
                return GroupResponse(**error_fields(exc))
        return GroupResponse(value={tuple(tp): 0 if e is None else e.code for tp, e in results.items()})
