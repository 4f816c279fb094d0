"""Kafka's record compression codecs: bytes in, bytes out, no I/O.

Each codec reads what Kafka's Java client reads and writes what it would accept:

* gzip: one or more gzip members (java.util.zip.GZIPInputStream); bytes after the
  last complete member that do not start another member are ignored, as Java does.
  Inflated by ISA-L (`isal`, about 1.7x zlib's speed on Kafka's small batches); zlib,
  whose answer and message are the reference, takes over on any error, and does it all
  where isal is not installed.
* snappy: the xerial stream snappy-java's SnappyOutputStream writes (an 8-byte magic,
  version and compatible version int32s, then ``[int32 BE length][raw snappy block]``
  chunks, concatenated streams allowed) or, when the magic is absent, one raw snappy
  block, which SnappyInputStream also falls back to.
* lz4: one LZ4 frame as Kafka's Lz4BlockInputStream reads it: independent blocks only,
  version 1, block size 64 KiB .. 4 MiB, optional content size skipped. The header
  checksum may be the correct one or the "broken" one old Kafka wrote for magic 0
  (hashed from the frame magic on); Kafka skips the check for magic 0 and wants the
  correct one otherwise, this accepts either for any magic. Block and content
  checksums are skipped, not verified (Kafka checks only the former; the batch CRC
  covers both anyway); bytes after the end mark are ignored, as in Kafka.
* zstd: one or more zstd frames, with or without a content size (zstd-jni's streaming
  frames have none); skippable frames are allowed. A batch of one frame (what Kafka's
  producer writes) is decompressed by `zstandard` with a context kept per thread: cramjam
  makes a new one per call, which costs 10 us, more than decompressing a small batch.
  Anything else, and any error, goes to cramjam, whose answer and message are the reference.

Native first: where the C extension is built and finds the codec libraries (libdeflate,
libsnappy, liblz4; zstd through `zstandard`, as here; `lookupd/format/_codecs.c`), the
common forms above are decompressed there, with no Python around each batch. Everything
else, and any fault, comes here, whose answer and message are the reference
(within `_accel.python_only()` this path alone).

Decompression bombs: the decompressed size is bounded before any output is allocated
(a snappy block declares its size, an lz4 block holds at most the frame's block size,
a zstd block at most 128 KiB unless the frame declares its size; gzip is inflated with
a cap) and anything that may exceed `max_size` is refused. The default is Kafka's
own hard limit, Integer.MAX_VALUE: MemoryRecordsBuilder counts uncompressed bytes in
an int, so no Kafka producer can write a bigger batch.
"""

from __future__ import annotations

import functools
import struct
import threading
import zlib

import cramjam
import zstandard

try:
    from isal import isal_zlib
except ImportError:  # no wheel for this platform: zlib inflates everything
    isal_zlib = None

from .batch import Compression
from ..errors import CorruptRecordError

from . import _accel  # the codec libraries called from C: the fast path, tried first

MAX_DECOMPRESSED_SIZE = (1 << 31) - 1

SNAPPY_MAGIC = b"\x82SNAPPY\x00"
SNAPPY_BLOCK_SIZE = 32 * 1024  # snappy-java's SnappyOutputStream default block size
_SNAPPY_HEADER = SNAPPY_MAGIC + struct.pack(">ii", 1, 1)  # version 1, compatible version 1
_SNAPPY_CONCAT = struct.unpack(">i", SNAPPY_MAGIC[:4])[0]  # a chunk length that is really a new header

LZ4_MAGIC = 0x184D2204
LZ4_BLOCK_SIZE = 64 * 1024  # Lz4BlockOutputStream.BLOCKSIZE_64KB
_LZ4_FLG = 0x60  # version 1, independent blocks, no checksums, no content size
_LZ4_BD = 0x40  # block maximum size 64 KiB
_LZ4_UNCOMPRESSED = 0x80000000

_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_BLOCK_MAX = 128 * 1024

GZIP_LEVEL = 6  # Deflater.DEFAULT_COMPRESSION, Kafka's default gzip level
ZSTD_LEVEL = 3  # Kafka's default zstd level

_U32LE = struct.Struct("<I")
_I32BE = struct.Struct(">i")


class _Bad(Exception):
    """A codec-level fault, turned into CorruptRecordError by `decompress`."""


