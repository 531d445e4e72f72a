"""The wire fuzzer's campaign (raylog.chaos.fuzz_wire) is deterministic given its seed, never
sends an API that creates or deletes topics, and runs against loopback only (no Ray)."""

from __future__ import annotations

import asyncio
import struct

import pytest

from raylog.chaos import fuzz_wire


def test_a_campaign_is_the_same_frames_for_the_same_seed():
    corpus = fuzz_wire.load_frames()
    assert fuzz_wire.batches(2_000, 3, corpus) == fuzz_wire.batches(2_000, 3, corpus)
    assert fuzz_wire.batches(2_000, 3, corpus) != fuzz_wire.batches(2_000, 4, corpus)


def test_no_frame_becomes_an_api_that_creates_or_deletes_topics():
    frames = [f for batch in fuzz_wire.batches(20_000, 1, fuzz_wire.load_frames()) for f in batch]
    assert len(frames) == 20_000
    api_keys = {struct.unpack_from(">h", f, 4)[0] for f in frames if len(f) >= 6}
    assert not api_keys & fuzz_wire.EXCLUDED
    assert len(api_keys) > 10  # (mutations reach beyond the captured APIs)


def test_only_loopback_listeners_are_fuzzed():
    with pytest.raises(ValueError, match="loopback"):
        asyncio.run(fuzz_wire.campaign("10.0.0.1:9092", 1))
