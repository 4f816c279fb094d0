"""Fetch (API key 1), versions 4-17, written by hand: the response goes out as pieces, with each partition's
records a `Region` of a segment file that the listener sends with sendfile where it can, so the bytes are
never copied through Python. Field layouts are those of FetchRequest.json and FetchResponse.json
(lookupd.kafka.messages declares them; tests check both codecs give the same bytes).
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from ..message import wire
from .messages import FETCH_REQUEST

MIN_VERSION, MAX_VERSION = 4, 17
FLEXIBLE = 12  # first flexible version
TOPIC_IDS = 13  # first version naming topics by id
READ_UNCOMMITTED, READ_COMMITTED = 0, 1

_HEAD_V7 = struct.Struct(">ihi")  # throttle time, error code, session id
_PARTITION = struct.Struct(">ihqqq")  # partition, error code, high watermark, last stable offset, log start offset
_PARTITION_V4 = struct.Struct(">ihqq")  # (no log start offset before v5)
_ABORTED = struct.Struct(">qq")
_I32 = struct.Struct(">i")
_NO_READ_REPLICA = _I32.pack(-1)


class Region(NamedTuple):
    """`size` bytes of an open file from `position`: a partition's records, sent from the file itself.
    `handle` keeps the descriptor open (its `fd`) until the response is written."""

    handle: Any
    position: int
    size: int

    def __len__(self) -> int:
        return self.size


class PartitionData(NamedTuple):
    partition: int
    error_code: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted: list[tuple[int, int]] | None = None  # (producer id, first offset); None: not read_committed
    records: bytes | Region = b""


class FetchPartition(NamedTuple):
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int


class FetchTopic(NamedTuple):
    topic: str  # "" where the request names it by id
    topic_id: bytes  # wire.ZERO_UUID where the request names it by name
    partitions: list[FetchPartition]


class FetchRequest(NamedTuple):
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int
    session_id: int
    session_epoch: int
    topics: list[FetchTopic]
    forgotten: int  # partitions the client asks a session to forget (none without sessions)


def decode_request(body: bytes, at: int, version: int) -> FetchRequest:
    """A Fetch request (MessageError if it breaks the schema). A consumer sends the same few shapes again and
    again: a legacy (non-flexible) version is read with precompiled structs (`_decode_legacy`); anything that
    path does not take is the schema codec's (`decode_request_reference`), which also names every fault."""
    if version < FLEXIBLE:
        found = _decode_legacy(body, at, version)
        if found is not None:
            return found
    return decode_request_reference(body, at, version)


def decode_request_reference(body: bytes, at: int, version: int) -> FetchRequest:
    """`decode_request` by the schema codec (lookupd.kafka.messages.FETCH_REQUEST): the answer of record."""
    d = FETCH_REQUEST.decode(body, version, at)
    topics = [FetchTopic(t["topic"], t["topic_id"],
                         [FetchPartition(p["partition"], p["fetch_offset"], p["partition_max_bytes"],
                                         p["current_leader_epoch"]) for p in t["partitions"]])
              for t in d["topics"]]
    forgotten = sum(len(t["partitions"]) for t in d["forgotten_topics_data"])
    return FetchRequest(d["max_wait_ms"], d["min_bytes"], d["max_bytes"], d["isolation_level"], d["session_id"],
                        d["session_epoch"], topics, forgotten)


# The legacy versions' fixed-size parts (FetchRequest.json, versions 4-11): the head after replica_id
# (max_wait_ms, min_bytes, max_bytes, isolation_level, and from v7 session_id, session_epoch), and a partition
# (partition, from v9 current_leader_epoch, fetch_offset, from v5 log_start_offset, partition_max_bytes).
_LEGACY_HEAD = struct.Struct(">iiiib")
_LEGACY_HEAD_V7 = struct.Struct(">iiiibii")
_LEGACY_PARTITIONS = {v: struct.Struct(">i" + ("i" if v >= 9 else "") + "q" + ("q" if v >= 5 else "") + "i")
                      for v in range(MIN_VERSION, FLEXIBLE)}
_I16 = struct.Struct(">h")
# Past this many topics and partitions in all, a request is left to the schema codec, whose item budget
# (lookupd.message.codec.MAX_ITEMS) then applies as to any message: the fast path never decodes more.
LEGACY_FAST_ITEMS = 1000


