"""Requests and responses between clients and replica actors.

Small frozen dataclasses; every response carries an ``error_code`` (0 for none, else a
Kafka code from :mod:`raylog.errors`) and a message, so errors cross the actor boundary
as data. :func:`error_of` turns a failed response back into the typed exception.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from raylog.errors import ApiError, RaylogError, UnknownServerError, for_code

NONE = 0
EMPTY_RECORDS = np.empty(0, dtype=np.uint8)
#: The largest produce request a leader takes (Kafka's socket.request.max.bytes default); a
#: larger one fails whole with INVALID_REQUEST and writes nothing.
MAX_REQUEST_BYTES = 100 << 20
#: Records smaller than this travel to the leader as bytes inside the call, larger ones as an
#: array that Ray ships out of band and the leader reads where it lies in the object store.
INLINE_RECORDS_BYTES = 64 << 10


def records_payload(data: Any) -> Any:
    """``data`` (bytes-like) as a :class:`ProduceRequest` carries it: a small batch as bytes,
    a large one (:data:`INLINE_RECORDS_BYTES` or more) as a uint8 array."""
    if len(data) < INLINE_RECORDS_BYTES:
        return bytes(data)
    return np.frombuffer(data, dtype=np.uint8)


@dataclass(frozen=True)
class ProduceRequest:
    records: Any  # bytes-like: one or more whole record batches
    acks: int = 1  # 0, 1 or -1 (all)
    timeout_ms: int = 30_000  # how long acks=all may wait for the ISR
    client_id: str = ""  # whose producer_byte_rate quota the bytes count against
    #: Idempotent producers: the base sequence of the oldest batch of this partition not yet
    #: acknowledged to them (-1: not said; then a leader without the producer's state takes
    #: any sequence as its first, as Kafka). See raylog.coordination.producer_state.
    first_unacked_sequence: int = -1
    #: The caller delivers each producer's batches in order (a Kafka connection: one at a
    #: time), so a batch past a sequence gap means the earlier one is lost: it is refused at
    #: once with OUT_OF_ORDER_SEQUENCE_NUMBER, as Kafka does, rather than waiting for it.
    in_order: bool = False
    #: Transactional producers: their transactional id (Kafka's Produce v3+ carries it), with
    #: which the leader verifies a transaction's first batch in the partition with its
    #: coordinator (see raylog.coordination.txn_verification).
    transactional_id: str | None = None
    #: The caller's session token (raylog.coordination.sessions; None: User:ANONYMOUS).
    session: str | None = None


@dataclass(frozen=True)
class ProduceResponse:
    error_code: int = NONE
    error_message: str = ""
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    throttle_time_ms: int = 0  # how long the leader held the response back (quota)
    #: INVALID_RECORD: the records at fault, ``(index in the batch, why)`` (KIP-467).
    record_errors: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True)
class FetchRequest:
    offset: int
    max_bytes: int = 1 << 20  # per partition; at least one batch is returned regardless
    min_bytes: int = 1
    max_wait_ms: int = 500
    replica_id: int = -1  # -1 for consumers, the broker id for followers
    current_leader_epoch: int = -1  # -1: do not check
    client_id: str = ""  # whose consumer_byte_rate quota the bytes count against (consumers)
    isolation_level: int = 0  # 0 read_uncommitted (up to the HW), 1 read_committed (up to the LSO)
    log_start_offset: int = -1  # a follower's own log start (the leader's low watermark)
    #: The caller's session token (raylog.coordination.sessions; None: User:ANONYMOUS).
    session: str | None = None


@dataclass(frozen=True)
class FetchResponse:
    error_code: int = NONE
    error_message: str = ""
    high_watermark: int = -1
    log_start_offset: int = -1
    log_end_offset: int = -1
    leader_epoch: int = -1
    throttle_time_ms: int = 0  # how long the leader held the response back (quota)
    #: Whole record batches, exactly as stored. A NumPy array so that Ray passes it out of
    #: band and the caller reads it from the object store without a copy.
    records: np.ndarray = field(default_factory=lambda: EMPTY_RECORDS)
    last_stable_offset: int = -1
    #: read_committed: ``(producer_id, first_offset)`` of each aborted transaction the
    #: records may hold (see raylog.common.record_batch.decode_table).
    aborted_transactions: tuple = ()


@dataclass(frozen=True)
class DeleteRecordsResponse:
    error_code: int = NONE
    error_message: str = ""
    low_watermark: int = -1  # the smallest log start offset in the ISR


@dataclass(frozen=True)
class ListOffsetsResponse:
    error_code: int = NONE
    error_message: str = ""
    offset: int = -1
    timestamp_ms: int = -1
    leader_epoch: int = -1  # the epoch of the leader that answered (KIP-320)


def error_fields(exc: BaseException) -> dict[str, Any]:
    """The ``error_code`` / ``error_message`` of a response reporting ``exc``."""
    if isinstance(exc, ApiError):
        return {"error_code": exc.code, "error_message": str(exc)}
    return {"error_code": UnknownServerError.code, "error_message": f"{type(exc).__name__}: {exc}"}


def error_result(exc: BaseException) -> tuple[int, str]:
    """``(error_code, error_message)`` of a per-resource answer reporting ``exc``."""
    fields = error_fields(exc)
    return fields["error_code"], fields["error_message"]


def error_of(response: Any) -> RaylogError | None:
    """The typed exception a response reports, or None if it succeeded."""
    if response.error_code == NONE:
        return None
    try:
        cls = for_code(response.error_code)
    except KeyError:
        cls = UnknownServerError
    return cls(response.error_message)


# --- consumer groups (served by the leader replica of a ``__consumer_offsets`` partition) ---


@dataclass(frozen=True)
class JoinGroupRequest:
    group_id: str
    member_id: str  # "" for a member joining for the first time
    topics: tuple[str, ...]
    #: topic -> partition count, as the member's metadata says (the coordinator assigns from it).
    partition_counts: dict[str, int]
    #: The protocols (Kafka's name; for a consumer, its partition assignors) the member
    #: supports, most preferred first.
    strategies: tuple[str, ...]
    owned: tuple[Any, ...] = ()  # TopicPartitions the member reads now (incremental protocol)
    owned_generation: int = -1  # the generation ``owned`` was assigned in (KIP-792)
    instance_id: str | None = None  # group.instance.id: static membership
    client_id: str = ""
    session_timeout_ms: int = 45_000
    rebalance_timeout_ms: int = 300_000
    #: A new member (no member id, not static) gets MEMBER_ID_REQUIRED with its id at once and
    #: joins when it comes back with it (KIP-394: Kafka's JoinGroup v4+), so that a client that
    #: never comes back (it timed out, or went away) holds no place the group waits for.
    require_known_member_id: bool = False
    #: The group's protocol type: every member of a group shares one (Kafka's consumers
    #: ``consumer``, Kafka Connect's workers ``connect``, ...).
    protocol_type: str = "consumer"
    #: Each strategy's metadata, as Kafka's JoinGroup carries it (empty: a raylog member,
    #: which has none). The coordinator keeps it opaque and hands it to the member that
    #: assigns, where the group's protocol is not one it runs itself.
    metadata: tuple[bytes, ...] = ()


@dataclass(frozen=True)
class JoinedMember:
    """A member as the group's leader is told it, to assign: its metadata for the group's
    protocol (empty where the coordinator assigns)."""

    member_id: str
    instance_id: str | None
    metadata: bytes = b""


@dataclass(frozen=True)
class JoinGroupResponse:
    error_code: int = NONE
    error_message: str = ""
    generation: int = -1
    member_id: str = ""
    leader_id: str = ""
    protocol: str = ""
    #: Every member (:class:`JoinedMember`), told to the leader only.
    members: tuple[JoinedMember, ...] = ()
    #: The group's protocol is assigned by its leader member (Kafka's classic protocol), not
    #: by the coordinator: the leader sends every member's assignment with its sync.
    leader_assigns: bool = False
    #: A static leader that took its place back without a rebalance: it must not assign
    #: again (KIP-814: the members keep the assignment it made before).
    skip_assignment: bool = False


@dataclass(frozen=True)
class SyncGroupResponse:
    error_code: int = NONE
    error_message: str = ""
    assignment: tuple[Any, ...] = ()  # TopicPartitions of this member in this generation
    #: Its assignment as the group's leader member made it (opaque bytes), where the leader
    #: assigns; None where the coordinator did (``assignment``).
    assigned: bytes | None = None


@dataclass(frozen=True)
class GroupResponse:
    """The answer to heartbeats, leaves, commits and admin calls: an error or a value."""

    error_code: int = NONE
    error_message: str = ""
    value: Any = None


# --- transactions (served by the leader replica of a ``__transaction_state`` partition) ---


@dataclass(frozen=True)
class TxnResponse:
    """The answer to a transaction coordinator's calls: the producer id and epoch to use."""

    error_code: int = NONE
    error_message: str = ""
    producer_id: int = -1
    producer_epoch: int = -1
    value: Any = None  # describe_transactions: one dict per transactional id
