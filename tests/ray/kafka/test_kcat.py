"""kcat (librdkafka's command-line client) against raylog's Kafka listener: it lists the
brokers and a topic's partitions, produces ``key:value`` lines from stdin where raylog's
murmur2 partitioner puts them, and consumes them back with its format string. Each output is
compared whole.
"""

from __future__ import annotations

from raylog import Producer, TopicPartition
from raylog.clients.partitioner import partition_for_key
from tests.helpers import wait_until

#: librdkafka's default partitioner hashes with CRC32; Java's (and raylog's) is murmur2.
MURMUR2 = ("-X", "topic.partitioner=murmur2_random")
LINES = [f"user-{i}:click {i}" for i in range(12)]


def test_kcat_lists_every_broker_and_the_topics_partitions(kcat, bootstrap, kafka_admin, kafka_topic):
    topic = kafka_topic(num_partitions=3, replication_factor=2)
    # Compared once every follower is in sync and the listeners know each new leader (as with
    # Kafka, a topic just created may be listed LEADER_NOT_AVAILABLE for a moment).
    wait_until(
        lambda: all(set(p.isr) == set(p.replicas) for p in kafka_admin.describe_topics([topic])[0].partitions),
        timeout_s=60,
        message="every follower in sync",
    )
    done = wait_until(
        lambda: (
            (listed := kcat.run("-b", bootstrap, "-L", "-t", topic)).returncode == 0
            and "Leader not available" not in listed.stdout
            and listed
        ),
        timeout_s=60,
        message="every leader listed",
    )
    (described,) = kafka_admin.describe_topics([topic])
    brokers = bootstrap.split(",")
    first, *rest = done.stdout.splitlines()
    # Whichever listener kcat asked first answered.
    assert first in {f"Metadata for {topic} (from broker {b}: {address}/{b}):" for b, address in enumerate(brokers)}
    expected = [
        f" {len(brokers)} brokers:",
        *(f"  broker {b} at {address}{' (controller)' if b == 0 else ''}" for b, address in enumerate(brokers)),
        " 1 topics:",
        f'  topic "{topic}" with 3 partitions:',
        *(
            f"    partition {p.partition}, leader {p.leader}, replicas: {','.join(map(str, p.replicas))}, "
            f"isrs: {','.join(map(str, p.isr))}"
            for p in described.partitions
        ),
    ]
    assert rest == expected


def test_kcat_produces_keyed_lines_that_raylog_reads_where_murmur2_puts_them(kcat, bootstrap, kafka_topic, read_back):
    topic = kafka_topic(num_partitions=3)
    done = kcat.run("-b", bootstrap, "-P", "-t", topic, "-K:", *MURMUR2, stdin="\n".join(LINES) + "\n")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    by_partition: dict[int, list[tuple[bytes, bytes]]] = {0: [], 1: [], 2: []}
    for line in LINES:
        key, value = line.split(":")
        by_partition[partition_for_key(key.encode(), 3)].append((key.encode(), value.encode()))
    expected = [(p, offset, kv) for p in range(3) for offset, kv in enumerate(by_partition[p])]
    assert [(r.partition, r.offset, (r.key, r.value)) for r in read_back(topic, 3)] == expected


def test_kcat_consumes_what_raylog_wrote_in_its_format(kcat, bootstrap, kafka_cluster, kafka_topic):
    topic = kafka_topic(num_partitions=2)
    with Producer(kafka_cluster, acks="all") as producer:
        written = [
            producer.send(topic, value.encode(), key=key.encode(), partition=i % 2).get(timeout=30)
            for i, (key, value) in enumerate(line.split(":") for line in LINES)
        ]
    done = kcat.run("-b", bootstrap, "-C", "-t", topic, "-e", "-q", "-f", "%k %s %o %p\n")
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    for p in (0, 1):
        # kcat interleaves partitions as their fetches come back; each one's lines are in order.
        expected = [
            f"{key} {value} {m.offset} {m.partition}"
            for (key, value), m in zip((line.split(":") for line in LINES), written, strict=True)
            if m.partition == p
        ]
        assert [line for line in out if line.endswith(f" {p}")] == expected
    assert len(out) == len(LINES)


def test_kcat_reads_one_partition_from_an_offset(kcat, bootstrap, kafka_cluster, kafka_topic):
    topic = kafka_topic()
    with Producer(kafka_cluster, acks="all") as producer:
        for line in LINES:
            key, value = line.split(":")
            producer.send(topic, value.encode(), key=key.encode()).get(timeout=30)
    assert kafka_cluster.metadata(refresh=True).has_partition(TopicPartition(topic, 0))
    done = kcat.run("-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", "5", "-e", "-q", "-f", "%k=%s@%o\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "".join(f"{line.replace(':', '=')}@{i}\n" for i, line in enumerate(LINES) if i >= 5)
