"""Kafka's transactions system test on a real multi-node Ray cluster, as the oracle: the
campaign ``raylog bench txn-copier`` runs at full size (100,000 records, each fault three
times) and ``tests/cluster/test_transaction_faults.py`` runs as a quick slice.

A transactional copier (a Ray actor on the head node, so that it can be killed for real)
reads an input topic and copies every record, in transactions of up to ``txn_records``
records, to the same partition of an output topic, committing its consumer group's offsets in
each transaction. Meanwhile (:func:`copy_through_faults`) the copier is killed and replaced
(same ``transactional_id``) once it has written a transaction and once while it commits
one, the broker node leading an output partition is killed and brought back, and the
transaction coordinator (the leader of the id's ``__transaction_state`` partition) is killed
as an actor and with its node: one round is each of these five faults once, and the next
fault starts as soon as the last one healed and the copy went on. A read_committed reader
follows the output all along. The copy is paced until the last fault healed (so that it
outlasts them, and most faults find a transaction open), then copies the rest at full speed.

At the end the output, read with read_committed, must equal the input partition by
partition: same keys and values, same order, none lost, none twice. The reader must never
have seen a record the final output does not hold at that offset (an aborted read,
Jepsen's G1a), must have seen each partition as a prefix of the final output, and never a
record before its transaction's commit began (an intermediate read, G1b). Each copied record
carries its transaction's tag in a header, and a ledger actor notes when each transaction's
commit began and whether it was committed or aborted, so that the read_uncommitted view
can be checked too: a transaction the copier saw committed is in the read_committed view
whole, and a record of the read_uncommitted view that read_committed does not return
belongs to a transaction that never committed. A broken promise raises :class:`CopyFailed`.
"""

from __future__ import annotations

import collections
import dataclasses
import pickle
import threading
import time
import uuid
from collections.abc import Callable

import pyarrow as pa
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from raylog import Admin, Consumer, NewTopic, Producer, TopicPartition
from raylog.chaos import wait_until
from raylog.common.names import OFFSETS_TOPIC, TRANSACTION_TOPIC
from raylog.errors import KafkaTimeoutError, ProducerFencedError, RaylogError

#: Records preloaded into the input (Kafka's system test copies 100,000).
RECORDS = 100_000
PARTITIONS = 3
#: Records a copier transaction takes at most.
TXN_RECORDS = 1_000
#: The copier's pace until the faults are done (it "processes" each transaction's records,
#: its transaction open, for as long as this rate allows): the copy then lasts long enough for
#: every fault, and most faults find a transaction open with its records written.
COPY_RECORDS_PER_S = 800
#: Rounds of faults: each round injects every fault (every variant of each kind) once.
ROUNDS = 2
TOPIC_CONFIG = {"min.insync.replicas": "2"}
TRANSACTIONAL_ID = "copier-0"
GROUP = "copier-group"
#: Bounds on the waits (the machine has two cores and is shared: generous, never fixed).
PROGRESS_TIMEOUT_S = 120
HEAL_TIMEOUT_S = 120
COPY_TIMEOUT_S = 600
READ_TIMEOUT_S = 120
#: Header keys of a copied record: its transaction's tag, and how many records that
#: transaction wrote to the record's partition.
TXN_HEADER = "txn"
COUNT_HEADER = "n"


class CopyFailed(AssertionError):
    """A promise of the transactions system test was broken (or the campaign could not test it)."""


def _require(ok: object, message: str) -> None:
    if not ok:
        raise CopyFailed(message)


# --- the copier and its ledger (Ray actors on the head node) ---------------------------


class Ledger:
    """Notes, per transaction tag, when each step of its end began or finished (wall clock,
    so that the test process can compare with when its reader saw a record)."""

    def __init__(self) -> None:
        self.events: dict[str, dict[str, float]] = collections.defaultdict(dict)
        self.errors: list[str] = []  # what the copiers met, killed ones' too
        self.paced = True  # until the campaign's faults are done

    def pace(self) -> bool:
        """Whether the copiers keep to their pace (they copy at full speed once the faults are done)."""
        return self.paced

    def faults_done(self) -> None:
        self.paced = False

    def note(self, tag: str, kind: str, at: float) -> None:
        self.events[tag][kind] = at

    def error(self, text: str) -> None:
        self.errors.append(text)

    def all_errors(self) -> list[str]:
        return list(self.errors)

    def all(self) -> dict[str, dict[str, float]]:
        return dict(self.events)

    def committing(self) -> set[str]:
        """Transactions whose commit began and was not seen to end."""
        return {tag for tag, e in self.events.items() if "commit" in e and "committed" not in e and "abort" not in e}

    def written_open(self) -> set[str]:
        """Transactions whose records are all written and that did not begin to end."""
        return {tag for tag, e in self.events.items() if "written" in e and "commit" not in e and "abort" not in e}


