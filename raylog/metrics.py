"""raylog's metrics, through ``ray.util.metrics`` (so they reach Prometheus and the Ray
dashboard with Ray's own: every name below is exported as ``ray_<name>``, with Ray's labels
``SessionName``, ``NodeAddress``, ``WorkerId``, ... beside raylog's tags).

Names follow Prometheus' conventions: base units with their suffix (``_seconds``,
``_bytes``), counters end in ``_total``, gauges do not; histograms' buckets are in seconds
(:data:`LATENCY_BUCKETS_S`) and are exported as ``<name>_bucket`` / ``_sum`` / ``_count``.

Per partition replica (tags topic, partition, broker): ``raylog_log_end_offset``,
``raylog_high_watermark``, ``raylog_log_size_bytes``, ``raylog_log_segments``,
``raylog_isr_size`` and ``raylog_under_replicated`` (set by the leader: 1 while the ISR is
smaller than the replica set; a replica that does not lead sets both to 0, so a former
leader's value does not linger); ``raylog_produce_records_total``,
``raylog_produce_bytes_total``, ``raylog_produce_latency_seconds`` (append to
acknowledgement); ``raylog_fetch_bytes_total`` and ``raylog_fetch_latency_seconds`` (tag
``client``: consumer or follower; the latency includes the long-poll wait); the cleaner's
``raylog_cleaner_dirty_ratio``, ``raylog_cleaner_bytes_read_total`` and
``raylog_cleaner_records_removed_total``; ``raylog_broker_throttle_time_seconds`` (tag
``client_type``: producer or consumer; one observation per response that told its client to
hold back for its quota).

Per tiered partition replica (tags topic, partition, broker; see
``raylog.actors.replica_tiering``): ``raylog_remote_copy_segments_total`` and
``raylog_remote_copy_bytes_total`` (segments copied to the remote store), the copier's lag
``raylog_remote_copy_lag_segments`` and ``raylog_remote_copy_lag_bytes`` (closed segments below
the last stable offset not copied yet), ``raylog_remote_delete_segments_total`` and
``raylog_remote_delete_bytes_total`` (remote retention), ``raylog_remote_log_size_bytes`` (what
the store holds of the partition), ``raylog_remote_failures_total`` (tag ``action``: copy,
delete, publish, local_delete, sweep), ``raylog_remote_read_bytes_total`` (bytes fetched from the
store to serve reads below the local log start) and ``raylog_remote_cache_hits_total`` /
``raylog_remote_cache_misses_total`` (tag ``cache``: index or chunk).

Per cluster (controller, tag cluster): ``raylog_brokers_live``,
``raylog_offline_partitions`` and ``raylog_under_replicated_partitions``.

Per consumer (tags group, topic, partition): ``raylog_consumer_lag`` (records between the
consumer's position and the high watermark, from each fetch).

Per client (producers and consumers, tags client_type and client_id):
``raylog_throttle_time_seconds``, one observation per response a leader held back for the
client's quota.

Metric objects are made once per process, on first use.
"""

from __future__ import annotations

import functools
from typing import Any

from ray.util.metrics import Counter, Gauge, Histogram

_PARTITION = ("topic", "partition", "broker")
#: Histogram buckets, seconds: sub-millisecond to the longest long poll (and throttle).
LATENCY_BUCKETS_S = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30]


@functools.cache
def _gauge(name: str, description: str, tags: tuple[str, ...] = _PARTITION) -> Gauge:
    return Gauge(name, description, tag_keys=tags)


class _Counter(Counter):
    """Ray's Counter raises on ``inc(0)``: an empty fetch or a cleaning round that removed
    nothing adds nothing instead."""

    def inc(self, value: float = 1.0, tags: dict[str, str] | None = None) -> None:
        if value > 0:
            super().inc(value, tags)


@functools.cache
def _counter(name: str, description: str, tags: tuple[str, ...] = _PARTITION) -> Counter:
    return _Counter(name, description, tag_keys=tags)


@functools.cache
def _histogram(name: str, description: str, tags: tuple[str, ...]) -> Histogram:
    return Histogram(name, description, boundaries=LATENCY_BUCKETS_S, tag_keys=tags)


def partition_tags(topic: str, partition: int, broker_id: int) -> dict[str, str]:
    return {"topic": topic, "partition": str(partition), "broker": str(broker_id)}


def record_partition_state(tags: dict[str, str], partition: Any) -> None:
    """The gauges of one replica, from its :class:`~raylog.coordination.partition.Partition`."""
    log = partition.log
    _gauge("raylog_log_end_offset", "offset the next appended record gets").set(log.log_end_offset, tags)
    _gauge("raylog_high_watermark", "offset below which records are committed").set(partition.high_watermark, tags)
    _gauge("raylog_log_size_bytes", "bytes of the partition's segments").set(log.size_bytes, tags)
    _gauge("raylog_log_segments", "segments of the partition").set(log.segment_count, tags)
    leads = partition.is_leader
    under = leads and len(partition.isr) < len(partition.replicas)
    _gauge("raylog_isr_size", "in-sync replicas (the leader's view; 0 elsewhere)").set(
        len(partition.isr) if leads else 0, tags
    )
    _gauge("raylog_under_replicated", "1 while the ISR is smaller than the replica set (leader)").set(int(under), tags)


def record_produce(tags: dict[str, str], records: int, size_bytes: int, latency_s: float) -> None:
    _counter("raylog_produce_records_total", "records appended by producers").inc(records, tags)
    _counter("raylog_produce_bytes_total", "bytes appended by producers").inc(size_bytes, tags)
    _histogram("raylog_produce_latency_seconds", "produce call, append to acknowledgement", _PARTITION).observe(
        latency_s, tags
    )


