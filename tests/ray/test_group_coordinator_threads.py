"""The group coordinator's waiting calls never starve the calls that end them (issue 25,
defect 4): with every thread for joins held by a waiting member, the calls that let them
progress (a leave, an offset fetch, the replica's and the controller's calls) are still
answered."""

from __future__ import annotations

import uuid

import ray

from raylog.actors.group_coordinator import JOIN_CONCURRENCY
from raylog.protocol import JoinGroupRequest, error_of
from tests.helpers import wait_until

#: Members waiting in a join at once: as many as the coordinator takes (before the fix, as
#: many as it had threads for all its calls).
WAITING_MEMBERS = JOIN_CONCURRENCY
#: Long enough that no join completes by the rebalance deadline while the test runs.
REBALANCE_TIMEOUT_MS = 120_000
ANSWER_S = 30.0


def join(handle, group_id: str, member_id: str = ""):
    request = JoinGroupRequest(
        group_id,
        member_id,
        ("t",),
        {"t": 1},
        ("range",),
        session_timeout_ms=60_000,
        rebalance_timeout_ms=REBALANCE_TIMEOUT_MS,
    )
    return handle.join_group.remote(request)


def member_count(handle, group_id: str) -> int:
    """How many members the group has (each waiting join added one)."""
    return len(ray.get(handle.describe_group.remote(group_id), timeout=ANSWER_S).value["members"])


def test_members_waiting_in_a_join_do_not_starve_the_calls_that_end_their_wait(cluster):
    """A group's first member joins, then as many members as the coordinator takes in joins
    at once join and wait for it to rejoin (it never does). Meanwhile an offset fetch, the replica's
    state (what the controller's probe reads) and the first member's leave, which completes
    the join, are answered; then every waiting join is answered with the new generation."""
    group_id = f"threads-{uuid.uuid4().hex[:8]}"
    handle = wait_until(lambda: ray.get(cluster.controller.find_coordinator.remote(group_id))[1], ANSWER_S)
    first = ray.get(join(handle, group_id), timeout=ANSWER_S)
    assert error_of(first) is None
    waiting = [join(handle, group_id) for _ in range(WAITING_MEMBERS)]
    try:
        wait_until(
            lambda: member_count(handle, group_id) == WAITING_MEMBERS + 1, ANSWER_S, message="every member waits"
        )
        assert error_of(ray.get(handle.fetch_offsets.remote(group_id), timeout=ANSWER_S)) is None
        assert ray.get(handle.state.remote(), timeout=ANSWER_S)["leader_epoch"] >= 0
        assert ray.wait(waiting, num_returns=1, timeout=0)[0] == []  # still waiting
        left = ray.get(handle.leave_group.remote(group_id, first.member_id, None), timeout=ANSWER_S)
        assert error_of(left) is None
        answers = ray.get(waiting, timeout=ANSWER_S)
        assert {error_of(a) for a in answers} == {None}
        assert {a.generation for a in answers} == {first.generation + 1}
    finally:
        members = ray.get(handle.describe_group.remote(group_id), timeout=REBALANCE_TIMEOUT_MS / 1000).value
        for member in members["members"]:
            ray.get(handle.leave_group.remote(group_id, member["member_id"], None))
