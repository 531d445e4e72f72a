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
    assert listeners.endpoints({0}) == {0: {"PLAINTEXT": ("127.0.0.1", 9092)}}

    listener.answer = "hang"
    confirm(listeners)
    assert listeners.endpoints({0}) == {0: {"PLAINTEXT": ("127.0.0.1", 9092)}}

    listeners._confirmed_at[0] -= 0.6  # it last confirmed 0.6 s ago: past the session
    confirm(listeners)
    assert listeners.endpoints({0}) == {}

    listener.answer = "listen"
    confirm(listeners)
    assert listeners.endpoints({0}) == {0: {"PLAINTEXT": ("127.0.0.1", 9092)}}


def test_a_dead_listener_leaves_the_metadata_at_once():
    listener = Listener({"PLAINTEXT": ("127.0.0.1", 9092, 9092)})
    listeners = fleet_of(listener)
    confirm(listeners)
    listener.answer = "die"
    confirm(listeners)
    assert listeners.endpoints({0}) == {}
    assert 0 not in listeners._actors  # started again at the next round, on the same port
