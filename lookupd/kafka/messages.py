"""The requests and responses the Kafka listener speaks, declared from Kafka's message JSON schemas
(clients/src/main/resources/common/message/*.json, Apache Kafka 4.0's): field order, types, versions,
nullable versions, tags and defaults as they state them, names in snake_case. Only the versions this
listener advertises (lookupd.kafka.apis.SUPPORTED) are ever decoded or encoded.
"""

from __future__ import annotations

from .schema import NULL, Message, f

# ------------------------------------------------------------------ ApiVersions (18)

API_VERSIONS_REQUEST = Message("ApiVersionsRequest", 18, "0-4", "3+", [
    f("client_software_name", "string", "3+"),
    f("client_software_version", "string", "3+"),
])
API_VERSIONS_RESPONSE = Message("ApiVersionsResponse", 18, "0-4", "3+", [
    f("error_code", "int16", "0+"),
    f("api_keys", "[]", "0+", fields=[
        f("api_key", "int16", "0+"),
        f("min_version", "int16", "0+"),
        f("max_version", "int16", "0+"),
    ]),
    f("throttle_time_ms", "int32", "1+"),
    f("supported_features", "[]", "3+", tag=0, fields=[
        f("name", "string", "3+"),
        f("min_version", "int16", "3+"),
        f("max_version", "int16", "3+"),
    ]),
    f("finalized_features_epoch", "int64", "3+", tag=1, default=-1),
    f("finalized_features", "[]", "3+", tag=2, fields=[
        f("name", "string", "3+"),
        f("max_version_level", "int16", "3+"),
        f("min_version_level", "int16", "3+"),
    ]),
    f("zk_migration_ready", "bool", "3+", tag=3),
])

# ------------------------------------------------------------------ Metadata (3)

METADATA_REQUEST = Message("MetadataRequest", 3, "0-12", "9+", [
    f("topics", "[]", "0+", nullable="1+", fields=[
        f("topic_id", "uuid", "10+"),
        f("name", "string", "0+", nullable="10+"),
    ]),
    f("allow_auto_topic_creation", "bool", "4+", default=True),
    f("include_cluster_authorized_operations", "bool", "8-10"),
    f("include_topic_authorized_operations", "bool", "8+"),
])
METADATA_RESPONSE = Message("MetadataResponse", 3, "0-12", "9+", [
    f("throttle_time_ms", "int32", "3+"),
    f("brokers", "[]", "0+", fields=[
        f("node_id", "int32", "0+"),
        f("host", "string", "0+"),
        f("port", "int32", "0+"),
        f("rack", "string", "1+", nullable="1+", default=NULL),
    ]),
    f("cluster_id", "string", "2+", nullable="2+", default=NULL),
    f("controller_id", "int32", "1+", default=-1),
    f("topics", "[]", "0+", fields=[
        f("error_code", "int16", "0+"),
        f("name", "string", "0+", nullable="12+"),
        f("topic_id", "uuid", "10+"),
        f("is_internal", "bool", "1+"),
        f("partitions", "[]", "0+", fields=[
            f("error_code", "int16", "0+"),
            f("partition_index", "int32", "0+"),
            f("leader_id", "int32", "0+"),
            f("leader_epoch", "int32", "7+", default=-1),
            f("replica_nodes", "[]int32", "0+"),
            f("isr_nodes", "[]int32", "0+"),
            f("offline_replicas", "[]int32", "5+"),
        ]),
        f("topic_authorized_operations", "int32", "8+", default=-2147483648),
    ]),
    f("cluster_authorized_operations", "int32", "8-10", default=-2147483648),
])

# ------------------------------------------------------------------ ListOffsets (2)

