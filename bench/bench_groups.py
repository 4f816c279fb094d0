"""Consumer-group positions: replaying `__consumer_offsets` against the columnar decoder on the same segments,
and the daemon's `group_offsets` for a group of 100 partitions against a `resolve_offset` round trip.

* Replay: `__consumer_offsets` partitions as a coordinator writes them (each commit request of a group a
  batch of its partitions' OffsetCommit records, uncompressed as offsets.topic.compression.codec leaves
  them by default, GroupMetadata records at rebalances, transactional commits with their markers; see
  LOGS: a live log and one as the cleaner leaves it), replayed in full from the files
  (lookupd.log.coordinators: the C table the commit scan applies plain commits to, Python for the rest),
  in records/s; against the native columnar decoder reading the same files (ColumnBuilder.add_frames
  over 1 MiB chunks, CRCs checked, no Arrow arrays made), records/s; and the record-by-record reference
  replay for scale. Both in this process, timed by its CPU time. Target: replay >= 0.5x the columnar decoder.
* group_offsets: one daemon subprocess serving a topic of 100 partitions and the group's
  `__consumer_offsets` partition; sequential requests on one connection each, `group_offsets` (warm: its
  partition replayed by the first call) and `resolve_offset` on one of the partitions, driven in turn in
  slices; p50 and p99 round trips. Target: group_offsets p50 <= 3x resolve_offset's.

Run: python bench/bench_groups.py [--quick] [--json OUT]
"""

from __future__ import annotations

import gc
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import common  # noqa: E402
from common import Figure, ratio  # noqa: E402

import msgpack  # noqa: E402

from coordinator_writer import (Cleaner, CoordinatorLog, Record, commit_key, commit_value, group_key,  # noqa: E402
                                group_value, read_batches, replayed)
from lookupd.format.builder import build_batch  # noqa: E402
from lookupd.format.columnar import ColumnBuilder  # noqa: E402
from lookupd.format.internal.topics import partition_for  # noqa: E402
from lookupd.log.locallog import list_segments  # noqa: E402
from lookupd.tools.writer import LogWriter  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHUNK = 1 << 20
GROUP = "etl-orders"


def write_offsets(root: str, batches: int, groups: int = 500, per_batch: int = 10, group_every: int = 2000,
                  txn_every: int = 1000, delete_every: int = 0, segment_bytes: int = 100 << 20) -> int:
    """__consumer_offsets-0 as the coordinator writes it: commit requests of `groups` groups, a GroupMetadata
    record every `group_every` batches (a rebalance), a transactional commit every `txn_every` batches, and
    (`delete_every`) a group deleted every so many (DeleteGroups: a tombstone for each of its offsets, then
    for the group); returns its log end offset."""
    rnd = random.Random(7)
    log = CoordinatorLog(os.path.join(root, "__consumer_offsets-0"), segment_bytes=segment_bytes)
    offsets = {}
    for b in range(batches):
        g = f"group-{rnd.randrange(groups)}"
        topic = f"topic-{hash(g) % 20}"
        if b % group_every == 0:
            log.write([Record(group_key(g), group_value("consumer", b, "range", [f"{g}-m{i}" for i in range(3)]))])
        if delete_every and b % delete_every == delete_every // 2:
            log.write([Record(commit_key(g, topic, p), None) for p in range(per_batch)] + [Record(group_key(g), None)])
            continue
        recs = []
        for p in range(per_batch):
            offsets[(g, p)] = offsets.get((g, p), 0) + rnd.randrange(1, 500)
            recs.append(Record(commit_key(g, topic, p), commit_value(offsets[(g, p)], timestamp=b, leader_epoch=3)))
        if b % txn_every == txn_every - 1:
            log.write(recs, producer_id=1000 + b, producer_epoch=0)
            log.marker(1000 + b, 0, commit=b % (2 * txn_every) == txn_every - 1)
        else:
            log.write(recs)
    log.close()
    return log.offset


