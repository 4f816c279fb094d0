"""Chaos, bounded: a broker appends, rolls, truncates as a follower does, deletes by retention, swaps in
cleaned segments and deletes and re-creates a partition, while clients hammer the daemon and read
through the mount. Between steps, once a rescan has passed, every answer is checked against the
files on disk; during the churn the daemon and the mount must stay up and every error must be one
a client can act on."""

from __future__ import annotations

import os
import random
import shutil
import threading
import time


from lookupd.format.batch import parse_header
from lookupd.format.builder import build_batch
from lookupd.format.names import segment_file_name
from lookupd.rpc.client import Client, RemoteError
from lookupd.tools.writer import LogWriter
from daemon_helpers import retention_delete
from test_fusefs_helpers import Daemon, Mount, require_fuse, workdir
from test_replaced_segments import clean_segment

RESCAN_S = 0.1
SETTLE_S = 4 * RESCAN_S  # a change is seen within one rescan; give it a few
SEGMENT_BYTES = 3000
PARTITIONS = ("t-0", "t-1", "t-2")
ACTIONABLE = {"OFFSET_OUT_OF_RANGE", "UNAVAILABLE", "UNKNOWN_PARTITION", "CORRUPT_DATA"}


class Broker:
    """One partition written the way a broker writes it (lookupd's Kafka-compatible writer)."""

    def __init__(self, root: str, name: str, seed: int):
        self.dir = os.path.join(root, name)
        self.rnd = random.Random(seed)
        self.writer = LogWriter(self.dir, segment_bytes=SEGMENT_BYTES, index_interval_bytes=200)

    def append(self, batches: int) -> None:
        for _ in range(batches):
            o = self.writer.next_offset
            n = self.rnd.randint(1, 6)
            recs = [(1_700_000_000_000 + (o + i) * 10, b"k%d" % (o + i), b"v" * self.rnd.randint(5, 80), ())
                    for i in range(n)]
            self.writer.append(build_batch(recs, base_offset=o))

    def truncate(self) -> None:
        """Kafka's truncateTo on the active segment: the `.log` is cut at a batch boundary, the index
        files keep their bytes, only the writer's in-memory entry counts move back."""
        seg = self.writer.segment
        path = os.path.join(self.dir, segment_file_name(seg.base_offset, ".log"))
        heads = scan(path)
        if len(heads) < 2:
            return
        cut = heads[self.rnd.randrange(1, len(heads))]
        os.truncate(path, cut.position)
        seg.size = cut.position
        seg.index.offset_entries = [e for e in seg.index.offset_entries if seg.base_offset + e[0] < cut.base_offset]
        seg.index.time_entries = [e for e in seg.index.time_entries if seg.base_offset + e[1] < cut.base_offset]
        seg.index.max_timestamp = seg.index.time_entries[-1][0] if seg.index.time_entries else -1
        self.writer.next_offset = cut.base_offset

    def bases(self) -> list[int]:
        return sorted(int(n[:20]) for n in os.listdir(self.dir) if n.endswith(".log"))

    def retention(self) -> None:
        bases = self.bases()
        if len(bases) < 3:
            return
        retention_delete(self.dir, bases[0])

    def clean(self) -> None:
        """The log cleaner's swap of a rolled segment (its first batch dropped), old files removed later."""
        bases = self.bases()
        if len(bases) < 3:
            return
        clean_segment(self.dir, bases[-2])
        for name in os.listdir(self.dir):
            if name.endswith(".deleted"):
                os.remove(os.path.join(self.dir, name))

    def close(self) -> None:
        self.writer.close()


def scan(path: str) -> list:
    with open(path, "rb") as f:
        data = f.read()
    out, pos = [], 0
    while pos + 61 <= len(data):
        h = parse_header(data, pos)
        if pos + h.size > len(data):
            break
        out.append(h)
        pos += h.size
    return out


def truth(part_dir: str) -> list[tuple[int, object]]:
    """(segment, batch header) of every batch of the partition, in offset order."""
    out = []
    for base in sorted(int(n[:20]) for n in os.listdir(part_dir) if n.endswith(".log")):
        out += [(base, h) for h in scan(os.path.join(part_dir, segment_file_name(base, ".log")))]
    return out


