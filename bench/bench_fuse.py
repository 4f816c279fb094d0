"""The FUSE view: raw `.log` reads through the mount vs from disk (warm and cold), records per second
through `.records.jsonl`, a by-key scan, and `ls -lR` over 10,000 segments (2,000 with --quick).

A log dir is written here with lookupd's writer, then served by `lookupd serve` and mounted
with `fusefs mount --foreground`, both as subprocesses, as in production. Reads are warm on
both sides: the segment is read from disk once before measuring, so the direct reads and the
mount's own `pread`s both come from the page cache, and the two are measured interleaved in
the same run. The segment read is a rolled one, as most of a partition is: the mount opens
it with keep_cache once it has seen the same file under that name before, so the kernel's
page cache serves warm reads without the FUSE process. Records per second are measured on a
segment not read before (nothing in the mount's rendered-batch cache), and the same rendering
in process, without FUSE, beside it.

Run: python bench/bench_fuse.py [--quick] [--json OUT]
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402
from common import Figure, ratio  # noqa: E402

from lookupd.format.builder import build_batch  # noqa: E402
from lookupd.rpc.client import Client  # noqa: E402
from lookupd.errors import LookupdError  # noqa: E402
from lookupd.tools.writer import LogWriter  # noqa: E402

T0 = 1_767_225_600_000
MiB = 1 << 20


# ------------------------------------------------------------------ data


def write_big(part: str, size: int) -> None:
    """One rolled segment of `size` bytes (batches of 100 records of ~160 bytes), then an empty
    active one: the bulk of a partition is rolled segments, which the mount lets the kernel cache."""
    w = LogWriter(part, segment_bytes=1 << 31)
    offset = 0
    while w.segment is None or w.segment.size < size:
        recs = [(T0 + offset + i, b"key-%d" % (offset + i), b'{"n": %d, "pad": "%s"}' % (offset + i, b"x" * 128), ())
                for i in range(100)]
        w.append(build_batch(recs, base_offset=offset))
        offset += 100
    w.roll()
    w.close(trim_active=True)


def write_records(part: str, segments: int, segment_bytes: int) -> int:
    """`segments` segments of typical records (keys, JSON values, a header); returns records per segment."""
    w = LogWriter(part, segment_bytes=segment_bytes)
    offset = 0
    while len(os.listdir(part)) < 3 * (segments + 1):
        recs = [(T0 + 10 * (offset + i), b"user-%d" % ((offset + i) % 997),
                 b'{"order": %d, "cents": %d, "currency": "EUR", "city": "Lisbon"}' % (offset + i, 31 * i),
                 (("trace", b"%016x" % (offset + i)),)) for i in range(50)]
        w.append(build_batch(recs, base_offset=offset))
        offset += 50
    w.close(trim_active=True)
    first, second = sorted(int(n[:20]) for n in os.listdir(part) if n.endswith(".log"))[:2]
    return second - first


def write_many(part: str, segments: int) -> None:
    """`segments` rolled segments of one 5-record batch each."""
    w = LogWriter(part, max_index_size=4096)
    for i in range(segments):
        w.append(build_batch([(T0 + 5 * i + k, b"k", b"x" * 50, ()) for k in range(5)], base_offset=5 * i))
        w.roll()
    w.close(trim_active=True)


# ------------------------------------------------------------------ the daemon and the mount


def _wait(ready, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + 60
    while not ready():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start (exit status {proc.poll()})")
        time.sleep(0.05)


def _pings(sock: str) -> bool:
    try:
        with Client(sock, timeout=2) as c:
            return c.call("ping") == "pong"
    except LookupdError:
        return False


class Mounted:
    """`lookupd serve` and `fusefs mount --foreground` over `logs`, taken down on exit."""

    def __init__(self, logs: str, workdir: str):
        self.sock = os.path.join(workdir, "lookupd.sock")
        self.root = os.path.join(workdir, "mnt")
        os.makedirs(self.root)
        self.procs: list[subprocess.Popen] = []
        self.logs = logs

    def __enter__(self) -> "Mounted":
        if not os.path.exists("/dev/fuse") or not shutil.which("fusermount"):
            raise RuntimeError("FUSE is not available here (/dev/fuse, fusermount)")
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        daemon = subprocess.Popen([sys.executable, "-m", "lookupd", "serve", "--log-dir", self.logs,
                                   "--socket", self.sock], **quiet)
        self.procs.append(daemon)
        _wait(lambda: _pings(self.sock), daemon, "lookupd serve")
        # A generous --timeout: the daemon's first listing of 10,000 segments maps 20,000 indexes.
        mount = subprocess.Popen([sys.executable, "-m", "fusefs", "mount", self.root, "--socket", self.sock,
                                  "--foreground", "--timeout", "120"], **quiet)
        self.procs.append(mount)
        _wait(lambda: os.path.ismount(self.root), mount, "fusefs mount")
        return self

    def __exit__(self, *exc) -> None:
        for proc in reversed(self.procs):
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
        if os.path.ismount(self.root):
            subprocess.run(["fusermount", "-u", "-z", self.root])


# ------------------------------------------------------------------ measurements


def read_mb_s(path: str) -> float:
    """Sequential read of the whole file in 1 MiB reads (the same loop for both sides)."""
    buf = bytearray(MiB)
    total = 0
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            total += n
    return total / (time.perf_counter() - t0) / 1e6


def records_per_s(path: str) -> float:
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        count = sum(1 for _ in f)
    return count / (time.perf_counter() - t0)


def in_process_records_per_s(part_dir: str, topic: str, base: int) -> float:
    """The mount's rendering of one segment, without FUSE or the daemon."""
    from fusefs.catalog import PartitionInfo
    from fusefs.sources import Cursor, Handles, LocalSource
    from fusefs.views import RenderCache, record_lines

    part = PartitionInfo(topic, 0, 0, 0, os.path.dirname(part_dir), part_dir)
    t0 = time.perf_counter()
    count = sum(piece.count(b"\n") for piece, _ in record_lines(LocalSource(part, None, Handles()), RenderCache(),
                                                                  None, None, False, Cursor(base, 0, base)))
    return count / (time.perf_counter() - t0)


