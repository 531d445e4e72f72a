"""A partition's history as Parquet: closed segments that raylog's Log wrote (transactions,
markers, LogAppendTime batches, headers, compaction's gaps) turned into rows of Spark's Kafka
source, exactly the records a read_committed consumer reads; written with a manifest to a
local directory as the store, planned and read back by offset range, through a failing store
and a change of leader (no Ray, no sleeps)."""

from __future__ import annotations

import collections
import os
import pickle
import random
import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from raylog.chaos.simulation import ManualClock
from raylog.common import kafka_columns, record_batch
from raylog.common.history_format import (
    HISTORY_SCHEMA,
    MANIFEST_NAME,
    partition_path,
    plan_history_read,
    read_history,
)
from raylog.errors import RemoteResourceNotFoundError, RemoteStorageError
from raylog.storage.history import HistoryWriter, aborted_in, segment_table
from raylog.storage.remote_log_metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata
from raylog.storage.remote_storage import RemoteStorageManager
from raylog.storage.txn_index import AbortedTxn
from tests.unit.object_store import object_names, read_object, write_object
from tests.unit.test_remote_log_reader import START_MS, Writer, tier, write_transactions
from tests.unit.test_remote_storage import FlakyHandler

TOPIC, PARTITION = "clicks", 3
FILE_NAME = re.compile(r"^\d{20}-\d{20}-[0-9a-f-]{36}\.parquet$")


# --- building logs -----------------------------------------------------------------------


def data_batch(rng: random.Random, i: int, **options) -> bytes:
    """Batch ``i``: 1 to 6 records, keys or not, each record's headers none, empty or some;
    one batch in five stamped LogAppendTime (as a leader of such a topic stamps it)."""
    count = rng.randint(1, 6)
    keys = [rng.choice((None, b"k%d" % rng.randint(0, 9))) for _ in range(count)]
    headers = [rng.choice((None, [], [("h", b"%d" % i), ("n", None)])) for _ in range(count)]
    values = [rng.choice((None, os.urandom(rng.choice((3, 80, 400))))) for _ in range(count)]
    timestamps = [START_MS + i * 1_000 + rng.randint(-3_000, 3_000) for _ in range(count)]
    batch = record_batch.build(values, keys=keys, headers=headers, timestamps_ms=timestamps, **options)
    if rng.random() < 0.2:
        view = memoryview(batch)
        batch = bytes(record_batch.with_log_append_time(view, 0, record_batch.read_header(view), START_MS + i))
    return batch


def write_history_log(writer: Writer, seed: int, rounds: int = 160) -> None:
    """Three transactional producers and plain batches interleaved (some stamped with
    LogAppendTime): transactions of one to five batches, most aborted, many open across segment
    boundaries; all ended."""
    write_transactions(writer, seed, rounds, producers=3, longest=5, commit=0.4, batch=data_batch)


@dataclass
class Tiered:
    """A log, its closed segments as remote segments, and each one's history rows."""

    writer: Writer
    segments: list[RemoteLogSegmentMetadata]
    tables: list[pa.Table]
    segment_bytes: list[bytes]


def tiered_log(root, seed: int, **config) -> Tiered:
    writer = Writer(str(root / f"{TOPIC}-{PARTITION}"), ManualClock(), **config)
    if config.get("cleanup.policy") == "compact":
        for i in range(60):
            keys = [b"key-%d" % ((i * 7 + j) % 9) for j in range(2)] + [b"only-%d" % i]  # none emptied
            writer.append(record_batch.build([b"v%d" % i] * 3, keys=keys, timestamps_ms=[START_MS + i] * 3))
        writer.log.roll()
        writer.log.clean(force=True)
        writer.append(record_batch.build([b"tail"], keys=[b"key-0"], timestamps_ms=[START_MS]))
    else:
        write_history_log(writer, seed)
    store = RemoteStorageManager.from_uri(f"file://{root}/remote")
    _, segments = tier(writer, store)
    data = [store.fetch_log_segment(m, 0) for m in segments]
    tables = [segment_table(d, TOPIC, PARTITION, writer.txns.all()) for d in data]
    return Tiered(writer, segments, tables, data)


