"""Records inside a batch: Kafka's DefaultRecord (v2) and legacy messages (v0/v1). No I/O.

`decode_batch` turns one batch's bytes into `Record`s the way iterating a Kafka
RecordBatch does; `find_timestamp` and `offset_of_max_timestamp` answer the two
timestamp questions Kafka asks of a batch without building a Record per record.

A v2 record (DefaultRecord), after the 61-byte batch header and any decompression::

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
    keyLength varint | key | valueLength varint | value |
    headerCount varint | [headerKeyLength varint | key (utf-8) | headerValueLength varint | value]...

Negative key/value lengths mean null. Varints are zig-zag encoded; like Kafka's
ByteUtils a varint takes at most 5 bytes and a varlong 10, and bits beyond 32 / 64
are dropped.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from .batch import (COMPRESSION_MASK, CONTROL_MASK, LOG_OVERHEAD, NO_TIMESTAMP, RECORD_OVERHEAD_V0, TIMESTAMP_TYPE_MASK,
                    V2_HEADER_SIZE, BatchHeader, Compression)
from .compression import decompress
from ..errors import INT64_MAX, INT64_MIN, CorruptRecordError

from . import _accel

Header = tuple[str, bytes | None]


class Record(NamedTuple):
    """One record as a consumer sees it: absolute offset, timestamp as Kafka reports it."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()

    is_control = False  # class attribute, not a field: ControlRecord overrides it


class ControlRecord(Record):
    """A record of a control batch (transaction marker, KRaft control record)."""

    __slots__ = ()
    is_control = True


class ControlMarker(NamedTuple):
    """A control record's type (ControlRecordType name) and, for COMMIT/ABORT, the coordinator epoch."""

    type: str
    coordinator_epoch: int | None


CONTROL_TYPES = {0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER", 4: "SNAPSHOT_FOOTER",
                 5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}

# Zig-zag value of every one-byte varint: the common case costs one tuple lookup.
_ZZ = tuple((b >> 1) ^ -(b & 1) for b in range(128))
_new_tuple = tuple.__new__
_CODECS = tuple(Compression)  # indexed by codec id: cheaper than calling the enum per batch
_I16_I16 = struct.Struct(">hh")
_I16_I32 = struct.Struct(">hi")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_OFFSET_SIZE = struct.Struct(">qi")  # the log overhead in front of every legacy message


class _Malformed(Exception):
    """A record-level fault, reported by the caller with the batch's position."""


def _varint(data: bytes, p: int) -> tuple[int, int]:
    """Zig-zag varint (int32) at `p`: (value, next position). The hot loops inline the short ones."""
    raw = 0
    for shift in range(0, 35, 7):
        b = data[p]
        p += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            raw &= 0xFFFFFFFF
            return (raw >> 1) ^ -(raw & 1), p
    raise _Malformed(f"varint at byte {p - 5} is longer than 5 bytes")


def _varlong(data: bytes, p: int) -> tuple[int, int]:
    """Zig-zag varlong (int64) at `p`: (value, next position)."""
    raw = 0
    for shift in range(0, 70, 7):
        b = data[p]
        p += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            raw &= 0xFFFFFFFFFFFFFFFF
            return (raw >> 1) ^ -(raw & 1), p
    raise _Malformed(f"varlong at byte {p - 10} is longer than 10 bytes")


