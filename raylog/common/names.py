"""Names, as Kafka has them: topics, client ids, transactional ids and group ids; and the
names of raylog's Ray actors, and where they run, so any process can find them (all in one
namespace) without importing the actors' code: a client process connects with these alone.

A topic name is 1 to 249 ASCII letters, digits, '.', '_' and '-', not "." or ".."
(Kafka's ``Topic.validate``); since metric names turn '.' into '_', a name holding either
is logged with a warning and refused when it collides that way with an existing topic (as
Kafka's controller does). Client ids and transactional ids are strings of at most 32767
UTF-8 bytes (a string in Kafka's protocol); a transactional id is never empty (Kafka's
producer config and transaction coordinator refuse one). Clients check names before they
send anything (raising their own typed error) and servers check them again.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Any

from raylog.errors import InvalidGroupIdError, InvalidRequestError, InvalidTopicError, RaylogError

MAX_TOPIC_NAME_LENGTH = 249
#: The longest string Kafka's protocol carries (an int16 length): client and transactional ids.
MAX_ID_BYTES = 32_767
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
#: Topics raylog keeps for itself (consumer offsets, transaction states, tiered storage's
#: remote segment metadata); users may read but not create them.
OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_TOPIC = "__transaction_state"
REMOTE_LOG_METADATA_TOPIC = "__remote_log_metadata"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_TOPIC, REMOTE_LOG_METADATA_TOPIC})
#: Longest group id, in bytes of UTF-8: the longest string Kafka's protocol carries (an
#: int16 length), so any group id Kafka accepts is accepted here and no longer one.
MAX_GROUP_ID_BYTES = 32_767
#: The resource name of the cluster-wide default broker configs.
CLUSTER_DEFAULT = ""

logger = logging.getLogger(__name__)

NAMESPACE = "raylog"
#: Where a broker keeps its logs when nothing else is said (``RAYLOG_DATA_DIR``, a node label).
DEFAULT_DATA_DIR = "/tmp/raylog"
#: The Ray resource only the head node has: the controller runs there.
HEAD_RESOURCE = "node:__internal_head__"
#: How long a broker's Kafka listener has to start (its process, then binding its port).
LISTENER_START_TIMEOUT_S = 60.0


def controller_name(cluster_name: str) -> str:
    return f"raylog-controller-{cluster_name}"


def replica_name(cluster_name: str, topic_id: str, partition: int, broker_id: int, node_id: str) -> str:
    """Named by topic id (a topic created again gets new actors) and by the broker's node (a
    broker that comes back on a new Ray node gets new actors there)."""
    return f"raylog-{cluster_name}-{topic_id}-{partition}-b{broker_id}-{node_id[:16]}"


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


def check_group_id(group_id: Any) -> None:
    """Kafka's rule for a group id: a non-empty string (of at most MAX_GROUP_ID_BYTES).

    Raises:
        InvalidGroupIdError: any other value.
    """
    if not isinstance(group_id, str) or not group_id:
        raise InvalidGroupIdError(f"a group id must be a non-empty string, got {group_id!r}")
    if len(group_id.encode("utf-8", "surrogatepass")) > MAX_GROUP_ID_BYTES:
        raise InvalidGroupIdError(f"a group id is at most {MAX_GROUP_ID_BYTES} bytes of UTF-8, got {group_id[:40]!r}…")


def broker_id_of(resource: str) -> int | None:
    """The broker id a resource names (None for the cluster default, "").

    Raises:
        InvalidRequestError: neither "" nor a broker id written as Kafka writes one (ASCII
            digits, no sign or leading zero).
    """
    if resource == CLUSTER_DEFAULT:
        return None
    if not (resource.isascii() and resource.isdigit() and (resource == "0" or resource[0] != "0")):
        raise InvalidRequestError(f'broker resource {resource!r} is not a broker id nor "" (the cluster default)')
    return int(resource)


def check_group_name(group_id: str) -> None:
    """Raises InvalidRequestError for "" (Kafka has no default group resource)."""
    if not group_id:
        raise InvalidRequestError("Default group resources are not allowed: name a group")


def remote_topic_name(topic: str, topic_id: str) -> str:
    """The name a topic's partitions go by in the remote tier and in ``__remote_log_metadata``:
    ``<topic>-<topic id>``, so that a topic deleted and created again under the same name (a new
    topic id) never takes the old one's copies and events for its own, as Kafka keys them by
    TopicIdPartition. The store's directory of a partition is then
    ``<base>/<topic>-<topic id>-<partition>``, of its history
    ``<base>/history/<topic>-<topic id>/partition=<partition>``."""
    return f"{topic}-{topic_id}"
