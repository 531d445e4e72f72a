"""Client byte-rate quotas: the sampled rate, throttle times, quota look-up and validation
(no Ray; a fake clock)."""

from __future__ import annotations

import math

import pytest

from raylog.coordination.metadata import MetadataImage
from raylog.coordination.quotas import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    QUOTA_WINDOW_NUM,
    QUOTA_WINDOW_SIZE_MS,
    QuotaManager,
    RateSensor,
    alter_client_quotas,
)
from raylog.errors import InvalidConfigError
from raylog.storage.journal import MetadataJournal

QUOTA = 100_000.0  # bytes/s


def manager(quotas: dict) -> QuotaManager:
    m = QuotaManager(PRODUCER_BYTE_RATE)
    m.update_quotas(quotas)
    return m


def run_client(m: QuotaManager, client_id: str, wanted_rate: float, duration_ms: int, request_bytes: int = 10_000):
    """A client that sends ``request_bytes`` at ``wanted_rate`` but waits out each throttled
    response, as a client waiting for responses does. Returns (send time ms, bytes, throttle ms)."""
    now_ms, sent = 0.0, []
    interval_ms = request_bytes / wanted_rate * 1000
    while now_ms < duration_ms:
        throttle_ms = m.record(client_id, request_bytes, now_ms)
        sent.append((now_ms, request_bytes, throttle_ms))
        now_ms += max(interval_ms, throttle_ms)
    return sent


def rate_between(sent: list, start_ms: float, end_ms: float) -> float:
    return sum(size for t, size, _ in sent if start_ms <= t < end_ms) / (end_ms - start_ms) * 1000


def test_client_at_twice_its_quota_converges_to_the_quota():
    """A client sending at 2x its quota is throttled until its rate is the quota's."""
    sent = run_client(manager({"etl": {PRODUCER_BYTE_RATE: QUOTA}}), "etl", 2 * QUOTA, duration_ms=120_000)
    assert any(throttle > 0 for _, _, throttle in sent)
    assert rate_between(sent, 60_000, 120_000) == pytest.approx(QUOTA, rel=0.1)


def test_client_under_its_quota_is_never_throttled():
    """A client at half its quota gets a throttle time of 0 on every request."""
    sent = run_client(manager({"etl": {PRODUCER_BYTE_RATE: QUOTA}}), "etl", QUOTA / 2, duration_ms=60_000)
    assert all(throttle == 0 for _, _, throttle in sent)
    assert rate_between(sent, 0, 60_000) == pytest.approx(QUOTA / 2, rel=0.05)


def test_throttle_time_is_kafkas_formula():
    """A burst is measured over at least window_num - 1 windows; the throttle brings the
    rate back to the quota: (rate - quota) / quota * span."""
    m = manager({"etl": {PRODUCER_BYTE_RATE: QUOTA}})
    span_ms = (QUOTA_WINDOW_NUM - 1) * QUOTA_WINDOW_SIZE_MS
    burst = QUOTA * span_ms / 1000  # exactly the quota over the minimum span
    assert m.record("etl", int(burst), now_ms=0) == 0
    # Twice that: the rate is 2x the quota, so a throttle of one whole span.
    assert m.record("etl", int(burst), now_ms=0) == span_ms


def test_throttle_time_is_bounded_by_the_window_span():
    """However far over its quota, a client waits at most window_num windows."""
    m = manager({"etl": {PRODUCER_BYTE_RATE: QUOTA}})
    assert m.record("etl", 10**12, now_ms=0) == QUOTA_WINDOW_NUM * QUOTA_WINDOW_SIZE_MS == m.max_throttle_time_ms


def test_clients_are_throttled_separately():
    """One client over its quota does not throttle another with the same (default) quota."""
    m = manager({None: {PRODUCER_BYTE_RATE: QUOTA}})
    assert m.record("greedy", 10 * int(QUOTA) * 10, now_ms=0) > 0
    assert m.record("polite", 1_000, now_ms=0) == 0
    assert m.tracked_client_count == 2


def test_client_quota_overrides_the_default_and_unlimited_without_either():
    """Own quota first, else the default, else unlimited."""
    m = manager({None: {PRODUCER_BYTE_RATE: QUOTA}, "vip": {PRODUCER_BYTE_RATE: 100 * QUOTA}})
    assert m.quota_bytes_per_s("vip") == 100 * QUOTA
    assert m.quota_bytes_per_s("anyone") == QUOTA
    burst = int(QUOTA) * 20  # 2x the default over the minimum span
    assert m.record("vip", burst, now_ms=0) == 0
    assert m.record("anyone", burst, now_ms=0) > 0
    unlimited = manager({"vip": {PRODUCER_BYTE_RATE: QUOTA}})
    assert unlimited.quota_bytes_per_s("anyone") is None
    assert unlimited.record("anyone", 10**12, now_ms=0) == 0
    assert unlimited.tracked_client_count == 0


