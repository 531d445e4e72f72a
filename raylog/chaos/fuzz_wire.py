"""Fuzz a Kafka listener with request frames mutated from real clients' captured requests
(``tests/unit/kafka/captures`` of a raylog checkout), over real loopback sockets.

A campaign is deterministic given its seed: the frames are drawn up front, in batches of
:data:`PIPELINE`, from one ``random.Random(seed)``. Each batch goes out on a fresh connection,
pipelined, followed by an ApiVersions probe; the connection's answers are read until the
probe's answer or the connection's end. A frame is then *answered*, *unanswered* (the probe
came back first: only an acks=0 Produce may be), or *closed* (the listener closed the
connection before answering it, as Kafka closes one whose frame does not decode). A batch
neither answered nor closed within :data:`BATCH_TIMEOUT_S` is *held*; it is an anomaly
(*silent*) unless one of its frames decodes as a request Kafka may hold that long (a
long-polling Fetch, an acks=all Produce, a group or transaction call that waits).

Mutations: bit flips, random bytes, truncation, random tails, extreme int16/int32 values at
random positions, a splice of two frames, another API version, a size prefix past
``socket.request.max.bytes``. A frame whose mutated API would create, delete, grow or
reconfigure topics, or delete groups, keeps its original API key: a fuzzer must not create
topics of random partition counts, give the acknowledged records' topic a retention that
deletes them, or drop other clients' committed offsets, on a shared cluster.

Bounded in frames and time, loopback only (the address must be 127.x or localhost).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
import struct
import time
from collections.abc import Callable

from raylog.kafka import codec

A = codec.ApiKey
#: Frames per connection before the probe.
PIPELINE = 8
#: How long a batch may take to be answered or closed.
BATCH_TIMEOUT_S = 10.0
#: APIs a mutated frame never becomes (see the module docstring).
EXCLUDED = frozenset(
    int(k)
    for k in (
        A.CREATE_TOPICS, A.DELETE_TOPICS, A.CREATE_PARTITIONS, A.ALTER_CONFIGS, A.INCREMENTAL_ALTER_CONFIGS,
        A.DELETE_GROUPS,
    )
)  # fmt: skip
#: APIs whose answer Kafka may hold past BATCH_TIMEOUT_S, given what the request asks.
MAY_WAIT = frozenset(
    int(k)
    for k in (
        A.PRODUCE, A.FETCH, A.JOIN_GROUP, A.SYNC_GROUP, A.HEARTBEAT, A.OFFSET_COMMIT, A.TXN_OFFSET_COMMIT,
        A.INIT_PRODUCER_ID, A.END_TXN, A.ADD_PARTITIONS_TO_TXN, A.ADD_OFFSETS_TO_TXN, A.LEAVE_GROUP,
    )
)  # fmt: skip
_SIZE = struct.Struct(">i")
_PROBE_ID = 0x7FFF_FF00
_PROBE = codec.RequestHeader(A.API_VERSIONS, 0, _PROBE_ID, "fuzz-probe")
_EXTREMES16 = (0, -1, 0x7FFF, -0x8000)
_EXTREMES32 = (0, -1, 0x7FFF_FFFF, -0x8000_0000)


def default_captures() -> str:
    """The captures directory of the raylog checkout this module runs from."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.join(root, "tests", "unit", "kafka", "captures")


def load_frames(directory: str | None = None) -> list[bytes]:
    """Every captured request frame (without its size prefix), file by file, in order, but
    those of the :data:`EXCLUDED` APIs."""
    directory = directory or default_captures()
    frames = []
    for name in sorted(os.listdir(directory)):
        if name.endswith(".txt"):
            with open(os.path.join(directory, name)) as lines:
                frames += [
                    bytes.fromhex(data)
                    for key, _, data in (line.split() for line in lines if not line.startswith("#"))
                    if int(key) not in EXCLUDED
                ]
    if not frames:
        raise FileNotFoundError(f"no captured frames in {directory}")
    return frames


