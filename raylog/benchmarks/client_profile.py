"""Where the client paths of ``client_bench`` spend their time: cProfile listings.

Profiles, each on its own and on a fresh local Ray with an embedded raylog cluster (as
``client_bench``, same settings), 100 B values, 1-partition topic:

1. ``send()`` loop: the driver's main thread (``send``) and, separately, the producer's
   sender thread (encode + actor call), each with its own ``cProfile.Profile``. Ray's reply
   callbacks run on a Ray thread and are not profiled.
2. ``poll()`` and ``poll_arrow()`` loops reading the data of 1. from offset 0; then one
   ``send_arrow`` of a 1 KiB-value table (main and sender threads profiled as in 1.).
3. Replica side without Ray: the ``Partition`` steps a leader replica's ``produce`` and
   ``fetch`` wrap, in this process: appends of the batches a producer ships (~1 MiB, and
   1-record batches as ``linger_ms=0`` makes them), and reads of 1 MiB.
4. Floors: round trips per second of a no-op async Ray actor (payload 100 B and 1 MiB,
   1 and 5 calls in flight), the cost of any actor call before raylog does anything.
5. ``linger_ms=0`` at 10,000 records/s (no consumer): batches per second and records per
   batch, and how long the producer took to drain what was sent in 3 s.

Usage (or ``python -m raylog.benchmarks.client_profile``)::

    raylog bench client-profile [--records N] [--top K] [--dump DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import os
import pstats
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ray

import raylog
from raylog import Admin, Consumer, NewTopic
from raylog.benchmarks.client_bench import CountingProducer, CountingSender, make_workload
from raylog.benchmarks.common import (
    create_started,
    make_values,
    run_script,
    send_at_rate,
    start_local_ray,
    temp_workdir,
)
from raylog.common import record_batch


def listing(profile: cProfile.Profile, top: int, title: str, dump: str | None) -> None:
    """Print the top functions by own time and by cumulative time."""
    if dump:
        profile.dump_stats(os.path.join(dump, title.replace(" ", "_").replace("/", "_") + ".prof"))
    for key in ("tottime", "cumulative"):
        out = io.StringIO()
        stats = pstats.Stats(profile, stream=out)
        stats.sort_stats(key).print_stats(top)
        body = out.getvalue()
        start = body.find("   ncalls")
        print(f"--- {title}: top {top} by {key} (total {stats.total_tt:.3f} s profiled)")
        print(body[start:].rstrip() if start >= 0 else body.rstrip())
        print()


def profiled_sender(profile: cProfile.Profile) -> type[CountingSender]:
    """A counting Sender class whose thread ``profile`` profiles."""

    class ProfiledSender(CountingSender):
        def run(self) -> None:
            profile.enable()
            try:
                super().run()
            finally:
                profile.disable()

    return ProfiledSender


class ProfiledProducer(CountingProducer):
    """Profiles its sender thread with ``sender_profile``."""

    def __init__(self, *args: Any, sender_profile: cProfile.Profile, **kwargs: Any):
        self._sender_type = profiled_sender(sender_profile)
        super().__init__(*args, **kwargs)


@dataclass
class ProducerProfile:
    """A profiled producer run: ``main`` and ``sender`` threads' profiles and times."""

    main: cProfile.Profile
    sender: cProfile.Profile
    producer: CountingProducer
    call_s: float  # the calls of ``produce`` before flush()
    wall_s: float  # until flush() returned
    cpu_s: float  # this process's CPU time meanwhile

    def line(self, what: str, rate: str, call: str, then: str = "") -> str:
        return (
            f"=== {what}: {rate} under cProfile ({call} {self.call_s:.2f} s, "
            f"{then}flush {self.wall_s - self.call_s:.2f} s; driver CPU "
            f"{self.cpu_s:.2f} s of {self.wall_s:.2f} s wall; {self.producer.batches_sent} batches)"
        )


def profiled_produce(cluster: Any, produce: Callable[[ProfiledProducer], Any]) -> ProducerProfile:
    """``produce(producer)`` then ``flush()`` on a fresh acks=1 producer, the main thread and
    the producer's sender thread each profiled; a future ``produce`` returns is awaited."""
    main, sender = cProfile.Profile(), cProfile.Profile()
    producer = ProfiledProducer(cluster, acks=1, sender_profile=sender)
    wall, cpu = time.perf_counter(), time.process_time()
    main.enable()
    future = produce(producer)
    call_s = time.perf_counter() - wall
    producer.flush(timeout=300)
    main.disable()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if future is not None:
        future.result(timeout=60)
    producer.close(timeout=60)
    return ProducerProfile(main, sender, producer, call_s, wall, cpu)


