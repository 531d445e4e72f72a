"""Where a read's ranges start and end: offset specs, and the offsets they name.

Where a range starts or ends is an :data:`OffsetSpec`: one for all partitions, a dict
``{partition: spec}`` (one topic), or ``{topic: {partition: spec}}`` as ``read_kafka`` has it;
partitions left out start at "earliest" and end at "latest". A spec is:

- ``"earliest"`` (the log start offset) or ``"latest"`` (the high watermark; the last stable
  offset for read_committed reads, the default);
- an ``int`` offset;
- a :class:`datetime.datetime`, or ``Timestamp(timestamp_ms)``: the first offset whose record
  timestamp is at or after it (the high watermark if none is). Given as ``start_offset`` /
  ``end_offset`` (``read_kafka``'s names), a datetime without a time zone is UTC, as
  ``read_kafka`` reads it; given as ``start`` / ``end`` (raylog's names), it needs a time zone;
- ``Committed(group_id)``: the group's committed offset (``reset`` where it has none).

Resolving specs (:func:`_resolve`) is shared by the source's bounded reads and the stream's
first positions; so are the two look-ups every piece makes, a cluster handle from an address
(:func:`_cluster`) and the partitions of topics (:func:`_partitions`).
"""

from __future__ import annotations

import datetime
from typing import Any, NamedTuple

import numpy as np

import raylog
from raylog.clients.cluster import RaylogCluster
from raylog.clients.consumer import Consumer
from raylog.clients.security import security_settings
from raylog.errors import InvalidConfigError, OffsetOutOfRangeError, UnknownTopicOrPartitionError
from raylog.types import TopicPartition


class Timestamp(NamedTuple):
    """A point in time in milliseconds since the epoch, as an :data:`OffsetSpec`."""

    timestamp_ms: int


class Committed(NamedTuple):
    """A consumer group's committed offsets, as an :data:`OffsetSpec`.

    Args:
        group_id: the group whose commits to use.
        reset: where a partition the group never committed starts: "earliest" or "latest".
    """

    group_id: str
    reset: str = "earliest"


#: Where a range starts or ends, for one partition.
PartitionSpec = str | int | datetime.datetime | Timestamp | Committed
#: Where ranges start or end: one spec for every partition, a dict by partition number (one
#: topic), or a dict by topic of dicts by partition number (``read_kafka``'s form); partitions
#: missing from a dict use the default: "earliest" for a start, "latest" for an end.
OffsetSpec = PartitionSpec | dict[int, PartitionSpec] | dict[str, dict[int, PartitionSpec]]


# --- resolving offset specs ---------------------------------------------------------------


def _cluster(cluster: RaylogCluster | str | None) -> RaylogCluster:
    """A cluster handle from a handle, a Ray address, or None (``raylog.connect()``)."""
    if isinstance(cluster, RaylogCluster):
        return cluster
    if cluster is None or isinstance(cluster, str):
        return raylog.connect(cluster)
    raise InvalidConfigError(f"cluster must be a RaylogCluster, a Ray address or None, got {cluster!r}")


def _partitions(
    cluster: RaylogCluster, topics: list[str], client_config: dict[str, Any] | None = None
) -> list[TopicPartition]:
    """The partitions of ``topics``, described as the user that ``client_config`` (a read's
    consumer_config, a write's producer_config) names by its security settings, if it does
    (else the handle's): the user of the tasks, who may describe other topics.

    Raises:
        UnknownTopicOrPartitionError, TopicAuthorizationFailedError: as Admin.describe_topics.
    """
    descriptions = raylog.Admin(cluster, **security_settings(client_config or {})).describe_topics(topics)
    return [TopicPartition(d.name, p.partition) for d in descriptions for p in d.partitions]


def _specs(spec: OffsetSpec, partitions: list[TopicPartition], default: str) -> dict[TopicPartition, PartitionSpec]:
    """Each partition's spec (``default`` where a dict leaves it out).

    Raises:
        InvalidConfigError: a dict of neither form, by partition with several topics, or
            naming a topic that is not read.
        UnknownTopicOrPartitionError: a dict naming a partition that does not exist.
    """
    if not isinstance(spec, dict):
        return {tp: spec for tp in partitions}
    topics = list(dict.fromkeys(tp.topic for tp in partitions))
    if all(isinstance(k, str) for k in spec):
        by_topic = spec
    elif all(_is_offset(k) for k in spec):
        if len(topics) != 1:
            raise InvalidConfigError(
                f"offsets by partition name no topic; with several topics give {{topic: {{partition: spec}}}}: {spec!r}"
            )
        by_topic = {topics[0]: spec}
    else:
        raise InvalidConfigError(f"offsets by partition or by topic, not both: {spec!r}")
    out = {tp: default for tp in partitions}
    for topic, by_partition in by_topic.items():
        if topic not in topics:
            raise InvalidConfigError(f"offsets name topic {topic!r}, which is not read ({topics})")
        if not isinstance(by_partition, dict) or not all(_is_offset(p) for p in by_partition):
            raise InvalidConfigError(f"offsets of {topic!r} must be a dict by partition number, got {by_partition!r}")
        for partition, one in by_partition.items():
            tp = TopicPartition(topic, int(partition))
            if tp not in out:
                raise UnknownTopicOrPartitionError(f"{topic} has no partition {partition}")
            out[tp] = one
    return out


