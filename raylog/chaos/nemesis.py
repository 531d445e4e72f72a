"""The nemesis: seeded faults against a running raylog cluster, bounded in time and count,
each healed before the next (and everything healed before the final read). With
``overlap=2`` each step draws a fault that can stay in effect (``LINGERING``: a paused
replica, delayed calls, a full disk) and leaves it in effect while a second fault, of any
kind, runs beside it (a follower paused during a leader kill, a full disk during a node
loss); both are then healed together, the first once its own duration has passed.

Fault kinds (``FAULT_KINDS``; each picks its target with the run's ``random.Random``):

- ``kill-leader``: ``ray.kill`` a partition leader's replica actor (Ray restarts it).
- ``kill-leader-pid``: SIGKILL the leader replica's process (Ray restarts it).
- ``kill-node``: remove the node of a partition leader's broker (every replica on it dies),
  then bring the broker back on a new node with the same label and data directory.
- ``pause-replica``: SIGSTOP a replica's process (leader or follower) for longer than
  ``replica.lag.time.max.ms``, then SIGCONT.
- ``pause-controller``: SIGSTOP the controller's process for a while, then SIGCONT; one
  time in three for longer than the replicas' call timeout, so that their ISR proposals
  time out while the controller, once resumed, may still commit them.
- ``kill-coordinator``: ``ray.kill`` the actor leading the group's ``__consumer_offsets``
  partition (the group coordinator).
- ``kill-txn-coordinator``: ``ray.kill`` the actor leading the ``__transaction_state``
  partition a transactional worker's id hashes to (its transaction coordinator), found in
  the controller's metadata; healed once the partition has a leader that answers. Only for
  runs with the transactional workload (``TRANSACTION_FAULTS``: not among the kinds drawn
  by default).
- ``delay-calls``: for a while, clients' actor calls are delayed at random, so reordered
  (:mod:`raylog.chaos.faulty`).
- ``lose-tail``: SIGSTOP a partition's followers for a second (two thirds of the lag time at
  most: they stay in the ISR but copy nothing), SIGKILL the leader's process, SIGCONT the followers: a follower
  leads without what the leader alone had. Safe with acks=all (those writes were never
  acknowledged); the case that makes acks=1 lose acknowledged writes.
- ``isolate-leader``: SIGSTOP a partition's followers until the ISR shrinks to the leader,
  kill the leader's node, SIGCONT the followers once the controller has seen it die, and
  bring the node back once another leader (or none) is chosen: with unclean election a
  follower that lacks the leader's writes leads (the case that makes unclean election lose
  acknowledged writes); without, the partition waits offline for its last ISR member.
- ``replace-disk``: ``isolate-leader``, but the leader's broker comes back with an empty
  data directory (a replaced disk): it must not lead with an empty log from the ISR it was
  the last member of, which would truncate every follower. The partition may stay offline
  (``offline_ok``): no replica with its data is left in sync.
- ``corrupt-tail``: SIGSTOP a follower, cut its last segment short or flip bytes in its
  tail on disk, SIGKILL it: Ray restarts it and its recovery finds the damage.
- ``disk-full``: a replica's storage writes fail with ENOSPC for a while
  (``PartitionReplicaActor.inject_disk_fault(errno, duration_s)``, which ends by itself;
  ``inject_disk_fault(None)`` heals at once).

A fault whose target cannot be found (no leader right now, an empty segment) is recorded
as skipped with the reason; one that raises is recorded with its error.
"""

from __future__ import annotations

import dataclasses
import errno
import glob
import logging
import os
import random
import signal
import time
from typing import Any

import ray

from raylog.clients.admin import Admin
from raylog.common.names import OFFSETS_TOPIC, TRANSACTION_TOPIC
from raylog.coordination.group import partition_for
from raylog.errors import RaylogError
from raylog.transport import call

logger = logging.getLogger(__name__)

