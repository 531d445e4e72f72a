"""Fixtures of the client unit tests."""

from __future__ import annotations

import pytest

from tests.unit.clients.consumer_fakes import patch_ray


@pytest.fixture
def fake_ray(monkeypatch):
    """``ray.wait`` and ``ray.get`` of the consumer fakes' answers (see :func:`patch_ray`)."""
    patch_ray(monkeypatch)
