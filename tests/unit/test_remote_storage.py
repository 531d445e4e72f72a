"""Tiered storage's object store over pyarrow.fs: a segment's objects copied, read by range,
deleted; a half-finished upload told apart from a whole one; a failing store raising
RemoteStorageError (no Ray, a local directory as the store)."""

from __future__ import annotations

import os

import pyarrow.fs as pafs
import pytest

from raylog.common import record_batch
from raylog.config import LogConfig
from raylog.errors import InvalidConfigError, RemoteResourceNotFoundError, RemoteStorageError, RetriableError
from raylog.storage import producer_snapshot, txn_index
from raylog.storage.files import write_atomically
from raylog.storage.leader_epoch import LeaderEpochCache
from raylog.storage.log import Log
from raylog.storage.remote_log_metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata
from raylog.storage.remote_storage import IndexType, LogSegmentData, RemoteStorageManager, UploadState
from raylog.storage.txn_index import AbortedTxn

UUID = "6f1c9a52-3f0e-4c5b-9d2a-0b8e7c4d1a23"
UUID2 = "0c9d4f1e-7a2b-4c3d-8e5f-6a7b8c9d0e1f"
CONTENTS = {
    "log_segment": bytes(range(256)) * 40,  # 10_240 bytes
    "offset_index": b"o" * 16,
    "time_index": b"t" * 24,
    "producer_snapshot": b"s" * 10,
    "leader_epoch_checkpoint": b"0\n1\n0 0\n",
}
KINDS = {
    IndexType.OFFSET: "offset_index",
    IndexType.TIMESTAMP: "time_index",
    IndexType.PRODUCER_SNAPSHOT: "producer_snapshot",
    IndexType.LEADER_EPOCH: "leader_epoch_checkpoint",
}


def metadata(start_offset: int = 100, uuid: str = UUID) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId("clicks", 3, uuid), start_offset, start_offset + 99, 5, 1, 6, ((0, start_offset),), 10_240
    )


@pytest.fixture
def segment_files(tmp_path) -> LogSegmentData:
    """A closed segment's local files (made-up contents), with a transaction index."""
    directory = tmp_path / "local"
    directory.mkdir()
    paths = {}
    for field, content in {**CONTENTS, "transaction_index": b"x" * 28}.items():
        paths[field] = str(directory / field)
        with open(paths[field], "wb") as f:
            f.write(content)
    return LogSegmentData(**paths)


@pytest.fixture
def store_dir(tmp_path) -> str:
    return str(tmp_path / "remote")


@pytest.fixture
def store(remote_uri) -> RemoteStorageManager:
    return RemoteStorageManager.from_uri(remote_uri)


class FlakyHandler(pafs.FileSystemHandler):
    """A local directory that fails, with OSError, the calls ``fail`` accepts (a method's
    name and path): an object store gone, or one that breaks mid-upload."""

    def __init__(self):
        self.local = pafs.LocalFileSystem()
        self.fail = lambda method, path: False

    def _check(self, method: str, path: str) -> None:
        if self.fail(method, path):
            raise OSError(f"store unavailable ({method} {path})")

    def get_type_name(self):
        return "flaky"

    def normalize_path(self, path):
        return path

    def get_file_info(self, paths):
        for path in paths:
            self._check("get_file_info", path)
        return self.local.get_file_info(paths)

    def get_file_info_selector(self, selector):
        self._check("get_file_info_selector", selector.base_dir)
        return self.local.get_file_info(selector)

    def create_dir(self, path, recursive):
        self._check("create_dir", path)
        self.local.create_dir(path, recursive=recursive)

    def delete_dir(self, path):
        self._check("delete_dir", path)
        self.local.delete_dir(path)

    def delete_dir_contents(self, path, missing_dir_ok=False):
        self._check("delete_dir_contents", path)
        self.local.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self):
        raise OSError("not in these tests")

    def delete_file(self, path):
        self._check("delete_file", path)
        self.local.delete_file(path)

    def move(self, src, dest):
        self._check("move", src)
        self.local.move(src, dest)

    def copy_file(self, src, dest):
        self._check("copy_file", src)
        self.local.copy_file(src, dest)

    def open_input_stream(self, path):
        self._check("open_input_stream", path)
        return self.local.open_input_stream(path)

    def open_input_file(self, path):
        self._check("open_input_file", path)
        return self.local.open_input_file(path)

    def open_output_stream(self, path, metadata):
        self._check("open_output_stream", path)
        return self.local.open_output_stream(path, compression=None, metadata=metadata)

    def open_append_stream(self, path, metadata):
        self._check("open_append_stream", path)
        return self.local.open_append_stream(path, compression=None, metadata=metadata)


