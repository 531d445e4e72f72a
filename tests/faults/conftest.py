"""One multi-node Ray cluster (a head and three labelled broker nodes with Kafka listeners,
see :class:`raylog.chaos.soak.SoakCluster`) for every fault run of this package; each run
makes its own topic and groups and deletes them. Package-scoped: it is gone before
tests/ray starts its own single-node Ray."""

from __future__ import annotations

import pytest

from raylog.chaos.soak import SoakCluster


@pytest.fixture(scope="package")
def soak_env(tmp_path_factory):
    with SoakCluster(data_root=str(tmp_path_factory.mktemp("soak")), listeners=True) as env:
        yield env
