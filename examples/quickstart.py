"""raylog end to end on the embedded default: a keyed clickstream in, a page count out.

Starts a local Ray and a local raylog cluster (no address to configure), creates a
6-partition topic, produces 300,000 JSON click events keyed by user (lz4, acks=all), reads
them back as Arrow and counts clicks per page, shows Kafka-compatible key placement and a
time-based seek, then deletes the topic and shuts everything down.

It prints its own lines only (and any warning or error); ``--verbose`` shows Ray's and
raylog's INFO lines and the output of Ray's actors too.

Run: .venv/bin/python examples/quickstart.py [--verbose]
"""

from __future__ import annotations

import json
import random
import tempfile
import time

import pyarrow as pa
import pyarrow.compute as pc
from _support import arguments, configure_output

import raylog
from raylog import Admin, Consumer, NewTopic, Producer, TopicPartition

EVENTS = 300_000
PAGES = ["/home", "/search", "/cart", "/checkout", "/item"]


def produce(cluster, topic: str, start_ms: int) -> float:
    rng = random.Random(7)
    started = time.perf_counter()
    with Producer(
        cluster, acks="all", linger_ms=5, compression="lz4", value_serializer=lambda v: json.dumps(v).encode()
    ) as producer:
        for i in range(EVENTS):
            user = rng.randrange(1_000)
            producer.send(
                topic,
                value={"user": user, "page": rng.choice(PAGES), "n": i},
                key=b"user-%d" % user,
                timestamp_ms=start_ms + i,
            )
    return time.perf_counter() - started


def consume_all(cluster, topic: str) -> pa.Table:
    consumer = Consumer(cluster, topic, auto_offset_reset="earliest")
    tables, rows = [], 0
    deadline = time.monotonic() + 60
    while rows < EVENTS and time.monotonic() < deadline:
        table = consumer.poll_arrow(timeout_ms=1_000)
        tables.append(table)
        rows += table.num_rows
    consumer.close()
    return pa.concat_tables(tables)


def main(argv: list[str] | None = None) -> None:
    configure_output(arguments(__doc__).parse_args(argv).verbose)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as data_dir:
        cluster = raylog.connect(data_dir=data_dir)
        admin = Admin(cluster)
        topic = "clicks"
        admin.create_topics([NewTopic(topic, num_partitions=6, config={"retention.ms": "604800000"})])
        print(
            f"raylog up in {time.perf_counter() - t0:.1f} s: {admin.describe_topics([topic])[0].name} "
            f"with {len(admin.describe_topics([topic])[0].partitions)} partitions"
        )

        start_ms = int(time.time() * 1000) - EVENTS
        seconds = produce(cluster, topic, start_ms)
        print(f"produced {EVENTS:,} keyed JSON events in {seconds:.2f} s ({EVENTS / seconds:,.0f} records/s)")

        started = time.perf_counter()
        table = consume_all(cluster, topic)
        seconds = time.perf_counter() - started
        print(f"consumed {table.num_rows:,} records as Arrow in {seconds:.2f} s ({table.num_rows / seconds:,.0f}/s)")

        pages = pc.extract_regex(table.column("value").cast(pa.string()), r'"page": "(?P<page>[^"]+)"')
        counts = pc.value_counts(pc.struct_field(pages, "page")).to_pylist()
        print("clicks per page:", {c["values"]: c["counts"] for c in sorted(counts, key=lambda c: c["values"])})

        user = table.filter(pc.equal(table.column("key"), b"user-42"))
        print(
            f"user-42: {user.num_rows} events, all in partition {set(user.column('partition').to_pylist())} "
            "(murmur2 of the key, as Kafka places it)"
        )

        consumer = Consumer(cluster)
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        found = consumer.offsets_for_times({tp: start_ms + EVENTS // 2})[tp]
        print(f"partition 0: first record at or after the midpoint time is offset {found.offset:,}")

        admin.delete_topics([topic])
        cluster.shutdown()
        assert table.num_rows == EVENTS and len(set(user.column("partition").to_pylist())) == 1
    print(f"done in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
