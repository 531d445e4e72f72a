"""The follower's fetch loop decisions (no Ray): failed calls are retried after a pause and the
leader is reported to the controller at most once a second; refusals and bad answers are never
taken for a dead leader; an error never ends the loop."""

from __future__ import annotations

import pytest

from raylog.config import TopicConfig
from raylog.coordination.fetcher import LEADER_REPORT_INTERVAL_MS, EpochAnswer, EpochQuery, FollowerFetcher, Next
from raylog.coordination.partition import Partition
from raylog.errors import InvalidConfigError, NotLeaderOrFollowerError
from raylog.protocol import FetchRequest, FetchResponse, error_fields
from raylog.storage.leader_epoch import UNDEFINED


@pytest.fixture
def fetcher(open_log, clock) -> FollowerFetcher:
    """Broker 2 follows leader 1 in epoch 3."""
    part = Partition("t", 0, broker_id=2, log=open_log(), config=TopicConfig(), clock=clock)
    part.become_follower(leader=1, leader_epoch=3, replicas=(1, 2), isr=(1, 2), partition_epoch=5)
    return FollowerFetcher(part, leader=1, leader_epoch=3, clock=clock)


def _truncated(fetcher: FollowerFetcher) -> FetchRequest:
    query = fetcher.next_request()
    assert isinstance(query, EpochQuery)
    assert fetcher.on_answer(query, EpochAnswer(0, 3, 0)) is Next.AGAIN
    request = fetcher.next_request()
    assert isinstance(request, FetchRequest)
    return request


def test_failed_calls_report_the_leader_at_most_once_an_interval(fetcher, clock):
    """Defect 11 (``leader_unreachable`` on transient errors): a follower whose calls keep
    failing asks the controller to check the leader once, then only after the interval; in
    between it pauses and tries again."""
    request = _truncated(fetcher)
    assert fetcher.on_failure(request) is Next.REPORT_LEADER
    for _ in range(5):
        clock.advance(LEADER_REPORT_INTERVAL_MS // 10)
        assert fetcher.on_failure(request) is Next.BACKOFF
    clock.advance(LEADER_REPORT_INTERVAL_MS)
    assert fetcher.on_failure(request) is Next.REPORT_LEADER
    assert fetcher.errors == 7 and "no answer from leader 1" in fetcher.last_error
    assert fetcher.next_request() == request  # the same fetch again: nothing was skipped


def test_a_refusal_from_a_live_leader_is_no_report(fetcher):
    """An answer, even a refusal (a leader that moved on), proves the leader alive: the
    follower pauses for the controller's new state and never reports it."""
    request = _truncated(fetcher)
    refused = FetchResponse(**error_fields(NotLeaderOrFollowerError("moved on")))
    for _ in range(3):
        assert fetcher.on_answer(request, refused) is Next.BACKOFF
    assert fetcher.errors == 3 and "moved on" in fetcher.last_error


def test_a_fetcher_of_a_role_left_behind_neither_reports_nor_fetches(fetcher):
    """Once the partition follows another leader (or leads), the old fetcher stops quietly."""
    request = _truncated(fetcher)
    fetcher.partition.become_follower(leader=3, leader_epoch=4, replicas=(1, 2, 3), isr=(2, 3), partition_epoch=6)
    assert fetcher.on_failure(request) is Next.AGAIN
    assert fetcher.next_request() is None and fetcher.errors == 0


def test_a_followers_long_poll_is_the_topics_replica_fetch_wait_max_ms(open_log, clock):
    """An idle follower calls its leader once per replica.fetch.wait.max.ms: the topic's setting, Kafka's 500 ms
    by default."""
    for config, wait_ms in (
        (TopicConfig(), 500),
        (TopicConfig.from_properties({"replica.fetch.wait.max.ms": 5000}), 5000),
    ):
        part = Partition("t", 0, broker_id=2, log=open_log(), config=config, clock=clock)
        part.become_follower(leader=1, leader_epoch=3, replicas=(1, 2), isr=(1, 2), partition_epoch=5)
        assert _truncated(FollowerFetcher(part, leader=1, leader_epoch=3, clock=clock)).max_wait_ms == wait_ms


def test_a_fetch_wait_as_long_as_the_lag_time_is_refused():
    """A follower that waits replica.lag.time.max.ms at the leader would leave the ISR while idle: a typed error."""
    with pytest.raises(InvalidConfigError, match=r"replica\.fetch\.wait\.max\.ms"):
        TopicConfig.from_properties({"replica.fetch.wait.max.ms": "30000"})
    with pytest.raises(InvalidConfigError):
        TopicConfig.from_properties({"replica.fetch.wait.max.ms": "-1"})


def test_a_follower_tells_its_log_start_and_deletes_what_the_leader_deleted(fetcher):
    """DeleteRecords on a follower: each fetch carries its log start (the leader's low
    watermark waits for it) and the leader's log start in the answer moves it, up to the HW."""
    import numpy as np

    from raylog.common import record_batch

    assert fetcher.on_answer(fetcher.next_request(), EpochAnswer(0, UNDEFINED, 0)) is Next.AGAIN  # an empty log
    request = fetcher.next_request()
    assert (request.offset, request.log_start_offset) == (0, 0)
    records = np.frombuffer(record_batch.build([b"a", b"b", b"c", b"d"], now_ms=1), dtype=np.uint8)
    answer = FetchResponse(high_watermark=4, log_start_offset=3, log_end_offset=4, records=records)
    assert fetcher.on_answer(request, answer) is Next.AGAIN
    assert fetcher.partition.log.log_start_offset == 3
    assert fetcher.next_request().log_start_offset == 3


def test_a_follower_sent_to_the_remote_tier_starts_at_the_leaders_local_log_start(open_log, clock):
    """KIP-405: a fetch below a tiered leader's local log start is answered
    OFFSET_MOVED_TO_TIERED_STORAGE with that start; the follower starts its log there and
    fetches on from it, its partition's start staying below (the remote tier holds it)."""
    from raylog.errors import OffsetMovedToTieredStorageError

    tiered = TopicConfig.from_properties({"remote.storage.enable": "true"})
    part = Partition("t", 0, broker_id=2, log=open_log(), config=tiered, clock=clock)
    part.become_follower(leader=1, leader_epoch=3, replicas=(1, 2), isr=(1, 2), partition_epoch=5)
    fetcher = FollowerFetcher(part, leader=1, leader_epoch=3, clock=clock)

    assert fetcher.on_answer(fetcher.next_request(), EpochAnswer(0, UNDEFINED, 0)) is Next.AGAIN  # an empty log
    request = fetcher.next_request()
    moved = FetchResponse(
        **error_fields(OffsetMovedToTieredStorageError("in the remote tier")), log_start_offset=700, log_end_offset=900
    )
    assert fetcher.on_answer(request, moved) is Next.AGAIN
    log = fetcher.partition.log
    assert (log.log_start_offset, log.log_end_offset, log.checkpointed_log_start_offset) == (700, 700, 0)
    assert fetcher.next_request().offset == 700
    part.remote_log_start_offset = 0
    assert part.log_start_offset == 0
