"""What raylog's ACLs cost its own clients: the same workloads against a cluster without an
authorizer and one with it, in the same run, and the time a client takes to authenticate.

Set-up: a local Ray started here (the embedded default's settings), two embedded raylog
clusters of one broker each in it, each with a 1-partition topic of replication factor 1:
``open`` (no authorizer, clients anonymous) and ``acl`` (``authorizer=acl``, the client
``User:alice`` authenticated with SCRAM-SHA-512, allowed WRITE and READ on the topic, among
200 other ACLs on other topics and users, so that the check is a look-up, not an empty set).
Runs alternate between the clusters, each ``acl`` run right after its ``open`` one; the
table shows each one's best, and the ratio is the median over the rounds of each round's
``acl`` against its own ``open`` run (this 2-core machine is shared: a ratio of two bests
taken minutes apart measured the machine's drift, 0.80-1.01x for the same code), target
>= 0.95x.

1. ``send().result()``, one 100 B record at a time, 1,000 records: one produce call each,
   so the per-call check (the token, once per token, then the ACL look-up) is all there is
   to see.
2. ``send()`` of 200,000 records of 100 B then ``flush()`` (batches of the default
   ``batch_size``).
3. A fresh consumer's ``poll()`` of those 200,000 records from offset 0.
4. Authentication: a new Admin with its own credentials, from its construction until it
   holds a token (one controller call for PLAIN, two for SCRAM), per mechanism; the median
   of 20 and, for scale, a bare call to the controller.
5. Kafka clients: the ``open`` cluster's listener speaks PLAINTEXT, the ``acl`` cluster's
   SASL_SSL (TLS with a certificate of a CA made for the run by ``trustme``, SCRAM-SHA-512).
   A fresh confluent-kafka producer (librdkafka's defaults but ``linger.ms=5``, ``acks=1``)
   sends 200,000 records of 100 B and flushes; a fresh consumer reads them from the beginning
   (as ``raylog.benchmarks.kafka_bench``). Target: SASL_SSL >= 0.7x PLAINTEXT. And a fresh
   connection: a new producer until its first ``list_topics`` answer (TCP, TLS, SASL,
   metadata), median of 10.

Usage (or ``python -m raylog.benchmarks.security_bench``)::

    raylog bench security [--quick] [--dir PARENT]
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
import uuid

import raylog
from raylog import (
    ACL,
    ACLOperation,
    ACLPermissionType,
    Admin,
    Consumer,
    NewTopic,
    PatternType,
    Producer,
    ResourcePattern,
    ResourceType,
    TopicPartition,
)
from raylog.benchmarks import common, kafka_bench

TOPIC = "secured"
KAFKA_TOPIC = "kafka"  # the Kafka clients' (rows 5)
PASSWORD = "alice-secret"
ALICE = {
    "security_protocol": "SASL_PLAINTEXT",
    "sasl_mechanism": "SCRAM-SHA-512",
    "sasl_plain_username": "alice",
    "sasl_plain_password": PASSWORD,
}
OTHER_ACLS = 200


def _cluster(name: str, workdir: str, secured: bool):
    """A new cluster and the credentials of the benchmark's client there."""
    config = {
        "offsets.topic.num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "listeners": "PLAINTEXT://127.0.0.1:0",
    }
    made_by: dict[str, str] = {}
    if secured:
        config.update(
            {
                "authorizer": "acl",
                "super.users": "User:admin",
                "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
                "listeners": "SASL_SSL://127.0.0.1:0",
                "ssl.keystore.location": _keystore(workdir),
            }
        )
        made_by = {**ALICE, "sasl_plain_username": "admin", "sasl_plain_password": "admin-secret"}
    cluster = raylog.connect(
        data_dir=os.path.join(workdir, name),
        cluster_name=f"{name}-{uuid.uuid4().hex[:6]}",
        config=config,
        **made_by,
    )
    deadline = time.monotonic() + 60
    while not cluster.bootstrap_servers():  # the listener starts beside the brokers
        if time.monotonic() > deadline:
            raise common.BenchError(f"the {name} cluster's listener did not start in 60 s")
        time.sleep(0.2)
    admin = Admin(cluster)  # admin on the secured cluster (made with it)
    admin.create_topics([NewTopic(TOPIC, 1, 1), NewTopic(KAFKA_TOPIC, 1, 1)], wait_for_leaders_ms=60_000)
    if not secured:
        return cluster, {}
    admin.alter_user_scram_credentials({"alice": PASSWORD})

    def allow(operation: ACLOperation, kind: ResourceType, resource: str, user: str = "alice") -> ACL:
        return ACL(f"User:{user}", "*", operation, ACLPermissionType.ALLOW, ResourcePattern(kind, resource))

    acls = [
        allow(ACLOperation.WRITE, ResourceType.TOPIC, TOPIC),
        allow(ACLOperation.READ, ResourceType.TOPIC, TOPIC),
        allow(ACLOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, "kafka-cluster"),
    ]
    acls += [allow(op, ResourceType.TOPIC, KAFKA_TOPIC) for op in (ACLOperation.WRITE, ACLOperation.READ)]
    bench_groups = ResourcePattern(ResourceType.GROUP, "raylog-kafka-bench-", PatternType.PREFIXED)
    acls.append(ACL("User:alice", "*", ACLOperation.READ, ACLPermissionType.ALLOW, bench_groups))
    acls += [allow(ACLOperation.READ, ResourceType.TOPIC, f"t{i}", f"u{i}") for i in range(OTHER_ACLS)]
    admin.create_acls(acls)
    return cluster, ALICE


