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

Concurrency: not thread-safe; the client guards a :class:`MemberState` with its lock.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import IllegalGenerationError, UnknownMemberIdError
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
