"""A consumer's side of its group membership: the rules that decide what it may keep.

A member owns partitions only within a generation of its group. It knows its member id and
the generation it was last told (a join's reply); what it holds comes from the syncs of
that generation. These are the rules of Kafka's consumer (KIP-429, KIP-792), as pure
functions of that state, so that the client and the group simulation run the same code:

- Before joining, a member without a generation (it never joined, or an error reset it)
  owns nothing: whatever it still holds is *lost* (``on_partitions_lost``; someone else may
  own it now, so there is nothing to commit). With an eager assignor it *revokes*
  everything it holds; with a cooperative one it claims what it holds, together with the
  generation it holds it in (the coordinator honours only claims of the latest generation).
- UNKNOWN_MEMBER_ID resets the member id and the generation; ILLEGAL_GENERATION resets the
  generation (the member id stays); either error is news only while the member is still in
  the generation it was sent from (a join may have completed meanwhile).
- A sync's assignment replaces what the member holds: the difference is revoked and added;
  with a cooperative assignor a revocation asks for a follow-up join, which hands the
  revoked partitions on.

A member of Kafka 4's consumer protocol (KIP-848, :class:`ConsumerProtocolMember`) keeps
less: the coordinator assigns and reconciles, so the member only follows its epoch and the
assignment of its last answer.

Concurrency: not thread-safe; the client guards a :class:`MemberState` or a
:class:`ConsumerProtocolMember` with its lock.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from raylog.common.group_protocol import JOIN_EPOCH, LEAVE_EPOCH, STATIC_LEAVE_EPOCH, Heartbeat, HeartbeatAnswer

from ..errors import FencedMemberEpochError, IllegalGenerationError, UnknownMemberIdError
from ..types import TopicPartition

#: The generation of a member that is in none (Kafka's NO_GENERATION).
NO_GENERATION = -1


@dataclass(frozen=True)
class JoinPlan:
    """What to do before sending a join, and what the join claims."""

    lost: tuple[TopicPartition, ...]  # give up without committing (on_partitions_lost)
    revoked: tuple[TopicPartition, ...]  # give up after committing (on_partitions_revoked)
    owned: tuple[TopicPartition, ...]  # claimed in the join (cooperative assignors only)
    generation: int  # the generation ``owned`` is held in


@dataclass
class MemberState:
    """A member's id and generation (see the module docstring)."""

    member_id: str = ""
    generation: int = NO_GENERATION

    def lost(self, held: Iterable[TopicPartition]) -> list[TopicPartition]:
        """What of ``held`` the member must give up as lost now: all of it when it is in no
        generation (its partitions may have been given to others), else nothing."""
        return sorted(held) if self.generation == NO_GENERATION else []

    def prepare_join(self, held: Iterable[TopicPartition], cooperative: bool) -> JoinPlan:
        """What to give up before joining, and what to claim in the join."""
        held = sorted(held)
        lost = self.lost(held)
        if lost:
            return JoinPlan(lost=tuple(lost), revoked=(), owned=(), generation=NO_GENERATION)
        if not cooperative:
            return JoinPlan(lost=(), revoked=tuple(held), owned=(), generation=self.generation)
        return JoinPlan(lost=(), revoked=(), owned=tuple(held), generation=self.generation)

    def joined(self, member_id: str, generation: int) -> None:
        """A join's reply: the member's id and its new generation."""
        assert generation > NO_GENERATION, "a join reply carries a generation"
        self.member_id, self.generation = member_id, generation

    def failed(self, exc: Exception, member_id: str, generation: int, joining: bool = False) -> bool:
        """A call sent as ``(member_id, generation)`` failed with ``exc``. Returns whether
        the member lost its generation (then what it holds is lost: see :meth:`lost`).

        ``joining``: a join of this member is outstanding. Then ILLEGAL_GENERATION is no news:
        a group whose generation moved past a member it still knows did so through that
        member's join, whose reply (held until the group is written) brings the generation;
        the join's answer decides (a heartbeat sent just before a join may come back so)."""
        if (member_id, generation) != (self.member_id, self.generation):
            return False  # about a membership the member has already left behind
        if isinstance(exc, UnknownMemberIdError):
            self.member_id, self.generation = "", NO_GENERATION
            return True
        if isinstance(exc, IllegalGenerationError) and not joining:
            self.generation = NO_GENERATION
            return True
        return False

    def left(self) -> None:
        """The member left the group (or gave up its place): no id, no generation."""
        self.member_id, self.generation = "", NO_GENERATION