def drop_cache(path: str) -> None:
    """Evict a file's pages from the page cache (posix_fadvise DONTNEED), so the next read is cold."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def in_process_key_scan_s(part_dir: str, topic: str, key: bytes) -> float:
    """The mount's by-key scan of one partition, without FUSE or the daemon: seconds."""
    from fusefs.catalog import PartitionInfo
    from fusefs.sources import Cursor
    from fusefs.views import key_lines

    part = PartitionInfo(topic, 0, 0, 0, os.path.dirname(part_dir), part_dir)
    bases = sorted(int(n[:20]) for n in os.listdir(part_dir) if n.endswith(".log"))
    t0 = time.perf_counter()
    source = _AllSegments(part, bases)
    for _ in key_lines([source], [Cursor(bases[0], 0, bases[0])], key, (0, Cursor(bases[0], 0, bases[0]))):
        pass
    return time.perf_counter() - t0


class _AllSegments:
    """A LocalSource that follows a partition's segments in order without the mount's catalog."""

    def __init__(self, part, bases: list[int]):
        from fusefs.sources import Handles, LocalSource

        self._source = LocalSource(part, None, Handles())
        self._bases = bases

    def log_name(self, segment: int) -> str:
        return self._source.log_name(segment)

    def batches(self, cursor, follow: bool):
        from fusefs.sources import Cursor

        for base in self._bases:
            if base >= cursor.segment:
                start = cursor if base == cursor.segment else Cursor(base, 0, base)
                yield from self._source.batches(start, False)


