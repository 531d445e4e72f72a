"""Sparse offset and time indexes: lookups, persistence, truncation, corrupt files."""

from __future__ import annotations

from raylog.storage.index import OffsetIndex, TimeIndex


def test_offset_index_lookups(tmp_path):
    """lookup gives the largest entry at or below the offset; positions look up likewise."""
    index = OffsetIndex(str(tmp_path / "x.index"), base_offset=100, max_bytes=1024)
    assert index.lookup(150) == (100, 0)
    index.append(110, 4_000)
    index.append(125, 9_000)
    assert index.lookup(109) == (100, 0)
    assert index.lookup(110) == (110, 4_000)
    assert index.lookup(124) == (110, 4_000)
    assert index.lookup(10**9) == (125, 9_000)
    assert index.lookup_position(8_999) == 4_000
    assert index.lookup_position(3_999) == 0
    assert index.max_entries == 128 and not index.is_full


def test_offset_index_persists_and_truncates(tmp_path):
    """Entries survive a reopen; truncate_to drops entries at or above the offset."""
    path = str(tmp_path / "x.index")
    index = OffsetIndex(path, 0, 1024)
    for i in range(1, 6):
        index.append(i * 10, i * 1_000)
    index.truncate_to(30)
    index.close()
    again = OffsetIndex(path, 0, 1024)
    assert again.load() and len(again) == 2
    assert again.lookup(99) == (20, 2_000)
    assert again.sanity_check(log_size=2_001) and not again.sanity_check(log_size=2_000)


def test_garbage_index_files_are_refused(tmp_path):
    """A torn or non-monotonic index file loads as empty (and is then rebuilt by the log)."""
    torn = tmp_path / "torn.index"
    torn.write_bytes(b"\x00" * 13)
    index = OffsetIndex(str(torn), 0, 1024)
    assert not index.load() and len(index) == 0
    backwards = tmp_path / "back.index"
    backwards.write_bytes(b"\x00\x00\x00\x05\x00\x00\x00\x10" + b"\x00\x00\x00\x03\x00\x00\x00\x20")
    assert not OffsetIndex(str(backwards), 0, 1024).load()


def test_time_index_only_grows_and_looks_up_below_target(tmp_path):
    """Time entries rise in time and offset; lookup returns an offset safe to scan from."""
    index = TimeIndex(str(tmp_path / "x.timeindex"), base_offset=0, max_bytes=1200)
    index.maybe_append(100, 10)
    index.maybe_append(90, 20)  # older: skipped
    index.maybe_append(200, 30)
    assert len(index) == 2
    assert index.lookup(100) == 0
    assert index.lookup(101) == 10
    assert index.lookup(10**6) == 30
    index.truncate_to(29)
    assert index.lookup(10**6) == 10 and index.last_timestamp == 100
    assert index.sanity_check(next_offset=10) and not index.sanity_check(next_offset=9)
