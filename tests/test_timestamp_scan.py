"""The fast paths of offset_for_timestamp against their references: the C scan inside a batch
against the Python scan, and the bisected search for the first segment at a time against the
plain walk over every segment (ListOffsets' choice of segment)."""

from __future__ import annotations

import contextlib
import random
import struct

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import reference as R
from lookupd.errors import CorruptRecordError
from lookupd.format import _accel as format_accel
from lookupd.format._accel import python_only
from lookupd.format import records as rec
from lookupd.format.batch import Compression, TimestampType, parse_header
from lookupd.format.builder import build_batch
from lookupd.log.locallog import SegmentList
from lookupd.log.logmanager import LogManager
from lookupd.tools.writer import LogWriter


def scan(batch: bytes, target: int, start: int, native: bool):
    """find_timestamp with the C scan and C codecs (native) or in Python alone."""
    with contextlib.nullcontext() if native else python_only():
        try:
            return rec.find_timestamp(parse_header(batch, 0), batch, target, start, path="t.log")
        except CorruptRecordError as err:
            return str(err)


def assert_alike(batch: bytes, targets, starts) -> None:
    """The C scan, the Python scan and find_timestamp_fast (one C call, no header built) agree; the last
    answers every match in a whole batch of any codec."""
    for target in targets:
        for start in starts:
            python = scan(batch, target, start, False)
            assert scan(batch, target, start, True) == python, (target, start)
            fast = rec.find_timestamp_fast(batch, target, start)
            if isinstance(python, tuple):
                assert fast == (*python, parse_header(batch, 0).partition_leader_epoch_or_none), (target, start)
            else:
                assert fast is None


def test_the_native_scan_is_built():
    assert format_accel.NATIVE


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(-1, 1 << 40), min_size=1, max_size=30),
       st.sampled_from(["plain", "gzip", "snappy", "lz4", "zstd", "log-append"]), st.integers(0, 1 << 62))
