"""The checker: Jepsen's anomaly classes for Kafka-like logs, found in a :class:`History`.

Each class, restated for raylog from Jepsen's Kafka analysis (the history module says what
a history holds):

- lost write: a send acknowledged (or a value a consumer polled, so below the high
  watermark) that the final read does not return, where the final read reached its offset.
  A value of a transaction counts only if the transaction committed (or if a read_committed
  poll returned it): the records of an aborted one stay in the log, unread by read_committed.
- duplicate: one value read at two positions (two offsets of one partition, or in two
  partitions), by the final read or polls. An unknown send may appear once or not at all,
  never twice; a producer without idempotence may duplicate on retries.
- inconsistent offsets: two values at one offset (across acknowledgements, polls and the
  final read: two readers, or one reader at two times).
- non-monotonic send: one process's acknowledged sends to a partition, in the order it
  invoked them, got offsets that do not increase.
- non-monotonic poll: one consumer's successive records of a partition (within and across
  polls, with no assignment or seek between) have an offset at or below one before.
- poll skip: one consumer's successive records of a partition jump over offsets that the
  final read returns.
- unseen: a value in the final read below the offset its group committed (the highest
  acknowledged commit, or the group's committed offset at the end) that no poll of that
  group ever returned.
- unfenced commit (not one of Jepsen's classes: the promise of groups): a commit from a
  member acknowledged for a partition that another member of its group owned all along the
  commit (assigned before it began, not given up before it ended) and was given after the
  committer's own assignment of it. The coordinator must refuse a member whose generation is
  over, and never give one partition to two members. A member expired without knowing still
  holds its partitions in its own view until its next poll tells it: the commits of the
  member given them next are what the coordinator must accept.
- aborted read: a read_committed poll (or the final read, which is read_committed) returned
  a value of an aborted transaction.
- intermediate read: a read_committed poll returned a value of a transaction that went on
  writing to that partition after the poll (so it was not committed when read).
- torn transaction: a committed transaction whose values the final read returns only in
  part (some partitions, or some values, and never the others); also one whose end is
  unknown, which must then be there whole or not at all. A send refused before it was
  queued (fail) is no part of its transaction.

The checker is plain Python, deterministic and fast: it runs on every fault run.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
from collections.abc import Iterator

from raylog.chaos.history import (
    ABORTED,
    COMMITTED,
    FAIL,
    OK,
    UNKNOWN,
    Assign,
    Commit,
    History,
    Op,
    Poll,
    Revoke,
    Send,
    Txn,
)

LOST_WRITE = "lost-write"
DUPLICATE = "duplicate"
INCONSISTENT_OFFSETS = "inconsistent-offsets"
NONMONOTONIC_SEND = "non-monotonic-send"
NONMONOTONIC_POLL = "non-monotonic-poll"
POLL_SKIP = "poll-skip"
UNSEEN = "unseen"
UNFENCED_COMMIT = "unfenced-commit"
ABORTED_READ = "aborted-read"
INTERMEDIATE_READ = "intermediate-read"
TORN_TRANSACTION = "torn-transaction"
CLASSES = (
    LOST_WRITE,
    DUPLICATE,
    INCONSISTENT_OFFSETS,
    NONMONOTONIC_SEND,
    NONMONOTONIC_POLL,
    POLL_SKIP,
    UNSEEN,
    UNFENCED_COMMIT,
    ABORTED_READ,
    INTERMEDIATE_READ,
    TORN_TRANSACTION,
)
#: Classes that only producers with idempotence promise to avoid (retries without it may
#: duplicate and, with several batches in flight, reorder).
IDEMPOTENCE_CLASSES = frozenset({DUPLICATE, NONMONOTONIC_SEND})
#: Examples kept per class in a report's text.
EXAMPLES_PER_CLASS = 3


@dataclasses.dataclass(frozen=True)
class Anomaly:
    """One instance of an anomaly class: where, which value, the operations involved.
    ``idempotent``: every value involved was sent by an idempotent producer."""

    kind: str
    partition: int
    offset: int | None
    value: str | None
    ops: tuple[str, ...]
    idempotent: bool = True

    def __str__(self) -> str:
        return f"{self.kind} p{self.partition}@{self.offset} {self.value!r}: " + "; ".join(self.ops)


@dataclasses.dataclass
class Report:
    """Every anomaly found, by class."""

    anomalies: dict[str, list[Anomaly]]

    def counts(self) -> dict[str, int]:
        return {kind: len(self.anomalies[kind]) for kind in CLASSES}

    def violations(self, safe: bool) -> list[Anomaly]:
        """The anomalies a configuration breaks its promise with: none unless it is ``safe``;
        duplicates and send reordering only for values of idempotent producers."""
        if not safe:
            return []
        return [a for kind in CLASSES for a in self.anomalies[kind] if kind not in IDEMPOTENCE_CLASSES or a.idempotent]

    def summary(self, safe: bool = False) -> str:
        """``class=count`` for every class found (``none`` when clean), and how many of them
        break a ``safe`` configuration's promise."""
        found = [f"{kind}={n}" for kind, n in self.counts().items() if n]
        breaking = collections.Counter(a.kind for a in self.violations(safe))
        broken = [f"{kind}={n}" for kind, n in breaking.items()]
        return (" ".join(found) or "none") + (f" (violations: {' '.join(broken)})" if broken else "")

    def examples(self, per_class: int = EXAMPLES_PER_CLASS, safe: bool = False) -> str:
        """A few anomalies of each class, those that break a ``safe`` configuration's promise
        first (marked ``violation``)."""
        breaking = {id(a) for a in self.violations(safe)}
        lines = []
        for kind in CLASSES:
            ranked = sorted(self.anomalies[kind], key=lambda a: id(a) not in breaking)
            for anomaly in ranked[:per_class]:
                lines.append(f"  {'violation: ' if id(anomaly) in breaking else ''}{anomaly}")
        return "\n".join(lines)


