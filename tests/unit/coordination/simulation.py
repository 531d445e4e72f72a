"""A deterministic simulation of one partition replicated on brokers 0, 1 and 2 (no Ray, no threads).

Each broker holds a real :class:`Partition` over its own :class:`Log` in a temporary directory. The
:class:`Cluster` plays everything around them, one step at a time:

- the controller: owns the :class:`PartitionInfo` (the single writer of leader, leader epoch and ISR),
  changes it only through :mod:`raylog.coordination.elections` and tells the live replicas at once;
- the transport: direct method calls, of which a fetch response may be lost;
- the clients: a producer whose batches count as acknowledged as a Kafka broker would answer them;
- the faults: process crashes (files intact) and machine crashes (the unflushed tail of the last
  segment cut at a random byte; never of the only ISR member, see ``may_lose_unflushed``), at most
  one broker down at a time;
- time: a :class:`FakeClock` moved by the simulation (``replica.lag.time.max.ms`` does the rest).

``step()`` draws the next step from ``random.Random(seed)``; every step kind is also a method with
explicit arguments, so a test can play a scenario step by step. ``check_invariants()`` raises
``AssertionError`` naming the broken invariant; ``trace`` tells what happened, step by step.
"""

from __future__ import annotations

import functools
import os
import random
from dataclasses import dataclass, field, replace

from raylog.config import TopicConfig
from raylog.coordination.elections import NO_LEADER, alter_isr, elect_leader, preferred_leader, remove_from_isr
from raylog.coordination.partition import Partition
from raylog.errors import FencedLeaderEpochError, InvalidRequestError, NotEnoughReplicasError
from raylog.storage import record_batch
from raylog.storage.log import Log
from raylog.types import PartitionInfo
from tests.unit.conftest import FakeClock

BROKERS = (0, 1, 2)
TOPIC = "sim"
FETCH_MAX_BYTES = (1, 300, 1 << 20)  # 1: exactly one batch per fetch

#: Relative weights of the random step kinds.
STEP_WEIGHTS = {
    "produce": 24,
    "fetch": 36,
    "maintain_isr": 12,
    "tick": 14,
    "crash": 3,
    "restart": 8,
    "elect_preferred": 3,
}


def _step(method):
    """A step method: once it is done, the leaders answer the produce requests they can."""

    @functools.wraps(method)
    def run(self, *args, **kwargs):
        self.actions += 1
        result = method(self, *args, **kwargs)
        self.complete_pending()
        return result

    return run


@dataclass
class Pending:
    """An acks=all produce request waiting in its leader's purgatory."""

    leader: int
    generation: int  # the leader's incarnation (a restart makes a new Partition)
    leader_epoch: int
    records: list[tuple[int, bytes]]  # (offset, value)

    @property
    def last_offset(self) -> int:
        return self.records[-1][0]


@dataclass
class Stats:
    produced: int = 0
    acknowledged: int = 0
    refused: int = 0  # NotEnoughReplicas and the like: never acknowledged
    failed_after_append: int = 0  # HW reached, but the ISR had shrunk below min.insync.replicas
    fetches: int = 0
    lost_responses: int = 0
    isr_changes: int = 0
    stale_isr_proposals: int = 0
    leader_changes: int = 0
    crashes: int = 0
    machine_crashes: int = 0
    bytes_lost: int = 0
    offline_steps: int = 0
    truncations: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)


