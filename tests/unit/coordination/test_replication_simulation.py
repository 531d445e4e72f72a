"""Replication safety of one partition on three brokers, simulated step by step (no Ray, no sleeps).

The simulator (``simulation.Cluster``) runs raylog's own replication rules (each replica's
``ReplicaCore`` over its ``Partition`` and ``FollowerFetcher``, the controller's
``ReplicationControl``) over an in-memory transport that delays,
reorders and loses calls, through produce and retries, follower fetches, ISR proposals, re-pushed
states, process crashes, pauses, machine crashes and restarts, chosen by a seeded
``random.Random``. After every step it checks that a leader epoch has one leader and epochs only
grow, that a leader's HW never goes down, that no acknowledged record is lost, that the
idempotent producer's records are written once, that replicas agree below the HW, that every ISR
member holds the committed log and that the log's end as told to clients never goes back.

The full run: ``raylog bench simulate --schedules 10000``.
"""

from __future__ import annotations

import pytest

from raylog.chaos import simulation
from raylog.chaos.simulation import Cluster, Stats
from tests.unit.coordination.simulation_fixtures import no_fsync, quiet  # noqa: F401 (autouse)

SEEDS = range(120)
STEPS = 300
#: Stats that 40 random runs may not reach: scripted below (an offline partition, KIP-207's
#: OFFSET_NOT_AVAILABLE) or in test_transaction_simulation.py (its own weights and scenarios).
RARE_OR_ELSEWHERE = {"offline_steps", "offsets_not_available", "verifications_refused"}


def _run(directory: str, seed: int, steps: int = STEPS, **kwargs) -> Cluster:
    try:
        return simulation.run(directory, seed, steps, **kwargs)
    except AssertionError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.mark.parametrize("seed", SEEDS)
def test_acks_all_with_min_insync_replicas_2_keeps_every_acknowledged_record(tmp_path, seed):
    """acks=all with min.insync.replicas=2: random faults, delays, losses and elections break no invariant."""
    _run(str(tmp_path), seed)


def test_the_simulation_reaches_every_kind_of_step_and_fault(tmp_path):
    """The random runs acknowledge, retry, crash, pause, elect, truncate and reshape the ISR: the
    safety test is not idle."""
    total = Stats()
    for seed in range(40):
        stats = _run(str(tmp_path / str(seed)), seed, check=lambda cluster, step: None).stats
        for name, value in vars(stats).items():
            if isinstance(value, int):
                setattr(total, name, getattr(total, name) + value)
    for name, value in vars(total).items():
        if isinstance(value, int) and name not in RARE_OR_ELSEWHERE:
            assert value > 0, f"no {name} in 40 runs: {total}"


# --- scripted scenarios -------------------------------------------------------------------------


def _write_everywhere(cluster: Cluster, count: int) -> None:
    cluster.produce(count)
    cluster.settle()


