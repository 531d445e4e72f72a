"""The producer's ProducerMetadata (partitions and batch capacity per topic) and how
send_arrow cuts a table into batches (arrow_batches), each on its own (no Ray)."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pyarrow as pa
import pytest

from raylog.clients.cluster import Metadata
from raylog.clients.partitioner import DefaultPartitioner, partition_for_key
from raylog.clients.producer import arrow_batches
from raylog.clients.producer.producer_metadata import ProducerMetadata
from raylog.clients.producer.record_accumulator import RECORD_OVERHEAD_BYTES
from raylog.common import record_batch
from raylog.errors import InvalidTopicError, RecordTooLargeError, UnknownTopicOrPartitionError
from raylog.types import TopicPartition


def snapshot(partitions: dict[str, int], config: dict | None = None) -> Metadata:
    topics = {t: SimpleNamespace(partitions=list(range(n)), config=config or {}) for t, n in partitions.items()}
    return Metadata(
        {"cluster_id": "c", "brokers": {}, "topics": topics, "leaders": {}, "live": set(), "reassignments": {}}
    )


class Snapshots:
    """A cluster handle whose metadata is the last snapshot given (``refreshed`` one on refresh)."""

    def __init__(self, current: Metadata, refreshed: Metadata | None = None):
        self.current, self.refreshed, self.refreshes = current, refreshed, 0

    def metadata(self, refresh: bool = False) -> Metadata:
        if refresh:
            self.refreshes += 1
            self.current = self.refreshed or self.current
        return self.current

    def missing_topics_error(self, topics):
        return UnknownTopicOrPartitionError(f"no {topics}")


def test_a_topic_is_read_once_per_snapshot_and_an_unknown_one_after_one_refresh():
    cluster = Snapshots(snapshot({"a": 2}), refreshed=snapshot({"a": 3, "b": 1}))
    metadata = ProducerMetadata(cluster, max_request_size=1 << 20, codec=0)
    partitions, capacity = metadata.route("a")
    assert partitions == [TopicPartition("a", 0), TopicPartition("a", 1)]
    assert capacity == record_batch.records_capacity(1 << 20, 0)
    assert metadata.route("a")[0] is partitions and cluster.refreshes == 0
    assert metadata.num_partitions("b") == 1 and cluster.refreshes == 1  # unknown: refreshed once
    assert metadata.num_partitions("a") == 3 and metadata.routed_partitions("a") == 3  # the new snapshot's
    with pytest.raises(UnknownTopicOrPartitionError):
        metadata.route("c")
    with pytest.raises(InvalidTopicError):
        metadata.route("no/such name")


def test_a_batch_holds_the_smaller_of_max_request_size_and_the_topics_max_message_bytes():
    cluster = Snapshots(snapshot({"small": 1}, {"max.message.bytes": "2000"}))
    assert ProducerMetadata(cluster, 1 << 20, 0).limit("small") == 2000
    assert ProducerMetadata(cluster, 1_000, 0).limit("small") == 1_000
    metadata = ProducerMetadata(cluster, 1 << 20, 0)
    metadata.require_fits_alone("small", record_batch.binary_of([b"x" * 1_000]))
    with pytest.raises(RecordTooLargeError, match="'small'"):
        metadata.require_fits_alone("small", record_batch.binary_of([b"x" * 3_000]))


def rows_of(values: list, keys: list | None = None) -> dict:
    table = pa.table({"value": values, **({"key": keys} if keys is not None else {})})
    return arrow_batches.columns_of(table, "key", "value", None, None)


def test_unkeyed_rows_fill_one_batch_per_partition_in_turn_and_the_next_call_goes_on_after():
    partitioner = DefaultPartitioner(random.Random(1))
    partitioner.stick_to("t", 2)
    rows = rows_of([b"x" * 84] * 10)  # 100 bytes each in buffer memory
    batches = list(arrow_batches.split(partitioner, "t", rows, 3, None, capacity=1 << 20, buffer_memory=400))
    assert [part for part, _ in batches] == [2, 0, 1]
    assert [len(chunk[0]["values"]) for _, chunk in batches] == [4, 4, 2]
    assert [chunk[1] for _, chunk in batches] == [400, 400, 200]
    assert partitioner("t", None, 3) == 2  # the partition after the last one used
    given = list(arrow_batches.split(partitioner, "t", rows, 3, 1, capacity=1 << 20, buffer_memory=400))
    assert {part for part, _ in given} == {1}


def test_keyed_rows_go_to_their_keys_partitions_and_null_keys_to_the_sticky_one():
    partitioner = DefaultPartitioner(random.Random(1))
    partitioner.stick_to("t", 0)
    keys = [b"a", b"b", None, b"a", b"c"]
    rows = rows_of([b"1", b"2", b"3", b"4", b"5"], keys)
    got = {}
    for part, (chunk, size, _) in arrow_batches.split(partitioner, "t", rows, 4, None, 1 << 20, 1 << 20):
        got.setdefault(part, []).extend(chunk["keys"].to_pylist())
        assert size == sum(len(k or b"") + 1 + RECORD_OVERHEAD_BYTES for k in chunk["keys"].to_pylist())
    expected: dict[int, list] = {}
    for key in keys:
        expected.setdefault(0 if key is None else partition_for_key(key, 4), []).append(key)
    assert got == expected


def test_chunks_keep_each_batch_within_its_capacity_and_a_row_over_it_alone():
    rows = rows_of([b"x" * 10, b"x" * 10, b"x" * 500, b"x" * 10])
    bounds = arrow_batches.row_bounds(rows)
    capacity = int(bounds[0] * 2)
    chunks = list(arrow_batches.chunks(rows, capacity, buffer_memory=1 << 20))
    assert [len(chunk["values"]) for chunk, _, _ in chunks] == [2, 1, 1]
    assert [bound for _, _, bound in chunks] == [capacity, int(bounds[2]), int(bounds[3])]


def test_columns_must_be_binary_and_headers_of_the_record_batch_type():
    with pytest.raises(TypeError, match="'value'"):
        arrow_batches.columns_of(pa.table({"value": [1, 2]}), "key", "value", None, None)
    table = pa.table({"value": [b"a"], "h": [[("k", b"v")]]})
    with pytest.raises(TypeError, match="headers must be of type"):
        arrow_batches.columns_of(table, "key", "value", None, "h")
    chunked = pa.table({"value": pa.chunked_array([[b"a"], [b"b"]])})
    assert isinstance(arrow_batches.columns_of(chunked, "key", "value", None, None)["values"], pa.Array)
