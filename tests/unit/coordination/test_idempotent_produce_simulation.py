"""Seeded schedules of an idempotent producer against the real leader rules (Partition and
ProducerStateManager, on a real log): calls delivered in any order, answers in any order,
leader restarts that lose every call in transit, snapshots and rolls; the log must hold
every batch exactly once, in sequence order, and every acknowledgement its true offset."""

from __future__ import annotations

import os
import random
from dataclasses import dataclass

import pytest

from raylog.common import record_batch
from raylog.common.record_batch import SEQUENCE_MODULUS, increment_sequence
from raylog.config import LogConfig, TopicConfig
from raylog.coordination.partition import Partition, SequenceGap
from raylog.storage.log import Log

SEEDS = range(100)
BATCHES = 25
MAX_IN_FLIGHT = 5
PRODUCER_ID = 11
CONFIG = {"segment.bytes": "1024"}  # a roll (and a snapshot) every few batches


@dataclass
class Batch:
    index: int
    sequence: int
    data: bytes
    acked_offset: int = -1


class Model:
    """One producer, one leader, and an adversarial transport between them."""

    def __init__(self, seed: int, directory: str, clock, first_sequence: int):
        self.rng = random.Random(seed)
        self.directory, self.clock = directory, clock
        self.leader = self._start_leader()
        self.batches = []
        sequence = first_sequence
        for i in range(BATCHES):
            value = b"%03d" % i + b"x" * self.rng.choice((10, 300))
            data = record_batch.build([value], producer_id=PRODUCER_ID, producer_epoch=0, base_sequence=sequence)
            self.batches.append(Batch(i, sequence, data))
            sequence = increment_sequence(sequence, 1)
        self.next_to_send = 0
        self.in_flight: set[int] = set()  # batch indexes with an attempt out
        self.to_retry: list[int] = []
        self.requests: list[tuple[int, int]] = []  # (batch index, first unacked sequence) in transit
        self.parked: list[tuple[int, int]] = []  # requests waiting at the leader (a sequence gap)
        self.answers: list[tuple[int, int]] = []  # (batch index, offset) on the way back

    def _start_leader(self) -> Partition:
        log = Log.open(self.directory, LogConfig.from_properties(CONFIG), clock=self.clock)
        part = Partition("t", 0, 1, log, TopicConfig.from_properties(CONFIG), clock=self.clock)
        part.become_leader(leader_epoch=1, replicas=(1,), isr=(1,))
        return part

    def oldest_unacked(self) -> Batch | None:
        return next((b for b in self.batches[: self.next_to_send] if b.acked_offset < 0), None)

    def can_send_new(self) -> bool:
        """As the producer: a new batch goes only when none waits for a retry and fewer than
        MAX_IN_FLIGHT batches lie between the oldest unacknowledged and the newest sent."""
        oldest = self.oldest_unacked()
        window = 0 if oldest is None else self.next_to_send - oldest.index
        return not self.to_retry and self.next_to_send < BATCHES and window < MAX_IN_FLIGHT

    def done(self) -> bool:
        return all(b.acked_offset >= 0 for b in self.batches)

    def step(self) -> None:
        actions = []
        if self.to_retry or self.can_send_new():
            actions.append(self.send)
        if self.requests:
            actions.append(self.deliver)
        if self.answers:
            actions.append(self.answer)
        actions.append(self.housekeep)
        if self.rng.random() < 0.03:
            actions.append(self.restart_leader)
        self.rng.choice(actions)()

    def send(self) -> None:
        """As the producer's sender: retries first, in the order first sent."""
        if self.to_retry:
            index = min(self.to_retry)
            self.to_retry.remove(index)
        else:
            index = self.next_to_send
            self.next_to_send += 1
        self.in_flight.add(index)
        self.requests.append((index, self.oldest_unacked().sequence))

    def deliver(self) -> None:
        request = self.requests.pop(self.rng.randrange(len(self.requests)))
        self._handle(request)

    def _handle(self, request: tuple[int, int]) -> bool:
        index, first_unacked = request
        try:
            info = self.leader.append_as_leader(self.batches[index].data, acks=1, first_unacked_sequence=first_unacked)
        except SequenceGap:
            self.parked.append(request)
            return False
        self.answers.append((index, info.first_offset))
        if info.batches:  # something was written: parked requests may go now
            self._retry_parked()
        return True

    def _retry_parked(self) -> None:
        progress = True
        while progress:
            parked, self.parked = self.parked, []
            progress = False
            for request in parked:
                progress = self._handle(request) or progress

    def answer(self) -> None:
        index, offset = self.answers.pop(self.rng.randrange(len(self.answers)))
        self.in_flight.discard(index)
        self.batches[index].acked_offset = offset

    def housekeep(self) -> None:
        self.clock.advance(1_000)
        self.leader.checkpoint_producer_state()

    def restart_leader(self) -> None:
        """The leader's process dies: every call in transit or waiting there fails, so the
        producer retries each batch still out; the new process reads the log back."""
        lost = {index for index, _ in self.requests + self.parked + self.answers}
        self.requests, self.parked, self.answers = [], [], []
        self.in_flight -= lost
        self.to_retry.extend(sorted(lost))
        self.close()
        self.leader = self._start_leader()

    def close(self) -> None:
        for segment in self.leader.log._segments:
            segment.close()


def log_values(log: Log) -> list[bytes]:
    """Every value in the log, in offset order (a read stops at a segment's end)."""
    values, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        values += record_batch.decode_table(data).column("value").to_pylist()
        offset = list(record_batch.iter_headers(data))[-1][1].next_offset
    return values


@pytest.mark.parametrize("wrap", [False, True])
def test_every_batch_is_appended_once_in_sequence_order_whatever_the_schedule(tmp_path, clock, monkeypatch, wrap):
    """Over seeded schedules, the real leader appends each batch once, in sequence order,
    and acknowledges it with its offset (sequences starting near 2**31 wrap on the way)."""
    for sync in ("fsync", "fdatasync"):  # the rules are under test, not the disk
        monkeypatch.setattr(os, sync, lambda fd: None)
    for seed in SEEDS:
        model = Model(seed, str(tmp_path / f"seed-{seed}"), clock, first_sequence=SEQUENCE_MODULUS - 7 if wrap else 0)
        try:
            for _ in range(5_000):
                if model.done():
                    break
                model.step()
            assert model.done(), f"seed {seed}: stuck with {len(model.parked)} batches waiting at the leader"
            values = [value[:3] for value in log_values(model.leader.log)]
        except Exception as exc:  # noqa: BLE001 — any refusal is a failure of this seed
            pytest.fail(f"seed {seed}: {exc!r}")
        finally:
            model.close()
        assert values == [b"%03d" % i for i in range(BATCHES)], f"seed {seed}: log holds {values}"
        assert [b.acked_offset for b in model.batches] == list(range(BATCHES)), f"seed {seed}"
