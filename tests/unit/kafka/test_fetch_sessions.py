"""Kafka's incremental fetch sessions (KIP-227) as the listener keeps them: the cache's
rules (no Ray), then a Fetch handler answering a session's fetches from fake leaders."""

from __future__ import annotations

import asyncio
import types
import uuid

import pytest

from raylog.actors.kafka import data
from raylog.actors.kafka.context import CONNECTION, BrokerContext
from raylog.common import record_batch as rb
from raylog.errors import FetchSessionIdNotFoundError, InvalidFetchSessionEpochError
from raylog.kafka import codec
from raylog.kafka.fetch_sessions import EVICTION_MS, FINAL_EPOCH, INITIAL_EPOCH, NO_SESSION_ID, FetchSessionCache
from raylog.protocol import FetchResponse

NOW = 1_000_000


def part(partition: int, offset: int = 0, max_bytes: int = 1 << 20) -> dict:
    return {"partition": partition, "fetch_offset": offset, "partition_max_bytes": max_bytes}


def keys(context) -> list[tuple[str, int]]:
    return [(topic, p["partition"]) for topic, p in context.wanted]


def test_a_full_fetch_opens_a_session_that_later_fetches_change_by_difference():
    cache = FetchSessionCache()
    full = cache.begin(NO_SESSION_ID, INITIAL_EPOCH, [("t", part(0)), ("t", part(1))], [], NOW)
    assert full.session_id != NO_SESSION_ID and not full.incremental and keys(full) == [("t", 0), ("t", 1)]
    sid = full.session_id
    # Incremental: partition 1's offset moves, u-0 joins, t-0 stays as it was.
    step = cache.begin(sid, 1, [("t", part(1, 40)), ("u", part(0))], [], NOW + 1)
    assert step.incremental and keys(step) == [("t", 0), ("t", 1), ("u", 0)]
    assert [p["fetch_offset"] for _, p in step.wanted] == [0, 40, 0]
    # t-0 forgotten; the epoch moves on by one per fetch.
    step = cache.begin(sid, 2, [], [("t", 0)], NOW + 2)
    assert keys(step) == [("t", 1), ("u", 0)]
    with pytest.raises(InvalidFetchSessionEpochError):
        cache.begin(sid, 2, [], [], NOW + 3)  # sent twice
    with pytest.raises(FetchSessionIdNotFoundError):
        cache.begin(sid + 1, 1, [], [], NOW + 3)
    # Epoch -1 closes it (this fetch is a full one without a session); epoch 0 opens another.
    closing = cache.begin(sid, FINAL_EPOCH, [("t", part(1))], [], NOW + 4)
    assert closing.session_id == NO_SESSION_ID and len(cache) == 0
    assert cache.begin(NO_SESSION_ID, FINAL_EPOCH, [("t", part(1))], [], NOW).session_id == NO_SESSION_ID
    assert len(cache) == 0


def test_an_incremental_answer_names_only_partitions_with_news():
    cache = FetchSessionCache()
    full = cache.begin(NO_SESSION_ID, INITIAL_EPOCH, [("t", part(0)), ("t", part(1))], [], NOW)
    assert full.include(("t", 0), (10, 10, 0), news=True) and full.include(("t", 1), (5, 5, 0), news=False)
    step = cache.begin(full.session_id, 1, [], [], NOW + 1)
    assert not step.include(("t", 0), (10, 10, 0), news=False)  # nothing new
    assert step.include(("t", 1), (6, 6, 0), news=False)  # its high watermark moved
    assert step.include(("t", 0), (10, 10, 0), news=True)  # records (or an error)
    step = cache.begin(full.session_id, 2, [], [], NOW + 2)
    assert not step.include(("t", 1), (6, 6, 0), news=False)
    assert step.include(("t", 1), (6, 6, 3), news=False)  # its log start moved


def test_a_full_cache_evicts_only_a_session_idle_long_enough():
    cache = FetchSessionCache(max_sessions=2)
    first = cache.begin(NO_SESSION_ID, INITIAL_EPOCH, [("t", part(0))], [], NOW).session_id
    second = cache.begin(NO_SESSION_ID, INITIAL_EPOCH, [("t", part(0))], [], NOW + 1).session_id
    assert cache.begin(NO_SESSION_ID, INITIAL_EPOCH, [("t", part(0))], [], NOW + 2).session_id == NO_SESSION_ID
    cache.begin(first, 1, [], [], NOW + EVICTION_MS)  # used again: the second is the oldest now
    third = cache.begin(NO_SESSION_ID, INITIAL_EPOCH, [("t", part(0))], [], NOW + 1 + EVICTION_MS)
    assert third not in (NO_SESSION_ID, first, second)
    with pytest.raises(FetchSessionIdNotFoundError):
        cache.begin(second, 1, [], [], NOW + 2 + EVICTION_MS)
    cache.begin(first, 2, [], [], NOW + 2 + EVICTION_MS)


