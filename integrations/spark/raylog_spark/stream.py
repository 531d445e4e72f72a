"""A micro-batch stream from a raylog topic into Spark, with a consumer group's offsets.

Each trigger takes the next offset ranges of the topic (from where the last batch ended up
to the high watermark, see :class:`raylog.data.TopicStream`), turns them into a DataFrame
through Ray Data and RayDP, calls the user's function with it, and commits the ranges' ends
for the group only after the function returned. A crash (the function raising, the driver
dying) therefore repeats at most the batch in flight: with an idempotent sink (keyed by
partition and offset, or upserts) the results are exactly once. A stream started again with
the same group resumes from the committed offsets.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession

from raylog import RaylogCluster
from raylog.data import OffsetSpec, TopicStream
from raylog_spark.topics import check_read_path, dataset_to_spark, ranges_to_spark


class MicroBatchStream:
    """Runs ``process(df, batch_id)`` on each micro-batch of a topic, in a driver thread.

    Triggers come as soon as records are there, at most ``max_records_per_partition`` per
    partition each; while there are none the topic is checked every ``trigger_interval_s``.
    Batch ids count from 0 in every run of a stream (the committed offsets, not the ids,
    carry progress across runs).

    Concurrency: :meth:`start`, :meth:`stop` and :meth:`await_termination` may be called from
    any thread; ``process`` runs in the stream's own thread, one batch at a time.

    Args:
        spark: a session from :func:`raylog_spark.init_spark`.
        topic: the topic to read.
        group_id: the consumer group whose committed offsets are the stream's progress.
        process: called with each batch's DataFrame and id; the batch is committed when it
            returns, and the stream stops when it raises.
        start: where partitions the group never committed start (see
            :data:`raylog.data.OffsetSpec`).
        trigger_interval_s: how often to look for new records while there are none.
        max_records_per_partition: the largest range per partition in one batch (None: all).
        cluster: from :func:`raylog.connect`; default ``raylog.connect()``.
        via: how each batch is read, as :func:`raylog_spark.read_topic`: "executors" (Spark's
            tasks read the batch's ranges when ``process`` queries the DataFrame) or
            "ray_data" (read by Ray Data first, handed to Spark through Ray's object store).

    Raises:
        UnknownTopicOrPartitionError, OffsetOutOfRangeError, ValueError: as
        :class:`raylog.data.TopicStream`; ValueError: ``via`` is not one of READ_PATHS.

    Example:
        >>> def upsert(df, batch_id):                                        # doctest: +SKIP
        ...     df.write.mode("append").parquet(f"/tmp/clicks/batch={batch_id}")
        >>> stream = MicroBatchStream(spark, "clicks", "archiver", upsert).start()  # doctest: +SKIP
        >>> stream.stop()                                                    # doctest: +SKIP
    """

    def __init__(
        self,
        spark: SparkSession,
        topic: str,
        group_id: str,
        process: Callable[[DataFrame, int], object],
        *,
        start: OffsetSpec = "earliest",
        trigger_interval_s: float = 1.0,
        max_records_per_partition: int | None = None,
        cluster: RaylogCluster | None = None,
        via: str = "executors",
    ):
        check_read_path(via)
        self._via = via
        self._spark = spark
        self._process = process
        self._trigger_interval_s = trigger_interval_s
        self._source = TopicStream(
            topic,
            group_id,
            start=start,
            trigger_interval_s=trigger_interval_s,
            max_records_per_partition=max_records_per_partition,
            cluster=cluster,
        )
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"raylog-stream-{topic}-{group_id}", daemon=True)
        self._error: BaseException | None = None
        self.batches_committed = 0
        self.records_committed = 0

    def start(self) -> MicroBatchStream:
        """Start triggering in a background thread; returns ``self``."""
        self._thread.start()
        return self

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop after the batch in flight (which is processed and committed) and wait.

        Raises:
            The exception that stopped the stream before, if one did.
        """
        self._stopping.set()
        self.await_termination(timeout_s)

    def await_termination(self, timeout_s: float | None = None) -> bool:
        """Wait until the stream stopped (by :meth:`stop` or an error).

        Returns:
            True if it stopped, False if ``timeout_s`` passed first.

        Raises:
            The exception raised by ``process`` (or by reading or committing) that stopped it.
        """
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            return False
        if self._error is not None:
            raise self._error
        return True

    @property
    def is_active(self) -> bool:
        return self._thread.is_alive()

    def exception(self) -> BaseException | None:
        """The exception that stopped the stream, if any."""
        return self._error

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                batch = self._source.next_batch(timeout_s=self._trigger_interval_s)
                if batch is None:
                    continue
                if self._via == "executors":
                    df, release = ranges_to_spark(self._spark, self._source.cluster, batch.ranges), _nothing
                else:
                    df, release = dataset_to_spark(self._spark, batch.dataset)
                try:
                    self._process(df, batch.batch_id)
                finally:
                    release()
                batch.commit()
                self.batches_committed += 1
                self.records_committed += batch.record_count
        except BaseException as exc:  # handed to await_termination, as Spark's streams do
            self._error = exc
        finally:
            self._source.close()


def _nothing() -> None:
    """Nothing to release: Spark's tasks read the ranges themselves."""
