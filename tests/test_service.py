"""The method table without sockets: param checks, answer shapes, error codes, auth, thread policy."""

from __future__ import annotations

import logging
import mmap
import os
import shutil
import time

import numpy as np
import pytest

import reference as R
from lookupd.errors import LookupdError
from lookupd.log.index import RESIDENCY_RECHECK_S
from lookupd.log.logmanager import LogManager
from lookupd.daemon.service import METHODS, NEEDS_THREAD, Counters, Limits, Service, Session, error_for

TRUSTED = Session(trusted=True)


@pytest.fixture(scope="module")
def service():
    R.require()
    lm = LogManager([R.LOGS])
    yield Service(lm, limits=Limits(max_read_bytes=1 << 16, max_batch_lookups=1000), counters=Counters(requests=7))
    lm.close()


def call(service, method, *params, session=TRUSTED):
    return service.call(method, list(params), session)


def code(service, method, *params, session=TRUSTED) -> str:
    with pytest.raises(LookupdError) as e:
        call(service, method, *params, session=session)
    return e.value.code


def needs_records():
    pytest.importorskip("lookupd.format.records", reason="lookupd/records.py (record decoding) is not in the tree yet")


def test_ping_and_stats(service):
    assert call(service, "ping") == "pong"
    s = call(service, "stats")
    assert set(s) == {"worker", "uptime", "requests", "errors", "connections", "partitions", "segments", "open_indexes",
                      "mapped_bytes", "lazy_loads", "evictions", "remote"}
    assert s["remote"] is None  # no [remote] tier configured
    assert s["requests"] == 7 and s["partitions"] == len(R.PARTITIONS) and s["segments"] > len(R.PARTITIONS)


def test_listings(service):
    parts = call(service, "partitions")
    assert [(p["topic"], p["partition"]) for p in parts] == sorted((p.rsplit("-", 1)[0], 0) for p in R.PARTITIONS)
    assert set(parts[0]) == {"topic", "partition", "log_dir", "segments", "log_start_offset", "log_end_offset",
                            "local_log_start_offset"}
    assert all(p["local_log_start_offset"] == p["log_start_offset"] for p in parts)  # no remote tier here
    segs = call(service, "segments", "plain", 0)
    assert [s["base_offset"] for s in segs] == [s["base_offset"] for s in R.answers("plain-0")["segments"]]
    assert set(segs[0]) == {"base_offset", "size", "active", "offset_index_entries", "time_index_entries",
                            "largest_timestamp", "tier"}
    assert {s["tier"] for s in segs} == {"local"}
    assert segs[-1]["active"] and not segs[0]["active"]


def test_lookups_shapes(service):
    assert call(service, "lookup_offset", "plain", 0, 100, "floor") == {"segment": 0, "offset": 89, "position": 13079}
    assert call(service, "lookup_offset", "bigbase", 0, 0, "floor") is None
    r = call(service, "lookup_timestamp", "plain", 0, 1700000004000, "ceiling")
    assert set(r) == {"segment", "timestamp", "offset", "position"} and r["timestamp"] >= 1700000004000
    assert call(service, "resolve_offset", "plain", 0, 100) == {"segment": 0, "base_offset": 90, "last_offset": 111,
                                                                "position": 25241, "size": 6513}
    assert call(service, "resolve_offset", "plain", 0, 5000) is None  # the log end offset
    txns = call(service, "aborted_transactions", "txn", 0, 0, 200)
    assert txns and set(txns[0]) == {"producer_id", "first_offset", "last_offset", "last_stable_offset"}
    r = call(service, "read", "plain", 0, 100, 10)
    assert set(r) == {"segment", "position", "next_offset", "records"}
    assert isinstance(r["records"], bytes) and len(r["records"]) == 6513 and r["next_offset"] == 112


def test_offset_for_timestamp_shape(service):
    needs_records()
    r = call(service, "offset_for_timestamp", "plain", 0, 0)
    assert r == {"offset": 0, "timestamp": r["timestamp"], "segment": 0, "position": 0}
    assert call(service, "offset_for_timestamp", "plain", 0, 1 << 62) is None
    cols = call(service, "offsets_for_timestamps", "plain", 0, [0, 1 << 62])
    assert cols["offset"] == [0, -1] and set(cols) == {"offset", "timestamp", "segment", "position"}


