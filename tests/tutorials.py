"""The tutorials of docs/tutorials run as their readers run them: every ```python block of a
page, in order, as one program, whose printed output must be what the page's ```text blocks
show (in order, concatenated; ``...`` in a shown line stands for any text, as in doctest).

The tests hand the program the suite's shared handles instead of starting its own: a tutorial
makes its cluster with ``raylog.connect(...)`` (and its Spark session with
``raylog_spark.init_spark(...)``), and :func:`run` has those calls return the suite's running
cluster and session, so a tutorial costs its own work only. A tutorial therefore never shuts
its cluster or Spark down in code (the end of a reader's program stops the local Ray that
``connect()`` started, and RayDP stops Spark at exit), and deletes the topics it made.

Each test_tutorials.py calls :func:`run` with a page's file name; tests/unit/test_docs.py
checks that every page of docs/tutorials has such a call. :func:`run` writes each step's
time (a block, under its section's heading) to stderr, which pytest shows with a failure or
``-rP``: where a tutorial's test got slow.
"""

from __future__ import annotations

import doctest
import os
import re
import sys
import time
from collections.abc import Iterable
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TUTORIALS = os.path.join(ROOT, "docs", "tutorials")
#: A fenced block: its info string and its text.
FENCED = re.compile(r"(?ms)^```(\w*)[^\n]*\n(.*?)^```\s*$")
#: How a printed line may differ from the page's: ``...`` for any text, runs of blanks.
CHECKER_FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def blocks(name: str, kind: str) -> list[str]:
    """The text of every ```<kind> block of docs/tutorials/<name>, in page order."""
    with open(os.path.join(TUTORIALS, name), encoding="utf-8") as f:
        return [text for info, text in FENCED.findall(f.read()) if info == kind]


def steps(name: str) -> list[tuple[str, str]]:
    """The tutorial's python blocks in order, each as ``(its section's heading, its code)``,
    the code at its own lines of the page (the lines before it blank), so that a traceback
    names the page's line."""
    with open(os.path.join(TUTORIALS, name), encoding="utf-8") as f:
        page = f.read()
    found = []
    for block in FENCED.finditer(page):
        if block.group(1) == "python":
            headings = re.findall(r"(?m)^#+ (.+)$", FENCED.sub("", page[: block.start()]))
            found.append(
                (headings[-1] if headings else name, "\n" * page.count("\n", 0, block.start(2)) + block.group(2))
            )
    return found


def program(name: str) -> str:
    """The tutorial's program: its python blocks, in order, at their lines of the page."""
    lines: list[str] = []
    for _, code in steps(name):
        block = code.splitlines()
        lines[len(lines) :] = block[len(lines) :]
    return "\n".join(lines) + "\n"


def expected_output(name: str) -> str:
    """What the program prints, as the page shows it: its text blocks, in order."""
    return "".join(blocks(name, "text"))


def run(
    name: str,
    capsys: Any,
    monkeypatch: Any,
    handles: Iterable[tuple[Any, str, Any]] = (),
    shown: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run docs/tutorials/<name>'s program in this process and check what it prints.

    Args:
        capsys, monkeypatch: the test's fixtures (Python-level stdout, so Spark's JVM
            output on the file descriptor does not count as the program's).
        handles: ``(module, attribute, value)``: each ``module.attribute`` (a function the
            tutorial calls to start something, e.g. ``raylog.connect``) replaced, for the run,
            by one returning ``value``, whatever arguments it is given.
        shown: text of the page's output that the shared handles make different (an
            address the tutorial's own cluster would listen on), and what it is here.

    Returns:
        The program's global names after it ran (for checks of its own state).
    """
    for module, attribute, value in handles:
        monkeypatch.setattr(module, attribute, lambda *args, _value=value, **kwargs: _value)
    namespace: dict[str, Any] = {"__name__": f"tutorial_{name.removesuffix('.md').replace('-', '_')}"}
    took: list[str] = []
    capsys.readouterr()
    for heading, code in steps(name):  # one program: each block runs in the names the others made
        started = time.monotonic()
        exec(compile(code, os.path.join(TUTORIALS, name), "exec"), namespace)  # noqa: S102 -- the page's code
        took.append(f"{time.monotonic() - started:6.1f} s  {heading}")
    printed = capsys.readouterr().out
    print(f"docs/tutorials/{name}, each step's time:", *took, sep="\n  ", file=sys.stderr)
    want = expected_output(name)
    for page_text, here in (shown or {}).items():
        assert page_text in want, f"docs/tutorials/{name} does not show {page_text!r}"
        want = want.replace(page_text, here)
    checker = doctest.OutputChecker()
    assert checker.check_output(want, printed, CHECKER_FLAGS), (
        f"docs/tutorials/{name} shows output its program does not print:\n"
        + checker.output_difference(doctest.Example("", want), printed, CHECKER_FLAGS)
    )
    return namespace
