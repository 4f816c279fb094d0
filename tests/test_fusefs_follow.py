"""`tail -f` on the mount's generated views: it follows records appended to the partition, and never
sees a view's size shrink ("file truncated"). Real mount, real GNU tail, bounded in time."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from test_fusefs import stem
from test_fusefs_helpers import mounted
from test_fusefs_live import Producer, record_fields

FOLLOW_S = 20.0  # tail polls once a second; the mount's listings refresh within --ttl


def offsets_in(path: str) -> list[int]:
    """The offsets of the complete lines tail has written so far (the last one may be half-written)."""
    with open(path) as f:
        complete = f.read().split("\n")[:-1]
    return [json.loads(line)["offset"] for line in complete if line.strip()]


def wait_for_offsets(out: str, want: list[int], tail: subprocess.Popen) -> list[int]:
    deadline = time.monotonic() + FOLLOW_S
    while time.monotonic() < deadline:
        got = offsets_in(out)
        if len(got) >= len(want) or tail.poll() is not None:
            return got
        time.sleep(0.2)
    return offsets_in(out)


@pytest.mark.parametrize("view", ["records", "at-offset"])
def test_tail_f_follows_a_generated_view(tmp_path, view):
    part = tmp_path / "logs" / "events-0"
    prod = Producer(str(part), segment_bytes=1 << 20)
    prod.batches(10)
    with mounted([tmp_path / "logs"], "--ttl", "0.2") as (mnt, _):
        name = stem(0) + ".records.jsonl" if view == "records" else os.path.join("at-offset", "7.jsonl")
        path = mnt.path("events", "0", name)
        out, err = str(tmp_path / "tail.out"), str(tmp_path / "tail.err")
        with open(out, "w") as o, open(err, "w") as e:
            tail = subprocess.Popen(["tail", "-n", "+1", "-f", path], stdout=o, stderr=e)
        try:
            first = [r["offset"] for r in prod.records if view == "records" or r["offset"] >= 7]
            assert wait_for_offsets(out, first, tail) == first
            os.listdir(os.path.dirname(path))  # a listing (READDIRPLUS) gives the size getattr gives
            assert os.stat(path).st_size >= os.path.getsize(out)
            for _ in range(3):  # appended in steps, each seen before the next
                prod.batches(4)
                want = [r["offset"] for r in prod.records if view == "records" or r["offset"] >= 7]
                assert wait_for_offsets(out, want, tail) == want
            assert tail.poll() is None
        finally:
            tail.send_signal(signal.SIGTERM)
            tail.wait(10)
            prod.writer.close()
        with open(err) as f:
            assert "truncated" not in f.read()
        with open(out) as f:
            lines = [json.loads(line) for line in f.read().splitlines()]
        want = [record_fields(r) for r in prod.records if view == "records" or r["offset"] >= 7]
        assert [record_fields(r) for r in lines] == want
