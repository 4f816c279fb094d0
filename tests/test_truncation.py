"""A follower's truncation done Kafka's way, then a new fetch: answers must come from the batches.

Kafka's `AbstractIndex.truncateToEntries` only moves the in-memory entry count; the index file
keeps the old entries' bytes, and the entries of the new fetch are written over the first of
them. So the active index holds new entries followed by stale ones, in order or not.
"""

from __future__ import annotations

import os
import struct
from typing import Callable

import pytest

from lookupd.format.batch import parse_header
from lookupd.format.builder import build_batch
from lookupd.format.names import segment_file_name
from lookupd.log.logmanager import LogManager
from lookupd.tools.writer import LogWriter, SegmentWriter

INTERVAL = 150  # bytes between offset-index entries: one every few batches
PER_BATCH = 5


def _batch(offset: int, value_size: int) -> bytes:
    recs = [(1_000_000 + offset + i, f"k{offset + i}".encode(), b"v" * value_size, ()) for i in range(PER_BATCH)]
    return build_batch(recs, base_offset=offset)


def _scan(path: str) -> list:
    """Every batch of the `.log`: the truth the answers are checked against."""
    with open(path, "rb") as f:
        data = f.read()
    out, pos = [], 0
    while pos < len(data):
        h = parse_header(data, pos)
        out.append(h)
        pos += h.size
    return out


def kafka_truncate_and_fetch(d: str, truncate_to: int, fetch: int, new_value_size: int = 3,
                             one_fetch: bool = False, before_truncation: Callable[[], object] = lambda: None) -> None:
    """40 batches, then Kafka's truncateTo(truncate_to) and one fetch of `fetch` batches of another size:
    smaller batches leave stale entries out of order after the new ones, larger ones leave them in
    order but pointing inside the new batches. `before_truncation` runs between the two."""
    w = LogWriter(d, segment_bytes=1 << 30, index_interval_bytes=INTERVAL)
    for b in range(40):
        w.append(_batch(b * PER_BATCH, 20))
    w.close()  # the active segment keeps its preallocated indexes, as a running broker's
    before_truncation()
    log_path = os.path.join(d, segment_file_name(0, ".log"))
    cut = next((h.position for h in _scan(log_path) if h.base_offset >= truncate_to), os.path.getsize(log_path))
    os.truncate(log_path, cut)
    with open(os.path.join(d, segment_file_name(0, ".index")), "rb") as f:
        raw = f.read()
    kept = [(rel, pos) for rel, pos in struct.iter_unpack(">ii", raw) if (rel or pos) and rel < truncate_to]
    with open(os.path.join(d, segment_file_name(0, ".timeindex")), "rb") as f:
        raw_t = f.read()
    kept_t = [(ts, rel) for ts, rel in struct.iter_unpack(">qi", raw_t) if ts and rel < truncate_to]
    sw = SegmentWriter(d, 0, index_interval_bytes=INTERVAL)  # the broker after truncateTo: only the count moved
    sw.index.offset_entries = kept
    sw.index.time_entries = kept_t
    if kept_t:
        sw.index.max_timestamp = kept_t[-1][0]
    first = truncate_to // PER_BATCH * PER_BATCH
    new = [_batch(first + b * PER_BATCH, new_value_size) for b in range(fetch)]  # other sizes: positions move
    if one_fetch:  # one append: at most one index entry, so stale entries stay right after the kept ones
        sw.append(b"".join(new))
    else:
        for batch in new:
            sw.append(batch)
    sw.close()


@pytest.mark.parametrize("new_value_size,one_fetch", [(3, False), (60, False), (20, True), (60, True)],
                         ids=["smaller-batches", "larger-batches", "one-fetch", "one-fetch-larger"])
@pytest.mark.parametrize("truncate_to", [0, 50, 100])
def test_answers_after_a_kafka_truncation_come_from_the_batches(tmp_path, truncate_to, new_value_size, one_fetch):
    d = tmp_path / "t-0"
    d.mkdir()
    kafka_truncate_and_fetch(str(d), truncate_to, fetch=10, new_value_size=new_value_size, one_fetch=one_fetch)
    batches = _scan(str(d / segment_file_name(0, ".log")))
    leo = batches[-1].last_offset + 1
    starts = {h.position: h for h in batches}
    lm = LogManager([str(tmp_path)])
    llog = lm.get("t", 0)
    assert llog.log_end_offset == leo
    assert llog.info()["log_end_offset"] == leo
    for o in range(leo):
        loc = llog.resolve_offset(o)
        want = next(h for h in batches if h.last_offset >= o)
        assert (loc.position, loc.base_offset, loc.last_offset) == (want.position, want.base_offset, want.last_offset)
        point = llog.lookup_offset(o, "floor")
        assert point.position in starts, (o, point)  # never a position inside a batch
        assert starts[point.position].base_offset <= max(point.offset, starts[point.position].base_offset) <= o
        ceiling = llog.lookup_offset(o, "ceiling")
        assert ceiling is None or ceiling.position in starts
    assert llog.resolve_offset(leo) is None
    cols = llog.lookup_offsets(list(range(leo)), "floor")
    assert set(cols["position"].tolist()) <= set(starts)
    lm.close()


