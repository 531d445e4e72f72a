"""Producer snapshot files: round trip, listing, and every kind of damage caught (no Ray)."""

from __future__ import annotations

import os

import pytest

from raylog.errors import CorruptRecordError
from raylog.storage import producer_snapshot
from raylog.storage.producer_snapshot import SnapshotBatch

ROWS = [
    SnapshotBatch(7, 0, 0, 9, 100, 109, 1_700_000_000_000, 1_700_000_000_100),
    SnapshotBatch(7, 0, 10, 19, 110, 119, 1_700_000_000_001, 1_700_000_000_101),
    SnapshotBatch(2**40, 3, 2**31 - 2, 1, 5, 8, -1, 0),  # a sequence range across the wrap
]


def test_round_trip_and_listing(tmp_path):
    """Rows come back as written; files are listed by offset, rising; delete is idempotent."""
    directory = str(tmp_path)
    producer_snapshot.write(directory, 120, ROWS)
    producer_snapshot.write(directory, 7, [])
    (tmp_path / "00000000000000000007.log").write_bytes(b"")  # not a snapshot
    assert producer_snapshot.offsets(directory) == [7, 120]
    assert producer_snapshot.read(directory, 120) == ROWS and producer_snapshot.read(directory, 7) == []
    assert os.path.basename(producer_snapshot.path(directory, 120)) == "00000000000000000120.snapshot"
    producer_snapshot.delete(directory, 7)
    producer_snapshot.delete(directory, 7)
    assert producer_snapshot.offsets(directory) == [120]


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[:-3],  # torn tail
        lambda data: data[:4],  # shorter than a header
        lambda data: data[:-1] + bytes([data[-1] ^ 0x01]),  # a flipped bit in a row
        lambda data: b"\x00\x09" + data[2:],  # unknown version
        lambda data: data + b"\x00" * producer_snapshot.ROW.size,  # rows the count does not cover
        lambda data: b"",
    ],
)
def test_damage_is_caught(tmp_path, damage):
    """A torn, flipped, extended or foreign file raises CorruptRecordError, never wrong rows."""
    path = producer_snapshot.path(str(tmp_path), 5)
    with open(path, "wb") as f:
        f.write(damage(producer_snapshot.encode(ROWS)))
    with pytest.raises(CorruptRecordError):
        producer_snapshot.read(str(tmp_path), 5)
