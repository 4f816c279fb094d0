"""The `lookupd` command line, run as a user runs it: dump, demo-data, recover, and their errors."""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import subprocess
import sys
from datetime import datetime, timezone

import pytest

import reference as R
from lookupd.tools.progress import Progress


def lookupd(*args, check=None):
    r = subprocess.run([sys.executable, "-m", "lookupd", *map(str, args)], capture_output=True, text=True, timeout=300)
    if check is not None:
        assert r.returncode == check, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr, r.stderr
    return r


def unpayload(v):
    if v is None:
        return None
    if isinstance(v, dict):
        return base64.b64decode(v["base64"])
    return v.encode()


@pytest.mark.parametrize("p", ["txn-0", "compressed-0", "logappend-0"])
def test_dump_json_records_equal_kafka(p):
    r = lookupd("dump", R.log_dir(p), "--print-data", "--json", check=0)
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    batches = [o for o in lines if o["type"] == "batch"]
    records = [o for o in lines if o["type"] == "record"]
    assert len(batches) == len(R.batches(p)) and all(b["valid"] for b in batches)
    want = R.answers(p)["records"]
    assert len(records) == len(want)
    for got, w in zip(records, want):
        assert (got["offset"], got["timestamp"]) == (w["offset"], w["timestamp"])
        assert unpayload(got["key"]) == (base64.b64decode(w["key"]) if w["key"] is not None else None)
        assert unpayload(got["value"]) == (base64.b64decode(w["value"]) if w["value"] is not None else None)
        assert [(h["key"], unpayload(h["value"])) for h in got["headers"]] == \
               [(k, base64.b64decode(v) if v is not None else None) for k, v in w["headers"]]
    assert sum(1 for o in records if "control" in o) == sum(1 for b in R.batches(p) if b["is_control"])


def test_dump_text_like_kafka_dump_log():
    r = lookupd("dump", R.log_dir("plain-0") / "00000000000000000000.log", check=0)
    lines = r.stdout.splitlines()
    assert lines[1] == "Log starting offset: 0"
    b = R.batches("plain-0")[0]
    assert lines[2].startswith(f"baseOffset: {b['base_offset']} lastOffset: {b['last_offset']} count: {b['record_count']}")
    assert f"position: 0 CreateTime: {b['max_timestamp']} size: {b['size_in_bytes']}" in lines[2]
    assert lines[2].endswith(f"crc: {b['crc']} isvalid: true")
    r = lookupd("dump", R.log_dir("plain-0") / "00000000000000000000.index", check=0)
    assert r.stdout.splitlines()[1:] == [f"offset: {o} position: {p}" for o, p in
                                         R.answers("plain-0")["offset_index"]["0"]["entries"]]


def test_sanity_check_and_verify_pass_on_kafka_data():
    r = lookupd("dump", R.LOGS, "--index-sanity-check", check=0)
    assert r.stdout.count("passed sanity check.") == sum(
        1 for p in R.PARTITIONS for n in os.listdir(R.log_dir(p)) if n.endswith(("index", "timeindex", "txnindex")))
    lookupd("dump", R.LOGS, "--verify-index-only", check=0)


@pytest.fixture
def plain_copy(tmp_path):
    d = tmp_path / "plain-0"
    shutil.copytree(R.log_dir("plain-0"), d)
    for n in os.listdir(d):
        os.chmod(d / n, 0o644)
    return d


def test_verify_reports_a_wrong_entry(plain_copy):
    with open(plain_copy / "00000000000000000231.index", "r+b") as f:
        f.seek(12)
        position = int.from_bytes(f.read(4), "big")
        f.seek(12)
        f.write((position + 1).to_bytes(4, "big"))  # entry 1 now points into the middle of a batch
    r = lookupd("dump", plain_copy / "00000000000000000231.index", "--verify-index-only", check=1)
    assert "00000000000000000231.index: entry 1" in r.stderr and "is not the start of a batch" in r.stderr


def test_corrupt_batch_is_reported_with_position(plain_copy):
    b = R.batches("plain-0")[2]
    with open(plain_copy / "00000000000000000000.log", "r+b") as f:
        f.seek(b["position"] + 100)
        byte = f.read(1)
        f.seek(b["position"] + 100)
        f.write(bytes([byte[0] ^ 0xFF]))
    r = lookupd("dump", plain_copy / "00000000000000000000.log", check=1)
    assert f"at byte {b['position']}: record batch is corrupt" in r.stderr
    assert r.stdout.count("baseOffset:") == sum(1 for x in R.batches("plain-0") if x["segment"] == 0)
    os.truncate(plain_copy / "00000000000000000000.log", b["position"] + 50)
    r = lookupd("dump", plain_copy / "00000000000000000000.log", check=1)
    assert f"at byte {b['position']}: batch is cut off" in r.stderr


def test_bad_paths_get_one_line_errors(tmp_path):
    r = lookupd("dump", tmp_path / "missing.log", check=1)
    assert "No such file or directory" in r.stderr
    (tmp_path / "notes.txt").write_text("x")
    r = lookupd("dump", tmp_path / "notes.txt", check=1)
    assert "is not a segment file" in r.stderr
    r = lookupd("dump", tmp_path, check=1)
    assert "neither a partition directory nor a log dir" in r.stderr


