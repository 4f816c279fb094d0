"""JSON lines rendered natively from columns against the reference rendering: the same bytes, the same errors.

`render.record_lines` (the C renderer over lookupd.format.columnar's columns) and
`render.reference_lines` (`record_json` and the json module, a record at a time) run on the
Kafka reference corpus, on generated batches whose keys, values and headers are text, binary
and near-UTF-8 (overlong forms, surrogates, code points past U+10FFFF, cut sequences), and on
corrupted batches; their output must be byte for byte the same, or the same error.
"""

from __future__ import annotations

import json
import os
import struct

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import reference as R
from lookupd.errors import CorruptRecordError
from lookupd.format import columnar
from lookupd.format.batch import Compression, TimestampType, parse_header
from lookupd.format.builder import build_batch, build_control_batch, build_legacy
from lookupd.format.render import record_json, record_lines, reference_lines
from lookupd.format.records import decode_batch

pytestmark = pytest.mark.skipif(not columnar.NATIVE and os.environ.get("CI") is None,
                                reason="the C extension lookupd.format._decode is not built here")

HEADS = (b"{", b'{"type":"record","file":"/x/00000000000000000000.log",')
# Enough batches per reference partition to meet every kind it holds, without rendering all 200,000 twice.
MAX_BATCHES = 4000


def outcome(fn, batch: bytes, head: bytes, key: bytes | None = None):
    try:
        lines = fn(parse_header(batch, 0), memoryview(batch), "t.log", head, key=key)
        return list(lines.offsets), list(lines.starts), lines.data
    except CorruptRecordError as err:
        return type(err), str(err)


def assert_alike(batch: bytes, key: bytes | None = None) -> None:
    for head in HEADS:
        assert outcome(record_lines, batch, head, key) == outcome(reference_lines, batch, head, key)


def batches_of(buf: bytes):
    pos = 0
    while pos + 61 <= len(buf):
        size = parse_header(buf, pos).size
        yield buf[pos:pos + size]
        pos += size


@pytest.mark.parametrize("partition", R.PARTITIONS)
def test_every_reference_partition_renders_alike(partition):
    seen = 0
    for path in sorted(R.log_dir(partition).glob("*.log")):
        for batch in batches_of(path.read_bytes()):
            if seen == MAX_BATCHES:
                return
            assert_alike(batch)
            seen += 1


def test_lines_are_the_json_of_record_json():
    batch = build_batch([(5, b"k\x00\"\\\x7f\xc3\xa9\xf0\x9f\x98\x80", b"\xff\xfe", (("h\n", None), ("", b"v")))],
                        base_offset=40)
    lines = record_lines(parse_header(batch, 0), memoryview(batch))
    (record,) = decode_batch(parse_header(batch, 0), batch)
    assert lines.data == (json.dumps(record_json(record, parse_header(batch, 0)), separators=(",", ":")) +
                          "\n").encode()
    assert json.loads(lines.data)["key"] == "k\x00\"\\\x7f\xe9\U0001F600"
    assert json.loads(lines.data)["value"] == {"base64": "//4="}
    assert list(lines.offsets) == [40] and list(lines.starts) == [0, len(lines.data)]


# Bytes that are nearly UTF-8: each must be told apart exactly as Python's strict decoder does.
NEAR_UTF8 = [b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80", b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xf0\x8f\xbf\xbf",
             b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"\x80", b"\xbf",
             b"\xef\xbf\xbf", b"\xf4\x8f\xbf\xbf", b"\xed\x9f\xbf", b"\xee\x80\x80", b"\xc2\x80", b"\x7f", b"\x1f"]
payloads = st.one_of(
    st.none(), st.binary(max_size=60), st.text(max_size=30).map(lambda s: s.encode("utf-8", "surrogatepass")),
    st.lists(st.one_of(st.sampled_from(NEAR_UTF8), st.text(max_size=4).map(str.encode)), max_size=6).map(b"".join))
header_keys = st.text(max_size=8).filter(lambda s: not any(0xD800 <= ord(c) <= 0xDFFF for c in s))
records = st.lists(st.tuples(st.integers(0, 2**40), payloads, payloads,
                             st.lists(st.tuples(header_keys, payloads), max_size=3)), min_size=1, max_size=12)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records, st.sampled_from(["plain", "zstd", "log-append", "transactional", "control", "legacy"]))
def test_generated_batches_render_alike(recs, kind):
    items = [(ts, k, v, tuple(h)) for ts, k, v, h in recs]
    if kind == "control":
        batch = build_control_batch(9, 5, producer_id=7, producer_epoch=0, commit=False, coordinator_epoch=3)
    elif kind == "legacy":
        batch = build_legacy([(ts, k, v, ()) for ts, k, v, _ in items], magic=1, base_offset=3)
    else:
        extra = {"log-append": {"timestamp_type": TimestampType.LOG_APPEND_TIME, "max_timestamp": 99},
                 "transactional": {"producer_id": 7, "producer_epoch": 2, "transactional": True},
                 "zstd": {"compression": Compression.ZSTD}}.get(kind, {})
        batch = build_batch(items, base_offset=2**40, **extra)
    assert_alike(batch)
    for key in {k for _, k, _, _ in items} | {b"", b"absent"}:
        assert_alike(batch, key)


def _recrc(batch: bytearray) -> bytes:
    batch[17:21] = struct.pack(">I", crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


def test_a_header_key_that_is_not_utf8_is_rendered_as_kafka_reads_it():
    """Kafka replaces malformed UTF-8 in header keys; the columns hold the replaced text, rendered alike."""
    good = build_batch([(1, b"k", b"v", (("\xe9t\xe9", b"x"),))], base_offset=0)
    bad = bytearray(good)
    at = bad.index("\xe9".encode())
    bad[at:at + 2] = b"\xc3\x28"
    assert_alike(_recrc(bad))


@pytest.mark.parametrize("spot,value", [(57, struct.pack(">i", 9)), (57, struct.pack(">i", -1)),
                                        (61, b"\xff\xff\xff\xff\xff"), (61, b"\x7e")])
def test_corrupt_batches_fail_alike(spot, value):
    batch = bytearray(build_batch([(1000 + i, b"key", b"value", (("h", b"x"),)) for i in range(6)], base_offset=7))
    batch[spot:spot + len(value)] = value
    batch = _recrc(batch)
    assert outcome(reference_lines, batch, b"{")[0] is CorruptRecordError
    assert_alike(batch)


def test_offsets_past_int64_render_as_the_reference_does():
    """Columns hold int64; a record offset past it is not an error in JSON: the reference path renders it."""
    batch = build_batch([(1, b"a", b"b", ()), (2, b"c", b"d", ())], base_offset=2**63 - 2, offsets=[2**63 - 2, 2**63])
    assert_alike(batch)
