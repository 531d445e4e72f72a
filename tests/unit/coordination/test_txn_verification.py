"""Transactional writes verified against the transaction coordinator (KIP-890 part 1), no
Ray: a transactional batch whose producer has no transaction open in the partition opens
one only once the coordinator said the partition is in that producer's ongoing
transaction; the coordinator's answer; how its errors reach the producer."""

from __future__ import annotations

import pytest

from raylog.common import record_batch
from raylog.coordination.partition import Partition
from raylog.coordination.transactions import TransactionCoordinator
from raylog.coordination.txn_verification import VerificationNeeded, verification_error
from raylog.errors import (
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    NotCoordinatorError,
    NotEnoughReplicasError,
    RequestTimedOutError,
)
from raylog.types import ProducerState, TopicPartition
from tests.unit.coordination.test_partition_transactions import COORDINATOR_EPOCH, plain, reopen, txn, values
from tests.unit.coordination.test_transactions import Ids, apply, init, open_txn

TID = "copier"
T0 = TopicPartition("t", 0)


@pytest.fixture
def part(open_log, clock) -> Partition:
    return reopen(open_log, clock)


def produce(p: Partition, data: bytes, tid: str | None = TID) -> int:
    """A client's produce (acks=1), verified; the first offset."""
    return p.append_as_leader(data, acks=1, transactional_id=tid, verify=True).first_offset


def needs_verifying(p: Partition, data: bytes, tid: str | None = TID) -> VerificationNeeded:
    """The leader's request to verify ``data`` first; nothing is written meanwhile."""
    end = p.log.log_end_offset
    with pytest.raises(VerificationNeeded) as raised:
        produce(p, data, tid)
    assert p.log.log_end_offset == end
    return raised.value


def verified_produce(p: Partition, data: bytes, tid: str = TID) -> int:
    """A produce the coordinator vouches for: verification asked, answered, then appended."""
    p.verification_answered(needs_verifying(p, data, tid), True)
    return produce(p, data, tid)


# --- the partition ------------------------------------------------------------------------


def test_a_transactional_batch_of_an_unknown_producer_opens_no_transaction(part):
    """Trigger (b): a made-up producer id's transactional batch is held for verification;
    it opens nothing, so the LSO goes on with the HW and read_committed readers see later
    records."""
    needed = needs_verifying(part, txn([b"bogus"], pid=424242))
    assert (needed.transactional_id, needed.producer_id, needed.producer_epoch) == (TID, 424242, 0)
    assert part.producers.first_open_offset() is None
    produce(part, plain([b"p0"]))
    assert part.last_stable_offset == part.high_watermark == 1
    assert values(part) == [b"p0"]


def test_a_verified_batch_opens_the_transaction_and_its_later_batches_need_no_call(part):
    """Verification is cached in the partition: once the transaction is open here, the
    producer's next batches append at once; the marker ends it, and the next transaction's
    first batch is verified again."""
    assert verified_produce(part, txn([b"a0"], pid=5)) == 0
    assert part.last_stable_offset == 0
    assert produce(part, txn([b"a1"], pid=5, seq=1)) == 1  # no VerificationNeeded
    assert part.append_marker(5, 1, True, COORDINATOR_EPOCH).first_offset == 2
    assert part.last_stable_offset == 3
    needs_verifying(part, txn([b"b0"], pid=5, epoch=1))
    assert verified_produce(part, txn([b"b0"], pid=5, epoch=1)) == 3


def test_a_late_batch_after_a_marker_that_kept_the_epoch_is_verified_again(part):
    """Trigger (a): a Kafka client at EndTxn v0-3 keeps its epoch, so the marker cannot fence
    a batch of the ended transaction that arrives after it; that batch is verified (and the
    coordinator, whose transaction is over, refuses it) instead of opening a transaction."""
    verified_produce(part, txn([b"a0"], pid=5))
    part.append_marker(5, 0, True, COORDINATOR_EPOCH, bumps_epoch=False)
    needs_verifying(part, txn([b"late"], pid=5, seq=1))
    assert part.producers.first_open_offset() is None
    assert part.last_stable_offset == part.high_watermark == 2


def test_a_marker_while_the_coordinator_is_asked_voids_the_answer(part):
    """The coordinator is asked without the partition lock; a marker for the producer that
    lands meanwhile ends what was verified, so the answer opens nothing: the batch is
    verified again (Kafka's verification guard). A stale marker too (it writes nothing: this
    partition had nothing of the transaction it ends), else a yes given before the coordinator
    aborted that transaction opens it after its marker, for good (found by the seeded
    simulation, seed 806: see test_transaction_simulation.py)."""
    verified_produce(part, txn([b"a0"], pid=5))
    part.append_marker(5, 0, True, COORDINATOR_EPOCH, bumps_epoch=False)
    needed = needs_verifying(part, txn([b"a1"], pid=5, seq=1))
    assert part.append_marker(5, 0, False, COORDINATOR_EPOCH, bumps_epoch=False) is None  # stale
    produce(part, plain([b"p"]))
    other = needs_verifying(part, txn([b"x"], pid=9))
    part.append_marker(9, 1, False, COORDINATOR_EPOCH)  # the coordinator aborts pid 9 meanwhile
    part.verification_answered(other, True)
    needs_verifying(part, txn([b"x"], pid=9, epoch=1))
    part.verification_answered(needed, True)
    again = needs_verifying(part, txn([b"a1"], pid=5, seq=1))  # the yes came before the stale marker
    part.verification_answered(again, True)  # (a coordinator with a new transaction open says yes again)
    assert produce(part, txn([b"a1"], pid=5, seq=1)) == 4
    assert part.producers.first_open_offset() == 4


