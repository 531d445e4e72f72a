"""The controller's producer ids (Kafka's InitProducerId and KIP-730's AllocateProducerIds):
never one handed out twice, across blocks and a controller restart."""

from __future__ import annotations

import pytest
import ray

from raylog.actors.controller_lookup import PRODUCER_ID_BLOCK
from raylog.errors import InvalidRequestError, RaylogError
from tests.helpers import wait_until


def _ids_or_none(controller, count: int) -> list[int] | None:
    try:
        return ray.get(controller.allocate_producer_ids.remote(count), timeout=10)
    except (RaylogError, ray.exceptions.RayError):
        return None


def test_producer_ids_are_never_handed_out_twice(cluster):
    """Single ids and blocks longer than the journal's reservation, then the controller
    killed: every id is new, a block's ids are consecutive, and a bad count is refused."""
    controller = cluster.controller
    single = ray.get(controller.init_producer_id.remote(), timeout=30)
    block = ray.get(controller.allocate_producer_ids.remote(PRODUCER_ID_BLOCK + 5), timeout=30)
    ray.kill(controller, no_restart=False)
    after = wait_until(lambda: _ids_or_none(controller, 3), timeout_s=60, message="controller back")

    ids = [single, *block, *after]
    assert len(set(ids)) == len(ids)
    assert block == list(range(block[0], block[0] + PRODUCER_ID_BLOCK + 5))
    assert min(after) > max(block)  # the restarted controller skips the block it may have used
    with pytest.raises(InvalidRequestError):
        ray.get(controller.allocate_producer_ids.remote(0), timeout=30)
