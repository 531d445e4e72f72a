"""The codebase keeps its own rules: layer boundaries (import-linter) and lint (ruff)."""

from __future__ import annotations

import ast
import contextlib
import gc
import os
import subprocess
import sys
import threading

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)


def parse(path: str) -> ast.Module:
    """The module at ``path`` (relative to the repository) as an AST, parsed with the cyclic
    collector off. CPython 3.11 keeps the AST builder's recursion counter per interpreter, not
    per thread: a collection during the build runs finalizers, which may hand the GIL to a
    thread that parses too (traceback.format_exc does, for its carets: a background thread that
    logs an exception with its traceback), and the build then fails with "SystemError: AST
    constructor recursion depth mismatch". Without the collector the build runs no Python
    code, so no other thread runs inside it."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        source = f.read()
    gc.disable()
    try:
        return ast.parse(source, path)
    finally:
        gc.enable()


def test_parse_holds_while_other_threads_parse_and_the_collector_runs_finalizers():
    """What failed CI once: in the test process a Ray Data thread logged a traceback while this
    module parsed the actors' sources. Here another thread parses line-sized snippets in a loop
    while the collector finds cycles with finalizers; plain ast.parse fails most files so."""

    class Cycle:
        def __init__(self):
            self.me = self

        def __del__(self):
            sum(range(10))

    stop = threading.Event()

    def parse_snippets():  # as traceback does, which suppresses what its parse raises
        while not stop.is_set():
            with contextlib.suppress(SystemError):
                ast.parse("a[b] + c")

    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)
    other = threading.Thread(target=parse_snippets, daemon=True)
    other.start()
    try:
        for name in sorted(os.listdir(os.path.join(ROOT, "raylog", "actors")))[:12]:
            if name.endswith(".py"):
                for _ in range(100):
                    Cycle()
                parse(os.path.join("raylog", "actors", name))
    finally:
        stop.set()
        other.join()
        sys.setswitchinterval(previous)


def _run(tool: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([os.path.join(BIN, tool), *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_storage_and_coordination_do_not_import_ray():
    """import-linter's contracts in pyproject.toml hold (storage knows nothing of Ray)."""
    result = _run("lint-imports")
    assert result.returncode == 0, result.stdout + result.stderr


#: What coordination may not import: it is the rules, run by the actors and by the seeded
#: simulations alike, so it has no Ray, no threads, no clock and no files of its own.
COORDINATION_FORBIDS = {"ray", "threading", "time", "os", "shutil", "pathlib", "socket", "subprocess", "asyncio"}


def test_coordination_does_no_io_and_has_no_threads_or_clock():
    """raylog/coordination: no module imports Ray, threading, time, os (or another way to
    files, sockets or the clock) or calls open(); storage owns every file (the HW checkpoint
    and the metadata journal were coordination's), the actors own threads and time."""
    broken, forbidden = [], COORDINATION_FORBIDS | {"open()"}
    directory = os.path.join(ROOT, "raylog", "coordination")
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".py"):
            continue
        tree = parse(os.path.join("raylog", "coordination", name))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                modules = [node.module or ""]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open":
                modules = ["open()"]
            else:
                continue
            broken += [f"{name}:{node.lineno} {m}" for m in modules if m.split(".")[0] in forbidden]
    assert broken == []


def _methods(path: str, class_name: str) -> set[str]:
    tree = parse(path)
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name]
    return {n.name for n in cls.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


#: The rules the simulation reaches only through the shipped cores: a replica's role
#: (ReplicaCore), when a waiting produce or marker is done (the Purgatory's DelayedProduce).
CORE_RULES = {"apply_state", "isr_answer", "propose_isr", "isr_to_resend", "FollowerFetcher", "replication_done"}


def test_the_simulation_steps_the_shipped_cores_and_restates_none_of_their_rules():
    """raylog/chaos/simulation.py plays the controller by stepping the shipped
    ReplicationControl and each replica's role by stepping its ReplicaCore: it has no handler
    for a call the controller actor answers (no ``_on_alter_isr``), calls none of the election
    rules, none of the role rules (taking a state, proposing or answering an ISR change,
    starting a fetcher) and not the purgatory's rule for a waiting produce itself, so the
    sequencing it checks is the sequencing that runs in the cluster; and it imports no Ray."""
    simulation = "raylog/chaos/simulation.py"
    answered = {m for m in _methods("raylog/actors/controller.py", "ControllerActor") if not m.startswith("_")}
    handlers = {m.removeprefix("_on_") for m in _methods(simulation, "Cluster") if m.startswith("_on_")}
    assert handlers & answered == set()
    tree = parse(simulation)
    rules = [
        f"{simulation}:{node.lineno}"
        for node in ast.walk(tree)
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "elections")
        or (isinstance(node, ast.ImportFrom) and node.module == "raylog.coordination.elections"
            and any(alias.name != "NO_LEADER" for alias in node.names))
        or (isinstance(node, ast.Attribute) and node.attr in CORE_RULES)
        or (isinstance(node, ast.Name) and node.id in CORE_RULES)
        or (isinstance(node, ast.Import) and any(a.name.split(".")[0] == "ray" for a in node.names))
        or (isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "ray")
    ]  # fmt: skip
    assert rules == []


