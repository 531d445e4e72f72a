"""Our table of the Kafka messages raylog speaks, written from the protocol's published
message definitions (field names in snake_case, as the codec's dicts use them).

Each message starts with a line ``<ApiName> request|response <api key> flexible <version>+``
(``flexible -`` when no version is flexible) and lists its fields below, one a line, nested
by indentation::

    name  type  versions  [null <versions>]  [default <value>]  [tag <n>]

- types: ``int8 int16 int32 int64 uint16 bool float64 uuid string bytes records``,
  ``[]<type>`` for an array of a primitive type, ``[]`` for an array of the struct whose fields
  follow (indented), ``{}`` for a single nested struct;
- versions: ``3+``, ``0-7`` or ``5``; a field is on the wire only in its versions;
- ``null``: the versions in which the field (a string, bytes, records, array or struct) may
  be null (a nullable struct is written after an int8: -1 for null, 1 for a value);
- ``default``: the value a field takes when absent (``null``, ``true``, ``false``, a number or
  ``""``, the empty string or bytes); otherwise 0, False, "", b"", [] or, for fields nullable in
  some version, None (a Fetch response's records default to empty, not null: kafka-python
  fails on null records);
- ``tag``: a tagged field (flexible versions only), written only when it differs from its default.

Only the versions raylog supports (:data:`SUPPORTED`) are listed; fields that exist only in
later versions of Kafka's protocol are left out.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69


#: The versions of each API raylog answers (what ApiVersions advertises).
SUPPORTED: dict[ApiKey, tuple[int, int]] = {
    ApiKey.PRODUCE: (3, 9),
    ApiKey.FETCH: (4, 16),
    ApiKey.LIST_OFFSETS: (1, 9),
    ApiKey.METADATA: (0, 12),
    ApiKey.OFFSET_COMMIT: (2, 9),
    ApiKey.OFFSET_FETCH: (1, 9),
    ApiKey.FIND_COORDINATOR: (0, 4),
    ApiKey.JOIN_GROUP: (0, 7),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 4),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    ApiKey.LIST_GROUPS: (0, 4),
    ApiKey.SASL_HANDSHAKE: (0, 1),
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 6),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.INIT_PRODUCER_ID: (0, 4),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4),
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 3),
    ApiKey.END_TXN: (0, 3),
    ApiKey.TXN_OFFSET_COMMIT: (0, 3),
    ApiKey.DESCRIBE_ACLS: (1, 3),
    ApiKey.CREATE_ACLS: (1, 3),
    ApiKey.DELETE_ACLS: (1, 3),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.DESCRIBE_LOG_DIRS: (1, 5),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.ELECT_LEADERS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 1),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1),
    ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.DESCRIBE_CLUSTER: (0, 1),
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 2),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 0),
}

TABLE = """
Produce request 0 flexible 9+
  transactional_id string 3+ null 3+ default null
  acks int16 0+
  timeout_ms int32 0+
  topic_data [] 0+
    name string 0+
    partition_data [] 0+
      index int32 0+
      records records 0+ null 0+
Produce response 0 flexible 9+
  responses [] 0+
    name string 0+
    partition_responses [] 0+
      index int32 0+
      error_code int16 0+
      base_offset int64 0+
      log_append_time_ms int64 2+ default -1
      log_start_offset int64 5+ default -1
      record_errors [] 8+
        batch_index int32 8+
        batch_index_error_message string 8+ null 8+ default null
      error_message string 8+ null 8+ default null
  throttle_time_ms int32 1+

Fetch request 1 flexible 12+
  cluster_id string 12+ null 12+ default null tag 0
  replica_id int32 0-14 default -1
  replica_state {} 15+ tag 1
    replica_id int32 15+ default -1
    replica_epoch int64 15+ default -1
  max_wait_ms int32 0+
  min_bytes int32 0+
  max_bytes int32 3+ default 2147483647
  isolation_level int8 4+
  session_id int32 7+
  session_epoch int32 7+ default -1
  topics [] 0+
    topic string 0-12
    topic_id uuid 13+
    partitions [] 0+
      partition int32 0+
      current_leader_epoch int32 9+ default -1
      fetch_offset int64 0+
      last_fetched_epoch int32 12+ default -1
      log_start_offset int64 5+ default -1
      partition_max_bytes int32 0+
  forgotten_topics_data [] 7+
    topic string 7-12
    topic_id uuid 13+
    partitions []int32 7+
  rack_id string 11+ default ""
