"""A consumer group whose members are Ray actors: the partitions are shared among them.

The member that joins first reads every partition until the others arrive; a partition that
moves is handed on at the group's committed offset, so together they count each record once.

It prints its own lines only (and any warning or error); ``--verbose`` shows Ray's and
raylog's INFO lines and the output of Ray's actors too.

Run: ``.venv/bin/python examples/group_in_ray_actors.py [--verbose]``
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid

import pyarrow as pa
import ray
from _support import arguments, configure_output

import raylog
from raylog import Admin, Consumer, NewTopic, Producer


@ray.remote(num_cpus=0)
class Counter:
    """One member of group "counters": counts what its partitions hold."""

    def __init__(self, cluster: raylog.RaylogCluster, topic: str):
        self.consumer = Consumer(
            cluster,
            topic,
            group_id="counters",
            auto_offset_reset="earliest",
            session_timeout_ms=6_000,
            heartbeat_interval_ms=1_000,
        )
        self.count = 0

    def poll(self) -> tuple[list, int]:
        self.count += self.consumer.poll_arrow(timeout_ms=500).num_rows
        return sorted(self.consumer.assignment()), self.count

    def close(self) -> None:
        self.consumer.close()


def main(argv: list[str] | None = None) -> None:
    configure_output(arguments(__doc__).parse_args(argv).verbose)
    data_dir = tempfile.mkdtemp(prefix="raylog-example-")
    cluster = raylog.connect(data_dir=data_dir, cluster_name=f"example-{uuid.uuid4().hex[:8]}")
    try:
        Admin(cluster).create_topics([NewTopic("events", 6)])
        values = pa.array([b"event-%d" % i for i in range(60_000)], pa.binary())
        with Producer(cluster) as producer:
            producer.send_arrow("events", pa.table({"value": values}))
        counters = [Counter.remote(cluster, "events") for _ in range(3)]  # the cluster handle pickles by name
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            states = ray.get([c.poll.remote() for c in counters])
            if sum(count for _, count in states) >= len(values):
                break
        for i, (assignment, count) in enumerate(states):
            print(f"member {i}: partitions {[tp.partition for tp in assignment]}, {count:,} records")
        ray.get([c.close.remote() for c in counters])
    finally:
        cluster.shutdown()
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
