"""A raylog consumer's membership in a group of Kafka 4's consumer protocol (KIP-848).

With ``group_protocol="consumer"`` a :class:`~raylog.clients.consumer.Consumer` joins its
group the way librdkafka's and Kafka's Java consumer do with ``group.protocol=consumer``:
by heartbeats alone, to the coordinator's one implementation of that protocol
(:mod:`raylog.coordination.consumer_group`), which assigns on the server. Such a group may
so mix raylog consumers with any Kafka client of that protocol.

A background thread heartbeats every interval the coordinator gives (at once when the
subscription or what the member owns changed), always with the member's whole state (its
subscription, rebalance timeout and owned partitions: a lost answer costs nothing). Each
answer carries the member's epoch and the assignment it may own now; ``poll`` applies it
(revoking first, then adding, the rebalance listener around both), and the next heartbeat
reports what the member owns, which lets the coordinator hand revoked partitions on. A
fenced member loses what it owns (``on_partitions_lost``) before it joins again with
epoch 0, as the protocol requires. If ``max_poll_interval_ms`` passes without a poll, the
member leaves (epoch -1; a static member -2, keeping its partitions for the session
timeout) and joins again at its next poll.

The session timeout and heartbeat interval are the coordinator's
(``group.consumer.session.timeout.ms``, ``group.consumer.heartbeat.interval.ms``), as in
Kafka; the member names the server assignor it wants (``group_remote_assignor``).

Concurrency: the heartbeat thread and the polling thread share the member's state under a
lock; the rebalance listener runs in the polling thread.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from raylog.clients.group import (
    CALL_MARGIN_S,
    ConsumerRebalanceListener,
    CoordinatorClient,
    in_group,
    start_heartbeat_thread,
)
from raylog.clients.member import ConsumerProtocolMember
from raylog.errors import (
    CommitFailedError,
    FencedMemberEpochError,
    RaylogError,
    StaleMemberEpochError,
    UnknownMemberIdError,
)
from raylog.transport import call
from raylog.types import OffsetAndMetadata, TopicPartition

#: The heartbeat interval until the coordinator has told its own.
FIRST_INTERVAL_S = 0.5


class ConsumerProtocolMembership:
    """A consumer's membership in a KIP-848 group (see the module docstring); the same
    surface to :class:`~raylog.clients.consumer.Consumer` as
    :class:`~raylog.clients.group.GroupMembership`."""

    def __init__(
        self,
        coordinator: CoordinatorClient,
        *,
        instance_id: str | None,
        assignor: str | None,
        max_poll_interval_ms: int | None,
        retry_backoff_s: float,
        subscription: Callable[[], dict[str, int]],
        topics: Callable[[], dict[str, int]],
        apply: Callable[[list[TopicPartition], list[TopicPartition]], None],
        listener: ConsumerRebalanceListener,
    ):
        """``subscription``: topic -> partition count of what the member wants now;
        ``topics``: every topic a member may subscribe to -> its partition count (the
        coordinator assigns the whole group's subscriptions from it)."""
        self.coordinator = coordinator
        self.group_id = coordinator.group_id
        self.instance_id = instance_id
        self.listener = listener
        self._assignor = assignor
        self._max_poll_interval_ms = max_poll_interval_ms
        self._backoff_s = retry_backoff_s
        self._subscription = subscription
        self._topics = topics
        self._apply = apply
        self._lock = threading.Lock()
        self._state = ConsumerProtocolMember(member_id=str(uuid.uuid4()))
        self._held: frozenset[TopicPartition] = frozenset()
        self._subscribed: tuple[str, ...] | None = None  # None until the first poll
        self._cluster_topics: dict[str, int] = {}
        self._assigned_once = False
        self._fatal: RaylogError | None = None
        self._last_poll = time.monotonic()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = start_heartbeat_thread(self._heartbeat_loop, self.group_id)

    # --- driven by poll -----------------------------------------------------------------

    def maintain(self) -> None:
        """One step from ``poll``: note the subscription, apply the last assignment.

        Raises:
            The coordinator's error that ended the membership for good (an instance id
            held by another member, an assignor it does not run, a classic group's id).
        """
        self._last_poll = time.monotonic()
        if self._fatal is not None:
            raise self._fatal
        subscribed, cluster_topics = tuple(sorted(self._subscription())), self._topics()
        with self._lock:
            # (the topics map is one object per metadata snapshot: compared only when it is new)
            changed = subscribed != self._subscribed or (
                cluster_topics is not self._cluster_topics and cluster_topics != self._cluster_topics
            )
            self._subscribed, self._cluster_topics = subscribed, cluster_topics
            added, revoked, lost = self._state.take(self._held)
        if lost:
            if revoked:
                self.listener.on_partitions_lost(revoked)
                self._apply([], revoked)
        elif added or revoked or not self._assigned_once and self._state.epoch > 0:
            self._assigned_once = True
            if revoked:
                self.listener.on_partitions_revoked(revoked)
            self._apply(added, revoked)
            self.listener.on_partitions_assigned(added)
        if lost or added or revoked:
            with self._lock:
                self._held = (self._held | frozenset(added)) - frozenset(revoked)
        if changed or lost or added or revoked:
            self._wake.set()  # tell the coordinator at once

    def waitables(self) -> list[Any]:
        """Nothing for ``poll`` to wait on: assignments come with heartbeats."""
        return []

    def close(self, leave: bool) -> None:
        """Stop heartbeating; leave the group (a static member for its session timeout)."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=CALL_MARGIN_S)
        if leave:
            self._leave()

    def request_rejoin(self) -> None:
        """The subscription changed: heartbeat now."""
        self._wake.set()

    # --- commits --------------------------------------------------------------------------

    def commit_args(self) -> tuple[str, int, str | None]:
        with self._lock:
            return (*self._state.commit_args(), self.instance_id)

    def member_commit_args(self) -> tuple[str, int, str | None]:
        return in_group(self.commit_args())

    def commit(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        """Commit synchronously as this member; a commit refused for an epoch the member has
        since left behind (STALE_MEMBER_EPOCH) is sent again with its new one.

        Raises:
            CommitFailedError: the member is not in its group any more.
        """
        member_id, epoch, instance_id = self.member_commit_args()
        while True:
            try:
                self.coordinator.call("commit_offsets", self.group_id, member_id, epoch, instance_id, offsets)
                return
            except StaleMemberEpochError as exc:
                now = self.member_commit_args()
                if now[1] == epoch:
                    raise CommitFailedError(f"commit refused: {exc}") from None
                member_id, epoch, instance_id = now
            except (FencedMemberEpochError, UnknownMemberIdError) as exc:
                self._wake.set()
                raise CommitFailedError(f"commit refused: {exc}; poll() to rejoin the group") from None

    # --- heartbeats -------------------------------------------------------------------------

    def _heartbeat_loop(self) -> None:
        interval_s = FIRST_INTERVAL_S
        while not self._stop.is_set():
            self._wake.clear()
            with self._lock:
                ready = self._subscribed is not None and not self._state.lost
                epoch, owned = self._state.epoch, self._held
                subscribed, cluster_topics = self._subscribed, self._cluster_topics
            if not ready:  # before the first poll, or until poll gave up what was lost
                self._wake.wait(interval_s)
                continue
            if self._poll_interval_exceeded(epoch):
                continue
            request = self._state.request(
                self.group_id,
                subscribed,
                owned,
                instance_id=self.instance_id,
                assignor=self._assignor,
                rebalance_timeout_ms=self._max_poll_interval_ms or 300_000,
            )
            try:
                answer = self.coordinator.check(
                    call(self.coordinator.remote("consumer_heartbeat", request, cluster_topics), CALL_MARGIN_S)
                )
            except RaylogError as exc:
                with self._lock:
                    if self._state.failed(exc, epoch):
                        continue  # poll gives up what it owns, then the member joins again
                if not (exc.retriable or exc.invalid_metadata):
                    self._fatal = exc  # raised by the next poll
                    return
                self.coordinator.after_error(exc)
                self._wake.wait(self._backoff_s)
                continue
            with self._lock:
                self._state.answered(answer, epoch)
            interval_s = answer.heartbeat_interval_ms / 1000
            self._wake.wait(interval_s)  # poll wakes it once it applied a new assignment

    def _poll_interval_exceeded(self, epoch: int) -> bool:
        if self._max_poll_interval_ms is None or epoch <= 0:
            return False
        if (time.monotonic() - self._last_poll) * 1000 <= self._max_poll_interval_ms:
            return False
        # Like Kafka: the application is stuck, so give the partitions to someone else.
        self._leave()
        self._wake.wait(1.0)
        return True

    def _leave(self) -> None:
        """Leave the group (epoch -1; a static member -2): what it owns is lost."""
        with self._lock:
            epoch = self._state.epoch
            self._state.left()
        if epoch <= 0:
            return
        request = self._state.leave_request(self.group_id, self.instance_id)
        try:
            self.coordinator.call("consumer_heartbeat", request, {})
        except RaylogError:
            pass  # the session timeout removes it instead