def write_compacted(root: str, groups: int, rounds: int = 3) -> None:
    """__consumer_offsets-0 as the cleaner leaves it: a live history of `groups` groups (write_offsets: each
    commits about `rounds` times; rebalances, transactions and, one in a hundred, deletions at the live
    log's rates), in 1 MiB segments, cleaned as LogCleaner cleans it up to the active segment (the last
    record of each key; tombstones kept, as within delete.retention.ms; aborted transactions gone)."""
    write_offsets(root, groups * rounds, groups=groups, delete_every=100, segment_bytes=1 << 20)
    d = os.path.join(root, "__consumer_offsets-0")
    Cleaner(d).clean(list_segments(d)[-1])


def data_records(root: str) -> int:
    """The records of the partition's data batches (markers are records too; the columnar decoder passes
    over them)."""
    return sum(h.record_count for _, h in read_batches(os.path.join(root, "__consumer_offsets-0"))
               if not h.is_control)


def replay(root: str, python: bool = False) -> int:
    """A full replay of the partition from its files; returns the offset it reached."""
    r = replayed([root], python=python)
    assert not r.faults, r.faults
    return r.next_offset


def columnar(root: str) -> int:
    """The native columnar decoder over the same segment files, read in 1 MiB chunks; returns records."""
    d = os.path.join(root, "__consumer_offsets-0")
    n = 0
    for name in sorted(os.listdir(d)):
        if not name.endswith(".log"):
            continue
        with open(os.path.join(d, name), "rb") as f:
            data = f.read()
        b = ColumnBuilder(False)
        pos = 0
        while pos < len(data):
            chunk = data[pos:pos + CHUNK]
            used = b.add_frames(chunk, pos)
            n += b.count
            b._reset()
            if used == 0:
                raise RuntimeError("a batch larger than a chunk")
            pos += used
    return n


def timed(fn, *args, min_s: float = 0.3) -> float:
    """CPU seconds per call (this process's: both sides run in it, and on a shared machine another
    process's load must not count against one of them), over whole calls lasting at least min_s."""
    gc.collect()
    calls = 0
    t0 = time.process_time()
    while True:
        fn(*args)
        calls += 1
        if time.process_time() - t0 >= min_s:
            return (time.process_time() - t0) / calls


# The logs replayed: a live one (500 groups committing their 10 partitions again and again, a rebalance
# every 2000 commit requests, a transaction every 1000), and one as the cleaner leaves a history of 20,000
# groups (write_compacted: nearly every record a key new to the replay).
LOGS = {"steady": dict(groups=500), "compacted": dict(groups=20_000)}


def write_log(root: str, label: str, quick: bool) -> None:
    if label == "steady":
        write_offsets(root, 4_000 if quick else 40_000, **LOGS[label])
    else:
        write_compacted(root, **LOGS[label])


def replay_figures(quick: bool) -> list[Figure]:
    figures = []
    for label, shape in LOGS.items():
        tmp = tempfile.mkdtemp(prefix="lkbg")
        try:
            write_log(tmp, label, quick)
            d = os.path.join(tmp, "__consumer_offsets-0")
            size = sum(os.path.getsize(os.path.join(d, n)) for n in os.listdir(d) if n.endswith(".log"))
            records = data_records(tmp)
            impls = [("replay", lambda: replay(tmp)), ("columnar decoder", lambda: columnar(tmp)),
                     ("reference replay", lambda: replay(tmp, python=True))]
            times = {name: [] for name, _ in impls}
            for name, fn in impls:  # untimed first calls: imports, page cache
                fn()
            for rep in range(3 if quick else 7):
                for name, fn in impls:
                    if name == "reference replay" and rep >= 3:
                        continue  # (for scale only, and slow)
                    times[name].append(timed(fn, min_s=0.2 if quick else 0.5))
            figures += [Figure(f"groups replay {label}, {name}", "records/s", [records / t for t in ts],
                               group="groups-replay", params={"log": label, "impl": name, "records": records,
                                                              "bytes": size}, higher_is_better=True)
                        for name, ts in times.items()]
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return figures


# ------------------------------------------------------------------ group_offsets through the daemon


def write_topic(root: str, partitions: int = 100) -> None:
    for p in range(partitions):
        w = LogWriter(os.path.join(root, f"orders-{p}"))
        for b in range(20):
            w.append(build_batch([(1_767_225_600_000 + i, b"k", b"v" * 50, ()) for i in range(10)],
                                 base_offset=b * 10))
        w.close()
    log = CoordinatorLog(os.path.join(root, f"__consumer_offsets-{partition_for(GROUP)}"))
    for r in range(5):
        log.write([Record(commit_key(GROUP, "orders", p), commit_value(100 + r * 10 + p % 7, leader_epoch=2))
                   for p in range(partitions)])
    log.close()


