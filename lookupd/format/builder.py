"""Encoding record batches the way Kafka's MemoryRecordsBuilder does. No I/O.

The header fields follow MemoryRecordsBuilder so that an uncompressed batch re-encoded
from its records and batch metadata reproduces Kafka's bytes exactly:

* baseTimestamp is the first record's timestamp (or `base_timestamp`, as with a delete
  horizon); every record stores its timestamp as a delta from it, also in
  LogAppendTime batches, where the deltas keep the producer's create times.
* maxTimestamp is the largest record timestamp, starting from -1 (CreateTime), or the
  append time (LogAppendTime).
* lastOffsetDelta is the last record's offset minus the base offset.

Record items are ``(timestamp, key, value, headers)`` tuples or `Record`s. A Record
keeps its own offset; a tuple takes the offset after the previous record (the base
offset for the first), like MemoryRecordsBuilder.append.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Sequence

from .batch import (COMPRESSION_MASK, CONTROL_MASK, LOG_OVERHEAD, NO_PARTITION_LEADER_EPOCH, NO_PRODUCER_EPOCH,
                    NO_PRODUCER_ID, NO_SEQUENCE, NO_TIMESTAMP, TIMESTAMP_TYPE_MASK, TRANSACTIONAL_MASK,
                    V2_CRC_START, Compression, TimestampType, compute_crc)
from .compression import compress
from .records import Record

_V2_HEADER = struct.Struct(">qiibIhiqqqhii")
_LEGACY_PREFIX = struct.Struct(">qiI")  # offset, size, crc
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_ONE_BYTE = [bytes((b,)) for b in range(128)]
_INT32_MAX = (1 << 31) - 1


def _uvarint(v: int) -> bytes:
    if v < 0x80:
        return _ONE_BYTE[v]
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _varint(v: int) -> bytes:
    return _uvarint(((v << 1) ^ (v >> 31)) & 0xFFFFFFFF)


def _varlong(v: int) -> bytes:
    return _uvarint(((v << 1) ^ (v >> 63)) & 0xFFFFFFFFFFFFFFFF)


def _bytes_field(b: bytes | None) -> bytes:
    return _ONE_BYTE[1] if b is None else _varint(len(b)) + b


def _record(offset_delta: int, timestamp_delta: int, key, value, headers) -> bytes:
    """One DefaultRecord, length prefix included."""
    parts = [b"\x00", _varlong(timestamp_delta), _varint(offset_delta), _bytes_field(key), _bytes_field(value),
             _varint(len(headers))]
    for k, v in headers:
        kb = k.encode("utf-8")
        parts += [_varint(len(kb)), kb, _bytes_field(v)]
    body = b"".join(parts)
    return _varint(len(body)) + body


def _items(records: Iterable, base_offset: int, offsets: Sequence[int] | None) -> list[tuple]:
    """(offset, timestamp, key, value, headers) per record, offsets checked like appendWithOffset."""
    out = []
    previous = None
    for i, item in enumerate(records):
        if isinstance(item, Record):
            offset, (_, timestamp, key, value, headers) = item.offset, item
        else:
            timestamp, key, value, headers = item
            offset = base_offset if previous is None else previous + 1
        if offsets is not None:
            offset = offsets[i]
        if previous is not None and offset <= previous:
            raise ValueError(f"offset {offset} does not follow the previous offset {previous}")
        if not 0 <= offset - base_offset <= _INT32_MAX:
            raise ValueError(f"offset {offset} is not within an int32 delta of base offset {base_offset}")
        if timestamp < 0 and timestamp != NO_TIMESTAMP:
            raise ValueError(f"invalid negative timestamp {timestamp}")
        out.append((offset, timestamp, key, value, tuple(headers)))
        previous = offset
    if offsets is not None and len(offsets) != len(out):
        raise ValueError(f"{len(offsets)} offsets for {len(out)} records")
    return out


def build_batch(records: Iterable, *, base_offset: int, compression: Compression = Compression.NONE,
                timestamp_type: TimestampType = TimestampType.CREATE_TIME, max_timestamp: int | None = None,
                base_timestamp: int | None = None, offsets: Sequence[int] | None = None,
                producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
                base_sequence: int = NO_SEQUENCE, transactional: bool = False, control: bool = False,
                partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH) -> bytes:
    """A v2 record batch with a correct CRC32C.

    `max_timestamp` is the append time for LogAppendTime (required there); for
    CreateTime it overrides the computed maximum. `offsets` gives explicit absolute
    offsets (gaps allowed, as appendWithOffset).
    """
    items = _items(records, base_offset, offsets)
    log_append = TimestampType(timestamp_type) is TimestampType.LOG_APPEND_TIME
    if log_append and max_timestamp is None:
        raise ValueError("a LogAppendTime batch needs max_timestamp (the append time)")
    if base_timestamp is None:
        base_timestamp = items[0][1] if items else NO_TIMESTAMP
    if max_timestamp is None:
        max_timestamp = max([NO_TIMESTAMP, *(ts for _, ts, *_ in items)])
    body = b"".join(_record(o - base_offset, ts - base_timestamp, k, v, h) for o, ts, k, v, h in items)
    codec = Compression(compression)
    if codec is not Compression.NONE:
        body = compress(codec, body)
    attributes = (codec | (TIMESTAMP_TYPE_MASK if log_append else 0) | (TRANSACTIONAL_MASK if transactional else 0)
                  | (CONTROL_MASK if control else 0))
    last_delta = items[-1][0] - base_offset if items else 0
    header = _V2_HEADER.pack(base_offset, _V2_HEADER.size - LOG_OVERHEAD + len(body), partition_leader_epoch, 2, 0,
                             attributes, last_delta, base_timestamp, max_timestamp, producer_id, producer_epoch,
                             base_sequence, len(items))
    batch = bytearray(header + body)
    struct.pack_into(">I", batch, V2_CRC_START - 4, compute_crc(batch, 2))
    return bytes(batch)


def build_control_batch(offset: int, timestamp: int, *, producer_id: int, producer_epoch: int, commit: bool,
                        coordinator_epoch: int, partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH) -> bytes:
    """An end-transaction marker batch, as MemoryRecords.withEndTransactionMarker builds it."""
    key = struct.pack(">hh", 0, 1 if commit else 0)  # ControlRecordType key v0: COMMIT 1, ABORT 0
    value = struct.pack(">hi", 0, coordinator_epoch)  # EndTransactionMarker value v0
    return build_batch([(timestamp, key, value, ())], base_offset=offset, producer_id=producer_id,
                       producer_epoch=producer_epoch, transactional=True, control=True,
                       partition_leader_epoch=partition_leader_epoch)


def _legacy_message(offset: int, magic: int, attributes: int, timestamp: int, key, value) -> bytes:
    body = bytearray((magic, attributes))
    if magic == 1:
        body += _I64.pack(timestamp)
    for field in (key, value):
        body += _I32.pack(-1) if field is None else _I32.pack(len(field)) + field
    return _LEGACY_PREFIX.pack(offset, 4 + len(body), zlib.crc32(body)) + body


def build_legacy(messages: Iterable, *, magic: int, base_offset: int, compression: Compression = Compression.NONE,
                 timestamp_type: TimestampType = TimestampType.CREATE_TIME, log_append_time: int | None = None,
                 offsets: Sequence[int] | None = None) -> bytes:
    """A legacy (magic 0 or 1) message set: one message per record, or one compressed wrapper.

    Items are as for `build_batch`, with no headers. A magic 1 wrapper holds relative
    inner offsets and carries the last offset; LogAppendTime stamps every message with
    `log_append_time`, as MemoryRecordsBuilder does.
    """
    if magic not in (0, 1):
        raise ValueError(f"legacy messages have magic 0 or 1, not {magic}")
    codec = Compression(compression)
    if codec is Compression.ZSTD:
        raise ValueError(f"zstd compression is not supported for magic {magic}")
    log_append = magic == 1 and TimestampType(timestamp_type) is TimestampType.LOG_APPEND_TIME
    if log_append and log_append_time is None:
        raise ValueError("a LogAppendTime message set needs log_append_time")
    items = _items(messages, base_offset, offsets)
    if any(h for *_, h in items):
        raise ValueError(f"magic {magic} messages have no headers")
    if log_append:
        items = [(o, log_append_time, k, v, h) for o, _, k, v, h in items]
    ts_flag = TIMESTAMP_TYPE_MASK if log_append else 0
    if codec is Compression.NONE:
        return b"".join(_legacy_message(o, magic, ts_flag, ts, k, v) for o, ts, k, v, _ in items)
    if not items:
        raise ValueError("a compressed message set needs at least one message")
    relative = magic == 1
    inner = b"".join(_legacy_message(o - base_offset if relative else o, magic, ts_flag, ts, k, v)
                     for o, ts, k, v, _ in items)
    wrapper_ts = max([NO_TIMESTAMP, *(ts for _, ts, *_ in items)])
    value = compress(codec, inner, magic=magic)
    return _legacy_message(items[-1][0], magic, (codec & COMPRESSION_MASK) | ts_flag, wrapper_ts, None, value)
