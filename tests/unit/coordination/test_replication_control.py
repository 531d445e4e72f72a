"""The controller's replication control as a step core: events in, effects out (no Ray)."""

from __future__ import annotations

import logging

from raylog.common.requests import PREFERRED_ELECTION, UNCLEAN_ELECTION
from raylog.coordination.elections import NO_LEADER
from raylog.coordination.metadata import MetadataImage
from raylog.coordination.replication_control import (
    NOTHING,
    AlterIsr,
    BalanceLeaders,
    BrokersFound,
    CheckLeader,
    CheckReassignment,
    ControllerResult,
    ElectLeaders,
    LeaderDead,
    LeaderUnreachable,
    ReactToLiveness,
    ReplicaRestarted,
    ReplicationControl,
)
from raylog.errors import ElectionNotNeededError, PreferredLeaderNotAvailableError, UnknownTopicOrPartitionError

NODES = {b: (f"node-{b}", f"/data/broker-{b}", f"directory-{b}") for b in (0, 1, 2)}


def control(*replicas: list[int], unclean: bool = False) -> ReplicationControl:
    """Brokers 0-2 live, and topic ``t`` with a partition per replica list (led by its first)."""
    core = ReplicationControl(MetadataImage())
    config = {"unclean.leader.election.enable": "true" if unclean else "false"}
    topic = {"type": "topic", "name": "t", "topic_id": "t", "config": config, "replicas": [list(r) for r in replicas]}
    core.replay(ControllerResult((topic,)))
    done(core, BrokersFound(NODES))
    return core


def done(core: ReplicationControl, event) -> ControllerResult:
    """Step ``event`` and replay its result, as a pump does once the records are journaled."""
    result = core.step(event)
    core.replay(result)
    return result


def test_a_step_changes_nothing_until_its_result_is_replayed():
    """The journal write comes between step and replay: a result that was not journaled (a
    full disk) leaves the image and the live set as they were, and the same event decides the
    same again."""
    core = control([0, 1, 2])
    event = BrokersFound({b: NODES[b] for b in (0, 1)})
    first = core.step(event)
    assert core.live == {0, 1, 2} and core.image.partition("t", 0).isr == (0, 1, 2)
    assert core.step(event) == first
    core.replay(first)
    assert core.live == {0, 1}


def test_an_accepted_isr_proposal_is_journaled_pushed_and_answered_with_the_new_state():
    core = control([0, 1, 2])
    done(core, AlterIsr("t", 0, 0, 0, 0, (0, 1)))
    result = core.step(AlterIsr("t", 0, 0, 0, 1, (0, 1, 2)))
    (new,) = result.push
    assert result.response == (True, new) and (new.isr, new.partition_epoch) == ((0, 1, 2), 2)
    assert [r["type"] for r in result.records] == ["partition"] and result.records[0]["isr"] == [0, 1, 2]


def test_a_stale_isr_proposal_is_refused_with_the_current_state_and_changes_nothing():
    core = control([0, 1, 2])
    current = core.image.partition("t", 0)
    result = core.step(AlterIsr("t", 0, 0, 5, 0, (0, 1)))  # an epoch this leader never had
    assert result == ControllerResult(response=(False, current))


def test_a_call_about_a_partition_that_is_gone_is_answered_none():
    core = control([0, 1, 2])
    for event in (
        AlterIsr("t", 7, 0, 0, 0, (0,)),
        ReplicaRestarted("gone", 0, 1),
        LeaderUnreachable("t", 3, 0),
        LeaderDead("gone", 0, 0, 0),
        CheckReassignment("t", 9),
    ):
        assert core.step(event) is NOTHING


def test_a_restarted_leader_hands_over_and_its_report_is_answered_with_the_state_to_take():
    core = control([0, 1, 2])
    result = done(core, ReplicaRestarted("t", 0, 0))
    assert result.response == core.image.partition("t", 0) == result.push[0]
    assert (result.response.leader, result.response.leader_epoch, result.response.isr) == (1, 1, (1, 2))


def test_a_reported_leader_is_checked_by_the_controller_before_anything_moves():
    """One follower's word moves nothing: the result asks the pump to call the leader; only
    :class:`LeaderDead` (its call failed) elects, and not once the epoch moved on."""
    core = control([0, 1, 2])
    result = core.step(LeaderUnreachable("t", 0, 0))
    assert result == ControllerResult(check=CheckLeader("t", 0, 0, 0))
    assert core.step(LeaderUnreachable("t", 0, 1)) is NOTHING  # a report about an older leader
    done(core, ReplicaRestarted("t", 0, 0))  # leader epoch 1 now: broker 1 leads
    assert core.step(LeaderDead("t", 0, 0, 0)) is NOTHING
    new = done(core, LeaderDead("t", 0, 1, 1)).push[0]
    assert (new.leader, new.leader_epoch) == (2, 2)


def test_a_reported_leader_on_a_dead_broker_is_left_to_the_liveness_round():
    core = control([0, 1, 2])
    done(core, BrokersFound({b: NODES[b] for b in (1, 2)}))
    assert core.step(LeaderUnreachable("t", 0, 0)) is NOTHING


def test_brokers_found_journal_their_registration_and_become_the_live_set(caplog):
    core = ReplicationControl(MetadataImage())
    with caplog.at_level(logging.INFO):
        result = done(core, BrokersFound(NODES))
    assert [r["broker_id"] for r in result.records] == [0, 1, 2] and core.live == {0, 1, 2}
    assert core.image.brokers[1].data_dir == "/data/broker-1" and core.image.directory_ids[2] == "directory-2"
    assert "brokers [0, 1, 2] are live" in caplog.text
    again = core.step(BrokersFound(NODES))  # nothing new
    assert (again.records, again.push, again.live) == ((), (), frozenset(NODES))


