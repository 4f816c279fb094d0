"""The FUSE view mounted for real over Kafka's reference partitions.

Listings, attributes, raw bytes, decoded records, index entries and navigation are checked
against what Kafka wrote and answered: every expectation is derived from the reference
records, batches and answers, none is hard-coded. Then the command-line tools people use
on it, read-only refusals and hostile names.
"""

from __future__ import annotations

import base64
import bisect
import errno
import functools
import hashlib
import json
import os
import random
import re
import shutil
import struct
import subprocess
import time

import pytest

import reference as R
from fusefs.catalog import Catalog
from fusefs.daemon import DaemonLink
from fusefs.ops import KafkaFS
from test_fusefs_helpers import mounted

PARTS = R.PARTITIONS
RECORDED = [p for p in PARTS if p != "large-0"]  # large-0's answers list batches, not records


@pytest.fixture(scope="module")
def mnt():
    R.require()
    with mounted([R.LOGS]) as (mount, _):
        yield mount


def split(p: str) -> tuple[str, str]:
    topic, _, number = p.rpartition("-")
    return topic, number


def pdir(mnt, p: str, *rest: str) -> str:
    return mnt.path(*split(p), *rest)


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def lines(path: str) -> list[dict]:
    return [json.loads(line) for line in read(path).splitlines()]


def stem(base: int) -> str:
    return f"{base:020d}"


# ------------------------------------------------------------------ expectations from the reference


def shown(b64: str | None):
    """A key/value/header value from the reference (base64) as the view shows it: text or {"base64"}."""
    if b64 is None:
        return None
    try:
        return base64.b64decode(b64).decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": b64}


def expected_records(p: str) -> list[dict]:
    batches = R.batches(p)
    starts = [b["base_offset"] for b in batches]
    out = []
    for r in R.answers(p)["records"]:
        b = batches[bisect.bisect_right(starts, r["offset"]) - 1]
        rec = {"offset": r["offset"], "timestamp": r["timestamp"], "timestamp_type": b["timestamp_type"],
               "key": shown(r["key"]), "value": shown(r["value"]),
               "headers": [{"key": k, "value": shown(v)} for k, v in r["headers"]],
               "batch": {"position": b["position"], "base_offset": b["base_offset"], "last_offset": b["last_offset"],
                         "producer_id": b["producer_id"], "producer_epoch": b["producer_epoch"],
                         "transactional": b["is_transactional"], "control": b["is_control"]}}
        if b["is_control"]:  # EndTransactionMarker: key (version, type 0 ABORT / 1 COMMIT), value (version, epoch)
            kind = struct.unpack(">hh", base64.b64decode(r["key"]))[1]
            epoch = struct.unpack(">hi", base64.b64decode(r["value"]))[1]
            rec["control"] = {"type": ("ABORT", "COMMIT")[kind], "coordinator_epoch": epoch}
        out.append(rec)
    return out


@functools.lru_cache(maxsize=None)
def largest_timestamps(p: str) -> dict[int, int]:
    """Each segment's largest record timestamp (LogSegment.largestTimestamp), from the batches."""
    out: dict[int, int] = {}
    for b in R.batches(p):
        out[b["segment"]] = max(out.get(b["segment"], -1), b["max_timestamp"])
    return out


@functools.lru_cache(maxsize=None)
def record_times(p: str) -> list[tuple[int, int]]:
    """(offset, timestamp) of every record; large-0's are its single-record batches."""
    if p == "large-0":
        return [(b["base_offset"], b["max_timestamp"]) for b in R.batches(p)]
    return [(r["offset"], r["timestamp"]) for r in R.answers(p)["records"]]


def log_end(p: str) -> int:
    batches = R.batches(p)
    return batches[-1]["last_offset"] + 1 if batches else R.answers(p)["segments"][-1]["base_offset"]


def list_offsets(p: str, ts: int) -> int | None:
    """ListOffsets for `ts`: the first segment whose largest timestamp >= ts, then its first record
    at or after ts (None when there is none)."""
    largest = largest_timestamps(p)
    for seg in sorted(largest):
        if largest[seg] >= ts:
            batches = R.batches(p)
            lo = min(b["base_offset"] for b in batches if b["segment"] == seg)
            hi = max(b["last_offset"] for b in batches if b["segment"] == seg)
            return next((o for o, t in record_times(p) if lo <= o <= hi and t >= ts), None)
    return None


