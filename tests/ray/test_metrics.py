"""Metrics reach Ray's Prometheus endpoint (what the Ray dashboard and Prometheus scrape)."""

from __future__ import annotations

import re
import urllib.request

import ray

from raylog import Consumer, Producer
from tests.helpers import wait_until


def _scrape() -> str:
    """Every node's exported metrics (Prometheus text format)."""
    texts = []
    for node in ray.nodes():
        if node["Alive"] and node.get("MetricsExportPort"):
            url = f"http://{node['NodeManagerAddress']}:{node['MetricsExportPort']}/metrics"
            with urllib.request.urlopen(url, timeout=10) as response:
                texts.append(response.read().decode())
    return "\n".join(texts)


def _value(text: str, name: str, **tags: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(f"ray_{name}{{") and all(f'{k}="{v}"' in line for k, v in tags.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_partition_producer_and_consumer_metrics_are_exported(cluster, topic):
    name = topic(1)
    with Producer(cluster) as producer:
        for i in range(20):
            producer.send(name, b"m%d" % i)
    consumer = Consumer(cluster, name, group_id=f"metrics-{name}", auto_offset_reset="earliest")
    wait_until(lambda: sum(len(r) for r in consumer.poll(timeout_ms=200).values()) or None, timeout_s=30)
    consumer.close()

    def exported() -> str | None:
        text = _scrape()
        return text if _value(text, "raylog_log_end_offset", topic=name) == 20 else None

    text = wait_until(exported, timeout_s=90, interval_s=1.0, message="raylog_log_end_offset of the topic")
    assert _value(text, "raylog_high_watermark", topic=name) == 20
    assert _value(text, "raylog_log_segments", topic=name) >= 1
    assert _value(text, "raylog_isr_size", topic=name) == 1
    assert _value(text, "raylog_under_replicated", topic=name) == 0
    assert _value(text, "raylog_produce_records_total", topic=name) == 20
    assert re.search(rf'ray_raylog_fetch_latency_ms_bucket{{[^}}]*topic="{re.escape(name)}"', text)
    assert _value(text, "raylog_brokers_live") == 1
    assert _value(text, "raylog_offline_partitions") == 0
    assert _value(text, "raylog_consumer_lag", topic=name) is not None
