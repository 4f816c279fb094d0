"""`__consumer_offsets`: the group coordinator's records (GroupCoordinatorRecordSerde). No I/O.

A record's key is an int16 record type, then the key message read at that type as its version; its
value is an int16 version, then the value message at that version, or null (a tombstone). Types:

    0, 1   OffsetCommit (0: the key version before 0.9; both read alike)
    2      GroupMetadata                                   (classic groups)
    3-8    ConsumerGroup* metadata, partition metadata, member metadata, target assignment
           metadata and member, current member assignment  (KIP-848 consumer groups)
    9-15   ShareGroup* the same, and ShareGroupStatePartitionMetadata  (KIP-932 share groups)
    16     ConsumerGroupRegularExpression                  (a consumer group's resolved regex)
    17-23  StreamsGroup* metadata, member metadata, target assignment metadata and member, current
           member assignment, topology                     (KIP-1071 streams groups; 18 was never released)

The tables are the facts of Kafka's message schemas (group-coordinator/src/main/resources/common/
message/) as of the 4.x line's newest (4.4): every version a released 4.x wrote reads. Share groups were
early access in 4.0 and two of their values changed layout at the same version in 4.1 (a non-tagged
field added); those keep 4.0's layout too, read when the newer one does not (4.0's bytes never read in
the newer layout: they lack its field). ShareGroupPartitionMetadata (9) is 4.0's alone. Any other type,
or a value version past a table's, is an error naming it.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from ...message import Message, MessageError, UnknownRecordType, common, read_prefixed
from . import record
from .consumer_protocol import decode_assignment, decode_subscription

OFFSET_COMMIT_KEY = record("OffsetCommitKey", "0-1", "none", """
    group       string  0-1
    topic       string  0-1
    partition   int32   0-1
""")

OFFSET_COMMIT_VALUE = record("OffsetCommitValue", "0-4", "4+", """
    offset           int64   0+
    leaderEpoch      int32   3+  default=-1
    metadata         string  0+
    commitTimestamp  int64   0+
    expireTimestamp  int64   1   default=-1
    topicId          uuid    4+  tag=0
