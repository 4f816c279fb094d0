"""The consumer protocol embedded in classic groups' records: a member's subscription and assignment
(ConsumerProtocolSubscription / ConsumerProtocolAssignment, clients/src/main/resources/common/message/).
No I/O.

Both are an int16 version, then the message at that version. They are the clients' own bytes
inside a GroupMetadataValue, so one that does not decode is shown as the bytes it is, as
kafka-dump-log does, rather than as an error.
"""

from __future__ import annotations

from ...message import MessageError, read_prefixed
from . import record

SUBSCRIPTION = record("ConsumerProtocolSubscription", "0-3", "none", """
    topics           []string  0+
    userData         bytes     0+  null=0+ default=null
    ownedPartitions  []TopicPartition 1+
      topic       string   1+
      partitions  []int32  1+
    generationId     int32     2+  default=-1
    rackId           string    3+  null=3+ default=null
""")

ASSIGNMENT = record("ConsumerProtocolAssignment", "0-3", "none", """
    assignedPartitions  []TopicPartition 0+
      topic       string   0+
      partitions  []int32  0+
    userData            bytes  0+  null=0+ default=null
""")



def _decode(msg, data: bytes | None) -> dict | bytes | None:
    if not data or len(data) < 2:
        return data
    try:
        version, fields = read_prefixed(msg, data, msg.name)
    except MessageError:
        return data
    return {"version": version, **fields}


def decode_subscription(data: bytes | None) -> dict | bytes | None:
    """{version, topics, userData, ...}, or the bytes when they are not a subscription this decoder knows."""
    return _decode(SUBSCRIPTION, data)


def decode_assignment(data: bytes | None) -> dict | bytes | None:
    """{version, assignedPartitions, userData}, or the bytes when they are not an assignment it knows."""
    return _decode(ASSIGNMENT, data)