@pytest.fixture
def flaky(store_dir):
    """``(store, handler)``: the store over a FlakyHandler; set ``handler.fail`` to break it."""
    handler = FlakyHandler()
    return RemoteStorageManager(pafs.PyFileSystem(handler), store_dir), handler


def listing(store: RemoteStorageManager) -> dict[str, int]:
    """Object name (below the store's base path) -> size, of every object in the store."""
    infos = store.filesystem.get_file_info(pafs.FileSelector(store.base_path, recursive=True, allow_not_found=True))
    return {i.path[len(store.base_path) + 1 :]: i.size for i in infos if i.type == pafs.FileType.File}


# --- copy, read, delete ---------------------------------------------------------------


def test_copy_lays_out_one_object_per_file_named_by_offset_and_uuid(store, segment_files):
    """<base>/<topic>-<partition>/<20-digit start offset>-<uuid>.<kind>, each object the
    local file's bytes, and a manifest; the upload is then COMPLETE."""
    assert store.upload_state(metadata()) == UploadState.ABSENT
    store.copy_log_segment_data(metadata(), segment_files)
    stem = f"clicks-3/00000000000000000100-{UUID}"
    suffixes = (".log", ".index", ".timeindex", ".snapshot", ".leader-epoch-checkpoint", ".txnindex", ".manifest")
    objects = listing(store)
    assert sorted(objects) == sorted(stem + suffix for suffix in suffixes)
    assert objects[stem + ".log"] == 10_240 and objects[stem + ".txnindex"] == 28
    assert store.object_path(metadata(), ".log") == f"{store.base_path}/{stem}.log"
    assert store.upload_state(metadata()) == UploadState.COMPLETE


def test_ranged_fetches_return_exactly_the_bytes_asked_for(store, segment_files):
    """fetch_log_segment reads [start, end], end inclusive (None: to the end); shorter where
    the object ends, empty past it; a range that is not one is refused."""
    store.copy_log_segment_data(metadata(), segment_files)
    data = CONTENTS["log_segment"]
    for start, end in ((0, 0), (0, 4_095), (1_000, 1_999), (10_000, 10_239), (10_239, 10_239)):
        assert store.fetch_log_segment(metadata(), start, end) == data[start : end + 1]
    assert store.fetch_log_segment(metadata(), 0) == data and store.fetch_log_segment(metadata(), 9_000) == data[9_000:]
    assert store.fetch_log_segment(metadata(), 10_000, 20_000) == data[10_000:]
    assert (
        store.fetch_log_segment(metadata(), 10_240) == b""
        and store.fetch_log_segment(metadata(), 50_000, 60_000) == b""
    )
    for start, end in ((-1, 5), (10, 9)):
        with pytest.raises(ValueError):
            store.fetch_log_segment(metadata(), start, end)


def test_ranged_fetch_reads_only_the_range(flaky, segment_files):
    """The .log is opened for random access and read at the offset (read_at), not read
    whole: a store that refuses whole-object streams still serves a range."""
    store, handler = flaky
    store.copy_log_segment_data(metadata(), segment_files)
    handler.fail = lambda method, path: method == "open_input_stream"
    assert store.fetch_log_segment(metadata(), 512, 1_023) == CONTENTS["log_segment"][512:1_024]