def decompress(codec: Compression, data, *, path=None, position: int | None = None,
               max_size: int = MAX_DECOMPRESSED_SIZE) -> bytes:
    """Decompress a batch's records (v2) or a legacy wrapper's value.

    `path` and `position` (the batch's byte position in its file) only go into the
    CorruptRecordError raised for any undecodable input or output over `max_size`.
    Within `_accel.python_only()` the C fast path is skipped: the reference alone.
    """
    if type(codec) is not Compression:  # a member already skips the enum's lookup (half a microsecond)
        try:
            codec = Compression(codec)
        except ValueError:
            raise CorruptRecordError(path, position, f"unknown compression codec id {codec}") from None
    if codec is Compression.NONE:
        return bytes(data)
    if not _accel.mode.python:
        out = _accel.decompress(codec, data, max_size)
        if out is not None:
            return out
    try:
        if codec is Compression.GZIP:
            return _gunzip(data, max_size)
        if codec is Compression.SNAPPY:
            return _unsnappy(memoryview(data), max_size)
        if codec is Compression.LZ4:
            return _unlz4(memoryview(data), max_size)
        return _unzstd(memoryview(data), max_size)
    except (_Bad, cramjam.DecompressionError, zlib.error, ValueError, OverflowError) as e:
        raise CorruptRecordError(path, position, f"cannot decompress {codec.label} records: {e}") from None


def compress(codec: Compression, data, *, magic: int = 2) -> bytes:
    """Compress like Kafka's producer: xerial snappy, Kafka's LZ4 frame, gzip, zstd.

    `magic` 0 makes the LZ4 header checksum the broken one Kafka writes for v0 messages.
    """
    codec = Compression(codec)
    if codec is Compression.NONE:
        return bytes(data)
    if codec is Compression.GZIP:
        c = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        return c.compress(data) + c.flush()
    if codec is Compression.SNAPPY:
        return _snappy(memoryview(data))
    if codec is Compression.LZ4:
        return _lz4(memoryview(data), broken_checksum=magic == 0)
    return bytes(cramjam.zstd.compress(data, level=ZSTD_LEVEL))


def _check_size(size: int, max_size: int, codec: str) -> None:
    """Refuse output of (at most, for lz4 and zstd) `size` bytes if that is over `max_size`."""
    if size > max_size:
        raise _Bad(f"{codec} data may decompress to {size} bytes, more than the {max_size}-byte limit")


# gzip


_GZIP_PLAIN = b"\x1f\x8b\x08\x00"  # magic, deflate, no flags: the member header Java's GZIPOutputStream writes


def _gunzip(data, max_size: int) -> bytes:
    if isal_zlib is not None:
        try:
            return _gunzip_with(isal_zlib, data, max_size)
        except (_Bad, isal_zlib.error, ValueError, OverflowError):
            pass  # zlib's answer below names what is wrong, as the reference always has
    return _gunzip_with(zlib, data, max_size)


def _gunzip_with(inflater, data, max_size: int) -> bytes:
    out = []
    total = 0
    rest = data
    while True:
        if inflater is not zlib and rest[:4] != _GZIP_PLAIN:
            raise _Bad("a member header with flags: zlib judges it")  # ISA-L is laxer there (reserved flags)
        d = inflater.decompressobj(16 + zlib.MAX_WBITS)
        chunk = d.decompress(rest, max_size - total + 1)
        total += len(chunk)
        _check_size(total, max_size, "gzip")
        out.append(chunk)
        if not d.eof:
            raise _Bad("gzip stream ends before its end of data")
        rest = d.unused_data
        if rest[:2] != b"\x1f\x8b":
            return b"".join(out)


# snappy (xerial framing or one raw block)


def _unsnappy(mv: memoryview, max_size: int) -> bytes:
    if mv[:8] != SNAPPY_MAGIC:
        _check_size(cramjam.snappy.decompress_raw_len(mv), max_size, "snappy")
        return bytes(cramjam.snappy.decompress_raw(mv))
    pos = len(_SNAPPY_HEADER)
    if len(mv) < pos:
        raise _Bad("xerial snappy header cut off")
    if _I32BE.unpack_from(mv, 8)[0] < 1:
        raise _Bad("xerial snappy stream of an incompatible version")
    chunks = []
    total = 0
    end = len(mv)
    while end - pos >= 4:  # snappy-java ends the stream at a partial length field
        (n,) = _I32BE.unpack_from(mv, pos)
        if n == _SNAPPY_CONCAT:  # another stream's header: snappy-java carries on or, if it is not one, stops
            if mv[pos:pos + 8] != SNAPPY_MAGIC:
                break
            pos += len(_SNAPPY_HEADER)
            continue
        pos += 4
        if n < 0 or pos + n > end:
            raise _Bad(f"xerial snappy chunk of {n} bytes at byte {pos - 4} runs past the {end}-byte stream")
        block = mv[pos:pos + n]
        total += cramjam.snappy.decompress_raw_len(block)
        _check_size(total, max_size, "snappy")
        chunks.append(bytes(cramjam.snappy.decompress_raw(block)))
        pos += n
    return b"".join(chunks)


