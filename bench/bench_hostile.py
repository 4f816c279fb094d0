"""A hostile or broken bucket (issue #39), measured through the real daemon (a subprocess) against the issue's
targets, in the same run:

- scale: the daemon's start until `partitions` answers, and its RSS then, with SCALE_SEGMENTS remote segments
  in one partition below a local tail (target: under 10 s and 200 MB), the remote segments known from the
  `__remote_log_metadata` records as a broker's log dirs hold them; and with manifests only (no metadata
  topic: one GET per manifest at the first start), MANIFEST_ONLY_SEGMENTS of them;
- a planted object: the daemon's peak RSS after PLANTED_READERS concurrent reads of a planted upload, over its
  peak after the same reads of a healthy one, one figure per kind of object (target: at most 64 MiB);
- a stalled store: the p99 of local lookups while every GET waits STALL_S and more remote calls than worker
  threads wait on it, over the same p99 unstalled (target: at most 2).

The S3 server is SeaweedFS on loopback (tests/s3server.py); the healthy partition is the reference corpus's
plain-0 tiered at its fourth segment (tests/tiered_helpers.py), the planted objects those of
tests/test_hostile_bucket.py. Run: python bench/bench_hostile.py [--quick] [--json OUT]
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests"))
import common  # noqa: E402
from common import Figure, ratio  # noqa: E402

SCALE_SEGMENTS = 50_000          # the issue's: remote segments in one partition (quick: QUICK_SEGMENTS)
MANIFEST_ONLY_SEGMENTS = 5_000   # with no metadata topic each manifest is one GET at the first start
QUICK_SEGMENTS = 5_000
SPAN = 100                       # offsets in each synthetic segment
PLANTED_READERS = 8              # concurrent reads of the planted upload (the row 4 used 8)
STALL_S = 20.0                   # every GET answered after this long (the row 9)
STALL_READERS = 24               # remote calls at once while stalled: more than blocking_threads (16)
LOCAL_CALLS = 400                # local lookups of each method timed for each p99, ROUNDS times
ROUNDS = 3
START_TIMEOUT_S = 900.0


def _status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process, in bytes."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) * 1024
    return out


def _config(path: str, log_dir, sock: str, bucket: str, endpoint: str, cache_dir: str) -> None:
    with open(path, "w") as f:
        f.write(f'log_dirs = ["{log_dir}"]\nsocket = "{sock}"\n[remote]\nbucket = "{bucket}"\n'
                f'endpoint_url = "{endpoint}"\ncache_dir = "{cache_dir}"\n')


class Daemon:
    """`python -m lookupd serve --config FILE`, with its stderr drained to a file."""

    def __init__(self, workdir: str, conf: str, sock: str):
        self.sock = sock
        self.log = open(os.path.join(workdir, "daemon.log"), "w")
        env = dict(os.environ, PYTHONPATH=REPO)
        self.started = time.perf_counter()
        self.proc = subprocess.Popen([sys.executable, "-m", "lookupd", "serve", "--config", conf], cwd=workdir,
                                     env=env, stdout=subprocess.DEVNULL, stderr=self.log)

    def wait_listening(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the daemon exited with {self.proc.returncode}")
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                    s.connect(self.sock)
                return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError("the daemon did not listen in time")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def scale(server, root: Path, count: int, metadata_topic: bool) -> list[Figure]:
    """Start + `partitions` with `count` remote segments in one partition, and the daemon's RSS then."""
    from synthetic_bucket import local_tail, put_objects, synthetic_segments

    from lookupd.log.tiered.layout import RemotePartition
    from lookupd.rpc.client import Client
    from lookupd.tools.tieredwriter import kafka_uuid

    rp = RemotePartition("scale", 0, kafka_uuid())
    _, objects, events = synthetic_segments(rp, count, SPAN)
    bucket = server.bucket()
    t0 = time.perf_counter()
    put_objects(server.endpoint_url, bucket, objects)
    print(f"   uploaded {len(objects)} objects in {time.perf_counter() - t0:.0f} s", flush=True)
    log_dir = root / f"scale-{count}-{metadata_topic}"
    local_tail(log_dir, rp.topic, 0, count * SPAN, topic_id=rp.topic_id, events=events if metadata_topic else None)
    workdir = tempfile.mkdtemp(prefix="lkdh", dir="/tmp")
    sock, conf = os.path.join(workdir, "s"), os.path.join(workdir, "c.toml")
    _config(conf, log_dir, sock, bucket, server.endpoint_url, str(root / f"cache-{count}-{metadata_topic}"))
    daemon = Daemon(workdir, conf, sock)
    try:
        daemon.wait_listening()
        with Client(sock, timeout=600) as client:
            listing = client.call("partitions")
        seconds = time.perf_counter() - daemon.started
        mine = next(p for p in listing if p["topic"] == rp.topic)
        assert mine["segments"] == count + 2, mine
        mem = _status(daemon.proc.pid)
    finally:
        daemon.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    how = "metadata topic" if metadata_topic else "manifests only"
    p = {"segments": count, "source": how}
    return [Figure(f"start + partitions, {count:,} remote segments ({how})", "s", [seconds], group="hostile-scale",
                   params=p),
            Figure(f"daemon RSS after start + partitions, {count:,} remote segments ({how})", "MB",
                   [mem["VmRSS"] / 1e6], group="hostile-scale-rss", params=p)]


