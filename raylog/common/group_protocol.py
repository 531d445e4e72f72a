"""The words of Kafka 4's consumer group protocol (KIP-848) that a member and its
coordinator (:mod:`raylog.coordination.consumer_group`) both use: the server-side assignors,
the epochs a heartbeat may carry, the heartbeat and its answer."""

from __future__ import annotations

from dataclasses import dataclass

from raylog.common import assignors
from raylog.types import TopicPartition

UNIFORM = "uniform"
RANGE = "range"
#: The server-side assignors and the assignor of raylog's that each one is.
SERVER_ASSIGNORS = {UNIFORM: assignors.COOPERATIVE_STICKY, RANGE: assignors.RANGE}
#: Epochs a heartbeat carries to join, to leave, and to leave for a while (a static member).
JOIN_EPOCH, LEAVE_EPOCH, STATIC_LEAVE_EPOCH = 0, -1, -2


@dataclass(frozen=True)
class Heartbeat:
    """A ConsumerGroupHeartbeat request, topics by name (the listener maps ids to names).
    ``None`` fields did not change since the member's last heartbeat."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    topics: tuple[str, ...] | None = None
    regex: str | None = None
    assignor: str | None = None
    owned: frozenset[TopicPartition] | None = None


@dataclass(frozen=True)
class HeartbeatAnswer:
    """What the member is told: its id and epoch, and its assignment when it changed or the
    request was a full one (None otherwise, as Kafka answers)."""

    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: frozenset[TopicPartition] | None
