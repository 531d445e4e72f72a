"""The Kafka listener benchmark (``raylog/benchmarks/kafka_bench.py``) at tiny sizes on
``kafka_cluster``: every measurement gives its row, the ratios are taken against the
baselines of the same run, and the tables print. Never how fast anything is.
"""

from __future__ import annotations

import pytest

from raylog.benchmarks import kafka_bench
from raylog.benchmarks.common import BenchError

TINY = kafka_bench.Scale("tiny", repeats=1, records=2_000, round_trips=30, partitions=(1,), timeout_s=60.0)

LATENCY_ROWS = (
    "baseline: bare Ray actor call",
    "baseline: TCP round trip on loopback",
    "raylog Producer send().result()",
    "confluent-kafka produce() + flush()",
    "kafka-python send().get()",
)
THROUGHPUT_ROWS = (
    "raylog Producer send() per record",
    "confluent-kafka produce(), linger.ms=5, acks=1, reports of failures only",
    "confluent-kafka produce(), linger.ms=5, acks=1, every delivery report",
    "raylog Consumer poll() -> Records",
    "confluent-kafka consume(",
)
CONVERSION_ROWS = ("values: (a) to_raylog", "values: (a) to_kafka", "values: bytes copy")


def _row(rows: list, prefix: str):
    found = [r for r in rows if r.name.startswith(prefix)]
    assert len(found) == 1, f"one row named {prefix!r}... expected, got {[r.name for r in rows]}"
    return found[0]


@pytest.fixture(scope="module")
def measured(kafka_cluster, bootstrap):
    """The benchmark's rows on the listener cluster (``bootstrap``: every listener is up)."""
    return kafka_bench.measure(kafka_cluster, TINY)


def test_every_measurement_gives_a_row_without_error(measured):
    assert [(r.name, r.error) for r in measured if r.error] == []
    for prefix in LATENCY_ROWS:
        assert _row(measured, prefix).section == "latency"
    for prefix in THROUGHPUT_ROWS:
        assert _row(measured, prefix).section == "throughput"
    for prefix in CONVERSION_ROWS:
        row = _row(measured, prefix)
        assert row.section == "conversion" and row.records_per_s > 0 and row.ratio > 0


def test_latency_rows_are_percentiles_and_ratios_to_raylog_send_result(measured):
    baseline = _row(measured, "raylog Producer send().result()").p50_ms
    for prefix in LATENCY_ROWS:
        row = _row(measured, prefix)
        assert 0 < row.p50_ms <= row.p99_ms <= row.max_ms
        if prefix.startswith("raylog"):
            assert row.ratio is None  # the baseline itself
        else:
            assert row.ratio == pytest.approx(row.p50_ms / baseline)
    target = _row(measured, "confluent-kafka produce() + flush()")
    assert [str(t) for t in target.targets] == ["<= 1.30x"] and target.result in ("PASS", "BELOW")


def test_throughput_rows_count_records_and_compare_with_raylog_in_the_same_run(measured):
    pairs = (
        (
            "raylog Producer send() per record",
            "confluent-kafka produce(), linger.ms=5, acks=1, reports of failures only",
        ),
        ("raylog Consumer poll() -> Records", "confluent-kafka consume("),
    )
    for baseline_name, kafka_name in pairs:
        baseline, kafka = _row(measured, baseline_name), _row(measured, kafka_name)
        assert baseline.ratio == 1.0 and baseline.records_per_s > 0
        assert kafka.ratio == pytest.approx(kafka.records_per_s / baseline.records_per_s)
        assert kafka.mb_per_s == pytest.approx(kafka.records_per_s * kafka_bench.VALUE_BYTES / 1e6)
        assert [str(t) for t in kafka.targets] == [">= 2.00x"] and kafka.result in ("PASS", "BELOW")
        assert f"{TINY.records:,}" in kafka.note
    every = _row(measured, "confluent-kafka produce(), linger.ms=5, acks=1, every delivery report")
    assert not every.targets and every.records_per_s > 0  # an extra row: the target is the other one's


def test_a_cluster_without_listeners_is_refused_with_the_reason(cluster):
    """The session's own cluster runs no Kafka listener: nothing is measured."""
    with pytest.raises(BenchError, match="runs no Kafka listener"):
        kafka_bench.measure(cluster, TINY)


def test_the_report_prints_every_row(measured, capsys):
    kafka_bench.print_report(measured, TINY)
    out = capsys.readouterr().out
    assert out.startswith("raylog Kafka listener benchmark, tiny mode")
    for header in ("p50 x raylog", "x raylog", "x floor", "target", "result"):
        assert header in out
    for row in measured:
        assert row.name in out