class Peer:
    """Sequential msgpack-rpc requests on one Unix socket connection."""

    def __init__(self, path: str):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.connect(path)
        self.u = msgpack.Unpacker(raw=False)
        self.msgid = 0

    def call(self, method: str, *params):
        self.msgid += 1
        self.s.sendall(msgpack.packb([0, self.msgid, method, list(params)], use_bin_type=True))
        while True:
            for msg in self.u:
                if msg[2] is not None:
                    raise RuntimeError(f"{method}: {msg[2]}")
                return msg[3]
            data = self.s.recv(1 << 20)
            if not data:
                raise RuntimeError("connection closed")
            self.u.feed(data)


def latencies(peer: Peer, calls: dict, seconds: float, slices: int = 10) -> dict[str, list[float]]:
    """Round trips (us) of each call, driven in turn in `slices` slices of seconds/slices/len(calls)."""
    out = {name: [] for name in calls}
    per = seconds / slices / len(calls)
    for i in range(slices):
        for name in (list(calls) if i % 2 == 0 else list(reversed(calls))):
            method, params = calls[name]
            end = time.perf_counter() + per
            while time.perf_counter() < end:
                t0 = time.perf_counter_ns()
                peer.call(method, *params)
                out[name].append((time.perf_counter_ns() - t0) / 1000)
    return out


def daemon_figures(quick: bool) -> list[Figure]:
    tmp = tempfile.mkdtemp(prefix="lkbd", dir="/tmp")
    proc = None
    try:
        logs = os.path.join(tmp, "logs")
        write_topic(logs)
        sock = os.path.join(tmp, "s")
        proc = subprocess.Popen([sys.executable, "-m", "lookupd", "serve", "--log-dir", logs, "--socket", sock],
                                cwd=tmp, env=dict(os.environ, PYTHONPATH=REPO), stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not os.path.exists(sock):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("lookupd did not start")
            time.sleep(0.05)
        time.sleep(0.2)
        peer = Peer(sock)
        answer = peer.call("group_offsets", GROUP, "read_uncommitted")  # warms the replay
        assert len(answer["offsets"]["lag"]) == 100 and None not in answer["offsets"]["lag"]
        calls = {"group_offsets (100 partitions)": ("group_offsets", [GROUP, "read_uncommitted"]),
                 "resolve_offset": ("resolve_offset", ["orders", 42, 77])}
        figures = []
        lat = latencies(peer, calls, 3 if quick else 12)
        for name, values in lat.items():
            values.sort()
            for q, label in ((0.5, "p50"), (0.99, "p99")):
                figures.append(Figure(f"groups daemon, {name}, {label}", "us", [values[int(q * (len(values) - 1))]],
                                      group="groups-daemon", params={"method": name, "quantile": label,
                                                                     "calls": len(values)}))
        return figures
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(20)
        shutil.rmtree(tmp, ignore_errors=True)


def run(quick: bool = False) -> list[Figure]:
    return replay_figures(quick) + daemon_figures(quick)


def ratios(figures: list[Figure]) -> list[dict | None]:
    out = []
    for label in LOGS:
        out += [ratio(f"groups replay vs columnar decoder, {label}", figures, f"groups replay {label}, replay",
                      f"groups replay {label}, columnar decoder",
                      f"records/s of a full __consumer_offsets replay over the native columnar decoder's on the same "
                      f"segment files, {label} log (target >= 0.5x)"),
                ratio(f"groups reference replay vs columnar decoder, {label}", figures,
                      f"groups replay {label}, reference replay", f"groups replay {label}, columnar decoder",
                      "records/s of the record-by-record Python replay over the columnar decoder's (for scale)")]
    out.append(ratio("group_offsets vs resolve_offset, p50", figures,
                     "groups daemon, group_offsets (100 partitions), p50", "groups daemon, resolve_offset, p50",
                     "p50 round trip of a warm group_offsets for a group of 100 partitions over a resolve_offset "
                     "round trip, same daemon and connection (target <= 3x)"))
    return out


if __name__ == "__main__":
    common.main(run, __doc__)
