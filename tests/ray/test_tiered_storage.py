"""Tiered storage end to end (KIP-405): a topic with ``remote.storage.enable`` copies its closed
segments to the session cluster's store (a local directory), keeps only
``local.retention.bytes`` on the broker's disk, and still serves every record from offset 0,
the old ones from the remote tier, to raylog's Consumer and to Ray Data."""

from __future__ import annotations

import json
import os
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import ray

from raylog import Consumer, OffsetSpec, TopicPartition
from raylog.data import read_topic
from tests.helpers import only_replica, tiered_topic, wait_until
from tests.ray.prometheus import scrape, value


@pytest.fixture(scope="module")
def tiered(cluster, admin):
    name = f"tiered-{uuid.uuid4().hex[:6]}"
    with tiered_topic(cluster, admin, name) as sent:
        yield name, sent


def _leader_state(cluster, name: str) -> dict:
    return ray.get(only_replica(cluster, name).state.remote())


def test_the_partition_starts_at_the_remote_tier_and_its_local_log_past_it(cluster, admin, tiered):
    name, sent = tiered
    state = _leader_state(cluster, name)
    assert (state["log_start_offset"], state["remote_log_start_offset"]) == (0, 0)
    tp = TopicPartition(name, 0)
    assert admin.list_offsets({tp: OffsetSpec.earliest()})[tp].offset == 0
    local = admin.list_offsets({tp: OffsetSpec.earliest_local()})[tp].offset
    tiered_end = admin.list_offsets({tp: OffsetSpec.latest_tiered()})[tp].offset
    assert local >= state["local_log_start_offset"] > 0  # (the pump may delete locally meanwhile)
    assert local - 1 <= tiered_end < len(sent)
    assert admin.list_offsets({tp: OffsetSpec.latest()})[tp].offset == len(sent)
    # Time look-ups search the remote tier first, then the local log (each record's time is
    # its offset's: the tiered topic's records are stamped 1_700_000_000_000 + i).
    for offset in (0, 5, local - 1, local, len(sent) - 1):
        found = admin.list_offsets({tp: OffsetSpec.for_timestamp(sent[offset][2])})[tp]
        assert (found.offset, found.timestamp) == (offset, sent[offset][2])
    assert admin.list_offsets({tp: OffsetSpec.for_timestamp(sent[-1][2] + 1)})[tp].offset == -1


