"""The partition replica actor: a threaded Ray actor hosting one :class:`Partition`.

One actor per replica of a partition, pinned to its broker's node (hard node affinity),
its log in ``<broker data dir>/<topic>-<partition>-<topic id>`` (:mod:`raylog.storage.log_dirs`:
a topic created again under the same name never reopens the old one's log). Ray restarts it in place after a
crash (``max_restarts``) with the arguments it was first created with: ``__init__``
recovers the log from disk and then, on a first start,
takes the role it was created with; after a restart it takes no role (that one is stale: a
restarted former leader must not accept writes) and reports to the controller until it
answers with the role it decided, the topic's config and the client quotas.

The controller pushes roles (:meth:`update_state`, Kafka's LeaderAndIsr) and, with each,
the topic's config, which the replica re-reads when it was altered. A leader serves
produce, fetch and offset look-ups, waits for the ISR on acks=all, and proposes ISR changes
to the controller. A follower runs a fetch loop against its leader: it first truncates
what diverged (asking the leader where its latest epoch ends, KIP-101), then appends what
it fetches, unchanged. One condition wakes everything that waits on a change of the
log or high watermark: long-polling fetches, acks=all producers, out-of-order batches.

Concurrency: a threaded actor, not an async one (Ray hands each call of an async actor to its
event loop and back, which cost ~300 us more CPU per call, measured by
``benchmarks.latency_trace``). One lock guards the partition, so each :class:`Partition` step
runs alone, as it did on one event loop; a waiting call (a long poll, an acks=all produce)
releases it while it waits, and holds only its thread. Each kind of
call has a pool of threads of its own (Ray concurrency groups, :data:`CONCURRENCY_GROUPS`),
so that calls parked in one pool never keep another kind from running, as Kafka parks its
delayed operations in purgatories and frees its request threads: produces and offset
look-ups in the default pool (:data:`MAX_CONCURRENCY`), consumers' fetches in ``fetch``, the
followers' fetches and epoch queries in ``replication``, transaction markers in ``markers``,
the controller's pushes and probes in ``control``. The HW therefore moves however many
clients wait on it. Calls beyond a pool's size wait in Ray's queue until one of its calls
answers. :meth:`state` reports how many calls wait in each pool (Kafka's purgatory size).
Background threads: the housekeeping rounds, the follower's fetch loop, ISR proposals, the
restart report, the cleaner.

Client quotas (:mod:`raylog.coordination.quotas`, pushed by the controller through
:meth:`update_quotas`): a leader counts the bytes of each produce request and of each
consumer fetch response against the client id's ``producer_byte_rate`` or
``consumer_byte_rate``; follower fetches are never throttled. A client over its quota gets
its response at once with the time to hold back in ``throttle_time_ms``, as Kafka answers
since KIP-219: the client waits that long before it sends this partition another request
(raylog's clients do; the Kafka listener mutes the connection), so that no thread of the
replica is held by a throttled client. Limitation: quotas hold per replica
actor, that is per partition leader, not per broker as in Kafka: a client reading or
writing N partitions led on one broker may move up to N times its quota there.

The actor only translates: requests in, :class:`Partition` steps, responses out; every
raylog error becomes a response error code.
"""

from __future__ import annotations

import collections
import concurrent.futures
import ctypes
import ctypes.util
import dataclasses
import functools
import gc
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import ray

from raylog import metrics
from raylog.actors import logs
from raylog.actors.access import Guard
from raylog.common.acl import CLUSTER_NAME, ACLOperation, ResourceType
from raylog.common.names import NAMESPACE, controller_name, validate_client_id
from raylog.config import TopicConfig
from raylog.coordination.acls import Authorizer
from raylog.coordination.fetcher import EpochAnswer, EpochQuery, FollowerFetcher, Next
from raylog.coordination.partition import Partition, SequenceGap
from raylog.coordination.quotas import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, ClientQuotas, QuotaManager
from raylog.coordination.replica_core import (
    Changed,
    Follow,
    IsrAnswered,
    ProposeIsr,
    ReplicaCore,
    ReportRestart,
    Restarted,
    RoleAnswered,
    StatePushed,
    StopFollowing,
)
from raylog.coordination.txn_verification import VerificationNeeded, verification_error
from raylog.errors import (
    AuthorizationError,
    CoordinatorNotAvailableError,
    InvalidRequestError,
    NotLeaderOrFollowerError,
    OutOfOrderSequenceError,
    RaylogError,
    RequestTimedOutError,
    SaslAuthenticationError,
)
from raylog.protocol import (
    DeleteRecordsResponse,
    FetchRequest,
    FetchResponse,
    ListOffsetsResponse,
    ProduceRequest,
    ProduceResponse,
    error_fields,
    error_of,
)
from raylog.storage import faults
from raylog.storage.log import Log
from raylog.storage.log_dirs import open_log_dir, remove_log_dir
from raylog.types import PartitionInfo, ProducerState

