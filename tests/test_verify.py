"""`lookupd verify` (issue 44): the healthy corpus has no problem; every damage the suite makes
(tests/test_recover_verify.py's kinds) is found, with one line a problem and the summary; and `recover`
followed by `verify` passes on every damaged file: what is left is only the `.log` problems recover
reported and left alone (it never writes a `.log`)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout

import pytest

import reference as R
import test_recover_verify as damaged  # its DAMAGE kinds and helpers (the module, so its test is not collected twice)
from lookupd.log.locallog import list_segments
from lookupd.tools.cli import main


def lookupd(*argv) -> tuple[int, str]:
    """`lookupd ARGV...` in this process (a subprocess per call would double the test's time)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main([str(a) for a in argv])
    assert "Traceback" not in err.getvalue(), err.getvalue()
    return rc, out.getvalue()


def _summary(segments: int, problems: int) -> str:
    return f"{segments} segment{'s' if segments != 1 else ''}, {problems} problem{'s' if problems != 1 else ''}"


def test_the_healthy_corpus_has_no_problem():
    segments = sum(len(list_segments(str(R.log_dir(p)))) for p in R.PARTITIONS)
    r = subprocess.run([sys.executable, "-m", "lookupd", "verify", str(R.LOGS)], capture_output=True, text=True,
                       timeout=300)
    assert (r.returncode, r.stdout, r.stderr) == (0, _summary(segments, 0) + "\n", "")
    rc, out = lookupd("verify", "--json", R.log_dir("txn-0"), R.log_dir("plain-0") / "00000000000000000231.index")
    assert (rc, [json.loads(line) for line in out.splitlines()]) == \
        (0, [{"type": "summary", "segments": len(list_segments(str(R.log_dir("txn-0")))) + 1, "problems": 0}])


@pytest.mark.parametrize("kind", list(damaged.DAMAGE))
def test_recover_then_verify_passes_on_every_damaged_file(tmp_path, kind):
    R.require()
    name, damage, _ = damaged.DAMAGE[kind]
    part = damaged._copy(tmp_path, name)
    damage(part)
    rc, out = lookupd("verify", part)
    lines = out.splitlines()
    assert rc == 1 and len(lines) > 1, f"verify found nothing wrong after: {kind}"
    assert lines[-1] == _summary(len(list_segments(str(part))), len(lines) - 1)
    rc, out = lookupd("verify", "--json", part)
    objects = [json.loads(line) for line in out.splitlines()]
    assert [o["message"] for o in objects[:-1]] == lines[:-1]
    assert all(o["type"] == "problem" and o["file"].startswith(str(part)) for o in objects[:-1])

    rc_recover, log_problems, _ = damaged._recover(part)
    rc_after, out = lookupd("verify", part)
    assert rc_after == rc_recover == (1 if log_problems else 0)
    assert sorted(out.splitlines()[:-1]) == log_problems  # nothing but the .log's problems recover left


def test_a_segment_named_alone_is_judged_by_itself(tmp_path):
    part = damaged._copy(tmp_path, "plain-0")
    stem = damaged._stem(part)
    os.remove(stem + ".timeindex")
    rc, out = lookupd("verify", stem + ".log", stem + ".index")  # one segment, named twice
    assert (rc, out) == (1, f"{stem}.timeindex is missing\n" + _summary(1, 1) + "\n")
