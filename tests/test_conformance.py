"""Conformance with Apache Kafka: every partition of the reference corpus (tests/reference.py), every index entry,
batch and query answer Kafka's own code gave. Any mismatch is a bug in lookupd.

Active segments are compared with Kafka's "live" view (the writer's in-memory objects): Kafka's
read-only reopen counts the preallocated zero tail as entries, which is exactly what our
reader must not do. Rolled segments are compared with the "reopened" view.
"""

from __future__ import annotations

import base64
import bisect

import numpy as np
import pytest

import reference as R
from lookupd.errors import LookupdError
from lookupd.log.logmanager import LogManager

PARTS = R.PARTITIONS


def split(p: str) -> tuple[str, int]:
    topic, part = p.rsplit("-", 1)
    return topic, int(part)


@pytest.fixture(scope="module")
def manager():
    R.require()
    lm = LogManager([R.LOGS])
    yield lm
    lm.close()


def llog(manager, p):
    return manager.get(*split(p))


def ref_segments(p):
    return R.answers(p)["segments"]


def ref_entries(p, kind, base, *, live):
    """Reference entries of one index as two int lists, in whichever form the JSON holds them."""
    d = R.answers(p)[kind][str(base)]
    if "entries_truncated_in_dump" in d:
        if not live:
            raise AssertionError("reopened view of a preallocated index is not compared")
        d = d["live_entries"]
        if isinstance(d, list):
            return [r[0] for r in d], [r[1] for r in d]
    if isinstance(d, dict) and d.get("compact"):
        k1, k2 = ("offset", "position") if kind == "offset_index" else ("timestamp", "offset")
        return list(d[k1]), list(d[k2])
    rows = d["entries"]
    return [r[0] for r in rows], [r[1] for r in rows]


# ------------------------------------------------------------------ segments and indexes


@pytest.mark.parametrize("p", PARTS)
def test_segment_list_and_sizes(manager, p):
    log = llog(manager, p)
    refs = ref_segments(p)
    assert log.base_offsets == [s["base_offset"] for s in refs]
    for s in refs:
        seg = log.segment(s["base_offset"])
        assert seg.live == s["active"]
        assert seg.size() == s["log_size"]


@pytest.mark.parametrize("p", PARTS)
def test_offset_index_entries(manager, p):
    log = llog(manager, p)
    for s in ref_segments(p):
        seg = log.segment(s["base_offset"])
        live = s["active"]
        offsets, positions = seg.offset_index.entries_array(limit=seg.size())
        want = ref_entries(p, "offset_index", s["base_offset"], live=live)
        assert offsets.tolist() == want[0] and positions.tolist() == want[1], f"segment {s['base_offset']}"
        if live:
            view = s["live_view_before_handles_released"]
            assert len(offsets) == view["offset_index_entries"]
            assert seg.offset_index.last_offset(limit=seg.size()) == view["offset_index_last_offset"]
            # Kafka's reopen counts every whole entry of the preallocated file; so can we, on request.
            assert len(seg.offset_index.entries_array(include_invalid=True)[0]) == s["offset_index"]["entries"]
        else:
            assert len(offsets) == s["offset_index"]["entries"]
            assert seg.offset_index.last_offset(limit=seg.size()) == s["offset_index"]["last_offset"]


@pytest.mark.parametrize("p", PARTS)
def test_time_index_entries(manager, p):
    log = llog(manager, p)
    for s in ref_segments(p):
        seg = log.segment(s["base_offset"])
        live = s["active"]
        limit = seg.time_index_limit(seg.size())
        ts, offsets = seg.time_index.entries_array(limit=limit)
        want = ref_entries(p, "time_index", s["base_offset"], live=live)
        assert ts.tolist() == want[0] and offsets.tolist() == want[1], f"segment {s['base_offset']}"
        last = seg.time_index.last_entry(limit=limit)
        if live:
            view = s["live_view_before_handles_released"]
            assert len(ts) == view["time_index_entries"]
            assert list(last) == [view["time_index_last_entry"]["timestamp"], view["time_index_last_entry"]["offset"]]
        else:
            assert len(ts) == s["time_index"]["entries"]
            assert list(last) == [s["time_index"]["last_entry"]["timestamp"], s["time_index"]["last_entry"]["offset"]]


@pytest.mark.parametrize("p", PARTS)
def test_transaction_index(manager, p):
    log = llog(manager, p)
    for s in ref_segments(p):
        seg = log.segment(s["base_offset"])
        want = [{k: t[k] for k in ("producer_id", "first_offset", "last_offset", "last_stable_offset")}
                for t in s["txn_index"]["all_aborted_txns"]]
        assert [t._asdict() for t in seg.txn_index.all_aborted_txns()] == want
        assert seg.txn_index.entries()["version"].tolist() == [t["version"] for t in s["txn_index"]["all_aborted_txns"]]


