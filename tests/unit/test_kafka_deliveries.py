"""The soak's bookkeeping of a Kafka producer's delivery reports (``KafkaDeliveries``), on
hand-made reports and the checker (no Ray, no broker)."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError, KafkaException

from raylog.chaos import checker
from raylog.chaos.checker import DUPLICATE
from raylog.chaos.history import FAIL, OK, UNKNOWN, FinalRead, Recorder, Send
from raylog.chaos.kafka_workload import KafkaDeliveries, LibrdkafkaLog
from raylog.chaos.workload import client_thread


def outcomes(recorder: Recorder) -> dict[str, tuple]:
    return {op.value: (op.outcome, op.offset, op.idempotent) for op in recorder.history(FinalRead.of({})).ops}


@pytest.mark.parametrize("code", [KafkaError._MSG_TIMED_OUT, KafkaError.TOPIC_AUTHORIZATION_FAILED])
def test_a_failed_delivery_takes_idempotence_from_the_sends_librdkafka_still_held(code):
    """A failed delivery leaves a gap in librdkafka's sequence, which it closes by bumping its
    producer epoch and sending every message it still holds again from sequence 0, written
    before or not: the broker cannot know them as retries. The overlapping fault runs (seeds
    7 and 8) saw exactly that: a batch written, answered NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    retried until its first messages hit message.timeout.ms, the rest renumbered and written
    a second time. Those sends are recorded as not idempotent; the failed one (never sent
    again) and one made after the report keep the promise."""
    recorder = Recorder()
    deliveries = KafkaDeliveries(recorder)
    for value in ("k-0", "k-1"):
        deliveries.sent(Send("k", 0, value, UNKNOWN))
    deliveries.delivered("k-0", KafkaError(code), -1)
    deliveries.sent(Send("k", 1, "k-2", UNKNOWN))
    deliveries.delivered("k-1", None, 7)  # written at 3 before the failure, again at 7 after
    deliveries.delivered("k-2", None, 8)

    final = {0: [(3, "k-1"), (7, "k-1")], 1: [(8, "k-2"), (9, "k-2")]}
    report = checker.check(recorder.history(FinalRead.of(final)))

    assert sorted(a.value for a in report.anomalies[DUPLICATE]) == ["k-1", "k-2"]
    assert [a.value for a in report.violations(safe=True)] == ["k-2"]
    assert outcomes(recorder) == {"k-0": (UNKNOWN, None, True), "k-1": (OK, 7, False), "k-2": (OK, 8, True)}


def test_acknowledged_refused_and_unreported_sends_keep_idempotence():
    """Reports without error, a send ``produce`` refused at once (librdkafka never held it) and
    the sends still unreported when the worker stops renumber nothing."""
    recorder = Recorder()
    deliveries = KafkaDeliveries(recorder)
    for value in ("k-0", "k-1", "k-2"):
        deliveries.sent(Send("k", 0, value, UNKNOWN))
    deliveries.delivered("k-0", None, 4)
    deliveries.refused("k-1", BufferError("queue full"))
    deliveries.settle()

    assert outcomes(recorder) == {"k-0": (OK, 4, True), "k-1": (FAIL, None, True), "k-2": (UNKNOWN, None, True)}


def test_a_delivery_reported_without_an_offset_is_unknown_and_the_checker_takes_it():
    """librdkafka reports a message as delivered without an offset (confluent-kafka's
    ``offset()`` is None) when it infers the message was written, its own answer lost, from
    a later batch of its sequence. The overlapping fault run (seed 3, full suite) recorded it
    as ok at no offset and the checker failed sorting offsets; it is an unknown send: written,
    where is not said."""
    recorder = Recorder()
    deliveries = KafkaDeliveries(recorder)
    deliveries.sent(Send("k", 0, "k-0", UNKNOWN))
    deliveries.delivered("k-0", None, None)

    report = checker.check(recorder.history(FinalRead.of({0: [(5, "k-0")]})))

    assert outcomes(recorder) == {"k-0": (UNKNOWN, None, True)}
    assert not report.violations(safe=True)


def test_an_epoch_bump_without_a_failed_report_takes_idempotence_from_every_held_send():
    """librdkafka also bumps its epoch when a Produce request times out in flight (its log:
    "Idempotent producer state change Assigned -> DrainBump", then "resetting epoch base
    seq"), before any report fails, and sends what it held again under new sequences: the
    64-client soak (seed 1) saw a send written at 5188, renumbered, written again at 5363 and
    only then reported failed. The worker reads the bump from librdkafka's "eos" log, so
    every send held at that moment, the one later reported failed too, is not idempotent."""
    recorder = Recorder()
    deliveries = KafkaDeliveries(recorder)
    handler = LibrdkafkaLog(deliveries)
    for value in ("k-0", "k-1"):
        deliveries.sent(Send("k", 0, value, UNKNOWN))
    bump = (
        "IDEMPSTATE [rdkafka#producer-3] [thrd:127.0.0.1:1/1]: Idempotent producer state change Assigned -> DrainBump"
    )
    handler.handle(logging.LogRecord("librdkafka", logging.DEBUG, __file__, 1, bump, None, None))
    deliveries.sent(Send("k", 0, "k-2", UNKNOWN))  # after the bump: never renumbered
    deliveries.delivered("k-2", None, 10)
    deliveries.delivered("k-1", None, 9)
    deliveries.delivered("k-0", KafkaError(KafkaError._MSG_TIMED_OUT), -1)

    final = {0: [(5, "k-0"), (6, "k-1"), (8, "k-0"), (9, "k-1"), (10, "k-2")]}
    report = checker.check(recorder.history(FinalRead.of(final)))

    assert sorted(a.value for a in report.anomalies[DUPLICATE]) == ["k-0", "k-1"]
    assert not report.violations(safe=True)
    assert outcomes(recorder)["k-2"] == (OK, 10, True)


def test_a_client_thread_an_error_ends_is_kept_for_the_run_to_fail_on(caplog):
    """Seed 114 of the 64-client soak: librdkafka raised a fatal OUT_OF_ORDER_SEQUENCE_NUMBER
    from ``producer.poll``, the worker's thread died of it, and the run was reported ok."""
    crashes: list[str] = []

    def fatal() -> None:
        raise KafkaException(KafkaError(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, fatal=True))

    thread = client_thread("kafka8", crashes, fatal)
    with caplog.at_level(logging.ERROR):
        thread.start()
        thread.join(10)
    assert not thread.is_alive()
    assert len(crashes) == 1 and crashes[0].startswith("kafka8: KafkaException")
    assert "soak client kafka8 stopped by an error" in caplog.text


def test_a_stopped_worker_leaves_librdkafka_nothing_to_send_again(monkeypatch):
    """Seed 213 of the 64-client soak: a worker's sends were settled unknown (and idempotent)
    when ``flush`` ran out of time, while librdkafka, never told to stop, still held them; it
    later bumped its epoch and wrote them a second time (146 duplicates), its "DrainBump" log
    line never served because nobody polled the producer again. Against a broker that never
    answers, a stopped worker leaves librdkafka holding nothing, and each send is recorded
    unknown without losing idempotence (a purged message is never sent again)."""
    import random
    import time

    from raylog.chaos import kafka_workload

    monkeypatch.setattr(kafka_workload, "PRODUCER_CLOSE_TIMEOUT_S", 0.5)
    recorder = Recorder()
    worker = kafka_workload.KafkaProducerWorker(
        "kafka0", "127.0.0.1:9", "t", 2, recorder, random.Random(0), rate_per_s=200.0
    )  # the discard port: nothing there answers
    worker.start()
    deadline = time.monotonic() + 10
    while len(worker.producer) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    worker.stop()

    assert len(worker.producer) == 0  # nothing held: nothing can be sent after the history ends
    recorded = outcomes(recorder)
    assert recorded and all(outcome == (UNKNOWN, None, True) for outcome in recorded.values())
