"""raylog: a distributed, partitioned, replicated commit log on Ray, with Kafka's design.

Example:
    >>> import raylog                                                   # doctest: +SKIP
    >>> from raylog import Producer, Consumer, Admin, NewTopic, TopicPartition
    >>> from raylog import KafkaError, KafkaTimeoutError                # kafka-python's names
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
    "ConsumerRebalanceListener": "raylog.clients.group",
    "Producer": "raylog.clients.producer",
    "RaylogCluster": "raylog.clients.cluster",
    "connect": "raylog.clients.cluster",
    "AlterConfigOp": "raylog.types",
    "ConfigEntry": "raylog.types",
    "ConfigResource": "raylog.types",
    "ConfigResourceType": "raylog.types",
    "NewPartitions": "raylog.types",
    "NewTopic": "raylog.types",
    "OffsetAndMetadata": "raylog.types",
    "OffsetAndTimestamp": "raylog.types",
    "OffsetSpec": "raylog.types",
    "Record": "raylog.types",
    "RecordMetadata": "raylog.types",
    "TIMESTAMP_CREATE_TIME": "raylog.types",
    "TIMESTAMP_LOG_APPEND_TIME": "raylog.types",
    "TopicPartition": "raylog.types",
    "transactional_copy": "raylog.clients.exactly_once",
    # ACLs (Kafka's AclBinding and its parts), for Admin.create_acls / describe_acls / delete_acls.
    "ACL": "raylog.common.acl",
    "ACLFilter": "raylog.common.acl",
    "ACLOperation": "raylog.common.acl",
    "ACLPermissionType": "raylog.common.acl",
    "PatternType": "raylog.common.acl",
    "ResourcePattern": "raylog.common.acl",
    "ResourcePatternFilter": "raylog.common.acl",
    "ResourceType": "raylog.common.acl",
    # The errors a client most often catches (every one is in raylog.errors), by raylog's
    # and kafka-python's names.
    "CommitFailedError": "raylog.errors",
    "IllegalStateError": "raylog.errors",
    "InvalidConfigError": "raylog.errors",
    "KafkaError": "raylog.errors",
    "KafkaTimeoutError": "raylog.errors",
    "NoOffsetForPartitionError": "raylog.errors",
    "NotLeaderForPartitionError": "raylog.errors",
    "NotLeaderOrFollowerError": "raylog.errors",
    "ProducerFencedError": "raylog.errors",
    "RaylogError": "raylog.errors",
    "RecordTooLargeError": "raylog.errors",
    "TopicAlreadyExistsError": "raylog.errors",
    "UnknownTopicOrPartitionError": "raylog.errors",
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
