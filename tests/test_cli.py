"""The `lookupd` command line, run as a user runs it: dump, demo-data, recover, and their errors."""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import subprocess
import sys

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