@pytest.mark.parametrize("p", PARTS)
def test_indexes_pass_sanity_checks(manager, p):
    """Kafka's sanity checks pass on every rolled segment; the live view of active ones passes too."""
    log = llog(manager, p)
    for s in ref_segments(p):
        seg = log.segment(s["base_offset"])
        if not s["active"]:
            assert s["offset_index"]["sanity_check"] == "ok" and s["time_index"]["sanity_check"] == "ok"
        seg.offset_index.sanity_check(limit=seg.size())
        seg.time_index.sanity_check(limit=seg.time_index_limit(seg.size()))
        seg.txn_index.sanity_check()


@pytest.mark.parametrize("p", PARTS)
def test_segment_summaries(manager, p):
    log = llog(manager, p)
    for s in ref_segments(p):
        seg = log.segment(s["base_offset"])
        assert seg.read_next_offset() == s["read_next_offset"]
        want_max = s["live_view_before_handles_released"]["max_timestamp_so_far"] if s["active"] else s["max_timestamp_so_far"]
        assert list(seg.max_timestamp_so_far()) == [want_max["timestamp"], want_max["offset"]]
        ts, offset, _ = seg.log.largest_timestamp_after(0)
        assert [ts, offset] == [s["largest_timestamp_after_0"]["timestamp"], s["largest_timestamp_after_0"]["offset"]]
        assert sum(1 for _ in seg.log.batches(0, strict=True)) == s["batch_count"]


@pytest.mark.parametrize("p", PARTS)
def test_segment_listing(manager, p):
    """The `segments` listing: counts of valid entries (from file sizes for rolled segments)."""
    lm = LogManager([R.LOGS])  # nothing mapped yet: rolled counts come from file sizes
    rows = lm.get(*split(p)).segments_info()
    for row, s in zip(rows, ref_segments(p)):
        live = s.get("live_view_before_handles_released")
        want_oi = live["offset_index_entries"] if s["active"] else s["offset_index"]["entries"]
        want_ti = live["time_index_entries"] if s["active"] else s["time_index"]["entries"]
        want_ts = (live or s)["max_timestamp_so_far"]["timestamp"]
        assert (row["base_offset"], row["size"], row["active"], row["offset_index_entries"],
                row["time_index_entries"]) == (s["base_offset"], s["log_size"], s["active"], want_oi, want_ti)
        if want_ts >= 0:
            assert row["largest_timestamp"] == want_ts
    lm.close()


@pytest.mark.parametrize("p", PARTS)
def test_batch_headers(manager, p):
    log = llog(manager, p)
    got = [(seg.base_offset, h) for seg in log.segments() for h in seg.log.batches(0, strict=not seg.live)]
    want = R.batches(p)
    assert len(got) == len(want)
    fields = ("base_offset", "last_offset", "position", "max_timestamp", "record_count", "magic")
    for (seg_base, h), b in zip(got, want):
        assert seg_base == b["segment"]
        assert h.size == b["size_in_bytes"]
        assert h.compression.label == b["compression"] and h.timestamp_type.label == b["timestamp_type"]
        for f in fields:
            assert getattr(h, f) == b[f], (f, b)
        if "crc" in b:
            assert (h.crc, h.is_transactional, h.is_control, h.producer_id, h.producer_epoch, h.base_sequence,
                    h.last_sequence, h.partition_leader_epoch, h.base_timestamp) == \
                   (b["crc"], b["is_transactional"], b["is_control"], b["producer_id"], b["producer_epoch"],
                    b["base_sequence"], b["last_sequence"], b["partition_leader_epoch"], b["base_timestamp"])


# ------------------------------------------------------------------ Kafka's query answers


