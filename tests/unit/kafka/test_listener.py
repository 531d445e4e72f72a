"""The Kafka listener's connection handling (raylog.actors.kafka.listener) without Ray: a
listener runs in this process on a free loopback port with stand-in handlers, and the tests
speak to it over real sockets with raylog's own codec."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from raylog.actors.kafka import appends, listener
from raylog.actors.kafka.context import broker_addresses
from raylog.config import ControllerConfig, Listener
from raylog.errors import UnknownServerError
from raylog.kafka import codec
from tests.helpers import wait_until
from tests.kafka_wire import Wire

# An actor class run in this process sets up its logging: put the loggers back after.
pytestmark = pytest.mark.usefixtures("restored_raylog_logging")

ApiKey = codec.ApiKey
#: Bound on starting and stopping the listener.
READ_TIMEOUT_S = 10.0
#: The listener the tests start: PLAINTEXT on the loopback, on a free port.
PLAINTEXT = Listener("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 0)


@contextmanager
def running(actor: listener.KafkaListenerActor) -> Iterator[int]:
    """Run ``actor`` on a loop of its own thread; its port."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        endpoints = asyncio.run_coroutine_threadsafe(actor.start(), loop).result(READ_TIMEOUT_S)
        yield next(iter(endpoints.values()))[2]  # (its first listener's bound port)
    finally:
        asyncio.run_coroutine_threadsafe(actor.stop(), loop).result(READ_TIMEOUT_S)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(READ_TIMEOUT_S)


def new_listener(**settings) -> listener.KafkaListenerActor:
    """A listener whose broker settings are ``settings`` (Kafka names with dots as underscores)."""
    return listener.KafkaListenerActor("unit", 0, None, (PLAINTEXT,), ControllerConfig(**settings))


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


# ---------------------------------------------------------------------------------------
# Bounded resources (Kafka's broker settings)

#: How long a test lets the listener go on before it checks that something did NOT happen.
SETTLE_S = 0.5


class Blocked:
    """A stand-in Metadata handler that counts its calls and answers once :attr:`go` is set."""

    def __init__(self, answer: dict | None = None):
        self.calls = 0
        self.go = threading.Event()
        self.answer = answer or {"brokers": [], "topics": []}

    async def __call__(self, ctx, header, body):
        self.calls += 1
        while not self.go.is_set():
            await asyncio.sleep(0.01)
        return self.answer


@pytest.fixture
def handler(monkeypatch) -> Blocked:
    """A :class:`Blocked` serving the listener's Metadata requests."""
    blocked = Blocked()
    monkeypatch.setitem(listener.HANDLERS, ApiKey.METADATA, blocked)
    return blocked


def metadata_body(names: int = 0, length: int = 100) -> dict:
    return {"topics": [{"name": f"{i:0{length}d}"} for i in range(names)], "allow_auto_topic_creation": False}


def ask_api_versions(port: int, source: str | None = None) -> int:
    wire = Wire(f"127.0.0.1:{port}", source)
    try:
        return wire.ask(ApiKey.API_VERSIONS, 0, {})["error_code"]
    finally:
        wire.close()


def test_connections_over_max_connections_are_closed_at_once_and_the_others_served():
    with running(new_listener(max_connections=2)) as port:
        held = [Wire(f"127.0.0.1:{port}") for _ in range(2)]
        assert [w.ask(ApiKey.API_VERSIONS, 0, {})["error_code"] for w in held] == [0, 0]
        refused = Wire(f"127.0.0.1:{port}")
        assert refused.closed()
        refused.close()
        assert held[0].ask(ApiKey.API_VERSIONS, 0, {})["error_code"] == 0
        held[1].close()  # a place frees: a new connection is served again
        assert wait_until(lambda: _served(port), timeout_s=10, message="a connection served after one closed")
        held[0].close()


def _served(port: int) -> bool:
    try:
        return ask_api_versions(port) == 0
    except (AssertionError, OSError):
        return False


def test_max_connections_per_ip_counts_each_client_address():
    with running(new_listener(max_connections_per_ip=1)) as port:
        first = Wire(f"127.0.0.1:{port}")
        assert first.ask(ApiKey.API_VERSIONS, 0, {})["error_code"] == 0
        second = Wire(f"127.0.0.1:{port}")
        assert second.closed()
        second.close()
        assert ask_api_versions(port, source="127.0.0.2") == 0  # another client host
        assert first.ask(ApiKey.API_VERSIONS, 0, {})["error_code"] == 0
        first.close()