def profile_send(cluster: Any, topic: str, records: int, top: int, dump: str | None) -> None:
    work = make_workload(100, records)

    def send_all(producer: ProfiledProducer) -> None:
        send = producer.send
        for value in work.values:
            send(topic, value)

    run = profiled_produce(cluster, send_all)
    print(run.line(f"send() loop, {records:,} x 100 B, 1 partition", f"{records / run.wall_s:,.0f} rec/s", "loop"))
    listing(run.main, top, "send loop main thread", dump)
    listing(run.sender, top, "producer sender thread", dump)


def profile_send_arrow(cluster: Any, topic: str, records: int, top: int, dump: str | None) -> None:
    work = make_workload(1024, records)
    run = profiled_produce(cluster, lambda producer: producer.send_arrow(topic, work.table))
    print(
        run.line(
            f"send_arrow, {records:,} x 1 KiB, 1 partition",
            f"{work.value_bytes / run.wall_s / 1e6:,.0f} MB/s",
            "send_arrow call",
            "then ",
        )
    )
    listing(run.main, top, "send_arrow 1KiB main thread", dump)
    listing(run.sender, top, "send_arrow 1KiB sender thread", dump)


def profile_consume(cluster: Any, topic: str, records: int, top: int, dump: str | None) -> None:
    real_wait = ray.wait
    for method, config in (("poll", {}), ("poll_arrow", {}), ("poll_arrow", {"max_partition_fetch_bytes": 8 << 20})):
        consumer = Consumer(cluster, topic, auto_offset_reset="earliest", **config)
        profile = cProfile.Profile()
        got, polls, wait_s = 0, 0, 0.0
        wall, cpu = time.perf_counter(), time.process_time()

        def timed_wait(*args: Any, **kwargs: Any) -> Any:
            nonlocal wait_s
            t = time.perf_counter()
            try:
                return real_wait(*args, **kwargs)
            finally:
                wait_s += time.perf_counter() - t

        ray.wait = timed_wait  # the consumer module calls ray.wait: count the time blocked in it
        try:
            profile.enable()
            while got < records:
                if method == "poll":
                    got += sum(map(len, consumer.poll(timeout_ms=1000).values()))
                else:
                    got += consumer.poll_arrow(timeout_ms=1000).num_rows
                polls += 1
            profile.disable()
        finally:
            ray.wait = real_wait
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        consumer.close()
        print(
            f"=== {method} {config or ''}: {got / wall:,.0f} rec/s under cProfile, {polls} polls; driver CPU "
            f"{cpu:.2f} s of {wall:.2f} s wall; {wait_s:.2f} s blocked in ray.wait (fetch round trips)"
        )
        listing(profile, top, f"{method}{'_8MiB' if config else ''} loop", dump)


def profile_replica(workdir: str, top: int, dump: str | None) -> None:
    """What a leader replica does per produce and fetch call, without Ray or asyncio: the
    :class:`Partition` steps its actor methods wrap, in this process."""
    from raylog.config import TopicConfig
    from raylog.coordination.partition import Partition
    from raylog.storage.log import Log

    config = TopicConfig.from_properties({})
    partition = Partition(
        "prof", 0, 0, Log.open(os.path.join(workdir, "replica", "prof-0"), config.log_config()), config
    )
    partition.become_leader(0, (0,), (0,))
    values = make_values(10_000, 100)
    big = record_batch.build(values)  # ~1 MiB, 10,000 records
    small = [record_batch.build([v]) for v in values[:2_000]]

    def produce_all(batches: list[bytes]) -> float:
        start = time.perf_counter()
        for batch in batches:
            partition.append_as_leader(batch, 1)
        return time.perf_counter() - start

    def fetch_all() -> tuple[float, int]:
        start, offset, n = time.perf_counter(), 0, 0
        while offset < partition.high_watermark:
            data = partition.read(offset, 1 << 20).data
            offset, n = list(record_batch.iter_headers(data))[-1][1].next_offset, n + 1
        return time.perf_counter() - start, n

    produce_all([big] * 3)  # warm-up
    for name, batches in (("1 MiB batches", [big] * 50), ("1-record batches", small)):
        profile = cProfile.Profile()
        profile.enable()
        seconds = produce_all(batches)
        profile.disable()
        records = sum(record_batch.parse_header(b).record_count for b in batches)
        print(
            f"=== replica append (Partition.append_as_leader), {name}, no Ray: {len(batches) / seconds:,.0f} "
            f"calls/s, {seconds / len(batches) * 1e6:,.0f} us/call, {records / seconds:,.0f} rec/s "
            f"({len(batches[0]):,} B per batch)"
        )
        listing(profile, top, f"replica append {name}", dump)
    profile = cProfile.Profile()
    profile.enable()
    seconds, calls = fetch_all()
    profile.disable()
    print(
        f"=== replica read (Partition.read) of 1 MiB, no Ray: {calls / seconds:,.0f} calls/s, "
        f"{seconds / calls * 1e6:,.0f} us/call"
    )
    listing(profile, top, "replica read", dump)
    partition.log.close()


