"""Replication safety of one partition on three brokers, simulated step by step (no Ray, no sleeps).

The simulator (``simulation.Cluster``) drives real ``Partition`` objects over real logs through
produce, follower fetches (some responses lost), ISR maintenance, process and machine crashes,
restarts and preferred leader elections, chosen by a seeded ``random.Random``, and checks after
every step that leader epochs have one leader each and only grow, that a leader's HW never goes
down, that no acknowledged record is lost, that replicas agree below the HW and that every ISR
member holds the committed log.
"""

from __future__ import annotations

import os

import pytest

from tests.unit.coordination.simulation import Cluster, Stats

SEEDS = range(40)
STEPS = 300


@pytest.fixture(autouse=True)
def no_fsync(monkeypatch):
    """Durability is the simulator's business (a machine crash cuts files past the recovery
    point), so real fsyncs only cost time."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    monkeypatch.setattr(os, "fdatasync", lambda fd: None)


def _run(directory: str, seed: int, steps: int = STEPS, check: bool = True) -> Cluster:
    cluster = Cluster(directory, seed)
    for step in range(steps):
        cluster.step()
        broken = None
        if check:
            try:
                cluster.check_invariants(reread=step % 100 == 99)
            except AssertionError as exc:
                broken = str(exc)
        if broken:
            pytest.fail(f"seed {seed}, step {step}: {broken}\n{cluster.report()}", pytrace=False)
    return cluster


@pytest.mark.parametrize("seed", SEEDS)
def test_acks_all_with_min_insync_replicas_2_keeps_every_acknowledged_record(tmp_path, seed):
    """acks=all with min.insync.replicas=2: random crashes, restarts, lost fetches and elections break no invariant."""
    _run(str(tmp_path), seed)


def test_the_simulation_reaches_every_kind_of_step_and_fault(tmp_path):
    """The random runs acknowledge writes, crash, elect, truncate and reshape the ISR: the safety test is not idle."""
    total = Stats()
    for seed in range(10):
        stats = _run(str(tmp_path / str(seed)), seed, check=False).stats
        for name, value in vars(stats).items():
            if isinstance(value, int):
                setattr(total, name, getattr(total, name) + value)
    for name in (
        "acknowledged",
        "refused",
        "failed_after_append",
        "lost_responses",
        "isr_changes",
        "stale_isr_proposals",
        "leader_changes",
        "crashes",
        "machine_crashes",
        "bytes_lost",
        "offline_steps",
        "truncations",
    ):
        assert getattr(total, name) > 0, f"no {name} in 10 runs: {total}"


# --- a leader that acknowledged a write dies before its followers copied it ------------------


def _leader_dies_before_followers_copy(cluster: Cluster) -> list[tuple[int, bytes]]:
    """Write A everywhere, then B on leader 0 only; 0's machine crashes and loses all it had not
    flushed (it never flushes). Returns B's records."""
    cluster.produce(3)  # A: offsets 0..2
    for follower in (1, 2):
        cluster.fetch(follower)  # copies A
        cluster.fetch(follower)  # tells the leader it has A: the HW passes A
    written_b = cluster.produce(2)  # B: offsets 3..4, on the leader only
    cluster.crash(0, machine=True, cut=0.0)  # broker 1 is elected; it never saw B
    cluster.restart(0)
    cluster.fetch(0)
    cluster.fetch(0)
    return written_b


def test_acks_1_with_min_insync_replicas_1_loses_an_acknowledged_record(tmp_path):
    """acks=1 with min.insync.replicas=1 acknowledges on the leader's append alone: the leader's crash loses it."""
    cluster = Cluster(str(tmp_path), properties={"min.insync.replicas": "1"}, acks=1)
    written_b = _leader_dies_before_followers_copy(cluster)
    assert cluster.info.leader == 1
    assert dict(written_b).items() <= cluster.acknowledged.items()  # B was acknowledged...
    assert cluster.lost_acknowledged() == written_b, cluster.report()  # ...and is gone
    assert cluster.values(0)[:3] == cluster.values(1)[:3] == [b"v0", b"v1", b"v2"]  # A survived
    assert len(cluster.values(0)) == 3  # the old leader truncated B away on its return
    with pytest.raises(AssertionError, match="3. acknowledged records lost"):
        cluster.check_invariants()