def run_query(seg, q):
    op = q["op"]
    size = seg.size()
    if op == "OffsetIndex.lookup":
        o, pos = seg.offset_index_lookup(q["target"])
        return {"offset": o, "position": pos}
    if op == "OffsetIndex.slot":
        return {"largest_lower_bound_slot": seg.offset_index.slot_for(q["target"], limit=size),
                "smallest_upper_bound_slot": seg.offset_index.slot_for(q["target"], upper=True, limit=size)}
    if op == "OffsetIndex.fetchUpperBoundOffset":
        r = seg.offset_index.fetch_upper_bound_offset(q["fetch_position"], q["fetch_size"], limit=size)
        return None if r is None else {"offset": r[0], "position": r[1]}
    if op == "TimeIndex.lookup":
        ts, o = seg.time_index_lookup(q["target"])
        return {"timestamp": ts, "offset": o}
    if op == "TimeIndex.slot":
        limit = seg.time_index_limit(size)
        return {"largest_lower_bound_slot": seg.time_index.slot_for(q["target"], limit=limit),
                "smallest_upper_bound_slot": seg.time_index.slot_for(q["target"], upper=True, limit=limit)}
    if op == "LogSegment.translateOffset":
        r = seg.translate_offset(q["offset"])
        return None if r is None else {"offset": r.offset, "position": r.position, "size": r.size}
    if op == "LogSegment.findOffsetByTimestamp":
        r = seg.find_offset_by_timestamp(q["timestamp"], q["starting_offset"])
        return None if r is None else {"timestamp": r.timestamp, "offset": r.offset, "leader_epoch": r.leader_epoch}
    if op == "TransactionIndex.collectAbortedTxns":
        txns, complete = seg.collect_aborted_txns(q["fetch_offset"], q["upper_bound_offset"])
        return {"aborted_transactions": [t._asdict() for t in txns], "is_complete": complete}
    raise AssertionError(f"unknown op {op}")


@pytest.mark.parametrize("p", PARTS)
def test_every_query_answer(manager, p):
    log = llog(manager, p)
    active = {s["base_offset"]: s["active"] for s in ref_segments(p)}
    checked, mismatches = 0, []
    for q in R.answers(p)["queries"]:
        index_level = q["op"].startswith(("OffsetIndex", "TimeIndex"))
        if active[q["segment"]] and q["view"] == "reopened" and index_level:
            continue  # Kafka's reopen of a preallocated index: see module docstring
        got = run_query(log.segment(q["segment"]), q)
        checked += 1
        if got != q["result"]:
            mismatches.append((q, got))
    assert not mismatches, f"{len(mismatches)} of {checked} answers differ, first: {mismatches[:3]}"
    assert checked > 0


# ------------------------------------------------------------------ partition level, derived from the reference


def index_points(p):
    """Every (offset, position, segment) index point of the partition, in offset order."""
    pts = []
    for s in ref_segments(p):
        base = s["base_offset"]
        pts.append((base, 0, base))
        offsets, positions = ref_entries(p, "offset_index", base, live=s["active"])
        pts.extend((o, pos, base) for o, pos in zip(offsets, positions))
    return pts


