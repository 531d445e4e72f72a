"""Seeded fault runs: one multi-node Ray cluster on this machine, reused by many short runs.

:class:`SoakCluster` starts a head node (the controller) and labelled broker nodes, each
with its own data directory, with Ray's fast failure detection; a broker can be killed
for real (its node removed) and brought back on a new node with the same label and disk.

:func:`run_once` is one run: a fresh topic, the workload (:mod:`raylog.chaos.workload`)
for ``duration_s`` while the :class:`~raylog.chaos.nemesis.Nemesis` injects faults (a few
seconds past the last fault's heal when all ``max_faults`` were tried before), then
every fault healed, the cluster back in sync, clients stopped, a final read, the checker,
and the topic deleted. Its :class:`RunResult` prints as one line with the seed, so any run
can be replayed (``raylog bench soak --runs 1 --seed S``). An anomaly in a configuration
that promises safety (acks=all, min.insync.replicas >= 2, replication factor >= 3, unclean
election off) fails the run; the same anomalies elsewhere are reported, not failures.

With ``kafka_producers``, ``kafka_consumers`` and ``kafka_transactional`` (``raylog bench soak
--kafka-producers N --kafka-consumers N --kafka-transactional N``), unchanged Kafka clients
(confluent-kafka, :mod:`raylog.chaos.kafka_workload`) write and read through the brokers'
Kafka listeners beside raylog's own clients; ``producers`` and ``consumers`` scale raylog's.

Every run also watches its topic's leaders (:mod:`raylog.chaos.leadership`): a leader
demoted while no fault disturbed its process or node fails the run, and the run's line
gives its throughput (acknowledged sends per second of workload) and the p50 / p99 time from
a send to its acknowledgement.

With ``transactions`` on (opt-in: ``raylog bench soak --transactions``), a transactional
worker joins the workload and the nemesis also kills its transaction coordinator
(``TRANSACTION_FAULTS``); ``__transaction_state`` is then waited for in sync too.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import logging
import os
import random
import shutil
import tempfile
import time
import uuid
from typing import Any

import ray
from ray.cluster_utils import Cluster

import raylog
from raylog.actors.replica import PartitionReplicaActor
from raylog.chaos import checker, kafka_workload, leadership, workload
from raylog.chaos.faulty import CallDelays, DelayedCluster, start_proxy
from raylog.chaos.history import OK, FinalRead, Poll, Recorder, Send, Txn
from raylog.chaos.nemesis import FAULT_KINDS, TRANSACTION_FAULTS, FaultEvent, Nemesis
from raylog.clients.admin import Admin
from raylog.common.names import OFFSETS_TOPIC, TRANSACTION_TOPIC
from raylog.errors import InvalidConfigError, RaylogError
from raylog.transport import call
from raylog.types import NewTopic

logger = logging.getLogger(__name__)

#: A killed node is declared dead within about 5 s (Ray's default: about 50 s). Not faster:
#: at 500 ms timeouts and 3 failures, the 64-client soak saturating a 2-core machine had
#: healthy broker nodes declared dead (seeds 236 and 237 lost every broker), and a broker node
#: just started beside a busy core was declared dead 24 s after it registered (tests/cluster).
FAST_FAILURE_DETECTION = {
    "health_check_period_ms": 1000,
    "health_check_failure_threshold": 5,
    "health_check_timeout_ms": 3000,
}
#: Every node of the cluster: small, and without Ray's log monitor. Each node's monitor reads
#: the session's log directory (shared by all the nodes here) every 0.1 s to publish workers'
#: output to drivers, which this driver does not take (``log_to_driver=False``).
NODE_ARGS = {"object_store_memory": 80 * 1024 * 1024, "include_log_monitor": False}
#: Controller settings: fast node checks, no leadership moves but the faults'; one
#: ``__consumer_offsets`` and one ``__transaction_state`` partition (each partition is three
#: processes).
CONTROLLER_CONFIG = {
    "node.check.interval.ms": "200",
    "auto.leader.rebalance.enable": "false",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.num.partitions": "1",
}
#: A Kafka listener per broker on a free loopback port (``listeners=True``: the Kafka clients).
KAFKA_LISTENERS = "PLAINTEXT://127.0.0.1:0"
#: How long a run waits for every replica to be back in sync after the faults.
HEAL_TIMEOUT_S = 90.0
#: Bound on each call that describes a replica's state.
REPLICA_STATE_TIMEOUT_S = 10.0
#: Every fault kind, but those this build's replica actor cannot take (``disk-full`` needs its
#: ``inject_disk_fault`` hook) and those of the transactional workload (added when it runs).
DEFAULT_FAULTS = tuple(
    k
    for k in FAULT_KINDS
    if (k != "disk-full" or hasattr(PartitionReplicaActor, "inject_disk_fault")) and k not in TRANSACTION_FAULTS
)


class SoakCluster:
    """A head node plus ``num_brokers`` labelled broker nodes, and raylog on them; with
    ``listeners`` each broker also runs a Kafka listener (for runs with Kafka clients);
    ``config`` is raylog settings on top of CONTROLLER_CONFIG.

    Use as a context manager; ``cluster`` is the raylog cluster handle, ``bootstrap`` the
    listeners as a ``bootstrap.servers`` string ("" without listeners)."""

    def __init__(
        self,
        data_root: str | None = None,
        num_brokers: int = 3,
        listeners: bool = False,
        config: dict[str, str] | None = None,
    ):
        self._tmp = None if data_root is not None else tempfile.TemporaryDirectory(prefix="raylog-soak-")
        self.data_root = data_root or self._tmp.name
        self.num_brokers = num_brokers
        self.listeners = listeners
        self.config = {**CONTROLLER_CONFIG, **(config or {}), **({"listeners": KAFKA_LISTENERS} if listeners else {})}
        self.ray_cluster: Cluster | None = None
        self.nodes: dict[int, Any] = {}
        self.cluster: Any = None
        self.proxy: Any = None

    def __enter__(self) -> SoakCluster:
        try:
            return self._start()
        except BaseException:
            self.__exit__(None, None, None)  # nothing left running: Ray, nodes, raylog
            raise

    def _start(self) -> SoakCluster:
        self.ray_cluster = Cluster(
            initialize_head=True,
            head_node_args={"num_cpus": 1, **NODE_ARGS, "_system_config": FAST_FAILURE_DETECTION},
        )
        for broker in range(self.num_brokers):
            self.start_broker(broker)
        self.ray_cluster.wait_for_nodes()
        ray.init(address=self.ray_cluster.address, configure_logging=False, log_to_driver=False)
        self.cluster = raylog.connect(
            address=self.ray_cluster.address,
            data_dir=f"{self.data_root}/controller",
            cluster_name=f"soak{uuid.uuid4().hex[:8]}",
            config=self.config,
        )
        self.proxy = start_proxy(ray.get_runtime_context().get_node_id())
        # A broker node still starting its first worker on a loaded machine registers a
        # round later than the others.
        self._await(lambda: len(self.cluster.metadata(refresh=True).live) == self.num_brokers, "the brokers")
        if self.listeners:
            self._await(
                lambda: len([s for s in self.cluster.bootstrap_servers().split(",") if s]) == self.num_brokers,
                "the brokers' Kafka listeners",
            )
        return self

    def _await(self, predicate, what: str) -> None:
        deadline = time.monotonic() + HEAL_TIMEOUT_S
        while not predicate():
            if time.monotonic() > deadline:
                raise RaylogError(f"{what} did not all start in {HEAL_TIMEOUT_S:.0f} s")
            time.sleep(0.1)

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap_servers() if self.listeners else ""

    def __exit__(self, *exc_info: Any) -> None:
        try:
            if self.cluster is not None:
                self.cluster.shutdown()
        finally:
            ray.shutdown()
            if self.ray_cluster is not None:
                self.ray_cluster.shutdown()
            if self._tmp is not None:
                self._tmp.cleanup()

    def start_broker(self, broker: int) -> None:
        """Broker ``broker`` on a new node, with its data directory (kept across restarts)."""
        self.nodes[broker] = self.ray_cluster.add_node(
            num_cpus=1,
            **NODE_ARGS,
            labels={"raylog.broker": str(broker), "raylog.data_dir": self.data_dir(broker)},
        )

    def kill_broker(self, broker: int) -> None:
        """Remove the broker's node at once (every process on it dies)."""
        self.ray_cluster.remove_node(self.nodes.pop(broker), allow_graceful=False)

    def wipe_broker(self, broker: int) -> None:
        """Empty a dead broker's data directory, as a replaced disk would be."""
        assert broker not in self.nodes, f"broker {broker} is running"
        shutil.rmtree(self.data_dir(broker), ignore_errors=True)

    def data_dir(self, broker: int) -> str:
        """Broker ``broker``'s data directory (its node's ``raylog.data_dir`` label)."""
        return os.path.join(self.data_root, f"broker-{broker}")


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """One run's configuration: the topic's guarantees, the workload, the faults."""

    acks: str = "all"
    min_insync_replicas: int = 2
    unclean: bool = False
    replication_factor: int = 3
    partitions: int = 2
    duration_s: float = 6.0
    faults: tuple[str, ...] = DEFAULT_FAULTS
    max_faults: int = 3
    replica_lag_time_max_ms: int = 1500
    segment_bytes: int = 64 * 1024  # many segments: rolls, and recovery across them
    rate_per_s: float = 40.0  # per producer thread
    transactions: bool = False  # the transactional worker, and TRANSACTION_FAULTS
    overlap: int = 1  # faults in effect at once (2: a lingering fault beside another)
    producers: int = 1  # idempotent producer clients (two threads each), besides the plain one
    consumers: int = 2  # raylog group members (sync and async commits in turn), besides the assigned one
    kafka_producers: int = 0  # confluent-kafka producers over the Kafka listeners (needs listeners)
    kafka_consumers: int = 0  # confluent-kafka group members (a group of their own)
    kafka_transactional: int = 0  # confluent-kafka transactional producers (one transactional.id each)

    @property
    def transactional(self) -> bool:
        """Whether any client is transactional (raylog's or Kafka's)."""
        return self.transactions or self.kafka_transactional > 0

    @property
    def kafka_clients(self) -> int:
        return self.kafka_producers + self.kafka_consumers + self.kafka_transactional

    @property
    def clients(self) -> int:
        """Producer and consumer clients of a run (a raylog producer runs two threads)."""
        return self.producers + 1 + self.consumers + 1 + int(self.transactions) + self.kafka_clients

    @property
    def fault_kinds(self) -> tuple[str, ...]:
        """The kinds the nemesis draws from: ``faults``, plus ``TRANSACTION_FAULTS`` with a
        transactional client."""
        extra = TRANSACTION_FAULTS if self.transactional else ()
        return self.faults + tuple(k for k in extra if k not in self.faults)

    @property
    def internal_topics(self) -> list[str]:
        """The internal topics the run's clients use (waited for in sync with its topic)."""
        return [OFFSETS_TOPIC] + ([TRANSACTION_TOPIC] if self.transactional else [])

    @property
    def safe(self) -> bool:
        """Whether the configuration promises that nothing acknowledged is lost."""
        return (
            self.acks in ("all", "-1")
            and self.min_insync_replicas >= 2
            and self.replication_factor >= 3
            and not self.unclean
        )

    def flags(self) -> str:
        """The ``raylog bench soak`` options that choose this configuration."""
        default = RunConfig()
        flags = [
            f"--{name.replace('_', '-')} {getattr(self, name)}"
            for name in _FLAGS
            if getattr(self, name) != getattr(default, name)
        ]
        if self.faults != default.faults:
            flags.append(f"--faults {','.join(self.faults)}")
        if self.unclean:
            flags.append("--unclean")
        if self.transactions:
            flags.append("--transactions")
        assert all(getattr(self, name) == getattr(default, name) for name in _NOT_FLAGS), (
            "not a command's configuration"
        )
        return " ".join(flags)

    def describe(self) -> str:
        unclean = "on" if self.unclean else "off"
        return (
            f"acks={self.acks} min.insync.replicas={self.min_insync_replicas} "
            f"rf={self.replication_factor} unclean={unclean}" + (" transactions" if self.transactions else "")
        )


