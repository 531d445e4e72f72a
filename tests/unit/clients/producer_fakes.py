"""Fakes of what a producer talks to, for its unit tests: a partition leader answering
produce requests in memory, a cluster handle of one topic led by such leaders, and
scripted transaction and group coordinators."""

from __future__ import annotations

import concurrent.futures
import threading
from types import SimpleNamespace

from raylog.clients.cluster import Metadata
from raylog.clients.security import ClientSession
from raylog.common import record_batch
from raylog.protocol import ProduceResponse, TxnResponse, error_fields

PRODUCER_ID = 42


class FakeLeader:
    """A partition leader that records each produce request and answers it when told to
    (or at once, with consecutive offsets, when ``auto_answer``)."""

    def __init__(self, auto_answer: bool = False):
        self.auto_answer = auto_answer
        self.requests: list = []  # (request, future), in arrival order
        self._next_offset = 0
        self._lock = threading.Lock()
        self.produce = SimpleNamespace(remote=self._produce)

    def _produce(self, request):
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            self.requests.append((request, future))
        if self.auto_answer:
            self.answer(len(self.requests) - 1)
        return SimpleNamespace(future=lambda: future)

    def answer(self, i: int, error: Exception | None = None) -> None:
        request, future = self.requests[i]
        if error is not None:
            future.set_result(ProduceResponse(**error_fields(error)))
            return
        header = record_batch.read_header(request.records)
        with self._lock:
            offset, self._next_offset = self._next_offset, self._next_offset + header.record_count
        future.set_result(ProduceResponse(base_offset=offset))

    def values(self, i: int) -> list[bytes]:
        return record_batch.decode_table(self.requests[i][0].records).column("value").to_pylist()

    def header(self, i: int) -> record_batch.BatchHeader:
        return record_batch.read_header(self.requests[i][0].records)


class FakeCluster:
    """One topic ``t``, partition i led by ``leaders[i]``; the controller hands out producer id 42."""

    def __init__(self, *leaders: FakeLeader):
        self._metadata = Metadata(
            {
                "cluster_id": "fake",
                "brokers": {},
                "topics": {"t": SimpleNamespace(partitions=list(range(len(leaders))), config={})},
                "leaders": {("t", i): leader for i, leader in enumerate(leaders)},
                "live": {0},
                "reassignments": {},
            }
        )
        self.controller = SimpleNamespace(
            init_producer_id=SimpleNamespace(remote=lambda session=None: "init_producer_id")
        )

    def metadata(self, refresh: bool = False) -> Metadata:
        return self._metadata

    def refresh_metadata(self, wait_s: float) -> bool:
        return True

    def session(self) -> ClientSession:
        return ClientSession(self, "PLAINTEXT")  # an anonymous client


class ScriptedCoordinator:
    """Every CoordinatorClient the manager makes: records calls and answers from ``script``
    (method -> list of answers, the last repeated; an exception is sent back as its code)."""

    def __init__(self):
        self.calls: list[tuple] = []  # (coordinator id, method, args)
        self.script: dict[str, list] = {}
        self.forgotten = 0

    def client(self, cluster, group_id, timeout_s, backoff_s, find="find_coordinator", session=None):
        coordinator = self

        class Client:
            def remote(self, method, *args):
                coordinator.calls.append((group_id, method, args))
                answers = coordinator.script.get(method, [TxnResponse(producer_id=7, producer_epoch=3)])
                answer = answers.pop(0) if len(answers) > 1 else answers[0]
                return TxnResponse(**error_fields(answer)) if isinstance(answer, Exception) else answer

            def call(self, method, *args):
                coordinator.calls.append((group_id, method, args))

            def after_error(self, exc):
                coordinator.forgotten += 1

        return Client()
