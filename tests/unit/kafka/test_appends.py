"""A connection's appends to a partition (raylog.actors.kafka.appends) without Ray: against a
leader that appends to a real Partition, each partition's batches reach the log in the order
they came, one call at a time; those that queued behind a call share the next (an idempotent
producer's only as a chain of its next batches), each request gets its own offsets, and one
bad batch fails only its request."""

from __future__ import annotations

import asyncio

import pytest

from raylog.actors.kafka import appends
from raylog.actors.kafka.appends import Append, PartitionAppends
from raylog.common import record_batch as rb
from raylog.config import TopicConfig
from raylog.coordination.partition import Partition
from raylog.errors import CorruptRecordError, NotLeaderOrFollowerError, OutOfOrderSequenceError, RaylogError
from raylog.protocol import ProduceResponse, error_fields


class Leader:
    """``send`` for a PartitionAppends: appends the batches to a real Partition as the replica
    does, one call at a time (a second call while one is under way fails the test), and
    notes the batches of each call. ``held`` holds each call until it is set."""

    def __init__(self, partition: Partition):
        self.partition = partition
        self.calls: list[list[bytes]] = []
        self.held = asyncio.Event()
        self.held.set()
        self.under_way = False
        self.fail_with: RaylogError | None = None

    async def send(self, batch: list[Append]) -> ProduceResponse:
        assert not self.under_way, "a second call to the leader while one was under way"
        self.under_way = True
        try:
            self.calls.append([bytes(a.batch) for a in batch])
            await self.held.wait()
            if self.fail_with is not None:
                raise self.fail_with
            data = b"".join(bytes(a.batch) for a in batch)
            try:
                info = self.partition.append_as_leader(data, batch[0].acks, in_order=True)
            except RaylogError as exc:
                return ProduceResponse(**error_fields(exc))
            return ProduceResponse(base_offset=info.first_offset, log_start_offset=0)
        finally:
            self.under_way = False


@pytest.fixture
def leader(open_log) -> Leader:
    partition = Partition("clicks", 0, broker_id=0, log=open_log(), config=TopicConfig())
    partition.become_leader(leader_epoch=0, replicas=(0,), isr=(0,), partition_epoch=0)
    return Leader(partition)


def plain(*values: bytes, acks: int = -1, client_id: str = "c") -> Append:
    batch = rb.build(list(values))
    return Append(batch, rb.read_header(batch), acks, 30_000, client_id, None)


def idempotent(sequence: int, *values: bytes) -> Append:
    batch = rb.build(list(values), producer_id=7, producer_epoch=0, base_sequence=sequence)
    return Append(batch, rb.read_header(batch), -1, 30_000, "c", None)


def corrupt(value: bytes) -> Append:
    batch = bytearray(rb.build([value]))
    batch[-1] ^= 1  # its CRC fails
    return Append(bytes(batch), rb.read_header(batch), -1, 30_000, "c", None)


def logged(leader: Leader) -> list[bytes]:
    log = leader.partition.log
    return rb.decode_table(log.read(0, 1 << 20)).column("value").to_pylist()


async def appended(queue: PartitionAppends, append: Append) -> ProduceResponse:
    slot = queue.reserve()
    slot.fill(append)
    return await slot.answer


async def queued_behind_a_held_call(leader: Leader, first: Append, *rest: Append) -> list:
    """``first`` sent and held at the leader while ``rest`` queue behind it; every answer."""
    queue = PartitionAppends(leader.send)
    leader.held.clear()
    tasks = [asyncio.ensure_future(appended(queue, first))]
    await asyncio.sleep(0)
    tasks += [asyncio.ensure_future(appended(queue, a)) for a in rest]
    await asyncio.sleep(0)
    leader.held.set()
    answers = await asyncio.gather(*tasks, return_exceptions=True)
    assert queue.idle
    return answers


def test_what_queued_behind_a_call_shares_the_next_and_each_gets_its_own_offsets(leader):
    answers = asyncio.run(
        queued_behind_a_held_call(leader, plain(b"a"), plain(b"b", b"c"), plain(b"d"), plain(b"e", b"f", b"g"))
    )
    assert [a.base_offset for a in answers] == [0, 1, 3, 4]
    assert [len(call) for call in leader.calls] == [1, 3]  # the held one, then the three queued together
    assert logged(leader) == [b"a", b"b", b"c", b"d", b"e", b"f", b"g"]


def test_batches_of_other_acks_clients_or_producers_go_in_calls_of_their_own(leader):
    answers = asyncio.run(
        queued_behind_a_held_call(
            leader,
            plain(b"a"),
            plain(b"b"),
            plain(b"c", acks=1),
            plain(b"d", client_id="other"),
            idempotent(0, b"e"),
            idempotent(1, b"f"),
            plain(b"g"),
            plain(b"h"),
        )
    )
    assert all(a.error_code == 0 for a in answers), answers
    assert [a.base_offset for a in answers] == list(range(8))
    assert [len(call) for call in leader.calls] == [1, 1, 1, 1, 2, 2]  # e and f: one producer's chain
    assert logged(leader) == [b"a", b"b", b"c", b"d", b"e", b"f", b"g", b"h"]


