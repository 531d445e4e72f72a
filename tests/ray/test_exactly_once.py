"""Exactly-once pipelines: TopicStream with a transactional_id (a batch's output and offsets
in one transaction) and transactional_copy (Kafka's consume-transform-produce loop)."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest

from raylog import Consumer, Producer, TopicPartition, transactional_copy
from raylog.data import TopicStream, read_topic
from raylog.errors import IllegalStateError, ProducerFencedError
from tests.helpers import read_values
from tests.ray.test_ray_data import produce, table_of


def _id(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex[:8]}"


def tagged(table: pa.Table) -> pa.Table:
    """One output record per input record, its value naming the input's partition and offset."""
    tags = [b"%d:%d" % po for po in zip(table["partition"].to_pylist(), table["offset"].to_pylist(), strict=True)]
    return pa.table({"key": table["key"], "value": pa.array(tags, pa.binary())})


def tags_of(sent: dict) -> list[bytes]:
    return sorted(b"%d:%d" % po for po in sent)


def read_sorted(cluster, topic: str, partitions: int, isolation_level: str = "read_committed") -> list[bytes]:
    return sorted(read_values(cluster, topic, partitions, isolation_level))


def committed_offsets(cluster, group: str, topic: str, partitions: int) -> dict[int, int | None]:
    with Consumer(cluster, group_id=group, enable_auto_commit=False) as consumer:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)])
    return {tp.partition: None if o is None else o.offset for tp, o in found.items()}


def test_a_failed_batch_is_aborted_and_a_restarted_stream_fences_the_old_one_and_resumes_exactly_once(cluster, topic):
    """A batch whose work raises leaves no read_committed output and no committed offsets and
    is read again; a stream restarted with the same transactional id fences the old instance
    (its open batch aborted, its commit refused) and ends with every input record once."""
    source, sink = topic(num_partitions=2), topic(num_partitions=2)
    sent = produce(cluster, source, 100)
    group, transactional_id = _id("eos-group"), _id("eos-stream")
    options = {"max_records_per_partition": 20, "trigger_interval_s": 0.05, "cluster": cluster}
    stream = TopicStream(source, group, transactional_id=transactional_id, **options)

    with stream.next_batch(timeout_s=30) as first:
        assert first.write(first.dataset.map_batches(tagged, batch_format="pyarrow"), sink) == first.record_count
    first_output = read_sorted(cluster, sink, 2)
    assert len(first_output) == first.record_count

    with pytest.raises(RuntimeError, match="the work failed"), stream.next_batch(timeout_s=30) as failed:
        failed.write(tagged(table_of(failed.dataset)), sink)
        raise RuntimeError("the work failed")
    assert read_sorted(cluster, sink, 2) == first_output
    assert len(read_sorted(cluster, sink, 2, "read_uncommitted")) == first.record_count + failed.record_count
    assert committed_offsets(cluster, group, source, 2) == {tp.partition: end for tp, (_, end) in first.ranges.items()}
    with pytest.raises(IllegalStateError):
        failed.commit()

    zombie = stream.next_batch(timeout_s=30)
    assert zombie.ranges == failed.ranges  # read again from the committed offsets
    zombie.write(tagged(table_of(zombie.dataset)), sink)  # ... then the process "hangs"

    restarted = TopicStream(source, group, transactional_id=transactional_id, **options)
    with pytest.raises(ProducerFencedError):
        zombie.commit()
    stream.close()
    while (batch := restarted.next_batch(timeout_s=2)) is not None:
        with batch:
            batch.write(batch.dataset.map_batches(tagged, batch_format="pyarrow"), sink)
    restarted.close()
    assert read_sorted(cluster, sink, 2) == tags_of(sent)
    ends = {p: 1 + max(o for q, o in sent if q == p) for p in (0, 1)}
    assert committed_offsets(cluster, group, source, 2) == ends


def test_transactional_copy_aborts_and_rewinds_a_failed_round_and_copies_each_record_once(cluster, topic):
    """A transform that fails half way through its output aborts the round (nothing of it
    read_committed) and rewinds the consumer; the next call copies every record once."""
    source, sink = topic(num_partitions=2), topic(num_partitions=1)
    sent = produce(cluster, source, 60)
    group = _id("copy-group")
    tps = [TopicPartition(source, 0), TopicPartition(source, 1)]
    rounds = []

    def transform(records):
        rounds.append(len(records))
        for i, record in enumerate(records):
            if len(rounds) == 2 and i == len(records) // 2:
                raise RuntimeError("transform failed half way")
            yield sink, record.key, b"%d:%d" % (record.partition, record.offset)

    with (
        Consumer(cluster, source, group_id=_id("auto-committing")) as member,
        Producer(cluster, transactional_id=_id("unused")) as unused,
        pytest.raises(ValueError, match="auto-commit"),
    ):
        transactional_copy(member, unused, transform)
    consumer = Consumer(cluster, group_id=group, enable_auto_commit=False, auto_offset_reset="earliest")
    consumer.assign(tps)
    producer = Producer(cluster, transactional_id=_id("copier"))
    producer.init_transactions()
    with pytest.raises(RuntimeError, match="half way"):
        transactional_copy(consumer, producer, transform, max_records=10, idle_timeout_s=2)
    assert len(read_sorted(cluster, sink, 1)) == rounds[0]
    assert len(read_sorted(cluster, sink, 1, "read_uncommitted")) == rounds[0] + rounds[1] // 2

    assert transactional_copy(consumer, producer, transform, max_records=10, idle_timeout_s=2) == 60 - rounds[0]
    assert read_sorted(cluster, sink, 1) == tags_of(sent)
    assert committed_offsets(cluster, group, source, 2) == {p: 1 + max(o for q, o in sent if q == p) for p in (0, 1)}
    producer.close()
    consumer.close()


def test_reads_of_a_transactional_topic_end_past_the_marker_after_the_last_record(cluster, topic):
    """A read up to the last stable offset ends there: the consumer's position moves past
    the commit marker after the last record (a Ray Data read, or a stream over another
    exactly-once pipeline's output, would otherwise wait for a record that never comes)."""
    name = topic()
    with Producer(cluster, transactional_id=_id("marker")) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(name, b"committed")
        producer.commit_transaction()
    tp = TopicPartition(name, 0)
    with Consumer(cluster, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        assert consumer.end_offsets([tp])[tp] == 2  # the record and its marker
        assert consumer.poll_arrow(timeout_ms=10_000).column("value").to_pylist() == [b"committed"]
        assert consumer.position(tp) == 2
    assert table_of(read_topic(name, cluster=cluster)).column("value").to_pylist() == [b"committed"]