def ref_entries(p: str, kind: str, seg: dict) -> list[list[int]]:
    d = R.answers(p)[kind][str(seg["base_offset"])]
    d = d.get("live_entries", d)  # an active segment: the entries the broker wrote, not the zero tail
    if isinstance(d, list):
        return d
    if d.get("compact"):
        k = ("offset", "position") if kind == "offset_index" else ("timestamp", "offset")
        return [list(e) for e in zip(d[k[0]], d[k[1]])]
    return d["entries"]


def sample(values: list, n: int, seed: str) -> list:
    values = sorted(set(values))
    return values if len(values) <= n else sorted(random.Random(seed).sample(values, n))


# ------------------------------------------------------------------ listings and raw files


def test_listing(mnt):
    assert sorted(os.listdir(mnt.root)) == sorted({split(p)[0] for p in PARTS})
    for p in PARTS:
        topic, number = split(p)
        assert os.listdir(mnt.path(topic)) == [number, "by-key"]
        want = {"partition.json", "at-offset", "at-time", "by-key"}
        for seg in R.answers(p)["segments"]:
            for name, facts in seg["files"].items():
                if facts is not None:
                    want.add(name)
                    view = {".log": ".records.jsonl"}.get(name[20:], name[20:] + ".txt")
                    want.add(name[:20] + view)
        assert set(os.listdir(pdir(mnt, p))) == want, p
        assert os.listdir(pdir(mnt, p, "at-offset")) == [] and os.listdir(pdir(mnt, p, "at-time")) == []
        assert os.listdir(pdir(mnt, p, "by-key")) == [] and os.listdir(mnt.path(topic, "by-key")) == []


@pytest.mark.parametrize("same_host", [True, False], ids=["local-files", "through-the-daemon"])
def test_listings_carry_what_getattr_answers(mnt, same_host):
    """A listing hands the kernel every entry's attributes (READDIRPLUS), made from one scan of the
    partition: they must be exactly what getattr answers for each path, and the names what the mount lists."""
    sock = mnt.cmd[mnt.cmd.index("--socket") + 1]
    fs = KafkaFS(Catalog(DaemonLink(sock), log_dirs=[], same_host=same_host))
    dirs = ["/", *{f"/{split(p)[0]}" for p in PARTS}, *(f"/{'/'.join(split(p))}" for p in PARTS)]
    checked = 0
    for path in dirs:
        fh = fs("opendir", path)
        entries = fs("readdir", path, fh)
        assert fs("readdir", path, fh) is entries  # one listing per open, whatever offsets are asked
        fs("releasedir", path, fh)
        assert entries[:2] == [(".", None), ("..", None)]
        if same_host:
            assert sorted(n for n, _ in entries[2:]) == sorted(os.listdir(mnt.root + path)), path
        for name, attrs in entries[2:]:
            assert attrs is not None, (path, name)
            assert attrs == fs("getattr", path.rstrip("/") + "/" + name, None), (path, name)
            checked += 1
    assert checked > 100


@pytest.mark.parametrize("p", PARTS)
def test_raw_files_are_the_files(mnt, p):
    largest = largest_timestamps(p)
    rng = random.Random(p)
    for seg in R.answers(p)["segments"]:
        for name, facts in seg["files"].items():
            if facts is None:
                continue
            path, real = pdir(mnt, p, name), os.path.join(R.log_dir(p), name)
            st = os.stat(path)
            assert st.st_size == facts["size"], name
            mtime_ms = largest.get(seg["base_offset"], int(os.stat(os.path.join(R.log_dir(p), stem(seg["base_offset"]) + ".log")).st_mtime * 1000))
            assert st.st_mtime_ns // 1_000_000 == mtime_ms, name
            data = read(path)
            assert hashlib.sha256(data).hexdigest() == facts["sha256"], name
            fd = os.open(path, os.O_RDONLY)
            try:
                for _ in range(20):
                    pos = rng.randrange(0, max(1, facts["size"]))
                    size = rng.choice((1, 7, 4096, 70000, 300000))
                    assert os.pread(fd, size, pos) == data[pos:pos + size], (name, pos, size)
            finally:
                os.close(fd)
            assert data == read(real)


