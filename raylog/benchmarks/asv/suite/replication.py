"""replication_bench's throughput rows: ``send_arrow`` of 100 B records to a 1-partition
topic of replication factor 3 with acks=all (min.insync.replicas=2) against one of
replication factor 1 with acks=1, alternating, on an embedded cluster of 3 brokers."""

from __future__ import annotations

from . import CHEAP_SAMPLES, MILLION, TIMEOUT_S, Samples, add, embedded_cluster, figure

#: Records per sample (replication_bench's full count; its quick 20,000 take ~10 ms).
RECORDS = 500_000


def measure() -> Samples:
    from raylog import Admin, NewTopic
    from raylog.benchmarks import client_bench, replication_bench

    work = client_bench.make_workload(replication_bench.VALUE_BYTES, RECORDS)
    warm = client_bench.make_workload(replication_bench.VALUE_BYTES, 1_000)
    timeout_s = replication_bench.QUICK.timeout_s
    samples: Samples = {}
    with embedded_cluster(
        "raylog-history-replication-",
        num_brokers=replication_bench.NUM_BROKERS,
        config=replication_bench.CONTROLLER_CONFIG,
    ) as (cluster, _):
        rf1, rf3 = "history-rf1", "history-rf3"
        Admin(cluster).create_topics(
            [
                NewTopic(rf1, 1, replication_factor=1),
                NewTopic(rf3, 1, replication_factor=3, config=dict(replication_bench.SAFE_TOPIC)),
            ],
            wait_for_leaders_ms=60_000,
        )
        # Untimed: the followers start after the leaders, and acks=all waits for them.
        client_bench.timed_produce(cluster, rf3, warm, "arrow", timeout_s, acks="all")
        for _ in range(CHEAP_SAMPLES):
            one, _ = client_bench.timed_produce(cluster, rf1, work, "arrow", timeout_s, acks=1)
            three, _ = client_bench.timed_produce(cluster, rf3, work, "arrow", timeout_s, acks="all")
            add(samples, "rf1_acks_1_send_arrow_s_per_1m", one / RECORDS * MILLION)
            add(samples, "rf3_acks_all_send_arrow_s_per_1m", three / RECORDS * MILLION)
            add(samples, "rf3_vs_rf1", three / one)
    return samples


class Replication:
    """Seconds per million records, and RF3 acks=all's time over RF1 acks=1's (``rf3_vs_rf1``)."""

    timeout = TIMEOUT_S

    def setup_cache(self) -> Samples:
        return measure()

    setup_cache.timeout = TIMEOUT_S

    track_rf1_acks_1_send_arrow_s_per_1m = figure("rf1_acks_1_send_arrow_s_per_1m")
    track_rf3_acks_all_send_arrow_s_per_1m = figure("rf3_acks_all_send_arrow_s_per_1m")
    track_rf3_vs_rf1 = figure("rf3_vs_rf1", "ratio")
