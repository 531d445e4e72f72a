"""Client byte-rate quotas (Kafka's KIP-13 client-id quotas): a rate sensor and the
manager that turns a client's observed byte rate into a throttle time.

Quotas are per client id and per kind, ``producer_byte_rate`` (bytes a client's produce
requests append) and ``consumer_byte_rate`` (bytes its fetches return), in bytes per
second. A client id's quota is its own if one is set, else the default quota (entity
``None``), else unlimited.

The rate is Kafka's sampled rate: ``QUOTA_WINDOW_NUM`` samples of
``QUOTA_WINDOW_SIZE_MS`` each (``quota.window.num`` and ``quota.window.size.seconds``);
the rate is the bytes of the samples kept over the time they span, counted as at least
``QUOTA_WINDOW_NUM - 1`` whole windows, so a new client may burst that many windows'
worth of its quota before it is throttled. When a request takes the rate above the quota,
the client is throttled for the time that brings the rate back to it::

    throttle_ms = (rate - quota) / quota * window_span_ms, at most QUOTA_WINDOW_NUM windows

The response tells the client the throttle time at once, and the client sends nothing more
to that leader until it has passed (KIP-219; the Kafka listener mutes the connection): its
rate converges to its quota.

Concurrency: not thread-safe; one owner (a replica actor, under its lock) calls it.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Mapping
from typing import Any

from ..errors import InvalidConfigError

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE)
#: Kafka's defaults for quota.window.num and quota.window.size.seconds.
QUOTA_WINDOW_NUM = 11
QUOTA_WINDOW_SIZE_MS = 1_000
#: The longest client id a quota can name (Kafka's entity names are short strings too).
MAX_CLIENT_ID_LENGTH = 255

logger = logging.getLogger(__name__)

#: Quotas as configured: client id (None: the default) -> {quota key: bytes per second}.
ClientQuotas = Mapping[str | None, Mapping[str, float]]


class RateSensor:
    """Bytes recorded over the last ``window_count`` windows of ``window_size_ms`` (Kafka's
    ``Rate`` over a ``SampledStat``). A sample opens at the first record after the previous
    one's window ended; samples older than the whole span are dropped."""

    def __init__(self, window_count: int = QUOTA_WINDOW_NUM, window_size_ms: int = QUOTA_WINDOW_SIZE_MS):
        assert window_count >= 2 and window_size_ms >= 1
        self.window_count = window_count
        self.window_size_ms = window_size_ms
        self._samples: deque[list[float]] = deque()  # [start_ms, bytes], oldest first
        self.last_record_ms = -math.inf

    def record(self, size_bytes: float, now_ms: float) -> None:
        self._purge(now_ms)
        if not self._samples or now_ms - self._samples[-1][0] >= self.window_size_ms:
            self._samples.append([now_ms, 0.0])
            if len(self._samples) > self.window_count:
                self._samples.popleft()
        self._samples[-1][1] += size_bytes
        self.last_record_ms = now_ms

    def window_span_ms(self, now_ms: float) -> float:
        """The time the rate is measured over: since the oldest sample opened, at least
        ``window_count - 1`` whole windows (so a first burst is not taken as a huge rate)."""
        self._purge(now_ms)
        elapsed_ms = now_ms - (self._samples[0][0] if self._samples else now_ms)
        full_windows = int(elapsed_ms // self.window_size_ms)
        if full_windows < self.window_count - 1:
            elapsed_ms += (self.window_count - 1 - full_windows) * self.window_size_ms
        return max(elapsed_ms, 1.0)

    def rate_bytes_per_s(self, now_ms: float) -> float:
        span_ms = self.window_span_ms(now_ms)
        return sum(size for _, size in self._samples) * 1000 / span_ms

    def _purge(self, now_ms: float) -> None:
        expire_ms = self.window_count * self.window_size_ms
        while self._samples and now_ms - self._samples[0][0] >= expire_ms:
            self._samples.popleft()


class QuotaManager:
    """The rate sensors of one quota kind (``quota_key``), one per client id, and the
    quotas they are held to. Sensors of clients idle for a whole window span are dropped,
    so memory follows the clients active recently. See the module docstring.

    Example:
        >>> manager = QuotaManager(PRODUCER_BYTE_RATE)
        >>> manager.update_quotas({"etl": {PRODUCER_BYTE_RATE: 1000.0}})
        >>> manager.record("etl", 5_000, now_ms=0), manager.record("etl", 10_000, now_ms=0)
        (0, 5000)
    """

    def __init__(
        self, quota_key: str, window_count: int = QUOTA_WINDOW_NUM, window_size_ms: int = QUOTA_WINDOW_SIZE_MS
    ):
        assert quota_key in QUOTA_KEYS, quota_key
        self.quota_key = quota_key
        self.window_count = window_count
        self.window_size_ms = window_size_ms
        self.max_throttle_time_ms = window_count * window_size_ms
        self._quotas: dict[str | None, float] = {}
        self._sensors: dict[str, RateSensor] = {}
        self._next_expiry_ms = -math.inf

    def update_quotas(self, quotas: ClientQuotas) -> None:
        """Hold clients to ``quotas`` from now on (already validated, as from
        :func:`alter_client_quotas`); the rates observed so far are kept."""
        self._quotas = {client: values[self.quota_key] for client, values in quotas.items() if self.quota_key in values}

    def quota_bytes_per_s(self, client_id: str) -> float | None:
        """The client id's own quota, else the default one, else None (unlimited)."""
        return self._quotas.get(client_id, self._quotas.get(None))

    def record(self, client_id: str, size_bytes: int, now_ms: float) -> int:
        """Count ``size_bytes`` of a request of ``client_id`` at ``now_ms``.

        Returns:
            How long to throttle the client, ms: 0 while its rate is within its quota.
        """
        self._expire(now_ms)
        quota = self.quota_bytes_per_s(client_id)
        if quota is None:
            self._sensors.pop(client_id, None)
            return 0
        sensor = self._sensors.get(client_id)
        if sensor is None:
            sensor = self._sensors[client_id] = RateSensor(self.window_count, self.window_size_ms)
        sensor.record(size_bytes, now_ms)
        rate = sensor.rate_bytes_per_s(now_ms)
        if rate <= quota:
            return 0
        throttle_ms = min(round((rate - quota) / quota * sensor.window_span_ms(now_ms)), self.max_throttle_time_ms)
        if logger.isEnabledFor(logging.DEBUG):  # (once per throttled request)
            logger.debug(
                "client %r at %.0f B/s, over its %s of %.0f B/s: throttled %d ms",
                client_id,
                rate,
                self.quota_key,
                quota,
                throttle_ms,
            )
        return throttle_ms

    @property
    def tracked_client_count(self) -> int:
        return len(self._sensors)

    def _expire(self, now_ms: float) -> None:
        if now_ms < self._next_expiry_ms:
            return
        span_ms = self.window_count * self.window_size_ms
        self._next_expiry_ms = now_ms + span_ms
        for client_id, sensor in list(self._sensors.items()):
            if now_ms - sensor.last_record_ms >= span_ms:
                del self._sensors[client_id]


def alter_client_quotas(current: ClientQuotas, changes: Mapping[Any, Mapping[str, Any]]) -> dict[str | None, dict]:
    """The quotas of each entity ``changes`` names, after it (Kafka's AlterClientQuotas): a
    value sets a quota, None removes it; an entity left without quotas maps to ``{}``.

    Args:
        current: the quotas in force.
        changes: client id (None: the default quota) -> {quota key: bytes/s or None}.

    Returns:
        ``{client id: {quota key: float}}`` for every entity in ``changes``.

    Raises:
        InvalidConfigError: a client id that is not a non-empty string (or None), an unknown
            quota key (the message lists the known ones), or a rate that is not a positive,
            finite number.
    """
    altered: dict[str | None, dict] = {}
    for client_id, change in changes.items():
        if client_id is not None and (
            not isinstance(client_id, str) or not client_id or len(client_id) > MAX_CLIENT_ID_LENGTH
        ):
            raise InvalidConfigError(
                f"a quota's client id must be a non-empty string of at most {MAX_CLIENT_ID_LENGTH} characters, "
                f"or None for the default quota, got {client_id!r}"
            )
        if not isinstance(change, Mapping):
            raise InvalidConfigError(f"the quotas of client {client_id!r} must be a mapping, got {change!r}")
        quotas = dict(current.get(client_id, {}))
        for key, value in change.items():
            if key not in QUOTA_KEYS:
                raise InvalidConfigError(f"unknown quota {key!r}; known: {', '.join(QUOTA_KEYS)}")
            if value is None:
                quotas.pop(key, None)
            else:
                quotas[key] = _byte_rate(key, value)
        altered[client_id] = quotas
    return altered


def _byte_rate(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise InvalidConfigError(f"{key} must be a positive number of bytes per second, got {value!r}")
    return float(value)
