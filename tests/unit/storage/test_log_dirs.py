"""Identities on a broker's disk: meta.json, log directories named by topic id, stray logs (no Ray)."""

from __future__ import annotations

import json
import os

import pytest

from raylog.common import record_batch as rb
from raylog.errors import InconsistentClusterIdError, InconsistentTopicIdError, InvalidConfigError, StorageError
from raylog.storage import log_dirs
from raylog.storage.log import Log

OLD, NEW = "a" * 32, "b" * 32


def write_log(directory: str, values: list[bytes]) -> None:
    log = Log.open(directory)
    log.append_as_leader(rb.build(values, now_ms=1_000), leader_epoch=0)
    log.flush()
    log.close()


def values_in(directory: str) -> list[bytes]:
    log = Log.open(directory)
    try:
        return rb.decode_table(log.read(0, 1 << 20)).column("value").to_pylist()
    finally:
        log.close()


def test_a_log_directory_is_named_by_topic_id_and_keeps_it_in_partition_metadata(tmp_path):
    """A new log directory is ``<topic>-<partition>-<topic id>`` with a version 0
    ``partition.metadata`` naming the id; opening it again finds the same directory."""
    path = log_dirs.open_log_dir(str(tmp_path), "clicks-eu", 3, NEW)
    assert os.path.basename(path) == f"clicks-eu-3-{NEW}"
    with open(os.path.join(path, "partition.metadata"), encoding="utf-8") as f:
        assert f.read() == f"version: 0\ntopic_id: {NEW}\n"
    assert log_dirs.open_log_dir(str(tmp_path), "clicks-eu", 3, NEW) == path
    assert sorted(os.listdir(tmp_path)) == [f"clicks-eu-3-{NEW}"]


def test_a_topic_created_again_gets_a_new_directory_not_the_old_log(tmp_path):
    """The same topic name under a new id opens an empty log beside the old one."""
    write_log(log_dirs.open_log_dir(str(tmp_path), "t", 0, OLD), [b"old"])
    path = log_dirs.open_log_dir(str(tmp_path), "t", 0, NEW)
    assert values_in(path) == []


def test_a_log_whose_partition_metadata_names_another_id_is_refused(tmp_path):
    """A directory whose file names another topic id is never opened (INCONSISTENT_TOPIC_ID),
    and stays as it is."""
    path = log_dirs.open_log_dir(str(tmp_path), "t", 0, NEW)
    log_dirs.write_topic_id(path, OLD)
    with pytest.raises(InconsistentTopicIdError) as raised:
        log_dirs.open_log_dir(str(tmp_path), "t", 0, NEW)
    assert raised.value.code == 103 and OLD in str(raised.value)
    assert log_dirs.read_topic_id(path) == OLD


@pytest.mark.parametrize(
    "text", ["", "version: 1\ntopic_id: x\n", "version: 0\n", "garbage"], ids=["empty", "v1", "no-id", "garbage"]
)
def test_an_unreadable_partition_metadata_is_a_storage_error(tmp_path, text):
    """A partition.metadata of an unknown version or without an id fails with a typed error."""
    path = log_dirs.open_log_dir(str(tmp_path), "t", 0, NEW)
    with open(os.path.join(path, "partition.metadata"), "w", encoding="utf-8") as f:
        f.write(text)
    with pytest.raises(StorageError):
        log_dirs.open_log_dir(str(tmp_path), "t", 0, NEW)


def test_a_directory_created_without_its_file_gets_it(tmp_path):
    """A crash between creating a directory and writing its file: the name says the id."""
    os.makedirs(tmp_path / f"t-0-{NEW}")
    path = log_dirs.open_log_dir(str(tmp_path), "t", 0, NEW)
    assert log_dirs.read_topic_id(path) == NEW


def test_a_log_of_the_old_layout_is_adopted_once_with_its_records(tmp_path):
    """``<topic>-<partition>`` written before topic ids is renamed to the new layout, given
    its partition.metadata, and reads as before; opening it again changes nothing."""
    write_log(str(tmp_path / "t-1-0"), [b"r0", b"r1"])
    path = log_dirs.open_log_dir(str(tmp_path), "t-1", 0, NEW)
    assert os.listdir(tmp_path) == [f"t-1-0-{NEW}"]
    assert log_dirs.read_topic_id(path) == NEW
    assert values_in(path) == [b"r0", b"r1"]
    assert log_dirs.open_log_dir(str(tmp_path), "t-1", 0, NEW) == path
    assert values_in(path) == [b"r0", b"r1"]


def test_an_old_layout_log_of_another_id_is_not_adopted(tmp_path):
    """An old-layout directory that already names another topic id (a migration of another
    incarnation cut short) is left alone: the replica starts a log of its own."""
    write_log(str(tmp_path / "t-0"), [b"old"])
    log_dirs.write_topic_id(str(tmp_path / "t-0"), OLD)
    path = log_dirs.open_log_dir(str(tmp_path), "t", 0, NEW)
    assert values_in(path) == [] and os.path.isdir(tmp_path / "t-0")


