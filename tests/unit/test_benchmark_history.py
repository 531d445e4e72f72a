"""The benchmark history's own logic (raylog/benchmarks/history.py): which commit is the baseline,
the order of the runs, and reading asv compare's tables into the figures that got worse."""

from __future__ import annotations

import os

import pytest

from raylog.benchmarks import history

#: ``asv compare --split --factor 1.1`` as asv 0.6.6 prints it (abridged).
COMPARE = """\

Benchmarks that have improved:

| Change   | Before [488d2c8a] <main>   | After [5f0c1e2d] <slow>   |   Ratio | Benchmark (Parameter)             |
|----------|----------------------------|---------------------------|---------|-----------------------------------|
| -        | 412±20ms                   | 350±10ms                  |    0.85 | client.Client.track_send_s_per_1m |

Benchmarks that have stayed the same:

| Change   | Before [488d2c8a] <main>   | After [5f0c1e2d] <slow>   | Ratio   | Benchmark (Parameter)             |
|----------|----------------------------|---------------------------|---------|-----------------------------------|
|          | 2.31±0.1                   | 2.35±0.2                  | 1.02    | replication.Replication.track_rf3 |
|          | 40.1±8ms                   | 46.0±9ms                  | ~1.15   | latency.Latency.track_e2e_p50     |

Benchmarks that have got worse:

| Change   | Before [488d2c8a] <main>   | After [5f0c1e2d] <slow>   |   Ratio | Benchmark (Parameter)             |
|----------|----------------------------|---------------------------|---------|-----------------------------------|
| +        | 51.2±1ms                   | 63.0±2ms                  |    1.23 | client.Client.track_poll_arrow    |
| !        | 1.52±0.1s                  | failed                    |     n/a | spark.Spark.track_spark_read      |
"""


def test_the_baseline_file_names_a_commit_outside_its_comments():
    assert history.baseline_from_file("# why\n\n  488d2c8  # the start\n") == "488d2c8"
    with pytest.raises(ValueError):
        history.baseline_from_file("# only a comment\n")


def test_the_repositorys_baseline_file_names_cb0d5ca():
    with open(history.BASELINE_FILE, encoding="utf-8") as f:
        assert history.baseline_from_file(f.read()) == "cb0d5ca"


def test_the_base_is_the_override_then_the_newest_version_tag_then_the_file():
    text = "# comment\nabc1234\n"
    assert history.resolve_base("main~3", ["v1.0"], text) == "main~3"
    assert history.resolve_base(None, ["v1.1", "v1.0"], text) == "v1.1"
    assert history.resolve_base(None, [], text) == "abc1234"
    assert history.resolve_base(None, ["release-2"], text) == "abc1234"


def test_runs_alternate_which_commit_goes_first():
    assert history.run_order(1) == ["base", "head"]
    assert history.run_order(3) == ["base", "head", "head", "base", "base", "head"]


def test_every_benchmark_line_is_read_and_only_worse_or_failing_ones_are_named():
    changes = history.parse_compare(COMPARE)
    assert [c.name.split(".")[-1] for c in changes] == [
        "track_send_s_per_1m",
        "track_rf3",
        "track_e2e_p50",
        "track_poll_arrow",
        "track_spark_read",
    ]
    assert [c.mark for c in changes] == ["-", " ", " ", "+", "!"]
    bad = history.worse(changes)
    assert [(c.name, c.before, c.after, c.ratio) for c in bad] == [
        ("client.Client.track_poll_arrow", "51.2±1ms", "63.0±2ms", "1.23"),
        ("spark.Spark.track_spark_read", "1.52±0.1s", "failed", "n/a"),
    ]


def test_the_summary_names_each_worse_figure_or_says_none_got_worse():
    changes = history.parse_compare(COMPARE)
    lines = history.summary(changes, "488d2c8", "slow", 1.1)
    assert lines[0] == "2 of 5 figures got more than 10% worse at slow than at 488d2c8:"
    assert lines[1] == "  client.Client.track_poll_arrow: 51.2±1ms -> 63.0±2ms (1.23x)"
    assert lines[2] == "  spark.Spark.track_spark_read: now fails"
    same = [c for c in changes if c.mark not in "+!"]
    assert history.summary(same, "a", "b", 1.1) == ["no figure got more than 10% worse at b than at a (3 compared)"]


def test_the_suite_and_its_settings_are_where_the_command_looks():
    assert os.path.isfile(history.CONFIG)
    assert os.path.isdir(os.path.join(history.ASV_DIR, "suite"))


def test_the_results_name_the_python_without_the_machines_folders():
    assert history.portable_path("/home/ci/raylog/.venv/bin/python", "/home/ci/raylog") == ".venv/bin/python"
    assert history.portable_path("/usr/bin/python3", "/home/ci/raylog") == "bin/python3"


def test_the_ray_workers_get_the_tree_under_test_first_on_their_path(monkeypatch, tmp_path):
    """asv puts the tree on the benchmark process's sys.path only: Ray's workers (the
    controller, the replicas) imported the installed checkout's raylog."""
    from raylog.benchmarks.asv import suite

    monkeypatch.setenv("RAYLOG_HISTORY_TREE", str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", "/other")
    suite.tree_for_workers()
    assert os.environ["PYTHONPATH"].split(os.pathsep) == [
        str(tmp_path),
        str(tmp_path / "integrations" / "spark"),
        "/other",
    ]


def test_a_raylog_imported_outside_the_tree_under_test_is_refused(monkeypatch, tmp_path):
    from raylog.benchmarks.asv import suite

    monkeypatch.setenv("RAYLOG_HISTORY_TREE", str(tmp_path))
    suite.check_tree("a Ray worker", str(tmp_path / "raylog" / "__init__.py"))
    with pytest.raises(RuntimeError, match="a Ray worker imported raylog from /elsewhere"):
        suite.check_tree("a Ray worker", "/elsewhere/raylog/__init__.py")


def test_the_measuring_code_runs_against_the_baseline(tmp_path):
    """The suite measures every commit with this checkout's benchmarks: a benchmark importing
    a module the baseline does not have (raylog.clients.producer.sender, after the producer's
    split) left the default compare unable to measure its base."""
    with open(history.BASELINE_FILE, encoding="utf-8") as f:
        baseline = history.commit_of(history.baseline_from_file(f.read()))
    tree = history.extract(baseline, str(tmp_path))
    assert history.unmeasurable(tree) is None


def test_a_tree_the_measuring_code_cannot_import_is_named(tmp_path):
    (tmp_path / "raylog").mkdir()
    (tmp_path / "raylog" / "__init__.py").write_text("")
    history.put_measuring_code(str(tmp_path))
    assert "cannot import name" in history.unmeasurable(str(tmp_path))
