"""The FUSE view as a newcomer types it: navigation names on a real mount (`.jsonl` left off, the time grammar
`lookupd query` shares: earliest, latest, max, times before now), and `fusefs COMMAND -v`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import reference as R
from lookupd import Client
from test_fusefs_helpers import mounted


@pytest.fixture(scope="module")
def mount_and_daemon():
    with mounted([R.log_dir("plain-0").parent]) as (mount, daemon):
        yield mount, daemon


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def offsets(path: str) -> list[int]:
    return [json.loads(line)["offset"] for line in read(path).splitlines()]


def test_navigation_names_without_jsonl(mount_and_daemon):
    mount, _ = mount_and_daemon
    middle = R.batches("plain-0")[len(R.batches("plain-0")) // 2]["base_offset"] + 1
    nav = mount.path("plain", "0", "at-offset")
    assert read(f"{nav}/{middle}") == read(f"{nav}/{middle}.jsonl") != b""
    assert offsets(f"{nav}/{middle}-{middle + 5}") == list(range(middle, middle + 5))
    stamp = R.batches("plain-0")[3]["max_timestamp"]
    at_time = mount.path("plain", "0", "at-time")
    assert read(f"{at_time}/{stamp}") == read(f"{at_time}/{stamp}.jsonl") != b""


def test_time_words_in_at_time_names(mount_and_daemon):
    mount, daemon = mount_and_daemon
    at_time = mount.path("plain", "0", "at-time")
    with Client(daemon.sock) as c:
        start = c.offset_for_timestamp("plain", 0, -2)["offset"]
        newest = c.offset_for_timestamp("plain", 0, -3)["offset"]
    assert read(f"{at_time}/earliest.jsonl") == read(mount.path("plain", "0", "at-offset", f"{start}.jsonl"))
    assert read(f"{at_time}/latest.jsonl") == b""  # the log end: nothing after it yet
    assert offsets(f"{at_time}/max.jsonl")[0] == newest
    assert read(f"{at_time}/-1h--now.jsonl") == b""  # the corpus was written long before the last hour
    assert offsets(f"{at_time}/earliest--max.jsonl") == offsets(
        mount.path("plain", "0", "at-offset", f"{start}-{newest}.jsonl"))


def test_verbose_after_the_subcommand(tmp_path):
    r = subprocess.run([sys.executable, "-m", "fusefs", "umount", str(tmp_path), "-v"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1 and r.stderr.strip() == f"fusefs umount: {tmp_path} is not a mount point", r.stderr
