"""ListOffsets (API key 2), versions 1-10, read and written by hand: a lookup by timestamp is a round trip
whose whole cost is these few bytes, so the generic codec's dicts (lookupd.message.codec, about 15 us a
request) would dominate it. Field layouts are those of ListOffsetsRequest.json and
ListOffsetsResponse.json (lookupd.kafka.messages declares them; tests check both codecs agree).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from ..message import wire
from ..message.wire import MessageError, Reader
from .messages import MAX_REQUEST_ITEMS

MIN_VERSION, MAX_VERSION = 1, 10
FLEXIBLE = 6

_I32_I8 = struct.Struct(">ib")
_PARTITION_V4 = struct.Struct(">iiq")  # partition, current leader epoch, timestamp
_PARTITION_V1 = struct.Struct(">iq")  # partition, timestamp
_ANSWER_V4 = struct.Struct(">ihqqi")  # partition, error code, timestamp, offset, leader epoch
_ANSWER_V1 = struct.Struct(">ihqq")
_THROTTLE = struct.Struct(">i").pack(0)


class Target(NamedTuple):
    partition: int
    current_leader_epoch: int
    timestamp: int


class ListOffsetsRequest(NamedTuple):
    replica_id: int
    isolation_level: int
    topics: list[tuple[str, list[Target]]]


class Answer(NamedTuple):
    partition: int
    error_code: int
    timestamp: int = -1
    offset: int = -1
    leader_epoch: int = -1


_ONE_HEAD = struct.Struct(">ibBB")  # replica id, isolation level, topics (compact: 1 + 1), name length + 1
_ONE_PARTITION = struct.Struct(">BiiqBBB")  # partitions (1 + 1), partition, epoch, timestamp, three empty tag sets
_ONE_FIXED = _ONE_HEAD.size + _ONE_PARTITION.size  # bytes besides the topic name


def decode_request(body: bytes, at: int, version: int) -> ListOffsetsRequest:
    """The request; MessageError if it breaks the schema. One topic with one partition at a flexible
    version before 10, what a lookup by timestamp sends, is read in two struct calls (`_decode` reads the rest)."""
    size = len(body) - at
    if FLEXIBLE <= version < 10 and size > _ONE_HEAD.size and size == _ONE_FIXED + body[at + 6] - 1:
        replica_id, isolation, topics, name_len = _ONE_HEAD.unpack_from(body, at)
        name_end = at + _ONE_HEAD.size + name_len - 1
        parts, p, epoch, ts, t1, t2, t3 = _ONE_PARTITION.unpack_from(body, name_end)
        if topics == 2 and 0 < name_len < 0x80 and parts == 2 and t1 == t2 == t3 == 0:
            name = str(body[at + _ONE_HEAD.size:name_end], "utf-8", "replace")  # as Kafka reads a string
            return ListOffsetsRequest(replica_id, isolation, [(name, [Target(p, epoch, ts)])])
    return _decode(body, at, version)


def _decode(body: bytes, at: int, version: int) -> ListOffsetsRequest:
    flex = version >= FLEXIBLE
    r = Reader(body, at)
    if version >= 2:
        replica_id, isolation = _I32_I8.unpack_from(body, r.take(5, "replica id and isolation level"))
    else:
        replica_id, isolation = r.int32(), 0
    items = 0
    topics = []
    part_size = _PARTITION_V4.size if version >= 4 else _PARTITION_V1.size
    for _ in range(r.count(flex, False, 2, "topics")):
        name = r.string(flex, False, "topic name")
        n = r.count(flex, False, part_size, "partitions")
        items += n + 1
        if items > MAX_REQUEST_ITEMS:
            raise MessageError(f"request holds more than {MAX_REQUEST_ITEMS} elements (MAX_REQUEST_ITEMS)")
        targets = []
        for _ in range(n):
            if version >= 4:
                p, epoch, ts = _PARTITION_V4.unpack_from(body, r.take(part_size, "partition"))
            else:
                (p, ts), epoch = _PARTITION_V1.unpack_from(body, r.take(part_size, "partition")), -1
            if flex:
                r.skip_tagged_fields()
            targets.append(Target(p, epoch, ts))
        if flex:
            r.skip_tagged_fields()
        topics.append((name, targets))
    if version >= 10:
        r.int32()  # timeout_ms: answers here never wait on the remote tier
    if flex:
        r.skip_tagged_fields()
    return ListOffsetsRequest(replica_id, isolation, topics)


def encode_response(version: int, topics: list[tuple[str, list[Answer]]]) -> bytes:
    flex = version >= FLEXIBLE
    out = [_THROTTLE] if version >= 2 else []
    out.append(wire.length(len(topics), flex))
    for name, answers in topics:
        out.append(wire.string(name, flex))
        out.append(wire.length(len(answers), flex))
        for a in answers:
            if version >= 4:
                out.append(_ANSWER_V4.pack(*a))
            else:
                out.append(_ANSWER_V1.pack(a.partition, a.error_code, a.timestamp, a.offset))
            if flex:
                out.append(wire.NO_TAGS)
        if flex:
            out.append(wire.NO_TAGS)
    if flex:
        out.append(wire.NO_TAGS)
    return b"".join(out)