def _snappy(mv: memoryview) -> bytes:
    out = [_SNAPPY_HEADER]
    for i in range(0, len(mv), SNAPPY_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(mv[i:i + SNAPPY_BLOCK_SIZE]))
        out.append(_I32BE.pack(len(block)))
        out.append(block)
    return b"".join(out)


# lz4 frame


def _xxh32(data: bytes) -> int:
    """XXH32 with seed 0 of fewer than 16 bytes (the LZ4 descriptor is at most 14)."""
    p1, p2, p3, p4, p5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
    mask = 0xFFFFFFFF
    n = len(data)
    h = (p5 + n) & mask
    i = 0
    while i + 4 <= n:
        h = (h + _U32LE.unpack_from(data, i)[0] * p3) & mask
        h = (((h << 17) | (h >> 15)) & mask) * p4 & mask
        i += 4
    for b in data[i:]:
        h = (h + b * p5) & mask
        h = (((h << 11) | (h >> 21)) & mask) * p1 & mask
    h = ((h ^ (h >> 15)) * p2) & mask
    h = ((h ^ (h >> 13)) * p3) & mask
    return h ^ (h >> 16)


@functools.lru_cache(maxsize=64)  # a producer writes the same few descriptors; XXH32 in Python costs a microsecond
def _lz4_header_checksum(header: bytes, broken: bool) -> int:
    """Second byte of XXH32 over the descriptor; Kafka's old v0 writer hashed from the frame magic on."""
    return (_xxh32(header if broken else header[4:]) >> 8) & 0xFF


class _Lz4Scratch(threading.local):
    """A thread's buffer that lz4 blocks are decompressed into before the result is copied out: a new
    bytearray per frame is zeroed first, 64 KiB for a one-block batch, which took longer than the block's
    decompression. Frames bounded above SCRATCH_KEPT get a buffer of their own, not kept."""

    SCRATCH_KEPT = 1 << 20

    def __init__(self):
        self._buf = bytearray()

    def buffer(self, size: int) -> bytearray:
        if size > self.SCRATCH_KEPT:
            return bytearray(size)
        if len(self._buf) < size:
            self._buf = bytearray(max(size, 64 << 10))
        return self._buf


_lz4_scratch = _Lz4Scratch()


def _unlz4(mv: memoryview, max_size: int) -> bytes:
    end = len(mv)
    if end < 7:
        raise _Bad(f"lz4 frame of {end} bytes is shorter than a frame header")
    if _U32LE.unpack_from(mv, 0)[0] != LZ4_MAGIC:
        raise _Bad("not an lz4 frame (bad magic)")
    flg, bd = mv[4], mv[5]
    if flg & 0x03 or flg >> 6 != 1 or not flg & 0x20:
        raise _Bad(f"unsupported lz4 frame flags 0x{flg:02x} (Kafka needs version 1, independent blocks)")
    if bd & 0x8F or not 4 <= (bd >> 4) & 7 <= 7:
        raise _Bad(f"invalid lz4 block descriptor 0x{bd:02x}")
    max_block = 1 << (2 * ((bd >> 4) & 7) + 8)
    pos = 14 if flg & 0x08 else 6
    if end < pos + 1:
        raise _Bad("lz4 frame header cut off")
    header = bytes(mv[:pos])
    hc = mv[pos]
    if hc != _lz4_header_checksum(header, False) and hc != _lz4_header_checksum(header, True):
        raise _Bad("lz4 frame descriptor checksum mismatch")
    pos += 1
    block_checksum = 4 if flg & 0x10 else 0
    blocks = []
    bound = 0
    while True:
        if end - pos < 4:
            raise _Bad("lz4 frame ends without an end mark")
        (size,) = _U32LE.unpack_from(mv, pos)
        pos += 4
        if size == 0:
            break
        raw = size & _LZ4_UNCOMPRESSED
        size &= ~_LZ4_UNCOMPRESSED
        if size > max_block:
            raise _Bad(f"lz4 block of {size} bytes exceeds the frame's {max_block}-byte block size")
        if pos + size + block_checksum > end:
            raise _Bad("lz4 block cut off")
        blocks.append((pos, size, raw))
        bound += size if raw else max_block
        pos += size + block_checksum
    _check_size(bound, max_size, "lz4")
    ov = memoryview(_lz4_scratch.buffer(bound))
    n = 0
    for start, size, raw in blocks:
        if raw:
            ov[n:n + size] = mv[start:start + size]
            n += size
        else:
            n += cramjam.lz4.decompress_block_into(mv[start:start + size], ov[n:n + max_block])
    return ov[:n].tobytes()


