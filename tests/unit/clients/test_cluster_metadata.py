"""``raylog.clients.cluster.Metadata``'s Kafka listener addresses: per listener name, the
first by default (what ``bootstrap_servers()`` and ``raylog start`` show), no Ray."""

from __future__ import annotations

import pytest

from raylog.clients.cluster import Metadata
from raylog.errors import InvalidConfigError


def answer(**extra) -> dict:
    """A controller's metadata answer of no topics, with ``extra``."""
    return {"cluster_id": "c", "brokers": {}, "topics": {}, "leaders": {}, "live": set(), "reassignments": {}, **extra}


def test_addresses_are_the_first_listeners_by_default_and_a_named_ones_on_request():
    """A broker without the listener asked for is left out; names are Kafka's, case-insensitive."""
    metadata = Metadata(
        answer(
            listeners={
                1: {"PLAIN": ("127.0.0.1", 9093), "SECURE": ("localhost", 9095)},
                0: {"PLAIN": ("127.0.0.1", 9092)},
            },
            listener_names=("PLAIN", "SECURE"),
        )
    )
    assert metadata.listeners == metadata.addresses() == {0: ("127.0.0.1", 9092), 1: ("127.0.0.1", 9093)}
    assert metadata.addresses("secure") == {1: ("localhost", 9095)}
    with pytest.raises(InvalidConfigError, match="no Kafka listener 'OTHER' .its listeners: PLAIN, SECURE"):
        metadata.addresses("OTHER")


def test_a_cluster_without_listeners_has_no_addresses():
    assert Metadata(answer()).listeners == {}
