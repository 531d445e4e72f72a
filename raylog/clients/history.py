"""Reading a topic's history from its Parquet files (``remote.storage.history.enable``): where
they lie, and a read of an offset range cut into the part the files serve and the live tail
the brokers serve. What :func:`raylog.read_topic` and ``raylog_spark`` read tasks use, so that
history is read at Parquet speed in their own processes, without a replica actor.

A read gets exactly the records a :class:`~raylog.clients.consumer.Consumer` with the same
isolation level would: the files hold a read_committed consumer's records, so a
read_uncommitted read takes them only up to the first file that left aborted records out
(:func:`raylog.common.history_format.plan_history_read`). When the store cannot be read
(down, or a file gone because retention deleted it meanwhile), the range is read from the
brokers, which serve the remote tier themselves: slower, never different.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import Any

import pyarrow.fs as pafs

from raylog.clients.cluster import client_handle
from raylog.clients.security import SECURITY_SETTINGS
from raylog.common.history_format import HistoryPlan, plan_history_read
from raylog.common.object_store import filesystem_from_uri
from raylog.errors import RemoteStorageError
from raylog.transport import call

log = logging.getLogger(__name__)

#: How long the controller may take to say where a topic's history lies.
HISTORY_SOURCE_TIMEOUT_S = 30.0


@dataclasses.dataclass(frozen=True)
class HistorySource:
    """Where one topic's history files lie: the cluster's store and the topic's name in it
    (``<topic>-<topic id>``). Picklable: a read task gets it from the driver."""

    uri: str
    name: str

    def plan(self, partition: int, start: int, end: int, read_committed: bool) -> HistoryPlan | None:
        """The part of ``[start, end)`` of ``partition`` that its files serve (None: the store
        could not be read; the whole range then goes to the brokers)."""
        try:
            filesystem, base_path = _filesystem(self.uri)
            return plan_history_read(filesystem, base_path, self.name, partition, start, end, read_committed)
        except RemoteStorageError as exc:
            log.warning("%s-%d: history not readable, reading from the brokers: %s", self.name, partition, exc)
            return None


def history_source(cluster, topic: str, client_config: dict[str, Any] | None = None) -> HistorySource | None:
    """Where ``topic``'s history files lie (None: it keeps none), asked as the client whose
    keyword arguments ``client_config`` are (its security settings; none: the handle's user).

    Raises:
        TopicAuthorizationFailedError: the client may not READ the topic.
        UnknownTopicOrPartitionError: no such topic.
        InvalidConfigError, SaslAuthenticationError: as the client's own.
    """
    settings = [(client_config or {}).get(name) for name in SECURITY_SETTINGS]
    _, session = client_handle(cluster, HISTORY_SOURCE_TIMEOUT_S, *settings)
    answer = call(
        cluster.controller.history_source.remote(topic, session=session.token()),
        HISTORY_SOURCE_TIMEOUT_S,
    )
    return None if answer is None else HistorySource(*answer)


@functools.lru_cache(maxsize=8)
def _filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """The store a URI names, opened once a process (an S3 store looks up its region)."""
    return filesystem_from_uri(uri)
