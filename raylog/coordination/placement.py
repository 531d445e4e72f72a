"""Names (topics, client ids, transactional ids) and replica placement, as Kafka does them.

Names: a topic name is 1 to 249 ASCII letters, digits, '.', '_' and '-', not "." or ".."
(Kafka's ``Topic.validate``); since metric names turn '.' into '_', a name holding either
is logged with a warning and refused when it collides that way with an existing topic (as
Kafka's controller does). Client ids and transactional ids are strings of at most 32767
UTF-8 bytes (a string in Kafka's protocol); a transactional id is never empty (Kafka's
producer config and transaction coordinator refuse one). Clients check names before they
send anything (raising their own typed error) and servers check them again.

Placement follows Kafka's rack-unaware assignment: the first replica of partition p goes
to broker ``(p + start) % n``; the others follow at a shift that grows every n partitions,
so replicas and (first-replica) leaderships spread evenly over the brokers. Partitions
added to a topic later continue the scheme from the topic's partition count, starting at
the broker that holds partition 0's first replica (Kafka's ``startIndex``).
"""

from __future__ import annotations

import logging
import random
import re
from collections.abc import Iterable, Sequence

from ..errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    RaylogError,
)

MAX_TOPIC_NAME_LENGTH = 249
#: The longest string Kafka's protocol carries (an int16 length): client and transactional ids.
MAX_ID_BYTES = 32_767
#: A bound on partitions per topic: each replica is a Ray actor process (~60 MB).
MAX_PARTITIONS = 10_000
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
#: Topics raylog keeps for itself (consumer offsets, transaction states); users may read
#: but not create them.
OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_TOPIC = "__transaction_state"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_TOPIC})


logger = logging.getLogger(__name__)


def validate_topic_name(name: object, existing: Iterable[str] | None = None) -> str:
    """Return ``name`` if it is a legal topic name; with the ``existing`` topics (when one
    is created), also one that does not collide with them once '.' is read as '_'.

    Raises:
        InvalidTopicError: empty, ``.`` or ``..``, too long, an illegal character, or a
            collision with an existing topic.
    """
    if not isinstance(name, str) or not name:
        raise InvalidTopicError(f"topic name must be a non-empty string, got {name!r}")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(f"topic name is {len(name)} characters, at most {MAX_TOPIC_NAME_LENGTH} allowed")
    if not _LEGAL.match(name):
        raise InvalidTopicError(f"topic name {name!r} may only hold ASCII letters, digits, '.', '_' and '-'")
    if existing is not None and ("." in name or "_" in name):
        unified = _unify(name)
        colliding = sorted(t for t in existing if t != name and _unify(t) == unified)
        if colliding:
            raise InvalidTopicError(f"topic {name!r} collides with existing topics: {', '.join(colliding)}")
        logger.warning(
            "topic %r: due to limitations in metric names, topics with a period ('.') or underscore ('_') "
            "could collide; to avoid issues use either, but not both",
            name,
        )
    return name


def _unify(name: str) -> str:
    return name.replace(".", "_")


def validate_client_id(client_id: object, error: type[RaylogError] = InvalidRequestError) -> str:
    """Return ``client_id`` if it is a string Kafka's protocol carries (empty is allowed).

    Raises:
        ``error`` (a client passes InvalidConfigError; a server answers InvalidRequestError).
    """
    return _protocol_string(client_id, "client_id", error)


def validate_transactional_id(transactional_id: object, error: type[RaylogError] = InvalidRequestError) -> str:
    """Return ``transactional_id`` if it is a non-empty string Kafka's protocol carries.

    Raises:
        ``error`` (a client passes InvalidConfigError; a server answers InvalidRequestError).
    """
    if transactional_id == "":
        raise error("transactional_id must not be empty")
    return _protocol_string(transactional_id, "transactional_id", error)


def _protocol_string(value: object, what: str, error: type[RaylogError]) -> str:
    if not isinstance(value, str):
        raise error(f"{what} must be a string, got {value!r}")
    try:
        size = len(value.encode())
    except UnicodeEncodeError:
        raise error(f"{what} {value!r} is not valid unicode") from None
    if size > MAX_ID_BYTES:
        raise error(f"{what} is {size} bytes in UTF-8, at most {MAX_ID_BYTES} allowed")
    return value


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
