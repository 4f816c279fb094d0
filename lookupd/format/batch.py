"""Record batch headers: Kafka's v2 `RecordBatch` and legacy (magic 0/1) messages. No I/O.

Everything here takes a buffer and a position and returns plain values, so the same code
reads a `.log` chunk fetched with `pread`, the bytes the daemon's `read` returns, or a
test's hand-made bytes.

Layout facts (DefaultRecordBatch / LegacyRecord):

v2 batch, 61-byte header::

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 |
    crc uint32 (CRC32C of attributes..end) | attributes int16 | lastOffsetDelta int32 |
    baseTimestamp int64 | maxTimestamp int64 | producerId int64 | producerEpoch int16 |
    baseSequence int32 | recordCount int32 | records...

legacy message (a "shallow" batch: one message, or a compressed wrapper)::

    offset int64 | messageSize int32 | crc uint32 (CRC32 of magic..end) | magic int8 |
    attributes int8 | [timestamp int64 if magic 1] | key bytes | value bytes

`batchLength`/`messageSize` count the bytes after the 12-byte log overhead.
"""

from __future__ import annotations

import struct
import zlib
from enum import IntEnum
from typing import Iterator, NamedTuple

import crc32c as _crc32c

from . import _accel
from ..errors import CorruptRecordError

LOG_OVERHEAD = 12  # offset int64 + size int32 in front of every batch
MAGIC_OFFSET = 16
HEADER_SIZE_UP_TO_MAGIC = 17
RECORD_OVERHEAD_V0 = 14  # smallest legal size field (a v0 message with null key and value)
V2_HEADER_SIZE = 61
V2_CRC_START = 21  # CRC32C covers attributes .. end of batch
LEGACY_CRC_START = 16  # CRC32 covers magic .. end of message

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

_OFFSET_SIZE = struct.Struct(">qi")
_V2 = struct.Struct(">qiibIhiqqqhii")
_LEGACY_V0 = struct.Struct(">qiIbb")
_LEGACY_V1 = struct.Struct(">qiIbbq")
_LAST_OFFSET_DELTA = struct.Struct(">i")
_MAX_TIMESTAMP = struct.Struct(">q")
_COUNT = struct.Struct(">i")  # v2 record count, at byte 57
_CRC = struct.Struct(">I")  # v2 CRC32C, at byte 17

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40


