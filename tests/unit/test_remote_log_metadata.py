"""Tiered storage's remote log segment metadata: states and their transitions, the records of
``__remote_log_metadata``, the per-partition cache, and the copy and retention plans (no Ray)."""

from __future__ import annotations

import itertools

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raylog.errors import (
    CorruptRecordError,
    FencedLeaderEpochError,
    InvalidConfigError,
    InvalidRemoteLogSegmentStateError,
    RemoteResourceNotFoundError,
)
from raylog.storage import remote_log_metadata as rlm
from raylog.storage.remote_log_metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
)
from raylog.storage.remote_log_metadata import RemoteLogSegmentState as State
from raylog.storage.remote_log_metadata_cache import (
    LocalSegment,
    RemoteLogMetadataCache,
    TieredRetentionConfig,
    local_only_size_bytes,
    local_segments_to_delete,
    remote_segments_to_delete,
    segments_to_copy,
)

TOPIC = "clicks"
NOW_MS = 1_700_000_000_000
DAY_MS = 24 * 60 * 60 * 1000


def sid(n: int, topic: str = TOPIC, partition: int = 0) -> RemoteLogSegmentId:
    return RemoteLogSegmentId(topic, partition, f"00000000-0000-4000-8000-{n:012x}")


def meta(n, start, end, epochs=None, *, size=100, max_ts=NOW_MS, state=State.COPY_SEGMENT_STARTED, partition=0):
    epochs = ((0, start),) if epochs is None else epochs
    return RemoteLogSegmentMetadata(sid(n, partition=partition), start, end, max_ts, 1, NOW_MS, epochs, size, state)


def update(n, state, *, broker=2, event_ms=NOW_MS + 1) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(sid(n), event_ms, state, broker)


def copied(n, start, end, epochs=None, **kw) -> RemoteLogSegmentMetadata:
    return meta(n, start, end, epochs, **kw).with_update(update(n, State.COPY_SEGMENT_FINISHED))


def cache_of(*segments: RemoteLogSegmentMetadata) -> RemoteLogMetadataCache:
    """A cache in which each of ``segments`` went through the events that lead to its state."""
    cache = RemoteLogMetadataCache(TOPIC, 0)
    path = [State.COPY_SEGMENT_FINISHED, State.DELETE_SEGMENT_STARTED, State.DELETE_SEGMENT_FINISHED]
    for m in segments:
        cache.apply(RemoteLogSegmentMetadata(**{**m.__dict__, "state": State.COPY_SEGMENT_STARTED}))
        steps = [] if m.state == State.COPY_SEGMENT_STARTED else path[: path.index(m.state) + 1]
        for state in steps:
            cache.apply(RemoteLogSegmentMetadataUpdate(m.segment_id, m.event_timestamp_ms, state, m.broker_id))
    return cache


# --- states ---------------------------------------------------------------------------

LEGAL = {
    (None, State.COPY_SEGMENT_STARTED),
    (State.COPY_SEGMENT_STARTED, State.COPY_SEGMENT_FINISHED),
    (State.COPY_SEGMENT_STARTED, State.DELETE_SEGMENT_STARTED),
    (State.COPY_SEGMENT_FINISHED, State.DELETE_SEGMENT_STARTED),
    (State.DELETE_SEGMENT_STARTED, State.DELETE_SEGMENT_FINISHED),
} | {(s, s) for s in State}


@pytest.mark.parametrize("source, target", list(itertools.product([None, *State], State)))
def test_transitions_are_kafkas(source, target):
    """Exactly Kafka's moves are legal (a state to itself too: a replayed event); the others
    raise InvalidRemoteLogSegmentStateError."""
    assert rlm.is_valid_transition(source, target) == ((source, target) in LEGAL)
    if (source, target) in LEGAL:
        rlm.check_transition(sid(1), source, target)
    else:
        with pytest.raises(InvalidRemoteLogSegmentStateError, match=target.name):
            rlm.check_transition(sid(1), source, target)