#: The group coordinator's sequencing the group simulation reaches only through the shipped
#: GroupCore (when held replies go out, what a failed append does, how a commit is prepared)
#: and the offsets it reaches only through the log (LogReplay).
GROUP_CORE_RULES = {"persisted", "append_failed", "prepare_commit", "apply_commit", "add_pending", "load_pending"}


@pytest.mark.parametrize("simulation", ["raylog/chaos/group_simulation.py", "raylog/chaos/group_cluster.py"])
def test_the_group_simulations_step_the_shipped_group_core(simulation):
    """The group simulations step the coordinator's GroupCore and apply offsets only by
    replaying the log, as the actor does: they call none of the rules the core sequences, and
    import no Ray."""
    tree = parse(simulation)
    rules = [
        f"{simulation}:{node.lineno}"
        for node in ast.walk(tree)
        if (isinstance(node, ast.Attribute) and node.attr in GROUP_CORE_RULES)
        or (isinstance(node, ast.Import) and any(a.name.split(".")[0] == "ray" for a in node.names))
        or (isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "ray")
    ]  # fmt: skip
    assert rules == []


def test_ruff_is_clean():
    """ruff finds nothing to complain about in the package (its benchmarks included), integrations, tests and
    examples."""
    result = _run("ruff", "check", "raylog", "integrations", "tests", "examples")
    assert result.returncode == 0, result.stdout + result.stderr


#: Where a newcomer reads each piece in one sitting (issue 30): no class over
#: MAX_CLASS_LINES lines and no function over MAX_FUNCTION_LINES, docstrings included.
SIZED_PACKAGES = ["raylog/clients/producer", "raylog/clients/consumer", "raylog/clients/admin"]
MAX_CLASS_LINES = 400
MAX_FUNCTION_LINES = 70


def test_classes_and_functions_stay_small_where_the_limits_are_reached():
    too_long = []
    for package in SIZED_PACKAGES:
        for name in sorted(os.listdir(os.path.join(ROOT, package))):
            if not name.endswith(".py"):
                continue
            path = os.path.join(package, name)
            tree = parse(path)
            for node in ast.walk(tree):
                limit = MAX_CLASS_LINES if isinstance(node, ast.ClassDef) else MAX_FUNCTION_LINES
                if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > limit:
                        too_long.append(f"{path}:{node.lineno} {node.name} has {lines} lines (at most {limit})")
    assert not too_long, "\n".join(too_long)


def test_no_actor_class_is_over_the_class_limit():
    """The actors are thin shells over the cores: no class in raylog/actors (the listeners'
    too) runs past MAX_CLASS_LINES; a shell that grows is cut into parts by job (see
    raylog/actors/controller_parts.py and replica_parts.py)."""
    too_long = []
    for directory, _, names in os.walk(os.path.join(ROOT, "raylog", "actors")):
        for name in sorted(n for n in names if n.endswith(".py")):
            path = os.path.relpath(os.path.join(directory, name), ROOT)
            tree = parse(path)
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES:
                    too_long.append(f"{path}:{node.lineno} {node.name} has {node.end_lineno - node.lineno + 1} lines")
    assert not too_long, "\n".join(too_long)


REPLICA_PROCESS = """
import sys, tempfile
import raylog.actors.replica
from raylog.config import TopicConfig
from raylog.coordination.partition import Partition
from raylog.storage.log import Log
batch = sys.stdin.buffer.read()
part = Partition("t", 0, 1, Log.open(tempfile.mkdtemp() + "/t-0", TopicConfig().log_config()), TopicConfig())
part.become_leader(1, (1,), (1,))
part.append_as_leader(batch, acks=1)
assert part.read(0, 1 << 20).data
print(sorted(m for m in ("pandas", "pyspark", "raydp", "torch") if m in sys.modules))
"""


def test_a_replica_process_imports_no_more_than_it_needs():
    """A replica is a process of its own, one per partition: importing pandas (which a first
    ``pa.array`` call does) costs each about 200 ms at start and tens of MB, so neither the
    replica's modules nor its append and fetch path may pull it in."""
    from raylog.common import record_batch

    batch = record_batch.build([b"a", b"b"], keys=[b"k", None], headers=[[("h", b"v")], []])
    result = subprocess.run(
        [sys.executable, "-c", REPLICA_PROCESS], input=batch, cwd=ROOT, capture_output=True, timeout=120
    )
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode().strip() == "[]"


CLIENT_PROCESS = """
import sys
import raylog
for name in ("connect", "Producer", "Consumer", "Admin", "transactional_copy", "ACL"):
    getattr(raylog, name)
BROKER = ("raylog.actors", "raylog.coordination", "raylog.storage")
print(sorted(m for m in sys.modules if m == "numba" or m in BROKER or m.startswith(tuple(p + "." for p in BROKER))))
"""