def test_columnar(service):
    cols = call(service, "lookup_offsets", "plain", 0, [100, -5, 10**9], "floor")
    assert cols == {"segment": [0, -1, cols["segment"][2]], "offset": [89, -1, cols["offset"][2]],
                    "position": [13079, -1, cols["position"][2]]}
    assert all(type(v) is int for v in cols["offset"])  # plain ints, not numpy scalars
    cols = call(service, "resolve_offsets", "plain", 0, [100, 5000])
    assert cols == {"segment": [0, -1], "base_offset": [90, -1], "last_offset": [111, -1], "position": [25241, -1],
                    "size": [6513, -1]}
    assert call(service, "lookup_offsets", "plain", 0, [], "ceiling") == {"segment": [], "offset": [], "position": []}


@pytest.mark.parametrize("method, params, want", [
    ("ping", [1], "INVALID_ARGUMENT"),
    ("lookup_offset", ["plain", 0, 1], "INVALID_ARGUMENT"),
    ("lookup_offset", ["plain", 0, 1, "sideways"], "INVALID_ARGUMENT"),
    ("lookup_offset", ["plain", 0, "1", "floor"], "INVALID_ARGUMENT"),
    ("lookup_offset", ["plain", 0, 1 << 63, "floor"], "INVALID_ARGUMENT"),
    ("lookup_offset", ["../etc", 0, 1, "floor"], "INVALID_ARGUMENT"),
    ("lookup_offset", ["plain\n", 0, 1, "floor"], "INVALID_ARGUMENT"),  # `$` would accept the newline
    ("lookup_offset", ["plain", "0", 1, "floor"], "INVALID_ARGUMENT"),
    ("lookup_offset", ["nosuch", 0, 1, "floor"], "UNKNOWN_PARTITION"),
    ("lookup_offset", ["plain", 7, 1, "floor"], "UNKNOWN_PARTITION"),
    ("resolve_offset", ["plain", 0, 5001], "OFFSET_OUT_OF_RANGE"),
    ("resolve_offset", ["plain", 0, -1], "INVALID_ARGUMENT"),
    ("aborted_transactions", ["txn", 0, 10, 5], "INVALID_ARGUMENT"),
    ("read", ["plain", 0, 0, 1 << 17], "TOO_LARGE"),
    ("read", ["plain", 0, 0, -1], "INVALID_ARGUMENT"),
    ("lookup_offsets", ["plain", 0, list(range(1001)), "floor"], "TOO_LARGE"),
    ("lookup_offsets", ["plain", 0, [1, 2.5], "floor"], "INVALID_ARGUMENT"),
    ("lookup_offsets", ["plain", 0, [1, "2"], "floor"], "INVALID_ARGUMENT"),
    ("lookup_offsets", ["plain", 0, [[1]], "floor"], "INVALID_ARGUMENT"),
    ("lookup_offsets", ["plain", 0, [1 << 64], "floor"], "INVALID_ARGUMENT"),
    ("lookup_offsets", ["plain", 0, [1 << 63], "floor"], "INVALID_ARGUMENT"),
    ("lookup_offsets", ["plain", 0, 5, "floor"], "INVALID_ARGUMENT"),
    ("resolve_offsets", ["plain", 0, [True]], "INVALID_ARGUMENT"),
    ("lookup_offset", ["plain", 0, 1, ["floor"] * 100_000], "INVALID_ARGUMENT"),
    # One timestamp range for every method: int64 >= 0, or ListOffsets' -1, -2, -3.
    ("lookup_timestamp", ["plain", 0, -(1 << 63), "floor"], "INVALID_ARGUMENT"),
    ("lookup_timestamp", ["plain", 0, -4, "ceiling"], "INVALID_ARGUMENT"),
    ("offset_for_timestamp", ["plain", 0, -(1 << 63)], "INVALID_ARGUMENT"),
    ("offset_for_timestamp", ["plain", 0, -6], "INVALID_ARGUMENT"),
    ("offsets_for_timestamps", ["plain", 0, [5, -6]], "INVALID_ARGUMENT"),
    ("offsets_for_timestamps", ["plain", 0, [-(1 << 63)]], "INVALID_ARGUMENT"),
    ("no_such_method", [], "UNKNOWN_METHOD"),
    ("auth", [], "INVALID_ARGUMENT"),
    ("auth", [5], "INVALID_ARGUMENT"),
])
def test_rejections(service, method, params, want):
    assert code(service, method, *params) == want


