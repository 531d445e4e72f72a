"""The nemesis's own tools do what they claim: delayed calls reorder yet answer and fail as
direct calls do, and a corrupted segment tail is damaged as reported."""

from __future__ import annotations

import os
import random

import pytest
import ray

from raylog.chaos.faulty import CallDelays, _DelayedHandle
from raylog.chaos.nemesis import corrupt_last_segment
from raylog.errors import BrokerUnavailableError, InvalidRequestError
from raylog.transport import call


class Target:
    """An actor that notes the order calls reach it."""

    def __init__(self):
        self.seen = []

    async def note(self, i: int) -> int:
        self.seen.append(i)
        return i

    async def refuse(self) -> None:
        raise InvalidRequestError("no")

    async def order(self) -> list[int]:
        return self.seen


def test_delayed_calls_reorder_but_answer_and_fail_like_direct_calls(soak_env):
    """With every call delayed at random, calls reach the actor out of order, each answer is
    its own, an actor's typed error comes back as itself, and a dead actor is BrokerUnavailable."""
    target = ray.remote(Target).options(num_cpus=0).remote()
    delays = CallDelays(soak_env.proxy, seed=7)
    try:
        delays.start(probability=1.0, max_delay_s=0.3)
        wrapped = _DelayedHandle(target, delays.key)
        refs = [wrapped.note.remote(i) for i in range(20)]
        assert [call(ref, 30) for ref in refs] == list(range(20))
        assert delays.delayed_count == 20
        seen = call(target.order.remote(), 30)
        assert sorted(seen) == list(range(20)) and seen != list(range(20)), "no call overtook another"
        with pytest.raises(InvalidRequestError):
            call(wrapped.refuse.remote(), 30)
        ray.kill(target, no_restart=True)
        with pytest.raises(BrokerUnavailableError):
            call(wrapped.note.remote(0), 30)
        delays.stop()
        assert wrapped == _DelayedHandle(target, delays.key) and hash(wrapped) == hash(target)
    finally:
        delays.close()


def test_corrupt_tail_cuts_or_flips_what_it_says(tmp_path):
    """The last non-empty segment loses bytes at its end, or one bit near its end; nothing
    else changes."""
    first, last = tmp_path / "00000000000000000000.log", tmp_path / "00000000000000000100.log"
    first.write_bytes(b"a" * 1000)
    last.write_bytes(bytes(range(256)) * 4)
    (tmp_path / "00000000000000000200.log").write_bytes(b"")
    outcomes = set()
    for seed in range(10):
        before = last.read_bytes()
        damage = corrupt_last_segment(str(tmp_path), random.Random(seed))
        after = last.read_bytes()
        assert first.read_bytes() == b"a" * 1000 and os.path.basename(last) in damage
        if "cut by" in damage:
            assert before.startswith(after) and len(before) - len(after) == int(damage.split("cut by ")[1].split()[0])
            outcomes.add("cut")
        else:
            assert len(after) == len(before)
            diffs = [i for i, (x, y) in enumerate(zip(before, after, strict=True)) if x != y]
            assert len(diffs) == 1 and bin(before[diffs[0]] ^ after[diffs[0]]).count("1") == 1
            assert diffs[0] >= len(before) - 512
            outcomes.add("flip")
    assert outcomes == {"cut", "flip"}
