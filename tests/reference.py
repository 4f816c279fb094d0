"""The Kafka reference corpus: partitions written by Apache Kafka and the answers its code gave.

The corpus ships in the repository as tests/data/kafka-reference.tar.zst and is unpacked into
tests/data/kafka-reference/ (ignored by git) by `make test`, or when this module is first imported,
so a clone alone runs every conformance check. KAFKA_REFERENCE points the tests at another copy
(they skip, saying where they looked, when it is missing).

    python tests/reference.py            # unpack the archive (what `make test` runs)

The coordinator-topic corpus (`__consumer_offsets`, `__transaction_state`, `__cluster_metadata` and
`__remote_log_metadata` partitions with what Kafka's serdes and coordinators made of them) ships the
same way, as tests/data/kafka-coordinator.tar.zst unpacked into tests/data/kafka-coordinator/
(COORDINATOR; see its README.md).

Each archive was made from its corpus directory, deterministically, with
`tar --sort=name --owner=0 --group=0 --numeric-owner --mtime='2026-01-01 00:00Z' --format=gnu -cf - <dir>`
compressed by zstandard at level 19.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent / "data"
ARCHIVE = DATA / "kafka-reference.tar.zst"
UNPACKED = DATA / "kafka-reference"
STAMP = ".archive-sha256"  # in UNPACKED: the archive it came from, so a changed archive is unpacked again
ROOT = Path(os.environ["KAFKA_REFERENCE"]) if os.environ.get("KAFKA_REFERENCE") else UNPACKED
LOGS = ROOT / "logs"
ANSWERS = ROOT / "answers"
COORDINATOR_ARCHIVE = DATA / "kafka-coordinator.tar.zst"
COORDINATOR = DATA / "kafka-coordinator"


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def unpack(archive: Path = ARCHIVE, dest: Path = UNPACKED) -> Path:
    """Unpack the archive into `dest` unless that already holds this archive's contents.

    The archive holds one directory named as the archive (without `.tar.zst`). Unpacked beside `dest`
    and renamed into place, so a test process and a benchmark starting at once never see half a corpus."""
    import zstandard  # a runtime dependency (zstd batches); no zstd program needed

    digest = _digest(archive)
    stamp = dest / STAMP
    if stamp.exists() and stamp.read_text() == digest:
        return dest
    top = archive.name.removesuffix(".tar.zst")
    tmp = Path(tempfile.mkdtemp(prefix=f".{top}-", dir=dest.parent))
    try:
        with open(archive, "rb") as f, zstandard.ZstdDecompressor().stream_reader(f) as stream:
            with tarfile.open(fileobj=stream, mode="r|") as tar:
                tar.extractall(tmp, filter="data")
        (tmp / top / STAMP).write_text(digest)
        old = None
        if dest.exists():
            old = dest.parent / f"{tmp.name}-old"
            os.rename(dest, old)
        try:
            os.rename(tmp / top, dest)
        except OSError:
            if not (dest / STAMP).exists():  # not another process's unpacking that won the race
                raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def require() -> Path:
    """The corpus; skips the calling test when KAFKA_REFERENCE names a directory without it."""
    if not LOGS.is_dir():
        pytest.skip(f"Kafka reference corpus not found at {ROOT} (KAFKA_REFERENCE; unset it to use the repository's copy)")
    return ROOT


PARTITIONS = ["plain-0", "compressed-0", "ooo-time-0", "txn-0", "bigbase-0", "large-0", "logappend-0", "empty-0", "closed-0"]




@functools.lru_cache(maxsize=None)
def answers(partition: str) -> dict:
    """The parsed answers/<partition>.json (cached: some are 20 MB)."""
    require()
    with open(ANSWERS / f"{partition}.json") as f:
        return json.load(f)


def log_dir(partition: str) -> Path:
    require()
    return LOGS / partition


@functools.lru_cache(maxsize=None)
def batches(partition: str) -> list[dict]:
    """Reference batch list as dicts, expanding large-0's compact parallel-array form (cached: do not mutate)."""
    b = answers(partition)["batches"]
    if isinstance(b, list):
        return b
    # large-0: parallel arrays of single-record, uncompressed CreateTime batches.
    segs = [int(s) for s, n in b["batches_per_segment_in_order"].items() for _ in range(n)]
    sizes = {int(s["base_offset"]): s["log_size"] for s in answers(partition)["segments"]}
    out = []
    for i, (seg, base, pos, ts) in enumerate(zip(segs, b["base_offset"], b["position"], b["max_timestamp"])):
        last_in_segment = i + 1 == len(segs) or segs[i + 1] != seg
        end = sizes[seg] if last_in_segment else b["position"][i + 1]
        out.append({"segment": seg, "base_offset": base, "last_offset": base, "position": pos,
                    "size_in_bytes": end - pos, "max_timestamp": ts, "record_count": 1, "magic": 2,
                    "compression": "none", "timestamp_type": "CreateTime"})
    return out


@functools.lru_cache(maxsize=None)
def coordinator_answers(partition: str) -> dict:
    """The parsed answers of the coordinator corpus (`__consumer_offsets-7`, ...), cached: do not mutate."""
    with open(COORDINATOR / "answers" / f"{partition}.json") as f:
        return json.load(f)


def coordinator_log(partition: str) -> Path:
    """A partition directory of the coordinator corpus."""
    return COORDINATOR / "logs" / partition


if ROOT == UNPACKED:  # on import, so every use of LOGS finds the files (about a second the first time)
    unpack()
unpack(COORDINATOR_ARCHIVE, COORDINATOR)

if __name__ == "__main__":
    print(f"Kafka reference corpus in {os.path.relpath(unpack())}")
    print(f"Kafka coordinator-topic corpus in {os.path.relpath(unpack(COORDINATOR_ARCHIVE, COORDINATOR))}")
    sys.exit(0)
