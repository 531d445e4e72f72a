"""How RaylogDatasource shares partition ranges out among read tasks (raylog.data.plan_read_tasks):
pure planning, no Ray instance."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from raylog.data import plan_read_tasks
from raylog.types import TopicPartition

A0, A1, A2, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("a", 2), TopicPartition("b", 0)


def test_as_many_tasks_as_partitions_is_one_task_per_partition():
    ranges = {A0: (0, 100), A1: (5, 10), A2: (7, 7), B0: (0, 1)}
    assert plan_read_tasks(ranges, 3, 1) == [[(A0, 0, 100)], [(A1, 5, 10)], [(B0, 0, 1)]]


def test_fewer_tasks_than_partitions_group_whole_partitions_by_size():
    ranges = {A0: (0, 100), A1: (0, 60), A2: (0, 50), B0: (0, 10)}
    # The largest first, each to the task with the fewest offsets so far: 110 and 110.
    assert plan_read_tasks(ranges, 2, 1) == [[(A0, 0, 100), (B0, 0, 10)], [(A1, 0, 60), (A2, 0, 50)]]
    assert plan_read_tasks(ranges, 1, 1) == [[(A0, 0, 100), (A1, 0, 60), (A2, 0, 50), (B0, 0, 10)]]


def test_more_tasks_than_partitions_cut_the_largest_partitions_first():
    ranges = {A0: (0, 300), A1: (100, 200)}
    # Four tasks: the 300-offset range is cut in three (pieces of 100, as large as A1's).
    assert plan_read_tasks(ranges, 4, 1) == [[(A0, 0, 100)], [(A0, 100, 200)], [(A0, 200, 300)], [(A1, 100, 200)]]


def test_a_partition_is_cut_only_into_pieces_of_at_least_min_rows():
    ranges = {A0: (0, 250), A1: (0, 90)}
    assert plan_read_tasks(ranges, 10, 100) == [[(A0, 0, 125)], [(A0, 125, 250)], [(A1, 0, 90)]]
    assert plan_read_tasks(ranges, 10, 1_000) == [[(A0, 0, 250)], [(A1, 0, 90)]]


def test_no_records_no_tasks():
    assert plan_read_tasks({A0: (4, 4)}, 8, 1) == []
    assert plan_read_tasks({}, 8, 1) == []


@given(
    sizes=st.lists(st.tuples(st.integers(0, 1_000), st.integers(0, 500)), min_size=1, max_size=8),
    parallelism=st.integers(1, 40),
    min_rows=st.integers(1, 200),
)
def test_every_offset_is_read_by_exactly_one_task(sizes, parallelism, min_rows):
    """Whatever is asked: each offset of every range in exactly one piece, pieces contiguous
    and non-empty, never more tasks than asked, at least one task per partition with records
    while there is room, and cut pieces no smaller than min_rows."""
    ranges = {TopicPartition("t", p): (start, start + length) for p, (start, length) in enumerate(sizes)}
    tasks = plan_read_tasks(ranges, parallelism, min_rows)
    nonempty = {tp: r for tp, r in ranges.items() if r[1] > r[0]}
    assert len(tasks) <= parallelism
    if nonempty:
        assert len(tasks) >= min(parallelism, len(nonempty))
    covered: dict[TopicPartition, list[tuple[int, int]]] = {}
    for task in tasks:
        assert task == sorted(task)
        for tp, start, end in task:
            assert start < end
            covered.setdefault(tp, []).append((start, end))
    assert set(covered) == set(nonempty)
    for tp, pieces in covered.items():
        pieces.sort()
        assert pieces[0][0] == nonempty[tp][0] and pieces[-1][1] == nonempty[tp][1]
        assert all(a[1] == b[0] for a, b in zip(pieces[:-1], pieces[1:], strict=True))
        if len(pieces) > 1:
            assert min(end - start for start, end in pieces) >= min_rows