def test_a_frame_over_socket_request_max_bytes_closes_only_its_connection():
    with running(new_listener(socket_request_max_bytes=1024, queued_max_request_bytes=1024)) as port:
        other = Wire(f"127.0.0.1:{port}")
        at_limit = Wire(f"127.0.0.1:{port}")
        at_limit.send(ApiKey.METADATA, 12, metadata_body(8, 100))  # (a frame of 1,000 to 1,024 bytes)
        assert at_limit.receive()[1]["topics"]
        too_big = Wire(f"127.0.0.1:{port}")
        too_big.send(ApiKey.METADATA, 12, metadata_body(10, 100))
        assert too_big.closed()
        assert other.ask(ApiKey.API_VERSIONS, 0, {})["error_code"] == 0
        for wire in (other, at_limit, too_big):
            wire.close()


def test_an_idle_connection_is_closed_but_not_one_waiting_for_an_answer(handler):
    with running(new_listener(connections_max_idle_ms=200)) as port:
        idle = Wire(f"127.0.0.1:{port}")
        waiting = Wire(f"127.0.0.1:{port}")
        waiting.send(ApiKey.METADATA, 12, metadata_body())
        assert idle.closed()
        time.sleep(SETTLE_S)  # past the idle time, with its request still unanswered
        handler.go.set()
        assert waiting.receive()[1]["topics"] == []
        assert waiting.closed()  # then idle in its turn
        idle.close()
        waiting.close()


def test_a_connection_reads_at_most_queued_max_requests_ahead(handler):
    with running(new_listener(queued_max_requests=3)) as port:
        wire = Wire(f"127.0.0.1:{port}")
        for _ in range(10):
            wire.send(ApiKey.METADATA, 12, metadata_body())
        wait_until(lambda: handler.calls == 3, timeout_s=10, message="3 requests read")
        time.sleep(SETTLE_S)
        assert handler.calls == 3
        handler.go.set()
        assert [wire.receive()[1]["topics"] for _ in range(10)] == [[]] * 10
        wire.close()


def test_a_connection_waits_to_read_while_the_request_memory_pool_is_used_up(handler):
    """Two requests of 3.8 KB take a 4 KB pool (the second is let in while a byte is free):
    another connection's request waits unread until they are answered."""
    with running(new_listener(socket_request_max_bytes=4000, queued_max_request_bytes=4000)) as port:
        big = Wire(f"127.0.0.1:{port}")
        big.send(ApiKey.METADATA, 12, metadata_body(32, 100))
        big.send(ApiKey.METADATA, 12, metadata_body(32, 100))
        wait_until(lambda: handler.calls == 2, timeout_s=10, message="both large requests read")
        small = Wire(f"127.0.0.1:{port}")
        small.send(ApiKey.METADATA, 12, metadata_body())
        time.sleep(SETTLE_S)
        assert handler.calls == 2
        handler.go.set()
        assert [big.receive()[1]["topics"] for _ in range(2)] == [[], []]
        assert small.receive()[1]["topics"] == []
        assert handler.calls == 3
        big.close()
        small.close()


def test_a_client_that_does_not_read_its_answers_stops_being_read(monkeypatch):
    """Answers of 1 MiB to a client that sends 20 requests and reads nothing: the listener
    stops reading once its unsent answers pass the bound (the kernel's buffers hold a few
    MiB more), and every answer still comes when the client reads."""
    topics = [{"name": f"{i:0200d}", "error_code": 0, "partitions": []} for i in range(5_000)]
    handler = Blocked({"brokers": [], "topics": topics})
    handler.go.set()
    monkeypatch.setitem(listener.HANDLERS, ApiKey.METADATA, handler)
    monkeypatch.setattr(listener, "UNSENT_ANSWER_BYTES_MAX", 100_000)
    with running(new_listener(queued_max_requests=1000)) as port:
        wire = Wire(f"127.0.0.1:{port}", receive_buffer_bytes=65536)
        for _ in range(20):
            wire.send(ApiKey.METADATA, 12, metadata_body())
        calls = wait_until(lambda: _steady(handler), timeout_s=30, message="the listener stops reading")
        assert calls < 12, f"{calls} answers computed for a client that reads none"
        assert all(len(wire.receive()[1]["topics"]) == 5_000 for _ in range(20))
        assert handler.calls == 20
        wire.close()


