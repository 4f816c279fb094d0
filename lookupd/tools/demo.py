"""`lookupd demo-data DIR`: a sample broker log dir, written by the Kafka-compatible writer.

Topics (timestamps span one day from 2026-01-01T00:00:00Z, so time lookups have something
to find; everything is deterministic for a given seed):

- `orders` (3 partitions): JSON order events with keys and headers, every codec in turn.
- `payments` (1 partition): transactional producers, about a fifth of transactions aborted,
  so the partition has a `.txnindex` and control records.
- `clicks` (1 partition): LogAppendTime batches from an idempotent producer.

Segments roll at 64 KiB; the last segment of each partition is left as a running broker
leaves it (indexes preallocated, not trimmed).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import sys

from ..format.batch import Compression, TimestampType
from ..format.builder import build_batch, build_control_batch
from .writer import LogWriter

START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
DAY_MS = 86_400_000
SEGMENT_BYTES = 64 * 1024
CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
CURRENCIES = ["EUR", "USD", "GBP", "JPY", "CHF"]
CITIES = ["Lisbon", "Oslo", "Austin", "Osaka", "Nairobi", "Lima", "Perth", "Gdansk"]


def _timestamps(rng: random.Random, n: int) -> list[int]:
    """n non-decreasing timestamps over one day, with bursts (equal timestamps) and a few late ones."""
    out, t = [], START_MS
    step = DAY_MS / max(n, 1)
    for _ in range(n):
        t += int(rng.expovariate(1 / step)) if rng.random() > 0.2 else 0
        late = rng.random() < 0.01
        out.append(max(START_MS, t - rng.randrange(60_000)) if late else t)
    return out


def _order(rng: random.Random, i: int, ts: int) -> tuple[bytes, bytes, list]:
    customer = f"customer-{rng.randrange(500):04d}"
    value = {"order_id": f"o-{i:07d}", "customer": customer, "city": rng.choice(CITIES),
             "amount": round(rng.uniform(1, 500), 2), "currency": rng.choice(CURRENCIES),
             "items": rng.randrange(1, 8), "placed_at": ts}
    headers = [("source", b"web" if rng.random() < 0.7 else b"app")]
    if rng.random() < 0.1:
        headers.append(("trace", rng.randbytes(8)))
    return customer.encode(), json.dumps(value, separators=(",", ":")).encode(), headers


def write_orders(root: str, rng: random.Random, records: int, partitions: int = 3) -> None:
    for p in range(partitions):
        w = LogWriter(os.path.join(root, f"orders-{p}"), segment_bytes=SEGMENT_BYTES)
        n = records // partitions
        stamps = _timestamps(rng, n)
        offset, i, codec = 0, 0, 0
        while i < n:
            count = min(rng.randint(1, 40), n - i)
            recs = [(stamps[i + k], *_order(rng, p * n + i + k, stamps[i + k])) for k in range(count)]
            w.append(build_batch(recs, base_offset=offset, compression=CODECS[codec % len(CODECS)],
                                 partition_leader_epoch=1))
            offset += count
            i += count
            codec += 1
        w.close()


def write_payments(root: str, rng: random.Random, records: int) -> None:
    """Three transactional producers interleaving transactions; some abort."""
    w = LogWriter(os.path.join(root, "payments-0"), segment_bytes=SEGMENT_BYTES)
    producers = {3001 + k: {"epoch": k, "seq": 0, "open": False, "left": 0} for k in range(3)}
    stamps = _timestamps(rng, records)
    offset = i = 0
    while i < records:
        pid = rng.choice(list(producers))
        st = producers[pid]
        ts = stamps[min(i, records - 1)]
        if st["open"] and st["left"] <= 0:
            commit = rng.random() >= 0.2
            w.append(build_control_batch(offset, ts, producer_id=pid, producer_epoch=st["epoch"], commit=commit,
                                         coordinator_epoch=7, partition_leader_epoch=1))
            offset += 1
            st["open"] = False
            continue
        if not st["open"]:
            st["open"], st["left"] = True, rng.randint(2, 6)
        count = min(rng.randint(1, 10), records - i)
        recs = [(stamps[i + k], f"account-{rng.randrange(50):03d}".encode(),
                 json.dumps({"payment": i + k, "cents": rng.randrange(100, 100_000)}).encode(), [])
                for k in range(count)]
        w.append(build_batch(recs, base_offset=offset, producer_id=pid, producer_epoch=st["epoch"],
                             base_sequence=st["seq"], transactional=True, partition_leader_epoch=1,
                             compression=Compression.GZIP if rng.random() < 0.25 else Compression.NONE))
        st["seq"] += count
        st["left"] -= 1
        offset += count
        i += count
    for pid, st in producers.items():  # close what is still open
        if st["open"]:
            w.append(build_control_batch(offset, stamps[-1], producer_id=pid, producer_epoch=st["epoch"], commit=True,
                                         coordinator_epoch=7, partition_leader_epoch=1))
            offset += 1
    w.close()


def write_clicks(root: str, rng: random.Random, records: int) -> None:
    """LogAppendTime batches: every record reports its batch's append time."""
    w = LogWriter(os.path.join(root, "clicks-0"), segment_bytes=SEGMENT_BYTES)
    stamps = _timestamps(rng, records)
    offset = seq = i = 0
    while i < records:
        count = min(rng.randint(5, 60), records - i)
        recs = [(stamps[i], None, f"/page/{rng.randrange(200)}?ref={rng.choice(CITIES).lower()}".encode(), [])
                for _ in range(count)]
        w.append(build_batch(recs, base_offset=offset, timestamp_type=TimestampType.LOG_APPEND_TIME,
                             max_timestamp=stamps[min(i + count, records) - 1] + 5, producer_id=4001,
                             producer_epoch=0, base_sequence=seq, compression=Compression.LZ4,
                             partition_leader_epoch=2))
        offset += count
        seq += count
        i += count
    w.close()


