"""Codec tests: round trips, the framings Kafka's Java client writes, and bad input."""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import random
import struct
import zlib

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reference as R
from lookupd.format._accel import python_only
from lookupd.format.batch import V2_HEADER_SIZE, Compression
from lookupd.format.compression import (LZ4_BLOCK_SIZE, MAX_DECOMPRESSED_SIZE, SNAPPY_BLOCK_SIZE, SNAPPY_MAGIC,
                                        _lz4_header_checksum, compress, decompress)
from lookupd.errors import CorruptRecordError

CODECS = list(Compression)
COMPRESSED = [c for c in Compression if c is not Compression.NONE]
POSITION = 987654


def _data(n: int) -> bytes:
    """Half-compressible bytes: text runs mixed with random bytes."""
    rnd = os.urandom(n // 4)
    text = (b"offset timestamp key value header batch segment " * (n // 40 + 1))[: n - len(rnd)]
    return bytes(x for pair in zip(text, rnd) for x in pair) + text[len(rnd):]


@settings(max_examples=60, deadline=None)
@given(codec=st.sampled_from(CODECS), data=st.binary(max_size=3000))
def test_round_trip(codec, data):
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("size", [0, 1, SNAPPY_BLOCK_SIZE, LZ4_BLOCK_SIZE + 1, 5 * LZ4_BLOCK_SIZE + 17])
def test_round_trip_across_blocks(codec, size):
    data = _data(size)
    assert decompress(codec, memoryview(compress(codec, data))) == data


def test_snappy_is_xerial_framed_in_32k_blocks():
    data = _data(3 * SNAPPY_BLOCK_SIZE + 5)
    out = compress(Compression.SNAPPY, data)
    assert out[:16] == SNAPPY_MAGIC + struct.pack(">ii", 1, 1)
    pos, blocks = 16, []
    while pos < len(out):
        (n,) = struct.unpack_from(">i", out, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(out[pos + 4:pos + 4 + n])))
        pos += 4 + n
    assert [len(b) for b in blocks] == [SNAPPY_BLOCK_SIZE] * 3 + [5]
    assert b"".join(blocks) == data


def test_snappy_raw_block_and_concatenated_streams():
    data = _data(50000)
    assert decompress(Compression.SNAPPY, bytes(cramjam.snappy.compress_raw(data))) == data
    assert decompress(Compression.SNAPPY, b"\x00") == b""  # the raw block of nothing
    two = compress(Compression.SNAPPY, b"first ") + compress(Compression.SNAPPY, b"second")
    assert decompress(Compression.SNAPPY, two) == b"first second"


def test_lz4_frame_is_what_kafka_reads():
    data = _data(2 * LZ4_BLOCK_SIZE + 3) + os.urandom(LZ4_BLOCK_SIZE)  # the random block is stored uncompressed
    out = compress(Compression.LZ4, data)
    assert struct.unpack_from("<I", out)[0] == 0x184D2204
    flg, bd = out[4], out[5]
    assert flg == 0x60 and bd == 0x40  # version 1, independent blocks, no checksums, 64 KiB blocks
    assert out[6] == _lz4_header_checksum(out[:6], broken=False)
    assert out[-4:] == b"\x00\x00\x00\x00"
    assert bytes(cramjam.lz4.decompress(out)) == data  # a stock LZ4 frame decoder agrees
    raw_flags = []
    pos = 7
    while (n := struct.unpack_from("<I", out, pos)[0]) != 0:
        raw_flags.append(bool(n & 0x80000000))
        pos += 4 + (n & 0x7FFFFFFF)
    assert True in raw_flags and False in raw_flags


def test_lz4_results_stay_theirs_after_later_frames():
    """Frames are decompressed through one reused buffer per thread: every result is a copy of its own,
    unchanged by the frames decompressed after it (big, small, in other threads)."""
    import threading

    datas = [_data(n) for n in (3 * LZ4_BLOCK_SIZE, 100, LZ4_BLOCK_SIZE + 7, 1)]
    got = [decompress(Compression.LZ4, compress(Compression.LZ4, d)) for d in datas]
    other = threading.Thread(target=lambda: decompress(Compression.LZ4, compress(Compression.LZ4, _data(5000))))
    other.start()
    other.join()
    decompress(Compression.LZ4, compress(Compression.LZ4, os.urandom(2 * LZ4_BLOCK_SIZE)))
    assert got == datas and all(type(g) is bytes for g in got)


def test_lz4_broken_header_checksum_of_old_kafka():
    data = _data(1000)
    broken = compress(Compression.LZ4, data, magic=0)
    assert broken[6] == _lz4_header_checksum(broken[:6], broken=True) != _lz4_header_checksum(broken[:6], False)
    assert decompress(Compression.LZ4, broken) == data
    bad = bytearray(broken)
    bad[6] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="checksum"):
        decompress(Compression.LZ4, bytes(bad), position=POSITION)


def test_lz4_frames_from_other_writers():
    data = _data(200000)
    # cramjam's streaming encoder with independent blocks sets block and content checksums
    c = cramjam.lz4.Compressor(block_linked=False, content_checksum=True)
    c.compress(data)
    framed = bytes(c.finish())
    assert framed[4] & 0x34 == 0x34
    assert decompress(Compression.LZ4, framed) == data
    # bytes after the end mark are ignored, as Lz4BlockInputStream does
    assert decompress(Compression.LZ4, compress(Compression.LZ4, data) + b"trailing") == data


def test_lz4_dependent_blocks_are_refused():
    """Like Kafka, which throws "Dependent block stream is unsupported" (cramjam's default frame is linked)."""
    with pytest.raises(CorruptRecordError, match="independent blocks") as e:
        decompress(Compression.LZ4, bytes(cramjam.lz4.compress(_data(200000))), position=POSITION)
    assert str(POSITION) in str(e.value)


def test_zstd_streaming_and_multi_frame():
    data = _data(300000)
    c = cramjam.zstd.Compressor()
    c.compress(data[:100000])
    c.compress(data[100000:])
    streamed = bytes(c.finish())
    assert streamed[4] & 0xE0 == 0  # frame header: no content size, as zstd-jni's streams
    assert decompress(Compression.ZSTD, streamed) == data
    skippable = struct.pack("<II", 0x184D2A50, 3) + b"abc"
    two = compress(Compression.ZSTD, b"one ") + skippable + compress(Compression.ZSTD, b"two")
    assert decompress(Compression.ZSTD, two) == b"one two"


def _kafka_written(codec: str) -> list[bytes]:
    """The compressed record sections of every reference batch of `codec` ("gzip", "zstd"), as Kafka wrote them."""
    out = []
    for p in R.PARTITIONS:
        for b in R.batches(p):
            if b["compression"] == codec:
                with open(R.log_dir(p) / f"{b['segment']:020d}.log", "rb") as f:
                    f.seek(b["position"])
                    out.append(f.read(b["size_in_bytes"])[V2_HEADER_SIZE:])
    return out


def _agree_on_kafka_written(codec: Compression, name: str, state: dict, rnd: random.Random) -> int:
    """Both paths decompress every Kafka-written batch of the codec, and give the same answer on a damaged copy
    of each; how many batches there were."""
    batches = _kafka_written(name)
    for data in batches:
        fast, reference = _fast_then_reference(codec, data, state)
        assert fast == reference and fast[0] == "ok"
        damaged = bytearray(data)
        damaged[rnd.randrange(len(damaged))] ^= 1 << rnd.randrange(8)
        fast, reference = _fast_then_reference(codec, bytes(damaged), state)
        assert fast == reference
    return len(batches)


def _fast_then_reference(codec: Compression, data: bytes, state: dict) -> list:
    """Python's `decompress` (`python_only()`) with the fast library switched on, then off (state["on"]):
    ("ok", bytes) or ("error", message)."""
    out = []
    for on in (True, False):
        state["on"] = on
        try:
            with python_only():
                out.append(("ok", decompress(codec, data, position=POSITION)))
        except CorruptRecordError as err:
            out.append(("error", str(err)))
    return out


@pytest.mark.parametrize("content_size", [True, False])
def test_zstd_one_frame_through_zstandard_as_cramjam(monkeypatch, content_size):
    """One frame (what Kafka's producer writes) goes to zstandard's per-thread context: the same bytes, or
    the same error, as the cramjam path alone (the reference, taken when zstandard is switched off)."""
    import zstandard
    from lookupd.format import compression

    real = compression._zstd_context.decompressor
    state = {"on": True, "used": 0}

    class Switch:
        def decompress(self, *args, **kwargs):
            if not state["on"]:
                raise zstandard.ZstdError("switched off: the cramjam path answers")
            state["used"] += 1
            return real.decompress(*args, **kwargs)

    monkeypatch.setattr(compression._zstd_context, "decompressor", Switch())

    def both(frame: bytes) -> list:
        return _fast_then_reference(Compression.ZSTD, frame, state)

    rnd = random.Random(4)
    _agree_on_kafka_written(Compression.ZSTD, "zstd", state, rnd)
    for size in (0, 1, 1000, 200_000):
        data = bytes(rnd.randrange(4) for _ in range(size))
        frame = zstandard.ZstdCompressor(write_content_size=content_size).compress(data)
        assert both(frame) == [("ok", data)] * 2
        for _ in range(20):
            damaged = bytearray(frame)
            damaged[rnd.randrange(len(damaged))] ^= 1 << rnd.randrange(8)
            native, reference = both(bytes(damaged))
            assert native == reference
    assert state["used"] >= 4


def test_gzip_through_isal_as_zlib(monkeypatch):
    """gzip goes to ISA-L: the same bytes, or the same error, as zlib alone (the reference, taken when isal
    is switched off), for Kafka-written batches and whole, multi-member, trailing-junk, damaged and cut streams."""
    from lookupd.format import compression

    isal = compression.isal_zlib
    assert isal is not None  # installed with the package: the fast path must be the one tested
    state = {"on": True, "used": 0}

    class Switch:
        error = isal.error

        @staticmethod
        def decompressobj(*args):
            if not state["on"]:
                raise isal.error("switched off: the zlib path answers")
            state["used"] += 1
            return isal.decompressobj(*args)

    monkeypatch.setattr(compression, "isal_zlib", Switch)

    def both(stream: bytes) -> list:
        return _fast_then_reference(Compression.GZIP, stream, state)

    rnd = random.Random(5)
    kafka = _agree_on_kafka_written(Compression.GZIP, "gzip", state, rnd)
    assert kafka >= 100  # compressed-0, txn-0 and logappend-0 hold Kafka-written gzip batches
    assert state["used"] >= kafka  # Java's plain member header: ISA-L took every one of them
    for size in (0, 1, 1000, 200_000):
        data = bytes(rnd.randrange(4) for _ in range(size))
        for stream in (gzip.compress(data), gzip.compress(data) + gzip.compress(b"more"), gzip.compress(data) + b"junk"):
            assert both(stream)[0] == both(stream)[1] and both(stream)[0][0] == "ok"
            for _ in range(20):
                damaged = bytearray(stream)
                damaged[rnd.randrange(len(damaged))] ^= 1 << rnd.randrange(8)
                fast, reference = both(bytes(damaged))
                assert fast == reference
            cut = stream[:rnd.randrange(len(stream))]
            assert both(cut)[0] == both(cut)[1]
    assert state["used"] >= 12


def test_gzip_members_and_trailing_bytes():
    assert decompress(Compression.GZIP, gzip.compress(b"a") + gzip.compress(b"b")) == b"ab"
    assert decompress(Compression.GZIP, gzip.compress(b"abc") + b"\x00junk") == b"abc"  # Java ignores it too


@pytest.mark.parametrize("codec", COMPRESSED)
def test_bombs_are_refused(codec):
    data = bytes(4_000_000)
    packed = compress(codec, data)
    assert decompress(codec, packed, max_size=len(data) + 300_000) == data
    with pytest.raises(CorruptRecordError, match="limit") as e:
        decompress(codec, packed, path="/x/0.log", position=POSITION, max_size=len(data) // 2)
    assert str(POSITION) in str(e.value) and codec.label in str(e.value)


def test_zstd_bomb_bound_without_content_size():
    c = cramjam.zstd.Compressor()
    c.compress(bytes(8_000_000))
    streamed = bytes(c.finish())
    assert len(streamed) < 2000
    with pytest.raises(CorruptRecordError, match="limit"):
        decompress(Compression.ZSTD, streamed, max_size=1_000_000)


@pytest.mark.parametrize("codec", COMPRESSED)
@pytest.mark.parametrize("garbage", [b"", b"\x01", b"garbage that is no codec's output", os.urandom(300)])
def test_garbage_raises_corrupt_record_error_with_position(codec, garbage):
    with pytest.raises(CorruptRecordError) as e:
        decompress(codec, garbage, path="/data/t-0/00000000000000000000.log", position=POSITION)
    assert e.value.position == POSITION
    assert str(POSITION) in str(e.value) and codec.label in str(e.value)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_truncated_output_raises(codec):
    packed = compress(codec, _data(100000))
    for cut in (len(packed) // 2, len(packed) - 1):
        with pytest.raises(CorruptRecordError):
            decompress(codec, packed[:cut], position=POSITION)


def test_unknown_codec_id():
    with pytest.raises(CorruptRecordError, match="unknown compression codec id 6") as e:
        decompress(6, b"x", position=POSITION)
    assert str(POSITION) in str(e.value)


@settings(max_examples=300, deadline=None)
@given(codec=st.sampled_from(COMPRESSED), data=st.binary(max_size=2000), flips=st.lists(
    st.tuples(st.integers(0, 10**6), st.integers(1, 255)), max_size=4), cut=st.integers(0, 10**6))
def test_mangled_payloads_never_escape_as_other_errors(codec, data, flips, cut):
    packed = bytearray(compress(codec, data))
    for where, xor in flips:
        packed[where % len(packed)] ^= xor
    if cut % 3 == 0:
        del packed[cut % (len(packed) + 1):]
    outcomes = []
    for native in (True, False):
        try:
            with contextlib.nullcontext() if native else python_only():
                outcomes.append(decompress(codec, bytes(packed), position=POSITION))
        except CorruptRecordError as e:
            assert str(POSITION) in str(e)
            outcomes.append(str(e))
    assert outcomes[0] == outcomes[1]  # the C codecs give the reference's bytes or leave the input to it


# The codecs called from C (lookupd/format/_codecs.c): a fast path that must give the reference's answer.


def _outcomes(codec: Compression, data: bytes, **kwargs) -> list:
    """`decompress` natively first, then by the reference alone: ("ok", bytes) or ("error", message) each."""
    out = []
    for native in (True, False):
        try:
            with contextlib.nullcontext() if native else python_only():
                out.append(("ok", decompress(codec, data, position=POSITION, **kwargs)))
        except CorruptRecordError as err:
            out.append(("error", str(err)))
    return out


def test_the_codec_libraries_are_found():
    """make test installs libdeflate, libsnappy and liblz4: the C path is the one these tests exercise."""
    from lookupd.format import _decode

    assert _decode.codecs() == {"gzip": True, "snappy": True, "lz4": True, "zstd": True}


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.label)
def test_native_codecs_take_kafka_written_batches_and_agree(codec):
    """Every Kafka-written batch of the codec in the corpus is decompressed in C to the reference's bytes;
    a damaged copy of each gets the reference's answer too (C declines it, or gives the same bytes)."""
    from lookupd.format import _decode

    batches = _kafka_written(codec.label)
    assert len(batches) >= 30
    rnd = random.Random(int(codec))
    for data in batches:
        with python_only():
            reference = decompress(codec, data)
        assert _decode.decompress(codec, data, MAX_DECOMPRESSED_SIZE) == reference
        for _ in range(3):
            damaged = bytearray(data)
            damaged[rnd.randrange(len(damaged))] ^= 1 << rnd.randrange(8)
            fast, ref = _outcomes(codec, bytes(damaged))
            assert fast == ref


def _generated(codec: Compression, rnd: random.Random) -> list[bytes]:
    """Streams of every form the reference reads, from Kafka's writer and others."""
    out = []
    for size in (0, 1, 1000, SNAPPY_BLOCK_SIZE + 1, 5 * LZ4_BLOCK_SIZE + 17):
        data = _data(size) if size % 2 else bytes(rnd.randrange(4) for _ in range(size))
        packed = compress(codec, data)
        out += [packed, packed + compress(codec, b"more")]
        if codec in (Compression.GZIP, Compression.LZ4):  # bytes after the end are ignored, as Java does
            out.append(packed + b"trailing")
    if codec is Compression.GZIP:
        named = io.BytesIO()  # a member header with a file name: zlib's, not the C path's
        with gzip.GzipFile("named.txt", "wb", fileobj=named, mtime=0) as f:
            f.write(_data(3000))
        out.append(named.getvalue())
    if codec is Compression.SNAPPY:
        out += [bytes(cramjam.snappy.compress_raw(_data(5000))), b"\x00"]
    if codec is Compression.LZ4:
        c = cramjam.lz4.Compressor(block_linked=False, content_checksum=True)
        c.compress(_data(200000))
        out += [bytes(c.finish()), compress(codec, _data(3000), magic=0)]
    if codec is Compression.ZSTD:
        c = cramjam.zstd.Compressor()
        c.compress(_data(300000))
        out += [bytes(c.finish()), struct.pack("<II", 0x184D2A50, 3) + b"abc" + compress(codec, b"x")]
    return out


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.label)
def test_native_codecs_agree_on_generated_damaged_and_cut_streams(codec):
    rnd = random.Random(7 + int(codec))
    refused = [bytes(cramjam.lz4.compress(_data(2000)))] if codec is Compression.LZ4 else []  # linked blocks
    for stream in _generated(codec, rnd) + refused:
        whole = _outcomes(codec, stream)
        assert whole[0] == whole[1] and (whole[0][0] == "ok") == (stream not in refused)
        for _ in range(15):
            damaged = bytearray(stream)
            for _ in range(rnd.randrange(1, 3)):
                damaged[rnd.randrange(len(damaged))] ^= 1 << rnd.randrange(8)
            fast, ref = _outcomes(codec, bytes(damaged))
            assert fast == ref
        for cut in (rnd.randrange(len(stream)), len(stream) - 1):
            fast, ref = _outcomes(codec, stream[:cut])
            assert fast == ref
        if whole[0][0] == "ok":  # over the caller's limit: the reference's error, from either path
            fast, ref = _outcomes(codec, stream, max_size=len(whole[0][1]) // 2)
            assert fast == ref


def test_gzip_is_real_gzip():
    assert zlib.decompress(compress(Compression.GZIP, b"kafka"), 16 + zlib.MAX_WBITS) == b"kafka"