# ------------------------------------------------------------------ decoded views


@pytest.mark.parametrize("p", RECORDED)
def test_records_jsonl_are_kafkas_records(mnt, p):
    got = []
    for seg in R.answers(p)["segments"]:
        seg_lines = lines(pdir(mnt, p, stem(seg["base_offset"]) + ".records.jsonl"))
        assert all(r["batch"]["position"] < seg["log_size"] for r in seg_lines)
        got += seg_lines
    assert got == expected_records(p)


@pytest.mark.parametrize("p", ["txn-0", "compressed-0", "logappend-0"])
def test_records_jsonl_agree_with_lookupd_dump(mnt, p):
    """The same JSON form as `lookupd dump --json --print-data`, record for record."""
    import sys

    for seg in R.answers(p)["segments"][:3]:
        name = stem(seg["base_offset"]) + ".log"
        dump = subprocess.run([sys.executable, "-m", "lookupd", "dump", "--json", "--print-data",
                               os.path.join(R.log_dir(p), name)], capture_output=True, check=True).stdout
        records = [json.loads(line) for line in dump.splitlines() if line.startswith(b'{"type":"record"')]
        want = [{k: v for k, v in r.items() if k not in ("type", "file")} for r in records]
        assert lines(pdir(mnt, p, stem(seg["base_offset"]) + ".records.jsonl")) == want


@pytest.mark.parametrize("p", PARTS)
def test_index_views_list_the_valid_entries(mnt, p):
    for seg in R.answers(p)["segments"]:
        base = stem(seg["base_offset"])
        if seg["files"][base + ".index"] is not None:
            want = [f"offset: {o} position: {q}" for o, q in ref_entries(p, "offset_index", seg)]
            assert read(pdir(mnt, p, base + ".index.txt")).decode().splitlines() == want
        if seg["files"][base + ".timeindex"] is not None:
            want = [f"timestamp: {t} offset: {o}" for t, o in ref_entries(p, "time_index", seg)]
            assert read(pdir(mnt, p, base + ".timeindex.txt")).decode().splitlines() == want
        if seg["files"][base + ".txnindex"] is not None:
            want = [f"version: {t['version']} producerId: {t['producer_id']} firstOffset: {t['first_offset']} "
                    f"lastOffset: {t['last_offset']} lastStableOffset: {t['last_stable_offset']}"
                    for t in seg["txn_index"]["all_aborted_txns"]]
            assert read(pdir(mnt, p, base + ".txnindex.txt")).decode().splitlines() == want


@pytest.mark.parametrize("p", PARTS)
def test_partition_json(mnt, p):
    doc = json.loads(read(pdir(mnt, p, "partition.json")))
    segs = R.answers(p)["segments"]
    largest = largest_timestamps(p)
    assert (doc["topic"], str(doc["partition"])) == split(p)
    assert doc["log_start_offset"] == segs[0]["base_offset"] and doc["log_end_offset"] == log_end(p)
    assert [(s["base_offset"], s["size"], s["active"]) for s in doc["segments"]] == \
        [(s["base_offset"], s["log_size"], s["active"]) for s in segs]
    ends = [s["base_offset"] for s in segs[1:]] + [log_end(p)]
    assert [s["end_offset"] for s in doc["segments"]] == ends
    for s in doc["segments"]:
        if s["base_offset"] in largest:
            assert s["largest_timestamp"] == largest[s["base_offset"]]
        if s["time_range"] is not None:  # ListOffsets lands in this segment for both ends of its range
            for ts in s["time_range"]:
                got = list_offsets(p, ts)
                assert got is None or s["base_offset"] <= got < s["end_offset"]


# ------------------------------------------------------------------ navigation


