"""`__cluster_metadata`: KRaft's metadata records (MetadataRecordSerde) and its control records. No I/O.

A metadata record has no key; its value is an ApiMessageAndVersion frame (AbstractApiMessageSerde):
an unsigned varint frame version (1), an unsigned varint api key (the record type) and an unsigned
varint version, then the message, with nothing after it. The tables are the 4.x line's newest
metadata/src/main/resources/common/metadata/*.json. The raft leader's control batches hold
LeaderChange, SnapshotHeader/Footer, KRaftVersion and Voters records, each read at version 0 as
ControlRecordUtils reads them (their first field is the version they were written at).

`decode_frame` is shared with `__remote_log_metadata`, whose values use the same frame.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from ...message import Message, MessageError, UnknownRecordType, common
from ...message.wire import Reader
from . import record

FRAME_VERSION = 1

_ENDPOINT_FEATURES = """
        endPoints  []{kind}Endpoint 0+
          name              string  0+
          host              string  0+
          port              uint16  0+
          securityProtocol  int16   0+
        features   []{kind}Feature 0+
          name                 string  0+
          minSupportedVersion  int16   0+
          maxSupportedVersion  int16   0+
"""

METADATA_RECORDS: dict[int, Message] = {m_key: m for m_key, m in (
    (0, record("RegisterBrokerRecord", "0-4", "0+", """
        brokerId              int32  0+
        isMigratingZkBroker   bool   2+  default=false
        incarnationId         uuid   0+
        brokerEpoch           int64  0+
    """ + _ENDPOINT_FEATURES.format(kind="Broker") + """
        rack                  string 0+  null=0+
        fenced                bool   0+  default=true
        inControlledShutdown  bool   1+  default=false
        logDirs               []uuid 3+  tag=0@3+
        cordonedLogDirs       []uuid 4+  null=4+ tag=1@4+ default=null
    """)),
    (1, record("UnregisterBrokerRecord", "0", "0+", """
        brokerId     int32  0+
        brokerEpoch  int64  0+
    """)),
    (2, record("TopicRecord", "0", "0+", """
        name     string  0+
        topicId  uuid    0+
    """)),
    (3, record("PartitionRecord", "0-2", "0+", """
        partitionId             int32    0+  default=-1
        topicId                 uuid     0+
        replicas                []int32  0+
        isr                     []int32  0+
        removingReplicas        []int32  0+
        addingReplicas          []int32  0+
        leader                  int32    0+  default=-1
        leaderRecoveryState     int8     0+  tag=0@0+ default=0
        leaderEpoch             int32    0+  default=-1
        partitionEpoch          int32    0+  default=-1
        directories             []uuid   1+
        eligibleLeaderReplicas  []int32  2+  null=2+ tag=1@2+ default=null
        lastKnownElr            []int32  2+  null=2+ tag=2@2+ default=null
    """)),
    (4, record("ConfigRecord", "0", "0+", """
        resourceType  int8    0+
        resourceName  string  0+
        name          string  0+
        value         string  0+  null=0+
    """)),
    (5, record("PartitionChangeRecord", "0-2", "0+", """
        partitionId             int32    0+  default=-1
        topicId                 uuid     0+
        isr                     []int32  0+  null=0+ tag=0@0+ default=null
        leader                  int32    0+  tag=1@0+ default=-2
        replicas                []int32  0+  null=0+ tag=2@0+ default=null
        removingReplicas        []int32  0+  null=0+ tag=3@0+ default=null
        addingReplicas          []int32  0+  null=0+ tag=4@0+ default=null
        leaderRecoveryState     int8     0+  tag=5@0+ default=-1
        directories             []uuid   1+  null=1+ tag=8@1+ default=null
        eligibleLeaderReplicas  []int32  2+  null=2+ tag=6@2+ default=null
        lastKnownElr            []int32  2+  null=2+ tag=7@2+ default=null
    """)),
    (7, record("FenceBrokerRecord", "0", "0+", """
        id     int32  0+
        epoch  int64  0+
    """)),
    (8, record("UnfenceBrokerRecord", "0", "0+", """
        id     int32  0+
        epoch  int64  0+
    """)),
    (9, record("RemoveTopicRecord", "0", "0+", """
        topicId  uuid  0+
    """)),
    (10, record("DelegationTokenRecord", "0", "0+", """
        owner                string    0+
        requester            string    0+
        renewers             []string  0+
        issueTimestamp       int64     0+
        maxTimestamp         int64     0+
        expirationTimestamp  int64     0+
        tokenId              string    0+
    """)),
    (11, record("UserScramCredentialRecord", "0", "0+", """
        name        string  0+
        mechanism   int8    0+
        salt        bytes   0+
        storedKey   bytes   0+
        serverKey   bytes   0+
        iterations  int32   0+
    """)),
    (12, record("FeatureLevelRecord", "0", "0+", """
        name          string  0+
        featureLevel  int16   0+
    """)),
    (14, record("ClientQuotaRecord", "0", "0+", """
        entity  []EntityData 0+
          entityType  string  0+
          entityName  string  0+  null=0+
        key     string   0+
        value   float64  0+
        remove  bool     0+
    """)),
    (15, record("ProducerIdsRecord", "0", "0+", """
        brokerId        int32  0+
        brokerEpoch     int64  0+  default=-1
        nextProducerId  int64  0+
    """)),
    (17, record("BrokerRegistrationChangeRecord", "0-3", "0+", """
        brokerId              int32   0+
        brokerEpoch           int64   0+
        fenced                int8    0+  tag=0@0+
        inControlledShutdown  int8    1+  tag=1@1+
        logDirs               []uuid  2+  tag=2@2+
        cordonedLogDirs       []uuid  3+  null=3+ tag=3@3+ default=null
    """)),
    (18, record("AccessControlEntryRecord", "0", "0+", """
        id              uuid    0+
        resourceType    int8    0+
        resourceName    string  0+
        patternType     int8    0+
        principal       string  0+
        host            string  0+
        operation       int8    0+
        permissionType  int8    0+
    """)),
    (19, record("RemoveAccessControlEntryRecord", "0", "0+", """
        id  uuid  0+
    """)),
    (20, record("NoOpRecord", "0", "0+", "")),
    (21, record("ZkMigrationStateRecord", "0", "0+", """
        zkMigrationState  int8  0+
    """)),
    (22, record("RemoveUserScramCredentialRecord", "0", "0+", """
        name       string  0+
        mechanism  int8    0+
    """)),
    (23, record("BeginTransactionRecord", "0", "0+", """
        name  string  0+  null=0+ tag=0@0+ default=null
    """)),
    (24, record("EndTransactionRecord", "0", "0+", "")),
    (25, record("AbortTransactionRecord", "0", "0+", """
        reason  string  0+  null=0+ tag=0@0+ default=null
    """)),
    (26, record("RemoveDelegationTokenRecord", "0", "0+", """
        tokenId  string  0+
    """)),
    (27, record("RegisterControllerRecord", "0", "0+", """
        controllerId      int32  0+
        incarnationId     uuid   0+
        zkMigrationReady  bool   0+
    """ + _ENDPOINT_FEATURES.format(kind="Controller"))),
    (28, record("ClearElrRecord", "0", "0+", """
        topicName  string  0+
    """)),
    (29, record("UnregisterControllerRecord", "0", "0+", """
        controllerId  int32  0+
    """)),
)}

_VOTER = common("Voter", """
    voterId           int32  0+
    voterDirectoryId  uuid   1+
