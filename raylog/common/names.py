"""Names of raylog's Ray actors, and where they run, so any process can find them (all in one
namespace) without importing the actors' code: a client process connects with these alone."""

NAMESPACE = "raylog"
#: Where a broker keeps its logs when nothing else is said (``RAYLOG_DATA_DIR``, a node label).
DEFAULT_DATA_DIR = "/tmp/raylog"
#: The Ray resource only the head node has: the controller runs there.
HEAD_RESOURCE = "node:__internal_head__"
#: How long a broker's Kafka listener has to start (its process, then binding its port).
LISTENER_START_TIMEOUT_S = 60.0


def controller_name(cluster_name: str) -> str:
    return f"raylog-controller-{cluster_name}"


def replica_name(cluster_name: str, topic_id: str, partition: int, broker_id: int, node_id: str) -> str:
    """Named by topic id (a topic created again gets new actors) and by the broker's node (a
    broker that comes back on a new Ray node gets new actors there)."""
    return f"raylog-{cluster_name}-{topic_id}-{partition}-b{broker_id}-{node_id[:16]}"
