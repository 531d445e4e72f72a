"""What the examples share: output of their own unless ``--verbose``, and progress of long work.

- :func:`arguments`: an example's command line, with ``--verbose``.
- :func:`configure_output`: quiet (the example's lines, and warnings and errors) or verbose
  (every library's INFO lines, Ray's actor output, Spark's own logging).
- :class:`Progress`: a live display (rich) on a terminal, plain lines otherwise (CI, pipes),
  on stderr; every figure is a count the example reports, nothing is estimated.
- :class:`Sampler`: reads an example's counters on a thread of its own at a fixed interval,
  for the progress display and for pictures of the run.

The library itself never prints: this module is for the examples (scripts) only.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

#: At most one plain line per stage in this many seconds (a stage's last line always shows).
PLAIN_INTERVAL_S = 5.0
#: The environment variable with which raylog.connect() forwards its actors' output (Ray's name).
LOG_TO_DRIVER_ENV = "RAY_LOG_TO_DRIVER"
#: Ray's raylet warns on every driver's stdout, whatever ``log_to_driver`` says, once a node
#: runs 4, 5, ... times its CPU count in Python workers: with one process per partition replica
#: an embedded cluster on a small machine always does, so in quiet runs it is expected, not news.
#: Only this warning is dropped; every other raylet message (a worker crash, an OOM kill) shows.
RAYLET_STARTUP_WARNING = re.compile(r"\(raylet\).*PYTHON worker processes have been started on node")


def arguments(doc: str) -> argparse.ArgumentParser:
    """An example's command line: described by the first line of ``doc``, with ``--verbose``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--verbose", action="store_true", help="show every library's output too")
    return parser


def configure_output(verbose: bool, progress: Progress | None = None) -> None:
    """Set up this process's logging for an example; call it after importing raylog (Ray sets
    up its own logger when imported) and before ``raylog.connect()``.

    Quiet: warnings and errors of every library but Ray (errors only from Ray), no output of
    Ray's actors. Verbose: INFO lines of every library and Ray, and the actors' output
    forwarded to this process (``RAY_LOG_TO_DRIVER=1``). Log lines go above the live display
    of ``progress`` when there is one. Pass :func:`spark_log_level` to ``init_spark``.
    """
    handler = progress.log_handler() if progress is not None else _plain_handler(sys.stderr)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.INFO if verbose else logging.WARNING)
    ray_logger = logging.getLogger("ray")
    for old in list(ray_logger.handlers):  # Ray's own, which writes past the display
        ray_logger.removeHandler(old)
    ray_logger.propagate = True
    ray_logger.setLevel(logging.INFO if verbose else logging.ERROR)
    if verbose:
        os.environ[LOG_TO_DRIVER_ENV] = "1"
    elif not isinstance(sys.stdout, DropLines):
        sys.stdout = DropLines(sys.stdout, RAYLET_STARTUP_WARNING)


class DropLines:
    """A text stream that passes every whole line to ``stream`` except those ``pattern``
    matches (Ray prints its raylet's messages to ``sys.stdout`` as it finds it at each line).
    A line is held until its newline or a flush (``print`` writes a line, then its end)."""

    def __init__(self, stream: TextIO, pattern: re.Pattern[str]):
        self.stream, self.pattern, self._pending = stream, pattern, ""
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            lines = (self._pending + text).split("\n")
            self._pending = lines.pop()
            for line in lines:
                if not self.pattern.search(line):
                    self.stream.write(line + "\n")
        return len(text)

    def flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, ""
            if pending and not self.pattern.search(pending):
                self.stream.write(pending)
        self.stream.flush()

    def __getattr__(self, name: str):  # isatty, fileno, encoding, ...: the wrapped stream's
        return getattr(self.stream, name)


def spark_log_level(verbose: bool) -> str | None:
    """``init_spark``'s ``log_level``: the Spark driver's errors only, or Spark's own logging."""
    return None if verbose else "ERROR"


def _plain_handler(stream: TextIO) -> logging.Handler:
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    return handler


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class _Stage:
    __slots__ = ("description", "total", "unit", "completed", "detail", "printed", "printed_at", "task_id")

    def __init__(self, description: str, total: int | None, unit: str):
        self.description, self.total, self.unit = description, total, unit
        self.completed, self.detail = 0, ""
        self.printed: str | None = None
        self.printed_at = float("-inf")
        self.task_id = None

    def count(self) -> str:
        if self.total is None:
            return f"{self.completed:,} {self.unit}"
        return f"{self.completed:,} / {self.total:,} {self.unit}"

    def line(self) -> str:
        return f"{self.description}: {self.count()}" + (f"  {self.detail}" if self.detail else "")

    @property
    def done(self) -> bool:
        return self.total is not None and self.completed >= self.total