def _lz4(mv: memoryview, broken_checksum: bool) -> bytes:
    header = _U32LE.pack(LZ4_MAGIC) + bytes((_LZ4_FLG, _LZ4_BD))
    out = [header, bytes((_lz4_header_checksum(header, broken_checksum),))]
    for i in range(0, len(mv), LZ4_BLOCK_SIZE):
        block = mv[i:i + LZ4_BLOCK_SIZE]
        packed = bytes(cramjam.lz4.compress_block(block, store_size=False))
        if len(packed) >= len(block):  # incompressible: stored as is, as Lz4BlockOutputStream does
            out += [_U32LE.pack(len(block) | _LZ4_UNCOMPRESSED), bytes(block)]
        else:
            out += [_U32LE.pack(len(packed)), packed]
    out.append(_U32LE.pack(0))
    return b"".join(out)


# zstd


def _zstd_bound(mv: memoryview) -> tuple[int, int]:
    """(most bytes the zstd frames in `mv` can decompress to, from frame and block headers, how many
    frames there are, skippable ones included)."""
    end = len(mv)
    pos = 0
    bound = 0
    frames = 0
    while pos < end:
        if end - pos < 4:
            raise _Bad("trailing bytes after the last zstd frame")
        (magic,) = _U32LE.unpack_from(mv, pos)
        frames += 1
        if magic & 0xFFFFFFF0 == 0x184D2A50:  # skippable frame
            if end - pos < 8:
                raise _Bad("zstd skippable frame cut off")
            pos += 8 + _U32LE.unpack_from(mv, pos + 4)[0]
            continue
        if magic != _ZSTD_MAGIC:
            raise _Bad(f"not a zstd frame (magic 0x{magic:08x})")
        if end - pos < 5:
            raise _Bad("zstd frame header cut off")
        fhd = mv[pos + 4]
        fcs_flag, single, checksum, dict_flag = fhd >> 6, fhd & 0x20, fhd & 0x04, fhd & 0x03
        fcs_size = (1 if single else 0, 2, 4, 8)[fcs_flag]
        pos += 5 + (0 if single else 1) + (0, 1, 2, 4)[dict_flag]
        content = None
        if fcs_size:
            if pos + fcs_size > end:
                raise _Bad("zstd frame header cut off")
            content = int.from_bytes(mv[pos:pos + fcs_size], "little") + (256 if fcs_size == 2 else 0)
        pos += fcs_size
        blocks = 0
        while True:
            if end - pos < 3:
                raise _Bad("zstd block header cut off")
            h = int.from_bytes(mv[pos:pos + 3], "little")
            kind, size = (h >> 1) & 3, h >> 3
            pos += 3
            if kind == 3:
                raise _Bad("reserved zstd block type")
            blocks += size if kind < 2 else _ZSTD_BLOCK_MAX
            pos += 1 if kind == 1 else size
            if h & 1:
                break
        pos += 4 if checksum else 0
        if pos > end:
            raise _Bad("zstd frame cut off")
        bound += blocks if content is None else content
    return bound, frames


class _ZstdContext(threading.local):
    """A zstandard decompressor per thread (one may not be used by two threads at once)."""

    def __init__(self):
        self.decompressor = zstandard.ZstdDecompressor()


_zstd_context = _ZstdContext()


def _zstd_frame(mv, bound: int) -> bytes:
    """One zstd frame of at most `bound` bytes decompressed by this thread's context (also called from C,
    `_codecs.c`, so both paths use this one library)."""
    return _zstd_context.decompressor.decompress(mv, max_output_size=bound)


def _unzstd(mv: memoryview, max_size: int) -> bytes:
    bound, frames = _zstd_bound(mv)
    _check_size(bound, max_size, "zstd")
    # zstandard answers a frame declaring no content (size 0) with b"" unread, even a corrupt one: cramjam judges it.
    if frames == 1 and bound > 0 and _U32LE.unpack_from(mv, 0)[0] == _ZSTD_MAGIC:
        try:
            return _zstd_frame(mv, bound)
        except zstandard.ZstdError:
            pass  # cramjam's error below names what is wrong, as the reference always has
    return bytes(cramjam.zstd.decompress(mv))
