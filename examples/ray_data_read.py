"""A topic as a Ray Dataset: one read task per partition, Arrow blocks straight from the log.

Run: ``.venv/bin/python examples/ray_data_read.py``
"""

from __future__ import annotations

import shutil
import tempfile
import uuid

import pyarrow as pa
import pyarrow.compute as pc

import raylog
from raylog import Admin, NewTopic, Producer
from raylog.data import read_topic, write_topic


def main() -> None:
    data_dir = tempfile.mkdtemp(prefix="raylog-example-")
    cluster = raylog.connect(data_dir=data_dir, cluster_name=f"example-{uuid.uuid4().hex[:8]}")
    try:
        Admin(cluster).create_topics([NewTopic("views", 4), NewTopic("views-by-page", 2)])
        pages = [f"/page/{i % 25}".encode() for i in range(100_000)]
        with Producer(cluster) as producer:
            producer.send_arrow("views", pa.table({"key": pa.array(pages, pa.binary()), "value": pages}))
        dataset = read_topic("views", start="earliest", end="latest", cluster=cluster).materialize()
        print(f"{dataset.count():,} records in {dataset.num_blocks()} blocks; columns: {dataset.columns()}")
        counts = dataset.groupby("key").count()
        top = sorted(counts.take_all(), key=lambda row: -row["count()"])[:3]
        print("most viewed:", [(row["key"].decode(), row["count()"]) for row in top])
        as_records = counts.map_batches(
            lambda t: pa.table({"key": t["key"], "value": pc.cast(pc.cast(t["count()"], pa.string()), pa.binary())}),
            batch_format="pyarrow",
        )
        written = write_topic(as_records, "views-by-page", cluster=cluster)
        print(f"wrote {written} per-page counts to views-by-page (idempotent producers in Ray tasks)")
    finally:
        cluster.shutdown()
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
