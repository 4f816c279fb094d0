"""Record codec tests: Kafka's own batches decode to Kafka's answers, re-encode byte for
byte, round-trip through every codec, and bad bytes fail as CorruptRecordError."""

from __future__ import annotations

import base64
import struct
import zlib
from collections import Counter
from itertools import accumulate

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reference as R
from lookupd.format.batch import Compression, TimestampType, compute_crc, ensure_valid, parse_header
from lookupd.format.builder import build_batch, build_control_batch, build_legacy
from lookupd.format.compression import compress
from lookupd.errors import CorruptRecordError
from lookupd.format.records import (ControlRecord, Record, control_record, decode_batch, find_timestamp, legacy_offsets,
                             offset_of_max_timestamp)

POSITION = 4242  # where test batches pretend to sit in their file
DATA_PARTITIONS = ["plain-0", "compressed-0", "ooo-time-0", "txn-0", "bigbase-0", "logappend-0", "closed-0"]


def _b64(x):
    return None if x is None else base64.b64decode(x)


def corpus_batches(partition):
    """(reference batch dict, header, bytes) of every batch of a reference partition."""
    files = {}
    for b in R.batches(partition):
        path = R.log_dir(partition) / f"{b['segment']:020d}.log"
        if path not in files:
            files[path] = path.read_bytes()
        data = files[path][b["position"]:b["position"] + b["size_in_bytes"]]
        yield b, parse_header(data, 0, b["position"], path), data


def parse(batch: bytes, position: int = POSITION):
    return parse_header(batch, 0, position)


def decode(batch: bytes) -> list[Record]:
    return decode_batch(parse(batch), batch, path="/logs/t-0/00000000000000000000.log")


def with_crc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, 17, compute_crc(batch, 2))
    return bytes(batch)


# Kafka's batches


@pytest.mark.parametrize("partition", DATA_PARTITIONS)
def test_corpus_decodes_to_kafkas_records(partition):
    want = [(r["offset"], r["timestamp"], _b64(r["key"]), _b64(r["value"]),
             tuple((k, _b64(v)) for k, v in r["headers"])) for r in R.answers(partition)["records"]]
    got = []
    for b, h, data in corpus_batches(partition):
        ensure_valid(h, data)
        records = decode_batch(h, data, path="x")
        assert len(records) == b["record_count"]
        assert all(r.is_control == b["is_control"] for r in records)
        got += records
    assert got == want


def test_large_corpus_offsets_and_timestamps():
    R.require()
    n = 0
    for b, h, data in corpus_batches("large-0"):
        (r,) = decode_batch(h, data)
        assert (r.offset, r.timestamp) == (b["base_offset"], b["max_timestamp"])
        n += 1
    assert n == 200025


def test_control_records_of_txn():
    R.require()
    kinds = Counter()
    for b, h, data in corpus_batches("txn-0"):
        if h.is_control:
            (r,) = decode_batch(h, data)
            assert isinstance(r, ControlRecord) and r.is_control
            marker = control_record(r)
            assert marker.coordinator_epoch is not None and marker.coordinator_epoch >= 0
            kinds[marker.type] += 1
    assert kinds == {"ABORT": 35, "COMMIT": 76}


def _first_at_or_after(records, target, start):
    return next(((r.timestamp, r.offset) for r in records if r.timestamp >= target and r.offset >= start), None)