#: RunConfig fields that ``raylog bench soak`` takes as ``--name value``, and those it does not take.
_FLAGS = (
    "acks",
    "min_insync_replicas",
    "partitions",
    "duration_s",
    "max_faults",
    "overlap",
    "producers",
    "consumers",
    "kafka_producers",
    "kafka_consumers",
    "kafka_transactional",
    "rate_per_s",
    "replica_lag_time_max_ms",
)
_NOT_FLAGS = ("replication_factor", "segment_bytes")


@dataclasses.dataclass
class RunResult:
    seed: int
    config: RunConfig
    report: checker.Report
    faults: list[FaultEvent]
    ops: int
    acknowledged: int
    healed: bool
    elapsed_s: float
    client_errors: list[str]
    crashes: list[str]  # client threads an exception ended (a client's fatal error among them)
    offline: list[int]  # partitions left without a leader (allowed after replace-disk)
    unhealed: str  # when the cluster was not in sync (under load, or at the final read): what each replica said
    #: for a run with violations: each violated partition's leader changes and its replicas' own
    #: state at the end (epochs with their start offsets, log start and end, HW)
    evidence: str
    #: not in sync within HEAL_TIMEOUT_S while the clients ran, in sync once they stopped
    synced_once_unloaded: bool
    transactions: dict[str, int]  # transactions by outcome (committed, aborted, unknown)
    demoted: list[str]  # leaders demoted while no fault disturbed them (described)
    throughput_per_s: float  # acknowledged sends per second of workload
    latency_ms: tuple[float, float]  # p50, p99 from a send to its acknowledgement
    polled: dict[str, int]  # records each consumer's polls returned

    @property
    def violations(self) -> list[checker.Anomaly]:
        return self.report.violations(self.config.safe)

    @property
    def failed(self) -> bool:
        """An anomaly the configuration promises against, a leader demoted while healthy, a
        cluster that did not heal, or a client that stopped on an error (a Kafka client's fatal
        error is the broker's fault: it told the client something it cannot go on from)."""
        return bool(self.violations) or bool(self.demoted) or not self.healed or bool(self.crashes)

    def line(self) -> str:
        """The one-line summary: seed, configuration, ops, faults, anomalies, verdict."""
        # A fault that failed midway may have done part of its work: it is named, marked.
        injected = [f for f in self.faults if not f.outcome.startswith("skipped")]
        named = ", ".join(f.kind + ("" if f.outcome == "done" else "(failed)") for f in injected)
        verdict = "FAIL" if self.failed else "ok"
        healed = "" if self.healed else " NOT-HEALED"
        healed += " in-sync-only-without-load" if self.synced_once_unloaded else ""
        healed += f" offline={self.offline}" if self.offline else ""
        healed += f" demoted-while-healthy={len(self.demoted)}" if self.demoted else ""
        healed += f" clients-crashed={len(self.crashes)}" if self.crashes else ""
        outcomes = ", ".join(f"{outcome}={n}" for outcome, n in sorted(self.transactions.items()))
        transactions = f" transactions[{outcomes}]" if outcomes else ""
        p50, p99 = self.latency_ms
        return (
            f"seed={self.seed} {self.config.describe()} clients={self.config.clients} ops={self.ops} "
            f"acknowledged={self.acknowledged}{transactions} "
            f"({self.throughput_per_s:.0f}/s, p50 {p50:.0f} ms, p99 {p99:.0f} ms) "
            f"faults={len(injected)}[{named}] "
            f"anomalies: {self.report.summary(self.config.safe)}{healed} {self.elapsed_s:.1f}s {verdict}"
        )

    def details(self) -> str:
        """The faults and a few examples of each anomaly class (for a failed run)."""
        flags = self.config.flags()
        lines = [f"  replay: raylog bench soak --runs 1 --seed {self.seed}{' ' + flags if flags else ''}"]
        lines += [f"  fault {f.start_s:.1f}-{f.end_s:.1f}s: {f}" for f in self.faults]
        examples = self.report.examples(safe=self.config.safe)
        lines += [examples] if examples else []
        lines += [f"  not healed: {self.unhealed}"] if self.unhealed else []
        lines += [f"  evidence: {self.evidence}"] if self.evidence else []
        lines += [f"  demoted while healthy: {d}" for d in self.demoted]
        lines += [f"  client crashed: {c}" for c in self.crashes]
        return "\n".join(lines + [f"  client: {e}" for e in self.client_errors[:5]])


