"""What a Kafka API handler may use: its broker's identity, the controller, a metadata cache
and calls to raylog's actors with Ray's failures as raylog errors.

One :class:`BrokerContext` per listener actor, shared by its connections (one asyncio
loop, so no locks). Metadata is the controller's ``metadata()`` answer, asked for in the
background every :data:`METADATA_MAX_AGE_S` from the listener's start and at once when a
handler saw a leader move; a request never waits for the controller longer than
:data:`REFRESH_WAIT_S` once an answer is cached (the old answer serves). Its leader actors are kept one handle per actor
across refreshes (a Ray actor handle costs ~60 KiB and each answer brings new ones: calls
that wait long, such as joins, would otherwise keep one each), and a group's or
transactional id's coordinator is found in it as Kafka's brokers find it in their metadata
cache: the internal topic's partition of the key's hash, and its leader (the controller is
asked only to create the internal topic the first time). Record batch conversions
(:mod:`raylog.kafka.records`) run on :data:`CONVERSION_THREADS` threads of its own
(:meth:`BrokerContext.convert`), never on the loop. Idempotent producers' ids come from a
block fetched ahead (:meth:`BrokerContext.new_producer_id`). With the authorizer on, the
controller pushes the cluster's ACLs to every listener when they change (and the metadata
answers carry them when they changed, for a listener the push missed): the context keeps an
:class:`~raylog.coordination.acls.Authorizer` of the latest (:meth:`BrokerContext.authorizer`).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from raylog.common.acl import ACL
from raylog.common.names import INTERNAL_TOPICS, OFFSETS_TOPIC, TRANSACTION_TOPIC
from raylog.common.scram import Credentials
from raylog.config import ControllerConfig
from raylog.coordination.acls import Authorizer, parse_super_users
from raylog.coordination.group import partition_for
from raylog.coordination.producer_ids import ProducerIdPool
from raylog.coordination.sessions import SessionKeys
from raylog.errors import RaylogError
from raylog.kafka.fetch_sessions import FetchSessionCache
from raylog.transport import acall

#: How long a cached metadata answer serves before it is asked again.
METADATA_MAX_AGE_S = 1.0
#: How long requests wait for the controller's new answer before the old one serves them.
REFRESH_WAIT_S = 1.0
#: How long a call to the controller or a coordinator may take.
CONTROL_CALL_TIMEOUT_S = 30.0
#: How long an InitProducerId that finds no producer id held waits for the round under way
#: before it is answered COORDINATOR_LOAD_IN_PROGRESS (the client asks again), well within
#: what a client waits for an answer (a silent controller's call outlasts that).
PRODUCER_ID_WAIT_S = 2.0
#: The state a handler keeps per client connection (a dict; the listener sets a new one in
#: each connection's task), such as a consumer's fetches still waiting on their leaders.
CONNECTION: contextvars.ContextVar[dict] = contextvars.ContextVar("kafka_connection")


def broker_addresses(md: dict) -> dict[int, tuple[str, int]]:
    """``broker id -> advertised (host, port)`` on the listener the connection came in on, from
    the metadata answer ``md`` (its ``listeners``: broker id -> listener name -> address), as
    Kafka answers: a broker without that listener is left out. A handler run outside a
    connection (as tests drive them) gets each broker's first listener."""
    name = CONNECTION.get({}).get("listener")
    if name is None:
        return {b: next(iter(by_name.values())) for b, by_name in md["listeners"].items() if by_name}
    return {b: by_name[name] for b, by_name in md["listeners"].items() if name in by_name}


#: Threads converting record batches between Kafka's format and raylog's. A batch's work
#: grows with what it inflates to (up to compression.MAX_UNCOMPRESSED_BYTES), so it runs
#: beside the loop, not on it, where it would stall every connection; two threads (the
#: conversions release the GIL) bound the memory that batches being inflated hold at once.
CONVERSION_THREADS = 2

_T = TypeVar("_T")

logger = logging.getLogger(__name__)


def topic_ids(md: dict) -> dict[uuid.UUID, str]:
    """Topic id -> name of a metadata answer's topics, made once per answer (kept in it):
    every Fetch from v13 on and every consumer group heartbeat name topics by id."""
    return _kept(md, "topic_ids", lambda: {uuid.UUID(hex=t.topic_id): name for name, t in md["topics"].items()})


def topic_names(md: dict) -> dict[str, uuid.UUID]:
    """Topic name -> id of a metadata answer's topics, made once per answer."""
    return _kept(md, "topic_names", lambda: {name: topic_id for topic_id, name in topic_ids(md).items()})