def test_an_idempotent_producers_next_batches_share_a_call_as_a_chain(leader):
    """What queued of one producer's batches in sequence order goes in one call (librdkafka
    keeps five in flight per partition); a batch past a gap starts a call of its own, and
    is refused as out of order there (the Kafka connection sent it after a lost one)."""
    answers = asyncio.run(
        queued_behind_a_held_call(
            leader,
            idempotent(0, b"a"),
            idempotent(1, b"b"),
            idempotent(2, b"c", b"d"),
            idempotent(4, b"e"),
            idempotent(6, b"f"),  # 5 never came
        )
    )
    assert [a.error_code for a in answers] == [0, 0, 0, 0, OutOfOrderSequenceError.code]
    assert [a.base_offset for a in answers[:4]] == [0, 1, 2, 4]
    assert [len(call) for call in leader.calls] == [1, 3, 1]
    assert logged(leader) == [b"a", b"b", b"c", b"d", b"e"]


def test_a_chain_whose_first_batch_was_appended_before_is_sent_again_batch_by_batch(leader):
    """librdkafka resends its batches from the first unanswered one after a timeout; where
    that one was appended meanwhile, the chain is refused whole and each batch sent alone:
    the duplicate gets its original offsets, the next is appended once."""
    answers = asyncio.run(
        queued_behind_a_held_call(leader, idempotent(0, b"a"), idempotent(0, b"a"), idempotent(1, b"b"))
    )
    assert [(a.error_code, a.base_offset) for a in answers] == [(0, 0), (0, 0), (0, 1)]
    assert [len(call) for call in leader.calls] == [1, 2, 1, 1]
    assert logged(leader) == [b"a", b"b"]


def test_a_corrupt_batch_in_a_shared_call_fails_only_its_own_request(leader):
    answers = asyncio.run(queued_behind_a_held_call(leader, plain(b"a"), plain(b"b"), corrupt(b"x"), plain(b"c")))
    codes = [a.error_code for a in answers]
    assert codes[:2] == [0, 0] and codes[3] == 0
    assert codes[2] == CorruptRecordError.code
    assert [a.base_offset for i, a in enumerate(answers) if i != 2] == [0, 1, 2]
    assert [len(call) for call in leader.calls] == [1, 3, 1, 1, 1]  # the shared call refused, then each alone
    assert logged(leader) == [b"a", b"b", b"c"]


def test_an_error_of_the_partition_is_every_waiting_requests(leader):
    """A call that fails (here the leader moved) fails each request it carried; the next
    ones are sent as they come."""

    async def scenario():
        queue = PartitionAppends(leader.send)
        leader.held.clear()
        leader.fail_with = NotLeaderOrFollowerError("moved")
        first = asyncio.ensure_future(appended(queue, plain(b"a")))
        await asyncio.sleep(0)
        rest = [asyncio.ensure_future(appended(queue, plain(v))) for v in (b"b", b"c")]
        await asyncio.sleep(0)
        leader.held.set()
        failed = await asyncio.gather(first, *rest, return_exceptions=True)
        leader.fail_with = None
        return failed, await appended(queue, plain(b"d"))

    failed, after = asyncio.run(scenario())
    assert [type(f) for f in failed] == [NotLeaderOrFollowerError] * 3
    assert after.base_offset == 0 and logged(leader) == [b"d"]


def test_a_shared_call_stays_within_its_byte_bound(leader, monkeypatch):
    monkeypatch.setattr(appends, "SHARED_CALL_MAX_BYTES", 2 * len(plain(b"x" * 100).batch))
    asyncio.run(queued_behind_a_held_call(leader, *(plain(b"x" * 100) for _ in range(6))))
    assert [len(call) for call in leader.calls] == [1, 2, 2, 1]


def test_places_keep_the_order_they_were_reserved_in_whichever_is_filled_first(leader):
    """Requests reserve their places as they come and fill them once converted: a later
    batch converted first still waits for the earlier; a place left empty (its conversion
    failed) is passed over, and one not filled yet holds the ones after it."""

    async def scenario():
        queue = PartitionAppends(leader.send)
        first, second, failed, last = (queue.reserve() for _ in range(4))
        second.fill(plain(b"second"))
        last.fill(plain(b"last"))
        await asyncio.sleep(0.05)
        assert leader.calls == []  # the first place is not filled yet
        failed.fill(None)
        first.fill(plain(b"first"))
        return await asyncio.gather(first.answer, second.answer, last.answer)

    answers = asyncio.run(scenario())
    assert [a.base_offset for a in answers] == [0, 1, 2]
    assert logged(leader) == [b"first", b"second", b"last"]


def test_a_chain_refused_whole_by_a_moved_leader_is_appended_once_when_sent_again(leader):
    """A call of a chain that fails (the leader moved) fails each request of the chain, and
    nothing is appended; librdkafka's retry of the same batches then goes through as one
    chain, each at its own offset, once."""

    async def scenario():
        queue = PartitionAppends(leader.send)
        chain = [idempotent(0, b"a"), idempotent(1, b"b"), idempotent(2, b"c")]
        leader.held.clear()
        leader.fail_with = NotLeaderOrFollowerError("moved")
        first = asyncio.ensure_future(appended(queue, chain[0]))
        await asyncio.sleep(0)
        rest = [asyncio.ensure_future(appended(queue, a)) for a in chain[1:]]
        await asyncio.sleep(0)
        leader.held.set()
        failed = await asyncio.gather(first, *rest, return_exceptions=True)
        leader.fail_with = None
        retried = await queued_behind_a_held_call(leader, *chain)
        return failed, retried

    failed, retried = asyncio.run(scenario())
    assert [type(f) for f in failed] == [NotLeaderOrFollowerError] * 3
    assert [(a.error_code, a.base_offset) for a in retried] == [(0, 0), (0, 1), (0, 2)]
    assert logged(leader) == [b"a", b"b", b"c"]
