"""Whole responses that say one error code: for each API, the body of a response whose every
error code is ``code``, echoing the topics, partitions, groups or resources of the request
(when its decoded body is known) where the response lists them."""

from __future__ import annotations

from collections.abc import Callable

from .messages import SUPPORTED, ApiKey


def supported_api_keys() -> list[dict]:
    """ApiVersions' ``api_keys``: every supported API with its version range."""
    return [{"api_key": int(k), "min_version": lo, "max_version": hi} for k, (lo, hi) in sorted(SUPPORTED.items())]


def _topics(request: dict, topics: str, name: str, partitions: str, index: str):
    """``(topic name, [partition index, ...])`` of a request's topic list (its element key names given)."""
    for topic in request.get(topics) or ():
        yield topic.get(name, ""), [p.get(index, 0) if isinstance(p, dict) else p for p in topic.get(partitions) or ()]


def _named(request: dict, code: int, partitions: str = "partitions", index: str = "partition_index") -> list[dict]:
    """``[{name, partitions: [{partition_index, error_code}]}]`` of a request's ``topics``."""
    return [
        {"name": name, "partitions": [{"partition_index": i, "error_code": code} for i in parts]}
        for name, parts in _topics(request, "topics", "name", partitions, index)
    ]


def _produce(request: dict, code: int) -> dict:
    return {
        "responses": [
            {"name": name, "partition_responses": [{"index": i, "error_code": code, "base_offset": -1} for i in parts]}
            for name, parts in _topics(request, "topic_data", "name", "partition_data", "index")
        ]
    }


def _fetch(request: dict, code: int) -> dict:
    partition = {"error_code": code, "high_watermark": -1, "last_stable_offset": -1, "records": b""}
    return {
        "error_code": code,
        "responses": [
            {"topic": name, "partitions": [{"partition_index": i, **partition} for i in parts]}
            for name, parts in _topics(request, "topics", "topic", "partitions", "partition")
        ],
    }


def _metadata(request: dict, code: int) -> dict:
    return {"topics": [{"name": t.get("name"), "error_code": code} for t in request.get("topics") or ()]}


def _topics_by_name(request: dict, code: int) -> dict:
    """ListOffsets', DeleteRecords', OffsetCommit's and TxnOffsetCommit's: their ``topics`` by ``name``."""
    return {"topics": _named(request, code)}


def _offset_fetch_topics(topics, code: int) -> list[dict]:
    return [
        {
            "name": t.get("name", ""),
            "partitions": [
                {"partition_index": i, "committed_offset": -1, "metadata": None, "error_code": code}
                for i in t.get("partition_indexes") or ()
            ],
        }
        for t in topics or ()
    ]


def _offset_fetch(request: dict, code: int) -> dict:
    return {
        "error_code": code,
        "topics": _offset_fetch_topics(request.get("topics"), code),
        "groups": [
            {
                "group_id": g.get("group_id", ""),
                "error_code": code,
                "topics": _offset_fetch_topics(g.get("topics"), code),
            }
            for g in request.get("groups") or ()
        ],
    }


