"""Kafka's incremental fetch sessions (KIP-227): a consumer names its partitions once, then
sends only what changed, and hears only of partitions with news (no Ray, no clock).

A Fetch request says which case it is by its ``session_id`` and ``session_epoch``:

- id 0, epoch -1: a full fetch without a session (every partition asked is answered);
- id 0, epoch 0: a full fetch that opens a session: the answer carries the new session's
  id (or 0 when the cache is full: the client goes on with full fetches);
- id N, epoch 0: session N is closed and a new one opened, as above;
- id N, epoch -1: session N is closed, and the fetch is a full one without a session;
- id N, epoch E > 0: an incremental fetch of session N, which expects epoch E (each
  incremental fetch moves it on by one): the request's partitions are added to the
  session or update it (their fetch offset, bound and leader epoch), its forgotten ones
  leave it, and every partition of the session is fetched at the offset the session holds.
  The answer names only partitions with news: records, an error, or a high watermark, last
  stable offset or log start offset other than the session last answered. An unknown
  session is FETCH_SESSION_ID_NOT_FOUND, another epoch INVALID_FETCH_SESSION_EPOCH; the
  client then opens a new one.

:class:`FetchSessionCache` holds a broker's sessions, at most ``max_sessions``
(Kafka's ``max.incremental.fetch.session.cache.slots``); a new session takes the place of
the one used longest ago if that one has been idle for ``eviction_ms``
(``min.incremental.fetch.session.eviction.ms``), else none is made.

Concurrency: not thread-safe; the listener's event loop is its only caller.
"""

from __future__ import annotations

import collections
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field

from raylog.errors import FetchSessionIdNotFoundError, InvalidFetchSessionEpochError

#: Kafka's session ids and epochs with a meaning of their own.
NO_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
#: Kafka's defaults for the cache's bounds.
MAX_SESSIONS = 1000
EVICTION_MS = 120_000

Key = tuple[str, int]  # (topic, partition)


@dataclass
class _Cached:
    """A partition of a session: what the client last asked (its fields as in the request)
    and the offsets the session last answered."""

    request: dict
    answered: tuple[int, int, int] | None = None  # (high watermark, last stable, log start)


@dataclass
class FetchSession:
    id: int
    epoch: int  # the epoch its next incremental fetch must carry
    last_used_ms: int
    partitions: dict[Key, _Cached] = field(default_factory=dict)


@dataclass
class FetchContext:
    """One Fetch request's view of its session: the partitions to fetch, in order, and which
    of them the answer names."""

    session: FetchSession | None  # None: a full fetch with no session
    wanted: list[tuple[str, dict]]  # (topic, partition fields) of every partition to fetch
    incremental: bool

    @property
    def session_id(self) -> int:
        """The answer's session id."""
        return NO_SESSION_ID if self.session is None else self.session.id

    def include(self, key: Key, offsets: tuple[int, int, int], news: bool) -> bool:
        """Whether the answer names partition ``key``, whose answer has ``offsets`` (high
        watermark, last stable offset, log start offset) and ``news`` (records or an
        error); its offsets are remembered as answered. A full fetch names every one."""
        if self.session is None:
            return True
        cached = self.session.partitions.get(key)
        if cached is None:
            return not self.incremental
        changed = cached.answered != offsets
        cached.answered = offsets
        return not self.incremental or news or changed


class FetchSessionCache:
    """See the module docstring."""

    def __init__(self, max_sessions: int = MAX_SESSIONS, eviction_ms: int = EVICTION_MS) -> None:
        self.max_sessions = max_sessions
        self.eviction_ms = eviction_ms
        self._sessions: collections.OrderedDict[int, FetchSession] = collections.OrderedDict()  # oldest use first

    def __len__(self) -> int:
        return len(self._sessions)

    def begin(
        self,
        session_id: int,
        epoch: int,
        wanted: list[tuple[str, dict]],
        forgotten: Iterable[Key],
        now_ms: int,
    ) -> FetchContext:
        """The context of a Fetch request (see the module docstring).

        Raises:
            FetchSessionIdNotFoundError, InvalidFetchSessionEpochError: an incremental fetch
                of a session that is not here, or at another epoch.
        """
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != NO_SESSION_ID:
                self._sessions.pop(session_id, None)
            session = self._open(wanted, now_ms) if epoch == INITIAL_EPOCH else None
            return FetchContext(session, wanted, incremental=False)
        session = self._sessions.get(session_id)
        if session is None:
            raise FetchSessionIdNotFoundError(f"no fetch session {session_id} here")
        if epoch != session.epoch:
            raise InvalidFetchSessionEpochError(
                f"fetch session {session_id} expects epoch {session.epoch}, the fetch carries {epoch}"
            )
        for key in forgotten:
            session.partitions.pop(key, None)
        for topic, p in wanted:
            key = (topic, p["partition"])
            cached = session.partitions.get(key)
            if cached is None:
                session.partitions[key] = _Cached(dict(p))
            else:
                cached.request = dict(p)
        session.epoch = _next(epoch)
        session.last_used_ms = now_ms
        self._sessions.move_to_end(session.id)
        everything = [(topic, cached.request) for (topic, _), cached in session.partitions.items()]
        return FetchContext(session, everything, incremental=True)

    def _open(self, wanted: list[tuple[str, dict]], now_ms: int) -> FetchSession | None:
        if len(self._sessions) >= self.max_sessions:
            oldest = next(iter(self._sessions.values()))
            if now_ms - oldest.last_used_ms < self.eviction_ms:
                return None  # every session is in use: this client fetches in full
            del self._sessions[oldest.id]
        session = FetchSession(self._new_id(), _next(INITIAL_EPOCH), now_ms)
        for topic, p in wanted:
            session.partitions[(topic, p["partition"])] = _Cached(dict(p))
        self._sessions[session.id] = session
        return session

    def _new_id(self) -> int:
        """A session id no session here has, drawn at random (as Kafka's: a client cannot
        guess another's session)."""
        while (session_id := secrets.randbelow(2**31 - 1) + 1) in self._sessions:
            pass
        return session_id


def _next(epoch: int) -> int:
    """The epoch after ``epoch`` (Kafka's wraps from the largest int32 to 1)."""
    return 1 if epoch >= 2**31 - 1 else epoch + 1
