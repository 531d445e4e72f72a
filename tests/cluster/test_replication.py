"""Replication on a real multi-node Ray cluster: nodes die for real, nothing acknowledged is lost."""

from __future__ import annotations

import glob
import os
import pickle
import signal
import threading
import time

import pytest
import ray

from raylog import Admin, Consumer, Producer, TopicPartition
from raylog.errors import NotEnoughReplicasAfterAppendError, NotEnoughReplicasError, RaylogError
from tests.helpers import wait_until

SAFE = {"min.insync.replicas": "2", "replica.lag.time.max.ms": "2000"}
# For tests that assert the ISR does not change: a follower drops out only through a fault, as
# 10 s of lag is a bound a loaded 2-core machine's scheduling alone does not reach.
STEADY = {**SAFE, "replica.lag.time.max.ms": "10000"}


def describe(cluster, topic: str):
    return Admin(cluster).describe_topics([topic])[0].partitions[0]


def read_values(cluster, topic: str, timeout_s: float = 60) -> list[bytes]:
    """Every committed value of partition 0, from its log start."""
    consumer = Consumer(cluster, topic, auto_offset_reset="earliest")
    tp = TopicPartition(topic, 0)
    (end,) = wait_until(lambda: _end_offset(consumer, tp), timeout_s=timeout_s, message="an end offset")
    values: list[bytes] = []
    position = 0
    deadline = time.monotonic() + timeout_s
    while position < end and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=1_000).values():
            values.extend(r.value for r in records)
            position = records[-1].offset + 1
    consumer.close()
    return values


def _end_offset(consumer, tp) -> tuple[int] | None:
    try:
        return (consumer.end_offsets([tp])[tp],)
    except RaylogError:
        return None


class Writer(threading.Thread):
    """Produces numbered records with acks=all until stopped; remembers what was acknowledged."""

    def __init__(self, cluster, topic: str):
        super().__init__(daemon=True)
        # A cluster handle of its own (a copy has its own metadata cache): only the
        # producer's own refreshes can route it to a new leader, not the test's describes.
        own = pickle.loads(pickle.dumps(cluster))
        self.producer = Producer(own, acks="all", linger_ms=1, retry_backoff_ms=50, delivery_timeout_ms=60_000)
        self.topic = topic
        self.acknowledged: list[bytes] = []
        self.stop = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            futures = [(b"%07d" % n, self.producer.send(self.topic, b"%07d" % n)) for n in range(i, i + 50)]
            i += 50
            for value, future in futures:
                try:
                    future.result(timeout=90)
                    self.acknowledged.append(value)
                except RaylogError:
                    pass

    def finish(self) -> list[bytes]:
        self.stop.set()
        self.join(timeout=120)
        self.producer.close(timeout=30)
        return self.acknowledged


def test_leader_node_dies_during_acks_all_writes_and_nothing_acknowledged_is_lost(multinode, replicated_topic):
    """Killing the leader's node mid-stream: a new ISR leader takes over, every acknowledged
    record is read back in order, and the partition takes writes again."""
    cluster, brokers = multinode
    topic = replicated_topic(**SAFE)
    writer = Writer(cluster, topic)
    writer.start()
    wait_until(lambda: len(writer.acknowledged) >= 500, timeout_s=60)
    old = describe(cluster, topic)
    brokers.kill_broker(old.leader)
    wait_until(lambda: describe(cluster, topic).leader not in (old.leader, -1), timeout_s=30, message="a new leader")
    count = len(writer.acknowledged)
    wait_until(lambda: len(writer.acknowledged) >= count + 500, timeout_s=60, message="writes after fail-over")
    acknowledged = writer.finish()
    values = read_values(cluster, topic)
    assert set(acknowledged) <= set(values), "an acknowledged record was lost"
    assert values == sorted(values), "records out of order"
    brokers.start_broker(old.leader)
    wait_until(lambda: set(describe(cluster, topic).isr) == {0, 1, 2}, timeout_s=60, message="the broker rejoining")


