"""The Admin, Kafka's one administration client: :class:`Admin`, whose operations come
from one base class per family (see :mod:`raylog.clients.admin`)."""

from __future__ import annotations

from raylog.clients.admin.access import AccessAdmin
from raylog.clients.admin.configs import ConfigAdmin
from raylog.clients.admin.groups import GroupAdmin
from raylog.clients.admin.partitions import PartitionAdmin
from raylog.clients.admin.topics import TopicAdmin
from raylog.clients.admin.transactions import TransactionAdmin
from raylog.clients.cluster import METADATA_TIMEOUT_S, RaylogCluster, client_handle, require_cluster


class Admin(TopicAdmin, PartitionAdmin, ConfigAdmin, GroupAdmin, TransactionAdmin, AccessAdmin):
    """Topic administration (Kafka's AdminClient, synchronous).

    Args:
        cluster: from :func:`raylog.connect`.
        request_timeout_ms: how long one call to the controller, a coordinator or a partition
            leader may take.
        security_protocol, sasl_mechanism, sasl_plain_username, sasl_plain_password: who the
            client is, as :class:`~raylog.clients.producer.Producer` takes them.

    Example:
        >>> admin = Admin(cluster)                                     # doctest: +SKIP
        >>> admin.create_topics([NewTopic("clicks", num_partitions=6)])  # doctest: +SKIP
    """

    def __init__(
        self,
        cluster: RaylogCluster,
        *,
        request_timeout_ms: int = int(METADATA_TIMEOUT_S * 1000),
        security_protocol: str | None = None,
        sasl_mechanism: str | None = None,
        sasl_plain_username: str | None = None,
        sasl_plain_password: str | None = None,
    ):
        require_cluster(cluster, "Admin")
        self._timeout_s = request_timeout_ms / 1000
        settings = (security_protocol, sasl_mechanism, sasl_plain_username, sasl_plain_password)
        self._cluster, self._session = client_handle(cluster, self._timeout_s, *settings)