@ray.remote(num_cpus=0)
class Echo:
    async def call(self, payload: Any) -> int:
        return len(payload)


def ray_floor() -> None:
    actor = Echo.remote()
    ray.get(actor.call.remote(b""))
    for size in (100, 1 << 20):
        payload = os.urandom(size)
        for in_flight in (1, 5):
            calls, start, refs = 0, time.perf_counter(), []
            while time.perf_counter() - start < 2.0:
                refs.append(actor.call.remote(payload))
                if len(refs) >= in_flight:
                    ray.get(refs.pop(0))
                calls += 1
            ray.get(refs)
            seconds = time.perf_counter() - start
            print(
                f"=== no-op async actor, {size:,} B payload, {in_flight} in flight: {calls / seconds:,.0f} calls/s "
                f"({seconds / calls * 1e6:,.0f} us/call)"
            )
    ray.kill(actor)


def linger_zero(cluster: Any, topic: str, rate: int = 10_000, seconds: float = 3.0) -> None:
    producer = CountingProducer(cluster, acks=1, linger_ms=0)
    count, value = int(rate * seconds), b"x" * 100
    start = time.perf_counter()
    sending = send_at_rate(count, rate, lambda: producer.send(topic, value))
    producer.flush(timeout=300)
    total = time.perf_counter() - start
    producer.close()
    print(
        f"=== linger_ms=0 at {rate:,} rec/s, no consumer: sent {count:,} in {sending:.2f} s, all acknowledged "
        f"after {total:.2f} s; {producer.batches_sent:,} batches = {producer.batches_sent / total:,.0f} produce "
        f"calls/s, avg {count / producer.batches_sent:.1f} records per batch"
    )


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=300_000, help="records for the send and poll profiles")
    parser.add_argument("--top", type=int, default=18, help="functions listed per profile")
    parser.add_argument("--dump", metavar="DIR", help="also write .prof files to DIR")
    args = parser.parse_args(argv)
    if args.dump:
        os.makedirs(args.dump, exist_ok=True)
    with contextlib.ExitStack() as stack:
        workdir = temp_workdir(stack, "raylog-client-profile-", None)
        profile_replica(workdir, args.top, args.dump)
        start_local_ray(stack)
        cluster = raylog.connect(data_dir=os.path.join(workdir, "data"), cluster_name=f"prof{uuid.uuid4().hex[:8]}")
        stack.callback(cluster.shutdown)
        admin = Admin(cluster)
        topic, latency_topic = f"prof-{uuid.uuid4().hex[:6]}", f"prof-lat-{uuid.uuid4().hex[:6]}"
        create_started(admin, [NewTopic(name, 1, replication_factor=1) for name in (topic, latency_topic)])
        stack.callback(admin.delete_topics, [topic, latency_topic])
        ray_floor()
        profile_send(cluster, topic, args.records, args.top, args.dump)
        profile_consume(cluster, topic, args.records, args.top, args.dump)
        profile_send_arrow(cluster, topic, max(1, args.records // 3), args.top, args.dump)
        linger_zero(cluster, latency_topic)
    return 0


if __name__ == "__main__":
    run_script(main)