def test_follower_dies_isr_shrinks_and_writes_go_on(multinode, replicated_topic):
    """Killing a follower's node shrinks the ISR; acks=all writes continue with two replicas."""
    cluster, brokers = multinode
    topic = replicated_topic(**SAFE)
    with Producer(cluster, acks="all") as producer:
        producer.send(topic, b"before").result(timeout=30)
        info = describe(cluster, topic)
        follower = next(r for r in info.replicas if r != info.leader)
        brokers.kill_broker(follower)
        wait_until(lambda: follower not in describe(cluster, topic).isr, timeout_s=30, message="ISR shrink")
        assert producer.send(topic, b"after").result(timeout=30).offset == 1
    brokers.start_broker(follower)
    wait_until(lambda: follower in describe(cluster, topic).isr, timeout_s=60, message="ISR expand")
    assert read_values(cluster, topic) == [b"before", b"after"]


def test_a_leader_back_on_a_new_node_before_its_death_was_seen_hands_over_and_writes_go_on(multinode, replicated_topic):
    """A leader's node killed and its broker back on a new node at once, before the controller
    saw it gone: the broker restarted from its disk, so it hands its leadership to another ISR
    member and leaves the ISR until it catches up (Kafka's registration with a new incarnation).
    That decision must reach the new leader and the other replicas, not only the journal:
    acks=all writes go on, the broker rejoins, and every replica holds the controller's state
    (the shared teardown checks that last one)."""
    cluster, brokers = multinode
    topic = replicated_topic(**SAFE)
    with Producer(cluster, acks="all") as producer:
        producer.send(topic, b"before").result(timeout=30)
    # Another leader needs another ISR member: on a loaded machine the followers' processes
    # can start after replica.lag.time.max.ms, and the ISR is the leader alone until they
    # catch up (the broker then rightly leads again from its disk, as the suite saw once).
    wait_until(lambda: len(describe(cluster, topic).isr) == 3, timeout_s=60, message="every replica in sync")
    old = describe(cluster, topic).leader
    brokers.kill_broker(old)
    brokers.start_broker(old)
    wait_until(lambda: describe(cluster, topic).leader not in (-1, old), timeout_s=60, message="another leader")
    with Producer(cluster, acks="all") as producer:
        assert producer.send(topic, b"after").result(timeout=30).offset == 1
    wait_until(lambda: old in describe(cluster, topic).isr, timeout_s=60, message="the broker back in the ISR")
    assert read_values(cluster, topic) == [b"before", b"after"]


def test_records_deleted_while_a_follower_is_down_are_deleted_on_it_when_it_is_back(multinode, replicated_topic):
    """DeleteRecords with a follower's node dead and out of the ISR: answered once the ISR
    deleted; the follower, back on a new node from its disk with the records, follows the
    leader's log start, so no replica keeps them, and the rest stays readable."""
    cluster, brokers = multinode
    topic = replicated_topic(**SAFE)
    tp = TopicPartition(topic, 0)
    with Producer(cluster, acks="all") as producer:
        for i in range(10):
            producer.send(topic, b"%d" % i).result(timeout=30)
    info = describe(cluster, topic)
    follower = next(r for r in info.replicas if r != info.leader)
    brokers.kill_broker(follower)
    # (Its process may outlive its node for a moment and delete too: wait until it is out.)
    wait_until(lambda: follower not in describe(cluster, topic).isr, timeout_s=30, message="ISR shrink")
    assert Admin(cluster).delete_records({tp: 6}, timeout_ms=60_000) == {tp: 6}  # without it
    brokers.start_broker(follower)
    wait_until(lambda: follower in describe(cluster, topic).isr, timeout_s=60, message="the follower back in the ISR")
    handles = ray.get(cluster.controller.replica_handles.remote(topic), timeout=60)

    def log_starts() -> list[int]:  # the follower applies the leader's log start with its fetch's answer
        return [s["log_start_offset"] for s in ray.get([h.state.remote() for h in handles.values()], timeout=30)]

    wait_until(lambda: log_starts() == [6, 6, 6], timeout_s=30, message="every replica's log start at 6")
    assert read_values(cluster, topic) == [b"%d" % i for i in range(6, 10)]


