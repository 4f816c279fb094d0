"""Benchmark: partition-level calls on LocalLog in process, warm, against issue 11's targets.

The measurement is `bench_daemon.in_process` (what `bench/run.py --only daemon` reports): random
targets with a fixed seed within each `lookupd demo-data` partition, the median over partitions.

    python bench/bench_inprocess.py [--dir DEMO] [--calls N] [--repeat R] [--profile METHOD]

prints microseconds per call per method (the median of R runs); `--profile` runs cProfile over
one method's calls instead.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import random
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench_daemon import IN_PROCESS_TARGETS_US, in_process  # noqa: E402

from lookupd.tools.demo import generate  # noqa: E402


def profile(demo_dir: str, method: str, calls: int) -> None:
    """cProfile over `calls` random-target calls of `method` on every demo-data partition."""
    from lookupd.log.logmanager import LogManager

    lm = LogManager([demo_dir])
    rnd = random.Random(1)
    work = []
    for llog in lm.logs():
        start, end = llog.log_start_offset, llog.log_end_offset
        if end - start < 10:
            continue
        first, last = llog.offset_for_timestamp(0).timestamp, llog.offset_for_timestamp(-3).timestamp
        by_offset = method in ("lookup_offset", "resolve_offset")
        work += [(getattr(llog, method), rnd.randrange(start, end) if by_offset else rnd.randint(first, last))
                 for _ in range(calls)]
    for fn, a in work:
        fn(a)
    prof = cProfile.Profile()
    prof.enable()
    for fn, a in work:
        fn(a)
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    lm.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", help="a demo-data dir (default: generated in a temporary dir)")
    ap.add_argument("--calls", type=int, default=2000, help="calls per method and partition")
    ap.add_argument("--repeat", type=int, default=5, help="runs; the median is printed")
    ap.add_argument("--profile", metavar="METHOD", choices=sorted(IN_PROCESS_TARGETS_US))
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        demo = args.dir or os.path.join(tmp, "demo")
        if not args.dir:
            generate(demo, records=20_000)
        if args.profile:
            profile(demo, args.profile, args.calls)
            return
        runs = [in_process(demo, args.calls) for _ in range(args.repeat)]
    for method, target in IN_PROCESS_TARGETS_US.items():
        us = statistics.median(r[method] for r in runs)
        print(f"{method:22} {us:7.2f} us  (target {target} us; runs {', '.join(str(r[method]) for r in runs)})")


if __name__ == "__main__":
    main()