class Copier:
    """Kafka's TransactionalMessageCopier: copies ``source`` to the same partitions of
    ``sink`` in transactions of at most ``txn_records`` records, committing the group's
    offsets (positions) in each. Each transaction's records carry its tag
    (``<name>/<sequence>``) in a header; the ledger notes how each one ended."""

    def __init__(
        self,
        cluster,
        name: str,
        source: str,
        sink: str,
        ledger,
        txn_records: int = TXN_RECORDS,
        records_per_s: float | None = None,
    ):
        self.cluster = cluster
        self.records_per_s = records_per_s
        self.name = name
        self.source, self.sink = source, sink
        self.ledger = ledger
        self.txn_records = txn_records
        self.tps = [TopicPartition(source, p) for p in range(PARTITIONS)]
        self.consumer = Consumer(
            cluster,
            group_id=GROUP,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_poll_records=txn_records,
            fetch_max_wait_ms=100,
        )
        self.consumer.assign(self.tps)
        self.producer: Producer | None = None
        self.sequence = 0
        self.tag: str | None = None  # the open transaction's
        self.ends: dict[TopicPartition, int] = {}
        self.stats: collections.Counter = collections.Counter()
        self.committed_tags: list[str] = []
        self.errors: list[str] = []

    # --- the steps --------------------------------------------------------------------

    def start(self) -> dict:
        """init_transactions first (fencing older instances, finishing their transaction),
        then the group's committed offsets."""
        self._new_producer()
        self._rewind()
        self.ends = self.consumer.end_offsets(self.tps)
        return self.positions()

    def run(self) -> dict:
        """Copy until every input partition is copied; the copier's summary. Stops at the
        first ProducerFencedError (``fenced`` in the summary)."""
        self.start()
        try:
            while not self.done():
                self.copy_one()
        except ProducerFencedError as exc:
            self._note("fenced")
            return self.summary(fenced=repr(exc))
        self.producer.close(timeout=30)
        return self.summary()

    def copy(self, transactions: int) -> tuple[dict, list[str]]:
        """Copy ``transactions`` transactions; the positions, and the tags committed."""
        for _ in range(transactions):
            self.copy_one()
        return self.positions(), list(self.committed_tags)

    def copy_one(self) -> None:
        """One transaction; on an abortable or retriable error it is aborted (or the
        producer started anew) and the positions go back to the committed offsets."""
        try:
            self._transaction()
        except ProducerFencedError:
            raise
        except RaylogError as exc:
            self._error(f"{self.tag}: {type(exc).__name__}: {exc}")
            self.stats[type(exc).__name__] += 1
            self._recover()

    def open_transaction(self) -> tuple[str, int]:
        """Begin a transaction and write one poll's records in it, without committing; its
        tag and how many records it wrote (all acknowledged)."""
        records = self._poll_batch()
        self._begin()
        futures = self._send(records)
        for future in futures:
            future.result(timeout=60)
        return self.tag, len(records)

    def finish_zombie(self) -> dict:
        """Go on with the open transaction after a newer instance fenced this one: write the
        next poll's records, send the offsets, commit. What each step raised."""
        self.tag = f"{self.name}/{self.sequence}"  # what it writes from now on, told apart
        self.sequence += 1
        outcome: dict = {"tag": self.tag}
        records = self._poll_batch()
        outcome["records"] = len(records)
        futures = self._send(records)
        for step, call in (
            ("send_offsets", lambda: self.producer.send_offsets_to_transaction(self.positions_of(), GROUP)),
            ("commit", lambda: self.producer.commit_transaction(timeout=60)),
            ("begin", self.producer.begin_transaction),
        ):
            try:
                call()
                outcome[step] = "ok"
            except Exception as exc:  # noqa: BLE001 — reported to the test
                outcome[step] = type(exc).__name__
        sends = collections.Counter()
        for future in futures:
            try:
                future.result(timeout=60)
                sends["ok"] += 1
            except Exception as exc:  # noqa: BLE001
                sends[type(exc).__name__] += 1
        outcome["sends"] = dict(sends)
        return outcome

    def done(self) -> bool:
        return all(self.consumer.position(tp) >= self.ends[tp] for tp in self.tps)

    def positions(self) -> dict[int, int]:
        return {tp.partition: self.consumer.position(tp) for tp in self.tps}

    def positions_of(self) -> dict[TopicPartition, int]:
        return {tp: self.consumer.position(tp) for tp in self.tps}

    def summary(self, fenced: str | None = None) -> dict:
        return {"name": self.name, "stats": dict(self.stats), "errors": self.errors[-20:], "fenced": fenced}

    # --- internals --------------------------------------------------------------------

    def _transaction(self) -> None:
        records = self._poll_batch()
        if not records:
            return
        self._begin()
        began = time.monotonic()
        futures = self._send(records)
        self.producer.flush()
        for future in futures:
            future.result(timeout=0)  # raises the send's error, if any
        self._note("written")
        if self.records_per_s and ray.get(self.ledger.pace.remote(), timeout=60):
            time.sleep(max(0.0, len(records) / self.records_per_s - (time.monotonic() - began)))
        self.producer.send_offsets_to_transaction(self.positions_of(), GROUP)
        self._note("commit")
        for attempt in range(3):
            try:
                self.producer.commit_transaction()
                break
            except KafkaTimeoutError:  # "call again": answered once the first commit completes
                if attempt == 2:
                    raise
                self.stats["commit-retried"] += 1
        self._note("committed")
        self.stats["committed"] += 1
        self.committed_tags.append(self.tag)
        self.tag = None

    def _begin(self) -> None:
        self.tag = f"{self.name}/{self.sequence}"
        self.sequence += 1
        self.producer.begin_transaction()

    def _send(self, records: list) -> list:
        counts = collections.Counter(r.partition for r in records)
        return [
            self.producer.send(
                self.sink,
                r.value,
                key=r.key,
                partition=r.partition,
                headers=[(TXN_HEADER, self.tag.encode()), (COUNT_HEADER, b"%d" % counts[r.partition])],
            )
            for r in records
        ]

    def _poll_batch(self) -> list:
        """Up to ``txn_records`` records: polls until that many, or until a poll after the
        first records brings none (caught up, for now)."""
        records: list = []
        deadline = time.monotonic() + 2.0
        while len(records) < self.txn_records and time.monotonic() < deadline and not self.done():
            polled = self.consumer.poll(timeout_ms=200, max_records=self.txn_records - len(records))
            got = [r for rs in polled.values() for r in rs]
            if not got and records:
                break
            records.extend(got)
        return records

    def _recover(self) -> None:
        """Abort the open transaction (if that fails too, a new producer's
        init_transactions finishes it), then go back to the committed offsets."""
        if self.tag is not None:
            self._note("abort")
            try:
                self.producer.abort_transaction()
                self._note("aborted")
                self.stats["aborted"] += 1
            except ProducerFencedError:
                raise
            except RaylogError as exc:
                self._error(f"{self.tag}: abort: {type(exc).__name__}: {exc}")
                self.stats["reinit"] += 1
                self._new_producer()
            self.tag = None
        self._rewind()

    def _new_producer(self) -> None:
        if self.producer is not None:
            try:
                self.producer.close(timeout=1)
            except RaylogError:
                pass
        self.producer = Producer(
            self.cluster,
            transactional_id=TRANSACTIONAL_ID,
            linger_ms=5,
            request_timeout_ms=10_000,
            delivery_timeout_ms=60_000,
        )
        deadline = time.monotonic() + 180
        while True:
            try:
                self.producer.init_transactions()
                return
            except ProducerFencedError:
                raise
            except RaylogError as exc:
                self._error(f"init_transactions: {type(exc).__name__}: {exc}")
                if time.monotonic() > deadline:
                    raise

    def _rewind(self) -> None:
        """Seek to the group's committed offsets (from the beginning where none)."""
        deadline = time.monotonic() + 180
        while True:
            try:
                committed = self.consumer.committed(self.tps)
                break
            except RaylogError as exc:
                self._error(f"committed: {type(exc).__name__}: {exc}")
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        for tp in self.tps:
            found = committed.get(tp)
            if found is None:
                self.consumer.seek_to_beginning(tp)
            else:
                self.consumer.seek(tp, found.offset)

    def _error(self, text: str) -> None:
        self.errors.append(text)
        ray.get(self.ledger.error.remote(f"{self.name}: {text}"), timeout=60)

    def _note(self, kind: str) -> None:
        if self.tag is not None:
            ray.get(self.ledger.note.remote(self.tag, kind, time.time()), timeout=60)