def test_two_of_three_die_not_enough_replicas_then_they_rejoin(multinode, replicated_topic):
    """With two of three replicas gone, acks=all is refused (NOT_ENOUGH_REPLICAS) and nothing
    acknowledged is lost; when they come back they rejoin and writes succeed again."""
    cluster, brokers = multinode
    topic = replicated_topic(**SAFE)
    with Producer(cluster, acks="all") as producer:
        acknowledged = [producer.send(topic, b"%d" % i).result(timeout=30) for i in range(10)]
    info = describe(cluster, topic)
    followers = [r for r in info.replicas if r != info.leader]
    for broker in followers:
        brokers.kill_broker(broker)
    wait_until(lambda: describe(cluster, topic).isr == (info.leader,), timeout_s=30, message="ISR down to the leader")
    with Producer(cluster, acks="all", retries=0) as producer:
        with pytest.raises(NotEnoughReplicasError):
            producer.send(topic, b"refused").result(timeout=30)
    for broker in followers:
        brokers.start_broker(broker)
    wait_until(lambda: set(describe(cluster, topic).isr) == {0, 1, 2}, timeout_s=90, message="both rejoining")
    with Producer(cluster, acks="all") as producer:
        producer.send(topic, b"again").result(timeout=30)
    values = read_values(cluster, topic)
    assert values[: len(acknowledged)] == [b"%d" % i for i in range(len(acknowledged))]
    # The refused write may still be there (at most once): NOT_ENOUGH_REPLICAS_AFTER_APPEND
    # means written but not acknowledged, as in Kafka.
    assert values[-1] == b"again" and set(values[len(acknowledged) : -1]) <= {b"refused"}


def test_killed_controller_restarts_with_all_metadata(multinode, replicated_topic):
    """The controller actor killed (restart allowed) replays its journal: same topics, leaders, epochs."""
    cluster, _ = multinode
    topic = replicated_topic(**SAFE)
    before = describe(cluster, topic)
    ray.kill(cluster.controller, no_restart=False)
    after = wait_until(lambda: _describe_quietly(cluster, topic), timeout_s=60, message="the controller back")
    assert (after.replicas, after.leader, after.leader_epoch) == (before.replicas, before.leader, before.leader_epoch)
    with Producer(cluster, acks="all") as producer:
        producer.send(topic, b"ok").result(timeout=30)


def test_acks_1_can_lose_acknowledged_data_where_safe_settings_cannot(multinode, replicated_topic):
    """Jepsen's 2013 case: with acks=1 and min.insync.replicas=1 a leader alone in its ISR
    acknowledges writes its followers never copied; when it dies and a follower takes over
    (unclean election) those acknowledged records are gone. With acks=all and
    min.insync.replicas=2 the same writes, in the same fault (one leader for both topics),
    are refused, so nothing acknowledged is lost."""
    cluster, brokers = multinode
    unsafe = replicated_topic(
        **{"min.insync.replicas": "1", "unclean.leader.election.enable": "true", "replica.lag.time.max.ms": "2000"}
    )
    safe = replicated_topic(**SAFE)
    _lead_from(cluster, safe, describe(cluster, unsafe).leader)
    reader = Consumer(cluster, unsafe, auto_offset_reset="earliest")
    acknowledged = _writes_while_alone_then_leader_dies(cluster, brokers, {unsafe: 1, safe: "all"}, reader=reader)
    assert acknowledged[safe] == []
    assert acknowledged[unsafe], "acks=1 should acknowledge writes to a leader alone in its ISR"
    assert not set(acknowledged[unsafe]) & set(read_values(cluster, unsafe)), "acks=1 lost nothing?"
    # KIP-320: the reader had read the lost records; the new leader reuses their offsets (and
    # goes past them before the reader polls again). It must notice the truncation and read
    # what is there now, not carry on from its position and skip those offsets.
    count = len(acknowledged[unsafe]) + 3
    with Producer(cluster, acks="all") as producer:
        written = {
            producer.send(unsafe, b"after-%d" % i).result(timeout=30).offset: b"after-%d" % i for i in range(count)
        }
    seen = {}
    wait_until(lambda: _poll_into(reader, seen) and set(written) <= set(seen), timeout_s=60, message="the new records")
    assert {o: seen[o] for o in written} == written
    reader.close()


