"""Producer ids and transactions over raylog's Kafka listener
(raylog/actors/kafka/transactions.py).

First the handlers themselves, called in this process with a BrokerContext on the Kafka
cluster's controller and requests that go through raylog's codec both ways: idempotent and
transactional InitProducerId (KIP-360's check), AddPartitionsToTxn's all-or-nothing
errors, a fenced epoch, and EndTxn keeping the epoch a Kafka client goes on with.

Then librdkafka (confluent-kafka) against the listeners: a transactional producer commits
a transaction, aborts one and commits another; raylog's Consumer and a confluent-kafka
consumer, both read_committed, see exactly the committed records, in order. A
consume-transform-produce loop commits its group's offsets with send_offsets_to_transaction.
A second producer with the same transactional.id fences the first. A plain idempotent
producer gets a producer id and delivers. kafka-python's and aiokafka's transactional
producers commit and abort too.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
import uuid

import pytest

from raylog import TopicPartition, errors
from raylog.actors.kafka import transactions
from raylog.actors.kafka.context import BrokerContext
from raylog.common.names import TRANSACTION_TOPIC
from raylog.kafka import codec
from tests.helpers import wait_until

#: A bound on what one client call or read may take (not a measure).
DEADLINE_S = 60.0

K = codec.ApiKey
# Kafka's codes, as the responses carry them.
NONE, UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST = 0, 3, 42
COORDINATOR_NOT_AVAILABLE = 15
OPERATION_NOT_ATTEMPTED, PRODUCER_FENCED = 55, 90


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def handle(kafka_cluster):
    """``handle(api_key, version, body)`` -> the response body, as a client decodes it: the
    request encoded and decoded by the codec, answered by the handler with a BrokerContext
    of the Kafka cluster, the answer encoded and decoded again."""
    broker_id = min(kafka_cluster.metadata(refresh=True).brokers)
    loop = asyncio.new_event_loop()
    ctx = BrokerContext(kafka_cluster.cluster_name, broker_id, kafka_cluster.controller)

    def run(api_key: codec.ApiKey, version: int, body: dict) -> dict:
        """Asked again, as clients do, while the answer has a retriable error (a coordinator
        starting, a transaction completing)."""
        return wait_until(
            lambda: _unless_retriable(once(api_key, version, body)),
            timeout_s=DEADLINE_S,
            message=f"a final answer to {api_key.name}",
        )

    def once(api_key: codec.ApiKey, version: int, body: dict) -> dict:
        header = codec.RequestHeader(api_key, version, 7, "handler-test")
        frame = b"".join(bytes(b) for b in codec.encode_request(header, body))
        decoded_header, decoded = codec.decode_request(frame[4:])
        answer = loop.run_until_complete(transactions.HANDLERS[api_key](ctx, decoded_header, decoded))
        response = b"".join(bytes(b) for b in codec.encode_response(decoded_header, answer))
        correlation_id, body = codec.decode_response(api_key, version, response[4:])
        assert correlation_id == 7
        return body

    run.once = once  # asked once, whatever the answer
    yield run
    loop.close()


def _codes(value) -> list[int]:
    """Every error code in a response body."""
    if isinstance(value, list):
        return [c for item in value for c in _codes(item)]
    if isinstance(value, dict):
        return [c for k, v in value.items() for c in ([v] if k.endswith("error_code") else _codes(v))]
    return []


#: What a Kafka client asks again after: a coordinator loading, not there yet, moved; a
#: transaction completing.
RETRIED = frozenset(
    e.code
    for e in (
        errors.CoordinatorLoadInProgressError,
        errors.CoordinatorNotAvailableError,
        errors.NotCoordinatorError,
        errors.ConcurrentTransactionsError,
    )
)


def _unless_retriable(body: dict) -> dict | None:
    return None if RETRIED.intersection(_codes(body)) else body


def init_txn(handle, tid: str, version: int = 4, producer_id: int = -1, epoch: int = -1) -> dict:
    return handle(
        K.INIT_PRODUCER_ID,
        version,
        {
            "transactional_id": tid,
            "transaction_timeout_ms": 60_000,
            "producer_id": producer_id,
            "producer_epoch": epoch,
        },
    )


def add_partitions(handle, tid: str, pid: int, epoch: int, partitions: dict[str, list[int]]) -> dict:
    answer = handle(
        K.ADD_PARTITIONS_TO_TXN,
        3,
        {
            "v3_and_below_transactional_id": tid,
            "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in partitions.items()],
        },
    )
    return {
        (t["name"], p["partition_index"]): p["partition_error_code"]
        for t in answer["results_by_topic_v3_and_below"]
        for p in t["results_by_partition"]
    }


def end(handle, tid: str, pid: int, epoch: int, commit: bool) -> int:
    body = {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "committed": commit}
    return handle(K.END_TXN, 3, body)["error_code"]


def test_init_producer_id_without_a_transactional_id_gives_fresh_ids_at_epoch_0(handle):
    answers = [
        handle(K.INIT_PRODUCER_ID, v, {"transactional_id": None, "transaction_timeout_ms": 1}) for v in (0, 2, 4)
    ]
    assert [(a["error_code"], a["producer_epoch"]) for a in answers] == [(NONE, 0)] * 3
    ids = [a["producer_id"] for a in answers]
    assert len(set(ids)) == 3 and min(ids) >= 0
    # KIP-360: an idempotent producer naming its id gets a new one, as from Kafka.
    again = handle(K.INIT_PRODUCER_ID, 4, {"transactional_id": None, "producer_id": ids[0], "producer_epoch": 0})
    assert again["error_code"] == NONE and again["producer_id"] not in ids


def test_transactional_init_bumps_the_epoch_and_kip_360_checks_the_caller(handle):
    tid = fresh("tx-init")
    first = init_txn(handle, tid)
    pid = first["producer_id"]
    assert (first["error_code"], first["producer_epoch"]) == (NONE, 0)
    second = init_txn(handle, tid, producer_id=pid, epoch=0)  # the holder re-registers
    assert (second["error_code"], second["producer_id"], second["producer_epoch"]) == (NONE, pid, 1)
    stale = init_txn(handle, tid, producer_id=pid, epoch=0)  # the fenced instance
    assert (stale["error_code"], stale["producer_id"], stale["producer_epoch"]) == (PRODUCER_FENCED, -1, -1)
    assert init_txn(handle, tid, version=2)["producer_epoch"] == 2  # no id given: any instance
    assert init_txn(handle, "")["error_code"] == INVALID_REQUEST


def test_add_partitions_is_all_or_nothing_and_fenced_epochs_are_refused(handle, kafka_topic):
    topic = kafka_topic(num_partitions=2)
    tid = fresh("tx-add")
    first = init_txn(handle, tid)
    pid = first["producer_id"]
    assert add_partitions(handle, tid, pid, 0, {topic: [0, 7], "no-such-topic": [0]}) == {
        (topic, 0): OPERATION_NOT_ATTEMPTED,
        (topic, 7): UNKNOWN_TOPIC_OR_PARTITION,
        ("no-such-topic", 0): UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert add_partitions(handle, tid, pid, 0, {topic: [0, 1]}) == {(topic, 0): NONE, (topic, 1): NONE}
    init_txn(handle, tid)  # a new instance: epoch 1, the open transaction aborted
    assert add_partitions(handle, tid, pid, 0, {topic: [0]}) == {(topic, 0): PRODUCER_FENCED}
    assert end(handle, tid, pid, 0, True) == PRODUCER_FENCED


def test_end_txn_keeps_the_epoch_the_kafka_client_goes_on_with(handle, kafka_topic):
    """EndTxn v0-3 answers no epoch: after a commit and an abort the same producer id and
    epoch open the next transaction (raylog's own producers get a bumped epoch instead)."""
    topic = kafka_topic()
    tid = fresh("tx-end")
    pid = init_txn(handle, tid)["producer_id"]
    for commit in (True, False, True):
        assert add_partitions(handle, tid, pid, 0, {topic: [0]}) == {(topic, 0): NONE}
        assert end(handle, tid, pid, 0, commit) == NONE
    assert end(handle, tid, pid, 0, True) == NONE  # a retry of the last end, or an empty one


def commit_offsets_in_a_transaction(handle, topic: str, group: str) -> None:
    """A Kafka client's transaction of offsets only: AddOffsetsToTxn, TxnOffsetCommit
    (partition 0 at 5 with metadata, 1 at 9 without), EndTxn(commit); each answered 0."""
    tid = fresh("tx-offsets")
    pid = init_txn(handle, tid)["producer_id"]
    added = handle(
        K.ADD_OFFSETS_TO_TXN, 3, {"transactional_id": tid, "producer_id": pid, "producer_epoch": 0, "group_id": group}
    )
    assert added["error_code"] == NONE
    committed = handle(
        K.TXN_OFFSET_COMMIT,
        3,
        {
            "transactional_id": tid,
            "group_id": group,
            "producer_id": pid,
            "producer_epoch": 0,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": 0, "committed_offset": 5, "committed_metadata": "m"},
                        {"partition_index": 1, "committed_offset": 9, "committed_metadata": None},
                    ],
                }
            ],
        },
    )
    assert [(p["partition_index"], p["error_code"]) for p in committed["topics"][0]["partitions"]] == [(0, 0), (1, 0)]
    assert end(handle, tid, pid, 0, True) == NONE


