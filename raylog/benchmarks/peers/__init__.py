"""Benchmark of raylog against its peers on one workload: N records of 100 bytes written by
one producer process, then read from the start by one consumer process, and a synchronous
mode (one record at a time, each acknowledged before the next) for acknowledgement latency.

Systems, each started by the benchmark on this machine and stopped after it (on error too):

- raylog, embedded with 3 brokers (``raylog.connect(num_brokers=3, ...)``) on a local Ray
  started here: a 1-partition topic with replication factor 1 written with ``acks=1``, and
  one with replication factor 3 written with ``acks="all"`` (every in-sync replica has each
  record before it is acknowledged). Its fast path: ``Producer.send_arrow`` of a pyarrow
  table of values (batch-sized tables) and ``Consumer.poll_arrow``; its per-record path
  (``send()`` per record, ``poll()`` returning Record objects) is a row of its own, and so
  is the fast path with 8 MiB batches (``batch_size``; raylog's largest), as many bytes per
  call as the Queue's batches carry. The measuring code is ``raylog.benchmarks.perf``, the same as
  ``raylog bench``.
- ``ray.util.queue.Queue`` on the same Ray: ``put_nowait_batch`` / ``get_nowait_batch``.
- In the synchronous mode only, a bare Ray actor call: a no-op method of a threaded actor
  (as a replica is) per record, the floor of any synchronous send through Ray. Targets:
  raylog RF=1's ``send().result()`` p50 <= 1.2x the bare call's, RF=3's <= 3x RF=1's.
- Redis Streams (Debian's redis-server): pipelined ``XADD`` and ``XREAD COUNT``.
- NATS JetStream (Debian's nats-server, ``-js`` with a file store): ``publish_async`` and a
  pull consumer (``fetch``) through nats-py.

Every server listens on 127.0.0.1 on a free port with its data in a temporary directory;
Redis and NATS run first, before Ray starts. Producer and consumer are separate processes
(``python -m raylog.benchmarks.peers.clients``) started one after the other; a process's start-up
and its data generation are not timed. Produce: first send to last acknowledgement, then
the system is checked to hold all N. Consume: first read to the N-th record.

Durability, comparable across systems (stated in the output too): raylog flushes as its
``LogConfig`` defaults say (flush.messages and flush.ms "never", like Kafka: acknowledged =
in the page cache of the leader, or of every in-sync replica for acks=all); Redis with an
append-only file fsync'd every second (``appendfsync everysec``, RDB snapshots off); NATS
JetStream's file store with the server's default sync (OS buffers, periodic fsync by the
server); the Queue keeps records in its actor's memory only.

Bulk sizes: raylog's batches are its default 1 MiB (~9,000 records of 100 B); the peers'
are in ``raylog.benchmarks.peers.clients.BATCH``, each the fastest of a small sweep on this
machine. The table gives records/s, MB/s (10^6 bytes of values), the ratio to raylog RF=1
and to raylog RF=3 of the same mode (their fast path for produce and consume), and for the
synchronous mode the acknowledgement latency p50/p99. Each figure is one run on a shared
2-core machine: compare ratios within one run, not figures across runs.

Usage (or ``python -m raylog.benchmarks.peers``)::

    raylog bench peers [--quick] [--records N] [--json PATH] [--png PATH] [--dir PARENT]
"""
