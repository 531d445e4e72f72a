"""The cluster's metadata as a state machine over a durable journal.

:class:`MetadataImage` holds brokers, topics and per-partition state (replicas, leader,
leader epoch, ISR). It changes only by :meth:`MetadataImage.apply` of a journal record, so
replaying the journal rebuilds it exactly. Records are msgpack maps with a ``type``:

    cluster   cluster_id                        the first record of a journal
    broker    broker_id, node_id, data_dir      a broker registered or moved to a new node
    topic     name, topic_id, config, replicas  a topic created (replicas per partition)
    partition topic, partition, leader, leader_epoch, isr, replicas, partition_epoch
    delete    name                              a topic deleted
    producer_ids  end                           producer ids below ``end`` are handed out
    reassignment  topic, partition, target      a reassignment under way (empty target: done)

:class:`MetadataJournal` frames each record as ``length u32 | crc32c u32 | msgpack``
(big-endian), fsyncs every append, and on replay stops at (and cuts) a torn or corrupt
tail: what survives is a prefix of what was appended.

Concurrency: single-threaded; the controller actor owns both objects.
"""

from __future__ import annotations

import os
import struct
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import crc32c
import msgpack

from ..config import TopicConfig
from ..errors import (
    InvalidReplicaAssignmentError,
    StorageError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from ..types import BrokerInfo, PartitionInfo, TopicDescription
from .placement import assign_replicas, validate_topic_name

_FRAME = struct.Struct(">II")
#: A journal record is a small map; anything larger is corruption.
MAX_RECORD_BYTES = 16 * 1024 * 1024


class MetadataImage:
    """Brokers, topics and partition states; see the module docstring."""

    def __init__(self) -> None:
        self.cluster_id: str | None = None
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicDescription] = {}
        #: Producer ids below this were (or may have been) handed out; never reuse them.
        self.producer_id_block_end = 0
        #: Reassignments under way: (topic, partition) -> target replicas.
        self.reassignments: dict[tuple[str, int], tuple[int, ...]] = {}

    # --- records in ---------------------------------------------------------------------

    def apply(self, record: dict[str, Any]) -> None:
        kind = record["type"]
        if kind == "cluster":
            self.cluster_id = record["cluster_id"]
        elif kind == "broker":
            self.brokers[record["broker_id"]] = BrokerInfo(record["broker_id"], record["node_id"], record["data_dir"])
        elif kind == "topic":
            name = record["name"]
            partitions = tuple(
                PartitionInfo(name, p, replicas[0], 0, tuple(replicas), tuple(replicas))
                for p, replicas in enumerate(record["replicas"])
            )
            self.topics[name] = TopicDescription(name, record["topic_id"], partitions, dict(record["config"]))
        elif kind == "partition":
            topic = self.topics[record["topic"]]
            partitions = list(topic.partitions)
            partitions[record["partition"]] = replace(
                partitions[record["partition"]],
                leader=record["leader"],
                leader_epoch=record["leader_epoch"],
                isr=tuple(record["isr"]),
                replicas=tuple(record["replicas"]),
                partition_epoch=record["partition_epoch"],
            )
            self.topics[topic.name] = replace(topic, partitions=tuple(partitions))
        elif kind == "delete":
            self.topics.pop(record["name"], None)
            self.reassignments = {k: v for k, v in self.reassignments.items() if k[0] != record["name"]}
        elif kind == "producer_ids":
            self.producer_id_block_end = record["end"]
        elif kind == "reassignment":
            key = (record["topic"], record["partition"])
            if record["target"]:
                self.reassignments[key] = tuple(record["target"])
            else:
                self.reassignments.pop(key, None)
        else:
            raise ValueError(f"unknown metadata record type {kind!r}")

    # --- commands out: validate, then return the records that carry them out -----------

    def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        config: dict[str, Any] | None = None,
        rng=None,
        live: set[int] | None = None,
    ) -> dict[str, Any]:
        """The record creating a topic, after Kafka's validations; replicas go to the
        ``live`` brokers (default: every registered broker).

        Raises:
            InvalidTopicError, TopicAlreadyExistsError, InvalidPartitionsError,
            InvalidReplicationFactorError, InvalidConfigError.
        """
        validate_topic_name(name)
        if name in self.topics:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists")
        properties = TopicConfig.from_properties(config or {}).to_properties()
        brokers = sorted(self.brokers if live is None else live)
        replicas = assign_replicas(num_partitions, replication_factor, brokers, rng)
        return {
            "type": "topic",
            "name": name,
            "topic_id": uuid.uuid4().hex,
            "config": properties,
            "replicas": [list(r) for r in replicas],
        }

    def allocate_producer_ids(self, count: int) -> dict[str, Any]:
        """The record reserving the next ``count`` producer ids."""
        return {"type": "producer_ids", "end": self.producer_id_block_end + count}

    def partitions(self) -> list[PartitionInfo]:
        return [p for topic in self.topics.values() for p in topic.partitions]

    def reassign(self, topic: str, partition: int, target: list[int]) -> list[dict[str, Any]]:
        """Records starting a reassignment of a partition to ``target`` replicas: the
        targets join as extra replicas now; the switch comes once they are all in sync.

        Raises:
            UnknownTopicOrPartitionError, InvalidReplicaAssignmentError.
        """
        info = self.partition(topic, partition)
        target = list(target)
        if not target or len(set(target)) != len(target) or not set(target) <= set(self.brokers):
            raise InvalidReplicaAssignmentError(
                f"target replicas {target} must be distinct registered brokers {sorted(self.brokers)}"
            )
        replicas = tuple(target) + tuple(r for r in info.replicas if r not in target)
        moving = replace(info, replicas=replicas, partition_epoch=info.partition_epoch + 1)
        return [
            {"type": "reassignment", "topic": topic, "partition": partition, "target": target},
            partition_record(moving),
        ]

    def delete_topic(self, name: str) -> dict[str, Any]:
        self.topic(name)
        return {"type": "delete", "name": name}

    def topic(self, name: str) -> TopicDescription:
        """Raises UnknownTopicOrPartitionError when there is no such topic."""
        try:
            return self.topics[name]
        except KeyError:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}") from None

    def partition(self, topic: str, partition: int) -> PartitionInfo:
        partitions = self.topic(topic).partitions
        if not isinstance(partition, int) or not 0 <= partition < len(partitions):
            raise UnknownTopicOrPartitionError(f"topic {topic!r} has no partition {partition!r}")
        return partitions[partition]


