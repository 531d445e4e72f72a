"""librdkafka's idempotent producer (confluent-kafka, ``enable.idempotence``, acks=all) through
raylog's Kafka listener while the partition's leader replica is killed: the producer retries
against the new leader, and raylog's own Consumer then reads every acknowledged record exactly
once, in order, at the offset it was acknowledged with.
"""

from __future__ import annotations

import ray
from confluent_kafka import Producer as KafkaProducer

from raylog import TopicPartition
from tests.helpers import wait_until

#: Records acknowledged before the kill, in flight when it happens, and sent after it.
BEFORE, IN_FLIGHT, AFTER = 100, 100, 100
DEADLINE_S = 120


def test_idempotent_producer_keeps_every_acknowledged_record_once_across_a_leader_kill(
    bootstrap, kafka_cluster, kafka_admin, kafka_topic, read_back
):
    topic = kafka_topic(replication_factor=3, **{"min.insync.replicas": "2"})
    tp = TopicPartition(topic, 0)
    (before,) = kafka_admin.describe_topics([topic])
    assert len(before.partitions[0].isr) == 3
    producer = KafkaProducer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "batch.num.messages": 10,
            "message.timeout.ms": DEADLINE_S * 1000,
            "retry.backoff.ms": 100,
        }
    )
    acknowledged: dict[bytes, int] = {}
    failed: dict[bytes, str] = {}

    def report(err, msg):
        if err is None:
            acknowledged[msg.value()] = msg.offset()
        else:
            failed[msg.value()] = str(err)

    values = [b"%06d" % i for i in range(BEFORE + IN_FLIGHT + AFTER)]
    for value in values[:BEFORE]:
        producer.produce(topic, value, on_delivery=report)
    assert producer.flush(DEADLINE_S) == 0
    assert len(acknowledged) == BEFORE, failed

    for value in values[BEFORE : BEFORE + IN_FLIGHT]:
        producer.produce(topic, value, on_delivery=report)
    producer.poll(0)
    ray.kill(kafka_cluster.metadata(refresh=True).leader(tp), no_restart=False)
    for value in values[BEFORE + IN_FLIGHT :]:
        producer.produce(topic, value, on_delivery=report)
    assert producer.flush(DEADLINE_S) == 0, "confluent-kafka did not settle every record"

    # The leader changed: a new epoch (Ray restarted the killed actor; the controller elected
    # from the ISR).
    after = wait_until(
        lambda: (p := kafka_admin.describe_topics([topic])[0].partitions[0]).leader >= 0 and p,
        DEADLINE_S,
        message="a leader",
    )
    assert after.leader_epoch > before.partitions[0].leader_epoch

    read = [(r.offset, r.value) for r in read_back(topic)]
    read_values = [v for _, v in read]
    assert len(set(read_values)) == len(read_values), "a record was written twice"
    assert read_values == sorted(read_values), "records out of send order"
    assert set(read_values) <= set(values)
    # Every acknowledged record is there once, at the offset it was acknowledged with. A batch
    # whose request failed with its fate unknown (the leader killed under it) and whose
    # successor was then acknowledged is acknowledged with it, offset unknown (librdkafka's
    # implicit ack: the successor's sequence proves it was written): it is there all the same.
    at = {v: o for o, v in read}
    assert set(acknowledged) <= set(at), "an acknowledged record was lost"
    assert {v: o for v, o in acknowledged.items() if o is not None} == {
        v: at[v] for v, o in acknowledged.items() if o is not None
    }
    assert len(acknowledged) + len(failed) == len(values)
