"""A partition's records as Arrow columns: the consumer's labelled table, Spark's Kafka source
rows (headers null where none, in sliced and chunked columns), each record's timestamp type
from its batch (no Ray)."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa

from raylog.common import kafka_columns, record_batch
from raylog.types import TopicPartition


def fetched_headers(i: int) -> list[tuple[str, bytes]]:
    return [(f"k{i}", b"%d" % i)] * (i % 3 == 0) + [("x", b"")] * (i % 5 == 0)


def test_rows_null_only_the_headers_of_records_without_any_in_sliced_and_chunked_columns():
    """Spark's Kafka source has null headers for a record without any; raylog's reads give
    empty lists, in chunks that may be slices of a larger fetch. Each record keeps its own
    headers, whatever its chunk's offset into the fetch's buffers."""
    n = 40
    batch = record_batch.build([b"v"] * n, keys=[b"k"] * n, headers=[fetched_headers(i) for i in range(n)])
    fetched = kafka_columns.labelled(TopicPartition("t", 0), record_batch.decode_table(batch))
    assert fetched.schema.equals(kafka_columns.ARROW_SCHEMA)
    read = pa.concat_tables([fetched.slice(0, 7), fetched.slice(7, 20), fetched.slice(27, 0), fetched.slice(27)])
    assert read.column("headers").num_chunks == 4
    kinds = record_batch.arrow_of(np.zeros(n, dtype=np.int32))

    headers = kafka_columns.kafka_rows(read, kinds, include_headers=True).column("headers").to_pylist()

    assert [None if h is None else [(e["key"], e["value"]) for e in h] for h in headers] == [
        fetched_headers(i) or None for i in range(n)
    ]


def test_null_headers_stay_null_and_a_column_without_empty_lists_is_kept_as_it_is():
    """Null headers stay null; a chunk with no empty list is returned unchanged."""
    none = kafka_columns.HEADERS_TYPE
    mixed = pa.chunked_array([record_batch.headers_of([None, [], [("a", b"1")], None, []]).slice(1)], none)
    assert kafka_columns.null_when_empty(mixed).to_pylist() == [None, [{"key": "a", "value": b"1"}], None, None]
    full = pa.chunked_array([record_batch.headers_of([[("a", b"1")], None])], none)
    kept = kafka_columns.null_when_empty(full).chunk(0)
    assert kept.equals(full.chunk(0)) and kept.buffers()[1].address == full.chunk(0).buffers()[1].address


def test_rows_have_sparks_kafka_source_schema_and_microsecond_timestamps():
    """kafka_rows: Spark's column order and types, timestamps widened from ms to us (UTC), the
    given timestampType per record; no headers column without include_headers; an empty
    read is an empty table of the schema."""
    batch = record_batch.build([b"a", b"b"], keys=[None, b"k"], timestamps_ms=[1_700_000_000_123, 5])
    read = kafka_columns.labelled(TopicPartition("clicks", 2), record_batch.decode_table(batch))
    kinds = record_batch.arrow_of(np.array([0, 1], dtype=np.int32))
    rows = kafka_columns.kafka_rows(read, kinds, include_headers=False)
    assert rows.schema.equals(kafka_columns.kafka_arrow_schema()) and rows.schema.names == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
    ]
    assert rows.column("timestamp").cast(pa.int64()).to_pylist() == [1_700_000_000_123_000, 5_000]
    assert rows.column("timestampType").to_pylist() == [0, 1] and rows.column("topic").to_pylist() == ["clicks"] * 2
    empty = kafka_columns.kafka_rows(read.slice(0, 0), kinds.slice(0, 0), include_headers=True)
    assert empty.num_rows == 0 and empty.schema.equals(kafka_columns.kafka_arrow_schema(include_headers=True))


def test_timestamp_types_by_offset_match_each_batchs_range():
    """timestamp_type_values marks exactly the offsets inside the stamped batches' ranges
    (checked against a loop over the ranges), for random ranges, gaps and offsets."""
    rng = random.Random(5)
    for _ in range(200):
        ranges, at = [], rng.randint(0, 5)
        for _ in range(rng.randint(1, 6)):
            first = at + rng.randint(0, 4)
            at = first + rng.randint(0, 6)
            ranges.append((first, at))
            at += 1
        offsets = np.array(sorted(rng.sample(range(at + 5), rng.randint(0, at + 5))), dtype=np.int64)
        expected = [int(any(a <= o <= b for a, b in ranges)) for o in offsets.tolist()]
        got = kafka_columns.timestamp_type_values(offsets, ranges)
        assert got.dtype == np.int32 and got.tolist() == expected
    assert kafka_columns.timestamp_type_values(np.arange(3), True).tolist() == [1, 1, 1]
    assert kafka_columns.timestamp_type_values(np.arange(2), None).tolist() == [0, 0]


def test_kafka_source_rows_read_back_as_the_consumers_rows_in_chunks():
    """Spark's rows (a history file's) become the consumer's again: the same records, offsets,
    millisecond timestamps and headers (null where none), across chunks."""
    n = 30
    batch = record_batch.build(
        [b"v%d" % i for i in range(n)],
        keys=[b"k"] * n,
        timestamps_ms=[1_700_000_000_000 + 7 * i for i in range(n)],
        headers=[fetched_headers(i) or None for i in range(n)],
    )
    fetched = kafka_columns.labelled(TopicPartition("t", 3), record_batch.decode_table(batch))
    kinds = record_batch.arrow_of(np.zeros(n, dtype=np.int32))
    rows = kafka_columns.kafka_rows(fetched, kinds, include_headers=True)
    chunked = pa.concat_tables([rows.slice(0, 11), rows.slice(11)])

    back = kafka_columns.consumer_rows(chunked)

    assert back.schema.equals(kafka_columns.ARROW_SCHEMA)
    expected = kafka_columns.kafka_rows(fetched, kinds, include_headers=True)
    assert back.drop_columns(["headers"]).equals(fetched.drop_columns(["headers"]))
    assert back.column("headers").to_pylist() == expected.column("headers").to_pylist()
    assert kafka_columns.consumer_rows(rows.slice(0, 0)).num_rows == 0