def run_once(env: SoakCluster, seed: int, config: RunConfig) -> RunResult:
    """One seeded run on ``env`` (see the module docstring).

    Raises:
        InvalidConfigError: Kafka clients asked of a cluster without listeners.
    """
    if config.kafka_clients and not env.listeners:
        raise InvalidConfigError("Kafka clients need a SoakCluster with listeners=True")
    began = time.monotonic()
    rng = random.Random(seed)
    admin = Admin(env.cluster)
    topic = f"soak-{seed}-{uuid.uuid4().hex[:6]}"
    group, solo_group, kafka_group = f"{topic}-members", f"{topic}-assigned", f"{topic}-kafka"
    groups = [group, solo_group] + ([kafka_group] if config.kafka_consumers else [])
    topic_config = {
        "min.insync.replicas": str(config.min_insync_replicas),
        "unclean.leader.election.enable": str(config.unclean).lower(),
        "replica.lag.time.max.ms": str(config.replica_lag_time_max_ms),
        "segment.bytes": str(config.segment_bytes),
    }
    admin.create_topics([NewTopic(topic, config.partitions, config.replication_factor, config=topic_config)])
    delays = CallDelays(env.proxy, rng.random())
    recorder = Recorder()
    raylog_txn_ids = (f"{topic}-txn",) if config.transactions else ()
    kafka_txn_ids = tuple(f"{topic}-ktxn{i}" for i in range(config.kafka_transactional))
    synced = [topic, *config.internal_topics]
    try:
        wait_in_sync(admin, [topic], HEAL_TIMEOUT_S)
        clients = _clients(env, delays, topic, config, recorder, rng, groups, raylog_txn_ids, kafka_txn_ids)
        if config.transactional:  # its coordinator is up (the workers' init found it): in sync before faults
            wait_in_sync(admin, [TRANSACTION_TOPIC], HEAL_TIMEOUT_S)
        # The coordinator exists once a member asked for it: the nemesis may then kill it.
        nemesis = Nemesis(
            env,
            topic,
            config.partitions,
            group,
            delays,
            rng,
            config.fault_kinds,
            config.max_faults,
            lag_time_s=config.replica_lag_time_max_ms / 1000,
            transactional_ids=raylog_txn_ids + kafka_txn_ids,
            overlap=config.overlap,
        )
        watch = leadership.LeadershipWatch(admin, topic)
        watch.start()
        workload_began = time.monotonic()
        for client in clients:
            client.start()
        nemesis.run(config.duration_s)
        workload_s = time.monotonic() - workload_began
        offline = {(topic, p) for p in nemesis.offline_ok}
        healed = wait_in_sync(admin, synced, HEAL_TIMEOUT_S, offline)
        unhealed = "" if healed else "under load: " + replica_states(env.cluster, synced)
        changes = watch.stop()
        _stop_all(clients)
        # Under the clients' load on a saturated machine, followers may keep falling past the
        # run's short replica.lag.time.max.ms and catching up again (the ISR shrinks and grows
        # for the whole wait: seed 169). A stuck state (a lost push, a replica that never
        # fetches) stays once the load stops; a load that outran the followers does not.
        synced_once_unloaded = not healed and wait_in_sync(admin, synced, HEAL_TIMEOUT_S, offline)
        healed = healed or synced_once_unloaded
        try:
            final = workload.final_read(env.cluster, topic, config.partitions, groups)
        except RaylogError as exc:  # the controller says healed, yet the partitions do not serve
            healed, unhealed = (
                False,
                f"final read: {type(exc).__name__}: {exc}; " + replica_states(env.cluster, synced),
            )
            unread = range(config.partitions)
            final = FinalRead({p: [] for p in unread}, dict.fromkeys(unread, 0), dict.fromkeys(unread, False))
    finally:
        delays.close()
    history = recorder.history(final)
    report = checker.check(history)
    violated = {a.partition for a in report.violations(config.safe)}
    evidence = ""
    if violated:
        moves = [c.describe(nemesis.began) for c in changes if c.partition in violated]
        evidence = (
            f"leader changes: {moves}; at the end: "
            + replica_states(env.cluster, [topic], violated)
            + "; transactions: "
            + transaction_states(admin, raylog_txn_ids + kafka_txn_ids)
        )
    _delete_quietly(admin, topic, groups)
    acked = [op for op in history.ops if isinstance(op, Send) and op.outcome == OK]
    latencies = sorted(recorder.seconds(op.start, op.end) * 1000 for op in acked if op.txn is None)
    errors = [e for c in clients for e in getattr(c, "errors", ())]
    crashes = [e for c in clients for e in c.crashes]
    demoted = leadership.unexplained(changes, nemesis.events, nemesis.began)
    polled = collections.Counter()
    for op in history.ops:
        if isinstance(op, Poll):
            polled[op.process] += len(op.records)
    return RunResult(
        seed,
        config,
        report,
        nemesis.events,
        len(history.ops),
        len(acked),
        healed,
        time.monotonic() - began,
        errors,
        crashes,
        sorted(nemesis.offline_ok),
        unhealed,
        evidence,
        synced_once_unloaded,
        dict(collections.Counter(op.outcome for op in history.ops if isinstance(op, Txn))),
        [c.describe(nemesis.began) for c in demoted],
        len(acked) / workload_s,
        (_percentile(latencies, 0.50), _percentile(latencies, 0.99)),
        dict(polled),
    )