@pytest.mark.parametrize("p", RECORDED)
def test_at_offset_starts_at_the_offset(mnt, p):
    records = expected_records(p)
    offsets = [r["offset"] for r in records]
    start, end = R.answers(p)["segments"][0]["base_offset"], log_end(p)
    targets = [start, end - 1]
    for b in R.batches(p):  # batch starts, inside batches, their ends, gaps after them
        targets += [b["base_offset"], b["base_offset"] + 1, b["last_offset"], b["last_offset"] + 1]
    for o in sample([t for t in targets if start <= t < end], 40, p):
        i = bisect.bisect_left(offsets, o)
        with open(pdir(mnt, p, "at-offset", f"{o}.jsonl"), "rb") as f:
            first = f.readline()
        assert (json.loads(first) if first else None) == (records[i] if i < len(records) else None), o
    for o in sample(targets, 3, p + "whole"):
        if start <= o < end:
            assert lines(pdir(mnt, p, "at-offset", f"{o}.jsonl")) == records[bisect.bisect_left(offsets, o):]
    rng = random.Random(p)
    for _ in range(10 if end > start else 0):
        a = rng.randrange(start, end)
        b = rng.randrange(a, min(end, a + 500) + 1)
        got = [r["offset"] for r in lines(pdir(mnt, p, "at-offset", f"{a}-{b}.jsonl"))]
        assert got == [o for o in offsets if a <= o < b], (a, b)
    assert read(pdir(mnt, p, "at-offset", f"{end}.jsonl")) == b""
    for outside in (end + 1, start - 1):
        if outside >= 0:
            with pytest.raises(FileNotFoundError):
                os.stat(pdir(mnt, p, "at-offset", f"{outside}.jsonl"))


def time_targets(p: str) -> list[int]:
    ts = [r["timestamp"] for r in R.answers(p)["records"]]
    queries = [q["timestamp"] for q in R.answers(p)["queries"] if q["op"] == "LogSegment.findOffsetByTimestamp"]
    picks = sample(ts, 25, p) + sample([q for q in queries if q >= 0], 25, p)
    return sorted({t + d for t in picks for d in (-1, 0, 1) if 0 <= t + d < 1 << 63} | {0, max(ts, default=0) + 1})


@pytest.mark.parametrize("p", RECORDED)
def test_list_offsets_derivation_agrees_with_kafka(p):
    """The expectation used below is Kafka's own answer wherever the reference recorded it: for
    queries on the segment ListOffsets picks, from the log start, findOffsetByTimestamp agrees."""
    largest = largest_timestamps(p)
    log_start = R.answers(p)["segments"][0]["base_offset"]
    checked = 0
    for q in R.answers(p)["queries"]:
        if q["op"] != "LogSegment.findOffsetByTimestamp" or q["starting_offset"] != log_start or q["timestamp"] < 0:
            continue
        picked = next((s for s in sorted(largest) if largest[s] >= q["timestamp"]), None)
        if picked == q["segment"] and q["view"] == "reopened":
            assert list_offsets(p, q["timestamp"]) == (q["result"] or {}).get("offset"), q
            checked += 1
    assert checked > 0 or not largest  # empty-0 has no record to find


@pytest.mark.parametrize("p", RECORDED)
def test_at_time_starts_where_list_offsets_says(mnt, p):
    records = expected_records(p)
    offsets = [r["offset"] for r in records]
    for ts in time_targets(p):
        want = list_offsets(p, ts)
        with open(pdir(mnt, p, "at-time", f"{ts}.jsonl"), "rb") as f:
            first = f.readline()
        assert (json.loads(first)["offset"] if first else None) == want, ts
    picks = time_targets(p)
    rng = random.Random(p)
    for _ in range(8):
        a, b = sorted(rng.sample(picks, 2))
        lo, hi = list_offsets(p, a), list_offsets(p, b)
        want = [] if lo is None else [o for o in offsets if lo <= o and (hi is None or o < hi)]
        assert [r["offset"] for r in lines(pdir(mnt, p, "at-time", f"{a}--{b}.jsonl"))] == want, (a, b)