Fetch response 1 flexible 12+
  throttle_time_ms int32 1+
  error_code int16 7+
  session_id int32 7+
  responses [] 0+
    topic string 0-12
    topic_id uuid 13+
    partitions [] 0+
      partition_index int32 0+
      error_code int16 0+
      high_watermark int64 0+
      last_stable_offset int64 4+ default -1
      log_start_offset int64 5+ default -1
      diverging_epoch {} 12+ tag 0
        epoch int32 12+ default -1
        end_offset int64 12+ default -1
      current_leader {} 12+ tag 1
        leader_id int32 12+ default -1
        leader_epoch int32 12+ default -1
      snapshot_id {} 12+ tag 2
        end_offset int64 12+ default -1
        epoch int32 12+ default -1
      aborted_transactions [] 4+ null 4+
        producer_id int64 4+
        first_offset int64 4+
      preferred_read_replica int32 11+ default -1
      records records 0+ null 0+ default ""
  node_endpoints [] 16+ tag 0
    node_id int32 16+
    host string 16+
    port int32 16+
    rack string 16+ null 16+ default null

ListOffsets request 2 flexible 6+
  replica_id int32 0+
  isolation_level int8 2+
  topics [] 0+
    name string 0+
    partitions [] 0+
      partition_index int32 0+
      current_leader_epoch int32 4+ default -1
      timestamp int64 0+
ListOffsets response 2 flexible 6+
  throttle_time_ms int32 2+
  topics [] 0+
    name string 0+
    partitions [] 0+
      partition_index int32 0+
      error_code int16 0+
      timestamp int64 1+ default -1
      offset int64 1+ default -1
      leader_epoch int32 4+ default -1

Metadata request 3 flexible 9+
  topics [] 0+ null 1+
    topic_id uuid 10+
    name string 0+ null 10+
  allow_auto_topic_creation bool 4+ default true
  include_cluster_authorized_operations bool 8-10
  include_topic_authorized_operations bool 8+
Metadata response 3 flexible 9+
  throttle_time_ms int32 3+
  brokers [] 0+
    node_id int32 0+
    host string 0+
    port int32 0+
    rack string 1+ null 1+ default null
  cluster_id string 2+ null 2+ default null
  controller_id int32 1+ default -1
  topics [] 0+
    error_code int16 0+
    name string 0+ null 12+
    topic_id uuid 10+
    is_internal bool 1+
    partitions [] 0+
      error_code int16 0+
      partition_index int32 0+
      leader_id int32 0+
      leader_epoch int32 7+ default -1
      replica_nodes []int32 0+
      isr_nodes []int32 0+
      offline_replicas []int32 5+
    topic_authorized_operations int32 8+ default -2147483648
  cluster_authorized_operations int32 8-10 default -2147483648

OffsetCommit request 8 flexible 8+
  group_id string 0+
  generation_id_or_member_epoch int32 1+ default -1
  member_id string 1+
  group_instance_id string 7+ null 7+ default null
  retention_time_ms int64 2-4 default -1
  topics [] 0+
    name string 0+
    partitions [] 0+
      partition_index int32 0+
      committed_offset int64 0+
      committed_leader_epoch int32 6+ default -1
      committed_metadata string 0+ null 0+
OffsetCommit response 8 flexible 8+
  throttle_time_ms int32 3+
  topics [] 0+
    name string 0+
    partitions [] 0+
      partition_index int32 0+
      error_code int16 0+

OffsetFetch request 9 flexible 6+
  group_id string 0-7
  topics [] 0-7 null 2-7
    name string 0-7
    partition_indexes []int32 0-7
  groups [] 8+
    group_id string 8+
    member_id string 9+ null 9+ default null
    member_epoch int32 9+ default -1
    topics [] 8+ null 8+
      name string 8+
      partition_indexes []int32 8+
  require_stable bool 7+ default false
OffsetFetch response 9 flexible 6+
  throttle_time_ms int32 3+
  topics [] 0-7
    name string 0-7
    partitions [] 0-7
      partition_index int32 0-7
      committed_offset int64 0-7
      committed_leader_epoch int32 5-7 default -1
      metadata string 0-7 null 0-7
      error_code int16 0-7
  error_code int16 2-7
  groups [] 8+
    group_id string 8+
    topics [] 8+
      name string 8+
      partitions [] 8+
        partition_index int32 8+
        committed_offset int64 8+
        committed_leader_epoch int32 8+ default -1
        metadata string 8+ null 8+
        error_code int16 8+
    error_code int16 8+

FindCoordinator request 10 flexible 3+
  key string 0-3
  key_type int8 1+
  coordinator_keys []string 4+