def _stop_all(clients: list) -> None:
    """Stop every client at once: each gives what it has in flight a while to complete, and
    group members that leave one by one would rebalance the others at every step (64 clients
    stopped in turn took 13-46 s of a run on a loaded machine)."""
    with concurrent.futures.ThreadPoolExecutor(max(1, len(clients)), thread_name_prefix="soak-stop") as pool:
        for stopped in [pool.submit(client.stop) for client in clients]:
            stopped.result()


def _percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile of sorted ``values`` (nearest rank; 0 for none)."""
    return values[min(len(values) - 1, int(q * len(values)))] if values else 0.0


def _clients(env, delays, topic, config, recorder, rng, groups, raylog_txn_ids, kafka_txn_ids) -> list:
    """``config.producers`` idempotent producers and a plain one (two threads each),
    ``config.consumers`` group members (sync and async commits in turn), one consumer of every
    partition and, with transactions on, a transactional worker per id of ``raylog_txn_ids``
    (made last: the others draw from ``rng`` as without it), each on its own delayable cluster
    handle; then the Kafka clients over the listeners (their calls are not delayed):
    ``config.kafka_producers`` producers, ``config.kafka_consumers`` members of the third
    group of ``groups`` and a transactional producer per id of ``kafka_txn_ids``."""

    def own() -> DelayedCluster:
        return DelayedCluster(env.cluster, delays)

    common = (topic, config.partitions, recorder)
    rate = config.rate_per_s
    group, solo_group = groups[:2]
    # A short request timeout: acks=all requests time out while followers are slow and are
    # retried, which is where the leader meets duplicates.
    idempotent = [
        workload.ProducerWorker(
            "idem" if i == 0 else f"idem{i}",
            own(),
            *common,
            rng,
            acks=config.acks,
            threads=2,
            rate_per_s=rate,
            request_timeout_ms=500,
        )
        for i in range(config.producers)
    ]
    modes = [("sync", "async")[i % 2] for i in range(config.consumers)]
    members = [
        workload.ConsumerWorker(f"member-{mode}" if i < 2 else f"member{i}-{mode}", own(), *common, group, commit=mode)
        for i, mode in enumerate(modes)
    ]
    bootstrap = env.bootstrap
    return [
        *idempotent[:1],
        workload.ProducerWorker("plain", own(), *common, rng, acks=config.acks, idempotent=False, rate_per_s=rate),
        *members,
        workload.ConsumerWorker("assigned", own(), *common, solo_group, member=False),
        *idempotent[1:],
        *[workload.TransactionalWorker("txn", own(), *common, rng, tid, rate_per_s=rate) for tid in raylog_txn_ids],
        *[
            kafka_workload.KafkaProducerWorker(f"kafka{i}", bootstrap, *common, rng, rate_per_s=rate)
            for i in range(config.kafka_producers)
        ],
        *[
            kafka_workload.KafkaConsumerWorker(f"kafka-member{i}", bootstrap, *common, groups[2])
            for i in range(config.kafka_consumers)
        ],
        *[
            kafka_workload.KafkaTransactionalWorker(f"ktxn{i}", bootstrap, *common, rng, tid, rate_per_s=rate)
            for i, tid in enumerate(kafka_txn_ids)
        ],
    ]


def wait_in_sync(admin: Admin, topics: list[str], timeout_s: float, offline_ok: set = frozenset()) -> bool:
    """Until every partition of ``topics`` has a leader and all its replicas in sync (those
    named ``(topic, partition)`` in ``offline_ok`` may have no leader instead)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            described = admin.describe_topics(topics)
            if all(
                (p.leader >= 0 and set(p.isr) == set(p.replicas))
                or (p.leader < 0 and (t.name, p.partition) in offline_ok)
                for t in described
                for p in t.partitions
            ):
                return True
        except RaylogError:
            pass
        time.sleep(0.2)
    return False


