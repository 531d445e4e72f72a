"""The controller's fleet of Kafka listeners (``ListenerFleet``) on hand-made listener
handles: which listeners a Metadata answer lists (no Ray cluster)."""

from __future__ import annotations

import asyncio

import pytest
import ray

from raylog.actors.kafka import fleet
from raylog.config import ControllerConfig
from raylog.coordination.sessions import new_key


class Listener:
    """A listener handle whose ``start`` answers with its endpoints, hangs, or fails."""

    def __init__(self, endpoints: dict[str, tuple[str, int, int]]):
        self.endpoints = endpoints
        self.answer = "listen"
        self.start = self

    def remote(self):
        return self._start()

    async def _start(self):
        if self.answer == "hang":
            await asyncio.sleep(3600)
        if self.answer == "die":
            raise ray.exceptions.ActorDiedError()
        return self.endpoints


def fleet_of(listener: Listener) -> fleet.ListenerFleet:
    listeners = fleet.ListenerFleet("c", ControllerConfig(), controller=None, session_key=new_key())
    listeners._actors[0] = ("node0", listener)
    return listeners


def confirm(listeners: fleet.ListenerFleet) -> None:
    asyncio.run(listeners._confirm(0))


@pytest.fixture(autouse=True)
def short_timeouts(monkeypatch):
    monkeypatch.setattr(fleet, "LISTENER_CHECK_TIMEOUT_S", 0.05)
    monkeypatch.setattr(fleet, "LISTENER_SESSION_TIMEOUT_S", 0.5)


def test_a_busy_listener_stays_listed_until_its_session_times_out():
    """The 64-client soak saw every broker's listener dropped from Metadata every minute or
    two: each was too busy to confirm within 5 s, and a Kafka client then found its
    partitions without a leader. A listener that listened and is slow to answer is kept, as
    Kafka keeps a broker registered until its session times out; one silent past that goes."""
    listener = Listener({"PLAINTEXT": ("127.0.0.1", 9092, 9092)})
    listeners = fleet_of(listener)
    confirm(listeners)
    assert listeners.endpoints({0}, {}) == {0: {"PLAINTEXT": ("127.0.0.1", 9092)}}

    listener.answer = "hang"
    confirm(listeners)
    assert listeners.endpoints({0}, {}) == {0: {"PLAINTEXT": ("127.0.0.1", 9092)}}

    listeners._confirmed_at[0] -= 0.6  # it last confirmed 0.6 s ago: past the session
    confirm(listeners)
    assert listeners.endpoints({0}, {}) == {}

    listener.answer = "listen"
    confirm(listeners)
    assert listeners.endpoints({0}, {}) == {0: {"PLAINTEXT": ("127.0.0.1", 9092)}}


def test_a_dead_listener_leaves_the_metadata_at_once():
    listener = Listener({"PLAINTEXT": ("127.0.0.1", 9092, 9092)})
    listeners = fleet_of(listener)
    confirm(listeners)
    listener.answer = "die"
    confirm(listeners)
    assert listeners.endpoints({0}, {}) == {}
    assert 0 not in listeners._actors  # started again at the next round, on the same port


def test_a_brokers_own_advertised_listeners_win_for_the_listeners_they_name(caplog):
    """Per-broker ``advertised.listeners`` (a dynamic config, resource name the broker's id):
    a host and port as given, a host alone (port 0) with the port bound, names it leaves out
    as the cluster's settings say; a value the cluster's listeners no longer take (they were
    changed at a restart) is logged once and not used."""
    config = ControllerConfig(
        listeners="INTERNAL://:9092,EXTERNAL://:9192",
        listener_security_protocol_map="INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
    )
    listeners = fleet.ListenerFleet("c", config, controller=None, session_key=new_key())
    listeners._actors[0] = (
        "node0",
        Listener({"INTERNAL": ("10.0.0.5", 9092, 9092), "EXTERNAL": ("nat.example.com", 9192, 9193)}),
    )
    confirm(listeners)
    both = {"INTERNAL": ("10.0.0.5", 9092), "EXTERNAL": ("nat.example.com", 9192)}
    assert listeners.endpoints({0}, {}) == {0: both}
    own = {"0": {"advertised.listeners": "EXTERNAL://b0.example.com:19192"}, "": {"log.retention.ms": "1"}}
    assert listeners.endpoints({0}, own) == {0: {**both, "EXTERNAL": ("b0.example.com", 19192)}}
    host_only = {"0": {"advertised.listeners": "EXTERNAL://b0.example.com:0,INTERNAL://:9999"}}
    assert listeners.endpoints({0}, host_only) == {
        0: {"INTERNAL": ("10.0.0.5", 9999), "EXTERNAL": ("b0.example.com", 9193)}
    }
    assert listeners.endpoints({1}, host_only) == {}
    stale = {"0": {"advertised.listeners": "GONE://b0.example.com:1"}}
    with caplog.at_level("WARNING", logger=fleet.__name__):
        assert listeners.endpoints({0}, stale) == {0: both}
        assert listeners.endpoints({0}, stale) == {0: both}
    assert [r.getMessage() for r in caplog.records] == [
        "broker 0: its own advertised.listeners is not used: advertised.listeners: GONE is not a name in "
        "listeners ('INTERNAL://:9092,EXTERNAL://:9192'), got 'GONE://b0.example.com:1'"
    ]
