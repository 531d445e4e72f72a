"""raylog.data as Ray users use any datasource: ``ray.data.read_datasource(RaylogDatasource(...))``
and ``ds.write_datasink(RaylogDatasink(...))``, read_topic with ray.data.read_kafka's
parameters, and the typed errors of bad input."""

from __future__ import annotations

import datetime
import functools
import logging
import time

import pyarrow as pa
import pytest
import ray
from ray.data.datasource import ReadTask

import raylog.data
from raylog import Consumer, Producer, TopicPartition
from raylog.clients.consumer import ARROW_SCHEMA
from raylog.clients.partitioner import partition_for_key
from raylog.data import RaylogDatasink, RaylogDatasource, read_range, read_topic, write_topic
from raylog.errors import InvalidConfigError, InvalidRecordError, UnknownTopicOrPartitionError
from tests.helpers import wait_until
from tests.ray.test_ray_data import produce, read_tasks, rows_of, table_of


def test_read_datasource_reads_several_topics_from_per_topic_offsets(cluster, topic):
    """read_datasource of a RaylogDatasource over two topics reads exactly the records of the
    ranges its ``{topic: {partition: offset}}`` bounds name."""
    clicks, views = topic(num_partitions=2), topic(num_partitions=3)
    sent = {clicks: produce(cluster, clicks, 120, b"c"), views: produce(cluster, views, 150, b"v")}
    source = RaylogDatasource(
        cluster,
        [clicks, views],
        start_offset={clicks: {0: 5}, views: {2: "latest"}},
        end_offset={views: {1: 10}},
    )
    dataset = ray.data.read_datasource(source).materialize()
    table = table_of(dataset)
    assert table.column_names == ARROW_SCHEMA.names
    for name, expected in (
        (clicks, {(p, o): v for (p, o), v in sent[clicks].items() if p != 0 or o >= 5}),
        (views, {(p, o): v for (p, o), v in sent[views].items() if p == 0 or (p == 1 and o < 10)}),
    ):
        assert rows_of(table.filter(pa.compute.equal(table["topic"], name))) == expected
    assert source.ranges[TopicPartition(clicks, 0)][0] == 5
    assert source.ranges[TopicPartition(views, 2)][0] == source.ranges[TopicPartition(views, 2)][1]


def test_override_num_blocks_makes_that_many_read_tasks(cluster, topic):
    """override_num_blocks above the partition count cuts partitions into offset ranges (as
    long as each keeps min_rows_per_task records), below it groups partitions; every record
    is read once either way. Unset, read_topic runs one task per partition."""
    name = topic(num_partitions=3)
    sent = produce(cluster, name, 600)
    for blocks in (8, 2, 1):
        source = RaylogDatasource(cluster, name, min_rows_per_task=10)
        dataset = ray.data.read_datasource(source, override_num_blocks=blocks).materialize()
        assert read_tasks(dataset) == blocks
        assert dataset.num_blocks() == blocks
        assert rows_of(table_of(dataset)) == sent
    # With the default minimum (far more records than here), a partition is never cut: Ray
    # Data cuts each task's output instead to make up the block count.
    dataset = ray.data.read_datasource(RaylogDatasource(cluster, name), override_num_blocks=6).materialize()
    assert read_tasks(dataset) == 3
    assert rows_of(table_of(dataset)) == sent
    dataset = read_topic(name, cluster=cluster).materialize()
    assert read_tasks(dataset) == dataset.num_blocks() == 3
    dataset = read_topic(name, cluster=cluster, override_num_blocks=2).materialize()
    assert read_tasks(dataset) == 2
    assert rows_of(table_of(dataset)) == sent


class ResourceProbe(RaylogDatasource):
    """A RaylogDatasource whose blocks also tell the CPUs Ray gave the task that read them."""

    def get_read_tasks(self, parallelism, per_task_row_limit=None, data_context=None):
        tasks = super().get_read_tasks(parallelism, per_task_row_limit, data_context)
        return [ReadTask(functools.partial(with_cpus, task.read_fn), task.metadata) for task in tasks]