def test_every_method_has_a_documented_arity(service):
    for name, m in METHODS.items():
        with pytest.raises(LookupdError) as e:
            service.call(name, [None] * (len(m.params) + 1), TRUSTED)
        assert e.value.code == "INVALID_ARGUMENT" and f"takes {len(m.params)} params" in str(e.value)


def test_auth_with_a_token(service):
    svc = Service(service.manager, token="s3cret")
    tcp = Session(trusted=False)
    assert code(svc, "ping", session=tcp) == "UNAUTHORIZED"
    assert code(svc, "lookup_offset", "plain", 0, 1, "floor", session=tcp) == "UNAUTHORIZED"
    assert code(svc, "auth", "wrong", session=tcp) == "UNAUTHORIZED"
    assert code(svc, "ping", session=tcp) == "UNAUTHORIZED"
    assert call(svc, "auth", "s3cret", session=tcp) is True
    assert call(svc, "ping", session=tcp) == "pong"
    assert call(svc, "ping", session=Session(trusted=True)) == "pong"  # Unix socket peers are trusted
    # no token configured (a loopback TCP listener): nothing to check
    assert call(service, "ping", session=Session(trusted=False)) == "pong"


def test_error_mapping(caplog):
    from lookupd.errors import OffsetOutOfRange
    assert error_for(OffsetOutOfRange("x")) == {"code": "OFFSET_OUT_OF_RANGE", "message": "x"}
    with caplog.at_level(logging.WARNING):
        assert error_for(FileNotFoundError(2, "No such file", "/x.log"), "read")["code"] == "UNAVAILABLE"
        assert not any(r.exc_info for r in caplog.records)
        internal = error_for(ZeroDivisionError("boom"), "read")
    assert internal["code"] == "INTERNAL" and "ZeroDivisionError" in internal["message"]
    assert any(r.exc_info for r in caplog.records)  # a bug is logged with its traceback


def evict_from_page_cache(path: str) -> None:
    """Drop a file's pages from the page cache. POSIX_FADV_DONTNEED can leave a page that sits in
    another CPU's batch of recently used pages, and readahead started by earlier reads can bring
    pages back when its I/O completes, so it is asked again until mincore (through a map of our
    own, never touched) finds none of the file's pages in memory twice, 20 ms apart."""
    from lookupd.log import _native

    page = mmap.PAGESIZE
    size = os.path.getsize(path)
    fd = os.open(path, os.O_RDONLY)
    mm = mmap.mmap(fd, size, prot=mmap.PROT_READ)
    view = np.frombuffer(mm, np.uint8)
    try:
        clean = 0
        for _ in range(100):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            if any(_native.resident(view.ctypes.data + at, min(page, size - at)) for at in range(0, size, page)):
                clean = 0
            else:
                clean += 1
                if clean == 2:
                    return
            time.sleep(0.02)
        pytest.fail(f"{path} stayed in the page cache after 100 POSIX_FADV_DONTNEED")
    finally:
        del view
        mm.close()
        os.close(fd)


def private_corpus(root) -> str:
    """A copy of the reference corpus that no other process knows of, its pages written to disk: a page
    another process has mapped (a daemon of another test, a parallel run over the same corpus) stays
    in the page cache whatever we advise, and the eviction below would then fail."""
    logs = os.path.join(root, "logs")
    for name in R.PARTITIONS:
        shutil.copytree(R.log_dir(name), os.path.join(logs, name))
    for d, _, files in os.walk(logs):
        for f in files:
            fd = os.open(os.path.join(d, f), os.O_RDONLY)
            os.fsync(fd)  # clean pages: POSIX_FADV_DONTNEED drops them at once
            os.close(fd)
    return logs


