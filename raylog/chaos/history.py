"""A history: every operation the clients of a fault run attempted, with its outcome, and
what a fresh consumer read from every partition at the end.

Every operation carries ``start`` and ``end`` from one logical clock shared by all the
run's processes (a process is one client thread: a producer thread, a consumer), so
"A completed before B was invoked" means ``A.end < B.start``. Values are unique strings,
which is what lets the checker trace each one. A send's outcome is ``ok`` (acknowledged at
``offset``), ``fail`` (certainly not written) or ``unknown`` (timed out, or the broker went
away after the request left: it may or may not have been written).

Plain Python, no Ray: the checker's unit tests build histories by hand.
"""

from __future__ import annotations

import dataclasses
import threading
import time

OK = "ok"
FAIL = "fail"
UNKNOWN = "unknown"
#: Transaction outcomes.
COMMITTED = "committed"
ABORTED = "aborted"

#: ``(partition, offset, value)``: one record a poll returned.
Read = tuple[int, int, str]


@dataclasses.dataclass(frozen=True)
class Send:
    """One record sent to ``partition``; ``offset`` is known when ``outcome`` is ok."""

    process: str
    partition: int
    value: str
    outcome: str
    offset: int | None = None
    idempotent: bool = True
    error: str | None = None
    txn: str | None = None  # the transaction the send belongs to, if any
    start: int = 0
    end: int = 0


@dataclasses.dataclass(frozen=True)
class Poll:
    """What one poll returned, in the order returned. ``group`` is the consumer group of a
    member (None for a consumer with assigned partitions)."""

    process: str
    records: tuple[Read, ...]
    group: str | None = None
    read_committed: bool = False
    start: int = 0
    end: int = 0


@dataclasses.dataclass(frozen=True)
class Commit:
    """Offsets (``(partition, next offset to read)``) committed for ``group``."""

    process: str
    group: str
    offsets: tuple[tuple[int, int], ...]
    outcome: str
    start: int = 0
    end: int = 0


@dataclasses.dataclass(frozen=True)
class Assign:
    """The process's partitions changed (an assignment, a rebalance, a seek): from here on its
    polls of ``partitions`` start a new sequence (no order is expected across it). ``group``:
    the consumer group that gave a member these partitions to own (None for a consumer that
    assigned or sought them itself)."""

    process: str
    partitions: tuple[int, ...]
    group: str | None = None
    start: int = 0
    end: int = 0


@dataclasses.dataclass(frozen=True)
class Revoke:
    """A group member gave ``partitions`` up (revoked in a rebalance, or lost)."""

    process: str
    partitions: tuple[int, ...]
    group: str
    start: int = 0
    end: int = 0


@dataclasses.dataclass(frozen=True)
class Txn:
    """A transaction's end: ``outcome`` committed, aborted or unknown; its sends name it in ``txn``."""

    process: str
    txn: str
    outcome: str
    start: int = 0
    end: int = 0


Op = Send | Poll | Commit | Assign | Revoke | Txn


@dataclasses.dataclass
class FinalRead:
    """A fresh read_committed consumer's read of every partition from its log start.

    ``records[p]``: ``(offset, value)`` in offset order; ``end_offsets[p]``: the offset the
    read reached (exclusive); ``complete[p]``: it reached the partition's end offset.
    ``committed[group][p]``: each group's committed offset at the end."""

    records: dict[int, list[tuple[int, str]]]
    end_offsets: dict[int, int]
    complete: dict[int, bool]
    committed: dict[str, dict[int, int]] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, records: dict[int, list[tuple[int, str]]], committed: dict | None = None) -> FinalRead:
        """A complete read of ``records`` (tests write histories by hand with it)."""
        ends = {p: (rs[-1][0] + 1 if rs else 0) for p, rs in records.items()}
        return cls(records, ends, dict.fromkeys(records, True), committed or {})


@dataclasses.dataclass
class History:
    ops: list[Op]
    final: FinalRead


class Recorder:
    """Collects operations from many threads. Concurrency: thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clock = 0
        self._ops: list[Op] = []
        self._walls: list[float] = []  # the monotonic time of each tick (tick i at i - 1)

    def now(self) -> int:
        """The next tick of the run's logical clock."""
        with self._lock:
            self._clock += 1
            self._walls.append(time.monotonic())
            return self._clock

    def seconds(self, start: int, end: int) -> float:
        """The wall time between two ticks of this recorder."""
        return self._walls[end - 1] - self._walls[start - 1]

    def add(self, op: Op) -> None:
        with self._lock:
            self._ops.append(op)

    def history(self, final: FinalRead) -> History:
        with self._lock:
            return History(sorted(self._ops, key=lambda op: (op.start, op.end)), final)

    def __len__(self) -> int:
        with self._lock:
            return len(self._ops)
