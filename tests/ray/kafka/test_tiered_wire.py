"""Tiered storage through Kafka's own clients (KIP-405): a topic of three replicas whose old
segments live in an S3 bucket (moto's server on the loopback) and whose brokers keep only
``local.retention.bytes``. confluent-kafka and kafka-python, in their default settings,
read it from offset 0 and get every record once, in order, with its headers and timestamp;
read_committed never sees an aborted transaction's records, from either tier. The topic keeps
its history as Parquet in the bucket too: Ray Data reads it from there, read_committed from the
files, read_uncommitted from the files up to the first that left aborted records out."""

from __future__ import annotations

import uuid

import ray

from tests.helpers import wait_until

TIMEOUT_S = 60
PLAIN = 150
TIERED = {
    "remote.storage.enable": "true",
    "remote.storage.history.enable": "true",
    "segment.bytes": "4096",
    "local.retention.bytes": "8192",
    "retention.ms": "-1",
    "min.insync.replicas": "2",
}


def _states(cluster, name: str) -> list[dict]:
    handles = ray.get(cluster.controller.replica_handles.remote(name))
    return ray.get([handles[(0, b)].state.remote() for b in range(3)])


def _leader_state(cluster, name: str) -> dict:
    (leader,) = [s for b, s in enumerate(_states(cluster, name)) if s["leader"] == b]
    return leader


def _value(i: int) -> bytes:
    return b"record-%05d-" % i + b"x" * 60


def _produce(bootstrap: str, name: str) -> list[tuple[bytes, int, list]]:
    """Plain records, an aborted transaction, a committed one, plain records again (each
    record with a header and a timestamp of its own): what read_committed must read."""
    from confluent_kafka import Producer

    expected = []

    def send(producer, i: int, keep: bool) -> None:
        ts = 1_700_000_000_000 + i
        producer.produce(name, _value(i), key=b"k%d" % (i % 5), timestamp=ts, headers=[("n", b"%d" % i)])
        if keep:
            expected.append((_value(i), ts, [("n", b"%d" % i)]))

    plain = Producer({"bootstrap.servers": bootstrap})
    for i in range(PLAIN):
        send(plain, i, True)
        plain.poll(0)
    assert plain.flush(TIMEOUT_S) == 0
    transactional = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tiered-{uuid.uuid4().hex[:6]}"})
    transactional.init_transactions(TIMEOUT_S)
    for base, commit in ((PLAIN, False), (PLAIN + 50, True)):
        transactional.begin_transaction()
        for i in range(base, base + 50):
            send(transactional, i, commit)
        assert transactional.flush(TIMEOUT_S) == 0  # in the log before the abort (unsent ones it would purge)
        if commit:
            transactional.commit_transaction(TIMEOUT_S)
        else:
            transactional.abort_transaction(TIMEOUT_S)
    for i in range(PLAIN + 100, 2 * PLAIN + 100):
        send(plain, i, True)
        plain.poll(0)
    assert plain.flush(TIMEOUT_S) == 0
    return expected


def test_kafka_clients_read_a_tiered_topic_from_offset_0_on_every_replica(kafka_cluster, kafka_topic, bootstrap):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition

    name = kafka_topic(1, 3, **TIERED)
    expected = _produce(bootstrap, name)

    # Every replica deletes its copied segments past local.retention.bytes (librdkafka's
    # batches are larger than a segment here: each batch fills one), the aborted
    # transaction's records now in the remote tier only, and has read the remote tier's
    # extent (a follower's pump may read the metadata topic after its log moved on).
    def held() -> list[dict] | None:
        states = _states(kafka_cluster, name)
        done = all(
            s["local_log_start_offset"] > PLAIN + 50 and s["remote_log_start_offset"] is not None for s in states
        )
        return states if done else None

    states = wait_until(
        held,
        timeout_s=TIMEOUT_S,
        message="local retention on every replica",
    )
    starts = [(s["log_start_offset"], s["remote_log_start_offset"]) for s in states]
    assert starts == [(0, 0)] * 3, states

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:6]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(name, 0, OFFSET_BEGINNING)])
    got = []
    while len(got) < len(expected):
        message = consumer.poll(TIMEOUT_S)
        assert message is not None and message.error() is None, message and message.error()
        got.append((message.value(), message.timestamp()[1], message.headers()))
    consumer.close()
    assert got == expected

    tp = KafkaTopicPartition(name, 0)
    for isolation_level, count in (("read_committed", len(expected)), ("read_uncommitted", len(expected) + 50)):
        reader = KafkaConsumer(
            bootstrap_servers=bootstrap,
            isolation_level=isolation_level,
            consumer_timeout_ms=TIMEOUT_S * 1000,
            enable_auto_commit=False,
        )
        reader.assign([tp])
        reader.seek_to_beginning(tp)
        records = [r for _, r in zip(range(count), reader, strict=False)]
        reader.close()
        values = [r.value for r in records]
        if isolation_level == "read_committed":
            assert [(r.value, r.timestamp, [(k, v) for k, v in r.headers]) for r in records] == expected
        else:
            assert sorted(values) == sorted(_value(i) for i in range(2 * PLAIN + 100))
    _ray_data_reads_the_history_in_the_bucket(kafka_cluster, name, expected)


