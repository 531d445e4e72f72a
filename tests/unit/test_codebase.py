"""The codebase keeps its own rules: layer boundaries (import-linter) and lint (ruff)."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)


def _run(tool: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([os.path.join(BIN, tool), *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_storage_and_coordination_do_not_import_ray():
    """import-linter's contracts in pyproject.toml hold (storage knows nothing of Ray)."""
    result = _run("lint-imports")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_is_clean():
    """ruff finds nothing to complain about in the package, integrations, tests, benchmarks and examples."""
    result = _run("ruff", "check", "raylog", "integrations", "tests", "benchmarks", "examples")
    assert result.returncode == 0, result.stdout + result.stderr