def check(history: History) -> Report:
    """Every anomaly in ``history``, by class."""
    context = _Context(history)
    anomalies: dict[str, list[Anomaly]] = {kind: [] for kind in CLASSES}
    for find in (
        _lost_writes,
        _duplicates,
        _inconsistent_offsets,
        _nonmonotonic_sends,
        _poll_order,
        _unseen,
        _unfenced_commits,
        _aborted_reads,
        _intermediate_reads,
        _torn_transactions,
    ):
        for anomaly in find(context):
            anomalies[anomaly.kind].append(anomaly)
    return Report(anomalies)


class _Context:
    """Indexes over a history that the class finders share."""

    def __init__(self, history: History):
        self.ops = history.ops
        self.final = history.final
        self.sends: dict[str, Send] = {}
        for op in self.ops:
            if isinstance(op, Send):
                assert op.value not in self.sends, f"value {op.value!r} sent twice: values must be unique"
                self.sends[op.value] = op
        self.polls = [op for op in self.ops if isinstance(op, Poll)]
        self.txns = {op.txn: op for op in self.ops if isinstance(op, Txn)}
        # value -> every (partition, offset) the final read returned it at
        self.final_positions: dict[str, list[tuple[int, int]]] = collections.defaultdict(list)
        self.final_offsets: dict[int, list[int]] = {}
        for partition, records in self.final.records.items():
            self.final_offsets[partition] = [offset for offset, _ in records]
            for offset, value in records:
                self.final_positions[value].append((partition, offset))

    def reached(self, partition: int, offset: int) -> bool:
        """Whether the final read covered ``offset`` of ``partition``."""
        return self.final.complete.get(partition, False) or offset < self.final.end_offsets.get(partition, 0)

    def committed(self, value: str) -> bool:
        """Whether ``value`` must stay once written: not sent in a transaction, or in one that
        committed."""
        send = self.sends.get(value)
        if send is None or not send.txn:
            return True
        txn = self.txns.get(send.txn)
        return txn is not None and txn.outcome == COMMITTED

    def idempotent(self, value: str) -> bool:
        send = self.sends.get(value)
        return send is None or send.idempotent


