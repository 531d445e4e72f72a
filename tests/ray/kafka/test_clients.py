"""Unchanged Kafka clients against raylog's Kafka listener: confluent-kafka (librdkafka),
kafka-python and aiokafka.

Each client produces keyed records (headers, explicit timestamps) that raylog's own Consumer
reads back exactly (the partition raylog's murmur2 partitioner picks for the key, offsets in
send order, keys, values, headers, timestamps); consumes exactly what raylog's Producer wrote;
round-trips every compression codec it supports both ways; produces with acks 0, 1 and all;
gets its own typed error for an oversized record and for an unknown topic (raylog never creates
topics on a client's behalf); looks offsets up (earliest, latest, by timestamp) and seeks; and
its long-poll fetch returns once a record arrives.

Each client is driven through a small adapter with one shape (:class:`Client`), so that every
test runs the same steps with the three clients.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import NamedTuple, Protocol

import pytest

from raylog import Producer
from raylog.clients.partitioner import partition_for_key
from tests.helpers import wait_until

#: How long a client may take to deliver or read what a test expects (a bound, not a measure).
DEADLINE_S = 60.0
#: The long-poll test's fetch waits this long at most on the broker, and its record must come
#: well before that: the broker answered the waiting fetch when the record arrived.
LONG_POLL_WAIT_MS = 30_000
LONG_POLL_BOUND_S = 15.0
#: A topic's max.message.bytes in the oversized-record test, and a value above it.
SMALL_MAX_MESSAGE_BYTES = 1024
OVERSIZED_VALUE = b"x" * 4096
BASE_TIMESTAMP = 1_700_000_000_000


class Sent(NamedTuple):
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int


class Got(NamedTuple):
    """A record as read, by any client: what the tests compare."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int


def got(partition: int, offset: int, key, value, headers, timestamp: int) -> Got:
    return Got(partition, offset, key, value, tuple((k, v) for k, v in headers or ()), timestamp)


def polled(by_partition: dict) -> list[Got]:
    """What a kafka-python or aiokafka poll returned (their ConsumerRecords have the same fields)."""
    return [
        got(r.partition, r.offset, r.key, r.value, r.headers, r.timestamp) for rs in by_partition.values() for r in rs
    ]


def raylog_got(record) -> Got:
    return got(record.partition, record.offset, record.key, record.value, record.headers, record.timestamp)


def keyed_records(count: int, prefix: str = "k") -> list[Sent]:
    return [
        Sent(
            f"{prefix}{i}".encode(),
            f"value {i} ".encode() * (i % 4 + 1),
            (("seq", b"%d" % i), ("empty", b""), ("trace", f"t-{i}".encode())),
            BASE_TIMESTAMP + 1000 * i,
        )
        for i in range(count)
    ]


class Client(Protocol):
    """One Kafka client library behind the operations the tests use."""

    name: str
    #: Every codec this client can produce with here.
    compressions: tuple[str, ...]

    def produce(self, bootstrap: str, topic: str, records: list[Sent], acks="all", compression="none") -> list:
        """Send ``records`` in order; their ``(partition, offset)`` as acknowledged (with acks=0,
        whatever the client makes up). Raises the client's own error for a record that failed."""

    def consume(self, bootstrap: str, topic: str, starts: dict[int, int], count: int) -> list[Got]:
        """Assign the partitions of ``starts``, each from its offset; ``count`` records read, sorted."""

    def offsets(self, bootstrap: str, topic: str, partition: int, timestamp: int) -> tuple[int, int, int | None]:
        """``(earliest, latest, first offset at or after timestamp or None)`` of a partition."""

    def long_poll(self, bootstrap: str, topic: str, arrive: Callable[[], None]) -> list[Got]:
        """Start fetching partition 0 of an empty ``topic`` with a long fetch wait, call
        ``arrive()`` once a fetch is waiting, and return what came within LONG_POLL_BOUND_S."""

    def is_too_large(self, error: BaseException) -> bool:
        """Whether ``error`` is the client's error for Kafka's MESSAGE_TOO_LARGE."""

    def is_unknown_topic(self, error: BaseException) -> bool:
        """Whether ``error`` is what the client raises for a topic that does not exist."""


