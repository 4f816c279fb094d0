"""The requests and responses the Kafka listener speaks, declared from Kafka's message JSON schemas
(clients/src/main/resources/common/message/*.json, Apache Kafka 4.0's) in lookupd.message's tables: field
order, types, versions, nullable versions, tags and defaults as they state them, names in snake_case.
Only the versions this listener advertises (lookupd.kafka.apis.SUPPORTED) are ever decoded or encoded.
"""

from __future__ import annotations

from ..message.codec import Message, common, message

# The elements (array items and structs) one request may decode into: a Fetch for 10,000 partitions
# is about 10,000 of them, while a 1 MiB frame of one-byte structs would be a million dicts (~200 MB).
MAX_REQUEST_ITEMS = 100_000


def _message(name: str, api_key: int, valid: str, flexible: str, table: str, structs=None) -> Message:
    """A request or response, read in the object view (every field, uuids as bytes) within MAX_REQUEST_ITEMS."""
    return message(name, valid, flexible, table, structs, api_key=api_key, max_items=MAX_REQUEST_ITEMS,
                   max_items_name="MAX_REQUEST_ITEMS")


# ------------------------------------------------------------------ ApiVersions (18)

API_VERSIONS_REQUEST = _message("ApiVersionsRequest", 18, "0-4", "3+", """
    client_software_name     string     3+
    client_software_version  string     3+
""")

API_VERSIONS_RESPONSE = _message("ApiVersionsResponse", 18, "0-4", "3+", """
    error_code                int16      0+
    api_keys                  []ApiKeys  0+
      api_key      int16      0+
      min_version  int16      0+
      max_version  int16      0+
    throttle_time_ms          int32      1+
    supported_features        []SupportedFeatures 3+    tag=0
      name         string     3+
      min_version  int16      3+
      max_version  int16      3+
    finalized_features_epoch  int64      3+    tag=1 default=-1
    finalized_features        []FinalizedFeatures 3+    tag=2
      name               string     3+
      max_version_level  int16      3+
      min_version_level  int16      3+
    zk_migration_ready        bool       3+    tag=3
""")

# ------------------------------------------------------------------ Metadata (3)

METADATA_REQUEST = _message("MetadataRequest", 3, "0-12", "9+", """
    topics                                 []Topics   0+    null=1+
      topic_id  uuid       10+
      name      string     0+    null=10+
    allow_auto_topic_creation              bool       4+    default=true
    include_cluster_authorized_operations  bool       8-10
    include_topic_authorized_operations    bool       8+
""")

METADATA_RESPONSE = _message("MetadataResponse", 3, "0-12", "9+", """
    throttle_time_ms               int32      3+
    brokers                        []Brokers  0+
      node_id  int32      0+
      host     string     0+
      port     int32      0+
      rack     string     1+    null=1+ default=null
    cluster_id                     string     2+    null=2+ default=null
    controller_id                  int32      1+    default=-1
    topics                         []Topics   0+
      error_code                   int16      0+
      name                         string     0+    null=12+
      topic_id                     uuid       10+
      is_internal                  bool       1+
      partitions                   []Partitions 0+
        error_code        int16      0+
        partition_index   int32      0+
        leader_id         int32      0+
        leader_epoch      int32      7+    default=-1
        replica_nodes     []int32    0+
        isr_nodes         []int32    0+
        offline_replicas  []int32    5+
      topic_authorized_operations  int32      8+    default=-2147483648
    cluster_authorized_operations  int32      8-10  default=-2147483648
""")

# ------------------------------------------------------------------ ListOffsets (2)

LIST_OFFSETS_REQUEST = _message("ListOffsetsRequest", 2, "1-10", "6+", """
    replica_id       int32      0+
    isolation_level  int8       2+
    topics           []Topics   0+
      name        string     0+
      partitions  []Partitions 0+
        partition_index       int32      0+
        current_leader_epoch  int32      4+    default=-1
        timestamp             int64      0+
        max_num_offsets       int32      0     default=1
    timeout_ms       int32      10+
""")

