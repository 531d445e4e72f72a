"""The follower's side of replication for one partition (Kafka's AbstractFetcherThread, for
one partition): what it asks its leader next and what it does with the answer (no I/O).

The replica actor, and the seeded simulation, run the same loop around it::

    request = fetcher.next_request()        # None: the role moved on, stop
    answer = <send request to the leader>   # or a failure: on_failure(request)
    next = fetcher.on_answer(request, answer)
    BACKOFF: pause before the next request; REPORT_LEADER: ask the controller to check first.

A fetcher follows one leader in one leader epoch. Before its first fetch it asks the leader
where its own latest epoch ends there and truncates what diverged (KIP-101); then each fetch
asks from its log end offset, appends the leader's batches unchanged and takes the leader's
high watermark. An answer that reports the follower out of the leader's range resets or cuts
its log; a corrupt batch, a full or failing disk, a fenced or moved leader: the error is
logged and counted and the same fetch is made again after a pause. The loop never ends on an
error, only when the role moves on.

Concurrency: not thread-safe; the replica actor calls it under its lock, one request out at a time.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import OffsetMovedToTieredStorageError, OffsetOutOfRangeError, RaylogError
from ..protocol import FetchRequest, FetchResponse, error_of
from ..storage.log import wall_clock_ms
from .partition import Partition

log = logging.getLogger(__name__)

#: A follower's fetch: large, and long-polling at the leader (for the topic's
#: ``replica.fetch.wait.max.ms``).
REPLICA_FETCH_MAX_BYTES = 8 << 20
#: A leader that keeps failing the follower's calls is reported to the controller at most
#: this often (each report makes the controller call the leader itself).
LEADER_REPORT_INTERVAL_MS = 1000
#: A failure that repeats (the same reason, call after call) is logged at its level at most
#: this often, at DEBUG in between: a follower retries every 100 ms.
REPEATED_FAILURE_LOG_INTERVAL_MS = 10_000


class Next(enum.Enum):
    """What the loop does after an answer."""

    AGAIN = "again"  # send the next request now
    BACKOFF = "backoff"  # pause first (the leader may be moving, or an error may clear)
    REPORT_LEADER = "report_leader"  # ask the controller to check the leader, then pause


@dataclass(frozen=True)
class EpochQuery:
    """Ask the leader where ``epoch`` (this follower's latest) ends in its log."""

    epoch: int


@dataclass(frozen=True)
class EpochAnswer:
    error_code: int
    epoch: int
    end_offset: int


class FollowerFetcher:
    """See the module docstring."""

    def __init__(self, partition: Partition, leader: int, leader_epoch: int, clock: Callable[[], int] = wall_clock_ms):
        self.partition = partition
        self.leader = leader
        self.leader_epoch = leader_epoch
        self._clock = clock
        #: The token the follower's fetches carry (the broker's own; see raylog.coordination.sessions).
        self.session: str | None = None
        self._reported_ms: int | None = None  # when the leader was last reported
        self.truncated = False
        self.errors = 0  # failed answers and calls since this fetcher started
        self.last_error: str | None = None
        self._logged_ms: int | None = None  # when ``last_error`` was last logged at its level

    @property
    def active(self) -> bool:
        p = self.partition
        return p.leader == self.leader and p.leader_epoch == self.leader_epoch and not p.is_leader

    def next_request(self) -> EpochQuery | FetchRequest | None:
        if not self.active:
            return None
        p = self.partition
        if not self.truncated:
            return EpochQuery(p.epochs.latest_epoch)
        return FetchRequest(
            p.log.log_end_offset,
            REPLICA_FETCH_MAX_BYTES,
            1,
            p.config.replica_fetch_wait_max_ms,
            replica_id=p.broker_id,
            current_leader_epoch=self.leader_epoch,
            log_start_offset=p.log.log_start_offset,
            session=self.session,
        )

    def on_answer(self, request: EpochQuery | FetchRequest, answer: EpochAnswer | FetchResponse) -> Next:
        """Act on the leader's answer to ``request`` (ignored if the role moved on meanwhile)."""
        if not self.active:
            return Next.AGAIN  # next_request says stop
        try:
            if isinstance(request, EpochQuery):
                return self._on_epoch_end(answer)
            return self._on_fetch(request, answer)
        except RaylogError as exc:  # a corrupt batch, a disk error: log it, pause, fetch again
            return self._failed(f"{type(exc).__name__}: {exc}", logging.ERROR)
        except Exception as exc:  # noqa: BLE001 — a bug must not end replication silently either
            log.exception("%s: unexpected error on leader %d's answer", self.partition.name, self.leader)
            return self._failed(f"{type(exc).__name__}: {exc}", logging.DEBUG)

    def on_failure(self, request: EpochQuery | FetchRequest) -> Next:
        """The call failed: the leader's process is gone or restarting (Ray says so) or gave no
        answer in time (hung, paused, or its node is going). The same request is made again
        after a pause; at most every ``LEADER_REPORT_INTERVAL_MS`` the controller is asked to
        check the leader itself (and to let another in-sync replica lead if it cannot reach it
        either: one follower's failed call is no proof)."""
        if not self.active:
            return Next.AGAIN
        self._failed(f"no answer from leader {self.leader}", logging.WARNING)
        now = self._clock()
        if self._reported_ms is not None and now - self._reported_ms < LEADER_REPORT_INTERVAL_MS:
            return Next.BACKOFF
        self._reported_ms = now
        return Next.REPORT_LEADER

    def _on_epoch_end(self, answer: EpochAnswer) -> Next:
        if answer.error_code:
            return self._failed(f"epoch query refused with code {answer.error_code}", logging.DEBUG)
        self.partition.truncate_to_leader(answer.epoch, answer.end_offset)  # (which logs a cut)
        self.truncated = True
        return Next.AGAIN

    def _on_fetch(self, request: FetchRequest, response: FetchResponse) -> Next:
        p = self.partition
        error = error_of(response)
        if isinstance(error, OffsetOutOfRangeError | OffsetMovedToTieredStorageError) and (
            request.offset < response.log_start_offset
        ):
            # (below a tiered leader's local log start: its answer carries that start, KIP-405)
            p.reset_to_leader_start(response.log_start_offset)
            return Next.AGAIN
        if isinstance(error, OffsetOutOfRangeError) and request.offset > response.log_end_offset >= 0:
            p.truncate_to_leader_end(response.log_end_offset)
            return Next.AGAIN
        if error is not None:
            # Fenced or no longer leading: the controller's new state is on its way.
            return self._failed(f"fetch refused: {error.name}: {error}", logging.DEBUG)
        if request.offset != p.log.log_end_offset:
            return Next.AGAIN  # our log moved meanwhile (a truncation): fetch again from its end
        p.append_as_follower(response.records, response.high_watermark)
        p.follow_log_start(response.log_start_offset)
        return Next.AGAIN

    def _failed(self, reason: str, level: int) -> Next:
        """Count and log a failure: at ``level`` when new, and at most every
        ``REPEATED_FAILURE_LOG_INTERVAL_MS`` while the same one repeats (DEBUG in between)."""
        self.errors += 1
        now = self._clock()
        repeated = reason == self.last_error and self._logged_ms is not None
        if repeated and now - self._logged_ms < REPEATED_FAILURE_LOG_INTERVAL_MS:
            level = logging.DEBUG
        elif level > logging.DEBUG:
            self._logged_ms = now
        self.last_error = reason
        log.log(level, "%s: fetch from leader %d failed: %s", self.partition.name, self.leader, reason)
        return Next.BACKOFF
