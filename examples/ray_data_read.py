"""Topics as Ray Datasets, the way Ray reads and writes any source: ``ray.data.read_datasource``
of a :class:`raylog.data.RaylogDatasource` and ``Dataset.write_datasink`` of a
:class:`raylog.data.RaylogDatasink`; then :func:`raylog.data.read_topic` with the parameters
``ray.data.read_kafka`` takes.

Run: ``.venv/bin/python examples/ray_data_read.py``
"""

from __future__ import annotations

import datetime
import shutil
import tempfile
import uuid

import pyarrow as pa
import pyarrow.compute as pc
import ray

import raylog
from raylog import Admin, NewTopic, Producer
from raylog.data import RaylogDatasink, RaylogDatasource, read_topic


def main() -> None:
    data_dir = tempfile.mkdtemp(prefix="raylog-example-")
    cluster = raylog.connect(data_dir=data_dir, cluster_name=f"example-{uuid.uuid4().hex[:8]}")
    try:
        Admin(cluster).create_topics([NewTopic("views", 4), NewTopic("clicks", 2), NewTopic("views-by-page", 2)])
        pages = [f"/page/{i % 25}".encode() for i in range(100_000)]
        with Producer(cluster) as producer:
            producer.send_arrow("views", pa.table({"key": pa.array(pages, pa.binary()), "value": pages}))
            producer.send_arrow(
                "clicks", pa.table({"key": pa.array(pages[:20_000], pa.binary()), "value": pages[:20_000]})
            )

        # Two topics (six partitions) in one dataset of eight read tasks: the largest partitions
        # are cut into offset ranges of at least min_rows_per_task records.
        source = RaylogDatasource(cluster, ["views", "clicks"], start_offset="earliest", min_rows_per_task=10_000)
        dataset = ray.data.read_datasource(source, override_num_blocks=8, num_cpus=0.25).materialize()
        print(f"{dataset.count():,} records in {dataset.num_blocks()} blocks; columns: {dataset.columns()}")
        print(
            "per topic:", sorted((row["topic"], row["count()"]) for row in dataset.groupby("topic").count().take_all())
        )

        counts = dataset.filter(lambda row: row["topic"] == "views").groupby("key").count()
        top = sorted(counts.take_all(), key=lambda row: -row["count()"])[:3]
        print("most viewed:", [(row["key"].decode(), row["count()"]) for row in top])

        # Back into a topic: one idempotent producer per write task, acks="all".
        as_records = counts.map_batches(
            lambda t: pa.table({"key": t["key"], "value": pc.cast(pc.cast(t["count()"], pa.string()), pa.binary())}),
            batch_format="pyarrow",
        )
        sink = RaylogDatasink(cluster, "views-by-page", producer_config={"acks": "all"})
        as_records.write_datasink(sink)
        print(f"wrote {sink.records_written} per-page counts to views-by-page")

        # read_kafka's parameters: offsets per topic and partition, or times (naive = UTC).
        ends = {tp.partition: end for tp, (_, end) in source.ranges.items() if tp.topic == "views"}
        starts = {"views": {partition: max(0, end - 10) for partition, end in ends.items()}}
        print(
            "the last 10 records of each views partition:",
            read_topic("views", start_offset=starts, cluster=cluster).count(),
        )
        an_hour_ago = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None) - datetime.timedelta(hours=1)
        recent = read_topic(["views", "clicks"], start_offset=an_hour_ago, cluster=cluster)
        print(f"records of the last hour: {recent.count():,}")
    finally:
        cluster.shutdown()
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