def test_each_manager_uses_its_own_quota_kind():
    """A consumer quota does not limit produce requests, and the other way round."""
    quotas = {"c": {CONSUMER_BYTE_RATE: QUOTA}}
    producing, fetching = QuotaManager(PRODUCER_BYTE_RATE), QuotaManager(CONSUMER_BYTE_RATE)
    producing.update_quotas(quotas)
    fetching.update_quotas(quotas)
    assert producing.record("c", 10**9, now_ms=0) == 0
    assert fetching.record("c", 10**9, now_ms=0) > 0


def test_raised_quota_applies_to_the_rate_observed_so_far():
    """A quota change takes effect on the next request, without forgetting the rate."""
    m = manager({"etl": {PRODUCER_BYTE_RATE: QUOTA}})
    assert m.record("etl", int(QUOTA) * 20, now_ms=0) > 0
    m.update_quotas({"etl": {PRODUCER_BYTE_RATE: 10 * QUOTA}})
    assert m.record("etl", 1, now_ms=1) == 0
    m.update_quotas({"etl": {PRODUCER_BYTE_RATE: QUOTA}})
    assert m.record("etl", 1, now_ms=2) > 0


def test_rate_forgets_samples_older_than_the_window_span():
    """After a quiet window span the burst is forgotten; idle clients' sensors are dropped."""
    m = manager({None: {PRODUCER_BYTE_RATE: QUOTA}})
    assert m.record("etl", int(QUOTA) * 30, now_ms=0) > 0
    later_ms = QUOTA_WINDOW_NUM * QUOTA_WINDOW_SIZE_MS
    assert m.record("other", 1, now_ms=later_ms) == 0
    assert m.tracked_client_count == 1  # "etl" was idle for the whole span
    assert m.record("etl", 1_000, now_ms=later_ms) == 0


def test_sensor_span_grows_past_the_minimum_with_time():
    """The span is the minimum until more whole windows have passed since the oldest sample."""
    sensor = RateSensor()
    sensor.record(1_000, now_ms=0)
    minimum_ms = (QUOTA_WINDOW_NUM - 1) * QUOTA_WINDOW_SIZE_MS
    assert sensor.window_span_ms(0) == minimum_ms
    assert sensor.window_span_ms(minimum_ms + 500) == minimum_ms + 500
    assert sensor.rate_bytes_per_s(minimum_ms + 500) == pytest.approx(1_000 / 10.5)


def test_alter_sets_and_removes_quotas():
    """None removes a quota; an entity left with none maps to {}; others are untouched."""
    current = {"a": {PRODUCER_BYTE_RATE: 1.0, CONSUMER_BYTE_RATE: 2.0}}
    altered = alter_client_quotas(current, {"a": {PRODUCER_BYTE_RATE: None}, None: {CONSUMER_BYTE_RATE: 5}})
    assert altered == {"a": {CONSUMER_BYTE_RATE: 2.0}, None: {CONSUMER_BYTE_RATE: 5.0}}
    assert alter_client_quotas(altered, {"a": {CONSUMER_BYTE_RATE: None}}) == {"a": {}}
    assert current == {"a": {PRODUCER_BYTE_RATE: 1.0, CONSUMER_BYTE_RATE: 2.0}}


@pytest.mark.parametrize(
    "changes",
    [
        {"a": {PRODUCER_BYTE_RATE: 0}},
        {"a": {PRODUCER_BYTE_RATE: -5.0}},
        {"a": {PRODUCER_BYTE_RATE: math.inf}},
        {"a": {PRODUCER_BYTE_RATE: math.nan}},
        {"a": {PRODUCER_BYTE_RATE: "100"}},
        {"a": {PRODUCER_BYTE_RATE: True}},
        {"a": {"request_percentage": 50.0}},
        {"": {PRODUCER_BYTE_RATE: 1.0}},
        {7: {PRODUCER_BYTE_RATE: 1.0}},
        {"x" * 256: {PRODUCER_BYTE_RATE: 1.0}},
        {"a": 100.0},
    ],
)
def test_alter_rejects_bad_values(changes):
    """Rates must be positive finite numbers, keys known, client ids non-empty strings."""
    with pytest.raises(InvalidConfigError):
        alter_client_quotas({}, changes)


def test_quotas_are_journaled_and_replayed(tmp_path):
    """Quota records rebuild the same quotas and version on replay; a refused change
    journals nothing."""
    journal = MetadataJournal(str(tmp_path / "metadata.journal"))
    image = MetadataImage()

    def commit(records):
        journal.append(records)
        for record in records:
            image.apply(record)

    commit(image.alter_client_quotas({None: {PRODUCER_BYTE_RATE: 10.0}, "a": {CONSUMER_BYTE_RATE: 5}}))
    commit(image.alter_client_quotas({None: {PRODUCER_BYTE_RATE: None}}))
    with pytest.raises(InvalidConfigError):
        image.alter_client_quotas({"a": {CONSUMER_BYTE_RATE: 1.0}, "b": {PRODUCER_BYTE_RATE: -1}})
    assert image.client_quotas == {"a": {CONSUMER_BYTE_RATE: 5.0}}
    assert image.client_quotas_version == 3
    replayed = MetadataImage()
    for record in MetadataJournal(journal.path).replay():
        replayed.apply(record)
    assert replayed.client_quotas == image.client_quotas
    assert replayed.client_quotas_version == image.client_quotas_version
