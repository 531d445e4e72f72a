"""Crash recovery of a whole Log: whatever a crash leaves on disk, what survives is a prefix of what was written.

A pristine multi-segment log is written once per state (never flushed, flushed midway, closed cleanly) with
exactly known contents; each test copies it, damages the copy as a crash (or a bad disk) would, reopens it and
checks what survived against what was written. No Ray, no sleeps.
"""

from __future__ import annotations

import bisect
import os
import random
import shutil
import struct
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from raylog.common import compression
from raylog.common import record_batch as rb
from raylog.config import LogConfig
from raylog.errors import CorruptRecordError
from raylog.storage.log import RECOVERY_POINT_FILE, Log, TimestampOffset
from raylog.storage.segment import file_name
from tests.helpers import record_rows

CONFIG = {"segment_bytes": 24 * 1024, "index_interval_bytes": 4096}
N_BATCHES = 240
FLUSH_AFTER_BATCH = 150  # the "flushed_midway" log is flushed here, then written on without a flush
NOW_MS = 1_700_000_000_000
READ_BYTES = 64 * 1024
CODECS = [compression.NONE, compression.LZ4, compression.ZSTD]

STATES = ["never_flushed", "flushed_midway", "closed"]

CRASH = settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


# ---------------------------------------------------------------------------------------
# The pristine logs and what was written to them


@dataclass(frozen=True)
class Stored:
    """One batch as it lies on disk."""

    base_offset: int
    next_offset: int
    segment: int  # base offset of its segment
    position: int
    size: int


class Written:
    """What was written to a pristine log, and where each batch lies on disk."""

    def __init__(
        self,
        directory: Path,
        records: list[tuple],
        batches: list[Stored],
        segment_sizes: dict[int, int],
        recovery_point: int,
    ):
        self.directory = directory
        self.records = records  # per offset (from 0): (value, key, timestamp_ms, headers as decoded)
        self.batches = batches  # in offset order
        self.segment_sizes = segment_sizes  # segment base offset -> .log bytes
        self.recovery_point = recovery_point  # as on disk (0 when there is no recovery-point file)

    def __repr__(self) -> str:  # hypothesis prints the fixtures of a failing example
        return (
            f"<Written {self.directory.name}: {len(self.batches)} batches, offsets 0..{self.end_offset - 1}, "
            f"segments {self.segments}, recovery point {self.recovery_point}>"
        )

    @property
    def segments(self) -> list[int]:
        return sorted(self.segment_sizes)

    @property
    def end_offset(self) -> int:
        return len(self.records)

    def in_segment(self, base: int) -> list[Stored]:
        return [b for b in self.batches if b.segment == base]

    def bytes_from(self, batch: Stored) -> int:
        """Bytes from the start of ``batch`` to the end of the log."""
        later = sum(size for base, size in self.segment_sizes.items() if base > batch.segment)
        return self.segment_sizes[batch.segment] - batch.position + later


def _batch(rng: random.Random, first_offset: int) -> tuple[bytes, list[tuple]]:
    """A batch of random shape whose record timestamps rise strictly with the offset."""
    n = rng.randint(1, 8)
    values = [None if rng.random() < 0.05 else rng.randbytes(rng.choice([0, 3, 40, 150, 300])) for _ in range(n)]
    keys = None
    if rng.random() < 0.5:
        keys = [None if rng.random() < 0.2 else b"key-%d" % rng.randrange(50) for _ in range(n)]
    headers = None
    if rng.random() < 0.2:
        headers = [[(f"h{j}", rng.randbytes(3)) for j in range(rng.randint(0, 2))] for _ in range(n)]
    timestamps = [NOW_MS + 5 * (first_offset + i) + rng.randint(0, 4) for i in range(n)]
    data = rb.build(values, keys, timestamps, headers, codec=rng.choice(CODECS))
    keys = keys or [None] * n
    decoded_headers = [None if h is None else [{"key": k, "value": v} for k, v in h] for h in (headers or [None] * n)]
    return data, list(zip(values, keys, timestamps, decoded_headers, strict=True))


