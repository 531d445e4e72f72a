"""The consumer's settings, checked before anything is asked of the cluster (Kafka's
ConsumerConfig): each refused with an :class:`InvalidConfigError` naming it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from raylog.common.assignors import ASSIGNORS
from raylog.common.group_protocol import SERVER_ASSIGNORS
from raylog.common.names import check_group_id, validate_client_id, validate_topic_name
from raylog.common.requests import MAX_READ_BYTES, READ_COMMITTED, READ_UNCOMMITTED
from raylog.errors import InvalidConfigError

#: Consumer(isolation_level=...) values and the fetch's isolation level each asks for.
ISOLATION_LEVELS = {"read_uncommitted": READ_UNCOMMITTED, "read_committed": READ_COMMITTED}
#: The group protocols a consumer may join by (Kafka's group.protocol).
GROUP_PROTOCOLS = ("classic", "consumer")
#: fetch_max_bytes at most (an int32 in Kafka's protocol).
MAX_FETCH_BYTES = 2**31 - 1
#: The settings that are positive integers (fetch_max_wait_ms may also be 0).
POSITIVE_SETTINGS = (
    "fetch_min_bytes",
    "fetch_max_wait_ms",
    "max_partition_fetch_bytes",
    "fetch_max_bytes",
    "max_poll_records",
    "request_timeout_ms",
    "auto_commit_interval_ms",
    "session_timeout_ms",
    "heartbeat_interval_ms",
    "metadata_max_age_ms",
    "retry_backoff_ms",
)


def check_config(config: dict[str, Any], topics: Iterable[str]) -> tuple[str, ...]:
    """Refuse a bad setting among ``config`` (the Consumer's keywords) or a bad topic name.

    Returns:
        The partition assignment strategies, in order of preference.

    Raises:
        InvalidConfigError, InvalidTopicError, InvalidGroupIdError.
    """
    for name in topics:
        validate_topic_name(name)
    if config["auto_offset_reset"] not in ("earliest", "latest", "none"):
        raise InvalidConfigError(
            f"auto_offset_reset must be earliest, latest or none, got {config['auto_offset_reset']!r}"
        )
    for name in POSITIVE_SETTINGS:
        value = config[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < (1 if name != "fetch_max_wait_ms" else 0):
            raise InvalidConfigError(f"{name} must be a positive integer, got {value!r}")
    strategy = config["partition_assignment_strategy"]
    strategies = (strategy,) if isinstance(strategy, str) else tuple(strategy)
    if not strategies or any(s not in ASSIGNORS for s in strategies):
        raise InvalidConfigError(f"partition_assignment_strategy must be among {sorted(ASSIGNORS)}")
    if config["max_partition_fetch_bytes"] > MAX_READ_BYTES or config["fetch_max_bytes"] > MAX_FETCH_BYTES:
        raise InvalidConfigError(
            f"max_partition_fetch_bytes must be at most {MAX_READ_BYTES} and fetch_max_bytes at most "
            f"{MAX_FETCH_BYTES}, got {config['max_partition_fetch_bytes']} and {config['fetch_max_bytes']}"
        )
    validate_client_id(config["client_id"], InvalidConfigError)
    if config["heartbeat_interval_ms"] >= config["session_timeout_ms"]:
        raise InvalidConfigError("heartbeat_interval_ms must be lower than session_timeout_ms")
    max_poll_interval_ms = config["max_poll_interval_ms"]
    if max_poll_interval_ms is not None and (isinstance(max_poll_interval_ms, bool) or max_poll_interval_ms < 1):
        raise InvalidConfigError(
            f"max_poll_interval_ms must be a positive integer or None, got {max_poll_interval_ms!r}"
        )
    if config["group_protocol"] not in GROUP_PROTOCOLS:
        raise InvalidConfigError(f"group_protocol must be one of {GROUP_PROTOCOLS}, got {config['group_protocol']!r}")
    assignor = config["group_remote_assignor"]
    if assignor is not None and assignor not in SERVER_ASSIGNORS:
        raise InvalidConfigError(
            f"group_remote_assignor must be among {sorted(SERVER_ASSIGNORS)} or None, not {assignor!r}"
        )
    if config["group_id"] is not None:
        check_group_id(config["group_id"])
    if config["isolation_level"] not in ISOLATION_LEVELS:
        raise InvalidConfigError(
            f"isolation_level must be one of {sorted(ISOLATION_LEVELS)}, got {config['isolation_level']!r}"
        )
    return strategies
