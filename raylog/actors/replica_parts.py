"""What the parts of the partition replica actor share.

:class:`~raylog.actors.replica.PartitionReplicaActor` is one Ray actor (one process) made of
parts, each a class of its own module, one job each:

- :mod:`~raylog.actors.replica`: the actor's life (start, restart report, the controller's
  pushes, close), its :class:`~raylog.coordination.replica_core.ReplicaCore` and the effects
  it asks for (the follower's fetch loop, ISR proposals), its state, the lock every part
  holds and the purgatory where calls wait;
- :mod:`~raylog.actors.replica_writes`: produce, transaction markers, DeleteRecords;
- :mod:`~raylog.actors.replica_reads`: fetch, offset and leader-epoch look-ups;
- :mod:`~raylog.actors.replica_housekeeping`: retention, flush, checkpoints, compaction;
- :mod:`~raylog.actors.replica_tiering`: tiered storage's pump and the reads it serves.

Every part holds the replica's lock for each step on the partition and reads the state and
takes the steps :class:`ReplicaPart` lists, which ``PartitionReplicaActor`` owns.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable
from typing import Any

from raylog.actors.access import Guard
from raylog.coordination.partition import Partition
from raylog.coordination.purgatory import Delayed, Purgatory
from raylog.coordination.quotas import QuotaManager
from raylog.coordination.replica_core import ReplicaCore

#: Bound on any call a replica makes to another actor.
PEER_CALL_TIMEOUT_S = 10.0
#: Pause before a follower retries a failed fetch (the leader may be moving).
REPLICA_BACKOFF_S = 0.1


class ReplicaPart:
    """The replica actor's state and steps that its parts use (set and defined by
    :class:`~raylog.actors.replica.PartitionReplicaActor`)."""

    partition: Partition
    core: ReplicaCore
    #: Guards every step on the partition; a call that waits is parked in ``_purgatory``.
    _lock: threading.RLock
    _purgatory: Purgatory
    _stopped: threading.Event  # set once the data is deleted: every loop ends
    #: Who may call: the cluster's session key and the ACLs (see raylog.actors.access).
    _guard: Guard
    _metric_tags: dict
    _produce_quotas: QuotaManager
    _fetch_quotas: QuotaManager
    _cleaning: concurrent.futures.Future | None  # the cleaning round under way
    _notify: Callable[[], None]
    _await: Callable[[Delayed], Any]
    _maybe_propose_isr: Callable[[], None]
    _throttled: Callable[[Any, int, str], Any]
    _controller: Callable[[], Any]
    _start: Callable[..., threading.Thread]
    _remote_fetch: Callable[[Any, Any], Any]
    _remote_offset_for_time: Callable[[int, Any, int], Any]


def now_ms() -> float:
    return time.monotonic() * 1000