def assignment_change(
    held: Iterable[TopicPartition], assignment: Iterable[TopicPartition]
) -> tuple[list[TopicPartition], list[TopicPartition]]:
    """``(added, revoked)`` going from ``held`` to a sync's ``assignment``."""
    held, assignment = set(held), set(assignment)
    return sorted(assignment - held), sorted(held - assignment)


@dataclass
class ConsumerProtocolMember:
    """A member of a consumer group of Kafka's consumer protocol (KIP-848), as its client sees
    it. It makes its own member id (KIP-1082) and keeps it for its life; its epoch is 0 until
    the coordinator admits it (and again after it was fenced or left); each answer brings its
    epoch and the assignment it may own now, which the client applies (revoking what is not
    in it first) and reports back as what it owns. What it owns is lost, not revoked, when
    the coordinator fenced it (someone else may own it by now)."""

    member_id: str
    epoch: int = JOIN_EPOCH
    #: The assignment of the last answer that carried one, until the client takes it.
    target: frozenset[TopicPartition] | None = None
    #: The member's partitions are lost: the coordinator fenced it (or it left).
    lost: bool = False

    def request(
        self,
        group_id: str,
        topics: Iterable[str],
        owned: Iterable[TopicPartition],
        *,
        instance_id: str | None,
        assignor: str | None,
        rebalance_timeout_ms: int,
    ) -> Heartbeat:
        """The member's next heartbeat. It always carries the member's whole state (its
        subscription by names, rebalance timeout, assignor and what it owns), so that a lost
        answer costs nothing: the next one is a full answer again.

        What it owns is what it ``owned`` and the assignment it was given and has not taken
        yet: the client may start reading those at any moment, so the coordinator must not
        think them released (it would hand them on while the client starts reading them)."""
        return Heartbeat(
            group_id=group_id,
            member_id=self.member_id,
            member_epoch=self.epoch,
            instance_id=instance_id,
            rebalance_timeout_ms=rebalance_timeout_ms,
            topics=tuple(sorted(topics)),
            regex="",
            assignor=assignor,
            owned=frozenset(owned) | (self.target or frozenset()),
        )

    def leave_request(self, group_id: str, instance_id: str | None) -> Heartbeat:
        """The heartbeat that leaves the group: epoch -1, or -2 for a static member (which
        keeps its assignment for its session timeout, for its instance id to take back)."""
        epoch = LEAVE_EPOCH if instance_id is None else STATIC_LEAVE_EPOCH
        return Heartbeat(group_id=group_id, member_id=self.member_id, member_epoch=epoch, instance_id=instance_id)

    def answered(self, answer: HeartbeatAnswer, sent_epoch: int) -> None:
        """A heartbeat sent at ``sent_epoch`` was answered. An answer to a membership the
        member has left behind meanwhile (it was fenced or left while the call was out) is
        no news."""
        if (sent_epoch > JOIN_EPOCH) != (self.epoch > JOIN_EPOCH):
            return
        self.epoch = answer.member_epoch
        if answer.assignment is not None:
            self.target = answer.assignment

    def failed(self, exc: Exception, sent_epoch: int) -> bool:
        """A heartbeat sent at ``sent_epoch`` failed with ``exc``: whether it cost the member
        its membership (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID): then it joins again with
        epoch 0 and what it owns is lost."""
        if not isinstance(exc, (FencedMemberEpochError, UnknownMemberIdError)) or sent_epoch != self.epoch:
            return False
        self.left()
        return True

    def left(self) -> None:
        """The member is out of the group (fenced, or it left): it joins again with epoch 0,
        and what it owns is lost."""
        self.epoch, self.target, self.lost = JOIN_EPOCH, None, True

    def take(self, held: Iterable[TopicPartition]) -> tuple[list[TopicPartition], list[TopicPartition], bool]:
        """What the client must do now with what it ``held``: ``(added, revoked, lost)``;
        with ``lost`` every partition held is given up as lost (and nothing added)."""
        held = set(held)
        if self.lost:
            self.lost = False
            return [], sorted(held), True
        if self.target is None:
            return [], [], False
        target, self.target = self.target, None
        return sorted(target - held), sorted(held - target), False

    def commit_args(self) -> tuple[str, int]:
        """``(member id, epoch)`` an offset commit carries: ``("", -1)`` out of the group."""
        return (self.member_id, self.epoch) if self.epoch > JOIN_EPOCH else ("", -1)
