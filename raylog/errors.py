"""Typed errors of raylog.

Every error derives from :class:`RaylogError`, which carries two flags clients act on:

- ``retriable``: the same request may succeed if sent again (after a backoff);
- ``invalid_metadata``: the client's view of leaders is stale and must be refreshed
  before retrying.

API errors carry Kafka's error code and name where the meaning matches; those codes are
never renumbered. Errors that only ever arise inside a client have ``code = None``.
Look an API error up by its code with :func:`for_code`.
"""

from __future__ import annotations


class RaylogError(Exception):
    """Base of every raylog error."""

    code: int | None = None
    name: str = "RAYLOG_ERROR"
    retriable: bool = False
    invalid_metadata: bool = False

    def __reduce__(self):
        # Errors cross Ray process boundaries: rebuild them from their message only.
        return (type(self), self.args)


class ApiError(RaylogError):
    """An error with a Kafka error code, returned by brokers in responses."""


_BY_CODE: dict[int, type[ApiError]] = {}


def _api(code: int, name: str, *, retriable: bool = False, invalid_metadata: bool = False):
    def register(cls: type[ApiError]) -> type[ApiError]:
        cls.code, cls.name = code, name
        cls.retriable, cls.invalid_metadata = retriable, invalid_metadata
        assert code not in _BY_CODE, f"error code {code} registered twice"
        _BY_CODE[code] = cls
        return cls

    return register


def for_code(code: int) -> type[ApiError]:
    """The error class for a Kafka error code.

    Raises:
        KeyError: no error with that code is known.
    """
    return _BY_CODE[code]


@_api(1, "OFFSET_OUT_OF_RANGE")
class OffsetOutOfRangeError(ApiError):
    """The requested offset is below the log start offset or above the log end offset."""


@_api(2, "CORRUPT_MESSAGE", retriable=True)
class CorruptRecordError(ApiError):
    """A record batch failed validation: bad magic, CRC, length, count or body."""


@_api(3, "UNKNOWN_TOPIC_OR_PARTITION", retriable=True, invalid_metadata=True)
class UnknownTopicOrPartitionError(ApiError):
    """The topic or partition does not exist (or is not hosted here)."""


@_api(10, "MESSAGE_TOO_LARGE")
class RecordTooLargeError(ApiError):
    """A record batch is larger than ``max.message.bytes`` (or a record than the batch limit)."""


@_api(42, "INVALID_REQUEST")
class InvalidRequestError(ApiError):
    """A request that is well formed but not valid here (e.g. offsets out of order)."""


@_api(40, "INVALID_CONFIG")
class InvalidConfigError(ApiError, ValueError):
    """A configuration key is unknown or its value is out of range."""


@_api(56, "KAFKA_STORAGE_ERROR", retriable=True)
class StorageError(ApiError):
    """The log's disk failed an operation (full disk, I/O error); nothing partial was kept."""
