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
it fetches, unchanged. Calls that wait (acks=all produces and markers for the ISR,
long-polling fetches for records, DeleteRecords for the low watermark, a batch after a
sequence gap for the missing one) are parked in a purgatory under what they wait for
(:mod:`raylog.coordination.purgatory`), each on a condition of its own: a change wakes only
the calls it may complete.

Concurrency: a threaded actor, not an async one (Ray hands each call of an async actor to its
event loop and back, which cost ~300 us more CPU per call, measured by
``raylog.benchmarks.latency_trace``). One lock guards the partition, so each :class:`Partition` step
runs alone, as it did on one event loop; a waiting call (a long poll, an acks=all produce)
releases it while it waits, and holds only its thread (a call to a threaded actor is
answered from the thread that took it; an async actor would hold a coroutine instead, for
~300 us more CPU per call). Each kind of
call has a pool of threads of its own (Ray concurrency groups, :data:`CONCURRENCY_GROUPS`),
so that calls parked in one pool never keep another kind from running, as Kafka parks its
delayed operations in purgatories and frees its request threads: produces and offset
look-ups in the default pool (:data:`MAX_CONCURRENCY`), consumers' fetches in ``fetch``, the
followers' fetches and epoch queries in ``replication``, transaction markers in ``markers``,
the controller's pushes and probes in ``control``. The HW therefore moves however many
clients wait on it. Calls beyond a pool's size wait in Ray's queue until one of its calls
answers. :meth:`state` reports how many calls are parked in each pool (Kafka's purgatory size).
Background threads: the housekeeping rounds, the follower's fetch loop, ISR proposals, the
restart report, the cleaner and, on a tiered topic, the tiering pump.

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
raylog error becomes a response error code. Its role (what to follow, ISR proposals, the
restart report) is :class:`~raylog.coordination.replica_core.ReplicaCore`'s, whose effects
:meth:`PartitionReplicaActor._carry_out` carries out. Writes, reads and housekeeping are the
actor's parts, one module each (:mod:`~raylog.actors.replica_parts`).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import gc
import logging
import os
import threading
from collections.abc import Callable

import ray

from raylog import metrics
from raylog.actors import logs
from raylog.actors.access import Guard
from raylog.actors.replica_housekeeping import Housekeeping
from raylog.actors.replica_parts import PEER_CALL_TIMEOUT_S, REPLICA_BACKOFF_S, now_ms
from raylog.actors.replica_reads import LeaderReads
from raylog.actors.replica_tiering import Tiering
from raylog.actors.replica_writes import LeaderWrites
from raylog.common.names import NAMESPACE, controller_name, remote_topic_name
from raylog.config import TopicConfig
from raylog.coordination.acls import Authorizer
from raylog.coordination.fetcher import EpochAnswer, EpochQuery, FollowerFetcher, Next
from raylog.coordination.partition import Partition
from raylog.coordination.purgatory import Delayed, Purgatory
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
from raylog.errors import RaylogError
from raylog.storage.log import Log
from raylog.storage.log_dirs import open_log_dir, remove_log_dir
from raylog.types import PartitionInfo

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
#: A restarted replica that cannot report to the controller logs every this many tries.
RESTART_REPORT_LOG_EVERY = 50


logger = logging.getLogger(__name__)


class PartitionReplicaActor(LeaderWrites, LeaderReads, Housekeeping, Tiering):
    """See the module docstring. Concurrency: every step on the partition holds ``_lock``;
    a call that waits is parked in ``_purgatory`` on a condition of that lock."""

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
        remote_log_storage_uri: str = "",
    ):
        logs.configure()
        topic_config = TopicConfig.from_properties(config)
        self._lock = threading.RLock()
        self._purgatory = Purgatory()  # the calls that wait, under what they wait for
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
        # Tiered storage (see raylog.actors.replica_tiering): the cluster's store, the pump.
        self._remote_log_storage_uri = remote_log_storage_uri
        self._remote_topic = remote_topic_name(topic, topic_id)
        self._tiering: threading.Thread | None = None
        self._remote_reader = None
        self._tiering_pump = None
        self._remote_fetches = 0  # consumer fetches answered from the remote tier (under _lock)
        with self._lock:
            if ray.get_runtime_context().was_current_actor_reconstructed:
                self._take(Restarted())
            else:
                self._apply_state(state, leader_handle)
            self._maybe_start_tiering()
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
                self._take(RoleAnswered(None))
                return
            state, leader_handle, config, quotas, acls = answer
            self._apply_config(*config)
            self._take(RoleAnswered(state, leader_handle))
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
            self._maybe_start_tiering()

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
        self._take(StatePushed(state, leader_handle))
        self._notify()

    def _take(self, event) -> None:
        """Step the core with an event that may move the role, carry out what it asks, and
        tell subclasses the role the partition holds now (holding ``_lock``)."""
        self._carry_out(self.core.step(event))
        self._role_taken()

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

    def _role_taken(self) -> None:
        """After every step that may move the role (holding ``_lock``): the role is what the
        partition holds. A ``Changed`` step (each produce and fetch) only proposes ISR changes."""

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
        """End what runs beside the calls (holding ``_lock``): the fetch loop, and the tiering
        pump's pause."""
        self._stop_following()
        self._end_tiering_pause()

    @ray.method(concurrency_group="control")
    def delete_data(self, topic_deleted: bool = False) -> None:
        """Close and remove this replica's log (the topic or this replica is going away);
        with ``topic_deleted``, the partition's objects in the remote tier too.

        Raises:
            StorageError: the log was not removed (its broker removes it as a stray log
                when the controller next registers it).
        """
        self.close()
        remove_log_dir(self._dir)
        if topic_deleted:
            self._delete_remote_partition()

    # --- leader: produce ----------------------------------------------------------------

    # --- leader: fetch and offsets ------------------------------------------------------

    def _throttled(self, response, throttle_ms: int, client_type: str):
        """``response`` telling the client to hold back ``throttle_ms`` (KIP-219: answered at
        once, the client waits)."""
        if throttle_ms <= 0:
            return response
        metrics.record_broker_throttle(self._metric_tags, client_type, throttle_ms)
        return dataclasses.replace(response, throttle_time_ms=throttle_ms)

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
                "log_start_offset": p.log_start_offset,
                "local_log_start_offset": p.log.log_start_offset,
                "remote_log_start_offset": p.remote_log_start_offset,
                "highest_remote_offset": p.highest_remote_offset,
                "tiering": self._tiering_state(),
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
                "waiting": self._purgatory.sizes(),
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
                self._take(IsrAnswered(proposal.isr, answer))
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

    def _await(self, op: Delayed):
        """``op``'s answer once it completes (holding ``_lock``, released while it is parked in
        the purgatory, on a condition of its own, until a change wakes it or its deadline)."""
        while not op.try_complete(self.partition, now_ms()):
            if op.token is None:
                op.token = self._condition()
            self._purgatory.park(op)
            try:
                op.token.wait(max(0.0, op.deadline_ms - now_ms()) / 1000)
            finally:
                self._purgatory.unpark(op)  # (if its deadline, not a change, woke it)
        return op.answer

    def _condition(self) -> threading.Condition:
        """A condition of ``_lock`` for one parked call."""
        return threading.Condition(self._lock)

    def _notify(self) -> None:
        """Wake the parked calls that the partition's change may complete, and a paused tiering
        pump if a segment is ready to copy (holding ``_lock``)."""
        for op in self._purgatory.wake(self.partition):
            op.token.notify()
        self._nudge_tiering()


@functools.cache
def _peer_thread() -> concurrent.futures.ThreadPoolExecutor:
    """This process's thread for calls to other actors whose answers it waits for."""
    return concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="raylog-peer")
