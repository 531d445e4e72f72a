"""Where a record's end-to-end latency goes: one record through every hop, with timestamps.

A producer in this driver sends 100 B records (``linger_ms=0``) at a fixed rate to a
1-partition topic while a consumer in another process (``raylog.benchmarks.perf.StampReader``, as
``client_bench``'s latency rows) reads them. Every timestamp is the wall clock of this one
machine: the driver's, the consumer actor's, and the leader replica's task spans from Ray's
own task events (``ray.timeline()``). Per record (records sent alone in their batch):

- ``accumulate``: ``send()`` returns -> the sender thread has submitted the produce call
  (accumulator, the sender's wake-up, encoding, Ray's submission);
- ``to leader``: submitted -> the leader's ``produce`` starts (Ray's transport, the
  leader's event loop);
- ``produce``: the leader's ``produce`` (the append; with acks=all, the wait for the ISR);
- ``ack back``: the produce ends -> the producer's future is done (Ray's reply path);
- ``wake``: the produce starts -> the consumer's long-polling fetch ends at the leader (the
  append wakes it on its own thread: it may answer before the produce does);
- ``to consumer``: the fetch ends -> the consumer's poll returns the record;
- ``e2e``: ``send()`` called -> the consumer has the record (accumulate, to leader, wake, to
  consumer); ``ack``: -> the future is done (accumulate, to leader, produce, ack back).

Floors measured in the same run: a round trip (100 B) to a bare threaded Ray actor, as a
replica is (the ``bare call`` every ratio is against), and to an async one; a relay through
a threaded one (a call that wakes a call held by another process), the least an end-to-end
hop through one actor can cost; and the CPU one call costs the actor's process and this one
(psutil), for those bare actors and for a leader's ``produce`` of a one-record batch. Also
the cold path: raylog's one-record append and a plain ``pwrite`` of the same bytes in this
process, back to back and after a 5 ms pause each, as calls at 100 records/s find the
machine (on this VM a pause makes the same append ~10x slower: every sparse hop pays that).

Usage (or ``python -m raylog.benchmarks.latency_trace``)::

    raylog bench latency-trace [--rate R] [--seconds S] [--acks 1|all] [--rf N]
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import os
import struct
import threading
import time
import uuid
from typing import Any

import numpy as np
import ray

import raylog
from raylog import Admin, NewTopic, Producer
from raylog.actors.replica import MAX_CONCURRENCY
from raylog.benchmarks.common import (
    cpu_seconds,
    create_started,
    run_script,
    send_at_rate,
    start_local_ray,
    temp_workdir,
)
from raylog.benchmarks.perf import StampReader
from raylog.clients.producer.sender import Sender
from raylog.common import record_batch
from raylog.config import TopicConfig
from raylog.coordination.partition import Partition
from raylog.protocol import ProduceRequest
from raylog.storage.log import Log

VALUE_BYTES = 100
#: How long Ray's task events of a run may take to reach the GCS.
TASK_EVENTS_WAIT_S = 15.0
HOPS = ("accumulate", "to leader", "produce", "ack back", "wake", "to consumer", "e2e", "ack")


class TracedSender(Sender):
    """Notes when each batch's produce call was submitted: ``(first record's send time_ns,
    records in the batch, submitted time_ns)``."""

    def __init__(self, *args: Any, **kwargs: Any):
        self.dispatched: list[tuple[int, int, int]] = []
        super().__init__(*args, **kwargs)

    def _dispatch(self, batch: Any) -> None:
        first = batch.values[0] if batch.values else None  # (None: a retry, encoded before)
        super()._dispatch(batch)
        if first is not None:
            self.dispatched.append((struct.unpack(">q", first[:8])[0], batch.record_count, time.time_ns()))


class TracedProducer(Producer):
    """A Producer whose sender notes each batch's produce call (see :class:`TracedSender`)."""

    _sender_type = TracedSender

    @property
    def dispatched(self) -> list[tuple[int, int, int]]:
        return self._sender.dispatched


