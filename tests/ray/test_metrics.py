"""Metrics reach Ray's Prometheus endpoint (what the Ray dashboard and Prometheus scrape),
named as Prometheus expects: base units with their suffix, histograms in seconds."""

from __future__ import annotations

from raylog import Consumer, Producer
from tests.helpers import wait_until
from tests.ray.prometheus import metric_types, scrape, value


def test_partition_producer_and_consumer_metrics_are_exported(cluster, topic):
    name = topic(1)
    with Producer(cluster) as producer:
        for i in range(20):
            producer.send(name, b"m%d" % i)
    consumer = Consumer(cluster, name, group_id=f"metrics-{name}", auto_offset_reset="earliest")
    wait_until(lambda: sum(len(r) for r in consumer.poll(timeout_ms=200).values()) or None, timeout_s=30)
    consumer.close()

    def exported() -> str | None:
        # Each process exports on its own period: wait for the replica's gauges and its
        # fetch histogram (observed after the produce) and the consumer's lag.
        text = scrape()
        fetched = value(text, "raylog_fetch_latency_seconds_count", topic=name, client="consumer")
        lag = value(text, "raylog_consumer_lag", topic=name)
        return text if value(text, "raylog_log_end_offset", topic=name) == 20 and fetched and lag is not None else None

    text = wait_until(exported, timeout_s=90, interval_s=1.0, message="the topic's metrics")
    assert value(text, "raylog_high_watermark", topic=name) == 20
    assert value(text, "raylog_log_segments", topic=name) >= 1
    assert value(text, "raylog_isr_size", topic=name) == 1
    assert value(text, "raylog_under_replicated", topic=name) == 0
    assert value(text, "raylog_produce_records_total", topic=name) == 20
    assert value(text, "raylog_fetch_latency_seconds_bucket", topic=name, client="consumer", le="+Inf") >= 1
    assert value(text, "raylog_brokers_live") == 1
    assert value(text, "raylog_offline_partitions") == 0
    assert value(text, "raylog_consumer_lag", topic=name) is not None


def test_metric_names_follow_prometheus_conventions(cluster, topic):
    """Every raylog metric is exported as ``ray_raylog_...``: counters end in ``_total``,
    gauges do not, histograms are in seconds (buckets from half a millisecond), and no name
    is in milliseconds."""
    name = topic(1)
    with Producer(cluster, acks=1) as producer:
        producer.send(name, b"x").result(timeout=30)

    def exported() -> str | None:
        text = scrape()
        return text if value(text, "raylog_produce_latency_seconds_count", topic=name) else None

    text = wait_until(exported, timeout_s=90, interval_s=1.0, message="raylog_produce_latency_seconds of the topic")
    types = {n: t for n, t in metric_types(text).items() if n.startswith("ray_raylog_")}
    assert types["ray_raylog_produce_records_total"] == "counter"
    assert types["ray_raylog_produce_latency_seconds"] == "histogram"
    assert types["ray_raylog_log_size_bytes"] == "gauge"
    assert not [n for n in types if "_ms" in n]
    assert [n for n, t in types.items() if t == "counter" and not n.endswith("_total")] == []
    assert [n for n, t in types.items() if t == "gauge" and n.endswith("_total")] == []
    assert [n for n, t in types.items() if t == "histogram" and not n.endswith("_seconds")] == []
    assert value(text, "raylog_produce_latency_seconds_bucket", topic=name, le="0.0005") is not None
    assert 0 < value(text, "raylog_produce_latency_seconds_sum", topic=name) < 30
