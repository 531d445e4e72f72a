"""Kafka's "offline data load" on Spark, written as a Spark user writes it for Kafka: a whole
topic into a DataFrame with the Kafka source's columns and options (one read task per
partition, through RayDP), Parquet out, and orders per customer back into a topic with the
Kafka sink's DataFrame shape.

Run: ``.venv/bin/python examples/spark_batch_load.py`` (needs raylog's spark extra and JDK 17)
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid

import pyarrow as pa
import raydp

import raylog
import raylog_spark
from raylog import Admin, NewTopic, Producer


def main() -> None:
    data_dir = tempfile.mkdtemp(prefix="raylog-example-")
    cluster = raylog.connect(data_dir=data_dir, cluster_name=f"example-{uuid.uuid4().hex[:8]}")
    try:
        Admin(cluster).create_topics([NewTopic("orders", 3), NewTopic("orders-per-customer", 3)])
        keys = [b"customer-%d" % (i % 100) for i in range(50_000)]
        with Producer(cluster) as producer:
            producer.send_arrow("orders", pa.table({"key": keys, "value": [b"%d" % (i % 97) for i in range(50_000)]}))
        spark = raylog_spark.init_spark("batch-load")
        try:
            # As spark.read.format("kafka").option("subscribe", "orders").option(...).load()
            df = raylog_spark.read_topic(
                spark, subscribe="orders", startingOffsets="earliest", endingOffsets="latest", cluster=cluster
            )
            df.groupBy("partition").count().orderBy("partition").show()
            out = os.path.join(data_dir, "orders.parquet")
            df.selectExpr(
                "partition", "offset", "timestamp", "CAST(key AS STRING) key", "CAST(value AS STRING) value"
            ).write.parquet(out)
            print(f"wrote {spark.read.parquet(out).count():,} rows to {out}")
            # As df.write.format("kafka").option("topic", "orders-per-customer").save(): key, value.
            counts = df.groupBy("key").count().selectExpr("key", "CAST(`count` AS STRING) value")
            written = raylog_spark.write_topic(counts, "orders-per-customer", cluster=cluster)
            print(f"wrote {written:,} customers' order counts to orders-per-customer")
        finally:
            raydp.stop_spark()
    finally:
        cluster.shutdown()
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