def _groups(specs: dict[TopicPartition, PartitionSpec]) -> set[str]:
    """The groups whose commits ``specs`` name."""
    return {s.group_id for s in specs.values() if isinstance(s, Committed)}


class _Bounds:
    """Each partition's log start offset and high watermark, looked up once."""

    def __init__(self, consumer: Consumer, partitions: list[TopicPartition]):
        self.log_start = consumer.beginning_offsets(partitions)
        self.high_watermark = consumer.end_offsets(partitions)

    def check(self, offsets: dict[TopicPartition, int]) -> None:
        """Every offset within ``[log start offset, high watermark]`` of its partition."""
        for tp, offset in offsets.items():
            if not self.log_start[tp] <= offset <= self.high_watermark[tp]:
                raise OffsetOutOfRangeError(
                    f"{tp.topic}-{tp.partition}: offset {offset} is outside "
                    f"[{self.log_start[tp]}, {self.high_watermark[tp]}]"
                )


def _resolve(
    consumer: Consumer, bounds: _Bounds, specs: dict[TopicPartition, PartitionSpec]
) -> dict[TopicPartition, int]:
    """The offset each partition's spec names."""
    out: dict[TopicPartition, int] = {}
    kinds: dict[str, list[TopicPartition]] = {}
    for tp, one in specs.items():
        kinds.setdefault(_kind(one), []).append(tp)
    for kind, tps in kinds.items():
        if kind == "earliest":
            out.update({tp: bounds.log_start[tp] for tp in tps})
        elif kind == "latest":
            out.update({tp: bounds.high_watermark[tp] for tp in tps})
        elif kind == "offset":
            out.update({tp: int(specs[tp]) for tp in tps})
        elif kind == "time":
            found = consumer.offsets_for_times({tp: _timestamp_ms(specs[tp]) for tp in tps})
            out.update({tp: found[tp].offset if found[tp] is not None else bounds.high_watermark[tp] for tp in tps})
        else:
            committed = consumer.committed(tps)
            for tp in tps:
                reset = specs[tp].reset
                if committed[tp] is not None:
                    out[tp] = committed[tp].offset
                else:
                    out[tp] = bounds.log_start[tp] if reset == "earliest" else bounds.high_watermark[tp]
    return out


def _is_offset(value: Any) -> bool:
    """An integer (NumPy's too), not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _kind(spec: Any) -> str:
    """What ``spec`` names: "earliest", "latest", "offset", "time" or "committed".

    Raises:
        InvalidConfigError: not a spec."""
    if isinstance(spec, str) and spec in ("earliest", "latest"):
        return spec
    if _is_offset(spec):
        if spec < 0:
            raise InvalidConfigError(f"offsets are >= 0, got {spec}")
        return "offset"
    if isinstance(spec, (datetime.datetime, Timestamp)):
        _timestamp_ms(spec)
        return "time"
    if isinstance(spec, Committed):
        if spec.reset not in ("earliest", "latest"):
            raise InvalidConfigError(f"Committed.reset must be 'earliest' or 'latest', got {spec.reset!r}")
        return "committed"
    raise InvalidConfigError(
        f"not an offset spec: {spec!r} (expected 'earliest', 'latest', an offset, a datetime, "
        "Timestamp(ms), Committed(group_id), or a dict of those by partition or by topic and partition)"
    )


def _timestamp_ms(spec: datetime.datetime | Timestamp) -> int:
    if isinstance(spec, Timestamp):
        if not _is_offset(spec.timestamp_ms) or spec.timestamp_ms < 0:
            raise InvalidConfigError(f"timestamps are integer ms >= 0, got {spec.timestamp_ms!r}")
        return int(spec.timestamp_ms)
    if spec.tzinfo is None:
        raise InvalidConfigError(
            f"a datetime given as start or end needs a time zone (naive times are ambiguous; "
            f"as start_offset / end_offset it is UTC): {spec!r}"
        )
    return int(spec.timestamp() * 1000)