@pytest.mark.parametrize("partition", ["compressed-0", "ooo-time-0", "logappend-0", "bigbase-0", "txn-0"])
def test_timestamp_searches_match_brute_force(partition):
    R.require()
    for _, h, data in corpus_batches(partition):
        records = decode_batch(h, data)
        stamps = sorted({r.timestamp for r in records})
        targets = {-1, stamps[0] - 1, stamps[-1] + 1, h.max_timestamp}
        targets.update(t + d for t in stamps[::3] for d in (-1, 0, 1))
        starts = {h.base_offset, records[len(records) // 2].offset, h.last_offset, h.last_offset + 1}
        for target in targets:
            for start in starts:
                assert find_timestamp(h, data, target, start) == _first_at_or_after(records, target, start)
        want = next((r.offset for r in records if r.timestamp == h.max_timestamp), None)
        assert offset_of_max_timestamp(h, data) == want
        assert want is not None


def _rebuild(b, h, data):
    """Re-encode a Kafka batch from its records and metadata."""
    lat = b["timestamp_type"] == "LogAppendTime"
    # LogAppendTime records are reported with the append time; the deltas keep the create
    # times, so take them from the batch read as CreateTime.
    records = decode_batch(h._replace(attributes=h.attributes & ~0x08) if lat else h, data)
    return build_batch(records, base_offset=b["base_offset"],
                       timestamp_type=TimestampType.LOG_APPEND_TIME if lat else TimestampType.CREATE_TIME,
                       max_timestamp=b["max_timestamp"] if lat else None, producer_id=b["producer_id"],
                       producer_epoch=b["producer_epoch"], base_sequence=b["base_sequence"],
                       transactional=b["is_transactional"], control=b["is_control"],
                       partition_leader_epoch=b["partition_leader_epoch"])


@pytest.mark.parametrize("partition", ["plain-0", "txn-0", "bigbase-0", "ooo-time-0", "logappend-0", "closed-0"])
def test_uncompressed_batches_re_encode_byte_for_byte(partition):
    R.require()
    n = 0
    for b, h, data in corpus_batches(partition):
        if b["compression"] == "none":
            assert _rebuild(b, h, data) == data, b
            n += 1
    assert n > 0


def test_reference_records_alone_re_encode_createtime_batches():
    """From the answer JSON only: records (with their gaps) and batch metadata give Kafka's bytes."""
    R.require()
    for partition in ["bigbase-0", "txn-0"]:
        records = [Record(r["offset"], r["timestamp"], _b64(r["key"]), _b64(r["value"]),
                          tuple((k, _b64(v)) for k, v in r["headers"])) for r in R.answers(partition)["records"]]
        by_offset = {r.offset: r for r in records}
        for b, h, data in corpus_batches(partition):
            if b["compression"] != "none":
                continue
            mine = [by_offset[o] for o in range(b["base_offset"], b["last_offset"] + 1) if o in by_offset]
            built = build_batch(mine, base_offset=b["base_offset"], producer_id=b["producer_id"],
                                producer_epoch=b["producer_epoch"], base_sequence=b["base_sequence"],
                                transactional=b["is_transactional"], control=b["is_control"],
                                partition_leader_epoch=b["partition_leader_epoch"])
            assert built == data


def test_control_batch_matches_kafkas_markers():
    R.require()
    for b, h, data in corpus_batches("txn-0"):
        if h.is_control:
            (r,) = decode_batch(h, data)
            marker = control_record(r)
            assert build_control_batch(b["base_offset"], r.timestamp, producer_id=b["producer_id"],
                                       producer_epoch=b["producer_epoch"], commit=marker.type == "COMMIT",
                                       coordinator_epoch=marker.coordinator_epoch,
                                       partition_leader_epoch=b["partition_leader_epoch"]) == data


# Round trips

timestamps = st.one_of(st.just(-1), st.integers(0, 1 << 45))
nullable_bytes = st.one_of(st.none(), st.binary(max_size=40), st.binary(min_size=200, max_size=400))
headers = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=20))), max_size=3)
records = st.lists(st.tuples(timestamps, nullable_bytes, nullable_bytes, headers.map(tuple)), max_size=40)
gaps = st.lists(st.one_of(st.just(1), st.integers(1, 1 << 20)), min_size=40, max_size=40)


@settings(max_examples=150, deadline=None)
@given(recs=records, codec=st.sampled_from(list(Compression)), gaps=gaps, base=st.integers(0, 1 << 60),
       log_append=st.booleans(), epoch=st.integers(-1, 1000))
def test_build_decode_round_trip(recs, codec, gaps, base, log_append, epoch):
    offsets = list(accumulate([base, *gaps[1:len(recs)]]))[:len(recs)]
    append_time = 1_700_000_000_000
    batch = build_batch(recs, base_offset=base, compression=codec, offsets=offsets, partition_leader_epoch=epoch,
                        timestamp_type=TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME,
                        max_timestamp=append_time if log_append else None)
    h = parse(batch)
    ensure_valid(h, batch)
    assert h.compression is codec and h.record_count == len(recs) and h.partition_leader_epoch == epoch
    if recs:
        assert h.last_offset == offsets[-1]
        assert h.base_timestamp == recs[0][0]
        assert h.max_timestamp == (append_time if log_append else max(-1, *(r[0] for r in recs)))
    want = [Record(o, append_time if log_append else ts, k, v, hs) for o, (ts, k, v, hs) in zip(offsets, recs)]
    assert decode_batch(h, batch) == want
    assert offset_of_max_timestamp(h, batch) == next((r.offset for r in want if r.timestamp == h.max_timestamp),
                                                     None)
    for target in {-1, 0, *(r.timestamp for r in want[:5])}:
        assert find_timestamp(h, batch, target, base) == _first_at_or_after(want, target, base)


