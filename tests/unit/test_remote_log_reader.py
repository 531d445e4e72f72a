"""Reads below the local log start served from tiered storage: the RemoteLogReader over real
segments that raylog's Log wrote and the RemoteStorageManager copied to a local directory,
checked against what the local log answers (no Ray, no sleeps)."""

from __future__ import annotations

import collections
import concurrent.futures
import random
import shutil

import pyarrow.fs as pafs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raylog.chaos.simulation import ManualClock
from raylog.common import record_batch
from raylog.config import LogConfig
from raylog.coordination.producer_state import ProducerStateManager
from raylog.errors import (
    CorruptRecordError,
    InvalidConfigError,
    InvalidRequestError,
    OffsetOutOfRangeError,
    RemoteStorageError,
)
from raylog.storage import producer_snapshot
from raylog.storage.leader_epoch import LeaderEpochCache
from raylog.storage.log import Log, TimestampOffset
from raylog.storage.remote_log_metadata import (
    RemoteLogLeaderEpoch,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    leader_epochs_in_range,
)
from raylog.storage.remote_log_metadata_cache import RemoteLogMetadataCache
from raylog.storage.remote_log_reader import RemoteLogReader, RemoteReadStats
from raylog.storage.remote_storage import LogSegmentData, RemoteStorageManager
from raylog.storage.txn_index import AbortedTxn, TransactionIndex
from tests.unit.object_store import read_object, write_object
from tests.unit.test_remote_storage import FlakyHandler

TOPIC, PARTITION = "clicks", 3
#: Small segments and a dense offset index: a few dozen batches make several segments, each
#: with index entries to start scans from; some batches are larger than a segment.
CONFIG = {"segment.bytes": 6_000, "index.interval.bytes": 700}
START_MS = 1_700_000_000_000
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


class SyncExecutor(concurrent.futures.Executor):
    """Runs each task at once, in the submitting thread: prefetches happen deterministically."""

    def __init__(self, before=None):
        self.before = before or (lambda: None)  # called before each task (a test breaks the store)
        self.tasks = 0

    def submit(self, fn, /, *args, **kwargs):
        self.tasks += 1
        future = concurrent.futures.Future()
        self.before()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:
            future.set_exception(exc)
        return future


class Writer:
    """A partition's log written as its partition writes it: leader epochs checkpointed,
    producer state applied after each append and snapshotted when the log rolls, aborted
    transactions indexed in the segment holding their marker."""

    def __init__(self, directory: str, clock, **config):
        self.clock = clock
        self.log = Log.open(directory, LogConfig.from_properties({**CONFIG, **config}), clock=clock)
        self.epochs = LeaderEpochCache(directory)
        self.producers = ProducerStateManager()
        self.txns = TransactionIndex(directory)
        self.log.on_roll = lambda base: producer_snapshot.write(directory, base, self.producers.rows())

    def append(self, data: bytes, epoch: int = 0) -> None:
        if epoch != self.epochs.latest_epoch:
            self.epochs.assign(epoch, self.log.log_end_offset)
        info = self.log.append_as_leader(data, epoch)
        for txn in self.producers.apply(info.batches, self.clock()):
            if not txn.committed:
                entry = AbortedTxn(txn.producer_id, txn.first_offset, txn.marker_offset)
                self.txns.add(entry, self.log.segment_base_offsets)

    def close(self) -> None:
        for segment in self.log._segments:
            segment.close()


def plain_batch(rng: random.Random, i: int, **options) -> bytes:
    """Batch ``i`` of 1 to 8 records of one of four sizes (up to 12 KB a batch), timestamps
    around ``START_MS + i`` seconds but not in order."""
    count = rng.randint(1, 8)
    size = rng.choice((5, 60, 300, 1_500))
    timestamps = [START_MS + i * 1_000 + rng.randint(-3_000, 3_000) for _ in range(count)]
    values = [bytes([97 + (i + j) % 26]) * size for j in range(count)]
    return record_batch.build(values, timestamps_ms=timestamps, now_ms=START_MS, **options)