def _steady(handler: Blocked) -> int | None:
    """The handler's calls once they stopped growing for SETTLE_S (None while they grow)."""
    before = handler.calls
    time.sleep(SETTLE_S)
    return before if before and handler.calls == before else None


def test_a_closed_connections_reads_stop_and_its_writes_finish(monkeypatch):
    """A read (Metadata here) has no one to answer once its client went away: the listener
    stops it, as it stops the connection's reads ahead (a Fetch may ask to wait for days).
    A write (ListGroups stands in for one) goes on to its end, as Kafka finishes a request
    whose client left."""
    outcomes: dict[str, str] = {}
    release = threading.Event()

    def waiting(name: str):
        async def handle(ctx, header, body):
            try:
                while not release.is_set():
                    await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                outcomes[name] = "cancelled"
                raise
            outcomes[name] = "finished"
            return {"brokers": [], "topics": []} if name == "read" else {"error_code": 0, "groups": []}

        return handle

    monkeypatch.setitem(listener.HANDLERS, ApiKey.METADATA, waiting("read"))
    monkeypatch.setitem(listener.HANDLERS, ApiKey.LIST_GROUPS, waiting("write"))
    monkeypatch.setattr(listener, "READS", listener.READS - {int(ApiKey.LIST_GROUPS)})
    with running(new_listener()) as port:
        wire = Wire(f"127.0.0.1:{port}")
        wire.send(ApiKey.METADATA, 9, metadata_body())
        wire.send(ApiKey.LIST_GROUPS, 2, {})  # (it waits for the read before it: READS)
        time.sleep(SETTLE_S)  # both read off the socket (nothing to await: they are parked)
        wire.close()
        wait_until(lambda: outcomes.get("read"), timeout_s=READ_TIMEOUT_S, message="the read stopped")
        release.set()
        wait_until(lambda: outcomes.get("write"), timeout_s=READ_TIMEOUT_S, message="the write finished")
    assert outcomes == {"read": "cancelled", "write": "finished"}


def test_a_connections_produce_requests_run_beside_each_other_and_are_answered_in_order(monkeypatch):
    """Three pipelined Produce requests: the second and third start while the first waits,
    each once the one before reserved its places in its partitions' queues
    (raylog.actors.kafka.appends keeps each partition's order), the answers come in the
    order asked; a request that changes something else (ListGroups stands in for one) and a
    read (Metadata) wait until every Produce before them is answered; a Produce of a version
    throttled by delaying its answer (before KIP-219) waits for what came before it."""
    started: list = []
    done: list[int] = []
    release = {i: threading.Event() for i in range(5)}

    async def produce(ctx, header, body):
        n = body["acks"]  # (the tests' request number)
        started.append(("produce", n))
        appends.placed()  # (as the real handler, once its batches hold their places)
        while not release[n].is_set():
            await asyncio.sleep(0.01)
        done.append(n)
        return {"responses": [], "throttle_time_ms": 0}

    async def after(ctx, header, body):
        started.append(header.api_key.name)
        return (
            {"error_code": 0, "groups": []} if header.api_key == ApiKey.LIST_GROUPS else {"brokers": [], "topics": []}
        )

    monkeypatch.setitem(listener.HANDLERS, ApiKey.PRODUCE, produce)
    monkeypatch.setitem(listener.HANDLERS, ApiKey.LIST_GROUPS, after)
    monkeypatch.setitem(listener.HANDLERS, ApiKey.METADATA, after)
    monkeypatch.setattr(listener, "READS", listener.READS - {int(ApiKey.LIST_GROUPS)})
    with running(new_listener()) as port:
        wire = Wire(f"127.0.0.1:{port}")
        sent = [wire.send(ApiKey.PRODUCE, 9, {"acks": n, "timeout_ms": 1, "topic_data": []}) for n in (0, 1, 2)]
        sent.append(wire.send(ApiKey.LIST_GROUPS, 2, {}))
        sent.append(wire.send(ApiKey.METADATA, 12, metadata_body()))
        wait_until(
            lambda: started == [("produce", 0), ("produce", 1), ("produce", 2)],
            timeout_s=READ_TIMEOUT_S,
            message="all three Produce requests started",
        )
        release[2].set()
        release[1].set()
        wait_until(lambda: sorted(done) == [1, 2], timeout_s=READ_TIMEOUT_S, message="the later two done")
        time.sleep(SETTLE_S)
        assert started == [("produce", 0), ("produce", 1), ("produce", 2)]  # the others wait for the first Produce
        release[0].set()
        answers = [wire.receive()[0].correlation_id for _ in sent]
        assert answers == [h.correlation_id for h in sent]
        assert started[3:] == ["LIST_GROUPS", "METADATA"]

        held = wire.send(ApiKey.PRODUCE, 9, {"acks": 4, "timeout_ms": 1, "topic_data": []})
        old = wire.send(ApiKey.PRODUCE, 5, {"acks": 3, "timeout_ms": 1, "topic_data": []})
        wait_until(lambda: ("produce", 4) in started, timeout_s=READ_TIMEOUT_S, message="the held Produce started")
        time.sleep(SETTLE_S)
        assert ("produce", 3) not in started  # a Produce v5 waits as any change does
        release[4].set()
        release[3].set()
        assert [wire.receive()[0].correlation_id for _ in range(2)] == [held.correlation_id, old.correlation_id]
        wire.close()