FindCoordinator response 10 flexible 3+
  throttle_time_ms int32 1+
  error_code int16 0-3
  error_message string 1-3 null 1-3
  node_id int32 0-3
  host string 0-3
  port int32 0-3
  coordinators [] 4+
    key string 4+
    node_id int32 4+
    host string 4+
    port int32 4+
    error_code int16 4+
    error_message string 4+ null 4+

JoinGroup request 11 flexible 6+
  group_id string 0+
  session_timeout_ms int32 0+
  rebalance_timeout_ms int32 1+ default -1
  member_id string 0+
  group_instance_id string 5+ null 5+ default null
  protocol_type string 0+
  protocols [] 0+
    name string 0+
    metadata bytes 0+
JoinGroup response 11 flexible 6+
  throttle_time_ms int32 2+
  error_code int16 0+
  generation_id int32 0+ default -1
  protocol_type string 7+ null 7+ default null
  protocol_name string 0+ null 7+
  leader string 0+
  member_id string 0+
  members [] 0+
    member_id string 0+
    group_instance_id string 5+ null 5+ default null
    metadata bytes 0+

Heartbeat request 12 flexible 4+
  group_id string 0+
  generation_id int32 0+
  member_id string 0+
  group_instance_id string 3+ null 3+ default null
Heartbeat response 12 flexible 4+
  throttle_time_ms int32 1+
  error_code int16 0+

LeaveGroup request 13 flexible 4+
  group_id string 0+
  member_id string 0-2
  members [] 3+
    member_id string 3+
    group_instance_id string 3+ null 3+ default null
LeaveGroup response 13 flexible 4+
  throttle_time_ms int32 1+
  error_code int16 0+
  members [] 3+
    member_id string 3+
    group_instance_id string 3+ null 3+
    error_code int16 3+

SyncGroup request 14 flexible 4+
  group_id string 0+
  generation_id int32 0+
  member_id string 0+
  group_instance_id string 3+ null 3+ default null
  protocol_type string 5+ null 5+ default null
  protocol_name string 5+ null 5+ default null
  assignments [] 0+
    member_id string 0+
    assignment bytes 0+
SyncGroup response 14 flexible 4+
  throttle_time_ms int32 1+
  error_code int16 0+
  protocol_type string 5+ null 5+ default null
  protocol_name string 5+ null 5+ default null
  assignment bytes 0+

DescribeGroups request 15 flexible 5+
  groups []string 0+
  include_authorized_operations bool 3+
DescribeGroups response 15 flexible 5+
  throttle_time_ms int32 1+
  groups [] 0+
    error_code int16 0+
    group_id string 0+
    group_state string 0+
    protocol_type string 0+
    protocol_data string 0+
    members [] 0+
      member_id string 0+
      group_instance_id string 4+ null 4+ default null
      client_id string 0+
      client_host string 0+
      member_metadata bytes 0+
      member_assignment bytes 0+
    authorized_operations int32 3+ default -2147483648

ListGroups request 16 flexible 3+
  states_filter []string 4+
ListGroups response 16 flexible 3+
  throttle_time_ms int32 1+
  error_code int16 0+
  groups [] 0+
    group_id string 0+
    protocol_type string 0+
    group_state string 4+

SaslHandshake request 17 flexible -
  mechanism string 0+
SaslHandshake response 17 flexible -
  error_code int16 0+
  mechanisms []string 0+

ApiVersions request 18 flexible 3+
  client_software_name string 3+
  client_software_version string 3+
ApiVersions response 18 flexible 3+
  error_code int16 0+
  api_keys [] 0+
    api_key int16 0+
    min_version int16 0+
    max_version int16 0+
  throttle_time_ms int32 1+
  supported_features [] 3+ tag 0
    name string 3+
    min_version int16 3+
    max_version int16 3+
  finalized_features_epoch int64 3+ default -1 tag 1
  finalized_features [] 3+ tag 2
    name string 3+
    max_version_level int16 3+
    min_version_level int16 3+
  zk_migration_ready bool 3+ default false tag 3

CreateTopics request 19 flexible 5+
  topics [] 0+
    name string 0+
    num_partitions int32 0+
    replication_factor int16 0+
    assignments [] 0+
      partition_index int32 0+
      broker_ids []int32 0+
    configs [] 0+
      name string 0+
      value string 0+ null 0+
  timeout_ms int32 0+ default 60000
  validate_only bool 1+ default false