def on_head(cls, **options):
    """A Ray actor of ``cls`` on this (the head) node, which no fault kills."""
    strategy = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    return ray.remote(cls).options(num_cpus=0, scheduling_strategy=strategy, **options)


# --- the reader, reads, and the cluster ------------------------------------------------


class Reader(threading.Thread):
    """Polls every output partition read_committed until stopped, noting each record with
    the wall-clock time the poll returned it."""

    def __init__(self, cluster, topic: str):
        super().__init__(daemon=True)
        own = pickle.loads(pickle.dumps(cluster))  # a metadata cache of its own
        self.consumer = Consumer(own, isolation_level="read_committed", auto_offset_reset="earliest")
        self.consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        #: partition -> [(offset, key, value, tag, seen at)]
        self.seen: dict[int, list[tuple]] = {p: [] for p in range(PARTITIONS)}
        self.count = 0
        self.errors: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                polled = self.consumer.poll(timeout_ms=500)
            except RaylogError as exc:
                self.errors.append(f"{type(exc).__name__}: {exc}")
                self.stop.wait(0.1)
                continue
            at = time.time()
            for tp, records in polled.items():
                self.seen[tp.partition].extend((r.offset, r.key, r.value, _header(r, TXN_HEADER), at) for r in records)
                self.count += len(records)

    def finish(self) -> None:
        self.stop.set()
        self.join(timeout=60)
        self.consumer.close()


