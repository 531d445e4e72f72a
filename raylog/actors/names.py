"""Names of raylog's Ray actors, so any process can find them (all in one namespace)."""

NAMESPACE = "raylog"


def controller_name(cluster_name: str) -> str:
    return f"raylog-controller-{cluster_name}"


def replica_name(cluster_name: str, topic_id: str, partition: int, broker_id: int) -> str:
    """Named by topic id, not name: a topic deleted and created again gets new actors."""
    return f"raylog-{cluster_name}-{topic_id}-{partition}-b{broker_id}"
