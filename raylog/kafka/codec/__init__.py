"""Kafka's wire protocol codec: our table of the messages raylog speaks, compiled per
(message, version) into readers and writers, and the request/response frames around them.

    header, body = decode_request(frame)        # a request frame without its size prefix
    buffers = encode_response(header, body)     # size prefix included, for writer.writelines()
    buffers = error_response(header, code, body)

Bodies are dicts keyed by the snake_case of Kafka's field names; records fields are
memoryviews of the frame when decoded and any bytes-like (or a list of them) when encoded,
never copied. See :mod:`raylog.kafka.codec.messages` for the table.
"""

from raylog.errors import InvalidRequestError

from .error_bodies import supported_api_keys
from .frames import (
    EncodeError,
    RequestHeader,
    UnsupportedVersionError,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    error_response,
)
from .messages import MESSAGES, SUPPORTED, ApiKey

__all__ = [
    "MESSAGES",
    "SUPPORTED",
    "ApiKey",
    "EncodeError",
    "InvalidRequestError",
    "RequestHeader",
    "UnsupportedVersionError",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "error_response",
    "supported_api_keys",
]
