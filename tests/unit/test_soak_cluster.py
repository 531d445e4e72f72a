"""A soak cluster that fails to start leaves nothing running (no Ray runtime: its Ray
cluster, Ray and raylog are stand-ins)."""

from __future__ import annotations

import pytest

from raylog.chaos import soak
from raylog.errors import RequestTimedOutError


class _RayCluster:
    """ray.cluster_utils.Cluster's part the soak cluster uses."""

    instances: list[_RayCluster] = []

    def __init__(self, **_):
        self.address = "127.0.0.1:6379"
        self.stopped = False
        _RayCluster.instances.append(self)

    def add_node(self, **_):
        return object()

    def wait_for_nodes(self):
        pass

    def shutdown(self):
        self.stopped = True


def test_a_soak_cluster_whose_raylog_does_not_start_stops_ray_and_its_nodes(monkeypatch, tmp_path):
    """CI's run of 9ae7283: the controller's start timed out under load, and the fixture's
    Ray stayed initialized, so 309 tests after it failed on "ray.init twice"."""
    calls = []
    monkeypatch.setattr(soak, "Cluster", _RayCluster)
    monkeypatch.setattr(soak.ray, "init", lambda **_: calls.append("init"))
    monkeypatch.setattr(soak.ray, "shutdown", lambda: calls.append("shutdown"))

    def connect(**_):
        raise RequestTimedOutError("no reply from the actor in time")

    monkeypatch.setattr(soak.raylog, "connect", connect)
    with pytest.raises(RequestTimedOutError):
        with soak.SoakCluster(data_root=str(tmp_path), listeners=True):
            pass
    assert calls == ["init", "shutdown"]
    assert _RayCluster.instances[-1].stopped