@ray.remote(num_cpus=0, max_concurrency=MAX_CONCURRENCY)
class Relay:
    """A threaded actor as a replica is: a no-op ``echo``, and a held ``take`` answered by
    another process's ``put``."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def put(self) -> int:
        self.event.set()
        return time.time_ns()

    def take(self) -> int:
        self.event.wait()
        self.event.clear()
        return time.time_ns()

    def echo(self, payload: bytes) -> int:
        return len(payload)

    def pid(self) -> int:
        return os.getpid()


@ray.remote(num_cpus=0)
class AsyncEcho:
    """The same call to an async actor (Ray hands each call to its event loop and back)."""

    async def echo(self, payload: bytes) -> int:
        return len(payload)

    def pid(self) -> int:
        return os.getpid()


def cpu_per_call(call: Any, pid: int, calls: int) -> tuple[float, float]:
    """Microseconds of CPU that one ``call()`` (a ref, awaited before the next) costs the
    process ``pid`` and this one, over ``calls`` calls after a few unmeasured ones."""
    ray.get([call() for _ in range(20)])
    callee_s, caller_s = cpu_seconds(pid), cpu_seconds(os.getpid())
    for _ in range(calls):
        ray.get(call())
    return (cpu_seconds(pid) - callee_s) / calls * 1e6, (cpu_seconds(os.getpid()) - caller_s) / calls * 1e6


def cpu_floors(cluster: Any, topic: str, calls: int) -> None:
    """Print the CPU per call of a bare threaded and async actor and of a leader's produce."""
    relay, plain = Relay.remote(), AsyncEcho.remote()
    payload = os.urandom(VALUE_BYTES)
    batch = np.frombuffer(
        record_batch.build([payload], None, None, None, codec=0, now_ms=time.time_ns() // 1_000_000), dtype=np.uint8
    )
    leader = cluster.metadata(refresh=True).leader(raylog.TopicPartition(topic, 0))
    rows = (
        ("bare threaded actor", lambda: relay.echo.remote(payload), ray.get(relay.pid.remote())),
        ("bare async actor", lambda: plain.echo.remote(payload), ray.get(plain.pid.remote())),
        (
            "leader produce, 1 record",
            lambda: leader.produce.remote(ProduceRequest(batch)),
            ray.get(leader.state.remote())["pid"],
        ),
    )
    print(f"--- CPU per call, {calls:,} calls one at a time")
    print(f"{'call':<26}{'callee us':>11}{'caller us':>11}")
    for name, call, pid in rows:
        callee_us, caller_us = cpu_per_call(call, pid, calls)
        print(f"{name:<26}{callee_us:>11.0f}{caller_us:>11.0f}")
    ray.kill(relay)
    ray.kill(plain)


def cold_path(workdir: str, samples: int = 300, pause_s: float = 0.005) -> None:
    """Print what a call's own work costs when calls are sparse: raylog's one-record
    idempotent acks=all append (a Partition over a Log, in this process, no Ray) and a plain
    pwrite of the same bytes, back to back and after a pause before each (as at 100
    records/s: caches and the CPU gone cold in between)."""
    config = TopicConfig.from_properties({})
    directory = os.path.join(workdir, "cold-path")
    os.makedirs(directory)
    partition = Partition("cold", 0, broker_id=1, log=Log.open(directory, config.log_config()), config=config)
    partition.become_leader(leader_epoch=1, replicas=(1,), isr=(1,))
    payload = os.urandom(VALUE_BYTES)
    batches = iter(
        record_batch.build([payload], producer_id=1, producer_epoch=0, base_sequence=i, now_ms=1)
        for i in range(4 * samples)
    )
    sequence = 0

    def append() -> None:
        nonlocal sequence
        partition.append_as_leader(next(batches), -1, first_unacked_sequence=sequence)
        sequence += 1

    fd = os.open(os.path.join(directory, "plain"), os.O_WRONLY | os.O_CREAT)
    offset = 0

    def write() -> None:
        nonlocal offset
        offset += os.pwrite(fd, payload, offset)

    def median_us(step: Any, pause: float) -> float:
        out = []
        for _ in range(samples):
            if pause:
                time.sleep(pause)
            start = time.perf_counter_ns()
            step()
            out.append(time.perf_counter_ns() - start)
        return float(np.median(out)) / 1e3

    try:
        print(f"--- cold path: p50 us of one step, back to back and after a {pause_s * 1e3:g} ms pause each")
        for name, step in (("raylog append, 1 record", append), ("plain pwrite, same bytes", write)):
            hot, cold = median_us(step, 0), median_us(step, pause_s)
            print(f"{name:<26}{hot:>9.1f}{cold:>9.1f}  ({cold / hot:.1f}x)")
    finally:
        os.close(fd)
        partition.log.close()


def round_trips(actor: Any, payload: bytes, samples: int) -> np.ndarray:
    ray.get(actor.echo.remote(payload))
    out = []
    for _ in range(samples):
        start = time.perf_counter_ns()
        ray.get(actor.echo.remote(payload))
        out.append(time.perf_counter_ns() - start)
    return np.array(out) / 1e6


def floors(samples: int) -> dict[str, np.ndarray]:
    """Milliseconds of a bare round trip (100 B) to a threaded actor (as a replica is) and to
    an async one, and of a relay: put -> a take held by the threaded actor returned."""
    relay, plain = Relay.remote(), AsyncEcho.remote()
    payload = os.urandom(VALUE_BYTES)
    bare, other = round_trips(relay, payload, samples), round_trips(plain, payload, samples)
    relays = []
    for _ in range(samples):
        held = relay.take.remote()
        time.sleep(0.002)  # the take is waiting at the actor
        start = time.time_ns()
        relay.put.remote()
        ray.get(held)
        relays.append(time.time_ns() - start)
        time.sleep(0.001)
    ray.kill(relay)
    ray.kill(plain)
    return {"bare call": bare, "async actor call": other, "relay": np.array(relays) / 1e6}


def spans(name: str, since_ns: int) -> list[tuple[int, int]]:
    """``(start, end)`` time_ns of every task named ``name`` that started after ``since_ns``
    in Ray's task events, by start."""
    out = []
    for event in ray.timeline():
        if event.get("ph") == "X" and event.get("cat") == "task::" + name:
            start = int(event["ts"] * 1000)
            if start >= since_ns:
                out.append((start, start + int(event["dur"] * 1000)))
    return sorted(out)


def trace(cluster: Any, topic: str, rate: int, seconds: float, acks: Any) -> dict[str, np.ndarray]:
    reader = ray.remote(StampReader).options(num_cpus=0).remote(cluster, topic)
    producer = TracedProducer(cluster, acks=acks, linger_ms=0)
    acked: dict[int, int] = {}
    pad = b"x" * (VALUE_BYTES - 8)
    count = int(rate * seconds)
    began = time.time_ns()
    try:
        ray.get(reader.ready.remote())
        pending = reader.run.remote(count, 10.0)
        time.sleep(0.2)  # the reader is in its poll loop

        def send_one() -> None:
            now = time.time_ns()
            producer.send(topic, struct.pack(">q", now) + pad).add_done_callback(
                lambda _, now=now: acked.__setitem__(now, time.time_ns())
            )

        send_at_rate(count, rate, send_one)
        producer.flush(timeout=60)
        sent_ns, received_ns = ray.get(pending)
    finally:
        producer.close(timeout=60)
        ray.kill(reader)
    received = dict(zip(sent_ns.tolist(), received_ns.tolist(), strict=True))
    produces: list[tuple[int, int]] = []
    deadline = time.monotonic() + TASK_EVENTS_WAIT_S
    while len(produces) < len(producer.dispatched) and time.monotonic() < deadline:
        time.sleep(0.5)  # workers report task events to the GCS about every second
        produces = spans("PartitionReplicaActor.produce", began)
    fetches = spans("PartitionReplicaActor.fetch", began)
    fetch_ends = sorted(end for _, end in fetches)
    hops: dict[str, list[float]] = {hop: [] for hop in HOPS}
    if len(produces) != len(producer.dispatched):
        raise RuntimeError(f"{len(producer.dispatched)} produce calls sent, {len(produces)} in Ray's task events")
    for (sent, records, submitted), (start, end) in zip(producer.dispatched, produces, strict=True):
        if records != 1 or sent not in received or sent not in acked:
            continue  # several records shared the batch: no hop is that one record's own
        # The fetch that carried the record ended after the append began (the produce's start).
        woke = fetch_ends[bisect.bisect_left(fetch_ends, start)] if fetch_ends[-1] >= start else received[sent]
        for hop, ns in zip(
            HOPS,
            (
                submitted - sent,
                start - submitted,
                end - start,
                acked[sent] - end,
                woke - start,
                received[sent] - woke,
                received[sent] - sent,
                acked[sent] - sent,
            ),
            strict=True,
        ):
            hops[hop].append(ns / 1e6)
    return {hop: np.array(values) for hop, values in hops.items()}


def show(title: str, table: dict[str, np.ndarray], floor_ms: float) -> None:
    print(f"--- {title}")
    print(f"{'hop':<14}{'n':>7}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}{'p50 / bare call':>17}")
    for hop, values in table.items():
        if len(values) == 0:
            print(f"{hop:<14}{0:>7}")
            continue
        p50, p90, p99 = np.percentile(values, [50, 90, 99])
        print(f"{hop:<14}{len(values):>7}{p50:>9.2f}{p90:>9.2f}{p99:>9.2f}{p50 / floor_ms:>16.2f}x")


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, action="append", help="records per second (repeatable; 100 and 1000)")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds of sending per rate")
    parser.add_argument("--acks", default="1", choices=("0", "1", "all"), help="the producer's acks")
    parser.add_argument("--rf", type=int, default=1, help="the topic's replication factor (brokers started)")
    parser.add_argument("--dir", metavar="PARENT", help="parent of the temporary directory")
    args = parser.parse_args(argv)
    acks = args.acks if args.acks == "all" else int(args.acks)
    with contextlib.ExitStack() as stack:
        workdir = temp_workdir(stack, "raylog-latency-trace-", args.dir)
        start_local_ray(stack)
        cluster = raylog.connect(
            data_dir=os.path.join(workdir, "data"), cluster_name=f"trace{uuid.uuid4().hex[:8]}", num_brokers=args.rf
        )
        stack.callback(cluster.shutdown)
        floor = floors(300)
        show("floors (same run)", floor, float(np.median(floor["bare call"])))
        cold_path(workdir)
        admin = Admin(cluster)
        cpu_topic = f"trace-cpu-{uuid.uuid4().hex[:6]}"
        admin.create_topics([NewTopic(cpu_topic, 1, replication_factor=1)], wait_for_leaders_ms=60_000)
        try:
            cpu_floors(cluster, cpu_topic, 1_000)
        finally:
            admin.delete_topics([cpu_topic])
        for rate in args.rate or [100, 1000]:
            topic = f"trace-{uuid.uuid4().hex[:6]}"
            create_started(admin, [NewTopic(topic, 1, replication_factor=args.rf)])
            try:
                table = trace(cluster, topic, rate, args.seconds, acks)
            finally:
                admin.delete_topics([topic])
            show(
                f"{rate:,} rec/s for {args.seconds:g} s, 100 B, linger_ms=0, acks={args.acks}, RF{args.rf}",
                table,
                float(np.median(floor["bare call"])),
            )
    return 0


if __name__ == "__main__":
    run_script(main)