def test_an_empty_at_time_view_says_why_in_the_mounts_log(mnt):
    """Issue 44: `at-time/-1h--now.jsonl` on older data was silently empty; the mount's log now says why."""
    from lookupd.format.times import iso

    stamps = [r["timestamp"] for r in expected_records("plain-0")]
    first, last = stamps[0], max(stamps)
    where = f"its timestamps run from {iso(first)} (offset 0) to {iso(last)} (offset {stamps.index(last)})"
    late, early = last + 1, first - 1000
    for name, why in ((f"{late}.jsonl", f"every record of plain-0 is older than {iso(late)}: {where}"),
                      (f"{late}--{late + 5}.jsonl", f"every record of plain-0 is older than {iso(late)}: {where}"),
                      (f"0--{early}.jsonl", f"no record of plain-0 is older than {iso(early)}: {where}")):
        assert read(pdir(mnt, "plain-0", "at-time", name)) == b""
        line = f"/plain/0/at-time/{name} is empty: {why}\n"
        deadline = time.monotonic() + 10
        while line not in mnt.log:
            assert time.monotonic() < deadline, mnt.log[-2000:]
            time.sleep(0.05)
    assert read(pdir(mnt, "plain-0", "at-time", f"{last}.jsonl"))  # within the records: no word of it
    assert f"at-time/{last}.jsonl is empty" not in mnt.log


def test_at_time_takes_iso_8601(mnt):
    from datetime import datetime, timezone

    p = "ooo-time-0"
    for ts in time_targets(p)[::7]:
        when = datetime.fromtimestamp(ts / 1000, timezone.utc)
        for name in (when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                     when.isoformat(timespec="milliseconds"), when.replace(tzinfo=None).isoformat(timespec="milliseconds")):
            with open(pdir(mnt, p, "at-time", name + ".jsonl"), "rb") as f:
                with open(pdir(mnt, p, "at-time", f"{ts}.jsonl"), "rb") as g:
                    assert f.readline() == g.readline(), name


def test_concurrent_readers_see_what_one_reader_sees(mnt):
    from concurrent.futures import ThreadPoolExecutor

    jobs = []
    for p in ("compressed-0", "txn-0", "ooo-time-0"):
        for seg in R.answers(p)["segments"]:
            base = stem(seg["base_offset"])
            jobs += [pdir(mnt, p, base + ".records.jsonl"), pdir(mnt, p, base + ".log")]
        jobs += [pdir(mnt, p, "at-offset", f"{o}.jsonl") for o in range(0, 2000, 250)]
    alone = [read(j) for j in jobs]
    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(read, jobs * 2)) == alone * 2


def _minor_faults(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])  # minflt, the 10th field


def test_libfuse_threads_keep_their_python_thread_state(mnt):
    """Each call into Python from a libfuse worker thread made a new thread state, its frame stack fresh
    memory: a page fault in the mount for every read. Kept for the thread's life, the same reads fault in
    next to nothing."""
    fd = os.open(pdir(mnt, "compressed-0", "partition.json"), os.O_RDONLY)  # direct I/O: each pread a call
    try:
        for _ in range(50):  # the worker threads started, their buffers allocated
            os.pread(fd, 4096, 0)
        before = _minor_faults(mnt.proc.pid)
        reads = 400
        for _ in range(reads):
            assert os.pread(fd, 4096, 0)
        faults = _minor_faults(mnt.proc.pid) - before
    finally:
        os.close(fd)
    assert faults < reads // 4, f"{faults} page faults in the mount for {reads} reads"


# ------------------------------------------------------------------ tools


def run(*cmd: str, stdin=None) -> bytes:
    return subprocess.run(cmd, stdin=stdin, capture_output=True, check=True, timeout=60).stdout


def need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.skip(f"{tool} is not installed")
    return path


def test_command_line_tools(mnt, tmp_path):
    p = "compressed-0"
    seg = R.answers(p)["segments"][3]
    base = stem(seg["base_offset"])
    jsonl, log = pdir(mnt, p, base + ".records.jsonl"), pdir(mnt, p, base + ".log")
    content, raw = read(jsonl), read(os.path.join(R.log_dir(p), base + ".log"))
    want = [r for r in expected_records(p) if seg["base_offset"] <= r["offset"] < seg["read_next_offset"]]
    assert [json.loads(line) for line in content.splitlines()] == want

    listing = run(need("ls"), "-l", pdir(mnt, p)).decode().splitlines()
    sizes = {line.split()[-1]: int(line.split()[4]) for line in listing[1:]}
    assert sizes[base + ".log"] == len(raw) and sizes[base + ".records.jsonl"] == 0
    assert sizes[base + ".index"] == seg["files"][base + ".index"]["size"]

    cat = subprocess.Popen([need("cat"), jsonl], stdout=subprocess.PIPE)
    assert run(need("jq"), "-c", ".offset", stdin=cat.stdout).decode().split() == [str(r["offset"]) for r in want]
    assert cat.wait() == 0
    for f, data in ((jsonl, content), (log, raw)):
        assert run("head", "-c", "1000", f) == data[:1000]
        assert run("tail", "-c", "1000", f) == data[-1000:]
        assert run("tail", "-n", "2", f) == b"".join(data.splitlines(keepends=True)[-2:])
        assert run("cp", f, str(tmp_path / "cp")) == b"" and read(str(tmp_path / "cp")) == data
        with open(f, "rb") as src, open(tmp_path / "copy", "wb") as dst:
            shutil.copyfileobj(src, dst)
        assert read(str(tmp_path / "copy")) == data
        with open(f, encoding="latin-1", newline="") as text:
            assert text.read().encode("latin-1") == data
    assert run(need("less"), jsonl) == content
    at = run(need("jq"), "-c", ".offset", pdir(mnt, p, "at-offset", "100-110.jsonl")).decode().split()
    assert at == [str(o) for o in range(100, 110)]


