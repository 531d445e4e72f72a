"""Names of raylog's Ray actors, so any process can find them (all in one namespace)."""

NAMESPACE = "raylog"


def controller_name(cluster_name: str) -> str:
    return f"raylog-controller-{cluster_name}"


def replica_name(cluster_name: str, topic_id: str, partition: int, broker_id: int, node_id: str) -> str:
    """Named by topic id (a topic created again gets new actors) and by the broker's node (a
    broker that comes back on a new Ray node gets new actors there)."""
    return f"raylog-{cluster_name}-{topic_id}-{partition}-b{broker_id}-{node_id[:16]}"