def test_with_update_moves_state_and_keeps_the_segment():
    """An update changes the state, the event's time and broker, nothing else; an illegal
    one, or one of another segment, is refused."""
    started = meta(1, 0, 99)
    finished = started.with_update(update(1, State.COPY_SEGMENT_FINISHED, broker=7, event_ms=5))
    assert (finished.state, finished.broker_id, finished.event_timestamp_ms) == (State.COPY_SEGMENT_FINISHED, 7, 5)
    assert (finished.start_offset, finished.end_offset, finished.segment_size_bytes) == (0, 99, 100)
    with pytest.raises(InvalidRemoteLogSegmentStateError, match="DELETE_SEGMENT_FINISHED"):
        finished.with_update(update(1, State.DELETE_SEGMENT_FINISHED))
    with pytest.raises(InvalidRemoteLogSegmentStateError, match="applied to"):
        started.with_update(update(2, State.COPY_SEGMENT_FINISHED))
    with pytest.raises(ValueError, match="COPY_SEGMENT_STARTED"):
        update(1, State.COPY_SEGMENT_STARTED)


@pytest.mark.parametrize(
    "start, end, epochs",
    [
        (10, 9, ((0, 10),)),  # end below start
        (-1, 9, ((0, -1),)),  # negative offset
        (0, 99, ()),  # no epoch
        (0, 99, ((0, 5),)),  # the first epoch does not start at start_offset
        (0, 99, ((0, 0), (1, 100))),  # an epoch past end_offset
        (0, 99, ((2, 0), (1, 50))),  # epochs fall
        (0, 99, ((0, 0), (1, 0))),  # offsets do not rise
        (0, 99, ((0, 0), (1, "50"))),  # not an int
    ],
)
def test_metadata_refuses_what_breaks_its_invariants(start, end, epochs):
    """Inclusive ``[start, end]`` must be a range; the epochs must rise, start at start_offset
    and stay within the range."""
    with pytest.raises(ValueError):
        meta(1, start, end, epochs)


def test_segment_ids_are_canonical_uuids():
    """A segment id names its partition and a canonical uuid; generate() makes fresh ones."""
    a, b = RemoteLogSegmentId.generate(TOPIC, 3), RemoteLogSegmentId.generate(TOPIC, 3)
    assert a != b and a.partition == 3 and str(a).startswith("clicks-3:")
    for bad in ("not-a-uuid", "00000000-0000-4000-8000-00000000000A", ""):
        with pytest.raises(ValueError):
            RemoteLogSegmentId(TOPIC, 0, bad)
    with pytest.raises(ValueError):
        RemoteLogSegmentId(TOPIC, -1, a.id)


def test_metadata_takes_epochs_as_a_mapping_and_knows_where_each_ends():
    """segment_leader_epochs may be given as a dict; each epoch ends where the next begins,
    the last at end_offset (inclusive)."""
    m = meta(1, 100, 199, {1: 100, 2: 150})
    assert m.segment_leader_epochs == ((1, 100), (2, 150)) and m.leader_epochs == {1: 100, 2: 150}
    assert [m.epoch_end_offset(e) for e in (0, 1, 2)] == [None, 149, 199]


def test_leader_epochs_in_range_cuts_the_history_at_the_segment():
    """The slice of a log's epoch history for [start, end]: the epoch in force at start
    begins there, later epochs up to end are kept."""
    history = [(0, 0), (2, 40), (5, 120), (6, 300)]
    assert rlm.leader_epochs_in_range(history, 100, 199) == ((2, 100), (5, 120))
    assert rlm.leader_epochs_in_range(history, 40, 119) == ((2, 40),)
    assert rlm.leader_epochs_in_range(history, 300, 310) == ((6, 300),)
    assert meta(1, 100, 199, rlm.leader_epochs_in_range(history, 100, 199)).leader_epochs == {2: 100, 5: 120}