def partition_counts(md: dict) -> dict[str, int]:
    """Topic -> partition count of every topic (internal ones too: a classic group member may
    read them), made once per answer: a classic group heartbeat takes it."""
    return _kept(md, "partition_counts", lambda: {name: len(t.partitions) for name, t in md["topics"].items()})


def subscribable(md: dict) -> dict[str, int]:
    """Topic -> partition count of the topics a consumer may subscribe to (internal ones
    left out), made once per answer: a consumer group heartbeat takes it."""
    return _kept(
        md,
        "subscribable",
        lambda: {name: len(t.partitions) for name, t in md["topics"].items() if name not in INTERNAL_TOPICS},
    )


def _kept(md: dict, key: str, make: Callable[[], Any]) -> Any:
    made = md.get(key)
    if made is None:
        made = md[key] = make()
    return made


class BrokerContext:
    """See the module docstring."""

    def __init__(
        self,
        cluster_name: str,
        broker_id: int,
        controller: Any,
        config: ControllerConfig | None = None,
        session_key: str | None = None,
    ):
        self.cluster_name = cluster_name
        self.broker_id = broker_id
        self.controller = controller
        #: The cluster's broker settings (topic defaults, limits), as the listener was given them.
        self.config = config or ControllerConfig()
        self._metadata: dict | None = None
        self._metadata_at = 0.0
        self._invalidated = False
        self._refreshing: asyncio.Future | None = None
        self._refresh_started = 0.0
        self._keeper: asyncio.Future | None = None
        self._producer_ids = ProducerIdPool()
        self._producer_id_fetch: asyncio.Future | None = None
        self._handles: dict[Any, Any] = {}  # the leaders' actor handles, each its own key
        self._converter = ThreadPoolExecutor(CONVERSION_THREADS, thread_name_prefix="kafka-records")
        #: The broker's incremental fetch sessions (KIP-227), of every connection.
        self.fetch_sessions = FetchSessionCache()
        #: The ACLs' authorizer (None until the first metadata answer), and its ACLs' version.
        self._authorizer: Authorizer | None = None
        self._acls_version: int | None = None
        self._super_users = parse_super_users(self.config.super_users)
        #: SCRAM credentials (user -> mechanism -> credential) for SASL, and their version.
        self._credentials: dict[str, Credentials] = {}
        self._credentials_version: int | None = None
        #: The cluster's session key, with which the listener signs its calls to replicas, the
        #: coordinators and the controller as the broker. Without one (handlers driven outside
        #: a listener, as tests do) the calls carry no token: they are User:ANONYMOUS's.
        self._sessions = SessionKeys(session_key) if session_key else None

    def ask(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call the controller's ``method`` as this broker (the request was authorized here);
        the reference, to await."""
        return getattr(self.controller, method).remote(*args, session=self.broker_token(), **kwargs)

    def broker_token(self) -> str | None:
        """The token of this broker's calls to replicas (see :mod:`raylog.coordination.sessions`):
        a Kafka request is authorized here, on the listener, before the calls it makes."""
        return None if self._sessions is None else self._sessions.broker_token(time.time() * 1000)

    def apply_acls(self, version: int, acls: Iterable[ACL]) -> None:
        """Authorize from ``acls`` (the controller's ACLs at ``version``) unless a newer
        version is in force already (a push and a metadata answer may cross)."""
        if self._acls_version is not None and version <= self._acls_version:
            return
        acls = frozenset(acls)
        self._authorizer = Authorizer(acls, self._super_users, self.config.allow_everyone_if_no_acl_found)
        self._acls_version = version
        logger.info("broker %d: %d ACL(s) in force (version %d)", self.broker_id, len(acls), version)

    def apply_credentials(self, version: int, credentials: dict[str, Credentials]) -> None:
        """Authenticate SASL clients with ``credentials`` (the controller's at ``version``)
        unless a newer version is in force already."""
        if self._credentials_version is not None and version <= self._credentials_version:
            return
        self._credentials, self._credentials_version = credentials, version
        logger.info(
            "broker %d: SCRAM credentials of %d user(s) (version %d)", self.broker_id, len(credentials), version
        )

    def credentials(self, user: str) -> Credentials | None:
        """``user``'s SCRAM credentials by mechanism, as last known (None: no such user)."""
        return self._credentials.get(user)

    async def credentials_known(self) -> None:
        """Return once the cluster's credentials are known (the first metadata answer).

        Raises:
            RaylogError: none known yet, and the controller gave no answer.
        """
        if self._credentials_version is None:
            await self.metadata(refresh=True)

    async def authorizer(self) -> Authorizer | None:
        """The authorizer of the cluster's latest ACLs, or None when the cluster has no
        authorizer (every request is allowed). Waits for the first metadata answer.

        Raises:
            RaylogError: no metadata answer yet, and the controller gave none (the request
                is refused: nothing is allowed before the ACLs are known).
        """
        if not self.config.authorizer:
            return None
        if self._authorizer is None:
            await self.metadata()
        return self._authorizer

    async def convert(self, conversion: Callable[[Any], _T], data: Any) -> _T:
        """``conversion(data)`` (a :mod:`raylog.kafka.records` function) on a conversion thread.

        Raises:
            What ``conversion`` raises.
        """
        return await asyncio.get_running_loop().run_in_executor(self._converter, conversion, data)

    async def call(self, ref: Any, timeout_s: float | None = CONTROL_CALL_TIMEOUT_S) -> Any:
        """Await an actor call's ObjectRef: a dead or restarting actor comes out as
        NetworkExceptionError, a timeout as RequestTimedOutError, an actor's raylog error as itself."""
        return await acall(ref, timeout_s)

    async def metadata(self, refresh: bool = False) -> dict:
        """The controller's ``metadata()`` answer (``brokers``, ``topics``, ``leaders``, ``live``,
        ``listeners`` ...). A cached answer older than :data:`METADATA_MAX_AGE_S` is asked
        again, as is one a handler asked for afresh (``refresh``: the client may know of a topic
        or leader newer than the cache) or dropped (:meth:`invalidate`: a leader moved); the new
        answer is waited for until the call has been under way :data:`REFRESH_WAIT_S`, then, or
        when the call fails, the cached answer serves, as Kafka's brokers serve from their
        metadata cache whatever the controller does (a paused or restarting controller would
        otherwise hold up every request; the client asks again as it would of a Kafka broker
        whose cache lags). Only a listener with no answer yet waits for the first in full
        (:meth:`warm` asks for it as the listener starts). Concurrent callers share one
        controller call.

        Raises:
            RaylogError: no answer is cached and the controller gave none.
        """
        if self._metadata is None:
            return await asyncio.shield(self._refresh())
        if not (refresh or self._invalidated) and time.monotonic() - self._metadata_at < METADATA_MAX_AGE_S:
            return self._metadata
        refreshing = self._refresh()
        patience = REFRESH_WAIT_S - (time.monotonic() - self._refresh_started)
        try:
            return await asyncio.wait_for(asyncio.shield(refreshing), max(0.0, patience))
        except (asyncio.TimeoutError, RaylogError):
            return self._metadata

    def warm(self) -> None:
        """As the listener starts, fetch a block of producer ids, and the metadata now and
        then :data:`METADATA_MAX_AGE_S` after each answer, in the background (until :meth:`close`), as
        Kafka's brokers follow the controller's metadata whether or not a client asks: a client
        whose first request comes while the controller is paused or restarting is answered
        from an answer at most that old."""
        self.fetch_producer_ids()
        if self._keeper is None:
            self._keeper = asyncio.ensure_future(self._keep_fresh())

    async def _keep_fresh(self) -> None:
        while True:
            try:
                await asyncio.shield(self._refresh())
            except Exception:  # noqa: BLE001 — logged by _refreshed; asked again next round
                pass
            await asyncio.sleep(METADATA_MAX_AGE_S)

    def close(self) -> None:
        """Stop what :meth:`warm` started."""
        if self._keeper is not None:
            self._keeper.cancel()
            self._keeper = None

    def _refresh(self) -> asyncio.Future:
        """The controller call under way, made now if there is none."""
        if self._refreshing is None:
            self._invalidated = False  # (an invalidate() from now on asks again)
            self._refresh_started = time.monotonic()
            self._refreshing = asyncio.ensure_future(self._fetch_metadata())
            self._refreshing.add_done_callback(self._refreshed)
        return self._refreshing

    def _refreshed(self, refreshing: asyncio.Future) -> None:
        self._refreshing = None
        if not refreshing.cancelled() and refreshing.exception() is not None:
            logger.debug("no metadata from the controller: %r", refreshing.exception())

    async def _fetch_metadata(self) -> dict:
        answer = await self.call(self.ask("metadata", None, self._acls_version, self._credentials_version))
        if answer["acls"] is not None and answer["acls"][1] is not None:
            self.apply_acls(*answer["acls"])
        if answer.get("credentials") is not None and answer["credentials"][1] is not None:
            self.apply_credentials(*answer["credentials"])
        # (Ray's actor handles are equal, and hash alike, when they name the same actor.)
        self._handles = {h: self._handles.get(h, h) for h in answer["leaders"].values()}
        answer["leaders"] = {key: self._handles[h] for key, h in answer["leaders"].items()}
        self._metadata, self._metadata_at = answer, time.monotonic()
        return answer

    def invalidate(self) -> None:
        """The next :meth:`metadata` asks the controller again (a leader moved or died)."""
        self._invalidated = True

    async def new_producer_id(self) -> int:
        """A producer id for an idempotent producer's InitProducerId, from the ids this listener
        holds (waiting for the next ones only when none is left), as Kafka's brokers hand
        out ids from blocks the controller gives them (KIP-730): a producer that starts while
        the controller is paused or restarting gets its id.

        Raises:
            CoordinatorLoadInProgressError: none is held and the controller gave none within
                :data:`PRODUCER_ID_WAIT_S` (retriable).
        """
        self.fetch_producer_ids()
        if not self._producer_ids.available() and self._producer_id_fetch is not None:
            await asyncio.wait([self._producer_id_fetch], timeout=PRODUCER_ID_WAIT_S)
        try:
            return self._producer_ids.take()
        finally:
            self.fetch_producer_ids()

    def fetch_producer_ids(self) -> None:
        """Fetch the next producer ids in the background if few are held and no fetch is
        under way (a failed round is fetched again after a backoff, until one brings ids)."""
        count = self._producer_ids.start_fetch()
        if count:
            self._producer_id_fetch = asyncio.ensure_future(self._fetch_producer_ids(count))

    async def _fetch_producer_ids(self, count: int) -> None:
        while count:
            try:
                ids = await self.call(self.controller.allocate_producer_ids.remote(count))
            except RaylogError as exc:
                backoff_s = self._producer_ids.fetch_failed()
                logger.warning(
                    "broker %d: no producer ids from the controller (%s): asking again in %.1f s",
                    self.broker_id,
                    exc,
                    backoff_s,
                )
                await asyncio.sleep(backoff_s)
                count = self._producer_ids.start_fetch()
            else:
                self._producer_ids.fetched(ids)
                return

    @staticmethod
    def leader_broker(topic: str, partition: int, md: dict) -> int:
        """The broker id of the partition's running leader in ``md``, or -1 (none, or its
        actor not started yet)."""
        described = md["topics"].get(topic)
        if described is None or not 0 <= partition < len(described.partitions):
            return -1
        if (topic, partition) not in md["leaders"]:
            return -1
        return described.partitions[partition].leader

    async def group_coordinator(self, group_id: str) -> tuple[int, Any]:
        """``(broker id, coordinator actor)`` of ``group_id``'s group coordinator, or ``(-1, None)``
        while its ``__consumer_offsets`` partition has no running leader.

        Raises:
            ApiError: the controller's, creating ``__consumer_offsets`` (too few brokers live).
        """
        return await self._coordinator(OFFSETS_TOPIC, group_id)

    async def transaction_coordinator(self, transactional_id: str) -> tuple[int, Any]:
        """As :meth:`group_coordinator`, for a transactional id."""
        return await self._coordinator(TRANSACTION_TOPIC, transactional_id)

    async def coordinator_partition(self, internal: str, key: str) -> int:
        """The partition of ``internal`` (``__consumer_offsets`` or ``__transaction_state``)
        whose leader coordinates ``key``; the controller creates the topic the first time.

        Raises:
            ApiError: the controller's, creating the topic.
        """
        md = await self.metadata()
        if internal not in md["topics"]:
            find = "find_coordinator" if internal == OFFSETS_TOPIC else "find_transaction_coordinator"
            partition, _ = await self.call(self.ask(find, key))
            self.invalidate()
            return partition
        return partition_for(key, len(md["topics"][internal].partitions))

    async def _coordinator(self, internal: str, key: str) -> tuple[int, Any]:
        partition = await self.coordinator_partition(internal, key)
        md = await self.metadata()
        broker = self.leader_broker(internal, partition, md)
        if broker < 0:
            md = await self.metadata(refresh=True)
            broker = self.leader_broker(internal, partition, md)
        if broker < 0:
            return -1, None
        return broker, md["leaders"][(internal, partition)]