def write_records(writer: Writer, seed: int, batches: int = 120) -> None:
    """Plain batches, the leader epoch moving on now and then (by 1 or 2)."""
    rng = random.Random(seed)
    epoch = max(0, writer.epochs.latest_epoch)
    for i in range(batches):
        if rng.random() < 0.05:
            epoch += rng.randint(1, 2)
        writer.append(plain_batch(rng, i), epoch)


def write_transactions(
    writer: Writer,
    seed: int,
    rounds: int = 160,
    *,
    producers: int = 4,
    longest: int = 6,
    commit: float = 0.3,
    batch=None,
) -> None:
    """``producers`` transactional producers (ids 1 to ``producers``) and plain batches
    interleaved: transactions of one to ``longest`` batches, committed with probability
    ``commit`` (most aborted), many open across segment boundaries; every one ended. ``batch``
    builds a data batch (default :func:`plain_batch`)."""
    batch = batch or plain_batch
    rng = random.Random(seed)
    epochs, sequences, left = collections.Counter(), collections.Counter(), {}
    for i in range(rounds):
        pid = rng.randint(0, producers)
        if pid and left.get(pid, 1) == 0:
            del left[pid]
            epochs[pid] += 1
            sequences[pid] = 0
            writer.append(record_batch.build_marker(pid, epochs[pid], rng.random() < commit, 0, now_ms=START_MS))
            continue
        if pid:
            left[pid] = left.get(pid, rng.randint(1, longest)) - 1
        options = {"producer_id": pid, "producer_epoch": epochs[pid], "base_sequence": sequences[pid]}
        data = batch(rng, i, transactional=True, **options) if pid else batch(rng, i)
        sequences[pid] += record_batch.read_header(data).record_count
        writer.append(data)
    for pid in sorted(left):
        writer.append(record_batch.build_marker(pid, epochs[pid] + 1, False, 0, now_ms=START_MS))


def tier(writer: Writer, store: RemoteStorageManager, cache: RemoteLogMetadataCache | None = None):
    """Roll the log, copy every closed segment to the store and register it as readable in
    ``cache`` (a new one by default); returns the cache and the segments' metadata."""
    writer.log.roll()
    cache = cache or RemoteLogMetadataCache(TOPIC, PARTITION)
    copied = []
    for segment in writer.log._segments[:-1]:
        base, end = segment.base_offset, segment.next_offset - 1
        epochs = leader_epochs_in_range(writer.epochs.entries, base, end)
        sid = RemoteLogSegmentId.generate(TOPIC, PARTITION)
        metadata = RemoteLogSegmentMetadata(sid, base, end, segment.max_timestamp, 1, START_MS, epochs, segment.size)
        store.copy_log_segment_data(metadata, LogSegmentData.in_directory(writer.log.dir, base, end + 1))
        cache.apply(metadata)
        cache.apply(RemoteLogSegmentMetadataUpdate(sid, START_MS, FINISHED, 1))
        copied.append(cache.segment(sid))
    return cache, copied


def headers_of(data: bytes) -> list[record_batch.BatchHeader]:
    return [header for _, header in record_batch.iter_headers(data)]


def all_batches(writer: Writer) -> list[bytes]:
    """Every batch of the log, whole, in offset order."""
    batches = []
    for segment in writer.log._segments:
        data = segment.read(0, segment.size)
        batches += [data[at : at + header.size] for at, header in record_batch.iter_headers(data)]
    return batches


@pytest.fixture
def store(tmp_path) -> RemoteStorageManager:
    return RemoteStorageManager.from_uri(f"file://{tmp_path}/remote")


@pytest.fixture
def any_store(remote_uri) -> RemoteStorageManager:
    """A local directory, then an S3 bucket: for the tests of what the store answers."""
    return RemoteStorageManager.from_uri(remote_uri)


@pytest.fixture
def flaky(tmp_path):
    """``(store, handler)``: a store over a FlakyHandler; set ``handler.fail`` to break it."""
    handler = FlakyHandler()
    return RemoteStorageManager(pafs.PyFileSystem(handler), str(tmp_path / "remote")), handler


@pytest.fixture
def writer(tmp_path, clock):
    opened = Writer(str(tmp_path / f"{TOPIC}-{PARTITION}"), clock)
    yield opened
    opened.close()


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """``(writer, store, cache, segments)``: one tiered log for the tests that only read it."""
    root = tmp_path_factory.mktemp("tiered")
    writer = Writer(str(root / f"{TOPIC}-{PARTITION}"), ManualClock())
    write_records(writer, seed=7)
    store = RemoteStorageManager.from_uri(f"file://{root}/remote")
    cache, segments = tier(writer, store)
    yield writer, store, cache, segments
    writer.close()