def _find_coordinator(request: dict, code: int) -> dict:
    return {
        "error_code": code,
        "node_id": -1,
        "port": -1,
        "coordinators": [
            {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": code}
            for key in request.get("coordinator_keys") or ()
        ],
    }


def _join_group(request: dict, code: int) -> dict:
    return {"error_code": code, "generation_id": -1, "member_id": request.get("member_id", "")}


def _leave_group(request: dict, code: int) -> dict:
    return {
        "error_code": code,
        "members": [
            {"member_id": m.get("member_id", ""), "group_instance_id": m.get("group_instance_id"), "error_code": code}
            for m in request.get("members") or ()
        ],
    }


def _describe_groups(request: dict, code: int) -> dict:
    return {"groups": [{"group_id": g, "error_code": code} for g in request.get("groups") or ()]}


def _consumer_group_describe(request: dict, code: int) -> dict:
    return {"groups": [{"group_id": g, "error_code": code} for g in request.get("group_ids") or ()]}


def _create_topics(request: dict, code: int) -> dict:
    return {"topics": [{"name": t.get("name", ""), "error_code": code} for t in request.get("topics") or ()]}


def _delete_topics(request: dict, code: int) -> dict:
    named = [{"name": name, "error_code": code} for name in request.get("topic_names") or ()]
    by_state = [
        {"name": t.get("name"), "topic_id": t.get("topic_id"), "error_code": code} for t in request.get("topics") or ()
    ]
    return {"responses": named + by_state}


def _create_partitions(request: dict, code: int) -> dict:
    return {"results": [{"name": t.get("name", ""), "error_code": code} for t in request.get("topics") or ()]}


def _describe_configs(request: dict, code: int) -> dict:
    return {
        "results": [
            {
                "error_code": code,
                "resource_type": r.get("resource_type", 0),
                "resource_name": r.get("resource_name", ""),
            }
            for r in request.get("resources") or ()
        ]
    }


def _alter_configs(request: dict, code: int) -> dict:
    return {"responses": _describe_configs(request, code)["results"]}


def _delete_groups(request: dict, code: int) -> dict:
    return {"results": [{"group_id": g, "error_code": code} for g in request.get("groups_names") or ()]}


def _elect_leaders(request: dict, code: int) -> dict:
    return {
        "error_code": code,
        "replica_election_results": [
            {"topic": name, "partition_result": [{"partition_id": i, "error_code": code} for i in parts]}
            for name, parts in _topics(request, "topic_partitions", "topic", "partitions", "")
        ],
    }


def _alter_partition_reassignments(request: dict, code: int) -> dict:
    return {"error_code": code, "responses": _named(request, code)}


def _offset_delete(request: dict, code: int) -> dict:
    return {"error_code": code, "topics": _named(request, code)}


def _describe_log_dirs(request: dict, code: int) -> dict:
    # (v1-2 have no top-level code: the error is said as the one directory's)
    return {"error_code": code, "results": [{"error_code": code}]}


def _alter_client_quotas(request: dict, code: int) -> dict:
    entities = [e.get("entity") or [] for e in request.get("entries") or ()]
    return {"entries": [{"error_code": code, "entity": entity} for entity in entities]}


def _alter_user_scram_credentials(request: dict, code: int) -> dict:
    users = dict.fromkeys(c["name"] for part in ("deletions", "upsertions") for c in request.get(part) or ())
    return {"results": [{"user": user, "error_code": code} for user in users]}


def _create_acls(request: dict, code: int) -> dict:
    return {"results": [{"error_code": code} for _ in request.get("creations") or ()]}


def _delete_acls(request: dict, code: int) -> dict:
    return {"filter_results": [{"error_code": code} for _ in request.get("filters") or ()]}


def _describe_producers(request: dict, code: int) -> dict:
    return {"topics": _named(request, code, "partition_indexes", "")}


def _describe_transactions(request: dict, code: int) -> dict:
    ids = request.get("transactional_ids") or ()
    return {"transaction_states": [{"error_code": code, "transactional_id": t} for t in ids]}


def _add_partitions_to_txn(request: dict, code: int) -> dict:
    return {
        "results_by_topic_v3_and_below": [
            {
                "name": name,
                "results_by_partition": [{"partition_index": i, "partition_error_code": code} for i in parts],
            }
            for name, parts in _topics(request, "v3_and_below_topics", "name", "partitions", "partition_index")
        ]
    }


def _code_only(request: dict, code: int) -> dict:
    return {"error_code": code}


def _init_producer_id(request: dict, code: int) -> dict:
    return {"error_code": code, "producer_id": -1, "producer_epoch": -1}


def _api_versions(request: dict, code: int) -> dict:
    return {"error_code": code, "api_keys": supported_api_keys()}


def _offset_for_leader_epoch(request: dict, code: int) -> dict:
    return {
        "topics": [
            {"topic": name, "partitions": [{"partition": i, "error_code": code} for i in parts]}
            for name, parts in _topics(request, "topics", "topic", "partitions", "partition")
        ]
    }


BUILDERS: dict[ApiKey, Callable[[dict, int], dict]] = {
    ApiKey.PRODUCE: _produce,
    ApiKey.FETCH: _fetch,
    ApiKey.LIST_OFFSETS: _topics_by_name,
    ApiKey.METADATA: _metadata,
    ApiKey.OFFSET_COMMIT: _topics_by_name,
    ApiKey.OFFSET_FETCH: _offset_fetch,
    ApiKey.FIND_COORDINATOR: _find_coordinator,
    ApiKey.JOIN_GROUP: _join_group,
    ApiKey.HEARTBEAT: _code_only,
    ApiKey.LEAVE_GROUP: _leave_group,
    ApiKey.SYNC_GROUP: _code_only,
    ApiKey.DESCRIBE_GROUPS: _describe_groups,
    ApiKey.LIST_GROUPS: _code_only,
    ApiKey.SASL_HANDSHAKE: _code_only,
    ApiKey.API_VERSIONS: _api_versions,
    ApiKey.CREATE_TOPICS: _create_topics,
    ApiKey.DELETE_TOPICS: _delete_topics,
    ApiKey.DELETE_RECORDS: _topics_by_name,
    ApiKey.INIT_PRODUCER_ID: _init_producer_id,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: _offset_for_leader_epoch,
    ApiKey.ADD_PARTITIONS_TO_TXN: _add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: _code_only,
    ApiKey.END_TXN: _code_only,
    ApiKey.TXN_OFFSET_COMMIT: _topics_by_name,
    ApiKey.DESCRIBE_ACLS: _code_only,
    ApiKey.CREATE_ACLS: _create_acls,
    ApiKey.DELETE_ACLS: _delete_acls,
    ApiKey.DESCRIBE_CONFIGS: _describe_configs,
    ApiKey.ALTER_CONFIGS: _alter_configs,
    ApiKey.DESCRIBE_LOG_DIRS: _describe_log_dirs,
    ApiKey.SASL_AUTHENTICATE: _code_only,
    ApiKey.CREATE_PARTITIONS: _create_partitions,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: _alter_configs,
    ApiKey.DELETE_GROUPS: _delete_groups,
    ApiKey.ELECT_LEADERS: _elect_leaders,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: _alter_partition_reassignments,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: _code_only,
    ApiKey.OFFSET_DELETE: _offset_delete,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: _code_only,
    ApiKey.ALTER_CLIENT_QUOTAS: _alter_client_quotas,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: _code_only,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: _alter_user_scram_credentials,
    ApiKey.DESCRIBE_CLUSTER: _code_only,
    ApiKey.DESCRIBE_PRODUCERS: _describe_producers,
    ApiKey.DESCRIBE_TRANSACTIONS: _describe_transactions,
    ApiKey.LIST_TRANSACTIONS: _code_only,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: _code_only,
    ApiKey.CONSUMER_GROUP_DESCRIBE: _consumer_group_describe,
}