def test_stray_logs_are_renamed_then_deleted_and_nothing_else_is_touched(tmp_path):
    """Logs of deleted topics, of an older incarnation, of partitions moved away, and
    old-layout logs no replica can adopt are stray; assigned logs and anything that is not
    a log (another data directory, the controller's journal, files) stay."""
    data = str(tmp_path)
    for topic, partition, topic_id in [("kept", 0, NEW), ("gone", 0, OLD), ("again", 0, OLD), ("moved", 1, NEW)]:
        write_log(log_dirs.open_log_dir(data, topic, partition, topic_id), [b"x"])
    write_log(os.path.join(data, "legacy-0"), [b"x"])  # the old layout, assigned: adopted later
    write_log(os.path.join(data, "legacy-deleted-0"), [b"x"])  # the old layout, topic deleted
    write_log(os.path.join(data, "kept-0"), [b"x"])  # the old layout beside its adopted log
    os.makedirs(os.path.join(data, "broker-0"))
    log_dirs.load_data_dir(os.path.join(data, "broker-0"), "c", 0)  # another data directory
    os.makedirs(os.path.join(data, "controller"))
    os.makedirs(os.path.join(data, "empty-0"))  # no segment, no partition.metadata: not ours
    assigned = {("kept", 0): NEW, ("again", 0): NEW, ("legacy", 0): NEW}

    stray = log_dirs.mark_stray_logs(data, assigned)

    assert stray == ["again-0-" + OLD, "gone-0-" + OLD, "kept-0", "legacy-deleted-0", "moved-1-" + NEW]
    renamed = sorted(name for name in os.listdir(data) if name.endswith("-stray"))
    assert [name.split(".")[0] for name in renamed] == stray
    assert sorted(log_dirs.delete_stray_logs(data)) == renamed
    assert sorted(os.listdir(data)) == ["broker-0", "controller", "empty-0", f"kept-0-{NEW}", "legacy-0"]
    assert log_dirs.mark_stray_logs(data, assigned) == []


def test_a_removed_log_is_renamed_first_and_a_removal_cut_short_is_finished(tmp_path):
    """remove_log_dir never leaves a directory under a log's name; a stray directory left
    by a crash is deleted by the next delete_stray_logs."""
    path = log_dirs.open_log_dir(str(tmp_path), "t", 0, NEW)
    write_log(path, [b"x"])
    log_dirs.remove_log_dir(path)
    log_dirs.remove_log_dir(path)  # already gone: nothing to do
    assert os.listdir(tmp_path) == []
    os.makedirs(tmp_path / f"t-0-{NEW}.{OLD}-stray" / "sub")
    assert log_dirs.delete_stray_logs(str(tmp_path)) == [f"t-0-{NEW}.{OLD}-stray"]
    assert os.listdir(tmp_path) == []


def test_a_data_directory_is_formatted_once_with_a_directory_id(tmp_path):
    """A new data directory gets meta.json with the cluster id, broker id and a fresh
    directory id; read again, it is the same; without a broker id to give, None."""
    data = str(tmp_path / "d")
    assert log_dirs.load_data_dir(data, "cluster-1", None) is None
    formatted = log_dirs.load_data_dir(data, "cluster-1", 4, new_id=lambda: "dir-1")
    assert formatted == log_dirs.DataDirIdentity("cluster-1", 4, "dir-1")
    assert log_dirs.load_data_dir(data, "cluster-1", None, new_id=lambda: "dir-2") == formatted
    with open(os.path.join(data, "meta.json"), encoding="utf-8") as f:
        assert json.load(f) == {"version": 2, "cluster_id": "cluster-1", "broker_id": 4, "directory_id": "dir-1"}


def test_a_wiped_data_directory_gets_a_new_directory_id(tmp_path):
    """The directory id tells a wiped (or replaced) disk from the one the broker had."""
    data = tmp_path / "d"
    first = log_dirs.load_data_dir(str(data), "c", 0)
    (data / "meta.json").unlink()
    second = log_dirs.load_data_dir(str(data), "c", 0)
    assert first.directory_id != second.directory_id and (second.cluster_id, second.broker_id) == ("c", 0)


def test_a_data_directory_of_another_cluster_or_broker_is_refused(tmp_path):
    """meta.json of another cluster: INCONSISTENT_CLUSTER_ID; of another broker id: a config
    error. Either way the file is left as it was."""
    data = str(tmp_path / "d")
    log_dirs.load_data_dir(data, "old-cluster", 0, new_id=lambda: "dir-1")
    with pytest.raises(InconsistentClusterIdError) as raised:
        log_dirs.load_data_dir(data, "new-cluster", 0)
    assert raised.value.code == 104 and "old-cluster" in str(raised.value)
    with pytest.raises(InvalidConfigError):
        log_dirs.load_data_dir(data, "old-cluster", 1)
    assert log_dirs.load_data_dir(data, "old-cluster", 0) == log_dirs.DataDirIdentity("old-cluster", 0, "dir-1")


def test_a_meta_json_without_directory_id_gets_one_once(tmp_path):
    """A version 1 meta.json (cluster and broker id only) is given a directory id when first
    read, kept from then on."""
    os.makedirs(tmp_path / "d")
    (tmp_path / "d" / "meta.json").write_text(json.dumps({"cluster_id": "c", "broker_id": 2, "version": 1}))
    first = log_dirs.load_data_dir(str(tmp_path / "d"), "c", None, new_id=lambda: "dir-1")
    assert first == log_dirs.DataDirIdentity("c", 2, "dir-1")
    assert log_dirs.load_data_dir(str(tmp_path / "d"), "c", 2, new_id=lambda: "dir-2") == first


def test_an_unreadable_meta_json_is_a_storage_error(tmp_path):
    """meta.json that is not JSON or lacks its fields fails with a typed error."""
    os.makedirs(tmp_path / "d")
    for text in ("{", json.dumps({"broker_id": 0})):
        (tmp_path / "d" / "meta.json").write_text(text)
        with pytest.raises(StorageError):
            log_dirs.load_data_dir(str(tmp_path / "d"), "c", 0)
