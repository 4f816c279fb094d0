"""The native columnar decoder against the reference decoder: same records, same errors.

Both paths of lookupd.format.columnar (the C walker and `records.decode_batch` through the same
columns) run on every batch of the Kafka reference corpus, on generated batches of every codec
and shape, and on corrupted batches, and must agree column for column, or raise the same error.
"""

from __future__ import annotations

import contextlib
import os
import random
import struct

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import reference as R
from damage import damaged
from lookupd.errors import CorruptRecordError
from lookupd.format import columnar
from lookupd.format._accel import python_only
from lookupd.format.batch import Compression, TimestampType, parse_header
from lookupd.format.builder import build_batch, build_control_batch
from lookupd.format.columnar import ColumnBuilder
from lookupd.format.records import decode_batch

pytestmark = pytest.mark.skipif(not columnar.NATIVE and os.environ.get("CI") is None,
                                reason="the C extension lookupd.format._decode is not built here")

pa = pytest.importorskip("pyarrow")
HEADERS = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))


def columns(buf: bytes, native: bool, path="t.log"):
    b = ColumnBuilder(True)
    with contextlib.nullcontext() if native else python_only():  # the C decoder, or the reference's
        end = b.add_frames(buf, 0, path)
    facts = {k: v.tolist() for k, v in b.facts().items()}
    return end, {k: v.to_pylist() for k, v in b.arrays(HEADERS).items()}, facts


def outcome(buf: bytes, native: bool):
    try:
        return columns(buf, native)
    except CorruptRecordError as err:
        return type(err), str(err)


def reference_rows(buf: bytes) -> list[tuple]:
    """Records as decode_batch gives them, control batches left out, as columns do."""
    out, pos = [], 0
    while pos + 61 <= len(buf):
        h = parse_header(buf, pos)
        if not (h.magic >= 2 and h.is_control):
            for r in decode_batch(h, buf[pos:pos + h.size]):
                out.append((r.offset, r.timestamp, r.key, r.value,
                            [{"key": k, "value": v} for k, v in r.headers] or None))
        pos += h.size
    return out


def test_the_native_decoder_is_built():
    """CI builds the extension (make test installs with a compiler): the fast path must be the one tested."""
    assert columnar.NATIVE


@pytest.mark.parametrize("partition", R.PARTITIONS)
def test_every_reference_batch_decodes_alike(partition):
    for path in sorted(R.log_dir(partition).glob("*.log")):
        buf = path.read_bytes()
        native, ref = columns(buf, True), columns(buf, False)
        assert native == ref, path
        end, cols, _ = native
        assert end == len(buf)
        rows = list(zip(cols["offset"], cols["timestamp"], cols["key"], cols["value"], cols["headers"]))
        assert rows == reference_rows(buf), path


records = st.lists(st.tuples(st.integers(0, 2**40), st.one_of(st.none(), st.binary(max_size=40)),
                             st.one_of(st.none(), st.binary(max_size=200)),
                             st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=16))),
                                      max_size=3)),
                   min_size=1, max_size=20)
batch_kinds = st.sampled_from(["plain", "gzip", "snappy", "lz4", "zstd", "log-append", "transactional", "control"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(records, batch_kinds), min_size=1, max_size=6))
def test_generated_batches_decode_alike(batches):
    buf, offset = b"", 0
    for recs, kind in batches:
        items = [(ts, k, v, tuple(h)) for ts, k, v, h in recs]
        if kind == "control":
            buf += build_control_batch(offset, 5, producer_id=7, producer_epoch=0, commit=True, coordinator_epoch=1)
            offset += 1
            continue
        codec = {"gzip": Compression.GZIP, "snappy": Compression.SNAPPY, "lz4": Compression.LZ4,
                 "zstd": Compression.ZSTD}.get(kind, Compression.NONE)
        extra = {"timestamp_type": TimestampType.LOG_APPEND_TIME, "max_timestamp": 99} if kind == "log-append" else {}
        if kind == "transactional":
            extra = {"producer_id": 7, "producer_epoch": 0, "transactional": True}
        buf += build_batch(items, base_offset=offset, compression=codec, **extra)
        offset += len(items)
    native, ref = columns(buf, True), columns(buf, False)
    assert native == ref
    _, cols, _ = native
    assert list(zip(cols["offset"], cols["timestamp"], cols["key"], cols["value"], cols["headers"])) == \
        reference_rows(buf)