@pytest.mark.parametrize("codec", list(Compression))
def test_large_batch_round_trip(codec):
    """Multi-block payloads and 3- to 10-byte varints (big keys, far-apart timestamps, large offset deltas)."""
    recs = [(i * 7_919_000_000 % (1 << 44), bytes([i % 251]) * (i * 37 % 20000), b"v%d" % i * (i % 50),
             tuple((f"h{j}", b"x" * j) for j in range(i % 4))) for i in range(600)]
    offsets = [5 + i * (1 << 16) for i in range(600)]
    batch = build_batch(recs, base_offset=5, offsets=offsets, compression=codec)
    got = decode(batch)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in got] == \
        [(o, *rec) for o, rec in zip(offsets, recs)]


def test_payloads_kafka_accepts_but_does_not_write():
    """Raw (unframed) snappy and old Kafka's LZ4 header checksum inside v2 batches."""
    recs = [(7, b"k%d" % i, b"v" * i, ()) for i in range(30)]
    plain = build_batch(recs, base_offset=0)
    body, count = plain[61:], parse(plain).record_count
    want = decode(plain)
    assert decode(v2_batch(bytes(cramjam.snappy.compress_raw(body)), count, Compression.SNAPPY)) == \
        [r._replace(offset=r.offset + 1000, timestamp=5000 + r.timestamp - 7) for r in want]
    assert decode(v2_batch(compress(Compression.LZ4, body, magic=0), count, Compression.LZ4)) == \
        [r._replace(offset=r.offset + 1000, timestamp=5000 + r.timestamp - 7) for r in want]


def test_sequential_offsets_and_empty_batch():
    batch = build_batch([(10, b"k", b"v", ()), (5, None, b"", ())], base_offset=100)
    h = parse(batch)
    assert (h.base_timestamp, h.max_timestamp, h.last_offset) == (10, 10, 101)
    assert decode(batch) == [Record(100, 10, b"k", b"v"), Record(101, 5, None, b"")]
    empty = build_batch([], base_offset=7)
    assert parse(empty).record_count == 0 and decode(empty) == []


@pytest.mark.parametrize("call", [
    lambda: build_batch([(1, None, None, ())] * 2, base_offset=0, offsets=[5, 5]),  # offsets must increase
    lambda: build_batch([(1, None, None, ())], base_offset=10, offsets=[9]),  # below the base offset
    lambda: build_batch([(1, None, None, ())], base_offset=0, offsets=[1 << 31]),  # delta past int32
    lambda: build_batch([(1, None, None, ())], base_offset=0, offsets=[1, 2]),  # one offset per record
    lambda: build_batch([(-5, None, None, ())], base_offset=0),  # negative timestamp other than -1
    lambda: build_batch([(1, None, None, ())], base_offset=0, timestamp_type=TimestampType.LOG_APPEND_TIME),
    lambda: build_legacy([(1, None, None, (("h", None),))], magic=1, base_offset=0),  # no headers before v2
    lambda: build_legacy([(1, None, None, ())], magic=1, base_offset=0, compression=Compression.ZSTD),
    lambda: build_legacy([(1, None, None, ())], magic=2, base_offset=0),
    lambda: build_legacy([], magic=1, base_offset=0, compression=Compression.GZIP),
])
def test_builder_refuses_what_kafka_refuses(call):
    with pytest.raises(ValueError):
        call()


def test_control_record_types():
    batch = build_control_batch(50, 123, producer_id=9, producer_epoch=2, commit=False, coordinator_epoch=17)
    h = parse(batch)
    assert h.is_control and h.is_transactional and h.base_sequence == -1
    (r,) = decode(batch)
    assert control_record(r) == ("ABORT", 17)
    assert control_record(r._replace(key=struct.pack(">hh", 0, 2))) == ("LEADER_CHANGE", None)
    assert control_record(r._replace(key=struct.pack(">hh", 0, 99))).type == "UNKNOWN"
    for key, value in [(b"\x00", r.value), (struct.pack(">hh", -1, 0), r.value), (r.key, b"\x00\x00")]:
        with pytest.raises(CorruptRecordError, match=str(POSITION)):
            control_record(r._replace(key=key, value=value), position=POSITION)


