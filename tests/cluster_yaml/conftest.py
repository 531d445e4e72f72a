"""cluster.yaml's own start commands, run for real as three Ray nodes on this one host.

The Ray cluster launcher (``ray up cluster.yaml``) copies the file mounts to each machine,
runs the setup commands, then ``head_start_ray_commands`` on the head and
``worker_start_ray_commands`` on every worker, each line in a login shell. Here the start
commands are taken from the file and each line is run by ``bash -c`` as a process in a new
session, so that every process it leaves behind (Ray's daemons and their workers) can be
found by its session id and killed. Each node gets the environment the launcher and its
login shell would give it: its own home directory holding the file-mounted Ray token, the
variables the setup commands export in ``~/.bashrc``, this virtualenv first on the PATH (the
setup's ``source ~/raylog-venv/bin/activate``), and ``RAY_HEAD_IP`` on workers.

What one host cannot give the commands as they are, and what is done instead (each the
least change that lets them run, none hiding a fault of the file):

- ``ray stop`` lines are skipped: they stop every Ray process of the machine, here the test
  session's own Ray and other programs' Ray too. A node is stopped by killing its processes.
- ``--autoscaling-config=~/ray_bootstrap_config.yaml`` is cut out: the launcher writes that
  file on the head, and there is no launcher here (nor should an autoscaler on this host try
  to reach ``worker_ips`` over ssh).
- The data directory: the commands name one path for every machine (``/mnt/raylog``, each
  machine's own disk); three nodes on one host need three directories, so that literal path
  is replaced by the node's own directory under the test's ``tmp_path``.
- Ports and sizes: flags are appended to the ``ray start`` command (for click the last
  occurrence of an option wins): a free port for the head instead of 6379 (the workers'
  ``--address`` names it; the test checks that the file's head port and worker address agree),
  per node free ports for what Ray would give every node at the same fixed port of one host
  (dashboard agent, Ray client server), OS-chosen worker ports, a small object store (three
  nodes share this host's memory), and no dashboard on the head (raylog does not use it; its
  ten processes would compete on a 2-core host with the raylets, which must register within a
  fixed 30 s).
- Ray's temp directory: ``RAY_TMPDIR`` names one of the test's own for every node and client
  (a worker keeps its session in the head's temp directory anyway: Ray 2.60 asks the head for
  it), so that nothing here touches ``/tmp/ray``, whose ``session_latest`` is the test
  session's Ray.
- Broker ids: the commands derive a node's id from the IPv4 address it reaches the network
  with, the same for every process of one host (``ray.util.get_node_ip_address()``, run before
  ``ray start``, asks the kernel which source address a socket to 8.8.8.8 would use; no
  variable or flag changes that, and loopback addresses given to Ray with
  ``--node-ip-address`` would not reach it), so three nodes here would be one broker. The head
  keeps the file's formula; the workers get ids through ``RAYLOG_BROKER_ID``, which the
  commands honour when it is already set (as a machine whose address does not fit the formula
  sets it in its login shell).
- ``raylog start`` gets ``RAY_ADDRESS`` (the head's address): ``--address auto`` must not
  find another Ray instance of this host.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "cluster.yaml"
#: The virtualenv the test runs in stands for the one setup installs raylog into.
VENV_BIN = Path(sys.executable).parent
#: How long one start command may take (a ``ray start`` on a busy 2-core machine included).
COMMAND_TIMEOUT_S = 180
OBJECT_STORE_BYTES = 100 * 1024 * 1024
#: What `ray start` says when the node's raylet did not register with the GCS in 30 s.
RAYLET_REGISTRATION_TIMEOUT = "The current node timed out during startup"
RAY_START_ATTEMPTS = 3
TOKEN_MOUNT = "~/.ray/auth_token"
_DATA_DIR = re.compile(r"\bRAYLOG_DATA_DIR=(\S+)")
_AUTOSCALING_CONFIG = re.compile(r"\s--autoscaling-config(?:=|\s+)\S+")
_HEAD_PORT = re.compile(r"\bray start --head\b.*?\s--port=(\d+)", re.S)
_WORKER_ADDRESS = re.compile(r"\bray start\b.*?\s--address=\$RAY_HEAD_IP:(\d+)", re.S)
_BASHRC_EXPORT = re.compile(r"echo 'export (\w+)=([^']*)' >> ~/\.bashrc")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _is_ray_stop(line: str) -> bool:
    return line.split() == ["ray", "stop"]


def _is_ray_start(line: str) -> bool:
    return re.search(r"\bray start\b", line) is not None


def _session_processes(session_ids: set[int]) -> list[int]:
    """PIDs of this machine's live processes whose session is one of ``session_ids`` (a
    zombie, dead but not yet reaped by its new parent, is not one)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        # pid (comm) state ppid pgrp session ...: comm may hold spaces and parentheses.
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[3]) in session_ids and fields[0] not in ("Z", "X"):
            found.append(int(entry))
    return found