def _keystore(workdir: str) -> str:
    """A broker certificate of a CA made for the run (``ca.pem`` beside it), as PEM."""
    import trustme

    ca = trustme.CA()
    ca.cert_pem.write_to_path(os.path.join(workdir, "ca.pem"))
    path = os.path.join(workdir, "broker.pem")
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(path)
    return path


def _kafka_client(workdir: str, secured: bool) -> dict[str, str]:
    if not secured:
        return {}
    return {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": os.path.join(workdir, "ca.pem"),
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": PASSWORD,
    }


def _first_metadata_ms(bootstrap: str, client: dict[str, str], repeats: int) -> float:
    from confluent_kafka import Producer as KafkaProducer

    took = []
    for _ in range(repeats):
        start = time.perf_counter()
        producer = KafkaProducer({"bootstrap.servers": bootstrap, **client})
        producer.list_topics(TOPIC, timeout=30)
        took.append((time.perf_counter() - start) * 1000)
    return statistics.median(took)


def _one_at_a_time(cluster, credentials: dict, count: int) -> float:
    with Producer(cluster, acks=1, linger_ms=0, **credentials) as producer:
        producer.send(TOPIC, b"w").result(timeout=60)  # warm: metadata, producer id
        start = time.perf_counter()
        for _ in range(count):
            producer.send(TOPIC, b"x" * 100).result(timeout=60)
        return count / (time.perf_counter() - start)


def _batched(cluster, credentials: dict, count: int) -> float:
    value = b"y" * 100
    with Producer(cluster, acks=1, **credentials) as producer:
        producer.send(TOPIC, b"w").result(timeout=60)
        start = time.perf_counter()
        for _ in range(count):
            producer.send(TOPIC, value)
        producer.flush(timeout=120)
        return count / (time.perf_counter() - start)


def _consume(cluster, credentials: dict, count: int) -> float:
    consumer = Consumer(cluster, auto_offset_reset="earliest", **credentials)
    try:
        consumer.assign([TopicPartition(TOPIC, 0)])
        start, got = time.perf_counter(), 0
        while got < count:
            got += sum(len(batch) for batch in consumer.poll(timeout_ms=1_000).values())
            if time.perf_counter() - start > 120:
                raise common.BenchError(f"consumed {got} of {count} records in 120 s")
        return got / (time.perf_counter() - start)
    finally:
        consumer.close()


def _confluent_produce(cluster, client: dict[str, str], values: list[bytes]) -> float:
    seconds, _ = kafka_bench.confluent_produce(cluster.bootstrap_servers(), KAFKA_TOPIC, values, 120, False, client)
    return len(values) / seconds


