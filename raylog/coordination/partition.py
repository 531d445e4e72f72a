"""One replica of one partition: its log plus the replication rules (no Ray).

A replica is the leader, a follower, or neither (offline). The replica actor turns calls
into these steps:

Leader
- ``append_as_leader``: checks the role, ``acks`` and, for acks=all, that the ISR has at
  least ``min.insync.replicas`` members; appends idempotent batches in sequence order and
  answers a retried one (a duplicate) with the original batch's offsets.
- ``read``: consumers read below the high watermark (HW); a follower's fetch offset is its
  log end offset (LEO), which moves the HW (the smallest LEO in the ISR) and may make it
  eligible to rejoin the ISR.
- ``propose_isr``: the ISR minus followers that have not caught up for
  ``replica.lag.time.max.ms``, plus followers that caught up (by fetches made since they
  last left the ISR). The leader proposes it to the controller, the single writer of ISR
  and leader epoch, and applies it only once accepted (``apply_isr``). While a proposal is
  out, the HW is computed over the current ISR plus the proposed members (Kafka's maximal
  ISR), so a member admitted later already holds everything below the HW.
- ``end_offset_for_epoch``: where a leader epoch ends in this log (KIP-101).

Follower
- ``truncate_to_leader``: with the leader's answer for its latest epoch, cut what diverged.
- ``append_as_follower``: append the leader's bytes unchanged, learn epochs from them, and
  take the HW from the leader.

Producer state (:mod:`raylog.coordination.producer_state`), on every replica: updated by
each append, snapshotted to ``<offset>.snapshot`` files (:mod:`raylog.storage.producer_snapshot`)
when a segment rolls and at each ``checkpoint_producer_state`` when it changed, and
reloaded (on open and after every truncation) from the newest intact snapshot in
``[log start, LEO]`` plus the log's batches from that snapshot's offset on. Snapshots above
the LEO (their batches were cut) or below the log start (retention took their segments)
are deleted, as are, but for the newest, those at no segment's base; a corrupt one is
deleted in favour of an older one, or of the whole log. Producers idle for
``producer.id.expiration.ms`` are forgotten; the cleaner keeps each known producer's last
batch (``producer_last_offsets``), so compaction loses no producer's state.

Transactions: each replica indexes the transactions that markers abort
(:mod:`raylog.storage.txn_index`), from the batches it appends and those it replays. The
leader's last stable offset (LSO) is the HW, or the first offset of the oldest transaction
still open if that is lower; a read_committed fetch reads below the LSO and gets the
aborted transactions its range may meet. ``append_marker`` writes a coordinator's marker
unless it is stale (see :mod:`raylog.coordination.producer_state`). A client's transactional
batch opens a transaction only once its coordinator vouched for it (``VerificationNeeded``,
then ``verification_answered``: :mod:`raylog.coordination.txn_verification`). An abort whose
index file could not be written stays indexed in memory; the marker counts as written (a
stale retry is answered) and a producer snapshot is taken only once the file is written, so
a restart, replaying from an older snapshot, indexes it again.

Invariants: the HW never exceeds the LEO and, while a replica leads, never goes down; a
committed offset (below the HW) is on every ISR member.

Concurrency: not thread-safe; the replica actor calls it under its lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from raylog.common import record_batch
from raylog.common.record_batch import NO_PRODUCER_ID, NO_SEQUENCE
from raylog.common.requests import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    READ_COMMITTED,
    READ_UNCOMMITTED,
)

from ..config import TopicConfig
from ..errors import (
    CorruptRecordError,
    FencedLeaderEpochError,
    InvalidRequestError,
    InvalidRequiredAcksError,
    InvalidTxnStateError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetMovedToTieredStorageError,
    OffsetNotAvailableError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    PolicyViolationError,
    RaylogError,
    StorageError,
    UnknownLeaderEpochError,
)
from ..protocol import MAX_REQUEST_BYTES, FetchRequest, FetchResponse, error_fields
from ..storage import producer_snapshot, txn_index
from ..storage.leader_epoch import UNDEFINED, LeaderEpochCache
from ..storage.log import AppendInfo, Log, wall_clock_ms
from ..types import PartitionInfo
from .producer_state import BatchMetadata, ClosedTransaction, ProducerStateManager, Verdict, require_chain
from .txn_verification import TxnVerifications, VerificationNeeded

logger = logging.getLogger(__name__)

#: replica_id of a consumer's fetch (followers send their broker id).
CONSUMER_REPLICA_ID = -1


class SequenceGap(Exception):
    """An idempotent batch arrived before an earlier one of its producer: wait and retry."""


@dataclass(frozen=True)
class ReadResult:
    data: bytes
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    last_stable_offset: int = -1
    #: read_committed: ``(producer_id, first_offset)`` of the aborted transactions it may meet.
    aborted: tuple = ()


@dataclass
class _Follower:
    """What the leader knows of one follower from its fetches (Kafka's Replica state)."""

    end_offset: int = -1  # unknown until it fetches
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    #: The leader's log end offset when this follower last fetched: a follower that has since
    #: fetched up to it was caught up at the time of that previous fetch.
    last_fetch_leader_end: int = -1
    log_start_offset: int = -1  # its log start, as its last fetch said (unknown until then)


class Partition:
    """See the module docstring."""

    def __init__(
        self,
        topic: str,
        partition: int,
        broker_id: int,
        log: Log,
        config: TopicConfig,
        clock: Callable[[], int] = wall_clock_ms,
    ):
        self.topic = topic
        self.partition = partition
        self.broker_id = broker_id
        self.log = log
        self.config = config
        self._clock = clock
        self.leader: int | None = None
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self.followers: dict[int, _Follower] = {}
        self.pending_isr: tuple[int, ...] | None = None  # a proposal the controller has not answered
        self.leader_epoch_start_offset = 0  # the log end offset when this replica began leading its epoch
        self._resend_isr = False  # the pending proposal's answer never came: send it again
        self.epochs = LeaderEpochCache(log.dir)
        self.epochs.truncate_from_end(log.log_end_offset + 1)  # a crash may have cut the log
        self._checkpointed_high_watermark = log.checkpointed_high_watermark()
        self.high_watermark = min(self._checkpointed_high_watermark, log.log_end_offset)
        self.producers = ProducerStateManager()
        self.verifications = TxnVerifications()
        self.txn_index = txn_index.TransactionIndex(log.dir)
        self._snapshot_version = -1  # the producer state's version the newest snapshot holds
        self._snapshots_kept_for: tuple | None = None  # the log layout snapshots were last pruned for
        #: Tiered storage (``remote.storage.enable``), as this replica's tiering pump last
        #: learned from ``__remote_log_metadata``: the first offset the remote tier holds (None:
        #: it holds none) and the highest offset copied to it (-1: none).
        self.remote_log_start_offset: int | None = None
        self.highest_remote_offset = -1
        #: Whether the pump has read the metadata to its end once: until then the remote
        #: tier's extent is unknown, and what may lie in it is not answered.
        self.remote_tier_ready = False
        log.on_roll = self._snapshot_at_roll
        self._reload_producer_state()

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def log_start_offset(self) -> int:
        """The first offset a consumer may read: the local log's start or, on a tiered partition
        whose remote tier holds offsets below it, the remote tier's first offset (never below
        what DeleteRecords asked for): Kafka's UnifiedLog.logStartOffset. The local log's own
        start is ``log.log_start_offset`` (Kafka's localLogStartOffset). Until the pump has read
        the remote tier's extent, it is the checkpointed start, which is never past the true one
        (the local start may be: a follower taking that for ours would delete up to it)."""
        local, remote = self.log.log_start_offset, self.remote_log_start_offset
        if self.config.remote_storage_enable and not self.remote_tier_ready:
            return self.log.checkpointed_log_start_offset
        if remote is None or remote >= local:
            return local
        return max(remote, self.log.checkpointed_log_start_offset)

    def _require_remote_tier_known(self) -> None:
        """Raises OffsetNotAvailableError (retriable) on a tiered partition whose remote tier's
        extent is not known yet (its pump has not read ``__remote_log_metadata`` through)."""
        if self.config.remote_storage_enable and not self.remote_tier_ready:
            raise OffsetNotAvailableError(f"{self.name}: the remote tier's metadata is still being read")

    def delete_local_segments_below(self, base_offset: int) -> None:
        """A tiered partition's local retention: delete the local segments below the one at
        ``base_offset``, which the remote tier holds (the caller checked).

        Raises:
            StorageError.
        """
        if self.log.delete_segments_below(base_offset, "local retention, copied to the remote tier"):
            self.txn_index.retain(self.log.log_start_offset)

    @property
    def is_leader(self) -> bool:
        return self.leader == self.broker_id

    @property
    def last_stable_offset(self) -> int:
        """Below it every transaction is decided: the HW, or the first offset of the oldest
        open transaction if lower (but never below the log start: retention may have
        removed that first batch, as Kafka's firstUnstableOffset moves up with the log start)."""
        first_open = self.producers.first_open_offset()
        if first_open is None:
            return self.high_watermark
        return min(self.high_watermark, max(first_open, self.log.log_start_offset))

    # --- role changes (from the controller) ---------------------------------------------

    def apply_state(self, state: PartitionInfo) -> bool:
        """Take the controller's state of this partition (Kafka's LeaderAndIsr) if it is newer
        than the one held: states and answers arrive out of order, and the same state may be
        told twice (re-pushes, retries); only a higher ``(leader_epoch, partition_epoch)``
        counts. Returns True when the role moved (a new leader epoch: lead it, or follow anew)."""
        if (state.leader_epoch, state.partition_epoch) <= (self.leader_epoch, self.partition_epoch):
            return False
        new_epoch = state.leader_epoch != self.leader_epoch
        if state.leader == self.broker_id:
            self.become_leader(state.leader_epoch, state.replicas, state.isr, state.partition_epoch)
        else:
            self.become_follower(state.leader, state.leader_epoch, state.replicas, state.isr, state.partition_epoch)
        if new_epoch:
            self._log_role()
        return new_epoch

    def _log_role(self) -> None:
        """The role this replica took in a new leader epoch (once per epoch)."""
        end = self.log.log_end_offset
        if self.is_leader:
            logger.info(
                "%s: broker %d leads in leader epoch %d from offset %d (high watermark %d), ISR %s",
                self.name,
                self.broker_id,
                self.leader_epoch,
                end,
                self.high_watermark,
                list(self.isr),
            )
        elif self.leader is None or self.leader < 0:
            logger.warning(
                "%s: no leader in leader epoch %d (offline); broker %d holds offsets to %d",
                self.name,
                self.leader_epoch,
                self.broker_id,
                end,
            )
        else:
            logger.info(
                "%s: broker %d follows leader %d in leader epoch %d from log end offset %d",
                self.name,
                self.broker_id,
                self.leader,
                self.leader_epoch,
                end,
            )

    def become_leader(
        self, leader_epoch: int, replicas: tuple[int, ...], isr: tuple[int, ...], partition_epoch: int = 0
    ) -> None:
        """Lead from ``leader_epoch``: records from the LEO on belong to that epoch. Told again
        with the epochs it holds (or older ones), a leader changes nothing: dropping its pending
        ISR proposal then would let the HW pass a member the controller may be admitting."""
        was_leader = self.is_leader
        if was_leader and (leader_epoch, partition_epoch) <= (self.leader_epoch, self.partition_epoch):
            return
        self.replicas = tuple(replicas)
        self._set_isr(isr, self.followers if was_leader else {})
        self._drop_isr_proposal()
        if leader_epoch != self.leader_epoch or not was_leader:
            self.leader_epoch_start_offset = self.log.log_end_offset
        self.leader, self.leader_epoch, self.partition_epoch = self.broker_id, leader_epoch, partition_epoch
        self.epochs.assign(leader_epoch, self.log.log_end_offset)
        self._advance_high_watermark()

    def become_follower(
        self, leader: int, leader_epoch: int, replicas: tuple[int, ...], isr: tuple[int, ...], partition_epoch: int = 0
    ) -> None:
        """Follow ``leader`` (-1: no leader, the partition is offline)."""
        self.leader, self.leader_epoch, self.partition_epoch = leader, leader_epoch, partition_epoch
        self.replicas, self.isr = tuple(replicas), tuple(isr)
        self.followers = {}
        self._drop_isr_proposal()
        self.verifications.clear()

    def apply_isr(self, isr: tuple[int, ...], partition_epoch: int) -> None:
        """The controller accepted an ISR change (ignored when older than the state held)."""
        if not self.is_leader or partition_epoch <= self.partition_epoch:
            return
        self._set_isr(isr, self.followers)
        self.partition_epoch = partition_epoch
        self._drop_isr_proposal()
        self._advance_high_watermark()

    def isr_answer(self, proposal: tuple[int, ...], answer: tuple[bool, PartitionInfo] | None) -> bool:
        """The controller's answer to ``proposal``: ``(accepted, its state of the partition)``,
        or None when no answer came (a timeout: it may have been committed). Returns True when
        the role moved (see :meth:`apply_state`).

        Until the controller's word is known the proposal stays pending (the HW keeps counting
        its members) and is sent again unchanged (:meth:`isr_to_resend`); a newer state
        replaces it; a refusal with the epochs this leader holds means it was not applied."""
        if answer is None:
            if proposal == self.pending_isr:
                self._resend_isr = True
            return False
        accepted, state = answer
        if (state.leader_epoch, state.partition_epoch) > (self.leader_epoch, self.partition_epoch):
            return self.apply_state(state)
        if not accepted and proposal == self.pending_isr and state.leader_epoch == self.leader_epoch:
            logger.info(
                "%s: the controller refused ISR %s (its ISR %s, partition epoch %d)",
                self.name,
                list(proposal),
                list(state.isr),
                state.partition_epoch,
            )
            self._drop_isr_proposal()
        return False

    def isr_to_resend(self) -> tuple[int, ...] | None:
        """The pending proposal, once, if its last sending got no answer."""
        if not self._resend_isr or not self.is_leader:
            return None
        self._resend_isr = False
        return self.pending_isr

    def _drop_isr_proposal(self) -> None:
        self.pending_isr = None
        self._resend_isr = False

    def update_config(self, config: TopicConfig) -> None:
        """The topic's config was altered: min.insync.replicas and replica.lag.time.max.ms
        apply from the next produce and ISR check, the log's settings from its next append,
        roll, flush and retention round (both read their config on every use)."""
        self.config = config
        self.log.config = config.log_config()

    def _set_isr(self, isr: tuple[int, ...], known: dict[int, _Follower]) -> None:
        """Keep what is known of followers that stay in the ISR; any other follower must
        fetch again before it counts (it may have restarted with less than it had)."""
        now = self._clock()
        self.isr = tuple(isr)
        self.followers = {
            r: known[r] if r in known and r in self.isr else _Follower(last_caught_up_ms=now)
            for r in self.replicas
            if r != self.broker_id
        }

    # --- leader: produce ----------------------------------------------------------------

    def append_as_leader(
        self,
        data,
        acks: int,
        first_unacked_sequence: int = NO_SEQUENCE,
        transactional_id: str | None = None,
        verify: bool = False,
        in_order: bool = False,
    ) -> AppendInfo:
        """Validate and append a producer's batches.

        Args:
            data: one or more whole batches; from an idempotent producer, one, or a chain of
                its next batches (same producer and epoch, no transaction, consecutive
                sequences), which the first batch's sequence admits or refuses whole (a
                chain whose first batch is a duplicate is refused as out of order: send each
                alone).
            acks: 0, 1 or -1 (all).
            first_unacked_sequence: for an idempotent batch, the base sequence of the oldest
                batch of this partition its producer has not had acknowledged (see
                :mod:`raylog.coordination.producer_state`); ``NO_SEQUENCE`` if not given.
            transactional_id: a transactional producer's id (verification asks its coordinator).
            verify: the batch comes from a client, not from a writer inside the cluster: a
                transactional batch whose producer has no transaction open here is verified
                first, if the topic's transaction.partition.verification.enable says so (see
                :mod:`raylog.coordination.txn_verification`).
            in_order: the caller delivers each producer's batches in order (a Kafka
                connection), so a batch past a sequence gap means the earlier one is lost:
                OutOfOrderSequenceError at once, as Kafka answers, rather than SequenceGap.

        Returns:
            The append's info; for an idempotent batch already appended (a retry), the
            original batch's offsets with no batches (nothing was written). Either way,
            acks=all is done when :meth:`replication_done` says so.

        Raises:
            SequenceGap: an idempotent batch came before an earlier one of its producer
                (unless ``in_order``).
            VerificationNeeded: a transactional batch waits for its coordinator's word.
            InvalidTxnStateError: a transactional batch to verify without transactional id.
            InvalidRequiredAcksError: ``acks`` not in (0, 1, -1).
            InvalidRequestError: ``data`` is larger than ``MAX_REQUEST_BYTES``.
            NotLeaderOrFollowerError: this replica does not lead.
            NotEnoughReplicasError: acks=-1 with fewer in-sync replicas than required.
            OutOfOrderSequenceError, InvalidProducerEpochError: a stale or broken producer.
            CorruptRecordError, RecordTooLargeError, StorageError: from the log.
        """
        if acks not in (0, 1, -1):
            raise InvalidRequiredAcksError(f"acks must be 0, 1 or -1 (all), got {acks!r}")
        size = memoryview(data).nbytes
        if size > MAX_REQUEST_BYTES:
            raise InvalidRequestError(f"a produce request of {size} bytes, above the limit of {MAX_REQUEST_BYTES}")
        self._require_leader()
        if acks == -1 and len(self.isr) < self.config.min_insync_replicas:
            raise NotEnoughReplicasError(
                f"{self.name}: ISR {list(self.isr)} is smaller than min.insync.replicas="
                f"{self.config.min_insync_replicas}"
            )
        try:
            duplicate = self._check_sequence(data, first_unacked_sequence, transactional_id, verify)
        except SequenceGap:
            if in_order:
                raise OutOfOrderSequenceError(f"{self.name}: an earlier batch of this producer is missing") from None
            raise
        if duplicate is not None:
            append_time = duplicate.max_timestamp if self.log.config.log_append_time else -1
            return AppendInfo(
                duplicate.first_offset, duplicate.last_offset, duplicate.max_timestamp, append_time, 0, ()
            )
        info = self.log.append_as_leader(data, self.leader_epoch)
        self._index_aborted(self.producers.apply(info.batches, self._clock()))
        if verify and info.batches and info.batches[0].attributes & record_batch.TRANSACTIONAL:
            self.verifications.opened(info.batches[0].producer_id)
        self._advance_high_watermark()
        return info

    def verification_answered(self, needed: VerificationNeeded, vouched: bool) -> None:
        """The coordinator answered ``needed``: if it vouched for the transaction, the batch
        may be appended again (unless a marker for the producer came meanwhile)."""
        self.verifications.answered(needed, vouched)

    def append_marker(
        self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, bumps_epoch: bool = True
    ):
        """Write a transaction coordinator's marker, which ends ``producer_id``'s transaction
        here and makes ``producer_epoch`` (its next epoch) the oldest this partition takes
        (with ``bumps_epoch=False``, the producer's current epoch: a Kafka client at EndTxn
        v0-4 goes on with it, see :meth:`ProducerStateManager.marker_is_stale`).

        Returns:
            The append's info, or None when the marker is stale (this partition knows that
            epoch already: the marker was written before, or the transaction ended): then
            nothing is written and the caller has nothing to wait for.

        Raises:
            NotLeaderOrFollowerError.
            StorageError: the marker was not written, or it was but the index file of an
                abort was not (then a stale retry writes that file before answering).
        """
        self._require_leader()
        # Stale or not, the transaction is over: a coordinator's yes asked for before this
        # marker (a first batch here of that transaction) must open nothing when it arrives.
        self.verifications.ended(producer_id)
        if self.producers.marker_is_stale(producer_id, producer_epoch, bumps_epoch):
            self.txn_index.flush()  # the first attempt may have failed to index it
            return None
        marker = record_batch.build_marker(producer_id, producer_epoch, commit, coordinator_epoch, self._clock())
        info = self.log.append_as_leader(marker, self.leader_epoch)
        closed = self.producers.apply(info.batches, self._clock())
        self._advance_high_watermark()
        self._index_aborted(closed)
        return info

    def _index_aborted(self, closed: list[ClosedTransaction]) -> None:
        """Index the aborted ones of the transactions markers just closed: all of them in
        memory, whatever the disk says.

        Raises:
            StorageError: an index file was not written (see :mod:`raylog.storage.txn_index`).
        """
        failed = None
        for txn in closed:
            if not txn.committed:
                entry = txn_index.AbortedTxn(txn.producer_id, txn.first_offset, txn.marker_offset)
                try:
                    self.txn_index.add(entry, self.log.segment_base_offsets)
                except StorageError as exc:
                    failed = exc
        if failed is not None:
            raise failed

    def enough_replicas(self) -> bool:
        """Whether the ISR still has min.insync.replicas members (checked after acks=all appends)."""
        return len(self.isr) >= self.config.min_insync_replicas

    def _check_sequence(
        self, data, first_unacked_sequence: int, transactional_id: str | None, verify: bool
    ) -> BatchMetadata | None:
        """The original of a duplicate, None to append; raises SequenceGap to wait, and (with
        ``verify``) VerificationNeeded to ask the coordinator first."""
        header = record_batch.parse_header(memoryview(data).cast("B"))
        if header.producer_id == NO_PRODUCER_ID:
            return None
        if header.attributes & record_batch.CONTROL:
            raise InvalidRequestError("only a transaction coordinator writes control batches")
        if verify and header.attributes & record_batch.TRANSACTIONAL:
            self._verify_transactional(header, transactional_id)
        if header.base_sequence == NO_SEQUENCE:  # a transactional write without sequence (offsets)
            self.producers.check_epoch(header.producer_id, header.producer_epoch)
            return None
        chained = header.size != len(data)
        if chained:
            require_chain(record_batch.iter_headers(data))
        verdict, original = self.producers.check(header, first_unacked_sequence)
        if verdict is Verdict.GAP:
            raise SequenceGap()
        if verdict is Verdict.DUPLICATE and chained:
            raise OutOfOrderSequenceError(
                f"{self.name}: a chain of producer {header.producer_id}'s batches whose first was appended before"
            )
        return original if verdict is Verdict.DUPLICATE else None

    def _verify_transactional(self, header, transactional_id: str | None) -> None:
        """Raise VerificationNeeded unless ``header``'s producer has a transaction open here
        at its epoch, or its coordinator vouched for it since (see
        :mod:`raylog.coordination.txn_verification`)."""
        if not self.config.transaction_partition_verification_enable:
            return
        pid, epoch = header.producer_id, header.producer_epoch
        self.producers.check_epoch(pid, epoch)  # a fenced producer is told so without asking
        if self.producers.in_transaction(pid, epoch):
            return
        if not transactional_id:
            raise InvalidTxnStateError(
                f"{self.name}: a transactional batch of producer id {pid} without its transactional id "
                "cannot be verified"
            )
        self.verifications.check(transactional_id, pid, epoch)

    # --- producer state -----------------------------------------------------------------

    def housekeep(self) -> None:
        """One housekeeping round's storage work: retention below the HW, the files of removed
        segments once file.delete.delay.ms passed, the flush.ms policy, the HW checkpoint,
        producer expiry and the producer snapshot (the replica actor runs it each round, the
        simulation as a step).

        Raises:
            StorageError: a disk error; the next round tries again.
        """
        self.log.apply_retention(self.high_watermark)
        self.log.delete_retired_segments()
        self.log.maybe_flush()
        self.checkpoint_high_watermark()
        self.checkpoint_producer_state()

    def checkpoint_producer_state(self) -> None:
        """Forget producers idle for producer.id.expiration.ms, snapshot the state at the LEO
        if it changed since the newest snapshot, and delete snapshots that serve no more.

        Raises:
            StorageError: a snapshot could not be written or deleted.
        """
        expired = self.producers.remove_expired(self._clock(), self.config.producer_id_expiration_ms)
        if expired:
            logger.info("%s: expired %d idle producer ids", self.name, len(expired))
        self.txn_index.retain(self.log.log_start_offset)
        if self.producers.version != self._snapshot_version:
            self._write_producer_snapshot(self.log.log_end_offset)
        layout = (self.log.log_start_offset, tuple(self.log.segment_base_offsets), self._snapshot_version)
        if layout == self._snapshots_kept_for:
            return  # nothing to prune since the last round (an idle partition lists no directory)
        bases = set(layout[1])
        for offset in producer_snapshot.offsets(self.log.dir)[:-1]:  # the newest is what a restart loads
            if offset < self.log.log_start_offset or offset not in bases:
                producer_snapshot.delete(self.log.dir, offset)
        self._snapshots_kept_for = layout

    def _snapshot_at_roll(self, base_offset: int) -> None:
        """The log rolled a segment at ``base_offset``: the state now holds exactly the
        batches below it. A failed write is logged: older snapshots and the log remain."""
        try:
            self._write_producer_snapshot(base_offset)
        except StorageError as exc:
            logger.warning("%s: no producer snapshot at offset %d: %s", self.name, base_offset, exc)

    def _write_producer_snapshot(self, offset: int) -> None:
        """Raises StorageError; never before every abort the snapshot covers is on disk (a
        restart replays only the log after it, so would never index such an abort again)."""
        self.txn_index.flush()
        producer_snapshot.write(self.log.dir, offset, self.producers.rows())
        self._snapshot_version = self.producers.version

    def _reload_producer_state(self) -> None:
        """The state from the newest intact snapshot in ``[log start, LEO]`` (and not above a
        dropped index file's segment) and the log's batches from its offset on (the whole
        log without one); other snapshots out of that range are deleted (their batches were
        cut, or went with their segments)."""
        directory, start, end = self.log.dir, self.log.log_start_offset, self.log.log_end_offset
        self.producers.clear()
        replay_from = None
        # Markers of a dropped (corrupt) index file must be replayed: no snapshot above it.
        below = self.txn_index.rebuild_from
        for offset in reversed(producer_snapshot.offsets(directory)):
            if not start <= offset <= end:
                producer_snapshot.delete(directory, offset)
            elif replay_from is None and (below is None or offset <= below):  # the newest usable
                try:
                    self.producers.load(producer_snapshot.read(directory, offset))
                    replay_from = offset
                except CorruptRecordError as exc:
                    logger.warning("%s: ignoring producer snapshot at offset %d: %s", self.name, offset, exc)
                    producer_snapshot.delete(directory, offset)
        replay_from = start if replay_from is None else replay_from
        loaded = self.producers.version
        self.txn_index.truncate_to(end)
        self._index_aborted(self.producers.apply(self.log.batch_headers(replay_from), self._clock()))
        self.txn_index.rebuild_from = None
        self.producers.remove_expired(self._clock(), self.config.producer_id_expiration_ms)
        if self.producers.version == loaded:
            self._snapshot_version = loaded  # the newest snapshot (or nothing) says it all

    # --- leader: fetch ------------------------------------------------------------------

    def read(
        self,
        offset: int,
        max_bytes: int,
        replica_id: int = CONSUMER_REPLICA_ID,
        current_leader_epoch: int = -1,
        record_fetch: bool = True,
        isolation_level: int = READ_UNCOMMITTED,
    ) -> ReadResult:
        """Batches from ``offset``: below the HW for consumers (below the LSO read_committed,
        with the aborted transactions the range may meet), below the LEO for followers.
        A follower's fetch offset is recorded as its log end (``record_fetch``: once per
        request, not again when a long poll reads anew, as Kafka's delayed fetch does).

        Raises:
            NotLeaderOrFollowerError, FencedLeaderEpochError, UnknownLeaderEpochError,
            OffsetOutOfRangeError, OffsetMovedToTieredStorageError (the remote tier holds
            ``offset``: a follower starts at the local log start, a consumer is served from
            the remote tier).
        """
        self._check_epoch(current_leader_epoch)
        self._require_leader()
        if offset < self.log.log_start_offset:
            self._require_remote_tier_known()
        if self.log_start_offset <= offset < self.log.log_start_offset:
            raise OffsetMovedToTieredStorageError(
                f"{self.name}: offset {offset} is in the remote tier, below the local log start "
                f"{self.log.log_start_offset}"
            )
        if replica_id != CONSUMER_REPLICA_ID:
            if record_fetch:
                self._follower_fetched(replica_id, offset)
            elif offset > self.log.log_end_offset:
                raise OffsetOutOfRangeError(f"follower {replica_id} fetch offset {offset} is past the log end")
            limit = None
        else:
            committed = isolation_level == READ_COMMITTED
            limit = self.last_stable_offset if committed else self.high_watermark
            if limit < offset <= self.log.log_end_offset:
                # Offsets above the HW (LSO) exist but are not yet committed (decided).
                return self._result(b"")
            if committed:
                data = self.log.read(offset, max_bytes, max_offset=limit)
                return self._result(data, tuple(self.txn_index.collect(offset, limit)) if data else ())
        return self._result(self.log.read(offset, max_bytes, max_offset=limit))

    def _follower_fetched(self, replica_id: int, offset: int) -> None:
        follower = self.followers.get(replica_id)
        if follower is None:
            raise NotLeaderOrFollowerError(f"broker {replica_id} is not a replica of {self.name}")
        end = self.log.log_end_offset
        if offset > end:
            raise OffsetOutOfRangeError(f"follower {replica_id} fetch offset {offset} is past the log end")
        now = self._clock()
        follower.end_offset = offset
        # Caught up now at the log end; or, at the end as of its previous fetch, caught up as of
        # then (under steady load a follower is always one fetch behind the current end).
        if offset >= end:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, now)
        elif offset >= follower.last_fetch_leader_end:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, follower.last_fetch_ms)
        follower.last_fetch_leader_end, follower.last_fetch_ms = end, now
        self._advance_high_watermark()

    def _result(self, data: bytes, aborted: tuple = ()) -> ReadResult:
        log = self.log
        return ReadResult(
            data, self.high_watermark, self.log_start_offset, log.log_end_offset, self.last_stable_offset, aborted
        )

    def fetch(self, request: FetchRequest, record_fetch: bool = True) -> FetchResponse:
        """A fetch request's response (errors as codes), read at once: :meth:`read` as the
        replica actor answers it, each time its long poll reads."""
        try:
            result = self.read(
                request.offset,
                request.max_bytes,
                request.replica_id,
                request.current_leader_epoch,
                record_fetch,
                request.isolation_level,
            )
        except Exception as exc:  # noqa: BLE001 — every error travels back as a code
            # A follower sent to the remote tier starts at the local log start (KIP-405).
            moved = isinstance(exc, OffsetMovedToTieredStorageError)
            return FetchResponse(
                **error_fields(exc),
                leader_epoch=self.leader_epoch,
                log_start_offset=self.log.log_start_offset if moved else self.log_start_offset,
                log_end_offset=self.log.log_end_offset,
            )
        if record_fetch and request.replica_id != CONSUMER_REPLICA_ID:
            self.followers[request.replica_id].log_start_offset = request.log_start_offset
        return FetchResponse(
            high_watermark=result.high_watermark,
            log_start_offset=result.log_start_offset,
            log_end_offset=result.log_end_offset,
            leader_epoch=self.leader_epoch,
            records=np.frombuffer(result.data, dtype=np.uint8),
            last_stable_offset=result.last_stable_offset,
            aborted_transactions=result.aborted,
        )

    # --- DeleteRecords --------------------------------------------------------------------

    def delete_records(self, offset: int) -> int:
        """Delete the records below ``offset`` (-1: the HW) on the leader (Kafka's DeleteRecords):
        its log start moves there; each follower follows from the leader's log start its
        next fetch brings (:meth:`follow_log_start`). Returns the offset; the deletion is done
        once :attr:`low_watermark` reaches it.

        Raises:
            NotLeaderOrFollowerError, OffsetOutOfRangeError (below -1 or past the HW),
            PolicyViolationError (a topic that compacts and does not delete), StorageError.
        """
        self._require_leader()
        if self.config.compact and not self.config.delete:
            raise PolicyViolationError(f"{self.name}: records of a topic with cleanup.policy=compact cannot be deleted")
        target = self.high_watermark if offset == -1 else offset
        if not 0 <= target <= self.high_watermark:
            raise OffsetOutOfRangeError(
                f"{self.name}: cannot delete records below {offset}: not in [0, high watermark {self.high_watermark}]"
            )
        self.log.increment_log_start_offset(target)
        self.txn_index.retain(self.log.log_start_offset)
        return target

    @property
    def low_watermark(self) -> int:
        """The smallest log start offset in the ISR (Kafka's low watermark; a follower's as its
        last fetch said, -1 while one has not said)."""
        starts = [self.log_start_offset]
        starts += [self.followers[r].log_start_offset for r in self.isr if r in self.followers]
        return min(starts)

    def follow_log_start(self, leader_log_start_offset: int) -> None:
        """A follower deletes what its leader deleted, up to its own HW (it never deletes
        records it does not know to be committed). On a tiered partition the leader's start may
        be below our local log's: it is checkpointed all the same, as the partition's start.

        Raises:
            StorageError.
        """
        target = min(leader_log_start_offset, self.high_watermark)
        if target > self.log.checkpointed_log_start_offset:
            self.log.increment_log_start_offset(target)
            self.txn_index.retain(self.log.log_start_offset)

    def replication_done(self, end_offset: int, leader_epoch: int) -> tuple[bool, RaylogError | None]:
        """Whether an acks=all produce appended (or found already appended, a retry) in
        ``leader_epoch`` below ``end_offset`` is answered now: ``(done, error)``. Done once the
        HW covers it (every ISR member has it), failed with NOT_ENOUGH_REPLICAS_AFTER_APPEND if
        the ISR shrank below min.insync.replicas meanwhile, or with NOT_LEADER_OR_FOLLOWER if
        leadership moved first (Kafka's delayed produce)."""
        if not self.is_leader or self.leader_epoch != leader_epoch:
            return True, NotLeaderOrFollowerError(f"{self.name}: leadership moved before the ISR had the batch")
        if self.high_watermark < end_offset:
            return False, None
        if not self.enough_replicas():
            return True, NotEnoughReplicasAfterAppendError(
                f"{self.name}: written, but the ISR {list(self.isr)} shrank below min.insync.replicas"
            )
        return True, None

    def propose_isr(self) -> tuple[int, ...] | None:
        """The ISR this leader wants now, recorded as pending until the controller answers;
        None when it wants no change or a proposal is already pending."""
        if not self.is_leader or self.pending_isr is not None:
            return None
        wanted = self._wanted_isr()
        if wanted is not None:
            self.pending_isr = wanted
            self._log_isr_proposal(wanted)
        return wanted

    def _log_isr_proposal(self, wanted: tuple[int, ...]) -> None:
        """Why the ISR shrinks (a follower not caught up for replica.lag.time.max.ms) or
        expands (a follower caught up), with each follower's facts."""
        now = self._clock()
        for verb, members in (("shrink", set(self.isr) - set(wanted)), ("expand", set(wanted) - set(self.isr))):
            if not members:
                continue
            facts = "; ".join(
                f"broker {r}: log end offset {self.followers[r].end_offset}, "
                f"last caught up {now - self.followers[r].last_caught_up_ms} ms ago"
                for r in sorted(members)
            )
            logger.info(
                "%s: leader %d proposes to %s the ISR from %s to %s (%s; replica.lag.time.max.ms %d, "
                "leader log end offset %d, high watermark %d)",
                self.name,
                self.broker_id,
                verb,
                list(self.isr),
                list(wanted),
                facts,
                self.config.replica_lag_time_max_ms,
                self.log.log_end_offset,
                self.high_watermark,
            )

    def _wanted_isr(self) -> tuple[int, ...] | None:
        now = self._clock()
        lag_ms = self.config.replica_lag_time_max_ms
        wanted = [self.broker_id]
        for r in self.replicas:
            follower = self.followers.get(r)
            if follower is None:
                continue
            if r in self.isr:
                if now - follower.last_caught_up_ms <= lag_ms:
                    wanted.append(r)
            elif (
                follower.end_offset >= max(self.high_watermark, self.leader_epoch_start_offset)
                and now - follower.last_caught_up_ms <= lag_ms
            ):
                wanted.append(r)
        ordered = tuple(r for r in self.replicas if r in wanted)
        return None if set(ordered) == set(self.isr) else ordered

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """``(epoch', end_offset)``: the largest epoch <= ``epoch`` and where it ends here."""
        self._require_leader()
        return self.epochs.end_offset_for(epoch, self.log.log_end_offset)

    def answer_epoch_query(self, epoch: int) -> tuple[int, int, int]:
        """:meth:`end_offset_for_epoch` as a follower is answered: ``(error_code, epoch', end)``."""
        try:
            found, end = self.end_offset_for_epoch(epoch)
        except Exception as exc:  # noqa: BLE001
            return error_fields(exc)["error_code"], -1, -1
        return 0, found, end

    def list_offset(
        self, timestamp_ms: int, current_leader_epoch: int = -1, isolation_level: int = READ_UNCOMMITTED
    ) -> tuple[int, int]:
        """``(offset, timestamp_ms)`` for EARLIEST / LATEST (the LSO read_committed), the first
        record at or after ``timestamp_ms``, or Kafka's other sentinels: MAX_TIMESTAMP (the
        first record with the largest timestamp, with it), EARLIEST_LOCAL (the local log
        start, above EARLIEST's while a remote tier holds older records) and LATEST_TIERED
        (the highest offset copied to the remote tier, -1 without one). ``(-1, -1)`` when no
        record is found below the HW (the LSO read_committed), as Kafka answers a look-up that
        lands past what a client may read.

        A new leader's HW may lag what its predecessor had exposed: until it reaches the
        start of this leader's epoch, LATEST and time look-ups are refused with the retriable
        OFFSET_NOT_AVAILABLE, so that no client sees the end of the log go back (KIP-207).

        Raises:
            NotLeaderOrFollowerError, FencedLeaderEpochError, UnknownLeaderEpochError,
            OffsetNotAvailableError.
        """
        self._check_epoch(current_leader_epoch)
        self._require_leader()
        if timestamp_ms == EARLIEST_TIMESTAMP:
            self._require_remote_tier_known()
            return self.log_start_offset, -1
        if timestamp_ms == EARLIEST_LOCAL_TIMESTAMP:
            return self.log.log_start_offset, -1
        if self.high_watermark < self.leader_epoch_start_offset:
            raise OffsetNotAvailableError(
                f"{self.name}: leader epoch {self.leader_epoch} starts at {self.leader_epoch_start_offset}, "
                f"the HW is still {self.high_watermark}"
            )
        end = self.last_stable_offset if isolation_level == READ_COMMITTED else self.high_watermark
        if timestamp_ms == LATEST_TIMESTAMP:
            return end, -1
        if timestamp_ms == LATEST_TIERED_TIMESTAMP:
            return self.highest_remote_offset, -1
        found = (
            self.log.max_timestamp_offset()
            if timestamp_ms == MAX_TIMESTAMP
            else self.log.offsets_for_time(timestamp_ms)
        )
        if found is None or found.offset >= end:
            return -1, -1
        return found.offset, found.timestamp_ms

    # --- follower -----------------------------------------------------------------------

    def truncate_to_leader(self, leader_epoch: int, leader_end_offset: int) -> int:
        """Cut what diverged from the leader, given its answer for our latest epoch
        (``end_offset_for_epoch(self.epochs.latest_epoch)``). Returns the new LEO."""
        before, latest = self.log.log_end_offset, self.epochs.latest_epoch
        if leader_epoch == UNDEFINED:
            target = self.high_watermark  # the leader knows none of our epochs
            why = f"leader {self.leader} knows none of our epochs (latest {latest}): back to our high watermark"
        else:
            _, own_end = self.epochs.end_offset_for(leader_epoch, before)
            target = min(leader_end_offset, own_end)
            why = (
                f"diverging epoch: leader {self.leader} says epoch {leader_epoch} ends at {leader_end_offset}, "
                f"ours ends at {own_end} (our latest epoch {latest})"
            )
        if target < self.log.log_start_offset:
            self.log.truncate_fully_and_start_at(target)
        else:
            self.log.truncate_to(target)
        self._after_truncation(before, why)
        return self.log.log_end_offset

    def append_as_follower(self, data, leader_high_watermark: int) -> None:
        """Append the leader's batches unchanged; learn their epochs and producer states;
        follow the HW.

        Raises:
            CorruptRecordError, InvalidRequestError: from the log (nothing is appended).
            StorageError: from the log (nothing is appended), or an abort's index file was
                not written (everything is appended and accounted for; the file is written
                before a snapshot covers it).
        """
        closed = []
        if len(data):
            info = self.log.append_as_follower(data)
            for header in info.batches:
                if header.leader_epoch > self.epochs.latest_epoch:
                    self.epochs.assign(header.leader_epoch, header.base_offset)
                txn = self.producers.update(header, self._clock())
                if txn is not None:
                    closed.append(txn)
        self.high_watermark = max(self.high_watermark, min(leader_high_watermark, self.log.log_end_offset))
        self._index_aborted(closed)

    def truncate_to_leader_end(self, leader_log_end_offset: int) -> None:
        """Our log runs past the leader's end (a leader elected uncleanly): cut it there."""
        before = self.log.log_end_offset
        self.log.truncate_to(leader_log_end_offset)
        why = f"our log runs past leader {self.leader}'s log end offset {leader_log_end_offset}"
        self._after_truncation(before, why, logging.WARNING)

    def reset_to_leader_start(self, leader_log_start_offset: int) -> None:
        """The leader no longer has our next offset: restart our log at its log start (on a
        tiered partition, its local log start: the partition's start, in the remote tier,
        stays)."""
        before = self.log.log_end_offset
        tiered = self.config.remote_storage_enable
        self.log.truncate_fully_and_start_at(leader_log_start_offset, keep_log_start=tiered)
        self._after_truncation(
            before, f"leader {self.leader}'s log starts at {leader_log_start_offset}, past our end: restarting there"
        )

    def _after_truncation(self, before: int, why: str, level: int = logging.INFO) -> None:
        """Epochs, HW and producer state after the log was cut from ``before`` (logged once,
        at ``level`` with ``why``, when the log end offset moved)."""
        end = self.log.log_end_offset
        self.epochs.truncate_from_end(end)
        self.high_watermark = min(self.high_watermark, end)
        self._reload_producer_state()
        if end != before:
            logger.log(
                level,
                "%s: broker %d truncated its log, log end offset %d -> %d: %s",
                self.name,
                self.broker_id,
                before,
                end,
                why,
            )

    # --- high watermark -----------------------------------------------------------------

    def _advance_high_watermark(self) -> bool:
        """Move the HW up to what every member of the maximal ISR has; True if it moved."""
        ends = [self.log.log_end_offset]
        for r in set(self.isr) | set(self.pending_isr or ()):  # the maximal ISR
            if r != self.broker_id:
                follower = self.followers.get(r)
                ends.append(follower.end_offset if follower is not None else -1)
        candidate = min(ends)
        if candidate > self.high_watermark:
            self.high_watermark = candidate
            return True
        return False

    def checkpoint_high_watermark(self) -> None:
        """Persist the HW (a lower bound used after a restart), atomically and durably, when
        it moved since the last checkpoint (an idle partition writes nothing).

        Raises:
            StorageError: the write failed; the previous checkpoint is in place.
        """
        if self.high_watermark == self._checkpointed_high_watermark:
            return
        self.log.checkpoint_high_watermark(self.high_watermark)
        self._checkpointed_high_watermark = self.high_watermark

    # --- checks -------------------------------------------------------------------------

    def _require_leader(self) -> None:
        if not self.is_leader:
            raise NotLeaderOrFollowerError(f"broker {self.broker_id} does not lead {self.name} (leader {self.leader})")

    def _check_epoch(self, current_leader_epoch: int) -> None:
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return
        if current_leader_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(f"{self.name}: epoch {current_leader_epoch} is older than {self.leader_epoch}")
        raise UnknownLeaderEpochError(f"{self.name}: epoch {current_leader_epoch} is newer than {self.leader_epoch}")