def record_fetch(tags: dict[str, str], follower: bool, size_bytes: int, latency_s: float) -> None:
    tagged = {**tags, "client": "follower" if follower else "consumer"}
    _counter("raylog_fetch_bytes_total", "bytes returned by fetches", (*_PARTITION, "client")).inc(size_bytes, tagged)
    _histogram("raylog_fetch_latency_seconds", "fetch call incl. long-poll wait", (*_PARTITION, "client")).observe(
        latency_s, tagged
    )


def record_cleaning(tags: dict[str, str], stats: Any) -> None:
    """One log-cleaner round (a :class:`~raylog.storage.cleaner.CleanerStats`)."""
    dirty = _gauge("raylog_cleaner_dirty_ratio", "share of the cleanable log not cleaned yet")
    dirty.set(stats.dirty_ratio_after, tags)
    _counter("raylog_cleaner_bytes_read_total", "bytes the cleaner read").inc(stats.bytes_read, tags)
    removed = stats.records_read - stats.records_kept
    _counter("raylog_cleaner_records_removed_total", "records compaction removed").inc(removed, tags)


#: Tiered storage's counters: the pump's (RemoteLogTaskMetrics) and the remote reader's
#: (RemoteReadStats) field -> (metric, its extra tags).
TIERING_COUNTERS: dict[str, tuple[str, dict[str, str]]] = {
    "segments_copied": ("raylog_remote_copy_segments_total", {}),
    "bytes_copied": ("raylog_remote_copy_bytes_total", {}),
    "remote_segments_deleted": ("raylog_remote_delete_segments_total", {}),
    "remote_bytes_deleted": ("raylog_remote_delete_bytes_total", {}),
    "copy_failures": ("raylog_remote_failures_total", {"action": "copy"}),
    "deletion_failures": ("raylog_remote_failures_total", {"action": "delete"}),
    "publish_failures": ("raylog_remote_failures_total", {"action": "publish"}),
    "local_deletion_failures": ("raylog_remote_failures_total", {"action": "local_delete"}),
    "sweep_failures": ("raylog_remote_failures_total", {"action": "sweep"}),
    "remote_bytes_read": ("raylog_remote_read_bytes_total", {}),
    "index_cache_hits": ("raylog_remote_cache_hits_total", {"cache": "index"}),
    "chunk_cache_hits": ("raylog_remote_cache_hits_total", {"cache": "chunk"}),
    "index_cache_misses": ("raylog_remote_cache_misses_total", {"cache": "index"}),
    "chunk_cache_misses": ("raylog_remote_cache_misses_total", {"cache": "chunk"}),
}


def record_tiering(
    tags: dict[str, str], increments: dict[str, int], copy_lag_segments: int, copy_lag_bytes: int, remote_bytes: int
) -> None:
    """One round of a tiered replica's pump: its counters' ``increments`` (by
    :data:`TIERING_COUNTERS`' fields) and its gauges."""
    for field, increment in increments.items():
        name, extra = TIERING_COUNTERS[field]
        _counter(name, f"tiered storage: {name.removeprefix('raylog_remote_')}", (*_PARTITION, *extra)).inc(
            increment, {**tags, **extra}
        )
    _gauge("raylog_remote_copy_lag_segments", "closed segments below the LSO not copied yet").set(
        copy_lag_segments, tags
    )
    _gauge("raylog_remote_copy_lag_bytes", "bytes of the segments not copied yet").set(copy_lag_bytes, tags)
    _gauge("raylog_remote_log_size_bytes", "bytes the remote store holds of the partition").set(remote_bytes, tags)


def record_cluster(cluster: str, live_brokers: int, offline: int, under_replicated: int) -> None:
    tags = {"cluster": cluster}
    _gauge("raylog_brokers_live", "brokers whose node is alive", ("cluster",)).set(live_brokers, tags)
    _gauge("raylog_offline_partitions", "partitions without a live leader", ("cluster",)).set(offline, tags)
    _gauge("raylog_under_replicated_partitions", "partitions whose ISR is short of replicas", ("cluster",)).set(
        under_replicated, tags
    )


def record_consumer_lag(group: str, topic: str, partition: int, lag: int) -> None:
    tags = {"group": group, "topic": topic, "partition": str(partition)}
    gauge = _gauge("raylog_consumer_lag", "records between a consumer's position and the HW", tuple(tags))
    gauge.set(lag, tags)


def record_broker_throttle(tags: dict[str, str], client_type: str, throttle_ms: float) -> None:
    """A response of this replica that told a client to hold back ``throttle_ms`` for its quota
    (``client_type``: producer or consumer; the protocol's unit, exported in seconds)."""
    tagged = {**tags, "client_type": client_type}
    histogram = _histogram(
        "raylog_broker_throttle_time_seconds",
        "throttle time a response told a client over its quota",
        (*_PARTITION, "client_type"),
    )
    histogram.observe(throttle_ms / 1000, tagged)


def record_throttle(client_type: str, client_id: str, throttle_ms: float) -> None:
    """A response a leader held back by ``throttle_ms`` for this client's quota, as the client
    saw it (exported in seconds)."""
    tags = {"client_type": client_type, "client_id": client_id}
    histogram = _histogram("raylog_throttle_time_seconds", "response held back for the client's quota", tuple(tags))
    histogram.observe(throttle_ms / 1000, tags)


def record_authorization_denial(operation: str) -> None:
    """A Kafka request (or a part of one) a listener's authorizer denied (``operation``: the
    ACL operation's name, e.g. READ)."""
    tags = {"operation": operation}
    _counter("raylog_authorization_denials_total", "requests the ACLs denied", tuple(tags)).inc(1, tags)