CreateTopics response 19 flexible 5+
  throttle_time_ms int32 2+
  topics [] 0+
    name string 0+
    topic_id uuid 7+
    error_code int16 0+
    error_message string 1+ null 0+
    topic_config_error_code int16 5+ tag 0
    num_partitions int32 5+ default -1
    replication_factor int16 5+ default -1
    configs [] 5+ null 5+
      name string 5+
      value string 5+ null 5+
      read_only bool 5+
      config_source int8 5+ default -1
      is_sensitive bool 5+

DeleteTopics request 20 flexible 4+
  topics [] 6+
    name string 6+ null 6+ default null
    topic_id uuid 6+
  topic_names []string 0-5
  timeout_ms int32 0+
DeleteTopics response 20 flexible 4+
  throttle_time_ms int32 1+
  responses [] 0+
    name string 0+ null 6+
    topic_id uuid 6+
    error_code int16 0+
    error_message string 5+ null 5+ default null

InitProducerId request 22 flexible 2+
  transactional_id string 0+ null 0+
  transaction_timeout_ms int32 0+
  producer_id int64 3+ default -1
  producer_epoch int16 3+ default -1
InitProducerId response 22 flexible 2+
  throttle_time_ms int32 0+
  error_code int16 0+
  producer_id int64 0+ default -1
  producer_epoch int16 0+

OffsetForLeaderEpoch request 23 flexible 4+
  replica_id int32 3+ default -2
  topics [] 0+
    topic string 0+
    partitions [] 0+
      partition int32 0+
      current_leader_epoch int32 2+ default -1
      leader_epoch int32 0+
OffsetForLeaderEpoch response 23 flexible 4+
  throttle_time_ms int32 2+
  topics [] 0+
    topic string 0+
    partitions [] 0+
      error_code int16 0+
      partition int32 0+
      leader_epoch int32 1+ default -1
      end_offset int64 0+ default -1

AddPartitionsToTxn request 24 flexible 3+
  v3_and_below_transactional_id string 0-3
  v3_and_below_producer_id int64 0-3
  v3_and_below_producer_epoch int16 0-3
  v3_and_below_topics [] 0-3
    name string 0+
    partitions []int32 0+
AddPartitionsToTxn response 24 flexible 3+
  throttle_time_ms int32 0+
  results_by_topic_v3_and_below [] 0-3
    name string 0+
    results_by_partition [] 0+
      partition_index int32 0+
      partition_error_code int16 0+

AddOffsetsToTxn request 25 flexible 3+
  transactional_id string 0+
  producer_id int64 0+
  producer_epoch int16 0+
  group_id string 0+
AddOffsetsToTxn response 25 flexible 3+
  throttle_time_ms int32 0+
  error_code int16 0+

EndTxn request 26 flexible 3+
  transactional_id string 0+
  producer_id int64 0+
  producer_epoch int16 0+
  committed bool 0+
EndTxn response 26 flexible 3+
  throttle_time_ms int32 0+
  error_code int16 0+

TxnOffsetCommit request 28 flexible 3+
  transactional_id string 0+
  group_id string 0+
  producer_id int64 0+
  producer_epoch int16 0+
  generation_id int32 3+ default -1
  member_id string 3+ default ""
  group_instance_id string 3+ null 3+ default null
  topics [] 0+
    name string 0+
    partitions [] 0+
      partition_index int32 0+
      committed_offset int64 0+
      committed_leader_epoch int32 2+ default -1
      committed_metadata string 0+ null 0+
TxnOffsetCommit response 28 flexible 3+
  throttle_time_ms int32 0+
  topics [] 0+
    name string 0+
    partitions [] 0+
      partition_index int32 0+
      error_code int16 0+

DescribeConfigs request 32 flexible 4+
  resources [] 0+
    resource_type int8 0+
    resource_name string 0+
    configuration_keys []string 0+ null 0+
  include_synonyms bool 1+ default false
  include_documentation bool 3+ default false
DescribeConfigs response 32 flexible 4+
  throttle_time_ms int32 0+
  results [] 0+
    error_code int16 0+
    error_message string 0+ null 0+
    resource_type int8 0+
    resource_name string 0+
    configs [] 0+
      name string 0+
      value string 0+ null 0+
      read_only bool 0+
      is_default bool 0
      config_source int8 1+ default -1
      is_sensitive bool 0+
      synonyms [] 1+
        name string 1+
        value string 1+ null 0+
        source int8 1+
      config_type int8 3+
      documentation string 3+ null 0+

AlterConfigs request 33 flexible 2+
  resources [] 0+
    resource_type int8 0+
    resource_name string 0+
    configs [] 0+
      name string 0+
      value string 0+ null 0+
  validate_only bool 0+