def test_a_dead_broker_leaves_the_isrs_and_its_partitions_elect_in_the_next_reaction(caplog):
    core = control([0, 1, 2], [1, 2, 0])
    with caplog.at_level(logging.WARNING):
        assert done(core, BrokersFound({b: NODES[b] for b in (1, 2)})).push == ()
    assert "brokers [0] are not live any more" in caplog.text
    result = done(core, ReactToLiveness())
    assert [(p.partition, p.leader, p.isr) for p in result.push] == [(0, 1, (1, 2)), (1, 1, (1, 2))]
    assert core.step(ReactToLiveness()) is not None and not core.step(ReactToLiveness()).records


def test_a_broker_on_another_node_restarted_from_its_disk_and_hands_over():
    core = control([0, 1, 2])
    moved = {**NODES, 0: ("node-0-again", *NODES[0][1:])}
    result = done(core, BrokersFound(moved))
    assert result.records[0] == {"type": "broker", "broker_id": 0, "node_id": "node-0-again",
                                 "data_dir": "/data/broker-0", "directory_id": "directory-0"}  # fmt: skip
    assert (result.push[0].leader, result.push[0].isr) == (1, (1, 2))


def test_a_broker_back_with_a_new_directory_leaves_every_isr_even_as_the_last_member(caplog):
    """KIP-858: a wiped disk holds none of its replicas; the partition whose only in-sync
    replica it was stays offline (no unclean election)."""
    core = control([0, 1, 2])
    done(core, BrokersFound({0: NODES[0]}))
    done(core, ReactToLiveness())
    assert core.image.partition("t", 0).isr == (0,)
    down = {b: NODES[b] for b in (1, 2)}
    done(core, BrokersFound(down))
    done(core, ReactToLiveness())
    assert core.image.partition("t", 0).leader == NO_LEADER
    with caplog.at_level(logging.WARNING):
        done(core, BrokersFound({**NODES, 0: ("node-0-b", NODES[0][1], "directory-0-new")}))
    done(core, ReactToLiveness())
    after = core.image.partition("t", 0)
    assert (after.leader, after.isr) == (NO_LEADER, ())
    assert "came back with a new log directory" in caplog.text and "['t-0']" in caplog.text


def test_an_unclean_topic_elects_any_live_replica_when_no_isr_member_is_left():
    core = control([0, 1, 2], unclean=True)
    done(core, BrokersFound({0: NODES[0]}))
    done(core, ReactToLiveness())
    done(core, BrokersFound({1: NODES[1]}))
    new = done(core, ReactToLiveness()).push[0]
    assert (new.leader, new.isr) == (1, (1,))


def test_an_operators_elections_answer_per_partition_in_one_batch():
    core = control([0, 1, 2], [1, 2, 0])
    done(core, ReplicaRestarted("t", 0, 0))  # 1 leads partition 0, 0 left its ISR
    result = core.step(ElectLeaders(PREFERRED_ELECTION, (("t", 0), ("t", 1), ("t", 5))))
    codes = {key: code for key, (code, _) in result.response.items()}
    assert codes == {
        ("t", 0): PreferredLeaderNotAvailableError.code,
        ("t", 1): ElectionNotNeededError.code,
        ("t", 5): UnknownTopicOrPartitionError.code,
    }
    assert result.records == ()
    done(core, AlterIsr("t", 0, 1, 1, 1, (0, 1, 2)))
    everything = done(core, ElectLeaders(PREFERRED_ELECTION))
    assert everything.response == {("t", 0): (0, "")}  # those needing none are left out
    assert core.image.partition("t", 0).leader == 0
    unclean = core.step(ElectLeaders(UNCLEAN_ELECTION, (("t", 0),)))
    assert unclean.response[("t", 0)][0] == ElectionNotNeededError.code


def test_leaders_go_back_to_preferred_replicas_only_past_the_imbalance_allowed():
    core = control([0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 2, 1])
    done(core, ReplicaRestarted("t", 0, 0))  # partition 0 now led by 1: 1 of 4 elsewhere
    done(core, AlterIsr("t", 0, 1, 1, 1, (0, 1, 2)))
    assert core.step(BalanceLeaders(25)) is NOTHING
    moved = done(core, BalanceLeaders(20)).push
    assert [(p.partition, p.leader) for p in moved] == [(0, 0)]


def test_a_reassignment_finishes_once_every_target_replica_is_in_sync():
    core = control([0, 1])
    core.replay(ControllerResult(tuple(core.image.reassign("t", 0, [1, 2], True))))
    assert core.image.partition("t", 0).replicas == (1, 2, 0)  # the target's, then those leaving
    assert core.step(CheckReassignment("t", 0)) is NOTHING  # 2 not in sync yet
    done(core, AlterIsr("t", 0, 0, 0, core.image.partition("t", 0).partition_epoch, (0, 1, 2)))
    result = done(core, CheckReassignment("t", 0))
    assert result.response == (0,) and result.records[-1]["target"] == []
    final = core.image.partition("t", 0)
    assert (final.replicas, final.leader, final.isr) == ((1, 2), 1, (1, 2)) and not core.image.reassignments


def test_each_decision_is_logged_with_its_cause_when_replayed(caplog):
    core = control([0, 1, 2])
    result = core.step(ReplicaRestarted("t", 0, 0))
    with caplog.at_level(logging.INFO, logger="raylog.coordination.elections"):
        assert not caplog.records
        core.replay(result)
    assert "the replica on broker 0 restarted" in caplog.text