# --- records --------------------------------------------------------------------------


def test_events_round_trip_through_records_keyed_by_partition():
    """encode/decode give back the same event; the key is the partition's, so one
    partition's events stay in one partition of the internal topic, in order."""
    events = [meta(1, 0, 99, ((0, 0), (3, 40)), max_ts=-1), update(1, State.COPY_SEGMENT_FINISHED)]
    for event in events:
        key, value = rlm.encode(event)
        assert key == b"clicks-0" and rlm.decode(key, value) == event
    assert rlm.encode(meta(1, 0, 9, partition=12))[0] == b"clicks-12"
    assert rlm.record_key("a-1", 2) != rlm.record_key("a", 12) and rlm.METADATA_TOPIC == "__remote_log_metadata"
    assert msgpack.unpackb(rlm.encode(events[0])[1])["v"] == rlm.VERSION


def _value(event, **changes) -> bytes:
    fields = msgpack.unpackb(rlm.encode(event)[1])
    fields.update(changes)
    return msgpack.packb({k: v for k, v in fields.items() if v is not ...})


def test_leader_epochs_round_trip_and_default_to_unknown():
    """An event's leader epoch and a RemoteLogLeaderEpoch go through their records; a record
    written without the field reads as -1 (not known); an update carries its epoch into the
    segment's metadata."""
    leader = rlm.RemoteLogLeaderEpoch(TOPIC, 0, 7, 2, NOW_MS)
    events = [leader, epoch(meta(1, 0, 99), 7), RemoteLogSegmentMetadataUpdate(sid(1), NOW_MS, 1, 2, 7)]
    for event in events:
        key, value = rlm.encode(event)
        assert key == b"clicks-0" and rlm.decode(key, value) == event
    assert rlm.decode(b"clicks-0", _value(meta(1, 0, 99), leader_epoch=...)).event_leader_epoch == -1
    assert meta(1, 0, 99).with_update(events[2]).event_leader_epoch == 7
    assert rlm.partition_of(leader) == rlm.partition_of(events[1]) == (TOPIC, 0)
    for bad in ({"leader_epoch": -1}, {"partition": -1}, {"topic": ""}, {"broker_id": "2"}):
        with pytest.raises(ValueError):
            rlm.RemoteLogLeaderEpoch(**{**leader.__dict__, **bad})
    with pytest.raises(ValueError):
        epoch(meta(1, 0, 99), -2)


def epoch(metadata: RemoteLogSegmentMetadata, leader_epoch: int) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(**{**metadata.__dict__, "event_leader_epoch": leader_epoch})


@pytest.mark.parametrize(
    "value",
    [
        b"",
        b"\xc1",  # a byte msgpack never uses
        b"\x92\x01\x02",  # an array, not a map
        msgpack.packb({1: 2}),  # a key that is not a string
        _value(meta(1, 0, 99), v=2),  # a version this reader does not know
        _value(meta(1, 0, 99), type="delete-partition"),
        _value(meta(1, 0, 99), start=...),  # a field missing
        _value(meta(1, 0, 99), start="0"),  # a field of the wrong type
        _value(meta(1, 0, 99), partition=True),  # a bool is not an int
        _value(meta(1, 0, 99), state=9),  # no such state
        _value(meta(1, 0, 99), id="nope"),
        _value(meta(1, 0, 99), end=-5),  # offsets not a range
        _value(meta(1, 0, 99), epochs=[[0]]),  # not pairs
        _value(meta(1, 0, 99), epochs=[0, 0]),
        _value(meta(1, 0, 99), epochs=[[0, 5]]),  # the first epoch not at start
        _value(update(1, State.DELETE_SEGMENT_STARTED), state=0),  # an update to COPY_SEGMENT_STARTED
        _value(update(1, State.DELETE_SEGMENT_STARTED), leader_epoch="1"),
        _value(rlm.RemoteLogLeaderEpoch(TOPIC, 0, 1, 1, NOW_MS), leader_epoch=...),  # its epoch missing
        _value(rlm.RemoteLogLeaderEpoch(TOPIC, 0, 1, 1, NOW_MS), leader_epoch=-1),
        rlm.encode(meta(1, 0, 99))[1][:-3],  # torn
    ],
)
def test_malformed_records_raise_corrupt_record_error(value):
    """Whatever is wrong with a record's value, decode raises CorruptRecordError, never a
    KeyError, TypeError or ValueError of its own."""
    with pytest.raises(CorruptRecordError):
        rlm.decode(b"clicks-0", value)


