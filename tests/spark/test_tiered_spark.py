"""Spark reads a tiered topic (KIP-405) whole: its old records from the remote tier, through
the brokers, with Spark's Kafka-source columns."""

from __future__ import annotations

import uuid

import pytest

import raylog_spark
from tests.helpers import tiered_topic


@pytest.mark.parametrize("via", raylog_spark.READ_PATHS)
def test_spark_reads_every_record_of_a_tiered_topic_from_offset_0(cluster, admin, spark, via):
    name = f"tiered-spark-{uuid.uuid4().hex[:6]}"
    with tiered_topic(cluster, admin, name, records=300) as sent:
        rows = (
            raylog_spark.read_topic(spark, name, includeHeaders="true", cluster=cluster, via=via)
            .orderBy("offset")
            .collect()
        )
    assert [r["offset"] for r in rows] == list(range(len(sent)))
    assert [(bytes(r["key"]), bytes(r["value"])) for r in rows] == [(k, v) for k, v, _, _ in sent]
    assert [[(h["key"], bytes(h["value"])) for h in r["headers"]] for r in rows] == [h for _, _, _, h in sent]
