"""Index files: property tests against a brute-force reading, edge cases, live appends, bad files."""

from __future__ import annotations

import bisect
import os
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lookupd.log.cache import IndexCache
from lookupd.errors import CorruptIndexError
from lookupd.log import _accel as log_accel, search
from lookupd.log.index import OffsetIndex, TimeIndex


def plain_floor(idx, target: int) -> int:
    """The benchmark's baseline search (lookupd.log.search.plain_floor_slot) over an index's valid entries."""
    t = idx._search_target(target, False)
    return idx.run_search(lambda buf, n: search.plain_floor_slot(buf, n, idx.LAYOUT, t))

INT31 = (1 << 31) - 1
BASE = 1 << 40


def write_offset_index(path, entries, zero_tail=0):
    with open(path, "wb") as f:
        for rel, pos in entries:
            f.write(struct.pack(">ii", rel, pos))
        f.write(bytes(8 * zero_tail))


def write_time_index(path, entries, zero_tail=0):
    with open(path, "wb") as f:
        for ts, rel in entries:
            f.write(struct.pack(">qi", ts, rel))
        f.write(bytes(12 * zero_tail))


@st.composite
def offset_entries(draw):
    rels = sorted(draw(st.sets(st.integers(1, INT31), max_size=300)))
    if draw(st.booleans()) and rels:
        rels[-1] = INT31
    positions = sorted(draw(st.sets(st.integers(1, INT31 - 1), min_size=len(rels), max_size=len(rels))))
    return list(zip(rels, positions))


@st.composite
def time_entries(draw):
    stamps = sorted(draw(st.sets(st.integers(0, 1 << 62), max_size=300)))
    rels = sorted(draw(st.lists(st.integers(0, INT31), min_size=len(stamps), max_size=len(stamps))))
    return list(zip(stamps, rels))


def brute_floor(keys, t):
    return bisect.bisect_right(keys, t) - 1


def brute_ceiling(keys, t):
    i = bisect.bisect_left(keys, t)
    return i if i < len(keys) else -1


def targets_around(keys, extra):
    ts = set(extra)
    for k in keys[:50] + keys[-50:]:
        ts.update((k - 1, k, k + 1))
    return sorted(ts)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entries=offset_entries(), tail=st.sampled_from([0, 3, 2000]), live=st.booleans(),
       extra=st.lists(st.integers(-(1 << 62), 1 << 62), max_size=20))
def test_offset_index_matches_brute_force(tmp_path, entries, tail, live, extra):
    path = tmp_path / "x.index"
    write_offset_index(path, entries, tail)
    idx = OffsetIndex(path, BASE)
    idx.set_live(live)
    keys = [BASE + r for r, _ in entries]
    positions = [p for _, p in entries]
    assert idx.entries == len(entries)
    got_o, got_p = idx.entries_array()
    assert got_o.tolist() == keys and got_p.tolist() == positions
    targets = targets_around(keys, [BASE - 1, BASE, 0, BASE + INT31 + 5] + [BASE + e % (1 << 32) for e in extra])
    floors = idx.lookup_many(targets)
    ceils = idx.lookup_many(targets, ceiling=True)
    for k, t in enumerate(targets):
        f = brute_floor(keys, t)
        c = brute_ceiling(keys, t)
        assert idx.floor_slot(t) == f
        assert plain_floor(idx, t) == f
        assert idx.slot_for(t) == f  # Kafka's lower bound
        assert idx.ceiling_slot(t) == c
        assert idx.ceiling_entry(t) == ((keys[c], positions[c]) if c >= 0 else None)
        assert idx.lookup(t) == ((keys[f], positions[f]) if f >= 0 else (BASE, 0))
        assert (floors[0][k], floors[1][k]) == idx.lookup(t)
        assert (ceils[0][k], ceils[1][k]) == ((keys[c], positions[c]) if c >= 0 else (-1, -1))
    assert idx.floor_slots(targets).tolist() == [brute_floor(keys, t) for t in targets]
    assert idx.ceiling_slots(targets).tolist() == [brute_ceiling(keys, t) for t in targets]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entries=time_entries(), tail=st.sampled_from([0, 2, 1000]), extra=st.lists(st.integers(-5, 1 << 62), max_size=20))