def _lead_from(cluster, topic: str, broker: int) -> None:
    """Make ``broker`` the leader of ``topic`` (its replicas reordered, a preferred election)."""
    replicas = describe(cluster, topic).replicas
    admin = Admin(cluster)
    admin.alter_partition_reassignments({TopicPartition(topic, 0): [broker, *(r for r in replicas if r != broker)]})

    def reordered_in_sync() -> bool:  # a preferred election only moves leadership to an in-sync replica
        partition = describe(cluster, topic)
        return partition.replicas[0] == broker and set(partition.isr) == {0, 1, 2}

    wait_until(reordered_in_sync, timeout_s=60, message="the replicas reordered and in sync")
    admin.elect_leaders([topic])
    wait_until(lambda: describe(cluster, topic).leader == broker, timeout_s=60, message=f"broker {broker} leading")


def _poll_into(consumer, seen: dict) -> bool:
    for records in consumer.poll(timeout_ms=500).values():
        seen.update((r.offset, r.value) for r in records)
    return True


def _writes_while_alone_then_leader_dies(cluster, brokers, acks: dict[str, int | str], reader=None) -> dict:
    """Kill the followers of the topics ``acks`` names (one leader for all), write to the lone
    leader with each topic's acks (``reader`` reads what is acknowledged), kill it, bring the
    followers back (one of them leads where unclean election allows), then the old leader.
    Returns what was acked, by topic."""
    topics = list(acks)

    def every(predicate) -> bool:
        return all(predicate(topic) for topic in topics)

    wait_until(lambda: every(lambda t: set(describe(cluster, t).isr) == {0, 1, 2}), timeout_s=60, message="full ISRs")
    leaders = {describe(cluster, topic).leader for topic in topics}
    assert len(leaders) == 1, f"one leader for {topics}: {leaders}"
    (leader,) = leaders
    followers = [b for b in describe(cluster, topics[0]).replicas if b != leader]
    for broker in followers:
        brokers.kill_broker(broker)
    wait_until(
        lambda: every(lambda t: describe(cluster, t).isr == (leader,)),
        timeout_s=30,
        message=f"ISRs down to leader {leader}",
    )
    acknowledged = {topic: [] for topic in topics}
    for topic, values in acknowledged.items():
        with Producer(cluster, acks=acks[topic], retries=0) as producer:
            for i in range(5):
                try:
                    producer.send(topic, b"alone-%d" % i).result(timeout=30)
                    values.append(b"alone-%d" % i)
                except (NotEnoughReplicasError, NotEnoughReplicasAfterAppendError):
                    # After append: the controller's ISR shrink had not reached the leader yet
                    # (its push is asynchronous); either way the write is not acknowledged.
                    pass
    if reader is not None:
        read = {v for values in acknowledged.values() for v in values}
        seen = {}
        wait_until(lambda: _poll_into(reader, seen) and read <= set(seen.values()), timeout_s=30)
    brokers.kill_broker(leader)
    # Followers come back only once the controller has seen the leader die: a killed node's
    # worker may answer calls for a moment, and a follower fetching from it would copy the writes.
    wait_until(
        lambda: every(lambda t: getattr(_describe_quietly(cluster, t), "leader", leader) != leader),
        timeout_s=60,
        message="the controller to notice the leader's death",
    )
    for broker in followers:
        brokers.start_broker(broker)
    # Where writes were acknowledged the old leader may only come back once a follower leads:
    # were it back first, it would still be the whole ISR and a clean election would hand it
    # its acknowledged writes back.
    wait_until(
        lambda: every(
            lambda t: (
                getattr(_describe_quietly(cluster, t), "leader", None) in followers
                if acknowledged[t]
                else _describe_quietly(cluster, t) is not None
            )
        ),
        timeout_s=60,
        message="an unclean election of a follower where writes were acknowledged",
    )
    brokers.start_broker(leader)
    try:
        wait_until(lambda: every(lambda t: set(describe(cluster, t).isr) == {0, 1, 2}), timeout_s=90)
    except AssertionError:
        states = {
            t: {k: _state_quietly(h) for k, h in ray.get(cluster.controller.replica_handles.remote(t)).items()}
            for t in topics
        }
        raise AssertionError(
            f"not back in sync: {[describe(cluster, t) for t in topics]}; replicas: {states}"
        ) from None
    return acknowledged