def _header(record, key: str) -> str | None:
    for k, v in record.headers:
        if k == key:
            return v.decode()
    return None


def read_all(cluster, topic: str, isolation_level: str = "read_committed") -> dict[int, list[tuple]]:
    """Every record of every partition from the start up to the end offset (the LSO
    read_committed): partition -> [(offset, key, value, tag, count)]."""
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer = Consumer(cluster, isolation_level=isolation_level, auto_offset_reset="earliest")
    try:
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        records: dict[int, list[tuple]] = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + READ_TIMEOUT_S
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() >= deadline:
                raise CopyFailed(
                    f"{topic} not read to {ends} in time ({isolation_level}): at "
                    f"{ {tp.partition: consumer.position(tp) for tp in tps} }, read "
                    f"{ {p: len(rs) for p, rs in records.items()} }"
                )
            for tp, rs in consumer.poll(timeout_ms=500).items():
                records[tp.partition].extend(
                    (r.offset, r.key, r.value, _header(r, TXN_HEADER), _header(r, COUNT_HEADER)) for r in rs
                )
        return records
    finally:
        consumer.close()


def quietly(fn, *args):
    """``fn(*args)``, or None while the cluster is failing over."""
    try:
        return fn(*args)
    except (RaylogError, ray.exceptions.RayError):
        return None


def partition_info(admin: Admin, topic: str, partition: int):
    return admin.describe_topics([topic])[0].partitions[partition]


def out_of_sync(admin: Admin, topics: list[str]) -> list[str]:
    """The partitions of ``topics`` without a leader or with a replica out of the ISR.

    Raises:
        RaylogError: as describe_topics (a controller failing over).
    """
    return [
        f"{t.name}-{p.partition} leader {p.leader} isr {sorted(p.isr)} replicas {list(p.replicas)}"
        for t in admin.describe_topics(topics)
        for p in t.partitions
        if p.leader < 0 or set(p.isr) != set(p.replicas)
    ]


def in_sync(admin: Admin, topics: list[str]) -> bool:
    """Every partition of ``topics`` has a leader and all its replicas in the ISR."""
    return quietly(out_of_sync, admin, topics) == []


def create_topics(admin: Admin, *names: str) -> None:
    admin.create_topics(
        [NewTopic(name, PARTITIONS, replication_factor=3, config=TOPIC_CONFIG) for name in names],
        wait_for_leaders_ms=120_000,
    )


def preload(cluster, topic: str, count: int) -> dict[int, list[tuple[bytes, bytes]]]:
    """``count`` unique values, keyed, sent with send_arrow; then read back: partition ->
    [(key, value)] in log order."""
    table = pa.table(
        {
            "key": pa.array([b"k%d" % i for i in range(count)], pa.binary()),
            "value": pa.array([b"%d" % i for i in range(count)], pa.binary()),
        }
    )
    with Producer(cluster) as producer:
        producer.send_arrow(topic, table).result(timeout=120)
    read = read_all(cluster, topic)
    _require(sum(len(rs) for rs in read.values()) == count, "the input was not all written")
    for records in read.values():
        numbers = [int(value) for _, _, value, _, _ in records]
        _require(numbers == sorted(numbers), "send_arrow reordered a partition")
    return {p: [(key, value) for _, key, value, _, _ in rs] for p, rs in read.items()}