def test_time_index_matches_brute_force(tmp_path, entries, tail, extra):
    path = tmp_path / "x.timeindex"
    write_time_index(path, entries, tail)
    idx = TimeIndex(path, BASE)
    stamps = [t for t, _ in entries]
    offsets = [BASE + r for _, r in entries]
    # A first entry of (0, 0) is indistinguishable from a preallocated tail in a file with one.
    expected = 0 if (tail and entries == [(0, 0)]) else len(entries)
    assert idx.entries == expected
    if expected != len(entries):
        return
    for t in targets_around(stamps, [-1, 0] + extra):
        f = brute_floor(stamps, t)
        assert idx.floor_slot(t) == f
        c = brute_ceiling(stamps, t)
        assert idx.ceiling_slot(t) == c
        assert idx.ceiling_entry(t) == ((stamps[c], offsets[c]) if c >= 0 else None)
        assert idx.lookup(t) == ((stamps[f], offsets[f]) if f >= 0 else (-1, BASE))
    assert idx.last_entry() == ((stamps[-1], offsets[-1]) if entries else (-1, BASE))


def test_edge_cases(tmp_path):
    empty = tmp_path / "empty.index"
    empty.write_bytes(b"")
    idx = OffsetIndex(empty, 7)
    assert idx.entries == 0 and idx.lookup(100) == (7, 0) and idx.ceiling_slot(7) == -1
    assert idx.lookup_many([0, 7, 9])[0].tolist() == [7, 7, 7]

    missing = OffsetIndex(tmp_path / "nope.index", 7)
    assert missing.entries == 0 and missing.lookup(9) == (7, 0)

    one = tmp_path / "one.index"
    write_offset_index(one, [(5, 100)])
    idx = OffsetIndex(one, 0)
    assert (idx.lookup(4), idx.lookup(5), idx.lookup(6)) == ((0, 0), (5, 100), (5, 100))
    assert idx.ceiling_slot(5) == 0 and idx.ceiling_slot(6) == -1

    # A trimmed file with the single entry (0, 0) has one entry, as Kafka counts it...
    zero = tmp_path / "zero.index"
    write_offset_index(zero, [(0, 0)])
    assert OffsetIndex(zero, 3).entries == 1
    # ...while a preallocated file that was never written has none.
    pre = tmp_path / "pre.index"
    write_offset_index(pre, [], zero_tail=1000)
    assert OffsetIndex(pre, 3).entries == 0

    top = tmp_path / "top.index"
    write_offset_index(top, [(1, 10), (INT31, 20)])
    idx = OffsetIndex(top, BASE)
    assert idx.lookup(BASE + INT31) == (BASE + INT31, 20)
    assert idx.lookup((1 << 63) - 1) == (BASE + INT31, 20)
    assert idx.lookup(-(1 << 63)) == (BASE, 0)


def test_kafka_upper_bound_quirk_is_reproduced_and_ceiling_is_right(tmp_path):
    """AbstractIndex's upper-bound search never answers slot 0 for a target equal to it."""
    path = tmp_path / "q.index"
    write_offset_index(path, [(5, 10), (10, 20), (15, 30)])
    idx = OffsetIndex(path, 0)
    assert idx.slot_for(5, upper=True) == 1  # what Kafka answers
    assert idx.ceiling_slot(5) == 0  # what a ceiling is


