"""What a Kafka client hears when a coordinator could not write its record (no Ray).

A coordinator answers the errors of its own ``__transaction_state`` / ``__consumer_offsets``
append (too few replicas, a timeout, leadership moved, a disk error). Kafka turns those into
coordinator errors before they reach a client (TransactionStateManager.appendTransactionToLog,
the group coordinator's append callback): COORDINATOR_NOT_AVAILABLE or NOT_COORDINATOR, which
every client retries after looking the coordinator up again. Sent as they are, Java's and
kafka-python's transaction managers take them as fatal, so ``commitTransaction()`` could throw
while the transaction commits. Each API is driven through the codec both ways against a
coordinator stand-in that answers the error.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from raylog.actors.kafka import groups, transactions
from raylog.actors.kafka.context import CONNECTION
from raylog.errors import (
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    InvalidProducerIdMappingError,
    NotCoordinatorError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    ProducerFencedError,
    RecordTooLargeError,
    RequestTimedOutError,
    StorageError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
)
from raylog.kafka import codec
from raylog.protocol import GroupResponse, TxnResponse, error_fields

A = codec.ApiKey
TOPIC = "out"

#: A coordinator's error -> what the Kafka client must get (Kafka's mapping).
MAPPED = [
    (NotEnoughReplicasError, CoordinatorNotAvailableError),
    (NotEnoughReplicasAfterAppendError, CoordinatorNotAvailableError),
    (RequestTimedOutError, CoordinatorNotAvailableError),
    (UnknownTopicOrPartitionError, CoordinatorNotAvailableError),
    (NotLeaderOrFollowerError, NotCoordinatorError),
    (StorageError, NotCoordinatorError),
    (RecordTooLargeError, UnknownServerError),
    # the coordinator's own errors pass as they are
    (ConcurrentTransactionsError, ConcurrentTransactionsError),
    (CoordinatorLoadInProgressError, CoordinatorLoadInProgressError),
    (ProducerFencedError, ProducerFencedError),
    (InvalidProducerIdMappingError, InvalidProducerIdMappingError),
]


class Method:
    """``handle.method.remote(*args)``: the answer itself stands for the ref."""

    def __init__(self, answer: Any):
        self.remote = lambda *args, **kwargs: answer


class FailingCoordinator:
    """A transaction or group coordinator whose every call answers ``error``."""

    def __init__(self, error: Exception):
        txn = TxnResponse(**error_fields(error))
        group = GroupResponse(**error_fields(error))
        for name in ("init_producer_id", "add_partitions", "end_txn"):
            setattr(self, name, Method(txn))
        self.describe_transactions = Method(TxnResponse(value=[]))
        for name in ("txn_commit_offsets", "commit_offsets", "heartbeat"):
            setattr(self, name, Method(group))


class FakeContext:
    """The BrokerContext a handler gets: broker 1 coordinates everything; one topic."""

    def __init__(self, coordinator: FailingCoordinator):
        self.broker_id = 1
        self.coordinator = coordinator
        partitions = tuple(SimpleNamespace(partition=p, leader=1) for p in range(2))
        self.md = {
            "topics": {TOPIC: SimpleNamespace(partitions=partitions)},
            "listeners": {1: {"PLAINTEXT": ("127.0.0.1", 19092)}},
        }

    async def metadata(self, refresh: bool = False) -> dict:
        return self.md

    def broker_token(self) -> str:
        return "broker"

    async def call(self, ref: Any, timeout_s: float | None = None) -> Any:
        return ref

    def invalidate(self) -> None:
        pass

    async def coordinator_partition(self, internal: str, key: str) -> int:
        return 0

    async def group_coordinator(self, group_id: str):
        return 1, self.coordinator

    async def transaction_coordinator(self, transactional_id: str):
        return 1, self.coordinator


def roundtrip(ctx: FakeContext, api_key: codec.ApiKey, version: int, body: dict) -> dict:
    frame = b"".join(bytes(b) for b in codec.encode_request(codec.RequestHeader(api_key, version, 7, "cli"), body))
    header, decoded = codec.decode_request(frame[4:])
    handler = transactions.HANDLERS.get(api_key) or groups.HANDLERS[api_key]

    async def handle():
        CONNECTION.set({})
        return await handler(ctx, header, decoded)

    wire = b"".join(bytes(b) for b in codec.encode_response(header, asyncio.run(handle())))
    correlation_id, answer = codec.decode_response(api_key, version, wire[4:])
    assert correlation_id == 7
    return answer


def versions(api_key: codec.ApiKey) -> list[int]:
    low, high = codec.SUPPORTED[api_key]
    return list(range(low, high + 1))


def _offsets() -> list[dict]:
    partition = {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": 1, "committed_metadata": ""}
    return [{"name": TOPIC, "partitions": [partition]}]


def init_producer_id(ctx, version) -> list[int]:
    body = {"transactional_id": "t", "transaction_timeout_ms": 60_000, "producer_id": -1, "producer_epoch": -1}
    return [roundtrip(ctx, A.INIT_PRODUCER_ID, version, body)["error_code"]]


def add_partitions_to_txn(ctx, version) -> list[int]:
    body = {
        "v3_and_below_transactional_id": "t",
        "v3_and_below_producer_id": 4,
        "v3_and_below_producer_epoch": 0,
        "v3_and_below_topics": [{"name": TOPIC, "partitions": [0, 1]}],
    }
    answer = roundtrip(ctx, A.ADD_PARTITIONS_TO_TXN, version, body)
    return [
        p["partition_error_code"] for t in answer["results_by_topic_v3_and_below"] for p in t["results_by_partition"]
    ]


def add_offsets_to_txn(ctx, version) -> list[int]:
    body = {"transactional_id": "t", "producer_id": 4, "producer_epoch": 0, "group_id": "g"}
    return [roundtrip(ctx, A.ADD_OFFSETS_TO_TXN, version, body)["error_code"]]


def end_txn(ctx, version) -> list[int]:
    body = {"transactional_id": "t", "producer_id": 4, "producer_epoch": 0, "committed": True}
    return [roundtrip(ctx, A.END_TXN, version, body)["error_code"]]


def txn_offset_commit(ctx, version) -> list[int]:
    body = {
        "transactional_id": "t",
        "group_id": "g",
        "producer_id": 4,
        "producer_epoch": 0,
        "generation_id": -1,
        "member_id": "",
        "group_instance_id": None,
        "topics": _offsets(),
    }
    answer = roundtrip(ctx, A.TXN_OFFSET_COMMIT, version, body)
    return [p["error_code"] for t in answer["topics"] for p in t["partitions"]]


def offset_commit(ctx, version) -> list[int]:
    body = {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "", "topics": _offsets()}
    answer = roundtrip(ctx, A.OFFSET_COMMIT, version, body)
    return [p["error_code"] for t in answer["topics"] for p in t["partitions"]]


def heartbeat(ctx, version) -> list[int]:
    body = {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None}
    return [roundtrip(ctx, A.HEARTBEAT, version, body)["error_code"]]


APIS = {
    A.INIT_PRODUCER_ID: init_producer_id,
    A.ADD_PARTITIONS_TO_TXN: add_partitions_to_txn,
    A.ADD_OFFSETS_TO_TXN: add_offsets_to_txn,
    A.END_TXN: end_txn,
    A.TXN_OFFSET_COMMIT: txn_offset_commit,
    A.OFFSET_COMMIT: offset_commit,
    A.HEARTBEAT: heartbeat,
}


@pytest.mark.parametrize("api_key", list(APIS), ids=lambda k: k.name)
@pytest.mark.parametrize("error, expected", MAPPED, ids=lambda e: e.__name__)
def test_a_coordinators_append_errors_reach_kafka_clients_as_coordinator_errors(api_key, error, expected):
    ctx = FakeContext(FailingCoordinator(error("the coordinator's record was not written")))
    for version in versions(api_key):
        codes = APIS[api_key](ctx, version)
        assert codes and set(codes) == {expected.code}, f"{api_key.name} v{version}"