class ConfluentClient:
    name = "confluent-kafka"
    compressions = ("none", "gzip", "snappy", "lz4", "zstd")

    def produce(self, bootstrap, topic, records, acks="all", compression="none"):
        from confluent_kafka import KafkaException
        from confluent_kafka import Producer as KafkaProducer

        producer = KafkaProducer(
            {
                "bootstrap.servers": bootstrap,
                # librdkafka's default partitioner hashes with CRC32; Java's (and raylog's) is murmur2.
                "partitioner": "murmur2_random",
                "acks": str(acks),
                "compression.type": compression,
                "linger.ms": 5,
                "message.timeout.ms": 20_000,
                "topic.metadata.propagation.max.ms": 2_000,
            }
        )
        reports: list = [None] * len(records)

        def report(index):
            return lambda err, msg: reports.__setitem__(index, err or (msg.partition(), msg.offset()))

        for i, r in enumerate(records):
            producer.produce(
                topic, r.value, r.key, headers=list(r.headers), timestamp=r.timestamp, on_delivery=report(i)
            )
        assert producer.flush(DEADLINE_S) == 0, "confluent-kafka did not deliver within the deadline"
        for outcome in reports:
            if not isinstance(outcome, tuple):
                raise KafkaException(outcome)
        return reports

    def _consumer(self, bootstrap, **config):
        from confluent_kafka import Consumer as KafkaConsumer

        return KafkaConsumer(
            {
                "bootstrap.servers": bootstrap,
                # Needed by librdkafka's consumer even when it only assigns; never joined here.
                "group.id": f"assigned-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                **config,
            }
        )

    @staticmethod
    def _got(msg) -> Got:
        return got(msg.partition(), msg.offset(), msg.key(), msg.value(), msg.headers(), msg.timestamp()[1])

    def _read(self, consumer, count, deadline_s):
        out: list[Got] = []
        deadline = time.monotonic() + deadline_s
        while len(out) < count and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=count - len(out), timeout=0.5):
                assert msg.error() is None, msg.error()
                out.append(self._got(msg))
        return sorted(out)

    def consume(self, bootstrap, topic, starts, count):
        from confluent_kafka import TopicPartition

        consumer = self._consumer(bootstrap)
        try:
            consumer.assign([TopicPartition(topic, p, o) for p, o in starts.items()])
            return self._read(consumer, count, DEADLINE_S)
        finally:
            consumer.close()

    def offsets(self, bootstrap, topic, partition, timestamp):
        from confluent_kafka import TopicPartition

        consumer = self._consumer(bootstrap)
        try:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=DEADLINE_S, cached=False
            )
            (found,) = consumer.offsets_for_times([TopicPartition(topic, partition, timestamp)], timeout=DEADLINE_S)
            assert found.error is None, found.error
            return low, high, (found.offset if found.offset >= 0 else None)
        finally:
            consumer.close()

    def long_poll(self, bootstrap, topic, arrive):
        from confluent_kafka import TopicPartition

        consumer = self._consumer(bootstrap, **{"fetch.wait.max.ms": LONG_POLL_WAIT_MS, "fetch.min.bytes": 1})
        try:
            consumer.assign([TopicPartition(topic, 0, 0)])
            assert consumer.consume(num_messages=1, timeout=1.0) == []
            arrive()
            return self._read(consumer, 1, LONG_POLL_BOUND_S)
        finally:
            consumer.close()

    def is_too_large(self, error):
        from confluent_kafka import KafkaError, KafkaException

        return isinstance(error, KafkaException) and error.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE

    def is_unknown_topic(self, error):
        from confluent_kafka import KafkaError, KafkaException

        return isinstance(error, KafkaException) and error.args[0].code() in (
            KafkaError.UNKNOWN_TOPIC_OR_PART,
            KafkaError._UNKNOWN_TOPIC,
        )


def python_producer_options(bootstrap: str, acks: str, compression: str) -> dict:
    """The producer options kafka-python and aiokafka spell the same."""
    return {
        "bootstrap_servers": bootstrap,
        "acks": acks if acks == "all" else int(acks),
        "compression_type": None if compression == "none" else compression,
        "linger_ms": 5,
    }


