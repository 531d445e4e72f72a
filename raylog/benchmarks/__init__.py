"""raylog's benchmarks, each against a baseline measured in the same run, and the benchmark
history: every one runs as ``raylog bench <name> [its options]`` (:data:`BENCHMARKS`) or as
``python -m raylog.benchmarks.<module>``; docs/performance.md gives their figures.

:mod:`raylog.benchmarks.perf` holds Kafka's perf tests (``raylog bench produce|consume|e2e``),
whose measuring functions the other benchmarks share; :mod:`raylog.benchmarks.common` the
rest of what they share. The fault campaigns (``raylog bench soak|fuzz-wire|simulate|
txn-copier``) run from :mod:`raylog.chaos`, the fault library the tests use too.

Packages some benchmarks need come with the ``bench`` extra (``pip install 'raylog[bench]'``:
Kafka's clients, Redis, NATS, matplotlib, asv) or the ``spark`` extra; a benchmark
missing one stops before it starts with :class:`raylog.benchmarks.common.MissingExtraError`.
"""

from __future__ import annotations

#: ``raylog bench <name>`` -> (the module under ``raylog.benchmarks`` whose ``main(argv, prog)``
#: runs it, what it measures against what).
BENCHMARKS: dict[str, tuple[str, str]] = {
    "storage": ("storage_bench", "the storage engine's appends and reads against plain file writes and reads (no Ray)"),
    "client": ("client_bench", "Producer and Consumer against a Ray Queue and a bare actor's file writes and reads"),
    "client-profile": ("client_profile", "cProfile listings of the send(), poll() and replica paths"),
    "latency-trace": ("latency_trace", "one record's hops from send() to a consumer, against a bare Ray call"),
    "replication": ("replication_bench", "RF3 acks=all against RF1 acks=1, and fail-over after a leader dies"),
    "fanin": ("fanin_bench", "bursts of 256 acks=all produces at once on one RF3 leader, against a bare actor"),
    "density": ("density_bench", "many partitions per node: start-up, memory, idle CPU, against bare Ray actors"),
    "group": ("group_bench", "consumer group rebalances and group reads, against partitions assigned by hand"),
    "txn": ("txn_bench", "a transactional copier against an at-least-once one, read_committed against uncommitted"),
    "tiered": ("tiered_bench", "a Consumer reading history from the remote tier, against a local log's read"),
    "tiered-history": ("history_bench", "Ray Data / Spark reads of a topic's Parquet history, against read_parquet"),
    "spark": ("spark_bench", "Ray Data and Spark reads of a topic, against a Consumer and spark.read.parquet"),
    "kafka": ("kafka_bench", "Kafka clients over the listeners against raylog's own clients"),
    "kafka-records": ("kafka_records_bench", "Kafka record batch conversion against aiokafka's Cython codec (no Ray)"),
    "security": ("security_bench", "clients with ACLs, SCRAM and TLS against the same workloads without them"),
    "peers": ("peers.__main__", "raylog against Redis Streams, NATS JetStream and Ray's Queue, one workload"),
    "librdkafka": ("librdkafka_suite", "librdkafka's own broker tests against raylog (Kafka conformance)"),
    "history": ("history", "the benchmark history (asv): HEAD against the baseline, from a raylog checkout"),
}
