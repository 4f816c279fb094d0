"""Read-only by construction: no read path opens a broker file for writing (KAFKA-5104).

Two independent checks: every descriptor the reader holds into the log dir is O_RDONLY, and
the whole read path works for a user who may read the files but not write them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

import reference as R
from lookupd.log.logmanager import LogManager


def exercise(lm: LogManager) -> None:
    """Touch every read path on every partition."""
    for log in lm.logs():
        log.info()
        log.segments_info()
        end = log.log_end_offset
        for t in (log.log_start_offset, end // 2, max(end - 1, 0)):
            log.lookup_offset(t, "floor")
            log.lookup_offset(t, "ceiling")
            if log.log_start_offset <= t < end:
                log.resolve_offset(t)
                log.read(t, 10_000)
        log.lookup_offsets([0, end], "floor")
        log.resolve_offsets([0, end // 2])
        for ts in (-2, -1, 0, 1_700_000_050_000):
            log.offset_for_timestamp(ts)
            log.lookup_timestamp(max(ts, 0), "floor")
        log.aborted_transactions(0, end)


def test_every_descriptor_into_the_log_dir_is_read_only():
    R.require()
    lm = LogManager([R.LOGS])
    exercise(lm)
    root = os.path.realpath(R.LOGS)
    seen = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(root):
            with open(f"/proc/self/fdinfo/{fd}") as f:
                flags = int(next(line for line in f if line.startswith("flags:")).split()[1], 8)
            assert flags & os.O_ACCMODE == os.O_RDONLY, target
            seen += 1
    # Maps keep descriptors too: every mapping into the log dir is read-only.
    with open("/proc/self/maps") as f:
        for line in f:
            if root in line:
                perms = line.split()[1]
                assert "w" not in perms, line
                seen += 1
    assert seen > 0
    lm.close()


def test_a_reader_without_write_permission_gets_every_answer(tmp_path):
    """Files 0444 in 0555 directories, and a process without any capabilities (so not even
    root may write there): every read path still answers."""
    R.require()
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is needed to drop capabilities")
    logs = tmp_path / "logs"
    shutil.copytree(R.LOGS, logs)
    for dirpath, _, filenames in os.walk(logs, topdown=False):
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), 0o444)
        os.chmod(dirpath, 0o555)
    here = os.path.dirname(__file__)
    script = (
        "import sys; sys.path.insert(0, sys.argv[2])\n"
        "from lookupd.log.logmanager import LogManager\n"
        "import test_readonly\n"
        "try:\n"
        "    open(sys.argv[1] + '/plain-0/00000000000000000000.index', 'r+b')\n"
        "    sys.exit('writing was not refused: the check would prove nothing')\n"
        "except PermissionError:\n"
        "    pass\n"
        "lm = LogManager([sys.argv[1]]); test_readonly.exercise(lm); print(len(lm.logs()))\n"
    )
    try:
        r = subprocess.run(["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--no-new-privs", "--",
                            sys.executable, "-c", script, str(logs), here], capture_output=True, text=True, timeout=300)
    finally:
        for dirpath, _, _ in os.walk(logs):
            os.chmod(dirpath, 0o755)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout.strip()) == len(R.PARTITIONS)
