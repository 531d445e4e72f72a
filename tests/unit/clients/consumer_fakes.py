"""Fakes of what a consumer talks to, for its unit tests (no Ray): partition leaders that
answer fetches, offset look-ups and KIP-320 epoch queries from an in-memory log, a cluster
handle of one topic led by them, and ``ray.wait`` / ``ray.get`` for their answers."""

from __future__ import annotations

import bisect
import time
from types import SimpleNamespace

import numpy as np
import ray

from raylog.clients.cluster import Metadata
from raylog.clients.security import ClientSession
from raylog.common import record_batch
from raylog.common.requests import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from raylog.errors import UnknownTopicOrPartitionError
from raylog.protocol import FetchResponse, ListOffsetsResponse, error_fields


class FakeRef:
    """An answer (or the error ``ray.get`` raises), ready at once unless ``ready`` is False."""

    def __init__(self, value=None, error: BaseException | None = None, ready: bool = True):
        self.value, self.error, self.ready = value, error, ready


def fake_wait(refs, num_returns=1, timeout=None):
    ready = [ref for ref in refs if ref.ready]
    if not ready and timeout:
        time.sleep(min(timeout, 0.01))  # (nothing answers meanwhile: no busy loop)
    return ready, [ref for ref in refs if not ref.ready]


def fake_get(ref, timeout=None):
    if ref.error is not None:
        raise ref.error
    return ref.value


def patch_ray(monkeypatch) -> None:
    """``ray.wait`` and ``ray.get`` of :class:`FakeRef`s (the consumer's modules call them as ``ray.*``)."""
    monkeypatch.setattr(ray, "wait", fake_wait)
    monkeypatch.setattr(ray, "get", fake_get)


def stamped(batches: list[bytes], base: int = 0, epoch: int = 0) -> list[bytes]:
    """``batches`` as a leader stores them: consecutive offsets from ``base``, under ``epoch``."""
    out = []
    for batch in batches:
        view = bytearray(batch)
        header = record_batch.read_header(view)
        view[: record_batch.STAMP.size] = record_batch.stamp(header, base, epoch)
        out.append(bytes(view))
        base += header.record_count
    return out


class FakeLeader:
    """A partition leader over an in-memory log of stamped batches: a fetch gets whole batches
    from the one holding its offset until ``max_bytes`` (at least one), as a leader does.
    ``answers``: scripted FetchResponses (or exceptions for ``ray.get``) given first, in order.
    ``epoch_ends``: leader epoch -> ``(epoch, end offset)`` answered to KIP-320 queries."""

    def __init__(self, batches: list[bytes] = (), epoch: int = 0):
        self.log = np.frombuffer(b"".join(batches), dtype=np.uint8)
        headers = list(record_batch.iter_headers(self.log)) if len(self.log) else []
        self.starts = [h.base_offset for _, h in headers]
        self.positions = [pos for pos, _ in headers] + [len(self.log)]
        self.end = headers[-1][1].next_offset if headers else 0
        self.epoch = epoch
        self.answers: list = []
        self.requests: list = []
        self.refs: list[FakeRef] = []  # each fetch's answer, in order
        self.hold = False  # True: fetches stay unanswered until their ref is made ready
        self.epoch_queries: list[int] = []
        self.epoch_ends: dict[int, tuple[int, int]] = {}
        self.epoch_error = 0  # the error code KIP-320 queries answer
        self.log_start = 0
        self.fetch = SimpleNamespace(remote=self._fetch)
        self.list_offsets = SimpleNamespace(remote=self._list_offsets)
        self.end_offset_for_epoch = SimpleNamespace(remote=self._end_offset_for_epoch)

    def _fetch(self, request):
        self.requests.append(request)
        ref = self._answer(request)
        ref.ready = ref.ready and not self.hold
        self.refs.append(ref)
        return ref

    def _answer(self, request) -> FakeRef:
        if self.answers:
            answer = self.answers.pop(0)
            return FakeRef(error=answer) if isinstance(answer, BaseException) else FakeRef(answer)
        first = max(0, bisect.bisect_right(self.starts, request.offset) - 1)
        last = first + 1
        while last < len(self.starts) and self.positions[last + 1] - self.positions[first] <= request.max_bytes:
            last += 1
        if request.offset >= self.end:  # caught up: the long poll waits at the leader
            return FakeRef(FetchResponse(high_watermark=self.end, last_stable_offset=self.end), ready=False)
        records = self.log[self.positions[first] : self.positions[last]]
        return FakeRef(
            FetchResponse(
                high_watermark=self.end, last_stable_offset=self.end, records=records, leader_epoch=self.epoch
            )
        )

    def _list_offsets(self, timestamp, leader_epoch, isolation_level, session=None):
        if timestamp == EARLIEST_TIMESTAMP:
            offset = self.log_start
        elif timestamp == LATEST_TIMESTAMP:
            offset = self.end
        else:
            offset = -1
        return FakeRef(ListOffsetsResponse(offset=offset, timestamp_ms=-1, leader_epoch=self.epoch))

    def _end_offset_for_epoch(self, epoch, session=None):
        self.epoch_queries.append(epoch)
        found, end = self.epoch_ends.get(epoch, (epoch, self.end))
        return FakeRef((self.epoch_error, found, end))