def describe(op: Op, around: str | None = None) -> str:
    """One operation, short: a poll shows only the record ``around`` a value when given."""
    if isinstance(op, Send):
        result = f"{op.outcome} {op.offset}" if op.offset is not None else op.outcome
        error = f" ({op.error})" if op.error else ""
        return f"{op.process} send p{op.partition} {op.value!r} -> {result}{error} [t{op.start}-{op.end}]"
    if isinstance(op, Poll):
        shown = [r for r in op.records if around is None or r[2] == around][:3]
        records = ", ".join(f"p{p}@{o} {v!r}" for p, o, v in shown)
        more = f" (+{len(op.records) - len(shown)})" if len(op.records) > len(shown) else ""
        return f"{op.process} poll [{records}{more}] [t{op.start}-{op.end}]"
    if isinstance(op, Commit):
        offsets = ", ".join(f"p{p}@{o}" for p, o in op.offsets)
        return f"{op.process} commit {op.group} [{offsets}] -> {op.outcome} [t{op.start}-{op.end}]"
    if isinstance(op, Assign):
        return f"{op.process} assign {list(op.partitions)} [t{op.start}]"
    if isinstance(op, Revoke):
        return f"{op.process} revoke {list(op.partitions)} [t{op.start}]"
    return f"{op.process} txn {op.txn} -> {op.outcome} [t{op.start}-{op.end}]"


def _final_read(partition: int, offset: int) -> str:
    return f"final read p{partition}@{offset}"


def _lost_writes(c: _Context) -> Iterator[Anomaly]:
    reported = set()
    for send in c.sends.values():
        if (
            send.outcome == OK
            and send.value not in c.final_positions
            and c.reached(send.partition, send.offset)
            and c.committed(send.value)
        ):
            reported.add(send.value)
            yield Anomaly(LOST_WRITE, send.partition, send.offset, send.value, (describe(send),))
    for poll in c.polls:
        for partition, offset, value in poll.records:
            if value in c.final_positions or value in reported or not c.reached(partition, offset):
                continue
            if not poll.read_committed and not c.committed(value):
                continue  # read_uncommitted: a transaction's value read before it aborted (or may have)
            reported.add(value)
            ops = (describe(poll, value),) + ((describe(c.sends[value]),) if value in c.sends else ())
            yield Anomaly(LOST_WRITE, partition, offset, value, ops)


def _observations(c: _Context) -> Iterator[tuple[int, int, str, str]]:
    """Every ``(partition, offset, value, who)`` a reader or an acknowledgement reported."""
    for value, positions in c.final_positions.items():
        for partition, offset in positions:
            yield partition, offset, value, _final_read(partition, offset)
    for poll in c.polls:
        for partition, offset, value in poll.records:
            yield partition, offset, value, describe(poll, value)


def _duplicates(c: _Context) -> Iterator[Anomaly]:
    positions: dict[str, dict[tuple[int, int], str]] = collections.defaultdict(dict)
    for partition, offset, value, who in _observations(c):
        positions[value].setdefault((partition, offset), who)
    for value, seen in positions.items():
        if len(seen) > 1:
            (partition, offset), *_ = sorted(seen)
            ops = tuple(who for _, who in sorted(seen.items())) + (
                (describe(c.sends[value]),) if value in c.sends else ()
            )
            yield Anomaly(DUPLICATE, partition, offset, value, ops, c.idempotent(value))


