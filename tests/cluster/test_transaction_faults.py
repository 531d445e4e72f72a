"""Kafka's transactions system test on a real multi-node Ray cluster, as the oracle
(:mod:`raylog.chaos.txn_copier`, where the copier, its ledger, the reader and the checks
live): a quick slice of the campaign that ``raylog bench txn-copier`` runs at full size
(100,000 records in transactions of 1,000 copied at 800 records a second through two rounds
of faults).

The slice copies 24,000 records in transactions of 300 at 200 records a second through one
round of faults: every kind and every variant the full run injects (the copier killed with a
transaction written and not ended, and while committing one; an output partition's leader
node killed; the transaction coordinator killed as an actor and with its node), each once,
and every check of the full run. The two node faults are one where the coordinator's broker
leads an output partition (``one_node_kill``: a node kill and the broker's recovery take about
20 s, a third of the slice); the copy still takes every kind of fault. Its size is set by the
node kills: the copy goes on while a killed broker comes back and catches up, and must not run
out before the last fault; at a pace the copier cannot exceed, that holds on a faster machine
too, and once the faults are done the rest is copied at full speed.

A second test fences a zombie: a copier instance with an open transaction is replaced by a
newer one with the same ``transactional_id``; its next writes and its commit fail with
ProducerFencedError and nothing it wrote appears in the read_committed output.
"""

from __future__ import annotations

import collections

import pytest
import ray

from raylog import Admin
from raylog.chaos.txn_copier import (
    COPY_TIMEOUT_S,
    Copier,
    Ledger,
    check_against_input,
    check_transactions,
    copy_through_faults,
    kill_actors,
    make_topics,
    on_head,
    preload,
    quietly,
    read_all,
)
from raylog.errors import InvalidProducerEpochError, ProducerFencedError

#: The slice: one round (every variant of each fault once), in a copy long enough that the
#: fifth fault still finds it under way after two node kills' recoveries (each about 35 s of
#: copying here, at about 130 records a second: the pace bounds it from above).
SLICE_RECORDS = 24_000
SLICE_TXN_RECORDS = 300
SLICE_ROUNDS = 1
SLICE_RECORDS_PER_S = 200
#: Records of the zombie test.
ZOMBIE_RECORDS = 3_000
ZOMBIE_TXN_RECORDS = 500


@pytest.fixture
def topics(multinode):
    """``topics(prefix)``: a fresh input and output topic (3 partitions, RF 3, min ISR 2),
    deleted after the test."""
    admin = Admin(multinode[0])
    created: list[str] = []

    def make(prefix: str) -> tuple[str, str]:
        names = make_topics(admin, prefix)
        created.extend(names)
        return names

    yield make
    quietly(admin.delete_topics, created)


@pytest.fixture
def actors():
    """A list to put the test's actors in: killed after the test."""
    started: list = []
    yield started
    kill_actors(started)


@pytest.mark.timeout(1200)
def test_transactional_copier_copies_exactly_once_through_faults(multinode):
    """Kafka's transactions system test: the output read_committed equals the input
    exactly, through copier kills, output leader node kills and coordinator kills, and a
    concurrent read_committed reader never reads an aborted or an unfinished transaction."""
    cluster, brokers = multinode
    report = copy_through_faults(
        cluster,
        brokers.start_broker,
        brokers.kill_broker,
        records=SLICE_RECORDS,
        rounds=SLICE_ROUNDS,
        txn_records=SLICE_TXN_RECORDS,
        records_per_s=SLICE_RECORDS_PER_S,
        one_node_kill=True,
    )
    print("\n" + report.text + f"\ntransactions: {report.outcomes}")


def test_a_fenced_zombie_copier_writes_nothing_that_is_read(multinode, topics, actors):
    """A copier with an open transaction is fenced by a newer instance with the same
    transactional id: its next writes and commit fail with ProducerFencedError, its open
    transaction is aborted, and read_committed consumers see only the new instance's copy."""
    cluster, _ = multinode
    source, sink = topics("zombie")
    expected = preload(cluster, source, ZOMBIE_RECORDS)
    ledger = on_head(Ledger).remote()
    zombie = on_head(Copier).remote(cluster, "zombie", source, sink, ledger, ZOMBIE_TXN_RECORDS)
    actors.extend([ledger, zombie])
    ray.get(zombie.start.remote(), timeout=180)
    committed_at, committed_tags = ray.get(zombie.copy.remote(2), timeout=180)
    assert committed_tags, "the zombie committed nothing before it was fenced"
    open_tag, open_count = ray.get(zombie.open_transaction.remote(), timeout=180)
    assert open_count, "the zombie had nothing left to write"

    successor = on_head(Copier).remote(cluster, "successor", source, sink, ledger, ZOMBIE_TXN_RECORDS)
    actors.append(successor)
    resumed = ray.get(successor.start.remote(), timeout=180)  # init_transactions fences the zombie
    fenced = ray.get(zombie.finish_zombie.remote(), timeout=180)
    summary = ray.get(successor.run.remote(), timeout=COPY_TIMEOUT_S)
    assert summary["fenced"] is None, summary

    assert resumed == committed_at, f"the successor did not resume at the zombie's last commit: {resumed}"
    for step in ("send_offsets", "commit", "begin"):
        assert fenced[step] == ProducerFencedError.__name__, f"the zombie's {step}: {fenced}"
    # A write's future fails with the partition's INVALID_PRODUCER_EPOCH, or with the
    # producer's ProducerFencedError once an earlier failure fenced it.
    fenced_sends = {ProducerFencedError.__name__, InvalidProducerEpochError.__name__}
    assert fenced["records"] and set(fenced["sends"]) <= fenced_sends, fenced

    committed = read_all(cluster, sink, "read_committed")
    uncommitted = read_all(cluster, sink, "read_uncommitted")
    check_against_input(expected, committed)
    check_transactions(ray.get(ledger.all.remote(), timeout=60), committed, uncommitted)
    read = {tag for rs in committed.values() for *_, tag, _ in rs if tag.startswith("zombie/")}
    assert read == set(committed_tags), f"the zombie's transactions read: {read}, committed: {committed_tags}"
    in_log = collections.Counter(tag for rs in uncommitted.values() for *_, tag, _ in rs)
    assert in_log[open_tag] == open_count, "the zombie's open transaction is not in the log (aborted) whole"
    assert in_log[fenced["tag"]] == 0, "a write of the fenced zombie reached the log"