def mutate(frame: bytes, corpus: list[bytes], rng: random.Random) -> bytes:
    """One mutation of ``frame``, size prefix included (see the module docstring)."""
    data = bytearray(frame)
    kind = rng.randrange(8)
    if kind == 0:
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif kind == 1:
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif kind == 2:
        del data[rng.randrange(len(data)) :]
    elif kind == 3:
        data += rng.randbytes(rng.randint(1, 64))
    elif kind == 4 and len(data) >= 8:
        at = rng.randrange(4, len(data) - 3)
        struct.pack_into(">i", data, at, rng.choice(_EXTREMES32))
    elif kind == 5 and len(data) >= 6:
        struct.pack_into(">h", data, rng.randrange(4, len(data) - 1), rng.choice(_EXTREMES16))
    elif kind == 6:
        other = rng.choice(corpus)
        data = data[: rng.randrange(len(data))] + other[rng.randrange(len(other)) :]
    elif len(data) >= 4:
        struct.pack_into(">h", data, 2, rng.randrange(-1, 20))  # another API version
    if len(data) >= 2 and struct.unpack_from(">h", data)[0] in EXCLUDED:
        data[:2] = frame[:2]
    if kind == 7 and rng.random() < 0.1:
        return _SIZE.pack(rng.choice((0, -1, 0x7FFF_FFFF, 100 << 20 | 1))) + bytes(data)
    return _SIZE.pack(len(data)) + bytes(data)


def may_wait(sent: bytes) -> bool:
    """Whether a sent frame decodes as a request Kafka may hold past BATCH_TIMEOUT_S."""
    try:
        header, _ = codec.decode_request(sent[_SIZE.size :])
    except Exception:  # noqa: BLE001 — any frame that does not decode: it may not wait
        return False
    return int(header.api_key) in MAY_WAIT


def is_acks0_produce(sent: bytes) -> bool:
    try:
        header, body = codec.decode_request(sent[_SIZE.size :])
    except Exception:  # noqa: BLE001
        return False
    return header.api_key == A.PRODUCE and body.get("acks") == 0


@dataclasses.dataclass
class FuzzReport:
    """What a campaign saw. ``silent`` frames are anomalies (see the module docstring)."""

    seed: int
    frames: int = 0
    answered: int = 0
    unanswered_acks0: int = 0
    closed: int = 0
    held: int = 0
    silent: int = 0
    #: frames with no answer while the probe came back, other than acks=0 Produces (anomalies)
    lost: int = 0
    connections: int = 0
    connections_closed: int = 0
    elapsed_s: float = 0.0

    @property
    def frames_per_s(self) -> float:
        return self.frames / self.elapsed_s if self.elapsed_s else 0.0

    @property
    def anomalies(self) -> int:
        return self.silent + self.lost


def batches(count: int, seed: int, corpus: list[bytes]) -> list[list[bytes]]:
    """The campaign's ``count`` mutated frames in batches of :data:`PIPELINE` (deterministic)."""
    rng = random.Random(seed)
    frames = [mutate(rng.choice(corpus), corpus, rng) for _ in range(count)]
    return [frames[i : i + PIPELINE] for i in range(0, count, PIPELINE)]


async def _one_batch(address: tuple[str, int], batch: list[bytes], report: FuzzReport) -> None:
    reader, writer = await asyncio.open_connection(*address)
    report.connections += 1
    probe = b"".join(bytes(b) for b in codec.encode_request(_PROBE, {}))
    answered = 0
    try:
        writer.write(b"".join(batch) + probe)
        answered = await asyncio.wait_for(_answers_before_probe(reader), BATCH_TIMEOUT_S)
    except (asyncio.IncompleteReadError, ConnectionError) as exc:
        report.connections_closed += 1
        answered = getattr(exc, "answered", 0)
        report.answered += answered
        report.closed += len(batch) - answered
        return
    except asyncio.TimeoutError:
        report.held += len(batch)
        if not any(may_wait(f) for f in batch):
            report.silent += len(batch)
        return
    finally:
        writer.close()
    acks0 = sum(is_acks0_produce(f) for f in batch)
    report.answered += answered
    report.unanswered_acks0 += len(batch) - answered
    report.lost += max(0, len(batch) - answered - acks0)


async def _answers_before_probe(reader: asyncio.StreamReader) -> int:
    """How many answers come before the probe's. Raises IncompleteReadError or
    ConnectionError (with ``answered`` set) when the connection ends first."""
    answered = 0
    try:
        while True:
            size = _SIZE.unpack(await reader.readexactly(4))[0]
            if _SIZE.unpack_from(await reader.readexactly(size))[0] == _PROBE_ID:
                return answered
            answered += 1
    except (asyncio.IncompleteReadError, ConnectionError) as exc:
        exc.answered = answered  # type: ignore[attr-defined]
        raise