def _open(directory) -> Log:
    return Log.open(str(directory), LogConfig.from_properties(CONFIG), clock=lambda: NOW_MS)


def _crash(log: Log) -> None:
    """Let go of the files as a killed process would: no flush, no recovery-point update."""
    for segment in log._segments:
        segment.close()


@contextmanager
def _opened(directory):
    log = _open(directory)
    try:
        yield log
    finally:
        _crash(log)


def _describe(directory: Path, records: list[tuple]) -> Written:
    batches, sizes = [], {}
    for path in sorted(directory.glob("*.log")):
        base = int(path.stem)
        data = path.read_bytes()
        sizes[base] = len(data)
        for position, header in rb.iter_headers(data):
            batches.append(Stored(header.base_offset, header.next_offset, base, position, header.size))
    rp_file = directory / RECOVERY_POINT_FILE
    recovery_point = int(rp_file.read_text()) if rp_file.exists() else 0
    return Written(directory, records, batches, sizes, recovery_point)


def _write_pristine(directory: Path, state: str) -> Written:
    rng = random.Random(20240611)
    records: list[tuple] = []
    log = _open(directory)
    for i in range(N_BATCHES):
        data, batch_records = _batch(rng, len(records))
        info = log.append_as_leader(data, leader_epoch=3)
        assert info.first_offset == len(records)
        records.extend(batch_records)
        if state == "flushed_midway" and i + 1 == FLUSH_AFTER_BATCH:
            log.flush()
    if state == "closed":
        log.close()
    else:
        _crash(log)
    written = _describe(directory, records)
    # The layout the tests rely on.
    assert [b.base_offset for b in written.batches] == sorted(b.base_offset for b in written.batches)
    assert written.batches[-1].next_offset == written.end_offset
    assert len(written.segments) >= 6
    assert len(written.in_segment(written.segments[-1])) >= 5
    expected_rp = {"never_flushed": 0, "closed": written.end_offset}.get(state)
    if expected_rp is None:  # flushed midway: the recovery point lies inside an earlier segment
        assert 0 < written.recovery_point < written.segments[-2]
    else:
        assert written.recovery_point == expected_rp
    return written


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> dict[str, Written]:
    root = tmp_path_factory.mktemp("pristine")
    return {state: _write_pristine(root / state, state) for state in STATES}


def _copy(written: Written, into: Path) -> Path:
    target = Path(tempfile.mkdtemp(dir=into)) / "topic-0"
    shutil.copytree(written.directory, target)
    return target


# ---------------------------------------------------------------------------------------
# What every reopened log must satisfy


def _read_all(log: Log) -> list[tuple[int, tuple]]:
    rows = []
    offset, end = log.log_start_offset, log.log_end_offset
    while offset < end:
        data = log.read(offset, READ_BYTES)
        assert data, f"read({offset}) returned nothing below the log end offset {end}"
        table = rb.decode_table(data, min_offset=offset)
        offsets = table.column("offset").to_pylist()
        assert offsets[:1] == [offset], f"read({offset}) returned offsets starting at {offsets[:1]}"
        rows.extend(zip(offsets, record_rows(table), strict=True))
        offset = offsets[-1] + 1
    return rows


def _assert_exact_prefix(log: Log, written: Written, survivors: int) -> None:
    """The log holds exactly the first ``survivors`` records written, contiguous from offset 0."""
    assert log.log_start_offset == 0
    rows = _read_all(log)
    offsets = [offset for offset, _ in rows]
    assert offsets == list(range(len(rows))), "surviving offsets are not contiguous from the start"
    for offset, record in rows:
        assert record == written.records[offset], f"record at offset {offset} differs from what was written"
    assert len(rows) == survivors
    assert log.log_end_offset == survivors


def _assert_appends_continue(log: Log) -> None:
    """Appends after recovery get offsets from the log end offset on and read back."""
    leo = log.log_end_offset
    data, expected = _batch(random.Random(leo), leo)
    info = log.append_as_leader(data, leader_epoch=4)
    assert (info.first_offset, info.last_offset) == (leo, leo + len(expected) - 1)
    assert log.log_end_offset == leo + len(expected)
    table = rb.decode_table(log.read(leo, READ_BYTES), min_offset=leo)
    assert table.column("offset").to_pylist() == list(range(leo, leo + len(expected)))
    assert record_rows(table) == expected