def test_a_record_under_another_partitions_key_is_corrupt():
    """The key must be the event's own partition's."""
    _, value = rlm.encode(meta(1, 0, 99))
    for key in (b"clicks-1", b"", None):
        with pytest.raises(CorruptRecordError, match="key"):
            rlm.decode(key, value)


def test_every_flipped_byte_is_decoded_or_refused_cleanly():
    """Each byte of a valid record, changed: the decoder returns a valid event or raises
    CorruptRecordError (a flipped digit may still be a valid record)."""
    key, value = rlm.encode(meta(1, 0, 99, ((0, 0), (3, 40))))
    for i, xor in itertools.product(range(len(value)), (0x01, 0x80, 0xFF)):
        damaged = bytearray(value)
        damaged[i] ^= xor
        try:
            event = rlm.decode(key, bytes(damaged))
        except CorruptRecordError:
            continue
        assert isinstance(event, RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_never_escape_as_another_error(value):
    """Arbitrary bytes decode to an event or raise CorruptRecordError, nothing else."""
    try:
        rlm.decode(b"clicks-0", value)
    except CorruptRecordError:
        pass


# --- the cache ------------------------------------------------------------------------


def test_a_segment_is_readable_only_between_copy_finished_and_delete_started():
    """COPY_SEGMENT_STARTED: known, not readable; FINISHED: readable; DELETE_SEGMENT_STARTED:
    not readable, a deletion in progress; DELETE_SEGMENT_FINISHED: forgotten."""
    cache = RemoteLogMetadataCache(TOPIC, 0)
    cache.apply(meta(1, 0, 99))
    assert cache.segment_for(0, 5) is None and cache.unfinished_copies() == (meta(1, 0, 99),)
    assert cache.highest_copied_offset == -1 and cache.remote_log_start_offset is None
    cache.apply(update(1, State.COPY_SEGMENT_FINISHED))
    assert cache.segment_for(0, 5).state == State.COPY_SEGMENT_FINISHED and cache.unfinished_copies() == ()
    assert (cache.highest_copied_offset, cache.remote_log_start_offset, cache.remote_size_bytes) == (99, 0, 100)
    cache.apply(update(1, State.DELETE_SEGMENT_STARTED))
    assert cache.segment_for(0, 5) is None and [m.segment_id for m in cache.deletions_in_progress()] == [sid(1)]
    assert cache.remote_size_bytes == 0 and cache.remote_log_start_offset is None
    cache.apply(update(1, State.DELETE_SEGMENT_FINISHED))
    assert len(cache) == 0 and cache.segment(sid(1)) is None and cache.deletions_in_progress() == ()
    assert cache.highest_copied_offset == 99  # copied once: the copier must not copy it again
    with pytest.raises(RemoteResourceNotFoundError):
        cache.apply(update(1, State.DELETE_SEGMENT_FINISHED))


def test_an_orphaned_copy_can_be_deleted_without_finishing():
    """A copy its leader never finished goes COPY_SEGMENT_STARTED -> DELETE_SEGMENT_STARTED;
    it never became readable, so nothing counts it as copied."""
    cache = cache_of(meta(1, 0, 99))
    cache.apply(update(1, State.DELETE_SEGMENT_STARTED))
    cache.apply(update(1, State.DELETE_SEGMENT_FINISHED))
    assert len(cache) == 0 and cache.highest_copied_offset == -1 and cache.highest_offset_for_epoch(0) is None


def test_the_cache_refuses_events_that_do_not_fit():
    """Illegal moves raise InvalidRemoteLogSegmentStateError and change nothing; an update of
    an unknown segment raises RemoteResourceNotFoundError; a replayed event is harmless."""
    cache = cache_of(copied(1, 0, 99))
    before = cache.segments()
    with pytest.raises(InvalidRemoteLogSegmentStateError):
        cache.apply(meta(1, 0, 99))  # announced again after it finished
    with pytest.raises(InvalidRemoteLogSegmentStateError):
        cache.apply(meta(2, 100, 199, state=State.COPY_SEGMENT_FINISHED))  # first event not STARTED
    with pytest.raises(RemoteResourceNotFoundError):
        cache.apply(update(3, State.COPY_SEGMENT_FINISHED))
    cache.apply(update(1, State.COPY_SEGMENT_FINISHED))  # a replay: FINISHED -> FINISHED
    assert cache.segments() == before and cache.segment_for(0, 50).segment_id == sid(1)
    cache.apply(update(1, State.DELETE_SEGMENT_STARTED))
    with pytest.raises(InvalidRemoteLogSegmentStateError, match="COPY_SEGMENT_FINISHED"):
        cache.apply(update(1, State.COPY_SEGMENT_FINISHED))
    started = meta(2, 100, 199)
    cache.apply(started)
    cache.apply(started)  # the same announcement again
    with pytest.raises(InvalidRemoteLogSegmentStateError, match="again"):
        cache.apply(meta(2, 100, 150))
    with pytest.raises(ValueError, match="clicks-1"):
        cache.apply(meta(9, 0, 9, partition=1))


def test_a_leader_epoch_record_fences_the_events_of_older_epochs():
    """Once a RemoteLogLeaderEpoch is applied, an event decided in an older epoch is refused
    with FencedLeaderEpochError and changes nothing (an old leader's FINISHED landing late
    cannot make its copy readable); its own epoch's and newer ones' go through; a record of an
    epoch not above changes nothing."""
    cache = RemoteLogMetadataCache(TOPIC, 0)
    cache.apply(epoch(meta(1, 0, 99), 3))
    cache.apply(rlm.RemoteLogLeaderEpoch(TOPIC, 0, 4, 2, NOW_MS))
    assert cache.leader_epoch == 4
    late = RemoteLogSegmentMetadataUpdate(sid(1), NOW_MS, State.COPY_SEGMENT_FINISHED, 1, 3)
    with pytest.raises(FencedLeaderEpochError, match="leader epoch 3"):
        cache.apply(late)
    with pytest.raises(FencedLeaderEpochError):
        cache.apply(meta(2, 100, 199))  # no epoch (-1) is older too
    assert cache.segment(sid(1)).state == State.COPY_SEGMENT_STARTED and len(cache) == 1
    cache.apply(rlm.RemoteLogLeaderEpoch(TOPIC, 0, 2, 1, NOW_MS))  # a stale leader's record
    assert cache.leader_epoch == 4
    cache.apply(RemoteLogSegmentMetadataUpdate(sid(1), NOW_MS, State.DELETE_SEGMENT_STARTED, 2, 4))
    cache.apply(RemoteLogSegmentMetadataUpdate(sid(1), NOW_MS, State.DELETE_SEGMENT_FINISHED, 2, 5))
    assert len(cache) == 0
    with pytest.raises(ValueError, match="clicks-0"):
        cache.apply(rlm.RemoteLogLeaderEpoch(TOPIC, 1, 9, 2, NOW_MS))


def test_deleting_both_copies_of_the_same_offsets_in_either_order():
    """Two readable copies of one segment (the later one replaced the earlier for reads):
    deleting the later first, then the earlier, works (it raised KeyError)."""
    cache = cache_of(copied(1, 0, 99), copied(2, 0, 99))
    cache.apply(update(2, State.DELETE_SEGMENT_STARTED))
    cache.apply(update(1, State.DELETE_SEGMENT_STARTED))
    assert cache.segments(State.COPY_SEGMENT_FINISHED) == () and cache.segment_for(0, 10) is None


def test_segment_for_finds_the_segment_holding_an_offset_of_an_epoch():
    """Kafka's remoteLogSegmentMetadata(epoch, offset): the segment whose records of that
    epoch include the offset; an offset of another epoch there, or beyond, finds nothing."""
    a = copied(1, 0, 99, ((0, 0), (1, 50)))
    b = copied(2, 100, 199, ((1, 100), (2, 150)))
    cache = cache_of(a, b, meta(3, 200, 299, ((2, 200),)))  # the third only started
    offsets = (0, 49, 50, 99, 100, 149, 150, 199, 200)
    found = {(e, o): cache.segment_for(e, o) for e in (0, 1, 2, 3) for o in offsets}
    expected = {(0, 0): sid(1), (0, 49): sid(1), (1, 50): sid(1), (1, 99): sid(1), (1, 100): sid(2)}
    expected |= {(1, 149): sid(2), (2, 150): sid(2), (2, 199): sid(2)}
    assert {k: m.segment_id for k, m in found.items() if m is not None} == expected
    assert cache.highest_offset_for_epoch(0) == 49 and cache.highest_offset_for_epoch(1) == 149
    assert cache.highest_offset_for_epoch(2) == 199 and cache.highest_offset_for_epoch(3) is None
    assert cache.highest_copied_offset == 199


def test_a_segment_copied_again_replaces_the_earlier_copy_for_reads():
    """Two readable copies of the same offsets (a leader copied again after a lost event):
    reads go to the later; deleting the earlier leaves the later readable."""
    cache = cache_of(copied(1, 0, 99), copied(2, 0, 99))
    assert cache.segment_for(0, 10).segment_id == sid(2)
    cache.apply(update(1, State.DELETE_SEGMENT_STARTED))
    assert cache.segment_for(0, 10).segment_id == sid(2) and cache.remote_size_bytes == 100


def test_segments_are_listed_in_offset_order_with_their_states():
    """segments() lists every known segment by offset, or those in one state."""
    cache = cache_of(
        meta(4, 300, 399),
        copied(2, 100, 199).with_update(update(2, State.DELETE_SEGMENT_STARTED)),
        copied(1, 0, 99),
        copied(3, 200, 299),
    )
    assert [m.segment_id for m in cache.segments()] == [sid(1), sid(2), sid(3), sid(4)]
    assert [m.segment_id for m in cache.segments(State.COPY_SEGMENT_FINISHED)] == [sid(1), sid(3)]
    assert [m.segment_id for m in cache.unfinished_copies()] == [sid(4)]
    assert [m.segment_id for m in cache.deletions_in_progress()] == [sid(2)]
    assert (cache.remote_log_start_offset, cache.remote_size_bytes) == (0, 200)


def test_highest_copied_offset_follows_the_local_logs_lineage():
    """Kafka's findHighestRemoteOffset: after an unclean election, epoch 1's copies reach 149
    but the local log's epoch 1 ended at 119 (epoch 2 began there): the copier resumes at 120."""
    cache = cache_of(copied(1, 0, 99, ((0, 0), (1, 50))), copied(2, 100, 149, ((1, 100),)))
    assert cache.highest_copied_offset_in_lineage([(0, 0), (1, 50), (2, 120)], 300) == 119
    assert cache.highest_copied_offset_in_lineage([(0, 0), (1, 50)], 300) == 149
    assert cache.highest_copied_offset_in_lineage([(0, 0), (1, 50)], 140) == 139  # log ends first
    assert cache.highest_copied_offset_in_lineage([(0, 0)], 40) == 39
    assert cache.highest_copied_offset_in_lineage([(5, 0)], 40) == -1
    assert cache.highest_copied_offset_in_lineage([], 0) == -1


def test_replaying_the_records_rebuilds_the_same_cache():
    """A replica that reads the partition's records back gets the leader's view."""
    events = [meta(1, 0, 99), update(1, State.COPY_SEGMENT_FINISHED), meta(2, 100, 199)]
    events += [update(1, State.DELETE_SEGMENT_STARTED), meta(3, 200, 299), update(3, State.COPY_SEGMENT_FINISHED)]
    leader, follower = RemoteLogMetadataCache(TOPIC, 0), RemoteLogMetadataCache(TOPIC, 0)
    for event in events:
        leader.apply(event)
        follower.apply(rlm.decode(*rlm.encode(event)))
    assert follower.segments() == leader.segments() and follower.highest_copied_offset == 299
    assert [m.segment_id for m in follower.unfinished_copies()] == [sid(2)]


# --- plans ----------------------------------------------------------------------------


def local(base, last, *, size=1_000, max_ts=NOW_MS, active=False) -> LocalSegment:
    return LocalSegment(base, last, size, max_ts, active)


LOCAL = (local(0, 99), local(100, 199), local(200, 299), local(300, 349, active=True))


def test_copies_are_closed_segments_below_the_lso_above_what_is_copied():
    """Closed, wholly below the last stable offset, above the highest copied offset; the
    active segment never; an empty segment is skipped."""
    assert segments_to_copy(LOCAL, 350, -1) == LOCAL[:3]
    assert segments_to_copy(LOCAL, 350, 99) == LOCAL[1:3]
    assert segments_to_copy(LOCAL, 299, -1) == LOCAL[:2]  # 299 is not stable yet
    assert segments_to_copy(LOCAL, 300, -1) == LOCAL[:3]
    assert segments_to_copy(LOCAL, 350, 299) == ()
    assert segments_to_copy((local(0, -1), local(0, 9, active=True)), 10, -1) == ()


def test_retention_config_follows_kafkas_rules():
    """-2 means "as retention.*", -1 no limit; a local limit may not exceed the whole log's."""
    config = TieredRetentionConfig(retention_ms=DAY_MS, retention_bytes=10_000)
    assert (config.effective_local_retention_ms, config.effective_local_retention_bytes) == (DAY_MS, 10_000)
    local_only = TieredRetentionConfig(retention_ms=-1, local_retention_ms=-1, local_retention_bytes=500)
    assert (local_only.effective_local_retention_ms, local_only.effective_local_retention_bytes) == (-1, 500)
    for bad in (
        {"retention_ms": -2},
        {"local_retention_bytes": -3},
        {"retention_ms": DAY_MS, "local_retention_ms": DAY_MS + 1},
        {"retention_bytes": 100, "local_retention_bytes": -1},
        {"local_retention_ms": "1"},
    ):
        with pytest.raises(InvalidConfigError):
            TieredRetentionConfig(**bad)


def test_local_retention_deletes_only_copied_segments(clock):
    """local.retention.ms: segments older than the limit go, oldest first, but only those
    the finished copies cover; the first one not covered stops the plan."""
    config = TieredRetentionConfig(retention_ms=7 * DAY_MS, local_retention_ms=DAY_MS)
    segments = (local(0, 99, max_ts=clock()), local(100, 199, max_ts=clock()), *LOCAL[2:])
    remote = [copied(1, 0, 99), copied(2, 100, 149), meta(3, 150, 199, ((0, 150),))]
    assert local_segments_to_delete(segments, remote, config, clock()) == ()  # not old enough
    clock.advance(DAY_MS + 1)
    assert local_segments_to_delete(segments, remote, config, clock()) == segments[:1]  # 150-199 not copied
    remote[2] = copied(3, 150, 199, ((0, 150),))
    assert local_segments_to_delete(segments, remote, config, clock()) == segments[:2]
    remote.append(copied(4, 200, 299).with_update(update(4, State.DELETE_SEGMENT_STARTED)))
    assert local_segments_to_delete(segments, remote, config, clock()) == segments[:2]  # 4 is not readable


def test_local_retention_by_bytes_falls_back_on_retention_bytes():
    """local.retention.bytes -2 takes retention.bytes: the oldest copied segments go while
    the local log is bigger than the limit without them; never the active segment."""
    remote = [copied(1, 0, 299)]
    as_whole = TieredRetentionConfig(retention_ms=-1, retention_bytes=2_000)
    assert local_segments_to_delete(LOCAL, remote, as_whole, NOW_MS) == LOCAL[:2]
    local_only = TieredRetentionConfig(retention_ms=-1, retention_bytes=-1, local_retention_bytes=0)
    assert local_segments_to_delete(LOCAL, remote, local_only, NOW_MS) == LOCAL[:3]
    unlimited = TieredRetentionConfig(retention_ms=-1, local_retention_ms=-1, local_retention_bytes=-1)
    assert local_segments_to_delete(LOCAL, remote, unlimited, NOW_MS) == ()


def test_remote_retention_by_time_deletes_the_oldest_expired_segments(clock):
    """retention.ms: a readable segment whose newest record is older than now - retention.ms
    goes, oldest first, stopping at the first that is not; others are not considered."""
    config = TieredRetentionConfig(retention_ms=DAY_MS)
    remote = [
        copied(1, 0, 99, max_ts=clock()),
        copied(2, 100, 199, max_ts=clock() + 10),
        meta(3, 200, 299, ((0, 200),), max_ts=0),  # an unfinished copy: not for retention
        copied(4, 300, 399, max_ts=clock() + DAY_MS),
    ]

    def plan():
        return remote_segments_to_delete(remote, config, clock(), local_only_size_bytes=0, log_start_offset=0)

    assert plan() == ()
    clock.advance(DAY_MS + 1)
    assert [m.segment_id for m in plan()] == [sid(1)]  # 2 is newer by 10 ms
    clock.advance(10)
    assert [m.segment_id for m in plan()] == [sid(1), sid(2)]


def test_remote_retention_by_bytes_counts_local_only_bytes_too():
    """retention.bytes bounds the whole log: local segments not copied yet plus the remote
    ones; the oldest remote segments go while the rest still reaches the limit (as Kafka: a
    log is never cut below retention.bytes)."""
    local_only = local_only_size_bytes(LOCAL, 199)  # 200-299 and the active segment
    assert local_only == 2_000
    remote = [copied(1, 0, 99, size=1_000), copied(2, 100, 199, size=1_000)]

    def plan(limit):
        config = TieredRetentionConfig(retention_ms=-1, retention_bytes=limit)
        chosen = remote_segments_to_delete(remote, config, NOW_MS, local_only_size_bytes=local_only, log_start_offset=0)
        return [m.segment_id for m in chosen]

    assert plan(4_000) == [] and plan(3_001) == []
    assert plan(3_000) == [sid(1)] and plan(2_001) == [sid(1)]
    assert plan(2_000) == [sid(1), sid(2)] and plan(0) == [sid(1), sid(2)]
    assert plan(-1) == []


def test_remote_retention_deletes_segments_below_the_log_start_offset():
    """DeleteRecords moved the log start offset: remote segments wholly below it go, whatever
    their age; the segment holding it stays."""
    remote = [copied(1, 0, 99), copied(2, 100, 199), copied(3, 200, 299)]
    config = TieredRetentionConfig(retention_ms=-1)
    plan = remote_segments_to_delete(remote, config, NOW_MS, local_only_size_bytes=0, log_start_offset=150)
    assert [m.segment_id for m in plan] == [sid(1)]
    plan = remote_segments_to_delete(remote, config, NOW_MS, local_only_size_bytes=0, log_start_offset=200)
    assert [m.segment_id for m in plan] == [sid(1), sid(2)]