def _parse_v2(data: bytes, count: int, base_offset: int, base_timestamp: int, fixed_timestamp: int | None,
              cls: type, path, position: int) -> list[Record]:
    """Decode `count` DefaultRecords that must fill `data` exactly.

    The hot loop: varints of one and two bytes are decoded inline, longer ones by
    `_varint`/`_varlong`; running off the end of `data` surfaces as IndexError.
    """
    n = len(data)
    p = 0
    i = 0
    out = []
    append = out.append
    new = _new_tuple  # tuple.__new__(Record, fields): a Record without a Python-level __new__ call
    zz = _ZZ
    try:
        for i in range(count):
            b = data[p]
            if b < 0x80:
                size = zz[b]
                p += 1
            else:
                c = data[p + 1]
                if c < 0x80:
                    x = (b & 0x7F) | (c << 7)
                    size = (x >> 1) ^ -(x & 1)
                    p += 2
                else:
                    size, p = _varint(data, p)
            end = p + size
            if end > n or size < 0:
                raise _Malformed(f"record size {size} but only {n - p} bytes remain")
            b = data[p + 1]  # after the attributes byte
            if b < 0x80:
                ts = zz[b]
                p += 2
            else:
                c = data[p + 2]
                if c < 0x80:
                    x = (b & 0x7F) | (c << 7)
                    ts = (x >> 1) ^ -(x & 1)
                    p += 3
                else:
                    ts, p = _varlong(data, p + 1)
            b = data[p]
            if b < 0x80:
                od = zz[b]
                p += 1
            else:
                od, p = _varint(data, p)
            b = data[p]
            if b < 0x80:
                kl = zz[b]
                p += 1
            else:
                kl, p = _varint(data, p)
            if kl >= 0:
                key = data[p:p + kl]
                p += kl
            else:
                key = None
            b = data[p]
            if b < 0x80:
                vl = zz[b]
                p += 1
            else:
                c = data[p + 1]
                if c < 0x80:
                    x = (b & 0x7F) | (c << 7)
                    vl = (x >> 1) ^ -(x & 1)
                    p += 2
                else:
                    vl, p = _varint(data, p)
            if vl >= 0:
                value = data[p:p + vl]
                p += vl
            else:
                value = None
            b = data[p]
            if b == 0:
                headers = ()
                p += 1
            else:
                if b < 0x80:
                    hc = zz[b]
                    p += 1
                else:
                    hc, p = _varint(data, p)
                if hc < 0 or hc > n - p:
                    raise _Malformed(f"invalid header count {hc}")
                hs = []
                for _ in range(hc):
                    b = data[p]
                    if b < 0x80:
                        hl = zz[b]
                        p += 1
                    else:
                        hl, p = _varint(data, p)
                    if hl < 0:
                        raise _Malformed(f"negative header key length {hl}")
                    hk = data[p:p + hl]
                    try:
                        hk = hk.decode()
                    except UnicodeDecodeError:  # Kafka reads keys as Java Strings: malformed UTF-8 is replaced
                        hk = hk.decode("utf-8", "replace")
                    p += hl
                    b = data[p]
                    if b < 0x80:
                        hl = zz[b]
                        p += 1
                    else:
                        hl, p = _varint(data, p)
                    if hl >= 0:
                        hs.append((hk, data[p:p + hl]))
                        p += hl
                    else:
                        hs.append((hk, None))
                headers = tuple(hs)
            if p != end:
                raise _Malformed(f"record size {size} but its fields take {size + p - end} bytes")
            append(new(cls, (base_offset + od, base_timestamp + ts if fixed_timestamp is None else fixed_timestamp,
                             key, value, headers)))
    except IndexError:
        raise CorruptRecordError(path, position, _cut_off(i, count, n)) from None
    except _Malformed as e:
        raise CorruptRecordError(path, position, f"record {i} of {count}: {e}") from None
    if p != n:
        raise CorruptRecordError(path, position, f"{n - p} bytes left after the batch's {count} records")
    return out


def _cut_off(i: int, count: int, n: int) -> str:
    return f"record {i} of {count} runs past the end of the {n} bytes of record data (truncated batch?)"


def _codec(header: BatchHeader, path) -> Compression:
    codec = header.attributes & COMPRESSION_MASK
    if codec >= len(_CODECS):
        raise CorruptRecordError(path, header.position, f"unknown compression codec id {codec}")
    return _CODECS[codec]


