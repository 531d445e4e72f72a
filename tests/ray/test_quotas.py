"""Client byte-rate quotas against the session's cluster: leaders answer a client over its
quota at once with a throttle time and the client holds back (KIP-219), other clients go on
unthrottled, and quotas survive controller and replica restarts; the CLI alters and
describes them.

Timing assertions are loose bounds with the throttle time reported as their yardstick.
Kafka's rate counts a burst over at least ten 1-second windows, so a client is throttled
once it moves more than ~10 s of its quota.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
import ray

from raylog import Consumer, Producer, TopicPartition
from raylog.coordination.quotas import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, QUOTA_KEYS
from raylog.errors import InvalidConfigError, RaylogError
from tests.helpers import wait_until

PREFIX = "quota-test-"
QUOTA_BYTES_PER_S = 200_000
RECORD = b"x" * 10_000
#: ~3 MiB: 1 MiB over the ~10 s burst a 200 KB/s quota allows.
RECORD_COUNT = 300
#: One record of ~100 KB at this quota, from a client not seen before (its rate counted over
#: 10 s), is throttled for ~5.4 s: (10,000 - 6,500) / 6,500 x 10 s.
BIG_RECORD = b"b" * 100_000
BIG_RECORD_QUOTA = 6_500


@pytest.fixture(autouse=True)
def remove_quotas(admin):
    """Every quota a test here set is removed afterwards (the cluster is shared)."""
    yield
    mine = [c for c in admin.describe_client_quotas() if c is None or c.startswith(PREFIX)]
    if mine:
        admin.alter_client_quotas({c: dict.fromkeys(QUOTA_KEYS) for c in mine})


def client_id() -> str:
    return f"{PREFIX}{uuid.uuid4().hex[:8]}"


def produce(cluster, name: str, client: str) -> int:
    """Send RECORD_COUNT records as ``client``, then one more once they are acknowledged: the
    throttle time of that last one (its rate is measured after all the others; the others'
    answers come in any order, each at once with its own throttle time)."""
    with Producer(cluster, client_id=client, linger_ms=20) as producer:
        futures = [producer.send(name, RECORD) for _ in range(RECORD_COUNT)]
        producer.flush()
        assert all(f.result(timeout=60).offset >= 0 for f in futures)
        producer.send(name, RECORD).result(timeout=60)
        return producer.throttle_time_ms


def consume(cluster, name: str, client: str) -> int:
    """Read the RECORD_COUNT + 1 records of :func:`produce` (partition 0) as ``client``: the
    last throttle time."""
    consumer = Consumer(cluster, client_id=client, max_partition_fetch_bytes=1 << 20, auto_offset_reset="earliest")
    consumer.assign([TopicPartition(name, 0)])
    read = 0
    deadline = time.monotonic() + 60
    while read < RECORD_COUNT + 1 and time.monotonic() < deadline:
        read += sum(len(records) for records in consumer.poll(timeout_ms=1000).values())
    consumer.close()
    assert read == RECORD_COUNT + 1
    return consumer.throttle_time_ms


def test_producer_over_its_quota_is_throttled_and_another_client_is_not(cluster, admin, topic):
    """A producer sending ~3 MiB at a 200 KB/s quota is throttled; a producer with another
    client id on the same leader is not."""
    name = topic()
    slow = client_id()
    admin.alter_client_quotas({slow: {PRODUCER_BYTE_RATE: QUOTA_BYTES_PER_S}})
    assert produce(cluster, name, slow) > 0
    assert produce(cluster, name, client_id()) == 0


def test_consumer_over_its_quota_is_throttled_and_another_client_is_not(cluster, admin, topic):
    """A consumer reading ~3 MiB at a 200 KB/s quota is throttled; a consumer with another
    client id reads the same records unthrottled, and the producer is not limited by a
    consumer quota."""
    name = topic()
    slow = client_id()
    admin.alter_client_quotas({slow: {CONSUMER_BYTE_RATE: QUOTA_BYTES_PER_S}})
    assert produce(cluster, name, slow) == 0
    assert consume(cluster, name, slow) > 0
    assert consume(cluster, name, client_id()) == 0


def test_a_throttled_producer_is_answered_at_once_and_holds_back(cluster, admin, topic):
    """KIP-219: the leader answers a produce over the client's quota at once, with the throttle
    time (no thread of its waits out the throttle); the producer then sends that partition
    nothing until the time has passed."""
    name = topic()
    slow = client_id()
    admin.alter_client_quotas({slow: {PRODUCER_BYTE_RATE: BIG_RECORD_QUOTA}})
    with Producer(cluster, client_id=slow) as producer:
        # A first record far below the quota: the producer's first call (metadata, the leader's
        # actor, a worker warming up on a loaded machine) is not what is measured.
        producer.send(name, b"w").result(timeout=60)
        assert producer.throttle_time_ms == 0
        started = time.monotonic()
        producer.send(name, BIG_RECORD).result(timeout=60)
        answered = time.monotonic()
        throttle_s = producer.throttle_time_ms / 1000
        assert throttle_s > 1, "not throttled"
        assert answered - started < throttle_s, f"answered after {answered - started:.1f} s, throttle {throttle_s} s"
        producer.send(name, b"next").result(timeout=60)
        assert time.monotonic() - answered >= throttle_s * 0.9, "sent before the throttle time passed"


def test_a_quota_is_in_force_on_the_leaders_when_its_change_is_answered(cluster, admin, topic):
    """AlterClientQuotas answers once the live replicas hold the new quotas: a client that
    starts right after meets its quota on its first request (the push was in the background
    before, and a consumer's first fetch could beat it on a loaded machine)."""
    name = topic(num_partitions=2)
    leaders = [cluster.metadata(refresh=True).leader(TopicPartition(name, p)) for p in range(2)]
    before = [ray.get(leader.state.remote())["client_quotas_version"] for leader in leaders]
    admin.alter_client_quotas({client_id(): {CONSUMER_BYTE_RATE: BIG_RECORD_QUOTA}})
    after = [ray.get(leader.state.remote())["client_quotas_version"] for leader in leaders]
    assert all(a > b for a, b in zip(after, before, strict=True)), (before, after)


def test_a_throttled_consumer_gets_its_records_at_once_and_holds_back(cluster, admin, topic):
    """KIP-219 for fetches: the records over the consumer's quota come at once with the
    throttle time; the consumer fetches that partition again only once it has passed."""
    name = topic()
    slow = client_id()
    with Producer(cluster) as producer:
        producer.send(name, BIG_RECORD, partition=0).result(timeout=60)
    admin.alter_client_quotas({slow: {CONSUMER_BYTE_RATE: BIG_RECORD_QUOTA}})
    consumer = Consumer(cluster, client_id=slow, auto_offset_reset="earliest")
    consumer.assign([TopicPartition(name, 0)])
    try:
        started = time.monotonic()
        got = wait_until(lambda: consumer.poll(timeout_ms=100).get(TopicPartition(name, 0)), timeout_s=60)
        answered = time.monotonic()
        throttle_s = consumer.throttle_time_ms / 1000
        assert [r.value for r in got] == [BIG_RECORD]
        assert throttle_s > 1, "not throttled"
        assert answered - started < throttle_s, f"answered after {answered - started:.1f} s, throttle {throttle_s} s"
        with Producer(cluster) as producer:
            producer.send(name, b"next", partition=0).result(timeout=60)
        got = wait_until(lambda: consumer.poll(timeout_ms=100).get(TopicPartition(name, 0)), timeout_s=60)
        assert [r.value for r in got] == [b"next"]
        assert time.monotonic() - answered >= throttle_s * 0.9, "fetched before the throttle time passed"
    finally:
        consumer.close()


def test_quotas_survive_restarts(cluster, admin, topic):
    """After the controller and the leader replica restart, the leader still holds the client
    to its quota."""
    name = topic()
    slow = client_id()
    quotas = {slow: {PRODUCER_BYTE_RATE: BIG_RECORD_QUOTA}}
    admin.alter_client_quotas(quotas)
    ray.kill(cluster.controller, no_restart=False)
    wait_until(lambda: _quotas_or_none(admin) == quotas, timeout_s=60, message="controller back with its quotas")
    leader = cluster.metadata(refresh=True).leader(TopicPartition(name, 0))
    pid = ray.get(leader.state.remote())["pid"]
    ray.kill(leader, no_restart=False)
    wait_until(lambda: _state_or_none(leader).get("pid") not in (None, pid), timeout_s=60, message="restarted")
    # The controller pushes the quotas to a replica that Ray restarted once it reports itself.
    wait_until(lambda: _state_or_none(leader).get("client_quotas_version", -1) >= 0, timeout_s=30)
    with Producer(cluster, client_id=slow) as producer:
        producer.send(name, BIG_RECORD).result(timeout=60)
        assert producer.throttle_time_ms > 0


def test_bad_quotas_are_refused_and_change_nothing(admin):
    """A negative rate, an unknown quota or an empty client id is refused as a whole."""
    good = client_id()
    for bad in ({good: {PRODUCER_BYTE_RATE: -1.0}}, {good: {"request_percentage": 5.0}}, {"": {PRODUCER_BYTE_RATE: 1}}):
        with pytest.raises(InvalidConfigError):
            admin.alter_client_quotas({good: {CONSUMER_BYTE_RATE: 5.0}, **bad})
    assert good not in admin.describe_client_quotas()


def test_cli_alters_and_describes_quotas(run):
    """`raylog quotas alter` sets and deletes quotas of a client id and the default;
    `raylog quotas describe` shows them (text and JSON); usage errors exit 2."""
    client = client_id()
    code, out, _ = run(
        "quotas", "alter", "--client-id", client, "--producer-byte-rate", "1e6", "--consumer-byte-rate", "2000"
    )
    assert code == 0 and "producer_byte_rate=1e+06" in out
    assert run("quotas", "alter", "--default", "--consumer-byte-rate", "1e12")[0] == 0
    code, out, _ = run("quotas", "describe", "--json")
    described = {entry["client_id"]: entry for entry in json.loads(out)}
    assert described[client] == {"client_id": client, PRODUCER_BYTE_RATE: 1e6, CONSUMER_BYTE_RATE: 2000.0}
    assert described[None] == {"client_id": None, CONSUMER_BYTE_RATE: 1e12}
    assert run("quotas", "alter", "--client-id", client, "--delete-producer-byte-rate")[0] == 0
    assert run("quotas", "alter", "--default", "--delete-consumer-byte-rate")[0] == 0
    code, out, _ = run("quotas", "describe")
    line = next(line for line in out.splitlines() if client in line)
    assert line.split()[1:] == ["-", "2000"]
    assert "<default>" not in out
    assert run("quotas", "alter", "--client-id", client)[0] == 2
    assert run("quotas", "alter", "--default", "--producer-byte-rate", "5", "--delete-producer-byte-rate")[0] == 2
    assert run("quotas", "alter", "--default", "--producer-byte-rate", "-5")[0] == 2
    assert run("quotas", "alter", "--producer-byte-rate", "5")[0] == 2


def _quotas_or_none(admin):
    try:
        return {c: q for c, q in admin.describe_client_quotas().items() if c is None or c.startswith(PREFIX)}
    except RaylogError:
        return None


def _state_or_none(replica) -> dict:
    try:
        return ray.get(replica.state.remote(), timeout=10)
    except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
        return {}