#: Produces and offset look-ups a replica serves at once, each on its own thread (Ray's
#: ``max_concurrency``, the default concurrency group): acks=all produces in flight hold one
#: while they wait for the ISR. A thread costs ~10 KiB and no CPU while it waits (a node's
#: thread ids are bounded too: ``kernel.pid_max``, 32,768 here, for hundreds of replicas).
MAX_CONCURRENCY = 32
#: The other pools (Ray concurrency groups), each kind of call in its own so that no kind
#: waits behind another's parked calls: consumers' long polls (``fetch``), the followers'
#: fetches and epoch queries (``replication``: one long poll per follower at a time),
#: transaction markers waiting for the ISR (``markers``) and the controller's pushes and
#: probes (``control``).
CONCURRENCY_GROUPS = {"fetch": 32, "replication": 8, "markers": 8, "control": 4}
#: The longest a fetch waits for records, whatever its ``max_wait_ms`` asks (a follower's
#: replica.fetch.wait.max.ms too): a consumer's holds one of the ``fetch`` threads meanwhile,
#: and a client that asks days and goes away (a Kafka fetch of max_wait_ms 2**31 - 1 over a
#: connection it closes) must not keep it. An answer with no records before the client's wait
#: ends is one Kafka may give too; a Kafka consumer's request.timeout.ms (30 s by default) ends
#: its own wait no later.
FETCH_MAX_WAIT_MS_MAX = 30_000
#: How often the actor applies retention, the flush.ms policy and the HW checkpoint while its
#: partition changes; rounds that find nothing changed double the pause up to the idle
#: maximum (a node hosts hundreds of idle replicas), and at most a quarter of
#: replica.lag.time.max.ms.
HOUSEKEEPING_INTERVAL_S = 1.0
HOUSEKEEPING_IDLE_MAX_S = 8.0
#: Pause before a follower retries a failed fetch (the leader may be moving).
REPLICA_BACKOFF_S = 0.1
#: Bound on any call a replica makes to another actor.
PEER_CALL_TIMEOUT_S = 10.0
#: A restarted replica that cannot report to the controller logs every this many tries.
RESTART_REPORT_LOG_EVERY = 50


logger = logging.getLogger(__name__)


@functools.cache
def _cleaner_thread() -> concurrent.futures.ThreadPoolExecutor:
    """This process's cleaner thread (one replica per process: one cleaner per replica)."""
    return concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="raylog-cleaner")


