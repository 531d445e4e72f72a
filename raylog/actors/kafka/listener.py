"""The Kafka listener: one Ray actor per broker, on the broker's node, that accepts Kafka
protocol connections and answers them with raylog's actors.

The actor serves all of the broker's named listeners (``listeners``), one asyncio server
each on its loop, each with its own security protocol (a TLS context for SSL and SASL_SSL,
a SASL exchange per connection for SASL_*). A connection knows its listener's name, and the
answers that carry brokers' addresses give those of that listener, as Kafka's do.

Each connection is a task of the actor's asyncio loop: it reads size-prefixed frames, hands
each to the handler of its API key (decoded by :mod:`raylog.kafka.codec`) and a writer task
sends the answers in the order the requests came. Requests that only read (:data:`READS`)
run beside each other; one that changes something runs after everything before it, and
everything after it waits for it: what a client sees is what Kafka's one-request-at-a-time
connections give, and a Fetch never queues behind a slow FindCoordinator or Metadata. One
exception: consecutive Produce requests (of the versions that are throttled by muting,
:data:`THROTTLE_AT_ONCE`) run beside each other, and each partition's batches keep their
order in :mod:`raylog.actors.kafka.appends`, so that a client that pipelines gets more than
one acks=all round trip's worth of requests answered at a time.
Other connections go on while one waits on an actor, or while its record batches are
converted (on the context's conversion threads, bounded while they inflate).

Every resource is bounded as a Kafka broker bounds it, by the broker settings of Kafka's names
(:class:`raylog.config.ControllerConfig`); a cause of refusal or closing is logged once (then
at DEBUG):

- ``max.connections``, ``max.connections.per.ip``: a connection over either is closed as it
  is accepted (:mod:`raylog.actors.kafka.limits`).
- ``queued.max.requests``: requests a connection has read ahead of their answers; past it the
  listener stops reading the connection and the socket's buffers hold the rest. So it does
  while the connection's computed, unwritten answers exceed :data:`UNSENT_ANSWER_BYTES_MAX`
  (a client that does not read its answers).
- ``queued.max.request.bytes``: request bytes held across connections (a memory pool); a
  connection whose next request finds it used up waits to read it until memory frees.
- ``connections.max.idle.ms``: a connection that sent nothing for that long and has no
  request left to answer is closed.
- ``socket.request.max.bytes``: a larger frame, or one that does not decode, closes the
  connection as Kafka does: its length or bytes cannot be trusted to find the next request.

And:

- An API or version outside :data:`raylog.kafka.codec.SUPPORTED` is answered with
  UNSUPPORTED_VERSION (35), never by closing the connection.
- A handler's unexpected failure is logged and answered with UNKNOWN_SERVER_ERROR (-1); so
  is an answer that does not encode (a value too long for its field), logged once per API
  and version: one bad answer never wedges its connection.
- A Produce with acks=0 gets no answer.
- With the authorizer (``authorizer=acl``), every request goes through
  :mod:`raylog.actors.kafka.authorization` first, for the connection's principal and address.
- A Produce or Fetch over the client's byte-rate quota (its throttle time) holds the
  connection back as Kafka's does: from the versions of KIP-219 on (:data:`THROTTLE_AT_ONCE`)
  it is answered at once and the listener reads nothing more from the connection until the
  throttle time has passed (the client waits too); an older version's answer itself waits.
- When a connection closes, its reads (:data:`READS`, and the Fetch long polls and reads ahead
  kept for it) stop: nobody is left to answer. Its other requests finish, as Kafka's do.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import struct
import time
from collections.abc import Hashable
from typing import Any

import ray

from raylog.actors import logs
from raylog.actors.kafka import (
    acls,
    admin,
    appends,
    authentication,
    authorization,
    client_quotas,
    data,
    groups,
    transactions,
    txn_admin,
)
from raylog.actors.kafka.context import CONNECTION, BrokerContext
from raylog.actors.kafka.limits import ConnectionQuotas, RequestMemoryPool
from raylog.config import EVERY_INTERFACE, ControllerConfig, Listener
from raylog.errors import RaylogError, UnknownServerError, UnsupportedVersionError
from raylog.kafka import codec, records, tls
from raylog.kafka.sasl import SaslExchange
from raylog.principals import PrincipalMapper

logger = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_API_KEY = struct.Struct(">h")
_API_KEY_VERSION = struct.Struct(">hh")
#: Bytes of a connection's answers computed and not yet written past which the listener
#: stops reading its requests: a client that does not read its answers must not make the
#: broker hold them without bound (Kafka reads nothing more from a connection until its
#: answer is sent). A fetch answer may alone be larger; then the connection waits for it.
UNSENT_ANSWER_BYTES_MAX = 16 << 20
#: Log causes of closed connections (the settings' names).
IDLE = "connections.max.idle.ms"
TOO_LARGE = "socket.request.max.bytes"
INVALID = "invalid request"
UNAUTHENTICATED = "request before SASL authentication"
EXPIRED = "connections.max.reauth.ms"
#: Requests that change nothing: they run beside each other, after every earlier request
#: that changes something; a request that changes something (every other one: Produce,
#: commits, joins, ...) runs after every earlier request. So a connection's answers are
#: as if served one at a time, while a Fetch never waits behind a slow look-up.
READS = frozenset(
    int(k)
    for k in (
        codec.ApiKey.API_VERSIONS,
        codec.ApiKey.METADATA,
        codec.ApiKey.FETCH,
        codec.ApiKey.LIST_OFFSETS,
        codec.ApiKey.OFFSET_FOR_LEADER_EPOCH,
        codec.ApiKey.FIND_COORDINATOR,
        codec.ApiKey.OFFSET_FETCH,
        codec.ApiKey.DESCRIBE_GROUPS,
        codec.ApiKey.LIST_GROUPS,
        codec.ApiKey.DESCRIBE_CONFIGS,
        codec.ApiKey.DESCRIBE_ACLS,
    )
)

#: Where a listener whose ``listeners`` entry names no host binds (and what it advertises).
LOOPBACK = "127.0.0.1"
#: How long an SSL listener waits for a client's TLS handshake (a client that connects and
#: stays silent holds no more than this).
TLS_HANDSHAKE_TIMEOUT_S = 10.0

HANDLERS = {
    **data.HANDLERS,
    **groups.HANDLERS,
    **transactions.HANDLERS,
    **txn_admin.HANDLERS,
    **admin.HANDLERS,
    **client_quotas.HANDLERS,
    **acls.HANDLERS,
    **authentication.HANDLERS,
}
#: What a SASL listener reads from a connection that has not authenticated yet.
BEFORE_AUTHENTICATION = frozenset(
    {int(codec.ApiKey.API_VERSIONS), int(codec.ApiKey.SASL_HANDSHAKE), int(codec.ApiKey.SASL_AUTHENTICATE)}
)
#: The APIs that quotas throttle, and their first version answered at once with the throttle
#: time (KIP-219); an older version's answer is held back for it.
THROTTLE_AT_ONCE = {int(codec.ApiKey.PRODUCE): 6, int(codec.ApiKey.FETCH): 8}


class KafkaListenerActor:
    """See the module docstring. An async actor: every connection and call on one loop."""

    #: Calls the actor serves at once (its own: start, endpoint, stop); connections are not calls.
    MAX_CONCURRENCY = 16

    def __init__(
        self,
        cluster_name: str,
        broker_id: int,
        controller: Any,
        listeners: tuple[Listener, ...],
        config: ControllerConfig | None = None,
        session_key: str | None = None,
    ):
        logs.configure()
        records.warm_up()  # numba's conversion loops, compiled or loaded from its cache, before any client
        self.config = config or ControllerConfig()
        self.context = BrokerContext(cluster_name, broker_id, controller, self.config, session_key)
        self._listeners = listeners
        #: listener name -> how its client certificates' subjects become principals
        self._principals = {
            listener.name: PrincipalMapper(self.config.for_listener(listener.name).ssl_principal_mapping_rules)
            for listener in listeners
        }
        #: listener name -> its server, once it listens
        self._servers: dict[str, asyncio.base_events.Server] = {}
        #: listener name -> (advertised host, advertised port, bound port), once it listens
        self._endpoints: dict[str, tuple[str, int, int]] = {}
        self._starting = asyncio.Lock()
        self._connections: set[asyncio.Task] = set()
        # One budget for the broker, whichever listener a connection comes in on (Kafka's
        # max.connections is per broker too).
        self._quotas = ConnectionQuotas(self.config.max_connections, self.config.max_connections_per_ip)
        self._pool = RequestMemoryPool(self.config.queued_max_request_bytes)
        #: Causes already logged (a refused or closed connection's, an answer that did not
        #: encode, by API and version): logged once each, at DEBUG after that.
        self._logged: set[Hashable] = set()
        #: Authorization denials already logged (see raylog.actors.kafka.authorization).
        self._denials: set[Hashable] = set()

    async def start(self) -> dict[str, tuple[str, int, int]]:
        """Listen on each of the broker's listeners not listening yet, and return ``listener
        name -> (advertised host, advertised port, bound port)`` once all listen.

        Raises:
            OSError: a port is taken (the controller logs it and tries again later; the
                listeners that listen go on).
            InvalidConfigError: an SSL listener's keystore or truststore cannot be read here.
        """
        async with self._starting:  # (a call that came while one binds must not bind again)
            waiting = [listener for listener in self._listeners if listener.name not in self._servers]
            for listener in waiting:
                self._servers[listener.name] = await self._listen(listener)
            if waiting and len(self._servers) == len(self._listeners):
                self.context.warm()
            return dict(self._endpoints)

    async def _listen(self, listener: Listener) -> asyncio.base_events.Server:
        """Bind ``listener`` and note what it advertises. No host: the loopback only (clients
        on this node); every interface only when the listener names it (0.0.0.0 or ::), which
        then advertises the node's address unless ``advertised.listeners`` names another."""
        own = self.config.for_listener(listener.name)  # (with its listener.name.<listener>.* settings)
        tls_context = None
        if listener.tls:
            tls_context = tls.server_context(
                own.ssl_keystore_location, own.ssl_key_password, own.ssl_truststore_location, own.ssl_client_auth
            )
        bind_host = listener.host or LOOPBACK
        server = await asyncio.start_server(
            functools.partial(self._serve, listener),
            bind_host,
            listener.port,
            reuse_address=True,
            ssl=tls_context,
            ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S if tls_context else None,
        )
        port = server.sockets[0].getsockname()[1]
        node_host = ray.util.get_node_ip_address() if listener.host in EVERY_INTERFACE else bind_host
        advertised = (listener.advertised_host or node_host, listener.advertised_port or port)
        self._endpoints[listener.name] = (*advertised, port)
        logger.info(
            "broker %d: Kafka listener %s (%s) on %s:%d (advertised %s:%d)",
            self.context.broker_id, listener.name, listener.protocol, bind_host, port, *advertised,
        )  # fmt: skip
        return server

    async def update_credentials(self, version: int, credentials: dict) -> None:
        """The controller's SCRAM credentials changed: authenticate with them from now on."""
        self.context.apply_credentials(version, credentials)

    async def update_acls(self, version: int, acls: frozenset) -> None:
        """The controller's ACLs changed: authorize from them from now on (see BrokerContext.apply_acls)."""
        self.context.apply_acls(version, acls)

    async def stop(self) -> None:
        """Stop listening and close every connection."""
        if self._servers:
            for server in self._servers.values():
                server.close()
            for task in list(self._connections):
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)
            self._servers.clear()
            self._endpoints.clear()
            self.context.close()

    async def _serve(self, listener: Listener, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        ip = peer[0] if peer else ""
        refused = self._quotas.admit(ip)
        if refused is not None:
            self._log_once(refused, "closing Kafka connections over %s (%s first)", refused, peer)
            writer.close()  # as Kafka's acceptor: at once, no answer
            return
        task = asyncio.current_task()
        self._connections.add(task)
        try:
            await self._serve_admitted(listener, reader, writer, peer)
        except (asyncio.IncompleteReadError, ConnectionError):
            return  # the client went away
        finally:
            self._connections.discard(task)
            self._quotas.release(ip)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve_admitted(
        self, listener: Listener, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: Any
    ) -> None:
        principal = self._principals[listener.name].principal(writer.get_extra_info("peercert"))
        connection = {"principal": principal, "host": peer[0] if peer else "", "listener": listener.name}
        if listener.sasl:
            own = self.config.for_listener(listener.name)
            connection["sasl"] = SaslExchange(own.sasl_mechanisms, self.context.credentials, own.reauthenticates)
            connection["listener_settings"] = own
        CONNECTION.set(connection)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        backlog = _Backlog(self.config.queued_max_requests, UNSENT_ANSWER_BYTES_MAX)
        answers: asyncio.Queue = asyncio.Queue()
        sender = asyncio.ensure_future(self._send(answers, writer, peer, backlog))
        change: asyncio.Future | None = None  # the last request that changes something
        reads: list[asyncio.Future] = []  # reads started since (the next change waits for them)
        produces: list[asyncio.Future] = []  # Produce requests since, running beside each other
        placed: asyncio.Future | None = None  # set once the last of them reserved its places
        unanswered_reads: set[asyncio.Future] = set()
        try:
            while not sender.done():
                await backlog.room()
                size = await self._next_size(reader, backlog, peer)
                if size is None:
                    return
                await self._pool.acquire(size)
                try:
                    frame = await reader.readexactly(size)
                    await _unmuted()  # a request read while muted waits, as in Kafka's muted socket
                except BaseException:
                    self._pool.release(size)
                    raise
                if connection.get("sasl_raw"):  # a SASL token after SaslHandshake v0, not a request
                    answer = asyncio.ensure_future(self._raw_sasl_answer(frame, [change, *reads, *produces], peer))
                    answer.add_done_callback(lambda _, n=size: self._pool.release(n))
                    answer.add_done_callback(backlog.ready)
                    backlog.requests += 1
                    answers.put_nowait(answer)
                    continue
                if not self._may_read(frame, peer):
                    self._pool.release(size)
                    return
                api_key, version = _API_KEY_VERSION.unpack_from(frame) if size >= _API_KEY_VERSION.size else (-1, -1)
                if api_key in READS:
                    answer = asyncio.ensure_future(self._answer_after([change, *produces], frame, peer))
                    reads = [r for r in reads if not r.done()] + [answer]
                    unanswered_reads.add(answer)
                    answer.add_done_callback(unanswered_reads.discard)
                elif api_key == codec.ApiKey.PRODUCE and version >= THROTTLE_AT_ONCE[api_key]:
                    before, placed = placed, asyncio.get_running_loop().create_future()
                    answer = asyncio.ensure_future(self._produce_after([change, *reads, before], placed, frame, peer))
                    reads = [r for r in reads if not r.done()]
                    produces = [p for p in produces if not p.done()] + [answer]
                else:
                    answer = asyncio.ensure_future(self._answer_after([change, *reads, *produces], frame, peer))
                    change, reads, produces, placed = answer, [], [], None
                answer.add_done_callback(lambda _, n=size: self._pool.release(n))
                answer.add_done_callback(backlog.ready)
                backlog.requests += 1
                answers.put_nowait(answer)
        finally:
            sender.cancel()
            # Reads change nothing and nobody is left to answer: stop them, and the reads
            # ahead kept for the connection (a long poll may be asked to wait for days).
            for read in unanswered_reads:
                read.cancel()
            data.forget_connection(CONNECTION.get())

    async def _raw_sasl_answer(self, token: bytes, earlier: list, peer: Any) -> list | None:
        """The answer to a raw SASL token (KIP-43: after SaslHandshake v0, the SASL messages
        go without Kafka's framing, as kafka-python sends them): the server's token, length
        prefixed; a refused one is not answered, and the connection closes (as Kafka does)."""
        waiting = [e for e in earlier if e is not None and not e.done()]
        if waiting:
            await asyncio.wait(waiting)
        connection = CONNECTION.get()
        try:
            answer = await authentication.exchange_token(self.context, connection, token)
        except RaylogError as exc:
            logger.info("broker %d: failed authentication with %s (%s)", self.context.broker_id, peer, exc)
            connection["close_after_answer"] = True
            return None
        return [_SIZE.pack(len(answer)), answer]

    def _may_read(self, frame: bytes, peer: Any) -> bool:
        """Whether the connection may send ``frame`` now: on a SASL listener, a connection that
        has not authenticated, is authenticating again or whose authentication expired
        (``connections.max.reauth.ms``, KIP-368) sends only ApiVersions, SaslHandshake and
        SaslAuthenticate (else it is closed, as Kafka closes it)."""
        connection = CONNECTION.get()
        exchange = connection.get("sasl")
        if exchange is None:
            return True
        expired = time.monotonic() >= connection.get("session_expires_s", float("inf"))
        if exchange.complete and not expired:
            return True
        api_key = _API_KEY.unpack_from(frame)[0] if len(frame) >= _API_KEY.size else -1
        if api_key in BEFORE_AUTHENTICATION:
            return True
        if exchange.complete:
            self._log_once(EXPIRED, "closing Kafka connections whose SASL authentication expired (%s first)", peer)
        else:
            self._log_once(
                UNAUTHENTICATED, "closing Kafka connections sending API %d before SASL (%s first)", api_key, peer
            )
        return False

    async def _next_size(self, reader: asyncio.StreamReader, backlog: _Backlog, peer: Any) -> int | None:
        """The size of the connection's next request frame, or None when the connection is to
        close: idle for connections.max.idle.ms with nothing left to answer, or a size outside
        (0, socket.request.max.bytes]."""
        idle_s = self.config.connections_max_idle_ms / 1000
        while True:
            try:
                size = _SIZE.unpack(await asyncio.wait_for(reader.readexactly(4), idle_s))[0]
                break
            except asyncio.TimeoutError:  # (readexactly consumes nothing until all 4 bytes are there)
                if not backlog.requests:
                    self._log_once(IDLE, "closing idle Kafka connections (connections.max.idle.ms; %s first)", peer)
                    return None
        limit = self.config.socket_request_max_bytes
        if not 0 < size <= limit:
            self._log_once(
                TOO_LARGE, "closing Kafka connections sending %d bytes (socket.request.max.bytes %d; %s first)",
                size, limit, peer,
            )  # fmt: skip
            return None
        return size

    async def _send(self, answers: asyncio.Queue, writer: asyncio.StreamWriter, peer: Any, backlog: _Backlog) -> None:
        """Write the connection's answers in the order its requests came."""
        while True:
            answer = await answers.get()
            try:
                # Shielded: a client that goes away (the sender is cancelled) leaves the requests
                # it sent to finish, as Kafka's brokers do (an acks=0 produce is then written).
                buffers = await asyncio.shield(answer)
            except codec.InvalidRequestError as exc:
                self._log_once(
                    INVALID, "closing Kafka connections sending requests that do not decode (%s first: %s)", peer, exc
                )
                writer.close()  # the reader sees the connection end
                return
            except Exception:  # noqa: BLE001 — no answer can say it: close, never go silent
                logger.exception("closing Kafka connection from %s: a request has no answer", peer)
                writer.close()
                return
            if buffers is not None:
                writer.writelines(buffers)
                await writer.drain()
            backlog.sent(answer)
            if CONNECTION.get().get("close_after_answer"):  # a failed authentication
                writer.close()
                return

    async def _answer_after(self, earlier: list, frame: bytes, peer: Any) -> list | None:
        """:meth:`_answer` once the requests ``earlier`` (None for none) are answered."""
        waiting = [e for e in earlier if e is not None and not e.done()]
        if waiting:
            await asyncio.wait(waiting)
        return await self._answer(frame, peer)

    async def _produce_after(self, earlier: list, placed: asyncio.Future, frame: bytes, peer: Any) -> list | None:
        """:meth:`_answer_after` for a Produce that runs beside the connection's others:
        ``placed`` is set once it reserved its places in its partitions' queues
        (:mod:`raylog.actors.kafka.appends`), or ended without."""
        appends.ORDERED.set(placed)
        try:
            return await self._answer_after(earlier, frame, peer)
        finally:
            if not placed.done():
                placed.set_result(None)

    async def _answer(self, frame: bytes, peer: Any) -> list | None:
        """The response to one request frame (None for a Produce with acks=0).

        Raises:
            codec.InvalidRequestError: the frame does not decode (the connection closes).
        """
        try:
            header, body = codec.decode_request(frame)
        except codec.UnsupportedVersionError as exc:
            logger.debug("Kafka request from %s: %s", peer, exc)
            return codec.error_response(exc.header, UnsupportedVersionError.code)
        handler = HANDLERS[header.api_key]
        try:
            response = await authorization.authorized(self.context, header, body, handler, self._denials)
        except Exception:  # noqa: BLE001 — the client gets UNKNOWN_SERVER_ERROR, the log the cause
            logger.exception(
                "broker %d: %s v%d failed", self.context.broker_id, header.api_key.name, header.api_version
            )
            return codec.error_response(header, UnknownServerError.code, body)
        if response is None:
            return None  # acks=0
        await _throttle(header, response)
        try:
            return codec.encode_response(header, response)
        except codec.EncodeError as exc:
            cause = (int(header.api_key), header.api_version)
            self._log_once(cause, "answered UNKNOWN_SERVER_ERROR: %s", exc, level=logging.ERROR)
            return codec.error_response(header, UnknownServerError.code, body)

    def _log_once(self, cause: Hashable, message: str, *args: Any, level: int = logging.WARNING) -> None:
        """Log ``message`` at ``level`` the first time ``cause`` happens, at DEBUG after that."""
        if cause in self._logged:
            level = logging.DEBUG
        self._logged.add(cause)
        logger.log(level, f"broker %d: {message}", self.context.broker_id, *args)


async def _throttle(header: codec.RequestHeader, response: dict) -> None:
    """Hold the connection back for ``response``'s throttle time (see the module docstring)."""
    first_at_once = THROTTLE_AT_ONCE.get(int(header.api_key))
    throttle_s = response.get("throttle_time_ms", 0) / 1000 if first_at_once is not None else 0
    if throttle_s <= 0:
        return
    if header.api_version < first_at_once:
        await asyncio.sleep(throttle_s)
        return
    connection = CONNECTION.get({})  # (a handler run outside a connection: nothing to mute)
    until = asyncio.get_running_loop().time() + throttle_s
    connection["muted_until"] = max(until, connection.get("muted_until", 0.0))


async def _unmuted() -> None:
    """Return once the connection's throttle time, if any, has passed."""
    muted_s = CONNECTION.get().get("muted_until", 0.0) - asyncio.get_running_loop().time()
    if muted_s > 0:
        await asyncio.sleep(muted_s)


class _Backlog:
    """One connection's requests read and not yet answered on the socket, and the bytes of
    answers ready but not yet written; :meth:`room` waits while either is at its bound."""

    def __init__(self, max_requests: int, max_unsent_bytes: int):
        self.max_requests = max_requests
        self.max_unsent_bytes = max_unsent_bytes
        self.requests = 0
        self.unsent_bytes = 0
        self._changed = asyncio.Event()

    async def room(self) -> None:
        """Return once another request may be read."""
        while self.requests >= self.max_requests or self.unsent_bytes > self.max_unsent_bytes:
            self._changed.clear()
            await self._changed.wait()

    def ready(self, answer: asyncio.Future) -> None:
        """``answer`` is computed (a done callback)."""
        self.unsent_bytes += _answer_bytes(answer)

    def sent(self, answer: asyncio.Future) -> None:
        """``answer`` is written (or had nothing to write)."""
        self.requests -= 1
        self.unsent_bytes -= _answer_bytes(answer)
        self._changed.set()


def _answer_bytes(answer: asyncio.Future) -> int:
    if answer.cancelled() or answer.exception() is not None or answer.result() is None:
        return 0
    return sum(memoryview(b).nbytes for b in answer.result())