AlterConfigs response 33 flexible 2+
  throttle_time_ms int32 0+
  responses [] 0+
    error_code int16 0+
    error_message string 0+ null 0+
    resource_type int8 0+
    resource_name string 0+

IncrementalAlterConfigs request 44 flexible 1+
  resources [] 0+
    resource_type int8 0+
    resource_name string 0+
    configs [] 0+
      name string 0+
      config_operation int8 0+
      value string 0+ null 0+
  validate_only bool 0+
IncrementalAlterConfigs response 44 flexible 1+
  throttle_time_ms int32 0+
  responses [] 0+
    error_code int16 0+
    error_message string 0+ null 0+
    resource_type int8 0+
    resource_name string 0+

DeleteGroups request 42 flexible 2+
  groups_names []string 0+
DeleteGroups response 42 flexible 2+
  throttle_time_ms int32 0+
  results [] 0+
    group_id string 0+
    error_code int16 0+

ElectLeaders request 43 flexible 2+
  election_type int8 1+
  topic_partitions [] 0+ null 0+
    topic string 0+
    partitions []int32 0+
  timeout_ms int32 0+ default 60000
ElectLeaders response 43 flexible 2+
  throttle_time_ms int32 0+
  error_code int16 1+
  replica_election_results [] 0+
    topic string 0+
    partition_result [] 0+
      partition_id int32 0+
      error_code int16 0+
      error_message string 0+ null 0+ default null

AlterPartitionReassignments request 45 flexible 0+
  timeout_ms int32 0+ default 60000
  allow_replication_factor_change bool 1+ default true
  topics [] 0+
    name string 0+
    partitions [] 0+
      partition_index int32 0+
      replicas []int32 0+ null 0+ default null
AlterPartitionReassignments response 45 flexible 0+
  throttle_time_ms int32 0+
  allow_replication_factor_change bool 1+ default true
  error_code int16 0+
  error_message string 0+ null 0+ default null
  responses [] 0+
    name string 0+
    partitions [] 0+
      partition_index int32 0+
      error_code int16 0+
      error_message string 0+ null 0+ default null

ListPartitionReassignments request 46 flexible 0+
  timeout_ms int32 0+ default 60000
  topics [] 0+ null 0+ default null
    name string 0+
    partition_indexes []int32 0+
ListPartitionReassignments response 46 flexible 0+
  throttle_time_ms int32 0+
  error_code int16 0+
  error_message string 0+ null 0+ default null
  topics [] 0+
    name string 0+
    partitions [] 0+
      partition_index int32 0+
      replicas []int32 0+
      adding_replicas []int32 0+
      removing_replicas []int32 0+

DescribeProducers request 61 flexible 0+
  topics [] 0+
    name string 0+
    partition_indexes []int32 0+
DescribeProducers response 61 flexible 0+
  throttle_time_ms int32 0+
  topics [] 0+
    name string 0+
    partitions [] 0+
      partition_index int32 0+
      error_code int16 0+
      error_message string 0+ null 0+ default null
      active_producers [] 0+
        producer_id int64 0+
        producer_epoch int32 0+
        last_sequence int32 0+ default -1
        last_timestamp int64 0+ default -1
        coordinator_epoch int32 0+
        current_txn_start_offset int64 0+ default -1

DescribeTransactions request 65 flexible 0+
  transactional_ids []string 0+
DescribeTransactions response 65 flexible 0+
  throttle_time_ms int32 0+
  transaction_states [] 0+
    error_code int16 0+
    transactional_id string 0+
    transaction_state string 0+
    transaction_timeout_ms int32 0+
    transaction_start_time_ms int64 0+
    producer_id int64 0+
    producer_epoch int16 0+
    topics [] 0+
      topic string 0+
      partitions []int32 0+

ConsumerGroupHeartbeat request 68 flexible 0+
  group_id string 0+
  member_id string 0+
  member_epoch int32 0+
  instance_id string 0+ null 0+ default null
  rack_id string 0+ null 0+ default null
  rebalance_timeout_ms int32 0+ default -1
  subscribed_topic_names []string 0+ null 0+ default null
  subscribed_topic_regex string 1+ null 1+ default null
  server_assignor string 0+ null 0+ default null
  topic_partitions [] 0+ null 0+ default null
    topic_id uuid 0+
    partitions []int32 0+
