"""Fakes of what an Admin talks to, for its unit tests: actors (the controller, partition
leaders, coordinators) that record each call and answer it from a script, a cluster handle
over them, and :func:`make_admin`, an Admin on such a cluster with waiting for an answer made
the identity (each fake's ``remote`` returns the answer itself, not a reference)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import raylog
from raylog.clients import group as group_module
from raylog.clients.admin import base as admin_base
from raylog.clients.cluster import Metadata
from raylog.clients.security import ClientSession
from raylog.errors import UnknownTopicOrPartitionError
from raylog.types import OffsetAndTimestamp, TopicPartition


class FakeActor:
    """An actor whose every method records ``(method, args)`` and answers from ``answers``
    (``{method: answer}``): a callable is called with the call's arguments (keywords but
    the session), a list is a script answered in turn, anything else is the answer."""

    def __init__(self, **answers: Any):
        self.answers = answers
        self.calls: list[tuple] = []

    def __getattr__(self, method: str):
        if method.startswith("_"):
            raise AttributeError(method)

        def remote(*args: Any, session: Any = None, **kwargs: Any) -> Any:
            self.calls.append((method, *args))
            answer = self.answers[method]
            if callable(answer):
                return answer(*args, **kwargs)
            if isinstance(answer, list):
                return answer.pop(0)
            return answer

        return SimpleNamespace(remote=remote)

    def sent(self, method: str) -> list[tuple]:
        """The arguments of each call of ``method``, in order."""
        return [call[1:] for call in self.calls if call[0] == method]


class FakeCluster:
    """A cluster handle of the topics ``{name: partition count}``, partition ``(t, p)`` led by
    ``leaders[(t, p)]`` (a :class:`FakeActor` made for each one not given), and a scripted
    ``controller``. ``offsets[tp][timestamp]`` answers ListOffsets (see :func:`make_admin`)."""

    def __init__(self, topics: dict[str, int] | None = None, controller: FakeActor | None = None, **metadata: Any):
        topics = topics or {}
        self.controller = controller or FakeActor()
        self.leaders = {(t, p): FakeActor() for t, count in topics.items() for p in range(count)}
        self.leaders.update(metadata.pop("leaders", {}))
        self.offsets: dict[TopicPartition, dict[int, int]] = {}
        self.refreshes = 0
        self._metadata = Metadata(
            {
                "cluster_id": "fake",
                "brokers": metadata.get("brokers", {}),
                "topics": {t: SimpleNamespace(name=t, partitions=list(range(n))) for t, n in topics.items()},
                "leaders": self.leaders,
                "live": {0},
                "reassignments": metadata.get("reassignments", {}),
            }
        )

    def metadata(self, refresh: bool = False) -> Metadata:
        self.refreshes += refresh
        return self._metadata

    def session(self) -> ClientSession:
        return ClientSession(self, "PLAINTEXT")  # an anonymous client

    def missing_topics_error(self, topics: list[str]) -> UnknownTopicOrPartitionError:
        return UnknownTopicOrPartitionError(f"unknown topics: {', '.join(map(repr, topics))}")

    def leader(self, topic: str, partition: int) -> FakeActor:
        return self.leaders[(topic, partition)]


def make_admin(monkeypatch, cluster: FakeCluster, **settings: Any) -> tuple[raylog.Admin, list[float]]:
    """An Admin on ``cluster`` made with ``settings``, and the timeouts its answers are
    waited for with, in order. Coordinators' answers are not waited for either, and
    ListOffsets is answered from ``cluster.offsets``."""
    waits: list[float] = []

    def answered(ref: Any, timeout_s: float) -> Any:
        waits.append(timeout_s)
        return ref

    def list_offset(cluster: FakeCluster, tp: TopicPartition, timestamp: int, timeout_s: float, session=None):
        return OffsetAndTimestamp(cluster.offsets[tp][timestamp], -1)

    monkeypatch.setattr(admin_base, "call", answered)
    monkeypatch.setattr(group_module, "call", lambda ref, timeout_s: ref)
    monkeypatch.setattr(admin_base, "list_offset", list_offset)
    return raylog.Admin(cluster, **settings), waits
