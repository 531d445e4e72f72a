"""spark_bench's quick form (100,000 records of 100 B in 6 partitions): Ray Data's
``read_topic`` against one Consumer's ``poll_arrow`` of the same partitions, and Spark
(RayDP) aggregating the topic by both read paths against ``spark.read.parquet`` of a
Parquet copy of the same records; one Spark session, every round in it."""

from __future__ import annotations

import dataclasses

from . import MILLION, SAMPLES, TIMEOUT_S, Samples, add, embedded_cluster, figure


def measure() -> Samples:
    from raylog.benchmarks import spark_bench

    scale = dataclasses.replace(spark_bench.QUICK, repeats=1, rounds=SAMPLES)
    records = scale.records
    samples: Samples = {}
    with embedded_cluster("raylog-history-spark-") as (cluster, workdir):
        runner = spark_bench.Runner(cluster, scale, workdir)
        try:
            runner.fill()
            for _ in range(SAMPLES):
                runner.ray_data()
            runner.spark()
        finally:
            runner.delete()
    failed = [r for r in runner.rows if r.error]
    if failed:
        raise RuntimeError(f"{failed[0].name}: {failed[0].error}")
    ray_data = [r for r in runner.rows if r.section == "ray data"]
    spark = [r for r in runner.rows if r.section == "spark"]
    for consumer, read, first in zip(ray_data[0::3], ray_data[1::3], ray_data[2::3], strict=True):
        add(samples, "consumer_poll_arrow_6p_s_per_1m", consumer.seconds / records * MILLION)
        add(samples, "ray_data_read_s_per_1m", read.seconds / records * MILLION)
        add(samples, "ray_data_vs_consumer", read.seconds / consumer.seconds)
        add(samples, "ray_data_first_block", first.seconds)
    for parquet, executors, via_ray_data in zip(spark[0::3], spark[1::3], spark[2::3], strict=True):
        add(samples, "parquet_s_per_1m", parquet.seconds / records * MILLION)
        add(samples, "spark_read_topic_s_per_1m", executors.seconds / records * MILLION)
        add(samples, "spark_read_topic_vs_parquet", executors.seconds / parquet.seconds)
        add(samples, "spark_via_ray_data_s_per_1m", via_ray_data.seconds / records * MILLION)
        add(samples, "spark_via_ray_data_vs_parquet", via_ray_data.seconds / parquet.seconds)
    return samples


class Spark:
    """Seconds per million records, the first block's seconds, and each read's time over its
    floor's (a Consumer for Ray Data, the Parquet read for Spark)."""

    timeout = TIMEOUT_S

    def setup_cache(self) -> Samples:
        return measure()

    setup_cache.timeout = TIMEOUT_S

    track_ray_data_read_s_per_1m = figure("ray_data_read_s_per_1m")
    track_ray_data_vs_consumer = figure("ray_data_vs_consumer", "ratio")
    track_ray_data_first_block = figure("ray_data_first_block")
    track_spark_read_topic_s_per_1m = figure("spark_read_topic_s_per_1m")
    track_spark_read_topic_vs_parquet = figure("spark_read_topic_vs_parquet", "ratio")
    track_spark_via_ray_data_s_per_1m = figure("spark_via_ray_data_s_per_1m")
    track_spark_via_ray_data_vs_parquet = figure("spark_via_ray_data_vs_parquet", "ratio")
    track_floor_consumer_poll_arrow_6p_s_per_1m = figure("consumer_poll_arrow_6p_s_per_1m")
    track_floor_parquet_s_per_1m = figure("parquet_s_per_1m")
