"""raylog's benchmark history, kept with airspeed velocity (asv): the quick forms of the
benchmarks (``raylog/benchmarks/asv/suite``) measured per commit, the results in
``raylog/benchmarks/asv/results`` (committed, so the history is visible; not in the wheel),
and one command that compares HEAD with the baseline in the same run on this machine. It
runs from a raylog checkout (git), not from an installed package.

``compare`` runs the suite on the base commit and on HEAD in alternating rounds (base,
head, then head, base, ...: a slow spell of the machine hits both alike), each run giving
every figure ``--samples`` samples, then ``asv compare --factor`` and names every figure more
than 10% worse at HEAD (worse: higher; every figure is a time or a cost) whose samples
differ in asv's Mann-Whitney U test. The base is ``--base``, else the newest tag ``v*``, else
the commit named in ``raylog/benchmarks/asv/BASELINE``.

Each commit's raylog runs from its own sources: ``git archive`` of ``raylog`` and
``integrations/spark/raylog_spark`` at that commit, put first on the benchmark processes'
path (asv's ``ASV_PYTHONPATH``), with the dependencies already installed in this Python
(asv's existing environment, ``--python=same``; no environment is built per commit). The
measuring code (``raylog/benchmarks``, the suite among it) is this checkout's for both
commits: it replaces the commit's own in each tree.

Usage, in the checkout (or ``python -m raylog.benchmarks.history ...``)::

    raylog bench history compare [--base REF] [--head REF] [--rounds N] [--samples N]
                                 [--factor F] [--bench REGEX]
    raylog bench history run [--commit REF] [--samples N] [--bench REGEX]
    raylog bench history publish

``run`` records one commit's figures (the history's next point); ``publish`` writes asv's
web pages into the html folder beside the results (not committed; ``asv preview`` serves them).
The exit code of ``compare`` is 1 when a figure got worse, 2 when a run failed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from raylog.benchmarks.common import BenchError, require, run_script

#: The measuring code: this package, put in place of each commit's own.
MEASURING_DIR = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(MEASURING_DIR))
ASV_DIR = os.path.join(MEASURING_DIR, "asv")
CONFIG = os.path.join(ASV_DIR, "asv.conf.json")
BASELINE_FILE = os.path.join(ASV_DIR, "BASELINE")
#: What each commit's raylog is run from (the package and the Spark integration).
SOURCES = ("raylog", "integrations/spark/raylog_spark")
#: A figure counts as worse past this factor (asv's --factor): 10% more time.
#: The benchmark modules the asv suite measures with (asv/suite): the checkout's
#: own, run against every commit's raylog, so each must import against the base's.
MEASURING_MODULES = (
    "raylog.benchmarks.client_bench",
    "raylog.benchmarks.replication_bench",
    "raylog.benchmarks.latency_trace",
    "raylog.benchmarks.spark_bench",
    "raylog.benchmarks.txn_bench",
    "raylog.benchmarks.kafka_bench",
)
FACTOR = 1.1
ROUNDS = 2
SAMPLES = 4


# ---------------------------------------------------------------------------------------
# Pure parts (unit-tested)


def baseline_from_file(text: str) -> str:
    """The commit named in a BASELINE file: its first word outside ``#`` comments."""
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            return line.split()[0]
    raise ValueError("the BASELINE file names no commit")


def resolve_base(override: str | None, version_tags: list[str], baseline_text: str) -> str:
    """The reference to compare with: ``override`` if given, else the newest tag ``v*``
    (``version_tags`` come newest first), else the BASELINE file's commit."""
    if override:
        return override
    tags = [t for t in version_tags if t.startswith("v")]
    if tags:
        return tags[0]
    return baseline_from_file(baseline_text)


def run_order(rounds: int) -> list[str]:
    """Which commit each run measures: base then head, then head then base, and so on."""
    order: list[str] = []
    for number in range(rounds):
        order += ["base", "head"] if number % 2 == 0 else ["head", "base"]
    return order


@dataclass(frozen=True)
class Change:
    """A line of ``asv compare``: ``mark`` "+" (worse), "-" (better), "!" (now failing),
    "x" (not comparable: the benchmark changed), " " (no significant change)."""

    mark: str
    before: str
    after: str
    ratio: str
    name: str


def parse_compare(output: str) -> list[Change]:
    """Every benchmark line of ``asv compare``'s tables (the GitHub-style ones of asv 0.6)."""
    changes = []
    for line in output.splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or cells[0] == "Change" or set(cells[0]) <= {"-", ":"} and len(cells[0]) > 1:
            continue
        changes.append(Change(cells[0] or " ", cells[1], cells[2], cells[3], cells[4]))
    return changes