def _inconsistent_offsets(c: _Context) -> Iterator[Anomaly]:
    at: dict[tuple[int, int], dict[str, str]] = collections.defaultdict(dict)
    for partition, offset, value, who in _observations(c):
        at[(partition, offset)].setdefault(value, who)
    for send in c.sends.values():
        if send.outcome == OK:
            at[(send.partition, send.offset)].setdefault(send.value, describe(send))
    for (partition, offset), values in sorted(at.items()):
        if len(values) > 1:
            idempotent = all(c.idempotent(v) for v in values)
            yield Anomaly(INCONSISTENT_OFFSETS, partition, offset, min(values), tuple(values.values()), idempotent)


def _nonmonotonic_sends(c: _Context) -> Iterator[Anomaly]:
    previous: dict[tuple[str, int], Send] = {}
    for send in sorted(c.sends.values(), key=lambda s: s.start):
        if send.outcome != OK:
            continue
        key = (send.process, send.partition)
        before = previous.get(key)
        if before is not None and send.offset <= before.offset:
            yield Anomaly(
                NONMONOTONIC_SEND,
                send.partition,
                send.offset,
                send.value,
                (describe(before), describe(send)),
                before.idempotent and send.idempotent,
            )
        previous[key] = send


def _poll_order(c: _Context) -> Iterator[Anomaly]:
    """Non-monotonic polls and poll skips: each process's records of a partition in order.

    Ops are taken in the order they completed: a group member's assignment happens inside
    a poll (which then returns records from the new positions), so it comes first."""
    last: dict[tuple[str, int], tuple[int, str, Poll]] = {}
    for op in sorted(c.ops, key=lambda op: (op.end, op.start)):
        if isinstance(op, Assign):
            for partition in op.partitions:
                last.pop((op.process, partition), None)
            continue
        if not isinstance(op, Poll):
            continue
        for partition, offset, value in op.records:
            key = (op.process, partition)
            before = last.get(key)
            last[key] = (offset, value, op)
            if before is None:
                continue
            before_offset, before_value, before_poll = before
            ops = (describe(before_poll, before_value), describe(op, value))
            if offset <= before_offset:
                yield Anomaly(NONMONOTONIC_POLL, partition, offset, value, ops)
                continue
            offsets = c.final_offsets.get(partition, [])
            i = bisect.bisect_right(offsets, before_offset)
            if i < len(offsets) and offsets[i] < offset:
                skipped = offsets[i : bisect.bisect_left(offsets, offset)]
                shown = ", ".join(map(str, skipped[:5])) + (" ..." if len(skipped) > 5 else "")
                yield Anomaly(POLL_SKIP, partition, offset, value, ops + (f"skipped offsets {shown}",))


def _unseen(c: _Context) -> Iterator[Anomaly]:
    committed: dict[str, dict[int, tuple[int, str]]] = collections.defaultdict(dict)
    for group, offsets in c.final.committed.items():
        for partition, offset in offsets.items():
            committed[group][partition] = (offset, f"group {group} committed p{partition}@{offset} at the end")
    for op in c.ops:
        if isinstance(op, Commit) and op.outcome == OK:
            for partition, offset in op.offsets:
                if offset > committed[op.group].get(partition, (-1, ""))[0]:
                    committed[op.group][partition] = (offset, describe(op))
    polled: dict[str, set[str]] = collections.defaultdict(set)
    for poll in c.polls:
        if poll.group is not None:
            polled[poll.group].update(value for _, _, value in poll.records)
    for group, offsets in sorted(committed.items()):
        for partition, (upto, commit) in sorted(offsets.items()):
            for offset, value in c.final.records.get(partition, []):
                if offset >= upto:
                    break
                if value not in polled[group]:
                    ops = (commit,) + ((describe(c.sends[value]),) if value in c.sends else ())
                    yield Anomaly(UNSEEN, partition, offset, value, ops)