def test_columns_grow_for_batches_that_decompress_to_many_times_their_size():
    # Batches that decompress to 20-200 times their size outgrow the room reserved for the bytes
    # given, in the middle of a call: the columns grow then (keeping what is written), again and
    # again, also after earlier calls filled them. Both paths must give the same columns.
    buf, offset, cuts = b"", 0, []
    for i, codec in enumerate([Compression.NONE, Compression.GZIP, Compression.ZSTD, Compression.NONE,
                               Compression.LZ4, Compression.SNAPPY, Compression.GZIP] * 2):
        recs = [(5000 + offset + r, b"k%d" % r if r % 3 else None, bytes([65 + i]) * (200 + 1000 * (r % 4)),
                 (("h", b"v" * 300),) if r % 2 else ()) for r in range(150)]
        buf += build_batch(recs, base_offset=offset, compression=codec)
        offset += len(recs)
        cuts.append(len(buf))
    builders = {native: ColumnBuilder(True) for native in (True, False)}
    for native, b in builders.items():
        start = 0
        for end in cuts[::3] + [len(buf)]:  # several calls, each adding to the columns of the last
            with contextlib.nullcontext() if native else python_only():
                assert b.add_frames(buf, 0, "t.log", start, end) == end
            start = end
    got = {native: {k: v.to_pylist() for k, v in b.arrays(HEADERS).items()} for native, b in builders.items()}
    assert got[True] == got[False]
    assert len(got[True]["offset"]) == offset
    assert columns(buf, True) == columns(buf, False)


def _sample_batch() -> bytes:
    recs = [(1000 + i, b"key-%d" % i, b"value-%d" % i, (("h", b"x"),)) for i in range(8)]
    return build_batch(recs, base_offset=100)


def _recrc(batch: bytearray) -> bytearray:
    batch[17:21] = struct.pack(">I", crc32c.crc32c(bytes(batch[21:])))
    return batch


def corruptions():
    good = _sample_batch()
    out = {}
    b = bytearray(good)
    b[-2] ^= 0xFF
    out["bad crc"] = bytes(b)
    cut = bytearray(good[:-5])
    cut[8:12] = struct.pack(">i", len(cut) - 12)
    out["cut records"] = bytes(_recrc(cut))
    b = bytearray(good)
    b[61:66] = b"\xff\xff\xff\xff\xff"  # a varint longer than 5 bytes
    out["bad varint"] = bytes(_recrc(b))
    for name, count in (("count too high", 9), ("count too low", 7), ("negative count", -1)):
        b = bytearray(good)
        b[57:61] = struct.pack(">i", count)
        out[name] = bytes(_recrc(b))
    b = bytearray(good)
    b[61] = 0x7E  # record length 63: more than the record holds
    out["oversize record length"] = bytes(_recrc(b))
    b = bytearray(good)
    b[8:12] = struct.pack(">i", 5)
    out["batch size too small"] = bytes(b)
    return out


@pytest.mark.parametrize("name,buf", list(corruptions().items()), ids=list(corruptions()))
def test_corrupt_batches_give_the_same_error(name, buf):
    got = outcome(good_prefix() + buf, True)
    assert got == outcome(good_prefix() + buf, False)
    assert got[0] is CorruptRecordError, (name, got)
    assert "t.log at byte" in got[1], got


def good_prefix() -> bytes:
    return build_batch([(1, b"k", b"v", ())], base_offset=0)


def test_random_damage_never_disagrees():
    """Bytes flipped, cut or inserted anywhere (the CRC recomputed half the time, so the decoder sees
    the damage): the two paths give the same columns or the same error."""
    rnd = random.Random(5)
    base = good_prefix() + _sample_batch() + build_batch([(5, None, b"z" * 300, ())], base_offset=200,
                                                         compression=Compression.GZIP)
    for _ in range(2000):
        b = damaged(rnd, base, 4)
        if rnd.random() < 0.5 and len(b) > 61 + 21:  # fix the first damaged batch's CRC, if it still frames
            try:
                h = parse_header(b, 0)
                if 61 <= h.size <= len(b):
                    b[17:21] = struct.pack(">I", crc32c.crc32c(bytes(b[21:h.size])))
            except CorruptRecordError:
                pass
        assert outcome(bytes(b), True) == outcome(bytes(b), False)


