"""In-process index lookups: warm-section vs plain search, vectorised many-lookups, page faults.

Run: python bench/bench_index.py [--quick] [--json OUT]
"""

from __future__ import annotations

import mmap
import os
import random
import resource
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402
from common import Figure, per_call_ns, ratio, repeat  # noqa: E402

from lookupd.log.index import OffsetIndex  # noqa: E402

ENTRY = np.dtype([("key", ">i4"), ("value", ">i4")])


def plain_floor(idx, target: int) -> int:
    """A textbook binary search over the index's valid entries: what the warm section is compared with."""
    from lookupd.log import search

    t = idx._search_target(target, False)
    return idx.run_search(lambda buf, n: search.plain_floor_slot(buf, n, idx.LAYOUT, t))


def write_index(path: str, n: int, capacity: int | None = None) -> None:
    """n entries (relative offset 3i+1, position 64i+64), zero-filled up to `capacity` entries."""
    arr = np.empty(n, ENTRY)
    arr["key"] = np.arange(n, dtype=np.int64) * 3 + 1
    arr["value"] = np.arange(n, dtype=np.int64) * 64 + 64
    with open(path, "wb") as f:
        f.write(arr.tobytes())
        if capacity:
            f.truncate(capacity * 8)


def latency(path: str, n: int, calls: int, times: int) -> list[Figure]:
    idx = OffsetIndex(path, 0)
    rng = random.Random(1)
    rand = [rng.randrange(0, 3 * n) for _ in range(calls)]
    tail = [3 * n - rng.randrange(0, 3 * 1000) for _ in range(calls)]
    out = []
    for label, targets in (("random", rand), ("tail", tail)):
        for algo, fn in (("warm-section", idx.floor_slot), ("plain", lambda t: plain_floor(idx, t))):
            it = iter(targets * (times + 2))
            values = repeat(per_call_ns(lambda: fn(next(it)), calls), times)
            out.append(Figure(f"floor lookup, {label} target, {algo} search", "ns/lookup", values,
                              group="index-latency", params={"entries": n, "target": label, "search": algo}))
    return out


def many(path: str, n: int, batch: int, times: int, kind: str) -> list[Figure]:
    """Bulk floor lookups: random targets, or sorted targets in the last 10% (a catching-up consumer)."""
    idx = OffsetIndex(path, 0)
    rng = np.random.default_rng(2)
    if kind == "random":
        targets = rng.integers(0, 3 * n, batch, dtype=np.int64)
    else:
        targets = np.sort(rng.integers(3 * n * 9 // 10, 3 * n, batch, dtype=np.int64))
    native = np.frombuffer(open(path, "rb").read(), ENTRY)["key"].astype(np.int32)
    rel = targets.astype(np.int32)  # the same dtype as the keys: numpy's best case

    def ours() -> float:
        import time
        t0 = time.perf_counter_ns()
        idx.lookup_many(targets)
        return (time.perf_counter_ns() - t0) / batch

    def ceiling() -> float:
        import time
        t0 = time.perf_counter_ns()
        np.searchsorted(native, rel, side="right")
        return (time.perf_counter_ns() - t0) / batch

    return [
        Figure(f"many-lookups ({batch:,} {kind} targets), lookupd", "ns/lookup", repeat(ours, times),
               group="index-many", params={"entries": n, "batch": batch, "targets": kind, "impl": "lookupd"}),
        Figure(f"many-lookups ({batch:,} {kind} targets), numpy searchsorted", "ns/lookup", repeat(ceiling, times),
               group="index-many", params={"entries": n, "batch": batch, "targets": kind, "impl": "numpy"}),
    ]


def _majflt() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_majflt


def page_faults(directory: str, start_entries: int, lookups: int, search: str) -> float:
    """Major faults per 10,000 tail lookups on a growing index evicted from the page cache first.

    The index holds `start_entries`; it is mapped, then evicted (our map's pages dropped with
    MADV_DONTNEED, the file's with POSIX_FADV_DONTNEED). Then, as a broker would, entries are
    appended while lookups near the tail run: appended pages are in the page cache, old ones
    are not, so every fault is a page the search touched that nothing else keeps warm.
    The map is set MADV_RANDOM: with read-around, one fault on this VM's disk pulls in
    megabytes and hides which pages a search touches, the quantity the warm section is about.
    """
    path = os.path.join(directory, f"grow-{search}.index")
    capacity = start_entries + lookups
    write_index(path, start_entries, capacity)
    idx = OffsetIndex(path, 0)
    idx.set_live(True)
    idx.floor_slot(1)
    fd = os.open(path, os.O_RDWR)
    try:
        os.fsync(fd)
        idx._state.mapping.mm.madvise(mmap.MADV_RANDOM)
        idx._state.mapping.mm.madvise(mmap.MADV_DONTNEED)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        fn = idx.floor_slot if search == "warm-section" else (lambda t: plain_floor(idx, t))
        rng = random.Random(3)
        n = start_entries
        before = _majflt()
        for i in range(lookups):
            if i % 8 == 0:  # the broker appends an entry every few lookups
                os.pwrite(fd, np.array([(3 * n + 1, 64 * n + 64)], ENTRY).tobytes(), n * 8)
                n += 1
            fn(3 * n - rng.randrange(0, 300))
        faults = _majflt() - before
    finally:
        os.close(fd)
        idx.close()
        os.remove(path)
    return faults * 10_000 / lookups


def run(quick: bool = False) -> list[Figure]:
    n = 1_000_000
    times = 3 if quick else 7
    figures = []
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR", "/var/tmp")) as d:
        path = os.path.join(d, "big.index")
        write_index(path, n)
        figures += latency(path, n, 20_000 if quick else 100_000, times)
        for batch in ((10_000,) if quick else (1_000, 10_000, 100_000)):
            for kind in ("random", "sorted-tail"):
                figures += many(path, n, batch, times, kind)
        sizes = (250_000, 1_000_000) if quick else (62_500, 250_000, 1_000_000, 2_000_000)
        for size in sizes:
            for search in ("warm-section", "plain"):
                values = [page_faults(d, size, 10_000 if quick else 20_000, search) for _ in range(1 if quick else 3)]
                figures.append(Figure(f"major faults per 10k tail lookups, {size:,} entries, {search}", "faults",
                                      values, group="index-faults", params={"entries": size, "search": search}))
    return figures


def ratios(figures: list[Figure]) -> list[dict | None]:
    out = []
    for target in ("random", "tail"):
        out.append(ratio(f"warm-section vs plain search, {target} target", figures,
                         f"floor lookup, {target} target, warm-section search",
                         f"floor lookup, {target} target, plain search",
                         "latency of one in-process floor lookup, warm-section search over plain (below 1: faster)"))
    for f in figures:
        p = f.params
        if f.group == "index-many" and p.get("impl") == "lookupd":
            out.append(ratio(f"many-lookups vs numpy searchsorted, {p['batch']:,} {p['targets']} targets", figures,
                             f.name, f.name.replace("lookupd", "numpy searchsorted"),
                             "ns per lookup of lookupd's bulk path over numpy's own best case on a native copy"))
        if f.group == "index-faults" and p.get("search") == "plain":
            warm = f.name.replace("plain", "warm-section")
            out.append(ratio(f"page faults, plain vs warm-section search, {p['entries']:,} entries", figures,
                             f.name, warm, "major faults of a plain binary search over the warm-section search"))
    return out


if __name__ == "__main__":
    common.main(run, __doc__)