def test_a_truncation_and_new_writes_between_two_looks_are_seen(tmp_path):
    """The index was read before the broker truncated and wrote past the old entries again: the next look
    sees the entries the broker rewrote (a map shows them; pure Python's copy must read them again)."""
    d = tmp_path / "t-0"
    d.mkdir()
    managers, looked = [], []

    def look():
        managers.append(LogManager([str(tmp_path)]))
        return managers[0].get("t", 0).lookup_offset(150, "floor")

    kafka_truncate_and_fetch(str(d), 50, fetch=40, new_value_size=60, before_truncation=lambda: looked.append(look()))
    assert looked[0].offset > 50  # an entry the truncation then left stale
    lm = managers[0]
    batches = _scan(str(d / segment_file_name(0, ".log")))
    starts = {h.position: h for h in batches}
    llog = lm.get("t", 0)
    assert llog.log_end_offset == batches[-1].last_offset + 1
    for o in range(0, llog.log_end_offset, 3):
        point = llog.lookup_offset(o, "floor")
        assert point.position in starts and starts[point.position].base_offset <= o, (o, point)
    lm.close()


def test_entries_the_broker_writes_after_a_truncation_are_picked_up(tmp_path):
    """The stale slot that was ignored becomes valid once the broker writes a real entry there."""
    d = tmp_path / "t-0"
    d.mkdir()
    kafka_truncate_and_fetch(str(d), 0, fetch=4)
    lm = LogManager([str(tmp_path)])
    llog = lm.get("t", 0)
    assert llog.log_end_offset == 4 * PER_BATCH
    entries_before = llog.segment(0).offset_index.valid_entries(limit=llog.segment(0).size())
    sw = SegmentWriter(str(d), 0, index_interval_bytes=INTERVAL)
    with open(d / segment_file_name(0, ".index"), "rb") as f:
        raw = f.read()
    sw.index.offset_entries = list(struct.iter_unpack(">ii", raw))[:entries_before]
    sw.size = os.path.getsize(d / segment_file_name(0, ".log"))
    for b in range(4, 30):
        sw.append(_batch(b * PER_BATCH, 3))
    sw.close()
    batches = _scan(str(d / segment_file_name(0, ".log")))
    assert llog.log_end_offset == batches[-1].last_offset + 1 == 30 * PER_BATCH
    starts = {h.position for h in batches}
    assert all(llog.lookup_offset(o, "floor").position in starts for o in range(0, 150, 7))
    assert llog.segment(0).offset_index.valid_entries(limit=llog.segment(0).size()) > entries_before
    lm.close()


def test_a_lookup_that_began_before_a_roll_is_not_taken_for_corruption(tmp_path):
    """Issue 40 row 10, the chaos test's CORRUPT_DATA (`entry 6 ... points to position 2493, past the end of the log
    (2225 bytes)`): a lookup measures the active segment's `.log`, then the broker appends (an index entry past
    that size), rolls, and the rescan marks the segment rolled; the lookup then searches with the size it measured.
    That limit is stale, not the segment corrupt: the lookup answers from the entries within it, and no fault is
    left on the index for every later lookup to fail on (as it was, until the index was mapped again)."""
    d = str(tmp_path / "t-0")
    w = LogWriter(d, segment_bytes=1 << 20, index_interval_bytes=INTERVAL)
    for b in range(10):
        w.append(_batch(b * PER_BATCH, 20))
    lm = LogManager([str(tmp_path)])
    llog = lm.get("t", 0)
    seg = llog.segment(0)
    want = llog.resolve_offset(22)
    measured = seg.size()  # what a lookup measured, while the segment was active
    entries = seg.offset_index.entries_array(limit=measured)[0].size
    for b in range(10, 20):  # the broker appends (new index entries past `measured`) and rolls
        w.append(_batch(b * PER_BATCH, 20))
    w.roll()
    w.append(_batch(20 * PER_BATCH, 20))
    llog.refresh()
    assert not seg.live and seg.size() > measured
    # the lookup goes on with its limit: the entries within it, no error
    assert seg.offset_index.lookup(22, limit=measured) == seg.offset_index.lookup(22, limit=seg.size())
    assert seg.offset_index.entries_array(limit=measured)[0].size == entries
    assert seg.offset_index.fault is None
    assert llog.resolve_offset(22) == want and llog.resolve_offset(90) is not None  # every later lookup answers
    # a rolled segment's index really past its `.log` is still corruption
    os.truncate(seg.log.path, measured)
    assert seg.size() == measured
    with pytest.raises(Exception, match="past the end of the log"):
        seg.offset_index.lookup(22, limit=measured)
    w.close()
    lm.close()


def test_a_segment_made_in_the_clock_tick_of_the_last_rescan_is_seen(tmp_path):
    """Issue 40 row 10: a rescan re-lists a partition only when its directory's mtime changed, and directory
    times tick coarsely. A segment rolled in the same tick as a change the last rescan saw left the mtime as
    recorded, and the daemon did not see it until the next change (the chaos test's truncate step changes no
    directory): its checks then met a daemon behind the files. Here the tick is made so with os.utime."""
    d = tmp_path / "t-0"
    w = LogWriter(str(d), segment_bytes=1 << 20, index_interval_bytes=INTERVAL)
    for b in range(5):
        w.append(_batch(b * PER_BATCH, 20))
    tick = os.stat(d).st_mtime_ns
    lm = LogManager([str(tmp_path)])
    assert lm.get("t", 0).base_offsets == [0]
    w.roll()  # a new segment, in the same tick as far as the directory's mtime tells
    w.append(_batch(5 * PER_BATCH, 20))
    os.utime(d, ns=(tick, tick))
    lm.refresh()
    assert lm.get("t", 0).base_offsets == [0, 5 * PER_BATCH]
    assert lm.get("t", 0).resolve_offset(5 * PER_BATCH + 1) is not None
    w.close()
    lm.close()
