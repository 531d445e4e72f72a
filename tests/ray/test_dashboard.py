"""The Grafana dashboard in ``dashboards/``: importable as it is (a Prometheus ``datasource``
variable every panel uses, a topic variable, panels on Grafana's 24-column grid), and every
metric its queries name is one that a cluster in use really exports (scraped from Ray's
metrics endpoint after producing, consuming, compacting and throttling)."""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from pathlib import Path

import pytest

from raylog import Consumer, Producer, TopicPartition
from raylog.coordination.quotas import PRODUCER_BYTE_RATE
from tests.helpers import tiered_topic, wait_until
from tests.ray.prometheus import sample_names, scrape

DASHBOARD = Path(__file__).resolve().parents[2] / "dashboards" / "raylog_grafana_dashboard.json"
_METRIC = re.compile(r"\bray_raylog_[a-z0-9_]+")


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def _panels(dashboard: dict) -> list[dict]:
    """Every panel, those inside collapsed rows too."""
    return [p for top in dashboard["panels"] for p in (top, *top.get("panels", ()))]


def _queries(dashboard: dict) -> list[str]:
    """Every PromQL expression: the panels' targets and the template variables' queries."""
    exprs = [t["expr"] for p in _panels(dashboard) for t in p.get("targets", ())]
    variables = dashboard["templating"]["list"]
    return exprs + [v["query"]["query"] for v in variables if v["type"] == "query"]


def test_the_dashboard_is_importable_as_it_is(dashboard):
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["schemaVersion"] >= 36
    assert dashboard["uid"] and dashboard["title"] == "raylog"
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert (variables["datasource"]["type"], variables["datasource"]["query"]) == ("datasource", "prometheus")
    assert variables["topic"]["type"] == "query" and variables["topic"]["includeAll"]
    panels = _panels(dashboard)
    assert len({p["id"] for p in panels}) == len(panels)
    graphs = [p for p in panels if p["type"] != "row"]
    assert graphs
    for panel in graphs:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        targets = panel["targets"]
        assert targets and len({t["refId"] for t in targets}) == len(targets), panel["title"]
        assert all(t["datasource"]["uid"] == "${datasource}" and t["expr"] for t in targets), panel["title"]
    for panel in panels:
        box = panel["gridPos"]
        assert box["x"] >= 0 and box["w"] > 0 and box["x"] + box["w"] <= 24 and box["h"] > 0, panel["title"]
    uses_topic = [p["title"] for p in graphs if any('topic=~"$topic"' in t["expr"] for t in p["targets"])]
    assert len(uses_topic) >= len(graphs) // 2


def test_every_metric_the_dashboard_queries_is_exported(cluster, admin, topic, dashboard):
    """Each ``ray_raylog_*`` name in a panel's or variable's query is in a real scrape
    (histograms' names as ``_bucket``, ``_sum`` or ``_count``, as the queries write them)."""
    needed = {name for expr in _queries(dashboard) for name in _METRIC.findall(expr)}
    assert {"ray_raylog_produce_latency_seconds_bucket", "ray_raylog_consumer_lag"} <= needed

    plain = topic(1)
    with Producer(cluster, acks="all") as producer:
        for i in range(20):
            producer.send(plain, b"m%d" % i)
    with Consumer(cluster, plain, group_id=f"dashboard-{plain}", auto_offset_reset="earliest") as consumer:
        read = 0
        for _ in range(60):  # bounded: a poll waits at most 1 s
            read += sum(len(r) for r in consumer.poll(timeout_ms=1_000).values())
            if read == 20:
                break
        assert read == 20

    # A compacted topic of 1 KiB segments, each batch of its own: the cleaner has rounds to run.
    compacted = topic(1, **{"cleanup.policy": "compact", "segment.bytes": "1024", "min.cleanable.dirty.ratio": "0.01"})
    with Producer(cluster, acks=1, linger_ms=0) as producer:
        for i in range(40):
            producer.send(compacted, b"v" * 100, key=b"k%d" % (i % 3)).result(timeout=30)

    # A producer over a small quota until a leader holds a response back.
    client = f"dashboard-{uuid.uuid4().hex[:8]}"
    admin.alter_client_quotas({client: {PRODUCER_BYTE_RATE: 10_000}})
    try:
        with Producer(cluster, client_id=client, acks=1, linger_ms=0) as producer:
            for _ in range(200):
                producer.send(plain, b"q" * 5_000).result(timeout=30)
                if producer.throttle_time_ms > 0:
                    break
            assert producer.throttle_time_ms > 0
    finally:
        admin.alter_client_quotas({client: {PRODUCER_BYTE_RATE: None}})

    # A tiered topic whose history a consumer reads: copies, the copier's gauges, remote reads.
    tiered = f"dashboard-tiered-{uuid.uuid4().hex[:6]}"
    with tiered_topic(cluster, admin, tiered, records=200) as sent:
        with Consumer(cluster, auto_offset_reset="earliest") as consumer:
            consumer.assign([TopicPartition(tiered, 0)])
            got = 0
            for _ in range(60):  # bounded: a poll waits at most 1 s
                got += sum(len(r) for r in consumer.poll(timeout_ms=1_000).values())
                if got == len(sent):
                    break
            assert got == len(sent)
    missing: set[str] = set(needed)

    def all_exported() -> bool:
        left = needed - sample_names(scrape())
        missing.clear()
        missing.update(left)
        return not left

    with contextlib.suppress(AssertionError):  # (the assertion below names what is missing)
        wait_until(all_exported, timeout_s=120, interval_s=1.0, message="every metric the dashboard queries")
    assert missing == set()