def _eligible(written: Written) -> list[Stored]:
    """Batches above the recovery point: the only ones a crash can have left half-written."""
    return [b for b in written.batches if b.base_offset >= written.recovery_point]


# ---------------------------------------------------------------------------------------
# Nothing damaged


@pytest.mark.parametrize("state", STATES)
def test_undamaged_log_reopens_with_nothing_truncated(pristine, tmp_path, state):
    """An undamaged log reopens whole: nothing truncated, every record back, appends continue."""
    written = pristine[state]
    with _opened(_copy(written, tmp_path)) as log:
        assert log.recovery.truncated_bytes == 0
        assert log.recovery.deleted_segments == 0
        # Only segments reaching past the recovery point are verified batch by batch.
        ends = written.segments[1:] + [written.end_offset]
        assert log.recovery.recovered_segments == sum(end > written.recovery_point for end in ends)
        assert log.segment_count == len(written.segments)
        _assert_exact_prefix(log, written, written.end_offset)
        _assert_appends_continue(log)


def test_clean_close_after_recovery_reopens_with_nothing_to_recover(pristine, tmp_path):
    """A log recovered from a torn tail, appended to and closed cleanly reopens with nothing to recover."""
    written = pristine["flushed_midway"]
    directory = _copy(written, tmp_path)
    last = written.segments[-1]
    cut = written.in_segment(last)[-1].position + 7  # tear the last batch
    os.truncate(directory / file_name(last, ".log"), cut)
    with _opened(directory) as log:
        assert log.recovery.truncated_bytes == 7
        survivors = log.log_end_offset
        _assert_appends_continue(log)
        total = log.log_end_offset
        log.close()
    assert (directory / RECOVERY_POINT_FILE).read_text() == str(total)
    with _opened(directory) as log:
        assert log.recovery.truncated_bytes == 0
        assert log.recovery.recovered_segments == 0
        assert log.log_end_offset == total
        rows = _read_all(log)
        assert [offset for offset, _ in rows] == list(range(total))
        assert [record for _, record in rows[:survivors]] == written.records[:survivors]


def test_deleted_recovery_point_reverifies_every_segment(pristine, tmp_path):
    """Without a recovery-point file every segment is verified, nothing is lost, and the file is rewritten."""
    written = pristine["closed"]
    directory = _copy(written, tmp_path)
    os.remove(directory / RECOVERY_POINT_FILE)
    with _opened(directory) as log:
        assert log.recovery.recovered_segments == len(written.segments)
        assert (log.recovery.truncated_bytes, log.recovery.deleted_segments) == (0, 0)
        assert log.recovery.rebuilt_indexes
        assert (directory / RECOVERY_POINT_FILE).read_text() == str(written.end_offset)
        _assert_exact_prefix(log, written, written.end_offset)
        _assert_appends_continue(log)


# ---------------------------------------------------------------------------------------
# A torn or extended tail


@pytest.mark.parametrize("state", STATES)
@CRASH
@given(data=st.data())
def test_cut_last_segment_keeps_whole_batches_before_the_cut(pristine, tmp_path, state, data):
    """Cutting the last segment anywhere keeps exactly the whole batches before the cut; the torn rest is counted."""
    written = pristine[state]
    last = written.segments[-1]
    cut = data.draw(st.integers(0, written.segment_sizes[last] - 1), label="cut")
    whole = [b for b in written.in_segment(last) if b.position + b.size <= cut]
    survivors = whole[-1].next_offset if whole else last
    torn = cut - (whole[-1].position + whole[-1].size if whole else 0)
    directory = _copy(written, tmp_path)
    os.truncate(directory / file_name(last, ".log"), cut)
    with _opened(directory) as log:
        assert log.recovery.truncated_bytes == torn
        assert log.recovery.deleted_segments == 0
        assert log.segment_count == len(written.segments)
        _assert_exact_prefix(log, written, survivors)
        _assert_appends_continue(log)