# --- reads ------------------------------------------------------------------------------


def test_every_offset_reads_what_the_local_log_read_before_it_was_deleted(writer, any_store):
    """For every offset of the remote tier (every 23rd from an S3 bucket, whose ranged reads
    are HTTP requests) and several max_bytes (0, smaller than a batch, around a chunk, at and
    a byte off the ends of the first batches, larger than a segment), the remote read returns
    the bytes Log.read returned, also once the local log is gone; batches larger than the
    chunks are assembled."""
    store = any_store
    write_records(writer, seed=1)
    cache, segments = tier(writer, store)
    assert len(segments) >= 8 and max(s.segment_size_bytes for s in segments) > 6_000
    first, last = segments[0].start_offset, segments[-1].end_offset
    expected = {}
    for offset in range(first, last + 1, 1 if store.filesystem.type_name == "local" else 23):
        batches = headers_of(writer.log.read(offset, 1 << 20))
        ends = [sum(h.size for h in batches[:n]) for n in range(1, min(3, len(batches)) + 1)]
        exact = {end + d for end in ends for d in (-1, 0, 1)}  # a bound at, or a byte off, a batch's end
        for max_bytes in {0, 50, 999, 1_000, 4_000, 1 << 20} | exact:
            expected[offset, max_bytes] = writer.log.read(offset, max_bytes)
    history = writer.epochs.entries
    assert len(history) >= 3
    writer.close()
    shutil.rmtree(writer.log.dir)
    reader = RemoteLogReader(cache, store, chunk_bytes=1_000, chunk_cache_bytes=8_000, executor=SyncExecutor())
    for (offset, max_bytes), data in expected.items():
        assert reader.read(offset, max_bytes, history) == data, (offset, max_bytes)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_any_reads_from_any_offset_return_what_the_local_log_returns(shared, data):
    """Property: whatever the chunk size, cache sizes and prefetching, three reads in sequence
    from any offset return exactly what Log.read returns for the same offsets and max_bytes."""
    writer, store, cache, segments = shared
    chunk_bytes = data.draw(st.sampled_from([100, 777, 4_096, 1 << 20]), "chunk_bytes")
    reader = RemoteLogReader(
        cache,
        store,
        chunk_bytes=chunk_bytes,
        chunk_cache_bytes=chunk_bytes * data.draw(st.integers(1, 4), "chunks cached"),
        index_cache_bytes=data.draw(st.integers(1, 5_000), "index_cache_bytes"),
        executor=data.draw(st.sampled_from([None, SyncExecutor()]), "executor"),
    )
    offset = data.draw(st.integers(segments[0].start_offset, segments[-1].end_offset), "offset")
    for _ in range(3):
        max_bytes = data.draw(st.integers(0, 20_000), "max_bytes")
        expected = writer.log.read(offset, max_bytes)
        assert reader.read(offset, max_bytes, writer.epochs.entries) == expected
        offset = headers_of(expected)[-1].next_offset
        if offset > segments[-1].end_offset:
            break