LIST_OFFSETS_REQUEST = Message("ListOffsetsRequest", 2, "1-10", "6+", [
    f("replica_id", "int32", "0+"),
    f("isolation_level", "int8", "2+"),
    f("topics", "[]", "0+", fields=[
        f("name", "string", "0+"),
        f("partitions", "[]", "0+", fields=[
            f("partition_index", "int32", "0+"),
            f("current_leader_epoch", "int32", "4+", default=-1),
            f("timestamp", "int64", "0+"),
            f("max_num_offsets", "int32", "0", default=1),
        ]),
    ]),
    f("timeout_ms", "int32", "10+"),
])
LIST_OFFSETS_RESPONSE = Message("ListOffsetsResponse", 2, "1-10", "6+", [
    f("throttle_time_ms", "int32", "2+"),
    f("topics", "[]", "0+", fields=[
        f("name", "string", "0+"),
        f("partitions", "[]", "0+", fields=[
            f("partition_index", "int32", "0+"),
            f("error_code", "int16", "0+"),
            f("old_style_offsets", "[]int64", "0"),
            f("timestamp", "int64", "1+", default=-1),
            f("offset", "int64", "1+", default=-1),
            f("leader_epoch", "int32", "4+", default=-1),
        ]),
    ]),
])

# ------------------------------------------------------------------ Fetch (1)

FETCH_REQUEST = Message("FetchRequest", 1, "4-17", "12+", [
    f("cluster_id", "string", "12+", nullable="12+", tag=0, default=NULL),
    f("replica_id", "int32", "0-14", default=-1),
    f("replica_state", "{}", "15+", tag=1, fields=[
        f("replica_id", "int32", "15+", default=-1),
        f("replica_epoch", "int64", "15+", default=-1),
    ]),
    f("max_wait_ms", "int32", "0+"),
    f("min_bytes", "int32", "0+"),
    f("max_bytes", "int32", "3+", default=0x7FFFFFFF),
    f("isolation_level", "int8", "4+"),
    f("session_id", "int32", "7+"),
    f("session_epoch", "int32", "7+", default=-1),
    f("topics", "[]", "0+", fields=[
        f("topic", "string", "0-12"),
        f("topic_id", "uuid", "13+"),
        f("partitions", "[]", "0+", fields=[
            f("partition", "int32", "0+"),
            f("current_leader_epoch", "int32", "9+", default=-1),
            f("fetch_offset", "int64", "0+"),
            f("last_fetched_epoch", "int32", "12+", default=-1),
            f("log_start_offset", "int64", "5+", default=-1),
            f("partition_max_bytes", "int32", "0+"),
            f("replica_directory_id", "uuid", "17+", tag=0),
        ]),
    ]),
    f("forgotten_topics_data", "[]", "7+", fields=[
        f("topic", "string", "7-12"),
        f("topic_id", "uuid", "13+"),
        f("partitions", "[]int32", "7+"),
    ]),
    f("rack_id", "string", "11+"),
])
FETCH_RESPONSE = Message("FetchResponse", 1, "4-17", "12+", [
    f("throttle_time_ms", "int32", "1+"),
    f("error_code", "int16", "7+"),
    f("session_id", "int32", "7+"),
    f("responses", "[]", "0+", fields=[
        f("topic", "string", "0-12"),
        f("topic_id", "uuid", "13+"),
        f("partitions", "[]", "0+", fields=[
            f("partition_index", "int32", "0+"),
            f("error_code", "int16", "0+"),
            f("high_watermark", "int64", "0+"),
            f("last_stable_offset", "int64", "4+", default=-1),
            f("log_start_offset", "int64", "5+", default=-1),
            f("diverging_epoch", "{}", "12+", tag=0, fields=[
                f("epoch", "int32", "12+", default=-1),
                f("end_offset", "int64", "12+", default=-1),
            ]),
            f("current_leader", "{}", "12+", tag=1, fields=[
                f("leader_id", "int32", "12+", default=-1),
                f("leader_epoch", "int32", "12+", default=-1),
            ]),
            f("snapshot_id", "{}", "12+", tag=2, fields=[
                f("end_offset", "int64", "0+", default=-1),
                f("epoch", "int32", "0+", default=-1),
            ]),
            f("aborted_transactions", "[]", "4+", nullable="4+", fields=[
                f("producer_id", "int64", "4+"),
                f("first_offset", "int64", "4+"),
            ]),
            f("preferred_read_replica", "int32", "11+", default=-1),
            f("records", "records", "0+", nullable="0+"),
        ]),
    ]),
    f("node_endpoints", "[]", "16+", tag=0, fields=[
        f("node_id", "int32", "16+"),
        f("host", "string", "16+"),
        f("port", "int32", "16+"),
        f("rack", "string", "16+", nullable="16+", default=NULL),
    ]),
])

