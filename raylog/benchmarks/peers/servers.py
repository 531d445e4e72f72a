"""The peer servers of the benchmark, each started on loopback for one run and stopped after.

A :class:`Server` runs Debian's binary (``apt-get install redis-server nats-server``) on a
free port with its data in a directory of its own, waits until it accepts connections and
stops it (SIGTERM, then SIGKILL) when the ``with`` block ends, on error too.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from typing import Any

from raylog.benchmarks.common import BenchError

#: How long a server may take to accept connections.
START_TIMEOUT_S = 20.0
#: How long a server may take to exit after SIGTERM before it is killed.
STOP_TIMEOUT_S = 10.0
LOOPBACK = "127.0.0.1"

#: Redis durability, stated in the output: append-only file, fsync once a second (the
#: background thread), RDB snapshots off so only the AOF writes.
REDIS_DURABILITY = "appendonly yes, appendfsync everysec, no RDB snapshots"
#: NATS durability, stated in the output: JetStream file store with the server's defaults.
NATS_DURABILITY = (
    "JetStream file store, the server's default sync (writes to OS buffers, fsync on the "
    "server's timer, not per message)"
)


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


class Server:
    """One server process on ``LOOPBACK:port`` with data under ``data_dir``.

    Args:
        name: for messages and the log file name.
        argv: the command line (the binary is looked up on PATH).
        port: where it listens.
        data_dir: created if missing; its log file goes there too.
    """

    def __init__(self, name: str, argv: list[str], port: int, data_dir: str):
        self.name, self.argv, self.port, self.data_dir = name, argv, port, data_dir
        self.log_path = os.path.join(data_dir, f"{name}.log")
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> Server:
        if shutil.which(self.argv[0]) is None:
            raise BenchError(f"{self.argv[0]} not found: apt-get install -y {self.argv[0]}")
        os.makedirs(self.data_dir, exist_ok=True)
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.data_dir)
        try:
            self._wait_until_listening()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def version(self) -> str:
        return subprocess.run([self.argv[0], "--version"], capture_output=True, text=True).stdout.strip()

    def _wait_until_listening(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BenchError(f"{self.name} exited with {self.process.returncode} at start: {self.log_tail()}")
            try:
                socket.create_connection((LOOPBACK, self.port), timeout=1.0).close()
                return
            except OSError:
                time.sleep(0.05)
        raise BenchError(f"{self.name} did not listen on {LOOPBACK}:{self.port} within {START_TIMEOUT_S:g} s")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(STOP_TIMEOUT_S)

    def log_tail(self, lines: int = 5) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return " | ".join(f.read().strip().splitlines()[-lines:])


def redis_server(workdir: str) -> Server:
    """redis-server with an append-only file fsync'd every second (``REDIS_DURABILITY``)."""
    port, data_dir = free_port(), os.path.join(workdir, "redis")
    argv = [
        "redis-server",
        "--bind",
        LOOPBACK,
        "--port",
        str(port),
        "--dir",
        data_dir,
        "--appendonly",
        "yes",
        "--appendfsync",
        "everysec",
        "--save",
        "",
        "--daemonize",
        "no",
        "--logfile",
        "",
    ]
    return Server("redis-server", argv, port, data_dir)


def nats_server(workdir: str) -> Server:
    """nats-server with JetStream on a file store (``NATS_DURABILITY``)."""
    port, data_dir = free_port(), os.path.join(workdir, "nats")
    argv = ["nats-server", "--addr", LOOPBACK, "--port", str(port), "--jetstream", "--store_dir", data_dir]
    return Server("nats-server", argv, port, data_dir)