class Node:
    """One machine: its start commands as they run here, its environment and directories,
    and the sessions of the processes its commands started."""

    def __init__(self, name: str, lines: list[str], data_dir: Path, env: dict, flags: list[str], late_env=dict):
        self.name = name
        self.data_dir = data_dir
        self.env = env
        self.flags = flags
        #: Variables for the lines after ``ray start`` (known once it has run).
        self.late_env = late_env
        #: The data directory the commands name (``RAYLOG_DATA_DIR=...``), in every line.
        self.file_data_dirs = set(_DATA_DIR.findall("\n".join(lines)))
        assert self.file_data_dirs, "the start commands set no RAYLOG_DATA_DIR"
        self.lines = [self._adapt(line) for line in lines if not _is_ray_stop(line)]
        self.sessions: set[int] = set()
        self.outputs: list[str] = []

    def _adapt(self, line: str) -> str:
        """The command line as it runs on this host (see the module docstring)."""
        line = _AUTOSCALING_CONFIG.sub("", line)
        for path in self.file_data_dirs:
            line = line.replace(path, str(self.data_dir))
        if _is_ray_start(line):
            # Appended flags reach `ray start` only if it is the line's last command.
            assert re.search(r"\bray start\b[^;&|]*$", line), f"`ray start` is not the last command of: {line}"
            line = f"{line} {' '.join(self.flags)}"
        return line

    def start(self) -> list[str]:
        """Run the node's commands in order, each to its end (``ray start`` returns once the
        node runs; its daemons stay, in the command's session). Returns their outputs.

        A ``ray start`` whose raylet did not register within the fixed 30 s Ray gives it (seen
        on this 2-core host under other programs' load) is run again, up to
        ``RAY_START_ATTEMPTS`` times, after the processes it left are killed: Ray's start-up
        under load is not what this tests."""
        outputs = []
        for line in self.lines:
            for _ in range(RAY_START_ATTEMPTS if _is_ray_start(line) else 1):
                code, output = self._run(line)
                if code == 0 or RAYLET_REGISTRATION_TIMEOUT not in output:
                    break
                print(f"{self.name}: the raylet did not register in time; `ray start` again")
                self.kill()
            assert code == 0, f"{self.name}: exit code {code}:\n{self.outputs[-1]}"
            outputs.append(output)
        return outputs

    def _run(self, line: str) -> tuple[int, str]:
        env = self.env if _is_ray_start(line) else {**self.env, **self.late_env()}
        process = subprocess.Popen(
            ["bash", "-c", line],
            env=env,
            cwd=env["HOME"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.sessions.add(process.pid)
        try:
            output, _ = process.communicate(timeout=COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            output, _ = process.communicate()
            output += f"\n[timed out after {COMMAND_TIMEOUT_S} s]"
        self.outputs.append(f"$ {line}\n{output}")
        return process.returncode, output

    def kill(self) -> None:
        """Kill every process the node's commands left (SIGKILL, as when a machine dies) and
        wait until they are gone."""
        deadline = time.monotonic() + 30
        while pids := _session_processes(self.sessions):
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            assert time.monotonic() < deadline, f"{self.name}: processes {pids} survive SIGKILL"
            time.sleep(0.1)
        self.sessions.clear()


class OneHostCluster:
    """Nodes started from cluster.yaml's commands on this host, torn down by session."""

    def __init__(self, root: Path):
        self.root = root
        self.config = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
        # Ray puts Unix sockets in its temp directory, whose paths must stay below 108 bytes:
        # a short directory rather than one under pytest's tmp_path.
        self.ray_tmp_root = Path(tempfile.mkdtemp(prefix="rl-yaml-"))
        self.nodes: dict[str, Node] = {}
        self.gcs_port = free_port()
        self.token = self._launcher_token()

    def _launcher_token(self) -> Path:
        """The token file the launcher mounts on every node: made as the file's header says,
        with ``ray get-auth-token --generate``, in the home of the machine running ``ray up``."""
        assert self.config["file_mounts"].get(TOKEN_MOUNT) == TOKEN_MOUNT, "the nodes must get the Ray token"
        home = self.root / "launcher-home"
        home.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        subprocess.run(
            [VENV_BIN / "ray", "get-auth-token", "--generate"], env={**env, "HOME": str(home)}, check=True, timeout=60
        )
        return home / ".ray" / "auth_token"

    @property
    def gcs_address(self) -> str:
        """The head's address, as its `ray start --head` wrote it for later commands."""
        return (self.ray_tmp_root / "ray" / "ray_current_cluster").read_text(encoding="utf-8").strip()

    def client_env(self) -> dict:
        """The environment of a program on the head that connects to the cluster."""
        return {**self.nodes["head"].env, "RAY_ADDRESS": self.gcs_address}

    def _node(self, name: str, lines: list[str], flags: list[str], late_env=dict, **variables: str) -> Node:
        home = self.root / name
        (home / ".ray").mkdir(parents=True)
        shutil.copy(self.token, home / ".ray" / "auth_token")  # the file mount
        data_dir = home / "data"
        data_dir.mkdir()
        # The machine's environment is not this process's: no RAY_ or RAYLOG_ variables.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "RAYLOG_"))}
        env["HOME"] = str(home)
        env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
        env.update(_BASHRC_EXPORT.findall("\n".join(self.config["setup_commands"])))
        env["RAY_TMPDIR"] = str(self.ray_tmp_root)
        env["RAY_USAGE_STATS_ENABLED"] = "0"
        env.update(variables)
        flags = [
            *flags,
            f"--dashboard-agent-listen-port={free_port()}",
            "--min-worker-port=0",
            "--max-worker-port=0",
            f"--object-store-memory={OBJECT_STORE_BYTES}",
        ]
        self.nodes[name] = Node(name, lines, data_dir, env, flags, late_env)
        return self.nodes[name]

    def add_head(self) -> Node:
        """The head: ``ray start --head`` on a free port, then ``raylog start --address auto``
        with RAY_ADDRESS naming the head."""
        head_lines, worker_lines = self.config["head_start_ray_commands"], self.config["worker_start_ray_commands"]
        (file_port,) = [port for line in head_lines for port in _HEAD_PORT.findall(line)]
        worker_ports = [port for line in worker_lines for port in _WORKER_ADDRESS.findall(line)]
        assert worker_ports == [file_port], "the workers must join the head's port"
        flags = [
            f"--port={self.gcs_port}",
            f"--ray-client-server-port={free_port()}",
            "--include-dashboard=false",
        ]
        return self._node("head", head_lines, flags, late_env=lambda: {"RAY_ADDRESS": self.gcs_address})

    def add_worker(self, name: str, broker_id: int) -> Node:
        head_ip = self.gcs_address.rsplit(":", 1)[0]
        flags = [f"--address={self.gcs_address}"]
        lines = self.config["worker_start_ray_commands"]
        return self._node(name, lines, flags, RAY_HEAD_IP=head_ip, RAYLOG_BROKER_ID=str(broker_id))

    def tear_down(self) -> None:
        """Kill every node (each one even if killing another failed), then remove the Ray
        temp directories."""
        failures = []
        for node in reversed(list(self.nodes.values())):
            try:
                node.kill()
            except AssertionError as exc:
                failures.append(str(exc))
        shutil.rmtree(self.ray_tmp_root, ignore_errors=True)
        assert not failures, failures


class Driver:
    """A raylog client program (tests/cluster_yaml/driver.py) connected to the cluster, in a
    process of its own (this one may be connected to the test session's Ray, and a process
    joins one Ray cluster at most). ``call(name, *args)`` runs one of its functions and
    returns what it returned; a failure there fails the test here."""

    def __init__(self, env: dict, log: Path):
        self.log = log
        self._log_file = open(log, "w", encoding="utf-8")  # noqa: SIM115 — closed in close()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.cluster_yaml.driver"],
            cwd=ROOT,
            env={**env, "PYTHONPATH": str(ROOT)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log_file,
            text=True,
            start_new_session=True,
        )
        self._answers: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self._answers.put(line)
        self._answers.put(None)

    def call(self, name: str, *args, timeout_s: float = 120):
        self.process.stdin.write(json.dumps([name, list(args)]) + "\n")
        self.process.stdin.flush()
        try:
            line = self._answers.get(timeout=timeout_s)
        except queue.Empty:
            raise AssertionError(f"driver: no answer to {name} within {timeout_s} s (log: {self.log})") from None
        assert line is not None, f"driver exited ({self.process.poll()}): {self.log.read_text()[-3000:]}"
        answer = json.loads(line)
        assert "error" not in answer, f"driver: {name}{tuple(args)} failed: {answer['error']}"
        return answer["result"]

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)
        self._log_file.close()


@pytest.fixture
def one_host_cluster(tmp_path):
    """A :class:`OneHostCluster` (nothing started yet); everything its nodes started is
    killed afterwards, by session, whatever the test's outcome."""
    cluster = OneHostCluster(tmp_path)
    try:
        yield cluster
    finally:
        cluster.tear_down()


@pytest.fixture
def driver(one_host_cluster, tmp_path):
    """``driver()``: a :class:`Driver` on the started cluster (once its head runs); killed
    afterwards, before the cluster."""
    drivers: list[Driver] = []

    def make() -> Driver:
        drivers.append(Driver(one_host_cluster.client_env(), tmp_path / f"driver-{len(drivers)}.log"))
        return drivers[-1]

    try:
        yield make
    finally:
        for d in drivers:
            d.close()