class PartitionReplicaActor:
    """See the module docstring. Concurrency: every step on the partition holds ``_lock``;
    ``_changed`` (a condition of that lock) wakes the calls waiting for a change."""

    #: Ray's ``max_concurrency`` and ``concurrency_groups`` for this actor class (the
    #: controller creates it with them).
    MAX_CONCURRENCY = MAX_CONCURRENCY
    CONCURRENCY_GROUPS = CONCURRENCY_GROUPS

    def __init__(
        self,
        cluster_name: str,
        topic: str,
        topic_id: str,
        partition: int,
        broker_id: int,
        data_dir: str,
        config: dict,
        state: PartitionInfo,
        leader_handle=None,
        *,
        session_key: str,
        acls: tuple[int, Authorizer | None] = (-1, None),
    ):
        logs.configure()
        topic_config = TopicConfig.from_properties(config)
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._stopped = threading.Event()  # set once the data is deleted: every loop ends
        self._cluster_name = cluster_name
        self._dir = open_log_dir(data_dir, topic, partition, topic_id)
        log = Log.open(self._dir, topic_config.log_config())
        self.partition = Partition(topic, partition, broker_id, log, topic_config)
        #: The role's rules: what to follow, ISR proposals, the restart report (this actor
        #: carries out what it asks: see :meth:`_carry_out`).
        self.core = ReplicaCore(self.partition)
        self._follower: threading.Event | None = None  # the running fetch loop's stop signal
        self._cleaning: concurrent.futures.Future | None = None  # the cleaning round under way
        self._metric_tags = metrics.partition_tags(topic, partition, broker_id)
        # The constructor's config may be older than any pushed: Ray restarts an actor with
        # the arguments it was created with, not the topic's config as altered since.
        self._config_version = -1
        self._produce_quotas = QuotaManager(PRODUCER_BYTE_RATE)
        self._fetch_quotas = QuotaManager(CONSUMER_BYTE_RATE)
        self._quotas_version = -1
        # Who may call: the cluster's session key and the ACLs as the replica was created with
        # them (so that it never serves unchecked), then as pushed (see raylog.actors.access).
        self._guard = Guard(session_key)
        self._guard.apply(*acls)
        self._waiting: collections.Counter = collections.Counter()  # pool -> calls parked (under _lock)
        with self._lock:
            if ray.get_runtime_context().was_current_actor_reconstructed:
                self._carry_out(self.core.step(Restarted()))
            else:
                self._apply_state(state, leader_handle)
        self._start(self._housekeep)
        # What this process holds from now on lives as long as it does (modules, the log and
        # its indexes): out of the collector's sight. When the object store runs full, Ray
        # asks every worker on the node to gc.collect() at once; 64 replicas took ~25 ms of
        # CPU each to walk ~77k objects, a 2 s stall of every fetch on 2 cores (now ~0.01 ms).
        gc.freeze()

    # --- lifecycle ----------------------------------------------------------------------

    @ray.method(concurrency_group="control")
    def ready(self) -> dict:
        """Constructed: what recovery found, and the epochs of the state it holds."""
        p = self.partition
        with self._lock:
            return {
                "log_end_offset": p.log.log_end_offset,
                "recovery": vars(p.log.recovery),
                "leader_epoch": p.leader_epoch,
                "partition_epoch": p.partition_epoch,
            }

    def _report_restart(self) -> None:
        """Tell the controller that Ray restarted this replica, until it has heard (it may be
        restarting itself), and take what it answers. The answer, not a push, carries them:
        the controller's calls may still go to this actor's dead process for a while, and a
        push the new process gets first is held until then (see :mod:`~raylog.coordination.replica_core`)."""
        p = self.partition
        attempts = 0
        while not self._stopped.is_set():
            try:
                call = self._controller().replica_restarted.remote(p.topic, p.partition, p.broker_id)
                answer = ray.get(call, timeout=PEER_CALL_TIMEOUT_S)
                break
            except (ValueError, ray.exceptions.RayError) as exc:  # (a timeout is a RayError)
                if attempts % RESTART_REPORT_LOG_EVERY == 0:  # it serves nothing until answered
                    logger.warning("%s: restarted; report %d to the controller failed: %r", p.name, attempts + 1, exc)
                attempts += 1
                self._stopped.wait(REPLICA_BACKOFF_S)
        else:
            return
        with self._lock:
            if answer is None:  # the partition was deleted meanwhile
                self._carry_out(self.core.step(RoleAnswered(None)))
                return
            state, leader_handle, config, quotas, acls = answer
            self._apply_config(*config)
            self._carry_out(self.core.step(RoleAnswered(state, leader_handle)))
            self._apply_quotas(*quotas)
            self._guard.apply(*acls)
            self._notify()

    @ray.method(concurrency_group="control")
    def update_state(self, state: PartitionInfo, leader_handle=None, config: tuple[int, dict] | None = None) -> None:
        """The controller's word on this partition's leader, epochs, replicas and ISR, and
        on its topic's config as ``(config_version, properties)``."""
        with self._lock:
            if config is not None:
                self._apply_config(*config)
            self._apply_state(state, leader_handle)

    def _apply_config(self, version: int, properties: dict) -> None:
        """Use the topic's config of ``version`` unless a newer one is in use (pushes may
        arrive out of order)."""
        if version > self._config_version:
            self._config_version = version
            self.partition.update_config(TopicConfig.from_properties(properties))

    @ray.method(concurrency_group="control")
    def update_quotas(self, version: int, quotas: ClientQuotas) -> None:
        """The controller's client quotas of ``version`` (an older push is ignored)."""
        with self._lock:
            self._apply_quotas(version, quotas)

    @ray.method(concurrency_group="control")
    def update_acls(self, version: int, authorizer: Authorizer | None) -> None:
        """The controller's ACLs of ``version`` as an authorizer (None: no authorizer is
        configured); an older push is ignored."""
        self._guard.apply(version, authorizer)

    def _apply_quotas(self, version: int, quotas: ClientQuotas) -> None:
        if version > self._quotas_version:
            self._quotas_version = version
            self._produce_quotas.update_quotas(quotas)
            self._fetch_quotas.update_quotas(quotas)

    def _apply_state(self, state: PartitionInfo, leader_handle) -> None:
        """Take the controller's state (ignored unless newer, see :meth:`Partition.apply_state`)
        and follow ``leader_handle`` when this replica follows."""
        self._carry_out(self.core.step(StatePushed(state, leader_handle)))
        self._notify()

    def _carry_out(self, effects: list) -> None:
        """Do what a step of the core asks (holding ``_lock``; see :mod:`~raylog.coordination.replica_core`)."""
        for effect in effects:
            if isinstance(effect, StopFollowing):
                self._stop_following()
            elif isinstance(effect, Follow):
                self._stop_following()
                if not self._stopped.is_set():
                    self._follower = threading.Event()
                    self._start(self._fetch_loop, effect.fetcher, effect.leader, self._follower)
            elif isinstance(effect, ProposeIsr):
                _peer_thread().submit(self._propose_isr, effect)
            elif isinstance(effect, ReportRestart):
                self._start(self._report_restart)
        self._role_taken()

    def _role_taken(self) -> None:
        """After every step of the core (holding ``_lock``): the role is what the partition holds."""

    @ray.method(concurrency_group="control")
    def close(self) -> None:
        """Stop every loop, write the HW checkpoint and the producer snapshot, and close the
        log flushed (its next open recovers nothing), as a Kafka broker's controlled
        shutdown: once this returns, nothing in this process writes to the log directory.
        The controller kills the actor next."""
        self._stopped.set()
        with self._lock:
            self._closing()
            p = self.partition
            if p.log.offline is None:
                try:
                    p.checkpoint_high_watermark()
                    p.checkpoint_producer_state()
                except RaylogError as exc:  # the log's recovery does without them
                    logger.warning("%s: checkpoints not written at close: %s", p.name, exc)
            p.log.close()  # a cleaning round under way gives up
            cleaning = self._cleaning
        if cleaning is not None:
            concurrent.futures.wait([cleaning])

    def _closing(self) -> None:
        """End what runs beside the calls (holding ``_lock``): the fetch loop."""
        self._stop_following()

    @ray.method(concurrency_group="control")
    def delete_data(self) -> None:
        """Close and remove this replica's log (the topic or this replica is going away).

        Raises:
            StorageError: the log was not removed (its broker removes it as a stray log
                when the controller next registers it).
        """
        self.close()
        remove_log_dir(self._dir)

    # --- leader: produce ----------------------------------------------------------------

    def produce(self, request: ProduceRequest) -> ProduceResponse:
        """Append a producer's batch; for acks=all, wait until the ISR has it; the response
        says how long the client is to hold back for its producer quota.

        An idempotent batch that arrives before an earlier one of its producer waits for it
        (Ray may run pipelined calls out of order), unless the request says its batches come
        in order (a Kafka connection): then it is refused at once. A retry of a batch already
        appended is answered with the original offsets, after the same wait for the ISR. A
        transaction's first batch here is verified with its coordinator first
        (:meth:`_verify_transaction`)."""
        try:
            validate_client_id(request.client_id)
            self._guard.require(request.session, ACLOperation.WRITE, ResourceType.TOPIC, self.partition.topic)
        except (InvalidRequestError, AuthorizationError, SaslAuthenticationError) as exc:
            return _produce_error(exc)
        response = self._append(request)
        with self._lock:
            throttle_ms = self._produce_quotas.record(request.client_id, len(request.records), _now_ms())
        return self._throttled(response, throttle_ms, "producer")

    def _append(self, request: ProduceRequest) -> ProduceResponse:
        started = time.monotonic()
        deadline = started + request.timeout_ms / 1000
        with self._lock:
            while True:
                try:
                    outcome = self.partition.append_as_leader(
                        request.records,
                        request.acks,
                        request.first_unacked_sequence,
                        request.transactional_id,
                        verify=True,
                        in_order=request.in_order,
                    )
                    break
                except VerificationNeeded as needed:
                    error = self._verify_transaction(needed, deadline)
                    if error is not None:
                        return _produce_error(error)
                except SequenceGap:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return _produce_error(
                            OutOfOrderSequenceError("an earlier batch of this producer never arrived")
                        )
                    self._wait("produce", remaining)
                except Exception as exc:  # noqa: BLE001 — every error travels back as a code
                    return ProduceResponse(**error_fields(exc), record_errors=getattr(exc, "record_errors", ()))
            self._notify()
            self._maybe_propose_isr()
            if request.acks == -1:
                error = self._await_replication(outcome.last_offset + 1, deadline, "produce")
                if error is not None:
                    return _produce_error(error)
            log_start_offset = self.partition.log.log_start_offset
        latency_s = time.monotonic() - started
        metrics.record_produce(self._metric_tags, outcome.record_count, len(request.records), latency_s)
        return ProduceResponse(
            base_offset=outcome.first_offset,
            log_append_time_ms=outcome.log_append_time_ms,
            log_start_offset=log_start_offset,
        )

    @ray.method(concurrency_group="control")
    def describe_producers(self, session: str | None = None) -> list[ProducerState]:
        """The producers this leader knows (Kafka's DescribeProducers), for finding hanging
        transactions (see :mod:`raylog.coordination.txn_verification`).

        Raises:
            NotLeaderOrFollowerError: this replica does not lead.
            TopicAuthorizationFailedError: the caller of ``session`` may not read the topic.
        """
        self._guard.require(session, ACLOperation.READ, ResourceType.TOPIC, self.partition.topic)
        with self._lock:
            p = self.partition
            if not p.is_leader:
                raise NotLeaderOrFollowerError(f"{p.name}: broker {p.broker_id} does not lead")
            return p.producers.describe()

    def _verify_transaction(self, needed: VerificationNeeded, deadline: float) -> RaylogError | None:
        """Ask the coordinator of ``needed``'s transactional id whether this partition is in
        the producer's ongoing transaction (holding ``_lock`` once, released while it asks);
        None when it is (recorded in the partition), else what to answer the producer."""
        p = self.partition
        timeout_s = min(PEER_CALL_TIMEOUT_S, max(0.0, deadline - time.monotonic()))
        self._lock.release()
        try:
            error = _ask_transaction_coordinator(
                self._controller, needed, p.topic, p.partition, timeout_s, self._guard.broker_token()
            )
        finally:
            self._lock.acquire()
        p.verification_answered(needed, error is None)
        return error

    @ray.method(concurrency_group="markers")
    def write_txn_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        timeout_ms: int = 30_000,
        bumps_epoch: bool = True,
    ) -> ProduceResponse:
        """A transaction coordinator's marker (see :meth:`Partition.append_marker`), answered
        once the ISR has it; a stale marker is answered once the ISR has everything this
        replica holds (the first attempt, written but not answered, may still be
        replicating). Either way it is then told to :meth:`_marker_written`."""
        deadline = time.monotonic() + timeout_ms / 1000
        with self._lock:
            try:
                self._require_markers_accepted()
                info = self.partition.append_marker(producer_id, producer_epoch, commit, coordinator_epoch, bumps_epoch)
            except Exception as exc:  # noqa: BLE001 — every error travels back as a code
                return ProduceResponse(**error_fields(exc))
            self._notify()
            self._maybe_propose_isr()
            end = self.partition.log.log_end_offset if info is None else info.last_offset + 1
            error = self._await_replication(end, deadline, "markers")
            if error is not None:
                return _produce_error(error)
            self._marker_written(producer_id, producer_epoch, commit, bumps_epoch)
        return ProduceResponse(base_offset=-1 if info is None else info.first_offset)

    def _require_markers_accepted(self) -> None:
        """Raise a retriable error while this replica cannot take markers (holding ``_lock``)."""

    def _marker_written(self, producer_id: int, producer_epoch: int, commit: bool, bumps_epoch: bool) -> None:
        """A marker of ``producer_id`` with ``producer_epoch`` (bumped, or the producer's
        current epoch) is replicated, now or before (holding ``_lock``)."""

    def _await_replication(self, offset: int, deadline: float, pool: str) -> RaylogError | None:
        """Wait (holding ``_lock``, released meanwhile, counted as parked in ``pool``) until
        the HW reaches ``offset`` (see :meth:`Partition.replication_done`)."""
        p = self.partition
        epoch = p.leader_epoch
        while True:
            done, error = p.replication_done(offset, epoch)
            if done:
                return error
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return RequestTimedOutError(f"{p.name}: the ISR {list(p.isr)} did not get the batch in time")
            self._wait(pool, remaining)

    # --- leader: fetch and offsets ------------------------------------------------------

    @ray.method(concurrency_group="fetch")
    def fetch(self, request: FetchRequest) -> FetchResponse:
        """Batches from ``request.offset``; waits (long poll) for ``min_bytes``; for a consumer,
        the response says how long to hold back for its consumer quota."""
        try:
            validate_client_id(request.client_id)
            self._authorize_fetch(request)
        except (InvalidRequestError, AuthorizationError, SaslAuthenticationError) as exc:
            return FetchResponse(**error_fields(exc))
        response = self._read(request)
        if request.replica_id >= 0:
            return response  # replication is never throttled
        with self._lock:
            throttle_ms = self._fetch_quotas.record(request.client_id, len(response.records), _now_ms())
        return self._throttled(response, throttle_ms, "consumer")

    def _authorize_fetch(self, request: FetchRequest) -> None:
        """A consumer needs READ on the topic, a follower (a replica id) is the broker."""
        access = self._guard.access(request.session)
        if access is None:
            return
        if request.replica_id >= 0:
            access.require(ACLOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)
        access.require(ACLOperation.READ, ResourceType.TOPIC, self.partition.topic)

    def delete_records(self, offset: int, timeout_ms: int, session: str | None = None) -> DeleteRecordsResponse:
        """Kafka's DeleteRecords on this leader: the records below ``offset`` (-1: the HW) are
        deleted here at once and answered once every ISR member deleted them too (the low
        watermark reached ``offset``), or REQUEST_TIMED_OUT after ``timeout_ms`` (they are
        deleted all the same, followers on their next fetches). The caller of ``session``
        needs DELETE on the topic."""
        deadline = time.monotonic() + timeout_ms / 1000
        p = self.partition
        with self._lock:
            try:
                self._guard.require(session, ACLOperation.DELETE, ResourceType.TOPIC, p.topic)
                target, epoch = p.delete_records(offset), p.leader_epoch
            except Exception as exc:  # noqa: BLE001 — every error travels back as a code
                return DeleteRecordsResponse(**error_fields(exc))
            self._notify()  # parked follower fetches end now, with the new log start
            while p.low_watermark < target:
                if not p.is_leader or p.leader_epoch != epoch:
                    moved = NotLeaderOrFollowerError(f"{p.name}: leadership moved before every replica deleted")
                    return DeleteRecordsResponse(**error_fields(moved))
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    late = RequestTimedOutError(f"{p.name}: the ISR's low watermark is {p.low_watermark}, not {target}")
                    return DeleteRecordsResponse(**error_fields(late), low_watermark=p.low_watermark)
                self._wait("produce", remaining)
            return DeleteRecordsResponse(low_watermark=p.low_watermark)

    def _throttled(self, response, throttle_ms: int, client_type: str):
        """``response`` telling the client to hold back ``throttle_ms`` (KIP-219: answered at
        once, the client waits)."""
        if throttle_ms <= 0:
            return response
        metrics.record_broker_throttle(self._metric_tags, client_type, throttle_ms)
        return dataclasses.replace(response, throttle_time_ms=throttle_ms)

    def _read(self, request: FetchRequest) -> FetchResponse:
        wait_s = min(max(0, request.max_wait_ms), FETCH_MAX_WAIT_MS_MAX) / 1000
        deadline = time.monotonic() + wait_s
        first = True
        with self._lock:
            while True:
                watermarks = (self.partition.high_watermark, self.partition.low_watermark)
                response = self.partition.fetch(request, record_fetch=first)
                if response.error_code:
                    return response
                if request.replica_id >= 0 and first:
                    # Only when the HW (or the low watermark) moved: a notify wakes the other
                    # followers' long polls too, and theirs would wake this one, a busy loop
                    # while the partition is idle.
                    moved = (self.partition.high_watermark, self.partition.low_watermark) != watermarks
                    if moved:
                        self._notify()  # wake acks=all producers, consumers, DeleteRecords
                    self._maybe_propose_isr()
                if first:
                    first, start = False, response.log_start_offset
                remaining = deadline - time.monotonic()
                if len(response.records) >= request.min_bytes or remaining <= 0:
                    break
                if request.replica_id >= 0 and response.log_start_offset != start:
                    break  # DeleteRecords moved the log start: the follower follows it now
                self._wait("replication" if request.replica_id >= 0 else "fetch", remaining)
        latency_s = time.monotonic() - deadline + wait_s
        metrics.record_fetch(self._metric_tags, request.replica_id >= 0, len(response.records), latency_s)
        return response

    def list_offsets(
        self, timestamp_ms: int, current_leader_epoch: int = -1, isolation_level: int = 0, session: str | None = None
    ) -> ListOffsetsResponse:
        """Kafka's ListOffsets of this partition; the caller of ``session`` needs DESCRIBE on the topic."""
        with self._lock:
            try:
                self._guard.require(session, ACLOperation.DESCRIBE, ResourceType.TOPIC, self.partition.topic)
                offset, timestamp = self.partition.list_offset(timestamp_ms, current_leader_epoch, isolation_level)
            except Exception as exc:  # noqa: BLE001
                return ListOffsetsResponse(**error_fields(exc))
            return ListOffsetsResponse(offset=offset, timestamp_ms=timestamp, leader_epoch=self.partition.leader_epoch)

    @ray.method(concurrency_group="replication")
    def end_offset_for_epoch(self, epoch: int, session: str | None = None) -> tuple[int, int, int]:
        """``(error_code, epoch', end_offset)`` for a follower truncating (KIP-101), or a
        consumer checking its position (KIP-320; DESCRIBE on the topic)."""
        try:
            self._guard.require(session, ACLOperation.DESCRIBE, ResourceType.TOPIC, self.partition.topic)
        except (AuthorizationError, SaslAuthenticationError) as exc:
            return exc.code, -1, -1
        with self._lock:
            return self.partition.answer_epoch_query(epoch)

    @ray.method(concurrency_group="control")
    def state(self) -> dict:
        p = self.partition
        with self._lock:
            return {
                "leader": p.leader,
                "leader_epoch": p.leader_epoch,
                "isr": list(p.isr),
                "pending_isr": None if p.pending_isr is None else list(p.pending_isr),
                "isr_proposal_in_flight": self.core.proposing is not None,
                "replicas": list(p.replicas),
                "partition_epoch": p.partition_epoch,
                "high_watermark": p.high_watermark,
                "last_stable_offset": p.last_stable_offset,
                "open_transactions": [
                    (s.producer_id, s.producer_epoch, s.current_transaction_start_offset)
                    for s in p.producers.describe()
                    if s.current_transaction_start_offset >= 0
                ],
                "log_start_offset": p.log.log_start_offset,
                "log_end_offset": p.log.log_end_offset,
                "epochs": p.epochs.entries,
                "size_bytes": p.log.size_bytes,
                "segments": p.log.segment_count,
                "pid": os.getpid(),
                "fetch_errors": self.core.fetcher.errors if self.core.fetcher is not None else 0,
                "last_fetch_error": self.core.fetcher.last_error if self.core.fetcher is not None else None,
                "client_quotas_version": self._quotas_version,
                "log_dir": self._dir,
                "log_offline": p.log.offline is not None,
                "cleaning": self._cleaning_now(),
                "waiting": dict(self._waiting),
            }

    # --- leader: ISR --------------------------------------------------------------------

    def _maybe_propose_isr(self) -> None:
        """Send the ISR change the partition proposes, if any and none is in flight (holding
        ``_lock``): one at a time, from the peer-call thread."""
        self._carry_out(self.core.step(Changed()))

    def _propose_isr(self, proposal: ProposeIsr) -> None:
        """Ask the controller (the single writer of the ISR) and take its answer; without one
        the proposal stays pending and the next housekeeping round sends it again."""
        p = self.partition
        answer = None
        try:
            call = self._controller().alter_isr.remote(
                p.topic, p.partition, p.broker_id, proposal.leader_epoch, proposal.partition_epoch, proposal.isr
            )
            answer = ray.get(call, timeout=PEER_CALL_TIMEOUT_S)
        except (ValueError, ray.exceptions.RayError):
            pass
        finally:  # the core waits for this answer (None: none came) before it proposes again
            with self._lock:
                self._carry_out(self.core.step(IsrAnswered(proposal.isr, answer)))
                self._notify()

    # --- follower -----------------------------------------------------------------------

    def _fetch_loop(self, fetcher: FollowerFetcher, leader, stop: threading.Event) -> None:
        """Run ``fetcher`` against ``leader`` until the role moves on or ``stop`` is set (see
        :mod:`raylog.coordination.fetcher`: the rules are there, the calls here). Once
        stopped, nothing it receives is applied: every step checks ``stop`` under the lock."""
        p = self.partition
        while True:
            with self._lock:
                fetcher.session = self._guard.broker_token()
                request = None if stop.is_set() else fetcher.next_request()
                if request is None:
                    if self._follower is stop:
                        self._follower = None  # ended on its own: a new role starts another
                    return
            try:
                if isinstance(request, EpochQuery):
                    call = leader.end_offset_for_epoch.remote(request.epoch, self._guard.broker_token())
                    answer = EpochAnswer(*ray.get(call, timeout=PEER_CALL_TIMEOUT_S))
                else:
                    call = leader.fetch.options(concurrency_group="replication").remote(request)
                    # The leader may hold it replica.fetch.wait.max.ms before it answers.
                    answer = ray.get(call, timeout=request.max_wait_ms / 1000 + PEER_CALL_TIMEOUT_S)
            except ray.exceptions.RayError:  # (a timeout is a RayError)
                answer = None
            with self._lock:
                if stop.is_set():
                    return
                if answer is None:
                    then = fetcher.on_failure(request)
                else:
                    then = fetcher.on_answer(request, answer)
                    self._notify()
            if then is Next.REPORT_LEADER:
                # Another in-sync replica can lead while Ray restarts a dead one.
                self._tell_controller("leader_unreachable", p.topic, p.partition, p.leader_epoch)
            if then is not Next.AGAIN:
                stop.wait(REPLICA_BACKOFF_S)

    def _stop_following(self) -> None:
        if self._follower is not None:
            self._follower.set()
            self._follower = None

    # --- plumbing -----------------------------------------------------------------------

    def _controller(self):
        return ray.get_actor(controller_name(self._cluster_name), namespace=NAMESPACE)

    def _tell_controller(self, method: str, *args) -> None:
        """A call to the controller without waiting for its answer (retried elsewhere)."""
        try:
            getattr(self._controller(), method).remote(*args)
        except (ValueError, ray.exceptions.RayError):
            pass

    def _start(self, target: Callable[..., None], *args) -> threading.Thread:
        """Run ``target(*args)`` on a daemon thread of its own."""
        thread = threading.Thread(target=target, args=args, name=f"raylog-{target.__name__}", daemon=True)
        thread.start()
        return thread

    def _wait(self, pool: str, timeout_s: float) -> None:
        """Wait (holding ``_lock``, released meanwhile) for a change or ``timeout_s``, counted
        as a call parked in ``pool``."""
        self._waiting[pool] += 1
        try:
            self._changed.wait(timeout_s)
        finally:
            self._waiting[pool] -= 1

    def _notify(self) -> None:
        """Wake every waiter (holding ``_lock``): long-polling fetches, acks=all producers,
        sequence gaps."""
        self._changed.notify_all()

    def _housekeep(self) -> None:
        """Each round: ISR proposals, bringing back a log a disk error took offline (once no
        cleaning round runs), retention (below the HW), deleting the files of removed
        segments once file.delete.delay.ms has passed, the flush.ms policy, the HW
        checkpoint, producer expiry and snapshot and, for a compacted topic, a cleaning round
        (below the HW, keeping each producer's last batch) in the cleaner thread; a disk
        error (e.g. a full disk) skips the round instead of ending the loop."""
        interval_s, seen, idle = HOUSEKEEPING_INTERVAL_S, None, True
        while not self._stopped.wait(interval_s):
            if not idle:
                _release_free_memory()
            with self._lock:
                p = self.partition
                log = p.log
                now = (log.log_end_offset, p.high_watermark, log.log_start_offset, p.leader_epoch, p.isr, p.pending_isr)
                idle = now == seen and log.offline is None and not log.config.compact
                # An idle leader still drops a follower that stopped fetching, within 1.25 lag times.
                longest_s = min(HOUSEKEEPING_IDLE_MAX_S, p.config.replica_lag_time_max_ms / 4000)
                longest_s = max(HOUSEKEEPING_INTERVAL_S, longest_s)
                interval_s = min(2 * interval_s, longest_s) if idle else HOUSEKEEPING_INTERVAL_S
                seen = now
                self._maybe_propose_isr()
                if log.offline is not None and not self._cleaning_now():
                    if log.revive():
                        self._notify()
                try:
                    log.apply_retention(p.high_watermark)
                    log.delete_retired_segments()
                    log.maybe_flush()
                    p.checkpoint_high_watermark()
                    p.checkpoint_producer_state()
                    if log.config.compact and not self._cleaning_now():
                        self._cleaning = _cleaner_thread().submit(
                            self._clean, p.last_stable_offset, p.producers.last_offsets(), p.txn_index.all()
                        )
                    if not idle:
                        metrics.record_partition_state(self._metric_tags, p)
                except RaylogError:
                    continue

    def _cleaning_now(self) -> bool:
        return self._cleaning is not None and not self._cleaning.done()

    def _clean(self, last_stable_offset: int, producer_last_offsets: dict[int, int], aborted: list) -> None:
        """One cleaning round below the LSO (transactions there are decided), in this
        process's cleaner thread without ``_lock`` (the log swaps segments under its own
        lock; see :class:`~raylog.storage.log.Log`)."""
        try:
            cleaned = self.partition.log.clean(
                max_offset=last_stable_offset, producer_last_offsets=producer_last_offsets, aborted=aborted
            )
        except RaylogError as exc:
            logger.warning("%s: cleaning round failed, the next one retries: %s", self.partition.name, exc)
            return
        if cleaned is not None:
            metrics.record_cleaning(self._metric_tags, cleaned)

    @ray.method(concurrency_group="control")
    def inject_disk_fault(self, errno: int | None, duration_s: float | None = None) -> None:
        """Test only: make every storage write in this replica's process fail with
        ``OSError(errno)`` (``errno.ENOSPC``: a full disk, ``errno.EIO``: a failing one), for
        ``duration_s`` if given, or stop with None (:mod:`raylog.storage.faults`). Produces
        are then answered with KAFKA_STORAGE_ERROR; once the fault stops, the next
        housekeeping round brings a log that went offline back."""
        faults.inject(errno, duration_s)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def _release_free_memory() -> None:
    """Give the C heap's free pages back to the system. Calls on many threads interleave
    their large buffers (batches, fetch answers) in the heap, so freed ones stay pinned
    below live ones: a replica held ~310 MB after a load that left 78 MB on one thread;
    trimmed after each busy round, ~200 MB (fixing glibc's mmap threshold instead cost a
    third of fetch throughput)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _peer_thread() -> concurrent.futures.ThreadPoolExecutor:
    """This process's thread for calls to other actors whose answers it waits for."""
    return concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="raylog-peer")


