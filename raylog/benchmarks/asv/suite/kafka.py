"""kafka_bench's quick form (20,000 records of 100 B, 1 partition, RF1, acks=1): Kafka
clients over raylog's Kafka listener against raylog's own clients in the same process:
confluent-kafka's one-at-a-time produce + flush against raylog's ``send().result()``, its
producer against raylog's ``send()`` per record, its consumer against raylog's ``poll()``."""

from __future__ import annotations

from . import MILLION, SAMPLES, TIMEOUT_S, Samples, add, embedded_cluster, figure, row_named


def measure() -> Samples:
    from raylog.benchmarks import kafka_bench

    samples: Samples = {}
    with embedded_cluster("raylog-history-kafka-", config=kafka_bench.CLUSTER_CONFIG) as (cluster, _):
        kafka_bench.ship_actors()
        runner = kafka_bench.Runner(cluster, kafka_bench.QUICK)
        try:
            for _ in range(SAMPLES):
                runner.rows = []
                runner.one_at_a_time()
                runner.throughput(1)
                rows = runner.rows
                raylog_one = row_named(rows, "raylog Producer send().result()")
                confluent_one = row_named(rows, "confluent-kafka produce() + flush()")
                raylog_send = row_named(rows, "raylog Producer send() per record")
                confluent_send = row_named(rows, "confluent-kafka produce(), linger.ms=5, acks=1, reports of failures")
                raylog_poll = row_named(rows, "raylog Consumer poll()")
                confluent_poll = row_named(rows, "confluent-kafka consume(")
                add(samples, "raylog_send_result_p50", raylog_one.p50_ms / 1000)
                add(samples, "confluent_produce_flush_p50", confluent_one.p50_ms / 1000)
                add(samples, "confluent_produce_flush_p50_vs_raylog", confluent_one.p50_ms / raylog_one.p50_ms)
                for name, row in (
                    ("raylog_send", raylog_send),
                    ("confluent_produce", confluent_send),
                    ("raylog_poll", raylog_poll),
                    ("confluent_consume", confluent_poll),
                ):
                    add(samples, f"{name}_s_per_1m", MILLION / row.records_per_s)
                add(
                    samples,
                    "confluent_produce_vs_raylog_send",
                    raylog_send.records_per_s / confluent_send.records_per_s,
                )
                add(
                    samples,
                    "confluent_consume_vs_raylog_poll",
                    raylog_poll.records_per_s / confluent_poll.records_per_s,
                )
        finally:
            runner.delete_all()
    return samples


class Kafka:
    """Seconds per million records or of a p50 round trip, and a Kafka client's time over
    raylog's own client's (``_vs_raylog``)."""

    timeout = TIMEOUT_S

    def setup_cache(self) -> Samples:
        return measure()

    setup_cache.timeout = TIMEOUT_S

    track_confluent_produce_flush_p50 = figure("confluent_produce_flush_p50")
    track_confluent_produce_flush_p50_vs_raylog = figure("confluent_produce_flush_p50_vs_raylog", "ratio")
    track_confluent_produce_s_per_1m = figure("confluent_produce_s_per_1m")
    track_confluent_produce_vs_raylog_send = figure("confluent_produce_vs_raylog_send", "ratio")
    track_confluent_consume_s_per_1m = figure("confluent_consume_s_per_1m")
    track_confluent_consume_vs_raylog_poll = figure("confluent_consume_vs_raylog_poll", "ratio")
    track_raylog_send_result_p50 = figure("raylog_send_result_p50")
    track_raylog_send_s_per_1m = figure("raylog_send_s_per_1m")
    track_raylog_poll_s_per_1m = figure("raylog_poll_s_per_1m")