def test_offsets_of_a_transaction_count_once_it_commits_and_after_a_reload(
    handle, kafka_topic, kafka_admin, kafka_cluster
):
    """The offsets are the group's after the commit (the marker kept the epoch: the group
    coordinator decides that epoch's offsets); a coordinator that reloads its partition
    (its replica restarted) finds them committed, not pending."""
    import ray

    from raylog.common.names import OFFSETS_TOPIC

    topic, group = kafka_topic(num_partitions=2), fresh("g")
    commit_offsets_in_a_transaction(handle, topic, group)
    expected = {TopicPartition(topic, 0): (5, "m"), TopicPartition(topic, 1): (9, "")}

    def offsets() -> dict:
        return {tp: (o.offset, o.metadata) for tp, o in kafka_admin.list_consumer_group_offsets(group).items()}

    assert offsets() == expected
    replicas = ray.get(kafka_cluster.controller.replica_handles.remote(OFFSETS_TOPIC), timeout=DEADLINE_S)
    for replica in replicas.values():
        ray.kill(replica, no_restart=False)
    assert offsets() == expected  # (the Admin retries while the coordinator restarts and loads)


# --- librdkafka ---------------------------------------------------------------------------


def producer(bootstrap: str, **config):
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, **config})


def produce_all(p, topic: str, values: list[bytes]) -> None:
    """Produce ``values`` to partition 0 of ``topic`` and wait until each is delivered."""
    errors = []
    for value in values:
        p.produce(topic, value, partition=0, on_delivery=lambda err, _msg: err and errors.append(err))
    assert p.flush(DEADLINE_S) == 0 and not errors, errors