def _unfenced_commits(c: _Context) -> Iterator[Anomaly]:
    """Commits acknowledged while another member of the group owned the partition."""
    # (group, partition) -> [(owner, Assign, Revoke or None)], in time order
    owned: dict[tuple[str, int], list[list]] = collections.defaultdict(list)
    open_: dict[tuple[str, str, int], list] = {}
    for op in sorted(c.ops, key=lambda op: (op.end, op.start)):
        if isinstance(op, Assign) and op.group is not None:
            for partition in op.partitions:
                interval = [op.process, op, None]
                owned[(op.group, partition)].append(interval)
                open_[(op.group, op.process, partition)] = interval
        elif isinstance(op, Revoke):
            for partition in op.partitions:
                interval = open_.pop((op.group, op.process, partition), None)
                if interval is not None:
                    interval[2] = op
    for commit in c.ops:
        if not isinstance(commit, Commit) or commit.outcome != OK:
            continue
        for partition, offset in commit.offsets:
            intervals = owned.get((commit.group, partition), ())
            # The committer's own latest assignment of the partition before the commit: an
            # owner assigned before it is one that was expired without knowing yet.
            mine = max(
                (a for o, a, _ in intervals if o == commit.process and a.end < commit.start),
                key=lambda a: a.end,
                default=None,
            )
            for owner, assign, revoke in intervals:
                held = assign.end < commit.start and (revoke is None or revoke.start > commit.end)
                newer = mine is None or assign.end > mine.end
                if owner != commit.process and held and newer:
                    ops = (describe(commit), describe(assign)) + ((describe(revoke),) if revoke else ())
                    ops += (describe(mine),) if mine is not None else ()
                    yield Anomaly(UNFENCED_COMMIT, partition, offset, None, ops)
                    break


def _aborted_reads(c: _Context) -> Iterator[Anomaly]:
    def aborted(value: str) -> Txn | None:
        send = c.sends.get(value)
        txn = c.txns.get(send.txn) if send is not None and send.txn else None
        return txn if txn is not None and txn.outcome == ABORTED else None

    for poll in c.polls:
        if not poll.read_committed:
            continue
        for partition, offset, value in poll.records:
            if (txn := aborted(value)) is not None:
                yield Anomaly(ABORTED_READ, partition, offset, value, (describe(poll, value), describe(txn)))
    for partition, records in sorted(c.final.records.items()):
        for offset, value in records:
            if (txn := aborted(value)) is not None:
                yield Anomaly(ABORTED_READ, partition, offset, value, (_final_read(partition, offset), describe(txn)))


def _intermediate_reads(c: _Context) -> Iterator[Anomaly]:
    later: dict[tuple[str, int], list[Send]] = collections.defaultdict(list)
    for send in c.sends.values():
        if send.txn:
            later[(send.txn, send.partition)].append(send)
    for poll in c.polls:
        if not poll.read_committed:
            continue
        for partition, offset, value in poll.records:
            send = c.sends.get(value)
            if send is None or not send.txn:
                continue
            more = [s for s in later[(send.txn, partition)] if s.start > poll.end]
            if more:
                ops = (describe(poll, value), describe(more[0]))
                yield Anomaly(INTERMEDIATE_READ, partition, offset, value, ops)


def _torn_transactions(c: _Context) -> Iterator[Anomaly]:
    members: dict[str, list[Send]] = collections.defaultdict(list)
    for send in c.sends.values():
        if send.txn and send.outcome != FAIL:
            members[send.txn].append(send)
    for txn_id, sends in sorted(members.items()):
        txn = c.txns.get(txn_id)
        if txn is None or txn.outcome not in (COMMITTED, UNKNOWN):
            continue
        if not all(c.final.complete.get(s.partition, False) for s in sends):
            continue
        missing = [s for s in sends if s.value not in c.final_positions]
        if missing and len(missing) < len(sends):
            shown = missing[0]
            ops = (describe(txn), *(describe(s) for s in missing[:3]))
            yield Anomaly(TORN_TRANSACTION, shown.partition, shown.offset, shown.value, ops)
