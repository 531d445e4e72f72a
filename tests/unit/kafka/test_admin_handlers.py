"""Kafka's admin APIs' handlers (raylog/actors/kafka/admin.py) against a fake controller, no Ray."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from raylog.actors.kafka import admin
from raylog.kafka import codec


def _md(partitions: int) -> dict:
    parts = tuple(SimpleNamespace(partition=p, replicas=(0,)) for p in range(partitions))
    return {"topics": {"t": SimpleNamespace(partitions=parts)}, "live": {0, 1, 2}, "brokers": {0: 0, 1: 1, 2: 2}}


def test_create_partitions_with_assignments_waits_for_metadata_showing_the_new_partitions(monkeypatch):
    """The listener's refreshed metadata may still be the cached answer (a busy controller):
    CreatePartitions with assignments reassigns the new partitions once the metadata shows
    them (it failed with IndexError, answered UNKNOWN_SERVER_ERROR for every topic, when
    librdkafka's 0081 ran beside a busy core)."""
    monkeypatch.setattr(admin, "GROWTH_POLL_S", 0.0, raising=False)
    answers = iter([_md(1), _md(1), _md(1), _md(2)])  # the check's, two stale ones, then the grown one
    reassigned: list = []

    async def metadata(refresh: bool = False) -> dict:
        return next(answers)

    async def created(counts, session=None):
        return {name: (0, "") for name in counts}

    async def reassign(targets, session=None):
        reassigned.append(dict(targets))
        return {key: (0, "") for key in targets}

    async def call(ref, timeout_s=None):
        return await ref

    controller = SimpleNamespace(
        create_partitions=SimpleNamespace(remote=created),
        alter_partition_reassignments=SimpleNamespace(remote=reassign),
    )

    def ask(method, *args, **kwargs):
        return getattr(controller, method).remote(*args, **kwargs)

    ctx = SimpleNamespace(metadata=metadata, controller=controller, ask=ask, call=call, invalidate=lambda: None)
    body = {"topics": [{"name": "t", "count": 2, "assignments": [{"broker_ids": [1]}]}], "timeout_ms": 5_000}
    header = codec.RequestHeader(codec.ApiKey.CREATE_PARTITIONS, 3, 1, "c")
    answer = asyncio.run(admin.create_partitions(ctx, header, body))
    assert answer["results"] == [{"name": "t", "error_code": 0, "error_message": None}]
    assert reassigned == [{("t", 1): [1]}]
