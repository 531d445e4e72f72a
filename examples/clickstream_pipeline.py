"""raylog's main job: a clickstream through raylog, Spark (RayDP) and a training stream.

1. A generator produces synthetic page views, keyed by user, into the 6-partition topic
   ``clicks`` (Producer.send_arrow: a batch of records per call).
2. A Spark micro-batch stream (raylog_spark.MicroBatchStream, group ``aggregator``) parses
   each batch and counts clicks per page and per user in 10-second event-time windows, into
   ``page-stats`` and ``user-stats``, exactly once: each batch's aggregates and the group's
   offsets commit in one transaction (transactional id ``aggregator-0``), so a failed or
   repeated batch never shows twice to read_committed readers.
3. A training stream (raylog.ml.TrainingStream, group ``trainer``) reads ``page-stats``
   (read_committed, the consumers' default) while it fills and fits a linear model of a
   page's mean dwell time from its content length (the generator's hidden rule: 1.5 s +
   20 ms per 100 words, plus noise).

It runs on the embedded default (a local Ray and raylog, data in a temporary directory),
prints progress and a summary, and removes everything it created.

Run: ``.venv/bin/python examples/clickstream_pipeline.py [--clicks N]``
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import threading
import time
import uuid

import numpy as np
import pyarrow as pa

import raylog
from raylog import Admin, NewTopic, Producer
from raylog.ml import TrainingStream

WINDOW_MS = 10_000
PAGES = 60
USERS = 5_000
#: The generator's hidden rule, which the model should find.
BASE_DWELL_MS, DWELL_MS_PER_WORD = 1_500.0, 0.2
CHUNK = 5_000


class Progress:
    """One status line on stderr, redrawn in place on a terminal and printed every few
    seconds otherwise."""

    def __init__(self) -> None:
        self.fields: dict[str, str] = {}
        self._lock = threading.Lock()
        self._last = 0.0
        self._tty = sys.stderr.isatty()

    def set(self, **fields: object) -> None:
        with self._lock:
            self.fields.update({k: str(v) for k, v in fields.items()})
            now = time.monotonic()
            if self._tty or now - self._last >= 5:
                self._last = now
                line = "  ".join(f"{k} {v}" for k, v in self.fields.items())
                print(("\r" + line) if self._tty else line, end="" if self._tty else "\n", file=sys.stderr, flush=True)

    def done(self) -> None:
        if self._tty:
            print(file=sys.stderr)


def generate(cluster: raylog.RaylogCluster, clicks: int, progress: Progress, rate_per_s: float) -> float:
    """Produce ``clicks`` page views at about ``rate_per_s``; returns the seconds it took."""
    rng = np.random.default_rng(7)
    words = rng.integers(200, 5_000, PAGES)  # content length of each page
    popularity = rng.dirichlet(np.ones(PAGES))
    started = time.monotonic()
    with Producer(cluster, linger_ms=5, compression="lz4") as producer:
        for sent in range(0, clicks, CHUNK):
            n = min(CHUNK, clicks - sent)
            pages = rng.choice(PAGES, n, p=popularity)
            users = rng.integers(0, USERS, n)
            dwell = BASE_DWELL_MS + DWELL_MS_PER_WORD * words[pages] + rng.normal(0, 300, n)
            ts = int(time.time() * 1000) + np.sort(rng.integers(0, 1_000, n))
            values = [
                json.dumps(
                    {"page": f"/p/{p}", "user": f"u{u}", "dwell_ms": int(d), "words": int(words[p]), "ts": int(t)}
                )
                for p, u, d, t in zip(pages, users, dwell, ts, strict=True)
            ]
            keys = pa.array([f"u{u}".encode() for u in users], pa.binary())
            producer.send_arrow(
                "clicks", pa.table({"key": keys, "value": pa.array(values, pa.string()).cast(pa.binary())})
            )
            progress.set(produced=sent + n)
            ahead = (sent + n) / rate_per_s - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)  # a steady stream rather than one burst
    return time.monotonic() - started


def aggregate(cluster: raylog.RaylogCluster, spark, progress: Progress):
    """The Spark job: an exactly-once micro-batch stream from clicks to page-stats and user-stats."""
    from pyspark.sql import functions as F

    import raylog_spark

    schema = "page STRING, user STRING, dwell_ms INT, words INT, ts BIGINT"

    def process(df, batch_id: int):
        """Both aggregates of a batch in one pass (grouping sets), each row with its topic:
        the stream sends them and the batch's offsets in one transaction."""
        progress.set(aggregated=stream.records_committed, batches=batch_id)
        events = (
            df.select(F.from_json(F.col("value").cast("string"), schema).alias("e"))
            .select("e.*")
            .withColumn("window", (F.col("ts") / WINDOW_MS).cast("long"))
        )
        return spark.sql(
            """
            SELECT IF(grouping(user) = 1, 'page-stats', 'user-stats') AS topic,
                   concat_ws('|', coalesce(page, user), cast(window AS STRING)) AS key,
                   IF(grouping(user) = 1,
                      to_json(named_struct('window', window, 'page', page, 'clicks', count(*),
                                           'mean_dwell_ms', avg(dwell_ms), 'words', first(words))),
                      to_json(named_struct('window', window, 'user', user, 'clicks', count(*)))) AS value
            FROM {events}
            GROUP BY GROUPING SETS ((window, page), (window, user))
            """,
            events=events,
        )

    stream = raylog_spark.MicroBatchStream(
        spark,
        "clicks",
        "aggregator",
        process,
        trigger_interval_s=1.0,
        max_records_per_partition=20_000,
        cluster=cluster,
        transactional_id="aggregator-0",
    )
    return stream.start()


