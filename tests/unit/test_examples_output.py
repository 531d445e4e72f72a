"""The examples' output helpers (examples/_support.py) and the main job's picture (no Ray)."""

from __future__ import annotations

import io
import logging
import os
import sys
import threading

import numpy as np
import pytest

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples")
sys.path.insert(0, EXAMPLES)

import _support  # noqa: E402
import clickstream_pipeline as job  # noqa: E402

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_plain_progress_prints_real_counts_at_most_every_interval_and_every_completion():
    """Off a terminal: a line when a count changes, no more often than the interval per stage,
    always when a stage completes, and the last count of each stage at close."""
    out, clock = io.StringIO(), Clock()
    progress = _support.Progress(out, interval_s=5.0, clock=clock)
    assert not progress.live
    progress.add("produce", "stage 1: produce", total=200_000)
    progress.add("train", "stage 3: train", unit="aggregates")
    progress.update("produce", 5_000, detail="8,000 records/s")
    progress.update("produce", 10_000)  # within the interval: not shown
    clock.now += 5
    progress.update("produce", 45_000, detail="7,990 records/s")
    progress.update("produce", 45_000)  # unchanged: not shown again
    progress.update("train", 32)
    progress.update("produce", 200_000)  # complete: shown at once
    progress.update("train", 64)
    progress.note("a line of the job's own")
    progress.close()
    assert out.getvalue().splitlines() == [
        "stage 1: produce: 5,000 / 200,000 records  8,000 records/s",
        "stage 1: produce: 45,000 / 200,000 records  7,990 records/s",
        "stage 3: train: 32 aggregates",
        "stage 1: produce: 200,000 / 200,000 records  7,990 records/s",
        "a line of the job's own",
        "stage 3: train: 64 aggregates",
    ]


def test_progress_is_live_on_a_terminal_and_plain_elsewhere(monkeypatch):
    """live=None: a live (rich) display when the stream is a terminal, plain lines otherwise."""
    monkeypatch.setenv("TERM", "xterm-256color")
    for name in ("TTY_INTERACTIVE", "TTY_COMPATIBLE", "NO_COLOR"):  # rich's overrides
        monkeypatch.delenv(name, raising=False)
    assert not _support.Progress(io.StringIO()).live
    terminal = Terminal()
    progress = _support.Progress(terminal)
    try:
        assert progress.live
        progress.add("produce", "stage 1: produce", total=1_000)
        progress.update("produce", 1_000, detail="500 records/s")
        progress.note("raylog and Spark on Ray up in 30 s")
        assert isinstance(progress.log_handler(), logging.Handler)
    finally:
        progress.close()
    text = terminal.getvalue()
    assert "raylog and Spark on Ray up in 30 s" in text
    assert "stage 1: produce" in text and "1,000 / 1,000 records" in text and "500 records/s" in text
    assert "\x1b[" in text  # drawn in place with terminal control sequences


def test_a_live_display_without_rich_falls_back_to_plain_lines(monkeypatch):
    """Without the examples extra (rich) the display is plain lines, even on a terminal."""
    monkeypatch.setitem(sys.modules, "rich.progress", None)  # import fails
    terminal = Terminal()
    progress = _support.Progress(terminal)
    assert not progress.live
    progress.add("produce", "stage 1: produce", total=10)
    progress.update("produce", 10)
    progress.close()
    assert terminal.getvalue() == "stage 1: produce: 10 / 10 records\n"


def test_sampler_reads_counters_until_stopped_and_once_more_at_stop():
    counter = {"n": 0}
    three = threading.Event()
    seen = []

    def read():
        counter["n"] += 1
        return {"n": counter["n"]}

    def on_sample(t, values):
        seen.append(values["n"])
        if len(seen) >= 3:
            three.set()

    sampler = _support.Sampler(read, interval_s=0.01, on_sample=on_sample).start()
    assert three.wait(timeout=10)
    sampler.stop()
    times = [t for t, _ in sampler.samples]
    assert times == sorted(times) and times[0] > 0
    assert [v["n"] for _, v in sampler.samples] == seen == list(range(1, len(seen) + 1))


@pytest.fixture
def logging_state(monkeypatch):
    """configure_output changes the process's logging: put it back afterwards."""
    monkeypatch.delenv(_support.LOG_TO_DRIVER_ENV, raising=False)
    monkeypatch.setattr(sys, "stdout", sys.stdout)  # quiet runs wrap it
    root, ray_logger = logging.getLogger(), logging.getLogger("ray")
    saved = (list(root.handlers), root.level, list(ray_logger.handlers), ray_logger.level, ray_logger.propagate)
    yield
    root.handlers[:], root.level = saved[0], saved[1]
    ray_logger.handlers[:], ray_logger.level, ray_logger.propagate = saved[2], saved[3], saved[4]