def with_cpus(read_fn):
    cpus = ray.get_runtime_context().get_assigned_resources().get("CPU")
    for block in read_fn():
        yield block.append_column("cpus", pa.array([cpus] * block.num_rows, pa.float64()))


def test_remote_args_reach_the_read_tasks(cluster, topic, monkeypatch):
    """num_cpus and ray_remote_args go to the read tasks, through read_datasource and through
    read_topic (whose own default is READ_TASK_CPUS)."""
    name = topic(num_partitions=2)
    produce(cluster, name, 40)

    def cpus(dataset) -> set[float]:
        return set(table_of(dataset).column("cpus").to_pylist())

    assert cpus(ray.data.read_datasource(ResourceProbe(cluster, name), num_cpus=0.5)) == {0.5}
    assert cpus(ray.data.read_datasource(ResourceProbe(cluster, name), ray_remote_args={"num_cpus": 0.75})) == {0.75}
    monkeypatch.setattr(raylog.data.source, "RaylogDatasource", ResourceProbe)  # read_topic looks it up there
    assert cpus(read_topic(name, cluster=cluster)) == {raylog.data.READ_TASK_CPUS}
    assert cpus(read_topic(name, cluster=cluster, num_cpus=0.5)) == {0.5}
    assert cpus(read_topic(name, cluster=cluster, ray_remote_args={"num_cpus": 0.75})) == {0.75}


def test_read_topic_takes_read_kafkas_parameters(cluster, topic, caplog):
    """topics as a list, start_offset / end_offset as ints, naive datetimes (UTC, as read_kafka
    reads them) and per-topic dicts, trigger="once", timeout_ms and consumer_config."""
    first, second = topic(num_partitions=2), topic(num_partitions=1)
    old = {first: produce(cluster, first, 60, b"old"), second: produce(cluster, second, 30, b"old")}
    # Records carry millisecond timestamps: let a whole millisecond pass on each side of ``between``.
    between = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(milliseconds=1)
    wait_until(lambda: datetime.datetime.now(datetime.timezone.utc) > between + datetime.timedelta(milliseconds=1))
    new = {first: produce(cluster, first, 60, b"new"), second: produce(cluster, second, 30, b"new")}

    def read(**kwargs) -> dict[str, dict]:
        table = table_of(read_topic([first, second], cluster=cluster, **kwargs))
        return {name: rows_of(table.filter(pa.compute.equal(table["topic"], name))) for name in (first, second)}

    naive = between.replace(tzinfo=None)
    assert read(start_offset=naive, trigger="once") == new
    assert read(end_offset=naive, timeout_ms=60_000) == old
    assert read(start_offset=3, end_offset=5) == {
        name: {k: v for k, v in {**old[name], **new[name]}.items() if 3 <= k[1] < 5} for name in (first, second)
    }
    assert read(start_offset={second: {0: "latest"}}, consumer_config={"isolation_level": "read_uncommitted"}) == {
        first: {**old[first], **new[first]},
        second: {},
    }
    # A read task that runs out of time stops, says so, and returns what it read.
    with caplog.at_level(logging.WARNING, logger="raylog.data"):
        assert list(read_range(cluster, TopicPartition(second, 0), 0, 10, deadline_s=time.monotonic())) == []
    assert "stopped by its timeout" in caplog.text