def targets_for(p, limit=400):
    """A spread of offset targets taken from the reference queries (deterministic sample)."""
    ts = sorted({q["offset"] for q in R.answers(p)["queries"] if q["op"] == "LogSegment.translateOffset"}
                | {q["target"] for q in R.answers(p)["queries"] if q["op"] == "OffsetIndex.lookup"})
    step = max(1, len(ts) // limit)
    return [t for t in ts[::step] if 0 <= t < 1 << 62]


@pytest.mark.parametrize("p", PARTS)
def test_partition_offsets(manager, p):
    log = llog(manager, p)
    refs = ref_segments(p)
    assert log.log_start_offset == refs[0]["base_offset"]
    assert log.log_end_offset == refs[-1]["read_next_offset"]


@pytest.mark.parametrize("p", PARTS)
def test_lookup_offset_floor_and_ceiling(manager, p):
    log = llog(manager, p)
    pts = index_points(p)
    keys = [o for o, _, _ in pts]
    targets = targets_for(p)
    for t in targets:
        i = bisect.bisect_right(keys, t) - 1
        want_floor = None if i < 0 else (pts[i][2], pts[i][0], pts[i][1])
        j = bisect.bisect_left(keys, t)
        want_ceil = None if j == len(pts) else (pts[j][2], pts[j][0], pts[j][1])
        got_floor = log.lookup_offset(t, "floor")
        got_ceil = log.lookup_offset(t, "ceiling")
        assert (None if got_floor is None else tuple(got_floor)) == want_floor, t
        assert (None if got_ceil is None else tuple(got_ceil)) == want_ceil, t
    for mode in ("floor", "ceiling"):
        cols = log.lookup_offsets(targets, mode)
        for k, t in enumerate(targets):
            r = log.lookup_offset(t, mode)
            assert (cols["segment"][k], cols["offset"][k], cols["position"][k]) == (tuple(r) if r else (-1, -1, -1))


@pytest.mark.parametrize("p", PARTS)
def test_resolve_offset(manager, p):
    log = llog(manager, p)
    batches = R.batches(p)
    lasts = [b["last_offset"] for b in batches]
    start, end = log.log_start_offset, log.log_end_offset
    targets = [t for t in targets_for(p) if start <= t < end]
    for t in targets:
        b = batches[bisect.bisect_left(lasts, t)]
        want = (b["segment"], b["base_offset"], b["last_offset"], b["position"], b["size_in_bytes"])
        assert tuple(log.resolve_offset(t)) == want, t
    cols = log.resolve_offsets(targets + [end, end + 5])
    for k, t in enumerate(targets):
        assert tuple(int(cols[f][k]) for f in ("segment", "base_offset", "last_offset", "position", "size")) == \
               tuple(log.resolve_offset(t))
    assert cols["segment"][-1] == -1 and cols["segment"][-2] == -1
    assert log.resolve_offset(end) is None


def records_by_segment(p):
    """(offset, timestamp) of every record, grouped by segment, from the reference."""
    batches = R.batches(p)
    out: dict[int, list[tuple[int, int]]] = {s["base_offset"]: [] for s in ref_segments(p)}
    recs = R.answers(p).get("records")
    if recs is None:  # large-0: one record per batch
        for b in batches:
            out[b["segment"]].append((b["base_offset"], b["max_timestamp"]))
        return out
    lasts = [b["last_offset"] for b in batches]
    for r in recs:
        b = batches[bisect.bisect_left(lasts, r["offset"])]
        out[b["segment"]].append((r["offset"], r["timestamp"]))
    return out


def largest_timestamps(manager, p):
    out = []
    for s in ref_segments(p):
        m = s["live_view_before_handles_released"]["max_timestamp_so_far"] if s["active"] else s["max_timestamp_so_far"]
        if m["timestamp"] >= 0:
            out.append(m["timestamp"])
        else:  # Kafka falls back to the .log's mtime
            out.append(llog(manager, p).segment(s["base_offset"]).largest_timestamp())
    return out


@pytest.mark.parametrize("p", PARTS)
def test_offset_for_timestamp(manager, p):
    log = llog(manager, p)
    bases = [s["base_offset"] for s in ref_segments(p)]
    largest = largest_timestamps(manager, p)
    recs = records_by_segment(p)
    start = log.log_start_offset
    stamps = sorted({q["timestamp"] for q in R.answers(p)["queries"]
                     if q["op"] == "LogSegment.findOffsetByTimestamp" and q["timestamp"] >= 0})
    stamps = stamps[::max(1, len(stamps) // 300)]
    batches = R.batches(p)
    lasts = [b["last_offset"] for b in batches]
    for t in stamps:
        i = next((i for i, L in enumerate(largest) if L >= t), None)
        want = None
        if i is not None:
            hit = next(((o, ts) for o, ts in recs[bases[i]] if ts >= t and o >= start), None)
            if hit is not None:
                want = (hit[0], hit[1], bases[i])
        got = log.offset_for_timestamp(t)
        assert (None if got is None else (got.offset, got.timestamp, got.segment)) == want, t
        if got is not None:
            b = batches[bisect.bisect_left(lasts, got.offset)]
            assert (b["segment"], b["position"]) == (got.segment, got.position)
    cols = log.offsets_for_timestamps(stamps)
    for k, t in enumerate(stamps):
        r = log.offset_for_timestamp(t)
        assert (cols["offset"][k], cols["timestamp"][k], cols["segment"][k], cols["position"][k]) == \
               ((r.offset, r.timestamp, r.segment, r.position) if r else (-1, -1, -1, -1))


@pytest.mark.parametrize("p", PARTS)
def test_special_timestamps(manager, p):
    log = llog(manager, p)
    assert log.offset_for_timestamp(-2).offset == log.log_start_offset
    assert log.offset_for_timestamp(-1).offset == log.log_end_offset
    recs = records_by_segment(p)
    all_recs = [r for b in sorted(recs) for r in recs[b]]
    got = log.offset_for_timestamp(-3)
    if not all_recs:
        assert got is None
        return
    largest = largest_timestamps(manager, p)
    best_seg = [s["base_offset"] for s in ref_segments(p)][int(np.argmax(largest))]
    max_ts = max(ts for _, ts in recs[best_seg])
    want_offset = next(o for o, ts in recs[best_seg] if ts == max_ts)
    assert (got.offset, got.timestamp, got.segment) == (want_offset, max_ts, best_seg)


@pytest.mark.parametrize("p", PARTS)
def test_lookup_timestamp_floor_and_ceiling(manager, p):
    log = llog(manager, p)
    refs = ref_segments(p)
    largest = largest_timestamps(manager, p)
    stamps = sorted({q["target"] for q in R.answers(p)["queries"] if q["op"] == "TimeIndex.lookup" and q["target"] >= 0})
    stamps = stamps[::max(1, len(stamps) // 200)]
    for t in stamps:
        i = next((i for i, L in enumerate(largest) if L >= t), None)
        if i is None:
            assert log.lookup_timestamp(t, "floor") is None and log.lookup_timestamp(t, "ceiling") is None
            continue
        seg_ref = refs[i]
        tss, offs = ref_entries(p, "time_index", seg_ref["base_offset"], live=seg_ref["active"])
        k = bisect.bisect_right(tss, t) - 1
        want_ts, want_off = (tss[k], offs[k]) if k >= 0 else (-1, seg_ref["base_offset"])
        got = log.lookup_timestamp(t, "floor")
        assert (got.segment, got.timestamp, got.offset) == (seg_ref["base_offset"], want_ts, want_off), t
        seg = log.segment(seg_ref["base_offset"])
        assert got.position == seg.offset_index_lookup(want_off)[1]
        want_ceil = None
        for s in refs[i:]:
            tss, offs = ref_entries(p, "time_index", s["base_offset"], live=s["active"])
            k = bisect.bisect_left(tss, t)
            if k < len(tss):
                want_ceil = (s["base_offset"], tss[k], offs[k])
                break
        got = log.lookup_timestamp(t, "ceiling")
        assert (None if got is None else (got.segment, got.timestamp, got.offset)) == want_ceil, t


@pytest.mark.parametrize("p", ["txn-0"])
def test_aborted_transactions_match_fetch_path(manager, p):
    """Partition-level collection equals Kafka's segment answers chained as LocalLog does."""
    log = llog(manager, p)
    by_seg = {}
    for q in R.answers(p)["queries"]:
        if q["op"] == "TransactionIndex.collectAbortedTxns" and q["view"] == "reopened":
            by_seg.setdefault((q["fetch_offset"], q["upper_bound_offset"]), {})[q["segment"]] = q["result"]
    bases = log.base_offsets
    checked = 0
    for (fetch, upper), answers in by_seg.items():
        if fetch < 0 or upper < fetch:
            continue
        first = bases[max(bisect.bisect_right(bases, fetch) - 1, 0)]
        want, verifiable = [], True
        for b in bases[bases.index(first):]:
            if b not in answers:
                verifiable = False  # the reference did not query a segment this chain needs
                break
            want.extend(answers[b]["aborted_transactions"])
            if answers[b]["is_complete"]:
                break
        if not verifiable:
            continue
        assert [t._asdict() for t in log.aborted_transactions(fetch, upper)] == want
        checked += 1
    assert checked > 0


@pytest.mark.parametrize("p", PARTS)
def test_read_returns_whole_batches(manager, p):
    log = llog(manager, p)
    batches = R.batches(p)
    lasts = [b["last_offset"] for b in batches]
    start, end = log.log_start_offset, log.log_end_offset
    for t in targets_for(p, 40):
        if not start <= t < end:
            with pytest.raises(LookupdError):
                if t > end or t < start:
                    log.read(t, 1000)
                else:
                    raise LookupdError("at end")
            continue
        i = bisect.bisect_left(lasts, t)
        r = log.read(t, 1)  # smaller than any batch: still one whole batch (minOneMessage)
        assert (r.segment, r.position, len(r.records), r.next_offset) == \
               (batches[i]["segment"], batches[i]["position"], batches[i]["size_in_bytes"], batches[i]["last_offset"] + 1)
        r = log.read(t, 100_000)
        j = i
        total = 0
        while j < len(batches) and batches[j]["segment"] == batches[i]["segment"] and \
                total + batches[j]["size_in_bytes"] <= 100_000:
            total += batches[j]["size_in_bytes"]
            j += 1
        assert len(r.records) == max(total, batches[i]["size_in_bytes"])
        seg = log.segment(r.segment)
        assert r.records == seg.log.read(r.position, len(r.records))
    assert log.read(end, 100).records == b""


def test_records_decode_like_kafka(manager):
    """Spot check through the segment API (the codec's own tests cover every record)."""
    records = pytest.importorskip("lookupd.format.records")
    from lookupd.format.batch import parse_header
    p = "compressed-0"
    want = {r["offset"]: r for r in R.answers(p)["records"]}
    log = llog(manager, p)
    seg = log.segment(log.base_offsets[3])
    n = 0
    for h in seg.log.batches(0):
        data = seg.log.read(h.position, h.size)
        for rec in records.decode_batch(parse_header(data, 0, h.position), data):
            w = want[rec.offset]
            assert rec.timestamp == w["timestamp"]
            assert rec.value == (base64.b64decode(w["value"]) if w["value"] is not None else None)
            n += 1
    assert n > 0