def test_extended_attributes_are_not_supported(mnt, tmp_path):
    # ENOTSUP, not ENODATA, for the ACL names too: GNU ls -l then stops asking for the rest of the mount
    # (one getxattr per file was half of `ls -lR`'s system calls), and cp -a copies without ACLs.
    f = pdir(mnt, "plain-0", stem(0) + ".log")
    for path in (f, pdir(mnt, "plain-0"), pdir(mnt, "plain-0", stem(0) + ".records.jsonl")):
        for name in ("system.posix_acl_access", "system.posix_acl_default", "security.selinux", "user.note"):
            with pytest.raises(OSError) as e:
                os.getxattr(path, name)
            assert e.value.errno == errno.ENOTSUP, (path, name)
        with pytest.raises(OSError) as e:
            os.listxattr(path)
        assert e.value.errno == errno.ENOTSUP, path
    assert run("cp", "-a", f, str(tmp_path / "copy")) == b""
    assert read(str(tmp_path / "copy")) == read(f)


# ------------------------------------------------------------------ refusals


def test_writes_fail_with_erofs(mnt, tmp_path):
    f = pdir(mnt, "plain-0", stem(0) + ".log")
    view = pdir(mnt, "plain-0", stem(0) + ".records.jsonl")
    attempts = {
        "open for writing": lambda: os.open(f, os.O_WRONLY),
        "open read-write": lambda: os.open(view, os.O_RDWR),
        "open to append": lambda: os.open(f, os.O_WRONLY | os.O_APPEND),
        "open truncating": lambda: os.open(view, os.O_RDONLY | os.O_TRUNC),
        "create": lambda: os.open(pdir(mnt, "plain-0", "new.log"), os.O_CREAT | os.O_WRONLY, 0o644),
        "create a topic": lambda: os.open(mnt.path("new"), os.O_CREAT | os.O_WRONLY, 0o644),
        "mkdir": lambda: os.mkdir(mnt.path("plain", "1")),
        "mkdir in at-offset": lambda: os.mkdir(pdir(mnt, "plain-0", "at-offset", "x")),
        "rename": lambda: os.rename(f, f + ".old"),
        "rename a directory": lambda: os.rename(mnt.path("plain"), mnt.path("plain2")),
        "unlink": lambda: os.unlink(f),
        "rmdir": lambda: os.rmdir(pdir(mnt, "empty-0")),
        "truncate": lambda: os.truncate(f, 0),
        "chmod": lambda: os.chmod(f, 0o644),
        "chown": lambda: os.chown(f, 0, 0),
        "utimens": lambda: os.utime(f, (0, 0)),
        "touch": lambda: os.utime(view),
        "setxattr": lambda: os.setxattr(f, "user.note", b"x"),
        "removexattr": lambda: os.removexattr(f, "user.note"),
        "symlink": lambda: os.symlink("/etc/passwd", pdir(mnt, "plain-0", "link")),
        "link": lambda: os.link(f, pdir(mnt, "plain-0", "hard")),
        "mknod": lambda: os.mkfifo(pdir(mnt, "plain-0", "fifo")),
    }
    for what, attempt in attempts.items():
        with pytest.raises(OSError) as e:
            attempt()
        assert e.value.errno == errno.EROFS, what
    assert read(f)[:8] == bytes(8)  # the first batch's base offset, unchanged


