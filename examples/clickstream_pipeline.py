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

It runs on the embedded default (a local Ray and raylog, data in a temporary directory) and
removes everything it created. It prints its own progress (a live display on a terminal,
plain lines otherwise, on stderr) and a summary (stdout), and saves a picture of the run:
throughput and the Spark group's lag over time, and the model against the generator's rule.
``--verbose`` shows everything else too: INFO lines of Ray, raylog and py4j, the output of
Ray's actors, and Spark's own logging.

``--remote-storage URI`` (one setting: ``file:///mnt/store``, ``s3://bucket/prefix``, ...) gives
the cluster a remote store and makes ``clicks`` a tiered topic that keeps its history as
Parquet there: the brokers keep about 512 KiB of each partition on disk, and at the end Spark
reads the whole clickstream back from offset 0, its history from the store's Parquet files.

Run: ``.venv/bin/python examples/clickstream_pipeline.py [--clicks N] [--verbose] [--picture PATH]
[--remote-storage URI]``
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
from _support import Progress, Sampler, arguments, configure_output, spark_log_level

import raylog
from raylog import Admin, NewTopic, Producer
from raylog.ml import TrainingStream

WINDOW_MS = 10_000
PAGES = 60
USERS = 5_000
#: The generator's hidden rule, which the model should find.
BASE_DWELL_MS, DWELL_MS_PER_WORD = 1_500.0, 0.2
CHUNK = 5_000
TOPICS = ("clicks", "page-stats", "user-stats")
#: ``clicks`` with ``--remote-storage``: tiered, its history as Parquet, 256 KiB segments and
#: about 512 KiB of each partition kept on the broker's disk.
TIERED_CLICKS = {
    "remote.storage.enable": "true",
    "remote.storage.history.enable": "true",
    "segment.bytes": str(256 << 10),
    "local.retention.bytes": str(512 << 10),
}
#: Where the picture of the run goes by default.
PICTURE = os.path.join(tempfile.gettempdir(), "raylog-clickstream.png")
#: Rates in the picture are taken over windows of this many seconds.
RATE_WINDOW_S = 2.0
#: Aggregates kept for the picture's model panel.
FIT_POINTS = 2_000


class Tally:
    """What the stages have done, as counts the sampler reads (no remote calls)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.produced = 0  # records acknowledged by raylog
        self.trained = 0  # aggregates the model has seen
        self.model: tuple[float, float] | None = None  # intercept (ms), slope (ms per word)
        #: (aggregates seen, intercept, slope) after each training batch.
        self.model_history: list[tuple[int, float, float]] = []
        #: The latest aggregates as (words, mean dwell ms, clicks).
        self.recent: collections.deque[tuple[float, float, float]] = collections.deque(maxlen=FIT_POINTS)

    def acknowledged(self, records: int) -> None:
        with self._lock:
            self.produced += records

    def trained_on(self, batch: np.ndarray, seen: int, coef: np.ndarray | None) -> None:
        with self._lock:
            self.trained = seen
            self.recent.extend(map(tuple, batch))
            if coef is not None:
                self.model = (float(coef[0]), float(coef[1]))
                self.model_history.append((seen, *self.model))

    def fit(self) -> tuple[np.ndarray, tuple[float, float] | None, np.ndarray]:
        """The recent aggregates (rows of words, mean dwell, clicks), the model, and its history."""
        with self._lock:
            return np.array(self.recent).reshape(-1, 3), self.model, np.array(self.model_history).reshape(-1, 3)

    def read(self, stream) -> dict[str, float]:
        return {
            "produced": self.produced,
            "aggregated": stream.records_committed,
            "batches": stream.batches_committed,
            "trained": self.trained,
        }


@contextlib.contextmanager
def services(
    verbose: bool, progress: Progress, remote_storage: str | None = None
) -> Iterator[tuple[raylog.RaylogCluster, object]]:
    """raylog (embedded, data in a temporary directory) with the job's topics, and Spark on
    Ray; everything is removed on leaving (a remote store keeps the history of ``clicks`` as
    long as the topic lives: it is deleted with it)."""
    started = time.monotonic()
    progress.note("starting raylog and Spark on Ray")
    data_dir = tempfile.mkdtemp(prefix="raylog-clickstream-")
    config = {"remote.log.storage.uri": remote_storage} if remote_storage else None
    cluster = raylog.connect(data_dir=data_dir, cluster_name=f"clickstream-{uuid.uuid4().hex[:8]}", config=config)
    admin = Admin(cluster)
    spark = None
    try:
        clicks = NewTopic("clicks", 6, config=dict(TIERED_CLICKS) if remote_storage else {})
        admin.create_topics([clicks, NewTopic("page-stats", 2), NewTopic("user-stats", 2)])
        import raylog_spark

        spark = raylog_spark.init_spark(
            "clickstream",
            configs={"spark.sql.shuffle.partitions": "4", "spark.ui.showConsoleProgress": "false"},
            log_level=spark_log_level(verbose),
        )
        progress.note(f"raylog and Spark on Ray up in {time.monotonic() - started:.0f} s")
        yield cluster, spark
    finally:
        if spark is not None:
            import raydp

            raydp.stop_spark()
        try:
            existing = set(admin.list_topics())
            admin.delete_topics([t for t in TOPICS if t in existing])
        finally:
            cluster.shutdown()
            shutil.rmtree(data_dir, ignore_errors=True)


def generate(cluster: raylog.RaylogCluster, clicks: int, tally: Tally, rate_per_s: float) -> float:
    """Produce ``clicks`` page views at about ``rate_per_s``; returns the seconds it took.

    Raises:
        The first error a send ended with.
    """
    rng = np.random.default_rng(7)
    words = rng.integers(200, 5_000, PAGES)  # content length of each page
    popularity = rng.dirichlet(np.ones(PAGES))
    started = time.monotonic()
    sends = []
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
            send = producer.send_arrow(
                "clicks", pa.table({"key": keys, "value": pa.array(values, pa.string()).cast(pa.binary())})
            )
            send.add_done_callback(lambda done, n=n: done.exception() is None and tally.acknowledged(n))
            sends.append(send)
            ahead = (sent + n) / rate_per_s - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)  # a steady stream rather than one burst
    for send in sends:
        send.result()
    return time.monotonic() - started


def aggregate(cluster: raylog.RaylogCluster, spark):
    """The Spark job: an exactly-once micro-batch stream from clicks to page-stats and user-stats."""
    from pyspark.sql import functions as F

    import raylog_spark

    schema = "page STRING, user STRING, dwell_ms INT, words INT, ts BIGINT"

    def process(df, batch_id: int):
        """Both aggregates of a batch in one pass (grouping sets), each row with its topic:
        the stream sends them and the batch's offsets in one transaction."""
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


def train(cluster: raylog.RaylogCluster, tally: Tally, stop: threading.Event, result: dict) -> None:
    """Fit mean dwell = a + b * words by least squares, updated with every batch. Any error
    is kept in ``result["error"]`` for the main thread to raise."""

    def decode(table: pa.Table) -> np.ndarray:
        rows = [json.loads(v) for v in table.column("value").to_pylist()]
        return np.array([[r["words"], r["mean_dwell_ms"], r["clicks"]] for r in rows], dtype=np.float64)

    try:
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
                tally.trained_on(batch, seen, np.linalg.solve(xtx, xty) if seen >= 4 else None)
        stream.close()
        if seen >= 4:
            coef = np.linalg.solve(xtx, xty)
            recent = np.vstack(held_out)
            predicted = coef[0] + coef[1] * recent[:, 0]
            truth = recent[:, 1]
            r2 = 1 - np.sum((truth - predicted) ** 2) / max(np.sum((truth - truth.mean()) ** 2), 1e-9)
            result.update(rows=seen, intercept_ms=coef[0], ms_per_100_words=coef[1] * 100, r2=r2)
    except BaseException as exc:  # raised again by main, with its traceback
        result["error"] = exc


def show(progress: Progress, tally: Tally, clicks: int):
    """The sampler's callback: each stage's count, from the tally and the stream."""
    produced_by: float | None = None  # when the last record was acknowledged

    def update(t: float, values: dict[str, float]) -> None:
        nonlocal produced_by
        produced, aggregated = int(values["produced"]), int(values["aggregated"])
        if produced_by is None and produced >= clicks:
            produced_by = t
        seconds = produced_by if produced_by is not None else t
        progress.update("produce", produced, detail=f"{produced / seconds:,.0f} records/s" if seconds > 0 else "")
        progress.update(
            "aggregate",
            aggregated,
            detail=f"{int(values['batches'])} micro-batches, lag {produced - aggregated:,}",
        )
        model = tally.model
        progress.update(
            "train",
            int(values["trained"]),
            detail=f"model {model[0]:.0f} ms + {model[1] * 100:.1f} ms/100 words" if model else "",
        )

    return update


def rates(t: np.ndarray, counts: np.ndarray, window_s: float = RATE_WINDOW_S) -> tuple[np.ndarray, np.ndarray]:
    """Records per second over consecutive windows of about ``window_s``: (window ends, rates)."""
    ends, per_s, start = [], [], 0
    for i in range(1, len(t)):
        if t[i] - t[start] >= window_s or i == len(t) - 1:
            ends.append(t[i])
            per_s.append((counts[i] - counts[start]) / max(t[i] - t[start], 1e-9))
            start = i
    return np.array(ends), np.array(per_s)


def draw_picture(samples: list[tuple[float, dict[str, float]]], tally: Tally, title: str = ""):
    """The run as a matplotlib figure (Agg): throughput, the Spark group's lag, the model's
    fit against the generator's rule, and the model's parameters while it trained.

    Raises:
        ImportError: matplotlib is not installed.
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    t = np.array([s[0] for s in samples])
    produced = np.array([s[1]["produced"] for s in samples])
    aggregated = np.array([s[1]["aggregated"] for s in samples])
    figure = Figure(figsize=(12, 8), layout="constrained")
    throughput, lag, fit, params = figure.subplots(2, 2).flat

    throughput.set_title("throughput")
    for counts, label in ((produced, "produced (acknowledged)"), (aggregated, "consumed (Spark, committed)")):
        ends, per_s = rates(t, counts)
        throughput.step(ends, per_s, where="pre", label=label)
    throughput.set(xlabel="seconds since producing began", ylabel=f"records/s ({RATE_WINDOW_S:.0f} s windows)")
    throughput.legend(loc="upper right")

    lag.set_title("consumer lag (group aggregator on clicks)")
    lag.plot(t, produced - aggregated)
    lag.set(xlabel="seconds since producing began", ylabel="records produced, not yet committed")

    points, model, history = tally.fit()
    fit.set_title("model against the truth")
    words = np.linspace(200, 5_000, 50)
    if len(points):
        fit.scatter(points[:, 0], points[:, 1], s=6, alpha=0.3, label="aggregates (mean dwell per page and window)")
    fit.plot(words, BASE_DWELL_MS + DWELL_MS_PER_WORD * words, "k--", label="truth (the generator's rule)")
    if model:
        fit.plot(words, model[0] + model[1] * words, label="model")
    fit.set(xlabel="page length (words)", ylabel="mean dwell (ms)")
    fit.legend(loc="upper left")

    params.set_title("model parameters while training, against the truth")
    if len(history):
        params.plot(history[:, 0], history[:, 1] / BASE_DWELL_MS, label="intercept / true intercept")
        params.plot(history[:, 0], history[:, 2] / DWELL_MS_PER_WORD, label="slope / true slope")
    params.axhline(1.0, color="k", linestyle="--", label="truth")
    params.set(xlabel="aggregates trained on", ylabel="estimate / truth")
    params.legend(loc="upper right")
    if title:
        figure.suptitle(title)
    return figure


def save_picture(samples, tally: Tally, path: str, title: str = "") -> str:
    """Draw the run (see :func:`draw_picture`) into a PNG at ``path``; returns the path.

    Raises:
        ImportError: matplotlib is not installed.
    """
    draw_picture(samples, tally, title).savefig(path, dpi=80)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__)
    parser.add_argument("--clicks", type=int, default=200_000, help="page views to generate")
    parser.add_argument("--rate", type=float, default=8_000, help="page views per second")
    parser.add_argument("--picture", default=PICTURE, help=f"where the picture of the run goes (default {PICTURE})")
    parser.add_argument(
        "--remote-storage",
        metavar="URI",
        help="a remote store (file:///dir, s3://bucket/prefix, ...): clicks becomes a tiered topic whose history "
        "Spark reads back from Parquet files there at the end",
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    progress = Progress()
    try:
        configure_output(args.verbose, progress)
        with services(args.verbose, progress, args.remote_storage) as (cluster, spark):
            admin = Admin(cluster)
            tally, model = Tally(), {}
            stream = aggregate(cluster, spark)
            progress.add("produce", "stage 1: produce", total=args.clicks)
            progress.add("aggregate", "stage 2: Spark", total=args.clicks)
            progress.add("train", "stage 3: train", unit="aggregates")
            stop_training = threading.Event()
            trainer = threading.Thread(target=train, args=(cluster, tally, stop_training, model), name="trainer")
            trainer.start()
            sampler = Sampler(lambda: tally.read(stream), on_sample=show(progress, tally, args.clicks)).start()
            try:
                produce_s = generate(cluster, args.clicks, tally, args.rate)
                deadline = time.monotonic() + 90
                while stream.records_committed < args.clicks and time.monotonic() < deadline and stream.is_active:
                    time.sleep(0.5)
                stream.stop(timeout_s=60)  # (raises what stopped the stream, if anything did)
            except BaseException:
                with contextlib.suppress(Exception):  # the first error is the one to show
                    stream.stop(timeout_s=60)
                raise
            finally:
                stop_training.set()
                trainer.join(timeout=60)
                sampler.stop()
            if "error" in model:
                raise model["error"]
            progress.close()
            offsets = admin.list_consumer_group_offsets("aggregator")
            describe = admin.describe_topics(list(TOPICS))
            picture = _picture(sampler.samples, tally, args.picture, model)
            lines = summary(args.clicks, produce_s, stream, offsets, describe, model, picture)
            if args.remote_storage:
                lines.append(read_history(cluster, spark, args.clicks))
            print(
                "\nclickstream pipeline: summary",
                *lines,
                f"  wall time         {time.monotonic() - started:.0f} s",
                sep="\n",
            )
            if stream.records_committed < args.clicks:
                print(
                    f"clickstream pipeline: Spark committed {stream.records_committed:,} of {args.clicks:,} records"
                    " within 90 s of the last one produced",
                    file=sys.stderr,
                )
            if not model:
                print("clickstream pipeline: the training stream saw too few aggregates for a model", file=sys.stderr)
            return 0 if stream.records_committed >= args.clicks and model else 1
    finally:
        progress.close()


def read_history(cluster: raylog.RaylogCluster, spark, clicks: int) -> str:
    """Spark reads ``clicks`` back from offset 0 (its history from the store's Parquet files,
    the rest from the brokers): the summary's line about it.

    Raises:
        RuntimeError: the read did not give every click once.
    """
    from pyspark.sql import functions as F

    import raylog_spark
    from raylog import OffsetSpec, TopicPartition
    from raylog.clients.history import history_source

    partitions = [TopicPartition("clicks", p) for p in range(6)]
    local_start = Admin(cluster).list_offsets({tp: OffsetSpec.earliest_local() for tp in partitions})
    history = history_source(cluster, "clicks")
    plans = [history.plan(tp.partition, 0, clicks, read_committed=True) for tp in partitions]
    in_files = sum(plan.history_end_offset for plan in plans if plan is not None)
    started = time.monotonic()
    df = raylog_spark.read_topic(spark, "clicks", cluster=cluster)
    read = df.agg(F.count("*").alias("n"), F.countDistinct("partition", "offset").alias("distinct")).first()
    took = time.monotonic() - started
    if read["n"] != clicks or read["distinct"] != clicks:
        got = f"{read['n']:,} records ({read['distinct']:,} distinct)"
        raise RuntimeError(f"reading clicks back gave {got}, not {clicks:,}")
    below = sum(info.offset for info in local_start.values())
    return (
        f"  history           {clicks:,} clicks read back by Spark from offset 0 in {took:.1f} s:"
        f" {in_files:,} from the store's Parquet files; {below:,} are no longer on the brokers' disks"
    )


def summary(clicks: int, produce_s: float, stream, offsets, describe, model: dict, picture: str) -> list[str]:
    lines = [
        f"  produced          {clicks:,} page views in {produce_s:.1f} s ({clicks / produce_s:,.0f}/s)",
        f"  aggregated        {stream.records_committed:,} by Spark in {stream.batches_committed} micro-batches,"
        " exactly once (transactional, read_committed)",
        f"  aggregates        {stream.records_written:,} to page-stats and user-stats, committed with the group's"
        " offsets in one transaction per batch (transactional id aggregator-0)",
        f"  offsets committed {sum(o.offset for o in offsets.values()):,} over {len(offsets)} partitions"
        " (group aggregator, in the transactions)",
        f"  topics            {', '.join(f'{t.name} ({len(t.partitions)} partitions)' for t in describe)}",
    ]
    if model:
        lines.append(
            f"  model             mean dwell = {model['intercept_ms']:.0f} ms + {model['ms_per_100_words']:.1f} ms"
            f" per 100 words (truth {BASE_DWELL_MS:.0f} + {DWELL_MS_PER_WORD * 100:.1f});"
            f" R^2 {model['r2']:.3f} on the last batches, {model['rows']} aggregates"
        )
    lines.append(f"  picture           {picture}")
    return lines


def _picture(samples, tally: Tally, path: str, model: dict) -> str:
    """Save the picture; what to print for it (its path, or why there is none)."""
    title = "raylog clickstream pipeline"
    if model:
        title += (
            f": mean dwell = {model['intercept_ms']:.0f} ms + {model['ms_per_100_words']:.1f} ms/100 words"
            f" (truth {BASE_DWELL_MS:.0f} + {DWELL_MS_PER_WORD * 100:.1f})"
        )
    try:
        return save_picture(samples, tally, path, title)
    except ImportError:
        return "none: matplotlib is not installed (pip install 'raylog[examples]')"


if __name__ == "__main__":
    sys.exit(main())
