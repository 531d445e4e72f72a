"""The controller's BrokerFinder in the embedded mode, where every broker's disk is on the
controller's node: stray logs are found and deleted there, without a Ray task (no Ray)."""

from __future__ import annotations

import asyncio
import os

from raylog.actors import broker_finder
from raylog.coordination.metadata import MetadataImage
from raylog.storage import log_dirs
from tests.unit.storage.test_log_dirs import NEW, OLD, write_log


class _NoRayTask:
    def options(self, **_):
        raise AssertionError("the embedded mode started a Ray task (a worker process) for its disk")


def test_an_embedded_broker_back_has_its_stray_logs_deleted_in_the_controllers_process(tmp_path, monkeypatch):
    """A broker that comes back has the logs of topics it no longer holds, and those an earlier
    deletion left behind, deleted from its disk before it counts as found."""
    monkeypatch.setattr(broker_finder, "_remote_mark_stray_logs", _NoRayTask())
    monkeypatch.setattr(broker_finder, "_remote_delete_stray_logs", _NoRayTask())
    data = str(tmp_path)
    write_log(log_dirs.open_log_dir(data, "gone", 0, OLD), [b"x"])
    os.makedirs(os.path.join(data, f"cut-0-{NEW}.{OLD}-stray", "sub"))
    spawned = []

    async def back() -> bool:
        finder = broker_finder.BrokerFinder(MetadataImage(), data, 1, True, spawned.append)
        found = await finder._remove_stray_logs(0, "ab" * 28, data)
        await asyncio.gather(*spawned)
        return found

    assert asyncio.run(back())
    assert os.listdir(data) == []