def _healthy(root: Path, server, metadata_topic: bool):
    import reference as R
    from tiered_helpers import tier_partition

    return tier_partition(root, R.log_dir("plain-0"), server, cut=3, metadata_topic=metadata_topic)


def planted(server, root: Path, kinds: list[str]) -> list[Figure]:
    """The daemon's peak RSS added by PLANTED_READERS concurrent reads of each kind of planted upload, over
    the same reads of a healthy remote segment (each in a partition of its own; the bucket rescanned by
    SIGHUP after each is planted)."""
    from synthetic_bucket import alone, put_objects, upload_of

    from lookupd.log.tiered.layout import SegmentKeys
    from lookupd.rpc.client import Client
    from lookupd.tools.tieredwriter import kafka_uuid

    t = _healthy(root / "planted", server, metadata_topic=False)  # every manifest read, the planted ones too
    workdir = tempfile.mkdtemp(prefix="lkdh", dir="/tmp")
    sock, conf = os.path.join(workdir, "s"), os.path.join(workdir, "c.toml")
    _config(conf, t.tiered_dir, sock, t.config.bucket, server.endpoint_url, str(root / "planted-cache"))
    daemon = Daemon(workdir, conf, sock)

    def reads(topic: str, offset: int) -> None:
        def one() -> None:
            with Client(sock, timeout=120) as c:
                try:
                    c.call("read", topic, 0, offset, 1 << 20)
                except Exception:  # noqa: BLE001 - the planted upload's answer is an error: what it costs counts
                    pass
        threads = [threading.Thread(target=one) for _ in range(PLANTED_READERS)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()

    out = []
    try:
        daemon.wait_listening()
        for offset in (0, 100, 250):  # the healthy remote segments, read once: their chunks cached
            reads("plain", offset)
        base = _status(daemon.proc.pid)["VmHWM"]
        for kind in kinds:
            keys = SegmentKeys(0, kafka_uuid(), alone(), t.config.prefix)
            put_objects(server.endpoint_url, t.config.bucket, upload_of(kind, keys))
            daemon.proc.send_signal(signal.SIGHUP)  # list the bucket again now
            deadline = time.monotonic() + 60
            with Client(sock, timeout=60) as c:
                while keys.partition.topic not in {p["topic"] for p in c.call("partitions")}:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"the planted {kind} was not listed")
                    time.sleep(0.2)
            reads(keys.partition.topic, 0)
            peak = _status(daemon.proc.pid)["VmHWM"]
            out.append(Figure(f"daemon peak RSS added by a planted upload: {kind}", "MiB", [(peak - base) / 2 ** 20],
                              group="hostile-planted", params={"kind": kind, "readers": PLANTED_READERS}))
            base = max(base, peak)
    finally:
        daemon.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return out