# ------------------------------------------------------------------ Produce (0): decoded only to refuse it

PRODUCE_REQUEST = Message("ProduceRequest", 0, "3-11", "9+", [
    f("transactional_id", "string", "3+", nullable="3+", default=NULL),
    f("acks", "int16", "0+"),
    f("timeout_ms", "int32", "0+"),
    f("topic_data", "[]", "0+", fields=[
        f("name", "string", "0+"),
        f("partition_data", "[]", "0+", fields=[
            f("index", "int32", "0+"),
            f("records", "records", "0+", nullable="0+"),
        ]),
    ]),
])
PRODUCE_RESPONSE = Message("ProduceResponse", 0, "3-11", "9+", [
    f("responses", "[]", "0+", fields=[
        f("name", "string", "0+"),
        f("partition_responses", "[]", "0+", fields=[
            f("index", "int32", "0+"),
            f("error_code", "int16", "0+"),
            f("base_offset", "int64", "0+"),
            f("log_append_time_ms", "int64", "2+", default=-1),
            f("log_start_offset", "int64", "5+", default=-1),
            f("record_errors", "[]", "8+", fields=[
                f("batch_index", "int32", "8+"),
                f("batch_index_error_message", "string", "8+", nullable="8+", default=NULL),
            ]),
            f("error_message", "string", "8+", nullable="8+", default=NULL),
            f("current_leader", "{}", "10+", tag=0, fields=[
                f("leader_id", "int32", "10+", default=-1),
                f("leader_epoch", "int32", "10+", default=-1),
            ]),
        ]),
    ]),
    f("throttle_time_ms", "int32", "1+"),
    f("node_endpoints", "[]", "10+", tag=0, fields=[
        f("node_id", "int32", "10+"),
        f("host", "string", "10+"),
        f("port", "int32", "10+"),
        f("rack", "string", "10+", nullable="10+", default=NULL),
    ]),
])

# ------------------------------------------------------------------ SASL (17, 36)

SASL_HANDSHAKE_REQUEST = Message("SaslHandshakeRequest", 17, "0-1", "none", [
    f("mechanism", "string", "0+"),
])
SASL_HANDSHAKE_RESPONSE = Message("SaslHandshakeResponse", 17, "0-1", "none", [
    f("error_code", "int16", "0+"),
    f("mechanisms", "[]string", "0+"),
])
SASL_AUTHENTICATE_REQUEST = Message("SaslAuthenticateRequest", 36, "0-2", "2+", [
    f("auth_bytes", "bytes", "0+"),
])
SASL_AUTHENTICATE_RESPONSE = Message("SaslAuthenticateResponse", 36, "0-2", "2+", [
    f("error_code", "int16", "0+"),
    f("error_message", "string", "0+", nullable="0+"),
    f("auth_bytes", "bytes", "0+"),
    f("session_lifetime_ms", "int64", "1+"),
])

# ------------------------------------------------------------------ consumer groups, classic protocol