FAULT_KINDS = (
    "kill-leader",
    "kill-leader-pid",
    "kill-node",
    "pause-replica",
    "pause-controller",
    "kill-coordinator",
    "delay-calls",
    "lose-tail",
    "isolate-leader",
    "replace-disk",
    "corrupt-tail",
    "disk-full",
    "kill-txn-coordinator",
)
#: Kinds that need the transactional workload: drawn only when it runs.
TRANSACTION_FAULTS = ("kill-txn-coordinator",)
#: Kinds that can stay in effect while a second fault runs (``overlap=2``).
LINGERING = ("pause-replica", "delay-calls", "disk-full")
#: Bound on every call the nemesis makes and on each wait for a fault to take effect.
CALL_TIMEOUT_S = 20.0
WAIT_TIMEOUT_S = 30.0
#: Pause between faults, and how long a paused controller or delayed calls last.
GAP_S = (0.3, 1.5)
#: Once every fault was tried, the workload runs this long after the last one healed (then
#: the run ends, before its duration if that is later): the healed cluster under load.
AFTER_FAULTS_S = 3.0
CONTROLLER_PAUSE_S = (1.0, 3.0)
#: A long pause: past the replicas' 10 s call timeout (raylog.actors.replica_parts.PEER_CALL_TIMEOUT_S).
LONG_CONTROLLER_PAUSE_S = (10.5, 12.0)
DELAY_WINDOW_S = (1.5, 3.0)
DISK_FULL_S = (1.0, 3.0)
#: Writes a leader takes alone in ``lose-tail`` / ``isolate-leader`` before it is killed.
ALONE_S = 1.0
#: How long ``replace-disk`` watches the partition of the broker back with an empty disk.
SETTLE_S = 5.0
#: Bytes at the end of a segment that ``corrupt-tail`` damages.
CORRUPT_TAIL_BYTES = 512


@dataclasses.dataclass
class FaultEvent:
    kind: str
    target: str = ""
    start_s: float = 0.0
    end_s: float = 0.0
    outcome: str = "done"  # done | skipped: <why> | error: <what>
    #: ``(partition, broker)`` whose replica the fault stopped, killed, corrupted or filled
    #: the disk of; ``(None, broker)``: the broker's node (every replica on it). Only these
    #: may lose leadership because of it (:func:`raylog.chaos.leadership.unexplained`).
    disturbed: set[tuple[int | None, int]] = dataclasses.field(default_factory=set)
    #: What it did lasts until the nemesis heals (a node it removed comes back only then), so
    #: it ends then, even when another fault's hold ran on after its own.
    until_healed: bool = False

    def __str__(self) -> str:
        detail = f" {self.target}" if self.target else ""
        status = "" if self.outcome == "done" else f" ({self.outcome})"
        return f"{self.kind}{detail}{status}"


class _Skip(Exception):
    """The fault has no target right now."""


