"""Kafka 4's dynamic group configs (KIP-848's GROUP config resources, type 32): what a
consumer group may set for itself, checked against the broker's bounds.

A group resource (named by its group id; "" is refused, as Kafka refuses a default group
resource) holds ``consumer.session.timeout.ms`` and ``consumer.heartbeat.interval.ms``:
its members of Kafka's consumer protocol get them in place of the broker's
``group.consumer.session.timeout.ms`` / ``group.consumer.heartbeat.interval.ms`` (each
config's broker synonym, :data:`BROKER_SYNONYMS`). As in Kafka's GroupConfigManager:

- any other name is refused (INVALID_CONFIG, "Unknown group config name"); Kafka 4's
  ``share.*`` configs are among them, raylog having no share groups;
- the group's configs over the broker's values must hold: each value an integer of at least
  1 within the broker's ``group.consumer.min/max.session.timeout.ms`` and
  ``group.consumer.min/max.heartbeat.interval.ms``, and the session timeout above the
  heartbeat interval (INVALID_CONFIG otherwise);
- a group's configs need no group: they may be set before its first member comes, and
  DeleteGroups leaves them (they are the controller's metadata, not the group's state).

Pure functions over plain dicts; :class:`~raylog.coordination.metadata.MetadataImage` keeps
the configs in its journal, the group coordinators apply them
(:class:`~raylog.coordination.consumer_group.ConsumerGroups`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..errors import InvalidConfigError
from .consumer_group import ConsumerGroupConfig

SESSION_TIMEOUT = "consumer.session.timeout.ms"
HEARTBEAT_INTERVAL = "consumer.heartbeat.interval.ms"
#: Group config -> the broker setting that is its default (Kafka's names).
BROKER_SYNONYMS: dict[str, str] = {name: f"group.{name}" for name in (SESSION_TIMEOUT, HEARTBEAT_INTERVAL)}
#: Group config -> the field of :class:`ConsumerGroupConfig` it overrides.
_FIELDS = {name: synonym.replace(".", "_") for name, synonym in BROKER_SYNONYMS.items()}
#: The built-in defaults of the broker settings.
_BUILT_IN = ConsumerGroupConfig()
#: The broker's bounds: (group config, the broker setting bounding it, whether from below).
_BOUNDS = (
    (SESSION_TIMEOUT, "group.consumer.min.session.timeout.ms", True),
    (SESSION_TIMEOUT, "group.consumer.max.session.timeout.ms", False),
    (HEARTBEAT_INTERVAL, "group.consumer.min.heartbeat.interval.ms", True),
    (HEARTBEAT_INTERVAL, "group.consumer.max.heartbeat.interval.ms", False),
)


def alter(
    current: Mapping[str, str], changes: Mapping[str, Any], broker: ConsumerGroupConfig, *, incremental: bool
) -> dict[str, str]:
    """A group's new configs after ``changes`` (a value sets, None deletes: back to the
    broker's; not incremental, ``changes`` replaces the whole set), validated over the
    broker's settings ``broker`` as Kafka validates them.

    Raises:
        InvalidConfigError: an unknown name, a value that is not an integer of at least 1,
            outside the broker's bounds, a session timeout not above the heartbeat interval,
            or an append / subtract (no group config is a list).
    """
    configs = dict(current) if incremental else {}
    for name, change in changes.items():
        if name not in BROKER_SYNONYMS:
            raise InvalidConfigError(f"Unknown group config name: {name!r} (a group sets {', '.join(BROKER_SYNONYMS)})")
        if isinstance(change, tuple):
            raise InvalidConfigError(f"{name} is not a list config: it cannot be appended to or subtracted from")
        if change is None:
            configs.pop(name, None)
        else:
            configs[name] = str(_integer(name, change))
    effective(broker, configs)
    return configs


def effective(broker: ConsumerGroupConfig, configs: Mapping[str, str]) -> ConsumerGroupConfig:
    """The settings a group's members get: the broker's, with the group's ``configs``.

    Raises:
        InvalidConfigError: they break the broker's bounds (see :func:`alter`).
    """
    settings = replace(broker, **{_FIELDS[name]: int(value) for name, value in configs.items()})
    for name, setting, lower in _BOUNDS:
        value, bound = getattr(settings, _FIELDS[name]), getattr(broker, setting.replace(".", "_"))
        if value < bound if lower else value > bound:
            relation = "greater than or equal to" if lower else "less than or equal to"
            raise InvalidConfigError(f"{name} ({value}) must be {relation} {setting} ({bound})")
    session, interval = settings.group_consumer_session_timeout_ms, settings.group_consumer_heartbeat_interval_ms
    if session <= interval:
        raise InvalidConfigError(
            f"{SESSION_TIMEOUT} ({session}) must be greater than {HEARTBEAT_INTERVAL} ({interval})"
        )
    return settings


def synonyms(name: str, configs: Mapping[str, str], broker: ConsumerGroupConfig) -> list[tuple[str, str, str]]:
    """Where group config ``name``'s value could come from, the one in force first:
    ``(config, value, source)``, source "group" (the group's own), "static_broker" (the
    broker's setting, given when the cluster started) or "default" (the built-in one), as
    Kafka 4 lists a group config's synonyms."""
    field, synonym = _FIELDS[name], BROKER_SYNONYMS[name]
    found = [(name, configs[name], "group")] if name in configs else []
    built_in = getattr(_BUILT_IN, field)
    if getattr(broker, field) != built_in:
        found.append((synonym, str(getattr(broker, field)), "static_broker"))
    found.append((synonym, str(built_in), "default"))
    return found


def _integer(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise InvalidConfigError(f"{name} must be an integer, got {value!r}")
    try:
        number = int(value)
    except ValueError:
        raise InvalidConfigError(f"{name} must be an integer, got {value!r}") from None
    if not 1 <= number < 2**31:
        raise InvalidConfigError(f"{name} must be in [1, {2**31 - 1}], got {number}")
    return number