FIND_COORDINATOR_REQUEST = Message("FindCoordinatorRequest", 10, "0-6", "3+", [
    f("key", "string", "0-3"),
    f("key_type", "int8", "1+"),
    f("coordinator_keys", "[]string", "4+"),
])
FIND_COORDINATOR_RESPONSE = Message("FindCoordinatorResponse", 10, "0-6", "3+", [
    f("throttle_time_ms", "int32", "1+"),
    f("error_code", "int16", "0-3"),
    f("error_message", "string", "1-3", nullable="1-3"),
    f("node_id", "int32", "0-3"),
    f("host", "string", "0-3"),
    f("port", "int32", "0-3"),
    f("coordinators", "[]", "4+", fields=[
        f("key", "string", "4+"),
        f("node_id", "int32", "4+"),
        f("host", "string", "4+"),
        f("port", "int32", "4+"),
        f("error_code", "int16", "4+"),
        f("error_message", "string", "4+", nullable="4+"),
    ]),
])
JOIN_GROUP_REQUEST = Message("JoinGroupRequest", 11, "0-9", "6+", [
    f("group_id", "string", "0+"),
    f("session_timeout_ms", "int32", "0+"),
    f("rebalance_timeout_ms", "int32", "1+", default=-1),
    f("member_id", "string", "0+"),
    f("group_instance_id", "string", "5+", nullable="5+", default=NULL),
    f("protocol_type", "string", "0+"),
    f("protocols", "[]", "0+", fields=[
        f("name", "string", "0+"),
        f("metadata", "bytes", "0+"),
    ]),
    f("reason", "string", "8+", nullable="8+", default=NULL),
])
JOIN_GROUP_RESPONSE = Message("JoinGroupResponse", 11, "0-9", "6+", [
    f("throttle_time_ms", "int32", "2+"),
    f("error_code", "int16", "0+"),
    f("generation_id", "int32", "0+", default=-1),
    f("protocol_type", "string", "7+", nullable="7+", default=NULL),
    f("protocol_name", "string", "0+", nullable="7+"),
    f("leader", "string", "0+"),
    f("skip_assignment", "bool", "9+"),
    f("member_id", "string", "0+"),
    f("members", "[]", "0+", fields=[
        f("member_id", "string", "0+"),
        f("group_instance_id", "string", "5+", nullable="5+", default=NULL),
        f("metadata", "bytes", "0+"),
    ]),
])
SYNC_GROUP_REQUEST = Message("SyncGroupRequest", 14, "0-5", "4+", [
    f("group_id", "string", "0+"),
    f("generation_id", "int32", "0+"),
    f("member_id", "string", "0+"),
    f("group_instance_id", "string", "3+", nullable="3+", default=NULL),
    f("protocol_type", "string", "5+", nullable="5+", default=NULL),
    f("protocol_name", "string", "5+", nullable="5+", default=NULL),
    f("assignments", "[]", "0+", fields=[
        f("member_id", "string", "0+"),
        f("assignment", "bytes", "0+"),
    ]),
])
SYNC_GROUP_RESPONSE = Message("SyncGroupResponse", 14, "0-5", "4+", [
    f("throttle_time_ms", "int32", "1+"),
    f("error_code", "int16", "0+"),
    f("protocol_type", "string", "5+", nullable="5+", default=NULL),
    f("protocol_name", "string", "5+", nullable="5+", default=NULL),
    f("assignment", "bytes", "0+"),
])
HEARTBEAT_REQUEST = Message("HeartbeatRequest", 12, "0-4", "4+", [
    f("group_id", "string", "0+"),
    f("generation_id", "int32", "0+"),
    f("member_id", "string", "0+"),
    f("group_instance_id", "string", "3+", nullable="3+", default=NULL),
])
HEARTBEAT_RESPONSE = Message("HeartbeatResponse", 12, "0-4", "4+", [
    f("throttle_time_ms", "int32", "1+"),
    f("error_code", "int16", "0+"),
])
LEAVE_GROUP_REQUEST = Message("LeaveGroupRequest", 13, "0-5", "4+", [
    f("group_id", "string", "0+"),
    f("member_id", "string", "0-2"),
    f("members", "[]", "3+", fields=[
        f("member_id", "string", "3+"),
        f("group_instance_id", "string", "3+", nullable="3+", default=NULL),
        f("reason", "string", "5+", nullable="5+", default=NULL),
    ]),
])
LEAVE_GROUP_RESPONSE = Message("LeaveGroupResponse", 13, "0-5", "4+", [
    f("throttle_time_ms", "int32", "1+"),
    f("error_code", "int16", "0+"),
    f("members", "[]", "3+", fields=[
        f("member_id", "string", "3+"),
        f("group_instance_id", "string", "3+", nullable="3+"),
        f("error_code", "int16", "3+"),
    ]),
])
OFFSET_FETCH_REQUEST = Message("OffsetFetchRequest", 9, "1-9", "6+", [
    f("group_id", "string", "0-7"),
    f("topics", "[]", "0-7", nullable="2-7", fields=[
        f("name", "string", "0-7"),
        f("partition_indexes", "[]int32", "0-7"),
    ]),
    f("groups", "[]", "8+", fields=[
        f("group_id", "string", "8+"),
        f("member_id", "string", "9+", nullable="9+", default=NULL),
        f("member_epoch", "int32", "9+", default=-1),
        f("topics", "[]", "8+", nullable="8+", fields=[
            f("name", "string", "8+"),
            f("partition_indexes", "[]int32", "8+"),
        ]),
    ]),
    f("require_stable", "bool", "7+"),
])
_OFFSET_FETCH_PARTITION = [
    f("partition_index", "int32", "0+"),
    f("committed_offset", "int64", "0+"),
    f("committed_leader_epoch", "int32", "5+", default=-1),
    f("metadata", "string", "0+", nullable="0+"),
    f("error_code", "int16", "0+"),
]
OFFSET_FETCH_RESPONSE = Message("OffsetFetchResponse", 9, "1-9", "6+", [
    f("throttle_time_ms", "int32", "3+"),
    f("topics", "[]", "0-7", fields=[
        f("name", "string", "0-7"),
        f("partitions", "[]", "0-7", fields=_OFFSET_FETCH_PARTITION),
    ]),
    f("error_code", "int16", "2-7"),
    f("groups", "[]", "8+", fields=[
        f("group_id", "string", "8+"),
        f("topics", "[]", "8+", fields=[
            f("name", "string", "8+"),
            f("partitions", "[]", "8+", fields=_OFFSET_FETCH_PARTITION),
        ]),
        f("error_code", "int16", "8+"),
    ]),
])
OFFSET_COMMIT_REQUEST = Message("OffsetCommitRequest", 8, "2-9", "8+", [
    f("group_id", "string", "0+"),
    f("generation_id_or_member_epoch", "int32", "1+", default=-1),
    f("member_id", "string", "1+"),
    f("group_instance_id", "string", "7+", nullable="7+", default=NULL),
    f("retention_time_ms", "int64", "2-4", default=-1),
    f("topics", "[]", "0+", fields=[
        f("name", "string", "0+"),
        f("partitions", "[]", "0+", fields=[
            f("partition_index", "int32", "0+"),
            f("committed_offset", "int64", "0+"),
            f("committed_leader_epoch", "int32", "6+", default=-1),
            f("commit_timestamp", "int64", "1", default=-1),
            f("committed_metadata", "string", "0+", nullable="0+"),
        ]),
    ]),
])
OFFSET_COMMIT_RESPONSE = Message("OffsetCommitResponse", 8, "2-9", "8+", [
    f("throttle_time_ms", "int32", "3+"),
    f("topics", "[]", "0+", fields=[
        f("name", "string", "0+"),
        f("partitions", "[]", "0+", fields=[
            f("partition_index", "int32", "0+"),
            f("error_code", "int16", "0+"),
        ]),
    ]),
])