def replica_states(cluster: Any, topics: list[str], partitions: set[int] | None = None) -> str:
    """Each partition's state as the controller and each of its replicas see it: those not in
    sync (to show why a run did not heal), or those numbered in ``partitions`` (to show where a
    violation came from: each replica's leader epochs with the offsets they start at)."""
    admin = Admin(cluster)
    parts = []
    for name in topics:
        try:
            (described,) = admin.describe_topics([name])
            handles = call(
                cluster.controller.replica_handles.remote(name, REPLICA_STATE_TIMEOUT_S / 2), REPLICA_STATE_TIMEOUT_S
            )
        except RaylogError as exc:
            parts.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        for p in described.partitions:
            if partitions is None and p.leader >= 0 and set(p.isr) == set(p.replicas):
                continue
            if partitions is not None and p.partition not in partitions:
                continue
            seen = []
            for (partition, broker), handle in sorted(handles.items()):
                if partition == p.partition:
                    try:
                        st = call(handle.state.remote(), REPLICA_STATE_TIMEOUT_S)
                        seen.append(
                            f"b{broker}: leader {st['leader']} epoch {st['leader_epoch']}.{st['partition_epoch']} "
                            f"isr {st['isr']} hw {st['high_watermark']} leo {st['log_end_offset']} "
                            f"fetch errors {st['fetch_errors']} ({st['last_fetch_error']})"
                            + (
                                f" lso {st['last_stable_offset']} open transactions (pid, epoch, first offset) "
                                f"{st['open_transactions']} log start {st['log_start_offset']} epochs {st['epochs']}"
                                if partitions
                                else ""
                            )
                        )
                    except RaylogError as exc:
                        seen.append(f"b{broker}: {type(exc).__name__}")
            parts.append(
                f"{name}-{p.partition} leader {p.leader} epoch {p.leader_epoch}.{p.partition_epoch} isr {list(p.isr)} "
                f"replicas {list(p.replicas)} ({'; '.join(seen)})"
            )
    return " | ".join(parts)


