"""The error code a Kafka client gets from a coordinator-facing handler.

A coordinator (transaction or group) answers, besides its own errors, those of appending
its record to its ``__transaction_state`` / ``__consumer_offsets`` partition. Kafka never
sends the latter to clients as they are (TransactionStateManager.appendTransactionToLog and
the group coordinator's append callback convert them), and clients rely on it: Java's and
kafka-python's transaction managers take a raw NOT_ENOUGH_REPLICAS or REQUEST_TIMED_OUT from
EndTxn as fatal, though the transaction may commit. So every coordinator-facing handler
reports through :func:`coordinator_code`, with Kafka's mapping:

================================================================  ===========================
the coordinator's append failed with                               the client gets
================================================================  ===========================
UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS,                   COORDINATOR_NOT_AVAILABLE
NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT
NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR                        NOT_COORDINATOR
MESSAGE_TOO_LARGE                                                  UNKNOWN_SERVER_ERROR
================================================================  ===========================

Both coordinator errors make a client look the coordinator up again and retry. Every other
code (the coordinator's own: CONCURRENT_TRANSACTIONS, PRODUCER_FENCED, ILLEGAL_GENERATION,
...) goes out as it is.
"""

from __future__ import annotations

import logging

from raylog.errors import (
    ApiError,
    CoordinatorNotAvailableError,
    NotCoordinatorError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    RecordTooLargeError,
    RequestTimedOutError,
    StorageError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
)

logger = logging.getLogger(__name__)

#: A coordinator's append error code -> the code Kafka answers instead.
_COORDINATOR_CODES = {
    **dict.fromkeys(
        (
            UnknownTopicOrPartitionError.code,
            NotEnoughReplicasError.code,
            NotEnoughReplicasAfterAppendError.code,
            RequestTimedOutError.code,
        ),
        CoordinatorNotAvailableError.code,
    ),
    NotLeaderOrFollowerError.code: NotCoordinatorError.code,
    StorageError.code: NotCoordinatorError.code,
    RecordTooLargeError.code: UnknownServerError.code,
}


def code_of(error: BaseException) -> int:
    """The Kafka error code that reports ``error`` (UNKNOWN_SERVER_ERROR, logged, for an
    error without one)."""
    if isinstance(error, ApiError) and error.code is not None:
        return error.code
    logger.warning("a request failed without a Kafka error code: %s: %s", type(error).__name__, error)
    return UnknownServerError.code


def coordinator_code(error: BaseException | int) -> int:
    """The code a Kafka client gets for a coordinator's ``error`` (an error, or its code;
    0 stays 0). See the module docstring."""
    code = error if isinstance(error, int) else code_of(error)
    return _COORDINATOR_CODES.get(code, code)