@pytest.fixture(scope="module")
def tiered(tmp_path_factory):
    made = tiered_log(tmp_path_factory.mktemp("tiered"), seed=11)
    yield made
    made.writer.close()


@pytest.fixture
def history(remote_uri) -> HistoryWriter:
    return HistoryWriter.from_uri(remote_uri)


@pytest.fixture
def flaky(tmp_path):
    """``(history, handler)``: a history over a FlakyHandler; set ``handler.fail`` to break it."""
    handler = FlakyHandler()
    return HistoryWriter(pafs.PyFileSystem(handler), str(tmp_path / "store")), handler


def write_all(history: HistoryWriter, tiered: Tiered) -> None:
    for metadata, table in zip(tiered.segments, tiered.tables, strict=True):
        history.write_segment(metadata, table)


def plan(history: HistoryWriter, start: int, end: int | None = None, partition: int = PARTITION):
    return plan_history_read(history.filesystem, history.base_path, TOPIC, partition, start, end)


# --- what a consumer reads ---------------------------------------------------------------


def consumer_rows(writer: Writer, max_bytes: int = 2_500) -> list[tuple]:
    """The partition as a read_committed consumer reads it, fetch by fetch up to the log end
    (its last stable offset: every transaction ended): the leader's aborted transactions for
    each fetch, the consumer's decoding and timestamp types; headers null where none, as
    Spark's Kafka source has them."""
    log, end = writer.log, writer.log.log_end_offset
    offset, rows = 0, []
    while offset < end:
        data = log.read(offset, max_bytes, max_offset=end)
        headers = list(record_batch.iter_headers(data))
        table = record_batch.decode_table(data, min_offset=offset, aborted=writer.txns.collect(offset, end))
        offsets = np.asarray(table.column("offset").to_pylist(), dtype=np.int64)
        kinds = kafka_columns.timestamp_type_values(offsets, kafka_columns.log_append_time_ranges(headers))
        for record, kind in zip(table.to_pylist(), kinds.tolist(), strict=True):
            pairs = [(h["key"], h["value"]) for h in record["headers"] or ()]
            rows.append((record["key"], record["value"], record["offset"], record["timestamp"], kind, pairs or None))
        offset = max(offset, headers[-1][1].next_offset)
    return rows