def worse(changes: list[Change]) -> list[Change]:
    """The figures that got worse (past the factor and significant) or that now fail."""
    return [c for c in changes if c.mark in ("+", "!")]


def summary(changes: list[Change], base: str, head: str, factor: float) -> list[str]:
    """The report's last lines: every figure that got worse, by name."""
    bad = worse(changes)
    percent = round((factor - 1) * 100)
    if not bad:
        return [f"no figure got more than {percent}% worse at {head} than at {base} ({len(changes)} compared)"]
    lines = [f"{len(bad)} of {len(changes)} figures got more than {percent}% worse at {head} than at {base}:"]
    for c in bad:
        what = "now fails" if c.mark == "!" else f"{c.before} -> {c.after} ({c.ratio}x)"
        lines.append(f"  {c.name}: {what}")
    return lines


# ---------------------------------------------------------------------------------------
# git and asv


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def commit_of(ref: str) -> str:
    return git("rev-parse", "--verify", f"{ref}^{{commit}}")


def version_tags() -> list[str]:
    """Tags ``v*``, newest first."""
    return [t for t in git("tag", "--list", "v*", "--sort=-creatordate").splitlines() if t]


def extract(commit: str, parent: str) -> str:
    """``SOURCES`` at ``commit`` in a new directory under ``parent``, with the checkout's
    measuring code in place of the commit's; its path."""
    tree = os.path.join(parent, commit[:12])
    os.makedirs(tree)
    archive = subprocess.run(["git", "archive", "--format=tar", commit, *SOURCES], cwd=ROOT, capture_output=True)
    if archive.returncode != 0:
        raise SystemExit(f"git archive {commit[:12]}: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", tree], input=archive.stdout, check=True)
    put_measuring_code(tree)
    return tree


def put_measuring_code(tree: str) -> None:
    """The checkout's :data:`MEASURING_DIR` (but its asv directory) in place of the tree's own."""
    measuring = os.path.join(tree, "raylog", "benchmarks")
    shutil.rmtree(measuring, ignore_errors=True)
    shutil.copytree(MEASURING_DIR, measuring, ignore=shutil.ignore_patterns("asv", "__pycache__"))


def unmeasurable(tree: str) -> str | None:
    """Why the measuring code cannot run against the raylog of ``tree`` (the error of
    importing :data:`MEASURING_MODULES` with it first on the path), or None."""
    script = (
        "import sys; import raylog\n"
        "assert raylog.__file__.startswith(sys.argv[1]), raylog.__file__\n"
        f"for name in {MEASURING_MODULES!r}: __import__(name)\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([tree, os.path.join(tree, "integrations", "spark")]))
    done = subprocess.run(
        [sys.executable, "-c", script, os.path.join(tree, "")], cwd=tree, env=env, capture_output=True, text=True
    )
    return None if done.returncode == 0 else done.stderr.strip().splitlines()[-1]


def asv(*args: str, env: dict[str, str] | None = None, capture: bool = False) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "asv", *args]
    print("$ asv " + " ".join(args), flush=True)
    return subprocess.run(command, cwd=ROOT, env=env, text=True, capture_output=capture)


def ensure_machine() -> None:
    """asv's description of this machine (``~/.asv-machine.json``), made once with defaults."""
    asv("machine", "--yes", "--config", CONFIG)


def run_commit(commit: str, tree: str, samples: int, append: bool, bench: str | None) -> float:
    """One asv run of the suite on ``commit``'s raylog (from ``tree``); its seconds."""
    env = dict(os.environ)
    env.update(
        ASV_PYTHONPATH=os.pathsep.join([tree, os.path.join(tree, "integrations", "spark")]),
        RAYLOG_HISTORY_TREE=tree,
        RAYLOG_HISTORY_SAMPLES=str(samples),
    )
    args = ["run", "--config", CONFIG, "--python=same", "--set-commit-hash", commit, "--record-samples"]
    args += ["--show-stderr"] + (["--append-samples"] if append else []) + (["--bench", bench] if bench else [])
    start = time.monotonic()
    done = asv(*args, env=env)
    seconds = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(2)
    return seconds


def scrub_results(commits: list[str]) -> None:
    """Name the Python in the results files of ``commits`` relative to the repository: asv
    records its absolute path, which names the machine's folders."""
    results = os.path.join(ASV_DIR, "results")
    for folder in os.listdir(results):
        if not os.path.isdir(os.path.join(results, folder)):
            continue
        for name in os.listdir(os.path.join(results, folder)):
            if not any(name.startswith(c[:8]) for c in commits):
                continue
            path = os.path.join(results, folder, name)
            with open(path, encoding="utf-8") as f:
                document = json.load(f)
            for holder in (document, document.get("params", {})):
                if isinstance(holder.get("python"), str) and os.path.isabs(holder["python"]):
                    holder["python"] = portable_path(holder["python"], ROOT)
            with open(path, "w", encoding="utf-8") as f:
                json.dump(document, f)


