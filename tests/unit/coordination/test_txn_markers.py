"""A prepared transaction's markers as a core: leaders asked once, rounds until every marker is
written, deleted topics skipped, a failed marker's leader asked again (no Ray)."""

from __future__ import annotations

from raylog.coordination.fetcher import Next
from raylog.coordination.transactions import TxnMetadata, TxnState
from raylog.coordination.txn_markers import FindLeaders, MarkerWriter, WriteMarkers
from raylog.errors import NotLeaderOrFollowerError, UnknownTopicOrPartitionError
from raylog.types import TopicPartition

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def prepared(*partitions: TopicPartition, commit: bool = True, bumps: bool = True) -> TxnMetadata:
    state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
    return TxnMetadata("t", 7, 4, 60_000, state, frozenset(partitions), 0, 0, 7, 4, bumps)


def metadata(leaders: dict, deleted: tuple[str, ...] = ()) -> dict:
    topics = {tp.topic for tp in leaders} - set(deleted)
    return {"topics": dict.fromkeys(topics), "leaders": {(tp.topic, tp.partition): h for tp, h in leaders.items()}}


def test_one_round_asks_the_leaders_once_then_marks_every_partition():
    writer = MarkerWriter(prepared(A0, A1, B0), {}, coordinator_epoch=3)
    assert writer.next_request() == FindLeaders(("a", "b"))
    assert writer.on_leaders(metadata({A0: "x", A1: "y", B0: "x"})) is Next.AGAIN
    request = writer.next_request()
    assert request == WriteMarkers({A0: "x", A1: "y", B0: "x"}, 7, 4, True, 3, True)
    assert writer.on_answers(dict.fromkeys(request.leaders)) is Next.AGAIN
    assert writer.done and writer.next_request() is None


def test_known_leaders_are_shared_and_a_failed_markers_leader_is_asked_again():
    leaders = {A0: "x", B0: "z"}
    first = MarkerWriter(prepared(A0, B0, commit=False), leaders, coordinator_epoch=3)
    request = first.next_request()
    assert request.leaders == {A0: "x", B0: "z"} and not request.commit  # no controller call
    assert first.on_answers({A0: None, B0: NotLeaderOrFollowerError("moved")}) is Next.BACKOFF
    assert leaders == {A0: "x"} and first.failed == 1
    assert first.next_request() == FindLeaders(("b",))
    first.on_leaders(metadata({B0: "w"}))
    assert first.next_request().leaders == {B0: "w"}  # only what is left
    first.on_answers({B0: None})
    second = MarkerWriter(prepared(A0, B0), leaders, coordinator_epoch=3)
    assert second.next_request().leaders == {A0: "x", B0: "w"}


def test_a_deleted_topic_needs_no_marker_and_a_partition_with_no_leader_waits_a_round():
    writer = MarkerWriter(prepared(A0, B0), {}, coordinator_epoch=1)
    writer.next_request()
    writer.on_leaders(metadata({A0: None, B0: "x"}, deleted=("b",)))
    request = writer.next_request()
    assert request.leaders == {} and writer.remaining == {A0}  # b was deleted; a-0 is offline
    assert writer.on_answers({}) is Next.BACKOFF
    assert writer.next_request() == FindLeaders(("a",))
    writer.on_leaders(metadata({A0: "x"}))
    writer.next_request()
    assert writer.on_answers({A0: UnknownTopicOrPartitionError("deleted meanwhile")}) is Next.AGAIN
    assert writer.done


def test_no_answer_from_the_controller_pauses_and_asks_again():
    writer = MarkerWriter(prepared(A0), {}, coordinator_epoch=1)
    assert writer.next_request() == FindLeaders(("a",))
    assert writer.on_leaders(None) is Next.BACKOFF
    assert writer.next_request() == FindLeaders(("a",))


def test_markers_of_a_kafka_client_at_end_txn_v0_4_keep_the_producers_epoch():
    writer = MarkerWriter(prepared(A0, bumps=False), {A0: "x"}, coordinator_epoch=2)
    request = writer.next_request()
    assert (request.producer_id, request.producer_epoch, request.bumps_epoch) == (7, 4, False)