def test_demo_data_then_dump_and_recover(tmp_path):
    out = tmp_path / "sample"
    r = lookupd("demo-data", out, "--records", 3000, check=0)
    assert "payments-0" in r.stdout and "orders-2" in r.stdout
    r = lookupd("demo-data", out, check=1)
    assert "refusing to write into a non-empty directory" in r.stderr
    lookupd("dump", out, "--verify-index-only", check=0)
    first = sorted(n for n in os.listdir(out / "orders-0") if n.endswith(".index"))[0]
    before = (out / "orders-0" / first).read_bytes()
    os.remove(out / "orders-0" / first)
    r = lookupd("recover", out, "--dry-run", check=0)
    assert "would rebuild" in r.stdout and not (out / "orders-0" / first).exists()
    r = lookupd("recover", out, check=0)
    assert f"{first[:20]}: rebuilt ({first} is missing)" in r.stdout
    assert (out / "orders-0" / first).read_bytes() == before


def test_progress_line_on_a_terminal():
    buf = io.StringIO()
    with Progress(1000, "dump", buf, enabled=True) as p:
        p._drawn = -1.0
        p.advance(500)
        p.write("a line", stream=buf)
    text = buf.getvalue()
    assert "dump:  50.0%" in text and "a line\n" in text and text.endswith("\r\x1b[K") is False
    quiet = io.StringIO()
    with Progress(1000, "dump", quiet, enabled=False) as p:
        p.advance(1000)
    assert quiet.getvalue() == ""


def _dump_json(*args) -> list[dict]:
    return [json.loads(line) for line in lookupd("dump", *args, "--json", check=0).stdout.splitlines()]


def test_dump_offsets_and_times_keep_what_the_ranges_hold():
    """Issue 44: --offsets A..B and --times T1..T2 instead of piping kafka-dump-log through grep."""
    p = "ooo-time-0"  # out-of-order timestamps: a batch's max timestamp is not its records'
    batches, records = R.batches(p), R.answers(p)["records"]
    lo, hi = records[len(records) // 3]["offset"], records[len(records) // 2]["offset"]
    got = _dump_json(R.log_dir(p), "--offsets", f"{lo}..{hi}")
    assert [o["base_offset"] for o in got if o["type"] == "batch"] == \
        [b["base_offset"] for b in batches if b["last_offset"] >= lo and b["base_offset"] <= hi]
    assert {o["type"] for o in got} == {"batch", "offset_index_entry", "time_index_entry"}
    assert all(lo <= o["offset"] <= hi for o in got if o["type"] != "batch")
    got = _dump_json(R.log_dir(p), "--offsets", f"{lo}..{hi}", "--print-data")
    assert [o["offset"] for o in got if o["type"] == "record"] == list(range(lo, hi + 1))

    stamps = sorted(r["timestamp"] for r in records)
    t1, t2 = stamps[len(stamps) // 4], stamps[len(stamps) // 3]
    got = _dump_json(R.log_dir(p), "--times", f"{t1}..{t2}", "--print-data")
    want = [r["offset"] for r in records if t1 <= r["timestamp"] <= t2]
    assert [o["offset"] for o in got if o["type"] == "record"] == want and len(want) > 10
    assert [o["base_offset"] for o in got if o["type"] == "batch"] == \
        sorted({b["base_offset"] for b in batches for o in want if b["base_offset"] <= o <= b["last_offset"]})
    iso = lambda ms: datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds")  # noqa: E731
    assert _dump_json(R.log_dir(p), "--times", f"{iso(t1)}..{iso(t2)}", "--print-data") == got
    got = _dump_json(R.log_dir(p), "--times", f"{t1}..{t2}")  # batch lines by the max timestamp they show
    assert [o["base_offset"] for o in got if o["type"] == "batch"] == \
        [b["base_offset"] for b in batches if t1 <= b["max_timestamp"] <= t2]
    assert all(t1 <= o["timestamp"] <= t2 for o in got if o["type"] == "time_index_entry")
    assert "offset_index_entry" not in {o["type"] for o in got}  # no timestamp to keep them by
    # Open ends, one offset, text output, and a time before now.
    assert [o["offset"] for o in _dump_json(R.log_dir(p), "--offsets", f"..{lo}", "--print-data")
            if o["type"] == "record"] == list(range(0, lo + 1))
    text = lookupd("dump", R.log_dir(p), "--offsets", str(hi), "--print-data", check=0).stdout
    assert [line.split()[2] for line in text.splitlines() if line.startswith("| offset:")] == [str(hi)]
    assert not [o for o in _dump_json(R.log_dir(p), "--times", "-1h..", "--print-data")  # written long ago
                if o["type"] in ("batch", "record", "time_index_entry")]


@pytest.mark.parametrize("flag, value, message", [
    ("--offsets", "5..x", "lookupd dump: --offsets '5..x': 'x' is not an offset; give A..B, A.. or ..B (offsets "
                          "are integers >= 0)\n"),
    ("--offsets", "9..3", "lookupd dump: --offsets '9..3': the range ends before it starts\n"),
    ("--offsets", "..", "lookupd dump: --offsets '..': give at least one end of A..B\n"),
    ("--times", "yesterday..", "lookupd dump: --times 'yesterday..': 'yesterday' is not a time: give epoch "
                               "milliseconds, ISO 8601 (2026-01-01T10:00:00Z, 2026-01-01 10:00), a time before now "
                               "(-1h, -30m, -2d) or now, or earliest, latest, max\n"),
])
def test_dump_range_mistakes_are_one_line(flag, value, message):
    r = lookupd("dump", R.log_dir("plain-0"), flag, value, check=1)
    assert (r.stdout, r.stderr) == ("", message)