def _describe_quietly(cluster, topic):
    try:
        return describe(cluster, topic)
    except (RaylogError, ray.exceptions.RayError):
        return None


def _state_quietly(replica):
    try:
        return ray.get(replica.state.remote(), timeout=10)
    except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError) as exc:
        return type(exc).__name__


def test_a_follower_keeps_fetching_after_a_corrupt_batch(multinode, replicated_topic):
    """Defect 8: a follower that fetches a batch failing its CRC (flipped on the leader's disk)
    logs and counts the error and fetches again, instead of ending its fetch loop for good; once
    the leader serves it whole, the follower catches up and rejoins the ISR."""
    cluster, brokers = multinode
    topic = replicated_topic(**SAFE)
    with Producer(cluster, acks="all") as producer:
        producer.send(topic, b"before").result(timeout=30)
    info = describe(cluster, topic)
    handles = ray.get(cluster.controller.replica_handles.remote(topic))
    leader = handles[(0, info.leader)]
    followers = [r for r in info.replicas if r != info.leader]
    state = handles[(0, followers[0])].state
    pids = [ray.get(handles[(0, r)].state.remote())["pid"] for r in followers]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        with Producer(cluster, acks=1) as producer:
            # "first" answers the stopped followers' parked long polls; once the leader holds
            # none, the next batch can only reach them by a fetch made after they resume,
            # which reads it corrupt.
            producer.send(topic, b"first").result(timeout=30)
            wait_until(
                lambda: not ray.get(leader.state.remote())["waiting"].get("replication"),
                timeout_s=60,
                message="the parked follower fetches answered",
            )
            producer.send(topic, b"x" * 1000).result(timeout=30)
        (segment,) = glob.glob(os.path.join(brokers.data_dir(info.leader), f"{topic}-0*", "*.log"))
        with open(segment, "r+b") as f:
            f.seek(-10, os.SEEK_END)  # inside the last batch's value: its CRC no longer matches
            original = f.read(1)
            f.seek(-10, os.SEEK_END)
            f.write(bytes([original[0] ^ 0xFF]))
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    wait_until(lambda: ray.get(state.remote())["fetch_errors"] > 0, timeout_s=60, message="the corrupt batch fetched")
    assert "CorruptRecordError" in ray.get(state.remote())["last_fetch_error"]
    with open(segment, "r+b") as f:
        f.seek(-10, os.SEEK_END)
        f.write(original)
    leader_end = ray.get(leader.state.remote())["log_end_offset"]
    wait_until(lambda: ray.get(state.remote())["log_end_offset"] == leader_end, timeout_s=60, message="catching up")
    wait_until(lambda: set(describe(cluster, topic).isr) == set(info.replicas), timeout_s=60, message="a full ISR")


def test_one_followers_report_does_not_move_a_live_leader(multinode, replicated_topic):
    """Defect 11 (``leader_unreachable`` fired on transient errors from any follower): a
    follower's report that it cannot reach the leader makes the controller call the leader
    itself; a leader that answers keeps leading, in the same epoch, and keeps acknowledging."""
    cluster, _ = multinode
    # From a full ISR every follower has fetched into, with a lag bound the machine's load alone
    # does not reach: the report must change nothing at all, and nothing else may either.
    topic = replicated_topic(**STEADY)
    info, _ = _written_with_full_isr(cluster, topic, b"before")
    ray.get(cluster.controller.leader_unreachable.remote(topic, 0, info.leader_epoch), timeout=30)
    after = describe(cluster, topic)
    assert (after.leader, after.leader_epoch, sorted(after.isr)) == (info.leader, info.leader_epoch, sorted(info.isr))
    with Producer(cluster, acks="all") as producer:
        producer.send(topic, b"after").result(timeout=30)
    assert read_values(cluster, topic) == [b"before", b"after"]