def test_a_listener_that_names_no_host_binds_the_loopback_only():
    """``PLAINTEXT://:port`` binds 127.0.0.1 and advertises it (every interface only when the
    listener names 0.0.0.0); it bound 0.0.0.0, open to every network that reaches the node."""
    anywhere = Listener("PLAINTEXT", "PLAINTEXT", "", 0)
    actor = listener.KafkaListenerActor("unit", 0, None, (anywhere,), ControllerConfig())
    with running(actor) as port:
        bound = {sock.getsockname()[0] for sock in actor._servers["PLAINTEXT"].sockets}
        assert bound == {"127.0.0.1"} and actor._endpoints["PLAINTEXT"] == ("127.0.0.1", port, port)
        assert Wire(f"127.0.0.1:{port}").ask(ApiKey.API_VERSIONS, 0, {})["error_code"] == 0


def test_one_actor_serves_each_named_listener_with_its_protocol_and_knows_which_a_connection_came_on(monkeypatch):
    """Two listeners in one actor: PLAIN answers at once, SECURE (SASL_PLAINTEXT) closes a
    request sent before SASL; an answer on PLAIN lists the brokers' addresses on PLAIN only
    (the connection knows its listener), and SECURE advertises its advertised.listeners host."""
    md = {"listeners": {0: {"PLAIN": ("127.0.0.1", 9092), "SECURE": ("localhost", 9093)}, 1: {"SECURE": ("b1", 1)}}}

    async def metadata(ctx, header, body):
        brokers = [{"node_id": b, "host": h, "port": p, "rack": None} for b, (h, p) in broker_addresses(md).items()]
        return {"brokers": brokers, "topics": []}

    monkeypatch.setitem(listener.HANDLERS, ApiKey.METADATA, metadata)
    plain = Listener("PLAIN", "PLAINTEXT", "127.0.0.1", 0)
    secure = Listener("SECURE", "SASL_PLAINTEXT", "127.0.0.1", 0, advertised_host="localhost")
    actor = listener.KafkaListenerActor("unit", 0, None, (plain, secure), ControllerConfig())
    with running(actor) as plain_port:
        secure_host, secure_port, bound = actor._endpoints["SECURE"]
        assert secure_host == "localhost" and secure_port == bound != plain_port
        answer = Wire(f"127.0.0.1:{plain_port}").ask(ApiKey.METADATA, 9, metadata_body())
        assert [(b["node_id"], b["host"], b["port"]) for b in answer["brokers"]] == [(0, "127.0.0.1", 9092)]
        refused = Wire(f"127.0.0.1:{bound}")
        refused.send(ApiKey.METADATA, 9, metadata_body())
        assert refused.closed()
        refused.close()
