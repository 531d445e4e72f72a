"""Frames: request and response headers around the compiled message bodies.

A request is ``api_key int16, api_version int16, correlation_id int32, client_id nullable
string`` (header v1), plus a tagged-field section in the API's flexible versions (header v2);
``client_id`` keeps its int16 length in both. A response header is the correlation id (v0),
plus a tagged-field section in flexible versions (v1), except that ApiVersions responses
always use v0 so that a client can read one at any version.
"""

from __future__ import annotations

import logging
import struct
from typing import Any, NamedTuple

from raylog import errors
from raylog.errors import InvalidRequestError

from . import compiler
from . import primitives as prim
from .error_bodies import BUILDERS
from .messages import MESSAGES, SUPPORTED, ApiKey

log = logging.getLogger(__name__)

_KEYS = {int(k): k for k in ApiKey}
_REQUEST_HEADER = struct.Struct(">hhi")
_CORRELATION = struct.Struct(">ii")
_ERRORS = (struct.error, IndexError, ValueError, OverflowError)
_ENCODE_ERRORS = (struct.error, TypeError, AttributeError, ValueError, KeyError, OverflowError, UnicodeError)


class RequestHeader(NamedTuple):
    """A request's header: ``api_key`` is an :class:`ApiKey` when raylog knows the API, else the int."""

    api_key: ApiKey | int
    api_version: int
    correlation_id: int
    client_id: str | None = None


class UnsupportedVersionError(errors.UnsupportedVersionError):
    """A request for an API raylog does not know, or at a version outside :data:`SUPPORTED`
    (Kafka's UNSUPPORTED_VERSION, code 35). ``header`` is the request's header: answer with
    ``error_response(err.header, 35)``."""

    def __init__(self, header: RequestHeader):
        super().__init__(header)
        self.header = header

    def __str__(self) -> str:
        h = self.header
        supported = SUPPORTED.get(h.api_key)
        known = f"versions {supported[0]}-{supported[1]} are supported" if supported else "the API is unknown"
        return f"api key {int(h.api_key)} version {h.api_version} is not supported ({known})"


class EncodeError(ValueError):
    """A body that cannot be encoded: a value of the wrong type or out of its field's range."""


def _view(frame) -> memoryview:
    b = memoryview(frame)
    if b.format != "B" or b.ndim != 1:
        b = b.cast("B")
    return b


def _size(buffers: list) -> int:
    return sum(len(x) if type(x) is bytearray else prim.nbytes(x) for x in buffers)


def _finish(buffers: list, last: bytearray) -> list:
    if last or not buffers:
        buffers.append(last)
    first = buffers[0]
    struct.pack_into(">i", first, 0, _size(buffers) - 4)
    return buffers


def _parse_header(b: memoryview) -> tuple[RequestHeader, int]:
    n = len(b)
    if n < 10:
        raise InvalidRequestError(f"a request frame of {n} bytes is shorter than a request header")
    api_key, api_version, correlation_id = _REQUEST_HEADER.unpack_from(b, 0)
    try:
        client_id, p = prim.read_string(b, 8, False, True)
    except prim.Malformed as exc:
        raise InvalidRequestError(f"bad client id in a request header: {exc}") from None
    return RequestHeader(_KEYS.get(api_key, api_key), api_version, correlation_id, client_id), p


def decode_request(frame) -> tuple[RequestHeader, dict]:
    """Parse a request frame (without its 4-byte size prefix) into its header and body dict.
    Bytes after a complete body are ignored (logged at DEBUG), as Kafka's broker does.

    Raises:
        UnsupportedVersionError: an unknown API or a version outside :data:`SUPPORTED`.
        InvalidRequestError: the bytes are not a well-formed request of that API and version.
    """
    b = _view(frame)
    header, p = _parse_header(b)
    supported = SUPPORTED.get(header.api_key)
    if supported is None or not supported[0] <= header.api_version <= supported[1]:
        raise UnsupportedVersionError(header)
    message = MESSAGES[(header.api_key, "request")]
    n = len(b)
    try:
        if message.is_flexible(header.api_version):
            p = prim.skip_tagged_fields(b, p)
        body, p = compiler.reader(message, header.api_version)(b, p, n)
    except _ERRORS as exc:
        raise InvalidRequestError(
            f"malformed {message.name} v{header.api_version} request: {exc or type(exc).__name__}"
        ) from None
    if p != n:
        # Kafka's parser ignores them too: librdkafka sends 3 after an all-topics Metadata v9+.
        log.debug("ignored %d bytes after the end of a %s v%d request", n - p, message.name, header.api_version)
    return header, body


def _response_header_flexible(api_key: ApiKey, version: int) -> bool:
    return api_key != ApiKey.API_VERSIONS and MESSAGES[(api_key, "response")].is_flexible(version)