def portable_path(path: str, root: str) -> str:
    """``path`` relative to ``root`` if inside it, else its last two parts."""
    if os.path.commonpath([os.path.abspath(path), root]) == root:
        return os.path.relpath(path, root)
    return os.path.join(*os.path.normpath(path).split(os.sep)[-2:])


def measure(commits: dict[str, str], order: list[str], samples: int, bench: str | None) -> None:
    """Run the suite on each commit of ``commits`` (role -> sha) in ``order``."""
    parent = tempfile.mkdtemp(prefix="raylog-history-")
    try:
        trees = {role: extract(sha, parent) for role, sha in commits.items()}
        for role, tree in trees.items():
            why = unmeasurable(tree)
            if why:
                raise SystemExit(
                    f"the benchmarks cannot measure the {role} {commits[role][:8]}: {why} (the measuring code is "
                    "this checkout's; pass a newer --base, or move raylog/benchmarks/asv/BASELINE forward)"
                )
        seen: set[str] = set()
        for number, role in enumerate(order, 1):
            sha = commits[role]
            print(f"--- run {number} of {len(order)}: {role} {sha[:8]}", flush=True)
            seconds = run_commit(sha, trees[role], samples, sha in seen, bench)
            seen.add(sha)
            print(f"--- run {number} took {seconds:.0f} s", flush=True)
    finally:
        shutil.rmtree(parent, ignore_errors=True)
        scrub_results(list(commits.values()))


# ---------------------------------------------------------------------------------------
# Commands


def compare(args: argparse.Namespace) -> int:
    with open(BASELINE_FILE, encoding="utf-8") as f:
        base_ref = resolve_base(args.base, version_tags(), f.read())
    base, head = commit_of(base_ref), commit_of(args.head)
    start = time.monotonic()
    ensure_machine()
    order = run_order(args.rounds) if base != head else ["base"] * args.rounds
    measure({"base": base, "head": head}, order, args.samples, args.bench)
    table = asv("compare", "--config", CONFIG, "--factor", str(args.factor), "--split", base, head, capture=True)
    print(table.stdout, end="")
    if table.returncode != 0:
        print(table.stderr, file=sys.stderr)
        return 2
    changes = parse_compare(table.stdout)
    head_name = f"{args.head} ({head[:8]})"
    for line in summary(changes, f"{base_ref} ({base[:8]})", head_name, args.factor):
        print(line)
    print(f"compare took {time.monotonic() - start:.0f} s ({len(order)} runs of {args.samples} samples)")
    return 1 if worse(changes) else 0


def record(args: argparse.Namespace) -> int:
    commit = commit_of(args.commit)
    ensure_machine()
    measure({"commit": commit}, ["commit"] * args.rounds, args.samples, args.bench)
    return 0


def publish(_: argparse.Namespace) -> int:
    return asv("publish", "--config", CONFIG).returncode


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    def common(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--samples", type=int, default=SAMPLES, help=f"samples per figure per run ({SAMPLES})")
        sub.add_argument("--bench", metavar="REGEX", help="only the benchmarks matching REGEX (asv's --bench)")

    sub = commands.add_parser("compare", help="compare HEAD with the baseline, same run, this machine")
    sub.add_argument("--base", help="the reference (default: the newest tag v*, else asv/BASELINE)")
    sub.add_argument("--head", default="HEAD", help="the commit compared (default HEAD)")
    sub.add_argument("--rounds", type=int, default=ROUNDS, help=f"runs of each commit, alternating ({ROUNDS})")
    sub.add_argument("--factor", type=float, default=FACTOR, help=f"worse past this ratio ({FACTOR})")
    common(sub)
    sub.set_defaults(func=compare)
    sub = commands.add_parser("run", help="record one commit's figures in the history")
    sub.add_argument("--commit", default="HEAD")
    sub.add_argument("--rounds", type=int, default=1, help="runs, their samples appended (1)")
    common(sub)
    sub.set_defaults(func=record)
    sub = commands.add_parser("publish", help="asv's web pages of the history (not committed)")
    sub.set_defaults(func=publish)
    args = parser.parse_args(argv)
    if not os.path.exists(os.path.join(ROOT, ".git")) or not os.path.exists(CONFIG):
        raise BenchError(f"the benchmark history runs from a raylog checkout (git clone); {ROOT} is not one")
    require("asv")
    return args.func(args)


if __name__ == "__main__":
    run_script(main)