def test_quiet_output_keeps_warnings_and_errors_and_only_ray_errors(logging_state):
    out = io.StringIO()
    _support.configure_output(False, _support.Progress(out))
    logging.getLogger("raylog.example").info("not shown")
    logging.getLogger("raylog.example").warning("a warning")
    logging.getLogger("ray.example").warning("Ray's warning, not shown")
    logging.getLogger("ray.example").error("Ray's error")
    assert out.getvalue().splitlines() == ["WARNING raylog.example: a warning", "ERROR ray.example: Ray's error"]
    assert _support.LOG_TO_DRIVER_ENV not in os.environ
    assert _support.spark_log_level(False) == "ERROR"
    assert isinstance(sys.stdout, _support.DropLines)


def test_quiet_stdout_drops_only_the_raylets_startup_warning():
    out = io.StringIO()
    stdout = _support.DropLines(out, _support.RAYLET_STARTUP_WARNING)
    print(
        "\x1b[33m(raylet)\x1b[0m WARNING: 8 PYTHON worker processes have been started on node: 4e1f with address: "
        "192.0.2.2, which is 4x the maximum expected startup concurrency (2).",
        file=stdout,
    )
    print(
        "\x1b[33m(raylet)\x1b[0m A worker died or was killed while executing a task by an unexpected system error.",
        file=stdout,
    )
    print("clickstream pipeline: summary", file=stdout)
    stdout.write("no newline yet")
    assert out.getvalue().count("\n") == 2 and "PYTHON worker processes" not in out.getvalue()
    stdout.flush()
    assert out.getvalue().splitlines() == [
        "\x1b[33m(raylet)\x1b[0m A worker died or was killed while executing a task by an unexpected system error.",
        "clickstream pipeline: summary",
        "no newline yet",
    ]


def test_verbose_output_shows_info_and_forwards_actor_output(logging_state):
    out = io.StringIO()
    _support.configure_output(True, _support.Progress(out))
    logging.getLogger("ray.example").info("Started a local Ray instance.")
    assert out.getvalue() == "INFO ray.example: Started a local Ray instance.\n"
    assert os.environ[_support.LOG_TO_DRIVER_ENV] == "1"
    assert _support.spark_log_level(True) is None


def synthetic_run():
    """Samples and a tally as the job makes them: 8,000 records/s produced for 25 s, Spark
    committing in three micro-batches, and a model trained on noisy aggregates."""
    samples = []
    for i in range(0, 81):
        t = i * 0.5
        produced = min(8_000 * t, 200_000)
        aggregated = 0 if t < 30 else 130_000 if t < 35 else 200_000
        samples.append((t, {"produced": produced, "aggregated": aggregated, "batches": 0, "trained": 0}))
    tally = job.Tally()
    rng = np.random.default_rng(1)
    words = rng.integers(200, 5_000, 300).astype(float)
    dwell = job.BASE_DWELL_MS + job.DWELL_MS_PER_WORD * words + rng.normal(0, 30, len(words))
    for start in range(0, 300, 32):
        end = min(start + 32, len(words))
        batch = np.column_stack([words[start:end], dwell[start:end], np.full(end - start, 5.0)])
        coef = np.polyfit(words[: start + len(batch)], dwell[: start + len(batch)], 1)[::-1]
        tally.trained_on(batch, start + len(batch), coef)
    return samples, tally


def test_rates_are_records_per_second_over_windows():
    t = np.arange(0, 10.5, 0.5)
    ends, per_s = job.rates(t, 8_000 * t, window_s=2.0)
    assert list(ends) == [2.0, 4.0, 6.0, 8.0, 10.0]
    assert np.allclose(per_s, 8_000)


def test_the_picture_has_its_four_panels_and_is_a_png(tmp_path):
    samples, tally = synthetic_run()
    figure = job.draw_picture(samples, tally, "title")
    assert [axes.get_title() for axes in figure.axes] == [
        "throughput",
        "consumer lag (group aggregator on clicks)",
        "model against the truth",
        "model parameters while training, against the truth",
    ]
    throughput, lag, fit, params = figure.axes
    assert [line.get_label() for line in throughput.get_lines()] == [
        "produced (acknowledged)",
        "consumed (Spark, committed)",
    ]
    assert max(lag.get_lines()[0].get_ydata()) == 200_000
    assert "model" in [line.get_label() for line in fit.get_lines()]
    path = job.save_picture(samples, tally, str(tmp_path / "run.png"), "title")
    with open(path, "rb") as f:
        assert f.read(8) == PNG_SIGNATURE
    from matplotlib import image

    height, width, _ = image.imread(path).shape
    assert (width, height) == (960, 640)  # 12 x 8 inches at 80 dpi


def test_without_matplotlib_the_job_says_how_to_get_the_picture(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    samples, tally = synthetic_run()
    path = tmp_path / "run.png"
    told = job._picture(samples, tally, str(path), {})
    assert told == "none: matplotlib is not installed (pip install 'raylog[examples]')"
    assert not path.exists()


def test_a_run_that_trained_nothing_still_has_its_picture():
    """Before the first aggregate the picture shows the stream and the truth, and no model."""
    samples, _ = synthetic_run()
    figure = job.draw_picture(samples, job.Tally())
    fit, params = figure.axes[2], figure.axes[3]
    assert [line.get_label() for line in fit.get_lines()] == ["truth (the generator's rule)"]
    assert [line.get_label() for line in params.get_lines()] == ["truth"]