def _message(header: RequestHeader, kind: str) -> Any:
    """The table's ``kind`` ("request" or "response") message of the header's API.

    Raises:
        UnsupportedVersionError: the header's API or version is not supported.
    """
    supported = SUPPORTED.get(header.api_key)
    if supported is None or not supported[0] <= header.api_version <= supported[1]:
        raise UnsupportedVersionError(header)
    return MESSAGES[(header.api_key, kind)]


def encode_response(header: RequestHeader, body: dict) -> list:
    """The response to ``header`` saying ``body``, as a list of buffers (size prefix included)
    for ``writer.writelines()``. Records fields are passed through uncopied.

    Raises:
        UnsupportedVersionError: the header's API or version is not supported.
        EncodeError: a value in ``body`` does not fit its field.
    """
    api_key, version = header.api_key, header.api_version
    message = _message(header, "response")
    o = bytearray(8)
    _CORRELATION.pack_into(o, 0, 0, header.correlation_id)
    if _response_header_flexible(api_key, version):
        o.append(0)
    buffers: list = []
    try:
        last = compiler.writer(message, version)(o, body, buffers)
    except _ENCODE_ERRORS as exc:
        raise EncodeError(f"cannot encode a {message.name} v{version} response: {exc!r}") from exc
    return _finish(buffers, last)


def encode_request(header: RequestHeader, body: dict) -> list:
    """A request frame (size prefix included) as a list of buffers: what a client sends.

    Raises:
        UnsupportedVersionError: the header's API or version is not supported.
        EncodeError: a value in ``body`` does not fit its field.
    """
    api_key, version = header.api_key, header.api_version
    message = _message(header, "request")
    o = bytearray(4)
    o += _REQUEST_HEADER.pack(api_key, version, header.correlation_id)
    buffers: list = []
    try:
        prim.write_string(o, header.client_id, False, True)
        if message.is_flexible(version):
            o.append(0)
        last = compiler.writer(message, version)(o, body, buffers)
    except _ENCODE_ERRORS as exc:
        raise EncodeError(f"cannot encode a {message.name} v{version} request: {exc!r}") from exc
    return _finish(buffers, last)


def decode_response(api_key: int, api_version: int, frame) -> tuple[int, dict]:
    """Parse a response frame (without its size prefix) to a request of ``api_key`` at
    ``api_version``: ``(correlation_id, body)``. An ApiVersions response saying
    UNSUPPORTED_VERSION is read as version 0, as clients do.

    Raises:
        UnsupportedVersionError: the API or version is not supported.
        InvalidRequestError: the bytes are not a well-formed response.
    """
    key = _KEYS.get(api_key, api_key)
    supported = SUPPORTED.get(key)
    if supported is None or not supported[0] <= api_version <= supported[1]:
        raise UnsupportedVersionError(RequestHeader(key, api_version, -1))
    b = _view(frame)
    n = len(b)
    message = MESSAGES[(key, "response")]
    try:
        correlation_id = prim.INT32.unpack_from(b, 0)[0]
        p = 4
        if key == ApiKey.API_VERSIONS and prim.INT16.unpack_from(b, p)[0] == UnsupportedVersionError.code:
            api_version = 0
        if _response_header_flexible(key, api_version):
            p = prim.skip_tagged_fields(b, p)
        body, p = compiler.reader(message, api_version)(b, p, n)
    except _ERRORS as exc:
        raise InvalidRequestError(
            f"malformed {message.name} v{api_version} response: {exc or type(exc).__name__}"
        ) from None
    if p != n:
        raise InvalidRequestError(f"{n - p} bytes after the end of a {message.name} v{api_version} response")
    return correlation_id, body


def error_response(header: RequestHeader, error_code: int, request: dict | None = None) -> list:
    """A whole, valid response to ``header`` whose every error code is ``error_code``, as
    buffers ready to write. Where the response lists topics, partitions, groups or resources,
    those of ``request`` (the decoded request body, when there is one) are echoed.

    An ApiVersions request at an unsupported version is answered at version 0 (with the
    supported versions, as KIP-511 has it); another API at a version outside :data:`SUPPORTED`
    is answered at the nearest supported version; an unknown API with the bare response header
    and the int16 error code.
    """
    supported = SUPPORTED.get(header.api_key)
    if supported is None:
        o = bytearray(10)
        struct.pack_into(">iih", o, 0, 6, header.correlation_id, error_code)
        return [o]
    low, high = supported
    version = header.api_version
    if not low <= version <= high:
        version = 0 if header.api_key == ApiKey.API_VERSIONS else min(max(version, low), high)
    body = BUILDERS[header.api_key](request or {}, error_code)
    return encode_response(header._replace(api_version=version), body)
