"""Transactions in the seeded simulation (no Ray): the shipped TransactionCoordinator and
MarkerWriter, a transactional producer, markers written by the partition's leaders through
their purgatories, beside the replication faults. After every step: read_committed never shows
an aborted or undecided transaction's record, never shows a committed one torn, the LSO never
goes back, and no transaction is open at the leader that its coordinator does not have open.

The full run: ``raylog bench simulate --schedules 100000`` (transactions are in every schedule).
"""

from __future__ import annotations

import pytest

from raylog.chaos import simulation
from raylog.chaos.simulation import Cluster, read_committed
from tests.unit.coordination.simulation_fixtures import no_fsync, quiet  # noqa: F401 (autouse)

SEEDS = range(40)
STEPS = 300
TXN_HEAVY = simulation.PROFILES["transactions"]


@pytest.mark.parametrize("seed", SEEDS)
def test_transactions_through_faults_are_never_read_aborted_torn_or_left_hanging(tmp_path, seed):
    try:
        simulation.run(str(tmp_path), seed, STEPS, weights=TXN_HEAVY)
    except AssertionError as exc:
        pytest.fail(str(exc), pytrace=False)


def test_the_transaction_schedules_commit_abort_fence_and_crash_the_coordinator(tmp_path):
    """The seeded slice is not idle: it commits and aborts, re-initialises fenced producers,
    crashes the coordinator and retries markers."""
    totals: dict[str, int] = {}
    for seed in SEEDS:
        stats = simulation.run(str(tmp_path / str(seed)), seed, STEPS, lambda c, s: None, weights=TXN_HEAVY).stats
        for name in ("txn_commits", "txn_aborts", "txn_inits", "txn_crashes", "marker_failures"):
            totals[name] = totals.get(name, 0) + getattr(stats, name)
    assert totals["txn_inits"] > len(SEEDS), totals  # some producers were fenced and started anew
    assert all(value > 0 for value in totals.values()), totals


def _producer_in_a_transaction(cluster: Cluster) -> None:
    cluster.settle()
    for _ in range(2):  # InitProducerId, then AddPartitionsToTxn
        cluster.txn()
        cluster.settle()
    assert cluster.txn_client.phase == "send", cluster.report()


def _leader(cluster: Cluster):
    return cluster.replicas[cluster.info.leader].partition


def test_a_late_batch_of_an_aborted_transaction_never_opens_one_its_coordinator_does_not_know(tmp_path):
    """Issue 25, defect 1 (KIP-890 part 1): a Kafka client at EndTxn v0-4 (no epoch bump) gives up
    on a batch, aborts, and starts anew; the batch arrives after the abort marker. Its epoch is
    still the partition's, so only the coordinator can tell it belongs to no transaction: the
    leader asks, and refuses it. Appended, it would open a transaction no coordinator ever ends,
    and every read_committed reader would stop at its first offset for good."""
    cluster = Cluster(str(tmp_path), weights=TXN_HEAVY)
    _producer_in_a_transaction(cluster)
    producer = cluster.txn_client
    producer.bump = False
    cluster.txn()  # the transaction's first batch...
    cluster.delay(producer.request, 60_000)  # ...held up on the way
    producer.request, producer.batch = None, None  # the producer stops waiting, and aborts
    producer.phase, producer.commit, producer.then = "end", False, "init"
    cluster.txn()
    cluster.settle()  # PrepareAbort, the marker written and replicated, CompleteAbort
    assert producer.phase == "init" and cluster.stats.txn_aborts == 1, cluster.report()
    cluster.txn()
    cluster.settle()  # a new epoch for the transactional id
    cluster.tick(60_000)
    cluster.settle()  # the late batch arrives
    cluster.check_invariants(reread=True)
    assert cluster.stats.verifications_refused == 1, cluster.report()
    leader = _leader(cluster)
    assert all(p.current_transaction_start_offset < 0 for p in leader.producers.describe())
    assert leader.last_stable_offset == leader.high_watermark


def test_a_coordinator_that_dies_after_prepare_commit_is_replaced_and_the_commit_is_read_whole(tmp_path):
    """The coordinator journals PrepareCommit and dies before any marker is written; the next
    one loads the journal, its tick writes the markers, and read_committed then shows every
    record of the transaction (before: none, the LSO held at its first offset)."""
    cluster = Cluster(str(tmp_path), weights=TXN_HEAVY)
    _producer_in_a_transaction(cluster)
    producer = cluster.txn_client
    for _ in range(producer.batches):
        cluster.txn()
        cluster.settle()
    assert producer.phase == "end", cluster.report()
    producer.commit = True
    cluster.txn()  # EndTxn: PrepareCommit journaled, the markers on their way
    cluster.deliver(cluster.in_flight_ids("end_txn")[0])
    for marker in cluster.in_flight_ids("txn_marker"):
        cluster.lose(marker)
    cluster.txn_crash()
    leader = _leader(cluster)
    ours = {o: v for o, v in cluster.acknowledged.items() if v.startswith(simulation.TXN_VALUE)}
    assert ours and leader.last_stable_offset <= min(ours)
    cluster.check_invariants(reread=True)
    cluster.txn_tick()
    cluster.settle()
    shown = read_committed(leader)
    assert all(shown.get(o) == v for o, v in ours.items()), cluster.report()
    cluster.check_invariants(reread=True)