# Legacy message sets

legacy_records = st.lists(st.tuples(st.integers(0, 1 << 45), nullable_bytes, nullable_bytes, st.just(())),
                          min_size=1, max_size=20)


@settings(max_examples=80, deadline=None)
@given(recs=legacy_records, magic=st.sampled_from([0, 1]),
       codec=st.sampled_from([Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4]),
       base=st.integers(1, 1 << 50), gap=st.integers(1, 1000), log_append=st.booleans())
def test_legacy_round_trip(recs, magic, codec, base, gap, log_append):
    offsets = [base + i * gap for i in range(len(recs))]
    append_time = 1_600_000_000_000
    data = build_legacy(recs, magic=magic, base_offset=base, compression=codec, offsets=offsets,
                        timestamp_type=TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME,
                        log_append_time=append_time)

    def ts(t):
        return -1 if magic == 0 else (append_time if log_append else t)

    want = [Record(o, ts(t), k, v) for o, (t, k, v, _) in zip(offsets, recs)]
    got, pos = [], 0
    while pos < len(data):
        h = parse_header(data, pos, POSITION + pos)
        batch = data[pos:pos + h.size]
        ensure_valid(h, batch)
        records = decode_batch(h, batch)
        assert legacy_offsets(h, batch) == (records[0].offset, len(records))
        got += records
        if codec is not Compression.NONE:
            assert h.base_offset == offsets[-1] and h.max_timestamp == max(w.timestamp for w in want)
            assert offset_of_max_timestamp(h, batch) == (None if magic == 0 else
                                                         next(w.offset for w in want if w.timestamp == h.max_timestamp))
        pos += h.size
    assert got == want


def test_legacy_wrapper_offsets():
    recs = [(1000 + i, b"k", b"v%d" % i, ()) for i in range(5)]
    v1 = build_legacy(recs, magic=1, base_offset=40, compression=Compression.GZIP)
    h = parse(v1)
    assert (h.base_offset, h.record_count) == (44, None)
    assert legacy_offsets(h, v1) == (40, 5)
    assert [r.offset for r in decode_batch(h, v1)] == [40, 41, 42, 43, 44]
    # A v1 wrapper at offset 0 (librdkafka) keeps the inner offsets as they are.
    zero = bytearray(v1)
    zero[:8] = bytes(8)
    assert [r.offset for r in decode(bytes(zero))] == [0, 1, 2, 3, 4]
    # v0 inner offsets are absolute.
    v0 = build_legacy(recs, magic=0, base_offset=40, compression=Compression.GZIP)
    assert [(r.offset, r.timestamp) for r in decode(v0)] == [(40 + i, -1) for i in range(5)]


def legacy_message(offset, attributes, key, value, timestamp=0):
    """A magic 1 message built by hand, for shapes the builder refuses to make."""
    body = bytes((1, attributes)) + struct.pack(">q", timestamp)
    for field in (key, value):
        body += struct.pack(">i", -1) if field is None else struct.pack(">i", len(field)) + field
    return struct.pack(">qiI", offset, 4 + len(body), zlib.crc32(body)) + body


def test_legacy_corruption():
    recs = [(1000 + i, b"k", b"v%d" % i, ()) for i in range(3)]
    v1 = build_legacy(recs, magic=1, base_offset=40, compression=Compression.GZIP)
    below = bytearray(v1)
    below[:8] = struct.pack(">q", 1)  # wrapper offset below the last relative inner offset (2)
    not_gzip = bytearray(v1)
    not_gzip[-20:] = bytes(20)
    gz = Compression.GZIP
    cases = [
        (below, "below the last inner"),
        (not_gzip, "gzip"),
        (v1[:-5], "runs past the message"),
        (legacy_message(3, gz, None, compress(gz, v1)), "must not be compressed"),
        (legacy_message(3, gz, None, compress(gz, b"")), "no inner messages"),
        (legacy_message(3, gz, None, None), "null value"),
        (legacy_message(3, Compression.ZSTD, None, compress(Compression.ZSTD, v1)), "zstd"),
        (legacy_message(3, 7, None, b"x"), "unknown compression codec id 7"),
        (legacy_message(3, gz, None, compress(gz, struct.pack(">qi", 0, 5) + bytes(5))), "minimum"),
        (legacy_message(3, 0, b"k" * 10, None)[:-4] + struct.pack(">i", 99), "runs past the message"),
    ]
    for bad, match in cases:
        bad = bytearray(bad)
        struct.pack_into(">i", bad, 8, len(bad) - 12)
        with pytest.raises(CorruptRecordError, match=match) as e:
            decode(bytes(bad))
        assert str(POSITION) in str(e.value)
    with pytest.raises(CorruptRecordError, match=f"at byte {POSITION}: message of {len(v1)} bytes cut off"):
        decode_batch(parse(v1), v1[:-1])
    tiny = bytearray(v1)
    struct.pack_into(">i", tiny, 8, 5)
    with pytest.raises(CorruptRecordError, match=f"at byte {POSITION}: message size 5 is below the minimum"):
        decode_batch(parse(bytes(tiny)), bytes(tiny[:17]))