def test_crc32c_matches_the_crc32c_package():
    from lookupd.format import _decode

    rnd = random.Random(3)
    # Around the three-stream rounds of the hardware path (3 x 512 bytes) and their tails.
    for n in (0, 1, 7, 8, 9, 63, 64, 1000, 1535, 1536, 1537, 1543, 1544, 3071, 3072, 3080, 4609, 65537):
        data = bytes(rnd.randrange(256) for _ in range(n))
        assert _decode.crc32c(data) == crc32c.crc32c(data), n
        assert _decode.crc32c(bytes(n)) == crc32c.crc32c(bytes(n)), n
        assert _decode.crc32c(b"\xff" * n) == crc32c.crc32c(b"\xff" * n), n


def test_aborted_records_are_masked_out():
    """read_committed: a transactional batch inside an aborted transaction of its producer is dropped."""
    buf = (build_batch([(1, b"a", b"1", ())], base_offset=0, producer_id=7, producer_epoch=0, transactional=True)
           + build_batch([(2, b"b", b"2", ())], base_offset=1, producer_id=8, producer_epoch=0, transactional=True)
           + build_batch([(3, b"c", b"3", ())], base_offset=2)
           + build_batch([(4, b"d", b"4", ())], base_offset=3, producer_id=7, producer_epoch=0, transactional=True))
    b = ColumnBuilder(False)
    b.add_frames(buf, 0)
    keep = b.aborted_mask({7: [(0, 2)]})
    assert keep.tolist() == [False, True, True, True]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 255), max_size=70), st.lists(st.integers(-3, 3), max_size=70),
       st.lists(st.tuples(st.integers(0, 7), st.integers(0, 40)), max_size=12))
def test_bitmaps_and_flags_in_c_equal_their_numpy_references(flags, steps, batches):
    """The Arrow validity bitmaps and the per-record timestamp type come from C where the extension is
    built; the numpy versions (no compiler) must give the same bytes and counts."""
    from lookupd.format import _decode

    flags = bytes(flags)
    assert _decode.validity_bitmap(flags) == columnar.validity_bitmap_reference(flags)
    assert _decode.validity_bitmap(bytearray(flags)) == columnar.validity_bitmap_reference(flags)
    ends = [0]
    for step in steps:  # list offsets; a step back (never written by the decoder) is an empty list too
        ends.append(ends[-1] + step)
    ends = struct.pack(f"={len(ends)}i", *ends)
    assert _decode.nonempty_bitmap(ends) == columnar.nonempty_bitmap_reference(ends)
    facts = b"".join(struct.pack("=6q", 100 * i, i, i, -1, flag, count) for i, (flag, count) in enumerate(batches))
    for flag in (columnar.FLAG_LOG_APPEND_TIME, columnar.FLAG_TRANSACTIONAL):
        assert _decode.spread_flag(facts, flag) == columnar.spread_flag_reference(facts, flag)
        assert _decode.spread_flag(bytearray(facts), flag) == columnar.spread_flag_reference(facts, flag)


def test_bitmap_and_flag_helpers_refuse_malformed_input():
    from lookupd.format import _decode

    for bad in (b"", b"\0\0\0", b"\0" * 9):
        with pytest.raises(ValueError, match="int32 offset"):
            _decode.nonempty_bitmap(bad)
    with pytest.raises(ValueError, match="six int64"):
        _decode.spread_flag(b"\0" * 47, 2)
    with pytest.raises(ValueError, match="record count out of range"):
        _decode.spread_flag(struct.pack("=6q", 0, 0, 0, 0, 2, -1), 2)
    with pytest.raises(ValueError, match="record count out of range"):
        _decode.spread_flag(struct.pack("=6q", 0, 0, 0, 0, 2, 1 << 62) * 2, 2)
    with pytest.raises(TypeError):
        _decode.validity_bitmap("text")
    wraps = struct.pack("=3i", 2**31 - 1, -2**31, 5)  # int32 differences would wrap: the second list is empty
    assert _decode.nonempty_bitmap(wraps) == columnar.nonempty_bitmap_reference(wraps) == (b"\x02", 1)
