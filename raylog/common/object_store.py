"""Object stores named by a URI through ``pyarrow.fs`` (a local directory, S3, GCS, HDFS):
opening one, and its failures as raylog's errors. Shared by the broker's tiered storage
(:mod:`raylog.storage.remote_storage`) and the readers of a topic's Parquet history
(:mod:`raylog.common.history_format`), which open the same store in their own tasks."""

from __future__ import annotations

import contextlib
import urllib.parse
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.fs as pafs

from ..config import without_secret
from ..errors import InvalidConfigError, RemoteResourceNotFoundError, RemoteStorageError

#: ``pyarrow.fs`` type names of stores without real directories: an object is written without
#: its parent created first (creating it would only add empty marker objects, a request each).
_OBJECT_STORES = frozenset({"s3", "gcs"})


def is_object_store(filesystem: pafs.FileSystem) -> bool:
    """Whether ``filesystem`` is an object store (S3, GCS): no real directories, no rename,
    and an object appears whole when its upload completes."""
    return filesystem.type_name in _OBJECT_STORES


def filesystem_from_uri(uri: str) -> tuple[pafs.FileSystem, str]:
    """The store a URI names and the path within it (``pyarrow.fs.FileSystem.from_uri``; S3
    options may ride in the query, e.g. ``s3://bucket/prefix?endpoint_override=host:9000&scheme=http``).

    Credentials in the URI (``s3://key:secret@bucket``) work, but the environment or the
    machine's role is the place for them: errors name the URI with its secret starred out.

    Raises:
        InvalidConfigError: the URI is not one pyarrow knows.
        RemoteStorageError: the store could not be reached to set it up (an S3 URI
            without a region makes pyarrow ask the bucket's region).
    """
    try:
        return pafs.FileSystem.from_uri(_with_defaults(uri))
    except ValueError as exc:  # pyarrow.ArrowInvalid among them
        raise InvalidConfigError(without_secret(f"remote storage URI {uri!r} is not valid: {exc}", uri)) from None
    except (OSError, pa.ArrowException) as exc:
        raise RemoteStorageError(without_secret(f"cannot reach remote storage {uri!r}: {exc}", uri)) from None


def _with_defaults(uri: str) -> str:
    """``uri`` with raylog's defaults for its store where it does not set them: on S3,
    ``allow_delayed_open`` (an object that fits in one part is then written with one PutObject
    request; pyarrow otherwise opens a multipart upload for each, three requests for a
    1 KiB index: 24 vs 12 ms an object against moto on the loopback)."""
    parts = urllib.parse.urlsplit(uri)
    if parts.scheme != "s3" or "allow_delayed_open" in urllib.parse.parse_qs(parts.query):
        return uri
    return urllib.parse.urlunsplit(
        parts._replace(query="&".join(filter(None, (parts.query, "allow_delayed_open=true"))))
    )


@contextlib.contextmanager
def remote_errors(action: str, path: str, *, missing_is_not_found: bool = True) -> Iterator[None]:
    """Raise the store's failures in the block as raylog's errors: a missing object as
    RemoteResourceNotFoundError (or, ``missing_is_not_found`` false, RemoteStorageError),
    any other ``OSError`` or ``pyarrow.ArrowException`` as RemoteStorageError."""
    try:
        yield
    except FileNotFoundError as exc:
        if missing_is_not_found:
            raise RemoteResourceNotFoundError(f"cannot {action} {path}: not found ({exc})") from exc
        raise RemoteStorageError(f"cannot {action} {path}: {exc}") from exc
    except (OSError, pa.ArrowException) as exc:
        raise RemoteStorageError(f"cannot {action} {path}: {exc}") from exc


def delete_dir(filesystem: pafs.FileSystem, path: str) -> None:
    """Delete a directory and everything under it (on an object store, every object under the
    prefix); one that is not there is fine.

    Raises:
        RemoteStorageError: the store failed; what was deleted stays deleted.
    """
    with remote_errors("delete", path, missing_is_not_found=False):
        with contextlib.suppress(FileNotFoundError):
            filesystem.delete_dir(path)
