"""The group coordinator as a step core: the order of its appends and of its answers (no Ray,
clock, thread or file). The group coordinator actor and the seeded simulation both pump it.

:class:`~raylog.coordination.group.GroupCoordinator` says what a request does to a group;
:class:`GroupCore` says when each caller is answered. ``step(event)`` returns the effects, in
order:

- :class:`Append`: append the records to the coordinator's partition with acks=all (as the
  transactional batch of a producer, for a TxnOffsetCommit), in the order the effects come,
  then step :class:`Persisted` with the token once the ISR has them (or with the error that
  kept them from it). Appends may be persisted in any order: the core never applies a
  record when its append is persisted. Offsets follow the log: the pump replays the
  partition up to the high watermark into :attr:`GroupCore.groups` before every step
  (:class:`~raylog.coordination.replay.LogReplay`), so commits, transactional offsets and
  markers take effect in log order, whoever's wait ends first.
- :class:`Reply`: the answer to a request (the pump's handle for it), a response object:
  each request is answered once.

The sequences, as Kafka's coordinator makes them:

- JoinGroup / SyncGroup: answered when the join completes (or the leader member's assignment
  came); a reply that tells a member its generation is held until the group record is
  persisted; a failed append answers them with the append's error and rebalances the group.
- Heartbeat: a long poll. Answered at once with the member's error; else parked until its
  group starts rebalancing (or the member is no longer current), which is answered at once,
  or until the pump steps :class:`BeatDue` at the end of its wait.
- OffsetCommit and TxnOffsetCommit: answered once the records are persisted.
- ConsumerGroupHeartbeat (KIP-848): answered at once, or once the group's record is
  persisted where the heartbeat changed the group.
- LeaveGroup: answered at once; the group rebalances.
- :class:`Unload`: the coordinator moved: every request still waiting is answered
  NOT_COORDINATOR.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from raylog.common.group_protocol import Heartbeat
from raylog.coordination.group import PREPARING_REBALANCE, GroupCoordinator, Outcome
from raylog.errors import NotCoordinatorError, RaylogError
from raylog.protocol import GroupResponse, JoinGroupRequest, JoinGroupResponse, SyncGroupResponse, error_fields
from raylog.types import OffsetAndMetadata, TopicPartition

# --- events ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Join:
    waiter: Any
    request: JoinGroupRequest
    now_ms: int


@dataclass(frozen=True)
class Sync:
    """A SyncGroup; ``assignments`` from the leader member (where it assigns), else None."""

    waiter: Any
    group_id: str
    member_id: str
    generation: int
    instance_id: str | None
    now_ms: int
    assignments: dict[str, bytes] | None = None


@dataclass(frozen=True)
class Beat:
    """A Heartbeat that may wait ``wait_ms`` (the pump steps :class:`BeatDue` then);
    ``topics``: the cluster's topics and partition counts the caller sees, if it says."""

    waiter: Any
    group_id: str
    member_id: str
    generation: int
    instance_id: str | None
    now_ms: int
    wait_ms: int = 0
    topics: Mapping[str, int] | None = None


@dataclass(frozen=True)
class BeatDue:
    """The wait of :class:`Beat` ``waiter`` is over."""

    waiter: Any


@dataclass(frozen=True)
class ConsumerBeat:
    """A ConsumerGroupHeartbeat (KIP-848); ``new_member_id``: the id a new member gets."""

    waiter: Any
    request: Heartbeat
    topics: dict[str, int]
    now_ms: int
    new_member_id: str


@dataclass(frozen=True)
class Leave:
    waiter: Any
    group_id: str
    member_id: str
    instance_id: str | None
    now_ms: int


@dataclass(frozen=True)
class Commit:
    """An OffsetCommit, or (``producer``: id and epoch) a TxnOffsetCommit."""

    waiter: Any
    group_id: str
    member_id: str
    generation: int
    instance_id: str | None
    offsets: dict[TopicPartition, OffsetAndMetadata]
    now_ms: int
    producer: tuple[int, int] | None = None


@dataclass(frozen=True)
class Tick:
    now_ms: int


@dataclass(frozen=True)
class Persisted:
    """The records of :class:`Append` ``token`` are in the ISR (``error`` None), or not."""

    token: int
    now_ms: int
    error: Exception | None = None


@dataclass(frozen=True)
class Unload:
    """The coordinator stops coordinating (its replica no longer leads)."""


# --- effects --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Append:
    token: int
    records: list[tuple[bytes, bytes | None]]
    #: Producer fields of a transactional batch (``producer_id``, ``producer_epoch``,
    #: ``transactional``), or none.
    batch: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Reply:
    waiter: Any
    response: JoinGroupResponse | SyncGroupResponse | GroupResponse


def response_type(event: Any) -> type:
    """The kind of response a request gets (its errors too)."""
    return {Join: JoinGroupResponse, Sync: SyncGroupResponse}.get(type(event), GroupResponse)


