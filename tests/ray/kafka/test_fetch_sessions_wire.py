"""Incremental fetch sessions (KIP-227) with a client that uses them: kafka-python's consumer
opens a session with its first full fetch, then fetches by difference. Every record is
read once, in order, while records arrive in rounds, and the client never finds an answer
of the session invalid (it would close the session and fetch in full again)."""

from __future__ import annotations

import logging

from raylog import Producer
from tests.helpers import wait_until

PARTITIONS = 4
ROUNDS = 3
PER_ROUND = 20


def test_kafka_python_reads_through_an_incremental_fetch_session(kafka_cluster, bootstrap, kafka_topic, caplog):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTP

    topic = kafka_topic(num_partitions=PARTITIONS)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100)
    read: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    caplog.set_level(logging.DEBUG, logger="kafka.consumer.fetcher")
    try:
        consumer.assign([KafkaTP(topic, p) for p in range(PARTITIONS)])
        with Producer(kafka_cluster, acks="all") as producer:
            for round_ in range(ROUNDS):
                # Only partition round % PARTITIONS gets records this round: the others idle.
                partition = round_ % PARTITIONS
                futures = [producer.send(topic, b"v", partition=partition) for _ in range(PER_ROUND)]
                for future in futures:
                    future.get(timeout=30)

                def caught_up(partition=partition, round_=round_) -> bool:
                    for tp, records in consumer.poll(timeout_ms=200).items():
                        read[tp.partition] += [r.offset for r in records]
                    return len(read[partition]) == PER_ROUND * (1 + round_ // PARTITIONS)

                wait_until(caught_up, timeout_s=60, message=f"round {round_}'s records read")
        # Fetching on with nothing new: every node answers the session's fetches by difference.
        wait_until(
            lambda: (
                not consumer.poll(timeout_ms=200) and caplog.text.count("incremental fetch response for session") >= 6
            ),
            timeout_s=60,
            message="incremental fetch answers from every node",
        )
    finally:
        consumer.close()
    assert read == {p: list(range(PER_ROUND)) if p < ROUNDS else [] for p in range(PARTITIONS)}
    told = caplog.text
    assert "created a new incremental fetch session" in told
    assert "incremental fetch response for session" in told
    assert "invalid" not in told and "closing session" not in told