class Cluster:
    """See the module docstring."""

    def __init__(
        self,
        directory: str,
        seed: int = 0,
        *,
        properties: dict | None = None,
        acks: int = -1,
        loss_probability: float = 0.15,
        machine_crash_probability: float = 0.4,
    ):
        self.directory = directory
        self.seed = seed
        self.rng = random.Random(seed)
        self.clock = FakeClock()
        self.config = TopicConfig.from_properties(
            {
                "min.insync.replicas": "2",
                "replica.lag.time.max.ms": "1000",
                "segment.bytes": "2048",  # several segments: truncation and recovery cross them
                **(properties or {}),
            }
        )
        self.acks = acks
        self.loss_probability = loss_probability
        self.machine_crash_probability = machine_crash_probability
        # The controller's state: the single writer of leader, leader epoch and ISR.
        self.info = PartitionInfo(TOPIC, 0, leader=0, leader_epoch=0, replicas=BROKERS, isr=BROKERS)
        self.replicas: dict[int, Partition | None] = {}
        self.generation = dict.fromkeys(BROKERS, 0)
        self.must_truncate: set[int] = set()  # followers that have not asked their new leader where to cut yet
        self.pending: list[Pending] = []
        self.inflight_isr: tuple[int, int, int, tuple[int, ...]] | None = None  # (leader, epochs, ISR)
        self.acknowledged: dict[int, bytes] = {}  # offset -> value, every record a client was told is safe
        self.next_value = 0
        self.stats = Stats()
        self.trace: list[str] = []
        self.steps = 0  # random steps drawn
        self.actions = 0  # step methods run (the trace's numbers)
        # What the invariants remember between steps.
        self._epoch_leaders: dict[int, int] = {}  # leader epoch -> the broker that led it
        self._max_led_epoch = -1
        self._controller_epoch = self.info.leader_epoch
        self._replica_epochs: dict[tuple[int, int], int] = {}  # (broker, generation) -> leader epoch seen
        self._leader_hw: dict[tuple[int, int, int], int] = {}  # (broker, generation, epoch) -> HW
        self._contents: dict[int, list[bytes]] = {}  # broker -> values by offset, read from its log
        for broker in BROKERS:
            self.replicas[broker] = self._open(broker)
        self._publish(self.info)

    # --- the random driver ----------------------------------------------------------------

    def step(self) -> None:
        """One random step (one that cannot happen now, such as a second crash, is skipped)."""
        kinds = list(STEP_WEIGHTS)
        kind = self.rng.choices(kinds, weights=[STEP_WEIGHTS[k] for k in kinds])[0]
        self.stats.by_kind[kind] = self.stats.by_kind.get(kind, 0) + 1
        if kind == "produce":
            self.produce(self.rng.randint(1, 5))
        elif kind == "fetch":
            self.fetch(
                self.rng.choice(BROKERS),
                max_bytes=self.rng.choice(FETCH_MAX_BYTES),
                lose=self.rng.random() < self.loss_probability,
            )
        elif kind == "maintain_isr":
            self.maintain_isr(deliver=self.rng.random() < 0.6)
        elif kind == "tick":
            self.tick(self.rng.choice((0, 50, 200, 400, 700, 1200)))
        elif kind == "crash" and not self.down:
            broker = self.rng.choice(BROKERS)
            machine = self.rng.random() < self.machine_crash_probability and self.may_lose_unflushed(broker)
            self.crash(broker, machine=machine, cut=self.rng.random())
        elif kind == "restart" and self.down:
            self.restart(self.down[0])
        elif kind == "elect_preferred":
            self.elect_preferred()
        self.clock.advance(self.rng.randint(0, 30))
        self.steps += 1
        if self.info.leader == NO_LEADER:
            self.stats.offline_steps += 1

    @property
    def live(self) -> set[int]:
        return {b for b, p in self.replicas.items() if p is not None}

    @property
    def down(self) -> list[int]:
        return [b for b in BROKERS if self.replicas[b] is None]

    def may_lose_unflushed(self, broker: int) -> bool:
        """The fault model: a machine crash never hits the last in-sync replica.

        Nothing is ever fsync'd, so a machine crash of the only ISR member may take acknowledged
        records with it wherever else they had been (Kafka's "last replica standing", KIP-966).
        """
        return broker not in self.info.isr or len(self.info.isr) > 1

    # --- the client ---------------------------------------------------------------------

    @_step
    def produce(self, count: int) -> list[tuple[int, bytes]] | None:
        """Send ``count`` new unique values to the current leader; returns (offset, value) as appended."""
        leader = self.info.leader
        part = self.replicas.get(leader)
        values = [f"v{self.next_value + i}".encode() for i in range(count)]
        self.next_value += count
        if part is None:
            self._log(f"produce {values}: no leader")
            return None
        self.stats.produced += 1
        try:
            info = part.append_as_leader(record_batch.build(values, now_ms=self.clock()), acks=self.acks)
        except NotEnoughReplicasError:
            self.stats.refused += 1
            self._log(f"produce {values} to {leader}: not enough replicas (ISR {list(part.isr)})")
            return None
        records = list(zip(range(info.first_offset, info.last_offset + 1), values, strict=True))
        self._log(
            f"produce {values} to {leader}: offsets {info.first_offset}..{info.last_offset}, HW {part.high_watermark}"
        )
        if self.acks == 1:
            self._acknowledge(records)
        elif self.acks == -1:
            self.pending.append(Pending(leader, self.generation[leader], part.leader_epoch, records))
        return records

    def complete_pending(self) -> None:
        """Answer the acks=all requests whose leader's HW has passed them (Kafka's delayed produce).

        A request is acknowledged only while the replica that appended it still leads in the same
        leader epoch, its HW is past the batch and its ISR still has min.insync.replicas members
        (else the answer is NOT_ENOUGH_REPLICAS_AFTER_APPEND). A leader that is gone or was
        replaced answers with an error (or never): not acknowledged.
        """
        still = []
        for p in self.pending:
            part = self.replicas[p.leader]
            if (
                part is None
                or self.generation[p.leader] != p.generation
                or not part.is_leader
                or part.leader_epoch != p.leader_epoch
            ):
                continue
            if part.high_watermark <= p.last_offset:
                still.append(p)
            elif part.enough_replicas():
                self._acknowledge(p.records)
            else:
                self.stats.failed_after_append += 1
        self.pending = still

    def _acknowledge(self, records: list[tuple[int, bytes]]) -> None:
        self.stats.acknowledged += 1
        self.acknowledged.update(records)
        self._log(f"  acknowledged offsets {records[0][0]}..{records[-1][0]}")

    # --- replication ----------------------------------------------------------------------

    @_step
    def fetch(self, follower: int, max_bytes: int = 1 << 20, lose: bool = False) -> bool:
        """``follower`` fetches from its leader; a lost response appends nothing. False if it could not."""
        part = self.replicas[follower]
        leader = self.replicas.get(self.info.leader)
        if part is None or leader is None or follower == self.info.leader:
            return False
        if follower in self.must_truncate:
            self.truncate_to_leader(follower)
        offset = part.log.log_end_offset
        result = leader.read(offset, max_bytes, replica_id=follower, current_leader_epoch=part.leader_epoch)
        self.stats.fetches += 1
        if lose:
            self.stats.lost_responses += 1
            self._log(f"fetch {follower} <- {self.info.leader} at {offset}: response lost")
            return True
        part.append_as_follower(result.data, result.high_watermark)
        self._log(
            f"fetch {follower} <- {self.info.leader} at {offset}: LEO {part.log.log_end_offset}, "
            f"HW {part.high_watermark} (leader HW {leader.high_watermark})"
        )
        return True

    def truncate_to_leader(self, follower: int) -> None:
        """The follower asks its leader where its latest epoch ends and cuts what diverged (KIP-101)."""
        part, leader = self.replicas[follower], self.replicas[self.info.leader]
        assert part is not None and leader is not None
        before, latest = part.log.log_end_offset, part.epochs.latest_epoch
        epoch, end = leader.end_offset_for_epoch(latest)
        part.truncate_to_leader(epoch, end)
        self.must_truncate.discard(follower)
        after = part.log.log_end_offset
        self._contents[follower] = self._contents[follower][:after]
        if after < before:
            self.stats.truncations += 1
        self._log(f"truncate {follower}: latest epoch {latest}, leader says ({epoch}, {end}): LEO {before} -> {after}")

    @_step
    def maintain_isr(self, deliver: bool = True) -> None:
        """The leader proposes its ISR to the controller and applies it once accepted.

        An earlier proposal still in flight is delivered first (the controller may have moved on
        since: then its epochs are stale and it is refused). With ``deliver=False`` a new
        proposal stays in flight until the next ISR maintenance.
        """
        if self.inflight_isr is not None:
            self._deliver_isr_proposal(*self.inflight_isr)
            self.inflight_isr = None
            return
        leader = self.replicas.get(self.info.leader)
        proposal = leader.propose_isr() if leader is not None else None
        if proposal is None:
            return
        sent = (leader.broker_id, leader.leader_epoch, leader.partition_epoch, proposal)
        if deliver:
            self._deliver_isr_proposal(*sent)
        else:
            self.inflight_isr = sent
            self._log(f"ISR proposal {list(proposal)} from {leader.broker_id} in flight")

    def _deliver_isr_proposal(
        self, broker: int, leader_epoch: int, partition_epoch: int, proposal: tuple[int, ...]
    ) -> None:
        try:
            accepted = alter_isr(self.info, broker, leader_epoch, partition_epoch, proposal)
        except (FencedLeaderEpochError, InvalidRequestError) as exc:
            self.stats.stale_isr_proposals += 1
            self._log(f"ISR proposal {list(proposal)} from {broker} refused: {exc}")
            proposer = self.replicas.get(broker)
            if proposer is not None and proposer.pending_isr == proposal:
                proposer.isr_proposal_failed()
            return
        self._log(f"ISR {list(self.info.isr)} -> {list(accepted.isr)} (proposed by {broker})")
        self.stats.isr_changes += 1
        self.info = accepted
        leader = self.replicas[broker]
        assert leader is not None, "the controller accepted an ISR from a dead leader"
        leader.apply_isr(accepted.isr, accepted.partition_epoch)
        self._publish(accepted, followers_only=True)

    @_step
    def tick(self, ms: int) -> None:
        self.clock.advance(ms)
        self._log(f"tick {ms} ms")

    # --- faults ---------------------------------------------------------------------------

    @_step
    def crash(self, broker: int, machine: bool = False, cut: float = 0.0) -> None:
        """``broker`` dies; a machine crash also cuts its last segment at a byte in
        [recovery point, end] chosen by ``cut`` (0: lose everything unflushed). The controller
        notices at once."""
        part = self.replicas[broker]
        assert part is not None and not self.down, "at most one broker is down at a time"
        log = part.log
        last = log._segments[-1]
        path, size = last.records.path, last.size
        floor = _position_of(log, log.recovery_point)
        for segment in log._segments:
            segment.close()  # no flush: what reached the files stays, as after kill -9
        self.replicas[broker] = None
        self.generation[broker] += 1
        self._contents.pop(broker, None)
        self.must_truncate.discard(broker)
        self.stats.crashes += 1
        detail = ""
        if machine:
            keep = floor + round(cut * (size - floor))
            os.truncate(path, keep)
            self.stats.machine_crashes += 1
            self.stats.bytes_lost += size - keep
            detail = f" (machine: {os.path.basename(path)} cut from {size} to {keep} bytes, floor {floor})"
        self._log(f"crash {broker}{detail}")
        if broker == self.info.leader:
            self._change(elect_leader(self.info, self.live, unclean=False))
        else:
            self._change(remove_from_isr(self.info, {broker}))

    @_step
    def restart(self, broker: int) -> None:
        """``broker`` reopens its log (recovering it) and follows the leader, or leads an offline partition.

        As the controller's ``replica_restarted``: the replica leaves the ISR and the partition
        epoch moves on (fencing ISR proposals made before the restart) even if it was not in it.
        """
        assert self.replicas[broker] is None
        self.replicas[broker] = part = self._open(broker)
        self._log(
            f"restart {broker}: LEO {part.log.log_end_offset}, epochs {part.epochs.entries}, "
            f"recovery {part.log.recovery}"
        )
        if self.info.leader == NO_LEADER:
            self._change(elect_leader(self.info, self.live, unclean=False))
        else:
            new = remove_from_isr(self.info, {broker})
            self._change(new if new is not self.info else replace(new, partition_epoch=new.partition_epoch + 1))
        if self.info.leader == NO_LEADER:
            self._publish(self.info, only=broker)  # still offline: it learns so
        elif broker != self.info.leader:
            self.truncate_to_leader(broker)

    @_step
    def elect_preferred(self) -> None:
        elected = preferred_leader(self.info, self.live)
        if elected is not None:
            self._change(elected)

    # --- the controller -------------------------------------------------------------------

    def _change(self, info: PartitionInfo) -> None:
        if info == self.info:
            return
        self._log(
            f"controller: leader {self.info.leader} -> {info.leader}, epoch {info.leader_epoch}, "
            f"ISR {list(info.isr)}, partition epoch {info.partition_epoch}"
        )
        if info.leader != self.info.leader:
            self.stats.leader_changes += 1
        self.info = info
        self._publish(info)

    def _publish(self, info: PartitionInfo, followers_only: bool = False, only: int | None = None) -> None:
        """Tell live replicas their role; a follower of a new leader must truncate before it fetches."""
        for broker in sorted(self.live):
            if only is not None and broker != only:
                continue
            part = self.replicas[broker]
            assert part is not None
            if broker == info.leader:
                if not followers_only:
                    part.become_leader(info.leader_epoch, info.replicas, info.isr, info.partition_epoch)
                continue
            if part.leader_epoch != info.leader_epoch and info.leader != NO_LEADER:
                self.must_truncate.add(broker)
            part.become_follower(info.leader, info.leader_epoch, info.replicas, info.isr, info.partition_epoch)

    def _open(self, broker: int) -> Partition:
        log = Log.open(
            os.path.join(self.directory, f"broker-{broker}", f"{TOPIC}-0"), self.config.log_config(), clock=self.clock
        )
        self._contents[broker] = []
        return Partition(TOPIC, 0, broker, log, self.config, clock=self.clock)

    # --- reading logs ---------------------------------------------------------------------

    def values(self, broker: int) -> list[bytes]:
        """Every value in ``broker``'s log by offset (read incrementally: logs only grow between cuts)."""
        part = self.replicas[broker]
        assert part is not None
        known = self._contents[broker]
        del known[part.log.log_end_offset :]
        known.extend(read_values(part.log, len(known)))
        return known

    def lost_acknowledged(self) -> list[tuple[int, bytes]]:
        """Acknowledged records missing from the current leader's log (empty without a leader)."""
        if self.replicas.get(self.info.leader) is None:
            return []
        log = self.values(self.info.leader)
        return [(o, v) for o, v in sorted(self.acknowledged.items()) if o >= len(log) or log[o] != v]

    # --- invariants -----------------------------------------------------------------------

    def check_invariants(self, reread: bool = False) -> None:
        """Raise AssertionError naming the first broken invariant; ``reread`` also re-reads every log whole."""
        if reread:
            for broker in sorted(self.live):
                whole = read_values(self.replicas[broker].log, 0)
                assert whole == self.values(broker), f"broker {broker}'s log changed below its end"
        self._check_epochs()
        self._check_high_watermarks()
        if self.replicas.get(self.info.leader) is not None:
            self._check_acknowledged()
            self._check_agreement()
            self._check_isr()

    def _check_epochs(self) -> None:
        """1. At most one replica leads any leader epoch, and leader epochs only grow."""
        assert self.info.leader_epoch >= self._controller_epoch, "1. the controller's leader epoch went down"
        self._controller_epoch = self.info.leader_epoch
        for broker in sorted(self.live):
            part = self.replicas[broker]
            key = (broker, self.generation[broker])
            assert part.leader_epoch >= self._replica_epochs.get(key, -1), f"1. broker {broker}'s epoch went down"
            self._replica_epochs[key] = part.leader_epoch
            if not part.is_leader:
                continue
            first = self._epoch_leaders.setdefault(part.leader_epoch, broker)
            assert first == broker, f"1. brokers {first} and {broker} both led leader epoch {part.leader_epoch}"
            assert part.leader_epoch >= self._max_led_epoch, (
                f"1. broker {broker} leads epoch {part.leader_epoch} after epoch {self._max_led_epoch} was led"
            )
            self._max_led_epoch = part.leader_epoch

    def _check_high_watermarks(self) -> None:
        """2. A leader's HW never goes down while it leads one epoch (and no HW is past its LEO)."""
        for broker in sorted(self.live):
            part = self.replicas[broker]
            assert part.high_watermark <= part.log.log_end_offset, f"2. broker {broker}'s HW is past its LEO"
            if part.is_leader:
                key = (broker, self.generation[broker], part.leader_epoch)
                before = self._leader_hw.get(key, -1)
                assert part.high_watermark >= before, (
                    f"2. leader {broker}'s HW went down from {before} to {part.high_watermark} in epoch {key[2]}"
                )
                self._leader_hw[key] = part.high_watermark

    def _check_acknowledged(self) -> None:
        """3. Every acknowledged record is in the current leader's log at its offset."""
        lost = self.lost_acknowledged()
        assert not lost, (
            f"3. acknowledged records lost from leader {self.info.leader}'s log: {lost[:5]} "
            f"({len(lost)} in all; its LEO {self.replicas[self.info.leader].log.log_end_offset})"
        )

    def _check_agreement(self) -> None:
        """4. Replicas never diverge below the high watermark.

        Below the leader's HW for a follower that has truncated to this leader; below its own HW
        for one that has not yet: until then it may hold an uncommitted tail of an older epoch
        that the new leader never had, as in Kafka.
        """
        leader = self.info.leader
        ours = self.values(leader)
        for broker in sorted(self.live - {leader}):
            part = self.replicas[broker]
            bound = part.high_watermark if broker in self.must_truncate else self.replicas[leader].high_watermark
            at = _first_difference(self.values(broker), ours, bound)
            assert at is None, f"4. broker {broker} diverges from leader {leader} at offset {at}, below HW {bound}"

    def _check_isr(self) -> None:
        """5. Every live member of the controller's ISR holds the committed log (what makes 3 hold
        when the leader fails next: it is checked at once, not only once the loss shows)."""
        leader = self.info.leader
        ours, hw = self.values(leader), self.replicas[leader].high_watermark
        for broker in sorted(self.live & set(self.info.isr)):
            theirs = self.values(broker)
            assert len(theirs) >= hw, (
                f"5. ISR member {broker} lacks committed records: its LEO {len(theirs)} < leader {leader}'s HW {hw}"
            )
            assert _first_difference(theirs, ours, hw) is None, f"5. ISR member {broker} diverges below the HW {hw}"

    # --- reporting ------------------------------------------------------------------------

    def state(self) -> str:
        lines = [f"controller: {self.info}"]
        for broker in BROKERS:
            part = self.replicas[broker]
            if part is None:
                lines.append(f"  broker {broker}: down")
                continue
            role = "leader" if part.is_leader else f"follower of {part.leader}"
            followers = {r: (f.end_offset, self.clock() - f.last_caught_up_ms) for r, f in part.followers.items()}
            lines.append(
                f"  broker {broker}: {role}, epoch {part.leader_epoch}, LEO {part.log.log_end_offset}, "
                f"HW {part.high_watermark}, ISR {list(part.isr)}, epochs {part.epochs.entries}"
                + (f", followers (end, ms since caught up) {followers}" if followers else "")
            )
        return "\n".join(lines)

    def report(self, last: int = 40) -> str:
        return (
            f"seed {self.seed}, after {self.steps} random steps ({self.actions} actions)\n{self.state()}\n"
            f"last steps:\n" + "\n".join(self.trace[-last:])
        )

    def _log(self, message: str) -> None:
        self.trace.append(f"[{self.actions}] {message}")


def read_values(log: Log, start: int) -> list[bytes]:
    """The values of ``log`` from offset ``start`` (a batch boundary or inside a batch) to its end."""
    out: list[bytes] = []
    offset = start
    while offset < log.log_end_offset:
        table = record_batch.decode_table(log.read(offset, 1 << 20), min_offset=offset)
        offsets = table.column("offset").to_pylist()
        assert offsets and offsets == list(range(offset, offset + len(offsets))), f"offsets not contiguous at {offset}"
        out.extend(table.column("value").to_pylist())
        offset += len(offsets)
    return out


def _first_difference(theirs: list[bytes], ours: list[bytes], bound: int) -> int | None:
    """The first offset below ``min(len(theirs), bound)`` where ``theirs`` differs from (or goes past) ``ours``."""
    n = min(len(theirs), bound)
    if theirs[:n] == ours[:n]:
        return None
    return next(i for i in range(n) if i >= len(ours) or theirs[i] != ours[i])


def _position_of(log: Log, offset: int) -> int:
    """The byte position of ``offset``'s batch in the last segment (0 if it lies before that segment)."""
    last = log._segments[-1]
    if offset <= last.base_offset:
        return 0
    position = last.find_position(offset, last.size)
    return last.size if position is None else position
