"""A broker writes underneath a busy daemon: appends, rolls, retention deletes, a truncated index,
while hundreds of lookups are in flight and bad clients come and go. Every answer must be
right (checked against Kafka's reference files, which the writer reproduces byte for byte),
every error one a client can act on, and the daemon must stay up."""

from __future__ import annotations

import os
import random
import time

import msgpack
import pytest
import trio

import reference as R
from daemon_helpers import RawPeer, retention_delete, running, short_dir  # noqa: F401 - fixture
from lookupd.rpc.client import RemoteError, TrioClient

P = "plain-0"
ALLOWED_ERRORS = {"OFFSET_OUT_OF_RANGE", "UNAVAILABLE", "CORRUPT_DATA"}


def writer_module():
    return pytest.importorskip("lookupd.tools.writer", reason="lookupd/writer.py (the segment writer) is not in the tree")


def reference_truth():
    """Batches by last offset, and every (segment, offset, position) index point of the partition."""
    batches = R.batches(P)
    points = set()
    for s in R.answers(P)["segments"]:
        base = s["base_offset"]
        points.add((base, base, 0))
        d = R.answers(P)["offset_index"][str(base)]
        rows = d["live_entries"] if "entries_truncated_in_dump" in d else d["entries"]
        points.update((base, o, p) for o, p in rows)
    return batches, points


def batch_bytes(b) -> bytes:
    with open(R.log_dir(P) / f"{b['segment']:020d}.log", "rb") as f:
        f.seek(b["position"])
        return f.read(b["size_in_bytes"])


def broker(part_dir: str, batches: list, stop_after: trio.Event | None = None) -> dict:
    """Replay the partition as a broker would, with retention deleting the oldest segments and an
    index truncated once; returns what it did."""
    w = writer_module()
    cfg = R.answers(P)["config"]
    writer = w.LogWriter(part_dir, segment_bytes=cfg["segment.bytes (roll threshold via LogSegment.shouldRoll)"],
                         index_interval_bytes=cfg["index.interval.bytes (indexIntervalBytes)"],
                         max_index_size=cfg["segment.index.bytes (maxIndexSize)"])
    deleted, truncated = [], None
    for i, b in enumerate(batches):
        writer.append(batch_bytes(b))
        bases = sorted(int(n[:20]) for n in os.listdir(part_dir) if n.endswith(".log"))
        if len(bases) > 8:  # retention: the broker renames to .deleted, then removes
            retention_delete(part_dir, bases[0])
            deleted.append(bases[0])
        if truncated is None and len(bases) > 4:  # a rolled segment's index loses its tail
            truncated = bases[-3]
            path = os.path.join(part_dir, f"{truncated:020d}.index")
            os.truncate(path, max(0, os.path.getsize(path) // 2 - 3))
        time.sleep(0.004)
    writer.close()
    return {"deleted": deleted, "truncated": truncated}


@pytest.mark.trio
async def test_broker_writes_under_load(short_dir):
    writer_module()
    R.require()
    batches, points = reference_truth()
    last_offsets = [b["last_offset"] for b in batches]
    log_end = batches[-1]["last_offset"] + 1
    logs = os.path.join(short_dir, "logs")
    part_dir = os.path.join(logs, P)
    os.makedirs(part_dir)
    sock = os.path.join(short_dir, "d.sock")
    answers = {"resolve": 0, "lookup": 0}
    errors: dict[str, int] = {}
    wrong: list = []
    done = trio.Event()

    def check_resolve(target, got):
        import bisect
        b = batches[bisect.bisect_left(last_offsets, target)]
        want = {"segment": b["segment"], "base_offset": b["base_offset"], "last_offset": b["last_offset"],
                "position": b["position"], "size": b["size_in_bytes"]}
        if got != want:
            wrong.append(("resolve_offset", target, got, want))

    async def lookups(client: TrioClient, seed: int):
        rnd = random.Random(seed)
        while not done.is_set():
            target = rnd.randrange(0, log_end + 50)
            try:
                if rnd.random() < 0.5:
                    got = await client.resolve_offset("plain", 0, target)
                    if got is not None:
                        check_resolve(target, got)
                    answers["resolve"] += 1
                else:
                    got = await client.lookup_offset("plain", 0, target, "floor")
                    if got is not None and ((got["segment"], got["offset"], got["position"]) not in points
                                            or got["offset"] > target):
                        wrong.append(("lookup_offset", target, got))
                    answers["lookup"] += 1
            except RemoteError as err:
                errors[err.code] = errors.get(err.code, 0) + 1
                if err.code not in ALLOWED_ERRORS and not (err.code == "UNKNOWN_PARTITION" and not os.listdir(part_dir)):
                    wrong.append(("error", target, str(err)))

    async def bad_clients():
        while not done.is_set():
            g = await RawPeer.unix(sock)
            await g.send_bytes(b"\x94\x00\x01\xc1")  # malformed
            await g.aclose()
            s = await RawPeer.unix(sock)
            await s.send_bytes(msgpack.packb([0, 1, "resolve_offset", ["plain", 0, 5]])[:5])  # stalls mid-frame
            v = await RawPeer.unix(sock)
            await v.request("resolve_offset", "plain", 0, 1000)
            await v.aclose()  # gone mid-request
            await trio.sleep(0.02)
            await s.aclose()

    async with running(sock, log_dirs=[logs], rescan_interval_s=0.05) as d:
        clients = [await TrioClient.connect(sock) for _ in range(4)]
        async with trio.open_nursery() as n:
            for i in range(200):  # 200 lookups in flight at any moment, 50 per connection
                n.start_soon(lookups, clients[i % 4], i)
            n.start_soon(bad_clients)
            did = await trio.to_thread.run_sync(broker, part_dir, batches)
            done.set()
        # After the broker stops and a rescan: everything retained answers, and answers right.
        await trio.sleep(0.3)
        c = clients[0]
        info = (await c.partitions())[0]
        assert info["log_end_offset"] == log_end
        retained_start = info["log_start_offset"]
        assert retained_start == min(int(n[:20]) for n in os.listdir(part_dir) if n.endswith(".log"))
        for b in batches:
            if b["base_offset"] >= retained_start:
                check_resolve(b["base_offset"], await c.resolve_offset("plain", 0, b["base_offset"]))
        with pytest.raises(RemoteError, match="OFFSET_OUT_OF_RANGE"):
            await c.resolve_offset("plain", 0, retained_start - 1)
        assert await c.ping() == "pong"
        for cl in clients:
            await cl.aclose()
    assert not wrong, wrong[:5]
    assert did["deleted"] and did["truncated"] is not None
    assert answers["resolve"] > 100 and answers["lookup"] > 100, answers
    assert d.counters.connections == 0