def train(cluster: raylog.RaylogCluster, progress: Progress, stop: threading.Event, result: dict) -> None:
    """Fit mean dwell = a + b * words by least squares, updated with every batch."""

    def decode(table: pa.Table) -> np.ndarray:
        rows = [json.loads(v) for v in table.column("value").to_pylist()]
        return np.array([[r["words"], r["mean_dwell_ms"], r["clicks"]] for r in rows], dtype=np.float64)

    xtx, xty, seen = np.zeros((2, 2)), np.zeros(2), 0
    stream = TrainingStream(
        cluster,
        ["page-stats"],
        group_id="trainer",
        batch_size=32,
        decode=decode,
        idle_timeout_s=3.0,
        consumer_config={"session_timeout_ms": 10_000, "heartbeat_interval_ms": 1_000},
    )
    held_out = []
    while not stop.is_set():
        for batch in stream:
            x = np.column_stack([np.ones(len(batch)), batch[:, 0]])
            w = batch[:, 2]  # weight each aggregate by its click count
            xtx += x.T @ (x * w[:, None])
            xty += x.T @ (batch[:, 1] * w)
            seen += len(batch)
            held_out = (held_out + [batch])[-8:]
            if seen >= 4:
                coef = np.linalg.solve(xtx, xty)
                progress.set(trained=seen, model=f"{coef[0]:.0f}ms+{coef[1] * 100:.1f}ms/100w")
    stream.close()
    if seen >= 4:
        coef = np.linalg.solve(xtx, xty)
        recent = np.vstack(held_out)
        predicted = coef[0] + coef[1] * recent[:, 0]
        truth = recent[:, 1]
        r2 = 1 - np.sum((truth - predicted) ** 2) / max(np.sum((truth - truth.mean()) ** 2), 1e-9)
        result.update(rows=seen, intercept_ms=coef[0], ms_per_100_words=coef[1] * 100, r2=r2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clicks", type=int, default=200_000, help="page views to generate")
    parser.add_argument("--rate", type=float, default=8_000, help="page views per second")
    args = parser.parse_args(argv)
    started = time.monotonic()
    data_dir = tempfile.mkdtemp(prefix="raylog-clickstream-")
    cluster = raylog.connect(data_dir=data_dir, cluster_name=f"clickstream-{uuid.uuid4().hex[:8]}")
    admin = Admin(cluster)
    topics = ["clicks", "page-stats", "user-stats"]
    spark = None
    progress = Progress()
    try:
        admin.create_topics([NewTopic("clicks", 6), NewTopic("page-stats", 2), NewTopic("user-stats", 2)])
        import raylog_spark

        spark = raylog_spark.init_spark(
            "clickstream", configs={"spark.sql.shuffle.partitions": "4", "spark.ui.showConsoleProgress": "false"}
        )
        spark.sparkContext.setLogLevel("ERROR")
        print(f"raylog and Spark on Ray up in {time.monotonic() - started:.0f} s", file=sys.stderr)
        stream = aggregate(cluster, spark, progress)
        stop_training, model = threading.Event(), {}
        trainer = threading.Thread(target=train, args=(cluster, progress, stop_training, model))
        trainer.start()
        produce_s = generate(cluster, args.clicks, progress, args.rate)
        deadline = time.monotonic() + 90
        while stream.records_committed < args.clicks and time.monotonic() < deadline and stream.is_active:
            time.sleep(0.5)
        stream.stop(timeout_s=60)
        progress.set(aggregated=stream.records_committed, batches=stream.batches_committed)
        stop_training.set()
        trainer.join(timeout=60)
        progress.done()
        offsets = admin.list_consumer_group_offsets("aggregator")
        describe = admin.describe_topics(topics)
        print("\nclickstream pipeline: summary")
        print(f"  produced          {args.clicks:,} page views in {produce_s:.1f} s ({args.clicks / produce_s:,.0f}/s)")
        print(
            f"  aggregated        {stream.records_committed:,} by Spark in {stream.batches_committed} micro-batches,"
            " exactly once (transactional, read_committed)"
        )
        print(
            f"  aggregates        {stream.records_written:,} to page-stats and user-stats, committed with the group's"
            " offsets in one transaction per batch (transactional id aggregator-0)"
        )
        print(
            f"  offsets committed {sum(o.offset for o in offsets.values()):,} over {len(offsets)} partitions"
            f" (group aggregator, in the transactions)"
        )
        print(f"  topics            {', '.join(f'{t.name} ({len(t.partitions)} partitions)' for t in describe)}")
        if model:
            print(
                f"  model             mean dwell = {model['intercept_ms']:.0f} ms + {model['ms_per_100_words']:.1f} ms"
                f" per 100 words (truth {BASE_DWELL_MS:.0f} + {DWELL_MS_PER_WORD * 100:.1f});"
                f" R^2 {model['r2']:.3f} on the last batches, {model['rows']} aggregates"
            )
        print(f"  wall time         {time.monotonic() - started:.0f} s")
        return 0 if stream.records_committed >= args.clicks and model else 1
    finally:
        if spark is not None:
            import raydp

            raydp.stop_spark()
        try:
            existing = set(admin.list_topics())
            admin.delete_topics([t for t in topics if t in existing])
        finally:
            cluster.shutdown()
            shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
