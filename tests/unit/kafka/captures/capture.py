"""How the captured frames in this directory were made (run by hand, not by the tests).

    .venv/bin/python tests/unit/kafka/captures/capture.py

runs a minimal Kafka-speaking TCP server on 127.0.0.1 (one broker, every topic asked for
exists with one empty partition led by it, a consumer group whose only member is its leader)
that answers with the codec, and points confluent-kafka (librdkafka), kafka-python, aiokafka
and kcat at it. The first three each produce two keyed records with a header, then consume
in a group (join, sync, offset fetch, list offsets, fetch), commit and leave;
confluent-kafka's admin creates a topic; kcat lists metadata, produces, and consumes to the
end without a group. Every request frame each client sends is written, as hex, to
``<client>.txt`` here (one line per distinct api key and version: ``api_key api_version
hex``, the frame without its 4-byte size prefix). test_codec_captures.py decodes them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import subprocess
import sys
import threading
import time

from raylog.kafka import codec

HERE = os.path.dirname(os.path.abspath(__file__))
TOPIC = "captured"
GROUP = "capture-group"
MEMBER = "member-1"

log = logging.getLogger("capture")


class Server:
    """A one-broker Kafka server good enough to get clients through produce and a group fetch."""

    def __init__(self):
        self.frames: dict[str, dict[tuple[int, int], bytes]] = {}
        self.client = "none"
        self.port = 0
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._run, daemon=True).start()
        self.ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                key = struct.unpack_from(">hh", frame)
                self.frames.setdefault(self.client, {}).setdefault(key, frame)
                answer = await self._answer(frame)
                if answer is not None:
                    writer.writelines(answer)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _answer(self, frame: bytes):
        try:
            header, body = codec.decode_request(frame)
        except codec.UnsupportedVersionError as exc:
            return codec.error_response(exc.header, 35)
        k = codec.ApiKey
        key = header.api_key
        if key == k.API_VERSIONS:
            return codec.encode_response(header, {"api_keys": codec.supported_api_keys()})
        if key == k.METADATA:
            names = [t["name"] for t in body["topics"] or ()] or [TOPIC]
            partition = {
                "partition_index": 0,
                "leader_id": 0,
                "leader_epoch": 0,
                "replica_nodes": [0],
                "isr_nodes": [0],
            }
            return codec.encode_response(
                header,
                {
                    "brokers": [{"node_id": 0, "host": "127.0.0.1", "port": self.port}],
                    "cluster_id": "capture",
                    "controller_id": 0,
                    "topics": [{"name": n, "partitions": [partition]} for n in names],
                },
            )
        if key == k.PRODUCE and body["acks"] == 0:
            return None
        if key == k.FETCH:
            await asyncio.sleep(min(body["max_wait_ms"], 200) / 1000)
            empty = {"high_watermark": 0, "last_stable_offset": 0, "log_start_offset": 0}
            responses = [
                {
                    "topic": t["topic"],
                    "partitions": [{"partition_index": p["partition"], **empty} for p in t["partitions"]],
                }
                for t in body["topics"]
            ]
            return codec.encode_response(header, {"responses": responses})
        if key == k.LIST_OFFSETS:
            topics = [
                {
                    "name": t["name"],
                    "partitions": [{"partition_index": p["partition_index"], "offset": 0} for p in t["partitions"]],
                }
                for t in body["topics"]
            ]
            return codec.encode_response(header, {"topics": topics})
        if key == k.FIND_COORDINATOR:
            me = {"node_id": 0, "host": "127.0.0.1", "port": self.port}
            coordinators = [{"key": c, **me} for c in body["coordinator_keys"]]
            return codec.encode_response(header, {**me, "coordinators": coordinators})
        if key == k.JOIN_GROUP:
            protocol = body["protocols"][0]
            return codec.encode_response(
                header,
                {
                    "generation_id": 1,
                    "protocol_type": body["protocol_type"],
                    "protocol_name": protocol["name"],
                    "leader": MEMBER,
                    "member_id": MEMBER,
                    "members": [{"member_id": MEMBER, "metadata": protocol["metadata"]}],
                },
            )
        if key == k.SYNC_GROUP:
            assignment = body["assignments"][0]["assignment"] if body["assignments"] else b""
            return codec.encode_response(
                header,
                {
                    "protocol_type": body["protocol_type"],
                    "protocol_name": body["protocol_name"],
                    "assignment": assignment,
                },
            )
        if key == k.INIT_PRODUCER_ID:
            return codec.encode_response(header, {"producer_id": 1000, "producer_epoch": 0})
        # Everything else succeeds: a response saying error 0 for everything the request named.
        return codec.error_response(header, 0, body)


def confluent(port: int) -> None:
    import confluent_kafka
    from confluent_kafka.admin import AdminClient, NewTopic

    servers = f"127.0.0.1:{port}"
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": servers, "client.id": "capture-confluent", "enable.idempotence": True}
    )
    producer.produce(TOPIC, key=b"k1", value=b"v1", headers=[("h", b"1")])
    producer.produce(TOPIC, key=b"k2", value=b"v2")
    assert producer.flush(10) == 0
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": servers, "client.id": "capture-confluent", "group.id": GROUP, "enable.auto.commit": False}
    )
    consumer.subscribe([TOPIC])
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline and not consumer.assignment():
        consumer.poll(0.2)
    consumer.poll(0.5)
    consumer.commit(offsets=[confluent_kafka.TopicPartition(TOPIC, 0, 2)], asynchronous=False)
    consumer.close()
    admin = AdminClient({"bootstrap.servers": servers, "client.id": "capture-confluent"})
    for future in admin.create_topics([NewTopic("created", 3, 1)]).values():
        future.result(10)


def kafka_python(port: int) -> None:
    import kafka

    servers = f"127.0.0.1:{port}"
    producer = kafka.KafkaProducer(bootstrap_servers=servers, client_id="capture-kafka-python")
    producer.send(TOPIC, key=b"k1", value=b"v1", headers=[("h", b"1")]).get(timeout=10)
    producer.send(TOPIC, key=b"k2", value=b"v2").get(timeout=10)
    producer.close()
    consumer = kafka.KafkaConsumer(
        TOPIC, bootstrap_servers=servers, client_id="capture-kafka-python", group_id=GROUP, enable_auto_commit=False
    )
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline and not consumer.assignment():
        consumer.poll(200)
    consumer.poll(500)
    consumer.commit({kafka.TopicPartition(TOPIC, 0): kafka.OffsetAndMetadata(2, None, -1)})
    consumer.close()


def aiokafka_client(port: int) -> None:
    import aiokafka
    from aiokafka.structs import OffsetAndMetadata, TopicPartition

    async def run() -> None:
        servers = f"127.0.0.1:{port}"
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=servers, client_id="capture-aiokafka")
        await producer.start()
        await producer.send_and_wait(TOPIC, key=b"k1", value=b"v1", headers=[("h", b"1")])
        await producer.send_and_wait(TOPIC, key=b"k2", value=b"v2")
        await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(
            TOPIC, bootstrap_servers=servers, client_id="capture-aiokafka", group_id=GROUP, enable_auto_commit=False
        )
        await consumer.start()
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline and not consumer.assignment():
            await consumer.getmany(timeout_ms=200)
        await consumer.getmany(timeout_ms=500)
        await consumer.commit({TopicPartition(TOPIC, 0): OffsetAndMetadata(2, "")})
        await consumer.stop()

    asyncio.run(run())


def kcat(port: int) -> None:
    """kcat (Debian's, on its own librdkafka): metadata, produce with a key and header, consume to the end."""
    common = ["kcat", "-b", f"127.0.0.1:{port}", "-X", "client.id=capture-kcat"]
    subprocess.run([*common, "-L"], check=True, capture_output=True, timeout=30)
    produce = [*common, "-P", "-t", TOPIC, "-K:", "-H", "h=1"]
    subprocess.run(produce, input=b"k1:v1\nk2:v2\n", check=True, capture_output=True, timeout=30)
    subprocess.run([*common, "-C", "-t", TOPIC, "-o", "beginning", "-e"], check=True, capture_output=True, timeout=30)


CLIENTS = {"confluent_kafka": confluent, "kafka_python": kafka_python, "aiokafka": aiokafka_client, "kcat": kcat}


def main(names: list[str]) -> None:
    logging.basicConfig(level=logging.WARNING)
    server = Server()
    server.start()
    for name in names or CLIENTS:
        server.client = name
        CLIENTS[name](server.port)
        frames = server.frames.get(name, {})
        path = os.path.join(HERE, f"{name}.txt")
        with open(path, "w") as out:
            out.write(f"# Request frames {name} sent to capture.py's server: api_key api_version hex\n")
            for (key, version), frame in sorted(frames.items()):
                out.write(f"{key} {version} {frame.hex()}\n")
        log.warning("%s: %d frames -> %s", name, len(frames), path)


if __name__ == "__main__":
    main(sys.argv[1:])
