"""Lookups on tiered (remote) segments against the same lookups on local segments, in the same run.

Warm: in process (the log layer) and through the daemon (a subprocess configured with a [remote]
table), remote segments after their indexes and chunks are cached, against a fully local copy of the
same partition. Cold: a new cache per lookup, counting the GETs and bytes each lookup makes (target:
offset_for_timestamp into a remote segment in at most 3 GETs: manifest, indexes, one chunk).
The S3 server is SeaweedFS on loopback (lookupd/tools/s3local.py), the partition the reference corpus's plain-0
tiered at its middle segment (tests/tiered_helpers.py).

Run: python bench/bench_tiered.py [--quick] [--json OUT]
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests"))
import common  # noqa: E402
from common import Figure, per_call_ns, ratio, repeat  # noqa: E402

PARTITION = "plain-0"
WARM_ROUNDS = 8  # calls of every target before a daemon's remote figures: its segments get fetched whole
# (about 36 reads of each of plain-0's 11 remote segments, over MATERIALIZE_AFTER_READS)
TOPIC = "plain"
# (method, params after topic and partition, from a target offset or timestamp)
METHODS = {
    "resolve_offset": lambda o, ts: [o],
    "lookup_offset": lambda o, ts: [o, "floor"],
    "offset_for_timestamp": lambda o, ts: [ts],
    "read": lambda o, ts: [o, 1],
}


def _targets(tiered_below: int, n: int) -> list[tuple[int, int]]:
    """(offset, timestamp) pairs of records in the remote segments (all below `tiered_below`)."""
    import reference as R

    rng = random.Random(3)
    batches = [b for b in R.batches(PARTITION) if b["last_offset"] < tiered_below]
    picked = [rng.choice(batches) for _ in range(n)]
    return [(b["base_offset"], b["max_timestamp"]) for b in picked]


def _setup(root: Path, server):
    import reference as R
    from tiered_helpers import tier_partition
    from lookupd.tools.tieredwriter import Options, local_segments

    cut = len(local_segments(R.log_dir(PARTITION))) // 2
    # The plugin's default chunk size is 4 MiB; a 64 KiB chunk keeps a cold read's GET small.
    t = tier_partition(root, R.log_dir(PARTITION), server, cut=cut, opts=Options(chunk_size=64 * 1024))
    return t, t.uploaded[-1].facts.end_offset + 1


def _wait_whole(manager, targets, warm, timeout: float = 60.0) -> None:
    """Until every remote segment the targets are in is fetched whole (what a warm remote segment is:
    see lookupd/log/tiered/segment.py)."""
    import bisect

    log = manager.get(TOPIC, 0)
    bases = log.base_offsets
    remote = {log.segment(bases[bisect.bisect_right(bases, o) - 1]) for o, _ in targets}
    deadline = time.monotonic() + timeout
    while not all(seg.log.file.whole for seg in remote):
        if time.monotonic() > deadline:
            raise RuntimeError("remote segments were not fetched whole in time")
        warm()
        time.sleep(0.05)


def in_process(t, targets, calls: int, times: int) -> list[Figure]:
    from lookupd.daemon.service import Service, Session
    session = Session(trusted=True)
    lm, tm = t.managers()
    out = []
    try:
        for tier, manager in (("local", lm), ("remote", tm)):
            s = Service(manager)
            for method, params in METHODS.items():
                plist = [[TOPIC, 0, *params(o, ts)] for o, ts in targets]
                def warm():  # indexes fetched and mapped, chunks cached, hot segments fetched whole
                    for p in plist:
                        s.call(method, p, session)
                warm()
                if tier == "remote":
                    _wait_whole(manager, targets, warm)
                it = iter(plist * (times + 2) * (calls // len(plist) + 1))
                values = repeat(per_call_ns(lambda: s.call(method, next(it), session), calls), times)
                out.append(Figure(f"in process {method}, {tier} segment (warm)", "ns/lookup", values,
                                  group="tiered-warm", params={"tier": tier, "method": method, "via": "in process"}))
    finally:
        lm.close()
        tm.close()
    return out


def through_daemon(t, targets, calls: int, times: int, workdir: str) -> list[Figure]:
    from daemon_helpers import start_daemon, stop_daemon

    from lookupd.rpc.client import Client

    out = []
    for tier, log_dir in (("local", t.local_dir), ("remote", t.tiered_dir)):
        sock = os.path.join(workdir, f"{tier}.sock")
        conf = os.path.join(workdir, f"{tier}.toml")
        with open(conf, "w") as f:
            f.write(f'log_dirs = ["{log_dir}"]\nsocket = "{sock}"\n')
            if tier == "remote":
                c = t.config
                f.write(f'[remote]\nbucket = "{c.bucket}"\nendpoint_url = "{c.endpoint_url}"\n'
                        f'cache_dir = "{c.cache_dir}-daemon"\n')
        proc = start_daemon(["--config", conf], workdir, sock)
        try:
            with Client(sock) as client:
                for method, params in METHODS.items():
                    plist = [[TOPIC, 0, *params(o, ts)] for o, ts in targets]
                    for _ in range(2 if tier == "local" else WARM_ROUNDS):  # WARM_ROUNDS x 50 targets
                        for p in plist:
                            client.call(method, *p)
                    it = iter(plist * (times + 2) * (calls // len(plist) + 1))
                    values = repeat(per_call_ns(lambda: client.call(method, *next(it)), calls), times)
                    out.append(Figure(f"daemon {method}, {tier} segment (warm)", "us/lookup",
                                      [v / 1000 for v in values], group="tiered-warm-daemon",
                                      params={"tier": tier, "method": method, "via": "daemon"}))
        finally:
            stop_daemon(proc)
    return out


def cold(t, targets, n: int) -> list[Figure]:
    """Each lookup with a new remote tier and an empty cache: GETs and bytes per lookup, and its time."""
    import dataclasses

    from lookupd.daemon.service import Service, Session
    from lookupd.log.logmanager import LogManager
    from lookupd.log.tiered.listing import RemoteTier

    session = Session(trusted=True)
    out = []
    for method, params in METHODS.items():
        gets, nbytes, ms = [], [], []
        for i, (o, ts) in enumerate(targets[:n]):
            cache = f"{t.config.cache_dir}-cold-{method}-{i}"
            tier = RemoteTier(dataclasses.replace(t.config, cache_dir=cache))
            lm = LogManager([t.tiered_dir], remote=tier)  # lists the bucket: LISTs, no GET
            try:
                r0, b0 = tier.store.requests, tier.store.bytes_fetched
                t0 = time.perf_counter()
                Service(lm).call(method, [TOPIC, 0, *params(o, ts)], session)
                ms.append((time.perf_counter() - t0) * 1000)
                gets.append(tier.store.requests - r0)
                nbytes.append(tier.store.bytes_fetched - b0)
            finally:
                lm.close()
                shutil.rmtree(cache, ignore_errors=True)
        p = {"method": method}
        out.append(Figure(f"cold {method}: GETs per lookup", "GETs", gets, group="tiered-cold", params=p))
        out.append(Figure(f"cold {method}: bytes fetched per lookup", "bytes", nbytes, group="tiered-cold", params=p))
        out.append(Figure(f"cold {method}: time per lookup", "ms", ms, group="tiered-cold", params=p))
    return out


def run(quick: bool = False) -> list[Figure]:
    from lookupd.tools.s3local import running_server

    calls, times, n = (300, 3, 5) if quick else (2000, 5, 20)
    root = Path(tempfile.mkdtemp(prefix="lookupd-bench-tiered-"))
    try:
        with running_server() as server:
            t, below = _setup(root, server)
            targets = _targets(below, 50)
            figures = in_process(t, targets, calls, times)
            figures += through_daemon(t, targets, calls // 4, times, tempfile.mkdtemp(prefix="lkdb", dir="/tmp"))
            figures += cold(t, targets, n)
            return figures
    finally:
        shutil.rmtree(root, ignore_errors=True)


def ratios(figures: list[Figure]) -> list[dict | None]:
    out = []
    for method in METHODS:
        out.append(ratio(f"warm remote vs local {method}, in process", figures,
                         f"in process {method}, remote segment (warm)", f"in process {method}, local segment (warm)",
                         "a warm lookup on a remote segment over the same lookup on a local one (target <= 1.5)"))
        out.append(ratio(f"warm remote vs local {method}, through the daemon", figures,
                         f"daemon {method}, remote segment (warm)", f"daemon {method}, local segment (warm)",
                         "round trip of a warm lookup on a remote segment over the same on a local one"))
    return out


if __name__ == "__main__":
    common.main(run, __doc__)