def _v2_records(header: BatchHeader, batch, path) -> bytes:
    """The record bytes of a v2 batch, decompressed."""
    codec = _codec(header, path)
    size = header.size
    if len(batch) < size:
        raise CorruptRecordError(path, header.position, f"batch of {size} bytes cut off after {len(batch)} bytes")
    if codec is Compression.NONE:
        body = batch[V2_HEADER_SIZE:size]
        return body if type(body) is bytes else bytes(body)
    return decompress(codec, memoryview(batch)[V2_HEADER_SIZE:size], path=path, position=header.position)


def native_v2(header: BatchHeader, records: bytes) -> tuple:
    """A v2 batch as the C decoder's functions (lookupd/format/_decode.c) take it: its record section
    (decompressed), record count, base offset, base timestamp, and LogAppendTime's stamp for every
    record with whether there is one."""
    fixed = header.attributes & TIMESTAMP_TYPE_MASK
    return (records, header.record_count, header.base_offset, header.base_timestamp,
            header.max_timestamp if fixed else 0, bool(fixed))


def decode_batch(header: BatchHeader, batch, *, path=None) -> list[Record]:
    """Every record of the batch whose bytes (from its first byte) are `batch`.

    Offsets and timestamps are as Kafka reports them: LogAppendTime batches give every
    record the batch max timestamp, legacy compressed wrappers give absolute offsets.
    Raises CorruptRecordError, naming the batch's position, for anything undecodable;
    the CRC is not checked here (that is `batch.ensure_valid`).
    """
    if header.magic < 2:
        return _decode_legacy(header, batch, path)
    if header.record_count == 0:  # Kafka returns no records without looking at the payload
        return []
    data = _v2_records(header, batch, path)
    fixed = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_MASK else None
    return _parse_v2(data, header.record_count, header.base_offset, header.base_timestamp, fixed,
                     ControlRecord if header.attributes & CONTROL_MASK else Record, path, header.position)


def _stamps_v2(header: BatchHeader, batch, path) -> list[tuple[int, int]]:
    """(offset, timestamp) of each record of a v2 batch, in batch order.

    Reads only each record's length, timestamp delta and offset delta, then jumps over
    the rest: keys, values and headers are neither copied nor checked.
    """
    count = header.record_count
    if count == 0:
        return []
    data = _v2_records(header, batch, path)
    base_offset, base_ts = header.base_offset, header.base_timestamp
    fixed = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_MASK else None
    n = len(data)
    p = 0
    i = 0
    out = []
    append = out.append
    zz = _ZZ
    try:
        for i in range(count):
            b = data[p]
            if b < 0x80:
                size = zz[b]
                p += 1
            else:
                c = data[p + 1]
                if c < 0x80:
                    x = (b & 0x7F) | (c << 7)
                    size = (x >> 1) ^ -(x & 1)
                    p += 2
                else:
                    size, p = _varint(data, p)
            end = p + size
            if end > n or size < 0:
                raise _Malformed(f"record size {size} but only {n - p} bytes remain")
            b = data[p + 1]
            if b < 0x80:
                ts = zz[b]
                p += 2
            else:
                c = data[p + 2]
                if c < 0x80:
                    x = (b & 0x7F) | (c << 7)
                    ts = (x >> 1) ^ -(x & 1)
                    p += 3
                else:
                    ts, p = _varlong(data, p + 1)
            b = data[p]
            if b < 0x80:
                od = zz[b]
                p += 1
            else:
                od, p = _varint(data, p)
            if p > end:
                raise _Malformed(f"record size {size} is too small for its fields")
            append((base_offset + od, base_ts + ts if fixed is None else fixed))
            p = end
    except IndexError:
        raise CorruptRecordError(path, header.position, _cut_off(i, count, n)) from None
    except _Malformed as e:
        raise CorruptRecordError(path, header.position, f"record {i} of {count}: {e}") from None
    return out