class GroupCore:
    """See the module docstring. ``groups``: the loaded (and serving) groups."""

    def __init__(self, groups: GroupCoordinator) -> None:
        self.groups = groups
        #: Requests not answered yet -> the kind of response they get.
        self.waiting: dict[Any, type] = {}
        #: Long-polling heartbeats, by waiter.
        self.beats: dict[Any, Beat] = {}
        #: Appends not persisted yet: token -> the outcome whose held replies wait for them,
        #: or the waiter of a commit.
        self._appends: dict[int, Outcome | Any] = {}
        self._tokens = itertools.count()
        self._rebalancing: set[str] = set()  # groups in PreparingRebalance after the last step

    def step(self, event: Any) -> list[Append | Reply]:
        """The effects of ``event``, in order."""
        effects: list[Append | Reply] = []
        if isinstance(event, Persisted):
            self._persisted(event, effects)
        elif isinstance(event, Tick):
            self._deliver(self.groups.tick(event.now_ms), effects)
        elif isinstance(event, BeatDue):
            beat = self.beats.pop(event.waiter, None)
            if beat is not None:
                self._reply(beat.waiter, self._checked(beat), effects)
        elif isinstance(event, Unload):
            self.beats.clear()
            moved = error_fields(NotCoordinatorError("the coordinator moved"))
            for waiter, kind in list(self.waiting.items()):
                self._reply(waiter, kind(**moved), effects)
        else:
            self.waiting[event.waiter] = response_type(event)
            try:
                self._request(event, effects)
            except (RaylogError, ValueError) as exc:
                self._reply(event.waiter, self.waiting[event.waiter](**error_fields(exc)), effects)
        return effects

    def _request(self, event: Any, effects: list) -> None:
        groups = self.groups
        if isinstance(event, Join):
            self._deliver(groups.join(event.request, event.waiter, event.now_ms), effects)
        elif isinstance(event, Sync):
            e = event
            outcome = groups.sync(
                e.group_id, e.member_id, e.generation, e.instance_id, e.waiter, e.now_ms, e.assignments
            )
            self._deliver(outcome, effects)
        elif isinstance(event, Beat):
            e = event
            self._deliver(
                groups.heartbeat(e.group_id, e.member_id, e.generation, e.instance_id, e.now_ms, e.topics), effects
            )
            if e.wait_ms > 0 and e.waiter in self.waiting:
                self.beats[e.waiter] = e
                self._release_beats(effects)  # (its own step may have started a rebalance)
            else:
                self._reply(e.waiter, self._checked(e), effects)
        elif isinstance(event, ConsumerBeat):
            e = event
            outcome = groups.consumer_heartbeat(e.request, e.topics, e.waiter, e.now_ms, lambda: e.new_member_id)
            self._deliver(outcome, effects)
        elif isinstance(event, Leave):
            self._deliver(groups.leave(event.group_id, event.member_id, event.instance_id, event.now_ms), effects)
            self._reply(event.waiter, GroupResponse(), effects)
        elif isinstance(event, Commit):
            e = event
            records = groups.prepare_commit(e.group_id, e.member_id, e.generation, e.instance_id, e.offsets, e.now_ms)
            if not records:
                self._reply(e.waiter, GroupResponse(), effects)
                return
            batch = {}
            if e.producer is not None:
                batch = {"producer_id": e.producer[0], "producer_epoch": e.producer[1], "transactional": True}
            token = next(self._tokens)
            self._appends[token] = e.waiter
            effects.append(Append(token, records, batch))
        else:
            raise TypeError(f"not an event of the group coordinator: {event!r}")

    def _persisted(self, event: Persisted, effects: list) -> None:
        what = self._appends.pop(event.token, None)
        if isinstance(what, Outcome):
            if event.error is None:
                self._deliver(self.groups.persisted(what, event.now_ms), effects)
            else:
                self._deliver(self.groups.append_failed(what, event.error, event.now_ms), effects)
        elif what is not None:  # a commit's waiter
            response = GroupResponse() if event.error is None else GroupResponse(**error_fields(event.error))
            self._reply(what, response, effects)

    def _deliver(self, outcome: Outcome, effects: list) -> None:
        """Release the replies that promise nothing and append the records (their held
        replies wait for :class:`Persisted`); a group that starts rebalancing answers the
        long-polling heartbeats of its members."""
        for waiter, response in outcome.replies:
            self._reply(waiter, response, effects)
        if outcome.records:
            token = next(self._tokens)
            self._appends[token] = outcome
            effects.append(Append(token, outcome.records))
        rebalancing = {g.group_id for g in self.groups.groups.values() if g.state == PREPARING_REBALANCE}
        if outcome.replies or outcome.records or rebalancing - self._rebalancing:
            self._release_beats(effects)
        self._rebalancing = rebalancing

    def _release_beats(self, effects: list) -> None:
        """Answer the parked heartbeats whose member must act now (rejoin, or find it left)."""
        for waiter, beat in list(self.beats.items()):
            response = self._checked(beat)
            if response.error_code:
                del self.beats[waiter]
                self._reply(waiter, response, effects)

    def _checked(self, beat: Beat) -> GroupResponse:
        """The answer a heartbeat gets now: none, or the member's error."""
        try:
            self.groups.heartbeat(beat.group_id, beat.member_id, beat.generation, beat.instance_id, None)
        except (RaylogError, ValueError) as exc:
            return GroupResponse(**error_fields(exc))
        return GroupResponse()

    def _reply(self, waiter: Any, response: Any, effects: list) -> None:
        """Answer ``waiter`` if it still waits (each request is answered once)."""
        if self.waiting.pop(waiter, None) is not None:
            self.beats.pop(waiter, None)
            effects.append(Reply(waiter, response))
