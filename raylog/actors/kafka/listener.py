"""The Kafka listener: one Ray actor per broker, on the broker's node, that accepts Kafka
protocol connections and answers them with raylog's actors.

Each connection is a task of the actor's asyncio loop: it reads size-prefixed frames, hands
each to the handler of its API key (decoded by :mod:`raylog.kafka.codec`) and a writer task
sends the answers in the order the requests came. Requests that only read (:data:`READS`)
run beside each other; one that changes something runs after everything before it, and
everything after it waits for it: what a client sees is what Kafka's one-request-at-a-time
connections give, and a Fetch never queues behind a slow FindCoordinator or Metadata.
Requests read ahead are bounded (:data:`MAX_QUEUED_REQUESTS`), then the socket's buffers
hold the rest. Other connections go on while one waits on an actor, or while its record
batches are converted (on the context's conversion threads, bounded while they inflate).

- An API or version outside :data:`raylog.kafka.codec.SUPPORTED` is answered with
  UNSUPPORTED_VERSION (35), never by closing the connection.
- A frame larger than ``socket.request.max.bytes`` (:data:`raylog.protocol.MAX_REQUEST_BYTES`),
  or one that does not decode, closes the connection as Kafka does: its length or bytes
  cannot be trusted to find the next request.
- A handler's unexpected failure is logged and answered with UNKNOWN_SERVER_ERROR (-1); so
  is an answer that does not encode (a value too long for its field), logged once per API
  and version: one bad answer never wedges its connection.
- A Produce with acks=0 gets no answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from typing import Any

import ray

from raylog.actors import logs
from raylog.actors.kafka import admin, data, groups, transactions
from raylog.actors.kafka.context import CONNECTION, BrokerContext
from raylog.errors import UnknownServerError, UnsupportedVersionError
from raylog.kafka import codec, records
from raylog.protocol import MAX_REQUEST_BYTES

logger = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_API_KEY = struct.Struct(">h")
#: Requests of a connection read ahead of the one being answered (Kafka's
#: queued.max.requests is 500 per broker; these are per connection).
MAX_QUEUED_REQUESTS = 64
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
    )
)

HANDLERS = {**data.HANDLERS, **groups.HANDLERS, **transactions.HANDLERS, **admin.HANDLERS}


class KafkaListenerActor:
    """See the module docstring. An async actor: every connection and call on one loop."""

    #: Calls the actor serves at once (its own: start, endpoint, stop); connections are not calls.
    MAX_CONCURRENCY = 16

    def __init__(self, cluster_name: str, broker_id: int, controller: Any, host: str, port: int):
        logs.configure()
        records.warm_up()  # numba's conversion loops, compiled or loaded from its cache, before any client
        self.context = BrokerContext(cluster_name, broker_id, controller)
        self._bind_host = host or "0.0.0.0"
        self._advertised_host = host if host not in ("", "0.0.0.0", "::") else ray.util.get_node_ip_address()
        self._port = port
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.Task] = set()
        #: (API, version) of answers that did not encode, logged once each.
        self._unencodable: set[tuple[int, int]] = set()

    async def start(self) -> tuple[str, int]:
        """Listen (once) and return the advertised ``(host, port)``.

        Raises:
            OSError: the port is taken (the controller logs it and tries again later).
        """
        if self._server is None:
            self._server = await asyncio.start_server(self._serve, self._bind_host, self._port, reuse_address=True)
            self._port = self._server.sockets[0].getsockname()[1]
            logger.info(
                "broker %d: Kafka listener on %s:%d (advertised %s:%d)",
                self.context.broker_id,
                self._bind_host,
                self._port,
                self._advertised_host,
                self._port,
            )
        return self._advertised_host, self._port

    async def stop(self) -> None:
        """Stop listening and close every connection."""
        if self._server is not None:
            self._server.close()
            for task in list(self._connections):
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._connections.add(task)
        CONNECTION.set({})
        peer = writer.get_extra_info("peername")
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        answers: asyncio.Queue = asyncio.Queue(MAX_QUEUED_REQUESTS)
        sender = asyncio.ensure_future(self._send(answers, writer, peer))
        change: asyncio.Future | None = None  # the last request that changes something
        reads: list[asyncio.Future] = []  # reads started since (the next change waits for them)
        try:
            while not sender.done():
                size = _SIZE.unpack(await reader.readexactly(4))[0]
                if not 0 < size <= MAX_REQUEST_BYTES:
                    logger.warning(
                        "closing Kafka connection from %s: a request of %d bytes (socket.request.max.bytes %d)",
                        peer,
                        size,
                        MAX_REQUEST_BYTES,
                    )
                    return
                frame = await reader.readexactly(size)
                if size >= _API_KEY.size and _API_KEY.unpack_from(frame)[0] in READS:
                    answer = asyncio.ensure_future(self._answer_after([change], frame, peer))
                    reads = [r for r in reads if not r.done()] + [answer]
                else:
                    answer = asyncio.ensure_future(self._answer_after([change, *reads], frame, peer))
                    change, reads = answer, []
                await answers.put(answer)
        except (asyncio.IncompleteReadError, ConnectionError):
            return  # the client went away
        finally:
            self._connections.discard(task)
            sender.cancel()
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _send(self, answers: asyncio.Queue, writer: asyncio.StreamWriter, peer: Any) -> None:
        """Write the connection's answers in the order its requests came."""
        while True:
            answer = await answers.get()
            try:
                # Shielded: a client that goes away (the sender is cancelled) leaves the requests
                # it sent to finish, as Kafka's brokers do (an acks=0 produce is then written).
                buffers = await asyncio.shield(answer)
            except codec.InvalidRequestError as exc:
                logger.warning("closing Kafka connection from %s: %s", peer, exc)
                writer.close()  # the reader sees the connection end
                return
            except Exception:  # noqa: BLE001 — no answer can say it: close, never go silent
                logger.exception("closing Kafka connection from %s: a request has no answer", peer)
                writer.close()
                return
            if buffers is not None:
                writer.writelines(buffers)
                await writer.drain()

    async def _answer_after(self, earlier: list, frame: bytes, peer: Any) -> list | None:
        """:meth:`_answer` once the requests ``earlier`` (None for none) are answered."""
        waiting = [e for e in earlier if e is not None and not e.done()]
        if waiting:
            await asyncio.wait(waiting)
        return await self._answer(frame, peer)

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
            response = await handler(self.context, header, body)
        except Exception:  # noqa: BLE001 — the client gets UNKNOWN_SERVER_ERROR, the log the cause
            logger.exception(
                "broker %d: %s v%d failed", self.context.broker_id, header.api_key.name, header.api_version
            )
            return codec.error_response(header, UnknownServerError.code, body)
        if response is None:
            return None  # acks=0
        try:
            return codec.encode_response(header, response)
        except codec.EncodeError as exc:
            self._log_unencodable(header, exc)
            return codec.error_response(header, UnknownServerError.code, body)

    def _log_unencodable(self, header: codec.RequestHeader, exc: codec.EncodeError) -> None:
        cause = (int(header.api_key), header.api_version)
        level = logging.DEBUG if cause in self._unencodable else logging.ERROR
        self._unencodable.add(cause)
        logger.log(level, "broker %d: answered UNKNOWN_SERVER_ERROR: %s", self.context.broker_id, exc)