def test_warm_section_boundaries(tmp_path):
    """Targets right at and around the first warm entry (entries - 1 - 1024)."""
    n = 5000
    path = tmp_path / "w.index"
    write_offset_index(path, [(2 * i + 2, 4 * i + 4) for i in range(n)])
    idx = OffsetIndex(path, 0)
    keys = [2 * i + 2 for i in range(n)]
    hot = n - 1 - idx.warm_entries
    for slot in (0, 1, hot - 1, hot, hot + 1, n - 2, n - 1):
        for t in (keys[slot] - 1, keys[slot], keys[slot] + 1):
            assert idx.floor_slot(t) == brute_floor(keys, t)
            assert plain_floor(idx, t) == brute_floor(keys, t)


def test_live_index_sees_appended_entries(tmp_path):
    """The broker writes entries into the preallocated tail: the next lookup sees them."""
    path = tmp_path / "a.index"
    write_offset_index(path, [(1, 100)], zero_tail=1023)
    idx = OffsetIndex(path, 0)
    idx.set_live(True)
    assert idx.lookup(10, limit=10_000) == (1, 100)
    with open(path, "r+b") as f:
        f.seek(8)
        f.write(struct.pack(">ii", 5, 500) + struct.pack(">ii", 9, 900))
    assert idx.lookup(10, limit=10_000) == (9, 900)
    # An entry whose position is not yet inside the .log is not trusted yet.
    assert idx.lookup(10, limit=900) == (5, 500)
    assert idx.lookup(10, limit=901) == (9, 900)
    # The broker rolls: the file is trimmed to its entries.
    os.truncate(path, 24)
    assert idx.lookup(10, limit=10_000) == (9, 900) and idx.entries == 3


def test_rolled_index_with_entry_past_the_log_is_corrupt(tmp_path):
    path = tmp_path / "b.index"
    write_offset_index(path, [(1, 100), (2, 5000)])
    idx = OffsetIndex(path, 0)
    with pytest.raises(CorruptIndexError, match=r"b\.index at byte 8: entry 1 \(offset 2\) points to position 5000, past the end of the log \(4000 bytes\)"):
        idx.lookup(3, limit=4000)


def test_out_of_order_entries_are_corrupt(tmp_path):
    path = tmp_path / "c.index"
    write_offset_index(path, [(1, 100), (3, 300), (2, 400), (4, 500)])
    idx = OffsetIndex(path, 10)
    with pytest.raises(CorruptIndexError, match=r"c\.index at byte 16: entry 2 \(offset 12, position 400\) is not after entry 1"):
        idx.lookup(12)
    ts = tmp_path / "c.timeindex"
    write_time_index(ts, [(100, 1), (90, 2)])
    with pytest.raises(CorruptIndexError, match="timestamps must increase"):
        TimeIndex(ts, 0).lookup(95)


def test_size_not_a_multiple_of_the_entry_size(tmp_path):
    path = tmp_path / "d.index"
    path.write_bytes(struct.pack(">ii", 1, 100) + b"\x01\x02\x03")
    with pytest.raises(CorruptIndexError, match=r"d\.index at byte 8: offset index size 11 is not a multiple of the entry size 8"):
        OffsetIndex(path, 0).lookup(5)