def _written_with_full_isr(cluster, topic: str, value: bytes):
    """Write ``value`` with acks=all and wait until every replica holds it and the ISR is whole:
    ``(the partition's metadata, its leader's actor)``. (An ISR seen whole before every
    follower has fetched is only the one the topic was created with: it may still shrink.)"""
    with Producer(cluster, acks="all") as producer:
        producer.send(topic, value).result(timeout=30)
    handles = ray.get(cluster.controller.replica_handles.remote(topic))

    def settled():
        info = describe(cluster, topic)
        ends = [ray.get(handles[(0, broker)].state.remote(), timeout=10)["log_end_offset"] for broker in (0, 1, 2)]
        return info if set(info.isr) == {0, 1, 2} and ends == [1, 1, 1] else None

    info = wait_until(settled, timeout_s=90, message="every replica caught up, a full ISR")
    return info, handles[(0, info.leader)]


def test_parked_client_waits_never_starve_replication_or_control(multinode, replicated_topic):
    """Issue 25, defect 4: more long-polling consumer fetches than a leader has threads for
    client calls used to take every thread, so the followers' fetches and the controller's
    probe queued behind them: the HW stood still, acks=all produces timed out and a healthy
    leader was demoted. Now each kind of call has its own pool (Ray concurrency groups): while
    the consumers' polls stay parked, an acks=all produce is acknowledged, the leader keeps its
    epoch and the ISR stays whole; the produce then wakes every poll with its record."""
    from raylog.actors.replica import CONCURRENCY_GROUPS
    from raylog.protocol import FetchRequest

    cluster, _ = multinode
    topic = replicated_topic(**STEADY)
    info, leader = _written_with_full_isr(cluster, topic, b"before")
    parked = CONCURRENCY_GROUPS["fetch"] + 8  # more than the pool: some wait in Ray's queue
    polls = [leader.fetch.remote(FetchRequest(offset=1, min_bytes=1, max_wait_ms=60_000)) for _ in range(parked)]
    wait_until(
        lambda: ray.get(leader.state.remote(), timeout=10)["waiting"]["fetch"] == CONCURRENCY_GROUPS["fetch"],
        timeout_s=60,
        message="every fetch thread parked",
    )
    with Producer(cluster, acks="all", request_timeout_ms=20_000, delivery_timeout_ms=30_000) as producer:
        producer.send(topic, b"after").result(timeout=40)
    after = describe(cluster, topic)
    assert (after.leader, after.leader_epoch, sorted(after.isr)) == (info.leader, info.leader_epoch, [0, 1, 2])
    answers = ray.get(polls, timeout=120)
    assert all(a.error_code == 0 and len(a.records) > 0 for a in answers)
    assert read_values(cluster, topic) == [b"before", b"after"]


def test_256_concurrent_acks_all_produces_on_one_leader_all_answer(multinode, replicated_topic):
    """Issue 25's fan-in: 256 acks=all produces at once on one RF3 leader (min ISR 2), eight
    times its produce pool: every one is acknowledged within its timeout, at an offset of its
    own, the leader keeps its epoch and the ISR never shrinks (a follower's fetch never waits
    behind the parked produces)."""
    from raylog.common import record_batch
    from raylog.protocol import ProduceRequest

    cluster, _ = multinode
    topic = replicated_topic(**STEADY)
    info, leader = _written_with_full_isr(cluster, topic, b"first")
    calls = [
        leader.produce.remote(ProduceRequest(record_batch.build([b"%03d" % i]), acks=-1, timeout_ms=60_000))
        for i in range(256)
    ]
    answers = ray.get(calls, timeout=180)
    assert [a.error_code for a in answers] == [0] * 256
    assert sorted(a.base_offset for a in answers) == list(range(1, 257))
    after = describe(cluster, topic)
    assert after == info  # no change of leader or ISR at all: the partition epoch did not move
    assert sorted(read_values(cluster, topic)) == sorted([b"first"] + [b"%03d" % i for i in range(256)])
