"""latency_trace's end-to-end figures: 100 B records at 1,000 a second for one second
(``linger_ms=0``, acks=1, RF1) from this process to a consumer in a Ray actor, send to
receipt (``e2e``) and send to acknowledgement (``ack``), against a bare Ray actor call
(a no-op method of a threaded actor, as a replica is) timed in the same process."""

from __future__ import annotations

import numpy as np

from . import SAMPLES, TIMEOUT_S, Samples, add, embedded_cluster, figure

RATE = 1_000
SECONDS = 1.0
BARE_CALLS = 300


def measure() -> Samples:
    from raylog import Admin, NewTopic
    from raylog.benchmarks import latency_trace

    samples: Samples = {}
    with embedded_cluster("raylog-history-latency-", ship=("raylog.benchmarks.latency_trace",)) as (cluster, _):
        admin = Admin(cluster)
        for number in range(SAMPLES):
            bare_ms = float(np.median(latency_trace.floors(BARE_CALLS)["bare call"]))
            topic = f"history-latency-{number}"
            admin.create_topics([NewTopic(topic, 1, replication_factor=1)], wait_for_leaders_ms=60_000)
            try:
                hops = latency_trace.trace(cluster, topic, RATE, SECONDS, 1)
            finally:
                admin.delete_topics([topic])
            e2e_ms, ack_ms = float(np.median(hops["e2e"])), float(np.median(hops["ack"]))
            add(samples, "bare_call_p50", bare_ms / 1000)
            add(samples, "e2e_p50", e2e_ms / 1000)
            add(samples, "ack_p50", ack_ms / 1000)
            add(samples, "e2e_p50_vs_bare_call", e2e_ms / bare_ms)
            add(samples, "ack_p50_vs_bare_call", ack_ms / bare_ms)
    return samples


class Latency:
    """p50 seconds of one record's trip, and its p50 over a bare Ray call's (``_vs_bare_call``)."""

    timeout = TIMEOUT_S

    def setup_cache(self) -> Samples:
        return measure()

    setup_cache.timeout = TIMEOUT_S

    track_e2e_p50 = figure("e2e_p50")
    track_ack_p50 = figure("ack_p50")
    track_e2e_p50_vs_bare_call = figure("e2e_p50_vs_bare_call", "ratio")
    track_ack_p50_vs_bare_call = figure("ack_p50_vs_bare_call", "ratio")
    track_floor_bare_call_p50 = figure("bare_call_p50")