def test_sequential_reads_yield_every_batch_once_in_order_and_use_the_prefetches(shared):
    """Reading from the remote log start to its end, each read from the offset after the last,
    returns every batch of the log once, in order; each chunk is fetched once (on demand or
    ahead), every prefetch is used, and the indexes are fetched once per segment."""
    writer, store, cache, segments = shared
    chunk_bytes = 2_000
    reader = RemoteLogReader(cache, store, chunk_bytes=chunk_bytes, executor=SyncExecutor())
    offset, batches = segments[0].start_offset, []
    while offset <= segments[-1].end_offset:
        data = reader.read(offset, 1_500, writer.epochs.entries)
        batches += [data[at : at + h.size] for at, h in record_batch.iter_headers(data)]
        offset = headers_of(data)[-1].next_offset
    assert batches == all_batches(writer)
    stats = reader.stats()
    chunks = sum(-(-s.segment_size_bytes // chunk_bytes) for s in segments)
    assert stats.chunk_cache_misses + stats.prefetches_started == chunks
    assert stats.prefetches_started >= 10 and stats.prefetches_used == stats.prefetches_started
    assert stats.index_cache_misses == len(segments) and stats.index_cache_hits > stats.index_cache_misses
    log_bytes = sum(s.segment_size_bytes for s in segments)
    assert log_bytes < stats.remote_bytes_read < log_bytes + 10_000  # the chunks, and the offset indexes


def test_without_an_executor_nothing_is_prefetched(shared):
    """executor=None: sequential reads fetch every chunk on demand."""
    writer, store, cache, segments = shared
    reader = RemoteLogReader(cache, store, chunk_bytes=2_000)
    offset = segments[0].start_offset
    while offset <= segments[-1].end_offset:
        offset = headers_of(reader.read(offset, 1_500, writer.epochs.entries))[-1].next_offset
    stats = reader.stats()
    assert stats.prefetches_started == stats.prefetches_used == 0 and stats.chunk_cache_misses > len(segments)


class QueueingExecutor(concurrent.futures.Executor):
    """Queues the tasks until ``run()``: a pool whose workers are all busy."""

    def __init__(self):
        self.queued = []

    def submit(self, fn, /, *args, **kwargs):
        self.queued.append((fn, args, kwargs))
        return concurrent.futures.Future()

    def run(self) -> None:
        for fn, args, kwargs in self.queued:
            fn(*args, **kwargs)


def test_a_read_takes_over_a_prefetch_still_queued(shared):
    """A read needing a chunk whose prefetch the executor has not run yet fetches it itself
    instead of waiting (the queue may be long, or its own thread's); the prefetch, run
    later, fetches nothing."""
    writer, store, cache, segments = shared
    executor = QueueingExecutor()
    reader = RemoteLogReader(cache, store, chunk_bytes=2_000, executor=executor)
    offset = segments[0].start_offset
    while offset <= segments[-1].end_offset:
        data = reader.read(offset, 1_500, writer.epochs.entries)
        assert data == writer.log.read(offset, 1_500)
        offset = headers_of(data)[-1].next_offset
    stats = reader.stats()
    assert stats.prefetches_started == len(executor.queued) >= 10 and stats.prefetches_used == 0
    executor.run()
    assert reader.stats() == stats


def test_caches_stay_within_their_bounds_and_serve_repeated_reads(shared):
    """Random reads through small caches never hold more than their bounds; reading the same
    offset again fetches nothing (index and chunk cache hits)."""
    writer, store, cache, segments = shared
    reader = RemoteLogReader(
        cache, store, chunk_bytes=1_000, chunk_cache_bytes=3_500, index_cache_bytes=600, executor=SyncExecutor()
    )
    rng = random.Random(3)
    for _ in range(200):
        offset = rng.randint(segments[0].start_offset, segments[-1].end_offset)
        max_bytes = rng.choice((0, 700, 2_500))
        assert reader.read(offset, max_bytes, writer.epochs.entries) == writer.log.read(offset, max_bytes)
        stats = reader.stats()
        assert 0 < stats.chunk_cache_bytes <= 3_500 and 0 < stats.index_cache_bytes <= 600
    before = reader.stats()
    offset = segments[2].start_offset + 1
    reader.read(offset, 500, writer.epochs.entries)
    middle = reader.stats()
    reader.read(offset, 500, writer.epochs.entries)
    after = reader.stats()
    assert after.remote_bytes_read == middle.remote_bytes_read >= before.remote_bytes_read
    assert (
        after.index_cache_hits == middle.index_cache_hits + 1 and after.index_cache_misses == middle.index_cache_misses
    )
    assert after.chunk_cache_hits > middle.chunk_cache_hits and after.chunk_cache_misses == middle.chunk_cache_misses


def test_concurrent_readers_share_the_caches(shared):
    """Four threads each read the whole remote tier in sequence at once, with prefetches on a
    pool and caches smaller than the data: every thread gets every batch once, in order."""
    writer, store, cache, segments = shared
    expected = all_batches(writer)
    with concurrent.futures.ThreadPoolExecutor(2) as prefetcher:
        reader = RemoteLogReader(cache, store, chunk_bytes=1_500, chunk_cache_bytes=9_000, executor=prefetcher)

        def scan(seed: int) -> list[bytes]:
            rng, offset, batches = random.Random(seed), segments[0].start_offset, []
            while offset <= segments[-1].end_offset:
                data = reader.read(offset, rng.choice((0, 800, 3_000)), writer.epochs.entries)
                batches += [data[at : at + h.size] for at, h in record_batch.iter_headers(data)]
                offset = headers_of(data)[-1].next_offset
            return batches

        with concurrent.futures.ThreadPoolExecutor(4) as readers:
            results = list(readers.map(scan, range(4), timeout=60))
    assert all(batches == expected for batches in results)
    assert reader.stats().chunk_cache_bytes <= 9_000


def test_the_leader_epoch_history_picks_the_segment(tmp_path, clock, store):
    """After an unclean election two histories share offsets: the reader serves each offset
    from the copy of the epoch that wrote it in the history it is given."""
    old, new = (Writer(str(tmp_path / name / f"{TOPIC}-{PARTITION}"), clock) for name in ("old", "new"))
    for writer in (old, new):
        write_records(writer, seed=5, batches=30)
        writer.log.roll()
    diverged_at = old.log.log_end_offset
    assert new.log.log_end_offset == diverged_at
    write_records(old, seed=11, batches=30)  # the old leader went on in its epoch...
    new.epochs.assign(old.epochs.latest_epoch + 1, diverged_at)  # ...the new one in a new epoch
    write_records(new, seed=12, batches=30)
    cache, _ = tier(old, store)
    tier(new, store, cache)
    reader = RemoteLogReader(cache, store, chunk_bytes=4_096)
    for writer in (old, new):
        for offset in (diverged_at, diverged_at + 7, min(old.log.log_end_offset, new.log.log_end_offset) - 1):
            assert reader.read(offset, 5_000, writer.epochs.entries) == writer.log.read(offset, 5_000)
    assert old.log.read(diverged_at, 5_000) != new.log.read(diverged_at, 5_000)
    old.close()
    new.close()


def test_the_remote_tiers_epoch_history_serves_a_replica_whose_own_starts_later(writer, store):
    """A replica that restarted its log at its leader's local log start knows no epoch below
    it: the history of the readable segments below that start, then its own, reads every
    offset of the remote tier as the full history does."""
    for epoch in (0, 1, 2):
        writer.epochs.assign(epoch, writer.log.log_end_offset)
        write_records(writer, seed=20 + epoch, batches=25)
    cache, copied = tier(writer, store)
    reader = RemoteLogReader(cache, store, chunk_bytes=4_096)
    local_start = copied[-1].end_offset + 1
    full = writer.epochs.entries
    assert reader.epoch_history_below(local_start) == [(e, o) for e, o in full if o < local_start]
    assert reader.epoch_history_below(0) == []
    assert reader.history_for(full) == full
    history = reader.history_for([(full[-1][0], local_start)])  # its own: its first batch's epoch
    assert history == full
    for offset in range(0, local_start, 37):
        assert reader.read(offset, 5_000, history) == reader.read(offset, 5_000, full)


def test_offsets_the_remote_tier_does_not_hold_are_out_of_range(writer, store):
    """Below the remote log start (its first segment deleted), past its end, or in an epoch no
    copy holds: OffsetOutOfRangeError; a bad max_bytes: InvalidRequestError. Deleting a
    segment drops what the caches held of it."""
    write_records(writer, seed=2, batches=60)
    cache, segments = tier(writer, store)
    history = writer.epochs.entries
    reader = RemoteLogReader(cache, store, chunk_bytes=2_000)
    reader.read(segments[0].start_offset, 100, history)
    held = reader.stats()
    deleting = RemoteLogSegmentState.DELETE_SEGMENT_STARTED
    reader.apply(RemoteLogSegmentMetadataUpdate(segments[0].segment_id, START_MS, deleting, 1))
    dropped = reader.stats()
    reader.apply(RemoteLogLeaderEpoch(TOPIC, PARTITION, 0, 1, START_MS))  # a leader's record changes no cache
    assert reader.stats() == dropped
    assert dropped.chunk_cache_bytes == 0 < held.chunk_cache_bytes and dropped.index_cache_bytes == 0
    for offset in (segments[0].start_offset, segments[0].end_offset, segments[-1].end_offset + 1):
        with pytest.raises(OffsetOutOfRangeError):
            reader.read(offset, 100, history)
    with pytest.raises(OffsetOutOfRangeError, match="leader epoch 99"):
        reader.read(segments[1].start_offset, 100, [(99, 0)])
    with pytest.raises(OffsetOutOfRangeError):
        reader.read(segments[1].start_offset, 100, [])
    for bad in (-1, 1.5, True):
        with pytest.raises(InvalidRequestError):
            reader.read(segments[1].start_offset, bad, history)
    assert reader.read(segments[1].start_offset, 100, history) == writer.log.read(segments[1].start_offset, 100)


def test_sizes_are_checked():
    """A size that is not positive, or a chunk cache smaller than a chunk: InvalidConfigError."""
    cache, store = RemoteLogMetadataCache(TOPIC, PARTITION), RemoteStorageManager.from_uri("file:///tmp")
    for sizes in ({"chunk_bytes": 0}, {"index_cache_bytes": 0}, {"chunk_bytes": 10, "chunk_cache_bytes": 9}):
        with pytest.raises(InvalidConfigError):
            RemoteLogReader(cache, store, **sizes)
    assert RemoteLogReader(cache, store).stats() == RemoteReadStats()


# --- failures ---------------------------------------------------------------------------


def test_an_unavailable_store_raises_remote_storage_error_and_caches_nothing(writer, flaky):
    """The store failing every read, or only the .log reads: RemoteStorageError (retriable),
    nothing cached from the failed fetch; once it is back, the same reader reads as before."""
    store, handler = flaky
    write_records(writer, seed=4, batches=60)
    cache, segments = tier(writer, store)
    reader = RemoteLogReader(cache, store, chunk_bytes=2_000, executor=SyncExecutor())
    offset = segments[1].start_offset + 2
    handler.fail = lambda method, path: True
    with pytest.raises(RemoteStorageError) as failed:
        reader.read(offset, 3_000, writer.epochs.entries)
    assert failed.value.retriable and "store unavailable" in str(failed.value)
    assert (reader.stats().index_cache_bytes, reader.stats().chunk_cache_bytes) == (0, 0)
    handler.fail = lambda method, path: path.endswith(".log")
    with pytest.raises(RemoteStorageError):
        reader.read(offset, 3_000, writer.epochs.entries)
    stats = reader.stats()
    assert stats.index_cache_bytes > 0 and stats.chunk_cache_bytes == 0  # the index was fetched
    handler.fail = lambda method, path: False
    assert reader.read(offset, 3_000, writer.epochs.entries) == writer.log.read(offset, 3_000)
    assert reader.stats().index_cache_hits == stats.index_cache_hits + 1


def test_a_failed_prefetch_is_not_cached_and_the_next_read_fetches_the_chunk(writer, flaky):
    """A prefetch that fails leaves the read that started it whole and nothing cached: the next
    read fetches the chunk itself, and gets the right bytes."""
    store, handler = flaky
    write_records(writer, seed=4, batches=60)
    cache, segments = tier(writer, store)
    segment = max(segments, key=lambda s: (s.end_offset - s.start_offset, s.segment_size_bytes))

    def break_store():
        handler.fail = lambda method, path: True

    executor = SyncExecutor(before=break_store)
    reader = RemoteLogReader(cache, store, chunk_bytes=1_000, executor=executor)
    offset, history = segment.start_offset, writer.epochs.entries
    while not reader.stats().prefetches_started:  # one batch a read, until one ends near a chunk's end
        data = reader.read(offset, 0, history)
        assert data == writer.log.read(offset, 0)
        offset = headers_of(data)[-1].next_offset
    assert executor.tasks == 1
    handler.fail = lambda method, path: False
    executor.before = lambda: None
    failed = reader.stats()
    assert failed.prefetches_used == 0
    assert reader.read(offset, 1_000, history) == writer.log.read(offset, 1_000)
    assert reader.stats().chunk_cache_misses > failed.chunk_cache_misses and reader.stats().prefetches_used == 0


def corrupt(store: RemoteStorageManager, metadata: RemoteLogSegmentMetadata, suffix: str, change) -> bytes:
    """Rewrite one of a segment's objects with ``change(bytearray)``; returns the original."""
    path = store.object_path(metadata, suffix)
    original = read_object(store.filesystem, path)
    changed = bytearray(original)
    changed = change(changed) or changed
    write_object(store.filesystem, path, bytes(changed))
    return original


def restore(store: RemoteStorageManager, metadata: RemoteLogSegmentMetadata, suffix: str, original: bytes) -> None:
    write_object(store.filesystem, store.object_path(metadata, suffix), original)


def has_object(store: RemoteStorageManager, path: str) -> bool:
    return store.filesystem.get_file_info(path).type == pafs.FileType.File


def test_corrupt_remote_bytes_raise_corrupt_record_error_and_never_a_torn_batch(writer, store):
    """A flipped body byte (CRC), a zeroed header, a base offset going back (outside the CRC),
    a .log cut inside its last batch, a garbage offset index: a read that meets the damage
    raises CorruptRecordError naming the segment, one that does not returns its batches; the
    cached parts of the segment are dropped, so once the object is whole again it reads well."""
    write_records(writer, seed=9, batches=80)
    cache, segments = tier(writer, store)
    history = writer.epochs.entries
    metadata = max(segments, key=lambda s: s.end_offset - s.start_offset)
    positions = list(record_batch.iter_headers(read_object(store.filesystem, store.object_path(metadata, ".log"))))
    assert len(positions) >= 3
    (_, first), (second_at, second), (last_at, last) = positions[0], positions[1], positions[-1]

    def flip_body(b):
        b[second_at + record_batch.HEADER_SIZE] ^= 0xFF

    def zero_header(b):
        b[second_at : second_at + record_batch.HEADER_SIZE] = bytes(record_batch.HEADER_SIZE)

    def base_goes_back(b):
        b[second_at : second_at + 8] = first.base_offset.to_bytes(8, "big")

    def cut(b):
        return b[: last_at + 10]

    def garbage(b):
        return b"\x00" * 13

    cases = [
        (".log", flip_body, (second.base_offset, 1), (first.base_offset, 1)),
        (".log", zero_header, (first.base_offset, 1 << 20), (first.base_offset, 0)),
        (".log", base_goes_back, (first.base_offset, 1 << 20), (first.base_offset, 0)),
        (".log", cut, (last.base_offset, 1), (first.base_offset, 1)),
        (".index", garbage, (second.base_offset, 1), None),
    ]
    for suffix, change, (offset, max_bytes), unharmed in cases:
        original = corrupt(store, metadata, suffix, change)
        reader = RemoteLogReader(cache, store, chunk_bytes=700, executor=SyncExecutor())
        if unharmed is not None:
            assert reader.read(*unharmed, history) == writer.log.read(*unharmed)
        with pytest.raises(CorruptRecordError, match=str(metadata.segment_id)):
            reader.read(offset, max_bytes, history)
        assert (reader.stats().chunk_cache_bytes, reader.stats().index_cache_bytes) == (0, 0), change.__name__
        restore(store, metadata, suffix, original)
        assert reader.read(offset, max_bytes, history) == writer.log.read(offset, max_bytes)


def test_a_corrupt_transaction_index_raises_corrupt_record_error(writer, store):
    """A remote transaction index that is not a valid one: CorruptRecordError, not cached."""
    write_transactions(writer, seed=1)
    cache, segments = tier(writer, store)
    metadata = next(s for s in segments if has_object(store, store.object_path(s, ".txnindex")))
    original = corrupt(store, metadata, ".txnindex", lambda b: b[:-1])
    reader = RemoteLogReader(cache, store)
    with pytest.raises(CorruptRecordError):
        reader.aborted_transactions(metadata.start_offset, metadata.end_offset + 1)
    restore(store, metadata, ".txnindex", original)
    local = writer.txns.collect(metadata.start_offset, metadata.end_offset + 1)
    assert reader.aborted_transactions(metadata.start_offset, metadata.end_offset + 1) == local


# --- time and transactions --------------------------------------------------------------


def test_offset_for_timestamp_agrees_with_the_local_log(shared):
    """For timestamps below, among, between and above the records' (not in order), and log
    start offsets inside segments, the remote time indexes give the first record at or past
    the start with a timestamp >= the target, as the local log does, or None past them all."""
    writer, store, cache, segments = shared
    tables = [record_batch.decode_table(batch) for batch in all_batches(writer)]
    records = [
        (offset, ts)
        for table in tables
        for offset, ts in zip(table.column("offset").to_pylist(), table.column("timestamp").to_pylist(), strict=True)
    ]
    reader = RemoteLogReader(cache, store, chunk_bytes=1_500, executor=SyncExecutor())
    rng = random.Random(2)
    targets = sorted({ts + d for _, ts in rng.sample(records, 60) for d in (-1, 0, 1)})
    targets += [START_MS - 10_000, max(ts for _, ts in records) + 1]
    for start_offset in (0, segments[3].start_offset + 1, segments[-1].end_offset):
        for target in targets:
            expected = next(((o, ts) for o, ts in records if ts >= target and o >= start_offset), None)
            found = reader.offset_for_timestamp(target, start_offset=start_offset)
            assert found == (None if expected is None else TimestampOffset(*expected)), (start_offset, target)
            if start_offset == 0:
                assert writer.log.offsets_for_time(target) == found
                assert reader.offset_for_timestamp(target, leader_epoch_history=writer.epochs.entries) == found
    assert reader.stats().index_cache_misses <= 2 * len(segments)  # each time and offset index once


def test_aborted_transactions_agree_with_the_local_index(writer, any_store):
    """For ranges starting and ending anywhere in the remote tier, the remote transaction
    indexes list what the local TransactionIndex.collect lists, in the same order (segments
    without aborted transactions have no index object: "not found" reads as none)."""
    store = any_store
    write_transactions(writer, seed=3)
    cache, segments = tier(writer, store)
    assert len(writer.txns) >= 10 and len(segments) >= 8
    assert 3 <= sum(has_object(store, store.object_path(s, ".txnindex")) for s in segments) < len(segments)
    reader = RemoteLogReader(cache, store)
    first, last = segments[0].start_offset, segments[-1].end_offset
    rng = random.Random(4)
    for _ in range(300):
        start = rng.randint(first, last)
        end = rng.randint(start, last + 1)
        expected = writer.txns.collect(start, end)
        assert reader.aborted_transactions(start, end) == expected, (start, end)
        assert reader.aborted_transactions(start, end, leader_epoch_history=writer.epochs.entries) == expected


def test_a_transaction_aborted_after_another_is_not_missed(writer, store):
    """Producer 1's transaction begins first and is aborted three segments later; producer 2's
    begins after it and is aborted at once. A read of the first offsets lists both (Kafka's
    rule, stopping at the first marker past the range, would miss producer 1's); a range no
    open transaction spans past is answered from its own segment's indexes alone."""

    def transactional(pid: int, epoch: int, sequence: int) -> bytes:
        return record_batch.build(
            [b"t"], now_ms=START_MS, producer_id=pid, producer_epoch=epoch, base_sequence=sequence, transactional=True
        )

    writer.append(transactional(1, 0, 0))  # offset 0
    writer.append(transactional(2, 0, 0))  # offset 1
    writer.append(record_batch.build_marker(2, 1, False, 0, now_ms=START_MS))  # offset 2
    while len(writer.log.segment_base_offsets) < 4:
        writer.append(record_batch.build([b"p" * 500] * 4, now_ms=START_MS))
    writer.append(record_batch.build_marker(1, 1, False, 0, now_ms=START_MS))
    quiet_from = writer.log.log_end_offset
    for _ in range(30):
        writer.append(record_batch.build([b"q" * 500] * 4, now_ms=START_MS))
    cache, segments = tier(writer, store)
    reader = RemoteLogReader(cache, store)
    assert reader.aborted_transactions(0, 2) == writer.txns.collect(0, 2) == [(2, 1), (1, 0)]
    quiet = next(s for s in segments if s.start_offset > quiet_from)
    misses = reader.stats().index_cache_misses
    assert reader.aborted_transactions(quiet.start_offset, quiet.end_offset + 1) == []
    assert reader.stats().index_cache_misses == misses + 2  # its transaction index and producer snapshot