def test_bad_read_input_raises_typed_errors(cluster, topic):
    """Each bad argument fails on the driver with a typed error: InvalidConfigError (a
    ValueError) for malformed input, UnknownTopicOrPartitionError for what does not exist."""
    name, other = topic(num_partitions=2), topic(num_partitions=1)
    produce(cluster, name, 10)
    unknown = [
        {"topics": "no-such-topic"},
        {"topics": [name, "no-such-topic"]},
        {"topics": name, "start_offset": {name: {7: 0}}},
        {"topics": name, "start_offset": {3: 0}},
    ]
    for kwargs in unknown:
        with pytest.raises(UnknownTopicOrPartitionError):
            read_topic(cluster=cluster, **kwargs)
        with pytest.raises(UnknownTopicOrPartitionError):
            RaylogDatasource(cluster, **kwargs)
    malformed = [
        ({"topics": []}, "topics"),
        ({"topics": [name, name]}, "twice"),
        ({"topics": name, "start_offset": 5, "end_offset": 2}, "after end"),
        ({"topics": name, "start_offset": "newest"}, "not an offset spec"),
        ({"topics": name, "end_offset": -1}, ">= 0"),
        ({"topics": [name, other], "start_offset": {0: 1}}, "several topics"),
        ({"topics": name, "start_offset": {other: {0: 1}}}, "not read"),
        ({"topics": name, "start_offset": {name: 1}}, "dict by partition"),
        ({"topics": name, "start_offset": {name: {0: 1}, 1: 2}}, "not both"),
        ({"topics": name, "start_offset": raylog.data.Committed("a"), "end_offset": raylog.data.Committed("b")}, "one"),
        ({"topics": name, "timeout_ms": 0}, "timeout_ms"),
        ({"topics": name, "consumer_config": {"group_id": "g"}}, "group_id"),
        ({"topics": name, "consumer_config": {"no_such_setting": 1}}, "consumer_config"),
        ({"topics": name, "consumer_config": {"isolation_level": "dirty"}}, "isolation"),
    ]
    for kwargs, match in malformed:
        with pytest.raises(InvalidConfigError, match=match):
            read_topic(cluster=cluster, **kwargs)
        with pytest.raises(InvalidConfigError, match=match):
            RaylogDatasource(cluster, **kwargs)
    for kwargs, match in [
        ({"trigger": "continuous"}, "trigger"),
        ({"start": 1, "start_offset": 1}, "not both"),
        ({"override_num_blocks": 0}, "override_num_blocks"),
        ({"start": datetime.datetime(2024, 1, 1)}, "time zone"),
    ]:
        with pytest.raises(InvalidConfigError, match=match):
            read_topic(name, cluster=cluster, **kwargs)
    with pytest.raises(InvalidConfigError, match="cluster"):
        RaylogDatasource(42, name)
    with pytest.raises(InvalidConfigError, match="min_rows_per_task"):
        RaylogDatasource(cluster, name, min_rows_per_task=0)
    with pytest.raises(InvalidConfigError, match="after end"):
        RaylogDatasource.from_ranges(cluster, {TopicPartition(name, 0): (4, 2)})
    with pytest.raises(UnknownTopicOrPartitionError):
        RaylogDatasource.from_ranges(cluster, {TopicPartition(name, 9): (0, 1)})


def test_projection_limit_and_empty_reads(cluster, topic):
    """select_columns is read with only those columns, limit stops the read early, and a read
    without records is an empty dataset that still has raylog's schema."""
    name = topic(num_partitions=2)
    sent = produce(cluster, name, 100)
    source = RaylogDatasource(cluster, name)
    projected = ray.data.read_datasource(source).select_columns(["offset", "value"]).materialize()
    table = table_of(projected)
    assert table.column_names == ["offset", "value"]
    assert sorted(table.column("value").to_pylist()) == sorted(value for _, value, _ in sent.values())
    assert ray.data.read_datasource(source).count() == 100
    assert ray.data.read_datasource(source).limit(7).count() == 7
    empty = read_topic(name, start_offset="latest", cluster=cluster)
    assert empty.count() == 0
    assert empty.schema().names == ARROW_SCHEMA.names


def headers_of(pairs: list[tuple[str, bytes]]) -> list[dict]:
    return [{"key": k, "value": v} for k, v in pairs]