class KafkaPythonClient:
    name = "kafka-python"

    #: Every codec (snappy and zstd through the dev extra's python-snappy and zstandard).
    compressions = ("none", "gzip", "snappy", "lz4", "zstd")

    def produce(self, bootstrap, topic, records, acks="all", compression="none"):
        from kafka import KafkaProducer

        producer = KafkaProducer(
            **python_producer_options(bootstrap, acks, compression),
            max_block_ms=3_000,
            request_timeout_ms=20_000,
        )
        try:
            futures = [
                producer.send(topic, value=r.value, key=r.key, headers=list(r.headers), timestamp_ms=r.timestamp)
                for r in records
            ]
            producer.flush(DEADLINE_S)
            return [(m.partition, m.offset) for m in (f.get(timeout=DEADLINE_S) for f in futures)]
        finally:
            producer.close(timeout=DEADLINE_S)

    def _consumer(self, bootstrap, **config):
        from kafka import KafkaConsumer

        return KafkaConsumer(
            bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, auto_offset_reset="earliest", **config
        )

    @staticmethod
    def _read(consumer, count, deadline_s):
        out: list[Got] = []
        deadline = time.monotonic() + deadline_s
        while len(out) < count and time.monotonic() < deadline:
            out += polled(consumer.poll(timeout_ms=500))
        return sorted(out)

    def consume(self, bootstrap, topic, starts, count):
        from kafka import TopicPartition

        consumer = self._consumer(bootstrap)
        try:
            consumer.assign([TopicPartition(topic, p) for p in starts])
            for p, o in starts.items():
                consumer.seek(TopicPartition(topic, p), o)
            return self._read(consumer, count, DEADLINE_S)
        finally:
            consumer.close()

    def offsets(self, bootstrap, topic, partition, timestamp):
        from kafka import TopicPartition

        tp = TopicPartition(topic, partition)
        consumer = self._consumer(bootstrap)
        try:
            found = consumer.offsets_for_times({tp: timestamp})[tp]
            low, high = consumer.beginning_offsets([tp])[tp], consumer.end_offsets([tp])[tp]
            return low, high, (None if found is None else found.offset)
        finally:
            consumer.close()

    def long_poll(self, bootstrap, topic, arrive):
        from kafka import TopicPartition

        tp = TopicPartition(topic, 0)
        consumer = self._consumer(
            bootstrap, fetch_max_wait_ms=LONG_POLL_WAIT_MS, request_timeout_ms=LONG_POLL_WAIT_MS + 15_000
        )
        try:
            consumer.assign([tp])
            consumer.seek(tp, 0)
            assert consumer.poll(timeout_ms=1_000) == {}
            arrive()
            return self._read(consumer, 1, LONG_POLL_BOUND_S)
        finally:
            consumer.close()

    def is_too_large(self, error):
        from kafka.errors import MessageSizeTooLargeError

        return isinstance(error, MessageSizeTooLargeError)

    def is_unknown_topic(self, error):
        # kafka-python waits max_block_ms for the topic to appear in the metadata, then gives up.
        from kafka.errors import KafkaTimeoutError

        return isinstance(error, KafkaTimeoutError)


class AioKafkaClient:
    name = "aiokafka"
    compressions = ("none", "gzip", "snappy", "lz4", "zstd")

    def produce(self, bootstrap, topic, records, acks="all", compression="none"):
        return asyncio.run(self._produce(bootstrap, topic, records, acks, compression))

    async def _produce(self, bootstrap, topic, records, acks, compression):
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(**python_producer_options(bootstrap, acks, compression), request_timeout_ms=5_000)
        await producer.start()
        try:
            futures = [
                await producer.send(topic, value=r.value, key=r.key, headers=list(r.headers), timestamp_ms=r.timestamp)
                for r in records
            ]
            done = await asyncio.wait_for(asyncio.gather(*futures), DEADLINE_S)
            # (acks=0: aiokafka answers None.)
            return [None if m is None else (m.partition, m.offset) for m in done]
        finally:
            await producer.stop()

    def _consumer(self, bootstrap, **config):
        from aiokafka import AIOKafkaConsumer

        return AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, auto_offset_reset="earliest", **config
        )

    @staticmethod
    async def _read(consumer, count, deadline_s):
        out: list[Got] = []
        deadline = time.monotonic() + deadline_s
        while len(out) < count and time.monotonic() < deadline:
            out += polled(await consumer.getmany(timeout_ms=500))
        return sorted(out)

    def consume(self, bootstrap, topic, starts, count):
        return asyncio.run(self._consume(bootstrap, topic, starts, count))

    async def _consume(self, bootstrap, topic, starts, count):
        from aiokafka import TopicPartition

        consumer = self._consumer(bootstrap)
        await consumer.start()
        try:
            consumer.assign([TopicPartition(topic, p) for p in starts])
            for p, o in starts.items():
                consumer.seek(TopicPartition(topic, p), o)
            return await self._read(consumer, count, DEADLINE_S)
        finally:
            await consumer.stop()

    def offsets(self, bootstrap, topic, partition, timestamp):
        return asyncio.run(self._offsets(bootstrap, topic, partition, timestamp))

    async def _offsets(self, bootstrap, topic, partition, timestamp):
        from aiokafka import TopicPartition

        tp = TopicPartition(topic, partition)
        consumer = self._consumer(bootstrap)
        await consumer.start()
        try:
            found = (await consumer.offsets_for_times({tp: timestamp}))[tp]
            low = (await consumer.beginning_offsets([tp]))[tp]
            high = (await consumer.end_offsets([tp]))[tp]
            return low, high, (None if found is None else found.offset)
        finally:
            await consumer.stop()

    def long_poll(self, bootstrap, topic, arrive):
        return asyncio.run(self._long_poll(bootstrap, topic, arrive))

    async def _long_poll(self, bootstrap, topic, arrive):
        from aiokafka import TopicPartition

        tp = TopicPartition(topic, 0)
        consumer = self._consumer(
            bootstrap, fetch_max_wait_ms=LONG_POLL_WAIT_MS, request_timeout_ms=LONG_POLL_WAIT_MS + 15_000
        )
        await consumer.start()
        try:
            consumer.assign([tp])
            consumer.seek(tp, 0)
            assert await consumer.getmany(timeout_ms=1_000) == {}
            await asyncio.to_thread(arrive)
            return await self._read(consumer, 1, LONG_POLL_BOUND_S)
        finally:
            await consumer.stop()

    def is_too_large(self, error):
        from aiokafka.errors import MessageSizeTooLargeError

        return isinstance(error, MessageSizeTooLargeError)

    def is_unknown_topic(self, error):
        from aiokafka.errors import UnknownTopicOrPartitionError

        return isinstance(error, UnknownTopicOrPartitionError)