def _decode_legacy(body: bytes, at: int, version: int) -> FetchRequest | None:
    """A legacy Fetch request read with structs, or None where the bytes are anything but a well-formed
    request of at most LEGACY_FAST_ITEMS topics and partitions (the reference path then decodes it, or names
    what is wrong). Bytes after the request are left unread, as the codec leaves them."""
    try:
        if version >= 7:
            _, max_wait, min_bytes, max_bytes, isolation, session_id, session_epoch = \
                _LEGACY_HEAD_V7.unpack_from(body, at)
            at += _LEGACY_HEAD_V7.size
        else:
            _, max_wait, min_bytes, max_bytes, isolation = _LEGACY_HEAD.unpack_from(body, at)
            session_id, session_epoch = 0, -1
            at += _LEGACY_HEAD.size
        part = _LEGACY_PARTITIONS[version]
        part_size, with_epoch = part.size, version >= 9
        n_topics = _I32.unpack_from(body, at)[0]
        at += 4
        if not 0 <= n_topics <= LEGACY_FAST_ITEMS:
            return None
        items, topics = n_topics, []
        for _ in range(n_topics):
            n = _I16.unpack_from(body, at)[0]
            if n < 0 or at + 2 + n > len(body):
                return None
            name = str(body[at + 2:at + 2 + n], "utf-8", "replace")
            at += 2 + n
            n_parts = _I32.unpack_from(body, at)[0]
            at += 4
            items += n_parts
            if n_parts < 0 or items > LEGACY_FAST_ITEMS:
                return None
            parts = []
            for _ in range(n_parts):
                p = part.unpack_from(body, at)
                at += part_size
                parts.append(FetchPartition(p[0], p[2], p[-1], p[1]) if with_epoch else
                             FetchPartition(p[0], p[1], p[-1], -1))
            topics.append(FetchTopic(name, wire.ZERO_UUID, parts))
        forgotten = 0
        if version >= 7:
            n_forgotten = _I32.unpack_from(body, at)[0]
            at += 4
            if n_forgotten < 0:
                return None
            for _ in range(n_forgotten):
                n = _I16.unpack_from(body, at)[0]
                if n < 0:
                    return None
                at += 2 + n
                n_parts = _I32.unpack_from(body, at)[0]
                at += 4 + 4 * n_parts
                forgotten += n_parts
                items += 1 + n_parts
                if n_parts < 0 or at > len(body) or items > LEGACY_FAST_ITEMS:
                    return None
        if version >= 11:
            n = _I16.unpack_from(body, at)[0]
            if n < 0 or at + 2 + n > len(body):
                return None
    except struct.error:  # cut short: the reference path says where
        return None
    return FetchRequest(max_wait, min_bytes, max_bytes, isolation, session_id, session_epoch, topics, forgotten)


def encode_response(version: int, topics: list[tuple[str, bytes, list[PartitionData]]], *, error_code: int = 0,
                    session_id: int = 0) -> list:
    """The response body as pieces: bytes, and a Region per partition whose records come from a file.
    `topics`: (name, topic id, partitions) in the request's order."""
    flex = version >= FLEXIBLE
    out: list = []
    head = bytearray(_HEAD_V7.pack(0, error_code, session_id) if version >= 7 else _I32.pack(0))
    head += wire.length(len(topics), flex)
    for name, topic_id, partitions in topics:
        head += topic_id if version >= TOPIC_IDS else wire.string(name, flex)
        head += wire.length(len(partitions), flex)
        for p in partitions:
            if version >= 5:
                head += _PARTITION.pack(p.partition, p.error_code, p.high_watermark, p.last_stable_offset,
                                        p.log_start_offset)
            else:
                head += _PARTITION_V4.pack(p.partition, p.error_code, p.high_watermark, p.last_stable_offset)
            if p.aborted is None:
                head += wire.length(-1, flex)
            else:
                head += wire.length(len(p.aborted), flex)
                for pid, first in p.aborted:
                    head += _ABORTED.pack(pid, first)
                    if flex:
                        head += wire.NO_TAGS
            if version >= 11:
                head += _NO_READ_REPLICA
            records = p.records
            head += wire.length(len(records), flex)
            if records:  # its own piece: a Region is sent from its file, bytes without a copy into `head`
                out.append(bytes(head))
                out.append(records)
                head = bytearray()
            if flex:
                head += wire.NO_TAGS
        if flex:
            head += wire.NO_TAGS
    if flex:
        head += wire.NO_TAGS
    out.append(bytes(head))
    return out


def coalesced(parts: list) -> list:
    """A response's pieces with each run of bytes joined (one write each) and empty ones left out."""
    out: list = []
    pending: list[bytes] = []
    for p in parts:
        if isinstance(p, Region):
            if pending:
                out.append(b"".join(pending) if len(pending) > 1 else pending[0])
                pending = []
            out.append(p)
        elif p:
            pending.append(p)
    if pending:
        out.append(b"".join(pending) if len(pending) > 1 else pending[0])
    return out