def confluent_read(bootstrap: str, topic: str, count: int, **config) -> list[bytes]:
    """The first ``count`` values of partition 0 of ``topic`` read by a confluent consumer
    (read_committed unless ``config`` says otherwise)."""
    from confluent_kafka import Consumer as KafkaConsumer
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    consumer = KafkaConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": fresh("reader"),
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            **config,
        }
    )
    try:
        consumer.assign([KafkaTopicPartition(topic, 0, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(values) < count:
            assert time.monotonic() < deadline, f"read only {values}"
            message = consumer.poll(1.0)
            if message is None:
                continue
            assert message.error() is None, message.error()
            values.append(message.value())
        return values
    finally:
        consumer.close()


def test_confluent_transactions_commit_and_abort_as_read_committed_readers_see(bootstrap, kafka_topic, read_back):
    topic = kafka_topic()
    p = producer(bootstrap, **{"transactional.id": fresh("tx-client"), "transaction.timeout.ms": 60_000})
    p.init_transactions(DEADLINE_S)
    batches = [
        ([b"c1-a", b"c1-b"], True),
        ([b"aborted-a", b"aborted-b", b"aborted-c"], False),
        ([b"c2-a"], True),
        ([b"aborted-d"], False),
        ([b"c3-a", b"c3-b"], True),
    ]
    for values, commit in batches:
        p.begin_transaction()
        produce_all(p, topic, values)
        if commit:
            p.commit_transaction(DEADLINE_S)
        else:
            p.abort_transaction(DEADLINE_S)
    committed = [v for values, commit in batches if commit for v in values]
    assert [r.value for r in read_back(topic)] == committed  # raylog's Consumer, read_committed
    assert confluent_read(bootstrap, topic, len(committed)) == committed
    everything = [v for values, _ in batches for v in values]
    assert confluent_read(bootstrap, topic, len(everything), **{"isolation.level": "read_uncommitted"}) == everything


def test_send_offsets_to_transaction_commits_the_groups_offsets(bootstrap, kafka_topic, kafka_admin, read_back):
    """A consume-transform-produce loop: a confluent consumer in a group reads the input, a
    transactional producer writes the output and the consumer's offsets in one transaction;
    an aborted round changes neither; the group's committed offset is where the committed
    rounds stopped."""
    from confluent_kafka import Consumer as KafkaConsumer
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    source, sink, group = kafka_topic(), kafka_topic(), fresh("ctp")
    produce_all(producer(bootstrap), source, [b"in-%d" % i for i in range(6)])
    consumer = KafkaConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    p = producer(bootstrap, **{"transactional.id": fresh("tx-ctp")})
    try:
        p.init_transactions(DEADLINE_S)
        consumer.assign([KafkaTopicPartition(source, 0, 0)])
        for commit in (True, False, True):
            messages = []
            deadline = time.monotonic() + DEADLINE_S
            while len(messages) < 2:
                assert time.monotonic() < deadline
                message = consumer.poll(1.0)
                if message is not None:
                    assert message.error() is None, message.error()
                    messages.append(message)
            p.begin_transaction()
            produce_all(p, sink, [m.value().replace(b"in", b"out") for m in messages])
            position = [KafkaTopicPartition(source, 0, messages[-1].offset() + 1)]
            p.send_offsets_to_transaction(position, consumer.consumer_group_metadata(), DEADLINE_S)
            if commit:
                p.commit_transaction(DEADLINE_S)
            else:
                p.abort_transaction(DEADLINE_S)
    finally:
        consumer.close()
    assert [r.value for r in read_back(sink)] == [b"out-0", b"out-1", b"out-4", b"out-5"]
    assert kafka_admin.list_consumer_group_offsets(group)[TopicPartition(source, 0)].offset == 6


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(bootstrap, kafka_topic, read_back):
    from confluent_kafka import KafkaException

    topic, tid = kafka_topic(), fresh("tx-fence")
    first = producer(bootstrap, **{"transactional.id": tid})
    first.init_transactions(DEADLINE_S)
    first.begin_transaction()
    produce_all(first, topic, [b"zombie"])
    second = producer(bootstrap, **{"transactional.id": tid})
    second.init_transactions(DEADLINE_S)  # aborts the first one's open transaction
    with pytest.raises(KafkaException) as raised:
        first.commit_transaction(DEADLINE_S)
    assert raised.value.args[0].fatal()
    second.begin_transaction()
    produce_all(second, topic, [b"live"])
    second.commit_transaction(DEADLINE_S)
    assert [r.value for r in read_back(topic)] == [b"live"]


def test_an_idempotent_producer_gets_a_producer_id_and_delivers(bootstrap, kafka_topic, read_back):
    topic = kafka_topic()
    p = producer(bootstrap, **{"enable.idempotence": True, "acks": "all"})
    values = [b"idem-%d" % i for i in range(20)]
    produce_all(p, topic, values)
    assert [r.value for r in read_back(topic)] == values


def test_kafka_python_transactions_commit_and_abort(bootstrap, kafka_topic, read_back):
    """kafka-python's transactional producer (its own InitProducerId, AddPartitionsToTxn and
    EndTxn versions) commits and aborts as librdkafka's does."""
    from kafka import KafkaProducer

    topic = kafka_topic()
    p = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=fresh("tx-kp"), max_block_ms=int(DEADLINE_S * 1000))
    try:
        p.init_transactions()
        for values, commit in (([b"kp-1", b"kp-2"], True), ([b"kp-aborted"], False), ([b"kp-3"], True)):
            p.begin_transaction()
            for value in values:
                p.send(topic, value, partition=0)
            if commit:
                p.commit_transaction()
            else:
                p.abort_transaction()
    finally:
        p.close(timeout=DEADLINE_S)
    assert [r.value for r in read_back(topic)] == [b"kp-1", b"kp-2", b"kp-3"]


def test_aiokafka_transactions_commit_and_abort(bootstrap, kafka_topic, read_back):
    """aiokafka's transactional producer commits and aborts as librdkafka's does."""
    from aiokafka import AIOKafkaProducer

    topic = kafka_topic()

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=fresh("tx-aio"))
        await p.start()
        try:
            for values, commit in (([b"aio-1"], True), ([b"aio-aborted", b"aio-aborted-2"], False), ([b"aio-2"], True)):
                await p.begin_transaction()
                for value in values:
                    await p.send_and_wait(topic, value, partition=0)
                await (p.commit_transaction() if commit else p.abort_transaction())
        finally:
            await p.stop()

    asyncio.run(asyncio.wait_for(run(), DEADLINE_S))
    assert [r.value for r in read_back(topic)] == [b"aio-1", b"aio-2"]


def test_a_coordinator_short_of_replicas_is_not_available_to_kafka_clients(
    handle, bootstrap, kafka_topic, kafka_admin, read_back
):
    """A transaction coordinator whose ``__transaction_state`` partition has fewer in-sync
    replicas than its min.insync.replicas cannot write its records (NOT_ENOUGH_REPLICAS).
    Kafka clients get COORDINATOR_NOT_AVAILABLE instead, as from Kafka, and retry: an
    InitProducerId and an EndTxn say so while it lasts, and kafka-python's commit_transaction()
    started meanwhile does not fail (a raw NOT_ENOUGH_REPLICAS is fatal to its transaction
    manager) but commits once the partition may be written again."""
    from kafka import KafkaProducer

    topic = kafka_topic()
    tid, probe = fresh("tx-short"), fresh("tx-probe")
    pid = init_txn(handle, tid)["producer_id"]
    assert add_partitions(handle, tid, pid, 0, {topic: [0]}) == {(topic, 0): NONE}
    p = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=fresh("tx-kp"), max_block_ms=int(DEADLINE_S * 1000))
    probe_body = {"transactional_id": probe, "transaction_timeout_ms": 60_000, "producer_id": -1, "producer_epoch": -1}
    seen: list[int] = []

    def probed() -> bool:
        seen.append(handle.once(K.INIT_PRODUCER_ID, 4, probe_body)["error_code"])
        return seen[-1] == COORDINATOR_NOT_AVAILABLE

    try:
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, b"kp-through-the-fault", partition=0)
        p.flush(timeout=DEADLINE_S)  # its partition is in the transaction: EndTxn is what meets the fault
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            kafka_admin.incremental_alter_configs({TRANSACTION_TOPIC: {"min.insync.replicas": "2"}})  # (RF 1)
            try:
                wait_until(probed, timeout_s=DEADLINE_S, message="the coordinator short of replicas")
                assert set(seen) <= {NONE, COORDINATOR_NOT_AVAILABLE}, seen  # never NOT_ENOUGH_REPLICAS (19)
                body = {"transactional_id": tid, "producer_id": pid, "producer_epoch": 0, "committed": True}
                assert handle.once(K.END_TXN, 3, body)["error_code"] == COORDINATOR_NOT_AVAILABLE
                committing = pool.submit(p.commit_transaction)
                assert probed()  # still short while kafka-python commits
            finally:
                kafka_admin.incremental_alter_configs({TRANSACTION_TOPIC: {"min.insync.replicas": "1"}})
            committing.result(timeout=DEADLINE_S)
    finally:
        p.close(timeout=DEADLINE_S)
    assert end(handle, tid, pid, 0, True) == NONE  # asked again until the coordinator writes
    assert [r.value for r in read_back(topic)] == [b"kp-through-the-fault"]


