"""Stores for the tiered storage tests: a real S3 API on the loopback (moto's server), and
helpers that read, damage and list objects through a store's pyarrow filesystem, so that a
test runs the same against a local directory and an S3 bucket."""

from __future__ import annotations

import uuid

import pyarrow.fs as pafs
from moto.server import ThreadedMotoServer


class S3Server:
    """A real S3 API on the loopback: moto's server, in a thread of this process. Stopped,
    it refuses connections; started again on the same port, it serves what it held (moto
    keeps its buckets in this process)."""

    def __init__(self):
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        self.host, self.port = self._server.get_host_and_port()

    def stop(self) -> None:
        self._server.stop()

    def start_again(self) -> None:
        self._server = ThreadedMotoServer(ip_address=self.host, port=self.port, verbose=False)
        self._server.start()

    def new_bucket(self, credentials: str = "") -> str:
        """A fresh bucket's URI. Credentials come from the environment, as in production, or
        from ``credentials`` (``key:secret``) in the URI, for processes that do not share
        this one's environment (a Ray cluster's replicas)."""
        bucket = f"raylog-{uuid.uuid4().hex[:16]}"
        query = f"endpoint_override={self.host}:{self.port}&scheme=http&region=us-east-1"
        user = f"{credentials}@" if credentials else ""
        pafs.FileSystem.from_uri(f"s3://{user}{bucket}?{query}&allow_bucket_creation=true")[0].create_dir(bucket)
        return f"s3://{user}{bucket}/tiered?{query}"


def read_object(filesystem, path: str) -> bytes:
    with filesystem.open_input_stream(path) as f:
        return f.read()


def write_object(filesystem, path: str, data: bytes) -> None:
    """Write (or overwrite) one object or file, as a test that damages a store does."""
    with filesystem.open_output_stream(path) as f:
        f.write(data)


def object_names(filesystem, directory: str) -> list[str]:
    """The names of the files directly in ``directory`` (on an object store, of the objects
    under that prefix), sorted."""
    infos = filesystem.get_file_info(pafs.FileSelector(directory))
    return sorted(i.base_name for i in infos if i.type == pafs.FileType.File)