def _confluent_consume(cluster, client: dict[str, str], count: int) -> float:
    seconds, _, _ = kafka_bench.confluent_consume(cluster.bootstrap_servers(), KAFKA_TOPIC, 1, count, 120, client)
    return count / seconds


def _authentication_ms(cluster, mechanism: str, repeats: int) -> float:
    settings = {**ALICE, "sasl_mechanism": mechanism}
    took = []
    for _ in range(repeats):
        start = time.perf_counter()
        Admin(cluster, **settings)
        took.append((time.perf_counter() - start) * 1000)
    return statistics.median(took)


def _bare_call_ms(cluster, repeats: int) -> float:
    import ray

    took = []
    for _ in range(repeats):
        start = time.perf_counter()
        ray.get(cluster.controller.start.remote())
        took.append((time.perf_counter() - start) * 1000)
    return statistics.median(took)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = common.bench_parser(__doc__, "fewer records and repeats (a smoke run)", prog)
    args = parser.parse_args(argv)
    common.require("confluent_kafka", "trustme")
    repeats = 2 if args.quick else 5
    sync_count, count = (200, 20_000) if args.quick else (1_000, 200_000)
    with contextlib.ExitStack() as stack:
        common.start_local_ray(stack)
        workdir = common.temp_workdir(stack, "raylog-security-", args.dir)
        clusters = {"open": _cluster("open", workdir, False), "acl": _cluster("acl", workdir, True)}
        runs: dict[tuple[str, str], list[float]] = {}
        values = [b"z" * 100] * count
        for _ in range(repeats):
            for row, run, n in (
                ("send().result() rec/s", _one_at_a_time, sync_count),
                ("send() + flush rec/s", _batched, count),
                ("poll() rec/s", _consume, count),
                ("confluent produce rec/s", _confluent_produce, values),
                ("confluent consume rec/s", _confluent_consume, count),
            ):
                for name, (cluster, credentials) in clusters.items():
                    client = _kafka_client(workdir, name == "acl") if row.startswith("confluent") else credentials
                    runs.setdefault((row, name), []).append(run(cluster, client, n))
        results: dict[str, object] = {f"{row} {name}": max(rates) for (row, name), rates in runs.items()}
        print(f"{'workload':<26}{'open':>14}{'acl':>14}{'acl/open':>10}")
        print(f"(rates: the best of {repeats} rounds; acl/open: the median of each round's ratio)")
        for row in dict.fromkeys(row for row, _ in runs):
            opened, secured = runs[(row, "open")], runs[(row, "acl")]
            ratio = statistics.median(a / o for a, o in zip(secured, opened, strict=True))
            results[f"{row} acl/open"] = ratio
            print(f"{row:<26}{max(opened):>14,.0f}{max(secured):>14,.0f}{ratio:>9.2f}x")
        cluster = clusters["acl"][0]
        bare = _bare_call_ms(cluster, 20)
        print(f"\nauthentication of a new client (median of 20; a bare controller call: {bare:.2f} ms)")
        for mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
            ms = _authentication_ms(cluster, mechanism, 20)
            print(f"  {mechanism:<15}{ms:>8.2f} ms  ({ms / bare:.1f}x a bare call)")
            results[f"authentication ms {mechanism}"] = ms
        results["bare controller call ms"] = bare
        print("\na fresh confluent-kafka connection until its first metadata answer (median of 10)")
        for name, (cluster, _) in clusters.items():
            ms = _first_metadata_ms(cluster.bootstrap_servers(), _kafka_client(workdir, name == "acl"), 10)
            protocol = "SASL_SSL" if name == "acl" else "PLAINTEXT"
            print(f"  {protocol:<15}{ms:>8.2f} ms")
            results[f"first metadata ms {protocol}"] = ms
        if args.json:
            common.dump_json(args.json, results)
        for cluster, _ in clusters.values():
            cluster.shutdown()
    return 0


if __name__ == "__main__":
    common.run_script(main)