CLIENTS: list[Client] = [ConfluentClient(), KafkaPythonClient(), AioKafkaClient()]
CLIENT_IDS = [c.name for c in CLIENTS]
CODEC_CASES = [pytest.param(c, codec, id=f"{c.name}-{codec}") for c in CLIENTS for codec in c.compressions]


def expected_placement(records: list[Sent], partitions: int) -> list[Got]:
    """Where raylog's partitioner puts each keyed record, with offsets counted per partition in
    send order."""
    next_offset = [0] * partitions
    out = []
    for r in records:
        p = partition_for_key(r.key, partitions)
        out.append(Got(p, next_offset[p], r.key, r.value, r.headers, r.timestamp))
        next_offset[p] += 1
    return out


@pytest.mark.parametrize("client", CLIENTS, ids=CLIENT_IDS)
def test_keyed_records_a_client_produced_are_read_back_exactly_by_raylog(client, bootstrap, kafka_topic, read_back):
    """Partition by murmur2 as raylog's own partitioner, offsets in send order, keys, values,
    headers and timestamps as sent."""
    topic = kafka_topic(num_partitions=3)
    records = keyed_records(30)
    expected = expected_placement(records, 3)
    assert client.produce(bootstrap, topic, records) == [(g.partition, g.offset) for g in expected]
    assert [raylog_got(r) for r in read_back(topic, 3)] == sorted(expected)


@pytest.mark.parametrize("client", CLIENTS, ids=CLIENT_IDS)
def test_a_client_reads_exactly_what_raylogs_producer_wrote(client, bootstrap, kafka_cluster, kafka_topic):
    topic = kafka_topic(num_partitions=2)
    records = [*keyed_records(20), Sent(None, b"no key", (("null", None),), BASE_TIMESTAMP + 99_000)]
    with Producer(kafka_cluster, acks="all", linger_ms=5) as producer:
        futures = [
            producer.send(topic, r.value, key=r.key, headers=list(r.headers), timestamp_ms=r.timestamp, partition=i % 2)
            for i, r in enumerate(records)
        ]
        written = [f.get(timeout=DEADLINE_S) for f in futures]
    expected = sorted(
        Got(m.partition, m.offset, r.key, r.value, r.headers, r.timestamp)
        for m, r in zip(written, records, strict=True)
    )
    assert client.consume(bootstrap, topic, {0: 0, 1: 0}, len(records)) == expected