def transaction_states(admin: Admin, transactional_ids: tuple[str, ...]) -> str:
    """Each transactional id as its coordinator tells it (to name the producer of a
    transaction left open in a partition: the replicas list producer ids)."""
    told = []
    for tid in transactional_ids:
        try:
            (t,) = admin.describe_transactions([tid])
        except RaylogError as exc:
            told.append(f"{tid}: {type(exc).__name__}: {exc}")
            continue
        partitions = [f"{tp.topic}-{tp.partition}" for tp in t.partitions]
        told.append(f"{tid}: pid {t.producer_id} epoch {t.producer_epoch} {t.state} {partitions}")
    return ", ".join(told)


def _delete_quietly(admin: Admin, topic: str, groups: list[str]) -> None:
    try:
        admin.delete_topics([topic])
        admin.delete_consumer_groups(groups)
    except RaylogError as exc:
        logger.warning("soak: cleaning up %s: %s", topic, exc)


def soak(env: SoakCluster, runs: int, seed: int, config: RunConfig, out=print) -> list[RunResult]:
    """``runs`` runs with seeds ``seed``, ``seed + 1``, ...; prints each run's line (and,
    for a failed run, its faults and anomaly examples)."""
    results = []
    for i in range(runs):
        result = run_once(env, seed + i, config)
        out(result.line())
        if result.failed or result.report.summary() != "none" or result.unhealed:
            out(result.details())
        results.append(result)
    return results


