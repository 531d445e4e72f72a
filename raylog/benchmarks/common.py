"""What the benchmarks share: inputs, targets and result rows, the table printer, timing and
statistics helpers, the command line, the run's bookkeeping (load average, raylog source
hash, environment, JSON) and a local Ray started and stopped by the benchmark itself.

Ray is imported only by the functions that need it, so ``storage_bench`` (no Ray) stays
free of it; so are the packages of the ``bench`` and ``spark`` extras, which a benchmark asks
for with :func:`require` once its arguments are parsed.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import hashlib
import importlib
import inspect
import json
import os
import platform
import random
import re
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa

MIB = 1024 * 1024
MB = 1_000_000


class BenchError(RuntimeError):
    """A measurement could not be taken (a timeout, lost records, a cluster that did not heal)."""


class MissingExtraError(BenchError):
    """A package the benchmark needs is not installed; the message names the extra bringing it."""


def require(*modules: str, extra: str = "bench") -> None:
    """Import ``modules`` (the packages a benchmark needs beyond raylog's own dependencies).

    Raises:
        MissingExtraError: one is not installed: it names the extra to install.
    """
    missing = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise MissingExtraError(
            f"this benchmark needs {', '.join(missing)}, from raylog's {extra} extra: pip install 'raylog[{extra}]'"
        )


def run(main: Callable[[], int], prog: str) -> int:
    """``main()``'s exit code; a :class:`BenchError` that ends it is one line on stderr
    instead of a traceback: exit code 2 for a missing extra, else 1."""
    try:
        return main()
    except BenchError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, MissingExtraError) else 1


def run_script(main: Callable[[], int]) -> None:
    """``python -m raylog.benchmarks.<module>``: exit with :func:`run`'s code."""
    sys.exit(run(main, os.path.basename(sys.argv[0])))


# ---------------------------------------------------------------------------------------
# Inputs


def make_values(count: int, size: int, seed: int = 0) -> list[bytes]:
    """``count`` distinct values of ``size`` bytes: JSON-like text with a random hex tail."""
    rng = random.Random(seed)
    events = ("click", "view", "purchase", "scroll", "login")
    values = []
    for i in range(count):
        head = b'{"id":%d,"user":"user-%05d","event":"%s","amount":%d.%02d,"pad":"' % (
            i,
            rng.randrange(100_000),
            rng.choice(events).encode(),
            rng.randrange(10_000),
            rng.randrange(100),
        )
        values.append((head + rng.randbytes(size // 2).hex().encode())[: size - 2] + b'"}')
    return values


# ---------------------------------------------------------------------------------------
# Targets and results


@dataclass(frozen=True)
class Target:
    """A goal for one figure of a row: ``metric`` (a Row field) ``op`` ``value``."""

    metric: str  # records_per_s, mb_per_s, ratio, uss_mb, or a time: p50_ms, p99_ms, p50_s, max_s
    op: str  # ">=" or "<="
    value: float

    def met(self, measured: float | None) -> bool:
        if measured is None:
            return False
        return measured >= self.value if self.op == ">=" else measured <= self.value

    def __str__(self) -> str:
        if self.metric == "records_per_s":
            return f"{self.op} {self.value:,.0f}/s"
        if self.metric == "mb_per_s":
            return f"{self.op} {self.value:,.0f} MB/s"
        if self.metric == "ratio":
            return f"{self.op} {self.value:.2f}x"
        if self.metric.endswith("_ms"):
            return f"{self.metric[:-3]} {self.op} {self.value:g} ms"
        if self.metric.endswith("_s") or self.metric == "seconds":
            return f"{self.metric.removesuffix('_s')} {self.op} {self.value:g} s"
        return f"{self.op} {self.value:g} MB"


class Judged:
    """Gives a row dataclass its ``result``: ERROR (its ``error`` is set), its ``verdict``
    if it has one, else PASS or BELOW against its ``targets`` ("" without targets); with
    several targets BELOW names the missed ones."""

    @property
    def result(self) -> str:
        if getattr(self, "error", None) is not None:
            return "ERROR"
        verdict = getattr(self, "verdict", None)
        if verdict is not None:
            return verdict
        targets: list[Target] = self.targets
        if not targets:
            return ""
        missed = [t for t in targets if not t.met(getattr(self, t.metric))]
        if not missed:
            return "PASS"
        if len(targets) > 1:
            return "BELOW (" + ", ".join(t.metric.removesuffix("_ms").removesuffix("_s") for t in missed) + ")"
        return "BELOW"


# ---------------------------------------------------------------------------------------
# Timing and statistics


def cpu_seconds(*pids: int) -> float:
    """User + system CPU seconds the processes ``pids`` used so far."""
    import psutil

    total = 0.0
    for pid in pids:
        times_ = psutil.Process(pid).cpu_times()
        total += times_.user + times_.system
    return total


def best(run: Callable[[], Any], repeats: int) -> Any:
    """The least of ``repeats`` calls of ``run`` (its elapsed seconds, or a tuple led by them)."""
    return min(run() for _ in range(repeats))


def timed_calls(fn: Callable[[], object], calls: int) -> float:
    """Seconds taken by ``calls`` calls of ``fn``."""
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return time.perf_counter() - start


def send_at_rate(count: int, rate: float, send_one: Callable[[], object]) -> float:
    """Call ``send_one`` ``count`` times at ``rate`` calls per second, open loop (catching
    up at once when behind); returns the seconds it took."""
    start, sent = time.perf_counter(), 0
    while sent < count:
        due = min(count, int((time.perf_counter() - start) * rate) + 1)
        while sent < due:
            send_one()
            sent += 1
        delay = start + sent / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
    return time.perf_counter() - start


# ---------------------------------------------------------------------------------------
# Tables

#: A table's columns after the name: (title, width, cell text of a row); the first entry is
#: ("measurement", width, None). Every table ends with target, result and note columns.
Columns = Sequence[tuple[str, int, Callable[[Any], str] | None]]


def number(value: float | None, form: str) -> str:
    return "" if value is None else format(value, form)


def times(value: float | None) -> str:
    """A ratio as ``1.23x``."""
    return "" if value is None else f"{value:.2f}x"


def format_table(columns: Columns, rows: Iterable[Any], target_width: int = 16) -> str:
    """The rows as a fixed-width text table: name, ``columns``, target, result, note."""
    head = [columns[0][0].ljust(columns[0][1])] + [title.rjust(width) for title, width, _ in columns[1:]]
    header = "  ".join(head + ["target".ljust(target_width), "result".ljust(6), "note"])
    lines = [header, "-" * len(header)]
    for row in rows:
        cells = [row.name.ljust(columns[0][1])] + [cell(row).rjust(width) for _, width, cell in columns[1:]]
        cells += [", ".join(map(str, row.targets)).ljust(target_width), row.result.ljust(6), row.note]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def print_tables(
    rows: list[Any], tables: dict[str, tuple[Columns, int]], arrange: Callable[[list[Any]], list[Any]] = list
) -> None:
    """One table per section of ``tables`` (columns, target width) that has rows, in that
    order, each after an empty line; ``arrange`` orders a section's rows."""
    for section, (columns, target_width) in tables.items():
        chosen = arrange([r for r in rows if r.section == section])
        if chosen:
            print()
            print(format_table(columns, chosen, target_width))


# ---------------------------------------------------------------------------------------
# Command line, bookkeeping, output


def bench_parser(doc: str, quick_help: str, prog: str | None = None) -> argparse.ArgumentParser:
    """The options every benchmark takes: --quick, --json PATH, --dir PARENT. ``prog``: the
    command its usage names (``raylog bench <name>``; default: this script's)."""
    parser = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    parser.add_argument("--dir", metavar="PARENT", help="parent of the temporary directory (default: system temp)")
    return parser


def source_fingerprint() -> str:
    """A hash of raylog's Python sources: other work may edit them while this runs, and
    Ray workers started later import the newer code."""
    import raylog

    root = os.path.dirname(os.path.abspath(raylog.__file__))
    digest = hashlib.sha256()
    for folder, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for name in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(folder, name)
            digest.update(os.path.relpath(path, root).encode())
            with open(path, "rb") as f:
                digest.update(f.read())
    return digest.hexdigest()[:12]


def environment(with_ray: bool = True) -> dict[str, object]:
    """What the figures depend on besides raylog's code."""
    env: dict[str, object] = {"python": platform.python_version()}
    if with_ray:
        import ray

        env["ray"] = ray.__version__
    env.update(pyarrow=pa.__version__, cpus=os.cpu_count(), machine=platform.machine(), platform=platform.platform())
    return env


def totals_line(seconds: float, env: dict[str, object]) -> str:
    ray_part = f", Ray {env['ray']}" if "ray" in env else ""
    return f"total {seconds:.1f} s on {env['cpus']} CPUs, Python {env['python']}{ray_part}, pyarrow {env['pyarrow']}"


class RunWatch:
    """The run's wall time, the 1-minute load average and raylog's source hash before and
    after it (other work on the machine shares it and may edit raylog meanwhile)."""

    def __init__(self):
        self.load_before, self.sources_before = os.getloadavg()[0], source_fingerprint()
        self.start = time.perf_counter()
        self.seconds = 0.0
        self.load_after, self.sources_after = self.load_before, self.sources_before

    def stop(self) -> None:
        self.seconds = time.perf_counter() - self.start
        self.load_after, self.sources_after = os.getloadavg()[0], source_fingerprint()

    def print_load(self, why: str) -> None:
        print(f"1-minute load average {self.load_before:.2f} before, {self.load_after:.2f} after ({why})")

    def print_sources(self) -> None:
        if self.sources_after == self.sources_before:
            print(f"raylog sources {self.sources_before} (unchanged during the run)")
        else:
            print(
                f"WARNING: raylog's sources changed during the run ({self.sources_before} -> "
                f"{self.sources_after}): actors started after the change ran the new code; run again for "
                "consistent figures"
            )

    def json_fields(self) -> dict[str, object]:
        return {
            "total_seconds": self.seconds,
            "load_average_1min": {"before": self.load_before, "after": self.load_after},
            "raylog_sources": [self.sources_before, self.sources_after],
        }


def rows_json(rows: Iterable[Any]) -> list[dict[str, object]]:
    """Rows with ``targets`` as JSON items: None fields left out, targets as objects."""
    results = []
    for row in rows:
        item = {k: v for k, v in asdict(row).items() if v is not None and k != "targets"}
        item["name"] = row.name.strip()
        item["targets"] = [asdict(t) for t in row.targets]
        item["result"] = row.result or None
        results.append(item)
    return results


def finish(
    rows: list[Any],
    watch: RunWatch,
    json_path: str | None,
    document: dict[str, object],
    load_note: str,
    notes: Iterable[str] = (),
) -> int:
    """A Ray benchmark's last lines: totals, load, notes, sources; its JSON document (given
    fields plus the run's and the environment's, and the rows); the exit code (1 if any
    measurement failed)."""
    env = environment()
    print(totals_line(watch.seconds, env))
    watch.print_load(load_note)
    for note in notes:
        print(f"note: {note}")
    watch.print_sources()
    if json_path:
        dump_json(json_path, {**document, **watch.json_fields(), "environment": env, "results": rows_json(rows)})
    return 1 if any(r.error for r in rows) else 0


def dump_json(path: str, document: dict[str, object]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(document, f, indent=2)
        f.write("\n")


def strip_ansi(text: str) -> str:
    """``text`` without terminal colour codes (Ray colours its error texts)."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


class Phases:
    """A runner's ``phase``: a failed phase becomes an ERROR row (``row_type(section, name,
    error=..., note=...)``) appended to ``self.rows`` and the run goes on."""

    tag = "bench"  # shown in the progress lines on stderr
    row_type: type
    rows: list

    def phase(self, section: str, name: str, fn: Callable[[], None]) -> None:
        started = time.perf_counter()
        try:
            fn()
            print(f"[{self.tag}] {name}: {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
        except Exception as exc:  # noqa: BLE001 — reported as a row, the run goes on
            traceback.print_exc(file=sys.stderr)
            message = strip_ansi(str(exc))
            self.rows.append(
                self.row_type(
                    section,
                    name,
                    error=f"{type(exc).__name__}: {message}",
                    note=f"ERROR {type(exc).__name__}: {message.splitlines()[0] if message else ''}",
                )
            )


# ---------------------------------------------------------------------------------------
# Temporary directory and a local Ray


def temp_workdir(stack: contextlib.ExitStack, prefix: str, parent: str | None) -> str:
    """A new temporary directory under ``parent``, removed when ``stack`` closes."""
    workdir = tempfile.mkdtemp(prefix=prefix, dir=parent)
    stack.callback(shutil.rmtree, workdir, ignore_errors=True)
    return workdir


def shutdown_ray() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()


def start_local_ray(stack: contextlib.ExitStack, ship: str | None = None) -> None:
    """A new local Ray with the embedded cluster's settings (its object store size, no
    dashboard), shut down when ``stack`` closes. ``ship``: a module whose actors workers
    get by value (they may not be able to import it) unless it is ``__main__``."""
    import ray

    import raylog
    from raylog.clients.cluster import EMBEDDED_OBJECT_STORE_BYTES

    if ray.is_initialized():
        raise BenchError("Ray is already initialized in this process; the benchmark starts its own")
    # raylog's bytecode caches, which each replica's process would otherwise compile for
    # itself where PYTHONDONTWRITEBYTECODE is set (see tests/conftest.py).
    compileall.compile_dir(os.path.dirname(raylog.__file__), quiet=1)
    ray.init(
        address="local",
        object_store_memory=EMBEDDED_OBJECT_STORE_BYTES,
        include_dashboard=False,
        configure_logging=False,
        log_to_driver=False,
    )
    stack.callback(shutdown_ray)
    if ship is not None and ship != "__main__":
        ray.cloudpickle.register_pickle_by_value(sys.modules[ship])


#: How long a benchmark waits for a new topic's replicas to start.
TOPIC_START_TIMEOUT_S = 120.0


def create_started(admin: Any, topics: list[Any], timeout_s: float = TOPIC_START_TIMEOUT_S) -> None:
    """``admin.create_topics(topics)``, then wait until every replica of each runs. A topic's
    replicas start in the background after it is created (a process each, followers after
    leaders), and all of them are in its ISR from the start: a figure timed from the first
    send would otherwise count their start, above all with ``acks="all"``."""
    admin.create_topics(topics)
    names, timeout_ms = [t.name for t in topics], int(timeout_s * 1000)
    if "followers" in inspect.signature(admin.await_leaders).parameters:
        admin.await_leaders(names, timeout_ms, followers=True)
    else:  # an older raylog under the benchmark history: its leaders only
        admin.await_leaders(names, timeout_ms)


def get(ref: Any, timeout_s: float, what: str) -> Any:
    """``ray.get`` with a bound and a clear error."""
    import ray

    try:
        return ray.get(ref, timeout=timeout_s)
    except ray.exceptions.GetTimeoutError:
        raise BenchError(f"{what}: no answer within {timeout_s:.0f} s") from None
