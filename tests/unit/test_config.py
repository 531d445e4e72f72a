"""LogConfig validation and Kafka property names; error codes."""

from __future__ import annotations

import pickle
import re

import pytest

from raylog import errors
from raylog.config import LogConfig


def test_kafka_property_names_and_strings_are_accepted():
    """Users type Kafka's dotted names with string values; both forms give the same config."""
    config = LogConfig.from_properties({"retention.ms": "1000", "segment.bytes": 4096}, flush_messages=5)
    assert (config.retention_ms, config.segment_bytes, config.flush_messages) == (1000, 4096, 5)
    assert config.to_properties()["retention.ms"] == "1000"
    assert LogConfig.from_properties(config.to_properties()) == config


def test_unknown_keys_list_the_known_ones():
    """An unknown key is refused with the list of known keys."""
    with pytest.raises(errors.InvalidConfigError, match="known: .*retention.ms"):
        LogConfig.from_properties({"retention.hours": "5"})


@pytest.mark.parametrize(
    "properties",
    [
        {"segment.bytes": "12"},
        {"segment.bytes": "lots"},
        {"retention.ms": "-5"},
        {"flush.messages": 0},
        {"message.timestamp.type": "WallClock"},
        {"index.interval.bytes": True},
    ],
)
def test_bad_values_are_typed_errors(properties):
    """Out-of-range or mistyped values raise InvalidConfigError (a ValueError)."""
    with pytest.raises(errors.InvalidConfigError):
        LogConfig.from_properties(properties)
    with pytest.raises(ValueError):
        LogConfig.from_properties(properties)


def test_error_codes_are_kafkas_and_errors_pickle():
    """API errors carry Kafka's codes, are found by code, and survive pickling (Ray)."""
    assert errors.for_code(1) is errors.OffsetOutOfRangeError
    assert errors.CorruptRecordError.code == 2 and errors.CorruptRecordError.name == "CORRUPT_MESSAGE"
    assert errors.UnknownTopicOrPartitionError.invalid_metadata
    error = pickle.loads(pickle.dumps(errors.StorageError("disk full")))
    assert isinstance(error, errors.StorageError) and error.retriable and str(error) == "disk full"


@pytest.mark.parametrize(
    "properties",
    [{"retention.ms": "9" * 32_700 + "x"}, {"cleanup.policy": "c" * 32_700}, {"k" * 32_700: "1"}],
    ids=["not-a-number", "not-a-choice", "unknown-key"],
)
def test_an_error_quotes_at_most_the_start_of_a_long_value(properties):
    """Messages go back to Kafka clients in int16-length strings: a 32.7 KB value is quoted
    cut short, with its length, never whole."""
    with pytest.raises(errors.InvalidConfigError) as refused:
        LogConfig.from_properties(properties)
    assert len(str(refused.value)) < 2_000
    assert re.search(r"\.\.\. \(3270\d characters\)", str(refused.value))


def test_the_request_memory_pool_holds_at_least_one_largest_request():
    """As Kafka's: queued.max.request.bytes is -1 or at least socket.request.max.bytes."""
    from raylog.config import ControllerConfig

    with pytest.raises(errors.InvalidConfigError, match="queued.max.request.bytes"):
        ControllerConfig.from_properties({"queued.max.request.bytes": "1000", "socket.request.max.bytes": "1001"})
    assert ControllerConfig.from_properties({"queued.max.request.bytes": "-1"}).queued_max_request_bytes == -1