def stalled(server, root: Path, calls: int) -> list[Figure]:
    """p50 and p99 of local lookups (on the event loop: resolve_offset; in a worker thread: resolve_offsets
    and partitions) with the store answering, then with every GET held STALL_S while STALL_READERS remote
    calls wait on it."""
    import random

    from faultproxy import FaultProxy

    from lookupd.rpc.client import Client

    t = _healthy(root / "stalled", server, metadata_topic=True)
    workdir = tempfile.mkdtemp(prefix="lkdh", dir="/tmp")
    sock, conf = os.path.join(workdir, "s"), os.path.join(workdir, "c.toml")
    methods = {"resolve_offset": [900], "resolve_offsets": [[800, 900, 1000]], "partitions": []}
    out = []
    with FaultProxy(server.endpoint_url) as proxy:
        _config(conf, t.tiered_dir, sock, t.config.bucket, proxy.url, str(root / "stalled-cache"))
        daemon = Daemon(workdir, conf, sock)
        try:
            daemon.wait_listening()

            def latencies() -> dict[str, list[float]]:
                got: dict[str, list[float]] = {m: [] for m in methods}
                with Client(sock, timeout=120) as c:
                    for i in range(calls):
                        for method, params in methods.items():
                            t0 = time.perf_counter()
                            c.call(method, *(["plain", 0] if params else []), *params)
                            got[method].append((time.perf_counter() - t0) * 1000)
                return got

            latencies()  # warm
            quiet = [latencies() for _ in range(ROUNDS)]
            proxy.inject("GET", r"\.(log|indexes)$", "slow", delay=STALL_S)
            rng = random.Random(5)
            targets = [rng.randrange(0, t.uploaded[-1].facts.end_offset) for _ in range(STALL_READERS)]

            def remote(offset: int) -> None:
                with Client(sock, timeout=120) as c:
                    try:
                        c.call("lookup_offset", "plain", 0, offset, "floor")
                    except Exception:  # noqa: BLE001 - UNAVAILABLE past the deadline is an answer too
                        pass
            readers = [threading.Thread(target=remote, args=(o,), daemon=True) for o in targets]
            for th in readers:
                th.start()
            time.sleep(0.5)  # every remote call waiting for its GET
            stall = [latencies() for _ in range(ROUNDS)]  # well within STALL_S
            proxy.clear()
        finally:
            daemon.stop()
            shutil.rmtree(workdir, ignore_errors=True)
    for method in methods:
        for state, rounds in (("store answering", quiet), ("store stalled", stall)):
            p = {"method": method, "store": state, "remote_calls": STALL_READERS if state == "store stalled" else 0}
            for pct in (99, 50):
                values = [sorted(r[method])[int(pct / 100 * (len(r[method]) - 1))] for r in rounds]
                out.append(Figure(f"local {method} p{pct}, {state}", "ms", values, group="hostile-stalled",
                                  params={**p, "percentile": pct}))
    return out


def run(quick: bool = False) -> list[Figure]:
    from s3server import running_server
    from synthetic_bucket import MANIFESTS

    root = Path(tempfile.mkdtemp(prefix="lookupd-bench-hostile-"))
    kinds = list(MANIFESTS)
    try:
        with running_server() as server:
            figures = scale(server, root, QUICK_SEGMENTS if quick else SCALE_SEGMENTS, metadata_topic=True)
            figures += scale(server, root, QUICK_SEGMENTS // 2 if quick else MANIFEST_ONLY_SEGMENTS,
                             metadata_topic=False)
            figures += planted(server, root, kinds[:3] if quick else kinds)
            figures += stalled(server, root, LOCAL_CALLS // 4 if quick else LOCAL_CALLS)
            return figures
    finally:
        shutil.rmtree(root, ignore_errors=True)


def ratios(figures: list[Figure]) -> list[dict | None]:
    return [ratio(f"local {m} p99, store stalled vs answering", figures, f"local {m} p99, store stalled",
                  f"local {m} p99, store answering",
                  f"p99 of a local {m} while every GET waits {STALL_S:g} s and {STALL_READERS} remote calls wait "
                  "on the store, over the same p99 with the store answering (target: at most 2)")
            for m in ("resolve_offset", "resolve_offsets", "partitions")]


if __name__ == "__main__":
    common.main(run, __doc__)
