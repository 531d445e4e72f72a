"""``raylog --version`` (no Ray): the installed distribution's version, as ``raylog.__version__`` says."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys

import raylog
from raylog import cli


def test_version_prints_the_package_version_and_exits_0(capsys):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out == f"raylog {raylog.__version__}\n"
    assert raylog.__version__ == importlib.metadata.version("raylog")


def test_the_installed_command_answers_version():
    """The console script ``pip install`` put beside this interpreter exits 0 with the version."""
    command = os.path.join(os.path.dirname(sys.executable), "raylog")
    done = subprocess.run([command, "--version"], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"raylog {raylog.__version__}\n", "")