@pytest.mark.parametrize(("client", "codec"), CODEC_CASES)
def test_every_codec_the_client_has_round_trips(client, codec, bootstrap, kafka_cluster, kafka_topic, read_back):
    """Produced compressed by the client: raylog and the client read the records back. Written
    compressed by raylog's Producer: the client reads them."""
    topic = kafka_topic()
    records = keyed_records(25, prefix=f"{codec}-")
    expected = [Got(0, i, r.key, r.value, r.headers, r.timestamp) for i, r in enumerate(records)]
    assert client.produce(bootstrap, topic, records, compression=codec) == [(0, i) for i in range(25)]
    assert [raylog_got(r) for r in read_back(topic)] == expected
    assert client.consume(bootstrap, topic, {0: 0}, 25) == expected

    with Producer(kafka_cluster, compression_type=codec, linger_ms=5) as producer:
        futures = [
            producer.send(topic, r.value, key=r.key, headers=list(r.headers), timestamp_ms=r.timestamp) for r in records
        ]
        assert [f.get(timeout=DEADLINE_S).offset for f in futures] == list(range(25, 50))
    again = [g._replace(offset=g.offset + 25) for g in expected]
    assert client.consume(bootstrap, topic, {0: 25}, 25) == again


@pytest.mark.parametrize("acks", ["0", "1", "all"])
@pytest.mark.parametrize("client", CLIENTS, ids=CLIENT_IDS)
def test_acks(client, acks, bootstrap, kafka_topic, read_back):
    """acks=1 and all are answered with the offsets. acks=0 is not answered (each client makes
    its own stand-in offsets: None, -1, or counted from -1), and its records are there all the same."""
    topic = kafka_topic()
    records = keyed_records(10)
    placed = client.produce(bootstrap, topic, records, acks=acks)
    if acks != "0":
        assert placed == [(0, i) for i in range(10)]
    # acks=0: nothing says when the records are in; the bound is generous.
    read = wait_until(
        lambda: (r := read_back(topic)) and len(r) >= len(records) and r, DEADLINE_S, message="10 records"
    )
    assert [raylog_got(r) for r in read] == [
        Got(0, i, r.key, r.value, r.headers, r.timestamp) for i, r in enumerate(records)
    ]


@pytest.mark.parametrize("client", CLIENTS, ids=CLIENT_IDS)
def test_an_oversized_record_gets_the_clients_too_large_error(client, bootstrap, kafka_topic, read_back):
    topic = kafka_topic(**{"max.message.bytes": str(SMALL_MAX_MESSAGE_BYTES)})
    with pytest.raises(Exception) as raised:  # noqa: PT011 - each client has its own class, checked below
        client.produce(bootstrap, topic, [Sent(b"k", OVERSIZED_VALUE, (), BASE_TIMESTAMP)])
    assert client.is_too_large(raised.value), repr(raised.value)
    assert read_back(topic) == []


@pytest.mark.parametrize("client", CLIENTS, ids=CLIENT_IDS)
def test_an_unknown_topic_gets_the_clients_unknown_topic_error_and_is_not_created(client, bootstrap, kafka_admin):
    topic = f"never-created-{uuid.uuid4().hex[:8]}"
    with pytest.raises(Exception) as raised:  # noqa: PT011 - each client has its own class, checked below
        client.produce(bootstrap, topic, [Sent(b"k", b"v", (), BASE_TIMESTAMP)])
    assert client.is_unknown_topic(raised.value), repr(raised.value)
    assert topic not in kafka_admin.list_topics()


@pytest.mark.parametrize("client", CLIENTS, ids=CLIENT_IDS)
def test_offsets_by_earliest_latest_and_timestamp_then_seek(client, bootstrap, kafka_cluster, kafka_topic):
    """Ten records 10 ms apart: earliest 0, latest 10, the first at or after a timestamp between
    the 3rd and 4th is offset 3 (reading from there gives 3..9), and none after the last."""
    topic = kafka_topic()
    records = [Sent(b"k%d" % i, b"v%d" % i, (), BASE_TIMESTAMP + 10 * i) for i in range(10)]
    with Producer(kafka_cluster, linger_ms=5) as producer:
        for f in [producer.send(topic, r.value, key=r.key, timestamp_ms=r.timestamp) for r in records]:
            f.get(timeout=DEADLINE_S)
    assert client.offsets(bootstrap, topic, 0, BASE_TIMESTAMP + 25) == (0, 10, 3)
    assert client.offsets(bootstrap, topic, 0, BASE_TIMESTAMP + 90)[2] == 9
    assert client.offsets(bootstrap, topic, 0, BASE_TIMESTAMP + 91)[2] is None
    expected = [Got(0, i, r.key, r.value, (), r.timestamp) for i, r in enumerate(records)][3:]
    assert client.consume(bootstrap, topic, {0: 3}, 7) == expected


