"""Spark reads a tiered topic (KIP-405) whole, with Spark's Kafka-source columns: its old
records from the topic's Parquet history when it keeps one (no remote read by the broker),
else from the remote tier through the broker."""

from __future__ import annotations

import uuid

import pytest
import ray

import raylog_spark
from tests.helpers import only_replica, tiered_topic


@pytest.mark.parametrize("history", ["true", "false"])
@pytest.mark.parametrize("via", raylog_spark.READ_PATHS)
def test_spark_reads_every_record_of_a_tiered_topic_from_offset_0(cluster, admin, spark, via, history):
    name = f"tiered-spark-{uuid.uuid4().hex[:6]}"
    with tiered_topic(cluster, admin, name, records=300, **{"remote.storage.history.enable": history}) as sent:
        leader = only_replica(cluster, name)
        before = ray.get(leader.state.remote())["tiering"]["remote_fetches"]
        rows = (
            raylog_spark.read_topic(spark, name, includeHeaders="true", cluster=cluster, via=via)
            .orderBy("offset")
            .collect()
        )
        remote_read = ray.get(leader.state.remote())["tiering"]["remote_fetches"] > before
    assert remote_read == (history == "false"), "the history files were not read (or the remote tier was)"
    assert [r["offset"] for r in rows] == list(range(len(sent)))
    assert [(bytes(r["key"]), bytes(r["value"])) for r in rows] == [(k, v) for k, v, _, _ in sent]
    assert [[(h["key"], bytes(h["value"])) for h in r["headers"]] for r in rows] == [h for _, _, _, h in sent]
