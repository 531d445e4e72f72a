"""Topics as Ray Data datasets: a bounded read, a write, and an unbounded micro-batch stream.

Ray Data's own interfaces: :class:`RaylogDatasource` is a ``ray.data.Datasource`` and
:class:`RaylogDatasink` a ``ray.data.Datasink``, used as any other::

    ds = ray.data.read_datasource(RaylogDatasource(cluster, ["clicks", "views"]), override_num_blocks=12)
    ds.write_datasink(RaylogDatasink(cluster, "clicks-copy", producer_config={"acks": "all"}))

:func:`read_topic` takes the parameters of ``ray.data.read_kafka`` that mean the same here
(topics, start_offset, end_offset, timeout_ms, consumer_config, override_num_blocks, num_cpus
and the other remote parameters, ray_remote_args) and :func:`write_topic` those of
``Dataset.write_kafka`` (producer_config, ray_remote_args, concurrency); both are the source
and sink above with raylog's defaults (one read task per partition, blocks of
READ_BLOCK_BYTES, read tasks of READ_TASK_CPUS).

The pieces, one module each:

- :mod:`raylog.data.source`: :class:`RaylogDatasource`, :func:`read_topic`, and what a read
  task runs (:func:`plan_read_tasks` shares ranges out, :func:`read_range` reads one);
- :mod:`raylog.data.sink`: :class:`RaylogDatasink` and :func:`write_topic`;
- :mod:`raylog.data.stream`: :class:`TopicStream` and its micro-batches (:class:`MicroBatch`);
- :mod:`raylog.data.offsets`: where ranges start and end (:data:`OffsetSpec`,
  :class:`Timestamp`, :class:`Committed`) and how a spec resolves to an offset, which the
  source and the stream share.

Everything here uses raylog's public client API, so it works wherever those clients do.
"""

from raylog.data.offsets import Committed, OffsetSpec, PartitionSpec, Timestamp
from raylog.data.sink import RaylogDatasink, write_topic
from raylog.data.source import (
    MIN_ROWS_PER_READ_TASK,
    READ_BLOCK_BYTES,
    READ_POLL_TIMEOUT_MS,
    READ_STALL_TIMEOUT_S,
    READ_TASK_CPUS,
    Piece,
    RaylogDatasource,
    plan_read_tasks,
    read_range,
    read_topic,
    topic_ranges,
)
from raylog.data.stream import MicroBatch, TopicStream

__all__ = [
    "Committed",
    "MIN_ROWS_PER_READ_TASK",
    "MicroBatch",
    "OffsetSpec",
    "PartitionSpec",
    "Piece",
    "READ_BLOCK_BYTES",
    "READ_POLL_TIMEOUT_MS",
    "READ_STALL_TIMEOUT_S",
    "READ_TASK_CPUS",
    "RaylogDatasink",
    "RaylogDatasource",
    "Timestamp",
    "TopicStream",
    "plan_read_tasks",
    "read_range",
    "read_topic",
    "topic_ranges",
    "write_topic",
]