def test_admin_clients_list_offsets_by_every_spec_kafka_defines(bootstrap, kafka_cluster, kafka_admin, kafka_topic):
    """ListOffsets' sentinels as Kafka's admin clients send them (kafka-python's every
    OffsetSpec, each at the lowest version that carries it; confluent's max_timestamp):
    MAX_TIMESTAMP (-3, KIP-734) is the first record carrying the partition's largest timestamp,
    with it, and nothing on an empty partition; EARLIEST_LOCAL (-4, KIP-1005) is the local log
    start, the log start without a remote tier; LATEST_TIERED (-5) is -1 without one."""
    from confluent_kafka import TopicPartition as ConfluentPartition
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin import OffsetSpec as ConfluentSpec
    from kafka import TopicPartition as KafkaPartition
    from kafka.admin import KafkaAdminClient
    from kafka.admin import OffsetSpec as KafkaSpec

    from raylog import OffsetAndTimestamp, OffsetSpec, TopicPartition

    topic = kafka_topic(num_partitions=2)
    stamps = [30, 90, 10, 90, 50]  # the largest twice: offsets 1 and 3
    with Producer(kafka_cluster, linger_ms=0) as producer:
        for i, stamp in enumerate(stamps):
            producer.send(topic, b"v%d" % i, partition=0, timestamp_ms=BASE_TIMESTAMP + stamp).get(timeout=DEADLINE_S)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    confluent = AdminClient({"bootstrap.servers": bootstrap})

    def listed(partition: int, spec) -> tuple[int, int]:
        found = admin.list_partition_offsets({KafkaPartition(topic, partition): spec})[KafkaPartition(topic, partition)]
        return found.offset, found.timestamp

    def confluent_max() -> tuple[int, int]:
        tp = ConfluentPartition(topic, 0)
        found = confluent.list_offsets({tp: ConfluentSpec.max_timestamp()})[tp].result(timeout=DEADLINE_S)
        return found.offset, found.timestamp

    def raylogs(spec: OffsetSpec) -> tuple[int, int]:
        """raylog's own Admin.list_offsets, for both partitions at once."""
        found = kafka_admin.list_offsets({TopicPartition(topic, 0): spec, TopicPartition(topic, 1): spec})
        return tuple(found.values())

    try:
        assert listed(0, KafkaSpec.MAX_TIMESTAMP) == confluent_max() == (1, BASE_TIMESTAMP + 90)
        assert raylogs(OffsetSpec.max_timestamp()) == (OffsetAndTimestamp(1, BASE_TIMESTAMP + 90), (-1, -1))
        assert raylogs(OffsetSpec.latest_tiered()) == ((-1, -1), (-1, -1))
        assert raylogs(OffsetSpec.for_timestamp(BASE_TIMESTAMP + 40)) == ((1, BASE_TIMESTAMP + 90), (-1, -1))
        assert listed(0, KafkaSpec.EARLIEST_LOCAL) == listed(0, KafkaSpec.EARLIEST) == (0, -1)
        assert listed(0, KafkaSpec.LATEST_TIERED) == (-1, -1) and listed(0, KafkaSpec.LATEST) == (5, -1)
        assert listed(1, KafkaSpec.MAX_TIMESTAMP) == (-1, -1) and listed(1, KafkaSpec.EARLIEST_LOCAL) == (0, -1)
        kafka_admin.delete_records({TopicPartition(topic, 0): 2})
        assert listed(0, KafkaSpec.EARLIEST_LOCAL) == listed(0, KafkaSpec.EARLIEST) == (2, -1)
        assert listed(0, KafkaSpec.MAX_TIMESTAMP) == confluent_max() == (3, BASE_TIMESTAMP + 90)
        assert raylogs(OffsetSpec.earliest_local()) == raylogs(OffsetSpec.earliest()) == ((2, -1), (0, -1))
    finally:
        admin.close()


@pytest.mark.parametrize("client", CLIENTS, ids=CLIENT_IDS)
def test_a_waiting_fetch_returns_when_a_record_arrives(client, bootstrap, kafka_cluster, kafka_topic):
    """The client's fetch waits up to LONG_POLL_WAIT_MS on the broker; a record written while it
    waits reaches the client well within that."""
    topic = kafka_topic()

    def arrive():
        with Producer(kafka_cluster, linger_ms=0) as producer:
            producer.send(topic, b"arrived", key=b"k", timestamp_ms=BASE_TIMESTAMP).get(timeout=DEADLINE_S)

    assert client.long_poll(bootstrap, topic, arrive) == [Got(0, 0, b"k", b"arrived", (), BASE_TIMESTAMP)]