class Progress:
    """The progress of an example's stages on ``stream`` (stderr by default).

    On a terminal (``live`` None: when ``stream`` is one) with rich installed: one live bar per
    stage, redrawn in place. Otherwise a plain line per stage when its count changes, at most
    every ``interval_s`` (and always when it completes, and at :meth:`close` for a count not
    shown yet), e.g. ``stage 1: produce: 120,000 / 200,000 records  7,990 records/s``.

    Concurrency: thread-safe. Use as a context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        live: bool | None = None,
        interval_s: float = PLAIN_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._stream = stream if stream is not None else sys.stderr
        self._interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._stages: dict[str, _Stage] = {}
        self._rich = None
        self.console = None
        if _is_terminal(self._stream) if live is None else live:
            self._start_live()

    @property
    def live(self) -> bool:
        """Whether the display is a live one (rich) rather than plain lines."""
        return self._rich is not None

    def _start_live(self) -> None:
        try:
            from rich.console import Console
            from rich.progress import BarColumn, TextColumn
            from rich.progress import Progress as RichProgress
        except ImportError:  # the examples extra is not installed: plain lines
            return
        self.console = Console(file=self._stream)
        self._rich = RichProgress(
            TextColumn("{task.description}"),
            BarColumn(bar_width=20),
            TextColumn("{task.fields[count]}"),
            TextColumn("{task.fields[detail]}"),
            console=self.console,
            refresh_per_second=4,
            # Lines printed to stdout meanwhile go above the display when stdout is this terminal.
            redirect_stdout=_is_terminal(sys.stdout) and self.console.is_terminal,
            redirect_stderr=self.console.is_terminal,
        )
        self._rich.start()

    def add(self, key: str, description: str, total: int | None = None, unit: str = "records") -> None:
        """A stage, shown from now on (``total`` None: a count without an end)."""
        with self._lock:
            stage = self._stages[key] = _Stage(description, total, unit)
            if self._rich is not None:
                stage.task_id = self._rich.add_task(description, total=total, count=stage.count(), detail="")

    def update(self, key: str, completed: int, *, total: int | None = None, detail: str | None = None) -> None:
        """Report a stage's count (and its total, and a short detail such as a rate)."""
        with self._lock:
            stage = self._stages[key]
            stage.completed = completed
            if total is not None:
                stage.total = total
            if detail is not None:
                stage.detail = detail
            if self._rich is not None:
                self._rich.update(
                    stage.task_id, completed=completed, total=stage.total, count=stage.count(), detail=stage.detail
                )
                return
            now = self._clock()
            line = stage.line()
            if line != stage.printed and (stage.done or now - stage.printed_at >= self._interval_s):
                self._write(line)
                stage.printed, stage.printed_at = line, now

    def note(self, message: str) -> None:
        """A line of the example's own (above the live display)."""
        with self._lock:
            if self._rich is not None:
                self._rich.console.print(message, markup=False, highlight=False)
            else:
                self._write(message)

    def log_handler(self) -> logging.Handler:
        """A logging handler whose lines go above the live display (plain lines otherwise)."""
        if self._rich is None:
            return _plain_handler(self._stream)
        from rich.logging import RichHandler

        return RichHandler(console=self.console, show_path=False, markup=False)

    def close(self) -> None:
        """Stop the live display; in plain mode, show each stage's last count if not shown yet."""
        with self._lock:
            if self._rich is not None:
                self._rich.stop()
                return
            for stage in self._stages.values():
                line = stage.line()
                if line != stage.printed:
                    self._write(line)
                    stage.printed = line

    def _write(self, line: str) -> None:
        self._stream.write(line + "\n")
        self._stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


class Sampler:
    """Calls ``read()`` every ``interval_s`` on a thread of its own and keeps what it returns
    with the seconds since :meth:`start`, as ``(t, values)``; ``on_sample(t, values)``, if
    given, runs after each read (on the same thread).

    ``read`` should only look at counters the example keeps (no remote calls), so that sampling
    costs the job nothing it could notice. :meth:`stop` takes a last sample.
    """

    def __init__(
        self,
        read: Callable[[], dict[str, float]],
        interval_s: float = 0.5,
        on_sample: Callable[[float, dict[str, float]], None] | None = None,
    ):
        self._read = read
        self._interval_s = interval_s
        self._on_sample = on_sample
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="example-sampler", daemon=True)
        self._started = 0.0
        self.samples: list[tuple[float, dict[str, float]]] = []

    def start(self) -> Sampler:
        self._started = time.monotonic()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join()
        self._sample()

    def _run(self) -> None:
        while not self._stopping.wait(self._interval_s):
            self._sample()

    def _sample(self) -> None:
        t, values = time.monotonic() - self._started, self._read()
        self.samples.append((t, values))
        if self._on_sample is not None:
            self._on_sample(t, values)
