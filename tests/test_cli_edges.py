"""The `lookupd` command's edges a newcomer meets: trailing bytes in any segment, recover's .txnindex and its
last line, demo-data's size, and errors that finish their sentence."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import reference as R


def lookupd(*args, check: int):
    r = subprocess.run([sys.executable, "-m", "lookupd", *map(str, args)], capture_output=True, text=True, timeout=300)
    assert r.returncode == check, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr, r.stderr
    return r


def partition_copy(name: str, dest) -> str:
    out = os.path.join(dest, name)
    shutil.copytree(R.log_dir(name), out)
    return out


def test_dump_reports_invalid_bytes_at_the_end_of_the_active_segment(tmp_path):
    part = partition_copy("plain-0", tmp_path)
    active = sorted(n for n in os.listdir(part) if n.endswith(".log"))[-1]
    with open(os.path.join(part, active), "ab") as f:
        f.write(b"not a record batch")
    r = lookupd("dump", os.path.join(part, active), check=0)
    assert r.stdout.count("baseOffset:") == sum(1 for b in R.batches("plain-0") if b["segment"] == int(active[:20]))
    assert r.stdout.endswith(f"Found 18 invalid bytes at the end of {active}\n"), r.stdout[-300:]
    r = lookupd("dump", "--json", os.path.join(part, active), check=0)
    assert json.loads(r.stdout.splitlines()[-1]) == {"type": "trailing_bytes", "file": os.path.join(part, active),
                                                     "bytes": 18}


def test_dump_of_a_file_that_is_no_segment_says_so_wherever_it_sits(tmp_path):
    part = tmp_path / "t-0"
    part.mkdir()
    text = b"this is not a kafka segment\n"
    (part / "00000000000000000000.log").write_bytes(text)
    r = lookupd("dump", part / "00000000000000000000.log", check=0)  # the active segment
    assert r.stdout.splitlines()[-1] == f"Found {len(text)} invalid bytes at the end of 00000000000000000000.log"
    (part / "00000000000000000100.log").write_bytes(b"")  # now it is a rolled one: corrupt
    r = lookupd("dump", part / "00000000000000000000.log", check=1)
    assert "00000000000000000000.log at byte 0" in r.stderr


def test_recover_rebuilds_a_deleted_txnindex_and_says_what_it_did(tmp_path):
    part = partition_copy("txn-0", tmp_path)
    rolled = sorted(n for n in os.listdir(part) if n.endswith(".txnindex"))[:-1]
    victim = next(n for n in rolled if os.path.getsize(os.path.join(part, n)) > 0)
    before = open(os.path.join(part, victim), "rb").read()
    r = lookupd("recover", part, check=0)
    assert r.stdout.splitlines()[-1].startswith("nothing to do: the indexes of all 19 rolled segments in 1 partition "
                                                "are sound"), r.stdout
    os.remove(os.path.join(part, victim))
    r = lookupd("recover", part, "--dry-run", check=0)
    assert f"{victim} is missing" in r.stdout and "would rebuild the indexes of 1 of 19" in r.stdout, r.stdout
    r = lookupd("recover", part, check=0)
    assert f"{victim[:20]}: rebuilt ({victim} is missing" in r.stdout, r.stdout
    assert r.stdout.splitlines()[-1].startswith("rebuilt the indexes of 1 of 19 rolled segments in 1 partition")
    assert open(os.path.join(part, victim), "rb").read() == before
    assert lookupd("recover", part, check=0).stdout.startswith("nothing to do")


def test_demo_data_refuses_a_size_that_is_not_positive(tmp_path):
    for bad in ("-5", "0", "many"):
        r = lookupd("demo-data", tmp_path / "sample", "--records", bad, check=2)
        assert f"--records: must be a positive integer, got '{bad}'" in r.stderr
        assert not (tmp_path / "sample").exists()


def test_a_dir_without_partitions_is_named_in_a_whole_sentence(tmp_path):
    for command in ("dump", "recover"):
        r = lookupd(command, tmp_path, check=1)
        assert r.stderr.strip().endswith("is neither a partition directory nor a log dir holding partition "
                                         "directories (named <topic>-<partition>)"), r.stderr


def test_dump_of_the_dir_above_the_log_dirs_names_them(tmp_path):
    """Issue 44: one level too high, the log dirs in it are named."""
    data = tmp_path / "data"
    for d in ("logs-a", "logs-b"):
        shutil.copytree(R.log_dir("plain-0"), data / d / "plain-0")
    r = lookupd("dump", data, check=1)
    assert r.stderr == (f"lookupd dump: {data} is neither a partition directory nor a log dir holding partition "
                        f"directories (named <topic>-<partition>); the log dirs in it: {data / 'logs-a'} and "
                        f"{data / 'logs-b'}\n")
