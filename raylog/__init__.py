"""raylog: a distributed, partitioned, replicated commit log on Ray, with Kafka's design.

Example:
    >>> import raylog                                                   # doctest: +SKIP
    >>> from raylog import Producer, Consumer, Admin, NewTopic, TopicPartition
    >>> cluster = raylog.connect()                                      # doctest: +SKIP

The client names load lazily, so ``import raylog.storage`` (plain Python) does not import Ray.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "Admin": "raylog.clients.admin",
    "Consumer": "raylog.clients.consumer",
    "Producer": "raylog.clients.producer",
    "RaylogCluster": "raylog.clients.cluster",
    "connect": "raylog.clients.cluster",
    "ConfigEntry": "raylog.types",
    "NewTopic": "raylog.types",
    "OffsetAndMetadata": "raylog.types",
    "OffsetAndTimestamp": "raylog.types",
    "Record": "raylog.types",
    "RecordMetadata": "raylog.types",
    "TopicPartition": "raylog.types",
    "transactional_copy": "raylog.clients.exactly_once",
}
__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'raylog' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