LIST_OFFSETS_RESPONSE = _message("ListOffsetsResponse", 2, "1-10", "6+", """
    throttle_time_ms  int32      2+
    topics            []Topics   0+
      name        string     0+
      partitions  []Partitions 0+
        partition_index    int32      0+
        error_code         int16      0+
        old_style_offsets  []int64    0
        timestamp          int64      1+    default=-1
        offset             int64      1+    default=-1
        leader_epoch       int32      4+    default=-1
""")

# ------------------------------------------------------------------ Fetch (1)

FETCH_REQUEST = _message("FetchRequest", 1, "4-17", "12+", """
    cluster_id             string     12+   null=12+ tag=0 default=null
    replica_id             int32      0-14  default=-1
    replica_state          ReplicaState 15+   tag=1
      replica_id     int32      15+   default=-1
      replica_epoch  int64      15+   default=-1
    max_wait_ms            int32      0+
    min_bytes              int32      0+
    max_bytes              int32      3+    default=2147483647
    isolation_level        int8       4+
    session_id             int32      7+
    session_epoch          int32      7+    default=-1
    topics                 []Topics   0+
      topic       string     0-12
      topic_id    uuid       13+
      partitions  []Partitions 0+
        partition             int32      0+
        current_leader_epoch  int32      9+    default=-1
        fetch_offset          int64      0+
        last_fetched_epoch    int32      12+   default=-1
        log_start_offset      int64      5+    default=-1
        partition_max_bytes   int32      0+
        replica_directory_id  uuid       17+   tag=0
    forgotten_topics_data  []ForgottenTopicsData 7+
      topic       string     7-12
      topic_id    uuid       13+
      partitions  []int32    7+
    rack_id                string     11+
""")

FETCH_RESPONSE = _message("FetchResponse", 1, "4-17", "12+", """
    throttle_time_ms  int32      1+
    error_code        int16      7+
    session_id        int32      7+
    responses         []Responses 0+
      topic       string     0-12
      topic_id    uuid       13+
      partitions  []Partitions 0+
        partition_index         int32      0+
        error_code              int16      0+
        high_watermark          int64      0+
        last_stable_offset      int64      4+    default=-1
        log_start_offset        int64      5+    default=-1
        diverging_epoch         DivergingEpoch 12+   tag=0
          epoch       int32      12+   default=-1
          end_offset  int64      12+   default=-1
        current_leader          CurrentLeader 12+   tag=1
          leader_id     int32      12+   default=-1
          leader_epoch  int32      12+   default=-1
        snapshot_id             SnapshotId 12+   tag=2
          end_offset  int64      0+    default=-1
          epoch       int32      0+    default=-1
        aborted_transactions    []AbortedTransactions 4+    null=4+
          producer_id   int64      4+
          first_offset  int64      4+
        preferred_read_replica  int32      11+   default=-1
        records                 records    0+    null=0+
    node_endpoints    []NodeEndpoints 16+   tag=0
      node_id  int32      16+
      host     string     16+
      port     int32      16+
      rack     string     16+   null=16+ default=null
""")

# ------------------------------------------------------------------ Produce (0): decoded only to refuse it

PRODUCE_REQUEST = _message("ProduceRequest", 0, "3-11", "9+", """
    transactional_id  string     3+    null=3+ default=null
    acks              int16      0+
    timeout_ms        int32      0+
    topic_data        []TopicData 0+
      name            string     0+
      partition_data  []PartitionData 0+
        index    int32      0+
        records  records    0+    null=0+
""")

PRODUCE_RESPONSE = _message("ProduceResponse", 0, "3-11", "9+", """
    responses         []Responses 0+
      name                 string     0+
      partition_responses  []PartitionResponses 0+
        index               int32      0+
        error_code          int16      0+
        base_offset         int64      0+
        log_append_time_ms  int64      2+    default=-1
        log_start_offset    int64      5+    default=-1
        record_errors       []RecordErrors 8+
          batch_index                int32      8+
          batch_index_error_message  string     8+    null=8+ default=null
        error_message       string     8+    null=8+ default=null
        current_leader      CurrentLeader 10+   tag=0
          leader_id     int32      10+   default=-1
          leader_epoch  int32      10+   default=-1
    throttle_time_ms  int32      1+
    node_endpoints    []NodeEndpoints 10+   tag=0
      node_id  int32      10+
      host     string     10+
      port     int32      10+
      rack     string     10+   null=10+ default=null
""")

