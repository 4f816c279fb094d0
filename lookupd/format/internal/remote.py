"""`__remote_log_metadata`: the tiered-storage metadata records (RemoteLogMetadataSerde). No I/O.

Key-less records whose values are ApiMessageAndVersion frames, as in `__cluster_metadata` (see
`metadata.decode_frame`); the tables are storage/src/main/resources/message/*.json of the 4.x line's newest.
States are RemoteLogSegmentState and RemotePartitionDeleteState by id.
"""

from __future__ import annotations

from ...message import Message, common
from . import record
from .metadata import FramedRecord, decode_frame

_TOPIC_ID_PARTITION = common("TopicIdPartitionEntry", """
    name       string  0+
    id         uuid    0+
    partition  int32   0+
""")
_SEGMENT_ID = common("RemoteLogSegmentIdEntry", """
    topicIdPartition  TopicIdPartitionEntry 0+
    id                uuid  0+
""", {"TopicIdPartitionEntry": _TOPIC_ID_PARTITION})
_COMMON = {"TopicIdPartitionEntry": _TOPIC_ID_PARTITION, "RemoteLogSegmentIdEntry": _SEGMENT_ID}
_LEADER_EPOCHS = """
    segmentLeaderEpochs  []SegmentLeaderEpochEntry 0+
      leaderEpoch  int32  0+
      offset       int64  0+
"""

REMOTE_LOG_METADATA_RECORDS: dict[int, Message] = {
    0: record("RemoteLogSegmentMetadataRecord", "0", "0+", """
    remoteLogSegmentId  RemoteLogSegmentIdEntry 0+
    startOffset         int64  0+
    endOffset           int64  0+
    brokerId            int32  0+
    maxTimestampMs      int64  0+
    eventTimestampMs    int64  0+
""" + _LEADER_EPOCHS + """
    segmentSizeInBytes     int32  0+
    customMetadata         bytes  0+  null=0+ default=null
    remoteLogSegmentState  int8   0+
    txnIndexEmpty          bool   0+  tag=0
""", _COMMON),
    1: record("RemoteLogSegmentMetadataUpdateRecord", "0", "0+", """
    remoteLogSegmentId     RemoteLogSegmentIdEntry 0+
    brokerId               int32  0+
    eventTimestampMs       int64  0+
    customMetadata         bytes  0+  null=0+ default=null
    remoteLogSegmentState  int8   0+
""", _COMMON),
    2: record("RemotePartitionDeleteMetadataRecord", "0", "0+", """
    topicIdPartition            TopicIdPartitionEntry 0+
    brokerId                    int32  0+
    eventTimestampMs            int64  0+
    remotePartitionDeleteState  int8   0+
""", _COMMON),
    3: record("RemoteLogSegmentMetadataSnapshotRecord", "0", "0+", """
    segmentId              uuid   0+
    startOffset            int64  0+
    endOffset              int64  0+
    brokerId               int32  0+
    maxTimestampMs         int64  0+
    eventTimestampMs       int64  0+
""" + _LEADER_EPOCHS + """
    segmentSizeInBytes     int32  0+
    customMetadata         bytes  0+  null=0+ default=null
    remoteLogSegmentState  int8   0+
    txnIndexEmpty          bool   0+  tag=0
"""),
}

SEGMENT_STATES = ("COPY_SEGMENT_STARTED", "COPY_SEGMENT_FINISHED", "DELETE_SEGMENT_STARTED", "DELETE_SEGMENT_FINISHED")
PARTITION_DELETE_STATES = ("DELETE_PARTITION_MARKED", "DELETE_PARTITION_STARTED", "DELETE_PARTITION_FINISHED")


def decode(value: bytes | None) -> FramedRecord:
    """A `__remote_log_metadata` record's value, as RemoteLogMetadataSerde reads it."""
    return decode_frame(value, REMOTE_LOG_METADATA_RECORDS, "__remote_log_metadata")