def _plausible_header(base_offset: int, body: int = 24) -> bytes:
    """Bytes that pass every header check (magic, length, counts) but hold no real batch (bad CRC)."""
    buf = bytearray(rb.HEADER_SIZE + body)
    rb.HEADER.pack_into(
        buf, 0, base_offset, len(buf) - rb.LOG_OVERHEAD, 0, rb.MAGIC, 0xBAD, 0, 0, NOW_MS, NOW_MS, -1, -1, -1, 1
    )
    return bytes(buf)


@pytest.mark.parametrize("state", STATES)
@CRASH
@given(garbage=st.binary(min_size=1, max_size=3000))
@example(garbage=b"\x00" * 4096)  # blocks allocated but never written (zeros)
@example(garbage=_plausible_header(0))  # a stale header that walks, with an offset below the recovery point
@example(garbage=_plausible_header(N_BATCHES))  # a header that walks, offset inside the log
def test_garbage_after_last_batch_is_cut(pristine, tmp_path, state, garbage):
    """Garbage after the last batch is cut off, counted, and every written record survives."""
    written = pristine[state]
    directory = _copy(written, tmp_path)
    with open(directory / file_name(written.segments[-1], ".log"), "ab") as f:
        f.write(garbage)
    with _opened(directory) as log:
        assert log.recovery.truncated_bytes == len(garbage)
        _assert_exact_prefix(log, written, written.end_offset)
        _assert_appends_continue(log)


_FLIP_STATES = ["never_flushed", "flushed_midway", "closed_without_recovery_point"]


@pytest.mark.parametrize("state", _FLIP_STATES)
@CRASH
@given(data=st.data())
def test_flipped_bytes_past_recovery_point_cut_the_log_at_the_first_bad_batch(pristine, tmp_path, state, data):
    """Bytes flipped in batches past the recovery point cut the log at the first damaged batch, later segments go."""
    written = pristine["closed" if state == "closed_without_recovery_point" else state]
    eligible = written.batches if state == "closed_without_recovery_point" else _eligible(written)
    flips = data.draw(
        st.lists(
            st.tuples(
                st.sampled_from(eligible),
                # Any byte but base_offset (0-7, outside the CRC: a higher value is a legal gap) and
                # leader_epoch (12-15, outside the CRC, carries no record data).
                st.integers(0, 2**20),
                st.integers(1, 255),
            ),
            min_size=1,
            max_size=3,
        ),
        label="flips",
    )
    directory = _copy(written, tmp_path)
    if state == "closed_without_recovery_point":
        os.remove(directory / RECOVERY_POINT_FILE)
    files = {}
    for batch, where, mask in flips:
        allowed = [8, 9, 10, 11] + list(range(16, batch.size))
        path = directory / file_name(batch.segment, ".log")
        content = files.setdefault(batch.segment, bytearray(path.read_bytes()))
        content[batch.position + allowed[where % len(allowed)]] ^= mask
    for base, content in files.items():
        (directory / file_name(base, ".log")).write_bytes(content)
    original = {base: (written.directory / file_name(base, ".log")).read_bytes() for base in files}
    damaged = [  # flips of the same byte may cancel out
        b
        for b in written.batches
        if b.segment in files
        and files[b.segment][b.position : b.position + b.size] != original[b.segment][b.position : b.position + b.size]
    ]
    with _opened(directory) as log:
        if not damaged:
            assert log.recovery.truncated_bytes == 0
            _assert_exact_prefix(log, written, written.end_offset)
            return
        first_bad = damaged[0]
        assert log.recovery.truncated_bytes == written.bytes_from(first_bad)
        assert log.recovery.deleted_segments == sum(base > first_bad.segment for base in written.segments)
        assert log.segment_count == written.segments.index(first_bad.segment) + 1
        _assert_exact_prefix(log, written, first_bad.base_offset)
        _assert_appends_continue(log)