ConsumerGroupHeartbeat response 68 flexible 0+
  throttle_time_ms int32 0+
  error_code int16 0+
  error_message string 0+ null 0+ default null
  member_id string 0+ null 0+ default null
  member_epoch int32 0+
  heartbeat_interval_ms int32 0+
  assignment {} 0+ null 0+ default null
    topic_partitions [] 0+
      topic_id uuid 0+
      partitions []int32 0+

ConsumerGroupDescribe request 69 flexible 0+
  group_ids []string 0+
  include_authorized_operations bool 0+
ConsumerGroupDescribe response 69 flexible 0+
  throttle_time_ms int32 0+
  groups [] 0+
    error_code int16 0+
    error_message string 0+ null 0+ default null
    group_id string 0+
    group_state string 0+
    group_epoch int32 0+
    assignment_epoch int32 0+
    assignor_name string 0+
    members [] 0+
      member_id string 0+
      instance_id string 0+ null 0+ default null
      rack_id string 0+ null 0+ default null
      member_epoch int32 0+
      client_id string 0+
      client_host string 0+
      subscribed_topic_names []string 0+
      subscribed_topic_regex string 0+ null 0+ default null
      assignment {} 0+
        topic_partitions [] 0+
          topic_id uuid 0+
          topic_name string 0+
          partitions []int32 0+
      target_assignment {} 0+
        topic_partitions [] 0+
          topic_id uuid 0+
          topic_name string 0+
          partitions []int32 0+
    authorized_operations int32 0+ default -2147483648

ListTransactions request 66 flexible 0+
  state_filters []string 0+
  producer_id_filters []int64 0+
  duration_filter int64 1+ default -1
  transactional_id_pattern string 2+ null 2+ default null
ListTransactions response 66 flexible 0+
  throttle_time_ms int32 0+
  error_code int16 0+
  unknown_state_filters []string 0+
  transaction_states [] 0+
    transactional_id string 0+
    producer_id int64 0+
    transaction_state string 0+

OffsetDelete request 47 flexible -
  group_id string 0+
  topics [] 0+
    name string 0+
    partitions [] 0+
      partition_index int32 0+
OffsetDelete response 47 flexible -
  error_code int16 0+
  throttle_time_ms int32 0+
  topics [] 0+
    name string 0+
    partitions [] 0+
      partition_index int32 0+
      error_code int16 0+

DeleteRecords request 21 flexible 2+
  topics [] 0+
    name string 0+
    partitions [] 0+
      partition_index int32 0+
      offset int64 0+
  timeout_ms int32 0+
DeleteRecords response 21 flexible 2+
  throttle_time_ms int32 0+
  topics [] 0+
    name string 0+
    partitions [] 0+
      partition_index int32 0+
      low_watermark int64 0+ default -1
      error_code int16 0+

DescribeLogDirs request 35 flexible 2+
  topics [] 0+ null 0+
    topic string 0+
    partitions []int32 0+
DescribeLogDirs response 35 flexible 2+
  throttle_time_ms int32 0+
  error_code int16 3+
  results [] 0+
    error_code int16 0+
    log_dir string 0+
    topics [] 0+
      name string 0+
      partitions [] 0+
        partition_index int32 0+
        partition_size int64 0+
        offset_lag int64 0+
        is_future_key bool 0+
    total_bytes int64 4+ default -1
    usable_bytes int64 4+ default -1
    is_cordoned bool 5+

SaslAuthenticate request 36 flexible 2+
  auth_bytes bytes 0+
SaslAuthenticate response 36 flexible 2+
  error_code int16 0+
  error_message string 0+ null 0+ default null
  auth_bytes bytes 0+
  session_lifetime_ms int64 1+

DescribeAcls request 29 flexible 2+
  resource_type_filter int8 0+
  resource_name_filter string 0+ null 0+
  pattern_type_filter int8 1+
  principal_filter string 0+ null 0+
  host_filter string 0+ null 0+
  operation int8 0+
  permission_type int8 0+
DescribeAcls response 29 flexible 2+
  throttle_time_ms int32 0+
  error_code int16 0+
  error_message string 0+ null 0+ default null
  resources [] 0+
    resource_type int8 0+
    resource_name string 0+
    pattern_type int8 1+ default 3
    acls [] 0+
      principal string 0+
      host string 0+
      operation int8 0+
      permission_type int8 0+

CreateAcls request 30 flexible 2+
  creations [] 0+
    resource_type int8 0+
    resource_name string 0+
    resource_pattern_type int8 1+ default 3
    principal string 0+
    host string 0+
    operation int8 0+
    permission_type int8 0+
CreateAcls response 30 flexible 2+
  throttle_time_ms int32 0+
  results [] 0+
    error_code int16 0+
    error_message string 0+ null 0+ default null