def seconds(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def run(quick: bool = False) -> list[Figure]:
    times = 3 if quick else 7
    big_size = (128 if quick else 1024) * MiB
    rec_segment = (2 if quick else 16) * MiB
    # --quick lists 2,000: writing 10,000 segments and listing them four times takes a minute alone.
    many = 2_000 if quick else 10_000
    figures = []
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR", "/var/tmp")) as d:
        logs = os.path.join(d, "logs")
        write_big(os.path.join(logs, "big-0"), big_size)
        per_segment = write_records(os.path.join(logs, "records-0"), times + 2, rec_segment)
        write_many(os.path.join(logs, "many-0"), many)
        with Mounted(logs, d) as m:
            name = f"{0:020d}.log"
            disk, mounted = os.path.join(logs, "big-0", name), os.path.join(m.root, "big", "0", name)
            size = os.path.getsize(disk)
            read_mb_s(disk), read_mb_s(mounted)  # warm-up: the file is in the page cache for both
            direct, through = [], []
            for _ in range(times):
                direct.append(read_mb_s(disk))
                through.append(read_mb_s(mounted))
            params = {"bytes": size, "read_size": MiB, "cache": "warm"}
            figures.append(Figure(f"sequential read of a {size // MiB} MiB .log, from disk (warm)", "MB/s", direct,
                                  group="fuse-read", params={**params, "path": "direct"}, higher_is_better=True))
            figures.append(Figure(f"sequential read of a {size // MiB} MiB .log, through the mount (warm)", "MB/s",
                                  through, group="fuse-read", params={**params, "path": "mount"},
                                  higher_is_better=True))
            cold_direct, cold_through = [], []
            for _ in range(times):
                drop_cache(disk)
                cold_direct.append(read_mb_s(disk))
                drop_cache(disk)
                drop_cache(mounted)  # the mount's own page cache of the file, too
                cold_through.append(read_mb_s(mounted))
            params = {**params, "cache": "cold"}
            figures.append(Figure(f"sequential read of a {size // MiB} MiB .log, from disk (cold)", "MB/s",
                                  cold_direct, group="fuse-read", params={**params, "path": "direct-cold"},
                                  higher_is_better=True))
            figures.append(Figure(f"sequential read of a {size // MiB} MiB .log, through the mount (cold)", "MB/s",
                                  cold_through, group="fuse-read", params={**params, "path": "mount-cold"},
                                  higher_is_better=True))

            bases = sorted(int(n[:20]) for n in os.listdir(os.path.join(logs, "records-0")) if n.endswith(".log"))
            jsonl = [os.path.join(m.root, "records", "0", f"{b:020d}.records.jsonl") for b in bases[:times + 1]]
            records_per_s(jsonl[-1])  # warm-up on a segment not measured
            params = {"records_per_segment": per_segment, "segment_bytes": rec_segment, "batch_records": 50}
            figures.append(Figure(f"records per second through .records.jsonl ({per_segment:,}-record segments)",
                                  "records/s", [records_per_s(p) for p in jsonl[:times]], group="fuse-records",
                                  params={**params, "path": "mount"}, higher_is_better=True))
            part_dir = os.path.join(logs, "records-0")
            figures.append(Figure("records per second, the same rendering in process (no FUSE, no daemon)",
                                  "records/s", [in_process_records_per_s(part_dir, "records", b) for b in bases[:times]],
                                  group="fuse-records", params={**params, "path": "in-process"},
                                  higher_is_better=True))
            # by-key: one key's records (one in 997) found by scanning the whole partition
            key = b"user-996"
            part_bytes = sum(os.path.getsize(os.path.join(part_dir, n)) for n in os.listdir(part_dir)
                             if n.endswith(".log"))
            by_key = os.path.join(m.root, "records", "0", "by-key", key.decode() + ".jsonl")
            params = {"bytes": part_bytes, "key": key.decode()}
            figures.append(Figure("by-key scan of a partition through the mount", "MB/s",
                                  [part_bytes / seconds(["cat", by_key]) / 1e6 for _ in range(times)],
                                  group="fuse-bykey", params={**params, "path": "mount"}, higher_is_better=True))
            figures.append(Figure("by-key scan of the same partition in process (no FUSE, no daemon)", "MB/s",
                                  [part_bytes / in_process_key_scan_s(part_dir, "records", key) / 1e6
                                   for _ in range(times)],
                                  group="fuse-bykey", params={**params, "path": "in-process"}, higher_is_better=True))
            big_jsonl = os.path.join(m.root, "big", "0", f"{0:020d}.records.jsonl")
            figures.append(Figure(f"head -c 4096 of the {size // MiB} MiB segment's .records.jsonl", "ms",
                                  [1000 * seconds(["head", "-c", "4096", big_jsonl]) for _ in range(times)],
                                  group="fuse-records", params={"segment_bytes": size}))

            tree = os.path.join(m.root, "many")
            t0 = time.perf_counter()
            entries = subprocess.run(["ls", "-lR", tree], capture_output=True, check=True).stdout.count(b"\n")
            first = time.perf_counter() - t0
            again = []
            for _ in range(times):
                time.sleep(1.1)  # past the mount's TTL and the kernel's attribute cache: every entry asked again
                again.append(seconds(["ls", "-lR", tree]))
            params = {"segments": many, "lines": entries}
            figures.append(Figure(f"ls -lR over {many:,} segments through the mount, caches expired", "s", again,
                                  group="fuse-ls", params={**params, "path": "mount"}))
            # The first listing includes the daemon's first `segments` call, which maps every index.
            figures.append(Figure(f"ls -lR over {many:,} segments through the mount, first after mounting", "s",
                                  [first], group="fuse-ls", params={**params, "path": "mount-first"}))
            figures.append(Figure(f"ls -lR over the {many:,} segments' log dir itself", "s",
                                  [seconds(["ls", "-lR", os.path.join(logs, "many-0")]) for _ in range(times)],
                                  group="fuse-ls", params={**params, "path": "direct"}))
    return figures


def ratios(figures: list[Figure]) -> list[dict | None]:
    read = [f.name for f in figures if f.group == "fuse-read"]
    recs = [f.name for f in figures if f.group == "fuse-records" and f.unit == "records/s"]
    key = [f.name for f in figures if f.group == "fuse-bykey"]
    return [ratio("fuse read throughput vs disk", figures, read[1], read[0],
                  "sequential .log reads through the mount as a fraction of direct reads (both warm)"),
            ratio("fuse cold read throughput vs disk", figures, read[3], read[2],
                  "sequential .log reads through the mount as a fraction of direct reads (both cold)"),
            ratio("fuse by-key scan vs in-process", figures, key[0], key[1],
                  "a by-key scan through the mount as a fraction of the same scan in process"),
            ratio("fuse records/s vs in-process", figures, recs[0], recs[1],
                  "records per second through the mount as a fraction of the same rendering in process")]


if __name__ == "__main__":
    common.main(run, __doc__)