def test_each_index_is_fetched_whole(store, segment_files):
    """fetch_index returns each index object's bytes; a segment copied without a transaction
    index has none: RemoteResourceNotFoundError, which reads as no aborted transactions."""
    store.copy_log_segment_data(metadata(), segment_files)
    for kind, field in KINDS.items():
        assert store.fetch_index(metadata(), kind) == CONTENTS[field]
    assert store.fetch_index(metadata(), IndexType.TRANSACTION) == b"x" * 28
    without = LogSegmentData(**{**segment_files.__dict__, "transaction_index": None})
    other = metadata(uuid="0a1b2c3d-0000-4000-8000-000000000001")
    store.copy_log_segment_data(other, without)
    assert store.upload_state(other) == UploadState.COMPLETE
    with pytest.raises(RemoteResourceNotFoundError):
        store.fetch_index(other, IndexType.TRANSACTION)


def test_delete_removes_every_object_and_may_be_repeated(store, segment_files):
    """Deletion removes the segment's objects (not another segment's); deleting again, or
    deleting what was never copied, is fine; reads then raise RemoteResourceNotFoundError."""
    other = metadata(start_offset=200)
    store.copy_log_segment_data(metadata(), segment_files)
    store.copy_log_segment_data(other, segment_files)
    store.delete_log_segment_data(metadata())
    store.delete_log_segment_data(metadata())
    store.delete_log_segment_data(metadata(start_offset=900))
    assert store.upload_state(metadata()) == UploadState.ABSENT and store.upload_state(other) == UploadState.COMPLETE
    assert all(name.startswith("clicks-3/00000000000000000200-") for name in listing(store))
    with pytest.raises(RemoteResourceNotFoundError):
        store.fetch_log_segment(metadata(), 0, 10)
    with pytest.raises(RemoteResourceNotFoundError):
        store.fetch_index(metadata(), IndexType.OFFSET)


def test_deleting_a_partition_removes_its_objects_only_and_may_be_repeated(store, segment_files):
    """A deleted topic's partition leaves the store whole; another partition's objects stay."""
    other = RemoteLogSegmentMetadata(RemoteLogSegmentId("clicks", 4, UUID), 100, 199, 5, 1, 6, ((0, 100),), 10_240)
    store.copy_log_segment_data(metadata(), segment_files)
    store.copy_log_segment_data(metadata(start_offset=200), segment_files)
    store.copy_log_segment_data(other, segment_files)
    store.delete_partition("clicks", 3)
    store.delete_partition("clicks", 3)
    store.delete_partition("never-copied", 0)
    assert (
        all(name.startswith("clicks-4/") for name in listing(store))
        and store.upload_state(other) == UploadState.COMPLETE
    )
    assert store.upload_state(metadata()) == UploadState.ABSENT


def test_clean_orphans_deletes_only_old_objects_of_ids_not_kept(store_dir, segment_files):
    """The objects of an id not kept go, its manifest first, once all are older than the
    cut-off; a kept id, or an orphan with an object written since, stays; files of other names
    are not touched. (A local directory, whose times a test can set.)"""
    store = RemoteStorageManager.from_uri(f"file://{store_dir}")
    kept, orphan, fresh = metadata(), metadata(200, "00000000-0000-4000-8000-000000000001"), metadata(300, UUID2)
    for m in (kept, orphan, fresh):
        store.copy_log_segment_data(m, segment_files)
    with open(os.path.join(store_dir, "clicks-3", "notes.txt"), "w") as f:
        f.write("not an object")
    for name in listing(store):
        os.utime(os.path.join(store_dir, name), (1_000, 1_000))  # every object old: 1 000 s after the epoch
    os.utime(store.object_path(fresh, ".log"), (5_000, 5_000))  # written since the cut-off
    deleted = store.clean_orphans("clicks", 3, [kept.segment_id], modified_before_ms=2_000_000)
    assert deleted[0].endswith(".manifest") and {os.path.basename(p)[:20] for p in deleted} == {f"{200:020d}"}
    assert store.upload_state(orphan) == UploadState.ABSENT and store.upload_state(kept) == UploadState.COMPLETE
    assert store.upload_state(fresh) == UploadState.COMPLETE and "clicks-3/notes.txt" in listing(store)
    assert store.clean_orphans("clicks", 4, [], modified_before_ms=2_000_000) == []  # no such directory