DeleteAcls request 31 flexible 2+
  filters [] 0+
    resource_type_filter int8 0+
    resource_name_filter string 0+ null 0+
    pattern_type_filter int8 1+
    principal_filter string 0+ null 0+
    host_filter string 0+ null 0+
    operation int8 0+
    permission_type int8 0+
DeleteAcls response 31 flexible 2+
  throttle_time_ms int32 0+
  filter_results [] 0+
    error_code int16 0+
    error_message string 0+ null 0+ default null
    matching_acls [] 0+
      error_code int16 0+
      error_message string 0+ null 0+ default null
      resource_type int8 0+
      resource_name string 0+
      pattern_type int8 1+ default 3
      principal string 0+
      host string 0+
      operation int8 0+
      permission_type int8 0+

DescribeClientQuotas request 48 flexible 1+
  components [] 0+
    entity_type string 0+
    match_type int8 0+
    match string 0+ null 0+
  strict bool 0+
DescribeClientQuotas response 48 flexible 1+
  throttle_time_ms int32 0+
  error_code int16 0+
  error_message string 0+ null 0+ default null
  entries [] 0+ null 0+
    entity [] 0+
      entity_type string 0+
      entity_name string 0+ null 0+
    values [] 0+
      key string 0+
      value float64 0+

AlterClientQuotas request 49 flexible 1+
  entries [] 0+
    entity [] 0+
      entity_type string 0+
      entity_name string 0+ null 0+
    ops [] 0+
      key string 0+
      value float64 0+
      remove bool 0+
  validate_only bool 0+
AlterClientQuotas response 49 flexible 1+
  throttle_time_ms int32 0+
  entries [] 0+
    error_code int16 0+
    error_message string 0+ null 0+ default null
    entity [] 0+
      entity_type string 0+
      entity_name string 0+ null 0+

DescribeUserScramCredentials request 50 flexible 0+
  users [] 0+ null 0+
    name string 0+
DescribeUserScramCredentials response 50 flexible 0+
  throttle_time_ms int32 0+
  error_code int16 0+
  error_message string 0+ null 0+ default null
  results [] 0+
    user string 0+
    error_code int16 0+
    error_message string 0+ null 0+ default null
    credential_infos [] 0+
      mechanism int8 0+
      iterations int32 0+

AlterUserScramCredentials request 51 flexible 0+
  deletions [] 0+
    name string 0+
    mechanism int8 0+
  upsertions [] 0+
    name string 0+
    mechanism int8 0+
    iterations int32 0+
    salt bytes 0+
    salted_password bytes 0+
AlterUserScramCredentials response 51 flexible 0+
  throttle_time_ms int32 0+
  results [] 0+
    user string 0+
    error_code int16 0+
    error_message string 0+ null 0+ default null

DescribeCluster request 60 flexible 0+
  include_cluster_authorized_operations bool 0+
  endpoint_type int8 1+ default 1
DescribeCluster response 60 flexible 0+
  throttle_time_ms int32 0+
  error_code int16 0+
  error_message string 0+ null 0+ default null
  endpoint_type int8 1+ default 1
  cluster_id string 0+
  controller_id int32 0+ default -1
  brokers [] 0+
    broker_id int32 0+
    host string 0+
    port int32 0+
    rack string 0+ null 0+ default null
  cluster_authorized_operations int32 0+ default -2147483648

CreatePartitions request 37 flexible 2+
  topics [] 0+
    name string 0+
    count int32 0+
    assignments [] 0+ null 0+
      broker_ids []int32 0+
  timeout_ms int32 0+
  validate_only bool 0+
CreatePartitions response 37 flexible 2+
  throttle_time_ms int32 0+
  results [] 0+
    name string 0+
    error_code int16 0+
    error_message string 0+ null 0+ default null
