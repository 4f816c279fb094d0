"""by-key/: every record with a given key, through a real mount, checked against the core's decoding."""

from __future__ import annotations

import base64
import errno
import json
import os
import subprocess

import pytest

from lookupd.format.batch import Compression
from lookupd.format.builder import build_batch
from lookupd.log.logmanager import LogManager
from lookupd.format.records import decode_batch
from lookupd.tools.writer import LogWriter
from test_fusefs_helpers import mounted

KEYS = [b"k0", b"k1", b"k2", b"\xff\xfe-not-utf8", b"a/b", "clé".encode()]


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    root = tmp_path_factory.mktemp("bykey")
    for p in (0, 1):
        w = LogWriter(str(root / f"k-{p}"), segment_bytes=4096, index_interval_bytes=256)
        offset = 0
        for b in range(60):
            recs = [(1_000 + offset + i, KEYS[(offset + i + p) % len(KEYS)] if (offset + i) % 7 else None,
                     b"v%d" % (offset + i), ()) for i in range(5)]
            codec = Compression.GZIP if b % 3 == 0 else Compression.NONE
            w.append(build_batch(recs, base_offset=offset, compression=codec))
            offset += 5
        w.close()
    return root


def core_lines(root, partition: int, key: bytes) -> list[dict]:
    lm = LogManager([str(root)])
    out = []
    for seg in lm.get("k", partition).segments():
        for h in seg.log.batches():
            for r in decode_batch(h, seg.log.read(h.position, h.size)):
                if r.key == key:
                    out.append(r.offset)
    lm.close()
    return out


def file_name(key: bytes) -> str:
    try:
        text = key.decode()
        if "/" not in text:
            return text + ".jsonl"
    except UnicodeDecodeError:
        pass
    return "base64:" + base64.urlsafe_b64encode(key).decode() + ".jsonl"


def test_records_by_key_per_partition_and_per_topic(logs):
    with mounted([logs]) as (mount, _):
        for key in KEYS:
            name = file_name(key)
            for p in (0, 1):
                with open(mount.path("k", str(p), "by-key", name)) as f:
                    lines = [json.loads(line) for line in f]
                assert [x["offset"] for x in lines] == core_lines(logs, p, key), (key, p)
                assert lines and all(x["key"] == lines[0]["key"] for x in lines)
            with open(mount.path("k", "by-key", name)) as f:
                topic = [json.loads(line)["offset"] for line in f]
            assert topic == core_lines(logs, 0, key) + core_lines(logs, 1, key)
        # the same JSON lines as .records.jsonl
        seg = sorted(n for n in os.listdir(mount.path("k", "0")) if n.endswith(".records.jsonl"))[0]
        with open(mount.path("k", "0", seg)) as f:
            records = [line for line in f if json.loads(line)["offset"] in core_lines(logs, 0, b"k1")]
        with open(mount.path("k", "0", "by-key", "k1.jsonl")) as f:
            assert f.readlines()[:len(records)] == records
        # head -1 answers from the first match
        first = subprocess.run(["head", "-1", mount.path("k", "by-key", "k2.jsonl")], capture_output=True,
                               timeout=30).stdout
        assert json.loads(first)["offset"] == core_lines(logs, 0, b"k2")[0]
        # a key no record has: an empty file; names that name no key, or no partition: ENOENT
        with open(mount.path("k", "0", "by-key", "nobody.jsonl"), "rb") as f:
            assert f.read() == b""
        for bad in (("k", "0", "by-key", "base64:***.jsonl"), ("k", "0", "by-key", "k1.txt"),
                    ("k", "7", "by-key", "k1.jsonl"), ("nosuch", "by-key", "k1.jsonl")):
            with pytest.raises(OSError) as err:
                open(mount.path(*bad))
            assert err.value.errno == errno.ENOENT, bad
        assert os.listdir(mount.path("k", "0", "by-key")) == []
        assert "by-key" in os.listdir(mount.path("k")) and "by-key" in os.listdir(mount.path("k", "0"))