def test_confluent_lists_every_topic_with_its_admin_client_and_its_consumer(bootstrap, kafka_topic):
    """librdkafka's all-topics Metadata request (v9+) carries 3 bytes past its body; Kafka's
    parser ignores them, and so must the listener, or ``list_topics()`` with no topic fails."""
    from confluent_kafka import Consumer as KafkaConsumer
    from confluent_kafka.admin import AdminClient

    topic = kafka_topic(num_partitions=2)  # created through raylog's Admin, not this listener
    admin = AdminClient({"bootstrap.servers": bootstrap})
    consumer = KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}"})

    def listing(client):
        """The client's listing once it shows the topic: a listener's metadata follows the
        controller's within about a second, and serves its cache while the controller is slow
        to answer (as a Kafka broker's does), so a topic created a moment ago through another
        client may be missing from the first listing, as from a Kafka broker's."""
        listed = client.list_topics(timeout=DEADLINE_S)
        return listed if topic in listed.topics else None

    try:
        listed = wait_until(lambda: listing(admin), DEADLINE_S, message=f"{topic} listed by the admin client")
        assert sorted(listed.topics[topic].partitions) == [0, 1] and len(listed.brokers) == 3
        wait_until(lambda: listing(consumer), DEADLINE_S, message=f"{topic} listed by the consumer")
    finally:
        consumer.close()


def test_confluent_consumes_within_its_fetch_max_bytes(bootstrap, kafka_topic):
    """librdkafka's test 0082: batches of 900 KiB on 3 partitions, max.partition.fetch.bytes
    20 MB but fetch.max.bytes 1 MB and a receive bound 512 bytes above it. A Fetch answer
    stays within the request's max_bytes but for its first batch (Kafka's rule), else the
    client refuses every answer ("Invalid response size") and never consumes."""
    from confluent_kafka import Consumer as KafkaConsumer
    from confluent_kafka import KafkaError
    from confluent_kafka import Producer as KafkaProducer

    topic = kafka_topic(num_partitions=3)
    value = b"v" * (900 * 1024)
    producer = KafkaProducer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for partition in range(3):
        for _ in range(3):
            producer.produce(topic, value, partition=partition)
    assert producer.flush(DEADLINE_S) == 0
    errors: list = []
    consumer = KafkaConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "max.partition.fetch.bytes": 20_000_000,
            "fetch.max.bytes": 1_000_000,
            "receive.message.max.bytes": 1_000_512,
            "error_cb": lambda error: errors.append(error),
        }
    )
    consumed = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + DEADLINE_S
        while len(consumed) < 9 and time.monotonic() < deadline and not errors:
            message = consumer.poll(1.0)
            if message is not None:
                assert message.error() is None or message.error().code() == KafkaError._PARTITION_EOF
                if message.error() is None:
                    consumed.append((message.partition(), message.offset(), len(message.value())))
    finally:
        consumer.close()
    assert not errors, errors
    assert sorted(consumed) == [(p, o, len(value)) for p in range(3) for o in range(3)]


def test_confluent_keyless_records_on_a_compacted_topic_fail_alone(bootstrap, kafka_topic, read_back):
    """librdkafka's test 0011 (KIP-467): a batch to a compacted topic with records that have
    no key is refused whole, and the answer names the records at fault, so that the client
    fails those with INVALID_RECORD and the batch's others with _INVALID_DIFFERENT_RECORD
    (raylog named none: every record of the batch failed alike). Sent one per batch, the
    keyed records are written."""
    from confluent_kafka import KafkaError
    from confluent_kafka import Producer as KafkaProducer

    topic = kafka_topic(num_partitions=1, **{"cleanup.policy": "compact"})
    for linger_ms, batch_size in ((100, 1_000_000), (0, 1)):
        reports: dict[int, int] = {}

        def delivered(error, message, reports=reports):
            reports[int(message.value())] = error.code() if error is not None else 0

        producer = KafkaProducer({"bootstrap.servers": bootstrap, "linger.ms": linger_ms, "batch.size": batch_size})
        for i in range(10):
            producer.produce(
                topic, b"%d" % i, key=None if i % 5 == 0 else b"k%d" % i, partition=0, on_delivery=delivered
            )
            if batch_size == 1:
                producer.flush(DEADLINE_S)  # one record per batch
        assert producer.flush(DEADLINE_S) == 0
        others = KafkaError._INVALID_DIFFERENT_RECORD if batch_size > 1 else 0
        assert reports == {i: KafkaError.INVALID_RECORD if i % 5 == 0 else others for i in range(10)}, batch_size
    assert sorted(int(r.value) for r in read_back(topic)) == [i for i in range(10) if i % 5]


