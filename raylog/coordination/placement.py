"""Replica placement, as Kafka does it (names are :mod:`raylog.common.names`).

Placement follows Kafka's rack-unaware assignment: the first replica of partition p goes
to broker ``(p + start) % n``; the others follow at a shift that grows every n partitions,
so replicas and (first-replica) leaderships spread evenly over the brokers. Partitions
added to a topic later continue the scheme from the topic's partition count, starting at
the broker that holds partition 0's first replica (Kafka's ``startIndex``).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence

from ..errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
)

#: A bound on partitions per topic: each replica is a Ray actor process (~60 MB).
MAX_PARTITIONS = 10_000


logger = logging.getLogger(__name__)


def assign_replicas(
    num_partitions: int,
    replication_factor: int,
    brokers: Sequence[int],
    rng: random.Random | None = None,
    first_partition: int = 0,
    start_index: int | None = None,
) -> list[tuple[int, ...]]:
    """Replica lists (preferred leader first) for each partition of a new topic or, from
    ``first_partition`` on, for partitions added to one.

    Args:
        num_partitions: how many partitions to place.
        replication_factor: replicas per partition.
        brokers: the broker ids to place on.
        rng: picks the start and shift when ``start_index`` is None.
        first_partition: the id of the first partition placed (the topic's partition count
            when adding partitions).
        start_index: fixed start and shift, an index into the sorted ``brokers`` (Kafka
            passes the index of partition 0's first replica when adding partitions).

    Raises:
        InvalidPartitionsError: ``num_partitions`` outside ``[1, MAX_PARTITIONS]``.
        InvalidReplicationFactorError: ``replication_factor`` outside ``[1, len(brokers)]``.
    """
    if isinstance(num_partitions, bool) or not isinstance(num_partitions, int):
        raise InvalidPartitionsError(f"num_partitions must be an integer, got {num_partitions!r}")
    if not 1 <= num_partitions <= MAX_PARTITIONS:
        raise InvalidPartitionsError(f"num_partitions must be in [1, {MAX_PARTITIONS}], got {num_partitions}")
    n = len(brokers)
    if isinstance(replication_factor, bool) or not isinstance(replication_factor, int):
        raise InvalidReplicationFactorError(f"replication_factor must be an integer, got {replication_factor!r}")
    if not 1 <= replication_factor <= n:
        raise InvalidReplicationFactorError(
            f"replication_factor must be in [1, {n}] (the number of live brokers), got {replication_factor}"
        )
    ordered = sorted(brokers)
    if start_index is None:
        rng = rng or random.Random()
        start, shift = rng.randrange(n), rng.randrange(n)
    else:
        start = shift = start_index
    assignment = []
    for p in range(first_partition, first_partition + num_partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        replicas = [ordered[first]]
        for j in range(replication_factor - 1):
            replicas.append(ordered[(first + 1 + (shift + j) % (n - 1)) % n])
        assignment.append(tuple(replicas))
    return assignment
