"""Kafka's default partitioning: murmur2 of the key bytes, and sticky partitions for records
without a key (KIP-480), so keyed data lands where a Kafka producer would put it.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raylog.common import record_batch

#: Keys whose partition is remembered; enough for typical key sets, bounded for memory.
KEY_CACHE_ENTRIES = 100_000

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (seed 0x9747b28c) as a signed 32-bit int."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    end = length & ~3
    for i in range(0, end, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    extra = length - end
    if extra == 3:
        h ^= data[end + 2] << 16
    if extra >= 2:
        h ^= data[end + 1] << 8
    if extra >= 1:
        h ^= data[end]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """``toPositive(murmur2(key)) % num_partitions``, as Kafka's default partitioner."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


class DefaultPartitioner:
    """Keyed records by murmur2 (cached per key); unkeyed ones stick to one partition per
    topic until its batch is sent, then move to another (KIP-480 sticky partitioning).

    Concurrency: called under the producer's accumulator lock.
    """

    def __init__(self, rng: random.Random | None = None):
        self._cache: dict[tuple[bytes, int], int] = {}
        self._sticky: dict[str, int] = {}
        self._rng = rng or random.Random()

    def __call__(self, topic: str, key: bytes | None, num_partitions: int) -> int:
        if key is None:
            sticky = self._sticky.get(topic)
            if sticky is None or sticky >= num_partitions:
                sticky = self._sticky[topic] = self._rng.randrange(num_partitions)
            return sticky
        return self._keyed(key, num_partitions)

    def _keyed(self, key: bytes, num_partitions: int) -> int:
        cache_key = (key, num_partitions)
        partition = self._cache.get(cache_key)
        if partition is None:
            if len(self._cache) >= KEY_CACHE_ENTRIES:
                self._cache.clear()
            partition = self._cache[cache_key] = partition_for_key(key, num_partitions)
        return partition

    def on_batch_closed(self, topic: str, partition: int, num_partitions: int) -> None:
        """The sticky partition's batch left: pick another one for unkeyed records."""
        if self._sticky.get(topic) == partition and num_partitions > 1:
            choice = self._rng.randrange(num_partitions - 1)
            self._sticky[topic] = choice + (choice >= partition)

    def stick_to(self, topic: str, partition: int) -> None:
        """Unkeyed records of ``topic`` go to ``partition`` next (a bulk send goes on where the
        previous one stopped, so its batches spread evenly)."""
        self._sticky[topic] = partition

    def partitions_for_keys(self, keys: pa.Array, num_partitions: int) -> np.ndarray:
        """Partition of each key of an Arrow column (-1 for a null key), hashing each
        distinct key once."""
        encoded = pc.dictionary_encode(keys.cast(pa.binary()))
        if isinstance(encoded, pa.ChunkedArray):
            encoded = encoded.combine_chunks()
        by_code = np.array(
            [self._keyed(k, num_partitions) for k in encoded.dictionary.to_pylist()] + [-1], dtype=np.int64
        )
        codes = record_batch.values_or(encoded.indices, len(by_code) - 1)
        return by_code[codes]


#: A custom partitioner: ``(topic, key_bytes or None, num_partitions) -> partition``.
Partitioner = Callable[[str, "bytes | None", int], int]