@pytest.mark.parametrize("compression_type", ["zstd", "gzip"])
def test_confluent_topic_with_a_compression_type_stores_and_serves_its_codec(bootstrap, kafka_admin, compression_type):
    """librdkafka's test 0081 begins by creating a topic with Kafka's standard config
    compression.type, which raylog refused ("unknown config"). The leader now stores every
    batch with the topic's codec (here lz4 batches from the producer, recompressed), and
    Kafka consumers read them back."""
    from confluent_kafka import Consumer as KafkaConsumer
    from confluent_kafka import Producer as KafkaProducer
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin import NewTopic as KafkaNewTopic

    topic = f"codec-{compression_type}-{uuid.uuid4().hex[:8]}"
    confluent_admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: a freed client cancels its futures
    created = confluent_admin.create_topics(
        [KafkaNewTopic(topic, num_partitions=1, replication_factor=3, config={"compression.type": compression_type})],
        request_timeout=DEADLINE_S,
    )
    created[topic].result(timeout=DEADLINE_S)
    try:
        assert kafka_admin.describe_configs([topic])[topic]["compression.type"].value == compression_type
        producer = KafkaProducer({"bootstrap.servers": bootstrap, "compression.type": "lz4", "linger.ms": 5})
        values = [b"%04d" % i * 50 for i in range(200)]
        for value in values:
            producer.produce(topic, value, partition=0)
        assert producer.flush(DEADLINE_S) == 0
        consumer = KafkaConsumer(
            {"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest"}
        )
        consumed = []
        try:
            consumer.subscribe([topic])
            deadline = time.monotonic() + DEADLINE_S
            while len(consumed) < len(values) and time.monotonic() < deadline:
                message = consumer.poll(1.0)
                if message is not None and message.error() is None:
                    consumed.append(message.value())
        finally:
            consumer.close()
        assert consumed == values
    finally:
        kafka_admin.delete_topics([topic])


#: A confluent-kafka producer of one-record batches to partitions 0 and 1 (argv: bootstrap
#: servers, topic, count, idempotence), in a process of the lowest priority: it prints each
#: delivery as ``value offset`` and exits 1 on an error or what flush left.
PIPELINED_PRODUCER = """
import os, sys
from confluent_kafka import Producer
os.nice(19)
servers, topic, count, idempotent = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
producer = Producer({"bootstrap.servers": servers, "linger.ms": 0, "batch.num.messages": 1,
                     "enable.idempotence": idempotent})
failed = []
def delivered(error, message):
    if error is not None:
        failed.append(str(error))
    else:
        print(int(message.value()), message.partition(), message.offset())
for i in range(count):
    producer.produce(topic, b"%d" % i, partition=i % 2, on_delivery=delivered)
    producer.poll(0)
left = producer.flush(float(sys.argv[5]))
sys.exit(f"left {left}, failed {failed}" if left or failed else 0)
"""


@pytest.mark.parametrize("idempotent", [False, True], ids=["default", "idempotent"])
def test_confluent_pipelined_batches_keep_their_order_per_partition(bootstrap, kafka_topic, read_back, idempotent):
    """librdkafka sends a partition's batches without waiting for the answers (up to
    max.in.flight: a million by default, five when idempotent); the listener runs a
    connection's Produce requests beside each other, and sends what queued for a partition
    together (an idempotent producer's as a chain of its next batches). One record per batch,
    two partitions of three replicas, acks=all (the client's default): each record is
    delivered once, at an offset above the one sent before it, and read back in the order
    sent. The client runs niced, as docs/kafka.md advises on a machine shared with the
    brokers: librdkafka's idempotent producer keeps its broker threads busy while its five
    requests wait, and at normal priority beside a busy core it left the cluster too little
    of two cores (131 of 200 records delivered in 60 s)."""
    import subprocess
    import sys

    topic = kafka_topic(num_partitions=2, replication_factor=3)
    count = 400
    run = subprocess.run(
        [sys.executable, "-c", PIPELINED_PRODUCER, bootstrap, topic, str(count), "1" if idempotent else "0", "90"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    offsets: dict[int, list[tuple[int, int]]] = {0: [], 1: []}
    for line in run.stdout.split("\n"):
        if line:
            value, partition, offset = map(int, line.split())
            offsets[partition].append((value, offset))
    for partition, reports in offsets.items():
        sent = list(range(partition, count, 2))
        assert sorted(reports) == sorted(zip(sent, range(len(sent)), strict=True)), partition
    values = [int(r.value) for r in read_back(topic, partitions=2)]
    assert values == list(range(0, count, 2)) + list(range(1, count, 2))