HOSTILE = {
    "plain/0/at-offset/../../etc": errno.ENOENT,
    "plain/0/at-offset/../../../etc/passwd": errno.ENOENT,
    "plain/0/at-time/garbage.jsonl": errno.ENOENT,
    "plain/0/at-time/.jsonl": errno.ENOENT,
    "plain/0/at-time/--.jsonl": errno.ENOENT,
    "plain/0/at-time/1--2--3.jsonl": errno.ENOENT,
    "plain/0/at-time/2023-13-45.jsonl": errno.ENOENT,
    "plain/0/at-time/\u00e9t\u00e9.jsonl": errno.ENOENT,
    "plain/0/at-time/\uff11\uff12.jsonl": errno.ENOENT,
    "plain/0/at-time/-1.jsonl": errno.ENOENT,
    "plain/0/at-time/99999999999999999999.jsonl": errno.EINVAL,
    "plain/0/at-time/1969-12-31T23:59:59Z.jsonl": errno.EINVAL,
    "plain/0/at-time/5--3.jsonl": errno.EINVAL,
    "plain/0/at-offset/-5.jsonl": errno.ENOENT,
    "plain/0/at-offset/1.txt": errno.ENOENT,
    "plain/0/at-offset/1-.jsonl": errno.ENOENT,
    "plain/0/at-offset/" + "9" * 5000 + ".jsonl": errno.ENAMETOOLONG,
    "plain/0/at-offset/" + "9" * 200 + ".jsonl": errno.EINVAL,
    "plain/0/at-offset/9223372036854775808.jsonl": errno.EINVAL,
    "plain/0/at-offset/9223372036854775807.jsonl": errno.ENOENT,
    "plain/0/at-offset/10-5.jsonl": errno.EINVAL,
    "plain/0/at-offset/1.jsonl/x": errno.ENOTDIR,
    "plain/0/partition.json/x": errno.ENOTDIR,
    "plain/0/at-offset/x/y/z": errno.ENOENT,
    "plain/0/00000000000000000000.bogus": errno.ENOENT,
    "plain/0/0.log": errno.ENOENT,
    "plain/0/99999999999999999999.log": errno.ENOENT,
    "plain/0/00000000000000000001.log": errno.ENOENT,
    "plain/0/../../../../etc/passwd": errno.ENOENT,
    "plain/00": errno.ENOENT,
    "plain/-1": errno.ENOENT,
    "plain/2147483648": errno.ENOENT,
    "plain/99999999999999999999999": errno.ENOENT,
    "plain/7": errno.ENOENT,
    "no-such-topic": errno.ENOENT,
    "bad topic": errno.ENOENT,
    "b\u00e4d": errno.ENOENT,
    "...": errno.ENOENT,
    "x" * 250: errno.ENOENT,
    "x" * 300: errno.ENOENT,
    # Past FUSE's classic 1,024-byte limit on a name: kernels with the limit refuse it themselves, newer ones
    # (6.18 here, with libfuse 3) ask the mount, which finds no such name.
    "x" * 2000: (errno.ENAMETOOLONG, errno.ENOENT),
    "bad\\topic/0": errno.ENOENT,
}


def test_hostile_names_are_refused_without_harm(mnt):
    for name, want in HOSTILE.items():
        for attempt in (os.stat, read):
            with pytest.raises(OSError) as e:
                attempt(mnt.path(name))
            assert e.value.errno in (want if isinstance(want, tuple) else (want,)), (name[:60], attempt.__name__)
    assert sorted(os.listdir(mnt.root)) == sorted({split(p)[0] for p in PARTS})
    assert "Traceback" not in mnt.log


def test_the_mount_logs_only_its_own_lines(mnt):
    """Everything on the mount's stderr is fusefs's log, each line dated: nothing from libfuse (3.14 used
    to print "Ignoring invalid max threads value" at every mount, see fusefs.cli.MAX_THREADS)."""
    lines = [line for line in mnt.log.splitlines() if line.strip()]
    assert lines, "the mount logged nothing, not even that it mounted"
    assert [line for line in lines if not re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ ", line)] == []
