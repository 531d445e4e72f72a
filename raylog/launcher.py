"""Starting a raylog cluster's controller, for :func:`raylog.connect` when none runs yet.

The one piece of the broker a client process may need at run time: it lives outside
:mod:`raylog.clients` (which imports no broker code), and imports the controller's module
only when it creates one, so a process that connects to a running cluster never loads it.
"""

from __future__ import annotations

import os
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from raylog.common import scram
from raylog.common.names import DEFAULT_DATA_DIR, HEAD_RESOURCE, NAMESPACE, controller_name


def create_controller(
    cluster_name: str, data_dir: str | None, num_brokers: int, embedded: bool, config: dict | None, credentials: dict
) -> Any:
    """The cluster's controller, created on the head node (or the one another process just
    created). Only here does a process import the controller's code, and with it the whole
    broker (replicas, coordinators, the Kafka listener and its compiled conversions)."""
    from raylog.actors.controller import ControllerActor

    data_dir = os.path.abspath(data_dir or os.environ.get("RAYLOG_DATA_DIR") or DEFAULT_DATA_DIR)
    return (
        ray.remote(ControllerActor)
        .options(
            name=controller_name(cluster_name),
            namespace=NAMESPACE,
            lifetime="detached",
            get_if_exists=True,
            max_restarts=-1,
            max_task_retries=-1,
            num_cpus=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(_head_node_id(), soft=False),
        )
        .remote(cluster_name, data_dir, num_brokers, embedded, config, _first_user(credentials))
    )


def _first_user(credentials: dict[str, Any]) -> list[tuple]:
    """The SCRAM credentials a new cluster is made with: those of the user ``connect`` is
    given, for both SCRAM mechanisms, salted here."""
    if credentials.get("security_protocol", "PLAINTEXT") == "PLAINTEXT":
        return []
    password = {credentials["sasl_plain_username"]: credentials["sasl_plain_password"]}
    return scram.upsertions(password, scram.MECHANISMS, scram.DEFAULT_ITERATIONS)


def _head_node_id() -> str:
    for node in ray.nodes():
        if node["Alive"] and HEAD_RESOURCE in node.get("Resources", {}):
            return node["NodeID"]
    return ray.get_runtime_context().get_node_id()