""")

# Control records by ControlRecordType name, and the version ControlRecordUtils reads each at.
CONTROL_RECORDS: dict[str, Message] = {
    "LEADER_CHANGE": record("LeaderChangeMessage", "0-1", "0+", """
        version         int16  0+
        leaderId        int32  0+
        voters          []Voter 0+
        grantingVoters  []Voter 0+
    """, {"Voter": _VOTER}),
    "SNAPSHOT_HEADER": record("SnapshotHeaderRecord", "0", "0+", """
        version                    int16  0+
        lastContainedLogTimestamp  int64  0+
    """),
    "SNAPSHOT_FOOTER": record("SnapshotFooterRecord", "0", "0+", """
        version  int16  0+
    """),
    "KRAFT_VERSION": record("KRaftVersionRecord", "0", "0+", """
        version       int16  0+
        kRaftVersion  int16  0+
    """),
    "KRAFT_VOTERS": record("VotersRecord", "0", "0+", """
        version  int16  0+
        voters   []Voter 0+
          voterId              int32  0+
          voterDirectoryId     uuid   0+
          endpoints            []Endpoint 0+
            name  string  0+
            host  string  0+
            port  uint16  0+
          kRaftVersionFeature  KRaftVersionFeature 0+
            minSupportedVersion  int16  0+
            maxSupportedVersion  int16  0+
    """),
}
CONTROL_VERSION = 0


class FramedRecord(NamedTuple):
    """A record of an ApiMessageAndVersion frame: its api key, type name, version and fields."""

    api_key: int
    type_name: str  # MetadataRecordType's name, e.g. PARTITION_CHANGE_RECORD
    version: int
    data: dict


def type_name(class_name: str) -> str:
    """MetadataRecordType's enum name for a record class: PartitionChangeRecord -> PARTITION_CHANGE_RECORD."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", class_name).upper()


def decode_frame(value: bytes | None, records: dict[int, Message], topic: str) -> FramedRecord:
    """One ApiMessageAndVersion frame, read as AbstractApiMessageSerde.read does (no trailing bytes)."""
    if value is None:
        raise MessageError(f"the record has no value (every {topic} record has one)")
    r = Reader(value)
    frame = r.uvarint()
    if frame != FRAME_VERSION:
        raise MessageError(f"unknown frame version {frame} (only frame version {FRAME_VERSION} is supported)")
    api_key = r.uvarint()
    version = r.uvarint()
    p = r.pos
    if api_key > 0x7FFF or version > 0x7FFF:
        raise MessageError(f"record type {api_key} or version {version} is too large")
    msg = records.get(api_key)
    if msg is None:
        raise UnknownRecordType(f"unknown {topic} record type {api_key} (known: "
                                f"{', '.join(str(k) for k in sorted(records))})")
    data, end = msg.read(value, version, p)
    if end != len(value):
        raise MessageError(f"found {len(value) - end} byte(s) of garbage after {msg.name}")
    return FramedRecord(api_key, type_name(msg.name), version, data)


def decode(value: bytes | None) -> FramedRecord:
    """A `__cluster_metadata` record's value, as MetadataRecordSerde reads it."""
    return decode_frame(value, METADATA_RECORDS, "__cluster_metadata")


def decode_control(kind: str, value: bytes | None) -> dict | None:
    """A raft control record's value (None for a type that holds none this decoder knows)."""
    msg = CONTROL_RECORDS.get(kind)
    if msg is None or value is None:
        return None
    data, _ = msg.read(value, CONTROL_VERSION)
    return data