class MetadataJournal:
    """An fsync'd, framed, append-only file of metadata records."""

    def __init__(self, path: str):
        self.path = path
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.truncated_bytes = 0

    def replay(self) -> Iterator[dict[str, Any]]:
        """Yield every whole record; cut the file after the last one."""
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return
        position = 0
        while position + _FRAME.size <= len(data):
            length, crc = _FRAME.unpack_from(data, position)
            body = data[position + _FRAME.size : position + _FRAME.size + length]
            if length > MAX_RECORD_BYTES or len(body) < length or crc32c.crc32c(body) != crc:
                break
            try:
                record = msgpack.unpackb(body, raw=False, strict_map_key=False)
            except (ValueError, msgpack.UnpackException):
                break
            yield record
            position += _FRAME.size + length
        if position < len(data):
            self.truncated_bytes = len(data) - position
            with open(self.path, "r+b") as f:
                f.truncate(position)
                os.fsync(f.fileno())

    def append(self, records: list[dict[str, Any]]) -> None:
        """Append and fsync ``records``, all or nothing.

        Raises:
            StorageError: the disk failed; the file is cut back to where it was.
        """
        frames = []
        for record in records:
            body = msgpack.packb(record, use_bin_type=True)
            frames.append(_FRAME.pack(len(body), crc32c.crc32c(body)) + body)
        data = b"".join(frames)
        try:
            with open(self.path, "ab") as f:
                start = f.tell()
                try:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                except OSError:
                    f.truncate(start)
                    raise
        except OSError as exc:
            raise StorageError(f"cannot append to metadata journal {self.path}: {exc}") from exc


def partition_record(info: PartitionInfo) -> dict[str, Any]:
    """The journal record that sets a partition to ``info``."""
    return {
        "type": "partition",
        "topic": info.topic,
        "partition": info.partition,
        "leader": info.leader,
        "leader_epoch": info.leader_epoch,
        "isr": list(info.isr),
        "replicas": list(info.replicas),
        "partition_epoch": info.partition_epoch,
    }