def _now_ms() -> float:
    return time.monotonic() * 1000


def _ask_transaction_coordinator(
    controller: Callable[[], Any],
    needed: VerificationNeeded,
    topic: str,
    partition: int,
    timeout_s: float,
    session: str,
) -> RaylogError | None:
    """The coordinator's word on ``needed`` within ``timeout_s`` (Kafka's AddPartitionsToTxn
    with verifyOnly), asked as the broker (``session``): None if the partition is in the
    producer's ongoing transaction, else the error to answer the producer (see
    :func:`verification_error`)."""
    started = time.monotonic()
    try:
        _, coordinator = ray.get(
            controller().find_transaction_coordinator.remote(needed.transactional_id, session=session),
            timeout=timeout_s,
        )
        if coordinator is None:
            raise CoordinatorNotAvailableError(f"no coordinator for {needed.transactional_id!r} right now")
        answer = ray.get(
            coordinator.verify_transaction.remote(
                needed.transactional_id, needed.producer_id, needed.producer_epoch, topic, partition
            ),
            timeout=max(0.0, timeout_s - (time.monotonic() - started)),
        )
        error = error_of(answer)
    except (ValueError, ray.exceptions.RayError) as exc:  # (a timeout is a RayError)
        error = RequestTimedOutError(f"the transaction coordinator did not answer: {exc!r}")
    except RaylogError as exc:
        error = exc
    return None if error is None else verification_error(error)


def _produce_error(error: RaylogError) -> ProduceResponse:
    return ProduceResponse(**error_fields(error))
