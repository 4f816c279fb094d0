"""bench/fuzz/fuzz_offsets.py, the `__consumer_offsets` replay's differential fuzzer, run for a few seconds
against the installed extension: it starts, reaches the C commit scan, and finds the two paths agreeing."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.native

FUZZER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench", "fuzz", "fuzz_offsets.py")


def test_the_offsets_fuzzer_runs_clean_for_a_few_seconds(tmp_path):
    done = subprocess.run([sys.executable, FUZZER, "--seconds", "3", "--seed", "1", "--hang", "60"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    found = re.search(r"(\d+) inputs in .*; (\d+) with faults named alike by both; (\d+) calls of the C scan took",
                      done.stdout)
    assert found, done.stdout
    inputs, faulted, taken = map(int, found.groups())
    assert inputs > 100 and 0 < faulted < inputs and taken > 0
    assert not list(tmp_path.glob("crash-*"))
