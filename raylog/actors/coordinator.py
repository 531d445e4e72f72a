"""What the group and transaction coordinators share: a replica of an internal, compacted
partition that, while it leads, also holds a state machine read back from that partition.

When the replica becomes leader it reads its partition back into a fresh state (requests
meanwhile get COORDINATOR_LOAD_IN_PROGRESS, which clients retry) and then ticks it; when it
stops leading it drops the state and answers NOT_COORDINATOR, so that clients find the new
leader through the controller. Every change is appended to the partition with acks=all
before it counts (:meth:`CoordinatorActor._append_records`, :meth:`_await_records`), so it
survives this actor, its node and its disk: the next leader, on any broker of the ISR,
loads the same state.

Subclasses say what the state is (:meth:`_new_state`), how a batch of the partition loads
into it (:meth:`_load_batch`), what a tick does (:meth:`_tick`) and what happens when the
state is dropped (:meth:`_unloaded`).

Concurrency: as the replica's: every step under the replica's lock. The load-and-tick
thread of a leader epoch ends when the state is dropped (its stop flag is set under the
lock, so no step of a stopped thread follows).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from typing import Any

from raylog.actors.replica import PartitionReplicaActor
from raylog.common import record_batch
from raylog.coordination.replay import LogReplay
from raylog.errors import CoordinatorLoadInProgressError, NotCoordinatorError, RaylogError

#: Bytes read per step when loading the state after becoming leader.
LOAD_READ_BYTES = 8 << 20
#: Pause before loading again after a failed read.
LOAD_RETRY_S = 1.0
#: How long a record may wait for the ISR.
APPEND_TIMEOUT_S = 30.0

logger = logging.getLogger(__name__)


class CoordinatorActor(PartitionReplicaActor):
    """See the module docstring."""

    #: How often the loaded state is ticked.
    TICK_INTERVAL_S = 0.1

    def __init__(self, *args: Any, **kwargs: Any):
        # Set before the replica's __init__, which may already take the leader's role.
        self._state: Any = None
        self._coordinator_epoch = -1  # the leader epoch the state was loaded for
        self._coordinator_stop: threading.Event | None = None  # ends the load-and-tick thread
        super().__init__(*args, **kwargs)

    # --- what subclasses say ------------------------------------------------------------

    def _new_state(self) -> Any:
        raise NotImplementedError

    def _load_batch(self, state: Any, header: record_batch.BatchHeader, records: list[tuple[bytes, Any]]) -> None:
        """Load one batch's ``(key, value)`` records (none for a control batch), in log order."""
        raise NotImplementedError

    def _loaded(self, state: Any) -> None:
        """The state is in place (holding ``_lock``)."""

    def _tick(self, state: Any) -> None:
        """One tick of the loaded state (holding ``_lock``)."""

    def _unloaded(self) -> None:
        """The state was dropped (holding ``_lock``)."""

    def _describe_state(self, state: Any) -> str:
        """What a loaded state holds, for the log line (e.g. how many groups)."""
        return type(state).__name__

    # --- leadership ---------------------------------------------------------------------

    def _role_taken(self) -> None:
        p = self.partition
        if p.is_leader and self._coordinator_epoch != p.leader_epoch and not self._stopped.is_set():
            self._unload()
            self._coordinator_epoch = p.leader_epoch
            self._coordinator_stop = threading.Event()
            self._start(self._load_and_tick, p.leader_epoch, self._coordinator_stop)
        elif not p.is_leader and self._coordinator_epoch != -1:
            self._unload()

    def _closing(self) -> None:
        super()._closing()
        self._unload()

    def _unload(self) -> None:
        """Drop the state (holding ``_lock``)."""
        if self._coordinator_epoch != -1:
            p = self.partition
            logger.info(
                "%s: broker %d stops coordinating (leader epoch %d; the partition's leader is now %s)",
                p.name,
                p.broker_id,
                self._coordinator_epoch,
                p.leader,
            )
        if self._coordinator_stop is not None:
            self._coordinator_stop.set()
            self._coordinator_stop = None
        self._state = None
        self._coordinator_epoch = -1
        self._unloaded()

    def _load_and_tick(self, epoch: int, stop: threading.Event) -> None:
        """Load the state for leader ``epoch``, then tick it, until ``stop`` is set."""
        p = self.partition
        started = time.monotonic()
        logger.info("%s: broker %d loads its coordinator state for leader epoch %d", p.name, p.broker_id, epoch)
        while True:
            try:
                state = self._load(stop)
                break
            except RaylogError as exc:  # e.g. a disk error: clients get LOAD_IN_PROGRESS meanwhile
                logger.warning(
                    "%s: loading the coordinator state failed, retried in %.0f s: %s", p.name, LOAD_RETRY_S, exc
                )
                if stop.wait(LOAD_RETRY_S):
                    return
        with self._lock:
            if stop.is_set() or self.partition.leader_epoch != epoch or not self.partition.is_leader:
                return
            self._state = state
            self._loaded(state)
            logger.info(
                "%s: broker %d coordinates from leader epoch %d: loaded offsets %d to %d in %.3f s (%s)",
                p.name,
                p.broker_id,
                epoch,
                p.log.log_start_offset,
                p.log.log_end_offset,
                time.monotonic() - started,
                self._describe_state(state),
            )
        while not stop.wait(self.TICK_INTERVAL_S):
            with self._lock:
                if stop.is_set():
                    return
                self._tick(state)

    def _load(self, stop: threading.Event) -> Any:
        """The state read back from the partition's log, a batch at a time (a read at a time
        under the lock: requests get in between the reads of a large partition)."""
        state = self._new_state()
        log = self.partition.log
        replay = LogReplay(functools.partial(self._load_batch, state), log.log_start_offset)
        while not stop.is_set():
            with self._lock:
                data = replay.read(log, log.log_end_offset, LOAD_READ_BYTES)
            if not data:
                break
            replay.apply(data)
        return state

    def _loaded_state(self) -> Any:
        """The state, if this replica leads and has loaded it.

        Raises:
            NotCoordinatorError, CoordinatorLoadInProgressError.
        """
        if not self.partition.is_leader:
            raise NotCoordinatorError(f"{self.partition.name} is not the leader: find the coordinator again")
        if self._state is None:
            raise CoordinatorLoadInProgressError(f"{self.partition.name} is still loading")
        return self._state

    # --- writing ------------------------------------------------------------------------

    def _append_records(self, records: list[tuple[bytes, bytes | None]], **batch_fields: Any) -> int:
        """Append keyed records with acks=all (holding ``_lock``); the offset the HW must
        reach for them to count (see :meth:`_await_records`). ``batch_fields``: producer
        fields for a transactional batch.

        Raises:
            NotEnoughReplicasError, NotLeaderOrFollowerError, KafkaStorageError, ...
        """
        if not records:
            return -1
        keys, values = zip(*records, strict=True)
        batch = record_batch.build(list(values), keys=list(keys), **batch_fields)
        info = self.partition.append_as_leader(batch, acks=-1)
        self._notify()
        self._maybe_propose_isr()
        return info.last_offset + 1

    def _await_records(self, appended: int | Exception) -> None:
        """Wait (holding ``_lock``) until the HW reaches ``appended``, or raise the append's error.

        Raises:
            NotEnoughReplicasError, RequestTimedOutError, NotLeaderOrFollowerError, ...
        """
        if isinstance(appended, Exception):
            raise appended
        if appended >= 0:
            error = self._await_replication(appended, (time.monotonic() + APPEND_TIMEOUT_S) * 1000, "produce")
            if error is not None:
                raise error


def now_ms() -> int:
    return int(time.time() * 1000)
