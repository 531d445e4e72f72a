"""A topic's Parquet history registered as an Iceberg table (raylog.clients.history_table),
in an SQL catalog on SQLite over a local directory as the store: the table holds exactly the
history's rows, a sync run again changes nothing, and what retention deleted leaves the table
at the next sync (no Ray)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from raylog.clients.history import HistorySource
from raylog.clients.history_table import register_history
from raylog.common.history_format import partition_path
from raylog.errors import InvalidConfigError
from raylog.storage.history import HistoryWriter
from tests.unit.object_store import read_object, write_object
from tests.unit.test_history import PARTITION, TOPIC, tiered, write_all  # noqa: F401 -- a fixture


@pytest.fixture
def store(tmp_path):
    """``(history writer, its source, catalog properties)`` in ``tmp_path``."""
    uri = f"file://{tmp_path}/remote"
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db"}
    return HistoryWriter.from_uri(uri), HistorySource(uri, TOPIC), catalog


def with_rows(tables: list[pa.Table]) -> int:
    """How many of ``tables`` have rows (a file without rows is not registered: nothing to read)."""
    return sum(1 for t in tables if t.num_rows)


def scan(catalog: dict, identifier: tuple[str, ...]) -> pa.Table:
    from pyiceberg.catalog import load_catalog

    table = load_catalog("raylog", **catalog).load_table(identifier)
    return table.scan().to_arrow().sort_by("offset")


def test_the_table_holds_exactly_the_history_and_a_second_sync_changes_nothing(store, tiered):  # noqa: F811
    history, source, catalog = store
    write_all(history, tiered)
    done = register_history(source, TOPIC, catalog)
    files = with_rows(tiered.tables)
    assert 0 < files < len(tiered.tables)  # (the fixture has files without rows: not registered)
    assert (done.table, done.added, done.removed, done.files) == (("raylog", TOPIC), files, 0, files)
    expected = pa.concat_tables(tiered.tables)
    got = scan(catalog, done.table)
    assert got.schema.names == expected.schema.names
    columns = ["offset", "key", "value", "topic", "timestamp", "timestampType"]
    assert got.select(columns).to_pylist() == expected.select(columns).to_pylist()
    # pyiceberg's reader turns a null list into [] (apache/iceberg-python#3833, open); the
    # files keep the null (Spark and pyarrow read it), so only the null/[] difference is allowed.
    expected_headers = expected.column("headers").to_pylist()
    assert got.column("headers").to_pylist() == [h or [] for h in expected_headers]
    assert None in expected_headers  # (the case is in the fixture)
    assert set(got.column("partition").to_pylist()) == {PARTITION}
    again = register_history(source, TOPIC, catalog)
    assert (again.added, again.removed, again.files) == (0, 0, files)
    from pyiceberg.catalog import load_catalog

    table = load_catalog("raylog", **catalog).load_table(done.table)
    assert [f.name for f in table.spec().fields] == ["partition"]
    assert len(table.snapshots()) == 1  # the second sync committed nothing


def test_files_that_retention_deleted_leave_the_table_at_the_next_sync(store, tiered):  # noqa: F811
    history, source, catalog = store
    write_all(history, tiered)
    register_history(source, TOPIC, catalog, table="lake.clicks")
    for doomed in tiered.segments[:2]:
        history.delete_segment(doomed)  # (the files are gone from the store)
    done = register_history(source, TOPIC, catalog, table="lake.clicks")
    assert (done.added, done.removed, done.files) == (0, with_rows(tiered.tables[:2]), with_rows(tiered.tables[2:]))
    offsets = scan(catalog, ("lake", "clicks")).column("offset").to_pylist()
    kept = pa.concat_tables(tiered.tables[2:]).column("offset").to_pylist()
    assert offsets == kept and offsets[0] >= tiered.segments[2].start_offset


def test_a_later_file_is_added_to_what_is_registered(store, tiered):  # noqa: F811
    history, source, catalog = store
    last = max(i for i, t in enumerate(tiered.tables) if t.num_rows)
    for metadata, table in zip(tiered.segments[:last], tiered.tables[:last], strict=True):
        history.write_segment(metadata, table)
    assert register_history(source, TOPIC, catalog).added == with_rows(tiered.tables[:last])
    history.write_segment(tiered.segments[last], tiered.tables[last])
    done = register_history(source, TOPIC, catalog)
    assert (done.added, done.removed) == (1, 0)
    assert scan(catalog, done.table).num_rows == sum(t.num_rows for t in tiered.tables[: last + 1])


def test_a_listed_file_the_store_lacks_ends_what_is_registered(store, tiered):  # noqa: F811
    """A file the manifest lists and the store does not hold: the table stops before it (a gap
    would lose its records from every query silently), then takes the rest once it is back."""
    history, source, catalog = store
    write_all(history, tiered)
    listed = [f for f in history.manifest(TOPIC, PARTITION).files if f.record_count]
    gone = listed[len(listed) // 2]
    path = f"{partition_path(history.base_path, TOPIC, PARTITION)}/{gone.name}"
    saved = read_object(history.filesystem, path)
    history.filesystem.delete_file(path)
    done = register_history(source, TOPIC, catalog)
    assert (done.added, done.held_back) == (len(listed) // 2, len(listed) - len(listed) // 2)
    offsets = scan(catalog, done.table).column("offset").to_pylist()
    assert offsets[-1] < gone.first_offset and offsets == sorted(set(offsets))
    write_object(history.filesystem, path, saved)
    done = register_history(source, TOPIC, catalog)
    assert (done.added, done.held_back, done.files) == (len(listed) - len(listed) // 2, 0, len(listed))


@pytest.mark.parametrize("table", ["clicks", ".clicks", "raylog."])
def test_a_table_name_without_a_namespace_is_refused(store, table):
    _, source, catalog = store
    with pytest.raises(InvalidConfigError, match="namespace"):
        register_history(source, TOPIC, catalog, table=table)


def test_without_catalog_properties_a_local_store_keeps_an_sql_catalog_on_sqlite(store, tiered):  # noqa: F811
    history, source, _ = store
    write_all(history, tiered)
    done = register_history(source, TOPIC)
    uri = f"sqlite:///{history.base_path}/iceberg/catalog.db"
    assert scan({"type": "sql", "uri": uri}, done.table).num_rows == sum(t.num_rows for t in tiered.tables)


def test_a_store_that_is_not_a_directory_needs_a_warehouse(store):
    _, _, catalog = store
    with pytest.raises(InvalidConfigError, match="'type' and a 'warehouse'"):
        register_history(HistorySource("s3://bucket/prefix", TOPIC), TOPIC, catalog)


def test_catalog_properties_pyiceberg_refuses_are_a_config_error(store, tiered):  # noqa: F811
    history, source, _ = store
    write_all(history, tiered)
    with pytest.raises(InvalidConfigError, match="catalog"):
        register_history(source, TOPIC, {"type": "no-such-catalog"})


def test_syncs_at_once_register_each_file_once(store, tiered):  # noqa: F811
    """Four syncs of one table at once (as from cron on several hosts), creating it and later
    dropping what retention deleted: the catalog's commit refuses all but one writer of each
    snapshot, the others sync again, and every file is in the table once."""
    import concurrent.futures

    history, source, catalog = store
    write_all(history, tiered)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: register_history(source, TOPIC, catalog), range(4)))
        assert sum(r.added for r in results) >= with_rows(tiered.tables)
        assert scan(catalog, ("raylog", TOPIC)).num_rows == sum(t.num_rows for t in tiered.tables)
        for doomed in tiered.segments[:3]:
            history.delete_segment(doomed)
        results = list(pool.map(lambda _: register_history(source, TOPIC, catalog), range(4)))
    assert sum(r.removed for r in results) >= with_rows(tiered.tables[:3])
    offsets = scan(catalog, ("raylog", TOPIC)).column("offset").to_pylist()
    assert offsets == pa.concat_tables(tiered.tables[3:]).column("offset").to_pylist()