# ------------------------------------------------------------------ SASL (17, 36)

SASL_HANDSHAKE_REQUEST = _message("SaslHandshakeRequest", 17, "0-1", "none", """
    mechanism  string     0+
""")

SASL_HANDSHAKE_RESPONSE = _message("SaslHandshakeResponse", 17, "0-1", "none", """
    error_code  int16      0+
    mechanisms  []string   0+
""")

SASL_AUTHENTICATE_REQUEST = _message("SaslAuthenticateRequest", 36, "0-2", "2+", """
    auth_bytes  bytes      0+
""")

SASL_AUTHENTICATE_RESPONSE = _message("SaslAuthenticateResponse", 36, "0-2", "2+", """
    error_code           int16      0+
    error_message        string     0+    null=0+
    auth_bytes           bytes      0+
    session_lifetime_ms  int64      1+
""")

# ------------------------------------------------------------------ consumer groups, classic protocol

FIND_COORDINATOR_REQUEST = _message("FindCoordinatorRequest", 10, "0-6", "3+", """
    key               string     0-3
    key_type          int8       1+
    coordinator_keys  []string   4+
""")

FIND_COORDINATOR_RESPONSE = _message("FindCoordinatorResponse", 10, "0-6", "3+", """
    throttle_time_ms  int32      1+
    error_code        int16      0-3
    error_message     string     1-3   null=1-3
    node_id           int32      0-3
    host              string     0-3
    port              int32      0-3
    coordinators      []Coordinators 4+
      key            string     4+
      node_id        int32      4+
      host           string     4+
      port           int32      4+
      error_code     int16      4+
      error_message  string     4+    null=4+
""")

JOIN_GROUP_REQUEST = _message("JoinGroupRequest", 11, "0-9", "6+", """
    group_id              string     0+
    session_timeout_ms    int32      0+
    rebalance_timeout_ms  int32      1+    default=-1
    member_id             string     0+
    group_instance_id     string     5+    null=5+ default=null
    protocol_type         string     0+
    protocols             []Protocols 0+
      name      string     0+
      metadata  bytes      0+
    reason                string     8+    null=8+ default=null
""")

JOIN_GROUP_RESPONSE = _message("JoinGroupResponse", 11, "0-9", "6+", """
    throttle_time_ms  int32      2+
    error_code        int16      0+
    generation_id     int32      0+    default=-1
    protocol_type     string     7+    null=7+ default=null
    protocol_name     string     0+    null=7+
    leader            string     0+
    skip_assignment   bool       9+
    member_id         string     0+
    members           []Members  0+
      member_id          string     0+
      group_instance_id  string     5+    null=5+ default=null
      metadata           bytes      0+
""")

SYNC_GROUP_REQUEST = _message("SyncGroupRequest", 14, "0-5", "4+", """
    group_id           string     0+
    generation_id      int32      0+
    member_id          string     0+
    group_instance_id  string     3+    null=3+ default=null
    protocol_type      string     5+    null=5+ default=null
    protocol_name      string     5+    null=5+ default=null
    assignments        []Assignments 0+
      member_id   string     0+
      assignment  bytes      0+
""")

SYNC_GROUP_RESPONSE = _message("SyncGroupResponse", 14, "0-5", "4+", """
    throttle_time_ms  int32      1+
    error_code        int16      0+
    protocol_type     string     5+    null=5+ default=null
    protocol_name     string     5+    null=5+ default=null
    assignment        bytes      0+
""")

HEARTBEAT_REQUEST = _message("HeartbeatRequest", 12, "0-4", "4+", """
    group_id           string     0+
    generation_id      int32      0+
    member_id          string     0+
    group_instance_id  string     3+    null=3+ default=null
""")

HEARTBEAT_RESPONSE = _message("HeartbeatResponse", 12, "0-4", "4+", """
    throttle_time_ms  int32      1+
    error_code        int16      0+
""")