def test_generated_batches_scan_alike(stamps, kind, base):
    extra = {"log-append": {"timestamp_type": TimestampType.LOG_APPEND_TIME, "max_timestamp": stamps[0]},
             **{c.label: {"compression": c} for c in Compression if c is not Compression.NONE}}.get(kind, {})
    batch = build_batch([(ts, b"k", b"v", ()) for ts in stamps], base_offset=base, **extra)
    targets = sorted(set(stamps)) + [min(stamps) - 1, max(stamps) + 1, -1, 0]
    starts = [0, base, base + len(stamps) // 2, base + len(stamps)]
    assert_alike(batch, targets, starts)


def _recrc(b: bytearray) -> bytes:
    b[17:21] = struct.pack(">I", crc32c.crc32c(bytes(b[21:])))
    return bytes(b)


def test_damaged_batches_fail_or_answer_alike():
    """Every byte of the record section set to boundary values, and the count changed: the same answer
    or the same error (naming the batch's position) from both scans."""
    good = build_batch([(1000 + 7 * i, b"key-%d" % i, b"x" * i, (("h", b"v"),)) for i in range(6)], base_offset=40)
    rnd = random.Random(3)
    damaged = []
    for at in range(61, len(good)):
        for value in (0x00, 0x7F, 0x80, 0xFF, rnd.randrange(256)):
            b = bytearray(good)
            b[at] = value
            damaged.append(_recrc(b))
    for count in (0, 1, 5, 7, 100, -1):
        b = bytearray(good)
        b[57:61] = struct.pack(">i", count)
        damaged.append(_recrc(b))
    damaged.append(_recrc(bytearray(good[:-3])))
    for batch in damaged:
        assert_alike(batch, [0, 1007, 1020, 1036, 1 << 62], [0, 43, 46])


@pytest.mark.parametrize("partition", R.PARTITIONS)
def test_reference_batches_scan_alike(partition):
    for b in R.batches(partition)[:2000]:
        path = R.log_dir(partition) / f"{b['segment']:020d}.log"
        with open(path, "rb") as f:
            f.seek(b["position"])
            batch = f.read(b["size_in_bytes"])
        h = parse_header(batch, 0)
        if h.magic < 2:
            continue
        assert_alike(batch, [-1, h.base_timestamp, h.max_timestamp, h.max_timestamp + 1], [0, h.base_offset + 1])


def linear_first_segment(v: SegmentList, timestamp: int) -> int:
    for i, seg in enumerate(v.segments()):
        if seg.largest_timestamp() >= timestamp:
            return i
    return -1


def test_first_segment_at_a_time_is_found_as_the_plain_walk_finds_it(tmp_path):
    """Segments whose largest timestamps go down as well as up (producers' clocks): bisection over the
    running maximum picks the segment the walk over every segment picks, as the log grows and rolls."""
    part = tmp_path / "t-0"
    w = LogWriter(str(part))
    rnd = random.Random(5)
    offset = 0
    lm = None
    for step in range(40):
        stamps = [rnd.randrange(10_000) for _ in range(rnd.randint(1, 4))]
        w.append(build_batch([(ts, None, b"v", ()) for ts in stamps], base_offset=offset))
        offset += len(stamps)
        if step % 3 == 2:
            w.roll()
        lm = lm or LogManager([str(tmp_path)])
        llog = lm.get("t", 0)
        llog.refresh()
        v = SegmentList(llog, llog.base_offsets)
        for target in sorted(rnd.sample(range(-5, 10_010), 30)) + [rnd.randrange(10_000) for _ in range(30)]:
            assert llog._timestamp_segment(v, target) == linear_first_segment(v, target), (step, target)
    w.close()
    lm.close()


# ---------------------------------------------------------------- the batch-header walk of a .log

from lookupd.log import _accel as log_accel  # noqa: E402
from lookupd.log.filerecords import FileRecords  # noqa: E402


def walk(path: str, target: int, start: int, end: int, by_timestamp: bool, strict: bool, native: bool):
    fr = FileRecords(path)
    try:
        with contextlib.nullcontext() if native else python_only():
            found = fr.find_batch(target, start, end, by_timestamp=by_timestamp, strict=strict)
        return None if found is None else found[2:]
    except CorruptRecordError as err:
        return str(err)
    finally:
        fr.close()


def test_the_native_walk_is_built():
    assert log_accel.NATIVE


def assert_walks_alike(path: str, targets, starts, end: int) -> None:
    for target in targets:
        for start in starts:
            for by_timestamp in (False, True):
                for strict in (False, True):
                    args = (str(path), target, start, end, by_timestamp, strict)
                    assert walk(*args, native=True) == walk(*args, native=False), args


@pytest.mark.parametrize("partition", R.PARTITIONS)
def test_reference_logs_walk_alike(partition):
    for path in sorted(R.log_dir(partition).glob("*.log"))[:3]:
        size = path.stat().st_size
        bs = [b for b in R.batches(partition) if R.log_dir(partition) / f"{b['segment']:020d}.log" == path]
        offsets = [b["last_offset"] for b in bs] if bs and "last_offset" in bs[0] else []
        targets = sorted(set(offsets[::max(1, len(offsets) // 20)])) + [-1, 0, 1 << 62]
        assert_walks_alike(path, targets, [0] + [b["position"] for b in bs[1:3]], size)


def test_damaged_logs_walk_alike(tmp_path):
    """Size fields set below the minimum or past the end, a cut last batch, trailing bytes, a last
    offset delta past int64: both walks give the same batch, the same None or the same error."""
    good = b"".join(build_batch([(1000 + 10 * o + i, b"k", b"v" * 300, ()) for i in range(3)], base_offset=3 * o)
                    for o in range(40))
    sizes = [parse_header(good, 0).size]
    rnd = random.Random(9)
    # A v2 batch sized below its header at the end of the file: the field looked for lies past the end
    # (the fuzzer found the Python walk raising struct.error there).
    short = struct.pack(">qi", 120, 20) + b"\0\0\0\0\x02" + b"\0" * 15
    cases = [good, good[:-7], good + b"\0" * 10, good + b"\0" * 20, good + short, short]
    for _ in range(40):
        b = bytearray(good)
        at = rnd.randrange(0, len(good) - 12)
        field = rnd.choice([8, 23, 35, 16])
        b[at + field:at + field + 4] = struct.pack(">i", rnd.choice([0, 13, 14, 1 << 30, -1, rnd.randrange(1 << 16)]))
        cases.append(bytes(b))
    b = bytearray(good)
    b[0:8] = struct.pack(">q", (1 << 63) - 2)
    cases.append(bytes(b))
    for i, data in enumerate(cases):
        path = tmp_path / f"{i:020d}.log"
        path.write_bytes(data)
        targets = [0, 1, 50, 119, 1 << 62, 1005, 1200, 1395]
        assert_walks_alike(path, targets, [0, sizes[0]], len(data))
        assert_walks_alike(path, [60], [0], len(data) - 100)
