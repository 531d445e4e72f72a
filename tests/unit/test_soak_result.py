"""How a soak run's result counts a cluster that was not in sync while its clients ran
(raylog.chaos.soak.RunResult): not in sync once the load stopped is a failure (a stuck state:
a lost push, a replica that never fetches); in sync only once it stopped is reported but no
failure (seed 169: under a saturating load the followers kept falling past the run's 1.5 s
replica.lag.time.max.ms and catching up, the ISR shrinking and growing for the whole wait)."""

from __future__ import annotations

from raylog.chaos import checker
from raylog.chaos.soak import RunConfig, RunResult, totals


def result(seed: int, healed: bool, synced_once_unloaded: bool, unhealed: str = "", evidence: str = "") -> RunResult:
    return RunResult(
        seed=seed,
        config=RunConfig(),
        report=checker.Report({kind: [] for kind in checker.CLASSES}),
        faults=[],
        ops=10,
        acknowledged=10,
        healed=healed,
        elapsed_s=1.0,
        client_errors=[],
        crashes=[],
        offline=[],
        unhealed=unhealed,
        evidence=evidence,
        synced_once_unloaded=synced_once_unloaded,
        transactions={},
        demoted=[],
        throughput_per_s=10.0,
        latency_ms=(1.0, 2.0),
        polled={},
    )


def test_a_cluster_in_sync_only_once_the_load_stopped_is_reported_and_does_not_fail_the_run():
    run = result(1, healed=True, synced_once_unloaded=True, unhealed="under load: t-1 leader 2 ...")
    assert not run.failed
    assert run.line().endswith(" in-sync-only-without-load 1.0s ok")
    assert "not healed: under load: t-1 leader 2" in run.details()


def test_a_cluster_not_in_sync_after_the_load_stopped_fails_the_run():
    run = result(2, healed=False, synced_once_unloaded=False, unhealed="under load: t-0 leader 1 ...")
    assert run.failed and " NOT-HEALED " in run.line()
    summary = totals([run, result(3, healed=True, synced_once_unloaded=True)], 5.0)
    assert "failed=1 seeds=2 " in summary and "in-sync-only-without-load=1 " in summary


def test_a_runs_evidence_of_its_violations_is_in_its_details():
    """A run with violations shows what each violated partition's replicas hold at the end
    (their leader epochs and where each starts): truncation of acknowledged records shows as
    an epoch starting below them."""
    run = result(4, healed=True, synced_once_unloaded=False, evidence="leader changes: [...]; at the end: t-1 ...")
    assert "  evidence: leader changes: [...]; at the end: t-1 ..." in run.details()


def test_a_fault_that_failed_midway_is_named_in_the_line_and_a_skipped_one_is_not():
    """A fault that failed after doing part of its work (seed 458: replace-disk wiped a disk,
    then its broker took longer than the nemesis waited to come back) is in the line, marked;
    before, the line showed no fault and the run's offline partition read as unexplained."""
    from raylog.chaos.nemesis import FaultEvent

    run = result(5, healed=True, synced_once_unloaded=False)
    run.faults = [
        FaultEvent("delay-calls"),
        FaultEvent("replace-disk", outcome="error: RaylogError: the broker back: not within 30.0 s"),
        FaultEvent("kill-leader", outcome="skipped: no leader"),
    ]
    assert " faults=2[delay-calls, replace-disk(failed)] " in run.line()