def test_clean_orphans_goes_by_the_times_the_store_tells(store, segment_files, clock):
    """Each store tells when an object was written (an object store its upload's time): a
    cut-off before the upload keeps an orphan, one after it deletes the orphan and only it."""
    kept, orphan = metadata(), metadata(200, UUID2)
    for m in (kept, orphan):
        store.copy_log_segment_data(m, segment_files)
    written_ms = max(i.mtime_ns for i in store.filesystem.get_file_info([store.object_path(orphan, ".log")])) // 10**6
    assert store.clean_orphans("clicks", 3, [kept.segment_id], modified_before_ms=written_ms - 60_000) == []
    deleted = store.clean_orphans("clicks", 3, [kept.segment_id], modified_before_ms=written_ms + 60_000)
    assert len(deleted) == 7 and all(f"-{UUID2}." in path for path in deleted)
    assert store.upload_state(orphan) == UploadState.ABSENT and store.upload_state(kept) == UploadState.COMPLETE


def test_a_real_segment_round_trips(tmp_path, store, clock):
    """The files a Log writes, found by LogSegmentData.in_directory, come back byte for byte."""
    directory = str(tmp_path / "clicks-3")
    log = Log.open(directory, LogConfig(), clock=clock)
    for _ in range(3):
        log.append_as_leader(record_batch.build([b"v%d" % j for j in range(10)], timestamps_ms=[clock()] * 10), 0)
    log.roll()
    producer_snapshot.write(directory, 30, [])
    LeaderEpochCache(directory).assign(0, 0)
    write_atomically(txn_index.path(directory, 0), txn_index.encode([AbortedTxn(7, 3, 9)]))
    files = LogSegmentData.in_directory(directory, 0, 30)
    assert files.log_segment == os.path.join(directory, "00000000000000000000.log")
    assert files.producer_snapshot == os.path.join(directory, "00000000000000000030.snapshot")
    segment = RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate("clicks", 3), 0, 29, clock(), 1, clock(), ((0, 0),), 0
    )
    store.copy_log_segment_data(segment, files)
    with open(files.log_segment, "rb") as f:
        assert store.fetch_log_segment(segment, 0) == f.read()
    assert txn_index.decode(store.fetch_index(segment, IndexType.TRANSACTION)) == [AbortedTxn(7, 3, 9)]
    assert producer_snapshot.decode(store.fetch_index(segment, IndexType.PRODUCER_SNAPSHOT)) == []
    assert LogSegmentData.in_directory(directory, 30, 30).transaction_index is None
    for s in log._segments:
        s.close()


def test_from_uri_takes_a_local_directory_and_refuses_unknown_schemes(store_dir):
    """file:// URIs name a local directory; a URI pyarrow does not know is a config error."""
    store = RemoteStorageManager.from_uri(f"file://{store_dir}/")
    assert isinstance(store.filesystem, pafs.LocalFileSystem) and store.base_path == store_dir
    with pytest.raises(InvalidConfigError):
        RemoteStorageManager.from_uri("nosuchscheme://bucket/x")


