"""Cold start: opening a log dir of many segments (time, RSS) and the first lookup on a cold segment.

Each measurement runs in a fresh Python process. Before it, the page cache is dropped
(`/proc/sys/vm/drop_caches`, when writable: root on a machine of our own) or at least the
segment's files are evicted with POSIX_FADV_DONTNEED, so the first lookup really reads disk.

Run: python bench/bench_coldstart.py [--quick] [--json OUT]
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402
from common import Figure  # noqa: E402

from lookupd.format.builder import build_batch  # noqa: E402
from lookupd.format.names import segment_file_name  # noqa: E402

MEASURE = r"""
import json, os, sys, time
t0 = time.perf_counter()
from lookupd.log.logmanager import LogManager
t1 = time.perf_counter()
lm = LogManager([sys.argv[1]])
t2 = time.perf_counter()
# VmHWM, not ru_maxrss: the latter keeps the parent's peak across fork+exec.
rss = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM:"))
log = lm.get("cold", 0)
target = int(sys.argv[2])
t3 = time.perf_counter()
loc = log.resolve_offset(target)
t4 = time.perf_counter()
log.resolve_offset(target)
t5 = time.perf_counter()
assert loc is not None and loc.base_offset <= target <= loc.last_offset
print(json.dumps({"import_s": t1 - t0, "open_s": t2 - t1, "rss_bytes": rss, "first_lookup_s": t4 - t3,
                  "second_lookup_s": t5 - t4, "segments": len(log.base_offsets)}))
"""


def build(directory: str, segments: int, records_per_segment: int = 20) -> None:
    """`segments` rolled segments of one batch each, with trimmed indexes as a broker leaves them."""
    part = os.path.join(directory, "cold-0")
    os.makedirs(part)
    for i in range(segments):
        base = i * records_per_segment
        batch = build_batch([(1_700_000_000_000 + base + k, None, b"x" * 50, ()) for k in range(records_per_segment)],
                            base_offset=base)
        with open(os.path.join(part, segment_file_name(base, ".log")), "wb") as f:
            f.write(batch)
        open(os.path.join(part, segment_file_name(base, ".index")), "wb").close()
        with open(os.path.join(part, segment_file_name(base, ".timeindex")), "wb") as f:
            f.write((1_700_000_000_000 + base + records_per_segment - 1).to_bytes(8, "big")
                    + (records_per_segment - 1).to_bytes(4, "big"))


def evict(directory: str, base: int) -> str:
    try:
        subprocess.run(["sync"], check=True)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return "drop_caches"
    except OSError:
        for suffix in (".log", ".index", ".timeindex"):
            fd = os.open(os.path.join(directory, "cold-0", segment_file_name(base, suffix)), os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)
        return "fadvise"


def measure(directory: str, segments: int, runs: int) -> list[dict]:
    out = []
    for r in range(runs):
        seg = (segments * (2 * r + 1)) // (2 * runs)  # a different segment each run
        how = evict(directory, seg * 20)
        p = subprocess.run([sys.executable, "-c", MEASURE, directory, str(seg * 20 + 7)], capture_output=True,
                           text=True, check=True)
        res = json.loads(p.stdout)
        res["evicted_with"] = how
        out.append(res)
    return out


def run(quick: bool = False) -> list[Figure]:
    segments = 20_000 if quick else 100_000
    runs = 3 if quick else 5
    d = tempfile.mkdtemp(dir=os.environ.get("BENCH_DIR", "/var/tmp"))
    try:
        build(d, segments)
        res = measure(d, segments, runs)
    finally:
        shutil.rmtree(d)
    p = {"segments": segments, "evicted_with": res[0]["evicted_with"]}
    return [
        Figure(f"open a log dir of {segments:,} segments", "ms", [r["open_s"] * 1e3 for r in res],
               group="coldstart", params=p),
        Figure(f"RSS after opening {segments:,} segments", "MiB", [r["rss_bytes"] / 2**20 for r in res],
               group="coldstart", params=p),
        Figure("first lookup on a cold segment (page cache dropped)", "ms", [r["first_lookup_s"] * 1e3 for r in res],
               group="coldstart", params=p),
        Figure("second lookup on the same segment", "ms", [r["second_lookup_s"] * 1e3 for r in res],
               group="coldstart", params=p),
    ]


if __name__ == "__main__":
    common.main(run, __doc__)