def test_acks_all_with_min_insync_replicas_2_loses_nothing_in_the_same_scenario(tmp_path):
    """With acks=all and min.insync.replicas=2 the same crash loses nothing: B was never acknowledged."""
    cluster = Cluster(str(tmp_path))
    written_b = _leader_dies_before_followers_copy(cluster)
    assert cluster.info.leader == 1
    assert cluster.acknowledged == {0: b"v0", 1: b"v1", 2: b"v2"}  # A only; B's request failed
    assert written_b is not None and written_b[0][0] not in cluster.acknowledged
    assert cluster.lost_acknowledged() == []
    cluster.check_invariants()


# --- minimal reproductions of what the random runs found ---------------------------------------


def test_a_restarted_follower_rejoins_the_isr_only_on_fetches_made_after_its_restart(tmp_path):
    """A follower that crashed and came back rejoins the ISR on what it fetched since, not on its fetches before."""
    cluster = Cluster(str(tmp_path))
    cluster.produce(3)  # offsets 0..2
    for follower in (1, 2):
        cluster.fetch(follower)
        cluster.fetch(follower)  # every replica has 0..2: acknowledged
    assert sorted(cluster.acknowledged) == [0, 1, 2]
    cluster.crash(1, machine=True, cut=0.0)  # broker 1 loses its whole (unflushed) log
    cluster.restart(1)  # back with an empty log; it has not fetched yet
    assert cluster.info.isr == (0, 2) and cluster.replicas[1].log.log_end_offset == 0
    cluster.maintain_isr()  # leader 0 still holds broker 1's fetch state from before the crash
    isr = cluster.info.isr
    cluster.crash(0)  # process crash: the first live ISR member in replica order leads
    assert isr == (0, 2) and cluster.lost_acknowledged() == [], (
        f"ISR after broker 1 came back empty: {list(isr)}; acknowledged records lost: "
        f"{cluster.lost_acknowledged()}\n{cluster.report()}"
    )


def test_an_isr_expansion_in_flight_cannot_admit_a_follower_below_the_high_watermark(tmp_path):
    """A follower added by an ISR proposal still in flight while the HW moved on must hold what the HW covers."""
    cluster = Cluster(str(tmp_path))
    cluster.produce(2)  # offsets 0..1
    cluster.fetch(2)
    cluster.fetch(2)
    cluster.tick(1500)  # broker 1 has never fetched: it lags
    cluster.fetch(2)  # broker 2 is caught up
    cluster.maintain_isr()
    assert cluster.info.isr == (0, 2) and sorted(cluster.acknowledged) == [0, 1]
    cluster.fetch(1)
    cluster.fetch(1)  # broker 1 has caught up with 0..1
    cluster.maintain_isr(deliver=False)  # the leader proposes ISR [0, 1, 2]; the proposal is in flight
    cluster.produce(3)  # offsets 2..4
    cluster.fetch(2)
    cluster.fetch(2)  # the HW passes 2..4 over ISR [0, 2]: acknowledged
    cluster.maintain_isr()  # the controller accepts the proposal: broker 1 (LEO 2) joins, HW 5
    isr, follower_end, hw = cluster.info.isr, cluster.replicas[1].log.log_end_offset, cluster.replicas[0].high_watermark
    cluster.crash(0)  # process crash: broker 1, first live ISR member in replica order, leads
    assert (1 not in isr or follower_end >= hw) and cluster.lost_acknowledged() == [], (
        f"ISR {list(isr)} admitted broker 1 at LEO {follower_end} below the HW {hw}; acknowledged records "
        f"lost: {cluster.lost_acknowledged()}\n{cluster.report()}"
    )