def totals(results: list[RunResult], elapsed_s: float) -> str:
    """The closing line of a soak: runs, failures (with their seeds), operations, faults
    injected by kind, anomalies by class, time."""
    failed = [r.seed for r in results if r.failed]
    kinds = collections.Counter(f.kind for r in results for f in r.faults if f.outcome == "done")
    anomalies = collections.Counter()
    for result in results:
        anomalies.update({k: n for k, n in result.report.counts().items() if n})
    faults = ", ".join(f"{kind}={n}" for kind, n in sorted(kinds.items())) or "none"
    found = " ".join(f"{kind}={n}" for kind, n in anomalies.items()) or "none"
    demoted = sum(len(r.demoted) for r in results)
    unloaded = sum(r.synced_once_unloaded for r in results)
    rates = sorted(r.throughput_per_s for r in results)
    p99s = sorted(r.latency_ms[1] for r in results)
    return (
        f"runs={len(results)} failed={len(failed)}{' seeds=' + ','.join(map(str, failed)) if failed else ''} "
        f"ops={sum(r.ops for r in results)} acknowledged={sum(r.acknowledged for r in results)} "
        f"faults={sum(kinds.values())} ({faults}) anomalies: {found} demoted-while-healthy={demoted} "
        f"in-sync-only-without-load={unloaded} "
        f"throughput median {_percentile(rates, 0.5):.0f}/s, p99 median {_percentile(p99s, 0.5):.0f} ms "
        f"(worst {p99s[-1] if p99s else 0:.0f} ms) time={elapsed_s:.0f}s"
    )
