"""The soak's check that no leader is demoted while healthy (``raylog.chaos.leadership``):
which leadership changes a fault explains, on changes and faults written by hand."""

from __future__ import annotations

from raylog.chaos.leadership import GRACE_S, LeaderChange, LeadershipWatch, unexplained
from raylog.chaos.nemesis import FaultEvent
from raylog.errors import RequestTimedOutError

ORIGIN = 1000.0


def change(at_s: float, partition: int, before: tuple[int, int], after: tuple[int, int]) -> LeaderChange:
    return LeaderChange(ORIGIN + at_s, partition, before, after)


def fault(kind: str, start_s: float, end_s: float, *disturbed: tuple[int | None, int]) -> FaultEvent:
    return FaultEvent(kind, start_s=start_s, end_s=end_s, disturbed=set(disturbed))


def test_a_leader_moved_while_no_fault_disturbed_it_is_unexplained():
    moved = change(3.0, 0, (1, 4), (2, 5))
    assert unexplained([moved], [], ORIGIN) == [moved]
    # a fault elsewhere (another broker, another partition, or one that disturbs nothing) does not explain it
    others = [
        fault("pause-replica", 2.0, 4.0, (0, 2)),
        fault("kill-leader", 2.0, 4.0, (1, 1)),
        fault("delay-calls", 0.0, 10.0),
    ]
    assert unexplained([moved], others, ORIGIN) == [moved]


def test_a_fault_on_the_leaders_replica_or_node_explains_its_demotion_from_start_to_grace_after_end():
    on_replica = fault("kill-leader", 2.0, 4.0, (0, 1))
    on_node = fault("kill-node", 2.0, 4.0, (None, 1))
    for event in (on_replica, on_node):
        for at in (2.0, 3.0, 4.0 + GRACE_S):
            assert unexplained([change(at, 0, (1, 4), (2, 5))], [event], ORIGIN) == []
        for at in (1.9, 4.1 + GRACE_S):
            late = change(at, 0, (1, 4), (2, 5))
            assert unexplained([late], [event], ORIGIN) == [late]


def test_a_new_epoch_for_the_same_leader_needs_a_fault_too_and_an_election_from_no_leader_needs_none():
    restarted = change(3.0, 0, (1, 4), (1, 5))
    assert unexplained([restarted], [], ORIGIN) == [restarted]
    assert unexplained([restarted], [fault("kill-leader-pid", 2.5, 3.5, (0, 1))], ORIGIN) == []
    assert unexplained([change(3.0, 0, (-1, 5), (2, 6))], [], ORIGIN) == []


def test_a_fault_never_seen_healed_explains_what_it_disturbed_until_the_end_of_the_run():
    """A killed replica that Ray had not restarted when the nemesis stopped waiting (soak seeds
    150, 154: its restart report, and so its new epoch, came 8-14 s after) disturbs its
    partition as long as the run lasts; a fault that healed does not."""
    gave_up = FaultEvent("kill-leader-pid", start_s=1.3, end_s=40.4, outcome="error: not within 30 s")
    gave_up.disturbed.add((0, 1))
    restarted = change(54.0, 0, (1, 0), (1, 1))
    assert unexplained([restarted], [gave_up], ORIGIN) == []
    assert unexplained([restarted], [fault("kill-leader-pid", 1.3, 40.4, (0, 1))], ORIGIN) == [restarted]
    elsewhere = change(54.0, 1, (1, 0), (1, 1))
    assert unexplained([elsewhere], [gave_up], ORIGIN) == [elsewhere]


class _Admin:
    """describe_topics answering from a script of states (None: the controller times out)."""

    def __init__(self, states):
        self.states = list(states)

    def describe_topics(self, names):
        state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        if state is None:
            raise RequestTimedOutError("paused")
        return [_Topic([_Partition(p, leader, epoch) for p, (leader, epoch) in enumerate(state)])]


class _Topic:
    def __init__(self, partitions):
        self.partitions = partitions


class _Partition:
    def __init__(self, partition, leader, leader_epoch):
        self.partition, self.leader, self.leader_epoch = partition, leader, leader_epoch


def test_the_watch_keeps_each_change_and_skips_samples_that_fail():
    watch = LeadershipWatch(_Admin([[(1, 0), (2, 0)], None, [(1, 0), (3, 1)], [(1, 0), (3, 1)]]), "t")
    for _ in range(4):
        watch._sample()
    assert [(c.partition, c.before, c.after) for c in watch.changes] == [(1, (2, 0), (3, 1))]


def test_a_node_killed_beside_a_lingering_fault_stays_disturbed_until_the_nemesis_brings_it_back(monkeypatch):
    """Seed 437 of the 64-client soak: calls were delayed (a lingering fault) while kill-node
    removed p0's leader's node; kill-node's hold ended at 12.3 s but its node came back only
    when the nemesis healed at 23.3 s, and the controller's election at 20.9 s, with the node
    still dead, was read as a healthy leader demoted. A fault that lasts until the heal now
    ends there."""
    import random

    from raylog.chaos import nemesis as chaos

    clock = [ORIGIN]
    monkeypatch.setattr(chaos.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(chaos.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    n = chaos.Nemesis.__new__(chaos.Nemesis)
    n.max_faults, n.overlap, n.events, n._linger_until = 2, 2, [], None
    n.kinds, n._lingering, n.rng = ["delay-calls", "kill-node"], ["delay-calls"], random.Random(1)

    def inject(event):
        n._event = event
        if event.kind == "kill-node":
            event.disturbed.add((None, 2))
            event.until_healed = True
            clock[0] += 11.4  # the node killed, then its hold
        else:
            n._hold(22.4)  # calls delayed beside the next fault: noted, held after it

    healed = []
    n._inject = inject
    n.heal = lambda: healed.append(clock[0])
    n.run(duration_s=60.0)
    delays, kill = n.events
    assert kill.kind == "kill-node" and kill.end_s == delays.end_s == healed[0] - n.began
    election = change(kill.start_s + 20.0, 0, (2, 0), (1, 1))  # b2's node still dead
    assert unexplained([election], n.events, ORIGIN) == []
