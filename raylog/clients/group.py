"""The client side of consumer groups: finding a group's coordinator, and a consumer's
membership (join, sync, heartbeats, rebalance callbacks).

:class:`CoordinatorClient` sends a call to the leader of the group's ``__consumer_offsets``
partition, found through the controller (Kafka's FindCoordinator), and finds it again and
retries when it moved, died or is still loading.

:class:`GroupMembership` is driven by the consumer's ``poll`` (joins never block a poll: a
join is an outstanding call that poll waits on with its fetches, so partitions that stay
keep flowing during a cooperative rebalance) and by a heartbeat thread of its own, so that
a long step between polls (training, inference) does not cost the member its session.
The heartbeat is a long poll at the coordinator, which answers early when the group starts
rebalancing; like Kafka's, it pauses while a join is outstanding. If
``max_poll_interval_ms`` passes without a poll, the member leaves the group (a dynamic one)
or falls silent (a static one), like Kafka's consumer; None turns that off. What the member
may keep through all this (its partitions are lost when it loses its generation, and a join
claims them with their generation) is decided by
:class:`raylog.clients.member.MemberState`.

Concurrency: the heartbeat thread and the polling thread share the member's identity
under a lock; everything else runs in the polling thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import ray

from raylog.clients.member import MemberState, assignment_change
from raylog.common.assignors import COOPERATIVE
from raylog.common.names import check_group_id
from raylog.errors import (
    CommitFailedError,
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    IllegalGenerationError,
    RaylogError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from raylog.protocol import JoinGroupRequest, error_of
from raylog.transport import call
from raylog.types import OffsetAndMetadata, TopicPartition

if TYPE_CHECKING:
    from raylog.clients.security import ClientSession
from raylog.clients.cluster import RaylogCluster

#: Extra time a call to the coordinator may take beyond what the call itself waits.
CALL_MARGIN_S = 30.0
#: A commit refused for one of these means the member's generation is over.
_FENCED = (IllegalGenerationError, UnknownMemberIdError, RebalanceInProgressError)
#: A call refused for one of these cost the member its generation (and what it holds).
_LOST = (IllegalGenerationError, UnknownMemberIdError)


class CoordinatorClient:
    """Calls to one group's coordinator. Concurrency: thread-safe."""

    def __init__(
        self,
        cluster: RaylogCluster,
        group_id: str,
        timeout_s: float,
        retry_backoff_s: float,
        find: str = "find_coordinator",
        session: ClientSession | None = None,
    ):
        """``find``: the controller's method that finds the coordinator of ``group_id``
        (``find_transaction_coordinator`` for a transactional id's); ``session``: the client's
        principal (None: anonymous).

        Raises:
            InvalidGroupIdError: ``group_id`` is not one Kafka would accept.
        """
        if find == "find_coordinator":
            check_group_id(group_id)
        self.group_id = group_id
        self._find = find
        self._cluster = cluster
        self._timeout_s = timeout_s
        self._backoff_s = retry_backoff_s
        self._lock = threading.Lock()
        self._handle: Any = None
        self._session = session

    def handle(self) -> Any:
        """The coordinator's actor (found through the controller when not known).

        Raises:
            CoordinatorNotAvailableError: the group's partition has no leader right now.
        """
        with self._lock:
            if self._handle is None:
                finder = getattr(self._cluster.controller, self._find)
                _, handle = call(finder.remote(self.group_id, session=self._token()), self._timeout_s)
                if handle is None:
                    raise CoordinatorNotAvailableError(f"no coordinator for {self.group_id!r} right now")
                self._handle = handle
            return self._handle

    def forget(self) -> None:
        with self._lock:
            self._handle = None

    def _token(self) -> str | None:
        return None if self._session is None else self._session.token()

    def remote(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call ``method`` on the coordinator with the client's session token; the reference.

        Raises:
            CoordinatorNotAvailableError: see :meth:`handle`.
        """
        return getattr(self.handle(), method).remote(*args, session=self._token(), **kwargs)

    def call(self, method: str, *args: Any, wait_s: float = 0.0) -> Any:
        """Call ``method`` on the coordinator and return the response's value, retrying
        retriable errors (finding the coordinator again) until ``timeout_s``.

        Raises:
            The response's typed error when it is not retriable, or the last retriable
            one when time ran out.
        """
        deadline = time.monotonic() + self._timeout_s + wait_s
        while True:
            try:
                return self.check(call(self.remote(method, *args), wait_s + CALL_MARGIN_S))
            except RaylogError as exc:
                if not exc.retriable or time.monotonic() + self._backoff_s >= deadline:
                    raise
                self.after_error(exc)
                time.sleep(self._backoff_s)

    def check(self, response: Any) -> Any:
        """The value of a response, or its error raised."""
        error = error_of(response)
        if error is not None:
            raise error
        return getattr(response, "value", response)

    def after_error(self, exc: RaylogError) -> None:
        """Forget the coordinator when the error says it moved or died."""
        if exc.invalid_metadata or exc.retriable:
            self.forget()


class ConsumerRebalanceListener:
    """Callbacks around a rebalance, run in the thread that calls ``poll``.

    ``on_partitions_revoked`` runs before partitions are given up (commit their offsets
    here if you commit by hand), ``on_partitions_assigned`` after new ones arrive (their
    positions are the committed offsets, or ``auto_offset_reset``), and
    ``on_partitions_lost`` when they were taken away without a chance to commit (the
    member was expired or fenced); by default lost partitions are treated as revoked.
    """

    def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        """Partitions given up in this rebalance."""

    def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        """Partitions added in this rebalance."""

    def on_partitions_lost(self, lost: list[TopicPartition]) -> None:
        self.on_partitions_revoked(lost)


class GroupMembership:
    """A consumer's membership in its group (see the module docstring)."""

    def __init__(
        self,
        coordinator: CoordinatorClient,
        *,
        instance_id: str | None,
        client_id: str,
        strategies: tuple[str, ...],
        session_timeout_ms: int,
        heartbeat_interval_ms: int,
        max_poll_interval_ms: int | None,
        subscription: Callable[[], dict[str, int]],
        owned: Callable[[], list[TopicPartition]],
        apply: Callable[[list[TopicPartition], list[TopicPartition]], None],
        listener: ConsumerRebalanceListener,
    ):
        self.coordinator = coordinator
        self.group_id = coordinator.group_id
        self.instance_id = instance_id
        self._client_id = client_id
        self._strategies = strategies
        self._session_timeout_ms = session_timeout_ms
        self._heartbeat_interval_s = heartbeat_interval_ms / 1000
        self._max_poll_interval_ms = max_poll_interval_ms
        self._subscription = subscription  # topic -> partition count the member wants now
        self._owned = owned
        self._apply = apply  # (added, revoked)
        self.listener = listener
        self._lock = threading.Lock()
        self._state = MemberState()
        self._rejoin = True
        self._joining = False  # a join is outstanding: no heartbeats, rebalance news is not news
        self._fatal: RaylogError | None = None
        self._join_ref: Any = None
        self._join_sent_as: tuple[str, int] = ("", -1)  # (member id, generation) of that join
        self._joined_topics: dict[str, int] = {}
        self._last_poll = time.monotonic()
        self._stop = threading.Event()
        self._thread = start_heartbeat_thread(self._heartbeat_loop, self.group_id)

    # --- driven by poll -----------------------------------------------------------------

    def maintain(self) -> None:
        """One step of group upkeep from ``poll``: notice changes, start or finish a join.

        Raises:
            FencedInstanceIdError: another consumer took this static member's place.
        """
        self._last_poll = time.monotonic()
        if self._fatal is not None:
            raise self._fatal
        with self._lock:
            lost = self._state.lost(self._owned())
        if lost:  # the member lost its generation (expired, fenced, left): someone else may own them
            self._give_up(lost, lost=True)
        if self._join_ref is not None:
            ready, _ = ray.wait([self._join_ref], timeout=0)
            if ready:
                self._finish_join()
            return
        if self._subscription() != self._joined_topics:
            self._rejoin = True  # a new matching topic, or partitions added
        if self._rejoin:
            self._start_join()

    def waitables(self) -> list[Any]:
        """Outstanding calls ``poll`` may wait on together with its fetches."""
        return [] if self._join_ref is None else [self._join_ref]

    def close(self, leave: bool) -> None:
        """Stop heartbeating; leave the group (dynamic members) so it rebalances at once."""
        self._stop.set()
        with self._lock:
            member_id = self._state.member_id
            self._state.left()
        if leave and member_id and self.instance_id is None:
            try:
                self.coordinator.call("leave_group", self.group_id, member_id, None)
            except RaylogError:
                pass  # the session timeout removes it instead
        self._thread.join(timeout=self._heartbeat_interval_s + CALL_MARGIN_S)

    # --- commits --------------------------------------------------------------------------

    def commit_args(self) -> tuple[str, int, str | None]:
        with self._lock:
            return self._state.member_id, self._state.generation, self.instance_id

    def member_commit_args(self) -> tuple[str, int, str | None]:
        return in_group(self.commit_args())

    def commit(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        """Commit synchronously as this member.

        Raises:
            CommitFailedError: the member's generation is over (its partitions may have moved).
        """
        member_id, generation, instance_id = self.member_commit_args()
        try:
            self.coordinator.call("commit_offsets", self.group_id, member_id, generation, instance_id, offsets)
        except _FENCED as exc:
            self.request_rejoin()
            raise CommitFailedError(f"commit refused: {exc}; poll() to rejoin the group") from None

    def request_rejoin(self) -> None:
        with self._lock:
            self._rejoin = True

    # --- joining --------------------------------------------------------------------------

    def _start_join(self) -> None:
        with self._lock:
            plan = self._state.prepare_join(self._owned(), self._strategies[0] in COOPERATIVE)
            sent_as = (self._state.member_id, self._state.generation)
        if plan.lost:
            self._give_up(list(plan.lost), lost=True)
        if plan.revoked:  # eager protocol: give everything up before joining
            self._give_up(list(plan.revoked), lost=False)
        topics = self._subscription()
        request = JoinGroupRequest(
            group_id=self.group_id,
            member_id=sent_as[0],
            topics=tuple(sorted(topics)),
            partition_counts=topics,
            strategies=self._strategies,
            owned=plan.owned,
            owned_generation=plan.generation,
            instance_id=self.instance_id,
            client_id=self._client_id,
            session_timeout_ms=self._session_timeout_ms,
            rebalance_timeout_ms=self._max_poll_interval_ms or 300_000,
        )
        try:
            self._join_ref = self.coordinator.remote("join_group", request)
        except RaylogError as exc:
            if not exc.retriable:
                raise
            self.coordinator.after_error(exc)
            return  # retried at the next poll
        self._joined_topics, self._join_sent_as = topics, sent_as
        with self._lock:
            self._rejoin, self._joining = False, True

    def _finish_join(self) -> None:
        ref, self._join_ref = self._join_ref, None
        with self._lock:
            self._joining = False
        try:
            response = self.coordinator.check(call(ref, None))
        except RaylogError as exc:
            self._join_failed(exc, self._join_sent_as)
            return
        with self._lock:
            self._state.joined(response.member_id, response.generation)
        try:
            assignment = self.coordinator.call(
                "sync_group", self.group_id, response.member_id, response.generation, self.instance_id
            )
        except RaylogError as exc:
            self._join_failed(exc, (response.member_id, response.generation))
            return
        added, revoked = assignment_change(self._owned(), [TopicPartition(*tp) for tp in assignment.assignment])
        if revoked:
            self.listener.on_partitions_revoked(revoked)
        self._apply(added, revoked)
        self.listener.on_partitions_assigned(added)
        if revoked and self._strategies[0] in COOPERATIVE:
            self.request_rejoin()  # the follow-up round hands the revoked partitions on

    def _join_failed(self, exc: RaylogError, sent_as: tuple[str, int]) -> None:
        """A join or its sync, sent as ``(member id, generation)``, failed: rejoin (what the
        member holds is lost first if the error cost it its generation), or raise."""
        if isinstance(exc, FencedInstanceIdError):
            self._fatal = exc
            raise exc
        if not (exc.retriable or isinstance(exc, (RebalanceInProgressError, *_LOST))):
            raise exc
        with self._lock:
            self._state.failed(exc, *sent_as)
        self.coordinator.after_error(exc)
        self.request_rejoin()

    def _give_up(self, partitions: list[TopicPartition], lost: bool) -> None:
        """Stop reading ``partitions`` (the listener hears it as lost or as revoked)."""
        if lost:
            self.listener.on_partitions_lost(partitions)
        else:
            self.listener.on_partitions_revoked(partitions)
        self._apply([], partitions)
        self.request_rejoin()

    # --- heartbeats -------------------------------------------------------------------------

    def _heartbeat_loop(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                member_id, generation, joining = self._state.member_id, self._state.generation, self._joining
            if not member_id or generation < 0 or joining:
                self._stop.wait(min(self._heartbeat_interval_s, 0.1))
                continue
            if self._poll_interval_exceeded(member_id):
                continue
            try:
                self.coordinator.check(
                    call(
                        self.coordinator.remote(
                            "heartbeat",
                            self.group_id,
                            member_id,
                            generation,
                            self.instance_id,
                            int(self._heartbeat_interval_s * 1000),
                        ),
                        self._heartbeat_interval_s + CALL_MARGIN_S,
                    )
                )
                continue  # the long poll paced it
            except RebalanceInProgressError:
                self._rejoin_unless_moved_on(generation)
            except _LOST as exc:
                with self._lock:
                    if self._state.failed(exc, member_id, generation, joining=self._joining):
                        self._rejoin = True  # the next poll gives its partitions up as lost
            except FencedInstanceIdError as exc:
                self._fatal = exc
                return
            except RaylogError as exc:
                self.coordinator.after_error(exc)
            self._stop.wait(min(self._heartbeat_interval_s, 0.1))

    def _poll_interval_exceeded(self, member_id: str) -> bool:
        if self._max_poll_interval_ms is None:
            return False
        if (time.monotonic() - self._last_poll) * 1000 <= self._max_poll_interval_ms:
            return False
        # Like Kafka: the application is stuck, so give the partitions to someone else.
        if self.instance_id is None:
            try:
                self.coordinator.call("leave_group", self.group_id, member_id, None)
            except RaylogError:
                pass
        with self._lock:
            self._state.left()
            self._rejoin = True  # the next poll gives its partitions up as lost
        self._stop.wait(self._heartbeat_interval_s)
        return True

    def _rejoin_unless_moved_on(self, generation: int) -> None:
        """Rejoin, unless a join is under way or completed since the heartbeat was sent."""
        with self._lock:
            if not self._joining and self._state.generation == generation:
                self._rejoin = True


def in_group(commit_args: tuple[str, int, str | None]) -> tuple[str, int, str | None]:
    """``commit_args`` (member id, generation or member epoch, instance id) of a member that
    is in its group now.

    Raises:
        CommitFailedError: it is not (not joined yet, expired or fenced): generation -1
            would make it a commit from outside the group, which the coordinator accepts
            once the group is empty, so a zombie could move offsets back.
    """
    if commit_args[1] < 0:  # (a join is under way or already requested: no need to ask for one)
        raise CommitFailedError("this member is not in its group now; poll() to rejoin it")
    return commit_args


def start_heartbeat_thread(loop: Callable[[], None], group_id: str) -> threading.Thread:
    """A group member's heartbeat thread, started (a daemon: it never holds a process up)."""
    thread = threading.Thread(target=loop, name=f"raylog-heartbeat-{group_id}", daemon=True)
    thread.start()
    return thread


def offsets_to_commit(offsets: Mapping[Any, Any]) -> dict[TopicPartition, OffsetAndMetadata]:
    """What ``commit``, ``send_offsets_to_transaction`` and ``alter_consumer_group_offsets``
    take: per partition the offset of the next record to read, or an
    :class:`OffsetAndMetadata` or kafka-python's (metadata None counts as "", as kafka-python
    allows; a leader epoch is kept)."""
    out = {}
    for tp, given in offsets.items():
        given = OffsetAndMetadata(*given) if isinstance(given, tuple) else OffsetAndMetadata(given)
        if given.metadata is None:
            given = given._replace(metadata="")
        out[TopicPartition(*tp)] = given
    return out


def committed_offsets(
    coordinator: CoordinatorClient, partitions: Iterable[TopicPartition] | None
) -> dict[TopicPartition, OffsetAndMetadata]:
    """The group's committed offsets (of ``partitions``, or all)."""
    wanted = None if partitions is None else [TopicPartition(*tp) for tp in partitions]
    found = coordinator.call("fetch_offsets", coordinator.group_id, wanted)
    return {TopicPartition(*tp): OffsetAndMetadata(*o) for tp, o in found.items()}