def generate(root: str, records: int = 20_000, seed: int = 1) -> None:
    if os.path.exists(root) and os.listdir(root):
        raise FileExistsError(17, "refusing to write into a non-empty directory", root)
    os.makedirs(root, exist_ok=True)
    rng = random.Random(seed)
    write_orders(root, rng, records)
    write_payments(root, rng, max(records // 4, 10))
    write_clicks(root, rng, max(records // 2, 10))


def write_sample(root: str, records: int = 20_000, seed: int = 1) -> None:
    """generate(), then a line per partition saying what is in it."""
    generate(root, records, seed)
    from ..log.logmanager import LogManager

    lm = LogManager([root])
    for log in lm.logs():
        info = log.info()
        print(f"{info['topic']}-{info['partition']}: {info['segments']} segments, "
              f"offsets [{info['log_start_offset']}, {info['log_end_offset']})")
    lm.close()


def shown(path: str) -> str:
    """A path as a printed command gives it: relative when under the working directory (.venv/bin/lookupd)."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def command_prefix(name: str) -> str:
    """How to run this installation's `lookupd` or `fusefs` from the working directory, for printed commands:
    the script beside this Python (a virtualenv's bin), else `python -m`."""
    script = os.path.join(os.path.dirname(sys.executable), name)
    return shown(script) if os.path.exists(script) else f"{shown(sys.executable)} -m {name}"


def free_port() -> int:
    """A TCP port on 127.0.0.1 free now (for a demo's daemon: it may be taken by the time it binds, rarely)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(config: str) -> int:
    """`lookupd serve --config FILE` in this process, until Ctrl-C or SIGTERM."""
    from ..daemon.main import run as serve_daemon

    return serve_daemon(argparse.Namespace(config=config, log_dirs=None, socket=None, tcp=None, workers=None,
                                           verbose=0))