def _offsets_and_timestamps(header: BatchHeader, batch, path) -> list[tuple[int, int]]:
    if header.magic >= 2:
        return _stamps_v2(header, batch, path)
    return [(r.offset, r.timestamp) for r in _decode_legacy(header, batch, path)]


def find_timestamp(header: BatchHeader, batch, target_timestamp: int, starting_offset: int, *,
                   path=None) -> tuple[int, int] | None:
    """(timestamp, offset) of the first record, in batch order, with timestamp >= target and
    offset >= starting_offset; None if there is none (FileRecords.searchForTimestamp's inner loop).
    A v2 batch is scanned in C (`_accel.find_timestamp`) unless a reference path runs; the Python scan
    below does the rest, and any batch the C scan hands back, so it reports every fault."""
    if not _accel.mode.python and header.magic >= 2 and header.record_count > 0 and \
            INT64_MIN <= target_timestamp <= INT64_MAX and INT64_MIN <= starting_offset <= INT64_MAX:
        found = _accel.find_timestamp(*native_v2(header, _v2_records(header, batch, path)), target_timestamp,
                                      starting_offset)
        if found is not False:
            return found
    for offset, ts in _offsets_and_timestamps(header, batch, path):
        if ts >= target_timestamp and offset >= starting_offset:
            return ts, offset
    return None


def find_timestamp_fast(batch, target_timestamp: int, starting_offset: int) -> tuple[int, int, int | None] | None:
    """`find_timestamp` over one whole v2 batch (its bytes from its first), compressed or not, in one C call
    and without building its header: (timestamp, offset, partition leader epoch or None) when the C scan
    finds the record; None when the caller's full path must answer (no C extension, no match, any other
    batch, a codec form left to Python, or a fault to name)."""
    if not (INT64_MIN <= target_timestamp <= INT64_MAX and INT64_MIN <= starting_offset <= INT64_MAX):
        return None
    return _accel.find_timestamp_batch(batch, target_timestamp, starting_offset)


def offset_of_max_timestamp(header: BatchHeader, batch, *, path=None) -> int | None:
    """Offset of the first record whose timestamp is the batch max timestamp (RecordBatch.offsetOfMaxTimestamp).

    None for magic 0 batches and when no record carries it.
    """
    if header.magic == 0:
        return None
    target = header.max_timestamp
    for offset, ts in _offsets_and_timestamps(header, batch, path):
        if ts == target:
            return offset
    return None


def control_record(record: Record, *, path=None, position: int | None = None) -> ControlMarker:
    """Type of a control record (ControlRecordType key) and, for COMMIT/ABORT, its
    EndTransactionMarker coordinator epoch. Unknown type ids give "UNKNOWN", as in Kafka."""
    key, value = record.key, record.value
    if key is None or len(key) < 4:
        raise CorruptRecordError(path, position, f"control record at offset {record.offset} has a key shorter than 4 bytes")
    version, type_id = _I16_I16.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(path, position, f"control record at offset {record.offset} has key version {version}")
    kind = CONTROL_TYPES.get(type_id, "UNKNOWN")
    if kind not in ("ABORT", "COMMIT"):
        return ControlMarker(kind, None)
    if value is None or len(value) < 6:
        raise CorruptRecordError(path, position,
                                 f"end transaction marker at offset {record.offset} has a value shorter than 6 bytes")
    version, epoch = _I16_I32.unpack_from(value)
    if version < 0:
        raise CorruptRecordError(path, position,
                                 f"end transaction marker at offset {record.offset} has value version {version}")
    return ControlMarker(kind, epoch)


# Legacy (magic 0/1) message sets