def _wait(cluster: Cluster, ms: int) -> None:
    """Let ``ms`` pass while the replicas that run keep fetching (long polls end, fetch again)."""
    for _ in range(ms // 200):
        cluster.tick(200)
        cluster.settle()


def _leader_dies_before_followers_copy(cluster: Cluster) -> None:
    """Write A everywhere, then B on leader 0 only (its followers are paused); 0's machine dies
    and loses all it had not flushed (it never flushes); the followers resume, 1 leads."""
    cluster.settle()
    _write_everywhere(cluster, 3)  # A: offsets 0..2
    cluster.pause(1)
    cluster.pause(2)
    cluster.produce(2)  # B: offsets 3..4, on the leader only
    cluster.settle()
    cluster.machine_crash(0, cut=0.0)
    cluster.resume(1)
    cluster.resume(2)
    cluster.settle()
    cluster.node_back(0)
    cluster.settle()


def test_acks_1_with_min_insync_replicas_1_loses_an_acknowledged_record(tmp_path):
    """acks=1 with min.insync.replicas=1 acknowledges on the leader's append alone: its crash loses it."""
    cluster = Cluster(str(tmp_path), properties={"min.insync.replicas": "1"}, acks=1)
    _leader_dies_before_followers_copy(cluster)
    assert cluster.info.leader == 1
    assert [v for _, v in cluster.lost_acknowledged()] == [b"v3", b"v4"], cluster.report()
    assert cluster.values(0)[:3] == cluster.values(1)[:3] == [b"v0", b"v1", b"v2"]  # A survived
    with pytest.raises(AssertionError, match="3. acknowledged records lost"):
        cluster.check_invariants()


def test_acks_all_with_min_insync_replicas_2_loses_nothing_in_the_same_scenario(tmp_path):
    """With acks=all and min.insync.replicas=2 the same crash loses nothing: B was never acknowledged."""
    cluster = Cluster(str(tmp_path))
    _leader_dies_before_followers_copy(cluster)
    assert cluster.info.leader == 1
    assert cluster.acknowledged == {0: b"v0", 1: b"v1", 2: b"v2"}, cluster.report()
    cluster.check_invariants(reread=True)


def _broker_2_lags_then_catches_up(cluster: Cluster) -> None:
    """Broker 2 falls out of the ISR, comes back and catches up; the leader's proposal to admit
    it again is left in flight."""
    cluster.settle()
    cluster.pause(2)
    _write_everywhere(cluster, 1)
    _wait(cluster, 1600)
    cluster.housekeeping(0)
    cluster.settle()
    assert cluster.info.isr == (0, 1), cluster.report()
    cluster.resume(2)
    cluster.settle(hold=("alter_isr",))
    assert cluster.in_flight_ids("alter_isr") and cluster.replicas[0].partition.pending_isr == (0, 1, 2)


def test_an_equal_epoch_repush_cannot_let_the_hw_pass_a_member_being_admitted(tmp_path):
    """Defect 3: while the leader's proposal to admit broker 2 is in flight, the controller tells
    the leader its state again (same epochs); records written then, which 2 has not fetched, must
    not be committed before the controller admits 2."""
    cluster = Cluster(str(tmp_path))
    _broker_2_lags_then_catches_up(cluster)
    cluster.repush(0)
    cluster.settle(hold=("alter_isr",))
    cluster.pause(2)
    cluster.produce(2)
    cluster.settle(hold=("alter_isr",))  # 0 and 1 have them; 2 does not
    assert cluster.replicas[0].partition.high_watermark == 1, cluster.report()
    cluster.settle()  # the proposal reaches the controller: 2 is admitted
    assert cluster.info.isr == (0, 1, 2)
    cluster.check_invariants(reread=True)


def test_a_lost_isr_answer_keeps_the_proposal_pending(tmp_path):
    """Defect 3: the controller admits broker 2 but its answer is lost (the leader times out); the
    leader must keep counting 2 until it learns the outcome, then learns it by sending again."""
    cluster = Cluster(str(tmp_path))
    _broker_2_lags_then_catches_up(cluster)
    cluster.deliver(cluster.in_flight_ids("alter_isr")[0])  # committed by the controller
    for message_id in cluster.in_flight_ids("isr_answer") + cluster.in_flight_ids("push"):
        if cluster.in_flight[message_id].dst == 0:
            cluster.lose(message_id)
    assert cluster.info.isr == (0, 1, 2) and cluster.replicas[0].partition.pending_isr == (0, 1, 2)
    cluster.pause(2)
    _write_everywhere(cluster, 2)
    cluster.check_invariants(reread=True)
    cluster.housekeeping(0)  # sent again: the controller answers with the state it committed
    cluster.settle()
    assert cluster.replicas[0].partition.isr == (0, 1, 2)
    cluster.check_invariants(reread=True)


def test_followers_one_fetch_behind_under_steady_load_stay_in_the_isr(tmp_path):
    """Defect 9: under steady load every follower's fetch finds a record it does not have yet;
    fetching up to the leader's end as of its previous fetch keeps it in sync for good."""
    cluster = Cluster(str(tmp_path))
    cluster.settle()
    for _ in range(20):
        cluster.produce(1)
        cluster.settle(hold=("fetch_answer",))  # the parked fetches are answered...
        cluster.produce(1)  # ...and the leader appends again before the answers arrive
        cluster.settle(hold=("fetch_answer",))
        cluster.settle()
        cluster.tick(300)
        cluster.housekeeping(0)
        cluster.settle()
        assert cluster.info.isr == (0, 1, 2), cluster.report()
    assert len(cluster.acknowledged) == 40
    cluster.check_invariants(reread=True)


def test_a_paused_leader_is_replaced_and_its_late_writes_are_never_acknowledged(tmp_path):
    """A leader paused (SIGSTOP) for longer than its followers wait is reported; the controller,
    which cannot reach it either, elects another. Resumed, the old leader appends a write sent to
    it meanwhile, but can never commit it: its followers follow the new leader."""
    cluster = Cluster(str(tmp_path))
    cluster.settle()
    _write_everywhere(cluster, 2)
    cluster.pause(0)
    cluster.produce(1)  # waits in flight for the paused leader
    for follower in (1, 2):
        cluster.time_out(follower)
    cluster.settle()
    assert cluster.info.leader == 1 and cluster.info.leader_epoch == 1, cluster.report()
    _write_everywhere(cluster, 2)
    cluster.resume(0)
    cluster.deliver(cluster.in_flight_ids("produce")[0])  # before it hears of its successor
    cluster.check_invariants()
    cluster.settle()
    assert cluster.replicas[0].partition.leader == 1
    assert cluster.values(0) == cluster.values(1) and b"v2" not in cluster.values(1)
    assert sorted(cluster.acknowledged.values()) == [b"v0", b"v1", b"v3", b"v4"]
    cluster.check_invariants(reread=True)


def test_a_new_leader_does_not_answer_latest_below_what_its_predecessor_told(tmp_path):
    """KIP-207: a new leader whose HW lags its predecessor's answers OFFSET_NOT_AVAILABLE until its
    HW reaches the start of its epoch, so the log's end as told to clients never goes back."""
    cluster = Cluster(str(tmp_path))
    cluster.settle()
    _write_everywhere(cluster, 3)
    cluster.list_latest()
    assert cluster.latest_answers == [(0, 3)]
    follower_hw = cluster.replicas[1].partition.high_watermark
    assert follower_hw < 3  # followers learn the HW with their next fetch
    cluster.crash(0)  # the followers learn of it, broker 1 leads with the HW it had
    cluster.time_out(1)
    cluster.settle(hold=("fetch", "epoch_query"))  # broker 2 has not fetched from 1 yet
    assert cluster.info.leader == 1 and cluster.replicas[1].partition.high_watermark == follower_hw
    cluster.list_latest()
    assert cluster.stats.offsets_not_available == 1 and len(cluster.latest_answers) == 1
    cluster.restart(0)
    cluster.settle()
    cluster.list_latest()
    assert cluster.latest_answers[-1] == (1, 3), cluster.report()


def test_a_retried_batch_already_appended_is_answered_only_once_replicated(tmp_path):
    """Defect 1: the idempotent producer's retry finds its batch already appended; the answer
    still waits until the ISR has it, like the first attempt's."""
    cluster = Cluster(str(tmp_path))
    cluster.settle()
    cluster.pause(1)
    cluster.pause(2)
    cluster.send(2)
    cluster.settle()
    cluster.send(2, retry_now=True)  # the producer timed out: the same batch again
    cluster.settle()
    assert cluster.stats.duplicates == 1 and not cluster.acknowledged, cluster.report()
    cluster.resume(1)
    cluster.resume(2)
    cluster.settle()
    assert cluster.acknowledged == {0: b"i0", 1: b"i1"}
    cluster.check_invariants(reread=True)


def test_a_follower_whose_machine_lost_its_log_rejoins_only_once_caught_up(tmp_path):
    """A follower whose machine crashed with nothing flushed comes back empty: the leader's memory
    of its fetches from before must not put it back in the ISR."""
    cluster = Cluster(str(tmp_path))
    cluster.settle()
    _write_everywhere(cluster, 3)
    cluster.machine_crash(1, cut=0.0)
    cluster.settle()
    cluster.node_back(1)
    assert cluster.replicas[1].partition.log.log_end_offset == 0 and cluster.info.isr == (0, 2)
    cluster.housekeeping(0)
    cluster.settle(hold=("fetch",))
    assert 1 not in cluster.info.isr
    cluster.crash(0)
    cluster.time_out(2)
    cluster.settle()
    assert cluster.info.leader == 2 and cluster.lost_acknowledged() == [], cluster.report()
    cluster.check_invariants(reread=True)


def test_the_last_in_sync_replica_down_takes_the_partition_offline_until_it_returns(tmp_path):
    """Unclean election off: when the only ISR member's machine dies, no other replica may lead;
    the partition is offline until that broker is back, then it leads and nothing is lost."""
    cluster = Cluster(str(tmp_path))
    cluster.settle()
    cluster.pause(1)
    cluster.pause(2)
    _wait(cluster, 1600)
    cluster.housekeeping(0)
    cluster.settle()
    assert cluster.info.isr == (0,)
    cluster.machine_crash(0, cut=1.0)  # the node dies; what it wrote stays
    assert cluster.info.leader == -1
    cluster.resume(1)
    cluster.resume(2)
    cluster.settle()
    assert cluster.info.leader == -1
    cluster.node_back(0)
    cluster.settle()
    assert cluster.info.leader == 0 and cluster.lost_acknowledged() == []
    cluster.check_invariants(reread=True)


def test_a_broker_back_with_a_replaced_disk_never_leads_from_a_stale_isr(tmp_path):
    """Defect 10: the only in-sync replica's machine dies and comes back with an empty disk (a new
    directory id): it must not lead the partition it held (its empty log would then truncate
    the others), even though the controller's ISR still names it."""
    cluster = Cluster(str(tmp_path), properties={"min.insync.replicas": "1"})
    cluster.settle()
    _write_everywhere(cluster, 3)
    cluster.pause(1)
    cluster.pause(2)
    _wait(cluster, 1600)
    cluster.housekeeping(0)
    cluster.settle()
    _write_everywhere(cluster, 2)  # acknowledged by leader 0 alone (ISR [0], min.insync.replicas 1)
    assert cluster.info.isr == (0,) and len(cluster.acknowledged) == 5
    cluster.disk_replaced(0)
    cluster.resume(1)
    cluster.resume(2)
    cluster.node_back(0)
    cluster.settle()
    assert cluster.info.leader == -1 and cluster.info.isr == (), cluster.report()
    assert cluster.values(1)[:3] == [b"v0", b"v1", b"v2"]  # nothing truncated them
