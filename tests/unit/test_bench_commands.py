"""Every benchmark of raylog.benchmarks is a ``raylog bench <name>`` command of the installed
package, taking its own options, and one missing a package says which extra to install.
Argument parsing only: nothing is measured, no Ray starts."""

from __future__ import annotations

import os
import pkgutil
import sys

import pytest
import tomllib
from setuptools import find_namespace_packages

import raylog
import raylog.benchmarks
from raylog import cli
from raylog.benchmarks import BENCHMARKS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: Modules of raylog.benchmarks that are shared code, not benchmarks.
SHARED = {"common", "perf"}


def test_every_benchmark_module_has_a_command():
    modules = {m.name for m in pkgutil.iter_modules(raylog.benchmarks.__path__) if m.name not in SHARED}
    named = {module.split(".")[0] for module, _ in BENCHMARKS.values()}
    assert named == modules - {"asv"}


def test_the_installed_package_holds_the_benchmarks_but_not_the_history_data():
    """pyproject's package list (as setuptools finds it) holds every benchmark module's
    package and not the asv directory (its suite, settings and results run from a checkout)."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        find = tomllib.load(f)["tool"]["setuptools"]["packages"]["find"]
    packages = set()
    for where in find["where"]:
        packages |= set(
            find_namespace_packages(os.path.join(ROOT, where), include=find["include"], exclude=find["exclude"])
        )
    for module, _ in BENCHMARKS.values():
        package = f"raylog.benchmarks.{module}".rsplit(".", 1)[0] if "." in module else "raylog.benchmarks"
        assert package in packages, module
    assert not [p for p in packages if p.startswith("raylog.benchmarks.asv")]


def test_bench_help_lists_every_benchmark(capsys):
    assert cli.main(["bench", "--help"]) == 0
    out = capsys.readouterr().out
    for name in BENCHMARKS:
        assert name in out, name
    for command in ("produce", "consume", "e2e", "fuzz-wire", "soak", "simulate", "txn-copier"):
        assert command in out


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_each_benchmark_takes_its_own_options(name, capsys):
    """``raylog bench NAME --help`` is the benchmark's own help, under its command's name,
    naming its options (or subcommands) beyond -h."""
    assert cli.main(["bench", name, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: raylog bench {name} [-h] "), out
    assert "options:" in out


def test_a_refused_option_is_the_benchmarks_usage_error(capsys):
    assert cli.main(["bench", "storage", "--no-such-option"]) == 2
    assert "raylog bench storage: error: unrecognized arguments: --no-such-option" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "blocked", "extra"),
    [
        (["kafka-records", "--quick"], "aiokafka", "bench"),
        (["peers", "--quick"], "redis", "bench"),
        (["spark", "--quick"], "raydp", "spark"),
        (["kafka", "--quick"], "confluent_kafka", "bench"),
    ],
)
def test_a_missing_package_names_the_extra_to_install(argv, blocked, extra, monkeypatch, capsys):
    """Before anything starts: one line naming the package and the extra, exit code 2."""
    monkeypatch.setitem(sys.modules, blocked, None)  # import raises ImportError
    assert cli.main(["bench", *argv]) == 2
    err = capsys.readouterr().err
    assert f"raylog bench {argv[0]}: error: this benchmark needs {blocked}" in err
    assert f"pip install 'raylog[{extra}]'" in err
    assert "Traceback" not in err


def test_the_history_refuses_to_run_outside_a_checkout(monkeypatch, capsys):
    from raylog.benchmarks import history

    monkeypatch.setattr(history, "ROOT", os.path.dirname(raylog.__file__))  # as in site-packages: no .git
    assert cli.main(["bench", "history", "publish"]) == 1
    assert "the benchmark history runs from a raylog checkout" in capsys.readouterr().err