""")

GROUP_METADATA_VALUE = record("GroupMetadataValue", "0-4", "4+", """
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
_TOPIC_PARTITIONS_WITH_EPOCHS = common("TopicPartitions", """
    topicId           uuid     0+
    partitions        []int32  0+
    assignmentEpochs  []int32  0+  null=0+ tag=0 default=null
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
_GROUP_EPOCH = """
    epoch         int32  0+
    metadataHash  int64  0+  tag=0
"""
_ASSIGNMENT_EPOCH = """
    assignmentEpoch      int32  0+
    assignmentTimestamp  int64  0+  tag=0
"""
_TARGET_MEMBER = """
    topicPartitions  []TopicPartition 0+
      topicId     uuid     0+
      partitions  []int32  0+
"""

CONSUMER_GROUP_METADATA_VALUE = record("ConsumerGroupMetadataValue", "0", "0+", _GROUP_EPOCH)

CONSUMER_GROUP_PARTITION_METADATA_VALUE = record("ConsumerGroupPartitionMetadataValue", "0", "0+", _TOPIC_METADATA)

CONSUMER_GROUP_MEMBER_METADATA_VALUE = record("ConsumerGroupMemberMetadataValue", "0", "0+", """
    instanceId            string    0+  null=0+
    rackId                string    0+  null=0+
    clientId              string    0+
    clientHost            string    0+
    subscribedTopicNames  []string  0+
    subscribedTopicRegex  string    0+  null=0+
    rebalanceTimeoutMs    int32     0+  default=-1
    serverAssignor        string    0+  null=0+
    classicMemberMetadata ClassicMemberMetadata 0+ null=0+ tag=0 default=null
      sessionTimeoutMs    int32  0+
      supportedProtocols  []ClassicProtocol 0+
        name      string  0+
        metadata  bytes   0+
""")

CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE = record("ConsumerGroupTargetAssignmentMetadataValue", "0", "0+",
                                                         _ASSIGNMENT_EPOCH)

CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE = record("ConsumerGroupTargetAssignmentMemberValue", "0", "0+",
                                                       _TARGET_MEMBER)

CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE = record("ConsumerGroupCurrentMemberAssignmentValue", "0", "0+", """
    memberEpoch                  int32  0+
    previousMemberEpoch          int32  0+
    state                        int8   0+
    assignedPartitions           []TopicPartitions 0+
    partitionsPendingRevocation  []TopicPartitions 0+
""", {"TopicPartitions": _TOPIC_PARTITIONS_WITH_EPOCHS})

CONSUMER_GROUP_REGULAR_EXPRESSION_VALUE = record("ConsumerGroupRegularExpressionValue", "0", "0+", """
    topics     []string  0+
    version    int64     0+
    timestamp  int64     0+
""")

SHARE_GROUP_PARTITION_METADATA_VALUE = record("ShareGroupPartitionMetadataValue", "0", "0+", _TOPIC_METADATA)

SHARE_GROUP_MEMBER_METADATA_VALUE = record("ShareGroupMemberMetadataValue", "0", "0+", """
    rackId                string    0+  null=0+
    clientId              string    0+
    clientHost            string    0+
    subscribedTopicNames  []string  0+
""")

SHARE_GROUP_METADATA_VALUE = record("ShareGroupMetadataValue", "0", "0+", """
    epoch         int32  0+
    metadataHash  int64  0+
""")
SHARE_GROUP_METADATA_VALUE_4_0 = record("ShareGroupMetadataValue", "0", "0+", """
    epoch  int32  0+
""")

SHARE_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE = record("ShareGroupTargetAssignmentMetadataValue", "0", "0+",
                                                      _ASSIGNMENT_EPOCH)

SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE = record("ShareGroupTargetAssignmentMemberValue", "0", "0+", _TARGET_MEMBER)

SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE = record("ShareGroupCurrentMemberAssignmentValue", "0", "0+", """
    memberEpoch          int32  0+
    previousMemberEpoch  int32  0+
    state                int8   0+
    assignedPartitions   []TopicPartitions 0+
""", {"TopicPartitions": _TOPIC_PARTITIONS})

_SHARE_STATE_TOPICS = {"TopicPartitionsInfo": common("TopicPartitionsInfo", """
    topicId     uuid     0+
    topicName   string   0+
    partitions  []int32  0+
"""), "TopicInfo": common("TopicInfo", """
    topicId     uuid     0+
    topicName   string   0+
""")}
SHARE_GROUP_STATE_PARTITION_METADATA_VALUE = record("ShareGroupStatePartitionMetadataValue", "0", "0+", """
    initializingTopics  []TopicPartitionsInfo 0+
    initializedTopics   []TopicPartitionsInfo 0+
    deletingTopics      []TopicInfo 0+
""", _SHARE_STATE_TOPICS)
SHARE_GROUP_STATE_PARTITION_METADATA_VALUE_4_0 = record("ShareGroupStatePartitionMetadataValue", "0", "0+", """
    initializedTopics   []TopicPartitionsInfo 0+
    deletingTopics      []TopicInfo 0+
""", _SHARE_STATE_TOPICS)

STREAMS_GROUP_METADATA_VALUE = record("StreamsGroupMetadataValue", "0", "0+", """
    epoch                           int32  0+
    metadataHash                    int64  0+
    validatedTopologyEpoch          int32  0+  tag=0 default=-1
    lastAssignmentConfigs           []LastAssignmentConfig 0+ null=0+ tag=1 default=null
      key    string  0+
      value  string  0+
    storedDescriptionTopologyEpoch  int32  0+  tag=2 default=-1
    failedDescriptionTopologyEpoch  int32  0+  tag=3 default=-1
""")

STREAMS_GROUP_MEMBER_METADATA_VALUE = record("StreamsGroupMemberMetadataValue", "0", "0+", """
    instanceId          string  0+  null=0+
    rackId              string  0+  null=0+
    clientId            string  0+
    clientHost          string  0+
    rebalanceTimeoutMs  int32   0+  default=-1
    topologyEpoch       int32   0+
    processId           string  0+
    userEndpoint        Endpoint 0+ null=0+ default=null
      host  string  0+
      port  uint16  0+
    clientTags          []KeyValue 0+
      key    string  0+
      value  string  0+
""")

STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE = record("StreamsGroupTargetAssignmentMetadataValue", "0", "0+",
                                                        _ASSIGNMENT_EPOCH)

_TASK_IDS = common("TaskIds", """
    subtopologyId  string   0+
    partitions     []int32  0+
""")
_TASK_IDS_WITH_EPOCHS = common("TaskIds", """
    subtopologyId     string   0+
    partitions        []int32  0+
    assignmentEpochs  []int32  0+  null=0+ tag=0 default=null
""")

STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE = record("StreamsGroupTargetAssignmentMemberValue", "0", "0+", """
    activeTasks   []TaskIds 0+
    standbyTasks  []TaskIds 0+
    warmupTasks   []TaskIds 0+
""", {"TaskIds": _TASK_IDS})

STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE = record("StreamsGroupCurrentMemberAssignmentValue", "0", "0+", """
    memberEpoch                    int32  0+
    previousMemberEpoch            int32  0+
    state                          int8   0+
    activeTasks                    []TaskIds 0+
    standbyTasks                   []TaskIds 0+
    warmupTasks                    []TaskIds 0+
    activeTasksPendingRevocation   []TaskIds 0+
    standbyTasksPendingRevocation  []TaskIds 0+
    warmupTasksPendingRevocation   []TaskIds 0+
""", {"TaskIds": _TASK_IDS_WITH_EPOCHS})

_TOPIC_INFO = common("TopicInfo", """
    name               string  0+
    partitions         int32   0+
    replicationFactor  int16   0+
    topicConfigs       []TopicConfig 0+
      key    string  0+
      value  string  0+
""")
STREAMS_GROUP_TOPOLOGY_VALUE = record("StreamsGroupTopologyValue", "0", "0+", """
    epoch          int32  0+
    subtopologies  []Subtopology 0+
      subtopologyId            string    0+
      sourceTopics             []string  0+
      sourceTopicRegex         []string  0+
      stateChangelogTopics     []TopicInfo 0+
      repartitionSinkTopics    []string  0+
      repartitionSourceTopics  []TopicInfo 0+
      copartitionGroups        []CopartitionGroup 0+
        sourceTopics             []int16  0+
        sourceTopicRegex         []int16  0+
        repartitionSourceTopics  []int16  0+
""", {"TopicInfo": _TOPIC_INFO})


def _group_key(name: str, record_type: int, extra: str | None) -> Message:
    """The keys of types 2 and up: the group id (and a member id or a regular expression), present only at
    the type's own version."""
    group_field = "group" if record_type == 2 else "groupId"
    table = f"{group_field} string {record_type}\n" + (f"{extra} string {record_type}\n" if extra else "")
    return record(name, str(record_type), "none", table)


class RecordType(NamedTuple):
    name: str
    key: Message
    value: Message  # the newest layout
    earlier: tuple[Message, ...] = ()  # layouts an earlier 4.x wrote at the same versions, read when it does not


RECORD_TYPES: dict[int, RecordType] = {
    0: RecordType("OffsetCommit", OFFSET_COMMIT_KEY, OFFSET_COMMIT_VALUE),
    1: RecordType("OffsetCommit", OFFSET_COMMIT_KEY, OFFSET_COMMIT_VALUE),
}
_MEMBER = "memberId"
for _type, _name, _extra, _value, _earlier in (
        (2, "GroupMetadata", None, GROUP_METADATA_VALUE, ()),
        (3, "ConsumerGroupMetadata", None, CONSUMER_GROUP_METADATA_VALUE, ()),
        (4, "ConsumerGroupPartitionMetadata", None, CONSUMER_GROUP_PARTITION_METADATA_VALUE, ()),
        (5, "ConsumerGroupMemberMetadata", _MEMBER, CONSUMER_GROUP_MEMBER_METADATA_VALUE, ()),
        (6, "ConsumerGroupTargetAssignmentMetadata", None, CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE, ()),
        (7, "ConsumerGroupTargetAssignmentMember", _MEMBER, CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE, ()),
        (8, "ConsumerGroupCurrentMemberAssignment", _MEMBER, CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE, ()),
        (9, "ShareGroupPartitionMetadata", None, SHARE_GROUP_PARTITION_METADATA_VALUE, ()),
        (10, "ShareGroupMemberMetadata", _MEMBER, SHARE_GROUP_MEMBER_METADATA_VALUE, ()),
        (11, "ShareGroupMetadata", None, SHARE_GROUP_METADATA_VALUE, (SHARE_GROUP_METADATA_VALUE_4_0,)),
        (12, "ShareGroupTargetAssignmentMetadata", None, SHARE_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE, ()),
        (13, "ShareGroupTargetAssignmentMember", _MEMBER, SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE, ()),
        (14, "ShareGroupCurrentMemberAssignment", _MEMBER, SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE, ()),
        (15, "ShareGroupStatePartitionMetadata", None, SHARE_GROUP_STATE_PARTITION_METADATA_VALUE,
         (SHARE_GROUP_STATE_PARTITION_METADATA_VALUE_4_0,)),
        (16, "ConsumerGroupRegularExpression", "regularExpression", CONSUMER_GROUP_REGULAR_EXPRESSION_VALUE, ()),
        (17, "StreamsGroupMetadata", None, STREAMS_GROUP_METADATA_VALUE, ()),
        (19, "StreamsGroupMemberMetadata", _MEMBER, STREAMS_GROUP_MEMBER_METADATA_VALUE, ()),
        (20, "StreamsGroupTargetAssignmentMetadata", None, STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE, ()),
        (21, "StreamsGroupTargetAssignmentMember", _MEMBER, STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE, ()),
        (22, "StreamsGroupCurrentMemberAssignment", _MEMBER, STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE, ()),
        (23, "StreamsGroupTopology", None, STREAMS_GROUP_TOPOLOGY_VALUE, ())):
    RECORD_TYPES[_type] = RecordType(_name, _group_key(_name + "Key", _type, _extra), _value, _earlier)

OFFSET_COMMIT_TYPES = (0, 1)
GROUP_METADATA = 2
KNOWN_TYPES = "0-17, 19-23"  # (18, StreamsGroupPartitionMetadata, was dropped before any release)
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
    if t == GROUP_METADATA:  # (its key is the group alone: read here where whole, else by the codec)
        n = _I16.unpack_from(key, 2)[0] if len(key) >= 4 else -1
        if 0 <= n <= len(key) - 4:
            return t, {"group": str(key[4:4 + n], "utf-8", "replace")}
    rt = RECORD_TYPES.get(t)
    if rt is None:
        raise UnknownRecordType(f"unknown __consumer_offsets record type {t} (this decoder knows types "
                                f"{KNOWN_TYPES}: a newer Kafka's?)")
    return t, rt.key.read(key, t, 2)[0]


# GroupMetadataValue's non-flexible versions (0-3; every 4.x writes 3, its newest non-flexible one) read with
# structs: a member's fields after clientHost (rebalanceTimeout from v1, sessionTimeout), and past this many
# members a value is left to the schema codec, whose item budget (codec.MAX_ITEMS) then applies as to any message.
_GM_TIMEOUTS = struct.Struct(">ii")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
GROUP_METADATA_FAST_MEMBERS = 1000


def _group_metadata_fast(value) -> tuple[int, dict] | None:
    """A GroupMetadataValue of version 0-3 read straight through: the schema codec's (version, fields), or
    None where the bytes are anything but a well-formed value of at most GROUP_METADATA_FAST_MEMBERS members
    (the codec then reads it, or names what is wrong). Bytes after it are ignored, as the codec ignores them."""
    try:
        version = _I16.unpack_from(value)[0]
        if not 0 <= version <= 3:
            return None
        size = len(value)
        at = 2

        def string(nullable: bool) -> str | None:
            nonlocal at
            n = _I16.unpack_from(value, at)[0]
            at += 2
            if n < 0:  # (any negative length is null, as in Kafka's generated readers)
                if nullable:
                    return None
                raise ValueError
            if at + n > size:
                raise ValueError
            s = str(value[at:at + n], "utf-8", "replace")
            at += n
            return s

        def raw() -> bytes:
            nonlocal at
            n = _I32.unpack_from(value, at)[0]
            at += 4
            if n < 0 or at + n > size:
                raise ValueError
            b = bytes(value[at:at + n])
            at += n
            return b

        protocol_type = string(False)
        generation = _I32.unpack_from(value, at)[0]
        at += 4
        out = {"protocolType": protocol_type, "generation": generation, "protocol": string(True),
               "leader": string(True)}
        if version >= 2:
            out["currentStateTimestamp"] = _I64.unpack_from(value, at)[0]
            at += 8
        count = _I32.unpack_from(value, at)[0]
        at += 4
        if not 0 <= count <= GROUP_METADATA_FAST_MEMBERS:
            return None
        members = []
        for _ in range(count):
            member_id = string(False)
            m = {"memberId": member_id}
            if version >= 3:
                m["groupInstanceId"] = string(True)
            m["clientId"] = string(False)
            m["clientHost"] = string(False)
            if version >= 1:
                m["rebalanceTimeout"], m["sessionTimeout"] = _GM_TIMEOUTS.unpack_from(value, at)
                at += 8
            else:
                m["sessionTimeout"] = _I32.unpack_from(value, at)[0]
                at += 4
            m["subscription"] = raw()
            m["assignment"] = raw()
            members.append(m)
        out["members"] = members
        return version, out
    except (struct.error, ValueError):
        return None


def decode_value(t: int, value: bytes | None) -> tuple[int | None, dict | None]:
    """(value version, value fields) of a record of type `t`; (None, None) for a tombstone. A GroupMetadata
    value of a non-flexible version is read by `_group_metadata_fast` where it can be; anything else, and
    anything that path does not take, by `decode_value_reference`, the schema codec, which names every fault."""
    if t == GROUP_METADATA and value is not None:
        found = _group_metadata_fast(value)
        if found is not None:
            return found
    return decode_value_reference(t, value)


def decode_value_reference(t: int, value: bytes | None) -> tuple[int | None, dict | None]:
    """(value version, value fields) of a record of type `t`; (None, None) for a tombstone. Where an earlier
    4.x wrote another layout at the same version, a value the newest layout does not read is read in the
    earlier one, which must take every byte of it (as that Kafka wrote it: a damaged newer value is an
    error, not an older one)."""
    if value is None:
        return None, None
    rt = RECORD_TYPES[t]
    try:
        return read_prefixed(rt.value, value, "value")
    except MessageError as newest:
        if len(value) < 2:  # (no version to read it at in an earlier layout either)
            raise
        version = _I16.unpack_from(value)[0]
        for layout in rt.earlier:
            try:
                fields, end = layout.read(value, version, 2)
            except MessageError:
                continue
            if end == len(value):
                return version, fields
        raise newest


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
