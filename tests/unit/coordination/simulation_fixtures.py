"""Fixtures of the seeded simulation's test modules (each imports them: they apply to its tests)."""

from __future__ import annotations

import logging
import os

import pytest


@pytest.fixture(autouse=True)
def no_fsync(monkeypatch):
    """Durability is the simulator's business (a machine crash cuts files past the recovery
    point), so real fsyncs only cost time."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    monkeypatch.setattr(os, "fdatasync", lambda fd: None)


@pytest.fixture(autouse=True)
def quiet():
    """The replicas log every failed fetch; a failing run's trace tells more."""
    logger = logging.getLogger("raylog")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)