def test_legacy_partial_inner_message_ends_the_set():
    """As Kafka's DataLogInputStream: a cut-off last inner message is not an error."""
    inner = build_legacy([(1, b"a", b"b", ()), (2, b"c", b"d", ())], magic=1, base_offset=0)
    wrapper = legacy_message(1, Compression.GZIP, None, compress(Compression.GZIP, inner[:-3]))
    assert decode(wrapper) == [Record(1, 1, b"a", b"b")]


# Bad v2 batches


def v2_batch(body: bytes, count: int, attributes: int = 0) -> bytes:
    """A v2 batch around hand-made record bytes, with a correct CRC."""
    header = struct.pack(">qiibIhiqqqhii", 1000, 49 + len(body), -1, 2, 0, attributes, count - 1, 5000, 5000,
                         -1, -1, -1, count)
    return with_crc(bytearray(header + body))


def record_bytes(*fields: bytes) -> bytes:
    body = b"".join(fields)
    return bytes([len(body) * 2]) + body  # one-byte zig-zag length (bodies under 64 bytes)


GOOD = record_bytes(b"\x00", b"\x00", b"\x00", b"\x01", b"\x06abc", b"\x00")  # ts +0, delta 0, null key, "abc"


def test_hand_made_batch_decodes():
    assert decode(v2_batch(GOOD, 1)) == [Record(1000, 5000, None, b"abc")]


@pytest.mark.parametrize("body, count, match", [
    (GOOD, 2, "record 1 of 2 runs past the end"),  # count above the records
    (GOOD + GOOD, 1, "bytes left after"),  # count below the records
    (GOOD[:-2], 1, "record size"),  # record cut off
    (b"\x80", 1, "runs past the end"),  # length varint cut off
    (b"\xff\xff\xff\xff\xff\x01", 1, "longer than 5 bytes"),  # overlong varint
    (record_bytes(b"\x00", b"\xff" * 10 + b"\x01", b"\x00\x01\x01\x00"), 1, "varlong .* longer than 10"),
    (record_bytes(b"\x00\x00\x00", b"\x7e", b"\x01\x00"), 1, "record 0 of 1 runs past"),  # key past the data
    (record_bytes(b"\x00\x00\x00", b"\x7e", b"\x01\x00") + GOOD * 8, 1, "its fields take"),  # key past the record
    (record_bytes(b"\x00\x00\x00\x01\x01", b"\x03"), 1, "invalid header count -2"),
    (record_bytes(b"\x00\x00\x00\x01\x01", b"\x02", b"\x01", b"\x00"), 1, "negative header key length"),
    (record_bytes(b"\x00\x00\x00\x01\x01\x00", b"xx"), 1, "its fields take"),  # padding inside a record
    (b"\x7f" + GOOD[1:], 1, "record size -64"),
])
def test_bad_records(body, count, match):
    batch = v2_batch(body, count)
    h = parse(batch)
    with pytest.raises(CorruptRecordError, match=match) as e:
        decode_batch(h, batch)
    assert e.value.position == POSITION and f"at byte {POSITION}" in str(e.value)


@pytest.mark.parametrize("body, count", [(GOOD, 2), (GOOD[:-2], 1), (b"\x80", 1), (b"\x7f" + GOOD[1:], 1),
                                         (b"\xff\xff\xff\xff\xff\x01", 1)])
def test_timestamp_scans_of_bad_records(body, count):
    """The scans skip keys and values by the record length, but still refuse bad lengths and cut-off records."""
    batch = v2_batch(body, count)
    h = parse(batch)
    with pytest.raises(CorruptRecordError, match=f"at byte {POSITION}"):
        find_timestamp(h, batch, 6000, 0)  # no record gets there: the scan reaches the fault
    with pytest.raises(CorruptRecordError, match=f"at byte {POSITION}"):
        offset_of_max_timestamp(h._replace(max_timestamp=6000), batch)