def read_end_offsets(cluster, tps: list[TopicPartition], isolation_level: str) -> dict[TopicPartition, int]:
    consumer = Consumer(cluster, isolation_level=isolation_level)
    try:
        return consumer.end_offsets(tps)
    finally:
        consumer.close()


# --- the oracle --------------------------------------------------------------------------


def check_against_input(expected: dict, committed: dict) -> None:
    """The read_committed output equals the input per partition: same records, same order."""
    for p in range(PARTITIONS):
        got = [(key, value) for _, key, value, _, _ in committed[p]]
        if got == expected[p]:
            continue
        got_values, want_values = collections.Counter(v for _, v in got), collections.Counter(v for _, v in expected[p])
        lost = sorted(set(want_values) - set(got_values), key=int)
        twice = sorted((v for v, n in got_values.items() if n > 1), key=int)
        foreign = sorted(set(got_values) - set(want_values))
        first = next((i for i, (a, b) in enumerate(zip(got, expected[p], strict=False)) if a != b), None)
        raise AssertionError(
            f"output partition {p} != input: {len(got)} records for {len(expected[p])}; lost {len(lost)} "
            f"{lost[:5]}; duplicated {len(twice)} {twice[:5]}; not from this input partition {foreign[:5]}; "
            f"first difference at index {first}"
        )


def check_transactions(ledger: dict, committed: dict, uncommitted: dict) -> dict:
    """Transactions are all or nothing: the read_committed output holds only transactions
    whose commit began and that were not aborted, each whole in each partition; a
    transaction the copier saw committed is not left out of it; one written and never
    committed is in the log (read_uncommitted) whole and left out. Returns counts."""
    committed_at = {(p, r[0]) for p, rs in committed.items() for r in rs}
    in_committed: collections.Counter = collections.Counter()
    in_log: collections.Counter = collections.Counter()
    announced: dict[tuple[str, int], int] = {}  # (tag, partition) -> the records the header says
    for p, records in uncommitted.items():
        for offset, _, value, tag, n in records:
            _require(tag is not None, f"p{p}@{offset} {value!r} was not written by a copier")
            in_log[(tag, p)] += 1
            announced[(tag, p)] = int(n)
            if (p, offset) in committed_at:
                in_committed[(tag, p)] += 1
    for p, records in committed.items():
        for offset, _, value, tag, _ in records:
            events = ledger.get(tag, {})
            _require("commit" in events, f"p{p}@{offset} {value!r}: its transaction {tag} never began to commit")
            _require("aborted" not in events, f"p{p}@{offset} {value!r}: its transaction {tag} was aborted")
    aborted_written = set()
    for (tag, p), n in announced.items():
        events = ledger.get(tag, {})
        if (tag, p) in in_committed:
            _require(
                in_committed[(tag, p)] == n,
                f"transaction {tag} is in partition {p}'s read_committed output in part: "
                f"{in_committed[(tag, p)]} of {n} records",
            )
        else:
            _require(
                "committed" not in events, f"transaction {tag} committed, yet read_committed leaves it out of p{p}"
            )
            aborted_written.add(tag)
        if "written" in events:  # every send was acknowledged: all of it is in the log
            _require(
                in_log[(tag, p)] == n, f"transaction {tag} wrote {n} records to p{p}, the log has {in_log[(tag, p)]}"
            )
    for tag, events in ledger.items():
        if "written" in events and "commit" not in events:
            _require(tag in aborted_written, f"transaction {tag}, written and never committed, is not in the log")
    outcomes: collections.Counter = collections.Counter()
    for events in ledger.values():
        outcomes["committed" if "committed" in events else "aborted" if "aborted" in events else "unknown"] += 1
    outcomes["aborted with their records written"] = len(aborted_written)
    return dict(outcomes)


def check_reader(reader: Reader, ledger: dict, committed: dict) -> None:
    """The concurrent reader saw each partition as a prefix of the final output (nothing
    aborted, nothing at another offset: no G1a) and each record only once its transaction's
    commit had begun (no G1b)."""
    problems = []
    for p in range(PARTITIONS):
        final = [(o, k, v) for o, k, v, _, _ in committed[p]]
        seen = [(o, k, v) for o, k, v, _, _ in reader.seen[p]]
        if seen != final[: len(seen)]:
            i = next((i for i, (s, f) in enumerate(zip(seen, final, strict=False)) if s != f), len(final))
            held = final[i] if i < len(final) else "nothing"
            problems.append(
                f"partition {p} as read is not a prefix of the final output: the reader's record {i} is "
                f"{seen[i]}, the final output's {held} (read {len(seen)}, final {len(final)})"
            )
        early = [
            (offset, value, tag, at, ledger.get(tag, {}).get("commit"))
            for offset, _, value, tag, at in reader.seen[p]
            if not ledger.get(tag, {}).get("commit", at + 1) <= at
        ]
        if early:
            offset, value, tag, at, began = early[0]
            problems.append(
                f"partition {p}: {len(early)} records read before their transaction's commit began, e.g. "
                f"@{offset} {value!r} of {tag} read at {at:.3f}, its commit began at {began}"
            )
    _require(not problems, "\n".join(problems))