def _ray_data_reads_the_history_in_the_bucket(cluster, name: str, expected: list) -> None:
    """Each copied segment's history is in the bucket, the aborted transaction's file marked; Ray
    Data reads every committed record once, in order, read_committed from the files alone (the
    leader answers no fetch from the remote tier), and read_uncommitted every record."""
    import pyarrow as pa

    from raylog.clients.history import history_source
    from raylog.data import read_topic

    history = history_source(cluster, name)
    assert history is not None and history.uri.startswith("s3://")

    def written():
        end = _leader_state(cluster, name)["highest_remote_offset"] + 1
        plan = history.plan(0, 0, end, read_committed=True)
        return plan if plan is not None and plan.history_end_offset == end > PLAIN + 100 else None

    committed = wait_until(written, timeout_s=TIMEOUT_S, message="the history of every copied segment")
    uncommitted = history.plan(0, 0, committed.history_end_offset, read_committed=False)
    assert uncommitted.history_end_offset <= PLAIN < committed.history_end_offset
    assert any(f.aborted for f in committed.files) and not any(f.aborted for f in uncommitted.files)

    def read(isolation_level: str) -> pa.Table:
        dataset = read_topic(name, cluster=cluster, consumer_config={"isolation_level": isolation_level})
        return pa.concat_tables(ray.get(dataset.to_arrow_refs())).sort_by("offset")

    before = _leader_state(cluster, name)["tiering"]["remote_fetches"]
    table = read("read_committed")
    assert _leader_state(cluster, name)["tiering"]["remote_fetches"] == before
    got = zip(table.column("value").to_pylist(), table.column("timestamp").to_pylist(), strict=True)
    assert [(v, t) for v, t in got] == [(v, t) for v, t, _ in expected]
    assert sorted(read("read_uncommitted").column("value").to_pylist()) == sorted(
        _value(i) for i in range(2 * PLAIN + 100)
    )


def test_with_the_store_down_the_local_tail_serves_remote_reads_fail_retriably_and_copying_resumes(
    kafka_cluster, kafka_admin, s3_server
):
    """The store stops answering (its server down): a fetch below the local log start gets the
    retriable KAFKA_STORAGE_ERROR, the local tail is read and appended to as before, and
    nothing more is copied; once the store is back, copying resumes and a read from offset 0
    gets every record once, in order."""
    from raylog import Consumer, Producer, TopicPartition
    from raylog.errors import StorageError
    from raylog.protocol import FetchRequest, error_of
    from tests.helpers import only_replica, tiered_topic

    name = f"tiered-down-{uuid.uuid4().hex[:6]}"
    with tiered_topic(kafka_cluster, kafka_admin, name, records=300) as sent:
        leader = only_replica(kafka_cluster, name)
        token = kafka_cluster.session().token()
        before = ray.get(leader.state.remote())
        s3_server.stop()
        try:
            answer = ray.get(leader.fetch.remote(FetchRequest(0, max_wait_ms=0, session=token)), timeout=TIMEOUT_S)
            assert isinstance(error_of(answer), StorageError), answer
            tail = ray.get(
                leader.fetch.remote(FetchRequest(before["local_log_start_offset"], max_wait_ms=0, session=token)),
                timeout=TIMEOUT_S,
            )
            assert error_of(tail) is None and len(tail.records)
            more = [(b"k", b"late-%05d" % i + b"y" * 80) for i in range(200)]
            with Producer(kafka_cluster, linger_ms=0, batch_size=1024) as producer:
                for key, value in more:
                    producer.send(name, value, key=key)
            during = ray.get(leader.state.remote())
            # Nothing written while the store is down is copied (a copy under way when it went
            # down may still have finished: the pump goes on at once while segments are ready).
            assert during["highest_remote_offset"] < len(sent)
            assert during["segments"] > before["segments"]  # nothing uncopied leaves the disk
        finally:
            s3_server.start_again()
        wait_until(
            lambda: ray.get(leader.state.remote())["highest_remote_offset"] > len(sent),
            timeout_s=TIMEOUT_S,
            message="copying resumed",
        )
        tp = TopicPartition(name, 0)
        with Consumer(kafka_cluster, auto_offset_reset="earliest") as consumer:
            consumer.assign([tp])
            got = []
            total = len(sent) + len(more)
            wait_until(lambda: got.extend(consumer.poll(timeout_ms=500).get(tp, [])) or len(got) >= total, TIMEOUT_S)
        assert [r.offset for r in got] == list(range(total))
        assert [r.value for r in got] == [v for _, v, _, _ in sent] + [v for _, v in more]