def first_line(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.readline()
    except OSError as err:
        return repr(err).encode()


def read_all(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def eventually(get, want, timeout: float = 3.0):
    """`get()` once it equals `want` (or satisfies it, when callable), else its last value: the mount
    serves a listing up to its TTL old and refreshes it in the background."""
    deadline = time.monotonic() + timeout
    while True:
        got = get()
        if (want(got) if callable(want) else got == want) or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def check_partition(c: Client, mount: Mount, root: str, name: str, rnd: random.Random) -> int:
    """Every answer about one partition, checked against its files; returns how many were checked."""
    topic, p = name.rsplit("-", 1)
    part_dir = os.path.join(root, name)
    batches = truth(part_dir)
    bases = sorted(int(n[:20]) for n in os.listdir(part_dir) if n.endswith(".log"))
    info = next(x for x in c.call("partitions") if (x["topic"], x["partition"]) == (topic, int(p)))
    leo = batches[-1][1].last_offset + 1 if batches else bases[-1]
    assert (info["log_start_offset"], info["log_end_offset"], info["segments"]) == (bases[0], leo, len(bases)), name
    checked = 1
    for o in rnd.sample(range(bases[0], leo), min(25, leo - bases[0])):
        seg, h = next((s, h) for s, h in batches if h.last_offset >= o)
        got = c.call("resolve_offset", topic, int(p), o)
        assert got == {"segment": seg, "base_offset": h.base_offset, "last_offset": h.last_offset,
                       "position": h.position, "size": h.size}, (name, o, got)
        floor = c.call("lookup_offset", topic, int(p), o, "floor")
        starts = {(s, b.position): b for s, b in batches}
        assert (floor["segment"], floor["position"]) in starts or floor["position"] == 0, (name, o, floor)
        assert floor["offset"] <= o
        read = c.call("read", topic, int(p), o, 1)
        with open(os.path.join(part_dir, segment_file_name(seg, ".log")), "rb") as f:
            f.seek(h.position)
            assert read["records"] == f.read(h.size), (name, o)
        start = max(o, h.base_offset)  # an offset the cleaner removed starts at the next record
        first = eventually(lambda: first_line(mount.path(topic, p, "at-offset", f"{o}.jsonl")),
                           lambda line: line.startswith(b'{"offset":%d,' % start))
        assert first.startswith(b'{"offset":%d,' % start), (name, o, first[:60])
        checked += 4
    want = [segment_file_name(b, ".log") for b in bases]
    listed = eventually(lambda: sorted(n for n in os.listdir(mount.path(topic, p)) if n.endswith(".log")), want)
    assert listed == want, (name, listed)
    last = segment_file_name(bases[-1], ".log")
    with open(os.path.join(part_dir, last), "rb") as g:
        on_disk = g.read()
    through_mount = eventually(lambda: read_all(mount.path(topic, p, last)), on_disk)
    assert through_mount == on_disk, (name, last, len(through_mount), len(on_disk))
    return checked + 2


def test_chaos_against_the_daemon_and_the_mount():
    require_fuse()
    with workdir() as wd:
        root = os.path.join(wd, "logs")
        os.makedirs(root)
        brokers = {name: Broker(root, name, i) for i, name in enumerate(PARTITIONS)}
        for b in brokers.values():
            b.append(30)
        daemon = Daemon([root], wd, rescan_s=RESCAN_S)
        mount = Mount(daemon.sock, wd, "--ttl", str(RESCAN_S))
        stop = threading.Event()
        errors: dict[str, int] = {}
        unexpected: list[str] = []
        served = [0]

        def hammer(seed: int) -> None:
            rnd = random.Random(seed)
            with Client(daemon.sock, timeout=10) as c:
                while not stop.is_set():
                    topic, p = rnd.choice(PARTITIONS).rsplit("-", 1)
                    o = rnd.randrange(0, 400)
                    try:
                        method = rnd.choice(("resolve_offset", "lookup_offset", "read", "partitions",
                                             "resolve_offsets"))
                        if method == "lookup_offset":
                            c.call(method, topic, int(p), o, "floor")
                        elif method == "read":
                            c.call(method, topic, int(p), o, 1)
                        elif method == "partitions":
                            c.call(method)
                        elif method == "resolve_offsets":
                            c.call(method, topic, int(p), [o, o + 7, o + 50])
                        else:
                            c.call(method, topic, int(p), o)
                        served[0] += 1
                    except RemoteError as err:
                        errors[err.code] = errors.get(err.code, 0) + 1
                        if err.code not in ACTIONABLE:
                            unexpected.append(str(err))

        def reader(seed: int) -> None:
            rnd = random.Random(seed)
            while not stop.is_set():
                topic, p = rnd.choice(PARTITIONS).rsplit("-", 1)
                try:
                    names = os.listdir(mount.path(topic, p))
                    for n in rnd.sample(names, min(3, len(names))):
                        with open(mount.path(topic, p, n), "rb") as f:
                            f.read(1 << 16)
                except OSError:
                    pass  # a file or partition that went between listing and reading

        rnd = random.Random(7)
        steps = ["append", "truncate", "append", "retention", "clean", "append", "truncate", "recreate",
                 "append", "retention", "clean", "append"]
        checked = 0
        try:
            daemon.start()
            mount.start()
            threads = [threading.Thread(target=hammer, args=(i,)) for i in range(3)]
            threads.append(threading.Thread(target=reader, args=(9,)))
            for t in threads:
                t.start()
            deadline = time.monotonic() + 90
            with Client(daemon.sock, timeout=10) as c:
                for step in steps:
                    for name, b in list(brokers.items()):
                        if step == "recreate" and name == "t-2":
                            b.close()
                            shutil.rmtree(b.dir)
                            brokers[name] = b = Broker(root, name, 99)
                            b.append(20)
                        elif step == "append":
                            b.append(rnd.randint(5, 25))
                        elif step != "recreate":
                            getattr(b, step)()
                    time.sleep(SETTLE_S)
                    for name in PARTITIONS:
                        checked += check_partition(c, mount, root, name, rnd)
                    assert time.monotonic() < deadline, "the chaos run took too long"
        finally:
            stop.set()
            for b in brokers.values():
                b.close()
            mount_alive = mount.proc is not None and mount.proc.poll() is None
            daemon_alive = daemon.proc is not None and daemon.proc.poll() is None
            mount.stop()
            daemon.stop()
        assert daemon_alive and mount_alive
        assert not unexpected, unexpected[:5]
        assert served[0] > 200 and checked > 300, (served, checked, errors)