def test_bad_crc_truncation_and_codec():
    batch = bytearray(build_batch([(1, b"k", b"v", ())] * 3, base_offset=0, compression=Compression.LZ4))
    h = parse(bytes(batch))
    batch[-3] ^= 0x55
    with pytest.raises(CorruptRecordError, match=f"at byte {POSITION}.*crc"):
        ensure_valid(h, bytes(batch))
    with pytest.raises(CorruptRecordError, match=f"at byte {POSITION}.*lz4"):
        decode_batch(h, bytes(batch))
    good = build_batch([(1, b"k", b"v", ())], base_offset=0)
    with pytest.raises(CorruptRecordError, match=f"at byte {POSITION}.*cut off"):
        decode_batch(parse(good), good[:-1])
    for codec_id in (5, 6, 7):
        bad = bytearray(good)
        bad[22] = codec_id
        with pytest.raises(CorruptRecordError, match=f"at byte {POSITION}.*unknown compression codec id {codec_id}"):
            decode(with_crc(bad))


@pytest.mark.parametrize("codec", [c for c in Compression if c is not Compression.NONE])
def test_garbage_compressed_payload(codec):
    batch = v2_batch(b"this is not compressed by anything at all", 1, attributes=codec)
    with pytest.raises(CorruptRecordError, match=f"at byte {POSITION}.*{codec.label}"):
        decode(batch)


@settings(max_examples=300, deadline=None)
@given(recs=records, codec=st.sampled_from(list(Compression)),
       flips=st.lists(st.tuples(st.integers(61, 10**6), st.integers(1, 255)), min_size=1, max_size=3),
       cut=st.integers(0, 10**6))
def test_mangled_batches_only_raise_corrupt_record_error(recs, codec, flips, cut):
    batch = bytearray(build_batch(recs, base_offset=0, compression=codec))
    if len(batch) > 61:
        for where, xor in flips:
            batch[61 + where % (len(batch) - 61)] ^= xor
    if cut % 4 == 0:
        del batch[cut % len(batch):]
    try:
        h = parse(bytes(batch))
        decode_batch(h, bytes(batch))
        find_timestamp(h, bytes(batch), 0, 0)
        offset_of_max_timestamp(h, bytes(batch))
    except CorruptRecordError as e:
        assert str(POSITION) in str(e)


def _full_check(buf: bytes, size: int):
    """What read's reference check says of the batch at the front of `buf`: its last offset or the error."""
    try:
        header = parse_header(buf, 0)
        ensure_valid(header, memoryview(buf)[:size])
        return header.last_offset
    except CorruptRecordError as err:
        return str(err)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_sound_v2_last_offset_accepts_exactly_what_the_full_check_accepts(data):
    """read's quick pass over a batch (sound_v2_last_offset) answers only for batches the full parse and
    CRC check accept, with the same last offset; every other batch goes to the full check."""
    from lookupd.format.batch import sound_v2_last_offset

    recs = [(1000 + i, b"k%d" % i, b"v" * data.draw(st.integers(0, 50)), ())
            for i in range(data.draw(st.integers(1, 5)))]
    batch = bytearray(build_batch(recs, base_offset=data.draw(st.integers(0, 1 << 40)),
                                  compression=data.draw(st.sampled_from(list(Compression)))))
    for _ in range(data.draw(st.integers(0, 3))):
        i = data.draw(st.integers(0, len(batch) - 1))
        batch[i] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):  # a size field below the header's
        struct.pack_into(">i", batch, 8, data.draw(st.integers(14, 60)))
    size = struct.unpack_from(">i", batch, 8)[0] + 12  # as whole_frames frames it
    if not 26 <= size <= len(batch):
        return  # whole_frames stops before it or reports it itself
    if data.draw(st.booleans()):  # damage that a fresh CRC hides: only the fields are off
        struct.pack_into(">I", batch, 17, _crc32c_of(bytes(batch[21:size])))
    quick = sound_v2_last_offset(bytes(batch), 0, size)
    full = _full_check(bytes(batch), size)
    if quick is not None:
        assert quick == full
    else:
        assert not isinstance(full, int) or batch[16] != 2


def _crc32c_of(b: bytes) -> int:
    return compute_crc(bytes(21) + b, 2)