def test_a_consumer_reads_every_record_once_in_order_from_both_tiers(cluster, tiered):
    name, sent = tiered
    tp = TopicPartition(name, 0)
    with Consumer(cluster, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        got = []
        wait_until(lambda: got.extend(consumer.poll(timeout_ms=500).get(tp, [])) or len(got) >= len(sent), timeout_s=60)
    assert [r.offset for r in got] == list(range(len(sent)))
    assert [(r.key, r.value, r.timestamp, [tuple(h) for h in r.headers]) for r in got] == sent


def test_ray_data_reads_the_whole_topic_from_both_tiers(cluster, tiered):
    name, sent = tiered
    tables = [t for t in ray.get(read_topic(name, cluster=cluster).to_arrow_refs()) if t.num_rows]
    table = pa.concat_tables(tables).sort_by("offset")
    assert table.column("offset").to_pylist() == list(range(len(sent)))
    assert table.column("value").to_pylist() == [v for _, v, _, _ in sent]
    assert table.column("key").to_pylist() == [k for k, _, _, _ in sent]


def test_the_history_is_parquet_in_the_store_and_ray_data_reads_it_from_the_files(
    cluster, admin, tiered, remote_store_dir
):
    """remote.storage.history.enable: every copied segment is also a Parquet file in Spark's
    Kafka-source columns under history/<topic>-<id>/partition=0, listed in the manifest without
    a gap from offset 0; pyarrow reads the directory as the records sent; read_topic takes the
    history from the files (the leader serves no remote read for it) and the rest from the
    broker, every record once, in order."""
    name, sent = tiered
    topic_id = admin.describe_topics([name])[0].topic_id
    directory = os.path.join(remote_store_dir, "history", f"{name}-{topic_id}", "partition=0")

    def listed() -> dict | None:
        end = _leader_state(cluster, name)["highest_remote_offset"] + 1
        with open(os.path.join(directory, "_raylog_manifest.json")) as f:
            manifest = json.load(f)
        return manifest if manifest["files"] and manifest["files"][-1]["last_offset"] + 1 == end else None

    manifest = wait_until(listed, timeout_s=60, message="the history of every copied segment")
    files = manifest["files"]
    assert files[0]["first_offset"] == 0
    assert all(a["last_offset"] + 1 == b["first_offset"] for a, b in zip(files, files[1:], strict=False))
    assert not any(f["aborted"] for f in files)
    end = files[-1]["last_offset"] + 1
    on_disk = pq.read_table([os.path.join(directory, f["name"]) for f in files], partitioning=None).sort_by("offset")
    assert on_disk.column("offset").to_pylist() == list(range(end))
    assert on_disk.column("value").to_pylist() == [v for _, v, _, _ in sent[:end]]
    assert on_disk.column("topic").to_pylist() == [name] * end
    assert [[(h["key"], h["value"]) for h in hs] for hs in on_disk.column("headers").to_pylist()] == [
        h for _, _, _, h in sent[:end]
    ]

    before = _leader_state(cluster, name)["tiering"]["remote_fetches"]
    table = pa.concat_tables(ray.get(read_topic(name, cluster=cluster).to_arrow_refs())).sort_by("offset")
    assert table.column("offset").to_pylist() == list(range(len(sent)))
    assert table.column("timestamp").to_pylist() == [t for _, _, t, _ in sent]
    assert table.column("headers").to_pylist() == [[{"key": k, "value": v} for k, v in h] for _, _, _, h in sent]
    assert _leader_state(cluster, name)["tiering"]["remote_fetches"] == before


def test_a_history_file_gone_sends_the_read_to_the_brokers(cluster, admin, tiered, remote_store_dir):
    """A file the manifest lists but the store no longer has (retention deleted it after the
    read was planned, or an operator did): read_topic reads from the brokers from that file on
    (the remote tier serves it), every record once, in order."""
    name, sent = tiered
    topic_id = admin.describe_topics([name])[0].topic_id
    directory = os.path.join(remote_store_dir, "history", f"{name}-{topic_id}", "partition=0")
    with open(os.path.join(directory, "_raylog_manifest.json")) as f:
        files = json.load(f)["files"]
    os.remove(os.path.join(directory, files[len(files) // 2]["name"]))
    before = _leader_state(cluster, name)["tiering"]["remote_fetches"]
    table = pa.concat_tables(ray.get(read_topic(name, cluster=cluster).to_arrow_refs())).sort_by("offset")
    assert table.column("offset").to_pylist() == list(range(len(sent)))
    assert table.column("value").to_pylist() == [v for _, v, _, _ in sent]
    assert _leader_state(cluster, name)["tiering"]["remote_fetches"] > before


def test_the_pump_and_the_remote_reads_are_in_the_metrics(cluster, tiered):
    """What was copied, what the store holds, the copier's lag and the remote reads (after the
    reads above) reach Ray's Prometheus endpoint."""
    name, _ = tiered
    counters = {  # the pump's state field: its metric and tags
        "bytes_copied": ("raylog_remote_copy_bytes_total", {}),
        "segments_copied": ("raylog_remote_copy_segments_total", {}),
        "remote_bytes_read": ("raylog_remote_read_bytes_total", {}),
        "chunk_cache_misses": ("raylog_remote_cache_misses_total", {"cache": "chunk"}),
    }

    def exported() -> tuple[str, dict] | None:
        """The scrape once it shows the pump's counters as its state has them: each metric is
        exported on its own schedule, lagging the state by up to an export interval."""
        text, state = scrape(), _leader_state(cluster, name)["tiering"]
        shown = {field: value(text, metric, topic=name, **tags) for field, (metric, tags) in counters.items()}
        return (text, state) if all(shown[field] == state[field] for field in counters) else None

    text, state = wait_until(exported, timeout_s=90, interval_s=1.0, message="the tiered topic's metrics")
    assert state["bytes_copied"] > 0 and state["segments_copied"] > 0
    assert state["remote_bytes_read"] > 0 and state["chunk_cache_misses"] >= 1  # (the reads above)
    assert value(text, "raylog_remote_log_size_bytes", topic=name) > 0
    assert value(text, "raylog_remote_copy_lag_segments", topic=name) == 0
    assert not value(text, "raylog_remote_failures_total", topic=name, action="copy")


def test_a_deleted_tiered_topic_leaves_nothing_in_the_store_and_its_namesake_starts_afresh(
    cluster, admin, remote_store_dir
):
    """Deleting a tiered topic deletes its partitions' remote objects; a topic created again
    under the same name (a new topic id) neither sees the old copies nor their events: it
    copies its own records and serves exactly them."""
    name = f"reborn-{uuid.uuid4().hex[:6]}"
    with tiered_topic(cluster, admin, name, records=400):
        (old,) = [e for e in os.listdir(remote_store_dir) if e.startswith(f"{name}-")]
    assert old not in os.listdir(remote_store_dir)
    assert not [e for e in os.listdir(os.path.join(remote_store_dir, "history")) if e.startswith(f"{name}-")]
    with tiered_topic(cluster, admin, name, records=300) as sent:
        (new,) = [e for e in os.listdir(remote_store_dir) if e.startswith(f"{name}-")]
        assert new != old
        state = _leader_state(cluster, name)
        assert state["remote_log_start_offset"] == 0 and state["highest_remote_offset"] < len(sent)
        tp = TopicPartition(name, 0)
        with Consumer(cluster, auto_offset_reset="earliest") as consumer:
            consumer.assign([tp])
            got = []
            wait_until(lambda: got.extend(consumer.poll(timeout_ms=500).get(tp, [])) or len(got) >= len(sent), 60)
        assert [r.value for r in got] == [v for _, v, _, _ in sent]


def test_topics_describe_shows_each_tier(run, cluster, tiered):
    """`raylog topics describe` gives a tiered partition's starts and each tier's bytes."""
    name, sent = tiered
    code, out, _ = run("topics", "describe", name, "--json")
    assert code == 0
    (partition,) = json.loads(out)[0]["partitions"]
    tiers = partition["tiers"]
    state = _leader_state(cluster, name)
    assert tiers["log_start_offset"] == 0 and tiers["local_log_start_offset"] == state["local_log_start_offset"] > 0
    assert tiers["remote_bytes"] > 0 and 0 < tiers["local_bytes"] <= 8192 + 4096
    assert tiers["highest_remote_offset"] >= tiers["local_log_start_offset"] - 1
    code, out, _ = run("topics", "describe", name)
    assert f"LogStartOffset: 0\tLocalLogStartOffset: {tiers['local_log_start_offset']}" in out


def test_the_history_is_an_iceberg_table_after_a_sync(run, cluster, admin, tiered, remote_store_dir):
    """`raylog topics sync-iceberg` registers the history's files in an Iceberg table of an SQL
    catalog on SQLite in the store (the embedded default): the table holds exactly the records
    of the history's range as the Consumer reads them, up to a file the store lacks (an earlier
    test of the module removes one); a second sync changes nothing."""
    from pyiceberg.catalog import load_catalog

    name, sent = tiered
    topic_id = admin.describe_topics([name])[0].topic_id
    directory = os.path.join(remote_store_dir, "history", f"{name}-{topic_id}", "partition=0")
    with open(os.path.join(directory, "_raylog_manifest.json")) as f:
        listed = [e for e in json.load(f)["files"] if e["record_count"]]
    present = [os.path.exists(os.path.join(directory, e["name"])) for e in listed]
    registered = present.index(False) if False in present else len(listed)
    code, out, err = run("topics", "sync-iceberg", name, "--json")
    assert code == 0, err
    done = json.loads(out)
    assert done["table"] == ["raylog", name] and (done["added"], done["removed"]) == (registered, 0) != (0, 0)
    assert done["held_back"] == len(listed) - registered
    catalog = load_catalog("raylog", type="sql", uri=f"sqlite:///{remote_store_dir}/iceberg/catalog.db")
    rows = catalog.load_table(("raylog", name)).scan().to_arrow().sort_by("offset").to_pylist()
    end = listed[registered - 1]["last_offset"] + 1
    assert [r["offset"] for r in rows] == list(range(end))
    assert [(r["key"], r["value"], r["headers"]) for r in rows] == [
        (key, value, [{"key": k, "value": v} for k, v in headers]) for key, value, _, headers in sent[:end]
    ]
    assert {r["topic"] for r in rows} == {name} and {r["partition"] for r in rows} == {0}
    code, out, _ = run("topics", "sync-iceberg", name, "--json")
    assert code == 0 and (json.loads(out)["added"], json.loads(out)["removed"]) == (0, 0)
