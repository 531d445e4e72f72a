"""The Kafka listener's connection handling (raylog.actors.kafka.listener) without Ray: a
listener runs in this process on a free loopback port with stand-in handlers, and the tests
speak to it over real sockets with raylog's own codec."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from raylog.actors.kafka import listener
from raylog.errors import UnknownServerError
from raylog.kafka import codec
from tests.kafka_wire import Wire

ApiKey = codec.ApiKey
#: Bound on starting and stopping the listener.
READ_TIMEOUT_S = 10.0


@contextmanager
def running(actor: listener.KafkaListenerActor) -> Iterator[int]:
    """Run ``actor`` on a loop of its own thread; its port."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        _, port = asyncio.run_coroutine_threadsafe(actor.start(), loop).result(READ_TIMEOUT_S)
        yield port
    finally:
        asyncio.run_coroutine_threadsafe(actor.stop(), loop).result(READ_TIMEOUT_S)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(READ_TIMEOUT_S)


def new_listener() -> listener.KafkaListenerActor:
    return listener.KafkaListenerActor("unit", 0, None, "127.0.0.1", 0)


def test_an_answer_that_does_not_encode_gets_unknown_server_error_and_the_connection_goes_on(monkeypatch):
    async def unencodable(ctx, header, body):
        return {"error_code": 0, "groups": [{"group_id": "g" * 40_000, "protocol_type": "consumer"}]}

    monkeypatch.setitem(listener.HANDLERS, ApiKey.LIST_GROUPS, unencodable)
    with running(new_listener()) as port:
        wire = Wire(f"127.0.0.1:{port}")
        assert wire.ask(ApiKey.LIST_GROUPS, 2, {})["error_code"] == UnknownServerError.code
        assert wire.ask(ApiKey.LIST_GROUPS, 2, {})["error_code"] == UnknownServerError.code
        assert wire.ask(ApiKey.API_VERSIONS, 0, {})["error_code"] == 0
        wire.close()


def test_a_request_that_cannot_be_answered_at_all_closes_its_connection(monkeypatch):
    """The last resort: when not even the error response encodes, the client sees the
    connection close (and retries elsewhere) rather than wait for ever."""

    async def failing(ctx, header, body):
        raise RuntimeError("handler bug")

    def no_error_response(*args):
        raise codec.EncodeError("nothing encodes")

    monkeypatch.setitem(listener.HANDLERS, ApiKey.LIST_GROUPS, failing)
    monkeypatch.setattr(codec, "error_response", no_error_response)
    with running(new_listener()) as port:
        wire = Wire(f"127.0.0.1:{port}")
        wire.send(ApiKey.LIST_GROUPS, 2, {})
        assert wire.closed()
        wire.close()
        assert Wire(f"127.0.0.1:{port}").ask(ApiKey.API_VERSIONS, 0, {})["error_code"] == 0
