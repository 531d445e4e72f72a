"""Kafka's producer-id and transaction APIs on raylog's coordinators: InitProducerId v0-4,
AddPartitionsToTxn v0-3, AddOffsetsToTxn v0-3, EndTxn v0-3 and TxnOffsetCommit v0-3.

- InitProducerId without a transactional id is an idempotent producer: a producer id never
  handed out before, from the controller, at epoch 0 (as raylog's own idempotent Producer
  gets one). Since KIP-360 (v3+) such a producer may send its id and epoch to have the
  epoch bumped after an error; Kafka gives it a new id then, and so does raylog.
- With a transactional id, the id's transaction coordinator (the leader of its
  ``__transaction_state`` partition) registers the new instance: an open transaction is
  aborted, the epoch bumped (every older instance fenced). At v3+ a producer that sends its
  current id and epoch (KIP-360: an instance recovering from an abortable error) must hold
  the id's current epoch, or the one before a bump the coordinator made by aborting its
  timed-out transaction; otherwise it was fenced by another instance: PRODUCER_FENCED. That
  check and the registration are two calls, so two instances racing past the check both
  register, the second fencing the first (as without the check). A transactional id
  expired and registered again with another producer id is not recognised.
- AddOffsetsToTxn adds the group's ``__consumer_offsets`` partition to the transaction, as
  raylog's Producer does in ``send_offsets_to_transaction``; TxnOffsetCommit then goes to
  the group's coordinator (``txn_commit_offsets``), whose offsets count once the commit
  marker reaches that partition. The leader epoch a commit carries (v2+) is kept with the offset.
- EndTxn v0-3 answers no producer epoch, so a Kafka client keeps its epoch from one
  transaction to the next (Kafka before KIP-890): the transaction ends without the epoch
  bump raylog's own producers get (``end_txn(..., bump_epoch=False)``; see
  :mod:`raylog.coordination.transactions`).

Every request may come to any broker's listener: each handler calls the coordinator actor
wherever it runs, so a client that asks the broker FindCoordinator named is served there,
and one that asks another broker is served too. Errors are Kafka's codes in the response,
never exceptions: an unreachable coordinator is COORDINATOR_NOT_AVAILABLE (the client looks
it up again), a coordinator that moved NOT_COORDINATOR, and the errors of a coordinator's own
append are converted as Kafka converts them (:mod:`raylog.actors.kafka.coordinator_errors`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from raylog.actors.kafka.context import BrokerContext
from raylog.actors.kafka.coordinator_errors import coordinator_code
from raylog.common.names import OFFSETS_TOPIC, validate_transactional_id
from raylog.errors import (
    CoordinatorNotAvailableError,
    InvalidRequestError,
    NetworkExceptionError,
    OperationNotAttemptedError,
    ProducerFencedError,
    RaylogError,
    UnknownTopicOrPartitionError,
)
from raylog.kafka.codec import ApiKey, RequestHeader
from raylog.protocol import error_of

logger = logging.getLogger(__name__)

#: The states after which an instance's KIP-360 re-registration may name the epoch before
#: the coordinator's own bump (its transaction timed out and was aborted).
_ABORTED_STATES = ("PrepareAbort", "CompleteAbort")


class _Refused(Exception):
    """A request answered with one error code (carried as a raylog error)."""

    def __init__(self, error: RaylogError):
        super().__init__(str(error))
        self.error = error


def _unreachable(error: RaylogError) -> RaylogError:
    """A coordinator that cannot be called is one the client must look up again."""
    if isinstance(error, NetworkExceptionError):
        return CoordinatorNotAvailableError(f"the coordinator did not answer: {error}")
    return error


async def _transaction_coordinator(ctx: BrokerContext, transactional_id: str) -> Any:
    """The coordinator actor of ``transactional_id``.

    Raises:
        _Refused: an invalid id, or no coordinator running.
    """
    try:
        validate_transactional_id(transactional_id)
        _, handle = await ctx.transaction_coordinator(transactional_id)
    except RaylogError as exc:
        raise _Refused(_unreachable(exc)) from None
    if handle is None:
        raise _Refused(CoordinatorNotAvailableError(f"no coordinator for transactional id {transactional_id!r} yet"))
    return handle


async def _call(ctx: BrokerContext, ref: Any) -> Any:
    """A coordinator call's answer (a TxnResponse or GroupResponse without error).

    Raises:
        _Refused: the call failed, or its answer reports an error.
    """
    try:
        answer = await ctx.call(ref)
    except RaylogError as exc:
        ctx.invalidate()
        raise _Refused(_unreachable(exc)) from None
    error = error_of(answer)
    if error is not None:
        raise _Refused(error)
    return answer


# --- InitProducerId -----------------------------------------------------------------------


async def init_producer_id(ctx: BrokerContext, header: RequestHeader, body: dict) -> dict:
    transactional_id = body.get("transactional_id")
    try:
        if transactional_id is None:
            producer_id = await _new_producer_id(ctx)
            return {"producer_id": producer_id, "producer_epoch": 0}
        coordinator = await _transaction_coordinator(ctx, transactional_id)
        given = (body.get("producer_id", -1), body.get("producer_epoch", -1))
        if given[0] >= 0:
            await _require_current(ctx, coordinator, transactional_id, *given)
        answer = await _call(
            ctx,
            coordinator.init_producer_id.remote(
                transactional_id, body["transaction_timeout_ms"], session=ctx.broker_token()
            ),
        )
    except _Refused as refused:
        logger.debug("InitProducerId of %r refused: %s", transactional_id, refused)
        return {"error_code": coordinator_code(refused.error), "producer_id": -1, "producer_epoch": -1}
    return {"producer_id": answer.producer_id, "producer_epoch": answer.producer_epoch}


async def _new_producer_id(ctx: BrokerContext) -> int:
    try:
        return await ctx.new_producer_id()
    except RaylogError as exc:
        raise _Refused(exc) from None


async def _require_current(ctx: BrokerContext, coordinator: Any, transactional_id: str, pid: int, epoch: int) -> None:
    """KIP-360: the instance that re-registers holds the id's current producer id and epoch
    (or the epoch before the bump of its own transaction's timeout abort).

    Raises:
        _Refused: PRODUCER_FENCED otherwise.
    """
    answer = await _call(ctx, coordinator.describe_transactions.remote([transactional_id], session=ctx.broker_token()))
    if not answer.value:
        return  # the id is new here: Kafka registers it too
    current = answer.value[0]
    held = (current["producer_id"], current["producer_epoch"])
    if (pid, epoch) == held:
        return
    if current["state"] in _ABORTED_STATES and (pid, epoch + 1) == held:
        return
    raise _Refused(
        ProducerFencedError(
            f"transactional id {transactional_id!r} is held by producer id {held[0]} epoch {held[1]}, "
            f"not {pid} epoch {epoch}"
        )
    )


# --- AddPartitionsToTxn / AddOffsetsToTxn / EndTxn ---------------------------------------


async def _outcome(what: str, steps: Awaitable[Any]) -> int:
    """The error code of ``steps`` (0 when they ran through; a refusal's code, logged)."""
    try:
        await steps
    except _Refused as refused:
        logger.debug("%s refused: %s", what, refused)
        return coordinator_code(refused.error)
    return 0


async def _add_partitions(ctx: BrokerContext, transactional_id: str, pid: int, epoch: int, partitions: list) -> None:
    coordinator = await _transaction_coordinator(ctx, transactional_id)
    await _call(
        ctx, coordinator.add_partitions.remote(transactional_id, pid, epoch, partitions, session=ctx.broker_token())
    )


async def add_partitions_to_txn(ctx: BrokerContext, header: RequestHeader, body: dict) -> dict:
    transactional_id = body["v3_and_below_transactional_id"]
    wanted = [(t["name"], p) for t in body["v3_and_below_topics"] for p in t["partitions"]]
    unknown = await _unknown(ctx, wanted)
    if unknown:
        # All or nothing, as Kafka: the unknown ones say why, the others were not tried.
        codes = {
            tp: (UnknownTopicOrPartitionError if tp in unknown else OperationNotAttemptedError).code for tp in wanted
        }
    else:
        pid, epoch = body["v3_and_below_producer_id"], body["v3_and_below_producer_epoch"]
        steps = _add_partitions(ctx, transactional_id, pid, epoch, wanted)
        codes = dict.fromkeys(wanted, await _outcome(f"AddPartitionsToTxn of {transactional_id!r}", steps))
    results: dict[str, list[dict]] = {}
    for (topic, partition), code in codes.items():
        results.setdefault(topic, []).append({"partition_index": partition, "partition_error_code": code})
    return {
        "results_by_topic_v3_and_below": [
            {"name": topic, "results_by_partition": partitions} for topic, partitions in results.items()
        ]
    }


async def _unknown(ctx: BrokerContext, partitions: list[tuple[str, int]]) -> set[tuple[str, int]]:
    """The partitions that do not exist, in metadata refreshed once when the cached one
    lacks some (a topic created just before)."""
    unknown: set[tuple[str, int]] = set()
    for refresh in (False, True):
        md = await metadata_or_none(ctx, "a transaction's partitions", refresh)
        unknown = set() if md is None else {tp for tp in partitions if not _exists(md, *tp)}
        if not unknown:
            break
    return unknown


async def metadata_or_none(ctx: BrokerContext, what: str, refresh: bool = False) -> dict | None:
    """The listener's metadata, or None when the controller does not answer (then ``what``
    is not checked against it here: the actor called next checks it)."""
    try:
        return await ctx.metadata(refresh)
    except RaylogError as exc:
        logger.debug("no metadata to check %s against: %s", what, exc)
        return None


def _exists(md: dict, topic: str, partition: int) -> bool:
    described = md["topics"].get(topic)
    if described is None:
        return False
    return 0 <= partition < len(described.partitions)


async def add_offsets_to_txn(ctx: BrokerContext, header: RequestHeader, body: dict) -> dict:
    transactional_id, group_id = body["transactional_id"], body["group_id"]

    async def steps() -> None:
        if not group_id:
            raise _Refused(InvalidRequestError("group_id must not be empty"))
        try:
            partition = await ctx.coordinator_partition(OFFSETS_TOPIC, group_id)
        except RaylogError as exc:
            raise _Refused(_unreachable(exc)) from None
        offsets_partition = (OFFSETS_TOPIC, partition)
        await _add_partitions(ctx, transactional_id, body["producer_id"], body["producer_epoch"], [offsets_partition])

    return {"error_code": await _outcome(f"AddOffsetsToTxn of {transactional_id!r} for group {group_id!r}", steps())}


async def end_txn(ctx: BrokerContext, header: RequestHeader, body: dict) -> dict:
    transactional_id = body["transactional_id"]

    async def steps() -> None:
        coordinator = await _transaction_coordinator(ctx, transactional_id)
        pid, epoch, commit = body["producer_id"], body["producer_epoch"], body["committed"]
        await _call(
            ctx,
            coordinator.end_txn.remote(
                transactional_id, pid, epoch, commit, bump_epoch=False, session=ctx.broker_token()
            ),
        )

    return {"error_code": await _outcome(f"EndTxn of {transactional_id!r}", steps())}


# --- TxnOffsetCommit ----------------------------------------------------------------------


async def txn_offset_commit(ctx: BrokerContext, header: RequestHeader, body: dict) -> dict:
    group_id = body["group_id"]
    # (topic, partition) -> (offset, metadata, leader epoch), as txn_commit_offsets takes them
    offsets = {
        (t["name"], p["partition_index"]): (
            p["committed_offset"],
            p.get("committed_metadata") or "",
            p.get("committed_leader_epoch", -1),
        )
        for t in body["topics"]
        for p in t["partitions"]
    }

    async def steps() -> None:
        try:
            _, coordinator = await ctx.group_coordinator(group_id)
        except RaylogError as exc:
            raise _Refused(_unreachable(exc)) from None
        if coordinator is None:
            raise _Refused(CoordinatorNotAvailableError(f"no coordinator for group {group_id!r} yet"))
        member = (body.get("member_id", ""), body.get("generation_id", -1), body.get("group_instance_id"))
        producer = (body["producer_id"], body["producer_epoch"])
        await _call(
            ctx,
            coordinator.txn_commit_offsets.remote(group_id, *member, *producer, offsets, session=ctx.broker_token()),
        )

    code = await _outcome(f"TxnOffsetCommit of group {group_id!r}", steps())
    return {
        "topics": [
            {
                "name": t["name"],
                "partitions": [{"partition_index": p["partition_index"], "error_code": code} for p in t["partitions"]],
            }
            for t in body["topics"]
        ]
    }


HANDLERS: dict[ApiKey, Callable[[BrokerContext, RequestHeader, dict], Awaitable[dict]]] = {
    ApiKey.INIT_PRODUCER_ID: init_producer_id,
    ApiKey.ADD_PARTITIONS_TO_TXN: add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: add_offsets_to_txn,
    ApiKey.END_TXN: end_txn,
    ApiKey.TXN_OFFSET_COMMIT: txn_offset_commit,
}
