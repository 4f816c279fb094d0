"""`lookupd verify`: the healthy corpus has no problem, every damage the suite makes is found, and what
`lookupd recover` leaves, verify accepts (the `.log`'s own damage, which recover reports and never mends,
both report alike)."""

from __future__ import annotations

import functools
import json
import os
import shutil
import struct
import subprocess
import sys
from typing import NamedTuple

import pytest

import reference as R
from lookupd.log.locallog import list_segments
from lookupd.tools.cli import main


def lookupd(*args, check: int | None = None) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "lookupd", *map(str, args)], capture_output=True, text=True, timeout=300)
    assert "Traceback" not in r.stderr, r.stderr
    if check is not None:
        assert r.returncode == check, (r.returncode, r.stdout[-3000:], r.stderr[-3000:])
    return r


def test_the_healthy_corpus_has_no_problem():
    segments = sum(len(list_segments(str(R.log_dir(p)))) for p in R.PARTITIONS)
    r = lookupd("verify", R.LOGS, check=0)
    assert r.stdout == f"{segments} segments, 0 problems\n"
    r = lookupd("verify", "--json", R.log_dir("txn-0"), R.log_dir("plain-0") / "00000000000000000231.index", check=0)
    assert [json.loads(line) for line in r.stdout.splitlines()] == \
        [{"type": "summary", "segments": len(list_segments(str(R.log_dir("txn-0")))) + 1, "problems": 0}]


# ------------------------------------------------------------------ the damage the suite makes, one kind each


def _stem(d, i: int) -> str:
    """Rolled segment i of partition dir d, as a path without suffix."""
    return os.path.join(d, f"{list_segments(str(d))[i]:020d}")


def _batch_at(path: str, n: int) -> int:
    """The position of the n-th batch of a .log."""
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    for _ in range(n):
        pos += 12 + struct.unpack_from(">i", data, pos + 8)[0]
    return pos


def index_removed(d):
    os.remove(_stem(d, 1) + ".index")
    return f"{_stem(d, 1)}.index is missing", True


def timeindex_removed(d):
    os.remove(_stem(d, 1) + ".timeindex")
    return f"{_stem(d, 1)}.timeindex is missing", True


def index_torn(d):
    with open(_stem(d, 1) + ".index", "ab") as f:
        f.write(b"\x00\x00\x00")  # not a multiple of 8
    return f"{_stem(d, 1)}.index", True


def index_out_of_order_timeindex_emptied(d):
    os.truncate(_stem(d, 2) + ".timeindex", 0)
    with open(_stem(d, 2) + ".index", "r+b") as f:
        f.write(b"\x7f\xff\xff\xff\x00\x00\x00\x00")
    return f"{_stem(d, 2)}.index", True


def index_entry_mid_batch(d):
    with open(_stem(d, 1) + ".index", "r+b") as f:
        f.seek(12)
        position = int.from_bytes(f.read(4), "big")
        f.seek(12)
        f.write((position + 1).to_bytes(4, "big"))
    return "entry 1", True


def time_index_last_offset(d):
    """The last entry keeps its timestamp but names another batch's last offset."""
    path = _stem(d, 1) + ".timeindex"
    with open(path, "r+b") as f:
        data = f.read()
        f.seek(len(data) - 4)
        f.write(struct.pack(">i", struct.unpack_from(">i", data, len(data) - 16)[0]))  # the entry before's offset
    return "the first batch with the segment's max timestamp ends at offset", True


def txnindex_removed(d):
    victim = next(_stem(d, i) for i in range(len(list_segments(str(d))) - 1)
                  if os.path.getsize(_stem(d, i) + ".txnindex") > 0)
    os.remove(victim + ".txnindex")
    return f"{victim}.txnindex is missing (", True


def txnindex_entry_changed(d):
    victim = next(_stem(d, i) for i in range(len(list_segments(str(d))) - 1)
                  if os.path.getsize(_stem(d, i) + ".txnindex") > 0)
    with open(victim + ".txnindex", "r+b") as f:
        f.seek(2 + 8 + 8 + 8)  # entry 0's last stable offset
        lso = struct.unpack(">q", f.read(8))[0]
        f.seek(2 + 8 + 8 + 8)
        f.write(struct.pack(">q", lso + 1))
    return f"{victim}.txnindex: ", True


def batch_bit_flipped(d):
    log = _stem(d, 0) + ".log"
    pos = _batch_at(log, 2)
    with open(log, "r+b") as f:
        f.seek(pos + 100)
        byte = f.read(1)
        f.seek(pos + 100)
        f.write(bytes([byte[0] ^ 0xFF]))
    return f"at byte {pos}: record batch is corrupt", False


def log_cut_off(d):
    log = _stem(d, 0) + ".log"
    os.truncate(log, os.path.getsize(log) - 100)
    return "batch is cut off", False


def offsets_out_of_order(d):
    """Batch 3's base offset set to batch 1's: the CRC does not cover it, the order check does."""
    log = _stem(d, 0) + ".log"
    with open(log, "r+b") as f:
        f.seek(_batch_at(log, 1))
        first = f.read(8)
        f.seek(_batch_at(log, 3))
        f.write(first)
    return "does not come after offset", False


DAMAGE = [("plain-0", index_removed), ("plain-0", timeindex_removed), ("plain-0", index_torn),
          ("plain-0", index_out_of_order_timeindex_emptied), ("plain-0", index_entry_mid_batch),
          ("ooo-time-0", time_index_last_offset), ("txn-0", txnindex_removed), ("txn-0", txnindex_entry_changed),
          ("plain-0", batch_bit_flipped), ("plain-0", log_cut_off), ("plain-0", offsets_out_of_order)]


class Ran(NamedTuple):
    returncode: int
    stdout: str


def in_process(capsys, *args) -> Ran:
    """`lookupd ARGS...` in this process (a subprocess per call would double the test's time)."""
    code = main([*map(str, args)])
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return Ran(code, out)


@pytest.mark.parametrize("p, damage", DAMAGE, ids=[d.__name__ for _, d in DAMAGE])
def test_every_damage_is_found_and_what_recover_leaves_verify_accepts(tmp_path, capsys, p, damage):
    lookupd = functools.partial(in_process, capsys)
    d = tmp_path / p
    shutil.copytree(R.log_dir(p), d)
    for n in os.listdir(d):
        os.chmod(d / n, 0o644)
    said, mendable = damage(str(d))
    r = lookupd("verify", d)
    assert r.returncode == 1
    lines = r.stdout.splitlines()
    assert any(said in line for line in lines[:-1]), r.stdout
    assert lines[-1] == f"{len(list_segments(str(d)))} segments, {len(lines) - 1} problem{'s' if len(lines) > 2 else ''}"
    objects = [json.loads(line) for line in lookupd("verify", "--json", d).stdout.splitlines()]
    assert [o["message"] for o in objects[:-1]] == lines[:-1] and objects[-1]["problems"] == len(lines) - 1
    assert all(o["type"] == "problem" and o["file"].startswith(str(d)) for o in objects[:-1])

    recovered = lookupd("recover", d)
    after = lookupd("verify", d)
    if mendable:
        assert recovered.returncode == 0 and after.returncode == 0, (recovered.stdout, after.stdout)
        assert after.stdout.endswith(", 0 problems\n")
    else:  # the .log's own damage: recover reports it and leaves it, verify reports the same
        assert recovered.returncode == 1 and after.returncode == 1
        problems = after.stdout.splitlines()[:-1]
        assert problems and all(line in recovered.stdout for line in problems), (recovered.stdout, after.stdout)