def test_an_s3_uri_names_its_endpoint_and_a_bad_one_is_refused_without_its_secret(s3_server, segment_files):
    """An S3 URI carries the bucket, the prefix and pyarrow's options (raylog's default:
    allow_delayed_open); a URI with a bad option is a config error whose message stars out
    the secret of credentials written in it."""
    uri = s3_server.new_bucket()
    store = RemoteStorageManager.from_uri(uri)
    assert store.filesystem.type_name == "s3" and store.base_path.endswith("/tiered")
    options = store.filesystem.__reduce__()[1][0]  # pyarrow's own options, as it pickles them
    assert options["allow_delayed_open"] and options["endpoint_override"] == f"{s3_server.host}:{s3_server.port}"
    chosen = RemoteStorageManager.from_uri(uri + "&allow_delayed_open=false").filesystem.__reduce__()[1][0]
    assert not chosen["allow_delayed_open"]  # one PutObject a small object unless the URI says otherwise
    store.copy_log_segment_data(metadata(), segment_files)
    assert store.upload_state(metadata()) == UploadState.COMPLETE
    for uri in ("s3://key:s3cr3t@bucket/x?no_such_option=1", "s3://key:s3cr3t@bucket/x?region=us-east-1&scheme=ftp"):
        with pytest.raises(InvalidConfigError) as refused:
            RemoteStorageManager.from_uri(uri)
        assert "s3cr3t" not in str(refused.value) and "key:***@bucket" in str(refused.value)


# --- half-finished uploads ------------------------------------------------------------


def _manifest(store) -> str:
    return store.object_path(metadata(), ".manifest")


def test_an_upload_without_its_manifest_is_partial(store, segment_files):
    """A copy cut short before its manifest (every object there, or the .log not yet) is
    PARTIAL, never COMPLETE; deletion clears it."""
    store.copy_log_segment_data(metadata(), segment_files)
    store.filesystem.delete_file(_manifest(store))
    assert store.upload_state(metadata()) == UploadState.PARTIAL
    store.filesystem.delete_file(store.object_path(metadata(), ".log"))
    assert store.upload_state(metadata()) == UploadState.PARTIAL
    store.delete_log_segment_data(metadata())
    assert store.upload_state(metadata()) == UploadState.ABSENT


def test_a_truncated_object_or_a_bad_manifest_is_partial(store, segment_files):
    """An object shorter than the manifest says (a torn write), one missing, or a manifest
    that is not valid: PARTIAL."""
    store.copy_log_segment_data(metadata(), segment_files)
    log_path = store.object_path(metadata(), ".log")
    with store.filesystem.open_output_stream(log_path, compression=None) as sink:
        sink.write(CONTENTS["log_segment"][:5_000])
    assert store.upload_state(metadata()) == UploadState.PARTIAL
    store.copy_log_segment_data(metadata(), segment_files)
    store.filesystem.delete_file(store.object_path(metadata(), ".timeindex"))
    assert store.upload_state(metadata()) == UploadState.PARTIAL
    for garbage in (b"\xc1garbage", b"\x93\x01\x02\x03", b""):
        store.copy_log_segment_data(metadata(), segment_files)
        with store.filesystem.open_output_stream(_manifest(store), compression=None) as sink:
            sink.write(garbage)
        assert store.upload_state(metadata()) == UploadState.PARTIAL


@pytest.mark.parametrize("failing_suffix", [".index", ".txnindex", ".log", ".manifest"])
def test_a_copy_that_fails_midway_is_not_reported_as_copied(flaky, segment_files, failing_suffix):
    """The store fails on one object: the copy raises RemoteStorageError (retriable), no
    manifest is written, the upload is PARTIAL (ABSENT when the first object failed); a retry
    once the store is back completes it."""
    store, handler = flaky
    handler.fail = lambda method, path: method == "open_output_stream" and path.endswith(failing_suffix)
    with pytest.raises(RemoteStorageError) as failed:
        store.copy_log_segment_data(metadata(), segment_files)
    assert failed.value.retriable and isinstance(failed.value, RetriableError)
    assert not isinstance(failed.value, RemoteResourceNotFoundError)
    handler.fail = lambda method, path: False
    expected = UploadState.ABSENT if failing_suffix == ".index" else UploadState.PARTIAL
    assert store.upload_state(metadata()) == expected
    store.copy_log_segment_data(metadata(), segment_files)
    assert store.upload_state(metadata()) == UploadState.COMPLETE