REQUESTS = {m.api_key: m for m in (
    API_VERSIONS_REQUEST, METADATA_REQUEST, LIST_OFFSETS_REQUEST, FETCH_REQUEST, PRODUCE_REQUEST,
    SASL_HANDSHAKE_REQUEST, SASL_AUTHENTICATE_REQUEST, FIND_COORDINATOR_REQUEST, JOIN_GROUP_REQUEST,
    SYNC_GROUP_REQUEST, HEARTBEAT_REQUEST, LEAVE_GROUP_REQUEST, OFFSET_FETCH_REQUEST, OFFSET_COMMIT_REQUEST)}
RESPONSES = {m.api_key: m for m in (
    API_VERSIONS_RESPONSE, METADATA_RESPONSE, LIST_OFFSETS_RESPONSE, FETCH_RESPONSE, PRODUCE_RESPONSE,
    SASL_HANDSHAKE_RESPONSE, SASL_AUTHENTICATE_RESPONSE, FIND_COORDINATOR_RESPONSE, JOIN_GROUP_RESPONSE,
    SYNC_GROUP_RESPONSE, HEARTBEAT_RESPONSE, LEAVE_GROUP_RESPONSE, OFFSET_FETCH_RESPONSE, OFFSET_COMMIT_RESPONSE)}
