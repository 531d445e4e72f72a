"""Fixtures for the plain-Python unit tests: a fake clock and log factories (no Ray)."""

from __future__ import annotations

import pytest

from raylog.chaos.simulation import ManualClock as FakeClock
from raylog.config import LogConfig
from raylog.storage.log import Log


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def open_log(tmp_path, clock):
    """``open_log(**config)`` opens (or reopens) the log in one tmp directory."""
    directory = str(tmp_path / "topic-0")
    opened = []

    def _open(**config) -> Log:
        log = Log.open(directory, LogConfig.from_properties(config), clock=clock)
        opened.append(log)
        return log

    yield _open
    for log in opened:
        for segment in log._segments:
            segment.close()


@pytest.fixture(params=["file", "s3"])
def remote_uri(request, tmp_path):
    """Where a test's remote tier lives, once in a local directory and once in a fresh S3
    bucket on the loopback (tiered storage's two kinds of store: a filesystem with
    directories and renames, and an object store without either)."""
    if request.param == "file":
        return f"file://{tmp_path}/remote"
    return request.getfixturevalue("s3_server").new_bucket()