# --- the campaign ------------------------------------------------------------------------


class Run:
    """The copier of the fault campaign: its current actor and the call running it."""

    def __init__(self, cluster, source: str, sink: str, ledger, actors: list, txn_records: int, records_per_s: float):
        self.cluster, self.source, self.sink, self.ledger = cluster, source, sink, ledger
        self.actors = actors
        self.txn_records = txn_records
        self.records_per_s = records_per_s
        self.instances = 0
        self.actor = None
        self.ref = None
        self.summaries: list[dict] = []
        self.done = False

    def start(self) -> None:
        name = f"c{self.instances}"
        self.instances += 1
        self.actor = on_head(Copier).remote(
            self.cluster, name, self.source, self.sink, self.ledger, self.txn_records, self.records_per_s
        )
        self.actors.append(self.actor)
        self.ref = self.actor.run.remote()

    def kill(self) -> None:
        ray.kill(self.actor, no_restart=True)
        self.summaries.append({"name": f"c{self.instances - 1}", "killed": True})

    def outcome(self) -> str:
        """What the running copier's ``run`` came to: still running, its summary, or what it raised."""
        if not ray.wait([self.ref], timeout=0)[0]:
            return "running"
        try:
            return repr(ray.get(self.ref))
        except Exception as exc:  # noqa: BLE001 — reported to the caller
            return f"raised {exc!r}"[:2000]

    def finished(self) -> bool:
        """Whether the copy is done; a copier that stopped fenced (its transaction timed out)
        is replaced, as Kafka's test restarts it."""
        if self.done:
            return True
        ready, _ = ray.wait([self.ref], timeout=0)
        if not ready:
            return False
        summary = ray.get(self.ref)
        self.summaries.append(summary)
        if summary["fenced"] is None:
            self.done = True
            return True
        self.start()
        return False


@dataclasses.dataclass
class CopyReport:
    """What a campaign did: the faults injected (with when), the copiers' summaries and
    errors, and the transactions by outcome."""

    records: int
    faults: list[str]
    text: str
    outcomes: dict[str, int]


def make_topics(admin: Admin, prefix: str) -> tuple[str, str]:
    """A fresh input and output topic (PARTITIONS partitions, RF 3, min ISR 2)."""
    suffix = uuid.uuid4().hex[:6]
    names = (f"{prefix}-input-{suffix}", f"{prefix}-output-{suffix}")
    create_topics(admin, *names)
    return names


def kill_actors(actors: list) -> None:
    for actor in actors:
        try:
            ray.kill(actor, no_restart=True)
        except Exception:  # noqa: BLE001 — gone already
            pass


def copy_through_faults(
    cluster,
    start_broker: Callable[[int], None],
    kill_broker: Callable[[int], None],
    records: int = RECORDS,
    rounds: int = ROUNDS,
    txn_records: int = TXN_RECORDS,
    records_per_s: float = COPY_RECORDS_PER_S,
    one_node_kill: bool = False,
) -> CopyReport:
    """Kafka's transactions system test (see the module docstring) on ``cluster``, whose
    brokers ``kill_broker`` removes (its node) and ``start_broker`` brings back: ``records``
    preloaded, copied in transactions of ``txn_records`` at ``records_per_s`` through
    ``rounds`` rounds of faults (then at full speed), then the output checked against the
    input and the reader's view. Makes its own topics and deletes them.

    ``one_node_kill``: a round's two node faults are one where they can be (a quick slice: a
    node kill and its recovery are most of a round's time): the coordinator's node is killed
    first, as it commits, and the output partitions its broker leads lose their leader with
    it; the output leader's own node kill follows only when that broker led none of them.

    Raises:
        CopyFailed: a promise was broken, the copy ended before the first round of faults was
            done, or no fault aborted a written transaction.
    """
    admin = Admin(cluster)
    source, sink = make_topics(admin, "txn")
    actors: list = []
    try:
        plan = _Plan(records, rounds, txn_records, records_per_s, one_node_kill)
        return _copy_through_faults(cluster, admin, source, sink, actors, start_broker, kill_broker, plan)
    finally:
        kill_actors(actors)
        quietly(admin.delete_topics, [source, sink])


