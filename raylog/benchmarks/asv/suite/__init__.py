"""raylog's benchmark history: an airspeed velocity (asv) suite over the quick forms of the
benchmarks in ``raylog/benchmarks``, run by ``raylog bench history`` (see
:mod:`raylog.benchmarks.history` and docs/performance.md, "Benchmark history").

One class per benchmark module. Its ``setup_cache`` starts one local Ray and one embedded
raylog cluster, measures every figure of the class :data:`SAMPLES` times in turn with that
module's own measuring functions, shuts everything down and returns the samples; each
``track_`` method then hands asv one figure's samples. Every figure is a time or a cost,
lower is better (asv reads an increase as worse): seconds per million records, seconds of a
p50 latency, or a ratio of raylog's time over a floor measured in the same process (a bare
Ray call, a Ray Queue, a Parquet read), which sees through the machine's noise better than
either time alone.

A track method returns ``{"samples": [...], "number": 1}``: asv 0.6 reads that as a timing
result, so it stores the samples, shows their median and compares two commits with its
Mann-Whitney U test (``asv compare`` and ``asv continuous`` call a change significant only
if the samples differ). Each ``asv run`` gives :data:`SAMPLES` samples per figure; the
history command runs the base and head commits in alternating rounds and appends them.

The raylog under test is the first one on ``sys.path``: the history command puts the
commit's sources first (``ASV_PYTHONPATH``), with this checkout's ``raylog/benchmarks`` (the
measuring code) in place of the commit's own, so every commit is measured by the same code.
"""

from __future__ import annotations

import contextlib
import os
import sys
import uuid
from collections.abc import Iterator
from typing import Any

#: Samples of each figure per asv run (the history command's --samples).
SAMPLES = int(os.environ.get("RAYLOG_HISTORY_SAMPLES", "4"))
#: Samples per run of the classes whose samples take a second or two (client, replication):
#: more samples let asv's test see a 20% change through this machine's noise (±20-30%
#: between samples when other work shares the two cores).
CHEAP_SAMPLES = 3 * SAMPLES
#: Bound on one class's setup_cache (its cluster start and every measurement).
TIMEOUT_S = 1800
MILLION = 1_000_000

#: A class's samples: figure name -> one value per sample.
Samples = dict[str, list[float]]


def check_tree(where: str = "this process", imported: str | None = None) -> None:
    """Refuse to measure another raylog than the one the history command put first: the one
    this process imports, or ``imported``, the file ``where`` imported."""
    if imported is None:
        import raylog

        imported = raylog.__file__
    wanted = os.environ.get("RAYLOG_HISTORY_TREE")
    if wanted and not os.path.abspath(imported).startswith(os.path.abspath(wanted) + os.sep):
        raise RuntimeError(f"{where} imported raylog from {imported}, not from the tree under test {wanted}")


def tree_for_workers() -> None:
    """Put the tree under test first on the path of the Ray workers this process starts (the
    controller's, the replicas'): asv puts it on this process's ``sys.path`` only, and Ray
    starts its workers from the environment, with the checkout's raylog installed."""
    tree = os.environ.get("RAYLOG_HISTORY_TREE")
    if tree:
        paths = [tree, os.path.join(tree, "integrations", "spark"), os.environ.get("PYTHONPATH", "")]
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)


def raylog_of_workers() -> str:
    """The raylog a Ray worker of this job imports (the replicas' and the controller's)."""
    import ray

    @ray.remote(num_cpus=0)
    def imported() -> str:
        import raylog

        return raylog.__file__

    return ray.get(imported.remote())


@contextlib.contextmanager
def embedded_cluster(prefix: str, ship: tuple[str, ...] = (), **connect: Any) -> Iterator[tuple[Any, str]]:
    """A local Ray and an embedded raylog cluster in a temporary directory, removed on exit;
    ``ship``: benchmark modules whose actors Ray workers get by value."""
    import ray

    import raylog
    from raylog.benchmarks import common

    check_tree()
    tree_for_workers()
    with contextlib.ExitStack() as stack:
        workdir = common.temp_workdir(stack, prefix, None)
        common.start_local_ray(stack)
        check_tree("a Ray worker", raylog_of_workers())
        for module in ship:
            ray.cloudpickle.register_pickle_by_value(sys.modules[module])
        cluster = raylog.connect(
            data_dir=os.path.join(workdir, "data"), cluster_name=f"hist{uuid.uuid4().hex[:8]}", **connect
        )
        stack.callback(cluster.shutdown)
        yield cluster, workdir


def row_named(rows: list[Any], prefix: str) -> Any:
    """The last row whose name starts with ``prefix``; an error if it failed or is missing."""
    found = [r for r in rows if r.name.strip().startswith(prefix)]
    if not found:
        raise RuntimeError(f"no row named {prefix!r} among {[r.name for r in rows]}")
    if found[-1].error:
        raise RuntimeError(f"{found[-1].name}: {found[-1].error}")
    return found[-1]


def add(samples: Samples, name: str, value: float) -> None:
    samples.setdefault(name, []).append(float(f"{value:.4g}"))


def figure(name: str, unit: str = "seconds"):
    """A track method handing asv the samples of figure ``name``."""

    def track(self, samples: Samples) -> dict[str, Any]:
        return {"samples": samples[name], "number": 1}

    track.unit = unit
    track.__name__ = f"track_{name}"
    return track
