"""Names as Kafka checks them: topics (with '.'/'_' collisions), client ids and transactional ids (no Ray)."""

from __future__ import annotations

import logging

import pytest

from raylog.common.names import (
    MAX_ID_BYTES,
    OFFSETS_TOPIC,
    validate_client_id,
    validate_topic_name,
    validate_transactional_id,
)
from raylog.coordination.metadata import MetadataImage
from raylog.errors import InvalidConfigError, InvalidRequestError, InvalidTopicError


@pytest.mark.parametrize("name", ["a", "A-b_c.1", "x" * 249, "..a", "-"])
def test_legal_topic_names_pass(name):
    """ASCII letters, digits, '.', '_' and '-', 1 to 249 of them, other than "." and ".."."""
    assert validate_topic_name(name) == name


@pytest.mark.parametrize("name", ["", ".", "..", "x" * 250, "a b", "a/b", "é", "a\x00", None, 5, b"bytes", ["a"]])
def test_illegal_topic_names_raise_invalid_topic_error(name):
    """Empty, "." or "..", over 249 characters, any other character, or not a string: InvalidTopicError."""
    with pytest.raises(InvalidTopicError):
        validate_topic_name(name)


def test_a_name_colliding_through_dot_and_underscore_is_refused_and_warned_of(caplog):
    """'a.b' and 'a_b' name the same metrics: creating one when the other exists is refused; either alone warns."""
    with caplog.at_level(logging.WARNING, logger="raylog.common.names"):
        assert validate_topic_name("a.b", existing={"other"}) == "a.b"
    assert "could collide" in caplog.text
    with pytest.raises(InvalidTopicError, match="collides with existing topics: a_b"):
        validate_topic_name("a.b", existing={"a_b", "c"})
    with pytest.raises(InvalidTopicError, match=OFFSETS_TOPIC):
        validate_topic_name("__consumer.offsets", existing={OFFSETS_TOPIC})
    assert validate_topic_name("a.b", existing={"a.b"}) == "a.b"  # itself (TopicAlreadyExists is checked next)


def test_the_controller_refuses_a_colliding_topic():
    """The metadata image (the controller's decision) refuses 'clicks.v1' once 'clicks_v1' exists."""
    image = MetadataImage()
    image.brokers[0] = None  # placement only needs the broker ids
    image.apply(image.create_topic("clicks_v1", 1, 1))
    with pytest.raises(InvalidTopicError, match="collides"):
        image.create_topic("clicks.v1", 1, 1)
    image.create_topic("clicks-v1", 1, 1)  # '-' never collides


@pytest.mark.parametrize("client_id", ["", "producer-1", "é中😀", "x" * MAX_ID_BYTES])
def test_client_ids_are_any_protocol_string(client_id):
    """A client id is any string of at most 32767 UTF-8 bytes, the empty one included (Kafka's rule)."""
    assert validate_client_id(client_id) == client_id


@pytest.mark.parametrize("client_id", [None, 3, b"id", "x" * (MAX_ID_BYTES + 1), "é" * 20_000, "\udc80"])
def test_bad_client_ids_raise_the_callers_error(client_id):
    """Not a string, too long in UTF-8, or not encodable: InvalidRequestError at a server, the client's own error."""
    with pytest.raises(InvalidRequestError):
        validate_client_id(client_id)
    with pytest.raises(InvalidConfigError):
        validate_client_id(client_id, InvalidConfigError)


@pytest.mark.parametrize("transactional_id", ["", None, 7, "x" * (MAX_ID_BYTES + 1)])
def test_bad_transactional_ids_are_refused(transactional_id):
    """A transactional id must be a non-empty string of at most 32767 bytes (Kafka refuses an empty one)."""
    with pytest.raises(InvalidRequestError):
        validate_transactional_id(transactional_id)
    assert validate_transactional_id("copier-1") == "copier-1"