def test_kafka_pythons_transaction_tools_see_an_open_transaction_and_its_end(bootstrap, kafka_topic):
    """DescribeProducers, ListTransactions and DescribeTransactions through kafka-python's
    admin (its kafka-transactions.sh tooling): a confluent-kafka transaction open on a
    partition is listed once across the brokers, described with its partition, its producer
    shown open at its first offset and not hanging; once committed it is CompleteCommit and
    nothing is open. An unknown id is TRANSACTIONAL_ID_NOT_FOUND."""
    from kafka import TopicPartition as KafkaTopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.admin._transactions import TransactionState
    from kafka.errors import TransactionalIdNotFoundError

    topic = kafka_topic()
    tid = fresh("tx-tools")
    tp = KafkaTopicPartition(topic, 0)
    p = producer(bootstrap, **{"transactional.id": tid})
    p.init_transactions(DEADLINE_S)
    p.begin_transaction()
    produce_all(p, topic, [b"open"])
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(DEADLINE_S * 1000))
    try:
        (producer_state,) = admin.describe_producers([tp])[tp].active_producers
        assert producer_state.current_transaction_start_offset == 0
        listed = [t for ts in admin.list_transactions(transactional_id_pattern=f"{tid}.*").values() for t in ts]
        assert [(t.transactional_id, t.producer_id, t.state) for t in listed] == [
            (tid, producer_state.producer_id, TransactionState.ONGOING)
        ]
        described = admin.describe_transactions([tid])[tid]
        assert (described.state, described.topic_partitions) == (TransactionState.ONGOING, {tp})
        assert described.producer_epoch == producer_state.producer_epoch
        assert [h for h in admin.find_hanging_transactions() if h["transactional_id"] == tid] == []
        p.commit_transaction(DEADLINE_S)
        assert admin.describe_transactions([tid])[tid].state == TransactionState.COMPLETE_COMMIT
        assert [s.current_transaction_start_offset for s in admin.describe_producers([tp])[tp].active_producers] == [-1]
        ongoing = admin.list_transactions(state_filters=["Ongoing"], producer_id_filters=[producer_state.producer_id])
        assert [t for ts in ongoing.values() for t in ts] == []
        with pytest.raises(TransactionalIdNotFoundError):
            admin.describe_transactions([fresh("never")])
    finally:
        admin.close()
