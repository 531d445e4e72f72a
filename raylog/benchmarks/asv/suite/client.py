"""client_bench's quick form: a Producer's send() and send_arrow(), a Consumer's poll() and
poll_arrow(), 100 B records, 1 partition, RF1, acks=1, against a Ray Queue and a bare actor
writing and reading ~1 MiB blobs of the same records, measured in the same process."""

from __future__ import annotations

import dataclasses
import functools

from . import CHEAP_SAMPLES, MILLION, TIMEOUT_S, Samples, add, embedded_cluster, figure

#: Records per sample: client_bench's quick scale has 20,000, too few for its fixed costs
#: (a fresh producer or consumer) not to hide a change of the per-record work.
RECORDS = 200_000
#: Each sample is the best of this many runs, as client_bench reports its figures (the run
#: least disturbed by other work on the machine): single runs of ~50 ms spread by ±25% here.
BEST_OF = 3


def measure() -> Samples:
    from raylog import Admin, NewTopic
    from raylog.benchmarks import client_bench, common

    scale = dataclasses.replace(client_bench.QUICK, records={100: RECORDS}, repeats=BEST_OF)
    work = client_bench.make_workload(100, RECORDS)
    samples: Samples = {}

    def produce(mode: str) -> float:
        return client_bench.timed_produce(cluster, topic, work, mode, scale.timeout_s)[0]

    def consume(method: str) -> float:
        return client_bench.timed_consume(cluster, topic, RECORDS, method, scale)

    with embedded_cluster("raylog-history-client-", ship=("raylog.benchmarks.client_bench",)) as (cluster, workdir):
        topic = "history-client"
        Admin(cluster).create_topics([NewTopic(topic, 1, replication_factor=1)], wait_for_leaders_ms=60_000)
        for _ in range(CHEAP_SAMPLES):
            _, put, got = client_bench.queue_rows(work, "100 B", scale)
            _, write, read = client_bench.file_rows(work, "100 B", scale, workdir)
            send = common.best(functools.partial(produce, "send"), BEST_OF)
            arrow = common.best(functools.partial(produce, "arrow"), BEST_OF)
            poll = common.best(functools.partial(consume, "poll"), BEST_OF)
            poll_arrow = common.best(functools.partial(consume, "poll_arrow"), BEST_OF)
            floors = {"queue_put": RECORDS / put, "file_write": RECORDS / write, "file_read": RECORDS / read}
            for name, seconds in floors.items():
                add(samples, f"floor_{name}_s_per_1m", seconds / RECORDS * MILLION)
            add(samples, "floor_queue_get_s_per_1m", MILLION / got)
            for name, seconds, floor in (
                ("send", send, "queue_put"),
                ("send_arrow", arrow, "file_write"),
                ("poll", poll, "file_read"),
                ("poll_arrow", poll_arrow, "file_read"),
            ):
                add(samples, f"{name}_s_per_1m", seconds / RECORDS * MILLION)
                add(samples, f"{name}_vs_{floor}", seconds / floors[floor])
    return samples


class Client:
    """Seconds per million 100 B records (``_s_per_1m``) and raylog's time over its floor's (``_vs_``)."""

    timeout = TIMEOUT_S

    def setup_cache(self) -> Samples:
        return measure()

    setup_cache.timeout = TIMEOUT_S

    track_send_s_per_1m = figure("send_s_per_1m")
    track_send_arrow_s_per_1m = figure("send_arrow_s_per_1m")
    track_poll_s_per_1m = figure("poll_s_per_1m")
    track_poll_arrow_s_per_1m = figure("poll_arrow_s_per_1m")
    track_send_vs_queue_put = figure("send_vs_queue_put", "ratio")
    track_send_arrow_vs_file_write = figure("send_arrow_vs_file_write", "ratio")
    track_poll_vs_file_read = figure("poll_vs_file_read", "ratio")
    track_poll_arrow_vs_file_read = figure("poll_arrow_vs_file_read", "ratio")
    track_floor_queue_put_s_per_1m = figure("floor_queue_put_s_per_1m")
    track_floor_queue_get_s_per_1m = figure("floor_queue_get_s_per_1m")
    track_floor_file_write_s_per_1m = figure("floor_file_write_s_per_1m")
    track_floor_file_read_s_per_1m = figure("floor_file_read_s_per_1m")