LEAVE_GROUP_REQUEST = _message("LeaveGroupRequest", 13, "0-5", "4+", """
    group_id   string     0+
    member_id  string     0-2
    members    []Members  3+
      member_id          string     3+
      group_instance_id  string     3+    null=3+ default=null
      reason             string     5+    null=5+ default=null
""")

LEAVE_GROUP_RESPONSE = _message("LeaveGroupResponse", 13, "0-5", "4+", """
    throttle_time_ms  int32      1+
    error_code        int16      0+
    members           []Members  3+
      member_id          string     3+
      group_instance_id  string     3+    null=3+
      error_code         int16      3+
""")

OFFSET_FETCH_REQUEST = _message("OffsetFetchRequest", 9, "1-9", "6+", """
    group_id        string     0-7
    topics          []Topics   0-7   null=2-7
      name               string     0-7
      partition_indexes  []int32    0-7
    groups          []Groups   8+
      group_id      string     8+
      member_id     string     9+    null=9+ default=null
      member_epoch  int32      9+    default=-1
      topics        []Topics   8+    null=8+
        name               string     8+
        partition_indexes  []int32    8+
    require_stable  bool       7+
""")

_OFFSET_FETCH_PARTITION = common("OffsetFetchResponsePartition", """
    partition_index         int32   0+
    committed_offset        int64   0+
    committed_leader_epoch  int32   5+  default=-1
    metadata                string  0+  null=0+
    error_code              int16   0+
""")

OFFSET_FETCH_RESPONSE = _message("OffsetFetchResponse", 9, "1-9", "6+", """
    throttle_time_ms  int32      3+
    topics            []Topics   0-7
      name        string     0-7
      partitions  []OffsetFetchResponsePartition 0-7
    error_code        int16      2-7
    groups            []Groups   8+
      group_id    string     8+
      topics      []Topics   8+
        name        string     8+
        partitions  []OffsetFetchResponsePartition 8+
      error_code  int16      8+
""", {"OffsetFetchResponsePartition": _OFFSET_FETCH_PARTITION})

OFFSET_COMMIT_REQUEST = _message("OffsetCommitRequest", 8, "2-9", "8+", """
    group_id                       string     0+
    generation_id_or_member_epoch  int32      1+    default=-1
    member_id                      string     1+
    group_instance_id              string     7+    null=7+ default=null
    retention_time_ms              int64      2-4   default=-1
    topics                         []Topics   0+
      name        string     0+
      partitions  []Partitions 0+
        partition_index         int32      0+
        committed_offset        int64      0+
        committed_leader_epoch  int32      6+    default=-1
        commit_timestamp        int64      1     default=-1
        committed_metadata      string     0+    null=0+
""")

OFFSET_COMMIT_RESPONSE = _message("OffsetCommitResponse", 8, "2-9", "8+", """
    throttle_time_ms  int32      3+
    topics            []Topics   0+
      name        string     0+
      partitions  []Partitions 0+
        partition_index  int32      0+
        error_code       int16      0+
""")


REQUESTS = {m.api_key: m for m in (
    API_VERSIONS_REQUEST, METADATA_REQUEST, LIST_OFFSETS_REQUEST, FETCH_REQUEST, PRODUCE_REQUEST,
    SASL_HANDSHAKE_REQUEST, SASL_AUTHENTICATE_REQUEST, FIND_COORDINATOR_REQUEST, JOIN_GROUP_REQUEST,
    SYNC_GROUP_REQUEST, HEARTBEAT_REQUEST, LEAVE_GROUP_REQUEST, OFFSET_FETCH_REQUEST, OFFSET_COMMIT_REQUEST)}
RESPONSES = {m.api_key: m for m in (
    API_VERSIONS_RESPONSE, METADATA_RESPONSE, LIST_OFFSETS_RESPONSE, FETCH_RESPONSE, PRODUCE_RESPONSE,
    SASL_HANDSHAKE_RESPONSE, SASL_AUTHENTICATE_RESPONSE, FIND_COORDINATOR_RESPONSE, JOIN_GROUP_RESPONSE,
    SYNC_GROUP_RESPONSE, HEARTBEAT_RESPONSE, LEAVE_GROUP_RESPONSE, OFFSET_FETCH_RESPONSE, OFFSET_COMMIT_RESPONSE)}
