"""One Ray and one embedded raylog cluster shared by every test in tests/ray.

Tests create their topics through the ``topic`` factory, which deletes them afterwards:
every partition is an actor process, so leaked topics would exhaust the machine.
"""

from __future__ import annotations

import itertools
import re
import uuid

import pytest
import ray

import raylog
from raylog import Admin, NewTopic

#: Small: tests move little data, and CI machines have 2 cores.
OBJECT_STORE_BYTES = 200 * 1024 * 1024


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    ray.init(
        address="local",
        num_cpus=2,
        object_store_memory=OBJECT_STORE_BYTES,
        include_dashboard=False,
        configure_logging=False,
        log_to_driver=False,
    )
    handle = raylog.connect(data_dir=str(tmp_path_factory.mktemp("raylog")), cluster_name=f"t{uuid.uuid4().hex[:8]}")
    yield handle
    handle.shutdown()
    ray.shutdown()


@pytest.fixture(scope="session")
def admin(cluster):
    return Admin(cluster)


_names = itertools.count()


@pytest.fixture
def topic(admin, request):
    """``topic(num_partitions=1, **config)`` creates a fresh topic; all are deleted after the test."""
    created = []

    def make(num_partitions: int = 1, **config) -> str:
        name = f"{re.sub(r'[^a-zA-Z0-9._-]', '_', request.node.name[:40])}-{next(_names)}"
        admin.create_topics([NewTopic(name, num_partitions=num_partitions, config=config)])
        created.append(name)
        return name

    yield make
    if created:
        admin.delete_topics(created)