def test_copying_again_first_withdraws_the_old_manifest(flaky, segment_files):
    """A COMPLETE upload copied again (the same id) is not COMPLETE while, or if, the new
    copy fails: its manifest goes before any object is rewritten."""
    store, handler = flaky
    store.copy_log_segment_data(metadata(), segment_files)
    handler.fail = lambda method, path: method == "open_output_stream" and path.endswith(".log")
    with pytest.raises(RemoteStorageError):
        store.copy_log_segment_data(metadata(), segment_files)
    handler.fail = lambda method, path: False
    assert store.upload_state(metadata()) == UploadState.PARTIAL


def test_a_missing_local_file_fails_the_copy_before_any_upload(store, segment_files):
    """A local file gone (its segment deleted meanwhile): RemoteStorageError, nothing written."""
    os.remove(segment_files.time_index)
    with pytest.raises(RemoteStorageError, match="time_index"):
        store.copy_log_segment_data(metadata(), segment_files)
    assert store.upload_state(metadata()) == UploadState.ABSENT


# --- an unavailable store -------------------------------------------------------------


@pytest.fixture(params=["failing calls", "s3 server stopped"])
def breakable(request, flaky):
    """``(store, break_it, mend_it)``: a store whose every call fails (the FlakyHandler), or
    an S3 bucket whose server stops (connections refused; one attempt per call, where
    pyarrow's default retries for ~6 s) and starts again with what it held."""
    if request.param == "failing calls":
        store, handler = flaky
        return (
            store,
            lambda: setattr(handler, "fail", lambda method, path: True),
            lambda: setattr(handler, "fail", lambda method, path: False),
        )
    server = request.getfixturevalue("s3_server")
    base = server.new_bucket().split("://", 1)[1].split("?", 1)[0]
    filesystem = pafs.S3FileSystem(
        endpoint_override=f"{server.host}:{server.port}",
        scheme="http",
        region="us-east-1",
        retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=1),
    )
    down = []

    def mend() -> None:
        if down:
            server.start_again()
            down.clear()

    request.addfinalizer(mend)
    return RemoteStorageManager(filesystem, base), lambda: (server.stop(), down.append(True)), mend


def test_every_operation_on_an_unavailable_store_raises_remote_storage_error(breakable, segment_files):
    """With every call of the store failing, each operation raises RemoteStorageError (not
    a pyarrow or OS error, and not "not found"); once it is back, what was copied before is
    intact and the failed copy of another segment is not COMPLETE."""
    store, break_it, mend_it = breakable
    store.copy_log_segment_data(metadata(), segment_files)
    other = metadata(start_offset=200)
    break_it()
    operations = [
        lambda: store.copy_log_segment_data(other, segment_files),
        lambda: store.fetch_log_segment(metadata(), 0, 99),
        lambda: store.fetch_index(metadata(), IndexType.OFFSET),
        lambda: store.upload_state(metadata()),
        lambda: store.delete_log_segment_data(metadata()),
    ]
    for operation in operations:
        with pytest.raises(RemoteStorageError) as failed:
            operation()
        assert type(failed.value) is RemoteStorageError and isinstance(failed.value, RetriableError)
    mend_it()
    assert store.upload_state(metadata()) == UploadState.COMPLETE
    assert store.upload_state(other) == UploadState.ABSENT
    assert store.fetch_log_segment(metadata(), 0) == CONTENTS["log_segment"]
    store.copy_log_segment_data(other, segment_files)
    assert store.upload_state(other) == UploadState.COMPLETE


def test_reads_failing_midway_raise_remote_storage_error(flaky, segment_files):
    """A store that lists but cannot open objects: reads raise RemoteStorageError, and
    upload_state cannot say COMPLETE (it raises too)."""
    store, handler = flaky
    store.copy_log_segment_data(metadata(), segment_files)
    handler.fail = lambda method, path: method == "open_input_file"
    for read in (
        lambda: store.fetch_log_segment(metadata(), 0),
        lambda: store.fetch_index(metadata(), IndexType.LEADER_EPOCH),
        lambda: store.upload_state(metadata()),
    ):
        with pytest.raises(RemoteStorageError, match="store unavailable"):
            read()