async def campaign(
    address: str,
    frames: int,
    seed: int = 0,
    connections: int = 4,
    max_duration_s: float = 3600.0,
    corpus: list[bytes] | None = None,
    progress: Callable[[FuzzReport], None] | None = None,
) -> FuzzReport:
    """Send ``frames`` mutated frames to the listener at ``address`` (``"host:port"``, loopback),
    ``connections`` batches at a time, stopping early after ``max_duration_s``.

    Raises:
        ValueError: ``address`` is not a loopback address.
    """
    host, port = address.rsplit(":", 1)
    if not (host.startswith("127.") or host == "localhost"):
        raise ValueError(f"the wire fuzzer runs against loopback listeners only, not {host}")
    corpus = corpus or load_frames()
    work = batches(frames, seed, corpus)
    report = FuzzReport(seed=seed)
    began = time.monotonic()
    queue: asyncio.Queue = asyncio.Queue()
    for batch in work:
        queue.put_nowait(batch)

    async def worker() -> None:
        while not queue.empty() and time.monotonic() - began < max_duration_s:
            batch = queue.get_nowait()
            await _one_batch((host, int(port)), batch, report)
            report.frames += len(batch)
            if progress is not None and report.connections % 1000 == 0:
                progress(report)

    await asyncio.gather(*(worker() for _ in range(connections)))
    report.elapsed_s = time.monotonic() - began
    return report


def format_report(report: FuzzReport, rss: tuple[int, int] | None = None) -> str:
    lines = [
        f"fuzz-wire seed {report.seed}: {report.frames} frames in {report.elapsed_s:.1f} s "
        f"({report.frames_per_s:.0f} frames/s) on {report.connections} connections",
        f"  answered {report.answered}, unanswered acks=0 produces {report.unanswered_acks0}, "
        f"closed with their connection {report.closed} ({report.connections_closed} connections closed), "
        f"held (may wait) {report.held}",
        f"  anomalies: silent {report.silent}, lost {report.lost}",
    ]
    if rss is not None:
        lines.append(f"  listener RSS {rss[0] / 2**20:.0f} MiB -> {rss[1] / 2**20:.0f} MiB")
    return "\n".join(lines)


def listener_rss_bytes(port: int) -> int | None:
    """The resident memory of the process listening on ``port`` here (psutil), or None."""
    import psutil  # (the dev extra)

    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
            return psutil.Process(conn.pid).memory_info().rss
    return None


def run_against(
    cluster,
    frames: int,
    seed: int = 0,
    connections: int = 4,
    max_duration_s: float = 3600.0,
    records: int = 100,
    progress: Callable[[FuzzReport], None] | None = None,
) -> tuple[FuzzReport, tuple[int, int] | None, int]:
    """A campaign against ``cluster``'s first Kafka listener, with ``records`` records written
    (acks=all) to a topic of its own before: ``(report, (RSS before, after) of the listener's
    process or None, records lost)``. The topic is deleted after."""
    from raylog import Admin, Consumer, NewTopic, Producer, TopicPartition

    address = cluster.bootstrap_servers().split(",")[0]
    port = int(address.rsplit(":", 1)[1])
    topic = f"fuzz-wire-{seed}-{os.getpid()}"
    admin = Admin(cluster)
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    try:
        with Producer(cluster, acks="all") as producer:
            futures = [producer.send(topic, value=b"%d" % i) for i in range(records)]
            acked = {f.get(timeout=60).offset for f in futures}
        before = listener_rss_bytes(port)
        report = asyncio.run(campaign(address, frames, seed, connections, max_duration_s, progress=progress))
        after = listener_rss_bytes(port)
        tp = TopicPartition(topic, 0)
        with Consumer(cluster, auto_offset_reset="earliest") as consumer:
            consumer.assign([tp])
            found: set[int] = set()
            deadline = time.monotonic() + 60
            while len(found & acked) < len(acked) and time.monotonic() < deadline:
                found |= {r.offset for r in consumer.poll(timeout_ms=1000).get(tp, [])}
        rss = (before, after) if before is not None and after is not None else None
        return report, rss, len(acked - found)
    finally:
        admin.delete_topics([topic])