"""

PRIMITIVES = frozenset(
    ("int8", "int16", "int32", "int64", "uint16", "bool", "float64", "uuid", "string", "bytes", "records")
)
NULLABLE_TYPES = frozenset(("string", "bytes", "records", "[]", "{}"))


@dataclass(frozen=True)
class Versions:
    """An inclusive range of versions (``high`` None: no upper bound)."""

    low: int
    high: int | None

    @classmethod
    def parse(cls, text: str) -> Versions:
        if text.endswith("+"):
            return cls(int(text[:-1]), None)
        low, _, high = text.partition("-")
        return cls(int(low), int(high or low))

    def __contains__(self, version: int) -> bool:
        return self.low <= version and (self.high is None or version <= self.high)


@dataclass
class Field:
    """One field of a message or struct."""

    name: str
    type: str  # a primitive, "[]" (array of struct), "[]<primitive>" or "{}" (struct)
    versions: Versions
    nullable: Versions | None = None
    default: object = None
    tag: int | None = None
    fields: list[Field] = field(default_factory=list)  # of a struct, or a struct array's elements

    @property
    def element(self) -> str | None:
        """The element type of a primitive array."""
        return self.type[2:] if self.type.startswith("[]") and len(self.type) > 2 else None

    def nullable_in(self, version: int) -> bool:
        return self.nullable is not None and version in self.nullable

    def default_value(self):
        """A fresh default value (a new list or dict each call; None for a nullable struct)."""
        if self.type == "{}":
            return None if self.nullable is not None else {f.name: f.default_value() for f in self.fields}
        if isinstance(self.default, list):
            return []
        return self.default


@dataclass
class Message:
    """A request or response schema."""

    api_key: ApiKey
    name: str
    kind: str  # "request" or "response"
    flexible: int | None  # the first flexible version
    fields: list[Field]

    def is_flexible(self, version: int) -> bool:
        return self.flexible is not None and version >= self.flexible


def _default(ftype: str, text: str | None, nullable: bool):
    if text is not None:
        if text == "null":
            return None
        if text in ("true", "false"):
            return text == "true"
        if text == '""':
            return b"" if ftype in ("bytes", "records") else ""
        return int(text)
    if nullable:
        return None
    if ftype.startswith("[]"):
        return []
    if ftype in ("string",):
        return ""
    if ftype in ("bytes", "records"):
        return b""
    if ftype == "bool":
        return False
    if ftype == "float64":
        return 0.0
    if ftype == "uuid":
        import uuid

        return uuid.UUID(int=0)
    return 0


def _parse_field(line: str) -> Field:
    words = line.split()
    name, ftype, versions = words[0], words[1], Versions.parse(words[2])
    options = dict(zip(words[3::2], words[4::2], strict=True))
    unknown = set(options) - {"null", "default", "tag"}
    if unknown or len(words) % 2 == 0:
        raise ValueError(f"bad field line in the message table: {line!r}")
    element = ftype[2:] if ftype.startswith("[]") else None
    if not (ftype in PRIMITIVES or ftype in ("[]", "{}") or element in PRIMITIVES - {"records"}):
        raise ValueError(f"unknown type {ftype!r} in {line!r}")
    nullable = Versions.parse(options["null"]) if "null" in options else None
    if nullable is not None and not (ftype in NULLABLE_TYPES or element):
        raise ValueError(f"a {ftype} cannot be nullable: {line!r}")
    tag = int(options["tag"]) if "tag" in options else None
    return Field(name, ftype, versions, nullable, _default(ftype, options.get("default"), nullable is not None), tag)


def parse_table(text: str) -> dict[tuple[ApiKey, str], Message]:
    """Parse the table into ``{(api key, "request"|"response"): Message}``."""
    messages: dict[tuple[ApiKey, str], Message] = {}
    stack: list[tuple[int, list[Field]]] = []
    for raw in text.splitlines():
        if not raw.strip():
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        if indent == 0:
            name, kind, key, word, flexible = raw.split()
            if kind not in ("request", "response") or word != "flexible":
                raise ValueError(f"bad message line in the message table: {raw!r}")
            message = Message(ApiKey(int(key)), name, kind, None if flexible == "-" else int(flexible[:-1]), [])
            messages[(message.api_key, kind)] = message
            stack = [(0, message.fields)]
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if not stack:
            raise ValueError(f"field outside a message in the message table: {raw!r}")
        f = _parse_field(raw)
        stack[-1][1].append(f)
        if f.type in ("[]", "{}"):
            stack.append((indent, f.fields))
    for message in messages.values():
        _check(message.fields, message)
    return messages


def _check(fields: list[Field], message: Message) -> None:
    names = [f.name for f in fields]
    if len(set(names)) != len(names):
        raise ValueError(f"{message.name} {message.kind}: a field name repeats in {names}")
    for f in fields:
        if f.type in ("[]", "{}") and not f.fields:
            raise ValueError(f"{message.name} {message.kind}: {f.name} has no fields")
        if f.tag is not None and (message.flexible is None or f.versions.low < message.flexible):
            raise ValueError(f"{message.name} {message.kind}: tagged field {f.name} outside flexible versions")
        _check(f.fields, message)


MESSAGES = parse_table(TABLE)
