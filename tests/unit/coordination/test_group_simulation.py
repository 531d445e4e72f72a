"""Seeded schedules of a consumer group's coordinator (:mod:`raylog.chaos.group_simulation`):
the shipped GroupCore over a real ``__consumer_offsets`` partition, members following the
client's own membership rules, asynchronous commits, a transactional producer's offsets,
appends that are slow, fail, time out or end their waits in any order, and fail-overs. Every
invariant is checked after every step (the failing seed is named); ``raylog bench simulate
--profile groups`` runs many more.

``RAYLOG_GROUP_SIM_SEEDS`` sets how many seeds run per assignor (the default keeps the suite
fast); the last test runs the group coordinator inside the replication simulation."""

from __future__ import annotations

import os

import pytest

from raylog.chaos import group_cluster, group_simulation
from raylog.chaos.group_simulation import STRATEGIES
from tests.unit.coordination.simulation_fixtures import no_fsync, quiet  # noqa: F401 — autouse fixtures

SEEDS = int(os.environ.get("RAYLOG_GROUP_SIM_SEEDS", "40"))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_simulation_keeps_every_group_invariant(tmp_path, strategy):
    """No generation told before it is durable or loaded below what was told, one owner per
    partition per generation, offsets served as the log has them (whichever append's wait ends
    first), no acknowledged commit lost, no aborted transaction's offsets served, each call
    answered once; once quiet, the group settles balanced."""
    for seed in range(SEEDS):
        group_simulation.run(str(tmp_path / str(seed)), seed, strategy)


def test_the_whole_simulation_keeps_every_invariant_with_a_group_coordinator_on_the_leader(tmp_path):
    """The replication simulation with the group's coordinator on whichever replica leads
    (:mod:`raylog.chaos.group_cluster`): elections move the coordinator, its appends wait for
    the simulated followers, calls to it are delayed, reordered and lost; every invariant of
    both simulations holds after every step."""
    for seed in range(SEEDS // 2):
        group_cluster.run(str(tmp_path / str(seed)), seed, 600)