def test_a_client_process_imports_none_of_the_brokers_code():
    """A client's process (each Spark and Ray Data read task starts one) connects to a running
    cluster: importing the controller's module pulled in the Kafka listener and numba, about
    0.5 s of every fresh consumer's start (issue 27). Only starting an embedded cluster needs
    the controller's code (raylog.launcher). No module of the broker's (actors, coordination,
    storage) is imported either: what clients share with it is in raylog.common (issue 30)."""
    result = subprocess.run([sys.executable, "-c", CLIENT_PROCESS], cwd=ROOT, capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode().strip() == "[]"


CONSUMER_PROCESS = """
import sys
from raylog.clients.consumer import completed_fetch
from raylog.common import record_batch
batch = sys.stdin.buffer.read()
table = record_batch.decode_table(batch + batch[:0], min_offset=1)
assert table.num_rows == 1 and table.column("offset").to_pylist() == [1]
topic = completed_fetch.repeated_string("clicks", 3)
partition = record_batch.arrow_of(record_batch.values_of(table.column("offset").chunk(0)))
assert topic.to_pylist() == ["clicks"] * 3 and partition.to_pylist() == [1]
print(sorted(m for m in ("pandas", "pyspark", "raydp", "torch") if m in sys.modules))
"""


def test_a_consumers_first_read_imports_no_pandas():
    """A fresh consumer's first poll_arrow paid pyarrow's lazy import of pandas (0.2-0.5 s,
    issue 27's 10x slower first read): decoding fetched batches and the columns poll_arrow adds
    are made from buffers, never with to_numpy, pa.array, pa.scalar or pa.repeat."""
    from raylog.common import record_batch

    batch = record_batch.build([b"a", b"b"], keys=[b"k", None], headers=[[("h", b"v")], []], timestamps_ms=[5, 9])
    result = subprocess.run(
        [sys.executable, "-c", CONSUMER_PROCESS], input=batch, cwd=ROOT, capture_output=True, timeout=120
    )
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode().strip() == "[]"


PRODUCER_PROCESS = """
import sys
from raylog.clients.producer import arrow_batches
from raylog.common import record_batch
values, keys, headers = [b"a", None, "\u00e9"], [b"k", None, b"j"], [[("h", b"v")], None, []]
batch = record_batch.build(values, keys=keys, headers=headers, timestamps_ms=[5, 9, 9])
table = record_batch.decode_table(batch)
assert table.column("value").to_pylist() == [b"a", None, "\u00e9".encode()]
assert table.column("key").to_pylist() == keys
rows = {"values": record_batch.binary_of(values), "keys": record_batch.binary_of(keys)}
rows["headers"] = record_batch.headers_of(headers)
assert len(arrow_batches.row_bounds(rows)) == 3
order = record_batch.arrow_of(arrow_batches.np.array([2, 0, 1]))
assert rows["keys"].take(order).to_pylist() == [b"j", b"k", None]
print(sorted(m for m in ("pandas", "pyspark", "raydp", "torch") if m in sys.modules))
"""


def test_a_producers_first_batch_imports_no_pandas():
    """A fresh producer's first batch paid pyarrow's lazy import of pandas (0.22 s here) in
    pa.array, and send_arrow's sizing in to_numpy: its arrays are made from buffers
    (record_batch.binary_of / headers_of / values_of / arrow_of), as a consumer's are."""
    result = subprocess.run([sys.executable, "-c", PRODUCER_PROCESS], cwd=ROOT, capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode().strip() == "[]"


HISTORY_PROCESS = """
import sys, tempfile
from raylog.storage.history import HistoryWriter, segment_table
from raylog.storage.remote_log_metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata
rows = segment_table(sys.stdin.buffer.read(), "t", 0, [])
assert rows.column("headers").null_count == 1
segment = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate("t", 0), 0, 1, 9, 1, 9, ((0, 0),), 0)
HistoryWriter.from_uri("file://" + tempfile.mkdtemp()).write_segment(segment, rows)
print(sorted(m for m in ("pandas", "pyspark", "raydp", "torch") if m in sys.modules))
"""


def test_writing_a_segments_history_imports_no_pandas():
    """A replica will turn its copied segments into history (raylog.storage.history): Spark's
    rows (headers nulled, timestamps widened) and the Parquet file are made without pandas,
    which pyarrow's Python scalars and pa.array would import (0.2 s and tens of MB a replica)."""
    from raylog.common import record_batch

    batch = record_batch.build([b"a", b"b"], headers=[[("h", b"v")], []], timestamps_ms=[5, 9])
    result = subprocess.run(
        [sys.executable, "-c", HISTORY_PROCESS], input=batch, cwd=ROOT, capture_output=True, timeout=120
    )
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode().strip() == "[]"


def test_an_idle_replica_process_does_not_import_pyarrow_compute():
    """Every partition replica is a process that imports its modules at start: pyarrow.compute
    (~25 ms) loads only when a batch with headers is checked or a log is compacted."""
    code = "import sys, raylog.actors.replica; print('pyarrow.compute' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
