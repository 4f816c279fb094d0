"""The segment writer and `recover` reproduce Kafka's files byte for byte from the same batches."""

from __future__ import annotations

import os
import shutil

import pytest

import reference as R
from lookupd.log.locallog import LocalLog
from lookupd.tools.recover import recover_partition
from lookupd.tools.writer import LogWriter, SegmentWriter

WRITTEN = [p for p in R.PARTITIONS if p != "empty-0"]


def config(p):
    c = R.answers(p)["config"]
    roll = c["segment.bytes (roll threshold via LogSegment.shouldRoll)"]
    return {"segment_bytes": roll if isinstance(roll, int) else (1 << 31) - 1,
            "index_interval_bytes": c["index.interval.bytes (indexIntervalBytes)"],
            "max_index_size": c["segment.index.bytes (maxIndexSize)"]}


def assert_same_files(ours, theirs):
    names = sorted(os.listdir(theirs))
    assert sorted(os.listdir(ours)) == names
    for name in names:
        with open(os.path.join(ours, name), "rb") as a, open(os.path.join(theirs, name), "rb") as b:
            assert a.read() == b.read(), name


def replay(p, out_dir):
    """Append the reference batches in order through LogWriter, rolling where Kafka rolled."""
    cfg = config(p)
    w = LogWriter(str(out_dir), **cfg)
    forced = 0
    for b in R.batches(p):
        with open(R.log_dir(p) / f"{b['segment']:020d}.log", "rb") as f:
            f.seek(b["position"])
            data = f.read(b["size_in_bytes"])
        if w.segment is not None and w.segment.base_offset != b["segment"]:
            if not w.segment.should_roll(len(data), b["last_offset"], w.segment_bytes):
                w.roll(b["segment"])  # an explicit roll (large-0)
                forced += 1
        elif w.segment is not None:
            assert not w.segment.should_roll(len(data), b["last_offset"], w.segment_bytes), b
        w.append(data)
    w.close(trim_active=p == "closed-0")
    return forced


@pytest.mark.parametrize("p", WRITTEN)
def test_writer_reproduces_kafka_files(tmp_path, p):
    forced = replay(p, tmp_path)
    assert forced == (1 if p == "large-0" else 0)
    assert_same_files(tmp_path, R.log_dir(p))


def test_empty_segment_files(tmp_path):
    SegmentWriter(str(tmp_path), 0, max_index_size=10 << 20).close()
    assert_same_files(tmp_path, R.log_dir("empty-0"))


def test_written_data_reads_back(tmp_path):
    replay("txn-0", tmp_path)
    log = LocalLog(str(tmp_path), "txn", 0)
    ref = LocalLog(str(R.log_dir("txn-0")), "txn", 0)
    assert log.info()["log_end_offset"] == ref.info()["log_end_offset"]
    assert log.aborted_transactions(0, 10_000) == ref.aborted_transactions(0, 10_000)


def copy_partition(p, dest):
    shutil.copytree(R.log_dir(p), dest)
    for name in os.listdir(dest):
        os.chmod(os.path.join(dest, name), 0o644)
    return dest


@pytest.mark.parametrize("p", ["plain-0", "txn-0", "compressed-0", "large-0", "closed-0", "bigbase-0"])
def test_recover_rebuilds_kafka_identical_indexes(tmp_path, p):
    d = copy_partition(p, tmp_path / p)
    bases = sorted(int(n[:20]) for n in os.listdir(d) if n.endswith(".log"))
    rolled = bases[:-1]
    for i, base in enumerate(rolled):  # break every rolled segment's indexes in a different way
        stem = os.path.join(d, f"{base:020d}")
        kind = i % 4
        if kind == 0:
            os.remove(stem + ".index")
        elif kind == 1:
            os.remove(stem + ".timeindex")
        elif kind == 2:
            with open(stem + ".index", "ab") as f:
                f.write(b"\x00\x00\x00")  # not a multiple of 8
        else:
            os.truncate(stem + ".timeindex", 0)
            with open(stem + ".index", "r+b") as f:
                f.write(b"\x7f\xff\xff\xff\x00\x00\x00\x00")  # out of order
        if os.path.exists(stem + ".txnindex"):
            os.remove(stem + ".txnindex")
    reports = recover_partition(str(d), index_interval_bytes=config(p)["index_interval_bytes"])
    assert [r.action for r in reports] == ["rebuilt"] * len(rolled) + ["active"]
    assert not os.path.exists(os.path.join(d, f"{bases[-1]:020d}.index.tmp"))
    for base in rolled:
        for suffix in (".index", ".timeindex", ".txnindex"):
            ours, theirs = os.path.join(d, f"{base:020d}{suffix}"), R.log_dir(p) / f"{base:020d}{suffix}"
            assert os.path.exists(ours) == theirs.exists(), (base, suffix)
            if theirs.exists():
                assert open(ours, "rb").read() == theirs.read_bytes(), (base, suffix)
    # Nothing needs rebuilding now, and a dry run of --all writes nothing.
    assert {r.action for r in recover_partition(str(d), index_interval_bytes=config(p)["index_interval_bytes"])} <= {"ok", "active"}
    before = {n: os.stat(os.path.join(d, n)).st_mtime_ns for n in os.listdir(d)}
    recover_partition(str(d), rebuild_all=True, dry_run=True)
    assert {n: os.stat(os.path.join(d, n)).st_mtime_ns for n in os.listdir(d)} == before


def test_recover_reports_a_corrupt_tail_without_touching_the_log(tmp_path):
    d = copy_partition("plain-0", tmp_path / "plain-0")
    log0 = os.path.join(d, f"{0:020d}.log")
    size = os.path.getsize(log0)
    os.truncate(log0, size - 100)  # the last batch is cut off
    os.remove(os.path.join(d, f"{0:020d}.index"))
    reports = recover_partition(str(d))
    r = reports[0]
    assert r.action == "rebuilt" and r.invalid_bytes > 0
    assert "cut off" in r.problems[0] and "at byte" in r.problems[0]
    assert os.path.getsize(log0) == size - 100