def failed_fetch(error: Exception) -> FetchResponse:
    """A fetch answer reporting ``error``."""
    return FetchResponse(**error_fields(error))


class FakeCluster:
    """One topic ``t``, partition i led by ``leaders[i]`` under ``epoch``; counts metadata refreshes."""

    def __init__(self, *leaders: FakeLeader, epoch: int = 0):
        self.leaders = leaders
        self.refreshes = 0
        self.set_epoch(epoch)

    def set_epoch(self, epoch: int) -> None:
        """A new leader epoch for every partition (as after an election)."""
        partitions = [SimpleNamespace(partition=i, leader_epoch=epoch, isr=(1,)) for i in range(len(self.leaders))]
        self._metadata = Metadata(
            {
                "cluster_id": "fake",
                "brokers": {},
                "topics": {"t": SimpleNamespace(name="t", partitions=partitions, config={})},
                "leaders": {("t", i): leader for i, leader in enumerate(self.leaders)},
                "live": {0},
                "reassignments": {},
            }
        )

    def metadata(self, refresh: bool = False) -> Metadata:
        self.refreshes += refresh
        return self._metadata

    def missing_topics_error(self, missing):
        return UnknownTopicOrPartitionError(f"unknown topics {missing}")

    def session(self) -> ClientSession:
        return ClientSession(self, "PLAINTEXT")  # an anonymous client


def small_batches(count: int, per_batch: int, value: bytes = b"v" * 10, epoch: int = 0) -> list[bytes]:
    """``count`` batches of ``per_batch`` small records each, stamped from offset 0 under ``epoch``."""
    batch = record_batch.build([value] * per_batch, now_ms=1)
    return stamped([batch] * count, epoch=epoch)


class FakeCoordinatorClient:
    """A group coordinator's client: records calls; ``fetch_offsets`` answers ``committed``
    (tp -> OffsetAndMetadata); ``remote`` calls answer ``remote_answer`` once ``release``d."""

    def __init__(self, group_id: str = "g", committed: dict | None = None):
        self.group_id = group_id
        self.committed = dict(committed or {})
        self.calls: list[tuple] = []  # (method, args)
        self.refs: list[FakeRef] = []
        self.afters: list = []  # each remote call's ``after``
        self.forgotten: list[Exception] = []
        self.remote_answer = None

    def call(self, method, *args):
        self.calls.append((method, args))
        if method == "fetch_offsets":
            wanted = args[1]
            return {tp: tuple(o) for tp, o in self.committed.items() if wanted is None or tp in wanted}
        return None

    def remote(self, method, *args, after=None):
        self.calls.append((method, args))
        self.afters.append(after)
        ref = FakeRef(self.remote_answer, ready=False)
        self.refs.append(ref)
        return ref

    def release(self, *answers) -> None:
        """The remote calls answered, with ``answers`` in order (None: success)."""
        for ref, answer in zip(self.refs, answers, strict=False):
            ref.ready, ref.value = True, answer

    def check(self, response):
        if isinstance(response, Exception):
            raise response
        return response

    def after_error(self, exc):
        self.forgotten.append(exc)