class Nemesis:
    """Injects faults into ``topic`` for :meth:`run`'s duration.

    Runs in the main thread: bringing a broker back starts a Ray node, which only the main
    thread may do (Ray installs signal handlers then).

    Args:
        env: the :class:`raylog.chaos.soak.SoakCluster` (cluster handle, broker nodes).
        delays: the :class:`~raylog.chaos.faulty.CallDelays` of the run's clients.
        rng: the run's seeded random source.
        kinds: the fault kinds to draw from.
        max_faults: at most this many faults.
        lag_time_s: the topic's ``replica.lag.time.max.ms``, in seconds.
        transactional_ids: those of the run's transactional workers (their coordinators are
            ``kill-txn-coordinator``'s targets).
        overlap: faults in effect at once, 1 or 2 (see the module docstring).
    """

    def __init__(
        self,
        env: Any,
        topic: str,
        partitions: int,
        group: str,
        delays: Any,
        rng: random.Random,
        kinds: tuple[str, ...],
        max_faults: int,
        lag_time_s: float,
        transactional_ids: tuple[str, ...] = (),
        overlap: int = 1,
    ):
        unknown = set(kinds) - set(FAULT_KINDS)
        assert not unknown, f"unknown fault kinds {sorted(unknown)}"
        assert overlap in (1, 2), f"overlap {overlap}: 1 or 2 faults at once"
        self.env = env
        self.cluster = env.cluster
        self.admin = Admin(env.cluster)
        self.topic = topic
        self.partitions = partitions
        self.group = group
        self.delays = delays
        self.rng = rng
        self.kinds = kinds
        self.max_faults = max_faults
        self.lag_time_s = lag_time_s
        self.transactional_ids = transactional_ids
        self.events: list[FaultEvent] = []
        #: Partitions that may stay offline: their last in-sync replica lost its disk.
        self.offline_ok: set[int] = set()
        self._stopped_pids: set[int] = set()
        self._dead_brokers: set[int] = set()
        self._disk_faults: list[Any] = []
        self.overlap = overlap
        self._lingering = [k for k in kinds if k in LINGERING]
        #: While a lingering fault is injected: its hold is not slept but noted here (a
        #: monotonic deadline), and it is healed only after the fault beside it.
        self._linger_until: float | None = None
        self._event: FaultEvent | None = None  # the one being injected
        #: ``time.monotonic()`` when :meth:`run` began (events' times are seconds after it).
        self.began = 0.0

    # --- the schedule ---------------------------------------------------------------------

    def run(self, duration_s: float) -> None:
        """Faults with pauses between, until ``duration_s`` has passed (a fault under way is
        finished and healed first) or ``max_faults`` were tried; with ``overlap=2`` a
        lingering fault stays in effect while the next one runs. Returns at the end of
        ``duration_s``, or AFTER_FAULTS_S after the last fault healed once ``max_faults``
        (at least one) were tried, whichever comes first: a run without faults (a baseline)
        lasts its duration."""
        began = self.began = time.monotonic()
        end = began + duration_s
        while len(self.events) < self.max_faults and self.kinds:
            gap_s = self.rng.uniform(*GAP_S)
            if time.monotonic() + gap_s >= end:
                break
            time.sleep(gap_s)  # the schedule's pause: nothing to wait for but time
            overlapping = self.overlap > 1 and self._lingering and len(self.events) + 1 < self.max_faults
            kind = self.rng.choice(self._lingering if overlapping else self.kinds)
            events = [FaultEvent(kind, start_s=time.monotonic() - began)]
            try:
                if overlapping:
                    self._linger_until = time.monotonic()
                    self._inject(events[0])
                    self._linger_until, linger_until = None, self._linger_until
                    second = self.rng.choice(self.kinds)
                    events.append(FaultEvent(second, start_s=time.monotonic() - began))
                    self._inject(events[1])
                    events[1].end_s = time.monotonic() - began
                    self._hold(max(0.0, linger_until - time.monotonic()))  # the first fault's own duration
                else:
                    self._inject(events[0])
            finally:
                self._linger_until = None
                self.heal()
            healed_s = time.monotonic() - began
            events[0].end_s = healed_s
            for event in events[1:]:
                if event.until_healed:
                    event.end_s = healed_s
            self.events += events
        if self.events and len(self.events) >= self.max_faults:
            end = min(end, time.monotonic() + AFTER_FAULTS_S)
        time.sleep(max(0.0, end - time.monotonic()))  # the workload runs to the end

    def _inject(self, event: FaultEvent) -> None:
        """Run ``event``'s fault, noting its target or why it was skipped or failed."""
        self._event = event
        try:
            event.target = getattr(self, "_" + event.kind.replace("-", "_"))()
        except _Skip as why:
            event.outcome = f"skipped: {why}"
        except (RaylogError, ray.exceptions.RayError, OSError) as exc:
            event.outcome = f"error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            logger.warning("nemesis %s failed: %s", event.kind, event.outcome, exc_info=True)

    # --- healing --------------------------------------------------------------------------

    def heal(self) -> None:
        """Undo whatever is still in effect: resume stopped processes, bring dead brokers
        back, stop delaying calls, clear disk faults."""
        for pid in list(self._stopped_pids):
            self._resume(pid)
        for broker in sorted(self._dead_brokers):
            self.env.start_broker(broker)
            self._dead_brokers.discard(broker)
        self.delays.stop()
        for handle in self._disk_faults:
            try:
                call(handle.inject_disk_fault.remote(None), CALL_TIMEOUT_S)
            except RaylogError as exc:
                logger.warning("nemesis: clearing a disk fault: %s", exc)
        self._disk_faults.clear()

    # --- faults ---------------------------------------------------------------------------

    def _kill_leader(self) -> str:
        partition, leader, handle = self._leader()
        epoch = self._describe(partition).leader_epoch
        self._disturb(partition, leader)
        ray.kill(handle, no_restart=False)
        self._await_restart(partition, epoch, handle)
        return f"p{partition} leader b{leader}"

    def _kill_leader_pid(self) -> str:
        partition, leader, handle = self._leader()
        epoch = self._describe(partition).leader_epoch
        self._disturb(partition, leader)
        os.kill(self._pid(handle), signal.SIGKILL)
        self._await_restart(partition, epoch, handle)
        return f"p{partition} leader b{leader}"

    def _kill_node(self) -> str:
        partition, leader, _ = self._leader()
        self._disturb(None, leader)
        self.env.kill_broker(leader)
        self._dead_brokers.add(leader)
        self._event.until_healed = True
        self._hold(self.rng.uniform(2.0, 5.0))
        return f"b{leader} (led p{partition})"

    def _pause_replica(self) -> str:
        partition = self.rng.randrange(self.partitions)
        broker, handle = self._replica(partition)
        pid = self._pid(handle)
        role = "leader" if broker == self._describe(partition).leader else "follower"
        self._disturb(partition, broker)
        self._pause(pid)
        self._hold(self.lag_time_s + self.rng.uniform(0.3, 1.5))
        return f"p{partition} {role} b{broker}"

    def _pause_controller(self) -> str:
        pid = call(self.cluster.controller.__ray_call__.remote(_own_pid), CALL_TIMEOUT_S)
        seconds = self.rng.uniform(*(LONG_CONTROLLER_PAUSE_S if self.rng.random() < 1 / 3 else CONTROLLER_PAUSE_S))
        self._pause(pid)
        self._hold(seconds)
        return f"controller for {seconds:.1f} s"

    def _kill_coordinator(self) -> str:
        partition, handle = call(self.cluster.controller.find_coordinator.remote(self.group), CALL_TIMEOUT_S)
        if handle is None:
            raise _Skip("no coordinator")
        ray.kill(handle, no_restart=False)
        self._await_answer(handle)
        return f"{OFFSETS_TOPIC}-{partition}"

    def _kill_txn_coordinator(self) -> str:
        if not self.transactional_ids:
            raise _Skip("no transactional workload")
        transactional_id = self.rng.choice(self.transactional_ids)
        metadata = self.cluster.metadata(refresh=True)
        if TRANSACTION_TOPIC not in metadata.topics:
            raise _Skip(f"no {TRANSACTION_TOPIC} yet")
        partition = partition_for(transactional_id, metadata.num_partitions(TRANSACTION_TOPIC))
        handle = metadata.leaders.get((TRANSACTION_TOPIC, partition))
        if handle is None:
            raise _Skip(f"{TRANSACTION_TOPIC}-{partition} has no leader")
        ray.kill(handle, no_restart=False)
        self._wait(lambda: self._leads(TRANSACTION_TOPIC, partition), f"a leader of {TRANSACTION_TOPIC}-{partition}")
        return f"{TRANSACTION_TOPIC}-{partition} (coordinator of {transactional_id})"

    def _delay_calls(self) -> str:
        max_delay_s = self.rng.uniform(0.05, 0.5)
        before = self.delays.delayed_count
        self.delays.start(probability=0.5, max_delay_s=max_delay_s)
        self._hold(self.rng.uniform(*DELAY_WINDOW_S))
        if self._linger_until is not None:
            return f"calls delayed up to {max_delay_s * 1000:.0f} ms, beside the next fault"
        self.delays.stop()
        return f"{self.delays.delayed_count - before} calls delayed up to {max_delay_s * 1000:.0f} ms"

    def _lose_tail(self) -> str:
        partition, leader, handle = self._leader()
        followers = self._followers(partition, leader)
        self._disturb(partition, leader)
        for pid in followers.values():
            self._pause(pid)
        self._hold(min(ALONE_S, self.lag_time_s * 2 / 3))
        # Whether the followers were still in the ISR when the leader died: only then does a
        # follower lead without the leader's tail (once the ISR is the leader alone, the
        # restarted leader leads again with all it wrote).
        described = self._describe(partition)
        in_sync = set(described.isr) >= set(followers)
        os.kill(self._pid(handle), signal.SIGKILL)
        for pid in followers.values():
            self._resume(pid)
        self._await_restart(partition, described.leader_epoch, handle)
        return f"p{partition} leader b{leader}" + ("" if in_sync else ", alone in the ISR by then")

    def _replace_disk(self) -> str:
        return self._isolate_leader(replace_disk=True)

    def _isolate_leader(self, replace_disk: bool = False) -> str:
        partition, leader, _ = self._leader()
        followers = self._followers(partition, leader)
        self._disturb(None, leader)
        for pid in followers.values():
            self._pause(pid)
        self._wait(lambda: self._describe(partition).isr == (leader,), "the ISR shrinking to the leader")
        self._hold(ALONE_S)
        self.env.kill_broker(leader)
        self._dead_brokers.add(leader)
        # The followers resume only once the controller has seen the leader die: a removed
        # node's processes may answer calls for a moment, and a follower would copy its tail.
        self._wait(lambda: leader not in self.cluster.metadata(refresh=True).live, "the leader's death noticed")
        for pid in followers.values():
            self._resume(pid)
        self._wait(lambda: self._describe(partition).leader != leader, "another leader (or none)")
        if not replace_disk:
            self._event.until_healed = True  # its node comes back when the nemesis heals
            return f"p{partition} leader b{leader}"
        self.env.wipe_broker(leader)
        # From here its last in-sync replica may have lost its data: offline is then the safe
        # answer (Kafka with KIP-858 does the same; only an unclean election could bring it
        # back), also when what follows fails (seeds 458 and 473: the broker took longer
        # than the wait below to come back on a loaded machine, and its partition stayed
        # offline as it should).
        self.offline_ok.add(partition)
        self.env.start_broker(leader)
        self._dead_brokers.discard(leader)
        self._wait(lambda: leader in self.cluster.metadata(refresh=True).live, "the broker back")
        if self._comes_online(partition):
            self.offline_ok.discard(partition)
            return f"p{partition} leader b{leader}, back with an empty disk"
        return f"p{partition} leader b{leader}, back with an empty disk: the partition stays offline"

    def _comes_online(self, partition: int) -> bool:
        """Whether ``partition`` gets a leader within :data:`SETTLE_S` (an observation window:
        there is no event for "the controller has decided to leave it offline")."""
        deadline = time.monotonic() + SETTLE_S
        while time.monotonic() < deadline:
            try:
                if self._describe(partition).leader >= 0:
                    return True
            except RaylogError:
                pass
            time.sleep(0.1)
        return False

    def _corrupt_tail(self) -> str:
        partition, leader, _ = self._leader()
        broker, handle = self._replica(partition, leader)
        pid = self._pid(handle)
        directory = call(handle.__ray_call__.remote(_log_dir), CALL_TIMEOUT_S)
        self._disturb(partition, broker)
        self._pause(pid)
        damage = corrupt_last_segment(directory, self.rng)
        os.kill(pid, signal.SIGKILL)
        self._stopped_pids.discard(pid)
        self._await_answer(handle)
        return f"p{partition} follower b{broker}: {damage}"

    def _disk_full(self) -> str:
        partition = self.rng.randrange(self.partitions)
        broker, handle = self._replica(partition)
        self._disturb(partition, broker)
        held_s = self.rng.uniform(*DISK_FULL_S)
        # Healed even if this call times out (it may still run late), and ending by itself
        # then: a disk left full by a call the nemesis gave up on never heals otherwise (seed
        # 343: a follower's appends failed for good, and the run never got back in sync).
        self._disk_faults.append(handle)
        call(handle.inject_disk_fault.remote(errno.ENOSPC, held_s), CALL_TIMEOUT_S)
        self._hold(held_s)
        return f"p{partition} b{broker}"

    # --- helpers --------------------------------------------------------------------------

    def _describe(self, partition: int):
        return self.admin.describe_topics([self.topic])[0].partitions[partition]

    def _handles(self) -> dict[tuple[int, int], Any]:
        # Faults go to the replicas that run: a follower still starting under the clients'
        # load must not hold the fault past the call's timeout (it then never happened).
        return call(self.cluster.controller.replica_handles.remote(self.topic, CALL_TIMEOUT_S / 4), CALL_TIMEOUT_S)

    def _leader(self) -> tuple[int, int, Any]:
        """A random partition's ``(partition, leader broker, leader actor)``."""
        partition = self.rng.randrange(self.partitions)
        leader = self._describe(partition).leader
        handle = self._handles().get((partition, leader))
        if handle is None:
            raise _Skip(f"p{partition} has no live leader")
        return partition, leader, handle

    def _replica(self, partition: int, leader: int | None = None) -> tuple[int, Any]:
        """A random live replica of ``partition`` (a follower when ``leader`` is given):
        ``(broker, actor)``."""
        replicas = self._handles()
        brokers = sorted(b for p, b in replicas if p == partition and b != leader)
        if not brokers:
            raise _Skip(f"p{partition} has no live replica to pick")
        broker = self.rng.choice(brokers)
        return broker, replicas[(partition, broker)]

    def _followers(self, partition: int, leader: int) -> dict[int, int]:
        """Broker -> process id of each live follower of ``partition``."""
        return {b: self._pid(h) for (p, b), h in sorted(self._handles().items()) if p == partition and b != leader}

    def _disturb(self, partition: int | None, broker: int) -> None:
        """The fault being injected disturbs ``broker``'s replica of ``partition`` (None: its node)."""
        self._event.disturbed.add((partition, broker))

    def _pid(self, handle: Any) -> int:
        return call(handle.state.remote(), CALL_TIMEOUT_S)["pid"]

    def _pause(self, pid: int) -> None:
        os.kill(pid, signal.SIGSTOP)
        self._stopped_pids.add(pid)

    def _resume(self, pid: int) -> None:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        self._stopped_pids.discard(pid)

    def _hold(self, seconds: float) -> None:
        """Keep a fault in effect for ``seconds``; a lingering fault's hold is only noted:
        it goes on while the fault beside it runs."""
        if self._linger_until is not None:
            self._linger_until = max(self._linger_until, time.monotonic() + seconds)
            return
        time.sleep(seconds)  # a fault's duration: nothing to wait for but time

    def _await_restart(self, partition: int, leader_epoch: int, handle: Any) -> None:
        """Until the controller has acted on a killed leader's restart and the actor answers:
        the partition is in a leader epoch after ``leader_epoch`` (another ISR member leads,
        or the restarted replica leads again once its restart report is answered)."""
        self._wait(lambda: self._describe(partition).leader_epoch > leader_epoch, "a new leader epoch")
        self._await_answer(handle)

    def _await_answer(self, handle: Any) -> None:
        """Until the (restarted) actor answers."""
        self._wait(lambda: self._answers(handle), "the actor to answer again")

    def _answers(self, handle: Any) -> bool:
        try:
            call(handle.state.remote(), 2.0)
            return True
        except RaylogError:
            return False

    def _leads(self, topic: str, partition: int) -> bool:
        """Whether the controller names a leader of ``topic``'s ``partition`` and it answers."""
        handle = self.cluster.metadata(refresh=True).leaders.get((topic, partition))
        return handle is not None and self._answers(handle)

    def _wait(self, predicate, what: str) -> None:
        deadline = time.monotonic() + WAIT_TIMEOUT_S
        while True:
            try:
                if predicate():
                    return
            except RaylogError:
                pass
            if time.monotonic() > deadline:
                raise RaylogError(f"{what}: not within {WAIT_TIMEOUT_S} s")
            time.sleep(0.1)


def corrupt_last_segment(directory: str, rng: random.Random) -> str:
    """Cut the last non-empty segment file of ``directory`` short, or flip a byte in its
    last :data:`CORRUPT_TAIL_BYTES`; says what it did."""
    segments = [p for p in sorted(glob.glob(os.path.join(directory, "*.log"))) if os.path.getsize(p) > 0]
    if not segments:
        raise _Skip("no data on disk yet")
    path = segments[-1]
    size = os.path.getsize(path)
    span = min(size, CORRUPT_TAIL_BYTES)
    if rng.random() < 0.5:
        cut = rng.randint(1, span)
        os.truncate(path, size - cut)
        return f"{os.path.basename(path)} cut by {cut} of {size} bytes"
    position = size - rng.randint(1, span)
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)[0]
        f.seek(position)
        f.write(bytes([byte ^ (1 << rng.randrange(8))]))
    return f"{os.path.basename(path)} bit flipped at byte {position} of {size}"


def _own_pid(_actor: Any) -> int:
    return os.getpid()


def _log_dir(actor: Any) -> str:
    return actor.partition.log.dir