def test_a_refusal_leaves_nothing_behind(part):
    """Made-up producer ids cost the partition no memory once refused."""
    for pid in range(1000, 1100):
        part.verification_answered(needs_verifying(part, txn([b"x"], pid=pid)), False)
    assert len(part.verifications) == 0 and len(part.producers) == 0


def test_a_transactional_batch_without_its_transactional_id_is_refused(part):
    """Nothing can be verified without the transactional id (Kafka's Produce v3+ carries it)."""
    with pytest.raises(InvalidTxnStateError):
        produce(part, txn([b"x"], pid=5), tid=None)
    assert part.log.log_end_offset == 0


def test_a_stale_epoch_is_fenced_before_anything_is_asked(part):
    verified_produce(part, txn([b"a0"], pid=5))
    part.append_marker(5, 1, True, COORDINATOR_EPOCH)
    with pytest.raises(InvalidProducerEpochError):
        produce(part, txn([b"late"], pid=5, seq=1))


def test_verification_can_be_turned_off_per_topic(open_log, clock):
    """transaction.partition.verification.enable=false: Kafka before 3.6 (a made-up producer
    opens a transaction that no marker ends; find-hanging and abort are the way out)."""
    part = reopen(open_log, clock, **{"transaction.partition.verification.enable": "false"})
    assert produce(part, txn([b"x"], pid=424242)) == 0
    assert part.producers.first_open_offset() == 0


def test_trusted_writers_are_not_verified(part):
    """The group coordinator writes a transaction's offsets itself (verify=False)."""
    assert part.append_as_leader(txn([b"o"], pid=5, seq=-1), acks=1).first_offset == 0


# --- the coordinator's answer -------------------------------------------------------------


def test_the_coordinator_vouches_only_for_partitions_of_the_ongoing_transaction():
    ids = Ids()
    c = TransactionCoordinator()
    m = open_txn(c, ids, TID, partitions=(T0,))
    c.verify(TID, m.producer_id, m.producer_epoch, T0)
    with pytest.raises(InvalidTxnStateError):
        c.verify(TID, m.producer_id, m.producer_epoch, TopicPartition("t", 1))  # not added
    with pytest.raises(InvalidTxnStateError):
        c.verify("never-initialised", m.producer_id, m.producer_epoch, T0)
    with pytest.raises(InvalidTxnStateError):
        c.verify(TID, 424242, 0, T0)  # a made-up producer id
    with pytest.raises(InvalidTxnStateError):
        c.verify(TID, m.producer_id, m.producer_epoch + 1, T0)


def test_the_coordinator_refuses_a_transaction_that_ended_without_bump():
    ids = Ids()
    c = TransactionCoordinator()
    m = open_txn(c, ids, TID)
    apply(c, c.end(TID, m.producer_id, m.producer_epoch, True, 1, ids, bump_epoch=False))
    with pytest.raises(ConcurrentTransactionsError):  # prepared: markers being written
        c.verify(TID, m.producer_id, m.producer_epoch, T0)
    apply(c, c.complete(TID, 2))
    with pytest.raises(InvalidTxnStateError):
        c.verify(TID, m.producer_id, m.producer_epoch, T0)


def test_the_coordinator_fences_an_older_epoch():
    ids = Ids()
    c = TransactionCoordinator()
    m = init(c, ids, TID)
    init(c, ids, TID)
    with pytest.raises(InvalidProducerEpochError):
        c.verify(TID, m.producer_id, m.producer_epoch, T0)


@pytest.mark.parametrize(
    "error",
    [
        NotCoordinatorError("moved"),
        CoordinatorNotAvailableError("none"),
        CoordinatorLoadInProgressError("loading"),
        ConcurrentTransactionsError("completing"),
        RequestTimedOutError("no answer"),
    ],
)
def test_a_coordinator_that_cannot_answer_gives_the_producer_a_retriable_error(error):
    """As Kafka's ReplicaManager: NOT_ENOUGH_REPLICAS, retriable by every client, which
    does not make it refresh its metadata."""
    mapped = verification_error(error)
    assert isinstance(mapped, NotEnoughReplicasError) and str(error) in str(mapped)


def test_a_coordinators_refusal_reaches_the_producer_as_it_is():
    refused = InvalidTxnStateError("not in the transaction")
    assert verification_error(refused) is refused


def test_the_partition_describes_its_producers(part, clock):
    now = clock()
    verified_produce(part, txn([b"a0", b"a1"], pid=5))
    produce(part, record_batch.build([b"i"], producer_id=6, producer_epoch=2, base_sequence=0))
    assert part.producers.describe() == [ProducerState(5, 0, 1, now, 0), ProducerState(6, 2, 0, now, -1)]