def _legacy_message(mv: memoryview, start: int, end: int) -> tuple[int, int, int, bytes | None, bytes | None]:
    """(magic, attributes, timestamp, key, value) of the legacy message in mv[start:end] (after offset and size)."""
    magic = mv[start + 4]
    attributes = mv[start + 5]
    if magic > 1:
        raise _Malformed(f"legacy message with magic {magic}")
    p = start + 6
    timestamp = NO_TIMESTAMP
    if magic == 1:
        if p + 8 > end:
            raise _Malformed("legacy message timestamp runs past the message")
        timestamp = _I64.unpack_from(mv, p)[0]
        p += 8
    fields = []
    for what in ("key", "value"):
        if p + 4 > end:
            raise _Malformed(f"legacy message {what} length runs past the message")
        (n,) = _I32.unpack_from(mv, p)
        p += 4
        if n < 0:
            fields.append(None)
            continue
        if p + n > end:
            raise _Malformed(f"legacy message {what} of {n} bytes runs past the message")
        fields.append(mv[p:p + n].tobytes())
        p += n
    return magic, attributes, timestamp, fields[0], fields[1]


def _decode_legacy(header: BatchHeader, batch, path) -> list[Record]:
    position = header.position
    mv = memoryview(batch)
    if header.size < LOG_OVERHEAD + RECORD_OVERHEAD_V0:
        raise CorruptRecordError(path, position, f"message size {header.size - LOG_OVERHEAD} is below the "
                                                 f"minimum of {RECORD_OVERHEAD_V0}")
    if len(mv) < header.size:
        raise CorruptRecordError(path, position, f"message of {header.size} bytes cut off after {len(mv)} bytes")
    try:
        _, attributes, timestamp, key, value = _legacy_message(mv, LOG_OVERHEAD, header.size)
    except _Malformed as e:
        raise CorruptRecordError(path, position, str(e)) from None
    codec = _codec(header, path)
    if codec is Compression.NONE:
        return [Record(header.base_offset, timestamp, key, value)]
    if codec is Compression.ZSTD:
        raise CorruptRecordError(path, position, f"zstd compression is invalid for magic {header.magic}")
    if value is None:
        raise CorruptRecordError(path, position, "compressed message set wrapper with a null value")
    inner = memoryview(decompress(codec, value, path=path, position=position))
    log_append = header.magic == 1 and attributes & TIMESTAMP_TYPE_MASK
    entries = []
    p = 0
    n = len(inner)
    try:
        # A partial message at the end ends the set, as in Kafka's DataLogInputStream.
        while p + LOG_OVERHEAD <= n:
            offset, size = _OFFSET_SIZE.unpack_from(inner, p)
            if size < RECORD_OVERHEAD_V0:
                raise _Malformed(f"inner message size {size} is below the minimum of {RECORD_OVERHEAD_V0}")
            end = p + LOG_OVERHEAD + size
            if end > n:
                break
            magic, inner_attrs, ts, k, v = _legacy_message(inner, p + LOG_OVERHEAD, end)
            if inner_attrs & COMPRESSION_MASK:
                raise _Malformed("inner messages must not be compressed")
            if magic == 1 and log_append:
                ts = timestamp
            entries.append((offset, ts, k, v))
            p = end
    except _Malformed as e:
        raise CorruptRecordError(path, position, f"inner message {len(entries)}: {e}") from None
    if not entries:
        raise CorruptRecordError(path, position, "compressed message set with no inner messages")
    base = 0
    if header.magic == 1 and header.base_offset != 0:  # librdkafka may write wrapper offset 0: keep inner offsets
        last = entries[-1][0]
        if header.base_offset < last:
            raise CorruptRecordError(path, position, f"wrapper offset {header.base_offset} is below the last "
                                                     f"inner relative offset {last}")
        base = header.base_offset - last
    return [Record(base + o, ts, k, v) for o, ts, k, v in entries]


def legacy_offsets(header: BatchHeader, batch, *, path=None) -> tuple[int, int]:
    """(first offset, record count) of a legacy message or compressed wrapper.

    A wrapper's header only has its last offset; the first one needs decompression.
    """
    records = _decode_legacy(header, batch, path)
    return records[0].offset, len(records)
