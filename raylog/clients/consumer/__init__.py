"""The Consumer, cut along Kafka's seams (as kafka-python's ``kafka/consumer/`` and the Java
client's ``consumer/internals``):

- :mod:`~raylog.clients.consumer.consumer`: :class:`Consumer`, the public face: assignment,
  subscription, seeks and positions, polls, commits, each handed to the pieces below.
- :mod:`~raylog.clients.consumer.fetcher`: :class:`Fetcher`, which partitions to fetch and
  how much each may ask, the fetch calls, their answers decoded into buffers, and the
  records handed out of them (Kafka's Fetcher).
- :mod:`~raylog.clients.consumer.completed_fetch`: :class:`CompletedFetch`, one decoded
  answer waiting to be handed out, and the Records and Arrow tables made of it (Kafka's
  CompletedFetch and FetchCollector).
- :mod:`~raylog.clients.consumer.subscription_state`: :class:`SubscriptionState`, the
  partitions assigned or subscribed, positions, paused partitions, the leader epochs
  KIP-320 checks positions by, and the reset strategy (Kafka's SubscriptionState).
- :mod:`~raylog.clients.consumer.offset_fetcher`: :class:`OffsetFetcher`, the leaders'
  offsets of timestamps and ends of leader epochs (Kafka's OffsetFetcher).
- :mod:`~raylog.clients.consumer.consumer_coordinator`: :class:`ConsumerCoordinator`, a
  group member's side: the membership it starts, rebalances applied, commits (Kafka's
  ConsumerCoordinator; membership itself is :mod:`raylog.clients.group`'s).
- :mod:`~raylog.clients.consumer.consumer_config`: the settings checked (Kafka's ConsumerConfig).
"""

from raylog.clients.consumer.completed_fetch import (
    ARROW_SCHEMA,
    LogAppendTime,
    log_append_time_ranges,
    timestamp_types,
)
from raylog.clients.consumer.consumer import GROUP_IDLE_STEP_S, Consumer
from raylog.clients.consumer.consumer_config import GROUP_PROTOCOLS, ISOLATION_LEVELS, MAX_FETCH_BYTES
from raylog.clients.consumer.fetcher import BUFFERED_FETCHES, fetch_ask
from raylog.clients.consumer.offset_fetcher import LIST_OFFSETS_BACKOFF_S, list_offset, list_offsets

__all__ = [
    "ARROW_SCHEMA",
    "BUFFERED_FETCHES",
    "GROUP_IDLE_STEP_S",
    "GROUP_PROTOCOLS",
    "ISOLATION_LEVELS",
    "LIST_OFFSETS_BACKOFF_S",
    "MAX_FETCH_BYTES",
    "Consumer",
    "LogAppendTime",
    "fetch_ask",
    "list_offset",
    "list_offsets",
    "log_append_time_ranges",
    "timestamp_types",
]