class Compression(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @property
    def label(self) -> str:
        """The name Kafka uses (`compression.type`)."""
        return self.name.lower()


class TimestampType(IntEnum):
    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1

    @property
    def label(self) -> str:
        return {-1: "NoTimestampType", 0: "CreateTime", 1: "LogAppendTime"}[int(self)]


class BatchHeader(NamedTuple):
    """One batch as its header describes it, plus where it sits.

    For legacy compressed wrappers `base_offset` is the wrapper's offset (the last inner
    offset): the first inner offset is only known after decompression, see
    `records.legacy_offsets`. (A NamedTuple: building one is several times cheaper than a
    frozen dataclass, which matters for batches of one record.)
    """

    position: int
    base_offset: int
    last_offset: int
    size: int  # whole batch on disk, log overhead included
    magic: int
    crc: int
    attributes: int
    partition_leader_epoch: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int | None  # None for legacy compressed wrappers (known after decompression)

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression(self) -> Compression:
        try:
            return Compression(self.attributes & COMPRESSION_MASK)
        except ValueError:
            raise CorruptRecordError(
                None, self.position, f"unknown compression codec id {self.attributes & COMPRESSION_MASK}"
            ) from None

    @property
    def timestamp_type(self) -> TimestampType:
        if self.magic == 0:
            return TimestampType.NO_TIMESTAMP_TYPE
        return TimestampType(1 if self.attributes & TIMESTAMP_TYPE_MASK else 0)

    @property
    def is_transactional(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        # Kafka's DefaultRecordBatch.incrementSequence: wraps at Integer.MAX_VALUE.
        delta = self.last_offset - self.base_offset
        if self.base_sequence > 0x7FFFFFFF - delta:
            return delta - (0x7FFFFFFF - self.base_sequence) - 1
        return self.base_sequence + delta

    @property
    def has_producer_id(self) -> bool:
        return self.magic >= 2 and self.producer_id > NO_PRODUCER_ID

    @property
    def partition_leader_epoch_or_none(self) -> int | None:
        if self.magic < 2 or self.partition_leader_epoch == NO_PARTITION_LEADER_EPOCH:
            return None
        return self.partition_leader_epoch


def frame_size(buf, pos: int, end: int, file_position: int, path=None) -> int | None:
    """Size of the batch starting at `pos`, or None when no complete batch starts there.

    Mirrors FileLogInputStream.nextBatch: fewer than 17 bytes left or a batch that runs
    past `end` ends the iteration; a size smaller than the smallest legal message is
    corruption. `file_position` is where `pos` sits in the file, for error messages.
    """
    if pos >= end - HEADER_SIZE_UP_TO_MAGIC:
        return None
    size = _OFFSET_SIZE.unpack_from(buf, pos)[1]
    if size < RECORD_OVERHEAD_V0:
        raise CorruptRecordError(
            path, file_position,
            f"batch size {size} is smaller than the minimum record overhead {RECORD_OVERHEAD_V0}",
        )
    if pos > end - LOG_OVERHEAD - size:
        return None
    return size + LOG_OVERHEAD


def whole_frames(buf, position: int = 0, path=None, end: int | None = None) -> Iterator[tuple[int, int]]:
    """(offset in `buf`, size) of each complete batch at the front of `buf[:end]`.

    `buf` starts at file `position` (for error messages). Stops at the first batch that
    is not wholly in the buffer: callers that need it read again from there (see
    `lookupd.log.filerecords.read_frames`), callers given whole batches check that the
    frames reached the end.
    """
    if end is None:
        end = len(buf)
    off = 0
    while (size := frame_size(buf, off, end, position + off, path)) is not None:
        yield off, size
        off += size


def last_offset_at(buf, pos: int) -> int:
    """Last offset of the batch at `pos` from its first 27 bytes (v2) or 12 bytes (legacy)."""
    base = _OFFSET_SIZE.unpack_from(buf, pos)[0]
    if buf[pos + MAGIC_OFFSET] >= 2:
        return base + _LAST_OFFSET_DELTA.unpack_from(buf, pos + 23)[0]
    return base


def parse_header(buf, pos: int = 0, file_position: int | None = None, path=None) -> BatchHeader:
    """Parse the header of the batch at `pos`; `buf` must hold at least its header bytes."""
    where = pos if file_position is None else file_position
    avail = len(buf) - pos
    if avail < HEADER_SIZE_UP_TO_MAGIC:
        raise CorruptRecordError(path, where, f"only {avail} bytes left, a batch header needs {HEADER_SIZE_UP_TO_MAGIC}")
    magic = buf[pos + MAGIC_OFFSET]
    if magic >= 2:
        if magic > 2:
            raise CorruptRecordError(path, where, f"unknown magic {magic}")
        if avail < V2_HEADER_SIZE:
            raise CorruptRecordError(path, where, f"only {avail} bytes left, a v2 batch header needs {V2_HEADER_SIZE}")
        (base, length, epoch, _, crc, attrs, lod, base_ts, max_ts, pid, pepoch, bseq, count) = _V2.unpack_from(buf, pos)
        if length + LOG_OVERHEAD < V2_HEADER_SIZE:
            raise CorruptRecordError(
                path, where, f"v2 batch size {length + LOG_OVERHEAD} is smaller than its {V2_HEADER_SIZE}-byte header"
            )
        if count < 0:
            raise CorruptRecordError(path, where, f"negative record count {count}")
        return BatchHeader(where, base, base + lod, length + LOG_OVERHEAD, 2, crc, attrs & 0xFFFF, epoch,
                           base_ts, max_ts, pid, pepoch, bseq, count)
    if magic == 1:
        if avail < _LEGACY_V1.size:
            raise CorruptRecordError(path, where, f"only {avail} bytes left, a v1 message header needs {_LEGACY_V1.size}")
        offset, size, crc, _, attrs, ts = _LEGACY_V1.unpack_from(buf, pos)
    elif magic == 0:
        if avail < _LEGACY_V0.size:
            raise CorruptRecordError(path, where, f"only {avail} bytes left, a v0 message header needs {_LEGACY_V0.size}")
        offset, size, crc, _, attrs = _LEGACY_V0.unpack_from(buf, pos)
        ts = NO_TIMESTAMP
    else:
        raise CorruptRecordError(path, where, f"unknown magic {magic}")
    minimum = _LEGACY_V1.size if magic == 1 else _LEGACY_V0.size
    if size + LOG_OVERHEAD < minimum + 8:  # header plus the key and value length fields
        raise CorruptRecordError(path, where, f"message size {size} is below the minimum "
                                              f"{minimum + 8 - LOG_OVERHEAD} for a v{magic} message")
    attrs &= 0xFF
    compressed = attrs & COMPRESSION_MASK != 0
    return BatchHeader(where, offset, offset, size + LOG_OVERHEAD, magic, crc, attrs, NO_PARTITION_LEADER_EPOCH,
                       ts, ts, NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE, None if compressed else 1)


def compute_crc(batch, magic: int, size: int | None = None) -> int:
    """The checksum Kafka stores for a whole batch: CRC32C (v2) or CRC32 (legacy).

    `batch` starts at the batch's first byte; only its first `size` bytes are covered.
    """
    mv = memoryview(batch)[:size]
    if magic >= 2:
        return _crc32c.crc32c(mv[V2_CRC_START:])
    return zlib.crc32(mv[LEGACY_CRC_START:]) & 0xFFFFFFFF


def ensure_valid(header: BatchHeader, batch, path=None) -> None:
    """Raise CorruptRecordError unless the stored checksum matches the batch bytes."""
    computed = compute_crc(batch, header.magic, header.size)
    if computed != header.crc:
        raise CorruptRecordError(
            path, header.position,
            f"record batch is corrupt (stored crc = {header.crc}, computed crc = {computed})",
        )


def sound_v2_last_offset(buf, pos: int, size: int) -> int | None:
    """The last offset of the v2 batch of `size` bytes at `pos` when `parse_header` and `ensure_valid`
    would both accept it (its size holds a header, its record count is not negative, its CRC32C
    matches), in a few operations; None otherwise, for them to say what is wrong."""
    if buf[pos + MAGIC_OFFSET] != 2 or size < V2_HEADER_SIZE or _COUNT.unpack_from(buf, pos + 57)[0] < 0:
        return None
    if _crc32c.crc32c(memoryview(buf)[pos + V2_CRC_START:pos + size]) != _CRC.unpack_from(buf, pos + 17)[0]:
        return None
    return last_offset_at(buf, pos)


def whole_batches(buf, position: int, path=None) -> tuple[int, int]:
    """(bytes of whole batches at the front of `buf`, next offset after them, -1 when none is whole),
    each batch's checksum checked: `read` never hands out a batch whose bytes were damaged on disk.
    `buf` starts at file `position` (for error messages). Sound v2 batches are passed in one C call
    (`_accel.sound_batches`); any other is parsed and checked in full, which names its fault
    (`whole_batches_reference`)."""
    if not _accel.mode.python:
        found = _accel.sound_batches(buf)
        if found is not None:
            return found[0], (found[1] + 1 if found[0] else -1)
    return whole_batches_reference(buf, position, path)


def whole_batches_reference(buf, position: int, path=None) -> tuple[int, int]:
    """`whole_batches` in Python alone: a sound v2 batch in a few operations, any other in full."""
    whole, next_offset = 0, -1
    for off, size in whole_frames(buf, position, path):
        last = sound_v2_last_offset(buf, off, size)
        if last is None:
            header = parse_header(buf, off, position + off, path)
            ensure_valid(header, memoryview(buf)[off:off + size], path)
            last = header.last_offset
        whole, next_offset = off + size, last + 1
    return whole, next_offset


def max_timestamp_at(buf, pos: int) -> int:
    """Batch max timestamp without building a header (v2 field, v1 message timestamp, v0: -1)."""
    magic = buf[pos + MAGIC_OFFSET]
    if magic >= 2:
        return _MAX_TIMESTAMP.unpack_from(buf, pos + 35)[0]
    if magic == 1:
        return _MAX_TIMESTAMP.unpack_from(buf, pos + 18)[0]
    return NO_TIMESTAMP