@pytest.mark.native
def test_thread_policy(tmp_path):
    """A lookup runs on the event loop when all it reads is in memory; cold data (an index not mapped
    yet, `.log` pages not in the page cache) sends it to a thread; listings and columnar calls
    always go there."""
    R.require()
    logs = private_corpus(tmp_path)
    lm = LogManager([logs])
    try:
        svc = Service(lm)
        ts = lm.get("large", 0).offset_for_timestamp(0).timestamp + 1000
        hot = {"lookup_offset": ["large", 0, 1000, "floor"], "lookup_timestamp": ["large", 0, ts, "floor"],
               "resolve_offset": ["large", 0, 1000], "offset_for_timestamp": ["large", 0, ts],
               "read": ["large", 0, 1000, 1], "aborted_transactions": ["txn", 0, 0, 300]}
        fresh = LogManager([logs])
        for m, p in hot.items():
            if m != "aborted_transactions":  # reads no index: inline as soon as its pages are cached
                assert Service(fresh).call_inline(m, p, TRUSTED) is NEEDS_THREAD, m  # no index mapped yet
        fresh.close()
        for m, p in hot.items():
            want = call(svc, m, *p)  # the worker thread's way: maps and opens what it needs
            assert svc.call_inline(m, p, TRUSTED) == want, m
        assert svc.call_inline("lookup_offset", ["plain", 0, 100, "floor"], TRUSTED) is NEEDS_THREAD  # not mapped
        with pytest.raises(LookupdError, match="not in the log dirs"):  # a cheap error is answered inline
            svc.call_inline("lookup_offset", ["nosuch", 0, 1, "floor"], TRUSTED)
        assert svc.call_inline("ping", [], TRUSTED) == "pong"
        assert svc.call_inline("stats", [], TRUSTED)["partitions"] == len(R.PARTITIONS)
        for m in ("partitions", "segments", "lookup_offsets", "resolve_offsets", "offsets_for_timestamps"):
            assert svc.call_inline(m, ["large", 0, [1000], "floor"][:len(METHODS[m].params)], TRUSTED) is NEEDS_THREAD
        assert Service(lm, inline_hot_lookups=False).call_inline("lookup_offset", hot["lookup_offset"],
                                                                   TRUSTED) is NEEDS_THREAD
        # The .log's pages leave the page cache: the batch scan would wait for the disk.
        seg = lm.get("large", 0).resolve_offset(1000).segment
        # A read with RWF_NOWAIT that misses may start readahead, and on a fast virtual disk that can
        # finish before the read returns (then it answers): evicted again, a later try misses.
        log_path = os.path.join(logs, "large-0", f"{seg:020d}.log")
        tries = []
        while len(tries) < 20 and (not tries or tries[-1] is not NEEDS_THREAD):
            evict_from_page_cache(log_path)
            tries.append(svc.call_inline("resolve_offset", hot["resolve_offset"], TRUSTED))
        assert tries[-1] is NEEDS_THREAD, f"answered inline {len(tries)} times with the .log evicted each time"
        assert call(svc, "resolve_offset", *hot["resolve_offset"]) == svc.call_inline(
            "resolve_offset", hot["resolve_offset"], TRUSTED)  # cached again by the threaded call
        # A mapped offset index's pages leave memory (our map dropped, then the page cache): a
        # lookup would fault on the disk, on the native one-call path as on the Python one.
        index = lm.get("large", 0).segment(seg).offset_index
        mapping = index._state.mapping
        mapping.mm.madvise(mmap.MADV_DONTNEED)
        evict_from_page_cache(index.path)
        assert not mapping.resident()
        time.sleep(RESIDENCY_RECHECK_S)
        assert svc.call_inline("lookup_offset", hot["lookup_offset"], TRUSTED) is NEEDS_THREAD
        want = call(svc, "lookup_offset", *hot["lookup_offset"])  # the thread's read brings the pages back
        time.sleep(RESIDENCY_RECHECK_S)
        assert svc.call_inline("lookup_offset", hot["lookup_offset"], TRUSTED) == want
    finally:
        lm.close()