def test_a_coordinators_late_yes_never_opens_a_transaction_that_ended_meanwhile(tmp_path):
    """Found by this simulation (seed 806): a leader asks the coordinator about a transaction's
    first batch there (KIP-890) and the coordinator vouches for it, but the answer is slow; the
    producer (a Kafka client at EndTxn v0-4, no epoch bump) gives up and aborts, and the abort
    marker reaches the leader, which has nothing of that transaction: the marker is stale and not
    written. Then the answer arrives. The batch must not open a transaction the coordinator has
    completed (before: it did, and read_committed stopped there for good)."""
    cluster = Cluster(str(tmp_path), weights=TXN_HEAVY)
    _producer_in_a_transaction(cluster)
    producer = cluster.txn_client
    producer.bump = producer.commit = False  # the first transaction: aborted, the epoch kept
    while producer.phase == "send":
        cluster.txn()
        cluster.settle()
    cluster.txn()
    cluster.settle()
    assert producer.phase == "begin" and producer.producer_epoch == 0, cluster.report()
    cluster.txn()
    cluster.settle()  # the next transaction, same epoch
    producer.bump = False
    cluster.txn()  # its first batch: the leader asks the coordinator
    cluster.deliver(cluster.in_flight_ids("produce")[0])
    cluster.deliver(cluster.in_flight_ids("verify")[0])
    cluster.delay(cluster.in_flight_ids("verify_answer")[0], 60_000)  # yes, but slowly
    producer.request, producer.batch = None, None  # the producer stops waiting, and aborts
    producer.phase, producer.commit, producer.then = "end", False, "init"
    cluster.txn()
    cluster.settle()  # PrepareAbort; the marker is stale at the leader; CompleteAbort
    assert producer.phase == "init", cluster.report()
    cluster.tick(60_000)
    cluster.settle()  # the coordinator's yes arrives
    cluster.check_invariants(reread=True)
    leader = _leader(cluster)
    assert all(p.current_transaction_start_offset < 0 for p in leader.producers.describe()), cluster.report()


def test_an_abort_whose_index_write_failed_stays_hidden_after_a_snapshot_and_a_restart(tmp_path):
    """Issue 25, defect 3: the leader writes an abort marker but not its aborted-transaction
    index file (a disk error); the coordinator sends the marker again, which is stale (written
    already). The file must be on disk before anything tells a restart not to read that marker
    again: the stale retry writes it, and no producer snapshot is written past an abort the disk
    lacks. Then the leader's process dies and comes back, leads again, and read_committed still
    hides the aborted records (before: the snapshot covered the marker, a restart never indexed it
    again, and the aborted records became visible for good)."""
    cluster = Cluster(str(tmp_path), weights=TXN_HEAVY)
    _producer_in_a_transaction(cluster)
    producer = cluster.txn_client
    producer.commit = False
    while producer.phase == "send":
        cluster.txn()
        cluster.settle()
    aborted = {o: v for o, v in cluster.acknowledged.items() if v.startswith(simulation.TXN_VALUE)}
    cluster.index_fault(0)
    cluster.txn()
    cluster.settle()  # the marker is written, its index file is not: the marker is answered an error
    assert cluster.stats.marker_failures == 1 and producer.phase == "end", cluster.report()
    cluster.tick(200)
    cluster.txn_tick()
    cluster.settle()  # the marker again (stale), CompleteAbort
    assert producer.phase == "begin" and cluster.stats.txn_aborts == 1, cluster.report()
    cluster.housekeeping(0)  # the producer snapshot
    cluster.crash(0)
    cluster.settle()
    cluster.restart(0)
    for _ in range(10):
        cluster.tick(300)
        cluster.settle()
        for broker in (0, 1, 2):
            cluster.housekeeping(broker)
        cluster.settle()
    cluster.elect_preferred()
    cluster.settle()
    assert cluster.info.leader == 0 and _leader(cluster).is_leader, cluster.report()
    shown = read_committed(_leader(cluster))
    assert not set(shown) & set(aborted), cluster.report()
    cluster.check_invariants(reread=True)
