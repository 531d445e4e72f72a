"""Kafka's "offline data load" on Spark: a whole topic into a DataFrame through RayDP, one
read task per partition, then Parquet.

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
        Admin(cluster).create_topics([NewTopic("orders", 3)])
        keys = [b"customer-%d" % (i % 100) for i in range(50_000)]
        with Producer(cluster) as producer:
            producer.send_arrow("orders", pa.table({"key": keys, "value": [b"%d" % (i % 97) for i in range(50_000)]}))
        spark = raylog_spark.init_spark("batch-load")
        try:
            df = raylog_spark.read_topic(spark, "orders", cluster=cluster)
            df.groupBy("partition").count().orderBy("partition").show()
            out = os.path.join(data_dir, "orders.parquet")
            df.selectExpr(
                "partition", "offset", "cast(key as string) key", "cast(value as string) value"
            ).write.parquet(out)
            print(f"wrote {spark.read.parquet(out).count():,} rows to {out}")
        finally:
            raydp.stop_spark()
    finally:
        cluster.shutdown()
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