def test_concurrent_first_lookups_agree():
    """Threads racing to map the same cold index all get the right floor entry (not the segment start)."""
    import threading
    R.require()
    for attempt in range(5):
        lm = LogManager([R.LOGS])
        try:
            svc = Service(lm)
            targets = [35222 + 997 * i for i in range(32)]
            got = {}
            barrier = threading.Barrier(8)

            def worker(k):
                barrier.wait()
                for t in targets[k::8]:
                    got[t] = call(svc, "lookup_offset", "large", 0, t, "floor")

            threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            # large-0 indexes every batch: the floor of t is t itself
            assert {t: (g["segment"], g["offset"]) for t, g in got.items()} == {t: (0, t) for t in targets}
        finally:
            lm.close()


@pytest.mark.parametrize("method", ["lookup_timestamp", "offset_for_timestamp", "offsets_for_timestamps"])
def test_every_timestamp_method_accepts_the_list_offsets_specials(service, method):
    for ts in (-1, -2, -3, 0, (1 << 63) - 1):
        params = ["plain", 0, [ts] if method == "offsets_for_timestamps" else ts]
        call(service, method, *params, *(["floor"] if method == "lookup_timestamp" else []))


def test_a_partition_deleted_while_listed_drops_out_of_partitions(tmp_path):
    """`partitions` answers for the partitions that exist, not UNAVAILABLE for everyone."""
    for name in ("plain-0", "txn-0"):
        shutil.copytree(R.log_dir(name), tmp_path / name)
    lm = LogManager([str(tmp_path)])
    try:
        svc = Service(lm)
        assert [llog.topic for llog in lm.logs()] == ["plain", "txn"]
        shutil.rmtree(tmp_path / "txn-0")  # the broker deletes it before our next rescan
        assert [p["topic"] for p in call(svc, "partitions")] == ["plain"]
    finally:
        lm.close()


def test_kip_1005_targets_on_a_local_partition(service):
    """-4 (earliest local) is the log start without a remote tier; -5 (latest tiered) is offset -1, as
    Kafka answers for a partition with nothing in remote storage."""
    assert call(service, "offset_for_timestamp", "plain", 0, -4) == call(service, "offset_for_timestamp", "plain", 0, -2)
    assert call(service, "offset_for_timestamp", "plain", 0, -5) == {"offset": -1, "timestamp": -1, "segment": -1,
                                                                     "position": -1}
    cols = call(service, "offsets_for_timestamps", "plain", 0, [-4, -5])
    assert cols["offset"] == [call(service, "offset_for_timestamp", "plain", 0, -2)["offset"], -1]


def test_unknown_partition_hints_only_at_topics_the_caller_may_describe(service):
    """Issue 44: UNKNOWN_PARTITION names the nearest topics, never one an [[acl]] hides from the caller."""
    from lookupd.daemon.acl import Acl, Rule

    with pytest.raises(LookupdError, match=r"; nearest topics: plain$"):
        call(service, "resolve_offset", "plian", 0, 1)
    with pytest.raises(LookupdError, match=r"; topic plain has partitions 0$"):
        call(service, "resolve_offset", "plain", 3, 1)
    with pytest.raises(LookupdError, match=r"; nearest topics: large$"):
        call(service, "resolve_offset", "larg", 0, 1)
    # CN=a may describe `larg` (so the call gets past the ACL) and plain, not large.
    restricted = Service(service.manager, acl=Acl([Rule("CN=a", ("larg", "plain"), frozenset({"describe"}))]))
    a = Session(trusted=False, authenticated=True, principal="CN=a")
    with pytest.raises(LookupdError, match=r"; no topic served has a name near it \(the partitions method lists them\)$"):
        call(restricted, "resolve_offset", "larg", 0, 1, session=a)
    with pytest.raises(LookupdError, match=r"; topic plain has partitions 0$"):
        call(restricted, "resolve_offset", "plain", 3, 1, session=a)
