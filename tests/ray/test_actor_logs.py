"""raylog's actors write their INFO lines where Ray keeps actor logs: a replica's worker log
file on its node says which broker leads the new partition, in raylog's format."""

from __future__ import annotations

import glob
import os
import re

import ray

from raylog import TopicPartition
from tests.helpers import wait_until


def _worker_log(pid: int) -> str | None:
    """The stderr log file of the worker process ``pid`` on this node, once Ray has made it."""
    node = next(n for n in ray.nodes() if n["Alive"])
    logs_dir = os.path.join(os.path.dirname(os.path.dirname(node["RayletSocketName"])), "logs")
    found = glob.glob(os.path.join(logs_dir, f"worker-*-{pid}.err"))
    return found[0] if found else None


def test_a_new_leader_is_logged_in_its_worker_log(cluster, topic):
    name = topic(1)
    leader = cluster.metadata(refresh=True).leader(TopicPartition(name, 0))
    pid = ray.get(leader.state.remote())["pid"]
    line = re.compile(
        rf"^\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d,\d{{3}} INFO raylog\.coordination\.partition \[[^\]]+\] "
        rf"{re.escape(name)}-0: broker \d+ leads in leader epoch \d+ from offset 0"
    )

    def logged() -> bool:
        path = _worker_log(pid)
        if path is None:
            return False
        with open(path) as f:
            return any(line.match(entry) for entry in f)

    assert wait_until(logged, timeout_s=30, interval_s=0.2, message="the replica's INFO line in its worker log")
