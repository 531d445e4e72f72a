"""The consumer groups' family of the Admin (Kafka's Admin.listConsumerGroups,
describeConsumerGroups, listConsumerGroupOffsets, alterConsumerGroupOffsets,
deleteConsumerGroups and deleteConsumerGroupOffsets; kafka-consumer-groups.sh, with its
--reset-offsets): :class:`GroupAdmin`."""

from __future__ import annotations

from raylog.clients.admin.base import AdminBase, raise_first
from raylog.clients.group import CoordinatorClient, committed_offsets, offsets_to_commit
from raylog.common.names import OFFSETS_TOPIC
from raylog.common.requests import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from raylog.errors import GroupIdNotFoundError, NonEmptyGroupError, UnknownMemberIdError
from raylog.types import (
    ConsumerGroupDescription,
    MemberDescription,
    OffsetAndMetadata,
    PartitionLag,
    TopicPartition,
)


class GroupAdmin(AdminBase):
    """Consumer groups (classic and KIP-848 ones): their members, lags and committed offsets."""

    def list_consumer_groups(self) -> list[tuple[str, str]]:
        """``(group_id, state)`` of every group that has members or committed offsets."""
        answers = self._ask_each_partition(OFFSETS_TOPIC, "list_groups")
        return sorted((group_id, state) for _, listed in answers for group_id, state, *_ in listed)

    def describe_consumer_groups(self, group_ids: list[str]) -> list[ConsumerGroupDescription]:
        """Members, their assignments, and per partition the committed offset, log end
        offset and lag of each group: a classic group, or a consumer group of Kafka's consumer
        protocol (KIP-848), whose generation is its group epoch and protocol its server
        assignor.

        Raises:
            GroupIdNotFoundError: a group with neither members nor committed offsets.
        """
        out = []
        for group_id in group_ids:
            coordinator = self._coordinator(group_id)
            described = _described(coordinator, group_id)
            committed = committed_offsets(coordinator, None)
            owners = {TopicPartition(*tp): m["member_id"] for m in described["members"] for tp in m["assignment"]}
            partitions = {}
            for tp in sorted(set(committed) | set(owners)):
                end = self._offset(tp, LATEST_TIMESTAMP)
                offset = committed[tp].offset if tp in committed else None
                partitions[tp] = PartitionLag(
                    offset, end, None if offset is None else max(0, end - offset), owners.get(tp)
                )
            out.append(
                ConsumerGroupDescription(
                    group_id=group_id,
                    state=described["state"],
                    generation=described["generation"],
                    protocol=described["protocol"],
                    coordinator_partition=self._answer(self._ask("find_coordinator", group_id))[0],
                    members=tuple(
                        MemberDescription(
                            m["member_id"],
                            m["instance_id"],
                            m["client_id"],
                            tuple(TopicPartition(*tp) for tp in m["assignment"]),
                        )
                        for m in described["members"]
                    ),
                    partitions=partitions,
                )
            )
        return out

    def list_consumer_group_offsets(self, group_id: str) -> dict[TopicPartition, OffsetAndMetadata]:
        """Every committed offset of the group."""
        return committed_offsets(self._coordinator(group_id), None)

    def alter_consumer_group_offsets(
        self, group_id: str, offsets: dict[TopicPartition, int | OffsetAndMetadata]
    ) -> None:
        """Set the group's committed offsets (the group must have no active members).

        Raises:
            NonEmptyGroupError: consumers are in the group (stop them first).
        """
        committing = offsets_to_commit(offsets)
        try:
            self._coordinator(group_id).call("commit_offsets", group_id, "", -1, None, committing)
        except UnknownMemberIdError as exc:
            raise NonEmptyGroupError(str(exc)) from None

    def reset_consumer_group_offsets(
        self,
        group_id: str,
        partitions: list[TopicPartition],
        *,
        to: str | None = None,
        to_timestamp_ms: int | None = None,
        shift_by: int | None = None,
        dry_run: bool = False,
    ) -> dict[TopicPartition, int]:
        """Move the group's committed offsets of ``partitions`` (kafka-consumer-groups
        --reset-offsets): ``to="earliest"`` or ``"latest"``, ``to_timestamp_ms`` (the first
        offset at or after it, else the end), or ``shift_by`` N from the committed offset
        (from the start where none), kept within the log. Returns the new offsets; with
        ``dry_run`` nothing is changed.

        Raises:
            ValueError: not exactly one of to, to_timestamp_ms, shift_by.
            NonEmptyGroupError: consumers are in the group.
        """
        if sum(x is not None for x in (to, to_timestamp_ms, shift_by)) != 1 or to not in (None, "earliest", "latest"):
            raise ValueError('give exactly one of to="earliest"|"latest", to_timestamp_ms, shift_by')
        partitions = [TopicPartition(*tp) for tp in partitions]
        committed = committed_offsets(self._coordinator(group_id), partitions) if shift_by is not None else {}
        new = {}
        for tp in partitions:
            start = self._offset(tp, EARLIEST_TIMESTAMP)
            end = self._offset(tp, LATEST_TIMESTAMP)
            if to is not None:
                new[tp] = start if to == "earliest" else end
            elif to_timestamp_ms is not None:
                found = self._offset(tp, to_timestamp_ms)
                new[tp] = end if found < 0 else found
            else:
                base = committed[tp].offset if tp in committed else start
                new[tp] = min(end, max(start, base + shift_by))
        if not dry_run:
            self.alter_consumer_group_offsets(group_id, new)
        return new

    def delete_consumer_groups(self, group_ids: list[str]) -> None:
        """Delete groups with no active members, with their committed offsets.

        Raises:
            NonEmptyGroupError, GroupIdNotFoundError.
        """
        for group_id in group_ids:
            self._coordinator(group_id).call("delete_group", group_id)

    def delete_consumer_group_offsets(self, group_id: str, partitions: list[TopicPartition]) -> None:
        """Forget the group's committed offsets of ``partitions`` (Kafka's
        Admin.deleteConsumerGroupOffsets); those of a topic an active member reads stay.

        Raises:
            GroupIdNotFoundError, GroupSubscribedToTopicError: the first refusal (the other
                partitions' offsets are deleted all the same).
        """
        asked = [(tp.topic, tp.partition) for tp in partitions]
        results = self._coordinator(group_id).call("delete_offsets", group_id, asked)
        raise_first(
            {
                f"{t}-{p}": (code, f"{t}-{p} is read by a member of group {group_id!r}")
                for (t, p), code in results.items()
            }
        )


def _described(coordinator: CoordinatorClient, group_id: str) -> dict:
    """A consumer group's description (KIP-848) while it has members, else the classic
    group's (in the same shape), else the empty consumer group's. (A group id is of one kind
    while it has members; the classic side keeps an empty entry for a group whose offsets
    were read or committed.)

    Raises:
        GroupIdNotFoundError: neither is known.
    """
    try:
        group = coordinator.call("describe_consumer_group", group_id)
    except GroupIdNotFoundError:
        return coordinator.call("describe_group", group_id)
    if not group.members:
        try:
            return coordinator.call("describe_group", group_id)
        except GroupIdNotFoundError:
            pass
    members = [
        {"member_id": m.member_id, "instance_id": m.instance_id, "client_id": "", "assignment": sorted(m.assigned)}
        for m in group.members.values()
    ]
    return {"state": group.state(), "generation": group.epoch, "protocol": group.assignor, "members": members}
