"""The Admin, cut along the families of Kafka's Admin operations. :class:`Admin` is one
client, as Kafka's; each family's operations come from a base class of their own:

- :mod:`~raylog.clients.admin.admin`: :class:`Admin`, the public face: who the client is,
  and its request timeout.
- :mod:`~raylog.clients.admin.topics`: :class:`TopicAdmin`, creating, growing, listing,
  describing and deleting topics and waiting for their leaders (createTopics,
  createPartitions ...; kafka-topics.sh).
- :mod:`~raylog.clients.admin.partitions`: :class:`PartitionAdmin`, deleting records,
  reassigning replicas, electing leaders, and the brokers (deleteRecords,
  alterPartitionReassignments, electLeaders, describeCluster).
- :mod:`~raylog.clients.admin.configs`: :class:`ConfigAdmin`, topic, broker and group
  configs, and client quotas (describeConfigs, incrementalAlterConfigs, alterClientQuotas
  ...; kafka-configs.sh).
- :mod:`~raylog.clients.admin.groups`: :class:`GroupAdmin`, consumer groups and their
  committed offsets (describeConsumerGroups, alterConsumerGroupOffsets ...;
  kafka-consumer-groups.sh).
- :mod:`~raylog.clients.admin.transactions`: :class:`TransactionAdmin`, transactional ids,
  producers and hanging transactions (describeTransactions, describeProducers,
  abortTransaction; kafka-transactions.sh).
- :mod:`~raylog.clients.admin.access`: :class:`AccessAdmin`, ACLs and SCRAM users
  (createAcls, alterUserScramCredentials ...; kafka-acls.sh).
- :mod:`~raylog.clients.admin.base`: :class:`AdminBase`, what the families share: the
  calls to the controller, leaders and coordinators, and the folding of per-item answers
  into Kafka's errors.
"""

from raylog.clients.admin.admin import Admin
from raylog.clients.admin.base import COORDINATOR_RETRY_BACKOFF_S
from raylog.clients.admin.configs import ConfigResources, ResourceKey
from raylog.clients.admin.partitions import DELETE_RECORDS_MARGIN_S
from raylog.clients.admin.topics import PROGRESS_STEP_MS

__all__ = [
    "COORDINATOR_RETRY_BACKOFF_S",
    "DELETE_RECORDS_MARGIN_S",
    "PROGRESS_STEP_MS",
    "Admin",
    "ConfigResources",
    "ResourceKey",
]
