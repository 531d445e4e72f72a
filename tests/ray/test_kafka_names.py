"""A kafka-python program run on raylog.

``test_a_kafka_python_program_runs_on_raylog`` is written as kafka-python 3 code (the
common calls of its producer, consumer and admin client, and errors caught by its names).
To run it on raylog, only these lines changed:

- the imports: ``from kafka import KafkaProducer, ...`` became the imports below, which
  name raylog's Producer, Consumer and Admin as kafka-python does (``import ... as``) and
  take the other names as they are (``raylog`` exports kafka-python's type and error
  names; ``raylog.errors`` holds every error under kafka-python's name too);
- each constructor's ``bootstrap_servers="localhost:9092"`` became the cluster handle of
  ``raylog.connect()`` (here the session's ``cluster``), as the first positional argument
  (a KafkaConsumer's topics follow it).

Every other line is as kafka-python runs it. What kafka-python offers that this program
leaves out because raylog answers it differently is listed in
``test_where_raylog_answers_differently``.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest

from raylog import Admin as KafkaAdminClient
from raylog import ConfigResource, ConfigResourceType, NewPartitions, NewTopic, OffsetAndMetadata, TopicPartition
from raylog import Consumer as KafkaConsumer
from raylog import Producer as KafkaProducer
from raylog.errors import (
    KafkaError,
    KafkaTimeoutError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

#: How long the program waits for anything (bounded waits, as every test here).
WAIT_S = 60


def test_a_kafka_python_program_runs_on_raylog(cluster):
    topic = f"kafka-python-{uuid.uuid4().hex[:8]}"
    group = f"kafka-python-group-{uuid.uuid4().hex[:8]}"
    stamped = f"{topic}-log-append-time"

    admin = KafkaAdminClient(cluster)  # kafka-python: KafkaAdminClient(bootstrap_servers="localhost:9092")
    admin.create_topics(
        [
            NewTopic(name=topic, num_partitions=2, replication_factor=1, topic_configs={"retention.ms": "3600000"}),
            NewTopic(
                name=stamped,
                num_partitions=1,
                replication_factor=1,
                topic_configs={"message.timestamp.type": "LogAppendTime"},
            ),
        ]
    )
    try:
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([NewTopic(name=topic, num_partitions=2, replication_factor=1)])
        assert topic in admin.list_topics()

        # Producer: send with key, value and headers; get(); callbacks; flush.
        producer = KafkaProducer(
            cluster,  # kafka-python: bootstrap_servers="localhost:9092"
            acks="all",
            linger_ms=5,
            compression_type="lz4",
            key_serializer=str.encode,
            value_serializer=lambda v: json.dumps(v).encode(),
        )
        metadata = producer.send(topic, key="user-1", value={"page": "/home"}, headers=[("source", b"web")]).get(
            timeout=WAIT_S
        )
        assert (metadata.topic, metadata.offset) == (topic, 0) and metadata.partition in (0, 1)
        assert metadata.serialized_key_size == len(b"user-1")
        assert metadata.serialized_value_size == len(b'{"page": "/home"}')
        acknowledged, failed = [], []
        sent_ms = int(time.time() * 1000)  # within the topic's retention.ms (older records would be deleted)
        for i in range(9):
            future = producer.send(topic, key=f"user-{i % 3}", value={"page": f"/p/{i}"}, timestamp_ms=sent_ms + i)
            future.add_callback(acknowledged.append).add_errback(failed.append)
        producer.flush(timeout=WAIT_S)
        assert len(acknowledged) == 9 and not failed and all(m.topic == topic for m in acknowledged)
        producer.close()

        # A record that lingers is not acknowledged within get()'s timeout.
        slow = KafkaProducer(cluster, linger_ms=60_000, batch_size=1 << 20)  # kafka-python: bootstrap_servers=...
        with pytest.raises(KafkaTimeoutError):
            slow.send(topic, b"later").get(timeout=0.2)
        slow.flush(timeout=WAIT_S)
        slow.close()

        # Consumer in a group: subscribe, poll, commit, committed, position, seek, iterate.
        consumer = KafkaConsumer(
            cluster,  # kafka-python: no positional cluster, bootstrap_servers="localhost:9092" below
            topic,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            key_deserializer=lambda k: k.decode() if k is not None else None,
            value_deserializer=lambda v: json.loads(v) if v.startswith(b"{") else v,
            consumer_timeout_ms=2_000,
        )
        messages = []
        deadline = time.monotonic() + WAIT_S
        while len(messages) < 11 and time.monotonic() < deadline:
            for tp, batch in consumer.poll(timeout_ms=1_000).items():
                assert tp.topic == topic
                messages.extend(batch)
        assert len(messages) == 11
        first = next(m for m in messages if m.key == "user-1" and m.value == {"page": "/home"})
        assert first.headers == (("source", b"web"),)
        assert first.timestamp == metadata.timestamp and first.timestamp_type == 0
        assert {m.timestamp for m in messages if isinstance(m.value, dict) and m.value["page"].startswith("/p/")} == {
            sent_ms + i for i in range(9)
        }
        consumer.commit()
        assignment = consumer.assignment()
        assert assignment == {TopicPartition(topic, 0), TopicPartition(topic, 1)}
        for tp in assignment:
            assert consumer.committed(tp) == consumer.position(tp)
        tp = TopicPartition(topic, metadata.partition)
        consumer.commit({tp: OffsetAndMetadata(1, "")})
        assert consumer.committed(tp) == 1
        consumer.seek(tp, 0)
        again = [message for message in consumer if message.partition == tp.partition]  # ends after consumer_timeout_ms
        assert again[0].offset == 0 and again[0].value == {"page": "/home"}
        consumer.seek_to_beginning()
        assert consumer.position(tp) == 0
        consumer.close()

        # The broker's clock: a LogAppendTime topic's records carry the leader's append time.
        producer = KafkaProducer(cluster)  # kafka-python: KafkaProducer(bootstrap_servers="localhost:9092")
        appended = producer.send(stamped, b"stamped", timestamp_ms=1).get(timeout=WAIT_S)
        producer.close()
        assert appended.timestamp > 1
        # kafka-python: KafkaConsumer(stamped, bootstrap_servers="localhost:9092", ...)
        reader = KafkaConsumer(cluster, stamped, auto_offset_reset="earliest", consumer_timeout_ms=2_000)
        (record,) = list(reader)
        reader.close()
        assert (record.timestamp, record.timestamp_type) == (appended.timestamp, 1)

        # Admin: configs, partitions, errors by kafka-python's names.
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "7200000"})])
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, {"flush.ms": "1000"})], incremental=True)
        admin.create_partitions({topic: NewPartitions(total_count=3)})
        lister = KafkaConsumer(cluster)  # kafka-python: KafkaConsumer(bootstrap_servers="localhost:9092")
        deadline = time.monotonic() + WAIT_S
        while lister.partitions_for_topic(topic) != {0, 1, 2} and time.monotonic() < deadline:
            time.sleep(0.1)
        assert lister.partitions_for_topic(topic) == {0, 1, 2} and topic in lister.topics()
        assert lister.partitions_for_topic("no-such-topic") is None
        lister.close()
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.delete_topics(["no-such-topic"])
        producer = KafkaProducer(cluster)  # kafka-python: bootstrap_servers="localhost:9092"
        with pytest.raises(KafkaError):
            producer.send("no-such-topic", b"x").get(timeout=WAIT_S)
        producer.close()
    finally:
        admin.delete_topics([topic, stamped])
    assert topic not in admin.list_topics()


def test_the_configs_the_program_set_are_what_raylog_describes(admin, topic):
    """What alter_configs(...) and alter_configs(..., incremental=True) above did, read back
    with raylog's describe_configs: a replace keeps only the properties given, an
    incremental alter adds to them."""
    name = topic(1, **{"retention.ms": "3600000", "segment.bytes": "1048576"})
    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, name, configs={"retention.ms": "7200000"})])
    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, name, {"flush.ms": "1000"})], incremental=True)
    described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])[name]
    assert {k: e.value for k, e in described.items() if e.source == "topic"} == {
        "retention.ms": "7200000",
        "flush.ms": "1000",
    }


def test_where_raylog_answers_differently(admin, topic):
    """kafka-python calls the program above leaves out, because raylog answers them in its
    own shape (the guide's "Coming from kafka-python" lists them): describe_topics gives
    TopicDescription objects (kafka-python 3: dicts), describe_configs gives
    ``{topic: {property: ConfigEntry}}`` (kafka-python 3: nested dicts by resource type),
    and create_topics has no validate_only."""
    name = topic(2)
    (described,) = admin.describe_topics([name])
    assert described.name == name and [p.partition for p in described.partitions] == [0, 1]
    assert admin.describe_configs([name])[name]["retention.ms"].source == "default"
    with pytest.raises(TypeError, match="validate_only"):
        admin.create_topics([NewTopic(name="never", num_partitions=1, replication_factor=1)], validate_only=True)