def test_truncated_underneath_a_live_reader(tmp_path):
    """Shrinking a mapped file, to any size, never crashes a lookup (no SIGBUS)."""
    path = tmp_path / "e.index"
    n = 4096  # 32 KiB: eight pages
    write_offset_index(path, [(i + 1, 10 * (i + 1)) for i in range(n)])
    for live in (False, True):
        for size in (8 * 2048, 4096, 4095 * 8 // 8 * 8, 8, 0):
            write_offset_index(path, [(i + 1, 10 * (i + 1)) for i in range(n)])
            idx = OffsetIndex(path, 0)
            idx.set_live(live)
            assert idx.lookup(n, limit=1 << 30) == (n, 10 * n)
            os.truncate(path, size)
            kept = size // 8
            want = (kept, 10 * kept) if kept else (0, 0)
            assert idx.lookup(n, limit=1 << 30) == want
            assert idx.lookup_many([n], limit=1 << 30)[0].tolist() == [want[0]]


def _small_indexes(tmp_path, cache: IndexCache, count: int) -> list[OffsetIndex]:
    """`count` two-entry offset indexes under `cache`, none mapped yet."""
    idxs = []
    for i in range(count):
        path = tmp_path / f"{i}.index"
        write_offset_index(path, [(1, 1), (2, 2)])
        idxs.append(OffsetIndex(path, 0, cache))
    return idxs


def test_cache_bounds_open_indexes(tmp_path):
    cache = IndexCache(max_open=3)
    idxs = _small_indexes(tmp_path, cache, 10)
    fds_before = len(os.listdir("/proc/self/fd"))
    for _ in range(3):
        for idx in idxs:
            assert idx.lookup(5) == (2, 2)
            assert cache.open_count <= 3
    assert cache.evictions >= 27 and cache.lazy_loads == cache.evictions + cache.open_count
    assert len(os.listdir("/proc/self/fd")) <= fds_before + 3  # one descriptor per map
    cache.clear()
    assert cache.open_count == 0


def test_lookups_racing_maps_and_evictions_stay_right(tmp_path):
    """Threads searching while another keeps unmapping the index: every answer is the true floor."""
    import threading

    n = 1_000_000  # big enough that mapping and validating it lets other threads run meanwhile
    path = tmp_path / "race.index"
    keys = np.arange(1, n + 1, dtype=">i4") * 2
    np.stack([keys, keys * 4], axis=1).astype(">i4").tofile(path)
    idx = OffsetIndex(path, 0)
    stop = threading.Event()
    wrong = []

    def search(seed):
        t = seed
        while not stop.is_set():
            t = (t * 1103515245 + 12345) % (2 * n)
            want = (t // 2 * 2, t // 2 * 8) if t >= 2 else (0, 0)
            got = idx.lookup(t)
            if got != want:
                wrong.append((t, got, want))

    threads = [threading.Thread(target=search, args=(s,)) for s in range(4)]
    for th in threads:
        th.start()
    for _ in range(40):
        idx.unmap()
        idx.lookup(0)
    stop.set()
    for th in threads:
        th.join()
    assert not wrong, wrong[:5]


# The C searches (lookupd.log._native) and the Python ones in lookupd.log.search give the same slots.
LAYOUTS = {"offset": search.Layout(8, struct.Struct(">i"), struct.Struct(">i")),
           "time": search.Layout(12, struct.Struct(">q"), struct.Struct(">i"))}


def python_search(fn, *args):
    with log_accel.python_only():
        return fn(*args)


@pytest.mark.native
def test_the_native_search_is_built():
    """CI builds the extension: the fast path is the one the other index tests run."""
    assert log_accel.NATIVE or os.environ.get("CI") is None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(LAYOUTS)), st.lists(st.integers(-50, 5000), max_size=300), st.data())
def test_native_and_python_searches_agree(kind, raw_keys, data):
    layout = LAYOUTS[kind]
    keys = sorted(set(raw_keys))
    if kind == "offset":
        keys = [k for k in keys if k >= 0]
    values = [data.draw(st.integers(0, 2**31 - 1)) for _ in keys]
    values.sort()
    buf = b"".join(layout.key.pack(k) + layout.value.pack(v) for k, v in zip(keys, values))
    n = data.draw(st.integers(0, len(keys)))
    warm = data.draw(st.sampled_from([0, 1, 3, 1024]))
    targets = targets_around(keys, [-(1 << 70), 1 << 70, -1, 2**31, 2**63]) + values[:5]
    for target in targets:
        for by_value in (False, True):
            for upper in (False, True):
                args = (buf, n, layout, target, by_value, upper, warm)
                assert search.kafka_slot(*args) == python_search(search.kafka_slot, *args), args[1:]
        args = (buf, n, layout, target)
        assert search.plain_floor_slot(*args) == python_search(search.plain_floor_slot, *args)