class _Leaders:
    """Each partition's leader answers a fetch from ``log`` (partition -> (records, HW))."""

    def __init__(self, log: dict[int, tuple[bytes, int]]):
        self.log = log
        self.fetch = self
        self.asked: list[tuple[int, int]] = []

    def remote(self, request):
        partition = self.partition
        records, hw = self.log[partition]
        self.asked.append((partition, request.offset))
        data_ = records if request.offset < hw else b""
        return FetchResponse(high_watermark=hw, last_stable_offset=hw, log_start_offset=0, records=data_)


class _Context(BrokerContext):
    async def call(self, ref, timeout_s=None):
        return ref

    async def convert(self, conversion, batch):
        return conversion(batch)


def test_the_fetch_handler_serves_a_session(monkeypatch):
    """A consumer's session over two partitions: the full fetch answers both, an incremental
    fetch that moves partition 0 on answers partition 0 (records) but not the idle partition
    1, until its high watermark moves."""
    stored = rb.stamp(rb.read_header(rb.build([b"value"])), 0, 0) + rb.build([b"value"])[rb.STAMP.size :]
    leaders = _Leaders({0: (stored, 1), 1: (b"", 0)})

    async def leader(ctx, topic, partition):
        leaders.partition = partition
        return leaders

    monkeypatch.setattr(data, "_leader", leader)
    ctx = _Context("c", 0, None)
    header = codec.RequestHeader(codec.ApiKey.FETCH, 12, 1, "test")

    def fetch(session_id, epoch, partitions):
        body = {
            "max_wait_ms": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": session_id,
            "session_epoch": epoch,
            "topics": [{"topic": "t", "partitions": partitions}] if partitions else [],
            "forgotten_topics_data": [],
        }

        async def run():
            CONNECTION.set({})
            return await data.fetch(ctx, header, body)

        answer = asyncio.run(run())
        named = {p["partition_index"]: p for r in answer["responses"] for p in r["partitions"]}
        return answer, named

    first, named = fetch(NO_SESSION_ID, INITIAL_EPOCH, [part(0), part(1)])
    sid = first["session_id"]
    assert sid != NO_SESSION_ID and set(named) == {0, 1} and named[0]["records"]
    _, named = fetch(sid, 1, [part(0, 1)])
    assert named == {}  # partition 0 read to its end, partition 1 idle: no news
    leaders.log[1] = (stored, 1)
    _, named = fetch(sid, 2, [])
    assert set(named) == {1} and named[1]["high_watermark"] == 1 and named[1]["records"]
    stale, named = fetch(sid, 2, [])
    assert stale["error_code"] == InvalidFetchSessionEpochError.code and named == {}


def test_fetch_v13_names_topics_by_id_and_answers_unknown_ids(monkeypatch):
    """KIP-516: from Fetch v13 a request names each topic by its id, and the answer too; an
    id no topic has is UNKNOWN_TOPIC_ID for each of its partitions."""
    stored = rb.stamp(rb.read_header(rb.build([b"value"])), 0, 0) + rb.build([b"value"])[rb.STAMP.size :]
    leaders = _Leaders({0: (stored, 1)})

    async def leader(ctx, topic, partition):
        assert topic == "t"
        leaders.partition = partition
        return leaders

    monkeypatch.setattr(data, "_leader", leader)
    topic_id, stranger = uuid.uuid4(), uuid.uuid4()

    md = {"topics": {"t": types.SimpleNamespace(topic_id=topic_id.hex)}}

    class _ById(_Context):
        async def metadata(self, refresh=False):
            return md

    ctx = _ById("c", 0, None)
    maps = []
    for version in (13, 15, 16):
        header = codec.RequestHeader(codec.ApiKey.FETCH, version, 1, "test")
        body = {
            "max_wait_ms": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": NO_SESSION_ID,
            "session_epoch": FINAL_EPOCH,
            "topics": [
                {"topic_id": topic_id, "partitions": [part(0)]},
                {"topic_id": stranger, "partitions": [part(3)]},
            ],
            "forgotten_topics_data": [],
        }
        frame = b"".join(bytes(b) for b in codec.encode_request(header, body))  # in that version's format

        async def run(frame=frame):
            CONNECTION.set({})
            decoded_header, decoded = codec.decode_request(frame[4:])
            return decoded_header, await data.fetch(ctx, decoded_header, decoded)

        decoded_header, answer = asyncio.run(run())
        wire = b"".join(bytes(b) for b in codec.encode_response(decoded_header, answer))
        _, answer = codec.decode_response(codec.ApiKey.FETCH, version, wire[4:])
        by_id = {r["topic_id"]: r["partitions"] for r in answer["responses"]}
        assert by_id[topic_id][0]["records"] and by_id[topic_id][0]["error_code"] == 0
        assert [(p["partition_index"], p["error_code"]) for p in by_id[stranger]] == [(3, 100)]
        maps.append(md["topic_ids"])
    # The id -> name map is made once per metadata answer, not per fetch (1.9 ms a fetch for
    # 1,000 topics when it was made each time).
    assert maps[0] == {topic_id: "t"} and all(m is maps[0] for m in maps)