@dataclasses.dataclass(frozen=True)
class _Plan:
    """A copy's sizes and pace, and how its node faults are made (see :func:`copy_through_faults`)."""

    records: int
    rounds: int
    txn_records: int
    records_per_s: float
    one_node_kill: bool


def _copy_through_faults(cluster, admin, source, sink, actors, start_broker, kill_broker, plan: _Plan) -> CopyReport:
    records, rounds, txn_records, records_per_s, one_node_kill = dataclasses.astuple(plan)
    #: Committed output records the reader must see after each fault before the next.
    progress_records = 2 * txn_records
    began = time.monotonic()
    expected = preload(cluster, source, records)
    loaded_s = time.monotonic() - began

    ledger = on_head(Ledger).remote()
    actors.append(ledger)
    reader = Reader(cluster, sink)
    reader.start()
    run = Run(cluster, source, sink, ledger, actors, txn_records, records_per_s)
    run.start()
    dead: set[int] = set()
    faults: list[str] = []
    #: Rounds whose coordinator node kill also took output leaders (``one_node_kill``).
    leaders_killed: set[int] = set()

    def copying(predicate, message: str, interval_s: float):
        """Wait until ``predicate`` holds; if it does not, say what the partitions and the
        copiers were doing."""
        try:
            return wait_until(predicate, timeout_s=PROGRESS_TIMEOUT_S, interval_s=interval_s, message=message)
        except AssertionError as exc:
            watched = [source, sink, OFFSETS_TOPIC, TRANSACTION_TOPIC]
            errors = ray.get(ledger.all_errors.remote(), timeout=60)[-10:]
            raise CopyFailed(
                f"{exc}; out of sync: {quietly(out_of_sync, admin, watched)}; copier errors: {errors}; "
                f"reader errors: {reader.errors[-5:]}; copiers: {run.summaries}; the running one: {run.outcome()}"
            ) from None

    def progress(target: int, message: str) -> None:
        """Wait until the reader has seen ``target`` records (or the copy is done)."""
        copying(
            lambda: reader.count >= target or run.finished(),
            f"{target} records copied {message} (seen {reader.count})",
            interval_s=0.2,
        )

    def heal() -> None:
        for broker in sorted(dead):
            start_broker(broker)
            dead.discard(broker)
        watched = [source, sink, OFFSETS_TOPIC, TRANSACTION_TOPIC]
        try:
            wait_until(lambda: in_sync(admin, watched), timeout_s=HEAL_TIMEOUT_S, interval_s=0.5)
        except AssertionError:
            raise CopyFailed(f"replicas not back in sync: {quietly(out_of_sync, admin, watched)}") from None

    def kill_copier(when: str, round_: int) -> str:
        """Kill the copier once it has written a transaction and before it ends it
        (``written_open``: its successor aborts it), or once it has begun to commit one
        (``committing``: its successor's init_transactions waits for the commit, and resumes
        after it)."""
        before = ray.get(getattr(ledger, when).remote(), timeout=60)
        tags = copying(
            lambda: ray.get(getattr(ledger, when).remote(), timeout=60) - before,
            f"a transaction {when}",
            interval_s=0.01,
        )
        run.kill()
        run.start()
        what = "written, not ended" if when == "written_open" else "committing"
        return f"copier killed in transaction {min(tags)} ({what}), and replaced"

    def kill_output_leader(_: str, round_: int) -> str:
        partition = round_ % PARTITIONS
        before = partition_info(admin, sink, partition)
        dead.add(before.leader)
        kill_broker(before.leader)
        wait_until(
            lambda: (p := quietly(partition_info, admin, sink, partition)) and p.leader not in (before.leader, -1),
            timeout_s=HEAL_TIMEOUT_S,
            interval_s=0.2,
            message=f"a new leader of {sink}-{partition}",
        )
        progress(reader.count + progress_records, f"with broker {before.leader} down")
        return f"broker {before.leader} (leader of {sink}-{partition}) killed"

    def kill_coordinator(what: str, round_: int) -> str:
        """Kill the copier's transaction coordinator (``actor``: its process, which Ray
        restarts; ``node``: its broker's node) as soon as the copier has begun to commit a
        transaction: often while it writes the markers."""
        partition, handle = ray.get(
            cluster.controller.find_transaction_coordinator.remote(TRANSACTIONAL_ID), timeout=60
        )
        _require(handle is not None, "no transaction coordinator")
        leader = partition_info(admin, TRANSACTION_TOPIC, partition).leader
        led = [p for p in range(PARTITIONS) if partition_info(admin, sink, p).leader == leader]
        before = ray.get(ledger.committing.remote(), timeout=60)
        tags = copying(
            lambda: ray.get(ledger.committing.remote(), timeout=60) - before,
            "a transaction committing",
            interval_s=0.01,
        )
        if what == "actor":
            ray.kill(handle, no_restart=False)  # its process dies; Ray restarts the actor
            return f"coordinator {TRANSACTION_TOPIC}-{partition} actor killed committing {min(tags)}"
        if one_node_kill and led:
            leaders_killed.add(round_)
        dead.add(leader)
        kill_broker(leader)
        progress(reader.count + progress_records, f"with the coordinator's broker {leader} down")
        also = f" and leader of {', '.join(f'{sink}-{p}' for p in led)}" if led else ""
        return f"broker {leader} (coordinator {TRANSACTION_TOPIC}-{partition}{also}) killed committing {min(tags)}"

    # One round: every variant of each kind once, the node kills between the others.
    one_round = [
        (kill_copier, "written_open"),
        (kill_output_leader, "node"),
        (kill_coordinator, "actor"),
        (kill_copier, "committing"),
        (kill_coordinator, "node"),
    ]
    if one_node_kill:  # the coordinator's node first: the output leader's kill may be done then
        one_round.append(one_round.pop(1))
    schedule = [(fault, variant, round_) for round_ in range(rounds) for fault, variant in one_round]
    healthy = False
    try:
        for i, (fault, variant, round_) in enumerate(schedule):
            if fault is kill_output_leader and round_ in leaders_killed:
                continue  # the coordinator's node kill took output leaders with it
            # Each fault once the copy went on after the last one healed.
            progress(reader.count + progress_records, f"before fault {i}")
            if run.finished():
                break
            at, count = time.monotonic() - began, reader.count
            done = fault(variant, round_)
            heal()
            faults.append(f"{at:.0f}s at {count} records: {done}; healed in {time.monotonic() - began - at:.0f}s")
        faulted_s = time.monotonic() - began
        ray.get(ledger.faults_done.remote(), timeout=60)
        wait_until(run.finished, timeout_s=COPY_TIMEOUT_S, interval_s=0.5, message="the copy finished")
        copied_s = time.monotonic() - began
        wait_until(lambda: reader.count >= records, timeout_s=READ_TIMEOUT_S, message="the reader at the end")
        healthy = True
    finally:
        reader.finish()
        try:
            heal()  # every broker back, for the next tests
        except CopyFailed:
            if healthy:
                raise
    report = (
        f"{records} records: preloaded in {loaded_s:.0f}s, faults done at {faulted_s:.0f}s, copied at "
        f"{copied_s:.0f}s; {run.instances} copier instances; reader errors {len(reader.errors)}\n  "
        + "\n  ".join(faults)
        + "\n  "
        + "\n  ".join(map(str, run.summaries))
        + "\n  copier errors: "
        + "\n    ".join(ray.get(ledger.all_errors.remote(), timeout=60))
    )
    _require(
        len(faults) + len(leaders_killed) >= len(one_round),
        f"the copy ended after {len(faults)} faults, before every variant of each was injected: copy more "
        f"records, or slower\n{report}",
    )

    committed = read_all(cluster, sink, "read_committed")
    uncommitted = read_all(cluster, sink, "read_uncommitted")
    events = ray.get(ledger.all.remote())
    check_against_input(expected, committed)
    outcomes = check_transactions(events, committed, uncommitted)
    _require(outcomes["aborted with their records written"], "no fault aborted a written transaction: none was tested")
    check_reader(reader, events, committed)
    tps = [TopicPartition(sink, p) for p in range(PARTITIONS)]
    stable = read_end_offsets(cluster, tps, "read_committed")
    _require(stable == read_end_offsets(cluster, tps, "read_uncommitted"), "a transaction hangs open (LSO < HW)")
    offsets = admin.list_consumer_group_offsets(GROUP)
    _require(
        {tp.partition: o.offset for tp, o in offsets.items() if tp.topic == source}
        == {p: len(expected[p]) for p in range(PARTITIONS)},
        f"the group's committed offsets are not the input's ends: {offsets}",
    )
    return CopyReport(records, faults, report, outcomes)
