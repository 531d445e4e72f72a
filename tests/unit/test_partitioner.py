"""Kafka-compatible partitioning: murmur2 vectors from Kafka's UtilsTest, sticky partitions."""

from __future__ import annotations

import random

import pyarrow as pa

from raylog.clients.partitioner import DefaultPartitioner, murmur2, partition_for_key

# Expected values from Apache Kafka's clients UtilsTest.testMurmur2.
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def test_murmur2_matches_kafka():
    """murmur2 gives Kafka's own test values, so keys land on Kafka's partitions."""
    for key, expected in KAFKA_VECTORS.items():
        assert murmur2(key) == expected, key
    assert partition_for_key(b"foobar", 6) == (-790332482 & 0x7FFFFFFF) % 6


def test_sticky_partition_moves_only_when_its_batch_closes():
    """Unkeyed records stay on one partition until its batch is sent, then move elsewhere."""
    partitioner = DefaultPartitioner(random.Random(1))
    first = partitioner("t", None, 4)
    assert all(partitioner("t", None, 4) == first for _ in range(100))
    partitioner.on_batch_closed("t", first, 4)
    assert partitioner("t", None, 4) != first
    assert partitioner("t", b"foobar", 4) == partition_for_key(b"foobar", 4)


def test_partitions_for_arrow_keys_match_single_keys():
    """The columnar path agrees with per-key hashing, including null keys (-1)."""
    keys = [b"user-%d" % (i % 7) for i in range(50)] + [None]
    partitioner = DefaultPartitioner()
    got = partitioner.partitions_for_keys(pa.array(keys, pa.binary()), 5).tolist()
    assert got == [partition_for_key(k, 5) if k is not None else -1 for k in keys]
