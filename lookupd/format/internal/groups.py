"""`__consumer_offsets`: the group coordinator's records (GroupCoordinatorRecordSerde). No I/O.

A record's key is an int16 record type, then the key message read at that type as its version; its
value is an int16 version, then the value message at that version, or null (a tombstone). Types:

    0, 1  OffsetCommit (0: the key version before 0.9; both read alike)
    2     GroupMetadata                              (classic groups)
    3-8   ConsumerGroup* metadata, partition metadata, member metadata, target assignment
          metadata and member, current member assignment  (KIP-848 consumer groups)
    9-15  ShareGroup* the same, and ShareGroupStatePartitionMetadata  (KIP-932 share groups)

The tables are Kafka's message schemas (group-coordinator/src/main/resources/common/message/) as of
Kafka 4.0. Any other type, or a value version past a table's, is an error naming it.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from .consumer_protocol import decode_assignment, decode_subscription
from .schema import Message, MessageError, UnknownRecordType, common, message, read_prefixed

OFFSET_COMMIT_KEY = message("OffsetCommitKey", "0-1", "none", """
    group       string  0-1
    topic       string  0-1
    partition   int32   0-1
""")

OFFSET_COMMIT_VALUE = message("OffsetCommitValue", "0-4", "4+", """
    offset           int64   0+
    leaderEpoch      int32   3+  default=-1
    metadata         string  0+
    commitTimestamp  int64   0+
    expireTimestamp  int64   1   default=-1
""")

GROUP_METADATA_VALUE = message("GroupMetadataValue", "0-4", "4+", """
    protocolType           string  0+
    generation             int32   0+
    protocol               string  0+  null=0+
    leader                 string  0+  null=0+
    currentStateTimestamp  int64   2+  default=-1
    members                []MemberMetadata 0+
      memberId          string  0+
      groupInstanceId   string  3+  null=3+ default=null
      clientId          string  0+
      clientHost        string  0+
      rebalanceTimeout  int32   1+  default=-1
      sessionTimeout    int32   0+
      subscription      bytes   0+
      assignment        bytes   0+
""")

_TOPIC_PARTITIONS = common("TopicPartitions", """
    topicId     uuid     0+
    partitions  []int32  0+
""")

_TOPIC_METADATA = """
    topics  []TopicMetadata 0+
      topicId            uuid    0+
      topicName          string  0+
      numPartitions      int32   0+
      partitionMetadata  []PartitionMetadata 0+
        partition  int32     0+
        racks      []string  0+
"""

_EPOCH = """
    epoch  int32  0+
"""
_ASSIGNMENT_EPOCH = """
    assignmentEpoch  int32  0+
"""
_TARGET_MEMBER = """
    topicPartitions  []TopicPartition 0+
      topicId     uuid     0+
      partitions  []int32  0+
"""

CONSUMER_GROUP_METADATA_VALUE = message("ConsumerGroupMetadataValue", "0", "0+", _EPOCH)

CONSUMER_GROUP_PARTITION_METADATA_VALUE = message("ConsumerGroupPartitionMetadataValue", "0", "0+", _TOPIC_METADATA)

CONSUMER_GROUP_MEMBER_METADATA_VALUE = message("ConsumerGroupMemberMetadataValue", "0", "0+", """
    instanceId            string    0+  null=0+
    rackId                string    0+  null=0+
    clientId              string    0+
    clientHost            string    0+
    subscribedTopicNames  []string  0+
    subscribedTopicRegex  string    0+  null=0+
    rebalanceTimeoutMs    int32     0+  default=-1
    serverAssignor        string    0+  null=0+
    classicMemberMetadata ClassicMemberMetadata 0+ null=0+ tag=0@0+ default=null
      sessionTimeoutMs    int32  0+
      supportedProtocols  []ClassicProtocol 0+
        name      string  0+
        metadata  bytes   0+
""")

CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE = message("ConsumerGroupTargetAssignmentMetadataValue", "0", "0+",
                                                          _ASSIGNMENT_EPOCH)

CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE = message("ConsumerGroupTargetAssignmentMemberValue", "0", "0+",
                                                        _TARGET_MEMBER)

CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE = message("ConsumerGroupCurrentMemberAssignmentValue", "0", "0+", """
    memberEpoch                  int32  0+
    previousMemberEpoch          int32  0+
    state                        int8   0+
    assignedPartitions           []TopicPartitions 0+
    partitionsPendingRevocation  []TopicPartitions 0+
""", {"TopicPartitions": _TOPIC_PARTITIONS})

SHARE_GROUP_PARTITION_METADATA_VALUE = message("ShareGroupPartitionMetadataValue", "0", "0+", _TOPIC_METADATA)

SHARE_GROUP_MEMBER_METADATA_VALUE = message("ShareGroupMemberMetadataValue", "0", "0+", """
    rackId                string    0+  null=0+
    clientId              string    0+
    clientHost            string    0+
    subscribedTopicNames  []string  0+
""")

SHARE_GROUP_METADATA_VALUE = message("ShareGroupMetadataValue", "0", "0+", _EPOCH)

SHARE_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE = message("ShareGroupTargetAssignmentMetadataValue", "0", "0+",
                                                       _ASSIGNMENT_EPOCH)

SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE = message("ShareGroupTargetAssignmentMemberValue", "0", "0+", _TARGET_MEMBER)

SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE = message("ShareGroupCurrentMemberAssignmentValue", "0", "0+", """
    memberEpoch          int32  0+
    previousMemberEpoch  int32  0+
    state                int8   0+
    assignedPartitions   []TopicPartitions 0+