def history_rows(table: pa.Table) -> list[tuple]:
    """The same fields of history rows (timestamps back to ms)."""
    assert table.schema.equals(HISTORY_SCHEMA)
    ms = (np.asarray(table.column("timestamp").cast(pa.int64()).to_pylist(), dtype=np.int64) // 1_000).tolist()
    rows = []
    for record, timestamp_ms in zip(table.to_pylist(), ms, strict=True):
        pairs = None if record["headers"] is None else [(h["key"], h["value"]) for h in record["headers"]]
        rows.append((record["key"], record["value"], record["offset"], timestamp_ms, record["timestampType"], pairs))
    return rows


def offsets_of(table: pa.Table) -> list[int]:
    return table.column("offset").to_pylist()


# --- a segment's rows --------------------------------------------------------------------


def test_segment_rows_are_exactly_what_a_read_committed_consumer_reads(tiered):
    """Segment by segment, the rows are the consumer's records of the whole partition, record
    for record: key, value, offset, timestamp, timestampType and headers (null vs a list);
    topic and partition on every row; the log had aborted transactions open across segment
    boundaries, committed ones, LogAppendTime batches and empty header lists."""
    rows = [row for table in tiered.tables for row in history_rows(table)]
    assert rows == consumer_rows(tiered.writer)
    combined = pa.concat_tables(tiered.tables)
    assert set(combined.column("topic").to_pylist()) == {TOPIC}
    assert set(combined.column("partition").to_pylist()) == {PARTITION}
    assert {row[4] for row in rows} == {0, 1} and any(row[5] is None for row in rows)
    ends = [m.end_offset for m in tiered.segments]
    spanning = [t for t in tiered.writer.txns.all() if any(t.first_offset <= end < t.marker_offset for end in ends)]
    assert spanning and len(tiered.segments) >= 8


def test_aborted_records_and_markers_never_appear(tiered):
    """No row is a marker or a record of an aborted transaction, including one whose abort
    marker lies in a later segment; given only the segment's own index entries, such records
    would be kept (which is why a segment takes the later segments' entries too)."""
    aborted = tiered.writer.txns.all()
    dropped, markers = set(), set()
    for data in tiered.segment_bytes:
        for _, header in record_batch.iter_headers(data):
            span = range(header.base_offset, header.next_offset)
            if header.attributes & record_batch.CONTROL:
                markers.update(span)
            elif header.attributes & record_batch.TRANSACTIONAL and any(
                t.producer_id == header.producer_id and t.first_offset <= header.base_offset < t.marker_offset
                for t in aborted
            ):
                dropped.update(span)
    kept = {o for table in tiered.tables for o in offsets_of(table)}
    assert markers and dropped and not kept & (markers | dropped)
    index, metadata = next(
        (i, m)
        for i, m in enumerate(tiered.segments)
        if any(t.first_offset <= m.end_offset < t.marker_offset for t in aborted)
    )
    own = [t for t in aborted if metadata.start_offset <= t.marker_offset <= metadata.end_offset]
    alone = segment_table(tiered.segment_bytes[index], TOPIC, PARTITION, own)
    assert set(offsets_of(alone)) & dropped


def test_entries_that_cannot_touch_a_segment_are_ignored(tiered):
    """An aborted transaction that ended before the segment (its producer's later committed
    batches must stay) or began after it changes nothing."""
    metadata, data = tiered.segments[-1], tiered.segment_bytes[-1]
    header = next(h for _, h in record_batch.iter_headers(data) if not h.attributes & record_batch.CONTROL)
    before = AbortedTxn(header.producer_id, 0, metadata.start_offset - 1)
    after = AbortedTxn(header.producer_id, metadata.end_offset + 1, metadata.end_offset + 5)
    with_them = segment_table(data, TOPIC, PARTITION, [*tiered.writer.txns.all(), before, after])
    assert with_them.equals(tiered.tables[-1])


def test_compaction_gaps_are_kept(tmp_path):
    """A compacted log's segments become rows with the gaps compaction left, as a consumer
    reads them; the files still tile the offsets, so a plan goes through the gaps."""
    compacted = tiered_log(tmp_path, seed=0, **{"cleanup.policy": "compact"})
    try:
        rows = [row for table in compacted.tables for row in history_rows(table)]
        assert rows == consumer_rows(compacted.writer)
        offsets = [row[2] for row in rows]
        assert offsets != list(range(offsets[0], offsets[-1] + 1))
        history = HistoryWriter.from_uri(f"file://{tmp_path}/store")
        write_all(history, compacted)
        whole = plan(history, 0)
        assert whole.history_end_offset == compacted.segments[-1].end_offset + 1
        assert history_rows(read_history(whole)) == rows
    finally:
        compacted.writer.close()


def test_an_empty_segment_is_a_file_without_rows(history):
    """A segment of markers and aborted records alone has no rows; its file still covers its
    range, so plans go on past it."""
    data = record_batch.build([b"x"], producer_id=7, producer_epoch=0, base_sequence=0, transactional=True)
    marker = at(record_batch.build_marker(7, 0, False, 0, now_ms=START_MS), 1)
    table = segment_table(data + marker, TOPIC, PARTITION, [AbortedTxn(7, 0, 1)])
    assert table.num_rows == 0 and table.schema.equals(HISTORY_SCHEMA)
    assert segment_table(b"", TOPIC, PARTITION, []).num_rows == 0
    written = history.write_segment(metadata_for(0, 1), table)
    assert written.record_count == 0 and written.max_timestamp_ms == -1
    rows = segment_table(at(record_batch.build([b"y", b"z"], timestamps_ms=[5, 9]), 2), TOPIC, PARTITION, [])
    history.write_segment(metadata_for(2, 3), rows)
    through = plan(history, 0, 10)
    assert through.history_end_offset == 4 and offsets_of(read_history(through)) == [2, 3]


def at(batch: bytes, base_offset: int) -> bytes:
    """``batch`` as a leader stamps it at ``base_offset``."""
    return record_batch.stamp(record_batch.read_header(batch), base_offset, 0) + batch[record_batch.STAMP.size :]


def metadata_for(start: int, end: int, uuid: str | None = None, partition: int = PARTITION):
    sid = RemoteLogSegmentId(TOPIC, partition, uuid) if uuid else RemoteLogSegmentId.generate(TOPIC, partition)
    return RemoteLogSegmentMetadata(sid, start, end, -1, 1, START_MS, ((0, start),), 0)


# --- writing and reading -----------------------------------------------------------------


def test_written_files_are_laid_out_listed_and_read_back(history, tiered):
    """Each segment is one file <base>/history/<topic>/partition=<p>/<first>-<last>-<uuid>.parquet,
    listed in the manifest with its range, record count, size and max timestamp; a plan of
    everything reads back every row, in order; no temporary file is left."""
    write_all(history, tiered)
    directory = partition_path(history.base_path, TOPIC, PARTITION)
    assert directory == f"{history.base_path}/history/{TOPIC}/partition={PARTITION}"
    names = object_names(history.filesystem, directory)
    assert names[-1] == MANIFEST_NAME and all(FILE_NAME.match(name) for name in names[:-1])
    files = history.manifest(TOPIC, PARTITION).files
    assert len(files) == len(tiered.segments) == len(names) - 1
    for f, metadata, table in zip(files, tiered.segments, tiered.tables, strict=True):
        assert f.name == f"{metadata.start_offset:020d}-{metadata.end_offset:020d}-{metadata.segment_id.id}.parquet"
        assert (f.first_offset, f.last_offset, f.segment_id) == (
            metadata.start_offset,
            metadata.end_offset,
            metadata.segment_id.id,
        )
        assert f.record_count == table.num_rows
        assert f.size_bytes == history.filesystem.get_file_info(f"{directory}/{f.name}").size
        timestamps = table.column("timestamp").cast(pa.int64()).to_pylist()
        assert f.max_timestamp_ms == (max(timestamps) // 1_000 if timestamps else -1)
    whole = plan(history, 0)
    assert whole.files == files and whole.live_start_offset == tiered.segments[-1].end_offset + 1
    assert read_history(whole).equals(pa.concat_tables(tiered.tables))


def test_files_hold_the_exact_schema_in_row_groups_with_offset_statistics(tmp_path, tiered):
    """The Parquet files keep HISTORY_SCHEMA exactly, row groups of at most row_group_rows rows,
    zstd, min/max statistics on offset; a filtered read skips the row groups outside it."""
    history = HistoryWriter.from_uri(f"file://{tmp_path}/store", row_group_rows=4)
    write_all(history, tiered)
    biggest = max(range(len(tiered.tables)), key=lambda i: tiered.tables[i].num_rows)
    f = history.manifest(TOPIC, PARTITION).files[biggest]
    path = f"{partition_path(history.base_path, TOPIC, PARTITION)}/{f.name}"
    parquet = pq.ParquetFile(path)
    assert parquet.schema_arrow.equals(HISTORY_SCHEMA, check_metadata=False)
    meta = parquet.metadata
    assert meta.num_row_groups == -(-f.record_count // 4) >= 3
    column = HISTORY_SCHEMA.get_field_index("offset")
    stats = [meta.row_group(i).column(column).statistics for i in range(meta.num_row_groups)]
    assert all(s.has_min_max for s in stats) and meta.row_group(0).column(column).compression == "ZSTD"
    middle = stats[1]
    fragment = next(ds.dataset(path, format="parquet").get_fragments())
    wanted = (ds.field("offset") >= middle.min) & (ds.field("offset") <= middle.max)
    assert len(fragment.split_by_row_group(wanted)) == 1 < meta.num_row_groups


def test_plans_cover_from_the_start_up_to_the_end_or_a_gap(history, tiered):
    """For starts and ends at file edges, inside files, equal, before the first file and past
    the last: the files a plan names cover [start, history end) without a gap, the history
    ends at the end asked for or where files stop, the live tail starts there, and the rows
    read are exactly those of [start, history end)."""
    write_all(history, tiered)
    last = tiered.segments[-1].end_offset
    edges = sorted({m.start_offset for m in tiered.segments} | {m.end_offset for m in tiered.segments})
    points = sorted({*edges, *(e + 1 for e in edges), *(e + 3 for e in edges), last + 10})
    everything, reads = pa.concat_tables(tiered.tables), 0
    for n, (start, end) in enumerate((s, e) for s in points[::4] for e in [None, *points[::5]] if e is None or e >= s):
        planned = plan(history, start, end)
        expected_end = start if start > last else min(last + 1, end if end is not None else last + 1)
        assert planned.history_end_offset == planned.live_start_offset == expected_end, (start, end)
        covered = [(f.first_offset, f.last_offset) for f in planned.files]
        assert all(a[1] + 1 == b[0] for a, b in zip(covered, covered[1:], strict=False))
        assert not covered or covered[0][0] <= start <= covered[0][1] and covered[-1][1] + 1 >= expected_end
        assert bool(covered) == (start < expected_end)
        if n % 7 == 0 and end is not None and end - start < 40:  # (a read takes ms a file)
            mask = [start <= o < expected_end for o in offsets_of(everything)]
            assert read_history(planned).equals(everything.filter(pa.array(mask))), (start, end)
            reads += 1
    assert reads >= 8
    with pytest.raises(ValueError):
        plan(history, 5, 4)
    with pytest.raises(ValueError):
        plan(history, -1)


def test_a_missing_middle_file_ends_the_historical_part(history, tiered):
    """A range no file covers (a middle segment deleted, or never written) ends the plan at
    its first offset: the rest is read from the brokers; planned from after it, the later
    files serve again. A start below the first file plans nothing."""
    write_all(history, tiered)
    gone = tiered.segments[3]
    history.delete_segment(gone)
    cut = plan(history, 0)
    assert cut.history_end_offset == cut.live_start_offset == gone.start_offset
    assert [f.segment_id for f in cut.files] == [m.segment_id.id for m in tiered.segments[:3]]
    after = plan(history, gone.end_offset + 1)
    assert after.files[0].segment_id == tiered.segments[4].segment_id.id
    history.delete_segment(tiered.segments[0])
    assert plan(history, 0).files == () and plan(history, 0, 50).live_start_offset == 0


def test_deleting_a_segment_unlists_then_deletes_and_may_be_repeated(history, tiered):
    """delete_segment removes the file and its manifest entry; repeated, or for a segment never
    written, it changes nothing; a file a plan named and retention deleted since reads as
    RemoteResourceNotFoundError."""
    write_all(history, tiered)
    before = plan(history, 0)
    doomed = tiered.segments[0]
    for _ in range(2):
        history.delete_segment(doomed)
    history.delete_segment(metadata_for(10_000, 10_010))
    names = [f.name for f in history.manifest(TOPIC, PARTITION).files]
    assert len(names) == len(tiered.segments) - 1 and all(doomed.segment_id.id not in n for n in names)
    assert object_names(history.filesystem, partition_path(history.base_path, TOPIC, PARTITION)) == sorted(
        [MANIFEST_NAME, *names]
    )
    with pytest.raises(RemoteResourceNotFoundError):
        read_history(before)


def test_a_read_uncommitted_plan_stops_before_a_file_that_left_aborted_records_out(history, tiered):
    """A file whose range held records of an aborted transaction says so in the manifest: a
    read_committed plan goes through it, a read_uncommitted one stops there (the brokers serve
    it the aborted records too)."""
    txns = tiered.writer.txns.all()
    flags = [bool(aborted_in(txns, m.start_offset, m.end_offset)) for m in tiered.segments]
    assert True in flags[1:], "the fixture's log has no aborted transaction past its first segment"
    for metadata, table, flag in zip(tiered.segments, tiered.tables, flags, strict=True):
        history.write_segment(metadata, table, aborted=flag)
    assert [f.aborted for f in history.manifest(TOPIC, PARTITION).files] == flags
    first = flags.index(True)
    committed = plan_history_read(history.filesystem, history.base_path, TOPIC, PARTITION, 0)
    uncommitted = plan_history_read(history.filesystem, history.base_path, TOPIC, PARTITION, 0, read_committed=False)
    assert committed.history_end_offset == tiered.segments[-1].end_offset + 1
    assert uncommitted.history_end_offset == tiered.segments[first].start_offset


def test_deleting_a_partition_deletes_its_whole_history(history, tiered):
    """A deleted topic's partition leaves no file, manifest or directory; deleting it again,
    or one never written, changes nothing."""
    write_all(history, tiered)
    for _ in range(2):
        history.delete_partition(TOPIC, PARTITION)
    history.delete_partition(TOPIC, PARTITION + 1)
    gone = history.filesystem.get_file_info(partition_path(history.base_path, TOPIC, PARTITION))
    assert gone.type == pafs.FileType.NotFound
    assert plan(history, 0).files == ()


def test_a_plan_is_picklable_for_the_tasks_that_read_it(history, tiered):
    """A plan travels to a Ray or Spark task: pickled and back, it reads the same rows."""
    write_all(history, tiered)
    planned = plan(history, 7, 60)
    assert read_history(pickle.loads(pickle.dumps(planned))).equals(read_history(planned))


# --- a new leader ------------------------------------------------------------------------


def test_a_new_leader_continues_without_duplicates(history, tiered):
    """A new leader's segment overlapping the history (its log rolled elsewhere) adds only the
    offsets no file covers; one wholly covered adds nothing; a segment id already listed is
    not written again. Every offset is then read once."""
    a, b, c = tiered.segments[:3]
    history.write_segment(a, tiered.tables[0])
    merged = segment_table(
        tiered.segment_bytes[0] + tiered.segment_bytes[1], TOPIC, PARTITION, tiered.writer.txns.all()
    )
    wider = metadata_for(a.start_offset, b.end_offset)
    added = history.write_segment(wider, merged)
    assert (added.first_offset, added.last_offset) == (b.start_offset, b.end_offset)
    assert added.record_count == tiered.tables[1].num_rows
    assert history.write_segment(metadata_for(a.start_offset, b.end_offset), merged) is None
    assert history.write_segment(wider, merged) == added
    history.write_segment(c, tiered.tables[2])
    offsets = offsets_of(read_history(plan(history, 0)))
    assert offsets == offsets_of(pa.concat_tables(tiered.tables[:3]))
    directory = ds.dataset(
        f"{history.base_path}/history/{TOPIC}", format="parquet", partitioning="hive", filesystem=history.filesystem
    )
    assert sorted(offsets_of(directory.to_table())) == offsets


def test_a_file_below_a_later_one_keeps_only_the_part_below_it(history, tiered):
    """A segment reaching into a listed file's range holds only the offsets below that file
    (the lowest uncovered range): listed ranges never overlap."""
    a, b = tiered.segments[:2]
    history.write_segment(b, tiered.tables[1])
    merged = segment_table(
        tiered.segment_bytes[0] + tiered.segment_bytes[1], TOPIC, PARTITION, tiered.writer.txns.all()
    )
    added = history.write_segment(metadata_for(a.start_offset, b.end_offset), merged)
    assert (added.first_offset, added.last_offset) == (a.start_offset, a.end_offset)
    assert read_history(plan(history, 0)).equals(pa.concat_tables(tiered.tables[:2]))
    manifest = history.manifest(TOPIC, PARTITION)
    assert manifest.uncovered(0, b.end_offset) is None and manifest.uncovered(0, b.end_offset + 5) == (
        b.end_offset + 1,
        b.end_offset + 5,
    )


def test_rows_not_of_the_segment_are_refused(history, tiered):
    """A table of another schema, or with offsets outside the segment's range: ValueError,
    nothing written."""
    a = tiered.segments[1]
    with pytest.raises(ValueError, match="schema"):
        history.write_segment(a, tiered.tables[1].drop_columns(["headers"]))
    with pytest.raises(ValueError, match="rise within"):
        history.write_segment(a, tiered.tables[0])
    assert history.manifest(TOPIC, PARTITION).files == ()
    assert not os.path.exists(partition_path(history.base_path, TOPIC, PARTITION))


# --- a failing store ---------------------------------------------------------------------


def manifest_bytes(history: HistoryWriter) -> bytes:
    return read_object(history.filesystem, f"{partition_path(history.base_path, TOPIC, PARTITION)}/{MANIFEST_NAME}")


def test_an_unavailable_store_raises_remote_storage_error_and_leaves_the_manifest(flaky, tiered):
    """With every call of the store failing, each operation raises RemoteStorageError
    (retriable); once the store is back the manifest is as it was and reads serve."""
    history, handler = flaky
    write_all(history, tiered)
    before = manifest_bytes(history)
    planned = plan(history, 0)
    handler.fail = lambda method, path: True
    operations = [
        lambda: history.write_segment(metadata_for(10_000, 10_001), tiered.tables[0].slice(0, 0)),
        lambda: history.delete_segment(tiered.segments[0]),
        lambda: history.manifest(TOPIC, PARTITION),
        lambda: history.orphans(TOPIC, PARTITION),
        lambda: history.clean_orphans(TOPIC, PARTITION, now_ms=START_MS, min_age_ms=0),
        lambda: plan(history, 0),
        lambda: read_history(planned),
    ]
    for operation in operations:
        with pytest.raises(RemoteStorageError, match="store unavailable") as failed:
            operation()
        assert failed.value.retriable
    handler.fail = lambda method, path: False
    assert manifest_bytes(history) == before and read_history(plan(history, 0)).num_rows == planned_rows(planned)


def planned_rows(planned) -> int:
    return sum(f.record_count for f in planned.files)


@pytest.mark.parametrize("failing", ["open_output_stream", "move"])
def test_a_failed_file_write_lists_nothing_and_leaves_no_file(flaky, tiered, failing):
    """The Parquet file's write (or its rename into place) fails: RemoteStorageError, the
    manifest unchanged, no file (the temporary one deleted); a retry succeeds."""
    history, handler = flaky
    history.write_segment(tiered.segments[0], tiered.tables[0])
    before = manifest_bytes(history)
    handler.fail = lambda method, path: method == failing and ".parquet" in path
    with pytest.raises(RemoteStorageError):
        history.write_segment(tiered.segments[1], tiered.tables[1])
    handler.fail = lambda method, path: False
    assert manifest_bytes(history) == before and history.orphans(TOPIC, PARTITION) == []
    assert history.write_segment(tiered.segments[1], tiered.tables[1]) is not None


def test_an_orphan_is_never_planned_and_is_cleaned_once_old_enough(flaky, tiered):
    """The file is written but the manifest update fails (and deleting cannot clean up):
    RemoteStorageError, the manifest as it was, the file an orphan that no plan names;
    clean_orphans leaves it while it may be a write in flight and deletes it once older than
    the grace period; the retried write then lists the segment."""
    history, handler = flaky
    history.write_segment(tiered.segments[0], tiered.tables[0])
    before = manifest_bytes(history)
    writes = ("open_output_stream", "move")
    handler.fail = lambda method, path: (method in writes and MANIFEST_NAME in path) or method == "delete_file"
    with pytest.raises(RemoteStorageError):
        history.write_segment(tiered.segments[1], tiered.tables[1])
    handler.fail = lambda method, path: False
    assert manifest_bytes(history) == before
    orphans = history.orphans(TOPIC, PARTITION)
    assert [os.path.basename(p) for p in orphans if p.endswith(".parquet")] == [
        f"{tiered.segments[1].start_offset:020d}-{tiered.segments[1].end_offset:020d}-"
        f"{tiered.segments[1].segment_id.id}.parquet"
    ]
    assert plan(history, 0).files == history.manifest(TOPIC, PARTITION).files
    assert plan(history, 0).live_start_offset == tiered.segments[1].start_offset
    written_ms = max(os.stat(p).st_mtime_ns for p in orphans) // 1_000_000
    assert history.clean_orphans(TOPIC, PARTITION, now_ms=written_ms + 1_000, min_age_ms=60_000) == []
    assert sorted(history.clean_orphans(TOPIC, PARTITION, now_ms=written_ms + 61_000, min_age_ms=60_000)) == sorted(
        orphans
    )
    assert history.orphans(TOPIC, PARTITION) == [] and all(not os.path.exists(p) for p in orphans)
    assert history.write_segment(tiered.segments[1], tiered.tables[1]) is not None
    assert plan(history, 0).live_start_offset == tiered.segments[1].end_offset + 1


def test_a_manifest_that_is_not_valid_raises_remote_storage_error(history, tiered):
    """A manifest that is not JSON, of another version or partition, or with overlapping or
    misnamed files is refused (RemoteStorageError), never half trusted."""
    write_all(history, tiered)
    path = f"{partition_path(history.base_path, TOPIC, PARTITION)}/{MANIFEST_NAME}"
    good = manifest_bytes(history)
    first, second = history.manifest(TOPIC, PARTITION).files[:2]
    overlapping = good.replace(
        f'"first_offset":{second.first_offset},'.encode(), f'"first_offset":{first.last_offset},'.encode()
    )
    assert overlapping != good
    for garbage in (
        b"{",
        b"[]",
        good.replace(b'"version":1', b'"version":2'),
        good.replace(b'"partition":3', b'"partition":4'),
        overlapping,
    ):
        write_object(history.filesystem, path, garbage)
        with pytest.raises(RemoteStorageError, match="not a valid history manifest"):
            plan(history, 0)


# --- reading the directory -----------------------------------------------------------------


def test_the_directory_reads_as_a_hive_dataset_with_one_partition_column(history, tiered):
    """pyarrow.dataset reads <base>/history/<topic> (hive partitioning) as HISTORY_SCHEMA
    exactly: the partition column once, the file's, in its place and type; partitions by
    directory, pruned by a filter on partition; the manifest and temporary files unread."""
    write_all(history, tiered)
    other = [metadata_for(m.start_offset, m.end_offset, partition=4) for m in tiered.segments[:2]]
    for metadata, data in zip(other, tiered.segment_bytes[:2], strict=True):
        history.write_segment(metadata, segment_table(data, TOPIC, 4, tiered.writer.txns.all()))
    write_object(
        history.filesystem, f"{partition_path(history.base_path, TOPIC, 4)}/.left-over.parquet.0a1b.tmp", b"junk"
    )
    root = f"{history.base_path}/history/{TOPIC}"
    dataset = ds.dataset(root, format="parquet", partitioning="hive", filesystem=history.filesystem)
    assert dataset.schema.equals(HISTORY_SCHEMA)
    table = dataset.to_table()
    assert table.schema.equals(HISTORY_SCHEMA)
    counts = collections.Counter(table.column("partition").to_pylist())
    assert counts == {
        PARTITION: sum(t.num_rows for t in tiered.tables),
        4: tiered.tables[0].num_rows + tiered.tables[1].num_rows,
    }
    fours = dataset.to_table(filter=ds.field("partition") == 4)
    assert set(fours.column("partition").to_pylist()) == {4}
    assert len(list(dataset.get_fragments(filter=ds.field("partition") == 4))) == 2
    typed = ds.dataset(
        root,
        format="parquet",
        partitioning=ds.partitioning(pa.schema([("partition", pa.int32())]), flavor="hive"),
        filesystem=history.filesystem,
    )
    assert typed.schema.equals(HISTORY_SCHEMA) and typed.count_rows() == table.num_rows
