"""Access to ../shared/kafka-reference: partitions written by Apache Kafka and the answers its code gave.

Tests import this module; when the corpus is missing they skip with a message saying where
it was looked for (set KAFKA_REFERENCE to point elsewhere).
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import pytest

ROOT = Path(os.environ.get("KAFKA_REFERENCE", Path(__file__).resolve().parents[1].parent / "shared" / "kafka-reference"))
LOGS = ROOT / "logs"
ANSWERS = ROOT / "answers"

PARTITIONS = ["plain-0", "compressed-0", "ooo-time-0", "txn-0", "bigbase-0", "large-0", "logappend-0", "empty-0", "closed-0"]


def require() -> Path:
    """Skip the calling test unless the reference corpus is present."""
    if not LOGS.is_dir():
        pytest.skip(f"Kafka reference corpus not found at {ROOT} (set KAFKA_REFERENCE)")
    return ROOT


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