def test_corrupt_middle_segment_without_recovery_point_drops_everything_after_it(pristine, tmp_path):
    """With the recovery-point file gone, a corrupt batch in a middle segment cuts the log there."""
    written = pristine["closed"]
    middle = written.segments[len(written.segments) // 2]
    victim = written.in_segment(middle)[2]
    directory = _copy(written, tmp_path)
    os.remove(directory / RECOVERY_POINT_FILE)
    _flip_byte(directory / file_name(middle, ".log"), victim.position + victim.size - 1)  # inside the CRC
    later = [base for base in written.segments if base > middle]
    with _opened(directory) as log:
        assert log.recovery.deleted_segments == len(later)
        assert log.recovery.truncated_bytes == written.bytes_from(victim)
        assert not any((directory / file_name(base, ".log")).exists() for base in later)
        assert (directory / RECOVERY_POINT_FILE).read_text() == str(victim.base_offset)
        _assert_exact_prefix(log, written, victim.base_offset)
        _assert_appends_continue(log)


def test_corruption_below_recovery_point_is_left_to_readers(pristine, tmp_path):
    """A byte flipped below the recovery point passes open (as in Kafka) but fails the reader's CRC check."""
    written = pristine["closed"]
    middle = written.segments[len(written.segments) // 2]
    victim = written.in_segment(middle)[1]
    directory = _copy(written, tmp_path)
    _flip_byte(directory / file_name(middle, ".log"), victim.position + rb.HEADER_SIZE + 3, mask=0x01)
    with _opened(directory) as log:
        assert log.recovery.truncated_bytes == 0  # not checked at open: do not demand more
        assert log.log_end_offset == written.end_offset
        data = log.read(victim.base_offset, 1)  # exactly the damaged batch
        assert rb.parse_header(data).base_offset == victim.base_offset
        with pytest.raises(CorruptRecordError):
            rb.decode_table(data)
        before = rb.decode_table(log.read(victim.base_offset - 1, 1), min_offset=victim.base_offset - 1)
        assert record_rows(before)[0] == written.records[victim.base_offset - 1]
        after = rb.decode_table(log.read(victim.next_offset, READ_BYTES), min_offset=victim.next_offset)
        assert record_rows(after)[0] == written.records[victim.next_offset]


# ---------------------------------------------------------------------------------------
# Damaged indexes


def _entries(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def _index_damage(kind: str, index: Path, timeindex: Path, written: Written, base: int) -> None:
    rng = random.Random(kind)
    data = index.read_bytes()
    entries = _entries(data, 8)
    if kind == "delete_index":
        index.unlink()
    elif kind == "delete_timeindex":
        timeindex.unlink()
    elif kind == "delete_both":
        index.unlink()
        timeindex.unlink()
    elif kind == "index_partial_entry":
        index.write_bytes(data[:-3])
    elif kind == "index_zeroed":
        index.write_bytes(bytes(len(data)))
    elif kind == "index_garbage":
        index.write_bytes(rng.randbytes(len(data)))
    elif kind == "index_not_rising":
        index.write_bytes(b"".join(reversed(entries)))
    elif kind == "index_past_end":
        relative, _ = struct.unpack(">II", entries[-1])
        index.write_bytes(b"".join(entries[:-1]) + struct.pack(">II", relative, written.segment_sizes[base] + 999))
    elif kind == "index_wrong_batch":
        # The last entry keeps its offset but points at the start of another batch (entries still rise).
        relative, position = struct.unpack(">II", entries[-1])
        _, before = struct.unpack(">II", entries[-2])
        others = [b.position for b in written.in_segment(base) if b.position > before and b.position != position]
        wrong = min(others, key=lambda p: (p < position, abs(p - position)))  # the next batch, else the one before
        index.write_bytes(b"".join(entries[:-1]) + struct.pack(">II", relative, wrong))
    elif kind == "index_offset_off_by_one":
        relative, position = struct.unpack(">II", entries[-1])
        index.write_bytes(b"".join(entries[:-1]) + struct.pack(">II", relative + 1, position))
    elif kind == "timeindex_partial_entry":
        timeindex.write_bytes(timeindex.read_bytes()[:-5])
    elif kind == "timeindex_garbage":
        timeindex.write_bytes(rng.randbytes(len(timeindex.read_bytes())))
    elif kind == "timeindex_past_end":
        stamps = _entries(timeindex.read_bytes(), 12)
        timestamp, _ = struct.unpack(">qI", stamps[-1])
        timeindex.write_bytes(b"".join(stamps[:-1]) + struct.pack(">qI", timestamp, 10**6))
    else:
        raise AssertionError(kind)


INDEX_DAMAGE = [
    "delete_index",
    "delete_timeindex",
    "delete_both",
    "index_partial_entry",
    "index_zeroed",
    "index_garbage",
    "index_not_rising",
    "index_past_end",
    "index_wrong_batch",
    "index_offset_off_by_one",
    "timeindex_partial_entry",
    "timeindex_garbage",
    "timeindex_past_end",
]


@pytest.mark.parametrize("target", ["last_segment", "every_segment"])
@pytest.mark.parametrize("kind", INDEX_DAMAGE)
def test_damaged_index_is_rebuilt_and_reads_stay_correct(pristine, tmp_path, open_log, kind, target):
    """A deleted or corrupt .index/.timeindex is rebuilt: reads and time lookups stay exact, nothing is cut."""
    written = pristine["closed"]
    directory = tmp_path / "topic-0"  # where open_log opens
    shutil.copytree(written.directory, directory)
    targets = written.segments[-1:] if target == "last_segment" else written.segments
    if target == "every_segment":
        targets = [base for base in targets if (directory / file_name(base, ".index")).stat().st_size >= 16]
        assert len(targets) >= 3
    for base in targets:
        _index_damage(
            kind, directory / file_name(base, ".index"), directory / file_name(base, ".timeindex"), written, base
        )
    log = open_log(**CONFIG)
    timestamps = [record[2] for record in written.records]
    assert log.recovery.truncated_bytes == 0
    assert log.log_end_offset == written.end_offset
    # Every batch of a damaged segment is found from its first offset and from an offset inside it.
    for base in targets:
        for batch in written.in_segment(base):
            for offset in {batch.base_offset, batch.next_offset - 1}:
                table = rb.decode_table(log.read(offset, 1), min_offset=offset)
                assert table.column("offset").to_pylist()[:1] == [offset]
                assert record_rows(table)[0] == written.records[offset]
        # Time lookups: the first record at or after a timestamp.
        for batch in written.in_segment(base)[::3]:
            offset = batch.base_offset + (batch.next_offset - batch.base_offset) // 2
            timestamp = written.records[offset][2]
            for probe in (timestamp - 1, timestamp, timestamp + 1):
                expected = bisect.bisect_left(timestamps, probe)  # timestamps rise with the offset
                found = log.offsets_for_time(probe)
                assert found == TimestampOffset(expected, timestamps[expected]), probe
    # The offset index on disk is rebuilt to what the writes had built (a deleted time index may restart empty,
    # as Kafka restarts it; any other damaged time index is rebuilt).
    for base in targets:
        pristine_index = (written.directory / file_name(base, ".index")).read_bytes()
        assert (directory / file_name(base, ".index")).read_bytes() == pristine_index
        if kind.startswith("timeindex") and base == written.segments[-1]:
            pristine_time = (written.directory / file_name(base, ".timeindex")).read_bytes()
            assert (directory / file_name(base, ".timeindex")).read_bytes() == pristine_time
    _assert_exact_prefix(log, written, written.end_offset)
    _assert_appends_continue(log)


def _flip_byte(path, position: int, mask: int = 0x40) -> None:
    """Flip the bits of ``mask`` in the byte at ``position`` of ``path``."""
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)[0]
        f.seek(position)
        f.write(bytes([byte ^ mask]))


def test_lowering_max_message_bytes_never_cuts_batches_already_written(tmp_path):
    """Recovery keeps whole batches larger than max.message.bytes as altered since they were written."""
    directory = str(tmp_path / "log")
    log = Log.open(directory, LogConfig())
    for i in range(3):
        log.append_as_leader(rb.build([bytes([i]) * 5_000], now_ms=NOW_MS), 0)
    log._segments[-1].close()  # a crash: nothing was flushed, everything is recovered
    reopened = Log.open(directory, LogConfig(max_message_bytes=1_024))
    assert (reopened.log_end_offset, reopened.recovery.truncated_bytes) == (3, 0)