def test_write_datasink_round_trips_keys_values_headers_and_timestamps(cluster, topic):
    """write_datasink(RaylogDatasink(...)) writes every row once, keys on Kafka's partitions,
    headers and timestamps as given; with acks="all" every record is readable when the write
    returns, with acks=0 they all arrive."""
    name = topic(num_partitions=3)
    rows = [
        {
            "user": f"user-{i % 7}",
            "payload": b"event-%d" % i,
            "headers": headers_of([("n", b"%d" % i), ("n", b"again")] if i % 2 else []),
            "at": 1_700_000_000_000 + i,
        }
        for i in range(300)
    ]
    sink = RaylogDatasink(cluster, name, key="user", value="payload", timestamp="at", producer_config={"acks": "all"})
    ray.data.from_items(rows, override_num_blocks=4).write_datasink(sink)
    assert sink.records_written == 300
    table = table_of(read_topic(name, cluster=cluster))
    got = sorted(
        zip(*(table.column(c).to_pylist() for c in ("key", "value", "headers", "timestamp")), strict=True),
        key=lambda row: row[1],
    )
    assert got == sorted(
        ((r["user"].encode(), r["payload"], r["headers"], r["at"]) for r in rows), key=lambda row: row[1]
    )
    partitions = {key: part for key, part in zip(table["key"].to_pylist(), table["partition"].to_pylist(), strict=True)}
    assert partitions == {key: partition_for_key(key, 3) for key in partitions}

    # A read written back: its key, value and headers go along (through pandas too).
    copy = topic(num_partitions=1)
    source = read_topic(name, cluster=cluster).map_batches(lambda df: df, batch_format="pandas")
    assert write_topic(source, copy, cluster=cluster, producer_config={"acks": 0}) == 300

    def copied() -> pa.Table | None:
        found = table_of(read_topic(copy, cluster=cluster))
        return found if found.num_rows == 300 else None

    found = wait_until(copied, timeout_s=60, message="300 records copied with acks=0")
    assert sorted(zip(found["value"].to_pylist(), found["headers"].to_pylist(), strict=True)) == sorted(
        zip(table["value"].to_pylist(), table["headers"].to_pylist(), strict=True)
    )


def test_bad_write_input_raises_typed_errors_before_writing(cluster, topic):
    """An unknown topic or producer setting fails when the sink is made; a dataset without its
    value column or with a column of the wrong type fails when the write starts, having
    written nothing."""
    name = topic(num_partitions=1)
    with pytest.raises(UnknownTopicOrPartitionError):
        RaylogDatasink(cluster, "no-such-topic")
    for kwargs, match in [
        ({"producer_config": {"acks": "sometimes"}}, "acks"),
        ({"producer_config": {"no_such_setting": 1}}, "producer_config"),
        ({"producer_config": {"transactional_id": "t"}}, "transactional_id"),
        ({"key": 3}, "key"),
        ({"value": None}, "value"),
    ]:
        with pytest.raises(InvalidConfigError, match=match):
            RaylogDatasink(cluster, name, **kwargs)
    good = {"key": b"k", "value": b"v"}
    for items, kwargs in [
        ([{"payload": b"x"}] * 5, {}),
        ([{"value": 1}] * 5, {}),
        ([{**good, "headers": "not headers"}] * 5, {}),
        ([{**good, "at": "yesterday"}] * 5, {"timestamp": "at"}),
        ([good] * 5, {"timestamp": "at"}),
    ]:
        with pytest.raises(InvalidRecordError):
            ray.data.from_items(items).write_datasink(RaylogDatasink(cluster, name, **kwargs))
    with Consumer(cluster) as consumer:
        assert consumer.end_offsets([TopicPartition(name, 0)]) == {TopicPartition(name, 0): 0}
    with Producer(cluster) as producer:  # the topic itself is fine
        producer.send(name, b"ok").result(timeout=10)