""", {"TopicPartitions": _TOPIC_PARTITIONS})

SHARE_GROUP_STATE_PARTITION_METADATA_VALUE = message("ShareGroupStatePartitionMetadataValue", "0", "0+", """
    initializedTopics  []TopicPartitionsInfo 0+
      topicId     uuid     0+
      topicName   string   0+
      partitions  []int32  0+
    deletingTopics     []TopicInfo 0+
      topicId     uuid     0+
      topicName   string   0+
""")


def _group_key(name: str, record_type: int, member: bool) -> Message:
    """The keys of types 2-15: the group id (and a member id), present only at the type's own version."""
    group_field = "group" if record_type == 2 else "groupId"
    table = f"{group_field} string {record_type}\n" + (f"memberId string {record_type}\n" if member else "")
    return message(name, str(record_type), "none", table)


class RecordType(NamedTuple):
    name: str
    key: Message
    value: Message


RECORD_TYPES: dict[int, RecordType] = {
    0: RecordType("OffsetCommit", OFFSET_COMMIT_KEY, OFFSET_COMMIT_VALUE),
    1: RecordType("OffsetCommit", OFFSET_COMMIT_KEY, OFFSET_COMMIT_VALUE),
}
for _type, _name, _member, _value in (
        (2, "GroupMetadata", False, GROUP_METADATA_VALUE),
        (3, "ConsumerGroupMetadata", False, CONSUMER_GROUP_METADATA_VALUE),
        (4, "ConsumerGroupPartitionMetadata", False, CONSUMER_GROUP_PARTITION_METADATA_VALUE),
        (5, "ConsumerGroupMemberMetadata", True, CONSUMER_GROUP_MEMBER_METADATA_VALUE),
        (6, "ConsumerGroupTargetAssignmentMetadata", False, CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE),
        (7, "ConsumerGroupTargetAssignmentMember", True, CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE),
        (8, "ConsumerGroupCurrentMemberAssignment", True, CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE),
        (9, "ShareGroupPartitionMetadata", False, SHARE_GROUP_PARTITION_METADATA_VALUE),
        (10, "ShareGroupMemberMetadata", True, SHARE_GROUP_MEMBER_METADATA_VALUE),
        (11, "ShareGroupMetadata", False, SHARE_GROUP_METADATA_VALUE),
        (12, "ShareGroupTargetAssignmentMetadata", False, SHARE_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE),
        (13, "ShareGroupTargetAssignmentMember", True, SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE),
        (14, "ShareGroupCurrentMemberAssignment", True, SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE),
        (15, "ShareGroupStatePartitionMetadata", False, SHARE_GROUP_STATE_PARTITION_METADATA_VALUE)):
    RECORD_TYPES[_type] = RecordType(_name, _group_key(_name + "Key", _type, _member), _value)

OFFSET_COMMIT_TYPES = (0, 1)
GROUP_METADATA = 2
_I16 = struct.Struct(">h")


class GroupRecord(NamedTuple):
    """One decoded `__consumer_offsets` record; `value` is None for a tombstone."""

    type: int
    key: dict
    value_version: int | None
    value: dict | None

    @property
    def type_name(self) -> str:
        return RECORD_TYPES[self.type].name

    @property
    def group(self) -> str:
        return self.key.get("group", self.key.get("groupId"))


def record_type(key: bytes | None) -> int:
    """A key's record type (its int16 prefix)."""
    if key is None:
        raise MessageError("the record has no key (every __consumer_offsets record has one)")
    if len(key) < 2:
        raise MessageError(f"the key is {len(key)} bytes, too short for its record type")
    return _I16.unpack_from(key)[0]


def decode_key(key: bytes | None) -> tuple[int, dict]:
    """(record type, key fields)."""
    t = record_type(key)
    rt = RECORD_TYPES.get(t)
    if rt is None:
        raise UnknownRecordType(f"unknown __consumer_offsets record type {t} (this decoder knows types 0-15)")
    try:
        fields, _ = rt.key.read(key, t, 2)
    except MessageError as e:
        raise type(e)(f"{rt.name} key: {e}") from None
    return t, fields


def decode_value(t: int, value: bytes | None) -> tuple[int | None, dict | None]:
    """(value version, value fields) of a record of type `t`; (None, None) for a tombstone."""
    if value is None:
        return None, None
    return read_prefixed(RECORD_TYPES[t].value, value, "value")


def decode(key: bytes | None, value: bytes | None) -> GroupRecord:
    """A record as GroupCoordinatorRecordSerde.deserialize reads it (trailing bytes ignored, as there)."""
    t, k = decode_key(key)
    version, v = decode_value(t, value)
    return GroupRecord(t, k, version, v)


def with_assignments(value: dict) -> dict:
    """A GroupMetadataValue with each member's subscription and assignment decoded, when the group
    uses the consumer protocol (as kafka-dump-log shows them); bytes that do not decode stay bytes."""
    if value.get("protocolType") != "consumer":
        return value
    members = []
    for m in value["members"]:
        m = dict(m)
        m["subscription"] = decode_subscription(m["subscription"])
        m["assignment"] = decode_assignment(m["assignment"])
        members.append(m)
    return {**value, "members": members}