# The one-call lookup (_native.entry) against the searches and checks it stands for.
def reference_entry(buf, n, layout, target, warm, ceiling, value_limit, live):
    """What _native.entry answers, from kafka_slot and the checks of AbstractIndex._view."""
    E, kw = layout.entry_size, layout.key.size
    if n < 2 or layout.value.unpack_from(buf, (n - 1) * E + kw)[0] >= value_limit:
        return None
    if buf[(n - 1) * E:n * E] == bytes(E):
        return None
    if live and ((n + 1) * E > len(buf) or buf[n * E:(n + 1) * E] != bytes(E)):
        return None
    slot = python_search(search.kafka_slot, buf, n, layout, target, False, False, warm)
    if ceiling and not (slot >= 0 and layout.key.unpack_from(buf, slot * E)[0] == target):
        slot = slot + 1 if slot + 1 < n else -1
    if slot < 0:
        return -1, 0, 0
    return slot, layout.key.unpack_from(buf, slot * E)[0], layout.value.unpack_from(buf, slot * E + kw)[0]


@pytest.mark.native
@pytest.mark.skipif(not log_accel.NATIVE, reason="the C extension is not built")
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(LAYOUTS)), st.binary(max_size=400), st.data())
def test_native_entry_agrees_with_the_search_and_checks(kind, raw, data):
    layout = LAYOUTS[kind]
    E = layout.entry_size
    sorted_entries = data.draw(st.booleans())
    if sorted_entries:  # a well-formed index, maybe with a zero tail
        keys = sorted(set(data.draw(st.lists(st.integers(0, 5000), max_size=40))))
        raw = b"".join(layout.key.pack(k) + layout.value.pack(i * 10 + 1) for i, k in enumerate(keys))
        raw += bytes(E * data.draw(st.integers(0, 2)))
    n = data.draw(st.integers(0, len(raw) // E + 1))
    target = data.draw(st.integers(-(1 << 63), (1 << 63) - 1) | st.integers(-2, 5002))
    warm = data.draw(st.sampled_from([0, 1, 3, 1024]))
    ceiling, live = data.draw(st.booleans()), data.draw(st.booleans())
    value_limit = data.draw(st.sampled_from([(1 << 63) - 1, 0, 50, -1]))
    args = (raw, n, E, layout.key.size, target, warm, ceiling, value_limit, live)
    if n * E > len(raw):
        with pytest.raises(ValueError):
            log_accel.entry(*args)
        return
    assert log_accel.entry(*args) == reference_entry(raw, n, layout, target, warm, ceiling, value_limit, live)


@pytest.mark.parametrize("live", [False, True])
def test_index_lookups_agree_with_and_without_the_one_call_path(tmp_path, monkeypatch, live):
    entries = [(r * 7 + 3, r * 100 + 40) for r in range(300)]
    write_offset_index(tmp_path / "a.index", entries, zero_tail=5)
    write_time_index(tmp_path / "a.timeindex", [(1000 + 3 * r, r * 7 + 3) for r in range(300)], zero_tail=5)
    targets = list(range(BASE - 2, BASE + 2200, 3)) + [BASE + INT31 + 1, 0]
    stamps = list(range(990, 2000, 2)) + [-1, (1 << 63) - 1]

    def answers():
        oi, ti = OffsetIndex(tmp_path / "a.index", BASE), TimeIndex(tmp_path / "a.timeindex", BASE)
        oi.set_live(live)
        ti.set_live(live)
        out = []
        for limit in (None, 1 << 40, 15_000):  # 15,000: later entries point past the .log
            calls = [lambda t=t: oi.lookup(t, limit=limit) for t in targets] + [lambda: oi.last_offset(limit=limit)]
            calls += [lambda s=s: ti.lookup(s, limit=None if limit is None else BASE + 1000) for s in stamps]
            for call in calls:
                try:
                    out.append(call())
                except CorruptIndexError as e:
                    out.append(str(e))
        return out

    fast = answers()
    monkeypatch.setattr(OffsetIndex, "_entry_fast", lambda *a: None)
    monkeypatch.setattr(TimeIndex, "_entry_fast", lambda *a: None)
    assert answers() == fast


def test_an_index_that_shrinks_between_its_fstat_and_its_map_is_mapped_again(tmp_path, monkeypatch):
    """The map (SIGBUS guard) or, in pure Python, the pread copy finds the file shorter than its fstat said."""
    from lookupd.log import mapping

    write_offset_index(tmp_path / "s.index", [(5, 100), (9, 200)])
    owner, name = (mapping.mmap, "mmap") if mapping.SIGBUS_GUARD else (mapping, "pread_into")
    real, calls = getattr(owner, name), []

    def shrank_once(*args):
        calls.append(args[1])
        if len(calls) == 1:
            if mapping.SIGBUS_GUARD:
                raise ValueError("mmap length is greater than file size")
            return 0  # nothing read: the file was cut to nothing after its fstat
        return real(*args)

    monkeypatch.setattr(owner, name, shrank_once)
    assert OffsetIndex(tmp_path / "s.index", 0).lookup(9) == (9, 200) and len(calls) == 2


@pytest.mark.native
def test_ceiling_entry_native_and_python_paths_agree_on_kafka_written_indexes():
    """ceiling_entry's one native call and its Python search give the same entries (and None past the
    last) on every offset and time index Kafka wrote in the reference corpus."""
    import reference as R
    from lookupd.log.logmanager import LogManager

    R.require()
    lm = LogManager([R.LOGS])
    native_answers = 0
    try:
        for llog in lm.logs():
            for seg in llog.segments():
                size = seg.size()
                for idx, limit in ((seg.offset_index, size), (seg.time_index, seg.time_index_limit(size))):
                    targets = targets_around(idx.entries_array(limit=limit)[0].tolist(), [0, -1])
                    native_answers += sum(idx._entry_fast(idx._search_target(t, False), True,
                                                          idx._value_limit(limit)) is not None for t in targets)
                    native = [idx.ceiling_entry(t, limit=limit) for t in targets]
                    idx._entry_fast = lambda *args: None  # this instance only: its Python search answers
                    try:
                        assert [idx.ceiling_entry(t, limit=limit) for t in targets] == native, idx.path
                    finally:
                        del idx._entry_fast
    finally:
        lm.close()
    assert native_answers > 1000


@pytest.mark.parametrize("native", [True, False])
def test_ceiling_entry_past_the_log_is_corrupt_on_both_paths(tmp_path, native):
    path = tmp_path / "b.index"
    write_offset_index(path, [(1, 100), (2, 5000)])
    idx = OffsetIndex(path, 0)
    idx.entries  # mapped, so the native path may answer
    if not native:
        idx._entry_fast = lambda *args: None
    with pytest.raises(CorruptIndexError, match=r"entry 1 \(offset 2\) points to position 5000, past the end of the log"):
        idx.ceiling_entry(2, limit=4000)


def test_cache_evicts_the_least_recently_used(tmp_path):
    """A search stamps its index; an open past the bound unmaps the indexes searched longest ago."""
    cache = IndexCache(max_open=3)
    idxs = _small_indexes(tmp_path, cache, 4)
    for idx in idxs[:3]:
        idx.lookup(5)
    idxs[0].lookup(5)
    idxs[1].lookup(5)  # by use, oldest first: 2, 0, 1 (opened 0, 1, 2)
    idxs[3].lookup(5)  # the fourth open: the cache keeps max_open - max_open // 16 = 2 of the others
    assert [idx.is_open for idx in idxs] == [False, True, False, True]
    assert cache.evictions == 2 and cache.open_count == 2
